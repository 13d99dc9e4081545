//! `mcphost import APP --consolidate`: the app's own config rewritten to
//! reach its servers through `mcphost bridge`, and put back from the backup.
//!
//! The rewrite goes through jsonc-parser's concrete syntax tree, as our own
//! config's editor does ([`crate::config::edit`]): the app's comments, key
//! order and unrelated settings stay byte for byte; only the imported
//! servers' members go and one `mcphost` member comes.

use std::path::{Path, PathBuf};

use jsonc_parser::cst::CstObject;

use super::Dialect;
use crate::config::ConfigError;
use crate::config::edit::{entry_value, parse_root};

/// The name of the one entry an app keeps.
pub const BRIDGE_NAME: &str = "mcphost";

/// What [`rewrite`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub text: String,
    /// The servers taken out, in the order asked.
    pub removed: Vec<String>,
    /// Whether the `mcphost` entry was added (not there already).
    pub bridge_added: bool,
}

/// `text` with the servers `remove` taken out of the object at `at` (keys
/// from the top, see [`super::Found::servers_at`]) and, when `bridge` is
/// given, a [`BRIDGE_NAME`] entry with that JSON added there, unless the
/// object has one already. Objects on the way are created when missing.
pub fn rewrite(
    text: &str,
    at: &[String],
    remove: &[String],
    bridge: Option<&str>,
) -> Result<Rewritten, ConfigError> {
    if at.is_empty() {
        return Err(ConfigError::Edit {
            reason: "this config's format cannot be rewritten".to_owned(),
        });
    }
    let root = parse_root(text)?;
    let top = match root.value() {
        None => root.object_value_or_set(),
        Some(_) => root.object_value().ok_or_else(|| ConfigError::Edit {
            reason: "the top level is not a JSON object".to_owned(),
        })?,
    };
    let mut servers: CstObject = top;
    for key in at {
        servers = match servers.get(key) {
            None => servers.object_value_or_set(key),
            Some(_) => servers.object_value(key).ok_or_else(|| ConfigError::Edit {
                reason: format!("{:?} is not an object", at.join(".")),
            })?,
        };
    }
    let mut removed = Vec::new();
    for name in remove {
        if let Some(prop) = servers.get(name) {
            prop.remove();
            removed.push(name.clone());
        }
    }
    let mut bridge_added = false;
    if let Some(entry) = bridge
        && servers.get(BRIDGE_NAME).is_none()
    {
        servers.append(BRIDGE_NAME, entry_value(entry)?);
        bridge_added = true;
    }
    Ok(Rewritten {
        text: root.to_string(),
        removed,
        bridge_added,
    })
}

/// The entry that runs `mcphost bridge` (`exe` is the absolute path of
/// this binary: an app's PATH need not have it), in `dialect`'s shape;
/// `global` are options put before `bridge` (`--config PATH`).
pub fn bridge_entry(dialect: Dialect, exe: &Path, global: &[String]) -> String {
    let mut args: Vec<String> = global.to_vec();
    args.push("bridge".to_owned());
    // Written by hand for the key order: serde_json's map sorts its keys.
    let command = serde_json::Value::String(exe.display().to_string());
    let args = serde_json::Value::from(args);
    let first = match dialect {
        Dialect::VsCode => r#""type": "stdio", "#,
        Dialect::Zed => r#""source": "custom", "#,
        _ => "",
    };
    format!(r#"{{{first}"command": {command}, "args": {args}}}"#)
}

/// Whether an imported entry is an mcphost bridge (a consolidated app's own
/// entry): importing it would have the daemon serve itself.
pub fn is_bridge(entry: &super::Entry) -> bool {
    let runs_mcphost = entry.command.as_deref().is_some_and(|c| {
        Path::new(c)
            .file_name()
            .is_some_and(|n| n == "mcphost" || n == "mcphost.exe")
    });
    runs_mcphost && entry.args.iter().any(|a| a == "bridge")
}

/// `<file>.mcphost-backup-<stamp>` beside `path`; `stamp` is a UTC time as
/// `20261203T173713Z`, so names sort by time.
pub fn backup_path(path: &Path, stamp: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".mcphost-backup-{stamp}"));
    path.with_file_name(name)
}

/// The backups of `path`, oldest first.
pub fn backups(path: &Path) -> Vec<PathBuf> {
    let Some(dir) = path.parent() else {
        return Vec::new();
    };
    let mut prefix = path.file_name().unwrap_or_default().to_os_string();
    prefix.push(".mcphost-backup-");
    let prefix = prefix.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_other_settings_stay_and_the_bridge_is_added_once() {
        let text = "{\n  // my shortcut\n  \"globalShortcut\": \"Ctrl+Space\",\n  \"mcpServers\": {\n    // files\n    \"fs\": { \"command\": \"npx\" }, // trailing\n    \"kept\": { \"command\": \"x\" }\n  }\n}\n";
        let at = ["mcpServers".to_owned()];
        let bridge = r#"{"command": "/bin/mcphost", "args": ["bridge"]}"#;
        let r = rewrite(text, &at, &["fs".to_owned()], Some(bridge)).unwrap();
        assert_eq!(r.removed, ["fs"]);
        assert!(r.bridge_added);
        assert!(r.text.contains("// my shortcut") && r.text.contains("\"Ctrl+Space\""));
        assert!(
            r.text.contains("\"kept\"") && !r.text.contains("\"fs\""),
            "{}",
            r.text
        );
        assert!(r.text.contains("\"mcphost\""), "{}", r.text);
        let again = rewrite(&r.text, &at, &[], Some(bridge)).unwrap();
        assert_eq!(again.text, r.text);
        assert!(!again.bridge_added);
    }

    #[test]
    fn a_nested_servers_object_is_found_or_made() {
        let at = [
            "projects".to_owned(),
            "/p".to_owned(),
            "mcpServers".to_owned(),
        ];
        let r = rewrite(r#"{"projects": {"/p": {"x": 1}}}"#, &at, &[], Some("{}")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&r.text).unwrap();
        assert_eq!(v["projects"]["/p"]["x"], 1);
        assert!(v["projects"]["/p"]["mcpServers"]["mcphost"].is_object());
    }

    #[test]
    fn the_bridge_entry_is_json_in_the_apps_key_order() {
        let e = bridge_entry(
            Dialect::Zed,
            Path::new("/o\"p/mcphost"),
            &["--config".into(), "/c".into()],
        );
        assert_eq!(
            e,
            r#"{"source": "custom", "command": "/o\"p/mcphost", "args": ["--config","/c","bridge"]}"#
        );
        let v: serde_json::Value = serde_json::from_str(&e).unwrap();
        assert_eq!(v["command"], "/o\"p/mcphost");
    }

    #[test]
    fn backups_sort_by_their_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp.json");
        for stamp in ["20261203T173713Z", "20251203T000000Z"] {
            std::fs::write(backup_path(&file, stamp), "{}").unwrap();
        }
        std::fs::write(dir.path().join("other.json.mcphost-backup-x"), "{}").unwrap();
        let names: Vec<String> = backups(&file)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "mcp.json.mcphost-backup-20251203T000000Z",
                "mcp.json.mcphost-backup-20261203T173713Z"
            ]
        );
    }
}
