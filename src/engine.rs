//! The engine: the one method set every door uses (the daemon socket, the
//! CLI's direct mode, and later the C library).
//!
//! It is an aggregating MCP server over the [`Registry`]: `initialize`,
//! paginated `tools/list`, `tools/call` routed through the catalog,
//! resources, prompts, and the `mcphost/*` management methods. One
//! `Session` serves one client connection.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::broadcast;
use tracing::{Instrument, debug, info_span, warn};

use crate::client::CallOptions;
use crate::config::store::ConfigStore;
use crate::jsonrpc::{IncomingRequest, Peer, PeerError, Progress, RequestHandler};
use crate::protocol::{ErrorObject, ProtocolVersion, error_codes, methods, raw_field, to_raw};
use crate::registry::{Registry, RegistryError, RegistryEvent};
use crate::transport::{BoxFuture, Connection, TransportControl};

/// Page size of the aggregated lists.
const PAGE_SIZE: usize = 200;

/// JSON-RPC error code for a request refused because a limit of the daemon
/// is reached (clients connected, requests in flight); retrying later helps.
pub const BUSY: i64 = -32000;

/// Default of [`SessionLimits::max_in_flight`].
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// Limits of one client session.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Requests of this client handled at once; more are answered with
    /// [`BUSY`] at once, so one client cannot exhaust the daemon.
    pub max_in_flight: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

/// Facts about the running engine, for `mcphost/status`.
#[derive(Debug, Clone, Default)]
pub struct EngineInfo {
    pub socket: Option<PathBuf>,
    pub config_path: Option<PathBuf>,
}

pub struct Engine {
    registry: Registry,
    info: EngineInfo,
    started: Instant,
    /// Present when there is a config file to edit (daemon); absent in
    /// direct mode, where management methods are refused.
    store: Option<Arc<ConfigStore>>,
    /// Live client sessions (see [`Engine::session_count`]).
    sessions: AtomicUsize,
}

type Reply = Result<Box<RawValue>, ErrorObject>;

fn rpc_err(code: i64, msg: impl Into<String>) -> ErrorObject {
    ErrorObject::new(code, msg)
}

fn internal(e: impl std::fmt::Display) -> ErrorObject {
    rpc_err(error_codes::INTERNAL_ERROR, e.to_string())
}

fn invalid_params(msg: impl Into<String>) -> ErrorObject {
    rpc_err(error_codes::INVALID_PARAMS, msg)
}

fn raw(v: &serde_json::Value) -> Reply {
    to_raw(v).map_err(|e| rpc_err(error_codes::INTERNAL_ERROR, e.to_string()))
}

impl From<RegistryError> for ErrorObject {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::Client(c) => match c.rpc_error() {
                // The server's own error goes back as it was sent.
                Some(err) => err.clone(),
                None => rpc_err(error_codes::INTERNAL_ERROR, c.to_string()),
            },
            RegistryError::UnknownTool(_) | RegistryError::UnknownPrompt(_) => {
                invalid_params(e.to_string())
            }
            RegistryError::UnknownResource(_) => {
                rpc_err(error_codes::RESOURCE_NOT_FOUND, e.to_string())
            }
            RegistryError::UnknownServer(_) => invalid_params(e.to_string()),
            RegistryError::Unavailable(_) => rpc_err(error_codes::INTERNAL_ERROR, e.to_string()),
        }
    }
}

#[derive(Deserialize)]
struct NameParam {
    name: String,
}

/// `tools/call` and `prompts/get` params, read in one pass; `arguments`
/// stays raw.
#[derive(Deserialize)]
struct NameAndArguments {
    name: String,
    #[serde(default)]
    arguments: Option<Box<RawValue>>,
}

fn params_of<T: for<'de> Deserialize<'de>>(p: &Option<Box<RawValue>>) -> Result<T, ErrorObject> {
    let text = p.as_deref().map(RawValue::get).unwrap_or("{}");
    serde_json::from_str(text).map_err(|e| invalid_params(format!("invalid params: {e}")))
}

fn cursor_of(params: &Option<Box<RawValue>>) -> Option<String> {
    params
        .as_deref()
        .and_then(|p| raw_field::<Option<String>>(p, "cursor").ok().flatten())
        .flatten()
}

/// `{"<field>":[raw,...],"nextCursor":"..."}` built from raw items, so
/// nothing relayed is re-serialised.
fn page_result<'a>(
    field: &str,
    items: impl Iterator<Item = &'a RawValue>,
    next: Option<String>,
) -> Reply {
    let mut out = String::with_capacity(4096);
    out.push_str("{\"");
    out.push_str(field);
    out.push_str("\":[");
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item.get());
    }
    out.push(']');
    if let Some(c) = next {
        out.push_str(",\"nextCursor\":");
        out.push_str(&serde_json::to_string(&c).unwrap_or_else(|_| "\"\"".into()));
    }
    out.push('}');
    RawValue::from_string(out).map_err(|e| rpc_err(error_codes::INTERNAL_ERROR, e.to_string()))
}

impl Engine {
    pub fn new(
        registry: Registry,
        info: EngineInfo,
        store: Option<Arc<ConfigStore>>,
    ) -> Arc<Engine> {
        Arc::new(Engine {
            registry,
            info,
            started: Instant::now(),
            store,
            sessions: AtomicUsize::new(0),
        })
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Client sessions whose connection has not been freed yet.
    pub fn session_count(&self) -> usize {
        self.sessions.load(Ordering::SeqCst)
    }

    /// Serve one client over a connection until it closes, with the
    /// default [`SessionLimits`].
    pub fn serve(self: &Arc<Self>, name: &str, conn: Connection) {
        self.serve_with(name, conn, SessionLimits::default());
    }

    /// Serve one client over a connection until it closes.
    ///
    /// One task owns the session and the connection's control for exactly
    /// as long as the connection is open; the peer's handler holds the
    /// session weakly, so a closed connection frees everything.
    pub fn serve_with(self: &Arc<Self>, name: &str, conn: Connection, limits: SessionLimits) {
        self.serve_events(name, conn, limits, self.registry.subscribe());
    }

    fn serve_events(
        self: &Arc<Self>,
        name: &str,
        conn: Connection,
        limits: SessionLimits,
        events: broadcast::Receiver<RegistryEvent>,
    ) {
        self.sessions.fetch_add(1, Ordering::SeqCst);
        let session = Arc::new(Session {
            engine: self.clone(),
            initialized: Mutex::new(false),
            peer: OnceLock::new(),
            in_flight: AtomicUsize::new(0),
            limits,
        });
        let handler = SessionHandler(Arc::downgrade(&session));
        let mut cfg = crate::jsonrpc::PeerConfig::new(name);
        // Host callbacks may wait on a person; be generous.
        cfg.timeout = std::time::Duration::from_secs(600);
        // A client's malformed input gets an error reply, as JSON-RPC asks.
        cfg.answer_invalid = true;
        let peer = Peer::start(cfg, conn.outbound, conn.inbound, Arc::new(handler));
        let _ = session.peer.set(peer.clone());
        tokio::spawn(
            run_session(session, peer, events, conn.control)
                .instrument(info_span!("session", client = name)),
        );
    }

    /// Handle one request as the given session would (also used directly by
    /// the CLI's in-process mode).
    pub async fn handle(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        progress: Option<ProgressSink>,
    ) -> Reply {
        match method {
            methods::TOOLS_LIST => {
                let catalog = self.registry.catalog();
                let (items, next) = catalog
                    .page(cursor_of(&params).as_deref(), PAGE_SIZE)
                    .map_err(|e| invalid_params(e.to_string()))?;
                page_result("tools", items.iter().map(|t| &*t.raw), next)
            }
            methods::TOOLS_CALL => {
                let p: NameAndArguments = params_of(&params)?;
                let opts = CallOptions {
                    on_progress: progress.map(|s| s.callback()),
                    ..Default::default()
                };
                let r = self.registry.call_tool(&p.name, p.arguments, opts).await?;
                Ok(r.raw)
            }
            methods::PROMPTS_LIST => {
                let prompts = self.registry.prompts();
                let (items, next) = prompts
                    .page(cursor_of(&params).as_deref(), PAGE_SIZE)
                    .map_err(|e| invalid_params(e.to_string()))?;
                page_result("prompts", items.iter().map(|p| &*p.raw), next)
            }
            methods::PROMPTS_GET => {
                let p: NameAndArguments = params_of(&params)?;
                Ok(self.registry.get_prompt(&p.name, p.arguments).await?)
            }
            methods::RESOURCES_LIST => {
                let resources = self.registry.resources();
                let (items, next) = resources
                    .page(cursor_of(&params).as_deref(), PAGE_SIZE)
                    .map_err(|e| invalid_params(e.to_string()))?;
                page_result("resources", items.iter().map(|r| &*r.raw), next)
            }
            methods::RESOURCES_TEMPLATES_LIST => {
                let resources = self.registry.resources();
                let (items, next) = resources
                    .page_templates(cursor_of(&params).as_deref(), PAGE_SIZE)
                    .map_err(|e| invalid_params(e.to_string()))?;
                page_result("resourceTemplates", items.iter().map(|r| &*r.raw), next)
            }
            methods::RESOURCES_READ => {
                #[derive(Deserialize)]
                struct UriParam {
                    uri: String,
                }
                let p: UriParam = params_of(&params)?;
                Ok(self.registry.read_resource(&p.uri).await?)
            }
            methods::COMPLETION_COMPLETE => {
                let p = params.ok_or_else(|| invalid_params("completion/complete needs params"))?;
                Ok(self.registry.complete(&p).await?)
            }
            methods::PING => raw(&json!({})),
            "mcphost/status" => self.status(),
            "mcphost/tools/list" => {
                // Each catalog tool plus its server and own name.
                let catalog = self.registry.catalog();
                let mut items = Vec::with_capacity(catalog.tools().len());
                for t in catalog.tools() {
                    let extra = [
                        ("server".to_owned(), to_raw(&t.server).map_err(internal)?),
                        ("tool".to_owned(), to_raw(&t.tool).map_err(internal)?),
                    ];
                    items.push(crate::protocol::set_fields(Some(&t.raw), extra).map_err(internal)?);
                }
                let text = format!(
                    "[{}]",
                    items.iter().map(|r| r.get()).collect::<Vec<_>>().join(",")
                );
                RawValue::from_string(text).map_err(internal)
            }
            "mcphost/servers/list" => self.servers_list(),
            "mcphost/servers/restart" => {
                let p: NameParam = params_of(&params)?;
                self.registry.restart(&p.name).await?;
                raw(&json!({}))
            }
            "mcphost/servers/logs" => {
                #[derive(Deserialize)]
                struct LogsParams {
                    name: String,
                    #[serde(default)]
                    lines: Option<usize>,
                }
                let p: LogsParams = params_of(&params)?;
                let n = p.lines.unwrap_or(200);
                let lines = match self.registry.client(&p.name) {
                    Ok(c) => c.stderr_tail(n),
                    Err(RegistryError::UnknownServer(s)) => {
                        return Err(RegistryError::UnknownServer(s).into());
                    }
                    Err(_) => self
                        .registry
                        .statuses()
                        .into_iter()
                        .find(|s| s.name == p.name)
                        .map(|s| s.stderr_tail.clone())
                        .unwrap_or_default(),
                };
                raw(&json!({ "name": p.name, "lines": lines }))
            }
            "mcphost/servers/add"
            | "mcphost/servers/remove"
            | "mcphost/servers/enable"
            | "mcphost/servers/disable" => self.manage(method, params).await,
            _ => Err(ErrorObject::method_not_found(method)),
        }
    }

    fn status(&self) -> Reply {
        let statuses = self.registry.statuses();
        let ready = statuses
            .iter()
            .filter(|s| s.state == crate::registry::supervisor::ServerState::Ready)
            .count();
        raw(&json!({
            "version": env!("CARGO_PKG_VERSION"),
            "pid": std::process::id(),
            "socket": self.info.socket,
            "configPath": self.info.config_path,
            "configError": self.store.as_ref().and_then(|s| s.last_error()),
            "uptimeSeconds": self.started.elapsed().as_secs(),
            "clients": self.session_count(),
            "servers": statuses.len(),
            "ready": ready,
            "tools": self.registry.catalog().tools().len(),
            "separator": self.registry.naming().separator,
        }))
    }

    fn servers_list(&self) -> Reply {
        let catalog = self.registry.catalog();
        let list: Vec<serde_json::Value> = self
            .registry
            .statuses()
            .iter()
            .map(|s| {
                let mut v = serde_json::to_value(&**s).unwrap_or_default();
                v["tools"] = json!(catalog.count_for(&s.name));
                let renamed: Vec<_> = catalog
                    .collisions()
                    .iter()
                    .filter(|c| c.server == s.name)
                    .map(|c| json!({"tool": c.tool, "name": c.name, "reason": format!("{:?}", c.reason).to_lowercase()}))
                    .collect();
                if !renamed.is_empty() {
                    v["renamed"] = json!(renamed);
                }
                v
            })
            .collect();
        raw(&json!(list))
    }

    async fn manage(&self, method: &str, params: Option<Box<RawValue>>) -> Reply {
        let Some(store) = &self.store else {
            return Err(rpc_err(
                error_codes::INVALID_REQUEST,
                format!(
                    "{method} needs the daemon's config file; it is not available in direct mode"
                ),
            ));
        };
        let result = match method {
            "mcphost/servers/add" => {
                #[derive(Deserialize)]
                struct AddParams {
                    name: String,
                    entry: Box<RawValue>,
                }
                let p: AddParams = params_of(&params)?;
                store.add(&p.name, p.entry.get()).await
            }
            "mcphost/servers/remove" => store.remove(&params_of::<NameParam>(&params)?.name).await,
            "mcphost/servers/enable" => {
                store
                    .set_disabled(&params_of::<NameParam>(&params)?.name, false)
                    .await
            }
            _ => {
                store
                    .set_disabled(&params_of::<NameParam>(&params)?.name, true)
                    .await
            }
        };
        // Applied while the edit holds its turn: edits reach the registry
        // in file order.
        let edited = result.map_err(|e| invalid_params(e.to_string()))?;
        self.registry.apply(&edited.config);
        raw(&json!({}))
    }
}

/// Where progress for a relayed call goes.
#[derive(Clone)]
pub struct ProgressSink {
    peer: Peer,
    token: Box<RawValue>,
}

impl ProgressSink {
    fn callback(self) -> crate::jsonrpc::ProgressCallback {
        Arc::new(move |p: Progress| {
            // The server's params go on byte for byte; only the token is
            // swapped for the one the caller chose.
            let Ok(with_token) = crate::protocol::set_fields(
                Some(&p.params),
                [("progressToken".to_owned(), self.token.clone())],
            ) else {
                return;
            };
            if let Err(e) = self
                .peer
                .try_notify(methods::NOTIFICATION_PROGRESS, Some(with_token))
            {
                debug!("progress not forwarded: {e}");
            }
        })
    }
}

struct Session {
    engine: Arc<Engine>,
    initialized: Mutex<bool>,
    peer: OnceLock<Peer>,
    /// Requests being handled, bounded by `limits.max_in_flight`.
    in_flight: AtomicUsize,
    limits: SessionLimits,
}

/// Lives inside the session's own peer, so it must not keep the session
/// alive: a strong reference here was a cycle that leaked every connection.
struct SessionHandler(Weak<Session>);

impl Drop for Session {
    fn drop(&mut self) {
        self.engine.sessions.fetch_sub(1, Ordering::SeqCst);
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

impl Session {
    fn is_initialized(&self) -> bool {
        *self.initialized.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn initialize(&self, params: &Option<Box<RawValue>>) -> Reply {
        let requested: Option<String> = params
            .as_deref()
            .and_then(|p| raw_field::<String>(p, "protocolVersion").ok().flatten());
        // Echo a handshake revision we speak, else offer our newest.
        let version = requested
            .as_deref()
            .and_then(|v| v.parse::<ProtocolVersion>().ok())
            .filter(|v| v.era() == crate::protocol::Era::Handshake)
            .unwrap_or(ProtocolVersion::LATEST_HANDSHAKE);
        *self.initialized.lock().unwrap_or_else(|p| p.into_inner()) = true;
        raw(&json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": { "listChanged": true },
                "resources": { "listChanged": true },
                "prompts": { "listChanged": true },
                "completions": {},
            },
            "serverInfo": { "name": "mcphost", "version": env!("CARGO_PKG_VERSION") },
            "instructions": format!(
                "mcphost aggregates the tools of many MCP servers. Tool names are <server>{}<tool>.",
                self.engine.registry.naming().separator
            ),
        }))
    }
}

impl RequestHandler for SessionHandler {
    fn handle(&self, r: IncomingRequest) -> BoxFuture<'static, Reply> {
        let Some(session) = self.0.upgrade() else {
            return Box::pin(std::future::ready(Err(rpc_err(
                error_codes::INTERNAL_ERROR,
                "the session is closing",
            ))));
        };
        let limit = session.limits.max_in_flight;
        // Claimed here, not in the future: the peer spawns it later.
        let Some(claim) = InFlight::claim(session) else {
            return Box::pin(std::future::ready(Err(rpc_err(
                BUSY,
                format!(
                    "too many requests in flight on this connection (limit {limit}); \
                     wait for some to finish"
                ),
            ))));
        };
        Box::pin(async move {
            let session = &claim.0;
            if r.method == methods::INITIALIZE {
                return session.initialize(&r.params);
            }
            if !session.is_initialized() {
                let known = matches!(
                    r.method.as_str(),
                    methods::TOOLS_LIST
                        | methods::TOOLS_CALL
                        | methods::PROMPTS_LIST
                        | methods::PROMPTS_GET
                        | methods::RESOURCES_LIST
                        | methods::RESOURCES_TEMPLATES_LIST
                        | methods::RESOURCES_READ
                        | methods::COMPLETION_COMPLETE
                ) || r.method.starts_with("mcphost/");
                return Err(if known {
                    rpc_err(
                        error_codes::INVALID_REQUEST,
                        format!("{} before initialize", r.method),
                    )
                } else {
                    ErrorObject::method_not_found(&r.method)
                });
            }
            let progress = r
                .params
                .as_deref()
                .filter(|p| p.get().contains("\"_meta\""))
                .and_then(|p| raw_field::<Box<RawValue>>(p, "_meta").ok().flatten())
                .and_then(|m| {
                    raw_field::<Box<RawValue>>(&m, "progressToken")
                        .ok()
                        .flatten()
                })
                .and_then(|token| {
                    session.peer.get().map(|peer| ProgressSink {
                        peer: peer.clone(),
                        token,
                    })
                });
            session.engine.handle(&r.method, r.params, progress).await
        })
    }
}

/// Owns one session for as long as its connection is open. Dropping
/// `control` closes the socket, so it is kept until the peer has closed.
async fn run_session(
    session: Arc<Session>,
    peer: Peer,
    events: broadcast::Receiver<RegistryEvent>,
    control: Arc<dyn TransportControl>,
) {
    forward_events(&session, &peer, events, &*control).await;
    peer.closed().await;
}

/// Push catalog changes and server states to one client; a client that does
/// not read is disconnected rather than allowed to stall anyone.
async fn forward_events(
    session: &Session,
    peer: &Peer,
    mut events: broadcast::Receiver<RegistryEvent>,
    control: &dyn TransportControl,
) {
    const SERVER_STATE: &str = "notifications/mcphost/server_state";
    let state = |s: &crate::registry::supervisor::ServerStatus| {
        to_raw(s).ok().map(|p| (SERVER_STATE, Some(p)))
    };
    loop {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = peer.closed() => return,
        };
        let out: Vec<(&str, Option<Box<RawValue>>)> = match ev {
            Ok(RegistryEvent::ToolsChanged) => {
                vec![(methods::NOTIFICATION_TOOLS_LIST_CHANGED, None)]
            }
            Ok(RegistryEvent::ResourcesChanged) => {
                vec![(methods::NOTIFICATION_RESOURCES_LIST_CHANGED, None)]
            }
            Ok(RegistryEvent::PromptsChanged) => {
                vec![(methods::NOTIFICATION_PROMPTS_LIST_CHANGED, None)]
            }
            Ok(RegistryEvent::ServerState(s)) => state(&s).into_iter().collect(),
            // Which events were lost is unknown: the client must re-list
            // everything and learn every server's state again.
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                warn!(
                    missed,
                    "the client's event queue overflowed; resending every list and server state"
                );
                let lists = [
                    methods::NOTIFICATION_TOOLS_LIST_CHANGED,
                    methods::NOTIFICATION_RESOURCES_LIST_CHANGED,
                    methods::NOTIFICATION_PROMPTS_LIST_CHANGED,
                ]
                .map(|m| (m, None));
                let states = session.engine.registry.statuses();
                lists
                    .into_iter()
                    .chain(states.iter().filter_map(|s| state(s)))
                    .collect()
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if !session.is_initialized() {
            continue;
        }
        for (method, params) in out {
            match peer.try_notify(method, params) {
                Ok(()) => {}
                Err(PeerError::QueueFull) => {
                    warn!("client is not reading its messages; disconnecting it");
                    control.shutdown().await;
                    return;
                }
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
