//! One client of the engine, whatever door it came through: `initialize`
//! gating, its capabilities, progress, events, and the requests servers send
//! it. It reaches its client only through a [`ClientPort`]: the socket, the
//! CLI's in-process mode and the C library each implement one.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::broadcast;
use tracing::{Instrument, debug, info, info_span, warn};

use super::broker::{named, named_server};
use super::{BUSY, Engine, Reply, SessionLimits, invalid_params, raw, rpc_err};
use mcphost_client::{Host, HostRequest};
use mcphost_jsonrpc::{
    IncomingRequest, Origin, Peer, PeerConfig, PeerError, Progress, Relation, RequestHandler,
    RequestOptions,
};
use mcphost_protocol::{
    ClientCapabilities, Era, ErrorObject, Id, ProtocolVersion, error_codes, methods, raw_field,
    set_fields, to_raw,
};
use mcphost_registry::supervisor::ServerStatus;
use mcphost_registry::{LogLevel, RegistryEvent};
use mcphost_transport::{BoxFuture, Connection, TransportControl};

mod shaped;
mod stateless;

/// How a session reaches its client.
pub trait ClientPort: Send + Sync + 'static {
    /// Queue a notification; [`PeerError::QueueFull`] when the client does
    /// not read.
    fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), PeerError>;
    /// Ask the client something (a server's sampling, elicitation or roots
    /// request) and wait up to `timeout` for its answer.
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Box<RawValue>, PeerError>>;
    /// Cut the client off (it stopped reading).
    fn disconnect(&self) -> BoxFuture<'_, ()>;
}

/// A socket client: a JSON-RPC peer over its connection. The peer is set
/// right after the session is made (its handler needs the session first),
/// before anything can be sent.
struct PeerPort {
    peer: std::sync::OnceLock<Peer>,
    control: Arc<dyn TransportControl>,
}

impl PeerPort {
    fn peer(&self) -> Result<&Peer, PeerError> {
        self.peer.get().ok_or_else(|| {
            PeerError::Closed(Arc::new(mcphost_transport::CloseReason::new(
                "the connection is not open yet",
            )))
        })
    }
}

impl ClientPort for PeerPort {
    fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), PeerError> {
        self.peer()?.try_notify(method, params)
    }

    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Box<RawValue>, PeerError>> {
        let peer = match self.peer() {
            Ok(p) => p.clone(),
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let method = method.to_owned();
        Box::pin(async move {
            let opts = RequestOptions {
                timeout: Some(timeout),
                max_timeout: Some(timeout),
                ..Default::default()
            };
            peer.request(&method, params, opts).await
        })
    }

    fn disconnect(&self) -> BoxFuture<'_, ()> {
        self.control.shutdown()
    }
}

/// An in-process client (the CLI's `--direct`, the C library's simple
/// mode): a [`Host`] answers its server requests, and notifications go to a
/// callback.
pub struct HostPort {
    host: Arc<dyn Host>,
    on_notification: Box<NotificationFn>,
}

type NotificationFn = dyn Fn(&str, Option<&RawValue>) + Send + Sync;

impl HostPort {
    pub fn new(
        host: Arc<dyn Host>,
        on_notification: impl Fn(&str, Option<&RawValue>) + Send + Sync + 'static,
    ) -> HostPort {
        HostPort {
            host,
            on_notification: Box::new(on_notification),
        }
    }

    /// The capabilities the host declares, for [`Session::initialize_as`].
    pub fn capabilities(&self) -> ClientCapabilities {
        self.host.capabilities()
    }
}

impl ClientPort for HostPort {
    fn notify(&self, method: &str, params: Option<Box<RawValue>>) -> Result<(), PeerError> {
        (self.on_notification)(method, params.as_deref());
        Ok(())
    }

    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Box<RawValue>, PeerError>> {
        let server = named_server(params.as_deref()).unwrap_or_default();
        let method = method.to_owned();
        let fut = self.host.handle(HostRequest {
            server,
            method: method.clone(),
            params,
            relation: Relation::Unrelated,
            asker: mcphost_client::Asker::Shared,
        });
        Box::pin(async move {
            match tokio::time::timeout(timeout, fut).await {
                Ok(r) => r.map_err(PeerError::Rpc),
                Err(_) => Err(PeerError::Timeout {
                    method,
                    elapsed: timeout,
                }),
            }
        })
    }

    fn disconnect(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Which revision a session speaks, settled by its first request that
/// says: `initialize` (the handshake) or a stateless 2026-07-28 request.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Mode {
    #[default]
    Undecided,
    Handshake,
    Stateless,
}

#[derive(Default)]
struct SessionState {
    mode: Mode,
    /// What the handshake's `initialize` declared (a stateless client
    /// declares per request: see `stateless`).
    caps: ClientCapabilities,
    /// `mcphost/logs/follow`: `Some(None)` every server, `Some(Some(s))` one.
    follow: Option<Option<String>>,
    stateless: stateless::State,
}

/// One client session. Doors hold it; the engine's table holds it weakly,
/// so a client that goes frees it.
pub struct Session {
    id: u64,
    name: String,
    /// `clientInfo.name` from `initialize`, cleaned: how errors name the host.
    client_name: std::sync::OnceLock<String>,
    /// `clientInfo.version`, cleaned as the name is (the audit log).
    client_version: std::sync::OnceLock<String>,
    engine: Arc<Engine>,
    port: Arc<dyn ClientPort>,
    state: Mutex<SessionState>,
    /// Requests being handled, bounded by `limits.max_in_flight`.
    in_flight: AtomicUsize,
    limits: SessionLimits,
    /// `mcphost/session/configure`'s options; empty (one pointer load on
    /// `tools/*`) for a session that set none.
    view: arc_swap::ArcSwapOption<mcphost_model_view::View>,
    /// Servers' requests this client may have outstanding at once.
    host_requests: Arc<tokio::sync::Semaphore>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.engine.session_gone(self.id);
    }
}

/// One request's claim on its session's in-flight budget, released when the
/// request's future ends (answered or aborted).
struct InFlight(Arc<Session>);

impl InFlight {
    fn claim(session: Arc<Session>) -> Option<InFlight> {
        let limit = session.limits.max_in_flight;
        session
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then(|| n.saturating_add(1))
            })
            .ok()?;
        Some(InFlight(session))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The client's progress token for a call: fixed for a handshake call; a
/// stateless call's is the token of whichever of its requests is waiting
/// (none while it is parked for input).
type TokenSlot = Arc<Mutex<Option<Box<RawValue>>>>;

/// Where progress for a relayed call goes.
#[derive(Clone)]
pub(crate) struct ProgressSink {
    port: Arc<dyn ClientPort>,
    token: TokenSlot,
}

impl ProgressSink {
    pub(crate) fn callback(self) -> mcphost_jsonrpc::ProgressCallback {
        Arc::new(move |p: Progress| {
            let token = self.token.lock().clone();
            let Some(token) = token else { return };
            // The server's params go on byte for byte; only the token is
            // swapped for the one the caller chose.
            let Ok(with_token) = set_fields(Some(&p.params), [("progressToken".to_owned(), token)])
            else {
                return;
            };
            if let Err(e) = self
                .port
                .notify(methods::NOTIFICATION_PROGRESS, Some(with_token))
            {
                debug!("progress not forwarded: {e}");
            }
        })
    }
}

/// What one client request carries down to the servers.
pub(crate) struct Call {
    pub(crate) origin: Origin,
    pub(crate) progress: Option<ProgressSink>,
    /// Who asked, as the audit log names it.
    pub(crate) caller: crate::audit::Caller,
}

const SESSION_METHODS: [&str; 11] = [
    methods::TOOLS_LIST,
    methods::TOOLS_CALL,
    methods::PROMPTS_LIST,
    methods::PROMPTS_GET,
    methods::RESOURCES_LIST,
    methods::RESOURCES_TEMPLATES_LIST,
    methods::RESOURCES_READ,
    methods::COMPLETION_COMPLETE,
    methods::RESOURCES_SUBSCRIBE,
    methods::RESOURCES_UNSUBSCRIBE,
    methods::LOGGING_SET_LEVEL,
];

impl Session {
    pub(crate) fn new(
        id: u64,
        name: &str,
        engine: Arc<Engine>,
        port: Arc<dyn ClientPort>,
        limits: SessionLimits,
    ) -> Session {
        // A config profile named `default` shapes every session until it
        // configures itself; without one, sessions keep the plain path.
        let view = engine
            .model_view_settings()
            .profiles
            .get(shaped::DEFAULT_PROFILE)
            .and_then(|o| {
                mcphost_model_view::View::new(o.clone(), Some(shaped::DEFAULT_PROFILE.to_owned()))
                    .ok()
                    .flatten()
            })
            .map(Arc::new);
        Session {
            id,
            name: name.to_owned(),
            client_name: std::sync::OnceLock::new(),
            client_version: std::sync::OnceLock::new(),
            engine,
            port,
            state: Mutex::new(SessionState::default()),
            in_flight: AtomicUsize::new(0),
            limits,
            view: arc_swap::ArcSwapOption::new(view),
            host_requests: Arc::new(tokio::sync::Semaphore::new(
                super::broker::MAX_HOST_REQUESTS,
            )),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// How errors name this client: its `clientInfo.name`, else the door's
    /// name for the session (`client-N`, `cli`).
    pub fn name(&self) -> &str {
        self.client_name.get().unwrap_or(&self.name)
    }

    /// This session as the audit log names it.
    pub(crate) fn caller(&self) -> crate::audit::Caller {
        crate::audit::Caller {
            name: self.name().to_owned(),
            version: self.client_version.get().cloned(),
            session: self.id,
        }
    }

    /// The permits for servers' requests to this client (the broker takes
    /// one per request it forwards).
    pub(crate) fn host_requests(&self) -> Arc<tokio::sync::Semaphore> {
        self.host_requests.clone()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, SessionState> {
        self.state.lock()
    }

    fn mode(&self) -> Mode {
        self.lock().mode
    }

    /// Settle the session's revision (or find it settled the same way).
    fn decide(&self, want: Mode) -> Result<(), ErrorObject> {
        let mut st = self.lock();
        match st.mode {
            Mode::Undecided => {
                st.mode = want;
                Ok(())
            }
            m if m == want => Ok(()),
            Mode::Handshake => Err(handshake_only()),
            _ => Err(stateless::stateless_only(None)),
        }
    }

    /// Whether this client declared that it answers `method` (in `mode`,
    /// for elicitation): in `initialize`, or, for a stateless client, on
    /// the request of `origin` (the call that caused it).
    pub(crate) fn can_answer(
        &self,
        method: &str,
        mode: Option<&str>,
        origin: Option<&Origin>,
    ) -> bool {
        let st = self.lock();
        let caps = match st.mode {
            Mode::Handshake => &st.caps,
            Mode::Stateless => match origin.and_then(|o| st.stateless.caps_of(self.id, o)) {
                Some(caps) => caps,
                None => return false,
            },
            Mode::Undecided => return false,
        };
        match method {
            methods::ELICITATION_CREATE => caps.elicits(mode),
            other => caps.handles(other),
        }
    }

    /// Ask this client what a server asked (params already named) on
    /// behalf of the call `origin`, waiting up to `timeout`. A handshake
    /// client gets a JSON-RPC request; a stateless client cannot receive
    /// one, so the call's pending response becomes an `input_required`
    /// result and the answer comes with the client's retry.
    pub(crate) fn ask(
        &self,
        origin: Option<&Origin>,
        method: &str,
        params: Box<RawValue>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Box<RawValue>, PeerError>> {
        if self.mode() == Mode::Stateless {
            return self.ask_stateless(origin, method, params, timeout);
        }
        self.port.request(method, Some(params), timeout)
    }

    /// What this client declared it answers, for the call `origin`: in
    /// `initialize`, or (stateless) on that call's latest request.
    pub(crate) fn client_capabilities(&self, origin: &Origin) -> ClientCapabilities {
        let st = self.lock();
        match st.mode {
            Mode::Stateless => st
                .stateless
                .caps_of(self.id, origin)
                .cloned()
                .unwrap_or_default(),
            _ => st.caps.clone(),
        }
    }

    /// Mark an in-process session initialized with these capabilities, as
    /// if its client had sent `initialize`.
    pub fn initialize_as(&self, caps: ClientCapabilities) {
        let mut st = self.lock();
        st.mode = Mode::Handshake;
        st.caps = caps;
        drop(st);
        self.roots_initialized();
    }

    /// What the daemon offers its clients; a stateless client is not
    /// offered `logging` (it gets no `notifications/message`).
    fn capabilities(stateless: bool) -> serde_json::Value {
        let mut caps = json!({
            "tools": { "listChanged": true },
            "resources": { "listChanged": true, "subscribe": true },
            "prompts": { "listChanged": true },
            "completions": {},
        });
        if !stateless {
            caps["logging"] = json!({});
        }
        caps
    }

    fn instructions(&self) -> String {
        format!(
            "mcphost aggregates the tools of many MCP servers. Tool names are <server>{}<tool>.",
            self.engine.registry().naming().separator
        )
    }

    fn initialize(&self, params: &Option<Box<RawValue>>) -> Reply {
        if self.mode() == Mode::Stateless {
            let requested = params
                .as_deref()
                .and_then(|p| raw_field::<String>(p, "protocolVersion").ok().flatten());
            return Err(stateless::stateless_only(requested.as_deref()));
        }
        let p = params.as_deref();
        let requested: Option<String> =
            p.and_then(|p| raw_field::<String>(p, "protocolVersion").ok().flatten());
        // A client's capabilities we cannot read are none: it is then asked
        // nothing, which is safe.
        let caps: ClientCapabilities = p
            .and_then(|p| {
                raw_field::<ClientCapabilities>(p, "capabilities")
                    .ok()
                    .flatten()
            })
            .unwrap_or_default();
        // Echo a handshake revision we speak, else offer our newest.
        let version = requested
            .as_deref()
            .and_then(|v| v.parse::<ProtocolVersion>().ok())
            .filter(|v| v.era() == Era::Handshake)
            .unwrap_or(ProtocolVersion::LATEST_HANDSHAKE);
        let client = self.record_client_name(p, ClientInfoIn::Params);
        info!(
            session = self.id,
            client,
            sampling = caps.sampling.is_some(),
            elicitation = caps.elicitation.is_some(),
            roots = caps.roots.is_some(),
            "client initialized"
        );
        self.decide(Mode::Handshake)?;
        self.lock().caps = caps;
        raw(&json!({
            "protocolVersion": version,
            "capabilities": Session::capabilities(false),
            "serverInfo": stateless::server_info(),
            "instructions": self.instructions(),
        }))
    }

    /// Handle one request of this session's client, `id` being the client's
    /// own id for it. Dropping the future cancels it, down to the server.
    pub fn request(
        self: &Arc<Self>,
        id: Id,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Reply> {
        let limit = self.limits.max_in_flight;
        // Claimed here, not in the future: a peer spawns it later.
        let Some(claim) = InFlight::claim(self.clone()) else {
            return Box::pin(std::future::ready(Err(rpc_err(
                BUSY,
                format!(
                    "too many requests in flight on this connection (limit {limit}); \
                     wait for some to finish"
                ),
            ))));
        };
        // `initialize` is a barrier: it is settled before this returns, so
        // the requests a client wrote right after it (without waiting) are
        // handled after it, as each door hands them over in order.
        if method == methods::INITIALIZE {
            let reply = claim.0.initialize(&params);
            return Box::pin(std::future::ready(reply));
        }
        let method = method.to_owned();
        Box::pin(async move {
            let session = &claim.0;
            session.handle(id, &method, params).await
        })
    }

    async fn handle(
        self: &Arc<Self>,
        id: Id,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Reply {
        let stateless = stateless::is_stateless_request(method, params.as_deref());
        match self.mode() {
            Mode::Stateless => return self.stateless(id, method, params).await,
            Mode::Undecided if stateless => return self.stateless(id, method, params).await,
            Mode::Handshake if stateless => return Err(handshake_only()),
            Mode::Handshake => {}
            // Options set before the client's first message (`mcphost
            // bridge --profile`, for a host that cannot send them): they
            // settle nothing, and whichever era comes next keeps them.
            Mode::Undecided if method == methods::MCPHOST_SESSION_CONFIGURE => {
                return self.configure(params.as_deref());
            }
            Mode::Undecided => {
                let known = SESSION_METHODS.contains(&method) || method.starts_with("mcphost/");
                return Err(if known {
                    rpc_err(
                        error_codes::INVALID_REQUEST,
                        format!(
                            "{method} before initialize (a stateless 2026-07-28 client \
                             carries io.modelcontextprotocol/protocolVersion in params._meta instead)"
                        ),
                    )
                } else {
                    ErrorObject::method_not_found(method)
                });
            }
        }
        self.handle_admitted(id, method, params).await
    }

    /// A request of either era past its gating; `id` is what its calls'
    /// origin carries (the client's id, or a stateless call's own).
    async fn handle_admitted(
        self: &Arc<Self>,
        id: Id,
        method: &str,
        mut params: Option<Box<RawValue>>,
    ) -> Reply {
        if super::is_catalog_list(method) {
            self.engine.until_started().await;
        }
        if matches!(method, methods::TOOLS_LIST | methods::TOOLS_CALL)
            && let Some(view) = self.view.load_full()
        {
            match self.shaped(&view, method, params)? {
                shaped::Shaped::Answer(reply) => return Ok(reply),
                shaped::Shaped::Forward(p) => params = p,
            }
        }
        match method {
            methods::MCPHOST_SESSION_CONFIGURE => self.configure(params.as_deref()),
            methods::MCPHOST_HOST_REGISTER | methods::MCPHOST_HOST_UNREGISTER => {
                self.host_register(method)
            }
            methods::MCPHOST_LOGS_FOLLOW => self.logs_follow(params.as_deref()),
            methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE => {
                self.resource_subscription(method, params.as_deref()).await
            }
            methods::LOGGING_SET_LEVEL => self.set_log_level(params.as_deref()).await,
            _ => self.forward(id, method, params).await,
        }
    }

    /// `mcphost/host/register` and `unregister`: whether this session's
    /// client answers the servers' requests.
    fn host_register(&self, method: &str) -> Reply {
        let primary = method == methods::MCPHOST_HOST_REGISTER;
        let caps = self.lock().caps.clone();
        let answers_something = [
            methods::ROOTS_LIST,
            methods::SAMPLING_CREATE_MESSAGE,
            methods::ELICITATION_CREATE,
        ]
        .iter()
        .any(|m| caps.handles(m));
        if primary && !answers_something {
            return Err(invalid_params(
                "mcphost/host/register: this client declared none of sampling, \
                 elicitation and roots in initialize, so it cannot answer anything",
            ));
        }
        self.engine.set_primary(self.id, primary);
        raw(&json!({}))
    }

    /// `mcphost/logs/follow`: this session gets stderr lines (of one server).
    fn logs_follow(&self, params: Option<&RawValue>) -> Reply {
        let server: Option<String> =
            params.and_then(|p| raw_field::<String>(p, "server").ok().flatten());
        if let Some(s) = &server {
            self.engine
                .registry()
                .client(s)
                .map(drop)
                .or_else(|e| match e {
                    mcphost_registry::RegistryError::UnknownServer(_) => Err(e),
                    _ => Ok(()),
                })
                .map_err(crate::registry_error)?;
        }
        self.lock().follow = Some(server);
        raw(&json!({}))
    }

    /// `resources/subscribe` and `unsubscribe`, for this session.
    async fn resource_subscription(&self, method: &str, params: Option<&RawValue>) -> Reply {
        let uri: String = params
            .and_then(|p| raw_field::<String>(p, "uri").ok().flatten())
            .ok_or_else(|| invalid_params(format!("{method} needs a uri")))?;
        let registry = self.engine.registry();
        if method == methods::RESOURCES_SUBSCRIBE {
            registry
                .subscribe_resource(self.id, &uri)
                .await
                .map_err(crate::registry_error)?;
        } else {
            registry
                .unsubscribe_resource(self.id, &uri)
                .await
                .map_err(crate::registry_error)?;
        }
        raw(&json!({}))
    }

    /// `logging/setLevel`: this session's level only; others keep theirs.
    async fn set_log_level(&self, params: Option<&RawValue>) -> Reply {
        let p = params.ok_or_else(|| invalid_params("logging/setLevel needs params"))?;
        let level: String = raw_field(p, "level")
            .map_err(|e| invalid_params(format!("logging/setLevel: {e}")))?
            .ok_or_else(|| invalid_params("logging/setLevel needs a level"))?;
        let level = LogLevel::parse(&level).ok_or_else(|| {
            invalid_params(format!(
                "logging/setLevel: unknown level {level:?} (one of debug, info, notice, \
                 warning, error, critical, alert, emergency)"
            ))
        })?;
        // This session's level only: others keep theirs.
        let server = named_server(Some(p));
        self.engine
            .registry()
            .set_session_log_level(self.id, server.as_deref(), level)
            .await
            .map_err(crate::registry_error)?;
        raw(&json!({}))
    }

    /// Everything else: one call down the engine's method set, with this
    /// session's origin and progress.
    async fn forward(&self, id: Id, method: &str, params: Option<Box<RawValue>>) -> Reply {
        let progress = params
            .as_deref()
            .filter(|p| p.get().contains("\"_meta\""))
            .and_then(|p| raw_field::<Box<RawValue>>(p, "_meta").ok().flatten())
            .and_then(|m| {
                raw_field::<Box<RawValue>>(&m, "progressToken")
                    .ok()
                    .flatten()
            })
            .map(|token| ProgressSink {
                port: self.port.clone(),
                token: Arc::new(Mutex::new(Some(token))),
            });
        let call = Call {
            origin: Origin {
                session: self.id,
                request: id,
            },
            progress,
            caller: self.caller(),
        };
        self.engine.dispatch(call, method, params).await
    }

    /// A notification from this session's client.
    pub fn notification(&self, method: &str, _params: Option<&RawValue>) {
        match method {
            methods::NOTIFICATION_INITIALIZED => self.roots_initialized(),
            methods::NOTIFICATION_ROOTS_LIST_CHANGED if self.declares_roots() => {
                debug!(session = self.id, "the client's roots changed");
                self.engine
                    .roots_event(super::roots::Event::Changed(self.id));
            }
            _ => {}
        }
    }

    /// Only sessions whose revision is settled get notifications.
    fn receives_events(&self) -> bool {
        self.mode() != Mode::Undecided
    }

    /// Stderr lines, for `mcphost/logs/follow`.
    fn stderr_note(
        &self,
        server: &str,
        line: &str,
    ) -> Option<(&'static str, Option<Box<RawValue>>)> {
        let wanted = match &self.lock().follow {
            Some(None) => true,
            Some(Some(s)) => s == server,
            None => false,
        };
        if !wanted {
            return None;
        }
        to_raw(&json!({ "server": server, "line": line }))
            .ok()
            .map(|p| ("notifications/mcphost/stderr", Some(p)))
    }

    /// The notifications one registry event makes for this client.
    fn notifications_for(&self, ev: RegistryEvent) -> Vec<(&'static str, Option<Box<RawValue>>)> {
        const SERVER_STATE: &str = "notifications/mcphost/server_state";
        if self.mode() == Mode::Stateless {
            return self.stateless_notifications(ev);
        }
        let state = |s: &ServerStatus| to_raw(s).ok().map(|p| (SERVER_STATE, Some(p)));
        let with_server = |server: &str, params: &RawValue| named(Some(params), server).ok();
        match ev {
            RegistryEvent::ToolsChanged => vec![(methods::NOTIFICATION_TOOLS_LIST_CHANGED, None)],
            RegistryEvent::ResourcesChanged => {
                vec![(methods::NOTIFICATION_RESOURCES_LIST_CHANGED, None)]
            }
            RegistryEvent::PromptsChanged => {
                vec![(methods::NOTIFICATION_PROMPTS_LIST_CHANGED, None)]
            }
            RegistryEvent::ServerState(s) => state(&s).into_iter().collect(),
            // Only to the sessions it belongs to, at their own level (see
            // `wants_log`).
            RegistryEvent::Log {
                server,
                params,
                callers,
            } => {
                if !self.wants_log(&server, &params, &callers) {
                    return Vec::new();
                }
                with_server(&server, &params)
                    .map(|p| (methods::NOTIFICATION_MESSAGE, Some(p)))
                    .into_iter()
                    .collect()
            }
            RegistryEvent::ElicitationComplete { server, params } => {
                let id = raw_field::<String>(&params, "elicitationId").ok().flatten();
                let mine =
                    id.is_some_and(|id| self.engine.elicitation_session(&id) == Some(self.id));
                if !mine {
                    return Vec::new();
                }
                with_server(&server, &params)
                    .map(|p| (methods::NOTIFICATION_ELICITATION_COMPLETE, Some(p)))
                    .into_iter()
                    .collect()
            }
            // Only to the sessions that subscribed to it.
            RegistryEvent::ResourceUpdated { uri, sessions } => {
                if !sessions.contains(&self.id) {
                    return Vec::new();
                }
                to_raw(&json!({ "uri": uri }))
                    .ok()
                    .map(|p| (methods::NOTIFICATION_RESOURCES_UPDATED, Some(p)))
                    .into_iter()
                    .collect()
            }
            // Only to the sessions that follow logs (`mcphost/logs/follow`).
            RegistryEvent::Stderr { server, line } => {
                self.stderr_note(&server, &line).into_iter().collect()
            }
            // Every host: its model may be using the changed tool.
            RegistryEvent::PinDrift { params, .. } => {
                vec![(methods::NOTIFICATION_MESSAGE, Some(params))]
            }
        }
    }
}

/// Roots: what the session's client declared and when it may be asked.
impl Session {
    /// A handshake client that declared `roots` in `initialize`.
    fn declares_roots(&self) -> bool {
        let st = self.lock();
        st.mode == Mode::Handshake && st.caps.roots.is_some()
    }

    /// Initialized (a client may be asked things only after
    /// `notifications/initialized`): with roots, it may now be the roots
    /// source of servers.
    fn roots_initialized(&self) {
        if self.declares_roots() {
            info!(session = self.id, "a host with roots is initialized");
            self.engine
                .roots_event(super::roots::Event::Joined(self.id));
        }
    }
}

/// Where a request carries the client's `clientInfo`.
#[derive(Debug, Clone, Copy)]
pub(super) enum ClientInfoIn {
    /// `initialize`: `params.clientInfo`.
    Params,
    /// A stateless request: `params._meta["io.modelcontextprotocol/clientInfo"]`.
    Meta,
}

/// Longest `clientInfo.name` kept, in characters.
const CLIENT_NAME_MAX: usize = 64;

/// Characters that show nothing but can reorder or hide text.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// A client's `clientInfo.name` as messages may show it: it is the
/// client's own text, so control and invisible formatting characters are
/// dropped, each run of whitespace becomes one space, and it is cut to
/// [`CLIENT_NAME_MAX`] characters (ending in `…`). `None` when nothing is
/// left.
pub(crate) fn clean_client_name(name: &str) -> Option<String> {
    let mut cleaned = String::new();
    for word in name.split_whitespace() {
        let word: String = word
            .chars()
            .filter(|&c| !c.is_control() && !invisible(c))
            .collect();
        if word.is_empty() {
            continue;
        }
        if !cleaned.is_empty() {
            cleaned.push(' ');
        }
        cleaned.push_str(&word);
        if cleaned.chars().count() > CLIENT_NAME_MAX {
            let mut cut: String = cleaned
                .chars()
                .take(CLIENT_NAME_MAX.saturating_sub(1))
                .collect();
            cut.push('…');
            return Some(cut);
        }
    }
    (!cleaned.is_empty()).then_some(cleaned)
}

impl Session {
    /// Whether a server's log message reaches this session. It does when
    /// the session asked for that server's logs (`logging/setLevel`, for it
    /// or for every server), had a call in flight to it when the message
    /// came (`callers`), or follows its logs (`mcphost/logs/follow`); and
    /// only at or above the session's own level: the one it asked for, else
    /// [`LogLevel::DEFAULT`]. A message whose level is not one of the eight
    /// counts as the default level.
    fn wants_log(&self, server: &str, params: &RawValue, callers: &[u64]) -> bool {
        let asked = self.engine.registry().session_log_level(self.id, server);
        let follows = match &self.lock().follow {
            Some(None) => true,
            Some(Some(s)) => s == server,
            None => false,
        };
        if asked.is_none() && !follows && !callers.contains(&self.id) {
            return false;
        }
        let level = raw_field::<String>(params, "level")
            .ok()
            .flatten()
            .and_then(|l| LogLevel::parse(&l))
            .unwrap_or(LogLevel::DEFAULT);
        level >= asked.unwrap_or(LogLevel::DEFAULT)
    }

    /// Keep the client's `clientInfo.name` (cleaned) as this session's name
    /// in messages: from `initialize`'s params, or a stateless request's
    /// `_meta`, as `from` says. The first one counts.
    pub(super) fn record_client_name(
        &self,
        params: Option<&RawValue>,
        from: ClientInfoIn,
    ) -> Option<&str> {
        if self.client_name.get().is_none() {
            let holder = match from {
                ClientInfoIn::Params => params.map(|p| p.to_owned()),
                ClientInfoIn::Meta => {
                    params.and_then(|p| raw_field::<Box<RawValue>>(p, "_meta").ok().flatten())
                }
            };
            let key = match from {
                ClientInfoIn::Params => "clientInfo",
                ClientInfoIn::Meta => mcphost_protocol::methods::meta::CLIENT_INFO,
            };
            let info = holder.and_then(|h| raw_field::<Box<RawValue>>(&h, key).ok().flatten());
            let field = |f: &str| {
                info.as_ref()
                    .and_then(|i| raw_field::<String>(i, f).ok().flatten())
                    .and_then(|n| clean_client_name(&n))
            };
            if let Some(name) = field("name") {
                let _ = self.client_name.set(name);
                if let Some(version) = field("version") {
                    let _ = self.client_version.set(version);
                }
            }
        }
        self.client_name.get().map(String::as_str)
    }
}

/// A socket session's request handler. It lives inside the session's own
/// peer, so it holds the session weakly: a strong reference was a cycle that
/// leaked every connection. The session exists before the peer reads, so
/// requests reach it in the order they came.
struct SessionHandler(Weak<Session>);

fn closing() -> Reply {
    Err(rpc_err(
        error_codes::INTERNAL_ERROR,
        "the session is closing",
    ))
}

impl RequestHandler for SessionHandler {
    fn handle(&self, r: IncomingRequest) -> BoxFuture<'static, Reply> {
        match self.0.upgrade() {
            Some(session) => session.request(r.id, &r.method, r.params),
            None => Box::pin(std::future::ready(closing())),
        }
    }
}

/// A stateless request on a session that began with `initialize`.
fn handshake_only() -> ErrorObject {
    rpc_err(
        error_codes::INVALID_REQUEST,
        "this connection began with initialize (the handshake); server/discover and \
         stateless 2026-07-28 requests (io.modelcontextprotocol/protocolVersion in \
         params._meta) need a connection of their own",
    )
}

impl Engine {
    /// Serve one socket client over `conn` until it closes. One task owns
    /// the session for exactly as long as the connection is open.
    pub(crate) fn serve_events(
        self: &Arc<Self>,
        name: &str,
        conn: Connection,
        limits: SessionLimits,
        events: broadcast::Receiver<RegistryEvent>,
    ) {
        let mut cfg = PeerConfig::new(name);
        // A client's malformed input gets an error reply, as JSON-RPC asks.
        cfg.answer_invalid = true;
        // Each forwarded request sets its own timeout (HostTimeouts).
        cfg.max_timeout = Duration::from_secs(24 * 3600);
        let port = Arc::new(PeerPort {
            peer: std::sync::OnceLock::new(),
            control: conn.control,
        });
        let session = Arc::new(Session::new(
            self.next_session_id(),
            name,
            self.clone(),
            port.clone(),
            limits,
        ));
        // Known to the broker before its first request runs: that request
        // may be a stateless call whose server asks something at once.
        self.add_session(&session);
        let handler = SessionHandler(Arc::downgrade(&session));
        // The port has its peer before the first request is read: a listen
        // acknowledgement sent at once must find it.
        let peer = Peer::start_after(cfg, conn.outbound, conn.inbound, Arc::new(handler), |p| {
            let _ = port.peer.set(p.clone());
        });
        self.rt.spawn(
            run_socket_session(session, peer, events)
                .instrument(info_span!("session", client = name)),
        );
    }
}

/// Owns one socket session for exactly as long as its connection is open;
/// the connection's control closes the socket when the session goes.
async fn run_socket_session(
    session: Arc<Session>,
    peer: Peer,
    events: broadcast::Receiver<RegistryEvent>,
) {
    let weak = Arc::downgrade(&session);
    let mut notes = peer.subscribe();
    let listen = async {
        loop {
            match notes.recv().await {
                Ok(n) => {
                    if let Some(s) = weak.upgrade() {
                        s.notification(&n.method, n.params.as_deref());
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    };
    let listen_until_closed = async {
        tokio::select! {
            _ = listen => {}
            _ = peer.closed() => {}
        }
    };
    tokio::join!(
        forward_events(weak.clone(), events, peer.closed()),
        listen_until_closed
    );
    peer.closed().await;
    // Its parked calls are cancelled now, whoever still holds the session.
    session.end_stateless();
    drop(session);
}

/// Push catalog changes, server states and server notifications to one
/// client until `closed` resolves; a client that does not read is
/// disconnected rather than allowed to stall anyone. Holds the session
/// weakly, so it never keeps one alive.
pub(crate) async fn forward_events(
    session: Weak<Session>,
    mut events: broadcast::Receiver<RegistryEvent>,
    closed: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(closed);
    loop {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = &mut closed => return,
        };
        let Some(s) = session.upgrade() else { return };
        let out = match ev {
            Ok(ev) => s.notifications_for(ev),
            // Which events were lost is unknown: the client must re-list
            // everything and learn every server's state again.
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                warn!(
                    missed,
                    "the client's event queue overflowed; resending every list and server state"
                );
                let mut out = [
                    RegistryEvent::ToolsChanged,
                    RegistryEvent::ResourcesChanged,
                    RegistryEvent::PromptsChanged,
                ]
                .into_iter()
                .flat_map(|e| s.notifications_for(e))
                .collect::<Vec<_>>();
                for st in s.engine.registry().statuses() {
                    out.extend(s.notifications_for(RegistryEvent::ServerState(st)));
                }
                out
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if !s.receives_events() {
            continue;
        }
        for (method, params) in out {
            match s.port.notify(method, params) {
                Ok(()) => {}
                Err(PeerError::QueueFull) => {
                    warn!("client is not reading its messages; disconnecting it");
                    s.port.disconnect().await;
                    return;
                }
                Err(_) => return,
            }
        }
    }
}
