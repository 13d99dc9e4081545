//! Start-up and memory at scale: N cheap stdio servers (the test server)
//! configured in a real `mcphost daemon`, against the official Rust SDK
//! client (`rmcp`) starting the same N servers in one process.
//!
//! - mcphost: the daemon's own start-up time, `settledAfterMs` of
//!   `mcphost/status` (engine start until every configured server is ready
//!   or failed), its RSS once they are all ready (children excluded), and
//!   its live tokio tasks, and the PSS of all of mcphost's own processes
//!   (the daemon and every process it started that is not a server: the
//!   per-server watchdogs or the supervisor), servers excluded.
//! - rmcp: a child process (this bench binary again) that starts N
//!   `TokioChildProcess` clients concurrently, times until every one has
//!   initialized, and reports its own RSS while it holds them.
//!
//! Each round runs every count for both, alternating; the table shows
//! medians over rounds. Every server is checked: the daemon must report N
//! ready, and each rmcp client must answer an `echo` call.
//!
//! `cargo bench --bench scale` (counts 1, 10, 50, 100; 5 rounds).
//! `MCPHOST_BENCH_ROUNDS`, `MCPHOST_SCALE_COUNTS=1,10,100` change the size.
//! `MCPHOST_BENCH_PLOTS=DIR` writes `scale-start.png` and `scale-rss.png`.
//! `cargo test --bench scale` runs one short round.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use mcphost::client::{CallOptions, ServerClient};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

#[cfg(target_os = "linux")]
use common::children_of;
use common::plot::{self, Series};
use common::{BenchResult, env_usize, median, start_daemon};

const TESTSERVER: &str = env!("CARGO_BIN_EXE_mcphost-testserver");
/// Set in the child that plays the rmcp side: how many servers to start.
const RMCP_CHILD: &str = "MCPHOST_SCALE_RMCP_CHILD";

/// One measurement of one side at one count.
#[derive(Clone, Copy, Debug)]
struct Sample {
    start: Duration,
    rss_kib: u64,
    /// PSS of the side's own processes (servers excluded), and how many.
    pss_kib: u64,
    procs: usize,
    tasks: Option<u64>,
}

/// Resident set of a process, in KiB.
fn rss_kib(pid: u32) -> BenchResult<u64> {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let line = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .ok_or("no VmRSS in /proc/PID/status")?;
        Ok(line
            .split_whitespace()
            .nth(1)
            .ok_or("VmRSS without a value")?
            .parse()?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let out = std::process::Command::new("ps")
            .args(["-o", "rss=", "-p", &pid.to_string()])
            .output()?;
        Ok(String::from_utf8(out.stdout)?.trim().parse()?)
    }
}

/// PSS (proportional set size: shared pages split between their sharers)
/// of `root` and every descendant that is not a server, in KiB, and how many
/// processes that was. A server is a process whose executable is `server`;
/// what it starts is the server's too.
#[cfg(target_os = "linux")]
fn own_pss_kib(root: u32, server: &Path) -> BenchResult<(u64, usize)> {
    let server = std::fs::canonicalize(server)?;
    let (mut total, mut procs) = (0u64, 0usize);
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        // A server and what it starts are the server's, not ours.
        if std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .as_deref()
            == Some(server.as_path())
        {
            continue;
        }
        todo.extend(children_of(pid));
        let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
        let pss: u64 = rollup
            .lines()
            .find(|l| l.starts_with("Pss:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .ok_or("no Pss in smaps_rollup")?
            .parse()?;
        total = total.checked_add(pss).ok_or("PSS overflow")?;
        procs += 1;
    }
    Ok((total, procs))
}

/// Not measured off Linux: `smaps_rollup` is Linux's.
#[cfg(not(target_os = "linux"))]
fn own_pss_kib(root: u32, _server: &Path) -> BenchResult<(u64, usize)> {
    Ok((rss_kib(root)?, 1))
}

fn config(n: usize) -> String {
    let servers: serde_json::Map<String, serde_json::Value> = (0..n)
        .map(|i| {
            (
                format!("s{i}"),
                serde_json::json!({ "command": TESTSERVER, "args": [] }),
            )
        })
        .collect();
    serde_json::json!({ "mcpServers": servers, "loginShellPath": false }).to_string()
}

async fn status(client: &ServerClient) -> BenchResult<serde_json::Value> {
    let raw = client
        .request_raw("mcphost/status", None, CallOptions::default())
        .await?;
    Ok(serde_json::from_str(raw.get())?)
}

async fn mcphost_once(dir: &Path, n: usize) -> BenchResult<Sample> {
    let (daemon, client) = start_daemon(dir, &config(n)).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let st = loop {
        let st = status(&client).await?;
        if st["settledAfterMs"].is_number() {
            break st;
        }
        if Instant::now() > deadline {
            return Err(format!("{n} servers did not settle within 60 s: {st}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    if st["ready"].as_u64() != Some(n as u64) {
        return Err(format!("the daemon settled with {} of {n} ready", st["ready"]).into());
    }
    let ms = st["settledAfterMs"].as_f64().ok_or("settledAfterMs")?;
    // Let the last listings' buffers be freed before reading the RSS.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss = rss_kib(daemon.pid())?;
    let (pss_kib, procs) = own_pss_kib(daemon.pid(), Path::new(TESTSERVER))?;
    let tasks = status(&client).await?["runtime"]["aliveTasks"].as_u64();
    client.shutdown().await;
    drop(daemon);
    Ok(Sample {
        start: Duration::from_secs_f64(ms / 1e3),
        rss_kib: rss,
        pss_kib,
        procs,
        tasks,
    })
}

fn rmcp_once(n: usize) -> BenchResult<Sample> {
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe)
        .env(RMCP_CHILD, n.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("the rmcp child failed: {}", out.status).into());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok(Sample {
        start: Duration::from_secs_f64(v["ms"].as_f64().ok_or("ms")? / 1e3),
        rss_kib: v["rssKib"].as_u64().ok_or("rssKib")?,
        pss_kib: v["pssKib"].as_u64().ok_or("pssKib")?,
        procs: 1,
        tasks: None,
    })
}

/// The rmcp side, in its own process so its RSS is its own.
fn rmcp_child(n: usize) -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let started = Instant::now();
        let clients = futures_util::future::join_all((0..n).map(|_| async {
            let cmd = tokio::process::Command::new(TESTSERVER);
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::null())
                .spawn()?;
            BenchResult::Ok(().serve(transport).await?)
        }))
        .await;
        let took = started.elapsed();
        let clients = clients.into_iter().collect::<BenchResult<Vec<_>>>()?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let rss = rss_kib(std::process::id())?;
        let (pss, _) = own_pss_kib(std::process::id(), Path::new(TESTSERVER))?;
        // Every one of them answers.
        for (i, c) in clients.iter().enumerate() {
            let text = format!("c{i}");
            let args = serde_json::json!({ "text": text });
            let r = c
                .peer()
                .call_tool(
                    CallToolRequestParams::new("echo")
                        .with_arguments(args.as_object().cloned().unwrap_or_default()),
                )
                .await?;
            let echoed = r
                .content
                .first()
                .and_then(|c| c.as_text())
                .map(|t| t.text.as_str());
            if echoed != Some(text.as_str()) {
                return Err(format!("rmcp client {i} echoed {echoed:?}").into());
            }
        }
        println!(
            "{}",
            serde_json::json!({ "ms": took.as_secs_f64() * 1e3, "rssKib": rss, "pssKib": pss })
        );
        for c in clients {
            let _ = c.cancel().await;
        }
        Ok(())
    })
}

fn main() -> BenchResult<()> {
    if let Ok(n) = std::env::var(RMCP_CHILD) {
        return rmcp_child(n.parse()?);
    }
    let benching = std::env::args().any(|a| a == "--bench");
    let rounds = env_usize("MCPHOST_BENCH_ROUNDS", if benching { 5 } else { 1 })?;
    let counts: Vec<usize> = match std::env::var("MCPHOST_SCALE_COUNTS") {
        Ok(v) => v
            .split(',')
            .map(|s| s.trim().parse::<usize>())
            .collect::<Result<_, _>>()?,
        Err(_) if benching => vec![1, 10, 50, 100],
        Err(_) => vec![1, 10],
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut ours: Vec<Vec<Sample>> = vec![Vec::new(); counts.len()];
    let mut theirs: Vec<Vec<Sample>> = vec![Vec::new(); counts.len()];
    for round in 0..rounds {
        for (i, &n) in counts.iter().enumerate() {
            let dir = tempfile::tempdir()?;
            // Alternate which side goes first.
            let (m, r) = if round % 2 == 0 {
                let m = rt.block_on(mcphost_once(dir.path(), n))?;
                (m, rmcp_once(n)?)
            } else {
                let r = rmcp_once(n)?;
                (rt.block_on(mcphost_once(dir.path(), n))?, r)
            };
            eprintln!(
                "round {round} n={n}: mcphost {:.1} ms {} KiB RSS {} KiB PSS in {} processes, rmcp {:.1} ms {} KiB RSS {} KiB PSS",
                m.start.as_secs_f64() * 1e3,
                m.rss_kib,
                m.pss_kib,
                m.procs,
                r.start.as_secs_f64() * 1e3,
                r.rss_kib,
                r.pss_kib
            );
            ours[i].push(m);
            theirs[i].push(r);
        }
    }
    let ms = |v: &[Sample]| median(v.iter().map(|s| s.start.as_secs_f64() * 1e3).collect());
    let mib = |v: &[Sample]| median(v.iter().map(|s| s.rss_kib as f64 / 1024.0).collect());
    let pss_mb = |v: &[Sample]| median(v.iter().map(|s| s.pss_kib as f64 * 1.024e-3).collect());
    println!(
        "| servers | mcphost start ms | rmcp start ms | start vs rmcp | mcphost RSS MiB | rmcp RSS MiB | mcphost PSS MB (processes) | rmcp PSS MB | mcphost tasks |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, &n) in counts.iter().enumerate() {
        let tasks = median(ours[i].iter().map(|s| s.tasks.unwrap_or(0)).collect());
        let procs = median(ours[i].iter().map(|s| s.procs).collect());
        println!(
            "| {n} | {:.1} | {:.1} | {:.2}× | {:.1} | {:.1} | {:.1} ({procs}) | {:.1} | {tasks} |",
            ms(&ours[i]),
            ms(&theirs[i]),
            ms(&ours[i]) / ms(&theirs[i]),
            mib(&ours[i]),
            mib(&theirs[i]),
            pss_mb(&ours[i]),
            pss_mb(&theirs[i]),
        );
    }
    if let Ok(dir) = std::env::var("MCPHOST_BENCH_PLOTS") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir)?;
        let series = |label: &str, v: &[Vec<Sample>], f: &dyn Fn(&[Sample]) -> f64| Series {
            label: label.to_owned(),
            points: counts
                .iter()
                .zip(v)
                .map(|(&n, s)| (n as f64, f(s)))
                .collect(),
        };
        plot::lines(
            &dir.join("scale-start.png"),
            "N stdio servers configured: all ready (median)",
            "servers",
            "ms",
            &[
                series("mcphost daemon", &ours, &ms),
                series("rmcp", &theirs, &ms),
            ],
        )?;
        plot::lines(
            &dir.join("scale-rss.png"),
            "RSS holding N live servers, children excluded (median)",
            "servers",
            "MiB",
            &[
                series("mcphost daemon", &ours, &mib),
                series("rmcp", &theirs, &mib),
            ],
        )?;
        eprintln!("plots written to {}", dir.display());
    }
    // What one more idle server costs: the slope between the smallest and
    // the largest count.
    if let (Some(first), Some(last)) = (counts.first(), counts.last())
        && last > first
    {
        let (a, b) = (0, counts.len() - 1);
        let per =
            |f: &dyn Fn(&[Sample]) -> f64| (f(&ours[b]) - f(&ours[a])) / (last - first) as f64;
        let kib = per(&|v| mib(v) * 1024.0);
        let pss_kib = per(&|v| pss_mb(v) / 1.024e-3);
        let tasks = per(&|v| median(v.iter().map(|s| s.tasks.unwrap_or(0) as f64).collect()));
        println!();
        println!(
            "per idle server (from {first} to {last} servers): daemon {kib:.0} KiB RSS and {tasks:.1} tasks; all of mcphost's processes {pss_kib:.0} KiB PSS"
        );
        let goal = ms(&ours[b]) / ms(&theirs[b]);
        println!();
        println!("| goal | measured | |");
        println!("|---|---:|---|");
        println!(
            "| {last} servers ready ≤ 1.5× rmcp | {goal:.2}× | {} |",
            if goal <= 1.5 { "met" } else { "**missed**" }
        );
        let rss = mib(&ours[b]);
        let pss = pss_mb(&ours[b]);
        println!(
            "| PSS of mcphost's own processes with {last} live servers ≤ 30 MB | {pss:.1} MB | {} |",
            if pss <= 30.0 { "met" } else { "**missed**" }
        );
        println!(
            "| per idle server ≤ 80 KiB daemon RSS and ≤ 4 tasks | {kib:.0} KiB, {tasks:.1} tasks | {} |",
            if kib <= 80.0 && tasks <= 4.0 {
                "met"
            } else {
                "**missed**"
            }
        );
        println!(
            "| daemon RSS with {last} live servers ≤ 15 MB | {rss:.1} MiB | {} |",
            if rss * 1.048_576 <= 15.0 {
                "met"
            } else {
                "**missed**"
            }
        );
    }
    Ok(())
}
