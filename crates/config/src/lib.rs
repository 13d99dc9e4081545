//! The mcphost config file: locating, parsing, validating and editing it.
//!
//! The file is JSON with comments and trailing commas. Servers live under
//! `mcpServers` (Claude Desktop / Cursor) or `servers` (VS Code). See
//! `docs/config.md` for the format and `config/mcphost.schema.json` for the
//! schema.
//!
//! - [`load`] / [`parse`] turn a file into a [`HostConfig`], reporting every
//!   problem with `file:line: field: reason`.
//! - [`resolve_config_path`] / [`load_from`] find the file (flag, then
//!   `MCPHOST_CONFIG`, then the per-user default).
//! - [`edit`] adds and removes servers while keeping the user's text intact.
//! - [`shell_path`] takes `PATH` from the user's login shell.
//! - `import` (feature `import`) reads other hosts' configs (`mcphost import`).

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod audit;
mod dotenv;
pub mod duration;
pub mod edit;
mod error;
#[cfg(feature = "import")]
pub mod import;
mod interpolate;
pub mod location;
pub mod model_view;
pub mod naming;
pub mod oauth;
mod parse;
pub use parse::did_you_mean;
pub mod sandbox;
mod secret;
pub use secret::Secret;
pub mod shell_path;
pub mod store;
mod tools;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use error::{ConfigError, Issue, Issues, SaidOnce};
pub use location::{
    CONFIG_ENV, ConfigLocation, ConfigSource, default_config_path, load_from, resolve_config_path,
    resolve_config_path_with,
};
pub use naming::NamingRules;
pub use tools::ToolFilter;

/// Reads a variable from the environment used for `${VAR}` interpolation;
/// `${keyring:NAME}` asks it for `keyring:NAME`.
///
/// Injected so tests (and embedders) control it; `auth::process_env` is
/// the daemon's.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// An [`EnvLookup`] told which server's entry asks (`""` outside any):
/// the daemon answers from the values a CLI gave for that server first
/// (see [`store::ConfigStore::give`]).
pub type ServerEnvLookup<'a> = &'a dyn Fn(&str, &str) -> Option<String>;

/// Everything the daemon takes from one config file.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// The file it came from; `None` for text parsed without one.
    pub path: Option<PathBuf>,
    /// In file order.
    pub servers: Vec<ServerConfig>,
    pub namespacing: Namespacing,
    /// Take `PATH` from the user's login shell (see [`shell_path`]).
    pub login_shell_path: bool,
    /// Roots every server is given, beside the hosts' own.
    pub roots: Vec<Root>,
    /// How long a host may take to answer a server's request.
    pub host_timeouts: HostTimeouts,
    /// `tokens` and `profiles`: what models are shown (see [`model_view`]).
    pub model_view: model_view::Settings,
    /// How the CLI and the bridge treat the daemon (`daemon` in the file).
    pub daemon: DaemonSettings,
    /// `audit`: the audit log of routed calls (see [`audit`]).
    pub audit: audit::Settings,
    /// Non-fatal findings (unknown keys, problems in disabled servers), not
    /// logged: the caller says them, once ([`SaidOnce`]).
    pub warnings: Vec<Issue>,
    /// Server entries with errors, left out of `servers` (only from
    /// [`parse_lenient`]; [`parse`] refuses the file instead).
    pub broken: Vec<BrokenServer>,
}

/// A server entry with errors: the daemon runs the rest of the config and
/// shows this one `failed`, with its issues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenServer {
    pub name: String,
    /// `"stdio"` or `"http"`, as far as the entry says.
    pub transport: &'static str,
    pub disabled: bool,
    pub issues: Vec<Issue>,
}

impl BrokenServer {
    /// Why it cannot run, and what to do about it.
    pub fn reason(&self) -> String {
        let issues = Issues(self.issues.clone());
        format!(
            "config error: {issues}; fix the entry (the daemon applies the file when it is saved)"
        )
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            path: None,
            servers: Vec::new(),
            namespacing: Namespacing::default(),
            login_shell_path: true,
            roots: Vec::new(),
            host_timeouts: HostTimeouts::default(),
            model_view: model_view::Settings::default(),
            daemon: DaemonSettings::default(),
            audit: audit::Settings::default(),
            warnings: Vec::new(),
            broken: Vec::new(),
        }
    }
}

/// The top-level `daemon` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonSettings {
    /// The CLI and `mcphost bridge` start the daemon when it is not running
    /// (default `true`).
    pub autostart: bool,
}

impl Default for DaemonSettings {
    fn default() -> Self {
        DaemonSettings { autostart: true }
    }
}

impl HostConfig {
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }

    pub fn enabled_servers(&self) -> impl Iterator<Item = &ServerConfig> {
        self.servers.iter().filter(|s| !s.disabled)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The key in the servers object, exactly as written.
    pub name: String,
    /// Namespace prefix used instead of the name; `[A-Za-z0-9_-]+`.
    pub alias: Option<String>,
    pub disabled: bool,
    pub transport: TransportConfig,
    pub tools: ToolFilter,
    /// With `defaults.timeouts` and the built-in defaults applied.
    pub timeouts: Timeouts,
    /// Roots this server is given, beside the global ones and the hosts'.
    pub roots: Vec<Root>,
    /// One process for every client, or one per client session.
    pub share: Share,
    /// What this server may ask the hosts for.
    pub offer: Offer,
    /// Speak exactly this revision instead of negotiating.
    pub protocol_version: Option<mcphost_protocol::ProtocolVersion>,
    /// Start with the daemon, or on the first call routed to the server.
    pub start: StartMode,
    /// Stop the server after this long without a request (`idleTimeout`);
    /// the next call starts it again.
    pub idle_timeout: Option<Duration>,
    /// Hidden text in its definitions: removed or relayed (`hygiene`, the
    /// server's own or the top-level one).
    pub hygiene: Hygiene,
    /// What a change of its tool and prompt definitions does (`pinning`,
    /// the top-level one unless the entry sets its own).
    pub pinning: Pinning,
}

/// What the catalog does with hidden text (invisible characters, bidi
/// controls, HTML comments) in a server's descriptions and titles. It is
/// flagged either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Hygiene {
    /// Removed from what hosts and models are shown (the default).
    #[default]
    Strip,
    /// Relayed as the server sent it.
    Keep,
}

/// What drift from a server's pinned definitions does (`pinning`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pinning {
    /// Pin nothing, compare nothing.
    Off,
    /// Pin on first listing; a changed or added definition stays listed
    /// and is reported (the default).
    #[default]
    Warn,
    /// As `Warn`, and a changed or added definition is withheld until
    /// approved.
    Block,
}

impl Pinning {
    pub fn as_str(self) -> &'static str {
        match self {
            Pinning::Off => "off",
            Pinning::Warn => "warn",
            Pinning::Block => "block",
        }
    }
}

/// When a server's process is started (`start`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StartMode {
    /// With the daemon (the default).
    #[default]
    Eager,
    /// On the first call routed to it; until then its stored catalog is
    /// listed. A server with no stored catalog is started once to learn it.
    Lazy,
}

/// The client capabilities offered to a server: which of its requests a
/// host may be asked. All by default; a server not offered one never sends
/// it (and is refused with -32601 if it does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    pub sampling: bool,
    pub elicitation: bool,
    pub roots: bool,
}

impl Default for Offer {
    fn default() -> Self {
        Offer {
            sampling: true,
            elicitation: true,
            roots: true,
        }
    }
}

/// Whether a server's process serves every client or one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Share {
    /// One instance for all sessions (the default).
    #[default]
    Shared,
    /// Each session's calls go to an instance of its own, started on its
    /// first call and stopped when it disconnects, so the server's requests
    /// can never reach another session. One shared instance still lists the
    /// catalog.
    PerSession,
}

/// How long a host may take to answer a forwarded server request; past it
/// the server gets an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostTimeouts {
    /// A person fills in a form or follows a URL: long.
    pub elicitation: Duration,
    /// A model call, perhaps after the user's approval.
    pub sampling: Duration,
    pub roots: Duration,
}

impl Default for HostTimeouts {
    fn default() -> Self {
        HostTimeouts {
            elicitation: Duration::from_secs(600),
            sampling: Duration::from_secs(300),
            roots: Duration::from_secs(30),
        }
    }
}

/// A configured root: a `file://` URI and an optional display name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Root {
    pub uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ServerConfig {
    /// Whether `other` differs only in what a running server can take up
    /// without a restart (its roots).
    pub fn same_process(&self, other: &ServerConfig) -> bool {
        // The start policy is the supervisor's, not the process's: a
        // reload picks it up at the next restart.
        let strip = |c: &ServerConfig| ServerConfig {
            roots: Vec::new(),
            start: StartMode::Eager,
            idle_timeout: None,
            // Applied to the lists the registry keeps; no restart.
            hygiene: Hygiene::Strip,
            // Applied to the listing, not the process.
            pinning: Pinning::Warn,
            ..c.clone()
        };
        strip(self) == strip(other)
    }

    /// The alias if set, else the name: what tool names get prefixed with.
    pub fn prefix(&self) -> &str {
        self.alias.as_deref().unwrap_or(&self.name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum TransportConfig {
    Stdio(StdioServer),
    Http(HttpServer),
}

/// A server started as a child process. Values are interpolated.
///
/// `Debug` prints env names but not their values.
#[derive(Clone, PartialEq)]
pub struct StdioServer {
    pub command: String,
    pub args: Vec<String>,
    /// `envFile` merged under `env` (env wins).
    pub env: BTreeMap<String, String>,
    /// Absolute, or relative to the config file's directory as written.
    pub cwd: Option<PathBuf>,
    pub inherit_env: bool,
    /// `sandbox`: `None` when off (the default).
    pub sandbox: Option<sandbox::Sandbox>,
}

impl fmt::Debug for StdioServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioServer")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &Redacted(&self.env))
            .field("cwd", &self.cwd)
            .field("inherit_env", &self.inherit_env)
            .field("sandbox", &self.sandbox)
            .finish()
    }
}

/// A server reached over HTTP. Values are interpolated.
///
/// `Debug` prints header names but not their values, and no URL query.
#[derive(Clone, PartialEq)]
pub struct HttpServer {
    pub url: String,
    pub headers: BTreeMap<String, String>,
    pub kind: HttpMode,
    pub oauth: OAuthSetting,
}

/// A server's `oauth`: sign in when it asks (the default, with the client
/// from `MCPHOST_OAUTH_CLIENT` or registered on the way), as this client,
/// or never (`false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OAuthSetting {
    Client(Box<oauth::OAuthConfig>),
    Disabled,
}

impl Default for OAuthSetting {
    fn default() -> Self {
        OAuthSetting::Client(Box::default())
    }
}

impl fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Query strings often carry API keys.
        let url = match self.url.split_once('?') {
            Some((base, _)) => format!("{base}?<redacted>"),
            None => self.url.clone(),
        };
        f.debug_struct("HttpServer")
            .field("url", &url)
            .field("headers", &Redacted(&self.headers))
            .field("kind", &self.kind)
            .field("oauth", &self.oauth)
            .finish()
    }
}

impl HttpServer {
    /// Its OAuth settings, unless it signs in some other way (its own
    /// `Authorization` header) or `oauth` is `false`.
    pub fn oauth_client(&self) -> Option<&oauth::OAuthConfig> {
        let OAuthSetting::Client(cfg) = &self.oauth else {
            return None;
        };
        let own_header = self
            .headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"));
        (!own_header).then_some(cfg.as_ref())
    }
}

/// Which HTTP transport an entry asks for: `type: "http"` (or none)
/// auto-detects, `"streamable-http"` and `"sse"` do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpMode {
    /// Streamable HTTP, falling back to legacy HTTP+SSE.
    #[default]
    Auto,
    Streamable,
    /// Legacy HTTP+SSE (2024-11-05), without detection.
    Sse,
}

/// Map values are secrets (tokens in env and headers): print names only.
struct Redacted<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, format_args!("<redacted>"))))
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Default per-request timeout; progress notifications restart it.
    pub request: Duration,
    /// Limit for the initialize handshake.
    pub init: Duration,
    /// Hard maximum for any request, progress or not.
    pub max_request: Duration,
    /// Grace after closing stdin, and again after SIGTERM.
    pub shutdown: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            request: Duration::from_secs(60),
            init: Duration::from_secs(60),
            max_request: Duration::from_secs(600),
            shutdown: Duration::from_secs(2),
        }
    }
}

/// How tool names are prefixed with server names (applied elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespacing {
    pub separator: String,
    /// Longest exposed tool name.
    pub max_length: usize,
    /// Characters of `max_length` kept free for a host's own prefix.
    pub reserve: usize,
}

impl Default for Namespacing {
    fn default() -> Self {
        Namespacing {
            separator: "__".to_owned(),
            max_length: 64,
            reserve: 0,
        }
    }
}

/// Reads and parses the config file at `path`.
///
/// Relative `envFile` and `cwd` values resolve against the file's directory.
pub fn load(path: &Path, env: EnvLookup<'_>) -> Result<HostConfig, ConfigError> {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    parse(&text, &path, env)
}

/// Parses config text; `path` names it in messages and anchors relative paths.
pub fn parse(text: &str, path: &Path, env: EnvLookup<'_>) -> Result<HostConfig, ConfigError> {
    parse::parse(text, path, &|_, name| env(name), false)
}

/// [`parse`], except that a server entry with errors is set aside in
/// [`HostConfig::broken`] instead of refusing the file: what the daemon
/// runs. Errors outside any one server still refuse it.
pub fn parse_lenient(
    text: &str,
    path: &Path,
    env: EnvLookup<'_>,
) -> Result<HostConfig, ConfigError> {
    parse::parse(text, path, &|_, name| env(name), true)
}

/// [`parse_lenient`] with a lookup that knows which server's entry asks.
pub fn parse_lenient_for(
    text: &str,
    path: &Path,
    env: ServerEnvLookup<'_>,
) -> Result<HostConfig, ConfigError> {
    parse::parse(text, path, env, true)
}

/// The `${VAR}` names `server`'s entry in this config text asks for, as the
/// daemon resolves it (`${keyring:…}` is the keyring's, never a variable):
/// what a CLI that enables or restarts it hands the daemon from its own
/// environment. Whatever else the text holds, it is not judged here.
pub fn variables_of(text: &str, path: &Path, server: &str) -> std::collections::BTreeSet<String> {
    let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let lookup = |of: &str, name: &str| {
        if of == server && interpolate::is_variable_name(name) {
            asked.borrow_mut().insert(name.to_owned());
        }
        None
    };
    // Every variable reads as unset here: the warnings that makes are not
    // the user's, and are dropped.
    let _ = parse::parse(text, path, &lookup, true);
    asked.into_inner()
}

/// [`load`] with [`parse_lenient_for`].
pub fn load_lenient(path: &Path, env: ServerEnvLookup<'_>) -> Result<HostConfig, ConfigError> {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    parse_lenient_for(&text, &path, env)
}

/// Fuzzing entry point: the JSONC config loader and the `envFile` parser.
/// Bytes before the first NUL are the config; the rest is the env file
/// `fuzz.env` next to it, which the config may name. Errors must name the file.
#[doc(hidden)]
pub fn fuzz_config(data: &[u8]) {
    static DIR: std::sync::OnceLock<Option<tempfile::TempDir>> = std::sync::OnceLock::new();
    let (config, env_file) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let (Ok(config), Ok(env_file)) = (std::str::from_utf8(config), std::str::from_utf8(env_file))
    else {
        return;
    };
    let _ = dotenv::parse_dotenv(env_file);
    let Some(dir) = DIR.get_or_init(|| tempfile::tempdir().ok()) else {
        return;
    };
    if std::fs::write(dir.path().join("fuzz.env"), env_file).is_err() {
        return;
    }
    let path = dir.path().join("config.json");
    let env = |name: &str| match name {
        "HOME" => Some("/home/fuzz".to_owned()),
        "TOKEN" => Some("t0k3n".to_owned()),
        _ => None,
    };
    if let Err(e) = parse(config, &path, &env) {
        let text = e.to_string();
        assert!(
            text.contains(&*path.to_string_lossy()),
            "an error without the file name: {text}"
        );
    }
}
