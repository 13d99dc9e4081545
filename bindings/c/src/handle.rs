//! A handle's two modes behind one request path: an engine in this process,
//! or a connection to the daemon. Both serve the same method set through
//! the same engine session code, so a host sees the same answers.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use mcphost_core::client::{CallOptions, ClientError, ClientInfo, ClientOptions, ServerClient};
use mcphost_core::config::store::ConfigStore;
use mcphost_core::daemon::StoreEditor;
use mcphost_core::engine::{Engine, EngineBuilder, HostPort, Session, SessionLimits};
use mcphost_core::jsonrpc::{PeerError, Progress};
use mcphost_core::protocol::{
    Era, ErrorObject, Id, RawValue, methods, raw_field, set_fields, to_raw,
};
use mcphost_core::registry::ServerOptions;
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;
use tracing::{Instrument, info_span};

use crate::callbacks::{CHost, HostSide};
use crate::events::{Events, notification};
use crate::status::Error;

/// What open takes from `mcphost_options`.
pub(crate) struct Settings {
    pub(crate) client_name: String,
    pub(crate) request_timeout: Duration,
    pub(crate) wait_ready: Duration,
}

enum Backend {
    Embedded {
        engine: Arc<Engine>,
        /// Taken at free: dropping the last reference ends the session.
        session: Mutex<Option<Arc<Session>>>,
    },
    Connected(Box<Link>),
}

/// The connection to the daemon, replaced when the daemon goes away and
/// one comes back (killed, upgraded, restarted by its service): the host
/// keeps its handle, only the requests in flight fail.
struct Link {
    path: PathBuf,
    opts: ClientOptions,
    /// The current connection; a new one is sent when it is replaced.
    client: tokio::sync::watch::Sender<Arc<ServerClient>>,
    /// What the host sent that made its session, sent again on a new
    /// connection (`initialize` itself is the client's own).
    replay: Mutex<Vec<(String, Box<RawValue>)>>,
}

/// How long a call made while the connection is being replaced waits for it.
const RECONNECT_WAIT: Duration = Duration::from_secs(10);
/// Between two tries to reach a daemon that went away.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
/// Most session requests kept for a replay.
const MAX_REPLAYED: usize = 64;

impl Link {
    fn current(&self) -> Arc<ServerClient> {
        self.client.borrow().clone()
    }

    /// The connection to use: the current one, or, when it has closed, the
    /// next one within [`RECONNECT_WAIT`].
    async fn usable(&self) -> Result<Arc<ServerClient>, Error> {
        let mut rx = self.client.subscribe();
        let wait = async {
            loop {
                let c = rx.borrow_and_update().clone();
                if c.close_reason().is_none() {
                    return Some(c);
                }
                rx.changed().await.ok()?;
            }
        };
        match tokio::time::timeout(RECONNECT_WAIT, wait).await {
            Ok(Some(c)) => Ok(c),
            _ => Err(Error::Closed(format!(
                "the connection to the daemon at {} closed and no daemon came back within {}s",
                self.path.display(),
                RECONNECT_WAIT.as_secs()
            ))),
        }
    }

    /// Keeps the session-making requests a host sent (the last of each).
    fn remember(&self, method: &str, params: Option<&RawValue>) {
        let kept = matches!(
            method,
            methods::MCPHOST_SESSION_CONFIGURE
                | methods::LOGGING_SET_LEVEL
                | methods::RESOURCES_SUBSCRIBE
                | methods::RESOURCES_UNSUBSCRIBE
        );
        if !kept {
            return;
        }
        let params = params.map_or("{}", RawValue::get);
        let Ok(params) = RawValue::from_string(params.to_owned()) else {
            return;
        };
        let mut list = self.replay.lock();
        // An unsubscribe cancels the subscribe of the same params' URI.
        let uri = |p: &RawValue| raw_field::<String>(p, "uri").ok().flatten();
        if method == methods::RESOURCES_UNSUBSCRIBE {
            let gone = uri(&params);
            list.retain(|(m, p)| !(m == methods::RESOURCES_SUBSCRIBE && uri(p) == gone));
            return;
        }
        list.retain(|(m, p)| !(m == method && p.get() == params.get()));
        list.push((method.to_owned(), params));
        if list.len() > MAX_REPLAYED {
            list.remove(0);
        }
    }
}

/// A connection to the daemon at `path`, checked to be our release.
async fn dial(path: &Path, opts: ClientOptions) -> Result<ServerClient, Error> {
    let conn = mcphost_core::ipc::connect(path, mcphost_core::ipc::DEFAULT_MAX_MESSAGE_BYTES)
        .await
        .map_err(|e| match e {
            mcphost_core::ipc::IpcError::NotRunning { .. } => Error::NotRunning(format!(
                "no mcphost daemon is listening at {}: start one with `mcphost daemon`, \
                 or open the library in embedded mode ({e})",
                path.display()
            )),
            e => Error::Connect(e.to_string()),
        })?;
    let client = ServerClient::connect("daemon", conn, opts)
        .await
        .map_err(|e| {
            Error::Connect(format!(
                "the daemon at {} did not complete the handshake: {e}",
                path.display()
            ))
        })?;
    let n = client.negotiated();
    if let Err(e) = check_version(path, n.server_name.as_deref(), n.server_version.as_deref()) {
        client.shutdown().await;
        return Err(e);
    }
    Ok(client)
}

/// The shared state behind a `mcphost*`.
pub(crate) struct Inner {
    backend: Backend,
    pub(crate) host: Arc<HostSide>,
    pub(crate) events: Arc<Events>,
    timeout: Duration,
    closed: AtomicBool,
    next_id: AtomicI64,
    pending: Mutex<HashMap<u64, Arc<Pending>>>,
    next_pending: AtomicU64,
}

/// A request's result as the host gets it.
pub(crate) struct Outcome {
    pub(crate) response: Option<String>,
    pub(crate) error: Option<Error>,
}

/// Build the library's runtime. Its threads block SIGPIPE: a write to a
/// dead server's pipe (or a gone daemon's socket) then fails with EPIPE
/// instead of killing a host that left SIGPIPE at its default. Children
/// start with an empty mask (std resets it before exec).
pub(crate) fn runtime() -> Result<Runtime, Error> {
    let workers = std::thread::available_parallelism()
        .map(|n| n.get().clamp(1, 4))
        .unwrap_or(2);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("mcphost-runtime")
        .enable_all()
        .on_thread_start(block_sigpipe)
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start the runtime: {e}")))
}

fn block_sigpipe() {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
    let mut set = SigSet::empty();
    set.add(Signal::SIGPIPE);
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None);
}

/// Run `fut` on the runtime and wait for it on this thread, which never
/// becomes a runtime thread itself.
pub(crate) fn wait_on<T: Send + 'static>(
    rt: &Runtime,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, Error> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .map_err(|_| Error::Closed("the runtime stopped".into()))
}

impl Inner {
    fn new(backend: Backend, host: Arc<HostSide>, events: Arc<Events>, timeout: Duration) -> Inner {
        Inner {
            backend,
            host,
            events,
            timeout,
            closed: AtomicBool::new(false),
            next_id: AtomicI64::new(1),
            pending: Mutex::new(HashMap::new()),
            next_pending: AtomicU64::new(1),
        }
    }

    fn push_event(&self, method: &str, params: Option<&RawValue>) {
        self.events
            .push(&self.host.thread, notification(method, params));
    }

    /// Open an engine in this process over `config` (the config file's
    /// format, as text).
    pub(crate) async fn embedded(
        config: String,
        settings: Settings,
        host: Arc<HostSide>,
        events: Arc<Events>,
    ) -> Result<Arc<Inner>, Error> {
        let anchor = std::env::current_dir()
            .unwrap_or_default()
            .join("<embedded config>");
        let store =
            ConfigStore::in_memory(&config, anchor, Arc::new(mcphost_core::auth::process_env))
                .map_err(|e| Error::Config(e.to_string()))?;
        let cfg = store.current();
        // Apps started from a desktop get a bare PATH; servers need the
        // user's (as the daemon does).
        let shell_path = if cfg.login_shell_path {
            let p = mcphost_core::config::shell_path::login_shell_path().await;
            Some(p.path.clone())
        } else {
            None
        };
        // OAuth with the user's token store (shared with the daemon and the
        // CLI); a sign-in page goes to this host's elicitation callback as a
        // URL elicitation, then to MCPHOST_BROWSER.
        let (host_browser, slot) = mcphost_core::auth::browser::HostBrowser::unbound();
        let _ = slot.set(Arc::new(mcphost_core::registry::sign_in::HostSignIn(
            Arc::new(CHost(host.clone())),
        )));
        let engine = EngineBuilder::new(cfg)
            .server_options(ServerOptions {
                auth: mcphost_core::auth::AuthContext::for_host(host_browser),
                ..ServerOptions::from(ClientOptions::default())
            })
            .shell_path(shell_path)
            .editor(Arc::new(StoreEditor(Arc::new(store))))
            // An app's embedded engine audits into the user's log, as the
            // daemon does (its config's `audit` decides).
            .audit_dir(mcphost_core::ipc::default_state_dir())
            .start();
        let events_for_port = events.clone();
        let thread_host = host.clone();
        let port = Arc::new(HostPort::new(
            Arc::new(CHost(host.clone())),
            move |method, params| {
                events_for_port.push(&thread_host.thread, notification(method, params));
            },
        ));
        let caps = port.capabilities();
        let session = engine.open_session(&settings.client_name, port, SessionLimits::default());
        session.initialize_as(caps);
        if !settings.wait_ready.is_zero() {
            engine.wait_started(settings.wait_ready).await;
        }
        let backend = Backend::Embedded {
            engine,
            session: Mutex::new(Some(session)),
        };
        Ok(Arc::new(Inner::new(
            backend,
            host,
            events,
            settings.request_timeout,
        )))
    }

    /// Connect to the daemon at `path` and check that it is our release.
    pub(crate) async fn connected(
        path: PathBuf,
        settings: Settings,
        host: Arc<HostSide>,
        events: Arc<Events>,
    ) -> Result<Arc<Inner>, Error> {
        let opts = ClientOptions {
            client_info: ClientInfo {
                name: settings.client_name.clone(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
            },
            host: Arc::new(CHost(host.clone())),
            request_timeout: settings.request_timeout,
            max_request_timeout: settings.request_timeout,
            // Our own daemon: the handshake, never an era probe.
            known_era: Some(Era::Handshake),
            // The host re-lists when it wants; we only relay the news.
            relist_on_change: false,
            ..Default::default()
        };
        let client = dial(&path, opts.clone()).await?;
        let inner = Arc::new(Inner::new(
            Backend::Connected(Box::new(Link {
                path,
                opts,
                client: tokio::sync::watch::channel(Arc::new(client)).0,
                replay: Mutex::new(Vec::new()),
            })),
            host,
            events,
            settings.request_timeout,
        ));
        tokio::spawn(watch(Arc::downgrade(&inner)).instrument(info_span!("events")));
        Ok(inner)
    }

    /// Start one request; `done` gets its outcome once, on a runtime thread.
    pub(crate) fn start(
        self: &Arc<Self>,
        rt: &Runtime,
        request_json: &str,
        done: impl FnOnce(Outcome) + Send + 'static,
    ) -> Result<AbortHandle, Error> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed("the handle is being freed".into()));
        }
        let req = parse_request(request_json)?;
        let inner = self.clone();
        let task = rt.spawn(
            async move {
                let reply_id = req.id.clone();
                let outcome = match inner.call(req.method.clone(), req.params).await {
                    Ok(result) => Outcome {
                        response: response(reply_id.as_deref(), Ok(&result)),
                        error: None,
                    },
                    Err(CallError::Rpc(e)) => Outcome {
                        response: response(reply_id.as_deref(), Err(&e)),
                        error: Some(Error::Rpc(format!("{}: {e}", req.method))),
                    },
                    Err(CallError::Other(e)) => Outcome {
                        response: None,
                        error: Some(e),
                    },
                };
                done(outcome);
            }
            .instrument(info_span!("request")),
        );
        Ok(task.abort_handle())
    }

    async fn call(
        &self,
        method: String,
        params: Option<Box<RawValue>>,
    ) -> Result<Box<RawValue>, CallError> {
        let timeout = self.timeout;
        let fut = self.call_untimed(&method, params);
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Other(Error::Timeout(format!(
                "{method}: no answer within {timeout:?} (mcphost_options_set_request_timeout_ms)"
            )))),
        }
    }

    async fn call_untimed(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<Box<RawValue>, CallError> {
        match &self.backend {
            Backend::Embedded { session, .. } => {
                let session = session.lock().clone().ok_or_else(|| {
                    CallError::Other(Error::Closed("the handle is being freed".into()))
                })?;
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                session
                    .request(Id::number(id), method, params)
                    .await
                    .map_err(CallError::Rpc)
            }
            Backend::Connected(link) => {
                let client = link.usable().await.map_err(CallError::Other)?;
                let path = &link.path;
                let on_progress = progress_token(params.as_deref()).map(|token| {
                    let events = self.events.clone();
                    let host = self.host.clone();
                    let cb: mcphost_core::jsonrpc::ProgressCallback =
                        Arc::new(move |p: Progress| {
                            // The daemon's params as sent; only the token goes
                            // back to the one the host chose.
                            if let Ok(params) = set_fields(
                                Some(&p.params),
                                [("progressToken".to_owned(), token.clone())],
                            ) {
                                events.push(
                                    &host.thread,
                                    notification(methods::NOTIFICATION_PROGRESS, Some(&params)),
                                );
                            }
                        });
                    cb
                });
                let opts = CallOptions {
                    on_progress,
                    ..Default::default()
                };
                let kept = params.clone();
                let r = client.relay(method, params, opts).await;
                if r.is_ok() {
                    link.remember(method, kept.as_deref());
                }
                r.map_err(|e| match e {
                    ClientError::Request {
                        error: PeerError::Rpc(e),
                        ..
                    } => CallError::Rpc(e),
                    ClientError::Request {
                        error: PeerError::Closed(reason),
                        ..
                    } => CallError::Other(Error::Closed(format!(
                        "the connection to the daemon at {} closed while this request was \
                             in flight ({reason}); the library connects again: send it again",
                        path.display()
                    ))),
                    ClientError::Request {
                        error: PeerError::Timeout { .. },
                        ..
                    } => CallError::Other(Error::Timeout(e.to_string())),
                    e => CallError::Other(Error::Connect(e.to_string())),
                })
            }
        }
    }

    /// A notification from the host.
    pub(crate) fn notify(&self, rt: &Runtime, json: &str) -> Result<(), Error> {
        #[derive(Deserialize)]
        struct Note {
            method: String,
            #[serde(default)]
            params: Option<Box<RawValue>>,
        }
        let n: Note = serde_json::from_str(json).map_err(|source| Error::Json {
            what: "notification_json",
            source,
        })?;
        // What a host tells mcphost; cancellation goes by mcphost_cancel.
        const TAKEN: [&str; 1] = [methods::NOTIFICATION_ROOTS_LIST_CHANGED];
        let Some(method) = TAKEN.into_iter().find(|m| *m == n.method) else {
            return Err(Error::InvalidRequest(format!(
                "{}: mcphost takes only {} from a host (cancel requests with mcphost_cancel)",
                n.method,
                TAKEN.join(", ")
            )));
        };
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed("the handle is being freed".into()));
        }
        match &self.backend {
            Backend::Embedded { session, .. } => {
                if let Some(s) = session.lock().as_ref() {
                    s.notification(method, n.params.as_deref());
                }
                Ok(())
            }
            Backend::Connected(link) => {
                let client = link.current();
                wait_on(rt, async move { client.notify(method, n.params).await })?
                    .map_err(|e| Error::Closed(e.to_string()))
            }
        }
    }

    /// Track an async request until it completes, is cancelled or the
    /// handle is freed: whichever comes first calls back, once.
    pub(crate) fn track(&self, pending: Arc<Pending>) -> u64 {
        let key = self.next_pending.fetch_add(1, Ordering::Relaxed);
        self.pending.lock().insert(key, pending);
        key
    }

    pub(crate) fn untrack(&self, key: u64) {
        self.pending.lock().remove(&key);
    }

    /// Stop everything: refuse new calls, end the async ones with
    /// MCPHOST_ERR_CLOSED, stop every server (embedded: until no child
    /// process is left) and let the queued callbacks run.
    pub(crate) fn close(self: &Arc<Self>, rt: &Runtime) {
        self.closed.store(true, Ordering::SeqCst);
        let pending: Vec<_> = self.pending.lock().drain().map(|(_, p)| p).collect();
        for p in pending {
            p.finish(
                &self.host.thread,
                Outcome {
                    response: None,
                    error: Some(Error::Closed("the handle was freed".into())),
                },
            );
        }
        let inner = self.clone();
        let _ = wait_on(rt, async move {
            match &inner.backend {
                Backend::Embedded { engine, session } => {
                    session.lock().take();
                    engine.shutdown().await;
                }
                Backend::Connected(link) => link.current().shutdown().await,
            }
        });
        self.events.close();
    }
}

/// Every notification of the daemon becomes an event (progress comes
/// through each call, with the host's own token). When the connection
/// closes, a new one is made (the daemon may be back at once, or later),
/// the host's session requests are sent again and the host is told to list
/// again; until then it has one `disconnected` event.
async fn watch(weak: std::sync::Weak<Inner>) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let Backend::Connected(link) = &inner.backend else {
            return;
        };
        let client = link.current();
        let mut rx = client.notifications();
        // The client's own events say when the connection is gone (its
        // notification channel lives as long as the client).
        let mut lifecycle = client.subscribe();
        drop(inner);
        while client.close_reason().is_none() {
            let next = tokio::select! {
                n = rx.recv() => n,
                e = lifecycle.recv() => match e {
                    Ok(mcphost_core::client::ServerEvent::Closed(_))
                    | Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    _ if client.close_reason().is_some() => break,
                    _ => continue,
                },
            };
            let Some(inner) = weak.upgrade() else { return };
            match next {
                Ok(n) if n.method == methods::NOTIFICATION_PROGRESS => {}
                Ok(n) => inner.push_event(&n.method, n.params.as_deref()),
                Err(RecvError::Lagged(missed)) => {
                    let p = to_raw(&serde_json::json!({ "count": missed })).ok();
                    inner.push_event("notifications/mcphost/events_dropped", p.as_deref());
                }
                Err(RecvError::Closed) => break,
            }
        }
        let reason = client
            .close_reason()
            .map_or_else(|| "the connection closed".to_owned(), |r| r.to_string());
        let mut told = false;
        let client = loop {
            let Some(inner) = weak.upgrade() else { return };
            if inner.closed.load(Ordering::SeqCst) {
                return;
            }
            let Backend::Connected(link) = &inner.backend else {
                return;
            };
            match dial(&link.path, link.opts.clone()).await {
                Ok(c) => break (Arc::new(c), inner),
                Err(e) => {
                    tracing::debug!("the daemon is not back yet: {e}");
                    if !told {
                        told = true;
                        let p = to_raw(&serde_json::json!({
                            "reason": format!("the connection to the daemon closed ({reason}); reconnecting")
                        }))
                        .ok();
                        inner.push_event("notifications/mcphost/disconnected", p.as_deref());
                    }
                }
            }
            drop(inner);
            tokio::time::sleep(RECONNECT_PAUSE).await;
        };
        let (client, inner) = client;
        let Backend::Connected(link) = &inner.backend else {
            return;
        };
        let replay = link.replay.lock().clone();
        for (method, params) in replay {
            // The daemon's refusal now is what the host would have got then.
            if let Err(e) = client
                .relay(&method, Some(params), CallOptions::default())
                .await
            {
                tracing::warn!("{method}, sent again to the new daemon: {e}");
            }
        }
        link.client.send_replace(client);
        tracing::info!("connected to the daemon again");
        let p = to_raw(&serde_json::json!({ "reason": reason })).ok();
        inner.push_event("notifications/mcphost/reconnected", p.as_deref());
        for m in [
            methods::NOTIFICATION_TOOLS_LIST_CHANGED,
            methods::NOTIFICATION_RESOURCES_LIST_CHANGED,
            methods::NOTIFICATION_PROMPTS_LIST_CHANGED,
        ] {
            inner.push_event(m, None);
        }
    }
}

enum CallError {
    Rpc(ErrorObject),
    Other(Error),
}

/// The daemon must be mcphost of this release: the `mcphost/*` methods and
/// their results may change between minor releases before 1.0.
fn check_version(path: &Path, name: Option<&str>, version: Option<&str>) -> Result<(), Error> {
    let ours = env!("CARGO_PKG_VERSION");
    if name != Some("mcphost") {
        return Err(Error::VersionMismatch(format!(
            "the server at {} is not an mcphost daemon (it calls itself {:?}); point \
             mcphost_connect at the socket `mcphost daemon` listens on",
            path.display(),
            name.unwrap_or("nothing")
        )));
    }
    let theirs = version.unwrap_or("unknown");
    if !compatible(ours, theirs) {
        return Err(Error::VersionMismatch(format!(
            "the daemon at {} is mcphost {theirs}, but this library is {ours}; restart the \
             daemon from the same release (`mcphost daemon`), or use libmcphost {theirs}",
            path.display()
        )));
    }
    Ok(())
}

/// Same major version, and before 1.0 the same minor one too.
fn compatible(a: &str, b: &str) -> bool {
    let parts = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.split(['.', '-', '+']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parts(a), parts(b)) {
        (Some((0, a)), Some((0, b))) => a == b,
        (Some((a, _)), Some((b, _))) => a == b,
        _ => false,
    }
}

struct ParsedRequest {
    id: Option<Box<RawValue>>,
    method: String,
    params: Option<Box<RawValue>>,
}

fn parse_request(json: &str) -> Result<ParsedRequest, Error> {
    #[derive(Deserialize)]
    struct Req {
        #[serde(default)]
        id: Option<Box<RawValue>>,
        method: Option<String>,
        #[serde(default)]
        params: Option<Box<RawValue>>,
    }
    let r: Req = serde_json::from_str(json).map_err(|source| Error::Json {
        what: "request_json",
        source,
    })?;
    let Some(method) = r.method else {
        return Err(Error::InvalidRequest(
            "request_json has no \"method\"; send {\"method\": \"tools/list\", \"params\": {…}}"
                .into(),
        ));
    };
    if method == methods::INITIALIZE {
        return Err(Error::InvalidRequest(
            "initialize: the handle is initialized when it is opened; declare host \
             capabilities by registering callbacks in mcphost_options"
                .into(),
        ));
    }
    if method.starts_with("notifications/") {
        return Err(Error::InvalidRequest(format!(
            "{method} is a notification: send it with mcphost_notify"
        )));
    }
    if let Some(p) = &r.params
        && !p.get().trim_start().starts_with('{')
    {
        return Err(Error::InvalidRequest(format!(
            "{method}: params must be an object"
        )));
    }
    Ok(ParsedRequest {
        id: r.id,
        method,
        params: r.params,
    })
}

fn progress_token(params: Option<&RawValue>) -> Option<Box<RawValue>> {
    let meta = raw_field::<Box<RawValue>>(params?, "_meta")
        .ok()
        .flatten()?;
    raw_field::<Box<RawValue>>(&meta, "progressToken")
        .ok()
        .flatten()
}

/// The JSON-RPC response the host gets: its own id (null if it sent none).
fn response(id: Option<&RawValue>, r: Result<&RawValue, &ErrorObject>) -> Option<String> {
    #[derive(Serialize)]
    struct Resp<'a> {
        jsonrpc: &'static str,
        id: &'a RawValue,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<&'a RawValue>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a ErrorObject>,
    }
    let null = RawValue::from_string("null".into()).ok()?;
    let (result, error) = match r {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    };
    serde_json::to_string(&Resp {
        jsonrpc: "2.0",
        id: id.unwrap_or(&null),
        result,
        error,
    })
    .ok()
}

type Done = Box<dyn FnOnce(Outcome) + Send>;

/// An async request's completion, taken by whichever of its end, its
/// cancellation or the handle's free comes first.
pub(crate) struct Pending {
    done: Mutex<Option<Done>>,
    abort: Mutex<Option<AbortHandle>>,
}

impl Pending {
    pub(crate) fn new(done: impl FnOnce(Outcome) + Send + 'static) -> Arc<Pending> {
        Arc::new(Pending {
            done: Mutex::new(Some(Box::new(done))),
            abort: Mutex::new(None),
        })
    }

    pub(crate) fn set_abort(&self, a: AbortHandle) {
        *self.abort.lock() = Some(a);
    }

    /// Deliver `outcome` on the callback thread, unless already delivered.
    pub(crate) fn finish(
        &self,
        thread: &crate::callbacks::CallbackThread,
        outcome: Outcome,
    ) -> bool {
        let done = self.done.lock().take();
        let Some(done) = done else { return false };
        if let Some(a) = self.abort.lock().take() {
            a.abort();
        }
        thread.post(move || done(outcome));
        true
    }
}

pub(crate) type BoxOpen = std::pin::Pin<Box<dyn Future<Output = Result<Arc<Inner>, Error>> + Send>>;

pub(crate) fn open_embedded(
    config: String,
    settings: Settings,
    host: Arc<HostSide>,
    events: Arc<Events>,
) -> BoxOpen {
    Box::pin(Inner::embedded(config, settings, host, events))
}

pub(crate) fn open_connected(
    path: String,
    settings: Settings,
    host: Arc<HostSide>,
    events: Arc<Events>,
) -> BoxOpen {
    Box::pin(Inner::connected(
        PathBuf::from(path),
        settings,
        host,
        events,
    ))
}

#[cfg(test)]
mod tests {
    use super::compatible;

    #[test]
    fn versions_are_compatible_by_major_and_pre_1_0_minor() {
        assert!(compatible("0.1.0", "0.1.7"));
        assert!(!compatible("0.1.0", "0.2.0"));
        assert!(compatible("1.2.0", "1.9.1"));
        assert!(!compatible("1.2.0", "2.0.0"));
        assert!(!compatible("0.1.0", "unknown"));
    }
}
