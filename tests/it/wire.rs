//! The wire level through real processes: what a server prints on stdout
//! that is not JSON-RPC, and ids the way servers send them.

use crate::common;

use std::time::Duration;

use common::*;
use mcphost::client::CallOptions;

#[tokio::test]
async fn stray_json_log_line_does_not_fail_request_0() {
    // Before every response the server prints `{"id":N,"level":"info",...}`
    // with that response's id, so the first one arrives while our
    // `initialize` (request 0) waits.
    let c = connect("chatty", &["--json-logs"]).await;
    lists_and_echoes(&c, "--json-logs").await;
    c.shutdown().await;
}

#[test]
fn stray_json_log_lines_are_logged_once_with_the_server_name_then_counted() {
    let config = format!(
        r#"{{ "loginShellPath": false, "mcpServers": {{ "chatty": {{ "command": {}, "args": ["--json-logs"] }} }} }}"#,
        js(TESTSERVER)
    );
    let d = Daemon::start(&config);
    d.wait_ready(&["chatty"], Duration::from_secs(30));
    for i in 0..5 {
        let text = format!(r#"{{"text":"call {i}"}}"#);
        let r = d.run(&["call", "chatty__echo", &text]);
        assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains(&format!("call {i}")), "{}", r.stdout);
    }
    let log = d.log_text();
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("not JSON-RPC")).collect();
    // initialize, the listings and five calls each brought one such line.
    assert_eq!(warned.len(), 1, "{log}");
    assert!(
        warned[0].contains("WARN") && warned[0].contains("chatty"),
        "{}",
        warned[0]
    );
    assert!(warned[0].contains(r#""level":"info""#), "{}", warned[0]);
}

#[tokio::test]
async fn a_large_duration_in_call_options_does_not_panic_the_caller() {
    let c = std::sync::Arc::new(connect("patient", &[]).await);
    let c2 = c.clone();
    let call = tokio::spawn(async move {
        c2.call_tool(
            "echo",
            Some(raw(r#"{"text":"whenever"}"#)),
            CallOptions {
                timeout: Some(Duration::MAX),
                ..CallOptions::default()
            },
        )
        .await
    });
    let r = call.await.expect("call_tool panicked").unwrap();
    assert!(r.raw.get().contains("whenever"), "{}", r.raw.get());
    c.shutdown().await;
}

#[test]
fn absurd_durations_in_the_config_are_refused_with_file_line_and_field() {
    let text = "{\n  \"mcpServers\": {\n    \"x\": {\n      \"command\": \"a\",\n      \"timeouts\": {\n        \"request\": \"300000000000y\",\n        \"maxRequest\": \"300000000000y\"\n      }\n    }\n  },\n  \"defaults\": { \"timeouts\": { \"shutdown\": \"2y\" } }\n}\n";
    let err = mcphost::config::parse(text, std::path::Path::new("/cfg/config.json"), &|_| None)
        .expect_err("absurd durations were accepted");
    let msg = err.to_string();
    for want in [
        "/cfg/config.json:6: mcpServers.x.timeouts.request: \"300000000000y\" is longer than the maximum of 1year",
        "/cfg/config.json:7: mcpServers.x.timeouts.maxRequest: \"300000000000y\" is longer than the maximum of 1year",
        "/cfg/config.json:11: defaults.timeouts.shutdown: \"2y\" is longer than the maximum of 1year",
    ] {
        assert!(msg.contains(want), "missing {want:?} in:\n{msg}");
    }
    // The maximum itself is fine.
    let ok = text.replace("300000000000y", "1y").replace("2y", "1y");
    mcphost::config::parse(&ok, std::path::Path::new("/cfg/config.json"), &|_| None)
        .unwrap_or_else(|e| panic!("1y refused: {e}"));
}

/// A raw JSON-RPC session on the daemon's socket: what the host sees, byte
/// for byte.
struct RawSession {
    conn: mcphost::transport::Connection,
}

impl RawSession {
    async fn open(d: &Daemon) -> RawSession {
        let conn = mcphost::ipc::connect(&d.socket, 1 << 20).await.unwrap();
        let mut s = RawSession { conn };
        s.send(r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
        s.until_response(r#""id":"init""#).await;
        s.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        s
    }

    async fn send(&self, line: &str) {
        self.conn.outbound.send(line.into()).await.unwrap();
    }

    /// Every frame up to and including the one containing `id_member`.
    async fn until_response(&mut self, id_member: &str) -> Vec<String> {
        let mut frames = Vec::new();
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(30), self.conn.inbound.recv())
                .await
                .unwrap_or_else(|_| panic!("no response {id_member} after {frames:#?}"))
                .expect("the daemon closed the connection");
            let mcphost::transport::TransportEvent::Frame(f) = ev else {
                panic!("unexpected {ev:?}");
            };
            let done = f.contains(id_member) && !f.contains(r#""method""#);
            frames.push(f);
            if done {
                return frames;
            }
        }
    }
}

fn ts_daemon(args: &[&str]) -> Daemon {
    let d = Daemon::start(&ts_config(args));
    d.wait_ready(&["ts"], Duration::from_secs(30));
    d
}

#[tokio::test]
async fn relayed_progress_keeps_numbers_meta_and_unknown_members_byte_for_byte() {
    let d = ts_daemon(&[]);
    let mut s = RawSession::open(&d).await;
    s.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ts__slow","arguments":{"ms":450},"_meta":{"progressToken":"caller-token"}}}"#).await;
    let frames = s.until_response(r#""id":2"#).await;
    let progress: Vec<&String> = frames
        .iter()
        .filter(|f| f.contains("notifications/progress"))
        .collect();
    assert!(!progress.is_empty(), "no progress relayed: {frames:#?}");
    for p in progress {
        let v: serde_json::Value = serde_json::from_str(p).unwrap();
        let params = &v["params"];
        assert_eq!(params["progressToken"], "caller-token", "{p}");
        let done = params["progress"]
            .as_u64()
            .unwrap_or_else(|| panic!("progress is not an integer: {p}"));
        // The server's own text, not a re-encoding (`100` became `100.0`).
        for member in [
            format!(r#""progress":{done},"#),
            r#""total":450,"#.to_owned(),
            format!(r#""_meta":{{"elapsedMs":{done}}}"#),
            r#""x-unknown":[1,"two"]"#.to_owned(),
        ] {
            assert!(p.contains(&member), "{member} missing in {p}");
        }
    }
}
