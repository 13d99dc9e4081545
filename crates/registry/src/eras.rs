//! The era each server spoke, remembered across starts (and, with a file,
//! across daemon restarts), so a server is probed with `server/discover`
//! once per configuration and not at every start.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use mcphost_protocol::Era;
use mcphost_state::statefile::{self, StateFileError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RememberedEra {
    /// A hash of the server's launch configuration: another command, URL
    /// or environment is another server, probed again.
    config: String,
    era: EraName,
    version: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum EraName {
    Handshake,
    Stateless,
}

impl From<Era> for EraName {
    fn from(e: Era) -> Self {
        match e {
            Era::Handshake => EraName::Handshake,
            Era::Stateless => EraName::Stateless,
        }
    }
}

/// Server name → what it negotiated last, for one configuration hash.
#[derive(Debug, Default)]
pub struct EraCache {
    file: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, RememberedEra>>,
}

impl EraCache {
    /// A cache kept in memory only.
    pub fn in_memory() -> EraCache {
        EraCache::default()
    }

    /// A cache persisted in `file` (JSON). A missing or unreadable file is
    /// an empty cache: the cost is one probe per server.
    pub fn at(file: PathBuf) -> EraCache {
        let entries = match std::fs::read_to_string(&file) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                warn!(file = %file.display(), "ignoring the era cache: {e}");
                BTreeMap::new()
            }),
            Err(_) => BTreeMap::new(),
        };
        EraCache {
            file: Some(file),
            entries: Mutex::new(entries),
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, BTreeMap<String, RememberedEra>> {
        self.entries.lock()
    }

    /// The era `server` spoke with this configuration, if known.
    pub fn get(&self, server: &str, config: &str) -> Option<Era> {
        self.lock()
            .get(server)
            .filter(|e| e.config == config)
            .map(|e| match e.era {
                EraName::Handshake => Era::Handshake,
                EraName::Stateless => Era::Stateless,
            })
    }

    /// Remember what `server` negotiated; writes the file when it changed.
    pub fn put(&self, server: &str, config: &str, era: Era, version: &str) {
        let entry = RememberedEra {
            config: config.to_owned(),
            era: era.into(),
            version: version.to_owned(),
        };
        let snapshot = {
            let mut map = self.lock();
            if map.get(server) == Some(&entry) {
                return;
            }
            map.insert(server.to_owned(), entry);
            map.clone()
        };
        let Some(file) = &self.file else { return };
        if let Err(e) = write_atomically(file, &snapshot) {
            warn!(file = %file.display(), "cannot save the era cache: {e}");
        } else {
            debug!(server, ?era, version, "era remembered");
        }
    }
}

fn write_atomically(
    file: &Path,
    map: &BTreeMap<String, RememberedEra>,
) -> Result<(), StateFileError> {
    if let Some(dir) = file.parent() {
        statefile::ensure_private_dir(dir)?;
    }
    let text = serde_json::to_vec_pretty(map).map_err(|e| StateFileError {
        path: file.to_owned(),
        reason: e.to_string(),
    })?;
    statefile::write_atomic(file, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_survives_a_restart_and_another_config_is_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("eras.json");
        let c = EraCache::at(file.clone());
        assert_eq!(c.get("a", "h1"), None);
        c.put("a", "h1", Era::Handshake, "2025-11-25");
        c.put("b", "h2", Era::Stateless, "2026-07-28");
        let again = EraCache::at(file.clone());
        assert_eq!(again.get("a", "h1"), Some(Era::Handshake));
        assert_eq!(again.get("b", "h2"), Some(Era::Stateless));
        assert_eq!(again.get("a", "other"), None);
        std::fs::write(&file, "not json").unwrap();
        assert_eq!(EraCache::at(file).get("a", "h1"), None);
    }
}
