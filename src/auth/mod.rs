//! OAuth 2.1 for HTTP servers (the MCP authorization spec, 2025-03-26 to
//! 2026-07-28): discovery, client registration, the authorization code flow
//! with PKCE through the host's browser, machine grants, and one token store
//! for every process of the user, refreshed single-flight.

pub mod store;
