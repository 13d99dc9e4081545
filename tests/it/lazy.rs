//! `start: lazy` and `idleTimeout` against the real daemon: lazy servers
//! listed from the stored catalog with no process spawned, started by their
//! first call, a stale stored catalog replaced (and `list_changed` sent), a
//! corrupt store file ignored with a warning, idle servers stopped and
//! started again, and a real Node server configured lazily.
//!
//! Each test's daemons share one HOME, so the second daemon finds what the
//! first stored under `~/.local/share/mcphost/catalogs/`. The test server
//! is told where to log its requests through an environment variable: env
//! values are not part of a server's catalog key, so both daemons see the
//! same server config. No request logged means no process was spawned.

use crate::common;
use crate::common::wire::Wire;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Daemon, RequestLog, Sandbox, alive, interop, js, lenient_json, poll, ts_entry};
use serde_json::{Value, json};

const SOON: Duration = Duration::from_secs(20);

/// A sandbox whose HOME is `home` (kept by the test across daemons).
fn sandbox_with_home(home: &Path) -> Sandbox {
    let mut sb = Sandbox::new();
    sb.home = home.to_path_buf();
    sb
}

fn catalog_dir(home: &Path) -> PathBuf {
    home.join(".local/share/mcphost/catalogs")
}

fn catalog_files(home: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(catalog_dir(home))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                // Not the writer's temp files (`.tmp-*.json`).
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .filter(|p| {
                    !p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One test-server entry; `extra` are more members (start, idleTimeout…).
fn ts_server(log: &RequestLog, tools: u32, extra: &str) -> String {
    format!(
        r#"{}, "env": {{ "MCPHOST_TS_LOG_REQUESTS": {}, "MCPHOST_TS_TOOLS": "{tools}" }}{extra}"#,
        ts_entry(&[]),
        js(&log.arg())
    )
}

fn config(members: &str) -> String {
    common::servers_config(&[("ts", members.to_owned())])
}

fn initializes(log: &RequestLog) -> usize {
    log.methods().iter().filter(|m| *m == "initialize").count()
}

fn wait_state(d: &Daemon, name: &str, state: &str) -> Value {
    poll(&format!("{name} to be {state}"), SOON, || {
        d.server(name).filter(|s| s["state"] == state)
    })
}

/// A first daemon that learns the catalog of the lazy `ts` (nothing was
/// stored): it starts it once, stores the lists and puts it to idle.
fn learn(home: &Path, members: &str) {
    let d = Daemon::start_in(sandbox_with_home(home), &config(members));
    let s = wait_state(&d, "ts", "idle");
    assert_eq!(s["cached"], true, "{s}");
    assert!(s.get("pid").is_none(), "{s}");
    poll("the catalog to be stored", SOON, || {
        (!catalog_files(home).is_empty()).then_some(())
    });
}

#[test]
fn lazy_server_is_listed_from_the_store_and_started_by_its_first_call() {
    let home = tempfile::tempdir().unwrap();
    let log = RequestLog::new();
    let members = ts_server(&log, 2, r#", "start": "lazy""#);
    learn(home.path(), &members);
    assert_eq!(initializes(&log), 1, "{:?}", log.methods());
    std::fs::remove_file(&log.path).unwrap();

    let d = Daemon::start_in(sandbox_with_home(home.path()), &config(&members));
    let s = d.server("ts").unwrap();
    assert_eq!(s["state"], "idle", "{s}");
    assert_eq!(s["cached"], true, "{s}");
    let mut w = Wire::connect(&d);
    w.initialize(json!({}));
    let r = w.request("tools/list", json!({}));
    let names: Vec<&str> = r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"ts__echo"), "{r}");
    assert!(names.contains(&"ts__tool_0001"), "{r}");
    // Nothing was spawned to answer that.
    assert!(!log.path.exists(), "spawned: {:?}", log.methods());
    assert!(d.server("ts").unwrap().get("pid").is_none());

    let r = w.request(
        "tools/call",
        json!({"name": "ts__echo", "arguments": {"text": "woken"}}),
    );
    assert!(r["result"].to_string().contains("woken"), "{r}");
    assert_eq!(initializes(&log), 1, "{:?}", log.methods());
    let s = wait_state(&d, "ts", "ready");
    assert!(s.get("cached").is_none(), "{s}");
    assert!(alive(s["pid"].as_u64().unwrap() as u32));
}

#[test]
fn stale_stored_catalog_is_replaced_and_list_changed_sent() {
    let home = tempfile::tempdir().unwrap();
    let log = RequestLog::new();
    learn(home.path(), &ts_server(&log, 0, r#", "start": "lazy""#));

    // Same config entry (env values are not in its key), other live tools.
    let members = ts_server(&log, 3, r#", "start": "lazy""#);
    let d = Daemon::start_in(sandbox_with_home(home.path()), &config(&members));
    wait_state(&d, "ts", "idle");
    let mut w = Wire::connect(&d);
    w.initialize(json!({}));
    let r = w.request("tools/list", json!({}));
    assert!(!r.to_string().contains("tool_0000"), "{r}");
    let r = w.request(
        "tools/call",
        json!({"name": "ts__echo", "arguments": {"text": "x"}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    w.notification("notifications/tools/list_changed", |_| true);
    let r = w.request("tools/list", json!({}));
    assert!(r.to_string().contains("ts__tool_0002"), "{r}");
    poll("the store to hold the live lists", SOON, || {
        let files = catalog_files(home.path());
        let text = std::fs::read_to_string(files.first()?).ok()?;
        text.contains("tool_0002").then_some(())
    });
}

#[test]
fn corrupt_store_file_is_ignored_with_a_warning() {
    let home = tempfile::tempdir().unwrap();
    let log = RequestLog::new();
    let members = ts_server(&log, 1, r#", "start": "lazy""#);
    learn(home.path(), &members);
    let files = catalog_files(home.path());
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::write(&files[0], "{\"format\": 1, \"tools\": [tru").unwrap();

    let d = Daemon::start_in(sandbox_with_home(home.path()), &config(&members));
    // No catalog: started once more to learn it, then idle again.
    let s = wait_state(&d, "ts", "idle");
    assert_eq!(s["cached"], true, "{s}");
    let logged = d.log_text();
    assert!(
        logged.contains("ignoring the stored catalog")
            && logged.contains(&*files[0].to_string_lossy()),
        "{logged}"
    );
    assert_eq!(initializes(&log), 2, "{:?}", log.methods());
    poll("the file to be rewritten", SOON, || {
        let text = std::fs::read_to_string(&files[0]).ok()?;
        let v = lenient_json(&text);
        v["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
            .then_some(())
    });
}

#[test]
fn idle_timeout_stops_the_server_and_the_next_call_starts_it() {
    let log = RequestLog::new();
    let members = ts_server(&log, 0, r#", "idleTimeout": "2s""#);
    let d = Daemon::start(&config(&members));
    let ready = d.wait_ready(&["ts"], SOON);
    let pid = ready["ts"]["pid"].as_u64().unwrap() as u32;
    let s = wait_state(&d, "ts", "idle");
    assert!(s.get("pid").is_none(), "{s}");
    poll("the old process to be gone", SOON, || {
        (!alive(pid)).then_some(())
    });
    // Its tools stay listed while it is idle.
    assert!(s["tools"].as_u64() > Some(0), "{s}");
    let r = d.json(&["call", "ts__echo", r#"{"text":"again"}"#]);
    assert!(r.to_string().contains("again"), "{r}");
    assert_eq!(initializes(&log), 2, "{:?}", log.methods());
    let s = d.server("ts").unwrap();
    assert_ne!(s["state"], "idle", "{s}");
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn real_node_server_configured_lazily() {
    let env = interop();
    let home = tempfile::tempdir().unwrap();
    let memory_file = home.path().join("memory.json");
    let members = format!(
        r#"{}, "env": {{ "MEMORY_FILE_PATH": {} }}, "start": "lazy""#,
        env.node_entry("server-memory"),
        js(&memory_file.display().to_string())
    );
    let cfg = common::servers_config(&[("mem", members)]);
    {
        let d = Daemon::start_in(sandbox_with_home(home.path()), &cfg);
        poll("mem to learn its catalog", Duration::from_secs(60), || {
            d.server("mem").filter(|s| s["state"] == "idle")
        });
    }
    let d = Daemon::start_in(sandbox_with_home(home.path()), &cfg);
    let s = d.server("mem").unwrap();
    assert_eq!(s["state"], "idle", "{s}");
    assert_eq!(s["cached"], true, "{s}");
    let mut w = Wire::connect(&d);
    w.initialize(json!({}));
    let r = w.request("tools/list", json!({}));
    assert!(r.to_string().contains("mem__read_graph"), "{r}");
    let r = w.request(
        "tools/call",
        json!({"name": "mem__read_graph", "arguments": {}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let s = wait_state(&d, "mem", "ready");
    assert!(alive(s["pid"].as_u64().unwrap() as u32));
}
