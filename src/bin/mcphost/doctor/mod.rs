//! `mcphost doctor`: why a configured server does not start, and what to
//! do about it. Per server: the config entry, the command and the `PATH`
//! that finds it, the runtime it needs, its cwd, then a real start with a
//! bounded time (revision, serverInfo, counts; else its stderr and exit);
//! for HTTP servers DNS, TCP, TLS and what a 401 asks for. Every problem
//! comes with its fix, from the one table in [`Fix::text`].
//!
//! The JSON shape (`--json`) is documented in docs/doctor.md.

mod config;
mod fixes;
mod hidden;
mod http;
mod paths;
mod render;
mod sandbox;
/// Terminal colours, for other commands' output too (`pins diff`).
pub(crate) use render::{Colours, colour};
mod start;
mod stdio;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures_util::StreamExt;
use mcphost::config::shell_path::PathOrigin;
use mcphost::config::{HostConfig, Issue, ServerConfig, TransportConfig};
use serde::Serialize;

use config::{Loaded, issue_check, load};
use fixes::Fix;
use http::{check_http, redact};
use paths::{PathCtx, PathFrom, daemon_path};
use render::show;
use start::{Progress, command_line, lock, ms, stderr_note};
use stdio::check_stdio;

/// What `mcphost doctor` was asked.
pub struct Options {
    pub config: Option<PathBuf>,
    pub socket: PathBuf,
    /// Only these servers (empty: every configured one).
    pub names: Vec<String>,
    /// `--direct` specs instead of the config.
    pub direct: Vec<String>,
    /// Per server, everything included.
    pub timeout: Duration,
    /// The whole run.
    pub total: Duration,
    /// Servers checked at once.
    pub jobs: usize,
    pub json: bool,
}

/// One finding. `fix` is set exactly when `ok` is false.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }
    fn problem(name: &'static str, detail: impl Into<String>, fix: Fix<'_>) -> Check {
        Check {
            name,
            ok: false,
            detail: detail.into(),
            fix: Some(fix.text()),
        }
    }
}

/// What the server said about itself once started.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub initialize_ms: u64,
    pub protocol_version: String,
    pub era: &'static str,
    pub name: Option<String>,
    pub version: Option<String>,
    pub tools: Option<usize>,
    pub prompts: Option<usize>,
    pub resources: Option<usize>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerReport {
    pub name: String,
    pub transport: &'static str,
    /// The command line or the URL (never env or header values).
    pub target: String,
    pub disabled: bool,
    pub ok: bool,
    pub timed_out: bool,
    pub elapsed_ms: u64,
    /// stdio: the `PATH` the command was looked up in, and whose it is
    /// (`"server env"`, `"login shell"`, `"daemon"`).
    pub path: Option<String>,
    pub path_from: Option<&'static str>,
    pub server: Option<Answer>,
    pub checks: Vec<Check>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Paths {
    /// This process's `PATH`.
    pub process: String,
    /// The login shell's (`None`: not asked, no server needed it).
    pub login_shell: Option<String>,
    /// `"login shell"`, or `"fallback"` when the shell did not answer.
    pub login_shell_from: Option<&'static str>,
    pub daemon_pid: Option<u32>,
    /// The running daemon's own `PATH` (Linux: from /proc), if known.
    pub daemon: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub ok: bool,
    pub config: Option<String>,
    pub config_checks: Vec<Check>,
    pub paths: Paths,
    /// Where sign-in secrets are kept, and why there.
    pub token_store: Option<String>,
    pub servers: Vec<ServerReport>,
}

pub async fn run(opts: Options) -> Result<u8> {
    let loaded = if opts.direct.is_empty() {
        load(&opts)?
    } else {
        Loaded {
            path: None,
            cfg: Some(crate::backend::direct_config(&opts.direct).await?),
            general: Vec::new(),
            errors: Vec::new(),
            warnings: Vec::new(),
            unreadable: None,
        }
    };
    let report = examine(&opts, loaded).await?;
    if opts.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        show(&report);
    }
    Ok(if report.ok { 0 } else { 1 })
}

async fn examine(opts: &Options, loaded: Loaded) -> Result<Report> {
    let mut config_checks = config_checks(&loaded);
    let path_text = loaded.path.as_ref().map(|p| p.display().to_string());
    let empty = HostConfig::default();
    let cfg = loaded.cfg.as_ref().unwrap_or(&empty);

    let (names, configured) = server_names(opts, &loaded, cfg)?;
    if loaded.cfg.is_some() && loaded.unreadable.is_none() && loaded.general.is_empty() {
        config_checks.insert(0, config_summary(path_text.as_deref(), cfg, configured));
    }
    let picked: Vec<&ServerConfig> = cfg
        .servers
        .iter()
        .filter(|s| names.contains(&s.name))
        .collect();
    let checked = |s: &ServerConfig| !s.disabled || opts.names.contains(&s.name);
    let (paths, auth_failed) = path_ctx(opts, cfg, &picked, &checked).await;

    let deadline = Instant::now().checked_add(opts.total);
    let jobs = opts.jobs.max(1);
    let mut results: Vec<(usize, ServerReport)> =
        futures_util::stream::iter(picked.iter().enumerate())
            .map(|(i, sc)| {
                let paths = &paths;
                async move {
                    let r = match checked(sc) {
                        true => check_server(sc, paths, opts.timeout, deadline).await,
                        false => disabled_report(sc),
                    };
                    (i, r)
                }
            })
            .buffer_unordered(jobs)
            .collect()
            .await;
    results.sort_by_key(|(i, _)| *i);
    let mut servers: Vec<ServerReport> = results.into_iter().map(|(_, r)| r).collect();

    // Entries that could not be used at all.
    for name in &names {
        if !servers.iter().any(|s| s.name == *name) {
            servers.push(unusable_report(name));
        }
    }
    attach_config_findings(&mut servers, &loaded, &auth_failed);
    if opts.direct.is_empty() {
        attach_pin_drift(&mut servers, &opts.socket).await;
    }
    flag_duplicates(&mut servers, &picked);
    for s in &mut servers {
        s.ok = s.checks.iter().all(|c| c.ok);
    }
    let ok = config_checks.iter().all(|c| c.ok) && servers.iter().all(|s| s.ok);
    Ok(Report {
        ok,
        config: path_text,
        config_checks,
        paths: paths_report(&paths),
        token_store: mcphost::auth::store::TokenStore::open_default()
            .ok()
            .map(|s| s.describe_backend()),
        servers,
    })
}

/// What the config as a whole has: unreadable, its general issues, and
/// warnings that belong to no one server.
fn config_checks(loaded: &Loaded) -> Vec<Check> {
    let mut checks = Vec::new();
    if let Some(why) = &loaded.unreadable {
        let fix = match &loaded.path {
            Some(p) if !p.exists() => Fix::ConfigUnreadable(p),
            _ => Fix::ConfigIssue(&Issue {
                path: loaded.path.clone().unwrap_or_default(),
                line: 1,
                field: String::new(),
                message: why.clone(),
            }),
        };
        checks.push(Check::problem("config", why.clone(), fix));
    }
    for issue in &loaded.general {
        checks.push(issue_check(issue));
    }
    for (server, w) in &loaded.warnings {
        if server.is_none() {
            checks.push(Check::ok("config", format!("warning: {w}")));
        }
    }
    checks
}

/// The servers to report on, in file order, broken ones too; and how many
/// the config names. An unknown name asked for is an error.
fn server_names(opts: &Options, loaded: &Loaded, cfg: &HostConfig) -> Result<(Vec<String>, usize)> {
    let mut names: Vec<String> = cfg.servers.iter().map(|s| s.name.clone()).collect();
    for (n, _) in &loaded.errors {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let configured = names.len();
    if !opts.names.is_empty() {
        if let Some(unknown) = opts.names.iter().find(|n| !names.contains(n))
            && loaded.cfg.is_some()
        {
            bail!(
                "no server named '{unknown}' in the config (it has: {})",
                names.join(", ")
            );
        }
        names.retain(|n| opts.names.contains(n));
    }
    Ok((names, configured))
}

/// The config's first line: where it is and how many servers it has.
fn config_summary(path: Option<&str>, cfg: &HostConfig, configured: usize) -> Check {
    let disabled = cfg.servers.iter().filter(|s| s.disabled).count();
    let hint = if configured == 0 {
        "; add one with `mcphost servers add NAME -- COMMAND ARGS…` (or `--url URL`)"
    } else {
        ""
    };
    Check::ok(
        "config",
        format!(
            "{}{} ({disabled} disabled){hint}",
            path.map(|p| format!("{p}: ")).unwrap_or_default(),
            servers_n(configured),
        ),
    )
}

/// The PATHs commands are looked up in, and the servers the running
/// daemon stopped signing in to.
async fn path_ctx(
    opts: &Options,
    cfg: &HostConfig,
    picked: &[&ServerConfig],
    checked: &impl Fn(&ServerConfig) -> bool,
) -> (PathCtx, std::collections::BTreeMap<String, String>) {
    // Asked even with loginShellPath off: a command found only there is
    // worth saying so. Not asked when no stdio server is checked.
    let needs_login = picked.iter().any(|s| {
        checked(s)
            && matches!(&s.transport, TransportConfig::Stdio(st) if !st.env.contains_key("PATH"))
    });
    let login = match needs_login {
        true => Some(
            mcphost::config::shell_path::login_shell_path()
                .await
                .clone(),
        ),
        false => None,
    };
    let (daemon_pid, daemon, auth_failed) = if opts.direct.is_empty() {
        daemon_path(&opts.socket).await
    } else {
        (None, None, Default::default())
    };
    let paths = PathCtx {
        process: std::env::var("PATH").unwrap_or_default(),
        login,
        login_shell_path: cfg.login_shell_path,
        daemon_socket: daemon_pid.map(|_| opts.socket.clone()),
        daemon_pid,
        daemon,
    };
    (paths, auth_failed)
}

/// A server whose entry could not be used at all (its config issues are
/// attached after).
fn unusable_report(name: &str) -> ServerReport {
    ServerReport {
        name: name.to_owned(),
        transport: "-",
        target: String::new(),
        disabled: false,
        ok: false,
        timed_out: false,
        elapsed_ms: 0,
        path: None,
        path_from: None,
        server: None,
        checks: Vec::new(),
    }
}

/// Each server's config errors and warnings, and the daemon's sign-in
/// failure, ahead of its own checks.
/// The running daemon's drift of each server from its pins
/// (`mcphost/servers/list`): a problem whose fix is the approve command.
async fn attach_pin_drift(servers: &mut [ServerReport], socket: &std::path::Path) {
    let Some(list) = paths::ask_daemon(socket, "mcphost/servers/list", None).await else {
        return;
    };
    for s in servers {
        let sv = list
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == s.name);
        if let Some(detail) = sv.and_then(crate::pins::drift_summary) {
            s.checks
                .push(Check::problem("pins", detail, Fix::PinsDrift(&s.name)));
        }
    }
}

fn attach_config_findings(
    servers: &mut [ServerReport],
    loaded: &Loaded,
    auth_failed: &std::collections::BTreeMap<String, String>,
) {
    for s in servers {
        let mut first = Vec::new();
        for (n, issue) in &loaded.errors {
            if *n == s.name {
                first.push(issue_check(issue));
            }
        }
        for (n, w) in &loaded.warnings {
            if n.as_deref() == Some(s.name.as_str()) {
                first.push(Check::ok("config", format!("warning: {w}")));
            }
        }
        if let Some(why) = auth_failed.get(&s.name) {
            first.push(Check::problem(
                "sign-in",
                format!("auth_failed in the daemon: {why}"),
                Fix::SignIn(&s.name),
            ));
        }
        if !first.is_empty() {
            first.append(&mut s.checks);
            s.checks = first;
        }
    }
}

/// The same server twice under two names: the later entry is flagged.
fn flag_duplicates(servers: &mut [ServerReport], picked: &[&ServerConfig]) {
    let enabled: Vec<&ServerConfig> = picked.iter().copied().filter(|s| !s.disabled).collect();
    for s in servers {
        let Some(at) = enabled.iter().position(|c| c.name == s.name) else {
            continue;
        };
        let me = enabled[at];
        if let Some(other) = enabled[..at].iter().find(|c| c.transport == me.transport) {
            s.checks.push(Check::problem(
                "duplicate",
                format!("same {} as '{}' above", what(&me.transport), other.name),
                Fix::Duplicate {
                    name: &me.name,
                    other: &other.name,
                },
            ));
        }
    }
}

fn paths_report(paths: &PathCtx) -> Paths {
    Paths {
        process: paths.process.clone(),
        login_shell: paths.login.as_ref().map(|l| l.path.clone()),
        login_shell_from: paths.login.as_ref().map(|l| match l.origin {
            PathOrigin::LoginShell => "login shell",
            PathOrigin::Fallback => "fallback",
        }),
        daemon_pid: paths.daemon_pid,
        daemon: paths.daemon.clone(),
    }
}

fn servers_n(n: usize) -> String {
    match n {
        1 => "1 server".to_owned(),
        n => format!("{n} servers"),
    }
}

fn what(t: &TransportConfig) -> &'static str {
    match t {
        TransportConfig::Stdio(_) => "command, arguments and env",
        TransportConfig::Http(_) => "URL and headers",
    }
}

fn transport_of(sc: &ServerConfig) -> (&'static str, String) {
    match &sc.transport {
        TransportConfig::Stdio(s) => ("stdio", command_line(s)),
        TransportConfig::Http(h) => ("http", redact(&h.url)),
    }
}

fn disabled_report(sc: &ServerConfig) -> ServerReport {
    let (transport, target) = transport_of(sc);
    ServerReport {
        name: sc.name.clone(),
        transport,
        target,
        disabled: true,
        ok: true,
        timed_out: false,
        elapsed_ms: 0,
        path: None,
        path_from: None,
        server: None,
        checks: vec![Check::ok(
            "disabled",
            format!(
                "disabled in the config: not checked (`mcphost servers enable {}` turns it on; `mcphost doctor {}` checks it anyway)",
                sc.name, sc.name
            ),
        )],
    }
}

async fn check_server(
    sc: &ServerConfig,
    paths: &PathCtx,
    timeout: Duration,
    deadline: Option<Instant>,
) -> ServerReport {
    let (transport, target) = transport_of(sc);
    let started = Instant::now();
    let mut report = ServerReport {
        name: sc.name.clone(),
        transport,
        target,
        disabled: sc.disabled,
        ok: false,
        timed_out: false,
        elapsed_ms: 0,
        path: None,
        path_from: None,
        server: None,
        checks: Vec::new(),
    };
    let left = deadline.map_or(timeout, |d| d.saturating_duration_since(started));
    if left.is_zero() {
        report.timed_out = true;
        report.checks.push(Check::problem(
            "timeout",
            "not checked: the overall limit ran out".to_owned(),
            Fix::NotChecked(&sc.name),
        ));
        return report;
    }
    let budget = timeout.min(left);
    if sc.disabled {
        report.checks.push(Check::ok(
            "disabled",
            "disabled in the config (checked because it was named)",
        ));
    }
    if let TransportConfig::Stdio(s) = &sc.transport {
        let (path, from) = paths.for_server(s);
        report.path = Some(path);
        report.path_from = Some(match from {
            PathFrom::ServerEnv => "server env",
            PathFrom::LoginShell => "login shell",
            PathFrom::Own => "daemon",
        });
    }
    let p = Progress {
        hygiene: sc.hygiene,
        ..Progress::default()
    };
    let work = async {
        match &sc.transport {
            TransportConfig::Stdio(s) => {
                check_stdio(&sc.name, sc, s, paths, &p, budget, started).await
            }
            TransportConfig::Http(h) => check_http(&sc.name, sc, h, &p, budget, started).await,
        }
    };
    // The checks bound their own waits too; this is the one that holds.
    let finished = tokio::time::timeout(budget, work).await.is_ok();
    let control = lock(&p.control).take();
    if !finished {
        report.timed_out = true;
        let stage = *lock(&p.stage);
        let line = match &sc.transport {
            TransportConfig::Stdio(s) => Some(command_line(s)),
            TransportConfig::Http(_) => None,
        };
        p.push(Check::problem(
            "timeout",
            format!(
                "timed out after {} while {stage}{}",
                humantime::format_duration(budget),
                stderr_note(control.as_ref())
            ),
            Fix::Hung {
                command_line: line,
                limit: budget,
            },
        ));
    }
    if let Some(c) = control {
        // Stops it if a timeout left it running; idempotent otherwise.
        let _ = tokio::time::timeout(Duration::from_secs(5), c.shutdown()).await;
    }
    report.checks.append(&mut lock(&p.checks));
    if report.checks.iter().any(|c| c.name == "timeout") {
        report.timed_out = true;
    }
    report.server = lock(&p.answer).take();
    report.elapsed_ms = ms(started.elapsed());
    report
}
