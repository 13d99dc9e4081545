//! Good configs parse to the expected model; locating the file; the model's
//! helpers (tool filter, redaction, conversion to the transport's config).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mcphost::client::ClientOptions;
use mcphost::config::{
    ConfigError, ConfigLocation, ConfigSource, HostConfig, HttpMode, HttpServer, Namespacing,
    ServerConfig, StdioServer, Timeouts, ToolFilter, TransportConfig, default_config_path, load,
    load_from, parse, resolve_config_path_with,
};
use mcphost::registry::from_config::{apply_timeouts, stdio_config, stdio_config_with_path};

const FILE: &str = "/cfg/config.json";

fn env(name: &str) -> Option<String> {
    let value = match name {
        "HOME" => "/home/tester",
        "GITHUB_TOKEN" => "ghp_secret123",
        "DOCS_TOKEN" => "docs_secret456",
        "REMOTE_TOKEN" => "remote_secret789",
        "EMPTY" => "",
        "REGION" => "from-process-env",
        _ => return None,
    };
    Some(value.to_owned())
}

fn parse_ok(text: &str) -> HostConfig {
    parse(text, Path::new(FILE), &env).unwrap_or_else(|e| panic!("{e}"))
}

fn stdio(command: &str, args: &[&str]) -> StdioServer {
    StdioServer {
        command: command.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
        inherit_env: false,
        sandbox: None,
    }
}

fn server(name: &str, transport: TransportConfig) -> ServerConfig {
    ServerConfig {
        name: name.into(),
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
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn claude_desktop_shape() {
    let config = parse_ok(
        r#"{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}
    }
  }
}"#,
    );
    let mut github = stdio("npx", &["-y", "@modelcontextprotocol/server-github"]);
    github.env = map(&[("GITHUB_PERSONAL_ACCESS_TOKEN", "ghp_secret123")]);
    let expected = HostConfig {
        path: Some(PathBuf::from(FILE)),
        servers: vec![
            server(
                "filesystem",
                TransportConfig::Stdio(stdio(
                    "npx",
                    &[
                        "-y",
                        "@modelcontextprotocol/server-filesystem",
                        "/Users/me/Desktop",
                    ],
                )),
            ),
            server("github", TransportConfig::Stdio(github)),
        ],
        namespacing: Namespacing::default(),
        login_shell_path: true,
        roots: Vec::new(),
        host_timeouts: Default::default(),
        model_view: Default::default(),
        daemon: Default::default(),
        audit: Default::default(),
        warnings: Vec::new(),
        broken: Vec::new(),
    };
    assert_eq!(config, expected);
}

#[test]
fn vscode_shape_with_types() {
    let config = parse_ok(
        r#"{
  "inputs": [{"type": "promptString", "id": "token"}],
  "servers": {
    "memory": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
    "docs": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${env:DOCS_TOKEN}"}},
    "stream": {"type": "streamable-http", "url": "https://s.example.com/mcp"},
    "legacy": {"type": "sse", "url": "http://localhost:8080/sse"},
    "inferred": {"url": "HTTPS://i.example.com/mcp"}
  }
}"#,
    );
    let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["memory", "docs", "stream", "legacy", "inferred"]);
    let http = |name: &str| match &config.server(name).unwrap().transport {
        TransportConfig::Http(h) => h.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        http("docs"),
        HttpServer {
            url: "https://mcp.example.com/mcp".into(),
            headers: map(&[("Authorization", "Bearer docs_secret456")]),
            kind: HttpMode::Auto,
            oauth: Default::default(),
        }
    );
    assert_eq!(http("stream").kind, HttpMode::Streamable);
    assert_eq!(http("legacy").kind, HttpMode::Sse);
    assert_eq!(http("inferred").kind, HttpMode::Auto);
    assert!(matches!(
        config.server("memory").unwrap().transport,
        TransportConfig::Stdio(_)
    ));
    // "inputs" is VS Code's; we warn and go on.
    assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
    assert_eq!(
        config.warnings[0].to_string(),
        "/cfg/config.json:2: inputs: unknown key, ignored"
    );
}

#[test]
fn comments_trailing_commas_and_empty_documents() {
    let config = parse_ok(
        "// leading\n{\n  /* block */\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\", \"args\": [\"1\",],}, // trailing\n  },\n}\n// end\n",
    );
    assert_eq!(
        config.servers,
        vec![server("a", TransportConfig::Stdio(stdio("x", &["1"])))]
    );
    for empty in ["", "  \n", "// nothing yet\n", "{}", "{\"mcpServers\": {}}"] {
        let config = parse_ok(empty);
        assert!(config.servers.is_empty(), "{empty:?}");
        assert!(config.login_shell_path);
    }
}

#[test]
fn defaults_apply_unless_overridden() {
    let config = parse_ok(
        r#"{
  "loginShellPath": false,
  "defaults": {"timeouts": {"request": "30s", "shutdown": "500ms"}, "inheritEnv": true},
  "namespacing": {"separator": "-", "maxLength": 48, "reserve": 8},
  "mcpServers": {
    "plain": {"command": "a"},
    "own": {"command": "b", "inheritEnv": false, "timeouts": {"init": "2m", "shutdown": "0s", "maxRequest": "1h"}}
  }
}"#,
    );
    assert!(!config.login_shell_path);
    assert_eq!(
        config.namespacing,
        Namespacing {
            separator: "-".into(),
            max_length: 48,
            reserve: 8
        }
    );
    let plain = config.server("plain").unwrap();
    assert_eq!(
        plain.timeouts,
        Timeouts {
            request: Duration::from_secs(30),
            init: Duration::from_secs(60),
            max_request: Duration::from_secs(600),
            shutdown: Duration::from_millis(500),
        }
    );
    let TransportConfig::Stdio(s) = &plain.transport else {
        panic!()
    };
    assert!(s.inherit_env);
    let own = config.server("own").unwrap();
    assert_eq!(
        own.timeouts,
        Timeouts {
            request: Duration::from_secs(30),
            init: Duration::from_secs(120),
            max_request: Duration::from_secs(3600),
            shutdown: Duration::ZERO,
        }
    );
    let TransportConfig::Stdio(s) = &own.transport else {
        panic!()
    };
    assert!(!s.inherit_env);

    let nested = parse_ok(r#"{"defaults": {"loginShellPath": false}}"#);
    assert!(!nested.login_shell_path);
}

#[test]
fn interpolation_everywhere() {
    let config = parse_ok(
        r#"{"mcpServers": {
  "s": {
    "command": "${userHome}/bin/server",
    "args": ["--token=${GITHUB_TOKEN}", "${MISSING:-fallback}", "${EMPTY:-was-empty}", "$${GITHUB_TOKEN}", "cost: $$5, $HOME"],
    "env": {"TOKEN": "${env:GITHUB_TOKEN}", "REGION": "${REGION:-x}"},
    "cwd": "${userHome}/work"
  },
  "h": {
    "url": "https://${MISSING_HOST:-mcp.example.com}/mcp",
    "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}
  }
}}"#,
    );
    let TransportConfig::Stdio(s) = &config.server("s").unwrap().transport else {
        panic!()
    };
    assert_eq!(s.command, "/home/tester/bin/server");
    assert_eq!(
        s.args,
        [
            "--token=ghp_secret123",
            "fallback",
            "was-empty",
            "${GITHUB_TOKEN}",
            "cost: $5, $HOME"
        ]
    );
    assert_eq!(
        s.env,
        map(&[("TOKEN", "ghp_secret123"), ("REGION", "from-process-env")])
    );
    assert_eq!(s.cwd.as_deref(), Some(Path::new("/home/tester/work")));
    let TransportConfig::Http(h) = &config.server("h").unwrap().transport else {
        panic!()
    };
    assert_eq!(h.url, "https://mcp.example.com/mcp");
    assert_eq!(h.headers["Authorization"], "Bearer remote_secret789");
}

#[test]
fn env_file_relative_to_config_env_wins() {
    let dir = repo().join("tests/fixtures/config");
    let text = r#"{"mcpServers": {"x": {
  "command": "a",
  "envFile": "${ENV_DIR:-env}/good.env",
  "env": {"OVERRIDDEN": "env-value"},
  "cwd": "sub/dir"
}}}"#;
    let config = parse(text, &dir.join("config.json"), &env).unwrap();
    let TransportConfig::Stdio(s) = &config.servers[0].transport else {
        panic!()
    };
    assert_eq!(
        s.env,
        map(&[
            ("API_KEY", "from-file"),
            ("REGION", "eu-west-1"),
            ("QUOTED", "two words"),
            ("LITERAL", "${NOT_EXPANDED} $$"),
            ("OVERRIDDEN", "env-value"),
        ])
    );
    assert_eq!(s.cwd.as_deref(), Some(dir.join("sub/dir").as_path()));
}

#[test]
fn disabled_servers_may_lack_their_secrets() {
    let config = parse_ok(
        r#"{"mcpServers": {
  "off": {"command": "a", "disabled": true, "env": {"T": "${NOT_SET}"}, "envFile": "missing.env"},
  "offhttp": {"url": "${NOT_SET_URL}", "disabled": true},
  "on": {"command": "b"}
}}"#,
    );
    let off = config.server("off").unwrap();
    assert!(off.disabled);
    let TransportConfig::Stdio(s) = &off.transport else {
        panic!()
    };
    assert_eq!(s.env["T"], "${NOT_SET}");
    assert_eq!(config.warnings.len(), 3, "{:?}", config.warnings);
    let shown: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    for want in [
        "mcpServers.off.envFile: cannot read /cfg/missing.env",
        "mcpServers.off.env.T: server \"off\": variable NOT_SET is not set and has no default (server is disabled)",
        "mcpServers.offhttp.url: server \"offhttp\": variable NOT_SET_URL is not set",
    ] {
        assert!(
            shown.iter().any(|w| w.contains(want)),
            "{want} not in {shown:#?}"
        );
    }
    let enabled: Vec<&str> = config.enabled_servers().map(|s| s.name.as_str()).collect();
    assert_eq!(enabled, ["on"]);
    // Structural mistakes are still errors.
    assert!(
        parse(
            r#"{"mcpServers": {"off": {"disabled": true, "command": 1}}}"#,
            Path::new(FILE),
            &env
        )
        .is_err()
    );
}

#[test]
fn unknown_keys_warn_with_location() {
    let config = parse_ok(
        "{\n\"$schema\": \"x\",\n\"future\": 1,\n\"mcpServers\": {\"a\": {\"command\": \"x\",\n\"autoApprove\": [],\n\"tools\": {\"allow\": [], \"maybe\": 1}}}}",
    );
    let shown: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        shown,
        [
            "/cfg/config.json:3: future: unknown key, ignored",
            "/cfg/config.json:5: mcpServers.a.autoApprove: unknown key, ignored",
            "/cfg/config.json:6: mcpServers.a.tools.maybe: unknown key, ignored",
        ]
    );
}

#[test]
fn aliases_and_tool_filters() {
    let config = parse_ok(
        r#"{"mcpServers": {
  "github": {"command": "a", "alias": "gh", "tools": {"allow": ["get_*", "list_*"], "deny": ["*secret*"]}},
  "fs": {"command": "b", "tools": {"deny": ["write_*", "delete_?ile"]}},
  "x": {"command": "c", "alias": "fs2"}
}}"#,
    );
    let gh = config.server("github").unwrap();
    assert_eq!(gh.alias.as_deref(), Some("gh"));
    assert_eq!(gh.prefix(), "gh");
    assert_eq!(config.server("fs").unwrap().prefix(), "fs");
    let t = &gh.tools;
    assert_eq!(t.allow(), ["get_*", "list_*"]);
    assert!(t.allows("get_issue"));
    assert!(t.allows("list_repos/with.dots"));
    assert!(!t.allows("create_issue"));
    assert!(!t.allows("get_secret_key"), "deny wins");
    let t = &config.server("fs").unwrap().tools;
    assert!(t.allows("read_file"), "empty allow allows all");
    assert!(!t.allows("write_file"));
    assert!(!t.allows("delete_file"));
    assert!(t.allows("delete_files"));
    assert!(ToolFilter::default().allows("anything"));
    assert!(ToolFilter::default().is_allow_all());

    // Equality looks at the patterns only.
    let a = ToolFilter::new(vec!["a*".into()], vec![]).unwrap();
    assert_eq!(a, ToolFilter::new(vec!["a*".into()], vec![]).unwrap());
    assert_ne!(a, ToolFilter::new(vec!["b*".into()], vec![]).unwrap());
    assert!(ToolFilter::new(vec!["[".into()], vec![]).is_err());
}

#[test]
fn debug_output_redacts_secrets() {
    let config = parse_ok(
        r#"{"mcpServers": {
  "s": {"command": "a", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}},
  "h": {"url": "https://h.example/mcp?api_key=${DOCS_TOKEN}", "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}}
}}"#,
    );
    let shown = format!("{config:?} {config:#?}");
    for secret in [
        "ghp_secret123",
        "docs_secret456",
        "remote_secret789",
        "api_key",
    ] {
        assert!(!shown.contains(secret), "{secret} leaked: {shown}");
    }
    assert!(shown.contains("GITHUB_PERSONAL_ACCESS_TOKEN"), "{shown}");
    assert!(shown.contains("Authorization"), "{shown}");
    assert!(
        shown.contains("https://h.example/mcp?<redacted>"),
        "{shown}"
    );
}

#[test]
fn conversion_to_transport_and_client_options() {
    let mut s = stdio("npx", &["-y", "x"]);
    s.env = map(&[("A", "1")]);
    s.cwd = Some("/tmp".into());
    s.inherit_env = true;
    let timeouts = Timeouts {
        request: Duration::from_secs(5),
        init: Duration::from_secs(6),
        max_request: Duration::from_secs(7),
        shutdown: Duration::from_millis(800),
    };
    let cfg = stdio_config(&s, &timeouts);
    assert_eq!(cfg.command, "npx");
    assert_eq!(cfg.args, ["-y", "x"]);
    assert_eq!(cfg.env, map(&[("A", "1")]));
    assert_eq!(cfg.cwd.as_deref(), Some(Path::new("/tmp")));
    assert!(cfg.inherit_env);
    assert_eq!(cfg.stdin_close_grace, Duration::from_millis(800));
    assert_eq!(cfg.sigterm_grace, Duration::from_millis(800));

    let with_path = stdio_config_with_path(&s, &timeouts, "/login/bin:/usr/bin");
    assert_eq!(with_path.env["PATH"], "/login/bin:/usr/bin");
    s.env.insert("PATH".into(), "/mine".into());
    assert_eq!(
        stdio_config_with_path(&s, &timeouts, "/login/bin").env["PATH"],
        "/mine"
    );

    let mut options = ClientOptions::default();
    apply_timeouts(&timeouts, &mut options);
    assert_eq!(options.request_timeout, Duration::from_secs(5));
    assert_eq!(options.init_timeout, Duration::from_secs(6));
    assert_eq!(options.max_request_timeout, Duration::from_secs(7));
}

#[test]
fn locating_the_file() {
    let default = Some(PathBuf::from("/home/u/.config/mcphost/config.json"));
    let no_env = |_: &str| None;
    let with_env = |name: &str| (name == "MCPHOST_CONFIG").then(|| "/etc/mcphost.json".to_owned());
    let empty_env = |name: &str| (name == "MCPHOST_CONFIG").then(String::new);

    let flag =
        resolve_config_path_with(Some("/flag.json".into()), &with_env, default.clone()).unwrap();
    assert_eq!(
        flag,
        ConfigLocation {
            path: "/flag.json".into(),
            source: ConfigSource::Flag
        }
    );
    let from_env = resolve_config_path_with(None, &with_env, default.clone()).unwrap();
    assert_eq!(from_env.path, Path::new("/etc/mcphost.json"));
    assert_eq!(from_env.source, ConfigSource::Env);
    for env in [&no_env as &dyn Fn(&str) -> Option<String>, &empty_env] {
        let dflt = resolve_config_path_with(None, env, default.clone()).unwrap();
        assert_eq!(dflt.source, ConfigSource::Default);
        assert_eq!(dflt.path, default.clone().unwrap());
    }
    assert!(matches!(
        resolve_config_path_with(None, &no_env, None),
        Err(ConfigError::NoConfigDir)
    ));

    let path = default_config_path().expect("a home directory");
    assert!(path.ends_with("mcphost/config.json"), "{}", path.display());
}

#[test]
fn missing_file_is_empty_only_at_the_default_location() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("config.json");
    let at = |source| ConfigLocation {
        path: missing.clone(),
        source,
    };
    let config = load_from(&at(ConfigSource::Default), &env).unwrap();
    assert!(config.servers.is_empty());
    assert_eq!(config.path.as_deref(), Some(missing.as_path()));
    for source in [ConfigSource::Flag, ConfigSource::Env] {
        let err = load_from(&at(source), &env).unwrap_err();
        assert!(matches!(&err, ConfigError::Read { .. }), "{err:?}");
        assert!(
            err.to_string().contains("config.json: cannot read"),
            "{err}"
        );
    }

    std::fs::write(
        &missing,
        r#"{"mcpServers": {"a": {"command": "x", "envFile": "a.env"}}}"#,
    )
    .unwrap();
    std::fs::write(dir.path().join("a.env"), "K=v\n").unwrap();
    let config = load_from(&at(ConfigSource::Flag), &env).unwrap();
    let TransportConfig::Stdio(s) = &config.servers[0].transport else {
        panic!()
    };
    assert_eq!(s.env["K"], "v");
    // A relative path works too, and is reported absolute.
    let config = load(&missing, &env).unwrap();
    assert!(config.path.unwrap().is_absolute());
}

#[test]
fn shipped_examples_load() {
    let examples = repo().join("config/examples");
    let mut count = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let config = load(&path, &env).unwrap_or_else(|e| panic!("{e}"));
            assert!(!config.servers.is_empty(), "{}", path.display());
            assert!(config.warnings.is_empty(), "{:?}", config.warnings);
            count += 1;
        }
    }
    assert!(count >= 3);
    let full = load(&examples.join("full.json"), &env).unwrap();
    let gh = full.server("github").unwrap();
    assert_eq!(gh.timeouts.request, Duration::from_secs(120));
    assert!(full.server("scratch").unwrap().disabled);
    let TransportConfig::Stdio(s) = &full.server("scratch").unwrap().transport else {
        panic!()
    };
    assert_eq!(s.args, ["--data", "/tmp/scratch", "--price=$5"]);

    // The schema is JSON and names every top-level key the parser knows.
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("config/mcphost.schema.json")).unwrap(),
    )
    .unwrap();
    for key in [
        "mcpServers",
        "servers",
        "defaults",
        "namespacing",
        "loginShellPath",
    ] {
        assert!(
            schema["properties"].get(key).is_some(),
            "schema lacks {key}"
        );
    }
}

#[test]
fn oauth_settings_are_parsed_interpolated_and_checked() {
    let config = parse_ok(
        r#"{"mcpServers": {
            "app": {"url": "https://a/mcp", "oauth": {
                "clientId": "mcphost-app", "clientSecret": "${GITHUB_TOKEN}", "issuer": "https://github.com/login/oauth",
                "tokenEndpointAuthMethod": "client_secret_post", "scope": "read write",
                "clientMetadataUrl": "https://me.example/client.json"}},
            "machine": {"url": "https://m/mcp", "oauth": {"clientId": "svc", "clientSecret": "x", "grantType": "client_credentials"}},
            "off": {"url": "https://o/mcp", "oauth": false},
            "plain": {"url": "https://p/mcp"}
        }}"#,
    );
    let oauth = |name: &str| match &config.server(name).unwrap().transport {
        TransportConfig::Http(h) => h.oauth.clone(),
        other => panic!("{other:?}"),
    };
    let mcphost::config::OAuthSetting::Client(app) = oauth("app") else {
        panic!("app");
    };
    assert_eq!(app.client_id.as_deref(), Some("mcphost-app"));
    assert_eq!(
        app.client_secret.as_ref().map(|s| s.expose()),
        Some("ghp_secret123")
    );
    assert_eq!(
        app.token_endpoint_auth_method.as_deref(),
        Some("client_secret_post")
    );
    assert_eq!(app.scope.as_deref(), Some("read write"));
    assert_eq!(
        app.issuer.as_deref(),
        Some("https://github.com/login/oauth")
    );
    // Debug output of the config never shows the secret.
    assert!(!format!("{config:?}").contains("ghp_secret123"));
    let mcphost::config::OAuthSetting::Client(m) = oauth("machine") else {
        panic!("machine");
    };
    assert_eq!(m.grant_type.as_deref(), Some("client_credentials"));
    assert_eq!(oauth("off"), mcphost::config::OAuthSetting::Disabled);
    assert_eq!(oauth("plain"), mcphost::config::OAuthSetting::default());

    for (bad, field, says) in [
        (
            r#"{"tokenEndpointAuthMethod": "magic"}"#,
            "oauth.tokenEndpointAuthMethod",
            "must be one of",
        ),
        (
            r#"{"grantType": "password"}"#,
            "oauth.grantType",
            "authorization_code",
        ),
        (
            r#"{"clientMetadataUrl": "http://x/c.json"}"#,
            "oauth.clientMetadataUrl",
            "https://",
        ),
        (
            r#"{"grantType": "client_credentials"}"#,
            "oauth",
            "needs a clientId",
        ),
        (r#"{"clientId": 7}"#, "oauth.clientId", "non-empty string"),
        (
            r#"{"clientId": "c", "issuer": "http://as.example"}"#,
            "oauth.issuer",
            "https://",
        ),
        (
            r#"{"privateKeyFile": "no-such.pem"}"#,
            "oauth.privateKeyFile",
            "cannot read",
        ),
        (r#""yes""#, "oauth", "must be an object"),
    ] {
        let text =
            format!(r#"{{"mcpServers": {{"s": {{"url": "https://s/mcp", "oauth": {bad}}}}}}}"#);
        let e = parse(&text, Path::new(FILE), &env).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn a_workload_identity_is_a_token_file_or_a_command_for_a_client_id() {
    use mcphost::auth::wif::WorkloadToken;
    let config = parse_ok(
        r#"{"mcpServers": {
            "k8s": {"url": "https://a/mcp", "oauth": {"clientId": "wl", "issuer": "https://as.example",
                "workloadIdentity": {"tokenFile": "sa/token"}}},
            "gcp": {"url": "https://b/mcp", "oauth": {"clientId": "wl",
                "workloadIdentity": {"tokenCommand": ["gcloud", "auth", "print-identity-token", "${GITHUB_TOKEN}"]}}}
        }}"#,
    );
    let oauth = |name: &str| match &config.server(name).unwrap().transport {
        TransportConfig::Http(h) => match &h.oauth {
            mcphost::config::OAuthSetting::Client(c) => c.as_ref().clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    let k = oauth("k8s");
    assert_eq!(
        k.workload,
        Some(WorkloadToken::File("/cfg/sa/token".into())),
        "relative to the config"
    );
    assert_eq!(
        k.grant_type.as_deref(),
        Some(mcphost::auth::grant::JWT_BEARER)
    );
    assert_eq!(
        oauth("gcp").workload,
        Some(WorkloadToken::Command(vec![
            "gcloud".into(),
            "auth".into(),
            "print-identity-token".into(),
            "ghp_secret123".into()
        ]))
    );
    for (bad, field, says) in [
        (
            r#"{"workloadIdentity": {"tokenFile": "t"}}"#,
            "oauth",
            "needs the clientId",
        ),
        (
            r#"{"clientId": "c", "grantType": "client_credentials", "workloadIdentity": {"tokenFile": "t"}}"#,
            "oauth",
            "leave grantType out",
        ),
        (
            r#"{"clientId": "c", "workloadIdentity": {}}"#,
            "oauth.workloadIdentity",
            "one of tokenFile or tokenCommand",
        ),
        (
            r#"{"clientId": "c", "workloadIdentity": {"tokenFile": "t", "tokenCommand": ["x"]}}"#,
            "oauth.workloadIdentity",
            "one of tokenFile or tokenCommand",
        ),
        (
            r#"{"clientId": "c", "workloadIdentity": {"tokenCommand": []}}"#,
            "oauth.workloadIdentity.tokenCommand",
            "must name a program",
        ),
        (
            r#"{"clientId": "c", "workloadIdentity": "t"}"#,
            "oauth.workloadIdentity",
            "must be an object",
        ),
    ] {
        let text =
            format!(r#"{{"mcpServers": {{"s": {{"url": "https://s/mcp", "oauth": {bad}}}}}}}"#);
        let e = parse(&text, Path::new(FILE), &env).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn daemon_autostart_defaults_on_and_is_a_checked_boolean() {
    assert!(parse_ok("{}").daemon.autostart);
    assert!(
        !parse_ok(r#"{"daemon": {"autostart": false}}"#)
            .daemon
            .autostart
    );
    let err = parse(r#"{"daemon": {"autostart": "no"}}"#, Path::new(FILE), &env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("daemon.autostart"), "{err}");
    // An unknown key inside `daemon` is a warning, like elsewhere.
    let cfg = parse_ok(r#"{"daemon": {"autostart": true, "autostrat": 1}}"#);
    assert!(
        cfg.warnings
            .iter()
            .any(|w| w.to_string().contains("autostrat")),
        "{:?}",
        cfg.warnings
    );
}

/// The config's own HTTP mode reaches the transport as the same mode, and an
/// entry that sends its own Authorization header, or says `"oauth": false`,
/// has no OAuth client to sign in with.
#[test]
fn an_http_entry_becomes_the_transports_config_and_its_oauth_client() {
    use mcphost::transport::http::HttpMode as Wire;
    let config = parse_ok(
        r#"{ "servers": {
    "own": {"type": "sse", "url": "https://a.example/sse", "headers": {"authorization": "Bearer x"}},
    "off": {"type": "streamable-http", "url": "https://b.example/mcp", "oauth": false},
    "signs_in": {"url": "https://c.example/mcp", "oauth": {"clientId": "c1"}}
  } }"#,
    );
    let http = |name: &str| match &config.server(name).unwrap().transport {
        TransportConfig::Http(h) => h.clone(),
        other => panic!("{other:?}"),
    };
    let timeouts = Timeouts::default();
    let wire = |name: &str| mcphost::registry::from_config::http_config(&http(name), &timeouts);
    assert_eq!(wire("own").mode, Wire::Sse);
    assert_eq!(wire("off").mode, Wire::Streamable);
    assert_eq!(wire("signs_in").mode, Wire::Auto);
    assert_eq!(
        wire("own").headers,
        [("authorization".to_owned(), "Bearer x".to_owned())]
    );
    assert!(http("own").oauth_client().is_none());
    assert!(http("off").oauth_client().is_none());
    assert_eq!(
        http("signs_in")
            .oauth_client()
            .and_then(|c| c.client_id.as_deref()),
        Some("c1")
    );
}
