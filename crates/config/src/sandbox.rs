//! A stdio server's `sandbox`: a preset name, or
//! `{"read": [...], "write": [...], "network": "none" | "loopback" | "any"}`.
//!
//! Parsed here into plain data; the registry turns it into the transport's
//! `SandboxSpec`, adding the roots (see [`attach_roots`]).

use std::path::{Path, PathBuf};

use jsonc_parser::ast::Value;
use jsonc_parser::common::Ranged as _;

use crate::{HostConfig, Root, TransportConfig};

const KEYS: &[&str] = &["preset", "read", "write", "network", "require"];
pub const PRESETS: &[&str] = &["workspace", "read-only", "no-network"];
const NETWORKS: &[&str] = &["none", "loopback", "any"];

/// What a server may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxNetwork {
    None,
    Loopback,
    Any,
}

/// How a sandbox treats the roots (global and the server's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootAccess {
    Ignore,
    Read,
    Write,
}

/// A parsed `sandbox`, paths absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    /// The preset's name, or `"custom"`.
    pub requested: String,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub network: SandboxNetwork,
    /// Read the system toolchain and the program's own install prefix.
    pub toolchain: bool,
    /// A private writable `TMPDIR`.
    pub private_tmp: bool,
    pub roots: RootAccess,
    /// The roots' paths, filled in by [`attach_roots`].
    pub root_paths: Vec<PathBuf>,
    /// `"require": true`: fail closed. The field that asked
    /// (`mcpServers.x.sandbox.require`, `defaults.sandbox.require`), for
    /// the error when the kernel cannot enforce all of it.
    pub require: Option<String>,
}

/// System directories a `workspace` or `read-only` server reads: binaries,
/// libraries, `/etc` (less its secret files), a few device nodes.
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib64",
    "/lib32",
    "/bin",
    "/sbin",
    "/opt",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
    "/dev/tty",
    "/System",
    "/Library",
    "/private/etc",
    "/private/var/db/timezone",
];

/// `/etc` entries left out of the presets: password hashes, sudo rules,
/// host keys, TLS private keys. Landlock grants, it never subtracts, so the
/// presets list `/etc`'s other entries one by one (as they are at load).
const ETC_SECRETS: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "ssh",
    "ssl/private",
    "security/opasswd",
    "krb5.keytab",
    "machine-id",
];

/// One problem: where (byte offset), which field, what.
pub(crate) type Problem = (usize, String, String);

/// Parses `value` (the `sandbox` property) of a server. `expand` interpolates
/// one path (`${VAR}`, `~`); `base` is the config file's directory.
pub(crate) fn parse(
    value: &Value<'_>,
    field: &str,
    base: &Path,
    expand: &mut dyn FnMut(&str, usize, &str) -> Option<String>,
) -> Result<Option<Sandbox>, Vec<Problem>> {
    match value {
        Value::BooleanLit(b) if !b.value => Ok(None),
        Value::StringLit(s) => preset(&s.value).map(Some).ok_or_else(|| {
            vec![(
                value.start(),
                field.to_owned(),
                format!(
                    "unknown preset \"{}\"; expected one of {}, false, or an object {{\"preset\", \"read\", \"write\", \"network\", \"require\"}}",
                    s.value,
                    PRESETS.join(", ")
                ),
            )]
        }),
        Value::Object(obj) => custom(obj, field, base, expand).map(Some),
        _ => Err(vec![(
            value.start(),
            field.to_owned(),
            "must be a preset name (workspace, read-only, no-network), false, or an object {\"preset\", \"read\", \"write\", \"network\", \"require\"}".into(),
        )]),
    }
}

fn custom(
    obj: &jsonc_parser::ast::Object<'_>,
    field: &str,
    base: &Path,
    expand: &mut dyn FnMut(&str, usize, &str) -> Option<String>,
) -> Result<Sandbox, Vec<Problem>> {
    let mut problems = Vec::new();
    for prop in &obj.properties {
        let key = prop.name.as_str();
        if !KEYS.contains(&key) {
            problems.push((
                prop.start(),
                format!("{field}.{key}"),
                format!("unknown key; expected one of {}", KEYS.join(", ")),
            ));
        }
    }
    let mut paths = |key: &str, problems: &mut Vec<Problem>| -> Vec<PathBuf> {
        let Some(prop) = obj.get(key) else {
            return Vec::new();
        };
        let field = format!("{field}.{key}");
        let Value::Array(items) = &prop.value else {
            problems.push((
                prop.value.start(),
                field,
                "must be an array of paths".into(),
            ));
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.elements.iter().enumerate() {
            let field = format!("{field}[{i}]");
            match item {
                Value::StringLit(s) if !s.value.trim().is_empty() => {
                    let raw = match s.value.strip_prefix('~') {
                        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                            format!("${{HOME}}{rest}")
                        }
                        _ => s.value.to_string(),
                    };
                    if let Some(text) = expand(&raw, item.start(), &field) {
                        out.push(base.join(text));
                    }
                }
                _ => problems.push((item.start(), field, "must be a non-empty path".into())),
            }
        }
        out
    };
    let read = paths("read", &mut problems);
    let write = paths("write", &mut problems);
    // `preset` is the base the other keys add to (network: replace).
    let base_preset = match obj.get("preset").map(|p| &p.value) {
        None => None,
        Some(Value::StringLit(s)) if preset(&s.value).is_some() => preset(&s.value),
        Some(v) => {
            problems.push((
                v.start(),
                format!("{field}.preset"),
                format!("must be one of {}", PRESETS.join(", ")),
            ));
            None
        }
    };
    let network = match obj.get("network").map(|p| &p.value) {
        None => base_preset
            .as_ref()
            .map_or(SandboxNetwork::None, |p| p.network),
        Some(Value::StringLit(s)) if s.value == "none" => SandboxNetwork::None,
        Some(Value::StringLit(s)) if s.value == "loopback" => SandboxNetwork::Loopback,
        Some(Value::StringLit(s)) if s.value == "any" => SandboxNetwork::Any,
        Some(v) => {
            problems.push((
                v.start(),
                format!("{field}.network"),
                format!("must be one of {}", NETWORKS.join(", ")),
            ));
            SandboxNetwork::None
        }
    };
    let require = require(obj, field, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    if let Some(mut base) = base_preset {
        base.read.extend(read);
        base.write.extend(write);
        base.network = network;
        base.require = require;
        return Ok(base);
    }
    Ok(Sandbox {
        requested: "custom".into(),
        read,
        write,
        network,
        toolchain: false,
        private_tmp: false,
        roots: RootAccess::Ignore,
        root_paths: Vec::new(),
        require,
    })
}

/// `require`: the field's name when true (it goes into the error).
fn require(
    obj: &jsonc_parser::ast::Object<'_>,
    field: &str,
    problems: &mut Vec<Problem>,
) -> Option<String> {
    let field = format!("{field}.require");
    match obj.get("require").map(|p| &p.value) {
        None => None,
        Some(Value::BooleanLit(b)) => b.value.then_some(field),
        Some(v) => {
            problems.push((v.start(), field, "must be true or false".into()));
            None
        }
    }
}

fn preset(name: &str) -> Option<Sandbox> {
    let system = || {
        // Each platform has some of these: only the user's own missing
        // paths are worth a note.
        let mut read: Vec<PathBuf> = SYSTEM_READ
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect();
        read.extend(etc_entries(Path::new("/etc")));
        read
    };
    let (read, write, roots, toolchain) = match name {
        "workspace" => (system(), Vec::new(), RootAccess::Write, true),
        "read-only" => (system(), Vec::new(), RootAccess::Read, true),
        "no-network" => (
            Vec::new(),
            vec![PathBuf::from("/")],
            RootAccess::Ignore,
            false,
        ),
        _ => return None,
    };
    Some(Sandbox {
        requested: name.to_owned(),
        read,
        write,
        network: SandboxNetwork::None,
        toolchain,
        private_tmp: toolchain,
        roots,
        root_paths: Vec::new(),
        require: None,
    })
}

/// `/etc`'s entries less [`ETC_SECRETS`]; a directory holding a secret
/// (`ssl` of `ssl/private`) is listed entry by entry in turn.
fn etc_entries(etc: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![(etc.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let Some(name) = e.file_name().to_str().map(|n| format!("{prefix}{n}")) else {
                continue;
            };
            if ETC_SECRETS.contains(&name.as_str()) {
                continue;
            }
            let inner = format!("{name}/");
            if ETC_SECRETS.iter().any(|s| s.starts_with(&inner)) {
                pending.push((e.path(), inner));
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

/// Gives every sandbox that uses roots the paths of the global roots and
/// its server's own (`file://` URIs that are not paths are left out).
pub(crate) fn attach_roots(config: &mut HostConfig) {
    let global = config.roots.clone();
    for server in &mut config.servers {
        let TransportConfig::Stdio(stdio) = &mut server.transport else {
            continue;
        };
        let Some(sandbox) = &mut stdio.sandbox else {
            continue;
        };
        if sandbox.roots == RootAccess::Ignore {
            continue;
        }
        sandbox.root_paths = global
            .iter()
            .chain(&server.roots)
            .filter_map(root_path)
            .collect();
    }
}

fn root_path(root: &Root) -> Option<PathBuf> {
    url::Url::parse(&root.uri).ok()?.to_file_path().ok()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::preset;

    use crate::sandbox::{RootAccess, SandboxNetwork};
    use crate::{HostConfig, TransportConfig};

    fn parse(sandbox: &str) -> Result<HostConfig, String> {
        let text = format!(
            r#"{{ "roots": ["/srv/shared"], "mcpServers": {{ "s": {{ "command": "x", "roots": ["/srv/own"], "sandbox": {sandbox} }} }} }}"#
        );
        let env = |name: &str| match name {
            "HOME" => Some("/home/me".to_owned()),
            "DATA" => Some("/data".to_owned()),
            _ => None,
        };
        crate::parse(&text, Path::new("/etc/mcphost/config.json"), &env).map_err(|e| e.to_string())
    }

    fn sandbox(text: &str) -> super::Sandbox {
        let cfg = parse(text).unwrap();
        let TransportConfig::Stdio(s) = &cfg.servers[0].transport else {
            panic!("not stdio")
        };
        s.sandbox.clone().expect("a sandbox")
    }

    #[test]
    fn paths_expand_tilde_and_variables_and_resolve_against_the_config_dir() {
        let s = sandbox(r#"{"read": ["~/notes", "${DATA}/x", "rel"], "write": ["~"]}"#);
        assert_eq!(
            s.read,
            [
                PathBuf::from("/home/me/notes"),
                PathBuf::from("/data/x"),
                PathBuf::from("/etc/mcphost/rel")
            ]
        );
        assert_eq!(s.write, [PathBuf::from("/home/me")]);
        assert_eq!(s.network, SandboxNetwork::None);
        assert_eq!(s.requested, "custom");
    }

    #[test]
    fn a_preset_object_adds_paths_replaces_network_and_gets_both_kinds_of_roots() {
        let s = sandbox(r#"{"preset": "workspace", "network": "any", "read": ["/extra"]}"#);
        assert_eq!(s.requested, "workspace");
        assert_eq!(s.network, SandboxNetwork::Any);
        assert!(s.read.contains(&PathBuf::from("/extra")));
        assert_eq!(s.roots, RootAccess::Write);
        assert_eq!(
            s.root_paths,
            [PathBuf::from("/srv/shared"), PathBuf::from("/srv/own")]
        );
    }

    #[test]
    fn false_is_off_and_bad_values_name_server_and_field() {
        let cfg = parse("false").unwrap();
        let TransportConfig::Stdio(s) = &cfg.servers[0].transport else {
            panic!()
        };
        assert_eq!(s.sandbox, None);
        let e = parse(r#"{"read": "/x", "network": "lan", "exec": []}"#).unwrap_err();
        assert!(
            e.contains("mcpServers.s.sandbox.read: server \"s\": must be an array of paths"),
            "{e}"
        );
        assert!(
            e.contains(
                "mcpServers.s.sandbox.network: server \"s\": must be one of none, loopback, any"
            ),
            "{e}"
        );
        assert!(
            e.contains("mcpServers.s.sandbox.exec: server \"s\": unknown key"),
            "{e}"
        );
        let e = parse("true").unwrap_err();
        assert!(
            e.contains("mcpServers.s.sandbox: server \"s\": must be a preset name"),
            "{e}"
        );
    }

    fn stdio_sandbox(cfg: &HostConfig, name: &str) -> Option<super::Sandbox> {
        let server = cfg.servers.iter().find(|s| s.name == name).unwrap();
        let TransportConfig::Stdio(s) = &server.transport else {
            panic!("{name} is not stdio")
        };
        s.sandbox.clone()
    }

    #[test]
    fn defaults_sandbox_confines_stdio_servers_without_their_own_and_an_own_value_or_false_wins() {
        let text = r#"{ "roots": ["/srv/shared"], "defaults": {"sandbox": "workspace"}, "mcpServers": {
            "plain": {"command": "x", "roots": ["/srv/own"]},
            "off": {"command": "x", "sandbox": false},
            "own": {"command": "x", "sandbox": {"read": ["/r"]}},
            "web": {"url": "https://h.example/mcp"} } }"#;
        let env = |_: &str| None;
        let cfg = crate::parse(text, Path::new("/etc/mcphost/config.json"), &env)
            .unwrap_or_else(|e| panic!("{e}"));
        let plain = stdio_sandbox(&cfg, "plain").expect("the default applies");
        assert_eq!(plain.requested, "workspace");
        assert_eq!(
            plain.root_paths,
            [PathBuf::from("/srv/shared"), PathBuf::from("/srv/own")],
            "the default gets each server's own roots"
        );
        assert_eq!(stdio_sandbox(&cfg, "off"), None);
        assert_eq!(stdio_sandbox(&cfg, "own").unwrap().requested, "custom");
        let web = cfg.servers.iter().find(|s| s.name == "web").unwrap();
        assert!(matches!(web.transport, crate::TransportConfig::Http(_)));

        let bad =
            r#"{ "defaults": {"sandbox": "worksapce"}, "mcpServers": {"s": {"command": "x"}} }"#;
        let e = crate::parse(bad, Path::new("/etc/mcphost/config.json"), &env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("defaults.sandbox") && e.contains("unknown preset \"worksapce\""),
            "{e}"
        );
    }

    #[test]
    fn require_fails_closed_names_the_field_it_came_from_and_must_be_a_boolean() {
        let s = sandbox(r#"{"preset": "workspace", "network": "loopback", "require": true}"#);
        assert_eq!(s.require.as_deref(), Some("mcpServers.s.sandbox.require"));
        assert_eq!(s.network, SandboxNetwork::Loopback);
        assert_eq!(sandbox(r#"{"preset": "workspace"}"#).require, None);
        assert_eq!(sandbox(r#"{"read": [], "require": false}"#).require, None);
        let text = r#"{ "defaults": {"sandbox": {"preset": "workspace", "require": true}}, "mcpServers": {"s": {"command": "x"}} }"#;
        let cfg = crate::parse(text, Path::new("/etc/mcphost/config.json"), &|_: &str| None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            stdio_sandbox(&cfg, "s").unwrap().require.as_deref(),
            Some("defaults.sandbox.require")
        );
        let e = parse(r#"{"preset": "workspace", "require": "yes"}"#).unwrap_err();
        assert!(
            e.contains("mcpServers.s.sandbox.require: server \"s\": must be true or false"),
            "{e}"
        );
    }

    #[test]
    fn the_workspace_preset_reads_etc_without_its_secret_files() {
        let s = preset("workspace").unwrap();
        assert!(!s.read.contains(&PathBuf::from("/etc/shadow")), "{s:?}");
        assert!(!s.read.contains(&PathBuf::from("/etc")), "{s:?}");
        assert!(!s.read.contains(&PathBuf::from("/etc/ssl")), "{s:?}");
        assert!(
            !s.read.contains(&PathBuf::from("/etc/ssl/private")),
            "{s:?}"
        );
        if Path::new("/etc/ssl/openssl.cnf").exists() {
            assert!(
                s.read.contains(&PathBuf::from("/etc/ssl/openssl.cnf")),
                "{s:?}"
            );
        }
        assert_eq!(s.network, SandboxNetwork::None);
        assert_eq!(s.roots, RootAccess::Write);
        assert!(s.private_tmp && s.toolchain);
    }
}
