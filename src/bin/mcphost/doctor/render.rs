//! The report on a terminal.

use super::{Report, servers_n};

struct Colours(bool);

impl Colours {
    fn wrap(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }
    fn green(&self, s: &str) -> String {
        self.wrap("32", s)
    }
    fn red(&self, s: &str) -> String {
        self.wrap("1;31", s)
    }
    fn yellow(&self, s: &str) -> String {
        self.wrap("33", s)
    }
    fn dim(&self, s: &str) -> String {
        self.wrap("2", s)
    }
    fn bold(&self, s: &str) -> String {
        self.wrap("1", s)
    }
}

fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

pub(super) fn show(r: &Report) {
    let c = Colours(colour());
    let mark = |ok: bool| if ok { c.green("✓") } else { c.red("✗") };
    for ch in &r.config_checks {
        outln!("{} {:<8} {}", mark(ch.ok), ch.name, ch.detail);
        if let Some(f) = &ch.fix {
            outln!("  {} {f}", c.yellow("fix:"));
        }
    }
    let p = &r.paths;
    if let Some(l) = &p.login_shell {
        let from = match p.login_shell_from {
            Some("fallback") => " (the shell did not answer: this process's)",
            _ => "",
        };
        outln!("  PATH, login shell{from}: {}", c.dim(l));
    }
    if p.login_shell.as_deref() == Some(p.process.as_str()) {
        outln!("  PATH, this shell:  {}", c.dim("the same"));
    } else {
        outln!("  PATH, this shell:  {}", c.dim(&p.process));
    }
    match (p.daemon_pid, &p.daemon) {
        (Some(pid), Some(d)) if p.login_shell.as_deref() == Some(d.as_str()) => {
            outln!(
                "  PATH, daemon (pid {pid}): {}",
                c.dim("the same as the login shell's")
            )
        }
        (Some(pid), Some(d)) => outln!("  PATH, daemon (pid {pid}): {}", c.dim(d)),
        (Some(pid), None) => outln!("  PATH, daemon (pid {pid}): {}", c.dim("unknown")),
        _ => outln!("  PATH, daemon: {}", c.dim("not running")),
    }
    if let Some(t) = &r.token_store {
        outln!("  sign-in secrets:   {}", c.dim(t));
    }
    for s in &r.servers {
        outln!("");
        let head = match (&s.server, s.disabled && s.checks.len() == 1) {
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
        let sign = if s.disabled && s.checks.len() == 1 {
            c.dim("-")
        } else {
            mark(s.ok)
        };
        let line = format!("{sign} {}  {}  {head}", c.bold(&s.name), c.dim(s.transport));
        outln!("{}", line.trim_end());
        if !s.target.is_empty() {
            outln!("    {}", c.dim(&s.target));
        }
        if s.disabled && s.checks.len() == 1 {
            continue;
        }
        for ch in &s.checks {
            let mut lines = ch.detail.lines();
            outln!(
                "  {} {:<9} {}",
                mark(ch.ok),
                ch.name,
                lines.next().unwrap_or("")
            );
            for l in lines {
                outln!("      {}", c.dim(l));
            }
            if let Some(f) = &ch.fix {
                outln!("      {} {f}", c.yellow("fix:"));
            }
        }
    }
    let bad = r.servers.iter().filter(|s| !s.ok).count();
    outln!("");
    if r.ok {
        outln!(
            "{}",
            c.green(&format!("all ok: {}", servers_n(r.servers.len())))
        );
    } else {
        let config_bad = r.config_checks.iter().any(|c| !c.ok);
        outln!(
            "{}",
            c.red(&format!(
                "{bad} of {} with problems{}",
                servers_n(r.servers.len()),
                if config_bad { ", and the config" } else { "" }
            ))
        );
    }
}
