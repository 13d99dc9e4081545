//! Message dispatch, MCP method handlers and fault injection.

mod stateless;

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::catalog::{self, COMPLETION_NAMES, LOSSLESS_RESULT};
use crate::cli::{Cli, Era, StatelessFault};
use crate::output::{
    Out, Payload, Reply, RpcError, batch_companion, notification, render_response,
};

/// Protocol revisions this server knows (echoed back when requested).
pub const SUPPORTED_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// What the server answers when the client asks for something it does not know.
pub const LATEST_VERSION: &str = "2025-11-25";

/// The `instructions` of `initialize` and `server/discover`.
const INSTRUCTIONS: &str = "mcphost-testserver: a scriptable fault-injection MCP server for tests. \
                Tools: echo, add, fail, slow, lossless, huge, sample, elicit, roots.";

const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Tools whose calls block (sleep or wait for the client) and so run on their own thread.
const BLOCKING_TOOLS: &[&str] = &["slow", "sample", "elicit", "roots", "ask", "url_elicit"];

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
const RESOURCE_NOT_FOUND: i64 = -32002;
const URL_ELICITATION_REQUIRED: i64 = -32042;

/// A handler's answer: the response payload plus notifications to send after it.
struct Outcome {
    payload: Payload,
    follow: Vec<String>,
}

type Handled = Result<Outcome, RpcError>;

/// When a reply delayed by `--delay-ms` is due (a huge delay: never overflow).
fn delay_due(ms: u64) -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_millis(ms))
        .or_else(|| now.checked_add(Duration::from_secs(u32::MAX.into())))
        .unwrap_or(now)
}

fn ok_raw(raw: String) -> Handled {
    Ok(Outcome {
        payload: Payload::Result(raw),
        follow: Vec::new(),
    })
}

fn ok(v: Value) -> Handled {
    ok_raw(v.to_string())
}

fn text_result(text: &str, is_error: bool) -> Handled {
    ok(json!({"content": [{"type": "text", "text": text}], "isError": is_error}))
}

fn invalid_params(msg: impl Into<String>) -> RpcError {
    RpcError::new(INVALID_PARAMS, msg)
}

/// Key under which an id is stored for correlation (its compact JSON text).
fn id_key(id: &Value) -> String {
    id.to_string()
}

/// `name` == `prefix` + a zero-padded (4+) index as produced by the catalog.
fn parse_indexed(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?;
    let n: u64 = digits.parse().ok()?;
    (format!("{n:04}") == digits).then_some(n)
}

/// Parses a line `serde_json::Value` cannot represent (e.g. `1e400` inside the
/// arguments) by dropping the unrepresentable members (two levels deep).
fn lenient_parse(raw: &[u8]) -> Option<Value> {
    fn members(raw: &str) -> Option<Map<String, Value>> {
        let map: BTreeMap<String, Box<RawValue>> = serde_json::from_str(raw).ok()?;
        let mut obj = Map::new();
        for (k, v) in map {
            if let Ok(val) = serde_json::from_str::<Value>(v.get()) {
                obj.insert(k, val);
            }
        }
        Some(obj)
    }
    let top: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(raw).ok()?;
    let mut obj = Map::new();
    for (k, v) in top {
        match serde_json::from_str::<Value>(v.get()) {
            Ok(val) => {
                obj.insert(k, val);
            }
            Err(_) => {
                if let Some(inner) = members(v.get()) {
                    obj.insert(k, Value::Object(inner));
                }
            }
        }
    }
    Some(Value::Object(obj))
}

enum Delayed {
    One(Reply),
    Many(Vec<Reply>),
}

/// Where protocol output goes (stdout; a buffer in unit tests).
pub type Sink = Box<dyn Write + Send>;

/// The server: configuration, output and the bits of state requests share.
pub struct Server {
    cfg: Cli,
    out: Mutex<Out<Sink>>,
    initialized: AtomicBool,
    /// Items added at runtime by the list-changed timer.
    dynamic: AtomicU64,
    requests_seen: AtomicU64,
    /// `tools/list` requests answered so far (for --fail-tools-list).
    tools_lists: AtomicU64,
    next_out_id: AtomicU64,
    list_changed_started: AtomicBool,
    chatter_started: AtomicBool,
    stdout_broken: AtomicBool,
    /// Cancellation flags of requests running on their own threads.
    inflight: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// The server's own outstanding requests, waiting for the client's response.
    pending: Mutex<HashMap<String, mpsc::Sender<Value>>>,
    delay_tx: Option<mpsc::Sender<(Instant, Delayed)>>,
    log_file: Option<Mutex<File>>,
    /// The level the last `logging/setLevel` set (`None`: never; all go out).
    log_level: Mutex<Option<&'static str>>,
    /// Untagged list_changed / log notifications go out (a handshake client sent
    /// `notifications/initialized`).
    legacy_notify: AtomicBool,
    /// Open `subscriptions/listen` streams by request id.
    listens: Mutex<HashMap<String, stateless::Listen>>,
    /// --stateless-fault unsupported-version / header-mismatch-once already fired.
    version_refused: AtomicBool,
    mismatch_sent: AtomicBool,
    /// The exit status a unit test's server would have died with.
    #[cfg(test)]
    died: Mutex<Option<i32>>,
}

impl Server {
    pub fn new(cfg: Cli) -> io::Result<Arc<Server>> {
        Server::with_output(cfg, Box::new(io::stdout()))
    }

    /// A server writing its protocol output to `sink`.
    pub fn with_output(cfg: Cli, sink: Sink) -> io::Result<Arc<Server>> {
        let log_file = match &cfg.log_requests {
            Some(path) => Some(Mutex::new(
                OpenOptions::new().create(true).append(true).open(path)?,
            )),
            None => None,
        };
        let (delay_tx, delay_rx) = if cfg.delay_ms > 0 {
            let (tx, rx) = mpsc::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let server = Arc::new(Server {
            out: Mutex::new(Out::new(sink, cfg.garbage)),
            cfg,
            initialized: AtomicBool::new(false),
            dynamic: AtomicU64::new(0),
            requests_seen: AtomicU64::new(0),
            tools_lists: AtomicU64::new(0),
            next_out_id: AtomicU64::new(0),
            list_changed_started: AtomicBool::new(false),
            chatter_started: AtomicBool::new(false),
            stdout_broken: AtomicBool::new(false),
            inflight: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            delay_tx,
            log_file,
            log_level: Mutex::new(None),
            legacy_notify: AtomicBool::new(false),
            listens: Mutex::new(HashMap::new()),
            version_refused: AtomicBool::new(false),
            mismatch_sent: AtomicBool::new(false),
            #[cfg(test)]
            died: Mutex::new(None),
        });
        if let Some(rx) = delay_rx {
            let this = Arc::clone(&server);
            thread::Builder::new().name("delay".into()).spawn(move || {
                for (due, item) in rx {
                    let now = Instant::now();
                    if due > now {
                        thread::sleep(due - now);
                    }
                    match item {
                        Delayed::One(r) => this.send_reply(r),
                        Delayed::Many(v) => this.send_batch_replies(v),
                    }
                }
            })?;
        }
        Ok(server)
    }

    /// Startup side effects: signals, stderr lines/flood, initial garbage.
    pub fn startup(self: &Arc<Self>) {
        if self.cfg.ignore_sigterm {
            // SAFETY: installing SIG_IGN for SIGTERM has no memory-safety preconditions.
            let prev = unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            if prev == libc::SIG_ERR {
                log!("could not ignore SIGTERM: {}", io::Error::last_os_error());
            }
        }
        {
            let mut err = io::stderr().lock();
            for i in 1..=self.cfg.stderr_lines {
                let _ = writeln!(
                    err,
                    "mcphost-testserver stderr line {i} of {}",
                    self.cfg.stderr_lines
                );
            }
        }
        if self.cfg.stderr_flood {
            let spawned = thread::Builder::new()
                .name("stderr-flood".into())
                .spawn(stderr_flood);
            if let Err(e) = spawned {
                log!("could not start the stderr flood: {e}");
            }
        }
        if self.cfg.spawn_child {
            self.spawn_child();
        }
        if self.cfg.garbage {
            let r = self.out.lock().all_garbage();
            if let Err(e) = r {
                self.write_failed(&e);
            }
        }
        log!("ready (pid {})", std::process::id());
    }

    /// A process of its own under this one, in the same group, that outlives
    /// stdin EOF (and SIGTERM with --ignore-sigterm): what a server's own
    /// helper processes look like to whoever has to stop the group.
    fn spawn_child(&self) {
        let exe = match std::env::current_exe() {
            Ok(e) => e,
            Err(e) => return log!("cannot find my own executable: {e}"),
        };
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("--ignore-eof")
            .env_remove("MCPHOST_TS_SPAWN_CHILD")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        if self.cfg.ignore_sigterm {
            cmd.arg("--ignore-sigterm");
        }
        match cmd.spawn() {
            // Never waited for: it is meant to outlive us unless the group is killed.
            Ok(child) => log!("child pid {}", child.id()),
            Err(e) => log!("cannot start a child: {e}"),
        }
    }

    /// Flushes stdout (used before exiting).
    pub fn flush(&self) {
        let _ = self.out.lock().flush();
    }

    // ------------------------------------------------------------------ input

    /// Handles one raw line from stdin (with or without its newline).
    pub fn on_line(self: &Arc<Self>, raw: &[u8]) {
        if let Some(f) = &self.log_file {
            let mut f = f.lock();
            let r = if raw.ends_with(b"\n") {
                f.write_all(raw)
            } else {
                f.write_all(raw).and_then(|()| f.write_all(b"\n"))
            };
            if let Err(e) = r {
                log!("--log-requests write failed: {e}");
            }
        }
        let line = raw.trim_ascii();
        if line.is_empty() {
            return;
        }
        let msg = match serde_json::from_slice::<Value>(line) {
            Ok(v) => v,
            Err(e) => match lenient_parse(line) {
                Some(v) => {
                    log!("message has values JSON cannot hold as f64 ({e}); dropped them");
                    v
                }
                None => {
                    log!("parse error: {e}");
                    let err = RpcError::new(PARSE_ERROR, format!("Parse error: {e}"));
                    self.dispatch(Reply {
                        id: Value::Null,
                        payload: Payload::Error(err),
                        follow: Vec::new(),
                    });
                    return;
                }
            },
        };
        match msg {
            Value::Array(items) if items.is_empty() => self.dispatch(Reply {
                id: Value::Null,
                payload: Payload::Error(RpcError::new(
                    INVALID_REQUEST,
                    "Invalid Request: empty batch",
                )),
                follow: Vec::new(),
            }),
            Value::Array(items) => {
                let mut replies = Vec::new();
                for item in items {
                    self.on_message(item, Some(&mut replies));
                }
                if replies.is_empty() {
                    return;
                }
                match &self.delay_tx {
                    Some(tx) => {
                        let due = delay_due(self.cfg.delay_ms);
                        if let Err(mpsc::SendError((_, Delayed::Many(v)))) =
                            tx.send((due, Delayed::Many(replies)))
                        {
                            self.send_batch_replies(v);
                        }
                    }
                    None => self.send_batch_replies(replies),
                }
            }
            other => self.on_message(other, None),
        }
    }

    fn on_message(self: &Arc<Self>, msg: Value, batch: Option<&mut Vec<Reply>>) {
        let Value::Object(mut obj) = msg else {
            let err = RpcError::new(INVALID_REQUEST, "Invalid Request: not an object");
            return self.deliver(Reply::error(Value::Null, err), batch);
        };
        let id = obj.remove("id");
        if let Some(bad @ (Value::Object(_) | Value::Array(_) | Value::Bool(_))) = &id {
            let err = RpcError::new(INVALID_REQUEST, format!("Invalid Request: bad id {bad}"));
            return self.deliver(Reply::error(Value::Null, err), batch);
        }
        match (obj.remove("method"), id) {
            (Some(Value::String(method)), Some(id)) => {
                let params = obj.remove("params").unwrap_or(Value::Null);
                self.on_request(id, method, params, batch);
            }
            (Some(Value::String(method)), None) => self.on_notification(&method, obj.get("params")),
            (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
                obj.insert("id".into(), id);
                self.on_client_response(obj);
            }
            (_, id) => {
                let id = id.map_or(Value::Null, |i| self.wire_id(&i));
                let err = RpcError::new(INVALID_REQUEST, "Invalid Request");
                self.deliver(Reply::error(id, err), batch);
            }
        }
    }

    fn on_notification(self: &Arc<Self>, method: &str, params: Option<&Value>) {
        match method {
            "notifications/initialized" if self.cfg.era == Era::Stateless => {
                log!("ignoring notifications/initialized (--era stateless has no handshake)");
            }
            "notifications/initialized" => {
                log!("client sent notifications/initialized");
                self.legacy_notify.store(true, Ordering::SeqCst);
                if self.cfg.exit_on_initialized {
                    log!("exiting on notifications/initialized (--exit-on-initialized)");
                    self.flush();
                    std::process::exit(0);
                }
                self.start_list_changed();
                self.start_chatter();
            }
            "notifications/cancelled" => {
                let Some(rid) = params.and_then(|p| p.get("requestId")) else {
                    log!("notifications/cancelled without requestId");
                    return;
                };
                let key = id_key(rid);
                if self.listens.lock().remove(&key).is_some() {
                    return log!("subscriptions/listen {key} cancelled by the client");
                }
                match self.inflight.lock().get(&key) {
                    Some(flag) => {
                        flag.store(true, Ordering::SeqCst);
                        log!("request {key} cancelled by the client");
                    }
                    None => log!("cancellation for request {key}, which is not in flight"),
                }
            }
            _ => {}
        }
    }

    fn on_client_response(&self, msg: Map<String, Value>) {
        let key = msg.get("id").map_or_else(String::new, id_key);
        match self.pending.lock().remove(&key) {
            Some(tx) => {
                let _ = tx.send(Value::Object(msg));
            }
            None => log!("client response for unknown id {key}"),
        }
    }

    fn on_request(
        self: &Arc<Self>,
        id: Value,
        method: String,
        params: Value,
        batch: Option<&mut Vec<Reply>>,
    ) {
        // A handshake-era server refuses (or, with the fault, dies on) a
        // client's era probe before initialize, outside the request count
        // of --crash-after/--hang-*.
        if self.cfg.era == Era::Handshake
            && method == "server/discover"
            && !self.initialized.load(Ordering::SeqCst)
        {
            if self.cfg.fault(StatelessFault::DieOnDiscover) {
                log!(
                    "fatal: server/discover before initialize; exiting with status 1 (--stateless-fault die-on-discover)"
                );
                return self.die(1);
            }
            log!("server/discover before initialize: not a handshake-era method");
            let err = RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method}"));
            return self.deliver(Reply::error(self.wire_id(&id), err), batch);
        }
        let n = self.requests_seen.fetch_add(1, Ordering::SeqCst) + 1;
        if self.cfg.crash_after == Some(n) {
            self.crash(n, &method);
        }
        if self.should_hang(n, &method, &params) {
            log!("not answering request #{n} {method} (id {id})");
            return;
        }
        let wire_id = self.wire_id(&id);
        let stateless = match self.cfg.era {
            Era::Handshake => false,
            Era::Stateless => true,
            Era::Both => stateless::is_stateless(&method, &params),
        };
        if stateless {
            return self.on_stateless_request(id, wire_id, &method, params, batch);
        }
        if method != "initialize" && method != "ping" && !self.initialized.load(Ordering::SeqCst) {
            let err = RpcError::new(
                INVALID_REQUEST,
                format!("Server not initialized: send initialize before {method}"),
            );
            return self.deliver(Reply::error(wire_id, err), batch);
        }
        if let Err(err) = self.check_capability(&method) {
            return self.deliver(Reply::error(wire_id, err), batch);
        }
        let tool = params.get("name").and_then(Value::as_str);
        if method == "tools/call" && tool.is_some_and(|t| BLOCKING_TOOLS.contains(&t)) {
            self.spawn_blocking(id, wire_id, params, false);
            return;
        }
        let handled = self.handle(&method, &params);
        self.deliver(Reply::from_handled(wire_id, handled), batch);
    }

    /// Runs a blocking tool on its own thread (`stateless`: decorate its result).
    fn spawn_blocking(self: &Arc<Self>, id: Value, wire_id: Value, params: Value, stateless: bool) {
        let key = id_key(&id);
        let flag = Arc::new(AtomicBool::new(false));
        self.inflight.lock().insert(key.clone(), Arc::clone(&flag));
        // Tests wait for this line (through the host's server log) to know
        // a call is pending here, instead of sleeping.
        let tool = params.get("name").and_then(Value::as_str).unwrap_or("?");
        log!("request {key} in flight: tools/call {tool}");
        let this = Arc::clone(self);
        let thread_id = wire_id.clone();
        let spawned = thread::Builder::new()
            .name(format!("request-{key}"))
            .spawn(move || {
                let mut handled = this.call_blocking_tool(&params, &flag);
                if stateless {
                    handled = handled.map(|h| this.decorate(h, "tools/call"));
                }
                this.inflight.lock().remove(&key);
                match handled {
                    Some(h) if !flag.load(Ordering::SeqCst) => {
                        this.dispatch(Reply::from_handled(thread_id, h));
                    }
                    _ => log!("request {key} cancelled; not responding"),
                }
            });
        if let Err(e) = spawned {
            let err = RpcError::new(INTERNAL_ERROR, format!("could not spawn a thread: {e}"));
            self.dispatch(Reply::error(wire_id, err));
        }
    }

    fn wire_id(&self, id: &Value) -> Value {
        match id {
            Value::Number(n) if self.cfg.string_ids => Value::String(n.to_string()),
            other => other.clone(),
        }
    }

    fn should_hang(&self, n: u64, method: &str, params: &Value) -> bool {
        if self.cfg.hang_after.is_some_and(|h| n >= h) {
            return true;
        }
        if self.cfg.hang && method != "initialize" && method != "ping" {
            return true;
        }
        self.cfg.hang_on.iter().any(|h| match h.split_once(':') {
            Some((m, tool)) => {
                m == method && params.get("name").and_then(Value::as_str) == Some(tool)
            }
            None => h == method,
        })
    }

    /// Exits with `code` (in unit tests: records it and returns, answering nothing).
    #[cfg(not(test))]
    fn die(&self, code: i32) {
        self.flush();
        std::process::exit(code);
    }

    #[cfg(test)]
    fn die(&self, code: i32) {
        *self.died.lock() = Some(code);
    }

    fn crash(&self, n: u64, method: &str) -> ! {
        self.flush();
        let mut err = io::stderr().lock();
        let _ = writeln!(err, "fatal: simulated crash on request #{n} ({method})");
        let _ = writeln!(
            err,
            "mcphost-testserver: exiting with status 3 (--crash-after)"
        );
        let _ = err.flush();
        std::process::exit(3);
    }

    fn check_capability(&self, method: &str) -> Result<(), RpcError> {
        let caps = self.cfg.capabilities;
        let declared = match method {
            "tools/list" | "tools/call" => caps.tools,
            "resources/list" | "resources/templates/list" | "resources/read" => caps.resources,
            "resources/subscribe" | "resources/unsubscribe" => caps.resources && caps.subscribe,
            "prompts/list" | "prompts/get" => caps.prompts,
            "logging/setLevel" => caps.logging,
            "completion/complete" => caps.completions,
            _ => true,
        };
        if declared {
            Ok(())
        } else {
            Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("Method not found: {method} (capability not declared)"),
            ))
        }
    }

    // ----------------------------------------------------------------- output

    /// Collects a reply into an incoming batch's answer, or sends it.
    fn deliver(&self, reply: Reply, batch: Option<&mut Vec<Reply>>) {
        match batch {
            Some(b) if !matches!(reply.payload, Payload::Huge(..)) => b.push(reply),
            _ => self.dispatch(reply),
        }
    }

    /// Sends a reply now, or after --delay-ms.
    fn dispatch(&self, reply: Reply) {
        match &self.delay_tx {
            Some(tx) => {
                let due = delay_due(self.cfg.delay_ms);
                if let Err(mpsc::SendError((_, Delayed::One(r)))) =
                    tx.send((due, Delayed::One(reply)))
                {
                    self.send_reply(r);
                }
            }
            None => self.send_reply(reply),
        }
    }

    fn send_reply(&self, reply: Reply) {
        let batch = self.cfg.batch;
        let mut out = self.out.lock();
        let r = (|| {
            if self.cfg.unknown_ids {
                out.unknown_response()?;
            }
            if self.cfg.json_logs {
                out.json_log(&reply.id)?;
            }
            match &reply.payload {
                Payload::Huge(n, extra) => {
                    out.huge(&reply.id, *n, extra, self.cfg.huge_id_first, batch)?;
                    if !reply.follow.is_empty() {
                        out.messages(&reply.follow, batch)?;
                    }
                }
                payload => {
                    let resp = render_response(&reply.id, payload);
                    if batch {
                        let mut msgs = Vec::with_capacity(2 + reply.follow.len());
                        msgs.push(batch_companion(&reply.id));
                        msgs.push(resp);
                        msgs.extend(reply.follow);
                        out.messages(&msgs, true)?;
                    } else {
                        out.line(&resp)?;
                        for f in &reply.follow {
                            out.line(f)?;
                        }
                    }
                }
            }
            out.flush()
        })();
        drop(out);
        if let Err(e) = r {
            self.write_failed(&e);
        }
    }

    /// Answers an incoming batch: one array with all responses, then follow-ups.
    fn send_batch_replies(&self, replies: Vec<Reply>) {
        let mut out = self.out.lock();
        let r = (|| {
            if self.cfg.unknown_ids {
                out.unknown_response()?;
            }
            let mut follow = Vec::new();
            let mut resps = Vec::with_capacity(replies.len());
            for reply in replies {
                resps.push(render_response(&reply.id, &reply.payload));
                follow.extend(reply.follow);
            }
            out.messages(&resps, true)?;
            if !follow.is_empty() {
                out.messages(&follow, self.cfg.batch)?;
            }
            out.flush()
        })();
        drop(out);
        if let Err(e) = r {
            self.write_failed(&e);
        }
    }

    /// Sends notifications (as one batch array with --batch).
    fn send_notifications(&self, lines: &[String]) {
        let mut out = self.out.lock();
        let r = out
            .messages(lines, self.cfg.batch)
            .and_then(|()| out.flush());
        drop(out);
        if let Err(e) = r {
            self.write_failed(&e);
        }
    }

    fn write_failed(&self, e: &io::Error) {
        if self.cfg.ignore_eof {
            if !self.stdout_broken.swap(true, Ordering::SeqCst) {
                log!("stdout write failed ({e}); ignoring (--ignore-eof)");
            }
            return;
        }
        log!("stdout write failed ({e}); exiting");
        std::process::exit(1);
    }

    // --------------------------------------------------------------- handlers

    fn handle(self: &Arc<Self>, method: &str, params: &Value) -> Handled {
        match method {
            "initialize" => self.initialize(params),
            "ping" => ok_raw("{}".into()),
            "tools/list"
                if self.tools_lists.fetch_add(1, Ordering::SeqCst) < self.cfg.fail_tools_list =>
            {
                Err(RpcError::new(
                    INTERNAL_ERROR,
                    "simulated tools/list failure (--fail-tools-list)",
                ))
            }
            "tools/list" => {
                let mut tools = catalog::tools(
                    self.cfg.tools,
                    self.dynamic(),
                    self.cfg.link_tool,
                    self.cfg.host_tools,
                    self.cfg.scripted_tools,
                );
                if self.cfg.hidden_text {
                    tools.push(catalog::hidden_tool());
                }
                let tools = crate::probe::with_probe(tools, self.cfg.sandbox_probe);
                let tools = catalog::retouch(
                    tools,
                    self.cfg.describe.as_deref(),
                    self.cfg.extra_tool.as_deref(),
                );
                self.list("tools", &tools, params)
            }
            "tools/call" if self.cfg.sandbox_probe && crate::probe::is_call(params) => {
                ok(crate::probe::call(params.get("arguments")))
            }
            "tools/call" if self.cfg.hidden_text && params["name"] == "hidden" => {
                ok_raw(catalog::HIDDEN_RESULT.to_owned())
            }
            "tools/call" => self.call_tool(params),
            "resources/list" | "resources/templates/list" => {
                let (key, mut items, hidden) = match method {
                    "resources/list" => (
                        "resources",
                        catalog::resources(self.cfg.resources, self.dynamic()),
                        catalog::HIDDEN_RESOURCE,
                    ),
                    _ => (
                        "resourceTemplates",
                        catalog::resource_templates(),
                        catalog::HIDDEN_TEMPLATE,
                    ),
                };
                if self.cfg.hidden_text {
                    items.push(hidden.to_owned());
                }
                self.list(key, &items, params)
            }
            "resources/read" => self.read_resource(params),
            "resources/subscribe" => {
                let uri = required_str(params, "uri")?;
                let updated = notification("notifications/resources/updated", json!({"uri": uri}));
                Ok(Outcome {
                    payload: Payload::Result("{}".into()),
                    follow: vec![updated],
                })
            }
            "resources/unsubscribe" => {
                required_str(params, "uri")?;
                ok_raw("{}".into())
            }
            "prompts/list" => {
                let mut prompts = catalog::prompts(self.cfg.prompts, self.dynamic());
                if self.cfg.hidden_text {
                    prompts.push(catalog::HIDDEN_PROMPT.to_owned());
                }
                self.list("prompts", &prompts, params)
            }
            "prompts/get" => self.get_prompt(params),
            "completion/complete" => complete(params),
            "logging/setLevel" => {
                let level = required_str(params, "level")?;
                let Some(known) = LOG_LEVELS.iter().find(|l| **l == level) else {
                    return Err(invalid_params(format!("unknown log level {level:?}")));
                };
                *self.log_level.lock() = Some(*known);
                let msg = notification(
                    "notifications/message",
                    json!({"level": level, "logger": "mcphost-testserver", "data": format!("log level set to {level}")}),
                );
                Ok(Outcome {
                    payload: Payload::Result("{}".into()),
                    follow: vec![msg],
                })
            }
            _ => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
            )),
        }
    }

    fn dynamic(&self) -> u64 {
        self.dynamic.load(Ordering::SeqCst)
    }

    fn initialize(&self, params: &Value) -> Handled {
        if self.initialized.swap(true, Ordering::SeqCst) {
            return Err(RpcError::new(INVALID_REQUEST, "already initialized"));
        }
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = match (&self.cfg.protocol_version, requested) {
            (Some(forced), _) => forced.clone(),
            (None, Some(r)) if SUPPORTED_VERSIONS.contains(&r) => r.to_owned(),
            (None, _) => LATEST_VERSION.to_owned(),
        };
        let client = params
            .pointer("/clientInfo/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        log!("initialize from {client} requesting {requested:?}; answering {version}");
        ok(json!({
            "protocolVersion": version,
            "capabilities": self.server_capabilities(),
            "serverInfo": {"name": "mcphost-testserver", "version": env!("CARGO_PKG_VERSION")},
            "instructions": INSTRUCTIONS
        }))
    }

    /// The declared capabilities (`initialize` and `server/discover`).
    fn server_capabilities(&self) -> Map<String, Value> {
        let caps = self.cfg.capabilities;
        let mut c = Map::new();
        if caps.tools {
            c.insert("tools".into(), json!({"listChanged": true}));
        }
        if caps.resources {
            let r = if caps.subscribe {
                json!({"subscribe": true, "listChanged": true})
            } else {
                json!({"listChanged": true})
            };
            c.insert("resources".into(), r);
        }
        if caps.prompts {
            c.insert("prompts".into(), json!({"listChanged": true}));
        }
        if caps.logging {
            c.insert("logging".into(), json!({}));
        }
        if caps.completions {
            c.insert("completions".into(), json!({}));
        }
        c
    }

    fn list(&self, key: &str, items: &[String], params: &Value) -> Handled {
        let cursor = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.as_str()),
            Some(other) => {
                return Err(invalid_params(format!(
                    "cursor must be a string, got {other}"
                )));
            }
        };
        let page = catalog::paginate(
            items.len(),
            cursor,
            self.cfg.page_size,
            self.cfg.repeat_cursor,
        )
        .map_err(invalid_params)?;
        ok_raw(catalog::render_page(key, items, &page))
    }

    fn call_tool(self: &Arc<Self>, params: &Value) -> Handled {
        let name = required_str(params, "name")?;
        let args = params.get("arguments");
        let arg = |k: &str| args.and_then(|a| a.get(k));
        match name {
            "echo" => {
                // Hot path for benchmarks: no intermediate Value.
                let text = match arg("text") {
                    Some(Value::String(s)) => serde_json::to_string(s),
                    Some(v) => serde_json::to_string(&v.to_string()),
                    None => Ok("\"\"".to_owned()),
                }
                .map_err(|e| RpcError::new(INTERNAL_ERROR, e.to_string()))?;
                ok_raw(format!(
                    r#"{{"content":[{{"type":"text","text":{text}}}]}}"#
                ))
            }
            "add" => {
                let (Some(a), Some(b)) = (arg("a"), arg("b")) else {
                    return text_result("add: arguments `a` and `b` are required", true);
                };
                let sum = match (a.as_i64(), b.as_i64()) {
                    (Some(x), Some(y)) if x.checked_add(y).is_some() => json!(x + y),
                    _ => match (a.as_f64(), b.as_f64()) {
                        (Some(x), Some(y)) => json!(x + y),
                        _ => return text_result("add: `a` and `b` must be numbers", true),
                    },
                };
                ok(json!({
                    "content": [{"type": "text", "text": sum.to_string()}],
                    "structuredContent": {"sum": sum}
                }))
            }
            "fail" => {
                let msg = arg("message")
                    .and_then(Value::as_str)
                    .unwrap_or("simulated tool failure");
                text_result(msg, true)
            }
            "lossless" => ok_raw(LOSSLESS_RESULT.to_owned()),
            "link" if self.cfg.link_tool => {
                let uri = arg("uri")
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid_params("link needs a `uri` string"))?;
                let item = if arg("embed").and_then(Value::as_bool) == Some(true) {
                    json!({"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain", "text": format!("Embedded {uri}.")}})
                } else {
                    json!({"type": "resource_link", "uri": uri, "name": "link", "mimeType": "text/plain"})
                };
                ok(json!({"content": [{"type": "text", "text": "see"}, item]}))
            }
            "later" if self.cfg.host_tools => self.later(args),
            "log" if self.cfg.scripted_tools => self.log_tool(args),
            "error" if self.cfg.scripted_tools => {
                let code = arg("code")
                    .and_then(Value::as_i64)
                    .ok_or_else(|| invalid_params("error needs an integer `code`"))?;
                let message = arg("message")
                    .and_then(Value::as_str)
                    .unwrap_or("scripted error");
                let e = RpcError::new(code, message);
                Err(match arg("data") {
                    Some(d) => e.with_data(d.clone()),
                    None => e,
                })
            }
            "url_required" if self.cfg.host_tools => {
                let url = arg("url").and_then(Value::as_str).unwrap_or_default();
                let id = arg("elicitationId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Err(RpcError::new(
                    URL_ELICITATION_REQUIRED,
                    "This request requires more information.",
                )
                .with_data(json!({"elicitations": [{
                    "mode": "url",
                    "elicitationId": id,
                    "url": url,
                    "message": "Open this page to authorize the request."
                }]})))
            }
            "huge" => {
                let bytes = arg("bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.cfg.huge_bytes);
                Ok(Outcome {
                    payload: Payload::Huge(bytes, String::new()),
                    follow: Vec::new(),
                })
            }
            _ => {
                let known = parse_indexed(name, "tool_").is_some_and(|i| i < self.cfg.tools as u64)
                    || parse_indexed(name, "dynamic_")
                        .is_some_and(|i| i >= 1 && i <= self.dynamic());
                if !known {
                    return Err(invalid_params(format!("Unknown tool: {name}")));
                }
                let args = args.map_or_else(|| "{}".to_owned(), Value::to_string);
                text_result(&format!("{name} called with {args}"), false)
            }
        }
    }

    /// The `log` tool: its messages go out before its answer, so they
    /// arrive while the call is in flight.
    fn log_tool(&self, args: Option<&Value>) -> Handled {
        let levels: Vec<&str> = match args.and_then(|a| a.get("levels")) {
            None => vec!["info"],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            Some(_) => return Err(invalid_params("log: `levels` must be an array of strings")),
        };
        if let Some(bad) = levels.iter().find(|l| !LOG_LEVELS.contains(l)) {
            return Err(invalid_params(format!("log: unknown level {bad:?}")));
        }
        let message = args
            .and_then(|a| a.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("log");
        let floor = *self.log_level.lock();
        let rank = |l: &str| LOG_LEVELS.iter().position(|k| *k == l);
        let sent: Vec<&str> = levels
            .into_iter()
            .filter(|l| floor.is_none_or(|f| rank(l) >= rank(f)))
            .collect();
        let msgs: Vec<String> = sent
            .iter()
            .map(|l| {
                notification(
                    "notifications/message",
                    json!({"level": l, "logger": "mcphost-testserver/log", "data": message}),
                )
            })
            .collect();
        if !msgs.is_empty() {
            self.send_notifications(&msgs);
        }
        text_result(
            &json!({"serverLevel": floor, "sent": sent}).to_string(),
            false,
        )
    }

    /// Runs a blocking tool; `None` when cancelled.
    fn call_blocking_tool(&self, params: &Value, cancel: &AtomicBool) -> Option<Handled> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let args = params.get("arguments");
        let arg = |k: &str| args.and_then(|a| a.get(k));
        match name {
            "slow" => {
                let Some(ms) = arg("ms")
                    .and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64)))
                else {
                    return Some(text_result("slow: `ms` (integer) is required", true));
                };
                let token = params.pointer("/_meta/progressToken").cloned();
                self.slow(ms, token, cancel)
            }
            "sample" => {
                let prompt = arg("prompt")
                    .and_then(Value::as_str)
                    .unwrap_or("Say hello.");
                let max_tokens = arg("maxTokens").and_then(Value::as_u64).unwrap_or(100);
                let req = json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                    "systemPrompt": "You are being called by mcphost-testserver.",
                    "maxTokens": max_tokens
                });
                let resp = self.client_request("sampling/createMessage", Some(req), cancel)?;
                Some(client_answer("sampling/createMessage", &resp))
            }
            "elicit" => {
                let message = arg("message")
                    .and_then(Value::as_str)
                    .unwrap_or("Please provide your name.");
                let schema = arg("requestedSchema").cloned().unwrap_or_else(|| {
                    json!({
                        "type": "object",
                        "properties": {"name": {"type": "string", "description": "Your name"}},
                        "required": ["name"]
                    })
                });
                let req = if arg("mode").and_then(Value::as_str) == Some("url") {
                    // URL mode: `url` and `elicitationId` as given (or made up).
                    json!({
                        "mode": "url",
                        "message": message,
                        "url": arg("url").and_then(Value::as_str).unwrap_or("https://example.com/authorize"),
                        "elicitationId": arg("elicitationId").and_then(Value::as_str).unwrap_or("ts-elicitation-1"),
                    })
                } else {
                    json!({ "message": message, "requestedSchema": schema })
                };
                let resp = self.client_request("elicitation/create", Some(req), cancel)?;
                Some(client_answer("elicitation/create", &resp))
            }
            "roots" => {
                let resp = self.client_request("roots/list", None, cancel)?;
                Some(client_answer("roots/list", &resp))
            }
            "ask" if self.cfg.host_tools => {
                let method = arg("method").and_then(Value::as_str).unwrap_or("ping");
                let params = arg("params").and_then(Value::as_str).map(str::to_owned);
                let resp = self.client_request_raw(method, params, cancel)?;
                Some(text_result(&resp.to_string(), false))
            }
            "url_elicit" if self.cfg.host_tools => {
                let url = arg("url").and_then(Value::as_str).unwrap_or_default();
                let id = arg("elicitationId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let message = arg("message")
                    .and_then(Value::as_str)
                    .unwrap_or("Please open this page.");
                let req =
                    json!({"mode": "url", "url": url, "elicitationId": id, "message": message});
                let resp = self.client_request("elicitation/create", Some(req), cancel)?;
                self.send_notifications(&[notification(
                    "notifications/elicitation/complete",
                    json!({"elicitationId": id}),
                )]);
                Some(client_answer("elicitation/create", &resp))
            }
            other => Some(Err(invalid_params(format!("Unknown tool: {other}")))),
        }
    }

    fn slow(&self, ms: u64, token: Option<Value>, cancel: &AtomicBool) -> Option<Handled> {
        const TICK: Duration = Duration::from_millis(10);
        const PROGRESS_EVERY: Duration = Duration::from_millis(100);
        let start = Instant::now();
        let total = Duration::from_millis(ms);
        let mut last_progress = start;
        loop {
            if cancel.load(Ordering::SeqCst) {
                return None;
            }
            let elapsed = start.elapsed();
            if elapsed >= total {
                break;
            }
            thread::sleep((total - elapsed).min(TICK));
            if let Some(t) = &token
                && last_progress.elapsed() >= PROGRESS_EVERY
                && start.elapsed() < total
                && !cancel.load(Ordering::SeqCst)
            {
                last_progress = Instant::now();
                let done = start.elapsed().as_millis() as u64;
                self.send_notifications(&[notification(
                    "notifications/progress",
                    json!({"progressToken": t, "progress": done, "total": ms, "message": format!("slept {done} of {ms} ms"), "_meta": {"elapsedMs": done}, "x-unknown": [1, "two"]}),
                )]);
            }
        }
        Some(text_result(&format!("slept {ms} ms"), false))
    }

    /// `later`: answers now; after `delayMs`, with no call of ours waiting
    /// on it, asks the client and reports the response as a log message.
    fn later(self: &Arc<Self>, args: Option<&Value>) -> Handled {
        let arg = |k: &str| args.and_then(|a| a.get(k));
        let method = arg("method")
            .and_then(Value::as_str)
            .unwrap_or("roots/list")
            .to_owned();
        let params = arg("params").and_then(Value::as_str).map(str::to_owned);
        let delay = arg("delayMs").and_then(Value::as_u64).unwrap_or(300);
        let this = Arc::clone(self);
        let m = method.clone();
        let spawned = thread::Builder::new().name("later".into()).spawn(move || {
            thread::sleep(Duration::from_millis(delay));
            let never = AtomicBool::new(false);
            if let Some(resp) = this.client_request_raw(&m, params, &never) {
                this.send_notifications(&[notification(
                    "notifications/message",
                    json!({"level": "info", "logger": "mcphost-testserver/later", "data": {"method": m, "response": resp}}),
                )]);
            }
        });
        if let Err(e) = spawned {
            return Err(RpcError::new(
                INTERNAL_ERROR,
                format!("could not spawn: {e}"),
            ));
        }
        text_result(&format!("{method} scheduled in {delay} ms"), false)
    }

    /// Sends a request to the client and waits for its response (`None` if the
    /// tool call that needs it is cancelled meanwhile).
    fn client_request(
        &self,
        method: &str,
        params: Option<Value>,
        cancel: &AtomicBool,
    ) -> Option<Value> {
        self.client_request_raw(method, params.map(|p| p.to_string()), cancel)
    }

    /// As [`Server::client_request`], with `params` as raw JSON text sent verbatim.
    fn client_request_raw(
        &self,
        method: &str,
        params: Option<String>,
        cancel: &AtomicBool,
    ) -> Option<Value> {
        let n = self.next_out_id.fetch_add(1, Ordering::SeqCst) + 1;
        let colliding = self
            .cfg
            .collide_ids
            .then(|| {
                self.inflight
                    .lock()
                    .keys()
                    .filter_map(|k| k.parse::<u64>().ok())
                    .min()
            })
            .flatten();
        let id = if let Some(taken) = colliding {
            json!(taken)
        } else if self.cfg.string_ids {
            json!(format!("srv-{n}"))
        } else {
            json!(n)
        };
        let key = id_key(&id);
        let (tx, rx) = mpsc::channel();
        self.pending.lock().insert(key.clone(), tx);
        let head = json!({"jsonrpc": "2.0", "id": id, "method": method}).to_string();
        let msg = match params {
            // `head` ends with `}`: splice the raw params in before it.
            Some(p) => format!("{},\"params\":{p}}}", &head[..head.len() - 1]),
            None => head,
        };
        log!("sending {method} (id {key}) to the client");
        self.send_notifications(&[msg]);
        loop {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(resp) => {
                    if self.cfg.collide_ids {
                        log!(
                            "sending a late notifications/cancelled for my answered request {key}"
                        );
                        self.send_notifications(&[notification(
                            "notifications/cancelled",
                            json!({"requestId": id, "reason": "courtesy cancel after the answer (--collide-ids)"}),
                        )]);
                    }
                    return Some(resp);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if cancel.load(Ordering::SeqCst) && !self.cfg.no_withdraw {
                        self.pending.lock().remove(&key);
                        self.send_notifications(&[notification(
                            "notifications/cancelled",
                            json!({"requestId": id, "reason": "the tool call that needed it was cancelled"}),
                        )]);
                        return None;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    fn read_resource(&self, params: &Value) -> Handled {
        let uri = required_str(params, "uri")?;
        match catalog::resource_text(uri, self.cfg.resources, self.dynamic()) {
            Some(text) => {
                ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}))
            }
            None => Err(RpcError::new(RESOURCE_NOT_FOUND, "Resource not found")
                .with_data(json!({"uri": uri}))),
        }
    }

    fn get_prompt(&self, params: &Value) -> Handled {
        let name = required_str(params, "name")?;
        let message =
            |text: String| json!([{"role": "user", "content": {"type": "text", "text": text}}]);
        if name == "greet" {
            let Some(who) = params.pointer("/arguments/name").and_then(Value::as_str) else {
                return Err(invalid_params("Missing required argument: name"));
            };
            return ok(
                json!({"description": format!("Greeting for {who}"), "messages": message(format!("Hello, {who}!"))}),
            );
        }
        let known = parse_indexed(name, "prompt_").is_some_and(|i| i < self.cfg.prompts as u64)
            || parse_indexed(name, "dynamic_prompt_")
                .is_some_and(|i| i >= 1 && i <= self.dynamic());
        if known {
            ok(json!({"messages": message(format!("This is {name}."))}))
        } else {
            Err(invalid_params(format!("Unknown prompt: {name}")))
        }
    }

    fn start_chatter(self: &Arc<Self>) {
        let Some(ms) = self.cfg.chatter_ms else {
            return;
        };
        if self.chatter_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let this = Arc::clone(self);
        let spawned = thread::Builder::new().name("chatter".into()).spawn(move || {
            for n in 1u64.. {
                thread::sleep(Duration::from_millis(ms));
                log!("tick {n}");
                if this.cfg.capabilities.logging && this.legacy_notify.load(Ordering::SeqCst) {
                    let msg = notification(
                        "notifications/message",
                        json!({"level": "info", "logger": "mcphost-testserver", "data": format!("tick {n}")}),
                    );
                    this.send_notifications(&[msg]);
                }
            }
        });
        if let Err(e) = spawned {
            log!("could not start the chatter timer: {e}");
        }
    }

    fn start_list_changed(self: &Arc<Self>) {
        let Some(ms) = self.cfg.list_changed_after_ms else {
            return;
        };
        if self.list_changed_started.swap(true, Ordering::SeqCst) {
            return;
        }
        let this = Arc::clone(self);
        let spawned = thread::Builder::new()
            .name("list-changed".into())
            .spawn(move || {
                let mut round = 0u64;
                while this.cfg.list_changed_count.is_none_or(|k| round < k) {
                    thread::sleep(Duration::from_millis(ms));
                    round += 1;
                    let n = this.dynamic.fetch_add(1, Ordering::SeqCst) + 1;
                    let caps = this.cfg.capabilities;
                    let mut lines = Vec::new();
                    if this.legacy_notify.load(Ordering::SeqCst) {
                        for (declared, what) in [(caps.tools, "tools"), (caps.resources, "resources"), (caps.prompts, "prompts")] {
                            if declared {
                                lines.push(format!(r#"{{"jsonrpc":"2.0","method":"notifications/{what}/list_changed"}}"#));
                            }
                        }
                    }
                    lines.extend(this.listen_list_changed());
                    // The send time lets a benchmark measure how long the
                    // client takes to reflect the change.
                    let sent_us = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_micros());
                    if !lines.is_empty() {
                        this.send_notifications(&lines);
                    }
                    log!(
                        "list-changed round {round}: added {} sent_unix_us={sent_us}",
                        catalog::dynamic_tool_name(n)
                    );
                }
            });
        if let Err(e) = spawned {
            log!("could not start the list-changed timer: {e}");
        }
    }
}

impl Reply {
    fn error(id: Value, err: RpcError) -> Reply {
        Reply {
            id,
            payload: Payload::Error(err),
            follow: Vec::new(),
        }
    }

    fn from_handled(id: Value, handled: Handled) -> Reply {
        match handled {
            Ok(o) => Reply {
                id,
                payload: o.payload,
                follow: o.follow,
            },
            Err(e) => Reply::error(id, e),
        }
    }
}

fn required_str<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid_params(format!("missing or non-string `{key}`")))
}

/// Turns the client's response to one of our requests into a tool result.
fn client_answer(method: &str, resp: &Value) -> Handled {
    match (resp.get("result"), resp.get("error")) {
        (Some(result), _) => text_result(&result.to_string(), false),
        (None, Some(err)) => text_result(
            &format!("client returned an error for {method}: {err}"),
            true,
        ),
        (None, None) => text_result(
            &format!("client sent a malformed response for {method}"),
            true,
        ),
    }
}

fn complete(params: &Value) -> Handled {
    let Some(r) = params.get("ref") else {
        return Err(invalid_params("missing `ref`"));
    };
    let arg_name = params
        .pointer("/argument/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let prefix = params
        .pointer("/argument/value")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_lowercase();
    let candidates: &[&str] = match (r.get("type").and_then(Value::as_str), arg_name) {
        (Some("ref/prompt"), "name") if r.get("name").and_then(Value::as_str) == Some("greet") => {
            COMPLETION_NAMES
        }
        (Some("ref/resource"), "id")
            if r.get("uri").and_then(Value::as_str) == Some("test://dynamic/{id}") =>
        {
            &["1", "2", "3", "42", "100"]
        }
        _ => &[],
    };
    let values: Vec<&str> = candidates
        .iter()
        .copied()
        .filter(|c| c.to_lowercase().starts_with(&prefix))
        .collect();
    ok(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
}

fn stderr_flood() {
    let mut n: u64 = 0;
    loop {
        let mut err = io::stderr().lock();
        let mut r = Ok(());
        for _ in 0..100 {
            n += 1;
            r = writeln!(
                err,
                "mcphost-testserver flood line {n}: the quick brown fox jumps over the lazy dog"
            );
            if r.is_err() {
                break;
            }
        }
        drop(err);
        thread::sleep(Duration::from_millis(if r.is_err() { 10 } else { 1 }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexed_names() {
        assert_eq!(parse_indexed("tool_0003", "tool_"), Some(3));
        assert_eq!(parse_indexed("tool_12345", "tool_"), Some(12345));
        assert_eq!(parse_indexed("tool_3", "tool_"), None);
        assert_eq!(parse_indexed("tool_x", "tool_"), None);
    }

    #[test]
    fn lenient_parse_drops_unrepresentable_values() {
        let line = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"lossless","arguments":{"x":1e400}}}"#;
        assert!(serde_json::from_slice::<Value>(line).is_err());
        let v = lenient_parse(line).unwrap();
        assert_eq!(v["id"], 4);
        assert_eq!(v["params"]["name"], "lossless");
        assert!(v["params"].get("arguments").is_none());
        assert!(lenient_parse(b"{not json").is_none());
    }

    #[test]
    fn completion_filters_by_prefix() {
        let Ok(Outcome {
            payload: Payload::Result(raw),
            ..
        }) = complete(
            &json!({"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": "al"}}),
        )
        else {
            panic!("completion failed");
        };
        let v: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(v["completion"]["values"], json!(["Alice", "Alfred"]));
    }
}
