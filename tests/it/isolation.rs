//! Isolation between hosts on one daemon: a server's question reaches the
//! host whose call caused it, or no host (the fallback); cancels are read in
//! the right id space; a person's answer is not cut off by the call's own
//! timeout; `initialize` is a barrier. Each case runs through the daemon's
//! socket and through `mcphost bridge`, with raw JSON-RPC hosts written
//! here, against our test server (a handshake-era stdio server; with
//! `--collide-ids` it picks its own request ids to collide with ours and
//! sends late cancels).

use crate::common;
use crate::common::wire;

use std::time::{Duration, Instant};

use common::{Daemon, servers_config, text_of, ts_entry};
use serde_json::{Value, json};
use wire::Wire;

/// Cold starts on a busy 2-core machine.
const READY: Duration = Duration::from_secs(40);

#[derive(Debug, Clone, Copy)]
enum Door {
    Socket,
    Bridge,
}

const DOORS: [Door; 2] = [Door::Socket, Door::Bridge];

fn daemon(servers: &[(&str, String)]) -> Daemon {
    let d = Daemon::start(&servers_config(servers));
    let names: Vec<&str> = servers.iter().map(|(n, _)| *n).collect();
    d.wait_ready(&names, READY);
    d
}

/// A client's connection through `door`, not initialized yet.
fn open(d: &Daemon, door: Door) -> Wire {
    match door {
        Door::Socket => Wire::connect(d),
        Door::Bridge => Wire::bridge(d),
    }
}

/// An initialized host declaring `caps`, through `door`.
fn host(d: &Daemon, door: Door, caps: Value) -> Wire {
    let mut w = open(d, door);
    w.initialize(caps);
    w
}

fn elicitation() -> Value {
    json!({"elicitation": {"form": {}}})
}

fn call(tool: &str, args: Value) -> Value {
    json!({"name": format!("ts__{tool}"), "arguments": args})
}

fn send_call(w: &mut Wire, id: Value, tool: &str, args: Value) {
    w.send(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": call(tool, args)}),
    );
}

/// The next request `method` the daemon sends this host.
fn asked(w: &mut Wire, method: &str) -> Value {
    let line = w.until(&format!("a {method} request"), |m| {
        m["method"] == method && m.get("id").is_some()
    });
    serde_json::from_str(&line).unwrap()
}

fn reply(w: &mut Wire, id: &Value, result: Value) {
    w.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
}

fn accept(name: &str) -> Value {
    json!({"action": "accept", "content": {"name": name}})
}

/// The result text of answered call `id`; panics on an error answer.
fn result_text(w: &mut Wire, id: i64) -> String {
    let r = w.answer(id);
    assert!(r.get("error").is_none(), "call {id} failed: {r}");
    text_of(&r["result"])
}

/// What the daemon's `servers --json` says of `ts`'s attribution.
fn attribution(d: &Daemon) -> Value {
    d.server("ts").expect("ts is listed")["attribution"].clone()
}

/// No request of `method` reached `w`: checked after `w` got the answer to
/// a later request of its own, which the daemon writes after anything it
/// sent before.
fn never_asked(w: &mut Wire, method: &str) {
    w.request("ping", json!({}));
    let held: Vec<Value> = w.held.iter().map(|l| common::lenient_json(l)).collect();
    assert!(
        !held.iter().any(|m| m["method"] == method),
        "this host was sent another's {method}: {held:?}"
    );
}

// ---------------------------------------------------------------------------
// Item 1: a cancel names a request of its sender

#[test]
fn a_hosts_late_cancel_for_its_own_call_does_not_end_the_daemons_request_with_that_number() {
    let d = daemon(&[("ts", ts_entry(&["--host-tools"]))]);
    for door in DOORS {
        let mut a = host(&d, door, elicitation());
        // Its own call 0, answered.
        send_call(&mut a, json!(0), "echo", json!({"text": "first"}));
        assert!(result_text(&mut a, 0).contains("first"));
        // Call 1 makes the server ask; the daemon numbers its own requests
        // to this host from 0 too.
        send_call(&mut a, json!(1), "elicit", json!({}));
        let req = asked(&mut a, "elicitation/create");
        assert_eq!(req["id"], 0, "{door:?}: the ids do not collide: {req}");
        // A late cancel for its call 0, then the person's answer.
        a.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": 0, "reason": "late"}}),
        );
        reply(&mut a, &req["id"], accept("A"));
        let text = result_text(&mut a, 1);
        assert!(
            text.contains("accept") && text.contains("\"A\""),
            "{door:?}: the answer after the late cancel was lost: {text}"
        );
    }
}

#[test]
fn a_servers_late_cancel_for_its_own_answered_ping_does_not_end_another_hosts_call() {
    let d = daemon(&[("ts", ts_entry(&["--host-tools", "--collide-ids"]))]);
    for door in DOORS {
        let mut b = host(&d, door, json!({}));
        b.send(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "ts__slow", "arguments": {"ms": 1500}, "_meta": {"progressToken": "b"}}}),
        );
        // B's call is running at the server.
        b.until("progress of B's call", |m| {
            m["method"] == "notifications/progress"
        });
        let mut a = host(&d, door, json!({}));
        // The server's ping takes the id of B's call in flight, and once
        // answered is followed by a cancel for that id.
        let r = a.request("tools/call", call("ask", json!({"method": "ping"})));
        assert!(r.get("error").is_none(), "{r}");
        let text = result_text(&mut b, 5);
        assert!(
            !text.contains("ended the request"),
            "{door:?}: B's call was ended by the server's cancel of its own ping: {text}"
        );
    }
}

// ---------------------------------------------------------------------------
// Item 2: a person gets the host timeout, not the call's

#[test]
fn a_form_that_takes_longer_than_the_calls_timeout_is_still_answered() {
    let d = daemon(&[(
        "ts",
        format!(r#"{}, "timeouts": {{"request": "1s"}}"#, ts_entry(&[])),
    )]);
    for door in DOORS {
        let mut a = host(&d, door, elicitation());
        let started = Instant::now();
        send_call(&mut a, json!(1), "elicit", json!({}));
        let req = asked(&mut a, "elicitation/create");
        // The person takes 2.5 s: longer than the call's 1 s timeout.
        std::thread::sleep(Duration::from_millis(2500));
        reply(&mut a, &req["id"], accept("slow person"));
        let text = result_text(&mut a, 1);
        assert!(text.contains("slow person"), "{door:?}: {text}");
        assert!(started.elapsed() >= Duration::from_millis(2500));
    }
}

#[test]
fn a_stateless_clients_parked_call_outlasts_the_calls_timeout_while_it_answers() {
    let d = daemon(&[(
        "ts",
        format!(r#"{}, "timeouts": {{"request": "1s"}}"#, ts_entry(&[])),
    )]);
    for door in DOORS {
        let mut w = open(&d, door);
        let caps = json!({"elicitation": {}});
        let mut p = call("elicit", json!({}));
        p["_meta"] = stateless_meta(caps.clone());
        let r = w.request("tools/call", p.clone());
        let res = &r["result"];
        assert_eq!(res["resultType"], "input_required", "{door:?}: {r}");
        let key = res["inputRequests"]
            .as_object()
            .and_then(|m| m.keys().next().cloned())
            .unwrap_or_else(|| panic!("{r}"));
        // The person takes 2.5 s, the server's call times out after 1 s.
        std::thread::sleep(Duration::from_millis(2500));
        p["inputResponses"] = json!({key: accept("parked")});
        p["requestState"] = res["requestState"].clone();
        let r = w.request("tools/call", p);
        let text = text_of(&r["result"]);
        assert!(text.contains("parked"), "{door:?}: {r}");
    }
}

// ---------------------------------------------------------------------------
// Item 3: a shared stdio server's questions reach the right host, or none

#[test]
fn on_a_shared_stdio_server_each_hosts_question_reaches_only_that_host() {
    let d = daemon(&[("ts", ts_entry(&[]))]);
    assert_eq!(
        attribution(&d)["mode"],
        "unscheduled",
        "{}",
        attribution(&d)
    );
    for door in DOORS {
        let mut a = host(&d, door, elicitation());
        let mut b = host(&d, door, elicitation());
        let mut mute = host(&d, door, json!({}));
        // A asks first, alone: it is A's.
        send_call(&mut a, json!(1), "elicit", json!({}));
        let q = asked(&mut a, "elicitation/create");
        reply(&mut a, &q["id"], accept("A"));
        assert!(result_text(&mut a, 1).contains("\"A\""));
        assert_eq!(attribution(&d)["mode"], "scheduled", "{}", attribution(&d));

        // B calls while A's question is open: B's call waits for A's turn
        // to end, so its question cannot be taken for A's.
        send_call(&mut a, json!(2), "elicit", json!({}));
        let qa = asked(&mut a, "elicitation/create");
        send_call(&mut b, json!(2), "elicit", json!({}));
        common::poll("B's call to wait for its turn", READY, || {
            d.log_text()
                .contains("waiting for this session's turn")
                .then_some(())
        });
        reply(&mut a, &qa["id"], accept("A"));
        let qb = asked(&mut b, "elicitation/create");
        reply(&mut b, &qb["id"], accept("B"));
        let (ta, tb) = (result_text(&mut a, 2), result_text(&mut b, 2));
        assert!(
            ta.contains("\"A\"") && !ta.contains("\"B\""),
            "{door:?}: A got {ta}"
        );
        assert!(
            tb.contains("\"B\"") && !tb.contains("\"A\""),
            "{door:?}: B got {tb}"
        );

        // A host that declared no elicitation calls while A's call runs:
        // its question goes to the fallback, never to A.
        a.send(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "ts__slow", "arguments": {"ms": 600}, "_meta": {"progressToken": "a"}}}),
        );
        a.until("progress of A's call", |m| {
            m["method"] == "notifications/progress"
        });
        send_call(&mut mute, json!(1), "elicit", json!({}));
        let tm = result_text(&mut mute, 1);
        assert!(tm.contains("decline"), "{door:?}: {tm}");
        result_text(&mut a, 3);
        never_asked(&mut a, "elicitation/create");
        never_asked(&mut b, "elicitation/create");
    }
    // The waits are counted, and said where a user looks.
    let att = attribution(&d);
    assert!(att["queue"]["calls"].as_u64() >= Some(1), "{att}");
    let table = d.run(&["servers"]).stdout;
    assert!(
        table.contains("HOST REQUESTS") && table.contains("note: ts: host requests scheduled"),
        "{table}"
    );
    let stats = d.run(&["servers", "--stats"]).stdout;
    assert!(stats.contains("queue: ts: "), "{stats}");
}

#[test]
fn a_server_seen_asking_outside_its_calls_never_reaches_a_busy_unrelated_host() {
    let d = daemon(&[("ts", ts_entry(&["--host-tools"]))]);
    let later = |delay: u64| {
        call(
            "later",
            json!({"method": "elicitation/create", "delayMs": delay,
                   "params": {"message": "late", "requestedSchema": {"type": "object", "properties": {}}}}),
        )
    };
    for (round, door) in DOORS.into_iter().enumerate() {
        let mut a = host(&d, door, elicitation());
        let mut b = host(&d, door, elicitation());
        // The request comes after A's call ended, with nothing in flight.
        a.request("tools/call", later(200));
        let unattributed = |d: &Daemon| attribution(d)["unattributed"].as_u64().unwrap_or(0);
        let want = 2 * round as u64 + 1;
        common::poll("the late request to be answered", READY, || {
            (unattributed(&d) >= want).then_some(())
        });
        assert_eq!(attribution(&d)["mode"], "fallback", "{}", attribution(&d));
        // Now B is busy when A's late request comes: it is still not B's.
        b.send(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "name": "ts__slow", "arguments": {"ms": 1500}, "_meta": {"progressToken": "b"}}}),
        );
        b.until("progress of B's call", |m| {
            m["method"] == "notifications/progress"
        });
        a.request("tools/call", later(100));
        common::poll("the second late request to be answered", READY, || {
            (unattributed(&d) > want).then_some(())
        });
        result_text(&mut b, 9);
        never_asked(&mut b, "elicitation/create");
        never_asked(&mut a, "elicitation/create");
    }
}

// ---------------------------------------------------------------------------
// Item 4: a per-session instance's requests stay with its session

#[test]
fn a_per_session_instances_question_goes_to_its_session_or_the_fallback_never_the_primary() {
    let d = daemon(&[(
        "ts",
        format!(r#"{}, "share": "per-session""#, ts_entry(&[])),
    )]);
    for door in DOORS {
        let mut p = host(&d, door, elicitation());
        let r = p.request("mcphost/host/register", json!({}));
        assert!(r.get("error").is_none(), "{r}");
        let mut owner = host(&d, door, json!({}));
        send_call(&mut owner, json!(1), "elicit", json!({}));
        let t = result_text(&mut owner, 1);
        assert!(t.contains("decline"), "{door:?}: {t}");
        never_asked(&mut p, "elicitation/create");
    }
}

// ---------------------------------------------------------------------------
// Item 6: bounds

#[test]
fn a_host_has_at_most_16_server_requests_outstanding_and_the_rest_follow_as_it_answers() {
    let d = daemon(&[("ts", ts_entry(&[]))]);
    for door in DOORS {
        let mut a = host(&d, door, elicitation());
        let waits_before = d.log_text().matches("outstanding: this one waits").count();
        for i in 0..20 {
            send_call(&mut a, json!(100 + i), "elicit", json!({}));
        }
        let mut open: Vec<Value> = (0..16)
            .map(|_| asked(&mut a, "elicitation/create"))
            .collect();
        // The other 4 wait at the daemon, not at the host.
        common::poll("4 requests to wait for the host", READY, || {
            let waits = d.log_text().matches("outstanding: this one waits").count();
            (waits >= waits_before + 4).then_some(())
        });
        assert!(
            !a.held.iter().any(|l| l.contains("elicitation/create")),
            "{door:?}: more than 16 reached the host"
        );
        // Each answer lets one more through.
        let mut answered = 0;
        while let Some(q) = open.pop() {
            reply(&mut a, &q["id"], accept("n"));
            answered += 1;
            if answered <= 4 {
                open.push(asked(&mut a, "elicitation/create"));
            }
        }
        for i in 0..20 {
            assert!(result_text(&mut a, 100 + i).contains("accept"));
        }
    }
}

#[test]
fn a_request_whose_call_was_cancelled_is_withdrawn_from_the_host_even_if_the_server_keeps_it() {
    let d = daemon(&[("ts", ts_entry(&["--no-withdraw"]))]);
    for door in DOORS {
        let mut a = host(&d, door, elicitation());
        send_call(&mut a, json!(7), "elicit", json!({}));
        let q = asked(&mut a, "elicitation/create");
        a.send(
            &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": 7, "reason": "the user closed the chat"}}),
        );
        let line = a.until("the form's withdrawal", |m| {
            m["method"] == "notifications/cancelled"
        });
        let withdrawn: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            withdrawn["params"]["requestId"], q["id"],
            "{door:?}: {line}"
        );
    }
}

// ---------------------------------------------------------------------------
// Item 7: initialize is a barrier

#[test]
fn requests_written_right_after_initialize_are_handled_after_it() {
    let d = daemon(&[("ts", ts_entry(&[]))]);
    for door in DOORS {
        for _ in 0..10 {
            let mut w = open(&d, door);
            // One write: no waiting for initialize's answer.
            let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "eager", "version": "0"}}});
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
            w.send_raw(&format!("{init}\n{initialized}\n{list}\n"));
            let r = w.answer(2);
            assert!(
                r.get("error").is_none()
                    && r["result"]["tools"]
                        .as_array()
                        .is_some_and(|t| !t.is_empty()),
                "{door:?}: {r}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Items 4 and 6: the same outcome in both eras; a caller's own capabilities

#[test]
fn a_host_without_a_capability_gets_the_fallbacks_answer_whatever_the_servers_era() {
    let d = daemon(&[
        ("old", ts_entry(&[])),
        ("new", ts_entry(&["--era", "stateless"])),
    ]);
    for door in DOORS {
        let mut h = host(&d, door, json!({}));
        for server in ["old", "new"] {
            let r = h.request(
                "tools/call",
                json!({"name": format!("{server}__elicit"), "arguments": {}}),
            );
            assert!(r.get("error").is_none(), "{door:?} {server}: {r}");
            let text = text_of(&r["result"]);
            assert!(
                text.contains(r#""action":"decline""#),
                "{door:?} {server}: {text}"
            );
        }
    }
}

/// A stateless (2026-07-28) request's `_meta`, declaring `caps`.
fn stateless_meta(caps: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "tests/isolation.rs", "version": "0"},
    })
}

#[test]
fn a_per_session_instance_of_a_stateless_server_sees_its_stateless_callers_own_capabilities() {
    let d = daemon(&[(
        "ts",
        format!(
            r#"{}, "share": "per-session""#,
            ts_entry(&["--era", "stateless"])
        ),
    )]);
    for door in DOORS {
        let mut w = open(&d, door);
        // Only this caller can follow a URL; the fallback cannot.
        let r = w.request(
            "tools/call",
            json!({"name": "ts__elicit",
                   "arguments": {"mode": "url", "url": "https://example.com/consent"},
                   "_meta": stateless_meta(json!({"elicitation": {"url": {}}}))}),
        );
        let res = &r["result"];
        assert_eq!(res["resultType"], "input_required", "{door:?}: {r}");
        let asked = res["inputRequests"].to_string();
        assert!(
            asked.contains("elicitation/create") && asked.contains("https://example.com/consent"),
            "{door:?}: {r}"
        );
    }
}

#[test]
fn a_stateless_client_beside_a_handshake_host_gets_only_its_own_question_as_input_required() {
    let d = daemon(&[("ts", ts_entry(&[]))]);
    for door in DOORS {
        let mut h = host(&d, door, elicitation());
        // The server asks once, alone: from now on its calls take turns.
        send_call(&mut h, json!(1), "elicit", json!({}));
        let q = asked(&mut h, "elicitation/create");
        reply(&mut h, &q["id"], accept("H"));
        result_text(&mut h, 1);
        // H's question is open when the stateless client calls.
        send_call(&mut h, json!(2), "elicit", json!({}));
        let qh = asked(&mut h, "elicitation/create");
        let waits = d
            .log_text()
            .matches("waiting for this session's turn")
            .count();
        let mut s = open(&d, door);
        let mut p = call("elicit", json!({"message": "for S"}));
        p["_meta"] = stateless_meta(json!({"elicitation": {}}));
        let sid = s.start("tools/call", p.clone());
        common::poll("the stateless call to wait for its turn", READY, || {
            let now = d
                .log_text()
                .matches("waiting for this session's turn")
                .count();
            (now > waits).then_some(())
        });
        reply(&mut h, &qh["id"], accept("H"));
        assert!(result_text(&mut h, 2).contains("\"H\""));
        // Its own round: its own question, answered by it, for its call.
        let r = s.answer(sid);
        let res = &r["result"];
        assert_eq!(res["resultType"], "input_required", "{door:?}: {r}");
        assert!(
            res["inputRequests"].to_string().contains("for S"),
            "{door:?}: {r}"
        );
        let key = res["inputRequests"]
            .as_object()
            .and_then(|m| m.keys().next().cloned())
            .unwrap_or_else(|| panic!("{r}"));
        p["inputResponses"] = json!({key: accept("S")});
        p["requestState"] = res["requestState"].clone();
        let r = s.request("tools/call", p);
        let t = text_of(&r["result"]);
        assert!(t.contains("\"S\"") && !t.contains("\"H\""), "{door:?}: {t}");
        never_asked(&mut h, "elicitation/create");
    }
}
