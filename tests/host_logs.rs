//! Several hosts on one daemon, each a raw JSON-RPC client on the socket:
//! a server's own JSON-RPC error reaches the caller as it came.

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
