//! Search mode: `search_tools`, `describe_tool` and `call_tool` instead of
//! every tool, ranked with BM25 (the `bm25` crate) over each tool's name,
//! description and input-schema property names and descriptions.
//!
//! Tokens: words split on anything not a letter or digit and at
//! camelCase humps (`read_text_file`, `readTextFile` → read, text, file),
//! lowercased, English stop words dropped, Snowball-stemmed (`files`,
//! `filing` → file), and a few synonyms folded together (folder and
//! directory, remove and delete: `SYNONYMS`). Field weights by repetition: the tool's own name
//! counts three times, property names twice, the server name, the
//! description and property descriptions once. Ties keep catalog order.

use std::sync::{Arc, OnceLock};

use bm25::{Document, SearchEngine, SearchEngineBuilder, Tokenizer};
use rust_stemmers::{Algorithm, Stemmer};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use mcphost_registry::catalog::CatalogTool;

/// Names of the meta-tools.
pub const SEARCH_TOOLS: &str = "search_tools";
pub const DESCRIBE_TOOL: &str = "describe_tool";
pub const CALL_TOOL: &str = "call_tool";

/// `search_tools`'s `limit` when none is given, and its maximum.
pub const DEFAULT_LIMIT: usize = 5;
pub const MAX_LIMIT: usize = 50;

const NAME_WEIGHT: usize = 3;
const PROPERTY_WEIGHT: usize = 2;

/// The three meta-tools, as `tools/list` lists them in search mode.
pub fn meta_tools() -> &'static [Box<RawValue>] {
    static TOOLS: OnceLock<Vec<Box<RawValue>>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        [
            json!({
                "name": SEARCH_TOOLS,
                "description": "Search the available tools by what they do. Returns the best matches (name and description), best first. Then call describe_tool for a tool's input schema, and call_tool to run it.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "What you want to do, in plain words"},
                        "limit": {"type": "integer", "description": "How many results (default 5, at most 50)", "minimum": 1, "maximum": MAX_LIMIT}
                    },
                    "required": ["query"]
                },
                "annotations": {"readOnlyHint": true}
            }),
            json!({
                "name": DESCRIBE_TOOL,
                "description": "The full definition of one tool found with search_tools: its description and input schema.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"name": {"type": "string", "description": "The tool's name as search_tools gave it"}},
                    "required": ["name"]
                },
                "annotations": {"readOnlyHint": true}
            }),
            json!({
                "name": CALL_TOOL,
                "description": "Run a tool found with search_tools, with arguments that match its input schema (see describe_tool).",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "The tool's name"},
                        "arguments": {"type": "object", "description": "The tool's arguments"}
                    },
                    "required": ["name"]
                }
            }),
        ]
        .iter()
        .filter_map(|v| serde_json::value::to_raw_value(v).ok())
        .collect()
    })
}

struct Words;

fn stemmer() -> &'static Stemmer {
    static S: OnceLock<Stemmer> = OnceLock::new();
    S.get_or_init(|| Stemmer::create(Algorithm::English))
}

const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how",
    "i", "if", "in", "is", "it", "its", "me", "my", "of", "on", "or", "please", "should", "so",
    "some", "that", "the", "this", "to", "use", "want", "what", "when", "which", "with", "you",
    "your", "will", "would", "into", "there", "their", "them", "then", "than", "we", "our",
];

/// The words of `text`, split as the module docs say, before stemming.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for chunk in text.split(|c: char| !c.is_alphanumeric()) {
        let mut cur = String::new();
        let mut prev: Option<char> = None;
        for c in chunk.chars() {
            // A hump: lower→Upper, or a letter↔digit change.
            let hump = prev.is_some_and(|p| {
                (p.is_lowercase() && c.is_uppercase())
                    || (p.is_alphabetic() && c.is_numeric())
                    || (p.is_numeric() && c.is_alphabetic())
            });
            if hump && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            cur.extend(c.to_lowercase());
            prev = Some(c);
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

/// Stems that name the same thing in tool descriptions: (said, written).
/// Applied to queries and documents alike, so either word finds both.
const SYNONYMS: &[(&str, &str)] = &[
    ("folder", "directori"),
    ("dir", "directori"),
    ("remov", "delet"),
    ("eras", "delet"),
];

impl Tokenizer for Words {
    fn tokenize(&self, text: &str) -> Vec<String> {
        words(text)
            .into_iter()
            .filter(|w| !STOP.contains(&w.as_str()))
            .map(|w| {
                let stem = stemmer().stem(&w);
                match SYNONYMS.iter().find(|(said, _)| *said == stem) {
                    Some((_, written)) => (*written).to_owned(),
                    None => stem.into_owned(),
                }
            })
            .collect()
    }
}

/// What of a tool is searched.
#[derive(Deserialize)]
struct Searchable {
    #[serde(default)]
    description: Option<String>,
    #[serde(default, rename = "inputSchema")]
    input_schema: Option<Value>,
}

/// The text a tool is indexed under (weights by repetition).
pub fn document(tool: &CatalogTool) -> String {
    let s: Searchable = serde_json::from_str(tool.raw.get()).unwrap_or(Searchable {
        description: None,
        input_schema: None,
    });
    let mut doc = String::new();
    for _ in 0..NAME_WEIGHT {
        doc.push_str(&tool.tool);
        doc.push(' ');
    }
    doc.push_str(&tool.server);
    doc.push(' ');
    if let Some(d) = &s.description {
        doc.push_str(d);
        doc.push(' ');
    }
    if let Some(Value::Object(props)) = s
        .input_schema
        .as_ref()
        .and_then(|schema| schema.get("properties"))
    {
        for (name, p) in props {
            for _ in 0..PROPERTY_WEIGHT {
                doc.push_str(name);
                doc.push(' ');
            }
            if let Some(d) = p.get("description").and_then(Value::as_str) {
                doc.push_str(d);
                doc.push(' ');
            }
        }
    }
    doc
}

/// One catalog's search index.
pub struct Index {
    tools: Vec<Arc<CatalogTool>>,
    engine: SearchEngine<usize, u32, Words>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("tools", &self.tools.len())
            .finish()
    }
}

/// One result of [`Index::search`].
#[derive(Debug, Clone)]
pub struct Hit {
    pub tool: Arc<CatalogTool>,
    pub score: f32,
}

impl Index {
    pub fn new(tools: Vec<Arc<CatalogTool>>) -> Index {
        let docs: Vec<Document<usize>> = tools
            .iter()
            .enumerate()
            .map(|(i, t)| Document::new(i, document(t)))
            .collect();
        let engine =
            SearchEngineBuilder::<usize, u32, Words>::with_tokenizer_and_documents(Words, docs)
                .build();
        Index { tools, engine }
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The best `limit` tools for `query`, best first; equal scores in
    /// catalog order (the crate's own order of ties is a hash map's).
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        let mut hits: Vec<(usize, f32)> = self
            .engine
            .search(query, None)
            .into_iter()
            .map(|r| (r.document.id, r.score))
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        hits.into_iter()
            .take(limit)
            .filter_map(|(i, score)| {
                self.tools.get(i).map(|t| Hit {
                    tool: t.clone(),
                    score,
                })
            })
            .collect()
    }

    /// The tool named `name` (namespaced) among the indexed ones.
    pub fn get(&self, name: &str) -> Option<&Arc<CatalogTool>> {
        self.tools.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_snake_camel_and_digits() {
        assert_eq!(words("read_text_file"), ["read", "text", "file"]);
        assert_eq!(words("getTinyImage"), ["get", "tiny", "image"]);
        assert_eq!(
            words("base64 sha256Sum"),
            ["base", "64", "sha", "256", "sum"]
        );
        assert_eq!(Words.tokenize("Reading the files"), ["read", "file"]);
        assert_eq!(Words.tokenize("folders"), Words.tokenize("directory"));
    }

    #[test]
    fn meta_tools_are_three_valid_objects() {
        let names: Vec<String> = meta_tools()
            .iter()
            .map(|t| {
                serde_json::from_str::<Value>(t.get()).unwrap()["name"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(names, [SEARCH_TOOLS, DESCRIBE_TOOL, CALL_TOOL]);
    }
}
