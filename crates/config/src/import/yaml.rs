//! The YAML dialects: Goose (`extensions`), Continue (`mcpServers` as a
//! list, in config.yaml and in `.continue/mcpServers/*.yaml` blocks) and
//! mark3labs/mcphost (`mcpServers` with `type: local|remote`).

use super::value::{Map, Value};

use super::fields::{Field, Fields, Table};
use super::json::transport;
use super::vars::Rules;
use super::{Ctx, Found, ImportError, Server, kind};

pub(super) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Value, ImportError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_norway::from_str::<serde_norway::Value>(text)
        .map(Value::from_yaml)
        .map_err(|e| ImportError::Syntax {
            path: ctx.path.to_path_buf(),
            format: "YAML",
            message: e.to_string(),
        })
}

fn string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Goose: `extensions: {key: {type, cmd, args, envs, uri, headers, enabled,
/// timeout, env_keys, available_tools, …}}`.
pub(super) fn goose(ctx: &Ctx<'_>, root: &Map) -> Found {
    let mut found = ctx.found();
    let Some(value) = root.get("extensions") else {
        return found;
    };
    let Value::Object(map) = value else {
        found.problem(None, format!("extensions is {}, not a map", kind(value)));
        return found;
    };
    for (key, ext) in map {
        let mut s = Server::new(key, Rules::Literal);
        match ext {
            Value::Object(obj) => goose_fields(ctx, obj, &mut s),
            other => s.fail(format!("its entry is {}, not a map", kind(other))),
        }
        s.finish(&mut found);
    }
    found
}

const GOOSE: &Table = &[
    ("type", Field::Skip),
    ("name", Field::Skip),
    ("display_name", Field::Skip),
    ("description", Field::Skip),
    ("bundled", Field::Skip),
    ("cmd", Field::Command),
    ("args", Field::Args),
    ("envs", Field::Env),
    ("env_keys", Field::Own),
    ("uri", Field::Url),
    ("headers", Field::Headers),
    ("enabled", Field::Enabled),
    ("timeout", Field::Own),
    ("available_tools", Field::AllowTools),
];

fn goose_fields(ctx: &Ctx<'_>, obj: &Map, s: &mut Server<'_>) {
    let kind_seen = obj.get("type").and_then(Value::as_str).unwrap_or("stdio");
    let ours = match kind_seen {
        "stdio" => None,
        "sse" => Some("sse"),
        "streamable_http" => Some("streamable_http"),
        "builtin" | "platform" | "frontend" | "inline_python" => {
            s.fail(format!(
                "is a Goose {kind_seen} extension, which runs inside Goose; there is no command to import"
            ));
            return;
        }
        other => {
            s.fail(format!("type {other:?} is not one mcphost speaks"));
            return;
        }
    };
    Fields::new(ctx, GOOSE).read(obj, s, |key, v, s| match key {
        "env_keys" => goose_env_keys(v, s),
        _ => goose_timeout(v, s),
    });
    transport(ours, s);
}

/// `env_keys`: names whose values are in Goose's secret store.
fn goose_env_keys(v: &Value, s: &mut Server<'_>) {
    if v.as_array().is_some_and(|a| !a.is_empty()) {
        let names: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(string)
            .collect();
        s.drop_field(
            "env_keys",
            &format!(
                "the values of {} are in Goose's secret store; add them to env yourself",
                names.join(", ")
            ),
        );
    }
}

/// `timeout`: Goose's per-call timeout, in seconds.
fn goose_timeout(v: &Value, s: &mut Server<'_>) {
    match v.as_u64() {
        Some(secs) if secs > 0 => {
            let t = s.entry.timeouts.get_or_insert_with(Default::default);
            t.request = Some(format!("{secs}s"));
            if secs > 600 {
                t.max_request = Some(format!("{secs}s"));
            }
        }
        _ => s.drop_field("timeout", "not a positive number of seconds"),
    }
}

const CONTINUE: &Table = &[
    ("name", Field::Skip),
    ("type", Field::Own),
    ("command", Field::Command),
    ("args", Field::Args),
    ("env", Field::Env),
    ("cwd", Field::Cwd),
    ("url", Field::Url),
    ("requestOptions", Field::Own),
];

/// Continue: `mcpServers` is a list of `{name, type, command, args, env,
/// cwd, url, requestOptions.headers}`, in config.yaml and in block files.
pub(super) fn continue_(ctx: &Ctx<'_>, root: &Map) -> Found {
    let mut found = ctx.found();
    let Some(value) = root.get("mcpServers") else {
        return found;
    };
    let Value::Array(list) = value else {
        found.problem(None, format!("mcpServers is {}, not a list", kind(value)));
        return found;
    };
    for (i, item) in list.iter().enumerate() {
        let Value::Object(obj) = item else {
            found.problem(
                None,
                format!("mcpServers[{i}] is {}, not a map", kind(item)),
            );
            continue;
        };
        if let Some(uses) = obj.get("uses").and_then(Value::as_str) {
            found.problem(
                Some(uses),
                "refers to a Continue Hub block; mcphost cannot fetch it (write the server out in config.yaml, then import)",
            );
            continue;
        }
        let Some(name) = obj.get("name").and_then(Value::as_str) else {
            found.problem(None, format!("mcpServers[{i}] has no name"));
            continue;
        };
        let mut s = Server::new(name, Rules::Continue);
        let mut kind_seen: Option<String> = None;
        Fields::new(ctx, CONTINUE).read(obj, &mut s, |key, v, s| match key {
            // Continue's own check lets a type that is not a string pass.
            "type" => kind_seen = v.as_str().map(str::to_owned),
            _ => continue_request_options(v, s),
        });
        transport(kind_seen.as_deref(), &mut s);
        s.finish(&mut found);
    }
    found
}

/// `requestOptions`: of them, `headers` only.
fn continue_request_options(v: &Value, s: &mut Server<'_>) {
    let Value::Object(opts) = v else {
        s.fail("requestOptions is not a map");
        return;
    };
    for (k, v) in opts {
        if k == "headers" {
            if let Some(m) = s.string_map("requestOptions.headers", v) {
                s.entry.headers = m;
            }
        } else {
            s.drop_field(
                &format!("requestOptions.{k}"),
                "a Continue request option mcphost has no equivalent for",
            );
        }
    }
}

const MARK3LABS: &Table = &[
    ("type", Field::Own),
    ("command", Field::Own),
    ("args", Field::MoreArgs),
    ("environment", Field::Env),
    ("env", Field::Env),
    ("url", Field::Url),
    ("headers", Field::Own),
    ("allowedTools", Field::AllowTools),
    ("excludedTools", Field::DenyTools),
];

/// mark3labs/mcphost: `mcpServers: {name: {type: local, command: [..],
/// environment}}` or `{type: remote, url, headers: ["K: V"]}`, plus the
/// Claude Desktop shape it still accepts; `allowedTools`/`excludedTools`.
pub(super) fn mark3labs(ctx: &Ctx<'_>, root: &Map) -> Found {
    let mut found = ctx.found();
    let Some(value) = root.get("mcpServers") else {
        return found;
    };
    let Value::Object(map) = value else {
        found.problem(None, format!("mcpServers is {}, not a map", kind(value)));
        return found;
    };
    for (name, entry) in map {
        let mut s = Server::new(name, Rules::Mark3labs);
        let Value::Object(obj) = entry else {
            s.fail(format!("its entry is {}, not a map", kind(entry)));
            s.finish(&mut found);
            continue;
        };
        let ty = obj.get("type").and_then(Value::as_str);
        if ty == Some("builtin") {
            s.fail("is a mark3labs/mcphost builtin server, which runs inside that program");
            s.finish(&mut found);
            continue;
        }
        let mut kind_seen: Option<String> = None;
        Fields::new(ctx, MARK3LABS).read(obj, &mut s, |key, v, s| match key {
            "type" => match v.as_str() {
                Some("local") | Some("remote") => {}
                Some(other) => kind_seen = Some(other.to_owned()),
                None => s.fail("type is not a string"),
            },
            "command" => mark3labs_command(v, s),
            _ => mark3labs_headers(v, s),
        });
        transport(kind_seen.as_deref(), &mut s);
        s.finish(&mut found);
    }
    found
}

/// mark3labs `command`: a string, or the program and its arguments.
fn mark3labs_command(v: &Value, s: &mut Server<'_>) {
    match v {
        Value::String(c) => s.entry.command = s.text("command", c),
        Value::Array(_) => {
            if let Some(words) = s.strings("command", v) {
                let mut words = words.into_iter();
                s.entry.command = words.next();
                s.entry.args.extend(words);
            }
        }
        other => s.fail(format!("command is {}, not a list", kind(other))),
    }
}

/// mark3labs `headers`: `["Name: value", …]`, or a map.
fn mark3labs_headers(v: &Value, s: &mut Server<'_>) {
    match v {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let field = format!("headers[{i}]");
                match item.as_str().and_then(|h| h.split_once(':')) {
                    Some((k, val)) => {
                        if let Some(val) = s.text(&field, val.trim()) {
                            s.entry.headers.insert(k.trim().to_owned(), val);
                        }
                    }
                    None => s.fail(format!("{field} is not \"Name: value\"")),
                }
            }
        }
        Value::Object(_) => {
            if let Some(m) = s.string_map("headers", v) {
                s.entry.headers = m;
            }
        }
        other => s.fail(format!("headers is {}, not a list", kind(other))),
    }
}
