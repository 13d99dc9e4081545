//! One small `tools/call` (server-everything's `echo`) over Streamable HTTP,
//! along three paths, in one run, against one server-everything process
//! (`streamableHttp` mode, from tests/interop/node_modules):
//!
//! - `daemon`: a real `mcphost daemon` process with the server in its config
//!   (`"type": "streamable-http"`), called over its Unix socket by a
//!   `ServerClient` in this process (as benches/paths.rs does), tool
//!   `ev__echo`: socket, engine, then the daemon's HTTP client;
//! - `direct`: `ServerClient` over `transport::http::connect` in this process;
//! - `raw`: the floor: a hand-written HTTP/1.1 client on one kept-alive
//!   `TcpStream` (the POST written in one piece, the response read to the end
//!   of its event stream), i.e. the server's own time plus loopback TCP;
//! - `python-sdk`: the official Python SDK's client (`mcp` 2.3.0,
//!   `streamable_http_client` + `ClientSession.call_tool`), in its own
//!   process: tests/interop/http_client.py `--serve`, which times each call
//!   with `perf_counter_ns` and reports the samples for every round. The
//!   reference.
//!
//! Each path has its own session. Calls are sequential (one caller). Every
//! call sends its own text (`{"message":"c<N>"}`) and checks that the result
//! echoes exactly it. Each round runs every path once, in a rotating order,
//! after a warm-up; the table shows the median across rounds of each path's
//! p50, p99, mean and calls/s, the range of its p50, and ratios against the
//! Python SDK and against `direct`.
//!
//! Run with `cargo bench --bench http`. Needs the interop servers
//! (scripts/setup-interop.sh); `cargo test --benches` runs a short smoke
//! version, which skips itself when they are missing.
//!
//! Environment:
//! - `MCPHOST_BENCH_CALLS`: calls per path and round (default 1000).
//! - `MCPHOST_BENCH_ROUNDS`: rounds (default 5).
//! - `MCPHOST_BENCH_ONLY=direct,raw`: run only these paths (`daemon`,
//!   `direct`, `python`, `raw`), e.g. to profile one.
//! - `MCPHOST_INTEROP_DIR`, `MCPHOST_PYTHON`, `MCPHOST_NODE`: as for the
//!   interop tests.

mod common;
#[path = "../tests/common/http_server.rs"]
mod http_server;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mcphost::client::{CallOptions, ClientOptions, ServerClient};
use mcphost::protocol::RawValue;
use mcphost::transport::http::{HttpConfig, HttpMode};

use common::{BenchResult, Daemon, Round, env_usize, start_daemon, summarize, us};
use http_server::HttpServer;

const SERVER: &str = "ev";
const CATALOG_ECHO: &str = "ev__echo";

/// Where the pinned interop servers are, as tests/common/mod.rs finds them.
struct Interop {
    dir: PathBuf,
    python: PathBuf,
    node: String,
}

fn interop() -> Option<Interop> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os("MCPHOST_INTEROP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("tests/interop"));
    let python = std::env::var_os("MCPHOST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/bin/python"));
    let node = std::env::var("MCPHOST_NODE").unwrap_or_else(|_| "node".to_owned());
    (everything_entry(&dir).exists() && python.exists()).then_some(Interop { dir, python, node })
}

fn everything_entry(dir: &Path) -> PathBuf {
    dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// Per-call text: unique across the run.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(0);

async fn echo(client: &ServerClient, tool: &str) -> BenchResult<()> {
    let tok = format!("c{}", NEXT_TOKEN.fetch_add(1, Ordering::Relaxed));
    let args = RawValue::from_string(format!(r#"{{"message":"{tok}"}}"#))?;
    let r = client
        .call_tool(tool, Some(args), CallOptions::default())
        .await?;
    // `"text":"Echo: c12"` cannot match inside `"Echo: c123"`: the quote closes it.
    if r.is_error || !r.raw.get().contains(&format!(r#""text":"Echo: {tok}""#)) {
        return Err(format!("echo of {tok:?} came back as {}", r.raw.get()).into());
    }
    Ok(())
}

/// `calls` sequential calls in a spawned task (as a host would make them).
async fn run_client(
    client: std::sync::Arc<ServerClient>,
    tool: &'static str,
    calls: usize,
) -> BenchResult<Round> {
    tokio::spawn(async move {
        let wall = Instant::now();
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            echo(&client, tool).await.map_err(|e| e.to_string())?;
            samples.push(t.elapsed());
        }
        Ok::<_, String>(Round::new(samples, wall.elapsed()))
    })
    .await?
    .map_err(Into::into)
}

// ---------------------------------------------------------------------------
// The paths.

/// The Python SDK client in --serve mode: one line with a call count in, one
/// JSON line with the samples out.
struct PySdk {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl PySdk {
    fn start(env: &Interop, url: &str) -> BenchResult<PySdk> {
        let mut child = Command::new(&env.python)
            .arg(env.dir.join("http_client.py"))
            .arg(url)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut py = PySdk {
            child,
            stdin,
            stdout,
        };
        let ready = py.line()?;
        if ready.get("ready") != Some(&serde_json::Value::Bool(true)) {
            return Err(format!("python client: unexpected first line {ready}").into());
        }
        Ok(py)
    }

    fn line(&mut self) -> BenchResult<serde_json::Value> {
        let mut s = String::new();
        if self.stdout.read_line(&mut s)? == 0 {
            return Err("the python client exited".into());
        }
        Ok(serde_json::from_str(&s)?)
    }

    fn run(&mut self, calls: usize) -> BenchResult<Round> {
        writeln!(self.stdin, "{calls}")?;
        self.stdin.flush()?;
        let v = self.line()?;
        let samples: Vec<Duration> = v["samplesUs"]
            .as_array()
            .ok_or_else(|| format!("python client: no samples in {v}"))?
            .iter()
            .filter_map(|s| s.as_f64())
            .map(|us| Duration::from_nanos((us * 1000.0) as u64))
            .collect();
        if samples.len() != calls {
            return Err(format!("python client made {} calls, not {calls}", samples.len()).into());
        }
        let wall = Duration::from_nanos((v["wallUs"].as_f64().unwrap_or(0.0) * 1000.0) as u64);
        Ok(Round::new(samples, wall))
    }
}

impl Drop for PySdk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The floor: JSON-RPC over HTTP/1.1 by hand on one kept-alive connection.
struct RawHttp {
    stream: BufReader<std::net::TcpStream>,
    port: u16,
    session: String,
    next_id: u64,
}

impl RawHttp {
    fn tcp(port: u16) -> BenchResult<BufReader<std::net::TcpStream>> {
        let tcp = std::net::TcpStream::connect(("127.0.0.1", port))?;
        tcp.set_nodelay(true)?;
        Ok(BufReader::new(tcp))
    }

    fn connect(port: u16) -> BenchResult<RawHttp> {
        let mut raw = RawHttp {
            stream: Self::tcp(port)?,
            port,
            session: String::new(),
            next_id: 1,
        };
        let (headers, body) = raw.post(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        )?;
        raw.session = header(&headers, "mcp-session-id")
            .ok_or_else(|| format!("no session id in {headers}"))?
            .to_owned();
        if !body.contains(r#""protocolVersion":"2025-11-25""#) {
            return Err(format!("raw initialize: {body}").into());
        }
        raw.post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
        Ok(raw)
    }

    /// One POST; the response's headers and whole body.
    fn post(&mut self, body: &str) -> BenchResult<(String, String)> {
        let mut req = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.port,
            body.len()
        );
        if !self.session.is_empty() {
            req.push_str(&format!(
                "Mcp-Session-Id: {}\r\nMcp-Protocol-Version: 2025-11-25\r\n",
                self.session
            ));
        }
        req.push_str("\r\n");
        req.push_str(body);
        self.stream.get_mut().write_all(req.as_bytes())?;

        let mut headers = String::new();
        loop {
            let n = self.stream.read_line(&mut headers)?;
            if n == 0 {
                return Err("raw: connection closed".into());
            }
            if headers.ends_with("\r\n\r\n") {
                break;
            }
        }
        if !headers.starts_with("HTTP/1.1 2") {
            return Err(format!("raw: {headers}").into());
        }
        let mut out = Vec::new();
        if let Some(len) = header(&headers, "content-length") {
            out.resize(len.parse::<usize>()?, 0);
            self.stream.read_exact(&mut out)?;
        } else if header(&headers, "transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let mut size = String::new();
                self.stream.read_line(&mut size)?;
                let size = usize::from_str_radix(size.trim(), 16)?;
                let start = out.len();
                out.resize(start + size + 2, 0); // the chunk and its CRLF
                self.stream.read_exact(&mut out[start..])?;
                out.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        }
        Ok((headers, String::from_utf8(out)?))
    }

    fn echo(&mut self) -> BenchResult<()> {
        let tok = format!("c{}", NEXT_TOKEN.fetch_add(1, Ordering::Relaxed));
        let id = self.next_id;
        self.next_id += 1;
        let (_, body) = self.post(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"{tok}"}}}}}}"#
        ))?;
        if !body.contains(&format!(r#""text":"Echo: {tok}""#)) {
            return Err(format!("raw echo of {tok:?} came back as {body}").into());
        }
        Ok(())
    }

    fn run(&mut self, calls: usize) -> BenchResult<Round> {
        // A new connection (same session) for each round, not timed: Node
        // closes a connection after 5 s idle, and the other paths run
        // in between. (hyper's pool reconnects the same way.)
        self.stream = Self::tcp(self.port)?;
        let wall = Instant::now();
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            self.echo()?;
            samples.push(t.elapsed());
        }
        Ok(Round::new(samples, wall.elapsed()))
    }
}

/// A response header's value (names are case-insensitive).
fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

async fn daemon(dir: &Path, url: &str) -> BenchResult<(Daemon, ServerClient)> {
    let cfg = serde_json::json!({
        "mcpServers": { SERVER: { "url": url, "type": "streamable-http" } },
        "loginShellPath": false,
    });
    let (d, client) = start_daemon(dir, &cfg.to_string()).await?;
    // Until the server is ready and its tools are in the catalog.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match echo(&client, CATALOG_ECHO).await {
            Ok(()) => break,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    Ok((d, client))
}

async fn direct(url: &str) -> BenchResult<ServerClient> {
    let mut cfg = HttpConfig::new(url.to_owned());
    cfg.mode = HttpMode::Streamable;
    let conn = mcphost::transport::http::connect("direct", cfg).await?;
    Ok(ServerClient::connect("direct", conn, ClientOptions::default()).await?)
}

// ---------------------------------------------------------------------------

const LABELS: [&str; 4] = [
    "mcphost daemon (socket → HTTP)",
    "mcphost ServerClient (HTTP)",
    "Python SDK client (HTTP)",
    "raw HTTP/1.1 by hand (floor)",
];
/// Names for `MCPHOST_BENCH_ONLY`.
const KEYS: [&str; 4] = ["daemon", "direct", "python", "raw"];
const DAEMON: usize = 0;
const DIRECT: usize = 1;
const PYTHON: usize = 2;
const RAW: usize = 3;

fn print_table(rounds: &[Vec<Round>]) {
    let sums: Vec<Option<Round>> = rounds
        .iter()
        .map(|r| (!r.is_empty()).then(|| summarize(r)))
        .collect();
    let ratio = |i: usize, j: usize| match (sums[i], sums[j]) {
        (Some(a), Some(b)) => Some(a.p50.as_secs_f64() / b.p50.as_secs_f64()),
        _ => None,
    };
    let cell = |i: usize, j: usize| {
        if i == j {
            "1 (reference)".to_owned()
        } else {
            ratio(i, j).map_or("—".to_owned(), |r| format!("{r:.2}×"))
        }
    };
    println!(
        "| path | calls/round | p50 µs | p50 range µs | p99 µs | mean µs | calls/s | p50 vs Python SDK | p50 vs ServerClient |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, label) in LABELS.iter().enumerate() {
        let Some(s) = sums[i] else { continue };
        let lo = rounds[i].iter().map(|r| r.p50).min().unwrap_or_default();
        let hi = rounds[i].iter().map(|r| r.p50).max().unwrap_or_default();
        println!(
            "| {label} | {} | {} | {}–{} | {} | {} | {:.0} | {} | {} |",
            s.calls,
            us(s.p50),
            us(lo),
            us(hi),
            us(s.p99),
            us(s.mean),
            s.per_sec,
            cell(i, PYTHON),
            cell(i, DIRECT),
        );
    }
    let diff = |i: usize, j: usize| match (sums[i], sums[j]) {
        (Some(a), Some(b)) => format!("{:.1}", (a.p50.as_secs_f64() - b.p50.as_secs_f64()) * 1e6),
        _ => "—".to_owned(),
    };
    println!();
    println!(
        "p50 differences: daemon − ServerClient {} µs, ServerClient − raw {} µs; \
         daemon / Python SDK {}",
        diff(DAEMON, DIRECT),
        diff(DIRECT, RAW),
        ratio(DAEMON, PYTHON).map_or("—".to_owned(), |r| format!("{r:.2}×")),
    );
}

fn main() -> BenchResult<()> {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and
    // then a smoke run is enough.
    let benching = std::env::args().any(|a| a == "--bench");
    let calls = env_usize("MCPHOST_BENCH_CALLS", if benching { 1000 } else { 20 })?;
    let rounds = env_usize("MCPHOST_BENCH_ROUNDS", if benching { 5 } else { 1 })?;
    let warmup = if benching { 200 } else { 5 };
    let only: Option<Vec<String>> = std::env::var("MCPHOST_BENCH_ONLY")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
    let Some(env) = interop() else {
        let msg = "the interop servers are not installed; run scripts/setup-interop.sh";
        if benching || std::env::var_os("MCPHOST_INTEROP_REQUIRED").is_some() {
            return Err(msg.into());
        }
        eprintln!("skipping: {msg}");
        return Ok(());
    };

    let entry = everything_entry(&env.dir);
    let server = HttpServer::start("everything", Duration::from_secs(60), |port| {
        let mut c = Command::new(&env.node);
        c.arg(&entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string());
        c
    })?;
    let url = server.url("/mcp");
    let dir = tempfile::tempdir()?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (daemon_proc, daemon_client) = rt.block_on(daemon(dir.path(), &url))?;
    let daemon_client = std::sync::Arc::new(daemon_client);
    let direct_client = std::sync::Arc::new(rt.block_on(direct(&url))?);
    let mut py = PySdk::start(&env, &url)?;
    let mut raw = RawHttp::connect(server.port)?;

    let mut run = |i: usize, n: usize| -> BenchResult<Round> {
        match i {
            DAEMON => rt.block_on(run_client(daemon_client.clone(), CATALOG_ECHO, n)),
            DIRECT => rt.block_on(run_client(direct_client.clone(), "echo", n)),
            PYTHON => py.run(n),
            _ => raw.run(n),
        }
    };

    let selected: Vec<usize> = (0..LABELS.len())
        .filter(|&i| only.as_ref().is_none_or(|o| o.iter().any(|k| k == KEYS[i])))
        .collect();
    for &i in &selected {
        run(i, warmup)?;
    }
    let mut results: Vec<Vec<Round>> = vec![Vec::new(); LABELS.len()];
    for round in 0..rounds {
        // Rotate the order so no path always runs right after another.
        for k in 0..selected.len() {
            let i = selected[(k + round) % selected.len()];
            results[i].push(run(i, calls)?);
        }
        let p50s: Vec<String> = selected
            .iter()
            .filter_map(|&i| {
                results[i]
                    .last()
                    .map(|r| format!("{} {}", KEYS[i], us(r.p50)))
            })
            .collect();
        eprintln!("round {}/{rounds}: p50 µs: {}", round + 1, p50s.join(", "));
    }

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "Median of {rounds} round(s), {cpus} CPU(s) available; `echo` of server-everything \
         (streamableHttp) with a per-call message, sequential, each result checked."
    );
    println!();
    print_table(&results);

    drop(raw);
    drop(py);
    rt.block_on(async {
        if let Ok(c) = std::sync::Arc::try_unwrap(direct_client) {
            c.shutdown().await;
        }
        if let Ok(c) = std::sync::Arc::try_unwrap(daemon_client) {
            c.shutdown().await;
        }
    });
    drop(daemon_proc);
    drop(server);
    Ok(())
}
