//! The `mcphost` command line. Its flags, subcommands, JSON shapes and exit
//! codes are a contract other tools depend on; see README.md and docs/ipc.md.
//!
//! Exit codes: 0 success, 1 a tool result with `isError`, 2 a protocol,
//! transport or usage error, 3 `status` when no daemon runs.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

/// `println!` that goes quiet when stdout is a closed pipe (`mcphost tools
/// | head`) instead of panicking; the command still ends with its own exit
/// code (1 for a tool error, not 0).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        use std::sync::atomic::Ordering;
        if !crate::STDOUT_CLOSED.load(Ordering::Relaxed) {
            let mut out = std::io::stdout().lock();
            if let Err(e) = writeln!(out, $($arg)*).and_then(|_| out.flush()) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    crate::STDOUT_CLOSED.store(true, Ordering::Relaxed);
                }
            }
        }
    }};
}

/// Set by `outln!` once stdout is a closed pipe.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

mod audit;
mod auth;
mod autostart;
mod backend;
mod bridge;
mod daemon_ctl;
mod doctor;
mod given_env;
mod hidden;
mod import;
mod inspect;
mod interactive;
mod logs;
mod output;
mod pins;
mod resources;
mod running;
mod service;
mod wait;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use mcphost::client::{ElicitationPolicy, Host, PolicyHost, SamplingPolicy};
use mcphost::config::duration::parse_duration;
use mcphost::protocol::RawValue;
use mcphost::transport::stdio::StdioConfig;
use serde_json::json;

use backend::Backend;
use output::Out;

#[derive(Parser)]
#[command(
    name = "mcphost",
    version,
    about = "The host side of the Model Context Protocol",
    next_help_heading = "Global options",
    after_help = "Examples:
  mcphost import claude-desktop --consolidate   move an app's servers onto mcphost
  mcphost servers --wait                        every server's state, once settled
  mcphost call fs__read_text_file '{\"path\":\"/etc/hostname\"}'
  mcphost --direct 'npx -y @modelcontextprotocol/server-memory' tools   no daemon, no config"
)]
struct Cli {
    /// Daemon socket [env: MCPHOST_SOCKET; default: /run/user/UID/mcphost/mcphost.sock, else ~/.cache/mcphost/mcphost.sock].
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Config file [env: MCPHOST_CONFIG; default: ~/.config/mcphost/config.json].
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Machine-readable JSON on stdout (and JSON errors on stderr).
    #[arg(long, global = true)]
    json: bool,
    /// Run against an in-process engine instead of the daemon: an http(s)
    /// URL or a command line, optionally NAME=SPEC (repeatable).
    #[arg(long, global = true, value_name = "SPEC")]
    direct: Vec<String>,
    /// More logging on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Answer servers' elicitation requests without asking anyone, and
    /// advertise the elicitation capability (form mode). For --direct,
    /// `daemon` and `inspect`; without it elicitation is not advertised.
    #[arg(long, global = true, value_enum, value_name = "POLICY")]
    on_elicitation: Option<OnElicitation>,
    /// Answer servers' sampling requests without asking anyone (`decline`:
    /// the "user rejected" error, -1), and advertise the sampling capability.
    /// For --direct, `daemon` and `inspect`.
    #[arg(long, global = true, value_enum, value_name = "POLICY")]
    on_sampling: Option<OnSampling>,
    /// Speak exactly this protocol revision to the servers of --direct and
    /// `inspect` instead of negotiating (the daemon: `protocolVersion` per
    /// server in the config).
    #[arg(long, global = true, value_name = "REVISION", value_parser = revision)]
    protocol_version: Option<mcphost::protocol::ProtocolVersion>,
    /// Never start (or restart) the daemon: without one running, commands
    /// and `bridge` fail. Also `"daemon": {"autostart": false}` in the config.
    #[arg(long, global = true, env = "MCPHOST_NO_AUTOSTART",
          value_parser = clap::builder::BoolishValueParser::new())]
    no_autostart: bool,
    #[command(subcommand)]
    command: Command,
}

fn revision(text: &str) -> Result<mcphost::protocol::ProtocolVersion, String> {
    text.parse().map_err(|_| {
        let known: Vec<&str> = mcphost::protocol::ProtocolVersion::ALL
            .iter()
            .map(|v| v.as_str())
            .collect();
        format!("not a revision mcphost knows ({})", known.join(", "))
    })
}

/// `--on-elicitation`: what to answer to `elicitation/create`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnElicitation {
    /// `{"action":"decline"}`.
    Decline,
    /// `{"action":"cancel"}`.
    Cancel,
    /// `{"action":"accept"}` with the schema's defaults; `cancel` when a
    /// required field has no default.
    AcceptDefaults,
}

/// `--on-sampling`: what to answer to `sampling/createMessage`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnSampling {
    /// The spec's "User rejected sampling request" error (code -1).
    Decline,
}

impl Cli {
    /// The host the policy flags describe (no capabilities without flags).
    fn policy_host(&self) -> PolicyHost {
        PolicyHost::new(
            self.on_elicitation.map(|p| match p {
                OnElicitation::Decline => ElicitationPolicy::Decline,
                OnElicitation::Cancel => ElicitationPolicy::Cancel,
                OnElicitation::AcceptDefaults => ElicitationPolicy::AcceptDefaults,
            }),
            self.on_sampling.map(|p| match p {
                OnSampling::Decline => SamplingPolicy::Decline,
            }),
        )
    }

    /// Whether this command starts stdio servers in this process: then it
    /// starts the process supervisor first.
    fn runs_servers(&self) -> bool {
        !self.direct.is_empty()
            || matches!(
                self.command,
                Command::Daemon { action: None, .. } | Command::Inspect(_) | Command::Doctor { .. }
            )
    }
}

#[derive(Subcommand)]
enum DaemonAction {
    /// Whether a daemon runs: its pid, socket, config, version, who started
    /// it and its log. Never starts one.
    #[command(after_help = "Examples:
  mcphost daemon status
  mcphost daemon status --json")]
    Status,
    /// Stop the daemon (its servers first). The next command that needs it
    /// starts it again.
    #[command(after_help = "Example:
  mcphost daemon stop")]
    Stop,
    /// Stop the daemon and start it again from here: it then has this
    /// shell's environment (for `${VAR}` in the config).
    #[command(after_help = "Example:
  export API_TOKEN=...; mcphost daemon restart   the daemon now sees API_TOKEN")]
    Restart,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon in the foreground (logs on stderr); or see, stop or
    /// restart the one that runs.
    #[command(after_help = "Examples:
  mcphost daemon -v           in the foreground, info logs on stderr
  mcphost daemon status       is one running, and who started it")]
    Daemon {
        #[command(subcommand)]
        action: Option<DaemonAction>,
        /// Who started it, for `daemon status` (set when a command starts it).
        #[arg(long, hide = true, value_name = "WHO")]
        started_by: Option<String>,
        /// Most clients connected at once; one more gets a JSON-RPC error and is closed.
        #[arg(long, value_name = "N", default_value_t = mcphost::daemon::DEFAULT_MAX_CONNECTIONS, value_parser = at_least_one)]
        max_connections: usize,
        /// Most requests one client may have in flight; more get a JSON-RPC error.
        #[arg(long, value_name = "N", default_value_t = mcphost::engine::DEFAULT_MAX_IN_FLIGHT, value_parser = at_least_one)]
        max_requests_per_connection: usize,
    },
    /// Daemon version, socket, uptime, config path and any config error.
    #[command(after_help = "Examples:
  mcphost status
  mcphost status --json")]
    Status,
    /// List servers, or manage one.
    #[command(after_help = "Examples:
  mcphost servers                 NAME STATE TRANSPORT PROTOCOL TOOLS PID COMMAND/ERROR
  mcphost servers --wait=30s      once every server has settled (at most 30 s)
  mcphost servers restart fs")]
    Servers {
        #[command(subcommand)]
        action: Option<ServersAction>,
        /// First wait until every server has settled (ready, failed,
        /// disabled, or waiting for a sign-in), at most this long; shows
        /// progress on a terminal and names the slowest starts.
        #[arg(long, value_name = "LIMIT", num_args = 0..=1, require_equals = true,
              default_missing_value = "60s", value_parser = parse_duration)]
        wait: Option<Duration>,
        /// Tool calls per server and per tool: calls, errors, p50, p99, max.
        #[arg(long)]
        stats: bool,
    },
    /// List the catalog's tools.
    #[command(after_help = "Examples:
  mcphost tools
  mcphost tools --server fs --cost")]
    Tools {
        /// Only this server's tools.
        #[arg(long)]
        server: Option<String>,
        /// Each tool's token cost (name, description and input schema) and the total.
        #[arg(long)]
        cost: bool,
    },
    /// Call a tool: its catalog name, or its own name if exactly one server has it.
    #[command(after_help = "Examples:
  mcphost call fs__read_text_file '{\"path\":\"/etc/hostname\"}'
  mcphost call read_text_file '{\"path\":\"/etc/hostname\"}' --timeout 5s")]
    Call {
        /// The tool: `SERVER__TOOL` as `tools` lists it, or the tool's own name.
        tool: String,
        /// Arguments as a JSON object.
        args: Option<String>,
        /// Hard limit for the call (e.g. 500ms, 30s, 5m).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
    },
    /// List resources and resource templates (URIs as the daemon exposes them).
    #[command(after_help = "Examples:
  mcphost resources
  mcphost resources --server ev --templates")]
    Resources {
        /// Only this server's.
        #[arg(long)]
        server: Option<String>,
        /// Only the templates.
        #[arg(long)]
        templates: bool,
    },
    /// Read a resource: text is printed, blobs are summarised (--json: the result).
    #[command(after_help = "Examples:
  mcphost read demo://resource/dynamic/text/1
  mcphost read 'mcphost://ev/demo://resource/static/document/features.md'")]
    Read {
        /// The URI as `resources` lists it.
        uri: String,
    },
    /// List the catalog's prompts.
    #[command(after_help = "Examples:
  mcphost prompts                 NAME SERVER ARGUMENTS (* required) DESCRIPTION
  mcphost prompts --server ev")]
    Prompts {
        /// Only this server's prompts.
        #[arg(long)]
        server: Option<String>,
    },
    /// Get a prompt: its catalog name, or its own name if exactly one server has it.
    #[command(after_help = "Examples:
  mcphost prompt ev__simple-prompt
  mcphost prompt ev__args-prompt '{\"city\":\"Paris\"}'")]
    Prompt {
        /// The prompt: `SERVER__PROMPT` as `prompts` lists it, or its own name.
        name: String,
        /// Arguments as a JSON object of strings.
        args: Option<String>,
    },
    /// The audit log: one line per tool call, resource read and prompt get,
    /// and per request a server put to a host (oldest first).
    #[command(after_help = "Examples:
  mcphost audit --since 1h
  mcphost audit --server fs --host Cursor --limit 20
  mcphost audit --since 2026-12-01T00:00:00Z --json")]
    Audit(audit::AuditArgs),
    /// A server's last stderr lines; with -f, follow every server's (or
    /// NAME's) log messages, stderr lines and state changes until Ctrl-C.
    #[command(after_help = "Examples:
  mcphost logs fs --lines 50
  mcphost logs -f                 every server, until Ctrl-C")]
    Logs {
        /// The server (required without -f).
        name: Option<String>,
        /// Follow: print each log message, stderr line and state change as
        /// it happens, named by server.
        #[arg(short, long)]
        follow: bool,
        /// How many stderr lines to show (without -f).
        #[arg(long, default_value_t = 200, conflicts_with = "follow")]
        lines: usize,
    },
    /// Sign in to HTTP servers (OAuth) and manage their tokens.
    #[command(after_help = "Examples:
  mcphost auth login api
  mcphost auth status")]
    Auth {
        #[command(subcommand)]
        action: AuthAction,
    },
    /// A stdio MCP server that relays to the daemon, for any MCP host.
    #[command(after_help = "Examples (an app's config names the command):
  mcphost bridge
  mcphost bridge --profile cursor
In Claude Desktop: \"mcphost\": {\"command\": \"/path/to/mcphost\", \"args\": [\"bridge\"]}")]
    Bridge {
        /// Shape this host's session by a config profile (a tool budget,
        /// search mode, a schema profile), for hosts that cannot send
        /// `mcphost/session/configure`; an unknown profile fails at start.
        #[arg(long, env = "MCPHOST_PROFILE", value_name = "NAME")]
        profile: Option<String>,
    },
    /// Import the MCP servers of other hosts' configs (Claude Desktop,
    /// Claude Code, VS Code, Cursor, Windsurf, Zed, Goose, Continue,
    /// mark3labs/mcphost) into this config; --list shows what is there.
    Import(import::ImportArgs),
    /// Check every configured server (or NAME…): command, PATH, runtime,
    /// cwd, a real start; for HTTP DNS, TCP, TLS and sign-in. Each problem
    /// with its fix; exit 1 when any server has one (docs/doctor.md).
    #[command(after_help = "Examples:
  mcphost doctor
  mcphost doctor fs api --timeout 10s")]
    Doctor {
        /// Only these servers (a disabled one named here is checked too).
        names: Vec<String>,
        /// Per server, start included.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        timeout: Duration,
        /// The whole run: servers not started by then are reported unchecked.
        #[arg(long, default_value = "120s", value_parser = parse_duration)]
        total_timeout: Duration,
        /// Servers checked at once.
        #[arg(long, default_value_t = 4, value_parser = at_least_one)]
        jobs: usize,
    },
    /// Have the OS run the daemon: a systemd user unit (Linux) or a launchd
    /// agent (macOS).
    #[command(after_help = "Examples:
  mcphost service install --now
  mcphost service status")]
    Service {
        #[command(subcommand)]
        action: service::Action,
    },
    /// Start one stdio server, show its handshake and catalog, then stop it.
    ///
    /// With no command, inspects the bundled mcphost-testserver.
    #[command(after_help = "Examples:
  mcphost inspect
  mcphost inspect --call echo --args '{\"text\":\"hi\"}'
  mcphost inspect --env KEY=VALUE -- npx -y @modelcontextprotocol/server-everything")]
    Inspect(InspectArgs),
    /// Pinned tool and prompt definitions per server: pinned, changed,
    /// added or removed since first listed; diff, approve, reset.
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "Examples:
  mcphost pins                    SERVER KIND NAME STATE PINNED AT HASH
  mcphost pins fs --json
  mcphost pins diff fs            what changed, old against new
  mcphost pins approve fs         pin what fs lists now"
    )]
    Pins {
        #[command(subcommand)]
        action: Option<pins::PinsAction>,
        /// Only this server.
        server: Option<String>,
    },
}

/// What `mcphost inspect` is given.
#[derive(clap::Args)]
struct InspectArgs {
    /// The server's name in the output (default: the command's file name).
    #[arg(long)]
    name: Option<String>,
    /// An environment variable for the server (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// The server's working directory.
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Pass this process's whole environment to the server (default:
    /// the minimal one of docs/config.md, plus --env).
    #[arg(long)]
    inherit_env: bool,
    /// Then call this tool.
    #[arg(long, value_name = "TOOL")]
    call: Option<String>,
    /// The --call's arguments, a JSON object.
    #[arg(long, default_value = "{}", value_name = "JSON")]
    args: String,
    /// Hard limit for each request, progress or not.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    timeout: Duration,
    /// The server's command line, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Subcommand)]
enum AuthAction {
    /// Sign in to a server of the config (or of --direct) in the browser;
    /// the token is stored for every mcphost process of this user.
    #[command(after_help = "Examples:
  mcphost auth login api
  mcphost --direct https://example.com/mcp auth login example")]
    Login {
        /// The server, as named in the config (or by --direct).
        name: String,
    },
    /// Stored sign-ins: server, authorization server, scope, expiry.
    #[command(after_help = "Example:
  mcphost auth status --json")]
    Status,
    /// Delete a server's stored tokens.
    #[command(after_help = "Example:
  mcphost auth logout api")]
    Logout {
        /// The server, as named in the config.
        name: String,
    },
}

#[derive(Subcommand)]
enum ServersAction {
    /// List servers (the default).
    #[command(after_help = "Examples:
  mcphost servers list
  mcphost servers list --json")]
    List,
    /// Stop a server and start it again (a new process, its entry read again).
    #[command(after_help = "Example:
  mcphost servers restart fs && mcphost servers --wait")]
    Restart {
        /// The server, as named in the config.
        name: String,
    },
    /// Enable a server in the config file and start it.
    #[command(after_help = "Example:
  mcphost servers enable fs")]
    Enable {
        /// The server, as named in the config.
        name: String,
    },
    /// Disable a server in the config file and stop it (its entry is kept).
    #[command(after_help = "Example:
  mcphost servers disable fs")]
    Disable {
        /// The server, as named in the config.
        name: String,
    },
    /// The server's last stderr lines (as `mcphost logs NAME`).
    #[command(after_help = "Example:
  mcphost servers logs fs --lines 20")]
    Logs {
        /// The server, as named in the config.
        name: String,
        /// How many stderr lines to show.
        #[arg(long, default_value_t = 200)]
        lines: usize,
    },
    /// Add a server to the config file: `--url URL` or `-- CMD ARGS...`.
    #[command(after_help = "Examples:
  mcphost servers add fs -- npx -y @modelcontextprotocol/server-filesystem ~/src
  mcphost servers add api --url https://example.com/mcp --header 'Authorization=Bearer ${API_TOKEN}'")]
    Add {
        /// The new server's name (its tools are NAME__TOOL).
        name: String,
        /// An HTTP server's URL (Streamable HTTP, falling back to HTTP+SSE).
        #[arg(long, conflicts_with = "command")]
        url: Option<String>,
        /// An HTTP header sent with every request (repeatable); `${VAR}` is
        /// read when the daemon starts the server.
        #[arg(long = "header", value_name = "K=V", requires = "url")]
        headers: Vec<String>,
        /// An environment variable for a stdio server (repeatable).
        #[arg(long = "env", value_name = "K=V")]
        env: Vec<String>,
        /// A stdio server's command line, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Remove a server from the config file (and stop it).
    #[command(after_help = "Example:
  mcphost servers remove fs")]
    Remove {
        /// The server, as named in the config.
        name: String,
    },
}

fn init_tracing(verbose: u8, daemon: bool, direct: bool, doctor: bool) {
    let default = match (verbose, daemon) {
        (0, false) if doctor => "error",
        // A --direct server that fails to start or to list fails the
        // command, which says why in one line; the supervisor's and the
        // registry's warnings would repeat it.
        (0, false) if direct => "warn,mcphost_registry=error",
        (0, false) => "warn",
        (0, true) | (1, _) => "info",
        (2, _) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // A command's warnings are for the person who typed it: one plain line
    // each. The daemon's log, -v and RUST_LOG (asking for a developer's log)
    // keep levels, times and targets.
    let developer = std::env::var_os("RUST_LOG").is_some_and(|v| !v.is_empty());
    if daemon || verbose > 0 || developer {
        fmt.init();
    } else {
        fmt.event_format(PlainLine).init();
    }
}

/// `mcphost: warning: MESSAGE (server="x")`: the event's fields, then those
/// of its spans (which server it is about).
struct PlainLine;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for PlainLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            _ => "note",
        };
        write!(writer, "mcphost: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        let spans: Vec<String> = ctx
            .event_scope()
            .into_iter()
            .flatten()
            .filter_map(|span| {
                let ext = span.extensions();
                let fields = ext.get::<tracing_subscriber::fmt::FormattedFields<N>>()?;
                (!fields.is_empty()).then(|| fields.to_string())
            })
            .collect();
        if !spans.is_empty() {
            write!(writer, " ({})", spans.join(", "))?;
        }
        writeln!(writer)
    }
}

/// A count that must be at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn key_values(items: &[String], what: &str) -> Result<BTreeMap<String, String>> {
    items
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .with_context(|| format!("{what} {kv:?} is not KEY=VALUE"))
        })
        .collect()
}

/// An error that already carries its exit code.
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}", self.0)
    }
}
impl std::error::Error for Exit {}

fn main() -> ExitCode {
    let cli: Cli = output::parse_args();
    // Before any thread exists: the supervisor is a fork of this process
    // as it is now, small, not of the grown runtime.
    let supervisor = cli
        .runs_servers()
        .then(mcphost::transport::supervisor::start);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mcphost: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async_main(cli, supervisor))
}

async fn async_main(cli: Cli, supervisor: Option<std::io::Result<()>>) -> ExitCode {
    init_tracing(
        cli.verbose,
        matches!(cli.command, Command::Daemon { action: None, .. }),
        !cli.direct.is_empty(),
        // doctor reports every failure itself, with its fix.
        matches!(cli.command, Command::Doctor { .. }),
    );
    if let Some(Err(e)) = supervisor {
        tracing::warn!("no process supervisor ({e}): each server gets a watchdog process");
    }
    let out = Out { json: cli.json };
    // On a terminal, with no policy flag, the person answers the servers.
    let terminal = (cli.policy_host() == PolicyHost::default()
        && interactive::TerminalHost::available())
    .then(|| Arc::new(interactive::TerminalHost::new()));
    let result = run(cli, &out, terminal.clone()).await;
    // A prompt still open (its server died, its call timed out) leaves the
    // terminal raw, and would keep the runtime from shutting down until
    // answered: put the terminal back, say why, and leave at once.
    let prompt_open = terminal.as_ref().is_some_and(|t| t.restore_terminal());
    let code = match result {
        Ok(code) => code,
        Err(e) => match e.downcast_ref::<Exit>() {
            Some(Exit(code)) => *code,
            None => {
                out.error(&e);
                2
            }
        },
    };
    if prompt_open {
        std::process::exit(i32::from(code));
    }
    ExitCode::from(code)
}

async fn run(cli: Cli, out: &Out, terminal: Option<Arc<interactive::TerminalHost>>) -> Result<u8> {
    let socket = mcphost::ipc::resolve_socket_path(cli.socket.clone());
    let policy = cli.policy_host();
    let person = terminal.map(|t| t as Arc<dyn Host>);
    let host: Arc<dyn Host> = match &person {
        Some(p) => p.clone(),
        None => Arc::new(policy),
    };
    run_command(cli, out, socket, policy, person, host).await
}

async fn run_command(
    cli: Cli,
    out: &Out,
    socket: PathBuf,
    policy: PolicyHost,
    person: Option<Arc<dyn Host>>,
    host: Arc<dyn Host>,
) -> Result<u8> {
    let auto = autostart::Autostart {
        socket: socket.clone(),
        config: cli.config.clone(),
        refused: cli.no_autostart,
        quiet: cli.json,
    };
    match cli.command {
        Command::Daemon {
            action: Some(action),
            ..
        } => daemon_ctl::run(action, &auto, out).await,
        Command::Daemon {
            action: None,
            started_by,
            max_connections,
            max_requests_per_connection,
        } => {
            if !cli.direct.is_empty() {
                anyhow::bail!("`daemon` does not take --direct");
            }
            run_daemon(
                cli.config.clone(),
                socket,
                policy,
                started_by,
                max_connections,
                max_requests_per_connection,
            )
            .await
        }
        Command::Auth { action } => {
            refuse_policy_flags(&policy, "auth")?;
            run_auth(cli.config.clone(), &cli.direct, action, out).await
        }
        Command::Import(args) => {
            refuse_policy_flags(&policy, "import")?;
            if !cli.direct.is_empty() {
                anyhow::bail!("`import` does not take --direct");
            }
            import::run(args, cli.config.clone(), cli.socket.clone(), out).await
        }
        Command::Bridge { profile } => {
            refuse_policy_flags(&policy, "bridge")?;
            bridge::run(&auto, profile.as_deref()).await?;
            Ok(0)
        }
        Command::Doctor {
            names,
            timeout,
            total_timeout,
            jobs,
        } => {
            refuse_policy_flags(&policy, "doctor")?;
            doctor::run(doctor::Options {
                config: cli.config.clone(),
                socket,
                names,
                direct: cli.direct.clone(),
                timeout,
                total: total_timeout,
                jobs,
                json: cli.json,
            })
            .await
        }
        Command::Service { action } => {
            refuse_policy_flags(&policy, "service")?;
            service::run(action, &auto, out).await
        }
        Command::Inspect(args) => run_inspect(args, cli.json, cli.protocol_version, host).await,
        command => {
            // `audit` reads; it never starts a daemon to do so.
            if let Some(done) = audit::offline(&command, &cli.direct, &auto.socket, out).await {
                return done;
            }
            let backend = if cli.direct.is_empty() {
                refuse_policy_flags(&policy, "a command sent to the daemon")?;
                // `status` reports; it never starts a daemon.
                if matches!(command, Command::Status)
                    && !daemon_ctl::running_or_say(&auto, out).await
                {
                    return Ok(daemon_ctl::NOT_RUNNING);
                }
                Backend::daemon(&auto, person).await?
            } else {
                Backend::direct(
                    &cli.direct,
                    host,
                    policy.or_decline(),
                    person.is_some(),
                    cli.protocol_version,
                )
                .await?
            };
            let code = dispatch(&backend, command, out).await;
            backend.close().await;
            code
        }
    }
}

/// `mcphost daemon`: the daemon itself, in this process.
async fn run_daemon(
    config: Option<PathBuf>,
    socket: PathBuf,
    policy: PolicyHost,
    started_by: Option<String>,
    max_connections: usize,
    max_requests_per_connection: usize,
) -> Result<u8> {
    let config = mcphost::config::location::resolve_config_path(config)?;
    let service = std::env::var(service::SERVICE_ENV)
        .ok()
        .filter(|v| !v.is_empty());
    let started_by = match (&service, started_by) {
        (Some(manager), _) => manager.clone(),
        (None, Some(who)) => who,
        (None, None) => daemon_ctl::parent(),
    };
    let ran = mcphost::daemon::run(mcphost::daemon::DaemonOptions {
        socket: socket.clone(),
        config,
        max_connections,
        session: mcphost::engine::SessionLimits {
            max_in_flight: max_requests_per_connection,
        },
        fallback: policy.or_decline(),
        // Test-only: lets tests see the CLI restart an outdated daemon.
        report_version: std::env::var(autostart::FAKE_VERSION_ENV)
            .ok()
            .filter(|v| !v.is_empty()),
        service,
        started_by: Some(started_by),
    })
    .await;
    match ran {
        Err(mcphost::daemon::DaemonError::Ipc(
            e @ mcphost::ipc::IpcError::AlreadyRunning { .. },
        )) => Err(daemon_ctl::already_running(e, &socket).await),
        other => other.map(|()| 0).map_err(Into::into),
    }
}

/// `mcphost auth status|login|logout`.
async fn run_auth(
    config_path: Option<PathBuf>,
    direct: &[String],
    action: AuthAction,
    out: &Out,
) -> Result<u8> {
    let config = || -> Result<mcphost::config::HostConfig> {
        let loc = mcphost::config::location::resolve_config_path(config_path.clone())?;
        let cfg = mcphost::config::load(&loc.path, &mcphost::auth::process_env)?;
        say_config_warnings(&cfg.warnings);
        Ok(cfg)
    };
    let cfg = match (&action, direct.is_empty()) {
        (AuthAction::Status, _) => None,
        (_, false) => Some(backend::direct_config(direct).await?),
        (_, true) => Some(config()?),
    };
    match (action, cfg) {
        (AuthAction::Status, _) => auth::status(out),
        (AuthAction::Login { name }, Some(cfg)) => auth::login(&cfg, &name, out).await,
        (AuthAction::Logout { name }, Some(cfg)) => auth::logout(&cfg, &name, out).await,
        _ => Ok(2),
    }
}

/// `mcphost inspect`: one server started here, without the daemon.
async fn run_inspect(
    i: InspectArgs,
    json: bool,
    protocol_version: Option<mcphost::protocol::ProtocolVersion>,
    host: Arc<dyn Host>,
) -> Result<u8> {
    let InspectArgs {
        name,
        env,
        cwd,
        inherit_env,
        call,
        args,
        timeout,
        command,
    } = i;
    let (program, rest) = match command.split_first() {
        Some((p, r)) => (p.clone(), r.to_vec()),
        None => (inspect::bundled_testserver()?, Vec::new()),
    };
    let name = name.unwrap_or_else(|| {
        std::path::Path::new(&program)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "server".to_owned())
    });
    let mut cfg = StdioConfig::new(program, rest);
    cfg.cwd = cwd;
    cfg.inherit_env = inherit_env;
    cfg.env = key_values(&env, "--env")?;
    let arguments = RawValue::from_string(args.clone())
        .with_context(|| format!("--args is not valid JSON: {args}"))?;
    let opts = mcphost::client::ClientOptions {
        request_timeout: timeout,
        max_request_timeout: timeout,
        host,
        protocol_version,
        ..Default::default()
    };
    inspect::inspect(&name, cfg, call, arguments, json, opts).await?;
    Ok(0)
}

/// The policy flags answer requests from servers this process connects to;
/// through the daemon, the daemon's own flags decide.
fn refuse_policy_flags(policy: &PolicyHost, what: &str) -> Result<()> {
    if *policy != PolicyHost::default() {
        anyhow::bail!(
            "--on-elicitation and --on-sampling do not apply to {what}: they work with \
             --direct, `daemon` and `inspect` (through the daemon, the daemon's own flags decide)"
        );
    }
    Ok(())
}

async fn dispatch(b: &Backend, command: Command, out: &Out) -> Result<u8> {
    match command {
        Command::Status => {
            let s = b.request("mcphost/status", None).await?;
            out.status(&s)?;
        }
        Command::Servers {
            action,
            wait,
            stats,
        } => servers(b, action.unwrap_or(ServersAction::List), wait, stats, out).await?,
        Command::Tools { server, cost } => {
            if let Some(s) = &server {
                b.check_server(s).await?;
            }
            let tools = b.all_tools().await?;
            let encoding = match cost {
                true => b.request("mcphost/status", None).await?["tokenEncoding"].clone(),
                false => serde_json::Value::Null,
            };
            out.tools(&tools, server.as_deref(), cost.then_some(&encoding))?;
        }
        Command::Call {
            tool,
            args,
            timeout,
        } => {
            let name = b.resolve_tool(&tool).await?;
            let args = match args {
                Some(a) => Some(
                    RawValue::from_string(a.clone())
                        .with_context(|| format!("ARGS is not valid JSON: {a}"))?,
                ),
                None => None,
            };
            let result = b.call(&name, args, timeout).await?;
            let is_error = out.call_result(&result)?;
            return Ok(if is_error { 1 } else { 0 });
        }
        Command::Resources { server, templates } => {
            if let Some(s) = &server {
                b.check_server(s).await?;
            }
            let (list, tpls) = resources::all_resources(b).await?;
            out.resources(&list, &tpls, server.as_deref(), templates)?;
        }
        Command::Read { uri } => out.read_result(&resources::read(b, &uri).await?)?,
        Command::Prompts { server } => {
            if let Some(s) = &server {
                b.check_server(s).await?;
            }
            out.prompts(&resources::all_prompts(b).await?, server.as_deref())?;
        }
        Command::Prompt { name, args } => {
            let prompt = resources::resolve_prompt(b, &name).await?;
            out.prompt_result(&resources::get_prompt(b, &prompt, args).await?)?;
        }
        Command::Logs {
            name,
            follow,
            lines,
        } => {
            if follow {
                logs::follow(b, name.as_deref(), out).await?;
            } else {
                let Some(name) = name else {
                    anyhow::bail!("`logs` needs a server NAME, or -f to follow every server");
                };
                logs::tail(b, &name, lines, out).await?;
            }
        }
        Command::Pins { action, server } => pins::run(b, action, server, out).await?,
        Command::Audit(args) => audit::show(b, args, out).await?,
        Command::Daemon { .. }
        | Command::Bridge { .. }
        | Command::Import(_)
        | Command::Service { .. }
        | Command::Inspect(_)
        | Command::Doctor { .. }
        | Command::Auth { .. } => {}
    }
    Ok(0)
}

/// `mcphost servers …`.
async fn servers(
    b: &Backend,
    action: ServersAction,
    wait: Option<Duration>,
    stats: bool,
    out: &Out,
) -> Result<()> {
    match action {
        ServersAction::List => {
            let list = match wait {
                Some(limit) => wait::servers(b, limit, out.json).await?,
                None => b.request("mcphost/servers/list", None).await?,
            };
            if stats {
                out.stats(&list)?;
            } else {
                out.servers(&list)?;
            }
            if wait.is_some()
                && !out.json
                && let Some(line) = wait::slowest(&list, 3)
            {
                eprintln!("{line}");
            }
        }
        ServersAction::Restart { name } => {
            let env = given_env::of_server(b, &name).await?;
            b.manage(
                "mcphost/servers/restart",
                json!({ "name": name, "env": env }),
            )
            .await?;
            out.done(&format!("restarting {name}"));
        }
        ServersAction::Enable { name } => {
            let env = given_env::of_server(b, &name).await?;
            b.manage(
                "mcphost/servers/enable",
                json!({ "name": name, "env": env }),
            )
            .await?;
            out.done(&format!("enabled {name}"));
        }
        ServersAction::Disable { name } => {
            b.manage("mcphost/servers/disable", json!({ "name": name }))
                .await?;
            out.done(&format!("disabled {name}"));
        }
        ServersAction::Logs { name, lines } => logs::tail(b, &name, lines, out).await?,
        ServersAction::Add {
            name,
            url,
            headers,
            env,
            command,
        } => {
            let entry = server_entry(&name, url, &headers, &env, &command)?;
            // The entry goes as an object, its keys in the order built.
            let env = given_env::of_entry(&name, &entry);
            let params = mcphost::protocol::set_fields(
                Some(&backend::params(json!({ "name": name, "env": env }))?),
                [("entry".to_owned(), RawValue::from_string(entry)?)],
            )?;
            b.manage_raw("mcphost/servers/add", params).await?;
            out.done(&format!("added {name}"));
        }
        ServersAction::Remove { name } => {
            b.manage("mcphost/servers/remove", json!({ "name": name }))
                .await?;
            out.done(&format!("removed {name}"));
        }
    }
    Ok(())
}

/// `servers add`'s entry as JSON text: a URL with its headers, or a
/// command with its arguments and env.
fn server_entry(
    name: &str,
    url: Option<String>,
    headers: &[String],
    env: &[String],
    command: &[String],
) -> Result<String> {
    Ok(match (url, command.split_first()) {
        // IndexMap keeps the keys in the order people write them.
        (Some(url), None) => {
            let mut e = indexmap::IndexMap::new();
            e.insert("url", json!(url));
            if !headers.is_empty() {
                e.insert("headers", json!(key_values(headers, "--header")?));
            }
            serde_json::to_string(&e)?
        }
        (None, Some((cmd, args))) => {
            let mut e = indexmap::IndexMap::new();
            e.insert("command", json!(cmd));
            e.insert("args", json!(args));
            if !env.is_empty() {
                e.insert("env", json!(key_values(env, "--env")?));
            }
            serde_json::to_string(&e)?
        }
        _ => anyhow::bail!("`servers add {name}` needs either --url URL or -- COMMAND ARGS..."),
    })
}

/// Logs the config's warnings this command has not said yet: it may read
/// the config more than once, and the person is told once.
pub(crate) fn say_config_warnings(warnings: &[mcphost::config::Issue]) {
    static SAID: std::sync::LazyLock<mcphost::config::SaidOnce> =
        std::sync::LazyLock::new(Default::default);
    SAID.say(warnings);
}

#[cfg(test)]
mod help_audit {
    use clap::CommandFactory;

    /// Every gap in `cmd`'s help and its subcommands', as "PATH: what".
    fn gaps(cmd: &clap::Command, path: &str, found: &mut Vec<String>) {
        if cmd.get_about().is_none() && path != "mcphost" {
            found.push(format!("{path}: no description"));
        }
        let examples = [cmd.get_after_help(), cmd.get_after_long_help()]
            .into_iter()
            .flatten()
            .any(|text| text.to_string().contains("Example"));
        if !examples {
            found.push(format!("{path}: no example in --help"));
        }
        for arg in cmd.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if arg.is_hide_set() || builtin {
                continue;
            }
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                found.push(format!("{path}: argument `{}` has no help", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_name() != "help" {
                gaps(sub, &format!("{path} {}", sub.get_name()), found);
            }
        }
    }

    #[test]
    fn every_command_and_flag_has_a_description_and_every_command_an_example() {
        let mut cmd = super::Cli::command();
        cmd.build();
        let mut found = Vec::new();
        gaps(&cmd, "mcphost", &mut found);
        assert!(
            found.is_empty(),
            "{} gaps in --help:\n{}",
            found.len(),
            found.join("\n")
        );
    }
}
