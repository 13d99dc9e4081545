//! Table-driven: bad configs fail with `file:line: field: reason`, and every
//! problem in a file is reported, not just the first.

use std::path::{Path, PathBuf};

use mcphost::config::{ConfigError, parse};

const FILE: &str = "/cfg/config.json";

fn env(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("/home/tester".into()),
        "TOKEN" => Some("t0k3n".into()),
        _ => None,
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

/// (case, config text, expected substrings of the error's Display)
const CASES: &[(&str, &str, &[&str])] = &[
    (
        "not JSON",
        "{\n  \"mcpServers\": {\n    \"x\": {\"command\": \"a\"\n  }\n",
        &["/cfg/config.json:", "not valid JSON"],
    ),
    (
        "single quotes are not JSON",
        "{'mcpServers': {}}",
        &["/cfg/config.json:1:2: not valid JSON"],
    ),
    (
        "top level not an object",
        "[1, 2]",
        &["/cfg/config.json:1: the config must be a JSON object, found an array"],
    ),
    (
        "servers not an object",
        "{\n  \"mcpServers\": []\n}",
        &["/cfg/config.json:2: mcpServers: must be an object, found an array"],
    ),
    (
        "server not an object",
        "{\"mcpServers\": {\n  \"x\": \"npx foo\"\n}}",
        &["/cfg/config.json:2: mcpServers.x: must be an object, found a string"],
    ),
    (
        "command wrong type",
        "{\n  \"mcpServers\": {\n    \"x\": {\n      \"command\": 5\n    }\n  }\n}",
        &["/cfg/config.json:4: mcpServers.x.command: must be a non-empty string"],
    ),
    (
        "empty command, VS Code shape",
        "{\n  \"servers\": {\n    \"x\": {\n      \"type\": \"stdio\",\n      \"command\": \"\"\n    }\n  }\n}",
        &["/cfg/config.json:5: servers.x.command: must be a non-empty string"],
    ),
    (
        "command empty after interpolation",
        "{\"mcpServers\": {\"x\": {\"command\": \"${EMPTY:-}\"}}}",
        &["/cfg/config.json:1: mcpServers.x.command: is empty after interpolation"],
    ),
    (
        "args wrong types",
        "{\"mcpServers\": {\n\"x\": {\"command\": \"a\", \"args\": \"-y foo\"},\n\"y\": {\"command\": \"a\", \"args\": [\"ok\", 3, null]}\n}}",
        &[
            "/cfg/config.json:2: mcpServers.x.args: must be an array, found a string",
            "/cfg/config.json:3: mcpServers.y.args[1]: must be a string, found a number",
            "/cfg/config.json:3: mcpServers.y.args[2]: must be a string, found null",
        ],
    ),
    (
        "env wrong types",
        "{\"mcpServers\": {\"x\": {\n\"command\": \"a\",\n\"env\": {\"PORT\": 8080, \"A=B\": \"x\"}\n}}}",
        &[
            "/cfg/config.json:3: mcpServers.x.env.PORT: must be a string, found a number",
            "/cfg/config.json:3: mcpServers.x.env[\"A=B\"]: is not a valid name",
        ],
    ),
    (
        "booleans",
        "{\"loginShellPath\": \"yes\", \"mcpServers\": {\"x\": {\"command\": \"a\",\n\"disabled\": 1, \"inheritEnv\": \"true\"}}}",
        &[
            "/cfg/config.json:1: loginShellPath: must be true or false, found a string",
            "/cfg/config.json:2: mcpServers.x.disabled: must be true or false, found a number",
            "/cfg/config.json:2: mcpServers.x.inheritEnv: must be true or false, found a string",
        ],
    ),
    (
        "missing command and url",
        "{\n  \"mcpServers\": {\n    \"x\": {\"args\": [\"a\"]}\n  }\n}",
        &[
            "/cfg/config.json:3: mcpServers.x: needs \"command\" (a stdio server) or \"url\" (an HTTP server)",
        ],
    ),
    (
        "both command and url",
        "{\"mcpServers\": {\n  \"x\": {\"command\": \"a\", \"url\": \"https://h/mcp\"}\n}}",
        &["/cfg/config.json:2: mcpServers.x: has both \"command\" and \"url\""],
    ),
    (
        "stdio type without command",
        "{\"servers\": {\"x\": {\n\"type\": \"stdio\",\n\"url\": \"https://h/mcp\"\n}}}",
        &[
            "/cfg/config.json:1: servers.x.command: missing; a stdio server needs a command",
            "/cfg/config.json:3: servers.x.url: only applies to HTTP servers",
        ],
    ),
    (
        "http type with stdio keys",
        "{\"servers\": {\"x\": {\n\"type\": \"http\",\n\"args\": [],\n\"env\": {}\n}}}",
        &[
            "/cfg/config.json:1: servers.x.url: missing; an HTTP server needs a url",
            "/cfg/config.json:3: servers.x.args: only applies to stdio servers",
            "/cfg/config.json:4: servers.x.env: only applies to stdio servers",
        ],
    ),
    (
        "unknown type",
        "{\"servers\": {\"x\": {\n\"type\": \"websocket\", \"url\": \"wss://h\"}}}",
        &["/cfg/config.json:2: servers.x.type: \"websocket\" is not a server type"],
    ),
    (
        "url not http",
        "{\"servers\": {\"x\": {\"url\": \"ftp://h/?key=s3cret\"}}}",
        &["/cfg/config.json:1: servers.x.url: must be an http:// or https:// URL"],
    ),
    (
        "bad header",
        "{\"servers\": {\"x\": {\"url\": \"https://h\",\n\"headers\": {\"Bad Header\": \"v\", \"Auth\": 1}}}}",
        &[
            "/cfg/config.json:2: servers.x.headers[\"Bad Header\"]: is not a valid name",
            "/cfg/config.json:2: servers.x.headers.Auth: must be a string, found a number",
        ],
    ),
    (
        "bare number duration",
        "{\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"timeouts\": {\"request\": 30}}}}",
        &[
            "/cfg/config.json:2: mcpServers.x.timeouts.request: 30 has no unit; write \"30s\" or \"30000ms\"",
        ],
    ),
    (
        "unitless string duration",
        "{\"defaults\": {\"timeouts\": {\n\"init\": \"45\"}}}",
        &[
            "/cfg/config.json:2: defaults.timeouts.init: 45 has no unit; write \"45s\" or \"45000ms\"",
        ],
    ),
    (
        "unknown unit",
        "{\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"timeouts\": {\"shutdown\": \"3 fortnights\"}}}}",
        &[
            "/cfg/config.json:2: mcpServers.x.timeouts.shutdown: \"3 fortnights\" is not a duration (unknown time unit \"fortnights\"",
        ],
    ),
    (
        "duration wrong type and zero",
        "{\"mcpServers\": {\"x\": {\"command\": \"a\", \"timeouts\": {\n\"init\": true,\n\"request\": \"0s\"}}}}",
        &[
            "/cfg/config.json:2: mcpServers.x.timeouts.init: must be a duration like \"30s\", found a boolean",
            "/cfg/config.json:3: mcpServers.x.timeouts.request: must be greater than zero",
        ],
    ),
    (
        "request above maxRequest",
        "{\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"timeouts\": {\"request\": \"20m\"}}}}",
        &["/cfg/config.json:2: mcpServers.x.timeouts: request (20m) exceeds maxRequest (10m)"],
    ),
    (
        "missing variable names file, server and variable",
        "{\n  \"mcpServers\": {\n    \"github\": {\n      \"command\": \"npx\",\n      \"env\": {\"GITHUB_PERSONAL_ACCESS_TOKEN\": \"${GITHUB_TOKEN}\"}\n    }\n  }\n}",
        &[
            "/cfg/config.json:5: mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN: server \"github\": variable GITHUB_TOKEN is not set and has no default",
        ],
    ),
    (
        "missing variables in args and url",
        "{\"mcpServers\": {\n\"a\": {\"command\": \"x\", \"args\": [\"--k=${K1}${K2}\"]},\n\"b\": {\"url\": \"https://${HOST}/mcp\"}\n}}",
        &[
            "/cfg/config.json:2: mcpServers.a.args[0]: server \"a\": variables K1, K2 are not set",
            "/cfg/config.json:3: mcpServers.b.url: server \"b\": variable HOST is not set",
        ],
    ),
    (
        "bad references",
        "{\"mcpServers\": {\"x\": {\"command\": \"x\",\n\"args\": [\"${input:token}\", \"${OPEN\"]}}}",
        &[
            "/cfg/config.json:2: mcpServers.x.args[0]: server \"x\": unsupported reference \"${input:token}\"",
            "/cfg/config.json:2: mcpServers.x.args[1]: server \"x\": \"${\" without a closing \"}\"",
        ],
    ),
    (
        "both mcpServers and servers",
        "{\n  \"mcpServers\": {},\n  \"servers\": {}\n}",
        &[
            "/cfg/config.json:3: servers: both \"mcpServers\" and \"servers\" are present; keep one of them",
        ],
    ),
    (
        "bad alias",
        "{\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"alias\": \"my alias\"}, \"y\": {\"command\": \"a\", \"alias\": \"\"}}}",
        &[
            "/cfg/config.json:2: mcpServers.x.alias: must match [A-Za-z0-9_-]+",
            "/cfg/config.json:2: mcpServers.y.alias: must match [A-Za-z0-9_-]+",
        ],
    ),
    (
        "alias collides with a server name",
        "{\"mcpServers\": {\n\"gh\": {\"command\": \"a\"},\n\"github\": {\"command\": \"b\", \"alias\": \"gh\"}\n}}",
        &[
            "/cfg/config.json:3: mcpServers.github.alias: namespace prefix \"gh\" is already used by server \"gh\"",
        ],
    ),
    (
        "bad glob",
        "{\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"tools\": {\"allow\": [\"read_*\", \"[abc\"], \"deny\": \"write_*\"}}}}",
        &[
            "/cfg/config.json:2: mcpServers.x.tools.allow[1]: bad glob: error parsing glob '[abc'",
            "/cfg/config.json:2: mcpServers.x.tools.deny: must be an array, found a string",
        ],
    ),
    (
        "namespacing too small",
        "{\n\"namespacing\": {\"maxLength\": 20, \"reserve\": 10}\n}",
        &[
            "/cfg/config.json:2: namespacing: max length 20 minus reserve 10 leaves 10 characters for names; at least 12 are needed",
        ],
    ),
    (
        "namespacing reserve above maxLength",
        "{\"namespacing\": {\"reserve\": 100}}",
        &["namespacing: max length 64 minus reserve 100 leaves 0 characters"],
    ),
    (
        "namespacing wrong values",
        "{\"namespacing\": {\n\"separator\": \"\",\n\"maxLength\": -1,\n\"reserve\": 1.5}}",
        &[
            "/cfg/config.json:2: namespacing.separator: name separator \"\" must be non-empty and use only A-Z, a-z, 0-9, '_' and '-'",
            "/cfg/config.json:3: namespacing.maxLength: must be a non-negative integer",
            "/cfg/config.json:4: namespacing.reserve: must be a non-negative integer",
        ],
    ),
    (
        "envFile missing",
        "{\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"envFile\": \"nope.env\"}}}",
        &["/cfg/config.json:2: mcpServers.x.envFile: cannot read /cfg/nope.env: No such file"],
    ),
    (
        "duplicate server and key",
        "{\"mcpServers\": {\n\"x\": {\"command\": \"a\"},\n\"x\": {\"command\": \"b\",\n\"command\": \"c\"}}}",
        &["/cfg/config.json:3: mcpServers.x: duplicate server name"],
    ),
    (
        "duplicate key inside a server",
        "{\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"command\": \"b\"}}}",
        &["/cfg/config.json:2: mcpServers.x.command: duplicate key"],
    ),
    (
        "empty server name",
        "{\"mcpServers\": {\n\"\": {\"command\": \"a\"}}}",
        &["/cfg/config.json:2: mcpServers[\"\"]: server names must be non-empty"],
    ),
    (
        "loginShellPath in two places disagreeing",
        "{\"loginShellPath\": true,\n\"defaults\": {\"loginShellPath\": false}}",
        &["/cfg/config.json:2: defaults.loginShellPath: contradicts the top-level loginShellPath"],
    ),
    (
        "defaults with bad values",
        "{\"defaults\": {\n\"timeouts\": {\"request\": \"15m\"},\n\"inheritEnv\": \"no\"}}",
        &[
            "/cfg/config.json:2: defaults.timeouts: request (15m) exceeds maxRequest (10m)",
            "/cfg/config.json:3: defaults.inheritEnv: must be true or false, found a string",
        ],
    ),
    (
        "bad start and idleTimeout",
        "{\"defaults\": {\"start\": \"later\"},\n\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"start\": 1,\n\"idleTimeout\": 600,\n\"share\": \"shared\"},\n\"y\": {\"command\": \"b\", \"idleTimeout\": \"0s\"}}}",
        &[
            "/cfg/config.json:1: defaults.start: \"later\" is not one of \"eager\", \"lazy\"",
            "/cfg/config.json:3: mcpServers.x.start: must be a string",
            "/cfg/config.json:4: mcpServers.x.idleTimeout:",
            "/cfg/config.json:6: mcpServers.y.idleTimeout: must be longer than 0s",
        ],
    ),
];

#[test]
fn bad_configs_fail_with_located_messages() {
    let mut failures = Vec::new();
    for (case, text, expected) in CASES {
        match parse(text, Path::new(FILE), &env) {
            Ok(config) => failures.push(format!("{case}: parsed: {config:?}")),
            Err(err) => {
                let shown = err.to_string();
                for want in *expected {
                    if !shown.contains(want) {
                        failures.push(format!("{case}: missing {want:?} in:\n{shown}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_problem_is_reported_in_line_order() {
    let text = r#"{
  "mcpServers": {
    "a": {"command": ""},
    "b": {"url": 5},
    "c": {"command": "x", "timeouts": {"request": 30}},
    "ok": {"command": "fine"},
    "d": {"command": "x", "env": {"T": "${NOPE}"}}
  },
  "namespacing": {"maxLength": 10}
}"#;
    let err = parse(text, Path::new(FILE), &env).unwrap_err();
    let issues = err.issues();
    let lines: Vec<usize> = issues.iter().map(|i| i.line).collect();
    assert_eq!(lines, [3, 4, 5, 7, 9], "{err}");
    assert_eq!(err.to_string().lines().count(), 5, "{err}");
    assert_eq!(
        err.to_string().lines().next(),
        Some("/cfg/config.json:3: mcpServers.a.command: must be a non-empty string")
    );
    assert_eq!(issues[1].field, "mcpServers.b.url");
    assert_eq!(issues[1].message, "must be a non-empty string");
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let err = parse("{\n  \"a\": 1,\n  oops\n}", Path::new(FILE), &env).unwrap_err();
    match &err {
        ConfigError::Syntax { path, line, .. } => {
            assert_eq!(path.as_deref(), Some(Path::new(FILE)));
            assert_eq!(*line, 3);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("/cfg/config.json:3:3: not valid JSON"),
        "{err}"
    );
}

#[test]
fn malformed_env_file_lines_are_located_without_their_contents() {
    let path = fixtures().join("config.json");
    let text = "{\"mcpServers\": {\"x\": {\"command\": \"a\",\n\"envFile\": \"env/bad.env\"}}}";
    let err = parse(text, &path, &env).unwrap_err();
    let shown = err.to_string();
    let bad = fixtures().join("env/bad.env");
    for line in [2, 3, 4] {
        let want = format!(
            "{}:2: mcpServers.x.envFile: {}:{line}: ",
            path.display(),
            bad.display()
        );
        assert!(shown.contains(&want), "missing {want:?} in\n{shown}");
    }
    assert!(!shown.contains("no equals sign"), "{shown}");
    assert_eq!(err.issues().len(), 3);
}

#[test]
fn secrets_never_appear_in_errors() {
    let text = r#"{"mcpServers": {"x": {"url": "ftp://h/?key=${TOKEN}", "headers": {"A": "${TOKEN}", "B B": "${TOKEN}"}}}}"#;
    let err = parse(text, Path::new(FILE), &env).unwrap_err();
    assert!(!err.to_string().contains("t0k3n"), "{err}");
    assert!(!err.to_string().contains("key="), "{err}");
}

/// The config accepts exactly the namespacing the catalog honours: one rule
/// (`NamingRules::validate`), reported as `file:line: field: reason`.
#[test]
fn namespacing_is_checked_by_the_catalogs_naming_rule() {
    use mcphost::registry::catalog::NamingRules;
    let cases: &[(&str, usize, usize)] = &[
        ("__", 64, 0),
        ("-", 64, 0),
        ("_x-1", 64, 0),
        (".", 64, 0),
        ("::", 64, 0),
        ("é", 64, 0),
        ("__", 14, 0),
        ("__", 12, 0),
        ("__", 11, 0),
        ("__", 64, 52),
        ("__", 64, 53),
        ("", 64, 0),
    ];
    for &(separator, max_length, reserve) in cases {
        let rules = NamingRules {
            separator: separator.to_owned(),
            max_length,
            reserve,
        };
        let text = format!(
            "{{\n\"namespacing\": {{\n\"separator\": {},\n\"maxLength\": {max_length},\n\"reserve\": {reserve}}}}}",
            serde_json::json!(separator)
        );
        let parsed = parse(&text, Path::new(FILE), &env);
        match (rules.validate(), parsed) {
            (Ok(()), Ok(cfg)) => {
                assert_eq!(cfg.namespacing.separator, separator);
                assert_eq!(cfg.namespacing.max_length, max_length);
            }
            (Err(rule), Err(err)) => {
                let shown = err.to_string();
                assert_eq!(err.issues().len(), 1, "{shown}");
                assert!(shown.starts_with("/cfg/config.json:"), "{shown}");
                assert!(shown.contains(&rule.to_string()), "{rules:?}: {shown}");
            }
            (rule, parsed) => {
                panic!("{rules:?}: the catalog says {rule:?}, the config {parsed:?}")
            }
        }
    }
}

#[test]
fn an_unknown_pinned_revision_is_refused_with_the_known_ones() {
    let path = std::path::Path::new("/c/config.json");
    let err = mcphost::config::parse(
        "{\"mcpServers\":{\"a\":{\"command\":\"x\",\n\"protocolVersion\":\"2099-01-01\"}}}",
        path,
        &|_| None,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("config.json:2"), "{err}");
    assert!(err.contains("mcpServers.a.protocolVersion"), "{err}");
    assert!(err.contains("2025-11-25"), "{err}");
    let ok = mcphost::config::parse(
        r#"{"mcpServers":{"a":{"command":"x","protocolVersion":"2025-06-18"}}}"#,
        path,
        &|_| None,
    )
    .unwrap();
    assert_eq!(
        ok.servers[0].protocol_version,
        Some(mcphost::protocol::ProtocolVersion::V2025_06_18)
    );
}

/// Item 10: an unknown key is a warning that says which key was meant, and
/// a config whose servers key is misspelt says it names no servers.
#[test]
fn unknown_keys_suggest_the_known_one_and_a_misspelt_servers_key_is_named() {
    let env = |_: &str| None;
    let path = std::path::Path::new("/cfg/config.json");
    let cfg = mcphost::config::parse(
        "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"x\", \"disable\": true }\n  }\n}",
        path,
        &env,
    )
    .unwrap();
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        w,
        [
            "/cfg/config.json:3: mcpServers.a.disable: unknown key, ignored; did you mean \"disabled\"?"
        ]
    );
    let cfg = mcphost::config::parse(
        "{\n  \"mcpServer\": {\n    \"a\": { \"command\": \"x\" }\n  }\n}",
        path,
        &env,
    )
    .unwrap();
    let w: Vec<String> = cfg.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        w,
        [
            "/cfg/config.json:2: mcpServer: unknown key, ignored; did you mean \"mcpServers\"? (as written, the config names no servers)"
        ]
    );
    // A key far from every known one gets no guess.
    let cfg = mcphost::config::parse(r#"{"mcpServers": {}, "zzzzqqq": 1}"#, path, &env).unwrap();
    assert_eq!(
        cfg.warnings[0].to_string(),
        "/cfg/config.json:1: zzzzqqq: unknown key, ignored"
    );
}
