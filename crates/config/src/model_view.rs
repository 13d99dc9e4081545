//! What a model is shown, as the config and `mcphost/session/configure`
//! give it: the token encoding, named profiles and one session's options
//! (budgets, allow lists, search mode, schema profile). The runtime that
//! applies them is the `mcphost-model-view` crate.

use std::collections::BTreeMap;

use globset::Glob;
use serde_json::{Value, json};

/// A tiktoken encoding, as named in the config's `tokens.encoding`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, o-series, GPT-5: the default.
    #[default]
    O200kBase,
    /// GPT-4, GPT-3.5.
    Cl100kBase,
    P50kBase,
    R50kBase,
}

impl Encoding {
    pub const ALL: [Encoding; 4] = [
        Encoding::O200kBase,
        Encoding::Cl100kBase,
        Encoding::P50kBase,
        Encoding::R50kBase,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
            Encoding::P50kBase => "p50k_base",
            Encoding::R50kBase => "r50k_base",
        }
    }
}

impl std::str::FromStr for Encoding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Encoding::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = Encoding::ALL.iter().map(|e| e.as_str()).collect();
                format!("unknown encoding {s:?}; known: {}", known.join(", "))
            })
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A model provider's rules for tool input schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaProfile {
    OpenAi,
    Gemini,
    Anthropic,
}

impl SchemaProfile {
    pub const ALL: [SchemaProfile; 3] = [
        SchemaProfile::OpenAi,
        SchemaProfile::Gemini,
        SchemaProfile::Anthropic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SchemaProfile::OpenAi => "openai",
            SchemaProfile::Gemini => "gemini",
            SchemaProfile::Anthropic => "anthropic",
        }
    }
}

impl std::str::FromStr for SchemaProfile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SchemaProfile::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = SchemaProfile::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown schema profile {s:?}; known: {}", known.join(", "))
            })
    }
}

/// The config's `tokens` and `profiles`.
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
    /// At most this many tokens (counted by `registry::cost`) in `tools/list`.
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
