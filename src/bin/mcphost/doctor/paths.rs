//! The PATHs a server's command may be found through.

use std::path::Path;
use std::time::Duration;

use mcphost::client::{ClientOptions, ServerClient};
use mcphost::config::StdioServer;
use mcphost::config::shell_path::{PathOrigin, ShellPath};
use mcphost::protocol::Era;

/// The PATHs a command may be found through.
pub(super) struct PathCtx {
    pub(super) process: String,
    pub(super) login: Option<ShellPath>,
    pub(super) login_shell_path: bool,
    pub(super) daemon_pid: Option<u32>,
    pub(super) daemon: Option<String>,
    /// The running daemon's socket (asked for a sandboxed server's denials).
    pub(super) daemon_socket: Option<std::path::PathBuf>,
}

/// Which PATH a server's command is looked up in, as the daemon does it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PathFrom {
    ServerEnv,
    LoginShell,
    /// The daemon's own (loginShellPath off, or the shell did not answer).
    Own,
}

impl PathFrom {
    pub(super) fn describe(self, ctx: &PathCtx) -> &'static str {
        match self {
            PathFrom::ServerEnv => "the server's env.PATH",
            PathFrom::LoginShell => "the login shell's PATH",
            PathFrom::Own if !ctx.login_shell_path => {
                "the daemon's own PATH (loginShellPath is off)"
            }
            PathFrom::Own => "the daemon's own PATH (the login shell did not answer)",
        }
    }
}

impl PathCtx {
    fn own(&self) -> &str {
        self.daemon.as_deref().unwrap_or(&self.process)
    }

    pub(super) fn for_server(&self, s: &StdioServer) -> (String, PathFrom) {
        if let Some(p) = s.env.get("PATH") {
            return (p.clone(), PathFrom::ServerEnv);
        }
        match (&self.login, self.login_shell_path) {
            (Some(l), true) if l.origin == PathOrigin::LoginShell => {
                (l.path.clone(), PathFrom::LoginShell)
            }
            _ => (self.own().to_owned(), PathFrom::Own),
        }
    }

    /// Other PATHs to look in when the one used does not find a command.
    pub(super) fn others(&self, used: PathFrom) -> Vec<(&'static str, &str)> {
        let mut v = Vec::new();
        if used != PathFrom::LoginShell
            && let Some(l) = self
                .login
                .as_ref()
                .filter(|l| l.origin == PathOrigin::LoginShell)
        {
            v.push(("login", l.path.as_str()));
        }
        v.push(("shell", self.process.as_str()));
        if let Some(d) = &self.daemon {
            v.push(("daemon", d.as_str()));
        }
        v
    }
}

/// What the running daemon says: its pid, (on Linux) its `PATH`, and the
/// servers it stopped signing in to (name → why); quick, or nothing.
/// The running daemon's answer to `method`, if one answers within 3 s.
pub(super) async fn ask_daemon(
    socket: &Path,
    method: &'static str,
    params: Option<serde_json::Value>,
) -> Option<serde_json::Value> {
    let ask = async {
        let conn = mcphost::ipc::connect(socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES)
            .await
            .ok()?;
        let opts = ClientOptions {
            known_era: Some(Era::Handshake),
            init_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let c = ServerClient::connect("daemon", conn, opts).await.ok()?;
        let params = match params {
            Some(p) => Some(serde_json::value::to_raw_value(&p).ok()?),
            None => None,
        };
        let answer = c.request_raw(method, params, Default::default()).await.ok();
        c.shutdown().await;
        serde_json::from_str(answer?.get()).ok()
    };
    tokio::time::timeout(Duration::from_secs(3), ask)
        .await
        .ok()
        .flatten()
}

pub(super) async fn daemon_path(
    socket: &Path,
) -> (
    Option<u32>,
    Option<String>,
    std::collections::BTreeMap<String, String>,
) {
    let ask = async {
        let v = ask_daemon(socket, "mcphost/status", None).await?;
        let pid = v["pid"].as_u64().and_then(|p| u32::try_from(p).ok())?;
        let failed = v["authFailed"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, e)| (k.clone(), e.as_str().unwrap_or("").to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        Some((pid, failed))
    };
    let Ok(Some((pid, failed))) = tokio::time::timeout(Duration::from_secs(3), ask).await else {
        return (None, None, Default::default());
    };
    (Some(pid), process_path(pid), failed)
}

#[cfg(target_os = "linux")]
fn process_path(pid: u32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"PATH="))
        .map(|p| String::from_utf8_lossy(p).into_owned())
}

#[cfg(not(target_os = "linux"))]
fn process_path(_pid: u32) -> Option<String> {
    None
}
