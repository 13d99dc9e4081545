//! Human tables and `--json` output. Errors: one line on stderr, or a JSON
//! object `{"error": {...}}` with `--json`.

use anyhow::Result;
use mcphost::protocol::RawValue;
use serde_json::{Value, json};

use mcphost::protocol::raw_field;

use crate::backend::{RpcFailure, ToolRow};

pub struct Out {
    pub json: bool,
}

pub(crate) fn table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            }
        }
        outln!("{}", line.trim_end());
    }
}

/// A JSON value as a table cell: a string as is, null as `-`.
pub fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The URLs a -32042 error asks the user to visit, one line each, with the
/// domain shown apart (what a user should check before opening it).
fn url_elicitations(e: &mcphost::protocol::ErrorObject) -> Vec<String> {
    let data: Value = e
        .data
        .as_ref()
        .and_then(|d| serde_json::from_str(d.get()).ok())
        .unwrap_or(Value::Null);
    let Some(list) = data["elicitations"].as_array() else {
        return Vec::new();
    };
    let mut out = vec!["The server needs you to complete this first, then retry:".to_owned()];
    for el in list {
        let url = el["url"].as_str().unwrap_or("(no url)");
        let domain = url::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| "?".to_owned());
        let message = el["message"].as_str().unwrap_or("");
        out.push(format!("  {url}\n    domain: {domain}  {message}"));
    }
    out
}

impl Out {
    pub fn error(&self, e: &anyhow::Error) {
        if self.json {
            let err = match e.downcast_ref::<RpcFailure>() {
                Some(RpcFailure(o)) => {
                    json!({ "code": o.code, "message": o.message, "data": o.data.as_ref().and_then(|d| serde_json::from_str::<Value>(d.get()).ok()) })
                }
                None => json!({ "message": format!("{e:#}") }),
            };
            eprintln!("{}", json!({ "error": err }));
        } else {
            eprintln!("mcphost: {}", zod_readable(&format!("{e:#}")));
            if let Some(RpcFailure(o)) = e.downcast_ref::<RpcFailure>()
                && o.code == mcphost::protocol::error_codes::URL_ELICITATION_REQUIRED
            {
                for line in url_elicitations(o) {
                    eprintln!("{line}");
                }
            }
        }
    }

    pub fn done(&self, what: &str) {
        if self.json {
            outln!("{}", json!({ "ok": true }));
        } else {
            outln!("{what}");
        }
    }

    pub fn status(&self, v: &Value) -> Result<()> {
        if self.json {
            outln!("{v}");
            return Ok(());
        }
        let mut rows = vec![
            vec!["version".into(), s(&v["version"])],
            vec!["pid".into(), s(&v["pid"])],
            vec!["socket".into(), s(&v["socket"])],
            vec!["config".into(), s(&v["configPath"])],
            vec!["uptime".into(), format!("{}s", s(&v["uptimeSeconds"]))],
            vec![
                "servers".into(),
                format!(
                    "{} ({} ready; {} handshake, {} stateless)",
                    s(&v["servers"]),
                    s(&v["ready"]),
                    s(&v["eras"]["handshake"]),
                    s(&v["eras"]["stateless"])
                ),
            ],
            vec!["tools".into(), s(&v["tools"])],
        ];
        if !v["configError"].is_null() {
            rows.push(vec!["config error".into(), s(&v["configError"])]);
        }
        table(&rows);
        Ok(())
    }

    /// `auth status`: one row per stored sign-in.
    pub fn auth_status(&self, rows: &[Value], dir: &str, backend: &Value) -> Result<()> {
        if self.json {
            outln!(
                "{}",
                json!({ "store": dir, "backend": backend, "signIns": rows })
            );
            return Ok(());
        }
        outln!("secrets: {}", s(&backend["about"]));
        if rows.is_empty() {
            outln!("no sign-ins stored (in {dir})");
            return Ok(());
        }
        let mut t = vec![
            [
                "SERVER",
                "STATE",
                "AUTHORIZATION SERVER",
                "RESOURCE",
                "SCOPE",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>(),
        ];
        for r in rows {
            t.push(vec![
                s(&r["server"]),
                s(&r["state"]),
                s(&r["issuer"]),
                s(&r["resource"]),
                s(&r["scope"]),
            ]);
        }
        table(&t);
        Ok(())
    }

    /// `servers --stats`: one row per server (all its tool calls), then
    /// one per tool, busiest first.
    pub fn stats(&self, v: &Value) -> Result<()> {
        if self.json {
            let calls: serde_json::Map<String, Value> = v
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|sv| {
                    let mut calls = sv["calls"].clone();
                    if let (Some(o), q @ Value::Object(_)) =
                        (calls.as_object_mut(), &sv["attribution"]["queue"])
                    {
                        o.insert("queue".into(), q.clone());
                    }
                    Some((sv["name"].as_str()?.to_owned(), calls))
                })
                .collect();
            outln!("{}", Value::Object(calls));
            return Ok(());
        }
        let mut rows = vec![
            [
                "SERVER", "TOOL", "CALLS", "ERRORS", "P50 MS", "P99 MS", "MAX MS",
            ]
            .map(String::from)
            .to_vec(),
        ];
        let ms = |v: &Value| v.as_f64().map_or("-".to_owned(), |m| format!("{m:.2}"));
        let row = |server: &str, tool: &str, c: &Value| {
            vec![
                server.to_owned(),
                tool.to_owned(),
                s(&c["calls"]),
                s(&c["errors"]),
                ms(&c["p50Ms"]),
                ms(&c["p99Ms"]),
                ms(&c["maxMs"]),
            ]
        };
        for sv in v.as_array().into_iter().flatten() {
            let name = s(&sv["name"]);
            let c = &sv["calls"];
            if c.is_null() {
                rows.push(vec![
                    name,
                    "(all)".into(),
                    "0".into(),
                    "0".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                ]);
                continue;
            }
            rows.push(row(&name, "(all)", c));
            let mut tools: Vec<(&String, &Value)> =
                c["tools"].as_object().into_iter().flatten().collect();
            tools.sort_by_key(|(_, t)| std::cmp::Reverse(t["calls"].as_u64().unwrap_or(0)));
            for (tool, t) in tools {
                rows.push(row("", tool, t));
            }
        }
        table(&rows);
        for sv in v.as_array().into_iter().flatten() {
            let q = &sv["attribution"]["queue"];
            if q.is_object() {
                outln!(
                    "queue: {}: {} calls waited for their host's turn, p50 {} ms, p99 {} ms, max {} ms",
                    s(&sv["name"]),
                    s(&q["calls"]),
                    ms(&q["p50Ms"]),
                    ms(&q["p99Ms"]),
                    ms(&q["maxMs"])
                );
            }
        }
        Ok(())
    }

    pub fn servers(&self, v: &Value) -> Result<()> {
        if self.json {
            outln!("{v}");
            return Ok(());
        }
        let mut rows = vec![
            vec![
                "NAME",
                "STATE",
                "TRANSPORT",
                "PROTOCOL",
                "TOOLS",
                "TOKENS",
                "PID",
                "HOST REQUESTS",
                "COMMAND / ERROR",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>(),
        ];
        let list = v.as_array().cloned().unwrap_or_default();
        for sv in &list {
            let detail = match (&sv["error"], &sv["listError"]) {
                // What fixes it first; the server's answer after.
                (Value::String(e), _) if sv["state"] == "auth_required" => format!(
                    "sign in: mcphost auth login {} ({})",
                    s(&sv["name"]),
                    e.lines().next().unwrap_or("")
                ),
                // Says why and the fix itself.
                (Value::String(e), _) if sv["state"] == "auth_failed" => {
                    e.lines().next().unwrap_or("").to_owned()
                }
                (Value::String(e), _) => reason_line(e),
                (_, Value::String(e)) => format!("listing: {}", e.lines().next().unwrap_or("")),
                _ => s(&sv["command"]),
            };
            rows.push(vec![
                s(&sv["name"]),
                s(&sv["state"]),
                transport_with_sandbox(sv),
                match &sv["era"] {
                    Value::String(era) => format!("{} {era}", s(&sv["protocolVersion"])),
                    _ => s(&sv["protocolVersion"]),
                },
                s(&sv["tools"]),
                s(&sv["tokens"]),
                s(&sv["pid"]),
                s(&sv["attribution"]["mode"]),
                detail,
            ]);
        }
        table(&rows);
        for sv in &list {
            // What is not plain: a server whose requests go to the fallback,
            // or whose hosts take turns.
            let a = &sv["attribution"];
            if matches!(a["mode"].as_str(), Some("fallback" | "scheduled")) {
                outln!(
                    "note: {}: host requests {}: {}",
                    s(&sv["name"]),
                    s(&a["mode"]),
                    s(&a["why"])
                );
            }
            if let Some(note) = crate::pins::drift_note(sv) {
                outln!("{note}");
            }
            if let Value::String(note) = &sv["rootsNote"] {
                outln!("note: {}: roots: {note}", s(&sv["name"]));
            }
            for r in sv["renamed"].as_array().into_iter().flatten() {
                outln!(
                    "note: {}: tool {} is listed as {} ({})",
                    s(&sv["name"]),
                    s(&r["tool"]),
                    s(&r["name"]),
                    s(&r["reason"])
                );
            }
            for r in sv["renamedResources"].as_array().into_iter().flatten() {
                outln!(
                    "note: {}: {} {} is listed as {} ({}: {})",
                    s(&sv["name"]),
                    s(&r["kind"]),
                    s(&r["uri"]),
                    s(&r["exposed"]),
                    s(&r["reason"]),
                    r["with"]
                        .as_array()
                        .map(|w| w.iter().map(s).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default()
                );
            }
        }
        Ok(())
    }

    pub fn logs(&self, v: &Value) -> Result<()> {
        if self.json {
            outln!("{v}");
        } else {
            for l in v["lines"].as_array().into_iter().flatten() {
                outln!("{}", s(l));
            }
        }
        Ok(())
    }

    /// `cost`: with the token column and total, counted in this encoding
    /// (null: the daemon counts none).
    pub fn tools(
        &self,
        tools: &[ToolRow],
        server: Option<&str>,
        cost: Option<&Value>,
    ) -> Result<()> {
        let picked: Vec<&ToolRow> = tools
            .iter()
            .filter(|t| server.is_none_or(|s| t.server == s))
            .collect();
        if self.json {
            let items: Vec<&str> = picked.iter().map(|t| t.raw.get()).collect();
            outln!("[{}]", items.join(","));
            return Ok(());
        }
        if let Some(enc) = cost
            && enc.is_null()
        {
            anyhow::bail!("the daemon counts no tokens: it was built without the `tokens` feature");
        }
        let mut rows = vec![vec!["NAME".to_owned(), "SERVER".to_owned()]];
        if cost.is_some() {
            rows[0].push("TOKENS".to_owned());
        }
        rows[0].push("DESCRIPTION".to_owned());
        let total: u64 = picked.iter().filter_map(|t| t.tokens).sum();
        let count = picked.len();
        for t in picked {
            let d = t.description.lines().next().unwrap_or("");
            let d: String = if d.chars().count() > 80 {
                format!("{}…", d.chars().take(79).collect::<String>())
            } else {
                d.to_owned()
            };
            // Differs from its pin (`pinning: warn`): say so first.
            let d = match raw_field::<String>(&t.raw, "drift").ok().flatten() {
                Some(drift) => format!("[{drift} since pinned] {d}"),
                None => d,
            };
            let mut row = vec![t.name.clone(), t.server.clone()];
            if cost.is_some() {
                row.push(t.tokens.map(|n| n.to_string()).unwrap_or_default());
            }
            row.push(crate::hidden::marked(t, d));
            rows.push(row);
        }
        table(&rows);
        crate::hidden::notes(
            tools
                .iter()
                .filter(|t| server.is_none_or(|s| t.server == s)),
        );
        if let Some(enc) = cost {
            outln!("total: {total} tokens in {count} tools ({})", s(enc));
        }
        Ok(())
    }

    /// Prints a CallToolResult; returns its `isError`. Read field by field,
    /// so a result with numbers `Value` cannot hold still prints.
    pub fn call_result(&self, raw: &RawValue) -> Result<bool> {
        let is_error = raw_field::<Option<bool>>(raw, "isError")?
            .flatten()
            .unwrap_or(false);
        if self.json {
            // The server's bytes, untouched.
            outln!("{}", raw.get());
            return Ok(is_error);
        }
        let content: Vec<Box<RawValue>> = raw_field(raw, "content")?.unwrap_or_default();
        for c in &content {
            let kind: Option<String> = raw_field::<Option<String>>(c, "type")?.flatten();
            match kind.as_deref() {
                Some("text") => {
                    let text = raw_field::<Option<String>>(c, "text")?
                        .flatten()
                        .unwrap_or_default();
                    // An older TS SDK puts its Zod issues, as JSON, in the
                    // error result's text.
                    match is_error {
                        true => outln!("{}", zod_readable(&text)),
                        false => outln!("{text}"),
                    }
                }
                Some(other) => {
                    let mime: Option<String> =
                        raw_field::<Option<String>>(c, "mimeType")?.flatten();
                    outln!(
                        "[{other} content{}]",
                        mime.map(|m| format!(": {m}")).unwrap_or_default()
                    )
                }
                None => outln!("{}", c.get()),
            }
        }
        if content.is_empty()
            && let Some(sc) = raw_field::<Box<RawValue>>(raw, "structuredContent")?
        {
            outln!("{}", sc.get());
        }
        Ok(is_error)
    }
}

/// `text` with each JSON array of Zod issues in it (how a TypeScript SDK
/// server reports arguments that fail its schema) as "argument `x`:
/// expected string, received number", one line per issue.
pub fn zod_readable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('[') {
        let mut values = serde_json::Deserializer::from_str(&rest[at..]).into_iter::<Value>();
        let issues = match values.next() {
            Some(Ok(Value::Array(items))) => zod_issues(&items),
            _ => None,
        };
        let Some(lines) = issues else {
            out.push_str(&rest[..=at]);
            rest = &rest[at + 1..];
            continue;
        };
        let end = at + values.byte_offset();
        out.push_str(&rest[..at]);
        match lines.as_slice() {
            [one] => out.push_str(one),
            many => {
                out.truncate(out.trim_end().len());
                for line in many {
                    out.push_str("\n  ");
                    out.push_str(line);
                }
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// One line per Zod issue, if every item is one (`code`, `message`, `path`).
fn zod_issues(items: &[Value]) -> Option<Vec<String>> {
    if items.is_empty() {
        return None;
    }
    items
        .iter()
        .map(|issue| {
            let message = issue.get("message")?.as_str()?;
            issue.get("code")?.as_str()?;
            let path = issue.get("path")?.as_array()?;
            // A request's own path: params.arguments.X is the argument X.
            let mut path = path.as_slice();
            if path.first().and_then(Value::as_str) == Some("params") {
                path = &path[1..];
            }
            if path.first().and_then(Value::as_str) == Some("arguments") {
                path = &path[1..];
            }
            let mut what = String::new();
            for (i, p) in path.iter().enumerate() {
                match p {
                    Value::Number(n) => what.push_str(&format!("[{n}]")),
                    Value::String(k) if i == 0 => what.push_str(k),
                    other => what.push_str(&format!(".{}", other.as_str().unwrap_or("?"))),
                }
            }
            let message = message.strip_prefix("Invalid input: ").unwrap_or(message);
            let mut chars = message.chars();
            let message = match chars.next() {
                Some(c) => c.to_lowercase().chain(chars).collect::<String>(),
                None => String::new(),
            };
            Some(match what.is_empty() {
                true => format!("arguments: {message}"),
                false => format!("argument `{what}`: {message}"),
            })
        })
        .collect()
}

/// The command line parsed; on a usage error under `--json` (anywhere in
/// it), the error is one JSON object on stderr, `{"error": {"kind":
/// "usage", "message", "usage"}}`, exit 2. Help and version print as usual.
pub fn parse_args<C: clap::Parser>() -> C {
    match C::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let json = std::env::args_os().skip(1).any(|a| a == "--json");
            let shown = matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            );
            if !json || shown {
                e.exit();
            }
            let text = e.render().to_string();
            // clap's text: "error: MESSAGE\n\n[tip…]Usage: …\n\nFor more…".
            let message = text
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_owned();
            let usage = match text.lines().find_map(|l| l.strip_prefix("Usage: ")) {
                Some(u) => u.to_owned(),
                None => C::command()
                    .render_usage()
                    .to_string()
                    .trim_start_matches("Usage: ")
                    .to_owned(),
            };
            eprintln!(
                "{}",
                json!({ "error": { "kind": "usage", "message": message, "usage": usage } })
            );
            std::process::exit(2);
        }
    }
}

/// The one line the servers table shows for an error: its summary, and for
/// a process that died, the stderr line that says why (not "last stderr
/// lines:", which left the reason off the table).
fn reason_line(error: &str) -> String {
    let Some((summary, tail)) = error.split_once("; last stderr lines:") else {
        return error.lines().next().unwrap_or("").to_owned();
    };
    let summary = summary.lines().next().unwrap_or("");
    let lines: Vec<&str> = tail
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("at ") && !l.starts_with("Node.js v"))
        .collect();
    let telling = lines
        .iter()
        .rev()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            [
                "error",
                "fatal",
                "exception",
                "not found",
                "cannot",
                "can't",
                "denied",
                "not set",
                "missing",
                "invalid",
                "failed",
                "refused",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .or(lines.last());
    match telling {
        Some(line) => format!("{summary}: {line}"),
        None => summary.to_owned(),
    }
}

/// `stdio sandbox:workspace`, with `(partial)` when the kernel could not
/// enforce all that was asked.
fn transport_with_sandbox(sv: &Value) -> String {
    let sb = &sv["sandbox"];
    if !sb.is_object() {
        return s(&sv["transport"]);
    }
    let whole = sb["enforced"]["filesystem"] == "fully"
        && (sb["network"] == "any" || sb["enforced"]["network"] == "fully");
    let partial = if whole { "" } else { " (partial)" };
    format!(
        "{} sandbox:{}{partial}",
        s(&sv["transport"]),
        s(&sb["requested"])
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zod_issues_in_an_error_read_as_one_line_per_argument() {
        // zod 3 (older TS SDKs): the issues' JSON after a prefix, two of them.
        let text = r#"MCP error -32602: Invalid arguments for tool add: [
  {"code": "invalid_type", "expected": "number", "received": "string", "path": ["a"], "message": "Expected number, received string"},
  {"code": "invalid_type", "expected": "number", "received": "undefined", "path": ["b", 0], "message": "Required"}
] (data)"#;
        assert_eq!(
            zod_readable(text),
            "MCP error -32602: Invalid arguments for tool add:\n  argument `a`: expected number, received string\n  argument `b[0]`: required (data)"
        );
        // Brackets that are not Zod issues are left alone.
        for plain in ["a [b] c", "list [1, 2]", "[", "[{\"code\": 1}]"] {
            assert_eq!(zod_readable(plain), plain);
        }
    }

    #[test]
    fn a_url_elicitation_error_shows_each_url_with_its_domain() {
        let mut e = mcphost::protocol::ErrorObject::new(-32042, "authorization required");
        e.data = Some(
            mcphost::protocol::RawValue::from_string(
                r#"{"elicitations":[{"mode":"url","elicitationId":"e1","url":"https://xn--80ak6aa92e.com/auth?x=1","message":"Sign in"}]}"#
                    .to_owned(),
            )
            .unwrap(),
        );
        let lines = url_elicitations(&e);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[1].contains("https://xn--80ak6aa92e.com/auth?x=1"),
            "{lines:?}"
        );
        assert!(lines[1].contains("domain: xn--80ak6aa92e.com"), "{lines:?}");
        assert!(lines[1].contains("Sign in"), "{lines:?}");
        e.data = None;
        assert!(url_elicitations(&e).is_empty());
    }
}
