//! The daemon side: a guarded socket directory, one listener, checked peers.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use interprocess::local_socket::tokio::Listener as LocalListener;
use interprocess::local_socket::traits::tokio::Listener as _;
use interprocess::local_socket::{GenericFilePath, ListenerOptions, ToFsName};
use interprocess::os::unix::local_socket::ListenerOptionsExt;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::conn::{self, CONNECT_TIMEOUT};
use super::{DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_OUTBOUND_CAPACITY, IpcError, our_uid};
use crate::transport::Connection;

const DIR_MODE: u32 = 0o700;
const SOCKET_MODE: u32 = 0o600;
/// S_ISVTX as a u32 on every platform (libc's is a u16 on macOS).
const STICKY: u32 = 0o1000;
/// How long a live daemon may take to accept a probing connect.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after running out of file descriptors, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// The socket file; its directory is created (0700) as needed.
    pub path: PathBuf,
    /// Longest accepted message; longer ones become `Oversized` events.
    pub max_message_bytes: usize,
    /// Bound of each client's outbound queue. The daemon `try_send`s
    /// notifications and disconnects a client whose queue is full.
    pub outbound_capacity: usize,
}

impl ListenOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ListenOptions {
            path: path.into(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            outbound_capacity: DEFAULT_OUTBOUND_CAPACITY,
        }
    }
}

impl Default for ListenOptions {
    fn default() -> Self {
        Self::new(super::default_socket_path())
    }
}

/// Who is at the other end of a connection, from `SO_PEERCRED` at connect
/// time (effective ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<i32>,
}

/// A bound daemon socket. Dropping it removes the socket file, if the file
/// at the path is still the one it created, and releases the lock.
pub struct Listener {
    inner: LocalListener,
    path: PathBuf,
    /// (dev, ino) of the socket file we bound.
    identity: (u64, u64),
    uid: u32,
    max_message_bytes: usize,
    outbound_capacity: usize,
    /// Held for our lifetime (or past it, by [`Listener::close`]); declared
    /// last so it is released last.
    lock: Option<Flock<File>>,
}

/// The one-daemon lock of a socket no longer listened on: while it is held
/// no other daemon can take the socket. Dropping it releases the lock.
#[derive(Debug)]
pub struct SocketLock {
    _lock: Option<Flock<File>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Binds the daemon's socket at `opts.path`; see the [module docs](super)
/// for the directory rules and how an existing socket is handled.
pub async fn listen(opts: ListenOptions) -> Result<Listener, IpcError> {
    let path = std::path::absolute(&opts.path)
        .map_err(IpcError::io("resolving the socket path", &opts.path))?;
    let (Some(dir), Some(_)) = (path.parent(), path.file_name()) else {
        return Err(IpcError::UnsafeDir {
            dir: path.clone(),
            reason: "the socket path has no parent directory".to_owned(),
        });
    };
    let uid = our_uid();
    prepare_dir(dir, DIR_MODE, uid)?;

    let lock = take_lock(&listener_lock_path(&path), &path)?;

    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(IpcError::io("inspecting", &path)(e)),
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(IpcError::NotASocket { path });
        }
        Ok(_) => clear_stale_socket(&path).await?,
    }

    let name = path
        .as_path()
        .to_fs_name::<GenericFilePath>()
        .map_err(IpcError::io("naming the socket", &path))?;
    // interprocess fchmods the socket before bind(), so the file never
    // exists with looser permissions; `reclaim_name(false)` because its
    // unconditional unlink on drop could delete a successor's socket.
    let inner = ListenerOptions::new()
        .name(name)
        .reclaim_name(false)
        // mode_t is u16 on macOS
        .mode(SOCKET_MODE as libc::mode_t)
        .create_tokio()
        .map_err(|e| match e.kind() {
            // Someone bound it between our check and bind(), ignoring the lock.
            io::ErrorKind::AddrInUse => IpcError::AlreadyRunning { path: path.clone() },
            _ => IpcError::io("binding", &path)(e),
        })?;
    // bind() also applies the umask, which may have cleared bits we want
    // (the owner's write bit is what lets us connect). Setting the exact mode
    // now can only widen 0600-or-less to 0600.
    let bound = std::fs::set_permissions(&path, Permissions::from_mode(SOCKET_MODE))
        .map_err(IpcError::io("setting the mode of", &path))
        .and_then(|()| std::fs::symlink_metadata(&path).map_err(IpcError::io("inspecting", &path)));
    let meta = match bound {
        Ok(meta) => meta,
        Err(e) => {
            // Still inside our locked directory: the file is ours to remove.
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    };
    tracing::info!(path = %path.display(), "listening");
    Ok(Listener {
        inner,
        identity: (meta.dev(), meta.ino()),
        path,
        uid,
        max_message_bytes: opts.max_message_bytes,
        outbound_capacity: opts.outbound_capacity,
        lock: Some(lock),
    })
}

/// The lock file a daemon holds on `socket` for as long as it listens
/// (`PATH.lock` beside the socket).
pub fn listener_lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    socket.with_file_name(name)
}

/// Creates the socket's directory (0700) or checks an existing one, by the
/// same rules as [`listen`]: for clients that keep files beside the socket
/// (the CLI's start-up lock) before any daemon has made it.
pub fn prepare_socket_dir(socket: &Path) -> Result<(), IpcError> {
    let path =
        std::path::absolute(socket).map_err(IpcError::io("resolving the socket path", socket))?;
    let Some(dir) = path.parent() else {
        return Err(IpcError::UnsafeDir {
            dir: path.clone(),
            reason: "the socket path has no parent directory".to_owned(),
        });
    };
    prepare_dir(dir, DIR_MODE, our_uid())
}

impl Listener {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stops listening and removes the socket file (as dropping does), but
    /// keeps the one-daemon lock until the returned [`SocketLock`] drops: a
    /// daemon stopping its servers refuses new clients at once (they see no
    /// daemon, instead of waiting in the backlog) while no new daemon can
    /// start on the socket before it is done.
    pub fn close(mut self) -> SocketLock {
        SocketLock {
            _lock: self.lock.take(),
        }
    }

    /// Waits for the next client of our own uid. Connections from other
    /// users are closed and logged, and waiting goes on; transient failures
    /// (a client gone before we accepted, out of file descriptors) too.
    ///
    /// The connection closes when its `control` is shut down or dropped,
    /// when its `inbound` is dropped, or when the client hangs up.
    pub async fn accept(&mut self) -> Result<(Connection, PeerCred), IpcError> {
        loop {
            let stream = match self.inner.accept().await {
                Ok(stream) => stream,
                Err(e) if is_out_of_resources(&e) => {
                    // Retrying at once would spin until something is freed.
                    tracing::warn!("accepting a connection failed: {e}; retrying shortly");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
                Err(e) if is_client_gone(&e) => {
                    tracing::debug!("a client left before it was accepted: {e}");
                    continue;
                }
                Err(e) => return Err(IpcError::io("accepting on", &self.path)(e)),
            };
            let cred = match conn::peer_cred(&stream) {
                Ok(cred) => cred,
                Err(e) => {
                    tracing::debug!("dropping a connection without credentials: {e}");
                    continue;
                }
            };
            let pid = cred
                .pid
                .map_or_else(|| "unknown".to_owned(), |p| p.to_string());
            if cred.uid != self.uid {
                tracing::warn!(
                    "refused a connection from uid {} (pid {pid}): not the daemon's user",
                    cred.uid
                );
                continue; // Dropping the stream closes it unanswered.
            }
            tracing::debug!(pid = %pid, "accepted a client");
            let span = tracing::debug_span!("ipc", client_pid = %pid);
            let conn = conn::start(
                stream,
                self.max_message_bytes,
                self.outbound_capacity,
                cred.pid,
                format!("client pid {pid}"),
                span,
            );
            return Ok((conn, cred));
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        // Only our own file: someone may have replaced it meanwhile. No
        // unlink-by-inode exists, so a replacement in this very instant
        // could still go; the lock keeps other daemons out of that window.
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if (meta.dev(), meta.ino()) == self.identity => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!(path = %self.path.display(), "cannot remove the socket: {e}");
                }
            }
            Ok(_) => tracing::debug!(
                path = %self.path.display(),
                "the socket file was replaced; leaving it"
            ),
            Err(_) => {}
        }
    }
}

fn is_out_of_resources(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

fn is_client_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Creates `dir` (and parents) as needed and makes sure it is a real
/// directory of ours with exactly `mode`.
fn prepare_dir(dir: &Path, mode: u32, uid: u32) -> Result<(), IpcError> {
    let unsafe_dir = |reason: String| IpcError::UnsafeDir {
        dir: dir.to_owned(),
        reason,
    };
    DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(IpcError::io("creating the socket directory", dir))?;
    // Checked and changed through one descriptor opened without following
    // links, so the directory cannot be swapped between check and chmod.
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .map_err(|e| {
            // A final symlink fails with ELOOP or, with O_DIRECTORY, ENOTDIR.
            let is_link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_symlink());
            match e.raw_os_error() {
                _ if is_link => unsafe_dir("it is a symbolic link".to_owned()),
                Some(libc::ENOTDIR) => unsafe_dir("it is not a directory".to_owned()),
                _ => IpcError::io("opening the socket directory", dir)(e),
            }
        })?;
    let meta = handle
        .metadata()
        .map_err(IpcError::io("inspecting the socket directory", dir))?;
    if meta.uid() != uid {
        return Err(unsafe_dir(format!(
            "it is owned by uid {}, not by us (uid {uid})",
            meta.uid()
        )));
    }
    // Tightening a shared directory such as /tmp (sticky) or / would break
    // the system for everyone else.
    if meta.mode() & STICKY != 0 || dir.parent().is_none() {
        return Err(unsafe_dir(
            "it is a shared directory; put the socket in a directory of its own".to_owned(),
        ));
    }
    let current = meta.mode() & 0o7777;
    if current != mode {
        tracing::warn!(
            dir = %dir.display(),
            "changing the socket directory's mode from {current:o} to {mode:o}"
        );
        handle
            .set_permissions(Permissions::from_mode(mode))
            .map_err(IpcError::io("setting the mode of", dir))?;
    }
    Ok(())
}

fn take_lock(lock_path: &Path, socket: &Path) -> Result<Flock<File>, IpcError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(lock_path)
        .map_err(IpcError::io("opening the lock file", lock_path))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| match errno {
        Errno::EWOULDBLOCK => IpcError::AlreadyRunning {
            path: socket.to_owned(),
        },
        e => IpcError::io("locking", lock_path)(io::Error::from(e)),
    })
}

/// A socket file exists at `path`: remove it only if nothing listens there.
async fn clear_stale_socket(path: &Path) -> Result<(), IpcError> {
    match conn::dial(path, PROBE_TIMEOUT.min(CONNECT_TIMEOUT)).await {
        Ok(_probe) => Err(IpcError::AlreadyRunning {
            path: path.to_owned(),
        }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "removing a stale socket left by a dead daemon");
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(IpcError::io("removing the stale socket", path)(e))
                }
                _ => Ok(()),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        // A full backlog or a slow accept: someone is listening.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err(IpcError::AlreadyRunning {
                path: path.to_owned(),
            })
        }
        Err(e) => Err(IpcError::io("probing the existing socket", path)(e)),
    }
}
