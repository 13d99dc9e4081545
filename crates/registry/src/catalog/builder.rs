//! Rule 5 (collisions) over every server's claims, and the incremental
//! builder that re-names only a changed server (see the naming contract in
//! the module above).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rpds::HashTrieMapSync;
use sha2::{Digest, Sha256};

use super::names::*;
use super::*;

/// Namespace every server's tools.
pub fn build(servers: &[ServerTools<'_>], rules: &NamingRules) -> Catalog {
    let mut b = CatalogBuilder::new("tools", rules.clone());
    for s in servers {
        b.push_server(s.server, s.prefix, tool_items(s.tools));
    }
    b.publish()
}

/// Namespace every server's prompts, with the same rules as tools.
pub fn build_prompts(servers: &[ServerPrompts<'_>], rules: &NamingRules) -> PromptCatalog {
    let mut b = CatalogBuilder::new("prompts", rules.clone());
    for s in servers {
        b.push_server(s.server, s.prefix, prompt_items(s.prompts));
    }
    b.publish()
}

/// A server's tools as builder input: (own name, listed object).
pub fn tool_items(tools: &[Tool]) -> impl Iterator<Item = (&str, &RawValue)> {
    tools.iter().map(|t| (t.name.as_str(), &*t.raw))
}

/// A server's prompts as builder input.
pub fn prompt_items(prompts: &[Prompt]) -> impl Iterator<Item = (&str, &RawValue)> {
    prompts.iter().map(|p| (p.name.as_str(), &*p.raw))
}

/// One item of one server, named as if that server were alone (rules 1–4).
#[derive(Debug, Clone)]
pub(super) struct Claim {
    name: String,
    original: String,
    reason: Option<CollisionReason>,
}

/// What one server contributes: its claims, its entries under their
/// candidate names, and the segment last published for it (rule 5 applied).
#[derive(Debug)]
pub(super) struct Part<E> {
    server: String,
    claims: Vec<Claim>,
    /// Parallel to `claims`; `None` for an item whose object cannot take a
    /// name (left out, as before).
    own: Vec<Option<Arc<E>>>,
    /// Rebuilt on the next publish when `None`; the old one stays in
    /// `last` until then, so its routes can be taken out.
    segment: Option<Segment<E>>,
    last: Option<Segment<E>>,
}

#[derive(Debug)]
pub(super) struct Segment<E> {
    /// Rule 5's renames of this server's items: (index, name), by index.
    overrides: Vec<(usize, String)>,
    entries: Arc<[Arc<E>]>,
    collisions: Vec<Collision>,
    /// SHA-256 of the segment's rows; the listing's fingerprint is over these.
    digest: [u8; 32],
}

/// Keeps every server's namespaced part and composes listings from them.
///
/// [`Self::update`] re-names only the changed server's items (rules 1–4,
/// where the hashing and the JSON splicing are); [`Self::publish`] then
/// resolves rule 5 over the claims index (only names claimed more than once
/// are looked at), rebuilds the segments whose renames changed, and copies
/// pointers for the rest. The result equals a full [`build`] of the same
/// lists, fingerprint included.
#[derive(Debug)]
pub struct CatalogBuilder<E> {
    kind: &'static str,
    rules: NamingRules,
    sep: String,
    /// Config order.
    parts: Vec<Part<E>>,
    /// Candidate name → its claimants: (server, index in its part).
    index: HashMap<String, Vec<(String, usize)>>,
    /// Names with more than one claimant.
    contested: HashSet<String>,
    routes: HashTrieMapSync<String, Route>,
}

impl<E: CatalogEntry> CatalogBuilder<E> {
    /// `kind` is the listing's name in its fingerprint ("tools", "prompts").
    pub fn new(kind: &'static str, rules: NamingRules) -> Self {
        CatalogBuilder {
            kind,
            sep: sanitize(&rules.separator),
            rules,
            parts: Vec::new(),
            index: HashMap::new(),
            contested: HashSet::new(),
            routes: HashTrieMapSync::new_sync(),
        }
    }

    /// Add a server after the others (config order is push order).
    pub fn push_server<'a>(
        &mut self,
        server: &str,
        prefix: &str,
        items: impl Iterator<Item = (&'a str, &'a RawValue)>,
    ) {
        self.parts.push(Part {
            server: server.to_owned(),
            claims: Vec::new(),
            own: Vec::new(),
            segment: None,
            last: None,
        });
        let at = self.parts.len().saturating_sub(1);
        self.set_items(at, prefix, items);
    }

    /// Replace one server's items; the others are not touched until
    /// [`Self::publish`]. False when `server` is not one of the servers.
    pub fn update<'a>(
        &mut self,
        server: &str,
        prefix: &str,
        items: impl Iterator<Item = (&'a str, &'a RawValue)>,
    ) -> bool {
        let Some(at) = self.parts.iter().position(|p| p.server == server) else {
            return false;
        };
        self.set_items(at, prefix, items);
        true
    }

    fn set_items<'a>(
        &mut self,
        at: usize,
        prefix: &str,
        items: impl Iterator<Item = (&'a str, &'a RawValue)>,
    ) {
        let budget = self.rules.budget();
        let Some(part) = self.parts.get_mut(at) else {
            return;
        };
        for (i, c) in part.claims.iter().enumerate() {
            if let Some(v) = self.index.get_mut(&c.name) {
                v.retain(|(s, j)| !(*s == part.server && *j == i));
                match v.len() {
                    0 => {
                        self.index.remove(&c.name);
                        self.contested.remove(&c.name);
                    }
                    1 => {
                        self.contested.remove(&c.name);
                    }
                    _ => {}
                }
            }
        }
        let mut claims = Vec::new();
        let mut own = Vec::new();
        for (tool, raw) in items {
            let (name, reason) = candidate(&part.server, prefix, tool, &self.sep, budget);
            let entry = match rename(raw, &name) {
                Ok(raw) => Some(Arc::new(E::make(
                    name.clone(),
                    part.server.clone(),
                    tool.to_owned(),
                    raw,
                ))),
                Err(err) => {
                    // Unreachable for items that came off the wire (they parsed as
                    // objects); never list an item under a name it does not carry.
                    tracing::warn!(server = %part.server, item = %tool, %err,
                        "cannot set the namespaced name; {} entry left out", self.kind);
                    None
                }
            };
            let claimants = self.index.entry(name.clone()).or_default();
            claimants.push((part.server.clone(), claims.len()));
            if claimants.len() > 1 {
                self.contested.insert(name.clone());
            }
            claims.push(Claim {
                name,
                original: tool.to_owned(),
                reason,
            });
            own.push(entry);
        }
        part.claims = claims;
        part.own = own;
        if let Some(seg) = part.segment.take() {
            part.last = Some(seg);
        }
    }

    /// Rule 5 over every contested name: each server's renames, by index.
    fn overrides(&self) -> HashMap<String, Vec<(usize, String)>> {
        let budget = self.rules.budget();
        let original = |server: &str, i: usize| -> &str {
            self.parts
                .iter()
                .find(|p| p.server == server)
                .and_then(|p| p.claims.get(i))
                .map_or("", |c| c.original.as_str())
        };
        // (server, original, index, contested name) of every claimant but
        // the first of each name.
        let mut losers: Vec<(&str, &str, usize, &str)> = Vec::new();
        for name in &self.contested {
            let Some(claimants) = self.index.get(name) else {
                continue;
            };
            let mut c: Vec<(&str, &str, usize)> = claimants
                .iter()
                .map(|(s, i)| (s.as_str(), original(s, *i), *i))
                .collect();
            c.sort();
            losers.extend(
                c.into_iter()
                    .skip(1)
                    .map(|(s, o, i)| (s, o, i, name.as_str())),
            );
        }
        losers.sort();
        let mut out: HashMap<String, Vec<(usize, String)>> = HashMap::new();
        let mut assigned: HashSet<String> = HashSet::new();
        for (server, _, i, name) in losers {
            for n in 2usize.. {
                let candidate = with_number(name, n, budget);
                if !self.index.contains_key(&candidate) && assigned.insert(candidate.clone()) {
                    out.entry(server.to_owned())
                        .or_default()
                        .push((i, candidate));
                    break;
                }
            }
        }
        for v in out.values_mut() {
            v.sort();
        }
        out
    }

    /// The listing of every server's current items.
    pub fn publish(&mut self) -> NamespacedCatalog<E> {
        let overrides = self.overrides();
        let mut rebuilt = Vec::new();
        for (at, part) in self.parts.iter_mut().enumerate() {
            let mine = overrides.get(part.server.as_str());
            let mine: &[(usize, String)] = mine.map_or(&[], Vec::as_slice);
            if part.segment.as_ref().is_some_and(|s| s.overrides == mine) {
                continue;
            }
            if let Some(old) = part.segment.take() {
                part.last = Some(old);
            }
            part.segment = Some(segment(self.kind, part, mine));
            rebuilt.push(at);
        }
        // All removals before any insertion: a name may move between servers.
        for &at in &rebuilt {
            if let Some(old) = self.parts.get_mut(at).and_then(|p| p.last.take()) {
                for e in old.entries.iter() {
                    self.routes.remove_mut(e.name());
                }
            }
        }
        for &at in &rebuilt {
            let Some(seg) = self.parts.get(at).and_then(|p| p.segment.as_ref()) else {
                continue;
            };
            for e in seg.entries.iter() {
                self.routes.insert_mut(
                    e.name().to_owned(),
                    Route {
                        server: e.server().to_owned(),
                        tool: e.original().to_owned(),
                    },
                );
            }
        }
        let segments: Vec<&Segment<E>> = self
            .parts
            .iter()
            .filter_map(|p| p.segment.as_ref())
            .collect();
        let len = segments.iter().map(|s| s.entries.len()).sum();
        let mut entries = Vec::with_capacity(len);
        let mut collisions = Vec::new();
        let mut h = Sha256::new();
        h.update((self.kind.len() as u64).to_be_bytes());
        h.update(self.kind.as_bytes());
        for s in &segments {
            entries.extend(s.entries.iter().cloned());
            collisions.extend(s.collisions.iter().cloned());
            // Empty segments add nothing: the fingerprint is the listing's.
            if !s.entries.is_empty() {
                h.update(s.digest);
            }
        }
        NamespacedCatalog {
            entries,
            routes: self.routes.clone(),
            collisions,
            fingerprint: first_u64(&h.finalize()),
        }
    }
}

/// One server's published segment with rule 5's `renames` applied.
pub(super) fn segment<E: CatalogEntry>(
    kind: &str,
    part: &Part<E>,
    renames: &[(usize, String)],
) -> Segment<E> {
    let mut entries = Vec::with_capacity(part.own.len());
    let mut collisions = Vec::new();
    let mut h = Sha256::new();
    let mut renames_iter = renames.iter().peekable();
    for (i, (claim, own)) in part.claims.iter().zip(&part.own).enumerate() {
        let renamed = renames_iter.next_if(|(j, _)| *j == i).map(|(_, n)| n);
        let Some(own) = own else {
            continue;
        };
        let (entry, reason) = match renamed {
            None => (own.clone(), claim.reason),
            Some(name) => match rename(own.raw(), name) {
                Ok(raw) => (
                    Arc::new(E::make(
                        name.clone(),
                        part.server.clone(),
                        claim.original.clone(),
                        raw,
                    )),
                    Some(CollisionReason::Duplicate),
                ),
                Err(err) => {
                    tracing::warn!(server = %part.server, item = %claim.original, %err,
                        "cannot set the namespaced name; {kind} entry left out");
                    continue;
                }
            },
        };
        for s in [entry.name(), entry.server(), entry.original()] {
            h.update((s.len() as u64).to_be_bytes());
            h.update(s.as_bytes());
        }
        if let Some(reason) = reason {
            collisions.push(Collision {
                server: part.server.clone(),
                tool: claim.original.clone(),
                name: entry.name().to_owned(),
                reason,
            });
        }
        entries.push(entry);
    }
    Segment {
        overrides: renames.to_vec(),
        entries: entries.into(),
        collisions,
        digest: h.finalize().into(),
    }
}
