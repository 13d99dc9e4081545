//! The broker: the one [`Host`] of every server client. It sends each
//! server→client request (sampling, elicitation, roots) to the session whose
//! call caused it, else to the primary host, else answers with the
//! configured fallback.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::value::RawValue;
use tracing::{debug, info, warn};

use super::roots::{Roots, with_roots};
use super::session::Session;
use crate::client::{ElicitationPolicy, Host, HostRequest, PolicyHost};
use crate::config::{HostConfig, HostTimeouts};
use crate::jsonrpc::{Origin, PeerError, Relation};
use crate::protocol::capabilities::{ElicitationCap, Empty, RootsCap, SamplingCap};
use crate::protocol::{
    ClientCapabilities, ErrorObject, error_codes, methods, raw_field, set_meta, to_raw,
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

struct State {
    sessions: HashMap<u64, Weak<Session>>,
    timeouts: HostTimeouts,
    primary: Option<u64>,
    /// `elicitationId` → the session that was asked, oldest first.
    elicitations: VecDeque<(String, u64)>,
}

struct Inner {
    state: Mutex<State>,
    fallback: PolicyHost,
    /// Which roots each server sees (see `roots`).
    roots: Roots,
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
                    timeouts: HostTimeouts::default(),
                    primary: None,
                    elicitations: VecDeque::new(),
                }),
                fallback,
                roots: Roots::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the config's host timeouts (its roots go to [`Broker::roots`]).
    pub(crate) fn set_config(&self, cfg: &HostConfig) {
        self.lock().timeouts = cfg.host_timeouts;
    }

    /// Which roots each server sees.
    pub(crate) fn roots(&self) -> &Roots {
        &self.inner.roots
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
            let configured = self.inner.roots.configured(&r.server);
            return with_roots(&answer, &configured).map_err(PeerError::Rpc);
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
        if r.method == methods::ROOTS_LIST {
            // Answered from the asking server's roots source, not routed to
            // whoever's call was in flight.
            return Box::pin(async move {
                let ask = |id: u64, origin: Option<&Origin>| {
                    let s = broker.session(id)?;
                    if !s.can_answer(methods::ROOTS_LIST, None, origin) {
                        return None;
                    }
                    let name = s.name().to_owned();
                    let asked = broker.ask(&s, origin, &r);
                    Some(async move {
                        let answer = match asked {
                            Ok(asked) => asked.await,
                            Err(e) => Err(e),
                        };
                        answer.map_err(|e| Broker::host_failed(&name, methods::ROOTS_LIST, e))
                    })
                };
                broker.inner.roots.answer(&r, ask).await
            });
        }
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
            let configured = self.inner.roots.configured(&r.server);
            return encode(serde_json::json!({ "roots": configured }));
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
