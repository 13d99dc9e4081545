//! The audit log: one JSON line per `tools/call`, `resources/read` and
//! `prompts/get` the engine routes, and one per request a server puts to a
//! host, in `audit.jsonl` of the state directory (rotated by size).
//!
//! Recording never waits: a line goes into a bounded queue that a writer
//! thread of its own empties; when the queue is full the line is counted
//! as dropped, and the next line written is preceded by one saying how many
//! were lost. A write error is logged once and never fails a call.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant, SystemTime};

use mcphost_config::audit::{Mode, Settings};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::Digest;
use tracing::warn;

mod hooks;
mod query;
pub(crate) use hooks::settle;
pub use query::{Filter, Found, parse_since, query};

/// The log's file name in the state directory; rotated files add `.1`
/// (newest) to `.N`.
pub const FILE: &str = "audit.jsonl";

/// Lines waiting for the writer; past this many, lines are dropped (and
/// counted) rather than making a call wait.
const QUEUE: usize = 4096;

/// The host session a line names.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Caller {
    /// Its `clientInfo.name` (cleaned), else the door's name for it.
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The engine's id of the session.
    pub session: u64,
}

/// How a routed call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// A tool result with `isError: true`.
    IsError,
    /// A JSON-RPC error, with its code.
    Error(i64),
    /// The caller cancelled it (or went away) before it was answered.
    Cancelled,
    /// The server did not answer in time.
    Timeout,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::IsError => "isError",
            Outcome::Error(_) => "error",
            Outcome::Cancelled => "cancelled",
            Outcome::Timeout => "timeout",
        }
    }
}

/// What a call was made on: `name` as the host saw it, `own` as the
/// server knows it (a tool's or prompt's own name, a resource's own URI).
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub server: Option<String>,
    pub name: String,
    pub own: Option<String>,
}

/// The time as lines carry it: RFC 3339, UTC, milliseconds.
fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// One call's line, as written (see docs/security.md).
pub fn call_line(
    method: &str,
    caller: &Caller,
    target: &Target,
    arguments: Option<&str>,
    full: bool,
    outcome: Outcome,
    took: Duration,
) -> Value {
    let mut v = json!({
        "time": now(),
        "kind": "call",
        "method": method,
        "host": caller,
        "server": target.server,
        "name": target.name,
        "serverName": target.own,
        "outcome": outcome.name(),
        "ms": millis(took),
    });
    if let Outcome::Error(code) = outcome {
        v["code"] = json!(code);
    }
    if let Some(args) = arguments {
        let hash = sha2::Sha256::digest(args.as_bytes());
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        v["args"] = json!({ "sha256": hex, "bytes": args.len() });
        if full {
            v["arguments"] = serde_json::from_str(args).unwrap_or(Value::Null);
        }
    }
    v
}

/// How a host (or the fallback in its place) answered a server's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A sampling or roots answer.
    Ok,
    Accept,
    Decline,
    Cancel,
    Error,
    Timeout,
}

impl Answer {
    fn name(self) -> &'static str {
        match self {
            Answer::Ok => "ok",
            Answer::Accept => "accept",
            Answer::Decline => "decline",
            Answer::Cancel => "cancel",
            Answer::Error => "error",
            Answer::Timeout => "timeout",
        }
    }

    /// An answer's kind from its result: an elicitation's `action`,
    /// otherwise `ok`. Nothing else of the content is looked at.
    pub fn of_result(method: &str, result: &serde_json::value::RawValue) -> Answer {
        if method != mcphost_protocol::methods::ELICITATION_CREATE {
            return Answer::Ok;
        }
        match mcphost_protocol::raw_field::<String>(result, "action")
            .ok()
            .flatten()
            .as_deref()
        {
            Some("accept") => Answer::Accept,
            Some("decline") => Answer::Decline,
            Some("cancel") => Answer::Cancel,
            _ => Answer::Error,
        }
    }
}

/// A server→host request's line: `host` is `None` when the fallback
/// answered (no host was asked).
pub fn request_line(
    method: &str,
    server: &str,
    host: Option<&Caller>,
    answer: Answer,
    took: Duration,
) -> Value {
    json!({
        "time": now(),
        "kind": "request",
        "method": method,
        "server": server,
        "host": host,
        "answeredBy": if host.is_some() { "host" } else { "fallback" },
        "answer": answer.name(),
        "ms": millis(took),
    })
}

struct Inner {
    /// `None`: nowhere to write (no state directory), so nothing is recorded.
    dir: Option<PathBuf>,
    settings: arc_swap::ArcSwap<Settings>,
    /// The writer's queue, started with the first line.
    queue: std::sync::OnceLock<Option<SyncSender<Msg>>>,
    dropped: Arc<AtomicU64>,
    /// Lines the queue holds.
    capacity: usize,
    /// The writer is gone (it could not start): said once.
    gone_said: AtomicBool,
}

/// What the writer is sent.
enum Msg {
    Line(String),
    /// Answered once every line before it is written.
    Flush(std::sync::mpsc::Sender<()>),
}

/// The engine's audit log; cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Inner>,
}

impl AuditLog {
    /// A log written to `dir`/[`FILE`]; `None` records nothing.
    pub fn new(dir: Option<PathBuf>, settings: Settings) -> AuditLog {
        AuditLog::with_queue(dir, settings, QUEUE)
    }

    /// As [`AuditLog::new`], with a queue of `capacity` lines.
    pub(crate) fn with_queue(
        dir: Option<PathBuf>,
        settings: Settings,
        capacity: usize,
    ) -> AuditLog {
        AuditLog {
            inner: Arc::new(Inner {
                dir,
                settings: arc_swap::ArcSwap::from_pointee(settings),
                queue: std::sync::OnceLock::new(),
                dropped: Arc::new(AtomicU64::new(0)),
                capacity,
                gone_said: AtomicBool::new(false),
            }),
        }
    }

    /// Take up the config's `audit` (a reload).
    pub fn set(&self, settings: Settings) {
        if **self.inner.settings.load() != settings {
            self.inner.settings.store(Arc::new(settings));
        }
    }

    /// The directory it is written in.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// Whether lines are recorded at all, and whether arguments go in clear.
    pub fn mode(&self) -> Mode {
        match self.inner.dir {
            Some(_) => self.inner.settings.load().mode,
            None => Mode::Off,
        }
    }

    /// Queue `line`; never waits.
    pub fn record(&self, line: &Value) {
        let Some(dir) = &self.inner.dir else { return };
        let queue = self.inner.queue.get_or_init(|| self.start(dir));
        let Some(queue) = queue else { return };
        match queue.try_send(Msg::Line(line.to_string())) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.inner.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {
                if !self.inner.gone_said.swap(true, Ordering::Relaxed) {
                    warn!(dir = %dir.display(), "the audit log's writer stopped: no more lines are written");
                }
            }
        }
    }

    /// Wait (at most `limit`) until every line recorded so far is written:
    /// a process about to exit (`--direct`, the C library) loses none.
    /// Blocking.
    pub fn flush(&self, limit: Duration) {
        let Some(Some(queue)) = self.inner.queue.get() else {
            return;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        if queue.send(Msg::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(limit);
        }
    }

    fn start(&self, dir: &Path) -> Option<SyncSender<Msg>> {
        let (tx, rx) = sync_channel(self.inner.capacity);
        let writer = Writer {
            path: dir.join(FILE),
            settings: self.clone(),
            out: None,
            failed: false,
        };
        match std::thread::Builder::new()
            .name("mcphost-audit".into())
            .spawn(move || writer.run(rx))
        {
            Ok(_) => Some(tx),
            Err(e) => {
                warn!(dir = %dir.display(), "the audit log's writer did not start: {e}; nothing is recorded");
                None
            }
        }
    }
}

/// The writer thread's state.
struct Writer {
    path: PathBuf,
    settings: AuditLog,
    /// The open log and the rotation it was opened with.
    out: Option<(
        (u64, usize),
        file_rotate::FileRotate<file_rotate::suffix::AppendCount>,
    )>,
    /// A write failed: said once, not per line.
    failed: bool,
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) {
        while let Ok(msg) = rx.recv() {
            let line = match msg {
                Msg::Line(line) => line,
                Msg::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
            };
            let lost = self.settings.inner.dropped.swap(0, Ordering::Relaxed);
            let mut text = String::new();
            if lost > 0 {
                let note = json!({"time": now(), "kind": "dropped", "count": lost});
                text.push_str(&note.to_string());
                text.push('\n');
            }
            text.push_str(&line);
            text.push('\n');
            if let Err(e) = self.write(text.as_bytes()) {
                if !self.failed {
                    warn!(file = %self.path.display(), "the audit log could not be written: {e}; calls go on unrecorded until it can");
                }
                self.failed = true;
                self.out = None;
            } else {
                self.failed = false;
            }
        }
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let s = **self.settings.inner.settings.load();
        let rotation = (s.max_file_size, s.keep);
        let out = match self.out.take() {
            Some((r, out)) if r == rotation => out,
            _ => open(&self.path, rotation)?,
        };
        let (_, out) = self.out.insert((rotation, out));
        out.write_all(bytes)?;
        out.flush()
    }
}

/// Opens the log `0600` in a `0700` directory, rotating past `size`
/// bytes and keeping `keep` rotated files.
fn open(
    path: &Path,
    (size, keep): (u64, usize),
) -> std::io::Result<file_rotate::FileRotate<file_rotate::suffix::AppendCount>> {
    use file_rotate::{ContentLimit, FileRotate, compression::Compression, suffix::AppendCount};
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the audit log has no directory"))?;
    mcphost_state::statefile::ensure_private_dir(dir).map_err(std::io::Error::other)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true).create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    // Opened here first so an error is reported: the rotating writer
    // would drop every line silently.
    let file = options.open(path)?;
    mcphost_state::statefile::tighten(&file, path, 0o600).map_err(std::io::Error::other)?;
    drop(file);
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    Ok(FileRotate::new(
        path,
        AppendCount::new(keep),
        ContentLimit::BytesSurpassed(size),
        Compression::None,
        Some(options),
    ))
}

/// A routed call being recorded: finished with its outcome, or recorded
/// as cancelled when dropped unfinished (the caller went away).
pub struct Pending {
    log: AuditLog,
    method: &'static str,
    caller: Caller,
    target: Target,
    arguments: Option<String>,
    full: bool,
    started: Instant,
    done: bool,
}

impl AuditLog {
    /// Start recording a call, `None` when the log is off. `arguments` are
    /// the bytes as received.
    pub fn begin(
        &self,
        method: &'static str,
        caller: &Caller,
        target: Target,
        arguments: Option<&str>,
    ) -> Option<Pending> {
        let full = match self.mode() {
            Mode::Off => return None,
            Mode::On => false,
            Mode::Full => true,
        };
        Some(Pending {
            log: self.clone(),
            method,
            caller: caller.clone(),
            target,
            arguments: arguments.map(str::to_owned),
            full,
            started: Instant::now(),
            done: false,
        })
    }
}

impl Pending {
    pub fn finish(mut self, outcome: Outcome) {
        self.write(outcome);
    }

    fn write(&mut self, outcome: Outcome) {
        self.done = true;
        let line = call_line(
            self.method,
            &self.caller,
            &self.target,
            self.arguments.as_deref(),
            self.full,
            outcome,
            self.started.elapsed(),
        );
        self.log.record(&line);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            self.write(Outcome::Cancelled);
        }
    }
}

#[cfg(test)]
mod tests;
