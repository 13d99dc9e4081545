//! Each server's last good lists, kept across daemon runs so that a lazy
//! server is listed before it is spawned.
//!
//! One file per server under `<data dir>/catalogs/`: `<hash>.json`, `<hash>`
//! being 32 hex digits of SHA-256 of the server's name. The file names the
//! config it was listed with (a hash of the launch config, never secret
//! values) and the `serverInfo` the server gave; a file of another config
//! is not used. Files are replaced atomically ([`mcphost_state::statefile`]) by
//! one writer thread, so listings never wait on the disk; a file that cannot
//! be read or parsed is logged and ignored.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::Digest;
use tracing::{debug, warn};

use mcphost_config::{ServerConfig, TransportConfig};
use mcphost_protocol::{Prompt, Resource, ResourceTemplate, Tool};

/// The stored file's layout revision; another one is ignored.
pub(super) const FORMAT: u32 = 1;

/// One server's stored lists.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredCatalog {
    pub format: u32,
    pub server: String,
    /// [`config_key`] of the config these lists were fetched with.
    pub config: String,
    /// The `serverInfo` of the instance that listed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<Box<RawValue>>,
    #[serde(default)]
    pub tools: Vec<Tool>,
    #[serde(default)]
    pub prompts: Vec<Prompt>,
    #[serde(default)]
    pub resources: Vec<Resource>,
    #[serde(default)]
    pub resource_templates: Vec<ResourceTemplate>,
}

/// Where catalogs are stored; writes go to a background thread.
#[derive(Debug)]
pub struct CatalogStore {
    dir: PathBuf,
    writes: Mutex<mpsc::Sender<(PathBuf, Vec<u8>)>>,
}

impl CatalogStore {
    /// `catalogs/` in the per-user data directory (beside `oauth/`).
    pub fn default_dir() -> Option<PathBuf> {
        directories::ProjectDirs::from("", "", "mcphost").map(|d| d.data_dir().join("catalogs"))
    }

    /// A store in `dir` (created on the first write).
    pub fn at(dir: PathBuf) -> CatalogStore {
        let (tx, rx) = mpsc::channel::<(PathBuf, Vec<u8>)>();
        let writer_dir = dir.clone();
        let spawned = std::thread::Builder::new()
            .name("mcphost-catalogs".into())
            .spawn(move || writer(&writer_dir, &rx));
        if let Err(e) = spawned {
            warn!(dir = %dir.display(), "catalogs will not be stored: {e}");
        }
        CatalogStore {
            dir,
            writes: Mutex::new(tx),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `server`'s catalog.
    pub fn file(&self, server: &str) -> PathBuf {
        let d = sha2::Sha256::digest(server.as_bytes());
        let hex: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}.json"))
    }

    /// `server`'s stored catalog if it was listed with config `key`.
    /// A missing file is `None`; an unreadable or corrupt one is logged
    /// (file and reason) and `None`.
    pub fn load(&self, server: &str, key: &str) -> Option<StoredCatalog> {
        let file = self.file(server);
        let text = match std::fs::read(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                warn!(server, file = %file.display(), "ignoring the stored catalog: cannot read it: {e}");
                return None;
            }
        };
        let stored: StoredCatalog = match serde_json::from_slice(&text) {
            Ok(s) => s,
            Err(e) => {
                warn!(server, file = %file.display(), "ignoring the stored catalog: not a valid catalog file: {e}");
                return None;
            }
        };
        if stored.format != FORMAT || stored.server != server {
            warn!(server, file = %file.display(), "ignoring the stored catalog: written for another server or format");
            return None;
        }
        if stored.config != key {
            debug!(server, file = %file.display(), "stored catalog is of another config; not used");
            return None;
        }
        Some(stored)
    }

    /// Queue `catalog` to be written; returns at once.
    pub fn save(&self, catalog: &StoredCatalog, bytes: Vec<u8>) {
        let file = self.file(&catalog.server);
        let tx = self.writes.lock();
        if tx.send((file, bytes)).is_err() {
            debug!(server = %catalog.server, "catalog writer gone; not stored");
        }
    }
}

/// Writes queued catalogs, the newest of each file only.
fn writer(dir: &Path, rx: &mpsc::Receiver<(PathBuf, Vec<u8>)>) {
    while let Ok(first) = rx.recv() {
        let mut batch: HashMap<PathBuf, Vec<u8>> = HashMap::new();
        batch.insert(first.0, first.1);
        // A burst of listings (a hundred servers starting) is one pass.
        while let Ok((file, bytes)) = rx.try_recv() {
            batch.insert(file, bytes);
        }
        if let Err(e) = mcphost_state::statefile::ensure_private_dir(dir) {
            warn!(dir = %dir.display(), "cannot store catalogs: {e}");
            continue;
        }
        for (file, bytes) in batch {
            match mcphost_state::statefile::write_atomic(&file, &bytes) {
                Ok(()) => debug!(file = %file.display(), "catalog stored"),
                Err(e) => warn!(file = %file.display(), "cannot store the catalog: {e}"),
            }
        }
    }
}

/// What identifies a server's config for its stored catalog: how it is
/// launched (command, arguments, env names, directory; or URL and header
/// names), its tool filter and pinned revision. Values of env and headers
/// are left out: they may be secrets, and rotating a token does not change
/// the tools.
pub fn config_key(sc: &ServerConfig) -> String {
    short_key(sc, |put| {
        match &sc.transport {
            TransportConfig::Stdio(s) => {
                put("env");
                for k in s.env.keys() {
                    put(k);
                }
                put(&format!("{:?}", s.cwd));
                put(if s.inherit_env { "inherit" } else { "clean" });
            }
            TransportConfig::Http(t) => {
                for k in t.headers.keys() {
                    put(k);
                }
                put(super::from_config::http_mode(t.kind).label());
            }
        }
        put(&format!("{:?}", sc.tools));
        put(&format!("{:?}", sc.protocol_version));
    })
}

/// 32 hex digits of a SHA-256 over how `sc` is launched (`stdio`, the
/// command and each argument; or `http` and the URL), then what `more`
/// puts: each string followed by a NUL, so no two lists hash alike.
pub(crate) fn short_key(sc: &ServerConfig, more: impl FnOnce(&mut dyn FnMut(&str))) -> String {
    let mut h = sha2::Sha256::new();
    let mut put = |s: &str| {
        h.update(s.as_bytes());
        h.update([0]);
    };
    match &sc.transport {
        TransportConfig::Stdio(s) => {
            put("stdio");
            put(&s.command);
            for a in &s.args {
                put(a);
            }
        }
        TransportConfig::Http(t) => {
            put("http");
            put(&t.url);
        }
    }
    more(&mut put);
    let d = h.finalize();
    d.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stored catalogs are found again after an upgrade only if the key
    /// of an unchanged entry stays the same.
    #[test]
    fn an_entrys_keys_do_not_change_across_versions() {
        let cfg = mcphost_config::parse(
            r#"{"loginShellPath": false, "mcpServers": {
                "s": {"command": "node", "args": ["a.js", "--x"], "env": {"K": "v"}},
                "h": {"url": "http://127.0.0.1:1/mcp", "headers": {"A": "b"}}}}"#,
            Path::new("/cfg/mcphost.json"),
            &|_| None,
        )
        .unwrap();
        let keys: Vec<_> = ["s", "h"]
            .iter()
            .map(|n| {
                let sc = cfg.server(n).unwrap();
                (config_key(sc), crate::pins::launch_key(sc))
            })
            .collect();
        // Taken from the code before config_key and launch_key shared
        // their hashing.
        let want = [
            (
                "416893d3a6f76625298ff7b950998f57",
                "2c63ff4b9e60018c6ec78c2555614b75",
            ),
            (
                "a44b1c0ddf3d58a4cd49be4bab29b5ce",
                "60b970fd3884e2aa8c58dcf41470a033",
            ),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(keys, want);
    }

    #[test]
    fn round_trip_and_corrupt_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = CatalogStore::at(dir.path().join("catalogs"));
        let cat = StoredCatalog {
            format: FORMAT,
            server: "s".into(),
            config: "k".into(),
            server_info: None,
            tools: vec![serde_json::from_str(r#"{"name":"t","inputSchema":{}}"#).unwrap()],
            prompts: Vec::new(),
            resources: Vec::new(),
            resource_templates: Vec::new(),
        };
        store.save(&cat, serde_json::to_vec(&cat).unwrap());
        let file = store.file("s");
        for _ in 0..200 {
            if file.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let back = store.load("s", "k").unwrap();
        assert_eq!(back.tools[0].name, "t");
        assert!(store.load("s", "other").is_none());
        std::fs::write(&file, "{not json").unwrap();
        assert!(store.load("s", "k").is_none());
    }
}
