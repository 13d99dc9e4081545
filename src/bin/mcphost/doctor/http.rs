//! An HTTP server: its URL, DNS, TCP, TLS, what a 401 asks for, then a
//! real start.

use std::time::{Duration, Instant};

use mcphost::client::ServerClient;
use mcphost::config::{HttpServer, OAuthSetting, ServerConfig};

use super::Check;
use super::fixes::Fix;
use super::start::{Progress, answered, client_options, lock, ms, start_failure};

/// The stages in order; each says what it found, and a failed one ends
/// the check (its `Check` says why).
pub(super) async fn check_http(
    name: &str,
    sc: &ServerConfig,
    h: &HttpServer,
    p: &Progress,
    budget: Duration,
    started: Instant,
) {
    let url = match parse_url(&h.url) {
        Ok(u) => u,
        Err(c) => return p.push(c),
    };
    let host = url.host_str().unwrap_or("").to_owned();
    let port = url.port_or_known_default().unwrap_or(80);
    let step = Duration::from_secs(5).min(budget);

    p.stage("resolving the host name");
    let Some(addrs) = resolve(&host, port, step, p).await else {
        return;
    };
    p.stage("connecting");
    if !connect(&addrs, &host, port, step, p).await {
        return;
    }
    // What the server answers without our token: a 401 says what it wants.
    p.stage("asking without a token");
    let resp = match probe(h, &url, step).await {
        Ok(r) => r,
        Err(e) => return p.push(probe_failure(e, url.scheme() == "https", step)),
    };
    if url.scheme() == "https" {
        p.push(Check::ok("tls", tls_detail(resp.certificate.as_ref())));
    }
    let own_header = h
        .headers
        .keys()
        .any(|k| k.eq_ignore_ascii_case("authorization"));
    let oauth_off = matches!(h.oauth, OAuthSetting::Disabled);
    let signed_in = sign_in_checks(name, &resp, own_header, oauth_off, p, || {
        token_state(name, &url)
    });
    if !signed_in {
        p.push(Check::problem(
            "start",
            "not tried, for the problems above",
            Fix::Above,
        ));
        return;
    }
    p.stage("waiting for initialize");
    start(
        name,
        sc,
        h,
        resp.status,
        budget.saturating_sub(started.elapsed()),
        p,
    )
    .await;
}

/// The URL, if it is one doctor can check.
fn parse_url(text: &str) -> Result<url::Url, Check> {
    match url::Url::parse(text) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Ok(u),
        Ok(u) => Err(Check::problem(
            "url",
            format!("{}: the scheme is {:?}", redact(text), u.scheme()),
            Fix::BadUrl,
        )),
        Err(e) => Err(Check::problem(
            "url",
            format!("{}: {e}", redact(text)),
            Fix::BadUrl,
        )),
    }
}

/// DNS: the host's addresses (an IP address is its own).
async fn resolve(
    host: &str,
    port: u16,
    step: Duration,
    p: &Progress,
) -> Option<Vec<std::net::SocketAddr>> {
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
                    Fix::Dns(host),
                ));
                return None;
            }
            Err(_) => {
                p.push(Check::problem(
                    "dns",
                    format!("{host}: no answer within {step:?}"),
                    Fix::Dns(host),
                ));
                return None;
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
    Some(addrs)
}

/// TCP to the first address that takes it; whether one did.
async fn connect(
    addrs: &[std::net::SocketAddr],
    host: &str,
    port: u16,
    step: Duration,
    p: &Progress,
) -> bool {
    let mut last_error = String::from("no addresses");
    for a in addrs {
        let t0 = Instant::now();
        match tokio::time::timeout(step, tokio::net::TcpStream::connect(a)).await {
            Ok(Ok(_)) => {
                p.push(Check::ok(
                    "connect",
                    format!("TCP to {a} in {} ms", ms(t0.elapsed())),
                ));
                return true;
            }
            Ok(Err(e)) => last_error = format!("{a}: {e}"),
            Err(_) => last_error = format!("{a}: no answer within {step:?}"),
        }
    }
    p.push(Check::problem(
        "connect",
        last_error,
        Fix::Connect(format!("{host}:{port}")),
    ));
    false
}

/// Why the unauthenticated request failed. TCP went through a moment
/// before: a failed connect is the TLS layer.
fn probe_failure(e: ProbeError, tls: bool, step: Duration) -> Check {
    match e {
        ProbeError::Connect(e) if tls || looks_like_tls(&e) => Check::problem("tls", e, Fix::Tls),
        ProbeError::Timeout(e) => Check::problem(
            "http",
            e,
            Fix::Hung {
                command_line: None,
                limit: step,
            },
        ),
        ProbeError::Connect(e) | ProbeError::Other(e) => {
            Check::problem("http", e, Fix::NotMcp(None))
        }
    }
}

fn tls_detail(certificate: Option<&cert::Summary>) -> String {
    match certificate {
        Some(c) => format!("TLS handshake ok; certificate {}", c.describe()),
        None => "TLS handshake ok".to_owned(),
    }
}

/// What a 401/403's `WWW-Authenticate` asks for.
fn challenge_text(www_authenticate: &[String]) -> String {
    let c = mcphost::auth::challenge::BearerChallenge::find(
        www_authenticate.iter().map(String::as_str),
    );
    match &c {
        Some(c) => format!(
            "Bearer; resource_metadata={}; scope={}{}",
            c.resource_metadata.as_deref().unwrap_or("(none)"),
            c.scope.as_deref().unwrap_or("(none)"),
            c.error
                .as_deref()
                .map(|e| format!("; error={e}"))
                .unwrap_or_default()
        ),
        None if www_authenticate.is_empty() => "no WWW-Authenticate header".to_owned(),
        None => www_authenticate.join(", "),
    }
}

/// The "auth" and "token" checks for what the server answered without a
/// token, given whether the config sends its own Authorization header or
/// turns OAuth off; whether a start may follow. `token` is the token
/// store's state for this server, asked only when a sign-in is wanted.
fn sign_in_checks(
    name: &str,
    resp: &Probed,
    own_header: bool,
    oauth_off: bool,
    p: &Progress,
    token: impl FnOnce() -> (bool, String),
) -> bool {
    if !matches!(resp.status, 401 | 403) {
        p.push(Check::ok(
            "auth",
            format!(
                "no sign-in asked (HTTP {} to an unauthenticated ping){}",
                resp.status,
                if own_header {
                    "; sends its own Authorization header"
                } else {
                    ""
                }
            ),
        ));
        return true;
    }
    let detail = format!(
        "HTTP {} without a token: asks for {}",
        resp.status,
        challenge_text(&resp.www_authenticate)
    );
    if own_header {
        p.push(Check::problem("auth", detail, Fix::HeaderRefused));
        return false;
    }
    if oauth_off {
        p.push(Check::problem("auth", detail, Fix::OAuthOff));
        return false;
    }
    p.push(Check::ok("auth", detail));
    let (has, state) = token();
    if has && resp.status == 403 {
        p.push(Check::problem("token", state, Fix::Forbidden(name)));
        false
    } else if has {
        p.push(Check::ok("token", state));
        true
    } else {
        p.push(Check::problem("token", state, Fix::Login(name)));
        false
    }
}

/// A real start within `left`, with the stored token (used and refreshed;
/// no sign-in page is ever shown). `status` is what the unauthenticated
/// ping got: a 404/405 there makes a failed start a wrong path.
async fn start(
    name: &str,
    sc: &ServerConfig,
    h: &HttpServer,
    status: u16,
    left: Duration,
    p: &Progress,
) {
    let mut cfg = mcphost::registry::from_config::http_config(h, &sc.timeouts);
    cfg.init_timeout = left;
    cfg.connect_timeout = cfg.connect_timeout.min(left);
    if let Ok(ctx) = mcphost::auth::AuthContext::from_env(None)
        && let Some(oauth) = h.oauth_client()
        && let Ok(a) = ctx.authorizer(name, &h.url, oauth)
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
    *lock(&p.control) = Some(conn.control.clone());
    let t0 = Instant::now();
    match ServerClient::connect(name, conn, client_options(left, None)).await {
        Ok(client) => {
            answered(&client, t0.elapsed(), p).await;
            client.shutdown().await;
        }
        Err(e) => {
            let mut c = start_failure(name, &e, None, None, left);
            if matches!(status, 404 | 405) && c.name == "start" {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16, www_authenticate: &[&str]) -> Probed {
        Probed {
            certificate: None,
            status,
            www_authenticate: www_authenticate.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// The checks `sign_in_checks` pushed as (name, ok), whether it let the
    /// start go ahead, and the checks themselves.
    fn sign_in(
        resp: &Probed,
        own_header: bool,
        oauth_off: bool,
        token: Option<&str>,
    ) -> (Vec<(&'static str, bool)>, bool, Vec<Check>) {
        let p = Progress::default();
        let go = sign_in_checks("gh", resp, own_header, oauth_off, &p, || match token {
            Some(t) => (true, t.to_owned()),
            None => (false, "no stored token for gh".to_owned()),
        });
        let checks = std::mem::take(&mut *lock(&p.checks));
        let short = checks.iter().map(|c| (c.name, c.ok)).collect();
        (short, go, checks)
    }

    #[test]
    fn a_server_that_asks_for_no_sign_in_is_started_without_looking_at_tokens() {
        let p = Progress::default();
        let go = sign_in_checks("gh", &answered(200, &[]), true, false, &p, || {
            panic!("the token store is not asked when no sign-in is wanted")
        });
        assert!(go);
        let checks = lock(&p.checks);
        assert_eq!(checks.len(), 1);
        assert_eq!(
            checks[0].detail,
            "no sign-in asked (HTTP 200 to an unauthenticated ping); sends its own Authorization header"
        );
    }

    #[test]
    fn a_401_is_classified_by_the_config_and_the_stored_token() {
        let asks = answered(
            401,
            &[r#"Bearer resource_metadata="https://a/prm", scope="read""#],
        );
        // The config's own header was refused.
        let (short, go, checks) = sign_in(&asks, true, false, Some("valid"));
        assert_eq!((short, go), (vec![("auth", false)], false));
        assert_eq!(checks[0].fix, Some(Fix::HeaderRefused.text()));
        assert_eq!(
            checks[0].detail,
            "HTTP 401 without a token: asks for Bearer; resource_metadata=https://a/prm; scope=read"
        );
        // OAuth turned off for it.
        let (short, go, checks) = sign_in(&asks, false, true, Some("valid"));
        assert_eq!((short, go), (vec![("auth", false)], false));
        assert_eq!(checks[0].fix, Some(Fix::OAuthOff.text()));
        // Signed in: both ok.
        let (short, go, _) = sign_in(&asks, false, false, Some("token from a valid"));
        assert_eq!((short, go), (vec![("auth", true), ("token", true)], true));
        // Not signed in: log in.
        let (short, go, checks) = sign_in(&asks, false, false, None);
        assert_eq!((short, go), (vec![("auth", true), ("token", false)], false));
        assert_eq!(checks[1].fix, Some(Fix::Login("gh").text()));
    }

    #[test]
    fn a_403_with_a_stored_token_says_the_token_is_not_allowed() {
        let (short, go, checks) = sign_in(&answered(403, &[]), false, false, Some("valid"));
        assert_eq!((short, go), (vec![("auth", true), ("token", false)], false));
        assert_eq!(
            checks[0].detail,
            "HTTP 403 without a token: asks for no WWW-Authenticate header"
        );
        assert_eq!(checks[1].fix, Some(Fix::Forbidden("gh").text()));
    }

    #[test]
    fn a_challenge_that_is_not_bearer_is_shown_as_sent() {
        assert_eq!(
            challenge_text(&["Basic realm=\"x\"".to_owned(), "Digest".to_owned()]),
            "Basic realm=\"x\", Digest"
        );
        assert_eq!(
            challenge_text(&[r#"Bearer error="invalid_token""#.to_owned()]),
            "Bearer; resource_metadata=(none); scope=(none); error=invalid_token"
        );
    }

    #[test]
    fn a_failed_unauthenticated_request_is_named_after_the_layer_that_failed() {
        let step = Duration::from_secs(5);
        let named = |e, tls| {
            let c = probe_failure(e, tls, step);
            (c.name, c.fix)
        };
        // TCP worked a moment before: over https a failed connect is TLS.
        assert_eq!(
            named(ProbeError::Connect("reset".into()), true),
            ("tls", Some(Fix::Tls.text()))
        );
        assert_eq!(
            named(ProbeError::Connect("invalid certificate".into()), false),
            ("tls", Some(Fix::Tls.text()))
        );
        assert_eq!(
            named(ProbeError::Connect("reset".into()), false),
            ("http", Some(Fix::NotMcp(None).text()))
        );
        assert_eq!(
            named(ProbeError::Timeout("slow".into()), true),
            (
                "http",
                Some(
                    Fix::Hung {
                        command_line: None,
                        limit: step
                    }
                    .text()
                )
            )
        );
        assert_eq!(
            named(ProbeError::Other("bad body".into()), false),
            ("http", Some(Fix::NotMcp(None).text()))
        );
    }

    #[test]
    fn a_url_doctor_cannot_check_is_a_bad_url_with_its_query_hidden() {
        let c = parse_url("ftp://host/x?key=secret").unwrap_err();
        assert_eq!(c.name, "url");
        assert_eq!(c.detail, "ftp://host/x?…: the scheme is \"ftp\"");
        assert_eq!(c.fix, Some(Fix::BadUrl.text()));
        assert!(parse_url("not a url").is_err());
        assert!(parse_url("https://example.com/mcp").is_ok());
    }
}
