//! One socket connection to the engine carries many requests at once: a
//! call that waits on its server must not hold up the others on the same
//! connection, and cancelling it reaches the server.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TESTSERVER, text_of};
use mcphost::client::{CallOptions, ClientOptions, ServerClient};
use mcphost::engine::{Engine, EngineBuilder};
use mcphost::ipc::{self, ListenOptions};
use mcphost::protocol::RawValue;
use mcphost::registry::RegistryEvent;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

fn engine() -> Arc<Engine> {
    let text =
        format!(r#"{{"mcpServers":{{"ts":{{"command":{TESTSERVER:?}}}}},"loginShellPath":false}}"#);
    let cfg = mcphost::config::parse(
        &text,
        std::path::Path::new("/nonexistent/config.json"),
        &|_| None,
    )
    .unwrap();
    EngineBuilder::new(cfg).start()
}

/// A client over the socket, and the registry's events (the server's stderr
/// among them).
async fn socket_client(
    dir: &std::path::Path,
) -> (ServerClient, broadcast::Receiver<RegistryEvent>) {
    let engine = engine();
    engine.registry().settled(Duration::from_secs(20)).await;
    assert!(engine.registry().catalog().route("ts__echo").is_some());
    let events = engine.registry().subscribe();
    let socket = dir.join("d.sock");
    let mut listener = ipc::listen(ListenOptions::new(&socket)).await.unwrap();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            engine.serve("test", conn);
        }
    });
    let conn = ipc::connect(&socket, ipc::DEFAULT_MAX_MESSAGE_BYTES)
        .await
        .unwrap();
    let client = ServerClient::connect("socket", conn, ClientOptions::default())
        .await
        .unwrap();
    (client, events)
}

fn raw(s: &str) -> Option<Box<RawValue>> {
    Some(RawValue::from_string(s.to_owned()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_does_not_delay_a_fast_one_on_the_same_socket_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (client, mut events) = socket_client(dir.path()).await;
    let client = Arc::new(client);
    let cancel = CancellationToken::new();
    let slow = {
        let client = client.clone();
        let opts = CallOptions {
            cancel: Some(cancel.clone()),
            ..CallOptions::default()
        };
        tokio::spawn(async move {
            let started = Instant::now();
            let r = client
                .call_tool("ts__slow", raw(r#"{"ms":20000}"#), opts)
                .await;
            (r.map(|r| r.is_error), started.elapsed())
        })
    };
    // The slow call is pending at the server before the fast ones start.
    common::wait::stderr_line(
        &mut events,
        "ts",
        &common::wait::in_flight_line("slow"),
        Duration::from_secs(20),
    )
    .await;
    for n in 0..20 {
        let r = client
            .call_tool(
                "ts__echo",
                raw(&format!(r#"{{"text":"fast {n}"}}"#)),
                CallOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(
            text_of(&serde_json::from_str(r.raw.get()).unwrap()),
            format!("fast {n}")
        );
        // Answered while the slow call is still pending: not behind it
        // (no clock bound, which a loaded machine could break).
        assert!(
            !slow.is_finished(),
            "the slow call ended before fast call {n} was answered"
        );
    }
    // Cancelling it ends it at once, not after its 20 s.
    cancel.cancel();
    let (r, took) = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .expect("cancelling did not end the slow call")
        .unwrap();
    assert!(r.is_err(), "the cancelled call returned {r:?}");
    assert!(took < Duration::from_secs(10), "it took {took:?}");
    // The connection still works afterwards.
    let r = client
        .call_tool(
            "ts__echo",
            raw(r#"{"text":"after"}"#),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        text_of(&serde_json::from_str(r.raw.get()).unwrap()),
        "after"
    );
}
