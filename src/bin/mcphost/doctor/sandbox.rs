//! A sandboxed stdio server: what this machine enforces of its `sandbox`,
//! and denials it hit (in doctor's own start, or in the running daemon's
//! stderr of it), each with a hint naming the `sandbox` config.

use std::path::Path;

use mcphost::transport::sandbox::{SandboxReport, SandboxSpec, report};

use super::Check;
use super::fixes::Fix;
use super::start::{Progress, lock};

/// The `sandbox` check, then one per denial found.
pub(super) async fn check(name: &str, spec: &SandboxSpec, socket: Option<&Path>, p: &Progress) {
    let r = report(spec);
    let summary = summary(&r);
    if r.not_enforced.is_empty() {
        p.push(Check::ok("sandbox", summary));
    } else {
        p.push(Check::problem(
            "sandbox",
            format!("{summary}; not enforced: {}", r.not_enforced.join("; ")),
            if spec.require.is_some() {
                Fix::SandboxRequired(name)
            } else {
                Fix::SandboxGap(name)
            },
        ));
    }
    let started: Vec<String> = lock(&p.checks)
        .iter()
        .filter(|c| !c.ok && c.name != "sandbox")
        .flat_map(|c| c.detail.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| is_denial(l))
        .collect();
    let running = match socket {
        Some(s) => daemon_denials(s, name).await,
        None => Vec::new(),
    };
    if let Some(line) = started.iter().chain(&running).next_back() {
        p.push(Check::problem(
            "sandbox",
            format!("permission denied under the sandbox: {}", line.trim()),
            Fix::SandboxDenied(name),
        ));
    }
}

fn summary(r: &SandboxReport) -> String {
    let abi = r
        .abi
        .map(|v| format!(", Landlock ABI {v}"))
        .unwrap_or_default();
    format!(
        "{}: filesystem {}, network {} {}{abi} ({})",
        r.requested,
        r.enforced.filesystem,
        r.network.label(),
        r.enforced.network,
        r.mechanism
    )
}

/// Text a refused open, connect or exec leaves in a server's stderr.
fn is_denial(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    [
        "permission denied",
        "eacces",
        "eperm",
        "operation not permitted",
    ]
    .iter()
    .any(|k| l.contains(k))
}

/// The running daemon's last stderr lines of `name` that read as denials.
async fn daemon_denials(socket: &Path, name: &str) -> Vec<String> {
    let params = serde_json::json!({"name": name, "lines": 200});
    let Some(v) = super::paths::ask_daemon(socket, "mcphost/servers/logs", Some(params)).await
    else {
        return Vec::new();
    };
    v["lines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str().or_else(|| l["text"].as_str()))
        .filter(|l| is_denial(l))
        .map(str::to_owned)
        .collect()
}
