//! The catalog at scale (issue 13, goal 6), in one run:
//!
//! - `list`: a full `tools/list` (every page) of a 100 × 100-tool catalog
//!   (about 10,000 tools) through the socket of a real `mcphost daemon`,
//!   checked for the exact count of generated tools;
//! - `rebuild`: in-process, the time to publish a catalog after one
//!   server's list changed, at 1k, 3k and 10k tools in total (100 tools per
//!   server): `full` names every server again (what every change cost
//!   before: `catalog::build`), `incremental` re-names the one server and
//!   composes the rest (`CatalogBuilder::update` + `publish`); each result
//!   is checked against the full build.
//!
//! - `list_changed`: through a real daemon with 100 × 100 tools, one
//!   server adds a tool every 250 ms and sends `tools/list_changed`; the
//!   time from its send (the test server logs its clock) until the daemon's
//!   own `list_changed` reaches a socket client, which then checks that the
//!   listing has the new tool. Both clocks are this machine's wall clock.
//!
//! - `hygiene`: in-process, `registry::hygiene::clean` (scan + strip, what
//!   the registry runs on each server's lists when they change) over 1k
//!   tools, for ordinary ASCII text, non-ASCII text (no fast path) and
//!   hidden text in every tool, next to a full catalog build of the same
//!   tools.
//!
//! - `pins`: pinning a 1k-tool listing in-process (`PinStore::observe`: the
//!   first listing, which pins every tool, and every later one, which
//!   compares), and a `tools/call` through two real daemons side by side,
//!   one with `pinning: off` and one with `pinning: warn`: pins run on
//!   listings, so the call's medians should match.
//!
//! Run with `cargo bench --bench catalog`; `cargo test --bench catalog`
//! runs a short smoke (10 servers × 10 tools, few rounds).
//!
//! Environment: `MCPHOST_BENCH_ROUNDS` (default 20), `MCPHOST_BENCH_SERVERS`
//! (default 100), `MCPHOST_BENCH_TOOLS` (tools per server, default 100),
//! `MCPHOST_BENCH_ROWS` (e.g. `hygiene,rebuild`; default all).

mod common;

use std::time::{Duration, Instant};

use mcphost::protocol::Tool;
use mcphost::registry::catalog::{self, CatalogBuilder, CatalogTool, NamingRules, ServerTools};

use common::{BenchResult, env_usize, median, start_daemon};

const TESTSERVER: &str = env!("CARGO_BIN_EXE_mcphost-testserver");

fn smoke() -> bool {
    // `cargo test --bench` passes no `--bench` flag.
    !std::env::args().any(|a| a == "--bench")
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn tools(server: usize, n: usize, generation: usize) -> BenchResult<Vec<Tool>> {
    (0..n)
        .map(|i| {
            let text = format!(
                r#"{{"name":"tool_{i:04}","description":"tool {i} of server {server}, generation {generation}","inputSchema":{{"type":"object","properties":{{"x":{{"type":"string"}}}}}}}}"#
            );
            Ok(serde_json::from_str(&text)?)
        })
        .collect()
}

fn rebuild_rows(rounds: usize, per_server: usize, totals: &[usize]) -> BenchResult<()> {
    println!(
        "\n| total tools | servers | full rebuild (before), median | incremental, median | speed-up |"
    );
    println!("|---|---|---|---|---|");
    let rules = NamingRules::default();
    for &total in totals {
        let servers = total / per_server;
        let names: Vec<String> = (0..servers).map(|s| format!("s{s:03}")).collect();
        let mut lists: Vec<Vec<Tool>> = (0..servers)
            .map(|s| tools(s, per_server, 0))
            .collect::<BenchResult<_>>()?;
        let mut b = CatalogBuilder::<CatalogTool>::new("tools", rules.clone());
        for (n, l) in names.iter().zip(&lists) {
            b.push_server(n, n, catalog::tool_items(l));
        }
        b.publish();
        let (mut full, mut inc) = (Vec::new(), Vec::new());
        for round in 1..=rounds {
            let s = round % servers;
            lists[s] = tools(s, per_server, round)?;
            let t = Instant::now();
            assert!(b.update(&names[s], &names[s], catalog::tool_items(&lists[s])));
            let new = b.publish();
            inc.push(t.elapsed());
            let input: Vec<ServerTools<'_>> = names
                .iter()
                .zip(&lists)
                .map(|(n, l)| ServerTools {
                    server: n,
                    prefix: n,
                    tools: l,
                })
                .collect();
            let t = Instant::now();
            let whole = catalog::build(&input, &rules);
            full.push(t.elapsed());
            if new.fingerprint() != whole.fingerprint()
                || new.len() != total
                || new
                    .tools()
                    .iter()
                    .zip(whole.tools())
                    .any(|(a, b)| a.raw.get() != b.raw.get())
            {
                return Err("incremental catalog differs from the full build".into());
            }
        }
        let (f, i) = (median(full), median(inc));
        println!(
            "| {total} | {servers} | {} ms | {} ms | {:.1}× |",
            ms(f),
            ms(i),
            f.as_secs_f64() / i.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}

/// `total` tools whose description and property description end in `tail`.
fn tools_with(total: usize, tail: &str) -> BenchResult<Vec<Tool>> {
    (0..total)
        .map(|i| {
            let v = serde_json::json!({
                "name": format!("tool_{i:04}"),
                "description": format!("Reads file {i} and returns its text, or an error.{tail}"),
                "inputSchema": {"type": "object", "properties": {
                    "path": {"type": "string", "description": format!("Absolute path{tail}")},
                    "max": {"type": "integer", "minimum": 0}}}
            });
            Ok(serde_json::from_str(&v.to_string())?)
        })
        .collect()
}

fn hygiene_rows(rounds: usize, total: usize) -> BenchResult<()> {
    use mcphost::registry::hygiene::{Item, clean};
    println!(
        "\n| tools' text | tools | scan + strip, median | per tool | full catalog build of the same tools, median |"
    );
    println!("|---|---|---|---|---|");
    let rules = NamingRules::default();
    for (label, tail, hidden) in [
        ("ASCII (most servers)", "", false),
        ("non-ASCII (é, —): no fast path", " — café", false),
        ("hidden text in every tool", " <!-- x -->\u{200B}", true),
    ] {
        let list = tools_with(total, tail)?;
        let names: Vec<String> = (0..total.div_ceil(100))
            .map(|i| format!("s{i:03}"))
            .collect();
        let input: Vec<ServerTools<'_>> = list
            .chunks(100)
            .zip(&names)
            .map(|(c, n)| ServerTools {
                server: n,
                prefix: n,
                tools: c,
            })
            .collect();
        let (mut scan, mut build) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            let mut found = 0usize;
            for tool in &list {
                let c = clean(Item::Tool, &tool.raw, true)?;
                found += usize::from(c.stripped.is_some());
            }
            scan.push(t.elapsed());
            if found != if hidden { total } else { 0 } {
                return Err(format!("{label}: {found} of {total} tools stripped").into());
            }
            let t = Instant::now();
            let whole = catalog::build(&input, &rules);
            build.push(t.elapsed());
            if whole.len() != total {
                return Err("catalog lost tools".into());
            }
        }
        let s = median(scan);
        println!(
            "| {label} | {total} | {} ms | {:.2} µs | {} ms |",
            ms(s),
            s.as_secs_f64() * 1e6 / total as f64,
            ms(median(build))
        );
    }
    Ok(())
}

async fn list_row(rounds: usize, servers: usize, per_server: usize) -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let mut m = serde_json::Map::new();
    for s in 0..servers {
        m.insert(
            format!("s{s:03}"),
            serde_json::json!({"command": TESTSERVER, "args": ["--tools", per_server.to_string()]}),
        );
    }
    let config = serde_json::json!({"mcpServers": m, "loginShellPath": false}).to_string();
    let (_daemon, client) = start_daemon(dir.path(), &config).await?;
    let want = servers * per_server;
    let generated = |ts: &[Tool]| ts.iter().filter(|t| t.name.contains("__tool_")).count();
    let deadline = Instant::now() + Duration::from_secs(120);
    let total = loop {
        // While servers are still being listed, a page may belong to an
        // older listing: list again.
        let ts = match client.list_tools().await {
            Ok(ts) => ts,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if generated(&ts) == want {
            break ts.len();
        }
        if Instant::now() > deadline {
            return Err(format!("only {} of {want} tools listed", generated(&ts)).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let ts = client.list_tools().await?;
        samples.push(t.elapsed());
        if ts.len() != total || generated(&ts) != want {
            return Err(format!("listing had {} tools, want {total}", ts.len()).into());
        }
    }
    println!("\n| full `tools/list` through the daemon's socket | tools | median | min | goal |");
    println!("|---|---|---|---|---|");
    let min = samples.iter().copied().min().unwrap_or_default();
    println!(
        "| {servers} servers × {per_server} tools, all pages | {total} | {} ms | {} ms | ≤ 20 ms |",
        ms(median(samples)),
        ms(min)
    );
    Ok(())
}

/// The send time the test server logged for its dynamic tool `n`.
fn sent_at(lines: &[String], n: u64) -> Option<u128> {
    let tag = format!("added dynamic_{n:04} sent_unix_us=");
    lines.iter().rev().find_map(|l| {
        let at = l.find(&tag)? + tag.len();
        l[at..].trim().parse().ok()
    })
}

async fn list_changed_row(rounds: usize, servers: usize, per_server: usize) -> BenchResult<()> {
    use mcphost::client::CallOptions;
    let dir = tempfile::tempdir()?;
    let mut m = serde_json::Map::new();
    let tools = per_server.to_string();
    m.insert(
        "s000".into(),
        serde_json::json!({"command": TESTSERVER, "args": ["--tools", tools,
            "--capabilities", "tools", "--list-changed-after-ms", "250"]}),
    );
    for s in 1..servers {
        m.insert(
            format!("s{s:03}"),
            serde_json::json!({"command": TESTSERVER, "args": ["--tools", tools]}),
        );
    }
    let config = serde_json::json!({"mcpServers": m, "loginShellPath": false}).to_string();
    let (_daemon, client) = start_daemon(dir.path(), &config).await?;
    let want = servers * per_server;
    let generated = |ts: &[Tool]| ts.iter().filter(|t| t.name.contains("__tool_")).count();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(ts) = client.list_tools().await
            && generated(&ts) == want
        {
            break;
        }
        if Instant::now() > deadline {
            return Err("the catalog never listed every server's tools".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dynamic = |ts: &[Tool]| {
        ts.iter()
            .filter_map(|t| t.name.strip_prefix("s000__dynamic_")?.parse::<u64>().ok())
            .max()
    };
    let mut notes = client.notifications();
    let mut samples = Vec::new();
    let mut last = dynamic(&client.list_tools().await?).unwrap_or(0);
    let mut first = true;
    while samples.len() < rounds {
        let note = tokio::time::timeout(Duration::from_secs(10), notes.recv()).await??;
        let received = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        if note.method != "notifications/tools/list_changed" {
            continue;
        }
        let ts = client.list_tools().await?;
        let Some(n) = dynamic(&ts) else {
            return Err("list_changed, but the listing has no new tool".into());
        };
        // The first note may be for a tool the listing before the loop
        // already had: the catalog changes just before its note is sent.
        let was_first = std::mem::take(&mut first);
        if n == last && was_first {
            continue;
        }
        if n <= last {
            return Err(format!("list_changed, but the newest tool is still {n}").into());
        }
        if n > last + 1 {
            // Two changes in one notification: the latency of the first is unknown.
            last = n;
            continue;
        }
        last = n;
        // The server logs after it sends; its line may trail the notification.
        let mut sent = None;
        for _ in 0..50 {
            let logs = client
                .request_raw(
                    "mcphost/servers/logs",
                    Some(serde_json::value::to_raw_value(
                        &serde_json::json!({"name": "s000", "lines": 20}),
                    )?),
                    CallOptions::default(),
                )
                .await?;
            let v: serde_json::Value = serde_json::from_str(logs.get())?;
            let lines: Vec<String> = serde_json::from_value(v["lines"].clone())?;
            sent = sent_at(&lines, n);
            if sent.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let sent = sent.ok_or(format!("no send time logged for dynamic_{n:04}"))?;
        let took = received
            .as_micros()
            .checked_sub(sent)
            .ok_or("received before sent")?;
        samples.push(Duration::from_micros(u64::try_from(took)?));
    }
    println!(
        "\n| one server's `tools/list_changed` → the daemon's `list_changed` at a socket client | generated tools | median | max | goal |"
    );
    println!("|---|---|---|---|---|");
    let max = samples.iter().copied().max().unwrap_or_default();
    println!(
        "| 1 of {servers} servers × {per_server} tools changes | {want} | {} ms | {} ms | ≤ 2 ms |",
        ms(median(samples)),
        ms(max)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> BenchResult<()> {
    let smoke = smoke();
    let rounds = env_usize("MCPHOST_BENCH_ROUNDS", if smoke { 3 } else { 20 })?;
    let servers = env_usize("MCPHOST_BENCH_SERVERS", if smoke { 10 } else { 100 })?;
    let per_server = env_usize("MCPHOST_BENCH_TOOLS", if smoke { 10 } else { 100 })?;
    let totals: Vec<usize> = if smoke {
        vec![100]
    } else {
        vec![1_000, 3_000, 10_000]
    };
    let rows = std::env::var("MCPHOST_BENCH_ROWS").unwrap_or_default();
    let run = |row: &str| rows.is_empty() || rows.split(',').any(|r| r.trim() == row);
    if run("hygiene") {
        hygiene_rows(rounds, if smoke { 100 } else { 1_000 })?;
    }
    if run("rebuild") {
        rebuild_rows(rounds, 100.min(per_server.max(1)), &totals)?;
    }
    if run("list") {
        list_row(rounds, servers, per_server).await?;
    }
    if run("list_changed") {
        list_changed_row(rounds, servers, per_server).await?;
    }
    if run("pins") {
        pin_rows(rounds, if smoke { 100 } else { 1_000 })?;
    }
    if run("pinned_call") {
        pinned_call_row(rounds).await?;
    }
    Ok(())
}

/// A tool the size of a real server's: a paragraph of description and a
/// schema of a few typed, described properties.
fn rich_tool(i: usize, generation: usize) -> BenchResult<Tool> {
    let v = serde_json::json!({
        "name": format!("tool_{i:04}"),
        "title": format!("Tool {i}"),
        "description": format!("Reads the record {i} of the store and returns it as JSON, with its history when `history` is set. Generation {generation}. Fails when the record does not exist or the caller may not read it."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "The record's id."},
                "history": {"type": "boolean", "description": "Include earlier versions.", "default": false},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                "fields": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["id"],
            "additionalProperties": false
        },
        "annotations": {"readOnlyHint": true, "openWorldHint": false}
    });
    Ok(serde_json::from_value(v)?)
}

/// `PinStore::observe` of one server's `n`-tool listing: the first (pins
/// everything, in memory) and the steady state (compares; one tool changed
/// every round so the drift path runs too).
fn pin_rows(rounds: usize, n: usize) -> BenchResult<()> {
    use mcphost::registry::pins::{Listing, PinStore};
    let listing: Vec<Tool> = (0..n)
        .map(|i| rich_tool(i, 0))
        .collect::<BenchResult<_>>()?;
    let bytes: usize = listing.iter().map(|t| t.raw.get().len()).sum();
    let (mut first, mut again, mut drifted) = (Vec::new(), Vec::new(), Vec::new());
    let mut restarted = Vec::new();
    let dir = tempfile::tempdir()?;
    for round in 0..rounds.max(5) {
        let store = PinStore::in_memory();
        let t = Instant::now();
        store.observe("s", "k", Listing::tools(&listing), &|_| false);
        first.push(t.elapsed());
        let t = Instant::now();
        store.observe("s", "k", Listing::tools(&listing), &|_| false);
        again.push(t.elapsed());
        // A new daemon on the pins a first one wrote (file write excluded).
        let file = dir.path().join(format!("pins-{round}.json"));
        PinStore::at(file.clone()).observe("s", "k", Listing::tools(&listing), &|_| false);
        let store_again = PinStore::at(file);
        let t = Instant::now();
        store_again.observe("s", "k", Listing::tools(&listing), &|_| false);
        restarted.push(t.elapsed());
        let mut changed = listing.clone();
        changed[round % n] = rich_tool(round % n, round + 1)?;
        let t = Instant::now();
        let news = store.observe("s", "k", Listing::tools(&changed), &|_| false);
        drifted.push(t.elapsed());
        if news.map(|d| d.tools.changed.len()) != Some(1) {
            return Err("the changed tool was not flagged".into());
        }
    }
    println!("\n| pinning one listing (in-process) | tools | JSON bytes | median | max | goal |");
    println!("|---|---|---|---|---|---|");
    for (what, v) in [
        ("first listing: hash and pin every tool", first),
        ("later listing, nothing changed", again),
        (
            "first listing after a restart, pins from the file",
            restarted,
        ),
        ("later listing, one tool changed", drifted),
    ] {
        let max = v.iter().copied().max().unwrap_or_default();
        println!(
            "| {what} | {n} | {bytes} | {} ms | {} ms | < 1 ms |",
            ms(median(v)),
            ms(max)
        );
    }
    Ok(())
}

/// `tools/call echo` through two real daemons, `pinning: off` and
/// `pinning: warn`, rounds interleaved (which goes first alternates).
async fn pinned_call_row(rounds: usize) -> BenchResult<()> {
    use mcphost::client::CallOptions;
    let calls = if smoke() { 20 } else { 500 };
    let mut daemons = Vec::new();
    for pinning in ["off", "warn"] {
        let dir = tempfile::tempdir()?;
        let config = serde_json::json!({
            "loginShellPath": false,
            "pinning": pinning,
            "mcpServers": {"ts": {"command": TESTSERVER, "args": ["--tools", "1000"]}},
        })
        .to_string();
        let (d, client) = start_daemon(dir.path(), &config).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while client.list_tools().await.map_or(0, |t| t.len()) < 1000 {
            if Instant::now() > deadline {
                return Err(format!("pinning {pinning}: ts not listed").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        daemons.push((pinning, dir, d, client, Vec::new()));
    }
    let args = serde_json::value::RawValue::from_string(r#"{"text":"x"}"#.to_owned())?;
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            vec![0, 1]
        } else {
            vec![1, 0]
        };
        for i in order {
            let (_, _, _, client, samples) = &mut daemons[i];
            for _ in 0..calls {
                let t = Instant::now();
                client
                    .call_tool("ts__echo", Some(args.clone()), CallOptions::default())
                    .await?;
                samples.push(t.elapsed());
            }
        }
    }
    println!(
        "\n| `tools/call` through the daemon, 1,000-tool server | pinning | calls | median | p99 |"
    );
    println!("|---|---|---|---|---|");
    for (pinning, _, _, _, samples) in daemons {
        let n = samples.len();
        let mut sorted = samples.clone();
        sorted.sort();
        let p99 = sorted[(n * 99 / 100).min(n.saturating_sub(1))];
        println!(
            "| echo | {pinning} | {n} | {} µs | {} µs |",
            common::us(median(samples)),
            common::us(p99)
        );
    }
    Ok(())
}
