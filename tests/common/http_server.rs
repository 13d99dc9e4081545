//! Real MCP servers listening on HTTP, each on a free port of its own, for
//! the tests (tests/it/http_interop.rs and others) and benches/http.rs (there with `#[path]`).
//!
//! A port is picked by binding 127.0.0.1:0 and closing the socket, then given
//! to the server. Readiness is polled: a TCP connect to the port must succeed
//! and the listening socket must belong to the server process itself (so a
//! port taken by someone else in between is never mistaken for ours). A
//! server that exits before listening (its port was taken in between) is
//! started again on another port, up to 5 times. Each server runs in its own
//! process group, killed on drop.
#![allow(dead_code)]

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How many ports to try before giving up.
const ATTEMPTS: usize = 5;

/// A running HTTP server; its process group is SIGKILLed and reaped on drop.
pub struct HttpServer {
    pub name: String,
    pub port: u16,
    group: Group,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// A child that leads its own process group; the group is SIGKILLed and the
/// child reaped on drop.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        // process_group(0): the child's pid is the group id.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.0.wait();
    }
}

/// A port that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

fn read_log(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

impl HttpServer {
    /// Starts `make(port)` on a free port (stdout and stderr go to a log
    /// file) and waits up to `limit` for it to listen there.
    pub fn start(
        name: &str,
        limit: Duration,
        make: impl Fn(u16) -> Command,
    ) -> Result<HttpServer, String> {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let port = free_port().map_err(|e| format!("{name}: no free port: {e}"))?;
            match Self::attempt(name, port, limit, &make) {
                Ok(server) => return Ok(server),
                Err(Taken(why)) => last = why, // next port
                Err(Failed(why)) => return Err(why),
            }
        }
        Err(format!(
            "{name}: no port worked in {ATTEMPTS} attempts; last: {last}"
        ))
    }

    /// Starts `make(port)` on this very port (a server that comes back where
    /// it was), once.
    pub fn start_on(
        name: &str,
        port: u16,
        limit: Duration,
        make: impl Fn(u16) -> Command,
    ) -> Result<HttpServer, String> {
        Self::attempt(name, port, limit, &make).map_err(|(Taken(why) | Failed(why))| why)
    }

    fn attempt(
        name: &str,
        port: u16,
        limit: Duration,
        make: &impl Fn(u16) -> Command,
    ) -> Result<HttpServer, StartError> {
        let dir = tempfile::tempdir().map_err(|e| Failed(e.to_string()))?;
        let log = dir.path().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).map_err(|e| Failed(e.to_string()))?;
        let err = file.try_clone().map_err(|e| Failed(e.to_string()))?;
        let mut cmd = make(port);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .process_group(0);
        let child = cmd
            .spawn()
            .map_err(|e| Failed(format!("{name}: cannot start {cmd:?}: {e}")))?;
        let mut group = Group(child);
        // On an error `group` is dropped here: the process group is killed.
        wait_listening(name, &mut group.0, port, &log, limit)?;
        Ok(HttpServer {
            name: name.to_owned(),
            port,
            group,
            log,
            _dir: dir,
        })
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.group.0.id()
    }

    /// Everything the server printed so far.
    pub fn log_text(&self) -> String {
        read_log(&self.log)
    }

    /// Polls the log until it contains `needle`; false after `limit`.
    pub fn wait_log(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.log_text().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn wait_listening(
    name: &str,
    child: &mut Child,
    port: u16,
    log: &Path,
    limit: Duration,
) -> Result<(), StartError> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().ok().flatten() {
            // Most likely the port was taken in between (node reports "Port N
            // is already in use", uvicorn "address already in use"; the
            // legacy SSE mode of server-everything just exits with 0): try
            // another port; a server that is really broken fails every time.
            return Err(Taken(format!(
                "{name} exited with {status} before listening on port {port}; its log:\n{}",
                read_log(log)
            )));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return if listens(child.id(), port) {
                Ok(())
            } else {
                Err(Taken(format!(
                    "port {port} answers, but not from {name} (pid {})",
                    child.id()
                )))
            };
        }
        if Instant::now() >= deadline {
            return Err(Failed(format!(
                "{name} did not listen on port {port} within {limit:?}; its log:\n{}",
                read_log(log)
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

enum StartError {
    /// The port was taken, or the server exited: try another port.
    Taken(String),
    /// Not listening in time.
    Failed(String),
}
use StartError::{Failed, Taken};

/// Whether process `pid` holds a socket listening on TCP `port`
/// (/proc/net/tcp{,6} for the socket's inode, /proc/PID/fd for the owner).
fn listens(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue; // not LISTEN
            }
            let local_port = f[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                inodes.push(format!("socket:[{}]", f[9]));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .map(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
            .unwrap_or(false)
    })
}
