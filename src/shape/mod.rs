//! What a model is shown of the catalog, per session: token costs
//! ([`cost`]), budgets and allow lists, search mode ([`search`]) and
//! provider schema profiles ([`schema`]).
//!
//! A session with no options set never reaches this module: its
//! `tools/list` is the catalog's page as is, and its calls are routed
//! without a look here. Options come from `mcphost/session/configure` or a
//! named profile in the config (`profiles`); see docs/ipc.md.

pub mod cost;
pub mod schema;
pub mod search;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::{Value, json};

use crate::registry::catalog::{Catalog, CatalogTool};
pub use cost::Encoding;
pub use schema::SchemaProfile;

/// The config's settings for this module (`tokens`, `profiles`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// `tokens.encoding`: what costs are counted in.
    pub encoding: Encoding,
    /// `profiles`: named option sets a session selects with `profile`.
    pub profiles: BTreeMap<String, Options>,
}

/// `tools/list` as every tool, or as the three meta-tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolMode {
    #[default]
    All,
    Search,
}

/// One session's options. Every field unset is the default session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    pub tool_mode: ToolMode,
    /// At most this many tools in `tools/list`.
    pub max_tools: Option<usize>,
    /// At most this many tokens (of [`cost`]) in `tools/list`.
    pub max_tokens: Option<u64>,
    /// Only these servers' tools (config names).
    pub servers: Option<Vec<String>>,
    /// Only tools matching one of these globs (on the namespaced name or
    /// the server's own name); the pattern order is the listing priority.
    pub tools: Option<Vec<String>>,
    pub schema_profile: Option<SchemaProfile>,
}

const OPTION_KEYS: &[&str] = &[
    "toolMode",
    "maxTools",
    "maxTokens",
    "servers",
    "tools",
    "schemaProfile",
];

impl Options {
    /// Whether nothing is set (the session is served as if unconfigured).
    pub fn is_default(&self) -> bool {
        *self == Options::default()
    }

    /// Read options from a JSON object; `field` names it in errors
    /// (`profiles.cursor`, `params`). `profile` is not read here.
    pub fn from_json(v: &Value, field: &str) -> Result<Options, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("{field}: must be an object"))?;
        let mut o = Options::default();
        for (k, v) in obj {
            let f = format!("{field}.{k}");
            match k.as_str() {
                "profile" => {}
                "toolMode" => {
                    o.tool_mode = match v.as_str() {
                        Some("all") => ToolMode::All,
                        Some("search") => ToolMode::Search,
                        _ => return Err(format!("{f}: must be \"all\" or \"search\"")),
                    }
                }
                "maxTools" => o.max_tools = Some(uint(v, &f)?),
                "maxTokens" => o.max_tokens = Some(uint(v, &f)? as u64),
                "servers" => o.servers = Some(strings(v, &f)?),
                "tools" => {
                    let pats = strings(v, &f)?;
                    for (i, p) in pats.iter().enumerate() {
                        Glob::new(p).map_err(|e| format!("{f}[{i}]: bad glob: {e}"))?;
                    }
                    o.tools = Some(pats);
                }
                "schemaProfile" => {
                    let name = v.as_str().ok_or_else(|| format!("{f}: must be a string"))?;
                    o.schema_profile = Some(name.parse().map_err(|e| format!("{f}: {e}"))?);
                }
                other => {
                    return Err(format!(
                        "{field}: unknown option {other:?}; known: profile, {}",
                        OPTION_KEYS.join(", ")
                    ));
                }
            }
        }
        Ok(o)
    }

    /// `params` of `mcphost/session/configure`: a `profile` from
    /// `settings`, then the fields given, which override the profile's.
    pub fn configure(
        params: &Value,
        settings: &Settings,
    ) -> Result<(Options, Option<String>), String> {
        let profile = match params.get("profile") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) => Some(name.clone()),
            Some(_) => return Err("params.profile: must be a string".to_owned()),
        };
        let mut base = match &profile {
            None => Options::default(),
            Some(name) => settings.profiles.get(name).cloned().ok_or_else(|| {
                let known: Vec<&str> = settings.profiles.keys().map(String::as_str).collect();
                format!(
                    "params.profile: no profile {name:?} in the config (profiles: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                )
            })?,
        };
        let given = Options::from_json(params, "params")?;
        let obj = params
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>());
        for k in obj.unwrap_or_default() {
            match k.as_str() {
                "toolMode" => base.tool_mode = given.tool_mode,
                "maxTools" => base.max_tools = given.max_tools,
                "maxTokens" => base.max_tokens = given.max_tokens,
                "servers" => base.servers = given.servers.clone(),
                "tools" => base.tools = given.tools.clone(),
                "schemaProfile" => base.schema_profile = given.schema_profile,
                _ => {}
            }
        }
        Ok((base, profile))
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({ "toolMode": match self.tool_mode {
            ToolMode::All => "all",
            ToolMode::Search => "search",
        }});
        if let Some(n) = self.max_tools {
            v["maxTools"] = json!(n);
        }
        if let Some(n) = self.max_tokens {
            v["maxTokens"] = json!(n);
        }
        if let Some(s) = &self.servers {
            v["servers"] = json!(s);
        }
        if let Some(t) = &self.tools {
            v["tools"] = json!(t);
        }
        if let Some(p) = self.schema_profile {
            v["schemaProfile"] = json!(p.as_str());
        }
        v
    }
}

fn uint(v: &Value, field: &str) -> Result<usize, String> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| format!("{field}: must be a non-negative integer"))
}

fn strings(v: &Value, field: &str) -> Result<Vec<String>, String> {
    let arr = v
        .as_array()
        .ok_or_else(|| format!("{field}: must be an array of strings"))?;
    arr.iter()
        .enumerate()
        .map(|(i, s)| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{field}[{i}]: must be a string"))
        })
        .collect()
}

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
    warned: Mutex<Option<Cut>>,
}

/// Why tools were left out of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cut {
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

impl Cut {
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
    ) -> (Vec<&'c Arc<CatalogTool>>, Cut) {
        let allowed = self.allowed(catalog);
        let mut cut = Cut {
            not_allowed: catalog.len().saturating_sub(allowed.len()),
            ..Cut::default()
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
    pub fn should_warn(&self, cut: &Cut) -> bool {
        let mut last = self.warned.lock().unwrap_or_else(|p| p.into_inner());
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
        let mut slot = self.index.lock().unwrap_or_else(|p| p.into_inner());
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
