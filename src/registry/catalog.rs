//! The namespaced catalog: every server's tools (and prompts, and resources)
//! under names that are unique, legal for models, and stable.
//!
//! Routing is a mapping table from the exact namespaced name to
//! `(server, the server's own name)`. Names are never split on the separator:
//! prefixes and tool names may themselves contain it.
//!
//! # Naming contract
//!
//! Names must be identical across restarts and across machines (hosts cache
//! prompts and users write names into configs), so the rules below are a
//! contract. Changing any of them renames tools for every user.
//!
//! With `sep` = [`NamingRules::separator`] and `budget` =
//! [`NamingRules::budget`] (`max_length - reserve`, never below
//! [`MIN_BUDGET`]):
//!
//! 1. **Base name**: `<prefix><sep><tool>`. `prefix` is the server's alias or
//!    its config name; the hash below always uses the config name.
//! 2. **Charset** `[A-Za-z0-9_-]`. Every other character (per Unicode scalar,
//!    not per byte) becomes `_` in the prefix, the tool and the separator. If
//!    the prefix or the tool had to change, or is empty, `_<hash>` is appended,
//!    because sanitizing can merge names (`a.b` and `a_b`).
//! 3. **Hash**: the first 6 lowercase hex digits of
//!    `SHA-256(be_u64(len(server)) ‖ server ‖ tool)`, over the UTF-8 bytes of
//!    the server's config name and the tool's *original* name.
//! 4. **Length**: a name longer than `budget` becomes `<head>_<hash>` with
//!    `head` exactly `budget - 7` characters: the sanitized prefix is kept
//!    whole when `prefix + sep` fits in half of that (`(budget - 7) / 2`),
//!    else it is cut to fit (at least one character); then the separator and
//!    the sanitized tool follow, and the whole head is cut to `budget - 7`.
//!    Names are ASCII at this point, so no cut splits a character.
//! 5. **Collisions**: when several tools end with the same name, the
//!    claimants are sorted by (server config name, original tool name, position
//!    in the input); the first keeps the name, the others get `_2`, `_3`, … in
//!    that order, skipping any number whose name is already taken by anyone,
//!    and cutting the name's end so `name + _n` stays within `budget`. The
//!    result therefore depends only on the *set* of tools, never on the order
//!    servers started or were listed in. A buggy server listing one name twice
//!    gets `_2` on the second copy; both copies route to the same tool.
//! 6. **Order**: servers in the order given (config order), then each
//!    server's own order. Adding a tool to one server never renames another
//!    server's tools unless the two really claim the same name (rule 5).
//!
//! Every tool whose name differs from the plain base name is recorded as a
//! [`Collision`] with the strongest reason: `Duplicate` over `Shortened` over
//! `Sanitized`.
//!
//! Prompts follow the same rules with their own table.
//!
//! # Resources
//!
//! Resources are not renamed by the rules above (a URI is not a name a model
//! types). A server's own URI is kept when no other server lists the same URI
//! and no other server's template can produce it; otherwise every copy is
//! exposed as `mcphost://<server>/<uri>` (see [`super::uri`] for the encoding
//! and the template matching). Templates are kept when no other server lists
//! the same template text, else wrapped the same way. A URI or template that
//! itself uses the `mcphost:` scheme is always wrapped, so the scheme is
//! reversible. Each wrapped entry is reported as a [`ResourceRenamed`];
//! [`ResourceCatalog::resolve`] routes any exposed URI back.
//!
//! # Pagination
//!
//! [`NamespacedCatalog::page`] hands out opaque cursors: 32 lowercase hex
//! digits, a 64-bit fingerprint of the listing (kind, then every name and
//! route in order) followed by the 64-bit offset. A cursor from a listing
//! whose names or order have changed is **rejected** with
//! [`InvalidCursor::Stale`] (the caller answers -32602 and the client lists
//! again from the start; it also gets `list_changed`). The fingerprint is a
//! function of the content only, so a cursor stays valid across a daemon
//! restart that rebuilds the identical catalog.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rpds::HashTrieMapSync;
use sha2::{Digest, Sha256};

use super::uri::{UriTemplate, is_reserved, unwrap, wrap};
use crate::protocol::{Prompt, RawValue, Resource, ResourceTemplate, Tool, set_fields, to_raw};

/// Hex digits of the stable hash appended to changed names.
pub const HASH_LEN: usize = 6;
/// `_` plus the hash.
const HASH_SUFFIX_LEN: usize = HASH_LEN + 1;
use crate::config::naming::is_name_char as is_allowed;
pub use crate::config::naming::{MIN_BUDGET, NamingError, NamingRules};

/// One server's tools, as input to [`build`].
#[derive(Debug, Clone, Copy)]
pub struct ServerTools<'a> {
    /// Config name: routes go here, and it seeds the hash.
    pub server: &'a str,
    /// Alias, or the server name: the visible part of the namespaced name.
    pub prefix: &'a str,
    /// Already allow/deny-filtered, in the server's order.
    pub tools: &'a [Tool],
}

/// One server's prompts, as input to [`build_prompts`].
#[derive(Debug, Clone, Copy)]
pub struct ServerPrompts<'a> {
    pub server: &'a str,
    pub prefix: &'a str,
    pub prompts: &'a [Prompt],
}

/// A tool as listed to hosts.
#[derive(Debug, Clone)]
pub struct CatalogTool {
    /// The namespaced name.
    pub name: String,
    /// Config name of the server that owns it.
    pub server: String,
    /// The server's own name for it.
    pub tool: String,
    /// The server's object with only `"name"` replaced by [`Self::name`].
    pub raw: Box<RawValue>,
    /// Its token cost, counted on first use (see [`crate::model_view::cost`]).
    pub cost: crate::registry::cost::TokenCache,
}

impl CatalogTool {
    /// Tokens of its name, description and schema in `enc`; `None` in a
    /// build without the feature `tokens`.
    pub fn tokens(&self, enc: crate::registry::cost::Encoding) -> Option<u32> {
        self.cost.get(&self.raw, enc)
    }
}

/// A prompt as listed to hosts.
#[derive(Debug, Clone)]
pub struct CatalogPrompt {
    pub name: String,
    pub server: String,
    /// The server's own name for it.
    pub prompt: String,
    /// The server's object with only `"name"` replaced by [`Self::name`].
    pub raw: Box<RawValue>,
}

/// Where a namespaced name goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub server: String,
    /// The server's own name (of the tool, or of the prompt in a prompt catalog).
    pub tool: String,
}

/// A name that is not the plain `<prefix><sep><tool>`, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    pub server: String,
    /// The server's own name.
    pub tool: String,
    /// The name it was given.
    pub name: String,
    pub reason: CollisionReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollisionReason {
    /// Illegal characters (or an empty part) were replaced; a hash was added.
    Sanitized,
    /// Over the length budget; cut and a hash added.
    Shortened,
    /// Another tool claimed the same name first; a `_N` suffix was added.
    Duplicate,
}

/// A cursor [`NamespacedCatalog::page`] cannot continue from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCursor {
    #[error("invalid cursor")]
    Malformed,
    #[error("cursor belongs to an older listing; list again from the start")]
    Stale,
    #[error("cursor points past the end of the listing")]
    OutOfRange,
}

/// What every namespaced entry offers the generic catalog.
pub trait Entry {
    /// The namespaced name.
    fn name(&self) -> &str;
    /// Config name of the owning server.
    fn server(&self) -> &str;
    /// The server's own name.
    fn original(&self) -> &str;
    /// The listed object.
    fn raw(&self) -> &RawValue;
    fn make(name: String, server: String, original: String, raw: Box<RawValue>) -> Self;
}

impl Entry for CatalogTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn server(&self) -> &str {
        &self.server
    }
    fn original(&self) -> &str {
        &self.tool
    }
    fn raw(&self) -> &RawValue {
        &self.raw
    }
    fn make(name: String, server: String, tool: String, raw: Box<RawValue>) -> Self {
        CatalogTool {
            name,
            server,
            tool,
            raw,
            cost: Default::default(),
        }
    }
}

impl Entry for CatalogPrompt {
    fn name(&self) -> &str {
        &self.name
    }
    fn server(&self) -> &str {
        &self.server
    }
    fn original(&self) -> &str {
        &self.prompt
    }
    fn raw(&self) -> &RawValue {
        &self.raw
    }
    fn make(name: String, server: String, prompt: String, raw: Box<RawValue>) -> Self {
        CatalogPrompt {
            name,
            server,
            prompt,
            raw,
        }
    }
}

/// A namespaced listing with its routing table. See the module docs.
///
/// Entries are shared (`Arc`) with the [`CatalogBuilder`] that composed it
/// and with earlier listings, and the routes are a persistent map: a new
/// listing after one server's change copies pointers, not tools.
#[derive(Debug, Clone)]
pub struct NamespacedCatalog<E> {
    entries: Vec<Arc<E>>,
    routes: HashTrieMapSync<String, Route>,
    collisions: Vec<Collision>,
    fingerprint: u64,
}

/// All tools of all servers.
pub type Catalog = NamespacedCatalog<CatalogTool>;
/// All prompts of all servers.
pub type PromptCatalog = NamespacedCatalog<CatalogPrompt>;

impl<E: Entry> NamespacedCatalog<E> {
    /// Every entry, in the stable listing order.
    pub fn items(&self) -> &[Arc<E>] {
        &self.entries
    }

    /// The exact namespaced name → server and the server's own name.
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.get(name)
    }

    /// Entries whose server-side name is `original`, in listing order. The
    /// CLI accepts a bare name when this has exactly one element.
    pub fn find_original(&self, original: &str) -> Vec<&E> {
        self.entries
            .iter()
            .map(|e| &**e)
            .filter(|e| e.original() == original)
            .collect()
    }

    /// Every renamed entry, in listing order (so grouped by server).
    pub fn collisions(&self) -> &[Collision] {
        &self.collisions
    }

    /// The renamed entries of one server.
    pub fn collisions_for<'s>(&'s self, server: &'s str) -> impl Iterator<Item = &'s Collision> {
        self.collisions.iter().filter(move |c| c.server == server)
    }

    /// How many entries one server contributes.
    pub fn count_for(&self, server: &str) -> usize {
        self.entries.iter().filter(|e| e.server() == server).count()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Identifies this listing's names and order; cursors carry it.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// One page for a `*/list` answer: the entries and the `nextCursor`.
    /// `page_size == 0` means no limit. `None` and `Some("")` start at the
    /// beginning; a cursor from a different listing is [`InvalidCursor::Stale`].
    pub fn page(
        &self,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<(Vec<&Arc<E>>, Option<String>), InvalidCursor> {
        paginate(&self.entries, self.fingerprint, cursor, page_size)
    }
}

impl Catalog {
    /// Every tool, in the stable listing order.
    pub fn tools(&self) -> &[Arc<CatalogTool>] {
        &self.entries
    }
}

impl PromptCatalog {
    /// Every prompt, in the stable listing order.
    pub fn prompts(&self) -> &[Arc<CatalogPrompt>] {
        &self.entries
    }

    /// The `mcphost/prompts/list` answer: an array of the listed prompt
    /// objects, each plus `server` and `prompt` (the server's own name).
    pub fn annotated(&self) -> Result<Box<RawValue>, crate::protocol::RawError> {
        let mut out = String::from("[");
        for (i, p) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let item = set_fields(
                Some(&p.raw),
                [
                    ("server".to_owned(), to_raw(&p.server)?),
                    ("prompt".to_owned(), to_raw(&p.prompt)?),
                ],
            )?;
            out.push_str(item.get());
        }
        out.push(']');
        RawValue::from_string(out).map_err(crate::protocol::RawError::Encode)
    }
}

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
struct Claim {
    name: String,
    original: String,
    reason: Option<CollisionReason>,
}

/// What one server contributes: its claims, its entries under their
/// candidate names, and the segment last published for it (rule 5 applied).
#[derive(Debug)]
struct Part<E> {
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
struct Segment<E> {
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

impl<E: Entry> CatalogBuilder<E> {
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
fn segment<E: Entry>(kind: &str, part: &Part<E>, renames: &[(usize, String)]) -> Segment<E> {
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

fn first_u64(digest: &[u8]) -> u64 {
    let mut first = [0u8; 8];
    for (dst, src) in first.iter_mut().zip(digest.iter()) {
        *dst = *src;
    }
    u64::from_be_bytes(first)
}

#[cfg(test)]
struct ServerNames<'a> {
    server: &'a str,
    prefix: &'a str,
    names: Vec<&'a str>,
}

/// The outcome of naming one item.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
struct Named {
    name: String,
    server: String,
    original: String,
    reason: Option<CollisionReason>,
}

/// Replace only the top-level `"name"`; every other byte survives.
fn rename(raw: &RawValue, name: &str) -> Result<Box<RawValue>, crate::protocol::RawError> {
    set_fields(Some(raw), [("name".to_owned(), to_raw(name)?)])
}

/// The naming algorithm on plain strings, in listing order: the full
/// rebuild [`CatalogBuilder`] must equal (its tests compare the two).
#[cfg(test)]
fn namespace(servers: &[ServerNames<'_>], rules: &NamingRules) -> Vec<Named> {
    let budget = rules.budget();
    let sep = sanitize(&rules.separator);
    let mut claims: Vec<Named> = servers
        .iter()
        .flat_map(|s| {
            let sep = &sep;
            s.names.iter().map(move |&tool| {
                let (name, reason) = candidate(s.server, s.prefix, tool, sep, budget);
                Named {
                    name,
                    server: s.server.to_owned(),
                    original: tool.to_owned(),
                    reason,
                }
            })
        })
        .collect();

    // Rule 5: who keeps a contested name depends on (server, tool), not on
    // the input order; the index only separates a server's own duplicates.
    let mut order: Vec<usize> = (0..claims.len()).collect();
    order.sort_by(|&a, &b| {
        (&claims[a].server, &claims[a].original, a).cmp(&(
            &claims[b].server,
            &claims[b].original,
            b,
        ))
    });
    let mut taken: HashSet<String> = HashSet::with_capacity(claims.len());
    let mut losers = Vec::new();
    for &i in &order {
        if !taken.insert(claims[i].name.clone()) {
            losers.push(i);
        }
    }
    // Every first claimant is placed before any loser picks a suffix, so a
    // suffixed name can never take a name someone holds on its own.
    for i in losers {
        let claim = &mut claims[i];
        for n in 2usize.. {
            let name = with_number(&claim.name, n, budget);
            if taken.insert(name.clone()) {
                claim.name = name;
                claim.reason = Some(CollisionReason::Duplicate);
                break;
            }
        }
    }
    claims
}

/// Rules 1–4 for one item: the name it asks for, and why it differs from the
/// plain base name, if it does.
fn candidate(
    server: &str,
    prefix: &str,
    tool: &str,
    sep: &str,
    budget: usize,
) -> (String, Option<CollisionReason>) {
    let p = sanitize(prefix);
    let t = sanitize(tool);
    let sanitized = p != prefix || t != tool || prefix.is_empty() || tool.is_empty();
    let hash = short_hash(server, tool);
    let mut name = format!("{p}{sep}{t}");
    if sanitized {
        name.push('_');
        name.push_str(&hash);
    }
    if name.len() <= budget {
        return (name, sanitized.then_some(CollisionReason::Sanitized));
    }
    (
        shorten(&p, sep, &t, &hash, budget),
        Some(CollisionReason::Shortened),
    )
}

/// Rule 4. All inputs are ASCII (sanitized), so byte lengths are characters.
fn shorten(p: &str, sep: &str, t: &str, hash: &str, budget: usize) -> String {
    let head_len = budget.saturating_sub(HASH_SUFFIX_LEN);
    let half = head_len / 2;
    let keep = if p.len() + sep.len() <= half {
        p.len()
    } else {
        half.saturating_sub(sep.len()).max(1).min(p.len())
    };
    let mut head = String::with_capacity(budget);
    head.push_str(ascii_prefix(p, keep));
    head.push_str(sep);
    head.push_str(t);
    let head = ascii_prefix(&head, head_len);
    format!("{head}_{hash}")
}

/// Rule 5's `_N`, cutting the end of `name` to stay within the budget.
fn with_number(name: &str, n: usize, budget: usize) -> String {
    let suffix = format!("_{n}");
    let keep = budget.saturating_sub(suffix.len());
    format!("{}{suffix}", ascii_prefix(name, keep))
}

/// The first `n` bytes of an ASCII string (the whole string if shorter).
fn ascii_prefix(s: &str, n: usize) -> &str {
    // `get` instead of indexing: a non-ASCII input would yield the whole
    // string rather than a panic (callers only pass sanitized text).
    s.get(..n.min(s.len())).unwrap_or(s)
}

/// Rule 2: each character outside `[A-Za-z0-9_-]` becomes `_`.
fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if is_allowed(c) { c } else { '_' })
        .collect()
}

/// Rule 3: 6 hex digits of SHA-256 over the length-prefixed server name and
/// the original tool name. The length prefix keeps `("ab","c")` and
/// `("a","bc")` apart.
fn short_hash(server: &str, tool: &str) -> String {
    let mut h = Sha256::new();
    h.update((server.len() as u64).to_be_bytes());
    h.update(server.as_bytes());
    h.update(tool.as_bytes());
    let digest = h.finalize();
    let mut out = String::with_capacity(HASH_LEN);
    for b in digest.iter().take(HASH_LEN.div_ceil(2)) {
        out.push_str(&format!("{b:02x}"));
    }
    out.truncate(HASH_LEN);
    out
}

/// A 64-bit digest of a listing: its kind, then each entry's fields, every
/// string length-prefixed so no two listings encode alike.
fn fingerprint<'a, const N: usize>(kind: &str, rows: impl Iterator<Item = [&'a str; N]>) -> u64 {
    let mut h = Sha256::new();
    let mut field = |s: &str| {
        h.update((s.len() as u64).to_be_bytes());
        h.update(s.as_bytes());
    };
    field(kind);
    for row in rows {
        for s in row {
            field(s);
        }
    }
    let digest = h.finalize();
    let mut first = [0u8; 8];
    for (dst, src) in first.iter_mut().zip(digest.iter()) {
        *dst = *src;
    }
    u64::from_be_bytes(first)
}

fn encode_cursor(fingerprint: u64, offset: usize) -> String {
    format!("{fingerprint:016x}{:016x}", offset as u64)
}

fn decode_cursor(cursor: &str) -> Result<(u64, usize), InvalidCursor> {
    if cursor.len() != 32 || !cursor.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(InvalidCursor::Malformed);
    }
    let (fp, off) = cursor.split_at(16);
    let fp = u64::from_str_radix(fp, 16).map_err(|_| InvalidCursor::Malformed)?;
    let off = u64::from_str_radix(off, 16).map_err(|_| InvalidCursor::Malformed)?;
    let off = usize::try_from(off).map_err(|_| InvalidCursor::OutOfRange)?;
    Ok((fp, off))
}

fn paginate<'a, T>(
    items: &'a [T],
    fingerprint: u64,
    cursor: Option<&str>,
    page_size: usize,
) -> Result<(Vec<&'a T>, Option<String>), InvalidCursor> {
    let start = match cursor {
        None | Some("") => 0,
        Some(c) => {
            let (fp, offset) = decode_cursor(c)?;
            if fp != fingerprint {
                return Err(InvalidCursor::Stale);
            }
            if offset > items.len() {
                return Err(InvalidCursor::OutOfRange);
            }
            offset
        }
    };
    let end = if page_size == 0 {
        items.len()
    } else {
        start.saturating_add(page_size).min(items.len())
    };
    let page = items.get(start..end).unwrap_or_default().iter().collect();
    let next = (end < items.len()).then(|| encode_cursor(fingerprint, end));
    Ok((page, next))
}

// ---------------------------------------------------------------------------
// Resources: a server's own URI when no other server can claim it, else
// `mcphost://<server>/<uri>`.

/// One server's resources and templates, as input to [`build_resources`].
#[derive(Debug, Clone, Copy)]
pub struct ServerResources<'a> {
    pub server: &'a str,
    pub resources: &'a [Resource],
    pub templates: &'a [ResourceTemplate],
}

/// A resource as listed to hosts: the server's object, with only `uri`
/// replaced when it is exposed in the `mcphost://` form.
#[derive(Debug, Clone)]
pub struct CatalogResource {
    /// The exposed URI: the server's own, or `mcphost://<server>/<own>`.
    pub uri: String,
    pub server: String,
    /// The server's own URI.
    pub original: String,
    pub raw: Box<RawValue>,
}

/// A resource template as listed to hosts, with only `uriTemplate`
/// replaced when it is exposed in the `mcphost://` form.
#[derive(Debug, Clone)]
pub struct CatalogTemplate {
    /// The exposed template.
    pub uri_template: String,
    pub server: String,
    /// The server's own template.
    pub original: String,
    pub raw: Box<RawValue>,
}

/// Which resource list a [`ResourceRenamed`] entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    Resource,
    Template,
}

/// Why a URI or template is exposed in the `mcphost://` form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum RenameReason {
    /// Another server lists the same URI (or the same template text).
    SameUri,
    /// Another server's template can produce this URI.
    TemplateMatch,
    /// The server's own URI uses the `mcphost:` scheme.
    ReservedScheme,
}

/// A URI or template listed under the `mcphost://` form, and why; the
/// resource counterpart of a renamed tool ([`Collision`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRenamed {
    pub kind: ResourceKind,
    pub server: String,
    /// The server's own URI or template.
    pub uri: String,
    /// What clients see.
    pub exposed: String,
    pub reason: RenameReason,
    /// The other servers that claim it, in config order.
    pub with: Vec<String>,
}

/// Where a resource URI goes: a server and the server's own URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRoute {
    pub server: String,
    pub uri: String,
}

/// Why a URI could not be routed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("no server offers resource {0:?}")]
    NotFound(String),
    #[error(
        "resource {uri:?} could come from several servers ({}); name one with {}",
        servers.join(", "),
        servers.iter().map(|s| format!("{:?}", super::uri::wrap(s, uri))).collect::<Vec<_>>().join(" or ")
    )]
    Ambiguous { uri: String, servers: Vec<String> },
}

/// How one server's URI is shown to clients (see [`ResourceCatalog::expose`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposed {
    /// As it is: it routes back to this server.
    Kept,
    /// As it is, though nothing lists it: it routes to this server only if
    /// remembered (no listing or template of any server claims it).
    Unclaimed,
    /// In the `mcphost://` form.
    Wrapped(String),
}

/// All resources and resource templates of all servers.
#[derive(Debug, Clone)]
pub struct ResourceCatalog {
    resources: Vec<CatalogResource>,
    templates: Vec<CatalogTemplate>,
    /// Parallel to `templates`.
    matchers: Vec<UriTemplate>,
    /// Every server given, listing or not: `mcphost://` routes to any.
    servers: Vec<String>,
    /// Exposed URI → index in `resources`.
    by_uri: HashMap<String, usize>,
    /// The server's own URI → indices in `resources` (one per server).
    by_original: HashMap<String, Vec<usize>>,
    /// Exposed template → index in `templates`.
    by_template: HashMap<String, usize>,
    renamed: Vec<ResourceRenamed>,
    resources_fp: u64,
    templates_fp: u64,
}

/// Merge every server's resources under the exposure rule (module docs of
/// [`crate::registry::uri`] and `docs/ipc.md`):
///
/// - a server's own URI is kept when no other server lists the same URI and
///   no other server's template can produce it; otherwise each copy is
///   exposed as `mcphost://<server>/<uri>`;
/// - a template is kept when no other server lists the same template text;
///   otherwise each copy is exposed as `mcphost://<server>/<template>`;
/// - a URI or template that itself starts with `mcphost:` is always wrapped.
///
/// The order is the servers' order (config order), then each server's own;
/// a server listing the same URI (or template) twice keeps the first.
pub fn build_resources(servers: &[ServerResources<'_>]) -> ResourceCatalog {
    // Each server's distinct URIs and templates, first copy wins.
    type Own<'a> = (
        &'a str,
        Vec<&'a Resource>,
        Vec<(&'a ResourceTemplate, UriTemplate)>,
    );
    let mut own: Vec<Own<'_>> = Vec::new();
    for s in servers {
        let mut seen = HashSet::new();
        let rs = s
            .resources
            .iter()
            .filter(|r| seen.insert(r.uri.as_str()))
            .collect();
        let mut seen = HashSet::new();
        let ts = s
            .templates
            .iter()
            .filter(|t| seen.insert(t.uri_template.as_str()))
            .map(|t| (t, UriTemplate::parse(&t.uri_template)))
            .collect();
        own.push((s.server, rs, ts));
    }
    // Who lists each URI and each template text, in config order.
    let mut uri_servers: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut tpl_servers: HashMap<&str, Vec<&str>> = HashMap::new();
    for (s, rs, ts) in &own {
        for r in rs {
            uri_servers.entry(r.uri.as_str()).or_default().push(s);
        }
        for (t, _) in ts {
            tpl_servers
                .entry(t.uri_template.as_str())
                .or_default()
                .push(s);
        }
    }
    let others = |map: &HashMap<&str, Vec<&str>>, key: &str, me: &str| -> Vec<String> {
        map.get(key)
            .into_iter()
            .flatten()
            .filter(|s| **s != me)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let listers = |uri: &str, me: &str| others(&uri_servers, uri, me);
    let same_template = |t: &str, me: &str| others(&tpl_servers, t, me);
    let producers = |uri: &str, me: &str| -> Vec<String> {
        own.iter()
            .filter(|(s, _, ts)| *s != me && ts.iter().any(|(_, m)| m.matches(uri)))
            .map(|(s, _, _)| (*s).to_owned())
            .collect()
    };

    let mut cat = ResourceCatalog {
        resources: Vec::new(),
        templates: Vec::new(),
        matchers: Vec::new(),
        servers: servers.iter().map(|s| s.server.to_owned()).collect(),
        by_uri: HashMap::new(),
        by_original: HashMap::new(),
        by_template: HashMap::new(),
        renamed: Vec::new(),
        resources_fp: 0,
        templates_fp: 0,
    };
    for (server, rs, ts) in &own {
        for r in rs {
            let why = if is_reserved(&r.uri) {
                Some((RenameReason::ReservedScheme, Vec::new()))
            } else {
                let same = listers(&r.uri, server);
                if !same.is_empty() {
                    Some((RenameReason::SameUri, same))
                } else {
                    let by = producers(&r.uri, server);
                    (!by.is_empty()).then_some((RenameReason::TemplateMatch, by))
                }
            };
            let Some(entry) = expose_item(
                server,
                &r.uri,
                &r.raw,
                "uri",
                why,
                ResourceKind::Resource,
                &mut cat.renamed,
            ) else {
                continue;
            };
            let (exposed, raw) = entry;
            let i = cat.resources.len();
            cat.by_uri.insert(exposed.clone(), i);
            cat.by_original.entry(r.uri.clone()).or_default().push(i);
            cat.resources.push(CatalogResource {
                uri: exposed,
                server: (*server).to_owned(),
                original: r.uri.clone(),
                raw,
            });
        }
        for (t, matcher) in ts {
            let why = if is_reserved(&t.uri_template) {
                Some((RenameReason::ReservedScheme, Vec::new()))
            } else {
                let same = same_template(&t.uri_template, server);
                (!same.is_empty()).then_some((RenameReason::SameUri, same))
            };
            let Some((exposed, raw)) = expose_item(
                server,
                &t.uri_template,
                &t.raw,
                "uriTemplate",
                why,
                ResourceKind::Template,
                &mut cat.renamed,
            ) else {
                continue;
            };
            cat.by_template.insert(exposed.clone(), cat.templates.len());
            cat.templates.push(CatalogTemplate {
                uri_template: exposed,
                server: (*server).to_owned(),
                original: t.uri_template.clone(),
                raw,
            });
            cat.matchers.push(matcher.clone());
        }
    }
    cat.resources_fp = fingerprint(
        "resources",
        cat.resources
            .iter()
            .map(|r| [r.uri.as_str(), r.server.as_str(), r.original.as_str()]),
    );
    cat.templates_fp = fingerprint(
        "resource_templates",
        cat.templates.iter().map(|t| {
            [
                t.uri_template.as_str(),
                t.server.as_str(),
                t.original.as_str(),
            ]
        }),
    );
    cat
}

/// The exposed text and raw object of one item; `None` (left out, logged)
/// when its raw object cannot take the new text, which only a hand-built
/// item can cause.
fn expose_item(
    server: &str,
    own: &str,
    raw: &RawValue,
    field: &str,
    why: Option<(RenameReason, Vec<String>)>,
    kind: ResourceKind,
    renamed: &mut Vec<ResourceRenamed>,
) -> Option<(String, Box<RawValue>)> {
    let Some((reason, with)) = why else {
        return Some((own.to_owned(), raw.to_owned()));
    };
    let exposed = wrap(server, own);
    let raw = match to_raw(&exposed).and_then(|v| set_fields(Some(raw), [(field.to_owned(), v)])) {
        Ok(raw) => raw,
        Err(err) => {
            tracing::warn!(server, uri = own, %err, "cannot set the exposed {field}; entry left out");
            return None;
        }
    };
    renamed.push(ResourceRenamed {
        kind,
        server: server.to_owned(),
        uri: own.to_owned(),
        exposed: exposed.clone(),
        reason,
        with,
    });
    Some((exposed, raw))
}

impl ResourceCatalog {
    /// Every resource, in config then server order.
    pub fn resources(&self) -> &[CatalogResource] {
        &self.resources
    }

    pub fn templates(&self) -> &[CatalogTemplate] {
        &self.templates
    }

    /// Where `uri` goes. In order: the `mcphost://<server>/` form names its
    /// server (any configured server, listed or not); a listed (exposed)
    /// URI goes to its server; `remembered` (URIs seen in a server's
    /// results) may name one; otherwise the servers that list it as their
    /// own or have a template matching it: exactly one, or
    /// [`ResolveError::Ambiguous`].
    pub fn resolve(
        &self,
        uri: &str,
        remembered: impl FnOnce(&str) -> Option<String>,
    ) -> Result<ResourceRoute, ResolveError> {
        if let Some((server, rest)) = unwrap(uri) {
            return if self.servers.contains(&server) {
                Ok(ResourceRoute {
                    server,
                    uri: rest.to_owned(),
                })
            } else {
                Err(ResolveError::NotFound(uri.to_owned()))
            };
        }
        if let Some(r) = self.by_uri.get(uri).and_then(|&i| self.resources.get(i)) {
            return Ok(ResourceRoute {
                server: r.server.clone(),
                uri: r.original.clone(),
            });
        }
        if let Some(server) = remembered(uri).filter(|s| self.servers.contains(s)) {
            return Ok(ResourceRoute {
                server,
                uri: uri.to_owned(),
            });
        }
        self.one_of(uri, self.claimants(uri, None))
    }

    /// Where a `completion/complete` `ref/resource` goes: its `uri` is a
    /// template (or a URI). The `mcphost://` form and exposed templates
    /// route directly; a server's own template text goes to the one server
    /// that has it; anything else resolves as a resource URI.
    pub fn resolve_template(
        &self,
        uri: &str,
        remembered: impl FnOnce(&str) -> Option<String>,
    ) -> Result<ResourceRoute, ResolveError> {
        if unwrap(uri).is_none() {
            if let Some(t) = self
                .by_template
                .get(uri)
                .and_then(|&i| self.templates.get(i))
            {
                return Ok(ResourceRoute {
                    server: t.server.clone(),
                    uri: t.original.clone(),
                });
            }
            let mut having: Vec<String> = Vec::new();
            for t in self.templates.iter().filter(|t| t.original == uri) {
                if !having.contains(&t.server) {
                    having.push(t.server.clone());
                }
            }
            if !having.is_empty() {
                return self.one_of(uri, having);
            }
        }
        self.resolve(uri, remembered)
    }

    fn one_of(&self, uri: &str, mut servers: Vec<String>) -> Result<ResourceRoute, ResolveError> {
        match servers.len() {
            0 => Err(ResolveError::NotFound(uri.to_owned())),
            1 => Ok(ResourceRoute {
                server: servers.remove(0),
                uri: uri.to_owned(),
            }),
            _ => Err(ResolveError::Ambiguous {
                uri: uri.to_owned(),
                servers,
            }),
        }
    }

    /// Servers (config order, other than `except`) that list `uri` as their
    /// own or have a template that can produce it.
    fn claimants(&self, uri: &str, except: Option<&str>) -> Vec<String> {
        let listing = self
            .by_original
            .get(uri)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.resources.get(i))
            .map(|r| r.server.as_str());
        let producing = self
            .templates
            .iter()
            .zip(&self.matchers)
            .filter(|(_, m)| m.matches(uri))
            .map(|(t, _)| t.server.as_str());
        let claim: HashSet<&str> = listing
            .chain(producing)
            .filter(|s| Some(*s) != except)
            .collect();
        self.servers
            .iter()
            .filter(|s| claim.contains(s.as_str()))
            .cloned()
            .collect()
    }

    /// How `server`'s own `uri` (for example in a `resource_link` of one of
    /// its tool results) is shown to clients so that reading it comes back
    /// to `server`: its listing's exposed form if it lists it; wrapped when
    /// another server lists it or has a template producing it, or when it
    /// uses the `mcphost:` scheme; else kept ([`Exposed::Unclaimed`] when
    /// not even a template of `server` produces it).
    pub fn expose(&self, server: &str, uri: &str) -> Exposed {
        if is_reserved(uri) {
            return Exposed::Wrapped(wrap(server, uri));
        }
        let mine = self
            .by_original
            .get(uri)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.resources.get(i))
            .find(|r| r.server == server);
        if let Some(r) = mine {
            return if r.uri == uri {
                Exposed::Kept
            } else {
                Exposed::Wrapped(r.uri.clone())
            };
        }
        if !self.claimants(uri, Some(server)).is_empty() {
            return Exposed::Wrapped(wrap(server, uri));
        }
        let produced = self
            .templates
            .iter()
            .zip(&self.matchers)
            .any(|(t, m)| t.server == server && m.matches(uri));
        if produced {
            Exposed::Kept
        } else {
            Exposed::Unclaimed
        }
    }

    /// Whether `server` is one of the servers this catalog was built from.
    pub fn has_server(&self, server: &str) -> bool {
        self.servers.iter().any(|s| s == server)
    }

    /// Every URI and template listed in the `mcphost://` form, and why.
    pub fn renamed(&self) -> &[ResourceRenamed] {
        &self.renamed
    }

    /// The renamed entries of one server (for `mcphost/servers/list`).
    pub fn renamed_for<'s>(&'s self, server: &'s str) -> impl Iterator<Item = &'s ResourceRenamed> {
        self.renamed.iter().filter(move |r| r.server == server)
    }

    /// Resources listed for one server.
    pub fn count_for(&self, server: &str) -> usize {
        self.resources.iter().filter(|r| r.server == server).count()
    }

    /// Templates listed for one server.
    pub fn templates_for(&self, server: &str) -> usize {
        self.templates.iter().filter(|t| t.server == server).count()
    }

    /// A `resources/list` page; same cursor rules as [`NamespacedCatalog::page`].
    pub fn page(
        &self,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<(Vec<&CatalogResource>, Option<String>), InvalidCursor> {
        paginate(&self.resources, self.resources_fp, cursor, page_size)
    }

    /// A `resources/templates/list` page. A resources cursor is stale here.
    pub fn page_templates(
        &self,
        cursor: Option<&str>,
        page_size: usize,
    ) -> Result<(Vec<&CatalogTemplate>, Option<String>), InvalidCursor> {
        paginate(&self.templates, self.templates_fp, cursor, page_size)
    }

    /// The `mcphost/resources/list` answer: `{"resources":[..],
    /// "resourceTemplates":[..]}`, each listed object plus `server` and the
    /// server's own `serverUri` (`serverUriTemplate`).
    pub fn annotated(&self) -> Result<Box<RawValue>, crate::protocol::RawError> {
        let mut out = String::from("{\"resources\":[");
        for (i, r) in self.resources.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let item = set_fields(
                Some(&r.raw),
                [
                    ("server".to_owned(), to_raw(&r.server)?),
                    ("serverUri".to_owned(), to_raw(&r.original)?),
                ],
            )?;
            out.push_str(item.get());
        }
        out.push_str("],\"resourceTemplates\":[");
        for (i, t) in self.templates.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let item = set_fields(
                Some(&t.raw),
                [
                    ("server".to_owned(), to_raw(&t.server)?),
                    ("serverUriTemplate".to_owned(), to_raw(&t.original)?),
                ],
            )?;
            out.push_str(item.get());
        }
        out.push_str("]}");
        RawValue::from_string(out).map_err(crate::protocol::RawError::Encode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Tool {
        let text = format!(
            r#"{{"name":{},"inputSchema":{{"type":"object"}}}}"#,
            serde_json::to_string(name).unwrap()
        );
        serde_json::from_str(&text).unwrap()
    }

    fn tools(names: &[&str]) -> Vec<Tool> {
        names.iter().map(|n| tool(n)).collect()
    }

    fn prompt(name: &str) -> Prompt {
        serde_json::from_str(&format!(
            r#"{{"name":{},"arguments":[]}}"#,
            serde_json::to_string(name).unwrap()
        ))
        .unwrap()
    }

    fn resource(uri: &str) -> Resource {
        serde_json::from_str(&format!(r#"{{"uri":"{uri}","name":"n"}}"#)).unwrap()
    }

    fn template(t: &str) -> ResourceTemplate {
        serde_json::from_str(&format!(r#"{{"uriTemplate":"{t}","name":"n"}}"#)).unwrap()
    }

    fn st<'a>(server: &'a str, prefix: &'a str, tools: &'a [Tool]) -> ServerTools<'a> {
        ServerTools {
            server,
            prefix,
            tools,
        }
    }

    fn rules(max_length: usize, reserve: usize) -> NamingRules {
        NamingRules {
            max_length,
            reserve,
            ..NamingRules::default()
        }
    }

    fn names(c: &Catalog) -> Vec<&str> {
        c.tools().iter().map(|t| t.name.as_str()).collect()
    }

    /// Every name legal, within budget, unique, routed back to its origin.
    fn check_invariants(c: &Catalog, r: &NamingRules) {
        let mut seen = HashSet::new();
        for t in c.tools() {
            assert!(!t.name.is_empty());
            assert!(t.name.len() <= r.budget(), "{} over {}", t.name, r.budget());
            assert!(t.name.chars().all(is_allowed), "{:?}", t.name);
            assert!(seen.insert(t.name.clone()), "duplicate {}", t.name);
            let route = c.route(&t.name).unwrap();
            assert_eq!(
                (route.server.as_str(), route.tool.as_str()),
                (t.server.as_str(), t.tool.as_str())
            );
            let n: Option<String> = crate::protocol::raw_field(&t.raw, "name").unwrap();
            assert_eq!(n.as_deref(), Some(t.name.as_str()));
        }
    }

    /// The naming contract, pinned: these exact names must survive every
    /// refactor, on every machine.
    #[test]
    fn golden_names() {
        let long = "a".repeat(200);
        let t = tools(&[
            "create_issue",
            "a.b",
            "a_b",
            "read file",
            "fs/read",
            "héllo",
            "日本",
            "",
            &long,
            "t",
            "t",
        ]);
        let x = tools(&["x"]);
        let run = tools(&["run"]);
        let long_prefix = "p".repeat(80);
        let servers = [
            st("github", "gh", &t),
            st("my.srv", "my.srv", &x),
            st("p", &long_prefix, &run),
        ];
        let at_64 = build(&servers, &NamingRules::default());
        assert_eq!(
            names(&at_64),
            [
                "gh__create_issue",
                "gh__a_b_0e5bda",
                "gh__a_b",
                "gh__read_file_dc93cd",
                "gh__fs_read_c66148",
                "gh__h_llo_bb3997",
                "gh_____171519",
                "gh___bd1bd2",
                "gh__aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_01d06a",
                "gh__t",
                "gh__t_2",
                "my_srv__x_92cb39",
                "pppppppppppppppppppppppppp__run_f1f28d",
            ]
        );
        let at_16 = build(&servers, &rules(16, 0));
        assert_eq!(
            names(&at_16),
            [
                "gh__create_issue",
                "gh__a_b_0e5bda",
                "gh__a_b",
                "gh__read__dc93cd",
                "gh__fs_re_c66148",
                "gh__h_llo_bb3997",
                "gh_____171519",
                "gh___bd1bd2",
                "gh__aaaaa_01d06a",
                "gh__t",
                "gh__t_2",
                "my_srv__x_92cb39",
                "pp__run_f1f28d",
            ]
        );
    }

    #[test]
    fn plain_names_and_listing_order() {
        let a = tools(&["search", "create_issue"]);
        let b = tools(&["read", "write"]);
        let c = build(
            &[st("github", "gh", &a), st("fs", "fs", &b)],
            &NamingRules::default(),
        );
        assert_eq!(
            names(&c),
            ["gh__search", "gh__create_issue", "fs__read", "fs__write"]
        );
        assert!(c.collisions().is_empty());
        assert_eq!(
            c.route("gh__create_issue"),
            Some(&Route {
                server: "github".into(),
                tool: "create_issue".into()
            })
        );
        // Routing is a table: nothing is parsed out of unknown names.
        assert_eq!(c.route("github__create_issue"), None);
        assert_eq!(c.route("gh__"), None);
        assert_eq!(c.count_for("github"), 2);
        assert_eq!(c.count_for("gh"), 0);
        assert_eq!(c.len(), 4);
        assert!(!c.is_empty());
        check_invariants(&c, &NamingRules::default());
    }

    #[test]
    fn hash_is_pinned() {
        // The hash is part of the naming contract: a change here renames
        // users' tools. These values must never change.
        assert_eq!(short_hash("srv", "a.b"), "11e28d");
        assert_eq!(short_hash("srv", ""), "ba6377");
        assert_ne!(short_hash("ab", "c"), short_hash("a", "bc"));
        let c = build(
            &[st("srv", "srv", &tools(&["a.b", "a_b"]))],
            &NamingRules::default(),
        );
        assert_eq!(names(&c), ["srv__a_b_11e28d", "srv__a_b"]);
    }

    #[test]
    fn sanitizing_adds_a_hash_and_keeps_merged_names_apart() {
        let t = tools(&[
            "a.b",
            "a_b",
            "a b",
            "a/b",
            "héllo wörld",
            "日本",
            "ok-name_1",
        ]);
        let r = NamingRules::default();
        let c = build(&[st("srv", "srv", &t)], &r);
        let n = names(&c);
        assert_eq!(n[1], "srv__a_b");
        assert_eq!(n[6], "srv__ok-name_1");
        for (i, orig) in ["a.b", "a b", "a/b"].iter().enumerate() {
            let name = &c.tools()[[0, 2, 3][i]].name;
            assert_eq!(name, &format!("srv__a_b_{}", short_hash("srv", orig)));
        }
        // One `_` per character, not per byte.
        assert_eq!(
            n[4],
            format!("srv__h_llo_w_rld_{}", short_hash("srv", "héllo wörld"))
        );
        assert_eq!(n[5], format!("srv_____{}", short_hash("srv", "日本")));
        let reasons: Vec<_> = c
            .collisions()
            .iter()
            .map(|c| (c.tool.as_str(), c.reason))
            .collect();
        assert_eq!(
            reasons,
            [
                ("a.b", CollisionReason::Sanitized),
                ("a b", CollisionReason::Sanitized),
                ("a/b", CollisionReason::Sanitized),
                ("héllo wörld", CollisionReason::Sanitized),
                ("日本", CollisionReason::Sanitized),
            ]
        );
        check_invariants(&c, &r);
    }

    #[test]
    fn sanitized_prefix_hashes_every_tool() {
        let t = tools(&["x"]);
        let c = build(
            &[
                st("my.server", "my.server", &t),
                st("my_server", "my_server", &t),
            ],
            &NamingRules::default(),
        );
        assert_eq!(
            names(&c),
            [
                format!("my_server__x_{}", short_hash("my.server", "x")).as_str(),
                "my_server__x"
            ]
        );
    }

    #[test]
    fn empty_tool_name() {
        let r = NamingRules::default();
        let c = build(&[st("srv", "srv", &tools(&["", "_"]))], &r);
        let empty = format!("srv___{}", short_hash("srv", ""));
        assert_eq!(names(&c), [empty.as_str(), "srv___"]);
        assert_eq!(c.route(&empty).unwrap().tool, "");
        assert_eq!(c.collisions()[0].reason, CollisionReason::Sanitized);
        check_invariants(&c, &r);
    }

    #[test]
    fn long_names_are_cut_with_a_hash() {
        let long_a = "a".repeat(200);
        let long_b = format!("{}b", "a".repeat(199));
        let r = NamingRules::default();
        let c = build(&[st("srv", "srv", &tools(&[&long_a, &long_b]))], &r);
        let n = names(&c);
        assert_eq!(n[0].len(), 64);
        assert_eq!(
            n[0],
            format!("srv__{}_{}", "a".repeat(52), short_hash("srv", &long_a))
        );
        assert_ne!(n[0], n[1]);
        assert!(n[1].starts_with("srv__aaaa"));
        assert!(
            c.collisions()
                .iter()
                .all(|c| c.reason == CollisionReason::Shortened)
        );
        // Exactly at the budget: untouched.
        let exact = "t".repeat(64 - 5);
        let c = build(&[st("srv", "srv", &tools(&[&exact]))], &r);
        assert_eq!(names(&c), [format!("srv__{exact}").as_str()]);
        assert!(c.collisions().is_empty());
        check_invariants(&c, &r);
    }

    #[test]
    fn long_and_illegal_is_shortened_with_one_hash() {
        let name = format!("x.{}", "y".repeat(100));
        let r = NamingRules::default();
        let c = build(&[st("srv", "srv", &tools(&[&name]))], &r);
        let h = short_hash("srv", &name);
        assert_eq!(
            names(&c),
            [format!("srv__x_{}_{h}", "y".repeat(50)).as_str()]
        );
        assert_eq!(c.tools()[0].name.matches(&h).count(), 1);
        assert_eq!(c.collisions()[0].reason, CollisionReason::Shortened);
    }

    #[test]
    fn prefix_longer_than_the_budget() {
        let prefix = "p".repeat(100);
        let r = NamingRules::default();
        let t = tools(&["a", "bb"]);
        let c = build(&[st("srv", &prefix, &t)], &r);
        // head = 57, half = 28: 26 prefix characters, the separator, the tool.
        let want = format!("{}__a_{}", "p".repeat(26), short_hash("srv", "a"));
        assert_eq!(names(&c)[0], want);
        check_invariants(&c, &r);
        // A long-but-not-too-long prefix is only cut when the name overflows.
        let prefix = "q".repeat(40);
        let c = build(&[st("srv", &prefix, &tools(&["a", &"z".repeat(30)]))], &r);
        assert_eq!(names(&c)[0], format!("{prefix}__a"));
        assert_eq!(
            names(&c)[1],
            format!(
                "{}__{}_{}",
                "q".repeat(26),
                "z".repeat(29),
                short_hash("srv", &"z".repeat(30))
            )
        );
    }

    #[test]
    fn tiny_budget() {
        let r = rules(16, 0);
        let t = tools(&["search_everything", "search_everywhere", "a", "x.y", ""]);
        let c = build(
            &[st("github", "github", &t), st("gitlab", "github", &t)],
            &r,
        );
        check_invariants(&c, &r);
        assert_eq!(names(&c)[2], "github__a");
        // head = 9, half = 4: prefix cut to 2, then `__`, then 5 tool chars.
        assert_eq!(
            names(&c)[0],
            format!("gi__searc_{}", short_hash("github", "search_everything"))
        );
        // Same prefix on two servers: github keeps `github__a`, gitlab's is numbered.
        assert_eq!(names(&c)[7], "github__a_2");
        assert_eq!(c.route("github__a_2").unwrap().server, "gitlab");
    }

    #[test]
    fn below_minimum_budget_is_raised_and_rejected_by_validate() {
        let r = rules(64, 60);
        assert_eq!(r.budget(), MIN_BUDGET);
        assert_eq!(
            r.validate(),
            Err(NamingError::Budget {
                budget: 4,
                max_length: 64,
                reserve: 60
            })
        );
        let c = build(&[st("server", "server", &tools(&["some_tool", "x"]))], &r);
        check_invariants(&c, &r);
        assert_eq!(
            names(&c)[0],
            format!("s__so_{}", short_hash("server", "some_tool"))
        );
        assert!(NamingRules::default().validate().is_ok());
        assert!(rules(16, 4).validate().is_ok());
    }

    #[test]
    fn reserve_shrinks_the_budget() {
        let r = rules(64, 14);
        assert_eq!(r.budget(), 50);
        let long = "t".repeat(60);
        let c = build(&[st("srv", "srv", &tools(&[&long]))], &r);
        assert_eq!(names(&c)[0].len(), 50);
        check_invariants(&c, &r);
    }

    #[test]
    fn other_separators() {
        let t = tools(&["read"]);
        let dash = NamingRules {
            separator: "-".into(),
            ..NamingRules::default()
        };
        assert!(dash.validate().is_ok());
        assert_eq!(names(&build(&[st("fs", "fs", &t)], &dash)), ["fs-read"]);
        let word = NamingRules {
            separator: "_x_".into(),
            ..NamingRules::default()
        };
        assert_eq!(names(&build(&[st("fs", "fs", &t)], &word)), ["fs_x_read"]);
        // Illegal separators are a config error; build still emits legal names.
        let dot = NamingRules {
            separator: ".".into(),
            ..NamingRules::default()
        };
        assert_eq!(dot.validate(), Err(NamingError::Separator(".".into())));
        assert!(
            NamingRules {
                separator: String::new(),
                ..NamingRules::default()
            }
            .validate()
            .is_err()
        );
        assert_eq!(names(&build(&[st("fs", "fs", &t)], &dot)), ["fs_read"]);
    }

    #[test]
    fn duplicate_names_within_one_server() {
        let r = NamingRules::default();
        let c = build(&[st("buggy", "buggy", &tools(&["t", "u", "t", "t"]))], &r);
        assert_eq!(
            names(&c),
            ["buggy__t", "buggy__u", "buggy__t_2", "buggy__t_3"]
        );
        assert_eq!(c.route("buggy__t_3").unwrap().tool, "t");
        assert_eq!(
            c.collisions(),
            [
                Collision {
                    server: "buggy".into(),
                    tool: "t".into(),
                    name: "buggy__t_2".into(),
                    reason: CollisionReason::Duplicate
                },
                Collision {
                    server: "buggy".into(),
                    tool: "t".into(),
                    name: "buggy__t_3".into(),
                    reason: CollisionReason::Duplicate
                },
            ]
        );
        check_invariants(&c, &r);
    }

    #[test]
    fn alias_reuse_is_resolved_by_server_name_not_order() {
        let t = tools(&["search"]);
        let r = NamingRules::default();
        let fwd = build(&[st("zeta", "web", &t), st("alpha", "web", &t)], &r);
        let rev = build(&[st("alpha", "web", &t), st("zeta", "web", &t)], &r);
        assert_eq!(fwd.route("web__search").unwrap().server, "alpha");
        assert_eq!(fwd.route("web__search_2").unwrap().server, "zeta");
        assert_eq!(rev.route("web__search").unwrap().server, "alpha");
        assert_eq!(rev.route("web__search_2").unwrap().server, "zeta");
        // Listing follows the order given.
        assert_eq!(names(&fwd), ["web__search_2", "web__search"]);
        assert_eq!(fwd.collisions()[0].server, "zeta");
        assert_eq!(fwd.collisions()[0].reason, CollisionReason::Duplicate);
        assert_eq!(fwd.collisions_for("alpha").count(), 0);
        assert_eq!(fwd.collisions_for("zeta").count(), 1);
    }

    #[test]
    fn numbered_names_skip_taken_names_and_stay_in_budget() {
        let r = rules(16, 0);
        // `srv__abcdefghi_2` is a real tool; the duplicate of `abcdefghij` must
        // not steal it, and `_2` on a full-length name cuts its end.
        let t = tools(&["abcdefghi_2", "abcdefghij", "abcdefghij"]);
        let c = build(&[st("s", "srv", &t)], &r);
        check_invariants(&c, &r);
        assert_eq!(
            names(&c),
            ["srv__abcdefghi_2", "srv__abcdefghij", "srv__abcdefghi_3"]
        );
    }

    #[test]
    fn separator_inside_prefix_or_tool_still_routes() {
        let r = NamingRules::default();
        let a = tools(&["b__c"]);
        let b = tools(&["c"]);
        let c = build(&[st("one", "a", &a), st("two", "a__b", &b)], &r);
        assert_eq!(names(&c), ["a__b__c", "a__b__c_2"]);
        assert_eq!(
            c.route("a__b__c"),
            Some(&Route {
                server: "one".into(),
                tool: "b__c".into()
            })
        );
        assert_eq!(
            c.route("a__b__c_2"),
            Some(&Route {
                server: "two".into(),
                tool: "c".into()
            })
        );
    }

    #[test]
    fn builds_are_deterministic_and_order_independent() {
        let a = tools(&["x", "y.z", &"l".repeat(90), "dup", "dup"]);
        let b = tools(&["x", "q", "日本語"]);
        let d = tools(&["x"]);
        let r = rules(32, 4);
        let servers = [st("a", "p", &a), st("b", "p", &b), st("d", "dd", &d)];
        let one = build(&servers, &r);
        let two = build(&servers, &r);
        assert_eq!(names(&one), names(&two));
        let raws = |c: &Catalog| {
            c.tools()
                .iter()
                .map(|t| t.raw.get().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(raws(&one), raws(&two));
        assert_eq!(one.collisions(), two.collisions());
        assert_eq!(one.fingerprint(), two.fingerprint());
        check_invariants(&one, &r);

        let mut rev = servers;
        rev.reverse();
        let three = build(&rev, &r);
        let map = |c: &Catalog| {
            let mut v: Vec<_> = c
                .tools()
                .iter()
                .map(|t| (t.name.clone(), t.server.clone(), t.tool.clone()))
                .collect();
            v.sort();
            v
        };
        assert_eq!(map(&one), map(&three));
        assert_ne!(
            one.fingerprint(),
            three.fingerprint(),
            "order is part of the listing"
        );
    }

    #[test]
    fn adding_a_tool_elsewhere_renames_nothing() {
        let a = tools(&["read", "write", "a.b", &"w".repeat(80)]);
        let b1 = tools(&["read"]);
        let b2 = tools(&["read", "write", "a.b", "new"]);
        let r = NamingRules::default();
        let before = build(&[st("a", "a", &a), st("b", "b", &b1)], &r);
        let after = build(&[st("a", "a", &a), st("b", "b", &b2)], &r);
        assert_eq!(names(&before)[..4], names(&after)[..4]);
        assert_eq!(
            names(&after)[4..],
            [
                "b__read",
                "b__write",
                &format!("b__a_b_{}", short_hash("b", "a.b")),
                "b__new"
            ]
        );
    }

    #[test]
    fn raw_objects_keep_every_byte_but_the_name() {
        let text = r#"{"title":"T","name":"calc","inputSchema":{"type":"object","properties":{"n":{"default":12345678901234567890123,"multipleOf":1.10,"maximum":1e400}}},"annotations":{"z":1,"a":2},"x-extra":[1.0,-0.0]}"#;
        let t: Tool = serde_json::from_str(text).unwrap();
        let c = build(
            &[st("srv", "math", std::slice::from_ref(&t))],
            &NamingRules::default(),
        );
        assert_eq!(
            c.tools()[0].raw.get(),
            text.replace(r#""name":"calc""#, r#""name":"math__calc""#)
        );
        assert_eq!(c.tools()[0].tool, "calc");
        // Serialising a catalog entry's raw gives the same text.
        assert_eq!(
            serde_json::to_string(&c.tools()[0].raw).unwrap(),
            c.tools()[0].raw.get()
        );
    }

    #[test]
    fn unusable_raw_is_left_out() {
        // Only constructible by hand: a tool whose raw is not an object.
        let bad = Tool {
            name: "bad".into(),
            raw: RawValue::from_string("[1]".into()).unwrap(),
        };
        let good = tool("good");
        let c = build(&[st("s", "s", &[bad, good])], &NamingRules::default());
        assert_eq!(names(&c), ["s__good"]);
        assert_eq!(c.route("s__bad"), None);
    }

    #[test]
    fn find_original() {
        let a = tools(&["search", "only_a"]);
        let b = tools(&["search"]);
        let c = build(
            &[st("a", "a", &a), st("b", "b", &b)],
            &NamingRules::default(),
        );
        let hits: Vec<_> = c
            .find_original("search")
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(hits, ["a__search", "b__search"]);
        let only = c.find_original("only_a");
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].server, "a");
        assert!(c.find_original("a__search").is_empty());
    }

    #[test]
    fn pagination() {
        let t = tools(&["t1", "t2", "t3", "t4", "t5"]);
        let r = NamingRules::default();
        let c = build(&[st("s", "s", &t)], &r);
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut cursors = Vec::new();
        loop {
            let (page, next) = c.page(cursor.as_deref(), 2).unwrap();
            assert!(page.len() <= 2);
            seen.extend(page.iter().map(|t| t.name.clone()));
            match next {
                Some(n) => {
                    assert_eq!(n.len(), 32);
                    cursors.push(n.clone());
                    cursor = Some(n);
                }
                None => break,
            }
        }
        assert_eq!(seen, names(&c));
        assert_eq!(cursors.len(), 2);

        // The same input rebuilt (e.g. after a restart) accepts the cursors.
        let again = build(&[st("s", "s", &t)], &r);
        let (page, next) = again.page(Some(&cursors[0]), 2).unwrap();
        assert_eq!(
            page.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["s__t3", "s__t4"]
        );
        assert_eq!(next.as_ref(), Some(&cursors[1]));

        // A changed listing rejects them.
        let changed = build(
            &[st("s", "s", &tools(&["t1", "t2", "t3", "t4", "t5", "t6"]))],
            &r,
        );
        assert_eq!(
            changed.page(Some(&cursors[0]), 2).unwrap_err(),
            InvalidCursor::Stale
        );

        assert_eq!(
            c.page(Some("nope"), 2).unwrap_err(),
            InvalidCursor::Malformed
        );
        assert_eq!(
            c.page(Some(&"g".repeat(32)), 2).unwrap_err(),
            InvalidCursor::Malformed
        );
        assert_eq!(
            c.page(Some(&encode_cursor(c.fingerprint(), 6)), 2)
                .unwrap_err(),
            InvalidCursor::OutOfRange
        );
        let (page, next) = c.page(Some(&encode_cursor(c.fingerprint(), 5)), 2).unwrap();
        assert!(page.is_empty() && next.is_none());

        // No limit, and an empty cursor starts over.
        let (all, next) = c.page(None, 0).unwrap();
        assert_eq!(all.len(), 5);
        assert!(next.is_none());
        let (first, _) = c.page(Some(""), 3).unwrap();
        assert_eq!(first.len(), 3);
        let (rest, next) = c.page(Some(&encode_cursor(c.fingerprint(), 3)), 0).unwrap();
        assert_eq!(rest.len(), 2);
        assert!(next.is_none());

        // An empty catalog has one empty page.
        let empty = build(&[], &r);
        assert!(empty.is_empty());
        let (page, next) = empty.page(None, 10).unwrap();
        assert!(page.is_empty() && next.is_none());

        // Prompt cursors do not work on tools: the kind is in the fingerprint.
        let p = build_prompts(
            &[ServerPrompts {
                server: "s",
                prefix: "s",
                prompts: &[prompt("t1"), prompt("t2"), prompt("t3")],
            }],
            &r,
        );
        let (_, pc) = p.page(None, 1).unwrap();
        assert_eq!(c.page(pc.as_deref(), 1).unwrap_err(), InvalidCursor::Stale);
    }

    #[test]
    fn prompts_follow_the_same_rules() {
        let a = [
            prompt("summarize"),
            prompt("code review"),
            prompt("summarize"),
        ];
        let b = [prompt("summarize")];
        let r = NamingRules::default();
        let c = build_prompts(
            &[
                ServerPrompts {
                    server: "w",
                    prefix: "docs",
                    prompts: &a,
                },
                ServerPrompts {
                    server: "v",
                    prefix: "docs",
                    prompts: &b,
                },
            ],
            &r,
        );
        let n: Vec<_> = c.prompts().iter().map(|p| p.name.as_str()).collect();
        let review = format!("docs__code_review_{}", short_hash("w", "code review"));
        // v sorts before w, so v keeps `docs__summarize`.
        assert_eq!(
            n,
            [
                "docs__summarize_2",
                review.as_str(),
                "docs__summarize_3",
                "docs__summarize"
            ]
        );
        assert_eq!(
            c.route("docs__summarize"),
            Some(&Route {
                server: "v".into(),
                tool: "summarize".into()
            })
        );
        assert_eq!(c.prompts()[1].prompt, "code review");
        assert_eq!(
            c.prompts()[1].raw.get(),
            format!(r#"{{"name":"{review}","arguments":[]}}"#)
        );
        assert_eq!(c.find_original("summarize").len(), 3);
        assert_eq!(c.count_for("w"), 3);
        assert_eq!(c.items().len(), 4);
        assert_eq!(c.collisions().len(), 3);
        // Tools and prompts with the same names get the same names.
        let as_tools = tools(&["summarize", "code review", "summarize"]);
        let bt = tools(&["summarize"]);
        let tc = build(&[st("w", "docs", &as_tools), st("v", "docs", &bt)], &r);
        assert_eq!(names(&tc), n);
    }

    fn sr<'a>(
        server: &'a str,
        resources: &'a [Resource],
        templates: &'a [ResourceTemplate],
    ) -> ServerResources<'a> {
        ServerResources {
            server,
            resources,
            templates,
        }
    }

    fn route(server: &str, uri: &str) -> ResourceRoute {
        ResourceRoute {
            server: server.into(),
            uri: uri.into(),
        }
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn unique_uris_are_kept_and_shared_ones_wrapped_for_every_server() {
        let a = [
            resource("file:///a"),
            resource("file:///shared"),
            resource("file:///a"),
        ];
        let b = [resource("file:///shared"), resource("file:///b")];
        let c = build_resources(&[
            sr("zeta", &a, &[]),
            sr("alpha", &b, &[]),
            sr("idle", &[], &[]),
        ]);
        let uris: Vec<_> = c.resources().iter().map(|r| r.uri.as_str()).collect();
        // Config order, then each server's; a server's own duplicate is dropped.
        assert_eq!(
            uris,
            [
                "file:///a",
                "mcphost://zeta/file:///shared",
                "mcphost://alpha/file:///shared",
                "file:///b"
            ]
        );
        // Only the uri changes in the listed object.
        assert_eq!(
            c.resources()[1].raw.get(),
            r#"{"uri":"mcphost://zeta/file:///shared","name":"n"}"#
        );
        assert_eq!(
            c.resources()[0].raw.get(),
            r#"{"uri":"file:///a","name":"n"}"#
        );
        assert_eq!(c.resources()[1].original, "file:///shared");

        assert_eq!(c.resolve("file:///a", none), Ok(route("zeta", "file:///a")));
        assert_eq!(
            c.resolve("file:///b", none),
            Ok(route("alpha", "file:///b"))
        );
        for s in ["zeta", "alpha"] {
            assert_eq!(
                c.resolve(&format!("mcphost://{s}/file:///shared"), none),
                Ok(route(s, "file:///shared"))
            );
        }
        // The server's own URI is claimed by both: the error names the forms.
        let err = c.resolve("file:///shared", none).unwrap_err();
        assert_eq!(
            err,
            ResolveError::Ambiguous {
                uri: "file:///shared".into(),
                servers: vec!["zeta".into(), "alpha".into()]
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("mcphost://zeta/file:///shared")
                && msg.contains("mcphost://alpha/file:///shared"),
            "{msg}"
        );
        // Any configured server is reachable by the mcphost:// form, even one
        // listing nothing (a URI from its results); unknown servers are not.
        assert_eq!(
            c.resolve("mcphost://idle/x://y", none),
            Ok(route("idle", "x://y"))
        );
        assert_eq!(
            c.resolve("mcphost://nosuch/file:///a", none),
            Err(ResolveError::NotFound("mcphost://nosuch/file:///a".into()))
        );
        assert_eq!(
            c.resolve("file:///missing", none),
            Err(ResolveError::NotFound("file:///missing".into()))
        );
        // A remembered URI routes, unless a listing claims it first.
        assert_eq!(
            c.resolve("file:///missing", |_| Some("idle".into())),
            Ok(route("idle", "file:///missing"))
        );
        assert_eq!(
            c.resolve("file:///a", |_| Some("idle".into())),
            Ok(route("zeta", "file:///a"))
        );
        assert_eq!(
            c.resolve("file:///missing", |_| Some("removed".into())),
            Err(ResolveError::NotFound("file:///missing".into()))
        );

        let renamed: Vec<_> = c
            .renamed()
            .iter()
            .map(|r| (r.server.as_str(), r.reason, r.with.clone()))
            .collect();
        assert_eq!(
            renamed,
            [
                ("zeta", RenameReason::SameUri, vec!["alpha".to_owned()]),
                ("alpha", RenameReason::SameUri, vec!["zeta".to_owned()]),
            ]
        );
        assert_eq!(c.renamed_for("alpha").count(), 1);
        assert_eq!(c.count_for("zeta"), 2);
        assert_eq!(c.count_for("alpha"), 2);
        assert!(c.has_server("idle") && !c.has_server("nosuch"));
    }

    #[test]
    fn a_uri_another_server_s_template_produces_is_wrapped() {
        let a = [resource("db://users/1"), resource("note://x")];
        let ta = [template("note://{id}")];
        let tb = [template("db://users/{id}"), template("file:///{+path}")];
        let c = build_resources(&[sr("a", &a, &ta), sr("b", &[], &tb)]);
        let uris: Vec<_> = c.resources().iter().map(|r| r.uri.as_str()).collect();
        // a's own template producing its own URI is no conflict.
        assert_eq!(uris, ["mcphost://a/db://users/1", "note://x"]);
        assert_eq!(c.renamed()[0].reason, RenameReason::TemplateMatch);
        assert_eq!(c.renamed()[0].with, ["b"]);
        // Unique templates are kept.
        let ts: Vec<_> = c
            .templates()
            .iter()
            .map(|t| t.uri_template.as_str())
            .collect();
        assert_eq!(ts, ["note://{id}", "db://users/{id}", "file:///{+path}"]);

        // Template-generated URIs go to the one server whose template matches.
        assert_eq!(
            c.resolve("db://users/7", none),
            Ok(route("b", "db://users/7"))
        );
        assert_eq!(
            c.resolve("file:///etc/x", none),
            Ok(route("b", "file:///etc/x"))
        );
        assert_eq!(c.resolve("note://y", none), Ok(route("a", "note://y")));
        // The listed copy of a's is under its wrapped form; the plain URI is
        // claimed by a (listing) and b (template).
        assert_eq!(
            c.resolve("mcphost://a/db://users/1", none),
            Ok(route("a", "db://users/1"))
        );
        assert!(matches!(
            c.resolve("db://users/1", none),
            Err(ResolveError::Ambiguous { servers, .. }) if servers == ["a", "b"]
        ));
    }

    #[test]
    fn shared_templates_are_wrapped_and_their_uris_ambiguous() {
        let t = [template("demo://dynamic/{id}")];
        let tc = [template("demo://{kind}/{id}")];
        let c = build_resources(&[
            sr("one", &[], &t),
            sr("two", &[], &t),
            sr("three", &[], &tc),
        ]);
        let ts: Vec<_> = c
            .templates()
            .iter()
            .map(|t| t.uri_template.as_str())
            .collect();
        // Overlapping but different texts stay; identical ones are wrapped.
        assert_eq!(
            ts,
            [
                "mcphost://one/demo://dynamic/{id}",
                "mcphost://two/demo://dynamic/{id}",
                "demo://{kind}/{id}"
            ]
        );
        assert_eq!(
            c.templates()[1].raw.get(),
            r#"{"uriTemplate":"mcphost://two/demo://dynamic/{id}","name":"n"}"#
        );
        // An expansion of a wrapped template routes to its server.
        assert_eq!(
            c.resolve("mcphost://two/demo://dynamic/5", none),
            Ok(route("two", "demo://dynamic/5"))
        );
        assert!(matches!(
            c.resolve("demo://dynamic/5", none),
            Err(ResolveError::Ambiguous { servers, .. }) if servers == ["one", "two", "three"]
        ));
        assert_eq!(
            c.resolve("demo://other/5", none),
            Ok(route("three", "demo://other/5"))
        );

        // completion refs name templates.
        assert_eq!(
            c.resolve_template("mcphost://one/demo://dynamic/{id}", none),
            Ok(route("one", "demo://dynamic/{id}"))
        );
        assert_eq!(
            c.resolve_template("demo://{kind}/{id}", none),
            Ok(route("three", "demo://{kind}/{id}"))
        );
        assert!(matches!(
            c.resolve_template("demo://dynamic/{id}", none),
            Err(ResolveError::Ambiguous { servers, .. }) if servers == ["one", "two"]
        ));
        // A concrete URI as a ref resolves as a resource.
        assert_eq!(
            c.resolve_template("demo://x/1", none),
            Ok(route("three", "demo://x/1"))
        );
    }

    #[test]
    fn own_mcphost_uris_are_always_wrapped() {
        let a = [resource("mcphost://b/x"), resource("MCPHOST:thing")];
        let ta = [template("mcphost://{server}/{+rest}")];
        let c = build_resources(&[sr("a", &a, &ta), sr("b", &[], &[])]);
        let uris: Vec<_> = c.resources().iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(
            uris,
            ["mcphost://a/mcphost://b/x", "mcphost://a/MCPHOST:thing"]
        );
        assert_eq!(
            c.templates()[0].uri_template,
            "mcphost://a/mcphost://{server}/{+rest}"
        );
        assert!(
            c.renamed()
                .iter()
                .all(|r| r.reason == RenameReason::ReservedScheme)
        );
        // Unwrapping one level gives a's own URI back; the plain one is ours.
        assert_eq!(
            c.resolve("mcphost://a/mcphost://b/x", none),
            Ok(route("a", "mcphost://b/x"))
        );
        assert_eq!(c.resolve("mcphost://b/x", none), Ok(route("b", "x")));
        assert_eq!(
            c.expose("a", "mcphost://b/x"),
            Exposed::Wrapped("mcphost://a/mcphost://b/x".into())
        );
    }

    #[test]
    fn odd_server_names_are_percent_encoded() {
        let r = [resource("u://same")];
        let c = build_resources(&[sr("my server/1", &r, &[]), sr("b", &r, &[])]);
        assert_eq!(c.resources()[0].uri, "mcphost://my%20server%2F1/u://same");
        assert_eq!(
            c.resolve("mcphost://my%20server%2F1/u://same", none),
            Ok(route("my server/1", "u://same"))
        );
    }

    #[test]
    fn result_uris_are_exposed_so_they_route_back() {
        let a = [resource("file:///shared"), resource("file:///mine")];
        let b = [resource("file:///shared")];
        let tb = [template("db://{t}")];
        let ta = [template("a://{x}")];
        let c = build_resources(&[sr("a", &a, &ta), sr("b", &b, &tb)]);
        // Listed: its listing's form.
        assert_eq!(c.expose("a", "file:///mine"), Exposed::Kept);
        assert_eq!(
            c.expose("a", "file:///shared"),
            Exposed::Wrapped("mcphost://a/file:///shared".into())
        );
        // Unlisted but claimed by another server: wrapped.
        assert_eq!(
            c.expose("a", "db://t1"),
            Exposed::Wrapped("mcphost://a/db://t1".into())
        );
        assert_eq!(
            c.expose("b", "file:///mine"),
            Exposed::Wrapped("mcphost://b/file:///mine".into())
        );
        // Produced by its own template only: routes back as it is.
        assert_eq!(c.expose("a", "a://1"), Exposed::Kept);
        assert_eq!(c.resolve("a://1", none), Ok(route("a", "a://1")));
        // Nobody's: kept, for the caller to remember.
        assert_eq!(c.expose("b", "urn:x"), Exposed::Unclaimed);
        // Every exposed form resolves back to (server, own URI).
        for (server, own) in [
            ("a", "file:///shared"),
            ("a", "db://t1"),
            ("b", "file:///mine"),
            ("b", "file:///shared"),
        ] {
            let Exposed::Wrapped(w) = c.expose(server, own) else {
                panic!("{server} {own}")
            };
            assert_eq!(c.resolve(&w, none), Ok(route(server, own)));
        }
    }

    #[test]
    fn resource_pages_and_fingerprints() {
        let a = [resource("x://1"), resource("x://2"), resource("x://3")];
        let t = [template("t://{a}"), template("u://{a}")];
        let one = build_resources(&[sr("s", &a, &t), sr("idle", &[], &[])]);
        let (p1, next) = one.page(None, 2).unwrap();
        assert_eq!(p1.len(), 2);
        let (p2, end) = one.page(next.as_deref(), 2).unwrap();
        assert_eq!(p2.len(), 1);
        assert!(end.is_none());
        assert_eq!(
            one.page_templates(next.as_deref(), 2).unwrap_err(),
            InvalidCursor::Stale
        );
        let (tp, tnext) = one.page_templates(None, 1).unwrap();
        assert_eq!(tp.len(), 1);
        // Rebuilt from the same lists (a restart): the cursors still work.
        let again = build_resources(&[sr("s", &a, &t), sr("idle", &[], &[])]);
        assert_eq!(again.page(next.as_deref(), 2).unwrap().0.len(), 1);
        assert_eq!(
            again.page_templates(tnext.as_deref(), 1).unwrap().0.len(),
            1
        );
        // A URI that becomes wrapped changes the listing: stale.
        let b = [resource("x://3")];
        let other = build_resources(&[sr("s", &a, &t), sr("idle", &b, &[])]);
        assert_eq!(
            other.page(next.as_deref(), 2).unwrap_err(),
            InvalidCursor::Stale
        );
    }

    #[test]
    fn annotated_listing_names_servers_and_own_uris() {
        let r = [resource("u://same")];
        let t = [template("t://{a}")];
        let c = build_resources(&[sr("a", &r, &t), sr("b", &r, &[])]);
        let v: serde_json::Value = serde_json::from_str(c.annotated().unwrap().get()).unwrap();
        assert_eq!(v["resources"][1]["uri"], "mcphost://b/u://same");
        assert_eq!(v["resources"][1]["server"], "b");
        assert_eq!(v["resources"][1]["serverUri"], "u://same");
        assert_eq!(v["resourceTemplates"][0]["uriTemplate"], "t://{a}");
        assert_eq!(v["resourceTemplates"][0]["serverUriTemplate"], "t://{a}");
        assert_eq!(v["resourceTemplates"][0]["server"], "a");
        let json = serde_json::to_value(&c.renamed()[0]).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "resource", "server": "a", "uri": "u://same",
                "exposed": "mcphost://a/u://same", "reason": "sameUri", "with": ["b"]})
        );
    }

    /// A small deterministic generator, so the sweep needs no extra crate.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n
        }
    }

    fn listing(c: &Catalog) -> Vec<(String, String, String, String)> {
        c.tools()
            .iter()
            .map(|t| {
                let r = c.route(&t.name).unwrap();
                assert_eq!((&r.server, &r.tool), (&t.server, &t.tool));
                (
                    t.name.clone(),
                    t.server.clone(),
                    t.tool.clone(),
                    t.raw.get().to_owned(),
                )
            })
            .collect()
    }

    /// Incremental publishing equals a full build, and the full build equals
    /// the one-pass naming algorithm, for random per-server changes.
    #[test]
    fn incremental_publish_equals_full_build() {
        const NAMES: &[&str] = &[
            "x",
            "y",
            "x_2",
            "a.b",
            "a_b",
            "t",
            "__x",
            "long_name_here_0123456789",
        ];
        let servers = ["s0", "s1", "s2", "s3", "s4"];
        // s0 and s1 share a prefix, so their tools really collide.
        let prefixes = ["a", "a", "b", "a_", "c"];
        let mut rng = Lcg(11);
        for round in 0..40 {
            let r = rules([16, 24, 64][round % 3], 0);
            let mut lists: Vec<Vec<Tool>> = vec![Vec::new(); servers.len()];
            let mut b = CatalogBuilder::<CatalogTool>::new("tools", r.clone());
            for (s, p) in servers.iter().zip(prefixes) {
                b.push_server(s, p, tool_items(&[]));
            }
            for _ in 0..25 {
                let i = rng.next(servers.len());
                let n = rng.next(5);
                lists[i] = (0..n).map(|_| tool(NAMES[rng.next(NAMES.len())])).collect();
                assert!(b.update(servers[i], prefixes[i], tool_items(&lists[i])));
                let inc = b.publish();
                let input: Vec<ServerTools<'_>> = servers
                    .iter()
                    .zip(prefixes)
                    .zip(&lists)
                    .map(|((s, p), t)| st(s, p, t))
                    .collect();
                let full = build(&input, &r);
                assert_eq!(listing(&inc), listing(&full), "round {round}");
                assert_eq!(inc.collisions(), full.collisions());
                assert_eq!(inc.fingerprint(), full.fingerprint());
                check_invariants(&inc, &r);
                // The one-pass algorithm the builder replaced.
                let names_in: Vec<ServerNames<'_>> = input
                    .iter()
                    .map(|s| ServerNames {
                        server: s.server,
                        prefix: s.prefix,
                        names: s.tools.iter().map(|t| t.name.as_str()).collect(),
                    })
                    .collect();
                let oracle: Vec<String> = namespace(&names_in, &r)
                    .into_iter()
                    .map(|n| n.name)
                    .collect();
                assert_eq!(names(&inc), oracle, "round {round}");
            }
        }
    }

    #[test]
    fn a_change_in_one_server_makes_and_undoes_a_collision_with_another() {
        let r = NamingRules::default();
        let mut b = CatalogBuilder::<CatalogTool>::new("tools", r.clone());
        let a_tools = tools(&["run"]);
        let z_tools = tools(&["run", "stop"]);
        // "zeta" sorts after "alpha": alpha keeps the name once both claim it.
        b.push_server("zeta", "x", tool_items(&z_tools));
        b.push_server("alpha", "x", tool_items(&[]));
        let first = b.publish();
        assert_eq!(names(&first), ["x__run", "x__stop"]);
        assert!(b.update("alpha", "x", tool_items(&a_tools)));
        let clash = b.publish();
        assert_eq!(names(&clash), ["x__run_2", "x__stop", "x__run"]);
        assert_eq!(clash.route("x__run").unwrap().server, "alpha");
        assert_eq!(clash.route("x__run_2").unwrap().server, "zeta");
        assert_eq!(clash.collisions()[0].reason, CollisionReason::Duplicate);
        assert_ne!(clash.fingerprint(), first.fingerprint());
        // Only zeta's renamed entry is new; its other entry is shared.
        assert!(Arc::ptr_eq(&first.tools()[1], &clash.tools()[1]));
        assert!(b.update("alpha", "x", tool_items(&[])));
        let undone = b.publish();
        assert_eq!(names(&undone), ["x__run", "x__stop"]);
        assert_eq!(undone.route("x__run").unwrap().server, "zeta");
        assert_eq!(undone.route("x__run_2"), None);
        assert!(undone.collisions().is_empty());
        assert_eq!(undone.fingerprint(), first.fingerprint());
        assert!(!b.update("nosuch", "x", tool_items(&[])));
    }

    #[test]
    fn sweep_invariants_hold() {
        const ALPHABET: &[&str] = &["a", "b", "_", "-", ".", " ", "é", "日", "/", "__", "Z", "9"];
        let mut rng = Lcg(7);
        for round in 0..60 {
            let r = NamingRules {
                separator: ["__", "-", "_"][round % 3].into(),
                max_length: [12, 16, 24, 64][round % 4],
                reserve: [0, 3][round % 2],
            };
            let mut per_server = Vec::new();
            for _ in 0..4 {
                let n = rng.next(12);
                let ts: Vec<Tool> = (0..n)
                    .map(|_| {
                        let len = [0, 1, 3, 8, 40, 90][rng.next(6)];
                        let s: String = (0..len)
                            .map(|_| ALPHABET[rng.next(ALPHABET.len())])
                            .collect();
                        tool(&s)
                    })
                    .collect();
                per_server.push(ts);
            }
            let prefixes = ["a", "a", "b.c", &"p".repeat(30)];
            let servers: Vec<ServerTools<'_>> = per_server
                .iter()
                .enumerate()
                .map(|(i, ts)| ServerTools {
                    server: ["s0", "s1", "s2", "s3"][i],
                    prefix: prefixes[i],
                    tools: ts,
                })
                .collect();
            let c = build(&servers, &r);
            check_invariants(&c, &r);
            assert_eq!(c.len(), per_server.iter().map(Vec::len).sum::<usize>());
            let mut rev = servers.clone();
            rev.reverse();
            let mut x: Vec<_> = c
                .tools()
                .iter()
                .map(|t| (&t.name, &t.server, &t.tool))
                .collect();
            let d = build(&rev, &r);
            let mut y: Vec<_> = d
                .tools()
                .iter()
                .map(|t| (&t.name, &t.server, &t.tool))
                .collect();
            x.sort();
            y.sort();
            assert_eq!(x, y, "round {round}");
        }
    }
}
