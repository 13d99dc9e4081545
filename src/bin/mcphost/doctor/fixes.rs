//! The fix table: every problem's advice, in one place.

use std::path::Path;
use std::time::Duration;

use mcphost::config::{Hygiene, Issue};
use mcphost::runtime::Runtime;

/// A problem's fix; [`Fix::text`] is the only place advice is written.
pub(super) enum Fix<'a> {
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
    /// Its definitions drifted from their pins (in the running daemon).
    PinsDrift(&'a str),
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
    /// The kernel cannot enforce part of this server's `sandbox`.
    SandboxGap(&'a str),
    /// This server hit its `sandbox`.
    SandboxDenied(&'a str),
    /// As `SandboxGap`, under `"require": true`: the server is not started.
    SandboxRequired(&'a str),
    /// A definition hides text, and what the server's `hygiene` does with it.
    HiddenText(Hygiene),
}

impl Fix<'_> {
    pub(super) fn text(&self) -> String {
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
            Fix::ConfigIssue(i) => config_issue(i),
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
                command_line,
                limit,
            } => hung(command_line.as_deref(), *limit),
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
            Fix::PinsDrift(_)
            | Fix::HiddenText(_)
            | Fix::SandboxGap(_)
            | Fix::SandboxRequired(_)
            | Fix::SandboxDenied(_) => self.trust_text(),
        }
    }

    /// The hints of issue 24's defences: pins, hidden text, the sandbox.
    fn trust_text(&self) -> String {
        match self {
            Fix::PinsDrift(name) => format!(
                "review the change: `mcphost pins diff {name}`; if you trust it, `mcphost pins approve {name}`"
            ),
            Fix::HiddenText(Hygiene::Strip) => "the text is invisible to people but read by models: review the server (a description that hides instructions is tool poisoning); mcphost removes it from what hosts and models are shown (\"hygiene\": \"strip\", docs/config.md)".to_owned(),
            Fix::HiddenText(Hygiene::Keep) => "the text is invisible to people but read by models, and this server's \"hygiene\" is \"keep\": it is relayed to hosts and models as is; review the server (a description that hides instructions is tool poisoning) or set \"hygiene\" to \"strip\" (docs/config.md)".to_owned(),
            Fix::SandboxGap(name) => format!(
                "the rest of the `sandbox` of {name} is enforced; for what is not, use a kernel with a newer Landlock ABI, or set \"network\" to \"none\" or \"any\" (docs/security.md says what each setting enforces)"
            ),
            Fix::SandboxRequired(name) => format!(
                "{name} is not started because its `sandbox` has \"require\": true and this machine cannot enforce all of it: use a kernel with a newer Landlock ABI, set \"network\" to \"none\" or \"any\", or remove \"require\" to run it with what is enforced (docs/security.md says what each setting enforces)"
            ),
            Fix::SandboxDenied(name) => format!(
                "{name} was refused by its `sandbox` config: if it needs that path or the network, add it to \"read\", \"write\" or \"network\" in the server's \"sandbox\" (or set \"sandbox\": false); the line is in `mcphost logs {name}`"
            ),
            _ => String::new(),
        }
    }
}

/// Edit the config where the issue is.
fn config_issue(i: &Issue) -> String {
    format!(
        "edit {} line {}{}",
        i.path.display(),
        i.line,
        if i.field.is_empty() {
            String::new()
        } else {
            format!(" ({})", i.field)
        }
    )
}

/// A server that did not answer in time: a command to run by hand, or
/// (HTTP) the URL to check.
fn hung(command_line: Option<&str>, limit: Duration) -> String {
    match command_line {
        Some(line) => format!(
            "it did not answer within {}: run it by hand to see what it waits for \
             (`mcphost inspect -- {line}`), or give it longer with --timeout (a first npx/uvx \
             run downloads packages)",
            humantime::format_duration(limit)
        ),
        None => format!(
            "the server took the connection but did not answer within {}: check that the URL \
             is its MCP endpoint, or give it longer with --timeout",
            humantime::format_duration(limit)
        ),
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
