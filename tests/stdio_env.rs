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

const PROXY_AND_CERTS: &[(&str, &str)] = &[
    ("HTTPS_PROXY", "http://proxy.example:3128"),
    ("https_proxy", "http://proxy.example:3129"),
    ("HTTP_PROXY", "http://proxy.example:8080"),
    ("http_proxy", "http://proxy.example:8081"),
    ("NO_PROXY", "localhost,.corp"),
    ("no_proxy", "127.0.0.1"),
    ("SSL_CERT_FILE", "/etc/corp/ca.pem"),
    ("SSL_CERT_DIR", "/etc/corp/certs"),
    ("NODE_EXTRA_CA_CERTS", "/etc/corp/node-ca.pem"),
    ("REQUESTS_CA_BUNDLE", "/etc/corp/py-ca.pem"),
    ("DISPLAY", ":7"),
    ("WAYLAND_DISPLAY", "wayland-7"),
    ("XDG_RUNTIME_DIR", "/run/user/4242"),
];

#[test]
fn minimal_env_by_default_full_env_on_request_configured_env_wins() {
    // SAFETY: the only test in this binary, run before any other thread exists.
    unsafe {
        std::env::set_var("MCPHOST_TEST_SECRET", "hunter2");
        std::env::set_var("LC_MCPHOST_TEST", "lc");
        std::env::set_var("XDG_MCPHOST_TEST", "xdg");
        std::env::set_var("HOME", "/home/original");
        for (k, v) in PROXY_AND_CERTS {
            std::env::set_var(k, v);
        }
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
        // What npx/uvx servers behind a corporate proxy, or with a GUI, need.
        for &(k, v) in PROXY_AND_CERTS {
            assert_eq!(minimal.get(k).map(String::as_str), Some(v), "{k}");
        }
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
                || PROXY_AND_CERTS.iter().any(|(p, _)| *p == k)
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
