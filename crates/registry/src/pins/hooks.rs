//! Where pins meet the registry: each listing is compared with the pins,
//! `block` withholds what drifted from the catalog and from calls, and the
//! `mcphost/pins/*` requests act on a server's pins.

use std::collections::HashSet;

use serde_json::{Value, json};
use tracing::warn;

use super::{PinStore, ServerDrift, launch_key};
use crate::{ManagedServer, Registry, RegistryError, RegistryEvent};
use mcphost_config::Pinning;

/// What set an entry's lists, for [`Registry::check_pins`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fetch {
    /// A listing that fetched every list.
    Full,
    /// A listing where some list failed (the entry keeps its old one).
    Partial,
    /// One list re-fetched after the server's `list_changed`.
    Changed,
}

/// One entry's pin state, as of its last listing.
#[derive(Debug, Default)]
pub(crate) struct EntryPins {
    pub(crate) drift: Option<ServerDrift>,
    /// `block`: what is left out of the catalog and refused.
    pub(crate) withheld_tools: HashSet<String>,
    pub(crate) withheld_prompts: HashSet<String>,
}

/// A server's pin summary in its status (`servers --json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PinStatus {
    pub pinning: &'static str,
    pub drift: ServerDrift,
    /// Tools and prompts `block` withholds.
    pub withheld: usize,
}

impl ManagedServer {
    /// Compare the entry's lists with its pins (pinning them on the first
    /// listing); returns news of drift to announce.
    pub(crate) fn check_pins(&mut self, store: &PinStore) -> Option<ServerDrift> {
        let news = self.observe_pins(store, true);
        self.pins_from(store);
        news
    }

    /// The comparison itself, on a shared borrow: the registry runs it
    /// under an upgradable read lock, so calls routing meanwhile never wait.
    fn observe_pins(&self, store: &PinStore, complete: bool) -> Option<ServerDrift> {
        if self.config.pinning == Pinning::Off {
            store.forget(&self.config.name);
            return None;
        }
        let filter = &self.config.tools;
        let listing = super::Listing {
            tools: &self.lists.tools,
            prompts: &self.lists.prompts,
            complete,
        };
        store.observe(
            &self.config.name,
            &launch_key(&self.config),
            listing,
            &|name| !filter.allows(name),
        )
    }

    /// It holds every list, from a good listing: live, or from the store.
    pub(crate) fn has_lists(&self) -> bool {
        (self.listed || self.known) && self.list_error.is_none()
    }

    /// Take the drift the store holds and withhold by the entry's mode.
    pub(crate) fn pins_from(&mut self, store: &PinStore) {
        let drift = match self.config.pinning {
            Pinning::Off => None,
            _ => store.drift(&self.config.name),
        };
        let block = self.config.pinning == Pinning::Block;
        let withheld = |f: fn(&ServerDrift) -> &super::Drift| -> HashSet<String> {
            match (&drift, block) {
                (Some(d), true) => f(d).unapproved().cloned().collect(),
                _ => HashSet::new(),
            }
        };
        self.pins = EntryPins {
            withheld_tools: withheld(|d| &d.tools),
            withheld_prompts: withheld(|d| &d.prompts),
            drift,
        };
    }

    /// The tools the catalog shows: all listed, less what `block` withholds.
    pub(crate) fn shown_tools(&self) -> impl Iterator<Item = (&str, &serde_json::value::RawValue)> {
        crate::catalog::tool_items(&self.shown_lists().tools)
            .filter(|(n, _)| !self.pins.withheld_tools.contains(*n))
    }

    pub(crate) fn shown_prompts(
        &self,
    ) -> impl Iterator<Item = (&str, &serde_json::value::RawValue)> {
        crate::catalog::prompt_items(&self.shown_lists().prompts)
            .filter(|(n, _)| !self.pins.withheld_prompts.contains(*n))
    }

    pub(crate) fn pin_status(&self) -> Option<PinStatus> {
        if self.config.pinning == Pinning::Off {
            return None;
        }
        let drift = self.pins.drift.clone()?;
        Some(PinStatus {
            pinning: self.config.pinning.as_str(),
            drift,
            withheld: self.pins.withheld_tools.len() + self.pins.withheld_prompts.len(),
        })
    }
}

impl Registry {
    fn pin_store(&self) -> &PinStore {
        &self.inner.base.pins
    }

    /// After a listing of `server`'s instance `generation`: compare with
    /// the pins. Returns news of drift, which the caller announces
    /// ([`Self::announce_drift`]) once the catalog it published shows it.
    #[must_use]
    pub(crate) fn check_pins(
        &self,
        server: &str,
        generation: u64,
        how: Fetch,
    ) -> Option<ServerDrift> {
        let st = self.inner.state.upgradable_read();
        let current =
            |e: &&ManagedServer| e.config.name == server && e.handle.generation() == generation;
        let news = st.entries.iter().find(current).and_then(|e| {
            let complete = match how {
                Fetch::Full => true,
                Fetch::Partial => false,
                // Before the first full listing the other lists are
                // not there yet: what they lack is no news.
                Fetch::Changed if e.has_lists() => true,
                Fetch::Changed => return None,
            };
            Some(e.observe_pins(self.pin_store(), complete))
        })?;
        let mut st = parking_lot::RwLockUpgradableReadGuard::upgrade(st);
        if let Some(e) = st.instance_mut(server, generation) {
            e.pins_from(self.pin_store());
        }
        news.filter(|d| !d.is_empty())
    }

    /// Re-read one entry's drift from the store (after approve or reset)
    /// and publish: a tool no longer withheld reappears.
    fn repin(&self, server: &str, observe: bool) {
        {
            let mut st = self.write();
            let Some(e) = st.entries.iter_mut().find(|e| e.config.name == server) else {
                return;
            };
            if observe && e.has_lists() {
                e.check_pins(self.pin_store());
            } else {
                e.pins_from(self.pin_store());
            }
        }
        self.publish_server_lists(server, true, false, true);
        self.send_state(server);
    }

    pub(crate) fn announce_drift(&self, server: &str, d: &ServerDrift) {
        let part =
            |what: &str, v: &[String]| (!v.is_empty()).then(|| format!("{what} {}", v.join(", ")));
        let mut parts = Vec::new();
        for (kind, drift) in [("tools", &d.tools), ("prompts", &d.prompts)] {
            for (what, v) in [
                ("changed", &drift.changed),
                ("added", &drift.added),
                ("removed", &drift.removed),
            ] {
                parts.extend(part(&format!("{kind} {what}:"), v));
            }
        }
        let message = format!(
            "server {server:?} differs from its pinned definitions: {}; review with `mcphost pins diff {server}`, accept with `mcphost pins approve {server}`",
            parts.join("; ")
        );
        warn!(server, "{message}");
        let params = json!({
            "level": "warning",
            "logger": "mcphost",
            "data": { "message": message, "server": server, "drift": d },
        });
        if let Ok(params) = mcphost_protocol::to_raw(&params) {
            let _ = self.inner.events.send(RegistryEvent::PinDrift {
                server: server.to_owned(),
                params,
            });
        }
    }

    fn pinned_entry(&self, server: &str) -> Result<(String, Pinning), RegistryError> {
        let st = self.read();
        match st.entry(server) {
            Some(e) => Ok((launch_key(&e.config), e.config.pinning)),
            None => Err(RegistryError::UnknownServer(server.to_owned())),
        }
    }

    /// `mcphost/pins/list`: per server (or `server` alone), each tool's and
    /// prompt's state. Each row is an object others may add fields to.
    pub fn pins_list(&self, server: Option<&str>) -> Result<Value, RegistryError> {
        let names = match server {
            Some(s) => vec![s.to_owned()],
            None => self.server_names(),
        };
        let mut out = Vec::new();
        for name in names {
            let (launch, pinning) = self.pinned_entry(&name)?;
            let mut row = self.pin_store().rows(&name, &launch);
            row["server"] = Value::from(name);
            row["pinning"] = Value::from(pinning.as_str());
            out.push(row);
        }
        Ok(Value::Array(out))
    }

    /// `mcphost/pins/diff`: pinned and current definitions of what drifted.
    pub fn pins_diff(&self, server: &str, name: Option<&str>) -> Result<Value, RegistryError> {
        let (launch, _) = self.pinned_entry(server)?;
        let items = self.pin_store().diff(server, &launch, name);
        if let Some(n) = name
            && items.is_empty()
        {
            return Err(RegistryError::Pins(format!(
                "server {server:?} has no pinned or listed tool or prompt {n:?}"
            )));
        }
        Ok(json!({ "server": server, "items": items }))
    }

    /// `mcphost/pins/approve`: pin what `server` lists now (`names`, or all
    /// that drifted); withheld items reappear at once.
    pub fn pins_approve(&self, server: &str, names: &[String]) -> Result<Value, RegistryError> {
        self.pinned_entry(server)?;
        let approved = self
            .pin_store()
            .approve(server, names)
            .map_err(|e| RegistryError::Pins(e.to_string()))?;
        self.repin(server, false);
        Ok(json!({ "server": server, "approved": approved }))
    }

    /// `mcphost/pins/reset`: forget `server`'s pins and pin what it lists now.
    pub fn pins_reset(&self, server: &str) -> Result<Value, RegistryError> {
        self.pinned_entry(server)?;
        self.pin_store().reset(server);
        self.repin(server, true);
        Ok(json!({ "server": server, "reset": true }))
    }

    /// The server and own name of a tool (or prompt) `block` withholds,
    /// by the name a host would call it: so the refusal can say why.
    pub(crate) fn withheld(&self, name: &str, prompt: bool) -> Option<(String, String)> {
        let st = self.read();
        let sep = &st.rules.separator;
        for e in &st.entries {
            let set = match prompt {
                true => &e.pins.withheld_prompts,
                false => &e.pins.withheld_tools,
            };
            let prefix = e.config.prefix();
            let hit = set.iter().find(|t| {
                name == t.as_str()
                    || name
                        .strip_prefix(prefix)
                        .and_then(|r| r.strip_prefix(sep.as_str()))
                        == Some(t.as_str())
            });
            if let Some(t) = hit {
                return Some((e.config.name.clone(), t.clone()));
            }
        }
        None
    }

    /// Drift per catalog tool, for `mcphost/tools/list`: (server, tool) →
    /// `"changed"` or `"added"`.
    pub fn drifted_tools(&self) -> std::collections::HashMap<(String, String), &'static str> {
        let st = self.read();
        let mut out = std::collections::HashMap::new();
        for e in &st.entries {
            let Some(d) = &e.pins.drift else { continue };
            for (names, what) in [(&d.tools.changed, "changed"), (&d.tools.added, "added")] {
                for n in names {
                    out.insert((e.config.name.clone(), n.clone()), what);
                }
            }
        }
        out
    }
}
