//! The supervisor process itself: forked from a host that had one thread,
//! so this is ordinary single-threaded Rust (it may allocate), with no
//! runtime. It waits in `poll` on the host's socket and on a self-pipe its
//! signal handler writes to, starts servers with `std::process::Command`,
//! reaps them, and kills every group it holds when the host is gone.

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};

use super::wire::{self, Reply, Request, SpawnRequest};

/// The self-pipe's write end, for the signal handler.
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// Linux: the host's death, through `PR_SET_PDEATHSIG` (a belt to the
/// socket's EOF, which is what normally tells).
#[cfg(target_os = "linux")]
const OWNER_DIED: libc::c_int = libc::SIGUSR1;

/// What the signal handler reports.
#[cfg(target_os = "linux")]
const SIGNALS: [libc::c_int; 2] = [libc::SIGCHLD, OWNER_DIED];
#[cfg(target_os = "macos")]
const SIGNALS: [libc::c_int; 1] = [libc::SIGCHLD];

/// Descriptors one `recvmsg` may carry: a request has at most four, and
/// a stream socket does not merge two requests' descriptors.
const MAX_FDS: usize = 32;

/// Runs the supervisor; never returns.
pub(super) fn run(sock: UnixStream, owner: libc::pid_t) -> ! {
    let code = match std::panic::catch_unwind(|| serve(sock, owner)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            eprintln!("mcphost: the process supervisor stops: {e}");
            1
        }
        Err(_) => 1,
    };
    // SAFETY: _exit ends this process without running the host's atexit
    // handlers or flushing buffers copied from it.
    unsafe { libc::_exit(code) }
}

fn serve(sock: UnixStream, owner: libc::pid_t) -> io::Result<()> {
    let wake = setup(&sock)?;
    let mut s = Supervisor {
        sock,
        wake,
        owner,
        held: HashSet::new(),
        strays: HashSet::new(),
        inbox: Vec::new(),
        fds: VecDeque::new(),
    };
    // Whatever ends the loop (the host gone, an error, a panic) takes
    // every group down with it: `Supervisor`'s Drop.
    s.serve()
}

/// Leaves the host's process group (a Ctrl-C for the host is not for us),
/// keeps only the descriptors it needs, and arms the signals.
fn setup(sock: &UnixStream) -> io::Result<OwnedFd> {
    // SAFETY: plain syscalls; the process has one thread.
    unsafe {
        libc::setpgid(0, 0);
    }
    close_inherited(sock.as_raw_fd())?;
    let (wake_read, wake_write) = io::pipe()?;
    let (wake_read, wake_write): (OwnedFd, OwnedFd) = (wake_read.into(), wake_write.into());
    for fd in [wake_read.as_raw_fd(), wake_write.as_raw_fd()] {
        set_flags(fd, libc::F_GETFL, libc::F_SETFL, libc::O_NONBLOCK)?;
    }
    // Lives as long as the process: the handler writes to it.
    WAKE.store(wake_write.as_raw_fd(), Ordering::SeqCst);
    std::mem::forget(wake_write);
    // SAFETY: installing a handler that only calls write(2), and
    // unblocking the signals it handles.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut action.sa_mask);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in SIGNALS {
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            libc::sigaddset(&mut set, sig);
        }
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        #[cfg(target_os = "linux")]
        if libc::prctl(libc::PR_SET_PDEATHSIG, OWNER_DIED as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(wake_read)
}

extern "C" fn on_signal(sig: libc::c_int) {
    let errno = Errno::last_raw();
    let byte = u8::try_from(sig).unwrap_or(0);
    // SAFETY: write(2) is async-signal-safe; a full pipe just drops the byte
    // (one already waiting wakes the loop all the same).
    unsafe {
        libc::write(WAKE.load(Ordering::Relaxed), (&raw const byte).cast(), 1);
    }
    Errno::set_raw(errno);
}

/// Whether the self-pipe's bytes (signal numbers) include the host's death.
fn reports_owner_died(bytes: &[u8]) -> bool {
    #[cfg(target_os = "linux")]
    return u8::try_from(OWNER_DIED).is_ok_and(|sig| bytes.contains(&sig));
    #[cfg(target_os = "macos")]
    {
        let _ = bytes;
        false
    }
}

/// Closes every inherited descriptor but stderr (for our few messages) and
/// the socket; stdin and stdout become /dev/null. Nothing of the host's (a
/// log, a lock, a pipe a parent waits on) stays open here.
fn close_inherited(keep: RawFd) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    let dir = "/proc/self/fd";
    #[cfg(target_os = "macos")]
    let dir = "/dev/fd";
    let open: Vec<RawFd> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if fd > 2 && fd != keep {
            // SAFETY: closing a descriptor nothing in this process uses (the
            // listing's own is already closed, and fails harmlessly).
            unsafe { libc::close(fd) };
        }
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in [0, 1] {
        // SAFETY: dup2 onto the standard descriptors.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn set_flags(fd: RawFd, get: libc::c_int, set: libc::c_int, flag: libc::c_int) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd, get);
        if flags < 0 || libc::fcntl(fd, set, flags | flag) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

struct Supervisor {
    sock: UnixStream,
    wake: OwnedFd,
    owner: libc::pid_t,
    /// Servers started and not yet reaped: each leads a group of its pid.
    held: HashSet<libc::pid_t>,
    /// Groups whose leader is reaped but that had members left (a server's
    /// children), until the host says it cleared them: the host may die
    /// first, and its death may reach a server (EOF on stdin) before us.
    strays: HashSet<libc::pid_t>,
    /// Bytes received that do not make a whole frame yet.
    inbox: Vec<u8>,
    /// Descriptors received, in order, not yet taken by a request.
    fds: VecDeque<OwnedFd>,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        for &pid in self.held.iter().chain(&self.strays) {
            // SAFETY: kill(2); the group's leader is our unreaped child, so
            // its id cannot belong to anyone else.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

impl Supervisor {
    /// Until the host is gone.
    fn serve(&mut self) -> io::Result<()> {
        loop {
            // SAFETY: getppid cannot fail.
            if unsafe { libc::getppid() } != self.owner {
                return Ok(());
            }
            let (host, woken) = {
                let mut fds = [
                    PollFd::new(self.sock.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.wake.as_fd(), PollFlags::POLLIN),
                ];
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) => {}
                    Err(Errno::EINTR) => continue,
                    Err(e) => return Err(e.into()),
                }
                let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
                (ready(&fds[0]), ready(&fds[1]))
            };
            // The host first: its EOF must be seen before any reaping.
            if host {
                if !self.receive()? {
                    return Ok(()); // EOF: the host is gone.
                }
                while let Some(request) = wire::take_frame::<Request>(&mut self.inbox)? {
                    if !self.handle(request)? {
                        return Ok(());
                    }
                }
            }
            if woken && !self.woken()? {
                return Ok(());
            }
        }
    }

    /// Drains the self-pipe and reaps; `false` when the host is gone.
    fn woken(&mut self) -> io::Result<bool> {
        // The host's death closes its ends of the servers' stdin too, and
        // a server may exit on that EOF before we read ours: reaping it
        // would drop its group (and the children in it) from those we kill.
        if self.host_gone() {
            return Ok(false);
        }
        let mut bytes = [0u8; 64];
        let mut owner_died = false;
        loop {
            // SAFETY: read(2) into a local buffer.
            let n = unsafe { libc::read(self.wake.as_raw_fd(), bytes.as_mut_ptr().cast(), 64) };
            let Ok(n) = usize::try_from(n) else { break };
            if n == 0 {
                break;
            }
            owner_died |= reports_owner_died(&bytes[..n]);
        }
        if owner_died {
            return Ok(false);
        }
        self.reap()
    }

    /// Whether the host's end of the socket is closed, without waiting.
    fn host_gone(&self) -> bool {
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::empty())];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
            && fds[0]
                .revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
    }

    /// Reaps every child that ended and tells the host how each did. All
    /// children of this process are servers it started. `false` when the
    /// host is gone.
    fn reap(&mut self) -> io::Result<bool> {
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own children.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            match pid {
                0 => return Ok(true),
                -1 => match Errno::last() {
                    Errno::EINTR => {}
                    _ => return Ok(true), // ECHILD: none left
                },
                pid if self.held.contains(&pid) => {
                    // Kept while the host may not know: a host gone now
                    // leaves its group (its children) to the final kill.
                    if !self.reply(&Reply::Exited { pid, status })? {
                        return Ok(false);
                    }
                    self.held.remove(&pid);
                    // SAFETY: kill(2) with signal 0 only asks whether the
                    // group has members; they keep its id reserved.
                    if unsafe { libc::kill(-pid, 0) } == 0 {
                        self.strays.insert(pid);
                    }
                }
                _ => {}
            }
        }
    }

    /// One `recvmsg`; `false` at EOF.
    fn receive(&mut self) -> io::Result<bool> {
        let mut buf = [0u8; 16 * 1024];
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        let (n, fds) = loop {
            let mut iov = [IoSliceMut::new(&mut buf)];
            match recvmsg::<()>(
                self.sock.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::empty(),
            ) {
                Ok(msg) => {
                    let mut fds = Vec::new();
                    for cmsg in msg.cmsgs()? {
                        if let ControlMessageOwned::ScmRights(got) = cmsg {
                            fds.extend(got);
                        }
                    }
                    break (msg.bytes, fds);
                }
                Err(Errno::EINTR) => {}
                // The host died with our replies unread.
                Err(Errno::ECONNRESET) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        };
        for fd in fds {
            // SAFETY: the kernel just gave us this descriptor.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // Never inherited by a server but where it is meant to go.
            set_flags(
                fd.as_raw_fd(),
                libc::F_GETFD,
                libc::F_SETFD,
                libc::FD_CLOEXEC,
            )?;
            self.fds.push_back(fd);
        }
        self.inbox.extend_from_slice(&buf[..n]);
        Ok(n > 0)
    }

    /// `false` when the host is gone.
    fn handle(&mut self, request: Request) -> io::Result<bool> {
        match request {
            Request::Spawn(req) => {
                let count = req.fds();
                if self.fds.len() < count {
                    return Err(io::Error::other(
                        "a spawn request came without its descriptors",
                    ));
                }
                let fds: Vec<OwnedFd> = self.fds.drain(..count).collect();
                let id = req.id;
                let reply = match spawn(req, fds) {
                    Ok(pid) => {
                        self.held.insert(pid);
                        Reply::Spawned { id, pid }
                    }
                    Err(e) => Reply::Failed {
                        id,
                        errno: e.raw_os_error(),
                        message: e.to_string(),
                    },
                };
                self.reply(&reply)
            }
            Request::Signal { pid, signal } => {
                // Only a group whose leader we have not reaped: its id is
                // still ours, whatever the host has or has not heard yet.
                if self.held.contains(&pid) {
                    // SAFETY: kill(2) on a group we hold.
                    unsafe { libc::kill(-pid, signal) };
                }
                Ok(true)
            }
            Request::Release { pid } => {
                self.strays.remove(&pid);
                Ok(true)
            }
        }
    }

    /// Sends a reply; `false` when the host is gone.
    fn reply(&mut self, reply: &Reply) -> io::Result<bool> {
        match wire::write_frame(&mut self.sock, reply) {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Starts one server as the leader of a new group. std resets the signal
/// mask and SIGPIPE in the child, and reports an exec failure as an error.
fn spawn(req: SpawnRequest, fds: Vec<OwnedFd>) -> io::Result<libc::pid_t> {
    let mut fds = fds.into_iter();
    let mut next = || {
        fds.next()
            .ok_or_else(|| io::Error::other("missing descriptor"))
    };
    let (stdin, stdout, stderr) = (next()?, next()?, next()?);
    let mut command = Command::new(OsStr::from_bytes(&req.program));
    command
        .arg0(OsStr::from_bytes(&req.arg0))
        .args(req.args.iter().map(|a| OsStr::from_bytes(a)))
        .env_clear()
        .envs(
            req.env
                .iter()
                .map(|(k, v)| (OsStr::from_bytes(k), OsStr::from_bytes(v))),
        )
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .process_group(0);
    if let Some(dir) = &req.cwd {
        command.current_dir(OsStr::from_bytes(dir));
    }
    #[cfg(target_os = "linux")]
    if let Some(sandbox) = &req.sandbox {
        let ruleset = if sandbox.landlock {
            Some(next()?)
        } else {
            None
        };
        let seccomp = sandbox.seccomp.as_ref().map(|program| {
            program
                .iter()
                .map(|&(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
                .collect()
        });
        let prepared = crate::sandbox::linux::Prepared::from_parts(ruleset, seccomp);
        // SAFETY: `apply` makes only async-signal-safe syscalls (this
        // process has one thread anyway).
        unsafe {
            command.pre_exec(move || prepared.apply());
        }
    }
    let child = command.spawn()?;
    libc::pid_t::try_from(child.id()).map_err(io::Error::other)
}
