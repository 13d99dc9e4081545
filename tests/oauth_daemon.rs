//! The daemon and `mcphost auth`: a server that needs a person to sign in
//! waits in `auth_required`, says what fixes it, and gets ready by itself
//! once `mcphost auth login` (another process) stores a token.

mod common;

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
