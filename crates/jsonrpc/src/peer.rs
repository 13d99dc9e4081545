//! The JSON-RPC peer: allocates ids, keeps the pending map, enforces
//! timeouts, sends cancellations, routes progress, answers `ping` and hands
//! server→client requests to a [`RequestHandler`].

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span, warn};

use super::decode::{DecodeError, Incoming, decode};
use mcphost_protocol::{
    ErrorObject, Id, Message, Notification, Request, Response, empty_object, error_codes, methods,
    raw_field, set_fields, to_raw,
};
use mcphost_transport::feed::{Feed, FeedReceiver};
use mcphost_transport::{BoxFuture, CloseReason, Outbound, Stream, TransportEvent};

/// Limits that apply to every request unless [`RequestOptions`] overrides them.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Name used in logs and errors, normally the server's name.
    pub name: String,
    /// Per-request timeout; progress notifications may restart it.
    pub timeout: Duration,
    /// Hard maximum for one request, progress or not.
    pub max_timeout: Duration,
    /// Answer malformed input with -32700/-32600, as a JSON-RPC server must.
    /// Off for MCP servers' output, whose junk lines are only logged.
    pub answer_invalid: bool,
}

impl PeerConfig {
    pub fn new(name: impl Into<String>) -> Self {
        PeerConfig {
            name: name.into(),
            timeout: Duration::from_secs(60),
            max_timeout: Duration::from_secs(600),
            answer_invalid: false,
        }
    }
}

/// One `notifications/progress` for a request we sent: its params exactly as
/// the server sent them (what a relay forwards), and the fields read from them.
#[derive(Debug, Clone)]
pub struct Progress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
    /// The notification's params, untouched; `progressToken` is ours.
    pub params: Box<RawValue>,
}

#[derive(Deserialize)]
struct ProgressFields {
    progress: f64,
    #[serde(default)]
    total: Option<f64>,
    #[serde(default)]
    message: Option<String>,
}

pub type ProgressCallback = Arc<dyn Fn(Progress) + Send + Sync>;

/// Per-request knobs.
#[derive(Clone)]
pub struct RequestOptions {
    pub timeout: Option<Duration>,
    pub max_timeout: Option<Duration>,
    /// Called for each progress notification; setting it adds a progressToken.
    pub on_progress: Option<ProgressCallback>,
    /// Whether progress restarts the timeout (bounded by `max_timeout`).
    /// Progress only flows when `on_progress` is set.
    pub reset_timeout_on_progress: bool,
    /// Cancelling it abandons the request and notifies the server.
    pub cancel: Option<CancellationToken>,
    /// `initialize` must never be cancelled.
    pub cancellable: bool,
    /// The client request that caused this one (set by the engine), so a
    /// server request that arrives while it is in flight can be routed back.
    pub origin: Option<Origin>,
    /// The stateless revision's header values, for the transport.
    pub stateless: Option<Box<mcphost_transport::StatelessHeaders>>,
    /// Set to the id the request goes out under (a `subscriptions/listen`
    /// stream is known by it).
    pub sent_as: Option<Arc<std::sync::OnceLock<i64>>>,
    /// The other side may end this request with a `notifications/cancelled`
    /// naming its id (a stateless `subscriptions/listen` stream). Any other
    /// cancel names a request of its sender and never ends one of ours.
    pub ended_by_cancel: bool,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            timeout: None,
            max_timeout: None,
            on_progress: None,
            reset_timeout_on_progress: true,
            cancel: None,
            cancellable: true,
            origin: None,
            stateless: None,
            sent_as: None,
            ended_by_cancel: false,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum PeerError {
    #[error("timed out after {elapsed:.1?}; notifications/cancelled was sent")]
    Timeout { method: String, elapsed: Duration },
    #[error("cancelled by the caller; notifications/cancelled was sent")]
    Cancelled { method: String },
    #[error("connection closed: {0}")]
    Closed(Arc<CloseReason>),
    #[error("error response: {0}")]
    Rpc(ErrorObject),
    #[error("the response exceeded the {limit}-byte message limit and was discarded")]
    Oversized { limit: usize },
    #[error("{0}")]
    Transport(String),
    #[error("invalid response: {0}")]
    InvalidResponse(String),
    #[error("cannot encode request: {0}")]
    Encode(String),
    #[error("the outbound queue is full: the other side is not reading")]
    QueueFull,
}

/// A client request of one engine session: what caused a request we send.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The engine session.
    pub session: u64,
    /// The client's own request id on that session.
    pub request: Id,
}

/// Which of our requests a server→client request belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relation {
    /// It came while `0` was in flight and the wire ties it to that call
    /// (Streamable HTTP: the POST's stream), or only one session had calls
    /// in flight (stdio).
    Caused(Origin),
    /// Nothing of a session caused it: it came on the standalone stream, or
    /// no call with an origin was in flight.
    Unrelated,
    /// The wire does not say and calls of several sessions were in flight;
    /// one per session, oldest call first.
    Ambiguous(Vec<Origin>),
}

/// A server→client request handed to the host.
#[derive(Debug)]
pub struct IncomingRequest {
    pub id: Id,
    pub method: String,
    pub params: Option<Box<RawValue>>,
    pub relation: Relation,
    /// The transport said which stream it came on (Streamable HTTP), so
    /// `relation` is proven by the wire; otherwise (stdio) it is only what
    /// was in flight when it arrived.
    pub by_wire: bool,
}

/// Answers server→client requests (other than `ping`, which the peer answers).
pub trait RequestHandler: Send + Sync + 'static {
    fn handle(
        &self,
        request: IncomingRequest,
    ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>>;
}

/// Refuses every request with -32601.
pub struct NoHandler;

impl RequestHandler for NoHandler {
    fn handle(&self, r: IncomingRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        Box::pin(std::future::ready(Err(ErrorObject::method_not_found(
            &r.method,
        ))))
    }
}

type Reply = Result<Box<RawValue>, PeerError>;

struct PendingEntry {
    tx: oneshot::Sender<Reply>,
    progress: Option<mpsc::UnboundedSender<Progress>>,
    origin: Option<Origin>,
    ended_by_cancel: bool,
    /// Requests of the other side's that this one caused and that are being
    /// answered (a host asked for a person's input): its deadline is held.
    held: usize,
}

#[derive(Default)]
struct State {
    pending: HashMap<i64, PendingEntry>,
    incoming: HashMap<Id, AbortHandle>,
    close_reason: Option<Arc<CloseReason>>,
    /// The other side's requests being answered and the requests of ours
    /// they hold (see [`Hold`]), by a key of their own.
    holds: Vec<HoldEntry>,
    next_hold: u64,
}

struct HoldEntry {
    key: u64,
    /// Our requests still pending that it may belong to.
    ids: Vec<i64>,
    /// One of them was abandoned (cancelled, timed out, dropped).
    abandoned: bool,
    withdraw: CancellationToken,
}

impl State {
    /// Our request `id` ended: once every request a hold may belong to has
    /// ended and one of them was abandoned, the request it holds is
    /// withdrawn (its answer is not waited for).
    fn ended(&mut self, id: i64, abandoned: bool) {
        for h in &mut self.holds {
            let before = h.ids.len();
            h.ids.retain(|i| *i != id);
            if h.ids.len() != before {
                h.abandoned |= abandoned;
                if h.ids.is_empty() && h.abandoned {
                    h.withdraw.cancel();
                }
            }
        }
    }
}

/// Lines from the other side that are not JSON-RPC (banners, log lines):
/// the first is logged at warn, later ones are counted and summarised at
/// most once per [`NOISE_SUMMARY_EVERY`], so a chatty server cannot flood
/// the log.
#[derive(Default)]
struct Noise {
    last_warned: Option<Instant>,
    since_warned: u64,
}

const NOISE_SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// Notifications a subscriber may fall behind by before it loses the oldest.
const NOTIFICATION_BACKLOG: usize = 1024;

struct Inner {
    cfg: PeerConfig,
    noise: Mutex<Noise>,
    next_id: AtomicI64,
    outbound: mpsc::Sender<Outbound>,
    state: Mutex<State>,
    /// A feed, not a broadcast channel: nothing is allocated for a server
    /// whose notifications nobody is behind on.
    notifications: Feed<Arc<Notification>>,
    closed: CancellationToken,
    handler: Arc<dyn RequestHandler>,
    /// Bumped whenever a pending request's `held` count changes, so the
    /// requests in flight look at their own.
    holds: tokio::sync::watch::Sender<u64>,
}

/// A cloneable handle to one JSON-RPC connection.
#[derive(Clone)]
pub struct Peer {
    inner: Arc<Inner>,
}

impl Peer {
    /// Start the read loop over a transport's channels.
    pub fn start(
        cfg: PeerConfig,
        outbound: mpsc::Sender<Outbound>,
        inbound: mpsc::Receiver<TransportEvent>,
        handler: Arc<dyn RequestHandler>,
    ) -> Peer {
        Peer::start_after(cfg, outbound, inbound, handler, |_| {})
    }

    /// As [`Peer::start`], running `first` before any line is read: a
    /// handler that reaches its peer through a slot `first` fills finds it
    /// filled on the first request, however soon that arrives.
    pub fn start_after(
        cfg: PeerConfig,
        outbound: mpsc::Sender<Outbound>,
        inbound: mpsc::Receiver<TransportEvent>,
        handler: Arc<dyn RequestHandler>,
        first: impl FnOnce(&Peer),
    ) -> Peer {
        let notifications = Feed::new(NOTIFICATION_BACKLOG);
        let inner = Arc::new(Inner {
            cfg,
            noise: Mutex::default(),
            next_id: AtomicI64::new(0),
            outbound,
            state: Mutex::new(State::default()),
            notifications,
            closed: CancellationToken::new(),
            handler,
            holds: tokio::sync::watch::Sender::new(0),
        });
        let span = debug_span!("peer", server = %inner.cfg.name);
        let peer = Peer { inner };
        first(&peer);
        tokio::spawn(read_loop(peer.inner.clone(), inbound).instrument(span));
        peer
    }

    pub fn name(&self) -> &str {
        &self.inner.cfg.name
    }

    /// Send a request and wait for its result.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        opts: RequestOptions,
    ) -> Result<Box<RawValue>, PeerError> {
        let inner = &self.inner;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = &opts.sent_as {
            let _ = s.set(id);
        }
        // A progress token changes what the server sees, so only ask for
        // progress when someone listens.
        let wants_progress = opts.on_progress.is_some();
        let params = if wants_progress {
            Some(with_progress_token(params.as_deref(), id).map_err(PeerError::Encode)?)
        } else {
            params
        };
        let (mut rx, mut prx, mut guard) = self.register(id, &opts, wants_progress)?;
        let line = Message::Request(Request {
            id: Id::number(id),
            method: method.to_owned(),
            params,
        })
        .to_line();
        let line = Outbound {
            text: line,
            stateless: opts.stateless,
        };
        let span = debug_span!("request", server = %inner.cfg.name, method, id);
        async move {
            debug!("sending");
            let timeout = opts.timeout.unwrap_or(inner.cfg.timeout);
            let start = Instant::now();
            let mut holds = inner.holds.subscribe();
            let mut deadlines = Deadlines::new(
                start,
                timeout,
                opts.max_timeout.unwrap_or(inner.cfg.max_timeout).max(timeout),
            );
            let cancel = opts.cancel;
            let cancelled = cancelled_or_never(cancel.as_ref());
            tokio::pin!(cancelled);
            let sleep = tokio::time::sleep_until(deadlines.deadline);
            tokio::pin!(sleep);
            // A server that stops reading fills the queue; the deadline and
            // the cancel token cover that wait too. Nothing reached the wire
            // yet, so there is nothing to cancel there.
            let unsent = tokio::select! {
                sent = inner.outbound.send(line) => match sent {
                    Ok(()) => None,
                    Err(_) => Some(PeerError::Closed(inner.close_reason_or_default())),
                },
                _ = &mut sleep => Some(PeerError::Timeout {
                    method: method.to_owned(),
                    elapsed: start.elapsed(),
                }),
                _ = &mut cancelled => Some(PeerError::Cancelled { method: method.to_owned() }),
            };
            if let Some(e) = unsent {
                guard.disarm();
                inner.lock().pending.remove(&id);
                return Err(e);
            }
            // A hold may have begun before this request subscribed.
            holds.mark_changed();
            loop {
                tokio::select! {
                    reply = &mut rx => {
                        guard.disarm();
                        // Progress sent before the response must reach the
                        // caller before the call returns.
                        if let (Some(prx), Some(cb)) = (prx.as_mut(), &opts.on_progress) {
                            while let Ok(p) = prx.try_recv() {
                                cb(p);
                            }
                        }
                        return reply.unwrap_or_else(|_| Err(PeerError::Closed(inner.close_reason_or_default())));
                    }
                    Ok(()) = holds.changed() => {
                        let held = inner.lock().pending.get(&id).is_some_and(|p| p.held > 0);
                        if let Some(at) = deadlines.held(held, Instant::now()) {
                            sleep.as_mut().reset(at);
                        }
                    }
                    Some(p) = recv_progress(&mut prx) => {
                        if opts.reset_timeout_on_progress
                            && let Some(at) = deadlines.progressed(Instant::now())
                        {
                            sleep.as_mut().reset(at);
                        }
                        if let Some(cb) = &opts.on_progress {
                            cb(p);
                        }
                    }
                    _ = &mut sleep => {
                        let elapsed = start.elapsed();
                        guard.abandon(&format!("timed out after {elapsed:?}"));
                        return Err(PeerError::Timeout { method: method.to_owned(), elapsed });
                    }
                    _ = &mut cancelled => {
                        guard.abandon("cancelled by the client");
                        return Err(PeerError::Cancelled { method: method.to_owned() });
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Puts request `id` in the pending map, unless the peer is closed.
    fn register(
        &self,
        id: i64,
        opts: &RequestOptions,
        wants_progress: bool,
    ) -> Result<Registered, PeerError> {
        let inner = &self.inner;
        let (tx, rx) = oneshot::channel();
        let (ptx, prx) = if wants_progress {
            let (a, b) = mpsc::unbounded_channel();
            (Some(a), Some(b))
        } else {
            (None, None)
        };
        {
            // Checked under the same lock `close` takes, so an entry is never
            // added after the pending map was drained.
            let mut st = inner.lock();
            if let Some(reason) = st.close_reason.clone() {
                return Err(PeerError::Closed(reason));
            }
            st.pending.insert(
                id,
                PendingEntry {
                    tx,
                    progress: ptx,
                    origin: opts.origin.clone(),
                    ended_by_cancel: opts.ended_by_cancel,
                    held: 0,
                },
            );
        }
        let guard = PendingGuard {
            inner: inner.clone(),
            id,
            armed: true,
            cancellable: opts.cancellable,
        };
        Ok((rx, prx, guard))
    }

    /// Send a notification.
    pub async fn notify(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<(), PeerError> {
        let line = Message::Notification(Notification {
            method: method.to_owned(),
            params,
        })
        .to_line();
        self.inner
            .outbound
            .send(line.into())
            .await
            .map_err(|_| PeerError::Closed(self.inner.close_reason_or_default()))
    }

    /// Send a notification without waiting: a full queue means the other
    /// side stopped reading, and the caller decides what to do about it.
    pub fn try_notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), PeerError> {
        let line = Message::Notification(Notification {
            method: method.to_owned(),
            params,
        })
        .to_line();
        self.inner
            .outbound
            .try_send(line.into())
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => PeerError::QueueFull,
                mpsc::error::TrySendError::Closed(_) => {
                    PeerError::Closed(self.inner.close_reason_or_default())
                }
            })
    }

    /// Notifications from the server, except progress (routed to requests).
    /// Bounded: a receiver more than 1,024 behind gets `Lagged(n)`; all get
    /// `Closed` once the connection has closed.
    pub fn subscribe(&self) -> FeedReceiver<Arc<Notification>> {
        self.inner.notifications.subscribe()
    }

    /// Resolves when the connection has closed.
    pub async fn closed(&self) {
        self.inner.closed.cancelled().await
    }

    pub fn close_reason(&self) -> Option<Arc<CloseReason>> {
        self.inner.lock().close_reason.clone()
    }

    /// Requests we sent that have not been answered yet.
    pub fn pending_count(&self) -> usize {
        self.inner.lock().pending.len()
    }
}

/// `from + d`; a timeout too large for the clock (say `Duration::MAX`)
/// means "never", and must not overflow.
/// The pending entry's receivers and the guard that removes it.
type Registered = (
    oneshot::Receiver<Reply>,
    Option<mpsc::UnboundedReceiver<Progress>>,
    PendingGuard,
);

/// The two deadlines of one request: the timeout (which progress may move)
/// and the hard maximum. While the request is held, neither runs, and the
/// hard maximum moves by as long as the hold lasted.
struct Deadlines {
    timeout: Duration,
    hard: Instant,
    deadline: Instant,
    held_since: Option<Instant>,
}

impl Deadlines {
    fn new(start: Instant, timeout: Duration, max: Duration) -> Self {
        let hard = deadline_after(start, max);
        Deadlines {
            timeout,
            hard,
            deadline: deadline_after(start, timeout).min(hard),
            held_since: None,
        }
    }

    /// The hold changed to `held`: the instant to sleep until, if it moved.
    fn held(&mut self, held: bool, now: Instant) -> Option<Instant> {
        match (held, self.held_since) {
            (true, None) => {
                debug!("the deadline is held while the caller's host answers");
                self.held_since = Some(now);
                Some(deadline_after(now, Duration::MAX))
            }
            (false, Some(since)) => {
                self.held_since = None;
                self.hard = deadline_after(self.hard, now.saturating_duration_since(since));
                self.deadline = deadline_after(now, self.timeout).min(self.hard);
                Some(self.deadline)
            }
            _ => None,
        }
    }

    /// Progress arrived: the timeout starts again (not while held).
    fn progressed(&mut self, now: Instant) -> Option<Instant> {
        if self.held_since.is_some() {
            return None;
        }
        self.deadline = deadline_after(now, self.timeout).min(self.hard);
        Some(self.deadline)
    }
}

fn deadline_after(from: Instant, d: Duration) -> Instant {
    const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    from.checked_add(d)
        .or_else(|| from.checked_add(NEVER))
        .unwrap_or(from)
}

async fn cancelled_or_never(token: Option<&CancellationToken>) {
    match token {
        Some(t) => t.cancelled().await,
        None => std::future::pending().await,
    }
}

async fn recv_progress(rx: &mut Option<mpsc::UnboundedReceiver<Progress>>) -> Option<Progress> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn with_progress_token(params: Option<&RawValue>, token: i64) -> Result<Box<RawValue>, String> {
    let meta: Option<Box<RawValue>> = match params {
        Some(p) => raw_field(p, "_meta").map_err(|e| e.to_string())?,
        None => None,
    };
    let token = to_raw(&token).map_err(|e| e.to_string())?;
    let meta = set_fields(meta.as_deref(), [("progressToken".to_owned(), token)])
        .map_err(|e| e.to_string())?;
    set_fields(params, [("_meta".to_owned(), meta)]).map_err(|e| e.to_string())
}

/// Removes the pending entry if the request future ends without a reply,
/// including when the caller drops it, and tells the server.
struct PendingGuard {
    inner: Arc<Inner>,
    id: i64,
    armed: bool,
    cancellable: bool,
}

impl PendingGuard {
    fn disarm(&mut self) {
        self.armed = false;
    }

    fn abandon(&mut self, reason: &str) {
        if !self.armed {
            return;
        }
        self.armed = false;
        let was_pending = {
            let mut st = self.inner.lock();
            let was = st.pending.remove(&self.id).is_some();
            if was {
                st.ended(self.id, true);
            }
            was
        };
        if was_pending && self.cancellable {
            self.inner.send_cancelled(self.id, reason);
        }
    }
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.abandon("request abandoned by the client");
    }
}

impl Inner {
    /// How a server request that came on `stream` (`None`: the transport
    /// cannot tell) relates to the calls in flight.
    fn relation(&self, stream: Option<&Stream>) -> Relation {
        let st = self.lock();
        match stream {
            Some(Stream::Standalone) => Relation::Unrelated,
            Some(Stream::Request(id)) => id
                .as_number()
                .and_then(|n| st.pending.get(&n))
                .and_then(|p| p.origin.clone())
                .map_or(Relation::Unrelated, Relation::Caused),
            None => {
                // Ids grow, so the lowest is the oldest call.
                let mut calls: Vec<(i64, &Origin)> = st
                    .pending
                    .iter()
                    .filter_map(|(id, p)| p.origin.as_ref().map(|o| (*id, o)))
                    .collect();
                calls.sort_by_key(|(id, _)| *id);
                let mut per_session: Vec<Origin> = Vec::new();
                for (_, o) in calls {
                    if !per_session.iter().any(|s| s.session == o.session) {
                        per_session.push(o.clone());
                    }
                }
                match per_session.len() {
                    0 => Relation::Unrelated,
                    1 => per_session
                        .pop()
                        .map_or(Relation::Unrelated, Relation::Caused),
                    _ => Relation::Ambiguous(per_session),
                }
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked mid-update of
        // plain maps; the data is still usable.
        self.state.lock()
    }

    fn noise(&self, preview: &str) {
        let mut n = self.noise.lock();
        let now = Instant::now();
        match n.last_warned {
            None => warn!(
                server = %self.cfg.name,
                "skipping output that is not JSON-RPC: {preview} (more such lines are only counted)"
            ),
            Some(at) if now.saturating_duration_since(at) >= NOISE_SUMMARY_EVERY => warn!(
                server = %self.cfg.name,
                skipped = n.since_warned,
                "skipped more output that is not JSON-RPC; the latest: {preview}"
            ),
            Some(_) => {
                n.since_warned = n.since_warned.saturating_add(1);
                debug!("skipping output that is not JSON-RPC: {preview}");
                return;
            }
        }
        n.last_warned = Some(now);
        n.since_warned = 0;
    }

    fn close_reason_or_default(&self) -> Arc<CloseReason> {
        self.lock()
            .close_reason
            .clone()
            .unwrap_or_else(|| Arc::new(CloseReason::new("the transport is gone")))
    }

    fn send_cancelled(&self, id: i64, reason: &str) {
        let params = serde_json::json!({ "requestId": id, "reason": reason });
        let Ok(params) = to_raw(&params) else { return };
        let line = Message::Notification(Notification {
            method: methods::NOTIFICATION_CANCELLED.to_owned(),
            params: Some(params),
        })
        .to_line();
        // Never block here: this runs from Drop. A full queue means the
        // server is not reading anyway.
        match self.outbound.try_send(line.into()) {
            Ok(()) => {}
            // Closing: the request ends with the connection anyway.
            Err(mpsc::error::TrySendError::Closed(_)) => {
                debug!(server = %self.cfg.name, id, "closing; notifications/cancelled not sent");
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                warn!(server = %self.cfg.name, id, "could not queue notifications/cancelled");
            }
        }
    }

    fn close(&self, reason: CloseReason) {
        let reason = Arc::new(reason);
        let (pending, incoming) = {
            let mut st = self.lock();
            if st.close_reason.is_none() {
                st.close_reason = Some(reason.clone());
            }
            (
                std::mem::take(&mut st.pending),
                std::mem::take(&mut st.incoming),
            )
        };
        for (_, p) in pending {
            let _ = p.tx.send(Err(PeerError::Closed(reason.clone())));
        }
        for (_, h) in incoming {
            h.abort();
        }
        self.closed.cancel();
        // After the last notification: subscribers learn of the close in
        // order, and one woken per arrival is woken for it too.
        self.notifications.close();
    }

    fn on_response(&self, r: Response) {
        let Some(id) = r.id else {
            if let Err(e) = r.outcome {
                warn!("error response without an id: {e}");
            }
            return;
        };
        let entry = id.as_number().and_then(|n| {
            let mut st = self.lock();
            let p = st.pending.remove(&n);
            if p.is_some() {
                st.ended(n, false);
            }
            p
        });
        match entry {
            Some(p) => {
                let _ = p.tx.send(r.outcome.map_err(PeerError::Rpc));
            }
            // While closing, an answer to a request dropped with the
            // connection (its cancel could not be sent) is expected.
            None if self.outbound.is_closed() => {
                debug!(%id, "closing; response for an abandoned request ignored")
            }
            None => warn!(%id, "response for an unknown or abandoned request id; ignored"),
        }
    }

    fn on_notification(&self, n: Notification) {
        match n.method.as_str() {
            methods::NOTIFICATION_PROGRESS => self.on_progress(n),
            methods::NOTIFICATION_CANCELLED => {
                let id = n
                    .params
                    .as_deref()
                    .and_then(|p| raw_field::<Id>(p, "requestId").ok().flatten());
                let Some(id) = id else { return };
                let incoming = self.lock().incoming.remove(&id);
                if let Some(h) = incoming {
                    debug!("the other side cancelled its request");
                    h.abort();
                    return;
                }
                // A cancel names a request of its sender's: one we are not
                // handling (already answered, say) is ignored, as the spec
                // says. Only a request sent to be ended this way (a
                // stateless `subscriptions/listen` stream) is ours to end.
                let pending = id.as_number().and_then(|n| {
                    let mut st = self.lock();
                    let ends = st.pending.get(&n).is_some_and(|p| p.ended_by_cancel);
                    if ends { st.pending.remove(&n) } else { None }
                });
                if pending.is_none() {
                    debug!(%id, "notifications/cancelled for a request we are not handling; ignored");
                }
                if let Some(p) = pending {
                    let reason = n
                        .params
                        .as_deref()
                        .and_then(|p| raw_field::<String>(p, "reason").ok().flatten())
                        .unwrap_or_default();
                    debug!(%id, "the server ended our request: {reason}");
                    let _ = p.tx.send(Err(PeerError::Transport(format!(
                        "the server ended the request (notifications/cancelled: {reason})"
                    ))));
                }
            }
            _ => {
                // No subscribers is fine: nobody cares about this kind yet.
                let _ = self.notifications.send(Arc::new(n));
            }
        }
    }

    fn on_progress(&self, n: Notification) {
        let Some(params) = n.params else {
            return;
        };
        let token = raw_field::<Id>(&params, "progressToken").ok().flatten();
        let fields = serde_json::from_str::<ProgressFields>(params.get());
        let (Some(token), Ok(f)) = (token, fields) else {
            warn!("malformed notifications/progress: {}", params.get());
            return;
        };
        let progress = Progress {
            progress: f.progress,
            total: f.total,
            message: f.message,
            params,
        };
        let st = self.lock();
        match token
            .as_number()
            .and_then(|t| st.pending.get(&t))
            .and_then(|p| p.progress.as_ref())
        {
            Some(tx) => {
                let _ = tx.send(progress);
            }
            None => debug!(%token, "progress for an unknown token"),
        }
    }

    async fn answer_error(&self, id: Option<Id>, code: i64, message: String) {
        debug!("answering malformed input: {message}");
        let reply = Message::Response(Response {
            id,
            outcome: Err(ErrorObject::new(code, message)),
        });
        self.send(reply.to_line()).await;
    }

    async fn send(&self, line: String) {
        if self.outbound.send(line.into()).await.is_err() {
            debug!("transport closed before a reply could be sent");
        }
    }
}

/// Holds the deadlines of the requests a server→client request may belong
/// to, for as long as it is being answered: the request on whose stream it
/// came, else (stdio) the in-flight requests of the session it is related
/// to. Released on drop, including when the answer is aborted.
struct Hold {
    inner: Arc<Inner>,
    key: u64,
    ids: Vec<i64>,
    withdraw: CancellationToken,
}

impl Hold {
    fn new(inner: &Arc<Inner>, stream: Option<&Stream>, relation: &Relation) -> Option<Hold> {
        let mut st = inner.lock();
        let ids: Vec<i64> = match (stream, relation) {
            (Some(Stream::Request(id)), _) => id.as_number().into_iter().collect(),
            (None, Relation::Caused(o)) => st
                .pending
                .iter()
                .filter(|(_, p)| p.origin.as_ref().is_some_and(|p| p.session == o.session))
                .map(|(id, _)| *id)
                .collect(),
            _ => Vec::new(),
        };
        let ids: Vec<i64> = ids
            .into_iter()
            .filter(|id| match st.pending.get_mut(id) {
                Some(p) => {
                    p.held = p.held.saturating_add(1);
                    true
                }
                None => false,
            })
            .collect();
        if ids.is_empty() {
            return None;
        }
        let key = st.next_hold;
        st.next_hold = st.next_hold.wrapping_add(1);
        let withdraw = CancellationToken::new();
        st.holds.push(HoldEntry {
            key,
            ids: ids.clone(),
            abandoned: false,
            withdraw: withdraw.clone(),
        });
        drop(st);
        inner.holds.send_modify(|g| *g = g.wrapping_add(1));
        Some(Hold {
            inner: inner.clone(),
            key,
            ids,
            withdraw,
        })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        {
            let mut st = self.inner.lock();
            for id in &self.ids {
                if let Some(p) = st.pending.get_mut(id) {
                    p.held = p.held.saturating_sub(1);
                }
            }
            st.holds.retain(|h| h.key != self.key);
        }
        self.inner.holds.send_modify(|g| *g = g.wrapping_add(1));
    }
}

/// Answer one server→client request that came on `stream`.
fn answer(
    inner: &Arc<Inner>,
    req: Request,
    stream: Option<&Stream>,
) -> BoxFuture<'static, Response> {
    let id = req.id.clone();
    if req.method == methods::PING {
        return Box::pin(std::future::ready(Response {
            id: Some(id),
            outcome: Ok(empty_object()),
        }));
    }
    let relation = inner.relation(stream);
    // The calls this request may belong to wait on it: their deadlines are
    // held until it is answered.
    let hold = Hold::new(inner, stream, &relation);
    let fut = inner.handler.handle(IncomingRequest {
        id: req.id,
        method: req.method,
        params: req.params,
        relation,
        by_wire: stream.is_some(),
    });
    Box::pin(async move {
        let withdrawn = async {
            match &hold {
                Some(h) => h.withdraw.cancelled().await,
                None => std::future::pending().await,
            }
        };
        // The calls it may belong to were cancelled: dropping the answer
        // withdraws the request from whoever was asked.
        let outcome = tokio::select! {
            outcome = fut => outcome,
            () = withdrawn => {
                debug!(%id, "withdrawn: the call that caused it was cancelled");
                Err(ErrorObject::new(
                    error_codes::INTERNAL_ERROR,
                    "withdrawn: the call that caused this request was cancelled",
                ))
            }
        };
        drop(hold);
        Response {
            id: Some(id),
            outcome,
        }
    })
}

async fn read_loop(inner: Arc<Inner>, mut inbound: mpsc::Receiver<TransportEvent>) {
    while let Some(ev) = inbound.recv().await {
        match ev {
            TransportEvent::Frame(text) => on_frame(&inner, &text, None).await,
            TransportEvent::FrameOn(text, stream) => on_frame(&inner, &text, Some(&stream)).await,
            TransportEvent::Oversized { limit, id } => {
                let entry = id
                    .as_ref()
                    .and_then(Id::as_number)
                    .and_then(|n| inner.lock().pending.remove(&n));
                match entry {
                    Some(p) => {
                        warn!(limit, "response exceeded the message limit");
                        let _ = p.tx.send(Err(PeerError::Oversized { limit }));
                    }
                    None => warn!(limit, ?id, "discarded a message over the size limit"),
                }
            }
            TransportEvent::Failed { id, reason } => {
                let entry = id.as_number().and_then(|n| inner.lock().pending.remove(&n));
                match entry {
                    Some(p) => {
                        let _ = p.tx.send(Err(PeerError::Transport(reason)));
                    }
                    None => warn!(?id, "transport failure for no pending request: {reason}"),
                }
            }
            TransportEvent::Closed(reason) => {
                debug!(%reason, "transport closed");
                inner.close(reason);
                return;
            }
        }
    }
    inner.close(CloseReason::new("the transport ended without saying why"));
}

async fn on_frame(inner: &Arc<Inner>, text: &str, stream: Option<&Stream>) {
    match decode(text) {
        Err(e) if inner.cfg.answer_invalid => {
            let code = match e {
                DecodeError::NotJson { .. } => error_codes::PARSE_ERROR,
                _ => error_codes::INVALID_REQUEST,
            };
            inner.answer_error(None, code, e.to_string()).await;
        }
        Err(DecodeError::NotJson { preview, .. }) => inner.noise(&preview),
        Err(e) => warn!("skipping an invalid frame: {e}"),
        Ok(Incoming::Single(Ok(msg))) => dispatch(inner, msg, stream).await,
        Ok(Incoming::Single(Err(e))) => on_invalid(inner, e, text).await,
        Ok(Incoming::Batch(items)) => {
            // Requests in a batch are answered together, in one array.
            let mut replies = Vec::new();
            for item in items {
                match item {
                    Ok(Message::Request(req)) => replies.push(answer(inner, req, stream)),
                    Ok(msg) => dispatch(inner, msg, stream).await,
                    Err(e) => on_invalid(inner, e, text).await,
                }
            }
            if !replies.is_empty() {
                let inner = inner.clone();
                tokio::spawn(async move {
                    let responses: Vec<Message> = join_all(replies)
                        .await
                        .into_iter()
                        .map(Message::Response)
                        .collect();
                    inner.send(Message::batch_line(&responses)).await;
                });
            }
        }
    }
}

async fn on_invalid(inner: &Arc<Inner>, e: DecodeError, text: &str) {
    // A malformed response to one of our requests fails that request now
    // instead of leaving it to time out.
    if let DecodeError::Invalid {
        id: Some(id),
        reason,
    } = &e
    {
        let entry = id.as_number().and_then(|n| inner.lock().pending.remove(&n));
        if let Some(p) = entry {
            let _ = p.tx.send(Err(PeerError::InvalidResponse(reason.clone())));
            return;
        }
    }
    // Never answer something that was meant as a response.
    if inner.cfg.answer_invalid && !looks_like_response(text) {
        let id = match &e {
            DecodeError::Invalid { id, .. } => id.clone(),
            _ => None,
        };
        inner
            .answer_error(id, error_codes::INVALID_REQUEST, e.to_string())
            .await;
        return;
    }
    match e {
        DecodeError::NotJsonRpc { preview } => inner.noise(&preview),
        e => warn!("skipping an invalid message: {e}"),
    }
}

fn looks_like_response(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Probe {
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Probe>(text).is_ok_and(|p| p.result.is_some() || p.error.is_some())
}

async fn dispatch(inner: &Arc<Inner>, msg: Message, stream: Option<&Stream>) {
    match msg {
        Message::Response(r) => inner.on_response(r),
        Message::Notification(n) => inner.on_notification(n),
        Message::Request(req) => {
            let id = req.id.clone();
            let method = req.method.clone();
            let fut = answer(inner, req, stream);
            let inner2 = inner.clone();
            let span = debug_span!("incoming", server = %inner.cfg.name, %method, %id);
            let mut st = inner.lock();
            let key = id.clone();
            let task = tokio::spawn(
                async move {
                    let resp = fut.await;
                    inner2.lock().incoming.remove(&key);
                    inner2.send(Message::Response(resp).to_line()).await;
                }
                .instrument(span),
            );
            st.incoming.insert(id, task.abort_handle());
        }
    }
}

#[cfg(test)]
#[path = "peer_tests.rs"]
mod tests;
