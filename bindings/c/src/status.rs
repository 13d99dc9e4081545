//! Status codes and the error type behind them.

/// What a call returned. The numbers are stable: a code is never reused for
/// another meaning, and new codes are only added at the end.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum mcphost_status {
    /// Success.
    MCPHOST_OK = 0,
    /// A required pointer argument was NULL; the message names it.
    MCPHOST_ERR_NULL_ARGUMENT = 1,
    /// A string argument was not valid UTF-8.
    MCPHOST_ERR_INVALID_UTF8 = 2,
    /// A JSON argument did not parse.
    MCPHOST_ERR_INVALID_JSON = 3,
    /// The JSON parsed but is not what the call takes (no `method`, a method
    /// the handle sends itself, a notification mcphost does not take, …).
    MCPHOST_ERR_INVALID_REQUEST = 4,
    /// The embedded config was refused; the message names the field.
    MCPHOST_ERR_CONFIG = 5,
    /// No daemon listens on the socket path (`mcphost daemon` starts one).
    MCPHOST_ERR_NOT_RUNNING = 6,
    /// The daemon could not be reached or did not complete the handshake.
    MCPHOST_ERR_CONNECT = 7,
    /// The daemon runs another release than this library.
    MCPHOST_ERR_VERSION_MISMATCH = 8,
    /// The request was answered with a JSON-RPC error; the response (an
    /// `error` object) is still returned.
    MCPHOST_ERR_RPC = 9,
    /// No answer (or no event) within the time allowed.
    MCPHOST_ERR_TIMEOUT = 10,
    /// The request was cancelled with `mcphost_cancel`.
    MCPHOST_ERR_CANCELLED = 11,
    /// The handle was freed, or its connection to the daemon was lost.
    MCPHOST_ERR_CLOSED = 12,
    /// A blocking call was made from a library callback thread, where it
    /// could deadlock; use `mcphost_request_async` there.
    MCPHOST_ERR_ON_CALLBACK_THREAD = 13,
    /// The responder was already answered.
    MCPHOST_ERR_ALREADY_ANSWERED = 14,
    /// The server stopped waiting for this answer (it timed out or was
    /// cancelled); the answer was dropped.
    MCPHOST_ERR_NOT_WAITING = 15,
    /// The handle is not a live handle (debug builds detect a freed one).
    MCPHOST_ERR_INVALID_HANDLE = 16,
    /// The library could not start its runtime or threads.
    MCPHOST_ERR_RUNTIME = 17,
    /// A bug in mcphost: it panicked, and the panic was contained.
    MCPHOST_ERR_PANIC = 18,
    /// The call is not available on this handle (for example polling for
    /// events on a handle that delivers them to a callback).
    MCPHOST_ERR_UNSUPPORTED = 19,
}

/// The C layer's errors; each maps to one status.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("{0} is NULL")]
    Null(&'static str),
    #[error("{0} is not valid UTF-8")]
    Utf8(&'static str),
    #[error("{what} is not valid JSON: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    NotRunning(String),
    #[error("{0}")]
    Connect(String),
    #[error("{0}")]
    VersionMismatch(String),
    #[error("{0}")]
    Rpc(String),
    #[error("{0}")]
    Timeout(String),
    #[error("the request was cancelled")]
    Cancelled,
    #[error("{0}")]
    Closed(String),
    #[error(
        "a blocking mcphost call was made on a library callback thread, where it would \
         deadlock; use mcphost_request_async, or hop to another thread first"
    )]
    OnCallbackThread,
    #[error("this responder was already answered")]
    AlreadyAnswered,
    #[error("the server is no longer waiting for this answer (it timed out or was cancelled)")]
    NotWaiting,
    #[error("{0}")]
    InvalidHandle(&'static str),
    #[error("{0}")]
    Runtime(String),
    #[error("mcphost panicked (a bug; please report it): {0}")]
    Panic(String),
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    pub(crate) fn status(&self) -> mcphost_status {
        use mcphost_status::*;
        match self {
            Error::Null(_) => MCPHOST_ERR_NULL_ARGUMENT,
            Error::Utf8(_) => MCPHOST_ERR_INVALID_UTF8,
            Error::Json { .. } => MCPHOST_ERR_INVALID_JSON,
            Error::InvalidRequest(_) => MCPHOST_ERR_INVALID_REQUEST,
            Error::Config(_) => MCPHOST_ERR_CONFIG,
            Error::NotRunning(_) => MCPHOST_ERR_NOT_RUNNING,
            Error::Connect(_) => MCPHOST_ERR_CONNECT,
            Error::VersionMismatch(_) => MCPHOST_ERR_VERSION_MISMATCH,
            Error::Rpc(_) => MCPHOST_ERR_RPC,
            Error::Timeout(_) => MCPHOST_ERR_TIMEOUT,
            Error::Cancelled => MCPHOST_ERR_CANCELLED,
            Error::Closed(_) => MCPHOST_ERR_CLOSED,
            Error::OnCallbackThread => MCPHOST_ERR_ON_CALLBACK_THREAD,
            Error::AlreadyAnswered => MCPHOST_ERR_ALREADY_ANSWERED,
            Error::NotWaiting => MCPHOST_ERR_NOT_WAITING,
            Error::InvalidHandle(_) => MCPHOST_ERR_INVALID_HANDLE,
            Error::Runtime(_) => MCPHOST_ERR_RUNTIME,
            Error::Panic(_) => MCPHOST_ERR_PANIC,
            Error::Unsupported(_) => MCPHOST_ERR_UNSUPPORTED,
        }
    }
}

/// The name of a status, for messages: `"MCPHOST_ERR_TIMEOUT"`.
pub(crate) fn name(status: mcphost_status) -> &'static std::ffi::CStr {
    use mcphost_status::*;
    match status {
        MCPHOST_OK => c"MCPHOST_OK",
        MCPHOST_ERR_NULL_ARGUMENT => c"MCPHOST_ERR_NULL_ARGUMENT",
        MCPHOST_ERR_INVALID_UTF8 => c"MCPHOST_ERR_INVALID_UTF8",
        MCPHOST_ERR_INVALID_JSON => c"MCPHOST_ERR_INVALID_JSON",
        MCPHOST_ERR_INVALID_REQUEST => c"MCPHOST_ERR_INVALID_REQUEST",
        MCPHOST_ERR_CONFIG => c"MCPHOST_ERR_CONFIG",
        MCPHOST_ERR_NOT_RUNNING => c"MCPHOST_ERR_NOT_RUNNING",
        MCPHOST_ERR_CONNECT => c"MCPHOST_ERR_CONNECT",
        MCPHOST_ERR_VERSION_MISMATCH => c"MCPHOST_ERR_VERSION_MISMATCH",
        MCPHOST_ERR_RPC => c"MCPHOST_ERR_RPC",
        MCPHOST_ERR_TIMEOUT => c"MCPHOST_ERR_TIMEOUT",
        MCPHOST_ERR_CANCELLED => c"MCPHOST_ERR_CANCELLED",
        MCPHOST_ERR_CLOSED => c"MCPHOST_ERR_CLOSED",
        MCPHOST_ERR_ON_CALLBACK_THREAD => c"MCPHOST_ERR_ON_CALLBACK_THREAD",
        MCPHOST_ERR_ALREADY_ANSWERED => c"MCPHOST_ERR_ALREADY_ANSWERED",
        MCPHOST_ERR_NOT_WAITING => c"MCPHOST_ERR_NOT_WAITING",
        MCPHOST_ERR_INVALID_HANDLE => c"MCPHOST_ERR_INVALID_HANDLE",
        MCPHOST_ERR_RUNTIME => c"MCPHOST_ERR_RUNTIME",
        MCPHOST_ERR_PANIC => c"MCPHOST_ERR_PANIC",
        MCPHOST_ERR_UNSUPPORTED => c"MCPHOST_ERR_UNSUPPORTED",
    }
}

/// The status with this number, if there is one.
pub(crate) fn from_u32(n: u32) -> Option<mcphost_status> {
    use mcphost_status::*;
    const ALL: [mcphost_status; 20] = [
        MCPHOST_OK,
        MCPHOST_ERR_NULL_ARGUMENT,
        MCPHOST_ERR_INVALID_UTF8,
        MCPHOST_ERR_INVALID_JSON,
        MCPHOST_ERR_INVALID_REQUEST,
        MCPHOST_ERR_CONFIG,
        MCPHOST_ERR_NOT_RUNNING,
        MCPHOST_ERR_CONNECT,
        MCPHOST_ERR_VERSION_MISMATCH,
        MCPHOST_ERR_RPC,
        MCPHOST_ERR_TIMEOUT,
        MCPHOST_ERR_CANCELLED,
        MCPHOST_ERR_CLOSED,
        MCPHOST_ERR_ON_CALLBACK_THREAD,
        MCPHOST_ERR_ALREADY_ANSWERED,
        MCPHOST_ERR_NOT_WAITING,
        MCPHOST_ERR_INVALID_HANDLE,
        MCPHOST_ERR_RUNTIME,
        MCPHOST_ERR_PANIC,
        MCPHOST_ERR_UNSUPPORTED,
    ];
    ALL.into_iter().find(|s| *s as u32 == n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_number_is_its_position_and_named() {
        for n in 0..20u32 {
            let s = from_u32(n).expect("a status");
            assert_eq!(s as u32, n);
            assert!(name(s).to_str().unwrap().starts_with("MCPHOST_"));
        }
        assert!(from_u32(20).is_none());
    }
}
