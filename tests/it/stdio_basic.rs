//! stdio transport: spawning, framing and stderr against real child processes.

use std::time::Duration;

use mcphost::protocol::Id;
use mcphost::transport::stdio::{StdioConfig, StdioError, spawn};
use mcphost::transport::{CloseReason, Connection, TransportEvent};

const WAIT: Duration = Duration::from_secs(10);

fn sh(script: &str) -> StdioConfig {
    StdioConfig::new("sh", ["-c", script])
}

async fn next_event(conn: &mut Connection) -> TransportEvent {
    tokio::time::timeout(WAIT, conn.inbound.recv())
        .await
        .expect("timed out waiting for an event")
        .expect("inbound closed without a Closed event")
}

/// Everything up to and including `Closed`; checks nothing follows it.
async fn run_to_close(conn: &mut Connection) -> (Vec<TransportEvent>, CloseReason) {
    let mut events = Vec::new();
    loop {
        match next_event(conn).await {
            TransportEvent::Closed(reason) => {
                let after = tokio::time::timeout(WAIT, conn.inbound.recv()).await;
                assert!(matches!(after, Ok(None)), "event after Closed: {after:?}");
                return (events, reason);
            }
            other => events.push(other),
        }
    }
}

fn frames(events: &[TransportEvent]) -> Vec<&str> {
    events
        .iter()
        .map(|e| match e {
            TransportEvent::Frame(f) => f.as_str(),
            other => panic!("unexpected event {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn missing_command_names_server_command_and_path() {
    let mut cfg = StdioConfig::new("mcphost-no-such-command", Vec::<String>::new());
    cfg.env
        .insert("PATH".into(), "/nonexistent/a:/nonexistent/b".into());
    let err = spawn("weather", &cfg).await.err().expect("spawn must fail");
    assert!(matches!(err, StdioError::CommandNotFound { .. }), "{err:?}");
    let msg = err.to_string();
    for part in [
        "weather",
        "mcphost-no-such-command",
        "/nonexistent/a:/nonexistent/b",
    ] {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
}

#[tokio::test]
async fn missing_command_searches_our_path_by_default() {
    let cfg = StdioConfig::new("mcphost-no-such-command", Vec::<String>::new());
    let err = spawn("s", &cfg).await.err().expect("spawn must fail");
    let ours = std::env::var("PATH").unwrap();
    assert!(err.to_string().contains(&ours), "{err}");
}

#[tokio::test]
async fn bad_cwd_is_its_own_error() {
    let mut cfg = sh("true");
    cfg.cwd = Some("/nonexistent/mcphost-dir".into());
    let err = spawn("files", &cfg).await.err().expect("spawn must fail");
    assert!(matches!(err, StdioError::BadCwd { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("files") && msg.contains("/nonexistent/mcphost-dir"),
        "{msg}"
    );
}

#[tokio::test]
async fn relative_command_resolves_against_cwd() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("server.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho \"{\\\"cwd\\\":\\\"$(pwd)\\\"}\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cfg = StdioConfig::new("./server.sh", Vec::<String>::new());
    cfg.cwd = Some(dir.path().to_owned());
    let mut conn = spawn("local", &cfg).await.unwrap();
    let (events, reason) = run_to_close(&mut conn).await;
    let expected = format!(
        "{{\"cwd\":\"{}\"}}",
        dir.path().canonicalize().unwrap().display()
    );
    assert_eq!(frames(&events), vec![expected.as_str()]);
    assert!(reason.summary.contains("exited with status 0"), "{reason}");
}

#[tokio::test]
async fn echo_round_trip_through_cat() {
    let mut conn = spawn("echo", &StdioConfig::new("cat", Vec::<String>::new()))
        .await
        .unwrap();
    for i in 0..50 {
        let msg = format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}");
        conn.outbound.send(msg.clone().into()).await.unwrap();
        match next_event(&mut conn).await {
            TransportEvent::Frame(f) => assert_eq!(f, msg),
            other => panic!("unexpected {other:?}"),
        }
    }
    conn.control.shutdown().await;
    let (events, reason) = run_to_close(&mut conn).await;
    assert!(events.is_empty(), "{events:?}");
    assert!(
        reason.summary.contains("'echo' exited with status 0"),
        "{reason}"
    );
}

#[tokio::test]
async fn embedded_newline_is_refused_and_later_messages_still_flow() {
    let mut conn = spawn("echo", &StdioConfig::new("cat", Vec::<String>::new()))
        .await
        .unwrap();
    conn.outbound.send("{\"a\":\n1}".into()).await.unwrap();
    conn.outbound.send("{\"b\":2}".into()).await.unwrap();
    match next_event(&mut conn).await {
        TransportEvent::Frame(f) => assert_eq!(f, "{\"b\":2}"),
        other => panic!("unexpected {other:?}"),
    }
    conn.control.shutdown().await;
    let (events, _) = run_to_close(&mut conn).await;
    assert!(events.is_empty(), "{events:?}");
}

#[tokio::test]
async fn partial_lines_are_joined() {
    let script = r#"printf '{"jsonrpc":'; sleep 0.2; printf '"2.0","id"'; sleep 0.2; printf ':1}\r\n\n{"x":2}'"#;
    let mut conn = spawn("slow", &sh(script)).await.unwrap();
    let (events, _) = run_to_close(&mut conn).await;
    assert_eq!(
        frames(&events),
        vec![r#"{"jsonrpc":"2.0","id":1}"#, r#"{"x":2}"#]
    );
}

#[tokio::test]
async fn non_json_lines_are_frames_not_fatal() {
    let script =
        r#"echo 'Server starting on stdio...'; echo '{"jsonrpc":"2.0","id":1,"result":{}}'"#;
    let mut conn = spawn("chatty", &sh(script)).await.unwrap();
    let (events, reason) = run_to_close(&mut conn).await;
    assert_eq!(
        frames(&events),
        vec![
            "Server starting on stdio...",
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#
        ]
    );
    assert!(reason.summary.contains("exited with status 0"), "{reason}");
}

#[tokio::test]
async fn oversized_message_reports_its_id_and_the_stream_goes_on() {
    let script = r#"printf '{"result":{"text":"'; head -c 100000 /dev/zero | tr '\0' x; printf '"},"jsonrpc":"2.0","id":5}\n{"jsonrpc":"2.0","id":6,"result":{}}\n'"#;
    let mut cfg = sh(script);
    cfg.max_message_bytes = 4096;
    let mut conn = spawn("big", &cfg).await.unwrap();
    let (events, _) = run_to_close(&mut conn).await;
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(
        matches!(
            &events[0],
            TransportEvent::Oversized {
                limit: 4096,
                id: Some(id)
            } if *id == Id::number(5)
        ),
        "{:?}",
        events[0]
    );
    assert!(matches!(&events[1], TransportEvent::Frame(f) if f.contains("\"id\":6")));
}

#[tokio::test]
async fn stderr_ring_keeps_the_last_lines_and_close_reason_carries_them() {
    let script = r#"i=1; while [ $i -le 50 ]; do echo "log line $i" >&2; i=$((i+1)); done; exit 3"#;
    let mut cfg = sh(script);
    cfg.stderr_lines = 10;
    let mut conn = spawn("noisy", &cfg).await.unwrap();
    let (events, reason) = run_to_close(&mut conn).await;
    assert!(events.is_empty());
    assert_eq!(reason.summary, "server 'noisy' exited with status 3");
    let expected: Vec<String> = (41..=50).map(|i| format!("log line {i}")).collect();
    assert_eq!(reason.stderr_tail, expected);
    assert_eq!(conn.control.stderr_tail(3), expected[7..].to_vec());
    assert_eq!(conn.control.stderr_tail(100), expected);
    assert!(reason.to_string().contains("log line 50"));
}

#[tokio::test]
async fn stderr_lines_are_bounded() {
    let script = r#"head -c 100000 /dev/zero | tr '\0' e >&2; echo >&2; echo after >&2"#;
    let mut conn = spawn("wide", &sh(script)).await.unwrap();
    let (_, reason) = run_to_close(&mut conn).await;
    assert_eq!(
        reason.stderr_tail.len(),
        2,
        "{:?}",
        reason.stderr_tail.len()
    );
    assert!(
        reason.stderr_tail[0].len() < 9 * 1024,
        "{}",
        reason.stderr_tail[0].len()
    );
    assert!(reason.stderr_tail[0].starts_with("eeee"));
    assert_eq!(reason.stderr_tail[1], "after");
}

#[tokio::test]
async fn stderr_lines_feed_each_line_live_and_close_with_stderr() {
    // Waits for a line on stdin before writing, so the feed is subscribed.
    let script =
        r#"read go; echo "one" >&2; printf 'two\r\n' >&2; echo >&2; echo three >&2; exit 0"#;
    let mut conn = spawn("live", &sh(script)).await.unwrap();
    let mut feed = conn
        .control
        .stderr_lines()
        .expect("stdio has a stderr feed");
    conn.outbound.send("go".into()).await.unwrap();
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, feed.recv())
            .await
            .expect("feed stalled")
        {
            Ok(line) => got.push(line.to_string()),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            Err(e) => panic!("{e}"),
        }
    }
    // Blank lines are skipped and CRs stripped, as in the ring.
    assert_eq!(got, ["one", "two", "three"]);
    let _ = run_to_close(&mut conn).await;
    // Once stderr has closed there is nothing left to follow.
    assert!(conn.control.stderr_lines().is_none());
}

#[tokio::test]
async fn a_stderr_follower_that_falls_behind_is_told_how_many_it_missed() {
    let script =
        r#"read go; i=1; while [ $i -le 2000 ]; do echo "line $i" >&2; i=$((i+1)); done; exit 0"#;
    let mut conn = spawn("flood", &sh(script)).await.unwrap();
    let mut feed = conn.control.stderr_lines().unwrap();
    conn.outbound.send("go".into()).await.unwrap();
    // Read nothing until the process is done: the feed keeps only its last 256.
    let _ = run_to_close(&mut conn).await;
    let mut lagged = 0;
    let mut lines = Vec::new();
    loop {
        match feed.recv().await {
            Ok(line) => lines.push(line.to_string()),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => lagged += n,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
        }
    }
    assert_eq!(lines.len(), 256, "{}", lines.len());
    assert_eq!(lagged + 256, 2000);
    assert_eq!(lines.last().map(String::as_str), Some("line 2000"));
}

/// The daemon follows every server's stderr through `follow_stderr`, on the
/// transport's reader (no task of its own): a flood reaches it at 1,000
/// lines a second at most, the rest counted in a note that comes even when
/// the flood stopped and the process lives on.
#[tokio::test]
async fn a_stderr_follower_gets_a_bounded_rate_and_a_note_for_the_rest() {
    use mcphost::transport::stdio::STDERR_FOLLOW_LINES_PER_SECOND;
    const LINES: u64 = 3000;
    let script = format!(
        r#"read go; i=1; while [ $i -le {LINES} ]; do echo "line $i" >&2; i=$((i+1)); done; read wait"#
    );
    let conn = spawn("flood", &sh(&script)).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    assert!(conn.control.follow_stderr(Box::new(move |line| {
        let _ = tx.send(line);
    })));
    conn.outbound.send("go".into()).await.unwrap();
    let (mut shown, mut dropped, mut last) = (0u64, 0u64, 0u64);
    while shown + dropped < LINES {
        let line = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("stalled at {shown} shown, {dropped} dropped"))
            .expect("follower dropped");
        if let Some(n) = line
            .strip_prefix("[mcphost: ")
            .and_then(|l| l.strip_suffix(" stderr lines dropped]"))
        {
            dropped += n.parse::<u64>().unwrap();
        } else {
            let n: u64 = line.strip_prefix("line ").unwrap().parse().unwrap();
            assert!(n > last, "out of order: {n} after {last}");
            last = n;
            shown += 1;
        }
    }
    assert!(dropped > 0, "3000 lines at once, none dropped");
    assert!(
        shown <= LINES.div_ceil(u64::from(STDERR_FOLLOW_LINES_PER_SECOND)) * 1000,
        "{shown}"
    );
    // Every line of the flood is either shown or counted.
    assert_eq!(shown + dropped, LINES);
    // The ring keeps its own lines, unlimited by the follower's rate.
    assert_eq!(
        conn.control.stderr_tail(1),
        [format!("line {LINES}")],
        "the ring saw every line"
    );
    conn.control.shutdown().await;
}

#[tokio::test]
async fn killed_by_signal_is_reported() {
    let mut conn = spawn("doomed", &sh("echo dying >&2; kill -9 $$"))
        .await
        .unwrap();
    let (_, reason) = run_to_close(&mut conn).await;
    assert!(
        reason
            .summary
            .contains("server 'doomed' was killed by signal 9"),
        "{reason}"
    );
    assert_eq!(reason.stderr_tail, vec!["dying".to_owned()]);
}

#[tokio::test]
async fn exit_is_detected_while_a_grandchild_holds_stdout() {
    // The background sleep keeps stdout and stderr open after sh exits.
    let mut conn = spawn("leaky", &sh("sleep 30 & echo '{\"a\":1}'; exit 4"))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let (events, reason) = run_to_close(&mut conn).await;
    assert_eq!(frames(&events), vec![r#"{"a":1}"#]);
    assert!(reason.summary.contains("exited with status 4"), "{reason}");
    assert!(started.elapsed() < Duration::from_secs(5));
    conn.control.shutdown().await;
}

#[tokio::test]
async fn shutdown_after_exit_is_immediate_and_idempotent() {
    let mut conn = spawn("quick", &sh("exit 0")).await.unwrap();
    let (_, reason) = run_to_close(&mut conn).await;
    assert!(reason.summary.contains("exited with status 0"));
    let started = std::time::Instant::now();
    conn.control.shutdown().await;
    conn.control.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert!(conn.control.pid().is_some());
}
