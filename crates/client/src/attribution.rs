//! Which call a server's request belongs to, when the wire does not say.
//!
//! A handshake-era server on stdio (or the legacy HTTP+SSE stream) sends its
//! `sampling/createMessage` and `elicitation/create` on the one channel it
//! has, tied to no call. mcphost never guesses across hosts: once such a
//! server has asked, calls of one session at a time are let through
//! ([`Turns`]), so whatever it asks belongs to the only session with calls in
//! flight. A server that never asks is never held back. A server seen asking
//! while no call was in flight (background work, or a request after its call
//! ended, which SEP-2260 forbids) could ask during the next session's turn
//! as well: its requests go to nobody's host from then on (the fallback).

use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::stats::{Series, Summary};

/// What mcphost has learnt about each server, by config name: kept across
/// its restarts, shared by its instances.
#[derive(Default)]
pub struct Attribution {
    servers: Mutex<HashMap<String, Arc<Learned>>>,
}

impl Attribution {
    pub fn new() -> Arc<Attribution> {
        Arc::new(Attribution::default())
    }

    /// `server`'s record, made on first use.
    pub fn server(&self, server: &str) -> Arc<Learned> {
        let mut m = self.servers.lock();
        m.entry(server.to_owned()).or_default().clone()
    }

    /// What `servers` shows, `None` for a server never started.
    pub fn summary(&self, server: &str) -> Option<LearnedSummary> {
        let m = self.servers.lock();
        m.get(server).map(|l| l.summary())
    }

    /// A server's config changed or it was removed: learn it anew.
    pub fn forget(&self, server: &str) {
        let mut m = self.servers.lock();
        m.remove(server);
    }
}

/// One server's record.
#[derive(Default)]
pub struct Learned {
    /// It sent sampling or elicitation on a channel that cannot say whose
    /// call it was for: its calls are taken one session at a time.
    asked: AtomicBool,
    /// It asked with no call in flight: its requests go to the fallback.
    outside: AtomicBool,
    /// Requests answered by the fallback because they could not be
    /// attributed (several sessions' calls in flight, or `outside`).
    unattributed: AtomicU64,
    /// How long calls waited for their session's turn.
    queue: Mutex<Option<Series>>,
}

/// A server's attribution, as `mcphost servers --json` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LearnedSummary {
    /// It has asked its host something on an unattributed channel.
    pub asked: bool,
    /// It asked with no call in flight.
    pub asks_outside_calls: bool,
    /// Requests that went to the fallback for want of attribution.
    pub unattributed: u64,
    /// Time calls waited for their session's turn (`None`: none waited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<Summary>,
}

impl Learned {
    fn queue(&self) -> MutexGuard<'_, Option<Series>> {
        self.queue.lock()
    }

    /// Calls are taken one session at a time.
    pub fn scheduled(&self) -> bool {
        self.asked.load(Ordering::Relaxed)
    }

    pub fn asks_outside_calls(&self) -> bool {
        self.outside.load(Ordering::Relaxed)
    }

    /// It asked on a channel that does not attribute. `idle`: no call of
    /// any session was in flight. True when this is news.
    pub fn saw_request(&self, server: &str, idle: bool) -> bool {
        let mut news = !self.asked.swap(true, Ordering::Relaxed);
        if news {
            info!(
                server,
                "the server asks its host on a channel that does not say for which call: \
                 from now on its calls are taken one session at a time"
            );
        }
        if idle && !self.outside.swap(true, Ordering::Relaxed) {
            warn!(
                server,
                "the server asked while none of its calls was in flight: it cannot be told \
                 whose request it is, so its requests go to the fallback from now on \
                 (give it \"share\": \"per-session\" to let it ask each host)"
            );
            news = true;
        }
        news
    }

    pub fn count_unattributed(&self) {
        self.unattributed.fetch_add(1, Ordering::Relaxed);
    }

    fn record_wait(&self, waited: Duration) {
        let mut q = self.queue();
        if q.is_none() {
            *q = Series::new();
        }
        if let Some(s) = q.as_mut() {
            s.record(waited, false);
        }
    }

    pub fn summary(&self) -> LearnedSummary {
        LearnedSummary {
            asked: self.scheduled(),
            asks_outside_calls: self.asks_outside_calls(),
            unattributed: self.unattributed.load(Ordering::Relaxed),
            queue: self.queue().as_ref().map(Series::summary),
        }
    }
}

/// One server connection's turns: which sessions have calls in flight, and
/// who waits. Every call with an origin is counted; calls wait only while
/// the server is [`Learned::scheduled`].
pub(crate) struct Turns {
    learned: Arc<Learned>,
    /// The server was offered sampling or elicitation, on a channel that
    /// cannot attribute them: only then may calls have to wait.
    applies: bool,
    state: Mutex<TurnState>,
}

#[derive(Default)]
struct TurnState {
    /// Calls in flight per session.
    running: HashMap<u64, usize>,
    /// Calls waiting for their session's turn, first come first.
    waiting: VecDeque<Waiter>,
    next_ticket: u64,
}

struct Waiter {
    session: u64,
    ticket: u64,
    tx: oneshot::Sender<Turn>,
}

/// A call's place among those in flight; dropping it ends the call's share
/// of its session's turn.
pub(crate) struct Turn {
    turns: Arc<Turns>,
    session: u64,
}

/// A call waited longer than it may for its turn.
#[derive(Debug)]
pub(crate) struct TurnTimeout {
    pub(crate) waited: Duration,
    pub(crate) busy_with: usize,
}

impl Turns {
    pub(crate) fn new(learned: Arc<Learned>, applies: bool) -> Arc<Turns> {
        Arc::new(Turns {
            learned,
            applies,
            state: Mutex::new(TurnState::default()),
        })
    }

    pub(crate) fn learned(&self) -> &Arc<Learned> {
        &self.learned
    }

    fn lock(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock()
    }

    /// Whether calls of one session at a time are let through now.
    pub(crate) fn scheduling(&self) -> bool {
        self.applies && self.learned.scheduled()
    }

    /// Take a place for a call of `session`, waiting up to `limit` for the
    /// session's turn while another session's calls are in flight (or wait
    /// before it).
    pub(crate) async fn enter(
        self: &Arc<Self>,
        session: u64,
        limit: Duration,
    ) -> Result<Turn, TurnTimeout> {
        let (rx, ticket) = {
            let mut st = self.lock();
            // A session with calls in flight keeps its turn for new ones:
            // a host may call the server again while answering it, and
            // making that call wait behind another session would deadlock.
            let others_running = st.running.keys().any(|s| *s != session);
            if !self.scheduling() || !others_running {
                let n = st.running.entry(session).or_insert(0);
                *n = n.saturating_add(1);
                return Ok(Turn {
                    turns: self.clone(),
                    session,
                });
            }
            let (tx, rx) = oneshot::channel();
            let ticket = st.next_ticket;
            st.next_ticket = st.next_ticket.wrapping_add(1);
            st.waiting.push_back(Waiter {
                session,
                ticket,
                tx,
            });
            info!(
                session,
                "another session's calls are in flight: waiting for this session's turn"
            );
            (rx, ticket)
        };
        let started = Instant::now();
        let outcome = tokio::time::timeout(limit, rx).await;
        let waited = started.elapsed();
        match outcome {
            Ok(Ok(turn)) => {
                self.learned.record_wait(waited);
                Ok(turn)
            }
            // Timed out (or, never, the sender went): leave the queue. A
            // turn handed over meanwhile comes back through its drop.
            _ => {
                let mut st = self.lock();
                st.waiting.retain(|w| w.ticket != ticket);
                let busy_with = st.running.values().sum();
                drop(st);
                self.learned.record_wait(waited);
                Err(TurnTimeout { waited, busy_with })
            }
        }
    }

    /// One call of `session` ended: when its session has none left, the
    /// next waiting session gets its turn, with all its waiting calls.
    fn leave(self: &Arc<Self>, session: u64) {
        let mut handed = Vec::new();
        let next = {
            let mut st = self.lock();
            let left = match st.running.get_mut(&session) {
                Some(n) => {
                    *n = n.saturating_sub(1);
                    *n
                }
                None => 0,
            };
            if left == 0 {
                st.running.remove(&session);
            }
            if !st.running.is_empty() {
                return;
            }
            let Some(next) = st.waiting.front().map(|w| w.session) else {
                return;
            };
            let (theirs, rest): (VecDeque<Waiter>, VecDeque<Waiter>) =
                st.waiting.drain(..).partition(|w| w.session == next);
            st.waiting = rest;
            for w in theirs {
                let n = st.running.entry(next).or_insert(0);
                *n = n.saturating_add(1);
                handed.push(w.tx);
            }
            next
        };
        // Outside the lock: a turn that cannot be delivered (its caller
        // gave up) is dropped here, which leaves again.
        for tx in handed {
            let _ = tx.send(Turn {
                turns: self.clone(),
                session: next,
            });
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.turns.clone().leave(self.session);
    }
}
