//! The daemon and `mcphost auth`: a server that needs a person to sign in
//! waits in `auth_required`, says what fixes it, and gets ready by itself
//! once `mcphost auth login` (another process) stores a token.

use crate::common;

use std::time::Duration;

use common::oauth_server::{OAuthOptions, OAuthServer};
use common::*;

/// A browser for the tests: tests/conformance/browser.js on node, which
/// follows the mock's redirect to mcphost's loopback listener.
fn browser() -> String {
    let node = std::env::var("MCPHOST_NODE").unwrap_or_else(|_| "node".into());
    format!(
        "{node} {}/tests/conformance/browser.js",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn sandbox() -> Sandbox {
    let mut sb = Sandbox::new();
    sb.env.push(("MCPHOST_TOKEN_STORE".into(), "file".into()));
    sb
}

#[test]
fn a_server_waiting_for_sign_in_gets_ready_by_itself_after_auth_login() {
    let mock = OAuthServer::start(OAuthOptions::default());
    let config = format!(
        r#"{{"mcpServers": {{"srv": {{"url": "{}"}}}}}}"#,
        mock.mcp_url()
    );
    // No MCPHOST_BROWSER, no host app: the daemon cannot show a page.
    let d = Daemon::start_in(sandbox(), &config);
    let st = poll("srv to wait for a sign-in", Duration::from_secs(30), || {
        d.server("srv").filter(|s| s["state"] == "auth_required")
    });
    let err = st["error"].as_str().unwrap_or_default();
    assert!(err.contains("mcphost auth login srv"), "{st:#}");
    let table = d.run(&["servers"]);
    assert!(
        table.stdout.contains("sign in: mcphost auth login srv"),
        "{}",
        table.stdout
    );
    assert!(
        mock.authorize_requests().is_empty(),
        "the daemon opened nothing"
    );

    let mut login = d.command();
    login
        .args(["auth", "login", "srv"])
        .env("MCPHOST_BROWSER", browser());
    let out = output_within(login, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "auth login: {stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("signed in to srv"));
    assert_eq!(mock.authorize_requests().len(), 1, "{}", mock.summary());

    // Ready by itself: nobody restarts it.
    d.wait_ready(&["srv"], Duration::from_secs(20));
    let call = d.run(&["call", "srv__whoami", "{}"]);
    assert_eq!(call.code, 0, "{}{}", call.stdout, call.stderr);
    assert!(call.stdout.contains("alice"), "{}", call.stdout);

    let status = d.json(&["auth", "status"]);
    let rows = status["signIns"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{status:#}");
    assert_eq!(rows[0]["server"], "srv");
    assert_eq!(rows[0]["issuer"], mock.issuer());
    assert!(
        !status.to_string().contains("test-token") && !status.to_string().contains("access_token")
    );

    let out = d.run(&["auth", "logout", "srv"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("signed out of srv"), "{}", out.stdout);
    assert!(
        d.json(&["auth", "status"])["signIns"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[test]
fn auth_login_names_what_is_wrong_with_the_server() {
    let sb = sandbox();
    sb.write_config(r#"{"mcpServers": {"local": {"command": "true"}, "static": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer x"}}, "off": {"url": "http://127.0.0.1:9/mcp", "oauth": false}}}"#);
    for (name, says) in [
        ("nope", "no server named 'nope'"),
        ("local", "stdio server"),
        ("static", "its own Authorization header"),
        ("off", "\"oauth\": false"),
    ] {
        let r = sb.run(&["auth", "login", name]);
        assert_ne!(r.code, 0, "{name}");
        assert!(r.stderr.contains(says), "{name}: {}", r.stderr);
    }
}

/// A host app that opens sign-in pages: a URL elicitation is "opened" by
/// loading it and following the redirects, as a browser would.
struct OpeningHost {
    opened: std::sync::Mutex<Vec<serde_json::Value>>,
}

impl mcphost::client::Host for OpeningHost {
    fn capabilities(&self) -> mcphost::protocol::ClientCapabilities {
        mcphost::protocol::ClientCapabilities {
            elicitation: Some(mcphost::protocol::capabilities::ElicitationCap {
                form: None,
                url: Some(Default::default()),
            }),
            ..Default::default()
        }
    }

    fn handle(
        &self,
        r: mcphost::client::HostRequest,
    ) -> mcphost::transport::BoxFuture<
        'static,
        Result<Box<mcphost::protocol::RawValue>, mcphost::protocol::ErrorObject>,
    > {
        let params: serde_json::Value = r
            .params
            .as_deref()
            .map(|p| serde_json::from_str(p.get()).unwrap())
            .unwrap_or_default();
        self.opened
            .lock()
            .unwrap()
            .push(serde_json::json!({"server": r.server, "method": r.method, "params": params}));
        Box::pin(async move {
            let url = params["url"].as_str().unwrap_or_default().to_owned();
            let ok = reqwest::get(&url)
                .await
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            let action = if ok { "accept" } else { "cancel" };
            Ok(
                mcphost::protocol::RawValue::from_string(format!(r#"{{"action":"{action}"}}"#))
                    .unwrap(),
            )
        })
    }
}

#[tokio::test]
async fn a_registered_host_app_is_handed_the_sign_in_page_as_a_url_elicitation() {
    use mcphost::auth::browser::{Browser, HostBrowser};
    use std::sync::Arc;
    let mock = OAuthServer::start(OAuthOptions::default());
    let tokens = tempfile::tempdir().unwrap();
    let text = format!(
        r#"{{"mcpServers": {{"srv": {{"url": "{}"}}}}, "loginShellPath": false}}"#,
        mock.mcp_url()
    );
    let cfg = mcphost::config::parse(
        &text,
        std::path::Path::new("/nonexistent/config.json"),
        &|_| None,
    )
    .unwrap();
    let (host_browser, slot) = HostBrowser::unbound();
    let auth = mcphost::auth::AuthContext {
        store: Some(mcphost::auth::store::TokenStore::open(tokens.path().to_owned()).unwrap()),
        browser: Some(Arc::new(host_browser) as Arc<dyn Browser>),
        env: Default::default(),
        login_timeout: Duration::from_secs(30),
        attempts: Default::default(),
    };
    let engine = mcphost::engine::EngineBuilder::new(cfg)
        .server_options(mcphost::registry::ServerOptions {
            auth: Some(Arc::new(auth)),
            ..Default::default()
        })
        .start();
    let _ = slot.set(Arc::new(mcphost::registry::sign_in::HostSignIn(
        engine.host(),
    )));
    // No host yet: the fallback declines the page, the server waits.
    let reg = engine.registry().clone();
    let waiting = async {
        loop {
            if let Some(s) = reg.statuses().into_iter().find(|s| s.name == "srv")
                && s.state == mcphost::registry::supervisor::ServerState::AuthRequired
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let st = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("auth_required");
    assert!(
        format!("{st:?}").contains("mcphost auth login srv"),
        "{st:?}"
    );

    let host = Arc::new(OpeningHost {
        opened: Default::default(),
    });
    let port = Arc::new(mcphost::engine::HostPort::new(host.clone(), |_, _| {}));
    let caps = port.capabilities();
    let s = engine.open_session("app", port, mcphost::engine::SessionLimits::default());
    s.initialize_as(caps);
    s.request(
        mcphost::protocol::Id::number(1),
        "mcphost/host/register",
        None,
    )
    .await
    .unwrap();
    reg.restart("srv").await.unwrap();
    let ready = async {
        loop {
            if reg.catalog().route("srv__whoami").is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), ready)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "srv not ready: {:?}; opened {:?}; {}",
                reg.statuses(),
                host.opened.lock().unwrap(),
                mock.summary()
            )
        });
    let opened = host.opened.lock().unwrap().clone();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0]["server"], "srv");
    assert_eq!(opened[0]["method"], "elicitation/create");
    assert_eq!(opened[0]["params"]["mode"], "url");
    assert!(
        opened[0]["params"]["url"]
            .as_str()
            .unwrap()
            .starts_with(&mock.authorize_url())
    );
    assert!(
        tokens.path().read_dir().unwrap().count() >= 1,
        "the token is stored"
    );
    engine.shutdown().await;
}

/// A server that rejects every token it is given (issue 21): the daemon,
/// which can sign in through MCPHOST_BROWSER, must not sign in forever.
/// Its own sign-ins change the token store; that must not restart it, and
/// past 3 browser launches or 3 token requests in a minute it stops and
/// says why.
#[test]
fn a_server_that_rejects_every_token_gets_at_most_three_sign_ins_a_minute() {
    let mock = OAuthServer::start(OAuthOptions {
        reject_all_tokens: true,
        ..OAuthOptions::default()
    });
    let config = format!(
        r#"{{"mcpServers": {{"srv": {{"url": "{}"}}}}}}"#,
        mock.mcp_url()
    );
    let mut sb = sandbox();
    sb.env.push(("MCPHOST_BROWSER".into(), browser()));
    let started = std::time::Instant::now();
    let d = Daemon::start_in(sb, &config);
    let window = Duration::from_secs(60);
    let counts = |m: &OAuthServer| (m.authorize_requests().len(), m.token_requests().len());
    // It stops by itself, saying so; or the minute runs out.
    let mut stopped = None;
    while started.elapsed() < window {
        if let Some(s) = d.server("srv").filter(|s| {
            s["state"] == "auth_failed"
                && s["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("stopped signing in"))
        }) {
            stopped = Some(s);
            break;
        }
        let (a, t) = counts(&mock);
        assert!(
            a <= 3 && t <= 3,
            "after {:?}: {a} browser launches and {t} token requests\n{}",
            started.elapsed(),
            mock.summary()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (a, t) = counts(&mock);
    eprintln!(
        "after {:?}: {a} browser launches, {t} token requests",
        started.elapsed()
    );
    let st = stopped.unwrap_or_else(|| {
        panic!(
            "srv never stopped signing in within {window:?}: {a} launches, {t} token requests; {:#}",
            d.server("srv").unwrap_or_default()
        )
    });
    assert!(a <= 3 && t <= 3, "{a} launches, {t} token requests");
    let err = st["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("every token is refused here"),
        "the last refusal is shown: {st:#}"
    );
    assert!(err.contains("mcphost auth login srv"), "the fix: {st:#}");
    let table = d.run(&["servers"]);
    let row = table
        .stdout
        .lines()
        .find(|l| l.starts_with("srv "))
        .unwrap_or_default();
    assert!(
        row.contains("auth_failed") && row.contains("stopped signing in"),
        "{}",
        table.stdout
    );
    let status = d.run(&["status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert!(
        status["authFailed"]["srv"]
            .as_str()
            .is_some_and(|e| e.contains("mcphost auth login srv")),
        "{status:#}"
    );
    // The daemon answered `servers` after it stopped: nothing more came in.
    assert_eq!(counts(&mock), (a, t), "{}", mock.summary());
    // doctor (which probes the server itself) says what the daemon did.
    let doctor = d.run(&["doctor", "--json", "srv"]);
    let doctor: serde_json::Value = serde_json::from_str(&doctor.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", doctor.stdout, doctor.stderr));
    let checks = doctor["servers"][0]["checks"].to_string();
    assert!(
        checks.contains("auth_failed") && checks.contains("mcphost auth login srv"),
        "{doctor:#}"
    );
}

/// Step-ups for more scope are counted per token, not for the life of a
/// server in the daemon (issue 21, Low): a server that asks for a wider
/// scope now and then, and takes each new token, may ask again later. The
/// third ask waits out the minute of the token-request budget (3 a minute),
/// which bounds a server that asks on every request.
#[test]
fn a_server_may_ask_for_more_scope_again_once_it_took_the_last_token() {
    let mock = OAuthServer::start(OAuthOptions::default());
    mock.preregister("svc", Some("SVC-SECRET"), "client_secret_basic");
    let config = format!(
        r#"{{"mcpServers": {{"srv": {{"url": "{}", "oauth": {{"clientId": "svc", "clientSecret": "SVC-SECRET", "grantType": "client_credentials", "issuer": "{}"}}}}}}}}"#,
        mock.mcp_url(),
        mock.issuer()
    );
    let d = Daemon::start_in(sandbox(), &config);
    d.wait_ready(&["srv"], Duration::from_secs(30));
    let first_token = std::time::Instant::now();
    let mut scopes = Vec::new();
    for (i, scope) in ["s1", "s2", "s3"].into_iter().enumerate() {
        scopes.push(scope.to_owned());
        let wanted = scopes.clone();
        mock.set(|o| o.call_scopes = wanted);
        if i == 2 {
            // The budget's window: wait for the first token request to age out.
            let left = Duration::from_secs(61).saturating_sub(first_token.elapsed());
            std::thread::sleep(left);
        }
        let call = d.run(&["call", "srv__whoami", "{}"]);
        assert_eq!(
            call.code,
            0,
            "ask {} for {scope}: {}{}\n{}",
            i + 1,
            call.stdout,
            call.stderr,
            mock.summary()
        );
        assert!(call.stdout.contains(scope), "{}", call.stdout);
    }
    assert_eq!(mock.token_requests().len(), 4, "{}", mock.summary());
}
