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
const QUEUE: usize = 16384;

/// After a line wakes it, the writer lets this long of lines gather and
/// writes them at once: a busy engine's calls then enqueue without waking
/// a thread each, and the disk sees one write per batch.
const BATCH: Duration = Duration::from_millis(20);

/// The host session a line names.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
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
fn stamp(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// Lowercase hex of a SHA-256 of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hash = sha2::Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in hash.iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// One call's line, as written (see docs/security.md): a typed line the
/// writer serializes straight into its buffer (no map of the line built).
#[derive(Serialize)]
struct CallLine<'a> {
    time: String,
    kind: &'static str,
    method: &'a str,
    host: &'a Caller,
    server: Option<&'a str>,
    name: &'a str,
    #[serde(rename = "serverName")]
    server_name: Option<&'a str>,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<ArgsLine>,
    /// In clear only with `"audit": "full"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    arguments: Option<Value>,
    ms: f64,
}

#[derive(Serialize)]
struct ArgsLine {
    sha256: String,
    bytes: usize,
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
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestLine<'a> {
    time: String,
    kind: &'static str,
    method: &'a str,
    server: &'a str,
    host: Option<&'a Caller>,
    answered_by: &'static str,
    answer: &'static str,
    ms: f64,
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

/// What a line records, formatted by the writer thread: a call pays for
/// a few clones and a queue slot, not for JSON, hashing or the disk.
#[derive(Debug)]
pub enum Record {
    Call {
        method: &'static str,
        caller: Caller,
        target: Target,
        /// The arguments' bytes as received.
        arguments: Option<String>,
        full: bool,
        outcome: Outcome,
        took: Duration,
    },
    Request {
        method: String,
        server: String,
        host: Option<Caller>,
        answer: Answer,
        took: Duration,
    },
}

impl Record {
    /// Append this record's line (without its newline) to `out`.
    fn write_line(&self, at: SystemTime, out: &mut Vec<u8>) -> serde_json::Result<()> {
        match self {
            Record::Call {
                method,
                caller,
                target,
                arguments,
                full,
                outcome,
                took,
            } => {
                let args = arguments.as_deref();
                let line = CallLine {
                    time: stamp(at),
                    kind: "call",
                    method,
                    host: caller,
                    server: target.server.as_deref(),
                    name: &target.name,
                    server_name: target.own.as_deref(),
                    outcome: outcome.name(),
                    code: match outcome {
                        Outcome::Error(code) => Some(*code),
                        _ => None,
                    },
                    args: args.map(|a| ArgsLine {
                        sha256: sha256_hex(a.as_bytes()),
                        bytes: a.len(),
                    }),
                    arguments: args
                        .filter(|_| *full)
                        .map(|a| serde_json::from_str(a).unwrap_or(Value::Null)),
                    ms: millis(*took),
                };
                serde_json::to_writer(out, &line)
            }
            Record::Request {
                method,
                server,
                host,
                answer,
                took,
            } => {
                let line = RequestLine {
                    time: stamp(at),
                    kind: "request",
                    method,
                    server,
                    host: host.as_ref(),
                    answered_by: if host.is_some() { "host" } else { "fallback" },
                    answer: answer.name(),
                    ms: millis(*took),
                };
                serde_json::to_writer(out, &line)
            }
        }
    }
}

/// What the writer is sent.
enum Msg {
    Record(SystemTime, Box<Record>),
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

    /// Queue `record`; never waits.
    pub fn record(&self, record: Record) {
        let Some(dir) = &self.inner.dir else { return };
        let queue = self.inner.queue.get_or_init(|| self.start(dir));
        let Some(queue) = queue else { return };
        match queue.try_send(Msg::Record(SystemTime::now(), Box::new(record))) {
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
            count: 0,
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
    /// Bytes in the current file, as the rotating writer counts them.
    count: u64,
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) {
        while let Ok(first) = rx.recv() {
            std::thread::sleep(BATCH);
            // Each line is its own write: rotation by size is decided
            // between writes, so a batch never makes one file overshoot.
            let mut lines = Vec::new();
            let lost = self.settings.inner.dropped.swap(0, Ordering::Relaxed);
            let mut flushes = Vec::new();
            for msg in std::iter::once(first).chain(rx.try_iter()) {
                match msg {
                    Msg::Record(at, record) => lines.push((at, record)),
                    Msg::Flush(done) => flushes.push(done),
                }
            }
            self.write_lines(lost, &lines);
            for done in flushes {
                let _ = done.send(());
            }
        }
    }

    /// Write, saying so once when it fails (and again only after it
    /// worked in between).
    fn write_logged(&mut self, bytes: &[u8]) {
        if let Err(e) = self.write(bytes) {
            if !self.failed {
                warn!(file = %self.path.display(), "the audit log could not be written: {e}; calls go on unrecorded until it can");
            }
            self.failed = true;
            self.out = None;
        } else {
            self.failed = false;
        }
    }

    /// What the next write starts from: the rotating writer moves to a
    /// new file before a write once the file has passed the limit.
    fn used(&self, limit: u64) -> u64 {
        if self.count > limit { 0 } else { self.count }
    }

    /// Whole lines in as few writes as rotation allows: a write ends at
    /// the line that takes the file past its size, so no file overshoots
    /// by more than one line, and a batch costs one system call per file.
    fn write_lines(&mut self, lost: u64, lines: &[(SystemTime, Box<Record>)]) {
        let limit = self.settings.inner.settings.load().max_file_size;
        let mut chunk: Vec<u8> = Vec::new();
        if lost > 0 {
            let at = stamp(SystemTime::now());
            let line = json!({"time": at, "kind": "dropped", "count": lost});
            if serde_json::to_writer(&mut chunk, &line).is_ok() {
                chunk.push(b'\n');
            }
        }
        for (at, record) in lines {
            let before = chunk.len();
            if record.write_line(*at, &mut chunk).is_err() {
                chunk.truncate(before);
                continue;
            }
            chunk.push(b'\n');
            let len = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
            if self.used(limit).saturating_add(len) > limit {
                self.write_logged(&chunk);
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            self.write_logged(&chunk);
        }
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let s = **self.settings.inner.settings.load();
        let rotation = (s.max_file_size, s.keep);
        let out = match self.out.take() {
            Some((r, out)) if r == rotation => out,
            _ => {
                let out = open(&self.path, rotation)?;
                self.count = std::fs::metadata(&self.path).map_or(0, |m| m.len());
                out
            }
        };
        self.count = self.used(s.max_file_size);
        let (_, out) = self.out.insert((rotation, out));
        out.write_all(bytes)?;
        self.count = self
            .count
            .saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
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
        self.log.record(Record::Call {
            method: self.method,
            caller: std::mem::take(&mut self.caller),
            target: std::mem::take(&mut self.target),
            arguments: self.arguments.take(),
            full: self.full,
            outcome,
            took: self.started.elapsed(),
        });
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
