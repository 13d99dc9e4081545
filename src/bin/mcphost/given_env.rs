//! The `${VAR}` values a command that adds, enables or restarts a server
//! hands the daemon: of the variables the server's entry names, those set
//! in this command's environment (docs/config.md, "Whose environment").
//! They go only over the daemon's socket (same user, 0600), and only these.

use std::path::Path;

use anyhow::Result;
use serde_json::{Map, Value, json};

use crate::backend::Backend;

/// `server`'s variables as the daemon's config file names them.
pub async fn of_server(b: &Backend, server: &str) -> Result<Value> {
    if matches!(b, Backend::Direct { .. }) {
        return Ok(json!({}));
    }
    // The daemon's file, which may not be the one this command would pick.
    let status = b.request("mcphost/status", None).await?;
    let Some(path) = status["configPath"].as_str() else {
        return Ok(json!({}));
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    Ok(set(&text, Path::new(path), server))
}

/// The variables an entry about to be added names.
pub fn of_entry(server: &str, entry: &str) -> Value {
    let text = format!("{{\"mcpServers\": {{{}: {entry}}}}}", json!(server));
    set(&text, Path::new("entry"), server)
}

fn set(text: &str, path: &Path, server: &str) -> Value {
    let vars: Map<String, Value> = mcphost::config::variables_of(text, path, server)
        .into_iter()
        .filter_map(|name| {
            let value = std::env::var(&name).ok()?;
            Some((name, Value::String(value)))
        })
        .collect();
    Value::Object(vars)
}
