//! The `mcphost daemon` binary as people run it: real servers behind it, the
//! CLI and the official Python SDK in front of it, crashes, signals, hot
//! reload, config edits and the raw socket protocol.
//!
//! Every test gets its own HOME, socket and config file (`common::Sandbox`);
//! `common::Daemon` SIGTERMs and reaps its daemon on drop. Tests with npm and
//! PyPI servers are ignored unless asked for (as tests/it/interop.rs).

use crate::common;
use crate::common::wire::Wire;

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    Daemon, Interop, MCPHOST, Sandbox, TESTSERVER, alive, interop, js, lenient_json, output_within,
    poll, servers_config, text_of, ts_entry,
};
use serde_json::{Value, json};

/// Cold starts of node and Python servers on a busy 2-core machine.
const READY: Duration = Duration::from_secs(30);
/// Anything the daemon does on its own (reloads, restarts, notifications).
const SOON: Duration = Duration::from_secs(15);

/// The node binary and its bare name, found in our PATH unless MCPHOST_NODE
/// names it with a path.
fn node_binary(env: &Interop) -> (std::path::PathBuf, String) {
    let path = which::which(&env.node).unwrap_or_else(|e| panic!("{}: {e}", env.node));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    (path, name)
}

/// The test server plus two real servers: mcp-server-time (PyPI) and
/// server-memory (npm). server-memory's command is node's bare name, found
/// in the `PATH` its entry sets.
fn real_config(env: &Interop, sb: &Sandbox) -> String {
    let memory_file = sb.dir.path().join("memory.jsonl");
    let (node, name) = node_binary(env);
    let entry = env.node_entry("server-memory");
    let args = &entry[entry.find(r#""args""#).unwrap()..];
    servers_config(&[
        ("ts", ts_entry(&["--tools", "2"])),
        ("time", env.time_entry()),
        (
            "memory",
            format!(
                r#""command": {}, {args}, "env": {{ "MEMORY_FILE_PATH": {}, "PATH": {} }}"#,
                js(&name),
                js(&memory_file.display().to_string()),
                js(&node.parent().unwrap().display().to_string())
            ),
        ),
    ])
}

fn pid_of(s: &Value) -> u32 {
    s["pid"].as_u64().unwrap_or_else(|| panic!("no pid in {s}")) as u32
}

/// The process group of a live process (a server's: its own pid).
fn group_of(pid: u32) -> u32 {
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    nix::unistd::getpgid(Some(pid)).unwrap().as_raw() as u32
}

/// The environment a process was started with.
fn environ(pid: u32) -> HashMap<String, String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    raw.split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

fn pids(d: &Daemon) -> HashMap<String, Option<u64>> {
    d.servers()
        .into_iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s["pid"].as_u64()))
        .collect()
}

fn call_json(d: &Daemon, tool: &str, args: &str) -> Value {
    d.json(&["call", tool, args])
}

// ---------------------------------------------------------------------------
// Real servers

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn real_servers_listed_called_and_reached_by_the_python_sdk() {
    let env = interop();
    let sb = Sandbox::new();
    let cfg = real_config(&env, &sb);
    let d = Daemon::start_in(sb, &cfg);
    let servers = d.wait_ready(&["ts", "time", "memory"], READY);

    let tools = d.json(&["tools"]);
    let tools = tools.as_array().unwrap();
    for (name, s) in &servers {
        assert_eq!(s["transport"], "stdio", "{s}");
        let version = s["protocolVersion"].as_str().unwrap_or_default();
        // The TypeScript servers speak the handshake; mcp-server-time
        // (Python `mcp` 2.x) the stateless revision, probed for.
        let want = if name == "time" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(version, want, "{s}");
        assert!(alive(pid_of(s)), "{s}: pid is not a live process");
        let command = s["command"].as_str().unwrap();
        assert!(
            Path::new(command).is_absolute() && Path::new(command).is_file(),
            "{s}: command is not a resolved path"
        );
        // The count matches what `tools` lists for the server.
        let listed = tools.iter().filter(|t| t["server"] == **name).count();
        assert!(listed > 0, "{name} has no tools: {tools:?}");
        assert_eq!(s["tools"].as_u64(), Some(listed as u64), "{s}");
    }
    assert_eq!(servers["ts"]["command"], TESTSERVER);
    // The bare node name was looked up in the PATH the entry sets.
    let (node, _) = node_binary(&env);
    assert_eq!(
        servers["memory"]["command"],
        node.display().to_string(),
        "{}",
        servers["memory"]
    );

    // Namespaced names carry their server and original name.
    let mut names = BTreeSet::new();
    for t in tools {
        let (server, tool) = (t["server"].as_str().unwrap(), t["tool"].as_str().unwrap());
        assert_eq!(t["name"], format!("{server}__{tool}"), "{t}");
        assert!(servers.contains_key(server), "{t}");
        assert!(
            names.insert(t["name"].as_str().unwrap().to_owned()),
            "dup {t}"
        );
    }
    for n in ["ts__echo", "time__get_current_time", "memory__read_graph"] {
        assert!(names.contains(n), "{n} missing from {names:?}");
    }
    let only_time = d.json(&["tools", "--server", "time"]);
    let only_time: BTreeSet<&str> = only_time
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        only_time,
        BTreeSet::from(["time__get_current_time", "time__convert_time"])
    );

    // A namespaced call to the PyPI server.
    let r = call_json(&d, "time__get_current_time", r#"{"timezone":"Asia/Tokyo"}"#);
    assert_eq!(r["isError"], json!(false), "{r}");
    let now: Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert_eq!(now["timezone"], "Asia/Tokyo", "{r}");
    // Original names, unique across servers, on the npm server: a write
    // then a read of the same state.
    let r = call_json(
        &d,
        "create_entities",
        r#"{"entities":[{"name":"mcphost-daemon-test","entityType":"test","observations":["seen through the daemon"]}]}"#,
    );
    assert_ne!(r["isError"], json!(true), "{r}");
    let r = d.run(&["call", "read_graph"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("seen through the daemon"), "{r:?}");
    let r = call_json(&d, "echo", r#"{"text":"by its own name"}"#);
    assert_eq!(text_of(&r), "by its own name");

    // The official Python SDK, through `mcphost bridge`.
    let mut py = std::process::Command::new(&env.python);
    py.arg(env.dir.join("bridge_client.py"))
        .args([MCPHOST, d.socket.to_str().unwrap(), "ts__echo"])
        .arg(r#"{"text":"from the python sdk"}"#)
        .env("HOME", &d.home)
        .stdin(std::process::Stdio::null());
    let out = output_within(py, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["serverName"], "mcphost", "{got}");
    assert_eq!(got["isError"], json!(false), "{got}");
    assert_eq!(got["text"], json!(["from the python sdk"]), "{got}");
    let sdk_names: BTreeSet<String> = got["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sdk_names, names, "the SDK sees the same catalog");
}

/// One /proc entry: parent, process group, start time (to survive pid reuse)
/// and whether it is a zombie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proc {
    pid: u32,
    ppid: u32,
    pgrp: u32,
    start: u64,
    zombie: bool,
}

fn procs() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        // After the name: state ppid pgrp session tty tpgid flags minflt
        // cminflt majflt cmajflt utime stime cutime cstime priority nice
        // threads itrealvalue starttime ...
        let f: Vec<&str> = rest.split_whitespace().collect();
        out.push(Proc {
            pid,
            ppid: f[1].parse().unwrap(),
            pgrp: f[2].parse().unwrap(),
            start: f[19].parse().unwrap(),
            zombie: f[0] == "Z",
        });
    }
    out
}

/// Every live process descended from `root` or in one of `groups`.
fn family(root: u32, groups: &BTreeSet<u32>) -> Vec<Proc> {
    let all = procs();
    let by_pid: HashMap<u32, Proc> = all.iter().map(|p| (p.pid, *p)).collect();
    let descends = |p: &Proc| {
        let mut cur = p.ppid;
        for _ in 0..64 {
            if cur == root {
                return true;
            }
            match by_pid.get(&cur) {
                Some(q) if q.ppid != cur => cur = q.ppid,
                _ => return false,
            }
        }
        false
    };
    all.iter()
        .filter(|p| !p.zombie && p.pid != root && (groups.contains(&p.pgrp) || descends(p)))
        .copied()
        .collect()
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn killed_server_is_restarted_and_sigterm_leaves_no_process() {
    let env = interop();
    let sb = Sandbox::new();
    let cfg = real_config(&env, &sb);
    let mut d = Daemon::start_in(sb, &cfg);
    let before = d.wait_ready(&["ts", "time", "memory"], READY);

    // kill -9 the memory server's whole process group.
    let victim = pid_of(&before["memory"]);
    // SAFETY: kill(2) on a process group the daemon made for its server.
    assert_eq!(
        unsafe { libc::kill(-(group_of(victim) as libc::pid_t), libc::SIGKILL) },
        0
    );
    let after = poll("memory to be restarted", READY, || {
        let s = d.server("memory")?;
        (s["state"] == "ready" && s["pid"].as_u64() != Some(victim as u64) && s["tools"] != 0)
            .then_some(s)
    });
    assert!(after["restarts"].as_u64() >= Some(1), "{after}");
    assert!(alive(pid_of(&after)));
    poll("the killed group to be reaped", SOON, || {
        (!alive(victim)).then_some(())
    });
    // The others were not touched and still answer.
    let now = pids(&d);
    for name in ["ts", "time"] {
        assert_eq!(
            now[name],
            before[name]["pid"].as_u64(),
            "{name} was restarted"
        );
    }
    let r = call_json(&d, "ts__echo", r#"{"text":"still here"}"#);
    assert_eq!(text_of(&r), "still here");
    let r = call_json(&d, "time__get_current_time", r#"{"timezone":"UTC"}"#);
    assert!(text_of(&r).contains("UTC"), "{r}");
    let r = call_json(&d, "memory__read_graph", "{}");
    assert_ne!(r["isError"], json!(true), "{r}");

    // SIGTERM: exit 0 promptly, nothing left behind.
    let groups: BTreeSet<u32> = d.servers().iter().map(|s| group_of(pid_of(s))).collect();
    assert_eq!(groups.len(), 3);
    let daemon_pid = d.pid();
    let tree = family(daemon_pid, &groups);
    for s in d.servers() {
        // Each server leads its group, under the daemon's process supervisor.
        let pid = pid_of(&s);
        assert_eq!(group_of(pid), pid, "{s}");
        assert!(
            tree.iter().any(|p| p.pid == pid),
            "{pid} is not the daemon's: {tree:?}"
        );
    }
    let t = Instant::now();
    let status = d
        .terminate(Duration::from_secs(10))
        .expect("the daemon did not exit within 10 s of SIGTERM");
    assert!(status.success(), "daemon exited with {status}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let leftovers = || {
        let now = procs();
        let mut left: Vec<Proc> = tree
            .iter()
            .filter(|p| {
                now.iter()
                    .any(|q| q.pid == p.pid && q.start == p.start && !q.zombie)
            })
            .copied()
            .collect();
        left.extend(now.iter().filter(|q| groups.contains(&q.pgrp) && !q.zombie));
        left
    };
    // The daemon waits for its servers; allow only the kernel's reaping lag.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !leftovers().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(leftovers(), [], "processes outlived the daemon");
}

// ---------------------------------------------------------------------------
// Config: hot reload, bad edits, CLI edits

#[test]
fn hot_reload_restarts_only_what_changed() {
    // A relative --config: the watch is on the daemon's working directory.
    let d = Daemon::start_relative(&servers_config(&[
        ("a", ts_entry(&["--tools", "1"])),
        ("b", ts_entry(&["--tools", "1"])),
        ("c", ts_entry(&["--tools", "1"])),
    ]));
    let before = d.wait_ready(&["a", "b", "c"], SOON);
    let b_tools = before["b"]["tools"].as_u64().unwrap();

    // An editor-style save (rename over the file): b changes, d is new.
    d.rename_config(&servers_config(&[
        ("a", ts_entry(&["--tools", "1"])),
        ("b", ts_entry(&["--tools", "3"])),
        ("c", ts_entry(&["--tools", "1"])),
        ("d", ts_entry(&["--tools", "1"])),
    ]));
    let after = poll("b restarted and d added", SOON, || {
        let s = d.wait_ready(&["a", "c"], SOON);
        let b = d.server("b")?;
        let dd = d.server("d")?;
        (b["state"] == "ready"
            && b["pid"] != before["b"]["pid"]
            && b["tools"].as_u64() == Some(b_tools + 2)
            && dd["state"] == "ready"
            && dd["tools"].as_u64() > Some(0))
        .then_some(s)
    });
    for name in ["a", "c"] {
        assert_eq!(after[name]["pid"], before[name]["pid"], "{name} restarted");
    }
    let b_tools_listed = d.json(&["tools", "--server", "b"]);
    assert!(
        b_tools_listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "b__tool_0002"),
        "{b_tools_listed}"
    );
    let mid = pids(&d);

    // An in-place write: c goes away, nothing else moves.
    d.write_config(&servers_config(&[
        ("a", ts_entry(&["--tools", "1"])),
        ("b", ts_entry(&["--tools", "3"])),
        ("d", ts_entry(&["--tools", "1"])),
    ]));
    poll("c to be removed", SOON, || {
        d.server("c").is_none().then_some(())
    });
    let now = pids(&d);
    assert_eq!(now.len(), 3, "{now:?}");
    for name in ["a", "b", "d"] {
        assert_eq!(now[name], mid[name], "{name} restarted");
    }
    assert!(!alive(before["c"]["pid"].as_u64().unwrap() as u32));
    let r = call_json(&d, "d__echo", r#"{"text":"new server"}"#);
    assert_eq!(text_of(&r), "new server");
}

#[test]
fn tool_filters_apply_to_listed_and_relisted_tools() {
    // allow e*/add/dynamic_*, deny echo: add, elicit and the dynamic tool stay,
    // also after the server's list_changed re-list.
    let filtered = format!(
        r#"{}, "tools": {{ "allow": ["e*", "add", "dynamic_*"], "deny": ["echo"] }}"#,
        ts_entry(&[
            "--list-changed-after-ms",
            "100",
            "--list-changed-count",
            "1"
        ])
    );
    let d = Daemon::start(&servers_config(&[("f", filtered), ("open", ts_entry(&[]))]));
    d.wait_ready(&["f", "open"], SOON);
    let names = |server: &str| -> BTreeSet<String> {
        d.json(&["tools", "--server", server])
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["tool"].as_str().unwrap().to_owned())
            .collect()
    };
    let after = poll("the dynamic tool to be listed", SOON, || {
        let n = names("f");
        n.iter().any(|t| t.starts_with("dynamic_")).then_some(n)
    });
    let want: BTreeSet<String> = ["add", "elicit", "dynamic_0001"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(after, want);
    assert!(names("open").contains("echo"), "the filter is per server");
    let e = d.run(&["call", "f__echo", r#"{"text":"x"}"#]);
    assert_eq!(e.code, 2, "{e:?}");
}

/// Line 5 of this config holds server b.
fn five_lines(b_extra: &str) -> String {
    format!(
        "{{\n  \"loginShellPath\": false,\n  \"mcpServers\": {{\n    \"a\": {{ {} }},\n    \"b\": {{ {}{b_extra} }}\n  }}\n}}\n",
        ts_entry(&["--tools", "1"]),
        ts_entry(&["--tools", "1"])
    )
}

#[test]
fn bad_config_edits_keep_the_servers_and_are_reported_by_line() {
    let good = five_lines("");
    let d = Daemon::start(&good);
    let before = d.wait_ready(&["a", "b"], SOON);
    let path = d.config.display().to_string();
    let status = d.json(&["status"]);
    assert_eq!(status["configError"], Value::Null, "{status}");
    assert_eq!(status["configPath"], path);

    let config_error = |needle: &'static str| {
        poll(&format!("configError with {needle:?}"), SOON, || {
            let s = d.json(&["status"]);
            let e = s["configError"].as_str()?.to_owned();
            e.contains(needle).then_some(e)
        })
    };
    // A syntax error on line 5 (a missing colon).
    d.write_config(&good.replace(r#""b": {"#, r#""b" {"#));
    let e = config_error("not valid JSON");
    assert!(e.starts_with(&format!("{path}:5:")), "{e}");
    // A semantic error on line 5: a duration without a unit.
    d.rename_config(&five_lines(r#", "timeouts": { "request": "30" }"#));
    let e = config_error("has no unit");
    assert!(
        e.starts_with(&format!("{path}:5: mcpServers.b.timeouts.request:")),
        "{e}"
    );
    // The human status shows it too.
    let r = d.run(&["status"]);
    assert!(
        r.stdout.contains("config error") && r.stdout.contains(&path),
        "{r:?}"
    );
    // The old servers never stopped.
    let now = pids(&d);
    for name in ["a", "b"] {
        assert_eq!(now[name], before[name]["pid"].as_u64(), "{name} restarted");
    }
    let r = call_json(&d, "b__echo", r#"{"text":"still serving"}"#);
    assert_eq!(text_of(&r), "still serving");

    // Fixing the file clears the error and applies it.
    d.rename_config(&five_lines(r#", "timeouts": { "request": "30s" }"#));
    poll("configError to clear", SOON, || {
        d.json(&["status"])["configError"].is_null().then_some(())
    });
    let b = poll("b to restart with its new timeouts", SOON, || {
        let b = d.server("b")?;
        (b["state"] == "ready" && b["pid"] != before["b"]["pid"]).then_some(b)
    });
    assert!(alive(pid_of(&b)));
    assert_eq!(pids(&d)["a"], before["a"]["pid"].as_u64());
}

#[test]
fn cli_edits_keep_the_file_and_are_applied() {
    let mut sb = Sandbox::new();
    sb.env
        .push(("MCPHOST_TEST_GREETING".to_owned(), "hello".to_owned()));
    let original = format!(
        r#"{{
  // mcphost test config: this comment must survive every edit
  "loginShellPath": false,
  "mcpServers": {{
    /* the first server */
    "a": {{
      "command": {ts},
      "args": ["--tools", "1"],
      "env": {{ "GREETING": "${{MCPHOST_TEST_GREETING}}" }} // interpolated at load
    }},
    // the second server
    "b": {{ "command": {ts} }}
  }}
}}
"#,
        ts = js(TESTSERVER)
    );
    let d = Daemon::start_in(sb, &original);
    let before = d.wait_ready(&["a", "b"], SOON);
    assert_eq!(
        environ(pid_of(&before["a"]))
            .get("GREETING")
            .map(String::as_str),
        Some("hello")
    );
    let inode = || std::fs::metadata(&d.config).unwrap().ino();
    let ino0 = inode();

    // add NAME -- CMD ARGS
    let r = d.run(&["servers", "add", "c", "--", TESTSERVER, "--tools", "2"]);
    assert_eq!((r.code, r.stdout.trim()), (0, "added c"), "{r:?}");
    let text = d.read_config();
    assert_ne!(inode(), ino0, "the file was not replaced atomically");
    // Only the new member (and the comma before it) was written, in the
    // file's own style.
    let b_line = format!(r#""b": {{ "command": {} }}"#, js(TESTSERVER));
    let added = original.replace(
        &format!("{b_line}\n  }}"),
        &format!(
            "{b_line},\n    \"c\": {{\n      \"command\": {},\n      \"args\": [\"--tools\", \"2\"]\n    }}\n  }}",
            js(TESTSERVER)
        ),
    );
    assert_ne!(added, original);
    assert_eq!(text, added);
    let c = d.wait_ready(&["c"], SOON)["c"].clone();
    assert_eq!(
        c["tools"],
        d.wait_ready(&["a"], SOON)["a"]["tools"].as_u64().unwrap() + 1
    );
    // remove gives back the original bytes.
    let r = d.run(&["servers", "remove", "c"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(d.read_config(), original);
    poll("c to be gone", SOON, || {
        d.server("c").is_none().then_some(())
    });
    assert!(!alive(pid_of(&c)));

    // disable / enable change only a's entry; the `${VAR}` reference and
    // the comments stay as written.
    let disabled = original.replace(
        "\"${MCPHOST_TEST_GREETING}\" } // interpolated at load\n    },",
        "\"${MCPHOST_TEST_GREETING}\" }, // interpolated at load\n      \"disabled\": true\n    },",
    );
    assert_ne!(disabled, original);
    let enabled = disabled.replace("\"disabled\": true", "\"disabled\": false");
    let r = d.run(&["--json", "servers", "disable", "a"]);
    assert_eq!((r.code, r.json()), (0, json!({"ok": true})), "{r:?}");
    assert_eq!(d.read_config(), disabled);
    let a = poll("a to be disabled", SOON, || {
        let a = d.server("a")?;
        (a["state"] == "disabled").then_some(a)
    });
    assert_eq!(a["pid"], Value::Null, "{a}");
    assert!(!alive(pid_of(&before["a"])));
    assert_eq!(a["tools"], 0, "{a}");
    let r = d.run(&["call", "a__echo", r#"{"text":"x"}"#]);
    assert_eq!(r.code, 2, "{r:?}");

    let r = d.run(&["servers", "enable", "a"]);
    assert_eq!((r.code, r.stdout.trim()), (0, "enabled a"), "{r:?}");
    assert_eq!(d.read_config(), enabled);
    let a = d.wait_ready(&["a"], SOON)["a"].clone();
    assert_ne!(a["pid"], before["a"]["pid"]);
    // The interpolated env reached the server again: it was started from
    // the parsed file, not from the text.
    let env = environ(pid_of(&a));
    assert_eq!(
        env.get("GREETING").map(String::as_str),
        Some("hello"),
        "{env:?}"
    );
    assert_eq!(pids(&d)["b"], before["b"]["pid"].as_u64(), "b restarted");

    // An HTTP server is accepted, and fails clearly instead of crashing.
    let r = d.run(&["servers", "add", "web", "--url", "http://127.0.0.1:9/mcp"]);
    assert_eq!(r.code, 0, "{r:?}");
    let with_web = enabled.replace(
        &format!("{b_line}\n  }}"),
        &format!(
            "{b_line},\n    \"web\": {{\n      \"url\": \"http://127.0.0.1:9/mcp\"\n    }}\n  }}"
        ),
    );
    assert_eq!(d.read_config(), with_web);
    // Unreachable: retried (remote servers come back), with the reason.
    let web = poll("web to be retried", SOON, || {
        let w = d.server("web")?;
        let retried = w["state"] == "restarting" || w["state"] == "failed";
        (retried && w["error"].is_string()).then_some(w)
    });
    assert_eq!(web["transport"], "http", "{web}");
    assert!(
        web["error"]
            .as_str()
            .unwrap_or_default()
            .contains("cannot reach"),
        "{web}"
    );
    let r = d.run(&["servers"]);
    assert!(r.stdout.contains("cannot reach"), "{r:?}");

    // Refused edits leave the file alone.
    let r = d.run(&["--json", "servers", "add", "a", "--", "true"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr_json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"a\""),
        "{r:?}"
    );
    let r = d.run(&["servers", "remove", "nosuch"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("nosuch"), "{r:?}");
    let r = d.run(&["servers", "remove", "web"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(d.read_config(), enabled);
    poll("web to be gone", SOON, || {
        d.server("web").is_none().then_some(())
    });
    let r = d.json(&["status"]);
    assert_eq!(r["configError"], Value::Null, "{r}");
    assert_eq!(r["servers"], 2, "{r}");
}

#[test]
fn parallel_servers_add_lose_no_edit() {
    let d = Daemon::start(&servers_config(&[("base", ts_entry(&[]))]));
    let names: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    let children: Vec<_> = names
        .iter()
        .map(|n| {
            let mut c = d.command();
            c.args(["servers", "add", n, "--", "true"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            (n.clone(), c.spawn().unwrap())
        })
        .collect();
    for (n, child) in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "add {n}: {out:?}");
    }
    let cfg = mcphost::config::parse(&d.read_config(), &d.config, &|_| None).unwrap();
    let in_file: BTreeSet<&str> = cfg.servers.iter().map(|s| s.name.as_str()).collect();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !in_file.contains(n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "lost from the file: {missing:?} of {}",
        names.len()
    );
    // The daemon runs what the file says, whatever order the edits landed in.
    poll("all 11 servers listed", SOON, || {
        (d.servers().len() == 11).then_some(())
    });
}

#[test]
fn configured_separator_reaches_instructions_and_cli_hints() {
    let cfg = servers_config(&[
        ("ok", ts_entry(&[])),
        ("bad", r#""command": "/nonexistent/cmd""#.to_owned()),
    ])
    .replace(
        "\"loginShellPath\"",
        "\"namespacing\": { \"separator\": \"-\" },\n  \"loginShellPath\"",
    );
    let d = Daemon::start(&cfg);
    d.wait_ready(&["ok"], SOON);
    poll("bad to fail", SOON, || {
        (d.server("bad")?["state"] == "failed").then_some(())
    });
    let tools = d.json(&["tools"]);
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "ok-echo"),
        "{tools}"
    );

    let mut w = Wire::connect(&d);
    let init = w.initialize_at("2025-06-18", json!({}));
    let instructions = init["result"]["instructions"].as_str().unwrap();
    assert!(instructions.contains("<server>-<tool>"), "{instructions}");
    assert!(!instructions.contains("__"), "{instructions}");

    // The hint finds the server a name belongs to by the configured separator.
    let r = d.run(&["call", "bad-echo", "{}"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("server 'bad' is failed"), "{r:?}");
    assert!(r.stderr.contains("/nonexistent/cmd"), "{r:?}");
}

#[test]
fn servers_pid_is_the_server_process_not_its_watchdog() {
    let d = Daemon::start(&servers_config(&[("ts", ts_entry(&[]))]));
    let pid = pid_of(&d.wait_ready(&["ts"], SOON)["ts"]);
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(
        exe,
        Path::new(TESTSERVER),
        "pid {pid} runs {}",
        exe.display()
    );
    // It is the server that gets restarted, and the new pid is the new server.
    let r = d.run(&["servers", "restart", "ts"]);
    assert_eq!(r.code, 0, "{r:?}");
    let new = poll("a new server process", SOON, || {
        let s = d.server("ts")?;
        (s["state"] == "ready" && s["pid"].as_u64() != Some(pid as u64)).then(|| pid_of(&s))
    });
    let exe = std::fs::read_link(format!("/proc/{new}/exe")).unwrap();
    assert_eq!(exe, Path::new(TESTSERVER));
}

// ---------------------------------------------------------------------------
// The socket protocol, raw

/// The test server's `lossless` result, byte for byte (tests/it/client_testserver.rs).
const LOSSLESS: &str = concat!(
    r#"{"x-unknown":{"nested":[1.0,2.50]},"#,
    r#""structuredContent":{"zeta":12345678901234567890123,"alpha":1.10,"huge":1e400,"list":[1.0,2.50,-0.0,1E+2]},"#,
    r#""content":[{"type":"text","text":"{\"zeta\":12345678901234567890123,\"alpha\":1.10,\"huge\":1e400}"}],"#,
    r#""isError":false}"#
);

#[test]
fn socket_protocol_pages_routes_and_relays_bytes() {
    let d = Daemon::start(&servers_config(&[
        ("big", ts_entry(&["--tools", "450"])),
        ("small", ts_entry(&["--tools", "2"])),
    ]));
    d.wait_ready(&["big", "small"], SOON);
    let mut w = Wire::connect(&d);

    // Before initialize.
    let r = w.request("tools/list", json!({}));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(r["result"].is_null(), "{r}");
    // A stateless request without its _meta is malformed (and settles
    // nothing: the handshake below still works).
    let r = w.request("server/discover", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = w.request("ping", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");
    // Malformed lines get an error and the connection stays up.
    w.send_raw("{not json\n");
    let r: Value = serde_json::from_str(&w.next_line("the parse error")).unwrap();
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert_eq!(r["id"], Value::Null, "{r}");
    w.send_raw("{\"jsonrpc\":\"2.0\",\"id\":\"bad\",\"params\":{}}\n");
    let r: Value = serde_json::from_str(&w.next_line("the invalid request's error")).unwrap();
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert_eq!(r["id"], "bad", "{r}");
    w.send_raw("[]\n");
    let r: Value = serde_json::from_str(&w.next_line("the empty batch's error")).unwrap();
    assert_eq!(
        (&r["error"]["code"], &r["id"]),
        (&json!(-32600), &Value::Null),
        "{r}"
    );
    let r = w.request("ping", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");

    let init = w.initialize_at("2025-06-18", json!({}));
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "mcphost", "{init}");
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );

    // tools/list pages through the whole aggregate.
    let mut names = Vec::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let r = w.request("tools/list", params);
        let page = r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"));
        assert!(
            !page.is_empty() && page.len() <= 200,
            "page of {}",
            page.len()
        );
        pages += 1;
        names.extend(page.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        match r["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "duplicates across pages");
    let cli: BTreeSet<String> = d
        .json(&["tools"])
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(cli.len() > 450 + 2, "{}", cli.len());
    assert_eq!(unique.into_iter().cloned().collect::<BTreeSet<_>>(), cli);
    assert_eq!(pages, cli.len().div_ceil(200));
    let r = w.request("tools/list", json!({"cursor": "not-a-cursor"}));
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // tools/call routes by namespaced name.
    let r = w.request(
        "tools/call",
        json!({"name": "small__echo", "arguments": {"text": "routed"}}),
    );
    assert_eq!(text_of(&r["result"]), "routed", "{r}");
    let r = w.request(
        "tools/call",
        json!({"name": "big__tool_0449", "arguments": {}}),
    );
    assert!(r["result"].is_object(), "{r}");
    let r = w.request(
        "tools/call",
        json!({"name": "nosuch__echo", "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");

    // Byte-exact relaying of a result a lossy JSON model would change.
    let result = w.result_text(
        "tools/call",
        json!({"name": "big__lossless", "arguments": {}}),
    );
    assert_eq!(result, LOSSLESS);
}

#[test]
fn list_changed_and_server_state_reach_socket_clients() {
    let d = Daemon::start(&servers_config(&[
        (
            "dyn",
            ts_entry(&[
                "--list-changed-after-ms",
                "300",
                "--list-changed-count",
                "40",
            ]),
        ),
        ("calm", ts_entry(&[])),
    ]));
    d.wait_ready(&["dyn", "calm"], SOON);
    let mut w = Wire::connect(&d);
    w.initialize_at("2025-06-18", json!({}));
    w.notification("notifications/tools/list_changed", |_| true);
    let r = w.request("tools/list", json!({}));
    let tools = r["result"]["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["name"].as_str().unwrap().starts_with("dyn__dynamic_")),
        "{r}"
    );

    // A restart is announced as state changes.
    let calm = d.server("calm").unwrap();
    let r = d.run(&["servers", "restart", "calm"]);
    assert_eq!((r.code, r.stdout.trim()), (0, "restarting calm"), "{r:?}");
    let n = w.notification("notifications/mcphost/server_state", |n| {
        n["params"]["name"] == "calm"
            && n["params"]["state"] == "ready"
            && n["params"]["pid"] != calm["pid"]
    });
    assert!(alive(n["params"]["pid"].as_u64().unwrap() as u32), "{n}");
}

#[test]
fn notifications_flow_steadily_while_a_server_churns() {
    let d = Daemon::start(&servers_config(&[(
        "churn",
        ts_entry(&["--list-changed-after-ms", "5"]),
    )]));
    d.wait_ready(&["churn"], SOON);
    let mut w = Wire::connect(&d);
    w.initialize_at("2025-06-18", json!({}));
    // The server changes its lists every 5 ms; its re-lists are announced
    // as they happen, not in bursts a second or more apart. Counted by
    // notifications, not by a fixed window: a loaded machine only slows
    // the flow, a burst would still show as one long gap.
    let start = Instant::now();
    let mut last = start;
    let mut gaps = Vec::new();
    while gaps.len() < 40 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} notifications in 30 s",
            gaps.len()
        );
        let v = lenient_json(&w.next_line("a notification"));
        assert!(v["method"].is_string(), "{v}");
        gaps.push(last.elapsed());
        last = Instant::now();
    }
    let worst = gaps.iter().max().unwrap();
    assert!(
        *worst < Duration::from_millis(1500),
        "a {worst:?} gap among {} notifications",
        gaps.len()
    );
}

#[test]
fn a_client_that_never_reads_is_cut_off_and_others_stay_fast() {
    let d = Daemon::start(&servers_config(&[
        ("fast", ts_entry(&[])),
        ("flood", ts_entry(&["--list-changed-after-ms", "5"])),
    ]));
    d.wait_ready(&["fast", "flood"], SOON);

    // A client that initializes and asks for a lot, then never reads a
    // byte: its socket buffer and its queue in the daemon fill up, and the
    // next notification for it cannot be queued.
    let mut mute = UnixStream::connect(&d.socket).unwrap();
    let mut burst = String::from(concat!(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"mute","version":"0"}}}"#,
        "\n",
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "\n"
    ));
    for i in 1..=20 {
        burst.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"tools/list\"}}\n"
        ));
    }
    for i in 21..=2000 {
        burst.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}\n"
        ));
    }
    mute.write_all(burst.as_bytes()).unwrap();

    let mut w = Wire::connect(&d);
    w.initialize_at("2025-06-18", json!({}));
    let mut times = Vec::new();
    let mut call = |w: &mut Wire, i: usize| {
        let t = Instant::now();
        let r = w.request(
            "tools/call",
            json!({"name": "fast__echo", "arguments": {"text": format!("call {i}")}}),
        );
        times.push(t.elapsed());
        assert_eq!(text_of(&r["result"]), format!("call {i}"), "{r}");
        w.held.clear();
    };
    for i in 0..25 {
        call(&mut w, i);
    }
    poll("the daemon to drop the mute client", SOON, || {
        d.log_text().contains("not reading").then_some(())
    });
    for i in 25..50 {
        call(&mut w, i);
    }
    times.sort();
    let p50 = times[times.len() / 2];
    assert!(p50 < Duration::from_millis(100), "p50 {p50:?} of {times:?}");

    // The mute client's socket was closed: reading it ends (EOF, or a reset
    // since the daemon left some of its requests unread) after fewer
    // answers than it asked for.
    mute.set_read_timeout(Some(SOON)).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match mute.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the mute client is still connected after {} bytes: {e}",
                got.len()
            ),
        }
    }
    let answered = got
        .split(|b| *b == b'\n')
        .filter(|l| l.starts_with(br#"{"jsonrpc":"2.0","id":"#))
        .count();
    assert!(answered > 0 && answered < 2001, "{answered} answers");
    // The daemon and the other client are fine.
    let r = w.request("ping", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");
    assert_eq!(d.run(&["status"]).code, 0);
}

#[test]
fn a_second_daemon_on_a_live_socket_refuses_and_starts_nothing() {
    let sb = Sandbox::new();
    let log = sb.dir.path().join("requests.log");
    // The login-shell PATH probe is on here (the default).
    let cfg = format!(
        r#"{{ "mcpServers": {{ "only": {{ "command": {}, "args": ["--log-requests", {}] }} }} }}"#,
        js(TESTSERVER),
        js(&log.display().to_string())
    );
    let d = Daemon::start_in(sb, &cfg);
    let before = d.wait_ready(&["only"], SOON);
    let inode = std::fs::metadata(&d.socket).unwrap().ino();

    let mut second = d.command();
    second.arg("daemon");
    let out = output_within(second, Duration::from_secs(20));
    assert!(!out.status.success(), "second daemon: {out:?}");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already listening"), "{err}");
    assert!(err.contains(&d.socket.display().to_string()), "{err}");

    // The first one is untouched and still serving.
    assert_eq!(std::fs::metadata(&d.socket).unwrap().ino(), inode);
    let r = call_json(&d, "echo", r#"{"text":"first daemon"}"#);
    assert_eq!(text_of(&r), "first daemon");
    assert_eq!(pids(&d)["only"], before["only"]["pid"].as_u64());
    let inits = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(r#""method":"initialize""#))
        .count();
    assert_eq!(inits, 1, "the second daemon started a server");
}

/// A server's four lists are asked for at once after its handshake, not one
/// after another: a remote server's start costs one round trip for them,
/// not four, and one list that hangs does not hold up the others.
#[test]
fn a_servers_lists_are_requested_together_so_a_hung_one_holds_up_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.log");
    let d = Daemon::start(&common::ts_config(&[
        "--hang-on",
        "tools/list",
        "--log-requests",
        log.to_str().unwrap(),
    ]));
    let methods = || -> Vec<String> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|m| m["method"].as_str().map(str::to_owned))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let wanted = ["resources/list", "resources/templates/list", "prompts/list"];
    loop {
        let seen = methods();
        if wanted.iter().all(|w| seen.iter().any(|m| m == w)) {
            assert!(seen.iter().any(|m| m == "tools/list"), "{seen:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "with tools/list unanswered, the other lists were not asked for: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(d);
}

#[test]
fn servers_wait_after_servers_restart_waits_for_the_new_process() {
    // The old process takes its whole shutdown grace to go (it ignores EOF
    // and SIGTERM): long enough for a `--wait` right after the restart to
    // see it still `ready` if the restart returned before it began.
    let d = Daemon::start(&servers_config(&[(
        "ts",
        format!(
            r#"{}, "timeouts": {{ "shutdown": "1s" }}"#,
            ts_entry(&["--ignore-eof", "--ignore-sigterm"])
        ),
    )]));
    let before = d.wait_ready(&["ts"], SOON);
    let old = pid_of(&before["ts"]);
    let r = d.run(&["servers", "restart", "ts"]);
    assert_eq!(r.code, 0, "{r:?}");
    let list = d.json(&["servers", "--wait=20s"]);
    let ts = &list[0];
    assert_eq!(ts["state"], "ready", "{list}");
    assert_ne!(
        pid_of(ts),
        old,
        "--wait returned with the old process: {list}"
    );
    assert!(!alive(old), "the old process still runs");
}

#[test]
fn a_server_that_dies_at_start_shows_its_reason_in_the_table_and_its_stderr_in_logs() {
    let d = Daemon::start(&servers_config(&[
        ("ok", ts_entry(&[])),
        (
            "dies",
            r#""command": "sh", "args": ["-c", "echo starting up >&2; echo 'fatal: API_KEY is not set' >&2; exit 3"]"#
                .to_owned(),
        ),
    ]));
    let r = d.run(&["servers", "--wait=30s"]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("dies "))
        .unwrap_or_else(|| panic!("no row for dies: {r:?}"));
    assert!(row.contains("failed"), "{row}");
    assert!(row.contains("fatal: API_KEY is not set"), "{row}");
    assert!(!row.contains("last stderr lines"), "{row}");
    let logs = d.run(&["logs", "dies"]);
    assert_eq!(logs.code, 0, "{logs:?}");
    assert!(
        logs.stdout.contains("starting up") && logs.stdout.contains("fatal: API_KEY is not set"),
        "{logs:?}"
    );
}

#[test]
fn an_http_server_that_is_down_ends_failed_with_its_error_and_servers_wait_returns() {
    // A port nothing listens on: every connect is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = Daemon::start(&servers_config(&[
        ("ok", ts_entry(&[])),
        ("down", format!(r#""url": "http://127.0.0.1:{port}/mcp""#)),
    ]));
    let r = d.run(&["--json", "servers", "--wait=20s"]);
    assert_eq!(r.code, 0, "{r:?}");
    let list = r.json();
    let down = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "down")
        .unwrap()
        .clone();
    assert_eq!(down["state"], "failed", "{down}");
    assert!(
        down["error"]
            .as_str()
            .is_some_and(|e| e.contains("trying again every")),
        "{down}"
    );
}
