//! The files mcphost keeps for itself, and the lock that orders their
//! writers across processes. A leaf: it knows nothing of MCP.

pub mod lockfile;
pub mod statefile;
