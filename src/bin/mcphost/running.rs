//! Whether an app whose config `import --consolidate` rewrote is running,
//! so the user is told to quit and reopen it (it reads its MCP servers at
//! start) rather than "restart it if it is running".

use mcphost::config::import::Dialect;

/// What the app's processes are called: the executable's file name on
/// Linux (`/proc/PID/comm`, at most 15 bytes), its bundle on macOS.
fn names(app: Dialect) -> &'static [&'static str] {
    match app {
        Dialect::ClaudeDesktop => &["claude-desktop", "Claude", "Claude.app"],
        Dialect::ClaudeCode => &["claude"],
        // Continue lives inside VS Code (or a JetBrains IDE).
        Dialect::VsCode | Dialect::Continue => &["code", "Visual Studio Code.app"],
        Dialect::Cursor => &["cursor", "Cursor", "Cursor.app"],
        Dialect::Windsurf => &["windsurf", "Windsurf", "Windsurf.app"],
        Dialect::Zed => &["zed", "zed-editor", "Zed.app"],
        Dialect::Goose => &["goose", "Goose", "Goose.app"],
        Dialect::Mark3labs => &["mcphost"],
    }
}

/// `Some(true)` when a process of this user is the app, `Some(false)` when
/// none is, `None` when this platform cannot tell.
pub fn app_running(app: Dialect) -> Option<bool> {
    let names = names(app);
    let found = own_process_names()?;
    Some(found.iter().any(|p| matches(p, names)))
}

/// A process name (Linux) or executable path (macOS) is the app's.
fn matches(process: &str, names: &[&str]) -> bool {
    names.iter().any(|n| {
        process == *n || (n.ends_with(".app") && process.contains(&format!("/{n}/Contents/MacOS/")))
    })
}

/// The names of this user's processes (`/proc/PID/comm`, owned by our uid).
#[cfg(target_os = "linux")]
fn own_process_names() -> Option<Vec<String>> {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::getuid().as_raw();
    let entries = std::fs::read_dir("/proc").ok()?;
    let names = entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|comm| comm.trim_end().to_owned())
        .collect();
    Some(names)
}

/// The executables of this user's processes, from `ps` (full paths, so an
/// app bundle's name shows).
#[cfg(target_os = "macos")]
fn own_process_names() -> Option<Vec<String>> {
    let uid = nix::unistd::getuid().as_raw().to_string();
    let out = std::process::Command::new("/bin/ps")
        .args(["-x", "-U", &uid, "-o", "comm="])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .map(|l| {
                let l = l.trim();
                // `ps` gives the path; the file name too, for CLI apps.
                match l.rsplit_once('/') {
                    Some((_, file)) if !l.contains(".app/") => file.to_owned(),
                    _ => l.to_owned(),
                }
            })
            .collect(),
    )
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn own_process_names() -> Option<Vec<String>> {
    None
}

/// The line that tells the user what to do for `app` to read its new config.
pub fn restart_advice(app: Dialect) -> String {
    let name = app.display_name();
    match app_running(app) {
        Some(true) => format!("{name} is running: quit and reopen it to use mcphost"),
        _ => format!("restart {name} if it is running, so it reads its new config"),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn an_app_is_known_by_its_process_name_or_bundle() {
        let claude = &["claude-desktop", "Claude", "Claude.app"][..];
        assert!(matches("claude-desktop", claude));
        assert!(matches(
            "/Applications/Claude.app/Contents/MacOS/Claude",
            claude
        ));
        assert!(!matches("claude", claude));
        assert!(!matches(
            "/Applications/NotClaude.app/Contents/MacOS/x",
            claude
        ));
    }
}
