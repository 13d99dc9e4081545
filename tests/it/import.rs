//! `mcphost import`: one golden test per dialect (the host's config in the
//! shape its documentation shows, imported into a commented sample config),
//! conflicts and duplicates, `--list` against a fake HOME, garbage files,
//! and a Claude Desktop config whose server-everything then serves tools.
//!
//! Fixtures: tests/fixtures/import/<dialect>/{home,project}/… are laid out
//! under the sandbox's HOME and a project directory (`@PROJECT@` in them is
//! that directory); `expected.json` is the config after the import and
//! `expected.txt` the report, with `@HOME@`/`@PROJECT@` for the temp paths.
//! `UPDATE_GOLDEN=1` rewrites them.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Daemon, Run, Sandbox, interop, js};
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/import");

/// Variables the fixtures reference; none may leak in from the test's own
/// environment.
const FIXTURE_VARS: &[&str] = &[
    "API_KEY",
    "API_BASE_URL",
    "DB_URL",
    "NOTES_TOKEN",
    "MY_SERVICE_TOKEN",
    "GITHUB_TOKEN",
    "REMOTE_KEY",
    "MY_API_KEY",
    "SEARCH_TOKEN",
    "x",
];

struct Setup {
    sb: Sandbox,
    project: PathBuf,
}

impl Setup {
    /// A sandbox with `base.json` as its config, an empty project, and the
    /// fixture `dialect`'s files laid out (if it has any).
    fn new(dialect: &str) -> Setup {
        let sb = Sandbox::new();
        let project = sb.dir.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let base = std::fs::read_to_string(format!("{FIXTURES}/base.json")).unwrap();
        sb.write_config(&base);
        let s = Setup { sb, project };
        let dir = Path::new(FIXTURES).join(dialect);
        s.copy(&dir.join("home"), &s.sb.home.clone());
        s.copy(&dir.join("project"), &s.project.clone());
        s
    }

    fn copy(&self, from: &Path, to: &Path) {
        let Ok(entries) = std::fs::read_dir(from) else {
            return;
        };
        std::fs::create_dir_all(to).unwrap();
        for e in entries {
            let e = e.unwrap();
            let target = to.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                self.copy(&e.path(), &target);
            } else {
                let text = std::fs::read_to_string(e.path()).unwrap();
                std::fs::write(&target, self.fill(&text)).unwrap();
            }
        }
    }

    fn fill(&self, text: &str) -> String {
        text.replace("@PROJECT@", &self.project.display().to_string())
            .replace("@HOME@", &self.sb.home.display().to_string())
    }

    /// The temp paths back to placeholders.
    fn unfill(&self, text: &str) -> String {
        text.replace(&self.project.display().to_string(), "@PROJECT@")
            .replace(&self.sb.home.display().to_string(), "@HOME@")
            .replace(&self.sb.config.display().to_string(), "@CONFIG@")
    }

    /// `mcphost ARGS` in the project directory, with `vars` set and every
    /// other fixture variable unset.
    fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Run {
        let mut c = self.sb.command();
        c.current_dir(&self.project);
        for v in FIXTURE_VARS {
            c.env_remove(v);
        }
        for (k, v) in vars {
            c.env(k, v);
        }
        let out = c.args(args).output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

fn check_golden(path: &Path, got: &str) {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        got,
        want,
        "{} differs (UPDATE_GOLDEN=1 rewrites it); got:\n{got}",
        path.display()
    );
}

/// Imports `dialect` into the sample config and compares the config text
/// and the report with the fixture's expected files. The result must be a
/// config mcphost loads, with the sample's comments intact.
fn golden(dialect: &str, extra: &[&str], vars: &[(&str, &str)]) -> Setup {
    let s = Setup::new(dialect);
    // Secrets stay in the file: where they go by default is tested apart.
    let mut args = vec!["import", dialect, "--plain-secrets"];
    args.extend_from_slice(extra);
    let r = s.run(&args, vars);
    assert_eq!(r.code, 0, "import {dialect} failed: {r:?}");
    let text = s.sb.read_config();
    let dir = Path::new(FIXTURES).join(dialect);
    check_golden(&dir.join("expected.json"), &s.unfill(&text));
    check_golden(&dir.join("expected.txt"), &s.unfill(&r.stdout));
    for comment in [
        "// My mcphost config: hand-written, and its comments must survive an import.",
        "/* the bundled test server */",
        "// kept as is",
    ] {
        assert!(text.contains(comment), "comment {comment:?} lost:\n{text}");
    }
    let env = |name: &str| -> Option<String> {
        if name == "HOME" {
            return Some(s.sb.home.display().to_string());
        }
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    };
    if let Err(e) = mcphost::config::parse(&text, &s.sb.config, &env) {
        panic!("the imported config does not load: {e}\n{text}");
    }
    s
}

#[test]
fn claude_desktop_golden() {
    golden("claude-desktop", &[], &[]);
}

#[test]
fn claude_code_golden_reads_the_user_the_current_project_and_mcp_json() {
    let s = golden("claude-code", &[], &[("NOTES_TOKEN", "n0tes")]);
    let text = s.sb.read_config();
    assert!(
        !text.contains("not-this-one"),
        "another project's server: {text}"
    );
}

#[test]
fn vscode_golden_with_an_input_given_on_the_command_line() {
    let s = golden("vscode", &["--input", "perplexity-key=pplx-$ecret"], &[]);
    // The value is literal: its `$` must not become a reference.
    let cfg = mcphost::config::load(&s.sb.config, &|n: &str| {
        (n == "HOME").then(|| s.sb.home.display().to_string())
    })
    .unwrap();
    let perplexity = cfg.server("Perplexity").unwrap();
    match &perplexity.transport {
        mcphost::config::TransportConfig::Stdio(st) => {
            assert_eq!(st.env["PERPLEXITY_API_KEY"], "pplx-$ecret");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn cursor_golden() {
    golden("cursor", &[], &[("MY_SERVICE_TOKEN", "tok")]);
}

#[test]
fn windsurf_golden() {
    golden("windsurf", &[], &[]);
}

#[test]
fn zed_golden_reads_jsonc_and_both_command_shapes() {
    golden("zed", &[], &[]);
}

#[test]
fn goose_golden() {
    golden("goose", &[], &[]);
}

#[test]
fn continue_golden_reads_config_yaml_and_the_project_blocks() {
    golden("continue", &[], &[]);
}

#[test]
fn mark3labs_golden() {
    golden("mark3labs", &[], &[("SEARCH_TOKEN", "s")]);
}

#[test]
fn a_vscode_input_without_a_terminal_or_a_value_fails_naming_it() {
    let s = Setup::new("vscode");
    let before = s.sb.read_config();
    let r = s.run(&["import", "vscode"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("\"perplexity-key\"")
            && r.stderr.contains("Perplexity API Key")
            && r.stderr.contains("--input perplexity-key=VALUE"),
        "{r:?}"
    );
    assert_eq!(s.sb.read_config(), before, "nothing may be written");
}

/// A Claude Desktop config with one server equal to ours, one under a
/// taken name with another entry, and one new.
fn conflicting(s: &Setup) {
    let dir = s.sb.home.join(".config/Claude");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("claude_desktop_config.json"),
        r#"{ "mcpServers": {
            "ts": { "command": "mcphost-testserver", "args": ["--tools", "2"] },
            "dup-name": { "command": "theirs" },
            "fresh": { "command": "fresh-server" }
        } }"#,
    )
    .unwrap();
    let mut text = s.sb.read_config();
    text = mcphost::config::edit::add_server(&text, "dup-name", r#"{"command": "ours"}"#).unwrap();
    s.sb.write_config(&text);
}

fn actions(r: &Run) -> Vec<(String, String)> {
    let v: Value = r.json();
    v["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn conflicts_are_named_and_skipped_and_duplicates_said() {
    let s = Setup::new("none");
    conflicting(&s);
    let before = s.sb.read_config();

    // Human report first.
    let r = s.run(&["import", "claude-desktop", "--dry-run"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("duplicate ts: the config already has this entry; skipped"),
        "{r:?}"
    );
    assert!(
        r.stdout
            .contains("conflict dup-name: a different entry has this name; skipped"),
        "{r:?}"
    );
    assert!(r.stdout.contains("would be added fresh (stdio)"), "{r:?}");
    assert_eq!(s.sb.read_config(), before, "--dry-run wrote the config");

    let r = s.run(&["--json", "import", "claude-desktop"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        actions(&r),
        [
            ("ts".to_owned(), "duplicate".to_owned()),
            ("dup-name".to_owned(), "conflict".to_owned()),
            ("fresh".to_owned(), "added".to_owned()),
        ]
    );
    assert_eq!(r.json()["written"], true);
    let after = s.sb.read_config();
    assert!(
        after.contains(r#""command": "ours""#),
        "ours was replaced: {after}"
    );
    assert!(after.contains("fresh-server"), "{after}");

    // Again: everything is there now.
    let r = s.run(&["--json", "import", "claude-desktop"], &[]);
    assert_eq!(
        actions(&r),
        [
            ("ts".to_owned(), "duplicate".to_owned()),
            ("dup-name".to_owned(), "conflict".to_owned()),
            ("fresh".to_owned(), "duplicate".to_owned()),
        ]
    );
    assert_eq!(r.json()["written"], false);
    assert_eq!(s.sb.read_config(), after, "a no-op import changed the file");

    // --rename-prefix adds the conflicting one under another name.
    let r = s.run(
        &[
            "--json",
            "import",
            "claude-desktop",
            "--only",
            "dup-name",
            "--rename-prefix",
            "cd-",
        ],
        &[],
    );
    assert_eq!(
        actions(&r),
        [("cd-dup-name".to_owned(), "added".to_owned())]
    );
    let text = s.sb.read_config();
    assert!(
        text.contains(r#""cd-dup-name""#) && text.contains("theirs"),
        "{text}"
    );

    // The config runs "theirs" now, as cd-dup-name: importing it again
    // under its own name would run it twice.
    let r = s.run(
        &[
            "--json",
            "import",
            "claude-desktop",
            "--only",
            "dup-name",
            "--overwrite",
        ],
        &[],
    );
    assert_eq!(
        actions(&r),
        [("dup-name".to_owned(), "duplicate".to_owned())]
    );
    assert_eq!(r.json()["servers"][0]["sameAs"], "cd-dup-name");
    let text = mcphost::config::edit::remove_server(&s.sb.read_config(), "cd-dup-name").unwrap();
    s.sb.write_config(&text);

    // --overwrite replaces it.
    let r = s.run(
        &[
            "--json",
            "import",
            "claude-desktop",
            "--only",
            "dup-name",
            "--overwrite",
        ],
        &[],
    );
    assert_eq!(
        actions(&r),
        [("dup-name".to_owned(), "replaced".to_owned())]
    );
    let text = s.sb.read_config();
    assert!(!text.contains(r#""command": "ours""#), "{text}");
    assert!(text.contains("// kept as is"), "{text}");
}

#[test]
fn only_names_an_unknown_server() {
    let s = Setup::new("claude-desktop");
    let r = s.run(&["import", "claude-desktop", "--only", "github,nope"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("--only nope") && r.stderr.contains("filesystem, github, ts"),
        "{r:?}"
    );
    let r = s.run(
        &[
            "--json",
            "import",
            "claude-desktop",
            "--only",
            "filesystem,github",
        ],
        &[],
    );
    assert_eq!(
        actions(&r),
        [
            ("filesystem".to_owned(), "added".to_owned()),
            ("github".to_owned(), "added".to_owned()),
        ]
    );
}

#[test]
fn list_with_nothing_found_says_so_and_reads_only_the_fake_home() {
    let s = Setup::new("none");
    let r = s.run(&["import", "--list"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .starts_with("No MCP server configs found. Looked in:"),
        "{r:?}"
    );
    let v = s.run(&["--json", "import", "--list"], &[]).json();
    assert_eq!(v["found"], Value::Array(vec![]));
    let searched = v["searched"].as_array().unwrap();
    assert!(searched.len() >= 15, "{searched:?}");
    for p in searched {
        let p = p.as_str().unwrap();
        assert!(
            p.starts_with(&s.sb.home.display().to_string())
                || p.starts_with(&s.project.display().to_string()),
            "looked outside the fake HOME and project: {p}"
        );
    }
    // The same for one source, and for importing from it.
    let r = s.run(&["import", "zed"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("no zed config found; looked in:")
            && r.stderr.contains(".config/zed/settings.json"),
        "{r:?}"
    );
}

#[test]
fn list_shows_every_source_its_servers_and_what_cannot_be_imported() {
    let s = Setup::new("zed");
    s.copy(&Path::new(FIXTURES).join("goose/home"), &s.sb.home);
    s.copy(&Path::new(FIXTURES).join("vscode/project"), &s.project);
    let r = s.run(&["import", "--list"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let out = s.unfill(&r.stdout);
    for line in [
        "zed     hexdocs-mcp        stdio",
        "goose   github             stdio",
        "vscode  Perplexity         stdio",
        "zed mcp-server-github: cannot be imported: is provided by a Zed extension",
        "goose developer: cannot be imported: is a Goose builtin extension",
        "vscode Perplexity: asks for VS Code input \"perplexity-key\" on import",
        "vscode pythonPicked: cannot be imported: command: uses ${command:python.interpreterPath}",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    let v = s.run(&["--json", "import", "--list"], &[]).json();
    let found = v["found"].as_array().unwrap();
    let sources: Vec<&str> = found
        .iter()
        .map(|f| f["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["vscode", "zed", "goose"], "{v:#}");
    let zed = &found[1];
    assert_eq!(
        zed["path"],
        s.sb.home
            .join(".config/zed/settings.json")
            .display()
            .to_string()
    );
    let names: Vec<&str> = zed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hexdocs-mcp", "my-context-server", "spectron"]);
    assert_eq!(zed["servers"][2]["transport"], "http");
    assert_eq!(found[0]["scope"], "project");
    assert_eq!(found[0]["inputs"][0]["id"], "perplexity-key");
    assert_eq!(found[0]["inputs"][0]["password"], true);
    assert_eq!(zed["problems"][0]["server"], "mcp-server-github");
}

#[test]
fn a_garbage_file_is_an_error_naming_the_file_and_the_reason() {
    let s = Setup::new("none");
    let dir = s.sb.home.join(".config/Claude");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("claude_desktop_config.json");
    std::fs::write(&file, "{ \"mcpServers\": { \"a\": { \"command\": } }").unwrap();
    let r = s.run(&["import", "claude-desktop"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(&file.display().to_string()) && r.stderr.contains("not valid JSON"),
        "{r:?}"
    );
    // --list still lists the rest, and says this one cannot be read.
    let r = s.run(&["import", "--list"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("claude-desktop: cannot be read:")
            && r.stdout.contains(&file.display().to_string()),
        "{r:?}"
    );

    // YAML too, and an explicit --from file.
    let goose = s.sb.home.join(".config/goose/config.yaml");
    std::fs::create_dir_all(goose.parent().unwrap()).unwrap();
    std::fs::write(&goose, "extensions:\n  a: [unclosed\n").unwrap();
    let r = s.run(&["import", "goose"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(&goose.display().to_string()) && r.stderr.contains("not valid YAML"),
        "{r:?}"
    );
    let wrong = s.project.join("servers.json");
    std::fs::write(&wrong, "[1, 2]").unwrap();
    let r = s.run(
        &[
            "import",
            "--from",
            wrong.to_str().unwrap(),
            "--format",
            "cursor",
        ],
        &[],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(&wrong.display().to_string())
            && r.stderr.contains("the top level is a list, not an object"),
        "{r:?}"
    );
}

#[test]
fn from_a_file_with_an_explicit_format() {
    let s = Setup::new("none");
    let file = s.project.join("elsewhere.yaml");
    std::fs::copy(format!("{FIXTURES}/mark3labs/home/.mcphost.yml"), &file).unwrap();
    let r = s.run(
        &[
            "--json",
            "import",
            "--from",
            file.to_str().unwrap(),
            "--format",
            "mark3labs",
            "--only",
            "legacy",
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(actions(&r), [("legacy".to_owned(), "added".to_owned())]);
    // mark3labs/mcphost also reads JSON (~/.mcphost.json).
    let json_file = s.project.join("mcphost.json");
    std::fs::write(
        &json_file,
        r#"{ "mcpServers": { "remote": { "type": "remote", "url": "https://x.example/mcp",
             "headers": ["X-Key: ${env://K:-k}"] } } }"#,
    )
    .unwrap();
    let r = s.run(
        &[
            "--json",
            "import",
            "--from",
            json_file.to_str().unwrap(),
            "--format",
            "mark3labs",
        ],
        &[],
    );
    assert_eq!(actions(&r), [("remote".to_owned(), "added".to_owned())]);
    assert!(
        s.sb.read_config().contains(r#""X-Key": "${K:-k}""#),
        "{}",
        s.sb.read_config()
    );
    let r = s.run(&["import", "--from", "x.json", "--format", "nope"], &[]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("unknown source \"nope\""), "{r:?}");
}

/// The keyring cannot be tested for real here (no Secret Service on the
/// test machine); what is tested: the plan (--dry-run), the refusal without
/// a keyring before anything is written, and that our config reads the
/// reference through the lookup.
#[cfg(target_os = "linux")]
#[test]
fn move_secrets_plans_references_and_without_a_keyring_writes_nothing() {
    let s = Setup::new("cursor");
    let before = s.sb.read_config();
    let no_bus = [("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")];
    let r = s.run(
        &[
            "--json",
            "import",
            "cursor",
            "--only",
            "server-name",
            "--move-secrets",
            "--dry-run",
        ],
        &no_bus,
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    assert_eq!(v["servers"][0]["action"], "added", "{v:#}");
    assert!(
        v["servers"][0]["notes"][0]
            .as_str()
            .unwrap()
            .contains("${keyring:server-name/API_KEY}"),
        "{v:#}"
    );
    let r = s.run(&["import", "cursor", "--move-secrets"], &no_bus);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(
            "--move-secrets: cannot store the secrets of server \"server-name\" in the OS keyring"
        ) && r.stderr.contains("the config was not changed"),
        "{r:?}"
    );
    assert_eq!(s.sb.read_config(), before);

    // What it would have written loads, the secret read through the lookup.
    let text = mcphost::config::edit::add_server(
        &before,
        "server-name",
        r#"{"command": "npx", "env": {"API_KEY": "${keyring:server-name/API_KEY}"}}"#,
    )
    .unwrap();
    let lookup = |n: &str| (n == "keyring:server-name/API_KEY").then(|| "value".to_owned());
    let cfg = mcphost::config::parse(&text, &s.sb.config, &lookup).unwrap();
    match &cfg.server("server-name").unwrap().transport {
        mcphost::config::TransportConfig::Stdio(st) => assert_eq!(st.env["API_KEY"], "value"),
        other => panic!("{other:?}"),
    }
    let err = mcphost::config::parse(&text, &s.sb.config, &|_: &str| None).unwrap_err();
    assert!(
        err.to_string()
            .contains("keyring secret \"server-name/API_KEY\" was not found"),
        "{err}"
    );
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn imported_server_everything_serves_its_tools_through_the_daemon() {
    let env = interop();
    let s = Setup::new("none");
    let dir = s.sb.home.join(".config/Claude");
    std::fs::create_dir_all(&dir).unwrap();
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    std::fs::write(
        dir.join("claude_desktop_config.json"),
        format!(
            r#"{{ "mcpServers": {{ "everything": {{ "command": {}, "args": [{}, "stdio"] }} }} }}"#,
            js(&env.node),
            js(&entry.display().to_string())
        ),
    )
    .unwrap();
    let r = s.run(&["import", "claude-desktop", "--only", "everything"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("added everything (stdio)"), "{r:?}");
    // The base config's `ts` is not on PATH here: keep only the import.
    let text = mcphost::config::edit::remove_server(&s.sb.read_config(), "ts").unwrap();
    let d = Daemon::start_in(s.sb, &text);
    d.wait_ready(&["everything"], Duration::from_secs(60));
    let tools = d.json(&["tools"]);
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"everything__echo"), "{names:?}");
}

#[test]
fn vscode_inputs_are_asked_once_on_a_terminal_and_a_password_is_not_echoed() {
    use expectrl::process::unix::WaitStatus;
    use expectrl::{Eof, Expect, Session};

    let s = Setup::new("none");
    let dir = s.project.join(".vscode");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("mcp.json"),
        r#"{
          "inputs": [
            { "type": "promptString", "id": "key", "description": "API key", "password": true },
            { "type": "promptString", "id": "region", "description": "Region", "default": "eu" }
          ],
          "servers": {
            "a": { "command": "a-server", "env": { "K": "${input:key}" } },
            "b": { "command": "b-server", "env": { "K": "${input:key}", "R": "${input:region}" } }
          }
        }"#,
    )
    .unwrap();
    let mut cmd = s.sb.command();
    cmd.args(["import", "vscode", "--project", s.project.to_str().unwrap()])
        .env("TERM", "xterm-256color")
        .stdin(std::process::Stdio::inherit())
        .stdout(std::process::Stdio::inherit())
        .stderr(std::process::Stdio::inherit());
    let mut p = Session::spawn(cmd).unwrap();
    p.set_expect_timeout(Some(Duration::from_secs(30)));
    p.expect("API key (key):").unwrap();
    p.send("s3cret-value\r").unwrap();
    p.expect("Region (region):").unwrap();
    p.send("\r").unwrap();
    let rest = p.expect(Eof).unwrap();
    let shown = String::from_utf8_lossy(rest.as_bytes()).into_owned();
    assert!(shown.contains("wrote"), "{shown}");
    assert!(
        !shown.contains("s3cret-value"),
        "the password was echoed: {shown}"
    );
    assert!(
        !shown.contains("API key (key):"),
        "asked twice for one input: {shown}"
    );
    assert_eq!(
        p.get_process().wait().unwrap(),
        WaitStatus::Exited(p.get_process().pid(), 0)
    );
    let text = s.sb.read_config();
    assert_eq!(text.matches(r#""K": "s3cret-value""#).count(), 2, "{text}");
    assert!(text.contains(r#""R": "eu""#), "{text}");
}

#[test]
fn list_names_the_claude_code_project_section() {
    let s = Setup::new("claude-code");
    let v = s
        .run(&["--json", "import", "--list", "claude-code"], &[])
        .json();
    let found = v["found"].as_array().unwrap();
    let sections: Vec<Value> = found.iter().map(|f| f["section"].clone()).collect();
    assert_eq!(
        sections,
        [
            Value::Null,
            Value::String(format!("projects[{:?}]", s.project.display().to_string())),
            Value::Null
        ],
        "{v:#}"
    );
    assert_eq!(found[1]["servers"][0]["name"], "local-db");
    assert_eq!(
        found[2]["path"],
        s.project.join(".mcp.json").display().to_string()
    );
}

impl Setup {
    /// `mcphost --config CONFIG ARGS` in the project directory with the
    /// environment a desktop app leaves a child: HOME and a bare PATH only.
    fn run_stripped(&self, args: &[&str]) -> Run {
        self.run_stripped_with(args, &[])
    }

    fn run_stripped_with(&self, args: &[&str], vars: &[(&str, &str)]) -> Run {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_mcphost"));
        c.env_clear()
            .envs(vars.iter().copied())
            .env("HOME", &self.sb.home)
            .env("PATH", "/usr/bin:/bin")
            .env("MCPHOST_NO_AUTOSTART", "1")
            .current_dir(&self.project)
            .stdin(std::process::Stdio::null())
            .arg("--config")
            .arg(&self.sb.config)
            .args(args);
        let out = c.output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn write_home(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.sb.home.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// Item 8: an import run twice changes nothing the second time, also for a
/// server the first run added disabled (its variable was unset).
#[test]
fn a_second_import_is_a_no_op_even_for_servers_it_added_disabled() {
    let s = Setup::new("none");
    s.write_home(
        ".cursor/mcp.json",
        r#"{ "mcpServers": {
            "needs-var": { "command": "srv", "env": { "REGION": "${env:UNSET_REGION_VAR}" } },
            "plain": { "command": "plain-server" }
        } }"#,
    );
    let r = s.run_stripped(&["--json", "import", "cursor"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        actions(&r),
        [
            ("needs-var".to_owned(), "added-disabled".to_owned()),
            ("plain".to_owned(), "added".to_owned()),
        ]
    );
    let after = s.sb.read_config();
    let r = s.run_stripped(&["--json", "import", "cursor"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        actions(&r),
        [
            ("needs-var".to_owned(), "duplicate".to_owned()),
            ("plain".to_owned(), "duplicate".to_owned()),
        ],
        "{}",
        r.stdout
    );
    assert_eq!(r.json()["written"], false);
    assert_eq!(s.sb.read_config(), after);
}

/// Item 8: a server is the same server by what it runs, not by its name:
/// under two names in two apps (and twice in one app) it is imported once.
#[test]
fn the_same_server_under_other_names_is_imported_once() {
    let s = Setup::new("none");
    s.write_home(
        ".config/Claude/claude_desktop_config.json",
        r#"{ "mcpServers": {
            "filesystem": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"] },
            "fs-again": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"] },
            "fs-other-dir": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"] }
        } }"#,
    );
    s.write_home(
        ".cursor/mcp.json",
        r#"{ "mcpServers": {
            "files": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"] },
            "web": { "url": "https://example.com/mcp", "headers": { "X-Team": "a" } }
        } }"#,
    );
    s.write_home(
        ".codeium/windsurf/mcp_config.json",
        r#"{ "mcpServers": {
            "web-too": { "serverUrl": "https://example.com/mcp", "headers": { "X-Team": "a" } },
            "web-b": { "serverUrl": "https://example.com/mcp", "headers": { "X-Team": "b" } }
        } }"#,
    );
    let r = s.run_stripped(&["--json", "import", "claude-desktop"]);
    assert_eq!(
        actions(&r),
        [
            ("filesystem".to_owned(), "added".to_owned()),
            ("fs-again".to_owned(), "duplicate".to_owned()),
            ("fs-other-dir".to_owned(), "added".to_owned()),
        ],
        "{r:?}"
    );
    let v = r.json();
    assert_eq!(v["servers"][1]["sameAs"], "filesystem", "{v:#}");
    let r = s.run_stripped(&["import", "cursor"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(
            "duplicate files: the config already runs the same server as \"filesystem\"; skipped"
        ),
        "{r:?}"
    );
    let r = s.run_stripped(&["--json", "import", "windsurf"]);
    assert_eq!(
        actions(&r),
        [
            ("web-too".to_owned(), "duplicate".to_owned()),
            ("web-b".to_owned(), "added".to_owned()),
        ],
        "{r:?}"
    );
    let cfg = s.sb.read_config();
    for name in ["filesystem", "fs-other-dir", "web", "web-b"] {
        assert!(
            cfg.contains(&format!("\"{name}\"")),
            "{name} missing:\n{cfg}"
        );
    }
    for name in ["fs-again", "files", "web-too"] {
        assert!(
            !cfg.contains(&format!("\"{name}\"")),
            "{name} imported twice:\n{cfg}"
        );
    }
}

/// Item 8: token-like values go to the keyring by default (planned under
/// --dry-run, since the test machine has no keyring); without a keyring
/// they stay in the file with a note and the import still succeeds;
/// `--plain-secrets` keeps them there without a note.
#[cfg(target_os = "linux")]
#[test]
fn secrets_go_to_the_keyring_by_default_and_plain_secrets_keeps_them() {
    let s = Setup::new("none");
    std::fs::create_dir_all(s.project.join(".vscode")).unwrap();
    std::fs::write(
        s.project.join(".vscode/mcp.json"),
        r#"{
          "inputs": [
            { "type": "promptString", "id": "k", "description": "Key", "password": true },
            { "type": "promptString", "id": "region", "description": "Region" }
          ],
          "servers": {
            "svc": { "command": "svc", "args": ["--key", "${input:k}", "--region", "${input:region}"],
                     "env": { "SVC_TOKEN": "t0ken", "LOG": "info" } },
            "web": { "type": "http", "url": "https://example.com/mcp",
                     "headers": { "Authorization": "Bearer abc", "X-Team": "a" } }
          }
        }"#,
    )
    .unwrap();
    let inputs = ["--input", "k=s3cret", "--input", "region=eu"];
    let mut args = vec!["--json", "import", "vscode", "--dry-run"];
    args.extend_from_slice(&inputs);
    let r = s.run_stripped(&args);
    assert_eq!(r.code, 0, "{r:?}");
    let v = r.json();
    let notes = |i: usize| v["servers"][i]["notes"].to_string();
    assert!(
        notes(0).contains(
            "input k: its value (a password) goes to the OS keyring, read back as ${keyring:svc/k}"
        ),
        "{v:#}"
    );
    assert!(
        notes(0).contains(
            "env.SVC_TOKEN: its value goes to the OS keyring, read back as ${keyring:svc/SVC_TOKEN}"
        ),
        "{v:#}"
    );
    assert!(
        !notes(0).contains("region") && !notes(0).contains("LOG"),
        "{v:#}"
    );
    assert!(
        notes(1).contains("headers.Authorization: its value goes to the OS keyring"),
        "{v:#}"
    );
    assert!(!notes(1).contains("X-Team"), "{v:#}");

    // No keyring: the import goes on, the secrets in the file, said once per server.
    let mut args = vec!["import", "vscode"];
    args.extend_from_slice(&inputs);
    let r = s.run_stripped(&args);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("note: its secrets stay in the config file: the OS keyring did not answer"),
        "{r:?}"
    );
    let cfg = s.sb.read_config();
    assert!(
        cfg.contains("s3cret") && cfg.contains("t0ken") && !cfg.contains("${keyring:"),
        "{cfg}"
    );

    // --plain-secrets: no keyring asked, nothing said.
    let s = Setup::new("none");
    s.write_home(
        ".cursor/mcp.json",
        r#"{ "mcpServers": { "svc": { "command": "svc", "env": { "SVC_TOKEN": "t0ken" } } } }"#,
    );
    let r = s.run_stripped(&["import", "cursor", "--plain-secrets"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("keyring"), "{r:?}");
    assert!(s.sb.read_config().contains("t0ken"));
}

/// The app's servers object in its config file (JSONC).
fn app_servers(path: &Path, at: &[&str]) -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let opts = jsonc_parser::ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        ..Default::default()
    };
    let ast = jsonc_parser::parse_to_ast(&text, &Default::default(), &opts).unwrap();
    fn conv(v: &jsonc_parser::ast::Value) -> Value {
        use jsonc_parser::ast::Value as A;
        match v {
            A::StringLit(s) => Value::String(s.value.to_string()),
            A::NumberLit(n) => serde_json::from_str(n.value).unwrap(),
            A::BooleanLit(b) => Value::Bool(b.value),
            A::NullKeyword(_) => Value::Null,
            A::Array(a) => Value::Array(a.elements.iter().map(conv).collect()),
            A::Object(o) => Value::Object(
                o.properties
                    .iter()
                    .map(|p| (p.name.as_str().to_owned(), conv(&p.value)))
                    .collect(),
            ),
        }
    }
    let v = conv(ast.value.as_ref().unwrap());
    let mut cur = &v;
    for k in at {
        cur = &cur[*k];
    }
    cur.as_object().cloned().unwrap_or_default()
}

/// Item 7: `import cursor --consolidate` leaves Cursor one `mcphost` entry
/// (the user's file; the project's loses its servers), with a backup beside
/// each file and every comment and other setting kept; a second run changes
/// nothing and does not import the bridge; `--restore` puts the files back.
#[test]
fn consolidate_rewrites_the_app_config_and_restore_puts_it_back() {
    let s = Setup::new("none");
    let user = s.write_home(
        ".cursor/mcp.json",
        "{\n  // Cursor's own comment\n  \"someSetting\": true,\n  \"mcpServers\": {\n    /* files */\n    \"files\": { \"command\": \"npx\", \"args\": [\"-y\", \"server-filesystem\", \"/tmp\"] },\n    \"web\": { \"url\": \"https://example.com/mcp\" } // trailing\n  }\n}\n",
    );
    std::fs::create_dir_all(s.project.join(".cursor")).unwrap();
    let project = s.project.join(".cursor/mcp.json");
    let project_text = "{ \"mcpServers\": { \"proj\": { \"command\": \"proj-server\" } } }\n";
    std::fs::write(&project, project_text).unwrap();
    let user_text = std::fs::read_to_string(&user).unwrap();

    let r = s.run_stripped(&["import", "cursor", "--consolidate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("restart Cursor if it is running, so it reads its new config"),
        "{r:?}"
    );
    assert!(
        r.stdout.contains(&format!("consolidated {}: files, web replaced by one \"mcphost\" entry; backup {}.mcphost-backup-", user.display(), user.display())),
        "{r:?}"
    );
    let servers = app_servers(&user, &["mcpServers"]);
    assert_eq!(
        servers.keys().collect::<Vec<_>>(),
        ["mcphost"],
        "{servers:?}"
    );
    let bridge = &servers["mcphost"];
    assert!(
        Path::new(bridge["command"].as_str().unwrap()).is_absolute(),
        "{bridge}"
    );
    assert_eq!(
        bridge["args"],
        serde_json::json!(["--config", s.sb.config.display().to_string(), "bridge"])
    );
    let text = std::fs::read_to_string(&user).unwrap();
    assert!(
        text.contains("// Cursor's own comment") && text.contains("\"someSetting\": true"),
        "{text}"
    );
    assert!(app_servers(&project, &["mcpServers"]).is_empty());
    let backups = |p: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|b| {
                b.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("mcp.json.mcphost-backup-")
            })
            .collect()
    };
    let ub = backups(&user);
    assert_eq!(ub.len(), 1, "{ub:?}");
    assert_eq!(std::fs::read_to_string(&ub[0]).unwrap(), user_text);
    assert_eq!(
        std::fs::read_to_string(&backups(&project)[0]).unwrap(),
        project_text
    );
    let cfg = s.sb.read_config();
    for name in ["files", "web", "proj"] {
        assert!(
            cfg.contains(&format!("\"{name}\"")),
            "{name} not imported:\n{cfg}"
        );
    }

    // Again: the bridge is not imported, nothing is rewritten.
    let r = s.run_stripped(&["import", "cursor", "--consolidate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        !s.sb.read_config().contains("\"mcphost\""),
        "the bridge was imported"
    );
    assert!(!r.stdout.contains("consolidated"), "{r:?}");
    assert_eq!(backups(&user).len(), 1);

    let r = s.run_stripped(&["import", "--restore", "cursor"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("restart Cursor"), "{r:?}");
    assert_eq!(std::fs::read_to_string(&user).unwrap(), user_text);
    assert_eq!(std::fs::read_to_string(&project).unwrap(), project_text);
    assert!(backups(&user).is_empty());
    let r = s.run_stripped(&["import", "--restore", "cursor"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("no backup of a cursor config to restore"),
        "{r:?}"
    );
}

/// Item 7, each dialect's shape: VS Code's `servers` (its `inputs` kept),
/// Zed's `context_servers` in its settings, Claude Code's user and project
/// sections of ~/.claude.json; a server that could not be imported stays
/// in the app; YAML (Goose) is refused with the entry to add by hand.
#[test]
fn consolidate_speaks_each_apps_dialect() {
    let s = Setup::new("none");
    std::fs::create_dir_all(s.project.join(".vscode")).unwrap();
    let vscode = s.project.join(".vscode/mcp.json");
    std::fs::write(
        &vscode,
        r#"{
  "inputs": [{ "type": "promptString", "id": "k", "password": true }],
  // mine
  "servers": { "svc": { "type": "stdio", "command": "svc", "args": ["${input:k}"] } }
}"#,
    )
    .unwrap();
    let r = s.run_stripped(&["import", "vscode", "--consolidate", "--input", "k=v"]);
    assert_eq!(r.code, 0, "{r:?}");
    let servers = app_servers(&vscode, &["servers"]);
    assert_eq!(servers.keys().collect::<Vec<_>>(), ["mcphost"]);
    assert_eq!(servers["mcphost"]["type"], "stdio");
    let text = std::fs::read_to_string(&vscode).unwrap();
    assert!(
        text.contains("// mine") && text.contains("\"inputs\""),
        "{text}"
    );

    let zed = s.write_home(
        ".config/zed/settings.json",
        "// Zed settings\n{\n  \"theme\": \"One Dark\",\n  \"context_servers\": {\n    \"ctx\": { \"command\": \"ctx-server\", \"args\": [] },\n    \"ext\": { \"source\": \"extension\", \"settings\": {} }\n  }\n}\n",
    );
    let r = s.run_stripped(&["import", "zed", "--consolidate"]);
    assert_eq!(r.code, 0, "{r:?}");
    let servers = app_servers(&zed, &["context_servers"]);
    assert_eq!(
        servers.keys().collect::<Vec<_>>(),
        ["ext", "mcphost"],
        "{servers:?}"
    );
    assert_eq!(servers["mcphost"]["source"], "custom");
    assert!(
        std::fs::read_to_string(&zed)
            .unwrap()
            .contains("\"theme\": \"One Dark\"")
    );

    let dir = s.project.display().to_string();
    let claude = s.write_home(
        ".claude.json",
        &serde_json::json!({
            "numStartups": 3,
            "mcpServers": { "u": { "command": "user-server" } },
            "projects": { dir.clone(): { "allowedTools": [], "mcpServers": { "p": { "command": "project-server" } } } }
        })
        .to_string(),
    );
    let r = s.run_stripped(&["import", "claude-code", "--consolidate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        app_servers(&claude, &["mcpServers"])
            .keys()
            .collect::<Vec<_>>(),
        ["mcphost"]
    );
    assert!(app_servers(&claude, &["projects", &dir, "mcpServers"]).is_empty());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&claude).unwrap()).unwrap();
    assert_eq!(v["numStartups"], 3);
    assert_eq!(v["projects"][&dir]["allowedTools"], serde_json::json!([]));

    // Goose's YAML: a line edit of `extensions`; comments and the builtin
    // extension stay, and --restore gives back the exact bytes.
    let goose_text = "# mine\nGOOSE_MODEL: m # model\nextensions:\n  developer:\n    bundled: true\n    enabled: true\n    name: developer\n    type: builtin\n  # g, by hand\n  g:\n    type: stdio\n    cmd: g-server\n    args:\n    - --flag\n    enabled: true\n# after\nGOOSE_MODE: auto\n";
    let goose = s.write_home(".config/goose/config.yaml", goose_text);
    let r = s.run_stripped(&["import", "goose", "--consolidate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "consolidated {}: g replaced by one \"mcphost\" entry",
            goose.display()
        )),
        "{r:?}"
    );
    let text = std::fs::read_to_string(&goose).unwrap();
    for kept in [
        "# mine\nGOOSE_MODEL: m # model\n",
        "  developer:\n    bundled: true\n",
        "  # g, by hand\n",
        "# after\nGOOSE_MODE: auto\n",
    ] {
        assert!(text.contains(kept), "{kept:?} lost:\n{text}");
    }
    let v: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let ext = v["extensions"].as_mapping().unwrap();
    let names: Vec<&str> = ext.keys().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(names, ["developer", "mcphost"], "{text}");
    assert_eq!(v["extensions"]["mcphost"]["type"].as_str(), Some("stdio"));
    assert!(
        Path::new(v["extensions"]["mcphost"]["cmd"].as_str().unwrap()).is_absolute(),
        "{text}"
    );
    assert!(s.sb.read_config().contains("\"g-server\""));
    // Again: its own bridge is not imported, nothing changes.
    let r = s.run_stripped(&["import", "goose", "--consolidate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&goose).unwrap(), text);
    assert!(
        !s.sb.read_config().contains("\"mcphost\""),
        "the bridge was imported"
    );
    let r = s.run_stripped(&["import", "--restore", "goose"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&goose).unwrap(), goose_text);

    // Continue's YAML list is still refused, the file untouched.
    let cont = s.write_home(
        ".continue/config.yaml",
        "# mine\nname: a\nmcpServers:\n  - name: c\n    command: c-server\n",
    );
    let before = std::fs::read_to_string(&cont).unwrap();
    let r = s.run_stripped(&["import", "continue", "--consolidate"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stdout.contains(
            "cannot be rewritten (its YAML would lose its comments); replace its servers"
        ) && r.stdout.contains(" bridge"),
        "{r:?}"
    );
    assert!(
        !r.stdout.contains("restart Continue"),
        "nothing to restart for: {r:?}"
    );
    assert_eq!(std::fs::read_to_string(&cont).unwrap(), before);
}

/// Item 7, end to end: the entry `--consolidate` writes, started the way the
/// app starts it (HOME and a bare PATH only), serves the imported server's
/// tools through the daemon.
#[test]
fn the_consolidated_entry_serves_the_imported_tools() {
    use std::io::{BufRead, BufReader, Write};
    let s = Setup::new("none");
    let user = s.write_home(
        ".cursor/mcp.json",
        &format!(
            r#"{{ "mcpServers": {{ "ts2": {{ "command": {}, "args": ["--tools", "2"] }} }} }}"#,
            js(common::TESTSERVER)
        ),
    );
    // The socket given as a flag (MCPHOST_SOCKET is read the same way) is
    // written into the entry, or the app's bridge would find another daemon.
    let socket = s.sb.socket.display().to_string();
    let r = s.run_stripped(&["--socket", &socket, "import", "cursor", "--consolidate"]);
    assert_eq!(r.code, 0, "{r:?}");
    let entry = app_servers(&user, &["mcpServers"])["mcphost"].clone();
    let text = mcphost::config::edit::remove_server(&s.sb.read_config(), "ts").unwrap();
    let home = s.sb.home.clone();
    let d = Daemon::start_in(s.sb, &text);
    d.wait_ready(&["ts2"], Duration::from_secs(60));

    let args: Vec<String> = entry["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    let mut child = std::process::Command::new(entry["command"].as_str().unwrap())
        .args(&args)
        .env_clear()
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"app","version":"0"}}}}}}"#
    )
    .unwrap();
    let init = lines
        .next()
        .expect(
            "the bridge answers initialize: it reaches the daemon at the socket import was given",
        )
        .unwrap();
    let init: Value = serde_json::from_str(&init).unwrap();
    assert_eq!(init["result"]["serverInfo"]["name"], "mcphost", "{init}");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list"}}"#).unwrap();
    // Read as text: the test server's schemas hold numbers serde_json refuses.
    let list = loop {
        let line = lines.next().unwrap().unwrap();
        if line.contains(r#""id":2"#) {
            break line;
        }
    };
    assert!(list.contains(r#""name":"ts2"#), "{list}");
    drop(stdin);
    child.wait().unwrap();
    drop(d);
}

/// Item 7: a running app is told to be quit and reopened; one that is not
/// seen running gets "restart it if it is running". The app here is a copy
/// of `sleep` named as Claude Desktop's process on Linux.
#[cfg(target_os = "linux")]
#[test]
fn consolidate_says_whether_the_app_is_running() {
    let s = Setup::new("none");
    s.write_home(
        ".config/Claude/claude_desktop_config.json",
        r#"{ "mcpServers": { "files": { "command": "server-filesystem" } } }"#,
    );
    let bin = s.sb.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("claude-desktop");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let mut app = std::process::Command::new(&fake).arg("60").spawn().unwrap();

    let r = s.run_stripped(&["import", "claude-desktop", "--consolidate"]);
    let _ = app.kill();
    let _ = app.wait();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("Claude Desktop is running: quit and reopen it to use mcphost"),
        "{r:?}"
    );

    let r = s.run_stripped(&["import", "--restore", "claude-desktop"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("restart Claude Desktop if it is running, so it reads its new config"),
        "{r:?}"
    );
}
