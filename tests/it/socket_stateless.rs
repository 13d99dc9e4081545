//! Our own socket serves both eras: stateless 2026-07-28 clients (no
//! `initialize`, `_meta` on every request, `input_required` rounds for the
//! servers' requests, `subscriptions/listen`) beside handshake clients, on
//! the daemon's socket and through `mcphost bridge`.
//!
//! The servers behind the daemon are `@modelcontextprotocol/server-everything`
//! (handshake; needs the interop install: ignored unless asked
//! for) and our test server in either era. The clients
//! are raw JSON-RPC lines written here, and the official Python SDK's
//! `mcp.Client` (tests/interop/stateless_client.py), which probes
//! `server/discover` and goes stateless on its own.

use crate::common;
use crate::common::wire;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, Interop, MCPHOST, interop, lenient_json, servers_config, ts_entry};
use serde_json::{Value, json};
use wire::{WAIT, Wire};

/// Cold starts of node servers on a busy 2-core machine.
const READY: Duration = Duration::from_secs(60);

const PV: &str = "io.modelcontextprotocol/protocolVersion";
const CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const SUB_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// A stateless request's `_meta`, declaring `caps`.
fn meta(caps: Value) -> Value {
    json!({
        PV: "2026-07-28",
        CAPS: caps,
        "io.modelcontextprotocol/clientInfo": {"name": "tests/socket_stateless.rs", "version": "0"},
    })
}

/// `params` with a stateless `_meta` declaring `caps`.
fn with_meta(mut params: Value, caps: Value) -> Value {
    params["_meta"] = meta(caps);
    params
}

fn everything(env: &Interop) -> String {
    env.node_entry("server-everything")
}

/// A tool result's text items, joined.
fn text(result: &Value) -> String {
    common::text_of(result)
}

/// What every stateless result carries besides the server's own members.
fn assert_stateless_result(r: &Value) {
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["_meta"][SERVER_INFO]["name"], "mcphost", "{r}");
}

// ---------------------------------------------------------------------------

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn a_stateless_client_discovers_lists_and_calls_server_everything_with_results_relayed_byte_for_byte()
 {
    let env = interop();
    let d = Daemon::start(&servers_config(&[("ev", everything(&env))]));
    d.wait_ready(&["ev"], READY);
    let mut w = Wire::connect(&d);

    let r = w.request("server/discover", json!({"_meta": meta(json!({}))}));
    let res = &r["result"];
    assert_eq!(res["resultType"], "complete", "{r}");
    assert_eq!(res["supportedVersions"], json!(["2026-07-28"]), "{r}");
    for cap in ["tools", "resources", "prompts"] {
        assert_eq!(res["capabilities"][cap]["listChanged"], true, "{r}");
    }
    assert_eq!(
        (&res["ttlMs"], &res["cacheScope"]),
        (&json!(0), &json!("private")),
        "{r}"
    );
    assert_eq!(res["_meta"][SERVER_INFO]["name"], "mcphost", "{r}");
    assert!(
        res["instructions"]
            .as_str()
            .unwrap()
            .contains("<server>__<tool>"),
        "{r}"
    );

    let r = w.request("tools/list", json!({"_meta": meta(json!({}))}));
    assert_stateless_result(&r);
    assert_eq!(r["result"]["ttlMs"], 0, "{r}");
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"ev__echo"), "{names:?}");

    let call = json!({"name": "ev__echo", "arguments": {"message": "stateless 1.10"}});
    let stateless = w.result_text("tools/call", with_meta(call.clone(), json!({})));
    let v = lenient_json(&stateless);
    assert_eq!(v["resultType"], "complete", "{stateless}");
    assert!(text(&v).contains("stateless 1.10"), "{stateless}");

    // Byte for byte what a handshake client gets, plus only our two members.
    let mut h = Wire::connect(&d);
    h.initialize(json!({}));
    let handshake = h.result_text("tools/call", call);
    let added = format!(
        r#","resultType":"complete","_meta":{{"{SERVER_INFO}":{{"name":"mcphost","version":"{}"}}}}}}"#,
        env!("CARGO_PKG_VERSION")
    );
    assert!(!handshake.contains("resultType"), "{handshake}");
    assert_eq!(
        stateless,
        format!("{}{added}", handshake.strip_suffix('}').unwrap()),
        "the stateless result is not the server's bytes plus resultType and serverInfo"
    );

    // Malformed stateless requests on the now stateless connection.
    let r = w.request("tools/list", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("protocolVersion"),
        "{r}"
    );
    let mut m = meta(json!({}));
    m.as_object_mut().unwrap().remove(CAPS);
    let r = w.request(
        "tools/call",
        json!({"_meta": m, "name": "ev__echo", "arguments": {"message": "x"}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("clientCapabilities"),
        "{r}"
    );
    let mut m = meta(json!({}));
    m[PV] = json!("2099-01-01");
    let r = w.request("tools/list", json!({"_meta": m}));
    assert_eq!(r["error"]["code"], -32022, "{r}");
    assert_eq!(
        r["error"]["data"]["supported"],
        json!(["2026-07-28"]),
        "{r}"
    );
    assert_eq!(r["error"]["data"]["requested"], "2099-01-01", "{r}");
    // The handshake is refused on it, with the version it can speak.
    let r = w.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}),
    );
    assert_eq!(r["error"]["code"], -32022, "{r}");
    assert_eq!(
        r["error"]["data"]["supported"],
        json!(["2026-07-28"]),
        "{r}"
    );

    // On a fresh connection an unknown version settles nothing and lists
    // everything we speak, newest first.
    let mut f = Wire::connect(&d);
    let mut m = meta(json!({}));
    m[PV] = json!("1900-01-01");
    let r = f.request("tools/list", json!({"_meta": m}));
    assert_eq!(r["error"]["code"], -32022, "{r}");
    assert_eq!(
        r["error"]["data"]["supported"],
        json!([
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2025-03-26",
            "2024-11-05"
        ]),
        "{r}"
    );
    let init = f.initialize(json!({}));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    // A handshake connection refuses stateless requests.
    let r = f.request("server/discover", json!({"_meta": meta(json!({}))}));
    assert_eq!(r["error"]["code"], -32600, "{r}");
}

/// server-everything's form: the answer the tests give it.
fn ada() -> Value {
    json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true}})
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_everythings_elicitation_reaches_a_stateless_client_as_input_required_rounds() {
    let env = interop();
    let d = Daemon::start(&servers_config(&[("ev", everything(&env))]));
    d.wait_ready(&["ev"], READY);
    let mut w = Wire::connect(&d);
    let tool = "ev__trigger-elicitation-request";
    let call = || json!({"name": tool, "arguments": {}});

    // Declared on this request: the server's elicitation comes back as
    // the call's result, while server-everything's call keeps waiting.
    let r = w.request("tools/call", with_meta(call(), json!({"elicitation": {}})));
    let res = &r["result"];
    assert_eq!(res["resultType"], "input_required", "{r}");
    assert_eq!(res["_meta"][SERVER_INFO]["name"], "mcphost", "{r}");
    let requests = res["inputRequests"]
        .as_object()
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(requests.len(), 1, "{r}");
    let (key, req) = requests.iter().next().unwrap();
    assert_eq!(req["method"], "elicitation/create", "{r}");
    assert_eq!(req["params"]["_meta"]["dev.mcphost/server"], "ev", "{r}");
    assert!(
        req["params"]["requestedSchema"]["properties"]["name"].is_object(),
        "{r}"
    );
    let state = res["requestState"].as_str().unwrap().to_owned();
    assert!(state.len() >= 32, "a guessable requestState: {state}");

    // A forged state, and this one from another connection, are refused
    // (and do not use it up).
    let forged = "0".repeat(state.len());
    let mut other = Wire::connect(&d);
    for (who, s) in [("forged", forged.as_str()), ("foreign", state.as_str())] {
        let mut p = with_meta(call(), json!({"elicitation": {}}));
        p["inputResponses"] = json!({key: ada()});
        p["requestState"] = json!(s);
        let wire = if who == "forged" { &mut w } else { &mut other };
        let r = wire.request("tools/call", p);
        assert_eq!(r["error"]["code"], -32602, "{who}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("requestState"),
            "{who}: {r}"
        );
    }
    // Bound to its call: another tool cannot use it.
    let mut p = with_meta(
        json!({"name": "ev__echo", "arguments": {"message": "x"}}),
        json!({}),
    );
    p["inputResponses"] = json!({key: ada()});
    p["requestState"] = json!(state);
    let r = w.request("tools/call", p);
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // The retry, under a new id, completes the same call with the answer.
    let mut p = with_meta(call(), json!({"elicitation": {}}));
    p["inputResponses"] = json!({key: ada()});
    p["requestState"] = json!(state);
    let r = w.request("tools/call", p.clone());
    assert_stateless_result(&r);
    let t = text(&r["result"]);
    assert!(t.contains("- Name: Ada Lovelace"), "{t}");
    assert!(t.contains("Agreed to terms: true"), "{t}");
    // Used up.
    let r = w.request("tools/call", p);
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // Not declared on this request (though declared on earlier ones): the
    // daemon's fallback declines, and no inputRequest ever comes.
    let r = w.request("tools/call", with_meta(call(), json!({"sampling": {}})));
    assert_stateless_result(&r);
    assert!(r["result"].get("inputRequests").is_none(), "{r}");
    assert!(text(&r["result"]).contains("declined"), "{r}");
}

/// A daemon with our test server as `ts`, speaking `era`, with these
/// top-level config members.
fn ts_daemon(era: &str, extra_args: &[&str], top: &str) -> Daemon {
    let mut args = vec!["--era", era];
    args.extend_from_slice(extra_args);
    let pin = if era == "stateless" {
        r#", "protocolVersion": "2026-07-28""#
    } else {
        ""
    };
    let config = format!(
        r#"{{ "loginShellPath": false{top}, "mcpServers": {{ "ts": {{ {}{pin} }} }} }}"#,
        ts_entry(&args)
    );
    let d = Daemon::start_with_flags(&config, &["-vv"]);
    d.wait_ready(&["ts"], READY);
    d
}

/// One full `input_required` round: the call, its single input request
/// (checked to be `method`), the answer, and the final result.
fn one_round(
    d: &Daemon,
    w: &mut Wire,
    tool: &str,
    caps: Value,
    method: &str,
    answer: Value,
) -> Value {
    let call = json!({"name": tool, "arguments": {}});
    let r = w.request("tools/call", with_meta(call.clone(), caps.clone()));
    assert_eq!(
        r["result"]["resultType"],
        "input_required",
        "{tool}: {r}\n{}",
        d.log_text()
    );
    let requests = r["result"]["inputRequests"].as_object().unwrap();
    let (key, req) = requests.iter().next().unwrap();
    assert_eq!(req["method"], method, "{tool}: {r}");
    let mut p = with_meta(call, caps);
    p["inputResponses"] = json!({key: answer});
    p["requestState"] = r["result"]["requestState"].clone();
    let r = w.request("tools/call", p);
    assert_stateless_result(&r);
    r
}

#[test]
fn a_stateless_server_behind_us_gets_its_input_answered_by_a_stateless_client() {
    // The test server speaks only 2026-07-28: its own input_required
    // rounds reach the daemon's client layer, go through the broker, and
    // come back to our stateless client as input_required of ours.
    let d = ts_daemon("stateless", &[], "");
    let st = d.server("ts").unwrap();
    assert_eq!(st["era"], "stateless", "{st}");
    let mut w = Wire::connect(&d);
    let all = json!({"elicitation": {}, "sampling": {}, "roots": {}});
    let r = one_round(
        &d,
        &mut w,
        "ts__elicit",
        all.clone(),
        "elicitation/create",
        json!({"action": "accept", "content": {"name": "Grace"}}),
    );
    assert!(text(&r["result"]).contains("Grace"), "{r}");
    let r = one_round(
        &d,
        &mut w,
        "ts__sample",
        all.clone(),
        "sampling/createMessage",
        json!({"role": "assistant", "content": {"type": "text", "text": "sampled statelessly"}, "model": "m"}),
    );
    assert!(text(&r["result"]).contains("sampled statelessly"), "{r}");
    let r = one_round(
        &d,
        &mut w,
        "ts__roots",
        all,
        "roots/list",
        json!({"roots": [{"uri": "file:///from-the-client"}]}),
    );
    assert!(
        text(&r["result"]).contains("file:///from-the-client"),
        "{r}"
    );

    // A handshake client of the same daemon gets that server's rounds as
    // ordinary JSON-RPC requests.
    let mut h = Wire::connect(&d);
    h.initialize(json!({"elicitation": {}}));
    let id = h.start("tools/call", json!({"name": "ts__elicit", "arguments": {}}));
    let asked = lenient_json(&h.until("elicitation/create", |m| {
        m["method"] == "elicitation/create"
    }));
    assert_eq!(
        asked["params"]["_meta"]["dev.mcphost/server"], "ts",
        "{asked}"
    );
    h.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept", "content": {"name": "Handshake"}}}));
    let r = h.answer(id);
    assert!(text(&r["result"]).contains("Handshake"), "{r}");
}

#[test]
fn a_handshake_server_behind_us_gets_its_requests_answered_by_a_stateless_client() {
    let d = ts_daemon("handshake", &[], "");
    let mut w = Wire::connect(&d);
    let caps = json!({"elicitation": {}, "sampling": {}});
    let r = one_round(
        &d,
        &mut w,
        "ts__elicit",
        caps.clone(),
        "elicitation/create",
        json!({"action": "accept", "content": {"name": "Hopper"}}),
    );
    assert!(text(&r["result"]).contains("Hopper"), "{r}");
    // roots not declared on this request: the fallback answers (the
    // configured roots, none), never an inputRequest.
    let r = w.request(
        "tools/call",
        with_meta(json!({"name": "ts__roots", "arguments": {}}), caps),
    );
    assert_stateless_result(&r);
    assert!(text(&r["result"]).contains(r#""roots":[]"#), "{r}");
}

#[test]
fn a_parked_call_expires_by_the_host_timeout_and_is_cancelled_at_its_server() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let d = ts_daemon(
        "handshake",
        &["--log-requests", log.to_str().unwrap()],
        r#", "hostTimeouts": {"elicitation": "1s"}"#,
    );
    let mut w = Wire::connect(&d);
    let caps = json!({"elicitation": {}});
    let call = json!({"name": "ts__elicit", "arguments": {}});
    let r = w.request("tools/call", with_meta(call.clone(), caps.clone()));
    assert_eq!(
        r["result"]["resultType"],
        "input_required",
        "{r}\n{}",
        d.log_text()
    );
    // Expired: its ask timed out after 1 s, then the call was dropped.
    common::wait::daemon_log(&d, "a parked call got no retry within", 1, WAIT);
    let mut p = with_meta(call.clone(), caps.clone());
    let key = r["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    p["inputResponses"] = json!({key: {"action": "accept", "content": {"name": "late"}}});
    p["requestState"] = r["result"]["requestState"].clone();
    let r = w.request("tools/call", p);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("expired"),
        "{r}"
    );

    // A connection that goes away with a parked call cancels it upstream
    // (a sampling call: its 5 minutes are not up).
    let cancels = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("notifications/cancelled")
            .count()
    };
    let before = cancels();
    let mut g = Wire::connect(&d);
    let sample = json!({"name": "ts__sample", "arguments": {}});
    let r = g.request("tools/call", with_meta(sample, json!({"sampling": {}})));
    assert_eq!(
        r["result"]["resultType"],
        "input_required",
        "{r}\n{}",
        d.log_text()
    );
    // A later request of the client's has reached the server (it logs each
    // line as it reads it), and no cancel came before it.
    let r = g.request(
        "tools/call",
        with_meta(
            json!({"name": "ts__echo", "arguments": {"text": "fence"}}),
            json!({}),
        ),
    );
    assert!(text(&r["result"]).contains("fence"), "{r}");
    assert_eq!(cancels(), before, "cancelled before the client left");
    drop(g);
    common::poll("the server to see its call cancelled", WAIT, || {
        (cancels() > before).then_some(())
    });
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn a_handshake_client_and_a_stateless_client_use_one_daemon_at_once() {
    let env = interop();
    let d = Daemon::start(&servers_config(&[
        ("ev", everything(&env)),
        ("ts", ts_entry(&[])),
    ]));
    d.wait_ready(&["ev", "ts"], READY);
    let mut h = Wire::connect(&d);
    let init = h.initialize(json!({"elicitation": {}}));
    assert_eq!(
        init["result"]["capabilities"]["logging"],
        json!({}),
        "{init}"
    );
    let mut s = Wire::connect(&d);

    // Both calls in flight at once, each waiting for its client.
    let hid = h.start(
        "tools/call",
        json!({"name": "ev__trigger-elicitation-request", "arguments": {}}),
    );
    let caps = json!({"elicitation": {}});
    let sid = s.start(
        "tools/call",
        with_meta(json!({"name": "ts__elicit", "arguments": {}}), caps.clone()),
    );
    // The handshake client gets an ordinary JSON-RPC request...
    let asked = lenient_json(&h.until("elicitation/create", |m| {
        m["method"] == "elicitation/create"
    }));
    assert_eq!(
        asked["params"]["_meta"]["dev.mcphost/server"], "ev",
        "{asked}"
    );
    // ...the stateless one the input_required result.
    let r = s.answer(sid);
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    h.send(&json!({"jsonrpc": "2.0", "id": asked["id"], "result": ada()}));
    let mut p = with_meta(json!({"name": "ts__elicit", "arguments": {}}), caps);
    let key = r["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    p["inputResponses"] = json!({key: {"action": "accept", "content": {"name": "Stateless"}}});
    p["requestState"] = r["result"]["requestState"].clone();
    let r = s.request("tools/call", p);
    assert_stateless_result(&r);
    assert!(text(&r["result"]).contains("Stateless"), "{r}");
    let r = h.answer(hid);
    assert!(text(&r["result"]).contains("Ada Lovelace"), "{r}");
    assert!(r["result"].get("resultType").is_none(), "{r}");

    // Each era's plain calls, interleaved.
    for i in 0..3 {
        let msg = format!("round {i}");
        let r = h.request(
            "tools/call",
            json!({"name": "ev__echo", "arguments": {"message": msg}}),
        );
        assert!(text(&r["result"]).contains(&msg), "{r}");
        let r = s.request(
            "tools/call",
            with_meta(
                json!({"name": "ts__echo", "arguments": {"text": msg}}),
                json!({}),
            ),
        );
        assert_stateless_result(&r);
        assert!(text(&r["result"]).contains(&msg), "{r}");
    }
    // The handshake client gets the daemon's notifications; the stateless
    // one nothing it did not ask for.
    s.nothing_else(Duration::from_millis(300), |_| false);
    let st = h.request("mcphost/status", json!({}));
    assert_eq!(st["result"]["clients"], 2, "{st}");
}

#[test]
fn subscriptions_listen_is_acknowledged_then_gets_list_changes_tagged_with_its_id() {
    // The test server adds a tool, a resource and a prompt every 700 ms.
    let d = ts_daemon(
        "handshake",
        &[
            "--list-changed-after-ms",
            "700",
            "--list-changed-count",
            "20",
        ],
        "",
    );
    let mut w = Wire::connect(&d);
    w.send(
        &json!({"jsonrpc": "2.0", "id": "tools-stream", "method": "subscriptions/listen",
        "params": {"_meta": meta(json!({})), "notifications": {"toolsListChanged": true}}}),
    );
    let ack = lenient_json(&w.next_line("the acknowledgement"));
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUB_ID], "tools-stream", "{ack}");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    w.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
        "params": {"_meta": meta(json!({})), "notifications": {"promptsListChanged": true, "resourceSubscriptions": ["test://static/1"]}}}));
    let ack = lenient_json(&w.until("the second acknowledgement", |m| {
        m["method"] == "notifications/subscriptions/acknowledged"
            && m["params"]["_meta"][SUB_ID] == 7
    }));
    assert_eq!(
        ack["params"]["notifications"],
        json!({"promptsListChanged": true, "resourceSubscriptions": ["test://static/1"]}),
        "{ack}"
    );
    // (The test server confirms a subscription with one update, which may
    // come before the acknowledgement and is then not the stream's: the
    // checks below allow it, tagged, and do not wait for it.)

    let n = lenient_json(&w.until("a tools list_changed", |m| {
        m["method"] == "notifications/tools/list_changed"
    }));
    assert_eq!(n["params"]["_meta"][SUB_ID], "tools-stream", "{n}");
    let n = lenient_json(&w.until("a prompts list_changed", |m| {
        m["method"] == "notifications/prompts/list_changed"
    }));
    assert_eq!(n["params"]["_meta"][SUB_ID], 7, "{n}");
    // Each stream gets only what it asked for; resources/list_changed
    // nobody asked for.
    let r = w.request("tools/list", json!({"_meta": meta(json!({}))}));
    assert!(
        r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"].as_str().unwrap().starts_with("ts__dynamic")),
        "{r}"
    );
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(l) = w.lines.recv_timeout(Duration::from_millis(100)) {
            seen.push(lenient_json(&l));
        }
    }
    seen.extend(w.held.drain(..).map(|l| lenient_json(&l)));
    for m in &seen {
        match m["method"].as_str() {
            Some("notifications/tools/list_changed") => {
                assert_eq!(m["params"]["_meta"][SUB_ID], "tools-stream", "{m}")
            }
            Some("notifications/prompts/list_changed") => {
                assert_eq!(m["params"]["_meta"][SUB_ID], 7, "{m}")
            }
            Some("notifications/resources/updated") => {
                assert_eq!(m["params"]["_meta"][SUB_ID], 7, "{m}");
                assert_eq!(m["params"]["uri"], "test://static/1", "{m}");
            }
            _ => panic!("not asked for: {m}"),
        }
    }
    // Cancelled: that stream goes quiet, the other goes on.
    w.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "tools-stream"}}));
    // Ended at the daemon (its debug log says so), then watched for 3 s.
    common::wait::daemon_log(&d, "listen stream ended", 1, WAIT);
    let mut prompts = 0;
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        if let Ok(l) = w.lines.recv_timeout(Duration::from_millis(100)) {
            let m = lenient_json(&l);
            assert_ne!(
                m["method"], "notifications/tools/list_changed",
                "after the cancel: {m}"
            );
            prompts += 1;
        }
    }
    assert!(prompts > 0, "the prompts stream stopped too");
}

#[test]
fn a_raw_stateless_client_works_through_the_bridge() {
    let d = ts_daemon("handshake", &[], "");
    let mut b = Wire::bridge(&d);
    let r = b.request("server/discover", json!({"_meta": meta(json!({}))}));
    assert_eq!(
        r["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{r}"
    );
    let r = b.request(
        "tools/call",
        with_meta(
            json!({"name": "ts__echo", "arguments": {"text": "over the bridge"}}),
            json!({}),
        ),
    );
    assert_stateless_result(&r);
    assert!(text(&r["result"]).contains("over the bridge"), "{r}");
    let r = one_round(
        &d,
        &mut b,
        "ts__elicit",
        json!({"elicitation": {}}),
        "elicitation/create",
        json!({"action": "accept", "content": {"name": "Bridged"}}),
    );
    assert!(text(&r["result"]).contains("Bridged"), "{r}");
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn the_python_sdk_client_goes_stateless_through_the_bridge_and_answers_its_rounds() {
    let env = interop();
    let d = Daemon::start(&servers_config(&[
        ("ev", everything(&env)),
        (
            "ts",
            ts_entry(&[
                "--list-changed-after-ms",
                "500",
                "--list-changed-count",
                "40",
            ]),
        ),
    ]));
    d.wait_ready(&["ev", "ts"], READY);
    let out = Command::new(&env.python)
        .arg(env.dir.join("stateless_client.py"))
        .args([MCPHOST, d.socket.to_str().unwrap()])
        .env("HOME", &d.home)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "stateless_client.py failed:\n{stderr}\n{stdout}\ndaemon:\n{}",
        d.log_text()
    );
    let report: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    eprintln!("{report:#}");
    assert_eq!(report["protocolVersion"], "2026-07-28", "{report}");
    assert_eq!(report["serverName"], "mcphost", "{report}");
    assert!(
        report["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "ev__echo"),
        "{report}"
    );
    assert!(
        report["echo"].as_str().unwrap().contains("from python"),
        "{report}"
    );
    assert_eq!(report["elicited"], 1, "{report}");
    assert!(
        report["elicitation"]
            .as_str()
            .unwrap()
            .contains("- Name: Python Client"),
        "{report}"
    );
    assert!(
        report["sampling"]
            .as_str()
            .unwrap()
            .contains("sampled by python"),
        "{report}"
    );
    assert_eq!(report["listChanged"], true, "{report}");
}
