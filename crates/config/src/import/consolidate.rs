//! `mcphost import APP --consolidate`: the app's own config rewritten to
//! reach its servers through `mcphost bridge`, and put back from the backup.
//!
//! The rewrite goes through jsonc-parser's concrete syntax tree, as our own
//! config's editor does ([`crate::edit`]): the app's comments, key
//! order and unrelated settings stay byte for byte; only the imported
//! servers' members go and one `mcphost` member comes.

use std::path::{Path, PathBuf};

use jsonc_parser::cst::CstObject;

use super::Dialect;
use crate::ConfigError;
use crate::edit::{entry_value, parse_root};

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
pub fn is_bridge(entry: &super::ServerEntry) -> bool {
    let runs_mcphost = entry.command.as_deref().is_some_and(|c| {
        Path::new(c)
            .file_name()
            .is_some_and(|n| n == "mcphost" || n == "mcphost.exe")
    });
    runs_mcphost && entry.args.iter().any(|a| a == "bridge")
}

/// Goose's `config.yaml`: the `extensions` entries `remove` taken out and,
/// when `bridge` (an entry as [`bridge_entry`] makes it) is given, a
/// [`BRIDGE_NAME`] extension added, unless there is one. A line edit of the
/// block map: every other line stays byte for byte (YAML readers keep no
/// comments). A flow map, tabs, or an anchor in an entry taken out is
/// refused rather than guessed at.
pub fn rewrite_goose(
    text: &str,
    remove: &[String],
    bridge: Option<&str>,
) -> Result<Rewritten, ConfigError> {
    let refuse = refuse_goose;
    let newline = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
    let content = yaml_content;
    let indent = yaml_indent;
    if lines
        .iter()
        .any(|l| content(l) && l[..l.len() - l.trim_start().len()].contains('\t'))
    {
        return Err(refuse("it is indented with tabs"));
    }
    let header = lines
        .iter()
        .position(|l| indent(l) == 0 && content(l) && yaml_key(l).as_deref() == Some("extensions"));
    let (start, end) = match header {
        Some(h) => {
            let rest = lines[h]
                .split_once(':')
                .map(|(_, r)| r.trim())
                .unwrap_or("");
            if !rest.is_empty() && !rest.starts_with('#') {
                return Err(refuse("`extensions` is not a block map"));
            }
            let end = (h + 1..lines.len())
                .find(|&i| content(&lines[i]) && indent(&lines[i]) == 0)
                .unwrap_or(lines.len());
            (h + 1, end)
        }
        None => {
            if !text.is_empty() && !text.ends_with('\n') {
                lines.push(newline.to_owned());
            }
            lines.push(format!("extensions:{newline}"));
            (lines.len(), lines.len())
        }
    };
    let child = (start..end)
        .find(|&i| content(&lines[i]))
        .map(|i| indent(&lines[i]))
        .unwrap_or(2);
    let entries = goose_entries(&lines, start..end, child)?;
    let mut removed = Vec::new();
    let mut cut: Vec<(usize, usize)> = Vec::new();
    for name in remove {
        if let Some((_, from, to)) = entries.iter().find(|(k, _, _)| k == name) {
            if lines[*from..*to]
                .iter()
                .any(|l| l.contains(": &") || l.contains("- &"))
            {
                return Err(refuse(&format!("{name} defines a YAML anchor")));
            }
            cut.push((*from, *to));
            removed.push(name.clone());
        }
    }
    let has_bridge = entries.iter().any(|(k, _, _)| k == BRIDGE_NAME);
    let mut added: Option<String> = None;
    let insert_at = entries.last().map(|e| e.2).unwrap_or(start);
    if let Some(entry) = bridge
        && !has_bridge
    {
        added = Some(goose_bridge(entry, child, newline)?);
    }
    let mut out = String::with_capacity(text.len());
    for (i, line) in lines.iter().enumerate() {
        if i == insert_at
            && let Some(block) = &added
        {
            out.push_str(block);
        }
        if !cut.iter().any(|&(from, to)| (from..to).contains(&i)) {
            out.push_str(line);
        }
    }
    if insert_at == lines.len()
        && let Some(block) = &added
    {
        out.push_str(block);
    }
    Ok(Rewritten {
        text: out,
        removed,
        bridge_added: added.is_some(),
    })
}

fn refuse_goose(why: &str) -> ConfigError {
    ConfigError::Edit {
        reason: format!("its extensions cannot be rewritten: {why}"),
    }
}

/// A line that is neither blank nor a comment.
fn yaml_content(l: &str) -> bool {
    let t = l.trim();
    !t.is_empty() && !t.starts_with('#')
}

fn yaml_indent(l: &str) -> usize {
    l.len() - l.trim_start_matches(' ').len()
}

/// The entries of the `extensions` map in `lines_in`, whose keys are
/// indented by `child`: each its key, its key line and the line after its
/// last deeper one.
fn goose_entries(
    lines: &[String],
    lines_in: std::ops::Range<usize>,
    child: usize,
) -> Result<Vec<(String, usize, usize)>, ConfigError> {
    let mut entries: Vec<(String, usize, usize)> = Vec::new();
    for (i, line) in lines
        .iter()
        .enumerate()
        .take(lines_in.end)
        .skip(lines_in.start)
    {
        if !yaml_content(line) {
            continue;
        }
        match yaml_indent(line) {
            n if n == child => {
                let key = yaml_key(line).ok_or_else(|| refuse_goose("an entry is not `NAME:`"))?;
                entries.push((key, i, i + 1));
            }
            n if n > child => match entries.last_mut() {
                Some(e) => e.2 = i + 1,
                None => return Err(refuse_goose("its first line is not an entry")),
            },
            _ => return Err(refuse_goose("its indentation is uneven")),
        }
    }
    Ok(entries)
}

/// The [`BRIDGE_NAME`] extension for the bridge `entry` (JSON), its key
/// indented by `child`.
fn goose_bridge(entry: &str, child: usize, newline: &str) -> Result<String, ConfigError> {
    let v: serde_json::Value = serde_json::from_str(entry).map_err(|e| ConfigError::Edit {
        reason: format!("the bridge entry: {e}"),
    })?;
    let pad = " ".repeat(child);
    let field = " ".repeat(child + 2);
    let block = format!(
        "{pad}{BRIDGE_NAME}:{newline}\
         {field}name: {BRIDGE_NAME}{newline}\
         {field}description: every server of mcphost, through mcphost bridge{newline}\
         {field}type: stdio{newline}\
         {field}cmd: {}{newline}\
         {field}args: {}{newline}\
         {field}envs: {{}}{newline}\
         {field}enabled: true{newline}\
         {field}timeout: 300{newline}",
        v["command"], v["args"],
    );
    Ok(block)
}

/// The key of a `KEY: …` (or `"KEY": …`) line, unquoted.
fn yaml_key(line: &str) -> Option<String> {
    let t = line.trim_start();
    if let Some(q @ ('"' | '\'')) = t.chars().next() {
        let rest = &t[1..];
        let close = rest.find(q)?;
        return rest[close + 1..]
            .starts_with(':')
            .then(|| rest[..close].to_owned());
    }
    let (key, _) = t.split_once(':')?;
    (!key.is_empty() && !key.starts_with(['-', '{', '[', '&', '*', '?', '!', '|', '>']))
        .then(|| key.trim_end().to_owned())
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
    fn goose_keeps_every_other_line_and_gets_one_bridge_extension() {
        let text = "# my Goose\nGOOSE_MODEL: x # model\nextensions:\n  developer:\n    bundled: true\n    type: builtin\n  # github, by hand\n  github:\n    cmd: npx\n    args:\n    - -y\n    - server-github\n    envs: {}\n    type: stdio\n\n  \"memory\":\n    cmd: mem\n    description: |\n      two\n\n      lines\n# after\nGOOSE_MODE: auto\n";
        let bridge = r#"{"command": "/o p/mcphost", "args": ["--config","/c","bridge"]}"#;
        let r = rewrite_goose(
            text,
            &["github".to_owned(), "memory".to_owned()],
            Some(bridge),
        )
        .unwrap();
        assert_eq!(r.removed, ["github", "memory"]);
        assert!(r.bridge_added);
        assert_eq!(
            r.text,
            "# my Goose\nGOOSE_MODEL: x # model\nextensions:\n  developer:\n    bundled: true\n    type: builtin\n  # github, by hand\n\n  mcphost:\n    name: mcphost\n    description: every server of mcphost, through mcphost bridge\n    type: stdio\n    cmd: \"/o p/mcphost\"\n    args: [\"--config\",\"/c\",\"bridge\"]\n    envs: {}\n    enabled: true\n    timeout: 300\n# after\nGOOSE_MODE: auto\n"
        );
        let v: serde_norway::Value = serde_norway::from_str(&r.text).unwrap();
        assert_eq!(
            v["extensions"]["mcphost"]["cmd"].as_str(),
            Some("/o p/mcphost")
        );
        assert_eq!(
            v["extensions"]["mcphost"]["args"][2].as_str(),
            Some("bridge")
        );
        assert_eq!(v["GOOSE_MODE"].as_str(), Some("auto"));
        let again = rewrite_goose(&r.text, &[], Some(bridge)).unwrap();
        assert_eq!(again.text, r.text);
        assert!(!again.bridge_added);
        // No extensions yet: the map is made at the end.
        let r = rewrite_goose("GOOSE_MODE: auto", &[], Some(bridge)).unwrap();
        let v: serde_norway::Value = serde_norway::from_str(&r.text).unwrap();
        assert_eq!(v["extensions"]["mcphost"]["type"].as_str(), Some("stdio"));
        assert!(
            r.text
                .starts_with("GOOSE_MODE: auto\nextensions:\n  mcphost:\n"),
            "{}",
            r.text
        );
    }

    #[test]
    fn goose_in_a_shape_a_line_edit_could_break_is_refused() {
        for text in [
            "extensions: {github: {cmd: npx}}\n",
            "extensions:\n  github: &gh\n    cmd: npx\n",
            "extensions:\n\tgithub:\n\t\tcmd: npx\n",
        ] {
            let e = rewrite_goose(text, &["github".to_owned()], Some("{}")).unwrap_err();
            assert!(e.to_string().contains("cannot be rewritten"), "{text}: {e}");
        }
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
