//! Where the daemon's socket lives.

use std::path::PathBuf;

use directories::ProjectDirs;

/// Environment variable naming the socket, below `--socket` in precedence.
pub const SOCKET_ENV: &str = "MCPHOST_SOCKET";

const APP: &str = "mcphost";
const SOCKET_NAME: &str = "mcphost.sock";

/// The socket path when neither `--socket` nor `$MCPHOST_SOCKET` is given.
/// It depends only on the user, never on the environment a host passes
/// (apps spawn servers without `XDG_RUNTIME_DIR`, or with another `HOME`),
/// so every process of the user finds the same daemon: on Linux
/// `/run/user/UID/mcphost/mcphost.sock` when the login manager made that
/// directory, else `~/.cache/mcphost/mcphost.sock`; on macOS
/// `~/Library/Caches/mcphost/mcphost.sock`; `~` is the home directory in the
/// password database ([`user_home_dir`]). Without one,
/// `/tmp/mcphost-UID/mcphost.sock`. See the [module docs](super).
pub fn default_socket_path() -> PathBuf {
    let uid = super::our_uid();
    #[cfg(target_os = "linux")]
    {
        // What logind creates and XDG_RUNTIME_DIR names, found without it.
        let run = PathBuf::from(format!("/run/user/{uid}"));
        if owned_dir(&run, uid) {
            return run.join(APP).join(SOCKET_NAME);
        }
    }
    if let Some(home) = user_home_dir() {
        #[cfg(target_os = "macos")]
        let dir = home.join("Library/Caches").join(APP);
        #[cfg(not(target_os = "macos"))]
        let dir = home.join(".cache").join(APP);
        return dir.join(SOCKET_NAME);
    }
    // No home at all: a per-uid directory that `listen` creates 0700 and
    // refuses if someone else made it first. Not $TMPDIR: another variable.
    PathBuf::from("/tmp")
        .join(format!("{APP}-{uid}"))
        .join(SOCKET_NAME)
}

/// Whether `dir` is a directory owned by `uid`.
#[cfg(target_os = "linux")]
fn owned_dir(dir: &std::path::Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid)
}

pub use crate::statefile::user_home_dir;

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
