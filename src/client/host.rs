//! The host behind a client: who answers sampling, elicitation and roots.

use std::sync::Arc;

use serde_json::value::RawValue;

use crate::jsonrpc::{IncomingRequest, RequestHandler};
use crate::protocol::{ClientCapabilities, ErrorObject};
use crate::transport::BoxFuture;

/// Answers server→client requests. Only what [`Host::capabilities`] enables
/// is advertised, and anything else is refused with -32601 before it gets here.
pub trait Host: Send + Sync + 'static {
    fn capabilities(&self) -> ClientCapabilities;
    fn handle(
        &self,
        server: &str,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>>;
}

/// A host with no client capabilities.
pub struct NoHost;

impl Host for NoHost {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities::default()
    }
    fn handle(
        &self,
        _: &str,
        method: &str,
        _: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        Box::pin(std::future::ready(Err(ErrorObject::method_not_found(
            method,
        ))))
    }
}

pub(crate) struct HostHandler {
    server: String,
    host: Arc<dyn Host>,
    caps: ClientCapabilities,
}

impl HostHandler {
    pub(crate) fn new(server: &str, host: Arc<dyn Host>) -> Self {
        let caps = host.capabilities();
        HostHandler {
            server: server.to_owned(),
            host,
            caps,
        }
    }
}

impl RequestHandler for HostHandler {
    fn handle(&self, r: IncomingRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        if !self.caps.handles(&r.method) {
            return Box::pin(std::future::ready(Err(ErrorObject::method_not_found(
                &r.method,
            ))));
        }
        self.host.handle(&self.server, &r.method, r.params)
    }
}
