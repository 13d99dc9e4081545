//! Where each host keeps its config, per platform: the one table of them.
//! docs/import.md shows the same table.

use std::path::{Path, PathBuf};

use super::{Dialect, ImportError, Scope};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Linux,
    MacOs,
    Windows,
}

impl Platform {
    pub fn current() -> Platform {
        if cfg!(target_os = "macos") {
            Platform::MacOs
        } else if cfg!(windows) {
            Platform::Windows
        } else {
            Platform::Linux
        }
    }
}

/// The directories the table is relative to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    pub platform: Platform,
    pub home: PathBuf,
    /// The platform's per-user config directory (the `directories` crate's
    /// `config_dir`): `$XDG_CONFIG_HOME` or `~/.config` on Linux,
    /// `~/Library/Application Support` on macOS, `%APPDATA%` on Windows.
    pub config: PathBuf,
    /// `$XDG_CONFIG_HOME` or `~/.config` on every platform: Zed and Goose
    /// use it on macOS too.
    pub xdg_config: PathBuf,
    /// The project per-project files are looked for in.
    pub project: PathBuf,
}

impl Places {
    /// This machine's directories, with `project` as the project.
    pub fn from_env(project: PathBuf) -> Result<Places, ImportError> {
        let dirs = directories::BaseDirs::new().ok_or(ImportError::NoHome)?;
        let home = dirs.home_dir().to_path_buf();
        let xdg_config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".config"));
        Ok(Places {
            platform: Platform::current(),
            config: dirs.config_dir().to_path_buf(),
            xdg_config,
            home,
            project,
        })
    }
}

/// Where `dialect` keeps its configs, in the order they are read. A
/// trailing `*` entry is a directory whose `.yaml`, `.yml` and `.json`
/// files are each a config.
pub fn table(dialect: Dialect, p: &Places) -> Vec<(PathBuf, Scope)> {
    use Platform::*;
    use Scope::*;
    let home = &p.home;
    let project = &p.project;
    match dialect {
        // Linux has no official build; the community ones use this path.
        Dialect::ClaudeDesktop => vec![(
            p.config.join("Claude").join("claude_desktop_config.json"),
            User,
        )],
        Dialect::ClaudeCode => vec![
            (home.join(".claude.json"), User),
            (project.join(".mcp.json"), Project),
        ],
        Dialect::VsCode => vec![
            (p.config.join("Code").join("User").join("mcp.json"), User),
            (
                p.config.join("Code").join("User").join("settings.json"),
                User,
            ),
            (project.join(".vscode").join("mcp.json"), Project),
        ],
        Dialect::Cursor => vec![
            (home.join(".cursor").join("mcp.json"), User),
            (project.join(".cursor").join("mcp.json"), Project),
        ],
        Dialect::Windsurf => vec![(
            home.join(".codeium")
                .join("windsurf")
                .join("mcp_config.json"),
            User,
        )],
        Dialect::Zed => vec![
            (
                match p.platform {
                    Windows => p.config.join("Zed").join("settings.json"),
                    Linux | MacOs => p.xdg_config.join("zed").join("settings.json"),
                },
                User,
            ),
            (project.join(".zed").join("settings.json"), Project),
        ],
        Dialect::Goose => vec![(
            match p.platform {
                Windows => p
                    .config
                    .join("Block")
                    .join("goose")
                    .join("config")
                    .join("config.yaml"),
                Linux | MacOs => p.xdg_config.join("goose").join("config.yaml"),
            },
            User,
        )],
        Dialect::Continue => vec![
            (home.join(".continue").join("config.yaml"), User),
            (
                project.join(".continue").join("mcpServers").join("*"),
                Project,
            ),
        ],
        Dialect::Mark3labs => vec![
            (home.join(".mcphost.yml"), User),
            (home.join(".mcphost.yaml"), User),
            (home.join(".mcphost.json"), User),
        ],
    }
}

/// The files of [`table`] that exist (directories expanded, in name
/// order); every path looked at is pushed to `searched`. A file reached
/// twice (the project is the home directory) is read once.
pub(super) fn existing(
    dialect: Dialect,
    places: &Places,
    searched: &mut Vec<PathBuf>,
) -> Vec<(PathBuf, Scope)> {
    let mut out: Vec<(PathBuf, Scope)> = Vec::new();
    let push = |path: PathBuf, scope: Scope, out: &mut Vec<(PathBuf, Scope)>| {
        let key = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        if !out
            .iter()
            .any(|(p, _)| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()) == key)
        {
            out.push((path, scope));
        }
    };
    for (path, scope) in table(dialect, places) {
        if path.file_name().is_some_and(|n| n == "*") {
            let dir = path.parent().unwrap_or(Path::new("."));
            searched.push(dir.to_path_buf());
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
                })
                .collect();
            files.sort();
            for f in files {
                push(f, scope, &mut out);
            }
            continue;
        }
        searched.push(path.clone());
        if path.is_file() {
            push(path, scope, &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places(platform: Platform, home: &str, config: &str) -> Places {
        Places {
            platform,
            home: PathBuf::from(home),
            config: PathBuf::from(config),
            xdg_config: PathBuf::from(home).join(".config"),
            project: PathBuf::from("/p"),
        }
    }

    fn user_path(d: Dialect, p: &Places) -> String {
        table(d, p)[0].0.display().to_string()
    }

    #[test]
    fn documented_places_per_platform() {
        let mac = places(
            Platform::MacOs,
            "/Users/me",
            "/Users/me/Library/Application Support",
        );
        assert_eq!(
            user_path(Dialect::ClaudeDesktop, &mac),
            "/Users/me/Library/Application Support/Claude/claude_desktop_config.json"
        );
        assert_eq!(
            user_path(Dialect::VsCode, &mac),
            "/Users/me/Library/Application Support/Code/User/mcp.json"
        );
        assert_eq!(
            user_path(Dialect::Zed, &mac),
            "/Users/me/.config/zed/settings.json"
        );
        assert_eq!(
            user_path(Dialect::Goose, &mac),
            "/Users/me/.config/goose/config.yaml"
        );
        let linux = places(Platform::Linux, "/home/me", "/home/me/.config");
        assert_eq!(
            user_path(Dialect::VsCode, &linux),
            "/home/me/.config/Code/User/mcp.json"
        );
        assert_eq!(
            user_path(Dialect::ClaudeCode, &linux),
            "/home/me/.claude.json"
        );
        assert_eq!(
            user_path(Dialect::Windsurf, &linux),
            "/home/me/.codeium/windsurf/mcp_config.json"
        );
        // Windows: %APPDATA% is the config directory.
        let win = places(
            Platform::Windows,
            "/C/Users/me",
            "/C/Users/me/AppData/Roaming",
        );
        assert_eq!(
            user_path(Dialect::Goose, &win),
            "/C/Users/me/AppData/Roaming/Block/goose/config/config.yaml"
        );
        assert_eq!(
            user_path(Dialect::Zed, &win),
            "/C/Users/me/AppData/Roaming/Zed/settings.json"
        );
        assert_eq!(
            user_path(Dialect::Cursor, &win),
            "/C/Users/me/.cursor/mcp.json"
        );
    }
}
