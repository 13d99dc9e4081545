//! The daemon's local socket: modes, ownership of the socket file, framing,
//! many clients, slow clients and refusing other users.

use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;

use common::uid::{self, OtherUid, our_uid};
use mcphost::ipc::{IpcError, ListenOptions, Listener, connect, listen};
use mcphost::jsonrpc::{NoHandler, Peer, PeerConfig, RequestOptions};
use mcphost::transport::{Connection, TransportEvent};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc::error::TrySendError;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(10);
const MAX: usize = 1024 * 1024;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

fn inode(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).unwrap().ino()
}

async fn listen_at(path: &Path) -> Listener {
    listen(ListenOptions::new(path)).await.unwrap()
}

/// Answers every line with `echo:LINE` and every oversized one with
/// `oversized:LIMIT`, until the client goes.
async fn echo_conn(conn: Connection) {
    // Dropping the control would close the socket: keep it for the loop.
    let Connection {
        outbound,
        mut inbound,
        control: _control,
    } = conn;
    while let Some(event) = inbound.recv().await {
        let reply = match event {
            TransportEvent::Frame(line) | TransportEvent::FrameOn(line, _) => {
                format!("echo:{line}")
            }
            TransportEvent::Oversized { limit, .. } => format!("oversized:{limit}"),
            TransportEvent::Failed { reason, .. } => format!("failed:{reason}"),
            TransportEvent::Closed(_) => break,
        };
        if outbound.send(reply.into()).await.is_err() {
            break;
        }
    }
}

fn spawn_echo_server(mut listener: Listener) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (conn, _) = listener.accept().await.unwrap();
            tokio::spawn(echo_conn(conn));
        }
    })
}

async fn next_event(conn: &mut Connection) -> TransportEvent {
    tokio::time::timeout(WAIT, conn.inbound.recv())
        .await
        .expect("no event in time")
        .expect("inbound ended without Closed")
}

async fn next_line(conn: &mut Connection) -> String {
    match next_event(conn).await {
        TransportEvent::Frame(line) => line,
        other => panic!("expected a frame, got {other:?}"),
    }
}

async fn round_trip(conn: &mut Connection, line: &str) -> String {
    conn.outbound.send(line.into()).await.unwrap();
    next_line(conn).await
}

async fn expect_closed(conn: &mut Connection) -> String {
    loop {
        match next_event(conn).await {
            TransportEvent::Closed(reason) => return reason.summary,
            TransportEvent::Frame(_)
            | TransportEvent::FrameOn(..)
            | TransportEvent::Oversized { .. }
            | TransportEvent::Failed { .. } => {}
        }
    }
}

#[tokio::test]
async fn dir_is_created_0700_and_socket_is_0600() {
    let tmp = tmp();
    let dir = tmp.path().join("a/b");
    let path = dir.join("mcphost.sock");
    let listener = listen_at(&path).await;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&path), 0o600);
    assert!(
        std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_socket()
    );
    assert_eq!(listener.path(), path);
}

#[tokio::test]
async fn existing_dir_of_ours_is_tightened() {
    let tmp = tmp();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _listener = listen_at(&dir.join("mcphost.sock")).await;
    assert_eq!(mode(&dir), 0o700);
}

#[tokio::test]
async fn symlinked_foreign_and_shared_dirs_are_refused() {
    let tmp = tmp();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let err = listen(ListenOptions::new(link.join("s.sock")))
        .await
        .unwrap_err();
    assert!(matches!(err, IpcError::UnsafeDir { .. }), "{err}");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(!real.join("s.sock").exists());

    // Owned by someone else (we are root in CI; skip the chown elsewhere).
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    if std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).is_ok() {
        let err = listen(ListenOptions::new(foreign.join("s.sock")))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        assert!(!foreign.join("s.sock").exists());
    }

    // A shared sticky directory like /tmp must never be chmodded.
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let err = listen(ListenOptions::new(shared.join("s.sock")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("shared directory"), "{err}");
    assert_eq!(mode(&shared), 0o1777);
}

#[tokio::test]
async fn round_trips_with_many_clients_at_once() {
    let tmp = tmp();
    let path = tmp.path().join("run/mcphost.sock");
    let server = spawn_echo_server(listen_at(&path).await);
    let clients = (0..20).map(|i| {
        let path = path.clone();
        tokio::spawn(async move {
            let mut conn = connect(&path, MAX).await.unwrap();
            for j in 0..10 {
                let line = format!("{{\"client\":{i},\"n\":{j}}}");
                assert_eq!(round_trip(&mut conn, &line).await, format!("echo:{line}"));
            }
        })
    });
    for client in futures_util::future::join_all(clients).await {
        client.unwrap();
    }
    server.abort();
}

#[tokio::test]
async fn peers_talk_json_rpc_over_the_socket() {
    let tmp = tmp();
    let path = tmp.path().join("run/mcphost.sock");
    let mut listener = listen_at(&path).await;
    let server = tokio::spawn(async move {
        let (conn, cred) = listener.accept().await.unwrap();
        assert_eq!(cred.uid, our_uid());
        assert_eq!(cred.pid, Some(std::process::id() as i32));
        assert_eq!(conn.control.pid(), Some(std::process::id()));
        let peer = Peer::start(
            PeerConfig::new("client"),
            conn.outbound,
            conn.inbound,
            Arc::new(NoHandler),
        );
        peer.closed().await;
        drop(conn.control);
    });
    let conn = connect(&path, MAX).await.unwrap();
    assert_eq!(conn.control.pid(), Some(std::process::id()));
    assert!(conn.control.stderr_tail(10).is_empty());
    let peer = Peer::start(
        PeerConfig::new("daemon"),
        conn.outbound,
        conn.inbound,
        Arc::new(NoHandler),
    );
    let result = peer
        .request("ping", None, RequestOptions::default())
        .await
        .unwrap();
    assert_eq!(result.get(), "{}");
    conn.control.shutdown().await;
    tokio::time::timeout(WAIT, server).await.unwrap().unwrap();
}

#[tokio::test]
async fn oversized_line_is_reported_and_the_connection_survives() {
    let tmp = tmp();
    let path = tmp.path().join("run/mcphost.sock");
    let mut opts = ListenOptions::new(&path);
    opts.max_message_bytes = 1000;
    let server = spawn_echo_server(listen(opts).await.unwrap());
    let mut conn = connect(&path, MAX).await.unwrap();
    let big = format!("{{\"id\":1,\"x\":\"{}\"}}", "x".repeat(5000));
    assert_eq!(round_trip(&mut conn, &big).await, "oversized:1000");
    assert_eq!(round_trip(&mut conn, "after").await, "echo:after");
    server.abort();
}

#[tokio::test]
async fn second_listen_on_a_live_socket_is_refused_and_the_first_keeps_working() {
    let tmp = tmp();
    let path = tmp.path().join("run/mcphost.sock");
    let first = listen_at(&path).await;
    let ino = inode(&path);
    let server = spawn_echo_server(first);

    let err = listen(ListenOptions::new(&path)).await.unwrap_err();
    assert!(matches!(err, IpcError::AlreadyRunning { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("already listening on"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("--socket"), "{msg}");

    assert_eq!(inode(&path), ino, "the live socket was replaced");
    let mut conn = connect(&path, MAX).await.unwrap();
    assert_eq!(round_trip(&mut conn, "still").await, "echo:still");
    server.abort();
}

#[tokio::test]
async fn live_socket_of_another_program_is_never_deleted() {
    // No lock held here: only the connect probe can tell it is alive.
    let tmp = tmp();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("mcphost.sock");
    let other = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let ino = inode(&path);

    let err = listen(ListenOptions::new(&path)).await.unwrap_err();
    assert!(matches!(err, IpcError::AlreadyRunning { .. }), "{err}");
    assert_eq!(inode(&path), ino);
    // The other program still gets its connections.
    let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
    other.accept().unwrap();
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let tmp = tmp();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("mcphost.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(
        path.exists(),
        "std unlinked the socket; the test needs a stale file"
    );
    let err = connect(&path, MAX).await.err().unwrap();
    assert!(matches!(err, IpcError::NotRunning { .. }), "{err}");

    let server = spawn_echo_server(listen_at(&path).await);
    let mut conn = connect(&path, MAX).await.unwrap();
    assert_eq!(round_trip(&mut conn, "fresh").await, "echo:fresh");
    server.abort();
}

#[tokio::test]
async fn regular_file_at_the_path_is_left_alone() {
    let tmp = tmp();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("mcphost.sock");
    std::fs::write(&path, "precious").unwrap();
    let err = listen(ListenOptions::new(&path)).await.unwrap_err();
    assert!(matches!(err, IpcError::NotASocket { .. }), "{err}");
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

#[tokio::test]
async fn drop_removes_our_socket_but_not_a_replacement() {
    let tmp = tmp();
    let path = tmp.path().join("run/mcphost.sock");
    drop(listen_at(&path).await);
    assert!(!path.exists(), "the socket file outlived its listener");

    // The lock went with it: the path can be taken again at once.
    let listener = listen_at(&path).await;
    std::fs::remove_file(&path).unwrap();
    let replacement = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let ino = inode(&path);
    drop(listener);
    assert!(
        path.exists(),
        "dropping the listener deleted someone else's socket"
    );
    assert_eq!(inode(&path), ino);
    drop(replacement);
}

#[tokio::test]
async fn connect_without_a_daemon_is_a_clear_error() {
    let tmp = tmp();
    let path = tmp.path().join("nothing.sock");
    let err = connect(&path, MAX).await.err().unwrap();
    assert!(matches!(err, IpcError::NotRunning { .. }), "{err}");
    assert!(err.to_string().contains("no mcphost daemon"), "{err}");
}

#[tokio::test]
async fn closing_either_side_closes_the_other() {
    let tmp = tmp();
    let path = tmp.path().join("run/mcphost.sock");
    let mut listener = listen_at(&path).await;

    // The client goes away: the server sees Closed.
    let client = connect(&path, MAX).await.unwrap();
    let (mut server_side, _) = listener.accept().await.unwrap();
    drop(client);
    let summary = expect_closed(&mut server_side).await;
    assert!(summary.contains("closed the connection"), "{summary}");

    // The server hangs up: shutdown resolves and both sides see Closed.
    let mut client = connect(&path, MAX).await.unwrap();
    let (mut server_side, _) = listener.accept().await.unwrap();
    client.outbound.send("x".into()).await.unwrap();
    assert_eq!(next_line(&mut server_side).await, "x");
    server_side.outbound.send("y".into()).await.unwrap();
    assert_eq!(next_line(&mut client).await, "y");
    let started = Instant::now();
    tokio::time::timeout(WAIT, server_side.control.shutdown())
        .await
        .unwrap();
    expect_closed(&mut server_side).await;
    let summary = expect_closed(&mut client).await;
    assert!(summary.contains("the daemon at"), "{summary}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // Sending after close fails instead of hanging: the writer is gone.
    tokio::time::timeout(WAIT, server_side.outbound.closed())
        .await
        .expect("the writer outlived the connection");
    assert!(server_side.outbound.send("late".into()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_client_fills_its_queue_without_slowing_the_others() {
    let tmp = tmp();
    let path = tmp.path().join("run/mcphost.sock");
    let mut opts = ListenOptions::new(&path);
    opts.outbound_capacity = 8;
    let mut listener = listen(opts).await.unwrap();

    // Connects and then never reads.
    let mut slow = tokio::net::UnixStream::connect(&path).await.unwrap();
    let (mut slow_conn, _) = listener.accept().await.unwrap();
    let server = spawn_echo_server(listener);

    let chunk = format!("{{\"x\":\"{}\"}}", "n".repeat(64 * 1024));
    let started = Instant::now();
    let mut queued = 0usize;
    let full = loop {
        match slow_conn.outbound.try_send(chunk.clone().into()) {
            Ok(()) => queued += 1,
            Err(TrySendError::Full(_)) => break true,
            Err(TrySendError::Closed(_)) => panic!("the connection closed"),
        }
        // Socket buffers take a few hundred KiB, then the queue fills; an
        // unbounded queue would never say Full.
        if queued > 10_000 || started.elapsed() > WAIT {
            break false;
        }
        tokio::task::yield_now().await;
    };
    assert!(full, "try_send never returned Full after {queued} messages");
    assert!(
        queued < 1000,
        "queued {queued} messages of 64 KiB before Full"
    );

    // Everyone else is unaffected.
    let mut others = Vec::new();
    for i in 0..5 {
        let mut conn = connect(&path, MAX).await.unwrap();
        let t = Instant::now();
        assert_eq!(
            round_trip(&mut conn, &format!("hi {i}")).await,
            format!("echo:hi {i}")
        );
        let elapsed = t.elapsed();
        assert!(
            elapsed < Duration::from_secs(1),
            "round trip took {elapsed:?}"
        );
        others.push(conn);
    }

    // The daemon drops the stuck client: shutdown must not wait for it to read.
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(2), slow_conn.control.shutdown())
        .await
        .expect("shutdown waited for a client that does not read");
    expect_closed(&mut slow_conn).await;
    assert!(t.elapsed() < Duration::from_secs(2));
    // The client sees its data end: the socket really is closed.
    let mut sink = Vec::new();
    let read = tokio::time::timeout(WAIT, slow.read_to_end(&mut sink)).await;
    assert!(read.is_ok(), "the stuck client's socket stayed open");
    server.abort();
}

/// A `tracing` writer into a shared buffer, to assert on log lines.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

// current_thread: the thread-local log subscriber then sees every task.
#[tokio::test(flavor = "current_thread")]
#[ignore = "needs a second uid: root, setpriv and python3 (the test script runs it)"]
async fn other_uid_is_refused_and_logged() {
    let other = OtherUid::get("other_uid_is_refused_and_logged");
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let tmp = tmp();
    let dir = tmp.path().join("run");
    let path = dir.join("mcphost.sock");
    let listener = listen(ListenOptions::new(&path)).await.unwrap();
    assert_eq!((mode(&dir), mode(&path)), (0o700, 0o600));
    // uid 65534 must be able to reach the socket, so the uid check is what
    // refuses it.
    uid::loosen(&path, tmp.path());
    let server = spawn_echo_server(listener);

    // Control: the same client as root gets its echo, so a CLOSED below is
    // the uid check and not a broken setup.
    let (out, _) = other.ping(&path, false).await;
    assert_eq!(out, "REPLY");

    let (out, pid) = other.ping(&path, true).await;
    assert_eq!(out, "CLOSED", "uid 65534 was answered");
    let text = logs.text();
    let expected = uid::refusal_line(pid);
    assert!(
        text.contains(&expected),
        "missing log line {expected:?} in:\n{text}"
    );
    assert!(text.contains("WARN"), "{text}");
    server.abort();
    let _ = std::io::stderr().flush();
}

// ---------------------------------------------------------------------------
// The daemon's caps: connections at once, requests in flight per connection.

fn initialize(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"cap-test","version":"0"}}}}}}"#
    )
}

fn parse(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// Connects and initializes, retrying while the daemon is at its cap (the
/// sessions of clients that just left are freed a moment later).
async fn initialized(socket: &Path) -> Connection {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut conn = connect(socket, MAX).await.unwrap();
        let reply = parse(&round_trip(&mut conn, &initialize(1)).await);
        if reply.get("result").is_some() {
            return conn;
        }
        assert_eq!(reply["error"]["code"], -32000, "{reply}");
        assert!(Instant::now() < deadline, "still refused: {reply}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn connection_over_the_cap_gets_an_error_answer_then_is_closed() {
    let d = common::Daemon::start_with_flags(r#"{"mcpServers":{}}"#, &["--max-connections", "2"]);
    let first = initialized(&d.socket).await;
    let _second = initialized(&d.socket).await;

    let mut third = connect(&d.socket, MAX).await.unwrap();
    let reply = parse(&round_trip(&mut third, &initialize(7)).await);
    assert_eq!(reply["id"], 7, "the refusal answers the request: {reply}");
    assert_eq!(reply["error"]["code"], -32000, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("limit is 2 connected at once"),
        "{message}"
    );
    assert!(message.contains("--max-connections"), "{message}");
    let summary = expect_closed(&mut third).await;
    assert!(summary.contains("closed the connection"), "{summary}");

    // A CLI command is a connection too: it says why.
    let r = d.run(&["status"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--max-connections"), "{r:?}");
    assert!(
        d.log_text().contains("the connection cap is reached"),
        "{}",
        d.log_text()
    );

    // A slot freed is a slot again.
    drop(first);
    let _again = initialized(&d.socket).await;
}

/// A flood of silent clients over the cap must not pin a descriptor each
/// for the whole wait for a first request: past a bounded number of
/// patient refusals, the error (id null) goes out at once.
#[tokio::test]
async fn a_flood_over_the_connection_cap_is_refused_at_once_not_held() {
    const FLOOD: usize = 200;
    let d = common::Daemon::start_with_flags(r#"{"mcpServers":{}}"#, &["--max-connections", "1"]);
    let _held = initialized(&d.socket).await;
    let started = Instant::now();
    let mut waits = Vec::with_capacity(FLOOD);
    for _ in 0..FLOOD {
        let mut conn = connect(&d.socket, MAX).await.unwrap();
        waits.push(tokio::spawn(async move {
            let reply = parse(&next_line(&mut conn).await);
            let at = started.elapsed();
            expect_closed(&mut conn).await;
            (reply, at)
        }));
    }
    // Each silent client still gets the error (never a silent drop); count
    // those answered long before the 2 s a patient refusal waits.
    let mut prompt = 0;
    for w in waits {
        let (reply, at) = w.await.unwrap();
        assert_eq!(reply["error"]["code"], -32000, "{reply}");
        assert!(reply["id"].is_null(), "{reply}");
        if at < Duration::from_millis(1500) {
            prompt += 1;
        }
    }
    assert!(
        prompt >= FLOOD / 2,
        "only {prompt} of {FLOOD} flooding clients were refused at once"
    );
}

#[tokio::test]
async fn requests_over_the_in_flight_cap_get_an_error_and_the_rest_are_served() {
    let d = common::Daemon::start_with_flags(
        &common::ts_config(&[]),
        &["--max-requests-per-connection", "2"],
    );
    d.wait_ready(&["ts"], Duration::from_secs(30));
    let mut conn = initialized(&d.socket).await;
    let call = |id: u64, tool: &str, args: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"ts__{tool}","arguments":{args}}}}}"#
        )
    };
    // Two slow calls fill the budget; the third is refused at once.
    for id in [10, 11, 12] {
        conn.outbound
            .send(call(id, "slow", r#"{"ms":3000}"#).into())
            .await
            .unwrap();
    }
    let mut order = Vec::new();
    for _ in 0..3 {
        let reply = parse(&next_line(&mut conn).await);
        order.push(reply["id"].as_u64().unwrap());
        if reply["id"] == 12 {
            assert_eq!(reply["error"]["code"], -32000, "{reply}");
            let message = reply["error"]["message"].as_str().unwrap();
            assert!(message.contains("limit 2"), "{message}");
        } else {
            assert!(reply.get("result").is_some(), "{reply}");
        }
    }
    assert_eq!(
        order[0], 12,
        "the refusal waited for the slow calls: {order:?}"
    );
    // The budget is back once they are answered.
    let reply = parse(&round_trip(&mut conn, &call(13, "echo", r#"{"text":"hi"}"#)).await);
    assert!(reply.get("result").is_some(), "{reply}");
}
