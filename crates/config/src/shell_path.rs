//! `PATH` from the user's login shell.
//!
//! A daemon started by launchd, systemd or a desktop session gets a bare
//! `PATH` without what the user's shell profile adds (nvm, Homebrew, `~/.local/bin`),
//! so `npx` or `uvx` servers would not be found. We ask the login shell once:
//!
//! ```text
//! $SHELL -ilc 'printf "%s" "<START>"; printf "%s" "$PATH"; printf "%s" "<END>"'
//! ```
//!
//! - Interactive + login, because profiles split PATH setup across both kinds of rc file.
//! - Markers, because rc files print banners and noise to stdout.
//! - A new session (`setsid`) with stdin at /dev/null, so an interactive shell
//!   cannot take over our terminal or stop us with SIGTTIN/SIGTTOU, and so
//!   that on timeout the whole process group (rc-file children included) is killed.
//! - A timeout (3 s by default); on any failure we keep our own `PATH` and warn.
//!
//! The answer is cached: [`login_shell_path`] for the process, or one
//! [`ShellPathResolver`] each (tests build their own).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::sync::OnceCell;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// Caps what an rc file's noise can make us buffer.
const MAX_OUTPUT: usize = 1024 * 1024;
/// After the shell printed the markers, how long it may take to exit before
/// its group is killed.
const EXIT_GRACE: Duration = Duration::from_millis(500);

/// Where a resolved `PATH` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathOrigin {
    LoginShell,
    /// Our own `PATH` (the shell failed, timed out or is unknown).
    Fallback,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellPath {
    pub path: String,
    pub origin: PathOrigin,
}

#[derive(Debug, thiserror::Error)]
enum ShellPathError {
    #[error("no login shell known ($SHELL is unset and the password database has none)")]
    NoShell,
    #[error("cannot start it: {0}")]
    Spawn(std::io::Error),
    #[error("reading its output failed: {0}")]
    Read(std::io::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("its output had no PATH between the markers (exit status {0:?})")]
    NoMarkers(Option<ExitStatus>),
    #[error("it reported an empty PATH")]
    Empty,
}

/// Resolves the login shell's `PATH` once and caches it.
#[derive(Debug)]
pub struct ShellPathResolver {
    shell: Option<PathBuf>,
    timeout: Duration,
    fallback: String,
    cell: OnceCell<ShellPath>,
}

impl ShellPathResolver {
    /// Uses `shell` (or none: straight to the fallback), the default timeout,
    /// and our own `PATH` as the fallback.
    pub fn new(shell: Option<PathBuf>) -> Self {
        ShellPathResolver {
            shell,
            timeout: DEFAULT_TIMEOUT,
            fallback: std::env::var("PATH")
                .unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned()),
            cell: OnceCell::new(),
        }
    }

    /// `$SHELL`, else the user's shell from the password database.
    pub fn from_env() -> Self {
        let shell = std::env::var_os("SHELL")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                nix::unistd::User::from_uid(nix::unistd::getuid())
                    .ok()
                    .flatten()
                    .map(|user| user.shell)
                    .filter(|s| !s.as_os_str().is_empty())
            });
        Self::new(shell)
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn with_fallback(mut self, path: impl Into<String>) -> Self {
        self.fallback = path.into();
        self
    }

    /// The `PATH`, asking the shell on the first call only; concurrent first
    /// callers wait for the same answer.
    pub async fn resolve(&self) -> &ShellPath {
        self.cell
            .get_or_init(|| async {
                let started = Instant::now();
                let result = match &self.shell {
                    Some(shell) => query_shell(shell, self.timeout).await,
                    None => Err(ShellPathError::NoShell),
                };
                match result {
                    Ok(path) => {
                        tracing::debug!(
                            shell = ?self.shell,
                            elapsed = ?started.elapsed(),
                            %path,
                            "PATH taken from the login shell"
                        );
                        ShellPath {
                            path,
                            origin: PathOrigin::LoginShell,
                        }
                    }
                    Err(err) => {
                        tracing::warn!(
                            shell = ?self.shell,
                            "cannot take PATH from the login shell, keeping ours: {err}"
                        );
                        ShellPath {
                            path: self.fallback.clone(),
                            origin: PathOrigin::Fallback,
                        }
                    }
                }
            })
            .await
    }
}

/// The process-wide login-shell `PATH` (`$SHELL`, 3 s timeout), asked once.
pub async fn login_shell_path() -> &'static ShellPath {
    static RESOLVER: OnceLock<ShellPathResolver> = OnceLock::new();
    RESOLVER
        .get_or_init(ShellPathResolver::from_env)
        .resolve()
        .await
}

async fn query_shell(shell: &Path, timeout: Duration) -> Result<String, ShellPathError> {
    let (start, end) = markers();
    let script = format!(r#"printf "%s" "{start}"; printf "%s" "$PATH"; printf "%s" "{end}""#);
    let mut command = Command::new(shell);
    command
        .arg("-ilc")
        .arg(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    // SAFETY: setsid is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = command.spawn().map_err(ShellPathError::Spawn)?;
    // After setsid the child leads its own group: pgid == pid.
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    let started = Instant::now();

    let read = tokio::time::timeout(timeout, read_until_end(&mut child, &start, &end)).await;
    let output = match read {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => {
            kill_group(group, &mut child).await;
            return Err(err);
        }
        Err(_) => {
            kill_group(group, &mut child).await;
            return Err(ShellPathError::Timeout(timeout));
        }
    };
    // Give the shell a moment to exit by itself (logout hooks); then make sure
    // nothing it started lingers.
    let remaining = timeout.saturating_sub(started.elapsed()).max(EXIT_GRACE);
    let status = match tokio::time::timeout(remaining, child.wait()).await {
        Ok(Ok(status)) => Some(status),
        _ => {
            kill_group(group, &mut child).await;
            None
        }
    };
    match between_markers(&output, &start, &end) {
        Some("") => Err(ShellPathError::Empty),
        Some(path) => Ok(path.to_owned()),
        None => Err(ShellPathError::NoMarkers(status)),
    }
}

/// Reads stdout until the end marker arrives or the pipe closes. Not to EOF
/// only: an rc file may start a daemon that keeps our pipe open.
async fn read_until_end(
    child: &mut Child,
    start: &str,
    end: &str,
) -> Result<String, ShellPathError> {
    let mut output = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        let mut chunk = [0u8; 4096];
        loop {
            let n = stdout
                .read(&mut chunk)
                .await
                .map_err(ShellPathError::Read)?;
            if n == 0 {
                break;
            }
            output.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&output);
            if between_markers(&text, start, end).is_some() || output.len() > MAX_OUTPUT {
                break;
            }
        }
    }
    Ok(String::from_utf8_lossy(&output).into_owned())
}

async fn kill_group(group: Option<Pid>, child: &mut Child) {
    if let Some(group) = group {
        let _ = killpg(group, Signal::SIGKILL);
    }
    let _ = child.start_kill();
    // Reap it so no zombie is left; bounded in case it is unkillable.
    let _ = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
}

/// The text between the last end marker and the start marker before it:
/// the real output comes after any echo of the command line.
fn between_markers<'t>(output: &'t str, start: &str, end: &str) -> Option<&'t str> {
    let end_at = output.rfind(end)?;
    let start_at = output[..end_at].rfind(start)?;
    Some(&output[start_at + start.len()..end_at])
}

/// Unlikely to appear in rc noise, and different per call.
fn markers() -> (String, String) {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let token = format!("{:x}{:08x}", std::process::id(), nanos);
    (
        format!("_MCPHOST_PATH_START_{token}_"),
        format!("_MCPHOST_PATH_END_{token}_"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_pick_the_real_output() {
        let out = "banner\nprintf \"%s\" \"<S>\"; printf \"%s\" \"$PATH\"; printf \"%s\" \"<E>\"\nnoise<S>/a:/b<E>bye\n";
        assert_eq!(between_markers(out, "<S>", "<E>"), Some("/a:/b"));
        assert_eq!(between_markers("<S>/a", "<S>", "<E>"), None);
        assert_eq!(between_markers("<E><S>", "<S>", "<E>"), None);
    }
}
