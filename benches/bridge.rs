//! `mcphost bridge` beside the direct path, in one run, rounds interleaved:
//!
//! - rmcp: the `rmcp` client spawning `mcphost-testserver` directly, and the
//!   same client spawning `mcphost bridge --socket S` against a real
//!   `mcphost daemon` serving the test server: sequential p50 and calls/s
//!   with 32 calls in flight;
//! - ts: the TypeScript SDK client (`benches/node/ts_client.mjs`) spawning
//!   server-everything directly, and spawning the bridge to a daemon that
//!   serves server-everything: sequential p50.
//!
//! Every call's result is checked. `cargo bench --bench bridge`; without
//! `--bench` (`cargo test --bench bridge`) a short smoke run. The ts rows
//! need node and the interop install (`MCPHOST_INTEROP_DIR`, default
//! `tests/interop`; `MCPHOST_NODE`, default `node`): missing, the run fails.
//!
//! Environment: `MCPHOST_BENCH_CALLS` (default 2000), `MCPHOST_BENCH_ROUNDS`
//! (default 5).

mod common;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

use common::{BenchResult, Daemon, Round, env_usize, start_daemon, summarize, us};

const TESTSERVER: &str = env!("CARGO_BIN_EXE_mcphost-testserver");
const MCPHOST: &str = env!("CARGO_BIN_EXE_mcphost");
const CONCURRENCY: usize = 32;

type RmcpClient = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn rmcp_client(cmd: tokio::process::Command) -> BenchResult<RmcpClient> {
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()?;
    Ok(().serve(transport).await?)
}

async fn echo(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    tool: &'static str,
    tok: String,
) -> BenchResult<()> {
    let mut args = serde_json::Map::with_capacity(1);
    args.insert("text".to_owned(), serde_json::Value::String(tok.clone()));
    let r = peer
        .call_tool(CallToolRequestParams::new(Cow::Borrowed(tool)).with_arguments(args))
        .await?;
    let text = r
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| &*t.text);
    if r.is_error == Some(true) || text != Some(tok.as_str()) {
        return Err(format!("echo of {tok:?} came back as {:?}", r.content).into());
    }
    Ok(())
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// `callers` tasks make `calls` calls together; every call's latency is a sample.
async fn run(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    tool: &'static str,
    calls: usize,
    callers: usize,
) -> BenchResult<Round> {
    let left = Arc::new(AtomicUsize::new(calls));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let (peer, left) = (peer.clone(), left.clone());
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            while left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                let tok = format!("c{}", SEQ.fetch_add(1, Ordering::Relaxed));
                let t = Instant::now();
                echo(&peer, tool, tok).await?;
                samples.push(t.elapsed());
            }
            BenchResult::Ok(samples)
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await??);
    }
    Ok(Round::new(samples, start.elapsed()))
}

fn bridge_cmd(socket: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(MCPHOST);
    // The bench's own daemon, never one the bridge would start.
    cmd.arg("--socket")
        .arg(socket)
        .arg("--no-autostart")
        .arg("bridge");
    cmd
}

fn config(command: &str, args: &[String]) -> String {
    serde_json::json!({
        "mcpServers": { "s": { "command": command, "args": args } },
        "loginShellPath": false,
    })
    .to_string()
}

/// Waits until the daemon lists `tool`, through a bridge-free client.
async fn until_ready(client: &mcphost::client::ServerClient, tool: &str) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tools = client.list_tools().await?;
        if tools.iter().any(|t| t.name == tool) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the daemon never listed {tool}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One run of the node client: its per-call latencies.
fn ts_round(
    node: &str,
    interop: &Path,
    calls: usize,
    tool: &str,
    cmd: &[String],
) -> BenchResult<Vec<Duration>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/node/ts_client.mjs");
    let out = std::process::Command::new(node)
        .arg(script)
        .arg(interop)
        .arg(calls.to_string())
        .arg(tool)
        .args(cmd)
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(format!("the TS client failed ({}) for {cmd:?}", out.status).into());
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let lat = v["latencies_us"]
        .as_array()
        .ok_or("no latencies from the TS client")?;
    if lat.len() != calls {
        return Err(format!("the TS client made {} calls, not {calls}", lat.len()).into());
    }
    Ok(lat
        .iter()
        .map(|x| Duration::from_secs_f64(x.as_f64().unwrap_or(0.0) / 1e6))
        .collect())
}

fn row(label: &str, rounds: &[Round], reference: Option<&[Round]>, throughput: bool) -> String {
    let s = summarize(rounds);
    let lo = rounds.iter().map(|r| r.p50).min().unwrap_or_default();
    let hi = rounds.iter().map(|r| r.p50).max().unwrap_or_default();
    let ratio = reference.map_or("—".to_owned(), |r| {
        let r = summarize(r);
        if throughput {
            format!("{:.2}×", s.per_sec / r.per_sec)
        } else {
            format!("{:.2}×", s.p50.as_secs_f64() / r.p50.as_secs_f64())
        }
    });
    format!(
        "| {label} | {} | {}–{} | {} | {:.0} | {ratio} |",
        us(s.p50),
        us(lo),
        us(hi),
        us(s.p99),
        s.per_sec
    )
}

fn goal(what: &str, value: f64, ok: bool, target: &str) -> String {
    format!(
        "| {what} | {value:.2} | {target} | {} |",
        if ok { "met" } else { "missed" }
    )
}

#[tokio::main]
async fn main() -> BenchResult<()> {
    // `cargo bench` passes `--bench`; `cargo test --bench` does not: a smoke run.
    let benching = std::env::args().any(|a| a == "--bench");
    let calls = env_usize("MCPHOST_BENCH_CALLS", if benching { 2000 } else { 50 })?;
    let rounds = env_usize("MCPHOST_BENCH_ROUNDS", if benching { 5 } else { 1 })?;
    let ts_calls = if benching { calls.min(1000) } else { 20 };
    let node = std::env::var("MCPHOST_NODE").unwrap_or_else(|_| "node".to_owned());
    let interop = std::env::var_os("MCPHOST_INTEROP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop"));
    let everything =
        interop.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !everything.exists()
        || !interop
            .join("node_modules/@modelcontextprotocol/sdk")
            .exists()
    {
        return Err(format!(
            "the TS rows need server-everything and the TS SDK under {} (run scripts/setup-interop.sh, or set MCPHOST_INTEROP_DIR)",
            interop.display()
        )
        .into());
    }
    std::process::Command::new(&node)
        .arg("--version")
        .output()
        .map_err(|e| format!("the TS rows need node ({node}): {e}"))?;

    let dir = tempfile::tempdir()?;
    // Daemon 1: the Rust echo server; daemon 2: server-everything.
    let rust_dir = dir.path().join("rust");
    let ts_dir = dir.path().join("ts");
    std::fs::create_dir_all(&rust_dir)?;
    std::fs::create_dir_all(&ts_dir)?;
    let (_d1, c1): (Daemon, _) = start_daemon(&rust_dir, &config(TESTSERVER, &[])).await?;
    until_ready(&c1, "s__echo").await?;
    let everything_cmd = vec![everything.display().to_string(), "stdio".to_owned()];
    let (_d2, c2): (Daemon, _) = start_daemon(&ts_dir, &config(&node, &everything_cmd)).await?;
    until_ready(&c2, "s__echo").await?;

    let direct = rmcp_client(tokio::process::Command::new(TESTSERVER)).await?;
    let bridged = rmcp_client(bridge_cmd(&rust_dir.join("daemon.sock"))).await?;
    let warm = if benching { 500 } else { 10 };
    run(direct.peer(), "echo", warm, 1).await?;
    run(bridged.peer(), "s__echo", warm, 1).await?;

    let mut ts_direct_cmd = vec![node.clone()];
    ts_direct_cmd.extend(everything_cmd.iter().cloned());
    let ts_bridge_cmd = vec![
        MCPHOST.to_owned(),
        "--socket".to_owned(),
        ts_dir.join("daemon.sock").display().to_string(),
        "bridge".to_owned(),
    ];

    let (mut rd1, mut rb1, mut rd32, mut rb32, mut td, mut tb) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        // Alternate which path goes first.
        let flip = round % 2 == 1;
        for i in 0..2 {
            if (i == 0) != flip {
                rd1.push(run(direct.peer(), "echo", calls, 1).await?);
                rd32.push(run(direct.peer(), "echo", calls, CONCURRENCY).await?);
                let t = Instant::now();
                let s = ts_round(&node, &interop, ts_calls, "echo", &ts_direct_cmd)?;
                td.push(Round::new(s, t.elapsed()));
            } else {
                rb1.push(run(bridged.peer(), "s__echo", calls, 1).await?);
                rb32.push(run(bridged.peer(), "s__echo", calls, CONCURRENCY).await?);
                let t = Instant::now();
                let s = ts_round(&node, &interop, ts_calls, "s__echo", &ts_bridge_cmd)?;
                tb.push(Round::new(s, t.elapsed()));
            }
        }
    }
    direct.cancel().await?;
    bridged.cancel().await?;

    println!(
        "\n{rounds} rounds, {calls} rmcp calls and {ts_calls} TS calls per row and round (medians across rounds; TS calls/s includes its start-up)\n"
    );
    println!("| path | p50 µs | p50 range µs | p99 µs | calls/s | vs direct |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "{}",
        row("rmcp → testserver, sequential", &rd1, None, false)
    );
    println!(
        "{}",
        row(
            "rmcp → bridge → daemon → testserver, sequential",
            &rb1,
            Some(&rd1),
            false
        )
    );
    println!(
        "{}",
        row("rmcp → testserver, 32 in flight", &rd32, None, true)
    );
    println!(
        "{}",
        row(
            "rmcp → bridge → daemon → testserver, 32 in flight",
            &rb32,
            Some(&rd32),
            true
        )
    );
    println!(
        "{}",
        row("TS SDK → server-everything, sequential", &td, None, false)
    );
    println!(
        "{}",
        row(
            "TS SDK → bridge → daemon → server-everything, sequential",
            &tb,
            Some(&td),
            false
        )
    );

    let p = |r: &[Round]| summarize(r).p50.as_secs_f64();
    // The ratio of the medians, as in the table above.
    let ts_ratio = p(&tb) / p(&td);
    let rmcp_ratio = p(&rb1) / p(&rd1);
    let per_sec = summarize(&rb32).per_sec;
    let tput_ratio = per_sec / summarize(&rd32).per_sec;
    // Issue 25's targets.
    println!("\n| goal | measured | target | |\n|---|---:|---|---|");
    println!(
        "{}",
        goal(
            "TS via bridge / direct, p50",
            ts_ratio,
            ts_ratio <= 1.25,
            "≤ 1.25×"
        )
    );
    println!(
        "{}",
        goal(
            "rmcp via bridge / direct, sequential p50",
            rmcp_ratio,
            rmcp_ratio <= 2.5,
            "≤ 2.5×"
        )
    );
    println!(
        "{}",
        goal(
            "rmcp via bridge / direct, calls/s with 32 in flight",
            tput_ratio,
            tput_ratio >= 0.6,
            "≥ 0.6×"
        )
    );
    Ok(())
}
