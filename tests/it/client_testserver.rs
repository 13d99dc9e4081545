//! ServerClient against the scriptable test server: handshake for every
//! revision, capability gating, pagination, faults.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use mcphost::client::{CallOptions, ClientError, ClientOptions, Host, HostRequest, ServerEvent};
use mcphost::jsonrpc::PeerError;
use mcphost::protocol::{ClientCapabilities, Era, ErrorObject, ProtocolVersion, RawValue};
use mcphost::transport::BoxFuture;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn handshake_for_every_handshake_revision() {
    for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let log = RequestLog::new();
        let c = connect(v, &["--protocol-version", v, "--log-requests", &log.arg()]).await;
        let n = c.negotiated();
        assert_eq!(n.protocol_version.as_str(), v);
        assert_eq!(n.server_name.as_deref(), Some("mcphost-testserver"));
        assert!(n.instructions.is_some());
        assert!(n.capabilities.tools.is_some());
        c.ping().await.unwrap();
        let init = log.wait_for("initialize").await;
        assert_eq!(
            init["params"]["protocolVersion"], "2025-11-25",
            "we offer our newest"
        );
        assert_eq!(
            init["params"]["capabilities"],
            serde_json::json!({}),
            "no host abilities, none advertised"
        );
        assert_eq!(init["params"]["clientInfo"]["name"], "mcphost");
        log.wait_for("notifications/initialized").await;
        c.shutdown().await;
    }
}

#[tokio::test]
async fn unknown_revision_is_refused_naming_both() {
    let err = try_connect(
        "old",
        testserver(&["--protocol-version", "1999-01-01"]),
        quick_opts(),
    )
    .await
    .err()
    .expect("must refuse");
    let text = err.to_string();
    assert!(
        matches!(err, ClientError::UnsupportedVersion { .. }),
        "{text}"
    );
    assert!(
        text.contains("1999-01-01") && text.contains("2025-11-25") && text.contains("'old'"),
        "{text}"
    );
}

#[tokio::test]
async fn undeclared_capabilities_are_refused_locally() {
    let log = RequestLog::new();
    let c = connect(
        "toolsonly",
        &["--capabilities", "tools", "--log-requests", &log.arg()],
    )
    .await;
    for r in [
        c.list_prompts().await.map(|_| ()),
        c.list_resources().await.map(|_| ()),
        c.set_log_level("debug").await,
        c.subscribe_resource("test://static/1").await,
        c.complete(raw(r#"{"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"name","value":"A"}}"#))
            .await
            .map(|_| ()),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, ClientError::CapabilityNotDeclared { .. }), "{e}");
        assert!(e.to_string().contains("toolsonly"), "{e}");
    }
    assert!(!c.list_tools().await.unwrap().is_empty());
    let sent = log.methods();
    assert!(
        sent.iter().all(|m| !m.starts_with("prompts/")
            && !m.starts_with("resources/")
            && m != "logging/setLevel"
            && m != "completion/complete"),
        "{sent:?}"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn pagination_follows_every_cursor() {
    let c = connect(
        "paged",
        &[
            "--page-size",
            "3",
            "--tools",
            "20",
            "--resources",
            "7",
            "--prompts",
            "5",
        ],
    )
    .await;
    let tools = c.list_tools().await.unwrap();
    assert_eq!(tools.len(), 9 + 20);
    // Every tool once: a repeated page anywhere (not only next to itself)
    // would show as a duplicate and a missing name.
    let names: std::collections::BTreeSet<String> = tools.iter().map(|t| t.name.clone()).collect();
    let mut want: std::collections::BTreeSet<String> = [
        "echo", "add", "fail", "slow", "lossless", "huge", "sample", "elicit", "roots",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    want.extend((0..20).map(|i| format!("tool_{i:04}")));
    assert_eq!(names, want, "no page repeated or skipped");
    assert_eq!(c.list_resources().await.unwrap().len(), 3 + 7);
    assert_eq!(c.list_resource_templates().await.unwrap().len(), 1);
    assert_eq!(c.list_prompts().await.unwrap().len(), 1 + 5);
    c.shutdown().await;
}

#[tokio::test]
async fn repeated_cursor_stops_with_an_error() {
    let c = connect("loop", &["--page-size", "2", "--repeat-cursor"]).await;
    let e = c.list_tools().await.unwrap_err();
    assert!(matches!(e, ClientError::RepeatedCursor { .. }), "{e}");
    c.shutdown().await;
}

#[tokio::test]
async fn tool_calls_structured_content_and_is_error() {
    let c = connect("calls", &[]).await;
    let r = c
        .call_tool(
            "echo",
            Some(raw(r#"{"text":"hi"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(!r.is_error);
    assert!(r.raw.get().contains(r#""text":"hi""#));
    let r = c
        .call_tool(
            "add",
            Some(raw(r#"{"a":40,"b":2}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(r.structured_content().unwrap().get(), r#"{"sum":42}"#);
    let r = c
        .call_tool("fail", None, CallOptions::default())
        .await
        .unwrap();
    assert!(r.is_error);
    let e = c
        .call_tool("nope", None, CallOptions::default())
        .await
        .unwrap_err();
    assert!(
        e.rpc_error().is_some(),
        "unknown tool is a protocol error: {e}"
    );
    let e = c
        .read_resource("test://missing", CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.rpc_error().map(|e| e.code), Some(-32002));
    let r = c
        .read_resource("test://static/1", CallOptions::default())
        .await
        .unwrap();
    assert!(r.get().contains("test://static/1"));
    let p = c
        .get_prompt(
            "greet",
            Some(raw(r#"{"name":"Ada"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(p.get().contains("Ada"));
    let comp = c
        .complete(raw(r#"{"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"name","value":"Al"}}"#))
        .await
        .unwrap();
    assert!(comp.get().contains("Alice"));
    c.shutdown().await;
}

#[tokio::test]
async fn relayed_payloads_are_byte_identical() {
    let c = connect("lossless", &[]).await;
    let tools = c.list_tools().await.unwrap();
    let t = tools.iter().find(|t| t.name == "lossless").unwrap();
    let schema = r#"{"type":"object","properties":{"zeta":{"type":"integer","default":12345678901234567890123},"alpha":{"type":"number","multipleOf":0.10,"maximum":1e400}},"x-unknown":{"nested":[1.0,2.50]}}"#;
    assert!(
        t.raw
            .get()
            .ends_with(&format!(r#""inputSchema":{schema}}}"#)),
        "{}",
        t.raw.get()
    );
    let r = c
        .call_tool("lossless", None, CallOptions::default())
        .await
        .unwrap();
    assert_eq!(
        r.raw.get(),
        concat!(
            r#"{"x-unknown":{"nested":[1.0,2.50]},"#,
            r#""structuredContent":{"zeta":12345678901234567890123,"alpha":1.10,"huge":1e400,"list":[1.0,2.50,-0.0,1E+2]},"#,
            r#""content":[{"type":"text","text":"{\"zeta\":12345678901234567890123,\"alpha\":1.10,\"huge\":1e400}"}],"#,
            r#""isError":false}"#
        )
    );
    // The arguments we relay are untouched too.
    let log = RequestLog::new();
    let c2 = connect("args", &["--log-requests", &log.arg()]).await;
    c2.call_tool(
        "echo",
        Some(raw(r#"{"text":"x","n":12345678901234567890123,"d":1.10}"#)),
        CallOptions::default(),
    )
    .await
    .unwrap();
    let text = std::fs::read_to_string(&log.path).unwrap();
    assert!(
        text.contains(r#""arguments":{"text":"x","n":12345678901234567890123,"d":1.10}"#),
        "{text}"
    );
    c.shutdown().await;
    c2.shutdown().await;
}

#[tokio::test]
async fn batches_string_ids_garbage_and_unknown_ids_are_tolerated() {
    for args in [
        &["--batch", "--protocol-version", "2025-03-26"][..],
        &["--string-ids"][..],
        &["--garbage", "--unknown-ids"][..],
        &[
            "--batch",
            "--string-ids",
            "--garbage",
            "--unknown-ids",
            "--page-size",
            "2",
        ][..],
    ] {
        let c = connect("odd", args).await;
        lists_and_echoes(&c, &format!("{args:?}")).await;
        c.shutdown().await;
    }
}

#[tokio::test]
async fn crash_mid_request_fails_at_once_with_stderr() {
    let c = connect("crashy", &["--crash-after", "3"]).await; // initialize=1
    c.ping().await.unwrap(); // 2
    let mut events = c.subscribe();
    let started = Instant::now();
    let e = c
        .call_tool("slow", Some(raw(r#"{"ms":60000}"#)), CallOptions::default())
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed at once, not by timeout"
    );
    let text = e.to_string();
    assert!(
        text.contains("crashy") && text.contains("simulated crash"),
        "{text}"
    );
    assert!(
        matches!(
            e,
            ClientError::Request {
                error: PeerError::Closed(_),
                ..
            }
        ),
        "{text}"
    );
    // Later calls fail fast with the same reason.
    let e2 = c.list_tools().await.unwrap_err();
    assert!(e2.to_string().contains("simulated crash"), "{e2}");
    loop {
        match tokio::time::timeout(Duration::from_secs(5), events.recv())
            .await
            .unwrap()
            .unwrap()
        {
            ServerEvent::Closed(r) => break assert!(r.to_string().contains("status 3"), "{r}"),
            _ => continue,
        }
    }
    c.shutdown().await;
}

#[tokio::test]
async fn hung_request_times_out_and_is_cancelled() {
    let log = RequestLog::new();
    let c = connect(
        "hung",
        &["--hang-on", "tools/call:echo", "--log-requests", &log.arg()],
    )
    .await;
    let o = CallOptions {
        timeout: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let e = c
        .call_tool("echo", Some(raw(r#"{"text":"x"}"#)), o)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Request {
                error: PeerError::Timeout { .. },
                ..
            }
        ),
        "{e}"
    );
    let call = log.wait_for("tools/call").await;
    let cancel = log.wait_for("notifications/cancelled").await;
    assert_eq!(cancel["params"]["requestId"], call["id"]);
    // The connection is still usable.
    c.ping().await.unwrap();
    c.shutdown().await;
}

#[tokio::test]
async fn progress_reaches_the_caller_and_cancel_is_sent() {
    let log = RequestLog::new();
    let c = connect("prog", &["--log-requests", &log.arg()]).await;
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let o = CallOptions {
        on_progress: Some(Arc::new(move |_| {
            s2.fetch_add(1, Ordering::SeqCst);
        })),
        ..Default::default()
    };
    let r = c
        .call_tool("slow", Some(raw(r#"{"ms":450}"#)), o)
        .await
        .unwrap();
    assert!(!r.is_error);
    assert!(
        seen.load(Ordering::SeqCst) >= 2,
        "progress seen {}",
        seen.load(Ordering::SeqCst)
    );

    let token = CancellationToken::new();
    let o = CallOptions {
        cancel: Some(token.clone()),
        ..Default::default()
    };
    // Cancelled once it is pending at the server (the server's stderr says
    // so; the 450 ms call above said it once already).
    let in_flight = || {
        let line = common::wait::in_flight_line("slow");
        c.stderr_tail(200)
            .iter()
            .filter(|l| l.contains(&line))
            .count()
    };
    let before = in_flight();
    let cancel_when_pending = async {
        let pending = async {
            while in_flight() == before {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(20), pending)
            .await
            .expect("the slow call never reached the server");
        token.cancel();
    };
    let (r, ()) = tokio::join!(
        c.call_tool("slow", Some(raw(r#"{"ms":60000}"#)), o),
        cancel_when_pending
    );
    let e = r.unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Request {
                error: PeerError::Cancelled { .. },
                ..
            }
        ),
        "{e}"
    );
    log.wait_for("notifications/cancelled").await;
    c.ping().await.unwrap();
    c.shutdown().await;
}

#[tokio::test]
async fn oversized_response_fails_that_call_only() {
    for extra in [&[][..], &["--huge-id-first"][..]] {
        let mut cfg = testserver(&[&["--huge-bytes", "3000000"][..], extra].concat());
        cfg.max_message_bytes = 1024 * 1024;
        let c = try_connect("big", cfg, quick_opts()).await.unwrap();
        let started = Instant::now();
        let e = c
            .call_tool("huge", None, CallOptions::default())
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                ClientError::Request {
                    error: PeerError::Oversized { .. },
                    ..
                }
            ),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        let r = c
            .call_tool(
                "echo",
                Some(raw(r#"{"text":"after"}"#)),
                CallOptions::default(),
            )
            .await
            .unwrap();
        assert!(r.raw.get().contains("after"));
        c.shutdown().await;
    }
}

#[tokio::test]
async fn list_changed_triggers_a_relist() {
    let c = connect(
        "changing",
        &[
            "--list-changed-after-ms",
            "100",
            "--list-changed-count",
            "1",
        ],
    )
    .await;
    let mut events = c.subscribe();
    let (mut tools, mut prompts) = (None, None);
    while tools.is_none() || prompts.is_none() {
        match tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .unwrap()
            .unwrap()
        {
            ServerEvent::ToolsChanged(t) => tools = Some(t),
            ServerEvent::PromptsChanged(p) => prompts = Some(p),
            _ => {}
        }
    }
    assert!(
        tools
            .unwrap()
            .iter()
            .any(|t| t.name.starts_with("dynamic_"))
    );
    assert!(
        prompts
            .unwrap()
            .iter()
            .any(|p| p.name.starts_with("dynamic_prompt_"))
    );
    c.shutdown().await;
}

#[tokio::test]
async fn logging_and_subscriptions_arrive_as_events() {
    let c = connect("events", &[]).await;
    let mut events = c.subscribe();
    c.set_log_level("warning").await.unwrap();
    c.subscribe_resource("test://static/1").await.unwrap();
    let (mut log, mut updated) = (false, false);
    while !(log && updated) {
        match tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .unwrap()
            .unwrap()
        {
            ServerEvent::Log(p) => log |= p.get().contains("warning"),
            ServerEvent::ResourceUpdated { uri } => updated |= uri == "test://static/1",
            _ => {}
        }
    }
    c.unsubscribe_resource("test://static/1").await.unwrap();
    c.shutdown().await;
}

struct SamplingHost;

impl Host for SamplingHost {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            sampling: Some(Default::default()),
            ..Default::default()
        }
    }
    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        let server = r.server;
        assert_eq!(r.method, "sampling/createMessage");
        let text = format!(
            r#"{{"role":"assistant","content":{{"type":"text","text":"answer for {server}"}},"model":"test-model"}}"#
        );
        Box::pin(async move { Ok(RawValue::from_string(text).unwrap()) })
    }
}

#[tokio::test]
async fn server_requests_reach_the_host_only_when_enabled() {
    let log = RequestLog::new();
    let opts = ClientOptions {
        host: Arc::new(SamplingHost),
        ..quick_opts()
    };
    let c = try_connect("sampler", testserver(&["--log-requests", &log.arg()]), opts)
        .await
        .unwrap();
    let init = log.wait_for("initialize").await;
    assert_eq!(
        init["params"]["capabilities"],
        serde_json::json!({"sampling": {}})
    );
    let r = c
        .call_tool(
            "sample",
            Some(raw(r#"{"prompt":"hi"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        r.raw.get().contains("answer for sampler"),
        "{}",
        r.raw.get()
    );
    // Elicitation was not enabled: the server gets -32601.
    let r = c
        .call_tool("elicit", None, CallOptions::default())
        .await
        .unwrap();
    assert!(r.is_error, "{}", r.raw.get());
    c.shutdown().await;
}

#[tokio::test]
async fn one_broken_server_does_not_disturb_another() {
    let good = connect("good", &[]).await;
    let bad = connect("bad", &["--crash-after", "2"]).await;
    let hung = connect("hung", &["--hang"]).await;
    let (b, h, g) = tokio::join!(
        bad.list_tools(),
        hung.call_tool(
            "echo",
            None,
            CallOptions {
                timeout: Some(Duration::from_secs(2)),
                ..Default::default()
            }
        ),
        async {
            let started = Instant::now();
            for _ in 0..50 {
                good.call_tool("echo", Some(raw(r#"{"text":"x"}"#)), CallOptions::default())
                    .await
                    .unwrap();
            }
            started.elapsed()
        }
    );
    assert!(b.is_err() && h.is_err());
    assert!(g < Duration::from_secs(5), "good server slowed down: {g:?}");
    for c in [good, bad, hung] {
        c.shutdown().await;
    }
}

#[tokio::test]
async fn exits_right_after_initialized_reports_closed() {
    let c = connect("quitter", &["--exit-on-initialized", "--stderr-lines", "3"]).await;
    let e = loop {
        match c.list_tools().await {
            Err(e) => break e,
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert!(
        matches!(
            e,
            ClientError::Request {
                error: PeerError::Closed(_),
                ..
            }
        ),
        "{e}"
    );
    assert!(c.close_reason().is_some());
    c.shutdown().await;
}

#[tokio::test]
async fn newest_handshake_revision_is_what_we_offer() {
    let newest = ProtocolVersion::ALL
        .into_iter()
        .filter(|v| v.era() == Era::Handshake)
        .max()
        .unwrap();
    let log = RequestLog::new();
    let c = connect("offer", &["--log-requests", &log.arg()]).await;
    let init = log.wait_for("initialize").await;
    assert_eq!(init["params"]["protocolVersion"], newest.as_str());
    assert_eq!(c.negotiated().protocol_version, newest);
    c.shutdown().await;
}
