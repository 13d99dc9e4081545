//! Several hosts on one daemon, each a raw JSON-RPC client on the socket:
//! a server's log messages reach only the hosts they belong to, at each
//! host's own level; one host's `logging/setLevel` does not change what
//! another gets; errors name a host by its `clientInfo.name`; a server's
//! own JSON-RPC error reaches the caller as it came.
//!
//! Absence is shown with a later marker that is known to come after: a log
//! the same server sends later, which the host does get (one server's logs
//! reach a host in the order the server sent them).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{Daemon, js, ts_entry};
use serde_json::{Value, json};

/// Cold starts on a busy 2-core machine.
const READY: Duration = Duration::from_secs(40);
/// The longest any one message may take to come.
const LINE: Duration = Duration::from_secs(30);
const META: &str = "dev.mcphost/server";

/// A daemon with these servers (name, test-server args).
fn daemon(servers: &[(&str, &[&str])], extra: &str) -> Daemon {
    let entries: Vec<String> = servers
        .iter()
        .map(|(name, args)| format!("{}: {{ {} }}", js(name), ts_entry(args)))
        .collect();
    let d = Daemon::start(&format!(
        r#"{{ "loginShellPath": false, {extra} "mcpServers": {{ {} }} }}"#,
        entries.join(", ")
    ));
    let names: Vec<&str> = servers.iter().map(|(n, _)| *n).collect();
    d.wait_ready(&names, READY);
    d
}

/// One host: a raw JSON-RPC client on the daemon's socket.
struct Host {
    label: String,
    w: UnixStream,
    r: BufReader<UnixStream>,
    next: u64,
    /// Every message it received, in order.
    inbox: Vec<Value>,
}

impl Host {
    /// Connects, sending nothing yet.
    fn raw(d: &Daemon, label: &str) -> Host {
        let w = UnixStream::connect(&d.socket).unwrap();
        w.set_read_timeout(Some(LINE)).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Host {
            label: label.to_owned(),
            w,
            r,
            next: 0,
            inbox: Vec::new(),
        }
    }

    /// Connects and runs the handshake with this `clientInfo` (or none)
    /// and these capabilities.
    fn connect(d: &Daemon, label: &str, info: Option<Value>, caps: Value) -> Host {
        let mut h = Host::raw(d, label);
        let mut params = json!({"protocolVersion": "2025-11-25", "capabilities": caps});
        if let Some(info) = info {
            params["clientInfo"] = info;
        }
        let (r, _) = h.request("initialize", params);
        assert!(r.get("result").is_some(), "{label}: initialize: {r}");
        h.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        h
    }

    fn named(d: &Daemon, name: &str) -> Host {
        Host::connect(
            d,
            name,
            Some(json!({"name": name, "version": "1"})),
            json!({}),
        )
    }

    fn send(&mut self, v: &Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.w.write_all(line.as_bytes()).unwrap();
    }

    /// The next message; fails the test if none comes within [`LINE`].
    fn recv(&mut self) -> Value {
        let mut line = String::new();
        match self.r.read_line(&mut line) {
            Ok(0) => panic!("{}: the daemon closed the connection", self.label),
            Ok(_) => {}
            Err(e) => panic!(
                "{}: nothing came within {LINE:?} ({e}); so far: {:#?}",
                self.label, self.inbox
            ),
        }
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {line}", self.label));
        self.inbox.push(v.clone());
        v
    }

    /// Sends a request; its response and everything that came before it.
    fn request(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut before = Vec::new();
        loop {
            let m = self.recv();
            if m["id"] == id && m.get("method").is_none() {
                return (m, before);
            }
            before.push(m);
        }
    }

    /// A tool call that must succeed: its result, and what came before it.
    fn call(&mut self, tool: &str, args: Value) -> (Value, Vec<Value>) {
        let (r, before) = self.request("tools/call", json!({"name": tool, "arguments": args}));
        assert!(
            r.get("result").is_some() && r["result"]["isError"] != true,
            "{}: {tool}: {r}",
            self.label
        );
        (r["result"].clone(), before)
    }

    /// `logging/setLevel`, for one server or (`None`) every server.
    fn set_level(&mut self, level: &str, server: Option<&str>) {
        let mut p = json!({"level": level});
        if let Some(s) = server {
            p["_meta"] = json!({META: s});
        }
        let (r, _) = self.request("logging/setLevel", p);
        assert_eq!(r["result"], json!({}), "{}: setLevel: {r}", self.label);
    }

    /// Reads until a log message from `server` with this data has come
    /// (it may have already).
    fn until_log(&mut self, server: &str, data: &str) {
        let seen = |msgs: &[Value]| logs(msgs).iter().any(|(s, _, d)| s == server && d == data);
        while !seen(&self.inbox) {
            self.recv();
        }
    }

    /// Every log message it got so far: (server, level, data).
    fn logs(&self) -> Vec<(String, String, String)> {
        logs(&self.inbox)
    }
}

/// The log messages among `msgs`: (server, level, data).
fn logs(msgs: &[Value]) -> Vec<(String, String, String)> {
    msgs.iter()
        .filter(|m| m["method"] == "notifications/message")
        .map(|m| {
            let p = &m["params"];
            (
                p["_meta"][META].as_str().unwrap_or("?").to_owned(),
                p["level"].as_str().unwrap_or("?").to_owned(),
                p["data"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect()
}

fn log(server: &str, level: &str, data: &str) -> (String, String, String) {
    (server.to_owned(), level.to_owned(), data.to_owned())
}

/// The `log` tool's answer: `{serverLevel, sent}`.
fn answer(result: &Value) -> Value {
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

#[test]
fn a_servers_logs_reach_only_the_host_whose_call_it_was_or_that_asked_for_them() {
    let d = daemon(
        &[
            ("ts", &["--scripted-tools"]),
            ("ts2", &["--scripted-tools"]),
        ],
        "",
    );
    let mut a = Host::named(&d, "alpha");
    let mut b = Host::named(&d, "beta");
    let mut c = Host::named(&d, "gamma");

    // A log during A's call is A's, and only A's.
    a.call("ts__log", json!({"message": "a-1"}));
    a.until_log("ts", "a-1");
    assert_eq!(a.logs(), [log("ts", "info", "a-1")], "A's own call");
    // B's call's log comes after A's from the same server: had A's reached
    // B, it would have come first.
    b.call("ts__log", json!({"message": "b-1"}));
    b.until_log("ts", "b-1");
    assert_eq!(b.logs(), [log("ts", "info", "b-1")], "B got A's log");

    // C asks for ts's logs at debug: from now on it gets all of them.
    c.set_level("debug", Some("ts"));
    let (r, _) = a.call(
        "ts__log",
        json!({"levels": ["debug", "info"], "message": "a-2"}),
    );
    assert_eq!(
        answer(&r)["serverLevel"],
        "debug",
        "ts was set to C's level"
    );
    // A set no level: its calls get info and up.
    a.until_log("ts", "a-2");
    b.call("ts__log", json!({"message": "b-2"}));
    b.until_log("ts", "b-2");
    c.call("ts__log", json!({"message": "c-1"}));
    c.until_log("ts", "c-1");
    assert_eq!(
        a.logs(),
        [log("ts", "info", "a-1"), log("ts", "info", "a-2")],
        "A at info"
    );
    assert_eq!(
        b.logs(),
        [log("ts", "info", "b-1"), log("ts", "info", "b-2")],
        "B got A's or C's"
    );
    assert_eq!(
        c.logs(),
        [
            log("ts", "debug", "log level set to debug"),
            log("ts", "debug", "a-2"),
            log("ts", "info", "a-2"),
            log("ts", "info", "b-2"),
            log("ts", "info", "c-1"),
        ],
        "C's subscription to ts"
    );

    // C asked for ts only: ts2's logs of A's call are not C's.
    a.call("ts2__log", json!({"message": "a-ts2"}));
    a.until_log("ts2", "a-ts2");
    c.call("ts2__log", json!({"message": "c-ts2"}));
    c.until_log("ts2", "c-ts2");
    let from_ts2 = |h: &Host| -> Vec<_> {
        h.logs()
            .into_iter()
            .filter(|(s, _, _)| s == "ts2")
            .collect()
    };
    assert_eq!(from_ts2(&a), [log("ts2", "info", "a-ts2")]);
    assert_eq!(from_ts2(&c), [log("ts2", "info", "c-ts2")], "C got ts2's");
    // And A and B, between their own logs of ts, got nothing of C's.
    b.call("ts__log", json!({"message": "b-3"}));
    b.until_log("ts", "b-3");
    assert_eq!(b.logs().len(), 3, "B: {:?}", b.logs());
}

#[test]
fn one_hosts_log_level_changes_neither_what_another_gets_nor_the_server_below_its_need() {
    let d = daemon(
        &[
            ("ts", &["--scripted-tools"]),
            ("ts2", &["--scripted-tools"]),
        ],
        "",
    );
    let mut a = Host::named(&d, "alpha");
    let mut b = Host::named(&d, "beta");

    // A wants errors only, of every server. B asked nothing, so its calls
    // still get info: the servers stay at info.
    a.set_level("error", None);
    let (r, _) = b.call(
        "ts__log",
        json!({"levels": ["debug", "info", "warning"], "message": "b-1"}),
    );
    assert_eq!(
        answer(&r),
        json!({"serverLevel": "info", "sent": ["info", "warning"]}),
        "A's setLevel took B's info messages away"
    );
    b.until_log("ts", "b-1");
    // A's own call: only what is at A's level.
    a.call(
        "ts__log",
        json!({"levels": ["warning", "error"], "message": "a-1"}),
    );
    a.until_log("ts", "a-1");
    assert_eq!(a.logs(), [log("ts", "error", "a-1")], "A's level");

    // B asks for debug from ts alone: ts goes to debug, ts2 stays at info,
    // and A still gets errors only.
    b.set_level("debug", Some("ts"));
    let (r, _) = b.call("ts__log", json!({"levels": ["debug"], "message": "b-2"}));
    assert_eq!(answer(&r)["serverLevel"], "debug");
    b.until_log("ts", "b-2");
    let (r, _) = b.call(
        "ts2__log",
        json!({"levels": ["debug", "info"], "message": "b-3"}),
    );
    assert_eq!(
        answer(&r),
        json!({"serverLevel": "info", "sent": ["info"]}),
        "B's level for ts reached ts2"
    );
    b.until_log("ts2", "b-3");
    assert_eq!(
        b.logs(),
        [
            log("ts", "info", "b-1"),
            log("ts", "warning", "b-1"),
            log("ts", "debug", "log level set to debug"),
            log("ts", "debug", "b-2"),
            log("ts2", "info", "b-3"),
        ],
        "B"
    );

    // B leaves: only A is left, so both servers go back up to error, and
    // A (at error) gets their word for it.
    drop(b);
    a.until_log("ts", "log level set to error");
    a.until_log("ts2", "log level set to error");
    let (r, _) = a.call(
        "ts__log",
        json!({"levels": ["info", "error"], "message": "a-2"}),
    );
    assert_eq!(
        answer(&r),
        json!({"serverLevel": "error", "sent": ["error"]})
    );
    a.until_log("ts", "a-2");
    // A never got anything below its level, nor B's messages.
    let mut got = a.logs();
    got.sort();
    assert_eq!(
        got,
        [
            log("ts", "error", "a-1"),
            log("ts", "error", "a-2"),
            log("ts", "error", "log level set to error"),
            log("ts2", "error", "log level set to error"),
        ],
        "A"
    );
}

#[test]
fn errors_name_a_host_by_its_client_info_name_cleaned() {
    let requests = common::RequestLog::new();
    let d = daemon(
        &[("ts", &["--log-requests", &requests.arg()])],
        r#""hostTimeouts": {"elicitation": "1s"},"#,
    );
    let elicits = json!({"elicitation": {}});
    // Control and invisible characters are dropped, whitespace runs made
    // one space.
    let mut h = Host::connect(
        &d,
        "desktop",
        Some(json!({"name": "Claude\u{7} \n Desktop\u{202e}", "version": "1"})),
        elicits.clone(),
    );
    let (r, before) = h.request("tools/call", json!({"name": "ts__elicit", "arguments": {}}));
    // It was asked, and never answered.
    assert!(
        before.iter().any(|m| m["method"] == "elicitation/create"),
        "{before:?}"
    );
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("the host (Claude Desktop) did not answer elicitation/create within 1s"),
        "{r}"
    );
    let (r, _) = h.request("mcphost/host/register", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");
    let (r, _) = h.request("mcphost/status", json!({}));
    assert_eq!(r["result"]["primaryHostName"], "Claude Desktop", "{r}");
    let primary = r["result"]["primaryHost"].as_u64().unwrap();

    // A long name is cut to 64 characters; a host without a name is named
    // by the daemon.
    let mut long = Host::connect(
        &d,
        "long",
        Some(json!({"name": "x".repeat(200), "version": "1"})),
        elicits.clone(),
    );
    let (r, _) = long.request("mcphost/host/register", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");
    let (r, _) = long.request("mcphost/status", json!({}));
    let name = r["result"]["primaryHostName"].as_str().unwrap();
    assert_eq!(name, format!("{}…", "x".repeat(63)), "{r}");
    assert_ne!(r["result"]["primaryHost"].as_u64(), Some(primary));
    let mut anon = Host::connect(&d, "anonymous", None, elicits);
    let (r, _) = anon.request("mcphost/host/register", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");
    let (r, _) = anon.request("mcphost/status", json!({}));
    let name = r["result"]["primaryHostName"].as_str().unwrap();
    assert!(name.starts_with("client-"), "{r}");
    // The daemon's log keeps the session id with the name.
    let log = d.log_text();
    assert!(
        log.contains("client initialized") && log.contains("Claude Desktop"),
        "{log}"
    );

    // A stateless client names itself in each request's `_meta`. It is
    // asked with `input_required` and never retries: the server hears
    // that the host, by that name, did not answer.
    let mut stateless = Host::raw(&d, "stateless");
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "Stateless\tApp", "version": "1"},
    });
    let (r, _) = stateless.request(
        "tools/call",
        json!({"name": "ts__elicit", "arguments": {}, "_meta": meta}),
    );
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    // The second such answer the server got (the first was the desktop's).
    let told = common::poll("the stateless host's unanswered elicitation", LINE, || {
        let unanswered: Vec<Value> = requests
            .lines()
            .into_iter()
            .filter(|l| {
                l.get("method").is_none()
                    && l["error"].is_object()
                    && l.to_string().contains("did not answer")
            })
            .collect();
        unanswered.get(1).cloned()
    });
    assert_eq!(
        told["error"]["message"],
        "the host (Stateless App) did not answer elicitation/create within 1s",
        "{told}"
    );
}

#[test]
fn a_servers_own_error_reaches_the_caller_as_it_came() {
    let d = daemon(
        &[
            ("ts", &["--scripted-tools"]),
            ("tsm", &["--era", "stateless", "--scripted-tools"]),
        ],
        "",
    );
    let mut h = Host::named(&d, "caller");
    let missing = json!({
        "code": -32021,
        "message": "this needs sampling",
        "data": {"requiredCapabilities": {"sampling": {}}}
    });
    for server in ["ts", "tsm"] {
        let (r, _) = h.request(
            "tools/call",
            json!({"name": format!("{server}__error"), "arguments": missing}),
        );
        assert_eq!(r["error"], missing, "{server}: {r}");
        let odd = json!({"code": -32050, "message": "odd", "data": [1, "two"]});
        let (r, _) = h.request(
            "tools/call",
            json!({"name": format!("{server}__error"), "arguments": odd}),
        );
        assert_eq!(r["error"], odd, "{server}: {r}");
    }
    // This host declared no sampling: in either era the daemon's fallback
    // answers for it (the stateless server is told the fallback samples),
    // so the outcome does not depend on the server's era.
    for server in ["ts", "tsm"] {
        let (r, _) = h.request(
            "tools/call",
            json!({"name": format!("{server}__sample"), "arguments": {}}),
        );
        let text = r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            text.contains("User rejected") || r["error"]["code"] == -1,
            "{server}: {r}"
        );
    }
}
