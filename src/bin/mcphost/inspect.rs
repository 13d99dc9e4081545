//! `mcphost inspect`: one stdio server, its handshake and catalog.

use std::time::Instant;

use anyhow::Result;
use mcphost::client::{CallOptions, ClientOptions, ServerClient};
use mcphost::protocol::{
    Prompt, ProtocolVersion, RawValue, Resource, ResourceTemplate, Tool, ToolResult,
};
use mcphost::transport::stdio::{StdioConfig, spawn};

pub async fn inspect(
    name: &str,
    cfg: StdioConfig,
    call: Option<String>,
    arguments: Box<RawValue>,
    json: bool,
    opts: ClientOptions,
) -> Result<()> {
    let started = Instant::now();
    let conn = spawn(name, &cfg).await?;
    let client = ServerClient::connect(name, conn, opts).await?;
    let connect_ms = started.elapsed().as_millis();
    let result = report(&client, call, arguments, connect_ms, json).await;
    client.shutdown().await;
    result
}

async fn report(
    client: &ServerClient,
    call: Option<String>,
    arguments: Box<RawValue>,
    connect_ms: u128,
    json: bool,
) -> Result<()> {
    let n = client.negotiated();
    let caps = &n.capabilities;
    let tools = if caps.tools.is_some() {
        client.list_tools().await?
    } else {
        Vec::new()
    };
    let resources = if caps.resources.is_some() {
        client.list_resources().await?
    } else {
        Vec::new()
    };
    let templates = if caps.resources.is_some() {
        client.list_resource_templates().await?
    } else {
        Vec::new()
    };
    let prompts = if caps.prompts.is_some() {
        client.list_prompts().await?
    } else {
        Vec::new()
    };
    let called = match &call {
        Some(tool) => Some(
            client
                .call_tool(tool, Some(arguments), CallOptions::default())
                .await?,
        ),
        None => None,
    };
    if json {
        // Serialised straight from the raw values: `json!` would route them
        // through `Value`, which cannot hold e.g. `1e400`.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Report<'a> {
            server: &'a str,
            protocol_version: &'a ProtocolVersion,
            server_info: &'a RawValue,
            capabilities: &'a RawValue,
            instructions: &'a Option<String>,
            connect_ms: u128,
            tools: &'a [Tool],
            resources: &'a [Resource],
            resource_templates: &'a [ResourceTemplate],
            prompts: &'a [Prompt],
            call: Option<&'a ToolResult>,
        }
        let out = serde_json::to_string(&Report {
            server: client.name(),
            protocol_version: &n.protocol_version,
            server_info: &n.server_info,
            capabilities: &n.capabilities_raw,
            instructions: &n.instructions,
            connect_ms,
            tools: &tools,
            resources: &resources,
            resource_templates: &templates,
            prompts: &prompts,
            call: called.as_ref(),
        })?;
        outln!("{out}");
        return Ok(());
    }
    outln!(
        "{} ({} {}) speaks MCP {} — connected in {connect_ms} ms",
        client.name(),
        n.server_name.as_deref().unwrap_or("?"),
        n.server_version.as_deref().unwrap_or("?"),
        n.protocol_version
    );
    outln!("capabilities: {}", n.capabilities_raw.get());
    if let Some(i) = &n.instructions {
        outln!("instructions: {}", i.lines().next().unwrap_or(""));
    }
    outln!("tools ({}):", tools.len());
    for t in &tools {
        outln!("  {}", t.name);
    }
    outln!("resources ({}):", resources.len());
    for r in &resources {
        outln!("  {}", r.uri);
    }
    outln!("resource templates ({}):", templates.len());
    for t in &templates {
        outln!("  {}", t.uri_template);
    }
    outln!("prompts ({}):", prompts.len());
    for p in &prompts {
        outln!("  {}", p.name);
    }
    if let (Some(tool), Some(r)) = (call, called) {
        outln!(
            "call {tool}{}: {}",
            if r.is_error { " (isError)" } else { "" },
            r.raw.get()
        );
    }
    Ok(())
}

pub fn bundled_testserver() -> Result<String> {
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot locate the mcphost executable: {e}"))?;
    let path = exe.with_file_name("mcphost-testserver");
    if !path.exists() {
        anyhow::bail!(
            "no command given and the bundled test server is missing at {}; build it with `cargo build --bins`",
            path.display()
        );
    }
    Ok(path.display().to_string())
}
