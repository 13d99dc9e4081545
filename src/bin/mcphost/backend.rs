//! Where CLI requests go: the daemon over its socket, or an in-process
//! engine (`--direct`). Both speak the same method set.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use mcphost::client::{CallOptions, ClientOptions, Host, PolicyHost, ServerClient};
use mcphost::config::{
    HostConfig, ServerConfig, StdioServer, Timeouts, ToolFilter, TransportConfig,
};
use mcphost::engine::{Engine, EngineBuilder, HostPort, Session, SessionLimits};
use mcphost::protocol::{ErrorObject, Id, RawValue, raw_field, to_raw};
use serde_json::Value;

pub struct ToolRow {
    pub name: String,
    pub server: String,
    pub tool: String,
    pub description: String,
    /// Token cost (`None` from a daemon built without `tokens`).
    pub tokens: Option<u64>,
    /// `hiddenText`: hidden text found in its definition (docs/ipc.md).
    pub hidden: Vec<Value>,
    pub raw: Box<RawValue>,
}

pub enum Backend {
    Daemon(ServerClient),
    /// An in-process engine and this CLI's session on it.
    Direct {
        engine: Arc<Engine>,
        session: Arc<Session>,
    },
}

pub fn params(v: Value) -> Result<Box<RawValue>> {
    Ok(to_raw(&v)?)
}

/// A JSON-RPC error from the daemon or the engine: its message and data
/// for people (the numeric code is for programs: `--json` has it).
#[derive(Debug)]
pub struct RpcFailure(pub ErrorObject);

impl std::fmt::Display for RpcFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.message)?;
        if let Some(d) = &self.0.data {
            write!(f, " ({})", d.get())?;
        }
        Ok(())
    }
}
impl std::error::Error for RpcFailure {}

impl Backend {
    /// A connection to the daemon. With `host`, it declares that host's
    /// capabilities and answers the server requests the daemon routes to
    /// it (those caused by this connection's calls).
    /// Started when none runs, as [`crate::autostart`] says.
    pub async fn daemon(
        auto: &crate::autostart::Autostart,
        host: Option<Arc<dyn Host>>,
    ) -> Result<Backend> {
        let mut opts = ClientOptions {
            request_timeout: Duration::from_secs(600),
            // Our own daemon: the handshake, never an era probe (a refused
            // connection must read as the daemon's refusal).
            known_era: Some(mcphost::protocol::Era::Handshake),
            ..Default::default()
        };
        if let Some(host) = host {
            opts.host = host;
        }
        Ok(Backend::Daemon(
            auto.connect(opts, ", or use --direct").await?,
        ))
    }

    /// An in-process engine over `specs`; `host` answers the servers'
    /// elicitation and sampling requests. With a person answering them
    /// (`patient`), a call's timeout is the servers' hard maximum (10
    /// minutes) rather than 60 s: the call waits while the form is filled in.
    pub async fn direct(
        specs: &[String],
        host: Arc<dyn Host>,
        fallback: PolicyHost,
        patient: bool,
        pin: Option<mcphost::protocol::ProtocolVersion>,
    ) -> Result<Backend> {
        let mut cfg = direct_config(specs).await?;
        for s in &mut cfg.servers {
            s.protocol_version = pin;
        }
        if patient {
            for s in &mut cfg.servers {
                s.timeouts.request = s.timeouts.max_request;
            }
        }
        // A sign-in in the browser happens inside an HTTP server's
        // handshake: give it the sign-in's own limit.
        let auth = auth_context(true)?;
        let start_limit =
            DIRECT_START_LIMIT.max(auth.login_timeout.saturating_add(Duration::from_secs(10)));
        for s in &mut cfg.servers {
            if matches!(s.transport, TransportConfig::Http(_)) {
                s.timeouts.init = s.timeouts.init.max(start_limit);
            }
        }
        let state = mcphost::ipc::default_state_dir();
        let engine = EngineBuilder::new(cfg)
            .fallback(fallback)
            .server_options(mcphost::registry::ServerOptions {
                auth: Some(Arc::new(auth)),
                // The daemon's pins: `--direct` checks against them too.
                pins: mcphost::daemon::pin_store(state.as_deref()),
                ..Default::default()
            })
            // The user's calls without a daemon go to the same log.
            .audit_dir(state)
            .start();
        // Every command would answer from a partial catalog (an empty table,
        // exit 0): a server that did not start fails them all instead.
        let failed = engine.wait_started(start_limit).await;
        if !failed.is_empty() {
            engine.shutdown().await;
            bail!("{}", failed.join("\n"));
        }
        // The CLI is this engine's one client: its host answers what its
        // calls cause.
        let port = Arc::new(HostPort::new(host, |method, params| {
            if method == "notifications/progress"
                && let Some(p) = params
                && let Ok(p) = serde_json::from_str::<Value>(p.get())
            {
                show_progress(
                    p["progress"].as_f64().unwrap_or(0.0),
                    p["total"].as_f64(),
                    p["message"].as_str(),
                );
            }
        }));
        let caps = port.capabilities();
        let session = engine.open_session("cli", port, SessionLimits::default());
        session.initialize_as(caps);
        Ok(Backend::Direct { engine, session })
    }

    pub async fn close(&self) {
        match self {
            Backend::Daemon(c) => c.shutdown().await,
            Backend::Direct { engine, .. } => engine.shutdown().await,
        }
    }

    pub async fn raw(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<Box<RawValue>> {
        self.raw_with(method, params, timeout, None).await
    }

    /// [`Backend::raw`]; through the daemon, `on_progress` gets the call's
    /// progress (in-process, progress comes to the session's port).
    async fn raw_with(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
        timeout: Option<Duration>,
        on_progress: Option<mcphost::jsonrpc::ProgressCallback>,
    ) -> Result<Box<RawValue>> {
        match self {
            Backend::Daemon(c) => {
                let opts = CallOptions {
                    timeout,
                    on_progress,
                    ..Default::default()
                };
                c.request_raw(method, params, opts)
                    .await
                    .map_err(|e| match e.rpc_error() {
                        Some(err) => anyhow::Error::new(RpcFailure(err.clone())),
                        None => anyhow::Error::new(e),
                    })
            }
            Backend::Direct { session, .. } => {
                static NEXT_ID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
                let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let fut = session.request(Id::number(id), method, params);
                let r = match timeout {
                    Some(t) => tokio::time::timeout(t, fut)
                        .await
                        .map_err(|_| anyhow!("{method} timed out after {t:?}"))?,
                    None => fut.await,
                };
                r.map_err(|e| anyhow::Error::new(RpcFailure(e)))
            }
        }
    }

    pub async fn request(
        &self,
        method: &'static str,
        params: Option<Box<RawValue>>,
    ) -> Result<Value> {
        let raw = self.raw(method, params, None).await?;
        Ok(serde_json::from_str(raw.get())?)
    }

    pub async fn manage(&self, method: &'static str, p: Value) -> Result<()> {
        self.manage_raw(method, params(p)?).await
    }

    pub async fn manage_raw(&self, method: &'static str, p: Box<RawValue>) -> Result<()> {
        if matches!(self, Backend::Direct { .. }) && method != "mcphost/servers/restart" {
            bail!("`{method}` changes the daemon's config file and is not available with --direct");
        }
        self.raw(method, Some(p), None).await?;
        Ok(())
    }

    /// Every catalog tool with its server and own name; the tool objects
    /// stay raw (a schema may hold numbers `Value` cannot).
    pub async fn all_tools(&self) -> Result<Vec<ToolRow>> {
        let raw = self.raw("mcphost/tools/list", None, None).await?;
        let items: Vec<Box<RawValue>> = serde_json::from_str(raw.get())?;
        items
            .into_iter()
            .map(|raw| {
                let field = |k: &str| -> Result<String> {
                    Ok(raw_field::<Option<String>>(&raw, k)?
                        .flatten()
                        .unwrap_or_default())
                };
                Ok(ToolRow {
                    name: field("name")?,
                    server: field("server")?,
                    tool: field("tool")?,
                    description: field("description")?,
                    tokens: raw_field::<Option<u64>>(&raw, "tokens")?.flatten(),
                    hidden: raw_field::<Option<Vec<Value>>>(&raw, "hiddenText")?
                        .flatten()
                        .unwrap_or_default(),
                    raw,
                })
            })
            .collect()
    }

    /// A catalog name, or a server's own tool name when exactly one server has it.
    pub async fn resolve_tool(&self, tool: &str) -> Result<String> {
        let tools = self.all_tools().await?;
        if tools.iter().any(|t| t.name == tool) {
            return Ok(tool.to_owned());
        }
        let mut hits: Vec<&ToolRow> = tools.iter().filter(|t| t.tool == tool).collect();
        hits.dedup_by(|a, b| a.server == b.server);
        match hits.as_slice() {
            [one] => Ok(one.name.clone()),
            // `pinning: block` holds tools back: the daemon's refusal names
            // the tool's server and the approve command.
            [] if self.withholds_tools().await => Ok(tool.to_owned()),
            [] => {
                // A server that is not ready has no tools listed; say which
                // one, and why, rather than only that the name is unknown.
                let down = self.servers_down().await.unwrap_or_default();
                let sep = self.separator().await;
                let owner = down.iter().find(|(name, _)| {
                    tool.strip_prefix(name.as_str())
                        .is_some_and(|rest| rest.starts_with(&sep))
                });
                match (owner, down.as_slice()) {
                    (Some((_, why)), _) => bail!("no tool named {tool:?}: {why}"),
                    (None, []) => bail!("no tool named {tool:?}; `mcphost tools` lists them"),
                    // `mcphost servers` would ask the daemon, which does not
                    // run these servers: say why here.
                    (None, down) if matches!(self, Backend::Direct { .. }) => {
                        let whys: Vec<&str> = down.iter().map(|(_, w)| w.as_str()).collect();
                        bail!("no tool named {tool:?}; {}", whys.join("; "))
                    }
                    (None, down) => {
                        let names: Vec<&str> = down.iter().map(|(n, _)| n.as_str()).collect();
                        bail!(
                            "no tool named {tool:?}; not ready: {} (`mcphost servers` says why)",
                            names.join(", ")
                        )
                    }
                }
            }
            many => {
                let names: Vec<&str> = many.iter().map(|t| t.name.as_str()).collect();
                bail!(
                    "{tool:?} is offered by several servers; use one of: {}",
                    names.join(", ")
                )
            }
        }
    }

    /// Whether a server withholds tools that drifted from their pins.
    async fn withholds_tools(&self) -> bool {
        let list = self.request("mcphost/servers/list", None).await;
        list.ok()
            .and_then(|l| l.as_array().cloned())
            .into_iter()
            .flatten()
            .any(|s| s["pins"]["withheld"].as_u64().is_some_and(|n| n > 0))
    }

    /// The `namespacing.separator` in force (the default for a daemon too
    /// old to say).
    pub async fn separator(&self) -> String {
        self.request("mcphost/status", None)
            .await
            .ok()
            .and_then(|s| s["separator"].as_str().map(str::to_owned))
            .unwrap_or_else(|| mcphost::config::Namespacing::default().separator)
    }

    /// An error unless `name` is a server the daemon has (the names it has,
    /// and the one meant when it looks like a typo).
    pub async fn check_server(&self, name: &str) -> Result<()> {
        let list = self.request("mcphost/servers/list", None).await?;
        let names: Vec<&str> = list
            .as_array()
            .map(|a| a.iter().filter_map(|s| s["name"].as_str()).collect())
            .unwrap_or_default();
        if names.contains(&name) {
            return Ok(());
        }
        let meant = mcphost::config::did_you_mean(name, &names)
            .map(|m| format!(" (did you mean {m:?}?)"))
            .unwrap_or_default();
        if names.is_empty() {
            bail!("no server {name:?}{meant}; the config has none");
        }
        bail!(
            "no server {name:?}{meant}; the servers are: {}",
            names.join(", ")
        )
    }

    /// Servers that are neither ready nor disabled, with why.
    async fn servers_down(&self) -> Result<Vec<(String, String)>> {
        let list = self.request("mcphost/servers/list", None).await?;
        let servers = list.as_array().cloned().unwrap_or_default();
        Ok(servers
            .iter()
            .filter(|s| !matches!(s["state"].as_str(), Some("ready" | "disabled")))
            .filter_map(|s| {
                let name = s["name"].as_str()?.to_owned();
                let state = s["state"].as_str().unwrap_or("unknown");
                let why = match s["error"].as_str() {
                    Some(e) => format!("server '{name}' is {state}: {e}"),
                    None => format!("server '{name}' is {state}"),
                };
                Some((name, why))
            })
            .collect())
    }

    pub async fn call(
        &self,
        name: &str,
        args: Option<Box<RawValue>>,
        timeout: Option<Duration>,
    ) -> Result<Box<RawValue>> {
        let mut p = serde_json::json!({ "name": name });
        let params = match args {
            Some(a) => {
                mcphost::protocol::set_fields(Some(&to_raw(&p)?), [("arguments".to_owned(), a)])?
            }
            None => {
                p["arguments"] = serde_json::json!({});
                to_raw(&p)?
            }
        };
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return self.raw("tools/call", Some(params), timeout).await;
        }
        // On a terminal, a long call shows the server's progress.
        match self {
            Backend::Daemon(_) => {
                let show: mcphost::jsonrpc::ProgressCallback =
                    Arc::new(|p| show_progress(p.progress, p.total, p.message.as_deref()));
                self.raw_with("tools/call", Some(params), timeout, Some(show))
                    .await
            }
            Backend::Direct { .. } => {
                let token = to_raw("mcphost-cli")?;
                let params = mcphost::protocol::set_meta(
                    Some(&params),
                    [("progressToken".to_owned(), token)],
                )?;
                self.raw("tools/call", Some(params), timeout).await
            }
        }
    }
}

/// One progress line on stderr: `progress 3/10 (30%): message`.
fn show_progress(progress: f64, total: Option<f64>, message: Option<&str>) {
    let mut line = match total {
        Some(t) if t > 0.0 => format!(
            "progress {progress}/{t} ({:.0}%)",
            (progress / t * 100.0).clamp(0.0, 100.0)
        ),
        _ => format!("progress {progress}"),
    };
    if let Some(m) = message {
        line.push_str(": ");
        line.push_str(m);
    }
    eprintln!("mcphost: {line}");
}

/// OAuth for this process: the user's token store; sign-in pages through
/// `MCPHOST_BROWSER`, the system browser, or (`terminal`) printed.
pub fn auth_context(terminal: bool) -> Result<mcphost::auth::AuthContext> {
    let chain = mcphost::auth::browser::Chain::standard(None, terminal);
    let browser: Option<Arc<dyn mcphost::auth::browser::Browser>> =
        (!chain.is_empty()).then(|| Arc::new(chain) as _);
    mcphost::auth::AuthContext::from_env(browser).map_err(|e| anyhow!(e))
}

/// How long `--direct` waits for its servers to be ready.
const DIRECT_START_LIMIT: Duration = Duration::from_secs(60);

/// Build a config from `--direct` specs. Unnamed servers are named after
/// their `serverInfo.name`, which takes a short probe to learn.
pub async fn direct_config(specs: &[String]) -> Result<HostConfig> {
    let mut cfg = HostConfig::default();
    let mut taken: Vec<String> = Vec::new();
    for spec in specs {
        let (name, rest) = match spec.split_once('=') {
            Some((n, r))
                if !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                (Some(n.to_owned()), r)
            }
            _ => (None, spec.as_str()),
        };
        let transport = if rest.starts_with("http://") || rest.starts_with("https://") {
            TransportConfig::Http(mcphost::config::HttpServer {
                url: rest.to_owned(),
                headers: Default::default(),
                kind: mcphost::config::HttpMode::Auto,
                oauth: Default::default(),
            })
        } else {
            let words = shell_words::split(rest)
                .with_context(|| format!("--direct {spec:?}: cannot split the command line"))?;
            let Some((command, args)) = words.split_first() else {
                bail!("--direct {spec:?}: empty command");
            };
            TransportConfig::Stdio(StdioServer {
                command: command.clone(),
                args: args.to_vec(),
                env: Default::default(),
                cwd: None,
                inherit_env: false,
                sandbox: None,
            })
        };
        let name = match name {
            Some(n) => n,
            None => match probe_name(&transport).await {
                Some(n) => n,
                None => fallback_name(&transport),
            },
        };
        let mut unique = name.clone();
        let mut n = 2;
        while taken.contains(&unique) {
            unique = format!("{name}-{n}");
            n += 1;
        }
        taken.push(unique.clone());
        cfg.servers.push(ServerConfig {
            name: unique,
            alias: None,
            disabled: false,
            transport,
            tools: ToolFilter::default(),
            timeouts: Timeouts::default(),
            roots: Vec::new(),
            share: Default::default(),
            offer: Default::default(),
            protocol_version: None,
            start: Default::default(),
            idle_timeout: None,
            hygiene: Default::default(),
            pinning: Default::default(),
        });
    }
    Ok(cfg)
}

/// A name for a server whose probe failed: its command's file name.
fn fallback_name(t: &TransportConfig) -> String {
    let stem = match t {
        TransportConfig::Stdio(s) => Path::new(&s.command)
            .file_stem()
            .map(|f| sanitize(&f.to_string_lossy())),
        TransportConfig::Http(_) => None,
    };
    stem.filter(|n| !n.is_empty())
        .unwrap_or_else(|| "server".to_owned())
}

/// `serverInfo.name`, sanitized to `[A-Za-z0-9_-]`.
async fn probe_name(t: &TransportConfig) -> Option<String> {
    let TransportConfig::Stdio(s) = t else {
        // Named after the host: learning serverInfo.name would cost the
        // server an extra session (and confuse single-client test servers).
        let TransportConfig::Http(h) = t else {
            return None;
        };
        return h
            .url
            .split("://")
            .nth(1)
            .and_then(|r| r.split(['/', ':']).next())
            .map(sanitize);
    };
    let conn = mcphost::transport::stdio::spawn(
        "probe",
        &mcphost::registry::from_config::stdio_config(s, &Timeouts::default()),
    )
    .await
    .ok()?;
    let client = ServerClient::connect("probe", conn, ClientOptions::default())
        .await
        .ok()?;
    let name = client.negotiated().server_name.clone();
    client.shutdown().await;
    name.map(|n| sanitize(&n)).filter(|n| !n.is_empty())
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .trim_matches('-')
        .to_owned()
}
