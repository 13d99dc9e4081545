//! `mcphost auth`: sign in to an HTTP server, see and forget tokens. Runs in
//! this process against the user's token store, which the daemon shares: a
//! server the daemon holds in `auth_required` becomes ready once a sign-in
//! here stores its token.

use anyhow::{Context, Result, anyhow, bail};
use mcphost::auth::browser::{Browser, Chain};
use mcphost::config::{HostConfig, OAuthSetting, TransportConfig};
use serde_json::json;

use crate::output::Out;

/// The HTTP server `name` of `cfg`, and its authorizer.
fn authorizer(cfg: &HostConfig, name: &str) -> Result<std::sync::Arc<mcphost::auth::Authorizer>> {
    let server = cfg
        .server(name)
        .ok_or_else(|| anyhow!("no server named '{name}' in the config"))?;
    let TransportConfig::Http(http) = &server.transport else {
        bail!(
            "server '{name}' is a stdio server; OAuth is for HTTP servers (a stdio server takes its credentials from its env)"
        );
    };
    if matches!(http.oauth, OAuthSetting::Disabled) {
        bail!("server '{name}' has \"oauth\": false in the config");
    }
    let ctx = crate::backend::auth_context(true)?;
    match http.oauth_client() {
        Some(oauth) => ctx
            .authorizer(name, &http.url, oauth)
            .map_err(|e| anyhow!("server '{name}': {e}")),
        None => bail!(
            "server '{name}' sends its own Authorization header (its \"headers\"); it does not sign in with OAuth"
        ),
    }
}

pub async fn login(cfg: &HostConfig, name: &str, out: &Out) -> Result<u8> {
    let a = authorizer(cfg, name)?;
    let chain = Chain::standard(None, true);
    if chain.is_empty() {
        bail!(
            "cannot show a sign-in page here: no {} set, no display and no terminal",
            mcphost::auth::browser::BROWSER_ENV
        );
    }
    eprintln!(
        "mcphost: signing in to '{name}' (through {})…",
        chain.describe()
    );
    a.login(&chain as &dyn Browser)
        .await
        .with_context(|| format!("signing in to '{name}'"))?;
    out.done(&format!("signed in to {name}"));
    Ok(0)
}

pub async fn logout(cfg: &HostConfig, name: &str, out: &Out) -> Result<u8> {
    let a = authorizer(cfg, name)?;
    let removed = a
        .logout()
        .await
        .with_context(|| format!("signing out of '{name}'"))?;
    out.done(&if removed {
        format!("signed out of {name}: its tokens are deleted")
    } else {
        format!("{name} had no stored tokens")
    });
    Ok(0)
}

/// Every stored sign-in: server, issuer, resource, scope, expiry. Never a
/// token.
pub fn status(out: &Out) -> Result<u8> {
    let store = mcphost::auth::store::TokenStore::open_default().map_err(|e| anyhow!("{e}"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut rows = Vec::new();
    for (key, entry) in store.list().map_err(|e| anyhow!("{e}"))? {
        let t = entry.tokens.as_ref();
        let state = match t {
            None => "signed out".to_owned(),
            Some(t) => match t.expires_at {
                Some(at) if at <= now && t.refresh_token.is_some() => {
                    "expired (refreshes on use)".into()
                }
                Some(at) if at <= now => "expired".into(),
                Some(at) => format!(
                    "valid for {}",
                    humantime::format_duration(std::time::Duration::from_secs(at - now))
                ),
                None => "valid".into(),
            },
        };
        rows.push(json!({
            "server": entry.server,
            "issuer": key.issuer,
            "resource": key.resource,
            "state": state,
            "scope": t.and_then(|t| t.scope.clone()),
            "refreshable": t.is_some_and(|t| t.refresh_token.is_some()),
            "client_id": entry.client.as_ref().map(|c| c.client_id.clone()),
        }));
    }
    out.auth_status(
        &rows,
        &store.dir().display().to_string(),
        &json!({
            "name": store.backend_name(),
            "fallback": store.fallback_reason(),
            "about": store.describe_backend(),
        }),
    )?;
    Ok(0)
}
