//! `mcphost service install|uninstall|status`: the daemon run by the OS, for
//! people who want it managed there rather than started by the first command
//! that needs it. A systemd user unit on Linux
//! (`~/.config/systemd/user/mcphost.service`), a launchd agent on macOS
//! (`~/Library/LaunchAgents/dev.mcphost.daemon.plist`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use crate::autostart::Autostart;
use crate::output::Out;

#[derive(Subcommand)]
pub enum Action {
    /// Write the unit (or agent) that runs `mcphost daemon`, and say how to
    /// enable it.
    #[command(after_help = "Examples:
  mcphost service install         write it, and say how to enable it
  mcphost service install --now   also enable and start it")]
    Install {
        /// Also enable and start it now (systemctl --user / launchctl).
        #[arg(long)]
        now: bool,
    },
    /// Remove the unit (or agent).
    #[command(after_help = "Example:
  mcphost service uninstall --now")]
    Uninstall {
        /// Also stop and disable it first.
        #[arg(long)]
        now: bool,
    },
    /// Whether the unit exists, runs this executable, and the daemon is up.
    #[command(after_help = "Example:
  mcphost service status")]
    Status,
}

/// Set by the unit to the service manager's name: the daemon reports it, and
/// the CLI leaves restarting it to the manager.
pub const SERVICE_ENV: &str = "MCPHOST_SERVICE";

/// systemd's unit name; launchd's label.
#[cfg_attr(target_os = "macos", allow(dead_code))]
const UNIT_NAME: &str = "mcphost.service";
const LAUNCHD_LABEL: &str = "dev.mcphost.daemon";

pub async fn run(action: Action, auto: &Autostart, out: &Out) -> Result<u8> {
    let exe = std::env::current_exe().context("finding the mcphost executable")?;
    let file = unit_path()?;
    match action {
        Action::Install { now } => install(&exe, &file, now, auto, out).await,
        Action::Uninstall { now } => uninstall(&file, now, out),
        Action::Status => status(&exe, &file, auto, out).await,
    }
}

/// `service install`: the unit written, and with `--now` enabled.
async fn install(exe: &Path, file: &Path, now: bool, auto: &Autostart, out: &Out) -> Result<u8> {
    let args = daemon_args(auto);
    let text = unit_for_platform(exe, &args, auto);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(file, &text).with_context(|| format!("writing {}", file.display()))?;
    let enable = enable_commands();
    let mut report = json!({ "path": file, "enable": join(&enable) });
    if !out.json {
        outln!("wrote {}:", file.display());
        for line in text.lines() {
            outln!("    {line}");
        }
    }
    if now {
        enable_now(file, &enable, &mut report, auto, out).await?;
    } else if !out.json {
        outln!("enable and start it with:\n    {}", join(&enable));
    }
    if out.json {
        outln!("{report}");
    }
    Ok(0)
}

/// `install --now`: the unit enabled and started, once everything that
/// can be checked is, in place of a daemon a command had started.
async fn enable_now(
    file: &Path,
    enable: &[Vec<String>],
    report: &mut Value,
    auto: &Autostart,
    out: &Out,
) -> Result<()> {
    // Everything that can be checked is, before anything is stopped.
    let checked = find_tools(&[probe_command()])
        .and_then(|()| find_tools(enable))
        .and_then(|()| manager_answers());
    if let Err(e) = checked {
        let kept = match daemon_pid(auto).await {
            Some(pid) => format!("the daemon (pid {pid}) keeps running"),
            None => "no daemon was running".to_owned(),
        };
        bail!(
            "wrote {}, but did not enable it: {e:#}; nothing was stopped: {kept}",
            file.display()
        );
    }
    // The unit's daemon would find the socket taken.
    let stopped = stop_unmanaged(auto).await?;
    if let Some(pid) = stopped {
        report["stopped"] = json!(pid);
        if !out.json {
            outln!(
                "stopped the daemon (pid {pid}) a command had started, so that the \
                 service's can listen"
            );
        }
    }
    if let Err(e) = run_all(enable) {
        // Never leave less running than before.
        let again = match stopped {
            None => String::new(),
            Some(_) => match auto.start_settled().await {
                Ok(()) => match daemon_pid(auto).await {
                    Some(pid) => format!("; started the daemon again (pid {pid})"),
                    None => "; started the daemon again".to_owned(),
                },
                Err(e) => format!(
                    "; starting the daemon again failed too ({e:#}): run `mcphost \
                     daemon`, or any command, to start it"
                ),
            },
        };
        bail!(
            "wrote {}, but did not enable it: {e:#}{again}",
            file.display()
        );
    }
    report["enabled"] = json!(true);
    if !out.json {
        outln!("enabled and started: {}", join(enable));
    }
    Ok(())
}

/// `service uninstall`: the unit removed, and with `--now` disabled first.
fn uninstall(file: &Path, now: bool, out: &Out) -> Result<u8> {
    let disable = disable_commands();
    if now && file.exists() {
        run_all(&disable).with_context(|| {
            format!(
                "did not remove {} (it may still be enabled)",
                file.display()
            )
        })?;
    }
    let removed = match std::fs::remove_file(file) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e).with_context(|| format!("removing {}", file.display())),
    };
    if now && removed {
        run_all(&after_remove_commands())?;
    }
    if out.json {
        outln!("{}", json!({ "path": file, "removed": removed }));
    } else if removed {
        outln!("removed {}", file.display());
        if !now {
            outln!(
                "if it was enabled, stop and disable it with:\n    {}",
                join(&disable)
            );
        }
    } else {
        outln!("no unit at {}; nothing to remove", file.display());
    }
    Ok(0)
}

/// `service status`: the unit, the program it runs, and the daemon.
async fn status(exe: &Path, file: &Path, auto: &Autostart, out: &Out) -> Result<u8> {
    let text = std::fs::read_to_string(file).ok();
    let points_at = text.as_deref().and_then(unit_exe);
    let this_exe = points_at.as_deref().map(|p| same_file(p, exe));
    let daemon = daemon_status(&auto.socket).await;
    if out.json {
        outln!(
            "{}",
            json!({
                "path": file,
                "exists": text.is_some(),
                "exe": points_at,
                "thisExe": this_exe,
                "daemon": daemon,
            })
        );
        return Ok(0);
    }
    match (&text, &points_at, this_exe) {
        (None, _, _) => outln!(
            "unit:    none at {} (`mcphost service install` writes it)",
            file.display()
        ),
        (Some(_), Some(p), Some(true)) => {
            outln!(
                "unit:    {} (runs {}, this executable)",
                file.display(),
                p.display()
            )
        }
        (Some(_), Some(p), _) => outln!(
            "unit:    {} runs {}, not this executable ({}); `mcphost service install` rewrites it",
            file.display(),
            p.display(),
            exe.display()
        ),
        (Some(_), None, _) => outln!(
            "unit:    {} (no program found in it; `mcphost service install` rewrites it)",
            file.display()
        ),
    }
    match &daemon {
        Value::Null => outln!("daemon:  not running on {}", auto.socket.display()),
        d => outln!(
            "daemon:  up on {} (pid {}, mcphost {}, {} client(s))",
            auto.socket.display(),
            d["pid"],
            d["version"].as_str().unwrap_or("?"),
            d["clients"]
                .as_u64()
                .map(|n| n.saturating_sub(1))
                .unwrap_or(0)
        ),
    }
    Ok(0)
}

/// The running daemon's pid, if one answers.
async fn daemon_pid(auto: &Autostart) -> Option<u64> {
    daemon_status(&auto.socket).await["pid"].as_u64()
}

/// A daemon started by a command (not by a service manager) holds the
/// socket: ask it to stop when nobody else uses it, else say what to do.
/// Returns the pid of the daemon it stopped.
async fn stop_unmanaged(auto: &Autostart) -> Result<Option<u64>> {
    let Some(client) = daemon_client(&auto.socket).await else {
        return Ok(None);
    };
    let status = call(&client, "mcphost/status", None).await;
    if status["service"].is_string() {
        client.shutdown().await;
        return Ok(None);
    }
    let answer = call(
        &client,
        "mcphost/daemon/shutdown",
        Some(json!({ "ifAlone": true })),
    )
    .await;
    client.shutdown().await;
    if answer["stopping"] != Value::Bool(true) {
        bail!(
            "a daemon started by a command (pid {}) is running on {} with {} other client(s); \
             the service's daemon could not listen there: stop it when they are done \
             (kill {}), then run `mcphost service install --now` again",
            status["pid"],
            auto.socket.display(),
            answer["clients"].as_u64().unwrap_or(2).saturating_sub(1),
            status["pid"]
        );
    }
    auto.wait_gone().await?;
    Ok(status["pid"].as_u64())
}

pub(crate) async fn daemon_client(socket: &Path) -> Option<mcphost::client::ServerClient> {
    let conn = mcphost::ipc::connect(socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES)
        .await
        .ok()?;
    let opts = mcphost::client::ClientOptions {
        known_era: Some(mcphost::protocol::Era::Handshake),
        ..Default::default()
    };
    mcphost::client::ServerClient::connect("daemon", conn, opts)
        .await
        .ok()
}

/// A request's result, `null` if it failed.
pub(crate) async fn call(
    client: &mcphost::client::ServerClient,
    method: &'static str,
    params: Option<Value>,
) -> Value {
    let params = params.and_then(|p| mcphost::protocol::to_raw(&p).ok());
    client
        .request_raw(
            method,
            params,
            mcphost::client::CallOptions {
                timeout: Some(Duration::from_secs(5)),
                ..Default::default()
            },
        )
        .await
        .ok()
        .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
        .unwrap_or(Value::Null)
}

/// The daemon's status when one answers (never starts one).
pub(crate) async fn daemon_status(socket: &Path) -> Value {
    let Some(client) = daemon_client(socket).await else {
        return Value::Null;
    };
    let status = call(&client, "mcphost/status", None).await;
    client.shutdown().await;
    status
}

/// `daemon` plus the socket and config this process uses, when they are
/// not the defaults the service would find by itself.
fn daemon_args(auto: &Autostart) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let default = mcphost::ipc::default_socket_path();
    if auto.socket != std::path::absolute(&default).unwrap_or(default) {
        args.push("--socket".into());
        args.push(auto.socket.clone().into_os_string());
    }
    if let Ok(loc) = mcphost::config::location::resolve_config_path(auto.config.clone())
        && loc.source != mcphost::config::location::ConfigSource::Default
    {
        let path = std::path::absolute(&loc.path).unwrap_or(loc.path);
        args.push("--config".into());
        args.push(path.into_os_string());
    }
    args.push("daemon".into());
    args
}

/// Whether `a` and `b` name the same file (or the same missing path).
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn join(cmds: &[Vec<String>]) -> String {
    cmds.iter()
        .map(|c| c.join(" "))
        .collect::<Vec<_>>()
        .join(" && ")
}

/// Every command's program is on PATH, or an error naming the missing one.
fn find_tools(cmds: &[Vec<String>]) -> Result<()> {
    for program in cmds.iter().filter_map(|c| c.first()) {
        if which::which(program).is_err() {
            bail!(
                "`{program}` was not found on PATH; run `{}` yourself where it exists",
                join(cmds)
            );
        }
    }
    Ok(())
}

/// The user's service manager answers this session: without it (no user
/// bus, say) enabling the unit would fail after the daemon was stopped.
fn manager_answers() -> Result<()> {
    let probe = probe_command();
    let Some((program, args)) = probe.split_first() else {
        return Ok(());
    };
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running `{}`", probe.join(" ")))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let why = said
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    bail!(
        "no user service manager answers (`{}`: {}); run it in a login session that has one, \
         or leave the daemon to mcphost, which starts it when a command needs it",
        probe.join(" "),
        if why.is_empty() {
            out.status.to_string()
        } else {
            why.to_owned()
        }
    )
}

/// The command that shows the user's service manager answers.
#[cfg(target_os = "macos")]
fn probe_command() -> Vec<String> {
    vec!["launchctl".into(), "print".into(), gui_domain()]
}

#[cfg(not(target_os = "macos"))]
fn probe_command() -> Vec<String> {
    vec![
        "systemctl".into(),
        "--user".into(),
        "show-environment".into(),
    ]
}

/// Runs each command in turn; a missing tool is named.
fn run_all(cmds: &[Vec<String>]) -> Result<()> {
    for cmd in cmds {
        let Some((program, args)) = cmd.split_first() else {
            continue;
        };
        let status = std::process::Command::new(program)
            .args(args)
            .status()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => anyhow::anyhow!(
                    "`{program}` was not found on PATH; run `{}` yourself where it exists",
                    join(cmds)
                ),
                _ => anyhow::anyhow!("running `{}`: {e}", cmd.join(" ")),
            })?;
        if !status.success() {
            bail!("`{}` failed ({status})", cmd.join(" "));
        }
    }
    Ok(())
}

// ---- systemd (Linux) ----

/// The user unit: `ExecStart=<exe> daemon`, restarted when it fails.
#[cfg_attr(target_os = "macos", allow(dead_code))]
pub fn systemd_unit(exe: &Path, args: &[OsString]) -> String {
    let mut exec = systemd_quote(&exe.to_string_lossy());
    for a in args {
        exec.push(' ');
        exec.push_str(&systemd_quote(&a.to_string_lossy()));
    }
    format!(
        "# Written by `mcphost service install`; `mcphost service uninstall` removes it.\n\
         [Unit]\n\
         Description=mcphost daemon (the host side of the Model Context Protocol)\n\
         \n\
         [Service]\n\
         Type=simple\n\
         Environment={SERVICE_ENV}=systemd\n\
         ExecStart={exec}\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n"
    )
}

/// One word of `ExecStart=`: double-quoted unless plain; `%` and `$` doubled
/// (systemd's specifiers and variables).
fn systemd_quote(word: &str) -> String {
    let escaped = word.replace('%', "%%").replace('$', "$$");
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._+-=:,@%$".contains(c));
    if plain {
        escaped
    } else {
        format!("\"{}\"", escaped.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The program of a unit's `ExecStart=` (its first word, unquoted).
#[cfg_attr(target_os = "macos", allow(dead_code))]
fn systemd_exe(text: &str) -> Option<PathBuf> {
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("ExecStart="))?;
    // `-`, `@`, `+`, `!` prefixes change how systemd runs it, not what.
    let line = line.trim_start_matches(['-', '@', '+', '!', ':']);
    let word = if let Some(rest) = line.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => out.extend(chars.next()),
                '"' => break,
                c => out.push(c),
            }
        }
        out
    } else {
        line.split_whitespace().next()?.to_owned()
    };
    Some(PathBuf::from(word.replace("%%", "%").replace("$$", "$")))
}

// ---- launchd (macOS) ----

/// The launch agent: kept alive (started again unless it exited cleanly),
/// its output in `log`.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
pub fn launchd_plist(exe: &Path, args: &[OsString], log: &Path) -> String {
    let mut program = format!("        <string>{}</string>\n", xml(&exe.to_string_lossy()));
    for a in args {
        program.push_str(&format!(
            "        <string>{}</string>\n",
            xml(&a.to_string_lossy())
        ));
    }
    let log = xml(&log.to_string_lossy());
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `mcphost service install`; `mcphost service uninstall` removes it. -->
<plist version="1.0">
<dict>
    <key>Label</key>
    <string>{LAUNCHD_LABEL}</string>
    <key>ProgramArguments</key>
    <array>
{program}    </array>
    <key>RunAtLoad</key>
    <true/>
    <key>KeepAlive</key>
    <dict>
        <key>SuccessfulExit</key>
        <false/>
    </dict>
    <key>ProcessType</key>
    <string>Background</string>
    <key>EnvironmentVariables</key>
    <dict>
        <key>{SERVICE_ENV}</key>
        <string>launchd</string>
    </dict>
    <key>StandardOutPath</key>
    <string>{log}</string>
    <key>StandardErrorPath</key>
    <string>{log}</string>
</dict>
</plist>
"#
    )
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The first `<string>` of `ProgramArguments`.
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn launchd_exe(text: &str) -> Option<PathBuf> {
    let after = &text[text.find("<key>ProgramArguments</key>")?..];
    let start = after.find("<string>")? + "<string>".len();
    let end = start + after[start..].find("</string>")?;
    let s = after[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    Some(PathBuf::from(s))
}

// ---- per platform ----

#[cfg(target_os = "macos")]
fn unit_path() -> Result<PathBuf> {
    let dirs = directories::BaseDirs::new().context("no home directory for LaunchAgents")?;
    Ok(dirs
        .home_dir()
        .join("Library/LaunchAgents")
        .join(format!("{LAUNCHD_LABEL}.plist")))
}

#[cfg(not(target_os = "macos"))]
fn unit_path() -> Result<PathBuf> {
    // $XDG_CONFIG_HOME/systemd/user, else ~/.config/systemd/user.
    let dirs = directories::BaseDirs::new().context("no home directory for systemd user units")?;
    Ok(dirs.config_dir().join("systemd/user").join(UNIT_NAME))
}

#[cfg(target_os = "macos")]
fn unit_for_platform(exe: &Path, args: &[OsString], auto: &Autostart) -> String {
    launchd_plist(exe, args, &crate::autostart::log_path(&auto.socket))
}

#[cfg(not(target_os = "macos"))]
fn unit_for_platform(exe: &Path, args: &[OsString], _auto: &Autostart) -> String {
    systemd_unit(exe, args)
}

#[cfg(target_os = "macos")]
fn unit_exe(text: &str) -> Option<PathBuf> {
    launchd_exe(text)
}

#[cfg(not(target_os = "macos"))]
fn unit_exe(text: &str) -> Option<PathBuf> {
    systemd_exe(text)
}

#[cfg(target_os = "macos")]
fn gui_domain() -> String {
    format!("gui/{}", nix::unistd::geteuid())
}

#[cfg(target_os = "macos")]
fn enable_commands() -> Vec<Vec<String>> {
    let plist = unit_path()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    vec![vec![
        "launchctl".into(),
        "bootstrap".into(),
        gui_domain(),
        plist,
    ]]
}

#[cfg(not(target_os = "macos"))]
fn enable_commands() -> Vec<Vec<String>> {
    vec![
        vec!["systemctl".into(), "--user".into(), "daemon-reload".into()],
        vec![
            "systemctl".into(),
            "--user".into(),
            "enable".into(),
            "--now".into(),
            "mcphost".into(),
        ],
    ]
}

#[cfg(target_os = "macos")]
fn disable_commands() -> Vec<Vec<String>> {
    vec![vec![
        "launchctl".into(),
        "bootout".into(),
        format!("{}/{LAUNCHD_LABEL}", gui_domain()),
    ]]
}

#[cfg(not(target_os = "macos"))]
fn disable_commands() -> Vec<Vec<String>> {
    vec![vec![
        "systemctl".into(),
        "--user".into(),
        "disable".into(),
        "--now".into(),
        "mcphost".into(),
    ]]
}

#[cfg(target_os = "macos")]
fn after_remove_commands() -> Vec<Vec<String>> {
    Vec::new()
}

#[cfg(not(target_os = "macos"))]
fn after_remove_commands() -> Vec<Vec<String>> {
    vec![vec![
        "systemctl".into(),
        "--user".into(),
        "daemon-reload".into(),
    ]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_systemd_unit_quotes_what_systemd_would_read_otherwise() {
        let unit = systemd_unit(
            Path::new("/opt/my tools/mcphost"),
            &[
                "--config".into(),
                "/home/a/100%/c$x.json".into(),
                "daemon".into(),
            ],
        );
        assert!(
            unit.contains(
                "ExecStart=\"/opt/my tools/mcphost\" --config /home/a/100%%/c$$x.json daemon\n"
            ),
            "{unit}"
        );
        assert_eq!(
            systemd_exe(&unit).as_deref(),
            Some(Path::new("/opt/my tools/mcphost"))
        );
        assert!(unit.contains("Restart=on-failure\n"), "{unit}");
        assert!(unit.contains("WantedBy=default.target\n"), "{unit}");
    }

    #[test]
    fn the_launchd_plist_is_golden_and_its_program_reads_back() {
        let plist = launchd_plist(
            Path::new("/Users/a/bin/mcp&host"),
            &["daemon".into()],
            Path::new("/Users/a/Library/Application Support/mcphost/daemon.log"),
        );
        let want = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `mcphost service install`; `mcphost service uninstall` removes it. -->
<plist version="1.0">
<dict>
    <key>Label</key>
    <string>dev.mcphost.daemon</string>
    <key>ProgramArguments</key>
    <array>
        <string>/Users/a/bin/mcp&amp;host</string>
        <string>daemon</string>
    </array>
    <key>RunAtLoad</key>
    <true/>
    <key>KeepAlive</key>
    <dict>
        <key>SuccessfulExit</key>
        <false/>
    </dict>
    <key>ProcessType</key>
    <string>Background</string>
    <key>EnvironmentVariables</key>
    <dict>
        <key>MCPHOST_SERVICE</key>
        <string>launchd</string>
    </dict>
    <key>StandardOutPath</key>
    <string>/Users/a/Library/Application Support/mcphost/daemon.log</string>
    <key>StandardErrorPath</key>
    <string>/Users/a/Library/Application Support/mcphost/daemon.log</string>
</dict>
</plist>
"#;
        assert_eq!(plist, want);
        assert_eq!(
            launchd_exe(&plist).as_deref(),
            Some(Path::new("/Users/a/bin/mcp&host"))
        );
    }
}
