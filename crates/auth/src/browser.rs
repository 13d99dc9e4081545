//! Who shows the sign-in page: the host app, `MCPHOST_BROWSER`, the system
//! opener, or, on a terminal, the printed URL. The first that can, does.

use std::io::IsTerminal;
use std::sync::Arc;

use tracing::{debug, warn};

use mcphost_transport::BoxFuture;

/// Hands a sign-in URL to someone who can open it. `Ok` once it was handed
/// over; the flow then waits for the redirect.
pub trait Browser: Send + Sync {
    fn open<'a>(&'a self, server: &'a str, url: &'a str) -> BoxFuture<'a, Result<(), String>>;
    /// For logs and errors: "the host", "MCPHOST_BROWSER", …
    fn describe(&self) -> String;
}

/// Only `https` pages (or `http` on loopback) are shown, whoever shows
/// them: never `file:`, `javascript:` or a scheme some app registered.
pub fn openable(url: &str) -> Result<(), String> {
    match url::Url::parse(url) {
        Ok(u) if super::discovery::is_secure(&u) => Ok(()),
        _ => Err(format!(
            "refusing to open {:?}: a sign-in page must be https (http only on loopback)",
            url.chars().take(80).collect::<String>()
        )),
    }
}

/// The environment variable naming a command that opens a URL (given as its
/// last argument), as `BROWSER` does for other tools.
pub const BROWSER_ENV: &str = "MCPHOST_BROWSER";

/// Set in the environment of `MCPHOST_BROWSER`: a file (mode 0600, in a
/// private directory) holding the sign-in URL. A command that names this
/// variable gets the URL only there, not on its argv, where every local
/// user can read it (`/proc/PID/cmdline`) and, with its `state`, forge the
/// redirect (a login CSRF).
pub const URL_FILE_ENV: &str = "MCPHOST_SIGN_IN_URL_FILE";

/// Runs `MCPHOST_BROWSER` through `sh`, so the variable may hold options:
/// with the URL as its last argument, or, when the command names
/// [`URL_FILE_ENV`], with the URL only in that file.
pub struct CommandBrowser(pub String);

/// The URL in a 0600 file of a fresh 0700 directory, removed when dropped.
fn private_url_file(url: &str) -> Result<(tempfile::TempDir, std::path::PathBuf), String> {
    let dir = tempfile::Builder::new()
        .prefix("mcphost-sign-in-")
        .tempdir()
        .map_err(|e| format!("cannot make a private directory for the sign-in URL: {e}"))?;
    let path = dir.path().join("url");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::io::Write::write_all(&mut f, url.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((dir, path))
}

impl Browser for CommandBrowser {
    fn open<'a>(&'a self, server: &'a str, url: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            openable(url)?;
            let (dir, file) = private_url_file(url)?;
            let mut cmd = tokio::process::Command::new("sh");
            cmd.env(URL_FILE_ENV, &file);
            if self.0.contains(URL_FILE_ENV) {
                cmd.arg("-c").arg(&self.0).arg("mcphost-browser");
            } else {
                cmd.arg("-c")
                    .arg(format!("{} \"$1\"", self.0))
                    .arg("mcphost-browser")
                    .arg(url);
            }
            let mut child = cmd
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()
                .map_err(|e| format!("{BROWSER_ENV}={:?}: cannot run it: {e}", self.0))?;
            let cmd = self.0.clone();
            let server = server.to_owned();
            // Reaped in the background: a browser command may keep running.
            // The URL file goes once it has exited.
            tokio::spawn(async move {
                match child.wait().await {
                    Ok(s) if !s.success() => warn!(server, "{BROWSER_ENV}={cmd:?} exited with {s}"),
                    Err(e) => warn!(server, "{BROWSER_ENV}={cmd:?}: {e}"),
                    Ok(_) => {}
                }
                drop(dir);
            });
            Ok(())
        })
    }
    fn describe(&self) -> String {
        format!("{BROWSER_ENV} ({})", self.0)
    }
}

/// `open` on macOS, `xdg-open` elsewhere, where there is a display.
pub struct SystemBrowser;

impl SystemBrowser {
    pub fn available() -> bool {
        if cfg!(target_os = "macos") {
            return true;
        }
        ["DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
            && which::which("xdg-open").is_ok()
    }
}

impl Browser for SystemBrowser {
    fn open<'a>(&'a self, _server: &'a str, url: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            openable(url)?;
            let opener = if cfg!(target_os = "macos") {
                "open"
            } else {
                "xdg-open"
            };
            let status = tokio::process::Command::new(opener)
                .arg(url)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .await
                .map_err(|e| format!("{opener}: {e}"))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("{opener} exited with {status}"))
            }
        })
    }
    fn describe(&self) -> String {
        "the system browser".into()
    }
}

/// Prints the URL on stderr, for a terminal without a browser.
pub struct PrintBrowser;

impl Browser for PrintBrowser {
    fn open<'a>(&'a self, server: &'a str, url: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            openable(url)?;
            eprintln!("To sign in to '{server}', open this URL in a browser:\n\n  {url}\n");
            Ok(())
        })
    }
    fn describe(&self) -> String {
        "the terminal".into()
    }
}

/// Tries each in turn.
pub struct Chain(pub Vec<Arc<dyn Browser>>);

impl Chain {
    /// What a program on the user's machine uses: `first` (a host that can
    /// show the page), then `MCPHOST_BROWSER`, then the system opener, then
    /// the terminal. `terminal`: whether printing counts (a CLI; not a
    /// daemon, whose stderr nobody reads).
    pub fn standard(first: Option<Arc<dyn Browser>>, terminal: bool) -> Chain {
        let mut v: Vec<Arc<dyn Browser>> = first.into_iter().collect();
        if let Some(cmd) = std::env::var(BROWSER_ENV)
            .ok()
            .filter(|s| !s.trim().is_empty())
        {
            v.push(Arc::new(CommandBrowser(cmd)));
        }
        if SystemBrowser::available() {
            v.push(Arc::new(SystemBrowser));
        }
        if terminal && std::io::stderr().is_terminal() {
            v.push(Arc::new(PrintBrowser));
        }
        Chain(v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Browser for Chain {
    fn open<'a>(&'a self, server: &'a str, url: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            openable(url)?;
            let mut errors = Vec::new();
            for b in &self.0 {
                match b.open(server, url).await {
                    Ok(()) => {
                        debug!(server, by = %b.describe(), "sign-in page handed over");
                        return Ok(());
                    }
                    Err(e) => errors.push(format!("{}: {e}", b.describe())),
                }
            }
            if errors.is_empty() {
                Err(format!(
                    "nothing here can show a sign-in page (no host registered for it, no {BROWSER_ENV}, no display, no terminal)"
                ))
            } else {
                Err(errors.join("; "))
            }
        })
    }
    fn describe(&self) -> String {
        let v: Vec<String> = self.0.iter().map(|b| b.describe()).collect();
        v.join(", then ")
    }
}

/// One sign-in page for the person at a host app to open.
#[derive(Debug, Clone, Copy)]
pub struct SignInPage<'a> {
    /// The server that asks for the sign-in.
    pub server: &'a str,
    /// What the person is told.
    pub message: &'a str,
    /// An `https` (or loopback) URL, checked before it is handed over.
    pub url: &'a str,
    /// Unique per page (the elicitation's id).
    pub id: &'a str,
}

/// "Ask the user to open this URL": auth's way to a host app. Whoever can
/// reach the hosts adapts it (the engine's broker, as a URL-mode
/// elicitation: `registry::sign_in::HostSignIn`); auth never sees them.
pub trait SignInPrompt: Send + Sync + 'static {
    /// `Ok` once the host took the page; `Err` (why) when it declined or
    /// cannot, for the next in the chain.
    fn show<'a>(&'a self, page: SignInPage<'a>) -> BoxFuture<'a, Result<(), String>>;
}

/// The slot a [`HostBrowser`] reads its prompt from, set once the hosts
/// can be reached.
pub type PromptSlot = Arc<std::sync::OnceLock<Arc<dyn SignInPrompt>>>;

/// The host app: the sign-in page goes to it through a [`SignInPrompt`],
/// so it reaches the host registered for requests no call caused
/// (`mcphost/host/register`). Declined, or no such host: the next in the
/// chain.
pub struct HostBrowser {
    prompt: PromptSlot,
}

impl HostBrowser {
    /// Unbound until the slot it returns is set: the engine that routes to hosts
    /// is built after its servers' authorizers.
    pub fn unbound() -> (HostBrowser, PromptSlot) {
        let slot: PromptSlot = Arc::new(std::sync::OnceLock::new());
        (
            HostBrowser {
                prompt: slot.clone(),
            },
            slot,
        )
    }
}

impl Browser for HostBrowser {
    fn open<'a>(&'a self, server: &'a str, url: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            openable(url)?;
            let prompt = self.prompt.get().ok_or("no host yet")?.clone();
            let id = super::flow::random_token().map_err(|e| e.to_string())?;
            let message = format!("Sign in to '{server}' to use its tools.");
            prompt
                .show(SignInPage {
                    server,
                    message: &message,
                    url,
                    id: &id,
                })
                .await
        })
    }
    fn describe(&self) -> String {
        "the host app".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_pages_are_openable() {
        assert!(openable("https://as.example/authorize?x=1").is_ok());
        assert!(openable("http://127.0.0.1:8080/authorize").is_ok());
        assert!(openable("http://localhost/authorize").is_ok());
        for bad in [
            "http://as.example/authorize",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "vscode://x",
            "not a url",
        ] {
            assert!(openable(bad).is_err(), "{bad}");
        }
    }
}
