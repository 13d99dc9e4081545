//! Golden tests for `config::edit`: the user's text survives byte for byte.
//!
//! Each case reads `tests/fixtures/config/edit/<input>.input.jsonc`, applies
//! one edit and compares with `<case>.expected.jsonc`. After a deliberate
//! change in output, regenerate with `MCPHOST_BLESS=1 cargo test --test
//! config_edit` and review the diff.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use mcphost::config::edit::{add_server, remove_server, write_atomic};
use mcphost::config::{ConfigError, HostConfig, TransportConfig, parse};

enum Op {
    Add(&'static str, &'static str),
    Remove(&'static str),
}

const FETCH: &str =
    r#"{"command":"uvx","args":["mcp-server-fetch"],"env":{"TOKEN":"${FETCH_TOKEN}"}}"#;
const NPX: &str = r#"{"command": "npx", "args": ["-y", "x"]}"#;

const CASES: &[(&str, &str, Op)] = &[
    (
        "add_claude_comments",
        "claude_comments",
        Op::Add("fetch", FETCH),
    ),
    (
        "add_vscode",
        "vscode_servers",
        Op::Add(
            "git",
            r#"{"type":"stdio","command":"uvx","args":["mcp-server-git","--repository","${userHome}/src/repo"]}"#,
        ),
    ),
    ("add_empty_object", "empty_object", Op::Add("x", NPX)),
    ("add_empty_file", "empty_file", Op::Add("x", NPX)),
    ("add_no_servers_key", "no_servers_key", Op::Add("x", NPX)),
    ("add_empty_servers", "empty_servers", Op::Add("x", NPX)),
    ("add_crlf", "crlf", Op::Add("b", NPX)),
    (
        "add_nested_entry",
        "nested",
        Op::Add(
            "api",
            r#"{"url":"https://x.example/mcp","headers":{"Authorization":"Bearer ${API_KEY}"},"tools":{"allow":["get_*"],"deny":[]},"timeouts":{"request":"45s"},"disabled":false,"weight":1.50}"#,
        ),
    ),
    ("remove_first", "claude_comments", Op::Remove("github")),
    (
        "remove_middle_with_comment",
        "claude_comments",
        Op::Remove("filesystem"),
    ),
    (
        "remove_last_trailing_comma",
        "claude_comments",
        Op::Remove("remote"),
    ),
    (
        "remove_vscode_last",
        "vscode_servers",
        Op::Remove("weather"),
    ),
    ("remove_nested_middle", "nested", Op::Remove("deep")),
    ("remove_only", "only_server", Op::Remove("solo")),
    ("remove_crlf", "crlf", Op::Remove("a")),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config/edit")
}

fn input(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(format!("{name}.input.jsonc"))).unwrap()
}

fn apply(text: &str, op: &Op) -> Result<String, ConfigError> {
    match op {
        Op::Add(name, entry) => add_server(text, name, entry),
        Op::Remove(name) => remove_server(text, name),
    }
}

fn env(name: &str) -> Option<String> {
    Some(format!("<{name}>"))
}

fn parsed(text: &str) -> HostConfig {
    parse(text, Path::new("/cfg/config.json"), &env).unwrap()
}

#[test]
fn golden_outputs() {
    let bless = std::env::var_os("MCPHOST_BLESS").is_some();
    let mut failures = Vec::new();
    for (case, input_name, op) in CASES {
        let text = input(input_name);
        let out = apply(&text, op).unwrap_or_else(|e| panic!("{case}: {e}"));
        let expected_path = fixtures().join(format!("{case}.expected.jsonc"));
        if bless {
            std::fs::write(&expected_path, &out).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{case}: {}: {e}", expected_path.display()));
        if out != expected {
            failures.push(format!("{case}:\n--- expected\n{expected}\n--- got\n{out}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Outside the edited member, the output is the input: what precedes it and
/// what follows it are byte-identical.
#[test]
fn untouched_text_is_byte_identical() {
    for (case, input_name, op) in CASES {
        let text = input(input_name);
        let out = apply(&text, op).unwrap();
        let prefix = text
            .bytes()
            .zip(out.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        let suffix = text
            .bytes()
            .rev()
            .zip(out.bytes().rev())
            .take_while(|(a, b)| a == b)
            .count()
            .min(text.len() - prefix)
            .min(out.len() - prefix);
        let changed_in = &text[prefix..text.len() - suffix];
        let changed_out = &out[prefix..out.len() - suffix];
        match op {
            Op::Add(name, _) => {
                assert!(
                    changed_in.trim().is_empty()
                        || changed_in.trim() == "{}"
                        || changed_in.trim() == ","
                        || text.trim().is_empty(),
                    "{case}: adding changed existing text {changed_in:?}"
                );
                assert!(changed_out.contains(&format!("\"{name}\"")), "{case}");
            }
            Op::Remove(name) => {
                assert!(out.len() < text.len(), "{case}");
                assert!(!out.contains(&format!("\"{name}\"")), "{case}");
                assert!(
                    changed_out.trim().is_empty() || changed_out.trim() == "{}",
                    "{case}: {changed_out:?}"
                );
            }
        }
    }
}

#[test]
fn results_parse_and_keep_references_unexpanded() {
    for (case, input_name, op) in CASES {
        let out = apply(&input(input_name), op).unwrap();
        let config = parsed(&out);
        match op {
            Op::Add(name, _) => assert!(config.server(name).is_some(), "{case}"),
            Op::Remove(name) => assert!(config.server(name).is_none(), "{case}"),
        }
    }
    let out = add_server(&input("claude_comments"), "fetch", FETCH).unwrap();
    assert!(out.contains(r#""TOKEN": "${FETCH_TOKEN}""#), "{out}");
    assert!(out.contains(r#""Bearer ${SECRET}""#), "{out}");
    assert!(out.contains(r#""${userHome}/projects""#), "{out}");
    let server = parsed(&out).server("fetch").cloned().unwrap();
    let TransportConfig::Stdio(stdio) = server.transport else {
        panic!("not stdio")
    };
    assert_eq!(stdio.env["TOKEN"], "<FETCH_TOKEN>");
}

#[test]
fn add_then_remove_restores_the_original() {
    for name in ["claude_comments", "vscode_servers", "nested", "crlf"] {
        let text = input(name);
        let added = add_server(&text, "tmp", NPX).unwrap();
        assert_eq!(remove_server(&added, "tmp").unwrap(), text, "{name}");
    }
}

#[test]
fn clear_errors() {
    let text = input("claude_comments");
    let err = add_server(&text, "github", NPX).unwrap_err();
    assert!(matches!(err, ConfigError::ServerExists { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "a server named \"github\" already exists in \"mcpServers\""
    );

    let err = remove_server(&text, "nope").unwrap_err();
    assert_eq!(err.to_string(), "no server named \"nope\" in the config");
    let err = remove_server("{}", "nope").unwrap_err();
    assert!(matches!(err, ConfigError::NoSuchServer { .. }), "{err:?}");
    let err = remove_server("", "nope").unwrap_err();
    assert!(matches!(err, ConfigError::NoSuchServer { .. }), "{err:?}");

    let both = r#"{"mcpServers": {}, "servers": {}}"#;
    for err in [
        add_server(both, "x", NPX).unwrap_err(),
        remove_server(both, "x").unwrap_err(),
    ] {
        assert!(
            err.to_string()
                .contains("both \"mcpServers\" and \"servers\""),
            "{err}"
        );
    }

    let err = add_server(r#"{"mcpServers": []}"#, "x", NPX).unwrap_err();
    assert!(
        err.to_string().contains("\"mcpServers\" is not an object"),
        "{err}"
    );
    let err = add_server("[1]", "x", NPX).unwrap_err();
    assert!(err.to_string().contains("top level"), "{err}");

    let err = add_server("{", "x", NPX).unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
    assert!(err.to_string().starts_with("<text>:1:"), "{err}");

    for entry in ["[1]", "\"npx\"", "{\"command\": ", "{'command': 'x'}"] {
        let err = add_server("{}", "x", entry).unwrap_err();
        assert!(
            matches!(err, ConfigError::BadEntry { .. }),
            "{entry}: {err:?}"
        );
    }
    let err = add_server("{}", "", NPX).unwrap_err();
    assert!(matches!(err, ConfigError::BadEntry { .. }), "{err:?}");
}

#[test]
fn write_atomic_replaces_keeps_mode_and_follows_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, "{}").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();

    write_atomic(&path, "{\"mcpServers\": {}}\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\"mcpServers\": {}}\n"
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);

    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    write_atomic(&link, "{}\n").unwrap();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}\n");

    let fresh = dir.path().join("new.json");
    write_atomic(&fresh, "{}").unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");

    let err = write_atomic(&dir.path().join("missing/dir/c.json"), "{}").unwrap_err();
    assert!(matches!(err, ConfigError::Write { .. }), "{err:?}");
}

/// Two stores on one file stand for two processes: each opens the file on
/// its own, so only the lock file between them keeps their edits apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_editing_one_file_lose_no_edit() {
    use mcphost::config::location::{ConfigLocation, ConfigSource};
    use mcphost::config::store::ConfigStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, "{ \"mcpServers\": {} }\n").unwrap();
    let open = || {
        std::sync::Arc::new(
            ConfigStore::open(
                ConfigLocation {
                    path: path.clone(),
                    source: ConfigSource::Flag,
                },
                std::sync::Arc::new(mcphost::auth::process_env),
            )
            .unwrap(),
        )
    };
    let stores = [open(), open()];
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                store.add(&format!("s{i}"), NPX).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let servers = parsed(&text).servers.len();
    assert_eq!(servers, 10, "{text}");
    // The lock file stays beside the config, private like it.
    let lock = std::fs::metadata(dir.path().join("config.json.lock")).unwrap();
    assert_eq!(lock.permissions().mode() & 0o777, 0o600);
}

/// The C library's embedded config: edits go through the same editor and
/// validation as a file's, change only memory, and a refused edit changes
/// nothing.
#[tokio::test]
async fn an_in_memory_store_edits_and_validates_like_a_file() {
    use mcphost::config::store::ConfigStore;
    let dir = tempfile::tempdir().unwrap();
    let anchor = dir.path().join("<embedded config>");
    let store = ConfigStore::in_memory(
        r#"{ "servers": { "a": { "command": "echo" } } }"#,
        anchor.clone(),
        std::sync::Arc::new(mcphost::auth::process_env),
    )
    .unwrap();
    let names = |c: &HostConfig| c.servers.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    let edited = store.add("b", r#"{ "command": "cat" }"#).await.unwrap();
    assert_eq!(names(&edited.config), ["a", "b"]);
    drop(edited);
    assert_eq!(names(&store.current()), ["a", "b"]);
    let refused = store.add("c", r#"{ "command": 5 }"#).await;
    assert!(refused.is_err(), "an invalid entry is refused");
    assert_eq!(names(&store.current()), ["a", "b"]);
    let edited = store.set_disabled("a", true).await.unwrap();
    assert!(
        edited
            .config
            .servers
            .iter()
            .any(|s| s.name == "a" && s.disabled)
    );
    drop(edited);
    assert!(
        store.reload().await.unwrap().is_none(),
        "nothing to reload from"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing was written"
    );
    assert!(
        ConfigStore::in_memory("{ not json", anchor, std::sync::Arc::new(|_: &str| None)).is_err()
    );
}
