//! One client's line-delimited JSON-RPC, written by hand: over the daemon's
//! socket or through `mcphost bridge`. Shared by the tests that play raw
//! hosts (`common::wire`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{Daemon, lenient_json};

/// One answer.
pub const WAIT: Duration = Duration::from_secs(30);

/// One client's line-delimited JSON-RPC: the daemon's socket, or a bridge.
pub struct Wire {
    out: Box<dyn Write + Send>,
    pub lines: mpsc::Receiver<String>,
    /// Messages read while waiting for something else.
    pub held: Vec<String>,
    /// Requests sent and not yet answered: an answer to any other id is
    /// a failure, not something to hold or drop.
    outstanding: Vec<Value>,
    pub next_id: i64,
    child: Option<Child>,
    /// The socket, to hang up (the reader thread holds a clone).
    socket: Option<UnixStream>,
}

impl Wire {
    pub fn reader(input: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(input).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    }

    pub fn connect(d: &Daemon) -> Wire {
        let s = UnixStream::connect(&d.socket).unwrap();
        let lines = Wire::reader(s.try_clone().unwrap());
        Wire {
            out: Box::new(s.try_clone().unwrap()),
            lines,
            held: Vec::new(),
            outstanding: Vec::new(),
            next_id: 100,
            child: None,
            socket: Some(s),
        }
    }

    /// `mcphost bridge` to the daemon: the same lines over its stdio.
    pub fn bridge(d: &Daemon) -> Wire {
        let mut child = d
            .command()
            .arg("bridge")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Wire::reader(child.stdout.take().unwrap());
        Wire {
            out: Box::new(child.stdin.take().unwrap()),
            lines,
            held: Vec::new(),
            outstanding: Vec::new(),
            next_id: 100,
            child: Some(child),
            socket: None,
        }
    }

    /// Notes the requests among `lines` as waiting for an answer.
    fn track(&mut self, msg: &Value) {
        if msg.get("method").is_some() && msg.get("id").is_some() {
            self.outstanding.push(msg["id"].clone());
        }
    }

    /// `text` as it is, in one write (several lines at once, say).
    pub fn send_raw(&mut self, text: &str) {
        for line in text.lines() {
            if let Ok(msg) = serde_json::from_str::<Value>(line) {
                self.track(&msg);
            }
        }
        self.out.write_all(text.as_bytes()).unwrap();
        self.out.flush().unwrap();
    }

    pub fn send(&mut self, msg: &Value) {
        self.track(msg);
        writeln!(self.out, "{msg}").unwrap();
        self.out.flush().unwrap();
    }

    pub fn next_line(&mut self, what: &str) -> String {
        self.lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("nothing within {WAIT:?} while waiting for {what}"))
    }

    /// The next message (held ones first) that `wanted` accepts, raw.
    pub fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> String {
        if let Some(i) = self.held.iter().position(|l| wanted(&lenient_json(l))) {
            return self.held.remove(i);
        }
        let deadline = Instant::now() + WAIT;
        loop {
            assert!(
                Instant::now() < deadline,
                "no {what} within {WAIT:?}; held {:?}",
                self.held
            );
            let line = self.next_line(what);
            if wanted(&lenient_json(&line)) {
                return line;
            }
            self.held.push(line);
        }
    }

    pub fn start(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The answer to request `id`, raw. Notifications, server requests and
    /// answers to this client's other outstanding requests on the way are
    /// held (`until`, `notification`); an answer to an id no request of
    /// this client is waiting for fails the test.
    pub fn answer_raw(&mut self, id: i64) -> String {
        let outstanding = self.outstanding.clone();
        let line = self.until(&format!("the answer to {id}"), |m| {
            if m.get("method").is_some() {
                return false;
            }
            assert!(
                outstanding.contains(&m["id"]),
                "an answer to a request nobody sent or already answered, waiting for {id}: {m}"
            );
            m["id"] == id
        });
        self.outstanding.retain(|o| *o != id);
        line
    }

    pub fn answer(&mut self, id: i64) -> Value {
        lenient_json(&self.answer_raw(id))
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.start(method, params);
        self.answer(id)
    }

    /// A request's `result` text exactly as it came.
    pub fn result_text(&mut self, method: &str, params: Value) -> String {
        let id = self.start(method, params);
        let line = self.answer_raw(id);
        #[derive(serde::Deserialize)]
        struct R<'a> {
            #[serde(borrow)]
            result: &'a RawValue,
        }
        let r: R<'_> = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        r.result.get().to_owned()
    }

    pub fn initialize(&mut self, caps: Value) -> Value {
        self.initialize_at("2025-11-25", caps)
    }

    /// The handshake, asking for revision `version`.
    pub fn initialize_at(&mut self, version: &str, caps: Value) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": caps,
                   "clientInfo": {"name": "tests/wire", "version": "0"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r
    }

    /// The next notification `method` that `pick` accepts (held ones first).
    pub fn notification(&mut self, method: &str, pick: impl Fn(&Value) -> bool) -> Value {
        lenient_json(&self.until(&format!("a {method} notification"), |m| {
            m["method"] == method && m.get("id").is_none() && pick(m)
        }))
    }

    /// Nothing but what `ignore` accepts arrives within `quiet`.
    pub fn nothing_else(&mut self, quiet: Duration, ignore: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + quiet;
        let held: Vec<String> = self.held.drain(..).collect();
        for l in held {
            assert!(ignore(&lenient_json(&l)), "unexpected {l}");
        }
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => assert!(ignore(&lenient_json(&l)), "unexpected {l}"),
                Err(_) => return,
            }
        }
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        if let Some(s) = &self.socket {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
