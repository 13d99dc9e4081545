//! HTTP transports: Streamable HTTP (2025-03-26 … 2025-11-25) and the legacy
//! HTTP+SSE transport (2024-11-05), behind the same [`Connection`] as stdio;
//! requests of the stateless revision (2026-07-28, [`Outbound::stateless`]) take
//! their own path beside them (`stateless.rs`).
//!
//! The peer above never sees HTTP. Everything HTTP-specific stays here:
//! one POST per message, JSON or SSE answers, the session id and its
//! transparent renewal when lost, `MCP-Protocol-Version`, resumption of broken
//! streams by GET with `Last-Event-ID`, the optional GET stream, DELETE on
//! shutdown, and detection of the legacy transport.
//!
//! A failed HTTP exchange fails only the requests it carried
//! ([`TransportEvent::Failed`]). The connection closes when the server is
//! unreachable, refuses our credentials (401/403, `auth_required`), or when
//! a dropped legacy event stream cannot be opened again.

mod legacy;
mod sse;
mod stateless;
pub use sse::error_chain;
#[doc(hidden)]
pub use sse::fuzz_sse;
mod streamable;

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span, debug, info_span, warn};
use url::Url;

use super::{BoxFuture, CloseReason, Connection, Outbound, TransportControl, TransportEvent};
use mcphost_protocol::Id;

/// Which HTTP transport to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpMode {
    /// Streamable HTTP, falling back to legacy HTTP+SSE when the server
    /// answers the first POST with 400, 404 or 405 (never on 401/403).
    #[default]
    Auto,
    Streamable,
    /// Legacy HTTP+SSE (2024-11-05), without detection.
    Sse,
}

impl HttpMode {
    /// As `servers` shows it (and the config's `type` spells it); `http`
    /// is auto-detection that has not decided yet.
    pub fn label(self) -> &'static str {
        match self {
            HttpMode::Auto => "http",
            HttpMode::Streamable => "streamable-http",
            HttpMode::Sse => "sse",
        }
    }
}

/// How to reach one HTTP server.
#[derive(Clone)]
pub struct HttpConfig {
    pub url: String,
    /// Sent on every request (after interpolation), e.g. `Authorization`.
    pub headers: Vec<(String, String)>,
    pub mode: HttpMode,
    pub connect_timeout: Duration,
    /// Limit for the handshake's HTTP steps: the `initialize` POST and its
    /// answer (also when a session is renewed), and opening the legacy
    /// event stream up to its `endpoint` event.
    pub init_timeout: Duration,
    /// Limit for one JSON body or one SSE event.
    pub max_message_bytes: usize,
    /// Limit for exchanges that carry no request of ours: notifications,
    /// our answers, DELETE, and the wait for the legacy `endpoint` event.
    pub send_timeout: Duration,
    /// OAuth: the bearer token of every request, and what to do on 401/403.
    pub credentials: Option<Arc<dyn Credentials>>,
}

/// A 401 or 403, as the credentials see it.
#[derive(Debug, Clone)]
pub struct Challenged {
    pub status: u16,
    /// Every `WWW-Authenticate` value.
    pub www_authenticate: Vec<String>,
    /// The access token the refused request carried.
    pub sent: Option<String>,
    pub protocol_version: Option<String>,
    /// The `DPoP-Nonce` the refusal came with (RFC 9449 §9).
    pub dpop_nonce: Option<String>,
    /// The nonce the refused request's DPoP proof carried.
    pub sent_dpop_nonce: Option<String>,
}

/// The credentials of one request: the `Authorization` value and, for a
/// DPoP-bound token, the proof for this method and URL.
pub struct Presented {
    /// The access token itself, to tell a refused token from a new one.
    pub token: String,
    pub authorization: String,
    pub dpop: Option<String>,
    /// The server nonce the proof carries.
    pub dpop_nonce: Option<String>,
}

/// The nonce a response asks for: its `DPoP-Nonce` header, if it is one
/// a header can carry back (RFC 9449 §8.1: NQCHAR).
pub fn dpop_nonce(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get("dpop-nonce")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.chars().all(|c| c == '!' || ('#'..='~').contains(&c)))
        .map(str::to_owned)
}

/// Where the transport gets its tokens (OAuth: `mcphost::auth`).
pub trait Credentials: Send + Sync {
    /// The credentials for the next request to `method url`, if there are any.
    fn authorization<'a>(
        &'a self,
        method: &'a reqwest::Method,
        url: &'a url::Url,
    ) -> BoxFuture<'a, Option<Presented>>;
    /// A request was refused. `Ok`: send it again (a new token is there);
    /// `Err`: why not, for the error the server's state shows.
    fn challenged<'a>(&'a self, c: &'a Challenged) -> BoxFuture<'a, Result<(), String>>;
    /// What a person can do about it, for messages.
    fn login_hint(&self) -> String;
    /// A request carrying `token` was not refused: what a refusal counted
    /// against this token (a step-up for more scope) is settled.
    fn accepted(&self, _token: &str) {}
}

/// Times one request is sent again after a 401/403 before the refusal
/// stands (a refresh, then a sign-in, then one step-up).
const MAX_AUTH_RETRIES: usize = 3;

impl HttpConfig {
    pub fn new(url: impl Into<String>) -> Self {
        HttpConfig {
            url: url.into(),
            headers: Vec::new(),
            mode: HttpMode::Auto,
            connect_timeout: Duration::from_secs(10),
            init_timeout: Duration::from_secs(60),
            max_message_bytes: 64 * 1024 * 1024,
            send_timeout: Duration::from_secs(30),
            credentials: None,
        }
    }
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values and query strings often carry secrets.
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("HttpConfig")
            .field("url", &redact_url(&self.url))
            .field("headers", &names)
            .field("mode", &self.mode)
            .field("oauth", &self.credentials.is_some())
            .finish_non_exhaustive()
    }
}

fn redact_url(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?<redacted>"),
        None => url.to_owned(),
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    #[error("server '{server}': {url:?} is not a valid http(s) URL: {reason}")]
    InvalidUrl {
        server: String,
        url: String,
        reason: String,
    },
    #[error(
        "server '{server}': {url:?} is an https URL, but this build of mcphost has no TLS \
         (built without feature `tls`)"
    )]
    NoTls { server: String, url: String },
    #[error("server '{server}': header {name:?} is not a valid HTTP header {what}")]
    InvalidHeader {
        server: String,
        name: String,
        what: &'static str,
    },
    #[error("server '{server}': cannot build the HTTP client: {reason}")]
    Client { server: String, reason: String },
    #[error("server '{server}': {reason}")]
    Connect {
        server: String,
        reason: String,
        /// 401/403: the credentials were refused.
        auth_required: bool,
    },
}

/// Start a transport to `cfg.url`. Streamable HTTP (and auto-detection)
/// connects lazily, with the client's `initialize`; legacy SSE opens its
/// event stream here and waits for the `endpoint` event.
pub async fn connect(name: &str, cfg: HttpConfig) -> Result<Connection, HttpError> {
    let url = Url::parse(&cfg.url)
        .map_err(|e| e.to_string())
        .and_then(|u| match u.scheme() {
            "http" | "https" => Ok(u),
            s => Err(format!("the scheme is {s:?}")),
        })
        .map_err(|reason| HttpError::InvalidUrl {
            server: name.to_owned(),
            url: redact_url(&cfg.url),
            reason,
        })?;
    check_tls(name, &url, TLS)?;
    let mut headers = HeaderMap::new();
    for (k, v) in &cfg.headers {
        let invalid = |what| HttpError::InvalidHeader {
            server: name.to_owned(),
            name: k.clone(),
            what,
        };
        let key = HeaderName::from_bytes(k.as_bytes()).map_err(|_| invalid("name"))?;
        let mut value = HeaderValue::from_str(v).map_err(|_| invalid("value"))?;
        value.set_sensitive(true);
        headers.insert(key, value);
    }
    let http = reqwest::Client::builder()
        .connect_timeout(cfg.connect_timeout)
        .default_headers(headers)
        .user_agent(concat!("mcphost/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| HttpError::Client {
            server: name.to_owned(),
            reason: sse::error_chain(&e),
        })?;

    let (out_tx, out_rx) = mpsc::channel::<Outbound>(64);
    let (in_tx, in_rx) = mpsc::channel::<TransportEvent>(256);
    let (done_tx, done_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        span: info_span!("http", server = name),
        http,
        url,
        limit: cfg.max_message_bytes,
        send_timeout: cfg.send_timeout,
        init_timeout: cfg.init_timeout,
        mode: cfg.mode,
        inbound: in_tx,
        renewed: watch::channel(None).0,
        state: Mutex::new(State::default()),
        reinit: tokio::sync::Mutex::new(()),
        kind: AtomicU8::new(KIND_UNDETECTED),
        stop: CancellationToken::new(),
        tasks: TaskTracker::new(),
        closed: AtomicBool::new(false),
        credentials: cfg.credentials.clone(),
        auth_note: Mutex::new(None),
    });
    if cfg.mode == HttpMode::Sse {
        legacy::start(&shared)
            .await
            .map_err(|(reason, auth_required)| HttpError::Connect {
                server: name.to_owned(),
                reason,
                auth_required,
            })?;
    }
    let driver = shared.clone();
    let span = shared.span.clone();
    tokio::spawn(
        async move {
            driver.clone().drive(out_rx).await;
            let _ = done_tx.send(true);
        }
        .instrument(span),
    );
    Ok(Connection {
        outbound: out_tx,
        inbound: in_rx,
        control: Arc::new(HttpControl {
            shared,
            done: done_rx,
        }),
    })
}

/// Whether this build speaks TLS (feature `tls`, on by default).
const TLS: bool = cfg!(feature = "tls");

/// Refuses an https URL when `tls` is false, naming the server, instead of
/// the client's own error at the first request. `tls` is a parameter so that
/// both answers are tested in either build.
fn check_tls(server: &str, url: &Url, tls: bool) -> Result<(), HttpError> {
    if url.scheme() == "https" && !tls {
        return Err(HttpError::NoTls {
            server: server.to_owned(),
            url: redact_url(url.as_str()),
        });
    }
    Ok(())
}

const KIND_UNDETECTED: u8 = 0;
const KIND_STREAMABLE: u8 = 1;
const KIND_SSE: u8 = 2;

/// Wait before resuming a stream whose server gave no `retry`.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
/// Resume attempts in a row that bring no new event before a request fails.
const MAX_RESUME_ATTEMPTS: u32 = 5;
/// How much of an error body goes into an error message.
const ERROR_BODY_CHARS: usize = 300;

struct Shared {
    span: Span,
    http: reqwest::Client,
    url: Url,
    limit: usize,
    send_timeout: Duration,
    init_timeout: Duration,
    mode: HttpMode,
    inbound: mpsc::Sender<TransportEvent>,
    /// The server's answer to each `initialize` sent again on our own
    /// (a renewed session), for the client to take up.
    renewed: watch::Sender<Option<Arc<str>>>,
    state: Mutex<State>,
    /// Serialises session renewal, so a burst of 404s renews once.
    reinit: tokio::sync::Mutex<()>,
    kind: AtomicU8,
    /// Cancels every task of this transport.
    stop: CancellationToken,
    tasks: TaskTracker,
    closed: AtomicBool,
    credentials: Option<Arc<dyn Credentials>>,
    /// Why the credentials could not answer the last 401/403.
    auth_note: Mutex<Option<String>>,
}

#[derive(Default)]
struct State {
    session: Option<String>,
    /// The negotiated revision, sent as `MCP-Protocol-Version` once known.
    version: Option<String>,
    /// The client's `initialize`, kept to renew an expired session.
    init: Option<(Id, String)>,
    /// The standalone GET stream, restarted with each session.
    get_stream: Option<tokio::task::AbortHandle>,
    /// Legacy transport: where messages are POSTed.
    endpoint: Option<Url>,
    /// Streamable HTTP: the task reading each request's answer.
    in_flight: std::collections::HashMap<Id, tokio::task::AbortHandle>,
    /// The session a request was last accepted on: only an established
    /// session can be lost (see `streamable::judge`).
    accepted: Option<String>,
    /// Legacy transport: requests whose answers are due on the event
    /// stream, failed when it drops.
    awaiting: Vec<Id>,
    /// Revision 2026-07-28: the task of each request in flight, aborted to
    /// cancel it (which closes its response stream).
    stateless: std::collections::HashMap<Id, tokio::task::AbortHandle>,
    /// A server answered a request of revision 2026-07-28 as one of that
    /// revision would.
    stateless_answered: bool,
    /// Session state the server forgets with the session (resource
    /// subscriptions, the log level): requests to send again, in order,
    /// after a renewal: what they set, their id, their text.
    replay: Vec<(String, Id, String)>,
}

/// What the transport needs to know of an outgoing message.
struct OutMsg {
    text: String,
    method: Option<String>,
    /// Ids of the requests it carries (one, or several in a batch).
    requests: Vec<Id>,
}

#[derive(Deserialize)]
struct Probe {
    #[serde(default)]
    jsonrpc: Option<String>,
    #[serde(default)]
    id: Option<Id>,
    #[serde(default)]
    method: Option<String>,
}

/// The id and method of each message in a frame (one, or a batch).
fn probes(text: &str) -> Vec<Probe> {
    if text.trim_start().starts_with('[') {
        serde_json::from_str(text).unwrap_or_default()
    } else {
        serde_json::from_str(text)
            .map(|p| vec![p])
            .unwrap_or_default()
    }
}

impl OutMsg {
    fn classify(text: String) -> Self {
        let probes = probes(&text);
        let method = match probes.as_slice() {
            [p] => p.method.clone(),
            _ => None,
        };
        let requests = probes
            .into_iter()
            .filter(|p| p.method.is_some())
            .filter_map(|p| p.id)
            .collect();
        OutMsg {
            text,
            method,
            requests,
        }
    }
}

/// The id of a response (not a request) in an incoming frame. Without
/// `"jsonrpc":"2.0"` an object is noise to the peer, so it answers nothing.
fn response_ids(data: &str) -> Vec<Id> {
    probes(data)
        .into_iter()
        .filter(|p| p.method.is_none() && p.jsonrpc.as_deref() == Some("2.0"))
        .filter_map(|p| p.id)
        .collect()
}

fn same_id(a: &Id, b: &Id) -> bool {
    a == b || matches!((a.as_number(), b.as_number()), (Some(x), Some(y)) if x == y)
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    fn session(&self) -> Option<String> {
        self.state().session.clone()
    }

    async fn emit(&self, ev: TransportEvent) {
        if !self.closed.load(Ordering::SeqCst) {
            let _ = self.inbound.send(ev).await;
        }
    }

    /// Fail the requests an exchange carried; the connection stays up.
    async fn fail(&self, ids: &[Id], reason: &str) {
        if ids.is_empty() {
            warn!("{reason}");
        }
        for id in ids {
            debug!(%id, "request failed: {reason}");
            self.emit(TransportEvent::Failed {
                id: id.clone(),
                reason: reason.to_owned(),
            })
            .await;
        }
    }

    /// The answer to these requests was over the size limit and discarded.
    async fn oversized(&self, ids: Vec<Id>) {
        for id in ids {
            self.emit(TransportEvent::Oversized {
                limit: self.limit,
                id: Some(id),
            })
            .await;
        }
    }

    /// Close the connection once, and stop every task.
    async fn close(&self, reason: CloseReason) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        if reason.auth_required {
            warn!("{}", reason.summary);
        } else {
            debug!("closed: {}", reason.summary);
        }
        let _ = self.inbound.send(TransportEvent::Closed(reason)).await;
        self.stop.cancel();
    }

    fn spawn(
        self: &Arc<Self>,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> tokio::task::AbortHandle {
        let stop = self.stop.clone();
        self.tasks
            .spawn(
                async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = fut => {}
                    }
                }
                .instrument(self.span.clone()),
            )
            .abort_handle()
    }

    /// "HTTP 503 Service Unavailable from http://…: <body>"
    async fn status_error(&self, resp: reqwest::Response) -> String {
        let status = resp.status();
        let url = redact_url(resp.url().as_str());
        let body = read_snippet(resp).await;
        status_message(status, &url, &body)
    }

    /// 401/403: the server wants credentials we do not have.
    async fn auth_failed(&self, resp: reqwest::Response) {
        let challenge = resp
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(|v| format!(" (WWW-Authenticate: {v})"))
            .unwrap_or_default();
        let what = self.status_error(resp).await;
        let note = self.auth_note.lock().take();
        let summary = match (&self.credentials, note) {
            (Some(_), Some(n)) => format!("{what}{challenge}; {n}"),
            (Some(c), None) => format!("{what}{challenge}; {}", c.login_hint()),
            (None, _) => auth_message(&what, &challenge),
        };
        self.close(CloseReason {
            summary,
            auth_required: true,
            ..CloseReason::default()
        })
        .await;
    }

    /// The server cannot be reached at all: close, so the supervisor shows
    /// it and retries with backoff.
    async fn unreachable(&self, e: &reqwest::Error) {
        self.close(CloseReason::new(self.cannot_reach(e))).await;
    }

    fn cannot_reach(&self, e: &reqwest::Error) -> String {
        let what = if e.is_timeout() { "timed out: " } else { "" };
        format!(
            "cannot reach {}: {what}{}",
            redact_url(self.url.as_str()),
            sse::error_chain(e)
        )
    }

    /// Send a request to the server: with the bearer token when there are
    /// credentials, and again after a 401/403 they could answer.
    async fn send(&self, req: reqwest::RequestBuilder) -> reqwest::Result<reqwest::Response> {
        let Some(creds) = &self.credentials else {
            return req.send().await;
        };
        let mut retries = 0;
        loop {
            // A streamed body cannot be sent twice: no retry then.
            let Some(attempt) = req.try_clone() else {
                return req.send().await;
            };
            let (client, request) = attempt.build_split();
            let mut request = request?;
            let presented = creds.authorization(request.method(), request.url()).await;
            if let Some(p) = &presented {
                let sensitive = |s: &str| {
                    HeaderValue::from_str(s).ok().map(|mut v| {
                        v.set_sensitive(true);
                        v
                    })
                };
                if let Some(v) = sensitive(&p.authorization) {
                    request.headers_mut().insert(header::AUTHORIZATION, v);
                }
                if let Some(v) = p.dpop.as_deref().and_then(sensitive) {
                    request.headers_mut().insert("dpop", v);
                }
            }
            let resp = client.execute(request).await?;
            if !is_auth_status(resp.status()) {
                if let Some(p) = &presented {
                    creds.accepted(&p.token);
                }
                return Ok(resp);
            }
            if retries >= MAX_AUTH_RETRIES {
                return Ok(resp);
            }
            let challenged = Challenged {
                status: resp.status().as_u16(),
                www_authenticate: resp
                    .headers()
                    .get_all(header::WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok().map(str::to_owned))
                    .collect(),
                dpop_nonce: dpop_nonce(resp.headers()),
                sent_dpop_nonce: presented.as_ref().and_then(|p| p.dpop_nonce.clone()),
                sent: presented.map(|p| p.token),
                protocol_version: self.state().version.clone(),
            };
            match creds.challenged(&challenged).await {
                Ok(()) => retries += 1,
                Err(note) => {
                    *self.auth_note.lock() = Some(note);
                    return Ok(resp);
                }
            }
        }
    }

    async fn drive(self: Arc<Self>, mut outbound: mpsc::Receiver<Outbound>) {
        loop {
            let out = tokio::select! {
                _ = self.stop.cancelled() => break,
                m = outbound.recv() => match m {
                    Some(t) => t,
                    None => break,
                },
            };
            let msg = OutMsg::classify(out.text);
            let step = async {
                if let Some(headers) = &out.stateless {
                    stateless::send(&self, msg, headers).await;
                } else if stateless::takes(&self, &msg) {
                    // cancelled by closing its stream, or nothing to send
                } else if self.kind.load(Ordering::SeqCst) == KIND_SSE {
                    legacy::send(&self, msg).await;
                } else {
                    streamable::send(&self, msg).await;
                }
            };
            // Every step is bounded by its own timeout; stop cuts it short.
            tokio::select! {
                _ = self.stop.cancelled() => break,
                _ = step => {}
            }
        }
        self.finish().await;
    }

    /// Orderly end: stop the tasks, end the session, report `Closed`.
    async fn finish(self: &Arc<Self>) {
        let was_closed = self.closed.load(Ordering::SeqCst);
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        if !was_closed && self.kind.load(Ordering::SeqCst) != KIND_SSE {
            streamable::end_session(self).await;
        }
        self.close(CloseReason::new("shut down by mcphost")).await;
    }
}

/// `fut`, unless `deadline` passes first (`None`: never, as when the
/// deadline overflowed): for several steps under one deadline; a single
/// step is `tokio::time::timeout`.
async fn within<F: std::future::Future>(
    deadline: Option<tokio::time::Instant>,
    fut: F,
) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
        None => Some(fut.await),
    }
}

fn deadline_after(d: Duration) -> Option<tokio::time::Instant> {
    tokio::time::Instant::now().checked_add(d)
}

fn status_message(status: StatusCode, url: &str, body: &str) -> String {
    let mut s = format!("HTTP {status} from {url}");
    if !body.is_empty() {
        s.push_str(": ");
        s.push_str(body);
    }
    s
}

fn auth_message(what: &str, challenge: &str) -> String {
    format!(
        "{what}{challenge}; the server wants credentials: the server's \"headers\" (e.g. \"Authorization\": \"Bearer ${{TOKEN}}\") were refused or absent, and OAuth sign-in is off for it (\"oauth\": false, or its own Authorization header)"
    )
}

/// The first few hundred characters of a body, on one line.
async fn read_snippet(mut resp: reqwest::Response) -> String {
    let mut buf = Vec::new();
    while buf.len() < ERROR_BODY_CHARS * 4 {
        match resp.chunk().await {
            Ok(Some(c)) => buf.extend_from_slice(&c),
            _ => break,
        }
    }
    snippet(&String::from_utf8_lossy(&buf))
}

/// The first few hundred characters of a text, on one line.
fn snippet(text: &str) -> String {
    let one_line: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(ERROR_BODY_CHARS)
        .collect();
    // A server's escape sequences do not reach the user's terminal.
    let mut s = mcphost_protocol::escape_controls(&one_line);
    if text.chars().count() > ERROR_BODY_CHARS {
        s.push('…');
    }
    s
}

/// Read a whole body, refusing more than `limit` bytes.
async fn read_limited(mut resp: reqwest::Response, limit: usize) -> Result<String, BodyError> {
    let mut buf = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(BodyError::Http)? {
        if buf.len() + chunk.len() > limit {
            return Err(BodyError::Oversized);
        }
        buf.extend_from_slice(&chunk);
    }
    String::from_utf8(buf).map_err(|_| BodyError::NotUtf8)
}

enum BodyError {
    Http(reqwest::Error),
    Oversized,
    NotUtf8,
}

/// What a response's Content-Type says it carries.
#[derive(Debug, PartialEq, Eq)]
enum BodyKind {
    Json,
    EventStream,
    Empty,
    Other(String),
}

fn body_kind(resp: &reqwest::Response) -> BodyKind {
    let ct = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        });
    match ct.as_deref() {
        Some("application/json") => BodyKind::Json,
        Some("text/event-stream") => BodyKind::EventStream,
        _ if resp.status() == StatusCode::ACCEPTED
            || resp.status() == StatusCode::NO_CONTENT
            || resp.content_length() == Some(0) =>
        {
            BodyKind::Empty
        }
        Some(other) => BodyKind::Other(other.to_owned()),
        None => BodyKind::Empty,
    }
}

fn is_auth_status(s: StatusCode) -> bool {
    s == StatusCode::UNAUTHORIZED || s == StatusCode::FORBIDDEN
}

struct HttpControl {
    shared: Arc<Shared>,
    done: watch::Receiver<bool>,
}

impl TransportControl for HttpControl {
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // The driver sees the cancel, ends the session and closes.
            self.shared.stop.cancel();
            let mut done = self.done.clone();
            let _ = done.wait_for(|d| *d).await;
        })
    }

    fn stderr_tail(&self, _n: usize) -> Vec<String> {
        Vec::new()
    }

    fn pid(&self) -> Option<u32> {
        None
    }

    fn renewals(&self) -> Option<watch::Receiver<Option<Arc<str>>>> {
        Some(self.shared.renewed.subscribe())
    }

    fn kind(&self) -> &'static str {
        let detected = match self.shared.kind.load(Ordering::SeqCst) {
            KIND_STREAMABLE => HttpMode::Streamable,
            KIND_SSE => HttpMode::Sse,
            _ => HttpMode::Auto,
        };
        detected.label()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_cannot_drive_the_terminal() {
        let s = snippet("{\"error\":\"x\u{1b}]52;c;aGk=\u{7}\u{9b}31m\"}");
        assert!(!s.chars().any(char::is_control), "{s:?}");
        assert!(s.contains("\\u{1b}"), "{s:?}");
    }

    #[test]
    fn classify_requests_notifications_and_batches() {
        let m = OutMsg::classify(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#.into());
        assert_eq!(m.method.as_deref(), Some("tools/list"));
        assert_eq!(m.requests, vec![Id::number(3)]);
        let n =
            OutMsg::classify(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into());
        assert!(n.requests.is_empty());
        let r = OutMsg::classify(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#.into());
        assert!(r.requests.is_empty() && r.method.is_none());
        let b = OutMsg::classify(
            r#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"result":1}]"#
                .into(),
        );
        assert_eq!(b.requests, vec![Id::number(1)]);
        assert_eq!(
            response_ids(r#"{"jsonrpc":"2.0","id":"7","result":{}}"#),
            vec![Id::string("7")]
        );
        assert!(response_ids(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_empty());
        assert!(same_id(&Id::string("7"), &Id::number(7)));
    }

    #[test]
    fn an_object_without_jsonrpc_on_a_stream_answers_no_request() {
        // A log line shaped like a response must not end request 7's stream.
        assert!(response_ids(r#"{"id":7,"level":"info"}"#).is_empty());
        assert!(response_ids(r#"{"jsonrpc":"1.0","id":7,"result":{}}"#).is_empty());
        assert_eq!(
            response_ids(r#"[{"id":1,"result":1},{"jsonrpc":"2.0","id":2,"result":1}]"#),
            vec![Id::number(2)]
        );
    }

    #[test]
    fn https_needs_a_tls_build() {
        let https = Url::parse("https://h/mcp?key=secret").unwrap();
        let e = check_tls("remote", &https, false).unwrap_err().to_string();
        assert!(e.contains("server 'remote'") && e.contains("no TLS"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        check_tls("remote", &https, true).unwrap();
        let http = Url::parse("http://h/mcp").unwrap();
        check_tls("local", &http, false).unwrap();
    }

    /// The check is wired into `connect`: refused without TLS, accepted
    /// (lazily, nothing is sent) with it.
    #[tokio::test]
    async fn connect_to_https_follows_the_build() {
        let cfg = HttpConfig::new("https://127.0.0.1:9/mcp");
        let outcome = match connect("remote", cfg).await {
            Err(HttpError::NoTls { server, .. }) => {
                assert_eq!(server, "remote");
                "refused"
            }
            Ok(conn) => {
                conn.control.shutdown().await;
                "accepted"
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(outcome, if TLS { "accepted" } else { "refused" });
    }

    #[test]
    fn debug_hides_secrets() {
        let mut c = HttpConfig::new("https://h/mcp?key=secret");
        c.headers
            .push(("Authorization".into(), "Bearer tok".into()));
        let d = format!("{c:?}");
        assert!(!d.contains("secret") && !d.contains("tok"), "{d}");
        assert!(d.contains("Authorization"));
    }
}
