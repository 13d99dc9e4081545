//! Where the engine meets the audit log: a routed call's line begins
//! before it is sent and is settled by its result; `mcphost/audit/query`.

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::{Caller, Filter, Outcome, Pending, Target};
use crate::{Engine, Reply, internal, invalid_params, params_of, raw, registry_error};
use mcphost_client::ClientError;
use mcphost_jsonrpc::PeerError;
use mcphost_protocol::{ErrorObject, methods};
use mcphost_registry::RegistryError;

impl Engine {
    /// Start the audit line of a `tools/call`, `prompts/get` or
    /// `resources/read` of `name` (a tool, prompt or URI as the host sent
    /// it): the server and its own name are looked up as the call will be
    /// routed. `None` when the log is off.
    pub(crate) fn audit_begin(
        &self,
        caller: &Caller,
        method: &str,
        name: &str,
        arguments: Option<&RawValue>,
    ) -> Option<Pending> {
        let log = self.broker.audit();
        if log.mode() == mcphost_config::audit::Mode::Off {
            return None;
        }
        let (method, route) = match method {
            methods::TOOLS_CALL => (
                methods::TOOLS_CALL,
                self.registry
                    .catalog()
                    .route(name)
                    .map(|r| (r.server.clone(), r.tool.clone())),
            ),
            methods::PROMPTS_GET => (
                methods::PROMPTS_GET,
                self.registry
                    .prompts()
                    .route(name)
                    .map(|r| (r.server.clone(), r.tool.clone())),
            ),
            _ => (
                methods::RESOURCES_READ,
                self.registry
                    .resolve_resource(name)
                    .ok()
                    .map(|r| (r.server, r.uri)),
            ),
        };
        let (server, own) = route.unzip();
        let target = Target {
            server,
            name: name.to_owned(),
            own,
        };
        log.begin(method, caller, target, arguments.map(RawValue::get))
    }

    /// `mcphost/audit/query`: the log's lines that the filters keep.
    pub(crate) async fn audit_query(&self, params: &Option<Box<RawValue>>) -> Reply {
        #[derive(Deserialize)]
        struct QueryParams {
            server: Option<String>,
            host: Option<String>,
            since: Option<String>,
            limit: Option<usize>,
        }
        let p: QueryParams = params_of(params)?;
        let since = match p.since.as_deref() {
            Some(s) => Some(super::parse_since(s).map_err(invalid_params)?),
            None => None,
        };
        let filter = Filter {
            server: p.server,
            host: p.host,
            since,
            limit: p.limit,
        };
        let log = self.broker.audit();
        let Some(dir) = log.dir().map(std::path::Path::to_path_buf) else {
            return raw(&json!({"lines": [], "skipped": 0, "file": null, "mode": "off"}));
        };
        let mode = match log.mode() {
            mcphost_config::audit::Mode::Off => "off",
            mcphost_config::audit::Mode::On => "on",
            mcphost_config::audit::Mode::Full => "full",
        };
        let file = dir.join(super::FILE);
        // Reading every rotated file is blocking work.
        let found = tokio::task::spawn_blocking(move || super::query(&dir, &filter))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        raw(&json!({
            "lines": found.lines,
            "skipped": found.skipped,
            "file": file,
            "mode": mode,
        }))
    }
}

/// `r` as the host gets it, with its audit line written: `ok` or
/// `isError` (as `is_error` tells), a timeout, a cancellation, or the
/// JSON-RPC error's code.
pub(crate) fn settle<T>(
    pending: Option<Pending>,
    r: Result<T, RegistryError>,
    is_error: impl Fn(&T) -> bool,
) -> Result<T, ErrorObject> {
    match r {
        Ok(t) => {
            if let Some(p) = pending {
                p.finish(if is_error(&t) {
                    Outcome::IsError
                } else {
                    Outcome::Ok
                });
            }
            Ok(t)
        }
        Err(e) => {
            let special = match &e {
                RegistryError::Client(ClientError::Request { error, .. }) => match error {
                    PeerError::Timeout { .. } => Some(Outcome::Timeout),
                    PeerError::Cancelled { .. } => Some(Outcome::Cancelled),
                    _ => None,
                },
                _ => None,
            };
            let err = registry_error(e);
            if let Some(p) = pending {
                p.finish(special.unwrap_or(Outcome::Error(err.code)));
            }
            Err(err)
        }
    }
}
