//! One supervisor task per server: start it, watch it, restart it with
//! backoff, and give up into `failed` when the handshake keeps failing.
//!
//! The supervisor owns the [`ServerClient`] and its start: a start in
//! progress is part of the supervisor's select loop, so stop and restart
//! cancel it (architecture decision 9). Callers get a cheap
//! [`SupervisorHandle`] with the current client (if ready), the status, and
//! commands (restart, stop).
//!
//! Every supervisor instance has a generation, carried in its statuses and
//! events: after a reload replaced a server, the old instance's last events
//! can be told apart from the new one's.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use tracing::{Instrument, info, info_span, warn};

use super::ServerOptions;
use mcphost_client::{ClientError, ServerClient, ServerEvent};
use mcphost_jsonrpc::PeerError;
use mcphost_transport::http::{self, HttpConfig, HttpError};
use mcphost_transport::stdio::{self, StdioConfig};
use mcphost_transport::{Connection, TransportControl};

/// Lifecycle states, as reported by `servers` and `mcphost/servers/list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    Starting,
    Ready,
    Restarting,
    Failed,
    Stopped,
    Disabled,
    AuthRequired,
    /// Sign-in was stopped after the server refused fresh tokens again and
    /// again (issue 21): `error` has the last refusal and the fix.
    AuthFailed,
    /// Not running, and started by the next call routed to it: a lazy
    /// server before its first call, or one stopped by its idle timeout.
    Idle,
}

impl ServerState {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Ready => "ready",
            ServerState::Restarting => "restarting",
            ServerState::Failed => "failed",
            ServerState::Stopped => "stopped",
            ServerState::Disabled => "disabled",
            ServerState::AuthRequired => "auth_required",
            ServerState::AuthFailed => "auth_failed",
            ServerState::Idle => "idle",
        }
    }
}

/// How to start a server.
#[derive(Debug, Clone)]
pub enum Launch {
    Stdio(StdioConfig),
    Http(HttpConfig),
}

/// Stderr lines kept in the status of a server that failed to start.
const STDERR_KEPT: usize = 200;

/// How long [`SupervisorHandle::restart`] waits for the supervisor to take
/// the command up.
const RESTART_TAKEN_UP: Duration = Duration::from_secs(5);

/// When to start and when to stop for want of work.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartPolicy {
    /// Wait in `idle` for the first call instead of starting at once.
    pub lazy: bool,
    /// Stop into `idle` after this long without a call.
    pub idle_timeout: Option<Duration>,
}

/// When to restart and when to give up.
#[derive(Debug, Clone)]
pub struct RestartPolicy {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Running this long without a crash resets the backoff.
    pub reset_after: Duration,
    /// Consecutive failed starts (spawn or handshake) before `failed`.
    /// An HTTP server is `failed` then too, with its last error, but is
    /// still tried again every `max_backoff` (a remote server that cannot
    /// be reached is usually being redeployed), so it comes back by itself.
    pub max_start_failures: u32,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            reset_after: Duration::from_secs(60),
            max_start_failures: 3,
        }
    }
}

/// A snapshot of one server's state.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    pub transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The resolved executable (stdio).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stderr_tail: Vec<String>,
    pub restarts: u32,
    #[serde(skip)]
    pub since: SystemTime,
    /// Failed starts never end in `failed` (HTTP: remote servers come
    /// back), so a first failure is as settled as this server gets.
    #[serde(skip)]
    pub retries_without_limit: bool,
    /// The supervisor instance this status comes from.
    #[serde(skip)]
    pub generation: u64,
    /// Why the last listing of the ready server failed (set by the
    /// registry, which retries it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub list_error: Option<String>,
    /// `share: per-session`: each session's own instance (set by the
    /// registry).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub session_instances: Vec<SessionInstance>,
    /// How long the last successful start took, spawn or connect to the
    /// end of the handshake, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<f64>,
    /// The listed catalog is the stored one, not the live server's (set by
    /// the registry).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// A stdio server's `sandbox`: what was asked and what this machine
    /// enforces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<mcphost_transport::sandbox::SandboxReport>,
    /// Its definitions against their pins (set by the registry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pins: Option<crate::pins::hooks::PinStatus>,
}

/// One session's own instance of a `share: per-session` server.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInstance {
    pub session: u64,
    pub state: ServerState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl ServerStatus {
    fn new(name: &str, launch: &Launch, state: ServerState, generation: u64) -> Self {
        ServerStatus {
            name: name.to_owned(),
            state,
            transport: match launch {
                Launch::Stdio(_) => "stdio",
                Launch::Http(c) => c.mode.label(),
            },
            protocol_version: None,
            pid: None,
            command: None,
            error: None,
            stderr_tail: Vec::new(),
            restarts: 0,
            since: SystemTime::now(),
            retries_without_limit: matches!(launch, Launch::Http(_)),
            generation,
            list_error: None,
            session_instances: Vec::new(),
            start_ms: None,
            cached: false,
            sandbox: match launch {
                Launch::Stdio(c) => c.sandbox.as_ref().map(mcphost_transport::sandbox::report),
                Launch::Http(_) => None,
            },
            pins: None,
        }
    }

    /// A server whose config entry has errors: `failed` with them (or
    /// `disabled`), never started.
    pub(crate) fn broken(b: &mcphost_config::BrokenServer) -> Self {
        ServerStatus {
            name: b.name.clone(),
            state: if b.disabled {
                ServerState::Disabled
            } else {
                ServerState::Failed
            },
            transport: b.transport,
            protocol_version: None,
            pid: None,
            command: None,
            error: Some(b.reason()),
            stderr_tail: Vec::new(),
            restarts: 0,
            since: SystemTime::now(),
            retries_without_limit: false,
            generation: NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
            list_error: None,
            session_instances: Vec::new(),
            start_ms: None,
            cached: false,
            sandbox: None,
            pins: None,
        }
    }

    /// One line for a call that cannot reach this server.
    pub fn unavailable_reason(&self) -> String {
        let mut s = format!("server '{}' is {}", self.name, self.state.as_str());
        if let Some(e) = &self.error {
            s.push_str(": ");
            s.push_str(e);
        }
        if !self.stderr_tail.is_empty()
            && self.error.as_deref().is_none_or(|e| !e.contains("stderr"))
        {
            s.push_str("; last stderr lines:");
            for l in self.stderr_tail.iter().rev().take(5).rev() {
                s.push_str("\n  ");
                s.push_str(l);
            }
        }
        s
    }
}

/// What a supervisor tells the registry. Each event names the server and
/// the supervisor instance (generation) it comes from.
#[derive(Debug, Clone)]
pub enum SupervisorEvent {
    /// The state changed (includes a fresh status).
    State(Arc<ServerStatus>),
    /// A new client is ready: list its catalog.
    Connected { server: String, generation: u64 },
    /// The ready client re-listed something after list_changed.
    Changed {
        server: String,
        generation: u64,
        event: ServerEvent,
    },
    /// One stderr line of the server's process (stdio), or a note that
    /// lines were dropped ([`STDERR_LINES_PER_SECOND`]).
    Stderr {
        server: String,
        generation: u64,
        line: Arc<str>,
    },
}

impl SupervisorEvent {
    /// The server and the supervisor instance this event comes from.
    pub fn source(&self) -> (&str, u64) {
        match self {
            SupervisorEvent::State(s) => (&s.name, s.generation),
            SupervisorEvent::Connected { server, generation }
            | SupervisorEvent::Changed {
                server, generation, ..
            }
            | SupervisorEvent::Stderr {
                server, generation, ..
            } => (server, *generation),
        }
    }
}

/// Generations are unique in the process, so no two instances of a server
/// (or of two servers with the same name in turn) share one.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

enum Command {
    Restart,
    Stop,
    /// A call wants an `idle` server: start it (ignored otherwise).
    Start,
    /// Go `idle` if no call came since the server was started (the
    /// registry, once a lazy server's catalog is learned and stored).
    Sleep,
}

/// When the last call was routed to a server, as milliseconds since the
/// handle's epoch, for the idle timeout.
#[derive(Debug)]
struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        let ms = self.last_ms.load(Ordering::Relaxed);
        self.epoch
            .checked_add(Duration::from_millis(ms))
            .unwrap_or(self.epoch)
    }
}

/// A handle to one supervised server.
#[derive(Clone)]
pub struct SupervisorHandle {
    name: String,
    generation: u64,
    client: watch::Receiver<Option<Arc<ServerClient>>>,
    status: watch::Receiver<Arc<ServerStatus>>,
    commands: mpsc::Sender<Command>,
    activity: Arc<Activity>,
}

impl SupervisorHandle {
    /// A call is routed to this server: it is not idle.
    pub fn touch(&self) {
        self.activity.touch();
    }

    /// Ask a server started only to learn its catalog to go back to
    /// `idle`, unless a call came meanwhile.
    pub fn sleep(&self) {
        let _ = self.commands.try_send(Command::Sleep);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// This supervisor instance's generation (as in its statuses and events).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The ready client; while the server is starting or restarting, wait
    /// for it up to `limit`. A server that is down for good (failed,
    /// disabled, stopped, auth_required) answers at once with its status.
    pub async fn ready_client(
        &self,
        limit: Duration,
    ) -> Result<Arc<ServerClient>, Arc<ServerStatus>> {
        let mut client = self.client.clone();
        let mut status = self.status.clone();
        let wait = async {
            loop {
                if let Some(c) = &*client.borrow_and_update() {
                    return Ok(c.clone());
                }
                let st = status.borrow_and_update().clone();
                if st.state == ServerState::Idle {
                    // Several callers may ask; the supervisor starts once.
                    let _ = self.commands.try_send(Command::Start);
                    tokio::select! {
                        r = client.changed() => if r.is_err() { return Err(st) },
                        r = status.changed() => if r.is_err() { return Err(st) },
                    }
                    continue;
                }
                // `ready` without a client: just connected, or just crashed
                // and being shut down before `restarting`.
                if !matches!(
                    st.state,
                    ServerState::Starting | ServerState::Restarting | ServerState::Ready
                ) {
                    return Err(st);
                }
                tokio::select! {
                    r = client.changed() => if r.is_err() { return Err(st) },
                    r = status.changed() => if r.is_err() { return Err(st) },
                }
            }
        };
        match tokio::time::timeout(limit, wait).await {
            Ok(r) => r,
            Err(_) => Err(self.status()),
        }
    }

    /// The ready client, or why there is none.
    pub fn client(&self) -> Result<Arc<ServerClient>, Arc<ServerStatus>> {
        match &*self.client.borrow() {
            Some(c) => Ok(c.clone()),
            None => Err(self.status.borrow().clone()),
        }
    }

    pub fn status(&self) -> Arc<ServerStatus> {
        self.status.borrow().clone()
    }

    /// Restart now (also leaves `failed`). Returns once the supervisor has
    /// taken it up (its status changed, a ready server's to `restarting`),
    /// so a status read next never shows the old process as the answer.
    pub async fn restart(&self) {
        let mut status = self.status.clone();
        let state = status.borrow_and_update().state;
        if self.commands.send(Command::Restart).await.is_err()
            || matches!(state, ServerState::Disabled | ServerState::Stopped)
        {
            return;
        }
        // Bounded: a supervisor busy elsewhere still gets the command.
        let _ = tokio::time::timeout(RESTART_TAKEN_UP, status.changed()).await;
    }

    /// Stop the server and end the supervisor. Resolves once the process is gone.
    pub async fn stop(&self) {
        let _ = self.commands.send(Command::Stop).await;
        let mut st = self.status.clone();
        let _ = st
            .wait_for(|s| matches!(s.state, ServerState::Stopped))
            .await;
    }
}

/// Start supervising `name`. `disabled` servers get a handle in the
/// `disabled` state and no process.
pub fn spawn(
    name: &str,
    launch: Launch,
    opts: impl Into<ServerOptions>,
    policy: RestartPolicy,
    disabled: bool,
    events: broadcast::Sender<SupervisorEvent>,
) -> SupervisorHandle {
    spawn_with(
        name,
        launch,
        opts,
        policy,
        disabled,
        events,
        StartPolicy::default(),
    )
}

/// [`spawn`] with a start policy: a lazy server waits in `idle` for its
/// first call.
pub fn spawn_with(
    name: &str,
    launch: Launch,
    opts: impl Into<ServerOptions>,
    policy: RestartPolicy,
    disabled: bool,
    events: broadcast::Sender<SupervisorEvent>,
    start: StartPolicy,
) -> SupervisorHandle {
    let opts = opts.into();
    let initial = if disabled {
        ServerState::Disabled
    } else if start.lazy {
        ServerState::Idle
    } else {
        ServerState::Starting
    };
    let activity = Arc::new(Activity::new());
    let generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
    let status = Arc::new(ServerStatus::new(name, &launch, initial, generation));
    let launch_debug = format!("{launch:?}");
    let (status_tx, status_rx) = watch::channel(status);
    let (client_tx, client_rx) = watch::channel(None);
    let (cmd_tx, cmd_rx) = mpsc::channel(8);
    let sup = Supervisor {
        name: name.to_owned(),
        launch,
        opts,
        policy,
        status: status_tx,
        client: client_tx,
        events,
        generation,
        config_hash: config_hash(&launch_debug),
        start,
        activity: activity.clone(),
    };
    let span = info_span!("supervisor", server = name);
    if !disabled {
        tokio::spawn(sup.run(cmd_rx).instrument(span));
    } else {
        tokio::spawn(sup.idle_disabled(cmd_rx).instrument(span));
    }
    SupervisorHandle {
        name: name.to_owned(),
        generation,
        client: client_rx,
        status: status_rx,
        commands: cmd_tx,
        activity,
    }
}

struct Supervisor {
    name: String,
    launch: Launch,
    opts: ServerOptions,
    policy: RestartPolicy,
    status: watch::Sender<Arc<ServerStatus>>,
    client: watch::Sender<Option<Arc<ServerClient>>>,
    events: broadcast::Sender<SupervisorEvent>,
    generation: u64,
    /// Identifies this launch configuration in the era cache.
    config_hash: String,
    start: StartPolicy,
    activity: Arc<Activity>,
}

/// How a start attempt ended.
enum Started {
    Ready(ServerClient),
    Failed(StartError),
    /// A command came first; `None` means every handle is gone (a stop).
    Interrupted(Option<Command>),
}

enum Outcome {
    Stop,
    Restart,
    /// The server refused our credentials while running.
    AuthRequired,
    /// No call for the idle timeout (or asked to sleep): wait in `idle`.
    Idle,
}

impl Supervisor {
    fn update(&self, f: impl FnOnce(&mut ServerStatus)) {
        let mut s = (**self.status.borrow()).clone();
        f(&mut s);
        s.since = SystemTime::now();
        let s = Arc::new(s);
        self.status.send_replace(s.clone());
        let _ = self.events.send(SupervisorEvent::State(s));
    }

    fn connected(&self) {
        let _ = self.events.send(SupervisorEvent::Connected {
            server: self.name.clone(),
            generation: self.generation,
        });
    }

    /// The last state of this instance: its process (if any) is gone.
    fn stopped(&self) {
        self.update(|s| {
            s.state = ServerState::Stopped;
            s.pid = None;
        });
        info!("supervisor stopped");
    }

    async fn idle_disabled(self, mut commands: mpsc::Receiver<Command>) {
        // A disabled server has no process; it only answers `stop`.
        loop {
            match commands.recv().await {
                Some(Command::Restart | Command::Start | Command::Sleep) => {}
                Some(Command::Stop) | None => return self.stopped(),
            }
        }
    }

    /// Sit in `idle` until a call (or a restart) asks for the server.
    /// True means "start"; false means stopped.
    async fn stay_idle(&self, commands: &mut mpsc::Receiver<Command>) -> bool {
        self.update(|s| {
            s.state = ServerState::Idle;
            s.pid = None;
        });
        info!("idle");
        loop {
            match commands.recv().await {
                Some(Command::Start | Command::Restart) => return true,
                Some(Command::Sleep) => {}
                Some(Command::Stop) | None => {
                    self.stopped();
                    return false;
                }
            }
        }
    }

    /// Sit in `failed` or `auth_required` until told otherwise. True means
    /// "start again"; false means stopped.
    async fn stay_down(
        &self,
        commands: &mut mpsc::Receiver<Command>,
        state: ServerState,
        error: Option<String>,
    ) -> bool {
        // Sign-in given up on: a state of its own, with why and the fix.
        let stopped = (state == ServerState::AuthRequired)
            .then(|| self.opts.auth.as_ref()?.attempts.stopped(&self.name))
            .flatten();
        let (state, error) = match stopped {
            // Why and the fix first; the server's own answer after.
            Some(why) => {
                let answer = error
                    .as_deref()
                    .map(|e| e.replace(why.as_str(), ""))
                    .map(|e| e.trim_end_matches([';', ' ']).to_owned())
                    .filter(|e| !e.is_empty());
                let text = match answer {
                    Some(a) => format!("{why}\nthe server answered: {a}"),
                    None => why,
                };
                (ServerState::AuthFailed, Some(text))
            }
            None => (state, error),
        };
        self.update(|s| {
            s.state = state;
            if let Some(e) = error {
                s.error = Some(e);
            }
            s.pid = None;
        });
        match control_command(commands).await {
            Some(Command::Restart) => {
                self.update(|s| s.state = ServerState::Starting);
                true
            }
            _ => {
                self.stopped();
                false
            }
        }
    }

    /// `failed` with `error` until the next quiet retry (every
    /// `max_backoff`), or a command.
    async fn retry_later(&self, commands: &mut mpsc::Receiver<Command>, error: String) -> Later {
        let every = self.policy.max_backoff;
        self.update(|s| {
            s.state = ServerState::Failed;
            s.error = Some(format!(
                "{error} (trying again every {})",
                humantime::format_duration(every)
            ));
            s.pid = None;
        });
        tokio::select! {
            _ = tokio::time::sleep(every) => Later::Retry,
            cmd = control_command(commands) => match cmd {
                Some(Command::Restart) => {
                    self.update(|s| s.state = ServerState::Starting);
                    Later::Restart
                }
                _ => Later::Stop,
            }
        }
    }

    async fn run(self, mut commands: mpsc::Receiver<Command>) {
        let mut tries = Tries::new(&self.policy);
        let mut idle = self.start.lazy;
        loop {
            if std::mem::take(&mut idle) {
                if !self.stay_idle(&mut commands).await {
                    return;
                }
                tries.reset(&self.policy);
            }
            let next = match self.start_or_command(&mut commands).await {
                Started::Interrupted(Some(Command::Restart)) => {
                    // Asked for a fresh start: not a failure.
                    tries.reset(&self.policy);
                    Next::StartNow
                }
                // Never sent by `control_command`, which skips them.
                Started::Interrupted(
                    Some(Command::Stop | Command::Start | Command::Sleep) | None,
                ) => {
                    self.stopped();
                    Next::Exit
                }
                Started::Ready(client) => {
                    self.serve_until_down(&mut commands, client, &mut tries)
                        .await
                }
                Started::Failed(StartError::Handshake(ClientError::ExitedOnProbe {
                    reason,
                    ..
                })) => {
                    // Some handshake-era servers exit on a request before
                    // initialize: start it again and speak initialize.
                    info!(
                        "exited on the server/discover probe ({reason}); starting it again with initialize"
                    );
                    self.opts.eras.put(
                        &self.name,
                        &self.config_hash,
                        mcphost_protocol::Era::Handshake,
                        "",
                    );
                    Next::StartNow
                }
                Started::Failed(e) => self.start_failed(&mut commands, e, &mut tries).await,
            };
            match next {
                Next::StartNow => {}
                Next::Idle => idle = true,
                Next::Exit => return,
                Next::Restart => {
                    if !self.back_off(&mut commands, &mut tries).await {
                        return;
                    }
                }
            }
        }
    }

    /// Serve a started client until it goes down, then shut it; what the
    /// run loop does next.
    async fn serve_until_down(
        &self,
        commands: &mut mpsc::Receiver<Command>,
        client: ServerClient,
        tries: &mut Tries,
    ) -> Next {
        tries.start_failures = 0;
        let client = Arc::new(client);
        let started = Instant::now();
        let outcome = self.serve(commands, client.clone()).await;
        self.client.send_replace(None);
        // In-flight calls may still hold the client; they fail
        // with the close reason once it is shut down.
        client.shutdown().await;
        match outcome {
            Outcome::Stop => {
                self.stopped();
                return Next::Exit;
            }
            Outcome::Restart => {}
            Outcome::Idle => return Next::Idle,
            Outcome::AuthRequired => {
                if self
                    .stay_down(commands, ServerState::AuthRequired, None)
                    .await
                {
                    tries.reset(&self.policy);
                    return Next::StartNow;
                }
                return Next::Exit;
            }
        }
        if started.elapsed() >= self.policy.reset_after {
            tries.backoff = self.policy.initial_backoff;
        }
        Next::Restart
    }

    /// A start that failed: try again after a backoff, retry quietly now
    /// and then (a remote server that is down), or stay down.
    async fn start_failed(
        &self,
        commands: &mut mpsc::Receiver<Command>,
        e: StartError,
        tries: &mut Tries,
    ) -> Next {
        tries.start_failures = tries.start_failures.saturating_add(1);
        let msg = e.to_string();
        warn!(attempt = tries.start_failures, "start failed: {msg}");
        let unlimited = self.status.borrow().retries_without_limit;
        let spent = tries.start_failures >= self.policy.max_start_failures;
        if spent && unlimited && retryable(&e) {
            // A remote server that is down: `failed` with its
            // error, so waits end and the reason shows, but
            // tried again now and then, so it comes back alone.
            return match self.retry_later(commands, msg).await {
                Later::Retry => Next::StartNow,
                Later::Restart => {
                    tries.reset(&self.policy);
                    Next::StartNow
                }
                Later::Stop => {
                    self.stopped();
                    Next::Exit
                }
            };
        }
        if (spent && !unlimited) || !retryable(&e) {
            let state = if e.auth_required() {
                ServerState::AuthRequired
            } else {
                ServerState::Failed
            };
            if self.stay_down(commands, state, Some(msg)).await {
                tries.reset(&self.policy);
                return Next::StartNow;
            }
            return Next::Exit;
        }
        self.update(|s| s.error = Some(msg));
        Next::Restart
    }

    /// `restarting`, then the backoff, which a command cuts short; `false`
    /// when that command stopped the server.
    async fn back_off(&self, commands: &mut mpsc::Receiver<Command>, tries: &mut Tries) -> bool {
        tries.restarts = tries.restarts.saturating_add(1);
        let restarts = tries.restarts;
        self.update(|s| {
            s.state = ServerState::Restarting;
            s.restarts = restarts;
            s.pid = None;
        });
        tokio::select! {
            _ = tokio::time::sleep(tries.backoff) => {}
            cmd = control_command(commands) => match cmd {
                Some(Command::Restart) => {}
                _ => {
                    self.stopped();
                    return false;
                }
            }
        }
        tries.backoff = tries.backoff.saturating_mul(2).min(self.policy.max_backoff);
        true
    }

    /// One start attempt, cut short by the first command: a stop or restart
    /// never waits out a handshake (the init timeout can be minutes).
    async fn start_or_command(&self, commands: &mut mpsc::Receiver<Command>) -> Started {
        let control = Mutex::new(None);
        let raced = tokio::select! {
            r = self.start(&control) => Ok(r),
            cmd = control_command(commands) => Err(cmd),
        };
        match raced {
            Ok(Ok(client)) => Started::Ready(client),
            Ok(Err(e)) => {
                // What a process that died at start said, for `mcphost logs`.
                let control = control.lock().clone();
                if let Some(control) = control {
                    let tail = control.stderr_tail(STDERR_KEPT);
                    if !tail.is_empty() {
                        self.update(|s| s.stderr_tail = tail);
                    }
                }
                Started::Failed(e)
            }
            Err(cmd) => {
                info!("start interrupted");
                // The start is dropped; its process (if one was spawned)
                // gets the usual stdin EOF, SIGTERM, SIGKILL.
                let control = control.lock().take();
                if let Some(control) = control {
                    control.shutdown().await;
                }
                Started::Interrupted(cmd)
            }
        }
    }

    /// Spawn or connect, then the handshake. The transport's control goes
    /// into `control` as soon as there is one, so a cancelled start can
    /// still stop what it started.
    async fn start(
        &self,
        control: &Mutex<Option<Arc<dyn TransportControl>>>,
    ) -> Result<ServerClient, StartError> {
        let began = std::time::Instant::now();
        // `restarting` and a quiet retry's `failed` stay until it is ready.
        if !matches!(
            self.status.borrow().state,
            ServerState::Restarting | ServerState::Failed
        ) {
            self.update(|s| s.state = ServerState::Starting);
        }
        let conn = match &self.launch {
            Launch::Stdio(cfg) => {
                let resolved =
                    stdio::resolve_program(&self.name, cfg).map_err(StartError::Spawn)?;
                self.update(|s| s.command = Some(resolved.display().to_string()));
                stdio::spawn(&self.name, cfg)
                    .await
                    .map_err(StartError::Spawn)?
            }
            Launch::Http(cfg) => http::connect(&self.name, cfg.clone())
                .await
                .map_err(StartError::Http)?,
        };
        *control.lock() = Some(conn.control.clone());
        // From the start, not once ready: a server that dies in its
        // handshake says why on stderr.
        let (events, server, generation) =
            (self.events.clone(), self.name.clone(), self.generation);
        conn.control.follow_stderr(Box::new(move |line| {
            let _ = events.send(SupervisorEvent::Stderr {
                server: server.clone(),
                generation,
                line,
            });
        }));
        self.start_with(conn, began).await
    }

    async fn start_with(
        &self,
        conn: Connection,
        began: std::time::Instant,
    ) -> Result<ServerClient, StartError> {
        let pid = conn.control.server_pid();
        let control = conn.control.clone();
        self.update(|s| s.pid = pid);
        let mut opts = self.opts.client.clone();
        opts.remembered_era = self.opts.eras.get(&self.name, &self.config_hash);
        let client = ServerClient::connect(&self.name, conn, opts)
            .await
            .map_err(StartError::Handshake)?;
        let version = client.negotiated().protocol_version.as_str().to_owned();
        self.opts
            .eras
            .put(&self.name, &self.config_hash, client.era(), &version);
        let transport = control.kind();
        info!(%version, pid, transport, "ready");
        self.update(|s| {
            s.transport = transport;
            s.state = ServerState::Ready;
            s.start_ms = Some(began.elapsed().as_secs_f64() * 1e3);
            s.protocol_version = Some(version);
            s.error = None;
            s.stderr_tail.clear();
        });
        Ok(client)
    }

    /// Run while the client is healthy; return why we stopped.
    async fn serve(
        &self,
        commands: &mut mpsc::Receiver<Command>,
        client: Arc<ServerClient>,
    ) -> Outcome {
        let mut events = client.subscribe();
        self.client.send_replace(Some(client.clone()));
        // Holders of the client beyond these are calls in flight.
        let holders = Arc::strong_count(&client);
        self.activity.touch();
        let started = self.activity.last();
        let busy = || Arc::strong_count(&client) > holders;
        self.connected();
        // Asked to sleep while something held the client: sleep once it
        // lets go, unless a call came.
        let mut sleep_wanted = false;
        loop {
            let idle_after = self.start.idle_timeout;
            tokio::select! {
                _ = self.idle_for(idle_after, &busy) => {
                    info!(after = ?idle_after, "no call for the idle timeout; stopping");
                    return Outcome::Idle;
                }
                _ = self.free_to_sleep(sleep_wanted, started, &busy) => {
                    info!("catalog learned; idle until the first call");
                    return Outcome::Idle;
                }
                ev = events.recv() => {
                    if let Some(outcome) = self.on_client_event(ev, &client) {
                        return outcome;
                    }
                }
                cmd = commands.recv() => {
                    if let Some(outcome) = self.on_serve_command(cmd, started, &busy, &mut sleep_wanted) {
                        return outcome;
                    }
                }
            }
        }
    }

    /// Resolves once a sleep asked for while the client was busy can
    /// happen: nothing holds the client, and no call came since `started`.
    /// Pending when no sleep was asked for, or once a call came.
    async fn free_to_sleep(&self, sleep_wanted: bool, started: Instant, busy: &impl Fn() -> bool) {
        if !sleep_wanted {
            return std::future::pending().await;
        }
        loop {
            if self.activity.last() > started {
                return std::future::pending().await;
            }
            if !busy() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Resolves when no call came for `idle_after` (a call still running
    /// counts as one); pending without an idle timeout.
    async fn idle_for(&self, idle_after: Option<Duration>, busy: &impl Fn() -> bool) {
        let Some(limit) = idle_after else {
            return std::future::pending().await;
        };
        loop {
            let due = self.activity.last().checked_add(limit);
            match due {
                Some(due) if due > Instant::now() => tokio::time::sleep_until(due).await,
                Some(_) if busy() => {
                    // A long call is work too: look again soon.
                    tokio::time::sleep(Duration::from_secs(1).min(limit)).await
                }
                Some(_) => return,
                None => return std::future::pending().await,
            }
        }
    }

    /// One event of the served client; `Some` when it ends the serving.
    fn on_client_event(
        &self,
        ev: Result<ServerEvent, broadcast::error::RecvError>,
        client: &ServerClient,
    ) -> Option<Outcome> {
        match ev {
            Ok(ServerEvent::Closed(reason)) => {
                warn!("server exited: {reason}");
                let tail = reason.stderr_tail.clone();
                self.update(|s| {
                    s.error = Some(reason.summary.clone());
                    s.stderr_tail = tail;
                });
                if reason.auth_required {
                    return Some(Outcome::AuthRequired);
                }
                return Some(Outcome::Restart);
            }
            Ok(ServerEvent::SessionRenewed) => {
                // A new session may be a redeployed server: show its
                // revision, and list everything again.
                let version = client.negotiated().protocol_version.as_str().to_owned();
                self.update(|s| s.protocol_version = Some(version));
                self.connected();
            }
            Ok(event) => {
                let _ = self.events.send(SupervisorEvent::Changed {
                    server: self.name.clone(),
                    generation: self.generation,
                    event,
                });
            }
            // Re-list everything rather than guess what was missed.
            Err(broadcast::error::RecvError::Lagged(_)) => self.connected(),
            Err(broadcast::error::RecvError::Closed) => return Some(Outcome::Restart),
        }
        None
    }

    /// A command while serving; `Some` when it ends the serving.
    fn on_serve_command(
        &self,
        cmd: Option<Command>,
        started: Instant,
        busy: &impl Fn() -> bool,
        sleep_wanted: &mut bool,
    ) -> Option<Outcome> {
        match cmd {
            Some(Command::Restart) => {
                // Not `ready` while the old process stops: a wait
                // after the restart waits for the new one. The old
                // client goes first, so no call that sees
                // `restarting` is sent to the process being stopped.
                self.client.send_replace(None);
                self.update(|s| {
                    s.error = None;
                    s.state = ServerState::Restarting;
                });
                Some(Outcome::Restart)
            }
            Some(Command::Stop) | None => Some(Outcome::Stop),
            Some(Command::Start) => None,
            Some(Command::Sleep) => {
                if self.activity.last() <= started {
                    if !busy() {
                        info!("catalog learned; idle until the first call");
                        return Some(Outcome::Idle);
                    }
                    *sleep_wanted = true;
                }
                None
            }
        }
    }
}

/// The next command that is not about idling: `Start` and `Sleep` only
/// matter to an idle or a serving supervisor (several callers may ask to
/// start one; a start in progress must not be cut short by that).
async fn control_command(commands: &mut mpsc::Receiver<Command>) -> Option<Command> {
    loop {
        match commands.recv().await {
            Some(Command::Start | Command::Sleep) => {}
            other => return other,
        }
    }
}

/// Most stderr lines per second one server's process may put on the event
/// channel every client shares; past it lines are counted, not sent, and a
/// "N stderr lines dropped" line follows. A flooding server must not make
/// clients lag (and re-list everything) or queue up memory.
pub const STDERR_LINES_PER_SECOND: u32 = stdio::STDERR_FOLLOW_LINES_PER_SECOND;

/// The run loop's count of starts and restarts.
struct Tries {
    /// Starts that failed in a row.
    start_failures: u32,
    /// The next wait before a restart.
    backoff: Duration,
    /// Restarts so far (shown in the status).
    restarts: u32,
}

impl Tries {
    fn new(policy: &RestartPolicy) -> Tries {
        Tries {
            start_failures: 0,
            backoff: policy.initial_backoff,
            restarts: 0,
        }
    }

    /// A fresh start (asked for, or after a wait that ended well): not a
    /// failure, and no backoff.
    fn reset(&mut self, policy: &RestartPolicy) {
        self.start_failures = 0;
        self.backoff = policy.initial_backoff;
    }
}

/// What the run loop does after one start.
enum Next {
    /// Start again at once.
    StartNow,
    /// Back off, then start again (`restarting`).
    Restart,
    /// Stay idle until a call or a start.
    Idle,
    /// The supervisor is done.
    Exit,
}

/// What ends [`Supervisor::retry_later`].
enum Later {
    Retry,
    Restart,
    Stop,
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("{0}")]
    Spawn(stdio::StdioError),
    #[error("{0}")]
    Handshake(ClientError),
    #[error("{0}")]
    Http(HttpError),
}

impl StartError {
    /// The server refused our credentials (HTTP 401/403).
    fn auth_required(&self) -> bool {
        match self {
            StartError::Http(HttpError::Connect { auth_required, .. }) => *auth_required,
            StartError::Handshake(ClientError::Request {
                error: PeerError::Closed(reason),
                ..
            }) => reason.auth_required,
            _ => false,
        }
    }
}

/// A missing command, a `sandbox` the kernel cannot enforce under
/// `require`, an unsupported revision, a bad URL or refused
/// credentials will not fix themselves.
fn retryable(e: &StartError) -> bool {
    !e.auth_required()
        && !matches!(
            e,
            StartError::Spawn(
                stdio::StdioError::CommandNotFound { .. }
                    | stdio::StdioError::EmptyCommand { .. }
                    | stdio::StdioError::SandboxNotEnforced { .. }
            ) | StartError::Http(
                HttpError::InvalidUrl { .. }
                    | HttpError::InvalidHeader { .. }
                    | HttpError::NoTls { .. }
            ) | StartError::Handshake(ClientError::UnsupportedVersion { .. })
        )
}

/// A short stable hash of a launch configuration (its debug form: the
/// command, arguments, environment or URL), never stored in clear.
fn config_hash(launch: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(launch.as_bytes());
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}
