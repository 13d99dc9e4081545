//! The audit log (issue 24, part 3), through the real daemon, its socket
//! and the CLI: one line per routed call and per server→host request,
//! naming the host session that caused it; arguments hashed, in clear only
//! with `"audit": "full"`; off with `false`; rotated by size and read back
//! across the rotated files by `mcphost audit` and `mcphost/audit/query`.

use crate::common;
use crate::common::wire::Wire;

use std::path::PathBuf;
use std::time::Duration;

use common::{Daemon, poll, servers_config, ts_entry};
use serde_json::{Value, json};
use sha2::Digest;

/// Cold starts on a busy 2-core machine.
const READY: Duration = Duration::from_secs(40);
/// The writer thread is asynchronous: how long a line may take to land.
const LANDS: Duration = Duration::from_secs(20);

/// `servers_config` with top-level `extra` members (`"audit": …`).
fn config(servers: &[(&str, String)], extra: &str) -> String {
    let text = servers_config(servers);
    match extra {
        "" => text,
        extra => text.replacen('{', &format!("{{\n  {extra},"), 1),
    }
}

fn daemon(servers: &[(&str, String)], extra: &str) -> Daemon {
    let d = Daemon::start(&config(servers, extra));
    let names: Vec<&str> = servers.iter().map(|(n, _)| *n).collect();
    d.wait_ready(&names, READY);
    d
}

fn ts() -> (&'static str, String) {
    ("ts", ts_entry(&["--scripted-tools"]))
}

/// The daemon's state directory under the sandbox's HOME.
fn state_dir(d: &Daemon) -> PathBuf {
    d.home.join(".local/state/mcphost")
}

fn log_file(d: &Daemon) -> PathBuf {
    state_dir(d).join("audit.jsonl")
}

/// A socket host introducing itself as `name` `version`.
fn host(d: &Daemon, name: &str, version: &str, caps: Value) -> Wire {
    let mut w = Wire::connect(d);
    let r = w.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": caps,
               "clientInfo": {"name": name, "version": version}}),
    );
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    w.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    w
}

/// Calls `tool` with `args`; the whole answer.
fn call(w: &mut Wire, tool: &str, args: Value) -> Value {
    w.request("tools/call", json!({"name": tool, "arguments": args}))
}

/// `mcphost --json audit ARGS` once at least `n` lines are in the log.
fn audit_lines(d: &Daemon, args: &[&str], n: usize) -> Vec<Value> {
    let mut a = vec!["audit"];
    a.extend_from_slice(args);
    poll(&format!("{n} audit lines for {a:?}"), LANDS, || {
        let found = d.json(&a);
        let lines = found["lines"].as_array().cloned().unwrap_or_default();
        (lines.len() >= n).then_some(lines)
    })
}

fn calls(lines: &[Value]) -> Vec<&Value> {
    lines.iter().filter(|l| l["kind"] == "call").collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn each_call_is_one_audit_line_naming_the_host_session_that_made_it() {
    let d = daemon(&[ts()], "");
    let mut a = host(&d, "app-a", "1.2", json!({}));
    let mut b = host(&d, "app-b", "7", json!({}));
    for (w, text) in [(&mut a, "from a"), (&mut b, "from b")] {
        let r = call(w, "ts__echo", json!({"text": text}));
        assert!(r.get("result").is_some(), "{r}");
    }
    let lines = audit_lines(&d, &[], 2);
    let lines = calls(&lines);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let mut sessions = Vec::new();
    for (line, (name, version)) in lines.iter().zip([("app-a", "1.2"), ("app-b", "7")]) {
        assert_eq!(line["host"]["name"], name, "{line}");
        assert_eq!(line["host"]["version"], version, "{line}");
        assert_eq!(line["method"], "tools/call");
        assert_eq!(line["server"], "ts");
        assert_eq!(line["name"], "ts__echo");
        assert_eq!(line["serverName"], "echo");
        assert_eq!(line["outcome"], "ok");
        assert!(line["ms"].as_f64().is_some(), "{line}");
        sessions.push(line["host"]["session"].as_u64().expect("a session id"));
    }
    assert_ne!(sessions[0], sessions[1], "two hosts, two sessions");
}

#[test]
fn outcomes_are_ok_is_error_error_with_its_code_and_an_unknown_tool_is_an_error() {
    let d = daemon(&[ts()], "");
    let mut w = host(&d, "app", "1", json!({}));
    call(&mut w, "ts__echo", json!({"text": "x"}));
    call(&mut w, "ts__fail", json!({}));
    let r = call(
        &mut w,
        "ts__error",
        json!({"code": -32050, "message": "nope"}),
    );
    assert_eq!(r["error"]["code"], -32050, "{r}");
    let r = call(&mut w, "ts__nothing", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let lines = audit_lines(&d, &[], 4);
    let got: Vec<(String, Value, Value)> = calls(&lines)
        .iter()
        .map(|l| {
            (
                l["outcome"].as_str().unwrap_or_default().to_owned(),
                l["code"].clone(),
                l["server"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ok".to_owned(), Value::Null, json!("ts")),
            ("isError".to_owned(), Value::Null, json!("ts")),
            ("error".to_owned(), json!(-32050), json!("ts")),
            // No server took it: the catalog has no such tool.
            ("error".to_owned(), json!(-32602), Value::Null),
        ]
    );
}

#[test]
fn arguments_are_hashed_never_in_clear_until_a_reload_makes_the_log_full() {
    let d = daemon(&[ts()], "");
    let mut w = host(&d, "app", "1", json!({}));
    let secret = "correct-horse-battery-staple";
    let args = json!({"text": secret});
    call(&mut w, "ts__echo", args.clone());
    let lines = audit_lines(&d, &[], 1);
    let sent = serde_json::to_string(&args).unwrap();
    assert_eq!(lines[0]["args"]["bytes"], sent.len());
    assert_eq!(lines[0]["args"]["sha256"], sha256_hex(sent.as_bytes()));
    let file = std::fs::read_to_string(log_file(&d)).unwrap();
    assert!(!file.contains(secret), "the argument is in clear: {file}");
    // The file is the user's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(log_file(&d)), 0o600);
    assert_eq!(mode(state_dir(&d)), 0o700);

    // "full", applied by a hot reload.
    d.write_config(&config(&[ts()], r#""audit": "full""#));
    poll("the reload to make the log full", LANDS, || {
        (d.json(&["audit"])["mode"] == "full").then_some(())
    });
    call(&mut w, "ts__echo", args.clone());
    let lines = audit_lines(&d, &[], 2);
    assert_eq!(lines[1]["arguments"], args);
    assert!(lines[0].get("arguments").is_none());
}

#[test]
fn audit_false_writes_nothing() {
    let d = daemon(&[ts()], r#""audit": false"#);
    let mut w = host(&d, "app", "1", json!({}));
    let r = call(&mut w, "ts__echo", json!({"text": "x"}));
    assert!(r.get("result").is_some(), "{r}");
    let found = d.json(&["audit"]);
    assert_eq!(found["mode"], "off");
    assert_eq!(found["lines"], json!([]));
    // Off means no line is ever made: there is nothing in flight to wait for.
    assert!(!log_file(&d).exists(), "audit.jsonl was written");
}

#[test]
fn the_log_rotates_by_size_and_audit_reads_every_rotated_file_oldest_first() {
    let d = daemon(&[ts()], r#""audit": {"maxFileSize": "1KB", "keep": 50}"#);
    let mut w = host(&d, "app", "1", json!({}));
    let n = 24;
    for i in 0..n {
        call(&mut w, "ts__add", json!({"a": i, "b": 0}));
    }
    let lines = audit_lines(&d, &[], n);
    assert_eq!(lines.len(), n);
    // In order: each line's arguments hash is the one of its call.
    for (i, l) in lines.iter().enumerate() {
        let sent = serde_json::to_string(&json!({"a": i, "b": 0})).unwrap();
        assert_eq!(l["args"]["sha256"], sha256_hex(sent.as_bytes()), "line {i}");
    }
    let rotated: Vec<_> = std::fs::read_dir(state_dir(&d))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("audit.jsonl."))
        .collect();
    assert!(
        rotated.len() >= 3,
        "expected rotated files, found {rotated:?}"
    );
    for f in &rotated {
        assert!(
            f.metadata().unwrap().len() < 2048,
            "{f:?} grew past the limit"
        );
    }
    // The table reads them all too.
    let r = d.run(&["audit", "--limit", "5"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout.lines().count(),
        6,
        "a header and 5 lines: {}",
        r.stdout
    );
    assert!(r.stdout.contains("ts__add"), "{}", r.stdout);
}

#[test]
fn server_host_since_and_limit_filter_the_lines() {
    let d = daemon(&[ts(), ("other", ts_entry(&[]))], "");
    let mut a = host(&d, "app-a", "1", json!({}));
    let mut b = host(&d, "app-b", "1", json!({}));
    call(&mut a, "ts__echo", json!({"text": "1"}));
    let first = audit_lines(&d, &[], 1);
    let after_first = first[0]["time"].as_str().unwrap().to_owned();
    call(&mut b, "other__echo", json!({"text": "2"}));
    call(&mut a, "other__echo", json!({"text": "3"}));
    audit_lines(&d, &[], 3);
    let servers = |args: &[&str]| -> Vec<(String, String)> {
        d.json(&[&["audit"], args].concat())["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["server"].as_str().unwrap().to_owned(),
                    l["host"]["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pair = |s: &str, h: &str| (s.to_owned(), h.to_owned());
    assert_eq!(
        servers(&["--server", "other"]),
        [pair("other", "app-b"), pair("other", "app-a")]
    );
    assert_eq!(
        servers(&["--host", "app-a"]),
        [pair("ts", "app-a"), pair("other", "app-a")]
    );
    assert_eq!(
        servers(&["--host", "app-a", "--server", "other"]),
        [pair("other", "app-a")]
    );
    assert_eq!(servers(&["--limit", "1"]), [pair("other", "app-a")]);
    assert_eq!(servers(&["--since", "1h"]).len(), 3);
    // Times are to the millisecond: from the first line's time on, all three;
    // a time a day later, none.
    assert_eq!(servers(&["--since", &after_first]).len(), 3);
    assert_eq!(servers(&["--since", "2999-01-01T00:00:00Z"]), []);
    let bad = d.run(&["audit", "--since", "last tuesday"]);
    assert_ne!(bad.code, 0);
    assert!(bad.stderr.contains("since"), "{}", bad.stderr);
}

#[test]
fn a_servers_elicitation_is_audited_with_the_host_whose_call_caused_it_and_its_answer() {
    let d = daemon(&[ts()], "");
    let caps = json!({"elicitation": {"form": {}}});
    let mut a = host(&d, "app-a", "1", caps.clone());
    let mut b = host(&d, "app-b", "1", caps);
    for (w, action) in [(&mut a, "accept"), (&mut b, "decline")] {
        let id = w.start("tools/call", json!({"name": "ts__elicit", "arguments": {}}));
        let line = w.until("an elicitation/create request", |m| {
            m["method"] == "elicitation/create" && m.get("id").is_some()
        });
        let req: Value = serde_json::from_str(&line).unwrap();
        let result = match action {
            "accept" => json!({"action": "accept", "content": {"name": "Ada Lovelace"}}),
            other => json!({"action": other}),
        };
        w.send(&json!({"jsonrpc": "2.0", "id": req["id"], "result": result}));
        let r = w.answer(id);
        assert!(r.get("result").is_some(), "{r}");
    }
    let lines = audit_lines(&d, &[], 4);
    let asked: Vec<(&str, &str, &str)> = lines
        .iter()
        .filter(|l| l["kind"] == "request")
        .map(|l| {
            (
                l["host"]["name"].as_str().unwrap_or("-"),
                l["answer"].as_str().unwrap_or("-"),
                l["server"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        asked,
        [("app-a", "accept", "ts"), ("app-b", "decline", "ts")]
    );
    // The answer's content is never recorded.
    let file = std::fs::read_to_string(log_file(&d)).unwrap();
    assert!(!file.contains("Ada Lovelace"), "{file}");
    // Each request line names the session of the call that caused it.
    for host_name in ["app-a", "app-b"] {
        let of = |kind: &str| {
            lines
                .iter()
                .find(|l| l["kind"] == kind && l["host"]["name"] == host_name)
                .map(|l| l["host"]["session"].clone())
        };
        assert_eq!(of("request"), of("call"), "{host_name}");
    }
}

/// The request lines of `method`, in the order they were written.
fn requests<'a>(lines: &'a [Value], method: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["kind"] == "request" && l["method"] == method)
        .collect()
}

/// `w` calls `tool`, answers the server's `method` request it is then
/// asked with `reply` (a `result` or an `error` member), and gets the
/// call's answer.
fn call_answering(w: &mut Wire, tool: &str, method: &str, reply: Value) -> Value {
    let id = w.start("tools/call", json!({"name": tool, "arguments": {}}));
    let line = w.until(&format!("a {method} request"), |m| {
        m["method"] == method && m.get("id").is_some()
    });
    let req: Value = serde_json::from_str(&line).unwrap();
    let mut answer = json!({"jsonrpc": "2.0", "id": req["id"]});
    if let (Some(a), Some(r)) = (answer.as_object_mut(), reply.as_object()) {
        a.extend(r.clone());
    }
    w.send(&answer);
    w.answer(id)
}

#[test]
fn a_servers_sampling_is_audited_with_the_host_whose_call_caused_it_ok_or_error_without_content() {
    let d = daemon(&[ts()], "");
    let caps = json!({"sampling": {}});
    let mut a = host(&d, "app-a", "1", caps.clone());
    let mut b = host(&d, "app-b", "1", caps);
    let sampled = json!({"result": {"role": "assistant", "model": "m",
        "content": {"type": "text", "text": "SAMPLED-SECRET"}}});
    let r = call_answering(&mut a, "ts__sample", "sampling/createMessage", sampled);
    assert!(r.to_string().contains("SAMPLED-SECRET"), "{r}");
    let refused = json!({"error": {"code": -1, "message": "REFUSED-SECRET"}});
    call_answering(&mut b, "ts__sample", "sampling/createMessage", refused);
    let lines = audit_lines(&d, &[], 4);
    let asked: Vec<(&str, &str, &str)> = requests(&lines, "sampling/createMessage")
        .iter()
        .map(|l| {
            (
                l["host"]["name"].as_str().unwrap_or("-"),
                l["answeredBy"].as_str().unwrap_or("-"),
                l["answer"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(asked, [("app-a", "host", "ok"), ("app-b", "host", "error")]);
    for host_name in ["app-a", "app-b"] {
        let of = |kind: &str| {
            lines
                .iter()
                .find(|l| l["kind"] == kind && l["host"]["name"] == host_name)
                .map(|l| l["host"]["session"].clone())
        };
        assert!(of("call").is_some_and(|s| s.is_u64()), "{lines:?}");
        assert_eq!(of("request"), of("call"), "{host_name}");
    }
    let file = std::fs::read_to_string(log_file(&d)).unwrap();
    assert!(!file.contains("SAMPLED-SECRET"), "{file}");
    assert!(!file.contains("REFUSED-SECRET"), "{file}");
}

#[test]
fn a_servers_roots_list_names_the_host_asked_or_the_fallback_when_none_was() {
    // The one host with roots is the roots source: it is asked.
    let d = daemon(&[ts()], "");
    let mut w = host(
        &d,
        "app-roots",
        "1",
        json!({"roots": {"listChanged": true}}),
    );
    let roots = json!({"result": {"roots": [{"uri": "file:///ROOT-SECRET"}]}});
    let r = call_answering(&mut w, "ts__roots", "roots/list", roots);
    assert!(r.to_string().contains("ROOT-SECRET"), "{r}");
    let lines = audit_lines(&d, &[], 2);
    let asked = requests(&lines, "roots/list");
    assert_eq!(asked.len(), 1, "{lines:?}");
    assert_eq!(asked[0]["host"]["name"], "app-roots", "{}", asked[0]);
    assert_eq!(asked[0]["answeredBy"], "host");
    assert_eq!(asked[0]["answer"], "ok");
    assert_eq!(asked[0]["server"], "ts");
    let file = std::fs::read_to_string(log_file(&d)).unwrap();
    assert!(!file.contains("ROOT-SECRET"), "{file}");

    // A host without roots: nobody is asked, the configured roots answer.
    let d = daemon(&[ts()], r#""roots": ["/configured"]"#);
    let mut w = host(&d, "app-plain", "1", json!({}));
    let r = call(&mut w, "ts__roots", json!({}));
    assert!(r.to_string().contains("file:///configured"), "{r}");
    let lines = audit_lines(&d, &[], 2);
    let asked = requests(&lines, "roots/list");
    assert_eq!(asked.len(), 1, "{lines:?}");
    assert_eq!(asked[0]["host"], Value::Null, "{}", asked[0]);
    assert_eq!(asked[0]["answeredBy"], "fallback");
    assert_eq!(asked[0]["answer"], "ok");
}

/// A stateless (2026-07-28) request's params: `params` with the `_meta`
/// that carries the protocol version and the client's `clientInfo`.
fn stateless(mut params: Value, name: &str, version: &str) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": name, "version": version},
    });
    params
}

#[test]
fn a_stateless_clients_calls_are_audited_with_the_client_info_of_their_meta() {
    let d = daemon(&[ts()], "");
    let mut socket = Wire::connect(&d);
    let mut bridged = Wire::bridge(&d);
    for (w, name) in [
        (&mut socket, "stateless-socket"),
        (&mut bridged, "stateless-bridged"),
    ] {
        let params = json!({"name": "ts__echo", "arguments": {"text": name}});
        let r = w.request("tools/call", stateless(params, name, "2026.7"));
        assert_eq!(r["result"]["resultType"], "complete", "{r}");
    }
    let lines = audit_lines(&d, &[], 2);
    let named: Vec<(&str, &str)> = calls(&lines)
        .iter()
        .map(|l| {
            (
                l["host"]["name"].as_str().unwrap_or("-"),
                l["host"]["version"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            ("stateless-socket", "2026.7"),
            ("stateless-bridged", "2026.7")
        ]
    );
    let only = d.json(&["audit", "--host", "stateless-bridged"]);
    assert_eq!(only["lines"].as_array().map(Vec::len), Some(1), "{only}");
}

#[test]
fn the_socket_answers_mcphost_audit_query_with_filters() {
    let d = daemon(&[ts()], "");
    let mut w = host(&d, "app", "1", json!({}));
    call(&mut w, "ts__echo", json!({"text": "x"}));
    call(&mut w, "ts__fail", json!({}));
    audit_lines(&d, &[], 2);
    let r = w.request("mcphost/audit/query", json!({"server": "ts", "limit": 1}));
    let lines = r["result"]["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{r}");
    assert_eq!(lines[0]["outcome"], "isError");
    assert_eq!(r["result"]["skipped"], 0);
    assert_eq!(
        r["result"]["file"].as_str().map(PathBuf::from),
        Some(log_file(&d))
    );
    let bad = w.request("mcphost/audit/query", json!({"since": "soonish"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[test]
#[ignore = "interop: needs mcp-server-time (scripts/setup-interop.sh)"]
fn a_call_of_a_real_server_nobody_here_wrote_is_audited() {
    let interop = common::interop();
    let d = daemon(&[("time", interop.time_entry())], "");
    let mut w = host(&d, "real-app", "3", json!({}));
    let r = call(
        &mut w,
        "time__get_current_time",
        json!({"timezone": "Europe/Paris"}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let lines = audit_lines(&d, &["--server", "time"], 1);
    assert_eq!(lines[0]["serverName"], "get_current_time");
    assert_eq!(lines[0]["host"]["name"], "real-app");
    assert_eq!(lines[0]["outcome"], "ok");
    let file = std::fs::read_to_string(log_file(&d)).unwrap();
    assert!(!file.contains("Europe/Paris"), "{file}");
}

#[test]
fn a_call_the_host_cancels_and_one_that_times_out_are_recorded_as_such() {
    let slow_ts = format!(r#"{}, "timeouts": {{ "request": "300ms" }}"#, ts_entry(&[]));
    let d = daemon(&[ts(), ("late", slow_ts)], "");
    let mut w = host(&d, "app", "1", json!({}));
    // In flight once its first progress arrives; then cancelled.
    let id = w.start(
        "tools/call",
        json!({"name": "ts__slow", "arguments": {"ms": 20000}, "_meta": {"progressToken": "p"}}),
    );
    w.notification("notifications/progress", |m| {
        m["params"]["progressToken"] == "p"
    });
    w.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": id, "reason": "the user stopped it"}}),
    );
    let cancelled = audit_lines(&d, &["--server", "ts"], 1);
    assert_eq!(cancelled[0]["outcome"], "cancelled", "{cancelled:?}");
    // The server's own request timeout (300 ms) runs out.
    let r = call(&mut w, "late__slow", json!({"ms": 20000}));
    assert!(r.get("error").is_some(), "{r}");
    let timed_out = audit_lines(&d, &["--server", "late"], 1);
    assert_eq!(timed_out[0]["outcome"], "timeout", "{timed_out:?}");
}

#[test]
fn direct_mode_audits_its_calls_in_the_same_file_and_reads_it_back() {
    let sb = common::Sandbox::new();
    let spec = format!("{} --tools 0", common::TESTSERVER);
    let r = sb.run(&["--direct", &spec, "call", "echo", r#"{"text":"direct"}"#]);
    assert_eq!(r.code, 0, "{r:?}");
    let found = sb.json(&["--direct", &spec, "audit"]);
    let lines = found["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{found}");
    assert_eq!(lines[0]["host"]["name"], "cli");
    assert_eq!(lines[0]["serverName"], "echo");
    assert_eq!(
        found["file"].as_str().map(PathBuf::from),
        Some(sb.home.join(".local/state/mcphost/audit.jsonl"))
    );
}

#[test]
fn audit_reads_the_file_itself_when_no_daemon_runs() {
    let mut d = daemon(&[ts()], "");
    let mut w = host(&d, "app", "1", json!({}));
    call(&mut w, "ts__echo", json!({"text": "x"}));
    audit_lines(&d, &[], 1);
    drop(w);
    d.terminate(Duration::from_secs(20))
        .expect("the daemon stopped");
    // No daemon now (and the sandbox never starts one).
    let found = d.json(&["audit", "--host", "app"]);
    let lines = found["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{found}");
    assert_eq!(lines[0]["name"], "ts__echo");
    assert_eq!(
        found["file"].as_str().map(PathBuf::from),
        Some(log_file(&d))
    );
}

#[test]
fn a_log_that_cannot_be_written_is_said_once_naming_the_file_and_never_fails_a_call() {
    let mut sb = common::Sandbox::new();
    // The state directory is a file: no audit.jsonl can be made in it.
    let blocked = sb.dir.path().join("state-is-a-file");
    std::fs::write(&blocked, "").unwrap();
    sb.env
        .push(("MCPHOST_STATE_DIR".into(), blocked.display().to_string()));
    let mut d = Daemon::start_in(sb, &config(&[ts()], ""));
    d.wait_ready(&["ts"], READY);
    let mut w = host(&d, "app", "1", json!({}));
    let said = "the audit log could not be written";
    let r = call(&mut w, "ts__echo", json!({"text": "one"}));
    assert!(r.get("result").is_some(), "a call failed: {r}");
    // The first failed write is said...
    poll("the write error in the daemon's log", LANDS, || {
        d.log_text().contains(said).then_some(())
    });
    // ...and the lines of later batches fail again, silently.
    for text in ["two", "three"] {
        let r = call(&mut w, "ts__echo", json!({"text": text}));
        assert!(r.get("result").is_some(), "a call failed: {r}");
    }
    drop(w);
    // A clean stop writes out (here: tries) every queued line first.
    d.terminate(Duration::from_secs(20))
        .expect("the daemon stopped");
    let log = d.log_text();
    let said: Vec<&str> = log.lines().filter(|l| l.contains(said)).collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(
        said[0].contains("state-is-a-file/audit.jsonl"),
        "{}",
        said[0]
    );
}
