//! Log levels: each session's `logging/setLevel` is its own (per server,
//! or for every server), and each server is set to what its sessions
//! together need.
//!
//! A server's level is the most verbose level any live session asked of
//! it, but never less verbose than [`LogLevel::DEFAULT`] while a live
//! session asked nothing of it: such a session still gets the server's
//! messages of its own calls at the default level, and another session's
//! `logging/setLevel` must not take them away. While no session asked
//! anything of a server it is never sent a level (it keeps its own
//! default); once mcphost has set one and every session that asked is gone,
//! it is set back to the default. A restarted server is set again.

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;

use tracing::{debug, warn};

use super::{Registry, RegistryError};
use mcphost_client::ClientError;
use mcphost_protocol::methods;

/// RFC 5424 severities as MCP names them, from the most verbose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// What a session that set no level gets of its own calls' messages.
    pub const DEFAULT: LogLevel = LogLevel::Info;

    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level named exactly so (lower case, as MCP spells them).
    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one session asked.
#[derive(Debug, Default)]
struct Asked {
    all: Option<LogLevel>,
    servers: HashMap<String, LogLevel>,
}

impl Asked {
    fn of(&self, server: &str) -> Option<LogLevel> {
        self.servers.get(server).copied().or(self.all)
    }
}

/// Every live session's levels, and what each server was last set to.
#[derive(Debug, Default)]
pub(super) struct Levels {
    sessions: HashMap<u64, Asked>,
    /// Servers mcphost has set a level on (the level of the running
    /// instance); absent ones keep their own default.
    applied: HashMap<String, LogLevel>,
}

impl Levels {
    fn open(&mut self, session: u64) {
        self.sessions.entry(session).or_default();
    }

    /// Forget a session; true when it had asked for a level.
    fn close(&mut self, session: u64) -> bool {
        self.sessions
            .remove(&session)
            .is_some_and(|a| a.all.is_some() || !a.servers.is_empty())
    }

    fn set(&mut self, session: u64, server: Option<&str>, level: LogLevel) {
        let asked = self.sessions.entry(session).or_default();
        match server {
            Some(s) => {
                asked.servers.insert(s.to_owned(), level);
            }
            // For every server: it replaces what was asked of each one.
            None => {
                asked.all = Some(level);
                asked.servers.clear();
            }
        }
    }

    fn of(&self, session: u64, server: &str) -> Option<LogLevel> {
        self.sessions.get(&session)?.of(server)
    }

    /// The level `server` should be at (`None`: leave it alone).
    fn target(&self, server: &str) -> Option<LogLevel> {
        let mut asked: Option<LogLevel> = None;
        let mut unasked = false;
        for s in self.sessions.values() {
            match s.of(server) {
                Some(l) => asked = Some(asked.map_or(l, |a| a.min(l))),
                None => unasked = true,
            }
        }
        match asked {
            Some(l) if unasked => Some(l.min(LogLevel::DEFAULT)),
            Some(l) => Some(l),
            None => self
                .applied
                .contains_key(server)
                .then_some(LogLevel::DEFAULT),
        }
    }

    /// The level to send `server` now, if it changed.
    fn change(&self, server: &str) -> Option<LogLevel> {
        self.target(server)
            .filter(|t| self.applied.get(server) != Some(t))
    }
}

/// The registry's log levels and the turn that orders their sending.
#[derive(Default)]
pub(super) struct LogState {
    levels: Mutex<Levels>,
    /// Held while levels are computed and sent, so two changes reach a
    /// server in the order they were computed.
    turn: tokio::sync::Mutex<()>,
}

impl LogState {
    fn lock(&self) -> MutexGuard<'_, Levels> {
        self.levels.lock()
    }
}

impl Registry {
    fn log_state(&self) -> &LogState {
        &self.inner.logs
    }

    /// A session is open: until it asks for a level of a server, that
    /// server is kept at least at [`LogLevel::DEFAULT`] for it.
    pub fn session_opened(&self, session: u64) {
        let clients = self.ready_clients();
        let changed = {
            let mut levels = self.log_state().lock();
            levels.open(session);
            clients.iter().any(|c| levels.change(c.name()).is_some())
        };
        if changed {
            self.spawn_log_levels();
        }
    }

    /// A session is gone: its levels no longer count.
    pub(super) fn forget_log_levels(&self, session: u64) {
        let clients = self.ready_clients();
        let changed = {
            let mut levels = self.log_state().lock();
            levels.close(session);
            clients.iter().any(|c| levels.change(c.name()).is_some())
        };
        if changed {
            self.spawn_log_levels();
        }
    }

    /// The level `session` asked of `server` (for it, or for every server).
    pub fn session_log_level(&self, session: u64, server: &str) -> Option<LogLevel> {
        self.log_state().lock().of(session, server)
    }

    /// `logging/setLevel` of one session, for `server` or for every server.
    /// Servers are set to what their sessions together need (see the
    /// module doc); an unknown server, or a running one that did not
    /// declare `logging`, is an error. A server that is not running yet
    /// gets its level when it starts.
    pub async fn set_session_log_level(
        &self,
        session: u64,
        server: Option<&str>,
        level: LogLevel,
    ) -> Result<(), RegistryError> {
        if let Some(s) = server {
            match self.client(s) {
                Ok(c) if c.negotiated().capabilities.logging.is_none() => {
                    return Err(ClientError::CapabilityNotDeclared {
                        server: s.to_owned(),
                        capability: "logging",
                        method: methods::LOGGING_SET_LEVEL,
                    }
                    .into());
                }
                Err(e @ RegistryError::UnknownServer(_)) => return Err(e),
                _ => {}
            }
        }
        self.log_state().lock().set(session, server, level);
        self.apply_log_levels(server).await
    }

    /// In the background: send every server whose level changed its new
    /// one.
    fn spawn_log_levels(&self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let reg = self.clone();
        rt.spawn(async move {
            let _ = reg.apply_log_levels(None).await;
        });
    }

    /// A server (re)connected: the new instance has its own default, and
    /// gets the level its sessions need.
    pub(super) fn log_level_on_connect(&self, server: &str) {
        let changed = {
            let mut levels = self.log_state().lock();
            levels.applied.remove(server);
            levels.change(server).is_some()
        };
        if !changed {
            return;
        }
        let reg = self.clone();
        let server = server.to_owned();
        tokio::spawn(async move {
            let _ = reg.apply_log_levels(Some(&server)).await;
        });
    }

    /// Send each ready server (or only `only`) that declared `logging` the
    /// level it should be at, where that changed. With `only`, its failure
    /// is the error; others are logged.
    async fn apply_log_levels(&self, only: Option<&str>) -> Result<(), RegistryError> {
        let _turn = self.log_state().turn.lock().await;
        let mut clients = self.ready_clients();
        clients.retain(|c| {
            only.is_none_or(|s| c.name() == s) && c.negotiated().capabilities.logging.is_some()
        });
        let sends: Vec<_> = {
            let levels = self.log_state().lock();
            clients
                .iter()
                .filter_map(|c| levels.change(c.name()).map(|l| (c, l)))
                .collect()
        };
        let results = futures_util::future::join_all(
            sends
                .iter()
                .map(|(c, l)| async move { c.set_log_level(l.as_str()).await }),
        )
        .await;
        let mut failed = None;
        for ((c, level), r) in sends.iter().zip(results) {
            match r {
                Ok(()) => {
                    debug!(server = c.name(), %level, "log level set");
                    self.log_state()
                        .lock()
                        .applied
                        .insert(c.name().to_owned(), *level);
                }
                Err(e) => {
                    warn!(server = c.name(), %level, "logging/setLevel failed: {e}");
                    if only.is_some() {
                        failed = Some(e);
                    }
                }
            }
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_by_severity_and_parsed_exactly() {
        assert!(LogLevel::Debug < LogLevel::Info && LogLevel::Alert < LogLevel::Emergency);
        for l in LogLevel::ALL {
            assert_eq!(LogLevel::parse(l.as_str()), Some(l));
        }
        assert_eq!(LogLevel::parse("Info"), None);
        assert_eq!(LogLevel::parse("verbose"), None);
    }

    #[test]
    fn a_server_is_at_the_most_verbose_level_asked_and_never_below_the_default_for_others() {
        let mut l = Levels::default();
        l.open(1);
        l.open(2);
        // Nobody asked: the server keeps its own default.
        assert_eq!(l.target("ts"), None);
        l.set(1, Some("ts"), LogLevel::Error);
        // Session 2 asked nothing: its calls still get info.
        assert_eq!(l.target("ts"), Some(LogLevel::Info));
        l.set(2, None, LogLevel::Warning);
        assert_eq!(l.target("ts"), Some(LogLevel::Warning));
        assert_eq!(l.target("other"), Some(LogLevel::Info));
        l.set(2, Some("ts"), LogLevel::Debug);
        assert_eq!(l.target("ts"), Some(LogLevel::Debug));
        assert_eq!(l.of(2, "other"), Some(LogLevel::Warning));
        // For every server again: the per-server level goes.
        l.set(2, None, LogLevel::Critical);
        assert_eq!(l.of(2, "ts"), Some(LogLevel::Critical));
        assert_eq!(l.target("ts"), Some(LogLevel::Error));
        l.applied.insert("ts".into(), LogLevel::Error);
        assert_eq!(l.change("ts"), None);
        // The sessions that asked leave: back to the default, once.
        assert!(l.close(1));
        assert_eq!(l.change("ts"), Some(LogLevel::Critical));
        assert!(l.close(2));
        assert_eq!(l.change("ts"), Some(LogLevel::Info));
        l.applied.insert("ts".into(), LogLevel::Info);
        assert_eq!(l.change("ts"), None);
        assert_eq!(l.target("never-set"), None);
    }
}
