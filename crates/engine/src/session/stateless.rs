//! Stateless 2026-07-28 clients of a session: every request carries its
//! revision and capabilities in `_meta`, results say `resultType`, server
//! requests come back as `input_required` results (multi-round-trip
//! requests) and notifications only on `subscriptions/listen` streams.
//!
//! A `tools/call`, `resources/read` or `prompts/get` runs in a task of its
//! own. The request waits on two things: the task's result, and the
//! requests the servers send on the call's behalf (the broker hands them to
//! [`Session::ask`], which queues them on the call). The first request a
//! server sends answers the client's request with `input_required` while
//! the task keeps running; the call is parked under a random
//! `requestState`. The client's retry with `inputResponses` and that
//! `requestState` delivers the answers and waits on the same call again.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, info, warn};

use super::{Call, Mode, ProgressSink, Reply, Session, TokenSlot};
use crate::{internal, invalid_params, raw, rpc_err};
use mcphost_jsonrpc::{Origin, PeerError};
use mcphost_protocol::{
    ClientCapabilities, ErrorObject, Id, ProtocolVersion, error_codes, methods, raw_field,
    set_fields, to_raw,
};
use mcphost_registry::RegistryEvent;
use mcphost_transport::BoxFuture;

pub(super) use mcphost_protocol::methods::meta::{
    CLIENT_CAPABILITIES as META_CLIENT_CAPABILITIES, PROTOCOL_VERSION as META_PROTOCOL_VERSION,
};
use mcphost_protocol::methods::meta::{
    CLIENT_INFO as META_CLIENT_INFO, LOG_LEVEL as META_LOG_LEVEL, SERVER_INFO as META_SERVER_INFO,
    SUBSCRIPTION_ID as META_SUBSCRIPTION_ID,
};

/// The stateless revision we speak.
const STATELESS: ProtocolVersion = ProtocolVersion::V2026_07_28;

/// How long after its asks' host timeout a parked call expires.
const EXPIRY_GRACE: Duration = Duration::from_millis(250);

/// Server requests one call may have queued before it is parked.
const ASKS_PER_CALL: usize = 16;

/// mcphost's own identity, in `initialize` and in every stateless result.
pub(super) fn server_info() -> serde_json::Value {
    json!({ "name": "mcphost", "version": env!("CARGO_PKG_VERSION") })
}

/// Whether a request speaks the stateless revision: it carries a protocol
/// version in `_meta`, or it is a method only that revision has.
pub(super) fn is_stateless_request(method: &str, params: Option<&RawValue>) -> bool {
    matches!(
        method,
        methods::SERVER_DISCOVER | methods::SUBSCRIPTIONS_LISTEN
    ) || params.is_some_and(|p| {
        // Cheap test first: handshake requests rarely mention the key.
        p.get().contains(META_PROTOCOL_VERSION)
            && meta_of(p).is_some_and(|m| {
                raw_field::<Box<RawValue>>(&m, META_PROTOCOL_VERSION)
                    .ok()
                    .flatten()
                    .is_some()
            })
    })
}

fn meta_of(params: &RawValue) -> Option<Box<RawValue>> {
    raw_field::<Box<RawValue>>(params, "_meta").ok().flatten()
}

/// `-32022` for `requested`; `supported` is what this connection can
/// still speak.
fn unsupported(requested: &str, supported: &[&str], why: &str) -> ErrorObject {
    let mut e = rpc_err(error_codes::UNSUPPORTED_VERSION, why);
    e.data = to_raw(&json!({ "supported": supported, "requested": requested })).ok();
    e
}

/// `initialize` (or any handshake request) on a stateless connection.
pub(super) fn stateless_only(requested: Option<&str>) -> ErrorObject {
    unsupported(
        requested.unwrap_or_default(),
        &[STATELESS.as_str()],
        "this connection is stateless (2026-07-28) since its first request; \
         initialize needs a connection of its own",
    )
}

/// What the `_meta` of one stateless request declares.
struct RequestMeta {
    caps: ClientCapabilities,
    /// Session options of this request alone (`dev.mcphost/session`).
    view: Option<Arc<mcphost_model_view::View>>,
}

/// The `_meta` key of per-request session options.
pub(super) const META_SESSION: &str = "dev.mcphost/session";

/// Read and check a stateless request's `_meta`. `settled`: the session is
/// already stateless, so only 2026-07-28 is still possible on it.
fn read_meta(
    method: &str,
    params: Option<&RawValue>,
    settled: bool,
) -> Result<RequestMeta, ErrorObject> {
    let needs = |what: &str| {
        invalid_params(format!(
            "{method}: a stateless (2026-07-28) request needs {what} in params._meta \
             (io.modelcontextprotocol/protocolVersion and \
             io.modelcontextprotocol/clientCapabilities on every request)"
        ))
    };
    let meta = params
        .and_then(meta_of)
        .ok_or_else(|| needs("io.modelcontextprotocol/protocolVersion"))?;
    let version: String = raw_field(&meta, META_PROTOCOL_VERSION)
        .map_err(|e| invalid_params(format!("{method}: {e}")))?
        .ok_or_else(|| needs("io.modelcontextprotocol/protocolVersion"))?;
    if version != STATELESS.as_str() {
        let all: Vec<&str> = ProtocolVersion::ALL
            .iter()
            .rev()
            .map(|v| v.as_str())
            .collect();
        let (supported, why) = if settled {
            (
                vec![STATELESS.as_str()],
                format!(
                    "unsupported protocol version {version:?}: this connection speaks 2026-07-28"
                ),
            )
        } else {
            (
                all,
                format!(
                    "unsupported protocol version {version:?} in _meta: stateless requests \
                     speak 2026-07-28; the others are spoken after initialize"
                ),
            )
        };
        return Err(unsupported(&version, &supported, &why));
    }
    let caps: ClientCapabilities = raw_field(&meta, META_CLIENT_CAPABILITIES)
        .map_err(|e| invalid_params(format!("{method}: {e}")))?
        .ok_or_else(|| needs("io.modelcontextprotocol/clientCapabilities"))?;
    Ok(RequestMeta { caps, view: None })
}

/// Per-hop `_meta` members a stateless client gives us; never relayed.
fn strip_protocol_meta(
    params: Option<Box<RawValue>>,
) -> Result<Option<Box<RawValue>>, ErrorObject> {
    let Some(p) = params else { return Ok(None) };
    let Some(meta) = meta_of(&p) else {
        return Ok(Some(p));
    };
    let mut map: indexmap::IndexMap<String, Box<RawValue>> =
        serde_json::from_str(meta.get()).map_err(|e| invalid_params(format!("_meta: {e}")))?;
    for k in [
        META_PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES,
        META_CLIENT_INFO,
        META_LOG_LEVEL,
    ] {
        map.shift_remove(k);
    }
    let fields = if map.is_empty() {
        // `_meta: {}` would be a change of its own; drop the key instead.
        let mut all: indexmap::IndexMap<String, Box<RawValue>> =
            serde_json::from_str(p.get()).map_err(|e| invalid_params(e.to_string()))?;
        all.shift_remove("_meta");
        return to_raw(&all).map(Some).map_err(internal);
    } else {
        to_raw(&map).map_err(internal)?
    };
    set_fields(Some(&p), [("_meta".to_owned(), fields)])
        .map(Some)
        .map_err(internal)
}

/// Methods whose results the revision makes cacheable (`ttlMs`, `cacheScope`).
fn cacheable(method: &str) -> bool {
    crate::is_catalog_list(method) || method == methods::RESOURCES_READ
}

/// A result as a stateless client gets it: `resultType` (`complete` unless
/// it says otherwise), our `serverInfo` in `_meta`, and for cacheable
/// methods `ttlMs: 0` and `cacheScope: "private"` unless the server chose.
/// Everything else stays byte for byte; results that are not objects (some
/// `mcphost/*` answers) are left as they are.
fn finish(method: &str, result: Box<RawValue>) -> Reply {
    if !result.get().trim_start().starts_with('{') {
        return Ok(result);
    }
    // One parse of the result's top level, one write: this runs on every
    // stateless call, and lookups key by key rescanned the whole text.
    let mut map: indexmap::IndexMap<String, Box<RawValue>> =
        serde_json::from_str(result.get()).map_err(internal)?;
    if !map.contains_key("resultType") {
        map.insert("resultType".to_owned(), raw_str("\"complete\""));
    }
    if cacheable(method) {
        if !map.contains_key("ttlMs") {
            map.insert("ttlMs".to_owned(), raw_str("0"));
        }
        if !map.contains_key("cacheScope") {
            map.insert("cacheScope".to_owned(), raw_str("\"private\""));
        }
    }
    let meta = set_fields(
        map.get("_meta").map(|m| &**m),
        [(META_SERVER_INFO.to_owned(), server_info_raw()?)],
    )
    .map_err(internal)?;
    map.insert("_meta".to_owned(), meta);
    to_raw(&map).map_err(internal)
}

/// A JSON literal written in this file.
fn raw_str(json: &'static str) -> Box<RawValue> {
    // Only called with valid literals; `null` keeps it total.
    RawValue::from_string(json.to_owned()).unwrap_or_default()
}

/// `server_info()` as text, made once.
fn server_info_raw() -> Result<Box<RawValue>, ErrorObject> {
    static RAW: std::sync::OnceLock<Option<Box<RawValue>>> = std::sync::OnceLock::new();
    RAW.get_or_init(|| to_raw(&server_info()).ok())
        .clone()
        .ok_or_else(|| internal("cannot encode serverInfo"))
}

/// A hard-to-guess `requestState`: 24 bytes from the OS, in hex.
fn random_token() -> Result<String, ErrorObject> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes)
        .map_err(|e| internal(format!("no randomness for a requestState: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A server's request for one stateless call, waiting for the client.
pub(super) struct Ask {
    method: String,
    params: Box<RawValue>,
    answer: oneshot::Sender<Box<RawValue>>,
}

/// A call in flight: what its client declared on its latest request, and
/// where the servers' requests for it go.
struct CallSlot {
    caps: ClientCapabilities,
    asks: mpsc::Sender<Ask>,
}

/// A call's server request, given to the client under `key`.
struct PendingAsk {
    key: String,
    method: String,
    params: Box<RawValue>,
    answer: oneshot::Sender<Box<RawValue>>,
}

/// One stateless call, running in its own task so that it outlives the
/// response that asks for input. Dropping it cancels the call (down to the
/// server) and forgets its slot.
struct RunningCall {
    id: i64,
    session: Weak<Session>,
    method: String,
    /// What a `requestState` is bound to: the tool or prompt name, the URI.
    target: Option<String>,
    task: AbortOnDropHandle<Reply>,
    asks: mpsc::Receiver<Ask>,
    progress: TokenSlot,
    /// Input keys handed out so far.
    keys: u64,
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        // Never called with the session's lock held (see `expire`).
        if let Some(s) = self.session.upgrade() {
            s.lock().stateless.calls.remove(&self.id);
        }
    }
}

/// A call waiting for its client's retry.
struct Parked {
    call: RunningCall,
    pending: Vec<PendingAsk>,
}

/// The notifications one `subscriptions/listen` asked for (and was given).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    tools_list_changed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    prompts_list_changed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    resources_list_changed: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    resource_subscriptions: Vec<String>,
}

struct Listen {
    /// The `subscriptions/listen` request's id: every notification of the
    /// stream carries it.
    id: Id,
    filter: Filter,
}

/// A stateless session's calls, parked calls and listen streams.
#[derive(Default)]
pub(super) struct State {
    next_call: i64,
    calls: HashMap<i64, CallSlot>,
    parked: HashMap<String, Parked>,
    next_listen: u64,
    listens: HashMap<u64, Listen>,
    /// Resource URIs subscribed for listen streams, and by how many.
    resource_refs: HashMap<String, usize>,
    /// The last per-request options (`_meta["dev.mcphost/session"]`) by
    /// their text, compiled: its search index is reused while they repeat.
    request_view: Option<(String, Arc<mcphost_model_view::View>)>,
}

impl State {
    /// The capabilities of the call `origin` (ours: origins of stateless
    /// calls carry the call's own id).
    pub(super) fn caps_of(&self, session: u64, origin: &Origin) -> Option<&ClientCapabilities> {
        if origin.session != session {
            return None;
        }
        let id = origin.request.as_number()?;
        self.calls.get(&id).map(|c| &c.caps)
    }

    fn next_call(&mut self) -> i64 {
        self.next_call = self.next_call.saturating_add(1);
        self.next_call
    }
}

/// The `requestState` binding of a call: its tool or prompt name, or URI.
fn target_of(method: &str, params: Option<&RawValue>) -> Option<String> {
    let key = if method == methods::RESOURCES_READ {
        "uri"
    } else {
        "name"
    };
    raw_field::<String>(params?, key).ok().flatten()
}

/// The client's progress token on this request.
fn progress_token(params: Option<&RawValue>) -> Option<Box<RawValue>> {
    let meta = meta_of(params?)?;
    raw_field::<Box<RawValue>>(&meta, "progressToken")
        .ok()
        .flatten()
}

fn short_name(method: &str) -> &str {
    match method {
        methods::ELICITATION_CREATE => "elicitation",
        methods::SAMPLING_CREATE_MESSAGE => "sampling",
        methods::ROOTS_LIST => "roots",
        other => other,
    }
}

/// Why a server's request for a stateless call got no answer.
fn no_answer(session: &str, why: &str) -> PeerError {
    PeerError::Rpc(ErrorObject::new(
        error_codes::INTERNAL_ERROR,
        format!("the client ({session}) {why}"),
    ))
}

/// Ends a listen stream: forgets it, and releases its resource
/// subscriptions.
struct ListenGuard {
    session: Weak<Session>,
    key: u64,
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        let Some(s) = self.session.upgrade() else {
            return;
        };
        let released: Vec<String> = {
            let mut st = s.lock();
            let Some(l) = st.stateless.listens.remove(&self.key) else {
                return;
            };
            let mut out = Vec::new();
            for uri in l.filter.resource_subscriptions {
                let refs = st.stateless.resource_refs.entry(uri.clone()).or_default();
                *refs = refs.saturating_sub(1);
                if *refs == 0 {
                    st.stateless.resource_refs.remove(&uri);
                    out.push(uri);
                }
            }
            out
        };
        debug!(session = s.id, "listen stream ended");
        if released.is_empty() {
            return;
        }
        let registry = s.engine.registry().clone();
        let id = s.id;
        s.engine.rt.spawn(async move {
            for uri in released {
                if let Err(e) = registry.unsubscribe_resource(id, &uri).await {
                    debug!(%uri, "unsubscribing a listen stream's resource: {e}");
                }
            }
        });
    }
}

impl Session {
    /// One request of a stateless client (or the one that makes the
    /// session stateless).
    pub(super) async fn stateless(
        self: &Arc<Self>,
        id: Id,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Reply {
        let mut meta = read_meta(method, params.as_deref(), self.mode() == Mode::Stateless)?;
        self.decide(Mode::Stateless)?;
        self.record_client_name(params.as_deref(), super::ClientInfoIn::Meta);
        if matches!(method, methods::TOOLS_LIST | methods::TOOLS_CALL) {
            meta.view = self.request_view(params.as_deref())?;
        }
        let out = match method {
            methods::SERVER_DISCOVER => raw(&json!({
                "resultType": "complete",
                "supportedVersions": [STATELESS],
                "capabilities": Session::capabilities(true),
                "instructions": self.instructions(),
                "ttlMs": 0,
                "cacheScope": "private",
                "_meta": { META_SERVER_INFO: server_info() },
            })),
            methods::TOOLS_LIST if meta.view.is_some() => {
                let view = meta.view.clone().ok_or_else(|| internal("no view"))?;
                match self.shaped(&view, method, params)? {
                    super::shaped::Shaped::Answer(reply) => Ok(reply),
                    super::shaped::Shaped::Forward(_) => Err(internal("tools/list forwarded")),
                }
            }
            methods::TOOLS_CALL => {
                // A configured session's meta-tools and allow lists first;
                // what goes on is a call like any other (retries included).
                // Options in the request's own `_meta` win over the
                // connection's.
                let view = meta.view.clone().or_else(|| self.view.load_full());
                let shaped = match view {
                    Some(view) => self.shaped(&view, method, params)?,
                    None => super::shaped::Shaped::Forward(params),
                };
                match shaped {
                    super::shaped::Shaped::Answer(reply) => Ok(reply),
                    super::shaped::Shaped::Forward(params) => {
                        self.stateless_call(method, params, meta).await
                    }
                }
            }
            methods::RESOURCES_READ | methods::PROMPTS_GET => {
                self.stateless_call(method, params, meta).await
            }
            methods::SUBSCRIPTIONS_LISTEN => self.listen(id, params).await,
            methods::RESOURCES_SUBSCRIBE | methods::RESOURCES_UNSUBSCRIBE => Err(rpc_err(
                error_codes::METHOD_NOT_FOUND,
                format!(
                    "{method} is not part of 2026-07-28: use subscriptions/listen with \
                     notifications.resourceSubscriptions"
                ),
            )),
            methods::LOGGING_SET_LEVEL => Err(rpc_err(
                error_codes::METHOD_NOT_FOUND,
                "logging/setLevel is not part of 2026-07-28 (and mcphost sends stateless \
                 clients no notifications/message)",
            )),
            "mcphost/host/register" => Err(invalid_params(
                "mcphost/host/register: a stateless (2026-07-28) client cannot be the primary \
                 host; servers' requests reach it only as input_required results of its own calls",
            )),
            _ => {
                let params = if method == methods::COMPLETION_COMPLETE {
                    strip_protocol_meta(params)?
                } else {
                    params
                };
                // Its own call id: only calls have slots, so nothing a
                // server asks meanwhile is routed to this request.
                let id = self.lock().stateless.next_call();
                self.handle_admitted(Id::number(id), method, params).await
            }
        }?;
        finish(method, out)
    }

    /// The options in this request's `_meta["dev.mcphost/session"]`, the
    /// same fields as `mcphost/session/configure` (a `profile` included);
    /// `None` without them. The last ones are kept compiled.
    fn request_view(
        &self,
        params: Option<&RawValue>,
    ) -> Result<Option<Arc<mcphost_model_view::View>>, ErrorObject> {
        let Some(p) = params.filter(|p| p.get().contains(META_SESSION)) else {
            return Ok(None);
        };
        let Some(options) =
            meta_of(p).and_then(|m| raw_field::<Box<RawValue>>(&m, META_SESSION).ok().flatten())
        else {
            return Ok(None);
        };
        let text = options.get().to_owned();
        if let Some((t, v)) = &self.lock().stateless.request_view
            && *t == text
        {
            return Ok(Some(v.clone()));
        }
        let bad = |e: String| invalid_params(format!("_meta.{META_SESSION}: {e}"));
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let settings = self.engine.model_view_settings();
        let (opts, profile) =
            mcphost_config::model_view::Options::configure(&value, &settings).map_err(bad)?;
        if opts.max_tokens.is_some() && !mcphost_registry::cost::AVAILABLE {
            return Err(bad("maxTokens needs the `tokens` feature".to_owned()));
        }
        let Some(view) = mcphost_model_view::View::new(opts, profile).map_err(bad)? else {
            return Ok(None);
        };
        let view = Arc::new(view);
        self.lock().stateless.request_view = Some((text, view.clone()));
        Ok(Some(view))
    }

    /// `tools/call`, `resources/read`, `prompts/get`: a new call, or the
    /// retry of a parked one.
    async fn stateless_call(
        self: &Arc<Self>,
        method: &str,
        params: Option<Box<RawValue>>,
        meta: RequestMeta,
    ) -> Reply {
        let p = params.as_deref();
        let state: Option<String> = match p {
            Some(p) => raw_field(p, "requestState")
                .map_err(|e| invalid_params(format!("{method}: requestState: {e}")))?,
            None => None,
        };
        let responses: Option<indexmap::IndexMap<String, Box<RawValue>>> = match p {
            Some(p) => raw_field(p, "inputResponses")
                .map_err(|e| invalid_params(format!("{method}: inputResponses: {e}")))?,
            None => None,
        };
        let target = target_of(method, p);
        let token = progress_token(p);
        let (call, unanswered) = match state {
            None if responses.is_some() => {
                return Err(invalid_params(format!(
                    "{method}: inputResponses without the requestState they answer"
                )));
            }
            None => (
                self.start_call(method, target, params, meta.caps, token),
                Vec::new(),
            ),
            Some(state) => self.resume(
                &state,
                method,
                target,
                responses.unwrap_or_default(),
                meta.caps,
                token,
            )?,
        };
        self.drive(call, unanswered).await
    }

    fn start_call(
        self: &Arc<Self>,
        method: &str,
        target: Option<String>,
        params: Option<Box<RawValue>>,
        caps: ClientCapabilities,
        token: Option<Box<RawValue>>,
    ) -> RunningCall {
        let (tx, rx) = mpsc::channel(ASKS_PER_CALL);
        let id = {
            let mut st = self.lock();
            let id = st.stateless.next_call();
            st.stateless.calls.insert(id, CallSlot { caps, asks: tx });
            id
        };
        // Progress only when the first request asks for it (the server's
        // params stay as they are otherwise); later rounds swap the token.
        let wanted = token.is_some();
        let progress: TokenSlot = Arc::new(Mutex::new(token));
        let call = Call {
            origin: Origin {
                session: self.id,
                request: Id::number(id),
            },
            progress: wanted.then(|| ProgressSink {
                port: self.port.clone(),
                token: progress.clone(),
            }),
            caller: self.caller(),
        };
        let engine = self.engine.clone();
        let m = method.to_owned();
        let task = self
            .engine
            .rt
            .spawn(async move { engine.dispatch(call, &m, params).await });
        RunningCall {
            id,
            session: Arc::downgrade(self),
            method: method.to_owned(),
            target,
            task: AbortOnDropHandle::new(task),
            asks: rx,
            progress,
            keys: 0,
        }
    }

    /// Take the parked call `state` up again with the client's answers.
    fn resume(
        &self,
        state: &str,
        method: &str,
        target: Option<String>,
        mut responses: indexmap::IndexMap<String, Box<RawValue>>,
        caps: ClientCapabilities,
        token: Option<Box<RawValue>>,
    ) -> Result<(RunningCall, Vec<PendingAsk>), ErrorObject> {
        let parked = self.lock().stateless.parked.remove(state);
        let Some(parked) = parked else {
            return Err(invalid_params(format!(
                "{method}: requestState is not one this connection is waiting on: it is \
                 unknown, already used, or its call expired or was cancelled; send the \
                 request again without inputResponses and requestState"
            )));
        };
        if parked.call.method != method || parked.call.target != target {
            let msg = format!(
                "{method}: this requestState belongs to a {} of {:?}",
                parked.call.method,
                parked.call.target.as_deref().unwrap_or_default()
            );
            // Still the owner's to use.
            self.lock()
                .stateless
                .parked
                .insert(state.to_owned(), parked);
            return Err(invalid_params(msg));
        }
        let Parked { call, pending } = parked;
        let mut unanswered = Vec::new();
        for ask in pending {
            match responses.shift_remove(&ask.key) {
                // The server may have given up meanwhile; then nobody waits.
                Some(answer) => drop(ask.answer.send(answer)),
                None => unanswered.push(ask),
            }
        }
        if let Some(slot) = self.lock().stateless.calls.get_mut(&call.id) {
            slot.caps = caps;
        }
        *call.progress.lock() = token;
        debug!(session = self.id, call = call.id, "a parked call goes on");
        Ok((call, unanswered))
    }

    /// Wait for the call's result or its next server requests.
    async fn drive(self: &Arc<Self>, mut call: RunningCall, unanswered: Vec<PendingAsk>) -> Reply {
        if !unanswered.is_empty() {
            // The retry left some unanswered: ask for them again.
            return self.park(call, unanswered);
        }
        enum Next {
            Done(Reply),
            Ask(Option<Ask>),
        }
        let next = tokio::select! {
            biased;
            r = &mut call.task => Next::Done(r.unwrap_or_else(|e| Err(internal(format!("the call ended: {e}"))))),
            a = call.asks.recv() => Next::Ask(a),
        };
        match next {
            Next::Done(r) => r,
            Next::Ask(None) => (&mut call.task)
                .await
                .unwrap_or_else(|e| Err(internal(format!("the call ended: {e}")))),
            Next::Ask(Some(first)) => {
                let mut asks = vec![first];
                while let Ok(a) = call.asks.try_recv() {
                    asks.push(a);
                }
                let pending = asks
                    .into_iter()
                    .map(|a| {
                        call.keys = call.keys.saturating_add(1);
                        PendingAsk {
                            key: format!("{}-{}", short_name(&a.method), call.keys),
                            method: a.method,
                            params: a.params,
                            answer: a.answer,
                        }
                    })
                    .collect();
                self.park(call, pending)
            }
        }
    }

    /// Answer the client's request with `input_required` for `pending`, and
    /// keep the call until the retry (or until it expires).
    fn park(self: &Arc<Self>, call: RunningCall, pending: Vec<PendingAsk>) -> Reply {
        let token = random_token()?;
        let mut requests = Vec::with_capacity(pending.len());
        for a in &pending {
            let request = set_fields(
                None,
                [
                    ("method".to_owned(), to_raw(&a.method).map_err(internal)?),
                    ("params".to_owned(), a.params.clone()),
                ],
            )
            .map_err(internal)?;
            requests.push((a.key.clone(), request));
        }
        let result = set_fields(
            None,
            [
                (
                    "resultType".to_owned(),
                    to_raw("input_required").map_err(internal)?,
                ),
                (
                    "inputRequests".to_owned(),
                    set_fields(None, requests).map_err(internal)?,
                ),
                ("requestState".to_owned(), to_raw(&token).map_err(internal)?),
            ],
        )
        .map_err(internal)?;
        // The longest any of them may take, by the hosts' timeouts.
        let wait = pending
            .iter()
            .map(|a| self.engine.broker.timeout_for(&a.method))
            .max()
            .unwrap_or(Duration::from_secs(30));
        *call.progress.lock() = None;
        info!(
            session = self.id,
            call = call.id,
            inputs = pending.len(),
            "a stateless call needs input: answered input_required"
        );
        self.lock()
            .stateless
            .parked
            .insert(token.clone(), Parked { call, pending });
        let weak = Arc::downgrade(self);
        // Expired a little after its asks time out, so their servers hear
        // that the host did not answer rather than that the call was
        // withdrawn (the two timers would otherwise fire in either order).
        let expire_after = wait.saturating_add(EXPIRY_GRACE);
        self.engine.rt.spawn(async move {
            tokio::time::sleep(expire_after).await;
            if let Some(s) = weak.upgrade() {
                s.expire(&token, wait);
            }
        });
        Ok(result)
    }

    /// The client is gone: cancel its parked calls (their servers get
    /// `notifications/cancelled`) and forget its calls' slots.
    pub(super) fn end_stateless(&self) {
        // Taken out first: dropping a call takes the lock itself.
        let (parked, calls) = {
            let mut st = self.lock();
            (
                std::mem::take(&mut st.stateless.parked),
                std::mem::take(&mut st.stateless.calls),
            )
        };
        if !parked.is_empty() {
            info!(
                session = self.id,
                calls = parked.len(),
                "the client left with calls waiting for input; cancelled"
            );
        }
        drop(parked);
        drop(calls);
    }

    fn expire(&self, token: &str, after: Duration) {
        // Taken out first: dropping the call takes the lock itself.
        let parked = self.lock().stateless.parked.remove(token);
        if parked.is_some() {
            warn!(
                session = self.id,
                "a parked call got no retry within {after:?}; cancelled"
            );
        }
        drop(parked);
    }

    /// Queue a server's request on the stateless call `origin`; the
    /// answer comes with the client's retry.
    pub(super) fn ask_stateless(
        &self,
        origin: Option<&Origin>,
        method: &str,
        params: Box<RawValue>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Box<RawValue>, PeerError>> {
        let name = self.name().to_owned();
        let limit = self.limits.max_in_flight;
        let queued = (|| {
            let st = self.lock();
            if st.stateless.parked.len() >= limit {
                return Err(no_answer(
                    &name,
                    &format!("has {limit} calls waiting for input already"),
                ));
            }
            let id = origin
                .filter(|o| o.session == self.id)
                .and_then(|o| o.request.as_number());
            let slot = id
                .and_then(|id| st.stateless.calls.get(&id))
                .ok_or_else(|| {
                    no_answer(&name, "has no call in flight that this request belongs to")
                })?;
            let (tx, rx) = oneshot::channel();
            slot.asks
                .try_send(Ask {
                    method: method.to_owned(),
                    params,
                    answer: tx,
                })
                .map_err(|_| no_answer(&name, "has too many requests of one call waiting"))?;
            Ok(rx)
        })();
        let method = method.to_owned();
        Box::pin(async move {
            let rx = queued?;
            match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(_)) => Err(no_answer(
                    &name,
                    &format!("ended the call before answering {method}"),
                )),
                Err(_) => Err(PeerError::Timeout {
                    method,
                    elapsed: timeout,
                }),
            }
        })
    }

    /// `subscriptions/listen`: acknowledge the granted filter, then tag the
    /// matching notifications with the request's id until the client
    /// cancels the request or goes. Never answers on its own.
    async fn listen(self: &Arc<Self>, id: Id, params: Option<Box<RawValue>>) -> Reply {
        let filter: Filter = params
            .as_deref()
            .map(|p| raw_field(p, "notifications"))
            .transpose()
            .map_err(|e| invalid_params(format!("subscriptions/listen: notifications: {e}")))?
            .flatten()
            .ok_or_else(|| invalid_params("subscriptions/listen needs params.notifications"))?;
        let mut granted = Filter {
            resource_subscriptions: Vec::new(),
            ..filter.clone()
        };
        for uri in filter.resource_subscriptions {
            if granted.resource_subscriptions.contains(&uri) {
                continue;
            }
            if self.listen_subscribe(&uri).await {
                granted.resource_subscriptions.push(uri);
            }
        }
        let ack = to_raw(&json!({
            "_meta": { META_SUBSCRIPTION_ID: &id },
            "notifications": &granted,
        }))
        .map_err(internal)?;
        let guard = {
            let mut st = self.lock();
            st.stateless.next_listen = st.stateless.next_listen.saturating_add(1);
            let key = st.stateless.next_listen;
            st.stateless.listens.insert(
                key,
                Listen {
                    id,
                    filter: granted,
                },
            );
            // Queued under the lock: no notification of the stream can
            // overtake its acknowledgement.
            if let Err(e) = self
                .port
                .notify(methods::NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED, Some(ack))
            {
                st.stateless.listens.remove(&key);
                return Err(internal(format!(
                    "cannot acknowledge the subscription: {e}"
                )));
            }
            ListenGuard {
                session: Arc::downgrade(self),
                key,
            }
        };
        info!(session = self.id, "listen stream open");
        std::future::pending::<()>().await;
        drop(guard);
        Err(internal("unreachable"))
    }

    /// Subscribe a listen stream's resource (counted per session).
    async fn listen_subscribe(&self, uri: &str) -> bool {
        let first = {
            let mut st = self.lock();
            let refs = st
                .stateless
                .resource_refs
                .entry(uri.to_owned())
                .or_default();
            *refs = refs.saturating_add(1);
            *refs == 1
        };
        if !first {
            return true;
        }
        match self
            .engine
            .registry()
            .subscribe_resource(self.id, uri)
            .await
        {
            Ok(()) => true,
            Err(e) => {
                debug!(%uri, "a listen stream's resource is not granted: {e}");
                let mut st = self.lock();
                st.stateless.resource_refs.remove(uri);
                false
            }
        }
    }

    /// A registry event as this stateless client's listen streams (and its
    /// `mcphost/logs/follow`) want it.
    pub(super) fn stateless_notifications(
        &self,
        ev: RegistryEvent,
    ) -> Vec<(&'static str, Option<Box<RawValue>>)> {
        if let RegistryEvent::Stderr { server, line } = &ev {
            return self.stderr_note(server, line).into_iter().collect();
        }
        let tagged = |id: &Id, extra: Option<(&str, &str)>| {
            let mut v = json!({ "_meta": { META_SUBSCRIPTION_ID: id } });
            if let Some((k, val)) = extra {
                v[k] = json!(val);
            }
            to_raw(&v).ok()
        };
        let st = self.lock();
        let each = |method: &'static str, want: &dyn Fn(&Filter) -> bool| {
            st.stateless
                .listens
                .values()
                .filter(|l| want(&l.filter))
                .filter_map(|l| tagged(&l.id, None).map(|p| (method, Some(p))))
                .collect::<Vec<_>>()
        };
        match ev {
            RegistryEvent::ToolsChanged => each(methods::NOTIFICATION_TOOLS_LIST_CHANGED, &|f| {
                f.tools_list_changed
            }),
            RegistryEvent::PromptsChanged => {
                each(methods::NOTIFICATION_PROMPTS_LIST_CHANGED, &|f| {
                    f.prompts_list_changed
                })
            }
            RegistryEvent::ResourcesChanged => {
                each(methods::NOTIFICATION_RESOURCES_LIST_CHANGED, &|f| {
                    f.resources_list_changed
                })
            }
            RegistryEvent::ResourceUpdated { uri, sessions } if sessions.contains(&self.id) => st
                .stateless
                .listens
                .values()
                .filter(|l| l.filter.resource_subscriptions.contains(&uri))
                .filter_map(|l| {
                    tagged(&l.id, Some(("uri", &uri)))
                        .map(|p| (methods::NOTIFICATION_RESOURCES_UPDATED, Some(p)))
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}
