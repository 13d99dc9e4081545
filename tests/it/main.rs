//! The integration tests, one binary: a module per area, sharing `common`.
//! One binary links the library and the test servers once instead of once per
//! file. Two tests stay binaries of their own (tests/ipc_paths.rs,
//! tests/stdio_env.rs): they change this process's environment, which no
//! other test may read at the same time.

#[path = "../common/mod.rs"]
mod common;

mod audit;
mod auth_store;
mod autostart;
mod bridge;
mod cli;
mod cli_interactive;
mod cli_logs;
mod cli_policy;
mod client_testserver;
mod config_edit;
mod config_errors;
mod config_parse;
mod config_shell_path;
mod daemon;
mod doctor;
mod eras;
mod everything;
mod fuzz_corpus;
mod host_callbacks;
mod host_logs;
mod host_routing;
mod http_fault_server;
mod http_interop;
mod http_stateless;
mod http_transport;
mod hygiene;
mod import;
mod interop;
mod ipc_socket;
mod isolation;
mod lazy;
mod lifecycle;
mod models;
mod oauth;
mod oauth_daemon;
mod oauth_mock;
mod pins;
mod resources;
mod sandbox;
mod socket_concurrency;
mod socket_leak;
mod socket_security;
mod socket_stateless;
mod stdio_basic;
mod stdio_memory;
mod stdio_process;
mod supervisor;
mod wire;
