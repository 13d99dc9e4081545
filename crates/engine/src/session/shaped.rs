//! A session's options (`mcphost/session/configure`): its `tools/list`
//! through [`mcphost_model_view::View`], and the meta-tools of search mode. Every
//! real call, `call_tool`'s included, goes on through the one `tools/call`
//! path (the caller forwards what [`Shaped::Forward`] gives it).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;
use tracing::{info, warn};

use super::super::{PAGE_SIZE, Reply, internal, invalid_params, page_result, raw};
use super::Session;
use mcphost_model_view::search::{self, CALL_TOOL, DESCRIBE_TOOL, SEARCH_TOOLS};
use mcphost_model_view::{Options, View, schema};
use mcphost_protocol::{ErrorObject, methods, set_fields, to_raw};

/// The config profile every new session starts with, when it exists.
pub(super) const DEFAULT_PROFILE: &str = "default";

/// What a configured session does with a `tools/list` or `tools/call`.
pub(super) enum Shaped {
    /// Answered here.
    Answer(Box<RawValue>),
    /// Go on as a `tools/call` with these params (unchanged, or
    /// `call_tool`'s target and arguments, byte for byte).
    Forward(Option<Box<RawValue>>),
}

#[derive(Deserialize)]
struct CallParams<'a> {
    name: String,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// A tool-level error a model reads (`isError`), not a protocol error.
fn tool_error(text: impl Into<String>) -> Reply {
    raw(&json!({ "content": [{ "type": "text", "text": text.into() }], "isError": true }))
}

fn tool_ok(text: String, structured: serde_json::Value) -> Reply {
    raw(&json!({ "content": [{ "type": "text", "text": text }], "structuredContent": structured }))
}

impl Session {
    /// `mcphost/session/configure`: replace this session's options (a
    /// `profile` from the config, then the fields given). `{}` resets.
    pub(super) fn configure(&self, params: Option<&RawValue>) -> Reply {
        let value: serde_json::Value = match params {
            Some(p) => serde_json::from_str(p.get())
                .map_err(|e| invalid_params(format!("mcphost/session/configure: {e}")))?,
            None => json!({}),
        };
        let mut value = value;
        if let Some(obj) = value.as_object_mut() {
            // Per-request members of a stateless client, not options.
            obj.remove("_meta");
        }
        let settings = self.engine.model_view_settings();
        let (options, profile) = Options::configure(&value, &settings)
            .map_err(|e| invalid_params(format!("mcphost/session/configure: {e}")))?;
        if options.max_tokens.is_some() && !mcphost_registry::cost::AVAILABLE {
            return Err(invalid_params(
                "mcphost/session/configure: maxTokens needs token counts; this build has no \
                 `tokens` feature",
            ));
        }
        let view = View::new(options.clone(), profile.clone())
            .map_err(|e| invalid_params(format!("mcphost/session/configure: {e}")))?;
        let mut out = json!({
            "options": options.to_json(),
            "profile": profile,
            "encoding": settings.encoding.as_str(),
        });
        match view {
            None => {
                self.view.store(None);
                let catalog = self.engine.registry().catalog();
                out["tools"] = json!({ "listed": catalog.len(), "cut": 0 });
            }
            Some(view) => {
                let view = Arc::new(view);
                let catalog = self.engine.registry().catalog();
                if view.search_mode() {
                    let index = view.index(&catalog);
                    out["tools"] = json!({
                        "listed": search::meta_tools().len(),
                        "searchable": index.len(),
                        "cut": 0,
                    });
                } else {
                    let (_, cut) = view.list(&catalog, settings.encoding);
                    out["tools"] = cut.to_json();
                    let warning = cut.warning(&view.options);
                    if let Some(w) = &warning {
                        out["warning"] = json!(w);
                    }
                    // Nothing may be sent before initialize: the session's
                    // first listing warns instead.
                    if self.mode() != super::Mode::Undecided {
                        if let Some(w) = &warning {
                            self.warn_client(w);
                        }
                        view.should_warn(&cut);
                    }
                }
                self.view.store(Some(view));
            }
        }
        info!(session = self.id, options = %out["options"], "session configured");
        // Its listing changed: a client that listed before lists again
        // (one that has not initialized yet has listed nothing).
        if self.mode() == super::Mode::Handshake {
            let _ = self
                .port
                .notify(methods::NOTIFICATION_TOOLS_LIST_CHANGED, None);
        }
        raw(&out)
    }

    /// A warning in the client's log (`notifications/message`), so a cut
    /// never goes unseen. Stateless clients get no notifications: they
    /// have the configure result's `warning`.
    fn warn_client(&self, text: &str) {
        warn!(session = self.id, "{text}");
        if self.mode() == super::Mode::Stateless {
            return;
        }
        let params = to_raw(&json!({ "level": "warning", "logger": "mcphost", "data": text }));
        if let Ok(p) = params {
            let _ = self.port.notify(methods::NOTIFICATION_MESSAGE, Some(p));
        }
    }

    /// `tools/list` or `tools/call` of a configured session.
    pub(super) fn shaped(
        &self,
        view: &View,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<Shaped, ErrorObject> {
        if method == methods::TOOLS_LIST {
            return self.shaped_list(view).map(Shaped::Answer);
        }
        let p: CallParams<'_> = match params.as_deref() {
            Some(p) => serde_json::from_str(p.get())
                .map_err(|e| invalid_params(format!("invalid params: {e}")))?,
            None => return Err(invalid_params("tools/call needs params")),
        };
        let catalog = self.engine.registry().catalog();
        if view.search_mode() {
            let args = |field: &str| -> Option<serde_json::Value> {
                p.arguments
                    .and_then(|a| serde_json::from_str::<serde_json::Value>(a.get()).ok())
                    .and_then(|v| v.get(field).cloned())
            };
            match p.name.as_str() {
                SEARCH_TOOLS => {
                    let Some(query) = args("query").and_then(|q| q.as_str().map(str::to_owned))
                    else {
                        return tool_error("search_tools needs a `query` string")
                            .map(Shaped::Answer);
                    };
                    let limit = args("limit")
                        .and_then(|l| l.as_u64())
                        .and_then(|l| usize::try_from(l).ok())
                        .unwrap_or(search::DEFAULT_LIMIT)
                        .clamp(1, search::MAX_LIMIT);
                    return self
                        .search(view, &catalog, &query, limit)
                        .map(Shaped::Answer);
                }
                DESCRIBE_TOOL => {
                    let Some(name) = args("name").and_then(|q| q.as_str().map(str::to_owned))
                    else {
                        return tool_error("describe_tool needs a `name` string")
                            .map(Shaped::Answer);
                    };
                    return self.describe(view, &catalog, &name).map(Shaped::Answer);
                }
                CALL_TOOL => return self.call_tool(view, &catalog, params.as_deref(), &p),
                _ => {}
            }
        }
        if !view.allows(&catalog, &p.name) {
            return Err(invalid_params(format!(
                "tool {:?} is not in this session's allow lists (mcphost/session/configure)",
                p.name
            )));
        }
        Ok(Shaped::Forward(params))
    }

    fn shaped_list(&self, view: &View) -> Reply {
        let registry = self.engine.registry();
        registry.revalidate();
        if view.search_mode() {
            return page_result("tools", search::meta_tools().iter().map(|t| &**t), None);
        }
        let catalog = registry.catalog();
        let enc = self.engine.model_view_settings().encoding;
        let (tools, cut) = view.list(&catalog, enc);
        if view.should_warn(&cut)
            && let Some(w) = cut.warning(&view.options)
        {
            self.warn_client(&w);
        }
        // One page: a budgeted listing is small, and its cut is over the
        // whole of it (PAGE_SIZE pages the plain catalog).
        let _ = PAGE_SIZE;
        match view.options.schema_profile {
            None => page_result("tools", tools.iter().map(|t| &*t.raw), None),
            Some(profile) => {
                let shaped: Vec<Box<RawValue>> = tools
                    .iter()
                    .map(|t| schema::normalize_tool(&t.raw, profile))
                    .collect::<Result<_, _>>()
                    .map_err(internal)?;
                page_result("tools", shaped.iter().map(|t| &**t), None)
            }
        }
    }

    fn search(
        &self,
        view: &View,
        catalog: &mcphost_registry::catalog::Catalog,
        query: &str,
        limit: usize,
    ) -> Reply {
        let index = view.index(catalog);
        let hits = index.search(query, limit);
        if hits.is_empty() {
            return tool_ok(
                format!("No tool matches {query:?}. Try other words."),
                json!({ "tools": [] }),
            );
        }
        let mut text = String::new();
        let mut items = Vec::with_capacity(hits.len());
        for h in &hits {
            let description: Option<String> =
                mcphost_protocol::raw_field(&h.tool.raw, "description")
                    .ok()
                    .flatten();
            let d = description.as_deref().unwrap_or("");
            text.push_str(&format!("{}: {}\n", h.tool.name, first_line(d)));
            items.push(json!({ "name": h.tool.name, "description": d, "score": h.score }));
        }
        tool_ok(text, json!({ "tools": items }))
    }

    fn describe(
        &self,
        view: &View,
        catalog: &mcphost_registry::catalog::Catalog,
        name: &str,
    ) -> Reply {
        let index = view.index(catalog);
        let Some(tool) = index.get(name) else {
            return tool_error(format!(
                "no tool named {name:?}; search_tools gives the names"
            ));
        };
        let raw_tool = match view.options.schema_profile {
            None => tool.raw.clone(),
            Some(p) => schema::normalize_tool(&tool.raw, p).map_err(internal)?,
        };
        let value: serde_json::Value = serde_json::from_str(raw_tool.get()).map_err(internal)?;
        tool_ok(raw_tool.get().to_owned(), value)
    }

    /// `call_tool(name, arguments)` → `tools/call` of `name` with
    /// `arguments` as they came (raw), and every other member of the
    /// request (`_meta` with its progress token, …) kept.
    fn call_tool(
        &self,
        view: &View,
        catalog: &mcphost_registry::catalog::Catalog,
        params: Option<&RawValue>,
        p: &CallParams<'_>,
    ) -> Result<Shaped, ErrorObject> {
        #[derive(Deserialize)]
        struct Inner<'a> {
            name: Option<String>,
            #[serde(borrow, default)]
            arguments: Option<&'a RawValue>,
        }
        let inner: Inner<'_> = match p.arguments {
            Some(a) => match serde_json::from_str(a.get()) {
                Ok(i) => i,
                Err(e) => {
                    return tool_error(format!("call_tool: arguments: {e}")).map(Shaped::Answer);
                }
            },
            None => Inner {
                name: None,
                arguments: None,
            },
        };
        let Some(target) = inner.name else {
            return tool_error("call_tool needs the `name` of a tool").map(Shaped::Answer);
        };
        if matches!(target.as_str(), SEARCH_TOOLS | DESCRIBE_TOOL | CALL_TOOL) {
            return tool_error("call_tool runs catalog tools, not the meta-tools")
                .map(Shaped::Answer);
        }
        if catalog.route(&target).is_none() || !view.allows(catalog, &target) {
            return tool_error(format!(
                "no tool named {target:?}; search_tools gives the names"
            ))
            .map(Shaped::Answer);
        }
        let mut fields = vec![("name".to_owned(), to_raw(&target).map_err(internal)?)];
        if let Some(a) = inner.arguments {
            fields.push(("arguments".to_owned(), a.to_owned()));
        }
        let mut forwarded = set_fields(params, fields).map_err(internal)?;
        if inner.arguments.is_none() {
            // The meta-tool's own arguments must not reach the target.
            let mut all: indexmap::IndexMap<String, Box<RawValue>> =
                serde_json::from_str(forwarded.get()).map_err(internal)?;
            all.shift_remove("arguments");
            forwarded = to_raw(&all).map_err(internal)?;
        }
        Ok(Shaped::Forward(Some(forwarded)))
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
