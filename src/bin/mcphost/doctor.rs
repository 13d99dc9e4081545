//! `mcphost doctor`: why a configured server does not start, and what to
//! do about it. Per server: the config entry, the command and the `PATH`
//! that finds it, the runtime it needs, its cwd, then a real start with a
//! bounded time (revision, serverInfo, counts; else its stderr and exit);
//! for HTTP servers DNS, TCP, TLS and what a 401 asks for. Every problem
//! comes with its fix, from the one table in [`Fix::text`].
//!
//! The JSON shape (`--json`) is documented in docs/doctor.md.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures_util::StreamExt;
use mcphost::client::{ClientError, ClientOptions, ServerClient};
use mcphost::config::shell_path::{PathOrigin, ShellPath};
use mcphost::config::{ConfigError, HostConfig, HttpServer, Issue, ServerConfig, StdioServer};
use mcphost::config::{OAuthSetting, TransportConfig};
use mcphost::jsonrpc::PeerError;
use mcphost::protocol::Era;
use mcphost::runtime::{self, Runtime};
use mcphost::transport::TransportControl;
use mcphost::transport::stdio::StdioError;
use serde::Serialize;

/// What `mcphost doctor` was asked.
pub struct Options {
    pub config: Option<PathBuf>,
    pub socket: PathBuf,
    /// Only these servers (empty: every configured one).
    pub names: Vec<String>,
    /// `--direct` specs instead of the config.
    pub direct: Vec<String>,
    /// Per server, everything included.
    pub timeout: Duration,
    /// The whole run.
    pub total: Duration,
    /// Servers checked at once.
    pub jobs: usize,
    pub json: bool,
}

/// One finding. `fix` is set exactly when `ok` is false.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }
    fn problem(name: &'static str, detail: impl Into<String>, fix: Fix<'_>) -> Check {
        Check {
            name,
            ok: false,
            detail: detail.into(),
            fix: Some(fix.text()),
        }
    }
}

/// What the server said about itself once started.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub initialize_ms: u64,
    pub protocol_version: String,
    pub era: &'static str,
    pub name: Option<String>,
    pub version: Option<String>,
    pub tools: Option<usize>,
    pub prompts: Option<usize>,
    pub resources: Option<usize>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerReport {
    pub name: String,
    pub transport: &'static str,
    /// The command line or the URL (never env or header values).
    pub target: String,
    pub disabled: bool,
    pub ok: bool,
    pub timed_out: bool,
    pub elapsed_ms: u64,
    /// stdio: the `PATH` the command was looked up in, and whose it is
    /// (`"server env"`, `"login shell"`, `"daemon"`).
    pub path: Option<String>,
    pub path_from: Option<&'static str>,
    pub server: Option<Answer>,
    pub checks: Vec<Check>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Paths {
    /// This process's `PATH`.
    pub process: String,
    /// The login shell's (`None`: not asked, no server needed it).
    pub login_shell: Option<String>,
    /// `"login shell"`, or `"fallback"` when the shell did not answer.
    pub login_shell_from: Option<&'static str>,
    pub daemon_pid: Option<u32>,
    /// The running daemon's own `PATH` (Linux: from /proc), if known.
    pub daemon: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub ok: bool,
    pub config: Option<String>,
    pub config_checks: Vec<Check>,
    pub paths: Paths,
    /// Where sign-in secrets are kept, and why there.
    pub token_store: Option<String>,
    pub servers: Vec<ServerReport>,
}

// ---------------------------------------------------------------------------
// The fix table: every problem's advice, in one place.

/// A problem's fix; [`Fix::text`] is the only place advice is written.
enum Fix<'a> {
    InstallRuntime(Runtime),
    UpgradeRuntime(Runtime),
    InstallCommand(&'a str),
    /// Found in this shell's PATH, not in the login shell's.
    NotInLoginShell {
        command: &'a str,
        dir: String,
    },
    /// Found in this shell's PATH, not in the daemon's own.
    NotInDaemonPath {
        command: &'a str,
        dir: String,
    },
    /// Found in the login shell's PATH, but `loginShellPath` is off.
    LoginShellPathOff {
        dir: String,
    },
    /// The server's own `env.PATH` lacks the command's directory.
    ServerEnvPath {
        dir: String,
    },
    NotExecutable(&'a Path),
    Cwd(&'a Path),
    UnsetVariables(Vec<String>),
    ConfigIssue(&'a Issue),
    ConfigUnreadable(&'a Path),
    Crashed(String),
    Hung {
        command_line: Option<String>,
        limit: Duration,
    },
    NotMcp(Option<String>),
    BadUrl,
    Dns(&'a str),
    Connect(String),
    Tls,
    HttpPath,
    Login(&'a str),
    HeaderRefused,
    OAuthOff,
    Forbidden(&'a str),
    Duplicate {
        name: &'a str,
        other: &'a str,
    },
    /// The daemon stopped signing in to this server (`auth_failed`).
    SignIn(&'a str),
    NotChecked(&'a str),
    /// A step not tried because an earlier one failed.
    Above,
    /// The docker client runs, its engine does not.
    DockerEngine,
}

impl Fix<'_> {
    fn text(&self) -> String {
        match self {
            Fix::InstallRuntime(rt) => install(*rt),
            Fix::UpgradeRuntime(rt) => format!("upgrade: {}", install(*rt)),
            Fix::InstallCommand(c) => format!(
                "install {c}, or give its absolute path in \"command\" (`command -v {c}` in your shell prints it)"
            ),
            Fix::NotInLoginShell { command, dir } => format!(
                "{command} is in {dir}, which this shell's PATH has but your login shell's does not \
                 (a daemon started by launchd/systemd gets the login shell's): add {dir} to PATH in \
                 your shell profile (~/.profile, ~/.zprofile, ~/.bash_profile), or set \"command\" to \
                 \"{dir}/{command}\""
            ),
            Fix::NotInDaemonPath { command, dir } => format!(
                "{command} is in {dir}, which this shell's PATH has but the daemon's own does not: \
                 give this server \"env\": {{\"PATH\": \"{}\"}}, set \"command\" to \
                 \"{dir}/{command}\", or (if your login shell's PATH has it) set \
                 \"loginShellPath\": true",
                with_system_dirs(dir)
            ),
            Fix::LoginShellPathOff { dir } => format!(
                "found in {dir} through your login shell's PATH, but \"loginShellPath\" is false: \
                 set \"loginShellPath\": true in the config, or give this server \
                 \"env\": {{\"PATH\": \"{}\"}}",
                with_system_dirs(dir)
            ),
            Fix::ServerEnvPath { dir } => format!(
                "the server's \"env\" sets PATH without {dir}: add {dir} to it, or remove PATH from \
                 \"env\" to use the login shell's"
            ),
            Fix::NotExecutable(p) => format!("make it executable: chmod +x {}", p.display()),
            Fix::Cwd(dir) => format!(
                "create {} or fix \"cwd\" in the config (a relative cwd is relative to the config file's directory)",
                dir.display()
            ),
            Fix::UnsetVariables(names) => format!(
                "set {} in the environment mcphost runs in (the daemon's: set it before starting \
                 it, or in the service unit), give a default with ${{{}:-value}}, or put it in the \
                 server's \"envFile\"",
                names.join(", "),
                names.first().map_or("VAR", String::as_str)
            ),
            Fix::ConfigIssue(i) => format!(
                "edit {} line {}{}",
                i.path.display(),
                i.line,
                if i.field.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", i.field)
                }
            ),
            Fix::ConfigUnreadable(p) => format!(
                "create {} (`mcphost servers add NAME -- COMMAND ARGS…` writes one), or name \
                 another with --config / MCPHOST_CONFIG",
                p.display()
            ),
            Fix::Crashed(line) => format!(
                "the server exited while starting; its stderr (above) says why. Run it by hand to \
                 see all of it: {line}"
            ),
            Fix::Hung {
                command_line: Some(line),
                limit,
            } => format!(
                "it did not answer within {}: run it by hand to see what it waits for \
                 (`mcphost inspect -- {line}`), or give it longer with --timeout (a first npx/uvx \
                 run downloads packages)",
                humantime::format_duration(*limit)
            ),
            Fix::Hung {
                command_line: None,
                limit,
            } => format!(
                "the server took the connection but did not answer within {}: check that the URL \
                 is its MCP endpoint, or give it longer with --timeout",
                humantime::format_duration(*limit)
            ),
            Fix::NotMcp(Some(line)) => format!(
                "it answered, but not as an MCP server over stdio should; `mcphost -vv inspect -- {line}` \
                 shows the exchange (something else writing to its stdout is a common cause)"
            ),
            Fix::NotMcp(None) => "it answered, but not as an MCP server should; `mcphost -vv --direct URL tools` shows the exchange".to_owned(),
            Fix::BadUrl => "fix \"url\": it must be an http:// or https:// URL".to_owned(),
            Fix::Dns(host) => format!(
                "check the host name in \"url\" ({host} does not resolve), and your network or VPN"
            ),
            Fix::Connect(at) => format!(
                "nothing accepts connections at {at}: start the server, or check the host and port in \"url\""
            ),
            Fix::Tls => "the TLS handshake failed: check http:// vs https:// in \"url\", and that the server's certificate is valid and trusted (a private CA must be in the system's trust store)".to_owned(),
            Fix::HttpPath => "check the path in \"url\": MCP endpoints are often /mcp (Streamable HTTP) or /sse (legacy)".to_owned(),
            Fix::Login(name) => format!("run `mcphost auth login {name}`"),
            Fix::HeaderRefused => "the server refused the Authorization header set in \"headers\": check (or renew) that token".to_owned(),
            Fix::OAuthOff => "the server asks for a sign-in, but \"oauth\" is false for it: remove \"oauth\": false, or send a token in \"headers\"".to_owned(),
            Fix::Forbidden(name) => format!(
                "the token is valid but not allowed here: sign in again (`mcphost auth logout {name}` then `mcphost auth login {name}`) with an account or scope that may use it"
            ),
            Fix::Duplicate { name, other } => format!(
                "{name} and {other} start the same server: remove one (`mcphost servers remove {name}`) or disable it (`mcphost servers disable {name}`)"
            ),
            Fix::SignIn(name) => format!(
                "fix the server or its authorization server, then sign in again: `mcphost auth login {name}`"
            ),
            Fix::DockerEngine => "start Docker: open Docker Desktop (macOS, Windows), or `sudo systemctl start docker`; on Linux your user may also need to be in the docker group (`sudo usermod -aG docker $USER`, then log in again)".to_owned(),
            Fix::Above => "fix the problems above, then run `mcphost doctor` again".to_owned(),
            Fix::NotChecked(name) => format!(
                "doctor's overall limit (--total-timeout) ran out first: check it alone with `mcphost doctor {name}`"
            ),
        }
    }
}

/// `dir` and the system directories, once each.
fn with_system_dirs(dir: &str) -> String {
    let mut v = vec![dir];
    for d in ["/usr/bin", "/bin"] {
        if !v.contains(&d) {
            v.push(d);
        }
    }
    v.join(":")
}

/// How to install a runtime, per runtime.
fn install(rt: Runtime) -> String {
    match rt {
        Runtime::Node => "install Node.js ≥ 18: https://nodejs.org/en/download (or `brew install node`, `sudo apt install nodejs npm`), then open a new shell".to_owned(),
        Runtime::Uv => "install uv: curl -LsSf https://astral.sh/uv/install.sh | sh (or `brew install uv`, `pipx install uv`)".to_owned(),
        Runtime::Python => "install Python ≥ 3.10: `brew install python`, `sudo apt install python3`, or https://www.python.org/downloads/".to_owned(),
        Runtime::Docker => "install Docker: https://docs.docker.com/get-docker/ (and start it)".to_owned(),
        Runtime::Deno => "install Deno: curl -fsSL https://deno.land/install.sh | sh (or `brew install deno`)".to_owned(),
        Runtime::Bun => "install Bun: curl -fsSL https://bun.sh/install | bash (or `brew install oven-sh/bun/bun`)".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// The config

/// The config as far as it parses: servers with errors are taken out (and
/// their issues kept for their reports), so the others are still checked.
struct Loaded {
    path: Option<PathBuf>,
    cfg: Option<HostConfig>,
    /// Issues that belong to no one server: the config as a whole.
    general: Vec<Issue>,
    /// Per server name, its errors (the entry could not be used).
    errors: Vec<(String, Issue)>,
    warnings: Vec<(Option<String>, Issue)>,
    unreadable: Option<String>,
}

/// The server a config field belongs to: `mcpServers.NAME…`,
/// `servers["odd name"]…`.
fn server_of_field(field: &str) -> Option<String> {
    let rest = field
        .strip_prefix("mcpServers")
        .or_else(|| field.strip_prefix("servers"))?;
    if let Some(r) = rest.strip_prefix('.') {
        let end = r.find(['.', '[']).unwrap_or(r.len());
        return Some(r[..end].to_owned()).filter(|n| !n.is_empty());
    }
    let r = rest.strip_prefix('[')?;
    serde_json::Deserializer::from_str(r)
        .into_iter::<String>()
        .next()?
        .ok()
}

fn load(opts: &Options) -> Result<Loaded> {
    let loc = mcphost::config::location::resolve_config_path(opts.config.clone())?;
    let path = std::path::absolute(&loc.path).unwrap_or(loc.path.clone());
    let mut loaded = Loaded {
        path: Some(path.clone()),
        cfg: None,
        general: Vec::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
        unreadable: None,
    };
    let mut text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            loaded.unreadable = Some(format!("{}: cannot read it: {e}", path.display()));
            return Ok(loaded);
        }
    };
    // Each round takes out the servers whose entries have errors; what a
    // later round finds is mapped back to the lines of the file.
    let mut cuts: Vec<Cut> = Vec::new();
    let original = |mut issue: Issue, cuts: &[Cut]| {
        issue.line = original_line(issue.line, cuts);
        issue
    };
    for _ in 0..8 {
        match mcphost::config::parse(&text, &path, &mcphost::auth::process_env) {
            Ok(cfg) => {
                crate::say_config_warnings(&cfg.warnings);
                for w in &cfg.warnings {
                    let w = original(w.clone(), &cuts);
                    loaded.warnings.push((server_of_field(&w.field), w));
                }
                loaded.cfg = Some(cfg);
                return Ok(loaded);
            }
            Err(ConfigError::Invalid(issues)) => {
                let mut removed = false;
                let round = cuts.clone();
                for issue in issues.0 {
                    let issue = original(issue, &round);
                    match server_of_field(&issue.field) {
                        Some(name)
                            if let Ok(t) = mcphost::config::edit::remove_server(&text, &name) =>
                        {
                            cuts.push(Cut::between(&text, &t));
                            text = t;
                            removed = true;
                            loaded.errors.push((name, issue));
                        }
                        // Already taken out this round (a second issue).
                        Some(name) if loaded.errors.iter().any(|(n, _)| *n == name) => {
                            loaded.errors.push((name, issue));
                        }
                        _ => loaded.general.push(issue),
                    }
                }
                if !removed || !loaded.general.is_empty() {
                    return Ok(loaded);
                }
            }
            Err(ConfigError::Syntax {
                line: l,
                column,
                message,
                ..
            }) => {
                loaded.general.push(Issue {
                    path: path.clone(),
                    line: original_line(l, &cuts),
                    field: String::new(),
                    message: format!(
                        "not valid JSON at column {column} (comments and trailing commas are fine): {message}"
                    ),
                });
                return Ok(loaded);
            }
            Err(e) => {
                loaded.unreadable = Some(e.to_string());
                return Ok(loaded);
            }
        }
    }
    loaded.unreadable = Some("too many broken server entries to check the rest".to_owned());
    Ok(loaded)
}

/// Lines taken out of the text: `count` lines from 0-based line `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cut {
    at: usize,
    count: usize,
}

impl Cut {
    fn between(before: &str, after: &str) -> Cut {
        let at = before
            .lines()
            .zip(after.lines())
            .take_while(|(a, b)| a == b)
            .count();
        Cut {
            at,
            count: before.lines().count().saturating_sub(after.lines().count()),
        }
    }
}

/// The file's line number for a 1-based `line` of the text after `cuts`.
fn original_line(line: usize, cuts: &[Cut]) -> usize {
    cuts.iter().rev().fold(line, |l, c| {
        if l > c.at {
            l.saturating_add(c.count)
        } else {
            l
        }
    })
}

/// The variables an interpolation error names.
fn unset_variables(message: &str) -> Option<Vec<String>> {
    // After any `server "NAME": ` prefix.
    let at = message.find("variable")?;
    let message = &message[at..];
    let rest = message
        .strip_prefix("variable ")
        .or_else(|| message.strip_prefix("variables "))?;
    let (names, _) = rest
        .split_once(" is not set")
        .or_else(|| rest.split_once(" are not set"))?;
    Some(names.split(", ").map(str::to_owned).collect())
}

fn issue_check(issue: &Issue) -> Check {
    let detail = format!("{}:{}: {}", issue.path.display(), issue.line, {
        if issue.field.is_empty() {
            issue.message.clone()
        } else {
            format!("{}: {}", issue.field, issue.message)
        }
    });
    match unset_variables(&issue.message) {
        Some(names) => Check::problem("env", detail, Fix::UnsetVariables(names)),
        None => Check::problem("config", detail, Fix::ConfigIssue(issue)),
    }
}

// ---------------------------------------------------------------------------
// PATHs

/// The PATHs a command may be found through.
struct PathCtx {
    process: String,
    login: Option<ShellPath>,
    login_shell_path: bool,
    daemon_pid: Option<u32>,
    daemon: Option<String>,
}

/// Which PATH a server's command is looked up in, as the daemon does it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PathFrom {
    ServerEnv,
    LoginShell,
    /// The daemon's own (loginShellPath off, or the shell did not answer).
    Own,
}

impl PathFrom {
    fn describe(self, ctx: &PathCtx) -> &'static str {
        match self {
            PathFrom::ServerEnv => "the server's env.PATH",
            PathFrom::LoginShell => "the login shell's PATH",
            PathFrom::Own if !ctx.login_shell_path => {
                "the daemon's own PATH (loginShellPath is off)"
            }
            PathFrom::Own => "the daemon's own PATH (the login shell did not answer)",
        }
    }
}

impl PathCtx {
    fn own(&self) -> &str {
        self.daemon.as_deref().unwrap_or(&self.process)
    }

    fn for_server(&self, s: &StdioServer) -> (String, PathFrom) {
        if let Some(p) = s.env.get("PATH") {
            return (p.clone(), PathFrom::ServerEnv);
        }
        match (&self.login, self.login_shell_path) {
            (Some(l), true) if l.origin == PathOrigin::LoginShell => {
                (l.path.clone(), PathFrom::LoginShell)
            }
            _ => (self.own().to_owned(), PathFrom::Own),
        }
    }

    /// Other PATHs to look in when the one used does not find a command.
    fn others(&self, used: PathFrom) -> Vec<(&'static str, &str)> {
        let mut v = Vec::new();
        if used != PathFrom::LoginShell
            && let Some(l) = self
                .login
                .as_ref()
                .filter(|l| l.origin == PathOrigin::LoginShell)
        {
            v.push(("login", l.path.as_str()));
        }
        v.push(("shell", self.process.as_str()));
        if let Some(d) = &self.daemon {
            v.push(("daemon", d.as_str()));
        }
        v
    }
}

/// What the running daemon says: its pid, (on Linux) its `PATH`, and the
/// servers it stopped signing in to (name → why); quick, or nothing.
async fn daemon_path(
    socket: &Path,
) -> (
    Option<u32>,
    Option<String>,
    std::collections::BTreeMap<String, String>,
) {
    let ask = async {
        let conn = mcphost::ipc::connect(socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES)
            .await
            .ok()?;
        let opts = ClientOptions {
            known_era: Some(Era::Handshake),
            init_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let c = ServerClient::connect("daemon", conn, opts).await.ok()?;
        let status = c
            .request_raw("mcphost/status", None, Default::default())
            .await
            .ok();
        c.shutdown().await;
        let v: serde_json::Value = serde_json::from_str(status?.get()).ok()?;
        let pid = v["pid"].as_u64().and_then(|p| u32::try_from(p).ok())?;
        let failed = v["authFailed"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, e)| (k.clone(), e.as_str().unwrap_or("").to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Some((pid, failed))
    };
    let Ok(Some((pid, failed))) = tokio::time::timeout(Duration::from_secs(3), ask).await else {
        return (None, None, Default::default());
    };
    (Some(pid), process_path(pid), failed)
}

#[cfg(target_os = "linux")]
fn process_path(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"PATH="))
        .map(|p| String::from_utf8_lossy(p).into_owned())
}

#[cfg(not(target_os = "linux"))]
fn process_path(_pid: u32) -> Option<String> {
    None
}

// ---------------------------------------------------------------------------
// Checking one server

/// What a server's check has found so far: kept when its time runs out.
#[derive(Default)]
struct Progress {
    checks: Mutex<Vec<Check>>,
    stage: Mutex<&'static str>,
    control: Mutex<Option<Arc<dyn TransportControl>>>,
    answer: Mutex<Option<Answer>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Progress {
    fn push(&self, c: Check) {
        lock(&self.checks).push(c);
    }
    fn stage(&self, s: &'static str) {
        *lock(&self.stage) = s;
    }
}

/// The server's command line, quoted for a shell.
fn command_line(s: &StdioServer) -> String {
    let mut words = vec![s.command.clone()];
    words.extend(s.args.iter().cloned());
    shell_words::join(words)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The last lines of stderr, for a detail.
fn stderr_note(control: Option<&Arc<dyn TransportControl>>) -> String {
    let lines = control
        .map(|c| c.stderr_tail(STDERR_LINES))
        .unwrap_or_default();
    if lines.is_empty() {
        return String::new();
    }
    format!("; last stderr lines:\n{}", lines.join("\n"))
}

const STDERR_LINES: usize = 8;

async fn check_stdio(
    name: &str,
    sc: &ServerConfig,
    s: &StdioServer,
    paths: &PathCtx,
    p: &Progress,
    budget: Duration,
    started: Instant,
) {
    p.stage("checking the cwd");
    let mut cwd_ok = true;
    if let Some(dir) = &s.cwd {
        if dir.is_dir() {
            p.push(Check::ok("cwd", dir.display().to_string()));
        } else {
            cwd_ok = false;
            p.push(Check::problem(
                "cwd",
                format!("{} does not exist or is not a directory", dir.display()),
                Fix::Cwd(dir),
            ));
        }
    }
    if !s.env.is_empty() {
        let names: Vec<&str> = s.env.keys().map(String::as_str).collect();
        p.push(Check::ok("env", format!("sets {}", names.join(", "))));
    }

    p.stage("resolving the command");
    let (path, from) = paths.for_server(s);
    let mut cfg = mcphost::registry::from_config::stdio_config_with_path(s, &sc.timeouts, &path);
    // Quick to stop: doctor only looks.
    cfg.stdin_close_grace = cfg.stdin_close_grace.min(Duration::from_secs(1));
    cfg.sigterm_grace = cfg.sigterm_grace.min(Duration::from_secs(1));
    let mut resolve_cfg = cfg.clone();
    if !cwd_ok {
        resolve_cfg.cwd = None;
    }
    let resolved = match mcphost::transport::stdio::resolve_program(name, &resolve_cfg) {
        Ok(exe) => {
            p.push(Check::ok(
                "command",
                format!(
                    "{} → {} (through {}{})",
                    s.command,
                    exe.display(),
                    from.describe(paths),
                    shown_path(from, &path)
                ),
            ));
            Some(exe)
        }
        Err(e) => {
            p.push(command_not_found(s, &e, &path, from, paths));
            None
        }
    };
    if let Some(exe) = &resolved
        && !is_executable(exe)
    {
        p.push(Check::problem(
            "command",
            format!("{} is not executable", exe.display()),
            Fix::NotExecutable(exe),
        ));
    }

    p.stage("checking the runtime");
    // A launcher that is its own runtime (uvx, docker) and was not found
    // has been reported already.
    let detected = runtime::detect(&s.command, resolved.as_deref())
        .filter(|d| resolved.is_some() || d.program != s.command);
    if let Some(d) = detected {
        let how = match &d.via {
            runtime::Via::Command
                if d.program == s.command || Some(Path::new(&d.program)) == resolved.as_deref() =>
            {
                "the command itself".to_owned()
            }
            runtime::Via::Command => format!("{} needs it", s.command),
            runtime::Via::Shebang(i) => format!("its #! line runs {i}"),
        };
        let limit = Duration::from_secs(5).min(budget);
        match runtime::version(&d.program, &path, limit).await {
            Ok(v) if v.too_old(d.runtime) => p.push(Check::problem(
                "runtime",
                format!(
                    "{} {} at {} is too old ({how})",
                    d.runtime.name(),
                    bare_version(&v.text, d.runtime),
                    v.program.display()
                ),
                Fix::UpgradeRuntime(d.runtime),
            )),
            Ok(v) if d.runtime == Runtime::Docker => {
                let engine = runtime::docker_engine(&d.program, &path, limit).await;
                p.push(match engine {
                    Ok(server) => Check::ok(
                        "runtime",
                        format!(
                            "Docker {} at {}, engine {server} ({how})",
                            bare_version(&v.text, d.runtime),
                            v.program.display()
                        ),
                    ),
                    Err(e) => Check::problem(
                        "runtime",
                        format!(
                            "Docker {} is installed but its engine does not answer ({how}): {e}",
                            bare_version(&v.text, d.runtime)
                        ),
                        Fix::DockerEngine,
                    ),
                });
            }
            Ok(v) => p.push(Check::ok(
                "runtime",
                format!(
                    "{} {} at {} ({how})",
                    d.runtime.name(),
                    bare_version(&v.text, d.runtime),
                    v.program.display()
                ),
            )),
            Err(e @ runtime::RuntimeError::NotFound { .. }) => p.push(Check::problem(
                "runtime",
                format!("{} is missing ({how}): {e}", d.runtime.name()),
                Fix::InstallRuntime(d.runtime),
            )),
            Err(e) => p.push(Check::problem(
                "runtime",
                format!("{} does not run ({how}): {e}", d.runtime.name()),
                Fix::InstallRuntime(d.runtime),
            )),
        }
    }
    if resolved.is_none() || !cwd_ok {
        p.push(Check::problem(
            "start",
            "not tried, for the problems above",
            Fix::Above,
        ));
        return;
    }

    let line = command_line(s);
    let mut known_era = None;
    // A handshake-era server may exit on the server/discover probe; the
    // daemon then starts it again and speaks initialize: so does doctor.
    for attempt in 0..2 {
        p.stage("starting the server");
        let conn = match mcphost::transport::stdio::spawn(name, &cfg).await {
            Ok(c) => c,
            Err(e) => {
                p.push(Check::problem("start", e.to_string(), Fix::Crashed(line)));
                return;
            }
        };
        let control = conn.control.clone();
        *lock(&p.control) = Some(control.clone());
        p.stage("waiting for initialize");
        let left = budget.saturating_sub(started.elapsed());
        let t0 = Instant::now();
        let opts = client_options(left, known_era);
        match ServerClient::connect(name, conn, opts).await {
            Ok(client) => {
                let init = t0.elapsed();
                answered(&client, init, p).await;
                p.stage("stopping the server");
                client.shutdown().await;
                return;
            }
            Err(ClientError::ExitedOnProbe { .. }) if attempt == 0 => {
                known_era = Some(Era::Handshake);
            }
            Err(e) => {
                p.push(start_failure(name, &e, Some(&control), Some(line), left));
                return;
            }
        }
    }
}

/// `Python 3.12.1` → `3.12.1`: the runtime's name is shown already.
fn bare_version(text: &str, rt: Runtime) -> &str {
    let lower = text.to_ascii_lowercase();
    for prefix in [rt.name().to_ascii_lowercase(), rt.program().to_owned()] {
        if lower.starts_with(&prefix) {
            let rest = text[prefix.len()..].trim_start();
            return rest.strip_prefix("version ").unwrap_or(rest);
        }
    }
    text
}

fn client_options(limit: Duration, known_era: Option<Era>) -> ClientOptions {
    ClientOptions {
        init_timeout: limit,
        request_timeout: limit,
        max_request_timeout: limit,
        probe_timeout: limit.min(Duration::from_secs(3)),
        known_era,
        ..Default::default()
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A server's own PATH, which the header lines above do not show.
fn shown_path(from: PathFrom, path: &str) -> String {
    match from {
        PathFrom::ServerEnv => format!(": {path}"),
        _ => String::new(),
    }
}

/// The command was not found: where else it is, and so what to do.
fn command_not_found(
    s: &StdioServer,
    e: &StdioError,
    path: &str,
    from: PathFrom,
    paths: &PathCtx,
) -> Check {
    let detail = match e {
        StdioError::CommandNotFound { .. } => format!(
            "'{}' not found in {}{}",
            s.command,
            from.describe(paths),
            shown_path(from, path)
        ),
        other => other.to_string(),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let found_in = |p: &str| {
        which::which_in(&s.command, Some(p), &cwd)
            .ok()
            .and_then(|f| f.parent().map(|d| d.display().to_string()))
    };
    for (which, other) in paths.others(from) {
        let Some(dir) = found_in(other) else { continue };
        let fix = match (from, which) {
            (PathFrom::ServerEnv, _) => Fix::ServerEnvPath { dir },
            (PathFrom::Own, "login") => Fix::LoginShellPathOff { dir },
            (PathFrom::Own, "shell") => Fix::NotInDaemonPath {
                command: &s.command,
                dir,
            },
            (_, "shell") => Fix::NotInLoginShell {
                command: &s.command,
                dir,
            },
            _ => continue,
        };
        return Check::problem("command", detail, fix);
    }
    let fix = match runtime::detect(&s.command, None) {
        Some(d) => Fix::InstallRuntime(d.runtime),
        None => Fix::InstallCommand(&s.command),
    };
    Check::problem("command", detail, fix)
}

/// A started server: what it said, and its counts.
/// How many items a list request gave: 0 for a kind the server did not
/// declare (not asked), `None` with the error noted when it failed.
async fn count<T>(
    declared: bool,
    method: &str,
    list: impl std::future::Future<Output = Result<Vec<T>, ClientError>>,
    errors: &mut Vec<String>,
) -> Option<usize> {
    if !declared {
        return Some(0);
    }
    match list.await {
        Ok(items) => Some(items.len()),
        Err(e) => {
            errors.push(format!("{method}: {e}"));
            None
        }
    }
}

async fn answered(client: &ServerClient, init: Duration, p: &Progress) {
    let n = client.negotiated();
    let caps = &n.capabilities;
    let mut listing_errors = Vec::new();
    p.stage("listing tools");
    let tools = count(
        caps.tools.is_some(),
        "tools/list",
        client.list_tools(),
        &mut listing_errors,
    )
    .await;
    p.stage("listing prompts");
    let prompts = count(
        caps.prompts.is_some(),
        "prompts/list",
        client.list_prompts(),
        &mut listing_errors,
    )
    .await;
    p.stage("listing resources");
    let resources = count(
        caps.resources.is_some(),
        "resources/list",
        client.list_resources(),
        &mut listing_errors,
    )
    .await;
    let era = match client.era() {
        Era::Handshake => "handshake",
        Era::Stateless => "stateless",
    };
    let answer = Answer {
        initialize_ms: ms(init),
        protocol_version: n.protocol_version.to_string(),
        era,
        name: n.server_name.clone(),
        version: n.server_version.clone(),
        tools,
        prompts,
        resources,
    };
    let count = |c: Option<usize>| c.map_or("?".to_owned(), |c| c.to_string());
    p.push(Check::ok(
        "start",
        format!(
            "initialized in {} ms: {} {}, MCP {} ({era}); {} tools, {} prompts, {} resources",
            answer.initialize_ms,
            answer.name.as_deref().unwrap_or("(no name)"),
            answer.version.as_deref().unwrap_or("(no version)"),
            answer.protocol_version,
            count(tools),
            count(prompts),
            count(resources),
        ),
    ));
    if !listing_errors.is_empty() {
        p.push(Check::problem(
            "list",
            listing_errors.join("; "),
            Fix::NotMcp(None),
        ));
    }
    *lock(&p.answer) = Some(answer);
}

/// Why a start failed, with the server's exit and stderr.
fn start_failure(
    name: &str,
    e: &ClientError,
    control: Option<&Arc<dyn TransportControl>>,
    line: Option<String>,
    limit: Duration,
) -> Check {
    match e {
        ClientError::Request {
            error: PeerError::Closed(reason),
            ..
        } if reason.auth_required => {
            Check::problem("start", reason.summary.clone(), Fix::Login(name))
        }
        ClientError::Request {
            error: PeerError::Closed(reason),
            ..
        } if line.is_some() => Check::problem(
            "start",
            format!("{}{}", reason.summary, stderr_note(control)),
            Fix::Crashed(line.unwrap_or_default()),
        ),
        ClientError::ExitedOnProbe { reason, .. } => Check::problem(
            "start",
            reason.clone(),
            Fix::Crashed(line.unwrap_or_default()),
        ),
        ClientError::Request {
            error: PeerError::Timeout { method, elapsed },
            ..
        } => Check::problem(
            "timeout",
            format!(
                "no answer to {method} within {elapsed:.1?}{}",
                stderr_note(control)
            ),
            Fix::Hung {
                command_line: line,
                limit,
            },
        ),
        other => Check::problem(
            "start",
            format!("{other}{}", stderr_note(control)),
            Fix::NotMcp(line),
        ),
    }
}

async fn check_http(
    name: &str,
    sc: &ServerConfig,
    h: &HttpServer,
    p: &Progress,
    budget: Duration,
    started: Instant,
) {
    let url = match url::Url::parse(&h.url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => u,
        Ok(u) => {
            p.push(Check::problem(
                "url",
                format!("{}: the scheme is {:?}", redact(&h.url), u.scheme()),
                Fix::BadUrl,
            ));
            return;
        }
        Err(e) => {
            p.push(Check::problem(
                "url",
                format!("{}: {e}", redact(&h.url)),
                Fix::BadUrl,
            ));
            return;
        }
    };
    let host = url.host_str().unwrap_or("").to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let step = Duration::from_secs(5).min(budget);

    p.stage("resolving the host name");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<std::net::SocketAddr> =
        match tokio::time::timeout(step, tokio::net::lookup_host((bare, port))).await {
            Ok(Ok(a)) => {
                let mut v: Vec<_> = a.collect();
                v.dedup();
                v
            }
            Ok(Err(e)) => {
                p.push(Check::problem(
                    "dns",
                    format!("{host}: {e}"),
                    Fix::Dns(&host),
                ));
                return;
            }
            Err(_) => {
                p.push(Check::problem(
                    "dns",
                    format!("{host}: no answer within {step:?}"),
                    Fix::Dns(&host),
                ));
                return;
            }
        };
    if bare.parse::<std::net::IpAddr>().is_ok() {
        p.push(Check::ok(
            "dns",
            format!("{host} is an IP address: no lookup"),
        ));
    } else {
        let shown: Vec<String> = addrs.iter().take(4).map(|a| a.ip().to_string()).collect();
        p.push(Check::ok("dns", format!("{host} → {}", shown.join(", "))));
    }

    p.stage("connecting");
    let mut connected = None;
    let mut last_error = String::from("no addresses");
    for a in &addrs {
        let t0 = Instant::now();
        match tokio::time::timeout(step, tokio::net::TcpStream::connect(a)).await {
            Ok(Ok(_)) => {
                connected = Some((*a, t0.elapsed()));
                break;
            }
            Ok(Err(e)) => last_error = format!("{a}: {e}"),
            Err(_) => last_error = format!("{a}: no answer within {step:?}"),
        }
    }
    let Some((at, took)) = connected else {
        p.push(Check::problem(
            "connect",
            last_error,
            Fix::Connect(format!("{host}:{port}")),
        ));
        return;
    };
    p.push(Check::ok(
        "connect",
        format!("TCP to {at} in {} ms", ms(took)),
    ));

    // What the server answers without our token: a 401 says what it wants.
    p.stage("asking without a token");
    let probe = probe(h, &url, step).await;
    let tls = url.scheme() == "https";
    let resp = match probe {
        Ok(r) => {
            if tls {
                p.push(Check::ok(
                    "tls",
                    match &r.certificate {
                        Some(c) => format!("TLS handshake ok; certificate {}", c.describe()),
                        None => "TLS handshake ok".to_owned(),
                    },
                ));
            }
            r
        }
        // TCP went through a moment ago: a failed connect is the TLS layer.
        Err(ProbeError::Connect(e)) if tls || looks_like_tls(&e) => {
            p.push(Check::problem("tls", e, Fix::Tls));
            return;
        }
        Err(ProbeError::Timeout(e)) => {
            p.push(Check::problem(
                "http",
                e,
                Fix::Hung {
                    command_line: None,
                    limit: step,
                },
            ));
            return;
        }
        Err(ProbeError::Connect(e) | ProbeError::Other(e)) => {
            p.push(Check::problem("http", e, Fix::NotMcp(None)));
            return;
        }
    };
    let own_header = h
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("authorization"));
    let mut signed_in = true;
    match resp.status {
        401 | 403 => {
            let c = mcphost::auth::challenge::BearerChallenge::find(
                resp.www_authenticate.iter().map(String::as_str),
            );
            let asks = match &c {
                Some(c) => format!(
                    "Bearer; resource_metadata={}; scope={}{}",
                    c.resource_metadata.as_deref().unwrap_or("(none)"),
                    c.scope.as_deref().unwrap_or("(none)"),
                    c.error
                        .as_deref()
                        .map(|e| format!("; error={e}"))
                        .unwrap_or_default()
                ),
                None if resp.www_authenticate.is_empty() => "no WWW-Authenticate header".to_owned(),
                None => resp.www_authenticate.join(", "),
            };
            let detail = format!("HTTP {} without a token: asks for {asks}", resp.status);
            if own_header {
                p.push(Check::problem("auth", detail, Fix::HeaderRefused));
                signed_in = false;
            } else if matches!(h.oauth, OAuthSetting::Disabled) {
                p.push(Check::problem("auth", detail, Fix::OAuthOff));
                signed_in = false;
            } else {
                p.push(Check::ok("auth", detail));
                let (has, state) = token_state(name, &url);
                if has && resp.status == 403 {
                    signed_in = false;
                    p.push(Check::problem("token", state, Fix::Forbidden(name)));
                } else if has {
                    p.push(Check::ok("token", state));
                } else {
                    signed_in = false;
                    p.push(Check::problem("token", state, Fix::Login(name)));
                }
            }
        }
        s => p.push(Check::ok(
            "auth",
            format!(
                "no sign-in asked (HTTP {s} to an unauthenticated ping){}",
                if own_header {
                    "; sends its own Authorization header"
                } else {
                    ""
                }
            ),
        )),
    }
    if !signed_in {
        p.push(Check::problem(
            "start",
            "not tried, for the problems above",
            Fix::Above,
        ));
        return;
    }

    p.stage("waiting for initialize");
    let left = budget.saturating_sub(started.elapsed());
    let mut cfg = mcphost::registry::from_config::http_config(h, &sc.timeouts);
    cfg.init_timeout = left;
    cfg.connect_timeout = cfg.connect_timeout.min(left);
    // Stored tokens are used and refreshed; no sign-in page is ever shown.
    if let Ok(ctx) = mcphost::auth::AuthContext::from_env(None)
        && let Some(oauth) = h.oauth_client()
        && let Ok(a) = ctx.authorizer(name, &h.url, oauth)
    {
        cfg.credentials = Some(a);
    }
    let conn = match mcphost::transport::http::connect(name, cfg).await {
        Ok(c) => c,
        Err(e) => {
            p.push(Check::problem("start", e.to_string(), Fix::NotMcp(None)));
            return;
        }
    };
    let control = conn.control.clone();
    *lock(&p.control) = Some(control.clone());
    let t0 = Instant::now();
    match ServerClient::connect(name, conn, client_options(left, None)).await {
        Ok(client) => {
            answered(&client, t0.elapsed(), p).await;
            client.shutdown().await;
        }
        Err(e) => {
            let mut c = start_failure(name, &e, None, None, left);
            if matches!(resp.status, 404 | 405) && c.name == "start" {
                c.fix = Some(Fix::HttpPath.text());
            }
            p.push(c);
        }
    }
}

fn redact(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?…"),
        None => url.to_owned(),
    }
}

fn looks_like_tls(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    ["tls", "certificate", "handshake", "ssl", "alert"]
        .iter()
        .any(|w| e.contains(w))
}

/// An error and its sources in one line (reqwest's own message says
/// little: "error sending request").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

enum ProbeError {
    Connect(String),
    Timeout(String),
    Other(String),
}

impl From<reqwest::Error> for ProbeError {
    fn from(e: reqwest::Error) -> Self {
        let text = error_chain(&e);
        if e.is_timeout() {
            ProbeError::Timeout(text)
        } else if e.is_connect() {
            ProbeError::Connect(text)
        } else {
            ProbeError::Other(text)
        }
    }
}

struct Probed {
    /// The server's leaf certificate (https).
    certificate: Option<cert::Summary>,
    status: u16,
    www_authenticate: Vec<String>,
}

/// An unauthenticated `ping` POST (with the config's own headers), as
/// the OAuth layer sends to learn a server's challenge.
async fn probe(h: &HttpServer, url: &url::Url, limit: Duration) -> Result<Probed, ProbeError> {
    let builder = reqwest::Client::builder()
        .connect_timeout(limit)
        .timeout(limit)
        .user_agent(concat!("mcphost/", env!("CARGO_PKG_VERSION")));
    #[cfg(feature = "tls")]
    let builder = builder.tls_info(true);
    let client = builder.build()?;
    let mut req = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        )
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#);
    for (k, v) in &h.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = req.send().await?;
    #[cfg(feature = "tls")]
    let certificate = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .and_then(cert::summary);
    #[cfg(not(feature = "tls"))]
    let certificate = None;
    Ok(Probed {
        certificate,
        status: resp.status().as_u16(),
        www_authenticate: resp
            .headers()
            .get_all(reqwest::header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect(),
    })
}

/// Whether the token store holds a token for this server, and its state
/// as `mcphost auth status` words it.
fn token_state(name: &str, url: &url::Url) -> (bool, String) {
    let store = match mcphost::auth::store::TokenStore::open_default() {
        Ok(s) => s,
        Err(e) => {
            return (
                false,
                format!("no token: the token store cannot be opened: {e}"),
            );
        }
    };
    let list = match store.list() {
        Ok(l) => l,
        Err(e) => {
            return (
                false,
                format!("no token: the token store cannot be read: {e}"),
            );
        }
    };
    let mine = mcphost::auth::discovery::canonical(url);
    let found = list.into_iter().find(|(k, e)| {
        e.tokens.is_some()
            && (url::Url::parse(&k.resource)
                .is_ok_and(|r| mcphost::auth::discovery::canonical(&r) == mine)
                || e.server.as_deref() == Some(name))
    });
    let Some((key, entry)) = found else {
        return (
            false,
            format!("no stored token for {name} (in {})", store.dir().display()),
        );
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let Some(t) = entry.tokens else {
        return (false, "signed out".to_owned());
    };
    let state = match t.expires_at {
        Some(at) if at <= now && t.refresh_token.is_some() => {
            "expired (refreshes on use)".to_owned()
        }
        Some(at) if at <= now => {
            return (false, format!("the token from {} has expired", key.issuer));
        }
        Some(at) => format!(
            "valid for {}",
            humantime::format_duration(Duration::from_secs(at.saturating_sub(now)))
        ),
        None => "valid".to_owned(),
    };
    (true, format!("token from {} {state}", key.issuer))
}

/// Whose certificate it is and until when (x509-parser): rustls has
/// verified it already, this only describes it.
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
mod cert {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Summary {
        pub subject: Option<String>,
        pub issuer: Option<String>,
        /// `2028-01-06 02:16:55 UTC`.
        pub not_after: String,
        pub not_after_unix: Option<i64>,
    }

    impl Summary {
        pub fn describe(&self) -> String {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            let left = match self.not_after_unix {
                Some(t) if t <= now => " (expired)".to_owned(),
                Some(t) => format!(" ({} days left)", (t - now) / 86_400),
                None => String::new(),
            };
            format!(
                "for {} from {}, valid until {}{left}",
                self.subject.as_deref().unwrap_or("(no CN)"),
                self.issuer.as_deref().unwrap_or("(no CN)"),
                self.not_after
            )
        }
    }

    pub fn summary(der: &[u8]) -> Option<Summary> {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let cn = |name: &x509_parser::x509::X509Name<'_>| {
            name.iter_common_name()
                .next()
                .and_then(|a| a.as_str().ok())
                .map(str::to_owned)
        };
        let after = cert.validity().not_after;
        let t = after.to_datetime();
        let not_after = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        );
        Some(Summary {
            subject: cn(cert.subject()),
            issuer: cn(cert.issuer()),
            not_after,
            not_after_unix: Some(after.timestamp()),
        })
    }

    #[cfg(test)]
    mod tests {
        use base64::Engine as _;

        /// `openssl req -x509 -newkey ec … -subj "/O=Doctor Test/CN=doctor.test" -days 400`
        const CERT: &str = "MIIBrjCCAVOgAwIBAgIUAdgEOjfUi0xCpr0h/XwqKZPiP/swCgYIKoZIzj0EAwIwLDEUMBIGA1UECgwLRG9jdG9yIFRlc3QxFDASBgNVBAMMC2RvY3Rvci50ZXN0MB4XDTI2MTIwMjAyMTY1NVoXDTI4MDEwNjAyMTY1NVowLDEUMBIGA1UECgwLRG9jdG9yIFRlc3QxFDASBgNVBAMMC2RvY3Rvci50ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEJzhjNdFqYTDE3ZaMucPAVBDF8L2jKUDMJ6dxyBXwLspEbI5jgLZjQdEBOh7i0g/I6+guCxXYSchxSx9xui2FnqNTMFEwHQYDVR0OBBYEFIvGvEPd/KZRdt/i9jQSo7DEA12PMB8GA1UdIwQYMBaAFIvGvEPd/KZRdt/i9jQSo7DEA12PMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIhAOp8/FDY4BmSYUe/kDuRMcX+uUzlaIUew1Pp0F6xVgOjAiEArQSqoo5ob2NkprqsBJObqciWUABFjXCHeKY/OYoaV60=";

        #[test]
        fn a_certificate_says_whose_and_until_when() {
            let der = base64::engine::general_purpose::STANDARD
                .decode(CERT)
                .unwrap();
            let s = super::summary(&der).unwrap();
            assert_eq!(s.subject.as_deref(), Some("doctor.test"));
            assert_eq!(s.issuer.as_deref(), Some("doctor.test"));
            // openssl x509 -enddate: notAfter=Jan  6 02:16:55 2028 GMT
            assert_eq!(s.not_after, "2028-01-06 02:16:55 UTC");
            assert_eq!(s.not_after_unix, Some(1_830_737_815));
            // Cut anywhere, it is None, never a panic.
            for n in 0..der.len() {
                let _ = super::summary(&der[..n]);
            }
            assert_eq!(super::summary(b"not der"), None);
        }
    }
}

// ---------------------------------------------------------------------------
// The run

pub async fn run(opts: Options) -> Result<u8> {
    let loaded = if opts.direct.is_empty() {
        load(&opts)?
    } else {
        Loaded {
            path: None,
            cfg: Some(crate::backend::direct_config(&opts.direct).await?),
            general: Vec::new(),
            errors: Vec::new(),
            warnings: Vec::new(),
            unreadable: None,
        }
    };
    let report = examine(&opts, loaded).await?;
    if opts.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        show(&report);
    }
    Ok(if report.ok { 0 } else { 1 })
}

async fn examine(opts: &Options, loaded: Loaded) -> Result<Report> {
    let mut config_checks = Vec::new();
    let path_text = loaded.path.as_ref().map(|p| p.display().to_string());
    if let Some(why) = &loaded.unreadable {
        let fix = match &loaded.path {
            Some(p) if !p.exists() => Fix::ConfigUnreadable(p),
            _ => Fix::ConfigIssue(&Issue {
                path: loaded.path.clone().unwrap_or_default(),
                line: 1,
                field: String::new(),
                message: why.clone(),
            }),
        };
        config_checks.push(Check::problem("config", why.clone(), fix));
    }
    for issue in &loaded.general {
        config_checks.push(issue_check(issue));
    }
    for (server, w) in &loaded.warnings {
        if server.is_none() {
            config_checks.push(Check::ok("config", format!("warning: {w}")));
        }
    }
    let empty = HostConfig::default();
    let cfg = loaded.cfg.as_ref().unwrap_or(&empty);

    // Every server named in the config, in file order, broken ones too.
    let mut names: Vec<String> = cfg.servers.iter().map(|s| s.name.clone()).collect();
    for (n, _) in &loaded.errors {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let configured = names.len();
    if !opts.names.is_empty() {
        if let Some(unknown) = opts.names.iter().find(|n| !names.contains(n))
            && loaded.cfg.is_some()
        {
            bail!(
                "no server named '{unknown}' in the config (it has: {})",
                names.join(", ")
            );
        }
        names.retain(|n| opts.names.contains(n));
    }
    if loaded.cfg.is_some() && loaded.unreadable.is_none() && loaded.general.is_empty() {
        let disabled = cfg.servers.iter().filter(|s| s.disabled).count();
        let hint = if configured == 0 {
            "; add one with `mcphost servers add NAME -- COMMAND ARGS…` (or `--url URL`)"
        } else {
            ""
        };
        config_checks.insert(
            0,
            Check::ok(
                "config",
                format!(
                    "{}{} ({disabled} disabled){hint}",
                    path_text
                        .as_ref()
                        .map(|p| format!("{p}: "))
                        .unwrap_or_default(),
                    servers_n(configured),
                ),
            ),
        );
    }
    let picked: Vec<&ServerConfig> = cfg
        .servers
        .iter()
        .filter(|s| names.contains(&s.name))
        .collect();
    let checked = |s: &ServerConfig| !s.disabled || opts.names.contains(&s.name);

    // Asked even with loginShellPath off: a command found only there is
    // worth saying so. Not asked when no stdio server is checked.
    let needs_login = picked.iter().any(|s| {
        checked(s)
            && matches!(&s.transport, TransportConfig::Stdio(st) if !st.env.contains_key("PATH"))
    });
    let login = match needs_login {
        true => Some(
            mcphost::config::shell_path::login_shell_path()
                .await
                .clone(),
        ),
        false => None,
    };
    let (daemon_pid, daemon, auth_failed) = if opts.direct.is_empty() {
        daemon_path(&opts.socket).await
    } else {
        (None, None, Default::default())
    };
    let paths = PathCtx {
        process: std::env::var("PATH").unwrap_or_default(),
        login,
        login_shell_path: cfg.login_shell_path,
        daemon_pid,
        daemon,
    };

    let deadline = Instant::now().checked_add(opts.total);
    let jobs = opts.jobs.max(1);
    let mut results: Vec<(usize, ServerReport)> =
        futures_util::stream::iter(picked.iter().enumerate())
            .map(|(i, sc)| {
                let paths = &paths;
                async move {
                    let r = match checked(sc) {
                        true => check_server(sc, paths, opts.timeout, deadline).await,
                        false => disabled_report(sc),
                    };
                    (i, r)
                }
            })
            .buffer_unordered(jobs)
            .collect()
            .await;
    results.sort_by_key(|(i, _)| *i);
    let mut servers: Vec<ServerReport> = results.into_iter().map(|(_, r)| r).collect();

    // Entries that could not be used at all.
    for name in &names {
        if servers.iter().any(|s| s.name == *name) {
            continue;
        }
        servers.push(ServerReport {
            name: name.clone(),
            transport: "-",
            target: String::new(),
            disabled: false,
            ok: false,
            timed_out: false,
            elapsed_ms: 0,
            path: None,
            path_from: None,
            server: None,
            checks: Vec::new(),
        });
    }
    // Attach config findings to their servers.
    for s in &mut servers {
        let mut first = Vec::new();
        for (n, issue) in &loaded.errors {
            if *n == s.name {
                first.push(issue_check(issue));
            }
        }
        for (n, w) in &loaded.warnings {
            if n.as_deref() == Some(s.name.as_str()) {
                first.push(Check::ok("config", format!("warning: {w}")));
            }
        }
        if let Some(why) = auth_failed.get(&s.name) {
            first.push(Check::problem(
                "sign-in",
                format!("auth_failed in the daemon: {why}"),
                Fix::SignIn(&s.name),
            ));
        }
        if !first.is_empty() {
            first.append(&mut s.checks);
            s.checks = first;
        }
    }
    // The same server twice under two names.
    let enabled: Vec<&ServerConfig> = picked.iter().copied().filter(|s| !s.disabled).collect();
    for s in &mut servers {
        let Some(at) = enabled.iter().position(|c| c.name == s.name) else {
            continue;
        };
        let me = enabled[at];
        // The later entry is the one flagged.
        if let Some(other) = enabled[..at].iter().find(|c| c.transport == me.transport) {
            s.checks.push(Check::problem(
                "duplicate",
                format!("same {} as '{}' above", what(&me.transport), other.name),
                Fix::Duplicate {
                    name: &me.name,
                    other: &other.name,
                },
            ));
        }
    }
    for s in &mut servers {
        s.ok = s.checks.iter().all(|c| c.ok);
    }
    let ok = config_checks.iter().all(|c| c.ok) && servers.iter().all(|s| s.ok);
    Ok(Report {
        ok,
        config: path_text,
        config_checks,
        paths: Paths {
            process: paths.process.clone(),
            login_shell: paths.login.as_ref().map(|l| l.path.clone()),
            login_shell_from: paths.login.as_ref().map(|l| match l.origin {
                PathOrigin::LoginShell => "login shell",
                PathOrigin::Fallback => "fallback",
            }),
            daemon_pid: paths.daemon_pid,
            daemon: paths.daemon.clone(),
        },
        token_store: mcphost::auth::store::TokenStore::open_default()
            .ok()
            .map(|s| s.describe_backend()),
        servers,
    })
}

fn servers_n(n: usize) -> String {
    match n {
        1 => "1 server".to_owned(),
        n => format!("{n} servers"),
    }
}

fn what(t: &TransportConfig) -> &'static str {
    match t {
        TransportConfig::Stdio(_) => "command, arguments and env",
        TransportConfig::Http(_) => "URL and headers",
    }
}

fn transport_of(sc: &ServerConfig) -> (&'static str, String) {
    match &sc.transport {
        TransportConfig::Stdio(s) => ("stdio", command_line(s)),
        TransportConfig::Http(h) => ("http", redact(&h.url)),
    }
}

fn disabled_report(sc: &ServerConfig) -> ServerReport {
    let (transport, target) = transport_of(sc);
    ServerReport {
        name: sc.name.clone(),
        transport,
        target,
        disabled: true,
        ok: true,
        timed_out: false,
        elapsed_ms: 0,
        path: None,
        path_from: None,
        server: None,
        checks: vec![Check::ok(
            "disabled",
            format!(
                "disabled in the config: not checked (`mcphost servers enable {}` turns it on; `mcphost doctor {}` checks it anyway)",
                sc.name, sc.name
            ),
        )],
    }
}

async fn check_server(
    sc: &ServerConfig,
    paths: &PathCtx,
    timeout: Duration,
    deadline: Option<Instant>,
) -> ServerReport {
    let (transport, target) = transport_of(sc);
    let started = Instant::now();
    let mut report = ServerReport {
        name: sc.name.clone(),
        transport,
        target,
        disabled: sc.disabled,
        ok: false,
        timed_out: false,
        elapsed_ms: 0,
        path: None,
        path_from: None,
        server: None,
        checks: Vec::new(),
    };
    let left = deadline.map_or(timeout, |d| d.saturating_duration_since(started));
    if left.is_zero() {
        report.timed_out = true;
        report.checks.push(Check::problem(
            "timeout",
            "not checked: the overall limit ran out".to_owned(),
            Fix::NotChecked(&sc.name),
        ));
        return report;
    }
    let budget = timeout.min(left);
    if sc.disabled {
        report.checks.push(Check::ok(
            "disabled",
            "disabled in the config (checked because it was named)",
        ));
    }
    if let TransportConfig::Stdio(s) = &sc.transport {
        let (path, from) = paths.for_server(s);
        report.path = Some(path);
        report.path_from = Some(match from {
            PathFrom::ServerEnv => "server env",
            PathFrom::LoginShell => "login shell",
            PathFrom::Own => "daemon",
        });
    }
    let p = Progress::default();
    let work = async {
        match &sc.transport {
            TransportConfig::Stdio(s) => {
                check_stdio(&sc.name, sc, s, paths, &p, budget, started).await
            }
            TransportConfig::Http(h) => check_http(&sc.name, sc, h, &p, budget, started).await,
        }
    };
    // The checks bound their own waits too; this is the one that holds.
    let finished = tokio::time::timeout(budget, work).await.is_ok();
    let control = lock(&p.control).take();
    if !finished {
        report.timed_out = true;
        let stage = *lock(&p.stage);
        let line = match &sc.transport {
            TransportConfig::Stdio(s) => Some(command_line(s)),
            TransportConfig::Http(_) => None,
        };
        p.push(Check::problem(
            "timeout",
            format!(
                "timed out after {} while {stage}{}",
                humantime::format_duration(budget),
                stderr_note(control.as_ref())
            ),
            Fix::Hung {
                command_line: line,
                limit: budget,
            },
        ));
    }
    if let Some(c) = control {
        // Stops it if a timeout left it running; idempotent otherwise.
        let _ = tokio::time::timeout(Duration::from_secs(5), c.shutdown()).await;
    }
    report.checks.append(&mut lock(&p.checks));
    if report.checks.iter().any(|c| c.name == "timeout") {
        report.timed_out = true;
    }
    report.server = lock(&p.answer).take();
    report.elapsed_ms = ms(started.elapsed());
    report
}

// ---------------------------------------------------------------------------
// On a terminal

struct Paint(bool);

impl Paint {
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
    fn green(&self, s: &str) -> String {
        self.wrap("32", s)
    }
    fn red(&self, s: &str) -> String {
        self.wrap("1;31", s)
    }
    fn yellow(&self, s: &str) -> String {
        self.wrap("33", s)
    }
    fn dim(&self, s: &str) -> String {
        self.wrap("2", s)
    }
    fn bold(&self, s: &str) -> String {
        self.wrap("1", s)
    }
}

fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

fn show(r: &Report) {
    let c = Paint(colour());
    let mark = |ok: bool| if ok { c.green("✓") } else { c.red("✗") };
    for ch in &r.config_checks {
        outln!("{} {:<8} {}", mark(ch.ok), ch.name, ch.detail);
        if let Some(f) = &ch.fix {
            outln!("  {} {f}", c.yellow("fix:"));
        }
    }
    let p = &r.paths;
    if let Some(l) = &p.login_shell {
        let from = match p.login_shell_from {
            Some("fallback") => " (the shell did not answer: this process's)",
            _ => "",
        };
        outln!("  PATH, login shell{from}: {}", c.dim(l));
    }
    if p.login_shell.as_deref() == Some(p.process.as_str()) {
        outln!("  PATH, this shell:  {}", c.dim("the same"));
    } else {
        outln!("  PATH, this shell:  {}", c.dim(&p.process));
    }
    match (p.daemon_pid, &p.daemon) {
        (Some(pid), Some(d)) if p.login_shell.as_deref() == Some(d.as_str()) => {
            outln!(
                "  PATH, daemon (pid {pid}): {}",
                c.dim("the same as the login shell's")
            )
        }
        (Some(pid), Some(d)) => outln!("  PATH, daemon (pid {pid}): {}", c.dim(d)),
        (Some(pid), None) => outln!("  PATH, daemon (pid {pid}): {}", c.dim("unknown")),
        _ => outln!("  PATH, daemon: {}", c.dim("not running")),
    }
    if let Some(t) = &r.token_store {
        outln!("  sign-in secrets:   {}", c.dim(t));
    }
    for s in &r.servers {
        outln!("");
        let head = match (&s.server, s.disabled && s.checks.len() == 1) {
            (_, true) => c.dim("disabled"),
            (Some(a), _) => format!(
                "{} {} · MCP {} · {} tools, {} prompts, {} resources · {} ms",
                a.name.as_deref().unwrap_or("?"),
                a.version.as_deref().unwrap_or("?"),
                a.protocol_version,
                a.tools.map_or("?".into(), |n| n.to_string()),
                a.prompts.map_or("?".into(), |n| n.to_string()),
                a.resources.map_or("?".into(), |n| n.to_string()),
                a.initialize_ms
            ),
            (None, _) if s.timed_out => c.red("timed out"),
            (None, _) => String::new(),
        };
        let sign = if s.disabled && s.checks.len() == 1 {
            c.dim("-")
        } else {
            mark(s.ok)
        };
        let line = format!("{sign} {}  {}  {head}", c.bold(&s.name), c.dim(s.transport));
        outln!("{}", line.trim_end());
        if !s.target.is_empty() {
            outln!("    {}", c.dim(&s.target));
        }
        if s.disabled && s.checks.len() == 1 {
            continue;
        }
        for ch in &s.checks {
            let mut lines = ch.detail.lines();
            outln!(
                "  {} {:<9} {}",
                mark(ch.ok),
                ch.name,
                lines.next().unwrap_or("")
            );
            for l in lines {
                outln!("      {}", c.dim(l));
            }
            if let Some(f) = &ch.fix {
                outln!("      {} {f}", c.yellow("fix:"));
            }
        }
    }
    let bad = r.servers.iter().filter(|s| !s.ok).count();
    outln!("");
    if r.ok {
        outln!(
            "{}",
            c.green(&format!("all ok: {}", servers_n(r.servers.len())))
        );
    } else {
        let config_bad = r.config_checks.iter().any(|c| !c.ok);
        outln!(
            "{}",
            c.red(&format!(
                "{bad} of {} with problems{}",
                servers_n(r.servers.len()),
                if config_bad { ", and the config" } else { "" }
            ))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_their_server() {
        assert_eq!(
            server_of_field("mcpServers.gh.env.TOKEN").as_deref(),
            Some("gh")
        );
        assert_eq!(server_of_field("servers.x").as_deref(), Some("x"));
        assert_eq!(
            server_of_field(r#"mcpServers["a b"].command"#).as_deref(),
            Some("a b")
        );
        assert_eq!(server_of_field("namespacing.separator"), None);
        assert_eq!(server_of_field("servers"), None);
    }

    #[test]
    fn lines_after_a_cut_entry_map_back_to_the_file() {
        let before = "{\n \"mcpServers\": {\n  \"a\": {\n   \"command\": 1\n  },\n  \"b\": { \"command\": 2 }\n }\n}\n";
        let after = mcphost::config::edit::remove_server(before, "a").unwrap();
        let cut = Cut::between(before, &after);
        // "b" was on line 6; it is on line 3 once "a" is gone.
        assert_eq!(
            after.lines().nth(2).map(str::trim),
            Some("\"b\": { \"command\": 2 }")
        );
        assert_eq!(original_line(3, &[cut]), 6);
        assert_eq!(original_line(1, &[cut]), 1);
    }

    #[test]
    fn unset_variables_are_read_from_the_message() {
        assert_eq!(
            unset_variables("variable TOKEN is not set and has no default"),
            Some(vec!["TOKEN".to_owned()])
        );
        assert_eq!(
            unset_variables("variables A, B are not set and have no default"),
            Some(vec!["A".to_owned(), "B".to_owned()])
        );
        assert_eq!(unset_variables("must be a string"), None);
    }
}
