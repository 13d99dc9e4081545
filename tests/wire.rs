//! The wire level through real processes: what a server prints on stdout
//! that is not JSON-RPC, and ids the way servers send them.

mod common;

use std::time::Duration;

use common::*;
use mcphost::client::CallOptions;

#[tokio::test]
async fn stray_json_log_line_does_not_fail_request_0() {
    // Before every response the server prints `{"id":N,"level":"info",...}`
    // with that response's id, so the first one arrives while our
    // `initialize` (request 0) waits.
    let c = connect("chatty", &["--json-logs"]).await;
    assert_eq!(c.list_tools().await.unwrap().len(), 9);
    let r = c
        .call_tool(
            "echo",
            Some(raw(r#"{"text":"ok"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.raw.get().contains("ok"), "{}", r.raw.get());
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
