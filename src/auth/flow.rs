//! The browser half of the authorization code flow: PKCE, `state`, and a
//! loopback listener on 127.0.0.1 (a random port, RFC 8252 §7.3) that takes
//! exactly one authorization response and then closes.

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

    /// Wait for the redirect to the callback path (other requests, such as a
    /// browser's favicon, get 404), answer it, and close. The query is
    /// returned as it came; checking it is the caller's.
    pub async fn wait(self, timeout: Duration) -> Result<HashMap<String, String>, AuthError> {
        let fut = async {
            loop {
                let (mut sock, peer) = self
                    .listener
                    .accept()
                    .await
                    .map_err(|e| AuthError::Client(format!("sign-in listener: {e}")))?;
                let mut buf = Vec::new();
                let mut chunk = [0u8; 2048];
                let head = loop {
                    match tokio::time::timeout(Duration::from_secs(10), sock.read(&mut chunk)).await
                    {
                        Ok(Ok(0)) | Err(_) => break None,
                        Ok(Ok(n)) => {
                            buf.extend_from_slice(&chunk[..n]);
                            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break Some(String::from_utf8_lossy(&buf[..end]).into_owned());
                            }
                            if buf.len() > REQUEST_BYTES {
                                break None;
                            }
                        }
                        Ok(Err(_)) => break None,
                    }
                };
                let Some(head) = head else { continue };
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
                    continue;
                };
                if url.path() != CALLBACK_PATH {
                    let _ = respond(&mut sock, 404, "Not found.").await;
                    continue;
                }
                debug!(%peer, "sign-in redirect received");
                let query: HashMap<String, String> = url.query_pairs().into_owned().collect();
                let page = if query.contains_key("error") {
                    "Sign-in was refused. You can close this window."
                } else {
                    "Signed in to mcphost. You can close this window."
                };
                let _ = respond(&mut sock, 200, page).await;
                return Ok(query);
            }
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(AuthError::CallbackTimeout { after: timeout }),
        }
        // The listener drops here: the port is closed either way.
    }
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
        let waiter = tokio::spawn(lb.wait(Duration::from_secs(10)));
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
        let e = lb.wait(Duration::from_millis(200)).await.unwrap_err();
        assert!(matches!(e, AuthError::CallbackTimeout { .. }), "{e}");
        assert!(e.to_string().contains("no sign-in"), "{e}");
        assert!(reqwest::Client::new().get(&uri).send().await.is_err());
    }
}
