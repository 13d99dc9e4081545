//! Confining a stdio server: what it may read, write and reach.
//!
//! [`SandboxSpec`] is plain data (built by the registry from the config).
//! On Linux it becomes a Landlock ruleset and, for `network: none`, a
//! seccomp filter, both prepared in the host (everything that allocates)
//! and applied in the forked server process just before `exec` with
//! async-signal-safe syscalls only, so every process the server starts
//! inherits them. On macOS it becomes a Seatbelt profile run through
//! `sandbox-exec` ([`seatbelt_profile`], plain text, tested on every platform).
//!
//! [`report`] says what the running kernel enforces for a spec, for
//! `servers --json` and `doctor`.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// What a server may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// No sockets at all (socketpair still works).
    None,
    /// Loopback only: enforced on macOS; on Linux reported as not enforced.
    Loopback,
    Any,
}

impl Network {
    pub fn label(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Loopback => "loopback",
            Network::Any => "any",
        }
    }
}

/// A server's sandbox, with every path absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    /// What the config asked for, as shown to users (`"workspace"`, `"custom"`).
    pub requested: String,
    /// Read (and execute) beneath these.
    pub read: Vec<PathBuf>,
    /// Read and write beneath these.
    pub write: Vec<PathBuf>,
    pub network: Network,
    /// Also read the program's own install prefix, its interpreter's and the
    /// package directory of a script given as an argument (resolved at spawn).
    pub toolchain: bool,
    /// Give the server a private, writable temporary directory (`TMPDIR`),
    /// removed when it exits.
    pub private_tmp: bool,
    /// Fail closed: do not start the server when [`report`] lists anything
    /// not enforced. Holds the config field that asked, for the error.
    pub require: Option<String>,
}

/// What the sandbox of one server enforces on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxReport {
    pub requested: String,
    pub network: Network,
    pub enforced: Enforced,
    /// One sentence per requested restriction the kernel cannot apply.
    pub not_enforced: Vec<String>,
    /// Paths of the spec that do not exist (skipped, not an error).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// The kernel's Landlock ABI (Linux); `None` where there is none.
    pub abi: Option<u32>,
    /// `"landlock"`, `"seatbelt"`.
    pub mechanism: &'static str,
}

/// Per area: `"fully"`, `"partially"` or `"not"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enforced {
    pub filesystem: &'static str,
    pub network: &'static str,
}

impl SandboxReport {
    /// The short marker for `mcphost servers`.
    pub fn marker(&self) -> String {
        let whole = self.enforced.filesystem == "fully"
            && (self.network == Network::Any || self.enforced.network == "fully");
        if whole {
            format!("sandbox:{}", self.requested)
        } else {
            format!("sandbox:{} (partial)", self.requested)
        }
    }
}

/// Landlock ABI that gives the filesystem rules all this module asks
/// for (ABI 3 adds truncate); TCP needs 4, scopes 6.
#[cfg(target_os = "linux")]
const FS_FULL_ABI: u32 = 3;

/// What the running kernel enforces for `spec`.
pub fn report(spec: &SandboxSpec) -> SandboxReport {
    let skipped = spec
        .read
        .iter()
        .chain(&spec.write)
        .filter(|p| !p.exists())
        .map(|p| format!("{} does not exist", p.display()))
        .collect();
    platform_report(spec, skipped)
}

#[cfg(target_os = "linux")]
fn platform_report(spec: &SandboxSpec, skipped: Vec<String>) -> SandboxReport {
    linux_report(spec, skipped, linux::kernel_abi())
}

/// What a kernel with Landlock ABI `abi` (`None`: no Landlock) enforces.
#[cfg(target_os = "linux")]
fn linux_report(spec: &SandboxSpec, skipped: Vec<String>, abi: Option<u32>) -> SandboxReport {
    let mut not_enforced = Vec::new();
    let filesystem = match abi {
        None => {
            not_enforced.push(
                "filesystem: the kernel has no Landlock (Linux 5.13+ with lsm=landlock)".into(),
            );
            "not"
        }
        Some(v) if v < FS_FULL_ABI => {
            not_enforced.push(format!(
                "filesystem: Landlock ABI {v} cannot restrict truncate or cross-directory renames (ABI 3, Linux 6.2)"
            ));
            "partially"
        }
        Some(_) => "fully",
    };
    let network = match spec.network {
        Network::Any => "not requested",
        // seccomp denies socket(): no TCP, UDP or raw socket whatever the
        // Landlock ABI; Landlock's TCP rules come on top where present.
        Network::None => "fully",
        Network::Loopback => {
            not_enforced.push(
                "network loopback: Landlock cannot filter by address, so the server may reach any host".into(),
            );
            "not"
        }
    };
    // Below ABI 4 Landlock adds no TCP rules, but seccomp already refuses
    // every socket under `none`: no gap to report (or to fail `require` on).
    SandboxReport {
        requested: spec.requested.clone(),
        network: spec.network,
        enforced: Enforced {
            filesystem,
            network,
        },
        not_enforced,
        skipped,
        abi,
        mechanism: "landlock",
    }
}

#[cfg(not(target_os = "linux"))]
fn platform_report(spec: &SandboxSpec, skipped: Vec<String>) -> SandboxReport {
    SandboxReport {
        requested: spec.requested.clone(),
        network: spec.network,
        enforced: Enforced {
            filesystem: "fully",
            network: if spec.network == Network::Any {
                "not requested"
            } else {
                "fully"
            },
        },
        not_enforced: Vec::new(),
        skipped,
        abi: None,
        mechanism: "seatbelt",
    }
}

/// The read paths a toolchain server needs besides the spec's: the
/// program's install prefix (`.../bin/x` → `...`), its symlink target's,
/// its `#!` interpreter's, and for a script argument (`node dist/index.js`)
/// its package tree (the nearest `node_modules` or `site-packages` above it).
pub fn toolchain_paths(program: &Path, args: &[String]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut programs = vec![program.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(program) {
        programs.push(real);
    }
    if let Some(interpreter) = shebang(program) {
        programs.push(interpreter);
    }
    for p in &programs {
        if let Some(prefix) = install_prefix(p) {
            out.push(prefix);
        }
    }
    for arg in args {
        let path = Path::new(arg);
        if path.is_absolute() && path.is_file() {
            out.push(package_tree(path));
        }
    }
    out.sort();
    out.dedup();
    out
}

fn install_prefix(program: &Path) -> Option<PathBuf> {
    let dir = program.parent()?;
    if dir.file_name().is_some_and(|n| n == "bin") {
        dir.parent().map(Path::to_path_buf)
    } else {
        Some(dir.to_path_buf())
    }
}

fn shebang(program: &Path) -> Option<PathBuf> {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head.get(..n)?.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    text.split_whitespace().next().map(PathBuf::from)
}

fn package_tree(script: &Path) -> PathBuf {
    script
        .ancestors()
        .find(|a| {
            a.file_name()
                .is_some_and(|n| n == "node_modules" || n == "site-packages")
        })
        .or_else(|| script.parent())
        .unwrap_or(script)
        .to_path_buf()
}

/// The Seatbelt (SBPL) profile for `sandbox-exec -p`: deny by default,
/// allow running processes, reading `read` (plus the spec's writes),
/// writing `write`, and the network per the spec.
pub fn seatbelt_profile(spec: &SandboxSpec, read: &[PathBuf]) -> String {
    let mut p = String::from(
        "(version 1)\n(deny default)\n\
         (allow process-exec process-fork)\n\
         (allow signal (target same-sandbox))\n\
         (allow sysctl-read)\n\
         (allow mach-lookup)\n\
         (allow ipc-posix-shm)\n\
         (allow file-read-metadata)\n\
         (allow file-read* file-write-data (literal \"/dev/null\") (literal \"/dev/zero\"))\n\
         (allow file-read* (literal \"/dev/urandom\") (literal \"/dev/random\"))\n",
    );
    for path in read.iter().chain(&spec.write) {
        p.push_str(&format!(
            "(allow file-read* (subpath {}))\n",
            sbpl_string(path)
        ));
    }
    for path in &spec.write {
        p.push_str(&format!(
            "(allow file-write* (subpath {}))\n",
            sbpl_string(path)
        ));
    }
    p.push_str(match spec.network {
        Network::None => "",
        Network::Loopback => {
            "(allow network-outbound (remote ip \"localhost:*\"))\n\
             (allow network-inbound network-bind (local ip \"localhost:*\"))\n\
             (allow network-outbound (remote unix-socket))\n"
        }
        Network::Any => "(allow network*)\n(allow system-socket)\n",
    });
    p
}

/// An SBPL string literal: quoted, with `\` and `"` escaped.
fn sbpl_string(path: &Path) -> String {
    let text = path.to_string_lossy();
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(target_os = "linux")]
pub(crate) mod linux {
    use std::io;
    use std::os::fd::{AsRawFd as _, OwnedFd};
    use std::path::PathBuf;

    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope, path_beneath_rules,
    };
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

    use super::{Network, SandboxSpec};

    /// `__X32_SYSCALL_BIT`.
    #[cfg(target_arch = "x86_64")]
    const X32: libc::c_long = 0x4000_0000;

    /// The newest ABI this code was written and tested against.
    const TARGET: ABI = ABI::V6;

    /// The kernel's Landlock ABI, `None` without Landlock.
    pub fn kernel_abi() -> Option<u32> {
        // SAFETY: the documented version query: no pointer is read.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                1u32, // LANDLOCK_CREATE_RULESET_VERSION
            )
        };
        u32::try_from(v).ok().filter(|v| *v > 0)
    }

    /// Built in the host before fork; applied in the child by [`Self::apply`].
    #[derive(Debug)]
    pub struct Prepared {
        ruleset: Option<OwnedFd>,
        seccomp: Option<BpfProgram>,
    }

    /// Builds the ruleset (opening every path) and the seccomp program.
    pub fn prepare(spec: &SandboxSpec, read: &[PathBuf]) -> io::Result<Prepared> {
        let other = |e: &dyn std::fmt::Display| io::Error::other(e.to_string());
        let fs_read = AccessFs::from_read(TARGET);
        let fs_all = AccessFs::from_all(TARGET);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(fs_all)
            .map_err(|e| other(&e))?;
        if spec.network == Network::None {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(TARGET))
                .map_err(|e| other(&e))?;
        }
        let scopes = if spec.network == Network::Any {
            Scope::Signal.into()
        } else {
            Scope::from_all(TARGET)
        };
        ruleset = ruleset.scope(scopes).map_err(|e| other(&e))?;
        let readable: Vec<&PathBuf> = read.iter().filter(|p| p.exists()).collect();
        let writable: Vec<&PathBuf> = spec.write.iter().filter(|p| p.exists()).collect();
        let created = ruleset
            .create()
            .map_err(|e| other(&e))?
            .add_rules(path_beneath_rules(readable, fs_read))
            .map_err(|e| other(&e))?
            .add_rules(path_beneath_rules(writable, fs_all))
            .map_err(|e| other(&e))?
            .add_rules(path_beneath_rules(["/dev/null"], fs_all))
            .map_err(|e| other(&e))?;
        let ruleset: Option<OwnedFd> = created.into();
        let seccomp = match spec.network {
            Network::None => Some(deny_sockets().map_err(|e| other(&e))?),
            Network::Loopback | Network::Any => None,
        };
        Ok(Prepared { ruleset, seccomp })
    }

    /// `socket()` and `io_uring_setup()` (which could open sockets past the
    /// filter) fail with EACCES; `socketpair()` still works. Another
    /// architecture's syscalls (i386 on x86_64) kill the process (the
    /// filter's arch check); x32's share the arch, so their numbers are
    /// listed too.
    fn deny_sockets() -> Result<BpfProgram, seccompiler::Error> {
        let arch = TargetArch::try_from(std::env::consts::ARCH)?;
        let denied = [libc::SYS_socket, libc::SYS_io_uring_setup];
        #[cfg(target_arch = "x86_64")]
        let denied = [denied[0], denied[1], denied[0] | X32, denied[1] | X32];
        let rules = denied.into_iter().map(|nr| (nr, Vec::new())).collect();
        SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EACCES as u32),
            arch,
        )?
        .try_into()
        .map_err(seccompiler::Error::Backend)
    }

    impl Prepared {
        /// What the process supervisor needs to apply it in its own child:
        /// the ruleset (sent as a descriptor) and the filter's instructions.
        pub fn parts(&self) -> (Option<std::os::fd::BorrowedFd<'_>>, Option<&BpfProgram>) {
            use std::os::fd::AsFd as _;
            (
                self.ruleset.as_ref().map(|fd| fd.as_fd()),
                self.seccomp.as_ref(),
            )
        }

        /// [`Self::parts`] received in the process supervisor.
        pub fn from_parts(ruleset: Option<OwnedFd>, seccomp: Option<BpfProgram>) -> Self {
            Prepared { ruleset, seccomp }
        }

        /// Runs in the forked server process before exec: only
        /// async-signal-safe syscalls (prctl, landlock_restrict_self,
        /// seccomp), no allocation.
        pub fn apply(&self) -> io::Result<()> {
            // SAFETY: plain syscalls on a descriptor this struct owns.
            unsafe {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(fd) = &self.ruleset
                    && libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some(program) = &self.seccomp {
                seccompiler::apply_filter(program).map_err(|e| match e {
                    seccompiler::Error::Seccomp(e) | seccompiler::Error::Prctl(e) => e,
                    _ => io::Error::from_raw_os_error(libc::EINVAL),
                })?;
            }
            Ok(())
        }
    }
}

/// The spawn side: a spec resolved against the program, with what must
/// live as long as the server.
pub(crate) mod confine {
    use std::collections::BTreeMap;
    use std::ffi::OsString;
    use std::io;
    use std::path::{Path, PathBuf};

    use super::SandboxSpec;

    pub(crate) struct Confined {
        /// The private `TMPDIR`, removed when the server's connection ends.
        pub tmp: Option<tempfile::TempDir>,
        #[cfg(target_os = "linux")]
        pub prepared: std::sync::Arc<super::linux::Prepared>,
        #[cfg(target_os = "macos")]
        pub profile: String,
    }

    /// Resolves the toolchain paths, makes the private temp dir (and points
    /// `TMPDIR` at it) and builds what the platform applies.
    pub(crate) fn prepare(
        spec: &SandboxSpec,
        program: &Path,
        args: &[String],
        env: &mut BTreeMap<OsString, OsString>,
    ) -> io::Result<Confined> {
        let mut spec = spec.clone();
        let mut read: Vec<PathBuf> = spec.read.clone();
        if spec.toolchain {
            read.extend(super::toolchain_paths(program, args));
        }
        let tmp = if spec.private_tmp {
            let dir = tempfile::Builder::new()
                .prefix("mcphost-sandbox-")
                .tempdir()?;
            spec.write.push(dir.path().to_path_buf());
            env.insert("TMPDIR".into(), dir.path().as_os_str().to_owned());
            Some(dir)
        } else {
            None
        };
        // Seatbelt matches resolved paths (`/var` is `/private/var`);
        // Landlock resolves them itself when it opens them.
        #[cfg(target_os = "macos")]
        for p in read.iter_mut().chain(spec.write.iter_mut()) {
            if let Ok(real) = std::fs::canonicalize(&*p) {
                *p = real;
            }
        }
        Ok(Confined {
            tmp,
            #[cfg(target_os = "linux")]
            prepared: std::sync::Arc::new(super::linux::prepare(&spec, &read)?),
            #[cfg(target_os = "macos")]
            profile: super::seatbelt_profile(&spec, &read),
        })
    }

    /// The program that runs a server under a Seatbelt profile.
    #[cfg(target_os = "macos")]
    pub(crate) const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

    /// `sandbox-exec`'s arguments before the server's own: `-p PROFILE program`.
    #[cfg(target_os = "macos")]
    pub(crate) fn seatbelt_args(c: &Confined, program: &Path) -> Vec<OsString> {
        vec!["-p".into(), c.profile.clone().into(), program.into()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(network: Network) -> SandboxSpec {
        SandboxSpec {
            requested: "custom".into(),
            read: vec![PathBuf::from("/usr"), PathBuf::from("/opt/my \"odd\" dir")],
            write: vec![PathBuf::from("/home/me/work")],
            network,
            toolchain: false,
            private_tmp: false,
            require: None,
        }
    }

    /// seccomp refuses every socket whatever the Landlock ABI, so a kernel
    /// without Landlock's TCP rules has no network gap under `none` (and
    /// `require` starts the server); its filesystem gaps are still named.
    #[cfg(target_os = "linux")]
    #[test]
    fn network_none_has_no_gap_on_a_kernel_without_landlock_tcp_rules() {
        for abi in [1, 3] {
            let r = linux_report(&spec(Network::None), Vec::new(), Some(abi));
            assert_eq!(r.enforced.network, "fully", "ABI {abi}: {r:?}");
            assert!(
                r.not_enforced.iter().all(|g| !g.starts_with("network")),
                "ABI {abi}: {r:?}"
            );
        }
        let r = linux_report(&spec(Network::None), Vec::new(), Some(3));
        assert!(r.not_enforced.is_empty(), "{r:?}");
        let r = linux_report(&spec(Network::Loopback), Vec::new(), Some(7));
        assert_eq!(r.enforced.network, "not", "{r:?}");
    }

    #[test]
    fn the_seatbelt_profile_denies_by_default_and_allows_exactly_the_listed_paths() {
        let s = spec(Network::None);
        let p = seatbelt_profile(&s, &s.read);
        assert!(p.starts_with("(version 1)\n(deny default)\n"), "{p}");
        assert!(p.contains("(allow process-exec process-fork)"), "{p}");
        assert!(p.contains("(allow file-read* (subpath \"/usr\"))"), "{p}");
        assert!(
            p.contains("(allow file-read* (subpath \"/opt/my \\\"odd\\\" dir\"))"),
            "{p}"
        );
        assert!(
            p.contains("(allow file-write* (subpath \"/home/me/work\"))"),
            "{p}"
        );
        assert!(!p.contains("file-write* (subpath \"/usr\")"), "{p}");
        assert!(!p.contains("network"), "no network rule for none: {p}");
    }

    #[test]
    fn the_seatbelt_profile_allows_the_network_the_spec_asks_for() {
        let s = spec(Network::Loopback);
        let p = seatbelt_profile(&s, &s.read);
        assert!(
            p.contains("(allow network-outbound (remote ip \"localhost:*\"))"),
            "{p}"
        );
        assert!(!p.contains("(allow network*)"), "{p}");
        let s = spec(Network::Any);
        assert!(seatbelt_profile(&s, &s.read).contains("(allow network*)"));
    }

    #[test]
    fn toolchain_paths_name_the_install_prefix_and_a_scripts_package_tree() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("node/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("node"), "").unwrap();
        let pkg = dir.path().join("app/node_modules/@x/server/dist");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(pkg.join("index.js"), "").unwrap();
        let paths = toolchain_paths(
            &bin.join("node"),
            &[pkg.join("index.js").display().to_string()],
        );
        assert!(paths.contains(&dir.path().join("node")), "{paths:?}");
        assert!(
            paths.contains(&dir.path().join("app/node_modules")),
            "{paths:?}"
        );
    }

    #[test]
    fn missing_paths_are_reported_as_skipped_not_refused() {
        let mut s = spec(Network::Any);
        s.read = vec![PathBuf::from("/definitely/not/here")];
        s.write.clear();
        let r = report(&s);
        assert_eq!(r.skipped, ["/definitely/not/here does not exist"]);
    }
}
