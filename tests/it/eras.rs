//! Era negotiation per server (2026-07-28 against the handshake revisions)
//! and the stateless revision's faults, against the scriptable test server:
//! the probe, its fallbacks, the restart of a server that dies on it, the
//! era cache, -32022 / -32020 retries and a dropped `subscriptions/listen`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use mcphost::client::{CallOptions, ClientError, ClientOptions, ServerEvent};
use mcphost::protocol::{Era, RawValue};
use mcphost::registry::EraCache;
use mcphost::registry::ServerOptions;

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

#[tokio::test]
async fn an_unpinned_client_speaks_each_servers_own_era() {
    for (era, want_era, version) in [
        ("handshake", Era::Handshake, "2025-11-25"),
        ("stateless", Era::Stateless, "2026-07-28"),
        // A dual-era server is spoken to in the newest revision.
        ("both", Era::Stateless, "2026-07-28"),
    ] {
        let log = RequestLog::new();
        let c = connect(era, &["--era", era, "--log-requests", &log.arg()]).await;
        assert_eq!(c.era(), want_era, "{era}");
        assert_eq!(c.negotiated().protocol_version.as_str(), version, "{era}");
        assert!(c.negotiated().capabilities.tools.is_some(), "{era}");
        lists_and_echoes(&c, era).await;
        c.ping().await.unwrap();
        let methods: Vec<String> = log
            .lines()
            .iter()
            .map(|l| l["method"].as_str().unwrap_or_default().to_owned())
            .collect();
        // Stateless first, always: the probe is the first thing sent.
        assert_eq!(methods[0], "server/discover", "{era}: {methods:?}");
        assert_eq!(
            methods.contains(&"initialize".to_owned()),
            want_era == Era::Handshake,
            "{era}: {methods:?}"
        );
        c.shutdown().await;
    }
}

#[tokio::test]
async fn a_legacy_server_that_exits_on_the_probe_is_started_again_with_initialize() {
    let args = ["--stateless-fault", "die-on-discover"];
    // The client alone reports it, naming the server and the probe...
    let e = try_connect("dies", testserver(&args), quick_opts())
        .await
        .err()
        .expect("the probe kills it");
    assert!(matches!(e, ClientError::ExitedOnProbe { .. }), "{e}");
    assert!(e.to_string().contains("'dies'") && e.to_string().contains("server/discover"));
    // ...and with the era known, no probe is sent at all.
    let known = ClientOptions {
        known_era: Some(Era::Handshake),
        ..quick_opts()
    };
    let c = try_connect("dies", testserver(&args), known).await.unwrap();
    assert_eq!(c.negotiated().protocol_version.as_str(), "2025-11-25");
    c.shutdown().await;

    // Supervised, it is restarted once, without counting as a crash, and
    // the era is remembered (here in a file, as the daemon keeps it).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("eras.json");
    let cfg = config_with(&[("dies", &args)]);
    let opts = ServerOptions {
        eras: Arc::new(EraCache::at(file.clone())),
        ..ServerOptions::from(quick_opts())
    };
    let reg = mcphost::registry::Registry::start(&cfg, opts, quick_policy(), None);
    let st = wait_ready(&reg, "dies").await;
    assert_eq!(st.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(st.restarts, 0, "a probe exit is not a crash");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        saved.contains("\"dies\"") && saved.contains("handshake"),
        "{saved}"
    );
    reg.shutdown().await;

    // A new daemon with the same config reads it and never probes.
    let log = RequestLog::new();
    let args2 = [
        "--stateless-fault",
        "die-on-discover",
        "--log-requests",
        &log.arg(),
    ];
    let cfg = config_with(&[("dies", &args2)]);
    let opts = ServerOptions {
        eras: Arc::new(EraCache::at(file.clone())),
        ..ServerOptions::from(quick_opts())
    };
    // Another command line is another configuration: probed again.
    let reg = mcphost::registry::Registry::start(&cfg, opts, quick_policy(), None);
    wait_ready(&reg, "dies").await;
    reg.shutdown().await;
    let opts = ServerOptions {
        eras: Arc::new(EraCache::at(file)),
        ..ServerOptions::from(quick_opts())
    };
    let log_before = log.lines().len();
    let reg = mcphost::registry::Registry::start(&cfg, opts, quick_policy(), None);
    let st = wait_ready(&reg, "dies").await;
    assert_eq!(st.restarts, 0);
    let after: Vec<_> = log.lines().into_iter().skip(log_before).collect();
    assert_eq!(after[0]["method"], "initialize", "remembered: {after:?}");
    reg.shutdown().await;
}

#[tokio::test]
async fn unsupported_version_is_retried_with_a_version_the_server_lists() {
    let log = RequestLog::new();
    let c = connect(
        "picky",
        &[
            "--era",
            "stateless",
            "--stateless-fault",
            "unsupported-version",
            "--log-requests",
            &log.arg(),
        ],
    )
    .await;
    assert_eq!(c.era(), Era::Stateless);
    lists_and_echoes(&c, "picky").await;
    let discovers = log
        .lines()
        .into_iter()
        .filter(|l| l["method"] == "server/discover")
        .count();
    assert_eq!(discovers, 2, "refused once, asked again");
    c.shutdown().await;

    // A server that refuses even the versions it lists is an error naming
    // it, not taken for a legacy server.
    let e = try_connect(
        "broken",
        testserver(&[
            "--era",
            "stateless",
            "--stateless-fault",
            "unsupported-version-always",
        ]),
        quick_opts(),
    )
    .await
    .err()
    .expect("must fail");
    assert_eq!(e.rpc_error().map(|e| e.code), Some(-32022), "{e}");
    assert!(e.to_string().contains("'broken'"), "{e}");
}

#[tokio::test]
async fn a_header_mismatch_relists_the_tools_and_retries_once() {
    let log = RequestLog::new();
    let c = connect(
        "hm",
        &[
            "--era",
            "stateless",
            "--stateless-fault",
            "header-mismatch-once",
            "--log-requests",
            &log.arg(),
        ],
    )
    .await;
    c.list_tools().await.unwrap();
    let r = c
        .call_tool(
            "echo",
            Some(raw(r#"{"text":"again"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.raw.get().contains("again"), "{}", r.raw.get());
    let methods: Vec<String> = log
        .lines()
        .iter()
        .map(|l| l["method"].as_str().unwrap_or_default().to_owned())
        .collect();
    let calls = methods.iter().filter(|m| *m == "tools/call").count();
    let lists = methods.iter().filter(|m| *m == "tools/list").count();
    assert_eq!(calls, 2, "{methods:?}");
    assert!(lists >= 2, "re-listed before the retry: {methods:?}");
    c.shutdown().await;
}

#[tokio::test]
async fn a_dropped_listen_stream_is_listened_again_and_updates_keep_coming() {
    let log = RequestLog::new();
    let c = connect(
        "drops",
        &[
            "--era",
            "stateless",
            "--stateless-fault",
            "listen-drops",
            "--log-requests",
            &log.arg(),
        ],
    )
    .await;
    let mut events = c.subscribe();
    c.subscribe_resource("test://static/1").await.unwrap();
    let mut updates = 0;
    while updates < 2 {
        match tokio::time::timeout(Duration::from_secs(15), events.recv())
            .await
            .expect("no resource update: the listen stream was not opened again")
            .unwrap()
        {
            ServerEvent::ResourceUpdated { uri } => {
                assert_eq!(uri, "test://static/1");
                updates += 1;
            }
            ServerEvent::Closed(r) => panic!("closed: {r}"),
            _ => {}
        }
    }
    let listens: Vec<_> = log
        .lines()
        .into_iter()
        .filter(|l| l["method"] == "subscriptions/listen")
        .collect();
    assert!(listens.len() >= 2, "{listens:?}");
    let last = listens.last().unwrap();
    assert_eq!(
        last["params"]["notifications"]["resourceSubscriptions"],
        serde_json::json!(["test://static/1"])
    );
    // The legacy-only methods are mapped, never sent.
    c.set_log_level("debug").await.unwrap();
    c.ping().await.unwrap();
    let sent: Vec<String> = log
        .lines()
        .iter()
        .map(|l| l["method"].as_str().unwrap_or_default().to_owned())
        .collect();
    for legacy in ["ping", "logging/setLevel", "resources/subscribe"] {
        assert!(
            !sent.iter().any(|m| m == legacy),
            "{legacy} was sent: {sent:?}"
        );
    }
    c.shutdown().await;
}

/// A config of test servers, each with its own arguments.
fn config_with(servers: &[(&str, &[&str])]) -> mcphost::config::HostConfig {
    let members: Vec<(&str, String)> = servers
        .iter()
        .map(|(name, args)| (*name, ts_entry(args)))
        .collect();
    let text = servers_config(&members);
    mcphost::config::parse(&text, std::path::Path::new("/t/config.json"), &|_| None).unwrap()
}

async fn wait_ready(
    reg: &mcphost::registry::Registry,
    name: &str,
) -> Arc<mcphost::registry::supervisor::ServerStatus> {
    for _ in 0..300 {
        if let Some(s) = reg.statuses().into_iter().find(|s| s.name == name)
            && s.state == mcphost::registry::supervisor::ServerState::Ready
        {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} never became ready: {:?}", reg.statuses());
}

#[tokio::test]
async fn lists_are_refetched_on_access_once_their_ttl_ran_out_and_never_polled() {
    let log = RequestLog::new();
    let c = connect(
        "ttl",
        &[
            "--era",
            "stateless",
            "--ttl-ms",
            "400",
            "--log-requests",
            &log.arg(),
        ],
    )
    .await;
    let lists = || {
        log.lines()
            .into_iter()
            .filter(|l| l["method"] == "tools/list")
            .count()
    };
    c.list_tools().await.unwrap();
    let first = lists();
    // Fresh: reading the catalog re-fetches nothing.
    assert!(!c.revalidate(), "fresh lists were re-fetched");
    // Stale, but nobody reads: no polling on the TTL.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(lists(), first, "the client polled on the TTL");
    // Read once stale: re-fetched, and the new list arrives as an event.
    let mut events = c.subscribe();
    assert!(c.revalidate(), "stale lists were not re-fetched on access");
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("no ToolsChanged after revalidating")
            .unwrap()
        {
            ServerEvent::ToolsChanged(t) => {
                assert!(!t.is_empty());
                break;
            }
            _ => continue,
        }
    }
    assert!(lists() > first);
    c.shutdown().await;

    // A handshake server has no TTL: nothing to revalidate.
    let h = connect("hs", &[]).await;
    h.list_tools().await.unwrap();
    assert!(!h.revalidate());
    h.shutdown().await;
}

/// A scripted server on bare channels: what it is sent, and what it says.
struct Wire;

impl mcphost::transport::TransportControl for Wire {
    fn shutdown(&self) -> mcphost::transport::BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn stderr_tail(&self, _n: usize) -> Vec<String> {
        Vec::new()
    }
    fn pid(&self) -> Option<u32> {
        None
    }
    fn kind(&self) -> &'static str {
        "stdio"
    }
}

#[tokio::test]
async fn on_stdio_only_the_open_listen_streams_notifications_are_taken_up() {
    use mcphost::transport::{Connection, TransportEvent};
    use tokio::sync::mpsc;
    let (out_tx, mut out_rx) = mpsc::channel(64);
    let (in_tx, in_rx) = mpsc::channel(64);
    let conn = Connection {
        outbound: out_tx,
        inbound: in_rx,
        control: Arc::new(Wire),
    };
    let server = tokio::spawn(async move {
        let mut listen_id: Option<serde_json::Value> = None;
        let mut lists = 0;
        let send = |v: serde_json::Value| {
            let in_tx = in_tx.clone();
            async move {
                in_tx
                    .send(TransportEvent::Frame(v.to_string()))
                    .await
                    .unwrap()
            }
        };
        while let Some(m) = out_rx.recv().await {
            let m: serde_json::Value = serde_json::from_str(&m.text).unwrap();
            let id = m["id"].clone();
            match m["method"].as_str().unwrap_or_default() {
                "server/discover" => {
                    send(serde_json::json!({"jsonrpc":"2.0","id":id,"result":{
                        "supportedVersions":["2026-07-28"],
                        "capabilities":{"tools":{"listChanged":true}},
                        "ttlMs":60000,"cacheScope":"public"}}))
                    .await
                }
                "tools/list" => {
                    lists += 1;
                    send(serde_json::json!({"jsonrpc":"2.0","id":id,"result":{
                        "tools":[{"name":format!("t{lists}"),"inputSchema":{"type":"object"}}],
                        "ttlMs":60000}}))
                    .await
                }
                "subscriptions/listen" => {
                    listen_id = Some(id.clone());
                    let tag = serde_json::json!({"io.modelcontextprotocol/subscriptionId": id});
                    send(serde_json::json!({"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged",
                        "params":{"_meta":tag,"notifications":{"toolsListChanged":true}}}))
                    .await;
                    // A closed stream's leftover first, then the open one's.
                    send(serde_json::json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed",
                        "params":{"_meta":{"io.modelcontextprotocol/subscriptionId": 9999}}}))
                    .await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    send(serde_json::json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed",
                        "params":{"_meta":tag}}))
                    .await;
                }
                _ => {}
            }
        }
        let _ = listen_id;
    });
    let c = mcphost::client::ServerClient::connect("wire", conn, quick_opts())
        .await
        .unwrap();
    let mut events = c.subscribe();
    let mut changes = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Ok(ev)) = tokio::time::timeout_at(deadline, events.recv()).await {
        if let ServerEvent::ToolsChanged(t) = ev {
            changes.push(t[0].name.clone());
        }
    }
    // One re-list only, after the listen (nothing else lists): the
    // notification tagged for subscription 9999 was not taken up.
    assert_eq!(changes, ["t1"], "re-lists: {changes:?}");
    c.shutdown().await;
    // The scripted server holds the inbound side open: stop it.
    server.abort();
}

/// A stateless server too slow for the probe's short limit (a cold Python
/// server on a loaded machine) is taken for a legacy one and sent
/// `initialize`, which it refuses with -32022 listing 2026-07-28: that
/// refusal is an answer, and the client asks `server/discover` again.
#[tokio::test]
async fn a_stateless_server_that_missed_the_probe_is_discovered_when_it_refuses_initialize() {
    let log = RequestLog::new();
    let mut opts = quick_opts();
    opts.probe_timeout = Duration::from_millis(150);
    let c = try_connect(
        "slow",
        testserver(&[
            "--era",
            "stateless",
            "--delay-ms",
            "400",
            "--log-requests",
            &log.arg(),
        ]),
        opts,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.era(), Era::Stateless);
    let methods: Vec<String> = log
        .lines()
        .into_iter()
        .filter_map(|l| l["method"].as_str().map(str::to_owned))
        // The timed-out probe is cancelled; that is beside the point here.
        .filter(|m| m != "notifications/cancelled")
        .collect();
    assert_eq!(
        methods[..3],
        ["server/discover", "initialize", "server/discover"],
        "{methods:?}"
    );
    lists_and_echoes(&c, "slow").await;
    c.shutdown().await;
}
