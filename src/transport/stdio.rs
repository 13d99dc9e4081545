//! stdio transport: one child process group per server.
