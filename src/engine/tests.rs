//! Session behaviour that needs the engine's insides: a lagged event queue.

use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use tokio::sync::broadcast;

use crate::registry::RegistryEvent;
use crate::transport::{BoxFuture, CloseReason, TransportControl, TransportEvent};

struct NoControl;

impl TransportControl for NoControl {
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
    fn stderr_tail(&self, _n: usize) -> Vec<String> {
        Vec::new()
    }
    fn pid(&self) -> Option<u32> {
        None
    }
    fn kind(&self) -> &'static str {
        "memory"
    }
}

/// An engine over two disabled servers: they have a state, but no process.
fn engine() -> Arc<Engine> {
    let cfg = crate::config::parse(
        r#"{"mcpServers":{"a":{"command":"a","disabled":true},"b":{"command":"b","disabled":true}},"loginShellPath":false}"#,
        std::path::Path::new("/nonexistent/config.json"),
        &crate::config::process_env,
    )
    .unwrap();
    EngineBuilder::new(cfg).start()
}

/// The client's end of an in-memory session.
struct Client {
    to_session: mpsc::Sender<TransportEvent>,
    from_session: mpsc::Receiver<crate::transport::Outbound>,
}

impl Client {
    async fn line(&mut self) -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.from_session.recv())
            .await
            .expect("nothing from the session in time")
            .expect("the session closed")
            .text;
        serde_json::from_str(&line).unwrap()
    }
}

fn connect(engine: &Arc<Engine>, events: broadcast::Receiver<RegistryEvent>) -> Client {
    let (out_tx, out_rx) = mpsc::channel(1024);
    let (in_tx, in_rx) = mpsc::channel(16);
    let conn = Connection {
        outbound: out_tx,
        inbound: in_rx,
        control: Arc::new(NoControl),
    };
    engine.serve_events("test", conn, SessionLimits::default(), events);
    Client {
        to_session: in_tx,
        from_session: out_rx,
    }
}

// current_thread: nothing runs the session while the test floods its queue.
#[tokio::test(flavor = "current_thread")]
async fn lagged_event_queue_resends_every_list_and_every_server_state() {
    let engine = engine();
    let (events, rx) = broadcast::channel(2);
    let mut client = connect(&engine, rx);
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    client
        .to_session
        .send(TransportEvent::Frame(init.to_owned()))
        .await
        .unwrap();
    assert_eq!(client.line().await["id"], 1);

    // Ten events into a queue of two, with no await in between: the
    // session's next receive reports a lag, then the last two events.
    for _ in 0..10 {
        events.send(RegistryEvent::ToolsChanged).unwrap();
    }
    let mut seen = Vec::new();
    let expected = [
        "notifications/tools/list_changed",
        "notifications/resources/list_changed",
        "notifications/prompts/list_changed",
        "server_state a",
        "server_state b",
    ];
    while !expected.iter().all(|e| seen.iter().any(|s| s == e)) {
        let msg = tokio::time::timeout(Duration::from_secs(5), client.line())
            .await
            .unwrap_or_else(|_| panic!("after a lag the client got only {seen:?}"));
        let method = msg["method"].as_str().unwrap_or_default().to_owned();
        seen.push(match method.strip_prefix("notifications/mcphost/") {
            Some(kind) => format!("{kind} {}", msg["params"]["name"].as_str().unwrap()),
            None => method,
        });
    }
    client
        .to_session
        .send(TransportEvent::Closed(CloseReason::new("done")))
        .await
        .unwrap();
}
