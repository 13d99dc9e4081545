//! The `mcpServers` / `servers` family: Claude Desktop, Claude Code, VS Code,
//! Cursor, Windsurf, and Continue's JSON server blocks.

use super::value::{Map, Value};
use jsonc_parser::ast::{ObjectPropName, Value as Ast};
use jsonc_parser::{CollectOptions, parse_to_ast};

use super::fields::{Field, Fields, Table};
use super::vars::Rules;
use super::{Ctx, Dialect, Found, ImportError, Input, Scope, Server, kind};

/// JSON with comments and trailing commas (VS Code's and Zed's settings are
/// JSONC); `null` for an empty file.
pub(super) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Value, ImportError> {
    let options = crate::parse::json_options();
    let ast = parse_to_ast(text, &CollectOptions::default(), &options).map_err(|e| {
        ImportError::Syntax {
            path: ctx.path.to_path_buf(),
            format: "JSON",
            message: format!(
                "line {} column {}: {}",
                e.line_display(),
                e.column_display(),
                e.kind()
            ),
        }
    })?;
    Ok(ast.value.as_ref().map(value).unwrap_or(Value::Null))
}

pub(super) fn value(v: &Ast<'_>) -> Value {
    match v {
        Ast::StringLit(s) => Value::String(s.value.to_string()),
        Ast::NumberLit(n) => serde_json::from_str::<serde_json::Number>(n.value)
            .map(Value::Number)
            .unwrap_or_else(|_| Value::String(n.value.to_owned())),
        Ast::BooleanLit(b) => Value::Bool(b.value),
        Ast::NullKeyword(_) => Value::Null,
        Ast::Array(a) => Value::Array(a.elements.iter().map(value).collect()),
        Ast::Object(o) => Value::Object(
            o.properties
                .iter()
                .map(|p| {
                    let name = match &p.name {
                        ObjectPropName::String(s) => s.value.to_string(),
                        ObjectPropName::Word(w) => w.value.to_owned(),
                    };
                    (name, value(&p.value))
                })
                .collect(),
        ),
    }
}

pub(super) fn read(ctx: &Ctx<'_>, root: &Map) -> Result<Vec<Found>, ImportError> {
    match ctx.dialect {
        Dialect::ClaudeCode => claude_code(ctx, root),
        Dialect::VsCode => vscode(ctx, root),
        _ => {
            let mut found = ctx.found();
            found.servers_at = vec!["mcpServers".to_owned()];
            servers(
                ctx,
                root.get("mcpServers"),
                "mcpServers",
                rules(ctx),
                &mut found,
            );
            Ok(vec![found])
        }
    }
}

fn rules<'a>(ctx: &'a Ctx<'_>) -> Rules<'a> {
    match ctx.dialect {
        Dialect::ClaudeCode => Rules::Shell,
        Dialect::VsCode => Rules::Editor {
            workspace: ctx.workspace(),
            inputs: true,
        },
        Dialect::Cursor => Rules::Editor {
            workspace: ctx.workspace(),
            inputs: false,
        },
        Dialect::Windsurf => Rules::Windsurf,
        Dialect::Continue => Rules::Continue,
        _ => Rules::Literal,
    }
}

/// `~/.claude.json`: the user's `mcpServers`, then the current project's
/// `projects["<dir>"].mcpServers`. A project's `.mcp.json`: `mcpServers`.
fn claude_code(ctx: &Ctx<'_>, root: &Map) -> Result<Vec<Found>, ImportError> {
    let mut user = ctx.found();
    user.servers_at = vec!["mcpServers".to_owned()];
    servers(
        ctx,
        root.get("mcpServers"),
        "mcpServers",
        Rules::Shell,
        &mut user,
    );
    let mut out = vec![user];
    if ctx.scope == Scope::User
        && let Some(projects) = root.get("projects")
    {
        let Value::Object(projects) = projects else {
            return Err(ctx.shape(format!("\"projects\" is {}, not an object", kind(projects))));
        };
        let here = &ctx.places.project;
        let canonical = std::fs::canonicalize(here).unwrap_or_else(|_| here.clone());
        let entry = projects.iter().find(|(dir, _)| {
            let dir = std::path::Path::new(dir.as_str());
            dir == here.as_path() || dir == canonical.as_path()
        });
        if let Some((dir, project)) = entry {
            let project_ctx = Ctx {
                scope: Scope::Project,
                ..*ctx
            };
            let mut found = project_ctx.found();
            let label = format!("projects[{dir:?}]");
            found.section = Some(label.clone());
            found.servers_at = vec!["projects".to_owned(), dir.clone(), "mcpServers".to_owned()];
            if let Value::Object(p) = project {
                servers(
                    &project_ctx,
                    p.get("mcpServers"),
                    &format!("{label}.mcpServers"),
                    Rules::Shell,
                    &mut found,
                );
            }
            out.push(found);
        }
    }
    Ok(out)
}

/// `mcp.json`: `servers` and `inputs`. The user's `settings.json`: the same
/// under `"mcp"` (or a flat `"mcp.servers"`); a settings file without them
/// has nothing to import.
fn vscode(ctx: &Ctx<'_>, root: &Map) -> Result<Vec<Found>, ImportError> {
    let settings = ctx.path.file_name().is_some_and(|n| n == "settings.json");
    let (servers_value, inputs_value, field, at) = if settings {
        match root.get("mcp") {
            Some(Value::Object(mcp)) => (
                mcp.get("servers"),
                mcp.get("inputs"),
                "mcp.servers",
                vec!["mcp", "servers"],
            ),
            _ => match root.get("mcp.servers") {
                Some(s) => (
                    Some(s),
                    root.get("mcp.inputs"),
                    "\"mcp.servers\"",
                    vec!["mcp.servers"],
                ),
                None => return Ok(Vec::new()),
            },
        }
    } else {
        (
            root.get("servers"),
            root.get("inputs"),
            "servers",
            vec!["servers"],
        )
    };
    let mut found = ctx.found();
    found.servers_at = at.into_iter().map(str::to_owned).collect();
    if let Some(inputs) = inputs_value {
        read_inputs(inputs, &mut found);
    }
    servers(ctx, servers_value, field, rules(ctx), &mut found);
    Ok(vec![found])
}

fn read_inputs(inputs: &Value, found: &mut Found) {
    let Value::Array(list) = inputs else {
        found.problem(None, format!("\"inputs\" is {}, not a list", kind(inputs)));
        return;
    };
    for (i, input) in list.iter().enumerate() {
        let Some(id) = input.get("id").and_then(Value::as_str) else {
            found.problem(None, format!("inputs[{i}] has no \"id\""));
            continue;
        };
        let text = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_owned);
        match input.get("type").and_then(Value::as_str) {
            Some("promptString") | Some("pickString") | None => {}
            Some(other) => {
                // A `command` input runs an editor command: no value here.
                found.problem(
                    None,
                    format!("input {id:?} is of type {other:?}; only promptString and pickString can be asked here"),
                );
                continue;
            }
        }
        found.inputs.push(Input {
            id: id.to_owned(),
            description: text("description"),
            password: input.get("password").and_then(Value::as_bool) == Some(true),
            default: text("default"),
        });
    }
}

/// Each member of the servers object at `field`.
fn servers(ctx: &Ctx<'_>, value: Option<&Value>, field: &str, rules: Rules<'_>, found: &mut Found) {
    let Some(value) = value else {
        return;
    };
    let Value::Object(map) = value else {
        found.problem(None, format!("{field} is {}, not an object", kind(value)));
        return;
    };
    for (name, entry) in map {
        let mut server = Server::new(name, rules);
        match entry {
            Value::Object(obj) => entry_fields(ctx, obj, &mut server),
            other => server.fail(format!("its entry is {}, not an object", kind(other))),
        }
        server.finish(found);
    }
}

/// The keys of a Claude-Desktop-shaped entry, as every dialect of this
/// family writes them.
const KEYS: &Table = &[
    ("type", Field::Transport),
    ("transport", Field::Transport),
    ("command", Field::Command),
    ("args", Field::Args),
    ("env", Field::Env),
    ("envFile", Field::EnvFile),
    ("cwd", Field::Cwd),
    ("url", Field::Url),
    ("serverUrl", Field::Url),
    ("headers", Field::Headers),
    ("disabled", Field::Disabled),
    ("enabled", Field::Enabled),
    ("disabledTools", Field::DenyTools),
    ("alwaysAllow", Field::Drop(NO_APPROVALS)),
    ("autoApprove", Field::Drop(NO_APPROVALS)),
    (
        "timeout",
        Field::Drop(
            "a bare number; mcphost's timeouts take units (set timeouts.request, e.g. \"60s\")",
        ),
    ),
];

const NO_APPROVALS: &str = "tool approval is the host's business; mcphost has no approval list";

fn entry_fields(ctx: &Ctx<'_>, obj: &Map, s: &mut Server<'_>) {
    let kind_seen = Fields::new(ctx, KEYS).read(obj, s, |_, _, _| {});
    transport(kind_seen.as_deref(), s);
}

/// Our `type` for theirs: `stdio` and `http` are inferred from `command`
/// and `url`; `sse` and Streamable HTTP only are written.
pub(super) fn transport(kind_seen: Option<&str>, s: &mut Server<'_>) {
    match kind_seen {
        None | Some("stdio") | Some("http") => {}
        Some("sse") => s.entry.kind = Some("sse".to_owned()),
        Some("streamable-http") | Some("streamableHttp") | Some("streamable_http") => {
            s.entry.kind = Some("streamable-http".to_owned());
        }
        Some(other) => s.fail(format!(
            "transport {other:?} is not one mcphost speaks (stdio, http, streamable-http, sse)"
        )),
    }
    if s.entry.command.is_some() && s.entry.url.is_some() {
        s.fail("has both a command and a URL");
    }
    if s.entry.command.is_some() && s.entry.kind.is_some() {
        s.fail(format!(
            "has a command but transport {:?}",
            kind_seen.unwrap_or_default()
        ));
    }
}
