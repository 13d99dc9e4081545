//! `mcphost doctor`: a good server, a missing command (and where else it
//! is), a crash at start, a refused HTTP URL, a 401 and what it asks for,
//! a hung server within the bound, config errors per server, and the
//! `--json` shape field by field.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::oauth_server::{OAuthOptions, OAuthServer};
use common::{Daemon, Run, Sandbox, TESTSERVER, interop, js, servers_config, ts_entry};
use serde_json::Value;

fn doctor(sb: &Sandbox, args: &[&str]) -> (Run, Value) {
    let mut a = vec!["--json", "doctor"];
    a.extend_from_slice(args);
    let r = sb.run(&a);
    let v = r.json();
    (r, v)
}

fn server<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["servers"]
        .as_array()
        .unwrap_or_else(|| panic!("no servers list: {report}"))
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name} in {report}"))
}

fn check<'a>(srv: &'a Value, name: &str) -> &'a Value {
    srv["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {srv}"))
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

#[test]
fn a_good_server_is_ok_with_its_revision_and_counts() {
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[("ts", ts_entry(&["--tools", "3"]))]));
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["ok"], true, "{v}");
    let ts = server(&v, "ts");
    assert_eq!(ts["ok"], true, "{ts}");
    assert_eq!(ts["transport"], "stdio");
    let answer = &ts["server"];
    assert_eq!(answer["protocolVersion"], "2025-11-25", "{ts}");
    assert_eq!(answer["era"], "handshake");
    assert_eq!(answer["name"], "mcphost-testserver");
    // The same count `inspect` lists.
    let listed = sb.json(&["inspect", "--", TESTSERVER, "--tools", "3"]);
    let tools = listed["tools"].as_array().unwrap().len();
    assert!(tools >= 3, "{listed}");
    assert_eq!(answer["tools"], tools, "{ts}");
    assert_eq!(
        answer["resources"],
        listed["resources"].as_array().unwrap().len()
    );
    assert!(answer["initializeMs"].as_u64().is_some(), "{ts}");
    let cmd = check(ts, "command");
    assert!(text(&cmd["detail"]).contains(TESTSERVER), "{cmd}");
    assert!(text(&check(ts, "start")["detail"]).contains("MCP 2025-11-25"));

    // The human screen says the same.
    let human = sb.run(&["doctor"]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stdout.contains("✓ ts"), "{}", human.stdout);
    assert!(
        human.stdout.contains(&format!("{tools} tools")),
        "{}",
        human.stdout
    );
    assert!(!human.stdout.contains('\x1b'), "no colour off a terminal");
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn real_servers_report_their_runtime_revision_and_tools() {
    let env = interop();
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[
        ("everything", env.node_entry("server-everything")),
        ("time", env.time_entry()),
    ]));
    let (r, v) = doctor(&sb, &["--timeout", "60s"]);
    assert_eq!(r.code, 0, "{r:?}");
    let every = server(&v, "everything");
    assert_eq!(every["ok"], true, "{every}");
    assert!(every["server"]["tools"].as_u64().unwrap() > 5, "{every}");
    assert!(
        text(&every["server"]["protocolVersion"]).starts_with("20"),
        "{every}"
    );
    assert!(
        text(&check(every, "runtime")["detail"]).starts_with("Node.js v"),
        "{every}"
    );
    let time = server(&v, "time");
    assert_eq!(time["ok"], true, "{time}");
    assert_eq!(time["server"]["tools"], 2, "{time}");
    assert!(
        text(&check(time, "runtime")["detail"]).starts_with("Python 3."),
        "{time}"
    );
}

/// An executable shell script in `dir`.
fn script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn a_missing_command_is_named_with_its_fix() {
    let mut sb = Sandbox::new();
    // Nothing but a directory of our own on PATH, and a login shell that
    // answers with another PATH: where `only-here` is decides the fix.
    let bin = sb.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    script(&bin, "only-here", "exit 0");
    let login_bin = sb.dir.path().join("login-bin");
    std::fs::create_dir(&login_bin).unwrap();
    script(&login_bin, "only-login", "exit 0");
    let shell = script(
        sb.dir.path(),
        "fake-shell",
        &format!(
            "PATH={}:/usr/bin:/bin; export PATH; eval \"$2\"",
            login_bin.display()
        ),
    );
    sb.env
        .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
    sb.env.push(("SHELL".into(), shell.display().to_string()));
    let config = format!(
        r#"{{ "mcpServers": {{
            "nothing": {{ "command": "no-such-mcp-command-xyz" }},
            "uvx": {{ "command": "uvx", "args": ["mcp-server-fetch"], "env": {{ "PATH": {} }} }},
            "shellonly": {{ "command": "only-here" }}
        }} }}"#,
        js(&bin.display().to_string())
    );
    sb.write_config(&config);
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(v["ok"], false);
    assert_eq!(v["paths"]["loginShellFrom"], "login shell", "{v}");
    assert!(
        text(&v["paths"]["loginShell"]).starts_with(&login_bin.display().to_string()),
        "{v}"
    );

    let nothing = server(&v, "nothing");
    assert_eq!(nothing["ok"], false);
    let c = check(nothing, "command");
    assert_eq!(c["ok"], false);
    assert!(
        text(&c["detail"])
            .contains("'no-such-mcp-command-xyz' not found in the login shell's PATH"),
        "{c}"
    );
    assert!(
        text(&c["fix"]).starts_with("install no-such-mcp-command-xyz, or give its absolute path"),
        "{c}"
    );
    assert_eq!(check(nothing, "start")["ok"], false);
    assert_eq!(nothing["server"], Value::Null);

    // A runtime's launcher: the fix installs the runtime.
    let uvx = server(&v, "uvx");
    assert_eq!(uvx["pathFrom"], "server env", "{uvx}");
    let c = check(uvx, "command");
    assert!(
        text(&c["fix"]).contains("install uv: curl -LsSf https://astral.sh/uv/install.sh | sh"),
        "{c}"
    );

    // In this shell's PATH, not the login shell's (what a daemon gets).
    let c = check(server(&v, "shellonly"), "command");
    assert_eq!(c["ok"], false, "{c}");
    let fix = text(&c["fix"]);
    assert!(
        fix.contains(&format!("only-here is in {}", bin.display()))
            && fix.contains("your login shell's does not"),
        "{c}"
    );

    // loginShellPath off: found only through the login shell.
    sb.write_config(
        r#"{ "loginShellPath": false, "mcpServers": { "x": { "command": "only-login" } } }"#,
    );
    let (_, v) = doctor(&sb, &[]);
    let x = server(&v, "x");
    assert_eq!(x["pathFrom"], "daemon", "{x}");
    let c = check(x, "command");
    assert!(
        text(&c["fix"]).contains("\"loginShellPath\" is false")
            && text(&c["fix"]).contains(&login_bin.display().to_string()),
        "{c}"
    );

    // The human screen carries the fix too.
    sb.write_config(r#"{ "mcpServers": { "nothing": { "command": "no-such-mcp-command-xyz" } } }"#);
    let human = sb.run(&["doctor"]);
    assert_eq!(human.code, 1, "{human:?}");
    assert!(human.stdout.contains("✗ nothing"), "{}", human.stdout);
    assert!(
        human
            .stdout
            .contains("fix: install no-such-mcp-command-xyz"),
        "{}",
        human.stdout
    );
}

#[test]
fn a_server_that_crashes_at_start_shows_its_stderr_and_exit_status() {
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[
        (
            "boom",
            r#""command": "sh", "args": ["-c", "echo boom-on-stderr >&2; exit 3"]"#.to_owned(),
        ),
        ("fatal", ts_entry(&["--crash-after", "1"])),
    ]));
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    for (name, line) in [
        ("boom", "boom-on-stderr"),
        ("fatal", "fatal: simulated crash"),
    ] {
        let s = server(&v, name);
        let c = check(s, "start");
        assert_eq!(c["ok"], false, "{c}");
        let d = text(&c["detail"]);
        assert!(d.contains("exited with status 3"), "{c}");
        assert!(d.contains(line), "{c}");
        assert!(text(&c["fix"]).contains("exited while starting"), "{c}");
        assert_eq!(s["timedOut"], false);
    }
}

#[test]
fn an_http_url_that_refuses_names_the_connect_failure() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[(
        "web",
        format!(r#""url": "http://127.0.0.1:{port}/mcp""#),
    )]));
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let web = server(&v, "web");
    assert_eq!(web["transport"], "http");
    assert_eq!(check(web, "dns")["ok"], true, "{web}");
    let c = check(web, "connect");
    assert_eq!(c["ok"], false, "{c}");
    assert!(text(&c["detail"]).contains("refused"), "{c}");
    assert!(
        text(&c["fix"]).contains(&format!("nothing accepts connections at 127.0.0.1:{port}")),
        "{c}"
    );
}

#[test]
fn a_401_says_what_it_asks_for_and_how_to_sign_in() {
    let oauth = OAuthServer::start(OAuthOptions {
        challenge_scope: Some("mcp:tools".into()),
        ..OAuthOptions::default()
    });
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[(
        "secure",
        format!(r#""url": {}"#, js(&oauth.mcp_url())),
    )]));
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let s = server(&v, "secure");
    assert_eq!(check(s, "connect")["ok"], true, "{s}");
    let auth = check(s, "auth");
    let d = text(&auth["detail"]);
    assert!(d.starts_with("HTTP 401 without a token"), "{auth}");
    assert!(
        d.contains(&format!("resource_metadata={}", oauth.prm_url())),
        "{auth}"
    );
    assert!(d.contains("scope=mcp:tools"), "{auth}");
    let token = check(s, "token");
    assert_eq!(token["ok"], false, "{token}");
    assert_eq!(token["fix"], "run `mcphost auth login secure`", "{token}");
    assert_eq!(check(s, "start")["ok"], false);
}

#[test]
fn a_hung_server_is_named_as_timed_out_within_the_bound() {
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[
        ("stuck", ts_entry(&["--hang-after", "1"])),
        ("sleepy", r#""command": "sleep", "args": ["60"]"#.to_owned()),
    ]));
    let t0 = Instant::now();
    let (r, v) = doctor(&sb, &["--timeout", "2s", "--jobs", "2"]);
    let took = t0.elapsed();
    assert_eq!(r.code, 1, "{r:?}");
    // Both at once, 2 s each; stopping them takes a couple of seconds more.
    // (A good server beside them is in the next test: 2 s is too short a
    // start on a loaded machine.)
    assert!(took < Duration::from_secs(15), "took {took:?}");
    for name in ["stuck", "sleepy"] {
        let s = server(&v, name);
        assert_eq!(s["timedOut"], true, "{s}");
        let c = check(s, "timeout");
        assert_eq!(c["ok"], false);
        assert!(
            text(&c["detail"]).starts_with("timed out after 2s while waiting for initialize"),
            "{c}"
        );
        assert!(text(&c["fix"]).contains("--timeout"), "{c}");
    }
    let human = sb.run(&["doctor", "--timeout", "2s", "sleepy"]);
    assert!(
        human.stdout.contains("✗ sleepy  stdio  timed out"),
        "{human:?}"
    );
}

#[test]
fn config_errors_are_named_per_server_and_the_rest_is_still_checked() {
    let sb = Sandbox::new();
    let cwd = sb.dir.path().join("no-such-dir");
    sb.write_config(&format!(
        r#"{{
  "loginShellPath": false,
  "mcpServers": {{
    "ok": {{ {ts} }},
    "needs-var": {{ {ts}, "env": {{ "TOKEN": "${{DOCTOR_UNSET_VAR}}" }} }},
    "bad-cwd": {{ {ts}, "cwd": {cwd} }},
    "off": {{ "command": "no-such-thing", "disabled": true }},
    "twice": {{ {ts} }},
    "later": {{ {ts1}, "colour": "blue" }}
  }}
}}"#,
        ts = ts_entry(&[]),
        ts1 = ts_entry(&["--tools", "1"]),
        cwd = js(&cwd.display().to_string())
    ));
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(server(&v, "ok")["ok"], true, "{v}");

    let nv = server(&v, "needs-var");
    let c = check(nv, "env");
    assert_eq!(c["ok"], false);
    let d = text(&c["detail"]);
    assert!(d.contains(&sb.config.display().to_string()), "{c}");
    assert!(d.contains("mcpServers.needs-var.env.TOKEN"), "{c}");
    assert!(d.contains("DOCTOR_UNSET_VAR"), "{c}");
    assert!(
        text(&c["fix"]).starts_with("set DOCTOR_UNSET_VAR in the environment"),
        "{c}"
    );

    let c = check(server(&v, "bad-cwd"), "cwd");
    assert_eq!(c["ok"], false);
    assert!(text(&c["detail"]).contains("does not exist"), "{c}");
    assert!(text(&c["fix"]).contains(&cwd.display().to_string()), "{c}");

    let off = server(&v, "off");
    assert_eq!(off["disabled"], true);
    assert_eq!(off["ok"], true, "a disabled server is no problem: {off}");
    assert_eq!(check(off, "disabled")["ok"], true);

    let c = check(server(&v, "twice"), "duplicate");
    assert_eq!(c["ok"], false);
    assert!(text(&c["detail"]).contains("'ok'"), "{c}");
    assert!(
        server(&v, "ok")["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "duplicate"),
        "only the later entry is flagged"
    );

    // A warning found after the broken entries were taken out still
    // names the file's own line.
    let line = sb
        .read_config()
        .lines()
        .position(|l| l.contains("\"colour\""))
        .unwrap()
        + 1;
    let later = server(&v, "later");
    assert_eq!(later["ok"], true, "a warning is no problem: {later}");
    let w = later["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "config" && text(&c["detail"]).contains("colour"))
        .unwrap_or_else(|| panic!("no warning about colour: {later}"));
    assert!(
        text(&w["detail"]).contains(&format!("{}:{line}:", sb.config.display())),
        "line {line}: {w}"
    );

    // Named, a disabled server is checked anyway.
    let (_, v) = doctor(&sb, &["off"]);
    assert_eq!(v["servers"].as_array().unwrap().len(), 1);
    assert_eq!(check(server(&v, "off"), "command")["ok"], false, "{v}");

    // A name the config does not have is a usage error.
    let r = sb.run(&["doctor", "nope"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("no server named 'nope'"), "{r:?}");
}

#[test]
fn a_config_that_is_not_there_is_the_problem() {
    let sb = Sandbox::new();
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let c = &v["configChecks"][0];
    assert_eq!(c["name"], "config");
    assert_eq!(c["ok"], false);
    assert!(text(&c["fix"]).contains("mcphost servers add"), "{c}");
    assert_eq!(v["servers"], serde_json::json!([]));
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

#[test]
fn the_json_document_has_the_documented_shape() {
    let d = Daemon::start(&servers_config(&[("ts", ts_entry(&[]))]));
    d.write_config(&servers_config(&[
        ("ts", ts_entry(&[])),
        ("gone", r#""command": "no-such-mcp-command-xyz""#.to_owned()),
    ]));
    let (r, v) = doctor(&d, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        keys(&v),
        BTreeSet::from([
            "ok",
            "config",
            "configChecks",
            "paths",
            "tokenStore",
            "servers"
        ])
    );
    assert_eq!(v["ok"], false);
    assert_eq!(v["config"], d.config.display().to_string());
    assert_eq!(
        keys(&v["paths"]),
        BTreeSet::from([
            "process",
            "loginShell",
            "loginShellFrom",
            "daemonPid",
            "daemon"
        ])
    );
    assert!(v["paths"]["process"].is_string());
    // The running daemon, and (Linux) its own PATH.
    assert_eq!(v["paths"]["daemonPid"], d.pid(), "{v}");
    #[cfg(target_os = "linux")]
    assert!(v["paths"]["daemon"].is_string(), "{v}");

    let servers = v["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    for s in servers {
        assert_eq!(
            keys(s),
            BTreeSet::from([
                "name",
                "transport",
                "target",
                "disabled",
                "ok",
                "timedOut",
                "elapsedMs",
                "path",
                "pathFrom",
                "server",
                "checks"
            ]),
            "{s}"
        );
        assert!(s["name"].is_string() && s["target"].is_string());
        assert!(s["disabled"].is_boolean() && s["ok"].is_boolean() && s["timedOut"].is_boolean());
        assert!(s["elapsedMs"].is_u64());
        assert!(s["path"].is_string(), "{s}");
        for c in s["checks"].as_array().unwrap() {
            assert_eq!(
                keys(c),
                BTreeSet::from(["name", "ok", "detail", "fix"]),
                "{c}"
            );
            assert!(c["name"].is_string() && c["detail"].is_string());
            // A fix exactly on a problem.
            match c["ok"].as_bool().unwrap() {
                true => assert!(c["fix"].is_null(), "{c}"),
                false => assert!(c["fix"].is_string(), "{c}"),
            }
        }
        // ok is exactly "every check ok".
        let all = s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["ok"] == true);
        assert_eq!(s["ok"], all, "{s}");
    }
    let ts = server(&v, "ts");
    assert_eq!(
        keys(&ts["server"]),
        BTreeSet::from([
            "initializeMs",
            "protocolVersion",
            "era",
            "name",
            "version",
            "tools",
            "prompts",
            "resources"
        ])
    );
    assert_eq!(server(&v, "gone")["server"], Value::Null);
}

#[test]
fn a_config_syntax_error_names_the_line() {
    let sb = Sandbox::new();
    sb.write_config("{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"x\" \n  }\n");
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let c = &v["configChecks"][0];
    assert_eq!(c["ok"], false, "{v}");
    let d = text(&c["detail"]);
    assert!(
        d.starts_with(&format!("{}:", sb.config.display())) && d.contains("not valid JSON"),
        "{c}"
    );
    assert!(
        text(&c["fix"]).starts_with(&format!("edit {} line ", sb.config.display())),
        "{c}"
    );
}

#[test]
fn https_to_a_plain_http_port_is_a_tls_failure() {
    let web = common::http_fault::FaultServer::start();
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[(
        "tls",
        format!(r#""url": "https://{}/mcp""#, web.addr),
    )]));
    let (r, v) = doctor(&sb, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    let s = server(&v, "tls");
    assert_eq!(check(s, "connect")["ok"], true, "{s}");
    let c = check(s, "tls");
    assert_eq!(c["ok"], false, "{s}");
    assert!(text(&c["fix"]).contains("TLS handshake failed"), "{c}");
}

#[test]
fn servers_past_the_overall_limit_are_named_unchecked() {
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[
        ("one", r#""command": "sleep", "args": ["60"]"#.to_owned()),
        ("two", r#""command": "sleep", "args": ["61"]"#.to_owned()),
        ("three", r#""command": "sleep", "args": ["62"]"#.to_owned()),
    ]));
    let t0 = Instant::now();
    let (r, v) = doctor(
        &sb,
        &["--jobs", "1", "--timeout", "2s", "--total-timeout", "3s"],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert!(
        text(&check(server(&v, "one"), "timeout")["detail"]).starts_with("timed out after 2s"),
        "{v}"
    );
    // One at a time: by the time the last is due, the 3 s are spent.
    let last = check(server(&v, "three"), "timeout");
    assert_eq!(
        last["detail"], "not checked: the overall limit ran out",
        "{v}"
    );
    assert!(
        text(&last["fix"]).contains("mcphost doctor three"),
        "{last}"
    );
}

#[test]
fn the_runtime_is_found_from_the_shebang_and_its_version_checked() {
    let mut sb = Sandbox::new();
    let bin = sb.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    // An old Node.js, a server that needs it, and one that needs a Python
    // this PATH does not have.
    script(&bin, "node", "echo v16.20.2");
    let js_server = bin.join("js-server");
    std::fs::write(&js_server, "#!/usr/bin/env node\nconsole.log(1)\n").unwrap();
    std::fs::set_permissions(&js_server, std::fs::Permissions::from_mode(0o755)).unwrap();
    let py_server = bin.join("py-server");
    std::fs::write(&py_server, "#!/usr/bin/env python3\nprint()\n").unwrap();
    std::fs::set_permissions(&py_server, std::fs::Permissions::from_mode(0o755)).unwrap();
    sb.env.push(("PATH".into(), bin.display().to_string()));
    // A login shell with no more than that.
    let shell = script(
        sb.dir.path(),
        "fake-shell",
        &format!("PATH={}; export PATH; eval \"$2\"", bin.display()),
    );
    sb.env.push(("SHELL".into(), shell.display().to_string()));
    sb.write_config(
        r#"{ "loginShellPath": false, "mcpServers": {
            "js": { "command": "js-server" },
            "py": { "command": "py-server" },
            "npx": { "command": "npx", "args": ["-y", "x"] }
        } }"#,
    );
    let (r, v) = doctor(&sb, &["--timeout", "5s"]);
    assert_eq!(r.code, 1, "{r:?}");
    let c = check(server(&v, "js"), "runtime");
    assert_eq!(c["ok"], false, "{c}");
    assert!(
        text(&c["detail"]).contains("Node.js v16.20.2")
            && text(&c["detail"]).contains("too old")
            && text(&c["detail"]).contains("its #! line runs node"),
        "{c}"
    );
    assert!(text(&c["fix"]).contains("install Node.js ≥ 18"), "{c}");
    let c = check(server(&v, "py"), "runtime");
    assert_eq!(c["ok"], false, "{c}");
    assert!(text(&c["detail"]).starts_with("Python is missing"), "{c}");
    assert!(text(&c["fix"]).contains("install Python ≥ 3.10"), "{c}");
    // npx is missing: installing Node.js is the fix.
    let c = check(server(&v, "npx"), "command");
    assert!(text(&c["fix"]).starts_with("install Node.js ≥ 18"), "{c}");
}

#[test]
fn docker_installed_with_its_engine_down_is_a_problem() {
    let mut sb = Sandbox::new();
    let bin = sb.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    // A docker client whose engine is not running, as the real one says it.
    script(
        &bin,
        "docker",
        r#"if [ "$1" = "--version" ]; then echo "Docker version 27.1.1, build 6312585"; exit 0; fi
echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
exit 1"#,
    );
    sb.env
        .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
    sb.write_config(&servers_config(&[(
        "gh",
        r#""command": "docker", "args": ["run", "-i", "--rm", "ghcr.io/github/github-mcp-server"]"#
            .to_owned(),
    )]));
    let (r, v) = doctor(&sb, &["--timeout", "5s"]);
    assert_eq!(r.code, 1, "{r:?}");
    let c = check(server(&v, "gh"), "runtime");
    assert_eq!(c["ok"], false, "{c}");
    let d = text(&c["detail"]);
    assert!(
        d.starts_with("Docker 27.1.1, build 6312585 is installed but its engine does not answer"),
        "{c}"
    );
    assert!(d.contains("Cannot connect to the Docker daemon"), "{c}");
    assert!(text(&c["fix"]).starts_with("start Docker"), "{c}");
}

/// `mcphost doctor` on a pseudo-terminal: its output, as a person sees it.
fn on_terminal(sb: &Sandbox, env: &[(&str, &str)]) -> String {
    use expectrl::{Eof, Expect, Session};
    let mut cmd = std::process::Command::new(common::MCPHOST);
    cmd.arg("doctor")
        .env("HOME", &sb.home)
        .env("MCPHOST_SOCKET", &sb.socket)
        .env("MCPHOST_CONFIG", &sb.config)
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut p = Session::spawn(cmd).unwrap();
    p.set_expect_timeout(Some(Duration::from_secs(60)));
    let out = p.expect(Eof).unwrap();
    let mut all = out.before().to_vec();
    for m in out.matches() {
        all.extend_from_slice(m);
    }
    String::from_utf8_lossy(&all).into_owned()
}

#[test]
fn on_a_terminal_marks_and_fixes_are_coloured_unless_no_color() {
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[
        ("ts", ts_entry(&[])),
        ("gone", r#""command": "no-such-mcp-command-xyz""#.to_owned()),
    ]));
    let screen = on_terminal(&sb, &[]);
    assert!(
        screen.contains("\x1b[32m✓\x1b[0m \x1b[1mts\x1b[0m"),
        "{screen:?}"
    );
    assert!(
        screen.contains("\x1b[1;31m✗\x1b[0m \x1b[1mgone\x1b[0m"),
        "{screen:?}"
    );
    assert!(
        screen.contains("\x1b[33mfix:\x1b[0m install no-such-mcp-command-xyz"),
        "{screen:?}"
    );
    let plain = on_terminal(&sb, &[("NO_COLOR", "1")]);
    assert!(!plain.contains('\x1b'), "{plain:?}");
    assert!(plain.contains("✗ gone"), "{plain:?}");
}

#[test]
fn a_hung_server_beside_a_good_one_leaves_it_ok() {
    let sb = Sandbox::new();
    sb.write_config(&servers_config(&[
        ("sleepy", r#""command": "sleep", "args": ["60"]"#.to_owned()),
        ("ts", ts_entry(&[])),
    ]));
    let (r, v) = doctor(&sb, &["--timeout", "8s", "--jobs", "2"]);
    assert_eq!(r.code, 1, "{r:?}");
    let ts = server(&v, "ts");
    assert_eq!(ts["ok"], true, "{ts}");
    // Its own check ended well within the limit the hung one ran into.
    assert!(ts["elapsedMs"].as_u64().unwrap() < 8000, "{ts}");
    assert_eq!(server(&v, "sleepy")["timedOut"], true, "{v}");
}

#[test]
fn a_command_the_running_daemon_cannot_find_is_named_with_its_path() {
    let mut sb = Sandbox::new();
    let bin = sb.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    script(&bin, "only-here", "exit 0");
    // The daemon runs with a bare PATH; doctor from a shell that has `bin`.
    sb.env.push(("PATH".into(), "/usr/bin:/bin".into()));
    let config =
        r#"{ "loginShellPath": false, "mcpServers": { "x": { "command": "only-here" } } }"#;
    let mut d = Daemon::start_in(sb, config);
    d.sb.env.retain(|(k, _)| k != "PATH");
    d.sb.env
        .push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
    let (r, v) = doctor(&d, &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(v["paths"]["daemonPid"], d.pid(), "{v}");
    #[cfg(target_os = "linux")]
    {
        assert_eq!(v["paths"]["daemon"], "/usr/bin:/bin", "{v}");
        let x = server(&v, "x");
        assert_eq!(x["pathFrom"], "daemon", "{x}");
        assert_eq!(x["path"], "/usr/bin:/bin", "{x}");
        let c = check(x, "command");
        assert!(
            text(&c["detail"]).contains("'only-here' not found in the daemon's own PATH"),
            "{c}"
        );
        assert!(
            text(&c["fix"]).contains(&format!(
                "only-here is in {}, which this shell's PATH has but the daemon's own does not",
                bin.display()
            )),
            "{c}"
        );
    }
}
