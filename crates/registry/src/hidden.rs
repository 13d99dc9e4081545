//! The registry's side of [`crate::hygiene`]: each server's lists as the
//! catalog shows them (hidden text removed unless its `hygiene` is
//! `keep`), what was found, and one warning per server and item.
//!
//! This is the one place: every listing (`tools/list`, `prompts/list`,
//! `resources/list`, templates, search mode, `mcphost/*/list`) is built
//! from [`ManagedServer::shown_lists`], for every door. The lists as
//! fetched stay in `lists` (stored for lazy servers, and what pinning sees).

use std::collections::HashSet;

use super::*;
use crate::hygiene::{self, FieldFinding, Item};
use mcphost_config::Hygiene;

/// Hidden text found in one listed item of a server.
#[derive(Debug, Clone)]
pub struct HiddenText {
    pub item: Item,
    /// The server's own name for it (a resource's URI, a template's URI
    /// template).
    pub name: String,
    pub findings: Vec<FieldFinding>,
}

/// One server's hidden text and what the catalog does with it.
#[derive(Debug, Clone)]
pub struct ServerHidden {
    pub hygiene: Hygiene,
    pub items: Arc<[HiddenText]>,
}

/// What hygiene made of a server's lists.
#[derive(Default, Clone)]
pub(crate) struct Shown {
    /// The lists with hidden text removed; `None` when they are the lists
    /// as fetched (nothing found, or `keep`).
    lists: Option<Lists>,
    hidden: Arc<[HiddenText]>,
    /// Items already warned about, so a re-listing does not warn again.
    warned: HashSet<(String, String)>,
}

/// Scan one list; the replaced objects under `strip`, by index.
fn clean_list<T>(
    items: &[T],
    kind: Item,
    of: impl Fn(&T) -> (&str, &RawValue),
    strip: bool,
    hidden: &mut Vec<HiddenText>,
) -> Vec<(usize, Box<RawValue>)> {
    let mut replaced = Vec::new();
    for (i, t) in items.iter().enumerate() {
        let (name, raw) = of(t);
        match hygiene::clean(kind, raw, strip) {
            Ok(c) if !c.findings.is_empty() => {
                if let Some(s) = c.stripped {
                    replaced.push((i, s));
                }
                hidden.push(HiddenText {
                    item: kind,
                    name: name.to_owned(),
                    findings: c.findings,
                });
            }
            Ok(_) => {}
            // It parsed off the wire; nothing to show if it does not now.
            Err(err) => debug!(item = name, %err, "not scanned for hidden text"),
        }
    }
    replaced
}

fn replace<T>(
    list: &mut [T],
    with: Vec<(usize, Box<RawValue>)>,
    raw: impl Fn(&mut T) -> &mut Box<RawValue>,
) {
    for (i, r) in with {
        if let Some(t) = list.get_mut(i) {
            *raw(t) = r;
        }
    }
}

impl ManagedServer {
    /// The lists the catalog is built from.
    pub(crate) fn shown_lists(&self) -> &Lists {
        self.shown.lists.as_ref().unwrap_or(&self.lists)
    }

    /// Scan the lists as fetched under the entry's `hygiene`.
    pub(crate) fn apply_hygiene(&mut self) {
        let strip = self.config.hygiene == Hygiene::Strip;
        let l = &self.lists;
        let mut hidden = Vec::new();
        let tools = clean_list(
            &l.tools,
            Item::Tool,
            |t| (&t.name, &t.raw),
            strip,
            &mut hidden,
        );
        let prompts = clean_list(
            &l.prompts,
            Item::Prompt,
            |p| (&p.name, &p.raw),
            strip,
            &mut hidden,
        );
        let resources = clean_list(
            &l.resources,
            Item::Resource,
            |r| (&r.uri, &r.raw),
            strip,
            &mut hidden,
        );
        let templates = clean_list(
            &l.templates,
            Item::Resource,
            |t| (&t.uri_template, &t.raw),
            strip,
            &mut hidden,
        );
        let changed = [&tools, &prompts, &resources, &templates]
            .iter()
            .any(|v| !v.is_empty());
        self.shown.lists = changed.then(|| {
            let mut s = self.lists.clone();
            replace(&mut s.tools, tools, |t| &mut t.raw);
            replace(&mut s.prompts, prompts, |p| &mut p.raw);
            replace(&mut s.resources, resources, |r| &mut r.raw);
            replace(&mut s.templates, templates, |t| &mut t.raw);
            s
        });
        for h in &hidden {
            self.warn_once(h, strip);
        }
        self.shown.hidden = hidden.into();
    }

    fn warn_once(&mut self, h: &HiddenText, strip: bool) {
        let kind = match h.item {
            Item::Tool => "tool",
            Item::Prompt => "prompt",
            Item::Resource => "resource",
        };
        if !self.shown.warned.insert((kind.to_owned(), h.name.clone())) {
            return;
        }
        let what: Vec<String> = h
            .findings
            .iter()
            .map(|f| format!("{} in {}: {}", f.finding.kind, f.field, f.finding.preview))
            .collect();
        let done = match strip {
            true => "removed from the catalog",
            false => "relayed as is (hygiene: keep)",
        };
        warn!(
            server = %self.config.name,
            "hidden text in {kind} {:?}, {done}: {}",
            h.name,
            what.join("; ")
        );
    }

    pub(crate) fn hidden(&self) -> ServerHidden {
        ServerHidden {
            hygiene: self.config.hygiene,
            items: self.shown.hidden.clone(),
        }
    }
}

impl Registry {
    /// Every server's hidden text, by server name.
    pub fn hidden_text(&self) -> HashMap<String, ServerHidden> {
        self.read()
            .entries
            .iter()
            .map(|e| (e.config.name.clone(), e.hidden()))
            .collect()
    }
}
