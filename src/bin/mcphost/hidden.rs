//! `mcphost tools`: the mark and the note for a tool whose definition hides
//! text (the `hiddenText` of `mcphost/tools/list`, docs/ipc.md).

use mcphost::protocol::raw_field;
use mcphost::registry::hygiene::{PREVIEW_CHARS, escape};
use serde_json::Value;

use crate::backend::ToolRow;

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

/// The DESCRIPTION cell: marked, and with what it hides shown as escapes
/// (under `keep` it still holds them, and a bidi control would reorder
/// the terminal line).
pub fn marked(t: &ToolRow, description: String) -> String {
    match t.hidden.is_empty() {
        true => description,
        false => format!(
            "[hidden text] {}",
            escape(&description, PREVIEW_CHARS.saturating_sub(14))
        ),
    }
}

/// One line per marked tool: what was found, where, and what the catalog
/// does with it.
pub fn notes<'a>(tools: impl Iterator<Item = &'a ToolRow>) {
    for t in tools.filter(|t| !t.hidden.is_empty()) {
        let what: Vec<String> = t
            .hidden
            .iter()
            .map(|h| {
                format!(
                    "{} in {}: {}",
                    s(&h["kind"]),
                    s(&h["where"]),
                    s(&h["preview"])
                )
            })
            .collect();
        let mode = raw_field::<Option<String>>(&t.raw, "hygiene")
            .ok()
            .flatten()
            .flatten();
        let done = match mode.as_deref() {
            Some("keep") => "relayed to hosts and models as is (hygiene: \"keep\")",
            _ => "removed from what hosts and models are shown (hygiene: \"strip\")",
        };
        outln!("hidden text in {}: {}; {done}", t.name, what.join("; "));
    }
}
