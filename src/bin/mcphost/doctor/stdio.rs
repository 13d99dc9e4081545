//! A stdio server: its cwd, command, runtime, then a real start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcphost::client::{ClientError, ServerClient};
use mcphost::config::{ServerConfig, StdioServer};
use mcphost::protocol::Era;
use mcphost::runtime::{self, Runtime};
use mcphost::transport::stdio::{StdioConfig, StdioError};

use super::Check;
use super::fixes::Fix;
use super::paths::{PathCtx, PathFrom};
use super::start::{Progress, answered, client_options, command_line, lock, start_failure};

/// The stages in order: the cwd and env, the command, its runtime, then a
/// real start when nothing above stops it.
pub(super) async fn check_stdio(
    name: &str,
    sc: &ServerConfig,
    s: &StdioServer,
    paths: &PathCtx,
    p: &Progress,
    budget: Duration,
    started: Instant,
) {
    p.stage("checking the cwd");
    let cwd_ok = check_cwd_and_env(s, p);

    p.stage("resolving the command");
    let (path, from) = paths.for_server(s);
    let mut cfg = mcphost::registry::from_config::stdio_config_with_path(s, &sc.timeouts, &path);
    // Quick to stop: doctor only looks.
    cfg.stdin_close_grace = cfg.stdin_close_grace.min(Duration::from_secs(1));
    cfg.sigterm_grace = cfg.sigterm_grace.min(Duration::from_secs(1));
    let mut resolve_cfg = cfg.clone();
    if !cwd_ok {
        resolve_cfg.cwd = None;
    }
    let resolved = match mcphost::transport::stdio::resolve_program(name, &resolve_cfg) {
        Ok(exe) => {
            p.push(Check::ok(
                "command",
                format!(
                    "{} → {} (through {}{})",
                    s.command,
                    exe.display(),
                    from.describe(paths),
                    shown_path(from, &path)
                ),
            ));
            Some(exe)
        }
        Err(e) => {
            p.push(command_not_found(s, &e, &path, from, paths));
            None
        }
    };
    if let Some(exe) = &resolved
        && !is_executable(exe)
    {
        p.push(Check::problem(
            "command",
            format!("{} is not executable", exe.display()),
            Fix::NotExecutable(exe),
        ));
    }

    p.stage("checking the runtime");
    check_runtime(s, resolved.as_deref(), &path, budget, p).await;
    if resolved.is_none() || !cwd_ok {
        p.push(Check::problem(
            "start",
            "not tried, for the problems above",
            Fix::Above,
        ));
        return;
    }
    start(name, s, &cfg, p, budget, started).await;
    if let Some(spec) = &cfg.sandbox {
        super::sandbox::check(name, spec, paths.daemon_socket.as_deref(), p).await;
    }
}

/// The cwd (whether it is usable) and the names `env` sets.
fn check_cwd_and_env(s: &StdioServer, p: &Progress) -> bool {
    let mut cwd_ok = true;
    if let Some(dir) = &s.cwd {
        if dir.is_dir() {
            p.push(Check::ok("cwd", dir.display().to_string()));
        } else {
            cwd_ok = false;
            p.push(Check::problem(
                "cwd",
                format!("{} does not exist or is not a directory", dir.display()),
                Fix::Cwd(dir),
            ));
        }
    }
    if !s.env.is_empty() {
        let names: Vec<&str> = s.env.keys().map(String::as_str).collect();
        p.push(Check::ok("env", format!("sets {}", names.join(", "))));
    }
    cwd_ok
}

/// The runtime the command needs (node, python, docker…): there, recent
/// enough, and (docker) its engine answering.
async fn check_runtime(
    s: &StdioServer,
    resolved: Option<&Path>,
    path: &str,
    budget: Duration,
    p: &Progress,
) {
    // A launcher that is its own runtime (uvx, docker) and was not found
    // has been reported already.
    let Some(d) = runtime::detect(&s.command, resolved)
        .filter(|d| resolved.is_some() || d.program != s.command)
    else {
        return;
    };
    let how = match &d.via {
        runtime::Via::Command
            if d.program == s.command || Some(Path::new(&d.program)) == resolved =>
        {
            "the command itself".to_owned()
        }
        runtime::Via::Command => format!("{} needs it", s.command),
        runtime::Via::Shebang(i) => format!("its #! line runs {i}"),
    };
    let limit = Duration::from_secs(5).min(budget);
    match runtime::version(&d.program, path, limit).await {
        Ok(v) if v.too_old(d.runtime) => p.push(Check::problem(
            "runtime",
            format!(
                "{} {} at {} is too old ({how})",
                d.runtime.name(),
                bare_version(&v.text, d.runtime),
                v.program.display()
            ),
            Fix::UpgradeRuntime(d.runtime),
        )),
        Ok(v) if d.runtime == Runtime::Docker => {
            let engine = runtime::docker_engine(&d.program, path, limit).await;
            p.push(match engine {
                Ok(server) => Check::ok(
                    "runtime",
                    format!(
                        "Docker {} at {}, engine {server} ({how})",
                        bare_version(&v.text, d.runtime),
                        v.program.display()
                    ),
                ),
                Err(e) => Check::problem(
                    "runtime",
                    format!(
                        "Docker {} is installed but its engine does not answer ({how}): {e}",
                        bare_version(&v.text, d.runtime)
                    ),
                    Fix::DockerEngine,
                ),
            });
        }
        Ok(v) => p.push(Check::ok(
            "runtime",
            format!(
                "{} {} at {} ({how})",
                d.runtime.name(),
                bare_version(&v.text, d.runtime),
                v.program.display()
            ),
        )),
        Err(e @ runtime::RuntimeError::NotFound { .. }) => p.push(Check::problem(
            "runtime",
            format!("{} is missing ({how}): {e}", d.runtime.name()),
            Fix::InstallRuntime(d.runtime),
        )),
        Err(e) => p.push(Check::problem(
            "runtime",
            format!("{} does not run ({how}): {e}", d.runtime.name()),
            Fix::InstallRuntime(d.runtime),
        )),
    }
}

/// A real start within what is left of `budget`. A handshake-era server
/// may exit on the server/discover probe; the daemon then starts it again
/// and speaks initialize: so does doctor.
async fn start(
    name: &str,
    s: &StdioServer,
    cfg: &StdioConfig,
    p: &Progress,
    budget: Duration,
    started: Instant,
) {
    let line = command_line(s);
    let mut known_era = None;
    for attempt in 0..2 {
        p.stage("starting the server");
        let conn = match mcphost::transport::stdio::spawn(name, cfg).await {
            Ok(c) => c,
            Err(e) => {
                // Refused before any process ran: its stderr has nothing.
                let fix = match &e {
                    mcphost::transport::stdio::StdioError::SandboxNotEnforced { .. } => {
                        Fix::SandboxRequired(name)
                    }
                    _ => Fix::Crashed(line),
                };
                p.push(Check::problem("start", e.to_string(), fix));
                return;
            }
        };
        let control = conn.control.clone();
        *lock(&p.control) = Some(control.clone());
        p.stage("waiting for initialize");
        let left = budget.saturating_sub(started.elapsed());
        let t0 = Instant::now();
        let opts = client_options(left, known_era);
        match ServerClient::connect(name, conn, opts).await {
            Ok(client) => {
                let init = t0.elapsed();
                answered(&client, init, p).await;
                p.stage("stopping the server");
                client.shutdown().await;
                return;
            }
            Err(ClientError::ExitedOnProbe { .. }) if attempt == 0 => {
                known_era = Some(Era::Handshake);
            }
            Err(e) => {
                p.push(start_failure(name, &e, Some(&control), Some(line), left));
                return;
            }
        }
    }
}

/// `Python 3.12.1` → `3.12.1`: the runtime's name is shown already.
fn bare_version(text: &str, rt: Runtime) -> &str {
    let lower = text.to_ascii_lowercase();
    for prefix in [rt.name().to_ascii_lowercase(), rt.program().to_owned()] {
        if lower.starts_with(&prefix) {
            let rest = text[prefix.len()..].trim_start();
            return rest.strip_prefix("version ").unwrap_or(rest);
        }
    }
    text
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A server's own PATH, which the header lines above do not show.
fn shown_path(from: PathFrom, path: &str) -> String {
    match from {
        PathFrom::ServerEnv => format!(": {path}"),
        _ => String::new(),
    }
}

/// The command was not found: where else it is, and so what to do.
fn command_not_found(
    s: &StdioServer,
    e: &StdioError,
    path: &str,
    from: PathFrom,
    paths: &PathCtx,
) -> Check {
    let detail = match e {
        StdioError::CommandNotFound { .. } => format!(
            "'{}' not found in {}{}",
            s.command,
            from.describe(paths),
            shown_path(from, path)
        ),
        other => other.to_string(),
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let found_in = |p: &str| {
        which::which_in(&s.command, Some(p), &cwd)
            .ok()
            .and_then(|f| f.parent().map(|d| d.display().to_string()))
    };
    for (which, other) in paths.others(from) {
        let Some(dir) = found_in(other) else { continue };
        let fix = match (from, which) {
            (PathFrom::ServerEnv, _) => Fix::ServerEnvPath { dir },
            (PathFrom::Own, "login") => Fix::LoginShellPathOff { dir },
            (PathFrom::Own, "shell") => Fix::NotInDaemonPath {
                command: &s.command,
                dir,
            },
            (_, "shell") => Fix::NotInLoginShell {
                command: &s.command,
                dir,
            },
            _ => continue,
        };
        return Check::problem("command", detail, fix);
    }
    let fix = match runtime::detect(&s.command, None) {
        Some(d) => Fix::InstallRuntime(d.runtime),
        None => Fix::InstallCommand(&s.command),
    };
    Check::problem("command", detail, fix)
}
