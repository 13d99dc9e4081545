//! One supervisor task per server: start it, watch it, restart it with
//! backoff, and give up into `failed` when the handshake keeps failing.
//!
//! The supervisor owns the [`ServerClient`]; callers get a cheap
//! [`SupervisorHandle`] with the current client (if ready), the status, and
//! commands (restart, stop).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use tracing::{Instrument, info, info_span, warn};

use crate::client::{ClientError, ClientOptions, ServerClient, ServerEvent};
use crate::jsonrpc::PeerError;
use crate::transport::Connection;
use crate::transport::http::{self, HttpConfig, HttpError};
use crate::transport::stdio::{self, StdioConfig};

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
        }
    }
}

/// How to start a server.
#[derive(Debug, Clone)]
pub enum Launch {
    Stdio(StdioConfig),
    Http(HttpConfig),
}

/// When to restart and when to give up.
#[derive(Debug, Clone)]
pub struct RestartPolicy {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Running this long without a crash resets the backoff.
    pub reset_after: Duration,
    /// Consecutive failed starts (spawn or handshake) before `failed`.
    /// HTTP servers are exempt: a remote server that cannot be reached is
    /// usually being redeployed, so it is retried (with backoff) until it
    /// answers; only errors that cannot fix themselves end in `failed`.
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
}

impl ServerStatus {
    fn new(name: &str, launch: &Launch, state: ServerState) -> Self {
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

/// What a supervisor tells the registry.
#[derive(Debug, Clone)]
pub enum SupervisorEvent {
    /// The state changed (includes a fresh status).
    State(Arc<ServerStatus>),
    /// A new client is ready: list its catalog.
    Connected { server: String },
    /// The ready client re-listed something after list_changed.
    Changed { server: String, event: ServerEvent },
}

enum Command {
    Restart,
    Stop,
}

/// A handle to one supervised server.
#[derive(Clone)]
pub struct SupervisorHandle {
    name: String,
    client: watch::Receiver<Option<Arc<ServerClient>>>,
    status: watch::Receiver<Arc<ServerStatus>>,
    commands: mpsc::Sender<Command>,
}

impl SupervisorHandle {
    pub fn name(&self) -> &str {
        &self.name
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

    /// Restart now (also leaves `failed`).
    pub async fn restart(&self) {
        let _ = self.commands.send(Command::Restart).await;
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
    opts: ClientOptions,
    policy: RestartPolicy,
    disabled: bool,
    events: broadcast::Sender<SupervisorEvent>,
) -> SupervisorHandle {
    let initial = if disabled {
        ServerState::Disabled
    } else {
        ServerState::Starting
    };
    let status = Arc::new(ServerStatus::new(name, &launch, initial));
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
        commands: cmd_rx,
    };
    if !disabled {
        tokio::spawn(
            sup.run()
                .instrument(info_span!("supervisor", server = name)),
        );
    } else {
        tokio::spawn(sup.idle_disabled());
    }
    SupervisorHandle {
        name: name.to_owned(),
        client: client_rx,
        status: status_rx,
        commands: cmd_tx,
    }
}

struct Supervisor {
    name: String,
    launch: Launch,
    opts: ClientOptions,
    policy: RestartPolicy,
    status: watch::Sender<Arc<ServerStatus>>,
    client: watch::Sender<Option<Arc<ServerClient>>>,
    events: broadcast::Sender<SupervisorEvent>,
    commands: mpsc::Receiver<Command>,
}

enum Outcome {
    Stop,
    Restart,
    /// The server refused our credentials while running.
    AuthRequired,
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

    async fn idle_disabled(mut self) {
        // A disabled server has no process; it only answers `stop`.
        while let Some(cmd) = self.commands.recv().await {
            if let Command::Stop = cmd {
                self.update(|s| s.state = ServerState::Stopped);
                return;
            }
        }
    }

    /// Sit in `failed` or `auth_required` until told otherwise. True means
    /// "start again"; false means stopped.
    async fn stay_down(&mut self, state: ServerState, error: Option<String>) -> bool {
        self.update(|s| {
            s.state = state;
            if let Some(e) = error {
                s.error = Some(e);
            }
            s.pid = None;
        });
        match self.commands.recv().await {
            Some(Command::Restart) => true,
            Some(Command::Stop) | None => {
                self.update(|s| s.state = ServerState::Stopped);
                false
            }
        }
    }

    async fn run(mut self) {
        let mut start_failures = 0u32;
        let mut backoff = self.policy.initial_backoff;
        let mut restarts = 0u32;
        loop {
            match self.start().await {
                Ok(client) => {
                    start_failures = 0;
                    let client = Arc::new(client);
                    let started = Instant::now();
                    let outcome = self.serve(client.clone()).await;
                    self.client.send_replace(None);
                    // In-flight calls may still hold the client; they fail
                    // with the close reason once it is shut down.
                    client.shutdown().await;
                    match outcome {
                        Outcome::Stop => {
                            self.update(|s| {
                                s.state = ServerState::Stopped;
                                s.pid = None;
                            });
                            info!("supervisor stopped");
                            return;
                        }
                        Outcome::Restart => {}
                        Outcome::AuthRequired => {
                            if self.stay_down(ServerState::AuthRequired, None).await {
                                start_failures = 0;
                                backoff = self.policy.initial_backoff;
                                continue;
                            }
                            return;
                        }
                    }
                    if started.elapsed() >= self.policy.reset_after {
                        backoff = self.policy.initial_backoff;
                    }
                }
                Err(e) => {
                    start_failures += 1;
                    let msg = e.to_string();
                    warn!(attempt = start_failures, "start failed: {msg}");
                    let unlimited = self.status.borrow().retries_without_limit;
                    let gave_up = start_failures >= self.policy.max_start_failures && !unlimited;
                    if gave_up || !retryable(&e) {
                        let state = if e.auth_required() {
                            ServerState::AuthRequired
                        } else {
                            ServerState::Failed
                        };
                        if self.stay_down(state, Some(msg)).await {
                            start_failures = 0;
                            backoff = self.policy.initial_backoff;
                            continue;
                        }
                        return;
                    }
                    self.update(|s| s.error = Some(msg));
                }
            }
            restarts += 1;
            self.update(|s| {
                s.state = ServerState::Restarting;
                s.restarts = restarts;
                s.pid = None;
            });
            // Back off, but a command cuts the wait short.
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Restart) => {}
                    Some(Command::Stop) | None => {
                        self.update(|s| s.state = ServerState::Stopped);
                        return;
                    }
                }
            }
            backoff = backoff.saturating_mul(2).min(self.policy.max_backoff);
        }
    }

    async fn start(&mut self) -> Result<ServerClient, StartError> {
        if !matches!(self.status.borrow().state, ServerState::Restarting) {
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
        self.start_with(conn).await
    }

    async fn start_with(&mut self, conn: Connection) -> Result<ServerClient, StartError> {
        let pid = conn.control.server_pid();
        let control = conn.control.clone();
        self.update(|s| s.pid = pid);
        let client = ServerClient::connect(&self.name, conn, self.opts.clone())
            .await
            .map_err(StartError::Handshake)?;
        let version = client.negotiated().protocol_version.as_str().to_owned();
        let transport = control.kind();
        info!(%version, pid, transport, "ready");
        self.update(|s| {
            s.transport = transport;
            s.state = ServerState::Ready;
            s.protocol_version = Some(version);
            s.error = None;
            s.stderr_tail.clear();
        });
        Ok(client)
    }

    /// Run while the client is healthy; return why we stopped.
    async fn serve(&mut self, client: Arc<ServerClient>) -> Outcome {
        let mut events = client.subscribe();
        self.client.send_replace(Some(client.clone()));
        let _ = self.events.send(SupervisorEvent::Connected {
            server: self.name.clone(),
        });
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Ok(ServerEvent::Closed(reason)) => {
                        warn!("server exited: {reason}");
                        let tail = reason.stderr_tail.clone();
                        self.update(|s| {
                            s.error = Some(reason.summary.clone());
                            s.stderr_tail = tail;
                        });
                        if reason.auth_required {
                            return Outcome::AuthRequired;
                        }
                        return Outcome::Restart;
                    }
                    Ok(ServerEvent::SessionRenewed) => {
                        // A new session may be a redeployed server: show its
                        // revision, and list everything again.
                        let version = client.negotiated().protocol_version.as_str().to_owned();
                        self.update(|s| s.protocol_version = Some(version));
                        let _ = self.events.send(SupervisorEvent::Connected { server: self.name.clone() });
                    }
                    Ok(event) => {
                        let _ = self.events.send(SupervisorEvent::Changed { server: self.name.clone(), event });
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Re-list everything rather than guess what was missed.
                        let _ = self.events.send(SupervisorEvent::Connected { server: self.name.clone() });
                    }
                    Err(broadcast::error::RecvError::Closed) => return Outcome::Restart,
                },
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Restart) => {
                        self.update(|s| s.error = None);
                        return Outcome::Restart;
                    }
                    Some(Command::Stop) | None => return Outcome::Stop,
                },
            }
        }
    }
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

/// A missing command, an unsupported revision, a bad URL or refused
/// credentials will not fix themselves.
fn retryable(e: &StartError) -> bool {
    !e.auth_required()
        && !matches!(
            e,
            StartError::Spawn(
                stdio::StdioError::CommandNotFound { .. } | stdio::StdioError::EmptyCommand { .. }
            ) | StartError::Http(HttpError::InvalidUrl { .. } | HttpError::InvalidHeader { .. })
                | StartError::Handshake(ClientError::UnsupportedVersion { .. })
        )
}
