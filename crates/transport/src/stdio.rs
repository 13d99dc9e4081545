//! stdio transport: one child process group per server.
//!
//! # Owning the processes
//!
//! No server process may outlive the host, even a host that is SIGKILLed, and
//! an `npx` server is a tree (npm → sh → node), so killing one pid is not enough.
//! - Each server runs in its own process group, and every signal goes to the group.
//! - A host that started the process supervisor ([`crate::supervisor`]: the
//!   daemon and the CLI do, first thing in `main`) spawns every server
//!   through it. The server is its own group's leader and the supervisor's
//!   child; the supervisor reports its exit status, signals its group on
//!   request while it holds it, and SIGKILLs every group it holds when the
//!   host dies (EOF on their socket pair). [`TransportControl::pid`] and
//!   [`TransportControl::server_pid`] are both the server's pid. One small
//!   process for all servers, forked before the host grew: 100 servers
//!   no longer mean 100 copies of a grown daemon.
//! - Without it (the C library, an embedded engine, or after the supervisor
//!   died) each server gets a watchdog of its own, below.
//! - All watchdog spawns happen on one spawner thread that lives as long as
//!   the process: `PR_SET_PDEATHSIG` fires when the *thread* that forked
//!   exits, so a pooled or short-lived thread would kill servers early.
//! - Between fork and exec the child turns itself into a tiny watchdog: it
//!   forks again, the grandchild execs the server in the same group, and the
//!   watchdog closes every fd and waits for signals. Its PDEATHSIG (`SIGUSR1`)
//!   means the host died: it SIGKILLs the whole group, grandchildren included,
//!   which PDEATHSIG alone cannot reach. When the server exits, the watchdog
//!   exits the same way (same code, or dies of the same signal), so the tokio
//!   `Child` we hold is the watchdog and [`TransportControl::pid`] is its pid,
//!   which is also the group id. The watchdog writes the server's pid to a
//!   pipe before it closes its fds: that is [`TransportControl::server_pid`],
//!   the process users see.
//! - Shutdown closes stdin, waits, SIGTERMs the group, waits, SIGKILLs it.
//!   Members left in the group after the leader is reaped (a server's stray
//!   children) get SIGTERM and then SIGKILL too. Dropping the control without
//!   shutdown SIGKILLs the group synchronously.
//! - We never `waitpid(-1)`: that would steal exit statuses tokio waits for.
//!
//! # macOS
//!
//! The supervisor is the same there (it learns of the host's death by the
//! socket's EOF alone, and `getppid`). The watchdog has other kernel calls
//! (see [`watchdog`]): no PDEATHSIG, so it waits on a kqueue for the
//! owner's `NOTE_EXIT` (and SIGKILLs the group on it, as on `SIGUSR1`
//! here), the server's `NOTE_EXIT`, SIGCHLD and SIGTERM, and re-reads
//! `getppid()` after arming and on every wake-up; fds are closed by a loop;
//! the group scan uses `proc_listpgrppids`. The spawner thread is not
//! needed there but harmless.

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
compile_error!("the stdio transport supports Linux and macOS only");

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::io::{self, Read as _};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use futures_util::StreamExt;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::sandbox::{SandboxSpec, confine};
#[cfg(target_os = "linux")]
use crate::supervisor::WireSandbox;
use crate::supervisor::{self, Outcome, SpawnRequest, Supervisor};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::feed::{Feed, FeedReceiver};
use super::framing::{BoundedLineCodec, Frame, FramingError, encode_line};
use super::{
    BoxFuture, CloseReason, Connection, Outbound, StderrFollower, TransportControl, TransportEvent,
};

/// Variables passed through from our environment when `inherit_env` is off:
/// the basics, then proxy and CA settings (`npx`/`uvx` servers behind a
/// corporate proxy need them) and the display (servers that open a browser
/// or window). docs/config.md lists them.
const PASSTHROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "TMPDIR",
    "SHELL",
    "TERM",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "DISPLAY",
    "WAYLAND_DISPLAY",
];
const PASSTHROUGH_PREFIXES: &[&str] = &["LC_", "XDG_"];

const INBOUND_CAPACITY: usize = 256;
const OUTBOUND_CAPACITY: usize = 256;
/// Longest stderr line kept; the rest of the line is dropped.
const MAX_STDERR_LINE: usize = 8 * 1024;
/// The initial read buffer for a server's stdout.
const STDOUT_READ_CAPACITY: usize = 8 * 1024;
/// The stderr read buffer: lines longer than it are read in pieces, and an
/// idle server should not hold the default 8 KiB for a pipe that is quiet.
const STDERR_READ_CAPACITY: usize = 1024;
/// Stderr lines a live follower may fall behind by before it is told how
/// many it missed (at most 2 MiB per server with the longest lines).
const STDERR_FEED_CAPACITY: usize = 256;
/// Most stderr lines a second handed to a follower
/// ([`TransportControl::follow_stderr`]); a flooding server must not make
/// the daemon's clients lag (and re-list everything) or queue up memory.
pub const STDERR_FOLLOW_LINES_PER_SECOND: u32 = 1000;
/// After the server exits, how long output still in the pipes may take to
/// arrive; a grandchild that inherited stdout/stderr can keep them open forever.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// After stdout closes, how long to wait for an exit status for the summary.
const EXIT_AFTER_EOF: Duration = Duration::from_secs(1);
/// How long SIGKILLed stray group members may take to disappear.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// How to start one stdio server.
#[derive(Debug, Clone)]
pub struct StdioConfig {
    pub command: String,
    pub args: Vec<String>,
    /// Configured variables, set on top of the inherited ones (they win).
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// `false` passes only a short list through (`PASSTHROUGH`: PATH, HOME,
    /// USER, LANG, LC_*, TMPDIR, SHELL, TERM, XDG_*, the proxy and CA
    /// variables, DISPLAY, WAYLAND_DISPLAY), so the host's secrets do not
    /// leak into servers.
    pub inherit_env: bool,
    /// Longest accepted message; longer ones become [`TransportEvent::Oversized`].
    pub max_message_bytes: usize,
    /// How many stderr lines to keep.
    pub stderr_lines: usize,
    /// How long the server may take to exit once its stdin is closed.
    pub stdin_close_grace: Duration,
    /// How long the group may take to exit after SIGTERM before SIGKILL.
    pub sigterm_grace: Duration,
    /// Confine the server and everything it starts (see [`crate::sandbox`]).
    pub sandbox: Option<SandboxSpec>,
}

impl Default for StdioConfig {
    fn default() -> Self {
        Self {
            command: String::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            inherit_env: false,
            max_message_bytes: 64 * 1024 * 1024,
            stderr_lines: 200,
            stdin_close_grace: Duration::from_secs(2),
            sigterm_grace: Duration::from_secs(2),
            sandbox: None,
        }
    }
}

impl StdioConfig {
    pub fn new(
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StdioError {
    #[error("server '{server}': no command configured")]
    EmptyCommand { server: String },
    #[error(
        "server '{server}': command '{command}' not found (PATH searched: \"{searched_path}\")"
    )]
    CommandNotFound {
        server: String,
        command: String,
        searched_path: String,
    },
    #[error("server '{server}': working directory {} is not usable: {source}", dir.display())]
    BadCwd {
        server: String,
        dir: PathBuf,
        source: io::Error,
    },
    #[error("server '{server}': cannot set up its sandbox (the `sandbox` config): {source}")]
    Sandbox { server: String, source: io::Error },
    #[error(
        "server '{server}': not started: {field} is true and this machine cannot enforce all of its sandbox: {gaps}"
    )]
    SandboxNotEnforced {
        server: String,
        /// The config field that asked (`mcpServers.x.sandbox.require`).
        field: String,
        /// The report's `notEnforced` reasons, `; `-joined.
        gaps: String,
    },
    #[error("server '{server}': cannot start '{command}': {source}")]
    Spawn {
        server: String,
        command: String,
        source: io::Error,
    },
}

/// Starts `cfg.command` as the stdio server named `server`.
pub async fn spawn(server: &str, cfg: &StdioConfig) -> Result<Connection, StdioError> {
    let spawn_error = |source: io::Error| StdioError::Spawn {
        server: server.to_owned(),
        command: cfg.command.clone(),
        source,
    };
    if cfg.command.is_empty() {
        return Err(StdioError::EmptyCommand {
            server: server.to_owned(),
        });
    }
    let cwd = match &cfg.cwd {
        Some(dir) => Some(check_cwd(server, dir)?),
        None => None,
    };
    let mut env = child_env(cfg);
    let program = resolve_command(server, cfg, &env, cwd.as_deref())?;
    if let Some(spec) = &cfg.sandbox
        && let Some(field) = &spec.require
    {
        let gaps = crate::sandbox::report(spec).not_enforced;
        if !gaps.is_empty() {
            return Err(StdioError::SandboxNotEnforced {
                server: server.to_owned(),
                field: field.clone(),
                gaps: gaps.join("; "),
            });
        }
    }
    let confined = match &cfg.sandbox {
        Some(spec) => Some(
            confine::prepare(spec, &program, &cfg.args, &mut env).map_err(|source| {
                StdioError::Sandbox {
                    server: server.to_owned(),
                    source,
                }
            })?,
        ),
        None => None,
    };

    let argv = server_argv(cfg, &program, confined.as_ref());
    let launched = launch(&argv, &env, cwd.as_deref(), confined.as_ref())
        .await
        .map_err(spawn_error)?;

    let span = tracing::info_span!("mcp_server", server = %server);
    span.in_scope(|| {
        tracing::debug!(
            pid = launched.pgid.as_raw(),
            supervised = launched.supervisor.is_some(),
            program = %program.display(),
            "server started"
        );
    });
    // A write to a dead server's stdin is EPIPE, never SIGPIPE, even for a
    // host (the C library's) that left SIGPIPE at its default.
    #[cfg(target_os = "macos")]
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(launched.stdin.as_raw_fd(), libc::F_SETNOSIGPIPE, 1) } != 0 {
        let e = io::Error::last_os_error();
        span.in_scope(|| tracing::debug!("F_SETNOSIGPIPE on the server's stdin: {e}"));
    }

    let Launched {
        leader,
        stdin,
        stdout,
        stderr,
        pgid,
        server_pid,
        supervisor,
    } = launched;
    Ok(run_child(
        server,
        cfg,
        leader,
        (stdin, stdout, stderr),
        (pgid, server_pid, supervisor),
        span,
        confined.and_then(|c| c.tmp),
    ))
}

/// What runs: the program, its `argv[0]` (the command as configured) and
/// its arguments; on macOS a sandboxed server runs under `sandbox-exec`.
struct Argv {
    program: PathBuf,
    arg0: OsString,
    args: Vec<OsString>,
}

fn server_argv(cfg: &StdioConfig, program: &Path, confined: Option<&confine::Confined>) -> Argv {
    let args = cfg.args.iter().map(OsString::from);
    #[cfg(target_os = "macos")]
    if let Some(c) = confined {
        return Argv {
            program: PathBuf::from(confine::SANDBOX_EXEC),
            arg0: OsString::from(&cfg.command),
            args: confine::seatbelt_args(c, program)
                .into_iter()
                .chain(args)
                .collect(),
        };
    }
    #[cfg(target_os = "linux")]
    let _ = confined;
    Argv {
        program: program.to_owned(),
        arg0: OsString::from(&cfg.command),
        args: args.collect(),
    }
}

/// A started server: the group's leader, our ends of its pipes.
struct Launched {
    leader: Leader,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
    /// The group id, the leader's pid.
    pgid: Pid,
    /// The server process itself.
    server_pid: Option<u32>,
    /// Set when the process supervisor holds the group.
    supervisor: Option<Arc<Supervisor>>,
}

/// The process whose end is the server's end, and that we wait for.
enum Leader {
    /// Our child, the watchdog that mirrors the server's exit.
    Watchdog(Child),
    /// The server itself, the supervisor's child: it reports the status.
    Supervised(oneshot::Receiver<io::Result<ExitStatus>>),
}

impl Leader {
    async fn wait(self) -> io::Result<ExitStatus> {
        match self {
            Leader::Watchdog(mut child) => child.wait().await,
            Leader::Supervised(exit) => exit
                .await
                .unwrap_or_else(|_| Err(io::Error::other("the process supervisor is gone"))),
        }
    }
}

/// Under the process supervisor if this process started one (and it still
/// runs), else under a watchdog of its own.
async fn launch(
    argv: &Argv,
    env: &BTreeMap<OsString, OsString>,
    cwd: Option<&Path>,
    confined: Option<&confine::Confined>,
) -> io::Result<Launched> {
    if let Some(supervisor) = supervisor::current()
        && let Some(launched) = launch_supervised(supervisor, argv, env, cwd, confined).await?
    {
        return Ok(launched);
    }
    launch_watchdog(argv, env, cwd, confined).await
}

/// `None` when the supervisor turned out to be gone.
async fn launch_supervised(
    supervisor: Arc<Supervisor>,
    argv: &Argv,
    env: &BTreeMap<OsString, OsString>,
    cwd: Option<&Path>,
    confined: Option<&confine::Confined>,
) -> io::Result<Option<Launched>> {
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = |s: &OsStr| s.as_bytes().to_vec();
    let (stdin_r, stdin_w) = io::pipe()?;
    let (stdout_r, stdout_w) = io::pipe()?;
    let (stderr_r, stderr_w) = io::pipe()?;
    let theirs: [OwnedFd; 3] = [stdin_r.into(), stdout_w.into(), stderr_w.into()];
    #[cfg_attr(target_os = "macos", allow(unused_mut))]
    let mut fds: Vec<RawFd> = theirs.iter().map(AsRawFd::as_raw_fd).collect();
    #[cfg_attr(target_os = "macos", allow(unused_mut))]
    let mut request = SpawnRequest {
        id: 0,
        program: bytes(argv.program.as_os_str()),
        arg0: bytes(&argv.arg0),
        args: argv.args.iter().map(|a| bytes(a)).collect(),
        env: env.iter().map(|(k, v)| (bytes(k), bytes(v))).collect(),
        // Ours now, not the one the supervisor was started in.
        cwd: cwd
            .map(Path::to_owned)
            .or_else(|| std::env::current_dir().ok())
            .map(|d| bytes(d.as_os_str())),
        sandbox: None,
    };
    #[cfg(target_os = "linux")]
    if let Some(c) = confined {
        let (ruleset, seccomp) = c.prepared.parts();
        fds.extend(ruleset.map(|fd| fd.as_raw_fd()));
        request.sandbox = Some(WireSandbox {
            landlock: ruleset.is_some(),
            seccomp: seccomp.map(|p| p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect()),
        });
    }
    #[cfg(target_os = "macos")]
    let _ = confined;
    let outcome = supervisor.spawn(request, &fds).await;
    // The server has its own copies now (or never will).
    drop(theirs);
    let pid = match outcome {
        Outcome::Started(started) => started,
        Outcome::Failed(e) => return Err(e),
        Outcome::Gone => return Ok(None),
    };
    let pgid = Pid::from_raw(pid.pid);
    let pipes = (|| {
        Ok::<_, io::Error>((
            ChildStdin::from_std(std::process::ChildStdin::from(OwnedFd::from(stdin_w)))?,
            ChildStdout::from_std(std::process::ChildStdout::from(OwnedFd::from(stdout_r)))?,
            ChildStderr::from_std(std::process::ChildStderr::from(OwnedFd::from(stderr_r)))?,
        ))
    })();
    let (stdin, stdout, stderr) = match pipes {
        Ok(pipes) => pipes,
        Err(e) => {
            // Never leave a group behind.
            let _ = supervisor.signal(pgid, Signal::SIGKILL);
            return Err(e);
        }
    };
    Ok(Some(Launched {
        leader: Leader::Supervised(pid.exit),
        stdin,
        stdout,
        stderr,
        pgid,
        server_pid: u32::try_from(pid.pid).ok(),
        supervisor: Some(supervisor),
    }))
}

/// Forks a watchdog (see the module docs) that forks the server.
async fn launch_watchdog(
    argv: &Argv,
    env: &BTreeMap<OsString, OsString>,
    cwd: Option<&Path>,
    confined: Option<&confine::Confined>,
) -> io::Result<Launched> {
    let mut command = child_command(argv, env, cwd);
    let owner = nix::unistd::getpid().as_raw();
    // Close-on-exec: the watchdog writes to it, the server never sees it.
    let (mut pid_reader, pid_writer) = io::pipe()?;
    let report = pid_writer.as_raw_fd();
    // SAFETY: the closure only makes async-signal-safe libc calls; see `watchdog`.
    unsafe {
        command.pre_exec(move || watchdog::become_watchdog(owner, report));
    }
    // Runs after the watchdog's closure, which returns only in the server
    // process: the watchdog itself stays unconfined (it only waits and
    // signals), the server and all it starts are confined.
    #[cfg(target_os = "linux")]
    if let Some(c) = confined {
        let prepared = c.prepared.clone();
        // SAFETY: `apply` makes only async-signal-safe syscalls.
        unsafe {
            command.pre_exec(move || prepared.apply());
        }
    }
    #[cfg(target_os = "macos")]
    let _ = confined;

    let spawned = spawn_on_spawner_thread(command).await;
    drop(pid_writer);
    let mut child = spawned?;
    // Written before the watchdog closed its fds, which is before spawn
    // returned; with every writer gone the read cannot block.
    let mut pid_bytes = [0u8; std::mem::size_of::<libc::pid_t>()];
    let server_pid = pid_reader
        .read_exact(&mut pid_bytes)
        .ok()
        .and_then(|()| u32::try_from(libc::pid_t::from_ne_bytes(pid_bytes)).ok());
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("the process was reaped at once"))?;
    let pgid = Pid::from_raw(i32::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?);
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        // Unreachable with piped stdio, but never leave a group behind.
        let _ = killpg(pgid, Signal::SIGKILL);
        return Err(io::Error::other("missing stdio pipe"));
    };
    Ok(Launched {
        leader: Leader::Watchdog(child),
        stdin,
        stdout,
        stderr,
        pgid,
        server_pid,
        supervisor: None,
    })
}

/// The server's process in the group we made for it.
fn child_command(argv: &Argv, env: &BTreeMap<OsString, OsString>, cwd: Option<&Path>) -> Command {
    let mut command = Command::new(&argv.program);
    command
        .arg0(&argv.arg0)
        .args(&argv.args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    command
}

/// The tasks that own a started server: the leader's reaper, and the one
/// that writes its input and reads its output (stdout, stderr, the close
/// report).
fn run_child(
    server: &str,
    cfg: &StdioConfig,
    leader: Leader,
    (stdin, stdout, stderr): (ChildStdin, ChildStdout, ChildStderr),
    (pgid, server_pid, supervisor): (Pid, Option<u32>, Option<Arc<Supervisor>>),
    span: tracing::Span,
    tmp: Option<tempfile::TempDir>,
) -> Connection {
    let (exit_tx, exit_rx) = watch::channel(None);
    let (done_tx, done_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        server: server.to_owned(),
        pgid,
        server_pid,
        supervisor,
        span: span.clone(),
        stderr: Mutex::new(StderrRing::new(cfg.stderr_lines)),
        stderr_feed: Mutex::new(Some(Feed::new(STDERR_FEED_CAPACITY))),
        stderr_follower: Mutex::new(None),
        close_stdin: CancellationToken::new(),
        exit: exit_rx,
        done: done_rx,
        leader_reaped: AtomicBool::new(false),
        group_gone: AtomicBool::new(false),
        shutdown_started: AtomicBool::new(false),
        stdin_close_grace: cfg.stdin_close_grace,
        sigterm_grace: cfg.sigterm_grace,
        _tmp: tmp,
    });

    let (outbound_tx, outbound_rx) = mpsc::channel(OUTBOUND_CAPACITY);
    let (inbound_tx, inbound_rx) = mpsc::channel(INBOUND_CAPACITY);

    tokio::spawn(watch_leader(leader, shared.clone(), exit_tx, done_tx).instrument(span.clone()));
    let output = Output {
        exit: shared.exit.clone(),
        shared: shared.clone(),
        // Small to start: an idle server should not hold a pipe-sized
        // buffer (64 KiB each, most of a daemon's heap at 100 servers); it
        // grows while a message is longer.
        frames: Some(FramedRead::with_capacity(
            stdout,
            BoundedLineCodec::new(cfg.max_message_bytes),
            STDOUT_READ_CAPACITY,
        )),
        line: Vec::new(),
        truncated: false,
        held: None,
        how: None,
        stage: Stage::Reading,
    };
    let stderr = Some(BufReader::with_capacity(STDERR_READ_CAPACITY, stderr));
    let input = Input {
        stdin: Some(stdin),
        outbound: outbound_rx,
        buf: BytesMut::new(),
        close: shared.close_stdin.clone(),
    };
    tokio::spawn(read_output(output, input, stderr, inbound_tx).instrument(span));

    Connection {
        outbound: outbound_tx,
        inbound: inbound_rx,
        control: Arc::new(StdioControl { shared }),
    }
}

/// The absolute path `spawn` would execute for `cfg`, found the way the
/// child's PATH would find it. Lets callers show the resolved executable.
pub fn resolve_program(server: &str, cfg: &StdioConfig) -> Result<PathBuf, StdioError> {
    let cwd = match &cfg.cwd {
        Some(dir) => Some(check_cwd(server, dir)?),
        None => None,
    };
    resolve_command(server, cfg, &child_env(cfg), cwd.as_deref())
}

fn check_cwd(server: &str, dir: &Path) -> Result<PathBuf, StdioError> {
    let bad = |source| StdioError::BadCwd {
        server: server.to_owned(),
        dir: dir.to_owned(),
        source,
    };
    let meta = std::fs::metadata(dir).map_err(bad)?;
    if !meta.is_dir() {
        return Err(bad(io::ErrorKind::NotADirectory.into()));
    }
    // Absolute, because the command is resolved against it here but the
    // child changes into it before exec.
    std::path::absolute(dir).map_err(bad)
}

fn child_env(cfg: &StdioConfig) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os()
        .filter(|(name, _)| cfg.inherit_env || passes_through(name))
        .collect();
    env.extend(cfg.env.iter().map(|(k, v)| (k.into(), v.into())));
    env
}

fn passes_through(name: &OsStr) -> bool {
    name.to_str().is_some_and(|name| {
        PASSTHROUGH.contains(&name) || PASSTHROUGH_PREFIXES.iter().any(|p| name.starts_with(p))
    })
}

/// Finds the program the way the child's PATH would, so a missing command is
/// a clear error here rather than an exec failure.
fn resolve_command(
    server: &str,
    cfg: &StdioConfig,
    env: &BTreeMap<OsString, OsString>,
    cwd: Option<&Path>,
) -> Result<PathBuf, StdioError> {
    let spawn_error = |source| StdioError::Spawn {
        server: server.to_owned(),
        command: cfg.command.clone(),
        source,
    };
    let search_path = env.get(OsStr::new("PATH"));
    let base = match cwd {
        Some(dir) => dir.to_owned(),
        None => std::env::current_dir().map_err(spawn_error)?,
    };
    let found = which::which_in(&cfg.command, search_path, &base).map_err(|_| {
        StdioError::CommandNotFound {
            server: server.to_owned(),
            command: cfg.command.clone(),
            searched_path: search_path
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    })?;
    // A relative PATH entry resolves against our cwd, not the child's.
    std::path::absolute(found).map_err(spawn_error)
}

struct SpawnJob {
    runtime: tokio::runtime::Handle,
    command: Command,
    reply: oneshot::Sender<io::Result<Child>>,
}

static SPAWNER: Mutex<Option<std::sync::mpsc::Sender<SpawnJob>>> = Mutex::new(None);

/// Forks on the one thread that never exits, so PDEATHSIG only fires when the
/// whole host process dies.
async fn spawn_on_spawner_thread(command: Command) -> io::Result<Child> {
    let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    let (reply, result) = oneshot::channel();
    spawner()?
        .send(SpawnJob {
            runtime,
            command,
            reply,
        })
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    result
        .await
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}

fn spawner() -> io::Result<std::sync::mpsc::Sender<SpawnJob>> {
    let mut slot = SPAWNER.lock();
    if let Some(tx) = slot.as_ref() {
        return Ok(tx.clone());
    }
    let (tx, rx) = std::sync::mpsc::channel::<SpawnJob>();
    std::thread::Builder::new()
        .name("mcphost-spawner".into())
        .spawn(move || {
            // The static keeps a sender, so this loop (and thread) never ends.
            for mut job in rx {
                // tokio registers the child with the caller's runtime.
                let _runtime = job.runtime.enter();
                // A panic would end this thread and, through PDEATHSIG, every server.
                let spawned = std::panic::catch_unwind(AssertUnwindSafe(|| job.command.spawn()))
                    .unwrap_or_else(|_| Err(io::Error::other("spawning panicked")));
                if let Err(Ok(child)) = job.reply.send(spawned) {
                    // The caller gave up waiting: nobody owns this group.
                    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                    }
                }
            }
        })?;
    *slot = Some(tx.clone());
    Ok(tx)
}

struct Shared {
    server: String,
    /// Group id, equal to the leader's pid: the server under the process
    /// supervisor, else its watchdog.
    pgid: Pid,
    /// The server process (the watchdog's child, or the leader itself).
    server_pid: Option<u32>,
    /// Holds the group when set: signals go through it.
    supervisor: Option<Arc<Supervisor>>,
    span: Span,
    stderr: Mutex<StderrRing>,
    /// Live stderr lines for followers; taken when stderr ends, which tells
    /// every receiver the feed is over.
    stderr_feed: Mutex<Option<Feed<Arc<str>>>>,
    stderr_follower: Mutex<Option<Follower>>,
    close_stdin: CancellationToken,
    /// How the group leader exited, once tokio has reaped it.
    exit: watch::Receiver<Option<String>>,
    /// True once the leader is reaped and its stray group members handled.
    done: watch::Receiver<bool>,
    /// Until the leader is reaped its pid cannot be reused, so signalling the
    /// group is safe; afterwards only while members may remain.
    leader_reaped: AtomicBool,
    /// Set once the group is known to be empty: its id may then be reused
    /// by an unrelated group, so nothing signals it any more.
    group_gone: AtomicBool,
    shutdown_started: AtomicBool,
    stdin_close_grace: Duration,
    sigterm_grace: Duration,
    /// A sandboxed server's private `TMPDIR`, removed with the connection.
    _tmp: Option<tempfile::TempDir>,
}

impl Shared {
    async fn shutdown(self: Arc<Self>) {
        if !self.shutdown_started.swap(true, Ordering::SeqCst) {
            // A task of its own, so the escalation finishes even if the
            // caller stops waiting for it.
            let span = self.span.clone();
            tokio::spawn(self.clone().escalate().instrument(span));
        }
        // Also covers a concurrent or repeated call: resolve once all is gone.
        let mut done = self.done.clone();
        let _ = done.wait_for(|done| *done).await;
    }

    async fn escalate(self: Arc<Self>) {
        self.close_stdin.cancel();
        if self.wait_exit(self.stdin_close_grace).await {
            return;
        }
        tracing::debug!("still running after stdin closed; sending SIGTERM to its group");
        self.signal_group(Signal::SIGTERM);
        if self.wait_exit(self.sigterm_grace).await {
            return;
        }
        tracing::warn!("still running after SIGTERM; sending SIGKILL to its group");
        self.signal_group(Signal::SIGKILL);
    }

    /// Whether the leader exited within `grace`.
    async fn wait_exit(&self, grace: Duration) -> bool {
        let mut exit = self.exit.clone();
        // A dropped sender means the waiter task is gone: nothing to wait for.
        tokio::time::timeout(grace, exit.wait_for(Option::is_some))
            .await
            .is_ok()
    }

    fn signal_group(&self, signal: Signal) {
        if self.leader_reaped.load(Ordering::SeqCst) {
            return; // `watch_leader` takes care of what is left.
        }
        if let Some(supervisor) = &self.supervisor {
            match supervisor.signal(self.pgid, signal) {
                Ok(()) => return,
                // It died: it has SIGKILLed the group already, or will.
                Err(e) => tracing::debug!(pgid = %self.pgid, "signal through the supervisor: {e}"),
            }
        }
        match killpg(self.pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => {
                tracing::warn!(pgid = %self.pgid, %signal, "cannot signal the server's group: {e}")
            }
        }
    }

    /// Members left behind by a leader that is gone: SIGTERM, then SIGKILL.
    async fn reap_strays(&self) {
        if group_has_live_members(self.pgid) {
            tracing::warn!(pgid = %self.pgid, "server left processes in its group; sending SIGTERM");
            let _ = killpg(self.pgid, Signal::SIGTERM);
            if !wait_group_gone(self.pgid, self.sigterm_grace).await {
                tracing::warn!(pgid = %self.pgid, "group still alive after SIGTERM; sending SIGKILL");
                let _ = killpg(self.pgid, Signal::SIGKILL);
                if !wait_group_gone(self.pgid, KILL_WAIT).await {
                    tracing::error!(pgid = %self.pgid, "processes survived SIGKILL");
                    return;
                }
            }
        }
        self.group_gone.store(true, Ordering::SeqCst);
        if let Some(supervisor) = &self.supervisor {
            supervisor.release(self.pgid);
        }
    }

    fn stderr_tail(&self, n: usize) -> Vec<String> {
        self.stderr.lock().tail(n)
    }
}

struct StdioControl {
    shared: Arc<Shared>,
}

impl TransportControl for StdioControl {
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        let span = self.shared.span.clone();
        Box::pin(self.shared.clone().shutdown().instrument(span))
    }

    fn stderr_tail(&self, n: usize) -> Vec<String> {
        self.shared.stderr_tail(n)
    }

    fn stderr_lines(&self) -> Option<FeedReceiver<Arc<str>>> {
        self.shared.stderr_feed.lock().as_ref().map(Feed::subscribe)
    }

    fn follow_stderr(&self, follower: StderrFollower) -> bool {
        // Under the feed's lock: the reader takes the follower after it
        // took the feed, so a follower set while the feed is there is
        // always given its last note.
        let feed = self.shared.stderr_feed.lock();
        if feed.is_none() {
            return false;
        }
        *self.shared.stderr_follower.lock() = Some(Follower::new(follower));
        true
    }

    /// The group leader's pid, which is also the process group id.
    fn pid(&self) -> Option<u32> {
        u32::try_from(self.shared.pgid.as_raw()).ok()
    }

    fn server_pid(&self) -> Option<u32> {
        self.shared.server_pid
    }

    fn kind(&self) -> &'static str {
        "stdio"
    }
}

impl Drop for StdioControl {
    fn drop(&mut self) {
        // Synchronous on purpose: tasks spawned from Drop may never run.
        let shared = &self.shared;
        if shared.group_gone.load(Ordering::SeqCst) {
            return;
        }
        // The leader unreaped: the supervisor knows for sure; strays of a
        // reaped leader keep the group id reserved, so killpg is safe.
        if let Some(supervisor) = &shared.supervisor
            && !shared.leader_reaped.load(Ordering::SeqCst)
            && supervisor.signal(shared.pgid, Signal::SIGKILL).is_ok()
        {
            return;
        }
        let _ = killpg(shared.pgid, Signal::SIGKILL);
    }
}

/// Waits for the group leader, publishes how it ended, then clears the group.
async fn watch_leader(
    leader: Leader,
    shared: Arc<Shared>,
    exit_tx: watch::Sender<Option<String>>,
    done_tx: watch::Sender<bool>,
) {
    let how = match leader.wait().await {
        Ok(status) => describe(status),
        Err(e) => {
            // We cannot tell what state it is in: make sure it is dead.
            let _ = killpg(shared.pgid, Signal::SIGKILL);
            format!("could not be waited for ({e})")
        }
    };
    shared.leader_reaped.store(true, Ordering::SeqCst);
    tracing::debug!("server process {how}");
    exit_tx.send_replace(Some(how));
    shared.reap_strays().await;
    done_tx.send_replace(true);
}

fn describe(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(sig) = status.signal() {
        match Signal::try_from(sig) {
            Ok(name) => format!("was killed by signal {sig} ({name})"),
            Err(_) => format!("was killed by signal {sig}"),
        }
    } else {
        format!("ended ({status})")
    }
}

/// The server's output, read by one task (see [`read_output`]).
struct Output {
    shared: Arc<Shared>,
    /// `None` once stdout ended or reading it stopped.
    frames: Option<FramedRead<ChildStdout, BoundedLineCodec>>,
    /// The stderr line read so far, and whether it was cut.
    line: Vec<u8>,
    truncated: bool,
    /// An event waiting for room in the inbound channel.
    held: Option<TransportEvent>,
    exit: watch::Receiver<Option<String>>,
    /// How the leader exited, once known.
    how: Option<String>,
    stage: Stage,
}

/// Where the close report stands.
#[derive(Clone, Copy)]
enum Stage {
    Reading,
    /// The server exited: output still in the pipe may arrive until then.
    Draining(Instant),
    /// stdout closed first: the exit status usually follows, until then.
    AwaitingExit(Instant),
    /// stdout is done and the exit known: stderr may end until then.
    AwaitingStderr(Instant),
    /// `Closed` is held for `inbound`.
    Closing,
    /// `Closed` went out: stderr is read on while a grandchild holds it.
    Closed,
}

fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or(now)
}

/// The peer's messages to stdin, stdout's frames to the peer, stderr's
/// lines to the ring and followers, and the one [`TransportEvent::Closed`]
/// after every frame and with the complete stderr tail: one task, where
/// there were four.
async fn read_output(
    mut out: Output,
    mut input: Input,
    mut stderr: Option<BufReader<ChildStderr>>,
    inbound: mpsc::Sender<TransportEvent>,
) {
    loop {
        let note_due = out
            .shared
            .stderr_follower
            .lock()
            .as_ref()
            .and_then(Follower::note_due);
        let wake = match (note_due, out.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let open = input.stdin.is_some();
        let more = open && input.buf.is_empty();
        // Not biased: a flood on one pipe must not starve the others.
        tokio::select! {
            () = closing(&input.close, open) => input.stop(),
            written = write_some(input.stdin.as_mut(), &input.buf) => input.wrote(written),
            msg = next_out(&mut input.outbound, more) => {
                input.take(msg);
            }
            permit = reserve(&inbound, out.held.is_some()) => {
                match (permit, out.held.take()) {
                    (Ok(p), Some(ev)) => p.send(ev),
                    // Nobody listens any more.
                    _ => out.frames = None,
                }
            }
            filled = fill(stderr.as_mut()) => {
                let used = match filled {
                    Ok([]) | Err(_) => None,
                    Ok(buf) => Some(take_stderr(buf, &mut out.line, &mut out.truncated, &out.shared)),
                };
                match (used, stderr.as_mut()) {
                    (Some(used), Some(r)) => r.consume(used),
                    _ => {
                        stderr = None;
                        out.stderr_ended();
                    }
                }
            }
            item = next_frame(out.frames.as_mut(), out.held.is_none()) => out.on_frame(item),
            how = exit_of(&mut out.exit, out.how.is_none()) => out.how = Some(how),
            () = sleep_until_some(wake) => {
                if note_due.is_some_and(|t| t <= Instant::now())
                    && let Some(f) = out.shared.stderr_follower.lock().as_mut()
                {
                    // A flood that stopped still gets its note, without
                    // waiting for another line.
                    f.new_window(Instant::now());
                }
            }
        }
        if out.advance(stderr.is_none()) {
            return;
        }
    }
}

impl Output {
    /// When the stage ends if nothing happens first; only while its wait
    /// is still open, so a passed deadline never spins the loop.
    fn deadline(&self) -> Option<Instant> {
        match self.stage {
            Stage::Draining(t) if self.frames.is_some() => Some(t),
            Stage::AwaitingExit(t) | Stage::AwaitingStderr(t) => Some(t),
            _ => None,
        }
    }

    fn on_frame(&mut self, item: Option<Result<Frame, FramingError>>) {
        self.held = match item {
            None => None,
            Some(Ok(Frame::Line(line))) => Some(TransportEvent::Frame(line)),
            Some(Ok(Frame::Oversized { limit, id })) => {
                tracing::warn!(limit, id = ?id, "dropped a message over the size limit");
                Some(TransportEvent::Oversized { limit, id })
            }
            Some(Err(e)) => {
                tracing::warn!("reading the server's stdout failed: {e}");
                None
            }
        };
        if self.held.is_none() {
            self.frames = None;
        }
    }

    fn stderr_ended(&mut self) {
        push_stderr(&self.shared, &self.line, self.truncated);
        self.line = Vec::new();
        let feed = self.shared.stderr_feed.lock().take();
        if let Some(mut f) = self.shared.stderr_follower.lock().take() {
            f.note_dropped();
        }
        drop(feed);
    }

    /// Moves the close report on; `true` once nothing is left to read.
    fn advance(&mut self, stderr_done: bool) -> bool {
        loop {
            let now = Instant::now();
            let stdout_done = self.frames.is_none() && self.held.is_none();
            self.stage = match self.stage {
                Stage::Reading | Stage::Draining(_) if stdout_done => match self.how {
                    Some(_) => Stage::AwaitingStderr(after(now, DRAIN_AFTER_EXIT)),
                    None => Stage::AwaitingExit(after(now, EXIT_AFTER_EOF)),
                },
                Stage::Reading if self.how.is_some() => {
                    Stage::Draining(after(now, DRAIN_AFTER_EXIT))
                }
                // The reader delivers what it holds, then stops.
                Stage::Draining(t) if now >= t && self.frames.is_some() => {
                    self.frames = None;
                    continue;
                }
                Stage::AwaitingExit(t) if self.how.is_some() || now >= t => {
                    Stage::AwaitingStderr(after(now, DRAIN_AFTER_EXIT))
                }
                Stage::AwaitingStderr(t) if stderr_done || now >= t => {
                    self.held = Some(TransportEvent::Closed(self.close_reason()));
                    Stage::Closing
                }
                Stage::Closing if self.held.is_none() => Stage::Closed,
                Stage::Closed => return stderr_done,
                _ => return false,
            };
        }
    }

    fn close_reason(&self) -> CloseReason {
        let how = self.how.as_deref().unwrap_or("closed its stdout");
        let reason = CloseReason {
            summary: format!("server '{}' {how}", self.shared.server),
            stderr_tail: self.shared.stderr_tail(usize::MAX),
            auth_required: false,
        };
        tracing::info!("{}", reason.summary);
        reason
    }
}

async fn reserve(
    inbound: &mpsc::Sender<TransportEvent>,
    wanted: bool,
) -> Result<mpsc::Permit<'_, TransportEvent>, mpsc::error::SendError<()>> {
    if !wanted {
        return std::future::pending().await;
    }
    inbound.reserve().await
}

async fn fill(reader: Option<&mut BufReader<ChildStderr>>) -> io::Result<&[u8]> {
    match reader {
        Some(r) => r.fill_buf().await,
        None => std::future::pending().await,
    }
}

async fn next_frame(
    frames: Option<&mut FramedRead<ChildStdout, BoundedLineCodec>>,
    wanted: bool,
) -> Option<Result<Frame, FramingError>> {
    match frames {
        Some(f) if wanted => f.next().await,
        _ => std::future::pending().await,
    }
}

/// How the leader exited; "ended" when its waiter is gone.
async fn exit_of(exit: &mut watch::Receiver<Option<String>>, wanted: bool) -> String {
    if !wanted {
        return std::future::pending().await;
    }
    match exit.wait_for(Option::is_some).await {
        Ok(how) => how.clone().unwrap_or_default(),
        Err(_) => "ended".to_owned(),
    }
}

/// Takes one piece of stderr (up to a newline) into `line`, pushing the
/// line when complete; returns how many bytes were used.
fn take_stderr(buf: &[u8], line: &mut Vec<u8>, truncated: &mut bool, shared: &Shared) -> usize {
    let (chunk, used, complete) = match buf.iter().position(|&b| b == b'\n') {
        Some(i) => (&buf[..i], i + 1, true),
        None => (buf, buf.len(), false),
    };
    let room = MAX_STDERR_LINE.saturating_sub(line.len());
    line.extend_from_slice(&chunk[..chunk.len().min(room)]);
    *truncated |= chunk.len() > room;
    if complete {
        push_stderr(shared, line, *truncated);
        line.clear();
        *truncated = false;
    }
    used
}

/// The server's input, written by the task that reads its output.
struct Input {
    /// `None` once closed: asked to, a failed write, or no sender left.
    /// Dropping it is what closes the server's input.
    stdin: Option<ChildStdin>,
    outbound: mpsc::Receiver<Outbound>,
    /// Messages taken from `outbound` and not written yet.
    buf: BytesMut,
    close: CancellationToken,
}

impl Input {
    fn take(&mut self, first: Option<Outbound>) {
        let Some(first) = first else {
            self.stop();
            return;
        };
        // Whatever else is queued goes out in the same write.
        append_line(&mut self.buf, &first.text);
        while let Ok(msg) = self.outbound.try_recv() {
            append_line(&mut self.buf, &msg.text);
        }
    }

    fn wrote(&mut self, written: io::Result<usize>) {
        match written {
            Ok(n) if n > 0 => self.buf.advance(n),
            Ok(_) => {
                tracing::debug!("server's stdin closed");
                self.stop();
            }
            Err(e) => {
                tracing::debug!("server's stdin closed: {e}");
                self.stop();
            }
        }
    }

    /// Closes the server's input; senders learn of it at once.
    fn stop(&mut self) {
        self.stdin = None;
        self.buf = BytesMut::new();
        self.outbound.close();
    }
}

async fn closing(close: &CancellationToken, open: bool) {
    if !open {
        return std::future::pending().await;
    }
    close.cancelled().await;
}

async fn write_some(stdin: Option<&mut ChildStdin>, buf: &[u8]) -> io::Result<usize> {
    match stdin {
        Some(w) if !buf.is_empty() => w.write(buf).await,
        _ => std::future::pending().await,
    }
}

async fn next_out(outbound: &mut mpsc::Receiver<Outbound>, wanted: bool) -> Option<Outbound> {
    if !wanted {
        return std::future::pending().await;
    }
    outbound.recv().await
}

fn append_line(buf: &mut BytesMut, msg: &str) {
    if let Err(e) = encode_line(msg, buf) {
        tracing::error!(len = msg.len(), "dropping an outgoing message: {e}");
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn push_stderr(shared: &Shared, line: &[u8], truncated: bool) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let mut text = String::from_utf8_lossy(line).into_owned();
    if truncated {
        text.push_str(" […truncated]");
    }
    tracing::debug!(target: "mcphost::server_stderr", "{text}");
    if let Some(feed) = &*shared.stderr_feed.lock()
        && feed.receiver_count() > 0
    {
        // No receiver, no copy: an unfollowed server costs nothing extra.
        feed.send(Arc::from(text.as_str()));
    }
    if let Some(f) = shared.stderr_follower.lock().as_mut() {
        f.offer(&text, Instant::now());
    }
    shared.stderr.lock().push(text);
}

/// A [`StderrFollower`] and its rate limit: at most
/// [`STDERR_FOLLOW_LINES_PER_SECOND`] lines a window of a second, the rest
/// counted and said.
struct Follower {
    send: StderrFollower,
    window: Instant,
    sent: u32,
    dropped: u64,
}

impl Follower {
    const WINDOW: Duration = Duration::from_secs(1);

    fn new(send: StderrFollower) -> Follower {
        Follower {
            send,
            window: Instant::now(),
            sent: 0,
            dropped: 0,
        }
    }

    fn offer(&mut self, line: &str, now: Instant) {
        if now >= self.window_end() {
            self.new_window(now);
        }
        if self.sent < STDERR_FOLLOW_LINES_PER_SECOND {
            self.sent = self.sent.saturating_add(1);
            (self.send)(Arc::from(line));
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }

    fn window_end(&self) -> Instant {
        self.window.checked_add(Self::WINDOW).unwrap_or(self.window)
    }

    /// When the note for the lines dropped in this window is due, if any were.
    fn note_due(&self) -> Option<Instant> {
        (self.dropped > 0).then(|| self.window_end())
    }

    fn new_window(&mut self, now: Instant) {
        self.note_dropped();
        self.window = now;
        self.sent = 0;
    }

    fn note_dropped(&mut self) {
        if self.dropped > 0 {
            let n = std::mem::take(&mut self.dropped);
            (self.send)(Arc::from(format!("[mcphost: {n} stderr lines dropped]")));
        }
    }
}

struct StderrRing {
    lines: VecDeque<String>,
    capacity: usize,
}

impl StderrRing {
    fn new(capacity: usize) -> Self {
        Self {
            // Grows with the lines: most servers write a few, if any.
            lines: VecDeque::new(),
            capacity,
        }
    }

    fn push(&mut self, line: String) {
        if self.capacity == 0 {
            return;
        }
        if self.lines.len() == self.capacity {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    fn tail(&self, n: usize) -> Vec<String> {
        let skip = self.lines.len().saturating_sub(n);
        self.lines.iter().skip(skip).cloned().collect()
    }
}

/// Whether the group has a member that is not a zombie. Zombies count as gone:
/// a server orphaned by its watchdog's death is reparented to PID 1, which in
/// a container may never reap it, and `killpg(pgid, 0)` still finds it.
fn group_has_live_members(pgid: Pid) -> bool {
    match killpg(pgid, None) {
        Err(Errno::ESRCH) => false,
        _ => live_members(pgid).is_none_or(|n| n > 0),
    }
}

/// Counts non-zombie processes in `pgid`; `None` when /proc is unreadable.
#[cfg(target_os = "linux")]
fn live_members(pgid: Pid) -> Option<usize> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let pgid = pgid.as_raw().to_string();
    let count = entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // After "pid (comm) ": state, ppid, pgrp. comm may contain ") ".
            let fields = stat.rsplit_once(')').map(|(_, rest)| rest);
            let mut fields = fields.unwrap_or_default().split_whitespace();
            let state = fields.next();
            let group = fields.nth(1);
            group == Some(pgid.as_str()) && state != Some("Z")
        })
        .count();
    Some(count)
}

/// Counts non-zombie processes in `pgid`; `None` when the kernel will not
/// list them (then `killpg`'s answer stands, zombies included).
#[cfg(target_os = "macos")]
fn live_members(pgid: Pid) -> Option<usize> {
    use std::mem::{MaybeUninit, size_of};
    // Groups are a handful of processes; a full buffer means we cannot tell.
    const MAX: usize = 4096;
    let mut pids: Vec<libc::pid_t> = vec![0; MAX];
    let bytes = libc::c_int::try_from(MAX * size_of::<libc::pid_t>()).ok()?;
    // SAFETY: the buffer holds `bytes` bytes of pids.
    let n = unsafe { libc::proc_listpgrppids(pgid.as_raw(), pids.as_mut_ptr().cast(), bytes) };
    // The count; read as such even if it were bytes, the rest are zeros.
    let n = usize::try_from(n).ok()?;
    if n >= MAX {
        return None;
    }
    let info_size = libc::c_int::try_from(size_of::<libc::proc_bsdshortinfo>()).ok()?;
    let live = pids[..n]
        .iter()
        .filter(|&&pid| pid > 0)
        .filter(|&&pid| {
            let mut info = MaybeUninit::<libc::proc_bsdshortinfo>::zeroed();
            // SAFETY: `info` is `info_size` bytes, written by the kernel.
            let got = unsafe {
                libc::proc_pidinfo(
                    pid,
                    libc::PROC_PIDT_SHORTBSDINFO,
                    0,
                    info.as_mut_ptr().cast(),
                    info_size,
                )
            };
            if got <= 0 {
                // Gone since the listing (or a zombie the kernel no longer
                // describes) counts as gone; any other failure as alive.
                return io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
            }
            if got != info_size {
                return true;
            }
            // SAFETY: fully written (and zero-initialised before).
            unsafe { info.assume_init() }.pbsi_status != libc::SZOMB
        })
        .count();
    Some(live)
}

/// Polls with backoff until the group has no live members, up to `limit`.
async fn wait_group_gone(pgid: Pid, limit: Duration) -> bool {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        if !group_has_live_members(pgid) {
            return true;
        }
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return false;
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = pause.saturating_mul(2).min(Duration::from_millis(100));
    }
}

/// The code that runs in the forked child before exec. After `fork` in a
/// multithreaded process only async-signal-safe calls are allowed: no
/// allocation, no locks, no logging; hence raw `libc`.
///
/// Linux learns of the owner's death through `PR_SET_PDEATHSIG` and waits
/// with `sigwaitinfo`; macOS has neither and waits on a kqueue instead
/// (`EVFILT_PROC`/`NOTE_EXIT` on the owner and the server, `EVFILT_SIGNAL`).
mod watchdog {
    use std::io;
    use std::mem::MaybeUninit;
    use std::ptr;

    /// Blocked in the watchdog, so they are only ever reported (by
    /// sigwaitinfo or kqueue), never acted on.
    #[cfg(target_os = "linux")]
    const SIGNALS: [libc::c_int; 3] = [libc::SIGCHLD, libc::SIGTERM, libc::SIGUSR1];
    #[cfg(target_os = "macos")]
    const SIGNALS: [libc::c_int; 2] = [libc::SIGCHLD, libc::SIGTERM];

    /// Forks the server off and, in the parent, never returns: that process
    /// writes the server's pid to `report` and stays behind as the watchdog
    /// and group leader.
    pub(super) fn become_watchdog(owner: libc::pid_t, report: libc::c_int) -> io::Result<()> {
        // SAFETY: plain libc calls on local, initialised signal sets and actions.
        unsafe {
            let mut watched = empty_set();
            for sig in SIGNALS {
                libc::sigaddset(&mut watched, sig);
            }
            let mut old_mask = empty_set();
            if libc::sigprocmask(libc::SIG_BLOCK, &watched, &mut old_mask) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Inherited handlers or SIG_IGN (which would auto-reap the
            // server) must not get in the way of sigwaitinfo.
            let mut default: libc::sigaction = MaybeUninit::zeroed().assume_init();
            default.sa_sigaction = libc::SIG_DFL;
            let mut old_actions: [libc::sigaction; SIGNALS.len()] =
                MaybeUninit::zeroed().assume_init();
            for (sig, old) in SIGNALS.iter().zip(old_actions.iter_mut()) {
                if libc::sigaction(*sig, &default, old) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            #[cfg(target_os = "linux")]
            {
                let pdeathsig = libc::SIGUSR1 as libc::c_ulong;
                if libc::prctl(libc::PR_SET_PDEATHSIG, pdeathsig, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // A kqueue is not inherited by fork: the server never sees it.
            #[cfg(target_os = "macos")]
            let queue = kqueue::arm(owner)?;
            // The host may have died before PDEATHSIG (or NOTE_EXIT) was armed.
            if libc::getppid() != owner {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            match libc::fork() {
                -1 => Err(io::Error::last_os_error()),
                0 => {
                    // The server: the host's signal dispositions, and no
                    // signal blocked, whatever the spawning thread blocked
                    // (a Swift or Dispatch thread blocks nearly all, our
                    // library's runtime SIGPIPE); std goes on to exec it.
                    for (sig, old) in SIGNALS.iter().zip(old_actions.iter()) {
                        libc::sigaction(*sig, old, ptr::null_mut());
                    }
                    let none = empty_set();
                    libc::sigprocmask(libc::SIG_SETMASK, &none, ptr::null_mut());
                    Ok(())
                }
                server => {
                    // Tell the host which process is the server; if this
                    // fails it shows none.
                    libc::write(
                        report,
                        (&server as *const libc::pid_t).cast(),
                        std::mem::size_of::<libc::pid_t>(),
                    );
                    #[cfg(target_os = "linux")]
                    watch(server, &watched);
                    #[cfg(target_os = "macos")]
                    kqueue::watch(owner, server, queue);
                }
            }
        }
    }

    unsafe fn empty_set() -> libc::sigset_t {
        // SAFETY: sigemptyset initialises the set.
        unsafe {
            let mut set = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(set.as_mut_ptr());
            set.assume_init()
        }
    }

    #[cfg(target_os = "linux")]
    unsafe fn watch(server: libc::pid_t, watched: &libc::sigset_t) -> ! {
        // SAFETY: async-signal-safe libc calls only.
        unsafe {
            // std's exec-error pipe and the stdio pipes must not stay open
            // here, or spawn would never return and stdout never reach EOF.
            close_all_fds();
            loop {
                match libc::sigwaitinfo(watched, ptr::null_mut()) {
                    libc::SIGUSR1 => {
                        // The host died: take the whole group down, us included.
                        libc::kill(0, libc::SIGKILL);
                    }
                    libc::SIGCHLD => reap(server, libc::WNOHANG),
                    // SIGTERM reaches the server through the group; stay to
                    // reap it and report how it ended.
                    _ => {}
                }
            }
        }
    }

    /// Exits like the server if it has ended; returns if it still runs.
    unsafe fn reap(server: libc::pid_t, flags: libc::c_int) {
        // SAFETY: async-signal-safe libc calls only.
        unsafe {
            let mut status = 0;
            match libc::waitpid(server, &mut status, flags) {
                r if r == server => exit_like(status),
                -1 if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) => {
                    libc::_exit(127)
                }
                _ => {}
            }
        }
    }

    /// Ends the watchdog the way the server ended, so the host sees its status.
    unsafe fn exit_like(status: libc::c_int) -> ! {
        // SAFETY: async-signal-safe libc calls only.
        unsafe {
            if libc::WIFSIGNALED(status) {
                let sig = libc::WTERMSIG(status);
                // Die of the same signal, but never dump core for the server.
                #[cfg(target_os = "linux")]
                libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                #[cfg(target_os = "macos")]
                libc::setrlimit(
                    libc::RLIMIT_CORE,
                    &libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    },
                );
                libc::signal(sig, libc::SIG_DFL);
                let mut set = empty_set();
                libc::sigaddset(&mut set, sig);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, ptr::null_mut());
                libc::kill(libc::getpid(), sig);
                libc::_exit(128 + sig);
            }
            libc::_exit(libc::WEXITSTATUS(status))
        }
    }

    #[cfg(target_os = "linux")]
    unsafe fn close_all_fds() {
        // SAFETY: closing descriptors this process no longer needs.
        unsafe {
            if libc::syscall(
                libc::SYS_close_range,
                0 as libc::c_uint,
                libc::c_uint::MAX,
                0,
            ) == 0
            {
                return;
            }
            // Kernels before 5.9 have no close_range.
            let max = match libc::sysconf(libc::_SC_OPEN_MAX) {
                n if n > 0 && n < 1 << 20 => n as libc::c_int,
                _ => 1 << 16,
            };
            for fd in 0..max {
                libc::close(fd);
            }
        }
    }

    /// The macOS watchdog: one kqueue reports the owner's exit, the server's
    /// exit, SIGCHLD and SIGTERM (still blocked, so only reported here).
    #[cfg(target_os = "macos")]
    mod kqueue {
        use std::io;
        use std::mem::MaybeUninit;
        use std::ptr;

        /// How often the watchdog looks at its parent even without an event:
        /// a backstop should the owner's exit have raced the registration.
        const RECHECK_SECS: libc::time_t = 1;

        /// A kqueue watching the owner's exit and our signals.
        pub(super) unsafe fn arm(owner: libc::pid_t) -> io::Result<libc::c_int> {
            // SAFETY: kqueue and kevent on local, initialised structures.
            unsafe {
                let queue = libc::kqueue();
                if queue < 0 {
                    return Err(io::Error::last_os_error());
                }
                // An owner already gone fails with ESRCH: spawn fails.
                add(
                    queue,
                    owner as libc::uintptr_t,
                    libc::EVFILT_PROC,
                    libc::NOTE_EXIT,
                )?;
                for sig in super::SIGNALS {
                    add(queue, sig as libc::uintptr_t, libc::EVFILT_SIGNAL, 0)?;
                }
                Ok(queue)
            }
        }

        unsafe fn add(
            queue: libc::c_int,
            ident: libc::uintptr_t,
            filter: i16,
            fflags: u32,
        ) -> io::Result<()> {
            // SAFETY: one change, no event buffer.
            unsafe {
                let mut change: libc::kevent = MaybeUninit::zeroed().assume_init();
                change.ident = ident;
                change.filter = filter;
                change.flags = libc::EV_ADD | libc::EV_ENABLE;
                change.fflags = fflags;
                if libc::kevent(queue, &change, 1, ptr::null_mut(), 0, ptr::null()) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            }
        }

        pub(super) unsafe fn watch(
            owner: libc::pid_t,
            server: libc::pid_t,
            queue: libc::c_int,
        ) -> ! {
            // SAFETY: async-signal-safe libc calls only (kqueue and kevent
            // are plain system calls).
            unsafe {
                // As on Linux, but the kqueue stays open.
                close_fds_except(queue);
                // Whether kqueue records a SIGCHLD left at SIG_DFL (ignored
                // by default) is not documented; the server's own NOTE_EXIT
                // does not depend on it. A server already gone fails here
                // and is reaped just below.
                let _ = add(
                    queue,
                    server as libc::uintptr_t,
                    libc::EVFILT_PROC,
                    libc::NOTE_EXIT,
                );
                let timeout = libc::timespec {
                    tv_sec: RECHECK_SECS,
                    tv_nsec: 0,
                };
                let mut event: libc::kevent = MaybeUninit::zeroed().assume_init();
                loop {
                    // Every wake-up (SIGCHLD, SIGTERM, the timeout) checks
                    // whether the server ended. SIGTERM reaches the server
                    // through the group; we stay to reap it and report how.
                    super::reap(server, libc::WNOHANG);
                    if libc::getppid() != owner {
                        libc::kill(0, libc::SIGKILL);
                    }
                    match libc::kevent(queue, ptr::null(), 0, &mut event, 1, &timeout) {
                        1 if event.filter == libc::EVFILT_PROC => {
                            if event.ident == owner as libc::uintptr_t {
                                // The host died: take the whole group down, us included.
                                libc::kill(0, libc::SIGKILL);
                            }
                            // NOTE_EXIT may come before the server is a
                            // zombie: wait for its status.
                            super::reap(server, 0);
                        }
                        // Never spin: without a queue, poll.
                        -1 if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) => {
                            libc::nanosleep(&timeout, ptr::null_mut());
                        }
                        _ => {}
                    }
                }
            }
        }

        /// Closes every descriptor but `keep`: macOS has no close_range, and
        /// listing /dev/fd would allocate.
        unsafe fn close_fds_except(keep: libc::c_int) {
            // SAFETY: closing descriptors this process no longer needs.
            unsafe {
                let max = match libc::getdtablesize() {
                    n if n > 0 && n < 1 << 20 => n,
                    _ => 1 << 16,
                };
                for fd in (0..max).filter(|&fd| fd != keep) {
                    libc::close(fd);
                }
            }
        }
    }
}
