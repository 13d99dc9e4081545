//! `mcphost daemon status|stop|restart`: the running daemon, seen and
//! managed without `kill`. None of them starts a daemon except `restart`.

use std::path::Path;

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use crate::DaemonAction;
use crate::autostart::{Autostart, log_path};
use crate::output::Out;
use crate::service::{call, daemon_client, daemon_status};

pub async fn run(action: DaemonAction, auto: &Autostart, out: &Out) -> Result<u8> {
    match action {
        DaemonAction::Status => {
            let status = daemon_status(&auto.socket).await;
            report(auto, &status, out);
            Ok(0)
        }
        DaemonAction::Stop => {
            match stop(auto).await? {
                Some(pid) => say(out, json!({ "stopped": true, "pid": pid }), || {
                    format!("stopped the daemon (pid {pid})")
                }),
                None => say(out, json!({ "stopped": false }), || {
                    format!(
                        "the daemon is not running (nothing listens on {})",
                        auto.socket.display()
                    )
                }),
            }
            Ok(0)
        }
        DaemonAction::Restart => {
            let old = stop(auto).await?;
            auto.start_settled().await?;
            let status = daemon_status(&auto.socket).await;
            let pid = status["pid"].as_u64();
            say(out, json!({ "pid": pid, "previous": old }), || {
                let new = pid.map_or("?".to_owned(), |p| p.to_string());
                match old {
                    Some(old) => {
                        format!("restarted the daemon: pid {old} stopped, pid {new} started")
                    }
                    None => format!("no daemon was running; started one (pid {new})"),
                }
            });
            Ok(0)
        }
    }
}

/// `mcphost status`'s exit code when no daemon runs (as `systemctl status`).
pub const NOT_RUNNING: u8 = 3;

/// For `mcphost status`, which never starts a daemon: false, having said
/// so as `daemon status` does, when nothing listens on the socket. A daemon
/// that listens but refuses (full, stopping) is left to the command's own
/// error.
pub async fn running_or_say(auto: &Autostart, out: &Out) -> bool {
    match mcphost::ipc::connect(&auto.socket, mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES).await {
        Err(mcphost::ipc::IpcError::NotRunning { .. }) => {
            report(auto, &Value::Null, out);
            false
        }
        _ => true,
    }
}

fn say(out: &Out, value: Value, text: impl FnOnce() -> String) {
    if out.json {
        outln!("{value}");
    } else {
        outln!("{}", text());
    }
}

/// Asks the daemon to stop and waits until it is gone (its servers
/// stopped); `Ok(None)` when none answers. A service manager's daemon is
/// left to it, with the command that stops it.
async fn stop(auto: &Autostart) -> Result<Option<u64>> {
    let Some(client) = daemon_client(&auto.socket).await else {
        return Ok(None);
    };
    let status = call(&client, "mcphost/status", None).await;
    if let Some(manager) = status["service"].as_str() {
        client.shutdown().await;
        let how = match manager {
            "systemd" => "systemctl --user stop mcphost (or restart)",
            "launchd" => "launchctl bootout gui/$(id -u)/dev.mcphost.daemon",
            _ => "its service manager",
        };
        bail!(
            "{manager} runs the daemon on {} (pid {}); stop or restart it there: {how}",
            auto.socket.display(),
            status["pid"]
        );
    }
    let answer = call(&client, "mcphost/daemon/shutdown", None).await;
    client.shutdown().await;
    if answer["stopping"] != Value::Bool(true) {
        bail!(
            "the daemon on {} (pid {}) did not agree to stop: {answer}",
            auto.socket.display(),
            status["pid"]
        );
    }
    auto.wait_gone().await?;
    Ok(status["pid"].as_u64())
}

fn report(auto: &Autostart, status: &Value, out: &Out) {
    let config = mcphost::config::location::resolve_config_path(auto.config.clone())
        .ok()
        .map(|l| std::path::absolute(&l.path).unwrap_or(l.path));
    let log = log_path(&auto.socket);
    if status.is_null() {
        if out.json {
            outln!(
                "{}",
                json!({ "running": false, "socket": auto.socket, "config": config, "log": log })
            );
        } else {
            outln!("daemon:   not running");
            outln!(
                "socket:   {} (where it would listen)",
                auto.socket.display()
            );
            if let Some(c) = &config {
                outln!("config:   {}", c.display());
            }
            outln!("log:      {}", log.display());
            outln!("start it: `mcphost daemon`, or any command that needs it (`mcphost servers`)");
        }
        return;
    }
    let theirs = status["configPath"].as_str().map(Path::new);
    if out.json {
        outln!(
            "{}",
            json!({
                "running": true,
                "pid": status["pid"],
                "version": status["version"],
                "socket": status["socket"],
                "config": status["configPath"],
                "configError": status["configError"],
                "startedBy": status["startedBy"],
                "service": status["service"],
                "uptimeSeconds": status["uptimeSeconds"],
                "clients": status["clients"],
                "log": if status["service"].is_null() { Some(&log) } else { None },
            })
        );
        return;
    }
    outln!(
        "daemon:   running, pid {}, mcphost {}, up {}s",
        status["pid"],
        status["version"].as_str().unwrap_or("?"),
        status["uptimeSeconds"]
    );
    outln!("socket:   {}", auto.socket.display());
    match theirs {
        Some(t) => outln!("config:   {}", t.display()),
        None => outln!("config:   (none)"),
    }
    if let Some(e) = status["configError"].as_str() {
        outln!("errors:   {e}");
    }
    outln!(
        "started:  by {}",
        status["startedBy"]
            .as_str()
            .unwrap_or("an older mcphost (unknown)")
    );
    if status["service"].is_null() {
        outln!("log:      {}", log.display());
    }
}

/// Who started a daemon run by hand: its parent process.
pub fn parent() -> String {
    let ppid = nix::unistd::getppid();
    #[cfg(target_os = "linux")]
    let name = std::fs::read_to_string(format!("/proc/{ppid}/comm"))
        .map(|n| n.trim().to_owned())
        .unwrap_or_default();
    #[cfg(not(target_os = "linux"))]
    let name = String::new();
    if name.is_empty() {
        format!("hand (parent pid {ppid})")
    } else {
        format!("hand, from {name} (pid {ppid})")
    }
}

/// `mcphost daemon` when one already listens: which one, and what to do.
pub async fn already_running(e: mcphost::ipc::IpcError, socket: &Path) -> anyhow::Error {
    let status = daemon_status(socket).await;
    match status["pid"].as_u64() {
        Some(pid) => anyhow!(
            "{e} (pid {pid}, started by {}); `mcphost daemon status` shows it, \
             `mcphost daemon stop` or `restart` manage it",
            status["startedBy"].as_str().unwrap_or("unknown")
        ),
        None => anyhow!(e),
    }
}
