//! Local-socket IPC between the daemon and its clients (CLI, bridge).
//!
//! The wire is the same newline-delimited JSON-RPC as stdio, framed by
//! [`BoundedLineCodec`](crate::transport::framing::BoundedLineCodec); each
//! socket becomes a [`Connection`](crate::transport::Connection), so the
//! daemon runs one [`Peer`](crate::jsonrpc::Peer) per client and the CLI
//! runs one over [`connect`]. This layer only listens, connects, guards access
//! and turns sockets into connections; malformed input is the peer's business.
//!
//! # Where the socket lives
//!
//! [`resolve_socket_path`]: `--socket`, then `$MCPHOST_SOCKET`, then
//! [`default_socket_path`]:
//! 1. on Linux `/run/user/UID/mcphost/mcphost.sock`, when that directory
//!    exists and is ours (the login manager's runtime directory);
//! 2. else `~/.cache/mcphost/mcphost.sock` (macOS:
//!    `~/Library/Caches/mcphost/mcphost.sock`), `~` being the home directory
//!    in the password database;
//! 3. else, with no home directory at all, `/tmp/mcphost-UID/mcphost.sock`.
//!
//! No environment variable but `MCPHOST_SOCKET` moves it: hosts spawn
//! `mcphost bridge` with environments of their own (often without
//! `XDG_RUNTIME_DIR`), and each must find the one daemon of the user.
//!
//! # Security
//!
//! Only filesystem sockets are used: abstract-namespace sockets have no file
//! modes, so any local user could connect. Three layers keep other users out:
//! - the socket's directory is ours and mode 0700 (created so, or tightened;
//!   a symlink, a directory owned by someone else or a shared sticky directory
//!   like `/tmp` is refused);
//! - the socket file is 0600. interprocess `fchmod`s the socket before
//!   `bind()`, so the file never exists with looser permissions (no umask
//!   window); the exact mode is set again right after bind, which can only
//!   restore owner bits a strict umask removed. Being inside the 0700
//!   directory would make any such window harmless anyway;
//! - every accepted connection's peer credentials (`SO_PEERCRED`) must carry
//!   the daemon's own uid, else it is closed and logged.
//!
//! # One daemon per socket
//!
//! [`listen`] holds an exclusive `flock` on `PATH.lock` for the listener's
//! lifetime, so two daemons starting at once cannot both decide the socket is
//! stale and delete each other's. A socket file left by a crashed daemon
//! (connecting is refused) is replaced; one that answers is never touched.
//! The lock file itself stays: removing a lock file races with its next user.

mod conn;
mod listen;
mod path;

use std::io;
use std::path::PathBuf;

#[doc(hidden)]
pub use conn::fuzz_socket_reader;
pub use conn::{connect, connect_blocking};
pub use listen::{
    ListenOptions, Listener, PeerCred, SocketLock, listen, listener_lock_path, prepare_socket_dir,
};
pub use path::{
    SOCKET_ENV, STATE_DIR_ENV, default_socket_path, default_state_dir, resolve_socket_path,
    user_home_dir,
};

/// Default longest accepted message, as for stdio servers.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Default bound of each connection's outbound queue.
pub const DEFAULT_OUTBOUND_CAPACITY: usize = 1024;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IpcError {
    #[error(
        "another mcphost daemon is already listening on {}; stop it first or use --socket",
        path.display()
    )]
    AlreadyRunning { path: PathBuf },
    #[error(
        "{} exists and is not a socket; refusing to replace it (remove it yourself or use --socket)",
        path.display()
    )]
    NotASocket { path: PathBuf },
    #[error("refusing to use {} as the socket directory: {reason}", dir.display())]
    UnsafeDir { dir: PathBuf, reason: String },
    #[error("no mcphost daemon is listening on {} ({source})", path.display())]
    NotRunning { path: PathBuf, source: io::Error },
    #[error(
        "the process listening on {} runs as uid {uid}, not as us (uid {ours}); refusing to talk to it",
        path.display()
    )]
    ForeignDaemon { path: PathBuf, uid: u32, ours: u32 },
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl IpcError {
    fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> IpcError {
        let path = path.into();
        move |source| IpcError::Io {
            action,
            path,
            source,
        }
    }
}

/// Our effective uid: the one peers must match.
fn our_uid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}
