//! Helpers shared by integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use mcphost::client::{ClientError, ClientOptions, ServerClient};
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
