//! What a model is shown of the catalog, per session: budgets (counted in
//! the catalog's token costs, `registry::cost`) and allow lists, search mode
//! ([`search`]) and provider schema profiles ([`schema`]). The options
//! themselves are config model types (`config::model_view`).
//!
//! A session with no options set never reaches this module: its
//! `tools/list` is the catalog's page as is, and its calls are routed
//! without a look here. Options come from `mcphost/session/configure` or a
//! named profile in the config (`profiles`); see docs/ipc.md.

// No production function over 100 lines of code (docs/architecture.md).
#![warn(clippy::too_many_lines)]

pub mod schema;
pub mod search;

use parking_lot::Mutex;
use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::{Value, json};

pub use mcphost_config::model_view::{Encoding, Options, SchemaProfile, Settings, ToolMode};
use mcphost_registry::catalog::{Catalog, CatalogTool};

/// A session's options, compiled: what its `tools/list` and `tools/call`
/// consult. Held by the session behind a pointer that is empty when
/// nothing is configured.
#[derive(Debug)]
pub struct View {
    pub options: Options,
    /// The profile it came from, if any.
    pub profile: Option<String>,
    /// One glob per `tools` pattern, in priority order.
    patterns: Vec<GlobSet>,
    /// The search index of the catalog it was last built for.
    index: Mutex<Option<(u64, Arc<search::Index>)>>,
    /// The cut last warned about, so a listing warns again only when it
    /// changes.
    warned: Mutex<Option<ListingCut>>,
}

/// Why tools were left out of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListingCut {
    /// Listed.
    pub listed: usize,
    /// Not on the `servers` / `tools` allow lists.
    pub not_allowed: usize,
    /// Past `maxTools`.
    pub over_max_tools: usize,
    /// Past `maxTokens`.
    pub over_max_tokens: usize,
    /// Tokens of the listed tools (`None` in a build without `tokens`).
    pub tokens: Option<u64>,
}

impl ListingCut {
    /// Tools the budget cut (allow lists are a choice, not a cut).
    pub fn cut(&self) -> usize {
        self.over_max_tools.saturating_add(self.over_max_tokens)
    }

    /// The warning a session gets when its budget cut tools.
    pub fn warning(&self, options: &Options) -> Option<String> {
        if self.cut() == 0 {
            return None;
        }
        let mut why = Vec::new();
        if self.over_max_tools > 0 {
            why.push(format!(
                "{} over maxTools {}",
                self.over_max_tools,
                options.max_tools.unwrap_or_default()
            ));
        }
        if self.over_max_tokens > 0 {
            why.push(format!(
                "{} over maxTokens {}",
                self.over_max_tokens,
                options.max_tokens.unwrap_or_default()
            ));
        }
        Some(format!(
            "mcphost: {} tool(s) cut from tools/list by this session's budget ({}); {} listed. \
             Raise the budget, narrow the allow lists, or use toolMode \"search\".",
            self.cut(),
            why.join(", "),
            self.listed
        ))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "listed": self.listed,
            "cut": self.cut(),
            "notAllowed": self.not_allowed,
            "overMaxTools": self.over_max_tools,
            "overMaxTokens": self.over_max_tokens,
            "tokens": self.tokens,
        })
    }
}

impl View {
    /// `None` when the options are the defaults: such a session keeps the
    /// plain path.
    pub fn new(options: Options, profile: Option<String>) -> Result<Option<View>, String> {
        if options.is_default() {
            return Ok(None);
        }
        let mut patterns = Vec::new();
        for (i, p) in options.tools.iter().flatten().enumerate() {
            let g = Glob::new(p).map_err(|e| format!("tools[{i}]: bad glob: {e}"))?;
            let set = GlobSetBuilder::new()
                .add(g)
                .build()
                .map_err(|e| format!("tools[{i}]: bad glob: {e}"))?;
            patterns.push(set);
        }
        Ok(Some(View {
            options,
            profile,
            patterns,
            index: Mutex::new(None),
            warned: Mutex::new(None),
        }))
    }

    pub fn search_mode(&self) -> bool {
        self.options.tool_mode == ToolMode::Search
    }

    /// The priority of a tool under the allow lists: `None` when it is not
    /// allowed, else the index of the first `tools` pattern it matches
    /// (on its namespaced `name` or the server's own name `tool`).
    fn priority(&self, name: &str, server: &str, tool: &str) -> Option<usize> {
        if let Some(servers) = &self.options.servers
            && !servers.iter().any(|s| s == server)
        {
            return None;
        }
        if self.options.tools.is_none() {
            return Some(0);
        }
        self.patterns
            .iter()
            .position(|g| g.is_match(name) || g.is_match(tool))
    }

    /// Whether a call of the namespaced `name` is within the allow lists
    /// (budget cuts do not forbid calls: they only keep tools out of sight).
    pub fn allows(&self, catalog: &Catalog, name: &str) -> bool {
        if self.options.servers.is_none() && self.options.tools.is_none() {
            return true;
        }
        catalog
            .route(name)
            .is_some_and(|r| self.priority(name, &r.server, &r.tool).is_some())
    }

    /// The tools this session may see, in listing order, before budgets:
    /// by the first `tools` pattern they match, then catalog order.
    pub fn allowed<'c>(&self, catalog: &'c Catalog) -> Vec<&'c Arc<CatalogTool>> {
        let mut v: Vec<(usize, usize, &Arc<CatalogTool>)> = catalog
            .tools()
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                self.priority(&t.name, &t.server, &t.tool)
                    .map(|p| (p, i, t))
            })
            .collect();
        v.sort_by_key(|(p, i, _)| (*p, *i));
        v.into_iter().map(|(_, _, t)| t).collect()
    }

    /// The listing of a session not in search mode: the allowed tools in
    /// order, cut to `maxTools`, then to the longest prefix within
    /// `maxTokens`.
    pub fn list<'c>(
        &self,
        catalog: &'c Catalog,
        enc: Encoding,
    ) -> (Vec<&'c Arc<CatalogTool>>, ListingCut) {
        let allowed = self.allowed(catalog);
        let mut cut = ListingCut {
            not_allowed: catalog.len().saturating_sub(allowed.len()),
            ..ListingCut::default()
        };
        let mut out = allowed;
        if let Some(max) = self.options.max_tools
            && out.len() > max
        {
            cut.over_max_tools = out.len().saturating_sub(max);
            out.truncate(max);
        }
        let mut total: Option<u64> = Some(0);
        let mut keep = out.len();
        for (i, t) in out.iter().enumerate() {
            let n = t.tokens(enc).map(u64::from);
            let next = match (total, n) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            };
            if let (Some(max), Some(next)) = (self.options.max_tokens, next)
                && next > max
            {
                keep = i;
                break;
            }
            total = next;
        }
        cut.over_max_tokens = out.len().saturating_sub(keep);
        out.truncate(keep);
        cut.listed = out.len();
        cut.tokens = total;
        (out, cut)
    }

    /// Whether `cut` differs from the last one warned about; records it.
    pub fn should_warn(&self, cut: &ListingCut) -> bool {
        let mut last = self.warned.lock();
        if cut.cut() == 0 || last.as_ref() == Some(cut) {
            *last = Some(cut.clone());
            return false;
        }
        *last = Some(cut.clone());
        true
    }

    /// The search index over the allowed tools of `catalog`, built once
    /// per catalog (by its fingerprint).
    pub fn index(&self, catalog: &Catalog) -> Arc<search::Index> {
        let mut slot = self.index.lock();
        if let Some((fp, idx)) = &*slot
            && *fp == catalog.fingerprint()
        {
            return idx.clone();
        }
        let tools: Vec<Arc<CatalogTool>> = self.allowed(catalog).into_iter().cloned().collect();
        let idx = Arc::new(search::Index::new(tools));
        *slot = Some((catalog.fingerprint(), idx.clone()));
        idx
    }
}
