//! `mcphost/pins/*`: a server's pinned definitions, their drift, approval
//! and reset (the registry's `pins` module does the work).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Engine, Reply, params_of, raw, registry_error};
use mcphost_protocol::{ErrorObject, methods};

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
}
