//! What `sandbox` costs at start: spawn → `initialize` answered → first
//! `tools/list`, for the same server unsandboxed and under `"workspace"`
//! (Linux: the Landlock ruleset and the seccomp program built before fork,
//! applied in the child), alternating so drift hits both alike.
//!
//! Servers: the bundled test server, and `server-filesystem` (Node) when
//! the interop dir has it (`MCPHOST_INTEROP_DIR`, default tests/interop).
//! Each start is checked: the listing must hold the server's tools, and the
//! sandboxed one's status must report the filesystem enforced.
//!
//! Run with `cargo bench --bench sandbox` (`MCPHOST_BENCH_ROUNDS`, default
//! 30 starts per row); `cargo test --bench sandbox` runs 3.

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{BenchResult, env_usize, median};
use mcphost::client::{ClientOptions, ServerClient};
use mcphost::config::sandbox::{RootAccess, Sandbox, SandboxNetwork};
use mcphost::registry::from_config::sandbox_spec;
use mcphost::transport::sandbox::report;
use mcphost::transport::stdio::{StdioConfig, spawn};

const TESTSERVER: &str = env!("CARGO_BIN_EXE_mcphost-testserver");

/// The `workspace` preset as the config gives it, with `root` as the root.
fn workspace(root: &Path) -> BenchResult<Sandbox> {
    let text = format!(
        r#"{{ "loginShellPath": false, "roots": [{}], "mcpServers": {{ "s": {{ "command": "x", "sandbox": "workspace" }} }} }}"#,
        serde_json::json!(root.display().to_string())
    );
    let env = |name: &str| std::env::var(name).ok();
    let cfg = mcphost::config::parse(&text, Path::new("/bench/config.json"), &env)?;
    let Some(mcphost::config::ServerConfig {
        transport: mcphost::config::TransportConfig::Stdio(s),
        ..
    }) = cfg.servers.into_iter().next()
    else {
        return Err("no stdio server parsed".into());
    };
    let sandbox = s.sandbox.ok_or("no sandbox parsed")?;
    assert_eq!(sandbox.roots, RootAccess::Write);
    assert_eq!(sandbox.network, SandboxNetwork::None);
    Ok(sandbox)
}

async fn start_once(cfg: &StdioConfig, min_tools: usize) -> BenchResult<Duration> {
    let t0 = Instant::now();
    let conn = spawn("bench", cfg).await?;
    let client = ServerClient::connect("bench", conn, ClientOptions::default()).await?;
    let tools = client.list_tools().await?;
    let took = t0.elapsed();
    if tools.len() < min_tools {
        return Err(format!("listed {} tools, expected ≥ {min_tools}", tools.len()).into());
    }
    client.shutdown().await;
    Ok(took)
}

struct Row {
    name: &'static str,
    plain: StdioConfig,
    min_tools: usize,
}

fn rows(root: &Path) -> Vec<Row> {
    let mut rows = vec![Row {
        name: "testserver (Rust)",
        plain: StdioConfig::new(TESTSERVER, Vec::<String>::new()),
        min_tools: 9,
    }];
    let interop = std::env::var_os("MCPHOST_INTEROP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop"));
    let entry = interop.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if entry.exists() {
        let node = std::env::var("MCPHOST_NODE").unwrap_or_else(|_| "node".into());
        let mut cfg = StdioConfig::new(
            node,
            [entry.display().to_string(), root.display().to_string()],
        );
        cfg.env
            .insert("PATH".into(), std::env::var("PATH").unwrap_or_default());
        rows.push(Row {
            name: "server-filesystem (Node)",
            plain: cfg,
            min_tools: 5,
        });
    } else {
        println!("(server-filesystem not installed: its row is left out)");
    }
    rows
}

fn main() -> BenchResult<()> {
    let benching = std::env::args().any(|a| a == "--bench");
    let rounds = env_usize("MCPHOST_BENCH_ROUNDS", if benching { 30 } else { 3 })?;
    let dir = tempfile::tempdir()?;
    let sandbox = workspace(dir.path())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!("start → initialize → tools/list, median of {rounds} starts each");
    println!(
        "{:<26} {:>12} {:>12} {:>10}",
        "server", "plain ms", "sandbox ms", "added ms"
    );
    for row in rows(dir.path()) {
        let mut boxed = row.plain.clone();
        boxed.sandbox = Some(sandbox_spec(&sandbox, None));
        let r = report(boxed.sandbox.as_ref().ok_or("no spec")?);
        if r.enforced.filesystem == "not" {
            return Err(format!("the sandbox is not enforced here: {r:?}").into());
        }
        let (mut plain, mut confined) = (Vec::new(), Vec::new());
        // One of each first: page cache and the runtime's own warm-up.
        rt.block_on(start_once(&row.plain, row.min_tools))?;
        rt.block_on(start_once(&boxed, row.min_tools))?;
        for _ in 0..rounds {
            plain.push(rt.block_on(start_once(&row.plain, row.min_tools))?);
            confined.push(rt.block_on(start_once(&boxed, row.min_tools))?);
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (p, c) = (median(plain), median(confined));
        println!(
            "{:<26} {:>12.2} {:>12.2} {:>10.2}",
            row.name,
            ms(p),
            ms(c),
            ms(c) - ms(p)
        );
    }
    Ok(())
}
