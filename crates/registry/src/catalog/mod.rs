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
//!
//! Files: `names.rs` (rules 1–4 on one item), `builder.rs` (rule 5 and the
//! incremental [`CatalogBuilder`]), `resources.rs` (the resource catalog and
//! its incremental [`ResourceBuilder`]); this file holds the listed types
//! and pagination.

mod builder;
mod names;
mod resources;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use rpds::HashTrieMapSync;
use sha2::{Digest, Sha256};

pub use builder::{CatalogBuilder, build, build_prompts, prompt_items, tool_items};
use mcphost_protocol::{Prompt, RawValue, Tool, set_fields, to_raw};
pub use resources::{
    CatalogResource, CatalogTemplate, Exposed, RenameReason, ResolveError, ResourceBuilder,
    ResourceCatalog, ResourceKind, ResourceRenamed, ResourceRoute, ServerResources,
    build_resources,
};

pub const HASH_LEN: usize = 6;
/// `_` plus the hash.
const HASH_SUFFIX_LEN: usize = HASH_LEN + 1;
use mcphost_config::naming::is_name_char as is_allowed;
pub use mcphost_config::naming::{MIN_BUDGET, NamingError, NamingRules};

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
    /// Its token cost, counted on first use (see [`crate::cost`]).
    pub cost: crate::cost::TokenCache,
}

impl CatalogTool {
    /// Tokens of its name, description and schema in `enc`; `None` in a
    /// build without the feature `tokens`.
    pub fn tokens(&self, enc: crate::cost::Encoding) -> Option<u32> {
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
pub trait CatalogEntry {
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

impl CatalogEntry for CatalogTool {
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

impl CatalogEntry for CatalogPrompt {
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

impl<E: CatalogEntry> NamespacedCatalog<E> {
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
    pub fn annotated(&self) -> Result<Box<RawValue>, mcphost_protocol::RawError> {
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
        RawValue::from_string(out).map_err(mcphost_protocol::RawError::Encode)
    }
}

pub(super) fn first_u64(digest: &[u8]) -> u64 {
    let mut first = [0u8; 8];
    for (dst, src) in first.iter_mut().zip(digest.iter()) {
        *dst = *src;
    }
    u64::from_be_bytes(first)
}

/// A 64-bit digest of a listing: its kind, then each entry's fields, every
/// string length-prefixed so no two listings encode alike.
pub(super) fn fingerprint<'a, const N: usize>(
    kind: &str,
    rows: impl Iterator<Item = [&'a str; N]>,
) -> u64 {
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

pub(super) fn encode_cursor(fingerprint: u64, offset: usize) -> String {
    format!("{fingerprint:016x}{:016x}", offset as u64)
}

pub(super) fn decode_cursor(cursor: &str) -> Result<(u64, usize), InvalidCursor> {
    if cursor.len() != 32 || !cursor.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(InvalidCursor::Malformed);
    }
    let (fp, off) = cursor.split_at(16);
    let fp = u64::from_str_radix(fp, 16).map_err(|_| InvalidCursor::Malformed)?;
    let off = u64::from_str_radix(off, 16).map_err(|_| InvalidCursor::Malformed)?;
    let off = usize::try_from(off).map_err(|_| InvalidCursor::OutOfRange)?;
    Ok((fp, off))
}

pub(super) fn paginate<'a, T>(
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
