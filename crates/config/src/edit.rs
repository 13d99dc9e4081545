//! Adding and removing servers in the user's config text.
//!
//! Works on jsonc-parser's concrete syntax tree, which keeps every byte of
//! trivia, so comments, key order, trailing commas, unexpanded `${VAR}`
//! references and formatting outside the edited member stay as they were.
//! New members follow the file's indentation and newline style and its
//! trailing-comma habit.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use jsonc_parser::ast::{ObjectPropName, Value};
use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use jsonc_parser::{CollectOptions, parse_to_ast};

use super::ConfigError;
use super::parse::json_options;

const SERVER_KEYS: [&str; 2] = ["mcpServers", "servers"];

/// Adds `name` with `entry_json` (a JSON object, written as given: `${VAR}`
/// references stay unexpanded) to `mcpServers` or `servers`, whichever the
/// text has; creates `mcpServers` when it has neither.
///
/// The result is not validated; parse it before writing it.
pub fn add_server(text: &str, name: &str, entry_json: &str) -> Result<String, ConfigError> {
    if name.trim().is_empty() {
        return Err(ConfigError::BadEntry {
            reason: "the server name must be non-empty".to_owned(),
        });
    }
    let entry = entry_value(entry_json)?;
    let root = parse_root(text)?;
    let root_obj = match root.value() {
        None => root.object_value_or_set(),
        Some(_) => root.object_value().ok_or_else(not_an_object)?,
    };
    let (servers, key) = match servers_object(&root_obj)? {
        Some(found) => found,
        None => (root_obj.object_value_or_set(SERVER_KEYS[0]), SERVER_KEYS[0]),
    };
    if servers.get(name).is_some() {
        return Err(ConfigError::ServerExists {
            name: name.to_owned(),
            key: key.to_owned(),
        });
    }
    servers.append(name, entry);
    Ok(root.to_string())
}

/// Removes the server `name`, with its separating comma and any comment on
/// the same line after it. Comments on lines of their own stay.
pub fn remove_server(text: &str, name: &str) -> Result<String, ConfigError> {
    let root = parse_root(text)?;
    let (servers, _) = existing_servers(&root, name)?;
    servers.get(name).ok_or_else(|| no_such(name))?.remove();
    Ok(root.to_string())
}

fn no_such(name: &str) -> ConfigError {
    ConfigError::NoSuchServer {
        name: name.to_owned(),
    }
}

/// The servers object of a config that must already hold `name`'s entry.
fn existing_servers(
    root: &CstRootNode,
    name: &str,
) -> Result<(CstObject, &'static str), ConfigError> {
    let root_obj = match root.value() {
        None => return Err(no_such(name)),
        Some(_) => root.object_value().ok_or_else(not_an_object)?,
    };
    servers_object(&root_obj)?.ok_or_else(|| no_such(name))
}

/// Sets `"disabled": <disabled>` on server `name`, in place when the key
/// exists, else appended to the entry. Nothing else in the text changes.
pub fn set_disabled(text: &str, name: &str, disabled: bool) -> Result<String, ConfigError> {
    let root = parse_root(text)?;
    let (servers, _) = existing_servers(&root, name)?;
    let entry = servers.object_value(name).ok_or_else(|| no_such(name))?;
    match entry.get("disabled") {
        Some(prop) => prop.set_value(CstInputValue::Bool(disabled)),
        None => {
            entry.append("disabled", CstInputValue::Bool(disabled));
        }
    }
    Ok(root.to_string())
}

/// Replaces `path` with `text` atomically: a temporary file in the same
/// directory, fsynced, renamed over the original, keeping its permissions. A
/// symlink is followed, so the link stays and its target is replaced. A new
/// file gets mode 0600, since configs hold tokens.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), ConfigError> {
    let write_error = |source| ConfigError::Write {
        path: path.to_path_buf(),
        source,
    };
    let target = match fs::canonicalize(path) {
        Ok(real) => real,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => path.to_path_buf(),
        Err(err) => return Err(write_error(err)),
    };
    let mode = match fs::metadata(&target) {
        Ok(meta) => Some(meta.permissions().mode()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(write_error(err)),
    };
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut temp = tempfile::Builder::new()
        .prefix(".mcphost-config-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(write_error)?;
    temp.write_all(text.as_bytes()).map_err(write_error)?;
    if let Some(mode) = mode {
        temp.as_file()
            .set_permissions(fs::Permissions::from_mode(mode))
            .map_err(write_error)?;
    }
    temp.as_file().sync_all().map_err(write_error)?;
    temp.persist(&target)
        .map_err(|err| write_error(err.error))?;
    // The rename is durable only once the directory is synced.
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(write_error)?;
    tracing::debug!(path = %target.display(), "config written");
    Ok(())
}

pub(crate) fn parse_root(text: &str) -> Result<CstRootNode, ConfigError> {
    CstRootNode::parse(text, &json_options()).map_err(|err| ConfigError::syntax(None, &err))
}

fn not_an_object() -> ConfigError {
    ConfigError::Edit {
        reason: "the top level of the config is not a JSON object".to_owned(),
    }
}

fn servers_object(root: &CstObject) -> Result<Option<(CstObject, &'static str)>, ConfigError> {
    let present: Vec<&'static str> = SERVER_KEYS
        .into_iter()
        .filter(|key| root.get(key).is_some())
        .collect();
    match present.as_slice() {
        [] => Ok(None),
        [key] => match root.object_value(key) {
            Some(obj) => Ok(Some((obj, key))),
            None => Err(ConfigError::Edit {
                reason: format!("\"{key}\" is not an object"),
            }),
        },
        _ => Err(ConfigError::Edit {
            reason: "both \"mcpServers\" and \"servers\" are present; keep one of them".to_owned(),
        }),
    }
}

pub(crate) fn entry_value(entry_json: &str) -> Result<CstInputValue, ConfigError> {
    let parsed =
        parse_to_ast(entry_json, &CollectOptions::default(), &json_options()).map_err(|err| {
            ConfigError::BadEntry {
                reason: format!("not valid JSON: {err}"),
            }
        })?;
    match parsed.value {
        Some(value @ Value::Object(_)) => Ok(input_value(&value)),
        _ => Err(ConfigError::BadEntry {
            reason: "must be a JSON object".to_owned(),
        }),
    }
}

/// Keeps key order and number text exactly as written.
fn input_value(value: &Value<'_>) -> CstInputValue {
    match value {
        Value::StringLit(s) => CstInputValue::String(s.value.to_string()),
        Value::NumberLit(n) => CstInputValue::Number(n.value.to_owned()),
        Value::BooleanLit(b) => CstInputValue::Bool(b.value),
        Value::NullKeyword(_) => CstInputValue::Null,
        Value::Array(a) => CstInputValue::Array(a.elements.iter().map(input_value).collect()),
        Value::Object(o) => CstInputValue::Object(
            o.properties
                .iter()
                .map(|p| {
                    let name = match &p.name {
                        ObjectPropName::String(s) => s.value.to_string(),
                        ObjectPropName::Word(w) => w.value.to_owned(),
                    };
                    (name, input_value(&p.value))
                })
                .collect(),
        ),
    }
}
