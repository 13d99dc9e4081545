//! The `mcphost` command line.
//!
//! This first cut has `inspect`: connect to one stdio MCP server, show what
//! it negotiated and offers, and optionally call a tool. The daemon, socket
//! and management commands arrive with the daemon.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use mcphost::client::{CallOptions, ClientOptions, ServerClient};
use mcphost::protocol::RawValue;
use mcphost::transport::stdio::{StdioConfig, spawn};

#[derive(Parser)]
#[command(
    name = "mcphost",
    version,
    about = "The host side of the Model Context Protocol"
)]
struct Cli {
    /// More logging on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Machine-readable JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start one stdio MCP server, show its handshake and catalog, then stop it.
    ///
    /// With no command, inspects the bundled mcphost-testserver.
    Inspect {
        /// Name used in logs and errors [default: the command's file name].
        #[arg(long)]
        name: Option<String>,
        /// Environment for the server, KEY=VALUE (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Working directory for the server.
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Pass our whole environment instead of the minimal one.
        #[arg(long)]
        inherit_env: bool,
        /// Call this tool after listing.
        #[arg(long)]
        call: Option<String>,
        /// Arguments for --call, as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Hard limit for each request, progress or not (e.g. 500ms, 30s, 5m).
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        timeout: Duration,
        /// The server command and its arguments (after `--`).
        #[arg(last = true)]
        command: Vec<String>,
    },
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "" => Err(format!(
            "{s:?} has no unit; write e.g. \"{s}s\" or \"{s}ms\""
        )),
        _ => Err(format!("unknown unit in {s:?}; use ms, s or m")),
    }
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn bundled_testserver() -> Result<String> {
    let exe = std::env::current_exe().context("cannot locate the mcphost executable")?;
    let path = exe.with_file_name("mcphost-testserver");
    if !path.exists() {
        bail!(
            "no command given and the bundled test server is missing at {}; build it with `cargo build --bins`",
            path.display()
        );
    }
    Ok(path.display().to_string())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    match run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcphost: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Inspect {
            name,
            env,
            cwd,
            inherit_env,
            call,
            args,
            timeout,
            command,
        } => {
            let (program, rest) = match command.split_first() {
                Some((p, r)) => (p.clone(), r.to_vec()),
                None => (bundled_testserver()?, Vec::new()),
            };
            let name = name.unwrap_or_else(|| {
                std::path::Path::new(&program)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "server".to_owned())
            });
            let mut cfg = StdioConfig::new(program, rest);
            cfg.cwd = cwd;
            cfg.inherit_env = inherit_env;
            cfg.env = env
                .iter()
                .map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .with_context(|| format!("--env {kv:?} is not KEY=VALUE"))
                })
                .collect::<Result<BTreeMap<_, _>>>()?;
            let arguments = RawValue::from_string(args.clone())
                .with_context(|| format!("--args is not valid JSON: {args}"))?;
            inspect(&name, cfg, call, arguments, timeout, cli.json).await
        }
    }
}

async fn inspect(
    name: &str,
    cfg: StdioConfig,
    call: Option<String>,
    arguments: Box<RawValue>,
    timeout: Duration,
    json: bool,
) -> Result<()> {
    let started = Instant::now();
    let conn = spawn(name, &cfg).await?;
    let opts = ClientOptions {
        request_timeout: timeout,
        max_request_timeout: timeout,
        ..Default::default()
    };
    let client = ServerClient::connect(name, conn, opts).await?;
    let connect_ms = started.elapsed().as_millis();
    let result = report(&client, call, arguments, connect_ms, json).await;
    client.shutdown().await;
    result
}

async fn report(
    client: &ServerClient,
    call: Option<String>,
    arguments: Box<RawValue>,
    connect_ms: u128,
    json: bool,
) -> Result<()> {
    let n = client.negotiated();
    let caps = &n.capabilities;
    let tools = if caps.tools.is_some() {
        client.list_tools().await?
    } else {
        Vec::new()
    };
    let resources = if caps.resources.is_some() {
        client.list_resources().await?
    } else {
        Vec::new()
    };
    let templates = if caps.resources.is_some() {
        client.list_resource_templates().await?
    } else {
        Vec::new()
    };
    let prompts = if caps.prompts.is_some() {
        client.list_prompts().await?
    } else {
        Vec::new()
    };
    let called = match &call {
        Some(tool) => Some(
            client
                .call_tool(tool, Some(arguments), CallOptions::default())
                .await?,
        ),
        None => None,
    };
    if json {
        let out = serde_json::json!({
            "server": client.name(),
            "protocolVersion": n.protocol_version,
            "serverInfo": n.server_info,
            "capabilities": n.capabilities_raw,
            "instructions": n.instructions,
            "connectMs": connect_ms,
            "tools": tools,
            "resources": resources,
            "resourceTemplates": templates,
            "prompts": prompts,
            "call": called,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "{} ({} {}) speaks MCP {} — connected in {connect_ms} ms",
        client.name(),
        n.server_name.as_deref().unwrap_or("?"),
        n.server_version.as_deref().unwrap_or("?"),
        n.protocol_version
    );
    println!("capabilities: {}", n.capabilities_raw.get());
    if let Some(i) = &n.instructions {
        println!("instructions: {}", i.lines().next().unwrap_or(""));
    }
    println!("tools ({}):", tools.len());
    for t in &tools {
        println!("  {}", t.name);
    }
    println!("resources ({}):", resources.len());
    for r in &resources {
        println!("  {}", r.uri);
    }
    println!("resource templates ({}):", templates.len());
    for t in &templates {
        println!("  {}", t.uri_template);
    }
    println!("prompts ({}):", prompts.len());
    for p in &prompts {
        println!("  {}", p.name);
    }
    if let (Some(tool), Some(r)) = (call, called) {
        println!(
            "call {tool}{}: {}",
            if r.is_error { " (isError)" } else { "" },
            r.raw.get()
        );
    }
    Ok(())
}
