//! [`Feed`]: a bounded fan-out whose queues allocate as they fill.
//!
//! The receiving side behaves as `tokio::sync::broadcast`'s: each receiver
//! sees every value sent after it subscribed, and one that falls more than
//! `capacity` behind loses the oldest and is told how many with
//! `Lagged(n)` before the next value it still has. The difference is the
//! cost of an idle feed: a broadcast channel allocates all its slots up
//! front (32 KiB for 1,024), paid by every idle server of a daemon; here
//! each receiver's queue grows only while values wait, and is given back
//! once drained.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

pub use tokio::sync::broadcast::error::{RecvError, TryRecvError};

/// A drained queue keeps at most this many slots allocated.
const KEEP_SLOTS: usize = 8;

/// The sending side; dropping it ends every receiver (`Closed` once each
/// has taken what is queued).
pub struct Feed<T> {
    capacity: usize,
    /// `None` once closed.
    receivers: Mutex<Option<Vec<Weak<Queue<T>>>>>,
}

/// One receiver of a [`Feed`].
pub struct FeedReceiver<T> {
    queue: Arc<Queue<T>>,
}

struct Queue<T> {
    capacity: usize,
    state: Mutex<State<T>>,
    wake: Notify,
    /// Called on every arrival and on the close, so a consumer needs no
    /// task waiting while nothing comes (see [`FeedReceiver::on_arrival`]).
    on_arrival: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

struct State<T> {
    values: VecDeque<T>,
    /// Values dropped (the oldest) since the receiver last heard of it.
    lagged: u64,
    closed: bool,
}

impl<T: Clone> Feed<T> {
    /// A feed whose receivers may fall `capacity` values behind (at least 1).
    pub fn new(capacity: usize) -> Feed<T> {
        Feed {
            capacity: capacity.max(1),
            receivers: Mutex::new(Some(Vec::new())),
        }
    }

    /// Queue `value` for every receiver; never waits. Returns how many
    /// receivers it was queued for.
    pub fn send(&self, value: T) -> usize {
        let mut receivers = self.receivers.lock();
        let Some(receivers) = receivers.as_mut() else {
            return 0;
        };
        let mut sent = 0;
        receivers.retain(|r| {
            let Some(q) = r.upgrade() else {
                return false;
            };
            q.push(value.clone());
            sent += 1;
            true
        });
        sent
    }

    pub fn subscribe(&self) -> FeedReceiver<T> {
        let queue = Arc::new(Queue {
            capacity: self.capacity,
            state: Mutex::new(State {
                values: VecDeque::new(),
                lagged: 0,
                closed: false,
            }),
            wake: Notify::new(),
            on_arrival: OnceLock::new(),
        });
        match self.receivers.lock().as_mut() {
            Some(receivers) => receivers.push(Arc::downgrade(&queue)),
            None => queue.state.lock().closed = true,
        }
        FeedReceiver { queue }
    }

    /// Receivers still alive.
    pub fn receiver_count(&self) -> usize {
        let mut receivers = self.receivers.lock();
        let Some(receivers) = receivers.as_mut() else {
            return 0;
        };
        receivers.retain(|r| r.strong_count() > 0);
        receivers.len()
    }
}

impl<T> Feed<T> {
    /// End every receiver (each gets `Closed` once it has taken what is
    /// queued); later values go nowhere.
    pub fn close(&self) {
        let receivers = self.receivers.lock().take().unwrap_or_default();
        for q in receivers.iter().filter_map(Weak::upgrade) {
            q.state.lock().closed = true;
            q.woken();
        }
    }
}

impl<T> Drop for Feed<T> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<T> Queue<T> {
    fn push(&self, value: T) {
        {
            let mut st = self.state.lock();
            if st.values.len() >= self.capacity {
                st.values.pop_front();
                st.lagged = st.lagged.saturating_add(1);
            }
            st.values.push_back(value);
        }
        self.woken();
    }

    fn woken(&self) {
        self.wake.notify_one();
        if let Some(f) = self.on_arrival.get() {
            f();
        }
    }
}

impl<T> FeedReceiver<T> {
    /// The next value, `Lagged(n)` if `n` were lost before it, or `Closed`
    /// once the feed is gone and everything queued was taken.
    pub async fn recv(&mut self) -> Result<T, RecvError> {
        loop {
            match self.try_recv() {
                Ok(v) => return Ok(v),
                Err(TryRecvError::Lagged(n)) => return Err(RecvError::Lagged(n)),
                Err(TryRecvError::Closed) => return Err(RecvError::Closed),
                // One receiver per queue: a wake-up sent before this wait
                // began is kept as a permit, so none is missed.
                Err(TryRecvError::Empty) => self.queue.wake.notified().await,
            }
        }
    }

    /// As [`FeedReceiver::recv`], without waiting.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let mut st = self.queue.state.lock();
        if st.lagged > 0 {
            return Err(TryRecvError::Lagged(std::mem::take(&mut st.lagged)));
        }
        match st.values.pop_front() {
            Some(v) => {
                if st.values.is_empty() && st.values.capacity() > KEEP_SLOTS {
                    st.values.shrink_to(KEEP_SLOTS);
                }
                Ok(v)
            }
            None if st.closed => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Call `f` whenever a value arrives or the feed closes (once set, for
    /// as long as this receiver lives): a consumer that is not always
    /// waiting starts its work from there. `f` runs on the sender's
    /// thread, inside [`Feed::send`], so it must be short and must not use
    /// the feed. Set once; a second call is ignored.
    pub fn on_arrival(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.queue.on_arrival.set(Box::new(f));
    }

    /// Whether [`FeedReceiver::try_recv`] has something to say: a value, a
    /// lag, or the close.
    pub fn ready(&self) -> bool {
        let st = self.queue.state.lock();
        !st.values.is_empty() || st.lagged > 0 || st.closed
    }

    /// Values sent since this receiver last took one: those waiting and
    /// those lost to a lag not yet reported (as a broadcast receiver counts).
    pub fn len(&self) -> usize {
        let st = self.queue.state.lock();
        let lagged = usize::try_from(st.lagged).unwrap_or(usize::MAX);
        st.values.len().saturating_add(lagged)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_receiver_that_falls_behind_loses_the_oldest_and_is_told() {
        let feed = Feed::new(3);
        let mut rx = feed.subscribe();
        for i in 0..10 {
            assert_eq!(feed.send(i), 1);
        }
        assert_eq!(rx.recv().await, Err(RecvError::Lagged(7)));
        assert_eq!(rx.recv().await, Ok(7));
        assert_eq!(rx.recv().await, Ok(8));
        assert_eq!(rx.recv().await, Ok(9));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        drop(feed);
        assert_eq!(rx.recv().await, Err(RecvError::Closed));
    }

    #[tokio::test]
    async fn each_receiver_sees_what_came_after_it_subscribed() {
        let feed = Feed::new(8);
        let mut a = feed.subscribe();
        feed.send("one");
        let mut b = feed.subscribe();
        feed.send("two");
        drop(feed);
        assert_eq!(a.recv().await, Ok("one"));
        assert_eq!(a.recv().await, Ok("two"));
        assert_eq!(b.recv().await, Ok("two"));
        assert_eq!(a.recv().await, Err(RecvError::Closed));
        assert_eq!(b.recv().await, Err(RecvError::Closed));
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_and_a_dropped_one_is_forgotten() {
        let feed = Arc::new(Feed::new(4));
        let mut rx = feed.subscribe();
        let gone = feed.subscribe();
        drop(gone);
        assert_eq!(feed.receiver_count(), 1);
        let sender = feed.clone();
        let got = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        assert_eq!(sender.send(5), 1);
        assert_eq!(got.await.unwrap(), Ok(5));
    }

    #[test]
    fn arrivals_and_the_close_call_the_consumer_back() {
        let feed = Feed::new(4);
        let rx = feed.subscribe();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        rx.on_arrival(move || {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        assert!(!rx.ready());
        feed.send(1);
        feed.send(2);
        assert!(rx.ready());
        feed.close();
        assert_eq!(feed.send(3), 0, "a closed feed has no receivers");
        let mut late = feed.subscribe();
        assert_eq!(late.try_recv(), Err(TryRecvError::Closed));
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[test]
    fn an_idle_or_drained_queue_holds_no_slots() {
        let feed = Feed::new(1024);
        let mut rx = feed.subscribe();
        assert_eq!(rx.queue.state.lock().values.capacity(), 0);
        for i in 0..1000 {
            feed.send(i);
        }
        while rx.try_recv().is_ok() {}
        assert!(rx.queue.state.lock().values.capacity() <= KEEP_SLOTS);
    }
}
