//! Socket sessions are freed when their client goes. Alone in its binary so
//! the RSS it reads is its own.

use std::time::{Duration, Instant};

use mcphost::engine::{Engine, EngineBuilder};
use mcphost::ipc::{ListenOptions, connect, listen};
use mcphost::transport::TransportEvent;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"leak-test","version":"0"}}}"#;

#[cfg(target_os = "linux")]
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

// macOS has no /proc; the session and task counts still apply there.
#[cfg(not(target_os = "linux"))]
fn rss_kib() -> Option<u64> {
    None
}

/// connect → initialize → close, `n` times, one after the other.
async fn cycles(socket: &std::path::Path, n: usize) {
    for i in 0..n {
        let mut conn = connect(socket, 1 << 20).await.unwrap();
        conn.outbound
            .send(INITIALIZE.to_owned().into())
            .await
            .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(10), conn.inbound.recv())
            .await
            .unwrap_or_else(|_| panic!("cycle {i}: no initialize answer"));
        match reply {
            Some(TransportEvent::Frame(line)) => {
                assert!(line.contains("\"protocolVersion\""), "cycle {i}: {line}")
            }
            other => panic!("cycle {i}: expected the initialize answer, got {other:?}"),
        }
        // Dropping the connection closes the socket.
    }
}

/// Waits (up to 20 s) until no session is left and the runtime's task count
/// has come down to `tasks` (or, with `None`, has held still for 200 ms); the
/// live sessions and tasks then. A connection's reader and writer tasks end a
/// moment after its session, so the count is polled, not read once (CI once
/// read 5 where 2 were left a few ms later).
async fn settle(engine: &Engine, tasks: Option<usize>) -> (usize, usize) {
    let metrics = tokio::runtime::Handle::current().metrics();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut last, mut still) = (usize::MAX, 0);
    while Instant::now() < deadline {
        let alive = metrics.num_alive_tasks();
        still = if alive == last { still + 1 } else { 0 };
        last = alive;
        let settled = match tasks {
            Some(target) => alive <= target,
            None => still >= 10,
        };
        if engine.session_count() == 0 && settled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (engine.session_count(), metrics.num_alive_tasks())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_socket_connections_leave_no_session_task_or_memory_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("config.json");
    let cfg = mcphost::config::parse(
        r#"{"mcpServers":{},"loginShellPath":false}"#,
        &path,
        &mcphost::auth::process_env,
    )
    .unwrap();
    let engine = EngineBuilder::new(cfg).start();
    let socket = tmp.path().join("run/mcphost.sock");
    let mut listener = listen(ListenOptions::new(&socket)).await.unwrap();
    let served = engine.clone();
    tokio::spawn(async move {
        let mut n = 0u64;
        while let Ok((conn, _)) = listener.accept().await {
            n += 1;
            served.serve(&format!("client-{n}"), conn);
        }
    });

    // Warm up allocator arenas and runtime buffers before the baseline.
    cycles(&socket, 300).await;
    let (_, tasks_before) = settle(&engine, None).await;
    let rss_before = rss_kib();

    const CYCLES: usize = 3000;
    cycles(&socket, CYCLES).await;
    let (sessions, tasks_after) = settle(&engine, Some(tasks_before)).await;
    let rss_after = rss_kib();
    eprintln!(
        "after {CYCLES} cycles: {sessions} live sessions, tasks {tasks_before} -> {tasks_after}, \
         RSS {rss_before:?} -> {rss_after:?} KiB"
    );
    assert_eq!(
        sessions, 0,
        "{sessions} sessions of closed connections are still alive ({CYCLES} cycles after a warm-up of 300)"
    );
    assert!(
        tasks_after <= tasks_before,
        "per-connection tasks left: {tasks_before} alive before, {tasks_after} after"
    );
    if let (Some(before), Some(after)) = (rss_before, rss_after) {
        // A leak of 35 KiB per connection is 100 MiB here; freed memory is
        // reused, so what stays is allocator noise.
        let grown = after.saturating_sub(before);
        assert!(
            grown < 16 * 1024,
            "RSS grew by {grown} KiB over {CYCLES} closed connections ({before} -> {after} KiB)"
        );
    }
}
