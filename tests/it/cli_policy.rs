//! `--on-elicitation` and `--on-sampling`: the CLI's policy host, against
//! the pinned `@modelcontextprotocol/server-everything` (which offers its
//! elicitation and sampling tools only to clients that declare the
//! capability) and the bundled test server (whose `elicit` tool takes any
//! schema), in `--direct` mode, `inspect` and through a daemon.

use crate::common;

use std::collections::BTreeSet;

use common::{Daemon, Interop, Sandbox, TESTSERVER, interop, js, text_of};
use serde_json::{Value, json};

fn everything(env: &Interop) -> String {
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let cmd = shell_words::join([env.node.as_str(), entry.to_str().unwrap(), "stdio"]);
    format!("ev={cmd}")
}

fn tool_names(tools: &Value) -> BTreeSet<String> {
    tools
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {tools}"))
        .iter()
        .map(|t| t["tool"].as_str().unwrap().to_owned())
        .collect()
}

/// server-everything's tools ends its text with `Raw result: <ElicitResult>`.
fn raw_elicit_result(result: &Value) -> Value {
    let text = text_of(result);
    let (_, raw) = text
        .split_once("Raw result: ")
        .unwrap_or_else(|| panic!("no raw result in {text}"));
    serde_json::from_str(raw.trim()).unwrap_or_else(|e| panic!("{e}: {raw}"))
}

const ELICIT: &str = "trigger-elicitation-request";
const URL_ELICIT: &str = "trigger-url-elicitation";
const SAMPLE: &str = "trigger-sampling-request";

/// The engine offers servers sampling, elicitation (form and URL) and roots
/// whatever the flags say: servers start before any host connects, and the
/// flags only decide the fallback answer.
#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_everything_offers_every_host_tool_through_the_engine_whatever_the_policy() {
    let env = interop();
    let sb = Sandbox::new();
    let ev = everything(&env);
    let tools = |flags: &[&str]| {
        let mut args = vec!["--direct", ev.as_str()];
        args.extend_from_slice(flags);
        args.push("tools");
        tool_names(&sb.json(&args))
    };
    for flags in [
        &[][..],
        &["--on-elicitation", "cancel"][..],
        &["--on-sampling", "decline"][..],
    ] {
        let got = tools(flags);
        assert!(got.contains("echo"), "{flags:?}: {got:?}");
        for t in [ELICIT, URL_ELICIT, SAMPLE, "get-roots-list"] {
            assert!(got.contains(t), "{t} not offered with {flags:?}: {got:?}");
        }
    }
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_everything_gets_the_answer_each_elicitation_policy_gives() {
    let env = interop();
    let sb = Sandbox::new();
    let ev = everything(&env);
    let call = |policy: &str| {
        let r = sb.run(&[
            "--json",
            "--direct",
            &ev,
            "--on-elicitation",
            policy,
            "call",
            ELICIT,
        ]);
        assert_eq!(r.code, 0, "{policy}: {r:?}");
        (raw_elicit_result(&r.json()), r)
    };

    let (answer, _) = call("decline");
    assert_eq!(answer, json!({"action": "decline"}));

    let (answer, _) = call("cancel");
    assert_eq!(answer, json!({"action": "cancel"}));

    // Its form requires `name`, which has no default: a form nobody can
    // fill in is cancelled, not accepted half-empty.
    let (answer, r) = call("accept-defaults");
    assert_eq!(answer, json!({"action": "cancel"}));
    assert!(
        r.stderr.contains("no usable default") && r.stderr.contains("name"),
        "{r:?}"
    );
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn sampling_decline_reaches_server_everything_as_user_rejected() {
    let env = interop();
    let sb = Sandbox::new();
    let r = sb.run(&[
        "--json",
        "--direct",
        &everything(&env),
        "--on-sampling",
        "decline",
        "call",
        SAMPLE,
        r#"{"prompt":"hello"}"#,
    ]);
    // The server turns our error into an isError result: exit code 1.
    assert_eq!(r.code, 1, "{r:?}");
    let text = text_of(&r.json());
    assert!(
        text.contains("-1") && text.contains("User rejected sampling request"),
        "{text}"
    );
}

/// A form whose every field has a default, one of each kind (SEP-1034).
fn defaulted_form() -> Value {
    json!({
        "requestedSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "Ada"},
                "age": {"type": "integer", "default": 36},
                "score": {"type": "number", "default": 9.5},
                "tier": {"type": "string", "enum": ["free", "pro"], "default": "pro"},
                "ok": {"type": "boolean", "default": false},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "default": ["b"]},
                "nickname": {"type": "string"}
            },
            "required": ["name"]
        }
    })
}

fn expected_accept() -> Value {
    json!({
        "action": "accept",
        "content": {"name": "Ada", "age": 36, "score": 9.5, "tier": "pro", "ok": false, "tags": ["b"]}
    })
}

#[test]
fn accept_defaults_answers_with_the_schema_defaults() {
    let sb = Sandbox::new();
    let spec = format!("ts={}", shell_words::quote(TESTSERVER));
    let args = defaulted_form().to_string();

    let r = sb.json(&[
        "--direct",
        &spec,
        "--on-elicitation",
        "accept-defaults",
        "call",
        "elicit",
        &args,
    ]);
    let answer: Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert_eq!(answer, expected_accept());

    // The same host answers for `inspect`.
    let r = sb.json(&[
        "inspect",
        "--on-elicitation",
        "accept-defaults",
        "--call",
        "elicit",
        "--args",
        &args,
        "--",
        TESTSERVER,
    ]);
    let answer: Value = serde_json::from_str(&text_of(&r["call"])).unwrap();
    assert_eq!(answer, expected_accept());

    // Without a policy (and no terminal) the engine still declares
    // elicitation, and its fallback declines.
    let r = sb.json(&["--direct", &spec, "call", "elicit", &args]);
    let answer: Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert_eq!(answer, serde_json::json!({"action": "decline"}), "{r:?}");
}

fn ts_config() -> String {
    format!(
        r#"{{ "loginShellPath": false, "mcpServers": {{ "ts": {{ "command": {} }} }} }}"#,
        js(TESTSERVER)
    )
}

#[test]
fn the_daemon_answers_with_its_own_policy() {
    let d = Daemon::start_with_flags(
        &ts_config(),
        &[
            "--on-elicitation",
            "accept-defaults",
            "--on-sampling",
            "decline",
        ],
    );
    d.wait_ready(&["ts"], std::time::Duration::from_secs(20));

    let r = d.json(&["call", "ts__elicit", &defaulted_form().to_string()]);
    let answer: Value = serde_json::from_str(&text_of(&r)).unwrap();
    assert_eq!(answer, expected_accept());

    let r = d.run(&["--json", "call", "ts__sample"]);
    assert_eq!(r.code, 1, "{r:?}");
    let text = text_of(&r.json());
    assert!(
        text.contains(r#""code":-1"#) && text.contains("User rejected sampling request"),
        "{text}"
    );
}

#[test]
fn policy_flags_are_refused_where_they_would_do_nothing() {
    let sb = Sandbox::new();
    for args in [
        &["--on-elicitation", "decline", "tools"][..],
        &["call", "x", "--on-sampling", "decline"][..],
        &["bridge", "--on-elicitation", "cancel"][..],
    ] {
        let r = sb.run(args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains("--direct, `daemon` and `inspect`"),
            "{args:?}: {r:?}"
        );
    }
    // Unknown policies are usage errors that list the valid ones.
    let r = sb.run(&["--on-elicitation", "accept", "tools"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("accept-defaults"), "{r:?}");
    let r = sb.run(&["--on-sampling", "accept", "tools"]);
    assert_eq!(r.code, 2, "{r:?}");
}
