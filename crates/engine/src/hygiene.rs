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
    Some((
        hidden_of(hidden, server, Item::Tool, tool)?,
        name(h.hygiene),
    ))
}

/// The findings in one item of `server` (its own name), as `hiddenText`.
pub(crate) fn hidden_of(
    hidden: &HashMap<String, ServerHidden>,
    server: &str,
    kind: Item,
    item: &str,
) -> Option<serde_json::Value> {
    let found = hidden
        .get(server)?
        .items
        .iter()
        .find(|i| i.item == kind && i.name == item)?;
    Some(found.findings.iter().map(|f| f.to_json()).collect())
}

pub(crate) fn name(h: Hygiene) -> &'static str {
    match h {
        Hygiene::Strip => "strip",
        Hygiene::Keep => "keep",
    }
}
