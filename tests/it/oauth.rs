//! The OAuth client end to end: the real `mcphost` binary (`--direct`, and
//! the daemon) against the mock authorization server and protected MCP
//! server of tests/common/oauth_server.rs.
//!
//! The "browser" is this test process: `MCPHOST_BROWSER` is a script that
//! appends the URL it is given to a file, and the test polls that file and
//! opens the URL itself (following redirects back to mcphost's loopback
//! listener), or not.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::oauth_server::{
    AuthorizeMode, ES256_PRIVATE_PEM, ES256_PUBLIC_PEM, JWT_BEARER, JwtAlg, OAuthOptions,
    OAuthServer, RS256_PRIVATE_PEM, RS256_PUBLIC_PEM, WRONG_ISS, s256,
};
use common::{Daemon, Run, Sandbox, js, servers_config};
use mcphost::auth::store::{Registration, StoredSignIn, TokenKey, TokenStore, Tokens};

/// Generous on a loaded 2-core machine; a healthy run takes a few seconds.
const RUN_LIMIT: Duration = Duration::from_secs(120);

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ---------------------------------------------------------------------------
// The browser

/// What `MCPHOST_BROWSER` runs: it records the URL and exits.
struct FakeBrowser {
    script: PathBuf,
    urls: PathBuf,
}

impl FakeBrowser {
    fn new(dir: &Path) -> FakeBrowser {
        let script = dir.join("browser.sh");
        let urls = dir.join("browser-urls.txt");
        std::fs::write(
            &script,
            format!("#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{}'\n", urls.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeBrowser { script, urls }
    }

    /// The `MCPHOST_BROWSER` value (run as `sh -c '<it> "$1"'`).
    fn command(&self) -> String {
        format!("'{}'", self.script.display())
    }

    /// The URLs handed over so far (complete lines only).
    fn urls(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.urls).unwrap_or_default();
        let complete = match text.rfind('\n') {
            Some(i) => &text[..i],
            None => "",
        };
        complete
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// What the browser got for one URL: the final URL and status after
/// following redirects, or the error.
#[derive(Debug)]
struct Visit {
    url: String,
    outcome: Result<(String, u16), String>,
}

fn visit(url: &str) -> Visit {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcome = rt.block_on(async {
        let c = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::limited(5))
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        match c.get(url).send().await {
            Ok(r) => {
                let fin = r.url().to_string();
                let st = r.status().as_u16();
                let _ = r.text().await;
                Ok((fin, st))
            }
            Err(e) => Err(format!("{e:?}")),
        }
    });
    Visit {
        url: url.to_owned(),
        outcome,
    }
}

// ---------------------------------------------------------------------------
// Running mcphost

/// A running `mcphost`, its output collected by a thread.
struct Pending {
    pid: u32,
    /// URLs the browser had before this process: not this one's to open.
    urls_before: usize,
    started: Instant,
    rx: mpsc::Receiver<std::process::Output>,
}

fn spawn(mut cmd: Command, browser: &FakeBrowser) -> Pending {
    let urls_before = browser.urls().len();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let child = cmd.spawn().expect("spawn mcphost");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output().expect("wait for mcphost"));
    });
    Pending {
        pid,
        urls_before,
        started,
        rx,
    }
}

/// What the person at the browser does with a sign-in page.
#[derive(Clone, Copy)]
enum Follow {
    Never,
    /// Opens it this long after it was handed over (a person signing in).
    After(Duration),
}

const AT_ONCE: Follow = Follow::After(Duration::ZERO);

impl Pending {
    /// Waits for the exit; meanwhile each URL handed to `browser` is opened
    /// or left alone, as `follow` says. Past `limit` the process is killed
    /// and the test fails.
    fn wait(
        self,
        browser: &FakeBrowser,
        follow: Follow,
        limit: Duration,
    ) -> (Run, Duration, Vec<Visit>) {
        let mut visits = Vec::new();
        let mut seen = self.urls_before;
        // Handed over, not opened yet: the URL and when it came.
        let mut waiting: Vec<(String, Instant)> = Vec::new();
        loop {
            match self.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(out) => {
                    let took = self.started.elapsed();
                    let run = Run {
                        code: out.status.code().unwrap_or(-1),
                        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                    };
                    return (run, took, visits);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!("output thread died"),
            }
            let urls = browser.urls();
            for u in urls.iter().skip(seen) {
                waiting.push((u.clone(), Instant::now()));
            }
            seen = urls.len();
            if let Follow::After(delay) = follow {
                let (due, later): (Vec<_>, Vec<_>) =
                    waiting.drain(..).partition(|(_, at)| at.elapsed() >= delay);
                waiting = later;
                visits.extend(due.iter().map(|(u, _)| visit(u)));
            }
            if self.started.elapsed() > limit {
                // SAFETY: kill(2) on the pid of our own child.
                unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
                let out = self.rx.recv_timeout(Duration::from_secs(10));
                panic!(
                    "mcphost did not finish within {limit:?}; stderr:\n{}",
                    out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                        .unwrap_or_default()
                );
            }
        }
    }
}

/// One user's machine: HOME, token store, browser, daemon socket.
struct Machine {
    sb: Sandbox,
    tokens: PathBuf,
    browser: FakeBrowser,
}

/// The environment every mcphost of these tests gets (on top of the
/// sandbox's), whatever the parent's: the file store in the sandbox, our
/// browser, no display to open a real one.
fn oauth_env(tokens: &Path, browser: &FakeBrowser) -> Vec<(String, String)> {
    vec![
        ("MCPHOST_TOKEN_DIR".into(), tokens.display().to_string()),
        ("MCPHOST_TOKEN_STORE".into(), "file".into()),
        ("MCPHOST_BROWSER".into(), browser.command()),
        ("MCPHOST_OAUTH_TIMEOUT".into(), "60".into()),
        ("NO_PROXY".into(), "127.0.0.1,localhost".into()),
        ("no_proxy".into(), "127.0.0.1,localhost".into()),
        ("RUST_LOG".into(), "mcphost=debug".into()),
    ]
}

impl Machine {
    fn new() -> Machine {
        let sb = Sandbox::new();
        let tokens = sb.dir.path().join("tokens");
        let browser = FakeBrowser::new(sb.dir.path());
        let mut m = Machine {
            sb,
            tokens,
            browser,
        };
        // For the daemon, which Sandbox::command starts.
        m.sb.env = oauth_env(&m.tokens, &m.browser);
        m
    }

    /// `mcphost ARGS` with this machine's environment plus `env`.
    fn command(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = self.sb.command();
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("MCPHOST_") && k != "MCPHOST_SOCKET" && k != "MCPHOST_CONFIG" {
                c.env_remove(&*k);
            }
        }
        c.env_remove("DISPLAY").env_remove("WAYLAND_DISPLAY");
        for (k, v) in oauth_env(&self.tokens, &self.browser) {
            c.env(k, v);
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c.args(args);
        c
    }

    /// `mcphost --direct srv=URL call srv__whoami {}`.
    fn direct_call(&self, srv: &OAuthServer, env: &[(&str, &str)]) -> Command {
        let spec = format!("srv={}", srv.mcp_url());
        self.command(&["--direct", &spec, "call", "srv__whoami", "{}"], env)
    }

    /// Runs it to the end, opening the sign-in page when handed one.
    fn direct_sign_in(
        &self,
        srv: &OAuthServer,
        env: &[(&str, &str)],
    ) -> (Run, Duration, Vec<Visit>) {
        spawn(self.direct_call(srv, env), &self.browser).wait(&self.browser, AT_ONCE, RUN_LIMIT)
    }

    fn store(&self) -> TokenStore {
        TokenStore::open(self.tokens.clone()).unwrap()
    }
}

/// The error mcphost printed last (`mcphost: …` to the end), not its logs.
fn error_text(r: &Run) -> String {
    let mut out = Vec::new();
    let mut on = false;
    for l in r.stderr.lines() {
        if l.starts_with("mcphost: ") {
            on = true;
        }
        if on {
            out.push(l);
        }
    }
    out.join("\n")
}

fn key(srv: &OAuthServer) -> TokenKey {
    TokenKey {
        issuer: srv.issuer(),
        resource: srv.resource(),
    }
}

// ---------------------------------------------------------------------------
// 1. Sign-in, then the stored token

#[test]
fn signs_in_with_dcr_and_pkce_then_reuses_the_stored_token() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let m = Machine::new();

    let (r, took, visits) = m.direct_sign_in(&srv, &[]);
    eprintln!("first call (sign-in) took {took:?}");
    assert_eq!(r.code, 0, "{r:?}\n{visits:?}\n{}", srv.summary());
    assert!(r.stdout.contains("subject=alice"), "{r:?}");

    // One page handed to the browser, the mock's authorize endpoint.
    assert_eq!(m.browser.urls().len(), 1, "{:?}", m.browser.urls());
    assert!(
        m.browser.urls()[0].starts_with(&srv.authorize_url()),
        "{:?}",
        m.browser.urls()
    );
    assert_eq!(srv.registrations().len(), 1, "DCR once: {}", srv.summary());
    let auth = srv.authorize_requests();
    assert_eq!(auth.len(), 1, "{}", srv.summary());
    let a = &auth[0];
    assert_eq!(a.outcome, "redirected", "{a:?}");
    assert_eq!(a.param("code_challenge_method"), Some("S256"), "{a:?}");
    assert_eq!(a.param("resource"), Some(srv.resource().as_str()), "{a:?}");
    let redirect = a.param("redirect_uri").unwrap();
    assert!(redirect.starts_with("http://127.0.0.1:"), "{redirect}");
    // The browser landed on mcphost's listener, which answered.
    assert_eq!(visits.len(), 1, "{visits:?}");
    assert_eq!(visits[0].url, m.browser.urls()[0]);
    match &visits[0].outcome {
        Ok((landed, 200)) if landed.starts_with(redirect) => {}
        other => panic!("the browser got {other:?}, not the callback {redirect}"),
    }

    let tok = srv.token_requests();
    assert_eq!(tok.len(), 1, "{}", srv.summary());
    let t = &tok[0];
    assert_eq!(t.grant_type.as_deref(), Some("authorization_code"), "{t:?}");
    assert!(t.ok(), "{t:?}");
    let verifier = t.param("code_verifier").expect("a code_verifier");
    assert_eq!(
        Some(s256(verifier).as_str()),
        a.param("code_challenge"),
        "the verifier is the challenge's"
    );
    assert_eq!(
        t.resource.as_deref(),
        Some(srv.resource().as_str()),
        "{t:?}"
    );
    assert_eq!(t.redirect_uri.as_deref(), Some(redirect), "{t:?}");
    let stored = m.store().load(&key(&srv)).unwrap().expect("an entry");
    assert!(stored.tokens.is_some(), "{stored:?}");

    // A new process: the stored token, straight away.
    let mcp_before = srv.mcp_requests().len();
    let (r, took, _) = m.direct_sign_in(&srv, &[]);
    eprintln!("second call (stored token) took {took:?}");
    assert_eq!(r.code, 0, "{r:?}\n{}", srv.summary());
    assert!(r.stdout.contains("subject=alice"), "{r:?}");
    assert_eq!(srv.authorize_requests().len(), 1, "{}", srv.summary());
    assert_eq!(srv.token_requests().len(), 1, "{}", srv.summary());
    assert_eq!(srv.registrations().len(), 1, "{}", srv.summary());
    assert_eq!(m.browser.urls().len(), 1, "no second sign-in page");
    let mcp = srv.mcp_requests();
    let later = &mcp[mcp_before..];
    assert!(!later.is_empty());
    assert!(
        later.iter().all(|q| q.had_auth() && q.status != 401),
        "the stored token is sent from the first request: {later:#?}"
    );
}

/// A person takes a while to sign in: longer than the client's limit for
/// its first request (10 s for the `server/discover` probe). The sign-in in
/// progress must be the one that completes: one page, one listener.
#[test]
fn a_sign_in_slower_than_the_first_request_is_not_restarted() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let m = Machine::new();
    let (r, took, visits) = spawn(m.direct_call(&srv, &[]), &m.browser).wait(
        &m.browser,
        Follow::After(Duration::from_secs(15)),
        RUN_LIMIT,
    );
    eprintln!("took {took:?}");
    let pages = m.browser.urls();
    assert_eq!(
        pages.len(),
        1,
        "one sign-in page, not one per request: {pages:#?}\nvisits: {visits:#?}\n{}\nstderr:\n{}",
        srv.summary(),
        r.stderr
    );
    assert_eq!(r.code, 0, "{r:?}\n{visits:?}\n{}", srv.summary());
    assert!(r.stdout.contains("subject=alice"), "{r:?}");
    assert_eq!(srv.authorize_requests().len(), 1, "{}", srv.summary());
    assert_eq!(srv.token_requests().len(), 1, "{}", srv.summary());
}

// ---------------------------------------------------------------------------
// 2. The refresh race

/// A signed-in user whose access token is expired (at the mock, and by its
/// `expires_at`): the next process to talk to the server must refresh.
fn seed_expired(srv: &OAuthServer, m: &Machine) -> String {
    let minted = srv.issue_tokens_for_test("mcphost-seeded", None);
    srv.expire_access_tokens();
    assert!(!srv.access_token_valid(&minted.access_token));
    let now = now_secs();
    let entry = stored_entry(
        srv,
        &minted.client_id,
        &minted.access_token,
        &minted.refresh_token,
        now,
    );
    m.store().save(&key(srv), &entry).unwrap();
    minted.refresh_token
}

/// What a sign-in of the public client `client_id` at `srv` stores: a
/// Bearer token expiring at `expires_at`, saved now.
fn stored_entry(
    srv: &OAuthServer,
    client_id: &str,
    access: &str,
    refresh: &str,
    expires_at: u64,
) -> StoredSignIn {
    StoredSignIn {
        tokens: Some(Tokens {
            access_token: access.into(),
            token_type: "Bearer".into(),
            refresh_token: Some(refresh.into()),
            expires_at: Some(expires_at),
            scope: None,
        }),
        client: Some(Registration {
            client_id: client_id.into(),
            client_secret: None,
            token_endpoint_auth_method: Some("none".into()),
        }),
        server: Some("srv".into()),
        token_endpoint: Some(srv.token_url()),
        updated_at: now_secs(),
        writer: None,
        dpop_key: None,
    }
}

fn race_options() -> OAuthOptions {
    OAuthOptions {
        rotate_refresh: true,
        // The first refresh is spent at once, answered this much later: a
        // second refresh in this window presents a rotated token.
        token_delay: Duration::from_millis(1000),
        ..OAuthOptions::default()
    }
}

/// What went wrong in one round of a race, for one failure listing them all.
fn race_problems(srv: &OAuthServer, browser: &FakeBrowser, problems: &mut Vec<String>) {
    if srv.family_revoked() {
        problems.push(format!("the family was revoked: {:?}", srv.revocations()));
    }
    if srv.refreshes() != 1 {
        problems.push(format!(
            "{} successful refresh grants, expected exactly 1",
            srv.refreshes()
        ));
    }
    if !srv.authorize_requests().is_empty() || !browser.urls().is_empty() {
        problems.push(format!(
            "a sign-in was started ({} authorize requests, browser got {:?})",
            srv.authorize_requests().len(),
            browser.urls()
        ));
    }
}

/// The daemon's log without the connections of our `status` polls.
fn daemon_log(d: &Daemon) -> String {
    d.log_text()
        .lines()
        .filter(|l| {
            !l.contains("mcphost::ipc")
                && !l.contains("client{id=")
                && !l.contains("peer{server=client-")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_refresh_race_between_a_daemon_and_a_cli_does_not_revoke_the_family() {
    let mut failures = Vec::new();
    for round in 1..=3 {
        let srv = OAuthServer::start(race_options());
        let m = Machine::new();
        seed_expired(&srv, &m);
        let config = servers_config(&[("srv", format!(r#""url": {}"#, js(&srv.mcp_url())))]);

        // The CLI and the daemon start together; each finds the expired
        // token and the server's 401.
        let started = Instant::now();
        let cli = spawn(
            m.direct_call(&srv, &[("MCPHOST_OAUTH_TIMEOUT", "3")]),
            &m.browser,
        );
        let Machine { sb, browser, .. } = m;
        let d = Daemon::start_in(sb, &config);
        let (cli_run, cli_took, _) = cli.wait(&browser, Follow::Never, RUN_LIMIT);

        let mut problems = Vec::new();
        if cli_run.code != 0 || !cli_run.stdout.contains("subject=alice") {
            problems.push(format!("the --direct call failed: {cli_run:?}"));
        }
        // The daemon's server, then a call through the daemon.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (ready, last) = loop {
            let s = d.server("srv").unwrap_or(serde_json::Value::Null);
            if s["state"] == "ready" {
                break (true, s);
            }
            if Instant::now() >= deadline {
                break (false, s);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if !ready {
            problems.push(format!("the daemon's srv is not ready after 30 s: {last}"));
        }
        let via_daemon = d.run(&["call", "srv__whoami", "{}"]);
        if via_daemon.code != 0 || !via_daemon.stdout.contains("subject=alice") {
            problems.push(format!(
                "the call through the daemon failed: {via_daemon:?}"
            ));
        }
        race_problems(&srv, &browser, &mut problems);
        eprintln!(
            "round {round}: cli {cli_took:?}, round {:?}, {} problems",
            started.elapsed(),
            problems.len()
        );
        if !problems.is_empty() {
            failures.push(format!(
                "round {round}:\n  - {}\n  mock: {}\n  cli stderr:\n{}\n  daemon log:\n{}",
                problems.join("\n  - "),
                srv.summary(),
                cli_run.stderr,
                daemon_log(&d)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The same race without the daemon: two `--direct` processes at once.
#[test]
fn a_refresh_race_between_two_cli_processes_does_not_revoke_the_family() {
    let mut failures = Vec::new();
    for round in 1..=3 {
        let srv = OAuthServer::start(race_options());
        let m = Machine::new();
        seed_expired(&srv, &m);
        let env = [("MCPHOST_OAUTH_TIMEOUT", "3")];
        let a = spawn(m.direct_call(&srv, &env), &m.browser);
        let b = spawn(m.direct_call(&srv, &env), &m.browser);
        let (ra, ta, _) = a.wait(&m.browser, Follow::Never, RUN_LIMIT);
        let (rb, tb, _) = b.wait(&m.browser, Follow::Never, RUN_LIMIT);
        let mut problems = Vec::new();
        for (name, r) in [("first", &ra), ("second", &rb)] {
            if r.code != 0 || !r.stdout.contains("subject=alice") {
                problems.push(format!(
                    "the {name} call failed: exit {}, {}",
                    r.code,
                    error_text(r)
                ));
            }
        }
        race_problems(&srv, &m.browser, &mut problems);
        eprintln!(
            "round {round}: {ta:?} / {tb:?}, {} problems",
            problems.len()
        );
        if !problems.is_empty() {
            failures.push(format!(
                "round {round}:\n  - {}\n  mock: {}\n  first stderr:\n{}\n  second stderr:\n{}",
                problems.join("\n  - "),
                srv.summary(),
                ra.stderr,
                rb.stderr
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ---------------------------------------------------------------------------
// 3. Redaction

/// `prefix` + 32 base64url characters (the mock's tokens), as a word.
fn mock_tokens_in(text: &str, prefix: &str) -> Vec<String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(prefix).map(|i| i + from) {
        from = i + 1;
        if i > 0 && word(bytes[i - 1]) {
            continue;
        }
        let start = i + prefix.len();
        let end = start + 32;
        if end <= bytes.len()
            && bytes[start..end].iter().all(|b| word(*b))
            && bytes.get(end).is_none_or(|b| !word(*b))
        {
            found.push(text[i..end].to_owned());
        }
    }
    found
}

#[test]
fn redaction_no_token_in_the_most_verbose_trace() {
    // No `none` method: DCR registers a confidential client with a secret.
    let srv = OAuthServer::start(OAuthOptions {
        token_auth_methods: vec!["client_secret_basic".into()],
        ..OAuthOptions::default()
    });
    let m = Machine::new();
    let trace = [("RUST_LOG", "trace")];

    let (signin, _, visits) = m.direct_sign_in(&srv, &trace);
    assert_eq!(signin.code, 0, "{signin:?}\n{visits:?}\n{}", srv.summary());
    assert!(signin.stdout.contains("subject=alice"), "{signin:?}");
    // The token expires at the server: the next process refreshes.
    srv.expire_access_tokens();
    let (refresh, _, _) = m.direct_sign_in(&srv, &trace);
    assert_eq!(refresh.code, 0, "{refresh:?}\n{}", srv.summary());
    assert_eq!(srv.refreshes(), 1, "{}", srv.summary());

    // Every secret that crossed the wire, from the mock's records.
    let mut secrets: Vec<(&str, String)> = Vec::new();
    for c in srv.clients() {
        if let Some(s) = c.client_secret {
            use base64::Engine as _;
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.client_id, s));
            secrets.push(("client secret", s));
            secrets.push(("Basic credentials", basic));
        }
    }
    for t in srv.token_requests() {
        for (name, what) in [
            ("code", "authorization code"),
            ("code_verifier", "code verifier"),
            ("refresh_token", "refresh token"),
        ] {
            if let Some(v) = t.param(name) {
                secrets.push((what, v.to_owned()));
            }
        }
    }
    for q in srv.mcp_requests() {
        if let Some(a) = q.authorization
            && let Some(t) = a.strip_prefix("Bearer ")
        {
            secrets.push(("access token", t.to_owned()));
        }
    }
    let now = m.store().load(&key(&srv)).unwrap().unwrap().tokens.unwrap();
    secrets.push(("access token", now.access_token.expose().to_owned()));
    secrets.push((
        "refresh token",
        now.refresh_token.clone().unwrap().into_inner(),
    ));
    secrets.sort();
    secrets.dedup();
    let count = |what: &str| secrets.iter().filter(|(w, _)| *w == what).count();
    // Else the check below would pass for want of anything to look for.
    assert!(count("client secret") >= 1, "{secrets:?}");
    assert_eq!(count("authorization code"), 1, "{secrets:?}");
    assert_eq!(count("code verifier"), 1, "{secrets:?}");
    assert!(count("refresh token") >= 2, "old and new: {secrets:?}");
    assert!(count("access token") >= 2, "old and new: {secrets:?}");

    // The shape check below does find a mock token where there is one.
    let rt = now.refresh_token.clone().unwrap().into_inner();
    assert_eq!(
        mock_tokens_in(&format!("x={rt}, y"), "rt_"),
        vec![rt.clone()]
    );

    let mut leaks = Vec::new();
    for (run, r) in [("sign-in", &signin), ("refresh", &refresh)] {
        // It did log, at trace level, what happened.
        assert!(
            r.stderr.contains("TRACE"),
            "{run}: RUST_LOG=trace had no effect"
        );
        for (what, s) in &secrets {
            for l in r.stderr.lines().filter(|l| l.contains(s.as_str())) {
                leaks.push(format!("{run}: {what} in: {l}"));
            }
        }
        // Tokens of the mock's shape that we did not collect.
        for p in ["at_", "rt_", "code_", "secret_"] {
            for t in mock_tokens_in(&r.stderr, p) {
                leaks.push(format!("{run}: a mock {p}… token in stderr: {t}"));
            }
        }
    }
    assert!(signin.stderr.contains("signed in"), "{}", signin.stderr);
    assert!(
        refresh.stderr.contains("token refreshed"),
        "{}",
        refresh.stderr
    );
    leaks.sort();
    leaks.dedup();
    assert!(
        leaks.is_empty(),
        "{} leaks:\n{}",
        leaks.len(),
        leaks.join("\n")
    );
}

// ---------------------------------------------------------------------------
// 4. Refusals

/// A `--direct` call against a mock with these options, the browser
/// following whatever it is given.
fn refused(opts: OAuthOptions, env: &[(&str, &str)]) -> (OAuthServer, Machine, Run, Duration) {
    let srv = OAuthServer::start(opts);
    let m = Machine::new();
    let (r, took, visits) = m.direct_sign_in(&srv, env);
    assert_ne!(r.code, 0, "{r:?}\n{visits:?}\n{}", srv.summary());
    eprintln!("refused after {took:?}: {}", error_text(&r));
    (srv, m, r, took)
}

#[test]
fn a_protected_resource_metadata_for_another_resource_is_refused() {
    let other = "https://other.example/mcp";
    let (srv, m, r, _) = refused(
        OAuthOptions {
            prm_resource: Some(other.into()),
            ..OAuthOptions::default()
        },
        &[],
    );
    let e = error_text(&r);
    assert!(
        e.contains(other) && e.contains("resource"),
        "{e}\n{}",
        r.stderr
    );
    assert!(srv.authorize_requests().is_empty(), "{}", srv.summary());
    assert!(srv.token_requests().is_empty(), "{}", srv.summary());
    assert!(srv.registrations().is_empty(), "{}", srv.summary());
    assert!(m.browser.urls().is_empty(), "{:?}", m.browser.urls());
}

#[test]
fn a_server_without_s256_is_refused() {
    for methods in [Some(vec!["plain".to_owned()]), None] {
        let (srv, m, r, _) = refused(
            OAuthOptions {
                code_challenge_methods: methods.clone(),
                ..OAuthOptions::default()
            },
            &[],
        );
        let e = error_text(&r);
        assert!(e.contains("S256"), "{methods:?}: {e}\n{}", r.stderr);
        assert!(
            srv.authorize_requests().is_empty(),
            "{methods:?}: {}",
            srv.summary()
        );
        assert!(
            srv.token_requests().is_empty(),
            "{methods:?}: {}",
            srv.summary()
        );
        assert!(
            m.browser.urls().is_empty(),
            "{methods:?}: {:?}",
            m.browser.urls()
        );
    }
}

/// The binary: a redirect whose `state` is not ours (forged, or a stale
/// tab) is answered 400 and ignored; the listener keeps waiting for ours,
/// and no code is redeemed.
#[test]
fn a_callback_with_another_state_is_answered_400_and_ignored() {
    let srv = OAuthServer::start(OAuthOptions {
        authorize: AuthorizeMode::WrongState,
        ..OAuthOptions::default()
    });
    let m = Machine::new();
    let (r, _, visits) = m.direct_sign_in(&srv, &[("MCPHOST_OAUTH_TIMEOUT", "3")]);
    assert_ne!(r.code, 0, "{r:?}");
    let e = error_text(&r);
    assert!(
        e.contains("no sign-in redirect arrived"),
        "{e}\n{}",
        r.stderr
    );
    assert_eq!(visits.len(), 1, "{visits:?}");
    let (url, status) = visits[0].outcome.clone().unwrap();
    assert!(url.contains("-tampered"), "{url}");
    assert_eq!(status, 400, "{visits:?}");
    let auth = srv.authorize_requests();
    assert_eq!(auth.len(), 1, "{}", srv.summary());
    assert_eq!(auth[0].outcome, "redirected", "{:?}", auth[0]);
    assert!(srv.token_requests().is_empty(), "{}", srv.summary());
}

#[test]
fn a_wrong_iss_on_the_callback_is_refused() {
    let (srv, _m, r, _) = refused(
        OAuthOptions {
            iss_parameter: true,
            authorize: AuthorizeMode::WrongIss,
            ..OAuthOptions::default()
        },
        &[],
    );
    let e = error_text(&r);
    assert!(
        e.contains("iss") && e.contains(WRONG_ISS),
        "{e}\n{}",
        r.stderr
    );
    let auth = srv.authorize_requests();
    assert_eq!(auth.len(), 1, "{}", srv.summary());
    assert_eq!(auth[0].outcome, "redirected", "{:?}", auth[0]);
    assert!(srv.token_requests().is_empty(), "{}", srv.summary());
}

/// Whether something accepts connections on 127.0.0.1:port.
fn listening(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )
    .is_ok()
}

fn port_of(redirect_uri: &str) -> u16 {
    url::Url::parse(redirect_uri)
        .unwrap()
        .port()
        .unwrap_or_else(|| panic!("no port in {redirect_uri}"))
}

/// A browser for the library: records the URL, opens nothing.
struct Recorder(std::sync::Mutex<Vec<String>>);

impl mcphost::auth::browser::Browser for Recorder {
    fn open<'a>(
        &'a self,
        _server: &'a str,
        url: &'a str,
    ) -> mcphost::transport::BoxFuture<'a, Result<(), String>> {
        self.0.lock().unwrap().push(url.to_owned());
        Box::pin(async { Ok(()) })
    }
    fn describe(&self) -> String {
        "the test".into()
    }
}

#[test]
fn a_callback_that_never_comes_times_out_and_closes_the_listener() {
    // The binary: the page never redirects; two seconds, then a clear no.
    let (srv, m, r, took) = refused(
        OAuthOptions {
            authorize: AuthorizeMode::NoRedirect,
            ..OAuthOptions::default()
        },
        &[("MCPHOST_OAUTH_TIMEOUT", "2")],
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let e = error_text(&r);
    assert!(
        e.contains("no sign-in redirect arrived") && e.contains("2s"),
        "{e}\n{}",
        r.stderr
    );
    let auth = srv.authorize_requests();
    assert_eq!(
        auth.len(),
        1,
        "the browser did open the page: {}",
        srv.summary()
    );
    assert_eq!(auth[0].outcome, "no-redirect");
    assert!(srv.token_requests().is_empty(), "{}", srv.summary());
    let port = port_of(auth[0].param("redirect_uri").unwrap());
    assert_eq!(m.browser.urls().len(), 1);
    assert!(!listening(port), "port {port} still open");

    // The library, in a process that lives on: the listener is closed by
    // the time the sign-in gives up, not only when its process exits.
    let srv = OAuthServer::start(OAuthOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let browser = Recorder(std::sync::Mutex::new(Vec::new()));
    let a = mcphost::auth::Authorizer::new(
        "srv",
        &srv.mcp_url(),
        Some(TokenStore::open(dir.path().to_owned()).unwrap()),
        mcphost::auth::OAuthConfig::default(),
        None,
    )
    .unwrap()
    .with_login_timeout(Duration::from_secs(2));
    let t0 = Instant::now();
    let err = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(60), a.login(&browser))
                .await
                .expect("login returns")
        })
        .expect_err("nobody follows the page");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(
        err.to_string().contains("no sign-in redirect arrived"),
        "{err}"
    );
    let urls = browser.0.lock().unwrap().clone();
    assert_eq!(urls.len(), 1, "{urls:?}");
    let handed = url::Url::parse(&urls[0]).unwrap();
    let redirect = handed
        .query_pairs()
        .find(|(k, _)| k == "redirect_uri")
        .map(|(_, v)| v.into_owned())
        .expect("redirect_uri in the authorize URL");
    let port = port_of(&redirect);
    assert!(!listening(port), "port {port} still open after the timeout");
    drop(rt);
}

// ---------------------------------------------------------------------------
// 5. Machine clients

#[test]
fn client_credentials_with_private_key_jwt_and_with_client_secret_basic() {
    struct Case {
        id: &'static str,
        method: &'static str,
        client: serde_json::Value,
    }
    let cases = [
        Case {
            id: "svc-es256",
            method: "private_key_jwt",
            client: serde_json::json!({
                "client_id": "svc-es256",
                "grant_type": "client_credentials",
                "token_endpoint_auth_method": "private_key_jwt",
                "private_key_pem": ES256_PRIVATE_PEM,
                "signing_algorithm": "ES256",
            }),
        },
        Case {
            id: "svc-rs256",
            method: "private_key_jwt",
            client: serde_json::json!({
                "client_id": "svc-rs256",
                "grant_type": "client_credentials",
                "token_endpoint_auth_method": "private_key_jwt",
                "private_key_pem": RS256_PRIVATE_PEM,
                "signing_algorithm": "RS256",
            }),
        },
        Case {
            id: "svc-basic",
            method: "client_secret_basic",
            client: serde_json::json!({
                "client_id": "svc-basic",
                "client_secret": "s3cret-basic",
                "grant_type": "client_credentials",
                "token_endpoint_auth_method": "client_secret_basic",
            }),
        },
    ];
    for c in cases {
        let srv = OAuthServer::start(OAuthOptions::default());
        match c.id {
            "svc-es256" => srv.preregister_jwt(c.id, JwtAlg::ES256, ES256_PUBLIC_PEM),
            "svc-rs256" => srv.preregister_jwt(c.id, JwtAlg::RS256, RS256_PUBLIC_PEM),
            _ => srv.preregister(c.id, Some("s3cret-basic"), "client_secret_basic"),
        }
        let m = Machine::new();
        let mut client = c.client.clone();
        // Bound to its server, or the environment's client is not used.
        client["servers"] = serde_json::json!(["srv"]);
        let client = client.to_string();
        let (r, took, _) = spawn(
            m.direct_call(&srv, &[("MCPHOST_OAUTH_CLIENT", &client)]),
            &m.browser,
        )
        .wait(&m.browser, Follow::Never, RUN_LIMIT);
        eprintln!("{}: {took:?}", c.id);
        assert_eq!(r.code, 0, "{}: {r:?}\n{}", c.id, srv.summary());
        assert!(
            r.stdout.contains(&format!("client={}", c.id)),
            "{}: {r:?}",
            c.id
        );
        assert!(m.browser.urls().is_empty(), "{}: a browser was run", c.id);
        assert!(srv.authorize_requests().is_empty(), "{}", srv.summary());
        assert!(srv.registrations().is_empty(), "{}", srv.summary());
        let tok = srv.token_requests();
        assert_eq!(tok.len(), 1, "{}: {}", c.id, srv.summary());
        let t = &tok[0];
        assert_eq!(t.grant_type.as_deref(), Some("client_credentials"), "{t:?}");
        assert_eq!(t.auth_method, c.method, "{}: {t:?}", c.id);
        assert!(t.ok(), "{}: {t:?}", c.id);
        assert_eq!(t.client_id.as_deref(), Some(c.id), "{t:?}");
        assert_eq!(
            t.resource.as_deref(),
            Some(srv.resource().as_str()),
            "{t:?}"
        );
        if c.method == "private_key_jwt" {
            assert_eq!(t.param("client_assertion_type"), Some(JWT_BEARER), "{t:?}");
        } else {
            assert_eq!(
                t.param("client_secret"),
                None,
                "the secret goes in the header"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// 6. A hostile server (issue 21): what it must not make mcphost do

/// A host nobody resolves: a request sent there would show up as a DNS
/// error, not as the refusal the tests want.
const NOWHERE: &str = "mcphost-test.invalid";

/// The environment's client is registered at one authorization server; a
/// second server, hostile, names its own. The hostile one's authorization
/// server must never see that client, let alone its secret.
#[test]
fn the_environment_client_goes_only_to_the_issuer_or_servers_it_names() {
    let good = OAuthServer::start(OAuthOptions::default());
    good.preregister("ci-client", Some("CI-SECRET"), "client_secret_basic");
    let evil = OAuthServer::start(OAuthOptions::default());
    for (what, client) in [
        (
            "issuer",
            serde_json::json!({"client_id": "ci-client", "client_secret": "CI-SECRET",
                "grant_type": "client_credentials", "issuer": good.issuer()}),
        ),
        (
            "servers",
            serde_json::json!({"client_id": "ci-client", "client_secret": "CI-SECRET",
                "grant_type": "client_credentials", "servers": ["good"]}),
        ),
    ] {
        let m = Machine::new();
        let client = client.to_string();
        let env = [("MCPHOST_OAUTH_CLIENT", client.as_str())];
        let g = format!("good={}", good.mcp_url());
        let e = format!("evil={}", evil.mcp_url());
        let before = evil.token_requests().len();
        let cmd = m.command(
            &["--direct", &g, "--direct", &e, "call", "evil__whoami", "{}"],
            &env,
        );
        let (r, _, _) = spawn(cmd, &m.browser).wait(&m.browser, AT_ONCE, RUN_LIMIT);
        let leaked: Vec<_> = evil.token_requests()[before..]
            .iter()
            .filter(|t| {
                t.client_id.as_deref() == Some("ci-client")
                    || t.form.iter().any(|(_, v)| v.contains("CI-SECRET"))
            })
            .cloned()
            .collect();
        assert!(
            leaked.is_empty(),
            "{what}: the hostile server's authorization server got the environment's client: {leaked:#?}\nstderr:\n{}",
            r.stderr
        );
        // The hostile server is signed in to as any other: its own client.
        assert_eq!(r.code, 0, "{what}: {r:?}\n{}", evil.summary());
        // The server the client is for still gets it.
        let cmd = m.command(
            &["--direct", &g, "--direct", &e, "call", "good__whoami", "{}"],
            &env,
        );
        let (r, _, _) = spawn(cmd, &m.browser).wait(&m.browser, AT_ONCE, RUN_LIMIT);
        assert_eq!(r.code, 0, "{what}: {r:?}\n{}", good.summary());
        assert!(r.stdout.contains("client=ci-client"), "{what}: {r:?}");
    }
}

/// An environment client that names neither an issuer nor servers is not
/// given to whatever server asks.
#[test]
fn an_environment_client_naming_no_issuer_or_server_is_not_used() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let m = Machine::new();
    let client = serde_json::json!({"client_id": "ci-client", "client_secret": "CI-SECRET",
        "grant_type": "client_credentials"})
    .to_string();
    let (r, _, _) = spawn(
        m.direct_call(&srv, &[("MCPHOST_OAUTH_CLIENT", &client)]),
        &m.browser,
    )
    .wait(&m.browser, AT_ONCE, RUN_LIMIT);
    let sent: Vec<_> = srv
        .token_requests()
        .into_iter()
        .filter(|t| t.client_id.as_deref() == Some("ci-client"))
        .collect();
    assert!(sent.is_empty(), "{sent:#?}\n{}", r.stderr);
    assert!(
        r.stderr.contains("MCPHOST_OAUTH_CLIENT") && r.stderr.contains("issuer"),
        "a warning says why it is not used: {}",
        r.stderr
    );
}

/// 2025-03-26 (no protected-resource metadata): the origin's metadata must
/// name the origin as its issuer (RFC 8414 §3.3), or a hostile document
/// makes another issuer the audience of our assertions.
#[test]
fn a_legacy_server_whose_metadata_names_another_issuer_is_refused() {
    let claimed = "https://real-as.example";
    let (srv, m, r, _) = refused(
        OAuthOptions {
            serve_prm: false,
            challenge_resource_metadata: false,
            issuer_override: Some(claimed.into()),
            ..OAuthOptions::default()
        },
        &[],
    );
    let e = error_text(&r);
    assert!(
        e.contains(claimed) && e.contains(&srv.base()),
        "the error names both issuers: {e}\n{}",
        r.stderr
    );
    assert!(srv.token_requests().is_empty(), "{}", srv.summary());
    assert!(srv.authorize_requests().is_empty(), "{}", srv.summary());
    assert!(m.browser.urls().is_empty(), "{:?}", m.browser.urls());
}

/// Authorization-server endpoints, the PRM URL and the issuer must be
/// https unless on loopback: nothing of the sign-in goes over cleartext,
/// and nothing is asked of the person first.
#[test]
fn plain_http_authorization_endpoints_off_loopback_are_refused() {
    let http = |p: &str| format!("http://{NOWHERE}{p}");
    let extra = |k: &str, v: String| {
        let mut m = serde_json::Map::new();
        m.insert(k.into(), serde_json::Value::String(v));
        m
    };
    let cases: Vec<(&str, OAuthOptions)> = vec![
        (
            "resource_metadata",
            OAuthOptions {
                challenge_resource_metadata: false,
                challenge_extra: Some(format!(r#"resource_metadata="{}""#, http("/prm"))),
                ..OAuthOptions::default()
            },
        ),
        (
            "authorization_servers",
            OAuthOptions {
                prm_authorization_servers: Some(vec![http("")]),
                ..OAuthOptions::default()
            },
        ),
        (
            "token_endpoint",
            OAuthOptions {
                metadata_extra: extra("token_endpoint", http("/token")),
                ..OAuthOptions::default()
            },
        ),
        (
            "authorization_endpoint",
            OAuthOptions {
                metadata_extra: extra("authorization_endpoint", http("/authorize")),
                ..OAuthOptions::default()
            },
        ),
        (
            "registration_endpoint",
            OAuthOptions {
                metadata_extra: extra("registration_endpoint", http("/register")),
                ..OAuthOptions::default()
            },
        ),
    ];
    for (what, opts) in cases {
        let (srv, m, r, _) = refused(opts, &[]);
        let e = error_text(&r);
        assert!(
            e.contains("https") && e.contains(NOWHERE),
            "{what}: the error says https is needed: {e}\n{}",
            r.stderr
        );
        assert!(
            m.browser.urls().is_empty(),
            "{what}: {:?}",
            m.browser.urls()
        );
        assert!(srv.token_requests().is_empty(), "{what}: {}", srv.summary());
    }
}

/// An `authorization_endpoint` of another scheme never reaches the
/// browser (`MCPHOST_BROWSER`, xdg-open, the host's URL elicitation).
#[test]
fn only_https_sign_in_pages_are_opened() {
    for page in [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "mcphost-evil://open?x=1",
    ] {
        let mut extra = serde_json::Map::new();
        extra.insert("authorization_endpoint".into(), page.into());
        let (_srv, m, r, _) = refused(
            OAuthOptions {
                metadata_extra: extra,
                ..OAuthOptions::default()
            },
            &[],
        );
        assert!(
            m.browser.urls().is_empty(),
            "{page} was handed to the browser: {:?}",
            m.browser.urls()
        );
        let e = error_text(&r);
        assert!(e.contains("https"), "{page}: {e}\n{}", r.stderr);
    }
}

/// For the library-level tests: nothing can show a page.
struct NoBrowser;

impl mcphost::auth::browser::Browser for NoBrowser {
    fn open<'a>(
        &'a self,
        _server: &'a str,
        url: &'a str,
    ) -> mcphost::transport::BoxFuture<'a, Result<(), String>> {
        let url = url.to_owned();
        Box::pin(async move { Err(format!("no browser in this test (asked for {url})")) })
    }
    fn describe(&self) -> String {
        "no browser".into()
    }
}

fn machine_client(id: &str, secret: &str, issuer: Option<String>) -> mcphost::auth::OAuthConfig {
    mcphost::auth::OAuthConfig {
        client_id: Some(id.into()),
        client_secret: Some(secret.into()),
        grant_type: Some("client_credentials".into()),
        issuer,
        ..mcphost::auth::OAuthConfig::default()
    }
}

fn sent_secret(srv: &OAuthServer, id: &str, secret: &str) -> Vec<String> {
    srv.token_requests()
        .iter()
        .filter(|t| {
            t.client_id.as_deref() == Some(id) || t.form.iter().any(|(_, v)| v.contains(secret))
        })
        .map(|t| format!("{t:?}"))
        .collect()
}

/// A per-server client that names its issuer is refused, with both named,
/// at a server whose metadata leads elsewhere: the secret is not sent.
#[tokio::test]
async fn a_configured_client_is_used_only_at_its_issuer() {
    let good = OAuthServer::start(OAuthOptions::default());
    let evil = OAuthServer::start(OAuthOptions::default());
    let a = mcphost::auth::Authorizer::new(
        "evil",
        &evil.mcp_url(),
        None,
        machine_client("svc", "SVC-SECRET", Some(good.issuer())),
        None,
    )
    .unwrap();
    let err = a.login(&NoBrowser).await.unwrap_err().to_string();
    assert!(
        err.contains(&good.issuer()) && err.contains(&evil.issuer()) && err.contains("evil"),
        "{err}"
    );
    let sent = sent_secret(&evil, "svc", "SVC-SECRET");
    assert!(sent.is_empty(), "{sent:#?}");
}

/// The server moves to another authorization server (re-discovery on a
/// 401): a per-server client that named no issuer stays bound to the one
/// it was first used with, and its secret does not follow.
#[tokio::test]
async fn a_configured_secret_does_not_follow_the_server_to_a_new_authorization_server() {
    use mcphost::transport::http::{Challenged, Credentials as _};
    let srv = OAuthServer::start(OAuthOptions {
        separate_as: true,
        ..OAuthOptions::default()
    });
    srv.preregister("svc", Some("SVC-SECRET"), "client_secret_basic");
    let other = OAuthServer::start(OAuthOptions::default());
    let a = mcphost::auth::Authorizer::new(
        "srv",
        &srv.mcp_url(),
        None,
        machine_client("svc", "SVC-SECRET", None),
        None,
    )
    .unwrap()
    .into_shared();
    a.login(&NoBrowser).await.unwrap();
    let mcp_url = url::Url::parse(&srv.mcp_url()).unwrap();
    let sent = a
        .authorization(&reqwest::Method::POST, &mcp_url)
        .await
        .map(|p| p.token);
    assert!(sent.is_some());
    srv.set(|o| o.prm_authorization_servers = Some(vec![other.issuer()]));
    let err = a
        .challenged(&Challenged {
            status: 401,
            www_authenticate: vec![format!(r#"Bearer resource_metadata="{}""#, srv.prm_url())],
            sent,
            protocol_version: None,
            dpop_nonce: None,
            sent_dpop_nonce: None,
        })
        .await
        .unwrap_err();
    let leaked = sent_secret(&other, "svc", "SVC-SECRET");
    assert!(leaked.is_empty(), "{leaked:#?}\n{err}");
    assert!(
        err.contains(&srv.issuer()) && err.contains(&other.issuer()),
        "{err}"
    );
}

/// An authorization server's error text reaches the terminal: escape
/// sequences in it (OSC 52 writes the clipboard) must not.
#[tokio::test]
async fn control_characters_from_an_authorization_server_are_not_passed_on() {
    let srv = OAuthServer::start(OAuthOptions::default());
    srv.preregister("svc", Some("SVC-SECRET"), "client_secret_basic");
    srv.set(|o| {
        o.token_fail = Some(common::oauth_server::TokenFail {
            status: 400,
            error: "invalid_request\u{1b}]52;c;aGk=\u{7}\u{9b}31m\r\nFAKE".into(),
            remaining: 1,
        })
    });
    let a = mcphost::auth::Authorizer::new(
        "srv",
        &srv.mcp_url(),
        None,
        machine_client("svc", "SVC-SECRET", Some(srv.issuer())),
        None,
    )
    .unwrap();
    let err = a.login(&NoBrowser).await.unwrap_err().to_string();
    assert!(err.contains("invalid_request"), "{err:?}");
    let bad: Vec<char> = err.chars().filter(|c| c.is_control()).collect();
    assert!(bad.is_empty(), "control characters {bad:?} in {err:?}");
}

// ---------------------------------------------------------------------------
// 7. DPoP (RFC 9449) and workload identity federation (issue 21)

use common::oauth_server::{DpopNonce, JWT_BEARER_GRANT};

fn dpop_server(nonce: DpopNonce) -> OAuthServer {
    OAuthServer::start(OAuthOptions {
        dpop: true,
        dpop_nonce: nonce,
        // Nonces are kept per origin: each server its own.
        separate_as: true,
        ..OAuthOptions::default()
    })
}

/// One POST of `whoami` to the mock, with these headers; its status.
fn post_whoami(srv: &OAuthServer, authorization: &str, dpop: Option<String>) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut r = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(srv.mcp_url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", authorization)
            .body(
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "whoami", "arguments": {}}})
                .to_string(),
            );
        if let Some(p) = dpop {
            r = r.header("dpop", p);
        }
        let resp = r.send().await.unwrap();
        let st = resp.status().as_u16();
        (st, resp.text().await.unwrap_or_default())
    })
}

/// Where the authorization server offers DPoP, the token is bound to a key
/// of ours: the token request and every MCP request carry a proof the mock
/// verifies (signature, htm, htu, ath, a jti never seen before, the key the
/// token is bound to), and the key is kept in the store with the tokens, so
/// the next process proves the same key without signing in again.
#[test]
fn a_dpop_token_goes_with_a_proof_of_its_key_and_the_key_outlives_the_process() {
    let srv = dpop_server(DpopNonce::Off);
    let m = Machine::new();
    let (r, _, visits) = m.direct_sign_in(&srv, &[]);
    assert_eq!(r.code, 0, "{r:?}\n{visits:?}\n{}", srv.summary());
    assert!(r.stdout.contains("subject=alice"), "{r:?}");
    let tok = srv.token_requests();
    assert_eq!(tok.len(), 1, "{}", srv.summary());
    assert_eq!(tok[0].dpop.as_deref(), Some("ok"), "{:?}", tok[0]);
    let entry = m.store().load(&key(&srv)).unwrap().expect("an entry");
    assert_eq!(entry.tokens.as_ref().unwrap().token_type, "DPoP");
    let jkt = entry
        .dpop_key
        .as_ref()
        .expect("the DPoP key is kept with the tokens")
        .thumbprint()
        .unwrap();
    let check = |from: usize, what: &str| {
        let mcp = srv.mcp_requests();
        let authed: Vec<_> = mcp[from..].iter().filter(|q| q.had_auth()).collect();
        assert!(!authed.is_empty(), "{what}: no request carried the token");
        for q in authed {
            assert!(
                q.authorization.as_deref().unwrap().starts_with("DPoP "),
                "{what}: {q:?}"
            );
            assert_eq!(q.dpop.as_deref(), Some("ok"), "{what}: {q:?}");
            assert_eq!(q.dpop_jkt.as_deref(), Some(jkt.as_str()), "{what}: {q:?}");
            // Accepted (the mock answers a GET 405: it is stateless).
            assert!(q.status != 401 && q.status != 403, "{what}: {q:?}");
        }
    };
    check(0, "the signing-in process");
    // A new process: the stored token and the stored key, no sign-in.
    let before = srv.mcp_requests().len();
    let (r, _, _) = m.direct_sign_in(&srv, &[]);
    assert_eq!(r.code, 0, "{r:?}\n{}", srv.summary());
    assert_eq!(srv.token_requests().len(), 1, "{}", srv.summary());
    check(before, "the next process");
    assert!(!r.stderr.contains("PRIVATE KEY"), "the key is never logged");
}

/// A DPoP token copied out of the store (or a log) without its key is
/// useless: as Bearer it is refused, and a proof signed by another key does
/// not match the key the token is bound to (cnf.jkt). With the key it works,
/// which shows the refusals are about the key.
#[test]
fn a_stolen_dpop_token_without_its_key_is_refused() {
    let srv = dpop_server(DpopNonce::Off);
    let m = Machine::new();
    let (r, _, _) = m.direct_sign_in(&srv, &[]);
    assert_eq!(r.code, 0, "{r:?}\n{}", srv.summary());
    let entry = m.store().load(&key(&srv)).unwrap().expect("an entry");
    let token = entry.tokens.unwrap().access_token.into_inner();
    let url = url::Url::parse(&srv.mcp_url()).unwrap();
    let (st, body) = post_whoami(&srv, &format!("Bearer {token}"), None);
    assert_eq!(st, 401, "as Bearer: {body}");
    let thief = mcphost::auth::dpop::DpopKey::generate().unwrap();
    let proof = thief.proof("POST", &url, Some(&token), None).unwrap();
    let (st, body) = post_whoami(&srv, &format!("DPoP {token}"), Some(proof));
    assert_eq!(st, 401, "with another key's proof: {body}");
    assert!(body.contains("not the token's"), "{body}");
    let owner = entry.dpop_key.unwrap();
    let proof = owner.proof("POST", &url, Some(&token), None).unwrap();
    let (st, body) = post_whoami(&srv, &format!("DPoP {token}"), Some(proof));
    assert_eq!(st, 200, "with the key: {body}");
}

/// The token endpoint and the MCP server each want a nonce: the request is
/// sent once more with it, and the MCP server's nonce is kept for the
/// requests after (one use_dpop_nonce refusal, not one per request).
#[test]
fn a_dpop_nonce_is_sent_again_once_and_kept_for_the_next_requests() {
    let srv = dpop_server(DpopNonce::Required);
    let m = Machine::new();
    let (r, _, _) = m.direct_sign_in(&srv, &[]);
    assert_eq!(r.code, 0, "{r:?}\n{}", srv.summary());
    let tok = srv.token_requests();
    let outcomes: Vec<_> = tok.iter().map(|t| t.outcome.as_str()).collect();
    assert_eq!(outcomes, ["use_dpop_nonce", "ok"], "{}", srv.summary());
    let mcp = srv.mcp_requests();
    let authed: Vec<_> = mcp.iter().filter(|q| q.had_auth()).collect();
    let refused = authed.iter().filter(|q| q.status == 401).count();
    assert_eq!(refused, 1, "one nonce challenge: {authed:#?}");
    assert!(authed.len() >= 2, "{authed:#?}");
    assert!(
        authed.iter().skip(1).all(|q| q.status != 401),
        "{authed:#?}"
    );
}

/// A server that wants a new nonce on every request gets a bounded number
/// of them: mcphost gives up with an error instead of looping (the
/// transport sends one request again at most 3 times after a 401/403).
#[test]
fn a_server_that_always_wants_a_new_dpop_nonce_gets_a_bounded_number_of_tries() {
    let srv = dpop_server(DpopNonce::AlwaysNew);
    let m = Machine::new();
    let (r, took, _) = m.direct_sign_in(&srv, &[]);
    assert_ne!(r.code, 0, "{r:?}");
    let challenged = srv
        .mcp_requests()
        .iter()
        .filter(|q| q.status == 401 && q.had_auth())
        .count();
    eprintln!("gave up after {challenged} nonce challenges in {took:?}");
    assert!(
        (1..=3).contains(&challenged),
        "{challenged} nonce challenges: {}",
        srv.summary()
    );
}

fn workload_server() -> OAuthServer {
    let srv = OAuthServer::start(OAuthOptions {
        grant_types: vec![JWT_BEARER_GRANT.into()],
        token_auth_methods: vec!["none".into()],
        registration_endpoint: false,
        workload_tokens: vec!["WORKLOAD-JWT-1".into()],
        ..OAuthOptions::default()
    });
    srv.preregister("wl", None, "none");
    srv
}

/// `oauth` with a workload identity for `srv`, through `auth login`.
fn workload_login(m: &Machine, url: &str, issuer: &str, workload: serde_json::Value) -> Run {
    let oauth =
        serde_json::json!({"clientId": "wl", "issuer": issuer, "workloadIdentity": workload});
    let config = servers_config(&[("svc", format!(r#""url": {}, "oauth": {oauth}"#, js(url)))]);
    m.sb.write_config(&config);
    let (r, _, _) = spawn(m.command(&["auth", "login", "svc"], &[]), &m.browser).wait(
        &m.browser,
        Follow::Never,
        RUN_LIMIT,
    );
    r
}

/// The workload's token goes in a JWT bearer grant to its client's issuer
/// only: a server whose metadata names another authorization server gets
/// an error naming both, and that server never sees the token.
#[test]
fn a_workload_token_goes_only_to_the_issuer_its_client_names() {
    let good = workload_server();
    let evil = workload_server();
    let m = Machine::new();
    let file = m.sb.dir.path().join("workload.jwt");
    std::fs::write(&file, "WORKLOAD-JWT-1\n").unwrap();
    let w = serde_json::json!({"tokenFile": file.display().to_string()});

    let r = workload_login(&m, &evil.mcp_url(), &good.issuer(), w.clone());
    assert_ne!(r.code, 0, "{r:?}");
    let err = error_text(&r);
    assert!(
        err.contains(&good.issuer()) && err.contains(&evil.issuer()),
        "{err}"
    );
    let leaked: Vec<_> = evil
        .token_requests()
        .into_iter()
        .filter(|t| t.form.iter().any(|(_, v)| v.contains("WORKLOAD-JWT")))
        .collect();
    assert!(leaked.is_empty(), "{leaked:#?}");
    assert!(evil.token_requests().is_empty(), "{}", evil.summary());

    let r = workload_login(&m, &good.mcp_url(), &good.issuer(), w);
    assert_eq!(r.code, 0, "{r:?}\n{}", good.summary());
    let tok = good.token_requests();
    assert_eq!(tok.len(), 1, "{}", good.summary());
    assert_eq!(tok[0].grant_type.as_deref(), Some(JWT_BEARER_GRANT));
    assert_eq!(tok[0].param("assertion"), Some("WORKLOAD-JWT-1"));
    assert_eq!(tok[0].client_id.as_deref(), Some("wl"));
    assert!(tok[0].ok(), "{:?}", tok[0]);
    let (r, _, _) = m.direct_sign_in(&good, &[]);
    assert!(r.stdout.contains("subject=workload:wl"), "{r:?}");
}

/// A token file that is not there, or a command that fails: an error that
/// names the server and the file or command, and no token request.
#[test]
fn a_missing_workload_token_file_or_a_failing_command_is_a_clear_error() {
    let srv = workload_server();
    let m = Machine::new();
    let missing = m.sb.dir.path().join("no-such-token.jwt");
    let cases = [
        (
            serde_json::json!({"tokenFile": missing.display().to_string()}),
            missing.display().to_string(),
        ),
        (
            serde_json::json!({"tokenCommand": ["sh", "-c", "echo token service down >&2; exit 3"]}),
            "token service down".to_owned(),
        ),
        (
            serde_json::json!({"tokenCommand": ["true"]}),
            "the command \"true\"".to_owned(),
        ),
    ];
    for (w, names) in cases {
        let r = workload_login(&m, &srv.mcp_url(), &srv.issuer(), w.clone());
        assert_ne!(r.code, 0, "{w}: {r:?}");
        let err = error_text(&r);
        assert!(
            err.contains("'svc'")
                && err.contains(&names)
                && err.contains("workload identity token"),
            "{w}: {err}"
        );
    }
    assert!(srv.token_requests().is_empty(), "{}", srv.summary());
}

// ---------------------------------------------------------------------------
// 6. The rest of issue 21 (its Low items)

/// A browser for the library that opens the page (following the redirect
/// back to the loopback listener) and keeps what the person saw.
#[derive(Default)]
struct Visitor {
    /// The final status and page of each visit.
    seen: std::sync::Mutex<Vec<(u16, String)>>,
}

async fn visit_keeping_the_page(url: &str) -> Result<(u16, String), String> {
    let c = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::limited(5))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let r = c.get(url).send().await.map_err(|e| format!("{e:?}"))?;
    let st = r.status().as_u16();
    Ok((st, r.text().await.unwrap_or_default()))
}

impl mcphost::auth::browser::Browser for Visitor {
    fn open<'a>(
        &'a self,
        _server: &'a str,
        url: &'a str,
    ) -> mcphost::transport::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let page = visit_keeping_the_page(url).await?;
            self.seen.lock().unwrap().push(page);
            Ok(())
        })
    }
    fn describe(&self) -> String {
        "the visiting test browser".into()
    }
}

/// Another local user's tricks on the loopback listener, then the person's
/// real visit: a connection that sends a byte a second and never finishes
/// its request, and a forged callback with a junk `state`.
#[derive(Default)]
struct HostileNeighbour {
    forged: std::sync::Mutex<Option<Result<u16, String>>>,
    real: std::sync::Mutex<Option<Result<(u16, String), String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

use std::sync::Arc;

impl mcphost::auth::browser::Browser for HostileNeighbour {
    fn open<'a>(
        &'a self,
        _server: &'a str,
        url: &'a str,
    ) -> mcphost::transport::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let handed = url::Url::parse(url).unwrap();
            let redirect = handed
                .query_pairs()
                .find(|(k, _)| k == "redirect_uri")
                .map(|(_, v)| v.into_owned())
                .unwrap();
            let port = port_of(&redirect);
            // The slow loris, on a thread of its own until the test ends.
            let stop = self.stop.clone();
            let (connected_tx, connected_rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                use std::io::Write as _;
                let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                    let _ = connected_tx.send(());
                    return;
                };
                let _ = connected_tx.send(());
                for b in b"GET /callback?code=slow&state=slow HTTP/1.1\r\nHost: x\r\n"
                    .iter()
                    .cycle()
                {
                    if stop.load(std::sync::atomic::Ordering::Relaxed)
                        || s.write_all(&[*b]).is_err()
                    {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
            let _ = connected_rx.recv();
            let forged = reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap()
                .get(format!("{redirect}?code=forged-code&state=junk"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .map_err(|e| format!("{e:?}"));
            *self.forged.lock().unwrap() = Some(forged);
            let real = visit_keeping_the_page(url).await;
            *self.real.lock().unwrap() = Some(real);
            Ok(())
        })
    }
    fn describe(&self) -> String {
        "a browser with a hostile neighbour".into()
    }
}

/// The callback listener serves connections side by side, each with a
/// deadline for its whole request, and a callback whose `state` is not
/// ours is answered 400 and ignored: the real redirect still signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_connection_and_a_forged_callback_do_not_hold_off_the_real_redirect() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let a = mcphost::auth::Authorizer::new(
        "srv",
        &srv.mcp_url(),
        Some(TokenStore::open(dir.path().to_owned()).unwrap()),
        mcphost::auth::OAuthConfig::default(),
        None,
    )
    .unwrap()
    .with_login_timeout(Duration::from_secs(20));
    let browser = HostileNeighbour::default();
    let t0 = Instant::now();
    let r = a.login(&browser).await;
    let took = t0.elapsed();
    browser
        .stop
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let forged = browser.forged.lock().unwrap().clone();
    let real = browser.real.lock().unwrap().clone();
    assert!(
        r.is_ok(),
        "{r:?} after {took:?}; forged: {forged:?}; real: {real:?}"
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert_eq!(forged, Some(Ok(400)), "the forged callback");
    let (status, page) = real.unwrap().unwrap();
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("Signed in"), "{page}");
    // The forged code was never redeemed: one code exchange, ours.
    let codes: Vec<_> = srv
        .token_requests()
        .into_iter()
        .filter(|t| t.code.is_some())
        .collect();
    assert_eq!(codes.len(), 1, "{codes:#?}");
    assert_ne!(codes[0].code.as_deref(), Some("forged-code"), "{codes:#?}");
}

/// "Signed in" is shown only once the code was redeemed: a code exchange
/// the authorization server refuses shows the person that it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_is_told_signed_in_only_once_the_code_was_redeemed() {
    let srv = OAuthServer::start(OAuthOptions::default());
    srv.set(|o| {
        o.token_fail = Some(common::oauth_server::TokenFail {
            status: 400,
            error: "invalid_grant".into(),
            remaining: 1,
        })
    });
    let a = mcphost::auth::Authorizer::new(
        "srv",
        &srv.mcp_url(),
        None,
        mcphost::auth::OAuthConfig::default(),
        None,
    )
    .unwrap()
    .with_login_timeout(Duration::from_secs(20));
    let browser = Visitor::default();
    let err = a.login(&browser).await.unwrap_err().to_string();
    assert!(err.contains("invalid_grant"), "{err}");
    let seen = browser.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (status, page) = &seen[0];
    assert!(!page.contains("Signed in"), "{status} {page}");
    assert!(page.contains("Sign-in failed"), "{status} {page}");
}

/// RFC 9728 §3.3: the PRM's `resource` is the server's URL exactly (or,
/// for the root well-known document, the origin it names): a parent path,
/// another query or no `resource` at all is refused before anything is
/// sent to the authorization server.
#[tokio::test]
async fn a_protected_resource_metadata_for_a_parent_path_another_query_or_none_is_refused() {
    for what in ["a parent path", "another query", "no resource"] {
        let srv = OAuthServer::start(OAuthOptions::default());
        let base = srv.base();
        let resource = match what {
            "a parent path" => Some(format!("{base}/")),
            "another query" => Some(format!("{base}/mcp?tenant=2")),
            _ => None,
        };
        srv.set(|o| {
            o.prm_resource = resource.clone();
            o.prm_resource_omitted = resource.is_none();
        });
        let a = mcphost::auth::Authorizer::new(
            "hostile",
            &srv.mcp_url(),
            None,
            mcphost::auth::OAuthConfig::default(),
            None,
        )
        .unwrap();
        let err = a.login(&NoBrowser).await.unwrap_err().to_string();
        let declared = resource.unwrap_or_else(|| "no resource".into());
        assert!(
            err.contains("hostile") && err.contains(&srv.mcp_url()) && err.contains(&declared),
            "{what}: {err}"
        );
        assert!(srv.registrations().is_empty(), "{what}: {}", srv.summary());
        assert!(
            srv.authorize_requests().is_empty(),
            "{what}: {}",
            srv.summary()
        );
    }
}

/// A refresh the authorization server refuses late (`invalid_grant`) must
/// not wipe the token another process saved meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_invalid_grant_does_not_wipe_a_sign_in_another_process_just_completed() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let store = TokenStore::open(dir.path().to_owned()).unwrap();
    let minted = srv.issue_tokens_for_test("mcphost-seeded", None);
    let now = now_secs();
    let entry = |access: &str, refresh: &str, expires_at: u64| {
        stored_entry(&srv, &minted.client_id, access, refresh, expires_at)
    };
    store
        .save(&key(&srv), &entry("old-access", &minted.refresh_token, now))
        .unwrap();
    srv.set(|o| {
        o.token_delay = Duration::from_secs(2);
        o.token_fail = Some(common::oauth_server::TokenFail {
            status: 400,
            error: "invalid_grant".into(),
            remaining: 1,
        });
    });
    let a = mcphost::auth::Authorizer::new(
        "srv",
        &srv.mcp_url(),
        Some(TokenStore::open(dir.path().to_owned()).unwrap()),
        mcphost::auth::OAuthConfig::default(),
        None,
    )
    .unwrap()
    .into_shared();
    // Discovery first, so that the expiring token is refreshed by bearer().
    let _ = a.logout().await;
    store
        .save(&key(&srv), &entry("old-access", &minted.refresh_token, now))
        .unwrap();
    let refreshing = {
        let a = a.clone();
        let url = srv.mcp_url();
        tokio::spawn(async move { bearer(&a, &url).await })
    };
    srv.wait_until("the refresh request", Duration::from_secs(30), |s| {
        !s.token_requests().is_empty()
    });
    // Another process signs in meanwhile.
    let other = entry("new-access", "new-refresh", now + 3600);
    store.save(&key(&srv), &other).unwrap();
    let _ = refreshing.await.unwrap();
    let kept = store.load(&key(&srv)).unwrap().and_then(|e| e.tokens);
    assert_eq!(
        kept.as_ref().map(|t| t.access_token.expose()),
        Some("new-access"),
        "{kept:?}"
    );
}

/// The access token the next request to the server `url` would carry.
async fn bearer(a: &mcphost::auth::Authorizer, url: &str) -> Option<String> {
    use mcphost::transport::http::Credentials as _;
    let url = url::Url::parse(url).unwrap();
    a.authorization(&reqwest::Method::POST, &url)
        .await
        .map(|p| p.token)
}

/// A token that lives less than the refresh margin is refreshed once per
/// token, not before every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_shorter_lived_than_the_refresh_margin_is_refreshed_once_per_token() {
    let srv = OAuthServer::start(OAuthOptions {
        access_ttl: Duration::from_secs(10),
        ..OAuthOptions::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let a = mcphost::auth::Authorizer::new(
        "srv",
        &srv.mcp_url(),
        Some(TokenStore::open(dir.path().to_owned()).unwrap()),
        mcphost::auth::OAuthConfig::default(),
        None,
    )
    .unwrap()
    .into_shared();
    a.login(&Visitor::default()).await.unwrap();
    let first = bearer(&a, &srv.mcp_url()).await;
    for _ in 0..5 {
        assert_eq!(bearer(&a, &srv.mcp_url()).await, first);
    }
    assert_eq!(srv.refreshes(), 0, "{}", srv.summary());
    // Within its second half it is refreshed, once.
    let t0 = Instant::now();
    while srv.refreshes() == 0 && t0.elapsed() < Duration::from_secs(15) {
        bearer(&a, &srv.mcp_url()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(srv.refreshes(), 1, "{}", srv.summary());
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_secs(1) {
        bearer(&a, &srv.mcp_url()).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(srv.refreshes(), 1, "{}", srv.summary());
    assert_ne!(bearer(&a, &srv.mcp_url()).await, first);
}

/// `MCPHOST_BROWSER` can take the sign-in URL (its `state` and PKCE
/// challenge) from a private file instead of its argv, which every local
/// user can read in /proc/PID/cmdline.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_browser_command_can_take_the_sign_in_url_from_a_private_file_not_its_argv() {
    use mcphost::auth::browser::{Browser as _, CommandBrowser};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("seen");
    let o = out.display();
    let cmd = format!(
        "tr '\\0' ' ' < /proc/$$/cmdline > '{o}.argv'; \
         stat -c %a \"$MCPHOST_SIGN_IN_URL_FILE\" > '{o}.mode'; \
         cat \"$MCPHOST_SIGN_IN_URL_FILE\" > '{o}.tmp' && mv '{o}.tmp' '{o}'"
    );
    let url = "https://as.example/authorize?state=SECRET-STATE&code_challenge=CHALLENGE";
    CommandBrowser(cmd).open("srv", url).await.unwrap();
    let t0 = Instant::now();
    while !out.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the command never read the URL from the file; argv: {:?}",
            std::fs::read_to_string(dir.path().join("seen.argv"))
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), url);
    let argv = std::fs::read_to_string(dir.path().join("seen.argv")).unwrap();
    assert!(!argv.contains("SECRET-STATE"), "{argv}");
    let mode = std::fs::read_to_string(dir.path().join("seen.mode")).unwrap();
    assert_eq!(mode.trim(), "600");
}

/// `auth status` (and `--json`) and `doctor` say where the secrets are;
/// with `auto` and no OS keyring, the fallback to plain files is named,
/// and a sign-in warns about it once.
#[test]
fn auth_status_and_doctor_say_which_backend_holds_the_secrets() {
    let srv = OAuthServer::start(OAuthOptions::default());
    let m = Machine::new();
    // No keyring here (no session bus in the sandbox): `auto` falls back.
    let auto = [
        ("MCPHOST_TOKEN_STORE", "auto"),
        ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent"),
    ];
    let (r, _, visits) =
        spawn(m.direct_call(&srv, &auto), &m.browser).wait(&m.browser, AT_ONCE, RUN_LIMIT);
    assert_eq!(r.code, 0, "{r:?}\n{visits:?}");
    let warned = r
        .stderr
        .matches("secrets are stored in plain files")
        .count();
    assert_eq!(warned, 1, "{}", r.stderr);

    let run = |args: &[&str], env: &[(&str, &str)]| {
        let out = m.command(args, env).output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (json, err) = run(&["auth", "status", "--json"], &auto);
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}\n{err}"));
    assert_eq!(v["backend"]["name"], "file", "{v:#}");
    assert!(v["backend"]["fallback"].is_string(), "{v:#}");
    let (text, _) = run(&["auth", "status"], &auto);
    assert!(
        text.contains("plain files") && text.contains("auto"),
        "{text}"
    );
    let (text, _) = run(&["auth", "status"], &[("MCPHOST_TOKEN_STORE", "file")]);
    assert!(
        text.contains("plain files") && text.contains("=file asks"),
        "{text}"
    );
    let (json, err) = run(&["doctor", "--json"], &auto);
    let v: serde_json::Value =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}\n{err}"));
    assert!(
        v["tokenStore"]
            .as_str()
            .is_some_and(|t| t.contains("plain files")),
        "{v:#}"
    );
}

/// Discovery and registration are never sent to a link-local or cloud
/// metadata address a server names (its credentials are one request
/// away there): the error says so at once, before any request.
#[tokio::test]
async fn an_authorization_server_or_endpoint_on_a_metadata_address_is_refused() {
    for (what, set) in [
        (
            "https://169.254.169.254/latest",
            Box::new(|o: &mut OAuthOptions| {
                o.prm_authorization_servers = Some(vec!["https://169.254.169.254/latest".into()])
            }) as Box<dyn Fn(&mut OAuthOptions)>,
        ),
        (
            "https://[fd00:ec2::254]/register",
            Box::new(|o: &mut OAuthOptions| {
                o.metadata_extra.insert(
                    "registration_endpoint".into(),
                    serde_json::json!("https://[fd00:ec2::254]/register"),
                );
            }),
        ),
    ] {
        let srv = OAuthServer::start(OAuthOptions::default());
        srv.set(|o| set(o));
        let a = mcphost::auth::Authorizer::new(
            "srv",
            &srv.mcp_url(),
            None,
            mcphost::auth::OAuthConfig::default(),
            None,
        )
        .unwrap();
        let t0 = Instant::now();
        let err = a.login(&NoBrowser).await.unwrap_err().to_string();
        assert!(
            err.contains(what) && err.contains("metadata address"),
            "{what}: {err}"
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(srv.registrations().is_empty(), "{}", srv.summary());
    }
}
