//! [`ServerClient`]: one MCP server, whatever its transport and revision.
//!
//! It runs the handshake, keeps what was negotiated (revision, capabilities,
//! `serverInfo`, `instructions`), refuses locally what the server did not
//! declare, follows pagination, and re-lists when the server says a list
//! changed. The protocol era is decided here and never leaks to callers.

pub mod attribution;
mod eras;
mod error;
mod host;
mod modern;
mod notes;
pub mod stats;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

pub use eras::EraCache;
pub use error::ClientError;
pub use host::{Asker, ElicitationPolicy, Host, HostRequest, NoHost, PolicyHost, SamplingPolicy};
pub use notes::LogMessage;

use crate::jsonrpc::{Origin, Peer, PeerConfig, PeerError, ProgressCallback, RequestOptions};
use crate::protocol::{
    ClientCapabilities, Era, ErrorObject, Notification, Prompt, ProtocolVersion, Resource,
    ResourceTemplate, ServerCapabilities, Tool, ToolResult, error_codes, methods, raw_field,
    set_fields, set_meta, to_raw,
};
use crate::transport::{CloseReason, Connection, TransportControl};

/// Who we are, sent as `clientInfo`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClientInfo {
    pub name: String,
    pub version: String,
}

impl Default for ClientInfo {
    fn default() -> Self {
        ClientInfo {
            name: "mcphost".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

/// How a client talks to its server.
#[derive(Clone)]
pub struct ClientOptions {
    pub client_info: ClientInfo,
    /// Answers sampling, elicitation and roots requests; its capabilities are
    /// the only client capabilities advertised.
    pub host: Arc<dyn Host>,
    /// Limit for the handshake (cold `npx` starts are slow).
    pub init_timeout: Duration,
    /// Default per-request timeout; progress restarts it.
    pub request_timeout: Duration,
    /// Hard maximum for any request.
    pub max_request_timeout: Duration,
    /// Upper bound on pages followed for one list, against endless cursors.
    pub max_pages: usize,
    /// Speak exactly this revision (`None`: negotiate, newest first).
    pub protocol_version: Option<ProtocolVersion>,
    /// The era the caller knows the server speaks: `Handshake` skips the
    /// `server/discover` probe.
    pub known_era: Option<Era>,
    /// The era an earlier start of this server negotiated (the era cache):
    /// as `known_era`, but a remembered handshake server that now refuses
    /// `initialize` is probed again, as it may have been upgraded.
    pub remembered_era: Option<Era>,
    /// How long the `server/discover` probe waits before taking silence
    /// for a server of the handshake revisions.
    pub probe_timeout: Duration,
    /// Re-fetch a list when the server says it changed, for
    /// [`ServerClient::subscribe`]. A client that only relays the
    /// notification (the C library's connected mode) turns it off.
    pub relist_on_change: bool,
    /// Where tool calls' latency and outcome are counted, per server name:
    /// shared by every client of a registry, so a restart keeps the counts.
    pub stats: Arc<stats::CallStats>,
    /// What each server has shown about how its requests relate to calls
    /// (see [`attribution`]): shared like `stats`.
    pub attribution: Arc<attribution::Attribution>,
}

impl ClientOptions {
    /// The peer limits of a server connection made with these options.
    fn peer_config(&self, name: &str) -> PeerConfig {
        let mut cfg = PeerConfig::new(name);
        cfg.timeout = self.request_timeout;
        cfg.max_timeout = self.max_request_timeout;
        cfg
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            client_info: ClientInfo::default(),
            host: Arc::new(NoHost),
            init_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(60),
            max_request_timeout: Duration::from_secs(600),
            max_pages: 10_000,
            protocol_version: None,
            known_era: None,
            remembered_era: None,
            probe_timeout: Duration::from_secs(10),
            relist_on_change: true,
            stats: stats::CallStats::new(),
            attribution: attribution::Attribution::new(),
        }
    }
}

/// What the handshake settled.
#[derive(Debug, Clone)]
pub struct Negotiated {
    pub protocol_version: ProtocolVersion,
    pub capabilities: ServerCapabilities,
    /// The capabilities object exactly as the server sent it.
    pub capabilities_raw: Box<RawValue>,
    /// `serverInfo` exactly as the server sent it.
    pub server_info: Box<RawValue>,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    pub instructions: Option<String>,
}

/// Per-call knobs for [`ServerClient::call_tool`] and friends.
#[derive(Clone, Default)]
pub struct CallOptions {
    pub timeout: Option<Duration>,
    pub on_progress: Option<ProgressCallback>,
    pub cancel: Option<CancellationToken>,
    /// The client request this call serves: server requests that arrive
    /// while it runs are routed back to that client.
    pub origin: Option<Origin>,
}

/// Something changed on the server. Lists arrive already re-fetched.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    ToolsChanged(Arc<Vec<Tool>>),
    ResourcesChanged {
        resources: Arc<Vec<Resource>>,
        templates: Arc<Vec<ResourceTemplate>>,
    },
    PromptsChanged(Arc<Vec<Prompt>>),
    ResourceUpdated {
        uri: String,
    },
    /// A `notifications/message` log entry, params untouched, with the
    /// sessions whose calls were in flight when it came.
    Log(LogMessage),
    /// `notifications/elicitation/complete`: a URL-mode elicitation ended;
    /// params untouched.
    ElicitationComplete(Box<RawValue>),
    /// The transport renewed the session on its own (HTTP) and the server
    /// answered `initialize` anew: [`ServerClient::negotiated`] holds what
    /// it said now, and every list may have changed.
    SessionRenewed,
    /// A re-list after a change notification failed.
    RelistFailed {
        what: &'static str,
        error: String,
    },
    /// The connection is gone; no events follow.
    Closed(Arc<CloseReason>),
}

struct Core {
    name: String,
    peer: Peer,
    /// Replaced when the transport renews the session.
    negotiated: std::sync::Mutex<Arc<Negotiated>>,
    opts: ClientOptions,
    era: Era,
    /// The transport mirrors request metadata into headers (HTTP), so
    /// `x-mcp-header` annotations matter.
    http: bool,
    /// Per tool, the parameters mirrored into headers (stateless era).
    header_params: std::sync::Mutex<std::collections::HashMap<String, Arc<modern::HeaderParams>>>,
    /// `logging/setLevel` of the stateless era: sent in every request's
    /// `_meta` instead.
    log_level: std::sync::Mutex<Option<String>>,
    /// Stateless era: until when each list method's result is fresh
    /// (`ttlMs`, the shortest of its pages), and when it was fetched.
    freshness: std::sync::Mutex<std::collections::HashMap<&'static str, Fresh>>,
    /// A revalidation is running.
    revalidating: std::sync::atomic::AtomicBool,
    /// The request id of the open `subscriptions/listen`: notifications
    /// tagged with another subscription are a closed stream's leftovers.
    listen_id: std::sync::Mutex<Option<Arc<std::sync::OnceLock<i64>>>>,
    /// Which sessions' calls are in flight, and who waits for a turn.
    turns: Arc<attribution::Turns>,
    /// The `initialize` sent declared `roots`.
    offered_roots: std::sync::atomic::AtomicBool,
    /// The server's notifications, and the calls in flight as each came.
    notes: notes::Notes,
}

#[derive(Debug, Clone, Copy)]
struct Fresh {
    until: tokio::time::Instant,
    fetched: tokio::time::Instant,
}

/// Least time between two re-fetches of a list on access, for servers
/// whose results are stale at once (`ttlMs` 0 or absent) and that send no
/// change notifications: the client's own caching heuristic.
const MIN_REFETCH: Duration = Duration::from_secs(1);

/// A connected MCP server.
pub struct ServerClient {
    core: Arc<Core>,
    control: Arc<dyn TransportControl>,
    events: broadcast::Sender<ServerEvent>,
    watcher: JoinHandle<()>,
    /// The stateless era's `subscriptions/listen` loop, and the resource
    /// URIs it asks updates for (`resources/subscribe` of the handshake).
    listener: Option<JoinHandle<()>>,
    subscriptions: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
}

impl Drop for ServerClient {
    fn drop(&mut self) {
        self.watcher.abort();
        if let Some(l) = &self.listener {
            l.abort();
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult {
    protocol_version: String,
    #[serde(default)]
    capabilities: Option<Box<RawValue>>,
    #[serde(default)]
    server_info: Option<Box<RawValue>>,
    #[serde(default)]
    instructions: Option<String>,
}

#[derive(Deserialize, Default)]
struct InfoKey {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    version: Option<String>,
}

impl ServerClient {
    /// Run the handshake over an already started transport. On failure the
    /// transport is shut down before the error is returned.
    pub async fn connect(
        name: &str,
        conn: Connection,
        opts: ClientOptions,
    ) -> Result<ServerClient, ClientError> {
        let span = info_span!("server", server = name);
        let control = conn.control.clone();
        let relist = opts.relist_on_change;
        match Self::handshake(name, conn, opts).instrument(span).await {
            Ok((core, notes)) => {
                let core = Arc::new(core);
                let (events, _) = broadcast::channel(256);
                let watcher = tokio::spawn(
                    watch_notifications(
                        core.clone(),
                        notes,
                        control.renewals(),
                        events.clone(),
                        relist,
                    )
                    .instrument(info_span!("server", server = name)),
                );
                let (subscriptions, subs) = tokio::sync::watch::channel(Default::default());
                let listener = (core.era == Era::Stateless).then(|| {
                    tokio::spawn(
                        listen(core.clone(), subs, events.clone())
                            .instrument(info_span!("server", server = name)),
                    )
                });
                Ok(ServerClient {
                    core,
                    control,
                    events,
                    watcher,
                    listener,
                    subscriptions,
                })
            }
            Err(e) => {
                control.shutdown().await;
                Err(e)
            }
        }
    }

    async fn handshake(
        name: &str,
        conn: Connection,
        opts: ClientOptions,
    ) -> Result<(Core, broadcast::Receiver<Arc<Notification>>), ClientError> {
        let http = conn.control.kind() != "stdio";
        let stateless = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Calls may have to take turns only if the server may ask for a
        // person or a model (roots are answered by a roots source instead).
        let offered = opts.host.capabilities();
        let turns = attribution::Turns::new(
            opts.attribution.server(name),
            offered.sampling.is_some() || offered.elicitation.is_some(),
        );
        let handler = Arc::new(EraHandler {
            stateless: stateless.clone(),
            host: host::HostHandler::new(name, opts.host.clone(), turns.clone()),
        });
        let peer = Peer::start(opts.peer_config(name), conn.outbound, conn.inbound, handler);
        // Subscribe before anything is sent so no early notification is
        // missed. The waker only wakes the notification task; the queue
        // behind it is read in order, counting (see `notes`).
        let notes = peer.subscribe();
        let queue = notes::Notes::new(peer.subscribe());
        let unknown = Arc::new(Negotiated {
            protocol_version: ProtocolVersion::LATEST_HANDSHAKE,
            capabilities: ServerCapabilities::default(),
            capabilities_raw: crate::protocol::empty_object(),
            server_info: crate::protocol::empty_object(),
            server_name: None,
            server_version: None,
            instructions: None,
        });
        let mut core = Core {
            name: name.to_owned(),
            peer,
            negotiated: std::sync::Mutex::new(unknown),
            opts,
            era: Era::Handshake,
            http,
            header_params: Default::default(),
            log_level: Default::default(),
            freshness: Default::default(),
            revalidating: Default::default(),
            listen_id: Default::default(),
            turns,
            offered_roots: Default::default(),
            notes: queue,
        };
        let pinned = core.opts.protocol_version;
        let probe = match pinned {
            Some(v) => v.era() == Era::Stateless,
            // What an earlier start learned, else probe: the spec's
            // backwards-compatible order is modern first.
            None => core.opts.known_era.or(core.opts.remembered_era) != Some(Era::Handshake),
        };
        let remembered = core.opts.known_era.is_none() && core.opts.remembered_era.is_some();
        if probe {
            core.era = Era::Stateless;
            stateless.store(true, std::sync::atomic::Ordering::SeqCst);
            let want = pinned.unwrap_or(ProtocolVersion::V2026_07_28);
            match core.probe(want, pinned.is_some()).await? {
                Probe::Modern(n) => {
                    debug!(version = %n.protocol_version, server_name = ?n.server_name, "discovered");
                    *core.negotiated.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(n);
                    return Ok((core, notes));
                }
                Probe::Legacy(why) => {
                    debug!("not the stateless revision ({why}); falling back to initialize");
                    core.era = Era::Handshake;
                    stateless.store(false, std::sync::atomic::Ordering::SeqCst);
                }
            }
        }
        let negotiated = match core.initialize().await {
            // Remembered as a handshake server, it now refuses initialize:
            // it may have become a server of the stateless revision. Or the
            // probe went unanswered in time (a slow start), and the refusal
            // lists the stateless revision: it is one.
            Err(e)
                if pinned.is_none()
                    && ((!probe && remembered && e.rpc_error().is_some())
                        || refuses_for_stateless(&e)) =>
            {
                debug!("initialize refused ({e}); asking server/discover");
                // Now known to answer: the probe gets the handshake's limit.
                core.opts.probe_timeout = core.opts.init_timeout;
                core.era = Era::Stateless;
                stateless.store(true, std::sync::atomic::Ordering::SeqCst);
                return match core.probe(ProtocolVersion::V2026_07_28, false).await? {
                    Probe::Modern(n) => {
                        *core.negotiated.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(n);
                        Ok((core, notes))
                    }
                    Probe::Legacy(_) => Err(e),
                };
            }
            r => r?,
        };
        debug!(version = %negotiated.protocol_version, server_name = ?negotiated.server_name, "initialized");
        *core.negotiated.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(negotiated);
        Ok((core, notes))
    }

    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// What the handshake settled (or the latest renewal of the session).
    pub fn negotiated(&self) -> Arc<Negotiated> {
        self.core.negotiated()
    }

    /// Server changes, with lists already re-fetched.
    pub fn subscribe(&self) -> broadcast::Receiver<ServerEvent> {
        self.events.subscribe()
    }

    /// The server's last `n` stderr lines (stdio only).
    pub fn stderr_tail(&self, n: usize) -> Vec<String> {
        self.control.stderr_tail(n)
    }

    /// The server's stderr lines as they arrive (stdio only); see
    /// [`TransportControl::stderr_lines`].
    pub fn stderr_lines(&self) -> Option<broadcast::Receiver<Arc<str>>> {
        self.control.stderr_lines()
    }

    /// Every notification the server sends, untouched (a daemon's
    /// `notifications/mcphost/*` included); bounded, lagging receivers get
    /// `Lagged(n)`.
    pub fn notifications(&self) -> broadcast::Receiver<Arc<Notification>> {
        self.core.peer.subscribe()
    }

    pub fn pid(&self) -> Option<u32> {
        self.control.pid()
    }

    /// Why the connection closed, once it has.
    pub fn close_reason(&self) -> Option<Arc<CloseReason>> {
        self.core.peer.close_reason()
    }

    /// Stop the server (stdio: stdin EOF, SIGTERM, SIGKILL, reap).
    /// Idempotent; calls still in flight fail with the close reason.
    pub async fn shutdown(&self) {
        self.watcher.abort();
        if let Some(l) = &self.listener {
            l.abort();
        }
        self.control.shutdown().await;
    }

    /// While the returned mark lives, the server's log messages count as
    /// `session`'s (as during its calls): for a request sent on its behalf
    /// without an origin, such as the upstream `resources/subscribe`.
    pub(crate) fn on_behalf_of(&self, session: u64) -> notes::CallMark<'_> {
        self.core.notes.call(session)
    }

    /// Send any request (e.g. an extension method such as `mcphost/status`);
    /// params and result are relayed untouched.
    pub async fn request_raw(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        self.core.request(method, None, params, &opts).await
    }

    /// A request whose method is named at run time: the C library's
    /// connected mode relays whatever its host sends to the daemon. Only
    /// over the handshake revision, whose requests need nothing per method.
    pub async fn relay(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        let core = &self.core;
        if core.era == Era::Stateless {
            return Err(ClientError::invalid(
                &core.name,
                method,
                "a method named at run time is relayed over the handshake revision only",
            ));
        }
        core.peer
            .request(method, params, core.request_options(&opts))
            .await
            .map_err(|error| ClientError::Request {
                server: core.name.clone(),
                method: method.to_owned().into(),
                error,
            })
    }

    /// `ping`; the stateless revision has none, so `server/discover`
    /// answers for it there.
    pub async fn ping(&self) -> Result<(), ClientError> {
        let method = match self.core.era {
            Era::Handshake => methods::PING,
            Era::Stateless => methods::SERVER_DISCOVER,
        };
        self.core
            .request(method, None, None, &CallOptions::default())
            .await?;
        Ok(())
    }

    /// Re-fetch, in the background, the lists whose `ttlMs` ran out (the
    /// stateless era's caching): called when the catalog is read, never on
    /// a timer. A list the server announces changes for (`listChanged`) is
    /// re-fetched early only when its TTL was positive; one stale at once
    /// with no announcements, at most once per [`MIN_REFETCH`]. Returns
    /// whether a re-fetch started; the new lists arrive as events.
    pub fn revalidate(&self) -> bool {
        let core = &self.core;
        if core.era != Era::Stateless {
            return false;
        }
        let caps = core.negotiated().capabilities.clone();
        let announced = |c: Option<bool>| c.unwrap_or(false);
        let now = tokio::time::Instant::now();
        let stale = |method: &'static str, announced: bool| {
            let f = core.freshness.lock().unwrap_or_else(|p| p.into_inner());
            let Some(x) = f.get(method) else { return false };
            let ttl_was_positive = x.until > x.fetched;
            if now < x.until {
                false
            } else if ttl_was_positive {
                true
            } else {
                // Stale at once: trust the announcements when there are
                // some, else re-fetch, but not more than once a second.
                !announced && now.saturating_duration_since(x.fetched) >= MIN_REFETCH
            }
        };
        let dirty = Dirty {
            tools: caps.tools.is_some()
                && stale(
                    methods::TOOLS_LIST,
                    announced(caps.tools.as_ref().and_then(|c| c.list_changed)),
                ),
            resources: caps.resources.is_some()
                && stale(
                    methods::RESOURCES_LIST,
                    announced(caps.resources.as_ref().and_then(|c| c.list_changed)),
                ),
            prompts: caps.prompts.is_some()
                && stale(
                    methods::PROMPTS_LIST,
                    announced(caps.prompts.as_ref().and_then(|c| c.list_changed)),
                ),
        };
        if !(dirty.tools || dirty.resources || dirty.prompts) {
            return false;
        }
        if core
            .revalidating
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return false;
        }
        debug!(
            tools = dirty.tools,
            resources = dirty.resources,
            prompts = dirty.prompts,
            "re-fetching stale lists (ttlMs)"
        );
        let core = core.clone();
        let events = self.events.clone();
        tokio::spawn(
            async move {
                relist(&core, &events, dirty).await;
                core.revalidating
                    .store(false, std::sync::atomic::Ordering::SeqCst);
            }
            .instrument(info_span!("server", server = %self.core.name)),
        );
        true
    }

    /// The era this client speaks with its server.
    pub fn era(&self) -> Era {
        self.core.era
    }

    /// Whether the server was offered roots in `initialize`, so that
    /// `notifications/roots/list_changed` means something to it. Never for
    /// the stateless era: its roots come with each request.
    pub fn offered_roots(&self) -> bool {
        self.core.era == Era::Handshake
            && self
                .core
                .offered_roots
                .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub async fn list_tools(&self) -> Result<Vec<Tool>, ClientError> {
        self.core.list_tools().await
    }

    pub async fn list_resources(&self) -> Result<Vec<Resource>, ClientError> {
        self.core
            .list(methods::RESOURCES_LIST, "resources", Some(Cap::Resources))
            .await
    }

    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, ClientError> {
        self.core
            .list(
                methods::RESOURCES_TEMPLATES_LIST,
                "resourceTemplates",
                Some(Cap::Resources),
            )
            .await
    }

    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, ClientError> {
        self.core
            .list(methods::PROMPTS_LIST, "prompts", Some(Cap::Prompts))
            .await
    }

    /// Call a tool. `arguments` is relayed untouched.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<ToolResult, ClientError> {
        let mut fields = vec![(
            "name".to_owned(),
            self.core.encode(methods::TOOLS_CALL, name)?,
        )];
        if let Some(a) = arguments {
            fields.push(("arguments".to_owned(), a));
        }
        let params = self.core.build(methods::TOOLS_CALL, fields)?;
        let started = std::time::Instant::now();
        let result = self
            .core
            .request(methods::TOOLS_CALL, Some(Cap::Tools), Some(params), &opts)
            .await
            .and_then(|raw| {
                ToolResult::from_raw(raw)
                    .map_err(|e| ClientError::invalid(&self.core.name, methods::TOOLS_CALL, e))
            });
        let failed = result.as_ref().map_or(true, |r| r.is_error);
        self.core
            .opts
            .stats
            .record(&self.core.name, name, started.elapsed(), failed);
        result
    }

    /// This server's tool calls so far (`None`: none yet), kept across
    /// restarts of the server.
    pub fn call_stats(&self) -> Option<stats::ServerSummary> {
        self.core.opts.stats.server(&self.core.name)
    }

    /// `resources/read`; the result (`contents`) is relayed untouched.
    pub async fn read_resource(
        &self,
        uri: &str,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        let params = self.core.build(
            methods::RESOURCES_READ,
            [(
                "uri".to_owned(),
                self.core.encode(methods::RESOURCES_READ, uri)?,
            )],
        )?;
        self.core
            .request(
                methods::RESOURCES_READ,
                Some(Cap::Resources),
                Some(params),
                &opts,
            )
            .await
    }

    /// `prompts/get`; `arguments` must be an object of strings.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        let mut fields = vec![(
            "name".to_owned(),
            self.core.encode(methods::PROMPTS_GET, name)?,
        )];
        if let Some(a) = arguments {
            fields.push(("arguments".to_owned(), a));
        }
        let params = self.core.build(methods::PROMPTS_GET, fields)?;
        self.core
            .request(
                methods::PROMPTS_GET,
                Some(Cap::Prompts),
                Some(params),
                &opts,
            )
            .await
    }

    /// `completion/complete` with caller-built params (`ref`, `argument`, `context`).
    pub async fn complete(&self, params: Box<RawValue>) -> Result<Box<RawValue>, ClientError> {
        self.complete_with(params, CallOptions::default()).await
    }

    /// [`ServerClient::complete`] with per-call options.
    pub async fn complete_with(
        &self,
        params: Box<RawValue>,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        self.core
            .request(
                methods::COMPLETION_COMPLETE,
                Some(Cap::Completions),
                Some(params),
                &opts,
            )
            .await
    }

    /// Send a notification (e.g. `notifications/roots/list_changed`).
    /// The stateless revision has no client notification but cancellation
    /// (roots go with each request), so there others are not sent.
    pub async fn notify(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
    ) -> Result<(), ClientError> {
        if self.core.era == Era::Stateless && method != methods::NOTIFICATION_CANCELLED {
            debug!(
                method,
                "not sent: the 2026-07-28 revision has no such notification"
            );
            return Ok(());
        }
        self.core
            .peer
            .notify(method, params)
            .await
            .map_err(|source| ClientError::request(&self.core.name, method, source))
    }

    /// `resources/subscribe`; in the stateless revision the URI joins the
    /// `resourceSubscriptions` of `subscriptions/listen`.
    pub async fn subscribe_resource(&self, uri: &str) -> Result<(), ClientError> {
        if self.core.era == Era::Stateless {
            self.core
                .require(Cap::Subscribe, methods::RESOURCES_SUBSCRIBE)?;
            self.subscriptions.send_modify(|s| {
                s.insert(uri.to_owned());
            });
            return Ok(());
        }
        self.uri_request(methods::RESOURCES_SUBSCRIBE, uri).await
    }

    pub async fn unsubscribe_resource(&self, uri: &str) -> Result<(), ClientError> {
        if self.core.era == Era::Stateless {
            self.subscriptions.send_modify(|s| {
                s.remove(uri);
            });
            return Ok(());
        }
        self.uri_request(methods::RESOURCES_UNSUBSCRIBE, uri).await
    }

    async fn uri_request(&self, method: &'static str, uri: &str) -> Result<(), ClientError> {
        let params = self
            .core
            .build(method, [("uri".to_owned(), self.core.encode(method, uri)?)])?;
        self.core
            .request(
                method,
                Some(Cap::Subscribe),
                Some(params),
                &CallOptions::default(),
            )
            .await?;
        Ok(())
    }

    /// `logging/setLevel` (debug, info, notice, warning, error, critical, alert, emergency).
    /// In the stateless revision the level goes in every request's `_meta`.
    pub async fn set_log_level(&self, level: &str) -> Result<(), ClientError> {
        let m = methods::LOGGING_SET_LEVEL;
        if self.core.era == Era::Stateless {
            self.core.require(Cap::Logging, m)?;
            *self
                .core
                .log_level
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(level.to_owned());
            return Ok(());
        }
        let params = self
            .core
            .build(m, [("level".to_owned(), self.core.encode(m, level)?)])?;
        self.core
            .request(m, Some(Cap::Logging), Some(params), &CallOptions::default())
            .await?;
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum Cap {
    Tools,
    Resources,
    Subscribe,
    Prompts,
    Completions,
    Logging,
}

impl Cap {
    fn name(self) -> &'static str {
        match self {
            Cap::Tools => "tools",
            Cap::Resources => "resources",
            Cap::Subscribe => "resources.subscribe",
            Cap::Prompts => "prompts",
            Cap::Completions => "completions",
            Cap::Logging => "logging",
        }
    }

    fn declared(self, c: &ServerCapabilities) -> bool {
        match self {
            Cap::Tools => c.tools.is_some(),
            Cap::Resources => c.resources.is_some(),
            Cap::Subscribe => c
                .resources
                .as_ref()
                .and_then(|r| r.subscribe)
                .unwrap_or(false),
            Cap::Prompts => c.prompts.is_some(),
            Cap::Completions => c.completions.is_some(),
            Cap::Logging => c.logging.is_some(),
        }
    }
}

/// Read an `initialize` result: a handshake-era revision, the
/// capabilities, `serverInfo` and `instructions`.
fn negotiate(name: &str, result: &str) -> Result<Negotiated, ClientError> {
    let init: InitializeResult = serde_json::from_str(result)
        .map_err(|e| ClientError::invalid(name, methods::INITIALIZE, e))?;
    let protocol_version = match init.protocol_version.parse::<ProtocolVersion>() {
        Ok(v) if v.era() == Era::Handshake => v,
        _ => {
            return Err(ClientError::UnsupportedVersion {
                server: name.to_owned(),
                requested: ProtocolVersion::LATEST_HANDSHAKE.as_str().to_owned(),
                offered: init.protocol_version,
            });
        }
    };
    let capabilities_raw = init
        .capabilities
        .unwrap_or_else(crate::protocol::empty_object);
    let capabilities: ServerCapabilities = serde_json::from_str(capabilities_raw.get())
        .map_err(|e| ClientError::invalid(name, methods::INITIALIZE, e))?;
    let server_info = init
        .server_info
        .unwrap_or_else(crate::protocol::empty_object);
    let info: InfoKey = serde_json::from_str(server_info.get()).unwrap_or_default();
    Ok(Negotiated {
        protocol_version,
        capabilities,
        capabilities_raw,
        server_info,
        server_name: info.name,
        server_version: info.version,
        instructions: init.instructions,
    })
}

/// Read a `server/discover` result: the newest stateless revision both
/// sides speak (`want` when pinned).
fn discovered(
    name: &str,
    result: &str,
    want: ProtocolVersion,
    pinned: bool,
) -> Result<Probe, ClientError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct DiscoverResult {
        #[serde(default)]
        supported_versions: Vec<String>,
        #[serde(default)]
        capabilities: Option<Box<RawValue>>,
        #[serde(default)]
        instructions: Option<String>,
        #[serde(default, rename = "_meta")]
        meta: Option<Box<RawValue>>,
    }
    let d: DiscoverResult = serde_json::from_str(result)
        .map_err(|e| ClientError::invalid(name, methods::SERVER_DISCOVER, e))?;
    let version = if d.supported_versions.iter().any(|v| v == want.as_str()) {
        want
    } else {
        match pick_version(&d.supported_versions) {
            Some(v) if !pinned => v,
            _ if pinned => {
                return Err(ClientError::PinnedVersionRefused {
                    server: name.to_owned(),
                    pinned: want.as_str().to_owned(),
                    offered: d.supported_versions.join(", "),
                });
            }
            _ => {
                let listed = if d.supported_versions.is_empty() {
                    "no version".to_owned()
                } else {
                    format!("only {}", d.supported_versions.join(", "))
                };
                return Ok(Probe::Legacy(format!("server/discover lists {listed}")));
            }
        }
    };
    let capabilities_raw = d.capabilities.unwrap_or_else(crate::protocol::empty_object);
    let capabilities: ServerCapabilities = serde_json::from_str(capabilities_raw.get())
        .map_err(|e| ClientError::invalid(name, methods::SERVER_DISCOVER, e))?;
    let server_info = d
        .meta
        .as_deref()
        .and_then(|m| {
            raw_field::<Box<RawValue>>(m, META_SERVER_INFO)
                .ok()
                .flatten()
        })
        .unwrap_or_else(crate::protocol::empty_object);
    let info: InfoKey = serde_json::from_str(server_info.get()).unwrap_or_default();
    Ok(Probe::Modern(Negotiated {
        protocol_version: version,
        capabilities,
        capabilities_raw,
        server_info,
        server_name: info.name,
        server_version: info.version,
        instructions: d.instructions,
    }))
}

/// `data.supported` of an `UnsupportedProtocolVersionError`.
/// `initialize` refused with -32022 by a server that lists a revision of
/// the stateless era.
fn refuses_for_stateless(e: &ClientError) -> bool {
    e.rpc_error().is_some_and(|r| {
        r.code == error_codes::UNSUPPORTED_VERSION && pick_version(&supported_versions(r)).is_some()
    })
}

fn supported_versions(e: &ErrorObject) -> Vec<String> {
    e.data
        .as_deref()
        .and_then(|d| raw_field::<Vec<String>>(d, "supported").ok().flatten())
        .unwrap_or_default()
}

/// The newest stateless revision in `offered` that mcphost speaks.
fn pick_version(offered: &[String]) -> Option<ProtocolVersion> {
    offered
        .iter()
        .filter_map(|v| v.parse::<ProtocolVersion>().ok())
        .filter(|v| v.era() == Era::Stateless)
        .max()
}

use methods::meta::{
    CLIENT_CAPABILITIES as META_CLIENT_CAPABILITIES, CLIENT_INFO as META_CLIENT_INFO,
    LOG_LEVEL as META_LOG_LEVEL, PROTOCOL_VERSION as META_PROTOCOL_VERSION,
    SERVER_INFO as META_SERVER_INFO, SUBSCRIPTION_ID as META_SUBSCRIPTION_ID,
};

/// The capability a `MissingRequiredClientCapabilityError` names.
fn missing_capability(e: &ErrorObject) -> String {
    e.data
        .as_deref()
        .and_then(|d| {
            raw_field::<serde_json::Value>(d, "requiredCapabilities")
                .ok()
                .flatten()
                .or_else(|| {
                    raw_field::<serde_json::Value>(d, "capability")
                        .ok()
                        .flatten()
                })
        })
        .map(|v| match v {
            serde_json::Value::String(s) => s,
            serde_json::Value::Object(m) => m.keys().cloned().collect::<Vec<_>>().join(", "),
            other => other.to_string(),
        })
        .unwrap_or_else(|| "(not named by the server)".to_owned())
}

/// Rounds of `input_required` one request may take before it is abandoned.
const MAX_INPUT_ROUNDS: usize = 16;

/// How a `server/discover` probe ended.
enum Probe {
    Modern(Negotiated),
    /// The server speaks the handshake revisions: why we think so.
    Legacy(String),
}

/// Error codes only a server of the stateless revision sends.
const MODERN_ERRORS: [i64; 3] = [
    error_codes::HEADER_MISMATCH,
    error_codes::MISSING_CAPABILITY,
    error_codes::UNSUPPORTED_VERSION,
];

/// Refuses server requests while the stateless revision is spoken (its
/// servers must not send any); the host's handler otherwise.
struct EraHandler {
    stateless: Arc<std::sync::atomic::AtomicBool>,
    host: host::HostHandler,
}

impl crate::jsonrpc::RequestHandler for EraHandler {
    fn handle(
        &self,
        r: crate::jsonrpc::IncomingRequest,
    ) -> crate::transport::BoxFuture<'static, Result<Box<RawValue>, crate::protocol::ErrorObject>>
    {
        if self.stateless.load(std::sync::atomic::Ordering::SeqCst) {
            return crate::jsonrpc::NoHandler.handle(r);
        }
        self.host.handle(r)
    }
}

impl Core {
    /// The `initialize` handshake, then `notifications/initialized`.
    async fn initialize(&self) -> Result<Negotiated, ClientError> {
        let name = &self.name;
        let opts = &self.opts;
        let caps: ClientCapabilities = opts.host.capabilities();
        self.offered_roots
            .store(caps.roots.is_some(), std::sync::atomic::Ordering::SeqCst);
        let requested = opts
            .protocol_version
            .unwrap_or(ProtocolVersion::LATEST_HANDSHAKE);
        let params = serde_json::json!({
            "protocolVersion": requested,
            "capabilities": caps,
            "clientInfo": opts.client_info,
        });
        let params =
            to_raw(&params).map_err(|e| ClientError::invalid(name, methods::INITIALIZE, e))?;
        let req_opts = RequestOptions {
            timeout: Some(opts.init_timeout),
            max_timeout: Some(opts.init_timeout),
            reset_timeout_on_progress: false,
            cancellable: false,
            ..Default::default()
        };
        let raw = self
            .peer
            .request(methods::INITIALIZE, Some(params), req_opts)
            .await
            .map_err(|source| ClientError::request(name, methods::INITIALIZE, source))?;
        let negotiated = negotiate(name, raw.get())?;
        if let Some(pinned) = opts.protocol_version
            && negotiated.protocol_version != pinned
        {
            return Err(ClientError::PinnedVersionRefused {
                server: name.to_owned(),
                pinned: pinned.as_str().to_owned(),
                offered: negotiated.protocol_version.as_str().to_owned(),
            });
        }
        self.peer
            .notify(methods::NOTIFICATION_INITIALIZED, None)
            .await
            .map_err(|source| {
                ClientError::request(name, methods::NOTIFICATION_INITIALIZED, source)
            })?;
        Ok(negotiated)
    }

    /// Ask with `server/discover` which era the server speaks. A
    /// `DiscoverResult` or a modern error means modern (`-32022`: retry with
    /// a version it lists); any other error or silence means legacy. Never
    /// one error code alone: legacy servers answer -32601, -32602, -32000 …
    /// A server that exits on the probe is [`ClientError::ExitedOnProbe`]:
    /// the supervisor restarts it and speaks `initialize` to it.
    async fn probe(&self, mut want: ProtocolVersion, pinned: bool) -> Result<Probe, ClientError> {
        let timeout = if pinned {
            self.opts.init_timeout
        } else {
            self.opts.probe_timeout.min(self.opts.init_timeout)
        };
        let mut refused = None;
        for _ in 0..2 {
            self.set_version(want);
            let init = CallOptions {
                timeout: Some(timeout),
                ..CallOptions::default()
            };
            let err = match self
                .stateless_request(methods::SERVER_DISCOVER, None, self.request_options(&init))
                .await
            {
                Ok(raw) => return discovered(&self.name, raw.get(), want, pinned),
                Err(e) => e,
            };
            let ClientError::Request { error, .. } = &err else {
                return Err(err);
            };
            match error {
                PeerError::Rpc(e) if e.code == error_codes::UNSUPPORTED_VERSION => {
                    let supported = supported_versions(e);
                    match pick_version(&supported) {
                        // Once more with what it lists (the same version
                        // too: a redeploy may have been under way).
                        Some(v) if !pinned || v == want => {
                            want = v;
                            refused = Some(err);
                            continue;
                        }
                        _ if pinned => {
                            return Err(ClientError::PinnedVersionRefused {
                                server: self.name.clone(),
                                pinned: want.as_str().to_owned(),
                                offered: supported.join(", "),
                            });
                        }
                        // It lists only handshake revisions.
                        _ => {
                            return Ok(Probe::Legacy(format!(
                                "it supports {}",
                                supported.join(", ")
                            )));
                        }
                    }
                }
                PeerError::Rpc(e) if MODERN_ERRORS.contains(&e.code) => return Err(err),
                _ if pinned => return Err(err),
                PeerError::Rpc(e) => {
                    return Ok(Probe::Legacy(format!(
                        "server/discover answered {} {:?}",
                        e.code, e.message
                    )));
                }
                PeerError::Timeout { .. } => {
                    return Ok(Probe::Legacy(format!(
                        "no answer to server/discover within {timeout:?}"
                    )));
                }
                PeerError::Closed(reason) if !self.http => {
                    return Err(ClientError::ExitedOnProbe {
                        server: self.name.clone(),
                        reason: reason.to_string(),
                    });
                }
                PeerError::Transport(reason) => {
                    return Ok(Probe::Legacy(reason.clone()));
                }
                _ => return Err(err),
            }
        }
        // A server that refuses the versions it lists is broken, not legacy.
        Err(refused.unwrap_or_else(|| {
            ClientError::invalid(
                &self.name,
                methods::SERVER_DISCOVER,
                "no version was accepted",
            )
        }))
    }

    fn set_version(&self, v: ProtocolVersion) {
        let mut n = self.negotiated.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = (**n).clone();
        next.protocol_version = v;
        *n = Arc::new(next);
    }

    fn request_options(&self, opts: &CallOptions) -> RequestOptions {
        RequestOptions {
            timeout: opts.timeout,
            on_progress: opts.on_progress.clone(),
            cancel: opts.cancel.clone(),
            origin: opts.origin.clone(),
            ..Default::default()
        }
    }

    fn negotiated(&self) -> Arc<Negotiated> {
        self.negotiated
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Take up the server's answer to an `initialize` the transport sent
    /// again (a renewed session).
    fn renewed(&self, frame: &str) -> Result<(), ClientError> {
        #[derive(Deserialize)]
        struct Response<'a> {
            #[serde(borrow)]
            result: &'a RawValue,
        }
        let r: Response<'_> = serde_json::from_str(frame)
            .map_err(|e| ClientError::invalid(&self.name, methods::INITIALIZE, e))?;
        let n = negotiate(&self.name, r.result.get())?;
        debug!(version = %n.protocol_version, "session renewed");
        *self.negotiated.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(n);
        Ok(())
    }

    fn encode<T: serde::Serialize + ?Sized>(
        &self,
        method: &str,
        v: &T,
    ) -> Result<Box<RawValue>, ClientError> {
        to_raw(v).map_err(|e| ClientError::invalid(&self.name, method, e))
    }

    fn build(
        &self,
        method: &str,
        fields: impl IntoIterator<Item = (String, Box<RawValue>)>,
    ) -> Result<Box<RawValue>, ClientError> {
        set_fields(None, fields).map_err(|e| ClientError::invalid(&self.name, method, e))
    }

    async fn request(
        &self,
        method: &'static str,
        cap: Option<Cap>,
        params: Option<Box<RawValue>>,
        opts: &CallOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        if let Some(cap) = cap {
            self.require(cap, method)?;
        }
        let ro = self.request_options(opts);
        // A log the server sends while a client's request is in flight
        // belongs to that client too.
        let _in_flight = opts.origin.as_ref().map(|o| self.notes.call(o.session));
        if self.era == Era::Stateless {
            return self.stateless_request(method, params, ro).await;
        }
        // A call of a session takes its place among the calls in flight,
        // and waits for its session's turn if this server needs turns.
        let _turn = match &ro.origin {
            Some(o) => {
                let limit = ro.timeout.unwrap_or(self.opts.request_timeout);
                Some(self.turns.enter(o.session, limit).await.map_err(|t| {
                    ClientError::TurnTimeout {
                        server: self.name.clone(),
                        method,
                        waited: t.waited,
                        busy_with: t.busy_with,
                    }
                })?)
            }
            None => None,
        };
        self.peer
            .request(method, params, ro)
            .await
            .map_err(|source| ClientError::request(&self.name, method, source))
    }

    /// One request of the stateless revision: `_meta` spliced into the raw
    /// params, and `input_required` rounds answered through the host (the
    /// session whose call it is) until the result is complete.
    fn stateless_request(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
        ro: RequestOptions,
    ) -> crate::transport::BoxFuture<'_, Result<Box<RawValue>, ClientError>> {
        // Boxed: a request may re-list tools or discover again, which send
        // requests of their own.
        Box::pin(self.stateless_request_inner(method, params, ro))
    }

    async fn stateless_request_inner(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
        ro: RequestOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        let invalid = |e: String| ClientError::invalid(&self.name, method, e);
        let original = params;
        let mut ro = ro;
        let mut base = self.with_meta(method, original.as_deref(), ro.origin.as_ref())?;
        ro.modern = self.modern_headers(method, &base);
        let mut params = base.clone();
        let mut retried = false;
        let mut rounds = 0;
        while rounds < MAX_INPUT_ROUNDS {
            let raw = match self
                .peer
                .request(method, Some(params.clone()), ro.clone())
                .await
            {
                Ok(raw) => raw,
                Err(PeerError::Rpc(e)) if !retried && method != methods::SERVER_DISCOVER => {
                    retried = true;
                    match e.code {
                        // The tool's x-mcp-header parameters changed: list
                        // the tools again, then retry once.
                        error_codes::HEADER_MISMATCH if method == methods::TOOLS_CALL => {
                            debug!("header mismatch: re-listing tools, then retrying once");
                            let _ = self.list_tools().await;
                            ro.modern = self.modern_headers(method, &base);
                            continue;
                        }
                        // The server was redeployed with other revisions:
                        // discover again, then retry once.
                        error_codes::UNSUPPORTED_VERSION => {
                            let supported = supported_versions(&e);
                            let Some(v) = pick_version(&supported) else {
                                return Err(ClientError::request(
                                    &self.name,
                                    method,
                                    PeerError::Rpc(e),
                                ));
                            };
                            if let Probe::Modern(n) =
                                self.probe(v, self.opts.protocol_version.is_some()).await?
                            {
                                debug!(version = %n.protocol_version, "the server changed its revision");
                                *self.negotiated.lock().unwrap_or_else(|p| p.into_inner()) =
                                    Arc::new(n);
                            }
                            base =
                                self.with_meta(method, original.as_deref(), ro.origin.as_ref())?;
                            ro.modern = self.modern_headers(method, &base);
                            params = base.clone();
                            continue;
                        }
                        error_codes::MISSING_CAPABILITY => {
                            return Err(ClientError::MissingCapability {
                                server: self.name.clone(),
                                method,
                                capability: missing_capability(&e),
                                error: Box::new(e),
                            });
                        }
                        _ => {
                            return Err(ClientError::request(
                                &self.name,
                                method,
                                PeerError::Rpc(e),
                            ));
                        }
                    }
                }
                Err(source) => return Err(ClientError::request(&self.name, method, source)),
            };
            let kind: Option<String> =
                raw_field(&raw, "resultType").map_err(|e| invalid(e.to_string()))?;
            match kind.as_deref() {
                None | Some("complete") => return Ok(raw),
                Some("input_required")
                    if matches!(
                        method,
                        methods::TOOLS_CALL | methods::RESOURCES_READ | methods::PROMPTS_GET
                    ) =>
                {
                    rounds += 1;
                    let requests: Option<Box<RawValue>> =
                        raw_field(&raw, "inputRequests").map_err(|e| invalid(e.to_string()))?;
                    let state: Option<Box<RawValue>> =
                        raw_field(&raw, "requestState").map_err(|e| invalid(e.to_string()))?;
                    let mut fields = Vec::new();
                    // Only a requestState: retry at once.
                    if requests.is_some() {
                        let responses = self.answer_inputs(&raw, ro.origin.as_ref()).await?;
                        fields.push(("inputResponses".to_owned(), responses));
                    }
                    if let Some(state) = state {
                        fields.push(("requestState".to_owned(), state));
                    }
                    // The same params, answered, under a new id.
                    params = set_fields(Some(&base), fields).map_err(|e| invalid(e.to_string()))?;
                }
                Some(other) => {
                    return Err(invalid(format!(
                        "resultType {other:?} is not one this client handles for {method}"
                    )));
                }
            }
        }
        Err(invalid(format!(
            "the server asked for input {MAX_INPUT_ROUNDS} times without completing"
        )))
    }

    /// Answer every `inputRequests` entry of an `input_required` result
    /// through the host: `{key: result}`.
    async fn answer_inputs(
        &self,
        result: &RawValue,
        origin: Option<&Origin>,
    ) -> Result<Box<RawValue>, ClientError> {
        #[derive(Deserialize)]
        struct InputRequest {
            method: String,
            #[serde(default)]
            params: Option<Box<RawValue>>,
        }
        let requests: indexmap::IndexMap<String, InputRequest> = raw_field(result, "inputRequests")
            .map_err(|e| ClientError::invalid(&self.name, "inputRequests", e))?
            .unwrap_or_default();
        let caps = self.opts.host.capabilities();
        let mut answers = Vec::with_capacity(requests.len());
        for (key, r) in requests {
            if !caps.handles(&r.method) {
                return Err(ClientError::invalid(
                    &self.name,
                    "inputRequests",
                    format!(
                        "the server asked for {} ({key}), which was not declared",
                        r.method
                    ),
                ));
            }
            let relation = match origin {
                Some(o) => crate::jsonrpc::Relation::Caused(o.clone()),
                None => crate::jsonrpc::Relation::Unrelated,
            };
            let answer = self
                .opts
                .host
                .handle(HostRequest {
                    server: self.name.clone(),
                    method: r.method.clone(),
                    params: r.params,
                    relation,
                    asker: host::Asker::Request,
                })
                .await
                .map_err(|e| {
                    ClientError::request(
                        &self.name,
                        "inputRequests",
                        crate::jsonrpc::PeerError::Rpc(e),
                    )
                })?;
            answers.push((key, answer));
        }
        set_fields(None, answers).map_err(|e| ClientError::invalid(&self.name, "inputRequests", e))
    }

    /// Whether `n` may be taken up: untagged, or tagged with the open
    /// `subscriptions/listen` (on stdio every stream shares one channel).
    fn current_subscription(&self, n: &Notification) -> bool {
        if self.era != Era::Stateless {
            return true;
        }
        let tag = n
            .params
            .as_deref()
            .and_then(|p| raw_field::<Box<RawValue>>(p, "_meta").ok().flatten())
            .and_then(|m| {
                raw_field::<crate::protocol::Id>(&m, META_SUBSCRIPTION_ID)
                    .ok()
                    .flatten()
            });
        let Some(tag) = tag else { return true };
        let open = self
            .listen_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|id| id.get().copied());
        open.is_some_and(|id| tag.as_number() == Some(id))
    }

    fn require(&self, cap: Cap, method: &'static str) -> Result<(), ClientError> {
        if cap.declared(&self.negotiated().capabilities) {
            return Ok(());
        }
        Err(ClientError::CapabilityNotDeclared {
            server: self.name.clone(),
            capability: cap.name(),
            method,
        })
    }

    /// `params` with the stateless revision's `_meta`: version, the
    /// capabilities of the caller (`origin`), clientInfo, the log level.
    fn with_meta(
        &self,
        method: &str,
        params: Option<&RawValue>,
        origin: Option<&Origin>,
    ) -> Result<Box<RawValue>, ClientError> {
        let caps = self.opts.host.capabilities_for(origin);
        let mut meta = vec![
            (
                META_PROTOCOL_VERSION.to_owned(),
                self.encode(method, self.negotiated().protocol_version.as_str())?,
            ),
            (
                META_CLIENT_CAPABILITIES.to_owned(),
                self.encode(method, &caps)?,
            ),
            (
                META_CLIENT_INFO.to_owned(),
                self.encode(method, &self.opts.client_info)?,
            ),
        ];
        let level = self
            .log_level
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(level) = level {
            meta.push((META_LOG_LEVEL.to_owned(), self.encode(method, &level)?));
        }
        set_meta(params, meta).map_err(|e| ClientError::invalid(&self.name, method, e))
    }

    /// What the HTTP transport mirrors into headers for this request.
    fn modern_headers(
        &self,
        method: &str,
        params: &RawValue,
    ) -> Option<Box<crate::transport::ModernHeaders>> {
        // stdio has no headers: nothing to work out per request.
        if !self.http {
            return None;
        }
        let headers = modern::headers(
            self.negotiated().protocol_version.as_str(),
            method,
            params,
            |tool| {
                self.header_params
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(tool)
                    .cloned()
            },
        );
        Some(Box::new(headers))
    }

    async fn list_tools(&self) -> Result<Vec<Tool>, ClientError> {
        let mut tools: Vec<Tool> = self
            .list(methods::TOOLS_LIST, "tools", Some(Cap::Tools))
            .await?;
        // Only HTTP mirrors parameters into headers; the spec lets other
        // transports ignore the annotations.
        if self.era == Era::Stateless && self.http {
            let mut map = std::collections::HashMap::new();
            tools.retain(|t| match modern::header_params(t) {
                Ok(p) => {
                    if !p.is_empty() {
                        map.insert(t.name.clone(), Arc::new(p));
                    }
                    true
                }
                // A tool whose annotations break the rules is not offered.
                Err(why) => {
                    warn!(tool = %t.name, "tool left out: {why}");
                    false
                }
            });
            *self.header_params.lock().unwrap_or_else(|p| p.into_inner()) = map;
        }
        Ok(tools)
    }

    /// Follow `nextCursor` to the end; a repeated cursor is an error.
    async fn list<T: DeserializeOwned>(
        &self,
        method: &'static str,
        field: &str,
        cap: Option<Cap>,
    ) -> Result<Vec<T>, ClientError> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..self.opts.max_pages {
            let params = match &cursor {
                Some(c) => {
                    Some(self.build(method, [("cursor".to_owned(), self.encode(method, c)?)])?)
                }
                None => None,
            };
            let page = self
                .request(method, cap, params, &CallOptions::default())
                .await?;
            let items: Vec<T> = raw_field(&page, field)
                .map_err(|e| ClientError::invalid(&self.name, method, e))?
                .unwrap_or_default();
            out.extend(items);
            if self.era == Era::Stateless {
                // Absent or negative is 0: stale at once.
                let ttl = raw_field::<i64>(&page, "ttlMs").ok().flatten().unwrap_or(0);
                let ttl = Duration::from_millis(u64::try_from(ttl).unwrap_or(0));
                let now = tokio::time::Instant::now();
                let until = now.checked_add(ttl).unwrap_or(now);
                let mut f = self.freshness.lock().unwrap_or_else(|p| p.into_inner());
                let e = f.entry(method).or_insert(Fresh {
                    until,
                    fetched: now,
                });
                // Each page is fresh for its own TTL: the list, for the
                // shortest (a first page restarts it).
                if cursor.is_none() || until < e.until {
                    e.until = until;
                }
                e.fetched = now;
            }
            let next: Option<String> = raw_field::<Option<String>>(&page, "nextCursor")
                .map_err(|e| ClientError::invalid(&self.name, method, e))?
                .flatten();
            match next {
                None => return Ok(out),
                Some(c) if !seen.insert(c.clone()) => {
                    return Err(ClientError::RepeatedCursor {
                        server: self.name.clone(),
                        method,
                        cursor: c,
                    });
                }
                Some(c) => cursor = Some(c),
            }
        }
        Err(ClientError::TooManyPages {
            server: self.name.clone(),
            method,
            pages: self.opts.max_pages,
        })
    }
}

#[derive(Default)]
struct Dirty {
    tools: bool,
    resources: bool,
    prompts: bool,
}

impl Dirty {
    fn mark(&mut self, n: &Notification) -> bool {
        match n.method.as_str() {
            methods::NOTIFICATION_TOOLS_LIST_CHANGED => self.tools = true,
            methods::NOTIFICATION_RESOURCES_LIST_CHANGED => self.resources = true,
            methods::NOTIFICATION_PROMPTS_LIST_CHANGED => self.prompts = true,
            _ => return false,
        }
        true
    }
}

/// Turns server notifications into [`ServerEvent`]s, re-listing on change.
/// `waker` only says that something came; the notifications are taken, in
/// order, from `core.notes`.
async fn watch_notifications(
    core: Arc<Core>,
    mut waker: broadcast::Receiver<Arc<Notification>>,
    mut renewals: Option<tokio::sync::watch::Receiver<Option<Arc<str>>>>,
    events: broadcast::Sender<ServerEvent>,
    relist_on_change: bool,
) {
    loop {
        let renewed = async {
            match renewals.as_mut() {
                Some(r) => match r.changed().await {
                    Ok(()) => r.borrow_and_update().clone(),
                    Err(_) => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        let woke = tokio::select! {
            Some(frame) = renewed => {
                match core.renewed(&frame) {
                    Ok(()) => drop(events.send(ServerEvent::SessionRenewed)),
                    Err(e) => warn!("the renewed session's initialize answer: {e}; keeping what was negotiated before"),
                }
                continue;
            }
            w = waker.recv() => w,
            _ = core.peer.closed() => {
                if let Some(reason) = core.peer.close_reason() {
                    let _ = events.send(ServerEvent::Closed(reason));
                }
                return;
            }
        };
        if let Err(broadcast::error::RecvError::Closed) = woke {
            return;
        }
        // Wakes for what is taken below are spent now; one for a later
        // notification stays.
        while !matches!(
            waker.try_recv(),
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
        ) {}
        let mut dirty = Dirty::default();
        let handle = |n: Arc<Notification>, callers: Option<Arc<[u64]>>, dirty: &mut Dirty| {
            if !core.current_subscription(&n) {
                debug!(method = %n.method, "dropped: it belongs to a closed subscriptions/listen");
                return;
            }
            if dirty.mark(&n) {
                return;
            }
            match n.method.as_str() {
                methods::NOTIFICATION_RESOURCES_UPDATED => {
                    let uri = n
                        .params
                        .as_deref()
                        .and_then(|p| raw_field::<String>(p, "uri").ok().flatten());
                    if let Some(uri) = uri {
                        let _ = events.send(ServerEvent::ResourceUpdated { uri });
                    }
                }
                methods::NOTIFICATION_MESSAGE => {
                    if let Some(p) = &n.params {
                        let _ = events.send(ServerEvent::Log(LogMessage {
                            params: p.clone(),
                            callers: callers.unwrap_or_else(|| Arc::from(Vec::new())),
                        }));
                    }
                }
                methods::NOTIFICATION_ELICITATION_COMPLETE => {
                    if let Some(p) = &n.params {
                        let _ = events.send(ServerEvent::ElicitationComplete(p.clone()));
                    }
                }
                other => debug!(method = other, "unhandled notification"),
            }
        };
        // Coalesce a burst of change notifications into one re-list each.
        loop {
            match core.notes.next() {
                notes::Next::Note(n, callers) => handle(n, callers, &mut dirty),
                notes::Next::Lagged(k) => {
                    warn!(
                        missed = k,
                        "notifications were dropped; re-listing everything"
                    );
                    dirty = Dirty {
                        tools: true,
                        resources: true,
                        prompts: true,
                    };
                }
                notes::Next::Empty => break,
                notes::Next::Closed => return,
            }
        }
        if relist_on_change {
            relist(&core, &events, dirty).await;
        }
    }
}

async fn relist(core: &Core, events: &broadcast::Sender<ServerEvent>, dirty: Dirty) {
    let failed = |what, e: ClientError| {
        warn!("re-listing {what} failed: {e}");
        let _ = events.send(ServerEvent::RelistFailed {
            what,
            error: e.to_string(),
        });
    };
    if dirty.tools {
        match core.list_tools().await {
            Ok(t) => drop(events.send(ServerEvent::ToolsChanged(Arc::new(t)))),
            Err(e) => failed("tools", e),
        }
    }
    if dirty.resources {
        let r = core
            .list::<Resource>(methods::RESOURCES_LIST, "resources", Some(Cap::Resources))
            .await;
        let t = core
            .list::<ResourceTemplate>(
                methods::RESOURCES_TEMPLATES_LIST,
                "resourceTemplates",
                Some(Cap::Resources),
            )
            .await;
        match (r, t) {
            (Ok(resources), Ok(templates)) => drop(events.send(ServerEvent::ResourcesChanged {
                resources: Arc::new(resources),
                templates: Arc::new(templates),
            })),
            (Err(e), _) | (_, Err(e)) => failed("resources", e),
        }
    }
    if dirty.prompts {
        match core
            .list::<Prompt>(methods::PROMPTS_LIST, "prompts", Some(Cap::Prompts))
            .await
        {
            Ok(p) => drop(events.send(ServerEvent::PromptsChanged(Arc::new(p)))),
            Err(e) => failed("prompts", e),
        }
    }
}

/// Longest wait before listening again after a dropped stream.
const MAX_LISTEN_BACKOFF: Duration = Duration::from_secs(30);

/// The stateless revision's change notifications: one
/// `subscriptions/listen` at a time, asking for what the server declared
/// and the subscribed resource URIs; listened to again (with backoff) when
/// the stream drops, and at once when the URIs change. Its notifications
/// reach [`watch_notifications`] like those of the handshake.
async fn listen(
    core: Arc<Core>,
    mut subs: tokio::sync::watch::Receiver<std::collections::BTreeSet<String>>,
    events: broadcast::Sender<ServerEvent>,
) {
    let mut backoff = Duration::from_millis(250);
    let mut dropped = false;
    loop {
        let caps = core.negotiated().capabilities.clone();
        let changed = |c: Option<bool>| c.unwrap_or(false);
        let uris: Vec<String> = subs.borrow_and_update().iter().cloned().collect();
        let mut filter = serde_json::Map::new();
        if changed(caps.tools.as_ref().and_then(|t| t.list_changed)) {
            filter.insert("toolsListChanged".into(), true.into());
        }
        if changed(caps.prompts.as_ref().and_then(|t| t.list_changed)) {
            filter.insert("promptsListChanged".into(), true.into());
        }
        if changed(caps.resources.as_ref().and_then(|t| t.list_changed)) {
            filter.insert("resourcesListChanged".into(), true.into());
        }
        if !uris.is_empty() {
            filter.insert("resourceSubscriptions".into(), uris.into());
        }
        if filter.is_empty() {
            // Nothing to listen for until a resource is subscribed.
            if subs.changed().await.is_err() {
                return;
            }
            continue;
        }
        let Ok(params) = to_raw(&serde_json::json!({ "notifications": filter })) else {
            return;
        };
        if dropped {
            // Changes while no stream was open were missed.
            relist(
                &core,
                &events,
                Dirty {
                    tools: true,
                    resources: true,
                    prompts: true,
                },
            )
            .await;
        }
        let cancel = CancellationToken::new();
        let opts = CallOptions {
            // A stream with no end: only a drop, the server or we end it.
            timeout: Some(Duration::MAX),
            cancel: Some(cancel.clone()),
            ..CallOptions::default()
        };
        let mut ro = core.request_options(&opts);
        ro.max_timeout = Some(Duration::MAX);
        ro.ended_by_cancel = true;
        let id = Arc::new(std::sync::OnceLock::new());
        ro.sent_as = Some(id.clone());
        *core.listen_id.lock().unwrap_or_else(|p| p.into_inner()) = Some(id);
        let started = tokio::time::Instant::now();
        tokio::select! {
            r = core.stateless_request(methods::SUBSCRIPTIONS_LISTEN, Some(params), ro) => {
                match r {
                    Ok(_) => debug!("the server ended subscriptions/listen"),
                    Err(e) => warn!("subscriptions/listen ended: {e}"),
                }
                if core.peer.close_reason().is_some() {
                    return;
                }
                dropped = true;
                if started.elapsed() > MAX_LISTEN_BACKOFF {
                    backoff = Duration::from_millis(250);
                }
                tokio::time::sleep(backoff).await;
                backoff = backoff.saturating_mul(2).min(MAX_LISTEN_BACKOFF);
            }
            c = subs.changed() => {
                cancel.cancel();
                if c.is_err() {
                    return;
                }
            }
            _ = core.peer.closed() => return,
        }
    }
}
