//! The daemon starts itself: a command or a bridge that finds no daemon
//! spawns `mcphost daemon` detached (its own session, stdin null, output to
//! `daemon.log` in the state directory), waits for its socket, and checks
//! its version. A daemon of another version (an upgrade) is asked to stop
//! and started again when nobody else is connected to it; otherwise it stays
//! and a warning says so once. `--no-autostart` (`MCPHOST_NO_AUTOSTART`) or
//! `"daemon": {"autostart": false}` in the config turn this off.
//!
//! Races: "check the socket, spawn, wait" runs under an exclusive lock
//! (`PATH.start.lock` beside the socket), so processes starting at once end
//! with one daemon; and the daemon itself refuses a second instance on a
//! live socket (its listener lock, see `mcphost::ipc`).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use mcphost::client::{CallOptions, ClientOptions, ServerClient};
use mcphost::ipc::IpcError;
use serde_json::Value;

/// How long a daemon started here has to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stopping daemon (asked to, after an upgrade) has to go: it
/// stops its servers first, each within its `shutdown` grace twice over.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Waiting for another process that is starting the daemon (which may
/// first wait for an old one to stop).
const LOCK_WAIT: Duration = Duration::from_secs(45);
/// The log is started afresh (the old one kept as `.1`) past this size.
const LOG_ROTATE_BYTES: u64 = 8 * 1024 * 1024;
/// Lines of the log shown when the daemon did not come up.
const LOG_TAIL_LINES: usize = 15;
/// The version every daemon started here reports; never set it outside tests.
pub const FAKE_VERSION_ENV: &str = "MCPHOST_TEST_FAKE_VERSION";

const OURS: &str = env!("CARGO_PKG_VERSION");

/// Said once per process: a daemon of another version kept running.
static WARNED: AtomicBool = AtomicBool::new(false);

/// What this process may do about a missing or outdated daemon.
pub struct Autostart {
    pub socket: PathBuf,
    /// `--config`, handed on to a daemon started here.
    pub config: Option<PathBuf>,
    /// `--no-autostart` or `MCPHOST_NO_AUTOSTART`.
    pub refused: bool,
    /// `--json`: stderr carries JSON errors only, so no "starting" line.
    pub quiet: bool,
}

/// How long a command waits for the servers of a daemon it just started:
/// its first `tools/list` (a host's, through the bridge) should see them.
const SETTLE_WAIT: Duration = Duration::from_secs(10);

/// Wait until a daemon just started has settled its servers (ready,
/// failed, or waiting for a sign-in), at most [`SETTLE_WAIT`]; a slow
/// server then joins the catalog later, with `list_changed`.
async fn settle(client: &ServerClient, mut status: Value) {
    let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
    while status["settledAfterMs"].is_null() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
        match request(client, "mcphost/status", None).await {
            Ok(s) => status = s,
            Err(e) => {
                tracing::debug!("waiting for the new daemon's servers: {e:#}");
                return;
            }
        }
    }
    if status["settledAfterMs"].is_null() {
        tracing::info!("the daemon's servers are still starting after {SETTLE_WAIT:?}; going on");
    }
}

/// The clear error of a daemon not running when nothing may start it.
pub fn not_running(e: &dyn std::fmt::Display, why: &str) -> anyhow::Error {
    anyhow!("{e}; is the daemon running? Start it with `mcphost daemon`{why}")
}

impl Autostart {
    /// Whether this process may start (and restart) the daemon: the flag,
    /// then the config's `daemon.autostart`. The config is read only here,
    /// when no daemon answered; a config that does not load leaves it on
    /// (the daemon started says what is wrong with it).
    fn allowed(&self) -> bool {
        if self.refused {
            return false;
        }
        let Ok(loc) = mcphost::config::location::resolve_config_path(self.config.clone()) else {
            return true;
        };
        match mcphost::config::location::load_from(&loc, &mcphost::auth::process_env) {
            Ok(cfg) => {
                crate::say_config_warnings(&cfg.warnings);
                cfg.daemon.autostart
            }
            Err(_) => true,
        }
    }

    /// A client on a daemon of our version: started if none runs, restarted
    /// if it is another version and nobody else uses it (as allowed). `why`
    /// ends the error when no daemon runs and none may be started.
    pub async fn connect(&self, opts: ClientOptions, why: &str) -> Result<ServerClient> {
        let mut started = false;
        let mut restarted = false;
        let mut retried = false;
        let mut allowed: Option<bool> = None;
        loop {
            let conn =
                match mcphost::ipc::connect(&self.socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES)
                    .await
                {
                    Ok(conn) => conn,
                    Err(e @ IpcError::NotRunning { .. }) => {
                        let may = *allowed.get_or_insert_with(|| self.allowed());
                        if !may || started {
                            return Err(not_running(&e, why));
                        }
                        self.start().await?;
                        started = true;
                        continue;
                    }
                    Err(e) => return Err(anyhow!(e)),
                };
            // A daemon that is going away (asked to stop, or dying) may
            // still take a connection and then drop it: once, wait for it to
            // be gone and go round again.
            let (client, status) = match status_of(conn, &opts).await {
                Ok(ok) => ok,
                // An answer (the daemon is busy, say) is not a daemon going away.
                Err(e) if !retried && !answered(&e) => {
                    tracing::debug!(
                        "the daemon dropped the connection ({e:#}); it may be stopping"
                    );
                    retried = true;
                    // Gone, or replaced: a daemon that took its place holds
                    // the lock for as long as it runs, and answers.
                    self.until_gone(Some(&opts)).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let theirs = status["version"].as_str().unwrap_or("unknown").to_owned();
            if theirs == OURS {
                self.warn_other_config(&status);
                if started {
                    settle(&client, status).await;
                }
                return Ok(client);
            }
            let pid = status["pid"].as_u64();
            // A service manager would not start it again after a clean exit
            // (and would fight one started here): it is the one to restart it.
            if let Some(manager) = status["service"].as_str() {
                self.warn_managed(&theirs, manager);
                return Ok(client);
            }
            if restarted || !*allowed.get_or_insert_with(|| self.allowed()) {
                self.warn_kept(&theirs, pid, None);
                return Ok(client);
            }
            let answer = request(
                &client,
                "mcphost/daemon/shutdown",
                Some(serde_json::json!({ "ifAlone": true })),
            )
            .await;
            match answer {
                Ok(a) if a["stopping"] == Value::Bool(true) => {
                    client.shutdown().await;
                    tracing::info!(
                        socket = %self.socket.display(),
                        "the daemon ran mcphost {theirs}; restarting it as {OURS}"
                    );
                    self.wait_gone().await?;
                    restarted = true;
                    started = false;
                }
                Ok(a) => {
                    self.warn_kept(&theirs, pid, a["clients"].as_u64());
                    return Ok(client);
                }
                // A daemon too old to know the method.
                Err(e) => {
                    tracing::debug!("asking the old daemon to stop: {e:#}");
                    self.warn_kept(&theirs, pid, None);
                    return Ok(client);
                }
            }
        }
    }

    /// Says so when the daemon runs another config file than the one this
    /// process was told to use (`--config`, `MCPHOST_CONFIG`): its servers
    /// are that file's, not ours.
    fn warn_other_config(&self, status: &Value) {
        let Ok(ours) = mcphost::config::location::resolve_config_path(self.config.clone()) else {
            return;
        };
        if ours.source == mcphost::config::location::ConfigSource::Default {
            return;
        }
        let Some(theirs) = status["configPath"].as_str().map(PathBuf::from) else {
            return;
        };
        let ours = std::path::absolute(&ours.path).unwrap_or(ours.path);
        if crate::service::same_file(&ours, &theirs) {
            return;
        }
        let pid = status["pid"].as_u64().unwrap_or_default();
        eprintln!(
            "mcphost: warning: the daemon at {} (pid {pid}) runs the config {}, not {};              what you see is that file's servers. Stop it (mcphost daemon stop) so that the              next command starts one with yours, or give this config a socket of its own              (--socket)",
            self.socket.display(),
            theirs.display(),
            ours.display()
        );
    }

    fn warn_managed(&self, theirs: &str, manager: &str) {
        if WARNED.swap(true, Ordering::Relaxed) {
            return;
        }
        let restart = match manager {
            "systemd" => "systemctl --user restart mcphost".to_owned(),
            "launchd" => format!(
                "launchctl kickstart -k gui/{}/dev.mcphost.daemon",
                nix::unistd::geteuid()
            ),
            other => format!("restart it through {other}"),
        };
        eprintln!(
            "mcphost: warning: the daemon at {} runs mcphost {theirs}, this is {OURS}; \
             {manager} runs it, so restart it there: {restart}",
            self.socket.display()
        );
    }

    fn warn_kept(&self, theirs: &str, pid: Option<u64>, clients: Option<u64>) {
        if WARNED.swap(true, Ordering::Relaxed) {
            return;
        }
        let others = match clients {
            Some(n) => format!(
                "; {} other client(s) use it, so it keeps running",
                n.saturating_sub(1)
            ),
            None => String::new(),
        };
        let stop = match pid {
            Some(pid) => format!("stop it (kill {pid}) and"),
            None => "stop it and".to_owned(),
        };
        eprintln!(
            "mcphost: warning: the daemon at {} runs mcphost {theirs}, this is {OURS}{others}; \
             {stop} the next command starts this version",
            self.socket.display()
        );
    }

    /// Starts the daemon unless another process did meanwhile; returns once
    /// its socket answers.
    /// [`Self::start`], then wait as a command that started it does for
    /// its servers to settle: the next command (`daemon restart; call …`)
    /// finds them, not "starting".
    pub async fn start_settled(&self) -> Result<()> {
        self.start().await?;
        let conn =
            mcphost::ipc::connect(&self.socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES).await?;
        let opts = ClientOptions {
            known_era: Some(mcphost::protocol::Era::Handshake),
            ..Default::default()
        };
        let client = ServerClient::connect("daemon", conn, opts).await?;
        if let Ok(status) = request(&client, "mcphost/status", None).await {
            settle(&client, status).await;
        }
        client.shutdown().await;
        Ok(())
    }

    pub async fn start(&self) -> Result<()> {
        mcphost::ipc::prepare_socket_dir(&self.socket)?;
        let lock_path = sibling(&self.socket, ".start.lock");
        let _lock = match mcphost::lockfile::lock_within(&lock_path, LOCK_WAIT).await {
            Ok(lock) => lock,
            Err(e @ mcphost::lockfile::LockError::Timeout { .. }) => {
                bail!("another mcphost is starting the daemon and has not finished: {e}")
            }
            Err(e) => return Err(e.into()),
        };
        // A daemon started outside this lock (by hand, by a script) may be
        // about to listen, or one may be stopping (it holds its listener lock
        // until its servers are down): wait for it to answer or to go.
        if self.listening_or_gone().await? {
            return Ok(());
        }
        let log = log_path(&self.socket);
        if !self.quiet {
            // The one line that says why this command takes a moment.
            eprintln!("mcphost: starting the daemon…");
        }
        let mut child = self.spawn(&log)?;
        let begun = Instant::now();
        let mut pause = Duration::from_millis(5);
        loop {
            if answers(&self.socket).await {
                tracing::info!(
                    pid = child.id(),
                    log = %log.display(),
                    "started the daemon in {:?}",
                    begun.elapsed()
                );
                // Reaped when it ends, should that happen while we live.
                std::thread::spawn(move || {
                    let _ = child.wait();
                });
                return Ok(());
            }
            if let Some(status) = child.try_wait()? {
                // Lost a race with a daemon started outside this lock (by
                // hand, or by the service manager): it is listening now.
                if answers(&self.socket).await {
                    return Ok(());
                }
                bail!(
                    "the daemon exited ({status}) before listening on {}; its log {}:\n{}",
                    self.socket.display(),
                    log.display(),
                    tail(&log)
                );
            }
            if begun.elapsed() >= START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "the daemon did not listen on {} within {START_TIMEOUT:?} (stopped it); \
                     its log {}:\n{}",
                    self.socket.display(),
                    log.display(),
                    tail(&log)
                );
            }
            tokio::time::sleep(pause).await;
            pause = pause.saturating_mul(2).min(Duration::from_millis(100));
        }
    }

    /// `mcphost daemon` on our socket, detached from this process: a session
    /// of its own (no terminal, no Ctrl-C of ours), stdin null, stdout and
    /// stderr appended to `log`. Never our stdout: a bridge's is MCP.
    fn spawn(&self, log: &Path) -> Result<Child> {
        let exe = std::env::current_exe().context("finding the mcphost executable")?;
        if let Some(dir) = log.parent() {
            create_private_dir(dir)?;
        }
        rotate(log);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening the daemon log {}", log.display()))?;
        let err = out
            .try_clone()
            .with_context(|| format!("opening the daemon log {}", log.display()))?;
        let mut cmd = Command::new(&exe);
        cmd.arg("--socket").arg(&self.socket);
        // The flag's or MCPHOST_CONFIG's file, made absolute: the daemon
        // does not run where we do.
        if let Ok(loc) = mcphost::config::location::resolve_config_path(self.config.clone())
            && loc.source != mcphost::config::location::ConfigSource::Default
        {
            let config = std::path::absolute(&loc.path).unwrap_or(loc.path);
            cmd.arg("--config").arg(config);
        }
        cmd.arg("daemon")
            .arg("--started-by")
            .arg(starter())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Not a terminal's colours in a file, and the daemon's own log
            // level (info), not that of whichever command started it.
            .env_remove("CLICOLOR_FORCE")
            .env_remove("RUST_LOG");
        // Not wherever this command happened to run (a directory it would
        // keep busy, and the servers' default cwd): the home directory, as
        // for a systemd user service.
        cmd.current_dir(
            directories::BaseDirs::new()
                .map(|d| d.home_dir().to_owned())
                .filter(|h| h.is_dir())
                .unwrap_or_else(|| PathBuf::from("/")),
        );
        detach(&mut cmd);
        cmd.spawn()
            .with_context(|| format!("starting {} daemon", exe.display()))
    }

    /// `true` once a daemon answers on the socket, `false` once none holds
    /// its listener lock (a new one can start).
    async fn listening_or_gone(&self) -> Result<bool> {
        let lock = mcphost::ipc::listener_lock_path(&self.socket);
        let begun = Instant::now();
        loop {
            if answers(&self.socket).await {
                return Ok(true);
            }
            if !mcphost::lockfile::is_held(&lock)? {
                return Ok(false);
            }
            if begun.elapsed() >= STOP_TIMEOUT {
                bail!(
                    "a daemon holds {} but has not answered on {} for {STOP_TIMEOUT:?} \
                     (starting, stopping its servers, or stuck); stop it and try again",
                    lock.display(),
                    self.socket.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A daemon on the socket answers `mcphost/status` within a second: a
    /// dying one that still accepts does not.
    async fn status_answers(&self, opts: &ClientOptions) -> bool {
        let probe = async {
            let conn = mcphost::ipc::connect(&self.socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES)
                .await
                .ok()?;
            let (client, _) = status_of(conn, opts).await.ok()?;
            client.shutdown().await;
            Some(())
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(1), probe).await,
            Ok(Some(()))
        )
    }

    /// Waits until no daemon holds the socket's listener lock.
    pub async fn wait_gone(&self) -> Result<()> {
        self.until_gone(None).await
    }

    /// Waits until no daemon holds the listener lock, or, given `replaced`,
    /// until one answers with those client options.
    async fn until_gone(&self, replaced: Option<&ClientOptions>) -> Result<()> {
        let lock = mcphost::ipc::listener_lock_path(&self.socket);
        let begun = Instant::now();
        while mcphost::lockfile::is_held(&lock)? {
            if let Some(opts) = replaced
                && self.status_answers(opts).await
            {
                return Ok(());
            }
            if begun.elapsed() >= STOP_TIMEOUT {
                bail!(
                    "a daemon still holds {} after {STOP_TIMEOUT:?} (stopping its servers, or \
                     stuck) and does not answer on {}; stop it and try again",
                    lock.display(),
                    self.socket.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// A client on `conn` and the daemon's `mcphost/status`.
async fn status_of(
    conn: mcphost::transport::Connection,
    opts: &ClientOptions,
) -> Result<(ServerClient, Value)> {
    let client = ServerClient::connect("daemon", conn, opts.clone()).await?;
    let status = request(&client, "mcphost/status", None).await?;
    Ok((client, status))
}

/// This command, as `daemon status` names who started the daemon: its
/// subcommand (never its arguments, which may hold secrets) and pid.
fn starter() -> String {
    use clap::CommandFactory;
    let cli = crate::Cli::command();
    let sub = std::env::args()
        .skip(1)
        .find(|a| cli.get_subcommands().any(|s| s.get_name() == a))
        .unwrap_or_default();
    let what = if sub.is_empty() {
        "mcphost".to_owned()
    } else {
        format!("mcphost {sub}")
    };
    format!("`{what}` (pid {})", std::process::id())
}

/// A new session for the child: setsid between fork and exec.
fn detach(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
}

/// Whether `e` is the daemon's JSON-RPC answer, not a lost connection.
fn answered(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<mcphost::client::ClientError>()
            .is_some_and(|ce| ce.rpc_error().is_some())
    })
}

/// Whether a daemon of our user accepts connections on `socket`.
async fn answers(socket: &Path) -> bool {
    mcphost::ipc::connect_blocking(socket).await.is_ok()
}

async fn request(
    client: &ServerClient,
    method: &'static str,
    params: Option<Value>,
) -> Result<Value> {
    let params = params.map(|p| mcphost::protocol::to_raw(&p)).transpose()?;
    let raw = client
        .request_raw(
            method,
            params,
            CallOptions {
                timeout: Some(Duration::from_secs(10)),
                ..Default::default()
            },
        )
        .await
        .with_context(|| format!("{method} on the daemon"))?;
    Ok(serde_json::from_str(raw.get())?)
}

/// `PATH` + `suffix` beside it.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(suffix);
    path.with_file_name(name)
}

/// `daemon.log` in the state directory (beside the socket without a home).
pub fn log_path(socket: &Path) -> PathBuf {
    match mcphost::ipc::default_state_dir() {
        Some(dir) => dir.join("daemon.log"),
        None => sibling(socket, ".log"),
    }
}

fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

/// Keeps one older log (`daemon.log.1`) once the log has grown large.
fn rotate(log: &Path) {
    if std::fs::metadata(log).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let _ = std::fs::rename(log, sibling(log, ".1"));
    }
}

/// The log's last lines, indented, for an error.
pub fn tail(log: &Path) -> String {
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::File::open(log)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(LOG_TAIL_LINES);
            let shown: Vec<String> = lines[start..].iter().map(|l| format!("  {l}")).collect();
            if shown.is_empty() {
                "  (empty)".to_owned()
            } else {
                shown.join("\n")
            }
        }
        Err(e) => format!("  (cannot read it: {e})"),
    }
}
