//! `mcphost logs -f [NAME]`: server log notifications, stderr lines and
//! state changes as they happen, one line each, named by server.
//!
//! Through the daemon: `mcphost/logs/follow`, then the notifications it
//! sends (docs/ipc.md). With `--direct`: the in-process registry's events.

use anyhow::{Result, bail};
use mcphost::client::{CallOptions, ServerClient, ServerEvent};
use mcphost::protocol::{Notification, RawValue, methods, raw_field};
use mcphost::registry::{Registry, RegistryEvent};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::backend::{Backend, RpcFailure};
use crate::output::Out;

pub const FOLLOW: &str = "mcphost/logs/follow";
pub const STDERR_NOTIFICATION: &str = "notifications/mcphost/stderr";
pub const SERVER_STATE_NOTIFICATION: &str = "notifications/mcphost/server_state";
/// `_meta` key of a forwarded `notifications/message` naming its server.
const SERVER_META: &str = "dev.mcphost/server";

/// One followed event.
enum Line {
    Stderr {
        server: String,
        line: String,
    },
    /// `notifications/message` params, as the server (or daemon) sent them.
    Log {
        server: String,
        params: Box<RawValue>,
    },
    /// A server status object (`name`, `state`, `error`, ...).
    State {
        server: String,
        status: Value,
    },
    /// Something was lost on the way (a lagging channel).
    Dropped {
        what: &'static str,
        count: u64,
    },
}

impl Line {
    fn server(&self) -> Option<&str> {
        match self {
            Line::Stderr { server, .. } | Line::Log { server, .. } | Line::State { server, .. } => {
                Some(server)
            }
            Line::Dropped { .. } => None,
        }
    }

    fn print(&self, out: &Out) {
        if out.json {
            let v = match self {
                Line::Stderr { server, line } => {
                    json!({"server": server, "kind": "stderr", "line": line})
                }
                Line::Log { server, params } => {
                    // The params stay as sent: splice them in raw.
                    let head = json!({"server": server, "kind": "log"}).to_string();
                    let head = head.strip_suffix('}').unwrap_or(&head);
                    outln!("{head},\"params\":{}}}", params.get());
                    return;
                }
                Line::State { server, status } => {
                    json!({"server": server, "kind": "state", "status": status})
                }
                Line::Dropped { what, count } => {
                    json!({"kind": "dropped", "what": what, "count": count})
                }
            };
            outln!("{v}");
            return;
        }
        for l in self.text_lines() {
            outln!("{l}");
        }
    }

    /// The event for people: one output line per line of text, each with
    /// its server, so a multi-line stderr message or error stays readable.
    fn text_lines(&self) -> Vec<String> {
        let each = |prefix: String, text: &str| -> Vec<String> {
            let lines: Vec<String> = text
                .split('\n')
                .map(printable)
                .filter(|l| !l.trim().is_empty())
                .map(|l| format!("{prefix}{l}"))
                .collect();
            if lines.is_empty() {
                vec![prefix.trim_end_matches([' ', ':']).to_owned()]
            } else {
                lines
            }
        };
        match self {
            Line::Stderr { server, line } => each(format!("{server} stderr: "), line),
            Line::Log { server, params } => each(format!("{server} "), &describe_log(params)),
            Line::State { server, status } => {
                let state = status["state"].as_str().unwrap_or("unknown");
                match status["error"].as_str() {
                    Some(e) => each(format!("{server} state: {state}: "), e),
                    None => vec![format!("{server} state: {state}")],
                }
            }
            Line::Dropped { what, count } => vec![format!("[mcphost: {count} {what} dropped]")],
        }
    }
}

/// One line of a server's text as plain text: terminal escape sequences
/// (colours) and other control characters (a `\r` of CRLF) are left out,
/// never shown as U+FFFD.
fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ params… final byte in @..~; other escapes: one char.
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            } else {
                chars.next();
            }
        } else if !c.is_control() || c == '\t' {
            out.push(c);
        }
    }
    out
}

/// `LEVEL [logger]: data` for one `notifications/message`, raw: the
/// caller makes each line printable.
fn describe_log(params: &RawValue) -> String {
    #[derive(Deserialize)]
    struct Log {
        #[serde(default)]
        level: Option<String>,
        #[serde(default)]
        logger: Option<String>,
        #[serde(default)]
        data: Option<Value>,
    }
    let Ok(log) = serde_json::from_str::<Log>(params.get()) else {
        return format!("log: {}", params.get());
    };
    let data = match log.data {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let level = log.level.unwrap_or_else(|| "log".to_owned());
    match log.logger {
        Some(logger) => format!("{level} [{logger}]: {data}"),
        None => format!("{level}: {data}"),
    }
}

/// A server's last `lines` stderr lines (`logs NAME`, `servers logs NAME`).
pub async fn tail(b: &Backend, name: &str, lines: usize, out: &Out) -> Result<()> {
    let params = crate::backend::params(json!({ "name": name, "lines": lines }))?;
    let r = b.request("mcphost/servers/logs", Some(params)).await?;
    out.logs(&r)
}

/// Follow until Ctrl-C (or the daemon goes away).
pub async fn follow(b: &Backend, name: Option<&str>, out: &Out) -> Result<()> {
    if let Some(name) = name {
        let list = b.request("mcphost/servers/list", None).await?;
        let known = list
            .as_array()
            .is_some_and(|l| l.iter().any(|s| s["name"].as_str() == Some(name)));
        if !known {
            bail!("unknown server {name:?}; `mcphost servers` lists them");
        }
    }
    // A state line the same as the server's last one says nothing new.
    let last_state: std::cell::RefCell<std::collections::HashMap<String, Value>> =
        Default::default();
    let show = |line: Line| {
        if line.server().is_some_and(|s| name.is_some_and(|n| n != s)) {
            return;
        }
        if let Line::State { server, status } = &line {
            let seen = (status["state"].clone(), status["error"].clone());
            let mut last = last_state.borrow_mut();
            let key = json!([seen.0, seen.1]);
            if last.get(server) == Some(&key) {
                return;
            }
            last.insert(server.clone(), key);
        }
        line.print(out);
    };
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    match b {
        Backend::Daemon(client) => {
            follow_daemon(client, name, show, &mut ctrl_c).await?;
        }
        Backend::Direct { engine, .. } => {
            follow_registry(engine.registry(), show, &mut ctrl_c).await
        }
    }
    Ok(())
}

async fn follow_daemon(
    client: &ServerClient,
    name: Option<&str>,
    show: impl Fn(Line),
    ctrl_c: &mut std::pin::Pin<&mut impl Future<Output = std::io::Result<()>>>,
) -> Result<()> {
    // Subscribed before asking, so nothing sent right after the answer is missed.
    let mut notes = client.notifications();
    let mut events = client.subscribe();
    let params = match name {
        Some(n) => json!({ "server": n }),
        None => json!({}),
    };
    client
        .request_raw(
            FOLLOW,
            Some(crate::backend::params(params)?),
            CallOptions::default(),
        )
        .await
        .map_err(|e| match e.rpc_error() {
            Some(err) => anyhow::Error::new(RpcFailure(err.clone())),
            None => anyhow::Error::new(e),
        })?;
    loop {
        tokio::select! {
            n = notes.recv() => match n {
                Ok(n) => {
                    if let Some(line) = from_notification(&n) {
                        show(line);
                    }
                }
                Err(RecvError::Lagged(count)) => show(Line::Dropped { what: "notifications", count }),
                Err(RecvError::Closed) => bail!("lost the connection to the daemon"),
            },
            ev = events.recv() => match ev {
                Ok(ServerEvent::Closed(reason)) => bail!("lost the connection to the daemon: {reason}"),
                Err(RecvError::Closed) => bail!("lost the connection to the daemon"),
                _ => {}
            },
            _ = &mut *ctrl_c => return Ok(()),
        }
    }
}

/// One daemon notification as a followed line (`None`: not a log event).
fn from_notification(n: &Notification) -> Option<Line> {
    let params = n.params.as_deref()?;
    match n.method.as_str() {
        STDERR_NOTIFICATION => {
            #[derive(Deserialize)]
            struct Stderr {
                server: String,
                line: String,
            }
            let p: Stderr = serde_json::from_str(params.get()).ok()?;
            Some(Line::Stderr {
                server: p.server,
                line: p.line,
            })
        }
        methods::NOTIFICATION_MESSAGE => {
            let meta: Option<Value> = raw_field(params, "_meta").ok().flatten();
            let server = meta
                .as_ref()
                .and_then(|m| m[SERVER_META].as_str())
                .unwrap_or("?")
                .to_owned();
            Some(Line::Log {
                server,
                params: params.to_owned(),
            })
        }
        SERVER_STATE_NOTIFICATION => {
            let status: Value = serde_json::from_str(params.get()).ok()?;
            let server = status["name"].as_str()?.to_owned();
            Some(Line::State { server, status })
        }
        _ => None,
    }
}

async fn follow_registry(
    registry: &Registry,
    show: impl Fn(Line),
    ctrl_c: &mut std::pin::Pin<&mut impl Future<Output = std::io::Result<()>>>,
) {
    let mut events = registry.subscribe();
    loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Ok(RegistryEvent::Stderr { server, line }) => show(Line::Stderr { server, line: line.to_string() }),
                Ok(RegistryEvent::Log { server, params, .. }) => show(Line::Log { server, params }),
                Ok(RegistryEvent::ServerState(s)) => show(Line::State {
                    server: s.name.clone(),
                    status: serde_json::to_value(&*s).unwrap_or(Value::Null),
                }),
                Ok(_) => {}
                Err(RecvError::Lagged(count)) => show(Line::Dropped { what: "events", count }),
                Err(RecvError::Closed) => return,
            },
            _ = &mut *ctrl_c => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(method: &str, params: &str) -> Notification {
        Notification {
            method: method.to_owned(),
            params: Some(RawValue::from_string(params.to_owned()).unwrap()),
        }
    }

    #[test]
    fn multi_line_stderr_is_lines_without_replacement_characters() {
        let line = Line::Stderr {
            server: "s".into(),
            line: "\u{1b}[31mError:\u{1b}[0m boom\r\n  at main.js:1\r\n".into(),
        };
        assert_eq!(
            line.text_lines(),
            ["s stderr: Error: boom", "s stderr:   at main.js:1"]
        );
        let state = Line::State {
            server: "s".into(),
            status: json!({"state": "failed", "error": "exited\nlast stderr: x"}),
        };
        assert_eq!(
            state.text_lines(),
            ["s state: failed: exited", "s state: failed: last stderr: x"]
        );
        for l in line.text_lines().iter().chain(&state.text_lines()) {
            assert!(!l.contains('\u{fffd}'), "{l}");
        }
    }

    #[test]
    fn daemon_notifications_become_named_lines() {
        let Some(Line::Stderr { server, line }) = from_notification(&note(
            STDERR_NOTIFICATION,
            r#"{"server":"ts","line":"hello"}"#,
        )) else {
            panic!()
        };
        assert_eq!((server.as_str(), line.as_str()), ("ts", "hello"));

        let p =
            r#"{"level":"info","logger":"l","data":"tick 1","_meta":{"dev.mcphost/server":"ts"}}"#;
        let Some(Line::Log { server, params }) =
            from_notification(&note(methods::NOTIFICATION_MESSAGE, p))
        else {
            panic!()
        };
        assert_eq!(server, "ts");
        assert_eq!(params.get(), p);
        assert_eq!(describe_log(&params), "info [l]: tick 1");

        let Some(Line::State { server, status }) = from_notification(&note(
            SERVER_STATE_NOTIFICATION,
            r#"{"name":"ts","state":"failed","error":"boom"}"#,
        )) else {
            panic!()
        };
        assert_eq!(
            (server.as_str(), status["error"].as_str()),
            ("ts", Some("boom"))
        );

        assert!(from_notification(&note("notifications/tools/list_changed", "{}")).is_none());
        assert!(from_notification(&note(STDERR_NOTIFICATION, r#"{"line":"no server"}"#)).is_none());
    }

    #[test]
    fn log_data_of_any_shape_is_shown() {
        let raw = |s: &str| RawValue::from_string(s.to_owned()).unwrap();
        assert_eq!(
            describe_log(&raw(r#"{"level":"error","data":{"a":1}}"#)),
            r#"error: {"a":1}"#
        );
        // An escape sequence never reaches the terminal.
        assert_eq!(
            printable(&describe_log(&raw(r#"{"data":"x\u001b[2J"}"#))),
            "log: x"
        );
        assert_eq!(describe_log(&raw("[1]")), "log: [1]");
    }
}
