//! The broker: the one [`Host`] of every server client. It sends each
//! server→client request (sampling, elicitation, roots) to the session whose
//! call caused it, as far as that is proven (see [`mcphost_client::attribution`]);
//! a request no call caused to the registered primary host; everything
//! else, and what the session that caused it cannot answer, to the
//! configured fallback. It never guesses across hosts.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::value::RawValue;
use tracing::{info, warn};

use super::roots::{Roots, with_roots};
use super::session::Session;
use mcphost_client::{ElicitationPolicy, Host, HostRequest, PolicyHost};
use mcphost_config::{HostConfig, HostTimeouts};
use mcphost_jsonrpc::{Origin, PeerError, Relation};
use mcphost_protocol::capabilities::{ElicitationCap, Empty, RootsCap, SamplingCap};
use mcphost_protocol::{
    ClientCapabilities, ErrorObject, error_codes, methods, raw_field, set_meta, to_raw,
};
use mcphost_transport::BoxFuture;

/// The `_meta` member that names the asking server in a forwarded request
/// (and in forwarded log and elicitation notifications).
pub const META_SERVER: &str = "dev.mcphost/server";

/// `params` with the asking server named in its `_meta`.
pub(crate) fn named(
    params: Option<&RawValue>,
    server: &str,
) -> Result<Box<RawValue>, mcphost_protocol::RawError> {
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

/// Server→host requests one host may have outstanding at once; more wait
/// (within the host timeout) for one to be answered, so no server can open
/// hundreds of dialogs in an app.
pub const MAX_HOST_REQUESTS: usize = 16;

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
    /// Where each request and its answer's kind are recorded.
    audit: crate::audit::AuditLog,
}

/// Cloneable; the registry's clients hold it as their host.
#[derive(Clone)]
pub(crate) struct Broker {
    inner: Arc<Inner>,
}

/// Where one request goes: the session to ask, with the call it is asked
/// for (none for the primary host), or the fallback and why.
enum Route {
    Ask(Arc<Session>, Option<Origin>),
    Fallback(&'static str),
}

impl Broker {
    pub(crate) fn new(fallback: PolicyHost, audit: crate::audit::AuditLog) -> Broker {
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
                audit,
            }),
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.inner.state.lock()
    }

    /// Take the config's host timeouts (its roots go to [`Broker::roots`]).
    pub(crate) fn set_config(&self, cfg: &HostConfig) {
        self.lock().timeouts = cfg.host_timeouts;
    }

    /// The audit log.
    pub(crate) fn audit(&self) -> &crate::audit::AuditLog {
        &self.inner.audit
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

    /// Where `r` goes: the session whose call caused it if it declared
    /// what `r` needs (a stateless client: on the request of that call);
    /// a request no call caused to the primary host; anything else to the
    /// fallback, never to another session.
    fn route(&self, r: &HostRequest, mode: Option<&str>) -> Route {
        match &r.relation {
            Relation::Caused(o) => match self.session(o.session) {
                Some(s) if s.can_answer(&r.method, mode, Some(o)) => Route::Ask(s, Some(o.clone())),
                Some(_) => {
                    Route::Fallback("the host whose call caused it did not declare it answers this")
                }
                None => Route::Fallback("the host whose call caused it is gone"),
            },
            Relation::Unrelated => match self.primary().and_then(|id| self.session(id)) {
                Some(p) if p.can_answer(&r.method, mode, None) => Route::Ask(p, None),
                _ => Route::Fallback(
                    "no call caused it and no primary host that answers it is registered",
                ),
            },
            Relation::Ambiguous(_) => Route::Fallback(
                "calls of several hosts were in flight, so it cannot be told whose it is",
            ),
        }
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
        timeout: Duration,
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
    /// What a call of `origin` may be asked (a stateless server is told it
    /// per request): the caller's own capabilities, plus what the fallback
    /// answers in its place, as a handshake-era server is offered it. So a
    /// caller without a capability gets the fallback's answer whatever the
    /// server's era, not an error from one era and a decline from the
    /// other.
    fn capabilities_for(&self, origin: Option<&mcphost_jsonrpc::Origin>) -> ClientCapabilities {
        let Some((s, o)) = origin.and_then(|o| self.session(o.session).map(|s| (s, o))) else {
            return self.capabilities();
        };
        let mut caps = s.client_capabilities(o);
        let fallback = self.inner.fallback.capabilities();
        if caps.sampling.is_none() {
            caps.sampling = fallback.sampling;
        }
        match (&mut caps.elicitation, fallback.elicitation) {
            (None, f) => caps.elicitation = f,
            (Some(own), Some(f)) if own.form.is_none() && own.url.is_some() => own.form = f.form,
            _ => {}
        }
        // The fallback answers roots/list with the configured roots.
        if caps.roots.is_none() {
            caps.roots = Some(RootsCap {
                list_changed: false,
            });
        }
        caps
    }

    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        let broker = self.clone();
        if r.method == methods::ROOTS_LIST {
            // Answered from the asking server's roots source, not routed to
            // whoever's call was in flight.
            return Box::pin(async move {
                let started = std::time::Instant::now();
                // Which host was asked, if any was (the audit line).
                let asked_host = Mutex::new(None);
                let ask = |id: u64, origin: Option<&Origin>| {
                    let s = broker.session(id)?;
                    if !s.can_answer(methods::ROOTS_LIST, None, origin) {
                        return None;
                    }
                    *asked_host.lock() = Some(s.caller());
                    let name = s.name().to_owned();
                    let asked = broker.ask(&s, origin, &r, broker.timeout_for(methods::ROOTS_LIST));
                    Some(async move {
                        let answer = match asked {
                            Ok(asked) => asked.await,
                            Err(e) => Err(e),
                        };
                        answer.map_err(|e| Broker::host_failed(&name, methods::ROOTS_LIST, e))
                    })
                };
                let answer = broker.inner.roots.answer(&r, ask).await;
                let host = asked_host.lock().take();
                broker.audit_answer(&r, host.as_ref(), &answer, false, started);
                answer
            });
        }
        Box::pin(async move {
            let started = std::time::Instant::now();
            let (host, answer, timed_out) = broker.routed(&r).await;
            broker.audit_answer(&r, host.as_ref(), &answer, timed_out, started);
            answer
        })
    }
}

impl Broker {
    /// A sampling or elicitation request, asked of the host it routes to
    /// (or answered by the fallback): the answer, which host was asked,
    /// and whether it ran out of time.
    async fn routed(
        &self,
        r: &HostRequest,
    ) -> (
        Option<crate::audit::Caller>,
        Result<Box<RawValue>, ErrorObject>,
        bool,
    ) {
        // An elicitation's mode decides who can answer it.
        let mode: Option<String> = r
            .params
            .as_deref()
            .and_then(|p| raw_field::<String>(p, "mode").ok().flatten());
        let (session, origin) = match self.route(r, mode.as_deref()) {
            Route::Ask(s, o) => (s, o),
            Route::Fallback(why) => {
                info!(server = %r.server, method = %r.method, "answered by the fallback: {why}");
                return (None, self.fallback(r, mode.as_deref()), false);
            }
        };
        let caller = session.caller();
        let name = session.name().to_owned();
        let timeout = self.timeout_for(&r.method);
        // Held weakly while the answer is awaited (see `ask`).
        let permits = session.host_requests();
        let weak = Arc::downgrade(&session);
        drop(session);
        let started = tokio::time::Instant::now();
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => Ok(Ok(p)),
            Err(_) => {
                info!(
                    server = %r.server,
                    method = %r.method,
                    host = %name,
                    "the host has {MAX_HOST_REQUESTS} requests of servers outstanding: this one waits for one of them to be answered"
                );
                tokio::time::timeout(timeout, permits.acquire_owned()).await
            }
        };
        let permit = match permit {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => {
                return (
                    Some(caller),
                    Err(Broker::host_failed(&name, &r.method, gone())),
                    false,
                );
            }
            Err(_) => {
                let e = ErrorObject::new(
                    error_codes::INTERNAL_ERROR,
                    format!(
                        "the host ({name}) still had {MAX_HOST_REQUESTS} requests of servers to answer after {timeout:.0?}, so {} was not shown to it",
                        r.method
                    ),
                );
                return (Some(caller), Err(e), true);
            }
        };
        let Some(session) = weak.upgrade() else {
            return (
                Some(caller),
                Err(Broker::host_failed(&name, &r.method, gone())),
                false,
            );
        };
        let left = timeout.saturating_sub(started.elapsed());
        let asked = self.ask(&session, origin.as_ref(), r, left);
        drop(session);
        let outcome = match asked {
            Ok(asked) => self.forward(asked, r).await,
            Err(e) => Err(e),
        };
        drop(permit);
        let timed_out = matches!(outcome, Err(PeerError::Timeout { .. }));
        // A timeout is the host's whole timeout, whatever part of it
        // went to waiting for a place among its requests.
        let answer = outcome.map_err(|e| {
            let e = match e {
                PeerError::Timeout { method, .. } => PeerError::Timeout {
                    method,
                    elapsed: timeout,
                },
                e => e,
            };
            Broker::host_failed(&name, &r.method, e)
        });
        (Some(caller), answer, timed_out)
    }

    /// The audit line of a server's request: who was asked and what kind
    /// of answer it gave, never the content.
    fn audit_answer(
        &self,
        r: &HostRequest,
        host: Option<&crate::audit::Caller>,
        answer: &Result<Box<RawValue>, ErrorObject>,
        timed_out: bool,
        started: std::time::Instant,
    ) {
        use crate::audit::Answer;
        if self.inner.audit.mode() == mcphost_config::audit::Mode::Off {
            return;
        }
        let kind = match answer {
            Ok(result) => Answer::of_result(&r.method, result),
            Err(_) if timed_out => Answer::Timeout,
            Err(_) => Answer::Error,
        };
        self.inner.audit.record(crate::audit::Record::Request {
            method: r.method.clone(),
            server: r.server.clone(),
            host: host.cloned(),
            answer: kind,
            took: started.elapsed(),
        });
    }
}

fn gone() -> PeerError {
    PeerError::Closed(Arc::new(mcphost_transport::CloseReason::new(
        "the session ended",
    )))
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
