//! The browser half of the authorization code flow: PKCE, `state`, and a
//! loopback listener on 127.0.0.1 (a random port, RFC 8252 §7.3) that takes
//! exactly one authorization response carrying our `state` and then closes.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::debug;
use url::Url;

use super::AuthError;

const CALLBACK_PATH: &str = "/callback";
/// Limit for the redirect's request head.
const REQUEST_BYTES: usize = 16 * 1024;
/// A connection's whole request head must arrive within this.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Connections read at once; more are closed unanswered.
const MAX_CONNECTIONS: usize = 64;

/// 32 random bytes, base64url: for the PKCE verifier and `state`.
pub fn random_token() -> Result<String, AuthError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| AuthError::Client(format!("no randomness: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

/// S256: base64url(sha256(verifier)).
pub fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// The loopback listener, bound before the browser is sent anywhere.
pub struct Loopback {
    listener: TcpListener,
    pub redirect_uri: String,
}

impl Loopback {
    pub async fn bind() -> Result<Loopback, AuthError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
            AuthError::Client(format!(
                "cannot listen on 127.0.0.1 for the sign-in redirect: {e}"
            ))
        })?;
        let port = listener
            .local_addr()
            .map_err(|e| AuthError::Client(e.to_string()))?
            .port();
        Ok(Loopback {
            listener,
            redirect_uri: format!("http://127.0.0.1:{port}{CALLBACK_PATH}"),
        })
    }

    /// Wait for the redirect to the callback path that carries our `state`
    /// and return it unanswered: [`Callback::finish`] tells the browser how
    /// the sign-in ended. Connections are served side by side, each with
    /// [`REQUEST_DEADLINE`] for its whole request head, so a slow or idle
    /// connection (another local user's) holds nothing off; a callback with
    /// another `state` (forged, or a stale tab) gets 400 and is ignored;
    /// other paths (a favicon) get 404.
    pub async fn wait(self, state: &str, timeout: Duration) -> Result<Callback, AuthError> {
        let state: std::sync::Arc<str> = state.into();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Callback>(1);
        // Dropped on return: connections still being read are aborted.
        let mut conns = tokio::task::JoinSet::new();
        let fut = async {
            loop {
                tokio::select! {
                    accepted = self.listener.accept() => {
                        let (sock, peer) = accepted.map_err(|e| {
                            AuthError::Client(format!("sign-in listener: {e}"))
                        })?;
                        if conns.len() >= MAX_CONNECTIONS {
                            debug!(%peer, "sign-in listener: too many connections; dropped");
                            continue;
                        }
                        let (tx, state) = (tx.clone(), state.clone());
                        conns.spawn(async move {
                            if let Ok(Some(cb)) =
                                tokio::time::timeout(REQUEST_DEADLINE, serve(sock, &state)).await
                            {
                                debug!(%peer, "sign-in redirect received");
                                let _ = tx.send(cb).await;
                            }
                        });
                    }
                    Some(cb) = rx.recv() => return Ok(cb),
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(AuthError::CallbackTimeout { after: timeout }),
        }
        // The listener drops here: the port is closed either way.
    }
}

/// The redirect that carried our `state`, its browser still waiting.
pub struct Callback {
    /// The query, as it came; checking `iss`, `error` and `code` is the caller's.
    pub query: HashMap<String, String>,
    sock: tokio::net::TcpStream,
}

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callback").finish_non_exhaustive()
    }
}

impl Callback {
    /// Tells the person how the sign-in ended: "signed in" only once `iss`
    /// was checked and the code redeemed. No server text goes on the page.
    pub async fn finish(mut self, signed_in: bool) {
        let (status, page) = if signed_in {
            (200, "Signed in to mcphost. You can close this window.")
        } else {
            (
                400,
                "Sign-in failed. mcphost says why where the sign-in was started. You can close this window.",
            )
        };
        let _ = respond(&mut self.sock, status, page).await;
    }
}

/// Reads one request head; the callback with our `state` is returned to
/// be answered later, anything else is answered here.
async fn serve(mut sock: tokio::net::TcpStream, state: &str) -> Option<Callback> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    let head = loop {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break String::from_utf8_lossy(&buf[..end]).into_owned();
                }
                if buf.len() > REQUEST_BYTES {
                    let _ = respond(&mut sock, 400, "Bad request.").await;
                    return None;
                }
            }
        }
    };
    let target = head
        .lines()
        .next()
        .and_then(|l| {
            let mut p = l.split(' ');
            (p.next() == Some("GET")).then(|| p.next()).flatten()
        })
        .unwrap_or("");
    let Ok(url) = Url::parse("http://127.0.0.1").and_then(|b| b.join(target)) else {
        let _ = respond(&mut sock, 400, "Bad request.").await;
        return None;
    };
    if url.path() != CALLBACK_PATH {
        let _ = respond(&mut sock, 404, "Not found.").await;
        return None;
    }
    let query: HashMap<String, String> = url.query_pairs().into_owned().collect();
    if query.get("state").map(String::as_str) != Some(state) {
        debug!("sign-in listener: a callback with another state; ignored");
        let _ = respond(
            &mut sock,
            400,
            "This is not the sign-in mcphost is waiting for; ignored.",
        )
        .await;
        return None;
    }
    Some(Callback { query, sock })
}

async fn respond(sock: &mut tokio::net::TcpStream, status: u16, text: &str) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Bad Request",
    };
    let body = format!("<!doctype html><meta charset=utf-8><title>mcphost</title><p>{text}</p>");
    let msg = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n{body}",
        body.len()
    );
    sock.write_all(msg.as_bytes()).await?;
    sock.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s256_is_base64url_of_sha256_without_padding() {
        // Computed independently with Python's hashlib and base64.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mJ92K9Ht4CzLV8Z-I4N3f2WJHz5Cfc"),
            "CoHoenS5cfPSSFd1ONaAR_n95oklE9tVnnTuHoZpfRA"
        );
        let a = random_token().unwrap();
        assert_eq!(a.len(), 43);
        assert_ne!(a, random_token().unwrap());
    }

    #[tokio::test]
    async fn the_listener_takes_one_callback_and_closes() {
        let lb = Loopback::bind().await.unwrap();
        let uri = lb.redirect_uri.clone();
        let base = uri.trim_end_matches(CALLBACK_PATH).to_owned();
        let waiter = tokio::spawn(async move {
            let cb = lb.wait("s 1", Duration::from_secs(10)).await?;
            let q = cb.query.clone();
            cb.finish(true).await;
            Ok::<_, AuthError>(q)
        });
        let http = reqwest::Client::new();
        let r = http
            .get(format!("{base}/favicon.ico"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        let r = http
            .get(format!("{uri}?code=c1&state=s%201"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let q = waiter.await.unwrap().unwrap();
        assert_eq!(q["code"], "c1");
        assert_eq!(q["state"], "s 1");
        // Closed: nothing listens any more.
        assert!(http.get(&uri).send().await.is_err());
    }

    #[tokio::test]
    async fn a_callback_that_never_comes_times_out_and_closes_the_port() {
        let lb = Loopback::bind().await.unwrap();
        let uri = lb.redirect_uri.clone();
        let e = lb.wait("s", Duration::from_millis(200)).await.unwrap_err();
        assert!(matches!(e, AuthError::CallbackTimeout { .. }), "{e}");
        assert!(e.to_string().contains("no sign-in"), "{e}");
        assert!(reqwest::Client::new().get(&uri).send().await.is_err());
    }
}
