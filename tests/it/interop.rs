//! Interop over stdio with MCP servers nobody here wrote: the reference
//! servers from npm (everything, filesystem, memory), mcp-server-time from
//! PyPI, and two small servers on the Python `mcp` SDK and on fastmcp.
//!
//! The tests are ignored unless asked for: `scripts/test.sh` installs the
//! servers (pinned) and runs them with `--run-ignored all`; a missing server
//! is then a failure.

use crate::common;
use crate::everything;

use std::sync::Arc;
use std::time::Duration;

use common::{FullHost, Interop, interop, raw, raw_text_of as text_of};
use mcphost::client::{CallOptions, ClientError, ClientOptions, ServerClient, ServerEvent};
use mcphost::protocol::ProtocolVersion;
use mcphost::transport::stdio::{StdioConfig, spawn};

/// Launch configs for the interop servers.
trait Launch {
    fn node_server(&self, pkg: &str, args: &[&str]) -> StdioConfig;
    fn python(&self, args: &[&str]) -> StdioConfig;
    fn script(&self, name: &str) -> String;
}

impl Launch for Interop {
    fn node_server(&self, pkg: &str, args: &[&str]) -> StdioConfig {
        let entry = self.dir.join(format!(
            "node_modules/@modelcontextprotocol/{pkg}/dist/index.js"
        ));
        let mut a = vec![entry.display().to_string()];
        a.extend(args.iter().map(|s| s.to_string()));
        StdioConfig::new(self.node.clone(), a)
    }
    fn python(&self, args: &[&str]) -> StdioConfig {
        StdioConfig::new(
            self.python.display().to_string(),
            args.iter().map(|s| s.to_string()).collect::<Vec<String>>(),
        )
    }
    fn script(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

fn opts() -> ClientOptions {
    ClientOptions {
        init_timeout: Duration::from_secs(60),
        request_timeout: Duration::from_secs(30),
        ..Default::default()
    }
}

async fn start(name: &str, cfg: StdioConfig, o: ClientOptions) -> ServerClient {
    let conn = spawn(name, &cfg).await.unwrap_or_else(|e| panic!("{e}"));
    ServerClient::connect(name, conn, o)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn everything_server() {
    let env = interop();
    let c = start(
        "everything",
        env.node_server("server-everything", &["stdio"]),
        opts(),
    )
    .await;
    everything::exercise(&c, String::new).await;
    c.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn everything_server_calls_back_into_the_host() {
    let env = interop();
    let o = ClientOptions {
        host: Arc::new(FullHost),
        ..opts()
    };
    let c = start(
        "everything-host",
        env.node_server("server-everything", &["stdio"]),
        o,
    )
    .await;
    everything::calls_back_into_the_host(&c, "stdio").await;
    c.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn filesystem_server() {
    let env = interop();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\nworld\n").unwrap();
    let root = dir.path().canonicalize().unwrap().display().to_string();
    let c = start("fs", env.node_server("server-filesystem", &[&root]), opts()).await;
    assert_eq!(
        c.negotiated().server_name.as_deref(),
        Some("secure-filesystem-server")
    );
    let tools = c.list_tools().await.unwrap();
    assert!(tools.len() >= 10 && tools.iter().any(|t| t.name == "read_text_file"));
    let args = format!(r#"{{"path":"{root}/a.txt"}}"#);
    let r = c
        .call_tool("read_text_file", Some(raw(&args)), CallOptions::default())
        .await
        .unwrap();
    assert!(text_of(&r.raw).contains("hello\nworld"));
    assert!(r.structured_content().is_some());
    let args = format!(r#"{{"path":"{root}/new.txt","content":"written by mcphost"}}"#);
    let r = c
        .call_tool("write_file", Some(raw(&args)), CallOptions::default())
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.raw.get());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("new.txt")).unwrap(),
        "written by mcphost"
    );
    let r = c
        .call_tool(
            "read_text_file",
            Some(raw(r#"{"path":"/etc/passwd"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        r.is_error && text_of(&r.raw).contains("denied"),
        "{}",
        r.raw.get()
    );
    // It declares only tools: the rest is refused locally, never sent.
    assert!(matches!(
        c.list_resources().await,
        Err(ClientError::CapabilityNotDeclared { .. })
    ));
    assert!(matches!(
        c.list_prompts().await,
        Err(ClientError::CapabilityNotDeclared { .. })
    ));
    c.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn filesystem_server_that_exits_before_speaking_reports_its_stderr() {
    let env = interop();
    let cfg = env.node_server("server-filesystem", &["/definitely/not/here"]);
    let conn = spawn("fs-bad", &cfg).await.unwrap();
    let e = ServerClient::connect("fs-bad", conn, opts())
        .await
        .err()
        .expect("must fail");
    let text = e.to_string();
    assert!(text.contains("fs-bad") && text.contains("exited"), "{text}");
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn memory_server() {
    let env = interop();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = env.node_server("server-memory", &[]);
    cfg.env.insert(
        "MEMORY_FILE_PATH".into(),
        dir.path().join("memory.jsonl").display().to_string(),
    );
    let c = start("memory", cfg, opts()).await;
    assert_eq!(c.list_tools().await.unwrap().len(), 9);
    let resources = c.list_resources().await.unwrap();
    assert_eq!(resources.len(), 1);
    let uri = resources[0].uri.clone();
    let mut events = c.subscribe();
    c.subscribe_resource(&uri).await.unwrap();
    let r = c
        .call_tool(
            "create_entities",
            Some(raw(r#"{"entities":[{"name":"Ada","entityType":"person","observations":["wrote the first program"]}]}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.structured_content().unwrap().get().contains("Ada"));
    let updated = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let ServerEvent::ResourceUpdated { uri: u } = events.recv().await.unwrap() {
                break u;
            }
        }
    })
    .await
    .expect("no resources/updated within 10 s");
    assert_eq!(updated, uri);
    let r = c
        .call_tool(
            "search_nodes",
            Some(raw(r#"{"query":"program"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.raw.get().contains("Ada"));
    let r = c
        .call_tool(
            "add_observations",
            Some(raw(
                r#"{"observations":[{"entityName":"Nobody","contents":["x"]}]}"#,
            )),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.is_error);
    let read = c.read_resource(&uri, CallOptions::default()).await.unwrap();
    assert!(read.get().contains("Ada"));
    assert!(matches!(
        c.list_prompts().await,
        Err(ClientError::CapabilityNotDeclared { .. })
    ));
    c.shutdown().await;
    assert!(
        std::fs::read_to_string(dir.path().join("memory.jsonl"))
            .unwrap()
            .contains("Ada")
    );
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn time_server() {
    let env = interop();
    let c = start(
        "time",
        env.python(&["-m", "mcp_server_time", "--local-timezone", "UTC"]),
        opts(),
    )
    .await;
    assert_eq!(c.negotiated().server_name.as_deref(), Some("mcp-time"));
    let names: Vec<_> = c
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["get_current_time", "convert_time"]);
    let r = c
        .call_tool(
            "get_current_time",
            Some(raw(r#"{"timezone":"Europe/Paris"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        r.structured_content()
            .unwrap()
            .get()
            .contains("Europe/Paris")
    );
    let r = c
        .call_tool(
            "convert_time",
            Some(raw(
                r#"{"source_timezone":"UTC","time":"12:30","target_timezone":"Asia/Tokyo"}"#,
            )),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.raw.get().contains("+9.0h"), "{}", r.raw.get());
    let r = c
        .call_tool(
            "get_current_time",
            Some(raw(r#"{"timezone":"Not/AZone"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(r.is_error);
    let e = c
        .call_tool("nope", None, CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.rpc_error().map(|e| e.code), Some(-32602), "{e}");
    assert!(c.list_resources().await.unwrap().is_empty());
    assert!(c.list_prompts().await.unwrap().is_empty());
    assert!(matches!(
        c.set_log_level("info").await,
        Err(ClientError::CapabilityNotDeclared { .. })
    ));
    c.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn python_sdk_server_with_pagination() {
    let env = interop();
    // Unpinned, the SDK's server negotiates the stateless revision (probed
    // with server/discover); pinned, the handshake. Same results either way.
    for (pin, version) in [
        (None, "2026-07-28"),
        (Some(ProtocolVersion::V2025_11_25), "2025-11-25"),
    ] {
        let o = ClientOptions {
            protocol_version: pin,
            ..opts()
        };
        let c = start("py", env.python(&[&env.script("py_server.py")]), o).await;
        common::exercise_py_server(&c, version).await;

        // list_changed from a real SDK: the client re-lists on its own
        // (handshake: notifications; stateless: subscriptions/listen).
        let mut events = c.subscribe();
        c.set_log_level("info").await.unwrap();
        c.call_tool("notify", Some(raw("{}")), CallOptions::default())
            .await
            .unwrap();
        let mut seen = common::PyRelisted::default();
        while !seen.all() {
            let ev = tokio::time::timeout(Duration::from_secs(10), events.recv())
                .await
                .unwrap_or_else(|_| panic!("{version}: {seen:?}"))
                .unwrap();
            seen.see(&ev);
        }
        c.shutdown().await;
    }
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn fastmcp_server() {
    let env = interop();
    let c = start(
        "fastmcp",
        env.python(&[&env.script("fastmcp_server.py")]),
        opts(),
    )
    .await;
    assert_eq!(
        c.negotiated().server_name.as_deref(),
        Some("mcphost-interop-fastmcp")
    );
    common::exercise_fastmcp(&c).await;
    c.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn many_real_servers_at_once_and_one_dies() {
    let env = interop();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap().display().to_string();
    let (a, b, t) = tokio::join!(
        start(
            "everything",
            env.node_server("server-everything", &[]),
            opts()
        ),
        start("fs", env.node_server("server-filesystem", &[&root]), opts()),
        start(
            "time",
            env.python(&["-m", "mcp_server_time", "--local-timezone", "UTC"]),
            opts()
        ),
    );
    // Kill one server's whole group from outside.
    let pid = b.pid().unwrap() as i32;
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let e = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match b.list_tools().await {
                Err(e) => break e,
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
    .expect("calls to the killed server still succeed after 15 s");
    assert!(e.to_string().contains("fs"), "{e}");
    let r = a
        .call_tool(
            "echo",
            Some(raw(r#"{"message":"still here"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(text_of(&r.raw), "Echo: still here");
    let r = t
        .call_tool(
            "get_current_time",
            Some(raw(r#"{"timezone":"UTC"}"#)),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(!r.is_error);
    for c in [a, b, t] {
        c.shutdown().await;
    }
}
