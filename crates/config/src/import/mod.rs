//! Reading the MCP server sections of other hosts' configs (`mcphost import`).
//!
//! Each dialect is read from its documented places ([`paths`]), never
//! written, and mapped into our server entry shape ([`ServerEntry`]). What cannot
//! be mapped is reported: a server that cannot be imported at all is a
//! [`Problem`] of its [`Found`], a field that is left behind is named in the
//! server's [`Imported::dropped`]. [`merge`] adds the servers to our config
//! text through the text-preserving editor.
//!
//! - `json.rs`: the `mcpServers`/`servers` family (Claude Desktop, Claude
//!   Code, VS Code, Cursor, Windsurf, Continue's JSON blocks).
//! - `zed.rs`: Zed's `context_servers`.
//! - `yaml.rs`: Goose, Continue and mark3labs/mcphost.
//! - `fields.rs`: the one reader of a server entry's fields, by each
//!   dialect's table of keys.
//! - `vars.rs`: each dialect's `${…}` references, rewritten into ours.

mod consolidate;
mod fields;
mod json;
mod merge;
pub mod paths;
mod value;
mod vars;
mod yaml;
mod zed;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use indexmap::IndexMap;
use serde::Serialize;

pub use consolidate::{
    BRIDGE_NAME, Rewritten, backup_path, backups, bridge_entry, is_bridge, rewrite, rewrite_goose,
};
pub use merge::{Action, MergeOptions, MergeReport, Merged, merge, runs};
pub use paths::{Places, Platform};

/// A host whose config we can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dialect {
    ClaudeDesktop,
    ClaudeCode,
    VsCode,
    Cursor,
    Windsurf,
    Zed,
    Goose,
    Continue,
    /// mark3labs/mcphost, the Go chat host of the same name (`~/.mcphost.yml`).
    Mark3labs,
}

impl Dialect {
    pub const ALL: [Dialect; 9] = [
        Dialect::ClaudeDesktop,
        Dialect::ClaudeCode,
        Dialect::VsCode,
        Dialect::Cursor,
        Dialect::Windsurf,
        Dialect::Zed,
        Dialect::Goose,
        Dialect::Continue,
        Dialect::Mark3labs,
    ];

    /// How people call the app.
    pub fn display_name(self) -> &'static str {
        match self {
            Dialect::ClaudeDesktop => "Claude Desktop",
            Dialect::ClaudeCode => "Claude Code",
            Dialect::VsCode => "VS Code",
            Dialect::Cursor => "Cursor",
            Dialect::Windsurf => "Windsurf",
            Dialect::Zed => "Zed",
            Dialect::Goose => "Goose",
            Dialect::Continue => "Continue",
            Dialect::Mark3labs => "mark3labs/mcphost",
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::ClaudeDesktop => "claude-desktop",
            Dialect::ClaudeCode => "claude-code",
            Dialect::VsCode => "vscode",
            Dialect::Cursor => "cursor",
            Dialect::Windsurf => "windsurf",
            Dialect::Zed => "zed",
            Dialect::Goose => "goose",
            Dialect::Continue => "continue",
            Dialect::Mark3labs => "mark3labs",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dialect {
    type Err = ImportError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| ImportError::UnknownDialect(s.to_owned()))
    }
}

/// Whether a file is the user's or the project's (relative names in it
/// resolve against the project directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    User,
    Project,
}

/// What one file (or one section of it) holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub dialect: Dialect,
    pub path: PathBuf,
    /// The part of the file, when it has several (Claude Code's
    /// `projects["/dir"]`); `None` for the whole file.
    pub section: Option<String>,
    pub servers: Vec<Imported>,
    /// Servers that could not be imported, and problems of the file itself.
    pub problems: Vec<Problem>,
    /// VS Code's `inputs`, for the servers' `${input:ID}`.
    pub inputs: Vec<Input>,
    /// The keys from the top of the file to the object that holds the
    /// servers (`["mcpServers"]`, `["mcp", "servers"]`, …), for rewriting
    /// it; empty for a file we cannot rewrite (YAML).
    pub servers_at: Vec<String>,
}

impl Found {
    fn new(dialect: Dialect, path: &Path) -> Found {
        Found {
            dialect,
            path: path.to_path_buf(),
            section: None,
            servers: Vec::new(),
            problems: Vec::new(),
            inputs: Vec::new(),
            servers_at: Vec::new(),
        }
    }

    fn problem(&mut self, server: Option<&str>, reason: impl Into<String>) {
        self.problems.push(Problem {
            server: server.map(str::to_owned),
            reason: reason.into(),
        });
    }

    /// Where it came from, for people: the path and the section.
    pub fn origin(&self) -> String {
        match &self.section {
            Some(s) => format!("{} {s}", self.path.display()),
            None => self.path.display().to_string(),
        }
    }
}

/// A server that was not imported (`server: Some`), or a problem of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub reason: String,
}

/// A VS Code input: asked once, its value put where `${input:ID}` is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Input {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Typed without echo.
    pub password: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// The transport of an imported server, as our config names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    Stdio,
    /// Streamable HTTP with the HTTP+SSE fallback (our `http`).
    Http,
    StreamableHttp,
    Sse,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
            Transport::StreamableHttp => "streamable-http",
            Transport::Sse => "sse",
        }
    }
}

/// One server mapped into our shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    /// The name it had there.
    pub name: String,
    pub transport: Transport,
    pub entry: ServerEntry,
    /// Fields left behind, each with the reason.
    pub dropped: Vec<String>,
    /// What was changed on the way (a reference rewritten, a path made absolute).
    pub notes: Vec<String>,
    /// `${input:ID}` references still in the entry, in order of appearance.
    pub inputs: Vec<String>,
}

impl Imported {
    /// Puts each `${input:ID}` value in (escaped, so a `$` in it stays
    /// literal). Returns the ids that have no value.
    pub fn fill_inputs(&mut self, value_of: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
        let mut missing = Vec::new();
        let mut filled = Vec::new();
        for id in &self.inputs {
            match value_of(id) {
                Some(v) => filled.push((format!("${{input:{id}}}"), vars::escape(&v))),
                None => missing.push(id.clone()),
            }
        }
        self.entry.replace_all(&filled);
        self.inputs.retain(|id| missing.contains(id));
        missing
    }
}

/// Our config's server entry, as written into the file. Field order is the
/// order the keys are written in.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerEntry {
    /// Only when not inferred: `sse` or `streamable-http`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub headers: IndexMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<TimeoutsEntry>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolsEntry {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutsEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request: Option<String>,
}

impl ServerEntry {
    /// The entry as JSON text, keys in order.
    pub fn to_json(&self) -> String {
        // A struct of strings, vectors and string maps always serializes.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// The entry as a value, for comparing with one already in a config.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    fn replace_all(&mut self, pairs: &[(String, String)]) {
        if pairs.is_empty() {
            return;
        }
        let fix = |s: &mut String| {
            for (from, to) in pairs {
                if s.contains(from.as_str()) {
                    *s = s.replace(from.as_str(), to);
                }
            }
        };
        for s in self.fields_mut() {
            fix(s);
        }
    }

    /// Every string a reference can be in.
    fn fields_mut(&mut self) -> impl Iterator<Item = &mut String> {
        self.command
            .iter_mut()
            .chain(self.args.iter_mut())
            .chain(self.env.values_mut())
            .chain(self.env_file.iter_mut())
            .chain(self.cwd.iter_mut())
            .chain(self.url.iter_mut())
            .chain(self.headers.values_mut())
    }
}

/// Whether an env var's name says its value is a secret: a `_`-separated
/// word such as TOKEN, KEY, SECRET, PASSWORD, PAT or AUTH (`GITHUB_TOKEN`,
/// `OPENAI_API_KEY`), or TOKEN, SECRET, PASSWORD or APIKEY anywhere in it.
pub fn looks_secret(name: &str) -> bool {
    const WORDS: [&str; 11] = [
        "TOKEN",
        "KEY",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PASS",
        "PAT",
        "AUTH",
        "CREDENTIAL",
        "CREDENTIALS",
        "APIKEY",
    ];
    const PARTS: [&str; 4] = ["TOKEN", "SECRET", "PASSWORD", "APIKEY"];
    let upper = name.to_ascii_uppercase();
    upper.split('_').any(|w| WORDS.contains(&w)) || PARTS.iter().any(|p| upper.contains(p))
}

/// The text a value in our syntax stands for, when it holds no reference
/// (`$$` is a `$`); `None` when it has one.
fn literal_of(value: &str) -> Option<String> {
    let literal = crate::interpolate::interpolate(value, &|_| None).ok()?;
    // A reference with a default resolves too; only a literal round-trips.
    (vars::escape(&literal) == value).then_some(literal)
}

/// Whether a header's name says its value is a credential
/// (`Authorization`, `X-API-Key`, `X-Auth-Token`, …).
pub fn looks_secret_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n == "authorization" || n == "proxy-authorization" || looks_secret(&n.replace('-', "_"))
}

impl Imported {
    /// Moves each literal secret into the OS keyring through `store`, and
    /// writes a `${keyring:<server>/<NAME>}` reference in its place: the
    /// value of a VS Code password input (`inputs`: its id and value)
    /// wherever [`Imported::fill_inputs`] put it, each
    /// secret-looking `env` value (see [`looks_secret`]) and credential
    /// header (see [`looks_secret_header`]). Values that hold a reference
    /// stay. On an error the entry is as it was.
    pub fn move_secrets(
        &mut self,
        inputs: &[(String, String)],
        store: &mut dyn FnMut(&str, &str) -> Result<(), String>,
    ) -> Result<(), String> {
        let before = (self.entry.clone(), self.notes.clone());
        let moved = self.move_secrets_inner(inputs, store);
        if moved.is_err() {
            (self.entry, self.notes) = before;
        }
        moved
    }

    fn move_secrets_inner(
        &mut self,
        inputs: &[(String, String)],
        store: &mut dyn FnMut(&str, &str) -> Result<(), String>,
    ) -> Result<(), String> {
        let server = self.name.clone();
        if server.contains('}') {
            if !inputs.is_empty() || self.entry.env.keys().any(|k| looks_secret(k)) {
                self.notes
                    .push("secrets left in the config (the server name has a \"}\")".to_owned());
            }
            return Ok(());
        }
        for (id, value) in inputs {
            if value.is_empty() || id.contains('}') {
                continue;
            }
            let held = vars::escape(value);
            let name = format!("{server}/{id}");
            let reference = format!("${{keyring:{name}}}");
            let mut used = false;
            for s in self.entry.fields_mut() {
                if s.contains(held.as_str()) {
                    if !used {
                        store(&name, value)?;
                        used = true;
                    }
                    *s = s.replace(held.as_str(), &reference);
                }
            }
            if used {
                self.notes.push(format!(
                    "input {id}: its value (a password) goes to the OS keyring, read back as {reference}"
                ));
            }
        }
        let mut moves = Vec::new();
        for (var, value) in &self.entry.env {
            if looks_secret(var) && !value.is_empty() {
                moves.push(("env", var.clone(), value.clone()));
            }
        }
        for (header, value) in &self.entry.headers {
            if looks_secret_header(header) && !value.is_empty() {
                moves.push(("headers", header.clone(), value.clone()));
            }
        }
        for (field, key, value) in moves {
            // A value that names a variable (or the keyring) is not a secret
            // written in the file: it stays.
            let Some(literal) = literal_of(&value) else {
                continue;
            };
            let name = format!("{server}/{key}");
            store(&name, &literal)?;
            let reference = format!("${{keyring:{name}}}");
            let map = if field == "env" {
                &mut self.entry.env
            } else {
                &mut self.entry.headers
            };
            if let Some(v) = map.get_mut(&key) {
                *v = reference.clone();
            }
            self.notes.push(format!(
                "{field}.{key}: its value goes to the OS keyring, read back as {reference}"
            ));
        }
        Ok(())
    }
}

/// Why a file could not be read at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    #[error("{}: cannot read it: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not valid {format}: {message}", path.display())]
    Syntax {
        path: PathBuf,
        format: &'static str,
        message: String,
    },
    #[error("{}: {reason}", path.display())]
    Shape { path: PathBuf, reason: String },
    #[error(
        "unknown source {0:?}; one of: claude-desktop, claude-code, vscode, cursor, windsurf, zed, goose, continue, mark3labs"
    )]
    UnknownDialect(String),
    #[error("the home directory is unknown (is HOME set?), so no config can be looked for")]
    NoHome,
}

/// Reads `path` as a `dialect` file. One file can hold several sections
/// (Claude Code's user servers and the current project's); each is a
/// [`Found`]. `scope` says whether relative names resolve against
/// `places.project`.
pub fn read(
    dialect: Dialect,
    path: &Path,
    scope: Scope,
    places: &Places,
) -> Result<Vec<Found>, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImportError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    read_text(dialect, &text, path, scope, places)
}

/// [`read`] on text already read; `path` names it.
pub fn read_text(
    dialect: Dialect,
    text: &str,
    path: &Path,
    scope: Scope,
    places: &Places,
) -> Result<Vec<Found>, ImportError> {
    let ctx = Ctx {
        dialect,
        path,
        scope,
        places,
    };
    let json = is_json_path(path)
        || !matches!(
            dialect,
            Dialect::Goose | Dialect::Continue | Dialect::Mark3labs
        );
    let root = if json {
        json::parse(&ctx, text)?
    } else {
        yaml::parse(&ctx, text)?
    };
    if root.is_null() {
        // An empty file: nothing configured.
        return Ok(vec![ctx.found()]);
    }
    let value::Value::Object(root) = root else {
        return Err(ctx.shape(format!("the top level is {}, not an object", kind(&root))));
    };
    match dialect {
        Dialect::Zed => Ok(vec![zed::read(&ctx, &root)]),
        Dialect::Goose => Ok(vec![yaml::goose(&ctx, &root)]),
        Dialect::Mark3labs => Ok(vec![yaml::mark3labs(&ctx, &root)]),
        Dialect::Continue if !json => Ok(vec![yaml::continue_(&ctx, &root)]),
        _ => json::read(&ctx, &root),
    }
}

fn is_json_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

/// One config of one dialect found on this machine, read or not.
#[derive(Debug)]
pub struct Located {
    pub dialect: Dialect,
    pub path: PathBuf,
    pub scope: Scope,
    /// Its sections, or why it could not be read.
    pub result: Result<Vec<Found>, ImportError>,
}

/// Every existing config of `dialect` in its documented places (see
/// [`paths`]), read; plus every path looked at.
pub fn locate(dialect: Dialect, places: &Places) -> (Vec<Located>, Vec<PathBuf>) {
    let mut found = Vec::new();
    let mut searched = Vec::new();
    for (path, scope) in paths::existing(dialect, places, &mut searched) {
        let result = read(dialect, &path, scope, places);
        found.push(Located {
            dialect,
            path,
            scope,
            result,
        });
    }
    (found, searched)
}

/// What every reader gets.
struct Ctx<'a> {
    dialect: Dialect,
    path: &'a Path,
    scope: Scope,
    places: &'a Places,
}

impl Ctx<'_> {
    fn shape(&self, reason: impl Into<String>) -> ImportError {
        ImportError::Shape {
            path: self.path.to_path_buf(),
            reason: reason.into(),
        }
    }

    fn found(&self) -> Found {
        Found::new(self.dialect, self.path)
    }

    /// Where relative paths in this file point: the project for a project
    /// file, else the file's directory.
    fn base_dir(&self) -> PathBuf {
        match self.scope {
            Scope::Project => self.places.project.clone(),
            Scope::User => self
                .path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| self.places.home.clone()),
        }
    }

    /// The workspace folder `${workspaceFolder}` names: only a project file has one.
    fn workspace(&self) -> Option<&Path> {
        (self.scope == Scope::Project).then_some(self.places.project.as_path())
    }
}

/// Builds one [`Imported`] while a reader walks a server's fields: strings go
/// through the dialect's reference rules, and a reason to skip the server
/// is kept.
struct Server<'a> {
    vars: vars::Rules<'a>,
    name: String,
    entry: ServerEntry,
    dropped: Vec<String>,
    notes: Vec<String>,
    inputs: Vec<String>,
    fatal: Option<String>,
}

impl<'a> Server<'a> {
    fn new(name: &str, vars: vars::Rules<'a>) -> Self {
        Server {
            vars,
            name: name.to_owned(),
            entry: ServerEntry::default(),
            dropped: Vec::new(),
            notes: Vec::new(),
            inputs: Vec::new(),
            fatal: None,
        }
    }

    fn fail(&mut self, reason: impl Into<String>) {
        if self.fatal.is_none() {
            self.fatal = Some(reason.into());
        }
    }

    fn drop_field(&mut self, field: &str, why: &str) {
        self.dropped.push(format!("{field}: {why}"));
    }

    /// `raw` rewritten into our reference syntax; `None` (and the server
    /// skipped) when it uses a reference we cannot resolve.
    fn text(&mut self, field: &str, raw: &str) -> Option<String> {
        match self.vars.rewrite(raw) {
            Ok(t) => {
                for id in t.inputs {
                    if !self.inputs.contains(&id) {
                        self.inputs.push(id);
                    }
                }
                for note in t.notes {
                    let note = format!("{field}: {note}");
                    if !self.notes.contains(&note) {
                        self.notes.push(note);
                    }
                }
                Some(t.text)
            }
            Err(reason) => {
                self.fail(format!("{field}: {reason}"));
                None
            }
        }
    }

    /// A path field: rewritten, then made absolute against `base`.
    fn path(&mut self, field: &str, raw: &str, base: &Path) -> Option<String> {
        let text = self.text(field, raw)?;
        if text.starts_with('$') || text.starts_with('~') || Path::new(&text).is_absolute() {
            return Some(text);
        }
        // The base is literal text; the rest is already in our syntax.
        let base_text = vars::escape(&base.display().to_string());
        let abs = format!(
            "{}{}{text}",
            base_text.trim_end_matches('/'),
            std::path::MAIN_SEPARATOR
        );
        self.notes.push(format!(
            "{field}: {raw:?} made absolute against {}",
            base.display()
        ));
        Some(abs)
    }

    fn string_map(
        &mut self,
        field: &str,
        value: &value::Value,
    ) -> Option<IndexMap<String, String>> {
        let value::Value::Object(map) = value else {
            self.fail(format!("{field} is not an object"));
            return None;
        };
        let mut out = IndexMap::new();
        for (k, v) in map {
            let raw = match v {
                value::Value::String(s) => s.clone(),
                value::Value::Number(n) => n.to_string(),
                value::Value::Bool(b) => b.to_string(),
                _ => {
                    self.fail(format!("{field}.{k} is not a string"));
                    return None;
                }
            };
            let text = self.text(&format!("{field}.{k}"), &raw)?;
            out.insert(k.clone(), text);
        }
        Some(out)
    }

    fn strings(&mut self, field: &str, value: &value::Value) -> Option<Vec<String>> {
        let value::Value::Array(items) = value else {
            self.fail(format!("{field} is not a list"));
            return None;
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let raw = match item {
                value::Value::String(s) => s.clone(),
                value::Value::Number(n) => n.to_string(),
                value::Value::Bool(b) => b.to_string(),
                _ => {
                    self.fail(format!("{field}[{i}] is not a string"));
                    return None;
                }
            };
            out.push(self.text(&format!("{field}[{i}]"), &raw)?);
        }
        Some(out)
    }

    /// Done: the server, or why it was not imported.
    fn finish(self, found: &mut Found) {
        if let Some(reason) = self.fatal {
            found.problem(Some(&self.name), reason);
            return;
        }
        let transport = match (&self.entry.command, self.entry.kind.as_deref()) {
            (Some(_), _) => Transport::Stdio,
            (None, Some("sse")) => Transport::Sse,
            (None, Some("streamable-http")) => Transport::StreamableHttp,
            (None, _) if self.entry.url.is_some() => Transport::Http,
            _ => {
                found.problem(Some(&self.name), "has neither a command nor a URL");
                return;
            }
        };
        found.servers.push(Imported {
            name: self.name,
            transport,
            entry: self.entry,
            dropped: self.dropped,
            notes: self.notes,
            inputs: self.inputs,
        });
    }
}

/// A JSON value's kind, for messages.
fn kind(v: &value::Value) -> &'static str {
    match v {
        value::Value::Null => "null",
        value::Value::Bool(_) => "a boolean",
        value::Value::Number(_) => "a number",
        value::Value::String(_) => "a string",
        value::Value::Array(_) => "a list",
        value::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_names() {
        for n in [
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "OPENAI_API_KEY",
            "DB_PASSWORD",
            "apiKey",
            "GH_PAT",
            "CLIENT_SECRET",
            "AUTH",
        ] {
            assert!(looks_secret(n), "{n}");
        }
        for n in [
            "PATH",
            "HOME",
            "KEYBOARD_LAYOUT",
            "REGION",
            "DEBUG",
            "PASSTHROUGH",
        ] {
            assert!(!looks_secret(n), "{n}");
        }
    }

    #[test]
    fn moving_secrets_leaves_references_and_other_values() {
        let mut entry = ServerEntry {
            command: Some("x".into()),
            ..ServerEntry::default()
        };
        for (k, v) in [
            ("API_KEY", "k3y"),
            ("REGION", "eu"),
            ("TOKEN", "${FROM_ENV}"),
        ] {
            entry.env.insert(k.into(), v.into());
        }
        let mut s = Imported {
            name: "svc".into(),
            transport: Transport::Stdio,
            entry,
            dropped: Vec::new(),
            notes: Vec::new(),
            inputs: Vec::new(),
        };
        let mut stored = Vec::new();
        s.move_secrets(&[], &mut |n, v| {
            stored.push((n.to_owned(), v.to_owned()));
            Ok(())
        })
        .unwrap();
        assert_eq!(stored, [("svc/API_KEY".to_owned(), "k3y".to_owned())]);
        assert_eq!(s.entry.env["API_KEY"], "${keyring:svc/API_KEY}");
        assert_eq!(s.entry.env["REGION"], "eu");
        assert_eq!(s.entry.env["TOKEN"], "${FROM_ENV}");
        let mut failing = |_: &str, _: &str| Err("no keyring".to_owned());
        let mut t = s.clone();
        t.entry.env.insert("API_KEY".into(), "again".into());
        assert_eq!(
            t.move_secrets(&[], &mut failing),
            Err("no keyring".to_owned())
        );
        assert_eq!(
            t.entry.env["API_KEY"], "again",
            "a failed move leaves the entry"
        );
    }
}
