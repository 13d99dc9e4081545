//! Server lifecycles under stubborn servers: hot reload, stop during a
//! start, signals, restarts, failed listings and lost events. The first
//! part drives the real `mcphost daemon`; the second the registry in-process.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Daemon, TESTSERVER, alive, poll, quick_opts, text_of};
use mcphost::client::CallOptions;
use mcphost::config::HostConfig;
use mcphost::registry::supervisor::{RestartPolicy, ServerState, ServerStatus};
use mcphost::registry::{Registry, RegistryEvent};
use serde_json::{Value, json};

/// Anything the daemon does on its own (reloads, restarts).
const SOON: Duration = Duration::from_secs(20);

/// A test-server entry with these arguments plus extra members.
fn entry(args: &[&str], extra: Value) -> Value {
    let mut e = json!({ "command": TESTSERVER, "args": args });
    if let (Some(e), Value::Object(extra)) = (e.as_object_mut(), extra) {
        e.extend(extra);
    }
    e
}

/// Config text for these (name, entry) servers, without the login-shell probe.
fn config_text(servers: &[(&str, Value)]) -> String {
    let servers: serde_json::Map<String, Value> = servers
        .iter()
        .map(|(n, e)| ((*n).to_owned(), e.clone()))
        .collect();
    serde_json::to_string_pretty(&json!({ "loginShellPath": false, "mcpServers": servers }))
        .unwrap()
}

/// The fields of /proc/PID/stat after "(name)": state ppid pgrp ...
fn stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The process group of a live process (a server's: its own pid).
fn group_of(pid: u32) -> u32 {
    stat(pid)
        .and_then(|f| f.get(2)?.parse().ok())
        .unwrap_or_else(|| panic!("no process {pid}"))
}

/// Members of process group `pgid` that are alive (not zombies), from /proc.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Some(f) = stat(pid) else { continue };
        if f[0] != "Z" && f.get(2).and_then(|g| g.parse().ok()) == Some(pgid) {
            out.push(pid);
        }
    }
    out
}

fn pid_of(s: &Value) -> u32 {
    s["pid"].as_u64().unwrap_or_else(|| panic!("no pid in {s}")) as u32
}

/// How many times the daemon logged `needle`.
fn log_count(d: &Daemon, needle: &str) -> usize {
    d.log_text().matches(needle).count()
}

// ---------------------------------------------------------------------------
// The daemon

/// Defect 2: the old instance of an edited server stopped only after the new
/// one was listed, and its final `stopped` wiped the new instance's tools.
#[test]
fn reload_keeps_the_tools_of_a_server_whose_old_instance_stops_slowly() {
    let slow = |v: &str| {
        entry(
            &["--ignore-eof", "--tools", "2"],
            json!({ "env": { "V": v } }),
        )
    };
    let d = Daemon::start(&config_text(&[("s", slow("1"))]));
    let before = d.wait_ready(&["s"], SOON);
    let old = pid_of(&before["s"]);
    let tools = before["s"]["tools"].as_u64().unwrap();
    let states = StateWatcher::start(&d.socket);

    d.write_config(&config_text(&[("s", slow("2"))]));
    // The old instance ignores stdin EOF: it is gone only after the SIGTERM
    // that follows the 2 s grace, well after the new one is up.
    poll("the old instance to stop", SOON, || {
        (!alive(old) && log_count(&d, "supervisor stopped") >= 1).then_some(())
    });
    // States reach clients in the order the registry sees them: once a
    // server added after the old instance stopped is seen ready, a stale
    // `stopped` would have been seen already.
    d.write_config(&config_text(&[
        ("s", slow("2")),
        ("t", entry(&[], json!({}))),
    ]));
    poll("t's ready state to reach the client", SOON, || {
        states.of("t").contains(&"ready".to_owned()).then_some(())
    });
    let seen = states.of("s");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("ready"),
        "a client was told a running server stopped: {seen:?}"
    );
    let s = d.server("s").unwrap();
    assert_eq!(s["state"], "ready", "{s}");
    assert_ne!(pid_of(&s), old, "{s}");
    assert_eq!(
        s["tools"].as_u64(),
        Some(tools),
        "new instance lost its tools: {s}"
    );
    let r = d.json(&["call", "s__echo", r#"{"text":"still listed"}"#]);
    assert_eq!(text_of(&r), "still listed");
}

/// Every `notifications/mcphost/server_state` one socket client receives.
struct StateWatcher {
    seen: Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

impl StateWatcher {
    fn start(socket: &Path) -> StateWatcher {
        use std::io::{BufRead, BufReader, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"watcher","version":"0"}}}"#;
        writeln!(stream, "{init}").unwrap();
        let mut lines = BufReader::new(stream.try_clone().unwrap()).lines();
        let answer = lines.next().unwrap().unwrap();
        assert!(answer.contains("\"result\""), "{answer}");
        writeln!(
            stream,
            r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
        )
        .unwrap();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        std::thread::spawn(move || {
            let _keep_open = stream;
            for line in lines.map_while(Result::ok) {
                let v: Value = serde_json::from_str(&line).unwrap_or_default();
                if v["method"] == "notifications/mcphost/server_state" {
                    let p = &v["params"];
                    let entry = (s_of(&p["name"]), s_of(&p["state"]));
                    sink.lock().unwrap().push(entry);
                }
            }
        });
        StateWatcher { seen }
    }

    /// The states told for `server`, in order.
    fn of(&self, server: &str) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(n, _)| n == server)
            .map(|(_, s)| s.clone())
            .collect()
    }
}

fn s_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Defect 3: a reload awaited every old server's stop inside the daemon's
/// loop, so nothing was accepted until a stubborn server was gone. The
/// old instance must still be stopped, and SIGTERM during the reload must
/// wait for it.
#[test]
fn reload_does_not_block_accept_calls_or_signals() {
    // Ignores EOF and SIGTERM: its stop takes 5 s + 5 s, then SIGKILL.
    let stubborn = |v: &str| {
        entry(
            &["--ignore-eof", "--ignore-sigterm", "--tools", "1"],
            json!({ "env": { "V": v }, "timeouts": { "shutdown": "5s" } }),
        )
    };
    let steady = entry(&["--tools", "1"], json!({}));
    let mut d = Daemon::start(&config_text(&[
        ("stubborn", stubborn("1")),
        ("steady", steady.clone()),
    ]));
    let before = d.wait_ready(&["stubborn", "steady"], SOON);
    let old = pid_of(&before["stubborn"]);

    let edited = Instant::now();
    d.write_config(&config_text(&[
        ("stubborn", stubborn("2")),
        ("steady", steady),
    ]));
    poll("the reload to start", SOON, || {
        (log_count(&d, "config changed; applying") >= 1).then_some(())
    });
    let t = Instant::now();
    let r = d.json(&["call", "steady__echo", r#"{"text":"during the reload"}"#]);
    let call = t.elapsed();
    assert_eq!(text_of(&r), "during the reload");
    eprintln!("call during the reload: {call:?}");
    // The old instance's stop takes 10 s; the call must not wait for it
    // (6 s: slack for a loaded machine, still well below the 10 s).
    assert!(
        call < Duration::from_secs(6),
        "a call waited {call:?} for the reload"
    );
    let new = poll("the new instance to be listed", SOON, || {
        let s = d.server("stubborn")?;
        (s["state"] == "ready" && pid_of(&s) != old && s["tools"].as_u64() > Some(0)).then_some(s)
    });
    eprintln!("new instance listed {:?} after the edit", edited.elapsed());
    assert!(alive(old), "the old instance is still being stopped");

    // SIGTERM now: the daemon waits for the old instance too.
    let groups = [group_of(old), group_of(pid_of(&new))];
    let t = Instant::now();
    let status = d.terminate(SOON).expect("the daemon did not exit");
    eprintln!("SIGTERM during the reload: exit after {:?}", t.elapsed());
    assert!(status.success(), "{status}");
    for g in groups {
        assert_eq!(
            group_members(g),
            Vec::<u32>::new(),
            "group {g} outlived the daemon"
        );
    }
}

/// Defect 4: a server that never answers `initialize` held its supervisor
/// in the handshake for the whole init timeout, so disable, remove and
/// SIGTERM waited for it (SIGTERM took 18.5 s with `init: 20s`).
#[test]
fn lifecycle_commands_interrupt_a_hung_initialize() {
    // It also ignores stdin EOF: a stop takes the SIGTERM after the grace.
    let hung = entry(
        &["--hang-on", "initialize", "--ignore-eof"],
        json!({ "timeouts": { "init": "60s", "shutdown": "1s" } }),
    );
    let cfg = config_text(&[("h1", hung.clone()), ("h2", hung.clone()), ("h3", hung)]);
    let mut d = Daemon::start(&cfg);
    let started = |name: &str| {
        poll("the handshake to hang", SOON, || {
            let s = d.server(name)?;
            (s["state"] == "starting" && s["pid"].is_u64()).then(|| pid_of(&s))
        })
    };
    // Each within the grace (1 s after stdin EOF, 1 s after SIGTERM) plus
    // generous slack for a loaded machine, far below the 60 s init timeout.
    let limit = Duration::from_secs(15);

    let h1 = started("h1");
    let t = Instant::now();
    assert_eq!(d.run(&["servers", "disable", "h1"]).code, 0);
    poll("disable to stop h1", limit, || (!alive(h1)).then_some(()));
    eprintln!("disable during a hung initialize: {:?}", t.elapsed());
    assert_eq!(d.server("h1").unwrap()["state"], "disabled");

    let h2 = started("h2");
    let t = Instant::now();
    assert_eq!(d.run(&["servers", "remove", "h2"]).code, 0);
    poll("remove to stop h2", limit, || (!alive(h2)).then_some(()));
    eprintln!("remove during a hung initialize: {:?}", t.elapsed());

    let h3 = group_of(started("h3"));
    let t = Instant::now();
    let status = d
        .terminate(SOON)
        .expect("SIGTERM did not stop the daemon in time");
    let took = t.elapsed();
    eprintln!("SIGTERM during a hung initialize: {took:?}");
    assert!(status.success(), "{status}");
    assert!(took < limit, "SIGTERM took {took:?}");
    assert_eq!(group_members(h3), Vec::<u32>::new());
}

/// A server that ignores SIGTERM and has a child of its own: SIGINT and
/// SIGTERM each stop the daemon within the grace, leaving nothing in the
/// server's process group.
#[test]
fn sigint_and_sigterm_leave_no_process_of_a_stubborn_group() {
    let stubborn = entry(
        &["--ignore-sigterm", "--ignore-eof", "--spawn-child"],
        json!({ "timeouts": { "shutdown": "1s" } }),
    );
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let mut d = Daemon::start(&config_text(&[("stubborn", stubborn.clone())]));
        let s = d
            .wait_ready(&["stubborn"], SOON)
            .remove("stubborn")
            .unwrap();
        let group = group_of(pid_of(&s));
        // The server and the server's child (the process supervisor holds
        // the group from outside it).
        let members = poll("the server's child to start", SOON, || {
            let m = group_members(group);
            (m.len() >= 2).then_some(m)
        });
        let daemon = d.pid();
        let t = Instant::now();
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(daemon as libc::pid_t, signal) }, 0);
        // 1 s after stdin EOF, 1 s after SIGTERM, then SIGKILL; generous slack.
        poll("the daemon to exit", Duration::from_secs(10), || {
            (!alive(daemon)).then_some(())
        });
        let took = t.elapsed();
        eprintln!("signal {signal}: daemon gone after {took:?}");
        let status = d.terminate(SOON).expect("reaped");
        if signal == libc::SIGTERM {
            assert!(status.success(), "{status}");
        }
        // The daemon waits for its servers; allow only the kernel's reaping lag.
        let left = poll("the group to be empty", Duration::from_secs(10), || {
            let m = group_members(group);
            m.is_empty().then_some(m)
        });
        assert_eq!(left, Vec::<u32>::new(), "{members:?} left behind");
    }
}

fn parent_of(pid: u32) -> u32 {
    stat(pid)
        .and_then(|f| f.get(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no process {pid}"))
}

/// Each server leads its own group, as a child of the daemon's one process
/// supervisor (itself the daemon's child): the supervisor's pid.
fn supervisor_of(d: &Daemon, servers: &[Value]) -> u32 {
    let parents: BTreeSet<u32> = servers
        .iter()
        .map(|s| {
            let pid = pid_of(s);
            assert_eq!(group_of(pid), pid, "{s} does not lead its group");
            parent_of(pid)
        })
        .collect();
    assert_eq!(
        parents.len(),
        1,
        "servers with different parents: {parents:?}"
    );
    let supervisor = parents.into_iter().next().unwrap();
    assert_eq!(
        parent_of(supervisor),
        d.pid(),
        "{supervisor} is not the daemon's child"
    );
    supervisor
}

/// Servers with a child of their own each, all through the one supervisor.
fn three_with_children() -> String {
    let child = entry(&["--spawn-child", "--ignore-sigterm"], json!({}));
    config_text(&[("a", child.clone()), ("b", child.clone()), ("c", child)])
}

/// Waits until every group in `groups` has its server and its child.
fn wait_for_children(groups: &[u32]) {
    for &g in groups {
        poll("the server's child to start", SOON, || {
            (group_members(g).len() >= 2).then_some(())
        });
    }
}

/// Issue 25: the per-server watchdogs became one supervisor; `kill -9` of
/// the daemon must still leave no server nor any server's child behind.
#[test]
fn kill_9_of_the_daemon_leaves_no_server_of_its_supervisor_nor_their_children() {
    let mut d = Daemon::start(&three_with_children());
    let ready = d.wait_ready(&["a", "b", "c"], SOON);
    let servers: Vec<Value> = ready.into_values().collect();
    let supervisor = supervisor_of(&d, &servers);
    let groups: Vec<u32> = servers.iter().map(pid_of).collect();
    wait_for_children(&groups);

    let daemon = d.pid();
    // SAFETY: kill(2) on our own child.
    assert_eq!(
        unsafe { libc::kill(daemon as libc::pid_t, libc::SIGKILL) },
        0
    );
    poll("the daemon to be reaped", SOON, || d.child_exit());
    let left = poll("every group to be empty", Duration::from_secs(10), || {
        let left: Vec<(u32, Vec<u32>)> = groups
            .iter()
            .map(|&g| (g, group_members(g)))
            .filter(|(_, m)| !m.is_empty())
            .collect();
        left.is_empty().then_some(left)
    });
    assert_eq!(left, [], "processes outlived the daemon");
    poll("the supervisor to exit", SOON, || {
        (!alive(supervisor)).then_some(())
    });
}

/// The supervisor killed by someone: the daemon kills the servers it held,
/// says why, and starts them again each under a watchdog; a `kill -9` of
/// the daemon then still leaves nothing behind.
#[test]
fn a_killed_supervisor_takes_its_servers_along_and_they_come_back_under_watchdogs() {
    let mut d = Daemon::start(&three_with_children());
    let ready = d.wait_ready(&["a", "b", "c"], SOON);
    let servers: Vec<Value> = ready.values().cloned().collect();
    let supervisor = supervisor_of(&d, &servers);
    let old: Vec<u32> = servers.iter().map(pid_of).collect();
    wait_for_children(&old);

    // SAFETY: kill(2) on the daemon's supervisor, our grandchild.
    assert_eq!(
        unsafe { libc::kill(supervisor as libc::pid_t, libc::SIGKILL) },
        0
    );
    for &g in &old {
        poll("the old server's group to be killed", SOON, || {
            group_members(g).is_empty().then_some(())
        });
    }
    poll("the daemon to say why", SOON, || {
        let log = d.log_text();
        log.contains("the process supervisor was killed by SIGKILL")
            .then_some(())
    });
    let again: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            poll("a new instance", SOON, || {
                let s = d.server(name)?;
                (s["state"] == "ready" && !old.contains(&pid_of(&s))).then_some(s)
            })
        })
        .collect();
    let daemon = d.pid();
    let groups: Vec<u32> = again
        .iter()
        .map(|s| {
            let pid = pid_of(s);
            let leader = group_of(pid);
            // The watchdog leads the group, the daemon's child.
            assert_ne!(leader, pid, "{s}");
            assert_eq!(parent_of(leader), daemon, "{s}");
            leader
        })
        .collect();
    let r = d.json(&["call", "a__echo", r#"{"text":"still here"}"#]);
    assert_eq!(text_of(&r), "still here");

    // SAFETY: kill(2) on our own child.
    assert_eq!(
        unsafe { libc::kill(daemon as libc::pid_t, libc::SIGKILL) },
        0
    );
    poll("the daemon to be reaped", SOON, || d.child_exit());
    for g in groups {
        poll("the group to be empty", Duration::from_secs(10), || {
            group_members(g).is_empty().then_some(())
        });
    }
}

/// Defect 15: a failed first listing was never retried (`ready` with 0
/// tools for good) and `servers` did not say why.
#[test]
fn a_failed_first_listing_is_retried_and_shown() {
    let d = Daemon::start(&config_text(&[(
        "flaky",
        entry(&["--fail-tools-list", "4", "--tools", "1"], json!({})),
    )]));
    // Four failures: retried after 0.5, 1, 2 and 4 s.
    let failing = poll("the listing error to be shown", SOON, || {
        let s = d.server("flaky")?;
        s["listError"].is_string().then_some(s)
    });
    let e = failing["listError"].as_str().unwrap();
    assert!(e.contains("simulated tools/list failure"), "{failing}");
    assert_eq!(failing["state"], "ready", "{failing}");
    poll("the table to show the listing error", SOON, || {
        let table = d.run(&["servers"]);
        table
            .stdout
            .contains("simulated tools/list failure")
            .then_some(())
    });
    let listed = poll("the listing to be retried", SOON, || {
        let s = d.server("flaky")?;
        (s["tools"].as_u64() > Some(0)).then_some(s)
    });
    assert!(listed["listError"].is_null(), "{listed}");
}

// ---------------------------------------------------------------------------
// The registry, in-process

fn parsed(text: &str) -> HostConfig {
    mcphost::config::parse(text, Path::new("/cfg/config.json"), &|_| None).unwrap()
}

fn quick_policy() -> RestartPolicy {
    RestartPolicy {
        initial_backoff: Duration::from_millis(300),
        max_backoff: Duration::from_secs(1),
        reset_after: Duration::from_secs(60),
        max_start_failures: 3,
    }
}

fn status_of(reg: &Registry, name: &str) -> Arc<ServerStatus> {
    reg.statuses()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no server {name}"))
}

async fn wait_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + SOON;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Defect 16: a call to a server that is restarting failed at once with
/// "is restarting" instead of waiting for the new instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_during_a_restart_waits_for_the_server() {
    let cfg = parsed(&config_text(&[("s", entry(&["--tools", "1"], json!({})))]));
    let reg = Registry::start(&cfg, quick_opts(), quick_policy(), None);
    reg.settled(SOON).await;
    let old = status_of(&reg, "s").pid;
    reg.restart("s").await.unwrap();
    wait_until("the restart to begin", || {
        (status_of(&reg, "s").state != ServerState::Ready).then_some(())
    })
    .await;
    let t = Instant::now();
    let r = reg
        .call_tool(
            "s__echo",
            Some(common::raw(r#"{"text":"waited"}"#)),
            CallOptions::default(),
        )
        .await;
    let r = r.unwrap_or_else(|e| panic!("the call failed after {:?}: {e}", t.elapsed()));
    assert!(!r.is_error, "{r:?}");
    assert!(common::raw_text_of(&r.raw).contains("waited"), "{r:?}");
    assert_ne!(status_of(&reg, "s").pid, old);
    reg.shutdown().await;
}

/// Defect 14 (registry side): resources and prompts `list_changed` went out
/// on every rebuild, changed or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_goes_out_only_for_lists_whose_bytes_changed() {
    let cfg = parsed(&config_text(&[("s", entry(&["--tools", "1"], json!({})))]));
    let reg = Registry::start(&cfg, quick_opts(), quick_policy(), None);
    reg.settled(SOON).await;
    let old = status_of(&reg, "s").pid;
    let mut events = reg.subscribe();
    reg.restart("s").await.unwrap();
    // The registry forwards states in order: once it has the new instance's
    // `ready`, it has dropped the old lists' `listed` mark.
    loop {
        match tokio::time::timeout(SOON, events.recv()).await {
            Ok(Ok(RegistryEvent::ServerState(s)))
                if s.state == ServerState::Ready && s.pid != old =>
            {
                break;
            }
            Ok(Ok(_)) => {}
            other => panic!("no ready state after the restart: {other:?}"),
        }
    }
    reg.settled(SOON).await;
    let mut announced = Vec::new();
    while let Ok(ev) = events.try_recv() {
        // Only list announcements count (states and stderr lines go on).
        if !matches!(
            ev,
            RegistryEvent::ServerState(_) | RegistryEvent::Stderr { .. }
        ) {
            announced.push(format!("{ev:?}"));
        }
    }
    // The same server again: the same bytes in every list.
    assert_eq!(announced, Vec::<String>::new());
    reg.shutdown().await;
}

/// Defect 14 (registry side): a lagged supervisor-event channel was
/// ignored, so a lost `Connected` left its server unlisted for good and a
/// lost change left a stale list. A lag is a full resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagged_event_channel_resyncs_every_server() {
    const SERVERS: usize = 6;
    const ROUNDS: u64 = 5;
    let rounds = ROUNDS.to_string();
    let args = [
        "--tools",
        "2",
        "--list-changed-after-ms",
        "10",
        "--list-changed-count",
        &rounds,
    ];
    let servers: Vec<(String, Value)> = (0..SERVERS)
        .map(|i| (format!("s{i}"), entry(&args, json!({}))))
        .collect();
    let servers: Vec<(&str, Value)> = servers
        .iter()
        .map(|(n, e)| (n.as_str(), e.clone()))
        .collect();
    let cfg = parsed(&config_text(&servers));
    // Room for one event: nearly every burst overflows it.
    let reg = Registry::start_with_event_capacity(&cfg, quick_opts(), quick_policy(), None, 1);
    // The server's nine built-in tools, the generated and the dynamic ones.
    let want = 9 + 2 + ROUNDS as usize;
    wait_until(&format!("{want} tools for each server"), || {
        let catalog = reg.catalog();
        servers
            .iter()
            .all(|(n, _)| catalog.count_for(n) == want)
            .then_some(())
    })
    .await;
    let names: BTreeSet<String> = reg
        .catalog()
        .tools()
        .iter()
        .map(|t| t.server.clone())
        .collect();
    assert_eq!(names.len(), SERVERS);
    reg.shutdown().await;
}

/// `ready` means "its tools are in the catalog" (docs/ipc.md): no client
/// is told `ready`, by event or by status, before the first listing lands.
/// Seen from the Python binding: `ready` with 0 tools, then "unknown tool".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_announced_only_once_the_tools_are_in_the_catalog() {
    // Every answer takes 400 ms, tools/list too.
    let cfg = parsed(&config_text(&[(
        "s",
        entry(&["--delay-ms", "400"], json!({})),
    )]));
    let reg = Registry::start(&cfg, quick_opts(), quick_policy(), None);
    let mut events = reg.subscribe();
    let listed = |reg: &Registry| reg.catalog().tools().iter().any(|t| t.server == "s");
    let started = Instant::now();
    let mut polled_ready_unlisted = false;
    loop {
        if status_of(&reg, "s").state == ServerState::Ready && !listed(&reg) {
            polled_ready_unlisted = true;
        }
        match tokio::time::timeout(Duration::from_millis(20), events.recv()).await {
            Ok(Ok(RegistryEvent::ServerState(s))) if s.state == ServerState::Ready => {
                assert!(
                    listed(&reg),
                    "`ready` was announced before the tools were listed"
                );
                break;
            }
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) => panic!("{e}"),
        }
        assert!(started.elapsed() < SOON, "never ready");
    }
    assert!(
        !polled_ready_unlisted,
        "the status said `ready` before the tools were listed"
    );
    reg.shutdown().await;
}
