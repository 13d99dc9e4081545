//! The daemon's view of its config file: the last good config, the last
//! error, reloads, and edits that keep the user's text intact.
//!
//! An edit is read → transform → write. Edits in this process take turns
//! (one [`Edited`] at a time, held until the new config is applied), and
//! edits by other processes on the same file are kept apart by an advisory
//! lock on `<config>.lock`, so no edit is lost to a concurrent one.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use tokio::sync::OwnedMutexGuard;

use super::interpolate::is_variable_name;
use super::location::{ConfigLocation, load_lenient_from};
use super::{
    ConfigError, HostConfig, Issue, Issues, SaidOnce, ServerEnvLookup, edit, parse,
    parse_lenient_for,
};

/// How long an edit waits for another process's edit of the same file.
const LOCK_WAIT: Duration = Duration::from_secs(10);
const LOCK_POLL: Duration = Duration::from_millis(10);

struct State {
    current: HostConfig,
    error: Option<String>,
}

/// `${VAR}` values that CLI commands gave for a server (server → name →
/// value), from their own environment; kept in memory only.
type Given = BTreeMap<String, BTreeMap<String, String>>;

/// Where `${VAR}` values come from when no CLI gave one: the daemon's
/// environment and `${keyring:…}` from the keyring (`auth::process_env`).
pub type EnvSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A server's `${VAR}`: the values given for it, then `env` (and
/// `${keyring:…}` from there, never given).
fn lookup(given: &Given, env: &EnvSource, server: &str, name: &str) -> Option<String> {
    given
        .get(server)
        .and_then(|vars| vars.get(name))
        .cloned()
        .or_else(|| env(name))
}

pub struct ConfigStore {
    location: ConfigLocation,
    /// An embedded engine's config has no file: edits change this text.
    memory: Option<Mutex<String>>,
    state: Mutex<State>,
    given: Mutex<Given>,
    env: EnvSource,
    /// The config's warnings are logged once per store (the daemon's).
    said: Arc<SaidOnce>,
    /// One edit at a time, from its read until its config is applied.
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// A config just written by an edit. It holds the edit turn: apply
/// `config` before dropping it, so edits reach the servers in the order
/// they reached the file.
pub struct Edited {
    pub config: HostConfig,
    _turn: OwnedMutexGuard<()>,
}

impl ConfigStore {
    /// Load the config. A file that cannot be read or parsed is an error;
    /// a server entry with errors is not (it is in `broken`, and is
    /// [`Self::last_error`]).
    pub fn open(location: ConfigLocation, env: EnvSource) -> Result<ConfigStore, ConfigError> {
        let mut current = load_lenient_from(&location, &|_, name| env(name))?;
        let said = Arc::new(SaidOnce::default());
        said.say(&current.warnings);
        let error = keep_last_good(&mut current, &HostConfig::default());
        Ok(ConfigStore {
            location,
            memory: None,
            state: Mutex::new(State { current, error }),
            given: Mutex::new(Given::new()),
            env,
            said,
            turn: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// A config held only in memory (the C library's embedded mode): edits
    /// go through the same text-preserving editor and validation as a
    /// file's, and nothing is written. `path` names it in messages and
    /// anchors relative paths.
    pub fn in_memory(
        text: &str,
        path: PathBuf,
        env: EnvSource,
    ) -> Result<ConfigStore, ConfigError> {
        let current = parse(text, &path, &*env)?;
        let said = Arc::new(SaidOnce::default());
        said.say(&current.warnings);
        Ok(ConfigStore {
            location: ConfigLocation {
                path,
                source: super::location::ConfigSource::Flag,
            },
            memory: Some(Mutex::new(text.to_owned())),
            state: Mutex::new(State {
                current,
                error: None,
            }),
            given: Mutex::new(Given::new()),
            env,
            said,
            turn: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    fn given(&self) -> Given {
        self.given.lock().clone()
    }

    /// Keep `vars` as `server`'s `${VAR}` values, above the daemon's own
    /// environment, for this daemon's life: what the CLI that adds,
    /// enables or restarts it has set of the variables its entry names.
    /// Names that are not variables (`keyring:…`) are ignored. True when a
    /// value changed; the next edit or [`Self::reload`] resolves with them.
    pub fn give(&self, server: &str, vars: BTreeMap<String, String>) -> bool {
        let mut given = self.given.lock();
        let kept = given.entry(server.to_owned()).or_default();
        let mut changed = false;
        for (name, value) in vars {
            if is_variable_name(&name) && kept.get(&name) != Some(&value) {
                kept.insert(name, value);
                changed = true;
            }
        }
        if kept.is_empty() {
            given.remove(server);
        }
        changed
    }

    pub fn current(&self) -> HostConfig {
        self.lock().current.clone()
    }

    /// Why the newest file was rejected, while the last good config runs.
    pub fn last_error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// Re-read the file. `Ok(None)` when nothing that matters changed; an
    /// invalid file is rejected and remembered, and the last good config
    /// stays. A server entry with errors keeps its last good version, if it
    /// had one, and is remembered as the error.
    ///
    /// Waits for an edit in progress, and holds the turn like one, so a
    /// reload never applies a file older than an edit already applied.
    pub async fn reload(&self) -> Result<Option<Edited>, ConfigError> {
        let turn = self.turn.clone().lock_owned().await;
        if self.memory.is_some() {
            return Ok(None);
        }
        let given = self.given();
        match load_lenient_from(&self.location, &|server, name| {
            lookup(&given, &self.env, server, name)
        }) {
            Ok(mut cfg) => {
                self.said.say(&cfg.warnings);
                let mut st = self.lock();
                st.error = keep_last_good(&mut cfg, &st.current);
                if let Some(e) = &st.error {
                    tracing::error!(
                        "config entries rejected, each keeps its last good version: {e}"
                    );
                }
                if cfg == st.current {
                    return Ok(None);
                }
                st.current = cfg.clone();
                Ok(Some(Edited {
                    config: cfg,
                    _turn: turn,
                }))
            }
            Err(e) => {
                self.lock().error = Some(e.to_string());
                Err(e)
            }
        }
    }

    async fn edit(
        &self,
        f: impl FnOnce(&str) -> Result<String, ConfigError>,
    ) -> Result<Edited, ConfigError> {
        let turn = self.turn.clone().lock_owned().await;
        let path = &self.location.path;
        let given = self.given();
        let env = |server: &str, name: &str| lookup(&given, &self.env, server, name);
        if let Some(memory) = &self.memory {
            let mut text = memory.lock();
            let new_text = f(&text)?;
            let cfg = no_new_errors(&text, &new_text, path, &env)?;
            *text = new_text;
            return Ok(self.edited(cfg, turn));
        }
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|source| ConfigError::Write {
                path: path.clone(),
                source,
            })?;
        }
        let _file = lock_file(path).await?;
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.clone(),
                    source,
                });
            }
        };
        let new_text = f(&text).map_err(|e| e.with_path(path))?;
        // Never write a file the daemon would then refuse, nor one that
        // breaks an entry; entries broken before do not stop the edit.
        let cfg = no_new_errors(&text, &new_text, path, &env)?;
        edit::write_atomic(path, &new_text)?;
        Ok(self.edited(cfg, turn))
    }

    fn edited(&self, mut cfg: HostConfig, turn: OwnedMutexGuard<()>) -> Edited {
        self.said.say(&cfg.warnings);
        let mut st = self.lock();
        st.error = keep_last_good(&mut cfg, &st.current);
        st.current = cfg.clone();
        Edited {
            config: cfg,
            _turn: turn,
        }
    }

    pub async fn add(&self, name: &str, entry_json: &str) -> Result<Edited, ConfigError> {
        self.edit(|t| edit::add_server(t, name, entry_json)).await
    }

    /// Any edit of the text (`mcphost import` adds many servers in one),
    /// with the same lock, validation and atomic write as [`Self::add`].
    pub async fn edit_text(
        &self,
        f: impl FnOnce(&str) -> Result<String, ConfigError>,
    ) -> Result<Edited, ConfigError> {
        self.edit(f).await
    }

    pub async fn remove(&self, name: &str) -> Result<Edited, ConfigError> {
        let edited = self.edit(|t| edit::remove_server(t, name)).await?;
        self.given.lock().remove(name);
        Ok(edited)
    }

    pub async fn set_disabled(&self, name: &str, disabled: bool) -> Result<Edited, ConfigError> {
        self.edit(|t| edit::set_disabled(t, name, disabled)).await
    }
}

/// `new` parsed leniently, unless it has errors `old` did not: a file-wide
/// one, or a server entry broken that was not.
fn no_new_errors(
    old: &str,
    new: &str,
    path: &Path,
    env: ServerEnvLookup<'_>,
) -> Result<HostConfig, ConfigError> {
    let cfg = parse_lenient_for(new, path, env)?;
    if cfg.broken.is_empty() {
        return Ok(cfg);
    }
    let before: Vec<String> = parse_lenient_for(old, path, env)
        .map(|c| c.broken.into_iter().map(|b| b.name).collect())
        .unwrap_or_default();
    let fresh: Vec<Issue> = cfg
        .broken
        .iter()
        .filter(|b| !before.contains(&b.name))
        .flat_map(|b| b.issues.clone())
        .collect();
    if fresh.is_empty() {
        Ok(cfg)
    } else {
        Err(ConfigError::Invalid(Issues(fresh)))
    }
}

/// Each broken entry of `cfg` that runs in `current` keeps running as it
/// was (a bad edit stops nothing); the others stay in `cfg.broken`. Returns
/// every broken entry's issues, in file order, as the config's error.
fn keep_last_good(cfg: &mut HostConfig, current: &HostConfig) -> Option<String> {
    if cfg.broken.is_empty() {
        return None;
    }
    let mut issues: Vec<Issue> = cfg.broken.iter().flat_map(|b| b.issues.clone()).collect();
    issues.sort_by_key(|i| i.line);
    for b in std::mem::take(&mut cfg.broken) {
        match current.server(&b.name) {
            Some(old) => cfg.servers.push(old.clone()),
            None => cfg.broken.push(b),
        }
    }
    Some(Issues(issues).to_string())
}

/// `<config>.lock` beside the file the edit replaces (a symlink's target,
/// as [`edit::write_atomic`] does), locked exclusively. The lock file stays:
/// removing it would let two editors lock different files.
async fn lock_file(config: &Path) -> Result<Flock<File>, ConfigError> {
    let target = std::fs::canonicalize(config).unwrap_or_else(|_| config.to_path_buf());
    let mut name = target.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let path: PathBuf = target.with_file_name(name);
    let locked = |source| ConfigError::Locked {
        path: path.clone(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(locked)?;
    let started = tokio::time::Instant::now();
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((f, Errno::EWOULDBLOCK | Errno::EINTR)) if started.elapsed() < LOCK_WAIT => {
                file = f;
                tokio::time::sleep(LOCK_POLL).await;
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                return Err(locked(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("another process has been editing it for {LOCK_WAIT:?}"),
                )));
            }
            Err((_, errno)) => return Err(locked(errno.into())),
        }
    }
}
