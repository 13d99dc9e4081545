//! Imported servers into our config text, through the text-preserving
//! editor: comments and everything else in the file stay as they were.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::Imported;
use crate::config::{ConfigError, EnvLookup, edit, parse};

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
pub fn merge(
    text: &str,
    path: &Path,
    servers: &[Imported],
    opts: &MergeOptions,
    env: EnvLookup<'_>,
) -> Result<MergeReport, ConfigError> {
    parse(text, path, env)?;
    let mut text = text.to_owned();
    let mut results = Vec::new();
    for server in servers {
        let entry = server.entry.to_value();
        let mut name = server.name.clone();
        let mut replace = false;
        let result = |name: &str, action, reason: Option<String>| Merged {
            name: name.to_owned(),
            from: server.name.clone(),
            action,
            reason,
        };
        if let Some(existing) = existing_entry(&text, &name)? {
            if same(&existing, &entry) {
                results.push(result(&name, Action::Duplicate, None));
                continue;
            }
            if opts.overwrite {
                replace = true;
            } else if let Some(prefix) = &opts.rename_prefix {
                name = format!("{prefix}{name}");
                match existing_entry(&text, &name)? {
                    Some(e) if same(&e, &entry) => {
                        results.push(result(&name, Action::Duplicate, None));
                        continue;
                    }
                    Some(_) => {
                        results.push(result(
                            &name,
                            Action::Conflict,
                            Some(format!("\"{name}\" is taken too, by a different entry")),
                        ));
                        continue;
                    }
                    None => {}
                }
            } else {
                results.push(result(
                    &name,
                    Action::Conflict,
                    Some("a different entry has this name".to_owned()),
                ));
                continue;
            }
        }
        let base = if replace {
            edit::remove_server(&text, &name)?
        } else {
            text.clone()
        };
        let added = match edit::add_server(&base, &name, &server.entry.to_json()) {
            Ok(t) => t,
            // An entry the editor refuses (an empty name) is this server's
            // problem, not the whole import's.
            Err(e) => {
                results.push(result(&name, Action::Invalid, Some(e.to_string())));
                continue;
            }
        };
        let first_error = match parse(&added, path, env) {
            Ok(_) => {
                text = added;
                let action = if replace {
                    Action::Replaced
                } else {
                    Action::Added
                };
                results.push(result(&name, action, None));
                continue;
            }
            Err(e) => issues_of(&e),
        };
        // A disabled server may lack its variables; anything else it may not.
        let mut parked = server.entry.clone();
        parked.disabled = true;
        match edit::add_server(&base, &name, &parked.to_json())
            .and_then(|added| parse(&added, path, env).map(|_| added))
        {
            Ok(added) if !server.entry.disabled => {
                text = added;
                results.push(result(
                    &name,
                    Action::AddedDisabled,
                    Some(format!(
                        "{first_error}; enable it once that is fixed (mcphost servers enable {name})"
                    )),
                ));
            }
            _ => results.push(result(&name, Action::Invalid, Some(first_error))),
        }
    }
    Ok(MergeReport { text, results })
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

/// The entry named `name` in the config text, as a value.
fn existing_entry(text: &str, name: &str) -> Result<Option<Value>, ConfigError> {
    let ast = jsonc_parser::parse_to_ast(
        text,
        &jsonc_parser::CollectOptions::default(),
        &crate::config::parse::json_options(),
    )
    .map_err(|e| ConfigError::syntax(None, &e))?;
    let Some(jsonc_parser::ast::Value::Object(root)) = &ast.value else {
        return Ok(None);
    };
    for key in ["mcpServers", "servers"] {
        if let Some(servers) = root.get_object(key)
            && let Some(prop) = servers.get(name)
        {
            return Ok(Some(super::json::value(&prop.value).to_json()));
        }
    }
    Ok(None)
}

/// Two entries that mean the same: `type` that is inferred anyway, empty
/// lists and maps, and `disabled: false` do not count.
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
        ("disabled", Value::Bool(false)) => false,
        (_, Value::Array(a)) => !a.is_empty(),
        (_, Value::Object(o)) => !o.is_empty(),
        _ => true,
    });
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::import::{Entry, Transport};

    fn server(name: &str, command: &str) -> Imported {
        Imported {
            name: name.to_owned(),
            transport: Transport::Stdio,
            entry: Entry {
                command: Some(command.to_owned()),
                ..Entry::default()
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
