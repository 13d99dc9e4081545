//! The config as far as it parses, its issues mapped back to the file's lines.

use std::path::PathBuf;

use anyhow::Result;

use mcphost::config::{ConfigError, HostConfig, Issue};

use super::fixes::Fix;
use super::{Check, Options};

/// The config as far as it parses: servers with errors are taken out (and
/// their issues kept for their reports), so the others are still checked.
pub(super) struct Loaded {
    pub(super) path: Option<PathBuf>,
    pub(super) cfg: Option<HostConfig>,
    /// Issues that belong to no one server: the config as a whole.
    pub(super) general: Vec<Issue>,
    /// Per server name, its errors (the entry could not be used).
    pub(super) errors: Vec<(String, Issue)>,
    pub(super) warnings: Vec<(Option<String>, Issue)>,
    pub(super) unreadable: Option<String>,
}

/// The server a config field belongs to: `mcpServers.NAME…`,
/// `servers["odd name"]…`.
fn server_of_field(field: &str) -> Option<String> {
    let rest = field
        .strip_prefix("mcpServers")
        .or_else(|| field.strip_prefix("servers"))?;
    if let Some(r) = rest.strip_prefix('.') {
        let end = r.find(['.', '[']).unwrap_or(r.len());
        return Some(r[..end].to_owned()).filter(|n| !n.is_empty());
    }
    let r = rest.strip_prefix('[')?;
    serde_json::Deserializer::from_str(r)
        .into_iter::<String>()
        .next()?
        .ok()
}

pub(super) fn load(opts: &Options) -> Result<Loaded> {
    let loc = mcphost::config::location::resolve_config_path(opts.config.clone())?;
    let path = std::path::absolute(&loc.path).unwrap_or(loc.path.clone());
    let mut loaded = Loaded {
        path: Some(path.clone()),
        cfg: None,
        general: Vec::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
        unreadable: None,
    };
    let mut text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            loaded.unreadable = Some(format!("{}: cannot read it: {e}", path.display()));
            return Ok(loaded);
        }
    };
    // Each round takes out the servers whose entries have errors; what a
    // later round finds is mapped back to the lines of the file.
    let mut removed: Vec<RemovedLines> = Vec::new();
    let original = |mut issue: Issue, removed: &[RemovedLines]| {
        issue.line = original_line(issue.line, removed);
        issue
    };
    for _ in 0..8 {
        match mcphost::config::parse(&text, &path, &mcphost::auth::process_env) {
            Ok(cfg) => {
                crate::say_config_warnings(&cfg.warnings);
                for w in &cfg.warnings {
                    let w = original(w.clone(), &removed);
                    loaded.warnings.push((server_of_field(&w.field), w));
                }
                loaded.cfg = Some(cfg);
                return Ok(loaded);
            }
            Err(ConfigError::Invalid(issues)) => {
                let mut took_one_out = false;
                let round = removed.clone();
                for issue in issues.0 {
                    let issue = original(issue, &round);
                    match server_of_field(&issue.field) {
                        Some(name)
                            if let Ok(t) = mcphost::config::edit::remove_server(&text, &name) =>
                        {
                            removed.push(RemovedLines::between(&text, &t));
                            text = t;
                            took_one_out = true;
                            loaded.errors.push((name, issue));
                        }
                        // Already taken out this round (a second issue).
                        Some(name) if loaded.errors.iter().any(|(n, _)| *n == name) => {
                            loaded.errors.push((name, issue));
                        }
                        _ => loaded.general.push(issue),
                    }
                }
                if !took_one_out || !loaded.general.is_empty() {
                    return Ok(loaded);
                }
            }
            Err(ConfigError::Syntax {
                line: l,
                column,
                message,
                ..
            }) => {
                loaded.general.push(Issue {
                    path: path.clone(),
                    line: original_line(l, &removed),
                    field: String::new(),
                    message: format!(
                        "not valid JSON at column {column} (comments and trailing commas are fine): {message}"
                    ),
                });
                return Ok(loaded);
            }
            Err(e) => {
                loaded.unreadable = Some(e.to_string());
                return Ok(loaded);
            }
        }
    }
    loaded.unreadable = Some("too many broken server entries to check the rest".to_owned());
    Ok(loaded)
}

/// Lines taken out of the text: `count` lines from 0-based line `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RemovedLines {
    at: usize,
    count: usize,
}

impl RemovedLines {
    fn between(before: &str, after: &str) -> RemovedLines {
        let at = before
            .lines()
            .zip(after.lines())
            .take_while(|(a, b)| a == b)
            .count();
        RemovedLines {
            at,
            count: before.lines().count().saturating_sub(after.lines().count()),
        }
    }
}

/// The file's line number for a 1-based `line` of the text after `removed`.
fn original_line(line: usize, removed: &[RemovedLines]) -> usize {
    removed.iter().rev().fold(line, |l, c| {
        if l > c.at {
            l.saturating_add(c.count)
        } else {
            l
        }
    })
}

/// The variables an interpolation error names.
fn unset_variables(message: &str) -> Option<Vec<String>> {
    // After any `server "NAME": ` prefix.
    let at = message.find("variable")?;
    let message = &message[at..];
    let rest = message
        .strip_prefix("variable ")
        .or_else(|| message.strip_prefix("variables "))?;
    let (names, _) = rest
        .split_once(" is not set")
        .or_else(|| rest.split_once(" are not set"))?;
    Some(names.split(", ").map(str::to_owned).collect())
}

pub(super) fn issue_check(issue: &Issue) -> Check {
    let detail = format!("{}:{}: {}", issue.path.display(), issue.line, {
        if issue.field.is_empty() {
            issue.message.clone()
        } else {
            format!("{}: {}", issue.field, issue.message)
        }
    });
    match unset_variables(&issue.message) {
        Some(names) => Check::problem("env", detail, Fix::UnsetVariables(names)),
        None => Check::problem("config", detail, Fix::ConfigIssue(issue)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_name_their_server() {
        assert_eq!(
            server_of_field("mcpServers.gh.env.TOKEN").as_deref(),
            Some("gh")
        );
        assert_eq!(server_of_field("servers.x").as_deref(), Some("x"));
        assert_eq!(
            server_of_field(r#"mcpServers["a b"].command"#).as_deref(),
            Some("a b")
        );
        assert_eq!(server_of_field("namespacing.separator"), None);
        assert_eq!(server_of_field("servers"), None);
    }

    #[test]
    fn lines_after_a_cut_entry_map_back_to_the_file() {
        let before = "{\n \"mcpServers\": {\n  \"a\": {\n   \"command\": 1\n  },\n  \"b\": { \"command\": 2 }\n }\n}\n";
        let after = mcphost::config::edit::remove_server(before, "a").unwrap();
        let cut = RemovedLines::between(before, &after);
        // "b" was on line 6; it is on line 3 once "a" is gone.
        assert_eq!(
            after.lines().nth(2).map(str::trim),
            Some("\"b\": { \"command\": 2 }")
        );
        assert_eq!(original_line(3, &[cut]), 6);
        assert_eq!(original_line(1, &[cut]), 1);
    }

    #[test]
    fn unset_variables_are_read_from_the_message() {
        assert_eq!(
            unset_variables("variable TOKEN is not set and has no default"),
            Some(vec!["TOKEN".to_owned()])
        );
        assert_eq!(
            unset_variables("variables A, B are not set and have no default"),
            Some(vec!["A".to_owned(), "B".to_owned()])
        );
        assert_eq!(unset_variables("must be a string"), None);
    }
}
