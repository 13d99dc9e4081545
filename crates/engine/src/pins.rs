//! `mcphost/pins/*`: a server's pinned definitions, their drift, approval
//! and reset (the registry's `pins` module does the work).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Engine, Reply, params_of, raw, registry_error};
use mcphost_protocol::{ErrorObject, methods};
use mcphost_registry::hygiene::Item;

#[derive(Deserialize)]
struct ServerParam {
    #[serde(default)]
    server: Option<String>,
}

#[derive(Deserialize)]
struct DiffParams {
    server: String,
    #[serde(default)]
    tool: Option<String>,
}

#[derive(Deserialize)]
struct ApproveParams {
    server: String,
    /// Tools or prompts; none: every drifted one.
    #[serde(default)]
    tools: Vec<String>,
}

impl Engine {
    pub(crate) fn pins_request(&self, method: &str, params: &Option<Box<RawValue>>) -> Reply {
        let reg = &self.registry;
        let v = match method {
            methods::MCPHOST_PINS_LIST => {
                let p: ServerParam = match params {
                    Some(_) => params_of(params)?,
                    None => ServerParam { server: None },
                };
                reg.pins_list(p.server.as_deref())
                    .map(|v| self.with_hidden_text(v))
            }
            methods::MCPHOST_PINS_DIFF => {
                let p: DiffParams = params_of(params)?;
                reg.pins_diff(&p.server, p.tool.as_deref())
            }
            methods::MCPHOST_PINS_APPROVE => {
                let p: ApproveParams = params_of(params)?;
                reg.pins_approve(&p.server, &p.tools)
            }
            methods::MCPHOST_PINS_RESET => {
                let p: DiffParams = params_of(params)?;
                reg.pins_reset(&p.server)
            }
            _ => return Err(ErrorObject::method_not_found(method)),
        };
        raw(&v.map_err(registry_error)?)
    }

    /// Each row of a tool or prompt whose current definition hides text
    /// gets its `hiddenText` (the registry's hygiene findings), so `pins`
    /// shows it beside the drift.
    fn with_hidden_text(&self, mut v: serde_json::Value) -> serde_json::Value {
        let hidden = self.registry.hidden_text();
        for s in v.as_array_mut().into_iter().flatten() {
            let server = s["server"].as_str().unwrap_or_default().to_owned();
            for (key, kind) in [("tools", Item::Tool), ("prompts", Item::Prompt)] {
                for row in s[key].as_array_mut().into_iter().flatten() {
                    let name = row["name"].as_str().unwrap_or_default();
                    if let Some(found) = super::hygiene::hidden_of(&hidden, &server, kind, name) {
                        row["hiddenText"] = found;
                    }
                }
            }
        }
        v
    }
}
