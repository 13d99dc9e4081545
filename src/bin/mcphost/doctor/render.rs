//! The report on a terminal.

use super::{Report, ServerReport, servers_n};

/// ANSI colours on a terminal; plain text when off (a pipe, `NO_COLOR`,
/// `TERM=dumb`).
pub(crate) struct Colours(pub(crate) bool);

impl Colours {
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
    pub(crate) fn cyan(&self, s: &str) -> String {
        self.wrap("36", s)
    }
    pub(crate) fn green(&self, s: &str) -> String {
        self.wrap("32", s)
    }
    pub(crate) fn red(&self, s: &str) -> String {
        self.wrap("1;31", s)
    }
    pub(crate) fn yellow(&self, s: &str) -> String {
        self.wrap("33", s)
    }
    fn dim(&self, s: &str) -> String {
        self.wrap("2", s)
    }
    pub(crate) fn bold(&self, s: &str) -> String {
        self.wrap("1", s)
    }
    /// ✓ or ✗.
    fn mark(&self, ok: bool) -> String {
        if ok {
            self.green("✓")
        } else {
            self.red("✗")
        }
    }
}

pub(crate) fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

pub(super) fn show(r: &Report) {
    for line in render(r, &Colours(colour())) {
        outln!("{line}");
    }
}

/// The report's lines, as `show` prints them.
fn render(r: &Report, c: &Colours) -> Vec<String> {
    let mut out = Vec::new();
    for ch in &r.config_checks {
        out.push(format!("{} {:<8} {}", c.mark(ch.ok), ch.name, ch.detail));
        if let Some(f) = &ch.fix {
            out.push(format!("  {} {f}", c.yellow("fix:")));
        }
    }
    render_paths(r, c, &mut out);
    for s in &r.servers {
        out.push(String::new());
        render_server(s, c, &mut out);
    }
    let bad = r.servers.iter().filter(|s| !s.ok).count();
    out.push(String::new());
    if r.ok {
        out.push(c.green(&format!("all ok: {}", servers_n(r.servers.len()))));
    } else {
        let config_bad = r.config_checks.iter().any(|c| !c.ok);
        out.push(c.red(&format!(
            "{bad} of {} with problems{}",
            servers_n(r.servers.len()),
            if config_bad { ", and the config" } else { "" }
        )));
    }
    out
}

/// The PATHs commands are looked up in, and where sign-in secrets are kept.
fn render_paths(r: &Report, c: &Colours, out: &mut Vec<String>) {
    let p = &r.paths;
    if let Some(l) = &p.login_shell {
        let from = match p.login_shell_from {
            Some("fallback") => " (the shell did not answer: this process's)",
            _ => "",
        };
        out.push(format!("  PATH, login shell{from}: {}", c.dim(l)));
    }
    if p.login_shell.as_deref() == Some(p.process.as_str()) {
        out.push(format!("  PATH, this shell:  {}", c.dim("the same")));
    } else {
        out.push(format!("  PATH, this shell:  {}", c.dim(&p.process)));
    }
    out.push(match (p.daemon_pid, &p.daemon) {
        (Some(pid), Some(d)) if p.login_shell.as_deref() == Some(d.as_str()) => format!(
            "  PATH, daemon (pid {pid}): {}",
            c.dim("the same as the login shell's")
        ),
        (Some(pid), Some(d)) => format!("  PATH, daemon (pid {pid}): {}", c.dim(d)),
        (Some(pid), None) => format!("  PATH, daemon (pid {pid}): {}", c.dim("unknown")),
        _ => format!("  PATH, daemon: {}", c.dim("not running")),
    });
    if let Some(t) = &r.token_store {
        out.push(format!("  sign-in secrets:   {}", c.dim(t)));
    }
}

/// One server: a head line (what it said, or that it timed out), its
/// target, then its checks with their fixes. A disabled server not
/// checked is its head and target only.
fn render_server(s: &ServerReport, c: &Colours, out: &mut Vec<String>) {
    let only_disabled = s.disabled && s.checks.len() == 1;
    let head = match (&s.server, only_disabled) {
        (_, true) => c.dim("disabled"),
        (Some(a), _) => format!(
            "{} {} · MCP {} · {} tools, {} prompts, {} resources · {} ms",
            a.name.as_deref().unwrap_or("?"),
            a.version.as_deref().unwrap_or("?"),
            a.protocol_version,
            a.tools.map_or("?".into(), |n| n.to_string()),
            a.prompts.map_or("?".into(), |n| n.to_string()),
            a.resources.map_or("?".into(), |n| n.to_string()),
            a.initialize_ms
        ),
        (None, _) if s.timed_out => c.red("timed out"),
        (None, _) => String::new(),
    };
    let sign = if only_disabled {
        c.dim("-")
    } else {
        c.mark(s.ok)
    };
    let line = format!("{sign} {}  {}  {head}", c.bold(&s.name), c.dim(s.transport));
    out.push(line.trim_end().to_owned());
    if !s.target.is_empty() {
        out.push(format!("    {}", c.dim(&s.target)));
    }
    if only_disabled {
        return;
    }
    for ch in &s.checks {
        let mut lines = ch.detail.lines();
        out.push(format!(
            "  {} {:<9} {}",
            c.mark(ch.ok),
            ch.name,
            lines.next().unwrap_or("")
        ));
        for l in lines {
            out.push(format!("      {}", c.dim(l)));
        }
        if let Some(f) = &ch.fix {
            out.push(format!("      {} {f}", c.yellow("fix:")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Answer, Check, Paths};
    use super::*;

    fn server(name: &str, checks: Vec<Check>) -> ServerReport {
        ServerReport {
            name: name.to_owned(),
            transport: "stdio",
            target: format!("{name}-server --stdio"),
            disabled: false,
            ok: checks.iter().all(|c| c.ok),
            timed_out: false,
            elapsed_ms: 5,
            path: None,
            path_from: None,
            server: None,
            checks,
        }
    }

    fn report() -> Report {
        let mut good = server(
            "good",
            vec![Check::ok("command", "good-server → /bin/good")],
        );
        good.server = Some(Answer {
            initialize_ms: 12,
            protocol_version: "2025-06-18".to_owned(),
            era: "handshake",
            name: Some("good".to_owned()),
            version: Some("1.0".to_owned()),
            tools: Some(3),
            prompts: None,
            resources: Some(0),
        });
        let mut slow = server(
            "slow",
            vec![Check {
                name: "timeout",
                ok: false,
                detail: "timed out after 5s while waiting for initialize; last stderr lines:\nloading\nstill loading".to_owned(),
                fix: Some("give it longer".to_owned()),
            }],
        );
        slow.timed_out = true;
        let mut off = server("off", vec![Check::ok("disabled", "not checked")]);
        off.disabled = true;
        Report {
            ok: false,
            config: Some("/home/u/mcphost.json".to_owned()),
            config_checks: vec![Check::ok(
                "config",
                "/home/u/mcphost.json: 3 servers (1 disabled)",
            )],
            paths: Paths {
                process: "/usr/bin:/bin".to_owned(),
                login_shell: Some("/usr/bin:/bin".to_owned()),
                login_shell_from: Some("login shell"),
                daemon_pid: Some(42),
                daemon: None,
            },
            token_store: Some("files in ~/.config".to_owned()),
            servers: vec![good, slow, off],
        }
    }

    #[test]
    fn a_report_renders_its_config_paths_servers_and_a_summary_line() {
        let lines = render(&report(), &Colours(false));
        let want = [
            "✓ config   /home/u/mcphost.json: 3 servers (1 disabled)",
            "  PATH, login shell: /usr/bin:/bin",
            "  PATH, this shell:  the same",
            "  PATH, daemon (pid 42): unknown",
            "  sign-in secrets:   files in ~/.config",
            "",
            "✓ good  stdio  good 1.0 · MCP 2025-06-18 · 3 tools, ? prompts, 0 resources · 12 ms",
            "    good-server --stdio",
            "  ✓ command   good-server → /bin/good",
            "",
            "✗ slow  stdio  timed out",
            "    slow-server --stdio",
            "  ✗ timeout   timed out after 5s while waiting for initialize; last stderr lines:",
            "      loading",
            "      still loading",
            "      fix: give it longer",
            "",
            "- off  stdio  disabled",
            "    off-server --stdio",
            "",
            "1 of 3 servers with problems",
        ];
        assert_eq!(lines, want);
    }

    #[test]
    fn colours_wrap_marks_and_names_only_when_on() {
        let plain = render(&report(), &Colours(false));
        assert!(plain.iter().all(|l| !l.contains('\x1b')));
        let lit = render(&report(), &Colours(true));
        assert_eq!(lit.len(), plain.len());
        assert!(lit.contains(&"\x1b[1;31m1 of 3 servers with problems\x1b[0m".to_owned()));
        assert!(lit[6].starts_with("\x1b[32m✓\x1b[0m \x1b[1mgood\x1b[0m  \x1b[2mstdio\x1b[0m"));
        assert_eq!(lit[15], "      \x1b[33mfix:\x1b[0m give it longer");
    }

    #[test]
    fn all_ok_says_so_with_the_count() {
        let mut r = report();
        r.ok = true;
        r.servers.truncate(1);
        let lines = render(&r, &Colours(false));
        assert_eq!(lines.last().map(String::as_str), Some("all ok: 1 server"));
    }
}
