//! `mcphost pins`: each server's pinned tool and prompt definitions, what
//! drifted from them, a diff, approval and reset (`mcphost/pins/*`).

use anyhow::Result;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::backend::{Backend, params};
use crate::doctor::{Colours, colour};
use crate::output::{Out, s as text, table};

#[derive(Subcommand)]
pub enum PinsAction {
    /// Pinned and current definitions of what drifted (or of TOOL), as a
    /// unified diff of the description and the pretty-printed schema.
    #[command(after_help = "Examples:
  mcphost pins diff fs
  mcphost pins diff fs read_file --json")]
    Diff {
        /// The server, as named in the config.
        server: String,
        /// Only this tool (or prompt), by its own name.
        tool: Option<String>,
    },
    /// Pin what the server lists now: the TOOLs (or prompts) named, or every
    /// one that drifted. A tool `block` withheld is listed again at once.
    #[command(after_help = "Examples:
  mcphost pins approve fs
  mcphost pins approve fs read_file write_file")]
    Approve {
        /// The server, as named in the config.
        server: String,
        /// Tools or prompts, by their own names (none: every drifted one).
        tools: Vec<String>,
    },
    /// Forget every pin of the server and pin what it lists now.
    #[command(after_help = "Example:
  mcphost pins reset fs")]
    Reset {
        /// The server, as named in the config.
        server: String,
    },
}

pub async fn run(
    b: &Backend,
    action: Option<PinsAction>,
    server: Option<String>,
    out: &Out,
) -> Result<()> {
    match action {
        None => {
            let p = server.map(|s| json!({ "server": s }));
            let v = b
                .request("mcphost/pins/list", p.map(params).transpose()?)
                .await?;
            show_list(&v, out);
        }
        Some(PinsAction::Diff { server, tool }) => {
            let v = b
                .request(
                    "mcphost/pins/diff",
                    Some(params(json!({ "server": server, "tool": tool }))?),
                )
                .await?;
            show_diff(&v, out);
        }
        Some(PinsAction::Approve { server, tools }) => {
            let v = b
                .request(
                    "mcphost/pins/approve",
                    Some(params(json!({ "server": server, "tools": tools }))?),
                )
                .await?;
            if out.json {
                outln!("{v}");
            } else {
                let names: Vec<String> = v["approved"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect();
                match names.is_empty() {
                    true => outln!("{server}: nothing drifted; nothing to approve"),
                    false => outln!("{server}: approved {}", names.join(", ")),
                }
            }
        }
        Some(PinsAction::Reset { server }) => {
            let v = b
                .request(
                    "mcphost/pins/reset",
                    Some(params(json!({ "server": server }))?),
                )
                .await?;
            if out.json {
                outln!("{v}");
            } else {
                outln!("{server}: pins reset; what it lists now is pinned");
            }
        }
    }
    Ok(())
}

/// One row per tool and prompt: server, kind, name, state, when pinned and
/// the first 12 hex digits of the pin's hash (→ the current one if changed).
fn show_list(v: &Value, out: &Out) {
    if out.json {
        outln!("{v}");
        return;
    }
    let c = Colours(colour());
    let mut rows = vec![
        ["SERVER", "KIND", "NAME", "STATE", "PINNED AT", "HASH"]
            .map(String::from)
            .to_vec(),
    ];
    let short = |h: &Value| {
        h.as_str()
            .map(|h| h.chars().take(12).collect())
            .unwrap_or_else(|| "-".to_owned())
    };
    let (mut drifted, mut hidden) = (Vec::new(), Vec::new());
    for s in v.as_array().into_iter().flatten() {
        let server = text(&s["server"]);
        if s["pinning"] == "off" {
            rows.push(vec![
                server,
                "-".into(),
                "-".into(),
                "pinning off".into(),
                "-".into(),
                "-".into(),
            ]);
            continue;
        }
        for (kind, key) in [("tool", "tools"), ("prompt", "prompts")] {
            for t in s[key].as_array().into_iter().flatten() {
                let state = text(&t["state"]);
                let hash = match (&t["hash"], &t["currentHash"]) {
                    (Value::String(_), Value::String(_)) => {
                        format!("{} → {}", short(&t["hash"]), short(&t["currentHash"]))
                    }
                    (Value::String(_), _) => short(&t["hash"]),
                    _ => short(&t["currentHash"]),
                };
                if state != "pinned" && !drifted.contains(&server) {
                    drifted.push(server.clone());
                }
                let mut state = match state.as_str() {
                    "pinned" => state,
                    _ => c.yellow(&state),
                };
                if t.get("hiddenText").is_some() {
                    // The definition hides text from people (`hygiene`).
                    state.push_str(&c.yellow(" +hidden text"));
                    if !hidden.contains(&server) {
                        hidden.push(server.clone());
                    }
                }
                rows.push(vec![
                    server.clone(),
                    kind.into(),
                    text(&t["name"]),
                    state,
                    text(&t["pinnedAt"]),
                    hash,
                ]);
            }
        }
    }
    table(&rows);
    for s in drifted {
        outln!(
            "note: {s}: review with `mcphost pins diff {s}`, accept with `mcphost pins approve {s}`"
        );
    }
    for s in hidden {
        outln!(
            "note: {s}: a definition hides text from people; `mcphost tools --server {s}` shows what"
        );
    }
}

/// The description as text and every other field pretty-printed, old
/// against new, as unified diffs.
fn show_diff(v: &Value, out: &Out) {
    if out.json {
        outln!("{v}");
        return;
    }
    let c = Colours(colour());
    let server = text(&v["server"]);
    let items = v["items"].as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        outln!("{server}: no drift from the pinned definitions");
        return;
    }
    for item in items {
        let (kind, name, state) = (
            text(&item["kind"]),
            text(&item["name"]),
            text(&item["state"]),
        );
        outln!("{}", c.bold(&format!("{kind} {name} ({state})")));
        let (old, new) = (&item["pinned"], &item["current"]);
        let description = |d: &Value| d["description"].as_str().unwrap_or("").to_owned();
        let rest = |d: &Value| match d {
            Value::Object(m) => {
                let mut m = m.clone();
                m.remove("description");
                serde_json::to_string_pretty(&Value::Object(m)).unwrap_or_default() + "\n"
            }
            _ => String::new(),
        };
        for (what, a, b) in [
            ("description", description(old), description(new)),
            ("definition", rest(old), rest(new)),
        ] {
            if a == b {
                continue;
            }
            let a = if a.ends_with('\n') || a.is_empty() {
                a
            } else {
                a + "\n"
            };
            let b = if b.ends_with('\n') || b.is_empty() {
                b
            } else {
                b + "\n"
            };
            let diff = similar::TextDiff::from_lines(&a, &b);
            let text = diff
                .unified_diff()
                .context_radius(3)
                .header(&format!("pinned {what}"), &format!("current {what}"))
                .to_string();
            for line in text.lines() {
                let line = match line.chars().next() {
                    Some('+') if !line.starts_with("+++") => c.green(line),
                    Some('-') if !line.starts_with("---") => c.red(line),
                    Some('@') => c.cyan(line),
                    _ => line.to_owned(),
                };
                outln!("{line}");
            }
        }
    }
    outln!("accept with `mcphost pins approve {server}` (or name the tools)");
}

/// `servers`: one line per server whose definitions drifted from its pins.
pub fn drift_note(sv: &Value) -> Option<String> {
    let name = text(&sv["name"]);
    drift_summary(sv).map(|d| {
        format!(
            "note: {name}: {d}; review: mcphost pins diff {name}; accept: mcphost pins approve {name}"
        )
    })
}

/// What drifted of one server object (`mcphost/servers/list`), in words.
pub fn drift_summary(sv: &Value) -> Option<String> {
    let p = &sv["pins"];
    let drift = &p["drift"];
    let mut parts = Vec::new();
    for kind in ["tools", "prompts"] {
        for what in ["changed", "added", "removed"] {
            let names: Vec<String> = drift[kind][what]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            if !names.is_empty() {
                parts.push(format!(
                    "{} {what} ({})",
                    kind.trim_end_matches('s'),
                    names.join(", ")
                ));
            }
        }
    }
    if parts.is_empty() {
        return None;
    }
    let withheld = match p["withheld"].as_u64() {
        Some(n) if n > 0 => format!("; {n} withheld (pinning: block)"),
        _ => String::new(),
    };
    Some(format!(
        "differs from its pins: {}{withheld}",
        parts.join(", ")
    ))
}
