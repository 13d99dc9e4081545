//! `mcphost bridge` without the interop install: raw JSON-RPC on its stdio
//! relayed to a daemon that runs the bundled test server.

use crate::common;
use crate::common::bridge::Bridge;

use std::collections::HashSet;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use common::{Daemon, TESTSERVER, poll, ts_config};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn bridge_relays_a_session_and_exits_nonzero_when_the_daemon_dies() {
    let mut d = Daemon::start(&ts_config(&["--tools", "250"]));
    d.wait_ready(&["ts"], WAIT);
    let mut b = Bridge::start(d.command());

    let init = b.result(
        1,
        "initialize",
        r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bridge-test","version":"0"}}"#,
    );
    assert_eq!(init["protocolVersion"], "2025-11-25");
    assert_eq!(init["serverInfo"]["name"], "mcphost");
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    // Paged tools/list: more tools than one page holds.
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    for id in 2.. {
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }).to_string(),
            None => "{}".to_owned(),
        };
        let page = b.result(id, "tools/list", &params);
        pages += 1;
        names.extend(
            page["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned()),
        );
        cursor = page["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert!(pages >= 2, "one page held all {} tools", names.len());
    let unique: HashSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "a tool was listed twice");
    assert!(names.len() > 250, "{} tools", names.len());
    assert!(
        names.iter().any(|n| n == "ts__tool_0249"),
        "the last generated tool is missing from {} names",
        names.len()
    );

    let result = b.result(
        20,
        "tools/call",
        r#"{"name":"ts__echo","arguments":{"text":"through the bridge"}}"#,
    );
    assert_eq!(common::text_of(&result), "through the bridge", "{result}");

    // A second server joins: the catalog changes and the bridge forwards it.
    let r = d.run(&["servers", "add", "more", "--", TESTSERVER]);
    assert_eq!(r.code, 0, "{r:?}");
    b.until("notifications/tools/list_changed", |m| {
        m["method"] == "notifications/tools/list_changed"
    });

    // The daemon dies mid-session with a call in flight, and none comes
    // back (autostart is off here): the call fails at once with a clear
    // error, then the bridge says so and fails.
    b.send(r#"{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"ts__slow","arguments":{"ms":60000},"_meta":{"progressToken":"t21"}}}"#);
    b.until("the slow call's progress", |m| {
        m["method"] == "notifications/progress" && m["params"]["progressToken"] == "t21"
    });
    // SAFETY: kill(2) on the daemon we started.
    unsafe { libc::kill(d.pid() as libc::pid_t, libc::SIGKILL) };
    let failed = b.until("the in-flight call's error", |m| m["id"] == 21);
    let why = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("the daemon went away"), "{failed}");
    let status = poll("the bridge to exit", Duration::from_secs(30), || {
        b.child.try_wait().unwrap()
    });
    let mut stderr = String::new();
    std::io::Read::read_to_string(b.child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        !status.success(),
        "the bridge exited with {status}; stderr: {stderr}"
    );
    assert!(
        stderr.contains("lost the connection to the daemon") && stderr.contains("none came back"),
        "unclear message: {stderr}"
    );
    d.terminate(Duration::from_secs(5));
}

#[test]
fn a_bridge_keeps_its_hosts_session_when_the_daemon_is_killed_and_started_again() {
    let mut d = Daemon::start(&ts_config(&[]));
    d.wait_ready(&["ts"], WAIT);
    let mut b = Bridge::start(d.command());
    b.result(
        1,
        "initialize",
        r#"{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"kept-host","version":"0"}}"#,
    );
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    b.result(2, "logging/setLevel", r#"{"level":"debug"}"#);
    // In flight when the daemon dies: a slow call, and a call whose
    // server asked this host a question it has not answered.
    b.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ts__slow","arguments":{"ms":60000}}}"#);
    b.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ts__elicit","arguments":{"message":"Your name?"}}}"#);
    let asked = b.until("the server's question", |m| {
        m["method"] == "elicitation/create"
    });
    let asked_id = asked["id"].clone();

    d.crash_and_start_again();
    d.wait_ready(&["ts"], WAIT);

    let mut seen = Vec::new();
    let mut errors = HashSet::new();
    let mut cancelled = false;
    let mut changed = HashSet::new();
    while errors.len() < 2 || !cancelled || changed.len() < 3 {
        let m = b.until("what the restart tells the host", |_| true);
        if m["id"] == 3 || m["id"] == 4 {
            let why = m["error"]["message"].as_str().unwrap_or_default();
            assert!(why.contains("the daemon went away"), "{m}");
            errors.insert(m["id"].to_string());
        }
        if m["method"] == "notifications/cancelled" && m["params"]["requestId"] == asked_id {
            cancelled = true;
        }
        if let Some(method) = m["method"].as_str()
            && method.ends_with("/list_changed")
        {
            changed.insert(method.to_owned());
        }
        seen.push(m);
    }
    // The session is back without a new initialize from the host: the next
    // call works (the daemon refuses calls before initialize).
    let r = b.result(
        5,
        "tools/call",
        r#"{"name":"ts__echo","arguments":{"text":"still here"}}"#,
    );
    assert_eq!(common::text_of(&r), "still here", "{r}");
    // The bridge's own requests and their answers stay between it and the
    // daemon.
    assert!(
        seen.iter()
            .all(|m| !m["id"].to_string().contains("mcphost-bridge")),
        "{seen:#?}"
    );
    // The host's capabilities came back with its session: the server's
    // question reaches it again.
    b.send(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"ts__elicit","arguments":{"message":"Again?"}}}"#);
    let asked = b.until("the server's question after the restart", |m| {
        m["method"] == "elicitation/create"
    });
    b.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"action":"decline"}}}}"#,
        asked["id"]
    ));
    let r = b.until("the elicit call's answer", |m| m["id"] == 6);
    assert!(r.to_string().contains("decline"), "{r}");
    let (status, _) = b.close_and_wait();
    assert!(status.success(), "{status}");
}

#[test]
fn a_bridge_whose_client_is_done_leaves_at_once_and_one_still_waiting_gets_its_answer() {
    let d = Daemon::start(&ts_config(&[]));
    d.wait_ready(&["ts"], WAIT);
    let init = r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bridge-test","version":"0"}}"#;

    // Everything answered: stdin closing ends the bridge without a linger,
    // so the daemon sees the client go at once.
    let mut b = Bridge::start(d.command());
    b.result(1, "initialize", init);
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let (status, took) = b.close_and_wait();
    eprintln!("an idle bridge left {took:?} after its stdin closed");
    assert!(status.success(), "{status}");
    assert!(
        took < Duration::from_millis(400),
        "the bridge lingered {took:?}"
    );

    // A request still in flight when stdin closes is answered first.
    let mut b = Bridge::start(d.command());
    b.result(1, "initialize", init);
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    b.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ts__slow","arguments":{"ms":300}}}"#);
    b.stdin = None;
    let reply = b.until("the call's answer", |m| m["id"] == 2);
    assert!(reply.get("result").is_some(), "{reply}");
    assert!(b.child.wait().unwrap().success());
}

#[test]
fn a_bridge_relays_big_messages_split_writes_batches_and_a_last_frame_without_newline() {
    let d = Daemon::start(&ts_config(&[]));
    d.wait_ready(&["ts"], WAIT);
    let init = r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bridge-test","version":"0"}}"#;
    let mut b = Bridge::start(d.command());
    b.result(1, "initialize", init);
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);

    // A 1 MB argument, answered whole.
    let big = "x".repeat(1 << 20);
    let result = b.result(
        2,
        "tools/call",
        &format!(r#"{{"name":"ts__echo","arguments":{{"text":"{big}"}}}}"#),
    );
    assert_eq!(common::text_of(&result).len(), big.len());

    // One frame written in two pieces, blank lines around it.
    {
        let stdin = b.stdin.as_mut().unwrap();
        stdin
            .write_all(b"\n  \n{\"jsonrpc\":\"2.0\",\"id\":3,")
            .unwrap();
        stdin.flush().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        stdin
            .write_all(b"\"method\":\"tools/call\",\"params\":{\"name\":\"ts__echo\",\"arguments\":{\"text\":\"halves\"}}}\n\n")
            .unwrap();
        stdin.flush().unwrap();
    }
    let reply = b.until("the split frame's answer", |m| m["id"] == 3);
    assert_eq!(common::text_of(&reply["result"]), "halves", "{reply}");

    // A batch: both answers come back.
    b.send(
        r#"[{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ts__echo","arguments":{"text":"a"}}},{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ts__echo","arguments":{"text":"b"}}}]"#,
    );
    let mut want: HashSet<u64> = [4, 5].into();
    while !want.is_empty() {
        let m = b.until("the batch's answers", |m| {
            m.is_array() || m["id"].as_u64().is_some_and(|i| i == 4 || i == 5)
        });
        for item in m.as_array().cloned().unwrap_or_else(|| vec![m.clone()]) {
            want.remove(&item["id"].as_u64().unwrap_or(0));
        }
    }

    // The last frame has no newline and stdin closes right after: it is
    // still relayed, and the bridge waits for its answer.
    {
        let stdin = b.stdin.as_mut().unwrap();
        stdin
            .write_all(br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"ts__slow","arguments":{"ms":300}}}"#)
            .unwrap();
    }
    b.stdin = None;
    let reply = b.until("the unterminated frame's answer", |m| m["id"] == 6);
    assert!(reply.get("result").is_some(), "{reply}");
    assert!(b.child.wait().unwrap().success());
}

/// A host that cannot send `mcphost/session/configure` (Cursor, Claude
/// Desktop) gets a profile from the bridge's command line or environment.
#[test]
fn a_bridge_profile_shapes_the_hosts_session_by_flag_or_env_and_an_unknown_one_fails_at_start() {
    let config = format!(
        r#"{{ "loginShellPath": false,
              "profiles": {{ "find": {{ "toolMode": "search" }}, "few": {{ "maxTools": 2 }} }},
              "mcpServers": {{ "ts": {{ {} }} }} }}"#,
        common::ts_entry(&[])
    );
    let d = Daemon::start(&config);
    d.wait_ready(&["ts"], WAIT);
    let init = r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"cursor-like","version":"0"}}"#;
    let names = |r: &Value| -> Vec<String> {
        r["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools in {r}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };

    // Search mode by flag: three meta-tools, and calls through call_tool.
    let mut b = Bridge::start_with(d.command(), &["--profile", "find"]);
    let r = b.result(1, "initialize", init);
    assert_eq!(r["protocolVersion"], "2025-11-25", "{r}");
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let listed = b.result(2, "tools/list", "{}");
    assert_eq!(
        names(&listed),
        ["search_tools", "describe_tool", "call_tool"]
    );
    let r = b.result(
        3,
        "tools/call",
        r#"{"name":"call_tool","arguments":{"name":"ts__echo","arguments":{"text":"via call_tool"}}}"#,
    );
    assert_eq!(common::text_of(&r), "via call_tool", "{r}");
    let (status, _) = b.close_and_wait();
    assert!(status.success(), "{status}");

    // A budget by environment: two tools, and the cut is in the host's log.
    let mut b = {
        let mut cmd = d.command();
        cmd.env("MCPHOST_PROFILE", "few");
        Bridge::start(cmd)
    };
    b.result(1, "initialize", init);
    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // The warning comes with the first listing (not before initialize,
    // where a host must get nothing but its answers).
    b.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#);
    let (mut listed, mut warning) = (None, None);
    while listed.is_none() || warning.is_none() {
        let m = b.until("the listing and the cut's warning", |m| {
            m["id"] == 2 || m["method"] == "notifications/message"
        });
        match m["id"] == 2 {
            true => listed = Some(m),
            false => warning = Some(m),
        }
    }
    let (listed, warning) = (listed.unwrap(), warning.unwrap());
    assert_eq!(names(&listed["result"]).len(), 2, "{listed}");
    assert_eq!(warning["params"]["level"], "warning", "{warning}");
    assert!(
        warning["params"]["data"]
            .as_str()
            .unwrap_or("")
            .contains("maxTools"),
        "{warning}"
    );
    drop(b);

    // An unknown profile: the bridge fails before the host's first message,
    // naming it and the profiles there are.
    let out = d
        .command()
        .args(["bridge", "--profile", "nope"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("--profile nope") && stderr.contains("find") && stderr.contains("few"),
        "unclear: {stderr}"
    );
}

#[test]
fn hosts_that_connect_while_the_daemon_starts_its_servers_get_them_all_in_their_first_listing() {
    // Slow servers: each answers everything 400 ms late, so a daemon that
    // has just started has none of their tools yet.
    let slow = common::ts_entry(&["--delay-ms", "400"]);
    let d = Daemon::start(&common::servers_config(&[
        ("s1", slow.clone()),
        ("s2", slow.clone()),
        ("s3", slow),
    ]));
    let firsts: Vec<Vec<String>> = std::thread::scope(|s| {
        let all: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let mut b = Bridge::start(d.command());
                    b.result(
                        1,
                        "initialize",
                        r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"early","version":"0"}}"#,
                    );
                    b.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
                    let r = b.result(2, "tools/list", "{}");
                    r["tools"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t["name"].as_str().unwrap().to_owned())
                        .collect()
                })
            })
            .collect();
        all.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, names) in firsts.iter().enumerate() {
        for s in ["s1", "s2", "s3"] {
            assert!(
                names.contains(&format!("{s}__echo")),
                "host {i}'s first listing lacks {s}: {names:?}"
            );
        }
    }
}
