//! Host callbacks through the daemon: servers' `sampling/createMessage`,
//! `elicitation/create` (form and URL) and `roots/list` reach the host whose
//! call caused them, or the registered primary host, or the daemon's
//! fallback; progress, logging, resource updates and URL-elicitation
//! completions reach the right session.
//!
//! The hosts are tests/interop/host_client.py, a client on the official
//! Python `mcp` SDK that declares sampling, elicitation and roots through
//! `ClientSession`'s callbacks and reaches the daemon through `mcphost
//! bridge`; it runs a scenario and prints a JSON report (every line it
//! received, verbatim, and every callback). The servers are the pinned
//! `@modelcontextprotocol/server-everything` and `server-filesystem` and our
//! test server (`--host-tools`). The `--direct` cases check that the
//! in-process engine answers like the daemon's fallback.
//!
//! Needs the interop install (scripts/setup-interop.sh): the tests are
//! ignored unless asked for (`--run-ignored all`), and then fail without it.

use crate::common;
use crate::common::http_server;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    Daemon, Interop, MCPHOST, RequestLog, Sandbox, TESTSERVER, interop, js, servers_config,
    text_of, ts_entry,
};
use serde_json::{Value, json};

/// Cold starts of node servers and the Python SDK on a busy 2-core machine.
const READY: Duration = Duration::from_secs(40);
/// One host run, start to report.
const RUN: Duration = Duration::from_secs(150);
/// "At once": far below any elicitation timeout, far above a slow CI's jitter.
const AT_ONCE: Duration = Duration::from_secs(5);

const META: &str = "dev.mcphost/server";

// ---------------------------------------------------------------------------
// Config

fn everything(env: &Interop) -> String {
    env.node_entry("server-everything")
}

fn filesystem(env: &Interop, dir: &Path) -> String {
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    format!(
        r#""command": {}, "args": [{}, {}]"#,
        js(&env.node),
        js(entry.to_str().unwrap()),
        js(dir.to_str().unwrap())
    )
}

/// A daemon on these servers, logging at debug level: a failed check shows
/// the broker's routing decisions (see [`Checks::done`]).
fn daemon(servers: &[(&str, String)], flags: &[&str]) -> Daemon {
    let mut f = vec!["-vv"];
    f.extend_from_slice(flags);
    Daemon::start_with_flags(&servers_config(servers), &f)
}

fn file_uri(p: &Path) -> String {
    format!("file://{}", p.display())
}

// ---------------------------------------------------------------------------
// The Python host

/// A running tests/interop/host_client.py.
struct PyHost {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    events: mpsc::Receiver<(Instant, Value)>,
    stderr: Arc<Mutex<String>>,
    stdout: Option<std::thread::JoinHandle<String>>,
}

impl PyHost {
    /// Starts a host named `name` with these options and scenario steps.
    fn start(env: &Interop, d: &Daemon, name: &str, args: &[&str], steps: Value) -> PyHost {
        let mut child = Command::new(&env.python)
            .arg(env.dir.join("host_client.py"))
            .args([MCPHOST, d.socket.to_str().unwrap(), "--name", name])
            .args(args)
            .arg("--scenario")
            .arg(steps.to_string())
            .env("HOME", &d.home)
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", env.python.display()));
        let mut out = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, events) = mpsc::channel();
        let keep = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if let Some(ev) = line.strip_prefix("HOST_EVENT ")
                    && let Ok(v) = serde_json::from_str::<Value>(ev)
                {
                    let _ = tx.send((Instant::now(), v));
                }
                let mut k = keep.lock().unwrap();
                k.push_str(&line);
                k.push('\n');
            }
        });
        PyHost {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            events,
            stderr,
            stdout: Some(stdout),
        }
    }

    /// The first event (from now on) that `f` accepts, and when it came.
    fn wait_event(&self, what: &str, limit: Duration, f: impl Fn(&Value) -> bool) -> Instant {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok((at, v)) if f(&v) => return at,
                Ok(_) => {}
                Err(e) => panic!(
                    "host {}: no {what} within {limit:?} ({e}); its stderr:\n{}",
                    self.name,
                    self.stderr.lock().unwrap()
                ),
            }
        }
    }

    fn wait_ready(&self) {
        self.wait_event("ready", READY, |v| v["event"] == "ready");
    }

    fn wait_mark(&self, name: &str) {
        self.wait_event(&format!("mark {name}"), RUN, |v| {
            v["event"] == "mark" && v["name"] == name
        });
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin already closed");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes stdin (ending `--hold`) and reads the report.
    fn finish(mut self) -> Report {
        drop(self.stdin.take());
        let deadline = Instant::now() + RUN;
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "host {} did not finish within {RUN:?}; stderr:\n{}",
                    self.name,
                    self.stderr.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = self.stdout.take().unwrap().join().unwrap();
        let stderr = self.stderr.lock().unwrap().clone();
        let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "host {} ({status}) printed no report ({e}): {stdout}\nstderr:\n{stderr}",
                self.name
            )
        });
        let r = Report {
            name: self.name.clone(),
            v,
            stderr,
        };
        assert!(
            r.v["fatal"].is_null(),
            "host {} failed: {}\n{r}",
            r.name,
            r.v["fatal"]
        );
        r
    }
}

impl Drop for PyHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one host saw.
struct Report {
    name: String,
    v: Value,
    stderr: String,
}

impl Report {
    fn step(&self, label: &str) -> &Value {
        self.v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["label"] == label)
            .unwrap_or_else(|| panic!("host {}: no step {label}\n{self}", self.name))
    }

    /// The step's result, or `None` (the error is in `self`'s display).
    fn result(&self, label: &str) -> Option<&Value> {
        let s = self.step(label);
        (s["ok"] == true).then(|| &s["result"])
    }

    /// The tool result's text, or a description of why there is none.
    fn text(&self, label: &str) -> String {
        match self.result(label) {
            Some(r) if r["content"].is_array() => text_of(r),
            Some(r) => format!("<not a tool result: {r}>"),
            None => format!("<step failed: {}>", self.step(label)["error"]),
        }
    }

    fn error(&self, label: &str) -> Value {
        self.step(label)["error"].clone()
    }

    fn callbacks(&self, method: &str) -> Vec<&Value> {
        self.v["callbacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["method"] == method)
            .collect()
    }

    fn callback_methods(&self) -> Vec<String> {
        self.v["callbacks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{} from {}",
                    c["method"].as_str().unwrap_or("?"),
                    c["params"]["_meta"][META].as_str().unwrap_or("?")
                )
            })
            .collect()
    }

    fn lines(&self) -> Vec<&str> {
        self.v["inbound"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["line"].as_str())
            .collect()
    }

    fn inbound(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn notifications(&self, method: &str) -> Vec<Value> {
        self.inbound()
            .into_iter()
            .filter(|m| m["method"] == method && m.get("id").is_none())
            .collect()
    }

    /// The raw line of the response to our request `id`.
    fn response_line(&self, id: &str) -> Option<&str> {
        self.lines().into_iter().find(|l| {
            serde_json::from_str::<Value>(l)
                .is_ok_and(|m| m["id"] == id && m.get("method").is_none())
        })
    }

    fn progress(&self, label: &str) -> Vec<(f64, Option<f64>)> {
        self.v["progress"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["label"] == label)
            .map(|p| (p["progress"].as_f64().unwrap(), p["total"].as_f64()))
            .collect()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "--- host {} ---", self.name)?;
        for s in self.v["steps"].as_array().into_iter().flatten() {
            let mut line = s.to_string();
            if line.len() > 600 {
                line.truncate(600);
                line.push('…');
            }
            writeln!(f, "step {line}")?;
        }
        writeln!(f, "callbacks: {:?}", self.callback_methods())?;
        let methods: Vec<String> = self
            .inbound()
            .iter()
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect();
        writeln!(f, "inbound methods: {methods:?}")?;
        let tail: Vec<&str> = self.stderr.lines().rev().take(15).collect();
        writeln!(f, "stderr tail:")?;
        for l in tail.into_iter().rev() {
            writeln!(f, "  {l}")?;
        }
        Ok(())
    }
}

/// Collects failed checks so one run reports all of them.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn that(&mut self, ok: bool, what: impl std::fmt::Display) {
        if !ok {
            self.0.push(what.to_string());
        }
    }

    fn eq<T: PartialEq + std::fmt::Debug>(&mut self, got: T, want: T, what: &str) {
        if got != want {
            self.0.push(format!("{what}: got {got:?}, want {want:?}"));
        }
    }

    /// Panics listing every failed check, what each host saw, and the
    /// daemon's routing log.
    fn done(self, d: &Daemon, context: &[&Report]) {
        if self.0.is_empty() {
            return;
        }
        let mut msg = format!("{} check(s) failed:\n", self.0.len());
        for c in &self.0 {
            let _ = writeln!(msg, "  - {c}");
        }
        for r in context {
            let _ = write!(msg, "{r}");
        }
        let log = d.log_text();
        let routing: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains("broker")
                    || l.contains("session")
                    || l.contains("transport closed")
                    || l.contains(" WARN ")
                    || l.contains("ERROR")
            })
            .collect();
        let _ = writeln!(msg, "--- daemon log (routing, last 60 lines) ---");
        for l in &routing[routing.len().saturating_sub(60)..] {
            let _ = writeln!(msg, "  {l}");
        }
        panic!("{msg}");
    }
}

fn server_of(params: &Value) -> Option<&str> {
    params["_meta"][META].as_str()
}

fn call(label: &str, tool: &str, args: Value) -> Value {
    json!({"do": "call", "label": label, "id": label, "tool": tool, "args": args})
}

fn request(label: &str, method: &str, params: Value) -> Value {
    json!({"do": "request", "label": label, "id": label, "method": method, "params": params})
}

/// `step`, skipped (as failed) unless step `label` succeeded: a missing
/// feature then fails fast instead of waiting out every timeout after it.
fn needs(mut step: Value, label: &str) -> Value {
    step["needs"] = json!(label);
    step
}

/// Waits (up to READY) until the daemon lists these tools; on timeout it
/// only says so, and the test's checks report what is missing.
fn wait_tools(d: &Daemon, names: &[&str]) {
    let deadline = Instant::now() + READY;
    loop {
        let r = d.run(&["--json", "tools"]);
        // The test server's `lossless` schema holds 1e400: parse leniently.
        let listed: BTreeSet<String> =
            serde_json::from_str::<Value>(&r.stdout.replace("1e400", "1e300"))
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect();
        let missing: Vec<&&str> = names.iter().filter(|n| !listed.contains(**n)).collect();
        if missing.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            eprintln!("the daemon never listed {missing:?}; going on");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the only client the daemon has is the CLI asking.
fn wait_hosts_gone(d: &Daemon) {
    common::poll("the hosts' connections to close", READY, || {
        (d.json(&["status"])["clients"] == 1).then_some(())
    });
}

fn until(label: &str, method: &str, contains: Value, timeout: u64) -> Value {
    until_n(label, method, contains, 1, timeout)
}

/// Waits until `count` received messages of `method` contain `contains`.
fn until_n(label: &str, method: &str, contains: Value, count: u64, timeout: u64) -> Value {
    json!({"do": "until", "label": label, "method": method, "contains": contains, "count": count, "timeout": timeout})
}

// ---------------------------------------------------------------------------
// Socket: each request type

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_requests_reach_the_socket_host_that_caused_them() {
    let env = interop();
    let log = RequestLog::new();
    let d = daemon(
        &[
            ("ev", everything(&env)),
            (
                "ts",
                ts_entry(&["--host-tools", "--log-requests", &log.arg()]),
            ),
        ],
        &[],
    );
    d.wait_ready(&["ev", "ts"], READY);
    // server-everything adds these once it knows the client's capabilities.
    wait_tools(
        &d,
        &[
            "ev__trigger-sampling-request",
            "ev__trigger-elicitation-request",
            "ev__trigger-url-elicitation",
        ],
    );

    // Values a lossy relay would change: a big integer, `1.10`, key order.
    let raw_params = r#"{"messages":[{"role":"user","content":{"type":"text","text":"raw bytes"}}],"maxTokens":5,"metadata":{"zeta":12345678901234567890123,"alpha":1.10,"list":[1.0,2.50]}}"#;
    let ts_error = r#"{"code":-32042,"data":{"elicitations":[{"elicitationId":"el-ts-0","message":"Open this page to authorize the request.","mode":"url","url":"https://example.com/ts"}]},"message":"This request requires more information."}"#;
    let steps = json!([
        call(
            "sample",
            "ev__trigger-sampling-request",
            json!({"prompt": "hello from the host test", "maxTokens": 33})
        ),
        call("elicit", "ev__trigger-elicitation-request", json!({})),
        call(
            "url",
            "ev__trigger-url-elicitation",
            json!({"url": "https://example.com/consent", "elicitationId": "el-ev-1", "message": "Open it"})
        ),
        call(
            "url-error",
            "ev__trigger-url-elicitation",
            json!({"url": "https://example.com/needs-auth", "errorPath": true})
        ),
        call(
            "ts-url-error",
            "ts__url_required",
            json!({"url": "https://example.com/ts", "elicitationId": "el-ts-0"})
        ),
        call(
            "raw",
            "ts__ask",
            json!({"method": "sampling/createMessage", "params": raw_params})
        ),
        call(
            "ts-url",
            "ts__url_elicit",
            json!({"url": "https://example.com/ts-consent", "elicitationId": "el-ts-1"})
        ),
        until(
            "complete-note",
            "notifications/elicitation/complete",
            json!("el-ts-1"),
            10
        ),
        call(
            "long",
            "ev__trigger-long-running-operation",
            json!({"duration": 1, "steps": 4})
        ),
        request(
            "prompt",
            "prompts/get",
            json!({"name": "ev__completable-prompt", "arguments": {"department": "Engineering", "name": "Alice"}})
        ),
        request(
            "complete",
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "ev__completable-prompt"}, "argument": {"name": "name", "value": ""}, "context": {"arguments": {"department": "Sales"}}})
        ),
    ]);
    let host = PyHost::start(
        &env,
        &d,
        "host-one",
        &[
            "--sample-text",
            "sampled by host one",
            "--elicit-answer",
            r#"{"action":"accept","content":{"name":"Ada Lovelace","check":true,"integer":7}}"#,
            "--url-elicit-answer",
            r#"{"action":"accept"}"#,
        ],
        steps,
    );
    let r = host.finish();
    let mut c = Checks::default();

    // Sampling: the server's params reach the host with the server named,
    // and the host's answer reaches the tool result.
    let sampling = r.callbacks("sampling/createMessage");
    let ev_sampling: Vec<_> = sampling
        .iter()
        .filter(|s| server_of(&s["params"]) == Some("ev"))
        .collect();
    c.eq(ev_sampling.len(), 1, "sampling requests from ev");
    if let Some(s) = ev_sampling.first() {
        let p = &s["params"];
        c.eq(
            p["messages"][0]["content"]["text"].as_str(),
            Some("Resource trigger-sampling-request context: hello from the host test"),
            "sampling message",
        );
        c.eq(p["maxTokens"].as_u64(), Some(33), "maxTokens");
        c.eq(p["temperature"].as_f64(), Some(0.7), "temperature");
        c.eq(
            p["systemPrompt"].as_str(),
            Some("You are a helpful test server."),
            "systemPrompt",
        );
    }
    let t = r.text("sample");
    c.that(
        t.contains("sampled by host one") && t.contains("host-client-model"),
        format!("the host's sampling answer is not in the result: {t}"),
    );

    // Byte for byte apart from `_meta`, and the answer under the server's id.
    let ts_sampling: Vec<_> = sampling
        .iter()
        .filter(|s| server_of(&s["params"]) == Some("ts"))
        .collect();
    c.eq(ts_sampling.len(), 1, "sampling requests from ts");
    if let Some(s) = ts_sampling.first() {
        let line = s["line"].as_str().unwrap_or_default();
        c.that(
            line.contains(
                r#""metadata":{"zeta":12345678901234567890123,"alpha":1.10,"list":[1.0,2.50]}"#,
            ),
            format!("params were not relayed byte for byte: {line}"),
        );
    }
    let answer: Value = serde_json::from_str(&r.text("raw")).unwrap_or(Value::Null);
    c.that(
        answer["id"].is_u64() && answer["result"]["content"]["text"] == "sampled by host one",
        format!(
            "ts did not get the host's answer under its own id: {}",
            r.text("raw")
        ),
    );

    // Form elicitation.
    let elicit = r.callbacks("elicitation/create");
    let form: Vec<_> = elicit
        .iter()
        .filter(|e| e["params"]["mode"] != "url")
        .collect();
    c.eq(form.len(), 1, "form elicitations");
    if let Some(e) = form.first() {
        let p = &e["params"];
        c.eq(server_of(p), Some("ev"), "form elicitation's server");
        c.eq(
            p["message"].as_str(),
            Some("Please provide inputs for the following fields:"),
            "elicitation message",
        );
        c.eq(
            p["requestedSchema"]["required"].clone(),
            json!(["name"]),
            "required",
        );
        c.eq(
            p["requestedSchema"]["properties"]["legacyTitledEnum"]["enumNames"][4].as_str(),
            Some("Reptiles"),
            "schema relayed whole",
        );
    }
    let t = r.text("elicit");
    c.that(
        t.contains("- Name: Ada Lovelace")
            && t.contains("- Agreed to terms: true")
            && t.contains("- Favorite Integer: 7"),
        format!("the host's form answer is not in the result: {t}"),
    );

    // URL elicitation, request path.
    let url: Vec<_> = elicit
        .iter()
        .filter(|e| e["params"]["mode"] == "url")
        .collect();
    c.eq(url.len(), 2, "URL elicitations (ev's and ts's)");
    let ev_url = url
        .iter()
        .find(|e| e["params"]["elicitationId"] == "el-ev-1");
    c.that(
        ev_url.is_some(),
        "ev's URL elicitation never reached the host",
    );
    if let Some(e) = ev_url {
        let p = &e["params"];
        c.eq(server_of(p), Some("ev"), "URL elicitation's server");
        c.eq(
            p["url"].as_str(),
            Some("https://example.com/consent"),
            "url",
        );
        c.eq(p["message"].as_str(), Some("Open it"), "URL message");
    }
    let t = r.text("url");
    c.that(
        t.contains("User completed the URL elicitation flow") && t.contains("el-ev-1"),
        format!("the host's URL answer is not in the result: {t}"),
    );
    c.that(
        !url.iter()
            .any(|e| e["params"]["url"] == "https://example.com/needs-auth"),
        "the error path sent an elicitation request",
    );

    // URL elicitation, error path: -32042 with its data reaches the caller.
    let e = r.error("url-error");
    c.eq(e["code"].as_i64(), Some(-32042), "ev's error path code");
    c.eq(
        e["data"]["elicitations"][0]["url"].as_str(),
        Some("https://modelcontextprotocol.io"),
        "ev's -32042 data.elicitations[0].url",
    );
    c.eq(
        e["data"]["elicitations"][0]["mode"].as_str(),
        Some("url"),
        "ev's -32042 mode",
    );
    let e = r.error("ts-url-error");
    let sent: Value = serde_json::from_str(ts_error).unwrap();
    c.eq(
        (&e["code"], &e["message"], &e["data"]),
        (&sent["code"], &sent["message"], &sent["data"]),
        "ts's -32042 error at the caller",
    );
    let line = r.response_line("ts-url-error").unwrap_or_default();
    let data =
        &ts_error[ts_error.find(r#""data":"#).unwrap()..ts_error.find(r#","message""#).unwrap()];
    c.that(
        line.contains(data),
        format!("ts's -32042 data was not relayed byte for byte: {line}"),
    );

    // URL elicitation complete: to the session that got the elicitationId.
    c.eq(
        r.text("ts-url"),
        r#"{"action":"accept"}"#.to_owned(),
        "ts's URL answer",
    );
    let done = r.notifications("notifications/elicitation/complete");
    c.eq(done.len(), 1, "elicitation/complete notifications");
    if let Some(n) = done.first() {
        c.eq(
            n["params"]["elicitationId"].as_str(),
            Some("el-ts-1"),
            "completed id",
        );
    }

    // Progress with the caller's own token.
    c.eq(
        r.progress("long"),
        (1..=4).map(|i| (f64::from(i), Some(4.0))).collect(),
        "progress of the long-running operation",
    );
    for n in r.notifications("notifications/progress") {
        c.eq(
            n["params"]["progressToken"].clone(),
            json!("long"),
            "progress token",
        );
    }
    c.that(
        r.text("long").contains("Long running operation completed"),
        format!("long: {}", r.text("long")),
    );

    // Prompts and completions, namespaced like tools.
    let p = r.result("prompt").cloned().unwrap_or(Value::Null);
    c.eq(
        p["messages"][0]["content"]["text"].as_str(),
        Some("Please promote Alice to the head of the Engineering team."),
        "prompts/get",
    );
    let comp = r.result("complete").cloned().unwrap_or(Value::Null);
    c.eq(
        comp["completion"]["values"].clone(),
        json!(["David", "Eve", "Frank"]),
        "completion/complete",
    );

    // Nothing else was asked of this host.
    let unexpected: Vec<String> = r
        .callback_methods()
        .into_iter()
        .filter(|m| !m.starts_with("sampling/") && !m.starts_with("elicitation/"))
        .filter(|m| !m.starts_with("roots/list"))
        .collect();
    c.eq(unexpected, Vec::<String>::new(), "other callbacks");
    c.done(&d, &[&r]);
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn a_primary_hosts_roots_and_logging_levels() {
    let env = interop();
    let d = daemon(
        &[
            ("ev", everything(&env)),
            ("ts", ts_entry(&[])),
            ("ts2", ts_entry(&[])),
        ],
        &[],
    );
    d.wait_ready(&["ev", "ts", "ts2"], READY);

    // ev logs the roots it got outside any call: only to hosts that asked
    // for its logs, so this one asks before it registers.
    let steps = json!([
        request("level-ev", "logging/setLevel", json!({"level": "info", "_meta": {META: "ev"}})),
        {"do": "register", "label": "register"},
        needs(until("asked", "roots/list", json!(format!(r#""{META}":"ev""#)), 20), "register"),
        needs(until("roots-logged", "notifications/message", json!("Roots updated: 2 root(s)"), 20), "asked"),
        call("roots", "ev__get-roots-list", json!({})),
        request("level-all", "logging/setLevel", json!({"level": "debug"})),
        needs(until_n("level-all-logged", "notifications/message", json!("log level set to debug"), 2, 10), "level-all"),
        request("level-one", "logging/setLevel", json!({"level": "warning", "_meta": {"dev.mcphost/server": "ts2"}})),
        needs(until("level-one-logged", "notifications/message", json!("log level set to warning"), 10), "level-one"),
        {"do": "sleep", "s": 0.5},
        call("logging-on", "ev__toggle-simulated-logging", json!({})),
        until("simulated", "notifications/message", json!(["-level message", "level-message"]), 15),
    ]);
    let host = PyHost::start(
        &env,
        &d,
        "primary",
        &[
            "--roots",
            "file:///tmp/mcphost-test-alpha=alpha",
            "--roots",
            "file:///tmp/mcphost-test-beta=beta",
        ],
        steps,
    );
    let r = host.finish();
    let mut c = Checks::default();

    c.eq(
        r.result("register").cloned(),
        Some(json!({})),
        "mcphost/host/register",
    );
    // server-everything asks after the registration's roots/list_changed,
    // with no call in flight: the primary answers.
    let roots = r.callbacks("roots/list");
    c.that(
        roots.iter().any(|x| server_of(&x["params"]) == Some("ev")),
        format!(
            "ev's roots/list never reached the primary: {:?}",
            r.callback_methods()
        ),
    );
    let t = r.text("roots");
    c.that(
        t.contains("Current MCP Roots (2 total)")
            && t.contains("1. alpha\n   URI: file:///tmp/mcphost-test-alpha")
            && t.contains("2. beta\n   URI: file:///tmp/mcphost-test-beta"),
        format!("get-roots-list does not show exactly the host's roots: {t}"),
    );

    let messages = r.notifications("notifications/message");
    let from = |server: &str, text: &str| {
        messages
            .iter()
            .filter(|m| server_of(&m["params"]) == Some(server) && m.to_string().contains(text))
            .count()
    };
    // Once, or twice if the host registered before ev's own first ask.
    c.that(
        from("ev", "Roots updated: 2 root(s)") >= 1,
        "ev's roots log, named",
    );
    c.eq(
        r.result("level-all").cloned(),
        Some(json!({})),
        "setLevel for all",
    );
    c.eq(
        from("ts", "log level set to debug"),
        1,
        "ts got the level for all",
    );
    c.eq(
        from("ts2", "log level set to debug"),
        1,
        "ts2 got the level for all",
    );
    c.eq(
        r.result("level-one").cloned(),
        Some(json!({})),
        "setLevel for one",
    );
    c.eq(
        from("ts2", "log level set to warning"),
        1,
        "ts2 got its own level",
    );
    c.eq(
        from("ts", "log level set to warning"),
        0,
        "ts got ts2's level",
    );
    c.that(
        messages.iter().all(|m| server_of(&m["params"]).is_some()),
        "a log message without its server",
    );
    c.that(
        !r.v["logs"].as_array().unwrap().is_empty(),
        "the SDK's logging callback saw nothing",
    );

    c.that(
        messages.iter().any(|m| {
            server_of(&m["params"]) == Some("ev")
                && m["params"]["data"]
                    .as_str()
                    .is_some_and(|d| d.contains("level message") || d.contains("level-message"))
        }),
        "no simulated log message from ev",
    );
    c.done(&d, &[&r]);
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_everythings_logs_reach_only_the_python_host_that_asked_for_them() {
    let env = interop();
    let d = daemon(
        &[
            ("ev", everything(&env)),
            ("ts", ts_entry(&["--scripted-tools"])),
        ],
        &[],
    );
    d.wait_ready(&["ev", "ts"], READY);

    // Beta asks for no logs and calls nothing of ev; once alpha has had
    // ev's logs, beta's own call's log (from ts) marks the end of what it
    // could have been sent before.
    let beta_steps = json!([
        {"do": "stdin", "label": "go"},
        call("own", "ts__log", json!({"message": "beta's own"})),
        needs(until("own-logged", "notifications/message", json!("beta's own"), 15), "own"),
    ]);
    let mut beta = PyHost::start(&env, &d, "beta", &[], beta_steps);
    beta.wait_ready();
    // Alpha asks for ev's logs; the first simulated one comes during its
    // call, the next 5 s later, outside any call.
    let alpha_steps = json!([
        request(
            "level",
            "logging/setLevel",
            json!({"level": "debug", "_meta": {META: "ev"}})
        ),
        needs(
            call("logging-on", "ev__toggle-simulated-logging", json!({})),
            "level"
        ),
        needs(
            until_n(
                "simulated",
                "notifications/message",
                json!(["-level message", "level-message"]),
                2,
                20
            ),
            "logging-on"
        ),
    ]);
    let ra = PyHost::start(&env, &d, "alpha", &[], alpha_steps).finish();
    beta.send_line("go");
    let rb = beta.finish();

    let mut c = Checks::default();
    c.eq(
        ra.result("level").cloned(),
        Some(json!({})),
        "alpha's setLevel",
    );
    let simulated = |r: &Report| {
        r.notifications("notifications/message")
            .into_iter()
            .filter(|m| server_of(&m["params"]) == Some("ev"))
            .count()
    };
    c.that(
        simulated(&ra) >= 2,
        format!("alpha got {} of ev's logs", simulated(&ra)),
    );
    c.that(
        rb.result("own-logged").is_some(),
        "beta never got its own call's log",
    );
    c.eq(simulated(&rb), 0, "ev's logs at beta, which asked for none");
    let others: Vec<Value> = rb
        .notifications("notifications/message")
        .into_iter()
        .filter(|m| m["params"]["data"] != "beta's own")
        .collect();
    c.eq(others, Vec::<Value>::new(), "other logs at beta");
    c.done(&d, &[&ra, &rb]);
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn resource_updates_reach_only_the_subscribed_host() {
    let env = interop();
    let d = daemon(&[("ev", everything(&env))], &[]);
    d.wait_ready(&["ev"], READY);
    let doc = "demo://resource/static/document/architecture.md";

    let bystander = PyHost::start(&env, &d, "bystander", &["--hold"], json!([]));
    bystander.wait_ready();
    let steps = json!([
        request("subscribe", "resources/subscribe", json!({"uri": doc})),
        call("updates-on", "ev__toggle-subscriber-updates", json!({})),
        needs(until("updated", "notifications/resources/updated", json!(doc), 15), "subscribe"),
        // Its next round comes 5 s later: the bystander has had time to get one.
        {"do": "sleep", "s": 0.5},
    ]);
    let r = PyHost::start(&env, &d, "subscriber", &[], steps).finish();
    let rb = bystander.finish();
    let mut c = Checks::default();
    c.eq(
        r.result("subscribe").cloned(),
        Some(json!({})),
        "resources/subscribe",
    );
    let subscribed = r
        .notifications("notifications/message")
        .into_iter()
        .filter(|m| {
            server_of(&m["params"]) == Some("ev")
                && m.to_string().contains(&format!(
                    "Received Subscribe Resource request for URI: {doc}"
                ))
        })
        .count();
    c.eq(subscribed, 1, "ev's subscribe log, named");
    let updated = r.notifications("notifications/resources/updated");
    c.that(
        !updated.is_empty() && updated.iter().all(|u| u["params"]["uri"] == doc),
        format!("resources/updated at the subscriber: {updated:?}"),
    );
    c.eq(
        rb.notifications("notifications/resources/updated").len(),
        0,
        "resources/updated at a host that did not subscribe",
    );
    c.done(&d, &[&r, &rb]);
}

// ---------------------------------------------------------------------------
// server-filesystem: exactly the host's roots

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_filesystem_serves_exactly_the_primary_hosts_roots() {
    let env = interop();
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let (dir_a, dir_b, dir_s) = (
        base.join("alpha"),
        base.join("beta"),
        base.join("server-arg"),
    );
    for dir in [&dir_a, &dir_b, &dir_s] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::write(dir_a.join("a.txt"), "alpha file").unwrap();
    std::fs::write(dir_s.join("s.txt"), "server arg file").unwrap();
    let d = daemon(&[("fs", filesystem(&env, &dir_s))], &[]);
    d.wait_ready(&["fs"], READY);

    let allowed = |text: &str| -> BTreeSet<PathBuf> {
        text.strip_prefix("Allowed directories:\n")
            .unwrap_or_else(|| panic!("not a directory list: {text}"))
            .lines()
            .map(PathBuf::from)
            .collect()
    };
    // No host yet: the fallback has no roots, so the command line's stays.
    let before = d.json(&["call", "fs__list_allowed_directories"]);
    assert_eq!(allowed(&text_of(&before)), BTreeSet::from([dir_s.clone()]));

    let a = dir_a.to_str().unwrap();
    let b = dir_b.to_str().unwrap();
    let steps = json!([
        needs(until("asked", "roots/list", json!(format!(r#""{META}":"fs""#)), 20), "register"),
        {"do": "call", "label": "list", "tool": "fs__list_allowed_directories", "args": {}, "retry_until": b, "timeout": 20, "needs": "asked"},
        call("read-in", "fs__read_text_file", json!({"path": dir_a.join("a.txt")})),
        call("read-out", "fs__read_text_file", json!({"path": dir_s.join("s.txt")})),
        {"do": "set_roots", "label": "narrow", "roots": [{"uri": file_uri(&dir_b), "name": "b"}]},
        {"do": "call", "label": "list-narrowed", "tool": "fs__list_allowed_directories", "args": {}, "retry_while": a, "timeout": 20},
        call("read-dropped", "fs__read_text_file", json!({"path": dir_a.join("a.txt")})),
    ]);
    let host = PyHost::start(
        &env,
        &d,
        "workspace",
        &[
            "--register-primary",
            "--roots",
            &format!("{}=a", file_uri(&dir_a)),
            "--roots",
            &format!("{}=b", file_uri(&dir_b)),
        ],
        steps,
    );
    let r = host.finish();
    let mut c = Checks::default();
    c.eq(r.result("register").cloned(), Some(json!({})), "register");
    let asked = r.callbacks("roots/list");
    c.that(
        asked.len() >= 2 && asked.iter().all(|x| server_of(&x["params"]) == Some("fs")),
        format!("roots/list from fs: {:?}", r.callback_methods()),
    );
    let list = r.text("list");
    c.that(
        list.starts_with("Allowed directories:\n")
            && allowed(&list) == BTreeSet::from([dir_a.clone(), dir_b.clone()]),
        format!("not exactly the host's roots: {list}"),
    );
    c.eq(
        r.text("read-in"),
        "alpha file".to_owned(),
        "a file inside a root",
    );
    let out = r.result("read-out").cloned().unwrap_or(Value::Null);
    c.that(
        out["isError"] == true
            && text_of(&out).contains("Access denied - path outside allowed directories"),
        format!("a file outside the roots was not refused: {out}"),
    );
    let narrowed = r.text("list-narrowed");
    c.that(
        narrowed.starts_with("Allowed directories:\n")
            && allowed(&narrowed) == BTreeSet::from([dir_b.clone()]),
        format!("after the host's roots/list_changed: {narrowed}"),
    );
    let dropped = r.result("read-dropped").cloned().unwrap_or(Value::Null);
    c.that(
        dropped["isError"] == true && text_of(&dropped).contains("Access denied"),
        format!("a dropped root is still readable: {dropped}"),
    );
    c.done(&d, &[&r]);
}

/// A host speaking raw JSON-RPC over `mcphost bridge`'s stdio: it declares
/// roots, answers every `roots/list` with its current ones and counts them.
struct RawHost {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<Value>,
    roots: Arc<Mutex<Vec<String>>>,
    asked: Arc<Mutex<Vec<Value>>>,
    next: u64,
}

impl RawHost {
    fn start(d: &Daemon, roots: &[&Path]) -> RawHost {
        let mut child = d
            .command()
            .arg("bridge")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let roots: Arc<Mutex<Vec<String>>> =
            Arc::new(Mutex::new(roots.iter().map(|p| file_uri(p)).collect()));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (tx, replies) = mpsc::channel();
        // Answers go through their own handle: the reader never waits on
        // the test thread.
        let mut answers = stdin_clone(&mut stdin);
        let (r, a) = (roots.clone(), asked.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let msg: Value = common::lenient_json(&line);
                if msg["method"] == "roots/list" {
                    a.lock().unwrap().push(msg["params"].clone());
                    let list: Vec<Value> = r
                        .lock()
                        .unwrap()
                        .iter()
                        .map(|u| json!({"uri": u}))
                        .collect();
                    let reply =
                        json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"roots": list}});
                    if writeln!(answers, "{reply}")
                        .and_then(|()| answers.flush())
                        .is_err()
                    {
                        break;
                    }
                } else if msg.get("id").is_some()
                    && msg.get("method").is_none()
                    && tx.send(msg).is_err()
                {
                    break;
                }
            }
        });
        let mut h = RawHost {
            child,
            stdin,
            replies,
            roots,
            asked,
            next: 1,
        };
        h.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": true}}, "clientInfo": {"name": "raw-host", "version": "0"}}),
        );
        h.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        h
    }

    fn send(&mut self, msg: &Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let reply = self
            .replies
            .recv_timeout(READY)
            .unwrap_or_else(|e| panic!("no answer to {method}: {e}"));
        assert_eq!(reply["id"], id, "{reply}");
        reply
    }

    /// What `tool` (a `list_allowed_directories`) lists now.
    fn allowed(&mut self, tool: &str) -> BTreeSet<PathBuf> {
        let r = self.request("tools/call", json!({"name": tool, "arguments": {}}));
        allowed_dirs(&text_of(&r["result"]))
    }

    /// Polls `tool` until it lists exactly `want`; panics with the last list.
    fn until_allowed(&mut self, tool: &str, want: &[&Path]) {
        let want: BTreeSet<PathBuf> = want.iter().map(|p| p.to_path_buf()).collect();
        let deadline = Instant::now() + READY;
        loop {
            let got = self.allowed(tool);
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{tool} never listed {want:?}; last {got:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn asked_by(&self, server: &str) -> usize {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|p| server_of(p) == Some(server))
            .count()
    }
}

/// A second handle on the bridge's stdin (the pipe's fd duplicated).
fn stdin_clone(stdin: &mut ChildStdin) -> std::fs::File {
    use std::os::fd::AsFd;
    std::fs::File::from(stdin.as_fd().try_clone_to_owned().unwrap())
}

impl Drop for RawHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn allowed_dirs(text: &str) -> BTreeSet<PathBuf> {
    text.strip_prefix("Allowed directories:\n")
        .unwrap_or_else(|| panic!("not a directory list: {text}"))
        .lines()
        .map(PathBuf::from)
        .collect()
}

/// Fresh directories under one canonical temp dir.
fn dirs<const N: usize>(names: [&str; N]) -> (tempfile::TempDir, [PathBuf; N]) {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let out = names.map(|n| {
        let d = base.join(n);
        std::fs::create_dir(&d).unwrap();
        d
    });
    (tmp, out)
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_filesystem_behind_the_bridge_lists_the_one_hosts_root() {
    let env = interop();
    let (_tmp, [dir_a, dir_s]) = dirs(["alpha", "server-arg"]);
    std::fs::write(dir_a.join("a.txt"), "alpha file").unwrap();
    let d = daemon(&[("fs", filesystem(&env, &dir_s))], &[]);
    d.wait_ready(&["fs"], READY);
    // fs asked for roots at its start, before any host was there.
    let a = dir_a.to_str().unwrap();
    let steps = json!([
        {"do": "call", "label": "list", "tool": "fs__list_allowed_directories", "args": {}, "retry_until": a, "timeout": 20},
        call("read", "fs__read_text_file", json!({"path": dir_a.join("a.txt")})),
        {"do": "mark", "name": "listed"},
        {"do": "hold"},
    ]);
    let host = PyHost::start(
        &env,
        &d,
        "only-host",
        &["--roots", &file_uri(&dir_a)],
        steps,
    );
    host.wait_mark("listed");
    let fs = d.server("fs").unwrap();
    let r = host.finish();
    let mut c = Checks::default();
    let list = r.text("list");
    c.that(
        list.starts_with("Allowed directories:\n")
            && allowed_dirs(&list) == BTreeSet::from([dir_a.clone()]),
        format!("fs does not list exactly the host's root: {list}"),
    );
    c.eq(
        r.text("read"),
        "alpha file".to_owned(),
        "a file in the root",
    );
    c.eq(
        fs["rootsSource"].clone(),
        json!("only-host"),
        "fs's roots source",
    );
    c.done(&d, &[&r]);
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_filesystem_with_two_hosts_of_different_roots_never_lists_the_others() {
    let env = interop();
    let (_tmp, [dir_a, dir_b, dir_b2, dir_c, dir_s]) =
        dirs(["alpha", "beta", "beta2", "configured", "server-arg"]);
    let config = servers_config(&[
        ("fs", filesystem(&env, &dir_s)),
        (
            "fsp",
            format!(r#"{}, "share": "per-session""#, filesystem(&env, &dir_s)),
        ),
    ])
    .replacen(
        r#""loginShellPath": false,"#,
        &format!(
            r#""loginShellPath": false, "roots": [{}],"#,
            js(dir_c.to_str().unwrap())
        ),
        1,
    );
    let d = Daemon::start_with_flags(&config, &["-vv"]);
    d.wait_ready(&["fs", "fsp"], READY);

    // One host: the shared server serves it, with the configured root.
    let mut a = RawHost::start(&d, &[&dir_a]);
    a.until_allowed("fs__list_allowed_directories", &[&dir_a, &dir_c]);
    assert_eq!(d.server("fs").unwrap()["rootsSource"], "only-host");

    // A second host of other roots: the shared server falls back to the
    // configured root and never gets the second host's; the per-session
    // one serves each host its own.
    let a_dir = dir_a.to_str().unwrap();
    let steps = json!([
        {"do": "call", "label": "shared", "tool": "fs__list_allowed_directories", "args": {}, "retry_while": a_dir, "timeout": 20},
        // An instance's first call may come before it took up its roots.
        {"do": "call", "label": "own", "tool": "fsp__list_allowed_directories", "args": {}, "retry_until": dir_b.to_str().unwrap(), "timeout": 20},
        {"do": "set_roots", "label": "narrow", "roots": [{"uri": file_uri(&dir_b2)}]},
        {"do": "call", "label": "own-after", "tool": "fsp__list_allowed_directories", "args": {}, "retry_until": dir_b2.to_str().unwrap(), "timeout": 20},
        call("shared-after", "fs__list_allowed_directories", json!({})),
        {"do": "mark", "name": "b-done"},
        {"do": "hold"},
    ]);
    let b = PyHost::start(&env, &d, "host-b", &["--roots", &file_uri(&dir_b)], steps);
    b.wait_mark("b-done");
    let shared_for_a = a.allowed("fs__list_allowed_directories");
    a.until_allowed("fsp__list_allowed_directories", &[&dir_a, &dir_c]);
    let fs = d.server("fs").unwrap();
    let rb = b.finish();

    let mut c = Checks::default();
    let set = |ds: &[&PathBuf]| ds.iter().map(|p| p.to_path_buf()).collect::<BTreeSet<_>>();
    let listed = |label: &str| {
        let t = rb.text(label);
        if t.starts_with("Allowed directories:\n") {
            allowed_dirs(&t)
        } else {
            BTreeSet::from([PathBuf::from(t)])
        }
    };
    c.eq(listed("shared"), set(&[&dir_c]), "fs for host B");
    c.eq(
        listed("shared-after"),
        set(&[&dir_c]),
        "fs for B after B's change",
    );
    c.eq(shared_for_a.clone(), set(&[&dir_c]), "fs for host A");
    c.eq(
        listed("own"),
        set(&[&dir_b, &dir_c]),
        "B's own fsp instance",
    );
    c.eq(
        listed("own-after"),
        set(&[&dir_b2, &dir_c]),
        "B's fsp after its change",
    );
    c.that(
        rb.callback_methods()
            .iter()
            .all(|m| m == "roots/list from fsp"),
        format!(
            "B was asked for roots by another than its instance: {:?}",
            rb.callback_methods()
        ),
    );
    c.eq(
        fs["rootsSource"].clone(),
        json!("configured"),
        "fs's roots source",
    );
    c.that(
        fs["rootsNote"]
            .as_str()
            .is_some_and(|n| n.contains("shared by 2 hosts with roots")),
        format!("fs's roots note: {fs}"),
    );
    c.eq(
        d.server("fsp").unwrap()["rootsSource"].clone(),
        json!("session"),
        "fsp's roots source",
    );
    c.done(&d, &[&rb]);

    // B is gone: A is the only host again.
    a.until_allowed("fs__list_allowed_directories", &[&dir_a, &dir_c]);
    // A's roots did not change meanwhile: fs got them from the cache.
    assert_eq!(a.asked_by("fs"), 1, "A's roots/list from fs");
    *a.roots.lock().unwrap() = vec![file_uri(&dir_b2)];
    a.send(&json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
    a.until_allowed("fs__list_allowed_directories", &[&dir_b2, &dir_c]);
}

// ---------------------------------------------------------------------------
// Several hosts at once

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn two_hosts_get_only_what_their_calls_caused_and_the_primary_the_rest() {
    let env = interop();
    let log = RequestLog::new();
    let d = daemon(
        &[
            ("ev", everything(&env)),
            (
                "ts",
                ts_entry(&["--host-tools", "--log-requests", &log.arg()]),
            ),
        ],
        &[],
    );
    d.wait_ready(&["ev", "ts"], READY);

    // Both hosts use the same request ids, so the same progress tokens.
    let go = json!({"do": "stdin", "label": "go"});
    let a_steps = json!([
        go.clone(),
        json!({"do": "call", "label": "sample", "id": "same-1", "tool": "ev__trigger-sampling-request", "args": {"prompt": "from A"}, "bg": true}),
        json!({"do": "call", "label": "long", "id": "same-2", "tool": "ev__trigger-long-running-operation", "args": {"duration": 1.5, "steps": 3}, "bg": true}),
        {"do": "wait", "for": "sample"},
        {"do": "wait", "for": "long"},
        {"do": "mark", "name": "calls-done"},
    ]);
    let b_steps = json!([
        go,
        json!({"do": "call", "label": "elicit", "id": "same-1", "tool": "ts__elicit", "args": {}, "bg": true}),
        json!({"do": "call", "label": "slow", "id": "same-2", "tool": "ts__slow", "args": {"ms": 1500}, "bg": true}),
        {"do": "wait", "for": "elicit"},
        {"do": "wait", "for": "slow"},
        call("roots", "ts__roots", json!({})),
        call("url", "ts__url_elicit", json!({"url": "https://example.com/b", "elicitationId": "el-b"})),
        until("url-done", "notifications/elicitation/complete", json!("el-b"), 10),
        {"do": "mark", "name": "calls-done"},
    ]);
    // Without roots: they are not a call's (see the server-filesystem
    // tests), and the last host with roots would be asked for them.
    let mut a = PyHost::start(
        &env,
        &d,
        "host-a",
        &[
            "--hold",
            "--no-roots",
            "--sample-text",
            "answered by A",
            "--sample-delay",
            "1",
        ],
        a_steps,
    );
    let mut b = PyHost::start(
        &env,
        &d,
        "host-b",
        &[
            "--hold",
            "--no-roots",
            "--elicit-answer",
            r#"{"action":"accept","content":{"name":"B"}}"#,
            "--elicit-delay",
            "1",
        ],
        b_steps,
    );
    a.wait_ready();
    b.wait_ready();
    a.send_line("go");
    b.send_line("go");
    a.wait_mark("calls-done");
    b.wait_mark("calls-done");

    // A third host, the only one with roots, registers as primary; then
    // requests no call caused: server-everything's roots/list after the
    // list_changed its arrival causes, and the test server's `later`
    // roots/list (answered from C's roots as cached since ev's ask).
    let c_steps = json!([
        // `later` reports in a log outside any call: the host asks for ts's.
        request(
            "level-ts",
            "logging/setLevel",
            json!({"level": "info", "_meta": {META: "ts"}})
        ),
        needs(
            until(
                "ev-asked",
                "roots/list",
                json!(format!(r#""{META}":"ev""#)),
                20
            ),
            "register"
        ),
        needs(
            call(
                "later",
                "ts__later",
                json!({"method": "roots/list", "delayMs": 300})
            ),
            "ev-asked"
        ),
        needs(
            until(
                "later-logged",
                "notifications/message",
                json!("mcphost-testserver/later"),
                20
            ),
            "later"
        ),
    ]);
    let primary = PyHost::start(
        &env,
        &d,
        "host-c",
        &["--register-primary", "--roots", "file:///tmp/host-c"],
        c_steps,
    );
    let rc = primary.finish();
    let ra = a.finish();
    let rb = b.finish();
    let mut c = Checks::default();

    // A: only ev's sampling, with its own answer.
    c.eq(
        ra.callback_methods(),
        vec!["sampling/createMessage from ev".to_owned()],
        "host A's callbacks",
    );
    let t = ra.text("sample");
    c.that(
        t.contains("answered by A"),
        format!("A's sampling result: {t}"),
    );
    c.eq(
        ra.progress("long"),
        (1..=3).map(|i| (f64::from(i), Some(3.0))).collect(),
        "A's progress",
    );
    for n in ra.notifications("notifications/progress") {
        c.that(
            n["params"]["progressToken"] == "same-2" && n["params"]["total"] == 3,
            format!("A got progress that is not its own: {n}"),
        );
    }
    c.eq(
        ra.notifications("notifications/elicitation/complete").len(),
        0,
        "elicitation/complete notifications at A",
    );

    // B: only ts's elicitation and URL elicitation. Its call's roots/list
    // is not a host's: no host with roots is connected yet, so ts gets the
    // configured roots (none).
    c.eq(
        rb.callback_methods(),
        vec![
            "elicitation/create from ts".to_owned(),
            "elicitation/create from ts".to_owned(),
        ],
        "host B's callbacks",
    );
    c.eq(
        rb.text("elicit"),
        r#"{"action":"accept","content":{"name":"B"}}"#.to_owned(),
        "B's elicitation result",
    );
    let roots: Value = serde_json::from_str(&rb.text("roots")).unwrap_or(Value::Null);
    c.eq(
        roots,
        json!({"roots": []}),
        "what ts got for B's call's roots/list",
    );
    let slow = rb.progress("slow");
    c.that(
        !slow.is_empty() && slow.iter().all(|(_, total)| *total == Some(1500.0)),
        format!("B's progress: {slow:?}"),
    );
    for n in rb.notifications("notifications/progress") {
        c.that(
            n["params"]["progressToken"] == "same-2" && n["params"]["total"] == 1500,
            format!("B got progress that is not its own: {n}"),
        );
    }
    c.eq(
        rb.notifications("notifications/elicitation/complete").len(),
        1,
        "elicitation/complete notifications at B",
    );

    // C: the requests no call caused, and nothing else.
    c.eq(rc.result("register").cloned(), Some(json!({})), "register");
    // Asked once: ts's `later` roots/list got the answer ev's ask cached.
    let c_roots = rc.callbacks("roots/list");
    c.that(
        c_roots.len() == 1 && server_of(&c_roots[0]["params"]) == Some("ev"),
        format!("the primary's callbacks: {:?}", rc.callback_methods()),
    );
    c.that(
        rc.callbacks("sampling/createMessage").is_empty()
            && rc.callbacks("elicitation/create").is_empty(),
        format!(
            "the primary got another's request: {:?}",
            rc.callback_methods()
        ),
    );
    c.that(
        rc.notifications("notifications/progress").is_empty()
            && rc
                .notifications("notifications/elicitation/complete")
                .is_empty(),
        "the primary got another's progress or completion",
    );
    // The test server got the primary's answer under its own id.
    let later = rc
        .notifications("notifications/message")
        .into_iter()
        .find(|m| m["params"]["logger"] == "mcphost-testserver/later");
    c.eq(
        later.map(|m| m["params"]["data"]["response"]["result"].clone()),
        Some(json!({"roots": [{"uri": "file:///tmp/host-c"}]})),
        "what ts got for its `later` roots/list",
    );
    c.done(&d, &[&ra, &rb, &rc]);
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn over_streamable_http_two_hosts_calling_one_server_each_get_their_own() {
    let env = interop();
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let srv = http_server::HttpServer::start("everything-http", READY, |port| {
        let mut c = Command::new(&env.node);
        c.arg(&entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string());
        c
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let d = daemon(
        &[("evh", format!(r#""url": {}"#, js(&srv.url("/mcp"))))],
        &[],
    );
    d.wait_ready(&["evh"], READY);
    wait_tools(&d, &["evh__trigger-sampling-request"]);

    // Both call the same server at once, with the same request ids: only
    // the stream each request came on tells them apart.
    let steps = |steps: u64| {
        json!([
            {"do": "stdin", "label": "go"},
            {"do": "call", "label": "sample", "id": "same-1", "tool": "evh__trigger-sampling-request", "args": {"prompt": "mine"}, "bg": true},
            {"do": "call", "label": "long", "id": "same-2", "tool": "evh__trigger-long-running-operation", "args": {"duration": 1.5, "steps": steps}, "bg": true},
            {"do": "wait", "for": "sample"},
            {"do": "wait", "for": "long"},
        ])
    };
    // Without roots: the last host with roots left would be asked for them
    // (they follow the roots source, not the calls).
    let mut a = PyHost::start(
        &env,
        &d,
        "host-a",
        &[
            "--no-roots",
            "--sample-text",
            "answered by A",
            "--sample-delay",
            "1",
        ],
        steps(3),
    );
    let mut b = PyHost::start(
        &env,
        &d,
        "host-b",
        &[
            "--no-roots",
            "--sample-text",
            "answered by B",
            "--sample-delay",
            "1",
        ],
        steps(5),
    );
    a.wait_ready();
    b.wait_ready();
    a.send_line("go");
    b.send_line("go");
    let ra = a.finish();
    let rb = b.finish();
    let mut c = Checks::default();
    for (r, me, other, total) in [(&ra, "A", "B", 3.0), (&rb, "B", "A", 5.0)] {
        c.eq(
            r.callback_methods(),
            vec!["sampling/createMessage from evh".to_owned()],
            &format!("host {me}'s callbacks"),
        );
        let t = r.text("sample");
        c.that(
            t.contains(&format!("answered by {me}"))
                && !t.contains(&format!("answered by {other}")),
            format!("host {me}'s sampling result: {t}"),
        );
        let seen = r.progress("long");
        c.eq(
            seen,
            (1..=total as u32)
                .map(|i| (f64::from(i), Some(total)))
                .collect(),
            &format!("host {me}'s progress"),
        );
    }
    c.done(&d, &[&ra, &rb]);
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn a_per_session_server_sends_each_hosts_requests_to_that_host() {
    let env = interop();
    let d = daemon(
        &[(
            "evp",
            format!(r#"{}, "share": "per-session""#, everything(&env)),
        )],
        &[],
    );
    d.wait_ready(&["evp"], READY);

    // Both call at once, with the same ids; each has an instance of its own.
    let steps = |steps: u64| {
        json!([
            {"do": "stdin", "label": "go"},
            {"do": "call", "label": "sample", "id": "same-1", "tool": "evp__trigger-sampling-request", "args": {"prompt": "mine"}, "bg": true},
            {"do": "call", "label": "long", "id": "same-2", "tool": "evp__trigger-long-running-operation", "args": {"duration": 1.5, "steps": steps}, "bg": true},
            {"do": "wait", "for": "sample"},
            {"do": "wait", "for": "long"},
            {"do": "call", "label": "roots", "id": "same-3", "tool": "evp__get-roots-list", "args": {}},
        ])
    };
    let start = |name: &str, me: &str, n: u64| {
        PyHost::start(
            &env,
            &d,
            name,
            &[
                "--sample-text",
                &format!("answered by {me}"),
                "--sample-delay",
                "1",
                "--roots",
                &format!("file:///tmp/host-{me}={me}"),
            ],
            steps(n),
        )
    };
    let mut a = start("host-a", "A", 3);
    let mut b = start("host-b", "B", 5);
    a.wait_ready();
    b.wait_ready();
    a.send_line("go");
    b.send_line("go");
    let ra = a.finish();
    let rb = b.finish();
    let mut c = Checks::default();
    for (r, me, other, total) in [(&ra, "A", "B", 3.0), (&rb, "B", "A", 5.0)] {
        let mut got = r.callback_methods();
        got.sort();
        // Its instance asks for roots after its initialize: that is this
        // host's too.
        c.eq(
            got,
            vec![
                "roots/list from evp".to_owned(),
                "sampling/createMessage from evp".to_owned(),
            ],
            &format!("host {me}'s callbacks"),
        );
        let t = r.text("sample");
        c.that(
            t.contains(&format!("answered by {me}"))
                && !t.contains(&format!("answered by {other}")),
            format!("host {me}'s sampling result: {t}"),
        );
        c.eq(
            r.progress("long"),
            (1..=total as u32)
                .map(|i| (f64::from(i), Some(total)))
                .collect(),
            &format!("host {me}'s progress"),
        );
        let t = r.text("roots");
        c.that(
            t.contains("Current MCP Roots (1 total)")
                && t.contains(&format!("1. {me}\n   URI: file:///tmp/host-{me}")),
            format!("host {me}'s instance does not have exactly its roots: {t}"),
        );
    }
    c.done(&d, &[&ra, &rb]);
}

// ---------------------------------------------------------------------------
// A host that goes away

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn a_host_that_disconnects_mid_elicitation_fails_it_at_once_and_the_daemon_serves_on() {
    let env = interop();
    let log = RequestLog::new();
    let d = daemon(
        &[
            ("ev", everything(&env)),
            (
                "ts",
                ts_entry(&["--host-tools", "--log-requests", &log.arg()]),
            ),
        ],
        &[],
    );
    d.wait_ready(&["ev", "ts"], READY);

    for (tool, server) in [
        ("ts__elicit", "ts"),
        ("ev__trigger-elicitation-request", "ev"),
    ] {
        let host = PyHost::start(
            &env,
            &d,
            "leaver",
            &["--exit-during-elicitation"],
            json!([call("elicit", tool, json!({}))]),
        );
        let gone = host.wait_event("elicitation request", READY, |v| v["event"] == "exiting");
        if server == "ts" {
            // The test server logs every line it gets: the error for its
            // elicitation/create (its own first request, id 1).
            let line = common::poll(
                "ts to get an error for its elicitation",
                Duration::from_secs(60),
                || {
                    log.lines()
                        .into_iter()
                        .find(|m| m["id"] == 1 && m.get("method").is_none())
                },
            );
            let took = gone.elapsed();
            eprintln!("ts got the error {took:?} after the host left");
            assert!(
                line.get("error").is_some(),
                "ts got an answer, not an error: {line}"
            );
            assert!(
                took < AT_ONCE,
                "the error took {took:?} after the host left"
            );
        }
        drop(host);
        // `mcphost bridge` lingers 500 ms after its stdin closes: until the
        // daemon sees the socket close, the leaver's call is still in flight
        // and the next host's would make ev's elicitation ambiguous.
        wait_hosts_gone(&d);
    }

    // The daemon serves on: the same tools work for the next host.
    let host = PyHost::start(
        &env,
        &d,
        "next",
        &[
            "--elicit-answer",
            r#"{"action":"accept","content":{"name":"Next"}}"#,
        ],
        json!([
            call("ts", "ts__elicit", json!({})),
            call("ev", "ev__trigger-elicitation-request", json!({})),
        ]),
    );
    let r = host.finish();
    let mut c = Checks::default();
    c.eq(
        r.text("ts"),
        r#"{"action":"accept","content":{"name":"Next"}}"#.to_owned(),
        "ts__elicit after the disconnect",
    );
    c.that(
        r.text("ev").contains("- Name: Next"),
        format!("ev after the disconnect: {}", r.text("ev")),
    );
    c.done(&d, &[&r]);
    let st = d.json(&["status"]);
    assert_eq!(st["ready"], 2, "{st}");
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn cancelled_and_abandoned_calls_are_cancelled_upstream_and_forgotten() {
    let env = interop();
    let log = RequestLog::new();
    let d = daemon(&[("ts", ts_entry(&["--log-requests", &log.arg()]))], &[]);
    d.wait_ready(&["ts"], READY);
    let upstream_id = |ms: u64| {
        log.lines()
            .into_iter()
            .find(|m| m["method"] == "tools/call" && m["params"]["arguments"]["ms"] == ms)
            .map(|m| m["id"].clone())
            .unwrap_or_else(|| panic!("ts never got the slow call of {ms} ms"))
    };
    let cancel_of = |id: &Value| {
        let id = id.clone();
        let log = &log;
        move || {
            log.lines().into_iter().find(|m| {
                m["method"] == "notifications/cancelled" && m["params"]["requestId"] == id
            })
        }
    };

    // The SDK abandons a call: its notifications/cancelled reaches ts for
    // ts's own id of that call, while the host is still connected.
    let canceller = PyHost::start(
        &env,
        &d,
        "canceller",
        &[],
        json!([
            {"do": "call", "label": "slow", "id": "slow", "tool": "ts__slow", "args": {"ms": 45000}, "cancel_after": 1},
            {"do": "mark", "name": "abandoned"},
            {"do": "hold", "label": "hold"},
        ]),
    );
    canceller.wait_mark("abandoned");
    let cancelled = common::poll(
        "ts to get the canceller's notifications/cancelled",
        AT_ONCE,
        cancel_of(&upstream_id(45000)),
    );
    let r = canceller.finish();
    assert_eq!(
        r.result("slow"),
        Some(&json!({"abandoned": true})),
        "{cancelled}\n{r}"
    );
    wait_hosts_gone(&d);

    // `slow` honours cancellation by never answering: only the daemon can
    // forget the call.
    let leaver = PyHost::start(
        &env,
        &d,
        "leaver",
        &[],
        json!([
            {"do": "call", "label": "slow", "id": "slow", "tool": "ts__slow", "args": {"ms": 60000}, "bg": true},
            until("started", "notifications/progress", json!("slept"), 20),
            {"do": "exit"},
        ]),
    );
    let gone = leaver.wait_event("the exit", READY, |v| v["event"] == "exiting");
    let cancelled = common::poll(
        "ts to get notifications/cancelled for the leaver's call",
        Duration::from_secs(30),
        cancel_of(&upstream_id(60000)),
    );
    let took = gone.elapsed();
    assert!(
        took < AT_ONCE,
        "the cancellation took {took:?}: {cancelled}"
    );
    drop(leaver);
    wait_hosts_gone(&d);

    // The cancelled call must not linger as "in flight": the next host's
    // call is then the only one, so ts's elicitation is its own.
    let r = PyHost::start(
        &env,
        &d,
        "next",
        &[
            "--elicit-answer",
            r#"{"action":"accept","content":{"name":"N"}}"#,
        ],
        json!([call("elicit", "ts__elicit", json!({}))]),
    )
    .finish();
    let mut c = Checks::default();
    c.eq(
        r.callback_methods(),
        vec!["elicitation/create from ts".to_owned()],
        "the next host's callbacks",
    );
    c.eq(
        r.text("elicit"),
        r#"{"action":"accept","content":{"name":"N"}}"#.to_owned(),
        "the next host's elicitation",
    );
    c.done(&d, &[&r]);
}

// ---------------------------------------------------------------------------
// No host: the fallback, and `--direct` answering alike

/// `mcphost --json call` through the daemon (no host) and `--direct` with
/// the same policies: (exit code, stdout JSON or stderr text).
fn both(
    d: &Daemon,
    direct: &str,
    policies: &[&str],
    tool: &str,
    args: &str,
) -> [(i32, Value, String); 2] {
    let r = d.run(&["--json", "call", tool, args]);
    let via_daemon = (
        r.code,
        serde_json::from_str(&r.stdout).unwrap_or(Value::Null),
        r.stderr,
    );
    let sb = Sandbox::new();
    let mut a: Vec<&str> = vec!["--json", "--direct", direct];
    a.extend_from_slice(policies);
    a.extend(["call", tool, args]);
    let r = sb.run(&a);
    let direct = (
        r.code,
        serde_json::from_str(&r.stdout).unwrap_or(Value::Null),
        r.stderr,
    );
    [via_daemon, direct]
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn without_a_host_the_fallback_answers_and_direct_mode_answers_alike() {
    let env = interop();
    let policies = ["--on-elicitation", "decline", "--on-sampling", "decline"];
    let d = daemon(
        &[
            ("ev", everything(&env)),
            ("ts", ts_entry(&["--host-tools"])),
        ],
        &policies,
    );
    d.wait_ready(&["ev", "ts"], READY);
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    // `--direct` starts only the server a case needs.
    let ev_spec = format!(
        "ev={}",
        shell_words::join([env.node.as_str(), entry.to_str().unwrap()])
    );
    let ts_spec = format!("ts={}", shell_words::join([TESTSERVER, "--host-tools"]));
    let mut c = Checks::default();
    let mut check =
        |tool: &str, args: &str, what: &str, ok: &dyn Fn(&(i32, Value, String)) -> bool| {
            let spec = if tool.starts_with("ev__") {
                &ev_spec
            } else {
                &ts_spec
            };
            for (door, got) in ["daemon", "--direct"]
                .iter()
                .zip(both(&d, spec, &policies, tool, args))
            {
                c.that(
                    ok(&got),
                    format!("{door}: {what}: {tool} {args} gave {got:?}"),
                );
            }
        };
    let result_text = |g: &(i32, Value, String)| {
        if g.1["content"].is_array() {
            text_of(&g.1)
        } else {
            String::new()
        }
    };

    check("ts__elicit", "{}", "form elicitation declined", &|g| {
        result_text(g) == r#"{"action":"decline"}"#
    });
    check(
        "ev__trigger-elicitation-request",
        "{}",
        "form elicitation declined",
        &|g| result_text(g).contains(r#""action": "decline""#),
    );
    check(
        "ts__url_elicit",
        r#"{"url":"https://example.com/x","elicitationId":"el-x"}"#,
        "URL elicitation declined",
        &|g| result_text(g) == r#"{"action":"decline"}"#,
    );
    check("ts__sample", "{}", "sampling rejected with -1", &|g| {
        let t = result_text(g);
        t.contains(r#""code":-1"#) && t.contains("User rejected sampling request")
    });
    check(
        "ev__trigger-sampling-request",
        r#"{"prompt":"x"}"#,
        "sampling rejected",
        &|g| result_text(g).contains("User rejected sampling request"),
    );
    check(
        "ts__roots",
        "{}",
        "no configured roots: an empty list",
        &|g| result_text(g) == r#"{"roots":[]}"#,
    );
    check(
        "ev__get-roots-list",
        "{}",
        "roots declared, none given",
        &|g| {
            result_text(g)
                .contains("The client supports roots but no roots are currently configured")
        },
    );
    check(
        "ts__url_required",
        r#"{"url":"https://example.com/needs","elicitationId":"el-n"}"#,
        "-32042 shows its URL",
        &|g| g.0 != 0 && g.2.contains("-32042") && g.2.contains("https://example.com/needs"),
    );
    check(
        "ev__trigger-long-running-operation",
        r#"{"duration":0.6,"steps":3}"#,
        "long-running operation",
        &|g| g.0 == 0 && result_text(g).contains("Long running operation completed"),
    );
    c.done(&d, &[]);
}

// ---------------------------------------------------------------------------
// 2026-07-28: multi round-trip requests (MRTR)

/// The Python SDK server's `interview` asks for an elicitation and a
/// sampling at once. Negotiated as 2026-07-28 it returns `input_required`
/// (MRTR); pinned to 2025-11-25 it sends the two requests. Either way the
/// socket host whose call it was answers both, with the server named, and
/// the tool's result carries its answers.
#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn mrtr_rounds_of_a_stateless_python_server_are_answered_by_the_socket_host_that_called() {
    let env = interop();
    let py = |pin: Option<&str>| {
        let mut e = format!(
            r#""command": {}, "args": [{}]"#,
            js(env.python.to_str().unwrap()),
            js(env.dir.join("py_server.py").to_str().unwrap())
        );
        if let Some(v) = pin {
            e.push_str(&format!(r#", "protocolVersion": {}"#, js(v)));
        }
        e
    };
    let d = daemon(
        &[("stateless", py(None)), ("legacy", py(Some("2025-11-25")))],
        &[],
    );
    let servers = d.wait_ready(&["stateless", "legacy"], READY);
    assert_eq!(
        servers["stateless"]["protocolVersion"], "2026-07-28",
        "{servers:?}"
    );
    assert_eq!(
        servers["legacy"]["protocolVersion"], "2025-11-25",
        "{servers:?}"
    );
    let steps = json!([
        call(
            "stateless",
            "stateless__interview",
            json!({"topic": "eras"})
        ),
        call("legacy", "legacy__interview", json!({"topic": "eras"})),
    ]);
    let host = PyHost::start(
        &env,
        &d,
        "mrtr-host",
        &[
            "--sample-text",
            "hello from the host",
            "--elicit-answer",
            r#"{"action":"accept","content":{"name":"Ada"}}"#,
        ],
        steps,
    );
    let r = host.finish();
    let mut c = Checks::default();
    for server in ["stateless", "legacy"] {
        let t = r.text(server);
        c.that(
            t.contains("name=Ada") && t.contains("greeting=hello from the host"),
            format!("{server}: the host's answers are not in the result: {t}"),
        );
        for method in ["elicitation/create", "sampling/createMessage"] {
            let n = r
                .callbacks(method)
                .iter()
                .filter(|s| server_of(&s["params"]) == Some(server))
                .count();
            c.eq(n, 1, &format!("{method} from {server}"));
        }
    }
    c.done(&d, &[&r]);
}

/// Issue 20: two Python SDK hosts through `mcphost bridge` ask a shared
/// stdio server for forms at the same time, twice, while a third (no
/// elicitation declared) calls it too. Each host answers with its own
/// name: every call gets its own host's answer or (the first time, when
/// the server has not asked before and calls of several hosts are in
/// flight) the fallback's decline, and no host is ever shown another's
/// form.
#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn python_hosts_sharing_a_stdio_server_each_see_only_their_own_forms() {
    let env = interop();
    let d = daemon(&[("ts", ts_entry(&[]))], &[]);
    d.wait_ready(&["ts"], READY);
    let steps = || {
        json!([
            {"do": "stdin", "label": "go"},
            json!({"do": "call", "label": "e1", "id": "same-1", "tool": "ts__elicit", "args": {}, "bg": true}),
            json!({"do": "call", "label": "e2", "id": "same-2", "tool": "ts__elicit", "args": {}, "bg": true}),
            {"do": "wait", "for": "e1"},
            {"do": "wait", "for": "e2"},
            call("e3", "ts__elicit", json!({})),
            {"do": "mark", "name": "calls-done"},
        ])
    };
    let answer = |name: &str| format!(r#"{{"action":"accept","content":{{"name":"{name}"}}}}"#);
    let start = |name: &str, extra: &[&str]| {
        let a = answer(name);
        let mut args = vec![
            "--hold",
            "--no-roots",
            "--elicit-answer",
            &a,
            "--elicit-delay",
            "0.3",
        ];
        args.extend_from_slice(extra);
        PyHost::start(&env, &d, name, &args, steps())
    };
    let mut hosts = [
        start("host-a", &[]),
        start("host-b", &[]),
        start("host-mute", &["--no-elicitation"]),
    ];
    for h in &hosts {
        h.wait_ready();
    }
    for h in &mut hosts {
        h.send_line("go");
    }
    for h in &hosts {
        h.wait_mark("calls-done");
    }
    let [a, b, mute] = hosts.map(PyHost::finish);
    let mut checks = Checks(Vec::new());
    for (r, me, others) in [
        (&a, "host-a", ["host-b", "host-mute"]),
        (&b, "host-b", ["host-a", "host-mute"]),
    ] {
        for label in ["e1", "e2", "e3"] {
            let t = r.text(label);
            let mine = t.contains(me) || t.contains("decline");
            checks.that(
                mine,
                format!("{me} {label}: its own answer or the fallback's: {t}"),
            );
            for o in others {
                checks.that(
                    !t.contains(o),
                    format!("{me} {label} got {o}'s answer: {t}"),
                );
            }
        }
        // By the third call the server is scheduled: it is this host's.
        let t = r.text("e3");
        checks.that(
            t.contains(me),
            format!("{me} e3 once calls take turns: {t}"),
        );
        let asked = r.callbacks("elicitation/create").len();
        checks.that(
            asked <= 3,
            format!("{me} was shown {asked} forms for its 3 calls"),
        );
    }
    for label in ["e1", "e2", "e3"] {
        let t = mute.text(label);
        checks.that(t.contains("decline"), format!("host-mute {label}: {t}"));
    }
    checks.that(
        mute.callbacks("elicitation/create").is_empty(),
        "host-mute was shown a form",
    );
    checks.done(&d, &[&a, &b, &mute]);
}
