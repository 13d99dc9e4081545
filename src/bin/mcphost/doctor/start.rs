//! Starting a server: what its check has found so far, what it said once
//! started, and why a start failed.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use mcphost::client::{ClientError, ClientOptions, ServerClient};
use mcphost::config::{Hygiene, StdioServer};
use mcphost::jsonrpc::PeerError;
use mcphost::protocol::Era;
use mcphost::registry::hygiene::Item;
use mcphost::transport::TransportControl;

use super::fixes::Fix;
use super::hidden::checks;
use super::{Answer, Check};

/// What a server's check has found so far: kept when its time runs out.
#[derive(Default)]
pub(super) struct Progress {
    pub(super) checks: Mutex<Vec<Check>>,
    pub(super) stage: Mutex<&'static str>,
    pub(super) control: Mutex<Option<Arc<dyn TransportControl>>>,
    pub(super) answer: Mutex<Option<Answer>>,
    /// The server's `hygiene`: what the `hidden-text` hint says.
    pub(super) hygiene: Hygiene,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

impl Progress {
    pub(super) fn push(&self, c: Check) {
        lock(&self.checks).push(c);
    }
    pub(super) fn stage(&self, s: &'static str) {
        *lock(&self.stage) = s;
    }
}

/// The server's command line, quoted for a shell.
pub(super) fn command_line(s: &StdioServer) -> String {
    let mut words = vec![s.command.clone()];
    words.extend(s.args.iter().cloned());
    shell_words::join(words)
}

pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The last lines of stderr, for a detail.
pub(super) fn stderr_note(control: Option<&Arc<dyn TransportControl>>) -> String {
    let lines = control
        .map(|c| c.stderr_tail(STDERR_LINES))
        .unwrap_or_default();
    if lines.is_empty() {
        return String::new();
    }
    format!("; last stderr lines:\n{}", lines.join("\n"))
}

const STDERR_LINES: usize = 8;

pub(super) fn client_options(limit: Duration, known_era: Option<Era>) -> ClientOptions {
    ClientOptions {
        init_timeout: limit,
        request_timeout: limit,
        max_request_timeout: limit,
        probe_timeout: limit.min(Duration::from_secs(3)),
        known_era,
        ..Default::default()
    }
}

/// A started server: what it said, and its counts.
/// How many items a list request gave: 0 for a kind the server did not
/// declare (not asked), `None` with the error noted when it failed.
async fn count<T>(
    declared: bool,
    method: &str,
    list: impl std::future::Future<Output = Result<Vec<T>, ClientError>>,
    errors: &mut Vec<String>,
) -> Option<usize> {
    if !declared {
        return Some(0);
    }
    match list.await {
        Ok(items) => Some(items.len()),
        Err(e) => {
            errors.push(format!("{method}: {e}"));
            None
        }
    }
}

pub(super) async fn answered(client: &ServerClient, init: Duration, p: &Progress) {
    let n = client.negotiated();
    let caps = &n.capabilities;
    let mut listing_errors = Vec::new();
    p.stage("listing tools");
    let mut hidden = Vec::new();
    let listed = async {
        let tools = client.list_tools().await?;
        let named = tools.iter().map(|t| (t.name.as_str(), &*t.raw));
        hidden.extend(checks("tool", Item::Tool, p.hygiene, named));
        Ok(tools)
    };
    let tools = count(
        caps.tools.is_some(),
        "tools/list",
        listed,
        &mut listing_errors,
    )
    .await;
    p.stage("listing prompts");
    let listed = async {
        let prompts = client.list_prompts().await?;
        let named = prompts.iter().map(|p| (p.name.as_str(), &*p.raw));
        hidden.extend(checks("prompt", Item::Prompt, p.hygiene, named));
        Ok(prompts)
    };
    let prompts = count(
        caps.prompts.is_some(),
        "prompts/list",
        listed,
        &mut listing_errors,
    )
    .await;
    p.stage("listing resources");
    let listed = async {
        let resources = client.list_resources().await?;
        let named = resources.iter().map(|r| (r.uri.as_str(), &*r.raw));
        hidden.extend(checks("resource", Item::Resource, p.hygiene, named));
        // Templates only for their hidden text: a server without
        // templates/list is not a problem.
        if let Ok(templates) = client.list_resource_templates().await {
            let named = templates.iter().map(|t| (t.uri_template.as_str(), &*t.raw));
            hidden.extend(checks(
                "resource template",
                Item::Resource,
                p.hygiene,
                named,
            ));
        }
        Ok(resources)
    };
    let resources = count(
        caps.resources.is_some(),
        "resources/list",
        listed,
        &mut listing_errors,
    )
    .await;
    let era = match client.era() {
        Era::Handshake => "handshake",
        Era::Stateless => "stateless",
    };
    let answer = Answer {
        initialize_ms: ms(init),
        protocol_version: n.protocol_version.to_string(),
        era,
        name: n.server_name.clone(),
        version: n.server_version.clone(),
        tools,
        prompts,
        resources,
    };
    let count = |c: Option<usize>| c.map_or("?".to_owned(), |c| c.to_string());
    p.push(Check::ok(
        "start",
        format!(
            "initialized in {} ms: {} {}, MCP {} ({era}); {} tools, {} prompts, {} resources",
            answer.initialize_ms,
            answer.name.as_deref().unwrap_or("(no name)"),
            answer.version.as_deref().unwrap_or("(no version)"),
            answer.protocol_version,
            count(tools),
            count(prompts),
            count(resources),
        ),
    ));
    for c in hidden {
        p.push(c);
    }
    if !listing_errors.is_empty() {
        p.push(Check::problem(
            "list",
            listing_errors.join("; "),
            Fix::NotMcp(None),
        ));
    }
    *lock(&p.answer) = Some(answer);
}

/// Why a start failed, with the server's exit and stderr.
pub(super) fn start_failure(
    name: &str,
    e: &ClientError,
    control: Option<&Arc<dyn TransportControl>>,
    line: Option<String>,
    limit: Duration,
) -> Check {
    match e {
        ClientError::Request {
            error: PeerError::Closed(reason),
            ..
        } if reason.auth_required => {
            Check::problem("start", reason.summary.clone(), Fix::Login(name))
        }
        ClientError::Request {
            error: PeerError::Closed(reason),
            ..
        } if line.is_some() => Check::problem(
            "start",
            format!("{}{}", reason.summary, stderr_note(control)),
            Fix::Crashed(line.unwrap_or_default()),
        ),
        ClientError::ExitedOnProbe { reason, .. } => Check::problem(
            "start",
            reason.clone(),
            Fix::Crashed(line.unwrap_or_default()),
        ),
        ClientError::Request {
            error: PeerError::Timeout { method, elapsed },
            ..
        } => Check::problem(
            "timeout",
            format!(
                "no answer to {method} within {elapsed:.1?}{}",
                stderr_note(control)
            ),
            Fix::Hung {
                command_line: line,
                limit,
            },
        ),
        other => Check::problem(
            "start",
            format!("{other}{}", stderr_note(control)),
            Fix::NotMcp(line),
        ),
    }
}
