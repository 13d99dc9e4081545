//! `mcphost audit`: the audit log's lines, through `mcphost/audit/query`
//! (the daemon's, or with `--direct` the in-process engine's: both read
//! the same file in the state directory). Reading never starts a daemon:
//! when none runs, this process reads the file itself.

use anyhow::Result;
use serde_json::{Value, json};

use crate::backend::{Backend, params};
use crate::output::{Out, s as text, table};

#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    /// Only this server's lines.
    #[arg(long)]
    server: Option<String>,
    /// Only lines of this host app (its clientInfo.name).
    #[arg(long)]
    host: Option<String>,
    /// Only lines since this long ago (1h, 30m, 2d) or this RFC 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// Only the newest N lines.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
}

pub async fn show(b: &Backend, args: AuditArgs, out: &Out) -> Result<()> {
    let p = params(json!({
        "server": args.server,
        "host": args.host,
        "since": args.since,
        "limit": args.limit,
    }))?;
    let found = b
        .request(mcphost::protocol::methods::MCPHOST_AUDIT_QUERY, Some(p))
        .await?;
    render(&found, out)
}

/// `audit` (not `--direct`) when no daemon listens on `socket`: the file
/// read here, its exit code. `None` for anything else.
pub async fn offline(
    command: &crate::Command,
    direct: &[String],
    socket: &std::path::Path,
    out: &Out,
) -> Option<Result<u8>> {
    let crate::Command::Audit(args) = command else {
        return None;
    };
    if !direct.is_empty() {
        return None;
    }
    let conn = mcphost::ipc::connect(socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES).await;
    match conn {
        Err(mcphost::ipc::IpcError::NotRunning { .. }) => Some(show_file(args, out).map(|()| 0)),
        _ => None,
    }
}

/// `audit` without a daemon: the file in the state directory, read here.
pub fn show_file(args: &AuditArgs, out: &Out) -> Result<()> {
    use mcphost::engine::audit;
    let Some(dir) = mcphost::ipc::default_state_dir() else {
        anyhow::bail!(
            "no state directory (no home directory and no MCPHOST_STATE_DIR): there is no audit log"
        );
    };
    let since = match &args.since {
        Some(s) => Some(audit::parse_since(s).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let filter = audit::Filter {
        server: args.server.clone(),
        host: args.host.clone(),
        since,
        limit: args.limit,
    };
    let found = audit::query(&dir, &filter)?;
    // The config's `audit` is the daemon's to read: unknown here.
    let found = json!({
        "lines": found.lines,
        "skipped": found.skipped,
        "file": dir.join(audit::FILE),
        "mode": null,
    });
    render(&found, out)
}

fn render(found: &Value, out: &Out) -> Result<()> {
    if out.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
        return Ok(());
    }
    let lines = found["lines"].as_array().cloned().unwrap_or_default();
    let mut rows = vec![
        [
            "TIME", "HOST", "SERVER", "WHAT", "NAME", "OUTCOME", "MS", "ARGS",
        ]
        .map(String::from)
        .to_vec(),
    ];
    rows.extend(lines.iter().map(row));
    if lines.is_empty() {
        match found["mode"].as_str() {
            Some("off") => eprintln!("the audit log is off (config \"audit\": false) and empty"),
            _ => eprintln!("no lines in {}", text(&found["file"])),
        }
    } else {
        table(&rows);
    }
    if let Some(n) = found["skipped"].as_u64().filter(|n| *n > 0) {
        eprintln!("{n} line(s) of the log were not records and were skipped");
    }
    Ok(())
}

/// One line of the table: a call, a server's request, or a note of lines
/// dropped.
fn row(l: &Value) -> Vec<String> {
    let host = match &l["host"] {
        Value::Null => "(fallback)".to_owned(),
        h => format!("{}#{}", text(&h["name"]), text(&h["session"])),
    };
    let (outcome, name) = match l["kind"].as_str() {
        Some("request") => (text(&l["answer"]), "-".to_owned()),
        Some("dropped") => (
            format!("{} lines dropped", text(&l["count"])),
            "-".to_owned(),
        ),
        _ => {
            let code = l.get("code").map(|c| format!(" {c}")).unwrap_or_default();
            (format!("{}{code}", text(&l["outcome"])), text(&l["name"]))
        }
    };
    let args = match &l["args"] {
        Value::Null => "-".to_owned(),
        a => {
            let hash = text(&a["sha256"]);
            format!("{}B {}", text(&a["bytes"]), hash.get(..12).unwrap_or(&hash))
        }
    };
    vec![
        text(&l["time"]),
        host,
        text(&l["server"]),
        text(&l["method"]),
        name,
        outcome,
        text(&l["ms"]),
        args,
    ]
}
