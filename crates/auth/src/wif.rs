//! Workload identity federation (SEP-1933): a machine signs in with the
//! identity token its platform gives it (a Kubernetes service account token,
//! a cloud or CI OIDC token), exchanged at the authorization server in an
//! RFC 7523 JWT bearer grant. The token is read afresh for every grant,
//! from the file or the command the config names: platforms rotate it.

use std::time::Duration;

use super::AuthError;

pub use mcphost_config::oauth::WorkloadToken;

/// A token is a JWT: tens of kilobytes would be something else.
const MAX_TOKEN_BYTES: usize = 64 * 1024;
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The token `source` gives, trimmed; an empty one is an error, never sent.
pub async fn read(source: &WorkloadToken, server: &str) -> Result<String, AuthError> {
    let fail = |reason: String| AuthError::Workload {
        server: server.to_owned(),
        source_desc: source.describe(),
        reason,
    };
    let raw = match source {
        WorkloadToken::File(p) => {
            let path = p.clone();
            let bytes = tokio::task::spawn_blocking(move || std::fs::read(path))
                .await
                .map_err(|e| fail(e.to_string()))?
                .map_err(|e| fail(e.to_string()))?;
            if bytes.len() > MAX_TOKEN_BYTES {
                return Err(fail(format!("larger than {MAX_TOKEN_BYTES} bytes")));
            }
            bytes
        }
        WorkloadToken::Command(argv) => {
            let Some((prog, args)) = argv.split_first() else {
                return Err(fail("no program given".into()));
            };
            let out = tokio::process::Command::new(prog)
                .args(args)
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output();
            let out = tokio::time::timeout(COMMAND_TIMEOUT, out)
                .await
                .map_err(|_| fail(format!("no answer in {}s", COMMAND_TIMEOUT.as_secs())))?
                .map_err(|e| fail(format!("cannot run it: {e}")))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                let err: String = err.trim().chars().take(300).collect();
                return Err(fail(format!(
                    "it failed ({}){}",
                    out.status,
                    if err.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", super::discovery::escape_controls(&err))
                    }
                )));
            }
            if out.stdout.len() > MAX_TOKEN_BYTES {
                return Err(fail(format!("printed more than {MAX_TOKEN_BYTES} bytes")));
            }
            out.stdout
        }
    };
    let text = String::from_utf8(raw).map_err(|_| fail("not UTF-8 text".into()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(fail("it is empty".into()));
    }
    Ok(token.to_owned())
}
