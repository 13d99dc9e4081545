//! The daemon's view of its config file: the last good config, the last
//! error, reloads, and edits that keep the user's text intact.

use std::sync::Mutex;

use super::location::{ConfigLocation, load_from};
use super::{ConfigError, HostConfig, edit, parse, process_env};

struct State {
    current: HostConfig,
    error: Option<String>,
}

pub struct ConfigStore {
    location: ConfigLocation,
    state: Mutex<State>,
}

impl ConfigStore {
    /// Load the config; an invalid file at startup is an error.
    pub fn open(location: ConfigLocation) -> Result<ConfigStore, ConfigError> {
        let current = load_from(&location, &process_env)?;
        Ok(ConfigStore {
            location,
            state: Mutex::new(State {
                current,
                error: None,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn current(&self) -> HostConfig {
        self.lock().current.clone()
    }

    /// Why the newest file was rejected, while the last good config runs.
    pub fn last_error(&self) -> Option<String> {
        self.lock().error.clone()
    }

    /// Re-read the file. `Ok(None)` when nothing that matters changed; an
    /// invalid file is rejected and remembered, and the last good config stays.
    pub fn reload(&self) -> Result<Option<HostConfig>, ConfigError> {
        match load_from(&self.location, &process_env) {
            Ok(cfg) => {
                let mut st = self.lock();
                st.error = None;
                if cfg == st.current {
                    return Ok(None);
                }
                st.current = cfg.clone();
                Ok(Some(cfg))
            }
            Err(e) => {
                self.lock().error = Some(e.to_string());
                Err(e)
            }
        }
    }

    fn edit(
        &self,
        f: impl FnOnce(&str) -> Result<String, ConfigError>,
    ) -> Result<HostConfig, ConfigError> {
        let path = &self.location.path;
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
        let new_text = f(&text)?;
        // Never write a file the daemon would then refuse.
        let cfg = parse(&new_text, path, &process_env)?;
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|source| ConfigError::Write {
                path: path.clone(),
                source,
            })?;
        }
        edit::write_atomic(path, &new_text)?;
        let mut st = self.lock();
        st.current = cfg.clone();
        st.error = None;
        Ok(cfg)
    }

    pub fn add(&self, name: &str, entry_json: &str) -> Result<HostConfig, ConfigError> {
        self.edit(|t| edit::add_server(t, name, entry_json))
    }

    pub fn remove(&self, name: &str) -> Result<HostConfig, ConfigError> {
        self.edit(|t| edit::remove_server(t, name))
    }

    pub fn set_disabled(&self, name: &str, disabled: bool) -> Result<HostConfig, ConfigError> {
        self.edit(|t| edit::set_disabled(t, name, disabled))
    }
}
