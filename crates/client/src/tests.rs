//! [`ServerClient`] in-process against a fake server over a channel
//! [`Connection`]: each test programs the server's reply per request method
//! (zed's `FakeTransport` is the model). Time is paused, so a silence or a
//! timeout costs nothing and is exact.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::stateless::MAX_INPUT_ROUNDS;
use super::*;
use mcphost_protocol::Id;
use mcphost_transport::{BoxFuture, Outbound, TransportEvent};

/// What the fake server does with one request.
enum Reply {
    Result(Value),
    /// An error response with this code and `data` (`Null`: none).
    Error(i64, Value),
    /// No answer at all.
    Silence,
    /// The transport could not deliver the request (an HTTP error status).
    Fail,
    /// The server process exits.
    Exit,
}

type Script = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

struct FakeControl {
    kind: &'static str,
}

impl TransportControl for FakeControl {
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn stderr_tail(&self, _: usize) -> Vec<String> {
        Vec::new()
    }
    fn pid(&self) -> Option<u32> {
        None
    }
    fn kind(&self) -> &'static str {
        self.kind
    }
}

/// A server whose answers the test programs; every message the client
/// sends is kept, in order.
#[derive(Clone)]
struct FakeServer {
    scripts: Arc<Mutex<HashMap<String, Script>>>,
    received: Arc<Mutex<Vec<Value>>>,
    arrived: watch::Sender<usize>,
    to_client: mpsc::Sender<TransportEvent>,
}

impl FakeServer {
    /// A fake stdio server (`kind` "stdio": an exit on the probe is the
    /// server's own; no headers).
    fn start() -> (FakeServer, Connection) {
        let (outbound, from_client) = mpsc::channel(64);
        let (to_client, inbound) = mpsc::channel(64);
        let server = FakeServer {
            scripts: Default::default(),
            received: Default::default(),
            arrived: watch::channel(0).0,
            to_client,
        };
        tokio::spawn(server.clone().serve(from_client));
        let conn = Connection {
            outbound,
            inbound,
            control: Arc::new(FakeControl { kind: "stdio" }),
        };
        (server, conn)
    }

    /// Answer `method` with what `f` makes of the request's params.
    fn on(&self, method: &str, f: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        self.scripts
            .lock()
            .unwrap()
            .insert(method.to_owned(), Arc::new(f));
    }

    fn answer(&self, method: &str, result: Value) {
        self.on(method, move |_| Reply::Result(result.clone()));
    }

    /// The params of every `method` request received so far.
    fn requests(&self, method: &str) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|m| m["method"] == method && m.get("id").is_some())
            .map(|m| m["params"].clone())
            .collect()
    }

    /// The methods of the requests and notifications received, in order.
    fn methods(&self) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect()
    }

    /// Wait until a `method` request has come; returns the whole message.
    async fn wait_for(&self, method: &str) -> Value {
        let mut rx = self.arrived.subscribe();
        let find = || {
            self.received
                .lock()
                .unwrap()
                .iter()
                .find(|m| m["method"] == method)
                .cloned()
        };
        rx.wait_for(|_| find().is_some()).await.unwrap();
        find().unwrap()
    }

    async fn notify(&self, method: &str, params: Value) {
        let n = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.to_client
            .send(TransportEvent::Frame(n.to_string()))
            .await
            .unwrap();
    }

    async fn serve(self, mut from_client: mpsc::Receiver<Outbound>) {
        while let Some(out) = from_client.recv().await {
            let msg: Value = serde_json::from_str(&out.text).expect("the client sends JSON");
            self.received.lock().unwrap().push(msg.clone());
            self.arrived.send_modify(|n| *n += 1);
            let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) else {
                continue;
            };
            let script = self.scripts.lock().unwrap().get(method).cloned();
            let reply = match script {
                Some(s) => s(&msg["params"]),
                None => Reply::Error(error_codes::METHOD_NOT_FOUND, Value::Null),
            };
            let frame = |body: (&str, Value)| {
                let mut r = json!({"jsonrpc": "2.0", "id": id});
                r[body.0] = body.1;
                TransportEvent::Frame(r.to_string())
            };
            let event = match reply {
                Reply::Result(r) => frame(("result", r)),
                Reply::Error(code, data) => {
                    let mut e = json!({"code": code, "message": "refused by the fake"});
                    if !data.is_null() {
                        e["data"] = data;
                    }
                    frame(("error", e))
                }
                Reply::Silence => continue,
                Reply::Fail => TransportEvent::Failed {
                    id: serde_json::from_value::<Id>(id.clone()).unwrap(),
                    reason: "HTTP 502 Bad Gateway".to_owned(),
                },
                Reply::Exit => {
                    let closed = CloseReason::new("exited with status 1");
                    let _ = self.to_client.send(TransportEvent::Closed(closed)).await;
                    return;
                }
            };
            if self.to_client.send(event).await.is_err() {
                return;
            }
        }
    }
}

const PROBE: Duration = Duration::from_secs(10);

fn opts() -> ClientOptions {
    ClientOptions {
        probe_timeout: PROBE,
        init_timeout: Duration::from_secs(60),
        ..ClientOptions::default()
    }
}

fn discover_result(capabilities: Value) -> Value {
    json!({
        "supportedVersions": ["2026-07-28"],
        "capabilities": capabilities,
        "_meta": {META_SERVER_INFO: {"name": "fake", "version": "1.0"}},
    })
}

/// `initialize` answered in the revision the client asked for.
fn answers_initialize(server: &FakeServer, capabilities: Value) {
    server.on(methods::INITIALIZE, move |p| {
        Reply::Result(json!({
            "protocolVersion": p["protocolVersion"],
            "capabilities": capabilities,
            "serverInfo": {"name": "fake", "version": "1.0"},
        }))
    });
}

async fn connect(conn: Connection, opts: ClientOptions) -> Result<ServerClient, ClientError> {
    ServerClient::connect("fake", conn, opts).await
}

/// The probe answered `reply`; the server also answers `initialize`.
async fn probed(
    reply: impl Fn(&Value) -> Reply + Send + Sync + 'static,
) -> (FakeServer, Result<ServerClient, ClientError>) {
    let (server, conn) = FakeServer::start();
    server.on(methods::SERVER_DISCOVER, reply);
    answers_initialize(&server, json!({}));
    let client = connect(conn, opts()).await;
    (server, client)
}

const FELL_BACK: [&str; 3] = ["server/discover", "initialize", "notifications/initialized"];

/// The client speaks the handshake after the probe: `initialize`, then
/// `notifications/initialized`, and the server saw `expected`.
async fn assert_fell_back(server: &FakeServer, client: &ServerClient, expected: &[&str]) {
    assert_eq!(client.era(), Era::Handshake);
    assert_eq!(
        client.negotiated().protocol_version,
        ProtocolVersion::LATEST_HANDSHAKE
    );
    server.wait_for(methods::NOTIFICATION_INITIALIZED).await;
    assert_eq!(server.methods(), expected);
}

fn rpc_code(e: &ClientError) -> Option<i64> {
    e.rpc_error().map(|r| r.code)
}

// ---- The era-detection matrix: one test per probe outcome ----

#[tokio::test(start_paused = true)]
async fn a_discover_result_makes_the_client_stateless_without_initialize() {
    let (server, client) = probed(|_| Reply::Result(discover_result(json!({"tools": {}})))).await;
    let client = client.unwrap();
    assert_eq!(client.era(), Era::Stateless);
    let n = client.negotiated();
    assert_eq!(n.protocol_version, ProtocolVersion::V2026_07_28);
    assert_eq!(n.server_name.as_deref(), Some("fake"));
    assert!(n.capabilities.tools.is_some());
    assert_eq!(server.methods(), ["server/discover"]);
    let meta = &server.requests("server/discover")[0]["_meta"];
    assert_eq!(meta[META_PROTOCOL_VERSION], "2026-07-28");
}

#[tokio::test(start_paused = true)]
async fn unsupported_version_on_the_probe_is_retried_with_a_stateless_version_it_lists() {
    let calls = AtomicUsize::new(0);
    let (server, client) = probed(move |_| {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::Error(
                error_codes::UNSUPPORTED_VERSION,
                json!({"supported": ["2025-11-25", "2026-07-28"]}),
            )
        } else {
            Reply::Result(discover_result(json!({})))
        }
    })
    .await;
    assert_eq!(client.unwrap().era(), Era::Stateless);
    assert_eq!(server.methods(), ["server/discover", "server/discover"]);
}

#[tokio::test(start_paused = true)]
async fn unsupported_version_listing_only_handshake_revisions_falls_back_to_initialize() {
    let (server, client) = probed(|_| {
        Reply::Error(
            error_codes::UNSUPPORTED_VERSION,
            json!({"supported": ["2025-06-18", "2025-11-25"]}),
        )
    })
    .await;
    assert_fell_back(&server, &client.unwrap(), &FELL_BACK).await;
}

#[tokio::test(start_paused = true)]
async fn header_mismatch_on_the_probe_is_a_stateless_server_refusing_not_a_legacy_one() {
    let (server, client) =
        probed(|_| Reply::Error(error_codes::HEADER_MISMATCH, Value::Null)).await;
    let e = client.err().expect("a stateless error fails the connect");
    assert_eq!(rpc_code(&e), Some(error_codes::HEADER_MISMATCH), "{e}");
    assert_eq!(server.methods(), ["server/discover"], "no initialize");
}

#[tokio::test(start_paused = true)]
async fn missing_capability_on_the_probe_is_a_stateless_server_refusing_not_a_legacy_one() {
    let (server, client) = probed(|_| {
        Reply::Error(
            error_codes::MISSING_CAPABILITY,
            json!({"requiredCapabilities": {"sampling": {}}}),
        )
    })
    .await;
    let e = client.err().expect("a stateless error fails the connect");
    assert_eq!(rpc_code(&e), Some(error_codes::MISSING_CAPABILITY), "{e}");
    assert_eq!(server.methods(), ["server/discover"], "no initialize");
}

#[tokio::test(start_paused = true)]
async fn method_not_found_on_the_probe_falls_back_to_initialize() {
    let (server, client) =
        probed(|_| Reply::Error(error_codes::METHOD_NOT_FOUND, Value::Null)).await;
    assert_fell_back(&server, &client.unwrap(), &FELL_BACK).await;
}

#[tokio::test(start_paused = true)]
async fn invalid_params_on_the_probe_falls_back_to_initialize() {
    let (server, client) = probed(|_| Reply::Error(error_codes::INVALID_PARAMS, Value::Null)).await;
    assert_fell_back(&server, &client.unwrap(), &FELL_BACK).await;
}

#[tokio::test(start_paused = true)]
async fn a_transport_failure_on_the_probe_falls_back_to_initialize() {
    let (server, client) = probed(|_| Reply::Fail).await;
    assert_fell_back(&server, &client.unwrap(), &FELL_BACK).await;
}

#[tokio::test(start_paused = true)]
async fn silence_on_the_probe_falls_back_to_initialize_after_the_probe_timeout() {
    let started = tokio::time::Instant::now();
    let (server, client) = probed(|_| Reply::Silence).await;
    let took = started.elapsed();
    let expected = [
        "server/discover",
        "notifications/cancelled",
        "initialize",
        "notifications/initialized",
    ];
    assert_fell_back(&server, &client.unwrap(), &expected).await;
    assert!(
        took >= PROBE && took < PROBE + Duration::from_secs(1),
        "waited {took:?} for a probe limit of {PROBE:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_that_exits_on_the_probe_is_reported_as_exited_on_probe() {
    let (server, client) = probed(|_| Reply::Exit).await;
    let e = client.err().expect("the server is gone");
    assert!(matches!(e, ClientError::ExitedOnProbe { .. }), "{e}");
    assert_eq!(server.methods(), ["server/discover"]);
}

// ---- The handshake era ----

#[tokio::test(start_paused = true)]
async fn each_pinned_handshake_revision_is_asked_for_in_initialize_then_initialized_follows() {
    let revisions = ProtocolVersion::ALL
        .into_iter()
        .filter(|v| v.era() == Era::Handshake);
    for v in revisions {
        let (server, conn) = FakeServer::start();
        answers_initialize(&server, json!({}));
        let pinned = ClientOptions {
            protocol_version: Some(v),
            ..opts()
        };
        let client = connect(conn, pinned).await.unwrap();
        assert_eq!(client.era(), Era::Handshake, "{v}");
        assert_eq!(client.negotiated().protocol_version, v);
        server.wait_for(methods::NOTIFICATION_INITIALIZED).await;
        assert_eq!(
            server.methods(),
            ["initialize", "notifications/initialized"],
            "{v}"
        );
        let init = &server.requests("initialize")[0];
        assert_eq!(init["protocolVersion"], v.as_str());
        assert_eq!(init["clientInfo"]["name"], "mcphost");
    }
}

#[tokio::test(start_paused = true)]
async fn an_older_revision_in_the_initialize_answer_is_the_one_spoken() {
    let (server, conn) = FakeServer::start();
    server.answer(
        methods::INITIALIZE,
        json!({"protocolVersion": "2024-11-05", "capabilities": {}, "serverInfo": {}}),
    );
    let known = ClientOptions {
        known_era: Some(Era::Handshake),
        ..opts()
    };
    let client = connect(conn, known).await.unwrap();
    assert_eq!(
        client.negotiated().protocol_version,
        ProtocolVersion::V2024_11_05
    );
    assert_eq!(
        server.requests("initialize")[0]["protocolVersion"],
        "2025-11-25"
    );
}

#[tokio::test(start_paused = true)]
async fn an_unknown_revision_in_the_initialize_answer_is_refused() {
    let (server, conn) = FakeServer::start();
    server.answer(
        methods::INITIALIZE,
        json!({"protocolVersion": "1999-01-01", "capabilities": {}}),
    );
    let known = ClientOptions {
        known_era: Some(Era::Handshake),
        ..opts()
    };
    let e = connect(conn, known).await.err().expect("refused");
    assert!(matches!(e, ClientError::UnsupportedVersion { .. }), "{e}");
}

// ---- Paged listings ----

/// A handshake client of a server declaring `capabilities`.
async fn handshake_client(
    server: &FakeServer,
    conn: Connection,
    capabilities: Value,
) -> ServerClient {
    answers_initialize(server, capabilities);
    let known = ClientOptions {
        known_era: Some(Era::Handshake),
        ..opts()
    };
    connect(conn, known).await.unwrap()
}

fn tool(name: &str) -> Value {
    json!({"name": name, "inputSchema": {"type": "object"}})
}

#[tokio::test(start_paused = true)]
async fn a_listing_follows_next_cursor_to_the_last_page() {
    let (server, conn) = FakeServer::start();
    server.on(methods::TOOLS_LIST, |p| {
        Reply::Result(match p["cursor"].as_str() {
            None => json!({"tools": [tool("a")], "nextCursor": "p2"}),
            Some("p2") => json!({"tools": [tool("b"), tool("c")], "nextCursor": "p3"}),
            _ => json!({"tools": [tool("d")]}),
        })
    });
    let client = handshake_client(&server, conn, json!({"tools": {}})).await;
    let names: Vec<String> = client
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["a", "b", "c", "d"]);
    let cursors: Vec<Value> = server
        .requests("tools/list")
        .iter()
        .map(|p| p["cursor"].clone())
        .collect();
    assert_eq!(cursors, [Value::Null, json!("p2"), json!("p3")]);
}

#[tokio::test(start_paused = true)]
async fn a_cursor_given_twice_ends_the_listing_with_an_error() {
    let (server, conn) = FakeServer::start();
    server.answer(
        methods::TOOLS_LIST,
        json!({"tools": [tool("a")], "nextCursor": "again"}),
    );
    let client = handshake_client(&server, conn, json!({"tools": {}})).await;
    let e = client.list_tools().await.expect_err("endless");
    assert!(matches!(e, ClientError::RepeatedCursor { .. }), "{e}");
    assert_eq!(server.requests("tools/list").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_list_the_server_did_not_declare_is_refused_without_asking() {
    let (server, conn) = FakeServer::start();
    let client = handshake_client(&server, conn, json!({})).await;
    let e = client.list_prompts().await.expect_err("not declared");
    assert!(
        matches!(e, ClientError::CapabilityNotDeclared { .. }),
        "{e}"
    );
    assert!(server.requests("prompts/list").is_empty());
}

// ---- Re-listing on change ----

/// Tools listed as `tool-N`, N counting the listings.
fn counts_listings(server: &FakeServer) {
    let listings = AtomicUsize::new(0);
    server.on(methods::TOOLS_LIST, move |_| {
        let n = listings.fetch_add(1, Ordering::SeqCst);
        Reply::Result(json!({"tools": [tool(&format!("tool-{n}"))]}))
    });
}

async fn next_tools(events: &mut FeedReceiver<ServerEvent>) -> Vec<String> {
    loop {
        let e = tokio::time::timeout(Duration::from_secs(30), events.recv())
            .await
            .expect("no re-list came")
            .unwrap();
        if let ServerEvent::ToolsChanged(tools) = e {
            return tools.iter().map(|t| t.name.clone()).collect();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn tools_list_changed_is_answered_with_the_tools_listed_again() {
    let (server, conn) = FakeServer::start();
    counts_listings(&server);
    let client = handshake_client(&server, conn, json!({"tools": {"listChanged": true}})).await;
    let mut events = client.subscribe();
    server
        .notify(methods::NOTIFICATION_TOOLS_LIST_CHANGED, json!({}))
        .await;
    assert_eq!(next_tools(&mut events).await, ["tool-0"]);
    assert_eq!(server.requests("tools/list").len(), 1);
}

/// The warnings logged while it lives (a subscriber of the test's thread:
/// paused-time tests run every task there).
struct Warnings(Arc<parking_lot::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, e: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Text<'a>(&'a mut String);
        impl tracing::field::Visit for Text<'_> {
            fn record_debug(&mut self, _: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{v:?} "));
            }
        }
        if *e.metadata().level() <= tracing::Level::WARN {
            let mut text = String::new();
            e.record(&mut Text(&mut text));
            self.0.lock().push(text);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_relist_cut_short_by_the_server_going_away_is_an_event_not_a_warning() {
    use tracing_subscriber::layer::SubscriberExt;
    let warnings = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let _log = tracing::subscriber::set_default(
        tracing_subscriber::registry().with(Warnings(warnings.clone())),
    );
    let (server, conn) = FakeServer::start();
    let client = handshake_client(&server, conn, json!({"tools": {"listChanged": true}})).await;
    let mut events = client.subscribe();
    server.on(methods::TOOLS_LIST, |_| Reply::Exit);
    server
        .notify(methods::NOTIFICATION_TOOLS_LIST_CHANGED, json!({}))
        .await;
    loop {
        match events.recv().await {
            Ok(ServerEvent::RelistFailed { what, .. }) => {
                assert_eq!(what, "tools");
                break;
            }
            Ok(_) => {}
            Err(e) => panic!("no RelistFailed event: {e}"),
        }
    }
    assert!(warnings.lock().is_empty(), "{:?}", warnings.lock());
}

// ---- The stateless era ----

async fn stateless_client(
    server: &FakeServer,
    conn: Connection,
    capabilities: Value,
    host: Arc<dyn Host>,
) -> ServerClient {
    server.answer(methods::SERVER_DISCOVER, discover_result(capabilities));
    let client = connect(conn, ClientOptions { host, ..opts() })
        .await
        .unwrap();
    assert_eq!(client.era(), Era::Stateless);
    client
}

fn declines() -> Arc<dyn Host> {
    Arc::new(PolicyHost::new(Some(ElicitationPolicy::Decline), None))
}

#[tokio::test(start_paused = true)]
async fn a_stateless_call_answers_input_required_through_the_host_and_retries_with_the_state() {
    let (server, conn) = FakeServer::start();
    server.on(methods::TOOLS_CALL, |p| {
        if p.get("inputResponses").is_some() {
            return Reply::Result(json!({"content": [{"type": "text", "text": "done"}]}));
        }
        Reply::Result(json!({
            "resultType": "input_required",
            "inputRequests": {"ask": {"method": "elicitation/create", "params": {
                "message": "Go on?",
                "requestedSchema": {"type": "object", "properties": {}},
            }}},
            "requestState": "round-1",
        }))
    });
    let client = stateless_client(&server, conn, json!({"tools": {}}), declines()).await;
    let args = mcphost_protocol::to_raw(&json!({"x": 1})).unwrap();
    let r = client
        .call_tool("t", Some(args), CallOptions::default())
        .await
        .unwrap();
    assert!(r.raw.get().contains("done"), "{}", r.raw.get());
    let calls = server.requests("tools/call");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1]["inputResponses"]["ask"]["action"], "decline");
    assert_eq!(calls[1]["requestState"], "round-1");
    for c in &calls {
        assert_eq!(c["name"], "t");
        assert_eq!(c["arguments"], json!({"x": 1}));
        assert_eq!(c["_meta"][META_PROTOCOL_VERSION], "2026-07-28");
        assert_eq!(c["_meta"][META_CLIENT_INFO]["name"], "mcphost");
    }
}

#[tokio::test(start_paused = true)]
async fn a_server_that_never_stops_asking_for_input_is_given_up_on() {
    let (server, conn) = FakeServer::start();
    server.answer(
        methods::TOOLS_CALL,
        json!({"resultType": "input_required", "requestState": "again"}),
    );
    let client = stateless_client(&server, conn, json!({"tools": {}}), declines()).await;
    let e = client
        .call_tool("t", None, CallOptions::default())
        .await
        .expect_err("abandoned");
    assert!(e.to_string().contains("asked for input"), "{e}");
    assert_eq!(server.requests("tools/call").len(), MAX_INPUT_ROUNDS);
}

#[tokio::test(start_paused = true)]
async fn input_the_client_did_not_declare_is_refused_without_asking_the_host() {
    let (server, conn) = FakeServer::start();
    server.answer(
        methods::TOOLS_CALL,
        json!({"resultType": "input_required", "inputRequests": {"s": {"method": "sampling/createMessage"}}}),
    );
    let client = stateless_client(&server, conn, json!({"tools": {}}), declines()).await;
    let e = client
        .call_tool("t", None, CallOptions::default())
        .await
        .expect_err("sampling was not declared");
    assert!(e.to_string().contains("was not declared"), "{e}");
    assert_eq!(server.requests("tools/call").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_stateless_client_listens_for_what_the_server_declared_and_relists_on_its_notifications()
 {
    let (server, conn) = FakeServer::start();
    counts_listings(&server);
    server.on(methods::SUBSCRIPTIONS_LISTEN, |_| Reply::Silence);
    let caps = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true}});
    let client = stateless_client(&server, conn, caps, Arc::new(NoHost)).await;
    let mut events = client.subscribe();
    let listen = server.wait_for(methods::SUBSCRIPTIONS_LISTEN).await;
    assert_eq!(
        listen["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    // Its notifications carry the listen request's id.
    let tagged = json!({"_meta": {META_SUBSCRIPTION_ID: listen["id"]}});
    server
        .notify(methods::NOTIFICATION_TOOLS_LIST_CHANGED, tagged)
        .await;
    assert_eq!(next_tools(&mut events).await, ["tool-0"]);
    // A subscribed resource opens the stream again with its URI.
    client.subscribe_resource("file:///a").await.unwrap();
    let mut rx = server.arrived.subscribe();
    rx.wait_for(|_| server.requests("subscriptions/listen").len() == 2)
        .await
        .unwrap();
    assert_eq!(
        server.requests("subscriptions/listen")[1]["notifications"]["resourceSubscriptions"],
        json!(["file:///a"])
    );
}

#[tokio::test(start_paused = true)]
async fn handshake_only_notifications_and_log_levels_are_not_sent_to_a_stateless_server() {
    let (server, conn) = FakeServer::start();
    server.answer(methods::TOOLS_LIST, json!({"tools": []}));
    let caps = json!({"tools": {}, "logging": {}});
    let client = stateless_client(&server, conn, caps, Arc::new(NoHost)).await;
    client
        .notify(methods::NOTIFICATION_ROOTS_LIST_CHANGED, None)
        .await
        .unwrap();
    client.set_log_level("debug").await.unwrap();
    client.list_tools().await.unwrap();
    assert_eq!(server.methods(), ["server/discover", "tools/list"]);
    assert_eq!(
        server.requests("tools/list")[0]["_meta"][META_LOG_LEVEL],
        "debug"
    );
}
