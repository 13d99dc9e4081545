//! libmcphost: the C API of mcphost.
//!
//! One opaque handle, `mcphost`, opened in one of two modes that behave the
//! same for every other call: an engine embedded in the host's process
//! (`mcphost_open_embedded`, on a runtime the library owns), or a
//! connection to a running daemon (`mcphost_connect`). Requests take the
//! socket's method set: MCP plus `mcphost/*`.
//!
//! Conventions (as rustls-ffi and wasmtime): every function returns a
//! [`mcphost_status`] and reports details through a `char **error` out
//! parameter (may be NULL); strings the library returns are freed with
//! `mcphost_string_free`; strings passed to callbacks are borrowed for the
//! call; callbacks are `(fn, user_data, free_user_data)`. Every function
//! sits behind a panic boundary; NULL or non-UTF-8 arguments give a status.
//!
//! Layout: [`status`] (codes and the error type), [`callbacks`] (the
//! callback thread, host callbacks, responders), [`events`] (callback or
//! queue with an fd), [`handle`] (the two modes and the request path).

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]
#![allow(non_camel_case_types)]
// The C ABI is unsafe by nature; each function checks its pointers.
#![allow(clippy::missing_safety_doc)]

pub mod callbacks;
pub mod events;
mod handle;
pub mod methods;
pub mod status;

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mcphost_core::protocol::{ErrorObject, RawValue};

use callbacks::{CallbackThread, HostSide, Registered};
pub use callbacks::{
    MCPHOST_ELICITATION_FORM, MCPHOST_ELICITATION_URL, mcphost_event_callback, mcphost_free_fn,
    mcphost_host_callback, mcphost_responder,
};
use events::Events;
use handle::{Inner, Outcome, Pending, Settings};
pub use status::mcphost_status;
use status::{Error, mcphost_status::*};

/// The ABI version: raised whenever a function, type or status changes
/// incompatibly. Compare `mcphost_abi_version()` with this at start.
pub const MCPHOST_ABI_VERSION: u32 = 1;

/// Default `request_timeout_ms`: the servers' own hard maximum.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Called once when an async request ends: `status` is MCPHOST_OK,
/// MCPHOST_ERR_RPC (with `response_json` holding the error response),
/// MCPHOST_ERR_CANCELLED, MCPHOST_ERR_TIMEOUT or MCPHOST_ERR_CLOSED.
/// `response_json` and `error` may be NULL and are borrowed for the call.
/// Runs on the library's callback thread.
pub type mcphost_response_callback = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        status: mcphost_status,
        response_json: *const c_char,
        error: *const c_char,
    ),
>;

/// Settings for opening a handle: made with `mcphost_options_new`, freed
/// with `mcphost_options_free`. Opening copies what it needs, so one
/// options object may open several handles and be freed right after.
/// Not thread-safe: set it up on one thread.
pub struct mcphost_options {
    client_name: String,
    request_timeout: Duration,
    wait_ready: Duration,
    sampling: Option<Arc<Registered<mcphost_host_callback>>>,
    elicitation: Option<(Arc<Registered<mcphost_host_callback>>, u32)>,
    roots: Option<Arc<Registered<mcphost_host_callback>>>,
    events: Option<Arc<Registered<mcphost_event_callback>>>,
}

/// An open handle (embedded engine or daemon connection). Thread-safe:
/// every function may be called on it from any thread at once, except
/// `mcphost_free`, which must be the last call on it.
pub struct mcphost {
    inner: Arc<Inner>,
    rt: Option<tokio::runtime::Runtime>,
}

/// An async request started by `mcphost_request_async`: cancel it with
/// `mcphost_cancel`, free it with `mcphost_call_free` (freeing does not
/// cancel). Valid until freed, also after it completed.
pub struct mcphost_call {
    pending: Arc<Pending>,
    handle: std::sync::Weak<Inner>,
    key: u64,
}

// ---- the boundary -------------------------------------------------------

/// Runs `f` behind a panic boundary and reports its error through `error`.
fn boundary(error: *mut *mut c_char, f: impl FnOnce() -> Result<(), Error>) -> mcphost_status {
    // SAFETY: `error` is NULL or points to a `char *` the caller owns.
    unsafe { put(error, std::ptr::null_mut()) };
    let r = std::panic::catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(Error::Panic(panic_message(&p))));
    match r {
        Ok(()) => MCPHOST_OK,
        Err(e) => {
            if !error.is_null() {
                // SAFETY: as above.
                unsafe { error.write(c_string(e.to_string())) };
            }
            e.status()
        }
    }
}

/// A panic boundary for functions that return nothing.
fn boundary_void(f: impl FnOnce()) {
    let _ = std::panic::catch_unwind(AssertUnwindSafe(f));
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}

/// Writes `v` through `out` when `out` is not NULL.
unsafe fn put<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: the caller's out pointer, checked non-NULL.
        unsafe { out.write(v) }
    }
}

/// A string for C, freed by `mcphost_string_free`. JSON never holds a raw
/// NUL; a message that does is cut there.
fn c_string(s: String) -> *mut c_char {
    let s = match CString::new(s) {
        Ok(s) => s,
        Err(e) => {
            let n = e.nul_position();
            let mut v = e.into_vec();
            v.truncate(n);
            CString::new(v).unwrap_or_default()
        }
    };
    s.into_raw()
}

unsafe fn arg<'a>(p: *const c_char, name: &'static str) -> Result<&'a str, Error> {
    if p.is_null() {
        return Err(Error::Null(name));
    }
    // SAFETY: non-NULL, and the caller's NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::Utf8(name))
}

/// Handles alive now, by address: debug builds refuse a freed one instead
/// of reading freed memory (an address reused by a new handle is not caught).
#[cfg(debug_assertions)]
mod live {
    use parking_lot::Mutex;
    use std::collections::HashSet;
    static LIVE: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
    pub(crate) fn add(p: usize) {
        let mut l = LIVE.lock();
        l.get_or_insert_with(HashSet::new).insert(p);
    }
    pub(crate) fn remove(p: usize) -> bool {
        let mut l = LIVE.lock();
        l.as_mut().is_some_and(|l| l.remove(&p))
    }
    pub(crate) fn contains(p: usize) -> bool {
        let l = LIVE.lock();
        l.as_ref().is_some_and(|l| l.contains(&p))
    }
}
#[cfg(not(debug_assertions))]
mod live {
    pub(crate) fn add(_: usize) {}
    pub(crate) fn remove(_: usize) -> bool {
        true
    }
    pub(crate) fn contains(_: usize) -> bool {
        true
    }
}

unsafe fn object<'a, T>(p: *const T, name: &'static str) -> Result<&'a T, Error> {
    if p.is_null() {
        return Err(Error::Null(name));
    }
    if !live::contains(p as usize) {
        return Err(Error::InvalidHandle(match name {
            "handle" => "handle is not an open mcphost handle (was it freed?)",
            "responder" => "responder is not a live responder (was it freed?)",
            _ => "the object was freed or never made by this library",
        }));
    }
    // SAFETY: non-NULL and, as far as debug builds can tell, alive.
    Ok(unsafe { &*p })
}

pub(crate) fn into_raw<T>(b: Box<T>) -> *mut T {
    let p = Box::into_raw(b);
    live::add(p as usize);
    p
}

/// Takes back a pointer made by `into_raw`; `None` for NULL or (debug) a
/// pointer freed before.
unsafe fn from_raw<T>(p: *mut T) -> Option<Box<T>> {
    if p.is_null() || !live::remove(p as usize) {
        return None;
    }
    // SAFETY: made by `into_raw` and not yet taken back.
    Some(unsafe { Box::from_raw(p) })
}

// ---- versions and strings -------------------------------------------------

/// The ABI version of this library (`MCPHOST_ABI_VERSION` of the header it
/// was built with). A host built against another header must not use it.
#[unsafe(no_mangle)]
pub extern "C" fn mcphost_abi_version() -> u32 {
    let mut v = 0;
    boundary_void(|| v = MCPHOST_ABI_VERSION);
    v
}

/// The library's release, e.g. `"0.1.0"`: a static string, never freed.
#[unsafe(no_mangle)]
pub extern "C" fn mcphost_version() -> *const c_char {
    static V: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    let mut p = c"unknown".as_ptr();
    boundary_void(|| p = V.as_ptr());
    p
}

/// The name of a status (`"MCPHOST_ERR_TIMEOUT"`): a static string, never
/// freed. Unknown numbers give `"MCPHOST_ERR_UNKNOWN"`.
#[unsafe(no_mangle)]
pub extern "C" fn mcphost_status_name(status: u32) -> *const c_char {
    let mut name = c"MCPHOST_ERR_UNKNOWN".as_ptr();
    boundary_void(|| {
        if let Some(s) = status::from_u32(status) {
            name = status::name(s).as_ptr();
        }
    });
    name
}

/// Frees a string the library returned. NULL is ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_string_free(s: *mut c_char) {
    boundary_void(|| {
        if !s.is_null() {
            // SAFETY: made by `c_string` (CString::into_raw), freed once.
            drop(unsafe { CString::from_raw(s) });
        }
    });
}

// ---- options ------------------------------------------------------------

/// New options with the defaults: client name `"libmcphost"`, requests
/// time out after 600000 ms, open does not wait for servers, no host
/// callbacks (so no sampling, elicitation or roots capability), events
/// queued for `mcphost_next_event`. NULL only if out of memory.
#[unsafe(no_mangle)]
pub extern "C" fn mcphost_options_new() -> *mut mcphost_options {
    let mut out = std::ptr::null_mut();
    boundary_void(|| {
        out = into_raw(Box::new(mcphost_options {
            client_name: "libmcphost".to_owned(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            wait_ready: Duration::ZERO,
            sampling: None,
            elicitation: None,
            roots: None,
            events: None,
        }));
    });
    out
}

/// Frees options. Callbacks' `user_data` is freed once the options and
/// every handle opened with them are freed. NULL is ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_options_free(options: *mut mcphost_options) {
    boundary_void(|| {
        // SAFETY: made by mcphost_options_new.
        drop(unsafe { from_raw(options) });
    });
}

/// A setter of `mcphost_options`, behind the boundary.
unsafe fn with_options(
    p: *mut mcphost_options,
    f: impl FnOnce(&mut mcphost_options) -> Result<(), Error>,
) -> mcphost_status {
    boundary(std::ptr::null_mut(), || {
        // SAFETY: checked by `object`; options are not shared between threads.
        unsafe { object(p, "options")? };
        // SAFETY: as above.
        f(unsafe { &mut *p })
    })
}

/// The name this handle's session shows in `mcphost/status` and server
/// logs, and (connected) the clientInfo sent to the daemon.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_options_set_client_name(
    options: *mut mcphost_options,
    name: *const c_char,
) -> mcphost_status {
    // SAFETY: the caller's options pointer, checked.
    unsafe {
        with_options(options, |o| {
            o.client_name = arg(name, "name")?.to_owned();
            Ok(())
        })
    }
}

/// How long `mcphost_request` and `mcphost_request_async` wait for an
/// answer before MCPHOST_ERR_TIMEOUT (the request is then cancelled down
/// to the server). 0 means the default, 600000.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_options_set_request_timeout_ms(
    options: *mut mcphost_options,
    timeout_ms: u64,
) -> mcphost_status {
    // SAFETY: the caller's options pointer, checked.
    unsafe {
        with_options(options, |o| {
            o.request_timeout = if timeout_ms == 0 {
                DEFAULT_REQUEST_TIMEOUT
            } else {
                Duration::from_millis(timeout_ms)
            };
            Ok(())
        })
    }
}

/// Embedded mode: how long `mcphost_open_embedded` waits for every server
/// to be ready or failed before it returns (0, the default: no wait; the
/// catalog then fills as servers start, announced by list_changed events).
/// A server that failed does not fail the open: `mcphost/status` says why.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_options_set_wait_ready_ms(
    options: *mut mcphost_options,
    wait_ms: u64,
) -> mcphost_status {
    // SAFETY: the caller's options pointer, checked.
    unsafe {
        with_options(options, |o| {
            o.wait_ready = Duration::from_millis(wait_ms);
            Ok(())
        })
    }
}

fn registered(
    f: mcphost_host_callback,
    user_data: *mut c_void,
    free_user_data: mcphost_free_fn,
) -> Result<Arc<Registered<mcphost_host_callback>>, Error> {
    match f {
        None => Err(Error::Null("callback")),
        Some(_) => Ok(Arc::new(Registered::new(f, user_data, free_user_data))),
    }
}

/// Answer servers' `sampling/createMessage` requests, and declare the
/// sampling capability. The callback runs on the library's callback
/// thread; it must return quickly (hop to your own UI thread) and answer
/// through the responder later. Replaces an earlier registration (whose
/// user_data is freed once no handle uses it). If this fails, nothing is
/// registered and `user_data` stays yours (`free_user_data` is not called).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_options_set_sampling(
    options: *mut mcphost_options,
    callback: mcphost_host_callback,
    user_data: *mut c_void,
    free_user_data: mcphost_free_fn,
) -> mcphost_status {
    // SAFETY: the caller's options pointer, checked.
    unsafe {
        with_options(options, |o| {
            o.sampling = Some(registered(callback, user_data, free_user_data)?);
            Ok(())
        })
    }
}

/// Answer servers' `elicitation/create` requests in the given `modes`
/// (`MCPHOST_ELICITATION_FORM`, `MCPHOST_ELICITATION_URL`, or both ORed),
/// and declare the elicitation capability for them. As for sampling.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_options_set_elicitation(
    options: *mut mcphost_options,
    modes: u32,
    callback: mcphost_host_callback,
    user_data: *mut c_void,
    free_user_data: mcphost_free_fn,
) -> mcphost_status {
    // SAFETY: the caller's options pointer, checked.
    unsafe {
        with_options(options, |o| {
            let all = MCPHOST_ELICITATION_FORM | MCPHOST_ELICITATION_URL;
            if modes == 0 || modes & !all != 0 {
                return Err(Error::InvalidRequest(format!(
                    "modes {modes}: use MCPHOST_ELICITATION_FORM, MCPHOST_ELICITATION_URL or both"
                )));
            }
            o.elicitation = Some((registered(callback, user_data, free_user_data)?, modes));
            Ok(())
        })
    }
}

/// Answer servers' `roots/list` requests, and declare the roots capability
/// (with listChanged: send `notifications/roots/list_changed` with
/// `mcphost_notify` when they change). As for sampling.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_options_set_roots(
    options: *mut mcphost_options,
    callback: mcphost_host_callback,
    user_data: *mut c_void,
    free_user_data: mcphost_free_fn,
) -> mcphost_status {
    // SAFETY: the caller's options pointer, checked.
    unsafe {
        with_options(options, |o| {
            o.roots = Some(registered(callback, user_data, free_user_data)?);
            Ok(())
        })
    }
}

/// Deliver events to `callback` (on the library's callback thread) instead
/// of queueing them for `mcphost_next_event`. Events are JSON-RPC
/// notifications: `notifications/tools/list_changed` (and resources,
/// prompts), `notifications/mcphost/server_state`, `notifications/progress`
/// (with the request's own progressToken), `notifications/message` (server
/// logs), `notifications/resources/updated`,
/// `notifications/mcphost/host_request_ended` (`{"id": N}`: the server no
/// longer waits for the host request with that id, so close its dialog),
/// `notifications/mcphost/events_dropped`, and (connected) `…/disconnected`
/// when the daemon went away and `…/reconnected` when the library has
/// connected again (followed by the three `list_changed`: list again). If
/// this fails, `user_data` stays yours (`free_user_data` is not called).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_options_set_event_callback(
    options: *mut mcphost_options,
    callback: mcphost_event_callback,
    user_data: *mut c_void,
    free_user_data: mcphost_free_fn,
) -> mcphost_status {
    // SAFETY: the caller's options pointer, checked.
    unsafe {
        with_options(options, |o| {
            if callback.is_none() {
                return Err(Error::Null("callback"));
            }
            o.events = Some(Arc::new(Registered::new(
                callback,
                user_data,
                free_user_data,
            )));
            Ok(())
        })
    }
}

// ---- opening and freeing ----------------------------------------------------

type Opener = fn(String, Settings, Arc<HostSide>, Arc<Events>) -> handle::BoxOpen;

unsafe fn open(
    what: String,
    options: *const mcphost_options,
    out: *mut *mut mcphost,
    opener: Opener,
) -> Result<(), Error> {
    if out.is_null() {
        return Err(Error::Null("out"));
    }
    // SAFETY: the caller's out pointer.
    unsafe { out.write(std::ptr::null_mut()) };
    let mut defaults = std::ptr::null_mut();
    let o = if options.is_null() {
        defaults = mcphost_options_new();
        // SAFETY: just made.
        unsafe { object(defaults, "options")? }
    } else {
        // SAFETY: checked by `object`.
        unsafe { object(options, "options")? }
    };
    let settings = Settings {
        client_name: o.client_name.clone(),
        request_timeout: o.request_timeout,
        wait_ready: o.wait_ready,
    };
    let events = Arc::new(Events::new(o.events.clone()));
    let host = Arc::new(HostSide {
        thread: CallbackThread::start()?,
        sampling: o.sampling.clone(),
        elicitation: o.elicitation.clone(),
        roots: o.roots.clone(),
        events: events.clone(),
        next_request: std::sync::atomic::AtomicU64::new(1),
    });
    if options.is_null() {
        // SAFETY: made above.
        unsafe { mcphost_options_free(defaults) };
    }
    let rt = handle::runtime()?;
    let opened = handle::wait_on(&rt, opener(what, settings, host.clone(), events))?;
    match opened {
        Ok(inner) => {
            let h = into_raw(Box::new(mcphost {
                inner,
                rt: Some(rt),
            }));
            // SAFETY: checked above.
            unsafe { out.write(h) };
            Ok(())
        }
        Err(e) => {
            host.thread.stop();
            rt.shutdown_timeout(Duration::from_secs(5));
            Err(e)
        }
    }
}

/// Opens an engine in this process. `config_json` is a config in the
/// format of mcphost's config file (JSONC: `{"servers": {…}}`); relative
/// paths in it resolve against the current directory. The engine runs on
/// threads the library owns, never the caller's. `options` may be NULL
/// (the defaults). On success `*out` is the handle; free it with
/// `mcphost_free`. `mcphost/servers/add|remove|enable|disable` edit this
/// in-memory config (nothing is written).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_open_embedded(
    config_json: *const c_char,
    options: *const mcphost_options,
    out: *mut *mut mcphost,
    error: *mut *mut c_char,
) -> mcphost_status {
    boundary(error, || {
        // SAFETY: checked pointers.
        let config = unsafe { arg(config_json, "config_json")? }.to_owned();
        unsafe { open(config, options, out, handle::open_embedded) }
    })
}

/// Connects to a running daemon at `socket_path` (NULL: `$MCPHOST_SOCKET`,
/// else the default path `mcphost daemon` uses). Fails with
/// MCPHOST_ERR_NOT_RUNNING when no daemon listens, and with
/// MCPHOST_ERR_VERSION_MISMATCH when it is another release (the message
/// says how to fix it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_connect(
    socket_path: *const c_char,
    options: *const mcphost_options,
    out: *mut *mut mcphost,
    error: *mut *mut c_char,
) -> mcphost_status {
    boundary(error, || {
        let path = if socket_path.is_null() {
            mcphost_core::ipc::resolve_socket_path(None)
        } else {
            // SAFETY: checked pointer.
            PathBuf::from(unsafe { arg(socket_path, "socket_path")? })
        };
        let path = path.to_string_lossy().into_owned();
        // SAFETY: checked pointers.
        unsafe { open(path, options, out, handle::open_connected) }
    })
}

/// Closes a handle: async requests still running complete with
/// MCPHOST_ERR_CLOSED, every server is stopped and (embedded) the call
/// returns only when none of their processes is left; queued callbacks
/// run before it returns (unless it is called on the callback thread).
/// Outstanding responders stay valid until freed. It waits for a callback
/// that is running, so a callback must never wait for the thread that
/// frees the handle. NULL is ignored. Using the handle afterwards is the
/// caller's error (debug builds report MCPHOST_ERR_INVALID_HANDLE where
/// they can).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_free(handle: *mut mcphost) {
    boundary_void(|| {
        // SAFETY: made by open.
        let Some(mut h) = (unsafe { from_raw(handle) }) else {
            return;
        };
        if let Some(rt) = h.rt.take() {
            h.inner.close(&rt);
            h.inner.host.thread.stop();
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    });
}

// ---- requests -------------------------------------------------------------

/// Sends one request and waits for its answer. `request_json` is a
/// JSON-RPC request: `{"method": "tools/call", "params": {…}}`, with an
/// optional `id` (echoed in the response; null when absent) and, for
/// progress events, `params._meta.progressToken`. On MCPHOST_OK
/// `*response_json` is the JSON-RPC response with a `result`; on
/// MCPHOST_ERR_RPC it is the response with the `error`, and `*error`
/// describes it; otherwise it is NULL. Free both with
/// `mcphost_string_free`. Called on a library callback thread it fails
/// with MCPHOST_ERR_ON_CALLBACK_THREAD instead of deadlocking.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_request(
    handle: *mut mcphost,
    request_json: *const c_char,
    response_json: *mut *mut c_char,
    error: *mut *mut c_char,
) -> mcphost_status {
    // SAFETY: the caller's out pointer.
    unsafe { put(response_json, std::ptr::null_mut()) };
    boundary(error, || {
        // SAFETY: checked pointers.
        let h = unsafe { object(handle, "handle")? };
        let json = unsafe { arg(request_json, "request_json")? };
        if response_json.is_null() {
            return Err(Error::Null("response_json"));
        }
        if callbacks::on_callback_thread() {
            return Err(Error::OnCallbackThread);
        }
        let rt =
            h.rt.as_ref()
                .ok_or(Error::InvalidHandle("handle is being freed"))?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Outcome>(1);
        h.inner.start(rt, json, move |o| {
            let _ = tx.send(o);
        })?;
        let o = rx
            .recv()
            .map_err(|_| Error::Closed("the handle was freed".into()))?;
        if let Some(r) = o.response {
            // SAFETY: checked non-NULL above.
            unsafe { response_json.write(c_string(r)) };
        }
        o.error.map_or(Ok(()), Err)
    })
}

/// Starts one request (as `mcphost_request`) and returns at once.
/// `callback` is called exactly once on the library's callback thread:
/// with the outcome, with MCPHOST_ERR_CANCELLED after `mcphost_cancel`, or
/// with MCPHOST_ERR_CLOSED when the handle is freed first. If `out_call`
/// is not NULL it receives a call handle to cancel with; free it with
/// `mcphost_call_free`. If this function fails, the callback is not called.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_request_async(
    handle: *mut mcphost,
    request_json: *const c_char,
    callback: mcphost_response_callback,
    user_data: *mut c_void,
    out_call: *mut *mut mcphost_call,
    error: *mut *mut c_char,
) -> mcphost_status {
    // SAFETY: the caller's out pointer.
    unsafe { put(out_call, std::ptr::null_mut()) };
    boundary(error, || {
        // SAFETY: checked pointers.
        let h = unsafe { object(handle, "handle")? };
        let json = unsafe { arg(request_json, "request_json")? };
        let Some(cb) = callback else {
            return Err(Error::Null("callback"));
        };
        let rt =
            h.rt.as_ref()
                .ok_or(Error::InvalidHandle("handle is being freed"))?;
        struct UserData(*mut c_void);
        // SAFETY: the header requires user_data to be usable on the
        // callback thread.
        unsafe impl Send for UserData {}
        let ud = UserData(user_data);
        let pending = Pending::new(move |o: Outcome| {
            let ud = ud;
            let response = o.response.and_then(|r| CString::new(r).ok());
            let status = o.error.as_ref().map_or(MCPHOST_OK, Error::status);
            let message = o.error.and_then(|e| CString::new(e.to_string()).ok());
            let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
            // SAFETY: the host's callback; strings borrowed for the call.
            unsafe { cb(ud.0, status, ptr(&response), ptr(&message)) }
        });
        let key = h.inner.track(pending.clone());
        let weak = Arc::downgrade(&h.inner);
        let finisher = pending.clone();
        let started = h.inner.start(rt, json, move |o| {
            if let Some(inner) = weak.upgrade() {
                inner.untrack(key);
                finisher.finish(&inner.host.thread, o);
            }
        });
        match started {
            Ok(abort) => pending.set_abort(abort),
            Err(e) => {
                h.inner.untrack(key);
                return Err(e);
            }
        }
        if !out_call.is_null() {
            let call = into_raw(Box::new(mcphost_call {
                pending,
                handle: Arc::downgrade(&h.inner),
                key,
            }));
            // SAFETY: checked non-NULL.
            unsafe { out_call.write(call) };
        }
        Ok(())
    })
}

/// Cancels an async request: the server is told (notifications/cancelled)
/// and the callback gets MCPHOST_ERR_CANCELLED, unless it already
/// completed (then nothing happens and MCPHOST_OK is returned).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_cancel(call: *mut mcphost_call) -> mcphost_status {
    boundary(std::ptr::null_mut(), || {
        // SAFETY: checked pointer.
        let c = unsafe { object(call, "call")? };
        if let Some(inner) = c.handle.upgrade() {
            inner.untrack(c.key);
            c.pending.finish(
                &inner.host.thread,
                Outcome {
                    response: None,
                    error: Some(Error::Cancelled),
                },
            );
        }
        Ok(())
    })
}

/// Frees a call handle (it does not cancel the request). NULL is ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_call_free(call: *mut mcphost_call) {
    boundary_void(|| {
        // SAFETY: made by mcphost_request_async.
        drop(unsafe { from_raw(call) });
    });
}

/// Sends a notification from the host: `{"method":
/// "notifications/roots/list_changed"}` is the one mcphost takes (the
/// servers whose roots source this host is are told, and ask again).
/// Requests are cancelled with `mcphost_cancel`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_notify(
    handle: *mut mcphost,
    notification_json: *const c_char,
    error: *mut *mut c_char,
) -> mcphost_status {
    boundary(error, || {
        // SAFETY: checked pointers.
        let h = unsafe { object(handle, "handle")? };
        let json = unsafe { arg(notification_json, "notification_json")? };
        let rt =
            h.rt.as_ref()
                .ok_or(Error::InvalidHandle("handle is being freed"))?;
        h.inner.notify(rt, json)
    })
}

// ---- responders -----------------------------------------------------------

/// Answers a server's request with a result (`result_json`, the JSON-RPC
/// result object, e.g. `{"action": "accept", "content": {…}}`). Any
/// thread, once: a second answer gives MCPHOST_ERR_ALREADY_ANSWERED, and
/// MCPHOST_ERR_NOT_WAITING means the server stopped waiting. On
/// MCPHOST_ERR_INVALID_JSON nothing was sent and the responder may be
/// answered again. The responder stays valid until `mcphost_responder_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_responder_result(
    responder: *mut mcphost_responder,
    result_json: *const c_char,
    error: *mut *mut c_char,
) -> mcphost_status {
    boundary(error, || {
        // SAFETY: checked pointers.
        let r = unsafe { object(responder, "responder")? };
        let json = unsafe { arg(result_json, "result_json")? };
        let v: Box<RawValue> = serde_json::from_str(json).map_err(|source| Error::Json {
            what: "result_json",
            source,
        })?;
        if !v.get().trim_start().starts_with('{') {
            return Err(Error::InvalidRequest(
                "result_json must be a JSON object".into(),
            ));
        }
        r.answer(Ok(v))
    })
}

/// Answers a server's request with a JSON-RPC error: `code`, `message`
/// (NULL: a generic one) and `data_json`, the error's `data` as JSON (NULL:
/// none), relayed as given. Once, from any thread, as
/// `mcphost_responder_result`; on MCPHOST_ERR_INVALID_JSON nothing was sent.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_responder_error(
    responder: *mut mcphost_responder,
    code: i64,
    message: *const c_char,
    data_json: *const c_char,
    error: *mut *mut c_char,
) -> mcphost_status {
    boundary(error, || {
        // SAFETY: checked pointers.
        let r = unsafe { object(responder, "responder")? };
        let message = if message.is_null() {
            "the host refused the request"
        } else {
            unsafe { arg(message, "message")? }
        };
        let mut e = ErrorObject::new(code, message);
        if !data_json.is_null() {
            // SAFETY: checked non-NULL.
            let json = unsafe { arg(data_json, "data_json")? };
            let data: Box<RawValue> = serde_json::from_str(json).map_err(|source| Error::Json {
                what: "data_json",
                source,
            })?;
            e.data = Some(data);
        }
        r.answer(Err(e))
    })
}

/// Frees a responder. One never answered answers the server with an error
/// (the host did not answer). Any thread; NULL is ignored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_responder_free(responder: *mut mcphost_responder) {
    boundary_void(|| {
        // SAFETY: handed to the host by the callback; freed once.
        drop(unsafe { from_raw(responder) });
    });
}

// ---- events ---------------------------------------------------------------

/// Takes the next queued event (a JSON-RPC notification as JSON, freed with
/// `mcphost_string_free`), waiting up to `timeout_ms` (0: do not wait; -1:
/// wait until one comes or the handle is freed). MCPHOST_ERR_TIMEOUT when
/// none came; MCPHOST_ERR_UNSUPPORTED on a handle with an event callback.
/// May be called on the callback thread only with timeout 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_next_event(
    handle: *mut mcphost,
    timeout_ms: i32,
    event_json: *mut *mut c_char,
    error: *mut *mut c_char,
) -> mcphost_status {
    // SAFETY: the caller's out pointer.
    unsafe { put(event_json, std::ptr::null_mut()) };
    boundary(error, || {
        // SAFETY: checked pointer.
        let h = unsafe { object(handle, "handle")? };
        if event_json.is_null() {
            return Err(Error::Null("event_json"));
        }
        if timeout_ms != 0 && callbacks::on_callback_thread() {
            return Err(Error::OnCallbackThread);
        }
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let e = h.inner.events.next(timeout)?;
        // SAFETY: checked non-NULL.
        unsafe { event_json.write(c_string(e)) };
        Ok(())
    })
}

/// A descriptor that is readable while events are queued, for a host's
/// own poll/select/kqueue loop (as deltachat offers): when it polls
/// readable, call `mcphost_next_event` with timeout 0 until it returns
/// MCPHOST_ERR_TIMEOUT. Owned by the handle: do not read or close it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mcphost_event_fd(
    handle: *mut mcphost,
    fd: *mut c_int,
    error: *mut *mut c_char,
) -> mcphost_status {
    boundary(error, || {
        // SAFETY: checked pointers.
        let h = unsafe { object(handle, "handle")? };
        if fd.is_null() {
            return Err(Error::Null("fd"));
        }
        let raw = h.inner.events.fd()?;
        // SAFETY: checked non-NULL.
        unsafe { fd.write(raw) };
        Ok(())
    })
}
