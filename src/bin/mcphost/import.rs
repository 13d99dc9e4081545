//! `mcphost import`: other hosts' MCP servers into our config. The reading
//! and mapping is `mcphost::config::import`; this is the command line, the
//! VS Code input prompts and the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use mcphost::config::import::{
    self, Action, Dialect, Found, Imported, Input, MergeOptions, Places, Scope,
};
use mcphost::config::store::ConfigStore;
use serde_json::{Value, json};

use crate::output::Out;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  mcphost import --list                        what each app has configured, and where
  mcphost import claude-desktop --dry-run      what would be added
  mcphost import claude-desktop --consolidate  import, then leave the app one \"mcphost\" entry
  mcphost import --restore claude-desktop      put the app's config back from the backup
  mcphost import vscode --input key=VALUE      a VS Code input given instead of asked")]
pub struct ImportArgs {
    /// Where to import from: claude-desktop, claude-code, vscode, cursor,
    /// windsurf, zed, goose, continue or mark3labs.
    #[arg(value_name = "SOURCE", conflicts_with = "from")]
    source: Option<String>,
    /// Show what was found and where (every source, or SOURCE's); changes nothing.
    #[arg(long)]
    list: bool,
    /// Read this file instead of SOURCE's usual places (needs --format).
    #[arg(long, value_name = "PATH", requires = "format")]
    from: Option<PathBuf>,
    /// The dialect of --from's file (a SOURCE name).
    #[arg(long, value_name = "DIALECT", requires = "from")]
    format: Option<String>,
    /// Only these servers (repeatable, or comma-separated).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    only: Vec<String>,
    /// Say what would be added; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Replace a server of the same name whose entry differs.
    #[arg(long, conflicts_with = "rename_prefix")]
    overwrite: bool,
    /// Add a server whose name is taken as PREFIX+NAME instead.
    #[arg(long, value_name = "PREFIX")]
    rename_prefix: Option<String>,
    /// The project whose files are read (.mcp.json, .vscode/mcp.json, …);
    /// default: the current directory.
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// A VS Code input's value, instead of asking (repeatable).
    #[arg(long = "input", value_name = "ID=VALUE")]
    inputs: Vec<String>,
    /// Keep secret-looking values (…_TOKEN and …_KEY env values,
    /// Authorization headers, VS Code password inputs) in the config file.
    /// By default they go to the OS keyring, `${keyring:SERVER/NAME}` in
    /// their place, or stay in the file with a note when it does not answer.
    #[arg(long, conflicts_with = "move_secrets")]
    plain_secrets: bool,
    /// As the default, but a keyring that does not answer stops the import
    /// with nothing written.
    #[arg(long)]
    move_secrets: bool,
    /// Then rewrite SOURCE's config so the app has one `mcphost` entry
    /// (running `mcphost bridge`) instead of the servers imported; a
    /// timestamped backup is kept beside it. Comments and other settings stay.
    #[arg(long, requires = "source", conflicts_with_all = ["from", "list"])]
    consolidate: bool,
    /// Put back SOURCE's config as it was before `--consolidate` (its latest backup).
    #[arg(long, requires = "source", conflicts_with_all = ["from", "list", "consolidate", "dry_run"])]
    restore: bool,
}

pub async fn run(
    args: ImportArgs,
    config: Option<PathBuf>,
    socket: Option<PathBuf>,
    out: &Out,
) -> Result<u8> {
    let project = match &args.project {
        Some(p) => std::path::absolute(p).with_context(|| format!("--project {}", p.display()))?,
        None => std::env::current_dir().context("the current directory")?,
    };
    let places = Places::from_env(project)?;
    let source = args
        .source
        .as_deref()
        .map(str::parse::<Dialect>)
        .transpose()?;
    if args.list {
        list(source, &places, out);
        return Ok(0);
    }
    if let (true, Some(dialect)) = (args.restore, source) {
        return restore(dialect, &places, out);
    }
    // Each file read, and whether it is the user's or the project's.
    let (found, files) = read_source(&args, source, &places)?;

    // Which servers, from which file.
    let (mut picked, skipped) = pick(&found, &args.only)?;
    let passwords = fill_inputs(&mut picked, &args.inputs)?;
    let mut secrets = Secrets {
        plain: args.plain_secrets,
        strict: args.move_secrets,
        dry_run: args.dry_run,
        passwords,
        keyring_down: None,
        error: None,
        notes: BTreeMap::new(),
    };

    // Into our config.
    let location = mcphost::config::location::resolve_config_path(config)?;
    let servers: Vec<Imported> = picked.iter().map(|(s, _)| s.clone()).collect();
    let report = merge_into_config(&args, &location, &servers, &mut secrets).await?;
    for (s, _) in picked.iter_mut() {
        if let Some(notes) = secrets.notes.get(&s.name) {
            s.notes.extend(notes.iter().cloned());
        }
    }
    let json = show_report(
        &report,
        &picked,
        &skipped,
        &location.path,
        args.dry_run,
        args.overwrite || args.rename_prefix.is_some(),
        out,
    );
    let mut code = 0;
    let mut json = json;
    if let (true, Some(dialect)) = (args.consolidate, source) {
        let c = Consolidation {
            dialect,
            found: &found,
            files: &files,
            picked: &picked,
            report: &report,
            config: &location,
            socket: socket.clone(),
            dry_run: args.dry_run,
        };
        let (done, failed) = c.run(out)?;
        if let Some(v) = json.as_mut() {
            v["consolidated"] = Value::Array(done);
        }
        if failed {
            code = 1;
        }
    }
    if let Some(v) = json {
        outln!("{v}");
    }
    Ok(code)
}

/// The source's config files (each with its scope) and what they hold.
fn read_source(
    args: &ImportArgs,
    source: Option<Dialect>,
    places: &Places,
) -> Result<(Vec<Found>, Vec<SourceFile>)> {
    let mut files: Vec<SourceFile> = Vec::new();
    let found = match (&args.from, source) {
        (Some(path), _) => {
            let format: Dialect = args.format.as_deref().unwrap_or_default().parse()?;
            let abs = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            let scope = if abs.starts_with(&places.project) {
                Scope::Project
            } else {
                Scope::User
            };
            files.push((abs.clone(), scope));
            import::read(format, &abs, scope, places)?
        }
        (None, Some(dialect)) => {
            let (located, searched) = import::locate(dialect, places);
            if located.is_empty() {
                bail!(
                    "no {dialect} config found; looked in:\n  {}",
                    paths_text(&searched)
                );
            }
            let mut all = Vec::new();
            for l in located {
                files.push((l.path.clone(), l.scope));
                all.extend(l.result?);
            }
            all
        }
        (None, None) => bail!(
            "name a SOURCE (claude-desktop, claude-code, vscode, cursor, windsurf, zed, goose, \
             continue, mark3labs), or --from PATH --format SOURCE; `mcphost import --list` shows what is there"
        ),
    };
    Ok((found, files))
}

/// A config file read, and whether it is the user's or the project's.
type SourceFile = (PathBuf, Scope);

/// A server picked, and the file it is from.
type Picked<'a> = (Imported, &'a Found);
/// A server (empty: the whole file) that cannot be imported, and why.
type Skipped<'a> = (String, &'a Found, String);

/// The servers to import (all, or those `--only` names) and those that
/// cannot be; a name `--only` gives that the source lacks is an error.
fn pick<'a>(found: &'a [Found], only: &[String]) -> Result<(Vec<Picked<'a>>, Vec<Skipped<'a>>)> {
    let mut picked: Vec<Picked<'a>> = Vec::new();
    for f in found {
        // A consolidated app's own entry: the daemon must not serve itself.
        for s in f.servers.iter().filter(|s| !import::is_bridge(&s.entry)) {
            if only.is_empty() || only.contains(&s.name) {
                picked.push((s.clone(), f));
            }
        }
    }
    let mut skipped: Vec<Skipped<'a>> = Vec::new();
    for f in found {
        for p in &f.problems {
            match &p.server {
                Some(name) if only.is_empty() || only.contains(name) => {
                    skipped.push((name.clone(), f, p.reason.clone()));
                }
                Some(_) => {}
                None => skipped.push((String::new(), f, p.reason.clone())),
            }
        }
    }
    for name in only {
        let known = picked.iter().any(|(s, _)| &s.name == name)
            || skipped.iter().any(|(n, _, _)| n == name);
        if !known {
            let names: Vec<&str> = found
                .iter()
                .flat_map(|f| f.servers.iter().map(|s| s.name.as_str()))
                .collect();
            bail!(
                "--only {name}: no such server in the source (it has: {})",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            );
        }
    }
    Ok((picked, skipped))
}

/// The servers merged into our config (a dry run only reads it), their
/// secrets moved on the way.
async fn merge_into_config(
    args: &ImportArgs,
    location: &mcphost::config::location::ConfigLocation,
    servers: &[Imported],
    secrets: &mut Secrets,
) -> Result<import::MergeReport> {
    let opts = MergeOptions {
        overwrite: args.overwrite,
        rename_prefix: args.rename_prefix.clone(),
    };
    let env = mcphost::auth::process_env;
    if args.dry_run {
        let text = match std::fs::read_to_string(&location.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("{}: cannot read it", location.path.display()));
            }
        };
        // Secrets a dry run would move are not stored: count them as there.
        let dry_env =
            |name: &str| env(name).or_else(|| name.starts_with("keyring:").then(String::new));
        // What the config says about itself, as a run that writes says it.
        if let Ok(cfg) = mcphost::config::parse_lenient(&text, &location.path, &dry_env) {
            crate::say_config_warnings(&cfg.warnings);
        }
        return Ok(import::merge(
            &text,
            &location.path,
            servers,
            &opts,
            &dry_env,
            &mut |s| secrets.prepare(s),
        )?);
    }
    // A config named by --config or MCPHOST_CONFIG that does not exist
    // yet is created, as at the default place.
    let mut open_at = location.clone();
    if !open_at.path.exists() {
        open_at.source = mcphost::config::ConfigSource::Default;
    }
    let store = ConfigStore::open(open_at, std::sync::Arc::new(env))?;
    let mut report = None;
    let edited = store
        .edit_text(|text| {
            let r = import::merge(text, &location.path, servers, &opts, &env, &mut |s| {
                secrets.prepare(s)
            })?;
            if let Some(reason) = &secrets.error {
                return Err(mcphost::config::ConfigError::Edit {
                    reason: reason.clone(),
                });
            }
            let new_text = r.text.clone();
            report = Some(r);
            Ok(new_text)
        })
        .await;
    if let Some(reason) = secrets.error.take() {
        bail!("{reason}");
    }
    edited?;
    report.context("the merge did not run")
}

/// A UTC time for backup names, `20261203T173713Z` (no `:`, which Windows
/// refuses in file names).
fn stamp() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "")
}

/// `--consolidate`: the app's config rewritten once the import is done.
struct Consolidation<'a> {
    dialect: Dialect,
    found: &'a [Found],
    files: &'a [SourceFile],
    picked: &'a [(Imported, &'a Found)],
    report: &'a import::MergeReport,
    config: &'a mcphost::config::location::ConfigLocation,
    socket: Option<PathBuf>,
    dry_run: bool,
}

/// A server that leaves the app, and the section it was in.
type Gone<'a> = (&'a Found, &'a str);
/// A server kept in the app: its section, its name and why.
type Kept<'a> = (&'a Found, String, String);

/// What consolidating one file came to.
enum Rewritten {
    Unchanged,
    /// It cannot be rewritten (why, and what to do by hand).
    Refused(String),
    Changed {
        text: String,
        removed: Vec<String>,
        bridge_added: bool,
    },
}

impl Consolidation<'_> {
    /// Rewrites each file; returns what was done (for --json) and whether
    /// some file could not be rewritten.
    fn run(&self, out: &Out) -> Result<(Vec<Value>, bool)> {
        let exe = std::env::current_exe().context("the path of this mcphost binary")?;
        let global = self.global_args();
        let bridge = import::bridge_entry(self.dialect, &exe, &global);
        let by_hand = format!(
            "{} {}",
            exe.display(),
            global
                .iter()
                .chain(std::iter::once(&"bridge".to_owned()))
                .cloned()
                .collect::<Vec<_>>()
                .join(" ")
        );
        // The one mcphost entry goes in the user's file, else the first.
        let home_file = self
            .files
            .iter()
            .find(|(_, scope)| *scope == Scope::User)
            .or(self.files.first())
            .map(|(p, _)| p.clone());
        let (gone, kept) = self.leaving();
        let mut done = Vec::new();
        let mut failed = false;
        let mut paths: Vec<&PathBuf> = Vec::new();
        for (p, _) in self.files {
            if !paths.contains(&p) {
                paths.push(p);
            }
        }
        let stamp = stamp();
        for path in paths {
            let bridge_here = home_file.as_ref() == Some(path);
            match self.rewrite(
                path,
                &gone,
                bridge_here.then_some(bridge.as_str()),
                &by_hand,
            )? {
                Rewritten::Unchanged => {}
                Rewritten::Refused(reason) => {
                    failed = true;
                    outln!("not consolidated: {reason}");
                    done.push(json!({ "path": path, "error": reason }));
                }
                Rewritten::Changed {
                    text,
                    removed,
                    bridge_added,
                } => done.push(self.write(path, &text, &removed, bridge_added, &stamp, out)?),
            }
        }
        if !out.json {
            for (f, name, reason) in &kept {
                outln!(
                    "kept in {}: {name} (not in mcphost's config: {reason})",
                    f.path.display()
                );
            }
            let written = done.iter().any(|d| d["written"] == true);
            if written {
                outln!(
                    "{} (until then it runs its old servers); \
                     `mcphost import --restore {}` puts the backup back",
                    crate::running::restart_advice(self.dialect),
                    self.dialect
                );
            }
        }
        Ok((done, failed))
    }

    /// `--config` and `--socket` for the app's bridge, when they are not
    /// the defaults: it must find this config and this daemon.
    fn global_args(&self) -> Vec<String> {
        let mut global = Vec::new();
        if self.config.source != mcphost::config::ConfigSource::Default {
            let abs =
                std::path::absolute(&self.config.path).unwrap_or_else(|_| self.config.path.clone());
            global.extend(["--config".to_owned(), abs.display().to_string()]);
        }
        // `--socket` or MCPHOST_SOCKET: the app's bridge must find this daemon.
        let socket = self.socket.clone().or_else(|| {
            std::env::var_os("MCPHOST_SOCKET")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        });
        if let Some(socket) = socket {
            let abs = std::path::absolute(&socket).unwrap_or(socket);
            global.extend(["--socket".to_owned(), abs.display().to_string()]);
        }
        global
    }

    /// The servers that leave the app (mcphost's config has them now), by
    /// section; and those kept, with why.
    fn leaving(&self) -> (Vec<Gone<'_>>, Vec<Kept<'_>>) {
        let mut gone: Vec<Gone<'_>> = Vec::new();
        let mut kept: Vec<Kept<'_>> = Vec::new();
        for ((server, f), r) in self.picked.iter().zip(&self.report.results) {
            match r.action {
                Action::Added | Action::AddedDisabled | Action::Replaced | Action::Duplicate => {
                    gone.push((f, server.name.as_str()))
                }
                Action::Conflict | Action::Invalid => {
                    kept.push((f, server.name.clone(), r.reason.clone().unwrap_or_default()))
                }
            }
        }
        (gone, kept)
    }

    /// One file's text with the servers that leave taken out of each of its
    /// sections, and the bridge entry (`bridge`, in the first section it
    /// goes to) added. `by_hand` is the command to put in a file that cannot
    /// be rewritten.
    fn rewrite(
        &self,
        path: &Path,
        gone: &[Gone<'_>],
        mut bridge: Option<&str>,
        by_hand: &str,
    ) -> Result<Rewritten> {
        let sections: Vec<&Found> = self.found.iter().filter(|f| f.path == path).collect();
        let original = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read it", path.display()))?;
        let mut text = original.clone();
        let mut removed = Vec::new();
        let mut bridge_added = false;
        for section in &sections {
            let names: Vec<String> = gone
                .iter()
                .filter(|(f, _)| std::ptr::eq(*f, *section))
                .map(|(_, n)| (*n).to_owned())
                .collect();
            if names.is_empty() && bridge.is_none() {
                continue;
            }
            let r = if self.dialect == Dialect::Goose {
                import::rewrite_goose(&text, &names, bridge)
            } else if section.servers_at.is_empty() {
                return Ok(Rewritten::Refused(format!(
                    "{}: cannot be rewritten (its YAML would lose its comments); replace its servers by hand with one that runs: {by_hand}",
                    path.display(),
                )));
            } else {
                import::rewrite(&text, &section.servers_at, &names, bridge)
            };
            let r = r.map_err(|e| e.with_path(path))?;
            bridge = None;
            text = r.text;
            removed.extend(r.removed);
            bridge_added |= r.bridge_added;
        }
        if text == original {
            return Ok(Rewritten::Unchanged);
        }
        Ok(Rewritten::Changed {
            text,
            removed,
            bridge_added,
        })
    }

    /// The new text written (not on a dry run) after a backup, and said.
    fn write(
        &self,
        path: &Path,
        text: &str,
        removed: &[String],
        bridge_added: bool,
        stamp: &str,
        out: &Out,
    ) -> Result<Value> {
        let backup = import::backup_path(path, stamp);
        if !self.dry_run {
            std::fs::copy(path, &backup).with_context(|| {
                format!(
                    "{}: cannot write the backup {}",
                    path.display(),
                    backup.display()
                )
            })?;
            mcphost::config::edit::write_atomic(path, text)?;
        }
        let would = if self.dry_run { "would be " } else { "" };
        let what = match (removed.is_empty(), bridge_added) {
            (false, true) => {
                format!("{} replaced by one \"mcphost\" entry", removed.join(", "))
            }
            (false, false) => format!("{} taken out", removed.join(", ")),
            (true, _) => "\"mcphost\" entry added".to_owned(),
        };
        if !out.json {
            outln!(
                "{would}consolidated {}: {what}; backup {}",
                path.display(),
                backup.display()
            );
        }
        Ok(json!({
            "path": path,
            "backup": backup,
            "removed": removed,
            "bridgeAdded": bridge_added,
            "written": !self.dry_run,
        }))
    }
}

/// `--restore`: each of the app's configs put back from its latest backup.
/// The file it replaces is kept as `<file>.mcphost-replaced-<stamp>`.
fn restore(dialect: Dialect, places: &Places, out: &Out) -> Result<u8> {
    let stamp = stamp();
    let mut restored = Vec::new();
    for (path, _) in import::paths::table(dialect, places) {
        let Some(backup) = import::backups(&path).pop() else {
            continue;
        };
        let text = std::fs::read_to_string(&backup)
            .with_context(|| format!("{}: cannot read it", backup.display()))?;
        if path.exists() {
            let mut name = path.file_name().unwrap_or_default().to_os_string();
            name.push(format!(".mcphost-replaced-{stamp}"));
            let aside = path.with_file_name(name);
            std::fs::copy(&path, &aside)
                .with_context(|| format!("{}: cannot keep a copy of it", path.display()))?;
        }
        mcphost::config::edit::write_atomic(&path, &text)?;
        std::fs::remove_file(&backup)
            .with_context(|| format!("{}: cannot remove it", backup.display()))?;
        if !out.json {
            outln!("restored {} from {}", path.display(), backup.display());
        }
        restored.push(json!({ "path": path, "backup": backup }));
    }
    if restored.is_empty() {
        bail!(
            "no backup of a {dialect} config to restore (`mcphost import {dialect} --consolidate` makes one)"
        );
    }
    if out.json {
        outln!("{}", json!({ "restored": restored }));
    } else {
        outln!(
            "{}; the servers imported stay in mcphost's config",
            crate::running::restart_advice(dialect)
        );
    }
    Ok(0)
}

/// Puts each VS Code `${input:ID}` value in: from `--input`, else asked once
/// on the terminal, else an error naming the input. Returns, by server, the
/// ids and values of the password inputs it was given.
fn fill_inputs(
    picked: &mut [(Imported, &Found)],
    given: &[String],
) -> Result<BTreeMap<String, Vec<(String, String)>>> {
    let mut passwords: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    for kv in given {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--input {kv:?} is not ID=VALUE"))?;
        values.insert(k.to_owned(), v.to_owned());
    }
    for (server, found) in picked.iter_mut() {
        for id in server.inputs.clone() {
            if values.contains_key(&id) {
                continue;
            }
            let input = found.inputs.iter().find(|i| i.id == id);
            if !crate::interactive::TerminalHost::available() {
                let what = input
                    .and_then(|i| i.description.as_deref())
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default();
                bail!(
                    "server {:?} in {} needs VS Code input {id:?}{what}, and there is no terminal to ask on; pass --input {id}=VALUE",
                    server.name,
                    found.path.display()
                );
            }
            let value = ask(&id, input)?;
            values.insert(id, value);
        }
        for id in &server.inputs {
            let password = found.inputs.iter().any(|i| &i.id == id && i.password);
            if let (true, Some(v)) = (password, values.get(id)) {
                passwords
                    .entry(server.name.clone())
                    .or_default()
                    .push((id.clone(), v.clone()));
            }
        }
        let missing = server.fill_inputs(&|id| values.get(id).cloned());
        if let Some(id) = missing.first() {
            bail!("server {:?}: input {id:?} has no value", server.name);
        }
    }
    Ok(passwords)
}

/// Where an imported server's secrets go (see [`Imported::move_secrets`]):
/// the OS keyring unless `--plain-secrets`. Asked for each server the merge
/// writes, so a duplicate stores nothing. The keyring is stored to before
/// the config is written; with --dry-run nothing is stored.
struct Secrets {
    plain: bool,
    /// `--move-secrets`: a keyring that does not answer is an error.
    strict: bool,
    dry_run: bool,
    /// By server: its password inputs' ids and values.
    passwords: BTreeMap<String, Vec<(String, String)>>,
    /// Why the keyring did not answer, once it has not: not asked again.
    keyring_down: Option<String>,
    /// The error that stops the import (`strict`).
    error: Option<String>,
    /// By server: what was done with its secrets, for the report.
    notes: BTreeMap<String, Vec<String>>,
}

impl Secrets {
    fn prepare(&mut self, server: &mut Imported) {
        if self.plain || self.error.is_some() {
            return;
        }
        let inputs = self
            .passwords
            .get(&server.name)
            .cloned()
            .unwrap_or_default();
        let noted = server.notes.len();
        let dry_run = self.dry_run;
        let down = self.keyring_down.clone();
        let mut store = |name: &str, value: &str| match &down {
            Some(reason) => Err(reason.clone()),
            None if dry_run => Ok(()),
            None => mcphost::auth::store::store_config_secret(name, value),
        };
        if let Err(reason) = server.move_secrets(&inputs, &mut store) {
            if self.strict {
                self.error = Some(format!(
                    "--move-secrets: cannot store the secrets of server {:?} in the OS keyring: {reason}; \
                     the config was not changed (import without --move-secrets to keep them in the file)",
                    server.name
                ));
                return;
            }
            server.notes.push(format!(
                "its secrets stay in the config file: the OS keyring did not answer ({reason}); \
                 --plain-secrets keeps them there without asking it"
            ));
            self.keyring_down = Some(reason);
        }
        let new: Vec<String> = server.notes.get(noted..).unwrap_or_default().to_vec();
        if !new.is_empty() {
            self.notes
                .entry(server.name.clone())
                .or_default()
                .extend(new);
        }
    }
}

fn ask(id: &str, input: Option<&Input>) -> Result<String> {
    let label = match input.and_then(|i| i.description.as_deref()) {
        Some(d) => format!("{d} ({id}):"),
        None => format!("VS Code input {id}:"),
    };
    let answer = if input.is_some_and(|i| i.password) {
        inquire::Password::new(&label)
            .without_confirmation()
            .prompt()
    } else {
        let mut t = inquire::Text::new(&label);
        if let Some(d) = input.and_then(|i| i.default.as_deref()) {
            t = t.with_default(d);
        }
        t.prompt()
    };
    answer.with_context(|| format!("asking for input {id:?}"))
}

fn paths_text(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join("\n  ")
}

fn server_json(s: &Imported) -> Value {
    json!({
        "name": s.name,
        "transport": s.transport.name(),
        "dropped": s.dropped,
        "notes": s.notes,
        "inputs": s.inputs,
    })
}

/// `import --json`: each server's result and what could not be imported.
fn report_json(
    report: &import::MergeReport,
    picked: &[Picked<'_>],
    skipped: &[Skipped<'_>],
    config: &Path,
    dry_run: bool,
    changed: usize,
) -> Value {
    let origin = |from: &str| picked.iter().find(|(s, _)| s.name == from);
    let servers: Vec<Value> = report
        .results
        .iter()
        .map(|r| {
            let (s, f) = match origin(&r.from) {
                Some((s, f)) => (Some(s), Some(*f)),
                None => (None, None),
            };
            json!({
                "name": r.name,
                "from": r.from,
                "source": f.map(|f| f.dialect.name()),
                "path": f.map(|f| f.path.clone()),
                "transport": s.map(|s| s.transport.name()),
                "action": r.action,
                "reason": r.reason,
                "sameAs": r.same_as,
                "dropped": s.map(|s| s.dropped.clone()).unwrap_or_default(),
                "notes": s.map(|s| s.notes.clone()).unwrap_or_default(),
            })
        })
        .collect();
    let not_imported: Vec<Value> = skipped
        .iter()
        .map(|(name, f, reason)| {
            json!({
                "server": (!name.is_empty()).then_some(name),
                "source": f.dialect.name(),
                "path": f.path,
                "reason": reason,
            })
        })
        .collect();
    json!({
        "config": config,
        "dryRun": dry_run,
        "written": !dry_run && changed > 0,
        "servers": servers,
        "notImported": not_imported,
    })
}

/// What happened to one server, as one line.
fn result_line(
    r: &import::Merged,
    transport: &str,
    file: &str,
    would: &str,
    has_option: bool,
) -> String {
    let renamed = if r.name != r.from {
        format!(" (as {})", r.name)
    } else {
        String::new()
    };
    match r.action {
        Action::Added => format!("{would}added {}{renamed} ({transport}) from {file}", r.from),
        Action::Replaced => {
            format!("{would}replaced {} ({transport}) from {file}", r.name)
        }
        Action::AddedDisabled => format!(
            "{would}added {}{renamed} ({transport}) from {file}, DISABLED: {}",
            r.from,
            r.reason.as_deref().unwrap_or("")
        ),
        Action::Duplicate => match &r.same_as {
            Some(other) if *other != r.name => format!(
                "duplicate {}: the config already runs the same server as {other:?}; skipped",
                r.from
            ),
            _ => format!(
                "duplicate {}: the config already has this entry; skipped",
                r.name
            ),
        },
        Action::Conflict => format!(
            "conflict {}: {}; skipped{}",
            r.name,
            r.reason.as_deref().unwrap_or(""),
            if has_option {
                ""
            } else {
                " (--overwrite replaces it, --rename-prefix PREFIX adds it under another name)"
            }
        ),
        Action::Invalid => format!(
            "not imported {}: mcphost would refuse it: {}",
            r.from,
            r.reason.as_deref().unwrap_or("")
        ),
    }
}

/// `--list`: every config found, its servers and what cannot be imported.
fn list(source: Option<Dialect>, places: &Places, out: &Out) {
    let dialects: Vec<Dialect> = match source {
        Some(d) => vec![d],
        None => Dialect::ALL.to_vec(),
    };
    let mut files = Vec::new();
    let mut searched = Vec::new();
    for d in dialects {
        let (located, s) = import::locate(d, places);
        files.extend(located);
        searched.extend(s);
    }
    if out.json {
        outln!("{}", list_json(&files, &searched));
        return;
    }
    if files.is_empty() {
        outln!(
            "No MCP server configs found. Looked in:\n  {}",
            paths_text(&searched)
        );
        return;
    }
    let (rows, notes) = list_rows(&files);
    crate::output::table(&rows);
    for n in notes {
        outln!("{n}");
    }
}

/// `import --list --json`: every file found, its sections and servers.
fn list_json(files: &[import::Located], searched: &[PathBuf]) -> Value {
    let found: Vec<Value> = files
        .iter()
        .flat_map(|l| match &l.result {
            Ok(sections) => sections
                .iter()
                .map(|f| {
                    json!({
                        "source": l.dialect.name(),
                        "path": l.path,
                        "scope": l.scope,
                        "section": f.section,
                        "servers": f.servers.iter().map(server_json).collect::<Vec<_>>(),
                        "problems": f.problems,
                        "inputs": f.inputs,
                    })
                })
                .collect::<Vec<_>>(),
            Err(e) => vec![json!({
                "source": l.dialect.name(),
                "path": l.path,
                "scope": l.scope,
                "error": e.to_string(),
            })],
        })
        .collect();
    json!({ "found": found, "searched": searched })
}

/// `import --list`'s table (a header row, then a row per server) and the
/// notes printed under it.
fn list_rows(files: &[import::Located]) -> (Vec<Vec<String>>, Vec<String>) {
    let mut rows = vec![vec![
        "SOURCE".to_owned(),
        "SERVER".to_owned(),
        "TRANSPORT".to_owned(),
        "FILE".to_owned(),
    ]];
    let mut notes = Vec::new();
    for l in files {
        match &l.result {
            Err(e) => notes.push(format!("{}: cannot be read: {e}", l.dialect)),
            Ok(sections) => {
                for f in sections {
                    if f.servers.is_empty() && f.problems.is_empty() {
                        rows.push(vec![
                            l.dialect.name().to_owned(),
                            "(none)".to_owned(),
                            "-".to_owned(),
                            f.origin(),
                        ]);
                    }
                    for s in &f.servers {
                        rows.push(vec![
                            l.dialect.name().to_owned(),
                            s.name.clone(),
                            s.transport.name().to_owned(),
                            f.origin(),
                        ]);
                        for d in &s.dropped {
                            notes.push(format!("{} {}: would leave out {d}", l.dialect, s.name));
                        }
                        for id in &s.inputs {
                            notes.push(format!(
                                "{} {}: asks for VS Code input {id:?} on import",
                                l.dialect, s.name
                            ));
                        }
                    }
                    for p in &f.problems {
                        match &p.server {
                            Some(name) => {
                                rows.push(vec![
                                    l.dialect.name().to_owned(),
                                    name.clone(),
                                    "-".to_owned(),
                                    f.origin(),
                                ]);
                                notes.push(format!(
                                    "{} {name}: cannot be imported: {}",
                                    l.dialect, p.reason
                                ));
                            }
                            None => {
                                notes.push(format!("{} {}: {}", l.dialect, f.origin(), p.reason))
                            }
                        }
                    }
                }
            }
        }
    }
    (rows, notes)
}

#[allow(clippy::too_many_arguments)]
fn show_report(
    report: &import::MergeReport,
    picked: &[Picked<'_>],
    skipped: &[Skipped<'_>],
    config: &std::path::Path,
    dry_run: bool,
    has_option: bool,
    out: &Out,
) -> Option<Value> {
    let origin = |from: &str| picked.iter().find(|(s, _)| s.name == from);
    let changed = report
        .results
        .iter()
        .filter(|r| {
            matches!(
                r.action,
                Action::Added | Action::AddedDisabled | Action::Replaced
            )
        })
        .count();
    if out.json {
        return Some(report_json(
            report, picked, skipped, config, dry_run, changed,
        ));
    }
    let would = if dry_run { "would be " } else { "" };
    for r in &report.results {
        let from = origin(&r.from);
        let transport = from.map(|(s, _)| s.transport.name()).unwrap_or("?");
        let file = from.map(|(_, f)| f.origin()).unwrap_or_default();
        outln!("{}", result_line(r, transport, &file, would, has_option));
        if let Some((s, _)) = from
            && matches!(
                r.action,
                Action::Added | Action::AddedDisabled | Action::Replaced
            )
        {
            for d in &s.dropped {
                outln!("  left out {d}");
            }
            for n in &s.notes {
                outln!("  note: {n}");
            }
        }
    }
    for (name, f, reason) in skipped {
        if name.is_empty() {
            outln!("problem in {}: {reason}", f.origin());
        } else {
            outln!("not imported {name} (from {}): {reason}", f.origin());
        }
    }
    if dry_run {
        outln!("dry run: {} not changed", config.display());
    } else if changed > 0 {
        outln!(
            "wrote {} ({changed} server{} added)",
            config.display(),
            if changed == 1 { "" } else { "s" }
        );
    } else {
        outln!("nothing to add: {} not changed", config.display());
    }
    None
}
