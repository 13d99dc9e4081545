//! Where tokens live: one entry per authorization server issuer and protected
//! resource, shared by every process of the user (daemon, `--direct` CLI,
//! embedded hosts). A lock file beside the store makes a refresh single-flight
//! across those processes.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Issuer and resource: tokens of one are never sent to another.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenKey {
    pub issuer: String,
    pub resource: String,
}

#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub access_token: String,
    #[serde(default)]
    pub token_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("token_type", &self.token_type)
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// A client registered with an authorization server (dynamically, or from a
/// client ID metadata document), kept so that we register once.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<String>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "token_endpoint_auth_method",
                &self.token_endpoint_auth_method,
            )
            .finish()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Registration>,
    /// The mcphost server name that signed in (for `auth status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// Unix seconds of the last write.
    #[serde(default)]
    pub updated_at: u64,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("token store {path}: {reason}")]
    Io { path: PathBuf, reason: String },
}

/// The token store. (Placeholder file backend; see issue 12.)
#[derive(Debug, Clone)]
pub struct TokenStore {
    dir: PathBuf,
}

impl TokenStore {
    pub fn open(dir: PathBuf) -> Result<Self, StoreError> {
        std::fs::create_dir_all(&dir).map_err(|e| StoreError::Io {
            path: dir.clone(),
            reason: e.to_string(),
        })?;
        Ok(TokenStore { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self, key: &TokenKey) -> PathBuf {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(key.issuer.as_bytes());
        h.update([0]);
        h.update(key.resource.as_bytes());
        let hex: String = h
            .finalize()
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        self.dir.join(format!("{hex}.json"))
    }

    pub fn load(&self, key: &TokenKey) -> Result<Option<Entry>, StoreError> {
        let path = self.file(key);
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice::<(TokenKey, Entry)>(&b)
                .map(|(_, e)| Some(e))
                .map_err(|e| StoreError::Io {
                    path,
                    reason: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::Io {
                path,
                reason: e.to_string(),
            }),
        }
    }

    pub fn save(&self, key: &TokenKey, entry: &Entry) -> Result<(), StoreError> {
        let path = self.file(key);
        let io = |e: std::io::Error| StoreError::Io {
            path: path.clone(),
            reason: e.to_string(),
        };
        let text = serde_json::to_vec_pretty(&(key, entry)).map_err(|e| io(e.into()))?;
        std::fs::write(&path, text).map_err(io)
    }
}

// Interim: the real versions come with the store work.
impl TokenStore {
    pub fn remove(&self, key: &TokenKey) -> Result<bool, StoreError> {
        Ok(std::fs::remove_file(self.file(key)).is_ok())
    }

    pub fn list(&self) -> Result<Vec<(TokenKey, Entry)>, StoreError> {
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for f in rd.flatten() {
                if f.path().extension().is_some_and(|e| e == "json")
                    && let Ok(b) = std::fs::read(f.path())
                    && let Ok(v) = serde_json::from_slice::<(TokenKey, Entry)>(&b)
                {
                    out.push(v);
                }
            }
        }
        Ok(out)
    }

    pub async fn lock(&self, _key: &TokenKey) -> Result<StoreLock, StoreError> {
        Ok(StoreLock)
    }
}

pub struct StoreLock;

impl TokenStore {
    pub fn open_default() -> Result<Self, StoreError> {
        let dir = match std::env::var_os("MCPHOST_TOKEN_DIR") {
            Some(d) => PathBuf::from(d),
            None => directories::ProjectDirs::from("", "", "mcphost")
                .map(|d| d.data_dir().join("oauth"))
                .ok_or_else(|| StoreError::Io {
                    path: PathBuf::from("~"),
                    reason: "no home directory".into(),
                })?,
        };
        TokenStore::open(dir)
    }
}
