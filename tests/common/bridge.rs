//! `mcphost bridge` on piped stdio, driven line by line: raw JSON-RPC to its
//! stdin, every line of its stdout kept. (A host that only needs the socket's
//! lines through a bridge uses `wire::Wire::bridge`.)

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::lenient_json;

/// One answer.
pub const WAIT: Duration = Duration::from_secs(30);

pub struct Bridge {
    pub child: Child,
    /// `None` once closed.
    pub stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every line it wrote to stdout so far.
    pub seen: Vec<String>,
}

impl Bridge {
    /// `cmd bridge`.
    pub fn start(cmd: Command) -> Bridge {
        Bridge::start_with(cmd, &[])
    }

    /// `cmd bridge ARGS`.
    pub fn start_with(mut cmd: Command, args: &[&str]) -> Bridge {
        let mut child = cmd
            .arg("bridge")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Bridge {
            child,
            stdin: Some(stdin),
            lines,
            seen: Vec::new(),
        }
    }

    pub fn send(&mut self, msg: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is closed");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message that `wanted` accepts; the others on the way
    /// (notifications, answers to other requests) are skipped, kept in
    /// `seen`. Within `WAIT`, else the test fails with what came and the
    /// bridge's stderr.
    pub fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + WAIT;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("no {what} within {WAIT:?}; skipped {skipped:#?}; stderr {err}");
            };
            self.seen.push(line.clone());
            let msg = lenient_json(&line);
            if wanted(&msg) {
                return msg;
            }
            skipped.push(line);
        }
    }

    /// The whole answer to request `id`.
    pub fn request(&mut self, id: u64, method: &str, params: &str) -> Value {
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        ));
        self.until(&format!("the answer to {method} (id {id})"), |m| {
            m["id"] == id && m.get("method").is_none()
        })
    }

    /// The `result` of request `id`, which must succeed.
    pub fn result(&mut self, id: u64, method: &str, params: &str) -> Value {
        let reply = self.request(id, method, params);
        assert!(reply.get("result").is_some(), "{method}: {reply}");
        reply["result"].clone()
    }

    /// The handshake (id 1).
    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            1,
            "initialize",
            r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}"#,
        );
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        r
    }

    /// Lists tools (ids from 10) until `name` is among them.
    pub fn tools_until(&mut self, name: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        for id in 10.. {
            let r = self.request(id, "tools/list", "{}");
            let tools = &r["result"]["tools"];
            if tools
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["name"] == name))
            {
                return r;
            }
            assert!(Instant::now() < deadline, "{name} never listed: {r}");
            std::thread::sleep(Duration::from_millis(50));
        }
        unreachable!()
    }

    /// Closes stdin and waits for the exit: its status and how long that
    /// took.
    pub fn close_and_wait(&mut self) -> (ExitStatus, Duration) {
        let closed = Instant::now();
        self.stdin = None;
        let status = self.child.wait().unwrap();
        (status, closed.elapsed())
    }

    /// Closes stdin and waits for the exit: its status and stderr; what it
    /// wrote meanwhile is added to `seen`.
    pub fn finish(&mut self) -> (ExitStatus, String) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        self.seen.extend(self.lines.try_iter());
        (status, err)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
