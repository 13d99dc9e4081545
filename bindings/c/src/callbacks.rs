//! The host's callbacks, the thread they run on, and responders.
//!
//! Every callback into the host runs on one library thread per handle,
//! never on a runtime worker: a host that blocks in a callback delays its
//! own callbacks, not the servers. Blocking mcphost calls made on that
//! thread fail instead of deadlocking ([`on_callback_thread`]).

use parking_lot::Mutex;
use std::cell::Cell;
use std::ffi::{CString, c_char, c_void};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use mcphost_core::client::{Host, HostRequest};
use mcphost_core::engine::META_SERVER;
use mcphost_core::protocol::{
    ClientCapabilities, ErrorObject, RawValue, error_codes, raw_field, to_raw,
};
use mcphost_core::transport::BoxFuture;
use serde::Serialize;
use tokio::sync::oneshot;
use tracing::warn;

use crate::status::Error;

/// A server's request to the host: `request_json` is
/// `{"id": N, "server": NAME, "method": METHOD, "params": {…}}`, borrowed
/// for the call. Answer through `responder`, now or later, from any thread.
/// If the server stops waiting first (it cancelled, or the host took too
/// long), the event `notifications/mcphost/host_request_ended` with that
/// `id` says so, and a later answer gets MCPHOST_ERR_NOT_WAITING.
pub type mcphost_host_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        request_json: *const c_char,
        responder: *mut mcphost_responder,
    ),
>;

/// An event (a JSON-RPC notification as JSON), borrowed for the call.
pub type mcphost_event_callback =
    Option<unsafe extern "C" fn(user_data: *mut c_void, event_json: *const c_char)>;

/// Frees a callback's `user_data` once the library no longer calls it.
pub type mcphost_free_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// A C function with its `user_data`, freed with `free_user_data` when the
/// last owner drops it.
pub(crate) struct Registered<F: Copy> {
    pub(crate) f: F,
    user_data: *mut c_void,
    free: mcphost_free_fn,
}

// SAFETY: the header requires a callback and its user_data to be usable
// from the library's callback thread (and freed on any thread).
unsafe impl<F: Copy> Send for Registered<F> {}
// SAFETY: as above; the library never calls one callback concurrently.
unsafe impl<F: Copy> Sync for Registered<F> {}

impl<F: Copy> Registered<F> {
    pub(crate) fn new(f: F, user_data: *mut c_void, free: mcphost_free_fn) -> Self {
        Registered { f, user_data, free }
    }

    pub(crate) fn user_data(&self) -> *mut c_void {
        self.user_data
    }
}

impl<F: Copy> Drop for Registered<F> {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            // SAFETY: the host gave us this pair to call exactly once.
            unsafe { free(self.user_data) }
        }
    }
}

thread_local! {
    static CALLBACK_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Whether the current thread is one of the library's callback threads.
pub(crate) fn on_callback_thread() -> bool {
    CALLBACK_THREAD.with(Cell::get)
}

type Job = Box<dyn FnOnce() + Send>;

/// One thread that runs every callback of a handle, in order.
pub(crate) struct CallbackThread {
    tx: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl CallbackThread {
    pub(crate) fn start() -> Result<CallbackThread, Error> {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("mcphost-callbacks".into())
            .spawn(move || {
                CALLBACK_THREAD.with(|c| c.set(true));
                for job in rx {
                    // A panic in our glue must not take the thread (and
                    // every later callback) with it.
                    if std::panic::catch_unwind(AssertUnwindSafe(job)).is_err() {
                        warn!("a callback job panicked");
                    }
                }
            })
            .map_err(|e| Error::Runtime(format!("cannot start the callback thread: {e}")))?;
        Ok(CallbackThread {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Run `job` on the callback thread; `false` once the thread stopped
    /// (the job is then dropped, which answers a responder with an error).
    pub(crate) fn post(&self, job: impl FnOnce() + Send + 'static) -> bool {
        let tx = self.tx.lock();
        tx.as_ref().is_some_and(|tx| tx.send(Box::new(job)).is_ok())
    }

    /// Let the queued jobs run, then end the thread and wait for it (unless
    /// called on it: it then ends after the current job).
    pub(crate) fn stop(&self) {
        self.tx.lock().take();
        let thread = self.thread.lock().take();
        if let Some(t) = thread
            && !on_callback_thread()
        {
            let _ = t.join();
        }
    }
}

/// Which elicitation modes the host's callback handles.
pub const MCPHOST_ELICITATION_FORM: u32 = 1;
/// See [`MCPHOST_ELICITATION_FORM`].
pub const MCPHOST_ELICITATION_URL: u32 = 2;

/// The host side of a handle: its callbacks and the thread they run on.
pub(crate) struct HostSide {
    pub(crate) thread: CallbackThread,
    pub(crate) sampling: Option<Arc<Registered<mcphost_host_callback>>>,
    pub(crate) elicitation: Option<(Arc<Registered<mcphost_host_callback>>, u32)>,
    pub(crate) roots: Option<Arc<Registered<mcphost_host_callback>>>,
    /// Where `host_request_ended` goes.
    pub(crate) events: Arc<crate::events::Events>,
    pub(crate) next_request: std::sync::atomic::AtomicU64,
}

/// The [`Host`] both modes give the engine: registering a callback
/// declares its capability.
pub(crate) struct CHost(pub(crate) Arc<HostSide>);

impl Host for CHost {
    fn capabilities(&self) -> ClientCapabilities {
        use mcphost_core::protocol::capabilities::{ElicitationCap, Empty, RootsCap, SamplingCap};
        let side = &self.0;
        ClientCapabilities {
            roots: side.roots.as_ref().map(|_| RootsCap { list_changed: true }),
            sampling: side.sampling.as_ref().map(|_| SamplingCap {}),
            elicitation: side.elicitation.as_ref().map(|(_, modes)| ElicitationCap {
                form: (modes & MCPHOST_ELICITATION_FORM != 0).then_some(Empty {}),
                url: (modes & MCPHOST_ELICITATION_URL != 0).then_some(Empty {}),
            }),
        }
    }

    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        use mcphost_core::protocol::methods;
        let side = self.0.clone();
        let which = match r.method.as_str() {
            methods::SAMPLING_CREATE_MESSAGE => side.sampling.as_ref(),
            methods::ELICITATION_CREATE => side.elicitation.as_ref().map(|(c, _)| c),
            methods::ROOTS_LIST => side.roots.as_ref(),
            _ => None,
        };
        let Some(f) = which.and_then(|c| c.f) else {
            return Box::pin(std::future::ready(Err(ErrorObject::method_not_found(
                &r.method,
            ))));
        };
        // The daemon names the asking server in `_meta`; in-process the
        // broker does the same.
        let server = r
            .params
            .as_deref()
            .and_then(|p| raw_field::<Box<RawValue>>(p, "_meta").ok().flatten())
            .and_then(|m| raw_field::<String>(&m, META_SERVER).ok().flatten())
            .unwrap_or(r.server);
        let id = side
            .next_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        #[derive(Serialize)]
        struct Asked<'a> {
            id: u64,
            server: &'a str,
            method: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            params: Option<&'a RawValue>,
        }
        let json = to_raw(&Asked {
            id,
            server: &server,
            method: &r.method,
            params: r.params.as_deref(),
        })
        .ok()
        .and_then(|j| CString::new(j.get()).ok());
        let Some(json) = json else {
            return Box::pin(std::future::ready(Err(internal(
                "the request could not be passed to the host",
            ))));
        };
        let (tx, rx) = oneshot::channel();
        let slot: Slot = Arc::new(Mutex::new(Some(tx)));
        let responder = Box::new(mcphost_responder { tx: slot.clone() });
        let ended = Ended {
            id,
            slot,
            side: side.clone(),
            done: false,
        };
        let posted = {
            let side = side.clone();
            let method = r.method.clone();
            side.clone().thread.post(move || {
                let which = match method.as_str() {
                    methods::SAMPLING_CREATE_MESSAGE => side.sampling.as_ref(),
                    methods::ELICITATION_CREATE => side.elicitation.as_ref().map(|(c, _)| c),
                    _ => side.roots.as_ref(),
                };
                let user_data = which.map_or(std::ptr::null_mut(), |c| c.user_data());
                // SAFETY: the host's callback with its own user_data; the
                // responder is the host's until it frees it.
                unsafe { f(user_data, json.as_ptr(), crate::into_raw(responder)) }
            })
        };
        if !posted {
            return Box::pin(std::future::ready(Err(internal(
                "the host handle is closed",
            ))));
        }
        Box::pin(async move {
            // The whole guard moves in (not just the field it sets).
            let mut ended = ended;
            let answer = rx.await;
            ended.done = true;
            answer.unwrap_or_else(|_| {
                Err(internal("the host freed the request without answering it"))
            })
        })
    }
}

fn internal(message: &str) -> ErrorObject {
    ErrorObject::new(error_codes::INTERNAL_ERROR, message)
}

/// A server's request waiting for the host's answer. Answer it once with
/// `mcphost_responder_result` or `mcphost_responder_error`, then free it
/// with `mcphost_responder_free`, from any thread.
pub struct mcphost_responder {
    tx: Slot,
}

/// The sender of a host request's answer, shared by its responder and the
/// waiting side.
type Slot = Arc<Mutex<Option<oneshot::Sender<Answer>>>>;

/// The waiting side of a host request: dropped unanswered (the server
/// cancelled, or the host took too long), it tells the host.
struct Ended {
    id: u64,
    slot: Slot,
    side: Arc<HostSide>,
    done: bool,
}

impl Drop for Ended {
    fn drop(&mut self) {
        let unanswered = self.slot.lock().is_some();
        if self.done || !unanswered {
            return;
        }
        let params = to_raw(&serde_json::json!({ "id": self.id })).ok();
        self.side.events.push(
            &self.side.thread,
            crate::events::notification(
                "notifications/mcphost/host_request_ended",
                params.as_deref(),
            ),
        );
    }
}

/// What the host answers a server: a result or a JSON-RPC error.
type Answer = Result<Box<RawValue>, ErrorObject>;

impl mcphost_responder {
    pub(crate) fn answer(&self, answer: Answer) -> Result<(), Error> {
        let tx = self.tx.lock().take();
        match tx {
            None => Err(Error::AlreadyAnswered),
            Some(tx) => tx.send(answer).map_err(|_| Error::NotWaiting),
        }
    }
}
