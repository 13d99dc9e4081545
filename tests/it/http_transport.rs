//! The HTTP transports driven against the in-repo fault server
//! (tests/common/http_fault.rs): Streamable HTTP with sessions, JSON and SSE
//! answers, server messages on a POST's stream, resumption, the standalone
//! GET stream, DELETE, errors, limits, auth, and the legacy HTTP+SSE
//! fallback; then the same server through `--direct` and the daemon.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::http_fault::{
    Auth, Cut, FaultServer, GetMode, LATEST, POST_ACCEPT, Recorded, Reply, SERVER_NAME, Script,
};
use common::{Daemon, Sandbox, js, poll, quick_opts, raw, text_of};
use mcphost::client::{CallOptions, ClientError, ClientOptions, Host, ServerClient, ServerEvent};
use mcphost::protocol::capabilities::RootsCap;
use mcphost::protocol::{ClientCapabilities, ErrorObject, RawValue};
use mcphost::transport::TransportControl;
use mcphost::transport::http::{HttpConfig, HttpMode};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

struct Open {
    client: ServerClient,
    control: Arc<dyn TransportControl>,
}

/// Connects through the HTTP transport and runs the handshake; the error
/// text of whichever step failed.
async fn try_open_with(cfg: HttpConfig, opts: ClientOptions) -> Result<Open, String> {
    let conn = mcphost::transport::http::connect("srv", cfg)
        .await
        .map_err(|e| e.to_string())?;
    let control = conn.control.clone();
    let client = ServerClient::connect("srv", conn, opts)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Open { client, control })
}

async fn open_with(cfg: HttpConfig, opts: ClientOptions) -> Open {
    let url = cfg.url.clone();
    try_open_with(cfg, opts)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

async fn open(srv: &FaultServer) -> Open {
    open_with(HttpConfig::new(srv.url()), quick_opts()).await
}

fn args(v: Value) -> Option<Box<RawValue>> {
    Some(raw(&v.to_string()))
}

/// Calls `echo` with `{"n": n}` and checks the text that comes back.
async fn echo(client: &ServerClient, n: u64) {
    let r = client
        .call_tool("echo", args(json!({ "n": n })), CallOptions::default())
        .await
        .unwrap_or_else(|e| panic!("echo {n}: {e}"));
    let v: Value = serde_json::from_str(r.raw.get()).unwrap();
    assert_eq!(text_of(&v), format!(r#"{{"n":{n}}}"#), "{v}");
    assert!(!r.is_error);
}

fn timeout(d: Duration) -> CallOptions {
    CallOptions {
        timeout: Some(d),
        ..CallOptions::default()
    }
}

/// Calls `slow` for `ms` with the deadline `limit`; the call must fail
/// (`what` says what its success would mean). The error.
async fn slow_fails(client: &ServerClient, ms: u64, limit: Duration, what: &str) -> ClientError {
    client
        .call_tool("slow", args(json!({ "ms": ms })), timeout(limit))
        .await
        .expect_err(what)
}

/// Requests after the handshake's initialize (POST, GET and DELETE).
fn after_initialize(srv: &FaultServer) -> Vec<Recorded> {
    srv.requests()
        .into_iter()
        .skip_while(|r| !r.is_rpc("initialize"))
        .skip(1)
        .collect()
}

// ---------------------------------------------------------------------------
// Streamable HTTP: headers, sessions, versions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_session_and_protocol_version_on_every_request() {
    let srv = FaultServer::with(Script {
        get: GetMode::Stream,
        ..Script::default()
    });
    let mut cfg = HttpConfig::new(srv.url());
    cfg.headers = vec![
        ("X-Custom".into(), "custom-value".into()),
        ("Authorization".into(), "Bearer static-token".into()),
    ];
    let Open { client, control } = open_with(cfg, quick_opts()).await;
    assert_eq!(control.kind(), "streamable-http");
    assert_eq!(client.negotiated().protocol_version.to_string(), LATEST);
    assert_eq!(
        client.negotiated().server_name.as_deref(),
        Some(SERVER_NAME)
    );
    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"echo") && names.contains(&"slow"),
        "{names:?}"
    );
    echo(&client, 1).await;
    srv.wait_for("the standalone GET", WAIT, |r| r.method == "GET")
        .await;
    client.shutdown().await;
    srv.wait_for("DELETE on shutdown", WAIT, |r| r.method == "DELETE")
        .await;

    let issued = srv.sessions_issued();
    assert_eq!(issued.len(), 1, "{}", srv.summary());
    let all = srv.requests();
    // First the era probe (2026-07-28's server/discover), sessionless; this
    // server answers it as a handshake-era server does, then initialize.
    let probe = &all[0];
    assert!(probe.is_rpc("server/discover"), "{}", srv.summary());
    assert_eq!(probe.session(), None, "the probe carried a session id");
    let init = &all[1];
    assert!(init.is_rpc("initialize"), "{}", srv.summary());
    assert_eq!(init.session(), None, "initialize carried a session id");
    assert_eq!(
        init.header("mcp-protocol-version"),
        None,
        "MCP-Protocol-Version on initialize (nothing is negotiated yet)"
    );
    for r in &all {
        assert_eq!(
            r.header("x-custom"),
            Some("custom-value"),
            "{}",
            r.line(srv.started())
        );
        assert_eq!(
            r.header_all("authorization"),
            ["Bearer static-token"],
            "{}",
            r.line(srv.started())
        );
        match r.method.as_str() {
            "POST" => {
                assert_eq!(
                    r.header_all("accept"),
                    [POST_ACCEPT],
                    "{}",
                    r.line(srv.started())
                );
                assert!(
                    r.header("content-type")
                        .is_some_and(|c| c.starts_with("application/json")),
                    "{}",
                    r.line(srv.started())
                );
            }
            "GET" => assert!(
                r.header("accept")
                    .is_some_and(|a| a.contains("text/event-stream")),
                "{}",
                r.line(srv.started())
            ),
            _ => {}
        }
    }
    let later = after_initialize(&srv);
    assert!(later.len() >= 5, "{}", srv.summary()); // initialized, list, call, GET, DELETE
    for r in &later {
        assert_eq!(
            r.session(),
            Some(issued[0].as_str()),
            "{}",
            r.line(srv.started())
        );
        assert_eq!(
            r.header("mcp-protocol-version"),
            Some(LATEST),
            "{}",
            r.line(srv.started())
        );
        assert!(r.status.is_some_and(|s| s < 300), "{}", srv.summary());
    }
    assert_eq!(srv.rpc("notifications/initialized").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_version_header_is_the_negotiated_one() {
    let srv = FaultServer::with(Script {
        protocol_version: Some("2025-06-18".into()),
        ..Script::default()
    });
    let Open { client, .. } = open(&srv).await;
    assert_eq!(
        client.negotiated().protocol_version.to_string(),
        "2025-06-18"
    );
    echo(&client, 2).await;
    client.shutdown().await;
    for r in after_initialize(&srv) {
        assert_eq!(
            r.header("mcp-protocol-version"),
            Some("2025-06-18"),
            "{}",
            r.line(srv.started())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_sessions_gets_no_session_header() {
    let srv = FaultServer::with(Script {
        sessions: false,
        ..Script::default()
    });
    let Open { client, .. } = open(&srv).await;
    echo(&client, 3).await;
    client.shutdown().await;
    assert!(srv.sessions_issued().is_empty());
    for r in srv.requests() {
        assert_eq!(r.session(), None, "{}", r.line(srv.started()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_session_reinitializes_and_retries_once() {
    let srv = FaultServer::start();
    let Open { client, .. } = open(&srv).await;
    echo(&client, 1).await;
    srv.expire_session();
    // The call still succeeds: 404 → initialize without the header → retry.
    echo(&client, 2).await;
    let issued = srv.sessions_issued();
    let inits = srv.rpc("initialize");
    assert_eq!(inits.len(), 2, "{}", srv.summary());
    assert_eq!(issued.len(), 2);
    assert_eq!(
        inits[1].session(),
        None,
        "re-initialize carried the dead session id"
    );
    assert_eq!(inits[1].header("mcp-protocol-version"), None);
    let calls: Vec<Recorded> = srv
        .requests()
        .into_iter()
        .filter(|r| r.is_call_of("echo"))
        .collect();
    assert_eq!(
        calls.len(),
        3,
        "one call, one 404, one retry: {}",
        srv.summary()
    );
    assert_eq!(calls[1].session(), Some(issued[0].as_str()));
    assert_eq!(calls[1].status, Some(404));
    assert_eq!(calls[2].session(), Some(issued[1].as_str()));
    assert_eq!(calls[2].status, Some(200));
    assert!(calls[2].at > inits[1].at);
    // The new session is initialized properly before it is used.
    let initialized = srv.rpc("notifications/initialized");
    assert_eq!(initialized.len(), 2, "{}", srv.summary());
    assert_eq!(initialized[1].session(), Some(issued[1].as_str()));
    // And keeps working, on the new session.
    echo(&client, 3).await;
    let last = srv
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.is_call_of("echo"))
        .unwrap();
    assert_eq!(last.session(), Some(issued[1].as_str()));
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_404s_again_after_reinitializing_fails_without_a_loop() {
    let srv = FaultServer::with(Script::default().fail(Some("tools/call:slow"), 404, usize::MAX));
    let Open { client, .. } = open(&srv).await;
    let err = slow_fails(
        &client,
        1,
        Duration::from_secs(10),
        "a call answered 404 every time succeeded",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = srv
        .requests()
        .into_iter()
        .filter(|r| r.is_call_of("slow"))
        .count();
    assert_eq!(
        calls,
        2,
        "the call is retried exactly once: {}",
        srv.summary()
    );
    assert!(srv.rpc("initialize").len() <= 2, "{}", srv.summary());
    let msg = err.to_string();
    assert!(msg.contains("srv") && msg.contains("404"), "{msg}");
    echo(&client, 4).await;
    client.shutdown().await;
}

// ---------------------------------------------------------------------------
// JSON and SSE answers, server messages on a POST's stream

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_sse_answers_both_work() {
    let srv = FaultServer::with(
        Script::default()
            .reply("initialize", Reply::sse())
            .reply("tools/list", Reply::json())
            .reply("tools/call:echo", Reply::sse().comments())
            .reply("ping", Reply::sse().retry(50)),
    );
    let Open { client, .. } = open(&srv).await;
    assert_eq!(client.list_tools().await.unwrap().len(), 3);
    for n in 0..5 {
        echo(&client, n).await;
    }
    // A priming event (id, empty data) is not a message.
    client.ping().await.unwrap();
    echo(&client, 99).await;
    assert!(client.close_reason().is_none());
    // Nothing had to be resumed.
    assert!(
        srv.with_method("GET")
            .iter()
            .all(|g| g.header("last-event-id").is_none())
    );
    client.shutdown().await;
}

/// Answers `roots/list`.
struct RootsHost;

impl Host for RootsHost {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            roots: Some(RootsCap {
                list_changed: false,
            }),
            ..ClientCapabilities::default()
        }
    }
    fn handle(
        &self,
        r: mcphost::client::HostRequest,
    ) -> mcphost::transport::BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        let method = r.method.as_str();
        let out = if method == "roots/list" {
            Ok(raw(
                r#"{"roots":[{"uri":"file:///fault-root","name":"root"}]}"#,
            ))
        } else {
            Err(ErrorObject::method_not_found(method))
        };
        Box::pin(std::future::ready(out))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_requests_and_notifications_before_the_response() {
    let srv = FaultServer::with(Script::default().reply(
        "tools/call:echo",
        Reply::sse()
            .notify(json!({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "logger": "fault", "data": "before the result"}}))
            .progress()
            .ask("roots/list")
            .ask("ping"),
    ));
    let opts = ClientOptions {
        host: Arc::new(RootsHost),
        ..quick_opts()
    };
    let Open { client, .. } = open_with(HttpConfig::new(srv.url()), opts).await;
    let mut events = client.subscribe();
    let progress = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let p = progress.clone();
    let on_progress: mcphost::jsonrpc::ProgressCallback = Arc::new(move |pr| {
        p.lock()
            .unwrap()
            .push(format!("{} {:?} {:?}", pr.progress, pr.total, pr.message));
    });
    let r = client
        .call_tool(
            "echo",
            args(json!({"n": 5})),
            CallOptions {
                on_progress: Some(on_progress),
                ..CallOptions::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}; {}", srv.summary()));
    let v: Value = serde_json::from_str(r.raw.get()).unwrap();
    assert_eq!(text_of(&v), r#"{"n":5}"#);

    // Both server requests were answered by new POSTs, while the call's
    // stream was still open (the server waited for them).
    let answers: Vec<Value> = srv
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.is_rpc_response())
        .map(|r| r.json().unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{}", srv.summary());
    let roots = answers
        .iter()
        .find(|a| a["result"]["roots"].is_array())
        .unwrap_or_else(|| panic!("no roots/list answer: {answers:?}"));
    assert_eq!(roots["result"]["roots"][0]["uri"], "file:///fault-root");
    assert!(
        answers.iter().any(|a| a["result"] == json!({})),
        "ping: {answers:?}"
    );
    for a in srv.requests().iter().filter(|r| r.is_rpc_response()) {
        assert!(a.session().is_some(), "{}", a.line(srv.started()));
        assert_eq!(a.status, Some(202));
    }
    // The notification reached the client as a log event, the progress
    // callback ran.
    let log = tokio::time::timeout(WAIT, async {
        loop {
            match events.recv().await {
                Ok(ServerEvent::Log(p)) => return p.get().to_owned(),
                Ok(_) => {}
                Err(e) => panic!("events ended: {e}"),
            }
        }
    })
    .await
    .expect("the notifications/message on the POST stream never arrived");
    assert!(log.contains("before the result"), "{log}");
    let progress = progress.lock().unwrap().clone();
    assert_eq!(progress.len(), 1, "{progress:?}");
    assert!(progress[0].contains("half way"), "{progress:?}");
    client.shutdown().await;
}

// ---------------------------------------------------------------------------
// Resumption

async fn resume_case(how: Cut, notify_first: bool) {
    const RETRY: u64 = 400;
    let mut reply = Reply::sse().retry(RETRY).cut(how);
    if notify_first {
        reply = reply.notify(json!({"jsonrpc": "2.0", "method": "notifications/message",
                                    "params": {"level": "info", "data": "pre-cut"}}));
    }
    let srv = FaultServer::with(Script::default().reply("tools/call:echo", reply));
    let Open { client, .. } = open(&srv).await;
    let t = Instant::now();
    echo(&client, 7).await;
    let took = t.elapsed();
    let ctx = format!("{how:?}, notify_first {notify_first}: {}", srv.summary());

    let cuts = srv.cuts();
    assert_eq!(cuts.len(), 1, "{ctx}");
    let (stream, cut_at) = cuts[0].clone();
    let gets: Vec<Recorded> = srv
        .with_method("GET")
        .into_iter()
        .filter(|g| g.header("last-event-id").is_some())
        .collect();
    assert_eq!(gets.len(), 1, "one resuming GET: {ctx}");
    let g = &gets[0];
    // The last event received: the priming event, or the notification.
    let want = format!("{stream}-{}", if notify_first { 1 } else { 0 });
    assert_eq!(g.header("last-event-id"), Some(want.as_str()), "{ctx}");
    assert_eq!(g.status, Some(200), "{ctx}");
    assert!(g.session().is_some(), "{ctx}");
    assert_eq!(g.header("mcp-protocol-version"), Some(LATEST), "{ctx}");
    let waited = g.at.saturating_duration_since(cut_at);
    assert!(
        waited >= Duration::from_millis(RETRY),
        "reconnected {waited:?} after the cut; retry was {RETRY} ms: {ctx}"
    );
    assert!(
        waited < Duration::from_millis(RETRY + 2000),
        "reconnected only {waited:?} after the cut: {ctx}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}: {ctx}");
    // Resumed by GET, not by POSTing again; a disconnect is not a cancel.
    let posts = srv
        .requests()
        .into_iter()
        .filter(|r| r.is_call_of("echo"))
        .count();
    assert_eq!(posts, 1, "{ctx}");
    assert!(srv.rpc("notifications/cancelled").is_empty(), "{ctx}");
    // The connection is fine afterwards.
    srv.script(|s| s.replies.clear());
    echo(&client, 8).await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_closed_before_the_response_resumes_with_last_event_id() {
    resume_case(Cut::Close, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_stream_resumes_after_the_last_event_received() {
    resume_case(Cut::Abort, true).await;
}

// ---------------------------------------------------------------------------
// The standalone GET stream

async fn no_get_stream(status: u16) {
    let srv = FaultServer::with(Script {
        get: GetMode::Status(status),
        ..Script::default()
    });
    let Open { client, .. } = open(&srv).await;
    echo(&client, 1).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    echo(&client, 2).await;
    let gets = srv.with_method("GET");
    assert!(
        gets.len() <= 1,
        "GET answered {status} was retried: {}",
        srv.summary()
    );
    assert!(client.close_reason().is_none());
    if status == 404 {
        // "No stream", not an expired session.
        assert_eq!(srv.rpc("initialize").len(), 1, "{}", srv.summary());
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_405_means_no_stream_and_is_not_retried() {
    no_get_stream(405).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_404_and_406_mean_no_stream_too() {
    no_get_stream(406).await;
    no_get_stream(404).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_get_stream_delivers_list_changed() {
    let srv = FaultServer::with(Script {
        get: GetMode::Stream,
        ..Script::default()
    });
    let Open { client, .. } = open(&srv).await;
    let mut events = client.subscribe();
    let start = Instant::now();
    while srv.open_standalone() == 0 {
        assert!(start.elapsed() < WAIT, "no GET stream: {}", srv.summary());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    srv.script(|s| s.extra_tools.push("late".into()));
    let pushed = srv
        .push_standalone(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    assert_eq!(pushed, 1);
    let tools = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(ServerEvent::ToolsChanged(t)) = events.recv().await {
                return t;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no re-list after list_changed: {}", srv.summary()));
    assert!(tools.iter().any(|t| t.name == "late"), "{tools:?}");
    client.shutdown().await;
}

// ---------------------------------------------------------------------------
// Errors, timeouts, limits

/// A JSON answer that holds no response to the request fails it at once,
/// with what the server sent, instead of at its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_answer_without_the_response_fails_the_call_at_once() {
    let srv = FaultServer::start();
    let Open { client, .. } = open(&srv).await;
    srv.script(|s| {
        *s = std::mem::take(s).reply(
            "tools/call:slow",
            Reply::json().body(
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
            ),
        );
    });
    let started = std::time::Instant::now();
    let err = slow_fails(
        &client,
        1,
        Duration::from_secs(30),
        "a call with no response succeeded",
    )
    .await;
    let msg = err.to_string();
    assert!(
        msg.contains("'srv'") && msg.contains("Parse error"),
        "{msg}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{msg}");
    echo(&client, 1).await;
}

/// A renewed session is a blank slate on the server: the subscriptions and
/// log level the client set are sent again, and their answers stay inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_session_gets_the_subscriptions_and_log_level_again() {
    let srv = FaultServer::start();
    let Open { client, .. } = open(&srv).await;
    client.set_log_level("debug").await.unwrap();
    for (method, uri) in [
        ("resources/subscribe", "test://a"),
        ("resources/subscribe", "test://b"),
        ("resources/unsubscribe", "test://b"),
    ] {
        let params = raw(&json!({ "uri": uri }).to_string());
        client
            .request_raw(method, Some(params), CallOptions::default())
            .await
            .unwrap();
    }
    srv.expire_session();
    echo(&client, 1).await;
    let issued = srv.sessions_issued();
    assert_eq!(issued.len(), 2, "{}", srv.summary());
    let on_new: Vec<(String, Value)> = srv
        .requests()
        .into_iter()
        .filter(|r| r.session() == Some(issued[1].as_str()))
        .filter_map(|r| Some((r.rpc_method()?, r.json()?["params"].clone())))
        .collect();
    let methods: Vec<&str> = on_new.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        methods,
        [
            "notifications/initialized",
            "logging/setLevel",
            "resources/subscribe",
            "tools/call"
        ],
        "{}",
        srv.summary()
    );
    assert_eq!(on_new[1].1["level"], "debug");
    assert_eq!(on_new[2].1["uri"], "test://a");
    // The replayed answers were not handed to the client as strays.
    echo(&client, 2).await;
    assert!(client.close_reason().is_none());
}

/// server-everything answers 400 "No valid session ID provided", not the
/// spec's 404, for a session it lost; that is renewed too. A 400 about
/// something else is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_about_the_session_renews_it_and_another_400_does_not() {
    let srv = FaultServer::start();
    srv.script(|s| s.unknown_session_status = 400);
    let Open { client, .. } = open(&srv).await;
    echo(&client, 1).await;
    srv.expire_session();
    echo(&client, 2).await;
    assert_eq!(srv.rpc("initialize").len(), 2, "{}", srv.summary());
    assert_eq!(srv.sessions_issued().len(), 2);

    srv.script(|s| {
        *s = std::mem::take(s).fail(Some("tools/call:slow"), 400, 1);
    });
    let err = slow_fails(
        &client,
        1,
        Duration::from_secs(10),
        "a call answered 400 succeeded",
    )
    .await;
    assert!(err.to_string().contains("400"), "{err}");
    assert_eq!(
        srv.rpc("initialize").len(),
        2,
        "a 400 that is not about the session renewed it: {}",
        srv.summary()
    );
    echo(&client, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_fails_that_call_only() {
    let srv = FaultServer::start();
    let Open { client, .. } = open(&srv).await;
    srv.script(|s| {
        *s = std::mem::take(s).fail(Some("tools/call:slow"), 503, 1);
    });
    let err = slow_fails(
        &client,
        1,
        Duration::from_secs(10),
        "a call answered 503 succeeded",
    )
    .await;
    let msg = err.to_string();
    assert!(
        msg.contains("'srv'"),
        "the error does not name the server: {msg}"
    );
    assert!(
        msg.contains("503"),
        "the error does not name the status: {msg}"
    );
    // Fails fast, not by timing out.
    assert!(!msg.contains("timed out"), "{msg}");
    echo(&client, 1).await;
    assert_eq!(client.list_tools().await.unwrap().len(), 3);
    // And the failed tool works once the server does.
    client
        .call_tool("slow", args(json!({"ms": 1})), CallOptions::default())
        .await
        .unwrap();
    assert!(client.close_reason().is_none());
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_on_every_request_fails_each_call_clearly() {
    let srv = FaultServer::start();
    let Open { client, .. } = open(&srv).await;
    srv.script(|s| {
        *s = std::mem::take(s).fail(Some("tools/call"), 500, usize::MAX);
    });
    for _ in 0..3 {
        let msg = client
            .call_tool("echo", args(json!({})), timeout(Duration::from_secs(10)))
            .await
            .expect_err("succeeded against a 500")
            .to_string();
        assert!(msg.contains("'srv'") && msg.contains("500"), "{msg}");
    }
    client.ping().await.unwrap();
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_answers_time_out_and_are_cancelled() {
    let srv = FaultServer::with(
        Script::default().reply("tools/list", Reply::json().delay(Duration::from_secs(3))),
    );
    let Open { client, .. } = open(&srv).await;
    // A slow tool, answered as JSON.
    let t = Instant::now();
    let err = slow_fails(
        &client,
        5000,
        Duration::from_millis(500),
        "a 5 s tool finished within 500 ms",
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(err.to_string().contains("timed out"), "{err}");
    let cancelled = srv
        .wait_for("notifications/cancelled", WAIT, |r| {
            r.is_rpc("notifications/cancelled")
        })
        .await;
    assert!(cancelled.session().is_some());
    // A slow SSE answer times out the same way.
    srv.script(|s| {
        s.replies
            .insert("tools/call:slow".into(), Reply::sse().retry(100));
    });
    let err = slow_fails(
        &client,
        5000,
        Duration::from_millis(500),
        "a 5 s SSE tool finished within 500 ms",
    )
    .await;
    assert!(err.to_string().contains("timed out"), "{err}");
    // A delayed list, with the client's default timeout.
    let opts = ClientOptions {
        request_timeout: Duration::from_millis(700),
        ..quick_opts()
    };
    let Open { client: c2, .. } = open_with(HttpConfig::new(srv.url()), opts).await;
    let err = c2.list_tools().await.expect_err("a 3 s list within 700 ms");
    assert!(err.to_string().contains("timed out"), "{err}");
    // Timeouts did not break anything.
    echo(&client, 1).await;
    echo(&c2, 2).await;
    client.shutdown().await;
    c2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_answers_fail_that_call_and_the_connection_survives() {
    const LIMIT: usize = 64 * 1024;
    for sse in [false, true] {
        let reply = if sse { Reply::sse() } else { Reply::json() };
        let srv = FaultServer::with(Script::default().reply("tools/call:big", reply));
        let mut cfg = HttpConfig::new(srv.url());
        cfg.max_message_bytes = LIMIT;
        let Open { client, .. } = open_with(cfg, quick_opts()).await;
        // Under the limit is fine.
        client
            .call_tool("big", args(json!({"bytes": 1000})), CallOptions::default())
            .await
            .unwrap();
        let err = client
            .call_tool(
                "big",
                args(json!({"bytes": 4 * LIMIT})),
                timeout(Duration::from_secs(10)),
            )
            .await
            .expect_err("an answer 4x over the limit was accepted");
        let msg = err.to_string();
        assert!(
            msg.contains(&LIMIT.to_string()) && msg.contains("srv"),
            "sse={sse}: the error does not name the limit: {msg}"
        );
        assert!(!msg.contains("timed out"), "sse={sse}: {msg}");
        echo(&client, 1).await;
        client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_on_shutdown_and_a_405_is_fine() {
    for status in [200, 405] {
        let srv = FaultServer::with(Script {
            delete_status: status,
            ..Script::default()
        });
        let Open { client, .. } = open(&srv).await;
        let sid = srv.sessions_issued()[0].clone();
        let t = Instant::now();
        client.shutdown().await;
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "shutdown took {:?}",
            t.elapsed()
        );
        let deletes = srv.with_method("DELETE");
        assert_eq!(deletes.len(), 1, "{}", srv.summary());
        assert_eq!(deletes[0].session(), Some(sid.as_str()));
        assert_eq!(deletes[0].status, Some(status));
        // Shutdown is idempotent: no second DELETE.
        client.shutdown().await;
        assert_eq!(srv.with_method("DELETE").len(), 1, "{}", srv.summary());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_with_its_name() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = HttpConfig::new(format!("http://127.0.0.1:{port}/mcp"));
    cfg.connect_timeout = Duration::from_secs(2);
    let t = Instant::now();
    let err = match try_open_with(cfg, quick_opts()).await {
        Ok(_) => panic!("connected to nothing"),
        Err(e) => e,
    };
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(err.contains("srv"), "{err}");
}

// ---------------------------------------------------------------------------
// Auth

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_auth_required_without_fallback() {
    for status in [401, 403] {
        let srv = FaultServer::with(Script {
            auth: Some(Auth {
                token: "right".into(),
                status,
            }),
            ..Script::default()
        });
        let mut cfg = HttpConfig::new(srv.url());
        cfg.headers = vec![("Authorization".into(), "Bearer wrong".into())];
        let err = match try_open_with(cfg, quick_opts()).await {
            Ok(_) => panic!("connected with refused credentials"),
            Err(e) => e,
        };
        assert!(err.contains(&status.to_string()), "{status}: {err}");
        assert!(err.contains("srv"), "{status}: {err}");
        // Never a legacy fallback on 401/403, and no retries.
        assert!(
            srv.with_method("GET").is_empty(),
            "{status}: fell back to legacy SSE: {}",
            srv.summary()
        );
        assert_eq!(srv.requests().len(), 1, "{status}: {}", srv.summary());

        // With the right token it works, the token on every request.
        let mut cfg = HttpConfig::new(srv.url());
        cfg.headers = vec![("Authorization".into(), "Bearer right".into())];
        let Open { client, .. } = open_with(cfg, quick_opts()).await;
        echo(&client, 1).await;
        client.shutdown().await;
        for r in srv.requests().iter().skip(1) {
            assert_eq!(r.header("authorization"), Some("Bearer right"));
        }
    }
}

// ---------------------------------------------------------------------------
// Legacy HTTP+SSE

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_falls_back_to_legacy_sse_on_400_404_405() {
    for status in [400, 404, 405] {
        let srv = FaultServer::with(Script::legacy(status));
        let conn = mcphost::transport::http::connect("srv", HttpConfig::new(srv.url()))
            .await
            .unwrap();
        let control = conn.control.clone();
        let client = ServerClient::connect("srv", conn, quick_opts())
            .await
            .unwrap_or_else(|e| panic!("{status}: {e}; {}", srv.summary()));
        assert_eq!(control.kind(), "sse", "{status}");
        assert_eq!(client.list_tools().await.unwrap().len(), 3);
        echo(&client, u64::from(status)).await;
        let all = srv.requests();
        // First the era probe and the Streamable HTTP initialize, both
        // refused; then the SSE GET.
        assert!(all[0].is_rpc("server/discover"), "{}", srv.summary());
        assert_eq!(all[0].status, Some(status));
        assert!(all[1].is_rpc("initialize"), "{}", srv.summary());
        assert_eq!(all[1].status, Some(status));
        assert_eq!(all[2].method, "GET", "{}", srv.summary());
        assert_eq!(all[2].path, "/mcp");
        // Everything else went to the endpoint the event named.
        for r in all.iter().skip(3).filter(|r| r.method == "POST") {
            assert!(
                r.path.starts_with("/messages?sessionId="),
                "{status}: {}",
                r.line(srv.started())
            );
            assert_eq!(r.status, Some(202));
        }
        assert_eq!(srv.rpc("initialize").len(), 2, "{}", srv.summary());
        client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_sse_skips_detection() {
    let srv = FaultServer::with(Script::legacy(405));
    let mut cfg = HttpConfig::new(srv.url());
    cfg.mode = HttpMode::Sse;
    cfg.headers = vec![("X-Custom".into(), "legacy".into())];
    let Open { client, control } = open_with(cfg, quick_opts()).await;
    assert_eq!(control.kind(), "sse");
    echo(&client, 1).await;
    client.shutdown().await;
    let all = srv.requests();
    assert_eq!(all[0].method, "GET", "{}", srv.summary());
    assert!(
        all.iter().all(|r| r.path != "/mcp" || r.method == "GET"),
        "POSTed to the SSE URL: {}",
        srv.summary()
    );
    for r in &all {
        assert_eq!(
            r.header("x-custom"),
            Some("legacy"),
            "{}",
            r.line(srv.started())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_mode_never_falls_back() {
    let srv = FaultServer::with(Script::legacy(405));
    let mut cfg = HttpConfig::new(srv.url());
    cfg.mode = HttpMode::Streamable;
    let err = match try_open_with(cfg, quick_opts()).await {
        Ok(_) => panic!("connected to a legacy server in streamable mode"),
        Err(e) => e,
    };
    assert!(err.contains("405"), "{err}");
    assert!(srv.with_method("GET").is_empty(), "{}", srv.summary());
}

// ---------------------------------------------------------------------------
// Every HTTP step is bounded, and stop interrupts any of them

/// An initialize the server never answers (JSON or a silent event stream).
fn hung_initialize(sse: bool) -> FaultServer {
    let reply = if sse { Reply::sse() } else { Reply::json() };
    FaultServer::with(Script::default().reply("initialize", reply.delay(Duration::from_secs(3600))))
}

fn init_within(d: Duration) -> (ClientOptions, impl Fn(HttpConfig) -> HttpConfig) {
    let opts = ClientOptions {
        init_timeout: d,
        ..quick_opts()
    };
    (opts, move |mut cfg: HttpConfig| {
        cfg.init_timeout = d;
        cfg
    })
}

/// Connects, failing the test if that takes `limit`; the error text.
async fn open_fails_within(cfg: HttpConfig, opts: ClientOptions, limit: Duration) -> String {
    let t = Instant::now();
    match tokio::time::timeout(limit, try_open_with(cfg, opts)).await {
        Err(_) => panic!("connect still pending after {:?}", t.elapsed()),
        Ok(Ok(_)) => panic!("connected to a server that never answers"),
        Ok(Err(e)) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialize_that_is_never_answered_fails_within_the_init_timeout_5() {
    for sse in [false, true] {
        let srv = hung_initialize(sse);
        let (opts, bound) = init_within(Duration::from_secs(1));
        let t = Instant::now();
        let err = open_fails_within(bound(HttpConfig::new(srv.url())), opts, WAIT * 2).await;
        let took = t.elapsed();
        assert!(took < WAIT, "sse={sse}: took {took:?}: {err}");
        assert!(
            err.contains("'srv'") && err.contains("initialize"),
            "sse={sse}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_interrupts_a_pending_initialize_5() {
    let srv = hung_initialize(false);
    let conn = mcphost::transport::http::connect("srv", HttpConfig::new(srv.url()))
        .await
        .unwrap();
    let control = conn.control.clone();
    // The handshake would wait a minute.
    let connecting = tokio::spawn(ServerClient::connect("srv", conn, quick_opts()));
    srv.wait_for("initialize", WAIT, |r| r.is_rpc("initialize"))
        .await;
    let t = Instant::now();
    tokio::time::timeout(WAIT, control.shutdown())
        .await
        .unwrap_or_else(|_| panic!("shutdown still pending after {:?}", t.elapsed()));
    let r = tokio::time::timeout(WAIT, connecting)
        .await
        .expect("the handshake still pending after shutdown")
        .unwrap();
    assert!(r.is_err(), "connected after shutdown");
}

/// The legacy event stream's GET that never answers bounds the handshake
/// too, whether asked for (`type: "sse"`) or detected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_event_stream_that_never_opens_fails_within_the_init_timeout_5() {
    for mode in [HttpMode::Sse, HttpMode::Auto] {
        let srv = FaultServer::with(Script {
            get_delay: Duration::from_secs(3600),
            ..Script::legacy(405)
        });
        let (opts, bound) = init_within(Duration::from_secs(1));
        let mut cfg = bound(HttpConfig::new(srv.url()));
        cfg.mode = mode;
        let t = Instant::now();
        let err = open_fails_within(cfg, opts, WAIT * 2).await;
        assert!(
            t.elapsed() < WAIT,
            "{mode:?}: took {:?}: {err}",
            t.elapsed()
        );
        assert!(err.contains("srv"), "{mode:?}: {err}");
        assert!(
            srv.with_method("GET").len() == 1,
            "{mode:?}: {}",
            srv.summary()
        );
    }
}

// ---------------------------------------------------------------------------
// Servers that close streams to make us poll

/// Each stream carries one priming event (a new id) and closes until the
/// answer is ready, as 2025-11-25 allows: a new event id is progress, so the
/// call lives until its own deadline, however many polls that takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_streams_to_make_us_poll_keeps_a_long_call_alive_10() {
    let srv = FaultServer::with(
        Script::default().reply("tools/call:slow", Reply::sse().retry(50).poll()),
    );
    let Open { client, .. } = open(&srv).await;
    let r = client
        .call_tool(
            "slow",
            args(json!({"ms": 2000})),
            timeout(Duration::from_secs(30)),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}; {}", srv.summary()));
    let v: Value = serde_json::from_str(r.raw.get()).unwrap();
    assert_eq!(text_of(&v), "slept 2000 ms");
    let polls = srv
        .with_method("GET")
        .into_iter()
        .filter(|g| g.header("last-event-id").is_some())
        .count();
    assert!(
        polls > 5,
        "the server was polled {polls} times: {}",
        srv.summary()
    );

    // The request's own deadline is the limit: a 1 s deadline ends a 30 s
    // call long before the tool would answer (generous for a loaded box).
    let t = Instant::now();
    let err = slow_fails(
        &client,
        30_000,
        Duration::from_secs(1),
        "a 30 s call finished within 1 s",
    )
    .await;
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(t.elapsed() < WAIT, "{:?}", t.elapsed());
    echo(&client, 1).await;
}

// ---------------------------------------------------------------------------
// HTTP error bodies, and what counts as a lost session

/// `data` with a big integer and a decimal: a `Value` round trip changes both.
const ERROR_DATA: &str = r#"{"big":12345678901234567890123,"d":1.10}"#;

/// The error as the caller sees it: code, message and `data` text.
fn caller_error(err: &mcphost::client::ClientError) -> (i64, String, Option<String>) {
    let e = err
        .rpc_error()
        .unwrap_or_else(|| panic!("not the server's JSON-RPC error: {err}"));
    (
        e.code,
        e.message.clone(),
        e.data.as_ref().map(|d| d.get().to_owned()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jsonrpc_error_in_an_http_error_body_reaches_the_caller_intact_11() {
    let srv = FaultServer::start();
    let Open { client, .. } = open(&srv).await;
    for status in [400, 404, 422, 500] {
        let body =
            format!(r#"{{"code":-32602,"message":"bad ms for {status}","data":{ERROR_DATA}}}"#);
        srv.script(|s| {
            *s = std::mem::take(s).fail_rpc(Some("tools/call:slow"), status, 1, &body, true);
        });
        let err = slow_fails(&client, 1, WAIT, "a call answered with an error succeeded").await;
        let (code, message, data) = caller_error(&err);
        assert_eq!(code, -32602, "{status}: {err}");
        assert_eq!(message, format!("bad ms for {status}"));
        assert_eq!(
            data.as_deref(),
            Some(ERROR_DATA),
            "{status}: the error's data was not relayed as sent: {err}"
        );
        // A 404 that answers the request is not a lost session.
        assert_eq!(
            srv.rpc("initialize").len(),
            1,
            "{status}: renewed the session: {}",
            srv.summary()
        );
        echo(&client, u64::from(status)).await;
    }
    client.shutdown().await;
}

/// A server whose `slow` answers once with `status` and this JSON-RPC
/// error body: the call fails with the error's `code` and the session is
/// kept (no second initialize). The server and the client, still open.
async fn an_error_answer_keeps_the_session(
    status: u16,
    body: &str,
    code: i64,
) -> (FaultServer, ServerClient) {
    let srv = FaultServer::with(Script::default().fail_rpc(
        Some("tools/call:slow"),
        status,
        1,
        body,
        true,
    ));
    let Open { client, .. } = open(&srv).await;
    let err = slow_fails(&client, 1, WAIT, "a call answered with an error succeeded").await;
    assert_eq!(caller_error(&err).0, code, "{status}: {err}");
    assert_eq!(
        srv.rpc("initialize").len(),
        1,
        "{status}: renewed the session: {}",
        srv.summary()
    );
    (srv, client)
}

/// A 404 that is the server's JSON-RPC answer to the request (-32601, say)
/// is that answer, not an expired session: no re-initialize.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_that_answers_the_request_does_not_renew_the_session_11() {
    let (srv, client) = an_error_answer_keeps_the_session(
        404,
        r#"{"code":-32601,"message":"Method not found"}"#,
        -32601,
    )
    .await;
    assert_eq!(srv.sessions_issued().len(), 1);
    echo(&client, 1).await;
}

/// Only a 400 that rejects the message at the transport on an established
/// session counts as a lost session (server-everything's "No valid session
/// ID provided"); a 400 that answers the request, even one that mentions a
/// session, is that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_that_mentions_a_session_is_not_a_lost_session_11() {
    let (srv, client) = an_error_answer_keeps_the_session(
        400,
        r#"{"code":-32602,"message":"invalid argument: session_name"}"#,
        -32602,
    )
    .await;
    // A plain-text 400 about "the session" is not one either.
    srv.script(|s| {
        *s = std::mem::take(s).fail(Some("tools/call:slow"), 400, 1);
    });
    let _ = slow_fails(&client, 1, WAIT, "a call answered 400 succeeded").await;
    assert_eq!(srv.rpc("initialize").len(), 1, "{}", srv.summary());
    echo(&client, 1).await;
}

// ---------------------------------------------------------------------------
// A renewed session brings the server's new state

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_session_updates_the_revision_and_capabilities_12() {
    let srv = FaultServer::start();
    let Open { client, .. } = open(&srv).await;
    assert_eq!(client.negotiated().protocol_version.as_str(), LATEST);
    assert!(client.negotiated().capabilities.prompts.is_none());
    // Redeployed: another revision, and prompts now.
    srv.script(|s| {
        s.protocol_version = Some("2025-06-18".into());
        s.capabilities =
            Some(json!({"tools": {"listChanged": true}, "logging": {}, "prompts": {}}));
    });
    let mut events = client.subscribe();
    srv.expire_session();
    echo(&client, 1).await;
    assert_eq!(srv.rpc("initialize").len(), 2, "{}", srv.summary());
    // The client says so, for the supervisor to list everything again.
    loop {
        match tokio::time::timeout(WAIT, events.recv()).await {
            Ok(Ok(ServerEvent::SessionRenewed)) => break,
            Ok(Ok(_)) => {}
            other => panic!("no SessionRenewed event: {other:?}"),
        }
    }
    assert_eq!(
        client.negotiated().protocol_version.as_str(),
        "2025-06-18",
        "the renewed session's revision was ignored"
    );
    assert!(client.negotiated().capabilities.prompts.is_some());
    echo(&client, 2).await;
    let last = srv
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.is_call_of("echo"))
        .unwrap();
    assert_eq!(last.header("mcp-protocol-version"), Some("2025-06-18"));
    // The renewal's own `initialized` is on the new session already: a
    // redeployed server may refuse the old revision's header.
    let renewed: Vec<_> = srv
        .requests()
        .into_iter()
        .skip_while(|r| !r.is_rpc("initialize"))
        .skip(1)
        .skip_while(|r| !r.is_rpc("initialize"))
        .filter(|r| r.is_rpc("notifications/initialized"))
        .collect();
    assert!(!renewed.is_empty(), "{}", srv.summary());
    for r in renewed {
        let version = r.header("mcp-protocol-version");
        assert_eq!(version, Some("2025-06-18"), "{}", srv.summary());
    }
}

// ---------------------------------------------------------------------------
// Malformed answers fail only their own call

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_answers_fail_only_their_own_call() {
    let cases: Vec<(&str, Reply, &str)> = vec![
        (
            "a 200 with text/html",
            Reply::json()
                .body("<html><body>Bad gateway</body></html>")
                .content_type("text/html"),
            "text/html",
        ),
        (
            "truncated JSON",
            Reply::json().body(r#"{"jsonrpc":"2.0","id":"#),
            "not valid JSON",
        ),
        (
            "garbage SSE lines and no answer",
            Reply::sse()
                .raw("this is not sse\n")
                .raw("data: {broken json\n\n")
                .cut(Cut::Close),
            "closed the response stream",
        ),
    ];
    let srv = FaultServer::start();
    let Open { client, .. } = open(&srv).await;
    for (what, reply, reason) in cases {
        srv.script(|s| {
            s.replies.clear();
            s.replies.insert("tools/call:slow".into(), reply);
        });
        let t = Instant::now();
        let err = slow_fails(&client, 1, Duration::from_secs(30), what)
            .await
            .to_string();
        assert!(
            err.contains("'srv'") && err.contains(reason),
            "{what}: {err}"
        );
        assert!(
            t.elapsed() < WAIT,
            "{what}: failed only after {:?}",
            t.elapsed()
        );
        echo(&client, 1).await;
    }
    // Garbage before the answer is noise: the call succeeds.
    srv.script(|s| {
        s.replies.clear();
        s.replies.insert(
            "tools/call:echo".into(),
            Reply::sse()
                .raw("this is not sse\n")
                .raw("data: {broken json\n\n"),
        );
    });
    echo(&client, 2).await;
    assert!(client.close_reason().is_none());
    client.shutdown().await;
}

fn legacy_cfg(srv: &FaultServer) -> HttpConfig {
    let mut cfg = HttpConfig::new(srv.url());
    cfg.mode = HttpMode::Sse;
    cfg
}

/// The legacy event stream carries every answer: when it drops, the calls
/// waiting on it fail saying so, and the transport opens a new one (a new
/// legacy session, initialized again) for the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_stream_dropped_mid_session_fails_only_the_calls_in_flight() {
    let srv = FaultServer::with(Script::legacy(405));
    let Open { client, .. } = open_with(legacy_cfg(&srv), quick_opts()).await;
    echo(&client, 1).await;
    let call = client.call_tool(
        "slow",
        args(json!({"ms": 30_000})),
        timeout(Duration::from_secs(60)),
    );
    let dropper = async {
        srv.wait_for("the slow call", WAIT, |r| r.is_call_of("slow"))
            .await;
        assert_eq!(srv.drop_legacy_streams(), 1);
    };
    let t = Instant::now();
    let (r, ()) = tokio::join!(call, dropper);
    let err = r
        .expect_err("a call whose answer was lost succeeded")
        .to_string();
    assert!(
        err.contains("'srv'") && err.contains("event stream"),
        "{err}"
    );
    // Long before the 30 s tool would have answered.
    assert!(t.elapsed() < WAIT, "{:?}: {err}", t.elapsed());
    echo(&client, 2).await;
    assert_eq!(srv.rpc("initialize").len(), 2, "{}", srv.summary());
    assert!(client.close_reason().is_none());
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_legacy_event_fails_its_call_and_the_server_stays_usable() {
    const LIMIT: usize = 64 * 1024;
    let srv = FaultServer::with(Script::legacy(405));
    let mut cfg = legacy_cfg(&srv);
    cfg.max_message_bytes = LIMIT;
    let Open { client, .. } = open_with(cfg, quick_opts()).await;
    let err = client
        .call_tool("big", args(json!({"bytes": 4 * LIMIT})), timeout(WAIT))
        .await
        .expect_err("an answer 4x over the limit was accepted")
        .to_string();
    assert!(
        err.contains("'srv'") && err.contains(&LIMIT.to_string()),
        "{err}"
    );
    assert!(!err.contains("timed out"), "{err}");
    echo(&client, 1).await;
    client.shutdown().await;
}

// ---------------------------------------------------------------------------
// The CLI and the daemon

#[test]
fn direct_url_lists_and_calls() {
    let srv = FaultServer::start();
    let sb = Sandbox::new();
    let url = srv.url();

    let tools = sb.json(&["--direct", &url, "tools"]);
    let own: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["tool"].as_str())
        .collect();
    assert!(own.contains(&"echo") && own.contains(&"slow"), "{tools}");

    let spec = format!("srv={url}");
    let r = sb.run(&["--direct", &spec, "call", "echo", r#"{"text":"hi"}"#]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "{\"text\":\"hi\"}\n"),
        "{r:?}"
    );

    let servers = sb.json(&["--direct", &spec, "servers"]);
    let s = &servers[0];
    assert_eq!(s["name"], "srv", "{servers}");
    assert_eq!(s["state"], "ready", "{servers}");
    assert_eq!(s["transport"], "streamable-http", "{servers}");
    assert_eq!(s["protocolVersion"], LATEST, "{servers}");

    // Every process ended its session.
    let n_init = srv.rpc("initialize").len();
    let n_delete = srv.with_method("DELETE").len();
    assert!(n_init >= 3, "{}", srv.summary());
    assert_eq!(
        n_delete,
        n_init,
        "a session was left open: {}",
        srv.summary()
    );

    // A server error is exit code 2 naming the server and the status.
    srv.script(|s| {
        *s = std::mem::take(s).fail(Some("tools/call"), 502, usize::MAX);
    });
    let r = sb.run(&["--direct", &spec, "call", "echo", "{}"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("502") && r.stderr.contains("srv"),
        "{r:?}"
    );
}

#[test]
fn direct_url_to_a_legacy_server_uses_sse() {
    let srv = FaultServer::with(Script::legacy(404));
    let sb = Sandbox::new();
    let spec = format!("old={}", srv.url());
    let servers = sb.json(&["--direct", &spec, "servers"]);
    assert_eq!(servers[0]["transport"], "sse", "{servers}");
    assert_eq!(servers[0]["state"], "ready", "{servers}");
    let r = sb.run(&["--direct", &spec, "call", "echo", r#"{"a":1}"#]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "{\"a\":1}\n"), "{r:?}");
}

#[test]
fn direct_url_with_refused_credentials_says_auth_required() {
    let srv = FaultServer::with(Script {
        auth: Some(Auth {
            token: "t".into(),
            status: 401,
        }),
        ..Script::default()
    });
    let sb = Sandbox::new();
    let spec = format!("locked={}", srv.url());
    let mut problems = Vec::new();

    // The 401 is final: no waiting out the init timeout.
    let t = Instant::now();
    let r = sb.run(&["--json", "--direct", &spec, "servers"]);
    let took = t.elapsed();
    // A --direct server that did not start fails every command (exit 2),
    // with one error naming the server, the 401 and the fix.
    assert_eq!(r.code, 2, "{r:?}");
    let err: serde_json::Value =
        serde_json::from_str(r.stderr.trim_end().lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("--json error is not JSON ({e}): {r:?}"));
    let msg = err["error"]["message"].as_str().unwrap_or_default();
    assert!(
        // The fix: nobody here can show a sign-in page, so sign in first.
        msg.contains("locked") && msg.contains("401") && msg.contains("mcphost auth login locked"),
        "{r:?}"
    );
    if took > Duration::from_secs(15) {
        problems.push(format!("`servers` took {took:?}"));
    }

    let t = Instant::now();
    let r = sb.run(&["--direct", &spec, "call", "locked__echo", "{}"]);
    let took = t.elapsed();
    assert_eq!(r.code, 2, "{r:?}");
    // The error itself (the last line; log lines come before it) says why.
    let last = r.stderr.trim_end().lines().last().unwrap_or_default();
    if !(last.contains("auth_required") || last.contains("401")) {
        problems.push(format!(
            "the call's error does not say the server refused the credentials: {last:?}"
        ));
    }
    if took > Duration::from_secs(15) {
        problems.push(format!("`call` took {took:?}"));
    }
    // No event stream was opened: the only GETs are OAuth discovery's
    // metadata lookups (this server publishes none).
    assert!(
        srv.with_method("GET")
            .iter()
            .all(|r| r.path.starts_with("/.well-known/")),
        "{}",
        srv.summary()
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

fn http_entry(url: &str, extra: &str) -> String {
    format!(r#"{{ "url": {}{extra} }}"#, js(url))
}

#[test]
fn daemon_serves_http_servers_of_every_type() {
    let stateless = FaultServer::start();
    let legacy = FaultServer::with(Script::legacy(405));
    let locked = FaultServer::with(Script {
        auth: Some(Auth {
            token: "secret".into(),
            status: 401,
        }),
        ..Script::default()
    });
    let forbidden = FaultServer::with(Script {
        auth: Some(Auth {
            token: "other".into(),
            status: 403,
        }),
        ..Script::default()
    });
    let config = format!(
        r#"{{ "loginShellPath": false, "servers": {{
            "auto": {},
            "streamable": {},
            "old": {},
            "detected": {},
            "locked": {},
            "forbidden": {}
        }} }}"#,
        http_entry(
            &stateless.url(),
            r#", "type": "http", "headers": { "Authorization": "Bearer ${TOKEN}", "X-Trace": "t-${TOKEN}" }"#
        ),
        http_entry(&stateless.url(), r#", "type": "streamable-http""#),
        http_entry(&legacy.url(), r#", "type": "sse""#),
        http_entry(&legacy.url(), ""),
        http_entry(
            &locked.url(),
            r#", "headers": { "Authorization": "Bearer ${TOKEN}" }"#
        ),
        http_entry(
            &forbidden.url(),
            r#", "headers": { "Authorization": "Bearer ${TOKEN}" }"#
        ),
    );
    let mut sb = Sandbox::new();
    sb.env.push(("TOKEN".into(), "secret".into()));
    let d = Daemon::start_in(sb, &config);
    let ready = d.wait_ready(
        &["auto", "streamable", "old", "detected", "locked"],
        WAIT * 3,
    );
    assert_eq!(ready["auto"]["transport"], "streamable-http");
    assert_eq!(ready["streamable"]["transport"], "streamable-http");
    assert_eq!(ready["old"]["transport"], "sse");
    assert_eq!(ready["detected"]["transport"], "sse");
    assert_eq!(ready["locked"]["transport"], "streamable-http");

    let f = poll("forbidden to be auth_required", WAIT, || {
        d.server("forbidden")
            .filter(|s| s["state"] != "starting" && s["state"] != "restarting")
    });
    assert_eq!(f["state"], "auth_required", "{f}\n{}", d.log_text());
    let e = f["error"].as_str().unwrap_or_default();
    assert!(e.contains("403"), "{f}");
    // No legacy fallback and no retry loop on 403.
    let seen = forbidden.requests().len();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        forbidden.requests().len(),
        seen,
        "auth_required kept retrying: {}",
        forbidden.summary()
    );
    assert!(
        forbidden.with_method("GET").is_empty(),
        "{}",
        forbidden.summary()
    );
    let r = d.run(&["call", "forbidden__echo", "{}"]);
    assert_eq!(r.code, 2, "{r:?}");

    // Calls through the socket, to every transport.
    for name in ["auto", "streamable", "old", "detected", "locked"] {
        let r = d.run(&["call", &format!("{name}__echo"), r#"{"via":"daemon"}"#]);
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, "{\"via\":\"daemon\"}\n"),
            "{name}: {r:?}"
        );
    }
    let tools = d.json(&["tools"]);
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for n in ["auto__echo", "old__slow", "detected__big", "locked__echo"] {
        assert!(names.contains(&n), "{n} missing: {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.starts_with("forbidden__")),
        "{names:?}"
    );

    // Interpolated headers on every request of "auto" (it is the one whose
    // requests carry X-Trace; "streamable" shares the server without them).
    let auto: Vec<Recorded> = stateless
        .requests()
        .into_iter()
        .filter(|r| r.header("x-trace").is_some())
        .collect();
    assert!(auto.len() >= 4, "{}", stateless.summary());
    for r in &auto {
        assert_eq!(r.header("x-trace"), Some("t-secret"));
        assert_eq!(r.header("authorization"), Some("Bearer secret"));
    }
    // The auto entry's session: every request after the era probe and
    // initialize carries it.
    let auto_sessions: std::collections::BTreeSet<Option<&str>> =
        auto.iter().skip(2).map(|r| r.session()).collect();
    assert_eq!(auto_sessions.len(), 1, "{}", stateless.summary());
    assert!(!auto_sessions.contains(&None));

    // The daemon ends every session when it stops.
    let sessions_before = stateless.sessions_issued().len();
    drop(d);
    let deletes = stateless.with_method("DELETE").len();
    assert_eq!(deletes, sessions_before, "{}", stateless.summary());
}

#[test]
fn daemon_http_session_expiry_is_invisible_to_callers() {
    let srv = FaultServer::start();
    let config = format!(
        r#"{{ "loginShellPath": false, "servers": {{ "x": {} }} }}"#,
        http_entry(&srv.url(), "")
    );
    let mut sb = Sandbox::new();
    sb.env.push(("RUST_LOG".into(), "mcphost=debug".into()));
    let d = Daemon::start_in(sb, &config);
    d.wait_ready(&["x"], WAIT * 3);
    let r = d.run(&["call", "x__echo", r#"{"k":1}"#]);
    assert_eq!(r.code, 0, "{r:?}");
    // The GET answered 405: one attempt, logged at most once.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(srv.with_method("GET").len(), 1, "{}", srv.summary());
    let log = d.log_text();
    let mentions = log
        .lines()
        .filter(|l| l.contains("GET") && l.contains("405"))
        .count();
    assert_eq!(
        mentions, 1,
        "the GET 405 was logged {mentions} times:\n{log}"
    );
    srv.expire_session();
    let r = d.run(&["call", "x__echo", r#"{"k":2}"#]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "{\"k\":2}\n"), "{r:?}");
    assert_eq!(srv.rpc("initialize").len(), 2, "{}", srv.summary());
    assert_eq!(d.server("x").unwrap()["state"], "ready");
}

fn tool_names(d: &Daemon) -> Vec<String> {
    d.json(&["tools"])
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A session renewed on a redeployed server: `servers` shows the new
/// revision and the catalog is listed again (a new tool appears without any
/// list_changed).
#[test]
fn daemon_relists_the_catalog_after_a_session_renewal_12() {
    let srv = FaultServer::start();
    let config = format!(
        r#"{{ "loginShellPath": false, "servers": {{ "x": {} }} }}"#,
        http_entry(&srv.url(), "")
    );
    let d = Daemon::start_in(Sandbox::new(), &config);
    d.wait_ready(&["x"], WAIT * 3);
    assert!(!tool_names(&d).contains(&"x__fresh".to_owned()));
    let lists = srv.rpc("tools/list").len();
    srv.script(|s| {
        s.extra_tools = vec!["fresh".into()];
        s.protocol_version = Some("2025-06-18".into());
    });
    srv.expire_session();
    let r = d.run(&["call", "x__echo", r#"{"k":1}"#]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "{\"k\":1}\n"), "{r:?}");
    poll("x__fresh in the catalog", WAIT, || {
        tool_names(&d)
            .contains(&"x__fresh".to_owned())
            .then_some(())
    });
    assert!(srv.rpc("tools/list").len() > lists, "{}", srv.summary());
    let s = d.server("x").unwrap();
    assert_eq!(s["protocolVersion"], "2025-06-18", "{s}");
    assert_eq!(s["state"], "ready", "{s}");
}
