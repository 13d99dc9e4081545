//! `sandbox` on stdio servers, through the real daemon and CLI: the test
//! server's `sandbox_probe` refused (SSH key, a shadow-like file, a write
//! outside, a TCP connect, the same read by a child process) under
//! `workspace` and allowed without it; what `servers --json`, `servers`,
//! `doctor` and `logs` say; bad configs; and the real servers
//! (`server-filesystem`, `mcp-server-fetch`).

use crate::common;

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::oauth_server::{OAuthOptions, OAuthServer};
use common::{Daemon, Sandbox, TESTSERVER, interop, js, servers_config};
use serde_json::Value;

/// Files a confined server must not reach, and a workspace it may.
struct Layout {
    work: PathBuf,
    ssh_key: PathBuf,
    shadow: PathBuf,
    outside: PathBuf,
}

fn layout(sb: &Sandbox) -> Layout {
    let work = sb.dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("inside.txt"), "inside").unwrap();
    let ssh = sb.home.join(".ssh");
    std::fs::create_dir(&ssh).unwrap();
    let ssh_key = ssh.join("id_ed25519");
    std::fs::write(&ssh_key, "PRIVATE KEY").unwrap();
    let etc = sb.dir.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    let shadow = etc.join("shadow");
    std::fs::write(&shadow, "root:$6$hash").unwrap();
    let outside = sb.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    Layout {
        work,
        ssh_key,
        shadow,
        outside,
    }
}

fn probe_entry(sandbox: Option<&str>) -> String {
    let mut e = format!(
        r#""command": {}, "args": ["--sandbox-probe"]"#,
        js(TESTSERVER)
    );
    if let Some(s) = sandbox {
        e.push_str(&format!(r#", "sandbox": {s}"#));
    }
    e
}

/// A config with `roots` set to the workspace.
fn with_roots(servers: &[(&str, String)], work: &Path) -> String {
    servers_config(servers).replacen(
        "\"loginShellPath\": false,",
        &format!(
            "\"loginShellPath\": false,\n  \"roots\": [{}],",
            js(&work.display().to_string())
        ),
        1,
    )
}

fn call(d: &Daemon, tool: &str, args: &Value) -> Value {
    let r = d.run(&["--json", "call", tool, &args.to_string()]);
    assert_eq!(r.code, 0, "call {tool} failed: {r:?}");
    r.json()
}

/// `{op target: ok-or-error}` of one probe call.
fn outcomes(result: &Value) -> Vec<(String, String, Option<String>)> {
    result["structuredContent"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no probe results: {result}"))
        .iter()
        .map(|r| {
            (
                r["op"].as_str().unwrap().to_owned(),
                r["target"].as_str().unwrap().to_owned(),
                r["error"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn probe_args(l: &Layout, port: u16, socket: &Path) -> Value {
    let p = |p: &Path| p.display().to_string();
    serde_json::json!({
        "read": [p(&l.ssh_key), p(&l.shadow), p(&l.work.join("inside.txt"))],
        "write": [p(&l.outside.join("dropped.txt")), p(&l.work.join("made.txt"))],
        "connect": [format!("127.0.0.1:{port}")],
        "udp": [format!("127.0.0.1:{port}")],
        // mcphost's own socket: through it a server could call the tools
        // of every other, unconfined server.
        "unix": [p(socket)],
        "childRead": [p(&l.shadow), p(&l.work.join("inside.txt"))],
    })
}

#[test]
fn a_workspace_sandboxed_server_is_refused_keys_secrets_outside_writes_and_tcp_and_so_is_its_child()
{
    let sb = Sandbox::new();
    let l = layout(&sb);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let config = with_roots(
        &[
            ("open", probe_entry(None)),
            ("boxed", probe_entry(Some("\"workspace\""))),
        ],
        &l.work,
    );
    let d = Daemon::start_in(sb, &config);
    d.wait_ready(&["open", "boxed"], Duration::from_secs(30));
    let args = probe_args(&l, port, &d.socket);

    let open = outcomes(&call(&d, "open__sandbox_probe", &args));
    let refused: Vec<_> = open.iter().filter(|o| o.2.is_some()).collect();
    assert!(
        refused.is_empty(),
        "without a sandbox all succeed: {open:?}"
    );

    let boxed = outcomes(&call(&d, "boxed__sandbox_probe", &args));
    let error_of = |op: &str, target: &Path| {
        boxed
            .iter()
            .find(|o| o.0 == op && o.1 == target.display().to_string())
            .unwrap_or_else(|| panic!("no {op} {target:?} in {boxed:?}"))
            .2
            .clone()
    };
    for (op, target) in [
        ("read", l.ssh_key.clone()),
        ("read", l.shadow.clone()),
        ("write", l.outside.join("dropped.txt")),
        ("childRead", l.shadow.clone()),
    ] {
        let e = error_of(op, &target).unwrap_or_else(|| panic!("{op} {target:?} was allowed"));
        assert!(e.contains("Permission denied"), "{op} {target:?}: {e}");
    }
    // TCP (Landlock and seccomp), UDP and Unix sockets (seccomp: Landlock
    // has no rule for them) are all refused under network none.
    for op in ["connect", "udp", "unix"] {
        let o = boxed.iter().find(|o| o.0 == op).unwrap();
        assert!(
            o.2.as_deref()
                .is_some_and(|e| e.contains("Permission denied")),
            "{op} under network none: {o:?}"
        );
    }
    // Inside the workspace root: read and write, by the server and its child.
    assert_eq!(error_of("read", &l.work.join("inside.txt")), None);
    assert_eq!(error_of("write", &l.work.join("made.txt")), None);
    assert_eq!(error_of("childRead", &l.work.join("inside.txt")), None);
    drop(listener);
}

#[test]
fn servers_json_doctor_and_logs_say_what_the_sandbox_enforces_and_what_it_refused() {
    let sb = Sandbox::new();
    let l = layout(&sb);
    let config = with_roots(
        &[
            ("boxed", probe_entry(Some("\"workspace\""))),
            (
                "lo",
                probe_entry(Some(r#"{"preset": "workspace", "network": "loopback"}"#)),
            ),
        ],
        &l.work,
    );
    let d = Daemon::start_in(sb, &config);
    let servers = d.wait_ready(&["boxed", "lo"], Duration::from_secs(30));
    let sb = &servers["boxed"]["sandbox"];
    assert_eq!(sb["requested"], "workspace", "{sb}");
    assert_eq!(sb["network"], "none", "{sb}");
    assert_eq!(sb["enforced"]["filesystem"], "fully", "{sb}");
    assert_eq!(sb["enforced"]["network"], "fully", "{sb}");
    assert!(sb["abi"].as_u64() >= Some(4), "{sb}");
    assert_eq!(
        sb["skipped"],
        Value::Null,
        "a preset's paths all exist: {sb}"
    );
    let lo = &servers["lo"]["sandbox"];
    assert_eq!(lo["enforced"]["network"], "not", "{lo}");
    assert!(
        lo["notEnforced"]
            .to_string()
            .contains("cannot filter by address"),
        "{lo}"
    );

    let human = d.run(&["servers"]);
    assert!(human.stdout.contains("sandbox:workspace"), "{human:?}");
    assert!(
        human.stdout.contains("sandbox:workspace (partial)"),
        "loopback is marked partial: {human:?}"
    );

    let shadow = l.shadow.display().to_string();
    call(
        &d,
        "boxed__sandbox_probe",
        &serde_json::json!({"read": [shadow]}),
    );
    let logs = d.run(&["servers", "logs", "boxed"]);
    assert!(
        logs.stdout
            .contains(&format!("sandbox_probe: read {shadow}: Permission denied")),
        "the server's own denial line stays visible: {logs:?}"
    );
    let doctor = d.run(&["--json", "doctor", "boxed"]).json();
    let text = doctor.to_string();
    assert!(text.contains("\"sandbox\""), "{doctor:#}");
    assert!(
        text.contains("permission denied") && text.contains("`sandbox`"),
        "doctor points at the sandbox config: {doctor:#}"
    );
}

#[test]
fn a_bad_sandbox_is_an_error_naming_server_and_field_and_the_other_servers_keep_working() {
    let http = r#""url": "http://127.0.0.1:9/mcp", "sandbox": "workspace""#.to_owned();
    let config = servers_config(&[
        ("good", probe_entry(None)),
        (
            "bad",
            probe_entry(Some(r#"{"read": ["/usr"], "network": "udp"}"#)),
        ),
        ("typo", probe_entry(Some("\"worksapce\""))),
        ("remote", http),
    ]);
    let d = Daemon::start(&config);
    d.wait_ready(&["good"], Duration::from_secs(30));
    let error = |name: &str| {
        let s = d.server(name).unwrap_or_else(|| panic!("no {name}"));
        assert_eq!(s["state"], "failed", "{s}");
        s["error"].as_str().unwrap().to_owned()
    };
    let bad = error("bad");
    assert!(
        bad.contains("mcpServers.bad.sandbox.network") && bad.contains("none, loopback, any"),
        "{bad}"
    );
    let typo = error("typo");
    assert!(
        typo.contains("mcpServers.typo.sandbox") && typo.contains("unknown preset \"worksapce\""),
        "{typo}"
    );
    let remote = error("remote");
    assert!(
        remote.contains("mcpServers.remote.sandbox")
            && remote.contains("only applies to stdio servers"),
        "{remote}"
    );
    let r = d.run(&["--json", "call", "good__echo", r#"{"text":"still"}"#]);
    assert_eq!(r.code, 0, "{r:?}");
}

// ---- the real servers ----

#[test]
#[ignore = "interop: needs @modelcontextprotocol/server-filesystem (scripts/setup-interop.sh)"]
fn server_filesystem_under_workspace_reads_its_root_and_the_kernel_refuses_an_allowed_dir_outside()
{
    let env = interop();
    let sb = Sandbox::new();
    let l = layout(&sb);
    std::fs::write(l.outside.join("secret.txt"), "outside").unwrap();
    let entry = env.node_entry("server-filesystem").replace(
        ']',
        &format!(
            ",{},{}], \"sandbox\": \"workspace\", \"offer\": {{\"roots\": false}}",
            js(&l.work.display().to_string()),
            js(&l.outside.display().to_string())
        ),
    );
    let config = with_roots(&[("fs", entry)], &l.work);
    let d = Daemon::start_in(sb, &config);
    d.wait_ready(&["fs"], Duration::from_secs(60));
    let work = l.work.display().to_string();
    let listed = call(&d, "fs__list_directory", &serde_json::json!({"path": work}));
    assert!(listed.to_string().contains("inside.txt"), "{listed}");
    let read = call(
        &d,
        "fs__read_text_file",
        &serde_json::json!({"path": l.work.join("inside.txt")}),
    );
    assert!(read.to_string().contains("inside"), "{read}");
    assert_ne!(read["isError"], true, "{read}");
    // The server itself allows `outside` (one of its dirs; not offered
    // roots, it keeps its arguments): the refusal is the kernel's.
    let secret = l.outside.join("secret.txt");
    let r = d.run(&[
        "--json",
        "call",
        "fs__read_text_file",
        &serde_json::json!({"path": secret}).to_string(),
    ]);
    let text = format!("{} {}", r.stdout, r.stderr);
    assert!(!text.contains("\"outside\""), "read outside: {text}");
    assert!(
        text.contains("EACCES") || text.contains("permission denied"),
        "{text}"
    );
}

/// Serves one page on 127.0.0.1 to every request; counts them.
fn page_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "<html><body><p>sandbox page marker</p></body></html>";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, hits)
}

#[test]
#[ignore = "interop: needs mcp-server-fetch in the venv (scripts/setup-interop.sh)"]
fn mcp_server_fetch_fails_clearly_with_network_none_and_fetches_with_any() {
    let env = interop();
    let (port, hits) = page_server();
    let entry = |sandbox: &str| {
        format!(
            r#""command": {}, "args": ["-m", "mcp_server_fetch", "--ignore-robots-txt", "--allow-private-ips"], "sandbox": {sandbox}"#,
            js(&env.python.display().to_string())
        )
    };
    let config = servers_config(&[
        ("none", entry("\"workspace\"")),
        ("any", entry(r#"{"preset": "workspace", "network": "any"}"#)),
    ]);
    let d = Daemon::start(&config);
    d.wait_ready(&["none", "any"], Duration::from_secs(60));
    let url = format!("http://127.0.0.1:{port}/page");
    let args = serde_json::json!({"url": url, "raw": true}).to_string();

    let r = d.run(&["--json", "call", "none__fetch", &args]);
    let text = format!("{} {}", r.stdout, r.stderr);
    assert!(!text.contains("sandbox page marker"), "{text}");
    // The server reports the refused socket as a failed connection (it
    // keeps the errno to itself); nothing reached the page server.
    assert!(
        text.contains("Failed to fetch") && text.contains("\"isError\":true"),
        "{text}"
    );
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);

    let r = d.run(&["--json", "call", "any__fetch", &args]);
    assert!(r.stdout.contains("sandbox page marker"), "{r:?}");
}

#[test]
fn a_server_its_sandbox_keeps_from_starting_fails_with_a_doctor_hint_naming_the_sandbox_config() {
    // Nothing readable: not even the server's own binary.
    let config = servers_config(&[
        (
            "tight",
            probe_entry(Some(r#"{"read": ["/definitely/not/here"]}"#)),
        ),
        ("good", probe_entry(None)),
    ]);
    let d = Daemon::start(&config);
    d.wait_ready(&["good"], Duration::from_secs(30));
    let doctor = d.run(&["--json", "doctor", "tight"]).json();
    let checks = doctor["servers"][0]["checks"].as_array().unwrap().clone();
    let start = checks.iter().find(|c| c["name"] == "start").unwrap();
    assert_eq!(start["ok"], false, "{doctor:#}");
    let hint = checks
        .iter()
        .find(|c| c["name"] == "sandbox" && c["ok"] == false)
        .unwrap_or_else(|| panic!("no sandbox hint: {doctor:#}"));
    assert!(
        hint["detail"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{hint}"
    );
    assert!(
        hint["fix"].as_str().unwrap().contains("\"sandbox\""),
        "{hint}"
    );
    let skipped = d.server("tight").unwrap()["sandbox"]["skipped"].clone();
    assert_eq!(
        skipped,
        serde_json::json!(["/definitely/not/here does not exist"]),
        "a missing path is skipped and said, not an error"
    );
}

// ---- defaults.sandbox and require ----

/// A config with `defaults` set to `defaults` (JSON text) and the roots.
fn with_defaults(servers: &[(&str, String)], work: &Path, defaults: &str) -> String {
    with_roots(servers, work).replacen(
        "\"loginShellPath\": false,",
        &format!("\"loginShellPath\": false,\n  \"defaults\": {defaults},"),
        1,
    )
}

#[test]
fn defaults_sandbox_confines_a_server_without_its_own_while_false_opts_out_and_http_still_works() {
    let sb = Sandbox::new();
    let l = layout(&sb);
    let oauth = OAuthServer::start(OAuthOptions::default());
    let token = oauth
        .issue_tokens_for_test("defaults-test", None)
        .access_token;
    let web = format!(
        r#""url": {}, "headers": {{"Authorization": {}}}"#,
        js(&oauth.mcp_url()),
        js(&format!("Bearer {token}"))
    );
    let config = with_defaults(
        &[
            ("plain", probe_entry(None)),
            ("open", probe_entry(Some("false"))),
            ("web", web),
        ],
        &l.work,
        r#"{"sandbox": "workspace"}"#,
    );
    let d = Daemon::start_in(sb, &config);
    let servers = d.wait_ready(&["plain", "open", "web"], Duration::from_secs(30));
    assert_eq!(servers["plain"]["sandbox"]["requested"], "workspace");
    assert_eq!(servers["open"]["sandbox"], Value::Null);
    assert_eq!(servers["web"]["sandbox"], Value::Null);

    let shadow = l.shadow.display().to_string();
    let args = serde_json::json!({"read": [shadow]});
    let plain = outcomes(&call(&d, "plain__sandbox_probe", &args));
    assert!(
        plain[0]
            .2
            .as_deref()
            .is_some_and(|e| e.contains("Permission denied")),
        "the default confines it: {plain:?}"
    );
    let open = outcomes(&call(&d, "open__sandbox_probe", &args));
    assert_eq!(open[0].2, None, "\"sandbox\": false wins: {open:?}");
    let r = d.run(&["--json", "call", "web__whoami", "{}"]);
    assert_eq!(r.code, 0, "the HTTP server ignores the default: {r:?}");
}

#[test]
fn require_keeps_a_server_whose_sandbox_the_kernel_cannot_enforce_from_starting_and_without_it_it_starts()
 {
    let sb = Sandbox::new();
    let l = layout(&sb);
    let config = with_roots(
        &[
            (
                "strict",
                probe_entry(Some(
                    r#"{"preset": "workspace", "network": "loopback", "require": true}"#,
                )),
            ),
            (
                "lax",
                probe_entry(Some(r#"{"preset": "workspace", "network": "loopback"}"#)),
            ),
            ("good", probe_entry(None)),
        ],
        &l.work,
    );
    let d = Daemon::start_in(sb, &config);
    let servers = d.wait_ready(&["lax", "good"], Duration::from_secs(30));
    // Linux: Landlock cannot filter by address, so loopback is never enforced.
    assert!(
        servers["lax"]["sandbox"]["notEnforced"]
            .to_string()
            .contains("cannot filter by address"),
        "without require it starts best effort: {}",
        servers["lax"]
    );
    let strict = d.server("strict").expect("strict is listed");
    assert_eq!(strict["state"], "failed", "{strict}");
    let error = strict["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("'strict'")
            && error.contains("mcpServers.strict.sandbox.require")
            && error.contains("network loopback: Landlock cannot filter by address"),
        "{strict}"
    );
    let doctor = d.run(&["--json", "doctor", "strict"]).json();
    let checks = doctor["servers"][0]["checks"].as_array().unwrap().clone();
    let start = checks.iter().find(|c| c["name"] == "start").unwrap();
    assert_eq!(start["ok"], false, "{doctor:#}");
    assert!(
        start["detail"].to_string().contains("sandbox.require"),
        "{start}"
    );
    assert!(
        start["fix"]
            .to_string()
            .contains("is not started because its `sandbox`"),
        "not a crash to run by hand: {start}"
    );
    let hint = checks
        .iter()
        .find(|c| c["name"] == "sandbox" && c["ok"] == false)
        .unwrap_or_else(|| panic!("no sandbox check: {doctor:#}"));
    assert!(
        hint["fix"].to_string().contains("\\\"require\\\""),
        "the hint names require: {hint}"
    );
    let r = d.run(&["--json", "call", "good__echo", r#"{"text":"still"}"#]);
    assert_eq!(r.code, 0, "{r:?}");
}
