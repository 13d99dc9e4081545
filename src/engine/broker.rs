//! The broker: the one [`Host`] of every server client. It sends each
//! server→client request (sampling, elicitation, roots) to the session whose
//! call caused it, else to the primary host, else answers with the
//! configured fallback.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::value::RawValue;
use tracing::{debug, info, warn};

use super::session::Session;
use crate::client::{ElicitationPolicy, Host, HostRequest, PolicyHost};
use crate::config::{HostConfig, HostTimeouts, Root};
use crate::jsonrpc::{Origin, PeerError, Relation};
use crate::protocol::capabilities::{ElicitationCap, Empty, RootsCap, SamplingCap};
use crate::protocol::{
    ClientCapabilities, ErrorObject, error_codes, methods, raw_field, set_fields, set_meta, to_raw,
};
use crate::transport::BoxFuture;

/// The `_meta` member that names the asking server in a forwarded request
/// (and in forwarded log and elicitation notifications).
pub const META_SERVER: &str = "dev.mcphost/server";

/// `params` with the asking server named in its `_meta`.
pub(crate) fn named(
    params: Option<&RawValue>,
    server: &str,
) -> Result<Box<RawValue>, crate::protocol::RawError> {
    set_meta(params, [(META_SERVER.to_owned(), to_raw(server)?)])
}

/// The server a request's or notification's `_meta` names, if any.
pub(crate) fn named_server(params: Option<&RawValue>) -> Option<String> {
    let meta = raw_field::<Box<RawValue>>(params?, "_meta")
        .ok()
        .flatten()?;
    raw_field::<String>(&meta, META_SERVER).ok().flatten()
}

/// URL elicitations remembered for routing their completion notification.
const ELICITATIONS_KEPT: usize = 1024;

/// How long a host may take to answer `method`.
fn timeout_of(t: &HostTimeouts, method: &str) -> Duration {
    match method {
        methods::ELICITATION_CREATE => t.elicitation,
        methods::SAMPLING_CREATE_MESSAGE => t.sampling,
        _ => t.roots,
    }
}

/// The roots the config gives: to every server, and to each one.
#[derive(Default, PartialEq)]
struct ConfiguredRoots {
    global: Vec<Root>,
    per_server: HashMap<String, Vec<Root>>,
}

impl ConfiguredRoots {
    fn of(cfg: &HostConfig) -> ConfiguredRoots {
        ConfiguredRoots {
            global: cfg.roots.clone(),
            per_server: cfg
                .servers
                .iter()
                .filter(|s| !s.roots.is_empty())
                .map(|s| (s.name.clone(), s.roots.clone()))
                .collect(),
        }
    }

    /// `server`'s roots, global ones first, each URI once.
    fn for_server(&self, server: &str) -> Vec<Root> {
        let mut out: Vec<Root> = Vec::new();
        let own = self.per_server.get(server).into_iter().flatten();
        for r in self.global.iter().chain(own) {
            if !out.iter().any(|o| o.uri == r.uri) {
                out.push(r.clone());
            }
        }
        out
    }
}

struct State {
    sessions: HashMap<u64, Weak<Session>>,
    roots: ConfiguredRoots,
    timeouts: HostTimeouts,
    primary: Option<u64>,
    /// `elicitationId` → the session that was asked, oldest first.
    elicitations: VecDeque<(String, u64)>,
}

struct Inner {
    state: Mutex<State>,
    fallback: PolicyHost,
}

/// Cloneable; the registry's clients hold it as their host.
#[derive(Clone)]
pub(crate) struct Broker {
    inner: Arc<Inner>,
}

/// Where one request goes: the sessions to ask, in order, each with the
/// call it is asked for (none for the primary host). Only a guess
/// (ambiguous on stdio) moves on to the next when a session turns out to be
/// gone; a request a session caused dies with it.
struct Route {
    sessions: Vec<(Arc<Session>, Option<Origin>)>,
    guessed: bool,
}

impl Broker {
    pub(crate) fn new(fallback: PolicyHost) -> Broker {
        Broker {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    sessions: HashMap::new(),
                    roots: ConfiguredRoots::default(),
                    timeouts: HostTimeouts::default(),
                    primary: None,
                    elicitations: VecDeque::new(),
                }),
                fallback,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the config's roots and host timeouts; true when the roots
    /// changed.
    pub(crate) fn set_config(&self, cfg: &HostConfig) -> bool {
        let new = ConfiguredRoots::of(cfg);
        let mut st = self.lock();
        st.timeouts = cfg.host_timeouts;
        let changed = st.roots != new;
        st.roots = new;
        changed
    }

    fn roots_for(&self, server: &str) -> Vec<Root> {
        self.lock().roots.for_server(server)
    }

    /// How long a host may take to answer `method` (the config's
    /// `hostTimeouts`).
    pub(crate) fn timeout_for(&self, method: &str) -> Duration {
        timeout_of(&self.lock().timeouts, method)
    }

    pub(crate) fn add(&self, id: u64, session: Weak<Session>) {
        self.lock().sessions.insert(id, session);
    }

    /// A session is gone. True when it was the primary host.
    pub(crate) fn remove(&self, id: u64) -> bool {
        let mut st = self.lock();
        st.sessions.remove(&id);
        st.elicitations.retain(|(_, s)| *s != id);
        if st.primary == Some(id) {
            st.primary = None;
            return true;
        }
        false
    }

    pub(crate) fn session_count(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Make `id` the primary host (replacing any other). True when it changed.
    pub(crate) fn set_primary(&self, id: u64, primary: bool) -> bool {
        let mut st = self.lock();
        let before = st.primary;
        if primary {
            st.primary = Some(id);
        } else if st.primary == Some(id) {
            st.primary = None;
        }
        before != st.primary
    }

    pub(crate) fn primary(&self) -> Option<u64> {
        self.lock().primary
    }

    /// The primary host's name as messages show it (its `clientInfo.name`).
    pub(crate) fn primary_name(&self) -> Option<String> {
        let id = self.primary()?;
        self.session(id).map(|s| s.name().to_owned())
    }

    /// The session that was sent the URL elicitation `id`.
    pub(crate) fn elicitation_session(&self, id: &str) -> Option<u64> {
        self.lock()
            .elicitations
            .iter()
            .rev()
            .find(|(e, _)| e == id)
            .map(|(_, s)| *s)
    }

    fn session(&self, id: u64) -> Option<Arc<Session>> {
        self.lock().sessions.get(&id).and_then(Weak::upgrade)
    }

    /// The sessions for `r`: the one whose call caused it, else the primary
    /// host, else (ambiguous on stdio) the sessions with calls in flight,
    /// oldest call first; each only if it declared what `r` needs (a
    /// stateless client: on the request of that call).
    fn route(&self, r: &HostRequest, mode: Option<&str>) -> Route {
        let able =
            |(s, o): &(Arc<Session>, Option<Origin>)| s.can_answer(&r.method, mode, o.as_ref());
        let primary = self
            .primary()
            .and_then(|id| self.session(id))
            .map(|s| (s, None));
        let caused = |o: &Origin| self.session(o.session).map(|s| (s, Some(o.clone())));
        let candidates: Vec<(Arc<Session>, Option<Origin>)> = match &r.relation {
            Relation::Caused(o) => caused(o).into_iter().chain(primary).collect(),
            Relation::Unrelated => primary.into_iter().collect(),
            Relation::Ambiguous(origins) => {
                debug!(
                    server = %r.server,
                    sessions = origins.len(),
                    "several sessions have calls in flight; the primary host, else the oldest call's session, is asked"
                );
                let in_flight = origins.iter().filter_map(caused);
                primary.into_iter().chain(in_flight).collect()
            }
        };
        let mut sessions: Vec<(Arc<Session>, Option<Origin>)> = Vec::new();
        for c in candidates.into_iter().filter(able) {
            if !sessions.iter().any(|(k, _)| k.id() == c.0.id()) {
                sessions.push(c);
            }
        }
        let guessed = matches!(r.relation, Relation::Ambiguous(_));
        if !guessed {
            sessions.truncate(1);
        }
        Route { sessions, guessed }
    }

    /// The answer `asked` brings, as the server gets it.
    async fn forward(
        &self,
        asked: BoxFuture<'static, Result<Box<RawValue>, PeerError>>,
        r: &HostRequest,
    ) -> Result<Box<RawValue>, PeerError> {
        let answer = asked.await?;
        if r.method == methods::ROOTS_LIST {
            return with_roots(&answer, &self.roots_for(&r.server)).map_err(PeerError::Rpc);
        }
        Ok(answer)
    }

    /// What to tell the server when the host that was asked failed.
    fn host_failed(host: &str, method: &str, e: PeerError) -> ErrorObject {
        let internal = |e: String| ErrorObject::new(error_codes::INTERNAL_ERROR, e);
        match e {
            // The host's own error goes to the server as it was sent.
            PeerError::Rpc(err) => err,
            PeerError::Timeout { elapsed, .. } => internal(format!(
                "the host ({host}) did not answer {method} within {elapsed:.0?}"
            )),
            PeerError::Closed(_) => internal(format!(
                "the host ({host}) disconnected before answering {method}"
            )),
            other => internal(format!("the host ({host}): {other}")),
        }
    }

    /// Put `r` to `session`; the future holds no reference to the session,
    /// so a session that goes while its answer is awaited is freed (a
    /// stateless session's parked calls, holding the answer, go with it).
    fn ask(
        &self,
        session: &Session,
        origin: Option<&Origin>,
        r: &HostRequest,
    ) -> Result<BoxFuture<'static, Result<Box<RawValue>, PeerError>>, PeerError> {
        let params = named(r.params.as_deref(), &r.server).map_err(|e| {
            PeerError::Rpc(ErrorObject::new(error_codes::INVALID_PARAMS, e.to_string()))
        })?;
        if r.method == methods::ELICITATION_CREATE
            && let Ok(Some(id)) = raw_field::<String>(&params, "elicitationId")
        {
            let mut st = self.lock();
            if st.elicitations.len() >= ELICITATIONS_KEPT {
                st.elicitations.pop_front();
            }
            st.elicitations.push_back((id, session.id()));
        }
        let timeout = timeout_of(&self.lock().timeouts, &r.method);
        info!(server = %r.server, method = %r.method, session = session.id(), "forwarding to the host");
        Ok(session.ask(origin, &r.method, params, timeout))
    }
}

/// A host's `roots/list` answer with the configured roots added after its
/// own (each URI once); with none configured, the answer as it came.
fn with_roots(answer: &RawValue, configured: &[Root]) -> Result<Box<RawValue>, ErrorObject> {
    let invalid = |e: String| {
        ErrorObject::new(
            error_codes::INTERNAL_ERROR,
            format!("the host's roots/list answer: {e}"),
        )
    };
    if configured.is_empty() {
        return RawValue::from_string(answer.get().to_owned()).map_err(|e| invalid(e.to_string()));
    }
    #[derive(serde::Deserialize)]
    struct Listed {
        uri: String,
    }
    let mut roots: Vec<Box<RawValue>> = raw_field(answer, "roots")
        .map_err(|e| invalid(e.to_string()))?
        .unwrap_or_default();
    let known: Vec<String> = roots
        .iter()
        .filter_map(|r| serde_json::from_str::<Listed>(r.get()).ok().map(|l| l.uri))
        .collect();
    for r in configured.iter().filter(|r| !known.contains(&r.uri)) {
        roots.push(to_raw(r).map_err(|e| invalid(e.to_string()))?);
    }
    let roots = to_raw(&roots).map_err(|e| invalid(e.to_string()))?;
    set_fields(Some(answer), [("roots".to_owned(), roots)]).map_err(|e| invalid(e.to_string()))
}

impl Host for Broker {
    /// Everything a host may answer, whether or not one is connected yet:
    /// servers start before hosts connect, and the fallback answers while
    /// none can.
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            roots: Some(RootsCap { list_changed: true }),
            sampling: Some(SamplingCap::default()),
            elicitation: Some(ElicitationCap {
                form: Some(Empty::default()),
                url: Some(Empty::default()),
            }),
        }
    }

    /// A caller's own capabilities; the fallback's when nobody caused it.
    fn capabilities_for(&self, origin: Option<&crate::jsonrpc::Origin>) -> ClientCapabilities {
        match origin.and_then(|o| self.session(o.session).map(|s| (s, o))) {
            Some((s, o)) => s.client_capabilities(o),
            None => self.capabilities(),
        }
    }

    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        let broker = self.clone();
        Box::pin(async move {
            // An elicitation's mode decides who can answer it.
            let mode: Option<String> = r
                .params
                .as_deref()
                .and_then(|p| raw_field::<String>(p, "mode").ok().flatten());
            let route = broker.route(&r, mode.as_deref());
            let guessed = route.guessed;
            // Held weakly while answers are awaited (see `ask`).
            let targets: Vec<(Weak<Session>, Option<Origin>)> = route
                .sessions
                .into_iter()
                .map(|(s, o)| (Arc::downgrade(&s), o))
                .collect();
            for (weak, origin) in targets {
                let gone = || {
                    PeerError::Closed(Arc::new(crate::transport::CloseReason::new(
                        "the session ended",
                    )))
                };
                let (asked, name, id) = match weak.upgrade() {
                    Some(s) => (
                        broker.ask(&s, origin.as_ref(), &r),
                        s.name().to_owned(),
                        s.id(),
                    ),
                    None => (Err(gone()), String::from("gone"), 0),
                };
                let outcome = match asked {
                    Ok(asked) => broker.forward(asked, &r).await,
                    Err(e) => Err(e),
                };
                match outcome {
                    Ok(answer) => return Ok(answer),
                    Err(PeerError::Closed(_)) if guessed => {
                        info!(server = %r.server, session = id, "the guessed host is gone; asking the next");
                    }
                    Err(e) => return Err(Broker::host_failed(&name, &r.method, e)),
                }
            }
            broker.fallback(&r, mode.as_deref())
        })
    }
}

impl Broker {
    /// The answer when no session can give one.
    fn fallback(&self, r: &HostRequest, mode: Option<&str>) -> Result<Box<RawValue>, ErrorObject> {
        let encode = |v: serde_json::Value| {
            to_raw(&v).map_err(|e| ErrorObject::new(error_codes::INTERNAL_ERROR, e.to_string()))
        };
        if r.method == methods::ROOTS_LIST {
            return encode(serde_json::json!({ "roots": self.roots_for(&r.server) }));
        }
        let fallback = &self.inner.fallback;
        let url_mode = r.method == methods::ELICITATION_CREATE && mode == Some("url");
        if url_mode && let Some(policy) = fallback.elicitation {
            // Nobody can follow a URL for the user: never accept.
            let action = match policy {
                ElicitationPolicy::Cancel => "cancel",
                _ => "decline",
            };
            info!(server = %r.server, action, "answered a URL elicitation by the fallback");
            return encode(serde_json::json!({ "action": action }));
        }
        let answer = fallback.answer(&r.server, &r.method, r.params.as_deref());
        if let Err(e) = &answer
            && e.code == error_codes::METHOD_NOT_FOUND
        {
            warn!(server = %r.server, method = %r.method, "no host can answer and no fallback is set");
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(uri: &str) -> Root {
        Root {
            uri: uri.to_owned(),
            name: None,
        }
    }

    #[test]
    fn a_hosts_roots_come_first_and_configured_ones_are_added_once() {
        let answer = RawValue::from_string(
            r#"{"roots":[{"uri":"file:///h","name":"host","_meta":{"x":1.10}}],"_meta":{"k":1}}"#
                .to_owned(),
        )
        .unwrap();
        let out = with_roots(&answer, &[root("file:///h"), root("file:///c")]).unwrap();
        assert_eq!(
            out.get(),
            r#"{"roots":[{"uri":"file:///h","name":"host","_meta":{"x":1.10}},{"uri":"file:///c"}],"_meta":{"k":1}}"#
        );
        // Nothing configured: the host's bytes, untouched.
        assert_eq!(with_roots(&answer, &[]).unwrap().get(), answer.get());
    }

    #[test]
    fn a_server_gets_the_global_roots_then_its_own() {
        let cfg = crate::config::parse(
            r#"{"roots":["/g", {"uri":"file:///both","name":"B"}],
                "mcpServers":{"a":{"command":"x","roots":["file:///both","/a"]},"b":{"command":"y"}},
                "loginShellPath":false}"#,
            std::path::Path::new("/c/config.json"),
            &|_| None,
        )
        .unwrap();
        let roots = ConfiguredRoots::of(&cfg);
        let uris = |s: &str| {
            roots
                .for_server(s)
                .into_iter()
                .map(|r| r.uri)
                .collect::<Vec<_>>()
        };
        assert_eq!(uris("a"), ["file:///g", "file:///both", "file:///a"]);
        assert_eq!(uris("b"), ["file:///g", "file:///both"]);
        assert_eq!(roots.for_server("a")[1].name.as_deref(), Some("B"));
    }

    #[test]
    fn roots_must_be_file_uris_or_absolute_paths() {
        let err = crate::config::parse(
            r#"{"roots":["https://x.example/", "relative/dir", {"name":"n"}],"mcpServers":{}}"#,
            std::path::Path::new("/c/config.json"),
            &|_| None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("roots[0]") && err.contains("not a file:// URI"),
            "{err}"
        );
        assert!(err.contains("roots[1]") && err.contains("neither"), "{err}");
        assert!(
            err.contains("roots[2]") && err.contains("needs a uri"),
            "{err}"
        );
    }
}
