//! The registry: one supervised client per configured server, and the
//! namespaced catalog over all of them.
//!
//! Every server starts concurrently and independently; a slow or broken one
//! only affects its own entry. Lists are fetched when a server becomes ready
//! (retried with backoff when that fails) and again when it says a list
//! changed; each change rebuilds the catalog, and a list whose bytes changed
//! is announced as a [`RegistryEvent`].
//!
//! Supervisor events carry their instance's generation: events from an
//! instance a reload replaced are dropped. A lagged event channel resyncs
//! every server from its supervisor. Reloads never wait for old servers to
//! stop; [`Registry::shutdown`] does.

pub mod catalog;
pub mod cost;
mod lazy;
mod logs;
mod resources;
pub mod stored;
pub mod supervisor;
pub mod uri;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::client::{CallOptions, ClientError, ClientOptions, ServerClient, ServerEvent};
use crate::config::{HostConfig, ServerConfig, Share, TransportConfig};
use crate::jsonrpc::Origin;
use crate::protocol::{Prompt, Resource, ResourceTemplate, Tool, ToolResult};
use arc_swap::ArcSwap;
use catalog::{
    Catalog, CatalogBuilder, CatalogPrompt, CatalogTool, NamingRules, PromptCatalog,
    ResourceCatalog, ServerResources,
};
pub use logs::LogLevel;
use supervisor::{
    Launch, RestartPolicy, ServerState, ServerStatus, SessionInstance, SupervisorEvent,
    SupervisorHandle,
};

/// A host limited to what the config offers one server.
struct OfferedHost {
    host: Arc<dyn crate::client::Host>,
    offer: crate::config::Offer,
}

impl OfferedHost {
    fn offered(
        &self,
        mut caps: crate::protocol::ClientCapabilities,
    ) -> crate::protocol::ClientCapabilities {
        if !self.offer.sampling {
            caps.sampling = None;
        }
        if !self.offer.elicitation {
            caps.elicitation = None;
        }
        if !self.offer.roots {
            caps.roots = None;
        }
        caps
    }
}

impl crate::client::Host for OfferedHost {
    fn capabilities(&self) -> crate::protocol::ClientCapabilities {
        self.offered(self.host.capabilities())
    }

    fn capabilities_for(&self, origin: Option<&Origin>) -> crate::protocol::ClientCapabilities {
        self.offered(self.host.capabilities_for(origin))
    }

    fn handle(
        &self,
        r: crate::client::HostRequest,
    ) -> crate::transport::BoxFuture<'static, Result<Box<RawValue>, crate::protocol::ErrorObject>>
    {
        // Requests past the capabilities were refused before this point.
        self.host.handle(r)
    }
}

/// The host of a session's own instance: everything it asks belongs to that
/// session, whatever the wire says.
struct SessionHost {
    host: Arc<dyn crate::client::Host>,
    session: u64,
}

impl crate::client::Host for SessionHost {
    fn capabilities(&self) -> crate::protocol::ClientCapabilities {
        self.host.capabilities()
    }

    /// The owner's own capabilities: for its call, those that call
    /// declared (a stateless client declares per request).
    fn capabilities_for(&self, origin: Option<&Origin>) -> crate::protocol::ClientCapabilities {
        let origin = origin
            .filter(|o| o.session == self.session)
            .cloned()
            .unwrap_or(Origin {
                session: self.session,
                request: crate::protocol::Id::number(0),
            });
        self.host.capabilities_for(Some(&origin))
    }

    fn handle(
        &self,
        mut r: crate::client::HostRequest,
    ) -> crate::transport::BoxFuture<'static, Result<Box<RawValue>, crate::protocol::ErrorObject>>
    {
        let request = match &r.relation {
            crate::jsonrpc::Relation::Caused(o) => o.request.clone(),
            _ => crate::protocol::Id::number(0),
        };
        r.relation = crate::jsonrpc::Relation::Caused(Origin {
            session: self.session,
            request,
        });
        if r.asker == crate::client::Asker::Shared {
            r.asker = crate::client::Asker::Session(self.session);
        }
        self.host.handle(r)
    }
}

/// A ready server instance that was offered roots.
pub struct RootsClient {
    pub server: String,
    /// The session whose own instance it is (`share: per-session`).
    pub session: Option<u64>,
    pub client: Arc<ServerClient>,
}

/// What changed, for socket clients and the CLI.
#[derive(Debug, Clone)]
pub enum RegistryEvent {
    ToolsChanged,
    ResourcesChanged,
    PromptsChanged,
    ServerState(Arc<ServerStatus>),
    /// A server's `notifications/message`, params untouched. `callers`
    /// are the sessions that had a call in flight to the server when it
    /// came; which sessions get it is theirs to decide (docs/ipc.md).
    Log {
        server: String,
        params: Box<RawValue>,
        callers: Arc<[u64]>,
    },
    /// A server's `notifications/elicitation/complete`, params untouched.
    ElicitationComplete {
        server: String,
        params: Box<RawValue>,
    },
    /// A subscribed resource changed: `uri` as those sessions subscribed
    /// to it (the exposed form), for them only.
    ResourceUpdated {
        uri: String,
        sessions: Arc<[u64]>,
    },
    /// One stderr line of a server's process (stdio), at most
    /// [`supervisor::STDERR_LINES_PER_SECOND`] per server; past that a
    /// `[mcphost: N stderr lines dropped]` line stands for the rest.
    Stderr {
        server: String,
        line: Arc<str>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    #[error("unknown prompt {0:?}")]
    UnknownPrompt(String),
    #[error("no server offers resource {0:?}")]
    UnknownResource(String),
    /// Several servers could serve the URI; the message names the
    /// `mcphost://<server>/` forms to use instead.
    #[error("{}", catalog::ResolveError::Ambiguous { uri: uri.clone(), servers: servers.clone() })]
    AmbiguousResource { uri: String, servers: Vec<String> },
    #[error("unknown server {0:?}")]
    UnknownServer(String),
    #[error("{0}")]
    Unavailable(String),
    #[error(transparent)]
    Client(#[from] ClientError),
}

#[derive(Default, Clone)]
struct Lists {
    tools: Vec<Tool>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    prompts: Vec<Prompt>,
}

/// What one listing of a server fetched: `None` for a list that failed
/// (the entry keeps its previous one).
struct Fetched {
    tools: Option<Vec<Tool>>,
    resources: Option<Vec<Resource>>,
    templates: Option<Vec<ResourceTemplate>>,
    prompts: Option<Vec<Prompt>>,
    errors: Vec<String>,
}

struct Entry {
    config: ServerConfig,
    handle: SupervisorHandle,
    lists: Lists,
    /// Lists fetched at least once since the server last became ready.
    listed: bool,
    /// Why the last listing failed; cleared by a good one or a new state.
    list_error: Option<String>,
    /// Bumped by every listing started, so only the newest one retries.
    listing: u64,
    /// `share: per-session`: each session's own instance, by session id.
    per_session: HashMap<u64, SupervisorHandle>,
    /// `lists` hold a catalog (stored or listed), though perhaps not live.
    known: bool,
    /// A lazy server started only to learn its lists (none were stored).
    learning: bool,
    /// Digest of the catalog last stored for it.
    stored: Option<u64>,
}

impl Entry {
    fn new(config: ServerConfig, handle: SupervisorHandle) -> Entry {
        Entry {
            config,
            handle,
            lists: Lists::default(),
            listed: false,
            list_error: None,
            listing: 0,
            per_session: HashMap::new(),
            known: false,
            learning: false,
            stored: None,
        }
    }

    /// This entry's processes: the shared one and every session's.
    fn all_handles(self) -> impl Iterator<Item = SupervisorHandle> {
        std::iter::once(self.handle).chain(self.per_session.into_values())
    }

    /// The entry's allow/deny filter, applied once per listing: a changed
    /// filter means a changed entry and fresh lists.
    fn drop_filtered_tools(&mut self) {
        let filter = &self.config.tools;
        self.lists.tools.retain(|t| filter.allows(&t.name));
    }

    /// The supervisor's status plus what only the registry knows.
    fn status(&self) -> Arc<ServerStatus> {
        let status = self.handle.status();
        let list_error = self
            .list_error
            .as_ref()
            .filter(|_| status.state == ServerState::Ready);
        // `ready` means its tools are in the catalog: until the first
        // listing lands, a connected server is still starting.
        let unlisted = status.state == ServerState::Ready && !self.listed;
        let cached = self.config.start == crate::config::StartMode::Lazy
            && self.known
            && !self.listed
            && !matches!(status.state, ServerState::Disabled | ServerState::Stopped);
        if list_error.is_none() && self.per_session.is_empty() && !unlisted && !cached {
            return status;
        }
        let mut s = (*status).clone();
        s.cached = cached;
        if unlisted {
            s.state = ServerState::Starting;
        }
        s.list_error = list_error.cloned();
        let mut instances: Vec<SessionInstance> = self
            .per_session
            .iter()
            .map(|(session, h)| {
                let st = h.status();
                SessionInstance {
                    session: *session,
                    state: st.state,
                    pid: st.pid,
                }
            })
            .collect();
        instances.sort_by_key(|i| i.session);
        s.session_instances = instances;
        Arc::new(s)
    }
}

struct State {
    /// Config order; it decides the catalog's listing order.
    entries: Vec<Entry>,
    rules: NamingRules,
    /// Entries of the config with errors: shown, never started.
    broken: Vec<Arc<ServerStatus>>,
}

/// Every server's namespaced part, kept between listings so that one
/// server's change re-names only that server's items.
struct Builders {
    tools: CatalogBuilder<CatalogTool>,
    prompts: CatalogBuilder<CatalogPrompt>,
}

impl Builders {
    /// Every server's part from scratch (a reload: order, prefixes or rules
    /// may have changed).
    fn full(st: &State) -> Builders {
        let mut tools = CatalogBuilder::new("tools", st.rules.clone());
        let mut prompts = CatalogBuilder::new("prompts", st.rules.clone());
        for e in &st.entries {
            let (server, prefix) = (&e.config.name, e.config.prefix());
            tools.push_server(server, prefix, catalog::tool_items(&e.lists.tools));
            prompts.push_server(server, prefix, catalog::prompt_items(&e.lists.prompts));
        }
        Builders { tools, prompts }
    }
}

/// The published listings. Readers (listings, calls) load a pointer and
/// never wait: a new listing is built aside and swapped in.
struct Published {
    catalog: ArcSwap<Catalog>,
    prompts: ArcSwap<PromptCatalog>,
    resources: ArcSwap<ResourceCatalog>,
}

impl State {
    fn entry(&self, server: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.config.name == server)
    }

    /// `server`'s entry if it is still the instance `generation`.
    fn instance_mut(&mut self, server: &str, generation: u64) -> Option<&mut Entry> {
        self.entries
            .iter_mut()
            .find(|e| e.config.name == server && e.handle.generation() == generation)
    }
}

struct Inner {
    state: RwLock<State>,
    /// Held while a listing is composed, never by a call. Lock order:
    /// `builders`, then `state`.
    builders: std::sync::Mutex<Builders>,
    published: Published,
    base: ClientOptions,
    /// PATH from the user's login shell, for servers without their own.
    shell_path: Option<String>,
    policy: RestartPolicy,
    supervisor_events: broadcast::Sender<SupervisorEvent>,
    events: broadcast::Sender<RegistryEvent>,
    settled: tokio::sync::watch::Sender<()>,
    /// Remembered result URIs and subscriptions.
    res: resources::ResourceState,
    /// Stops of servers a reload removed or replaced; shutdown waits for them.
    stopping: TaskTracker,
    /// Set by shutdown: later config changes start nothing.
    closed: AtomicBool,
    /// Each session's log levels and what each server was set to.
    logs: logs::LogState,
}

/// Cloneable handle to the registry.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

fn rules_of(cfg: &HostConfig) -> NamingRules {
    NamingRules {
        separator: cfg.namespacing.separator.clone(),
        max_length: cfg.namespacing.max_length,
        reserve: cfg.namespacing.reserve,
    }
}

fn broken_of(cfg: &HostConfig) -> Vec<Arc<ServerStatus>> {
    cfg.broken
        .iter()
        .map(|b| Arc::new(ServerStatus::broken(b)))
        .collect()
}

impl Registry {
    /// Start every enabled server in `cfg`, all at once.
    pub fn start(
        cfg: &HostConfig,
        base: ClientOptions,
        policy: RestartPolicy,
        shell_path: Option<String>,
    ) -> Registry {
        Registry::start_with_event_capacity(cfg, base, policy, shell_path, 1024)
    }

    /// [`Registry::start`] with room for `capacity` unread supervisor events;
    /// tests make it tiny to exercise the resync after a lag.
    #[doc(hidden)]
    pub fn start_with_event_capacity(
        cfg: &HostConfig,
        base: ClientOptions,
        policy: RestartPolicy,
        shell_path: Option<String>,
        capacity: usize,
    ) -> Registry {
        let (supervisor_events, sup_rx) = broadcast::channel(capacity.max(1));
        let (events, _) = broadcast::channel(1024);
        let rules = rules_of(cfg);
        let inner = Arc::new(Inner {
            builders: std::sync::Mutex::new(Builders {
                tools: CatalogBuilder::new("tools", rules.clone()),
                prompts: CatalogBuilder::new("prompts", rules.clone()),
            }),
            published: Published {
                catalog: ArcSwap::from_pointee(catalog::build(&[], &rules)),
                prompts: ArcSwap::from_pointee(catalog::build_prompts(&[], &rules)),
                resources: ArcSwap::from_pointee(catalog::build_resources(&[])),
            },
            state: RwLock::new(State {
                entries: Vec::new(),
                rules,
                broken: broken_of(cfg),
            }),
            base,
            shell_path,
            policy,
            supervisor_events,
            events,
            settled: tokio::sync::watch::channel(()).0,
            res: resources::ResourceState::default(),
            stopping: TaskTracker::new(),
            closed: AtomicBool::new(false),
            logs: logs::LogState::default(),
        });
        let reg = Registry { inner };
        tokio::spawn(reg.clone().pump(sup_rx));
        {
            let mut st = reg.write();
            for sc in &cfg.servers {
                let e = reg.new_entry(sc);
                st.entries.push(e);
            }
        }
        // Every server gets its (empty, or stored) part now, so each first
        // listing updates only its own part.
        reg.publish_all();
        reg
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.inner.state.write().unwrap_or_else(|p| p.into_inner())
    }

    fn launch_with_start(
        &self,
        sc: &ServerConfig,
        start: supervisor::StartPolicy,
    ) -> SupervisorHandle {
        self.launch_with(
            sc,
            self.inner.base.host.clone(),
            &self.inner.supervisor_events,
            start,
        )
    }

    /// `sc`'s own instance for one session: its requests are that
    /// session's, and its events are nobody's (the shared instance lists).
    fn launch_for_session(&self, sc: &ServerConfig, session: u64) -> SupervisorHandle {
        let host = Arc::new(SessionHost {
            host: self.inner.base.host.clone(),
            session,
        });
        let (events, _) = broadcast::channel(1);
        self.launch_with(sc, host, &events, supervisor::StartPolicy::default())
    }

    fn launch_with(
        &self,
        sc: &ServerConfig,
        host: Arc<dyn crate::client::Host>,
        events: &broadcast::Sender<SupervisorEvent>,
        start: supervisor::StartPolicy,
    ) -> SupervisorHandle {
        let mut opts = self.inner.base.clone();
        opts.protocol_version = sc.protocol_version.or(opts.protocol_version);
        opts.host = if sc.offer == crate::config::Offer::default() {
            host
        } else {
            Arc::new(OfferedHost {
                host,
                offer: sc.offer,
            })
        };
        opts.init_timeout = sc.timeouts.init;
        opts.request_timeout = sc.timeouts.request;
        opts.max_request_timeout = sc.timeouts.max_request;
        let launch = match &sc.transport {
            TransportConfig::Stdio(s) => Launch::Stdio(match &self.inner.shell_path {
                Some(path) => s.to_stdio_config_with_path(&sc.timeouts, path),
                None => s.to_stdio_config(&sc.timeouts),
            }),
            TransportConfig::Http(h) => {
                let mut cfg = h.to_http_config(&sc.timeouts);
                if let Some(auth) = &opts.auth {
                    match auth.authorizer(&sc.name, h) {
                        Some(Ok(a)) => cfg.credentials = Some(a),
                        Some(Err(e)) => {
                            tracing::warn!(server = %sc.name, "OAuth is off for this server: {e}")
                        }
                        None => {}
                    }
                }
                Launch::Http(cfg)
            }
        };
        supervisor::spawn_with(
            &sc.name,
            launch,
            opts,
            self.inner.policy.clone(),
            sc.disabled,
            events.clone(),
            start,
        )
    }

    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.inner.events.subscribe()
    }

    /// The published tool catalog: a pointer load, never a lock.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.published.catalog.load_full()
    }

    /// The naming rules in force (the config's `namespacing`).
    pub fn naming(&self) -> NamingRules {
        self.read().rules.clone()
    }

    pub fn prompts(&self) -> Arc<PromptCatalog> {
        self.inner.published.prompts.load_full()
    }

    pub fn resources(&self) -> Arc<ResourceCatalog> {
        self.inner.published.resources.load_full()
    }

    pub fn statuses(&self) -> Vec<Arc<ServerStatus>> {
        let st = self.read();
        st.entries
            .iter()
            .map(Entry::status)
            .chain(st.broken.iter().cloned())
            .collect()
    }

    /// Whether `server` runs an instance per session (`share: per-session`).
    pub fn per_session(&self, server: &str) -> bool {
        self.read()
            .entry(server)
            .is_some_and(|e| e.config.share == Share::PerSession)
    }

    pub fn server_names(&self) -> Vec<String> {
        self.read()
            .entries
            .iter()
            .map(|e| e.config.name.clone())
            .collect()
    }

    fn handle(&self, server: &str) -> Result<SupervisorHandle, RegistryError> {
        let st = self.read();
        if let Some(e) = st.entry(server) {
            return Ok(e.handle.clone());
        }
        // A broken entry is known: say what is wrong with it.
        match st.broken.iter().find(|b| b.name == server) {
            Some(b) => Err(RegistryError::Unavailable(b.unavailable_reason())),
            None => Err(RegistryError::UnknownServer(server.to_owned())),
        }
    }

    /// The ready client of `server`, or why it is not there.
    pub fn client(&self, server: &str) -> Result<Arc<ServerClient>, RegistryError> {
        self.handle(server)?
            .client()
            .map_err(|st| RegistryError::Unavailable(st.unavailable_reason()))
    }

    /// The ready client of `server` for a call with this timeout (`None`:
    /// the server's request timeout). A server that is starting or
    /// restarting is waited for, up to that timeout; the call then gets
    /// what is left of it.
    /// A call that `origin` caused to a `share: per-session` server goes
    /// to that session's own instance, started on its first call.
    async fn client_for_call(
        &self,
        server: &str,
        timeout: Option<Duration>,
        origin: Option<&Origin>,
    ) -> Result<(Arc<ServerClient>, Option<Duration>), RegistryError> {
        let shared = {
            let st = self.read();
            let e = st
                .entry(server)
                .ok_or_else(|| RegistryError::UnknownServer(server.to_owned()))?;
            let own_instance = origin.is_some() && e.config.share == Share::PerSession;
            (!own_instance).then(|| (e.handle.clone(), e.config.timeouts.request))
        };
        let (handle, default) = if let Some(shared) = shared {
            shared
        } else {
            let mut st = self.write();
            let closed = self.inner.closed.load(Ordering::SeqCst);
            let e = st
                .entries
                .iter_mut()
                .find(|e| e.config.name == server)
                .ok_or_else(|| RegistryError::UnknownServer(server.to_owned()))?;
            let handle = match origin {
                Some(o) if e.config.share == Share::PerSession && !e.config.disabled && !closed => {
                    let cfg = e.config.clone();
                    e.per_session
                        .entry(o.session)
                        .or_insert_with(|| {
                            info!(
                                server,
                                session = o.session,
                                "starting the session's own instance"
                            );
                            self.launch_for_session(&cfg, o.session)
                        })
                        .clone()
                }
                _ => e.handle.clone(),
            };
            (handle, e.config.timeouts.request)
        };
        handle.touch();
        if let Ok(c) = handle.client() {
            return Ok((c, timeout));
        }
        // An idle server is started for this call: it may take its start
        // limit, and the call still gets its whole timeout after.
        if let Some(init) = self.idle_start_limit(server, &handle) {
            let client = handle
                .ready_client(init)
                .await
                .map_err(|st| RegistryError::Unavailable(st.unavailable_reason()))?;
            return Ok((client, timeout));
        }
        let limit = timeout.unwrap_or(default);
        let waited = tokio::time::Instant::now();
        let client = handle
            .ready_client(limit)
            .await
            .map_err(|st| RegistryError::Unavailable(st.unavailable_reason()))?;
        Ok((client, Some(limit.saturating_sub(waited.elapsed()))))
    }

    /// Call a tool by its catalog name.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<ToolResult, RegistryError> {
        let route = self
            .inner
            .published
            .catalog
            .load()
            .route(name)
            .cloned()
            .ok_or_else(|| RegistryError::UnknownTool(name.to_owned()))?;
        let (client, timeout) = self
            .client_for_call(&route.server, opts.timeout, opts.origin.as_ref())
            .await?;
        let opts = CallOptions { timeout, ..opts };
        let r = client.call_tool(&route.tool, arguments, opts).await?;
        let raw = self.expose_uris(&route.server, r.raw, resources::ResultShape::Tool);
        Ok(ToolResult { raw, ..r })
    }

    /// Get a prompt by its catalog name.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, RegistryError> {
        let route = self
            .prompts()
            .route(name)
            .cloned()
            .ok_or_else(|| RegistryError::UnknownPrompt(name.to_owned()))?;
        let (client, timeout) = self
            .client_for_call(&route.server, opts.timeout, opts.origin.as_ref())
            .await?;
        let opts = CallOptions { timeout, ..opts };
        let raw = client.get_prompt(&route.tool, arguments, opts).await?;
        Ok(self.expose_uris(&route.server, raw, resources::ResultShape::Prompt))
    }

    /// `completion/complete`, routed by its `ref`: a prompt's catalog name
    /// is turned back into the server's own; a resource URI goes where
    /// `resources/read` would send it.
    pub async fn complete(
        &self,
        params: &RawValue,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, RegistryError> {
        use crate::protocol::{raw_field, set_fields, to_raw};
        let bad = |m: String| {
            RegistryError::Client(ClientError::Invalid {
                server: String::new(),
                method: "completion/complete".to_owned(),
                reason: m,
            })
        };
        let r: Box<RawValue> = raw_field(params, "ref")
            .map_err(|e| bad(e.to_string()))?
            .ok_or_else(|| bad("missing ref".to_owned()))?;
        let kind: Option<String> = raw_field(&r, "type").map_err(|e| bad(e.to_string()))?;
        let (server, new_ref) = match kind.as_deref() {
            Some("ref/prompt") => {
                let name: String = raw_field(&r, "name")
                    .map_err(|e| bad(e.to_string()))?
                    .unwrap_or_default();
                let route = self
                    .prompts()
                    .route(&name)
                    .cloned()
                    .ok_or(RegistryError::UnknownPrompt(name))?;
                let own = to_raw(&route.tool).map_err(|e| bad(e.to_string()))?;
                let new_ref = set_fields(Some(&r), [("name".to_owned(), own)])
                    .map_err(|e| bad(e.to_string()))?;
                (route.server, new_ref)
            }
            Some("ref/resource") => {
                let uri: String = raw_field(&r, "uri")
                    .map_err(|e| bad(e.to_string()))?
                    .unwrap_or_default();
                let route = self.resolve_resource_ref(&uri)?;
                let new_ref = if route.uri == uri {
                    r
                } else {
                    let own = to_raw(&route.uri).map_err(|e| bad(e.to_string()))?;
                    set_fields(Some(&r), [("uri".to_owned(), own)])
                        .map_err(|e| bad(e.to_string()))?
                };
                (route.server, new_ref)
            }
            other => return Err(bad(format!("unsupported ref type {other:?}"))),
        };
        let params = set_fields(Some(params), [("ref".to_owned(), new_ref)])
            .map_err(|e| bad(e.to_string()))?;
        let (client, timeout) = self
            .client_for_call(&server, opts.timeout, opts.origin.as_ref())
            .await?;
        let opts = CallOptions { timeout, ..opts };
        Ok(client.complete_with(params, opts).await?)
    }

    /// A session is gone: stop its own instances of `share: per-session`
    /// servers (in the background; shutdown waits for them).
    fn drop_session_instances(&self, session: u64) {
        let handles: Vec<SupervisorHandle> = self
            .write()
            .entries
            .iter_mut()
            .filter_map(|e| e.per_session.remove(&session))
            .collect();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // Dropping the handles still stops the supervisors.
            return;
        };
        for h in handles {
            self.inner
                .stopping
                .spawn_on(async move { h.stop().await }, &rt);
        }
    }

    /// The catalog is being read: servers whose lists' `ttlMs` ran out
    /// re-fetch them in the background (the stateless era's caching).
    pub fn revalidate(&self) {
        for c in self.ready_clients() {
            c.revalidate();
        }
    }

    /// The clients of every ready server, in config order.
    fn ready_clients(&self) -> Vec<Arc<ServerClient>> {
        self.read()
            .entries
            .iter()
            .filter_map(|e| e.handle.client().ok())
            .collect()
    }

    /// Every ready server instance that was offered roots: the shared
    /// ones, and each session's own (`share: per-session`).
    pub fn roots_clients(&self) -> Vec<RootsClient> {
        let st = self.read();
        let mut out = Vec::new();
        for e in &st.entries {
            let instances = e.per_session.iter().map(|(s, h)| (Some(*s), h));
            for (session, h) in std::iter::once((None, &e.handle)).chain(instances) {
                if let Ok(client) = h.client()
                    && client.offered_roots()
                {
                    out.push(RootsClient {
                        server: e.config.name.clone(),
                        session,
                        client,
                    });
                }
            }
        }
        out
    }

    pub async fn restart(&self, server: &str) -> Result<(), RegistryError> {
        self.handle(server)?.restart().await;
        Ok(())
    }

    /// Apply a new config: stop removed servers, start new ones, restart
    /// changed ones; unchanged servers keep running untouched. Returns at
    /// once: the old instances stop in the background (shutdown waits for
    /// them), and their late events are told apart by generation.
    pub fn apply(&self, cfg: &HostConfig) {
        let mut to_stop = Vec::new();
        {
            let mut st = self.write();
            // Checked under the lock shutdown takes to set it.
            if self.inner.closed.load(Ordering::SeqCst) {
                return;
            }
            let mut old: HashMap<String, Entry> = st
                .entries
                .drain(..)
                .map(|e| (e.config.name.clone(), e))
                .collect();
            let mut entries = Vec::new();
            for sc in &cfg.servers {
                match old.remove(&sc.name) {
                    Some(mut e) if e.config.same_process(sc) => {
                        // Roots are asked for, not started with: no restart.
                        e.config = sc.clone();
                        entries.push(e);
                    }
                    Some(e) => {
                        debug!(server = %sc.name, "config changed; restarting");
                        to_stop.extend(e.all_handles());
                        // Another program, maybe: how it asks is learnt anew.
                        self.inner.base.attribution.forget(&sc.name);
                        entries.push(self.new_entry(sc));
                    }
                    None => entries.push(self.new_entry(sc)),
                }
            }
            for name in old.keys() {
                self.inner.base.attribution.forget(name);
            }
            to_stop.extend(old.into_values().flat_map(Entry::all_handles));
            st.entries = entries;
            st.rules = rules_of(cfg);
            st.broken = broken_of(cfg);
        }
        self.publish_all();
        for h in to_stop {
            self.inner.stopping.spawn(async move { h.stop().await });
        }
    }

    /// Stop every server, including those a reload is still stopping;
    /// resolves when all processes are gone. Later config changes are
    /// ignored.
    pub async fn shutdown(&self) {
        let handles: Vec<_> = {
            let st = self.write();
            self.inner.closed.store(true, Ordering::SeqCst);
            st.entries
                .iter()
                .flat_map(|e| std::iter::once(&e.handle).chain(e.per_session.values()))
                .cloned()
                .collect()
        };
        futures_util::future::join_all(handles.iter().map(|h| h.stop())).await;
        self.inner.stopping.close();
        self.inner.stopping.wait().await;
    }

    /// Whether `server`'s current entry is the instance `generation`:
    /// `None` when no entry has that name (removed).
    fn is_current(&self, server: &str, generation: u64) -> Option<bool> {
        self.read()
            .entry(server)
            .map(|e| e.handle.generation() == generation)
    }

    fn send_state(&self, server: &str) {
        let status = self.read().entry(server).map(Entry::status);
        if let Some(s) = status {
            let _ = self.inner.events.send(RegistryEvent::ServerState(s));
        }
    }

    async fn pump(self, mut rx: broadcast::Receiver<SupervisorEvent>) {
        loop {
            // Each event may rebuild the catalog (synchronous work) and wake
            // the sessions that forward it. Yield between events, or under
            // churn those sessions wait in this worker's LIFO slot, which no
            // other worker steals, until the coop budget runs out (~1 s).
            tokio::task::yield_now().await;
            let ev = match rx.recv().await {
                Ok(ev) => ev,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    warn!(
                        missed = n,
                        "registry fell behind its supervisors; resyncing"
                    );
                    self.resync();
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            // A replaced or removed instance's last words are still its
            // server's output.
            if let SupervisorEvent::Stderr { server, line, .. } = ev {
                let _ = self
                    .inner
                    .events
                    .send(RegistryEvent::Stderr { server, line });
                continue;
            }
            let (server, generation) = ev.source();
            match self.is_current(server, generation) {
                Some(true) => {}
                // A removed server's last states still interest clients.
                None => {
                    if let SupervisorEvent::State(status) = ev {
                        let _ = self.inner.events.send(RegistryEvent::ServerState(status));
                    }
                    continue;
                }
                // An instance a reload replaced: its news is not the server's.
                Some(false) => {
                    debug!(
                        server,
                        generation, "dropping an event of a replaced instance"
                    );
                    continue;
                }
            }
            match ev {
                SupervisorEvent::State(status) => {
                    if status.state != ServerState::Ready {
                        self.unlisted(&status.name, status.generation);
                    } else if !self.is_listed(&status.name, status.generation) {
                        // Announced by `refresh` once the catalog has its lists.
                        continue;
                    }
                    // This transition, not the latest state: clients see each.
                    let _ = self.inner.events.send(RegistryEvent::ServerState(status));
                }
                SupervisorEvent::Connected { server, generation } => {
                    self.resubscribe(&server);
                    self.log_level_on_connect(&server);
                    self.spawn_refresh(server, generation);
                }
                SupervisorEvent::Changed {
                    server,
                    generation,
                    event,
                } => {
                    if let ServerEvent::ResourceUpdated { uri } = &event {
                        self.resource_updated(&server, uri);
                        continue;
                    }
                    let kinds = match event {
                        ServerEvent::ToolsChanged(_) => (true, false, false),
                        ServerEvent::ResourcesChanged { .. } => (false, true, false),
                        ServerEvent::PromptsChanged(_) => (false, false, true),
                        ServerEvent::Log(m) => {
                            let _ = self.inner.events.send(RegistryEvent::Log {
                                server,
                                params: m.params,
                                callers: m.callers,
                            });
                            continue;
                        }
                        ServerEvent::ElicitationComplete(params) => {
                            let _ = self
                                .inner
                                .events
                                .send(RegistryEvent::ElicitationComplete { server, params });
                            continue;
                        }
                        _ => continue,
                    };
                    let updated = self.set_lists(&server, generation, |l| match event {
                        ServerEvent::ToolsChanged(t) => l.tools = (*t).clone(),
                        ServerEvent::ResourcesChanged {
                            resources,
                            templates,
                        } => {
                            l.resources = (*resources).clone();
                            l.templates = (*templates).clone();
                        }
                        ServerEvent::PromptsChanged(p) => l.prompts = (*p).clone(),
                        _ => {}
                    });
                    if updated {
                        self.publish_server_lists(&server, kinds.0, kinds.1, kinds.2);
                        self.lists_listed(&server, generation);
                    }
                }
                SupervisorEvent::Stderr { .. } => {}
            }
        }
    }

    /// The server left `ready`: its lists need fetching again when it is
    /// back, and a server that is gone (failed, stopped, disabled) lists
    /// nothing. Its tools stay listed while it restarts.
    fn unlisted(&self, server: &str, generation: u64) {
        let gone = {
            let mut st = self.write();
            let Some(e) = st.instance_mut(server, generation) else {
                return;
            };
            e.listed = false;
            e.list_error = None;
            let gone = matches!(
                e.handle.status().state,
                ServerState::Failed | ServerState::Stopped | ServerState::Disabled
            );
            if gone {
                e.lists = Lists::default();
                e.known = false;
            }
            gone
        };
        if gone {
            self.publish_server_lists(server, true, true, true);
        }
    }

    /// After a lag, events were lost: take every server's state from its
    /// supervisor again, re-list the ready ones and tell clients each state.
    fn resync(&self) {
        let entries: Vec<(String, u64, ServerState)> = self
            .read()
            .entries
            .iter()
            .map(|e| {
                let h = &e.handle;
                (e.config.name.clone(), h.generation(), h.status().state)
            })
            .collect();
        for (server, generation, state) in entries {
            if state == ServerState::Ready {
                self.spawn_refresh(server.clone(), generation);
            } else {
                self.unlisted(&server, generation);
            }
            self.send_state(&server);
        }
    }

    fn spawn_refresh(&self, server: String, generation: u64) {
        let reg = self.clone();
        tokio::spawn(async move { reg.refresh(&server, generation).await });
    }

    /// List a ready server's catalog; while that fails, retry with the
    /// restart backoff, showing the error in its status. Ends when a newer
    /// listing starts or the instance is no longer ready.
    async fn refresh(&self, server: &str, generation: u64) {
        let ticket = {
            let mut st = self.write();
            let Some(e) = st.instance_mut(server, generation) else {
                return;
            };
            e.listing = e.listing.wrapping_add(1);
            e.listing
        };
        let mut backoff = self.inner.policy.initial_backoff;
        loop {
            let Ok(client) = self.client(server) else {
                return;
            };
            let fetched = fetch_lists(&client).await;
            // A held client reads as a call in flight to the idle policy.
            drop(client);
            let error = (!fetched.errors.is_empty()).then(|| fetched.errors.join("; "));
            if let Some(e) = &error {
                warn!(server, "listing failed: {e}");
            }
            let (stored, error_changed) = {
                let mut st = self.write();
                match st
                    .instance_mut(server, generation)
                    .filter(|e| e.listing == ticket)
                {
                    Some(e) => {
                        let l = &mut e.lists;
                        let Fetched {
                            tools,
                            resources,
                            templates,
                            prompts,
                            ..
                        } = fetched;
                        if let Some(t) = tools {
                            l.tools = t;
                        }
                        if let Some(r) = resources {
                            l.resources = r;
                        }
                        if let Some(t) = templates {
                            l.templates = t;
                        }
                        if let Some(p) = prompts {
                            l.prompts = p;
                        }
                        e.drop_filtered_tools();
                        let changed = e.list_error != error;
                        e.list_error = error.clone();
                        (true, changed)
                    }
                    None => (false, false),
                }
            };
            if !stored {
                return;
            }
            // Catalog first: `settled` waiters read it as soon as it is marked.
            self.publish_server_lists(server, true, true, true);
            // Listed even when a list failed: the error is in the status,
            // and waiting for a retry would hold `--direct` up.
            let newly = self.mark_listed(server, generation);
            // The first listing of a ready server is when it becomes `ready`.
            if newly || error_changed {
                self.send_state(server);
            }
            if error.is_none() {
                self.lists_listed(server, generation);
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2).min(self.inner.policy.max_backoff);
            if self.is_current(server, generation) != Some(true) {
                return;
            }
            info!(server, "listing again");
        }
    }

    /// Whether this marked the instance listed (it was not before).
    fn mark_listed(&self, server: &str, generation: u64) -> bool {
        let newly = match self.write().instance_mut(server, generation) {
            Some(e) => !std::mem::replace(&mut e.listed, true),
            None => false,
        };
        self.inner.settled.send_replace(());
        newly
    }

    fn is_listed(&self, server: &str, generation: u64) -> bool {
        self.write()
            .instance_mut(server, generation)
            .is_some_and(|e| e.listed)
    }

    /// Wait until every server is listed, failed or disabled (or `limit`
    /// passes): the CLI's direct mode answers only once it has a catalog.
    pub async fn settled(&self, limit: std::time::Duration) {
        let mut rx = self.inner.settled.subscribe();
        // `sleep` saturates a huge `limit`; `Instant + limit` would panic.
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        loop {
            let done = self.read().entries.iter().all(|e| {
                let status = e.handle.status();
                e.listed
                    || matches!(
                        status.state,
                        ServerState::Failed
                            | ServerState::AuthRequired
                            | ServerState::AuthFailed
                            | ServerState::Disabled
                            | ServerState::Stopped
                            | ServerState::Idle
                    )
                    || (status.retries_without_limit
                        && status.state == ServerState::Restarting
                        && status.error.is_some())
            });
            if done {
                return;
            }
            // Wake on a listing or a state change, or poll now and then.
            let tick = tokio::time::sleep(std::time::Duration::from_millis(50));
            tokio::select! {
                _ = rx.changed() => {}
                _ = tick => {}
                _ = &mut deadline => return,
            }
        }
    }

    /// Returns false when the server is no longer configured, or
    /// configured as another instance.
    fn set_lists(&self, server: &str, generation: u64, f: impl FnOnce(&mut Lists)) -> bool {
        match self.write().instance_mut(server, generation) {
            Some(e) => {
                f(&mut e.lists);
                e.drop_filtered_tools();
                true
            }
            None => false,
        }
    }

    /// Publish one server's current lists (the flagged kinds; the others
    /// cannot have changed): only its part of the catalog is re-named, the
    /// rest is composed from the parts kept. The new listing is built
    /// without the state's write lock and swapped in; calls keep reading
    /// the old one meanwhile. `list_changed` goes out only when the listed
    /// bytes changed.
    pub(crate) fn publish_server_lists(
        &self,
        server: &str,
        tools: bool,
        resources: bool,
        prompts: bool,
    ) {
        let mut b = self
            .inner
            .builders
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let known = {
            let st = self.read();
            match st.entry(server) {
                Some(e) => {
                    let prefix = e.config.prefix();
                    let t = !tools
                        || b.tools
                            .update(server, prefix, catalog::tool_items(&e.lists.tools));
                    let p = !prompts
                        || b.prompts.update(
                            server,
                            prefix,
                            catalog::prompt_items(&e.lists.prompts),
                        );
                    t && p
                }
                None => false,
            }
        };
        if !known {
            // A reload is under way; its own full publish follows.
            drop(b);
            self.publish_all();
            return;
        }
        self.publish_from(&mut b, tools, resources, prompts);
    }

    /// Rebuild every server's part (a reload) and publish.
    fn publish_all(&self) {
        let mut b = self
            .inner
            .builders
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *b = Builders::full(&self.read());
        self.publish_from(&mut b, true, true, true);
    }

    fn publish_from(&self, b: &mut Builders, tools: bool, resources: bool, prompts: bool) {
        // Names alone miss a changed schema or description: compare bytes
        // (entries shared with the old listing compare by pointer).
        fn differ<E: catalog::Entry>(a: &[Arc<E>], b: &[Arc<E>]) -> bool {
            a.len() != b.len()
                || a.iter()
                    .zip(b)
                    .any(|(x, y)| !Arc::ptr_eq(x, y) && x.raw().get() != y.raw().get())
        }
        let p = &self.inner.published;
        if tools {
            let new = Arc::new(b.tools.publish());
            let old = p.catalog.swap(new.clone());
            if differ(new.items(), old.items()) {
                let _ = self.inner.events.send(RegistryEvent::ToolsChanged);
            }
        }
        if prompts {
            let new = Arc::new(b.prompts.publish());
            let old = p.prompts.swap(new.clone());
            if differ(new.items(), old.items()) {
                let _ = self.inner.events.send(RegistryEvent::PromptsChanged);
            }
        }
        if resources {
            // Resources are still merged whole: a template of any server
            // can claim another's URI. Under the read lock only.
            let new = {
                let st = self.read();
                let inputs: Vec<ServerResources<'_>> = st
                    .entries
                    .iter()
                    .map(|e| ServerResources {
                        server: &e.config.name,
                        resources: &e.lists.resources,
                        templates: &e.lists.templates,
                    })
                    .collect();
                Arc::new(catalog::build_resources(&inputs))
            };
            let old = p.resources.swap(new.clone());
            fn raw_differ<'a>(
                a: impl Iterator<Item = &'a RawValue>,
                b: impl Iterator<Item = &'a RawValue>,
            ) -> bool {
                a.map(RawValue::get).ne(b.map(RawValue::get))
            }
            // One notification covers both resources and templates.
            let changed = raw_differ(
                new.resources().iter().map(|r| &*r.raw),
                old.resources().iter().map(|r| &*r.raw),
            ) || raw_differ(
                new.templates().iter().map(|t| &*t.raw),
                old.templates().iter().map(|t| &*t.raw),
            );
            if changed {
                let _ = self.inner.events.send(RegistryEvent::ResourcesChanged);
            }
        }
    }
}

/// Every list a ready server offers; a failed list is `None`, with its error.
async fn fetch_lists(client: &ServerClient) -> Fetched {
    fn keep<T>(r: Result<Vec<T>, ClientError>, errors: &mut Vec<String>) -> Option<Vec<T>> {
        r.map_err(|e| errors.push(e.to_string())).ok()
    }
    /// A list the server does not offer is empty, not failed.
    async fn offered<T>(
        offered: bool,
        list: impl Future<Output = Result<Vec<T>, ClientError>>,
    ) -> Result<Vec<T>, ClientError> {
        match offered {
            true => list.await,
            false => Ok(Vec::new()),
        }
    }
    let caps = &client.negotiated().capabilities;
    // All four at once: one round trip to the server instead of four, which
    // is most of a server's start after its handshake.
    let (tools, resources, templates, prompts) = tokio::join!(
        offered(caps.tools.is_some(), client.list_tools()),
        offered(caps.resources.is_some(), client.list_resources()),
        offered(caps.resources.is_some(), client.list_resource_templates()),
        offered(caps.prompts.is_some(), client.list_prompts()),
    );
    let mut errors = Vec::new();
    Fetched {
        tools: keep(tools, &mut errors),
        resources: keep(resources, &mut errors),
        templates: keep(templates, &mut errors),
        prompts: keep(prompts, &mut errors),
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rebuild holds only the builders' lock; listings and call routing
    /// read the published pointer, so they go on while it is held.
    #[tokio::test]
    #[expect(
        clippy::await_holding_lock,
        reason = "the test holds the rebuild lock across the call on purpose"
    )]
    async fn reads_and_routing_do_not_wait_on_a_rebuild() {
        let reg = Registry::start(
            &HostConfig::default(),
            ClientOptions::default(),
            RestartPolicy::default(),
            None,
        );
        let rebuilding = reg.inner.builders.lock().unwrap();
        let r = reg.clone();
        let read = std::thread::spawn(move || {
            let catalog = r.catalog();
            (
                catalog.route("nosuch__tool").is_none(),
                r.prompts().len(),
                r.resources().resources().len(),
            )
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !read.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "a read waited on the rebuild"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(read.join().unwrap(), (true, 0, 0));
        // A call routes (and fails: no such tool) while the rebuild goes on.
        let call = reg.call_tool("nosuch__tool", None, CallOptions::default());
        let r = tokio::time::timeout(Duration::from_secs(5), call).await;
        assert!(matches!(r, Ok(Err(RegistryError::UnknownTool(_)))));
        drop(rebuilding);
    }
}
