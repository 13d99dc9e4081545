//! One `tools/call` to `mcphost-testserver`'s `echo`, along every path a
//! caller can take, side by side in one run, against the official Rust SDK
//! (`rmcp`) as the reference:
//!
//! - `direct`: `ServerClient` over stdio to the test server;
//! - `engine`: the in-process engine, an in-process `Session` (`Engine::open_session`), `request("tools/call", …)`
//!   (catalog routing, then the registry's `ServerClient`);
//! - `engine+audit`: the same on a second engine that writes its audit log
//!   (`"audit": true`, into the bench's temp dir): the log's cost per call;
//! - `socket`: a `ServerClient` over `ipc::connect` to a listener in this
//!   process whose connections are served by `Engine::serve`, i.e. the
//!   daemon's code path with caller and daemon sharing one process and one
//!   tokio runtime;
//! - `daemon`: the same over the socket of a real `mcphost daemon` process
//!   (set `MCPHOST_BENCH_DAEMON=0` to leave it out);
//! - `bridge`: a `ServerClient` over stdio to `mcphost bridge --socket S`,
//!   which relays to that daemon: the path of a stdio-only host (Claude
//!   Desktop, an IDE); left out with the daemon;
//! - `rmcp`: the `rmcp` client with its child-process transport.
//!
//! Each path runs sequentially (one caller task) and with 32 caller tasks
//! sharing one client (32 calls in flight); `socket` also runs with 32
//! connections of one caller each. Every call sends its own text
//! (`{"text":"c<N>"}`) and checks that the result echoes exactly that text,
//! so every measured call reached the echo process.
//!
//! Run with `cargo bench --bench paths`. Prints Markdown tables.
//!
//! Environment:
//! - `MCPHOST_BENCH_CALLS`: calls per row and round (default 2000).
//! - `MCPHOST_BENCH_ROUNDS`: rounds (default 5). Every row runs once per
//!   round, paths in a rotating order, and the table shows medians across
//!   rounds.
//! - `MCPHOST_BENCH_VERIFY=1`: start every test server with
//!   `--log-requests FILE` and, at the end, check that each server received
//!   exactly as many `tools/call` lines as its path made calls. The file
//!   write costs the server time, so use it as a separate check run.
//! - `MCPHOST_BENCH_DAEMON=0`: skip the real daemon process.
//! - `MCPHOST_BENCH_ONLY=socket,rmcp`: run only the rows with these labels
//!   (for profiling one path).
//! - `MCPHOST_BENCH_PLOTS=DIR`: also run every one-client path at 1, 2, 4,
//!   8, 16, 32 and 48 callers (median of the rounds at each), print that
//!   table, and write `paths-latency.png` (p50 against callers) and
//!   `paths-throughput.png` (calls/s against callers) to DIR.

mod common;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcphost::client::NoHost;
use mcphost::client::{CallOptions, ClientOptions, ServerClient};
use mcphost::engine::{Engine, EngineBuilder, HostPort, Session, SessionLimits};
use mcphost::ipc::{self, ListenOptions};
use mcphost::protocol::Id;
use mcphost::protocol::RawValue;
use mcphost::transport::stdio::{StdioConfig, spawn};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

use common::plot::{self, Series};
use common::{BenchResult, Daemon, Round, env_usize, start_daemon, summarize, us};

const TESTSERVER: &str = env!("CARGO_BIN_EXE_mcphost-testserver");
const MCPHOST: &str = env!("CARGO_BIN_EXE_mcphost");
const WARMUP: usize = 500;
const CONCURRENCY: usize = 32;
/// The server's name in the engine's config, so its echo is `testserver__echo`.
const SERVER: &str = "testserver";
const CATALOG_ECHO: &str = "testserver__echo";

fn env_flag(name: &str, default: bool) -> bool {
    match std::env::var(name) {
        Ok(v) => !matches!(v.trim(), "" | "0" | "false" | "no"),
        Err(_) => default,
    }
}

/// Per-call text: unique across the whole run.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(0);

fn token() -> String {
    format!("c{}", NEXT_TOKEN.fetch_add(1, Ordering::Relaxed))
}

/// The echo's result must carry exactly our text.
fn check_echo(result: &str, tok: &str) -> BenchResult<()> {
    // `"text":"c12"` cannot match inside `"text":"c123"`: the quote closes it.
    let needle = format!(r#""text":"{tok}""#);
    if result.contains(&needle) && !result.contains(r#""isError":true"#) {
        Ok(())
    } else {
        Err(format!(
            "echo of {tok:?} came back as {}",
            &result[..result.len().min(200)]
        )
        .into())
    }
}

// ---------------------------------------------------------------------------
// The paths.

#[derive(Clone)]
enum Route {
    /// One `ServerClient` shared by every caller; `tool` is the name to call.
    Client {
        client: Arc<ServerClient>,
        tool: &'static str,
    },
    /// An in-process session on the engine, as `--direct` uses.
    Engine(Arc<Session>),
    /// One caller per client: `clients[i]` serves caller `i`.
    Clients {
        clients: Arc<Vec<ServerClient>>,
        tool: &'static str,
    },
    Rmcp(rmcp::Peer<rmcp::RoleClient>),
}

impl Route {
    async fn call(&self, caller: usize) -> BenchResult<()> {
        let tok = token();
        match self {
            Route::Client { client, tool } => client_call(client, tool, &tok).await,
            Route::Clients { clients, tool } => {
                client_call(&clients[caller % clients.len()], tool, &tok).await
            }
            Route::Engine(session) => {
                let params = RawValue::from_string(format!(
                    r#"{{"name":"{CATALOG_ECHO}","arguments":{{"text":"{tok}"}}}}"#
                ))?;
                let r = session
                    .request(Id::number(caller as i64), "tools/call", Some(params))
                    .await
                    .map_err(|e| format!("engine: {e}"))?;
                check_echo(r.get(), &tok)
            }
            Route::Rmcp(peer) => {
                let mut args = serde_json::Map::with_capacity(1);
                args.insert("text".to_owned(), serde_json::Value::String(tok.clone()));
                let r = peer
                    .call_tool(
                        CallToolRequestParams::new(Cow::Borrowed("echo")).with_arguments(args),
                    )
                    .await?;
                let text = r
                    .content
                    .first()
                    .and_then(|c| c.as_text())
                    .map(|t| &*t.text);
                if r.is_error == Some(true) || text != Some(tok.as_str()) {
                    return Err(format!("rmcp echo of {tok:?} came back as {:?}", r.content).into());
                }
                Ok(())
            }
        }
    }
}

async fn client_call(client: &ServerClient, tool: &str, tok: &str) -> BenchResult<()> {
    let args = RawValue::from_string(format!(r#"{{"text":"{tok}"}}"#))?;
    let r = client
        .call_tool(tool, Some(args), CallOptions::default())
        .await?;
    check_echo(r.raw.get(), tok)
}

/// `callers` tasks make `calls` calls together, each one at a time; every
/// call's latency is a sample. One caller is still a spawned task, as in a
/// real host, so the bench's `block_on` thread is not an extra hop.
async fn run(path: &Route, calls: usize, callers: usize) -> BenchResult<Round> {
    let wall = Instant::now();
    let mut tasks = Vec::with_capacity(callers);
    for i in 0..callers {
        let share = calls / callers + usize::from(i < calls % callers);
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(share);
            for _ in 0..share {
                let t = Instant::now();
                path.call(i).await.map_err(|e| e.to_string())?;
                samples.push(t.elapsed());
            }
            Ok::<_, String>(samples)
        }));
    }
    let mut samples = Vec::with_capacity(calls);
    for t in tasks {
        samples.extend(t.await??);
    }
    Ok(Round::new(samples, wall.elapsed()))
}

// ---------------------------------------------------------------------------
// Setup.

/// Test server arguments; with verification, its request log.
fn server_args(log: Option<&Path>) -> Vec<String> {
    match log {
        Some(p) => vec!["--log-requests".to_owned(), p.display().to_string()],
        None => Vec::new(),
    }
}

fn config_json(args: &[String]) -> BenchResult<String> {
    Ok(serde_json::json!({
        "mcpServers": { SERVER: { "command": TESTSERVER, "args": args } },
        "loginShellPath": false,
    })
    .to_string())
}

async fn direct(log: Option<&Path>) -> BenchResult<ServerClient> {
    let conn = spawn("direct", &StdioConfig::new(TESTSERVER, server_args(log))).await?;
    Ok(ServerClient::connect("direct", conn, ClientOptions::default()).await?)
}

/// The in-process engine; with `audit`, writing its audit log (the
/// default `"audit": true`) into `dir`/audit.
async fn engine(dir: &Path, log: Option<&Path>, audit: bool) -> BenchResult<Arc<Engine>> {
    let path = dir.join("engine.json");
    let cfg = mcphost::config::parse(
        &config_json(&server_args(log))?,
        &path,
        &mcphost::auth::process_env,
    )?;
    let engine = EngineBuilder::new(cfg)
        .audit_dir(audit.then(|| dir.join("audit")))
        .start();
    let registry = engine.registry();
    registry.settled(Duration::from_secs(30)).await;
    if registry.catalog().route(CATALOG_ECHO).is_none() {
        return Err(format!("the engine has no {CATALOG_ECHO}").into());
    }
    Ok(engine)
}

/// An in-process session with room for every caller's request.
fn bench_session(engine: &Arc<Engine>) -> Arc<Session> {
    let port = Arc::new(HostPort::new(Arc::new(NoHost), |_, _| {}));
    let limits = SessionLimits {
        max_in_flight: usize::MAX,
    };
    let session = engine.open_session("bench", port, limits);
    session.initialize_as(Default::default());
    session
}

/// The daemon's accept loop, in this process.
async fn serve_socket(engine: Arc<Engine>, socket: &Path) -> BenchResult<()> {
    let mut listener = ipc::listen(ListenOptions::new(socket)).await?;
    tokio::spawn(async move {
        let mut n = 0u64;
        while let Ok((conn, _cred)) = listener.accept().await {
            n += 1;
            engine.serve(&format!("bench-{n}"), conn);
        }
    });
    Ok(())
}

async fn socket_client(socket: &Path) -> BenchResult<ServerClient> {
    let conn = ipc::connect(socket, ipc::DEFAULT_MAX_MESSAGE_BYTES).await?;
    Ok(ServerClient::connect("socket", conn, ClientOptions::default()).await?)
}

async fn daemon(dir: &Path, log: Option<&Path>) -> BenchResult<(Daemon, ServerClient)> {
    let (d, client) = start_daemon(dir, &config_json(&server_args(log))?).await?;
    // Until the server's tools are listed.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client_call(&client, CATALOG_ECHO, "ready").await {
            Ok(()) => break,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    Ok((d, client))
}

/// A stdio client of `mcphost bridge` to the daemon listening on `socket`.
async fn bridge_client(socket: &Path) -> BenchResult<ServerClient> {
    let args = vec![
        "--socket".to_owned(),
        socket.display().to_string(),
        "bridge".to_owned(),
    ];
    let conn = spawn("bridge", &StdioConfig::new(MCPHOST, args)).await?;
    Ok(ServerClient::connect("bridge", conn, ClientOptions::default()).await?)
}

type RmcpClient = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn rmcp_client(log: Option<&Path>) -> BenchResult<RmcpClient> {
    let mut cmd = tokio::process::Command::new(TESTSERVER);
    cmd.args(server_args(log));
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()?;
    Ok(().serve(transport).await?)
}

// ---------------------------------------------------------------------------
// Statistics.

struct Row {
    label: String,
    path: Route,
    callers: usize,
    /// The rmcp row of the same mode.
    reference: Option<usize>,
    rounds: Vec<Round>,
}

fn print_table(rows: &[Row]) -> Vec<Round> {
    println!(
        "| path | callers | calls/round | p50 µs | p50 range µs | p99 µs | calls/s | p50 vs rmcp | calls/s vs rmcp |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let sums: Vec<Round> = rows.iter().map(|r| summarize(&r.rounds)).collect();
    for (i, (r, s)) in rows.iter().zip(&sums).enumerate() {
        let (ratio, tput) = match r.reference {
            Some(b) if b == i => ("1 (reference)".to_owned(), "1 (reference)".to_owned()),
            Some(b) => (
                format!("{:.2}×", s.p50.as_secs_f64() / sums[b].p50.as_secs_f64()),
                format!("{:.2}×", s.per_sec / sums[b].per_sec),
            ),
            None => ("—".to_owned(), "—".to_owned()),
        };
        let lo = r.rounds.iter().map(|r| r.p50).min().unwrap_or_default();
        let hi = r.rounds.iter().map(|r| r.p50).max().unwrap_or_default();
        println!(
            "| {} | {} | {} | {} | {}–{} | {} | {:.0} | {} | {} |",
            r.label,
            r.callers,
            s.calls,
            us(s.p50),
            us(lo),
            us(hi),
            us(s.p99),
            s.per_sec,
            ratio,
            tput
        );
    }
    sums
}

/// Caller counts of the latency-against-concurrency curve.
// Up to 48: the daemon allows 64 requests in flight per connection.
const CURVE: &[usize] = &[1, 2, 4, 8, 16, 32, 48];

fn print_curve(curve: &[(&str, Route)], points: &[Vec<(usize, Round)>]) {
    println!();
    let head: Vec<&str> = curve.iter().map(|(l, _)| *l).collect();
    println!(
        "| callers | {} |",
        head.join(" p50 µs / k calls/s | ") + " p50 µs / k calls/s"
    );
    println!("|---:|{}", "---:|".repeat(curve.len()));
    for (k, &callers) in CURVE.iter().enumerate() {
        let cells: Vec<String> = points
            .iter()
            .map(|pts| {
                let r = &pts[k].1;
                format!("{} / {:.1}", us(r.p50), r.per_sec / 1e3)
            })
            .collect();
        println!("| {callers} | {} |", cells.join(" | "));
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// The targets, from the medians.
fn print_targets(rows: &[Row], sums: &[Round]) {
    let find = |label: &str, callers: usize| {
        rows.iter()
            .position(|r| r.label == label && r.callers == callers)
            .map(|i| sums[i])
    };
    println!();
    println!("| target | mode | measured | verdict |");
    println!("|---|---|---:|---|");
    for (mode, callers) in [("sequential", 1), ("32 in flight", CONCURRENCY)] {
        let (Some(a), Some(c), Some(d)) = (
            find("direct", callers),
            find("socket", callers),
            find("rmcp", callers),
        ) else {
            continue;
        };
        let p = a.p50.as_secs_f64() / d.p50.as_secs_f64();
        println!(
            "| direct p50 ≤ 1.0× rmcp | {mode} | {p:.2}× | {} |",
            verdict(p <= 1.0)
        );
        let t = a.per_sec / d.per_sec;
        println!(
            "| direct calls/s ≥ 1.0× rmcp | {mode} | {t:.2}× | {} |",
            verdict(t >= 1.0)
        );
        let s = c.p50.as_secs_f64() / a.p50.as_secs_f64();
        println!(
            "| socket p50 ≤ 2× direct | {mode} | {s:.2}× | {} |",
            verdict(s <= 2.0)
        );
    }
    // Issue 25's rows: the daemon hop against the same client direct.
    if let (Some(a), Some(d)) = (find("direct", 1), find("daemon process", 1)) {
        let r = d.p50.as_secs_f64() / a.p50.as_secs_f64();
        println!(
            "| daemon process p50 ≤ 2.0× direct | sequential | {r:.2}× | {} |",
            verdict(r <= 2.0)
        );
    }
    if let (Some(a), Some(b)) = (find("direct", 1), find("bridge", 1)) {
        let r = b.p50.as_secs_f64() / a.p50.as_secs_f64();
        println!(
            "| bridge p50 ≤ 2.5× direct | sequential | {r:.2}× | {} |",
            verdict(r <= 2.5)
        );
    }
    if let (Some(a), Some(b)) = (find("direct", CONCURRENCY), find("bridge", CONCURRENCY)) {
        let r = b.per_sec / a.per_sec;
        println!(
            "| bridge calls/s ≥ 0.6× direct | 32 in flight | {r:.2}× | {} |",
            verdict(r >= 0.6)
        );
    }
    if let Some(c) = find("socket", CONCURRENCY) {
        println!(
            "| socket ≥ 50,000 calls/s, 32 callers | one connection | {:.0} | {} |",
            c.per_sec,
            verdict(c.per_sec >= 50_000.0)
        );
    }
    if let Some(c) = find("socket, 32 connections", CONCURRENCY) {
        println!(
            "| socket ≥ 50,000 calls/s, 32 callers | 32 connections | {:.0} | {} |",
            c.per_sec,
            verdict(c.per_sec >= 50_000.0)
        );
    }
}

/// `tools/call` lines in a test server's request log.
fn logged_calls(path: &Path) -> BenchResult<usize> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter(|l| l.contains(r#""method":"tools/call""#) && l.contains(r#""text":"c"#))
        .count())
}

// ---------------------------------------------------------------------------

fn main() -> BenchResult<()> {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // then a smoke run is enough.
    let benching = std::env::args().any(|a| a == "--bench");
    let calls = env_usize("MCPHOST_BENCH_CALLS", if benching { 2000 } else { 64 })?;
    let rounds = env_usize("MCPHOST_BENCH_ROUNDS", if benching { 5 } else { 1 })?;
    let verify = env_flag("MCPHOST_BENCH_VERIFY", !benching);
    let with_daemon = env_flag("MCPHOST_BENCH_DAEMON", true);
    let warmup = if benching { WARMUP } else { 10 };
    // For profiling one path: `MCPHOST_BENCH_ONLY=socket` (labels, comma-separated).
    let only: Option<Vec<String>> = std::env::var("MCPHOST_BENCH_ONLY")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());

    let dir = tempfile::tempdir()?;
    let log = |name: &str| verify.then(|| dir.path().join(format!("{name}.log")));
    let logs: Vec<(&str, Option<PathBuf>)> = ["direct", "engine", "engine-audit", "daemon", "rmcp"]
        .into_iter()
        .map(|n| (n, log(n)))
        .collect();
    let log_of = |name: &str| {
        logs.iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, p)| p.clone())
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    let direct_client = Arc::new(rt.block_on(direct(log_of("direct").as_deref()))?);
    let audited = rt.block_on(engine(dir.path(), log_of("engine-audit").as_deref(), true))?;
    let engine = rt.block_on(engine(dir.path(), log_of("engine").as_deref(), false))?;
    let socket = dir.path().join("engine.sock");
    rt.block_on(serve_socket(engine.clone(), &socket))?;
    let socket_one = Arc::new(rt.block_on(socket_client(&socket))?);
    let socket_many = Arc::new(rt.block_on(async {
        let mut v = Vec::with_capacity(CONCURRENCY);
        for _ in 0..CONCURRENCY {
            v.push(socket_client(&socket).await?);
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(v)
    })?);
    let (daemon_proc, daemon_client, bridge) = if with_daemon {
        let (d, c) = rt.block_on(daemon(dir.path(), log_of("daemon").as_deref()))?;
        let b = rt.block_on(bridge_client(&dir.path().join("daemon.sock")))?;
        (Some(d), Some(Arc::new(c)), Some(Arc::new(b)))
    } else {
        (None, None, None)
    };
    let rmcp = rt.block_on(rmcp_client(log_of("rmcp").as_deref()))?;

    // (label, path, the server log its calls land in, modes it runs in)
    let only_concurrent = [CONCURRENCY];
    let both = [1, CONCURRENCY];
    let mut paths: Vec<(&str, Route, &str, &[usize])> = vec![
        (
            "direct",
            Route::Client {
                client: direct_client.clone(),
                tool: "echo",
            },
            "direct",
            &both,
        ),
        (
            "engine",
            Route::Engine(bench_session(&engine)),
            "engine",
            &both,
        ),
        (
            "engine+audit",
            Route::Engine(bench_session(&audited)),
            "engine-audit",
            &both,
        ),
        (
            "socket",
            Route::Client {
                client: socket_one.clone(),
                tool: CATALOG_ECHO,
            },
            "engine",
            &both,
        ),
        (
            "socket, 32 connections",
            Route::Clients {
                clients: socket_many.clone(),
                tool: CATALOG_ECHO,
            },
            "engine",
            &only_concurrent,
        ),
    ];
    if let Some(c) = &daemon_client {
        paths.push((
            "daemon process",
            Route::Client {
                client: c.clone(),
                tool: CATALOG_ECHO,
            },
            "daemon",
            &both,
        ));
    }
    if let Some(b) = &bridge {
        paths.push((
            "bridge",
            Route::Client {
                client: b.clone(),
                tool: CATALOG_ECHO,
            },
            "daemon",
            &both,
        ));
    }
    paths.push(("rmcp", Route::Rmcp(rmcp.peer().clone()), "rmcp", &both));

    // Rows: every path sequentially, then every path with 32 callers; each
    // mode's rmcp row is its reference.
    let mut rows: Vec<Row> = Vec::new();
    let mut row_log: Vec<&str> = Vec::new();
    for callers in [1, CONCURRENCY] {
        let first = rows.len();
        for (label, path, log, modes) in &paths {
            if modes.contains(&callers)
                && only.as_ref().is_none_or(|o| o.iter().any(|x| x == label))
            {
                rows.push(Row {
                    label: (*label).to_owned(),
                    path: path.clone(),
                    callers,
                    reference: None,
                    rounds: Vec::new(),
                });
                row_log.push(*log);
            }
        }
        let reference = rows[first..]
            .iter()
            .position(|r| r.label == "rmcp")
            .map(|i| first + i);
        for r in &mut rows[first..] {
            r.reference = reference;
        }
    }

    // Warm-up: every row once (page cache, allocator, tokio workers).
    let mut made = vec![0usize; rows.len()];
    for (i, r) in rows.iter().enumerate() {
        rt.block_on(run(&r.path, warmup, r.callers))?;
        made[i] += warmup;
    }

    for round in 0..rounds {
        // Rotate the order so no path always runs right after another.
        let n = rows.len();
        let order: Vec<usize> = (0..n).map(|k| (k + round) % n).collect();
        for &i in &order {
            let r = rt.block_on(run(&rows[i].path, calls, rows[i].callers))?;
            made[i] += r.calls;
            rows[i].rounds.push(r);
        }
        let p50s: Vec<String> = rows
            .iter()
            .filter_map(|r| r.rounds.last())
            .map(|r| us(r.p50))
            .collect();
        eprintln!(
            "round {}/{rounds}: p50 µs per row: {}",
            round + 1,
            p50s.join(" ")
        );
    }

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "Median of {rounds} round(s), {cpus} CPU(s) available; `echo` of mcphost-testserver \
         with a per-call text (`{{\"text\":\"c<N>\"}}`), each result checked."
    );
    println!();
    let sums = print_table(&rows);
    print_targets(&rows, &sums);
    if let Ok(dir) = std::env::var("MCPHOST_BENCH_PLOTS") {
        // The one-client paths; "socket, 32 connections" has no other count.
        let curve: Vec<(&str, Route)> = paths
            .iter()
            .filter(|(label, _, _, modes)| {
                modes.contains(&1) && only.as_ref().is_none_or(|o| o.iter().any(|x| x == label))
            })
            .map(|(label, path, log, _)| {
                row_log.push(*log);
                (*label, path.clone())
            })
            .collect();
        let made_before = made.len();
        made.extend(std::iter::repeat_n(0, curve.len()));
        let mut points: Vec<Vec<(usize, Round)>> = vec![Vec::new(); curve.len()];
        for &callers in CURVE {
            let mut per_path: Vec<Vec<Round>> = vec![Vec::new(); curve.len()];
            for round in 0..rounds {
                let n = curve.len();
                for k in 0..n {
                    let i = (k + round) % n;
                    let r = rt.block_on(run(&curve[i].1, calls, callers))?;
                    made[made_before + i] += r.calls;
                    per_path[i].push(r);
                }
            }
            for (i, rs) in per_path.iter().enumerate() {
                points[i].push((callers, summarize(rs)));
            }
        }
        print_curve(&curve, &points);
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir)?;
        let series = |f: &dyn Fn(&Round) -> f64| -> Vec<Series> {
            curve
                .iter()
                .zip(&points)
                .map(|((label, _), pts)| Series {
                    label: (*label).to_owned(),
                    points: pts.iter().map(|(c, r)| (*c as f64, f(r))).collect(),
                })
                .collect()
        };
        plot::lines(
            &dir.join("paths-latency.png"),
            "tools/call echo: p50 latency against callers in flight (median)",
            "callers in flight",
            "p50 µs",
            &series(&|r| r.p50.as_secs_f64() * 1e6),
        )?;
        plot::lines(
            &dir.join("paths-throughput.png"),
            "tools/call echo: throughput against callers in flight (median)",
            "callers in flight",
            "thousand calls/s",
            &series(&|r| r.per_sec / 1e3),
        )?;
    }

    // What the audited engine wrote (its last lines flushed first), once
    // the plots, which call it too, are done.
    rt.block_on(audited.shutdown());
    let found = mcphost::engine::audit::query(&dir.path().join("audit"), &Default::default())?;
    let dropped: u64 = found
        .lines
        .iter()
        .filter(|l| l["kind"] == "dropped")
        .filter_map(|l| l["count"].as_u64())
        .sum();
    println!(
        "\n\"engine+audit\": {} audit lines written, {dropped} dropped, {} unreadable.",
        found.lines.len(),
        found.skipped
    );

    // Shut down before reading the logs, so every server has flushed.
    drop(rows);
    drop(paths);
    rt.block_on(async {
        let _ = rmcp.cancel().await;
        if let Ok(c) = Arc::try_unwrap(direct_client) {
            c.shutdown().await;
        }
        if let Ok(c) = Arc::try_unwrap(socket_one) {
            c.shutdown().await;
        }
        if let Ok(v) = Arc::try_unwrap(socket_many) {
            for c in v {
                c.shutdown().await;
            }
        }
        if let Some(c) = daemon_client.and_then(|c| Arc::try_unwrap(c).ok()) {
            c.shutdown().await;
        }
        if let Some(c) = bridge.and_then(|c| Arc::try_unwrap(c).ok()) {
            c.shutdown().await;
        }
        engine.registry().shutdown().await;
    });
    drop(daemon_proc);

    if verify {
        println!();
        println!("| server | calls made | `tools/call` echo lines logged | verdict |");
        println!("|---|---:|---:|---|");
        let mut ok = true;
        for (name, path) in &logs {
            let Some(path) = path else { continue };
            let expected: usize = row_log
                .iter()
                .zip(&made)
                .filter(|(l, _)| **l == *name)
                .map(|(_, n)| n)
                .sum();
            if expected == 0 {
                continue;
            }
            let got = logged_calls(path)?;
            ok &= got == expected;
            println!(
                "| {name} | {expected} | {got} | {} |",
                if got == expected { "match" } else { "MISMATCH" }
            );
        }
        if !ok {
            return Err("a test server did not see every call".into());
        }
    }
    Ok(())
}
