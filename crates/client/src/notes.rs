//! The server's notifications in the order they arrived, and which calls
//! were in flight when each arrived: a log message the server sends while a
//! session's call is in flight is that session's (see
//! [`LogMessage::callers`]).
//!
//! The peer puts every notification on a feed before it reads
//! the next message, so a notification that came before a call's response
//! is on the channel before the call can return. Counting the channel's
//! messages gives each notification a position; a call records the position
//! when it starts and when it ends, and stays in the ledger until the
//! notification task has taken every message up to its end. So a log sent
//! during a call is never missed because the call's answer was faster than
//! the notification task; at worst, a log read in the moment between the
//! call's response and the call's end is counted as the call's too.

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;

use mcphost_transport::feed::{FeedReceiver, TryRecvError};
use serde_json::value::RawValue;

use mcphost_protocol::{Notification, methods};

/// A server's `notifications/message`: its params untouched, and the
/// sessions that had a call in flight to the server when it arrived.
#[derive(Debug, Clone)]
pub struct LogMessage {
    pub params: Box<RawValue>,
    /// Session ids ([`Origin::session`](mcphost_jsonrpc::Origin)) with a call
    /// in flight when the message arrived, each once.
    pub callers: Arc<[u64]>,
}

impl std::ops::Deref for LogMessage {
    type Target = RawValue;

    fn deref(&self) -> &RawValue {
        &self.params
    }
}

/// One call in the ledger.
struct Call {
    key: u64,
    session: u64,
    /// Notifications at positions after this one arrived during the call.
    after: u64,
    /// Set when the call ended: notifications up to this position arrived
    /// before it ended.
    until: Option<u64>,
}

struct Queue {
    rx: FeedReceiver<Arc<Notification>>,
    /// Messages taken from `rx`, or lost to a lag: the position of the last
    /// one taken.
    taken: u64,
    next_key: u64,
    calls: Vec<Call>,
}

impl Queue {
    /// The position of the last message sent to `rx` so far.
    fn position(&self) -> u64 {
        self.taken.saturating_add(self.rx.len() as u64)
    }

    /// Calls whose every notification has been taken leave the ledger.
    fn purge(&mut self) {
        let taken = self.taken;
        self.calls.retain(|c| c.until.is_none_or(|u| u > taken));
    }
}

/// What [`Notes::next`] found.
pub(super) enum Next {
    /// A notification; for a log message, the sessions it belongs to.
    Note(Arc<Notification>, Option<Arc<[u64]>>),
    /// This many were lost (the queue overflowed).
    Lagged(u64),
    Empty,
    Closed,
}

/// The notification queue of one server connection and its call ledger.
pub(super) struct Notes(Mutex<Queue>);

impl Notes {
    pub(super) fn new(rx: FeedReceiver<Arc<Notification>>) -> Notes {
        Notes(Mutex::new(Queue {
            rx,
            taken: 0,
            next_key: 0,
            calls: Vec::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.0.lock()
    }

    /// Call `f` when a notification or the close arrives (see
    /// [`FeedReceiver::on_arrival`]).
    pub(super) fn on_arrival(&self, f: impl Fn() + Send + Sync + 'static) {
        self.lock().rx.on_arrival(f);
    }

    /// Whether [`Notes::next`] has something other than `Empty`.
    pub(super) fn ready(&self) -> bool {
        self.lock().rx.ready()
    }

    /// Take the next notification, without waiting.
    pub(super) fn next(&self) -> Next {
        let mut q = self.lock();
        let next = match q.rx.try_recv() {
            Ok(n) => {
                q.taken = q.taken.saturating_add(1);
                let at = q.taken;
                let callers = (n.method == methods::NOTIFICATION_MESSAGE).then(|| {
                    let mut sessions: Vec<u64> = Vec::new();
                    for c in &q.calls {
                        let during = c.after < at && c.until.is_none_or(|u| at <= u);
                        if during && !sessions.contains(&c.session) {
                            sessions.push(c.session);
                        }
                    }
                    Arc::from(sessions)
                });
                Next::Note(n, callers)
            }
            Err(TryRecvError::Lagged(k)) => {
                q.taken = q.taken.saturating_add(k);
                Next::Lagged(k)
            }
            Err(TryRecvError::Empty) => Next::Empty,
            Err(TryRecvError::Closed) => Next::Closed,
        };
        q.purge();
        next
    }

    /// A call of `session` starts; it is in the ledger until the returned
    /// mark is dropped and every notification before that has been taken.
    pub(crate) fn call(&self, session: u64) -> CallMark<'_> {
        let mut q = self.lock();
        let key = q.next_key;
        q.next_key = q.next_key.wrapping_add(1);
        let after = q.position();
        q.calls.push(Call {
            key,
            session,
            after,
            until: None,
        });
        CallMark { notes: self, key }
    }
}

/// A call in flight (see [`Notes::call`]); dropping it ends the call,
/// answered or not.
pub struct CallMark<'a> {
    notes: &'a Notes,
    key: u64,
}

impl Drop for CallMark<'_> {
    fn drop(&mut self) {
        let mut q = self.notes.lock();
        let until = q.position();
        if let Some(c) = q.calls.iter_mut().find(|c| c.key == self.key) {
            c.until = Some(until);
        }
        q.purge();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(method: &str) -> Arc<Notification> {
        Arc::new(Notification {
            method: method.to_owned(),
            params: Some(RawValue::from_string("{}".to_owned()).unwrap()),
        })
    }

    fn callers(n: Next) -> Vec<u64> {
        match n {
            Next::Note(_, Some(c)) => c.to_vec(),
            _ => panic!("not a log message"),
        }
    }

    #[test]
    fn a_log_before_the_answer_is_the_callers_even_when_the_call_ended_first() {
        let tx = mcphost_transport::feed::Feed::new(16);
        let notes = Notes::new(tx.subscribe());
        assert_eq!(tx.send(note(methods::NOTIFICATION_MESSAGE)), 1);
        // Sent before the call started: nobody's.
        let a = notes.call(1);
        let b = notes.call(2);
        assert_eq!(tx.send(note(methods::NOTIFICATION_MESSAGE)), 1);
        // Both calls end (their answers came) before the task took the log.
        drop(a);
        assert_eq!(tx.send(note(methods::NOTIFICATION_MESSAGE)), 1);
        drop(b);
        assert_eq!(tx.send(note(methods::NOTIFICATION_MESSAGE)), 1);
        assert!(callers(notes.next()).is_empty());
        assert_eq!(callers(notes.next()), [1, 2]);
        assert_eq!(callers(notes.next()), [2]);
        assert!(callers(notes.next()).is_empty());
        assert!(matches!(notes.next(), Next::Empty));
        assert!(notes.lock().calls.is_empty(), "ended calls stayed");
    }

    #[test]
    fn two_calls_of_one_session_name_it_once_and_a_lag_forgets_ended_calls() {
        let tx = mcphost_transport::feed::Feed::new(2);
        let notes = Notes::new(tx.subscribe());
        let a = notes.call(7);
        let b = notes.call(7);
        assert_eq!(tx.send(note(methods::NOTIFICATION_MESSAGE)), 1);
        assert_eq!(callers(notes.next()), [7]);
        drop(a);
        drop(b);
        assert!(notes.lock().calls.is_empty());
        let c = notes.call(8);
        for _ in 0..5 {
            tx.send(note(methods::NOTIFICATION_TOOLS_LIST_CHANGED));
        }
        drop(c);
        assert!(matches!(notes.next(), Next::Lagged(3)));
        assert!(matches!(notes.next(), Next::Note(_, None)));
        assert!(matches!(notes.next(), Next::Note(_, None)));
        assert!(notes.lock().calls.is_empty());
    }
}
