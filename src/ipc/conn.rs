//! One socket as a [`Connection`]: a reader task, a writer task, a control.

use parking_lot::Mutex;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use interprocess::local_socket::tokio::Stream as LocalStream;
use interprocess::local_socket::traits::StreamCommon;
use interprocess::local_socket::{ConnectOptions, GenericFilePath, ToFsName};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span};

use super::listen::PeerCred;
use super::{DEFAULT_OUTBOUND_CAPACITY, IpcError, our_uid};
use crate::transport::framing::{BoundedLineCodec, Frame, FramingError};
use crate::transport::{
    BoxFuture, CloseReason, Connection, Outbound, TransportControl, TransportEvent,
};

const INBOUND_CAPACITY: usize = 256;
/// Connecting to a local socket either succeeds or fails at once; this only
/// guards against a listener whose backlog never drains.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Socket buffers hold a few hundred KiB: read in large chunks.
const READ_CAPACITY: usize = 64 * 1024;

/// Connects to the daemon at `path` (the CLI and bridge side).
///
/// As with stdio, `control` owns the connection: the socket closes when it
/// is shut down or dropped, when `inbound` is dropped, or when the daemon
/// hangs up; `inbound` then ends with one [`TransportEvent::Closed`].
///
/// Refuses a listener running as another user: with `--socket` pointing at
/// a file someone else controls, they would see every call we make.
pub async fn connect(path: &Path, max_message_bytes: usize) -> Result<Connection, IpcError> {
    let (stream, cred) = dial_ours(path).await?;
    let span = tracing::debug_span!("ipc", daemon = %path.display());
    Ok(start(
        stream,
        max_message_bytes,
        DEFAULT_OUTBOUND_CAPACITY,
        cred.pid,
        format!("the daemon at {}", path.display()),
        span,
    ))
}

/// Dial the daemon's socket and check that its listener runs as our user.
async fn dial_ours(path: &Path) -> Result<(LocalStream, PeerCred), IpcError> {
    let stream = dial(path, CONNECT_TIMEOUT)
        .await
        .map_err(|source| match source.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => IpcError::NotRunning {
                path: path.to_owned(),
                source,
            },
            _ => IpcError::Io {
                action: "connecting to",
                path: path.to_owned(),
                source,
            },
        })?;
    let cred = peer_cred(&stream).map_err(IpcError::io("reading the credentials of", path))?;
    let ours = our_uid();
    if cred.uid != ours {
        return Err(IpcError::ForeignDaemon {
            path: path.to_owned(),
            uid: cred.uid,
            ours,
        });
    }
    Ok((stream, cred))
}

/// [`connect`]'s checks (a listener that is ours), handing back the plain
/// blocking stream: the bridge relays bytes on two threads of its own, with
/// no runtime task or channel between stdin and the socket.
pub async fn connect_blocking(path: &Path) -> Result<std::os::unix::net::UnixStream, IpcError> {
    let (stream, _) = dial_ours(path).await?;
    let LocalStream::UdSocket(stream) = stream;
    let std = UnixStream::from(stream)
        .into_std()
        .map_err(IpcError::io("connecting to", path))?;
    std.set_nonblocking(false)
        .map_err(IpcError::io("connecting to", path))?;
    Ok(std)
}

/// A plain connect to the filesystem socket at `path`.
pub(super) async fn dial(path: &Path, timeout: Duration) -> io::Result<LocalStream> {
    let name = path.to_fs_name::<GenericFilePath>()?;
    let opts = ConnectOptions::new().name(name);
    tokio::time::timeout(timeout, opts.connect_tokio())
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connecting timed out"))?
}

pub(super) fn peer_cred(stream: &LocalStream) -> io::Result<PeerCred> {
    let creds = stream.peer_creds()?;
    let missing = || io::Error::new(io::ErrorKind::Unsupported, "no peer uid on this platform");
    Ok(PeerCred {
        uid: creds.euid().ok_or_else(missing)?,
        gid: creds.egid().ok_or_else(missing)?,
        pid: creds.pid(),
    })
}

/// Starts the reader and writer tasks over `stream`. `who` names the other
/// end in close reasons ("the daemon at …", "client pid 42").
pub(super) fn start(
    stream: LocalStream,
    max_message_bytes: usize,
    outbound_capacity: usize,
    pid: Option<i32>,
    who: String,
    span: Span,
) -> Connection {
    // Tokio's owned halves are the maintained split; dropping the write half
    // sends EOF, and the socket closes once both halves are gone.
    let LocalStream::UdSocket(stream) = stream;
    let (read, write) = UnixStream::from(stream).into_split();

    let (outbound_tx, outbound_rx) = mpsc::channel(outbound_capacity.max(1));
    let (inbound_tx, inbound_rx) = mpsc::channel(INBOUND_CAPACITY);
    let shared = Arc::new(Shared {
        stop: CancellationToken::new(),
        why: Mutex::new(None),
        tasks: TaskTracker::new(),
        pid: pid.and_then(|p| u32::try_from(p).ok()),
    });

    shared
        .tasks
        .spawn(write_loop(write, outbound_rx, shared.clone()).instrument(span.clone()));
    let reader = shared.tasks.spawn(
        read_loop(read, max_message_bytes, inbound_tx.clone(), shared.clone())
            .instrument(span.clone()),
    );
    // Only the halves are tracked: `shutdown` resolves once the socket is
    // closed, even if nobody ever reads the `Closed` event.
    shared.tasks.close();
    let closer = shared.clone();
    tokio::spawn(
        async move {
            let ended = match reader.await {
                Ok(ended) => ended,
                Err(e) => Ended::Failed(format!("the reader task failed: {e}")),
            };
            // Whatever ended reading also ends writing: the peer treats
            // `Closed` as final, so nothing written after it would be read.
            closer.stop_with(String::new());
            let summary = match ended {
                Ended::Eof => format!("{who} closed the connection"),
                Ended::Stopped => match closer.reason() {
                    Some(why) if !why.is_empty() => format!("connection to {who} closed: {why}"),
                    _ => format!("connection to {who} closed"),
                },
                Ended::Failed(why) => format!("connection to {who} failed: {why}"),
            };
            tracing::debug!("{summary}");
            let _ = inbound_tx
                .send(TransportEvent::Closed(CloseReason::new(summary)))
                .await;
        }
        .instrument(span),
    );

    Connection {
        outbound: outbound_tx,
        inbound: inbound_rx,
        control: Arc::new(SocketControl { shared }),
    }
}

struct Shared {
    /// Ends both tasks; the socket closes when both halves are dropped.
    stop: CancellationToken,
    /// Why `stop` was cancelled, set by whoever cancelled it first.
    why: Mutex<Option<String>>,
    tasks: TaskTracker,
    pid: Option<u32>,
}

impl Shared {
    fn stop_with(&self, why: String) {
        let mut slot = self.why.lock();
        if slot.is_none() {
            *slot = Some(why);
        }
        drop(slot);
        self.stop.cancel();
    }

    fn reason(&self) -> Option<String> {
        self.why.lock().clone()
    }
}

struct SocketControl {
    shared: Arc<Shared>,
}

impl TransportControl for SocketControl {
    /// Drops whatever is still queued and closes the socket at once: this is
    /// also how the daemon gets rid of a client that stopped reading.
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.shared.stop_with("closed by this side".to_owned());
            self.shared.tasks.wait().await;
        })
    }

    fn stderr_tail(&self, _n: usize) -> Vec<String> {
        Vec::new()
    }

    /// The pid of the process at the other end, from its credentials at
    /// connect time.
    fn pid(&self) -> Option<u32> {
        self.shared.pid
    }

    fn kind(&self) -> &'static str {
        "socket"
    }
}

impl Drop for SocketControl {
    fn drop(&mut self) {
        // Nobody can shut it down any more: do not leave the socket open.
        self.shared
            .stop_with("the connection was dropped".to_owned());
    }
}

enum Ended {
    /// The other end closed its side.
    Eof,
    /// `stop` was cancelled; the reason is in `Shared::why`.
    Stopped,
    Failed(String),
}

async fn read_loop(
    read: OwnedReadHalf,
    max_message_bytes: usize,
    inbound: mpsc::Sender<TransportEvent>,
    shared: Arc<Shared>,
) -> Ended {
    let mut frames = FramedRead::with_capacity(
        read,
        BoundedLineCodec::new(max_message_bytes),
        READ_CAPACITY,
    );
    let stopped = shared.stop.cancelled();
    tokio::pin!(stopped);
    let gone = inbound.closed();
    tokio::pin!(gone);
    loop {
        let item = tokio::select! {
            biased;
            _ = &mut stopped => return Ended::Stopped,
            // Nobody will ever read what we would deliver.
            _ = &mut gone => return Ended::Stopped,
            item = frames.next() => item,
        };
        let event = match item {
            None => return Ended::Eof,
            Some(Ok(Frame::Line(line))) => TransportEvent::Frame(line),
            Some(Ok(Frame::Oversized { limit, id })) => {
                tracing::warn!(limit, id = ?id, "dropped a message over the size limit");
                TransportEvent::Oversized { limit, id }
            }
            Some(Err(e)) => return Ended::Failed(format!("reading failed: {e}")),
        };
        tokio::select! {
            biased;
            _ = &mut stopped => return Ended::Stopped,
            sent = inbound.send(event) => if sent.is_err() {
                return Ended::Stopped;
            },
        }
    }
}

async fn write_loop(
    write: OwnedWriteHalf,
    mut outbound: mpsc::Receiver<Outbound>,
    shared: Arc<Shared>,
) {
    // The size limit applies to what we read; the encoder ignores it.
    let mut sink = FramedWrite::new(write, BoundedLineCodec::new(usize::MAX));
    let stopped = shared.stop.cancelled();
    tokio::pin!(stopped);
    loop {
        let first = tokio::select! {
            biased;
            _ = &mut stopped => return,
            msg = outbound.recv() => match msg {
                Some(msg) => msg,
                // Every sender is gone: send EOF (dropping the half) but keep
                // reading, as the other end may still be talking.
                None => return,
            },
        };
        let written = tokio::select! {
            biased;
            // A client that stopped reading blocks the write: stopping must
            // not wait for it.
            _ = &mut stopped => return,
            written = write_batch(&mut sink, first, &mut outbound) => written,
        };
        if let Err(e) = written {
            tracing::debug!("writing failed: {e}");
            shared.stop_with(format!("writing failed: {e}"));
            return;
        }
    }
}

/// Writes `first` and whatever else is already queued, in as few writes as
/// the codec's buffer allows.
async fn write_batch(
    sink: &mut FramedWrite<OwnedWriteHalf, BoundedLineCodec>,
    first: Outbound,
    outbound: &mut mpsc::Receiver<Outbound>,
) -> io::Result<()> {
    feed(sink, first).await?;
    while let Ok(msg) = outbound.try_recv() {
        feed(sink, msg).await?;
    }
    sink.flush().await.map_err(into_io)
}

async fn feed(
    sink: &mut FramedWrite<OwnedWriteHalf, BoundedLineCodec>,
    msg: Outbound,
) -> io::Result<()> {
    let len = msg.len();
    match sink.feed(msg.text).await {
        Ok(()) => Ok(()),
        // One bad message (a caller bug) must not end the connection.
        Err(FramingError::EmbeddedNewline) => {
            tracing::error!(len, "dropping an outgoing message that contains a newline");
            Ok(())
        }
        Err(e) => Err(into_io(e)),
    }
}

fn into_io(e: FramingError) -> io::Error {
    match e {
        FramingError::Io(e) => e,
        other => io::Error::other(other),
    }
}

/// Fuzzing entry point: the daemon's socket reader over a real socket pair.
/// The first byte picks the size limit, the second the write size; the rest
/// is what a client sends. Every frame must fit the limit and decode (or fail
/// to) without a panic, and the reader must end at EOF.
#[doc(hidden)]
pub fn fuzz_socket_reader(data: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let [limit, chunk, sent @ ..] = data else {
        return;
    };
    let limit = usize::from(*limit) * 16;
    let chunk = usize::from(*chunk).max(1);
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let sent = sent.to_vec();
    rt.block_on(async move {
        let Ok((mut client, daemon)) = UnixStream::pair() else {
            return;
        };
        let (read, _write) = daemon.into_split();
        let (tx, mut rx) = mpsc::channel(INBOUND_CAPACITY);
        let shared = Arc::new(Shared {
            stop: CancellationToken::new(),
            why: Mutex::new(None),
            tasks: TaskTracker::new(),
            pid: None,
        });
        let reader = tokio::spawn(read_loop(read, limit, tx, shared));
        tokio::spawn(async move {
            for part in sent.chunks(chunk) {
                if client.write_all(part).await.is_err() {
                    return;
                }
            }
        });
        while let Some(ev) = rx.recv().await {
            match ev {
                TransportEvent::Frame(line) => {
                    assert!(
                        line.len() <= limit.saturating_mul(3),
                        "a {}-byte frame",
                        line.len()
                    );
                    assert!(!line.contains('\n'));
                    let _ = crate::jsonrpc::decode(&line);
                }
                TransportEvent::Oversized { limit: l, .. } => assert_eq!(l, limit),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(
            matches!(reader.await, Ok(Ended::Eof)),
            "the reader did not end at EOF"
        );
    });
}
