//! Hidden text (registry `hygiene`) in the `mcphost/*` answers.

use std::collections::HashMap;

use mcphost_config::Hygiene;
use mcphost_registry::ServerHidden;
use mcphost_registry::hygiene::Item;

/// A tool's `hiddenText` and its server's `hygiene` (docs/ipc.md); `None`
/// when nothing was found.
pub(crate) fn hidden_of_tool(
    hidden: &HashMap<String, ServerHidden>,
    server: &str,
    tool: &str,
) -> Option<(serde_json::Value, &'static str)> {
    let h = hidden.get(server)?;
    let item = h
        .items
        .iter()
        .find(|i| i.item == Item::Tool && i.name == tool)?;
    let found = item.findings.iter().map(|f| f.to_json()).collect();
    Some((found, name(h.hygiene)))
}

pub(crate) fn name(h: Hygiene) -> &'static str {
    match h {
        Hygiene::Strip => "strip",
        Hygiene::Keep => "keep",
    }
}
