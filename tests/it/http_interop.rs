//! Interop over HTTP with MCP servers nobody here wrote, each on a free port
//! of its own:
//!
//! - `@modelcontextprotocol/server-everything` (npm) in its `streamableHttp`
//!   mode (sessions, an event store for resumption, a GET stream) at `/mcp`,
//!   and in its legacy `sse` mode (HTTP+SSE, 2024-11-05) at `/sse`;
//! - our servers on the Python `mcp` SDK (`py_server.py --http PORT`) and on
//!   fastmcp (`fastmcp_server.py --http PORT`), Streamable HTTP at `/mcp`.
//!
//! Through the library (`transport::http::connect` + `ServerClient`), the
//! CLI's `--direct URL`, and the daemon (config mixing HTTP and stdio
//! entries, the socket, `mcphost bridge` with the Python SDK's client).
//!
//! The tests are ignored unless asked for: `scripts/test.sh` installs the
//! servers (pinned) and runs them with `--run-ignored all`; a missing server
//! is then a failure.

use crate::common;
use crate::common::http_server;
use crate::everything;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{
    Daemon, FullHost, Interop, MCPHOST, Sandbox, TESTSERVER, interop, js, output_within, raw,
    raw_text_of as text_of,
};
use http_server::HttpServer;
use mcphost::client::{CallOptions, ClientOptions, ServerClient, ServerEvent};
use mcphost::transport::TransportControl;
use mcphost::transport::http::{HttpConfig, HttpMode};
use serde_json::{Value, json};

/// How long a server may take to listen (Python imports are slow on a busy
/// machine).
const START: Duration = Duration::from_secs(60);
const READY: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// Servers

/// How to start server-everything in this mode on a given port.
fn everything_command(env: &Interop, mode: &str) -> impl Fn(u16) -> Command {
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let node = env.node.clone();
    let mode = mode.to_owned();
    move |port| {
        let mut c = Command::new(&node);
        c.arg(&entry).arg(&mode).env("PORT", port.to_string());
        c
    }
}

fn everything(env: &Interop, mode: &str) -> HttpServer {
    HttpServer::start(
        &format!("everything-{mode}"),
        START,
        everything_command(env, mode),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `py_server.py` or `fastmcp_server.py` with `--http PORT`.
fn python_server(env: &Interop, script: &str) -> HttpServer {
    let path = env.dir.join(script);
    HttpServer::start(script, START, |port| {
        let mut c = Command::new(&env.python);
        c.arg(&path).arg("--http").arg(port.to_string());
        c
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------
// The library

fn opts() -> ClientOptions {
    ClientOptions {
        init_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(30),
        ..Default::default()
    }
}

/// Pinned to 2025-11-25, for what only the handshake revisions have
/// (sessions, the GET stream): dual-era servers negotiate 2026-07-28.
fn handshake_opts() -> ClientOptions {
    ClientOptions {
        protocol_version: Some(mcphost::protocol::ProtocolVersion::V2025_11_25),
        ..opts()
    }
}

fn http_config(url: String, mode: HttpMode) -> HttpConfig {
    let mut cfg = HttpConfig::new(url);
    cfg.mode = mode;
    cfg
}

/// Connects and initializes; also returns the transport's control, which
/// says which transport was detected. Panics with the server's log.
async fn start(
    srv: &HttpServer,
    path: &str,
    mode: HttpMode,
    o: ClientOptions,
) -> (ServerClient, Arc<dyn TransportControl>) {
    let name = srv.name.as_str();
    let conn = mcphost::transport::http::connect(name, http_config(srv.url(path), mode))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}\nserver log:\n{}", srv.log_text()));
    let control = conn.control.clone();
    let c = ServerClient::connect(name, conn, o)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}\nserver log:\n{}", srv.log_text()));
    (c, control)
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn everything_over_streamable_http() {
    let env = interop();
    let srv = everything(&env, "streamableHttp");
    let conn = mcphost::transport::http::connect(
        "everything",
        http_config(srv.url("/mcp"), HttpMode::Auto),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let control = conn.control.clone();
    assert_eq!(control.kind(), "http", "not detected before initialize");
    assert_eq!(control.pid(), None);
    let c = ServerClient::connect("everything", conn, opts())
        .await
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", srv.log_text()));
    assert_eq!(control.kind(), "streamable-http");

    everything::exercise(&c, || srv.log_text()).await;

    // One session for everything above (the id went on every request), and
    // the optional GET stream was opened for it.
    let log = srv.log_text();
    assert_eq!(
        log.matches("Session initialized with ID").count(),
        1,
        "{log}"
    );
    assert!(
        log.contains("Establishing new SSE stream for session"),
        "{log}"
    );
    // Shutdown ends the session with a DELETE.
    c.shutdown().await;
    assert!(
        srv.wait_log(
            "Received session termination request",
            Duration::from_secs(10)
        ),
        "no DELETE on shutdown; server log:\n{}",
        srv.log_text()
    );
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn everything_with_explicit_streamable_mode() {
    let env = interop();
    let srv = everything(&env, "streamableHttp");
    let (c, control) = start(&srv, "/mcp", HttpMode::Streamable, opts()).await;
    assert_eq!(control.kind(), "streamable-http");
    let r = c
        .call_tool(
            "echo",
            Some(raw(r#"{"message":"x"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(text_of(&r.raw), "Echo: x");
    c.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn everything_over_legacy_sse() {
    let env = interop();
    let srv = everything(&env, "sse");
    let (c, control) = start(&srv, "/sse", HttpMode::Sse, opts()).await;
    assert_eq!(control.kind(), "sse");
    everything::exercise(&c, || srv.log_text()).await;
    // No Streamable HTTP attempt was made: one SSE connection, no POST to /sse.
    let log = srv.log_text();
    assert_eq!(log.matches("Client Connected").count(), 1, "{log}");
    c.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn auto_detection_falls_back_to_legacy_sse_and_streamable_mode_does_not() {
    let env = interop();
    let srv = everything(&env, "sse");

    // A plain URL: Streamable HTTP is tried first, the POST to /sse gets a
    // 404, and the legacy transport takes over.
    let (c, control) = start(&srv, "/sse", HttpMode::Auto, opts()).await;
    assert_eq!(control.kind(), "sse");
    let r = c
        .call_tool(
            "echo",
            Some(raw(r#"{"message":"fell back"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(text_of(&r.raw), "Echo: fell back");
    c.shutdown().await;

    // Streamable HTTP only: no fallback, so connecting fails.
    let o = ClientOptions {
        init_timeout: Duration::from_secs(20),
        ..opts()
    };
    let failed = match mcphost::transport::http::connect(
        "streamable-only",
        http_config(srv.url("/sse"), HttpMode::Streamable),
    )
    .await
    {
        Err(e) => e.to_string(),
        Ok(conn) => match ServerClient::connect("streamable-only", conn, o).await {
            Err(e) => e.to_string(),
            Ok(c) => panic!(
                "initialized over streamable HTTP at an SSE-only endpoint: {:?}",
                c.negotiated().protocol_version
            ),
        },
    };
    assert!(
        failed.contains("streamable-only") && failed.contains("404"),
        "{failed}"
    );
}

/// Server requests in the middle of a tool call: over Streamable HTTP they
/// arrive on the POST's event stream and the answers go back as POSTs; in
/// legacy mode both go through the one SSE stream and the message endpoint.
#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn everything_calls_back_into_the_host_over_both_transports() {
    let env = interop();
    for (mode, path, http_mode) in [
        ("streamableHttp", "/mcp", HttpMode::Streamable),
        ("sse", "/sse", HttpMode::Sse),
    ] {
        let srv = everything(&env, mode);
        let o = ClientOptions {
            host: Arc::new(FullHost),
            ..opts()
        };
        let (c, _) = start(&srv, path, http_mode, o).await;
        everything::calls_back_into_the_host(&c, mode).await;
        c.shutdown().await;
    }
}

/// The SDK serves both eras on one endpoint; unpinned, the probe finds the
/// stateless one.
#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn python_sdk_server_over_streamable_http() {
    let env = interop();
    let srv = python_server(&env, "py_server.py");
    let (c, control) = start(&srv, "/mcp", HttpMode::Auto, opts()).await;
    assert_eq!(control.kind(), "streamable-http");
    common::exercise_py_server(&c, "2026-07-28").await;

    // list_changed on the client's subscriptions/listen stream and the log
    // message on the tools/call's own: the client re-lists on its own.
    let mut events = c.subscribe();
    c.set_log_level("info").await.unwrap();
    notify_and_relist(&c, &mut events, &srv).await;
    c.shutdown().await;
}

/// The same server pinned to the handshake: a session, and the GET stream.
#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn python_sdk_server_over_streamable_http_handshake() {
    let env = interop();
    let srv = python_server(&env, "py_server.py");
    let (c, control) = start(&srv, "/mcp", HttpMode::Auto, handshake_opts()).await;
    assert_eq!(control.kind(), "streamable-http");
    common::exercise_py_server(&c, "2025-11-25").await;

    // list_changed and a log message, sent on the GET stream: the client
    // re-lists (paged, over the same session) on its own.
    let mut events = c.subscribe();
    c.set_log_level("info").await.unwrap();
    notify_and_relist(&c, &mut events, &srv).await;
    c.shutdown().await;
}

/// server-everything forgets its sessions when it restarts, and answers the
/// old id with 400 "Bad Request: No valid session ID provided" (addressed
/// to the request, code -32000) where the spec says 404: the client takes
/// that as a lost session, renews it and the call goes through.
#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn everything_restarted_on_its_port_renews_the_session_on_its_400() {
    let env = interop();
    let make = everything_command(&env, "streamableHttp");
    let srv = HttpServer::start("everything", START, &make).unwrap_or_else(|e| panic!("{e}"));
    let port = srv.port;
    let (c, _) = start(&srv, "/mcp", HttpMode::Streamable, opts()).await;
    let echo = |m: &str| raw(&format!(r#"{{"message":"{m}"}}"#));
    let r = c
        .call_tool("echo", Some(echo("one")), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(text_of(&r.raw), "Echo: one");
    drop(srv);
    let srv =
        HttpServer::start_on("everything", port, START, &make).unwrap_or_else(|e| panic!("{e}"));
    // The first POST may go out on a pooled connection the killed server
    // left behind, which fails it ("connection closed before message
    // completed"): not what this test is about, so that one error is let
    // through once. The 400 and the renewal are.
    let call = || c.call_tool("echo", Some(echo("two")), CallOptions::default());
    let r = match call().await {
        Err(e)
            if e.to_string()
                .contains("connection closed before message completed") =>
        {
            call().await
        }
        other => other,
    }
    .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", srv.log_text()));
    assert_eq!(text_of(&r.raw), "Echo: two");
    assert!(
        srv.log_text().contains("Session initialized with ID"),
        "{}",
        srv.log_text()
    );
    assert!(c.close_reason().is_none());
    c.shutdown().await;
}

/// Calls py_server's `notify` until its three list_changed and its log
/// message have all arrived and the lists are re-fetched in full. The server
/// sends them outside the request (on the GET stream), and it drops what it
/// sends while no GET stream is attached yet, so a call made right after
/// connecting may lose some: a few calls are allowed.
async fn notify_and_relist(
    c: &ServerClient,
    events: &mut mcphost::transport::feed::FeedReceiver<ServerEvent>,
    srv: &HttpServer,
) {
    let mut seen = common::PyRelisted::default();
    for _ in 0..5 {
        let r = c
            .call_tool("notify", Some(raw("{}")), CallOptions::default())
            .await
            .unwrap();
        assert!(text_of(&r.raw).starts_with("sent 3"), "{}", r.raw.get());
        while !seen.all() {
            let Ok(e) = tokio::time::timeout(Duration::from_secs(3), events.recv()).await else {
                break; // call again
            };
            let e = e.unwrap();
            if let ServerEvent::RelistFailed { what, error } = &e {
                panic!("re-listing {what}: {error}");
            }
            seen.see(&e);
        }
        if seen.all() {
            return;
        }
    }
    panic!(
        "after 5 notify calls: {seen:?}; server log:\n{}",
        srv.log_text()
    );
}

/// `POST /test/end-sessions` on py_server: the server terminates every open
/// session (as when one expires); how many it ended.
async fn end_sessions(srv: &HttpServer) -> u64 {
    let r = reqwest::Client::new()
        .post(srv.url("/test/end-sessions"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{r:?}");
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    v["ended"].as_u64().unwrap()
}

/// The server ends the session: the next request gets a 404, and the client
/// renews the session and retries, without the caller noticing; messages the
/// server sends on its own reach the new session too.
#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn python_sdk_server_session_ended_by_the_server_is_renewed() {
    let env = interop();
    let srv = python_server(&env, "py_server.py");
    let (c, _) = start(&srv, "/mcp", HttpMode::Streamable, handshake_opts()).await;
    let mut events = c.subscribe();
    let r = c
        .call_tool("echo", Some(raw(r#"{"n":1}"#)), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(text_of(&r.raw), r#"{"n": 1}"#);

    assert_eq!(end_sessions(&srv).await, 1);
    let r = c
        .call_tool("echo", Some(raw(r#"{"n":2}"#)), CallOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}\nserver log:\n{}", srv.log_text()));
    assert_eq!(text_of(&r.raw), r#"{"n": 2}"#);
    let tools = c.list_tools().await.unwrap();
    assert_eq!(tools.len(), 6);
    notify_and_relist(&c, &mut events, &srv).await;
    // Exactly one session is open: the renewed one.
    assert_eq!(end_sessions(&srv).await, 1);
    let r = c
        .call_tool("echo", Some(raw(r#"{"n":3}"#)), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(text_of(&r.raw), r#"{"n": 3}"#);
    assert!(c.close_reason().is_none());
    c.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn fastmcp_server_over_streamable_http() {
    let env = interop();
    let srv = python_server(&env, "fastmcp_server.py");
    let (c, control) = start(&srv, "/mcp", HttpMode::Auto, opts()).await;
    assert_eq!(control.kind(), "streamable-http");
    assert_eq!(
        c.negotiated().server_name.as_deref(),
        Some("mcphost-interop-fastmcp")
    );
    // fastmcp serves both eras; the probe finds the stateless one.
    assert_eq!(c.negotiated().protocol_version.as_str(), "2026-07-28");
    common::exercise_fastmcp(&c).await;
    c.shutdown().await;
}

// ---------------------------------------------------------------------------
// The CLI: `--direct URL`

fn tool_names(tools: &Value) -> BTreeSet<String> {
    tools
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {tools}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn cli_direct_over_streamable_http_and_sse() {
    let env = interop();
    let http = everything(&env, "streamableHttp");
    let sse = everything(&env, "sse");
    let sb = Sandbox::new(); // no daemon: its socket does not exist
    let ev = format!("ev={}", http.url("/mcp"));
    let old = format!("old={}", sse.url("/sse"));

    // `servers` shows the transport actually in use.
    let servers = sb.json(&["--direct", &ev, "--direct", &old, "servers"]);
    let by_name = |n: &str| {
        servers
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("{n} missing: {servers}"))
    };
    for (name, transport) in [("ev", "streamable-http"), ("old", "sse")] {
        let s = by_name(name);
        assert_eq!(s["state"], "ready", "{s}");
        assert_eq!(s["transport"], transport, "{s}");
        assert_eq!(s["protocolVersion"], "2025-11-25", "{s}");
        assert!(s["tools"].as_u64() > Some(0), "{s}");
        assert!(s.get("pid").is_none(), "no process of ours: {s}");
    }
    let table = sb.run(&["--direct", &ev, "servers"]);
    assert_eq!(table.code, 0, "{table:?}");
    assert!(table.stdout.contains("streamable-http"), "{}", table.stdout);

    let names = tool_names(&sb.json(&["--direct", &ev, "--direct", &old, "tools"]));
    for n in ["ev__echo", "old__echo", "ev__get-structured-content"] {
        assert!(names.contains(n), "{n} missing from {names:?}");
    }

    for (spec, tool) in [(&ev, "ev__echo"), (&old, "old__echo"), (&ev, "echo")] {
        let r = sb.json(&[
            "--direct",
            spec,
            "call",
            tool,
            r#"{"message":"from the cli"}"#,
        ]);
        assert_eq!(
            common::text_of(&r),
            "Echo: from the cli",
            "{spec} {tool}: {r}"
        );
        // Plain output: the text.
        let r = sb.run(&["--direct", spec, "call", tool, r#"{"message":"plain"}"#]);
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.contains("Echo: plain"), "{r:?}");
    }
    let r = sb.json(&[
        "--direct",
        &ev,
        "call",
        "ev__get-structured-content",
        r#"{"location":"Chicago"}"#,
    ]);
    assert!(r["structuredContent"]["temperature"].is_number(), "{r}");

    // isError: exit code 1; an unknown tool: 2.
    let r = sb.run(&["--direct", &ev, "call", "ev__echo", r#"{"wrong":1}"#]);
    assert_eq!(r.code, 1, "{r:?}");
    let r = sb.run(&["--direct", &ev, "call", "ev__nope", "{}"]);
    assert_eq!(r.code, 2, "{r:?}");

    // An unnamed URL still works (named from the server or its host).
    let plain = http.url("/mcp");
    let names = tool_names(&sb.json(&["--direct", &plain, "tools"]));
    assert!(names.iter().any(|n| n.ends_with("__echo")), "{names:?}");
    assert!(!sb.socket.exists());
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn cli_direct_to_python_servers() {
    let env = interop();
    let py = python_server(&env, "py_server.py");
    let fm = python_server(&env, "fastmcp_server.py");
    let sb = Sandbox::new();
    let p = format!("py={}", py.url("/mcp"));
    let f = format!("fm={}", fm.url("/mcp"));
    let names = tool_names(&sb.json(&["--direct", &p, "--direct", &f, "tools"]));
    let want: BTreeSet<String> = [
        "py__echo",
        "py__add",
        "py__fail",
        "py__slow",
        "py__interview",
        "py__notify",
        "fm__echo",
        "fm__add",
        "fm__fail",
        "fm__slow",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(names, want);
    let r = sb.json(&["--direct", &p, "call", "py__add", r#"{"a":1,"b":2}"#]);
    assert_eq!(r["structuredContent"], json!({"sum": 3}), "{r}");
    let r = sb.json(&["--direct", &f, "call", "fm__add", r#"{"a":1,"b":2}"#]);
    assert_eq!(r["structuredContent"]["sum"], json!(3.0), "{r}");
    let r = sb.run(&["--direct", &p, "call", "py__fail", "{}"]);
    assert_eq!(r.code, 1, "{r:?}");
}

// ---------------------------------------------------------------------------
// The daemon

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn daemon_serves_http_and_stdio_servers_side_by_side() {
    let env = interop();
    let http = everything(&env, "streamableHttp");
    let sse = everything(&env, "sse");
    let py = python_server(&env, "py_server.py");
    let cfg = format!(
        r#"{{
  "loginShellPath": false,
  "mcpServers": {{
    "ev":     {{ "url": {} }},
    "evsse":  {{ "url": {}, "type": "sse" }},
    "evauto": {{ "url": {} }},
    "py":     {{ "url": {}, "type": "streamable-http" }},
    "ts":     {{ "command": {} }},
  }}
}}"#,
        js(&http.url("/mcp")),
        js(&sse.url("/sse")),
        js(&sse.url("/sse")),
        js(&py.url("/mcp")),
        js(TESTSERVER)
    );
    let mut sb = Sandbox::new();
    // The re-list below is read off the requests the daemon logs.
    sb.env.push(("RUST_LOG".into(), "mcphost=debug".into()));
    let mut d = Daemon::start_in(sb, &cfg);
    let servers = d.wait_ready(&["ev", "evsse", "evauto", "py", "ts"], READY);
    // Each its own era: the Python SDK serves both and is spoken to in
    // 2026-07-28, the others only know the handshake.
    for (name, transport, stateless) in [
        ("ev", "streamable-http", false),
        ("evsse", "sse", false),
        ("evauto", "sse", false),
        ("py", "streamable-http", true),
        ("ts", "stdio", false),
    ] {
        let s = &servers[name];
        assert_eq!(s["transport"], transport, "{s}");
        let version = s["protocolVersion"].as_str().unwrap_or_default();
        if stateless {
            assert_eq!(version, "2026-07-28", "{s}");
        } else {
            assert!(
                ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"].contains(&version),
                "{s}"
            );
        }
        assert_eq!(s.get("pid").is_some(), name == "ts", "{s}");
    }

    // One catalog over both kinds of transport.
    let tools = d.json(&["tools"]);
    let names = tool_names(&tools);
    for n in [
        "ev__echo",
        "evsse__echo",
        "evauto__echo",
        "py__add",
        "py__notify",
        "ts__echo",
    ] {
        assert!(names.contains(n), "{n} missing from {names:?}");
    }
    for (name, s) in &servers {
        let listed = tools
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["server"] == **name)
            .count();
        assert_eq!(s["tools"].as_u64(), Some(listed as u64), "{s}");
    }

    // Calls through the socket.
    for tool in ["ev__echo", "evsse__echo", "evauto__echo"] {
        let r = d.json(&["call", tool, r#"{"message":"via the daemon"}"#]);
        assert_eq!(common::text_of(&r), "Echo: via the daemon", "{tool}: {r}");
    }
    let r = d.json(&["call", "py__add", r#"{"a":2,"b":3.5}"#]);
    assert_eq!(r["structuredContent"], json!({"sum": 5.5}), "{r}");
    let r = d.json(&["call", "ts__echo", r#"{"text":"stdio too"}"#]);
    assert_eq!(common::text_of(&r), "stdio too", "{r}");
    let r = d.run(&["call", "py__fail", r#"{"message":"boom"}"#]);
    assert_eq!(r.code, 1, "{r:?}");
    // A list_changed from an HTTP server: re-listed (its three tools/list
    // pages are asked for again), still 5 tools.
    let lists_sent = |d: &Daemon| {
        d.log_text()
            .lines()
            .filter(|l| l.contains(r#"request{server=py method="tools/list""#))
            .filter(|l| l.contains(": sending"))
            .count()
    };
    let before = lists_sent(&d);
    assert!(
        before >= 3,
        "py's first listing is not in the log:\n{}",
        d.log_text()
    );
    let r = d.json(&["call", "py__notify", "{}"]);
    assert!(common::text_of(&r).starts_with("sent 3"), "{r}");
    common::poll("py's tools re-listed", Duration::from_secs(20), || {
        (lists_sent(&d) >= before + 3).then_some(())
    });
    assert_eq!(d.server("py").unwrap()["tools"], 6);

    // The official Python SDK, through `mcphost bridge`.
    let mut cmd = Command::new(&env.python);
    cmd.arg(env.dir.join("bridge_client.py"))
        .args([MCPHOST, d.socket.to_str().unwrap(), "ev__echo"])
        .arg(r#"{"message":"from the python sdk"}"#)
        .env("HOME", &d.home)
        .stdin(std::process::Stdio::null());
    let out = output_within(cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["isError"], json!(false), "{got}");
    assert_eq!(got["text"], json!(["Echo: from the python sdk"]), "{got}");
    let sdk: BTreeSet<String> = got["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sdk, names, "the SDK sees the same catalog");

    // Stopping the daemon ends its Streamable HTTP sessions with a DELETE.
    let status = d.terminate(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(
        http.wait_log(
            "Received session termination request",
            Duration::from_secs(5)
        ),
        "no DELETE when the daemon stopped; server log:\n{}",
        http.log_text()
    );
}

/// A server that goes away: calls fail at once saying why, and once it is
/// back on its port the daemon reconnects by itself.
#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn daemon_reconnects_when_an_http_server_comes_back() {
    let env = interop();
    let make = everything_command(&env, "streamableHttp");
    let srv = HttpServer::start("everything", START, &make).unwrap_or_else(|e| panic!("{e}"));
    let port = srv.port;
    let cfg = format!(
        r#"{{ "loginShellPath": false, "mcpServers": {{ "ev": {{ "url": {} }} }} }}"#,
        js(&srv.url("/mcp"))
    );
    let d = Daemon::start(&cfg);
    d.wait_ready(&["ev"], READY);
    let args = r#"{"message":"up"}"#;
    assert_eq!(
        common::text_of(&d.json(&["call", "ev__echo", args])),
        "Echo: up"
    );

    drop(srv); // SIGKILL: nothing is listening on the port any more
    let t = std::time::Instant::now();
    let r = d.run(&["call", "ev__echo", args]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(
        r.stderr.contains("ev") && r.stderr.contains("refused"),
        "{r:?}"
    );
    let s = d.server("ev").unwrap();
    assert!(
        ["restarting", "failed"].contains(&s["state"].as_str().unwrap_or_default()),
        "{s}"
    );
    assert!(
        s["error"].as_str().unwrap_or_default().contains("refused"),
        "{s}"
    );

    let srv =
        HttpServer::start_on("everything", port, START, &make).unwrap_or_else(|e| panic!("{e}"));
    common::poll("the daemon to reach the server again", READY, || {
        let r = d.run(&["--json", "call", "ev__echo", r#"{"message":"back"}"#]);
        (r.code == 0).then(|| assert_eq!(common::text_of(&r.json()), "Echo: back"))
    });
    // A call is answered as soon as the session is up; `ready` comes once
    // the re-listing has landed too (docs/ipc.md), a moment later.
    common::poll("ev to be ready again", READY, || {
        (d.server("ev").unwrap()["state"] == "ready").then_some(())
    });
    assert!(
        srv.log_text().contains("Session initialized with ID"),
        "{}",
        srv.log_text()
    );
}

// ---------------------------------------------------------------------------
// The fixtures themselves, checked with the Python SDK's own client (so a
// failure above is mcphost's, not the server's).

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn python_sdk_client_reaches_every_server() {
    let env = interop();
    let http = everything(&env, "streamableHttp");
    let sse = everything(&env, "sse");
    let py = python_server(&env, "py_server.py");
    let fm = python_server(&env, "fastmcp_server.py");
    let cases: [(&HttpServer, &str, &[&str], &str, &str); 4] = [
        (
            &http,
            "/mcp",
            &["--calls", "3"],
            "mcp-servers/everything",
            "Echo: p3",
        ),
        (
            &sse,
            "/sse",
            &["--sse", "--calls", "3"],
            "mcp-servers/everything",
            "Echo: p3",
        ),
        (
            &py,
            "/mcp",
            &["--args", r#"{"k":1}"#],
            "mcphost-interop-py",
            r#"{"k": 1}"#,
        ),
        (
            &fm,
            "/mcp",
            &["--args", r#"{"text":"hi"}"#],
            "mcphost-interop-fastmcp",
            "hi",
        ),
    ];
    // The four clients run at once (Python starts slowly).
    std::thread::scope(|scope| {
        let runs: Vec<_> = cases
            .iter()
            .map(|&(srv, path, args, _, _)| {
                let mut cmd = Command::new(&env.python);
                cmd.arg(env.dir.join("http_client.py"))
                    .arg(srv.url(path))
                    .args(args)
                    .stdin(std::process::Stdio::null());
                scope.spawn(move || output_within(cmd, Duration::from_secs(60)))
            })
            .collect();
        for ((srv, _, _, server_name, text), run) in cases.into_iter().zip(runs) {
            let out = run.join().unwrap();
            assert!(
                out.status.success(),
                "{}: {}\nserver log:\n{}",
                srv.name,
                String::from_utf8_lossy(&out.stderr),
                srv.log_text()
            );
            let got: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(got["serverName"], server_name, "{got}");
            assert_eq!(got["text"], json!([text]), "{got}");
            assert_eq!(got["isError"], json!(false), "{got}");
        }
    });
}

// ---------------------------------------------------------------------------
// Both eras side by side

/// One daemon, seven real servers nobody here wrote, on stdio and HTTP:
/// server-everything (TypeScript SDK, handshake only) beside the Python
/// `mcp` SDK, fastmcp and mcp-server-time (dual-era). Nothing is pinned:
/// each negotiates its own era, and a tool of each is called in the same
/// run, through the socket and through `--direct`.
#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn both_eras_in_one_daemon_on_stdio_and_http_through_the_socket_and_direct() {
    let env = interop();
    let evh = everything(&env, "streamableHttp");
    let pyh = python_server(&env, "py_server.py");
    let fmh = python_server(&env, "fastmcp_server.py");
    let script = |s: &str| env.dir.join(s).display().to_string();
    let stdio = |args: &[String]| {
        let args: Vec<String> = args.iter().map(|a| js(a)).collect();
        format!(
            r#""command": {}, "args": [{}]"#,
            js(env.python.to_str().unwrap()),
            args.join(", ")
        )
    };
    let servers = [
        ("ev", env.node_entry("server-everything")),
        ("evh", format!(r#""url": {}"#, js(&evh.url("/mcp")))),
        ("py", stdio(&[script("py_server.py")])),
        ("pyh", format!(r#""url": {}"#, js(&pyh.url("/mcp")))),
        ("fm", stdio(&[script("fastmcp_server.py")])),
        ("fmh", format!(r#""url": {}"#, js(&fmh.url("/mcp")))),
        ("time", env.time_entry()),
    ];
    let d = Daemon::start_in(Sandbox::new(), &common::servers_config(&servers));
    let names: Vec<&str> = servers.iter().map(|(n, _)| *n).collect();
    let ready = d.wait_ready(&names, READY);
    let want = [
        ("ev", "stdio", "2025-11-25", "handshake"),
        ("evh", "streamable-http", "2025-11-25", "handshake"),
        ("py", "stdio", "2026-07-28", "stateless"),
        ("pyh", "streamable-http", "2026-07-28", "stateless"),
        ("fm", "stdio", "2026-07-28", "stateless"),
        ("fmh", "streamable-http", "2026-07-28", "stateless"),
        ("time", "stdio", "2026-07-28", "stateless"),
    ];
    for (name, transport, version, era) in want {
        let s = &ready[name];
        eprintln!(
            "{name:5} {:16} {:11} {}",
            s["transport"].as_str().unwrap_or_default(),
            s["protocolVersion"].as_str().unwrap_or_default(),
            s["era"].as_str().unwrap_or_default()
        );
        assert_eq!(s["transport"], transport, "{s}");
        assert_eq!(s["protocolVersion"], version, "{s}");
        assert_eq!(s["era"], era, "{s}");
    }
    let status = d.json(&["status"]);
    assert_eq!(
        status["eras"],
        json!({"handshake": 2, "stateless": 5}),
        "{status}"
    );

    // A tool of every server, through the socket.
    let calls = [
        ("ev__echo", r#"{"message":"ev"}"#, "Echo: ev"),
        ("evh__echo", r#"{"message":"evh"}"#, "Echo: evh"),
        ("py__echo", r#"{"who":"py"}"#, r#"{"who": "py"}"#),
        ("pyh__echo", r#"{"who":"pyh"}"#, r#"{"who": "pyh"}"#),
        ("fm__echo", r#"{"text":"fm"}"#, "fm"),
        ("fmh__echo", r#"{"text":"fmh"}"#, "fmh"),
    ];
    for (tool, args, text) in calls {
        let r = d.json(&["call", tool, args]);
        assert!(common::text_of(&r).contains(text), "{tool}: {r}");
    }
    let r = d.json(&["call", "time__get_current_time", r#"{"timezone":"UTC"}"#]);
    assert!(common::text_of(&r).contains("UTC"), "{r}");

    // The same servers in-process (`--direct`), negotiated again.
    let sb = Sandbox::new();
    let py_cmd = shell_words::join([env.python.to_str().unwrap(), &script("py_server.py")]);
    let ev_entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let ev_cmd = shell_words::join([env.node.as_str(), ev_entry.to_str().unwrap()]);
    let direct = [
        format!("ev={ev_cmd}"),
        format!("evh={}", evh.url("/mcp")),
        format!("py={py_cmd}"),
        format!("fmh={}", fmh.url("/mcp")),
    ];
    let mut args: Vec<&str> = Vec::new();
    for spec in &direct {
        args.extend(["--direct", spec.as_str()]);
    }
    let mut servers_args = args.clone();
    servers_args.push("servers");
    let listed = sb.json(&servers_args);
    let era_of = |name: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["protocolVersion"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(era_of("ev"), "2025-11-25", "{listed}");
    assert_eq!(era_of("evh"), "2025-11-25", "{listed}");
    assert_eq!(era_of("py"), "2026-07-28", "{listed}");
    assert_eq!(era_of("fmh"), "2026-07-28", "{listed}");
    for (tool, call_args, text) in [
        ("ev__echo", r#"{"message":"direct"}"#, "Echo: direct"),
        ("evh__echo", r#"{"message":"direct"}"#, "Echo: direct"),
        ("py__add", r#"{"a":20,"b":22}"#, "42"),
        ("fmh__echo", r#"{"text":"direct fm"}"#, "direct fm"),
    ] {
        let mut a = args.clone();
        a.extend(["call", tool, call_args]);
        let r = sb.json(&a);
        assert!(r.to_string().contains(text), "--direct {tool}: {r}");
    }
}
