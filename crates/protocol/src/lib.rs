//! Wire types: JSON-RPC 2.0 messages, MCP method names, protocol revisions and
//! capabilities.
//!
//! Everything the engine only relays stays [`RawValue`] text; only fields the
//! engine acts on (ids, methods, capabilities, cursors, names, versions) are typed.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod capabilities;
mod items;
pub mod message;
pub mod methods;
mod raw;
mod text;
mod version;

pub use capabilities::{ClientCapabilities, ServerCapabilities};
pub use items::{Prompt, Resource, ResourceTemplate, Tool, ToolResult};
pub use message::{ErrorObject, Id, Message, Notification, Request, Response, error_codes};
pub use raw::{RawError, empty_object, raw_field, set_fields, set_meta, to_raw};
pub use serde_json::value::RawValue;
pub use text::escape_controls;
pub use version::{Era, ProtocolVersion, UnknownVersion};
