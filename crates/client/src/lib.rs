//! [`ServerClient`]: one MCP server, whatever its transport and revision.
//!
//! It runs the handshake, keeps what was negotiated (revision, capabilities,
//! `serverInfo`, `instructions`), refuses locally what the server did not
//! declare, follows pagination, and re-lists when the server says a list
//! changed. The protocol era is decided here and never leaks to callers.
//!
//! By era: `probe` asks `server/discover` and reads its outcome,
//! `handshake` speaks `initialize` (2024-11-05 … 2025-11-25), `stateless`
//! the 2026-07-28 revision (`_meta`, the `input_required` rounds, `ttlMs`,
//! `subscriptions/listen`), `listing` follows pages and re-lists. Each part
//! is an `impl Link` of its own over the one connected server.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod attribution;
mod error;
mod handshake;
mod headers;
mod host;
mod listing;
mod notes;
mod probe;
mod stateless;
pub mod stats;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use mcphost_transport::feed::{Feed, FeedReceiver};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info_span, warn};

pub use error::ClientError;
pub use host::{Asker, ElicitationPolicy, Host, HostRequest, NoHost, PolicyHost, SamplingPolicy};
pub use notes::{CallMark, LogMessage};

use handshake::InfoKey;
use listing::{ListTtl, Pump, StaleLists, relist, watch_renewals};
use probe::{Probe, pick_version, supported_versions};
use stateless::{EraHandler, StatelessState, listen};

use mcphost_jsonrpc::{Origin, Peer, PeerConfig, PeerError, ProgressCallback, RequestOptions};
use mcphost_protocol::{
    ClientCapabilities, Era, ErrorObject, Notification, Prompt, ProtocolVersion, Resource,
    ResourceTemplate, ServerCapabilities, Tool, ToolResult, error_codes, methods, raw_field,
    set_fields, set_meta, to_raw,
};
use mcphost_transport::{CloseReason, Connection, TransportControl};

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

/// The connected server as every part of the client sees it: the peer,
/// what was negotiated, and what each era keeps.
struct Link {
    name: String,
    peer: Peer,
    /// Replaced when the transport renews the session.
    negotiated: parking_lot::Mutex<Arc<Negotiated>>,
    opts: ClientOptions,
    era: Era,
    /// The transport mirrors request metadata into headers (HTTP), so
    /// `x-mcp-header` annotations matter.
    http: bool,
    /// What only the stateless era keeps.
    stateless: StatelessState,
    /// Which sessions' calls are in flight, and who waits for a turn.
    turns: Arc<attribution::Turns>,
    /// The `initialize` sent declared `roots`.
    offered_roots: std::sync::atomic::AtomicBool,
    /// The server's notifications, and the calls in flight as each came.
    notes: notes::Notes,
}

/// Events a subscriber may fall behind by before it loses the oldest
/// (`Lagged(n)`).
const EVENT_BACKLOG: usize = 256;

/// A connected MCP server.
pub struct ServerClient {
    link: Arc<Link>,
    control: Arc<dyn TransportControl>,
    events: Arc<Feed<ServerEvent>>,
    /// Turns notifications into events, in a task only while some wait.
    pump: Arc<Pump>,
    /// Sessions the transport renewed (HTTP only).
    renewer: Option<JoinHandle<()>>,
    /// The stateless era's `subscriptions/listen` loop, and the resource
    /// URIs it asks updates for (`resources/subscribe` of the handshake).
    listener: Option<JoinHandle<()>>,
    subscriptions: tokio::sync::watch::Sender<std::collections::BTreeSet<String>>,
}

impl Drop for ServerClient {
    fn drop(&mut self) {
        self.pump.stop();
        if let Some(r) = &self.renewer {
            r.abort();
        }
        if let Some(l) = &self.listener {
            l.abort();
        }
    }
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
            Ok(link) => {
                let link = Arc::new(link);
                let events = Arc::new(Feed::new(EVENT_BACKLOG));
                let pump = Pump::start(
                    &link,
                    events.clone(),
                    relist,
                    info_span!("server", server = name),
                );
                let renewer = control.renewals().map(|r| {
                    tokio::spawn(
                        watch_renewals(link.clone(), r, events.clone())
                            .instrument(info_span!("server", server = name)),
                    )
                });
                let (subscriptions, subs) = tokio::sync::watch::channel(Default::default());
                let listener = (link.era == Era::Stateless).then(|| {
                    tokio::spawn(
                        listen(link.clone(), subs, events.clone())
                            .instrument(info_span!("server", server = name)),
                    )
                });
                Ok(ServerClient {
                    link,
                    control,
                    events,
                    pump,
                    renewer,
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

    pub fn name(&self) -> &str {
        &self.link.name
    }

    /// What the handshake settled (or the latest renewal of the session).
    pub fn negotiated(&self) -> Arc<Negotiated> {
        self.link.negotiated()
    }

    /// Server changes, with lists already re-fetched.
    pub fn subscribe(&self) -> FeedReceiver<ServerEvent> {
        self.events.subscribe()
    }

    /// The server's last `n` stderr lines (stdio only).
    pub fn stderr_tail(&self, n: usize) -> Vec<String> {
        self.control.stderr_tail(n)
    }

    /// The server's stderr lines as they arrive (stdio only); see
    /// [`TransportControl::stderr_lines`].
    pub fn stderr_lines(&self) -> Option<FeedReceiver<Arc<str>>> {
        self.control.stderr_lines()
    }

    /// Every notification the server sends, untouched (a daemon's
    /// `notifications/mcphost/*` included); bounded, lagging receivers get
    /// `Lagged(n)`.
    pub fn notifications(&self) -> FeedReceiver<Arc<Notification>> {
        self.link.peer.subscribe()
    }

    pub fn pid(&self) -> Option<u32> {
        self.control.pid()
    }

    /// Why the connection closed, once it has.
    pub fn close_reason(&self) -> Option<Arc<CloseReason>> {
        self.link.peer.close_reason()
    }

    /// Stop the server (stdio: stdin EOF, SIGTERM, SIGKILL, reap).
    /// Idempotent; calls still in flight fail with the close reason.
    pub async fn shutdown(&self) {
        self.pump.stop();
        if let Some(r) = &self.renewer {
            r.abort();
        }
        if let Some(l) = &self.listener {
            l.abort();
        }
        self.control.shutdown().await;
    }

    /// While the returned mark lives, the server's log messages count as
    /// `session`'s (as during its calls): for a request sent on its behalf
    /// without an origin, such as the upstream `resources/subscribe`.
    pub fn on_behalf_of(&self, session: u64) -> notes::CallMark<'_> {
        self.link.notes.call(session)
    }

    /// Send any request (e.g. an extension method such as `mcphost/status`);
    /// params and result are relayed untouched.
    pub async fn request_raw(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        self.link.request(method, None, params, &opts).await
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
        let link = &self.link;
        if link.era == Era::Stateless {
            return Err(ClientError::invalid(
                &link.name,
                method,
                "a method named at run time is relayed over the handshake revision only",
            ));
        }
        link.peer
            .request(method, params, link.request_options(&opts))
            .await
            .map_err(|error| ClientError::Request {
                server: link.name.clone(),
                method: method.to_owned().into(),
                error,
            })
    }

    /// `ping`; the stateless revision has none, so `server/discover`
    /// answers for it there.
    pub async fn ping(&self) -> Result<(), ClientError> {
        let method = match self.link.era {
            Era::Handshake => methods::PING,
            Era::Stateless => methods::SERVER_DISCOVER,
        };
        self.link
            .request(method, None, None, &CallOptions::default())
            .await?;
        Ok(())
    }

    /// The era this client speaks with its server.
    pub fn era(&self) -> Era {
        self.link.era
    }

    /// Whether the server was offered roots in `initialize`, so that
    /// `notifications/roots/list_changed` means something to it. Never for
    /// the stateless era: its roots come with each request.
    pub fn offered_roots(&self) -> bool {
        self.link.era == Era::Handshake
            && self
                .link
                .offered_roots
                .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub async fn list_tools(&self) -> Result<Vec<Tool>, ClientError> {
        self.link.list_tools().await
    }

    pub async fn list_resources(&self) -> Result<Vec<Resource>, ClientError> {
        self.link
            .list(methods::RESOURCES_LIST, "resources", Some(Cap::Resources))
            .await
    }

    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, ClientError> {
        self.link
            .list(
                methods::RESOURCES_TEMPLATES_LIST,
                "resourceTemplates",
                Some(Cap::Resources),
            )
            .await
    }

    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, ClientError> {
        self.link
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
            self.link.encode(methods::TOOLS_CALL, name)?,
        )];
        if let Some(a) = arguments {
            fields.push(("arguments".to_owned(), a));
        }
        let params = self.link.build(methods::TOOLS_CALL, fields)?;
        let started = std::time::Instant::now();
        let result = self
            .link
            .request(methods::TOOLS_CALL, Some(Cap::Tools), Some(params), &opts)
            .await
            .and_then(|raw| {
                ToolResult::from_raw(raw)
                    .map_err(|e| ClientError::invalid(&self.link.name, methods::TOOLS_CALL, e))
            });
        let failed = result.as_ref().map_or(true, |r| r.is_error);
        self.link
            .opts
            .stats
            .record(&self.link.name, name, started.elapsed(), failed);
        result
    }

    /// This server's tool calls so far (`None`: none yet), kept across
    /// restarts of the server.
    pub fn call_stats(&self) -> Option<stats::ServerSummary> {
        self.link.opts.stats.server(&self.link.name)
    }

    /// `resources/read`; the result (`contents`) is relayed untouched.
    pub async fn read_resource(
        &self,
        uri: &str,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, ClientError> {
        let params = self.link.build(
            methods::RESOURCES_READ,
            [(
                "uri".to_owned(),
                self.link.encode(methods::RESOURCES_READ, uri)?,
            )],
        )?;
        self.link
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
            self.link.encode(methods::PROMPTS_GET, name)?,
        )];
        if let Some(a) = arguments {
            fields.push(("arguments".to_owned(), a));
        }
        let params = self.link.build(methods::PROMPTS_GET, fields)?;
        self.link
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
        self.link
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
        if self.link.era == Era::Stateless && method != methods::NOTIFICATION_CANCELLED {
            debug!(
                method,
                "not sent: the 2026-07-28 revision has no such notification"
            );
            return Ok(());
        }
        self.link
            .peer
            .notify(method, params)
            .await
            .map_err(|source| ClientError::request(&self.link.name, method, source))
    }

    /// `resources/subscribe`; in the stateless revision the URI joins the
    /// `resourceSubscriptions` of `subscriptions/listen`.
    pub async fn subscribe_resource(&self, uri: &str) -> Result<(), ClientError> {
        if self.link.era == Era::Stateless {
            self.link
                .require(Cap::Subscribe, methods::RESOURCES_SUBSCRIBE)?;
            self.subscriptions.send_modify(|s| {
                s.insert(uri.to_owned());
            });
            return Ok(());
        }
        self.uri_request(methods::RESOURCES_SUBSCRIBE, uri).await
    }

    pub async fn unsubscribe_resource(&self, uri: &str) -> Result<(), ClientError> {
        if self.link.era == Era::Stateless {
            self.subscriptions.send_modify(|s| {
                s.remove(uri);
            });
            return Ok(());
        }
        self.uri_request(methods::RESOURCES_UNSUBSCRIBE, uri).await
    }

    async fn uri_request(&self, method: &'static str, uri: &str) -> Result<(), ClientError> {
        let params = self
            .link
            .build(method, [("uri".to_owned(), self.link.encode(method, uri)?)])?;
        self.link
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
        if self.link.era == Era::Stateless {
            self.link.require(Cap::Logging, m)?;
            *self.link.stateless.log_level.lock() = Some(level.to_owned());
            return Ok(());
        }
        let params = self
            .link
            .build(m, [("level".to_owned(), self.link.encode(m, level)?)])?;
        self.link
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

use methods::meta::{
    CLIENT_CAPABILITIES as META_CLIENT_CAPABILITIES, CLIENT_INFO as META_CLIENT_INFO,
    LOG_LEVEL as META_LOG_LEVEL, PROTOCOL_VERSION as META_PROTOCOL_VERSION,
    SERVER_INFO as META_SERVER_INFO, SUBSCRIPTION_ID as META_SUBSCRIPTION_ID,
};

impl Link {
    fn set_version(&self, v: ProtocolVersion) {
        let mut n = self.negotiated.lock();
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
        self.negotiated.lock().clone()
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
}
