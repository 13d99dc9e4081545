//! `mcphost logs -f [NAME]`: servers' stderr lines, log notifications and
//! state changes, each line named by its server, until Ctrl-C; bounded
//! against a server that floods stderr. With `--direct`, and through a
//! daemon.

use crate::common;

use std::io::BufRead as _;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Daemon, Sandbox, TESTSERVER, js};

/// `mcphost ARGS` with stdout read line by line on a thread.
struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Follower {
    fn start(sb: &Sandbox, args: &[&str]) -> Follower {
        let mut child = sb
            .command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follower {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one satisfies `f`; panics with all seen after `limit`.
    fn until(&mut self, what: &str, limit: Duration, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if f(&line) {
                        return line;
                    }
                }
                Err(_) => {
                    let stderr = self.stop_now();
                    panic!(
                        "no line {what} within {limit:?}; stdout:\n{}\nstderr:\n{stderr}",
                        self.seen.join("\n")
                    );
                }
            }
        }
    }

    /// Every line for `d`.
    fn collect_for(&mut self, d: Duration) -> Vec<String> {
        let deadline = Instant::now() + d;
        let mut got = Vec::new();
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            got.push(line);
        }
        self.seen.extend(got.iter().cloned());
        got
    }

    fn stop_now(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    }

    /// Ctrl-C: the follower must end by itself, with status 0.
    fn interrupt(mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "logs -f after Ctrl-C: {st}");
                return;
            }
            if Instant::now() >= deadline {
                let stderr = self.stop_now();
                panic!("logs -f did not end after Ctrl-C; stderr:\n{stderr}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn chatty(name: &str) -> String {
    format!("{name}={} --chatter-ms 100", shell_words::quote(TESTSERVER))
}

#[test]
fn direct_follow_names_the_server_on_every_line() {
    let sb = Sandbox::new();
    let (a, b) = (chatty("alpha"), chatty("beta"));
    let mut f = Follower::start(&sb, &["--direct", &a, "--direct", &b, "logs", "-f"]);
    let limit = Duration::from_secs(20);
    // A stderr line and a notifications/message from each server.
    for server in ["alpha", "beta"] {
        f.until(&format!("{server}'s stderr"), limit, |l| {
            l.starts_with(&format!("{server} stderr: mcphost-testserver: tick "))
        });
        f.until(&format!("{server}'s log message"), limit, |l| {
            l.starts_with(&format!("{server} info [mcphost-testserver]: tick "))
        });
    }
    f.interrupt();
}

#[test]
fn direct_follow_of_one_server_shows_only_it() {
    let sb = Sandbox::new();
    let (a, b) = (chatty("alpha"), chatty("beta"));
    let mut f = Follower::start(
        &sb,
        &[
            "--json", "--direct", &a, "--direct", &b, "logs", "-f", "beta",
        ],
    );
    let first = f.until("from beta", Duration::from_secs(20), |l| l.contains("tick"));
    let mut lines = vec![first];
    lines.extend(f.collect_for(Duration::from_millis(1500)));
    let kinds: std::collections::BTreeSet<String> = lines
        .iter()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert_eq!(v["server"], "beta", "{l}");
            v["kind"].as_str().unwrap().to_owned()
        })
        .collect();
    assert!(
        kinds.contains("stderr") && kinds.contains("log"),
        "{lines:#?}"
    );
    // A log line keeps the server's params as sent.
    let log = lines
        .iter()
        .find(|l| l.contains(r#""kind":"log""#))
        .unwrap();
    assert!(
        log.contains(r#""params":{"data":"tick "#)
            && log.ends_with(r#"","level":"info","logger":"mcphost-testserver"}}"#),
        "{log}"
    );
    f.interrupt();

    // An unknown name is an error, not an empty follow.
    let r = sb.run(&["--direct", &a, "logs", "-f", "gamma"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("unknown server \"gamma\""), "{r:?}");
}

#[test]
fn direct_follow_shows_state_changes() {
    let sb = Sandbox::new();
    // Exits after 1.5 s each time it is started: restarting, then ready.
    let spec = format!(
        "brief=timeout 1.5 {} --chatter-ms 200",
        shell_words::quote(TESTSERVER)
    );
    let mut f = Follower::start(&sb, &["--direct", &spec, "logs", "-f"]);
    let limit = Duration::from_secs(20);
    let down = f.until("saying it restarts", limit, |l| {
        l.starts_with("brief state: restarting")
    });
    assert!(down.contains("exited with status 124"), "{down}");
    f.until("saying it is ready again", limit, |l| {
        l == "brief state: ready"
    });
    f.until("with its stderr again", limit, |l| {
        l.starts_with("brief stderr: mcphost-testserver: tick")
    });
    f.interrupt();
}

#[test]
fn a_stderr_flood_is_bounded_and_says_what_it_dropped() {
    let sb = Sandbox::new();
    let spec = format!("flood={} --stderr-flood", shell_words::quote(TESTSERVER));
    let mut f = Follower::start(&sb, &["--direct", &spec, "logs", "-f"]);
    let started = Instant::now();
    let note = f.until("about dropped lines", Duration::from_secs(20), |l| {
        l.contains("stderr lines dropped]")
    });
    let n: u64 = note
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no count in {note}"));
    assert!(n > 0, "{note}");
    let more = f.collect_for(Duration::from_secs(2));
    let secs = started.elapsed().as_secs() + 1;
    let shown = f
        .seen
        .iter()
        .filter(|l| l.starts_with("flood stderr: mcphost-testserver flood line"))
        .count() as u64;
    // 1000 lines a second at most (the flood writes about 100 a millisecond).
    assert!(shown <= 1000 * secs, "{shown} lines in {secs} s");
    assert!(
        more.iter().any(|l| l.contains("stderr lines dropped]")),
        "the note repeats while the flood goes on"
    );
    f.interrupt();
}

fn chatty_config() -> String {
    format!(
        r#"{{ "loginShellPath": false, "mcpServers": {{
            "alpha": {{ "command": {ts}, "args": ["--chatter-ms", "100", "--stderr-lines", "3"] }},
            "beta": {{ "command": {ts}, "args": ["--chatter-ms", "100"] }}
        }} }}"#,
        ts = js(TESTSERVER)
    )
}

#[test]
fn logs_without_follow_shows_the_stderr_tail() {
    let d = Daemon::start(&chatty_config());
    d.wait_ready(&["alpha"], Duration::from_secs(20));
    let r = d.run(&["logs", "alpha", "--lines", "2"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout.lines().count(), 2, "{r:?}");
    let r = d.run(&["logs"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("needs a server NAME"), "{r:?}");
    let r = d.run(&["logs", "-f", "gamma"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("unknown server \"gamma\""), "{r:?}");
}

#[test]
fn daemon_follow_names_the_server_on_every_line() {
    let d = Daemon::start(&chatty_config());
    d.wait_ready(&["alpha", "beta"], Duration::from_secs(20));
    let mut f = Follower::start(&d, &["logs", "-f"]);
    let limit = Duration::from_secs(20);
    for server in ["alpha", "beta"] {
        f.until(&format!("{server}'s stderr"), limit, |l| {
            l.starts_with(&format!("{server} stderr: mcphost-testserver: tick "))
        });
        f.until(&format!("{server}'s log message"), limit, |l| {
            l.starts_with(&format!("{server} info [mcphost-testserver]: tick "))
        });
    }
    // A state change reaches the follower too.
    assert_eq!(d.run(&["servers", "restart", "beta"]).code, 0);
    f.until("beta restarting", limit, |l| l.starts_with("beta state: "));
    f.until("beta ready again", limit, |l| l == "beta state: ready");
    f.interrupt();

    // Following one server shows no other.
    let mut f = Follower::start(&d, &["logs", "-f", "beta"]);
    f.until("from beta", limit, |l| l.starts_with("beta stderr: "));
    let lines = f.collect_for(Duration::from_millis(1500));
    assert!(lines.iter().all(|l| l.starts_with("beta ")), "{lines:#?}");
    f.interrupt();
}
