//! server-everything's scenarios, written once and run over every transport:
//! stdio (tests/it/interop.rs) and Streamable HTTP and legacy SSE
//! (tests/it/http_interop.rs).

use std::sync::atomic::Ordering;
use std::time::Duration;

use mcphost::client::{CallOptions, ServerClient, ServerEvent};

use crate::common::{progress_counter as counter, raw, raw_text_of as text_of};

/// How long a notification may take.
const EVENT: Duration = Duration::from_secs(15);

/// What server-everything does the same way over every transport; `log`
/// is the server's log for a failure message.
pub async fn exercise(c: &ServerClient, log: impl Fn() -> String) {
    let n = c.negotiated();
    assert_eq!(n.protocol_version.as_str(), "2025-11-25");
    assert_eq!(n.server_name.as_deref(), Some("mcp-servers/everything"));
    assert!(n.instructions.is_some());
    assert!(n.capabilities.completions.is_some() && n.capabilities.logging.is_some());

    let tools = c.list_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    for t in [
        "echo",
        "get-structured-content",
        "trigger-long-running-operation",
    ] {
        assert!(names.contains(&t), "{t} missing from {names:?}");
    }
    assert!(
        !names.contains(&"trigger-sampling-request"),
        "no sampling advertised: {names:?}"
    );

    let r = c
        .call_tool(
            "echo",
            Some(raw(r#"{"message":"hi"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(text_of(&r.raw), "Echo: hi");
    assert!(!r.is_error);
    let r = c
        .call_tool(
            "get-structured-content",
            Some(raw(r#"{"location":"Chicago"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    let sc: serde_json::Value =
        serde_json::from_str(r.structured_content().unwrap().get()).unwrap();
    assert!(sc["temperature"].is_number(), "{sc}");
    let r = c
        .call_tool("echo", Some(raw(r#"{"wrong":1}"#)), CallOptions::default())
        .await
        .unwrap();
    assert!(
        r.is_error,
        "bad arguments are a tool error: {}",
        r.raw.get()
    );

    // Progress arrives on the request's own stream, before its response.
    let (seen, o) = counter();
    let r = c
        .call_tool(
            "trigger-long-running-operation",
            Some(raw(r#"{"duration":0.4,"steps":4}"#)),
            o,
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.raw.get());
    assert_eq!(seen.load(Ordering::SeqCst), 4, "one progress per step");

    // Several requests in flight on one session.
    let calls = (0..8).map(|i| {
        let args = format!(r#"{{"message":"m{i}"}}"#);
        async move {
            c.call_tool("echo", Some(raw(&args)), CallOptions::default())
                .await
                .map(|r| text_of(&r.raw))
        }
    });
    let got = futures_util::future::join_all(calls).await;
    for (i, r) in got.into_iter().enumerate() {
        assert_eq!(r.unwrap(), format!("Echo: m{i}"));
    }

    assert_eq!(c.list_resources().await.unwrap().len(), 7);
    assert_eq!(c.list_resource_templates().await.unwrap().len(), 2);
    let read = c
        .read_resource("demo://resource/dynamic/text/1", CallOptions::default())
        .await
        .unwrap();
    assert!(read.get().contains("Resource 1"), "{}", read.get());
    let e = c
        .read_resource("demo://nope", CallOptions::default())
        .await
        .unwrap_err();
    assert!(e.rpc_error().is_some(), "{e}");

    assert_eq!(c.list_prompts().await.unwrap().len(), 4);
    let p = c
        .get_prompt(
            "args-prompt",
            Some(raw(r#"{"city":"Paris","state":"TX"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(p.get().contains("Paris"));
    assert!(
        c.get_prompt("args-prompt", None, CallOptions::default())
            .await
            .unwrap_err()
            .rpc_error()
            .is_some()
    );
    let comp = c
        .complete(raw(r#"{"ref":{"type":"ref/prompt","name":"completable-prompt"},"argument":{"name":"department","value":"E"}}"#))
        .await
        .unwrap();
    assert!(comp.get().contains("Engineering"));
    c.ping().await.unwrap();

    // Messages the server sends on its own, outside any request (the GET
    // stream over Streamable HTTP, the one SSE stream in legacy mode, stdout
    // over stdio):
    // resource updates, sent at once and then every 5 s.
    let uri = "demo://resource/dynamic/text/1";
    let mut events = c.subscribe();
    c.subscribe_resource(uri).await.unwrap();
    let r = c
        .call_tool(
            "toggle-subscriber-updates",
            Some(raw("{}")),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(text_of(&r.raw).starts_with("Started"), "{}", r.raw.get());
    wait_event(
        &mut events,
        "notifications/resources/updated",
        |e| matches!(e, ServerEvent::ResourceUpdated { uri: u } if u == uri),
    )
    .await;
    c.call_tool(
        "toggle-subscriber-updates",
        Some(raw("{}")),
        CallOptions::default(),
    )
    .await
    .unwrap();
    c.unsubscribe_resource(uri).await.unwrap();
    c.set_log_level("error").await.unwrap();
    assert!(c.close_reason().is_none(), "{}", log());
}

/// Sampling, elicitation and roots asked of the host in the middle of a
/// call (a client with `FullHost`); `what` names the transport.
pub async fn calls_back_into_the_host(c: &ServerClient, what: &str) {
    let tools = c.list_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "trigger-sampling-request"),
        "{what}: sampling tools appear once advertised"
    );
    let r = c
        .call_tool(
            "trigger-sampling-request",
            Some(raw(r#"{"prompt":"hello","maxTokens":10}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        r.raw.get().contains("sampled by the host"),
        "{what}: {}",
        r.raw.get()
    );
    let r = c
        .call_tool(
            "trigger-elicitation-request",
            Some(raw("{}")),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.raw.get().contains("decline"), "{what}: {}", r.raw.get());
    let r = c
        .call_tool("get-roots-list", Some(raw("{}")), CallOptions::default())
        .await
        .unwrap();
    assert!(!r.is_error, "{what}: {}", r.raw.get());
}

/// Waits for the first event `pick` accepts.
async fn wait_event(
    events: &mut mcphost::transport::feed::FeedReceiver<ServerEvent>,
    what: &str,
    pick: impl Fn(&ServerEvent) -> bool,
) {
    let deadline = tokio::time::Instant::now() + EVENT;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(e)) if pick(&e) => return,
            Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(e)) => panic!("events ended while waiting for {what}: {e}"),
            Err(_) => panic!("no {what} within {EVENT:?}"),
        }
    }
}
