//! Connecting to a socket as another uid (65534, via `setpriv`), for the
//! peer-uid checks. Needs root, util-linux's `setpriv` and `python3`: the
//! tests that use it are `#[ignore]`d ("needs a second uid"), run by the test script
//! (`--run-ignored all`), and a missing one fails them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Connects, sends a ping line and prints REPLY, CLOSED or TIMEOUT.
const PY_CLIENT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.settimeout(5)
try:
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    data = s.recv(4096)
    print("REPLY" if data else "CLOSED")
except (ConnectionResetError, BrokenPipeError):
    print("CLOSED")
except socket.timeout:
    print("TIMEOUT")
"#;

pub struct OtherUid {
    setpriv: PathBuf,
    python: PathBuf,
}

fn find_program(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

pub fn our_uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

impl OtherUid {
    /// The tools; a test that asks for them cannot run without them.
    pub fn get(test: &str) -> OtherUid {
        match (find_program("setpriv"), find_program("python3")) {
            (Some(setpriv), Some(python)) if our_uid() == 0 => OtherUid { setpriv, python },
            (Some(_), Some(_)) => panic!("{test} cannot run: switching uid needs root"),
            _ => panic!("{test} cannot run: setpriv (util-linux) or python3 is missing"),
        }
    }

    /// Runs the Python client against `socket`, as uid/gid 65534 when
    /// `nobody`; its verdict (REPLY, CLOSED, TIMEOUT) and pid.
    pub async fn ping(&self, socket: &Path, nobody: bool) -> (String, u32) {
        let mut cmd = if nobody {
            let mut cmd = tokio::process::Command::new(&self.setpriv);
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&self.python);
            cmd
        } else {
            tokio::process::Command::new(&self.python)
        };
        cmd.arg("-c").arg(PY_CLIENT).arg(socket);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap();
        // setpriv execs Python in place, so this is also Python's pid.
        let pid = child.id().unwrap();
        let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
            .await
            .expect("the socket client did not finish")
            .unwrap();
        assert!(
            out.status.success(),
            "client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (String::from_utf8_lossy(&out.stdout).trim().to_owned(), pid)
    }
}

/// Lets other uids reach `socket`: the socket 0666 and every directory from
/// its parent up to `top` 0755. The daemon never does this; tests do it to
/// its files so that the peer-uid check is what must refuse them.
pub fn loosen(socket: &Path, top: &Path) {
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut dir = socket.parent();
    while let Some(d) = dir {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        if d == top {
            return;
        }
        dir = d.parent();
    }
    panic!("{} is not under {}", socket.display(), top.display());
}

/// The line the daemon logs when it refuses uid 65534's process `pid`.
pub fn refusal_line(pid: u32) -> String {
    format!("refused a connection from uid 65534 (pid {pid}): not the daemon's user")
}
