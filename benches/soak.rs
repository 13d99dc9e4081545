//! Soak: many short socket connections against a real `mcphost daemon`
//! process, as a host that runs a CLI command every few seconds all day
//! would make. Each cycle connects, sends `initialize`, reads the answer and
//! closes. Reports the daemon's RSS and open descriptors (from
//! `/proc/<pid>/status` and `/proc/<pid>/fd`) and its live clients
//! (`mcphost/status`) before and after.
//!
//! Run with `cargo bench --bench soak` (100,000 cycles; `MCPHOST_SOAK_CYCLES`
//! overrides). `cargo test --benches` runs a short smoke. Linux only for the
//! RSS and descriptor figures; elsewhere they read as "n/a".

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{BenchResult, env_usize, start_daemon};
use mcphost::client::ServerClient;
use mcphost::transport::TransportEvent;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"soak","version":"0"}}}"#;
/// Cycles before the second baseline: allocator arenas and runtime buffers
/// reach their working size.
const WARMUP: usize = 1000;

/// What one look at the daemon process shows.
#[derive(Clone, Copy)]
struct Sample {
    rss_kib: Option<u64>,
    fds: Option<usize>,
    clients: Option<u64>,
}

#[cfg(target_os = "linux")]
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(target_os = "linux")]
fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

// macOS: no /proc; the client count still applies.
#[cfg(not(target_os = "linux"))]
fn rss_kib(_pid: u32) -> Option<u64> {
    None
}

#[cfg(not(target_os = "linux"))]
fn open_fds(_pid: u32) -> Option<usize> {
    None
}

/// The daemon's view once closed clients are gone: waits (up to 10 s)
/// until only `status` (our one client) is connected.
async fn sample(pid: u32, status: &ServerClient) -> BenchResult<Sample> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let clients = loop {
        let text = status
            .request_raw("mcphost/status", None, Default::default())
            .await?;
        let v: serde_json::Value = serde_json::from_str(text.get())?;
        let clients = v["clients"].as_u64();
        if clients.is_none_or(|c| c <= 1) || Instant::now() >= deadline {
            break clients;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    Ok(Sample {
        rss_kib: rss_kib(pid),
        fds: open_fds(pid),
        clients,
    })
}

/// connect → initialize → close, `n` times in a row.
async fn cycles(socket: &Path, n: usize) -> BenchResult<()> {
    for i in 0..n {
        let mut conn = mcphost::ipc::connect(socket, 1 << 20).await?;
        conn.outbound.send(INITIALIZE.into()).await?;
        match tokio::time::timeout(Duration::from_secs(10), conn.inbound.recv()).await {
            Ok(Some(TransportEvent::Frame(line))) if line.contains("\"result\"") => {}
            other => return Err(format!("cycle {i}: no initialize result: {other:?}").into()),
        }
    }
    Ok(())
}

fn fmt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| v.to_string())
}

fn delta(a: Option<u64>, b: Option<u64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:+}", i128::from(b) - i128::from(a)),
        _ => "n/a".to_owned(),
    }
}

fn main() -> BenchResult<()> {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // then a smoke run is enough.
    let benching = std::env::args().any(|a| a == "--bench");
    let n = env_usize("MCPHOST_SOAK_CYCLES", if benching { 100_000 } else { 300 })?;
    let warmup = if benching { WARMUP } else { 50 };
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let config = r#"{"mcpServers":{},"loginShellPath":false}"#;
        let (daemon, status) = start_daemon(dir.path(), config).await?;
        let socket = dir.path().join("daemon.sock");
        let pid = daemon.pid();
        let start = sample(pid, &status).await?;
        cycles(&socket, warmup).await?;
        let warm = sample(pid, &status).await?;
        let t = Instant::now();
        cycles(&socket, n).await?;
        let wall = t.elapsed();
        let end = sample(pid, &status).await?;

        println!(
            "## Soak: {n} connect → initialize → close cycles ({:.0} per second)\n",
            n as f64 / wall.as_secs_f64()
        );
        println!(
            "| | at start | after {warmup} warm-up cycles | after {n} more | change since warm-up |"
        );
        println!("|---|---:|---:|---:|---:|");
        println!(
            "| daemon RSS (KiB) | {} | {} | {} | {} |",
            fmt(start.rss_kib),
            fmt(warm.rss_kib),
            fmt(end.rss_kib),
            delta(warm.rss_kib, end.rss_kib)
        );
        let fds = |s: Sample| s.fds.map(|f| f as u64);
        println!(
            "| open descriptors | {} | {} | {} | {} |",
            fmt(start.fds),
            fmt(warm.fds),
            fmt(end.fds),
            delta(fds(warm), fds(end))
        );
        println!(
            "| live clients (ours) | {} | {} | {} | {} |",
            fmt(start.clients),
            fmt(warm.clients),
            fmt(end.clients),
            delta(warm.clients, end.clients)
        );
        if end.clients.is_some_and(|c| c > 1) {
            return Err(format!("{} clients still live after the soak", fmt(end.clients)).into());
        }
        drop(daemon);
        Ok(())
    })
}
