//! Statistics, settings and the daemon process shared by the benchmarks.
#![allow(dead_code)]

pub mod plot;

use std::time::Duration;

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The direct children of process `pid` (Linux: every thread's
/// `/proc/PID/task/TID/children`); none once it is gone.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// A positive integer from the environment, or `default`.
pub fn env_usize(name: &str, default: usize) -> BenchResult<usize> {
    match std::env::var(name) {
        Ok(v) => Ok(v
            .trim()
            .parse::<usize>()
            .map_err(|e| format!("{name}={v:?}: {e}"))?
            .max(1)),
        Err(_) => Ok(default),
    }
}

/// One round of one row: every call's latency, summarized.
#[derive(Clone, Copy)]
pub struct Round {
    pub calls: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub mean: Duration,
    pub per_sec: f64,
}

impl Round {
    pub fn new(mut samples: Vec<Duration>, wall: Duration) -> Round {
        samples.sort_unstable();
        let n = samples.len().max(1);
        let pct = |p: usize| samples[((n * p).div_ceil(100)).clamp(1, n) - 1];
        let total: Duration = samples.iter().sum();
        Round {
            calls: samples.len(),
            p50: pct(50),
            p99: pct(99),
            mean: total / u32::try_from(n).unwrap_or(u32::MAX),
            per_sec: samples.len() as f64 / wall.as_secs_f64(),
        }
    }
}

pub fn median<T: Copy + PartialOrd>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

/// Per-metric medians across rounds.
pub fn summarize(rounds: &[Round]) -> Round {
    Round {
        calls: rounds.first().map_or(0, |r| r.calls),
        p50: median(rounds.iter().map(|r| r.p50).collect()),
        p99: median(rounds.iter().map(|r| r.p99).collect()),
        mean: median(rounds.iter().map(|r| r.mean).collect()),
        per_sec: median(rounds.iter().map(|r| r.per_sec).collect()),
    }
}

/// Microseconds with one decimal.
pub fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// A real `mcphost daemon` process, stopped by SIGTERM (so it stops its
/// servers) and reaped on drop.
pub struct Daemon {
    child: std::process::Child,
}

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
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

/// Starts the daemon with `config` (JSON text) in `dir` (its socket is
/// `dir/daemon.sock`), and connects a client to it once it listens (within
/// 30 s).
pub async fn start_daemon(
    dir: &std::path::Path,
    config: &str,
) -> BenchResult<(Daemon, mcphost::client::ServerClient)> {
    use std::process::Stdio;
    let config_path = dir.join("daemon.json");
    std::fs::write(&config_path, config)?;
    let socket = dir.join("daemon.sock");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_mcphost"))
        .arg("--socket")
        .arg(&socket)
        .arg("--config")
        .arg(&config_path)
        .arg("daemon")
        // Its eras and audit log stay in the bench's directory.
        .env("MCPHOST_STATE_DIR", dir.join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let d = Daemon { child };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let connect = || async {
        let conn = mcphost::ipc::connect(&socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES).await?;
        let opts = mcphost::client::ClientOptions::default();
        BenchResult::Ok(mcphost::client::ServerClient::connect("daemon", conn, opts).await?)
    };
    loop {
        match connect().await {
            Ok(client) => return Ok((d, client)),
            Err(e) if std::time::Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
