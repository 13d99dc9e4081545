//! stdio transport: an oversized message must not be buffered. Alone in its
//! binary so the peak RSS it measures is its own.

use std::time::Duration;

use mcphost::protocol::Id;
use mcphost::transport::TransportEvent;
use mcphost::transport::stdio::{StdioConfig, spawn};

/// Debug text of an event, cut short: a failure must not print 200 MiB.
fn brief(event: &TransportEvent) -> String {
    let text = format!("{event:?}");
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
        None => text,
    }
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_mib_line_is_dropped_without_buffering_it() {
    // Warm up: runtime, spawner thread and the first spawn are not the codec's doing.
    let mut warm = spawn("warm", &StdioConfig::new("true", Vec::<String>::new()))
        .await
        .unwrap();
    while warm.inbound.recv().await.is_some() {}
    let before = peak_rss_kib();

    let script = r#"printf '{"jsonrpc":"2.0","id":77,"result":{"blob":"'; head -c 209715200 /dev/zero | tr '\0' a; printf '"}}\n{"ok":1}\n'"#;
    let mut cfg = StdioConfig::new("sh", ["-c", script]);
    cfg.max_message_bytes = 1024 * 1024;
    let mut conn = spawn("huge", &cfg).await.unwrap();

    let mut events = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(120), conn.inbound.recv())
            .await
            .expect("timed out")
            .expect("no Closed event");
        if let TransportEvent::Closed(reason) = event {
            assert!(reason.summary.contains("exited with status 0"), "{reason}");
            break;
        }
        events.push(event);
    }
    let briefs: Vec<String> = events.iter().map(brief).collect();
    assert_eq!(events.len(), 2, "{briefs:?}");
    assert!(
        matches!(
            &events[0],
            TransportEvent::Oversized {
                limit: 1048576,
                id: Some(id)
            } if *id == Id::number(77)
        ),
        "{}",
        briefs[0]
    );
    assert!(matches!(&events[1], TransportEvent::Frame(f) if f == r#"{"ok":1}"#));

    let grown_kib = peak_rss_kib().saturating_sub(before);
    assert!(grown_kib < 16 * 1024, "peak RSS grew by {grown_kib} KiB");
}
