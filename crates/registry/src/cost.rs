//! What a tool costs a model: the tokens of its name, description and input
//! schema, counted with a tiktoken encoding (feature `tokens`).
//!
//! The counted text is the tool as a model is shown it, nothing else:
//! `{"name":N,"description":D,"inputSchema":S}` with each value the listed
//! JSON text as it is (the namespaced name, the server's description and
//! schema byte for byte); a missing description or schema is left out.
//! Annotations, titles and output schemas are not counted: hosts do not
//! send them to models.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::value::RawValue;

pub use mcphost_config::model_view::Encoding;

/// Whether this build counts tokens (feature `tokens`).
pub const AVAILABLE: bool = cfg!(feature = "tokens");

/// Tokens of `text` in `enc`; `None` without the feature `tokens`. The
/// tokenizers are built once per process (tiktoken-rs keeps each in a
/// static `OnceLock`-style singleton: building one takes ~100 ms).
pub fn count(enc: Encoding, text: &str) -> Option<usize> {
    #[cfg(feature = "tokens")]
    {
        use tiktoken_rs::{
            cl100k_base_singleton, o200k_base_singleton, p50k_base_singleton, r50k_base_singleton,
        };
        let bpe = match enc {
            Encoding::O200kBase => o200k_base_singleton(),
            Encoding::Cl100kBase => cl100k_base_singleton(),
            Encoding::P50kBase => p50k_base_singleton(),
            Encoding::R50kBase => r50k_base_singleton(),
        };
        Some(bpe.encode_ordinary(text).len())
    }
    #[cfg(not(feature = "tokens"))]
    {
        let _ = (enc, text);
        None
    }
}

/// The text a tool's cost is counted on (see the module docs); `None` when
/// `raw` is not an object.
pub fn tool_text(raw: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Parts<'a> {
        #[serde(borrow)]
        name: Option<&'a RawValue>,
        #[serde(borrow)]
        description: Option<&'a RawValue>,
        #[serde(borrow, rename = "inputSchema")]
        input_schema: Option<&'a RawValue>,
    }
    let p: Parts<'_> = serde_json::from_str(raw.get()).ok()?;
    let mut out = String::with_capacity(raw.get().len());
    out.push('{');
    for (key, v) in [
        ("name", p.name),
        ("description", p.description),
        ("inputSchema", p.input_schema),
    ] {
        let Some(v) = v else { continue };
        if out.len() > 1 {
            out.push(',');
        }
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        out.push_str(v.get());
    }
    out.push('}');
    Some(out)
}

/// The tokens of one listed tool object in `enc`.
pub fn tool_tokens(raw: &RawValue, enc: Encoding) -> Option<u32> {
    let text = tool_text(raw)?;
    count(enc, &text).map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// Small and non-zero: the tag of a cached count.
fn tag(enc: Encoding) -> u64 {
    match enc {
        Encoding::O200kBase => 1,
        Encoding::Cl100kBase => 2,
        Encoding::P50kBase => 3,
        Encoding::R50kBase => 4,
    }
}

/// One tool's count, computed the first time it is asked for in an
/// encoding and kept with the tool (catalog entries are shared between
/// listings, so a rebuild of another server keeps it). Lock-free: the tag
/// of the encoding and the count share one word.
#[derive(Debug, Default)]
pub struct TokenCache(AtomicU64);

impl Clone for TokenCache {
    fn clone(&self) -> Self {
        TokenCache(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

impl TokenCache {
    /// The cost of `raw` (the object this cache belongs to) in `enc`.
    pub fn get(&self, raw: &RawValue, enc: Encoding) -> Option<u32> {
        let word = self.0.load(Ordering::Relaxed);
        if word >> 32 == tag(enc) {
            return Some((word & u64::from(u32::MAX)) as u32);
        }
        let n = tool_tokens(raw, enc)?;
        self.0
            .store((tag(enc) << 32) | u64::from(n), Ordering::Relaxed);
        Some(n)
    }
}

#[cfg(all(test, feature = "tokens"))]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn counts_the_name_description_and_schema_text_with_tiktoken() {
        let tool = raw(
            r#"{"name":"fs__read_file","title":"Read","description":"Read a file.","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}},"annotations":{"readOnlyHint":true}}"#,
        );
        let text = tool_text(&tool).unwrap();
        assert_eq!(
            text,
            r#"{"name":"fs__read_file","description":"Read a file.","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}}}"#
        );
        let by_hand = tiktoken_rs::o200k_base()
            .unwrap()
            .encode_ordinary(&text)
            .len();
        assert_eq!(
            tool_tokens(&tool, Encoding::O200kBase),
            Some(by_hand as u32)
        );
        let by_hand = tiktoken_rs::cl100k_base()
            .unwrap()
            .encode_ordinary(&text)
            .len();
        assert_eq!(
            tool_tokens(&tool, Encoding::Cl100kBase),
            Some(by_hand as u32)
        );
    }

    #[test]
    fn a_longer_description_costs_more_and_the_cache_follows_the_encoding() {
        let short = raw(r#"{"name":"t","description":"Read.","inputSchema":{}}"#);
        let long = raw(
            r#"{"name":"t","description":"Read the complete contents of a file from the file system, as text.","inputSchema":{}}"#,
        );
        let (s, l) = (
            tool_tokens(&short, Encoding::O200kBase).unwrap(),
            tool_tokens(&long, Encoding::O200kBase).unwrap(),
        );
        assert!(l > s, "{l} > {s}");
        let cache = TokenCache::default();
        assert_eq!(cache.get(&long, Encoding::O200kBase), Some(l));
        // A second encoding replaces the cached count, not reuses it.
        let cl = tool_tokens(&long, Encoding::Cl100kBase).unwrap();
        assert_eq!(cache.get(&long, Encoding::Cl100kBase), Some(cl));
        assert_eq!(cache.get(&long, Encoding::O200kBase), Some(l));
    }

    #[test]
    fn encodings_parse_by_name_and_unknown_ones_are_named() {
        assert_eq!("cl100k_base".parse::<Encoding>(), Ok(Encoding::Cl100kBase));
        let e = "gpt2".parse::<Encoding>().unwrap_err();
        assert!(e.contains("gpt2") && e.contains("o200k_base"), "{e}");
    }
}
