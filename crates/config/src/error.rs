//! Errors of the config layer.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// One problem found in a config file, located to a line.
///
/// Displays as `/path/config.json:12: mcpServers.x.command: must be a non-empty string`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub path: PathBuf,
    /// 1-based.
    pub line: usize,
    /// Where in the document, e.g. `mcpServers.github.env.TOKEN`; empty for the
    /// document as a whole.
    pub field: String,
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: ", self.path.display(), self.line)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in one pass, so a user fixes them all at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issues(pub Vec<Issue>);

impl fmt::Display for Issues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("{}: cannot read the config file: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "{}:{line}:{column}: not valid JSON (comments and trailing commas are fine): {message}",
        origin(path.as_deref())
    )]
    Syntax {
        /// `None` when the text did not come from a file (edits, CLI entries).
        path: Option<PathBuf>,
        line: usize,
        column: usize,
        message: String,
    },
    /// The document is JSON but not a valid config; one issue per line.
    #[error("{0}")]
    Invalid(Issues),
    #[error(
        "no config directory could be determined (is HOME set?); pass --config or set MCPHOST_CONFIG"
    )]
    NoConfigDir,
    #[error("a server named \"{name}\" already exists in \"{key}\"")]
    ServerExists { name: String, key: String },
    #[error("no server named \"{name}\" in the config")]
    NoSuchServer { name: String },
    #[error("server entry: {reason}")]
    BadEntry { reason: String },
    #[error("cannot edit the config: {reason}")]
    Edit { reason: String },
    #[error("{}: cannot write the config file: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("{}: cannot lock the config for editing: {source}", path.display())]
    Locked { path: PathBuf, source: io::Error },
}

impl ConfigError {
    /// The error with `path` as the file it is about, when it named none
    /// (an edit parses text it was handed, not a file).
    pub fn with_path(self, path: &Path) -> Self {
        match self {
            ConfigError::Syntax {
                path: None,
                line,
                column,
                message,
            } => ConfigError::Syntax {
                path: Some(path.to_path_buf()),
                line,
                column,
                message,
            },
            other => other,
        }
    }

    /// The located issues of an [`ConfigError::Invalid`]; empty otherwise.
    pub fn issues(&self) -> &[Issue] {
        match self {
            ConfigError::Invalid(issues) => &issues.0,
            _ => &[],
        }
    }

    pub(crate) fn syntax(path: Option<&Path>, err: &jsonc_parser::errors::ParseError) -> Self {
        ConfigError::Syntax {
            path: path.map(Path::to_path_buf),
            line: err.line_display(),
            column: err.column_display(),
            message: err.kind().to_string(),
        }
    }
}

fn origin(path: Option<&Path>) -> String {
    match path {
        Some(path) => path.display().to_string(),
        None => "<text>".to_owned(),
    }
}

/// The config warnings a process has said. One command (or one daemon)
/// parses the same file several times: opening it, checking an edit before
/// and after, reloading it; the person is told once. Parsing only returns
/// warnings ([`super::HostConfig::warnings`]); whoever shows them to a
/// person keeps one of these (the daemon's [`super::store::ConfigStore`], a
/// CLI command) and says them through it.
#[derive(Debug, Default)]
pub struct SaidOnce(parking_lot::Mutex<std::collections::HashSet<String>>);

impl SaidOnce {
    /// Logs each of `warnings` not said before. Keyed without the line,
    /// which an edit above the entry moves.
    pub fn say(&self, warnings: &[Issue]) {
        let mut said = self.0.lock();
        for w in warnings {
            let key = format!("{}\0{}\0{}", w.path.display(), w.field, w.message);
            if said.insert(key) {
                tracing::warn!("{w}");
            }
        }
    }
}
