//! One small process that starts and holds every stdio server.
//!
//! [`start`] forks it while the host still has one thread (the daemon's and
//! the CLI's `main`, before the runtime exists), so it is a small copy of a
//! small process rather than of a grown daemon, and ordinary Rust without a
//! runtime ([`process`]). The two talk over a socket pair that only they
//! hold (close-on-exec on both sides): a spawn request carries the program,
//! arguments, environment, working directory and prepared sandbox, with the
//! server's three pipe ends (and the Landlock ruleset) as `SCM_RIGHTS`; the
//! supervisor answers with the server's pid (the leader of a group of its
//! own) and later with its raw exit status ([`wire`]).
//!
//! - The host dies, even by SIGKILL: its end closes, the supervisor sees
//!   EOF (Linux also gets `PR_SET_PDEATHSIG`, and every wake-up checks
//!   `getppid`), SIGKILLs every group it holds, grandchildren included,
//!   and exits. It holds a group from the spawn until the host releases it
//!   (the leader reaped and the group found empty), not only until the
//!   leader exits: a dying host closes the servers' stdin before (or as)
//!   its socket, so a server may exit on that EOF first, leaving children.
//! - The supervisor dies: the host's reader thread sees EOF, SIGKILLs every
//!   group it knew, fails their exit waits, logs why, and later spawns go
//!   back to a watchdog per server (`stdio`'s fallback).
//! - Signals for a group go through the supervisor: it reaps and signals in
//!   one thread, so it never signals a group whose leader it already
//!   reaped (whose id the kernel may have given away), which the host,
//!   hearing of the exit a moment later, could.
//!
//! A host that never calls [`start`] (the C library, an embedded engine,
//! tests) keeps the per-server watchdog.

mod process;
mod wire;

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd as _, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;
use std::sync::{Arc, OnceLock};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::socket::{ControlMessage, MsgFlags, UnixAddr, sendmsg};
use nix::unistd::Pid;
use parking_lot::Mutex;
use tokio::sync::oneshot;

#[cfg(target_os = "linux")]
pub(crate) use wire::Sandbox as WireSandbox;
pub(crate) use wire::SpawnRequest;
use wire::{Reply, Request};

static SUPERVISOR: OnceLock<Arc<Supervisor>> = OnceLock::new();

/// Starts the process supervisor; every stdio server spawned afterwards in
/// this process runs under it. Call it first thing in `main`, before any
/// thread exists (a runtime, a logger's): it forks, and the copy runs
/// ordinary code. Refused (on Linux) once the process has a second thread;
/// a second call does nothing.
pub fn start() -> io::Result<()> {
    if SUPERVISOR.get().is_some() {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    if threads()? > 1 {
        return Err(io::Error::other(
            "the process supervisor must be started before any thread",
        ));
    }
    let (ours, theirs) = UnixStream::pair()?;
    no_sigpipe(&ours)?;
    no_sigpipe(&theirs)?;
    let owner = nix::unistd::getpid().as_raw();
    // SAFETY: the process has one thread, so the child may run any code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            drop(ours);
            process::run(theirs, owner)
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(theirs);
            let reader = ours.try_clone()?;
            let supervisor = Arc::new(Supervisor {
                pid: child,
                writer: Mutex::new(ours),
                state: Mutex::new(State::default()),
            });
            let s = supervisor.clone();
            std::thread::Builder::new()
                .name("mcphost-supervisor".into())
                .spawn(move || s.read_replies(reader))?;
            let _ = SUPERVISOR.set(supervisor);
            Ok(())
        }
    }
}

/// Whether this process started the supervisor and it still runs.
pub fn is_running() -> bool {
    current().is_some()
}

/// The supervisor, while it runs.
pub(crate) fn current() -> Option<Arc<Supervisor>> {
    SUPERVISOR.get().filter(|s| !s.state.lock().gone).cloned()
}

/// The process's thread count, from /proc.
#[cfg(target_os = "linux")]
fn threads() -> io::Result<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // After "pid (comm) ": state is field 3, num_threads field 20.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(17)?.parse().ok())
        .ok_or_else(|| io::Error::other("cannot read the thread count"))
}

/// A write to a closed socket is EPIPE, never SIGPIPE (macOS; Linux sends
/// with MSG_NOSIGNAL).
fn no_sigpipe(sock: &UnixStream) -> io::Result<()> {
    #[cfg(target_os = "macos")]
    {
        let on: libc::c_int = 1;
        // SAFETY: setsockopt with a c_int option on our socket.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_NOSIGPIPE,
                (&raw const on).cast(),
                libc::socklen_t::try_from(size_of::<libc::c_int>()).unwrap_or(4),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let _ = sock;
    Ok(())
}

#[cfg(target_os = "linux")]
const SEND_FLAGS: MsgFlags = MsgFlags::MSG_NOSIGNAL;
#[cfg(target_os = "macos")]
const SEND_FLAGS: MsgFlags = MsgFlags::empty();

/// The host's side.
pub(crate) struct Supervisor {
    pid: Pid,
    writer: Mutex<UnixStream>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Spawn requests not answered yet.
    pending: HashMap<u64, Pending>,
    /// Servers running, by pid: where their exit status goes.
    live: HashMap<i32, ExitSender>,
    /// The supervisor is gone: nothing more is sent.
    gone: bool,
}

type ExitSender = oneshot::Sender<io::Result<ExitStatus>>;

struct Pending {
    reply: oneshot::Sender<io::Result<i32>>,
    exit: ExitSender,
}

/// A server the supervisor started.
pub(crate) struct Started {
    pub pid: i32,
    /// Its exit status once reaped; an error if the supervisor died first.
    pub exit: oneshot::Receiver<io::Result<ExitStatus>>,
}

/// How a spawn through the supervisor went.
pub(crate) enum Outcome {
    Started(Started),
    /// The supervisor could not start it (the exec failed, say).
    Failed(io::Error),
    /// The supervisor is gone: start it another way.
    Gone,
}

impl Supervisor {
    /// Starts one server; `fds` are its stdin, stdout and stderr ends (and
    /// the ruleset), still ours to close afterwards.
    pub(crate) async fn spawn(&self, mut req: SpawnRequest, fds: &[RawFd]) -> Outcome {
        let (reply_tx, reply_rx) = oneshot::channel();
        let (exit_tx, exit_rx) = oneshot::channel();
        {
            let mut state = self.state.lock();
            if state.gone {
                return Outcome::Gone;
            }
            state.next_id = state.next_id.wrapping_add(1);
            req.id = state.next_id;
            state.pending.insert(
                req.id,
                Pending {
                    reply: reply_tx,
                    exit: exit_tx,
                },
            );
        }
        let id = req.id;
        if let Err(e) = wire::encode(&Request::Spawn(req)).and_then(|f| self.send(&f, fds)) {
            self.state.lock().pending.remove(&id);
            tracing::debug!("sending a spawn request to the process supervisor: {e}");
            return Outcome::Gone;
        }
        // A caller that stops waiting drops `reply_rx`: the reader thread
        // then kills the server it is told of.
        match reply_rx.await {
            Ok(Ok(pid)) => Outcome::Started(Started { pid, exit: exit_rx }),
            Ok(Err(e)) => Outcome::Failed(e),
            Err(_) => Outcome::Gone,
        }
    }

    /// Signals the group led by `pid` if the supervisor has not reaped its
    /// leader. Blocking, but a few bytes to a process that reads at once.
    pub(crate) fn signal(&self, pid: Pid, signal: Signal) -> io::Result<()> {
        if self.state.lock().gone {
            return Err(io::Error::other("the process supervisor is gone"));
        }
        let frame = wire::encode(&Request::Signal {
            pid: pid.as_raw(),
            signal: signal as i32,
        })?;
        self.send(&frame, &[])
    }

    /// The group of `pid`, whose leader has exited, is empty now.
    pub(crate) fn release(&self, pid: Pid) {
        if self.state.lock().gone {
            return;
        }
        let sent = wire::encode(&Request::Release { pid: pid.as_raw() })
            .and_then(|frame| self.send(&frame, &[]));
        if let Err(e) = sent {
            tracing::debug!(pgid = pid.as_raw(), "releasing a group: {e}");
        }
    }

    fn send(&self, frame: &[u8], fds: &[RawFd]) -> io::Result<()> {
        let writer = self.writer.lock();
        let mut sent = 0;
        while sent < frame.len() {
            let rights = [ControlMessage::ScmRights(fds)];
            // The descriptors go with the first bytes, once.
            let cmsgs: &[ControlMessage] = if sent == 0 && !fds.is_empty() {
                &rights
            } else {
                &[]
            };
            let rest = [IoSlice::new(&frame[sent..])];
            match sendmsg::<UnixAddr>(writer.as_raw_fd(), &rest, cmsgs, SEND_FLAGS, None) {
                Ok(n) => sent = sent.saturating_add(n),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The reader thread: every reply until the supervisor is gone.
    fn read_replies(self: Arc<Self>, mut from: UnixStream) {
        let mut buf = Vec::new();
        let why = loop {
            match wire::read_frame::<Reply>(&mut from, &mut buf) {
                Ok(Some(reply)) => self.dispatch(reply),
                Ok(None) => break "closed its socket".to_owned(),
                Err(e) => break format!("its socket failed: {e}"),
            }
        };
        self.lost(&why);
    }

    fn dispatch(self: &Arc<Self>, reply: Reply) {
        match reply {
            Reply::Spawned { id, pid } => {
                let pending = {
                    let mut state = self.state.lock();
                    let pending = state.pending.remove(&id);
                    pending.map(|p| {
                        state.live.insert(pid, p.exit);
                        p.reply
                    })
                };
                let abandoned = pending.is_none_or(|reply| reply.send(Ok(pid)).is_err());
                if abandoned {
                    // Nobody owns this server. Not from this thread: a send
                    // may wait for the supervisor, which may wait for us.
                    let s = self.clone();
                    let _ = std::thread::Builder::new()
                        .name("mcphost-supervisor-kill".into())
                        .spawn(move || s.signal(Pid::from_raw(pid), Signal::SIGKILL));
                }
            }
            Reply::Failed { id, errno, message } => {
                let pending = self.state.lock().pending.remove(&id);
                if let Some(p) = pending {
                    let e = match errno {
                        Some(errno) => io::Error::from_raw_os_error(errno),
                        None => io::Error::other(message),
                    };
                    let _ = p.reply.send(Err(e));
                }
            }
            Reply::Exited { pid, status } => {
                let waiter = self.state.lock().live.remove(&pid);
                if let Some(tx) = waiter {
                    let _ = tx.send(Ok(ExitStatus::from_raw(status)));
                }
            }
        }
    }

    /// The supervisor is gone: its servers are orphans now, so kill every
    /// group we know of, and say so.
    fn lost(&self, why: &str) {
        let (live, pending) = {
            let mut state = self.state.lock();
            state.gone = true;
            (
                std::mem::take(&mut state.live),
                std::mem::take(&mut state.pending),
            )
        };
        for &pid in live.keys() {
            match killpg(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(e) => tracing::error!(pgid = pid, "cannot kill a server's group: {e}"),
            }
        }
        let count = live.len();
        for (_, tx) in live {
            let _ = tx.send(Err(io::Error::other("its process supervisor died")));
        }
        for (_, p) in pending {
            let _ = p
                .reply
                .send(Err(io::Error::other("the process supervisor died")));
        }
        let how = self.reap();
        tracing::error!(
            pid = self.pid.as_raw(),
            "the process supervisor {how} ({why}); killed the {count} server(s) it held; \
             servers start under a watchdog each from now on"
        );
    }

    /// Reaps the supervisor (our child); how it ended.
    fn reap(&self) -> String {
        use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
        let mut status = waitpid(self.pid, Some(WaitPidFlag::WNOHANG));
        if matches!(status, Ok(WaitStatus::StillAlive)) {
            // Alive without its socket is no use: end it.
            let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
            status = waitpid(self.pid, None);
        }
        match status {
            Ok(WaitStatus::Exited(_, code)) => format!("exited with status {code}"),
            Ok(WaitStatus::Signaled(_, sig, _)) => format!("was killed by {sig}"),
            Ok(other) => format!("ended ({other:?})"),
            Err(e) => format!("is gone (cannot wait for it: {e})"),
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[test]
    fn a_process_with_threads_is_refused() {
        // The test harness runs tests on threads of their own.
        assert!(super::threads().unwrap() > 1);
        let e = super::start().unwrap_err();
        assert!(e.to_string().contains("before any thread"), "{e}");
        assert!(!super::is_running());
    }
}
