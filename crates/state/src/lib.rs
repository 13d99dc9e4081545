//! The files mcphost keeps for itself, and the lock that orders their
//! writers across processes. A leaf: it knows nothing of MCP.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod lockfile;
pub mod statefile;
