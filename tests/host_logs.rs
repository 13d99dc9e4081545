//! Several hosts on one daemon, each a raw JSON-RPC client on the socket:
//! errors name a host by its `clientInfo.name`; a server's own JSON-RPC
//! error reaches the caller as it came.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::{Daemon, js, ts_entry};
use serde_json::{Value, json};

/// Cold starts on a busy 2-core machine.
const READY: Duration = Duration::from_secs(40);
/// The longest any one message may take to come.
const LINE: Duration = Duration::from_secs(30);

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
    // The stateless server's own refusal: this host declared no sampling.
    let (r, _) = h.request(
        "tools/call",
        json!({"name": "tsm__sample", "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32021, "{r}");
    assert_eq!(
        r["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}}),
        "{r}"
    );
}
