//! The supervisor: restarts after crashes, gives up on broken starts, and
//! stops cleanly.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mcphost::client::CallOptions;
use mcphost::registry::supervisor::{
    Launch, RestartPolicy, ServerState, ServerStatus, SupervisorHandle, spawn,
};
use tokio::sync::broadcast;

fn policy() -> RestartPolicy {
    RestartPolicy {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        reset_after: Duration::from_secs(60),
        max_start_failures: 3,
    }
}

fn start(name: &str, launch: Launch) -> SupervisorHandle {
    let (tx, _) = broadcast::channel(64);
    spawn(name, launch, quick_opts(), policy(), false, tx)
}

/// Polls the status until `pick` accepts it, for up to 20 s.
async fn wait_status(
    h: &SupervisorHandle,
    what: &str,
    pick: impl Fn(&ServerStatus) -> bool,
) -> Arc<ServerStatus> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = h.status();
        if pick(&s) {
            return s;
        }
        if Instant::now() >= deadline {
            panic!("{}: no {what} within 20 s: {s:?}", h.name());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn wait_state(h: &SupervisorHandle, want: ServerState) -> Arc<ServerStatus> {
    wait_status(h, &format!("{want:?}"), |s| s.state == want).await
}

/// Calls `echo`, which must fail long before the 20 s request timeout
/// (10 s: generous for a loaded machine); the error text.
async fn echo_fails_fast(c: &mcphost::client::ServerClient, what: &str) -> String {
    let t = Instant::now();
    let e = c
        .call_tool("echo", Some(raw(r#"{"text":"x"}"#)), CallOptions::default())
        .await
        .expect_err(what)
        .to_string();
    let took = t.elapsed();
    eprintln!("{what}: failed after {took:?}");
    assert!(took < Duration::from_secs(10), "{what}: took {took:?}: {e}");
    e
}

fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[tokio::test]
async fn a_crashed_server_is_restarted() {
    let h = start("crashy", Launch::Stdio(testserver(&["--crash-after", "3"])));
    let first = wait_state(&h, ServerState::Ready).await;
    let pid1 = first.pid.unwrap();
    assert!(
        first
            .command
            .as_deref()
            .unwrap()
            .ends_with("mcphost-testserver")
    );
    let c = h.client().unwrap();
    c.ping().await.unwrap(); // request 2
    let e = c.list_tools().await.unwrap_err(); // request 3: crash
    assert!(e.to_string().contains("simulated crash"), "{e}");
    // Back up with a new process.
    let mut new = None;
    for _ in 0..400 {
        let s = h.status();
        if s.state == ServerState::Ready && s.pid != Some(pid1) {
            new = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let s = new.expect("restarted");
    assert!(s.restarts >= 1);
    assert!(!pid_alive(pid1), "old process reaped");
    h.client().unwrap().ping().await.unwrap();
    h.stop().await;
    assert!(!pid_alive(s.pid.unwrap()));
}

#[tokio::test]
async fn calls_to_a_down_server_fail_fast_with_the_reason() {
    let h = start(
        "quitter",
        Launch::Stdio(testserver(&["--crash-after", "2", "--stderr-lines", "2"])),
    );
    wait_state(&h, ServerState::Ready).await;
    let c = h.client().unwrap();
    // Request 2 (after initialize) kills it: the call in flight fails at
    // once with the server's stderr, long before the 20 s request timeout.
    let e = echo_fails_fast(&c, "a call in flight when the server died").await;
    for want in ["quitter", "simulated crash", "stderr line"] {
        assert!(e.contains(want), "no {want:?} in: {e}");
    }
    // A call on the dead server's client fails at once too, saying why.
    let e = echo_fails_fast(&c, "a call to a server that died").await;
    assert!(
        e.contains("quitter") && e.contains("simulated crash"),
        "{e}"
    );
    h.stop().await;
}

/// Defect 4: stop waited out the whole init timeout of a server that never
/// answers `initialize`.
#[tokio::test]
async fn stop_interrupts_a_start_that_never_answers_initialize() {
    let (tx, _) = broadcast::channel(64);
    let opts = mcphost::client::ClientOptions {
        init_timeout: Duration::from_secs(60),
        ..quick_opts()
    };
    let h = spawn(
        "hung",
        Launch::Stdio(testserver(&["--hang-on", "initialize"])),
        opts,
        policy(),
        false,
        tx,
    );
    let started = wait_status(&h, "handshake under way", |s| {
        s.state == ServerState::Starting && s.pid.is_some()
    })
    .await;
    let pid = started.pid.unwrap();
    let t = Instant::now();
    // The grace after stdin EOF is 2 s; the init timeout is 60 s. 20 s is
    // generous for a loaded machine and still far below the 60 s.
    tokio::time::timeout(Duration::from_secs(20), h.stop())
        .await
        .unwrap_or_else(|_| panic!("stop still waiting after 20 s: {:?}", h.status()));
    eprintln!("stop during a hung initialize: {:?}", t.elapsed());
    assert_eq!(h.status().state, ServerState::Stopped);
    assert!(!pid_alive(pid), "the process outlived the stop");
}

#[tokio::test]
async fn an_unsupported_revision_fails_without_a_crash_loop() {
    let h = start(
        "old",
        Launch::Stdio(testserver(&["--protocol-version", "1999-01-01"])),
    );
    let s = wait_state(&h, ServerState::Failed).await;
    let e = s.error.clone().unwrap();
    assert!(e.contains("1999-01-01"), "{e}");
    assert_eq!(s.restarts, 0, "not retried");
    h.stop().await;
}

#[tokio::test]
async fn repeated_handshake_failures_end_in_failed_and_restart_leaves_it() {
    let h = start(
        "dies",
        Launch::Stdio(testserver(&["--crash-after", "1", "--stderr-lines", "1"])),
    );
    let s = wait_state(&h, ServerState::Failed).await;
    assert!(
        s.error.as_deref().unwrap().contains("simulated crash"),
        "{s:?}"
    );
    assert_eq!(s.restarts, 2, "three attempts in all");
    assert!(h.client().is_err());
    h.restart().await;
    wait_state(&h, ServerState::Failed).await;
    h.stop().await;
    assert_eq!(h.status().state, ServerState::Stopped);
}

#[tokio::test]
async fn a_missing_command_fails_at_once_naming_the_path() {
    let h = start(
        "ghost",
        Launch::Stdio(mcphost::transport::stdio::StdioConfig::new(
            "no-such-mcp-server",
            Vec::<String>::new(),
        )),
    );
    let s = wait_state(&h, ServerState::Failed).await;
    let e = s.error.clone().unwrap();
    assert!(
        e.contains("no-such-mcp-server") && e.contains("PATH"),
        "{e}"
    );
    h.stop().await;
}

#[tokio::test]
async fn unreachable_http_server_is_retried_with_the_reason() {
    // A port nobody listens on: bind, note it, let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let h = start(
        "remote",
        Launch::Http(mcphost::transport::http::HttpConfig::new(format!(
            "http://127.0.0.1:{port}/mcp"
        ))),
    );
    // Past the limit of failed starts it is `failed` with the reason (waits
    // end), and, since remote servers come back (redeploys), still tried
    // again every max_backoff.
    let status = wait_state(&h, ServerState::Failed).await;
    let e = status.error.as_deref().unwrap();
    assert!(e.contains("remote") && e.contains("cannot reach"), "{e}");
    assert!(e.to_lowercase().contains("refused"), "{e}");
    assert!(e.contains("trying again every 200ms"), "{e}");
    assert_eq!(status.transport, "http");
    let first = status.since;
    let again = wait_status(&h, "a quiet retry", |s| s.since > first).await;
    assert_eq!(again.state, ServerState::Failed, "{again:?}");
    h.stop().await;
}
