//! A finding per tool whose definition hides text (registry `hygiene`).

use mcphost::protocol::Tool;
use mcphost::registry::hygiene::scan_tool;

use super::Check;
use super::fixes::Fix;

/// One `hidden-text` problem per tool that has any, naming the fields.
pub(super) fn checks(tools: &[Tool]) -> Vec<Check> {
    tools
        .iter()
        .filter_map(|t| {
            let found = scan_tool(&t.raw);
            if found.is_empty() {
                return None;
            }
            let what: Vec<String> = found
                .iter()
                .map(|f| format!("{} in {}: {}", f.finding.kind, f.field, f.finding.preview))
                .collect();
            Some(Check::problem(
                "hidden-text",
                format!("tool {:?}: {}", t.name, what.join("; ")),
                Fix::HiddenText,
            ))
        })
        .collect()
}
