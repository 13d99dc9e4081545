//! mcphost: the host side of the Model Context Protocol.
//!
//! # Layout
//!
//! Each layer is a crate (`crates/*`), re-exported here at its old path, so
//! an upward `use` does not compile:
//!
//! ```text
//! protocol ← transport ← jsonrpc ← client ─┐
//! state ← config ← auth ───────────────────┴─ registry ← model_view ← engine
//! ```
//!
//! - [`protocol`]: wire types, method names, revisions and eras, capabilities.
//! - [`transport`]: framing, stdio child processes (process groups, the
//!   process supervisor or a watchdog, stderr ring), Streamable HTTP and SSE.
//! - [`jsonrpc`]: decoder, Peer (ids, pending map, timeouts, cancel, progress).
//! - [`lockfile`], [`statefile`]: one exclusive lock across processes;
//!   private state files replaced atomically, in directories the caller
//!   hands down.
//! - [`config`]: the model (plain validated types), JSONC parsing, edits.
//! - [`auth`]: OAuth; asks for a sign-in through its own prompt trait.
//! - [`client`]: `ServerClient`, every revision behind one type.
//! - [`registry`]: supervisors, the namespaced catalog, token costs, and
//!   the conversions of config entries into transport and client options.
//! - [`model_view`]: what a model is shown (budgets, search, schema profiles).
//! - [`engine`]: the one method set (MCP + `mcphost/*`) every door uses.
//! - Here: [`ipc`] (the socket), [`daemon`] (run loop, hot reload),
//!   [`runtime`] (which runtime a stdio command needs, for `doctor`), and
//!   the binaries.
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
