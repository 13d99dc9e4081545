//! Helpers shared by integration tests.
#![allow(dead_code)]

pub mod bridge;
pub mod http_fault;
pub mod http_server;
pub mod oauth_server;
pub mod uid;
pub mod wait;
pub mod wire;

use std::path::PathBuf;
use std::time::Duration;

use mcphost::client::{CallOptions, ClientError, ClientOptions, ServerClient};
use mcphost::transport::stdio::{StdioConfig, spawn};

pub const TESTSERVER: &str = env!("CARGO_BIN_EXE_mcphost-testserver");

pub fn testserver(args: &[&str]) -> StdioConfig {
    let mut cfg = StdioConfig::new(
        TESTSERVER.to_owned(),
        args.iter().map(|s| s.to_string()).collect::<Vec<String>>(),
    );
    cfg.stdin_close_grace = Duration::from_secs(2);
    cfg
}

/// Restarts quick enough for tests that crash or stop servers.
pub fn quick_policy() -> mcphost::registry::supervisor::RestartPolicy {
    mcphost::registry::supervisor::RestartPolicy {
        initial_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_secs(1),
        reset_after: Duration::from_secs(60),
        max_start_failures: 3,
    }
}

pub fn quick_opts() -> ClientOptions {
    ClientOptions {
        init_timeout: Duration::from_secs(20),
        request_timeout: Duration::from_secs(20),
        ..Default::default()
    }
}

pub async fn try_connect(
    name: &str,
    cfg: StdioConfig,
    opts: ClientOptions,
) -> Result<ServerClient, ClientError> {
    let conn = spawn(name, &cfg)
        .await
        .map_err(|e| ClientError::Transport {
            server: name.to_owned(),
            reason: e.to_string(),
        })?;
    ServerClient::connect(name, conn, opts).await
}

pub async fn connect(name: &str, args: &[&str]) -> ServerClient {
    try_connect(name, testserver(args), quick_opts())
        .await
        .unwrap_or_else(|e| panic!("connect {name} {args:?}: {e}"))
}

/// The bundled test server works through `c`: its 9 tools are listed and
/// `echo` answers (`what` names the case in a failure).
pub async fn lists_and_echoes(c: &ServerClient, what: &str) {
    assert_eq!(c.list_tools().await.unwrap().len(), 9, "{what}");
    let r = c
        .call_tool(
            "echo",
            Some(raw(r#"{"text":"ok"}"#)),
            mcphost::client::CallOptions::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{what}: echo: {e}"));
    assert!(r.raw.get().contains("ok"), "{what}: {}", r.raw.get());
}

/// A file the test server appends every received line to.
pub struct RequestLog {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl RequestLog {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.log");
        RequestLog { _dir: dir, path }
    }
    pub fn arg(&self) -> String {
        self.path.display().to_string()
    }
    pub fn lines(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
    pub fn methods(&self) -> Vec<String> {
        self.lines()
            .iter()
            .filter_map(|v| v["method"].as_str().map(str::to_owned))
            .collect()
    }
    /// Wait until a line with this method has been logged.
    pub async fn wait_for(&self, method: &str) -> serde_json::Value {
        for _ in 0..200 {
            if let Some(v) = self.lines().into_iter().find(|v| v["method"] == method) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "{method} never reached the server; got {:?}",
            self.methods()
        );
    }
}

pub fn raw(s: &str) -> Box<mcphost::protocol::RawValue> {
    mcphost::protocol::RawValue::from_string(s.to_owned()).unwrap()
}

// ---------------------------------------------------------------------------
// The real `mcphost` binary: a daemon guard and CLI runners (tests/it/daemon.rs,
// tests/it/cli.rs).

pub const MCPHOST: &str = env!("CARGO_BIN_EXE_mcphost");

/// Calls `f` every 50 ms until it returns `Some`, or panics after `limit`
/// saying what never happened.
pub fn poll<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if std::time::Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where the pinned real servers are (see tests/it/interop.rs).
pub struct Interop {
    pub dir: PathBuf,
    pub python: PathBuf,
    pub node: String,
}

/// The installed real servers. The tests that use them are
/// `#[ignore = "needs the interop servers: …"]`, so a clone without them
/// lists them as ignored; run on purpose (`--run-ignored all`, as
/// scripts/test.sh does), a missing install is a failure, never a pass.
pub fn interop() -> Interop {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os("MCPHOST_INTEROP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("tests/interop"));
    let python = std::env::var_os("MCPHOST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/bin/python"));
    let node = std::env::var("MCPHOST_NODE").unwrap_or_else(|_| "node".to_owned());
    assert!(
        dir.join("node_modules/@modelcontextprotocol/server-memory")
            .exists()
            && python.exists(),
        "interop servers are not installed ({} / {}); run scripts/setup-interop.sh",
        dir.display(),
        python.display()
    );
    Interop { dir, python, node }
}

impl Interop {
    /// `"command"`/`"args"` JSON members for an npm reference server.
    pub fn node_entry(&self, pkg: &str) -> String {
        let entry = self.dir.join(format!(
            "node_modules/@modelcontextprotocol/{pkg}/dist/index.js"
        ));
        format!(
            r#""command": {}, "args": [{}]"#,
            serde_json::json!(self.node),
            serde_json::json!(entry.display().to_string())
        )
    }
    /// `"command"`/`"args"` members for mcp-server-time from PyPI.
    pub fn time_entry(&self) -> String {
        format!(
            r#""command": {}, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]"#,
            serde_json::json!(self.python.display().to_string())
        )
    }
}

/// `cmd` with the environment a desktop app gives what it spawns: this
/// PATH and `home` as HOME, nothing else (no XDG_RUNTIME_DIR, no MCPHOST_*).
pub fn desktop_env<'a>(
    cmd: &'a mut std::process::Command,
    home: &std::path::Path,
) -> &'a mut std::process::Command {
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
}

/// A config with the bundled test server as `ts` (these args) and no
/// login-shell probe.
pub fn ts_config(args: &[&str]) -> String {
    format!(
        r#"{{ "loginShellPath": false, "mcpServers": {{ "ts": {{ "command": {}, "args": {} }} }} }}"#,
        js(TESTSERVER),
        serde_json::to_string(args).unwrap()
    )
}

/// `"command"`/`"args"` config members for the bundled test server.
pub fn ts_entry(args: &[&str]) -> String {
    format!(
        r#""command": {}, "args": {}"#,
        js(TESTSERVER),
        serde_json::to_string(args).unwrap()
    )
}

/// A config with these servers (name, JSON members), one per line, and no
/// login-shell probe.
pub fn servers_config(servers: &[(&str, String)]) -> String {
    let body: Vec<String> = servers
        .iter()
        .map(|(name, members)| format!("    {}: {{ {members} }}", js(name)))
        .collect();
    format!(
        "{{\n  // written by an mcphost test\n  \"loginShellPath\": false,\n  \"mcpServers\": {{\n{}\n  }}\n}}\n",
        body.join(",\n")
    )
}

/// A JSON string literal for `s` (for building config text).
pub fn js(s: &str) -> String {
    serde_json::json!(s).to_string()
}

/// Parses JSON into a `Value` for assertions. The test server's `lossless`
/// tool carries `1e400`, which `Value` cannot hold; it is read as `1e300`
/// here (byte-exact checks look at the raw text instead).
pub fn lenient_json(text: &str) -> serde_json::Value {
    serde_json::from_str(&text.replace("1e400", "1e300"))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The output of one `mcphost` run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        lenient_json(&self.stdout)
    }
    pub fn stderr_json(&self) -> serde_json::Value {
        serde_json::from_str(self.stderr.trim())
            .unwrap_or_else(|e| panic!("stderr is not one JSON object ({e}): {self:?}"))
    }
}

/// An isolated environment for the `mcphost` binary: its own HOME, socket
/// and config file in a temp dir.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub socket: PathBuf,
    pub config: PathBuf,
    pub env: Vec<(String, String)>,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let config_dir = dir.path().join("conf");
        std::fs::create_dir(&config_dir).unwrap();
        Sandbox {
            socket: dir.path().join("run/mcphost.sock"),
            config: config_dir.join("config.json"),
            home,
            dir,
            env: Vec::new(),
        }
    }

    /// `mcphost` with this sandbox's HOME, socket and config.
    pub fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(MCPHOST);
        c.env("HOME", &self.home)
            .env("MCPHOST_SOCKET", &self.socket)
            .env("MCPHOST_CONFIG", &self.config)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_STATE_HOME")
            .env_remove("MCPHOST_STATE_DIR")
            .env_remove("RUST_LOG")
            // Never the user's tokens, OAuth client or browser.
            .env_remove("XDG_DATA_HOME")
            .env_remove("MCPHOST_TOKEN_DIR")
            .env_remove("MCPHOST_TOKEN_STORE")
            .env_remove("MCPHOST_BROWSER")
            .env_remove("MCPHOST_OAUTH_CLIENT")
            .env_remove("MCPHOST_OAUTH_CLIENT_METADATA_URL")
            .env_remove("MCPHOST_OAUTH_TIMEOUT")
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            // A command that finds no daemon fails rather than leave one
            // behind; tests/it/autostart.rs turns this off.
            .env("MCPHOST_NO_AUTOSTART", "1")
            .env_remove("MCPHOST_TEST_FAKE_VERSION")
            .stdin(std::process::Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// Runs `mcphost ARGS` to completion (at most 60 s).
    pub fn run(&self, args: &[&str]) -> Run {
        let out = self
            .command()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running mcphost {args:?}: {e}"));
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs `mcphost --json ARGS`, which must succeed; its stdout as JSON.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let r = self.run(&a);
        assert_eq!(r.code, 0, "mcphost {a:?} failed: {r:?}");
        r.json()
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }

    /// Replaces the config the way editors do: a new file renamed over it.
    pub fn rename_config(&self, text: &str) {
        let tmp = self.config.with_extension("json.swp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.config).unwrap();
    }

    pub fn read_config(&self) -> String {
        std::fs::read_to_string(&self.config).unwrap()
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
    }
}

/// A running `mcphost daemon`; SIGTERMed (then SIGKILLed) and reaped on drop.
pub struct Daemon {
    pub sb: Sandbox,
    child: Option<std::process::Child>,
    pub log: PathBuf,
}

impl std::ops::Deref for Daemon {
    type Target = Sandbox;
    fn deref(&self) -> &Sandbox {
        &self.sb
    }
}

impl Daemon {
    /// Writes `config` and starts a daemon on it; returns once it answers.
    pub fn start(config: &str) -> Daemon {
        Daemon::start_in(Sandbox::new(), config)
    }

    pub fn start_in(sb: Sandbox, config: &str) -> Daemon {
        Daemon::spawn(sb, config, false, &[])
    }

    /// As [`Daemon::start`], with extra flags after `daemon`.
    pub fn start_with_flags(config: &str, flags: &[&str]) -> Daemon {
        Daemon::spawn(Sandbox::new(), config, false, flags)
    }

    /// As [`Daemon::start`], with `--config config.json` relative to the
    /// daemon's working directory.
    pub fn start_relative(config: &str) -> Daemon {
        Daemon::spawn(Sandbox::new(), config, true, &[])
    }

    fn spawn(sb: Sandbox, config: &str, relative: bool, flags: &[&str]) -> Daemon {
        sb.write_config(config);
        let log = sb.dir.path().join("daemon.log");
        let mut d = Daemon {
            sb,
            child: None,
            log,
        };
        d.launch(relative, flags);
        d
    }

    /// Starts the daemon process on the sandbox's config as it is now;
    /// returns once it answers.
    fn launch(&mut self, relative: bool, flags: &[&str]) {
        let mut cmd = self.sb.command();
        cmd.arg("daemon").args(flags).arg("--config");
        if relative {
            cmd.arg(self.sb.config.file_name().unwrap())
                .current_dir(self.sb.config.parent().unwrap());
        } else {
            cmd.arg(&self.sb.config);
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(
            cmd.stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        poll("the daemon to answer", Duration::from_secs(20), || {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited with {st} at start:\n{}", self.log_text());
            }
            (self.run(&["status"]).code == 0).then_some(())
        });
    }

    /// SIGKILLs the daemon (no clean-up of its own), then starts a new one
    /// on the same socket and config.
    pub fn crash_and_start_again(&mut self) {
        let mut child = self.child.take().expect("daemon already stopped");
        let _ = child.kill();
        let _ = child.wait();
        self.launch(false, &[]);
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon already stopped").id()
    }

    /// Its exit status once it has exited by itself (reaped), else `None`.
    pub fn child_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn servers(&self) -> Vec<serde_json::Value> {
        self.json(&["servers"]).as_array().unwrap().clone()
    }

    pub fn server(&self, name: &str) -> Option<serde_json::Value> {
        self.servers().into_iter().find(|s| s["name"] == name)
    }

    /// Waits until each named server is ready with its tools listed; their
    /// `servers --json` entries by name.
    pub fn wait_ready(
        &self,
        names: &[&str],
        limit: Duration,
    ) -> std::collections::HashMap<String, serde_json::Value> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let last = self.servers();
            let ready = names.iter().all(|n| {
                last.iter().any(|s| {
                    s["name"] == *n && s["state"] == "ready" && s["tools"].as_u64() > Some(0)
                })
            });
            if ready {
                return last
                    .into_iter()
                    .map(|s| (s["name"].as_str().unwrap().to_owned(), s))
                    .collect();
            }
            if std::time::Instant::now() >= deadline {
                panic!(
                    "servers {names:?} not ready after {limit:?}: {last:#?}\ndaemon log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM and waits up to `limit` for the exit; `None` if it is
    /// still running (it is then killed).
    pub fn terminate(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return Some(st);
            }
            if std::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.terminate(Duration::from_secs(10));
    }
}

/// Whether a process with this pid exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// The text of a CallToolResult's content, joined by newlines.
pub fn text_of(result: &serde_json::Value) -> String {
    result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content in {result}"))
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A host that enables sampling, elicitation and roots, with canned replies.
pub struct FullHost;

impl mcphost::client::Host for FullHost {
    fn capabilities(&self) -> mcphost::protocol::ClientCapabilities {
        use mcphost::protocol::capabilities::{ElicitationCap, RootsCap, SamplingCap};
        mcphost::protocol::ClientCapabilities {
            roots: Some(RootsCap {
                list_changed: false,
            }),
            sampling: Some(SamplingCap {}),
            elicitation: Some(ElicitationCap::default()),
        }
    }
    fn handle(
        &self,
        r: mcphost::client::HostRequest,
    ) -> mcphost::transport::BoxFuture<
        'static,
        Result<Box<mcphost::protocol::RawValue>, mcphost::protocol::ErrorObject>,
    > {
        let method = r.method.as_str();
        let reply = match method {
            "sampling/createMessage" => {
                r#"{"role":"assistant","content":{"type":"text","text":"sampled by the host"},"model":"host-model","stopReason":"endTurn"}"#
            }
            "elicitation/create" => r#"{"action":"decline"}"#,
            "roots/list" => r#"{"roots":[]}"#,
            _ => {
                return Box::pin(std::future::ready(Err(
                    mcphost::protocol::ErrorObject::method_not_found(method),
                )));
            }
        };
        Box::pin(std::future::ready(Ok(raw(reply))))
    }
}

/// The text parts of a raw tool result, joined by newlines.
pub fn raw_text_of(r: &mcphost::protocol::RawValue) -> String {
    let v: serde_json::Value = serde_json::from_str(r.get()).unwrap();
    text_of(&v)
}

/// Call options that count progress notifications.
pub fn progress_counter() -> (
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    mcphost::client::CallOptions,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    let o = mcphost::client::CallOptions {
        on_progress: Some(Arc::new(move |_| {
            n2.fetch_add(1, Ordering::SeqCst);
        })),
        ..Default::default()
    };
    (n, o)
}

/// One progress notification's (progress, total, message).
pub type ProgressSeen = (f64, Option<f64>, Option<String>);

/// Call options that record every progress notification.
pub fn progress_recorder() -> (
    std::sync::Arc<std::sync::Mutex<Vec<ProgressSeen>>>,
    mcphost::client::CallOptions,
) {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let o = mcphost::client::CallOptions {
        on_progress: Some(Arc::new(move |p: mcphost::jsonrpc::Progress| {
            s2.lock().unwrap().push((p.progress, p.total, p.message));
        })),
        ..Default::default()
    };
    (seen, o)
}

/// fastmcp's `slow` with 3 steps reports 1, 2, 3 of 3, in order.
pub fn assert_three_steps(seen: &[ProgressSeen]) {
    let want: Vec<_> = (1..=3)
        .map(|i| (f64::from(i), Some(3.0), Some(format!("step {i}/3"))))
        .collect();
    assert_eq!(seen, want, "one progress per step");
}

/// What py_server's `notify` tool must make a client do: re-fetch every
/// list in full (6 tools, 5 resources and 3 templates, 3 prompts) and pass
/// its log message on.
#[derive(Debug, Default)]
pub struct PyRelisted {
    pub tools: bool,
    pub resources: bool,
    pub prompts: bool,
    pub log: bool,
}

impl PyRelisted {
    pub fn see(&mut self, ev: &mcphost::client::ServerEvent) {
        use mcphost::client::ServerEvent;
        match ev {
            ServerEvent::ToolsChanged(t) => self.tools = t.len() == 6,
            ServerEvent::ResourcesChanged {
                resources,
                templates,
            } => self.resources = resources.len() == 5 && templates.len() == 3,
            ServerEvent::PromptsChanged(p) => self.prompts = p.len() == 3,
            ServerEvent::Log(_) => self.log = true,
            _ => {}
        }
    }

    pub fn all(&self) -> bool {
        self.tools && self.resources && self.prompts && self.log
    }
}

/// What tests/interop/fastmcp_server.py does the same way over every
/// transport (stdio, Streamable HTTP).
pub async fn exercise_fastmcp(c: &ServerClient) {
    let tools: Vec<_> = c
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(tools, ["echo", "add", "fail", "slow"]);
    assert_eq!(c.list_resources().await.unwrap().len(), 3);
    assert_eq!(c.list_resource_templates().await.unwrap().len(), 1);
    assert_eq!(c.list_prompts().await.unwrap().len(), 2);
    let r = c
        .call_tool(
            "echo",
            Some(raw(r#"{"text":"héllo ✓"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(raw_text_of(&r.raw), "héllo ✓");
    let r = c
        .call_tool(
            "add",
            Some(raw(r#"{"a":2,"b":3.5}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.structured_content().unwrap().get().contains("5.5"));
    let r = c
        .call_tool(
            "fail",
            Some(raw(r#"{"message":"boom"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.is_error);
    let (seen, o) = progress_recorder();
    c.call_tool("slow", Some(raw(r#"{"ms":300,"steps":3}"#)), o)
        .await
        .unwrap();
    assert_three_steps(&seen.lock().unwrap());
    let read = c
        .read_resource("fastmcp://item/7", CallOptions::default())
        .await
        .unwrap();
    assert!(read.get().contains("item-7"), "{}", read.get());
    let p = c
        .get_prompt(
            "greet",
            Some(raw(r#"{"name":"Ada"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(p.get().contains("Ada"));
}

/// What tests/interop/py_server.py (Python `mcp` SDK) offers, over any
/// transport: every list paged two at a time, structured output, isError,
/// progress, resources, prompts and completion.
pub async fn exercise_py_server(c: &ServerClient, version: &str) {
    use std::sync::atomic::Ordering;
    assert_eq!(
        c.negotiated().server_name.as_deref(),
        Some("mcphost-interop-py")
    );
    assert_eq!(c.negotiated().protocol_version.as_str(), version);
    let tools: Vec<_> = c
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(
        tools,
        ["echo", "add", "fail", "slow", "interview", "notify"]
    );
    assert_eq!(c.list_resources().await.unwrap().len(), 5);
    assert_eq!(c.list_resource_templates().await.unwrap().len(), 3);
    assert_eq!(c.list_prompts().await.unwrap().len(), 3);

    let add = raw(r#"{"a":2,"b":3.5}"#);
    let r = c
        .call_tool("add", Some(add), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(
        r.structured_content().unwrap().get().replace(' ', ""),
        r#"{"sum":5.5}"#
    );
    let boom = raw(r#"{"message":"boom"}"#);
    let r = c
        .call_tool("fail", Some(boom), CallOptions::default())
        .await
        .unwrap();
    assert!(r.is_error && raw_text_of(&r.raw).contains("boom"));
    let e = c
        .call_tool("nope", None, CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.rpc_error().map(|e| e.code), Some(-32602), "{e}");
    let (seen, o) = progress_counter();
    c.call_tool("slow", Some(raw(r#"{"ms":300,"steps":3}"#)), o)
        .await
        .unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 3);

    let e = c
        .read_resource("interop://nope", CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.rpc_error().map(|e| e.code), Some(-32002), "{e}");
    for (uri, has) in [
        ("interop://item/42", "item-42"),
        ("interop://static/blob", "AAECAwQFBgc="),
    ] {
        let read = c.read_resource(uri, CallOptions::default()).await.unwrap();
        assert!(read.get().contains(has), "{uri}: {}", read.get());
    }
    let greet = raw(r#"{"name":"Ada","style":"pirate"}"#);
    let p = c
        .get_prompt("greet", Some(greet), CallOptions::default())
        .await
        .unwrap();
    assert!(p.get().contains("Ahoy, Ada!"));
    let comp = c
        .complete(raw(
            r#"{"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"style","value":"f"}}"#,
        ))
        .await
        .unwrap();
    assert!(comp.get().contains("formal"));
}

/// Runs a child to completion within `limit`; past that it is killed and the
/// test fails.
pub fn output_within(mut cmd: std::process::Command, limit: Duration) -> std::process::Output {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) on a child we spawned and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{cmd:?} did not finish within {limit:?}");
        }
    }
}
