//! The config model's entries as the layers below see them: the transport's
//! [`StdioConfig`] and [`HttpConfig`], the client's timeouts. The config is
//! plain data; what it means to a transport is decided here, by its user.

use mcphost_client::ClientOptions;
use mcphost_config::sandbox::{RootAccess, Sandbox, SandboxNetwork};
use mcphost_config::{HttpServer, StdioServer, Timeouts};
use mcphost_transport::http::{HttpConfig, HttpMode};
use mcphost_transport::sandbox::{Network, SandboxSpec};
use mcphost_transport::stdio::StdioConfig;

/// The transport's view of a stdio server. `shutdown` bounds both the wait
/// after closing stdin and the wait after SIGTERM.
pub fn stdio_config(server: &StdioServer, timeouts: &Timeouts) -> StdioConfig {
    StdioConfig {
        command: server.command.clone(),
        args: server.args.clone(),
        env: server.env.clone(),
        cwd: server.cwd.clone(),
        inherit_env: server.inherit_env,
        sandbox: server
            .sandbox
            .as_ref()
            .map(|s| sandbox_spec(s, server.cwd.as_deref())),
        stdin_close_grace: timeouts.shutdown,
        sigterm_grace: timeouts.shutdown,
        ..StdioConfig::default()
    }
}

/// The transport's sandbox for a server's `sandbox`: the roots go to
/// `read` or `write` as the preset says, and a toolchain preset also
/// reads the server's working directory.
pub fn sandbox_spec(s: &Sandbox, cwd: Option<&std::path::Path>) -> SandboxSpec {
    let mut read = s.read.clone();
    let mut write = s.write.clone();
    match s.roots {
        RootAccess::Ignore => {}
        RootAccess::Read => read.extend(s.root_paths.iter().cloned()),
        RootAccess::Write => write.extend(s.root_paths.iter().cloned()),
    }
    if s.toolchain
        && let Some(dir) = cwd
    {
        read.push(dir.to_path_buf());
    }
    SandboxSpec {
        requested: s.requested.clone(),
        read,
        write,
        network: match s.network {
            SandboxNetwork::None => Network::None,
            SandboxNetwork::Loopback => Network::Loopback,
            SandboxNetwork::Any => Network::Any,
        },
        toolchain: s.toolchain,
        private_tmp: s.private_tmp,
        require: s.require.clone(),
    }
}

/// [`stdio_config`] with `PATH` set to `path` (the login shell's) unless
/// the server's own `env` sets one.
pub fn stdio_config_with_path(
    server: &StdioServer,
    timeouts: &Timeouts,
    path: &str,
) -> StdioConfig {
    let mut config = stdio_config(server, timeouts);
    config
        .env
        .entry("PATH".to_owned())
        .or_insert_with(|| path.to_owned());
    config
}

/// The transport's view of an HTTP server (no credentials: those are the
/// authorizer's).
pub fn http_config(server: &HttpServer, timeouts: &Timeouts) -> HttpConfig {
    let mut c = HttpConfig::new(server.url.clone());
    c.headers = server
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    c.mode = http_mode(server.kind);
    // One slow connect must not eat the whole handshake budget.
    c.connect_timeout = timeouts.init.min(c.connect_timeout);
    c.init_timeout = timeouts.init;
    c.send_timeout = timeouts.request;
    c
}

/// The transport's mode for the config's `type`.
pub fn http_mode(kind: mcphost_config::HttpMode) -> HttpMode {
    match kind {
        mcphost_config::HttpMode::Auto => HttpMode::Auto,
        mcphost_config::HttpMode::Streamable => HttpMode::Streamable,
        mcphost_config::HttpMode::Sse => HttpMode::Sse,
    }
}

/// Sets the client's request, init and maximum timeouts.
pub fn apply_timeouts(timeouts: &Timeouts, options: &mut ClientOptions) {
    options.request_timeout = timeouts.request;
    options.init_timeout = timeouts.init;
    options.max_request_timeout = timeouts.max_request;
}
