//! Which language runtime a stdio server's command needs, and its version.
//!
//! Most servers are started through a launcher (`npx`, `uvx`, `docker
//! run`) or a script whose shebang names an interpreter; when that runtime
//! is missing or too old the server fails with a message about something
//! else. [`detect`] names the runtime from the command's name and, failing
//! that, from the shebang of the resolved file; [`version`] asks it for its
//! version with the `PATH` the server would get.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// A runtime servers commonly need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// `node`, `npx`, `npm`.
    Node,
    /// `uv`, `uvx`.
    Uv,
    /// `python3`, `python`.
    Python,
    Docker,
    Deno,
    /// `bun`, `bunx`.
    Bun,
}

impl Runtime {
    /// The name people know it by.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Node => "Node.js",
            Runtime::Uv => "uv",
            Runtime::Python => "Python",
            Runtime::Docker => "Docker",
            Runtime::Deno => "Deno",
            Runtime::Bun => "Bun",
        }
    }

    /// The program whose `--version` tells the runtime's version.
    pub fn program(self) -> &'static str {
        match self {
            Runtime::Node => "node",
            Runtime::Uv => "uv",
            Runtime::Python => "python3",
            Runtime::Docker => "docker",
            Runtime::Deno => "deno",
            Runtime::Bun => "bun",
        }
    }

    /// The oldest (major, minor) MCP servers run on: the official SDKs
    /// need Node.js 18 and Python 3.10.
    pub fn minimum(self) -> Option<(u64, u64)> {
        match self {
            Runtime::Node => Some((18, 0)),
            Runtime::Python => Some((3, 10)),
            _ => None,
        }
    }

    /// The runtime a program of this file name belongs to.
    pub fn of_program(file_name: &str) -> Option<Runtime> {
        let base = file_name.strip_suffix(".exe").unwrap_or(file_name);
        Some(match base {
            "node" | "nodejs" | "npx" | "npm" | "pnpm" | "pnpx" | "yarn" => Runtime::Node,
            "uv" | "uvx" => Runtime::Uv,
            "docker" => Runtime::Docker,
            "deno" => Runtime::Deno,
            "bun" | "bunx" => Runtime::Bun,
            _ if is_python(base) => Runtime::Python,
            _ => return None,
        })
    }
}

/// `python`, `python3`, `python3.12`.
fn is_python(base: &str) -> bool {
    base.strip_prefix("python").is_some_and(|v| {
        v.chars().all(|c| c.is_ascii_digit() || c == '.')
            && !v.starts_with('.')
            && !v.ends_with('.')
    })
}

/// How a runtime was recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// The command's own name (`npx`, `uvx`).
    Command,
    /// The `#!` line of the resolved file names this interpreter.
    Shebang(String),
}

/// A runtime a command needs, and the program to ask for its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub runtime: Runtime,
    /// A name to look up in `PATH`, or an absolute path (a shebang's).
    pub program: String,
    pub via: Via,
}

/// The runtime `command` needs: from its file name, else from the shebang
/// of `resolved` (the file `command` resolves to, if it does).
pub fn detect(command: &str, resolved: Option<&Path>) -> Option<Detected> {
    let base = Path::new(command)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(runtime) = Runtime::of_program(&base) {
        // npx and npm report npm's version; Node.js is what must be new enough.
        let program = match runtime {
            Runtime::Node => Runtime::Node.program().to_owned(),
            _ => resolved.map_or_else(|| command.to_owned(), |p| p.display().to_string()),
        };
        return Some(Detected {
            runtime,
            program,
            via: Via::Command,
        });
    }
    let interpreter = shebang_interpreter(&read_head(resolved?)?)?;
    let name = Path::new(&interpreter)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())?;
    let runtime = Runtime::of_program(&name)?;
    Some(Detected {
        runtime,
        program: interpreter.clone(),
        via: Via::Shebang(interpreter),
    })
}

/// The first bytes of a file, enough for a `#!` line.
fn read_head(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut buf = [0u8; 256];
    let mut f = std::fs::File::open(path).ok()?;
    let n = f.read(&mut buf).ok()?;
    let head = buf.get(..n)?;
    head.starts_with(b"#!")
        .then(|| String::from_utf8_lossy(head).into_owned())
}

/// The interpreter a `#!` line runs: `#!/usr/bin/python3` → `/usr/bin/python3`;
/// through env (`#!/usr/bin/env node`, `#!/usr/bin/env -S deno run -A`) →
/// the program env looks up (`node`, `deno`).
pub fn shebang_interpreter(text: &str) -> Option<String> {
    let line = text.strip_prefix("#!")?.lines().next()?.trim();
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if Path::new(first).file_name().is_some_and(|f| f == "env") {
        // Skip env's options (-S, -i, -u NAME) and NAME=VALUE assignments.
        let mut skip_next = false;
        for w in words {
            if skip_next {
                skip_next = false;
                continue;
            }
            match w {
                "-u" | "--unset" | "-C" | "--chdir" => skip_next = true,
                w if w.starts_with('-') || w.contains('=') => {}
                w => return Some(w.to_owned()),
            }
        }
        return None;
    }
    Some(first.to_owned())
}

/// A runtime's answer to `--version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The executable asked.
    pub program: PathBuf,
    /// Its first line of output, e.g. `Python 3.12.3`, `v20.11.1`.
    pub text: String,
    /// The first dotted number in `text` (major, minor), if any.
    pub number: Option<(u64, u64)>,
}

impl Version {
    /// Whether it is older than `runtime`'s minimum.
    pub fn too_old(&self, runtime: Runtime) -> bool {
        matches!((self.number, runtime.minimum()), (Some(have), Some(min)) if have < min)
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    #[error("'{program}' is not in PATH \"{path}\"")]
    NotFound { program: String, path: String },
    #[error("'{}' could not be run: {source}", program.display())]
    Run {
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("'{}' did not answer within {limit:?}", program.display())]
    Timeout { program: PathBuf, limit: Duration },
    #[error("'{}' failed ({status}): {stderr}", program.display())]
    Failed {
        program: PathBuf,
        status: String,
        stderr: String,
    },
}

/// Runs `program --version` with `PATH` set to `path` (looked up there when
/// not absolute), at most `limit` long.
pub async fn version(program: &str, path: &str, limit: Duration) -> Result<Version, RuntimeError> {
    let (exe, text) = first_line(program, &["--version"], path, limit).await?;
    Ok(Version {
        program: exe,
        number: version_number(&text),
        text,
    })
}

/// Whether the Docker engine answers (not only the `docker` client is
/// installed): its server version.
pub async fn docker_engine(
    program: &str,
    path: &str,
    limit: Duration,
) -> Result<String, RuntimeError> {
    let (_, text) = first_line(
        program,
        &["version", "--format", "{{.Server.Version}}"],
        path,
        limit,
    )
    .await?;
    Ok(text)
}

/// Runs `program args` and returns the first non-empty line of its output.
async fn first_line(
    program: &str,
    args: &[&str],
    path: &str,
    limit: Duration,
) -> Result<(PathBuf, String), RuntimeError> {
    let not_found = || RuntimeError::NotFound {
        program: program.to_owned(),
        path: path.to_owned(),
    };
    let cwd = std::env::current_dir().map_err(|_| not_found())?;
    let exe = which::which_in(program, Some(path), cwd).map_err(|_| not_found())?;
    let mut cmd = tokio::process::Command::new(&exe);
    cmd.args(args)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|source| RuntimeError::Run {
        program: exe.clone(),
        source,
    })?;
    let out = match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(source)) => {
            return Err(RuntimeError::Run {
                program: exe,
                source,
            });
        }
        Err(_) => {
            return Err(RuntimeError::Timeout {
                program: exe,
                limit,
            });
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(RuntimeError::Failed {
            program: exe,
            status: out.status.to_string(),
            stderr: stderr
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_owned(),
        });
    }
    // Some print their version on stderr (old Pythons).
    let text = stdout
        .lines()
        .chain(stderr.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_owned();
    Ok((exe, text))
}

/// The first `MAJOR.MINOR` in `text`: `v20.11.1` → (20, 11),
/// `Docker version 27.1.1, build` → (27, 1), `uv 0.5.1 (…)` → (0, 5).
pub fn version_number(text: &str) -> Option<(u64, u64)> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let mut parts = text[start..]
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()?
        .split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_from_program_names() {
        assert_eq!(Runtime::of_program("npx"), Some(Runtime::Node));
        assert_eq!(Runtime::of_program("uvx"), Some(Runtime::Uv));
        assert_eq!(Runtime::of_program("python3.12"), Some(Runtime::Python));
        assert_eq!(Runtime::of_program("python"), Some(Runtime::Python));
        assert_eq!(Runtime::of_program("pythonic"), None);
        assert_eq!(Runtime::of_program("python3."), None);
        assert_eq!(Runtime::of_program("bunx"), Some(Runtime::Bun));
        assert_eq!(Runtime::of_program("docker"), Some(Runtime::Docker));
        assert_eq!(Runtime::of_program("mcp-server-time"), None);
    }

    #[test]
    fn shebangs_name_their_interpreter() {
        assert_eq!(
            shebang_interpreter("#!/usr/bin/env node\nconsole.log(1)").as_deref(),
            Some("node")
        );
        assert_eq!(
            shebang_interpreter("#!/usr/bin/env -S deno run -A\n").as_deref(),
            Some("deno")
        );
        assert_eq!(
            shebang_interpreter("#! /opt/venv/bin/python3\n").as_deref(),
            Some("/opt/venv/bin/python3")
        );
        assert_eq!(
            shebang_interpreter("#!/usr/bin/env -u X FOO=1 python3").as_deref(),
            Some("python3")
        );
        assert_eq!(shebang_interpreter("#!/usr/bin/env\n"), None);
        assert_eq!(shebang_interpreter("echo hi"), None);
    }

    #[test]
    fn version_numbers() {
        assert_eq!(version_number("v20.11.1"), Some((20, 11)));
        assert_eq!(version_number("Python 3.9.2"), Some((3, 9)));
        assert_eq!(
            version_number("Docker version 27.1.1, build x"),
            Some((27, 1))
        );
        assert_eq!(version_number("uv 0.5.1 (abc 2024-10-01)"), Some((0, 5)));
        assert_eq!(version_number("1"), Some((1, 0)));
        assert_eq!(version_number("none"), None);
        let v = |n| Version {
            program: PathBuf::from("node"),
            text: String::new(),
            number: Some(n),
        };
        assert!(v((16, 20)).too_old(Runtime::Node));
        assert!(!v((18, 0)).too_old(Runtime::Node));
        assert!(v((3, 9)).too_old(Runtime::Python));
        assert!(!v((3, 12)).too_old(Runtime::Python));
        assert!(!v((0, 1)).too_old(Runtime::Uv));
    }

    #[test]
    fn detects_from_the_command_then_the_shebang() {
        let d = detect("/usr/local/bin/npx", Some(Path::new("/usr/local/bin/npx"))).unwrap();
        assert_eq!((d.runtime, d.program.as_str()), (Runtime::Node, "node"));
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("server");
        std::fs::write(&script, "#!/usr/bin/env python3\nprint()\n").unwrap();
        let d = detect("server", Some(&script)).unwrap();
        assert_eq!(d.runtime, Runtime::Python);
        assert_eq!(d.via, Via::Shebang("python3".into()));
        std::fs::write(&script, "\x7fELF").unwrap();
        assert_eq!(detect("server", Some(&script)), None);
        assert_eq!(detect("server", None), None);
    }
}
