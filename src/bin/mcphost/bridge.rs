//! `mcphost bridge`: an MCP host's stdio relayed to the daemon socket.
//!
//! Two plain threads with blocking I/O, one per direction, on the socket
//! itself: a read is relayed with one write, frames are split with `memchr`
//! and never decoded. The only parsing is a borrowed scan for `id` and
//! `method`, to know when a client whose stdin has closed has no answer left
//! to wait for.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use mcphost::protocol::{Id, RawValue};
use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::sync::mpsc;

/// Socket and pipe buffers hold a few hundred KiB: read in large chunks.
const READ_CHUNK: usize = 64 * 1024;
/// Once stdin is closed, how long a quiet daemon is waited for.
const LINGER: Duration = Duration::from_millis(500);

enum Event {
    StdinClosed,
    /// Something came from the daemon after stdin closed.
    Relayed,
    /// The daemon hung up (or reading it failed): why.
    DaemonGone(String),
    /// Writing to our stdout failed: the host is gone.
    StdoutFailed(io::Error),
}

struct Shared {
    /// The client's requests not answered yet.
    unanswered: Mutex<HashSet<Id>>,
    stdin_closed: AtomicBool,
}

impl Shared {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<Id>> {
        self.unanswered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Pump stdio to the daemon socket, so any MCP host can use the daemon.
/// Losing the daemon while the host is still talking is an error: the host
/// must learn that its server is gone, not see a clean exit.
pub async fn run(auto: &crate::autostart::Autostart, profile: Option<&str>) -> Result<()> {
    let socket = auto.socket.as_path();
    // Started if it is not running, its version checked; the relay then
    // gets a connection of its own, unseen by anything but the host.
    let checking = std::time::Instant::now();
    let probe = auto
        .connect(
            mcphost::client::ClientOptions {
                known_era: Some(mcphost::protocol::Era::Handshake),
                ..Default::default()
            },
            "",
        )
        .await?;
    probe.shutdown().await;
    tracing::debug!("the daemon's version checked in {:?}", checking.elapsed());
    let stream = mcphost::ipc::connect_blocking(socket)
        .await
        .map_err(|e| crate::autostart::not_running(&e, ""))?;
    if let Some(name) = profile {
        select_profile(&stream, name)?;
    }
    let who = format!("the daemon at {}", socket.display());
    let shared = Arc::new(Shared {
        unanswered: Mutex::new(HashSet::new()),
        stdin_closed: AtomicBool::new(false),
    });
    let (tx, mut rx) = mpsc::unbounded_channel();

    // Plain threads, not tokio's stdin: a read blocked in the runtime's pool
    // would keep the process alive after the daemon is gone, and every
    // read would be a hand-off to that pool.
    let to_daemon = stream.try_clone()?;
    let (sh, etx) = (shared.clone(), tx.clone());
    std::thread::Builder::new()
        .name("bridge-stdin".into())
        .spawn(move || {
            stdin_to_daemon(&to_daemon, &sh);
            sh.stdin_closed.store(true, Ordering::SeqCst);
            let _ = etx.send(Event::StdinClosed);
        })?;
    let from_daemon = stream.try_clone()?;
    let sh = shared.clone();
    std::thread::Builder::new()
        .name("bridge-stdout".into())
        .spawn(move || {
            let ended = daemon_to_stdout(&from_daemon, &sh, &tx);
            let _ = tx.send(match ended {
                Ok(()) => Event::DaemonGone(format!("{who} closed the connection")),
                Err(Failure::Daemon(e)) => {
                    Event::DaemonGone(format!("connection to {who} failed: {e}"))
                }
                Err(Failure::Stdout(e)) => Event::StdoutFailed(e),
            });
        })?;

    let mut stdin_open = true;
    let result = loop {
        // The client's stdin is closed and none of its requests is left:
        // nothing more is coming for it, so leave at once and let the daemon
        // see the client go (its session's calls are cancelled, and no
        // server request is routed to it any longer).
        if !stdin_open && shared.ids().is_empty() {
            break Ok(());
        }
        let ev = if stdin_open {
            rx.recv().await
        } else {
            // Relay the answers still coming, then leave when the daemon has
            // been quiet for a moment.
            match tokio::time::timeout(LINGER, rx.recv()).await {
                Ok(ev) => ev,
                Err(_) => break Ok(()),
            }
        };
        match ev {
            Some(Event::StdinClosed) => stdin_open = false,
            Some(Event::Relayed) => {}
            Some(Event::DaemonGone(reason)) if stdin_open => {
                break Err(anyhow!(
                    "lost the connection to the daemon mid-session: {reason}"
                ));
            }
            Some(Event::DaemonGone(_)) => break Ok(()),
            Some(Event::StdoutFailed(e)) => break Err(anyhow!("writing to stdout: {e}")),
            None if stdin_open => bail!("lost the connection to the daemon mid-session"),
            None => break Ok(()),
        }
    };
    // Also wakes both threads; the process exits right after.
    let _ = stream.shutdown(Shutdown::Both);
    result
}

/// The id of the bridge's own request, sent before any of the host's.
const PROFILE_REQUEST_ID: &str = "mcphost-bridge-profile";
/// How long the daemon may take to answer it.
const PROFILE_TIMEOUT: Duration = Duration::from_secs(10);

/// `--profile NAME`: selects the config profile for this connection before
/// the host's first message, for hosts that cannot send
/// `mcphost/session/configure` themselves. An unknown profile fails the
/// bridge at start, with the daemon's reason (it names the profiles there).
fn select_profile(stream: &UnixStream, name: &str) -> Result<()> {
    let request = serde_json::json!({
        "jsonrpc": "2.0",
        "id": PROFILE_REQUEST_ID,
        "method": "mcphost/session/configure",
        "params": { "profile": name },
    });
    let mut line = serde_json::to_vec(&request)?;
    line.push(b'\n');
    let mut sock = stream;
    sock.write_all(&line)
        .map_err(|e| anyhow!("--profile {name}: sending it to the daemon: {e}"))?;
    // Until the host speaks, the daemon sends this connection nothing but
    // the answer: read exactly up to its newline, so nothing is consumed
    // that the relay should see.
    stream.set_read_timeout(Some(PROFILE_TIMEOUT))?;
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match sock.read(&mut byte) {
            Ok(0) => bail!("--profile {name}: the daemon closed the connection"),
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => answer.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => bail!("--profile {name}: no answer from the daemon: {e}"),
        }
        if answer.len() > mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES {
            bail!("--profile {name}: the daemon's answer is too long");
        }
    }
    stream.set_read_timeout(None)?;
    let answer: serde_json::Value = serde_json::from_slice(&answer)
        .map_err(|e| anyhow!("--profile {name}: the daemon's answer is not JSON: {e}"))?;
    if answer["id"] != PROFILE_REQUEST_ID {
        bail!("--profile {name}: the daemon answered something else: {answer}");
    }
    if let Some(err) = answer.get("error") {
        let why = err["message"].as_str().unwrap_or("refused");
        bail!("--profile {name}: {why}");
    }
    let result = &answer["result"];
    if let Some(w) = result["warning"].as_str() {
        tracing::warn!("--profile {name}: {w}");
    }
    tracing::debug!(profile = name, options = %result["options"], "profile selected");
    Ok(())
}

/// Relays stdin to the socket until stdin ends or the socket fails.
fn stdin_to_daemon(socket: &UnixStream, shared: &Shared) {
    let mut stdin = io::stdin().lock();
    let mut lines = LineBuf::new(None);
    let mut out = Vec::new();
    let mut sock = socket;
    loop {
        let n = match lines.fill(&mut stdin) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        debug_assert!(n > 0);
        let chunk = lines.frames(&mut out, |frame| note_requests(frame, shared));
        if !chunk.is_empty() && sock.write_all(chunk).is_err() {
            return;
        }
        lines.consume();
    }
    // A last frame without its newline is still a frame.
    if let Some(frame) = lines.rest()
        && !is_blank(frame)
    {
        note_requests(frame, shared);
        let mut last = frame.to_vec();
        last.push(b'\n');
        let _ = sock.write_all(&last);
    }
}

enum Failure {
    Daemon(io::Error),
    Stdout(io::Error),
}

/// Relays the socket to stdout until the daemon hangs up: `Ok` at its EOF.
fn daemon_to_stdout(
    socket: &UnixStream,
    shared: &Shared,
    events: &mpsc::UnboundedSender<Event>,
) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    let mut lines = LineBuf::new(Some(mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES));
    let mut out = Vec::new();
    let mut sock = socket;
    loop {
        match lines.fill(&mut sock) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Failure::Daemon(e)),
        }
        let chunk = lines.frames(&mut out, |frame| note_answers(frame, shared));
        if !chunk.is_empty() {
            stdout.write_all(chunk).map_err(Failure::Stdout)?;
            stdout.flush().map_err(Failure::Stdout)?;
        }
        lines.consume();
        if shared.stdin_closed.load(Ordering::SeqCst) {
            let _ = events.send(Event::Relayed);
        }
    }
}

/// Newline-delimited frames over a byte stream, split without copying when
/// no frame has to be dropped.
struct LineBuf {
    /// `buf[..filled]` is data; the rest is room for the next read, kept
    /// between reads so the buffer is not zeroed again each time.
    buf: Vec<u8>,
    filled: usize,
    /// Bytes at the front that form complete frames, relayed by `frames`.
    done: usize,
    /// Where the search for the next newline resumes (a long frame arriving
    /// in many reads is scanned once).
    scanned: usize,
    max: Option<usize>,
    /// Dropping the rest of an oversized frame, up to its newline.
    skipping: bool,
}

impl LineBuf {
    fn new(max: Option<usize>) -> Self {
        LineBuf {
            buf: Vec::new(),
            filled: 0,
            done: 0,
            scanned: 0,
            max,
            skipping: false,
        }
    }

    /// One read into the buffer's tail.
    fn fill(&mut self, from: &mut impl Read) -> io::Result<usize> {
        let want = self.filled.saturating_add(READ_CHUNK);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        let n = from.read(&mut self.buf[self.filled..])?;
        self.filled = self.filled.saturating_add(n);
        Ok(n)
    }

    /// The complete frames now buffered, newlines included, with blank and
    /// oversized ones left out; `seen` is shown each frame relayed.
    fn frames<'a>(&'a mut self, out: &'a mut Vec<u8>, mut seen: impl FnMut(&[u8])) -> &'a [u8] {
        out.clear();
        let mut start = 0;
        // Whether `buf[..start]` is relayed as it is (no frame dropped yet).
        let mut verbatim = true;
        let mut from = self.scanned;
        while let Some(at) = memchr::memchr(b'\n', &self.buf[from..self.filled]) {
            let end = from.saturating_add(at);
            let frame = &self.buf[start..end];
            let keep = if self.skipping {
                self.skipping = false;
                false
            } else {
                !is_blank(frame) && !self.too_big(frame.len())
            };
            if keep {
                seen(frame);
                if !verbatim {
                    out.extend_from_slice(&self.buf[start..=end]);
                }
            } else if verbatim {
                verbatim = false;
                out.extend_from_slice(&self.buf[..start]);
            }
            start = end.saturating_add(1);
            from = start;
        }
        self.done = start;
        self.scanned = self.filled;
        if self.skipping {
            self.filled = start;
            self.scanned = start;
        } else if self.too_big(self.filled.saturating_sub(start)) {
            // A partial frame already past the limit is dropped as it comes.
            self.skipping = true;
            self.filled = start;
            self.scanned = start;
        }
        if verbatim { &self.buf[..start] } else { out }
    }

    fn too_big(&self, len: usize) -> bool {
        let over = self.max.is_some_and(|max| len > max);
        if over {
            tracing::warn!(limit = self.max, "dropped a message over the size limit");
        }
        over
    }

    /// Forgets the frames `frames` returned, keeping a partial one.
    fn consume(&mut self) {
        if self.done > 0 {
            self.buf.copy_within(self.done..self.filled, 0);
            self.filled = self.filled.saturating_sub(self.done);
            self.scanned = self.scanned.saturating_sub(self.done);
            self.done = 0;
        }
    }

    /// What is left at the end of the stream.
    fn rest(&self) -> Option<&[u8]> {
        (!self.skipping && self.filled > self.done).then(|| &self.buf[self.done..self.filled])
    }
}

fn is_blank(frame: &[u8]) -> bool {
    frame.iter().all(u8::is_ascii_whitespace)
}

/// Only the two members the bridge needs, borrowed; everything else is
/// skipped without being decoded.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<IgnoredAny>,
}

/// The ids of the requests (`requests`) or responses in one frame.
fn scan_ids(frame: &[u8], requests: bool, mut found: impl FnMut(Id)) {
    // A frame with no `"id"` member at all (a notification) is not parsed.
    if memchr::memmem::find(frame, b"\"id\"").is_none() {
        return;
    }
    let mut one = |p: Probe<'_>| {
        if p.method.is_some() == requests
            && let Some(id) = p.id.and_then(|raw| Id::from_json(raw.get()))
        {
            found(id);
        }
    };
    let first = frame.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        if let Ok(batch) = serde_json::from_slice::<Vec<Probe<'_>>>(frame) {
            batch.into_iter().for_each(&mut one);
        }
    } else if let Ok(p) = serde_json::from_slice::<Probe<'_>>(frame) {
        one(p);
    }
}

fn note_requests(frame: &[u8], shared: &Shared) {
    let mut ids = Vec::new();
    scan_ids(frame, true, |id| ids.push(id));
    if !ids.is_empty() {
        shared.ids().extend(ids);
    }
}

fn note_answers(frame: &[u8], shared: &Shared) {
    // With nothing outstanding there is nothing to look for.
    if shared.ids().is_empty() {
        return;
    }
    scan_ids(frame, false, |id| {
        shared.ids().remove(&id);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(reads: &[&[u8]], max: Option<usize>) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut lb = LineBuf::new(max);
        let mut relayed = Vec::new();
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for r in reads {
            lb.fill(&mut &r[..]).unwrap();
            let chunk = lb.frames(&mut out, |f| seen.push(f.to_vec()));
            relayed.extend_from_slice(chunk);
            lb.consume();
        }
        (relayed, seen)
    }

    #[test]
    fn a_frame_split_across_reads_is_relayed_once_whole() {
        let (relayed, seen) = split(&[b"{\"a\":", b"1}\n{\"b\"", b":2}\n"], None);
        assert_eq!(relayed, b"{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(seen, vec![b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]);
    }

    #[test]
    fn blank_lines_are_dropped() {
        let (relayed, _) = split(&[b"\n  \n{\"a\":1}\n\r\n{\"b\":2}\n"], None);
        assert_eq!(relayed, b"{\"a\":1}\n{\"b\":2}\n");
    }

    #[test]
    fn an_oversized_frame_is_dropped_and_the_next_one_kept() {
        let big = vec![b'x'; 40];
        let (relayed, _) = split(&[b"{\"a\":1}\n", &big, &big, b"x\n{\"b\":2}\n"], Some(32));
        assert_eq!(relayed, b"{\"a\":1}\n{\"b\":2}\n");
        let (relayed, _) = split(&[&big, b"\n{\"b\":2}\n"], Some(32));
        assert_eq!(relayed, b"{\"b\":2}\n");
    }

    #[test]
    fn ids_of_requests_and_of_answers_in_batches_too() {
        let ids = |frame: &str, requests| {
            let mut v = Vec::new();
            scan_ids(frame.as_bytes(), requests, |id| {
                v.push(id.as_json().to_owned())
            });
            v
        };
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":"x","method":"b","params":{"id":9}}]"#;
        assert_eq!(ids(batch, true), ["1", "\"x\""]);
        assert!(ids(batch, false).is_empty());
        let answer = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"id":3}]}}"#;
        assert_eq!(ids(answer, false), ["7"]);
        assert!(ids(answer, true).is_empty());
        assert!(ids(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#, true).is_empty());
    }
}
