use mcphost_jsonrpc::PeerError;
use mcphost_protocol::ErrorObject;

/// Errors from one server's client. Every variant names the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("server '{server}': {method}: {error}")]
    Request {
        server: String,
        method: std::borrow::Cow<'static, str>,
        /// Part of the message, not a `source()`, so error chains do not
        /// print it twice.
        error: PeerError,
    },
    #[error(
        "server '{server}' did not declare the '{capability}' capability, so {method} was not sent"
    )]
    CapabilityNotDeclared {
        server: String,
        capability: &'static str,
        method: &'static str,
    },
    #[error(
        "server '{server}' answered initialize with protocol revision {offered:?}, which mcphost does not speak over the handshake (we asked for {requested}; supported: 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25)"
    )]
    UnsupportedVersion {
        server: String,
        requested: String,
        offered: String,
    },
    #[error(
        "server '{server}' answered initialize with protocol revision {offered}, but {pinned} is pinned for it (protocolVersion in the config, or --protocol-version)"
    )]
    PinnedVersionRefused {
        server: String,
        pinned: String,
        offered: String,
    },
    #[error(
        "server '{server}' exited when asked server/discover (the probe for the 2026-07-28 revision): {reason}; it is started again and spoken to with initialize"
    )]
    ExitedOnProbe { server: String, reason: String },
    #[error(
        "server '{server}': {method} needs the client capability {capability}, which the caller did not declare ({})",
        error.message
    )]
    MissingCapability {
        server: String,
        method: &'static str,
        capability: String,
        /// The server's error (-32021), relayed to the caller as it came.
        error: Box<ErrorObject>,
    },
    #[error(
        "server '{server}': {method} waited {waited:.1?} for its turn and was not sent: the server asks its host for input on a channel that cannot say for which call, so it serves one host's calls at a time, and another host's {busy_with} call(s) are still in flight; give it \"share\": \"per-session\" to serve each host in parallel"
    )]
    TurnTimeout {
        server: String,
        method: &'static str,
        waited: std::time::Duration,
        busy_with: usize,
    },
    #[error("server '{server}': invalid {method} payload: {reason}")]
    Invalid {
        server: String,
        method: String,
        reason: String,
    },
    #[error("server '{server}': {method} repeated the pagination cursor {cursor:?}; stopped")]
    RepeatedCursor {
        server: String,
        method: &'static str,
        cursor: String,
    },
    #[error("server '{server}': {method} returned more than {pages} pages; stopped")]
    TooManyPages {
        server: String,
        method: &'static str,
        pages: usize,
    },
    #[error("server '{server}': {reason}")]
    Transport { server: String, reason: String },
}

impl ClientError {
    pub(crate) fn request(server: &str, method: &'static str, error: PeerError) -> Self {
        ClientError::Request {
            server: server.to_owned(),
            method: method.into(),
            error,
        }
    }

    pub(crate) fn invalid(server: &str, method: &str, reason: impl std::fmt::Display) -> Self {
        ClientError::Invalid {
            server: server.to_owned(),
            method: method.to_owned(),
            reason: reason.to_string(),
        }
    }

    /// The JSON-RPC error the server answered with, if that is what failed.
    pub fn rpc_error(&self) -> Option<&ErrorObject> {
        match self {
            ClientError::Request {
                error: PeerError::Rpc(e),
                ..
            } => Some(e),
            ClientError::MissingCapability { error, .. } => Some(error),
            _ => None,
        }
    }
}
