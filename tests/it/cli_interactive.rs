//! The CLI as the host on a terminal, driven through a pseudo-terminal: a
//! form filled in, a URL consent refused (and given), a sampling reply
//! typed, Esc and Ctrl-C, against the bundled test server and
//! `@modelcontextprotocol/server-everything`, with `--direct`. With a policy
//! flag the terminal does not prompt (tests/it/cli_policy.rs covers runs
//! without a terminal).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{MCPHOST, Sandbox, TESTSERVER, interop};
use expectrl::process::unix::WaitStatus;
use expectrl::{Eof, Expect, Session};
use serde_json::{Value, json};

type Pty = expectrl::session::OsSession;

const DOWN: &str = "\x1b[B";
const UP: &str = "\x1b[A";
const ESC: &str = "\x1b";
const CTRL_C: &str = "\x03";
const BACKSPACE: &str = "\x7f";

/// `mcphost ARGS` on a fresh pseudo-terminal (stdin, stdout and stderr),
/// in the sandbox's environment plus `env`.
fn spawn(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Pty {
    let mut cmd = Command::new(MCPHOST);
    cmd.args(args)
        .env("HOME", &sb.home)
        .env("MCPHOST_SOCKET", &sb.socket)
        .env("MCPHOST_CONFIG", &sb.config)
        .env("TERM", "xterm-256color")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("RUST_LOG")
        .env_remove(OPEN_ENV)
        .env("MCPHOST_NO_AUTOSTART", "1")
        // The pty is fds 0-2: keep them.
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut p = Session::spawn(cmd).unwrap_or_else(|e| panic!("spawning mcphost {args:?}: {e}"));
    p.get_process_mut().set_window_size(200, 50).unwrap();
    p.set_expect_timeout(Some(Duration::from_secs(60)));
    p
}

const OPEN_ENV: &str = "MCPHOST_OPEN_URL_COMMAND";

fn ts() -> String {
    format!("ts={}", shell_words::quote(TESTSERVER))
}

/// Waits for `text` on the terminal; on a timeout, says what was there.
fn want(p: &mut Pty, text: &str) {
    if let Err(e) = p.expect(text) {
        let mut rest = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = p.try_read(&mut buf) {
            rest.extend_from_slice(&buf[..n]);
        }
        panic!(
            "waiting for {text:?}: {e}; the terminal then showed:\n{}",
            String::from_utf8_lossy(&rest)
        );
    }
}

fn send(p: &mut Pty, keys: &str) {
    p.send(keys).unwrap();
    // Each key sequence alone, so Esc is not taken for the start of another.
    std::thread::sleep(Duration::from_millis(150));
}

/// Everything the terminal shows until the process ends, and its exit code.
fn finish(mut p: Pty) -> (String, i32) {
    let c = p.expect(Eof).expect("mcphost did not end");
    let text = String::from_utf8_lossy(c.as_bytes()).into_owned();
    let code = match p.get_process().wait().unwrap() {
        WaitStatus::Exited(_, code) => code,
        other => panic!("mcphost did not exit normally: {other:?}\n{text}"),
    };
    (text, code)
}

/// The one line of `text` that is a JSON object with `key`.
fn json_line(text: &str, key: &str) -> Value {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let start = l.find('{')?;
            serde_json::from_str::<Value>(&l[start..]).ok()
        })
        .find(|v| v.get(key).is_some())
        .unwrap_or_else(|| panic!("no JSON object with {key:?} in:\n{text}"))
}

/// The testserver's `elicit`/`sample` result: the client's answer as text.
fn answer_of(text: &str, key: &str) -> Value {
    json_line(text, key)
}

fn form_args() -> String {
    json!({
        "message": "Who are you?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name", "minLength": 2},
                "age": {"type": "integer", "title": "Age", "minimum": 0, "maximum": 150},
                "ok": {"type": "boolean", "title": "Agree"},
                "tier": {"type": "string", "title": "Tier", "enum": ["free", "pro"], "enumNames": ["Free", "Pro"]}
            },
            "required": ["name", "age", "ok", "tier"]
        }
    })
    .to_string()
}

#[test]
fn a_form_is_filled_in_with_typed_values() {
    let sb = Sandbox::new();
    let args = form_args();
    let mut p = spawn(&sb, &["--direct", &ts(), "call", "elicit", &args], &[]);
    want(&mut p, "server 'ts' asks for input");
    want(&mut p, "Who are you?");
    want(&mut p, "Fill in the form");
    send(&mut p, "\r");
    // The test server hands the schema on with its keys sorted.
    want(&mut p, "Age:");
    want(&mut p, "integer, 0 to 150");
    send(&mut p, "abc\r");
    want(&mut p, "a whole number");
    send(&mut p, &BACKSPACE.repeat(3));
    send(&mut p, "151\r");
    want(&mut p, "at most 150");
    send(&mut p, &BACKSPACE.repeat(3));
    send(&mut p, "36\r");
    want(&mut p, "Name:");
    send(&mut p, "A\r");
    want(&mut p, "at least 2 characters");
    send(&mut p, "da\r");
    want(&mut p, "Agree:");
    send(&mut p, "y\r");
    want(&mut p, "Tier:");
    want(&mut p, "Pro");
    send(&mut p, DOWN);
    send(&mut p, "\r");
    want(&mut p, "answered 'ts' with accept");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    // 36 is a number, not "36"; the enum sends its value, not its title.
    assert_eq!(
        answer_of(&text, "action"),
        json!({"action": "accept", "content": {"age": 36, "name": "Ada", "ok": true, "tier": "pro"}})
    );
}

#[test]
fn a_form_can_be_declined_or_cancelled_with_esc() {
    let sb = Sandbox::new();
    let args = form_args();
    let mut p = spawn(&sb, &["--direct", &ts(), "call", "elicit", &args], &[]);
    want(&mut p, "Fill in the form");
    send(&mut p, DOWN);
    send(&mut p, "\r");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(answer_of(&text, "action"), json!({"action": "decline"}));

    let mut p = spawn(&sb, &["--direct", &ts(), "call", "elicit", &args], &[]);
    want(&mut p, "Fill in the form");
    send(&mut p, "\r");
    want(&mut p, "Age:");
    send(&mut p, "3");
    send(&mut p, ESC);
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(answer_of(&text, "action"), json!({"action": "cancel"}));

    // Ctrl-C in a prompt cancels too, and the CLI still ends normally.
    let mut p = spawn(&sb, &["--direct", &ts(), "call", "elicit", &args], &[]);
    want(&mut p, "Fill in the form");
    send(&mut p, "\r");
    want(&mut p, "Age:");
    send(&mut p, CTRL_C);
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(answer_of(&text, "action"), json!({"action": "cancel"}));
    assert!(!text.contains("panicked"), "{text}");
}

fn url_args() -> String {
    json!({
        "mode": "url",
        "message": "Sign in to continue",
        "url": "https://bücher.example/login?next=1",
        "elicitationId": "e-42"
    })
    .to_string()
}

/// An opener that writes the URL it gets to `file`.
fn recording_opener(file: &Path) -> String {
    format!(
        "sh -c {} opener",
        shell_words::quote(&format!(
            "printf %s \"$1\" > {}",
            shell_words::quote(file.to_str().unwrap())
        ))
    )
}

#[test]
fn a_url_consent_refused_is_a_decline_and_opens_nothing() {
    let sb = Sandbox::new();
    let opened = sb.dir.path().join("opened");
    let opener = recording_opener(&opened);
    let args = url_args();
    let mut p = spawn(
        &sb,
        &["--direct", &ts(), "call", "elicit", &args],
        &[(OPEN_ENV, &opener)],
    );
    want(&mut p, "server 'ts' asks you to open a link");
    want(&mut p, "Sign in to continue");
    // The full URL and its domain, the IDN as punycode.
    want(&mut p, "URL:    https://xn--bcher-kva.example/login?next=1");
    want(&mut p, "domain: xn--bcher-kva.example");
    want(&mut p, "Open this link to xn--bcher-kva.example");
    send(&mut p, "n\r");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(answer_of(&text, "action"), json!({"action": "decline"}));
    assert!(!opened.exists(), "the URL was opened after a refusal");
}

#[test]
fn a_url_consent_given_opens_it_and_accepts() {
    let sb = Sandbox::new();
    let opened = sb.dir.path().join("opened");
    let opener = recording_opener(&opened);
    let args = url_args();
    let mut p = spawn(
        &sb,
        &["--direct", &ts(), "call", "elicit", &args],
        &[(OPEN_ENV, &opener)],
    );
    want(&mut p, "Open this link to xn--bcher-kva.example");
    send(&mut p, "y\r");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(answer_of(&text, "action"), json!({"action": "accept"}));
    assert_eq!(
        std::fs::read_to_string(&opened).unwrap(),
        "https://xn--bcher-kva.example/login?next=1"
    );
}

#[test]
fn a_sampling_reply_is_typed_and_reaches_the_server() {
    let sb = Sandbox::new();
    let args = json!({"prompt": "Say hello.", "maxTokens": 50}).to_string();
    let mut p = spawn(&sb, &["--direct", &ts(), "call", "sample", &args], &[]);
    want(&mut p, "server 'ts' asks for a model reply (sampling)");
    want(
        &mut p,
        "system prompt: You are being called by mcphost-testserver.",
    );
    want(&mut p, "max tokens: 50");
    want(&mut p, "[user] Say hello.");
    want(&mut p, "Type a reply");
    send(&mut p, "\r");
    want(&mut p, "Reply:");
    send(&mut p, "Hello from a person.\r");
    send(&mut p, "Second line.\r");
    send(&mut p, "\r");
    want(&mut p, "sent your reply to 'ts'");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        answer_of(&text, "model"),
        json!({
            "role": "assistant",
            "content": {"type": "text", "text": "Hello from a person.\nSecond line."},
            "model": "human",
            "stopReason": "endTurn"
        })
    );
}

#[test]
fn sampling_declined_or_interrupted_is_the_user_rejected_error() {
    let sb = Sandbox::new();
    let args = json!({"prompt": "Say hello."}).to_string();
    // Decline picked, Ctrl-C, Esc: each key alone.
    for keys in [&[DOWN, DOWN, "\r"][..], &[CTRL_C], &[ESC]] {
        let mut p = spawn(&sb, &["--direct", &ts(), "call", "sample", &args], &[]);
        want(&mut p, "Type a reply");
        for k in keys {
            send(&mut p, k);
        }
        want(&mut p, "declined 'ts'");
        let (text, code) = finish(p);
        // The test server turns the error into an isError result.
        assert_eq!(code, 1, "{keys:?}: {text}");
        assert!(
            text.contains("User rejected sampling request") && text.contains("-1"),
            "{keys:?}: {text}"
        );
    }
}

#[test]
fn a_policy_flag_answers_without_prompting_on_a_terminal() {
    let sb = Sandbox::new();
    let args = form_args();
    let p = spawn(
        &sb,
        &[
            "--direct",
            &ts(),
            "--on-elicitation",
            "decline",
            "call",
            "elicit",
            &args,
        ],
        &[],
    );
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(answer_of(&text, "action"), json!({"action": "decline"}));
    assert!(!text.contains("asks for input"), "{text}");
}

fn everything(env: &common::Interop) -> String {
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    format!(
        "ev={}",
        shell_words::join([env.node.as_str(), entry.to_str().unwrap(), "stdio"])
    )
}

/// The texts of a `--json` tool result on the terminal, joined.
fn result_text(text: &str) -> String {
    let result = json_line(text, "content");
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// server-everything's elicitation tools end with `Raw result: <ElicitResult>`.
fn raw_result(text: &str) -> Value {
    let all = result_text(text);
    let (_, raw) = all
        .split_once("Raw result: ")
        .unwrap_or_else(|| panic!("no raw result: {all}"));
    serde_json::from_str(raw.trim()).unwrap_or_else(|e| panic!("{e}: {raw}"))
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_everything_url_consent_refused() {
    let env = interop();
    let sb = Sandbox::new();
    let opened = sb.dir.path().join("opened");
    let opener = recording_opener(&opened);
    let ev = everything(&env);
    let args = json!({"url": "https://example.com/verify?id=7", "message": "Verify your account"})
        .to_string();
    let mut p = spawn(
        &sb,
        &[
            "--json",
            "--direct",
            &ev,
            "call",
            "trigger-url-elicitation",
            &args,
        ],
        &[(OPEN_ENV, &opener)],
    );
    want(&mut p, "server 'ev' asks you to open a link");
    want(&mut p, "Verify your account");
    want(&mut p, "URL:    https://example.com/verify?id=7");
    want(&mut p, "domain: example.com");
    want(&mut p, "Open this link to example.com");
    send(&mut p, "n\r");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert!(
        result_text(&text).contains("User declined to open the URL"),
        "{text}"
    );
    assert_eq!(raw_result(&text), json!({"action": "decline"}));
    assert!(!opened.exists());
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_everything_url_elicitation_required_error_shows_its_urls() {
    let env = interop();
    let sb = Sandbox::new();
    let ev = everything(&env);
    let args = json!({"url": "https://example.com/verify", "errorPath": true}).to_string();
    // Only a client that declares URL mode gets the tool: the terminal host.
    let p = spawn(
        &sb,
        &["--direct", &ev, "call", "trigger-url-elicitation", &args],
        &[],
    );
    let (text, code) = finish(p);
    assert_eq!(code, 2, "{text}");
    assert!(!text.contains("(code -32042)"), "{text}");
    assert!(
        text.contains("The server needs you to complete this first, then retry:")
            && text.contains("https://modelcontextprotocol.io")
            && text.contains("domain: modelcontextprotocol.io  Open this link"),
        "{text}"
    );
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_everything_sampling_reply_typed() {
    let env = interop();
    let sb = Sandbox::new();
    let ev = everything(&env);
    let args = json!({"prompt": "Name a colour.", "maxTokens": 20}).to_string();
    let mut p = spawn(
        &sb,
        &[
            "--json",
            "--direct",
            &ev,
            "call",
            "trigger-sampling-request",
            &args,
        ],
        &[],
    );
    want(&mut p, "server 'ev' asks for a model reply (sampling)");
    want(&mut p, "max tokens: 20");
    want(&mut p, "Name a colour.");
    want(&mut p, "Type a reply");
    send(&mut p, "\r");
    want(&mut p, "Reply:");
    send(&mut p, "Ultramarine.\r");
    send(&mut p, "\r");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    let all = result_text(&text);
    let (_, raw) = all
        .split_once("LLM sampling result:")
        .unwrap_or_else(|| panic!("{all}"));
    let got: Value = serde_json::from_str(raw.trim()).unwrap_or_else(|e| panic!("{e}: {raw}"));
    assert_eq!(
        got["content"],
        json!({"type": "text", "text": "Ultramarine."})
    );
    assert_eq!(got["model"], "human");
    assert_eq!(got["role"], "assistant");
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn server_everything_elicitation_form_filled_in() {
    let env = interop();
    let sb = Sandbox::new();
    let ev = everything(&env);
    let mut p = spawn(
        &sb,
        &[
            "--json",
            "--direct",
            &ev,
            "call",
            "trigger-elicitation-request",
        ],
        &[],
    );
    want(&mut p, "server 'ev' asks for input");
    want(&mut p, "Please provide inputs for the following fields:");
    want(&mut p, "Fill in the form");
    send(&mut p, "\r");
    want(&mut p, "String:");
    want(&mut p, "Your full, legal name");
    send(&mut p, "\r");
    want(&mut p, "this field is required");
    send(&mut p, "Ada Lovelace\r");
    // An optional boolean without a default may stay unanswered.
    want(&mut p, "Boolean (optional):");
    want(&mut p, "(no answer)");
    send(&mut p, UP);
    send(&mut p, UP);
    send(&mut p, "\r");
    want(&mut p, "String with default (optional):");
    send(&mut p, "\r");
    want(&mut p, "String with email format (optional):");
    send(&mut p, "ada\r");
    want(&mut p, "an email address");
    send(&mut p, "@example.com\r");
    want(&mut p, "String with uri format (optional):");
    send(&mut p, "https://ada.example\r");
    want(&mut p, "String with date format (optional):");
    send(&mut p, "1815-12-10\r");
    want(&mut p, "Integer (optional):");
    want(&mut p, "integer, 1 to 100");
    send(&mut p, "\r");
    want(&mut p, "Number in range 1-1000 (optional):");
    send(&mut p, "2.5\r");
    want(&mut p, "Untitled Single Select Enum (optional):");
    send(&mut p, "\r");
    want(&mut p, "Untitled Multiple Select Enum (optional):");
    send(&mut p, "\r");
    want(&mut p, "Titled Single Select Enum (optional):");
    want(&mut p, "Wonder Woman");
    send(&mut p, DOWN);
    send(&mut p, DOWN);
    send(&mut p, "\r");
    want(&mut p, "Titled Multiple Select Enum (optional):");
    want(&mut p, "Salmon");
    send(&mut p, DOWN);
    send(&mut p, " ");
    send(&mut p, "\r");
    want(&mut p, "Legacy Titled Single Select Enum (optional):");
    want(&mut p, "Dogs");
    send(&mut p, DOWN);
    send(&mut p, "\r");
    want(&mut p, "answered 'ev' with accept");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        raw_result(&text),
        json!({
            "action": "accept",
            "content": {
                "name": "Ada Lovelace",
                "check": true,
                "firstLine": "It was a dark and stormy night.",
                "email": "ada@example.com",
                "homepage": "https://ada.example",
                "birthdate": "1815-12-10",
                "integer": 42,
                "number": 2.5,
                "untitledSingleSelectEnum": "Monica",
                "untitledMultipleSelectEnum": ["Guitar"],
                "titledSingleSelectEnum": "hero-3",
                "titledMultipleSelectEnum": ["fish-1", "fish-2"],
                "legacyTitledEnum": "pet-2"
            }
        })
    );
}

/// Through the daemon: the CLI's connection declares the terminal host, and
/// the daemon routes the request its call caused back to it.
#[test]
fn through_the_daemon_the_cli_answers_its_own_calls_requests() {
    let d = common::Daemon::start(&common::ts_config(&[]));
    d.wait_ready(&["ts"], Duration::from_secs(20));
    let args = form_args();
    let mut p = spawn(&d, &["call", "elicit", &args], &[]);
    want(&mut p, "server 'ts' asks for input");
    want(&mut p, "Fill in the form");
    send(&mut p, "\r");
    want(&mut p, "Age:");
    send(&mut p, "36\r");
    want(&mut p, "Name:");
    send(&mut p, "Ada\r");
    want(&mut p, "Agree:");
    send(&mut p, "n\r");
    want(&mut p, "Tier:");
    send(&mut p, "\r");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        answer_of(&text, "action"),
        json!({"action": "accept", "content": {"age": 36, "name": "Ada", "ok": false, "tier": "free"}})
    );

    let opened = d.dir.path().join("opened");
    let opener = recording_opener(&opened);
    let url = url_args();
    let mut p = spawn(&d, &["call", "elicit", &url], &[(OPEN_ENV, &opener)]);
    want(&mut p, "domain: xn--bcher-kva.example");
    send(&mut p, "n\r");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(answer_of(&text, "action"), json!({"action": "decline"}));
    assert!(!opened.exists());

    let sample = json!({"prompt": "Say hello."}).to_string();
    let mut p = spawn(&d, &["call", "sample", &sample], &[]);
    want(&mut p, "Type a reply");
    send(&mut p, "\r");
    want(&mut p, "Reply:");
    send(&mut p, "Hi from the daemon path.\r");
    send(&mut p, "\r");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        answer_of(&text, "model")["content"]["text"],
        "Hi from the daemon path."
    );
}

/// Whether the terminal is back in line mode (ICANON), as before a prompt.
fn canonical(p: &Pty) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: tcgetattr on the pty master we own fills in the struct.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        assert_eq!(libc::tcgetattr(p.get_stream().as_raw_fd(), &mut t), 0);
        t.c_lflag & libc::ICANON != 0
    }
}

#[test]
fn a_server_that_dies_mid_prompt_leaves_the_terminal_usable() {
    let sb = Sandbox::new();
    // The server is killed 2 s after it starts, while the prompt is open.
    let spec = format!("brief=timeout 2 {}", shell_words::quote(TESTSERVER));
    let args = json!({"prompt": "Say hello."}).to_string();
    let mut p = spawn(&sb, &["--direct", &spec, "call", "sample", &args], &[]);
    assert!(canonical(&p));
    want(&mut p, "Type a reply");
    assert!(!canonical(&p), "the prompt runs in raw mode");
    // Nobody answers: the call fails when the server dies, and the CLI
    // ends at once instead of waiting for the prompt.
    let c = p.expect(Eof).expect("mcphost did not end");
    let text = String::from_utf8_lossy(c.as_bytes()).into_owned();
    let status = p.get_process().wait().unwrap();
    assert!(
        matches!(status, WaitStatus::Exited(_, 2)),
        "{status:?}: {text}"
    );
    assert!(text.contains("server 'brief'"), "{text}");
    assert!(canonical(&p), "the terminal was left in raw mode: {text}");
}

#[test]
fn inspect_on_a_terminal_asks_too() {
    let sb = Sandbox::new();
    let args = json!({"message": "Your name?"}).to_string();
    let mut p = spawn(
        &sb,
        &[
            "inspect", "--call", "elicit", "--args", &args, "--", TESTSERVER,
        ],
        &[],
    );
    want(&mut p, "asks for input");
    want(&mut p, "Your name?");
    send(&mut p, "\r");
    want(&mut p, "name:");
    send(&mut p, "Grace\r");
    want(&mut p, "answered");
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(r#"{\"action\":\"accept\",\"content\":{\"name\":\"Grace\"}}"#)
            || text.contains(r#"{"action":"accept","content":{"name":"Grace"}}"#),
        "{text}"
    );
}

#[test]
fn a_long_call_shows_the_servers_progress_on_a_terminal() {
    let sb = Sandbox::new();
    let p = spawn(
        &sb,
        &["--direct", &ts(), "call", "slow", r#"{"ms":400}"#],
        &[],
    );
    let (text, code) = finish(p);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("mcphost: progress"),
        "no progress shown:\n{text}"
    );
}
