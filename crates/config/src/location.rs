//! Where the config file lives.

use std::path::PathBuf;

use super::{ConfigError, EnvLookup, HostConfig};

/// Names the config file when no `--config` flag is given.
pub const CONFIG_ENV: &str = "MCPHOST_CONFIG";

/// How the config path was chosen; decides whether a missing file is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--config PATH`.
    Flag,
    /// `MCPHOST_CONFIG`.
    Env,
    /// The per-user default ([`default_config_path`]).
    Default,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigLocation {
    pub path: PathBuf,
    pub source: ConfigSource,
}

/// `config.json` in the per-user config directory: `~/.config/mcphost/` on
/// Linux, `~/Library/Application Support/mcphost/` on macOS, `~` being the
/// home directory in the password database. Like the socket, it never
/// follows `$HOME` or `$XDG_CONFIG_HOME`, which hosts may drop or change:
/// every process of the user reads the same file. `None` when no home
/// directory is known.
pub fn default_config_path() -> Option<PathBuf> {
    let home = mcphost_state::statefile::user_home_dir()?;
    #[cfg(target_os = "macos")]
    let dir = home.join("Library/Application Support/mcphost");
    #[cfg(not(target_os = "macos"))]
    let dir = home.join(".config/mcphost");
    Some(dir.join("config.json"))
}

/// The flag, then `MCPHOST_CONFIG`, then [`default_config_path`].
pub fn resolve_config_path(cli: Option<PathBuf>) -> Result<ConfigLocation, ConfigError> {
    resolve_config_path_with(cli, &|name| std::env::var(name).ok(), default_config_path())
}

/// [`resolve_config_path`] with the environment and default injected (tests).
pub fn resolve_config_path_with(
    cli: Option<PathBuf>,
    env: EnvLookup<'_>,
    default: Option<PathBuf>,
) -> Result<ConfigLocation, ConfigError> {
    if let Some(path) = cli {
        return Ok(ConfigLocation {
            path,
            source: ConfigSource::Flag,
        });
    }
    if let Some(path) = env(CONFIG_ENV).filter(|p| !p.is_empty()) {
        return Ok(ConfigLocation {
            path: PathBuf::from(path),
            source: ConfigSource::Env,
        });
    }
    default
        .map(|path| ConfigLocation {
            path,
            source: ConfigSource::Default,
        })
        .ok_or(ConfigError::NoConfigDir)
}

/// Loads the config at `location`. A missing file at the default location is
/// an empty config (a fresh install has none); a missing file that was asked
/// for by flag or environment is an error.
pub fn load_from(location: &ConfigLocation, env: EnvLookup<'_>) -> Result<HostConfig, ConfigError> {
    missing_is_empty(location, super::load(&location.path, env))
}

/// [`load_from`] with [`super::load_lenient`]: a server entry with errors
/// is set aside in [`HostConfig::broken`].
pub fn load_lenient_from(
    location: &ConfigLocation,
    env: super::ServerEnvLookup<'_>,
) -> Result<HostConfig, ConfigError> {
    missing_is_empty(location, super::load_lenient(&location.path, env))
}

fn missing_is_empty(
    location: &ConfigLocation,
    loaded: Result<HostConfig, ConfigError>,
) -> Result<HostConfig, ConfigError> {
    match loaded {
        Err(ConfigError::Read { path, source })
            if source.kind() == std::io::ErrorKind::NotFound
                && location.source == ConfigSource::Default =>
        {
            tracing::debug!(path = %path.display(), "no config file; starting with no servers");
            Ok(HostConfig {
                path: Some(path),
                ..HostConfig::default()
            })
        }
        other => other,
    }
}
