//! An HTTP server: its URL, DNS, TCP, TLS, what a 401 asks for, then a
//! real start.

use std::time::{Duration, Instant};

use mcphost::client::ServerClient;
use mcphost::config::{HttpServer, OAuthSetting, ServerConfig};

use super::Check;
use super::fixes::Fix;
use super::start::{Progress, answered, client_options, lock, ms, start_failure};

pub(super) async fn check_http(
    name: &str,
    sc: &ServerConfig,
    h: &HttpServer,
    p: &Progress,
    budget: Duration,
    started: Instant,
) {
    let url = match url::Url::parse(&h.url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => u,
        Ok(u) => {
            p.push(Check::problem(
                "url",
                format!("{}: the scheme is {:?}", redact(&h.url), u.scheme()),
                Fix::BadUrl,
            ));
            return;
        }
        Err(e) => {
            p.push(Check::problem(
                "url",
                format!("{}: {e}", redact(&h.url)),
                Fix::BadUrl,
            ));
            return;
        }
    };
    let host = url.host_str().unwrap_or("").to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let step = Duration::from_secs(5).min(budget);

    p.stage("resolving the host name");
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<std::net::SocketAddr> =
        match tokio::time::timeout(step, tokio::net::lookup_host((bare, port))).await {
            Ok(Ok(a)) => {
                let mut v: Vec<_> = a.collect();
                v.dedup();
                v
            }
            Ok(Err(e)) => {
                p.push(Check::problem(
                    "dns",
                    format!("{host}: {e}"),
                    Fix::Dns(&host),
                ));
                return;
            }
            Err(_) => {
                p.push(Check::problem(
                    "dns",
                    format!("{host}: no answer within {step:?}"),
                    Fix::Dns(&host),
                ));
                return;
            }
        };
    if bare.parse::<std::net::IpAddr>().is_ok() {
        p.push(Check::ok(
            "dns",
            format!("{host} is an IP address: no lookup"),
        ));
    } else {
        let shown: Vec<String> = addrs.iter().take(4).map(|a| a.ip().to_string()).collect();
        p.push(Check::ok("dns", format!("{host} → {}", shown.join(", "))));
    }

    p.stage("connecting");
    let mut connected = None;
    let mut last_error = String::from("no addresses");
    for a in &addrs {
        let t0 = Instant::now();
        match tokio::time::timeout(step, tokio::net::TcpStream::connect(a)).await {
            Ok(Ok(_)) => {
                connected = Some((*a, t0.elapsed()));
                break;
            }
            Ok(Err(e)) => last_error = format!("{a}: {e}"),
            Err(_) => last_error = format!("{a}: no answer within {step:?}"),
        }
    }
    let Some((at, took)) = connected else {
        p.push(Check::problem(
            "connect",
            last_error,
            Fix::Connect(format!("{host}:{port}")),
        ));
        return;
    };
    p.push(Check::ok(
        "connect",
        format!("TCP to {at} in {} ms", ms(took)),
    ));

    // What the server answers without our token: a 401 says what it wants.
    p.stage("asking without a token");
    let probe = probe(h, &url, step).await;
    let tls = url.scheme() == "https";
    let resp = match probe {
        Ok(r) => {
            if tls {
                p.push(Check::ok(
                    "tls",
                    match &r.certificate {
                        Some(c) => format!("TLS handshake ok; certificate {}", c.describe()),
                        None => "TLS handshake ok".to_owned(),
                    },
                ));
            }
            r
        }
        // TCP went through a moment ago: a failed connect is the TLS layer.
        Err(ProbeError::Connect(e)) if tls || looks_like_tls(&e) => {
            p.push(Check::problem("tls", e, Fix::Tls));
            return;
        }
        Err(ProbeError::Timeout(e)) => {
            p.push(Check::problem(
                "http",
                e,
                Fix::Hung {
                    command_line: None,
                    limit: step,
                },
            ));
            return;
        }
        Err(ProbeError::Connect(e) | ProbeError::Other(e)) => {
            p.push(Check::problem("http", e, Fix::NotMcp(None)));
            return;
        }
    };
    let own_header = h
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("authorization"));
    let mut signed_in = true;
    match resp.status {
        401 | 403 => {
            let c = mcphost::auth::challenge::BearerChallenge::find(
                resp.www_authenticate.iter().map(String::as_str),
            );
            let asks = match &c {
                Some(c) => format!(
                    "Bearer; resource_metadata={}; scope={}{}",
                    c.resource_metadata.as_deref().unwrap_or("(none)"),
                    c.scope.as_deref().unwrap_or("(none)"),
                    c.error
                        .as_deref()
                        .map(|e| format!("; error={e}"))
                        .unwrap_or_default()
                ),
                None if resp.www_authenticate.is_empty() => "no WWW-Authenticate header".to_owned(),
                None => resp.www_authenticate.join(", "),
            };
            let detail = format!("HTTP {} without a token: asks for {asks}", resp.status);
            if own_header {
                p.push(Check::problem("auth", detail, Fix::HeaderRefused));
                signed_in = false;
            } else if matches!(h.oauth, OAuthSetting::Disabled) {
                p.push(Check::problem("auth", detail, Fix::OAuthOff));
                signed_in = false;
            } else {
                p.push(Check::ok("auth", detail));
                let (has, state) = token_state(name, &url);
                if has && resp.status == 403 {
                    signed_in = false;
                    p.push(Check::problem("token", state, Fix::Forbidden(name)));
                } else if has {
                    p.push(Check::ok("token", state));
                } else {
                    signed_in = false;
                    p.push(Check::problem("token", state, Fix::Login(name)));
                }
            }
        }
        s => p.push(Check::ok(
            "auth",
            format!(
                "no sign-in asked (HTTP {s} to an unauthenticated ping){}",
                if own_header {
                    "; sends its own Authorization header"
                } else {
                    ""
                }
            ),
        )),
    }
    if !signed_in {
        p.push(Check::problem(
            "start",
            "not tried, for the problems above",
            Fix::Above,
        ));
        return;
    }

    p.stage("waiting for initialize");
    let left = budget.saturating_sub(started.elapsed());
    let mut cfg = h.to_http_config(&sc.timeouts);
    cfg.init_timeout = left;
    cfg.connect_timeout = cfg.connect_timeout.min(left);
    // Stored tokens are used and refreshed; no sign-in page is ever shown.
    if let Ok(ctx) = mcphost::auth::AuthContext::from_env(None)
        && let Some(Ok(a)) = ctx.authorizer(name, h)
    {
        cfg.credentials = Some(a);
    }
    let conn = match mcphost::transport::http::connect(name, cfg).await {
        Ok(c) => c,
        Err(e) => {
            p.push(Check::problem("start", e.to_string(), Fix::NotMcp(None)));
            return;
        }
    };
    let control = conn.control.clone();
    *lock(&p.control) = Some(control.clone());
    let t0 = Instant::now();
    match ServerClient::connect(name, conn, client_options(left, None)).await {
        Ok(client) => {
            answered(&client, t0.elapsed(), p).await;
            client.shutdown().await;
        }
        Err(e) => {
            let mut c = start_failure(name, &e, None, None, left);
            if matches!(resp.status, 404 | 405) && c.name == "start" {
                c.fix = Some(Fix::HttpPath.text());
            }
            p.push(c);
        }
    }
}

pub(super) fn redact(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?…"),
        None => url.to_owned(),
    }
}

fn looks_like_tls(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    ["tls", "certificate", "handshake", "ssl", "alert"]
        .iter()
        .any(|w| e.contains(w))
}

/// An error and its sources in one line (reqwest's own message says
/// little: "error sending request").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

enum ProbeError {
    Connect(String),
    Timeout(String),
    Other(String),
}

impl From<reqwest::Error> for ProbeError {
    fn from(e: reqwest::Error) -> Self {
        let text = error_chain(&e);
        if e.is_timeout() {
            ProbeError::Timeout(text)
        } else if e.is_connect() {
            ProbeError::Connect(text)
        } else {
            ProbeError::Other(text)
        }
    }
}

struct Probed {
    /// The server's leaf certificate (https).
    certificate: Option<cert::Summary>,
    status: u16,
    www_authenticate: Vec<String>,
}

/// An unauthenticated `ping` POST (with the config's own headers), as
/// the OAuth layer sends to learn a server's challenge.
async fn probe(h: &HttpServer, url: &url::Url, limit: Duration) -> Result<Probed, ProbeError> {
    let builder = reqwest::Client::builder()
        .connect_timeout(limit)
        .timeout(limit)
        .user_agent(concat!("mcphost/", env!("CARGO_PKG_VERSION")));
    #[cfg(feature = "tls")]
    let builder = builder.tls_info(true);
    let client = builder.build()?;
    let mut req = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        )
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#);
    for (k, v) in &h.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = req.send().await?;
    #[cfg(feature = "tls")]
    let certificate = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .and_then(cert::summary);
    #[cfg(not(feature = "tls"))]
    let certificate = None;
    Ok(Probed {
        certificate,
        status: resp.status().as_u16(),
        www_authenticate: resp
            .headers()
            .get_all(reqwest::header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect(),
    })
}

/// Whether the token store holds a token for this server, and its state
/// as `mcphost auth status` words it.
fn token_state(name: &str, url: &url::Url) -> (bool, String) {
    let store = match mcphost::auth::store::TokenStore::open_default() {
        Ok(s) => s,
        Err(e) => {
            return (
                false,
                format!("no token: the token store cannot be opened: {e}"),
            );
        }
    };
    let list = match store.list() {
        Ok(l) => l,
        Err(e) => {
            return (
                false,
                format!("no token: the token store cannot be read: {e}"),
            );
        }
    };
    let mine = mcphost::auth::discovery::canonical(url);
    let found = list.into_iter().find(|(k, e)| {
        e.tokens.is_some()
            && (url::Url::parse(&k.resource)
                .is_ok_and(|r| mcphost::auth::discovery::canonical(&r) == mine)
                || e.server.as_deref() == Some(name))
    });
    let Some((key, entry)) = found else {
        return (
            false,
            format!("no stored token for {name} (in {})", store.dir().display()),
        );
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let Some(t) = entry.tokens else {
        return (false, "signed out".to_owned());
    };
    let state = match t.expires_at {
        Some(at) if at <= now && t.refresh_token.is_some() => {
            "expired (refreshes on use)".to_owned()
        }
        Some(at) if at <= now => {
            return (false, format!("the token from {} has expired", key.issuer));
        }
        Some(at) => format!(
            "valid for {}",
            humantime::format_duration(Duration::from_secs(at.saturating_sub(now)))
        ),
        None => "valid".to_owned(),
    };
    (true, format!("token from {} {state}", key.issuer))
}

/// Whose certificate it is and until when (x509-parser): rustls has
/// verified it already, this only describes it.
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
mod cert {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Summary {
        pub subject: Option<String>,
        pub issuer: Option<String>,
        /// `2028-01-06 02:16:55 UTC`.
        pub not_after: String,
        pub not_after_unix: Option<i64>,
    }

    impl Summary {
        pub fn describe(&self) -> String {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            let left = match self.not_after_unix {
                Some(t) if t <= now => " (expired)".to_owned(),
                Some(t) => format!(" ({} days left)", (t - now) / 86_400),
                None => String::new(),
            };
            format!(
                "for {} from {}, valid until {}{left}",
                self.subject.as_deref().unwrap_or("(no CN)"),
                self.issuer.as_deref().unwrap_or("(no CN)"),
                self.not_after
            )
        }
    }

    pub fn summary(der: &[u8]) -> Option<Summary> {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let cn = |name: &x509_parser::x509::X509Name<'_>| {
            name.iter_common_name()
                .next()
                .and_then(|a| a.as_str().ok())
                .map(str::to_owned)
        };
        let after = cert.validity().not_after;
        let t = after.to_datetime();
        let not_after = format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        );
        Some(Summary {
            subject: cn(cert.subject()),
            issuer: cn(cert.issuer()),
            not_after,
            not_after_unix: Some(after.timestamp()),
        })
    }

    #[cfg(test)]
    mod tests {
        use base64::Engine as _;

        /// `openssl req -x509 -newkey ec … -subj "/O=Doctor Test/CN=doctor.test" -days 400`
        const CERT: &str = "MIIBrjCCAVOgAwIBAgIUAdgEOjfUi0xCpr0h/XwqKZPiP/swCgYIKoZIzj0EAwIwLDEUMBIGA1UECgwLRG9jdG9yIFRlc3QxFDASBgNVBAMMC2RvY3Rvci50ZXN0MB4XDTI2MTIwMjAyMTY1NVoXDTI4MDEwNjAyMTY1NVowLDEUMBIGA1UECgwLRG9jdG9yIFRlc3QxFDASBgNVBAMMC2RvY3Rvci50ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEJzhjNdFqYTDE3ZaMucPAVBDF8L2jKUDMJ6dxyBXwLspEbI5jgLZjQdEBOh7i0g/I6+guCxXYSchxSx9xui2FnqNTMFEwHQYDVR0OBBYEFIvGvEPd/KZRdt/i9jQSo7DEA12PMB8GA1UdIwQYMBaAFIvGvEPd/KZRdt/i9jQSo7DEA12PMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIhAOp8/FDY4BmSYUe/kDuRMcX+uUzlaIUew1Pp0F6xVgOjAiEArQSqoo5ob2NkprqsBJObqciWUABFjXCHeKY/OYoaV60=";

        #[test]
        fn a_certificate_says_whose_and_until_when() {
            let der = base64::engine::general_purpose::STANDARD
                .decode(CERT)
                .unwrap();
            let s = super::summary(&der).unwrap();
            assert_eq!(s.subject.as_deref(), Some("doctor.test"));
            assert_eq!(s.issuer.as_deref(), Some("doctor.test"));
            // openssl x509 -enddate: notAfter=Jan  6 02:16:55 2028 GMT
            assert_eq!(s.not_after, "2028-01-06 02:16:55 UTC");
            assert_eq!(s.not_after_unix, Some(1_830_737_815));
            // Cut anywhere, it is None, never a panic.
            for n in 0..der.len() {
                let _ = super::summary(&der[..n]);
            }
            assert_eq!(super::summary(b"not der"), None);
        }
    }
}
