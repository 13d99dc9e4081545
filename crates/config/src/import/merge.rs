//! Imported servers into our config text, through the text-preserving
//! editor: comments and everything else in the file stay as they were.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::Imported;
use crate::{ConfigError, EnvLookup, edit, parse};

#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    /// Replace a server of the same name whose entry differs.
    pub overwrite: bool,
    /// Add a server whose name is taken under this prefix + its name.
    pub rename_prefix: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    Added,
    /// Added with `"disabled": true`: enabled it would not load (a variable
    /// it references is not set); `reason` says what.
    AddedDisabled,
    /// Replaced a different entry of the same name (`--overwrite`).
    Replaced,
    /// The same entry is already there.
    Duplicate,
    /// A different entry has the name; skipped.
    Conflict,
    /// Our config would refuse it; skipped, `reason` says why.
    Invalid,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Merged {
    /// The name in our config (with `rename_prefix`, the new one).
    pub name: String,
    /// Its name in the source.
    pub from: String,
    pub action: Action,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A duplicate by what it runs: the config's entry that runs the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_as: Option<String>,
}

#[derive(Debug, Clone)]
pub struct MergeReport {
    /// The config text after the merge; unchanged when nothing was added.
    pub text: String,
    pub results: Vec<Merged>,
}

/// Adds `servers` to the config `text` (read from `path`, which anchors
/// relative paths when validating). The text must be a valid config; each
/// server is checked against it as it is added, with `env` for `${VAR}`.
///
/// A server the config already runs (same command, arguments and
/// environment, or same URL and headers; see [`runs`]) is a duplicate
/// whatever its name, also against servers added earlier in the same call.
/// `prepare` is called on each server about to be written (after that
/// decision, so it sees only new servers): it may rewrite the entry, as
/// moving secrets to the keyring does.
pub fn merge(
    text: &str,
    path: &Path,
    servers: &[Imported],
    opts: &MergeOptions,
    env: EnvLookup<'_>,
    prepare: &mut dyn FnMut(&mut Imported),
) -> Result<MergeReport, ConfigError> {
    parse(text, path, env)?;
    let mut text = text.to_owned();
    let mut results = Vec::new();
    // What the config holds, by name: the entry and what it runs.
    let mut known: Vec<Known> = existing_entries(&text)?
        .into_iter()
        .map(|(name, entry)| Known::new(name, &entry, env))
        .collect();
    for server in servers {
        let entry = server.entry.to_value();
        let identity = runs(&entry, env);
        let (name, replace) = match place(&known, server, &entry, identity.as_ref(), opts) {
            Placement::At { name, replace } => (name, replace),
            Placement::Not(merged) => {
                results.push(merged);
                continue;
            }
        };
        let mut server = server.clone();
        prepare(&mut server);
        let base = if replace {
            edit::remove_server(&text, &name)?
        } else {
            text.clone()
        };
        let (added, merged) = add(&base, &name, &server, replace, path, env);
        if let Some(added) = added {
            text = added;
            known.retain(|k| k.name != name);
            known.push(Known {
                name,
                entry,
                runs: identity,
            });
        }
        results.push(merged);
    }
    Ok(MergeReport { text, results })
}

/// Where an imported server goes: under `name` (over the entry of that
/// name when `replace`), or nowhere, and why.
enum Placement {
    At { name: String, replace: bool },
    Not(Merged),
}

fn merged(name: &str, from: &Imported, action: Action, reason: Option<String>) -> Merged {
    Merged {
        name: name.to_owned(),
        from: from.name.clone(),
        action,
        reason,
        same_as: None,
    }
}

/// A duplicate (by name and entry, or by what it runs), a conflict, or the
/// name it is added under.
fn place(
    known: &[Known],
    server: &Imported,
    entry: &Value,
    identity: Option<&Value>,
    opts: &MergeOptions,
) -> Placement {
    let name = server.name.clone();
    let same_name = known.iter().find(|k| k.name == name);
    if same_name.is_some_and(|k| same(&k.entry, entry)) {
        return Placement::Not(merged(&name, server, Action::Duplicate, None));
    }
    // The one of that name first: the user may have changed its tools.
    let runs_it = |k: &&Known| identity.is_some() && k.runs.as_ref() == identity;
    if let Some(k) = same_name
        .filter(runs_it)
        .or_else(|| known.iter().find(runs_it))
    {
        let mut r = merged(&name, server, Action::Duplicate, None);
        r.same_as = Some(k.name.clone());
        return Placement::Not(r);
    }
    if same_name.is_none() {
        return Placement::At {
            name,
            replace: false,
        };
    }
    if opts.overwrite {
        return Placement::At {
            name,
            replace: true,
        };
    }
    let Some(prefix) = &opts.rename_prefix else {
        let why = "a different entry has this name".to_owned();
        return Placement::Not(merged(&name, server, Action::Conflict, Some(why)));
    };
    let name = format!("{prefix}{name}");
    match known.iter().find(|k| k.name == name) {
        Some(k) if same(&k.entry, entry) => {
            Placement::Not(merged(&name, server, Action::Duplicate, None))
        }
        Some(_) => {
            let why = format!("\"{name}\" is taken too, by a different entry");
            Placement::Not(merged(&name, server, Action::Conflict, Some(why)))
        }
        None => Placement::At {
            name,
            replace: false,
        },
    }
}

/// `server` (prepared) added to `base` under `name`: the new text, if it
/// went in (disabled, when it is invalid only while enabled), and what
/// became of it.
fn add(
    base: &str,
    name: &str,
    server: &Imported,
    replace: bool,
    path: &Path,
    env: EnvLookup<'_>,
) -> (Option<String>, Merged) {
    let added = match edit::add_server(base, name, &server.entry.to_json()) {
        Ok(t) => t,
        // An entry the editor refuses (an empty name) is this server's
        // problem, not the whole import's.
        Err(e) => {
            return (
                None,
                merged(name, server, Action::Invalid, Some(e.to_string())),
            );
        }
    };
    let first_error = match parse(&added, path, env) {
        Ok(_) => {
            let action = if replace {
                Action::Replaced
            } else {
                Action::Added
            };
            return (Some(added), merged(name, server, action, None));
        }
        Err(e) => issues_of(&e),
    };
    // A disabled server may lack its variables; anything else it may not.
    let mut parked = server.entry.clone();
    parked.disabled = true;
    match edit::add_server(base, name, &parked.to_json())
        .and_then(|added| parse(&added, path, env).map(|_| added))
    {
        Ok(added) if !server.entry.disabled => {
            let why = format!(
                "{first_error}; enable it once that is fixed (mcphost servers enable {name})"
            );
            (
                Some(added),
                merged(name, server, Action::AddedDisabled, Some(why)),
            )
        }
        _ => (
            None,
            merged(name, server, Action::Invalid, Some(first_error)),
        ),
    }
}

/// An entry of the config (or one this merge added, as imported, before
/// `prepare`).
struct Known {
    name: String,
    entry: Value,
    runs: Option<Value>,
}

impl Known {
    fn new(name: String, entry: &Value, env: EnvLookup<'_>) -> Known {
        Known {
            name,
            runs: runs(entry, env),
            entry: entry.clone(),
        }
    }
}

/// What an entry runs, which makes two entries the same server whatever
/// their names: the command, its arguments and environment, or the URL and
/// headers. `${keyring:NAME}` references are read through `env`, so a
/// secret moved to the keyring by an earlier import still matches.
/// `None` for an entry with neither a command nor a URL.
pub fn runs(entry: &Value, env: EnvLookup<'_>) -> Option<Value> {
    let text = |v: &Value| match v {
        Value::String(s) => Value::String(read_keyring(s, env)),
        other => other.clone(),
    };
    let map = |key: &str| -> Value {
        match entry.get(key) {
            Some(Value::Object(m)) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), text(v))).collect())
            }
            _ => Value::Object(serde_json::Map::new()),
        }
    };
    if let Some(command) = entry.get("command") {
        let args = match entry.get("args") {
            Some(Value::Array(a)) => Value::Array(a.iter().map(text).collect()),
            _ => Value::Array(Vec::new()),
        };
        return Some(serde_json::json!({
            "command": text(command),
            "args": args,
            "env": map("env"),
        }));
    }
    let url = entry.get("url")?;
    Some(serde_json::json!({ "url": text(url), "headers": map("headers") }))
}

/// `s` with each `${keyring:NAME}` the lookup answers put in.
fn read_keyring(s: &str, env: EnvLookup<'_>) -> String {
    const OPEN: &str = "${keyring:";
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find(OPEN) {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let Some(close) = from.find('}') else {
            break;
        };
        let (reference, after) = from.split_at(close.saturating_add(1));
        let name = reference
            .strip_prefix(OPEN)
            .and_then(|r| r.strip_suffix('}'))
            .unwrap_or_default();
        match env(&format!("keyring:{name}")) {
            Some(value) => out.push_str(&super::vars::escape(&value)),
            None => out.push_str(reference),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The issues of a refused config, without the file name (the caller names it).
fn issues_of(e: &ConfigError) -> String {
    let issues = e.issues();
    if issues.is_empty() {
        return e.to_string();
    }
    issues
        .iter()
        .map(|i| {
            if i.field.is_empty() {
                i.message.clone()
            } else {
                format!("{}: {}", i.field, i.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every entry of the config text, by name, as values.
fn existing_entries(text: &str) -> Result<Vec<(String, Value)>, ConfigError> {
    let ast = jsonc_parser::parse_to_ast(
        text,
        &jsonc_parser::CollectOptions::default(),
        &crate::parse::json_options(),
    )
    .map_err(|e| ConfigError::syntax(None, &e))?;
    let Some(jsonc_parser::ast::Value::Object(root)) = &ast.value else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for key in ["mcpServers", "servers"] {
        if let Some(servers) = root.get_object(key) {
            for prop in &servers.properties {
                out.push((
                    prop.name.as_str().to_owned(),
                    super::json::value(&prop.value).to_json(),
                ));
            }
        }
    }
    Ok(out)
}

/// Two entries that mean the same: `type` that is inferred anyway, empty
/// lists and maps, and `disabled` do not count (an import parks a server it
/// cannot load yet as disabled; the next import must see it as there).
fn same(a: &Value, b: &Value) -> bool {
    normal(a) == normal(b)
}

fn normal(v: &Value) -> Value {
    let Value::Object(map) = v else {
        return v.clone();
    };
    let mut out = map.clone();
    out.retain(|k, v| match (k.as_str(), &*v) {
        ("type", Value::String(t)) => t != "stdio" && t != "http",
        ("disabled", _) => false,
        (_, Value::Array(a)) => !a.is_empty(),
        (_, Value::Object(o)) => !o.is_empty(),
        _ => true,
    });
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::{ServerEntry, Transport};

    fn server(name: &str, command: &str) -> Imported {
        Imported {
            name: name.to_owned(),
            transport: Transport::Stdio,
            entry: ServerEntry {
                command: Some(command.to_owned()),
                ..ServerEntry::default()
            },
            dropped: Vec::new(),
            notes: Vec::new(),
            inputs: Vec::new(),
        }
    }

    #[test]
    fn one_bad_server_does_not_stop_the_others() {
        let env = |_: &str| None;
        let report = merge(
            "{}",
            Path::new("/c/config.json"),
            &[server("", "x"), server("ok", "y")],
            &MergeOptions::default(),
            &env,
            &mut |_| {},
        )
        .unwrap();
        let actions: Vec<Action> = report.results.iter().map(|r| r.action).collect();
        assert_eq!(actions, [Action::Invalid, Action::Added]);
        assert!(report.text.contains("\"ok\""), "{}", report.text);
    }

    #[test]
    fn an_invalid_base_config_is_refused() {
        let env = |_: &str| None;
        let err = merge(
            r#"{"mcpServers": {"a": {}}}"#,
            Path::new("/c/config.json"),
            &[server("ok", "y")],
            &MergeOptions::default(),
            &env,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(err.to_string().contains("/c/config.json"), "{err}");
    }

    #[test]
    fn an_inferred_type_and_empty_lists_do_not_make_a_conflict() {
        let a = serde_json::json!({"type": "stdio", "command": "x", "args": [], "disabled": false});
        let b = serde_json::json!({"command": "x"});
        assert!(same(&a, &b));
        assert!(!same(&a, &serde_json::json!({"command": "y"})));
    }
}
