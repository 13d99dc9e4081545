use std::sync::atomic::AtomicUsize;

use serde_json::{Value, json};

use super::*;

struct Fake {
    peer: Peer,
    from_peer: mpsc::Receiver<mcphost_transport::Outbound>,
    to_peer: mpsc::Sender<TransportEvent>,
}

impl Fake {
    fn new(handler: Arc<dyn RequestHandler>) -> Fake {
        let (otx, orx) = mpsc::channel(64);
        let (itx, irx) = mpsc::channel(64);
        let mut cfg = PeerConfig::new("fake");
        cfg.timeout = Duration::from_secs(5);
        cfg.max_timeout = Duration::from_secs(12);
        Fake {
            peer: Peer::start(cfg, otx, irx, handler),
            from_peer: orx,
            to_peer: itx,
        }
    }
    async fn next(&mut self) -> Value {
        let line = self.from_peer.recv().await.expect("peer sent nothing").text;
        assert!(!line.contains('\n'));
        serde_json::from_str(&line).expect("peer sent invalid JSON")
    }
    async fn send(&self, v: &str) {
        self.to_peer
            .send(TransportEvent::Frame(v.to_owned()))
            .await
            .unwrap();
    }
}

fn opts() -> RequestOptions {
    RequestOptions {
        reset_timeout_on_progress: false,
        ..Default::default()
    }
}

#[tokio::test]
async fn correlates_numeric_and_stringified_ids() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("tools/list", None, opts()).await });
    let req = f.next().await;
    assert_eq!(req["id"], json!(0));
    assert_eq!(req["jsonrpc"], "2.0");
    // Server wrongly echoes "0" for 0.
    f.send(r#"{"jsonrpc":"2.0","id":"0","result":{"n":1.10}}"#)
        .await;
    assert_eq!(a.await.unwrap().unwrap().get(), r#"{"n":1.10}"#);
    assert_eq!(f.peer.pending_count(), 0);
}

#[tokio::test]
async fn unknown_ids_and_garbage_are_ignored() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("x", None, opts()).await });
    let req = f.next().await;
    f.send("hello from the server").await;
    f.send(r#"{"jsonrpc":"2.0","id":999,"result":{}}"#).await;
    f.send(r#"{"jsonrpc":"2.0","id":"abc","result":{}}"#).await;
    f.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{{"code":-32601,"message":"nope"}}}}"#,
        req["id"]
    ))
    .await;
    match a.await.unwrap() {
        Err(PeerError::Rpc(e)) => assert_eq!(e.code, -32601),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn answers_ping_and_routes_requests_to_the_handler() {
    struct Roots(AtomicUsize);
    impl RequestHandler for Roots {
        fn handle(
            &self,
            r: IncomingRequest,
        ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            assert_eq!(r.method, "roots/list");
            Box::pin(async { Ok(to_raw(&json!({"roots": []})).unwrap()) })
        }
    }
    let mut f = Fake::new(Arc::new(Roots(AtomicUsize::new(0))));
    f.send(r#"{"jsonrpc":"2.0","id":"p1","method":"ping"}"#)
        .await;
    assert_eq!(
        f.next().await,
        json!({"jsonrpc":"2.0","id":"p1","result":{}})
    );
    f.send(r#"{"jsonrpc":"2.0","id":7,"method":"roots/list"}"#)
        .await;
    assert_eq!(
        f.next().await,
        json!({"jsonrpc":"2.0","id":7,"result":{"roots":[]}})
    );
}

#[tokio::test]
async fn batches_are_answered_with_an_array() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let mut notes = f.peer.subscribe();
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("x", None, opts()).await });
    let req = f.next().await;
    f.send(&format!(
        r#"[{{"jsonrpc":"2.0","id":{},"result":{{"ok":true}}}},{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"hi"}}}},{{"jsonrpc":"2.0","id":1,"method":"ping"}},{{"jsonrpc":"2.0","id":2,"method":"sampling/createMessage"}}]"#,
        req["id"]
    ))
    .await;
    assert_eq!(a.await.unwrap().unwrap().get(), r#"{"ok":true}"#);
    assert_eq!(notes.recv().await.unwrap().method, "notifications/message");
    let reply = f.next().await;
    assert_eq!(reply[0], json!({"jsonrpc":"2.0","id":1,"result":{}}));
    assert_eq!(reply[1]["error"]["code"], json!(-32601));
}

#[tokio::test(start_paused = true)]
async fn timeout_sends_cancelled() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("tools/call", None, opts()).await });
    let req = f.next().await;
    let err = a.await.unwrap().unwrap_err();
    assert!(matches!(err, PeerError::Timeout { .. }), "{err}");
    let cancel = f.next().await;
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], req["id"]);
    // A late response is ignored.
    f.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
        req["id"]
    ))
    .await;
    assert_eq!(f.peer.pending_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn progress_extends_the_timeout_up_to_the_hard_max() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let seen = Arc::new(AtomicUsize::new(0));
    let seen2 = seen.clone();
    let o = RequestOptions {
        on_progress: Some(Arc::new(move |_| {
            seen2.fetch_add(1, Ordering::SeqCst);
        })),
        ..Default::default()
    };
    let start = Instant::now();
    let params = to_raw(&json!({"name":"slow","_meta":{"keep":1}})).unwrap();
    let a = tokio::spawn(async move {
        let r = p.request("tools/call", Some(params), o).await;
        (r, start.elapsed())
    });
    let req = f.next().await;
    let token = req["params"]["_meta"]["progressToken"].clone();
    assert_eq!(
        req["params"]["_meta"]["keep"],
        json!(1),
        "existing _meta kept"
    );
    // Progress every 4 s keeps a 5 s timeout alive, until the 12 s hard max.
    for i in 0..5 {
        tokio::time::sleep(Duration::from_secs(4)).await;
        f.send(&format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":{i}}}}}"#
        ))
        .await;
    }
    let (r, took) = a.await.unwrap();
    assert!(matches!(r, Err(PeerError::Timeout { .. })));
    assert!(
        took >= Duration::from_secs(12) && took < Duration::from_secs(13),
        "{took:?}"
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "progress at 4 s and 8 s reached the caller"
    );
}

#[tokio::test]
async fn caller_cancel_and_drop_send_cancelled() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let token = CancellationToken::new();
    let o = RequestOptions {
        cancel: Some(token.clone()),
        ..opts()
    };
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("a", None, o).await });
    let req = f.next().await;
    token.cancel();
    assert!(matches!(a.await.unwrap(), Err(PeerError::Cancelled { .. })));
    assert_eq!(f.next().await["params"]["requestId"], req["id"]);

    let p = f.peer.clone();
    let b = tokio::spawn(async move { p.request("b", None, opts()).await });
    let req = f.next().await;
    b.abort();
    let _ = b.await;
    assert_eq!(f.next().await["params"]["requestId"], req["id"]);
    assert_eq!(f.peer.pending_count(), 0);
}

#[tokio::test]
async fn initialize_is_never_cancelled() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let token = CancellationToken::new();
    let o = RequestOptions {
        cancel: Some(token.clone()),
        cancellable: false,
        ..opts()
    };
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("initialize", None, o).await });
    f.next().await;
    token.cancel();
    assert!(a.await.unwrap().is_err());
    f.peer.notify("probe", None).await.unwrap();
    assert_eq!(
        f.next().await["method"],
        "probe",
        "no cancellation was sent first"
    );
}

#[tokio::test]
async fn close_fails_pending_requests_at_once_with_the_reason() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("x", None, opts()).await });
    f.next().await;
    f.to_peer
        .send(TransportEvent::Closed(CloseReason {
            summary: "exited with status 3".into(),
            stderr_tail: vec!["fatal: boom".into()],
            auth_required: false,
        }))
        .await
        .unwrap();
    let err = a.await.unwrap().unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("status 3") && text.contains("fatal: boom"),
        "{text}"
    );
    f.peer.closed().await;
    assert!(f.peer.request("y", None, opts()).await.is_err());
}

#[tokio::test]
async fn oversized_response_fails_its_request() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("x", None, opts()).await });
    let req = f.next().await;
    let id = Id::number(req["id"].as_i64().unwrap());
    f.to_peer
        .send(TransportEvent::Oversized {
            limit: 1024,
            id: Some(id),
        })
        .await
        .unwrap();
    assert!(matches!(
        a.await.unwrap(),
        Err(PeerError::Oversized { limit: 1024 })
    ));
}

#[tokio::test]
async fn server_cancel_aborts_the_handler_without_a_reply() {
    struct Never;
    impl RequestHandler for Never {
        fn handle(
            &self,
            _: IncomingRequest,
        ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
            Box::pin(std::future::pending())
        }
    }
    let mut f = Fake::new(Arc::new(Never));
    f.send(r#"{"jsonrpc":"2.0","id":"s1","method":"elicitation/create"}"#)
        .await;
    f.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"s1"}}"#)
        .await;
    f.send(r#"{"jsonrpc":"2.0","id":"s2","method":"ping"}"#)
        .await;
    assert_eq!(
        f.next().await["id"],
        "s2",
        "no reply to the cancelled request"
    );
}

#[tokio::test]
async fn progress_sent_before_the_response_is_delivered_before_return() {
    for _ in 0..50 {
        let mut f = Fake::new(Arc::new(NoHandler));
        let seen = Arc::new(AtomicUsize::new(0));
        let s2 = seen.clone();
        let o = RequestOptions {
            on_progress: Some(Arc::new(move |_| {
                s2.fetch_add(1, Ordering::SeqCst);
            })),
            ..Default::default()
        };
        let p = f.peer.clone();
        let a = tokio::spawn(async move { p.request("x", None, o).await });
        let req = f.next().await;
        let token = req["params"]["_meta"]["progressToken"].clone();
        for i in 0..4 {
            f.send(&format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":{i}}}}}"#
            ))
            .await;
        }
        f.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
            req["id"]
        ))
        .await;
        a.await.unwrap().unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 4);
    }
}

#[tokio::test(start_paused = true)]
async fn a_server_that_stops_reading_cannot_block_a_request_past_its_timeout() {
    let (otx, _orx_never_read) = mpsc::channel(1);
    let (_itx, irx) = mpsc::channel(1);
    let mut cfg = PeerConfig::new("stuck");
    cfg.timeout = Duration::from_secs(5);
    let peer = Peer::start(cfg, otx, irx, Arc::new(NoHandler));
    // Fill the one-slot queue, then the next request must time out.
    peer.notify("filler", None).await.unwrap();
    let started = Instant::now();
    let err = peer.request("x", None, opts()).await.unwrap_err();
    assert!(matches!(err, PeerError::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(6));
    assert_eq!(peer.pending_count(), 0);
}

#[tokio::test]
async fn stray_json_log_line_does_not_fail_request_0() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("initialize", None, opts()).await });
    let req = f.next().await;
    assert_eq!(req["id"], json!(0));
    // Structured logs a server prints on stdout: no "jsonrpc", but an "id"
    // (and even an "error") of their own.
    f.send(r#"{"id":0,"level":"info"}"#).await;
    f.send(r#"{"id":0,"level":"error","error":"boom"}"#).await;
    f.send(r#"{"id":0,"result":"a log line too"}"#).await;
    f.send(r#"{"jsonrpc":"2.0","id":0,"result":{"ok":1}}"#)
        .await;
    assert_eq!(a.await.unwrap().unwrap().get(), r#"{"ok":1}"#);
}

#[tokio::test]
async fn server_requests_with_ids_outside_i64_are_answered_byte_for_byte() {
    struct Roots;
    impl RequestHandler for Roots {
        fn handle(
            &self,
            _: IncomingRequest,
        ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
            Box::pin(async { Ok(to_raw(&json!({"roots": []})).unwrap()) })
        }
    }
    let mut f = Fake::new(Arc::new(Roots));
    for id in [
        "12345678901234567890",
        "-99999999999999999999999",
        "123456789012345678901234567890",
        r#""caf\u00e9""#,
        "0",
    ] {
        for method in ["ping", "roots/list"] {
            f.send(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}"}}"#
            ))
            .await;
            let line = tokio::time::timeout(Duration::from_secs(10), f.from_peer.recv())
                .await
                .unwrap_or_else(|_| panic!("no reply to {method} with id {id}"))
                .unwrap()
                .text;
            assert!(
                line.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#)),
                "{method} {id}: {line}"
            );
        }
    }
}

#[tokio::test]
async fn a_large_duration_does_not_panic_a_request() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let o = RequestOptions {
        timeout: Some(Duration::MAX),
        max_timeout: Some(Duration::MAX),
        on_progress: Some(Arc::new(|_| {})),
        reset_timeout_on_progress: true,
        ..Default::default()
    };
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("x", None, o).await });
    let req = f.next().await;
    let token = req["params"]["_meta"]["progressToken"].clone();
    // Progress restarts the timeout: `now + Duration::MAX` again.
    f.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{token},"progress":1}}}}"#
    ))
    .await;
    f.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{}}}}"#,
        req["id"]
    ))
    .await;
    assert_eq!(a.await.expect("the request panicked").unwrap().get(), "{}");
}

#[tokio::test]
async fn a_cancel_names_a_request_of_its_sender_and_never_ends_one_of_ours() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let a = tokio::spawn(async move { p.request("elicitation/create", None, opts()).await });
    let req = f.next().await;
    // The other side's late cancel for its own request with the same
    // number (both sides count from 0): not ours, so it is ignored.
    f.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{}}}}}"#,
        req["id"]
    ))
    .await;
    f.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"action":"accept"}}}}"#,
        req["id"]
    ))
    .await;
    assert_eq!(
        a.await.unwrap().unwrap().get(),
        r#"{"action":"accept"}"#,
        "the answer after the stray cancel was dropped"
    );
}

#[tokio::test]
async fn a_request_sent_to_be_ended_by_a_cancel_is_ended_by_one() {
    let mut f = Fake::new(Arc::new(NoHandler));
    let p = f.peer.clone();
    let a = tokio::spawn(async move {
        let o = RequestOptions {
            ended_by_cancel: true,
            ..opts()
        };
        p.request("subscriptions/listen", None, o).await
    });
    let req = f.next().await;
    f.send(&format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{},"reason":"bye"}}}}"#,
        req["id"]
    ))
    .await;
    let err = a.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("bye"), "{err}");
}

/// Answers every request after `delay` (a person filling in a form).
struct SlowHost(Duration);

impl RequestHandler for SlowHost {
    fn handle(&self, _: IncomingRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        let d = self.0;
        Box::pin(async move {
            tokio::time::sleep(d).await;
            Ok(to_raw(&json!({"action": "decline"})).unwrap())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_calls_deadline_is_held_while_a_request_it_caused_waits_on_its_host() {
    // The call times out after 5 s (hard 12 s); its host takes 30 s.
    let mut f = Fake::new(Arc::new(SlowHost(Duration::from_secs(30))));
    let p = f.peer.clone();
    let origin = Origin {
        session: 7,
        request: Id::number(0),
    };
    let o = RequestOptions {
        origin: Some(origin),
        ..opts()
    };
    let a = tokio::spawn(async move { p.request("tools/call", None, o).await });
    let req = f.next().await;
    f.send(r#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{}}"#)
        .await;
    let answer = f.next().await;
    assert_eq!(answer["id"], 0, "{answer}");
    // Answered after 30 s, and the call is still waiting: its timeout
    // starts again now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    f.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[]}}}}"#,
        req["id"]
    ))
    .await;
    assert_eq!(a.await.unwrap().unwrap().get(), r#"{"content":[]}"#);
}

#[tokio::test(start_paused = true)]
async fn a_held_call_times_out_again_once_its_host_has_answered() {
    let mut f = Fake::new(Arc::new(SlowHost(Duration::from_secs(30))));
    let p = f.peer.clone();
    let o = RequestOptions {
        origin: Some(Origin {
            session: 7,
            request: Id::number(0),
        }),
        ..opts()
    };
    let started = Instant::now();
    let a = tokio::spawn(async move { p.request("tools/call", None, o).await });
    let _req = f.next().await;
    f.send(r#"{"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{}}"#)
        .await;
    let err = a.await.unwrap().unwrap_err();
    assert!(matches!(err, PeerError::Timeout { .. }), "{err}");
    // 30 s held, then its 5 s timeout: not 5 s, and not never.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(35) && took < Duration::from_secs(40),
        "{took:?}"
    );
}

/// The engine's sessions reach their peer through a slot filled after the
/// peer is made: the first request, already waiting, must find it filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_filled_before_reading_is_seen_by_the_first_request() {
    struct SlotHandler(Arc<std::sync::OnceLock<Peer>>);
    impl RequestHandler for SlotHandler {
        fn handle(
            &self,
            _r: IncomingRequest,
        ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
            let filled = self.0.get().is_some();
            Box::pin(async move {
                if filled {
                    Ok(RawValue::from_string("true".into()).unwrap())
                } else {
                    Err(ErrorObject::new(-32603, "the connection is not open yet"))
                }
            })
        }
    }
    let mut refused = 0;
    for _ in 0..500 {
        let (otx, mut orx) = mpsc::channel(8);
        let (itx, irx) = mpsc::channel(8);
        itx.send(TransportEvent::Frame(
            r#"{"jsonrpc":"2.0","id":1,"method":"x"}"#.into(),
        ))
        .await
        .unwrap();
        let slot = Arc::new(std::sync::OnceLock::new());
        let fill = slot.clone();
        let _peer = Peer::start_after(
            PeerConfig::new("slot"),
            otx,
            irx,
            Arc::new(SlotHandler(slot)),
            move |p| {
                let _ = fill.set(p.clone());
            },
        );
        let line = orx.recv().await.unwrap().text;
        if !line.contains(r#""result":true"#) {
            refused += 1;
        }
    }
    assert_eq!(refused, 0, "first requests that found no peer");
}
