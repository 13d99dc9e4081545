//! `mcphost bridge`: an MCP host's stdio relayed to the daemon socket.
//!
//! Two plain threads with blocking I/O, one per direction, on the socket
//! itself: a read is relayed with one write, frames are split with `memchr`
//! and never decoded. The only parsing is a borrowed scan for `id`,
//! `method` and, for the few requests that make a session, `params`.
//!
//! A daemon that goes away (killed, upgraded, restarted by its service) is
//! invisible to the host but for the requests it had in flight: the bridge
//! fails those, withdraws the daemon's own questions to the host, connects
//! again (starting the daemon when it may), replays what made the session
//! (the profile, `initialize`, session options, log levels, subscriptions,
//! open `subscriptions/listen` streams) and tells the host to list again.

use parking_lot::{Condvar, Mutex, MutexGuard};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use mcphost::protocol::{Id, RawValue};
use serde::Deserialize;
use tokio::sync::mpsc;

/// Socket and pipe buffers hold a few hundred KiB: read in large chunks.
const READ_CHUNK: usize = 64 * 1024;
/// Once stdin is closed, how long a quiet daemon is waited for.
const LINGER: Duration = Duration::from_millis(500);
/// How long a daemon that went away is waited for (started again here when
/// autostart is allowed, else by a service manager or the user) before the
/// bridge gives up and fails.
const RECONNECT_WAIT: Duration = Duration::from_secs(10);
/// Between two tries to reach it.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
/// How long the daemon may take to answer one of the bridge's own requests
/// (a profile, a replayed `initialize` that waits for the servers).
const OWN_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Most session options and log levels kept for a replay.
const MAX_REPLAYED: usize = 32;

enum Event {
    StdinClosed,
    /// Something came from the daemon after stdin closed.
    Relayed,
    /// The daemon hung up (or reading it failed): why.
    DaemonGone(String),
    /// Writing to our stdout failed: the host is gone.
    StdoutFailed(io::Error),
}

/// A host request the daemon has not answered yet.
enum Held {
    /// Failed with a clear error if the daemon goes away.
    Fail,
    /// Sent again, as it was, to the next daemon: an open
    /// `subscriptions/listen` stream ends only when the host ends it.
    Again(Vec<u8>),
}

/// What the host sent that made its session: replayed, in this order, on a
/// connection to a new daemon.
#[derive(Default)]
struct Replay {
    /// The host's `initialize` (its id, its params).
    initialize: Option<(Id, String)>,
    /// `mcphost/session/configure` params, in order.
    configure: Vec<String>,
    /// `logging/setLevel` params, the last of each.
    levels: Vec<String>,
    /// `resources/subscribe` params by URI.
    subscriptions: Vec<(String, String)>,
}

struct Shared {
    /// The host's requests not answered yet.
    unanswered: Mutex<HashMap<Id, Held>>,
    /// The daemon's requests to the host not answered yet.
    asked: Mutex<HashSet<Id>>,
    replay: Mutex<Replay>,
    /// The connection the host's messages go to; `None` while the bridge
    /// connects again. A host message is noted and written under this lock,
    /// so a request is either failed with the old connection or sent on the
    /// new one, never both.
    link: Mutex<Option<UnixStream>>,
    link_ready: Condvar,
    stdin_closed: AtomicBool,
    /// The bridge is leaving: nothing waits for a link any longer.
    ending: AtomicBool,
}

impl Shared {
    fn ids(&self) -> MutexGuard<'_, HashMap<Id, Held>> {
        self.unanswered.lock()
    }

    /// The link, once there is one (`None`: the bridge is leaving).
    fn wait_link(&self) -> Option<MutexGuard<'_, Option<UnixStream>>> {
        let mut link = self.link.lock();
        while link.is_none() {
            if self.ending.load(Ordering::SeqCst) {
                return None;
            }
            self.link_ready.wait(&mut link);
        }
        Some(link)
    }

    fn end(&self) {
        self.ending.store(true, Ordering::SeqCst);
        if let Some(s) = self.link.lock().as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.link_ready.notify_all();
    }
}

/// Pump stdio to the daemon socket, so any MCP host can use the daemon.
/// Losing the daemon for good while the host is still talking is an error:
/// the host must learn that its server is gone, not see a clean exit.
pub async fn run(auto: &crate::autostart::Autostart, profile: Option<&str>) -> Result<()> {
    let stream = dial(auto, profile).await?;
    let shared = Arc::new(Shared {
        unanswered: Mutex::new(HashMap::new()),
        asked: Mutex::new(HashSet::new()),
        replay: Mutex::new(Replay::default()),
        link: Mutex::new(Some(stream.try_clone()?)),
        link_ready: Condvar::new(),
        stdin_closed: AtomicBool::new(false),
        ending: AtomicBool::new(false),
    });
    let (tx, mut rx) = mpsc::unbounded_channel();

    // Plain threads, not tokio's stdin: a read blocked in the runtime's pool
    // would keep the process alive after the daemon is gone, and every
    // read would be a hand-off to that pool.
    let (sh, etx) = (shared.clone(), tx.clone());
    std::thread::Builder::new()
        .name("bridge-stdin".into())
        .spawn(move || {
            stdin_to_daemon(&sh);
            sh.stdin_closed.store(true, Ordering::SeqCst);
            let _ = etx.send(Event::StdinClosed);
        })?;
    spawn_reader(stream, auto, &shared, &tx)?;

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
                match reconnect(auto, profile, &shared, &reason).await {
                    Ok(stream) => spawn_reader(stream, auto, &shared, &tx)?,
                    Err(e) => break Err(e),
                }
            }
            Some(Event::DaemonGone(_)) => break Ok(()),
            Some(Event::StdoutFailed(e)) => break Err(anyhow!("writing to stdout: {e}")),
            None if stdin_open => bail!("lost the connection to the daemon mid-session"),
            None => break Ok(()),
        }
    };
    // Also wakes both threads; the process exits right after.
    shared.end();
    result
}

/// A connection of our own to a daemon of our version, started if it is not
/// running (when allowed), with the profile selected.
async fn dial(auto: &crate::autostart::Autostart, profile: Option<&str>) -> Result<UnixStream> {
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
        let params = serde_json::json!({ "profile": name }).to_string();
        let result = own_request(
            &stream,
            None,
            "profile",
            "mcphost/session/configure",
            &params,
        )
        .with_context(|| format!("--profile {name}"))?;
        if let Some(w) = result["warning"].as_str() {
            tracing::warn!("--profile {name}: {w}");
        }
        tracing::debug!(profile = name, options = %result["options"], "profile selected");
    }
    Ok(stream)
}

fn spawn_reader(
    stream: UnixStream,
    auto: &crate::autostart::Autostart,
    shared: &Arc<Shared>,
    tx: &mpsc::UnboundedSender<Event>,
) -> Result<()> {
    let who = format!("the daemon at {}", auto.socket.display());
    let (sh, tx) = (shared.clone(), tx.clone());
    std::thread::Builder::new()
        .name("bridge-stdout".into())
        .spawn(move || {
            let ended = daemon_to_stdout(&stream, &sh, &tx);
            let _ = tx.send(match ended {
                Ok(()) => Event::DaemonGone(format!("{who} closed the connection")),
                Err(Failure::Daemon(e)) => {
                    Event::DaemonGone(format!("connection to {who} failed: {e}"))
                }
                Err(Failure::Stdout(e)) => Event::StdoutFailed(e),
            });
        })?;
    Ok(())
}

/// The daemon went away while the host is still there: end what cannot
/// survive it, then reach a daemon again and put the host's session back.
async fn reconnect(
    auto: &crate::autostart::Autostart,
    profile: Option<&str>,
    shared: &Arc<Shared>,
    reason: &str,
) -> Result<UnixStream> {
    tracing::warn!("lost the connection to the daemon ({reason}); connecting again");
    let again = withdraw(shared, reason)?;
    let deadline = tokio::time::Instant::now() + RECONNECT_WAIT;
    let stream = loop {
        let tried = match dial(auto, profile).await {
            Ok(stream) => {
                let (sh, s) = (shared.clone(), stream.try_clone()?);
                tokio::task::spawn_blocking(move || replay(&s, &sh))
                    .await
                    .map_err(|e| anyhow!("replaying the session: {e}"))?
                    .map(|()| stream)
            }
            Err(e) => Err(e),
        };
        match tried {
            Ok(stream) => break stream,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                bail!(
                    "lost the connection to the daemon mid-session ({reason}), and none came back within {}s: {e:#}",
                    RECONNECT_WAIT.as_secs()
                );
            }
            Err(e) => {
                tracing::debug!("the daemon is not back yet: {e:#}");
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
        }
    };
    let mut link = shared.link.lock();
    let mut sock = &stream;
    let mut ids = shared.ids();
    for (id, frame) in again {
        sock.write_all(&frame)
            .and_then(|()| sock.write_all(b"\n"))
            .context("sending an open subscriptions/listen again")?;
        ids.insert(id, Held::Again(frame));
    }
    drop(ids);
    // A handshake host lists again; a stateless one hears through its
    // listen stream, sent again above.
    if shared.replay.lock().initialize.is_some() {
        let changed: Vec<u8> = [
            "notifications/tools/list_changed",
            "notifications/resources/list_changed",
            "notifications/prompts/list_changed",
        ]
        .iter()
        .flat_map(|m| format!("{{\"jsonrpc\":\"2.0\",\"method\":\"{m}\"}}\n").into_bytes())
        .collect();
        to_stdout(&changed)?;
    }
    *link = Some(stream.try_clone()?);
    drop(link);
    shared.link_ready.notify_all();
    tracing::info!("connected to the daemon again; the host's session is back");
    Ok(stream)
}

/// Takes the dead link, fails the host's requests in flight and withdraws
/// the daemon's questions to the host; what is to be sent again is returned.
fn withdraw(shared: &Shared, reason: &str) -> Result<Vec<(Id, Vec<u8>)>> {
    let mut link = shared.link.lock();
    if let Some(s) = link.take() {
        let _ = s.shutdown(Shutdown::Both);
    }
    let mut out = Vec::new();
    let mut again = Vec::new();
    let failed_init = {
        let mut ids = shared.ids();
        let mut failed = Vec::new();
        for (id, held) in ids.drain() {
            match held {
                Held::Again(frame) => again.push((id, frame)),
                Held::Fail => {
                    tracing::debug!(id = id.as_json(), "failed: in flight when the daemon went");
                    failed.push(id)
                }
            }
        }
        failed
    };
    let message = serde_json::to_string(&format!(
        "the daemon went away while this request was in flight ({reason}); the bridge is connecting again: send it again"
    ))?;
    let mut replay = shared.replay.lock();
    for id in failed_init {
        // An `initialize` that never got its answer is not replayed: the
        // host sends it again itself.
        if replay.initialize.as_ref().is_some_and(|(i, _)| *i == id) {
            replay.initialize = None;
        }
        out.extend_from_slice(
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":-32603,\"message\":{message}}}}}\n",
                id.as_json()
            )
            .as_bytes(),
        );
    }
    drop(replay);
    for id in shared.asked.lock().drain() {
        out.extend_from_slice(
            format!(
                "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{},\"reason\":\"the daemon went away\"}}}}\n",
                id.as_json()
            )
            .as_bytes(),
        );
    }
    to_stdout(&out)?;
    drop(link);
    Ok(again)
}

/// Puts the host's session back on a new connection, in the order it was
/// made; what the daemon sends meanwhile goes on to the host.
fn replay(stream: &UnixStream, shared: &Shared) -> Result<()> {
    let (init, configure, levels, subscriptions) = {
        let r = shared.replay.lock();
        (
            r.initialize.as_ref().map(|(_, p)| p.clone()),
            r.configure.clone(),
            r.levels.clone(),
            r.subscriptions.clone(),
        )
    };
    if let Some(params) = init {
        own_request(stream, Some(shared), "initialize", "initialize", &params)
            .context("the host's initialize, sent again")?;
        let mut sock = stream;
        sock.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")?;
    }
    let rest = configure
        .iter()
        .map(|p| ("mcphost/session/configure", p))
        .chain(levels.iter().map(|p| ("logging/setLevel", p)))
        .chain(
            subscriptions
                .iter()
                .map(|(_, p)| ("resources/subscribe", p)),
        );
    for (method, params) in rest {
        // The daemon's refusal now is what the host would have got then.
        if let Err(e) = own_request(stream, Some(shared), "replay", method, params) {
            tracing::warn!("{method}, sent again: {e:#}");
        }
    }
    Ok(())
}

/// One request of the bridge's own, answered before the relay (re)starts:
/// its result. Other messages the daemon sends meanwhile go to the host.
fn own_request(
    stream: &UnixStream,
    shared: Option<&Shared>,
    tag: &str,
    method: &str,
    params: &str,
) -> Result<serde_json::Value> {
    let id = format!("mcphost-bridge-{tag}");
    let line = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":{},\"params\":{params}}}\n",
        serde_json::to_string(&id)?,
        serde_json::to_string(method)?
    );
    let mut sock = stream;
    sock.write_all(line.as_bytes())
        .map_err(|e| anyhow!("sending it to the daemon: {e}"))?;
    stream.set_read_timeout(Some(OWN_REQUEST_TIMEOUT))?;
    let answer = loop {
        // Read exactly up to each newline, so nothing is consumed that the
        // relay should see.
        let frame = read_frame(stream)?;
        let msg: serde_json::Value = serde_json::from_slice(&frame)
            .map_err(|e| anyhow!("the daemon's message is not JSON: {e}"))?;
        if msg["id"] == id.as_str() && msg.get("method").is_none() {
            break msg;
        }
        // Something for the host (a notification, a question to it).
        if let Some(shared) = shared {
            note_from_daemon(&frame, shared);
        }
        let mut out = frame;
        out.push(b'\n');
        to_stdout(&out)?;
    };
    stream.set_read_timeout(None)?;
    if let Some(err) = answer.get("error") {
        bail!("{}", err["message"].as_str().unwrap_or("refused"));
    }
    Ok(answer["result"].clone())
}
/// One frame, read byte by byte up to its newline (the bridge's own
/// answers only: rare and short).
fn read_frame(stream: &UnixStream) -> Result<Vec<u8>> {
    let mut sock = stream;
    let mut frame = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match sock.read(&mut byte) {
            Ok(0) => bail!("the daemon closed the connection"),
            Ok(_) if byte[0] == b'\n' => {
                if !is_blank(&frame) {
                    return Ok(frame);
                }
                frame.clear();
            }
            Ok(_) => frame.push(byte[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => bail!("no answer from the daemon: {e}"),
        }
        if frame.len() > mcphost::ipc::DEFAULT_MAX_MESSAGE_BYTES {
            bail!("the daemon's message is too long");
        }
    }
}

/// Whole frames to the host, never interleaved with another writer's.
fn to_stdout(bytes: &[u8]) -> io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// Relays stdin to the daemon until stdin ends or the bridge leaves; while
/// the bridge connects again, the host's messages wait.
fn stdin_to_daemon(shared: &Shared) {
    let mut stdin = io::stdin().lock();
    let mut lines = LineBuf::new(None);
    let mut out = Vec::new();
    loop {
        let n = match lines.fill(&mut stdin) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        debug_assert!(n > 0);
        let Some(link) = shared.wait_link() else {
            return;
        };
        let mut noted = Vec::new();
        let chunk = lines.frames(&mut out, |frame| note_from_host(frame, shared, &mut noted));
        if !deliver(shared, link, chunk, &noted) {
            return;
        }
        lines.consume();
    }
    // A last frame without its newline is still a frame.
    if let Some(frame) = lines.rest()
        && !is_blank(frame)
        && let Some(link) = shared.wait_link()
    {
        let mut noted = Vec::new();
        note_from_host(frame, shared, &mut noted);
        let mut last = frame.to_vec();
        last.push(b'\n');
        deliver(shared, link, &last, &noted);
    }
}

/// Writes the host's `bytes` (whose requests `noted` holds) to the daemon.
/// A daemon found gone by the write never read them: they wait for the
/// next one rather than fail. `false`: the bridge is leaving.
fn deliver<'a>(
    shared: &'a Shared,
    mut link: MutexGuard<'a, Option<UnixStream>>,
    bytes: &[u8],
    noted: &[Id],
) -> bool {
    if bytes.is_empty() {
        return true;
    }
    loop {
        let Some(stream) = link.as_ref() else {
            return false;
        };
        let mut sock = stream;
        if sock.write_all(bytes).is_ok() {
            return true;
        }
        tracing::debug!(
            requests = noted.len(),
            "the daemon was gone before it read these"
        );
        // The reader sees the link end too, and the bridge connects again;
        // these requests are not among those it fails.
        let _ = stream.shutdown(Shutdown::Both);
        *link = None;
        let aside: Vec<(Id, Held)> = {
            let mut ids = shared.ids();
            noted.iter().filter_map(|id| ids.remove_entry(id)).collect()
        };
        drop(link);
        link = match shared.wait_link() {
            Some(l) => l,
            None => return false,
        };
        shared.ids().extend(aside);
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
        let chunk = lines.frames(&mut out, |frame| note_from_daemon(frame, shared));
        to_stdout(chunk).map_err(Failure::Stdout)?;
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

/// Only the members the bridge needs, borrowed; everything else is skipped
/// without being decoded.
#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

/// The messages of one frame that carry an id, with whether the frame was
/// a batch.
fn scan(frame: &[u8], mut found: impl FnMut(Id, Probe<'_>, bool)) {
    // A frame with no `"id"` member at all (a notification) is not parsed.
    if memchr::memmem::find(frame, b"\"id\"").is_none() {
        return;
    }
    let first = frame.iter().find(|b| !b.is_ascii_whitespace());
    let batch = first == Some(&b'[');
    let mut one = |p: Probe<'_>| {
        if let Some(id) = p.id.and_then(|raw| Id::from_json(raw.get())) {
            found(id, p, batch);
        }
    };
    if batch {
        if let Ok(all) = serde_json::from_slice::<Vec<Probe<'_>>>(frame) {
            all.into_iter().for_each(&mut one);
        }
    } else if let Ok(p) = serde_json::from_slice::<Probe<'_>>(frame) {
        one(p);
    }
}

/// The host's requests (held until answered, and those that make its
/// session kept for a replay) and its answers to the daemon's questions.
fn note_from_host(frame: &[u8], shared: &Shared, noted: &mut Vec<Id>) {
    scan(frame, |id, p, batch| {
        let Some(method) = p.method else {
            shared.asked.lock().remove(&id);
            return;
        };
        let params = p.params.map_or("{}", RawValue::get);
        let held = if method == "subscriptions/listen" && !batch {
            Held::Again(frame.to_vec())
        } else {
            Held::Fail
        };
        remember(&shared.replay, &id, &method, params);
        noted.push(id.clone());
        shared.ids().insert(id, held);
    });
}

fn remember(replay: &Mutex<Replay>, id: &Id, method: &str, params: &str) {
    let keep = |list: &mut Vec<String>| {
        list.retain(|p| p != params);
        list.push(params.to_owned());
        if list.len() > MAX_REPLAYED {
            list.remove(0);
        }
    };
    #[derive(Deserialize)]
    struct Uri {
        uri: String,
    }
    let mut r = replay.lock();
    match method {
        "initialize" => r.initialize = Some((id.clone(), params.to_owned())),
        "mcphost/session/configure" => keep(&mut r.configure),
        "logging/setLevel" => keep(&mut r.levels),
        "resources/subscribe" | "resources/unsubscribe" => {
            let Ok(Uri { uri }) = serde_json::from_str(params) else {
                return;
            };
            r.subscriptions.retain(|(u, _)| *u != uri);
            if method == "resources/subscribe" {
                r.subscriptions.push((uri, params.to_owned()));
            }
        }
        _ => {}
    }
}

/// The daemon's answers (the host's request is done) and its questions to
/// the host (withdrawn if the daemon goes away before the host answers).
fn note_from_daemon(frame: &[u8], shared: &Shared) {
    scan(frame, |id, p, _| {
        if p.method.is_some() {
            shared.asked.lock().insert(id);
        } else {
            shared.ids().remove(&id);
        }
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
        let ids = |frame: &str, requests: bool| {
            let mut v = Vec::new();
            scan(frame.as_bytes(), |id, p, _| {
                if p.method.is_some() == requests {
                    v.push(id.as_json().to_owned())
                }
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

    #[test]
    fn what_makes_a_session_is_kept_once_and_an_unsubscribe_forgets() {
        let replay = Mutex::new(Replay::default());
        let id = Id::from_json("1").unwrap();
        remember(
            &replay,
            &id,
            "initialize",
            r#"{"protocolVersion":"2025-11-25"}"#,
        );
        for _ in 0..3 {
            remember(&replay, &id, "logging/setLevel", r#"{"level":"debug"}"#);
        }
        remember(&replay, &id, "resources/subscribe", r#"{"uri":"a://1"}"#);
        remember(&replay, &id, "resources/subscribe", r#"{"uri":"a://2"}"#);
        remember(&replay, &id, "resources/unsubscribe", r#"{"uri":"a://1"}"#);
        remember(&replay, &id, "tools/call", r#"{"name":"x"}"#);
        let r = replay.lock();
        assert!(r.initialize.is_some());
        assert_eq!(r.levels.len(), 1);
        assert_eq!(r.subscriptions.len(), 1);
        assert_eq!(r.subscriptions[0].0, "a://2");
    }
}
