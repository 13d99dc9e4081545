//! The daemon: config, registry and engine behind the local socket, hot
//! config reload, and a graceful stop on SIGINT/SIGTERM.

mod editor;
pub use editor::StoreEditor;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::{Instrument, error, info, info_span, warn};

use crate::auth::process_env;
use crate::client::PolicyHost;
use crate::config::location::ConfigLocation;
use crate::config::shell_path::login_shell_path;
use crate::config::store::ConfigStore;
use crate::engine::{BUSY, Engine, EngineBuilder, EngineInfo, SessionLimits};
use crate::ipc::{self, ListenOptions};
use crate::jsonrpc::{Incoming, decode};
use crate::protocol::{ErrorObject, Message, Response};
use crate::registry::sign_in::HostSignIn;
use crate::transport::{Connection, TransportEvent};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Ipc(#[from] ipc::IpcError),
    #[error("cannot watch {}: {source}", path.display())]
    Watch {
        path: PathBuf,
        source: notify::Error,
    },
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// Another daemon runs this config (on another socket): a second would
    /// start every server twice.
    #[error(
        "a daemon already runs for {} ({holder}); a second would run every server twice. \
         Use its socket (--socket or MCPHOST_SOCKET), or stop it first (mcphost daemon stop \
         with its socket)",
        config.display()
    )]
    SameConfig { config: PathBuf, holder: String },
    #[error(transparent)]
    Lock(#[from] crate::lockfile::LockError),
}

/// Default of [`DaemonOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// How long a client over the connection cap has to send its first request,
/// which is answered with the error; after that it gets one without an id.
const REFUSE_WAIT: Duration = Duration::from_secs(2);

/// Refusals that wait for the client's first request. Past this many (a
/// flood), a refused client gets the error without an id at once, so
/// refusals cannot pin a descriptor each for seconds.
const PATIENT_REFUSALS: usize = 32;

/// How long an impatient refusal waits for the client to hang up after the
/// error went out.
const IMPATIENT_WAIT: Duration = Duration::from_millis(200);

pub struct DaemonOptions {
    pub socket: PathBuf,
    pub config: ConfigLocation,
    /// Clients connected at once; one more is answered with an error and
    /// closed, so one misbehaving client cannot exhaust the daemon.
    pub max_connections: usize,
    /// Limits of each client's session (requests in flight).
    pub session: SessionLimits,
    /// Answers the servers' sampling and elicitation requests that no
    /// connected host can answer (the CLI's `--on-elicitation` /
    /// `--on-sampling`).
    pub fallback: PolicyHost,
    /// The version `mcphost/status` reports instead of this build's (tests
    /// of the CLI's version check only: `MCPHOST_TEST_FAKE_VERSION`).
    pub report_version: Option<String>,
    /// The service manager that runs this daemon (`MCPHOST_SERVICE`, set by
    /// the unit `mcphost service install` writes), for `mcphost/status`.
    pub service: Option<String>,
    /// Who started it (a command's name and pid, the service manager), for
    /// `mcphost/status`.
    pub started_by: Option<String>,
}

/// What the daemon keeps across runs in `state` (the eras servers spoke,
/// their pins; in memory without one), its stored catalogs and its OAuth.
fn state_options(
    auth: Option<Arc<crate::auth::AuthContext>>,
    state: Option<&Path>,
) -> crate::registry::ServerOptions {
    let eras = match state {
        Some(dir) => crate::registry::EraCache::at(dir.join("eras.json")),
        None => crate::registry::EraCache::in_memory(),
    };
    crate::registry::ServerOptions {
        eras: Arc::new(eras),
        auth,
        catalogs: crate::registry::stored::CatalogStore::default_dir()
            .map(|d| Arc::new(crate::registry::stored::CatalogStore::at(d))),
        pins: pin_store(state),
        ..Default::default()
    }
}

/// The pinned definitions in `pins.json` of the state directory (in memory
/// without one): the daemon's, which `--direct` reads and adds to as well.
pub fn pin_store(state: Option<&Path>) -> Arc<crate::registry::pins::PinStore> {
    Arc::new(match state {
        Some(dir) => crate::registry::pins::PinStore::at(dir.join("pins.json")),
        None => crate::registry::pins::PinStore::in_memory(),
    })
}

/// Run until SIGINT or SIGTERM; every server is stopped before returning.
pub async fn run(opts: DaemonOptions) -> Result<(), DaemonError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigterm = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;

    let store = ConfigStore::open(opts.config.clone(), Arc::new(process_env))?;
    let store = Arc::new(store);
    let cfg = store.current();
    let one_per_config = config_lock(&opts.config.path, &opts.socket).await?;
    let listen = ListenOptions::new(opts.socket.clone());
    // Bind before starting servers: a second daemon must fail before it
    // spawns anything.
    let mut listener = ipc::listen(listen).await?;
    let shell_path = if cfg.login_shell_path {
        let p = login_shell_path().await;
        Some(p.path.clone())
    } else {
        None
    };
    // `mcphost/daemon/shutdown` cancels it: the same stop as SIGTERM.
    let stop = tokio_util::sync::CancellationToken::new();
    // Eras, pins and the audit log: the state directory, when there is one.
    let state = crate::ipc::default_state_dir();
    // A daemon never pops up a browser on its own: a sign-in page goes to
    // the registered host app (a URL elicitation), else MCPHOST_BROWSER if
    // set; otherwise the server waits in auth_required for
    // `mcphost auth login NAME`.
    let (host_browser, host_slot) = crate::auth::browser::HostBrowser::unbound();
    let auth = crate::auth::AuthContext::for_host(host_browser);
    let engine = EngineBuilder::new(cfg.clone())
        .server_options(state_options(auth.clone(), state.as_deref()))
        .shell_path(shell_path)
        .fallback(opts.fallback)
        .info(EngineInfo {
            socket: Some(listener.path().to_owned()),
            config_path: Some(opts.config.path.clone()),
            version: opts.report_version.clone(),
            stop: Some(stop.clone()),
            service: opts.service.clone(),
            started_by: opts.started_by.clone(),
        })
        .editor(Arc::new(StoreEditor(store.clone())))
        .audit_dir(state)
        .start();
    let registry = engine.registry().clone();
    let _ = host_slot.set(Arc::new(HostSignIn(engine.host())));
    let _signed_in = auth.as_ref().and_then(|a| {
        let store = a.store.clone()?;
        Some(tokio::spawn(
            ready_once_signed_in(store, a.attempts.clone(), registry.clone())
                .instrument(info_span!("auth")),
        ))
    });
    info!(socket = %listener.path().display(), config = %opts.config.path.display(), servers = cfg.servers.len(), "daemon ready");

    let (reload_tx, reload_rx) = mpsc::channel::<()>(1);
    let _watcher = watch_config(&opts.config.path, reload_tx)?;
    // Reloads run beside the loop: accept and signals never wait for one.
    let reloader = tokio::spawn(
        reload_on_change(store.clone(), engine.clone(), reload_rx).instrument(info_span!("reload")),
    );
    let mut clients = 0u64;
    let patience = Arc::new(tokio::sync::Semaphore::new(PATIENT_REFUSALS));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((conn, cred)) => {
                    clients += 1;
                    let span = info_span!("client", id = clients, pid = cred.pid);
                    // Only this loop adds sessions, so the count cannot pass
                    // the cap between this check and `serve`.
                    let open = engine.session_count();
                    if open >= opts.max_connections {
                        span.in_scope(|| warn!(open, "refused a client: the connection cap is reached (--max-connections)"));
                        let error = ErrorObject::new(
                            BUSY,
                            format!(
                                "too many clients: the daemon's limit is {} connected at once \
                                 (mcphost daemon --max-connections); try again when one disconnects",
                                opts.max_connections
                            ),
                        );
                        let patient = patience.clone().try_acquire_owned().ok();
                        tokio::spawn(refuse(conn, error, patient).instrument(span));
                        continue;
                    }
                    span.in_scope(|| info!("connected"));
                    engine.serve_with(&format!("client-{clients}"), conn, opts.session);
                }
                Err(e) => warn!("accept failed: {e}"),
            },
            _ = sigterm.recv() => { info!("SIGTERM: stopping"); break; }
            _ = sigint.recv() => { info!("SIGINT: stopping"); break; }
            _ = stop.cancelled() => break,
        }
    }
    // New clients are refused from here on (no socket), while the lock
    // keeps a new daemon off the socket until every server has stopped.
    let held = listener.close();
    // `apply` never awaits, so an abort cannot leave half a reload; the
    // await makes sure none runs once shutdown has begun.
    reloader.abort();
    let _ = reloader.await;
    // Also waits for servers a reload is stopping, and the audit log.
    engine.shutdown().await;
    // Before the listener lock: whoever sees that one free may start a
    // daemon for this config at once.
    drop(one_per_config);
    drop(held);
    info!("stopped");
    Ok(())
}

/// `<config>.daemon.lock` beside the config file (a symlink's target),
/// held while the daemon runs, so that two daemons never run one config: a
/// host that names another socket gets the first daemon's instead of a
/// second set of servers. It says who holds it: pid and socket. `None` when
/// the config's directory does not exist (a fresh install, no servers).
async fn config_lock(
    config: &Path,
    socket: &Path,
) -> Result<Option<crate::lockfile::FileLock>, DaemonError> {
    let target = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".daemon.lock");
    let path = target.with_file_name(name);
    if !path.parent().is_some_and(Path::is_dir) {
        return Ok(None);
    }
    match crate::lockfile::lock_within(&path, Duration::ZERO).await {
        Ok(lock) => {
            let socket = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
            lock.set_contents(&format!(
                "pid {} on {}\n",
                std::process::id(),
                socket.display()
            ))?;
            Ok(Some(lock))
        }
        Err(crate::lockfile::LockError::Timeout { .. }) => {
            let holder = std::fs::read_to_string(&path)
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "starting".to_owned());
            // On our own socket it is the daemon that already listens here.
            let ours = format!("on {}", socket.display());
            if holder.ends_with(&ours) {
                return Err(DaemonError::Ipc(ipc::IpcError::AlreadyRunning {
                    path: socket.to_path_buf(),
                }));
            }
            Err(DaemonError::SameConfig {
                config: config.to_path_buf(),
                holder,
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// Answers a client's first request with `error` (or sends it without an id
/// if none comes in time), then closes: never a silent drop. Without a
/// `patient` permit the error goes out at once, without an id.
async fn refuse(
    conn: Connection,
    error: ErrorObject,
    patient: Option<tokio::sync::OwnedSemaphorePermit>,
) {
    let Connection {
        outbound,
        mut inbound,
        control,
    } = conn;
    let (wait, linger) = match &patient {
        Some(_) => (REFUSE_WAIT, REFUSE_WAIT),
        None => (Duration::ZERO, IMPATIENT_WAIT),
    };
    let first = tokio::time::timeout(wait, async {
        while let Some(ev) = inbound.recv().await {
            match ev {
                TransportEvent::Frame(line) | TransportEvent::FrameOn(line, _) => {
                    match decode(&line) {
                        Ok(Incoming::Single(Ok(Message::Request(req)))) => {
                            return Some(Some(req.id));
                        }
                        // A notification needs no answer; wait for a request.
                        Ok(Incoming::Single(Ok(Message::Notification(_)))) => {}
                        _ => return Some(None),
                    }
                }
                TransportEvent::Closed(_) => return None,
                TransportEvent::Oversized { .. } | TransportEvent::Failed { .. } => {
                    return Some(None);
                }
            }
        }
        None
    })
    .await;
    let id = match first {
        Ok(Some(id)) => id,
        Ok(None) => return, // gone before asking anything
        Err(_) => None,
    };
    let reply = Message::Response(Response {
        id,
        outcome: Err(error),
    });
    if outbound.send(reply.to_line().into()).await.is_err() {
        return;
    }
    // Without senders the writer flushes the answer and sends EOF; the
    // client then hangs up, or is cut off when `control` goes.
    drop(outbound);
    let _ = tokio::time::timeout(linger, async {
        while let Some(ev) = inbound.recv().await {
            if matches!(ev, TransportEvent::Closed(_)) {
                break;
            }
        }
    })
    .await;
    drop(control);
    drop(patient);
}

/// Apply each config change; a rejected one keeps the last good config.
async fn reload_on_change(
    store: Arc<ConfigStore>,
    engine: Arc<Engine>,
    mut changes: mpsc::Receiver<()>,
) {
    while changes.recv().await.is_some() {
        // Editors write in bursts; let them finish.
        tokio::time::sleep(Duration::from_millis(150)).await;
        while changes.try_recv().is_ok() {}
        match store.reload().await {
            Ok(Some(edited)) => {
                info!("config changed; applying");
                engine.apply(&edited.config);
            }
            Ok(None) => {}
            Err(e) => error!("config rejected, keeping the last good one: {e}"),
        }
    }
}

/// Watch the config's directory, not the file: editors replace files by
/// rename, which a watch on the old inode would miss.
/// How often the token store is looked at for sign-ins made elsewhere.
const SIGN_IN_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// A server waiting in `auth_required` starts again as soon as a token
/// for it lands in the store from another process (`mcphost auth login`,
/// an embedded host's sign-in): it gets ready by itself. Its own sign-ins,
/// made here, do not restart it: a server that refuses every token would
/// be signed in to without end (issue 21).
async fn ready_once_signed_in(
    store: crate::auth::store::TokenStore,
    attempts: Arc<crate::auth::Attempts>,
    registry: crate::registry::Registry,
) {
    let me = std::process::id();
    // Per server name: what its entries hold, and who wrote them.
    type Stamp = std::collections::BTreeMap<String, Vec<(u64, Option<u32>, Option<String>)>>;
    let stamp = |store: &crate::auth::store::TokenStore| -> Stamp {
        let mut m = Stamp::new();
        for (_, e) in store.list().unwrap_or_default() {
            if let Some(server) = e.server.clone() {
                m.entry(server).or_default().push((
                    e.updated_at,
                    e.writer,
                    e.tokens.map(|t| t.access_token.into_inner()),
                ));
            }
        }
        for v in m.values_mut() {
            v.sort();
        }
        m
    };
    let mut last = stamp(&store);
    loop {
        tokio::time::sleep(SIGN_IN_POLL).await;
        let now = stamp(&store);
        if now == last {
            continue;
        }
        let signed_in_elsewhere: Vec<&String> = now
            .iter()
            .filter(|(server, v)| {
                last.get(*server) != Some(v)
                    && v.iter().any(|(_, writer, token)| {
                        token.is_some()
                            && *writer != Some(me)
                            && !last
                                .get(*server)
                                .is_some_and(|old| old.iter().any(|(_, _, t)| t == token))
                    })
            })
            .map(|(server, _)| server)
            .collect();
        for s in registry.statuses() {
            if matches!(
                s.state,
                crate::registry::supervisor::ServerState::AuthRequired
                    | crate::registry::supervisor::ServerState::AuthFailed
            ) && signed_in_elsewhere.contains(&&s.name)
            {
                info!(server = %s.name, "signed in by another process; starting it again");
                attempts.reset(&s.name);
                if let Err(e) = registry.restart(&s.name).await {
                    warn!(server = %s.name, "restart after sign-in: {e}");
                }
            }
        }
        last = now;
    }
}

fn watch_config(
    path: &Path,
    tx: mpsc::Sender<()>,
) -> Result<notify::RecommendedWatcher, DaemonError> {
    let dir = path
        .parent()
        // A bare file name ("config.json") has an empty parent: the cwd.
        .filter(|d| !d.as_os_str().is_empty())
        .map(Path::to_owned)
        .unwrap_or_else(|| PathBuf::from("."));
    let file = path.file_name().map(|f| f.to_owned());
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res
            && ev.paths.iter().any(|p| p.file_name() == file.as_deref())
        {
            let _ = tx.try_send(());
        }
    })
    .map_err(|source| DaemonError::Watch {
        path: dir.clone(),
        source,
    })?;
    if dir.is_dir() {
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|source| DaemonError::Watch {
                path: dir.clone(),
                source,
            })?;
    } else {
        warn!(dir = %dir.display(), "config directory does not exist; hot reload is off until restart");
    }
    Ok(watcher)
}
