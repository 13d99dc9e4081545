//! Per-server MCP client.
