//! Round-trip latency of one `tools/call` through `ServerClient`, next to the
//! floor: the same call written by hand to the test server's stdin and read
//! back from its stdout.
//!
//! Run with `cargo bench --bench roundtrip`. Prints a Markdown table.
//!
//! Environment:
//! - `MCPHOST_BENCH_CALLS`: calls per round for small messages (default 2000;
//!   the 100 KiB payload rows use a tenth of it, at least 20).
//! - `MCPHOST_BENCH_ROUNDS`: rounds (default 5). Every scenario runs once per
//!   round, interleaved, and the table shows the median across rounds.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use mcphost::client::{CallOptions, ClientOptions, ServerClient};
use mcphost::protocol::RawValue;
use mcphost::transport::stdio::{StdioConfig, spawn};

use common::{BenchResult, Round, env_usize, summarize, us};

const TESTSERVER: &str = env!("CARGO_BIN_EXE_mcphost-testserver");
const WARMUP: usize = 200;
const PAYLOAD_BYTES: usize = 100 * 1024;
const CONCURRENCY: [usize; 2] = [16, 64];

/// `{"text":"…"}` with a `len`-byte ASCII text (no escapes needed).
fn echo_args(len: usize) -> String {
    let text: String = "lorem ipsum dolor sit amet "
        .chars()
        .cycle()
        .take(len)
        .collect();
    format!(r#"{{"text":"{text}"}}"#)
}

// ---------------------------------------------------------------------------
// The floor: a hand-written client on blocking pipes.

struct RawServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    line: Vec<u8>,
    out: Vec<u8>,
}

impl RawServer {
    fn start() -> BenchResult<RawServer> {
        let mut child = Command::new(TESTSERVER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("missing stdio pipe".into());
        };
        let mut s = RawServer {
            child,
            stdin,
            stdout: BufReader::with_capacity(64 * 1024, stdout),
            next_id: 0,
            line: Vec::with_capacity(256 * 1024),
            out: Vec::with_capacity(256 * 1024),
        };
        s.stdin.write_all(
            br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw-bench","version":"0"}}}
"#,
        )?;
        s.next_id = 1;
        s.read_response(0)?;
        s.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")?;
        Ok(s)
    }

    fn send(&mut self, args: &str) -> BenchResult<u64> {
        let id = self.next_id;
        self.next_id += 1;
        self.out.clear();
        write!(
            self.out,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":"#
        )?;
        self.out.extend_from_slice(args.as_bytes());
        self.out.extend_from_slice(b"}}\n");
        self.stdin.write_all(&self.out)?;
        Ok(id)
    }

    /// Reads one line and checks it answers `id` (the server writes
    /// `{"jsonrpc":"2.0","id":N,...`).
    fn read_response(&mut self, id: u64) -> BenchResult<()> {
        self.line.clear();
        if self.stdout.read_until(b'\n', &mut self.line)? == 0 {
            return Err("test server closed its stdout".into());
        }
        match response_id(&self.line) {
            Some((got, true)) if got == id => Ok(()),
            _ => Err(format!(
                "expected a result for id {id}, got {}",
                String::from_utf8_lossy(&self.line[..self.line.len().min(200)])
            )
            .into()),
        }
    }

    fn call(&mut self, args: &str) -> BenchResult<()> {
        let id = self.send(args)?;
        self.read_response(id)
    }

    /// `calls` calls, one at a time; returns per-call latencies and wall time.
    fn sequential(&mut self, args: &str, calls: usize) -> BenchResult<Round> {
        let mut samples = Vec::with_capacity(calls);
        let wall = Instant::now();
        for _ in 0..calls {
            let t = Instant::now();
            self.call(args)?;
            samples.push(t.elapsed());
        }
        Ok(Round::new(samples, wall.elapsed()))
    }

    /// Closed loop with `depth` requests in flight: each response read lets
    /// one more request out. Responses come back in order.
    fn pipelined(&mut self, args: &str, calls: usize, depth: usize) -> BenchResult<Round> {
        let mut sent = std::collections::VecDeque::with_capacity(depth);
        let mut samples = Vec::with_capacity(calls);
        let wall = Instant::now();
        for _ in 0..depth.min(calls) {
            sent.push_back((self.send(args)?, Instant::now()));
        }
        let mut issued = sent.len();
        while let Some((id, t)) = sent.pop_front() {
            self.read_response(id)?;
            samples.push(t.elapsed());
            if issued < calls {
                sent.push_back((self.send(args)?, Instant::now()));
                issued += 1;
            }
        }
        Ok(Round::new(samples, wall.elapsed()))
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The id of a response line and whether it carries a result.
fn response_id(line: &[u8]) -> Option<(u64, bool)> {
    let rest = line.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let id = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    Some((id, rest[digits..].starts_with(br#","result":"#)))
}

// ---------------------------------------------------------------------------
// The library.

async fn connect() -> BenchResult<ServerClient> {
    let conn = spawn("bench", &StdioConfig::new(TESTSERVER, Vec::<String>::new())).await?;
    Ok(ServerClient::connect("bench", conn, ClientOptions::default()).await?)
}

fn raw(args: &str) -> BenchResult<Box<RawValue>> {
    Ok(RawValue::from_string(args.to_owned())?)
}

async fn client_call(client: &ServerClient, args: Box<RawValue>) -> BenchResult<()> {
    let r = client
        .call_tool("echo", Some(args), CallOptions::default())
        .await?;
    if r.is_error {
        return Err(format!("echo failed: {}", r.raw.get()).into());
    }
    Ok(())
}

/// `callers` tasks share one client; together they make `calls` calls.
/// Sequential calls are one caller: a spawned task, as in a real host, so the
/// bench's own `block_on` thread is not an extra hop.
async fn client_concurrent(
    client: &Arc<ServerClient>,
    args: &RawValue,
    calls: usize,
    callers: usize,
) -> BenchResult<Round> {
    let wall = Instant::now();
    let mut tasks = Vec::with_capacity(callers);
    for i in 0..callers {
        let share = calls / callers + usize::from(i < calls % callers);
        let client = client.clone();
        let args = args.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::with_capacity(share);
            for _ in 0..share {
                let a = args.clone();
                let t = Instant::now();
                client_call(&client, a).await.map_err(|e| e.to_string())?;
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
// Statistics.

struct Row {
    label: String,
    /// Index of the row the p50 ratio is taken against.
    baseline: Option<usize>,
    rounds: Vec<Round>,
}

fn row(label: impl Into<String>, baseline: Option<usize>) -> Row {
    Row {
        label: label.into(),
        baseline,
        rounds: Vec::new(),
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "| scenario | calls/round | p50 µs | p50 range µs | p99 µs | mean µs | calls/s | p50 vs raw | calls/s vs raw |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let sums: Vec<Round> = rows.iter().map(|r| summarize(&r.rounds)).collect();
    for (r, s) in rows.iter().zip(&sums) {
        let (ratio, tput) = match r.baseline.map(|b| sums[b]) {
            Some(b) => (
                format!("{:.2}×", s.p50.as_secs_f64() / b.p50.as_secs_f64()),
                format!("{:.2}×", s.per_sec / b.per_sec),
            ),
            None => ("1 (baseline)".to_owned(), "1 (baseline)".to_owned()),
        };
        let lo = r.rounds.iter().map(|r| r.p50).min().unwrap_or_default();
        let hi = r.rounds.iter().map(|r| r.p50).max().unwrap_or_default();
        println!(
            "| {} | {} | {} | {}–{} | {} | {} | {:.0} | {} | {} |",
            r.label,
            s.calls,
            us(s.p50),
            us(lo),
            us(hi),
            us(s.p99),
            us(s.mean),
            s.per_sec,
            ratio,
            tput
        );
    }
}

// ---------------------------------------------------------------------------

fn main() -> BenchResult<()> {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // then a smoke run is enough.
    let benching = std::env::args().any(|a| a == "--bench");
    let default_calls = if benching { 2000 } else { 50 };
    let default_rounds = if benching { 5 } else { 1 };
    let calls = env_usize("MCPHOST_BENCH_CALLS", default_calls)?;
    let rounds = env_usize("MCPHOST_BENCH_ROUNDS", default_rounds)?;
    let big_calls = (calls / 10).max(20);

    let small = r#"{"text":"x"}"#.to_owned();
    let big = echo_args(PAYLOAD_BYTES);
    let small_raw = raw(&small)?;
    let big_raw = raw(&big)?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut raw_srv = RawServer::start()?;
    let client = Arc::new(rt.block_on(connect())?);

    // Warm up both paths (page cache, allocator, branch predictors, tokio workers).
    for _ in 0..WARMUP {
        raw_srv.call(&small)?;
        rt.block_on(client_call(&client, small_raw.clone()))?;
    }
    for _ in 0..WARMUP / 10 {
        raw_srv.call(&big)?;
        rt.block_on(client_call(&client, big_raw.clone()))?;
    }
    rt.block_on(client_concurrent(&client, &small_raw, WARMUP, 16))?;

    // Row layout; baselines refer to indices here.
    let mut rows = vec![
        row("raw pipe, sequential", None),
        row("ServerClient, sequential", Some(0)),
    ];
    for c in CONCURRENCY {
        let base = rows.len();
        rows.push(row(format!("raw pipe, {c} in flight"), None));
        rows.push(row(
            format!("ServerClient, {c} concurrent callers"),
            Some(base),
        ));
    }
    let big_base = rows.len();
    rows.push(row("raw pipe, 100 KiB echo, sequential", None));
    rows.push(row(
        "ServerClient, 100 KiB echo, sequential",
        Some(big_base),
    ));

    for round in 0..rounds {
        eprintln!("round {}/{rounds}", round + 1);
        let mut i = 0;
        let mut push = |r: Round| {
            rows[i].rounds.push(r);
            i += 1;
        };
        push(raw_srv.sequential(&small, calls)?);
        push(rt.block_on(client_concurrent(&client, &small_raw, calls, 1))?);
        for c in CONCURRENCY {
            push(raw_srv.pipelined(&small, calls, c)?);
            push(rt.block_on(client_concurrent(&client, &small_raw, calls, c))?);
        }
        push(raw_srv.sequential(&big, big_calls)?);
        push(rt.block_on(client_concurrent(&client, &big_raw, big_calls, 1))?);
        let p50s: Vec<String> = rows
            .iter()
            .filter_map(|r| r.rounds.last())
            .map(|r| us(r.p50))
            .collect();
        eprintln!("  p50 µs per row: {}", p50s.join(" "));
    }

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "Median of {rounds} round(s), {cpus} CPU(s) available; `echo` tool of mcphost-testserver; \
         small call = `{{\"text\":\"x\"}}`, payload call = {PAYLOAD_BYTES}-byte text each way."
    );
    println!();
    print_table(&rows);

    drop(raw_srv);
    if let Ok(client) = Arc::try_unwrap(client) {
        rt.block_on(client.shutdown());
    }
    Ok(())
}
