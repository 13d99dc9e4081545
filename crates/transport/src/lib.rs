//! Transports move framed JSON-RPC text between the peer and a server.
//!
//! A transport is a pair of channels plus a control handle, so the peer never
//! knows whether it talks to a child process or an HTTP endpoint:
//! - the peer sends one compact JSON text per [`Outbound`] (a message or batch);
//! - the transport delivers [`TransportEvent`]s in arrival order, and ends
//!   with exactly one [`TransportEvent::Closed`].

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod feed;
pub mod framing;
pub mod http;
pub mod sandbox;
pub mod stdio;
pub mod supervisor;

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;

use mcphost_protocol::Id;

/// One outgoing message or batch, already serialised without newlines,
/// with what the transport must know of it that it should not re-parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    pub text: String,
    /// Set on every request of the stateless revision (2026-07-28): the
    /// values an HTTP transport mirrors into headers. Its presence is what
    /// tells the transport to speak that revision (no session, no GET
    /// stream); stdio ignores it.
    pub stateless: Option<Box<StatelessHeaders>>,
}

impl Outbound {
    pub fn new(text: String) -> Self {
        Outbound {
            text,
            stateless: None,
        }
    }

    pub fn len(&self) -> usize {
        self.text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

impl From<&str> for Outbound {
    fn from(text: &str) -> Self {
        Outbound::new(text.to_owned())
    }
}

impl From<String> for Outbound {
    fn from(text: String) -> Self {
        Outbound::new(text)
    }
}

/// The request metadata the 2026-07-28 Streamable HTTP transport mirrors
/// into headers, as plain values: the transport encodes them (the
/// `=?base64?…?=` form for values that are not header-safe).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatelessHeaders {
    /// `MCP-Protocol-Version`: equals the body's `_meta` protocolVersion.
    pub protocol_version: String,
    /// `Mcp-Method`.
    pub method: String,
    /// `Mcp-Name`: `params.name` or `params.uri` of `tools/call`,
    /// `prompts/get` and `resources/read`.
    pub name: Option<String>,
    /// `Mcp-Param-{name}: value` for tool parameters marked `x-mcp-header`,
    /// values already converted to their string form.
    pub params: Vec<(String, String)>,
}

#[derive(Debug)]
pub enum TransportEvent {
    /// One received frame: a JSON-RPC message or batch, not yet parsed.
    Frame(String),
    /// A frame from a transport that knows which stream carried it.
    FrameOn(String, Stream),
    /// A frame over the size limit was discarded. `id` is the request id
    /// recovered from its first or last bytes, when it could be.
    Oversized { limit: usize, id: Option<Id> },
    /// The transport could not deliver request `id` or its answer (HTTP: an
    /// error status, a refused connection, a stream that could not be
    /// resumed). Only that request fails; the connection stays up.
    Failed { id: Id, reason: String },
    /// The transport is gone; nothing follows this event.
    Closed(CloseReason),
}

/// Which stream a frame came on (Streamable HTTP): what ties a server
/// request to the call it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stream {
    /// The response stream of our request with this id.
    Request(Id),
    /// The standalone (GET) stream: nothing of ours caused it.
    Standalone,
}

/// Why a transport closed, with what the server left behind.
#[derive(Debug, Clone, Default)]
pub struct CloseReason {
    /// Human-readable summary, e.g. "exited with status 1".
    pub summary: String,
    /// The server's last stderr lines, oldest first (stdio only).
    pub stderr_tail: Vec<String>,
    /// The server refused our credentials (HTTP 401/403): retrying with the
    /// same configuration cannot help.
    pub auth_required: bool,
}

impl CloseReason {
    pub fn new(summary: impl Into<String>) -> Self {
        CloseReason {
            summary: summary.into(),
            ..CloseReason::default()
        }
    }
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary)?;
        if !self.stderr_tail.is_empty() {
            write!(f, "; last stderr lines:")?;
            for l in &self.stderr_tail {
                write!(f, "\n  {l}")?;
            }
        }
        Ok(())
    }
}

/// See [`TransportControl::follow_stderr`].
pub type StderrFollower = Box<dyn FnMut(std::sync::Arc<str>) + Send>;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Control over a running transport, independent of message flow.
pub trait TransportControl: Send + Sync + 'static {
    /// Stop the transport gracefully (stdio: close stdin, wait, SIGTERM the
    /// group, wait, SIGKILL, reap). Idempotent. Resolves when fully stopped.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
    /// The last `n` stderr lines, oldest first (empty for non-stdio).
    fn stderr_tail(&self, n: usize) -> Vec<String>;
    /// Every stderr line from now on, as it arrives (stdio only; `None` for
    /// other transports and once stderr has closed). The feed is bounded:
    /// a receiver that falls behind gets `Lagged(n)` instead of growing
    /// memory, and `Closed` when the server's stderr ends.
    fn stderr_lines(&self) -> Option<feed::FeedReceiver<std::sync::Arc<str>>> {
        None
    }
    /// Hand every stderr line from now on to `follower`, at most
    /// [`stdio::STDERR_FOLLOW_LINES_PER_SECOND`] a second; past that lines
    /// are counted, and a `[mcphost: N stderr lines dropped]` line follows.
    /// It runs on the transport's stderr reader, so a follower costs no
    /// task, and must not block. `false` for other transports and once
    /// stderr has closed.
    fn follow_stderr(&self, follower: StderrFollower) -> bool {
        drop(follower);
        false
    }
    /// The process group of the server's processes (stdio only): what to
    /// signal to reach all of them. It is the group leader's pid: the
    /// server itself under the process supervisor, else its watchdog.
    fn pid(&self) -> Option<u32>;
    /// The server process itself (stdio only), as shown to users.
    fn server_pid(&self) -> Option<u32> {
        None
    }
    /// The transport in use: "stdio", "streamable-http", "sse", or "http"
    /// while auto-detection has not decided yet.
    fn kind(&self) -> &'static str;
    /// Sessions the transport renewed on its own (HTTP: an expired session,
    /// a dropped legacy stream). Each value is the server's answer to the
    /// `initialize` sent again, a JSON-RPC response frame: the server may
    /// have been redeployed with another revision or capabilities. `None`
    /// for transports without sessions.
    fn renewals(&self) -> Option<tokio::sync::watch::Receiver<Option<std::sync::Arc<str>>>> {
        None
    }
}

/// A started transport.
pub struct Connection {
    pub outbound: mpsc::Sender<Outbound>,
    pub inbound: mpsc::Receiver<TransportEvent>,
    pub control: std::sync::Arc<dyn TransportControl>,
}
