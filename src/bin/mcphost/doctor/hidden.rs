//! A finding per tool, prompt, resource or template whose definition hides
//! text (registry `hygiene`).

use mcphost::config::Hygiene;
use mcphost::protocol::RawValue;
use mcphost::registry::hygiene::{Item, clean};

use super::Check;
use super::fixes::Fix;

/// One `hidden-text` problem per listed item that has any, naming it
/// (`what` is `tool`, `prompt`, `resource` or `resource template`) and
/// the fields; the hint says what `hygiene` does with it.
pub(super) fn checks<'a>(
    what: &str,
    item: Item,
    hygiene: Hygiene,
    listed: impl IntoIterator<Item = (&'a str, &'a RawValue)>,
) -> Vec<Check> {
    listed
        .into_iter()
        .filter_map(|(name, raw)| {
            let found = clean(item, raw, false).ok()?.findings;
            if found.is_empty() {
                return None;
            }
            let found: Vec<String> = found
                .iter()
                .map(|f| format!("{} in {}: {}", f.finding.kind, f.field, f.finding.preview))
                .collect();
            Some(Check::problem(
                "hidden-text",
                format!("{what} {name:?}: {}", found.join("; ")),
                Fix::HiddenText(hygiene),
            ))
        })
        .collect()
}
