//! The engine: the one method set every door uses (the daemon socket, the
//! CLI's direct mode, and later the C library).
//!
//! It is an aggregating MCP server over the [`Registry`]: `initialize`,
//! paginated `tools/list`, `tools/call` routed through the catalog,
//! resources, prompts, and the `mcphost/*` management methods. One
//! [`Session`] serves one client, whatever door it came through, and the
//! broker routes the servers' own requests back to the right session.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod audit;
mod broker;
mod hygiene;
mod pins;
mod roots;
mod session;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tracing::info;

pub use broker::META_SERVER;
pub use session::{ClientPort, HostPort, Session};

use broker::Broker;
use mcphost_client::{CallOptions, ClientOptions, PolicyHost};
use mcphost_config::HostConfig;
use mcphost_config::store::Edited;
use mcphost_protocol::{ErrorObject, error_codes, methods, raw_field, to_raw};
use mcphost_registry::supervisor::RestartPolicy;
use mcphost_registry::{Registry, RegistryError, ServerOptions};
use mcphost_transport::{BoxFuture, Connection};
use session::Call;

/// Page size of the aggregated lists.
const PAGE_SIZE: usize = 200;
/// The four aggregated lists of the catalog.
pub(crate) fn is_catalog_list(method: &str) -> bool {
    matches!(
        method,
        methods::TOOLS_LIST
            | methods::PROMPTS_LIST
            | methods::RESOURCES_LIST
            | methods::RESOURCES_TEMPLATES_LIST
    )
}

/// How long after start a listing waits for the servers still starting
/// (a slow one joins later, with `list_changed`).
pub const START_LISTING_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long stopping waits for the audit log's last lines to be written.
const AUDIT_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

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
    /// The version `mcphost/status` reports, when not this crate's own
    /// (tests of the CLI's version check only).
    pub version: Option<String>,
    /// Cancelled by `mcphost/daemon/shutdown`; without it (direct mode, the
    /// C library) that method is refused: there is no daemon to stop.
    pub stop: Option<tokio_util::sync::CancellationToken>,
    /// The service manager running the daemon (`systemd`, `launchd`), as
    /// its unit says; the CLI then leaves restarts to it.
    pub service: Option<String>,
    /// Who started the daemon, as it was told (`mcphost daemon status`).
    pub started_by: Option<String>,
}

/// `"handshake"` or `"stateless"` for a negotiated revision.
fn era_of(version: Option<&str>) -> Option<&'static str> {
    let v: mcphost_protocol::ProtocolVersion = version?.parse().ok()?;
    Some(match v.era() {
        mcphost_protocol::Era::Handshake => "handshake",
        mcphost_protocol::Era::Stateless => "stateless",
    })
}

/// One edit of the server list, as `mcphost/servers/*` asks for it.
#[derive(Debug)]
pub enum ConfigEdit {
    Add { name: String, entry: Box<RawValue> },
    Remove { name: String },
    SetDisabled { name: String, disabled: bool },
}

/// How the engine edits its config without knowing where it lives: the
/// daemon provides one over its config file.
pub trait ConfigEditor: Send + Sync + 'static {
    /// Make the edit; the [`Edited`] holds the edit turn until the engine
    /// has applied its config.
    fn edit(&self, edit: ConfigEdit) -> BoxFuture<'_, Result<Edited, String>>;
    /// Why the newest config was rejected, while the last good one runs.
    fn last_error(&self) -> Option<String>;
    /// Keep `vars` as `server`'s `${VAR}` values (above the daemon's own
    /// environment) and read the config again with them. Returns the new
    /// config if anything changed (to apply, as a reload), and whether
    /// `server`'s own entry changed by it (so applying it restarts it).
    fn give(
        &self,
        server: &str,
        vars: BTreeMap<String, String>,
    ) -> BoxFuture<'_, (Option<Edited>, bool)>;
}

pub struct Engine {
    registry: Registry,
    info: EngineInfo,
    started: Instant,
    /// How long after the engine started every configured server first
    /// settled (ready, failed, disabled or waiting for a sign-in): the
    /// start-up time as the engine itself sees it.
    settled_after: Arc<std::sync::OnceLock<std::time::Duration>>,
    /// Tool calls per server and tool, across restarts.
    stats: Arc<mcphost_client::stats::CallStats>,
    /// How each server's requests are tied to calls, across restarts.
    attribution: Arc<mcphost_client::attribution::Attribution>,
    /// Present when there is a config to edit (daemon); absent in direct
    /// mode, where management methods are refused.
    editor: Option<Arc<dyn ConfigEditor>>,
    broker: Broker,
    /// The config's `tokens` and `profiles` (sessions read it when they
    /// configure; costs are counted in its encoding).
    model_view: arc_swap::ArcSwap<mcphost_config::model_view::Settings>,
    next_session: AtomicU64,
    /// The runtime the engine was started on: doors may call in from other
    /// threads (the C library, a benchmark's main thread).
    rt: tokio::runtime::Handle,
}

/// Assembles an engine, its registry and its broker, the same way for the
/// daemon, `--direct` and the C library.
pub struct EngineBuilder {
    config: HostConfig,
    servers: ServerOptions,
    restart: RestartPolicy,
    shell_path: Option<String>,
    fallback: PolicyHost,
    info: EngineInfo,
    editor: Option<Arc<dyn ConfigEditor>>,
    audit_dir: Option<PathBuf>,
}

impl EngineBuilder {
    /// An engine over `config`'s servers. By default a server request no
    /// host can answer is declined (elicitation `decline`, sampling the
    /// user-rejected error).
    pub fn new(config: HostConfig) -> EngineBuilder {
        EngineBuilder {
            config,
            servers: ServerOptions::default(),
            restart: RestartPolicy::default(),
            shell_path: None,
            fallback: PolicyHost::new(
                Some(mcphost_client::ElicitationPolicy::Decline),
                Some(mcphost_client::SamplingPolicy::Decline),
            ),
            info: EngineInfo::default(),
            editor: None,
            audit_dir: None,
        }
    }

    /// Where the audit log is written (`audit.jsonl` in the state
    /// directory); without one nothing is recorded.
    pub fn audit_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.audit_dir = dir;
        self
    }

    /// Client options of every server (`host` is ignored: the broker is
    /// every server's host).
    pub fn client_options(mut self, opts: ClientOptions) -> Self {
        self.servers.client = opts;
        self
    }

    /// The registry's options of every server (the era cache, OAuth,
    /// stored catalogs) with the client's; `client.host` is ignored as in
    /// [`EngineBuilder::client_options`].
    pub fn server_options(mut self, opts: ServerOptions) -> Self {
        self.servers = opts;
        self
    }

    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        self.restart = policy;
        self
    }

    /// `PATH` for stdio servers (the login shell's).
    pub fn shell_path(mut self, path: Option<String>) -> Self {
        self.shell_path = path;
        self
    }

    /// What answers a server request that no connected host can answer.
    pub fn fallback(mut self, fallback: PolicyHost) -> Self {
        self.fallback = fallback;
        self
    }

    pub fn info(mut self, info: EngineInfo) -> Self {
        self.info = info;
        self
    }

    pub fn editor(mut self, editor: Arc<dyn ConfigEditor>) -> Self {
        self.editor = Some(editor);
        self
    }

    /// Start every enabled server and return the engine. Must be called
    /// within a Tokio runtime, which the engine then runs on.
    pub fn start(self) -> Arc<Engine> {
        let audit = audit::AuditLog::new(self.audit_dir, self.config.audit);
        let broker = Broker::new(self.fallback, audit);
        broker.set_config(&self.config);
        let configured = roots::ConfiguredRoots::of(&self.config);
        broker
            .roots()
            .update(&[], roots::Event::Configured(configured));
        let model_view = arc_swap::ArcSwap::from_pointee(self.config.model_view.clone());
        let mut servers = self.servers;
        servers.client.host = Arc::new(broker.clone());
        let started = Instant::now();
        let stats = servers.client.stats.clone();
        let attribution = servers.client.attribution.clone();
        let registry = Registry::start(&self.config, servers, self.restart, self.shell_path);
        let settled_after = Arc::new(std::sync::OnceLock::new());
        let (settling, slot) = (registry.clone(), settled_after.clone());
        tokio::spawn(async move {
            settling.settled(std::time::Duration::MAX).await;
            let took = started.elapsed();
            let statuses = settling.statuses();
            let ready = statuses
                .iter()
                .filter(|s| s.state == mcphost_registry::supervisor::ServerState::Ready)
                .count();
            tracing::info!(
                ms = took.as_secs_f64() * 1e3,
                servers = statuses.len(),
                ready,
                "servers settled"
            );
            let _ = slot.set(took);
            release_freed_memory();
        });
        Arc::new(Engine {
            registry,
            info: self.info,
            started,
            settled_after,
            stats,
            attribution,
            editor: self.editor,
            broker,
            model_view,
            next_session: AtomicU64::new(1),
            rt: tokio::runtime::Handle::current(),
        })
    }
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

/// A registry error as the JSON-RPC error a client is sent.
pub(crate) fn registry_error(e: RegistryError) -> ErrorObject {
    {
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
            RegistryError::UnknownServer(_) | RegistryError::AmbiguousResource { .. } => {
                invalid_params(e.to_string())
            }
            RegistryError::Withheld { .. } | RegistryError::Pins(_) => {
                invalid_params(e.to_string())
            }
            RegistryError::Unavailable(_) => rpc_err(error_codes::INTERNAL_ERROR, e.to_string()),
        }
    }
}

#[derive(Deserialize)]
struct NameParam {
    name: String,
    /// `${VAR}` values from the environment of the CLI that asks (add,
    /// enable, restart): the variables the entry names that it has set.
    #[serde(default)]
    env: BTreeMap<String, String>,
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
    /// What answers the servers' requests: the broker, routing to hosts.
    pub fn host(&self) -> Arc<dyn mcphost_client::Host> {
        Arc::new(self.broker.clone())
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The config's `tokens` and `profiles` in force.
    pub fn model_view_settings(&self) -> Arc<mcphost_config::model_view::Settings> {
        self.model_view.load_full()
    }

    /// Client sessions that have not been freed yet.
    pub fn session_count(&self) -> usize {
        self.broker.session_count()
    }

    /// Serve one client over a connection until it closes, with the
    /// default [`SessionLimits`].
    pub fn serve(self: &Arc<Self>, name: &str, conn: Connection) {
        self.serve_with(name, conn, SessionLimits::default());
    }

    /// Serve one socket client over a connection until it closes. The
    /// session is freed when the connection closes.
    pub fn serve_with(self: &Arc<Self>, name: &str, conn: Connection, limits: SessionLimits) {
        self.serve_events(name, conn, limits, self.registry.subscribe());
    }

    /// A session for an in-process client (the CLI's `--direct`, the C
    /// library). It lives as long as the caller holds it; registry events
    /// reach it through `port` meanwhile.
    pub fn open_session(
        self: &Arc<Self>,
        name: &str,
        port: Arc<dyn ClientPort>,
        limits: SessionLimits,
    ) -> Arc<Session> {
        let session = Arc::new(Session::new(
            self.next_session_id(),
            name,
            self.clone(),
            port,
            limits,
        ));
        self.add_session(&session);
        let weak = Arc::downgrade(&session);
        let events = self.registry.subscribe();
        self.rt.spawn(session::forward_events(
            weak,
            events,
            std::future::pending::<()>(),
        ));
        session
    }

    fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    fn add_session(&self, session: &Arc<Session>) {
        self.broker.add(session.id(), Arc::downgrade(session));
        self.registry.session_opened(session.id());
    }

    /// Called by a session's `Drop`.
    fn session_gone(&self, id: u64) {
        self.registry.forget_session(id);
        if self.broker.remove(id) {
            info!(session = id, "the primary host disconnected");
        }
        self.roots_event(roots::Event::Left(id));
    }

    fn set_primary(&self, id: u64, primary: bool) {
        if self.broker.set_primary(id, primary) {
            info!(session = id, primary, "primary host changed");
            self.roots_event(roots::Event::Primary(self.broker.primary()));
        }
    }

    fn elicitation_session(&self, elicitation: &str) -> Option<u64> {
        self.broker.elicitation_session(elicitation)
    }

    /// The roots some servers would be given may have changed: tell those
    /// that were offered roots and whose roots did change.
    fn roots_event(&self, event: roots::Event) {
        let clients = self.registry.roots_clients();
        let targets: Vec<roots::Target> = clients
            .iter()
            .map(|c| roots::Target {
                server: c.server.clone(),
                session: c.session,
            })
            .collect();
        let tell = self.broker.roots().update(&targets, event);
        if tell.is_empty() {
            return;
        }
        let told: Vec<_> = clients
            .into_iter()
            .zip(targets)
            .filter(|(_, t)| tell.contains(t))
            .map(|(c, _)| c)
            .collect();
        self.rt.spawn(async move {
            let sends = told.iter().map(|c| async move {
                info!(server = %c.server, session = ?c.session, "telling the server its roots changed");
                let method = methods::NOTIFICATION_ROOTS_LIST_CHANGED;
                if let Err(e) = c.client.notify(method, None).await {
                    tracing::debug!(server = %c.server, "roots/list_changed not sent: {e}");
                }
            });
            futures_util::future::join_all(sends).await;
        });
    }

    /// Waits, within [`START_LISTING_WAIT`] of the engine's start, until the
    /// servers configured at start have settled: a host that lists while
    /// they start gets the whole catalog, not the part that was quick.
    pub(crate) async fn until_started(&self) {
        if self.settled_after.get().is_some() {
            return;
        }
        let left = START_LISTING_WAIT.saturating_sub(self.started.elapsed());
        if !left.is_zero() {
            self.registry.settled(left).await;
        }
    }

    /// Wait until every server is ready, failed or disabled (at most
    /// `limit`); one line per server that is not ready, or ready with a
    /// catalog that could not be listed: its name and why.
    pub async fn wait_started(&self, limit: std::time::Duration) -> Vec<String> {
        use mcphost_registry::supervisor::ServerState;
        self.registry.settled(limit).await;
        self.registry
            .statuses()
            .iter()
            .filter(|s| {
                s.list_error.is_some()
                    || !matches!(
                        s.state,
                        ServerState::Ready | ServerState::Disabled | ServerState::Idle
                    )
            })
            .map(|s| {
                let named = format!("server '{}'", s.name);
                let why = match (&s.error, &s.list_error) {
                    (Some(e), _) => e.clone(),
                    (None, Some(e)) => {
                        let e = e.strip_prefix(&format!("{named}: ")).unwrap_or(e);
                        format!("listing failed: {e}")
                    }
                    (None, None) => format!("not ready after {limit:?}"),
                };
                // Most start errors already begin with the server's name.
                if why.starts_with(&named) {
                    why
                } else {
                    format!("{named}: {why}")
                }
            })
            .collect()
    }

    /// Stop every server; resolves when all their processes are gone.
    pub async fn shutdown(&self) {
        self.registry.shutdown().await;
        // The last calls' lines, before the process may exit.
        let audit = self.broker.audit().clone();
        let _ = tokio::task::spawn_blocking(move || audit.flush(AUDIT_FLUSH)).await;
    }

    /// Take up a new config: servers (see [`Registry::apply`]) and roots.
    pub fn apply(&self, cfg: &HostConfig) {
        self.broker.set_config(cfg);
        self.broker.audit().set(cfg.audit);
        if **self.model_view.load() != cfg.model_view {
            self.model_view.store(Arc::new(cfg.model_view.clone()));
        }
        // Told before the reload: the servers it keeps take up new roots
        // without a restart.
        self.roots_event(roots::Event::Configured(roots::ConfiguredRoots::of(cfg)));
        self.registry.apply(cfg);
    }

    /// One request of a session, past its gating: the aggregated method set.
    async fn dispatch(&self, call: Call, method: &str, params: Option<Box<RawValue>>) -> Reply {
        let opts = CallOptions {
            on_progress: call.progress.map(|s| s.callback()),
            origin: Some(call.origin),
            ..Default::default()
        };
        if is_catalog_list(method) && cursor_of(&params).is_none() {
            self.registry.revalidate();
        }
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
                let audit = self.audit_begin(&call.caller, method, &p.name, p.arguments.as_deref());
                let r = self.registry.call_tool(&p.name, p.arguments, opts).await;
                Ok(audit::settle(audit, r, |r| r.is_error)?.raw)
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
                let audit = self.audit_begin(&call.caller, method, &p.name, p.arguments.as_deref());
                let r = self.registry.get_prompt(&p.name, p.arguments, opts).await;
                audit::settle(audit, r, |_| false)
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
                let audit = self.audit_begin(&call.caller, method, &p.uri, None);
                let r = self.registry.read_resource(&p.uri, opts).await;
                audit::settle(audit, r, |_| false)
            }
            methods::COMPLETION_COMPLETE => {
                let p = params.ok_or_else(|| invalid_params("completion/complete needs params"))?;
                Ok(self
                    .registry
                    .complete(&p, opts)
                    .await
                    .map_err(registry_error)?)
            }
            methods::PING => raw(&json!({})),
            _ => self.dispatch_mcphost(method, params).await,
        }
    }

    /// The `mcphost/*` methods past a session's gating.
    async fn dispatch_mcphost(&self, method: &str, params: Option<Box<RawValue>>) -> Reply {
        match method {
            methods::MCPHOST_STATUS => self.status(),
            methods::MCPHOST_TOOLS_LIST => self.annotated_tools(),
            methods::MCPHOST_SERVERS_LIST => self.servers_list(),
            methods::MCPHOST_DAEMON_SHUTDOWN => self.shutdown_request(&params),
            methods::MCPHOST_RESOURCES_LIST => {
                self.registry.resources().annotated().map_err(internal)
            }
            methods::MCPHOST_PROMPTS_LIST => self.registry.prompts().annotated().map_err(internal),
            methods::MCPHOST_SERVERS_RESTART => {
                let p: NameParam = params_of(&params)?;
                // New values restart it by themselves (its entry changed).
                if !self.give(&p.name, p.env).await {
                    self.registry
                        .restart(&p.name)
                        .await
                        .map_err(registry_error)?;
                }
                raw(&json!({}))
            }
            methods::MCPHOST_SERVERS_LOGS => self.server_logs(&params),
            methods::MCPHOST_SERVERS_ADD
            | methods::MCPHOST_SERVERS_REMOVE
            | methods::MCPHOST_SERVERS_ENABLE
            | methods::MCPHOST_SERVERS_DISABLE => self.manage(method, params).await,
            methods::MCPHOST_PINS_LIST
            | methods::MCPHOST_PINS_DIFF
            | methods::MCPHOST_PINS_APPROVE
            | methods::MCPHOST_PINS_RESET => self.pins_request(method, &params),
            methods::MCPHOST_AUDIT_QUERY => self.audit_query(&params).await,
            _ => Err(ErrorObject::method_not_found(method)),
        }
    }

    /// `mcphost/tools/list`: each catalog tool plus its server, own name
    /// and token cost.
    fn annotated_tools(&self) -> Reply {
        let catalog = self.registry.catalog();
        let enc = self.model_view.load().encoding;
        let hidden = self.registry.hidden_text();
        let drifted = self.registry.drifted_tools();
        let mut items = Vec::with_capacity(catalog.tools().len());
        for t in catalog.tools() {
            let mut extra = vec![
                ("server".to_owned(), to_raw(&t.server).map_err(internal)?),
                ("tool".to_owned(), to_raw(&t.tool).map_err(internal)?),
                (
                    "tokens".to_owned(),
                    to_raw(&t.tokens(enc)).map_err(internal)?,
                ),
            ];
            if let Some((found, mode)) = hygiene::hidden_of_tool(&hidden, &t.server, &t.tool) {
                extra.push(("hiddenText".to_owned(), to_raw(&found).map_err(internal)?));
                extra.push(("hygiene".to_owned(), to_raw(mode).map_err(internal)?));
            }
            // A tool that differs from its pin (`pinning: warn`).
            if !drifted.is_empty()
                && let Some(d) = drifted.get(&(t.server.clone(), t.tool.clone()))
            {
                extra.push(("drift".to_owned(), to_raw(d).map_err(internal)?));
            }
            items.push(mcphost_protocol::set_fields(Some(&t.raw), extra).map_err(internal)?);
        }
        let text = format!(
            "[{}]",
            items.iter().map(|r| r.get()).collect::<Vec<_>>().join(",")
        );
        RawValue::from_string(text).map_err(internal)
    }

    /// `mcphost/servers/logs`: a server's last stderr lines.
    fn server_logs(&self, params: &Option<Box<RawValue>>) -> Reply {
        #[derive(Deserialize)]
        struct LogsParams {
            name: String,
            #[serde(default)]
            lines: Option<usize>,
        }
        let p: LogsParams = params_of(params)?;
        let n = p.lines.unwrap_or(200);
        let lines = match self.registry.client(&p.name) {
            Ok(c) => c.stderr_tail(n),
            Err(RegistryError::UnknownServer(s)) => {
                return Err(registry_error(RegistryError::UnknownServer(s)));
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

    fn status(&self) -> Reply {
        let statuses = self.registry.statuses();
        let ready = statuses
            .iter()
            .filter(|s| s.state == mcphost_registry::supervisor::ServerState::Ready)
            .count();
        let (mut handshake, mut stateless) = (0usize, 0usize);
        for s in &statuses {
            match era_of(s.protocol_version.as_deref()) {
                Some("stateless") => stateless += 1,
                Some(_) => handshake += 1,
                None => {}
            }
        }
        raw(&json!({
            "eras": { "handshake": handshake, "stateless": stateless },
            "version": self.info.version.as_deref().unwrap_or(env!("CARGO_PKG_VERSION")),
            "pid": std::process::id(),
            "service": self.info.service,
            "startedBy": self.info.started_by,
            "socket": self.info.socket,
            "configPath": self.info.config_path,
            "configError": self.editor.as_ref().and_then(|s| s.last_error()),
            "uptimeSeconds": self.started.elapsed().as_secs(),
            // null until every server configured at start has settled.
            "settledAfterMs": self.settled_after.get().map(|d| d.as_secs_f64() * 1e3),
            "runtime": {
                "aliveTasks": self.rt.metrics().num_alive_tasks(),
                "workers": self.rt.metrics().num_workers(),
            },
            "clients": self.session_count(),
            "primaryHost": self.broker.primary(),
            "primaryHostName": self.broker.primary_name(),
            "servers": statuses.len(),
            "ready": ready,
            // Servers whose sign-in was stopped: name → the last error and the fix.
            "authFailed": statuses
                .iter()
                .filter(|s| s.state == mcphost_registry::supervisor::ServerState::AuthFailed)
                .map(|s| (s.name.clone(), s.error.clone()))
                .collect::<std::collections::BTreeMap<_, _>>(),
            "tools": self.registry.catalog().tools().len(),
            // What token costs are counted in (null: a build without `tokens`).
            "tokenEncoding": mcphost_registry::cost::AVAILABLE.then(|| self.model_view.load().encoding.as_str()),
            "separator": self.registry.naming().separator,
            // Per server: its tool calls so far (servers never called are left out).
            "calls": statuses
                .iter()
                .filter_map(|s| Some((s.name.clone(), self.stats.server(&s.name)?.all)))
                .collect::<std::collections::BTreeMap<_, _>>(),
        }))
    }

    /// `mcphost/daemon/shutdown`: stop the daemon (as SIGTERM does), or with
    /// `ifAlone`, only when the caller is its one client.
    fn shutdown_request(&self, params: &Option<Box<RawValue>>) -> Reply {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct ShutdownParams {
            #[serde(default)]
            if_alone: bool,
        }
        let p: ShutdownParams = params_of(params)?;
        let Some(stop) = &self.info.stop else {
            return Err(rpc_err(
                error_codes::INVALID_REQUEST,
                "mcphost/daemon/shutdown: this engine runs inside its host (--direct or the C \
                 library), not as a daemon; there is no daemon to stop",
            ));
        };
        let clients = self.session_count();
        if p.if_alone && clients > 1 {
            return raw(&json!({ "stopping": false, "clients": clients }));
        }
        info!(clients, "shutdown requested by a client: stopping");
        stop.cancel();
        raw(&json!({ "stopping": true, "clients": clients }))
    }

    /// How a server's requests to hosts are tied to the calls that caused
    /// them: `mode` and why, then what was learnt (see
    /// [`mcphost_client::attribution`]).
    fn attribution_of(&self, s: &mcphost_registry::supervisor::ServerStatus) -> serde_json::Value {
        let learned = self.attribution.summary(&s.name);
        let stateless = era_of(s.protocol_version.as_deref()) == Some("stateless");
        let (mode, why) = if self.registry.per_session(&s.name) {
            (
                "per-session",
                "each host's calls go to an instance of its own",
            )
        } else if stateless {
            (
                "stream",
                "the 2026-07-28 revision returns its questions in the call's own result",
            )
        } else if s.transport == "streamable-http" || s.transport == "http" {
            (
                "stream",
                "each request comes on the stream of the call that caused it",
            )
        } else if learned.as_ref().is_some_and(|l| l.asks_outside_calls) {
            (
                "fallback",
                "it asked while none of its calls was in flight, so its requests cannot be tied to a call: the fallback answers them; give it \"share\": \"per-session\" to let it ask each host",
            )
        } else if learned.as_ref().is_some_and(|l| l.asked) {
            (
                "scheduled",
                "it asks its host on a channel that does not say for which call, so one host's calls run at a time",
            )
        } else {
            (
                "unscheduled",
                "it has not asked a host anything yet: every host's calls run at once until it does",
            )
        };
        let mut v = json!({"mode": mode, "why": why});
        if let Some(l) = learned
            && let Ok(extra) = serde_json::to_value(l)
            && let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object())
        {
            o.extend(e.clone());
        }
        v
    }

    fn servers_list(&self) -> Reply {
        let catalog = self.registry.catalog();
        let resources = self.registry.resources();
        let enc = self.model_view.load().encoding;
        // Per server: the tokens of its listed tools (None without `tokens`).
        let mut tokens: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        let counted = mcphost_registry::cost::AVAILABLE;
        if counted {
            for t in catalog.tools() {
                let n = u64::from(t.tokens(enc).unwrap_or_default());
                let sum = tokens.entry(t.server.as_str()).or_default();
                *sum = sum.saturating_add(n);
            }
        }
        let hidden = self.registry.hidden_text();
        let list: Vec<serde_json::Value> = self
            .registry
            .statuses()
            .iter()
            .map(|s| {
                let mut v = serde_json::to_value(&**s).unwrap_or_default();
                v["tools"] = json!(catalog.count_for(&s.name));
                if counted {
                    v["tokens"] = json!(tokens.get(s.name.as_str()).copied().unwrap_or(0));
                }
                if let Some(calls) = self.stats.server(&s.name) {
                    v["calls"] = json!(calls);
                }
                let era = era_of(s.protocol_version.as_deref());
                if let Some(era) = era {
                    v["era"] = json!(era);
                }
                v["attribution"] = self.attribution_of(s);
                for (k, val) in self.broker.roots().describe(&s.name, era == Some("stateless")) {
                    v[k] = val;
                }
                if let Some(h) = hidden.get(&s.name) {
                    v["hygiene"] = json!(hygiene::name(h.hygiene));
                    v["hiddenText"] = json!(h.items.iter().map(|i| i.findings.len()).sum::<usize>());
                }
                let renamed: Vec<_> = catalog
                    .collisions()
                    .iter()
                    .filter(|c| c.server == s.name)
                    .map(|c| json!({"tool": c.tool, "name": c.name, "reason": format!("{:?}", c.reason).to_lowercase()}))
                    .collect();
                if !renamed.is_empty() {
                    v["renamed"] = json!(renamed);
                }
                v["resources"] = json!(resources.count_for(&s.name));
                v["templates"] = json!(resources.templates_for(&s.name));
                let renamed: Vec<_> = resources.renamed_for(&s.name).collect();
                if !renamed.is_empty() {
                    v["renamedResources"] = json!(renamed);
                }
                v
            })
            .collect();
        raw(&json!(list))
    }

    async fn manage(&self, method: &str, params: Option<Box<RawValue>>) -> Reply {
        let Some(editor) = &self.editor else {
            return Err(rpc_err(
                error_codes::INVALID_REQUEST,
                format!(
                    "{method} needs the daemon's config file; it is not available in direct mode"
                ),
            ));
        };
        let edit = match method {
            methods::MCPHOST_SERVERS_ADD => {
                #[derive(Deserialize)]
                struct AddParams {
                    name: String,
                    entry: Box<RawValue>,
                    #[serde(default)]
                    env: BTreeMap<String, String>,
                }
                let p: AddParams = params_of(&params)?;
                self.give(&p.name, p.env).await;
                ConfigEdit::Add {
                    name: p.name,
                    entry: p.entry,
                }
            }
            methods::MCPHOST_SERVERS_REMOVE => ConfigEdit::Remove {
                name: params_of::<NameParam>(&params)?.name,
            },
            other => {
                let p = params_of::<NameParam>(&params)?;
                if other == methods::MCPHOST_SERVERS_ENABLE {
                    self.give(&p.name, p.env).await;
                }
                ConfigEdit::SetDisabled {
                    name: p.name,
                    disabled: other == methods::MCPHOST_SERVERS_DISABLE,
                }
            }
        };
        // Applied while the edit holds its turn: edits reach the registry
        // in file order.
        let edited = editor.edit(edit).await.map_err(invalid_params)?;
        self.apply(&edited.config);
        raw(&json!({}))
    }

    /// Hand a CLI's `${VAR}` values for `server` to the config (see
    /// [`ConfigEditor::give`]) and apply what they changed. True when they
    /// changed `server`'s entry, which restarts it. Without an editor
    /// (direct mode) the values are the process's own: nothing to do.
    async fn give(&self, server: &str, vars: BTreeMap<String, String>) -> bool {
        let Some(editor) = &self.editor else {
            return false;
        };
        if vars.is_empty() {
            return false;
        }
        let (edited, changed) = editor.give(server, vars).await;
        if let Some(edited) = edited {
            self.apply(&edited.config);
        }
        changed
    }
}

#[cfg(test)]
mod tests;

/// Start-up parses and merges every server's lists and frees most of it;
/// glibc keeps the freed pages in its arenas (about 5 MiB at 100 servers).
/// Hand them back once, when the servers have settled.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the kernel; it takes
    // glibc's own arena locks and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}
