//! The registry: one supervised client per configured server, and the
//! namespaced catalog over all of them.
//!
//! Every server starts concurrently and independently; a slow or broken one
//! only affects its own entry. Lists are fetched when a server becomes ready
//! (retried with backoff when that fails) and again when it says a list
//! changed; each change rebuilds the changed servers' parts of the catalog
//! (listings that arrive together are published together), and a list
//! whose bytes changed is announced as a [`RegistryEvent`].
//!
//! Supervisor events carry their instance's generation: events from an
//! instance a reload replaced are dropped. A lagged event channel resyncs
//! every server from its supervisor. Reloads never wait for old servers to
//! stop; [`Registry::shutdown`] does.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod catalog;
pub mod cost;
mod eras;
pub mod from_config;
mod hidden;
pub mod hygiene;
mod lazy;
mod listing;
mod logs;
mod options;
pub mod pins;
mod resources;
mod routing;
mod sessions;
pub mod sign_in;
pub mod stored;
pub mod supervisor;
pub mod uri;

pub use eras::EraCache;
pub use hidden::{HiddenText, ServerHidden};
pub use options::ServerOptions;

use parking_lot::{RwLock, RwLockReadGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use arc_swap::ArcSwap;
use catalog::{
    Catalog, CatalogBuilder, CatalogPrompt, CatalogTool, NamingRules, PromptCatalog,
    ResourceBuilder, ResourceCatalog,
};
pub use logs::LogLevel;
use mcphost_client::{CallOptions, ClientError, ServerClient, ServerEvent};
use mcphost_config::{HostConfig, ServerConfig, Share, TransportConfig};
use mcphost_jsonrpc::Origin;
use mcphost_protocol::{Prompt, Resource, ResourceTemplate, Tool, ToolResult};
use supervisor::{
    Launch, RestartPolicy, ServerState, ServerStatus, SessionInstance, SupervisorEvent,
    SupervisorHandle,
};

/// A host limited to what the config offers one server.
struct OfferedHost {
    host: Arc<dyn mcphost_client::Host>,
    offer: mcphost_config::Offer,
}

impl OfferedHost {
    fn offered(
        &self,
        mut caps: mcphost_protocol::ClientCapabilities,
    ) -> mcphost_protocol::ClientCapabilities {
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

impl mcphost_client::Host for OfferedHost {
    fn capabilities(&self) -> mcphost_protocol::ClientCapabilities {
        self.offered(self.host.capabilities())
    }

    fn capabilities_for(&self, origin: Option<&Origin>) -> mcphost_protocol::ClientCapabilities {
        self.offered(self.host.capabilities_for(origin))
    }

    fn handle(
        &self,
        r: mcphost_client::HostRequest,
    ) -> mcphost_transport::BoxFuture<'static, Result<Box<RawValue>, mcphost_protocol::ErrorObject>>
    {
        // Requests past the capabilities were refused before this point.
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
    /// A server's definitions differ from its pins: a `notifications/message`
    /// (level warning, logger `mcphost`) for every host.
    PinDrift {
        server: String,
        params: Box<RawValue>,
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
    /// `pinning: block` holds this tool or prompt back until approved.
    #[error(
        "{kind} {name:?} of server {server:?} differs from its pinned definition and is withheld (pinning: block); review it with `mcphost pins diff {server} {name}`, then allow it with `mcphost pins approve {server} {name}`"
    )]
    Withheld {
        kind: &'static str,
        server: String,
        name: String,
    },
    /// A `mcphost/pins/*` request that cannot be done.
    #[error("{0}")]
    Pins(String),
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

/// One configured server as the registry keeps it: its config, its
/// supervisor (and per-session ones), and its last lists.
struct ManagedServer {
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
    /// `lists` as the catalog shows them, and the hidden text in them.
    shown: hidden::Shown,
    /// Its drift from the pins, and what `block` withholds.
    pins: pins::EntryPins,
}

impl ManagedServer {
    fn new(config: ServerConfig, handle: SupervisorHandle) -> ManagedServer {
        ManagedServer {
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
            shown: hidden::Shown::default(),
            pins: pins::EntryPins::default(),
        }
    }

    /// This entry's processes: the shared one and every session's.
    fn all_handles(self) -> impl Iterator<Item = SupervisorHandle> {
        std::iter::once(self.handle).chain(self.per_session.into_values())
    }

    /// After `lists` changed: the entry's allow/deny filter (a changed
    /// filter means a changed entry and fresh lists), then its hygiene.
    fn lists_changed(&mut self) {
        let filter = &self.config.tools;
        self.lists.tools.retain(|t| filter.allows(&t.name));
        self.apply_hygiene();
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
        let cached = self.config.start == mcphost_config::StartMode::Lazy
            && self.known
            && !self.listed
            && !matches!(status.state, ServerState::Disabled | ServerState::Stopped);
        let pins = self.pin_status();
        if list_error.is_none()
            && self.per_session.is_empty()
            && !unlisted
            && !cached
            && pins.is_none()
        {
            return status;
        }
        let mut s = (*status).clone();
        s.pins = pins;
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
    entries: Vec<ManagedServer>,
    rules: NamingRules,
    /// Entries of the config with errors: shown, never started.
    broken: Vec<Arc<ServerStatus>>,
}

/// Every server's namespaced part, kept between listings so that one
/// server's change re-names only that server's items.
struct Builders {
    tools: CatalogBuilder<CatalogTool>,
    prompts: CatalogBuilder<CatalogPrompt>,
    resources: ResourceBuilder,
}

impl Builders {
    /// Take up one server's current lists (the flagged kinds) into its
    /// parts. False when a builder does not know the server (a reload).
    fn update(&mut self, server: &str, e: &ManagedServer, k: listing::Kinds) -> bool {
        let prefix = e.config.prefix();
        let l = e.shown_lists();
        let t = !k.tools || self.tools.update(server, prefix, e.shown_tools());
        let p = !k.prompts || self.prompts.update(server, prefix, e.shown_prompts());
        let r = !k.resources || self.resources.update(server, &l.resources, &l.templates);
        t && p && r
    }

    /// Every server's part from scratch (a reload: order, prefixes or rules
    /// may have changed).
    fn full(st: &State) -> Builders {
        let mut tools = CatalogBuilder::new("tools", st.rules.clone());
        let mut prompts = CatalogBuilder::new("prompts", st.rules.clone());
        let mut resources = ResourceBuilder::default();
        for e in &st.entries {
            let (server, prefix) = (&e.config.name, e.config.prefix());
            tools.push_server(server, prefix, e.shown_tools());
            prompts.push_server(server, prefix, e.shown_prompts());
            let l = e.shown_lists();
            resources.push_server(server, &l.resources, &l.templates);
        }
        Builders {
            tools,
            prompts,
            resources,
        }
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
    fn entry(&self, server: &str) -> Option<&ManagedServer> {
        self.entries.iter().find(|e| e.config.name == server)
    }

    /// `server`'s entry if it is still the instance `generation`.
    fn instance_mut(&mut self, server: &str, generation: u64) -> Option<&mut ManagedServer> {
        self.entries
            .iter_mut()
            .find(|e| e.config.name == server && e.handle.generation() == generation)
    }
}

struct Inner {
    state: RwLock<State>,
    /// Held while a listing is composed, never by a call. Lock order:
    /// `builders`, then `state`.
    builders: parking_lot::Mutex<Builders>,
    /// Listings waiting for the next publish (a leaf lock).
    pending: parking_lot::Mutex<listing::Pending>,
    /// The last [`listing::Pending`] ticket a published listing includes.
    published_upto: tokio::sync::watch::Sender<u64>,
    published: Published,
    base: ServerOptions,
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
        base: impl Into<ServerOptions>,
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
        base: impl Into<ServerOptions>,
        policy: RestartPolicy,
        shell_path: Option<String>,
        capacity: usize,
    ) -> Registry {
        let base = base.into();
        let (supervisor_events, sup_rx) = broadcast::channel(capacity.max(1));
        let (events, _) = broadcast::channel(1024);
        let rules = rules_of(cfg);
        let inner = Arc::new(Inner {
            builders: parking_lot::Mutex::new(Builders {
                tools: CatalogBuilder::new("tools", rules.clone()),
                prompts: CatalogBuilder::new("prompts", rules.clone()),
                resources: ResourceBuilder::default(),
            }),
            pending: parking_lot::Mutex::new(listing::Pending::default()),
            published_upto: tokio::sync::watch::channel(0).0,
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
        tokio::spawn(reg.clone().follow_supervisors(sup_rx));
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
        self.inner.state.read()
    }

    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, State> {
        self.inner.state.write()
    }

    fn launch_with_start(
        &self,
        sc: &ServerConfig,
        start: supervisor::StartPolicy,
    ) -> SupervisorHandle {
        self.launch_with(
            sc,
            self.inner.base.client.host.clone(),
            &self.inner.supervisor_events,
            start,
        )
    }

    fn launch_with(
        &self,
        sc: &ServerConfig,
        host: Arc<dyn mcphost_client::Host>,
        events: &broadcast::Sender<SupervisorEvent>,
        start: supervisor::StartPolicy,
    ) -> SupervisorHandle {
        let mut server = self.inner.base.clone();
        let opts = &mut server.client;
        opts.protocol_version = sc.protocol_version.or(opts.protocol_version);
        opts.host = if sc.offer == mcphost_config::Offer::default() {
            host
        } else {
            Arc::new(OfferedHost {
                host,
                offer: sc.offer,
            })
        };
        from_config::apply_timeouts(&sc.timeouts, opts);
        let launch = match &sc.transport {
            TransportConfig::Stdio(s) => Launch::Stdio(match &self.inner.shell_path {
                Some(path) => from_config::stdio_config_with_path(s, &sc.timeouts, path),
                None => from_config::stdio_config(s, &sc.timeouts),
            }),
            TransportConfig::Http(h) => {
                let mut cfg = from_config::http_config(h, &sc.timeouts);
                if let (Some(auth), Some(oauth)) = (&server.auth, h.oauth_client()) {
                    match auth.authorizer(&sc.name, &h.url, oauth) {
                        Ok(a) => cfg.credentials = Some(a),
                        Err(e) => {
                            tracing::warn!(server = %sc.name, "OAuth is off for this server: {e}")
                        }
                    }
                }
                Launch::Http(cfg)
            }
        };
        supervisor::spawn_with(
            &sc.name,
            launch,
            server,
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
            .map(ManagedServer::status)
            .chain(st.broken.iter().cloned())
            .collect()
    }

    pub fn server_names(&self) -> Vec<String> {
        self.read()
            .entries
            .iter()
            .map(|e| e.config.name.clone())
            .collect()
    }

    /// The catalog is being read: servers whose lists' `ttlMs` ran out
    /// re-fetch them in the background (the stateless era's caching).
    pub fn revalidate(&self) {
        for c in self.ready_clients() {
            c.revalidate();
        }
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
            let mut old: HashMap<String, ManagedServer> = st
                .entries
                .drain(..)
                .map(|e| (e.config.name.clone(), e))
                .collect();
            let mut entries = Vec::new();
            for sc in &cfg.servers {
                match old.remove(&sc.name) {
                    Some(mut e) if e.config.same_process(sc) => {
                        // Roots are asked for, not started with: no restart.
                        let pinning = e.config.pinning != sc.pinning;
                        let hygiene = e.config.hygiene != sc.hygiene;
                        e.config = sc.clone();
                        if hygiene {
                            e.apply_hygiene();
                        }
                        if pinning && e.has_lists() {
                            // Published below, withheld or not by the new mode.
                            e.check_pins(&self.inner.base.pins);
                        }
                        entries.push(e);
                    }
                    Some(e) => {
                        debug!(server = %sc.name, "config changed; restarting");
                        to_stop.extend(e.all_handles());
                        // Another program, maybe: how it asks is learnt anew.
                        self.inner.base.client.attribution.forget(&sc.name);
                        entries.push(self.new_entry(sc));
                    }
                    None => entries.push(self.new_entry(sc)),
                }
            }
            for name in old.keys() {
                self.inner.base.client.attribution.forget(name);
            }
            to_stop.extend(old.into_values().flat_map(ManagedServer::all_handles));
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
            ServerOptions::default(),
            RestartPolicy::default(),
            None,
        );
        let rebuilding = reg.inner.builders.lock();
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

    fn registry_of(n: usize) -> Registry {
        let servers: Vec<String> = (0..n)
            .map(|i| format!(r#""s{i}":{{"command":"x","disabled":true}}"#))
            .collect();
        let text = format!(
            r#"{{"mcpServers":{{{}}},"loginShellPath":false}}"#,
            servers.join(",")
        );
        let cfg = mcphost_config::parse(
            &text,
            std::path::Path::new("/nonexistent/config.json"),
            &|_| None,
        )
        .unwrap();
        Registry::start(
            &cfg,
            ServerOptions::default(),
            RestartPolicy::default(),
            None,
        )
    }

    /// Give server `s{i}` a tool and a resource every server shares, the
    /// way a listing does, and wait until they are published.
    async fn list(reg: &Registry, i: usize) {
        let server = format!("s{i}");
        let generation = reg.read().entry(&server).unwrap().handle.generation();
        let tool: Tool =
            serde_json::from_str(r#"{"name":"t","inputSchema":{"type":"object"}}"#).unwrap();
        let res: Resource = serde_json::from_str(r#"{"uri":"x://shared","name":"r"}"#).unwrap();
        assert!(reg.set_lists(&server, generation, |l| {
            l.tools = vec![tool];
            l.resources = vec![res];
        }));
        reg.publish_soon(&server).await;
        // Published by the time it returns: `settled` relies on it.
        assert!(reg.catalog().route(&format!("s{i}__t")).is_some());
        assert!(
            reg.resources()
                .resolve(&format!("mcphost://s{i}/x://shared"), |_| None)
                .is_ok_and(|r| r.server == server)
        );
    }

    /// (tools, resources) list_changed events waiting in `rx`.
    fn changes(rx: &mut broadcast::Receiver<RegistryEvent>) -> (usize, usize) {
        let (mut tools, mut resources) = (0, 0);
        while let Ok(ev) = rx.try_recv() {
            match ev {
                RegistryEvent::ToolsChanged => tools += 1,
                RegistryEvent::ResourcesChanged => resources += 1,
                _ => {}
            }
        }
        (tools, resources)
    }

    /// Servers listed in one burst share a publish: the catalog ends with
    /// every server's lists, and clients hear of it at least once but far
    /// fewer times than there were listings.
    #[tokio::test]
    async fn a_burst_of_listings_is_published_together() {
        const N: usize = 40;
        let reg = registry_of(N);
        let mut rx = reg.subscribe();
        let tasks: Vec<_> = (0..N)
            .map(|i| {
                let reg = reg.clone();
                tokio::spawn(async move { list(&reg, i).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(reg.catalog().len(), N);
        let resources = reg.resources();
        assert_eq!(resources.resources().len(), N);
        // Every copy of the shared URI is wrapped, naming all the others.
        assert!(resources.renamed().iter().all(|r| r.with.len() == N - 1));
        let (tools, res) = changes(&mut rx);
        assert!((1..=N / 4).contains(&tools), "{tools} tools/list_changed");
        assert!((1..=N / 4).contains(&res), "{res} resources/list_changed");
    }

    /// A lone listing is published at once: no timer holds it back for a
    /// burst that does not come.
    #[tokio::test(start_paused = true)]
    async fn a_lone_listing_waits_for_no_timer() {
        let reg = registry_of(3);
        let mut rx = reg.subscribe();
        let before = tokio::time::Instant::now();
        list(&reg, 1).await;
        assert_eq!(tokio::time::Instant::now(), before);
        assert_eq!(changes(&mut rx), (1, 1));
        list(&reg, 2).await;
        assert_eq!(changes(&mut rx), (1, 1));
        assert_eq!(reg.catalog().len(), 2);
    }
}
