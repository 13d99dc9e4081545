//! What exact attribution costs (issue 20): two hosts calling one shared
//! stdio server through the in-process engine, against one host making the
//! same calls.
//!
//! - `quiet`: a server that has never asked a host anything. Its calls must
//!   lose nothing to the bookkeeping of turns: two sessions run as fast as
//!   one.
//! - `asks`: the same server after it asked for sampling once, so its calls
//!   take turns by session. Two sessions then share it one at a time; the
//!   table shows the queue time the daemon reports (`servers --stats`).
//! - `own`: `share: per-session`, the way to give each host its own process.
//!
//! Every row makes the same number of `tools/call echo` calls with 16 calls
//! in flight (16 callers in one session, or 8 in each of two), each checked
//! to come back with its own text. Rows run in a rotating order per round;
//! the table shows medians over rounds, each beside its one-session
//! reference.
//!
//! `cargo bench --bench attribution` (MCPHOST_BENCH_CALLS, MCPHOST_BENCH_ROUNDS);
//! `cargo test --bench attribution` runs a short smoke of it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{BenchResult, Round, env_usize, summarize, us};
use mcphost::client::{Host, HostRequest};
use mcphost::engine::{Engine, EngineBuilder, HostPort, Session, SessionLimits};
use mcphost::protocol::capabilities::SamplingCap;
use mcphost::protocol::{ClientCapabilities, ErrorObject, Id, RawValue};
use mcphost::transport::BoxFuture;

const TESTSERVER: &str = env!("CARGO_BIN_EXE_mcphost-testserver");
const CALLERS: usize = 16;

/// A host that answers sampling at once.
struct Sampler;

impl Host for Sampler {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            sampling: Some(SamplingCap::default()),
            ..Default::default()
        }
    }
    fn handle(&self, _: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        Box::pin(async {
            RawValue::from_string(
                r#"{"role":"assistant","content":{"type":"text","text":"ok"},"model":"bench"}"#
                    .to_owned(),
            )
            .map_err(|e| ErrorObject::new(-32603, e.to_string()))
        })
    }
}

fn session(engine: &Arc<Engine>) -> Arc<Session> {
    let host: Arc<dyn Host> = Arc::new(Sampler);
    let port = Arc::new(HostPort::new(host.clone(), |_, _| {}));
    let limits = SessionLimits {
        max_in_flight: usize::MAX,
    };
    let s = engine.open_session("bench", port, limits);
    s.initialize_as(host.capabilities());
    s
}

async fn call(s: &Arc<Session>, server: &str, tool: &str, id: i64, text: &str) -> BenchResult<()> {
    let params = RawValue::from_string(format!(
        r#"{{"name":"{server}__{tool}","arguments":{{"text":"{text}"}}}}"#
    ))?;
    let r = s
        .request(Id::number(id), "tools/call", Some(params))
        .await
        .map_err(|e| format!("{server}: {e}"))?;
    if tool == "echo" && !r.get().contains(text) {
        return Err(format!("{server}: the echo of {text} came back as {}", r.get()).into());
    }
    Ok(())
}

/// `calls` echo calls on `server` with 16 in flight, spread over `sessions`.
async fn round(
    sessions: &[Arc<Session>],
    server: &'static str,
    calls: usize,
) -> BenchResult<Round> {
    let per_caller = calls.div_ceil(CALLERS);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CALLERS {
        let s = sessions[c % sessions.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut took = Vec::with_capacity(per_caller);
            for i in 0..per_caller {
                let at = Instant::now();
                let id = i64::try_from(c * per_caller + i)?;
                call(&s, server, "echo", id, &format!("c{c}-{i}")).await?;
                took.push(at.elapsed());
            }
            BenchResult::Ok(took)
        }));
    }
    let mut samples = Vec::new();
    for t in tasks {
        samples.extend(t.await??);
    }
    Ok(Round::new(samples, started.elapsed()))
}

/// `server`'s attribution as `servers --json` shows it.
async fn attribution(s: &Arc<Session>, server: &str) -> BenchResult<serde_json::Value> {
    let r = s
        .request(Id::number(-1), "mcphost/servers/list", None)
        .await
        .map_err(|e| format!("mcphost/servers/list: {e}"))?;
    let list: serde_json::Value = serde_json::from_str(r.get())?;
    list.as_array()
        .and_then(|l| l.iter().find(|v| v["name"] == server))
        .map(|v| v["attribution"].clone())
        .ok_or_else(|| format!("{server} is not listed").into())
}

struct Row {
    label: &'static str,
    server: &'static str,
    two: bool,
    /// The row its ratios are against.
    reference: Option<usize>,
}

const ROWS: [Row; 5] = [
    Row {
        label: "quiet, 1 host",
        server: "quiet",
        two: false,
        reference: None,
    },
    Row {
        label: "quiet, 2 hosts",
        server: "quiet",
        two: true,
        reference: Some(0),
    },
    Row {
        label: "asks, 1 host",
        server: "asks",
        two: false,
        reference: None,
    },
    Row {
        label: "asks, 2 hosts (turns)",
        server: "asks",
        two: true,
        reference: Some(2),
    },
    Row {
        label: "asks, per-session, 2 hosts",
        server: "own",
        two: true,
        reference: Some(2),
    },
];

fn main() -> BenchResult<()> {
    let benching = std::env::args().any(|a| a == "--bench");
    let calls = env_usize("MCPHOST_BENCH_CALLS", if benching { 4000 } else { 160 })?;
    let rounds = env_usize("MCPHOST_BENCH_ROUNDS", if benching { 7 } else { 1 })?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let ts = serde_json::json!(TESTSERVER);
        let text = format!(
            r#"{{"loginShellPath": false, "mcpServers": {{
                "quiet": {{"command": {ts}}},
                "asks": {{"command": {ts}}},
                "own": {{"command": {ts}, "share": "per-session"}}}}}}"#
        );
        let cfg = mcphost::config::parse(
            &text,
            std::path::Path::new("/nonexistent/attribution.json"),
            &|_| None,
        )?;
        let engine = EngineBuilder::new(cfg).start();
        engine.registry().settled(Duration::from_secs(30)).await;
        let (a, b) = (session(&engine), session(&engine));
        // `asks` and each session's own instance ask once, so their calls
        // take turns from now on (`own` has one session per instance).
        for s in [&a, &b] {
            call(s, "asks", "sample", 0, "").await?;
            call(s, "own", "sample", 0, "").await?;
        }
        let mode = attribution(&a, "asks").await?["mode"].clone();
        if mode != "scheduled" {
            return Err(format!("asks is {mode}, not scheduled, after asking").into());
        }
        // Warm-up: every path once.
        for row in &ROWS {
            let sessions = if row.two {
                vec![a.clone(), b.clone()]
            } else {
                vec![a.clone()]
            };
            round(&sessions, row.server, 64).await?;
        }
        let mut results: Vec<Vec<Round>> = ROWS.iter().map(|_| Vec::new()).collect();
        for r in 0..rounds {
            for k in 0..ROWS.len() {
                let i = (k + r) % ROWS.len();
                let row = &ROWS[i];
                let sessions = if row.two {
                    vec![a.clone(), b.clone()]
                } else {
                    vec![a.clone()]
                };
                results[i].push(round(&sessions, row.server, calls).await?);
            }
        }
        let med: Vec<Round> = results.iter().map(|r| summarize(r)).collect();
        println!("\n{calls} tools/call echo per round, 16 in flight, {rounds} rounds (medians)\n");
        println!("| row | p50 µs | p99 µs | calls/s | p50 vs reference | calls/s vs reference |");
        println!("|---|---|---|---|---|---|");
        for (i, row) in ROWS.iter().enumerate() {
            let m = &med[i];
            let (rp, rt) = match row.reference {
                Some(j) => (
                    format!("{:.2}×", m.p50.as_secs_f64() / med[j].p50.as_secs_f64()),
                    format!("{:.2}×", m.per_sec / med[j].per_sec),
                ),
                None => ("(reference)".to_owned(), "(reference)".to_owned()),
            };
            println!(
                "| {} | {} | {} | {:.0} | {rp} | {rt} |",
                row.label,
                us(m.p50),
                us(m.p99),
                m.per_sec
            );
        }
        let queue = attribution(&a, "asks").await?["queue"].clone();
        println!(
            "\nasks: calls that waited for their host's turn: {}, p50 {} ms, p99 {} ms, max {} ms",
            queue["calls"], queue["p50Ms"], queue["p99Ms"], queue["maxMs"]
        );
        if queue["calls"].as_u64().unwrap_or(0) == 0 {
            return Err("two hosts on a scheduled server, and no call waited".into());
        }
        let quiet = attribution(&a, "quiet").await?;
        if quiet["mode"] != "unscheduled" || !quiet["queue"].is_null() {
            return Err(format!("the quiet server was held back: {quiet}").into());
        }
        engine.registry().shutdown().await;
        BenchResult::Ok(())
    })
}
