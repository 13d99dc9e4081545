//! Reading the audit log back: every file, rotated ones included, filtered,
//! oldest line first. A line that is not a record is skipped and counted.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

use super::FILE;

/// What to keep.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only lines of this server.
    pub server: Option<String>,
    /// Only lines naming this host (its `clientInfo.name`).
    pub host: Option<String>,
    /// Only lines at or after this time.
    pub since: Option<SystemTime>,
    /// Only the newest this many.
    pub limit: Option<usize>,
}

/// What a query found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    /// Oldest first.
    pub lines: Vec<Value>,
    /// Lines that were not records (a torn or edited file).
    pub skipped: usize,
}

/// `audit.jsonl.N` … `audit.jsonl.1`, `audit.jsonl`: the files that
/// exist, oldest first.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut rotated: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix(FILE)?.strip_prefix('.')?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    rotated.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    let mut all: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    all.push(dir.join(FILE));
    all
}

impl Filter {
    fn keeps(&self, v: &Value, time: SystemTime) -> bool {
        if self.since.is_some_and(|since| time < since) {
            return false;
        }
        if let Some(s) = &self.server
            && v["server"].as_str() != Some(s)
        {
            return false;
        }
        if let Some(h) = &self.host
            && v["host"]["name"].as_str() != Some(h)
        {
            return false;
        }
        true
    }
}

/// The lines of the log in `dir` that `filter` keeps. Files that do not
/// exist are no lines; one that cannot be read is an error.
pub fn query(dir: &Path, filter: &Filter) -> std::io::Result<Found> {
    let mut found = Found::default();
    let mut kept: Vec<(SystemTime, Value)> = Vec::new();
    for path in files(dir) {
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ));
            }
        };
        for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let record = serde_json::from_slice::<Value>(line).ok().and_then(|v| {
                let time = humantime::parse_rfc3339(v["time"].as_str()?).ok()?;
                Some((time, v))
            });
            match record {
                Some((time, v)) if filter.keeps(&v, time) => kept.push((time, v)),
                Some(_) => {}
                None => found.skipped = found.skipped.saturating_add(1),
            }
        }
    }
    // Two processes (the daemon, `--direct`) may rotate the same files, so
    // the order of files is not quite the order of lines; times are.
    kept.sort_by_key(|(t, _)| *t);
    let from = filter.limit.map_or(0, |n| kept.len().saturating_sub(n));
    found.lines = kept.into_iter().skip(from).map(|(_, v)| v).collect();
    Ok(found)
}

/// `--since`: a duration back from now (`1h`, `30m`) or an RFC 3339 time.
pub fn parse_since(text: &str) -> Result<SystemTime, String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Ok(t);
    }
    let ago = humantime::parse_duration(text).map_err(|_| {
        format!("since: expected a duration such as 1h or 30m, or an RFC 3339 time, found {text:?}")
    })?;
    SystemTime::now()
        .checked_sub(ago)
        .ok_or_else(|| format!("since: {text:?} is before the epoch"))
}
