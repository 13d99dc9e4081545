//! Session behaviour that needs the engine's insides: a lagged event queue.

use std::time::Duration;

use tokio::sync::mpsc;

use super::*;
use tokio::sync::broadcast;

use mcphost_registry::RegistryEvent;
use mcphost_transport::{BoxFuture, CloseReason, TransportControl, TransportEvent};

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
    let cfg = mcphost_config::parse(
        r#"{"mcpServers":{"a":{"command":"a","disabled":true},"b":{"command":"b","disabled":true}},"loginShellPath":false}"#,
        std::path::Path::new("/nonexistent/config.json"),
        &mcphost_auth::process_env,
    )
    .unwrap();
    EngineBuilder::new(cfg).start()
}

/// The client's end of an in-memory session.
struct Client {
    to_session: mpsc::Sender<TransportEvent>,
    from_session: mpsc::Receiver<mcphost_transport::Outbound>,
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

impl Client {
    async fn send(&self, frame: serde_json::Value) {
        self.to_session
            .send(TransportEvent::Frame(frame.to_string()))
            .await
            .unwrap();
    }

    async fn request(
        &mut self,
        id: i64,
        method: &str,
        params: serde_json::Value,
    ) -> serde_json::Value {
        self.send(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await;
        loop {
            let msg = self.line().await;
            if msg["id"] == id {
                return msg;
            }
        }
    }
}

fn stateless_meta() -> serde_json::Value {
    serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
    })
}

#[tokio::test]
async fn a_stateless_session_is_settled_by_its_first_request_and_refuses_the_handshake() {
    use serde_json::json;
    let engine = engine();
    let mut c = connect(&engine, engine.registry().subscribe());
    // Invalid stateless requests settle nothing.
    let r = c.request(1, "server/discover", json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let mut meta = stateless_meta();
    meta["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let r = c.request(2, "tools/list", json!({"_meta": meta})).await;
    assert_eq!(r["error"]["code"], -32022, "{r}");
    assert_eq!(r["error"]["data"]["requested"], "1900-01-01", "{r}");
    assert_eq!(r["error"]["data"]["supported"][0], "2026-07-28", "{r}");
    assert!(
        r["error"]["data"]["supported"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "2025-11-25"),
        "{r}"
    );
    let mut meta = stateless_meta();
    meta.as_object_mut()
        .unwrap()
        .remove("io.modelcontextprotocol/clientCapabilities");
    let r = c.request(3, "tools/list", json!({"_meta": meta})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("clientCapabilities"),
        "{r}"
    );

    let r = c
        .request(4, "server/discover", json!({"_meta": stateless_meta()}))
        .await;
    let res = &r["result"];
    assert_eq!(res["resultType"], "complete", "{r}");
    assert_eq!(res["supportedVersions"], json!(["2026-07-28"]), "{r}");
    assert_eq!(res["capabilities"]["tools"]["listChanged"], true, "{r}");
    assert_eq!(res["ttlMs"], 0, "{r}");
    assert_eq!(res["cacheScope"], "private", "{r}");
    assert_eq!(
        res["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcphost",
        "{r}"
    );

    let r = c
        .request(5, "tools/list", json!({"_meta": stateless_meta()}))
        .await;
    assert_eq!(r["result"]["tools"], json!([]), "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["cacheScope"], "private", "{r}");
    // Now settled: every request needs its _meta, and the handshake is refused.
    let r = c.request(6, "tools/list", json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = c
        .request(7, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}))
        .await;
    assert_eq!(r["error"]["code"], -32022, "{r}");
    assert_eq!(
        r["error"]["data"]["supported"],
        json!(["2026-07-28"]),
        "{r}"
    );
    // The management methods work, with the stateless result fields.
    let r = c
        .request(8, "mcphost/status", json!({"_meta": stateless_meta()}))
        .await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["clients"], 1, "{r}");
    let r = c
        .request(
            9,
            "mcphost/host/register",
            json!({"_meta": stateless_meta()}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // A forged requestState is refused.
    let r = c
        .request(10, "tools/call", json!({"_meta": stateless_meta(), "name": "a__x", "inputResponses": {}, "requestState": "00ff"}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requestState"),
        "{r}"
    );
}

#[tokio::test]
async fn a_handshake_session_refuses_stateless_requests() {
    use serde_json::json;
    let engine = engine();
    let mut c = connect(&engine, engine.registry().subscribe());
    let r = c
        .request(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}))
        .await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
    let r = c
        .request(2, "server/discover", json!({"_meta": stateless_meta()}))
        .await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let r = c
        .request(3, "tools/list", json!({"_meta": stateless_meta()}))
        .await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let r = c.request(4, "tools/list", json!({})).await;
    assert!(r["result"]["tools"].is_array(), "{r}");
    assert!(r["result"].get("resultType").is_none(), "{r}");
}

#[tokio::test]
async fn a_listen_stream_is_acknowledged_then_tagged_until_cancelled() {
    use serde_json::json;
    let engine = engine();
    let (events, rx) = broadcast::channel(16);
    let mut c = connect(&engine, rx);
    c.send(json!({"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen",
        "params": {"_meta": stateless_meta(), "notifications": {"toolsListChanged": true, "promptsListChanged": false}}}))
        .await;
    let ack = c.line().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L1",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    events.send(RegistryEvent::PromptsChanged).unwrap();
    events.send(RegistryEvent::ToolsChanged).unwrap();
    let n = c.line().await;
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L1",
        "{n}"
    );
    // A second stream, on prompts only: its notification of a later event
    // shows that the session has handled every earlier one.
    c.send(
        json!({"jsonrpc": "2.0", "id": "L2", "method": "subscriptions/listen",
        "params": {"_meta": stateless_meta(), "notifications": {"promptsListChanged": true}}}),
    )
    .await;
    let ack = c.line().await;
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "L2",
        "{ack}"
    );
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "L1"}}))
        .await;
    // What L1 gets for one tools change, fenced by L2's prompts notification.
    async fn round(c: &mut Client, events: &broadcast::Sender<RegistryEvent>) -> usize {
        events.send(RegistryEvent::ToolsChanged).unwrap();
        events.send(RegistryEvent::PromptsChanged).unwrap();
        let mut on_l1 = 0;
        loop {
            let n = c.line().await;
            match n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].as_str() {
                Some("L2") => return on_l1,
                Some("L1") => on_l1 += 1,
                _ => panic!("not a stream's notification: {n}"),
            }
        }
    }
    // The cancel ends the stream once the session has handled it (it does
    // not answer a cancelled request): a round with nothing on L1 ...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while round(&mut c, &events).await > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "L1 still tagged after its cancel"
        );
    }
    // ... and nothing more comes on it after that; the next line is this answer.
    assert_eq!(
        round(&mut c, &events).await,
        0,
        "L1 was tagged again after it ended"
    );
    c.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": stateless_meta()}}))
        .await;
    let r = c.line().await;
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
}

#[tokio::test]
async fn daemon_shutdown_is_refused_without_a_daemon_and_waits_for_being_alone_with_one() {
    use serde_json::json;
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
    // An engine in its host (direct mode, the C library): nothing to stop.
    let engine = engine();
    let mut c = connect(&engine, engine.registry().subscribe());
    c.request(1, "initialize", init.clone()).await;
    let r = c.request(2, "mcphost/daemon/shutdown", json!({})).await;
    assert_eq!(r["error"]["code"], -32600, "{r}");

    // A daemon's engine: with another client, `ifAlone` keeps it running.
    let cfg = mcphost_config::parse(
        r#"{"loginShellPath":false}"#,
        std::path::Path::new("/nonexistent/config.json"),
        &mcphost_auth::process_env,
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let engine = EngineBuilder::new(cfg)
        .info(EngineInfo {
            version: Some("9.9.9-test".into()),
            stop: Some(stop.clone()),
            ..Default::default()
        })
        .start();
    let mut a = connect(&engine, engine.registry().subscribe());
    let mut b = connect(&engine, engine.registry().subscribe());
    a.request(1, "initialize", init.clone()).await;
    b.request(1, "initialize", init).await;
    let r = a.request(2, "mcphost/status", json!({})).await;
    assert_eq!(r["result"]["version"], "9.9.9-test", "{r}");
    let r = a
        .request(3, "mcphost/daemon/shutdown", json!({"ifAlone": true}))
        .await;
    assert_eq!(r["result"], json!({"stopping": false, "clients": 2}), "{r}");
    assert!(!stop.is_cancelled());
    // Without `ifAlone` it stops whoever else is there.
    let r = b.request(2, "mcphost/daemon/shutdown", json!({})).await;
    assert_eq!(r["result"]["stopping"], true, "{r}");
    assert!(stop.is_cancelled());
}

/// `MCPHOST_REQUESTS` is what the C header and the bindings are checked
/// against: every name in it must be answered (an error about its params or
/// its door is an answer), by both eras, and nothing else of `mcphost/*`.
#[tokio::test]
async fn every_listed_mcphost_request_is_answered_in_both_eras_and_no_other() {
    use serde_json::json;
    let engine = engine();
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
    let mut handshake = connect(&engine, engine.registry().subscribe());
    handshake.request(1, "initialize", init).await;
    let mut stateless = connect(&engine, engine.registry().subscribe());
    let mut id = 10;
    for method in methods::MCPHOST_REQUESTS {
        for (era, client, params) in [
            ("handshake", &mut handshake, json!({})),
            (
                "stateless",
                &mut stateless,
                json!({"_meta": stateless_meta()}),
            ),
        ] {
            id += 1;
            let r = client.request(id, method, params).await;
            assert_ne!(
                r["error"]["code"], -32601,
                "{method} ({era}) is listed in MCPHOST_REQUESTS but not answered: {r}"
            );
        }
    }
    // Both kept their session (daemon/shutdown is refused here: no daemon).
    let r = handshake
        .request(98, "mcphost/no-such-method", json!({}))
        .await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let r = stateless
        .request(
            99,
            "mcphost/no-such-method",
            json!({"_meta": stateless_meta()}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
}

/// docs/ipc.md's method tables describe every `mcphost/*` request.
#[test]
fn the_ipc_reference_describes_every_mcphost_request() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/ipc.md"))
        .expect("docs/ipc.md");
    let missing: Vec<&&str> = methods::MCPHOST_REQUESTS
        .iter()
        .filter(|m| !doc.contains(&format!("| `{m}` |")))
        .collect();
    assert!(missing.is_empty(), "docs/ipc.md has no row for {missing:?}");
}

/// `mcphost bridge --profile` configures its connection before the host's
/// first message: that settles no era, sends nothing unasked, and the
/// session keeps the options in whichever era the host then speaks.
#[tokio::test]
async fn a_session_configured_before_its_first_message_keeps_the_options_in_either_era() {
    use serde_json::json;
    let cfg = mcphost_config::parse(
        r#"{"loginShellPath":false,"profiles":{"find":{"toolMode":"search"}}}"#,
        std::path::Path::new("/nonexistent/config.json"),
        &mcphost_auth::process_env,
    )
    .unwrap();
    let engine = EngineBuilder::new(cfg).start();
    let names = |r: &serde_json::Value| -> Vec<String> {
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools in {r}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let meta = vec!["search_tools", "describe_tool", "call_tool"];

    // The handshake after it.
    let mut c = connect(&engine, engine.registry().subscribe());
    c.send(json!({"jsonrpc": "2.0", "id": 1, "method": "mcphost/session/configure", "params": {"profile": "find"}}))
        .await;
    // The first line is its answer (no list_changed before initialize).
    let r = c.line().await;
    assert_eq!(r["id"], 1, "{r}");
    assert_eq!(r["result"]["profile"], "find", "{r}");
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
    let r = c.request(2, "initialize", init).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
    let r = c.request(3, "tools/list", json!({})).await;
    assert_eq!(names(&r), meta, "{r}");

    // A stateless client after it.
    let mut s = connect(&engine, engine.registry().subscribe());
    s.request(1, "mcphost/session/configure", json!({"profile": "find"}))
        .await;
    let r = s
        .request(2, "tools/list", json!({"_meta": stateless_meta()}))
        .await;
    assert_eq!(names(&r), meta, "{r}");

    // An unknown profile is an error naming it, and settles nothing either.
    let mut u = connect(&engine, engine.registry().subscribe());
    let r = u
        .request(1, "mcphost/session/configure", json!({"profile": "nope"}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("nope"),
        "{r}"
    );
}
