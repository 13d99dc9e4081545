//! mcphost: the host side of the Model Context Protocol.
//!
//! # Layout
//!
//! Layers depend only downwards:
//!
//! ```text
//! protocol   wire types, method names, revisions and eras, capabilities
//!    ▲
//! jsonrpc    decoder, Peer: ids, pending map, timeouts, cancel, progress, ping
//!    ▲
//! transport  framing, stdio child processes (process groups, watchdog, stderr ring)
//!    ▲
//! client     ServerClient: handshake, negotiated state, typed calls, pagination,
//!            list_changed re-listing; hides the protocol era from callers
//!    ▲
//! registry   supervisor (one task per server: restart, backoff, failed state)
//!            and the namespaced catalog (legal, bounded, stable names; routing;
//!            token costs kept on its entries, registry::cost)
//!    ▲
//! model_view what a model is shown: budgets, search mode, provider schema
//!            profiles (per session; off by default)
//!    ▲
//! engine     the one method set (MCP + mcphost/*) every door uses
//!    ▲
//! ipc · daemon · config · bin/mcphost
//!            socket (modes, peer uid, bounded queues), run loop and hot
//!            reload, the config file (JSONC, interpolation, text edits), CLI
//! runtime    which runtime a stdio command needs (node, uv, python3, docker…)
//!            and its version, for `mcphost doctor`
//! ```
//!
//! [`lockfile`] (one exclusive file lock, across processes and tasks) and
//! [`statefile`] (private, atomically replaced state files) are leaves that
//! any layer may use: the token store's refresh and the CLI's daemon
//! start-up take the lock; the token store and the stored catalogs write
//! through `statefile`, in directories their caller hands them.
//!
//! The config model is a leaf too: `auth` reads its OAuth settings, and the
//! registry turns its entries into the transport's and the client's
//! configs (`registry::from_config`).
//!
//! `config` is parsed into a checked [`config::HostConfig`] before anything
//! below the daemon sees it; nothing below `engine` knows about files,
//! sockets or the CLI.
//!
//! Relayed payloads (tool schemas and results, prompt messages, `_meta`,
//! unknown fields) stay [`serde_json::value::RawValue`] text end to end, so
//! the proxy is lossless: big integers, decimals and key order survive.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod daemon;
pub mod ipc;
pub mod runtime;

// Every layer below the daemon is a crate of its own (crates/*), so an
// upward use does not compile; their paths stay what they were.
pub use mcphost_auth as auth;
pub use mcphost_client as client;
pub use mcphost_config as config;
pub use mcphost_engine as engine;
pub use mcphost_jsonrpc as jsonrpc;
pub use mcphost_model_view as model_view;
pub use mcphost_protocol as protocol;
pub use mcphost_registry as registry;
pub use mcphost_state::{lockfile, statefile};
pub use mcphost_transport as transport;
