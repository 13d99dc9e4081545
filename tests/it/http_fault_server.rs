//! The HTTP fault server itself, driven with plain reqwest: the transport
//! tests are only as good as the peer they run against.

use crate::common;

use std::time::{Duration, Instant};

use common::http_fault::{Cut, FaultServer, GetMode, POST_ACCEPT, Reply, Script};
use futures_util::StreamExt;
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn post(
    c: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    msg: &Value,
) -> reqwest::Response {
    let mut r = c
        .post(url)
        .header("accept", POST_ACCEPT)
        .header("content-type", "application/json")
        .body(msg.to_string());
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    r.send().await.unwrap()
}

fn init(id: u64, version: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
           "params": {"protocolVersion": version, "capabilities": {},
                      "clientInfo": {"name": "t", "version": "0"}}})
}

/// Reads SSE `data:` payloads (non-empty) until the body ends or `n` arrive.
async fn sse_data(resp: reqwest::Response, n: usize) -> (Vec<String>, Vec<String>) {
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let (mut data, mut ids) = (Vec::new(), Vec::new());
    while data.len() < n {
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(b))) => buf.push_str(&String::from_utf8_lossy(&b)),
            _ => break,
        }
        while let Some(end) = buf.find("\n\n") {
            let ev: String = buf.drain(..end + 2).collect();
            for line in ev.lines() {
                if let Some(d) = line.strip_prefix("data:") {
                    if !d.trim().is_empty() {
                        data.push(d.trim().to_owned());
                    }
                } else if let Some(i) = line.strip_prefix("id: ") {
                    ids.push(i.to_owned());
                }
            }
        }
    }
    (data, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_versions_and_expiry() {
    let srv = FaultServer::start();
    let c = client();
    let r = post(&c, &srv.url(), None, &init(1, "2025-06-18")).await;
    assert_eq!(r.status(), 200);
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-06-18");

    // Unknown revision: the latest.
    let r = post(&c, &srv.url(), None, &init(1, "2099-01-01")).await;
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");

    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"a": 1}}});
    assert_eq!(post(&c, &srv.url(), None, &call).await.status(), 400);
    let r = post(&c, &srv.url(), Some(&sid), &call).await;
    assert_eq!(r.status(), 200);
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(v["result"]["content"][0]["text"], r#"{"a":1}"#);

    srv.expire_session();
    assert_eq!(post(&c, &srv.url(), Some(&sid), &call).await.status(), 404);

    // Accept is enforced.
    let r = c
        .post(srv.url())
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .body(init(1, "2025-11-25").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);

    // The log has it all, with statuses.
    let calls = srv.rpc("tools/call");
    assert_eq!(calls.len(), 3, "{}", srv.summary());
    assert_eq!(calls[1].session(), Some(sid.as_str()));
    assert_eq!(calls[2].status, Some(404));
    assert_eq!(srv.rpc("initialize")[0].header("accept"), Some(POST_ACCEPT));

    // GET: 405 by default; DELETE ends the session.
    let c2 = client();
    let r = post(&c2, &srv.url(), None, &init(1, "2025-11-25")).await;
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let g = c2
        .get(srv.url())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(g.status(), 405);
    let d = c2
        .delete(srv.url())
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(d.status(), 200);
    assert_eq!(post(&c2, &srv.url(), Some(&sid), &call).await.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_reply_with_notification_request_and_answer() {
    let srv = FaultServer::with(
        Script::default().reply(
            "tools/call",
            Reply::sse()
                .comments()
                .notify(json!({"jsonrpc": "2.0", "method": "notifications/message",
                               "params": {"level": "info", "data": "hello"}}))
                .ask("roots/list"),
        ),
    );
    let c = client();
    let r = post(&c, &srv.url(), None, &init(1, "2025-11-25")).await;
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"x": "y"}}});
    let r = post(&c, &srv.url(), Some(&sid), &call).await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let mut stream = r.bytes_stream();
    let mut seen = String::new();
    // Read until the roots/list request, answer it, read to the end.
    while !seen.contains("roots/list") {
        let b = stream.next().await.unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&b));
    }
    assert!(seen.contains(": keep-alive"), "{seen}");
    assert!(seen.contains("notifications/message"), "{seen}");
    let ask: Value = seen
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find(|v| v["method"] == "roots/list")
        .unwrap();
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": []}});
    assert_eq!(
        post(&c, &srv.url(), Some(&sid), &answer).await.status(),
        202
    );
    while let Some(Ok(b)) = stream.next().await {
        seen.push_str(&String::from_utf8_lossy(&b));
    }
    assert!(seen.contains(r#""id":7"#), "{seen}");
    assert!(srv.requests().iter().any(|r| r.is_rpc_response()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_stream_resumes_on_get_with_last_event_id() {
    for how in [Cut::Close, Cut::Abort] {
        let srv = FaultServer::with(
            Script::default().reply("tools/call", Reply::sse().retry(200).cut(how)),
        );
        let c = client();
        let r = post(&c, &srv.url(), None, &init(1, "2025-11-25")).await;
        let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                          "params": {"name": "echo", "arguments": {}}});
        let r = post(&c, &srv.url(), Some(&sid), &call).await;
        let (data, ids) = sse_data(r, 1).await;
        assert!(
            data.is_empty(),
            "{how:?}: the response came before the cut: {data:?}"
        );
        assert_eq!(ids.len(), 1, "{how:?}: one priming event: {ids:?}");
        assert_eq!(srv.cuts().len(), 1);

        let t = Instant::now();
        let g = c
            .get(srv.url())
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .header("last-event-id", &ids[0])
            .send()
            .await
            .unwrap();
        assert_eq!(g.status(), 200);
        let (data, _) = sse_data(g, 1).await;
        assert_eq!(data.len(), 1, "{how:?}");
        let v: Value = serde_json::from_str(&data[0]).unwrap();
        assert_eq!(v["id"], 3);
        assert!(t.elapsed() < Duration::from_secs(2));
        let get = srv.with_method("GET").pop().unwrap();
        assert_eq!(get.header("last-event-id"), Some(ids[0].as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_stream_and_legacy_mode() {
    let srv = FaultServer::with(Script {
        get: GetMode::Stream,
        sessions: false,
        ..Script::default()
    });
    let c = client();
    let g = c
        .get(srv.url())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(g.status(), 200);
    assert_eq!(srv.open_standalone(), 1);
    let pushed = srv
        .push_standalone(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    assert_eq!(pushed, 1);
    let (data, _) = sse_data(g, 1).await;
    assert!(data[0].contains("list_changed"), "{data:?}");

    let srv = FaultServer::with(Script::legacy(405));
    let r = post(&c, &srv.url(), None, &init(1, "2025-11-25")).await;
    assert_eq!(r.status(), 405);
    let g = c
        .get(srv.url())
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut stream = g.bytes_stream();
    let first = String::from_utf8_lossy(&stream.next().await.unwrap().unwrap()).into_owned();
    let endpoint = first
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap()
        .to_owned();
    assert!(first.starts_with("event: endpoint"), "{first}");
    assert!(endpoint.starts_with("/messages?sessionId="), "{endpoint}");
    let url = format!("http://{}{endpoint}", srv.addr);
    let r = post(&c, &url, None, &init(1, "2024-11-05")).await;
    assert_eq!(r.status(), 202);
    let mut seen = String::new();
    while !seen.contains("\n\n") {
        seen.push_str(&String::from_utf8_lossy(
            &stream.next().await.unwrap().unwrap(),
        ));
    }
    assert!(seen.starts_with("event: message\ndata: "), "{seen}");
    assert!(seen.contains(r#""protocolVersion":"2024-11-05""#), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_auth_and_big() {
    let srv = FaultServer::with(
        Script::default()
            .fail(Some("tools/call:slow"), 503, 1)
            .fail(Some("ping"), 500, usize::MAX),
    );
    let c = client();
    let r = post(&c, &srv.url(), None, &init(1, "2025-11-25")).await;
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let slow = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "slow", "arguments": {"ms": 1}}});
    assert_eq!(post(&c, &srv.url(), Some(&sid), &slow).await.status(), 503);
    assert_eq!(post(&c, &srv.url(), Some(&sid), &slow).await.status(), 200);
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    for _ in 0..3 {
        assert_eq!(post(&c, &srv.url(), Some(&sid), &ping).await.status(), 500);
    }
    let big = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                     "params": {"name": "big", "arguments": {"bytes": 300000}}});
    let r = post(&c, &srv.url(), Some(&sid), &big).await;
    assert!(r.text().await.unwrap().len() > 300000);

    srv.script(|s| {
        s.auth = Some(common::http_fault::Auth {
            token: "tok".into(),
            status: 401,
        })
    });
    let r = post(&c, &srv.url(), Some(&sid), &ping).await;
    assert_eq!(r.status(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    let r = c
        .post(srv.url())
        .header("accept", POST_ACCEPT)
        .header("content-type", "application/json")
        .header("authorization", "Bearer tok")
        .body(init(1, "2025-11-25").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
