//! Auth's sign-in prompt ([`SignInPrompt`]) over the engine's hosts: the
//! page goes to the host as a URL-mode elicitation (`elicitation/create`,
//! `mode: "url"`) from the asking server, through the broker, so it
//! reaches the host registered for requests no call caused.

use std::sync::Arc;

use mcphost_auth::browser::{SignInPage, SignInPrompt};
use mcphost_client::{Asker, Host, HostRequest};
use mcphost_transport::BoxFuture;

/// A [`SignInPrompt`] that asks a [`Host`] (the engine's).
pub struct HostSignIn(pub Arc<dyn Host>);

impl SignInPrompt for HostSignIn {
    fn show<'a>(&'a self, page: SignInPage<'a>) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let params = serde_json::json!({
                "mode": "url",
                "message": page.message,
                "url": page.url,
                "elicitationId": page.id,
            });
            let params = serde_json::value::to_raw_value(&params).map_err(|e| e.to_string())?;
            let answer = self
                .0
                .handle(HostRequest {
                    server: page.server.to_owned(),
                    method: mcphost_protocol::methods::ELICITATION_CREATE.to_owned(),
                    params: Some(params),
                    relation: mcphost_jsonrpc::Relation::Unrelated,
                    asker: Asker::Shared,
                })
                .await
                .map_err(|e| format!("the host: {}", e.message))?;
            let action: Option<String> = serde_json::from_str::<serde_json::Value>(answer.get())
                .ok()
                .and_then(|v| v["action"].as_str().map(str::to_owned));
            match action.as_deref() {
                Some("accept") => Ok(()),
                other => Err(format!(
                    "the host answered {}",
                    other.unwrap_or("nothing usable")
                )),
            }
        })
    }
}
