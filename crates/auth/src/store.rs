//! Where tokens live: one entry per authorization server issuer and protected
//! resource, shared by every process of the user (daemon, `--direct` CLI,
//! embedded hosts). A lock file beside the store makes a refresh single-flight
//! across those processes.
//!
//! Layout of the store's directory (0700 on Unix):
//! - `<hash>.json`: one entry (0600), replaced atomically (temp file, fsync,
//!   rename). `<hash>` is 32 hex digits of SHA-256(issuer NUL resource).
//! - `<hash>.lock`: the entry's lock file for [`TokenStore::lock`]; left in
//!   place, since removing it would let two processes lock different files.
//!
//! With the keyring backend the secrets (access token, refresh token, client
//! secret, DPoP key) go to the OS keyring (service `mcphost`, user `<hash>`) and the
//! JSON file keeps the rest as an index: keyrings cannot list their items.
//!
//! [`TokenStore::load`] and [`TokenStore::save`] never take the lock
//! themselves, so a refresh can run `lock; load; refresh; save` under it.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use mcphost_config::Secret;

/// Issuer and resource: tokens of one are never sent to another.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenKey {
    pub issuer: String,
    pub resource: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub access_token: Secret,
    #[serde(default)]
    pub token_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<Secret>,
    /// Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// A client registered with an authorization server (dynamically, or from a
/// client ID metadata document), kept so that we register once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<String>,
}

/// What the store keeps of one sign-in (one issuer and resource): the
/// tokens, the client they were issued to, the DPoP key they are bound to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSignIn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<Registration>,
    /// The mcphost server name that signed in (for `auth status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// Unix seconds of the last write: [`TokenStore::save`] sets it.
    #[serde(default)]
    pub updated_at: u64,
    /// The process that wrote it: a daemon restarts a server for a sign-in
    /// made elsewhere, not for its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<u32>,
    /// The key the tokens are bound to (DPoP, RFC 9449): refresh and every
    /// request prove possession of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpop_key: Option<super::dpop::DpopKey>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("token store {path}: {reason}")]
    Io { path: PathBuf, reason: String },
    /// A file of the store that cannot be used; the other entries can.
    #[error("token store file {path} is unusable ({reason}); remove it to sign in again")]
    Corrupt { path: PathBuf, reason: String },
    /// Another process or task held the entry's lock for the whole wait.
    #[error("token store: timed out waiting for the lock {path}")]
    LockTimeout { path: PathBuf },
    /// A bad `MCPHOST_TOKEN_*` setting.
    #[error("{var}={value}: {reason}")]
    Setting {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error("the OS keyring is not available: {reason}")]
    KeyringUnavailable { reason: String },
    /// A keyring call failed; `user` is the item's user name (the key's hash).
    #[error("OS keyring (service {KEYRING_SERVICE}, user {user}): {reason}")]
    Keyring { user: String, reason: String },
    #[error("token store: no data directory for this user; set MCPHOST_TOKEN_DIR")]
    NoDataDir,
}

/// One file of [`TokenStore::scan`]: its entry, or why it is unusable.
pub type ScannedSignIn = Result<(TokenKey, StoredSignIn), StoreError>;

/// Where the secrets of new entries go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Everything in the JSON files of the store's directory.
    File,
    /// Secrets in the OS keyring, the rest in the directory as an index.
    Keyring,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::File => "file",
            Backend::Keyring => "keyring",
        }
    }
}

/// Selects the directory (else the user's data dir joined with `oauth`).
pub const TOKEN_DIR_VAR: &str = "MCPHOST_TOKEN_DIR";
/// `auto` (default), `file` or `keyring`.
pub const TOKEN_STORE_VAR: &str = "MCPHOST_TOKEN_STORE";
/// How long [`TokenStore::lock`] waits.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// The keyring items' service name.
pub const KEYRING_SERVICE: &str = "mcphost";

const FORMAT_VERSION: u32 = 1;
/// An entry is a few KiB; anything far larger is not ours.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The token store.
#[derive(Clone)]
pub struct TokenStore {
    dir: PathBuf,
    backend: Backend,
    /// Set for [`Backend::Keyring`].
    secrets: Option<Arc<dyn SecretStore>>,
    /// `auto` found no OS keyring: why (secrets then go to plain files).
    fallback: Option<String>,
}

/// Whether this process has said that secrets go to plain files.
static PLAIN_FILES_WARNED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore")
            .field("dir", &self.dir)
            .field("backend", &self.backend)
            .finish()
    }
}

/// The file as written: the entry (without its secrets when they are in the
/// keyring) under its key, so that `list` needs nothing else.
#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    key: TokenKey,
    entry: StoredSignIn,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keyring: Option<KeyringRef>,
}

/// Where an entry's secrets are in the keyring. `stamp` is written to both
/// sides so a reader can tell an index and a keyring item of two saves apart.
#[derive(Clone, Serialize, Deserialize)]
struct KeyringRef {
    user: String,
    stamp: String,
}

/// The keyring item's content.
#[derive(Default, Serialize, Deserialize)]
struct Secrets {
    stamp: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    access_token: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refresh_token: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<Secret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dpop_key: Option<super::dpop::DpopKey>,
}

impl TokenStore {
    /// The file backend in `dir` (created 0700 if missing).
    pub fn open(dir: PathBuf) -> Result<Self, StoreError> {
        Self::open_with(dir, Backend::File)
    }

    /// `backend` in `dir`; [`Backend::Keyring`] fails with
    /// [`StoreError::KeyringUnavailable`] when the OS keyring cannot be used.
    pub fn open_with(dir: PathBuf, backend: Backend) -> Result<Self, StoreError> {
        let secrets = match backend {
            Backend::File => None,
            Backend::Keyring => Some(
                os_keyring_probe().map_err(|reason| StoreError::KeyringUnavailable { reason })?,
            ),
        };
        Self::with_secrets(dir, secrets)
    }

    /// The store of this user, from `MCPHOST_TOKEN_DIR` and
    /// `MCPHOST_TOKEN_STORE` (see [`TokenStore::open_default_with`]).
    pub fn open_default() -> Result<Self, StoreError> {
        Self::open_default_with(&|name| std::env::var(name).ok())
    }

    /// As [`TokenStore::open_default`], reading variables through `env`.
    /// Directory: `MCPHOST_TOKEN_DIR`, else the data directory of mcphost
    /// joined with `oauth`. Backend: `MCPHOST_TOKEN_STORE` = `auto` (the OS
    /// keyring when it answers a probe, else files), `file` or `keyring`.
    pub fn open_default_with(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, StoreError> {
        Self::open_default_inner(env, &os_keyring_probe)
    }

    fn open_default_inner(
        env: &dyn Fn(&str) -> Option<String>,
        probe: &dyn Fn() -> Result<Arc<dyn SecretStore>, String>,
    ) -> Result<Self, StoreError> {
        let dir = match env(TOKEN_DIR_VAR).filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => directories::ProjectDirs::from("", "", "mcphost")
                .map(|p| p.data_dir().join("oauth"))
                .ok_or(StoreError::NoDataDir)?,
        };
        let raw = env(TOKEN_STORE_VAR).unwrap_or_default();
        let setting = raw.trim().to_ascii_lowercase();
        let mut fallback = None;
        let secrets = match setting.as_str() {
            "" | "auto" => match probe() {
                Ok(s) => Some(s),
                Err(reason) => {
                    tracing::debug!(%reason, "OS keyring not available, tokens go to files");
                    fallback = Some(reason);
                    None
                }
            },
            "file" => None,
            "keyring" => Some(probe().map_err(|reason| StoreError::Setting {
                var: TOKEN_STORE_VAR,
                value: raw.clone(),
                reason: format!("the OS keyring is not available: {reason}"),
            })?),
            _ => {
                return Err(StoreError::Setting {
                    var: TOKEN_STORE_VAR,
                    value: raw.clone(),
                    reason: "expected auto, file or keyring".into(),
                });
            }
        };
        let mut store = Self::with_secrets(dir, secrets)?;
        store.fallback = fallback;
        Ok(store)
    }

    fn with_secrets(
        dir: PathBuf,
        secrets: Option<Arc<dyn SecretStore>>,
    ) -> Result<Self, StoreError> {
        mcphost_state::statefile::ensure_private_dir(&dir)?;
        let backend = if secrets.is_some() {
            Backend::Keyring
        } else {
            Backend::File
        };
        Ok(TokenStore {
            dir,
            backend,
            secrets,
            fallback: None,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// `"file"` or `"keyring"`.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Why `auto` keeps secrets in plain files: the OS keyring's error.
    /// `None` when they are in the keyring or files were asked for.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The backend in use and why, for `auth status` and `doctor`.
    pub fn describe_backend(&self) -> String {
        match (&self.backend, &self.fallback) {
            (Backend::Keyring, _) => "the OS keyring (the files hold no secrets)".into(),
            (Backend::File, Some(reason)) => {
                format!("plain files (0600): {TOKEN_STORE_VAR}=auto found no OS keyring ({reason})")
            }
            (Backend::File, None) => format!("plain files (0600), as {TOKEN_STORE_VAR}=file asks"),
        }
    }

    /// The entry of `key`, or `None`. With secrets in the keyring this calls
    /// the keyring (blocking this thread for at most a few seconds).
    pub fn load(&self, key: &TokenKey) -> Result<Option<StoredSignIn>, StoreError> {
        let path = self.file(key);
        // A reader between the keyring write and the index write of a save
        // sees two stamps; the save finishes within moments.
        let mut tries = 0u32;
        loop {
            let Some(stored) = self.read_stored(&path, Some(key))? else {
                return Ok(None);
            };
            let Some(kr) = stored.keyring.clone() else {
                return Ok(Some(stored.entry));
            };
            let secrets = self.read_secrets(&path, &kr)?;
            tries = tries.saturating_add(1);
            if secrets.stamp == kr.stamp || tries >= 3 {
                if secrets.stamp != kr.stamp {
                    // A save that stopped between its two writes: the
                    // keyring (written first) has the newer secrets.
                    tracing::warn!(path = %path.display(), "token store: index and keyring item are of different saves");
                }
                return Ok(Some(merge(stored.entry, secrets)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Replaces the entry of `key` atomically and sets its `updated_at`. Does
    /// not take the lock: hold [`TokenStore::lock`] around load-modify-save.
    pub fn save(&self, key: &TokenKey, entry: &StoredSignIn) -> Result<(), StoreError> {
        if self.fallback.is_some()
            && !PLAIN_FILES_WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                dir = %self.dir.display(),
                "secrets are stored in {}; set {TOKEN_STORE_VAR}=file to say that is meant",
                self.describe_backend()
            );
        }
        let path = self.file(key);
        let mut entry = entry.clone();
        entry.updated_at = unix_now();
        let previous_ref = match &self.secrets {
            Some(_) => None,
            // A file store replacing an entry whose secrets were in the
            // keyring deletes them there afterwards, best effort.
            None => self
                .read_stored(&path, None)
                .ok()
                .flatten()
                .and_then(|s| s.keyring),
        };
        let stored = match &self.secrets {
            None => Stored {
                version: FORMAT_VERSION,
                key: key.clone(),
                entry,
                keyring: None,
            },
            Some(keyring) => {
                let (index, mut secrets) = split(entry);
                let kr = KeyringRef {
                    user: key_hash(key),
                    stamp: random_stamp(),
                };
                secrets.stamp = kr.stamp.clone();
                let blob = serde_json::to_string(&secrets).map_err(|e| StoreError::Io {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                keyring
                    .set(&kr.user, &blob)
                    .map_err(|reason| StoreError::Keyring {
                        user: kr.user.clone(),
                        reason,
                    })?;
                Stored {
                    version: FORMAT_VERSION,
                    key: key.clone(),
                    entry: index,
                    keyring: Some(kr),
                }
            }
        };
        let text = serde_json::to_vec_pretty(&stored).map_err(|e| StoreError::Io {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        mcphost_state::statefile::write_atomic(&path, &text)?;
        if let Some(kr) = previous_ref {
            match os_keyring() {
                Ok(k) => {
                    if let Err(reason) = k.delete(&kr.user) {
                        tracing::warn!(user = %kr.user, %reason, "token store: could not delete the old keyring item");
                    }
                }
                Err(reason) => {
                    tracing::warn!(user = %kr.user, %reason, "token store: old keyring item left in place")
                }
            }
        }
        Ok(())
    }

    /// Removes the entry of `key` (and its keyring item); `true` when there
    /// was one. The lock file stays.
    pub fn remove(&self, key: &TokenKey) -> Result<bool, StoreError> {
        let path = self.file(key);
        let exists = path.exists();
        let stored_ref = match self.read_stored(&path, Some(key)) {
            Ok(s) => s.and_then(|s| s.keyring),
            // Garbage is removed all the same.
            Err(StoreError::Corrupt { .. }) => None,
            Err(e) => return Err(e),
        };
        let mut removed_secret = false;
        let user = key_hash(key);
        // The keyring item goes first: a failure keeps the index, so that
        // the user can retry rather than leave a secret nobody knows of.
        if let Some(keyring) = &self.secrets {
            removed_secret = keyring
                .delete(&user)
                .map_err(|reason| StoreError::Keyring {
                    user: user.clone(),
                    reason,
                })?;
        } else if let Some(kr) = stored_ref {
            let keyring = os_keyring().map_err(|reason| StoreError::KeyringUnavailable {
                reason: format!("{} keeps its secrets there: {reason}", path.display()),
            })?;
            removed_secret = keyring
                .delete(&kr.user)
                .map_err(|reason| StoreError::Keyring {
                    user: kr.user.clone(),
                    reason,
                })?;
        }
        if exists {
            match std::fs::remove_file(&path) {
                Ok(()) => mcphost_state::statefile::sync_dir(&self.dir)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&path, e)),
            }
        }
        Ok(exists || removed_secret)
    }

    /// Every readable entry; an unusable file is logged and skipped (see
    /// [`TokenStore::scan`] to report them).
    pub fn list(&self) -> Result<Vec<(TokenKey, StoredSignIn)>, StoreError> {
        Ok(self
            .scan()?
            .into_iter()
            .filter_map(|r| match r {
                Ok(kv) => Some(kv),
                Err(e) => {
                    tracing::warn!(error = %e, "token store: entry skipped");
                    None
                }
            })
            .collect())
    }

    /// Every entry file of the directory, each loaded or its error.
    pub fn scan(&self) -> Result<Vec<ScannedSignIn>, StoreError> {
        let read = std::fs::read_dir(&self.dir).map_err(|e| io_err(&self.dir, e))?;
        let mut names = Vec::new();
        for dirent in read {
            let dirent = dirent.map_err(|e| io_err(&self.dir, e))?;
            let name = dirent.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(hash) = name.strip_suffix(".json")
                && is_key_hash(hash)
            {
                names.push(hash.to_owned());
            }
        }
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for hash in names {
            let path = self.dir.join(format!("{hash}.json"));
            out.push(self.load_listed(&path, &hash));
        }
        Ok(out)
    }

    fn load_listed(&self, path: &Path, hash: &str) -> Result<(TokenKey, StoredSignIn), StoreError> {
        let Some(stored) = self.read_stored(path, None)? else {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: "removed while listing".into(),
            });
        };
        if key_hash(&stored.key) != hash {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: "its key does not match its file name".into(),
            });
        }
        // The key checked, load handles the keyring and its stamps.
        let key = stored.key;
        match self.load(&key)? {
            Some(entry) => Ok((key, entry)),
            None => Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: "removed while listing".into(),
            }),
        }
    }

    /// An exclusive lock on `key`'s entry, against other processes and
    /// other tasks and threads of this one, held until the [`StoreLock`]
    /// drops. Waits at most [`LOCK_TIMEOUT`]; needs a tokio runtime with
    /// its time driver.
    pub async fn lock(&self, key: &TokenKey) -> Result<StoreLock, StoreError> {
        self.lock_within(key, LOCK_TIMEOUT).await
    }

    /// As [`TokenStore::lock`], waiting at most `timeout`.
    pub async fn lock_within(
        &self,
        key: &TokenKey,
        timeout: Duration,
    ) -> Result<StoreLock, StoreError> {
        let path = self.dir.join(format!("{}.lock", key_hash(key)));
        let inner = mcphost_state::lockfile::lock_within(&path, timeout)
            .await
            .map_err(|e| match e {
                mcphost_state::lockfile::LockError::Timeout { path, .. } => {
                    StoreError::LockTimeout { path }
                }
                mcphost_state::lockfile::LockError::Io { path, source } => io_err(&path, source),
                other => StoreError::Io {
                    path: path.clone(),
                    reason: other.to_string(),
                },
            })?;
        Ok(StoreLock { inner })
    }

    fn file(&self, key: &TokenKey) -> PathBuf {
        self.dir.join(format!("{}.json", key_hash(key)))
    }

    /// The parsed file, `None` when missing. With `expect`, a file holding
    /// another key is an error.
    fn read_stored(
        &self,
        path: &Path,
        expect: Option<&TokenKey>,
    ) -> Result<Option<Stored>, StoreError> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(path, e)),
        };
        mcphost_state::statefile::tighten(&file, path, 0o600)?;
        let mut bytes = Vec::new();
        (&file)
            .take(MAX_FILE_BYTES.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io_err(path, e))?;
        let corrupt = |reason: String| StoreError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(corrupt(format!("larger than {MAX_FILE_BYTES} bytes")));
        }
        // Only where the error is, not what serde saw: it could be a secret.
        let stored: Stored =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(json_reason(&e)))?;
        if stored.version != FORMAT_VERSION {
            return Err(corrupt(format!(
                "format version {} (this mcphost reads {FORMAT_VERSION})",
                stored.version
            )));
        }
        if let Some(key) = expect
            && &stored.key != key
        {
            return Err(corrupt(
                "it holds another issuer's or resource's entry".into(),
            ));
        }
        Ok(Some(stored))
    }

    fn read_secrets(&self, path: &Path, kr: &KeyringRef) -> Result<Secrets, StoreError> {
        let keyring = match &self.secrets {
            Some(k) => k.clone(),
            // Entries saved by a keyring store stay readable by a file
            // store of the same directory where the keyring answers.
            None => os_keyring().map_err(|reason| StoreError::KeyringUnavailable {
                reason: format!("{} keeps its secrets there: {reason}", path.display()),
            })?,
        };
        let keyring_err = |reason: String| StoreError::Keyring {
            user: kr.user.clone(),
            reason,
        };
        let blob = keyring.get(&kr.user).map_err(keyring_err)?.ok_or_else(|| {
            keyring_err(format!(
                "no item for the entry {} (deleted?); remove the entry or sign in again",
                path.display()
            ))
        })?;
        serde_json::from_str::<Secrets>(&blob)
            .map_err(|e| keyring_err(format!("unreadable item: {}", json_reason(&e))))
    }
}

/// Held while a [`TokenStore::lock`] is: dropping it releases the lock. A
/// process that dies releases its locks with its file descriptors.
pub struct StoreLock {
    inner: mcphost_state::lockfile::FileLock,
}

impl StoreLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl std::fmt::Debug for StoreLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLock")
            .field("path", &self.inner.path())
            .finish_non_exhaustive()
    }
}

/// 32 hex digits of SHA-256(issuer NUL resource): the file name and the
/// keyring user of an entry.
fn key_hash(key: &TokenKey) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(key.issuer.as_bytes());
    h.update([0]);
    h.update(key.resource.as_bytes());
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn is_key_hash(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn split(mut entry: StoredSignIn) -> (StoredSignIn, Secrets) {
    let mut secrets = Secrets::default();
    if let Some(t) = &mut entry.tokens {
        secrets.access_token = Some(std::mem::take(&mut t.access_token));
        secrets.refresh_token = t.refresh_token.take();
    }
    if let Some(c) = &mut entry.client {
        secrets.client_secret = c.client_secret.take();
    }
    secrets.dpop_key = entry.dpop_key.take();
    (entry, secrets)
}

fn merge(mut entry: StoredSignIn, secrets: Secrets) -> StoredSignIn {
    if let Some(t) = &mut entry.tokens {
        t.access_token = secrets.access_token.unwrap_or_default();
        t.refresh_token = secrets.refresh_token;
    }
    if let Some(c) = &mut entry.client {
        c.client_secret = secrets.client_secret;
    }
    entry.dpop_key = secrets.dpop_key;
    entry
}

fn json_reason(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Io => "read error",
        Category::Syntax => "not valid JSON",
        Category::Data => "not a token store entry",
        Category::Eof => "truncated",
    };
    format!("{what} at line {} column {}", e.line(), e.column())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn random_stamp() -> String {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        // Only needs to differ between saves.
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b = (n as u64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn io_err(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

impl From<mcphost_state::statefile::StateFileError> for StoreError {
    fn from(e: mcphost_state::statefile::StateFileError) -> StoreError {
        StoreError::Io {
            path: e.path,
            reason: e.reason,
        }
    }
}

/// Where the keyring backend keeps secrets: the OS keyring, or a fake in
/// tests. Errors are human-readable reasons (never a secret).
trait SecretStore: Send + Sync {
    fn get(&self, user: &str) -> Result<Option<String>, String>;
    fn set(&self, user: &str, secret: &str) -> Result<(), String>;
    /// `true` when there was an item.
    fn delete(&self, user: &str) -> Result<bool, String>;
}

/// The OS keyring after a successful probe (cached for the process).
fn os_keyring_probe() -> Result<Arc<dyn SecretStore>, String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(os::probe).clone()?;
    os_keyring()
}

/// The OS keyring without a probe: its calls fail if it does not answer.
fn os_keyring() -> Result<Arc<dyn SecretStore>, String> {
    os::keyring()
}

/// The keyring user of a config secret (`${keyring:NAME}` in the config):
/// `config:NAME`, beside the token entries' 32-hex-digit users.
fn config_secret_user(name: &str) -> String {
    format!("config:{name}")
}

/// The value of the config's `${keyring:NAME}`: `Ok(None)` when the OS
/// keyring has no such item; `Err` (a reason, never a secret) when it
/// cannot be asked.
pub fn config_secret(name: &str) -> Result<Option<String>, String> {
    os_keyring()?.get(&config_secret_user(name))
}

/// The process environment, for `config::load` and `config::parse`; `keyring:NAME` is
/// the OS keyring's config secret NAME ([`config_secret`]).
pub fn process_env(name: &str) -> Option<String> {
    if let Some(secret) = name.strip_prefix("keyring:") {
        return match config_secret(secret) {
            Ok(value) => value,
            Err(reason) => {
                tracing::warn!(secret, %reason, "cannot read a config secret from the OS keyring");
                None
            }
        };
    }
    std::env::var(name).ok()
}

/// Stores `value` as the config secret `NAME` (read back by
/// `${keyring:NAME}`), once the OS keyring has answered a probe.
pub fn store_config_secret(name: &str, value: &str) -> Result<(), String> {
    os_keyring_probe()?.set(&config_secret_user(name), value)
}

#[cfg(all(
    feature = "keyring",
    any(target_os = "linux", target_os = "macos", target_os = "windows")
))]
mod os {
    use super::{KEYRING_SERVICE, SecretStore};
    use std::sync::Arc;
    use std::time::Duration;

    /// A call that needs a person (a locked keyring's unlock prompt) may
    /// take a while; one that never answers must not hang the caller.
    const CALL_TIMEOUT: Duration = Duration::from_secs(20);
    const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

    pub(super) struct OsKeyring;

    /// Every call runs on a thread of its own: the Secret Service client
    /// blocks on its own tokio runtime, which panics on a runtime thread,
    /// and a keyring that never answers leaves only that thread waiting.
    fn bounded<T: Send + 'static>(
        timeout: Duration,
        f: impl FnOnce() -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("mcphost-keyring".into())
            .spawn(move || {
                let _ = tx.send(f());
            })
            .map_err(|e| format!("cannot start a keyring thread: {e}"))?;
        match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                Err(format!("no answer within {} s", timeout.as_secs()))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err("the keyring call failed (panicked)".into())
            }
        }
    }

    fn entry(user: &str) -> Result<keyring::Entry, String> {
        keyring::Entry::new(KEYRING_SERVICE, user).map_err(|e| e.to_string())
    }

    impl SecretStore for OsKeyring {
        fn get(&self, user: &str) -> Result<Option<String>, String> {
            let user = user.to_owned();
            bounded(CALL_TIMEOUT, move || match entry(&user)?.get_password() {
                Ok(s) => Ok(Some(s)),
                Err(keyring::Error::NoEntry) => Ok(None),
                Err(e) => Err(e.to_string()),
            })
        }

        fn set(&self, user: &str, secret: &str) -> Result<(), String> {
            let user = user.to_owned();
            let secret = secret.to_owned();
            bounded(CALL_TIMEOUT, move || {
                entry(&user)?
                    .set_password(&secret)
                    .map_err(|e| e.to_string())
            })
        }

        fn delete(&self, user: &str) -> Result<bool, String> {
            let user = user.to_owned();
            bounded(CALL_TIMEOUT, move || {
                match entry(&user)?.delete_credential() {
                    Ok(()) => Ok(true),
                    Err(keyring::Error::NoEntry) => Ok(false),
                    Err(e) => Err(e.to_string()),
                }
            })
        }
    }

    /// Write, read back and delete an item of this process.
    pub(super) fn probe() -> Result<(), String> {
        let user = format!("probe-{}", std::process::id());
        bounded(PROBE_TIMEOUT, move || {
            let e = entry(&user)?;
            e.set_password("probe").map_err(|e| e.to_string())?;
            let back = e.get_password().map_err(|e| e.to_string());
            let _ = e.delete_credential();
            match back? {
                s if s == "probe" => Ok(()),
                _ => Err("an item written could not be read back".into()),
            }
        })
    }

    pub(super) fn keyring() -> Result<Arc<dyn SecretStore>, String> {
        Ok(Arc::new(OsKeyring))
    }
}

#[cfg(not(all(
    feature = "keyring",
    any(target_os = "linux", target_os = "macos", target_os = "windows")
)))]
mod os {
    use super::SecretStore;
    use std::sync::Arc;

    fn why() -> String {
        if cfg!(feature = "keyring") {
            "mcphost has no OS keyring support on this platform".into()
        } else {
            "mcphost was built without the `keyring` feature".into()
        }
    }

    pub(super) fn probe() -> Result<(), String> {
        Err(why())
    }

    pub(super) fn keyring() -> Result<Arc<dyn SecretStore>, String> {
        Err(why())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// An entry with every secret it can hold, as a token file has it.
    const SECRET_ENTRY: &str = concat!(
        r#"{"tokens":{"access_token":"AT-s3cr3t","token_type":"DPoP","refresh_token":"RT-s3cr3t","#,
        r#""expires_at":1900000000,"scope":"mcp:read"},"client":{"client_id":"client-1","#,
        r#""client_secret":"CS-s3cr3t","token_endpoint_auth_method":"client_secret_post"},"#,
        r#""server":"notes","updated_at":7,"dpop_key":"-----BEGIN PRIVATE KEY-----\nKEY-s3cr3t\n-----END PRIVATE KEY-----\n"}"#,
    );

    #[test]
    fn debug_hides_secrets() {
        let e: StoredSignIn = serde_json::from_str(SECRET_ENTRY).unwrap();
        for shown in [
            format!("{e:?}"),
            format!("{:?}", e.tokens),
            format!("{:?}", e.client),
            format!("{:?}", e.dpop_key),
        ] {
            assert!(!shown.contains("s3cr3t"), "{shown}");
            assert!(shown.contains("<redacted>"), "{shown}");
        }
        // What is not secret is still shown.
        assert!(format!("{e:?}").contains("client-1"));
    }

    #[test]
    fn a_token_file_entry_is_written_byte_for_byte_as_read() {
        let e: StoredSignIn = serde_json::from_str(SECRET_ENTRY).unwrap();
        assert_eq!(serde_json::to_string(&e).unwrap(), SECRET_ENTRY);
    }

    /// A keyring in memory, counting its calls.
    #[derive(Default)]
    struct MemKeyring {
        items: std::sync::Mutex<HashMap<String, String>>,
    }

    impl SecretStore for MemKeyring {
        fn get(&self, user: &str) -> Result<Option<String>, String> {
            Ok(self.items.lock().unwrap().get(user).cloned())
        }
        fn set(&self, user: &str, secret: &str) -> Result<(), String> {
            self.items
                .lock()
                .unwrap()
                .insert(user.into(), secret.into());
            Ok(())
        }
        fn delete(&self, user: &str) -> Result<bool, String> {
            Ok(self.items.lock().unwrap().remove(user).is_some())
        }
    }

    fn key(n: u32) -> TokenKey {
        TokenKey {
            issuer: format!("https://as{n}.example"),
            resource: format!("https://mcp{n}.example/mcp"),
        }
    }

    fn entry(tag: &str) -> StoredSignIn {
        StoredSignIn {
            tokens: Some(Tokens {
                access_token: format!("AT-{tag}").into(),
                token_type: "Bearer".into(),
                refresh_token: Some(format!("RT-{tag}").into()),
                expires_at: Some(1_900_000_000),
                scope: Some("mcp:read".into()),
            }),
            client: Some(Registration {
                client_id: "client-1".into(),
                client_secret: Some(format!("CS-{tag}").into()),
                token_endpoint_auth_method: Some("client_secret_post".into()),
            }),
            server: Some("notes".into()),
            token_endpoint: Some("https://as.example/token".into()),
            updated_at: 0,
            writer: None,
            // Transparent: the PEM text itself.
            dpop_key: serde_json::from_value(serde_json::json!(format!("DK-{tag}"))).unwrap(),
        }
    }

    fn without_stamp(mut e: StoredSignIn) -> StoredSignIn {
        e.updated_at = 0;
        e
    }

    fn keyring_store(dir: PathBuf) -> (TokenStore, Arc<MemKeyring>) {
        let mem = Arc::new(MemKeyring::default());
        let store = TokenStore::with_secrets(dir, Some(mem.clone())).unwrap();
        (store, mem)
    }

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    fn no_keyring() -> Result<Arc<dyn SecretStore>, String> {
        Err("no session bus".into())
    }

    fn mem_keyring() -> Result<Arc<dyn SecretStore>, String> {
        Ok(Arc::new(MemKeyring::default()))
    }

    #[test]
    fn keyring_backend_keeps_secrets_out_of_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, mem) = keyring_store(tmp.path().join("oauth"));
        assert_eq!(store.backend_name(), "keyring");
        store.save(&key(1), &entry("one")).unwrap();

        let file = std::fs::read_to_string(store.file(&key(1))).unwrap();
        for secret in ["AT-one", "RT-one", "CS-one", "DK-one"] {
            assert!(!file.contains(secret), "{secret} in the index: {file}");
        }
        assert!(file.contains("client-1") && file.contains("notes"));
        let item = mem.items.lock().unwrap().get(&key_hash(&key(1))).cloned();
        let item = item.expect("no keyring item under the key's hash");
        assert!(item.contains("AT-one") && item.contains("RT-one") && item.contains("CS-one"));
        assert!(item.contains("DK-one"), "the DPoP key is a secret: {item}");

        let back = store.load(&key(1)).unwrap().unwrap();
        assert_eq!(without_stamp(back), entry("one"));
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, key(1));
        assert_eq!(without_stamp(listed[0].1.clone()), entry("one"));

        assert!(store.remove(&key(1)).unwrap());
        assert!(mem.items.lock().unwrap().is_empty(), "keyring item left");
        assert_eq!(store.load(&key(1)).unwrap(), None);
    }

    #[test]
    fn keyring_item_of_another_save_is_detected_and_the_keyring_wins() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, mem) = keyring_store(tmp.path().to_path_buf());
        store.save(&key(1), &entry("old")).unwrap();
        let index = std::fs::read(store.file(&key(1))).unwrap();
        store.save(&key(1), &entry("new")).unwrap();
        // A save that wrote the keyring and stopped before the index.
        std::fs::write(store.file(&key(1)), index).unwrap();
        let back = store.load(&key(1)).unwrap().unwrap();
        assert_eq!(back.tokens.unwrap().access_token.expose(), "AT-new");
        assert_eq!(mem.items.lock().unwrap().len(), 1);
    }

    #[test]
    fn missing_keyring_item_is_a_clear_error() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, mem) = keyring_store(tmp.path().to_path_buf());
        store.save(&key(1), &entry("one")).unwrap();
        mem.items.lock().unwrap().clear();
        let err = store.load(&key(1)).unwrap_err().to_string();
        assert!(
            err.contains("deleted?") && err.contains(&key_hash(&key(1))),
            "{err}"
        );
    }

    #[test]
    fn file_store_saving_over_a_keyring_entry_writes_inline_secrets() {
        let tmp = tempfile::tempdir().unwrap();
        let (kstore, _mem) = keyring_store(tmp.path().to_path_buf());
        kstore.save(&key(1), &entry("k")).unwrap();
        let fstore = TokenStore::open(tmp.path().to_path_buf()).unwrap();
        fstore.save(&key(1), &entry("f")).unwrap();
        let file = std::fs::read_to_string(fstore.file(&key(1))).unwrap();
        assert!(
            file.contains("AT-f") && !file.contains("\"keyring\""),
            "{file}"
        );
        assert_eq!(
            without_stamp(fstore.load(&key(1)).unwrap().unwrap()),
            entry("f")
        );
    }

    #[test]
    fn backend_from_the_environment() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tokens");
        let d = dir.to_str().unwrap();

        let bogus = TokenStore::open_default_inner(
            &env_of(&[(TOKEN_DIR_VAR, d), (TOKEN_STORE_VAR, "bogus")]),
            &mem_keyring,
        )
        .unwrap_err()
        .to_string();
        assert!(bogus.contains("MCPHOST_TOKEN_STORE=bogus"), "{bogus}");
        assert!(bogus.contains("auto, file or keyring"), "{bogus}");

        let keyring = TokenStore::open_default_inner(
            &env_of(&[(TOKEN_DIR_VAR, d), (TOKEN_STORE_VAR, "keyring")]),
            &no_keyring,
        )
        .unwrap_err()
        .to_string();
        assert!(keyring.contains("MCPHOST_TOKEN_STORE=keyring"), "{keyring}");
        assert!(keyring.contains("no session bus"), "{keyring}");

        for (setting, probe, want) in [
            ("auto", &no_keyring as &dyn Fn() -> _, "file"),
            ("", &no_keyring, "file"),
            ("auto", &mem_keyring, "keyring"),
            (" Keyring ", &mem_keyring, "keyring"),
            ("file", &mem_keyring, "file"),
        ] {
            let s = TokenStore::open_default_inner(
                &env_of(&[(TOKEN_DIR_VAR, d), (TOKEN_STORE_VAR, setting)]),
                probe,
            )
            .unwrap();
            assert_eq!(s.backend_name(), want, "setting {setting:?}");
            assert_eq!(s.dir(), dir);
        }
        // Unset means auto.
        let s =
            TokenStore::open_default_inner(&env_of(&[(TOKEN_DIR_VAR, d)]), &no_keyring).unwrap();
        assert_eq!(s.backend_name(), "file");
    }

    #[test]
    fn default_dir_is_the_data_dir_joined_with_oauth() {
        let Some(p) = directories::ProjectDirs::from("", "", "mcphost") else {
            return; // no home: open_default_inner reports NoDataDir
        };
        // Only compute: open_default_inner would create it.
        let want = p.data_dir().join("oauth");
        #[cfg(target_os = "linux")]
        assert!(want.ends_with(".local/share/mcphost/oauth") || want.ends_with("mcphost/oauth"));
        #[cfg(target_os = "macos")]
        assert!(want.ends_with("Library/Application Support/mcphost/oauth"));
        let _ = want;
    }

    #[cfg(not(all(
        feature = "keyring",
        any(target_os = "linux", target_os = "macos", target_os = "windows")
    )))]
    #[test]
    fn without_the_feature_keyring_is_refused_clearly() {
        let tmp = tempfile::tempdir().unwrap();
        let err = TokenStore::open_with(tmp.path().to_path_buf(), Backend::Keyring)
            .unwrap_err()
            .to_string();
        assert!(err.contains("without the `keyring` feature"), "{err}");
    }

    #[test]
    fn a_file_holding_another_key_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TokenStore::open(tmp.path().to_path_buf()).unwrap();
        store.save(&key(1), &entry("one")).unwrap();
        std::fs::copy(store.file(&key(1)), store.file(&key(2))).unwrap();
        let err = store.load(&key(2)).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        // list reports it, and keeps the good one.
        let scanned = store.scan().unwrap();
        assert_eq!(scanned.iter().filter(|r| r.is_ok()).count(), 1);
        assert_eq!(store.list().unwrap().len(), 1);
    }

    #[test]
    fn errors_about_bad_files_do_not_quote_their_content() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TokenStore::open(tmp.path().to_path_buf()).unwrap();
        let text = format!(
            r#"{{"version":1,"key":{{"issuer":"{}","resource":"{}"}},"entry":{{"updated_at":"SECRET-XYZ"}}}}"#,
            key(1).issuer,
            key(1).resource
        );
        std::fs::write(store.file(&key(1)), text).unwrap();
        let err = store.load(&key(1)).unwrap_err().to_string();
        assert!(!err.contains("SECRET-XYZ"), "{err}");
        assert!(err.contains("not a token store entry"), "{err}");
    }
}
