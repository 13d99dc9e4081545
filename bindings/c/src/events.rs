//! Events for the host: to its callback, or queued for `mcphost_next_event`
//! with a descriptor that is readable while the queue is not empty.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcphost_core::protocol::RawValue;
use serde::Serialize;

use crate::callbacks::{CallbackThread, Registered, mcphost_event_callback};
use crate::status::Error;

/// Events kept for a host that polls; past this the oldest are dropped and
/// a `notifications/mcphost/events_dropped` event says how many.
const QUEUE_LIMIT: usize = 4096;

/// An event as the host sees it: a JSON-RPC notification, params untouched.
pub(crate) fn notification(method: &str, params: Option<&RawValue>) -> String {
    #[derive(Serialize)]
    struct Note<'a> {
        jsonrpc: &'static str,
        method: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        params: Option<&'a RawValue>,
    }
    serde_json::to_string(&Note {
        jsonrpc: "2.0",
        method,
        params,
    })
    .unwrap_or_default()
}

#[derive(Default)]
struct Queue {
    items: VecDeque<String>,
    dropped: u64,
    /// The pipe behind `mcphost_event_fd`, made on first use.
    pipe: Option<(OwnedFd, OwnedFd)>,
    closed: bool,
}

pub(crate) struct Events {
    callback: Option<Arc<Registered<mcphost_event_callback>>>,
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Events {
    pub(crate) fn new(callback: Option<Arc<Registered<mcphost_event_callback>>>) -> Events {
        Events {
            callback,
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Queue> {
        self.queue.lock()
    }

    pub(crate) fn push(&self, thread: &CallbackThread, event: String) {
        if let Some(cb) = &self.callback {
            let cb = cb.clone();
            let Ok(json) = CString::new(event) else {
                return;
            };
            thread.post(move || {
                if let Some(f) = cb.f {
                    // SAFETY: the host's callback and user_data; the string
                    // is borrowed for the call.
                    unsafe { f(cb.user_data(), json.as_ptr()) }
                }
            });
            return;
        }
        let mut q = self.lock();
        if q.closed {
            return;
        }
        // The pipe holds a byte exactly while something waits.
        let had = !q.items.is_empty() || q.dropped > 0;
        if q.items.len() >= QUEUE_LIMIT {
            q.items.pop_front();
            q.dropped = q.dropped.saturating_add(1);
        }
        q.items.push_back(event);
        if !had && let Some((_, w)) = &q.pipe {
            signal(w.as_raw_fd());
        }
        drop(q);
        self.ready.notify_one();
    }

    /// The next event, waiting up to `timeout` (`None`: forever).
    pub(crate) fn next(&self, timeout: Option<Duration>) -> Result<String, Error> {
        if self.callback.is_some() {
            return Err(Error::Unsupported(
                "this handle delivers events to its event callback; mcphost_next_event \
                 works on handles opened without one"
                    .into(),
            ));
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut q = self.lock();
        loop {
            if q.dropped > 0 {
                let n = std::mem::take(&mut q.dropped);
                let params = serde_json::json!({ "count": n }).to_string();
                let params = RawValue::from_string(params).ok();
                Self::drained(&mut q);
                return Ok(notification(
                    "notifications/mcphost/events_dropped",
                    params.as_deref(),
                ));
            }
            if let Some(e) = q.items.pop_front() {
                Self::drained(&mut q);
                return Ok(e);
            }
            if q.closed {
                return Err(Error::Closed("the handle is being freed".into()));
            }
            let wait = match deadline {
                None => Duration::from_secs(3600),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::Timeout("no event within the timeout".into()));
                    }
                    left
                }
            };
            self.ready.wait_for(&mut q, wait);
        }
    }

    /// Empty the pipe once the queue is empty, so the fd is readable
    /// exactly while events wait.
    fn drained(q: &mut Queue) {
        if q.items.is_empty()
            && q.dropped == 0
            && let Some((r, _)) = &q.pipe
        {
            drain(r.as_raw_fd());
        }
    }

    pub(crate) fn fd(&self) -> Result<RawFd, Error> {
        if self.callback.is_some() {
            return Err(Error::Unsupported(
                "this handle delivers events to its event callback; the event fd \
                 works on handles opened without one"
                    .into(),
            ));
        }
        let mut q = self.lock();
        if q.pipe.is_none() {
            let (r, w) = nix::unistd::pipe()
                .map_err(|e| Error::Runtime(format!("cannot make the event pipe: {e}")))?;
            for fd in [&r, &w] {
                set_flags(fd.as_raw_fd())
                    .map_err(|e| Error::Runtime(format!("cannot set up the event pipe: {e}")))?;
            }
            if !q.items.is_empty() || q.dropped > 0 {
                signal(w.as_raw_fd());
            }
            q.pipe = Some((r, w));
        }
        Ok(q.pipe.as_ref().map_or(-1, |(r, _)| r.as_raw_fd()))
    }

    /// Wake pollers: the handle is going away.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

fn set_flags(fd: RawFd) -> nix::Result<()> {
    use nix::fcntl::{F_GETFL, F_SETFD, F_SETFL, FdFlag, OFlag, fcntl};
    // SAFETY: fd is a pipe end we own for the handle's lifetime.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let fl = OFlag::from_bits_truncate(fcntl(fd, F_GETFL)?);
    fcntl(fd, F_SETFL(fl | OFlag::O_NONBLOCK))?;
    fcntl(fd, F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok(())
}

fn signal(w: RawFd) {
    // SAFETY: writing one byte from a local to our own non-blocking pipe.
    unsafe {
        libc::write(w, [1u8].as_ptr().cast(), 1);
    }
}

fn drain(r: RawFd) {
    let mut buf = [0u8; 64];
    // SAFETY: reading into a local buffer from our own non-blocking pipe.
    while unsafe { libc::read(r, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}
