//! A scriptable MCP server over HTTP, in process, for the HTTP transport
//! tests.
//!
//! It speaks enough MCP to be a real peer (`initialize`,
//! `notifications/initialized`, `ping`, `tools/list`, `tools/call` with the
//! tools `echo`, `slow` and `big`, `logging/setLevel`) over Streamable HTTP
//! (sessions, JSON or SSE replies, resumable streams, an optional standalone
//! GET stream) or over the legacy HTTP+SSE transport of 2024-11-05. Every
//! HTTP request it receives is recorded ([`Recorded`]), and its behaviour is
//! a [`Script`] the test can change at any time through [`FaultServer`].
//!
//! The server runs on its own runtime thread, so it works the same under
//! `#[test]` (driving the `mcphost` binary) and `#[tokio::test]`.
//!
//! With [`Script::stateless`] it also serves revision 2026-07-28: a POST whose
//! `MCP-Protocol-Version` is [`STATELESS_VERSION`] is served statelessly (no
//! session asked for or issued), and `server/discover`, `resources/read`,
//! `prompts/get` and the tool `route` (parameters mirrored as
//! `Mcp-Param-Region` and `Mcp-Param-N`) are offered. A
//! `subscriptions/listen` is acknowledged and its stream kept open:
//! [`FaultServer::push_listen`] sends on it, [`FaultServer::cut_listen`]
//! drops it.
//!
//! SSE event ids are `<stream>-<index>`: `s3-0` is the first event of POST
//! stream `s3`. A POST stream cut before its response keeps collecting
//! events; a GET with `Last-Event-ID: s3-0` replays everything after event 0
//! and then delivers the rest live, closing once the response is sent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, request::Parts};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// Streamable HTTP revisions the server accepts and echoes back.
pub const VERSIONS: [&str; 3] = ["2025-03-26", "2025-06-18", "2025-11-25"];
pub const LATEST: &str = "2025-11-25";
pub const LEGACY_VERSION: &str = "2024-11-05";
pub const SERVER_NAME: &str = "fault-server";
/// The stateless revision, served when [`Script::stateless`] is set.
pub const STATELESS_VERSION: &str = "2026-07-28";

/// The exact `Accept` a Streamable HTTP client must send on a POST.
pub const POST_ACCEPT: &str = "application/json, text/event-stream";

// ---------------------------------------------------------------------------
// What was received

/// One HTTP request as the server received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Arrival order, from 0.
    pub seq: usize,
    /// `GET`, `POST`, `DELETE`, …
    pub method: String,
    /// Path and query, e.g. `/mcp` or `/messages?sessionId=l1`.
    pub path: String,
    /// Lower-case names, in arrival order (repeated headers repeat).
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub at: Instant,
    /// The status the server answered with (`None` until it has).
    pub status: Option<u16>,
}

impl Recorded {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a header.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn session(&self) -> Option<&str> {
        self.header("mcp-session-id")
    }

    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }

    /// The JSON-RPC method of a POSTed request or notification.
    pub fn rpc_method(&self) -> Option<String> {
        self.json()?.get("method")?.as_str().map(str::to_owned)
    }

    /// The JSON-RPC id of a POSTed request or response.
    pub fn rpc_id(&self) -> Option<Value> {
        self.json()?.get("id").cloned()
    }

    /// A POSTed JSON-RPC response (a client's answer to a server request).
    pub fn is_rpc_response(&self) -> bool {
        self.json().is_some_and(|v| {
            v.get("method").is_none() && (v.get("result").is_some() || v.get("error").is_some())
        })
    }

    /// `tools/call` of this tool.
    pub fn is_call_of(&self, tool: &str) -> bool {
        self.json().is_some_and(|v| {
            v["method"] == "tools/call" && v["params"]["name"] == tool && v.get("id").is_some()
        })
    }

    /// Whether this is a POST of this JSON-RPC method.
    pub fn is_rpc(&self, method: &str) -> bool {
        self.method == "POST" && self.rpc_method().as_deref() == Some(method)
    }

    /// One line for failure messages.
    pub fn line(&self, start: Instant) -> String {
        let what = self
            .rpc_method()
            .or_else(|| self.is_rpc_response().then(|| "<response>".to_owned()))
            .unwrap_or_default();
        format!(
            "#{} +{}ms {} {} {} [{}] session={:?} version={:?} last-event-id={:?}",
            self.seq,
            self.at.saturating_duration_since(start).as_millis(),
            self.method,
            self.path,
            what,
            self.status.map(|s| s.to_string()).unwrap_or("-".into()),
            self.session(),
            self.header("mcp-protocol-version"),
            self.header("last-event-id"),
        )
    }
}

// ---------------------------------------------------------------------------
// What to do

/// How a POST stream ends early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// End the body cleanly (chunked terminator), without the response.
    Close,
    /// Break the connection mid-body.
    Abort,
}

/// How a request is answered.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// `text/event-stream` instead of `application/json`.
    pub sse: bool,
    /// Start with a priming event (id, empty data) carrying `retry: N`.
    pub retry_ms: Option<u64>,
    /// A `: keep-alive` comment before every event.
    pub comments: bool,
    /// Messages (notifications) sent on the stream before the response.
    pub notify_first: Vec<Value>,
    /// A `notifications/progress` for the request's progress token, if any.
    pub progress: bool,
    /// Server requests (by method) sent before the response; each waits
    /// for the client's answer (a new POST) up to `Script::answer_timeout`.
    pub ask_first: Vec<String>,
    /// End the stream after the events above, before the response; the
    /// response is kept for a GET with `Last-Event-ID`.
    pub cut: Option<Cut>,
    /// Wait this long before the response.
    pub delay: Duration,
    /// Answer with this JSON body instead of the response (a broken server).
    pub body: Option<String>,
    /// The Content-Type of `body` (default `application/json`).
    pub content_type: Option<String>,
    /// Raw SSE text written before the response (garbage lines, say).
    pub raw_first: Vec<String>,
    /// A polling server: every stream (the POST's and each resuming GET)
    /// carries one priming event with a new id and closes, until the
    /// response is ready; then a resuming GET gets the response.
    pub poll: bool,
    /// During `delay` (SSE), a `: keep-alive` comment this often.
    pub keep_alive: Option<Duration>,
}

impl Reply {
    pub fn json() -> Reply {
        Reply::default()
    }
    pub fn sse() -> Reply {
        Reply {
            sse: true,
            ..Reply::default()
        }
    }
    pub fn retry(mut self, ms: u64) -> Reply {
        self.retry_ms = Some(ms);
        self
    }
    pub fn comments(mut self) -> Reply {
        self.comments = true;
        self
    }
    pub fn notify(mut self, msg: Value) -> Reply {
        self.notify_first.push(msg);
        self
    }
    pub fn progress(mut self) -> Reply {
        self.progress = true;
        self
    }
    pub fn ask(mut self, method: &str) -> Reply {
        self.ask_first.push(method.to_owned());
        self
    }
    pub fn cut(mut self, how: Cut) -> Reply {
        self.cut = Some(how);
        self
    }
    pub fn delay(mut self, d: Duration) -> Reply {
        self.delay = d;
        self
    }
    pub fn body(mut self, json: &str) -> Reply {
        self.body = Some(json.to_owned());
        self
    }
    pub fn content_type(mut self, ct: &str) -> Reply {
        self.content_type = Some(ct.to_owned());
        self
    }
    pub fn raw(mut self, sse_text: &str) -> Reply {
        self.raw_first.push(sse_text.to_owned());
        self
    }
    pub fn poll(mut self) -> Reply {
        self.poll = true;
        self
    }
    pub fn keep_alive(mut self, every: Duration) -> Reply {
        self.keep_alive = Some(every);
        self
    }
}

/// The standalone GET stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetMode {
    /// No stream: answer every GET (without `Last-Event-ID`) with this status.
    Status(u16),
    /// Serve a stream that stays open; push to it with
    /// [`FaultServer::push_standalone`].
    Stream,
}

/// Answer matching POSTs with an HTTP status instead of handling them.
#[derive(Debug, Clone)]
pub struct Fail {
    /// JSON-RPC method to match (`None`: any POST); `tools/call:NAME`
    /// matches one tool.
    pub rpc_method: Option<String>,
    pub status: u16,
    /// How many more times; `usize::MAX` for always.
    pub remaining: usize,
    /// A JSON-RPC error object (JSON text, sent as written) for the body
    /// (else plain text), in a response to the request's id, or with
    /// `"id": null`.
    pub rpc_error: Option<(String, bool)>,
    /// Else this body, with this Content-Type (else "injected HTTP N").
    pub body: Option<(String, String)>,
}

/// Requests must carry `Authorization: Bearer <token>`, else `status`.
#[derive(Debug, Clone)]
pub struct Auth {
    pub token: String,
    /// 401 or 403.
    pub status: u16,
}

/// Everything scriptable. Change it at runtime with [`FaultServer::script`].
#[derive(Debug, Clone)]
pub struct Script {
    /// Issue `Mcp-Session-Id` on initialize and require it afterwards.
    pub sessions: bool,
    /// Per request kind: `"tools/call:slow"`, then `"tools/call"`, then
    /// the method name; otherwise `default_reply`.
    pub replies: HashMap<String, Reply>,
    pub default_reply: Reply,
    pub get: GetMode,
    /// Answer to DELETE (200 ends the session; 405 refuses).
    pub delete_status: u16,
    pub fails: Vec<Fail>,
    pub auth: Option<Auth>,
    /// Legacy HTTP+SSE server: a POST to the MCP URL gets this status, a
    /// GET serves the `endpoint` event, messages go to `/messages`.
    pub legacy: Option<u16>,
    /// 406 unless a POST accepts both JSON and SSE (GET: SSE).
    pub strict_accept: bool,
    /// Answer initialize with this revision whatever the client asked for.
    pub protocol_version: Option<String>,
    pub extra_tools: Vec<String>,
    /// How long a server request waits for the client's answer.
    pub answer_timeout: Duration,
    /// Status for an unknown session id: the spec says 404; some servers
    /// (server-everything) say 400. Either comes with the JSON-RPC error
    /// body of the server it imitates (see `session_error`).
    pub unknown_session_status: u16,
    /// The capabilities initialize declares (default: tools, logging).
    pub capabilities: Option<Value>,
    /// Legacy server: wait this long before answering the event stream's GET.
    pub get_delay: Duration,
    /// Also serve revision 2026-07-28 (see the module docs).
    pub stateless: bool,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            sessions: true,
            replies: HashMap::new(),
            default_reply: Reply::json(),
            get: GetMode::Status(405),
            delete_status: 200,
            fails: Vec::new(),
            auth: None,
            legacy: None,
            strict_accept: true,
            protocol_version: None,
            extra_tools: Vec::new(),
            answer_timeout: Duration::from_secs(10),
            unknown_session_status: 404,
            capabilities: None,
            get_delay: Duration::ZERO,
            stateless: false,
        }
    }
}

impl Script {
    /// Reply this way to `key` (a method, or `tools/call:TOOL`).
    pub fn reply(mut self, key: &str, r: Reply) -> Script {
        self.replies.insert(key.to_owned(), r);
        self
    }
    pub fn fail(mut self, rpc_method: Option<&str>, status: u16, times: usize) -> Script {
        self.fails.push(Fail {
            rpc_method: rpc_method.map(str::to_owned),
            status,
            remaining: times,
            rpc_error: None,
            body: None,
        });
        self
    }
    /// Like [`Script::fail`], with a JSON-RPC error body: addressed to the
    /// request (`to_request`) or with `"id": null`.
    pub fn fail_rpc(
        mut self,
        rpc_method: Option<&str>,
        status: u16,
        times: usize,
        error: &str,
        to_request: bool,
    ) -> Script {
        self.fails.push(Fail {
            rpc_method: rpc_method.map(str::to_owned),
            status,
            remaining: times,
            rpc_error: Some((error.to_owned(), to_request)),
            body: None,
        });
        self
    }
    /// Like [`Script::fail`], with this body and Content-Type.
    pub fn fail_body(
        mut self,
        rpc_method: Option<&str>,
        status: u16,
        times: usize,
        content_type: &str,
        body: &str,
    ) -> Script {
        self.fails.push(Fail {
            rpc_method: rpc_method.map(str::to_owned),
            status,
            remaining: times,
            rpc_error: None,
            body: Some((content_type.to_owned(), body.to_owned())),
        });
        self
    }
    /// A server of both eras: the handshake revisions and 2026-07-28.
    pub fn stateless() -> Script {
        Script {
            stateless: true,
            ..Script::default()
        }
    }
    pub fn legacy(status: u16) -> Script {
        Script {
            legacy: Some(status),
            ..Script::default()
        }
    }

    fn reply_for(&self, method: &str, tool: Option<&str>) -> Reply {
        tool.and_then(|t| self.replies.get(&format!("{method}:{t}")))
            .or_else(|| self.replies.get(method))
            .cloned()
            .unwrap_or_else(|| self.default_reply.clone())
    }
}

// ---------------------------------------------------------------------------
// The server handle

/// A running fault server; stopped on drop.
pub struct FaultServer {
    pub addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultServer {
    pub fn start() -> FaultServer {
        FaultServer::with(Script::default())
    }

    pub fn with(script: Script) -> FaultServer {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let shared = Arc::new(Shared::new(script));
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("http-fault".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
                    tokio::select! {
                        r = axum::serve(listener, app) => {
                            if let Err(e) = r { eprintln!("fault server: {e}"); }
                        }
                        _ = stopped => {}
                    }
                });
                rt.shutdown_background();
            })
            .unwrap();
        FaultServer {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The Streamable HTTP endpoint (also the legacy SSE URL).
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Changes the script.
    pub fn script(&self, f: impl FnOnce(&mut Script)) {
        f(&mut self.shared.script.lock().unwrap());
    }

    /// Every session id issued so far become unknown: requests carrying
    /// one are answered 404.
    pub fn expire_session(&self) {
        self.shared.sessions.lock().unwrap().valid.clear();
    }

    /// Ends every live legacy event stream, as a server restart or a proxy
    /// timeout would; how many there were.
    pub fn drop_legacy_streams(&self) -> usize {
        self.shared.drop_legacy_streams()
    }

    /// Session ids issued, oldest first.
    pub fn sessions_issued(&self) -> Vec<String> {
        self.shared.sessions.lock().unwrap().issued.clone()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.log.lock().unwrap().clone()
    }

    /// POSTs of this JSON-RPC method.
    pub fn rpc(&self, method: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_rpc(method))
            .collect()
    }

    pub fn with_method(&self, http_method: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == http_method)
            .collect()
    }

    /// When each POST stream was cut, by stream id.
    pub fn cuts(&self) -> Vec<(String, Instant)> {
        self.shared.cuts.lock().unwrap().clone()
    }

    /// Sends a message on every open standalone GET stream; how many.
    pub fn push_standalone(&self, msg: &Value) -> usize {
        let ids = self.shared.standalone.lock().unwrap().clone();
        let text = msg.to_string();
        ids.iter()
            .filter(|sid| self.shared.emit(sid, Some(&text), None) && self.shared.is_live(sid))
            .count()
    }

    /// POST response streams (SSE) whose client is still reading.
    pub fn live_post_streams(&self) -> usize {
        let streams = self.shared.streams.lock().unwrap();
        streams
            .iter()
            .filter(|(sid, s)| {
                sid.starts_with('s') && s.live.as_ref().is_some_and(|tx| !tx.is_closed())
            })
            .count()
    }

    /// Sends a notification on every open `subscriptions/listen` stream,
    /// its `_meta` subscriptionId set; how many.
    pub fn push_listen(&self, method: &str, mut params: Value) -> usize {
        let listens = self.shared.listens.lock().unwrap().clone();
        listens
            .iter()
            .filter(|(sid, id)| {
                params["_meta"]["io.modelcontextprotocol/subscriptionId"] = id.clone();
                let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
                self.shared.is_live(sid) && self.shared.emit(sid, Some(&msg.to_string()), None)
            })
            .count()
    }

    /// Ends every open `subscriptions/listen` stream abruptly; how many.
    pub fn cut_listen(&self, how: Cut) -> usize {
        let listens = self.shared.listens.lock().unwrap().clone();
        let mut n = 0;
        for (sid, _) in listens.iter().filter(|(sid, _)| self.shared.is_live(sid)) {
            self.shared.cut(sid, how);
            n += 1;
        }
        n
    }

    /// `subscriptions/listen` streams whose client is still reading.
    pub fn live_listens(&self) -> usize {
        let listens = self.shared.listens.lock().unwrap().clone();
        listens
            .iter()
            .filter(|(sid, _)| self.shared.is_live(sid))
            .count()
    }

    /// Standalone GET streams currently open.
    pub fn open_standalone(&self) -> usize {
        let ids = self.shared.standalone.lock().unwrap().clone();
        ids.iter().filter(|s| self.shared.is_live(s)).count()
    }

    pub fn started(&self) -> Instant {
        self.shared.started
    }

    /// The log, one line per request, for failure messages.
    pub fn summary(&self) -> String {
        let start = self.shared.started;
        let lines: Vec<String> = self.requests().iter().map(|r| r.line(start)).collect();
        format!("{} requests:\n  {}", lines.len(), lines.join("\n  "))
    }

    /// The first request matching `pred`; past `deadline`, the test fails.
    fn received(
        &self,
        what: &str,
        limit: Duration,
        deadline: Instant,
        pred: impl Fn(&Recorded) -> bool,
    ) -> Option<Recorded> {
        let found = self.requests().into_iter().find(|r| pred(r));
        if found.is_none() && Instant::now() >= deadline {
            panic!("{what}: not received within {limit:?}; {}", self.summary());
        }
        found
    }

    /// Waits (async) for a request matching `pred`.
    pub async fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        pred: impl Fn(&Recorded) -> bool,
    ) -> Recorded {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(r) = self.received(what, limit, deadline, &pred) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits (blocking the thread) for a request matching `pred`.
    pub fn wait_for_blocking(
        &self,
        what: &str,
        limit: Duration,
        pred: impl Fn(&Recorded) -> bool,
    ) -> Recorded {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(r) = self.received(what, limit, deadline, &pred) {
                return r;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------
// Shared state

type Chunk = Result<Bytes, std::io::Error>;

struct Stream {
    /// Events with ids, for replay: full event text.
    events: Vec<String>,
    live: Option<mpsc::UnboundedSender<Chunk>>,
    /// The response was sent: a replay closes after it.
    done: bool,
    /// Resuming GETs get a new priming event and are closed (`Reply::poll`).
    poll: bool,
}

#[derive(Default)]
struct Sessions {
    valid: Vec<String>,
    issued: Vec<String>,
}

struct Shared {
    started: Instant,
    log: Mutex<Vec<Recorded>>,
    script: Mutex<Script>,
    sessions: Mutex<Sessions>,
    streams: Mutex<HashMap<String, Stream>>,
    next: AtomicUsize,
    /// Server requests waiting for the client's answer, by id text.
    answers: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    cuts: Mutex<Vec<(String, Instant)>>,
    standalone: Mutex<Vec<String>>,
    /// `subscriptions/listen` streams and their request ids.
    listens: Mutex<Vec<(String, Value)>>,
}

impl Shared {
    fn new(script: Script) -> Shared {
        Shared {
            started: Instant::now(),
            log: Mutex::new(Vec::new()),
            script: Mutex::new(script),
            sessions: Mutex::new(Sessions::default()),
            streams: Mutex::new(HashMap::new()),
            next: AtomicUsize::new(1),
            answers: Mutex::new(HashMap::new()),
            cuts: Mutex::new(Vec::new()),
            standalone: Mutex::new(Vec::new()),
            listens: Mutex::new(Vec::new()),
        }
    }

    fn next_id(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    fn script(&self) -> Script {
        self.script.lock().unwrap().clone()
    }

    fn record(&self, parts: &Parts, body: &[u8]) -> usize {
        let mut log = self.log.lock().unwrap();
        let seq = log.len();
        log.push(Recorded {
            seq,
            method: parts.method.to_string(),
            path: parts
                .uri
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_else(|| parts.uri.path().to_owned()),
            headers: parts
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_ascii_lowercase(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: String::from_utf8_lossy(body).into_owned(),
            at: Instant::now(),
            status: None,
        });
        seq
    }

    fn set_status(&self, seq: usize, status: StatusCode) {
        if let Some(r) = self.log.lock().unwrap().get_mut(seq) {
            r.status = Some(status.as_u16());
        }
    }

    // --- SSE streams ---

    fn open(&self, prefix: &str) -> (String, Body) {
        let (tx, rx) = mpsc::unbounded_channel::<Chunk>();
        let sid = format!("{prefix}{}", self.next_id());
        self.streams.lock().unwrap().insert(
            sid.clone(),
            Stream {
                events: Vec::new(),
                live: Some(tx),
                done: false,
                poll: false,
            },
        );
        (sid, body_of(rx))
    }

    fn is_live(&self, sid: &str) -> bool {
        self.streams
            .lock()
            .unwrap()
            .get(sid)
            .is_some_and(|s| s.live.as_ref().is_some_and(|tx| !tx.is_closed()))
    }

    /// Writes raw text (a comment, or an id-less event) to the live stream.
    fn write_raw(&self, sid: &str, text: &str) {
        let mut streams = self.streams.lock().unwrap();
        if let Some(s) = streams.get_mut(sid)
            && let Some(tx) = &s.live
            && tx.send(Ok(Bytes::from(text.to_owned()))).is_err()
        {
            s.live = None;
        }
    }

    /// Appends an event with an id (`data: None` is a priming event) and
    /// sends it if the stream is live. False if there is no such stream.
    fn emit(&self, sid: &str, data: Option<&str>, retry: Option<u64>) -> bool {
        let mut streams = self.streams.lock().unwrap();
        let Some(s) = streams.get_mut(sid) else {
            return false;
        };
        let mut text = format!("id: {sid}-{}\n", s.events.len());
        if let Some(ms) = retry {
            text.push_str(&format!("retry: {ms}\n"));
        }
        match data {
            Some(d) => text.push_str(&format!("event: message\ndata: {d}\n\n")),
            None => text.push_str("data:\n\n"),
        }
        s.events.push(text.clone());
        if let Some(tx) = &s.live
            && tx.send(Ok(Bytes::from(text))).is_err()
        {
            s.live = None;
        }
        true
    }

    fn cut(&self, sid: &str, how: Cut) {
        let mut streams = self.streams.lock().unwrap();
        if let Some(s) = streams.get_mut(sid)
            && let Some(tx) = s.live.take()
            && how == Cut::Abort
        {
            let _ = tx.send(Err(std::io::Error::other("fault server: stream aborted")));
        }
        drop(streams);
        self.cuts
            .lock()
            .unwrap()
            .push((sid.to_owned(), Instant::now()));
    }

    fn set_poll(&self, sid: &str) {
        if let Some(s) = self.streams.lock().unwrap().get_mut(sid) {
            s.poll = true;
        }
    }

    fn drop_legacy_streams(&self) -> usize {
        let mut streams = self.streams.lock().unwrap();
        let mut n = 0;
        for (sid, st) in streams.iter_mut() {
            if sid.starts_with('l') && st.live.take().is_some() {
                n += 1;
            }
        }
        n
    }

    /// The response went out: close the live connection (if any).
    fn complete(&self, sid: &str) {
        let mut streams = self.streams.lock().unwrap();
        if let Some(s) = streams.get_mut(sid) {
            s.done = true;
            s.live = None;
        }
    }

    /// A GET with `Last-Event-ID`: replay what followed it, then go live.
    fn resume(&self, last_event_id: &str) -> Option<Body> {
        let (sid, idx) = last_event_id.rsplit_once('-')?;
        let idx: usize = idx.parse().ok()?;
        let mut streams = self.streams.lock().unwrap();
        let s = streams.get_mut(sid)?;
        let (tx, rx) = mpsc::unbounded_channel::<Chunk>();
        if s.poll && !s.done {
            // A new priming event, and the stream ends.
            let text = format!("id: {sid}-{}\ndata:\n\n", s.events.len());
            s.events.push(text.clone());
            let _ = tx.send(Ok(Bytes::from(text)));
            return Some(body_of(rx));
        }
        for e in s.events.iter().skip(idx + 1) {
            let _ = tx.send(Ok(Bytes::from(e.clone())));
        }
        if !s.done {
            s.live = Some(tx);
        }
        Some(body_of(rx))
    }

    // --- sessions ---

    fn new_session(&self) -> String {
        let id = format!("fault-{}-{:x}", self.next_id(), rand_ish());
        let mut s = self.sessions.lock().unwrap();
        s.valid.push(id.clone());
        s.issued.push(id.clone());
        id
    }

    /// `None` if the request may go on, else the status to answer.
    fn check_session(&self, headers: &HeaderMap, script: &Script) -> Option<StatusCode> {
        if !script.sessions {
            return None;
        }
        match headers.get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            None => Some(StatusCode::BAD_REQUEST),
            Some(id) if self.sessions.lock().unwrap().valid.iter().any(|v| v == id) => None,
            Some(_) => Some(StatusCode::from_u16(script.unknown_session_status).unwrap()),
        }
    }

    // --- MCP ---

    async fn compute(&self, method: &str, params: &Value, script: &Script) -> Result<Value, Value> {
        match method {
            "initialize" => {
                let asked = params["protocolVersion"].as_str().unwrap_or("");
                let version = match &script.protocol_version {
                    Some(v) => v.clone(),
                    None if VERSIONS.contains(&asked) => asked.to_owned(),
                    None if script.legacy.is_some() && asked == LEGACY_VERSION => asked.to_owned(),
                    None => LATEST.to_owned(),
                };
                Ok(json!({
                    "protocolVersion": version,
                    "capabilities": script.capabilities.clone().unwrap_or_else(
                        || json!({ "tools": { "listChanged": true }, "logging": {} })),
                    "serverInfo": { "name": SERVER_NAME, "version": "1.0.0" },
                }))
            }
            "ping" | "logging/setLevel" | "resources/subscribe" | "resources/unsubscribe" => {
                Ok(json!({}))
            }
            "tools/list" => {
                let mut tools = vec![
                    json!({"name": "echo", "description": "Returns its arguments as text",
                           "inputSchema": {"type": "object"}}),
                    json!({"name": "slow", "description": "Sleeps `ms` milliseconds (default 1000)",
                           "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}}}),
                    json!({"name": "big", "description": "Returns `bytes` bytes of text",
                           "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}}}}),
                ];
                if script.stateless {
                    tools.push(
                        json!({"name": "route", "description": "Echoes; region and n go in headers",
                        "inputSchema": {"type": "object", "properties": {
                            "region": {"type": "string", "x-mcp-header": "Region"},
                            "n": {"type": "integer", "x-mcp-header": "N"},
                            "text": {"type": "string"}}}}),
                    );
                }
                for t in &script.extra_tools {
                    tools.push(json!({"name": t, "inputSchema": {"type": "object"}}));
                }
                Ok(json!({ "tools": tools }))
            }
            "server/discover" if script.stateless => Ok(json!({
                "supportedVersions": [STATELESS_VERSION],
                "capabilities": script.capabilities.clone().unwrap_or_else(
                    || json!({ "tools": {}, "resources": {}, "prompts": {} })),
                "_meta": { "io.modelcontextprotocol/serverInfo":
                           { "name": SERVER_NAME, "version": "1.0.0" } },
            })),
            "resources/read" if script.stateless => {
                let uri = params["uri"].as_str().unwrap_or("");
                Ok(json!({ "contents": [ { "uri": uri, "text": format!("contents of {uri}") } ] }))
            }
            "prompts/get" if script.stateless => {
                let name = params["name"].as_str().unwrap_or("");
                Ok(json!({ "messages": [ { "role": "user",
                    "content": { "type": "text", "text": format!("prompt {name}") } } ] }))
            }
            "tools/call" => {
                let args = params.get("arguments").cloned().unwrap_or(json!({}));
                let text = match params["name"].as_str().unwrap_or("") {
                    "echo" => args.to_string(),
                    "route" if script.stateless => args.to_string(),
                    "slow" => {
                        let ms = args["ms"].as_u64().unwrap_or(1000);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        format!("slept {ms} ms")
                    }
                    "big" => "x".repeat(args["bytes"].as_u64().unwrap_or(1 << 20) as usize),
                    t if script.extra_tools.iter().any(|x| x == t) => t.to_owned(),
                    other => {
                        return Err(
                            json!({"code": -32602, "message": format!("unknown tool {other:?}")}),
                        );
                    }
                };
                Ok(json!({ "content": [ { "type": "text", "text": text } ] }))
            }
            other => Err(json!({"code": -32601, "message": format!("method not found: {other}")})),
        }
    }

    /// A client's answer to one of our requests.
    fn deliver_answer(&self, msg: &Value) {
        let key = msg["id"].to_string();
        if let Some(tx) = self.answers.lock().unwrap().remove(&key) {
            let _ = tx.send(msg.clone());
        }
    }

    /// Sends a server request on a stream and waits for the answer.
    async fn ask(&self, sid: &str, method: &str, timeout: Duration, comments: bool) {
        let id = format!("srv-{}", self.next_id());
        let (tx, rx) = oneshot::channel();
        self.answers
            .lock()
            .unwrap()
            .insert(json!(id).to_string(), tx);
        let params = if method == "roots/list" || method == "ping" {
            json!({})
        } else {
            json!({"message": "fault server asks"})
        };
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if comments {
            self.write_raw(sid, ": keep-alive\n\n");
        }
        self.emit(sid, Some(&msg.to_string()), None);
        let _ = tokio::time::timeout(timeout, rx).await;
    }

    /// Writes a POST's SSE stream: priming, notifications, server requests,
    /// an optional cut, then the response.
    async fn run_post_stream(
        self: Arc<Self>,
        sid: String,
        reply: Reply,
        script: Script,
        id: Value,
        method: String,
        params: Value,
    ) {
        let comment = |s: &Shared| {
            if reply.comments {
                s.write_raw(&sid, ": keep-alive\n\n");
            }
        };
        if let Some(ms) = reply.retry_ms {
            comment(&self);
            self.emit(&sid, None, Some(ms));
        }
        if reply.poll {
            // Closed now; each resuming GET gets a new priming event and
            // is closed too, until the response is there.
            if reply.retry_ms.is_none() {
                self.emit(&sid, None, None);
            }
            self.set_poll(&sid);
            self.cut(&sid, Cut::Close);
        }
        for raw in &reply.raw_first {
            self.write_raw(&sid, raw);
        }
        for n in &reply.notify_first {
            comment(&self);
            self.emit(&sid, Some(&n.to_string()), None);
        }
        if reply.progress
            && let Some(tok) = params.get("_meta").and_then(|m| m.get("progressToken"))
        {
            let n = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                           "params": {"progressToken": tok, "progress": 1, "total": 2, "message": "half way"}});
            comment(&self);
            self.emit(&sid, Some(&n.to_string()), None);
        }
        for m in &reply.ask_first {
            self.ask(&sid, m, script.answer_timeout, reply.comments)
                .await;
        }
        if let Some(how) = reply.cut {
            // Let the events above leave before the cut.
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.cut(&sid, how);
        }
        match reply.keep_alive {
            Some(every) => {
                let until = tokio::time::Instant::now() + reply.delay;
                while tokio::time::Instant::now() < until {
                    tokio::time::sleep(every).await;
                    self.write_raw(&sid, ": keep-alive\n\n");
                }
            }
            None => tokio::time::sleep(reply.delay).await,
        }
        let out = self.compute(&method, &params, &script).await;
        comment(&self);
        self.emit(&sid, Some(&response(&id, out).to_string()), None);
        self.complete(&sid);
    }
}

fn rand_ish() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn body_of(rx: mpsc::UnboundedReceiver<Chunk>) -> Body {
    Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (c, rx))
    }))
}

fn response(id: &Value, out: Result<Value, Value>) -> Value {
    match out {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
    }
}

fn plain(status: StatusCode, text: &str) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(Body::from(text.to_owned()))
        .unwrap()
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(v.to_string()))
        .unwrap()
}

fn sse_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap()
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap()
}

// ---------------------------------------------------------------------------
// HTTP

async fn handle(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 256 << 20)
        .await
        .unwrap_or_default();
    let seq = s.record(&parts, &bytes);
    let resp = respond(&s, &parts, &bytes).await;
    s.set_status(seq, resp.status());
    resp
}

async fn respond(s: &Arc<Shared>, parts: &Parts, body: &[u8]) -> Response {
    let script = s.script();
    if let Some(auth) = &script.auth {
        let want = format!("Bearer {}", auth.token);
        let got = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if got != Some(want.as_str()) {
            let mut r = plain(status(auth.status), "unauthorized");
            if auth.status == 401 {
                r.headers_mut().insert(
                    "www-authenticate",
                    "Bearer realm=\"fault-server\"".parse().unwrap(),
                );
            }
            return r;
        }
    }
    if let Some(post_status) = script.legacy {
        return legacy(s, parts, body, post_status, &script).await;
    }
    match parts.method {
        Method::POST => post(s, parts, body, &script).await,
        Method::GET => get(s, parts, &script),
        Method::DELETE => {
            if let Some(st) = s.check_session(&parts.headers, &script) {
                return plain(st, "session");
            }
            if script.delete_status == 200
                && let Some(id) = parts
                    .headers
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
            {
                s.sessions.lock().unwrap().valid.retain(|v| v != id);
            }
            plain(status(script.delete_status), "")
        }
        _ => plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}

fn accepts(headers: &HeaderMap, what: &str) -> bool {
    headers
        .get_all("accept")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|p| p.trim().starts_with(what)))
}

/// Takes one use of the first matching fail rule.
fn take_fail(s: &Shared, method: Option<&str>, tool: Option<&str>) -> Option<Fail> {
    let mut script = s.script.lock().unwrap();
    let keyed = match (method, tool) {
        (Some(m), Some(t)) => Some(format!("{m}:{t}")),
        _ => None,
    };
    let f = script.fails.iter_mut().find(|f| {
        f.remaining > 0
            && match &f.rpc_method {
                None => true,
                Some(m) => Some(m.as_str()) == method || Some(m) == keyed.as_ref(),
            }
    })?;
    if f.remaining != usize::MAX {
        f.remaining -= 1;
    }
    Some(f.clone())
}

/// The answer a fail rule makes to a message with this `id`.
fn failed(f: &Fail, id: Option<&Value>) -> Response {
    match &f.rpc_error {
        Some((error, to_request)) => {
            let id = match id {
                Some(id) if *to_request => id.to_string(),
                _ => "null".to_owned(),
            };
            let mut r = plain(
                status(f.status),
                &format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#),
            );
            r.headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            r
        }
        None => match &f.body {
            Some((ct, body)) => {
                let mut r = plain(status(f.status), body);
                r.headers_mut().insert("content-type", ct.parse().unwrap());
                r
            }
            None => plain(status(f.status), &format!("injected HTTP {}", f.status)),
        },
    }
}

/// How servers say a session is unknown: the TypeScript SDK's 404 (a
/// JSON-RPC error with `"id": null`), or server-everything's 400 (its error
/// addressed to the request).
fn session_error(code: StatusCode, id: Option<&Value>) -> Response {
    if code == StatusCode::NOT_FOUND {
        return json_response(
            code,
            &json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32001, "message": "Session not found"}}),
        );
    }
    json_response(
        code,
        &json!({"jsonrpc": "2.0", "id": id.cloned().unwrap_or(Value::Null),
                "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"}}),
    )
}

async fn post(s: &Arc<Shared>, parts: &Parts, body: &[u8], script: &Script) -> Response {
    if script.strict_accept
        && !(accepts(&parts.headers, "application/json")
            && accepts(&parts.headers, "text/event-stream"))
    {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "Accept must include application/json and text/event-stream",
        );
    }
    let ctype = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !ctype.starts_with("application/json") {
        return plain(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be JSON",
        );
    }
    let Ok(msg) = serde_json::from_slice::<Value>(body) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}}),
        );
    };
    if !msg.is_object() {
        return plain(StatusCode::BAD_REQUEST, "batches are not supported here");
    }
    let method = msg["method"].as_str().map(str::to_owned);
    let tool = msg["params"]["name"].as_str();
    if let Some(f) = take_fail(s, method.as_deref(), tool) {
        return failed(&f, msg.get("id"));
    }
    let is_init = method.as_deref() == Some("initialize");
    let stateless = script.stateless
        && parts
            .headers
            .get("mcp-protocol-version")
            .is_some_and(|v| v == STATELESS_VERSION);
    if !is_init
        && !stateless
        && let Some(st) = s.check_session(&parts.headers, script)
    {
        return session_error(st, msg.get("id"));
    }
    if !stateless
        && let Some(v) = parts.headers.get("mcp-protocol-version")
        && !VERSIONS.contains(&v.to_str().unwrap_or(""))
    {
        return plain(StatusCode::BAD_REQUEST, "unsupported MCP-Protocol-Version");
    }
    let Some(method) = method else {
        // A response to one of our requests.
        s.deliver_answer(&msg);
        return plain(StatusCode::ACCEPTED, "");
    };
    let Some(id) = msg.get("id").cloned() else {
        // A notification.
        return plain(StatusCode::ACCEPTED, "");
    };
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    if stateless && method == "subscriptions/listen" {
        let (sid, body) = s.open("L");
        let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id},
                       "notifications": params.get("notifications").cloned().unwrap_or(json!({}))}});
        s.emit(&sid, Some(&ack.to_string()), None);
        s.listens.lock().unwrap().push((sid, id));
        return sse_response(body);
    }
    let reply = script.reply_for(&method, tool);
    let session = (is_init && script.sessions).then(|| s.new_session());
    let mut resp = if reply.sse {
        let (sid, body) = s.open("s");
        tokio::spawn(
            s.clone()
                .run_post_stream(sid, reply, script.clone(), id, method, params),
        );
        sse_response(body)
    } else if let Some(body) = &reply.body {
        let mut r = plain(StatusCode::OK, body);
        let ct = reply.content_type.as_deref().unwrap_or("application/json");
        r.headers_mut().insert("content-type", ct.parse().unwrap());
        r
    } else {
        tokio::time::sleep(reply.delay).await;
        let out = s.compute(&method, &params, script).await;
        json_response(StatusCode::OK, &response(&id, out))
    };
    if let Some(id) = session {
        resp.headers_mut()
            .insert("mcp-session-id", id.parse().unwrap());
    }
    resp
}

fn get(s: &Arc<Shared>, parts: &Parts, script: &Script) -> Response {
    if script.strict_accept && !accepts(&parts.headers, "text/event-stream") {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "Accept must include text/event-stream",
        );
    }
    if let Some(st) = s.check_session(&parts.headers, script) {
        return session_error(st, None);
    }
    if let Some(last) = parts
        .headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
    {
        return match s.resume(last) {
            Some(body) => sse_response(body),
            None => plain(StatusCode::BAD_REQUEST, "unknown Last-Event-ID"),
        };
    }
    match script.get {
        GetMode::Status(code) => plain(status(code), "no standalone stream"),
        GetMode::Stream => {
            let (sid, body) = s.open("g");
            s.write_raw(&sid, ": standalone stream open\n\n");
            s.standalone.lock().unwrap().push(sid);
            sse_response(body)
        }
    }
}

// ---------------------------------------------------------------------------
// Legacy HTTP+SSE (2024-11-05)

async fn legacy(
    s: &Arc<Shared>,
    parts: &Parts,
    body: &[u8],
    post_status: u16,
    script: &Script,
) -> Response {
    let path = parts.uri.path();
    match (&parts.method, path) {
        (&Method::POST, "/messages") => {
            let sid = parts
                .uri
                .query()
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("sessionId="))
                .unwrap_or("")
                .to_owned();
            if !s.streams.lock().unwrap().contains_key(&sid) {
                return plain(StatusCode::NOT_FOUND, "unknown sessionId");
            }
            let Ok(msg) = serde_json::from_slice::<Value>(body) else {
                return plain(StatusCode::BAD_REQUEST, "parse error");
            };
            let method = msg["method"].as_str().map(str::to_owned);
            let tool = msg["params"]["name"].as_str();
            if let Some(f) = take_fail(s, method.as_deref(), tool) {
                return failed(&f, msg.get("id"));
            }
            match (method, msg.get("id").cloned()) {
                (None, _) => s.deliver_answer(&msg),
                (Some(_), None) => {}
                (Some(method), Some(id)) => {
                    let s = s.clone();
                    let script = script.clone();
                    let reply = script.reply_for(&method, tool);
                    let params = msg.get("params").cloned().unwrap_or(json!({}));
                    tokio::spawn(async move {
                        tokio::time::sleep(reply.delay).await;
                        let out = s.compute(&method, &params, &script).await;
                        let text = response(&id, out).to_string();
                        s.write_raw(&sid, &format!("event: message\ndata: {text}\n\n"));
                    });
                }
            }
            plain(StatusCode::ACCEPTED, "Accepted")
        }
        (&Method::POST, _) => plain(status(post_status), "this is a legacy HTTP+SSE server"),
        (&Method::GET, _) => {
            if script.strict_accept && !accepts(&parts.headers, "text/event-stream") {
                return plain(
                    StatusCode::NOT_ACCEPTABLE,
                    "Accept must include text/event-stream",
                );
            }
            tokio::time::sleep(script.get_delay).await;
            let (sid, body) = s.open("l");
            s.write_raw(
                &sid,
                &format!("event: endpoint\ndata: /messages?sessionId={sid}\n\n"),
            );
            sse_response(body)
        }
        _ => plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}
