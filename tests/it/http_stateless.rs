//! The HTTP transport speaking revision 2026-07-28 (stateless): headers,
//! answers as JSON or a request-scoped SSE stream, HTTP errors carrying
//! JSON-RPC errors, cancellation by closing the stream, and a failed probe
//! that leaves the connection to the handshake. Against the in-repo fault
//! server (tests/common/http_fault.rs, `Script::stateless`), driven both as a
//! raw [`Connection`] and through `ServerClient` pinned to 2026-07-28; then
//! end to end against the Python `mcp` SDK and fastmcp servers.

use crate::common;
use crate::common::http_server;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use common::http_fault::{
    Cut, FaultServer, LATEST, POST_ACCEPT, Recorded, Reply, SERVER_NAME, STATELESS_VERSION, Script,
};
use common::{interop, quick_opts, raw, text_of};
use http_server::HttpServer;
use mcphost::client::{CallOptions, ClientOptions, ServerClient};
use mcphost::jsonrpc::PeerError;
use mcphost::protocol::{Id, ProtocolVersion, RawValue};
use mcphost::transport::http::{HttpConfig, HttpMode};
use mcphost::transport::{Connection, Outbound, StatelessHeaders, Stream, TransportEvent};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);

fn b64(s: &str) -> String {
    format!(
        "=?base64?{}?=",
        base64::engine::general_purpose::STANDARD.encode(s)
    )
}

fn stateless_opts() -> ClientOptions {
    ClientOptions {
        protocol_version: Some(ProtocolVersion::V2026_07_28),
        ..quick_opts()
    }
}

fn args(v: Value) -> Option<Box<RawValue>> {
    Some(raw(&v.to_string()))
}

async fn connect(url: String) -> Connection {
    connect_with(HttpConfig::new(url)).await
}

async fn connect_with(cfg: HttpConfig) -> Connection {
    mcphost::transport::http::connect("srv", cfg)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `ServerClient` pinned to 2026-07-28 over HTTP.
async fn stateless_client(
    url: String,
) -> (ServerClient, Arc<dyn mcphost::transport::TransportControl>) {
    let conn = connect(url).await;
    let control = conn.control.clone();
    let c = ServerClient::connect("srv", conn, stateless_opts())
        .await
        .unwrap_or_else(|e| panic!("connecting pinned to 2026-07-28: {e}"));
    (c, control)
}

/// A request of revision 2026-07-28 as the client would send it: `_meta`
/// in the params, the header values beside the text.
fn request(id: i64, method: &str, params: Value, name: Option<&str>) -> Outbound {
    request_as(STATELESS_VERSION, id, method, params, name, vec![])
}

fn request_as(
    version: &str,
    id: i64,
    method: &str,
    mut params: Value,
    name: Option<&str>,
    headers: Vec<(&str, &str)>,
) -> Outbound {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "http_stateless", "version": "0"},
    });
    let text = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    Outbound {
        text,
        stateless: Some(Box::new(StatelessHeaders {
            protocol_version: version.to_owned(),
            method: method.to_owned(),
            name: name.map(str::to_owned),
            params: headers
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        })),
    }
}

fn cancelled(id: i64) -> Outbound {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": id, "reason": "test"}})
    .to_string()
    .into()
}

async fn send(conn: &Connection, out: Outbound) {
    conn.outbound.send(out).await.expect("transport gone");
}

async fn next(conn: &mut Connection) -> TransportEvent {
    tokio::time::timeout(WAIT, conn.inbound.recv())
        .await
        .expect("no transport event within 10 s")
        .expect("the transport ended")
}

/// Every frame on request `id`'s stream up to its response (the last
/// one), or the `Failed` reason. Events for other requests are an error.
async fn outcome(conn: &mut Connection, id: i64) -> Result<Vec<Value>, String> {
    let me = Id::number(id);
    let mut frames = Vec::new();
    loop {
        match next(conn).await {
            TransportEvent::FrameOn(text, Stream::Request(on)) if on == me => {
                let v: Value = serde_json::from_str(&text).unwrap();
                let done = v.get("method").is_none() && v["id"] == json!(id);
                frames.push(v);
                if done {
                    return Ok(frames);
                }
            }
            TransportEvent::Failed { id: on, reason } if on == me => return Err(reason),
            other => panic!("waiting for request {id}: unexpected {other:?}"),
        }
    }
}

async fn answer(conn: &mut Connection, id: i64) -> Value {
    let frames = outcome(conn, id)
        .await
        .unwrap_or_else(|e| panic!("request {id} failed: {e}"));
    frames.last().cloned().unwrap()
}

fn posts(srv: &FaultServer) -> Vec<Recorded> {
    srv.with_method("POST")
}

// ---------------------------------------------------------------------------
// Headers

/// Every POST of the stateless era: its own version, method and content
/// headers, never a session.
fn assert_stateless_post(r: &Recorded, srv: &FaultServer) {
    let method = r.rpc_method().unwrap_or_default();
    assert_eq!(
        r.header("mcp-protocol-version"),
        Some(STATELESS_VERSION),
        "{method}: {}",
        srv.summary()
    );
    assert_eq!(r.header("mcp-method"), Some(method.as_str()), "{method}");
    assert_eq!(r.header_all("accept"), vec![POST_ACCEPT], "{method}");
    assert_eq!(
        r.header("content-type"),
        Some("application/json"),
        "{method}"
    );
    assert_eq!(r.session(), None, "{method} carried Mcp-Session-Id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_for_every_method_and_no_session_get_or_delete() {
    let srv = FaultServer::with(Script {
        extra_tools: vec!["grüßen".into()],
        ..Script::stateless()
    });
    let (c, control) = stateless_client(srv.url()).await;
    assert_eq!(control.kind(), "streamable-http");
    assert_eq!(
        c.negotiated().protocol_version,
        ProtocolVersion::V2026_07_28
    );
    assert_eq!(c.negotiated().server_name.as_deref(), Some(SERVER_NAME));

    let tools = c.list_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "route"), "{tools:?}");
    let r = c
        .call_tool(
            "route",
            args(json!({"region": " us west ", "n": 42, "text": "hi"})),
            CallOptions::default(),
        )
        .await
        .unwrap();
    let v: Value = serde_json::from_str(r.raw.get()).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(&v)).unwrap(),
        json!({"region": " us west ", "n": 42, "text": "hi"})
    );
    // A parameter left out sends no header.
    c.call_tool(
        "route",
        args(json!({"region": "us-west1"})),
        CallOptions::default(),
    )
    .await
    .unwrap();
    c.call_tool("grüßen", None, CallOptions::default())
        .await
        .unwrap();
    let plain_uri = "file:///projects/app/config.json";
    let odd_uri = "file:///tmp/a b/ü.txt";
    for uri in [plain_uri, odd_uri] {
        let r = c.read_resource(uri, CallOptions::default()).await.unwrap();
        let v: Value = serde_json::from_str(r.get()).unwrap();
        assert_eq!(v["contents"][0]["uri"], uri);
    }
    c.get_prompt(
        "greet",
        args(json!({"name": "Ada"})),
        CallOptions::default(),
    )
    .await
    .unwrap();
    c.shutdown().await;

    let all = srv.requests();
    let methods: Vec<&str> = all.iter().map(|r| r.method.as_str()).collect();
    assert!(
        methods.iter().all(|m| *m == "POST"),
        "only POSTs (no GET stream, no DELETE without a session): {}",
        srv.summary()
    );
    assert!(srv.rpc("initialize").is_empty(), "{}", srv.summary());
    assert!(srv.sessions_issued().is_empty());
    for r in &all {
        assert_stateless_post(r, &srv);
    }
    let discover = &srv.rpc("server/discover")[0];
    assert_eq!(discover.header("mcp-name"), None);
    let list = &srv.rpc("tools/list")[0];
    assert_eq!(list.header("mcp-name"), None);

    let calls = srv.rpc("tools/call");
    assert_eq!(calls.len(), 3, "{}", srv.summary());
    assert_eq!(calls[0].header("mcp-name"), Some("route"));
    assert_eq!(
        calls[0].header_all("mcp-param-region"),
        vec![b64(" us west ").as_str()],
        "leading/trailing spaces are base64"
    );
    assert_eq!(calls[0].header_all("mcp-param-n"), vec!["42"]);
    assert_eq!(calls[1].header("mcp-param-region"), Some("us-west1"));
    assert_eq!(calls[1].header("mcp-param-n"), None, "n was not given");
    assert_eq!(calls[2].header("mcp-name"), Some(b64("grüßen").as_str()));
    assert!(
        calls[2]
            .headers
            .iter()
            .all(|(k, _)| !k.starts_with("mcp-param-")),
        "a tool without x-mcp-header sends no Mcp-Param-*"
    );

    let reads = srv.rpc("resources/read");
    assert_eq!(reads[0].header("mcp-name"), Some(plain_uri));
    assert_eq!(reads[1].header("mcp-name"), Some(b64(odd_uri).as_str()));
    let prompt = &srv.rpc("prompts/get")[0];
    assert_eq!(prompt.header("mcp-name"), Some("greet"));
    // The body's _meta says the same version as the header.
    for r in &all {
        let v = r.json().unwrap();
        assert_eq!(
            v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], STATELESS_VERSION,
            "{}",
            r.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_values_are_encoded_by_the_transport() {
    // The client hands plain values; the transport encodes each one.
    let srv = FaultServer::with(Script::stateless());
    let mut conn = connect(srv.url()).await;
    let values = [
        ("Plain", "us-west1"),
        ("Greeting", "Hello, 世界"),
        ("Text", "line1\nline2"),
        ("Val", "=?base64?literal?="),
        ("Inner", "a b\tc"),
    ];
    send(
        &conn,
        request_as(
            STATELESS_VERSION,
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {}}),
            Some(" echo"),
            values.to_vec(),
        ),
    )
    .await;
    answer(&mut conn, 1).await;
    let r = &srv.rpc("tools/call")[0];
    assert_eq!(r.header("mcp-name"), Some(b64(" echo").as_str()));
    assert_eq!(r.header("mcp-param-plain"), Some("us-west1"));
    assert_eq!(
        r.header("mcp-param-greeting"),
        Some("=?base64?SGVsbG8sIOS4lueVjA==?=")
    );
    assert_eq!(
        r.header("mcp-param-text"),
        Some("=?base64?bGluZTEKbGluZTI=?=")
    );
    assert_eq!(
        r.header("mcp-param-val"),
        Some("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=")
    );
    assert_eq!(r.header("mcp-param-inner"), Some("a b\tc"));

    // A parameter name that cannot be a header fails that request, clearly.
    send(
        &conn,
        request_as(
            STATELESS_VERSION,
            2,
            "tools/call",
            json!({"name": "echo"}),
            Some("echo"),
            vec![("bad name", "x")],
        ),
    )
    .await;
    let e = outcome(&mut conn, 2)
        .await
        .expect_err("an invalid header name");
    assert!(e.contains("Mcp-Param-bad name"), "{e}");
    assert_eq!(srv.rpc("tools/call").len(), 1, "nothing was POSTed for it");
}

// ---------------------------------------------------------------------------
// Errors

/// The error object, exactly as the server wrote it, of a response frame.
fn error_text(frame: &Value) -> String {
    frame["error"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_with_a_jsonrpc_error_is_the_answer_with_its_code() {
    let unsupported = r#"{"code":-32022,"message":"Unsupported protocol version","data":{"supported":["2026-07-28","2025-11-25"],"requested":"2099-01-01"}}"#;
    let mismatch = r#"{"code":-32020,"message":"Header mismatch: Mcp-Name 'a' is not 'b'"}"#;
    let capability = r#"{"code":-32021,"message":"Missing required client capability","data":{"requiredCapabilities":{"sampling":{}}}}"#;
    let not_found = r#"{"code":-32601,"message":"Method not found"}"#;
    let srv = FaultServer::with(
        Script::stateless()
            // "id": null: the server could not read the request's id.
            .fail_rpc(Some("tools/list"), 400, 1, unsupported, false)
            .fail_rpc(Some("tools/call"), 400, 1, mismatch, true)
            .fail_rpc(Some("prompts/get"), 400, 1, capability, false)
            .fail_rpc(Some("widgets/spin"), 404, 1, not_found, true),
    );
    let mut conn = connect(srv.url()).await;
    let cases = [
        (1, "tools/list", None, unsupported),
        (2, "tools/call", Some("echo"), mismatch),
        (3, "prompts/get", Some("p"), capability),
        (4, "widgets/spin", None, not_found),
    ];
    for (id, method, name, error) in cases {
        let params = match name {
            Some(n) => json!({ "name": n }),
            None => json!({}),
        };
        send(&conn, request(id, method, params, name)).await;
        let frame = answer(&mut conn, id).await;
        assert_eq!(frame["id"], json!(id), "{method}: our id, also for id null");
        let want: Value = serde_json::from_str(error).unwrap();
        assert_eq!(frame["error"], want, "{method}");
        assert_eq!(error_text(&frame), want.to_string());
    }
    // A stateless error says which transport this is.
    assert_eq!(conn.control.kind(), "streamable-http");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_mismatch_reaches_the_caller_byte_exact() {
    // Through the client (which re-lists and retries a -32020 once; this
    // server refuses every time): the code and data as the server sent
    // them (numbers included), not a transport failure.
    let err = r#"{"code":-32020,"message":"Header mismatch","data":{"supported":["2026-07-28"],"big":12345678901234567890,"f":1.10}}"#;
    let srv = FaultServer::with(Script::stateless().fail_rpc(
        Some("tools/call"),
        400,
        usize::MAX,
        err,
        false,
    ));
    let (c, _control) = stateless_client(srv.url()).await;
    let e = c
        .call_tool("echo", None, CallOptions::default())
        .await
        .expect_err("the 400 is an error answer");
    let rpc = e
        .rpc_error()
        .unwrap_or_else(|| panic!("not a JSON-RPC error: {e}"));
    assert_eq!(rpc.code, -32020, "{e}");
    let data = rpc.data.as_ref().expect("data").get();
    assert_eq!(
        data,
        r#"{"supported":["2026-07-28"],"big":12345678901234567890,"f":1.10}"#
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_without_a_jsonrpc_body_is_a_transport_failure_naming_the_status() {
    let srv = FaultServer::with(
        Script::stateless()
            .fail_body(Some("a/empty"), 400, 1, "text/plain", "")
            .fail_body(
                Some("a/html"),
                400,
                1,
                "text/html",
                "<html><body>Bad Request from the proxy</body></html>",
            )
            .fail_body(Some("a/405"), 405, 1, "text/plain", "Method Not Allowed")
            .fail_body(Some("a/503"), 503, 1, "text/plain", "try later")
            .fail_rpc(
                Some("a/other"),
                400,
                1,
                r#"{"code":-32600,"message":"x"}"#,
                false,
            ),
    );
    let mut conn = connect(srv.url()).await;
    for (id, method, status, snippet) in [
        (1, "a/empty", "400", ""),
        (2, "a/html", "400", "Bad Request from the proxy"),
        (3, "a/405", "405", "Method Not Allowed"),
        (4, "a/503", "503", "try later"),
    ] {
        send(&conn, request(id, method, json!({}), None)).await;
        let e = outcome(&mut conn, id)
            .await
            .expect_err("no JSON-RPC body: a failure");
        assert!(e.contains(&format!("HTTP {status}")), "{method}: {e}");
        assert!(e.contains(snippet), "{method}: {e}");
    }
    // Nothing here said "stateless": the transport is still undetected, so
    // the handshake (and its legacy fallback) starts fresh.
    assert_eq!(conn.control.kind(), "http");
    // The connection is still up.
    send(&conn, request(5, "tools/list", json!({}), None)).await;
    answer(&mut conn, 5).await;
    assert_eq!(conn.control.kind(), "streamable-http");
    // A handshake server's -32600 with id null is the answer too (our id
    // put in), for the client to judge.
    send(&conn, request(6, "a/other", json!({}), None)).await;
    let frame = answer(&mut conn, 6).await;
    assert_eq!(frame["error"]["code"], -32600);
    assert_eq!(frame["id"], 6);
}

// ---------------------------------------------------------------------------
// SSE answers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_answer_carries_progress_then_the_response() {
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                     "params": {"level": "info", "data": "working"}});
    let srv = FaultServer::with(Script::stateless().reply(
        "tools/call",
        Reply::sse().comments().progress().notify(log.clone()),
    ));
    let mut conn = connect(srv.url()).await;
    let mut params = json!({"name": "echo", "arguments": {"a": 1}});
    params["_meta"] = json!({"progressToken": "tok"});
    let mut out = request(1, "tools/call", params, Some("echo"));
    // request() replaced _meta; put the token back beside the rest.
    let mut v: Value = serde_json::from_str(&out.text).unwrap();
    v["params"]["_meta"]["progressToken"] = json!("tok");
    out.text = v.to_string();
    send(&conn, out).await;
    let frames = outcome(&mut conn, 1).await.unwrap();
    let methods: Vec<&str> = frames
        .iter()
        .map(|f| f["method"].as_str().unwrap_or("<response>"))
        .collect();
    assert_eq!(
        methods,
        [
            "notifications/message",
            "notifications/progress",
            "<response>"
        ],
        "comments are no frames; notifications come first, on the request's stream"
    );
    assert_eq!(frames[1]["params"]["progressToken"], "tok");
    assert_eq!(text_of(&frames[2]["result"]), r#"{"a":1}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_stream_that_ends_early_fails_only_that_request() {
    let srv = FaultServer::with(
        Script::stateless()
            // Event ids and a retry: still nothing to resume in this revision.
            .reply(
                "tools/call:slow",
                Reply::sse().retry(10).progress().cut(Cut::Close),
            )
            .reply("tools/call:big", Reply::sse().cut(Cut::Abort))
            .reply(
                "tools/call:echo",
                Reply::sse().delay(Duration::from_millis(300)),
            ),
    );
    let mut conn = connect(srv.url()).await;
    send(
        &conn,
        request(1, "tools/call", json!({"name": "slow"}), Some("slow")),
    )
    .await;
    send(
        &conn,
        request(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {}}),
            Some("echo"),
        ),
    )
    .await;
    send(
        &conn,
        request(3, "tools/call", json!({"name": "big"}), Some("big")),
    )
    .await;
    let mut failed = Vec::new();
    let mut answered = Vec::new();
    while failed.len() + answered.len() < 3 {
        match next(&mut conn).await {
            TransportEvent::Failed { id, reason } => failed.push((id, reason)),
            TransportEvent::FrameOn(text, Stream::Request(on)) => {
                let v: Value = serde_json::from_str(&text).unwrap();
                if v.get("method").is_none() {
                    assert_eq!(
                        v["id"],
                        serde_json::from_str::<Value>(on.as_json()).unwrap()
                    );
                    answered.push(on);
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(answered, vec![Id::number(2)], "{failed:?}");
    failed.sort_by_key(|(id, _)| id.as_number());
    assert_eq!(failed[0].0, Id::number(1));
    assert!(
        failed[0]
            .1
            .contains("closed the response stream without answering"),
        "{}",
        failed[0].1
    );
    assert_eq!(failed[1].0, Id::number(3));
    assert!(failed[1].1.contains("broke"), "{}", failed[1].1);
    // No resumption: no GET (with Last-Event-ID or otherwise).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(srv.with_method("GET").is_empty(), "{}", srv.summary());
    // And the connection is fine.
    send(&conn, request(4, "tools/list", json!({}), None)).await;
    answer(&mut conn, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_comments_hold_a_long_stream_open_past_every_timeout() {
    // As a subscriptions/listen stream would be: quiet but for comments,
    // longer than the transport's other limits.
    let srv = FaultServer::with(
        Script::stateless().reply(
            "tools/call",
            Reply::sse()
                .keep_alive(Duration::from_millis(100))
                .delay(Duration::from_millis(2500)),
        ),
    );
    let mut cfg = HttpConfig::new(srv.url());
    cfg.send_timeout = Duration::from_millis(300);
    cfg.init_timeout = Duration::from_millis(300);
    cfg.connect_timeout = Duration::from_millis(300);
    let mut conn = connect_with(cfg).await;
    let started = std::time::Instant::now();
    send(
        &conn,
        request(
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {}}),
            Some("echo"),
        ),
    )
    .await;
    let frames = outcome(&mut conn, 1).await.unwrap();
    assert_eq!(frames.len(), 1, "comments are not frames: {frames:?}");
    assert!(started.elapsed() >= Duration::from_millis(2400));
}

// ---------------------------------------------------------------------------
// Cancellation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_closes_the_stream_and_posts_nothing() {
    let srv = FaultServer::with(
        Script::stateless().reply(
            "tools/call:slow",
            Reply::sse()
                .keep_alive(Duration::from_millis(50))
                .delay(Duration::from_secs(30)),
        ),
    );
    let mut conn = connect(srv.url()).await;
    send(
        &conn,
        request(1, "tools/call", json!({"name": "slow"}), Some("slow")),
    )
    .await;
    let open = tokio::time::Instant::now() + WAIT;
    while srv.live_post_streams() != 1 {
        assert!(tokio::time::Instant::now() < open, "{}", srv.summary());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Still open a while later: only the cancel will close it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(srv.live_post_streams(), 1);
    send(&conn, cancelled(1)).await;
    let gone = tokio::time::Instant::now() + Duration::from_secs(3);
    while srv.live_post_streams() != 0 {
        assert!(
            tokio::time::Instant::now() < gone,
            "the response stream was not closed after the cancel"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing arrives for it, and nothing was POSTed for the cancel.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), conn.inbound.recv())
            .await
            .is_err(),
        "an event for a cancelled request"
    );
    assert!(
        srv.rpc("notifications/cancelled").is_empty(),
        "{}",
        srv.summary()
    );
    assert_eq!(posts(&srv).len(), 1, "{}", srv.summary());
    // A cancel for a request that is not in flight on a stateless
    // connection is not POSTed either.
    send(&conn, cancelled(99)).await;
    send(&conn, request(2, "tools/list", json!({}), None)).await;
    answer(&mut conn, 2).await;
    assert!(
        srv.rpc("notifications/cancelled").is_empty(),
        "{}",
        srv.summary()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_through_the_client_closes_its_stream() {
    let srv = FaultServer::with(
        Script::stateless().reply(
            "tools/call:slow",
            Reply::sse()
                .keep_alive(Duration::from_millis(50))
                .delay(Duration::from_secs(30)),
        ),
    );
    let (c, _control) = stateless_client(srv.url()).await;
    let token = CancellationToken::new();
    let opts = CallOptions {
        cancel: Some(token.clone()),
        ..CallOptions::default()
    };
    let call = tokio::spawn(async move {
        let r = c.call_tool("slow", None, opts).await;
        (c, r)
    });
    srv.wait_for("the slow call", WAIT, |r| r.is_call_of("slow"))
        .await;
    let open = tokio::time::Instant::now() + WAIT;
    while srv.live_post_streams() != 1 {
        assert!(tokio::time::Instant::now() < open, "{}", srv.summary());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    token.cancel();
    let (c, r) = tokio::time::timeout(WAIT, call).await.unwrap().unwrap();
    let e = r.expect_err("cancelled");
    assert!(
        matches!(
            &e,
            mcphost::client::ClientError::Request {
                error: PeerError::Cancelled { .. },
                ..
            }
        ),
        "{e}"
    );
    let gone = tokio::time::Instant::now() + Duration::from_secs(3);
    while srv.live_post_streams() != 0 {
        assert!(tokio::time::Instant::now() < gone, "the stream stayed open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        srv.rpc("notifications/cancelled").is_empty(),
        "{}",
        srv.summary()
    );
    c.shutdown().await;
}

// ---------------------------------------------------------------------------
// subscriptions/listen

async fn until(what: &str, limit: Duration, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_stays_open_carries_changes_and_is_opened_again_after_a_drop() {
    let srv = FaultServer::with(Script {
        capabilities: Some(json!({ "tools": { "listChanged": true } })),
        ..Script::stateless()
    });
    let (c, _control) = stateless_client(srv.url()).await;
    until("the listen stream", WAIT, || srv.live_listens() == 1).await;
    let listen = &srv.rpc("subscriptions/listen")[0];
    assert_stateless_post(listen, &srv);
    assert_eq!(
        listen.json().unwrap()["params"]["notifications"],
        json!({ "toolsListChanged": true })
    );
    // Quiet, and still open: no deadline of the transport's cuts it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(srv.live_listens(), 1);

    // A change on it: the client lists again.
    let lists = srv.rpc("tools/list").len();
    assert_eq!(
        srv.push_listen("notifications/tools/list_changed", json!({})),
        1
    );
    until("tools/list after list_changed", WAIT, || {
        srv.rpc("tools/list").len() > lists
    })
    .await;

    // Dropped: listened to again (with the lists fetched again, as changes
    // may have been missed), and changes flow on the new stream.
    assert_eq!(srv.cut_listen(Cut::Abort), 1);
    until("a second listen", WAIT, || {
        srv.rpc("subscriptions/listen").len() == 2 && srv.live_listens() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lists = srv.rpc("tools/list").len();
    assert_eq!(
        srv.push_listen("notifications/tools/list_changed", json!({})),
        1
    );
    until("tools/list on the new stream", WAIT, || {
        srv.rpc("tools/list").len() > lists
    })
    .await;

    // Shutdown closes it; nothing but POSTs was ever sent.
    c.shutdown().await;
    until("the listen stream closed", WAIT, || srv.live_listens() == 0).await;
    assert!(
        srv.requests().iter().all(|r| r.method == "POST"),
        "{}",
        srv.summary()
    );
}

// ---------------------------------------------------------------------------
// A failed probe, then the handshake on the same connection

/// `server/discover` as the client probes with.
fn probe(id: i64) -> Outbound {
    request(id, "server/discover", json!({}), None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_probe_leaves_the_connection_to_the_handshake() {
    // A handshake-only Streamable HTTP server: its session error, addressed
    // to the probe, is the answer; the handshake then goes as always. The
    // client, unpinned, probes once more itself on the same connection.
    let srv = FaultServer::start();
    let mut conn = connect(srv.url()).await;
    send(&conn, probe(900)).await;
    let frame = answer(&mut conn, 900).await;
    assert_eq!(frame["error"]["code"], -32000, "{frame}");
    assert_eq!(conn.control.kind(), "http", "a legacy answer marks nothing");
    let control = conn.control.clone();
    let c = ServerClient::connect("srv", conn, quick_opts())
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", srv.summary()));
    assert_eq!(c.negotiated().protocol_version.as_str(), LATEST);
    c.call_tool("echo", args(json!({"n": 1})), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(control.kind(), "streamable-http");
    c.shutdown().await;
    let probes = srv.rpc("server/discover");
    assert_eq!(probes.len(), 2, "{}", srv.summary());
    for p in &probes {
        assert_stateless_post(p, &srv);
        assert_eq!(p.status, Some(400));
    }
    let init = &srv.rpc("initialize")[0];
    assert!(init.seq > probes[1].seq, "{}", srv.summary());
    assert_eq!(init.session(), None);
    assert_eq!(
        init.header("mcp-protocol-version"),
        None,
        "no version before the handshake"
    );
    assert_eq!(init.header("mcp-method"), None);
    let call = &srv.rpc("tools/call")[0];
    assert!(call.session().is_some());
    assert_eq!(call.header("mcp-protocol-version"), Some(LATEST));
    assert_eq!(
        call.header("mcp-method"),
        None,
        "handshake-era requests carry no Mcp-Method"
    );
    assert_eq!(srv.with_method("DELETE").len(), 1, "its session is ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_probe_to_a_legacy_sse_server_still_falls_back_to_sse() {
    for status in [400, 404, 405] {
        let srv = FaultServer::with(Script::legacy(status));
        let mut conn = connect(srv.url()).await;
        send(&conn, probe(900)).await;
        let e = outcome(&mut conn, 900).await.expect_err("no JSON-RPC body");
        assert!(e.contains(&format!("HTTP {status}")), "{e}");
        assert_eq!(conn.control.kind(), "http");
        let control = conn.control.clone();
        let c = ServerClient::connect("srv", conn, quick_opts())
            .await
            .unwrap_or_else(|e| panic!("{status}: {e}: {}", srv.summary()));
        assert_eq!(control.kind(), "sse", "{status}");
        c.call_tool("echo", args(json!({"n": 2})), CallOptions::default())
            .await
            .unwrap();
        c.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_request_on_a_legacy_sse_connection_fails_clearly() {
    let srv = FaultServer::with(Script::legacy(405));
    let mut cfg = HttpConfig::new(srv.url());
    cfg.mode = HttpMode::Sse;
    let mut conn = connect_with(cfg).await;
    send(&conn, probe(1)).await;
    let e = outcome(&mut conn, 1).await.expect_err("refused");
    assert!(e.contains("2026-07-28"), "{e}");
    assert!(
        srv.requests().iter().all(|r| r.method == "GET"),
        "nothing POSTed: {}",
        srv.summary()
    );
}

// ---------------------------------------------------------------------------
// Real servers

fn python_server(script: &str) -> HttpServer {
    let env = interop();
    let path = env.dir.join(script);
    HttpServer::start(script, Duration::from_secs(60), |port| {
        let mut c = Command::new(&env.python);
        c.arg(&path).arg("--http").arg(port.to_string());
        c
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn real_opts() -> ClientOptions {
    ClientOptions {
        init_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(30),
        ..stateless_opts()
    }
}

async fn real_client(
    srv: &HttpServer,
) -> (ServerClient, Arc<dyn mcphost::transport::TransportControl>) {
    let conn = connect(srv.url("/mcp")).await;
    let control = conn.control.clone();
    let c = ServerClient::connect(&srv.name, conn, real_opts())
        .await
        .unwrap_or_else(|e| panic!("{}: {e}\nserver log:\n{}", srv.name, srv.log_text()));
    (c, control)
}

fn text(raw: &RawValue) -> String {
    text_of(&serde_json::from_str(raw.get()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn python_sdk_server_end_to_end_over_2026_07_28() {
    let srv = python_server("py_server.py");
    let (c, control) = real_client(&srv).await;
    let n = c.negotiated();
    assert_eq!(n.protocol_version, ProtocolVersion::V2026_07_28);
    assert_eq!(n.server_name.as_deref(), Some("mcphost-interop-py"));
    assert_eq!(control.kind(), "streamable-http");
    let tools = c.list_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"), "{tools:?}");
    let r = c
        .call_tool(
            "echo",
            args(json!({"text": "héllo"})),
            CallOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.log_text()));
    let echoed: Value = serde_json::from_str(&text(&r.raw)).unwrap();
    assert_eq!(echoed, json!({"text": "héllo"}), "{}", r.raw.get());
    let r = c
        .read_resource("interop://static/alpha", CallOptions::default())
        .await
        .unwrap();
    assert!(r.get().contains("interop://static/alpha"), "{}", r.get());
    // A URI that is not header-safe goes base64 in Mcp-Name; the server
    // decodes and compares it with the body (else -32020).
    let odd = "interop://echo/grüße wörld";
    let r = c
        .read_resource(odd, CallOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.log_text()));
    let v: Value = serde_json::from_str(r.get()).unwrap();
    assert_eq!(v["contents"][0]["uri"], odd, "{v}");
    let p = c
        .get_prompt(
            "greet",
            args(json!({"name": "Ada"})),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(p.get().contains("Ada"), "{}", p.get());
    // Progress on the request's SSE stream, then the result.
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let opts = CallOptions {
        on_progress: Some(Arc::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        })),
        ..CallOptions::default()
    };
    let r = c
        .call_tool("slow", args(json!({"ms": 300, "steps": 3})), opts)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.log_text()));
    assert!(!r.is_error, "{}", r.raw.get());
    assert_eq!(
        seen.load(Ordering::SeqCst),
        3,
        "three progress notifications"
    );
    c.shutdown().await;

    // The server's own 400s, through a raw connection: an unsupported
    // version (with the versions it supports) and a header mismatch.
    let mut conn = connect(srv.url("/mcp")).await;
    send(
        &conn,
        request_as("2099-01-01", 1, "tools/list", json!({}), None, vec![]),
    )
    .await;
    let f = answer(&mut conn, 1).await;
    assert_eq!(f["error"]["code"], -32022, "{f}");
    let supported = f["error"]["data"]["supported"].as_array().unwrap();
    assert!(supported.contains(&json!(STATELESS_VERSION)), "{f}");
    send(
        &conn,
        request(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
            Some("ecko"),
        ),
    )
    .await;
    let f = answer(&mut conn, 2).await;
    assert_eq!(f["error"]["code"], -32020, "{f}");
    send(&conn, request(3, "no/such", json!({}), None)).await;
    let f = answer(&mut conn, 3).await;
    assert_eq!(f["error"]["code"], -32601, "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn fastmcp_server_end_to_end_over_2026_07_28() {
    let srv = python_server("fastmcp_server.py");
    let (c, control) = real_client(&srv).await;
    let n = c.negotiated();
    assert_eq!(n.protocol_version, ProtocolVersion::V2026_07_28);
    assert_eq!(n.server_name.as_deref(), Some("mcphost-interop-fastmcp"));
    assert_eq!(control.kind(), "streamable-http");
    let tools = c.list_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "add"), "{tools:?}");
    let r = c
        .call_tool(
            "echo",
            args(json!({"text": "hi there"})),
            CallOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", srv.log_text()));
    assert!(text(&r.raw).contains("hi there"), "{}", r.raw.get());
    let r = c
        .read_resource("fastmcp://static/one", CallOptions::default())
        .await
        .unwrap();
    assert!(r.get().contains("fastmcp://static/one"), "{}", r.get());
    let p = c
        .get_prompt(
            "greet",
            args(json!({"name": "Grace"})),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(p.get().contains("Grace"), "{}", p.get());
    c.shutdown().await;
}
