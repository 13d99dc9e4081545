//! Where a server's lists come from before it is live, and its start
//! policy: a `start: lazy` server with a stored catalog is listed from the
//! store and waits in `idle` for its first call; one with none is started
//! once to learn its lists, stored, and put back to `idle`. Every good live
//! listing is stored (when it changed), so a stale stored catalog is
//! replaced, and the catalog rebuild announces the difference.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use tracing::{debug, info};

use super::stored::{self, StoredCatalog};
use super::supervisor::{ServerState, StartPolicy, SupervisorHandle};
use super::{Lists, ManagedServer, Registry};
use mcphost_config::{ServerConfig, StartMode};

impl Registry {
    /// A new entry for `sc`: its supervisor launched with `sc`'s start
    /// policy, and for a lazy server the stored lists, if any.
    pub(super) fn new_entry(&self, sc: &ServerConfig) -> ManagedServer {
        let store = self.inner.base.catalogs.as_deref();
        let stored = match (sc.start, store) {
            (StartMode::Lazy, Some(store)) if !sc.disabled => {
                store.load(&sc.name, &stored::config_key(sc))
            }
            _ => None,
        };
        let start = StartPolicy {
            lazy: stored.is_some(),
            idle_timeout: sc.idle_timeout,
        };
        let handle = self.launch_with_start(sc, start);
        let mut e = ManagedServer::new(sc.clone(), handle);
        match stored {
            Some(c) => {
                debug!(server = %sc.name, tools = c.tools.len(), "listed from the stored catalog");
                e.lists = Lists {
                    tools: c.tools,
                    resources: c.resources,
                    templates: c.resource_templates,
                    prompts: c.prompts,
                };
                e.lists_changed();
                // Listed before the server runs: held to its pins all the same.
                e.check_pins(&self.inner.base.pins);
                e.known = true;
            }
            None => {
                // Nothing stored: start it now to learn its lists, then idle
                // (only where they can be stored; else it just runs).
                e.learning = sc.start == StartMode::Lazy && store.is_some() && !sc.disabled;
            }
        }
        e
    }

    /// The start limit of `server` when `handle` (its instance) is idle: a
    /// call then waits for it to start, up to its init timeout.
    pub(super) fn idle_start_limit(
        &self,
        server: &str,
        handle: &SupervisorHandle,
    ) -> Option<Duration> {
        if handle.status().state != ServerState::Idle {
            return None;
        }
        info!(server, "starting for a call");
        self.read().entry(server).map(|e| e.config.timeouts.init)
    }

    /// A good live listing of `server` landed: store it if it differs from
    /// what was stored last; a server started to learn its lists goes idle.
    pub(super) fn lists_listed(&self, server: &str, generation: u64) {
        let Some(store) = self.inner.base.catalogs.clone() else {
            return;
        };
        let (catalog, handle) = {
            let st = self.read();
            let Some(e) = st
                .entries
                .iter()
                .find(|e| e.config.name == server && e.handle.generation() == generation)
            else {
                return;
            };
            let server_info = e
                .handle
                .client()
                .ok()
                .map(|c| c.negotiated().server_info.clone());
            let catalog = StoredCatalog {
                format: stored::FORMAT,
                server: server.to_owned(),
                config: stored::config_key(&e.config),
                server_info,
                tools: e.lists.tools.clone(),
                prompts: e.lists.prompts.clone(),
                resources: e.lists.resources.clone(),
                resource_templates: e.lists.templates.clone(),
            };
            (catalog, e.handle.clone())
        };
        let bytes = match serde_json::to_vec(&catalog) {
            Ok(b) => b,
            Err(e) => {
                debug!(server, "catalog not stored: {e}");
                return;
            }
        };
        let digest = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            h.finish()
        };
        let (changed, learned) = {
            let mut st = self.write();
            let Some(e) = st.instance_mut(server, generation) else {
                return;
            };
            let changed = e.stored != Some(digest);
            e.stored = Some(digest);
            e.known = true;
            (changed, std::mem::take(&mut e.learning))
        };
        if changed {
            store.save(&catalog, bytes);
        }
        if learned {
            info!(
                server,
                "catalog learned and stored; idle until its first call"
            );
            handle.sleep();
        }
    }
}
