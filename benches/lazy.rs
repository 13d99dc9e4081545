//! Lazy start: a daemon with many real Node servers configured
//! `"start": "lazy"` (copies of server-everything, -memory and -filesystem
//! from the interop dir), their catalogs stored by an earlier run, answers
//! its first `tools/list` through the socket without spawning any of them.
//! Beside it, the same measure for a smaller number of eager servers: daemon
//! start until `tools/list` lists every one of their tools.
//!
//! Each measure is self-checking: the lazy listing must hold every stored
//! tool and the daemon must have no child process; the eager one must hold
//! every tool of its servers.
//!
//! Run with `cargo bench --bench lazy` (`MCPHOST_LAZY_SERVERS`, default 100;
//! `MCPHOST_LAZY_EAGER`, default 10; `MCPHOST_LAZY_ROUNDS`, default 5).
//! `cargo test --bench lazy` runs a short smoke (3 servers). Without the
//! interop node_modules (`MCPHOST_INTEROP_DIR`, default tests/interop) the
//! bundled test server stands in, and the output says so.

#[path = "common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{BenchResult, children_of, env_usize, median};

const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench-lazy","version":"0"}}}"#;

fn js(s: &str) -> String {
    serde_json::json!(s).to_string()
}

/// The `n` server entries: real Node servers in turn, or the test server.
fn entries(n: usize, interop: Option<&Path>, data: &Path, lazy: bool) -> String {
    let node = std::env::var("MCPHOST_NODE").unwrap_or_else(|_| "node".into());
    let start = if lazy { "lazy" } else { "eager" };
    let mut out = Vec::new();
    for i in 0..n {
        let members = match interop {
            Some(dir) => {
                let pkg = ["server-everything", "server-memory", "server-filesystem"][i % 3];
                let entry = dir.join(format!(
                    "node_modules/@modelcontextprotocol/{pkg}/dist/index.js"
                ));
                let mut args = vec![js(&entry.display().to_string())];
                let mut env = String::new();
                match pkg {
                    "server-filesystem" => args.push(js(&data.display().to_string())),
                    "server-memory" => {
                        env = format!(
                            r#", "env": {{ "MEMORY_FILE_PATH": {} }}"#,
                            js(&data.join(format!("memory-{i}.json")).display().to_string())
                        )
                    }
                    _ => {}
                }
                format!(
                    r#""command": {}, "args": [{}]{env}"#,
                    js(&node),
                    args.join(", ")
                )
            }
            None => format!(
                r#""command": {}, "args": ["--tools", "5"]"#,
                js(env!("CARGO_BIN_EXE_mcphost-testserver"))
            ),
        };
        out.push(format!(
            r#"    "s{i:03}": {{ {members}, "start": "{start}" }}"#
        ));
    }
    format!(
        "{{ \"loginShellPath\": false, \"mcpServers\": {{\n{}\n}} }}\n",
        out.join(",\n")
    )
}

/// A daemon with its own HOME (so its own catalog store); SIGTERMed and
/// reaped on drop.
struct Daemon {
    child: std::process::Child,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

fn spawn(home: &Path, dir: &Path, config: &str) -> BenchResult<Daemon> {
    let config_path = dir.join("daemon.json");
    std::fs::write(&config_path, config)?;
    let socket = dir.join("daemon.sock");
    let _ = std::fs::remove_file(&socket);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_mcphost"))
        .env("HOME", home)
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("MCPHOST_STATE_DIR")
        .arg("--socket")
        .arg(&socket)
        .arg("--config")
        .arg(&config_path)
        .arg("daemon")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    Ok(Daemon { child, socket })
}

/// A socket session: connect (retrying until `limit`), initialize.
fn session(socket: &Path, limit: Duration) -> BenchResult<(BufReader<UnixStream>, UnixStream)> {
    let deadline = Instant::now() + limit;
    let s = loop {
        match UnixStream::connect(socket) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => std::thread::sleep(Duration::from_micros(500)),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut w = s.try_clone()?;
    let mut r = BufReader::new(s);
    w.write_all(INITIALIZE.as_bytes())?;
    w.write_all(b"\n")?;
    response(&mut r, 1)?;
    w.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")?;
    Ok((r, w))
}

fn response(r: &mut BufReader<UnixStream>, id: i64) -> BenchResult<serde_json::Value> {
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err("the daemon closed the connection".into());
        }
        let v: serde_json::Value = serde_json::from_str(&line.replace("1e400", "1e300"))?;
        if v["id"] == id {
            return Ok(v);
        }
    }
}

fn tool_names(r: &mut BufReader<UnixStream>, w: &mut UnixStream) -> BenchResult<Vec<String>> {
    w.write_all(TOOLS_LIST.as_bytes())?;
    w.write_all(b"\n")?;
    let v = response(r, 2)?;
    let tools = v["result"]["tools"]
        .as_array()
        .ok_or_else(|| format!("no tools in {v}"))?;
    Ok(tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect())
}

/// The daemon's child processes (every thread's `children`).
/// Server processes the daemon `pid` runs: its descendants that are not
/// mcphost itself (the process supervisor, or a watchdog, is a fork of the
/// daemon; the servers are its children).
fn children(pid: u32) -> usize {
    let exe = |p: u32| std::fs::read_link(format!("/proc/{p}/exe")).ok();
    let own = exe(pid);
    let mut todo = children_of(pid);
    let mut servers = 0;
    while let Some(p) = todo.pop() {
        if exe(p) != own {
            servers += 1;
        }
        todo.extend(children_of(p));
    }
    servers
}

fn stored(home: &Path) -> usize {
    std::fs::read_dir(home.join(".local/share/mcphost/catalogs"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

/// Store every server's catalog: lazy daemons over batches of them, each
/// run until the batch has learned its lists and gone idle.
fn prime(home: &Path, dir: &Path, servers: usize, interop: Option<&Path>) -> BenchResult<()> {
    let all = entries(servers, interop, dir, true);
    // A lazy server with nothing stored starts once to learn its lists;
    // batches keep the Node processes alive at once few.
    let batch = env_usize("MCPHOST_LAZY_PRIME_BATCH", 10)?;
    let lines: Vec<&str> = all.lines().filter(|l| l.starts_with("    \"s")).collect();
    for chunk in lines.chunks(batch.max(1)) {
        let body: Vec<&str> = chunk.iter().map(|l| l.trim_end_matches(',')).collect();
        let config = format!(
            "{{ \"loginShellPath\": false, \"mcpServers\": {{\n{}\n}} }}\n",
            body.join(",\n")
        );
        let before = stored(home);
        let d = spawn(home, dir, &config)?;
        let deadline = Instant::now() + Duration::from_secs(180);
        while stored(home) < before + chunk.len() || children(d.child.id()) > 0 {
            if Instant::now() > deadline {
                return Err(format!(
                    "priming: {} of {} stored after 180 s",
                    stored(home) - before,
                    chunk.len()
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// Daemon start → first `tools/list` answered, lazily; checks the listing
/// and that nothing was spawned.
fn lazy_round(home: &Path, dir: &Path, config: &str, expect: usize) -> BenchResult<Duration> {
    let t0 = Instant::now();
    let d = spawn(home, dir, config)?;
    let (mut r, mut w) = session(&d.socket, Duration::from_secs(30))?;
    let names = tool_names(&mut r, &mut w)?;
    let took = t0.elapsed();
    if names.len() != expect {
        return Err(format!(
            "lazy tools/list had {} tools, expected {expect}",
            names.len()
        )
        .into());
    }
    let spawned = children(d.child.id());
    if spawned != 0 {
        return Err(format!("{spawned} processes spawned before any call").into());
    }
    Ok(took)
}

/// Daemon start → `tools/list` lists all `expect` tools of eager servers.
fn eager_round(home: &Path, dir: &Path, config: &str, expect: usize) -> BenchResult<Duration> {
    let t0 = Instant::now();
    let d = spawn(home, dir, config)?;
    let (mut r, mut w) = session(&d.socket, Duration::from_secs(30))?;
    let deadline = t0 + Duration::from_secs(300);
    loop {
        let n = tool_names(&mut r, &mut w)?.len();
        if n == expect {
            return Ok(t0.elapsed());
        }
        if n > expect || Instant::now() > deadline {
            return Err(format!("eager tools/list had {n} tools, expected {expect}").into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn main() -> BenchResult<()> {
    let benching = std::env::args().any(|a| a == "--bench");
    let (servers, eager, rounds) = if benching {
        (
            env_usize("MCPHOST_LAZY_SERVERS", 100)?,
            env_usize("MCPHOST_LAZY_EAGER", 10)?,
            env_usize("MCPHOST_LAZY_ROUNDS", 5)?,
        )
    } else {
        (3, 3, 1)
    };
    let interop = std::env::var_os("MCPHOST_INTEROP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop"));
    let interop = interop
        .join("node_modules/@modelcontextprotocol/server-everything")
        .exists()
        .then_some(interop);
    let kind = match &interop {
        Some(_) => "Node servers (server-everything, -memory, -filesystem in turn)",
        None => "mcphost-testserver copies (no interop node_modules)",
    };
    let home = tempfile::tempdir()?;
    let dir = tempfile::tempdir()?;
    let t = Instant::now();
    prime(home.path(), dir.path(), servers, interop.as_deref())?;
    println!(
        "primed {servers} stored catalogs in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let lazy_cfg = entries(servers, interop.as_deref(), dir.path(), true);
    // The stored tools are what every first listing must hold.
    let (expect, per) = {
        let d = spawn(home.path(), dir.path(), &lazy_cfg)?;
        let (mut r, mut w) = session(&d.socket, Duration::from_secs(30))?;
        let names = tool_names(&mut r, &mut w)?;
        let per: Vec<usize> = (0..eager)
            .map(|i| {
                let prefix = format!("s{i:03}__");
                names.iter().filter(|n| n.starts_with(&prefix)).count()
            })
            .collect();
        (names.len(), per)
    };
    if expect == 0 || per.contains(&0) {
        return Err("the stored catalogs list no tools".into());
    }
    let mut lazy = Vec::new();
    for _ in 0..rounds {
        lazy.push(lazy_round(home.path(), dir.path(), &lazy_cfg, expect)?);
    }
    let eager_cfg = entries(eager, interop.as_deref(), dir.path(), false);
    let eager_expect: usize = per.iter().sum();
    let mut eager_times = Vec::new();
    for _ in 0..rounds {
        eager_times.push(eager_round(
            home.path(),
            dir.path(),
            &eager_cfg,
            eager_expect,
        )?);
    }
    let lazy_med = median(lazy.clone());
    let eager_med = median(eager_times.clone());
    println!("servers: {kind}");
    println!(
        "lazy  {servers:>3} servers: daemon start -> first tools/list ({expect} tools), nothing spawned: median {:.1} ms (min {:.1}, max {:.1}, {rounds} rounds)",
        lazy_med.as_secs_f64() * 1e3,
        lazy.iter().min().copied().unwrap_or_default().as_secs_f64() * 1e3,
        lazy.iter().max().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    println!(
        "eager {eager:>3} servers: daemon start -> tools/list with all {eager_expect} tools: median {:.1} ms (min {:.1}, max {:.1}, {rounds} rounds)",
        eager_med.as_secs_f64() * 1e3,
        eager_times
            .iter()
            .min()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3,
        eager_times
            .iter()
            .max()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3,
    );
    Ok(())
}
