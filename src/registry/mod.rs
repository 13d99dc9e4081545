//! The registry: one supervised client per configured server, and the
//! namespaced catalog over all of them.
//!
//! Every server starts concurrently and independently; a slow or broken one
//! only affects its own entry. Lists are fetched when a server becomes ready
//! and again when it says a list changed; each change rebuilds the catalog
//! and is announced as a [`RegistryEvent`].

pub mod catalog;
pub mod supervisor;

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use serde_json::value::RawValue;
use tokio::sync::broadcast;
use tracing::{debug, warn};

use crate::client::{CallOptions, ClientError, ClientOptions, ServerClient, ServerEvent};
use crate::config::{HostConfig, ServerConfig, TransportConfig};
use crate::protocol::{Prompt, Resource, ResourceTemplate, Tool, ToolResult};
use catalog::{
    Catalog, NamingRules, PromptCatalog, ResourceCatalog, ServerPrompts, ServerResources,
    ServerTools,
};
use supervisor::{
    Launch, RestartPolicy, ServerState, ServerStatus, SupervisorEvent, SupervisorHandle,
};

/// What changed, for socket clients and the CLI.
#[derive(Debug, Clone)]
pub enum RegistryEvent {
    ToolsChanged,
    ResourcesChanged,
    PromptsChanged,
    ServerState(Arc<ServerStatus>),
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
    #[error("unknown prompt {0:?}")]
    UnknownPrompt(String),
    #[error("no server offers resource {0:?}")]
    UnknownResource(String),
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

struct Entry {
    config: ServerConfig,
    handle: SupervisorHandle,
    lists: Lists,
    /// Lists fetched at least once since the server last became ready.
    listed: bool,
}

struct State {
    /// Config order; it decides the catalog's listing order.
    entries: Vec<Entry>,
    rules: NamingRules,
    catalog: Arc<Catalog>,
    prompts: Arc<PromptCatalog>,
    resources: Arc<ResourceCatalog>,
}

struct Inner {
    state: RwLock<State>,
    base: ClientOptions,
    /// PATH from the user's login shell, for servers without their own.
    shell_path: Option<String>,
    policy: RestartPolicy,
    supervisor_events: broadcast::Sender<SupervisorEvent>,
    events: broadcast::Sender<RegistryEvent>,
    settled: tokio::sync::watch::Sender<()>,
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
            state: RwLock::new(State {
                entries: Vec::new(),
                catalog: Arc::new(catalog::build(&[], &rules)),
                prompts: Arc::new(catalog::build_prompts(&[], &rules)),
                resources: Arc::new(catalog::build_resources(&[])),
                rules,
            }),
            base,
            shell_path,
            policy,
            supervisor_events,
            events,
            settled: tokio::sync::watch::channel(()).0,
        });
        let reg = Registry { inner };
        tokio::spawn(reg.clone().pump(sup_rx));
        {
            let mut st = reg.write();
            for sc in &cfg.servers {
                let handle = reg.launch(sc);
                st.entries.push(Entry {
                    config: sc.clone(),
                    handle,
                    lists: Lists::default(),
                    listed: false,
                });
            }
        }
        reg
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.inner.state.write().unwrap_or_else(|p| p.into_inner())
    }

    fn launch(&self, sc: &ServerConfig) -> SupervisorHandle {
        let mut opts = self.inner.base.clone();
        opts.init_timeout = sc.timeouts.init;
        opts.request_timeout = sc.timeouts.request;
        opts.max_request_timeout = sc.timeouts.max_request;
        let launch = match &sc.transport {
            TransportConfig::Stdio(s) => Launch::Stdio(match &self.inner.shell_path {
                Some(path) => s.to_stdio_config_with_path(&sc.timeouts, path),
                None => s.to_stdio_config(&sc.timeouts),
            }),
            TransportConfig::Http(h) => Launch::Http(h.to_http_config(&sc.timeouts)),
        };
        supervisor::spawn(
            &sc.name,
            launch,
            opts,
            self.inner.policy.clone(),
            sc.disabled,
            self.inner.supervisor_events.clone(),
        )
    }

    pub fn subscribe(&self) -> broadcast::Receiver<RegistryEvent> {
        self.inner.events.subscribe()
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.read().catalog.clone()
    }

    /// The naming rules in force (the config's `namespacing`).
    pub fn naming(&self) -> NamingRules {
        self.read().rules.clone()
    }

    pub fn prompts(&self) -> Arc<PromptCatalog> {
        self.read().prompts.clone()
    }

    pub fn resources(&self) -> Arc<ResourceCatalog> {
        self.read().resources.clone()
    }

    pub fn statuses(&self) -> Vec<Arc<ServerStatus>> {
        self.read()
            .entries
            .iter()
            .map(|e| e.handle.status())
            .collect()
    }

    pub fn server_names(&self) -> Vec<String> {
        self.read()
            .entries
            .iter()
            .map(|e| e.config.name.clone())
            .collect()
    }

    fn handle(&self, server: &str) -> Result<SupervisorHandle, RegistryError> {
        self.read()
            .entries
            .iter()
            .find(|e| e.config.name == server)
            .map(|e| e.handle.clone())
            .ok_or_else(|| RegistryError::UnknownServer(server.to_owned()))
    }

    /// The ready client of `server`, or why it is not there.
    pub fn client(&self, server: &str) -> Result<Arc<ServerClient>, RegistryError> {
        self.handle(server)?
            .client()
            .map_err(|st| RegistryError::Unavailable(st.unavailable_reason()))
    }

    /// Call a tool by its catalog name.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<ToolResult, RegistryError> {
        let route = self
            .catalog()
            .route(name)
            .cloned()
            .ok_or_else(|| RegistryError::UnknownTool(name.to_owned()))?;
        let client = self.client(&route.server)?;
        Ok(client.call_tool(&route.tool, arguments, opts).await?)
    }

    /// Get a prompt by its catalog name.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<Box<RawValue>>,
    ) -> Result<Box<RawValue>, RegistryError> {
        let route = self
            .prompts()
            .route(name)
            .cloned()
            .ok_or_else(|| RegistryError::UnknownPrompt(name.to_owned()))?;
        let client = self.client(&route.server)?;
        Ok(client
            .get_prompt(&route.tool, arguments, CallOptions::default())
            .await?)
    }

    /// Read a resource from the server that listed its URI (or, failing
    /// that, the only server offering resources).
    pub async fn read_resource(&self, uri: &str) -> Result<Box<RawValue>, RegistryError> {
        let server = self.resources().route(uri).map(str::to_owned);
        let server = match server {
            Some(s) => s,
            None => {
                // Template-generated URIs are not listed; route them only
                // when exactly one server can have them.
                let st = self.read();
                let offering: Vec<&Entry> = st
                    .entries
                    .iter()
                    .filter(|e| !e.lists.templates.is_empty())
                    .collect();
                match offering.as_slice() {
                    [one] => one.config.name.clone(),
                    _ => return Err(RegistryError::UnknownResource(uri.to_owned())),
                }
            }
        };
        let client = self.client(&server)?;
        Ok(client.read_resource(uri, CallOptions::default()).await?)
    }

    /// `completion/complete`, routed by its `ref`: a prompt's catalog name
    /// is turned back into the server's own; a resource URI goes where
    /// `resources/read` would send it.
    pub async fn complete(&self, params: &RawValue) -> Result<Box<RawValue>, RegistryError> {
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
                let resources = self.resources();
                let server = resources
                    .route(&uri)
                    .or_else(|| resources.route_template(&uri))
                    .map(str::to_owned)
                    .ok_or(RegistryError::UnknownResource(uri))?;
                (server, r)
            }
            other => return Err(bad(format!("unsupported ref type {other:?}"))),
        };
        let params = set_fields(Some(params), [("ref".to_owned(), new_ref)])
            .map_err(|e| bad(e.to_string()))?;
        let client = self.client(&server)?;
        Ok(client.complete(params).await?)
    }

    pub async fn restart(&self, server: &str) -> Result<(), RegistryError> {
        self.handle(server)?.restart().await;
        Ok(())
    }

    /// Apply a new config: stop removed servers, start new ones, restart
    /// changed ones; unchanged servers keep running untouched.
    pub async fn apply(&self, cfg: &HostConfig) {
        let mut to_stop = Vec::new();
        {
            let mut st = self.write();
            let mut old: HashMap<String, Entry> = st
                .entries
                .drain(..)
                .map(|e| (e.config.name.clone(), e))
                .collect();
            let mut entries = Vec::new();
            for sc in &cfg.servers {
                match old.remove(&sc.name) {
                    Some(e) if e.config == *sc => entries.push(e),
                    Some(e) => {
                        debug!(server = %sc.name, "config changed; restarting");
                        to_stop.push(e.handle);
                        entries.push(Entry {
                            config: sc.clone(),
                            handle: self.launch(sc),
                            lists: Lists::default(),
                            listed: false,
                        });
                    }
                    None => entries.push(Entry {
                        config: sc.clone(),
                        handle: self.launch(sc),
                        lists: Lists::default(),
                        listed: false,
                    }),
                }
            }
            to_stop.extend(old.into_values().map(|e| e.handle));
            st.entries = entries;
            st.rules = rules_of(cfg);
        }
        self.rebuild(true, true, true);
        for h in to_stop {
            h.stop().await;
        }
    }

    /// Stop every server; resolves when all processes are gone.
    pub async fn shutdown(&self) {
        let handles: Vec<_> = self
            .read()
            .entries
            .iter()
            .map(|e| e.handle.clone())
            .collect();
        futures_util::future::join_all(handles.iter().map(|h| h.stop())).await;
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
                    warn!(missed = n, "registry fell behind its supervisors");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            match ev {
                SupervisorEvent::State(status) => {
                    let gone = matches!(
                        status.state,
                        ServerState::Failed | ServerState::Stopped | ServerState::Disabled
                    );
                    if status.state != ServerState::Ready
                        && let Some(e) = self
                            .write()
                            .entries
                            .iter_mut()
                            .find(|e| e.config.name == status.name)
                    {
                        e.listed = false;
                    }
                    if gone && self.set_lists(&status.name, |l| *l = Lists::default()) {
                        self.rebuild(true, true, true);
                    }
                    let _ = self.inner.events.send(RegistryEvent::ServerState(status));
                }
                SupervisorEvent::Connected { server } => {
                    let reg = self.clone();
                    tokio::spawn(async move { reg.refresh(&server).await });
                }
                SupervisorEvent::Changed { server, event } => {
                    let kinds = match &event {
                        ServerEvent::ToolsChanged(_) => (true, false, false),
                        ServerEvent::ResourcesChanged { .. } => (false, true, false),
                        ServerEvent::PromptsChanged(_) => (false, false, true),
                        _ => continue,
                    };
                    let updated = self.set_lists(&server, |l| match event {
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
                        self.rebuild(kinds.0, kinds.1, kinds.2);
                    }
                }
            }
        }
    }

    /// Fetch every list a newly ready server offers.
    async fn refresh(&self, server: &str) {
        let Ok(client) = self.client(server) else {
            return;
        };
        let caps = client.negotiated().capabilities.clone();
        let mut lists = Lists::default();
        let mut failed = Vec::new();
        if caps.tools.is_some() {
            match client.list_tools().await {
                Ok(t) => lists.tools = t,
                Err(e) => failed.push(e),
            }
        }
        if caps.resources.is_some() {
            match client.list_resources().await {
                Ok(r) => lists.resources = r,
                Err(e) => failed.push(e),
            }
            match client.list_resource_templates().await {
                Ok(t) => lists.templates = t,
                Err(e) => failed.push(e),
            }
        }
        if caps.prompts.is_some() {
            match client.list_prompts().await {
                Ok(p) => lists.prompts = p,
                Err(e) => failed.push(e),
            }
        }
        for e in failed {
            warn!(server, "listing failed: {e}");
        }
        if self.set_lists(server, |l| *l = lists) {
            // Catalog first: `settled` waiters read it as soon as it is marked.
            self.rebuild(true, true, true);
            self.mark_listed(server);
        }
    }

    fn mark_listed(&self, server: &str) {
        if let Some(e) = self
            .write()
            .entries
            .iter_mut()
            .find(|e| e.config.name == server)
        {
            e.listed = true;
        }
        self.inner.settled.send_replace(());
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
                            | ServerState::Disabled
                            | ServerState::Stopped
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

    /// Returns false when the server is no longer configured. The entry's
    /// allow/deny filter is applied here, once per listing, since a changed
    /// filter means a changed entry and fresh lists.
    fn set_lists(&self, server: &str, f: impl FnOnce(&mut Lists)) -> bool {
        let mut st = self.write();
        match st.entries.iter_mut().find(|e| e.config.name == server) {
            Some(e) => {
                f(&mut e.lists);
                let filter = &e.config.tools;
                e.lists.tools.retain(|t| filter.allows(&t.name));
                true
            }
            None => false,
        }
    }

    /// Rebuild the flagged catalogs from every server's lists; the others
    /// cannot have changed.
    fn rebuild(&self, tools: bool, resources: bool, prompts: bool) {
        let changed = {
            let mut st = self.write();
            let mut changed = false;
            if tools {
                let inputs: Vec<ServerTools<'_>> = st
                    .entries
                    .iter()
                    .map(|e| ServerTools {
                        server: &e.config.name,
                        prefix: e.config.prefix(),
                        tools: &e.lists.tools,
                    })
                    .collect();
                let new = catalog::build(&inputs, &st.rules);
                // Names alone miss a changed schema or description.
                changed = new.tools().iter().map(|t| t.raw.get()).ne(st
                    .catalog
                    .tools()
                    .iter()
                    .map(|t| t.raw.get()));
                st.catalog = Arc::new(new);
            }
            if prompts {
                let inputs: Vec<ServerPrompts<'_>> = st
                    .entries
                    .iter()
                    .map(|e| ServerPrompts {
                        server: &e.config.name,
                        prefix: e.config.prefix(),
                        prompts: &e.lists.prompts,
                    })
                    .collect();
                let new = catalog::build_prompts(&inputs, &st.rules);
                st.prompts = Arc::new(new);
            }
            if resources {
                let inputs: Vec<ServerResources<'_>> = st
                    .entries
                    .iter()
                    .map(|e| ServerResources {
                        server: &e.config.name,
                        resources: &e.lists.resources,
                        templates: &e.lists.templates,
                    })
                    .collect();
                let new = catalog::build_resources(&inputs);
                st.resources = Arc::new(new);
            }
            changed
        };
        if tools && changed {
            let _ = self.inner.events.send(RegistryEvent::ToolsChanged);
        }
        if resources {
            let _ = self.inner.events.send(RegistryEvent::ResourcesChanged);
        }
        if prompts {
            let _ = self.inner.events.send(RegistryEvent::PromptsChanged);
        }
    }
}
