//! stdio transport: the environment a server sees. One test in its own binary,
//! because it changes this process's environment.

use std::collections::BTreeMap;

use mcphost::transport::TransportEvent;
use mcphost::transport::stdio::{StdioConfig, spawn};

async fn child_env(cfg: &StdioConfig) -> BTreeMap<String, String> {
    let mut conn = spawn("env", cfg).await.unwrap();
    let mut env = BTreeMap::new();
    loop {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), conn.inbound.recv())
            .await
            .unwrap()
            .unwrap();
        match event {
            TransportEvent::Frame(line) => {
                let (k, v) = line.split_once('=').unwrap();
                env.insert(k.to_owned(), v.to_owned());
            }
            TransportEvent::Closed(reason) => {
                assert!(reason.summary.contains("exited with status 0"), "{reason}");
                return env;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn minimal_env_by_default_full_env_on_request_configured_env_wins() {
    // SAFETY: the only test in this binary, run before any other thread exists.
    unsafe {
        std::env::set_var("MCPHOST_TEST_SECRET", "hunter2");
        std::env::set_var("LC_MCPHOST_TEST", "lc");
        std::env::set_var("XDG_MCPHOST_TEST", "xdg");
        std::env::set_var("HOME", "/home/original");
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut cfg = StdioConfig::new("env", Vec::<String>::new());
        cfg.env.insert("CONFIGURED".into(), "yes".into());
        cfg.env.insert("HOME".into(), "/home/configured".into());

        let minimal = child_env(&cfg).await;
        assert!(!minimal.contains_key("MCPHOST_TEST_SECRET"), "{minimal:?}");
        assert_eq!(minimal.get("PATH"), std::env::var("PATH").ok().as_ref());
        assert_eq!(minimal["LC_MCPHOST_TEST"], "lc");
        assert_eq!(minimal["XDG_MCPHOST_TEST"], "xdg");
        assert_eq!(minimal["CONFIGURED"], "yes");
        assert_eq!(minimal["HOME"], "/home/configured");
        let allowed = |k: &str| {
            [
                "PATH",
                "HOME",
                "USER",
                "LANG",
                "TMPDIR",
                "SHELL",
                "TERM",
                "CONFIGURED",
            ]
            .contains(&k)
                || k.starts_with("LC_")
                || k.starts_with("XDG_")
        };
        let extra: Vec<&String> = minimal.keys().filter(|k| !allowed(k)).collect();
        assert!(extra.is_empty(), "leaked: {extra:?}");

        cfg.inherit_env = true;
        let full = child_env(&cfg).await;
        assert_eq!(full["MCPHOST_TEST_SECRET"], "hunter2");
        assert_eq!(full["CONFIGURED"], "yes");
        assert_eq!(full["HOME"], "/home/configured");

        // A configured PATH is both what the child sees and where the command is looked up.
        let mut custom = StdioConfig::new("env", Vec::<String>::new());
        custom.env.insert("PATH".into(), "/usr/bin:/bin".into());
        assert_eq!(child_env(&custom).await["PATH"], "/usr/bin:/bin");
    });
}
