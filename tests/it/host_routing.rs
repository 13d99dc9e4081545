//! The broker in-process: which session a server's request reaches, what
//! it carries, and what answers when no session can. Our test server sends
//! its sampling, elicitation and roots requests during a `tools/call`.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{TESTSERVER, text_of};
use mcphost::client::{Host, HostRequest, NoHost};
use mcphost::engine::{Engine, EngineBuilder, HostPort, META_SERVER, Session, SessionLimits};
use mcphost::protocol::capabilities::{ElicitationCap, Empty, RootsCap, SamplingCap};
use mcphost::protocol::{ClientCapabilities, ErrorObject, Id, RawValue};
use mcphost::transport::BoxFuture;
use serde_json::{Value, json};

/// A host that answers every request with its own name, and records them.
struct NamedHost {
    name: &'static str,
    seen: Mutex<Vec<(String, Value)>>,
    /// Sampling takes this long to answer.
    delay: Duration,
}

impl NamedHost {
    fn new(name: &'static str) -> Arc<NamedHost> {
        NamedHost::slow(name, Duration::ZERO)
    }

    fn slow(name: &'static str, delay: Duration) -> Arc<NamedHost> {
        Arc::new(NamedHost {
            name,
            seen: Mutex::new(Vec::new()),
            delay,
        })
    }

    fn seen(&self) -> Vec<(String, Value)> {
        self.seen.lock().unwrap().clone()
    }
}

impl Host for NamedHost {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            roots: Some(RootsCap { list_changed: true }),
            sampling: Some(SamplingCap::default()),
            elicitation: Some(ElicitationCap {
                form: Some(Empty::default()),
                url: None,
            }),
        }
    }

    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        let params: Value = r
            .params
            .as_deref()
            .map(|p| serde_json::from_str(p.get()).unwrap())
            .unwrap_or(Value::Null);
        self.seen.lock().unwrap().push((r.method.clone(), params));
        let name = self.name;
        let delay = self.delay;
        let answer = match r.method.as_str() {
            "sampling/createMessage" => json!({
                "role": "assistant",
                "content": {"type": "text", "text": format!("sampled by {name}")},
                "model": name,
            }),
            "elicitation/create" => json!({"action": "accept", "content": {"name": name}}),
            _ => json!({"roots": [{"uri": format!("file:///{name}"), "name": name}]}),
        };
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok(RawValue::from_string(answer.to_string()).unwrap())
        })
    }
}

fn engine(extra: &str) -> Arc<Engine> {
    let text = format!(
        r#"{{"mcpServers":{{"ts":{{"command":{TESTSERVER:?}}}}},"loginShellPath":false{extra}}}"#
    );
    let cfg = mcphost::config::parse(
        &text,
        std::path::Path::new("/nonexistent/config.json"),
        &|_| None,
    )
    .unwrap();
    EngineBuilder::new(cfg).start()
}

fn session(engine: &Arc<Engine>, host: Arc<dyn Host>) -> Arc<Session> {
    let port = Arc::new(HostPort::new(host, |_, _| {}));
    let caps = port.capabilities();
    let s = engine.open_session("test", port, SessionLimits::default());
    s.initialize_as(caps);
    s
}

async fn call(s: &Arc<Session>, id: i64, tool: &str, args: Value) -> String {
    let params = json!({"name": format!("ts__{tool}"), "arguments": args});
    let raw = RawValue::from_string(params.to_string()).unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        s.request(Id::number(id), "tools/call", Some(raw)),
    )
    .await
    .expect("the call did not finish")
    .unwrap_or_else(|e| panic!("{tool} failed: {e}"));
    text_of(&serde_json::from_str(r.get()).unwrap())
}

async fn ready(engine: &Arc<Engine>) {
    engine.registry().settled(Duration::from_secs(20)).await;
    assert!(
        engine.registry().catalog().route("ts__sample").is_some(),
        "the test server's tools are not listed"
    );
}

#[tokio::test]
async fn each_session_gets_the_requests_its_own_calls_cause_with_the_server_named() {
    let engine = engine("");
    ready(&engine).await;
    let (ha, hb) = (NamedHost::new("a"), NamedHost::new("b"));
    let (a, b) = (session(&engine, ha.clone()), session(&engine, hb.clone()));

    assert!(
        call(&a, 1, "sample", json!({}))
            .await
            .contains("sampled by a")
    );
    assert!(
        call(&b, 1, "sample", json!({}))
            .await
            .contains("sampled by b")
    );
    assert!(
        call(&b, 2, "elicit", json!({}))
            .await
            .contains(r#""name":"b""#)
    );
    // Roots are not the caller's: a shared server's come from its roots
    // source, and two hosts with roots and no primary leave it none.
    assert_eq!(call(&a, 2, "roots", json!({})).await, r#"{"roots":[]}"#);

    let (sa, sb) = (ha.seen(), hb.seen());
    let methods = |s: &[(String, Value)]| s.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>();
    assert_eq!(methods(&sa), ["sampling/createMessage"]);
    assert_eq!(
        methods(&sb),
        ["sampling/createMessage", "elicitation/create"]
    );
    // The asking server is named; the server's own params are all there.
    let (_, sampled) = &sa[0];
    assert_eq!(sampled["_meta"][META_SERVER], "ts");
    assert_eq!(sampled["maxTokens"], 100);
    assert_eq!(
        sampled["systemPrompt"],
        "You are being called by mcphost-testserver."
    );
}

#[tokio::test]
async fn with_calls_of_two_sessions_in_flight_on_stdio_nobody_is_guessed_then_calls_take_turns() {
    let engine = engine("");
    ready(&engine).await;
    let (ha, hb, hp) = (
        NamedHost::slow("a", Duration::from_millis(300)),
        NamedHost::slow("b", Duration::from_millis(300)),
        NamedHost::slow("p", Duration::from_millis(300)),
    );
    let (a, b, p) = (
        session(&engine, ha.clone()),
        session(&engine, hb.clone()),
        session(&engine, hp.clone()),
    );
    p.request(Id::number(1), "mcphost/host/register", None)
        .await
        .unwrap();
    // The server has not asked before, so the calls run together: when it
    // asks with both in flight, stdio cannot say whose it is, and neither
    // session, nor the primary, is guessed at.
    let (ra, rb) = tokio::join!(
        call(&a, 1, "sample", json!({})),
        call(&b, 1, "sample", json!({}))
    );
    for r in [&ra, &rb] {
        assert!(
            r.contains("sampled by") || r.contains("User rejected"),
            "{r}"
        );
    }
    assert!(
        !ra.contains("sampled by b") && !rb.contains("sampled by a"),
        "{ra} / {rb}"
    );
    assert!(
        hp.seen().is_empty(),
        "the primary was asked: {:?}",
        hp.seen()
    );
    // Having asked, it takes one session's calls at a time: each session
    // gets its own answer.
    let (ra, rb) = tokio::join!(
        call(&a, 2, "sample", json!({})),
        call(&b, 2, "sample", json!({}))
    );
    assert!(ra.contains("sampled by a"), "{ra}");
    assert!(rb.contains("sampled by b"), "{rb}");
    assert!(
        hp.seen().is_empty(),
        "the primary was asked: {:?}",
        hp.seen()
    );
}

#[tokio::test]
async fn without_a_host_the_fallback_declines_and_roots_are_the_configured_ones() {
    let engine = engine(r#","roots":["/configured"]"#);
    ready(&engine).await;
    let s = session(&engine, Arc::new(NoHost));
    let sampled = call(&s, 1, "sample", json!({})).await;
    assert!(
        sampled.contains("-1") && sampled.contains("User rejected"),
        "{sampled}"
    );
    let elicited = call(&s, 2, "elicit", json!({})).await;
    assert!(elicited.contains(r#""action":"decline""#), "{elicited}");
    let roots = call(&s, 3, "roots", json!({})).await;
    assert!(roots.contains("file:///configured"), "{roots}");

    // A host's roots come first, the configured ones after.
    let h = session(&engine, NamedHost::new("h"));
    let roots = call(&h, 1, "roots", json!({})).await;
    let at = |s: &str| {
        roots
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing in {roots}"))
    };
    assert!(at("file:///h") < at("file:///configured"), "{roots}");
}

#[tokio::test]
async fn a_session_that_cannot_answer_gets_the_fallback_never_the_primary() {
    let engine = engine("");
    ready(&engine).await;
    let hp = NamedHost::new("p");
    let p = session(&engine, hp.clone());
    p.request(Id::number(1), "mcphost/host/register", None)
        .await
        .unwrap();
    let mute = session(&engine, Arc::new(NoHost));
    let got = call(&mute, 1, "sample", json!({})).await;
    assert!(got.contains("User rejected"), "{got}");
    assert!(
        hp.seen().is_empty(),
        "the primary was asked: {:?}",
        hp.seen()
    );
    // A session without host capabilities cannot register.
    let e = mute
        .request(Id::number(3), "mcphost/host/register", None)
        .await
        .unwrap_err();
    assert!(e.message.contains("declared none"), "{e}");
}

#[tokio::test]
async fn a_per_session_server_runs_one_instance_per_session_and_stops_it_when_the_session_goes() {
    let text = format!(
        r#"{{"mcpServers":{{"ts":{{"command":{TESTSERVER:?},"share":"per-session"}}}},"loginShellPath":false}}"#
    );
    let cfg =
        mcphost::config::parse(&text, std::path::Path::new("/n/config.json"), &|_| None).unwrap();
    let engine = EngineBuilder::new(cfg).start();
    ready(&engine).await;
    let shared = engine.registry().client("ts").unwrap().pid().unwrap();
    let (ha, hb) = (NamedHost::new("a"), NamedHost::new("b"));
    let (a, b) = (session(&engine, ha.clone()), session(&engine, hb.clone()));
    // Concurrent calls of two sessions: on a shared stdio server this is
    // ambiguous; here each instance has one session, so each is answered
    // by its own host.
    let (ra, rb) = tokio::join!(
        call(&a, 1, "sample", json!({})),
        call(&b, 1, "sample", json!({}))
    );
    assert!(ra.contains("sampled by a"), "{ra}");
    assert!(rb.contains("sampled by b"), "{rb}");
    // The lister plus one instance per session, each its own process.
    let status = engine.registry().statuses().pop().unwrap();
    let instances: Vec<(u64, u32)> = status
        .session_instances
        .iter()
        .map(|i| (i.session, i.pid.unwrap()))
        .collect();
    assert_eq!(instances.len(), 2, "{status:?}");
    let pid_a = instances.iter().find(|(s, _)| *s == a.id()).unwrap().1;
    assert!(instances.iter().all(|(_, p)| *p != shared), "{instances:?}");
    assert_ne!(instances[0].1, instances[1].1);
    drop(a);
    // The session's instance is stopped once it is gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while common::alive(pid_a) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !common::alive(pid_a),
        "session a's own instance outlived it"
    );
    let left = engine
        .registry()
        .statuses()
        .pop()
        .unwrap()
        .session_instances
        .len();
    assert_eq!(left, 1);
    engine.registry().shutdown().await;
}

/// A client that is gone but whose session has not been freed yet (a bridge
/// lingering on its socket): every request to it fails as disconnected.
struct GonePort;

impl mcphost::engine::ClientPort for GonePort {
    fn notify(&self, _: &str, _: Option<Box<RawValue>>) -> Result<(), mcphost::jsonrpc::PeerError> {
        Ok(())
    }
    fn request(
        &self,
        _: &str,
        _: Option<Box<RawValue>>,
        _: Duration,
    ) -> BoxFuture<'static, Result<Box<RawValue>, mcphost::jsonrpc::PeerError>> {
        let gone = mcphost::transport::CloseReason::new("gone");
        Box::pin(std::future::ready(Err(
            mcphost::jsonrpc::PeerError::Closed(Arc::new(gone)),
        )))
    }
    fn disconnect(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test]
async fn a_request_for_a_host_that_is_gone_fails_and_no_other_host_is_asked() {
    let engine = engine("");
    ready(&engine).await;
    let gone = engine.open_session("gone", Arc::new(GonePort), SessionLimits::default());
    gone.initialize_as(NamedHost::new("g").capabilities());
    let hb = NamedHost::new("b");
    let b = session(&engine, hb.clone());
    b.request(Id::number(1), "mcphost/host/register", None)
        .await
        .unwrap();
    let got = call(&gone, 1, "sample", json!({})).await;
    assert!(got.contains("disconnected before answering"), "{got}");
    assert!(
        hb.seen().is_empty(),
        "another host was asked: {:?}",
        hb.seen()
    );
}

#[tokio::test]
async fn a_server_not_offered_sampling_never_reaches_a_host_with_it() {
    let text = format!(
        r#"{{"mcpServers":{{"ts":{{"command":{TESTSERVER:?},"offer":{{"sampling":false}}}}}},"loginShellPath":false}}"#
    );
    let cfg =
        mcphost::config::parse(&text, std::path::Path::new("/n/config.json"), &|_| None).unwrap();
    let engine = EngineBuilder::new(cfg).start();
    ready(&engine).await;
    let h = NamedHost::new("h");
    let s = session(&engine, h.clone());
    let got = call(&s, 1, "sample", json!({})).await;
    assert!(got.contains("-32601"), "{got}");
    // Elicitation is still offered and reaches the host.
    assert!(
        call(&s, 2, "elicit", json!({}))
            .await
            .contains(r#""name":"h""#)
    );
    let seen: Vec<String> = h.seen().into_iter().map(|(m, _)| m).collect();
    assert_eq!(seen, ["elicitation/create"]);
    engine.shutdown().await;
}

/// A host that never answers.
struct SilentHost;

impl Host for SilentHost {
    fn capabilities(&self) -> ClientCapabilities {
        NamedHost::new("s").capabilities()
    }
    fn handle(&self, _: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn a_host_that_does_not_answer_in_time_gets_the_server_an_error_naming_it() {
    let engine = engine(r#","hostTimeouts":{"sampling":"300ms"}"#);
    ready(&engine).await;
    let s = session(&engine, Arc::new(SilentHost));
    let started = std::time::Instant::now();
    let got = call(&s, 1, "sample", json!({})).await;
    let took = started.elapsed();
    assert!(
        got.contains("did not answer sampling/createMessage"),
        "{got}"
    );
    assert!(got.contains("test"), "the host is not named: {got}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

fn stateless_engine(args: &[&str]) -> Arc<Engine> {
    let entry = json!({"command": TESTSERVER, "args": args, "protocolVersion": "2026-07-28"});
    let text = json!({"mcpServers": {"ts": entry}, "loginShellPath": false}).to_string();
    let cfg =
        mcphost::config::parse(&text, std::path::Path::new("/n/config.json"), &|_| None).unwrap();
    EngineBuilder::new(cfg).start()
}

#[tokio::test]
async fn a_pinned_stateless_server_is_discovered_and_its_input_required_rounds_reach_the_callers_host()
 {
    let engine = stateless_engine(&["--era", "stateless"]);
    ready(&engine).await;
    let status = engine.registry().statuses().pop().unwrap();
    assert_eq!(
        status.protocol_version.as_deref(),
        Some("2026-07-28"),
        "{status:?}"
    );
    let (ha, hb) = (NamedHost::new("a"), NamedHost::new("b"));
    let (a, b) = (session(&engine, ha.clone()), session(&engine, hb.clone()));
    assert!(
        call(&a, 1, "echo", json!({"text": "hi"}))
            .await
            .contains("hi")
    );
    // The rounds carry their call's origin, so even concurrent calls of two
    // sessions on one stdio server are never ambiguous.
    let (ra, rb) = tokio::join!(
        call(&a, 2, "sample", json!({})),
        call(&b, 2, "sample", json!({}))
    );
    assert!(ra.contains("sampled by a"), "{ra}");
    assert!(rb.contains("sampled by b"), "{rb}");
    assert!(
        call(&b, 3, "elicit", json!({}))
            .await
            .contains(r#""name":"b""#)
    );
    assert!(call(&a, 3, "roots", json!({})).await.contains("file:///a"));
    let (_, sampled) = &ha.seen()[0];
    assert_eq!(sampled["_meta"][META_SERVER], "ts");
    engine.shutdown().await;
}

#[tokio::test]
async fn an_input_required_loop_that_never_completes_is_bounded() {
    let engine = stateless_engine(&[
        "--era",
        "stateless",
        "--stateless-fault",
        "input-required-forever",
    ]);
    ready(&engine).await;
    let s = session(&engine, NamedHost::new("a"));
    let params = json!({"name": "ts__sample", "arguments": {}});
    let raw = RawValue::from_string(params.to_string()).unwrap();
    let e = tokio::time::timeout(
        Duration::from_secs(20),
        s.request(Id::number(1), "tools/call", Some(raw)),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(e.message.contains("asked for input 16 times"), "{e}");
    engine.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn both_eras_side_by_side_server_everything_beside_stateless_python_sdk_and_fastmcp() {
    let env = common::interop();
    let ev = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let py = |script: &str| env.dir.join(script).display().to_string();
    let text = json!({
        "mcpServers": {
            "ev": {"command": env.node, "args": [ev.display().to_string(), "stdio"]},
            // Unpinned: each era is negotiated (server/discover first).
            "py": {"command": env.python, "args": [py("py_server.py")]},
            "fm": {"command": env.python, "args": [py("fastmcp_server.py")]},
        },
        "loginShellPath": false,
    })
    .to_string();
    let cfg =
        mcphost::config::parse(&text, std::path::Path::new("/n/config.json"), &|_| None).unwrap();
    let engine = EngineBuilder::new(cfg).start();
    let failed = engine.wait_started(Duration::from_secs(60)).await;
    assert!(failed.is_empty(), "{failed:?}");
    let versions: std::collections::BTreeMap<String, String> = engine
        .registry()
        .statuses()
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.protocol_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    eprintln!("negotiated: {versions:?}");
    assert_eq!(versions["ev"], "2025-11-25");
    assert_eq!(versions["py"], "2026-07-28");
    assert_eq!(versions["fm"], "2026-07-28");
    let s = session(&engine, NamedHost::new("h"));
    let call_raw = |name: &'static str, args: Value| {
        let s = s.clone();
        async move {
            let params = json!({"name": name, "arguments": args});
            let raw = RawValue::from_string(params.to_string()).unwrap();
            s.request(Id::number(1), "tools/call", Some(raw))
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        }
    };
    let r = call_raw("ev__echo", json!({"message": "from ev"})).await;
    assert!(r.get().contains("from ev"), "{}", r.get());
    let r = call_raw("py__add", json!({"a": 2, "b": 40})).await;
    assert!(r.get().contains(r#""sum":42"#), "{}", r.get());
    let names: Vec<String> = engine
        .registry()
        .catalog()
        .tools()
        .iter()
        .filter(|t| t.server == "fm")
        .map(|t| t.name.clone())
        .collect();
    assert!(!names.is_empty(), "fastmcp listed no tools over 2026-07-28");
    let r = call_raw("fm__echo", json!({"text": "from fastmcp"})).await;
    assert!(r.get().contains("from fastmcp"), "{}", r.get());
    engine.shutdown().await;
}

// ---------------------------------------------------------------------------
// Roots: each server sees the roots of the host(s) it serves

/// A host whose roots the test sets; it counts the `roots/list` it is asked.
struct RootsHost {
    roots: Mutex<Vec<String>>,
    asked: Mutex<usize>,
}

impl RootsHost {
    fn new(roots: &[&str]) -> Arc<RootsHost> {
        Arc::new(RootsHost {
            roots: Mutex::new(roots.iter().map(|r| r.to_string()).collect()),
            asked: Mutex::new(0),
        })
    }

    fn set(&self, roots: &[&str]) {
        *self.roots.lock().unwrap() = roots.iter().map(|r| r.to_string()).collect();
    }

    fn asked(&self) -> usize {
        *self.asked.lock().unwrap()
    }
}

impl Host for RootsHost {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            roots: Some(RootsCap { list_changed: true }),
            ..Default::default()
        }
    }

    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        assert_eq!(r.method, "roots/list");
        *self.asked.lock().unwrap() += 1;
        let roots: Vec<Value> = self
            .roots
            .lock()
            .unwrap()
            .iter()
            .map(|u| json!({"uri": u}))
            .collect();
        let answer = json!({ "roots": roots }).to_string();
        Box::pin(std::future::ready(Ok(
            RawValue::from_string(answer).unwrap()
        )))
    }
}

fn engine_of(config: Value) -> Arc<Engine> {
    let mut config = config;
    config["loginShellPath"] = json!(false);
    let cfg = mcphost::config::parse(
        &config.to_string(),
        std::path::Path::new("/n/config.json"),
        &|_| None,
    )
    .unwrap();
    EngineBuilder::new(cfg).start()
}

/// The URIs a `ts__roots` call got: what the server was answered.
async fn roots_seen(s: &Arc<Session>, id: i64) -> Vec<String> {
    let text = call(s, id, "roots", json!({})).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    v["roots"]
        .as_array()
        .unwrap_or_else(|| panic!("not a roots/list answer: {text}"))
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect()
}

fn told(log: &common::RequestLog) -> usize {
    log.methods()
        .iter()
        .filter(|m| *m == "notifications/roots/list_changed")
        .count()
}

/// Waits (at most 10 s) until `f` holds.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `ts__echo`, answered after every line the daemon wrote to the server
/// before it: what the log holds then is all that was sent so far.
async fn flushed(s: &Arc<Session>, id: i64) {
    assert!(
        call(s, id, "echo", json!({"text": "sync"}))
            .await
            .contains("sync")
    );
}

async fn server_entry(s: &Arc<Session>, id: i64, name: &str) -> Value {
    let r = s
        .request(Id::number(id), "mcphost/servers/list", None)
        .await
        .unwrap();
    let list: Value = serde_json::from_str(r.get()).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

#[tokio::test]
async fn a_shared_servers_roots_are_its_sources_never_those_of_the_host_whose_call_asked() {
    let log = common::RequestLog::new();
    let engine = engine_of(json!({
        "roots": ["/configured"],
        "mcpServers": {"ts": {"command": TESTSERVER, "args": ["--log-requests", log.arg()]}},
    }));
    ready(&engine).await;
    let (ha, hb) = (
        RootsHost::new(&["file:///a"]),
        RootsHost::new(&["file:///b/secret"]),
    );
    let (a, b) = (session(&engine, ha.clone()), session(&engine, hb.clone()));

    // Two hosts of different roots and no primary: the configured roots only,
    // though b's call is the one that made the server ask.
    assert_eq!(roots_seen(&b, 1).await, ["file:///configured"]);
    assert_eq!((ha.asked(), hb.asked()), (0, 0));
    let entry = server_entry(&b, 2, "ts").await;
    assert_eq!(entry["rootsSource"], "configured", "{entry}");
    let note = entry["rootsNote"].as_str().unwrap_or_default();
    assert!(note.contains("shared by 2 hosts with roots"), "{entry}");

    // a registers: the primary is the source, whoever calls.
    a.request(Id::number(1), "mcphost/host/register", None)
        .await
        .unwrap();
    assert_eq!(roots_seen(&b, 3).await, ["file:///a", "file:///configured"]);
    assert_eq!(hb.asked(), 0, "the non-primary host was asked");
    let entry = server_entry(&b, 4, "ts").await;
    assert_eq!(entry["rootsSource"], "primary", "{entry}");
    assert_eq!(entry["rootsHost"], a.id(), "{entry}");

    // b's roots change: not the server's source, so it is not told, and its
    // next ask still gets the primary's roots.
    flushed(&b, 5).await;
    let before = told(&log);
    hb.set(&["file:///b/other"]);
    b.notification("notifications/roots/list_changed", None);
    flushed(&b, 6).await;
    assert_eq!(told(&log), before, "told of a non-source host's roots");
    assert_eq!(roots_seen(&b, 7).await, ["file:///a", "file:///configured"]);
    assert_eq!(hb.asked(), 0);

    // The primary's change is told, and the re-ask gets its new roots.
    ha.set(&["file:///a/new"]);
    a.notification("notifications/roots/list_changed", None);
    until("the server to be told", || told(&log) == before + 1).await;
    assert_eq!(
        roots_seen(&b, 8).await,
        ["file:///a/new", "file:///configured"]
    );

    // The primary leaves: b is the only host with roots now.
    drop(a);
    until("the server to be told", || told(&log) == before + 2).await;
    assert_eq!(
        roots_seen(&b, 9).await,
        ["file:///b/other", "file:///configured"]
    );
    let entry = server_entry(&b, 10, "ts").await;
    assert_eq!(entry["rootsSource"], "only-host", "{entry}");
    engine.shutdown().await;
}

#[tokio::test]
async fn a_per_session_instance_sees_its_own_sessions_roots_and_is_told_when_they_change() {
    // Each process logs what it receives to a file named by its pid (`$$`
    // in the config is one `$`).
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "exec {} --log-requests {}/$$$$.log",
        TESTSERVER,
        dir.path().display()
    );
    let engine = engine_of(json!({
        "roots": ["/configured"],
        "mcpServers": {"ts": {"command": "/bin/sh", "args": ["-c", script], "share": "per-session"}},
    }));
    ready(&engine).await;
    let (ha, hb) = (
        RootsHost::new(&["file:///a"]),
        RootsHost::new(&["file:///b"]),
    );
    let (a, b) = (session(&engine, ha.clone()), session(&engine, hb.clone()));
    let (ra, rb) = tokio::join!(roots_seen(&a, 1), roots_seen(&b, 1));
    assert_eq!(ra, ["file:///a", "file:///configured"]);
    assert_eq!(rb, ["file:///b", "file:///configured"]);

    let status = engine.registry().statuses().pop().unwrap();
    let pid_of = |id: u64| {
        status
            .session_instances
            .iter()
            .find(|i| i.session == id)
            .and_then(|i| i.pid)
            .unwrap()
    };
    let (pid_a, pid_b) = (pid_of(a.id()), pid_of(b.id()));
    let lister = engine.registry().client("ts").unwrap().pid().unwrap();
    let told_to = |pid: u32| {
        let text =
            std::fs::read_to_string(dir.path().join(format!("{pid}.log"))).unwrap_or_default();
        text.matches("notifications/roots/list_changed").count()
    };

    ha.set(&["file:///a/new"]);
    a.notification("notifications/roots/list_changed", None);
    until("a's own instance to be told", || told_to(pid_a) == 1).await;
    flushed(&b, 3).await;
    assert_eq!(told_to(pid_b), 0, "b's instance was told of a's roots");
    assert_eq!(told_to(lister), 0, "the lister was told of a's roots");
    assert_eq!(
        roots_seen(&a, 4).await,
        ["file:///a/new", "file:///configured"]
    );
    assert_eq!(roots_seen(&b, 5).await, ["file:///b", "file:///configured"]);
    let entry = server_entry(&a, 6, "ts").await;
    assert_eq!(entry["rootsSource"], "session", "{entry}");
    engine.shutdown().await;
}

#[tokio::test]
async fn a_server_not_offered_roots_is_never_told_they_changed() {
    let (log, log2) = (common::RequestLog::new(), common::RequestLog::new());
    let engine = engine_of(json!({
        "mcpServers": {
            "ts": {"command": TESTSERVER, "args": ["--log-requests", log.arg()], "offer": {"roots": false}},
            "ts2": {"command": TESTSERVER, "args": ["--log-requests", log2.arg()]},
        },
    }));
    ready(&engine).await;
    let h = RootsHost::new(&["file:///h"]);
    let s = session(&engine, h.clone());
    h.set(&["file:///h/2"]);
    s.notification("notifications/roots/list_changed", None);
    // ts2 is told (of the host's arrival, or of its change): the same
    // notifications went out to ts, if any did.
    until("ts2 to be told", || told(&log2) >= 1).await;
    flushed(&s, 1).await;
    assert_eq!(
        told(&log),
        0,
        "ts was not offered roots: {:?}",
        log.methods()
    );
    let entry = server_entry(&s, 2, "ts").await;
    assert!(entry.get("rootsSource").is_none(), "{entry}");
    engine.shutdown().await;
}

#[tokio::test]
async fn a_burst_of_roots_changes_tells_each_server_once_and_the_re_ask_gets_the_newest() {
    let log = common::RequestLog::new();
    let engine = engine_of(json!({
        "mcpServers": {"ts": {"command": TESTSERVER, "args": ["--log-requests", log.arg()]}},
    }));
    ready(&engine).await;
    let h = RootsHost::new(&["file:///h/0"]);
    let s = session(&engine, h.clone());
    // The host's arrival, then five changes before the server asks again.
    for i in 1..=5 {
        h.set(&[&format!("file:///h/{i}")]);
        s.notification("notifications/roots/list_changed", None);
    }
    until("the server to be told", || told(&log) >= 1).await;
    flushed(&s, 1).await;
    assert_eq!(told(&log), 1, "not coalesced: {:?}", log.methods());
    // The re-ask gets the newest; a second ask is answered from the cache.
    assert_eq!(roots_seen(&s, 2).await, ["file:///h/5"]);
    assert_eq!(roots_seen(&s, 3).await, ["file:///h/5"]);
    assert_eq!(h.asked(), 1);
    // Once it has asked again, the next change is told again.
    h.set(&["file:///h/6"]);
    s.notification("notifications/roots/list_changed", None);
    until("the server to be told again", || told(&log) == 2).await;
    assert_eq!(roots_seen(&s, 4).await, ["file:///h/6"]);
    engine.shutdown().await;
}

#[tokio::test]
async fn a_reload_that_changes_one_servers_configured_roots_tells_only_that_server() {
    let (log, log2) = (common::RequestLog::new(), common::RequestLog::new());
    let config = |roots2: Value| {
        json!({
            "loginShellPath": false,
            "mcpServers": {
                "ts": {"command": TESTSERVER, "args": ["--log-requests", log.arg()]},
                "ts2": {"command": TESTSERVER, "args": ["--log-requests", log2.arg()], "roots": roots2},
            },
        })
    };
    let engine = engine_of(config(json!([])));
    ready(&engine).await;
    let s = session(&engine, Arc::new(NoHost));
    let pid2 = engine.registry().client("ts2").unwrap().pid();
    let reload = mcphost::config::parse(
        &config(json!(["/added"])).to_string(),
        std::path::Path::new("/n/config.json"),
        &|_| None,
    )
    .unwrap();
    engine.apply(&reload);
    until("ts2 to be told", || told(&log2) == 1).await;
    flushed(&s, 1).await;
    assert_eq!(told(&log), 0, "ts's roots did not change");
    // Taken up without a restart; the re-ask gets the new roots.
    assert_eq!(engine.registry().client("ts2").unwrap().pid(), pid2);
    let params = json!({"name": "ts2__roots", "arguments": {}});
    let raw = RawValue::from_string(params.to_string()).unwrap();
    let r = s
        .request(Id::number(2), "tools/call", Some(raw))
        .await
        .unwrap();
    let text = text_of(&serde_json::from_str(r.get()).unwrap());
    assert_eq!(text, r#"{"roots":[{"uri":"file:///added"}]}"#);
    engine.shutdown().await;
}
