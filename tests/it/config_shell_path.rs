//! `config::shell_path` against fake login shells: sh scripts that print rc
//! noise around the real answer and count their invocations.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mcphost::config::shell_path::{PathOrigin, ShellPathResolver};
use tempfile::TempDir;

/// Writing an executable while another test thread forks can make exec fail
/// with ETXTBSY; one test at a time avoids it (nextest runs them apart anyway).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const FALLBACK: &str = "/fallback/bin:/usr/bin:/bin";

struct FakeShell {
    dir: TempDir,
    shell: PathBuf,
}

impl FakeShell {
    /// `body` runs after the invocation is counted; `$2` is the command.
    fn new(body: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let shell = dir.path().join("fake-shell");
        let script = format!(
            "#!/bin/sh\nD='{}'\necho \"$1\" >> \"$D/calls\"\n{body}\n",
            dir.path().display()
        );
        std::fs::write(&shell, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&shell, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeShell { dir, shell }
    }

    fn resolver(&self) -> ShellPathResolver {
        ShellPathResolver::new(Some(self.shell.clone())).with_fallback(FALLBACK)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.file("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

const NOISY_LOGIN: &str = r#"
echo "Welcome back! (motd from .bash_profile)"
printf 'no newline here'
echo "rc noise on stderr" >&2
cat "/proc/$$/stat" > "$D/stat"
if read -r line; then echo data > "$D/stdin"; else echo eof > "$D/stdin"; fi
PATH="/login/bin:/opt/tool/bin:$PATH"
eval "$2"
echo "logout noise"
"#;

#[tokio::test]
async fn takes_path_from_the_login_shell_in_a_new_session() {
    let _serial = SERIAL.lock().await;
    let fake = FakeShell::new(NOISY_LOGIN);
    let resolver = fake.resolver();
    let resolved = resolver.resolve().await;
    assert_eq!(resolved.origin, PathOrigin::LoginShell, "{resolved:?}");
    assert!(
        resolved.path.starts_with("/login/bin:/opt/tool/bin:"),
        "{resolved:?}"
    );
    assert!(!resolved.path.contains("noise"), "{resolved:?}");
    assert_eq!(fake.calls(), ["-ilc"]);
    assert_eq!(
        std::fs::read_to_string(fake.file("stdin")).unwrap().trim(),
        "eof"
    );
    // /proc/PID/stat: "pid (comm) state ppid pgrp session ..."
    let stat = std::fs::read_to_string(fake.file("stat")).unwrap();
    let pid: i64 = stat.split_whitespace().next().unwrap().parse().unwrap();
    let after_comm: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let (pgrp, session): (i64, i64) = (
        after_comm[2].parse().unwrap(),
        after_comm[3].parse().unwrap(),
    );
    assert_eq!(session, pid, "the shell leads its own session");
    assert_eq!(pgrp, pid, "and its own process group");
}

#[tokio::test]
async fn asks_once_and_caches() {
    let _serial = SERIAL.lock().await;
    let fake = FakeShell::new(NOISY_LOGIN);
    let resolver = fake.resolver();
    let (a, b, c) = tokio::join!(resolver.resolve(), resolver.resolve(), resolver.resolve());
    assert_eq!(a, b);
    assert_eq!(b, c);
    let again = resolver.resolve().await;
    assert_eq!(again.origin, PathOrigin::LoginShell);
    assert_eq!(fake.calls().len(), 1, "the shell ran {:?}", fake.calls());
}

#[tokio::test]
async fn times_out_kills_the_group_and_falls_back() {
    let _serial = SERIAL.lock().await;
    // An rc file that hangs, with a child of its own holding stdout open.
    let fake =
        FakeShell::new("echo starting\nsleep 30 &\necho $! > \"$D/sleeper\"\nwait\neval \"$2\"");
    let resolver = fake.resolver().with_timeout(Duration::from_millis(400));
    let started = Instant::now();
    let resolved = resolver.resolve().await;
    let elapsed = started.elapsed();
    assert_eq!(resolved.origin, PathOrigin::Fallback);
    assert_eq!(resolved.path, FALLBACK);
    assert!(elapsed >= Duration::from_millis(400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");

    let sleeper: i32 = std::fs::read_to_string(fake.file("sleeper"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(sleeper) {
        assert!(
            Instant::now() < deadline,
            "the rc file's child {sleeper} survived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Cached too: no second shell, so no second wait.
    assert_eq!(resolver.resolve().await.origin, PathOrigin::Fallback);
    assert_eq!(fake.calls().len(), 1);
}

#[tokio::test]
async fn falls_back_when_the_shell_gives_no_answer() {
    let _serial = SERIAL.lock().await;
    for body in ["echo 'no markers at all'", "exit 3", "PATH=''; eval \"$2\""] {
        let fake = FakeShell::new(body);
        let resolver = fake.resolver();
        let resolved = resolver.resolve().await;
        assert_eq!(resolved.origin, PathOrigin::Fallback, "{body}");
        assert_eq!(resolved.path, FALLBACK, "{body}");
    }
    let none = ShellPathResolver::new(None).with_fallback(FALLBACK);
    assert_eq!(none.resolve().await.origin, PathOrigin::Fallback);
    let missing = ShellPathResolver::new(Some(Path::new("/nonexistent/shell").into()))
        .with_fallback(FALLBACK);
    assert_eq!(missing.resolve().await.path, FALLBACK);
}

#[tokio::test]
async fn real_shells_answer() {
    let _serial = SERIAL.lock().await;
    for shell in ["/bin/sh", "/bin/bash", "/usr/bin/zsh", "/usr/bin/fish"] {
        if !Path::new(shell).exists() {
            continue;
        }
        let resolver = ShellPathResolver::new(Some(shell.into()))
            .with_timeout(Duration::from_secs(10))
            .with_fallback("unused");
        let resolved = resolver.resolve().await;
        assert_eq!(
            resolved.origin,
            PathOrigin::LoginShell,
            "{shell}: {resolved:?}"
        );
        assert!(resolved.path.contains('/'), "{shell}: {resolved:?}");
    }
}

/// Gone, or a zombie waiting for a reaper that is not ours.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
