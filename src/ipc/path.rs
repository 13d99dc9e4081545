//! Where the daemon's socket lives.

use std::path::PathBuf;

use directories::ProjectDirs;

/// Environment variable naming the socket, below `--socket` in precedence.
pub const SOCKET_ENV: &str = "MCPHOST_SOCKET";

const APP: &str = "mcphost";
const SOCKET_NAME: &str = "mcphost.sock";

/// The socket path when neither `--socket` nor `$MCPHOST_SOCKET` is given:
/// `$XDG_RUNTIME_DIR/mcphost/mcphost.sock`, else the per-user cache
/// directory (`~/.cache/mcphost/mcphost.sock` on Linux), else
/// `$TMPDIR/mcphost-UID/mcphost.sock`. See the [module docs](super).
pub fn default_socket_path() -> PathBuf {
    // Checked before `ProjectDirs`, which gives up without a home directory.
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)
        && runtime.is_absolute()
    {
        return runtime.join(APP).join(SOCKET_NAME);
    }
    if let Some(dirs) = ProjectDirs::from("", "", APP) {
        // The runtime dir is the right place (tmpfs, per user, cleaned at
        // logout); the cache dir is the per-user fallback where it is missing.
        let dir = dirs.runtime_dir().unwrap_or_else(|| dirs.cache_dir());
        return dir.join(SOCKET_NAME);
    }
    // No home at all: a per-uid directory that `listen` creates 0700 and
    // refuses if someone else made it first.
    std::env::temp_dir()
        .join(format!("{APP}-{}", super::our_uid()))
        .join(SOCKET_NAME)
}

/// Environment variable naming the daemon's state directory.
pub const STATE_DIR_ENV: &str = "MCPHOST_STATE_DIR";

/// Where the daemon keeps what it learned and must survive a restart (the
/// era each server spoke): `$MCPHOST_STATE_DIR`, else the per-user state
/// directory (`~/.local/state/mcphost` on Linux, `~/Library/Application
/// Support/mcphost` on macOS). `None` without a home directory.
pub fn default_state_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(STATE_DIR_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let dirs = ProjectDirs::from("", "", APP)?;
    Some(
        dirs.state_dir()
            .map(PathBuf::from)
            .unwrap_or_else(|| dirs.data_local_dir().to_owned()),
    )
}

/// `--socket` if given, then `$MCPHOST_SOCKET` if set and non-empty, then
/// [`default_socket_path`]. Relative paths are made absolute, so logs and
/// errors name the real file.
pub fn resolve_socket_path(cli: Option<PathBuf>) -> PathBuf {
    let chosen = cli
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(|| {
            std::env::var_os(SOCKET_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(default_socket_path);
    std::path::absolute(&chosen).unwrap_or(chosen)
}
