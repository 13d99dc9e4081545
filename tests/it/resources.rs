//! Resources, templates, prompts and completions aggregated across servers:
//! the `mcphost://<server>/<uri>` scheme, URIs inside results, subscriptions
//! counted across sessions, stable pages, and the `resources` / `read` /
//! `prompts` / `prompt` commands. Against the pinned server-everything and
//! the bundled test server, through the daemon's socket, `--direct` and the
//! registry in-process.

use crate::common;
use crate::common::wire::Wire;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    Daemon, Interop, Sandbox, TESTSERVER, interop, js, poll, servers_config, text_of, ts_entry,
};
use mcphost::client::CallOptions;
use mcphost::config::HostConfig;
use mcphost::registry::supervisor::ServerState;
use mcphost::registry::{Registry, RegistryError, RegistryEvent};
use serde_json::{Value, json};

const SOON: Duration = Duration::from_secs(30);

fn everything_entry(env: &Interop) -> String {
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    format!(
        r#""command": {}, "args": [{}, "stdio"]"#,
        js(&env.node),
        js(entry.to_str().unwrap())
    )
}

/// `--direct` spec for server-everything named `name`.
fn everything_spec(env: &Interop, name: &str) -> String {
    let entry = env
        .dir
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let cmd = shell_words::join([env.node.as_str(), entry.to_str().unwrap(), "stdio"]);
    format!("{name}={cmd}")
}

/// The requests (parsed) a test server logged with `--log-requests`.
fn logged(path: &Path, method: &str) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["method"] == method)
        .collect()
}

fn logged_uris(path: &Path, method: &str) -> Vec<String> {
    logged(path, method)
        .iter()
        .map(|v| v["params"]["uri"].as_str().unwrap_or_default().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------
// A raw MCP client on the daemon's socket.

/// A raw MCP client on the daemon's socket, initialized.
fn wire(d: &Daemon) -> Wire {
    let mut w = Wire::connect(d);
    let init = w.initialize(json!({}));
    assert!(init["result"].is_object(), "{init}");
    w
}

/// Resource calls over a raw client.
trait ResourceCalls {
    fn ok(&mut self, method: &str, params: Value) -> Value;
    fn ok_raw(&mut self, method: &str, params: Value) -> String;
    fn read(&mut self, uri: &str) -> Value;
    fn all(&mut self, method: &str, field: &str) -> (Vec<Value>, Vec<String>);
}

impl ResourceCalls for Wire {
    /// A result that must succeed.
    fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params.clone());
        assert!(r["error"].is_null(), "{method} {params}: {r}");
        r["result"].clone()
    }

    /// The raw text of a result that must succeed.
    fn ok_raw(&mut self, method: &str, params: Value) -> String {
        #[derive(serde::Deserialize)]
        struct Resp<'a> {
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
        }
        let id = self.start(method, params.clone());
        let line = self.answer_raw(id);
        let resp: Resp<'_> = serde_json::from_str(&line).unwrap();
        resp.result
            .unwrap_or_else(|| panic!("{method} {params}: {line}"))
            .get()
            .to_owned()
    }

    fn read(&mut self, uri: &str) -> Value {
        self.ok("resources/read", json!({ "uri": uri }))
    }

    /// Every item of a paginated list, and the cursors on the way.
    fn all(&mut self, method: &str, field: &str) -> (Vec<Value>, Vec<String>) {
        let mut items = Vec::new();
        let mut cursors = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let r = self.ok(method, params);
            items.extend(r[field].as_array().unwrap_or_else(|| panic!("{r}")).clone());
            match r["nextCursor"].as_str() {
                Some(c) => {
                    cursors.push(c.to_owned());
                    cursor = Some(c.to_owned());
                }
                None => return (items, cursors),
            }
        }
    }
}

fn uris(items: &[Value], key: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[key].as_str().unwrap().to_owned())
        .collect()
}

/// The one text of a `ReadResourceResult`, with its `uri`.
fn read_text(r: &Value) -> (String, String) {
    let c = &r["contents"][0];
    (
        c["uri"].as_str().unwrap_or_default().to_owned(),
        c["text"].as_str().unwrap_or_default().to_owned(),
    )
}

// ---------------------------------------------------------------------------
// server-everything through the daemon

const STATIC_DOC: &str = "demo://resource/static/document/features.md";
const TEXT_TEMPLATE: &str = "demo://resource/dynamic/text/{resourceId}";

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn two_everything_instances_keep_every_copy_readable_through_its_server() {
    let env = interop();
    let ev = everything_entry(&env);
    let d = Daemon::start(&servers_config(&[("a", ev.clone()), ("b", ev)]));
    d.wait_ready(&["a", "b"], SOON);
    let mut w = wire(&d);

    // The same URIs on both servers: every copy under its server's form.
    let (resources, _) = w.all("resources/list", "resources");
    let listed = uris(&resources, "uri");
    assert_eq!(listed.len(), 14, "{listed:?}");
    for s in ["a", "b"] {
        let mine: Vec<&String> = listed
            .iter()
            .filter(|u| u.starts_with(&format!("mcphost://{s}/demo://")))
            .collect();
        assert_eq!(mine.len(), 7, "{s}: {listed:?}");
    }
    // Config order: a's first.
    assert!(listed[..7].iter().all(|u| u.starts_with("mcphost://a/")));
    let (templates, _) = w.all("resources/templates/list", "resourceTemplates");
    let tpls = uris(&templates, "uriTemplate");
    assert!(
        tpls.contains(&format!("mcphost://a/{TEXT_TEMPLATE}"))
            && tpls.contains(&format!("mcphost://b/{TEXT_TEMPLATE}")),
        "{tpls:?}"
    );
    assert!(!tpls.iter().any(|t| t == TEXT_TEMPLATE), "{tpls:?}");

    // Each copy reads through its own server, and comes back in its form.
    for s in ["a", "b"] {
        let exposed = format!("mcphost://{s}/{STATIC_DOC}");
        let (uri, text) = read_text(&w.read(&exposed));
        assert_eq!(uri, exposed);
        assert!(!text.is_empty());
        let exposed = format!("mcphost://{s}/demo://resource/dynamic/text/4");
        let (uri, text) = read_text(&w.read(&exposed));
        assert_eq!(uri, exposed);
        assert!(text.starts_with("Resource 4: "), "{text}");
    }
    // The plain URIs could come from either: the error names both forms.
    for plain in [STATIC_DOC, "demo://resource/dynamic/text/4"] {
        let r = w.request("resources/read", json!({ "uri": plain }));
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("mcphost://a/{plain}"))
                && msg.contains(&format!("mcphost://b/{plain}")),
            "{msg}"
        );
    }
    let r = w.request("resources/read", json!({"uri": "demo://nowhere/1"}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("demo://nowhere/1"),
        "{r}"
    );

    // A tool's resource links come back in the form that reads from it; the
    // rest of the result is the server's bytes.
    let links = w.ok_raw(
        "tools/call",
        json!({"name": "a__get-resource-links", "arguments": {"count": 2}}),
    );
    let direct = direct_everything_call(&env, "get-resource-links", r#"{"count":2}"#);
    assert_eq!(
        links,
        direct.replace(r#""uri":"demo://"#, r#""uri":"mcphost://a/demo://"#)
    );
    let v: Value = serde_json::from_str(&links).unwrap();
    let link_uris: Vec<&str> = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "resource_link")
        .map(|c| c["uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        link_uris,
        [
            "mcphost://a/demo://resource/dynamic/blob/1",
            "mcphost://a/demo://resource/dynamic/text/2"
        ]
    );
    for u in link_uris {
        let r = w.read(u);
        assert_eq!(r["contents"][0]["uri"], u, "{r}");
    }
    // An embedded resource likewise; text mentioning the URI is untouched.
    let r = w.ok(
        "tools/call",
        json!({"name": "b__get-resource-reference", "arguments": {"resourceType": "Text", "resourceId": 3}}),
    );
    let embedded = r["content"][1]["resource"]["uri"].as_str().unwrap();
    assert_eq!(embedded, "mcphost://b/demo://resource/dynamic/text/3");
    assert!(
        text_of(&r).contains("using the URI: demo://resource/dynamic/text/3"),
        "{r}"
    );
    let (_, text) = read_text(&w.read(embedded));
    assert!(text.starts_with("Resource 3: "), "{text}");

    // A session resource only a has: nobody else claims it, so its link
    // stays as it is and reads from a.
    let r = w.ok(
        "tools/call",
        json!({"name": "a__gzip-file-as-resource",
               "arguments": {"name": "hello.gz", "data": "data:text/plain,hello", "outputType": "resourceLink"}}),
    );
    let link = r["content"][0]["uri"].as_str().unwrap().to_owned();
    assert_eq!(link, "demo://resource/session/hello.gz", "{r}");
    let r = w.read(&link);
    assert_eq!(r["contents"][0]["mimeType"], "application/gzip", "{r}");

    // Prompts are namespaced; their embedded resources are exposed too.
    let r = w.ok(
        "prompts/get",
        json!({"name": "b__args-prompt", "arguments": {"city": "Paris"}}),
    );
    assert!(
        r["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{r}"
    );
    let r = w.ok(
        "prompts/get",
        json!({"name": "a__resource-prompt", "arguments": {"resourceType": "Text", "resourceId": "5"}}),
    );
    let embedded = r["messages"][1]["content"]["resource"]["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert_eq!(embedded, "mcphost://a/demo://resource/dynamic/text/5");
    assert!(read_text(&w.read(embedded)).1.starts_with("Resource 5: "));

    // Completions: by a template's exposed form, and by a prompt's name.
    let r = w.ok(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": format!("mcphost://b/{TEXT_TEMPLATE}")},
               "argument": {"name": "resourceId", "value": "7"}}),
    );
    assert_eq!(r["completion"]["values"], json!(["7"]), "{r}");
    let r = w.request(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": TEXT_TEMPLATE},
               "argument": {"name": "resourceId", "value": "7"}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = w.ok(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "b__completable-prompt"},
               "argument": {"name": "department", "value": "En"}}),
    );
    assert_eq!(r["completion"]["values"], json!(["Engineering"]), "{r}");
    let r = w.ok(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "a__completable-prompt"},
               "argument": {"name": "name", "value": "B"},
               "context": {"arguments": {"department": "Engineering"}}}),
    );
    assert_eq!(r["completion"]["values"], json!(["Bob"]), "{r}");
}

/// One `tools/call` result straight from a fresh server-everything.
fn direct_everything_call(env: &Interop, tool: &str, args: &str) -> String {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let entry = env
            .dir
            .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let cfg = mcphost::transport::stdio::StdioConfig::new(
            env.node.clone(),
            vec![entry.display().to_string(), "stdio".to_owned()],
        );
        let c = common::try_connect("direct", cfg, common::quick_opts())
            .await
            .unwrap();
        let r = c
            .call_tool(tool, Some(common::raw(args)), CallOptions::default())
            .await
            .unwrap();
        c.shutdown().await;
        r.raw.get().to_owned()
    })
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn one_everything_keeps_its_own_uris_and_links_byte_for_byte() {
    let env = interop();
    let d = Daemon::start(&servers_config(&[("ev", everything_entry(&env))]));
    d.wait_ready(&["ev"], SOON);
    let mut w = wire(&d);

    let (resources, _) = w.all("resources/list", "resources");
    assert!(
        uris(&resources, "uri")
            .iter()
            .all(|u| u.starts_with("demo://resource/static/document/")),
        "{resources:?}"
    );
    let (templates, _) = w.all("resources/templates/list", "resourceTemplates");
    assert!(uris(&templates, "uriTemplate").contains(&TEXT_TEMPLATE.to_owned()));
    // A template-generated URI, never listed, reads through the template.
    let (uri, text) = read_text(&w.read("demo://resource/dynamic/text/9"));
    assert_eq!(uri, "demo://resource/dynamic/text/9");
    assert!(text.starts_with("Resource 9: "), "{text}");
    // Nothing to rewrite: the server's bytes.
    let links = w.ok_raw(
        "tools/call",
        json!({"name": "ev__get-resource-links", "arguments": {"count": 3}}),
    );
    assert_eq!(
        links,
        direct_everything_call(&env, "get-resource-links", r#"{"count":3}"#)
    );
    for c in serde_json::from_str::<Value>(&links).unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "resource_link")
    {
        let u = c["uri"].as_str().unwrap();
        assert_eq!(w.read(u)["contents"][0]["uri"], u);
    }
    let r = w.ok(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": TEXT_TEMPLATE},
               "argument": {"name": "resourceId", "value": "12"}}),
    );
    assert_eq!(r["completion"]["values"], json!(["12"]), "{r}");
}

// ---------------------------------------------------------------------------
// Routing, observed on the test servers' own request logs

#[test]
fn each_form_reaches_the_right_server_with_its_own_uri() {
    let sb = Sandbox::new();
    let log_one = sb.dir.path().join("one.log");
    let log_two = sb.dir.path().join("two.log");
    let arg = |p: &PathBuf| p.display().to_string();
    let d = Daemon::start_in(
        sb,
        &servers_config(&[
            (
                "one",
                ts_entry(&["--link-tool", "--log-requests", &arg(&log_one)]),
            ),
            (
                "two",
                ts_entry(&["--link-tool", "--log-requests", &arg(&log_two)]),
            ),
        ]),
    );
    d.wait_ready(&["one", "two"], SOON);
    let mut w = wire(&d);
    let reads = |p: &Path| logged_uris(p, "resources/read");

    let (uri, text) = read_text(&w.read("mcphost://one/test://static/1"));
    assert_eq!(
        (uri.as_str(), text.as_str()),
        (
            "mcphost://one/test://static/1",
            "This is static resource 1."
        )
    );
    assert_eq!(reads(&log_one), ["test://static/1"]);
    assert!(reads(&log_two).is_empty());
    // Both have the template: its expansions go by the wrapped form.
    w.read("mcphost://two/test://dynamic/x");
    assert_eq!(reads(&log_two), ["test://dynamic/x"]);
    for plain in ["test://static/1", "test://dynamic/x"] {
        let r = w.request("resources/read", json!({ "uri": plain }));
        assert_eq!(r["error"]["code"], -32602, "{r}");
    }
    for missing in ["test://nosuch", "mcphost://three/test://static/1"] {
        let r = w.request("resources/read", json!({ "uri": missing }));
        assert_eq!(r["error"]["code"], -32002, "{r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(missing),
            "{r}"
        );
    }
    assert_eq!(reads(&log_one).len() + reads(&log_two).len(), 2);

    // A link nobody else can claim stays as it is and is remembered as one's.
    let r = w.ok(
        "tools/call",
        json!({"name": "one__link", "arguments": {"uri": "test://unlisted/a"}}),
    );
    assert_eq!(r["content"][1]["uri"], "test://unlisted/a", "{r}");
    let (_, text) = read_text(&w.read("test://unlisted/a"));
    assert_eq!(text, "Unlisted resource a.");
    assert_eq!(reads(&log_one).last().unwrap(), "test://unlisted/a");
    // The same URI from two is now claimed (by one's result): wrapped.
    let r = w.ok(
        "tools/call",
        json!({"name": "two__link", "arguments": {"uri": "test://unlisted/a", "embed": true}}),
    );
    assert_eq!(
        r["content"][1]["resource"]["uri"], "mcphost://two/test://unlisted/a",
        "{r}"
    );
    w.read("mcphost://two/test://unlisted/a");
    assert_eq!(reads(&log_two).last().unwrap(), "test://unlisted/a");
    w.read("test://unlisted/a");
    assert_eq!(
        reads(&log_one)
            .iter()
            .filter(|u| *u == "test://unlisted/a")
            .count(),
        2
    );
    // A listed URI both have: wrapped; only `uri` changes in the result.
    let raw = w.ok_raw(
        "tools/call",
        json!({"name": "one__link", "arguments": {"uri": "test://static/2"}}),
    );
    assert_eq!(
        raw,
        r#"{"content":[{"text":"see","type":"text"},{"mimeType":"text/plain","name":"link","type":"resource_link","uri":"mcphost://one/test://static/2"}]}"#
    );

    // Completions reach the right server with its own names.
    let r = w.ok(
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "mcphost://two/test://dynamic/{id}"},
               "argument": {"name": "id", "value": "A"}}),
    );
    assert!(r["completion"]["values"].is_array(), "{r}");
    let refs: Vec<Value> = logged(&log_two, "completion/complete")
        .iter()
        .map(|v| v["params"]["ref"].clone())
        .collect();
    assert_eq!(
        refs,
        [json!({"type": "ref/resource", "uri": "test://dynamic/{id}"})]
    );
    let r = w.ok(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "one__greet"},
               "argument": {"name": "name", "value": "Al"}}),
    );
    assert_eq!(r["completion"]["values"], json!(["Alice", "Alfred"]), "{r}");
    let refs: Vec<Value> = logged(&log_one, "completion/complete")
        .iter()
        .map(|v| v["params"]["ref"].clone())
        .collect();
    assert_eq!(refs, [json!({"type": "ref/prompt", "name": "greet"})]);
}

// ---------------------------------------------------------------------------
// Subscriptions, in-process

fn parsed(text: &str) -> HostConfig {
    mcphost::config::parse(text, Path::new("/cfg/config.json"), &|_| None).unwrap()
}

/// The next `ResourceUpdated` events until `want` of them arrived, sorted.
async fn updates(
    events: &mut tokio::sync::broadcast::Receiver<RegistryEvent>,
    want: usize,
) -> Vec<(String, Vec<u64>)> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + SOON;
    while got.len() < want {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(RegistryEvent::ResourceUpdated { uri, sessions })) => {
                got.push((uri, sessions.to_vec()))
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("events: {e}"),
            Err(_) => panic!("only {got:?} of {want} updates within {SOON:?}"),
        }
    }
    got.sort();
    got
}

/// No `ResourceUpdated` event for a moment.
async fn no_update(events: &mut tokio::sync::broadcast::Receiver<RegistryEvent>) {
    let quiet = tokio::time::sleep(Duration::from_millis(500));
    tokio::pin!(quiet);
    loop {
        tokio::select! {
            ev = events.recv() => {
                if let Ok(RegistryEvent::ResourceUpdated { uri, sessions }) = ev {
                    panic!("unexpected update {uri} for {sessions:?}");
                }
            }
            _ = &mut quiet => return,
        }
    }
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + SOON;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {SOON:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_counted_across_sessions_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ts.log");
    let other_log = dir.path().join("other.log");
    let cfg = parsed(&servers_config(&[
        ("ts", ts_entry(&["--log-requests", log.to_str().unwrap()])),
        (
            "other",
            ts_entry(&["--log-requests", other_log.to_str().unwrap()]),
        ),
        ("nosub", ts_entry(&["--capabilities", "tools,resources"])),
    ]));
    let reg = Registry::start(&cfg, common::quick_opts(), common::quick_policy(), None);
    reg.settled(SOON).await;
    let subs = |p: &Path| logged_uris(p, "resources/subscribe");
    let unsubs = |p: &Path| logged_uris(p, "resources/unsubscribe");
    let mut events = reg.subscribe();
    let uri = "mcphost://ts/test://static/1";

    // The first subscriber subscribes upstream (the test server then sends
    // one update); the second only joins.
    reg.subscribe_resource(1, uri).await.unwrap();
    assert_eq!(subs(&log), ["test://static/1"]);
    assert_eq!(updates(&mut events, 1).await, [(uri.to_owned(), vec![1])]);
    reg.subscribe_resource(2, uri).await.unwrap();
    reg.subscribe_resource(2, uri).await.unwrap();
    assert_eq!(subs(&log).len(), 1);
    no_update(&mut events).await;
    // The other server's copy of the same URI is another subscription.
    reg.subscribe_resource(3, "mcphost://other/test://static/1")
        .await
        .unwrap();
    assert_eq!(subs(&other_log), ["test://static/1"]);
    assert_eq!(
        updates(&mut events, 1).await,
        [("mcphost://other/test://static/1".to_owned(), vec![3])]
    );
    assert_eq!(
        reg.subscriptions(),
        [
            ("other".to_owned(), "test://static/1".to_owned(), vec![3]),
            ("ts".to_owned(), "test://static/1".to_owned(), vec![1, 2]),
        ]
    );

    // A new instance gets the subscription again; its update reaches both
    // subscribers, and only them.
    let old_pid = reg.statuses().iter().find(|s| s.name == "ts").unwrap().pid;
    reg.restart("ts").await.unwrap();
    wait_for("the restarted server to be subscribed", || {
        subs(&log).len() == 2
    })
    .await;
    assert_eq!(
        updates(&mut events, 1).await,
        [(uri.to_owned(), vec![1, 2])]
    );
    // `ready` once the re-listing has landed, a moment after the session.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let st = loop {
        let st = reg.statuses();
        let ready = st
            .iter()
            .any(|s| s.name == "ts" && s.state == ServerState::Ready);
        if ready || std::time::Instant::now() > deadline {
            break st;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ts_status = st.iter().find(|s| s.name == "ts").unwrap();
    assert_eq!(ts_status.state, ServerState::Ready);
    assert_ne!(ts_status.pid, old_pid);

    // One of two leaves: upstream stays subscribed; the last one unsubscribes.
    reg.unsubscribe_resource(1, uri).await.unwrap();
    assert!(unsubs(&log).is_empty());
    reg.unsubscribe_resource(1, uri).await.unwrap();
    reg.forget_session(2);
    wait_for("the upstream unsubscribe", || unsubs(&log).len() == 1).await;
    assert_eq!(unsubs(&log), ["test://static/1"]);
    assert!(unsubs(&other_log).is_empty());
    // Unsubscribing by another URI that resolves to the same resource works.
    reg.unsubscribe_resource(3, "mcphost://other/test://static/1")
        .await
        .unwrap();
    assert_eq!(unsubs(&other_log), ["test://static/1"]);
    assert!(reg.subscriptions().is_empty());

    // Errors: nothing to route to, or a server that cannot subscribe.
    let e = reg
        .subscribe_resource(4, "test://nowhere")
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::UnknownResource(_)), "{e}");
    let e = reg
        .subscribe_resource(4, "mcphost://nosub/test://static/1")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("subscribe"), "{e}");
    assert!(reg.subscriptions().is_empty());
    reg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn server_everything_updates_reach_its_subscriber() {
    let env = interop();
    let cfg = parsed(&servers_config(&[("ev", everything_entry(&env))]));
    let reg = Registry::start(&cfg, common::quick_opts(), common::quick_policy(), None);
    reg.settled(SOON).await;
    let mut events = reg.subscribe();
    reg.subscribe_resource(7, STATIC_DOC).await.unwrap();
    // The server sends updates for its subscriptions once asked to.
    let r = reg
        .call_tool(
            "ev__toggle-subscriber-updates",
            Some(common::raw("{}")),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{}", r.raw.get());
    assert_eq!(
        updates(&mut events, 1).await,
        [(STATIC_DOC.to_owned(), vec![7])]
    );
    reg.forget_session(7);
    assert!(reg.subscriptions().is_empty());
    reg.shutdown().await;
}

// ---------------------------------------------------------------------------
// Pages

#[test]
fn every_list_pages_in_a_stable_order_across_calls_and_restarts() {
    let d = Daemon::start(&servers_config(&[
        (
            "big",
            ts_entry(&["--tools", "250", "--resources", "250", "--prompts", "250"]),
        ),
        ("small", ts_entry(&[])),
    ]));
    d.wait_ready(&["big", "small"], SOON);
    let mut w = wire(&d);
    let lists = [
        ("tools/list", "tools"),
        ("prompts/list", "prompts"),
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
    ];
    let snapshot = |w: &mut Wire| -> Vec<(Vec<Value>, Vec<String>)> {
        lists.iter().map(|(m, f)| w.all(m, f)).collect()
    };
    let first = snapshot(&mut w);
    for ((method, _), (items, cursors)) in lists.iter().zip(&first) {
        if *method != "resources/templates/list" {
            assert!(items.len() > 250 && !cursors.is_empty(), "{method}");
        }
    }
    // Config order, then each server's: big's items come first.
    let names = uris(&first[0].0, "name");
    assert_eq!(names[0], "big__echo");
    assert!(names.last().unwrap().starts_with("small__"), "{names:?}");
    let resource_uris = uris(&first[2].0, "uri");
    assert_eq!(resource_uris[0], "mcphost://big/test://static/1");
    assert_eq!(
        resource_uris.last().unwrap(),
        "mcphost://small/test://static/3"
    );
    assert_eq!(
        uris(&first[3].0, "uriTemplate"),
        [
            "mcphost://big/test://dynamic/{id}",
            "mcphost://small/test://dynamic/{id}"
        ]
    );
    assert_eq!(snapshot(&mut w), first, "a second listing differs");

    // An unrelated server restarts: same pages, and old cursors still work.
    let before = d.server("small").unwrap()["pid"].clone();
    assert_eq!(d.run(&["servers", "restart", "small"]).code, 0);
    poll("small to restart", SOON, || {
        let s = d.server("small")?;
        (s["state"] == "ready" && s["pid"] != before).then_some(())
    });
    let (_, cursors) = &first[0];
    let page = w.ok("tools/list", json!({"cursor": cursors[0]}));
    assert_eq!(page["tools"][0]["name"], first[0].0[200]["name"], "{page}");
    assert_eq!(snapshot(&mut w), first, "listing changed after a restart");
}

// ---------------------------------------------------------------------------
// The CLI

#[test]
fn cli_lists_reads_and_gets_prompts_directly_and_through_the_daemon() {
    let d = Daemon::start(&servers_config(&[("ts", ts_entry(&[]))]));
    d.wait_ready(&["ts"], SOON);
    let spec = format!("ts={TESTSERVER}");
    for direct in [true, false] {
        let mode = if direct { "--direct" } else { "daemon" };
        let run = |args: &[&str]| {
            let mut a: Vec<&str> = Vec::new();
            if direct {
                a.extend(["--direct", spec.as_str()]);
            }
            a.extend_from_slice(args);
            d.run(&a)
        };
        let json = |args: &[&str]| {
            let mut a = vec!["--json"];
            a.extend_from_slice(args);
            let r = run(&a);
            assert_eq!(r.code, 0, "{mode} {a:?}: {r:?}");
            r.json()
        };

        let r = run(&["resources"]);
        assert_eq!(r.code, 0, "{mode}: {r:?}");
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert!(
            lines[0].starts_with("URI") && lines[0].contains("MIME TYPE"),
            "{r:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("test://static/1 ") && l.contains("text/plain")),
            "{mode}: {r:?}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("URI TEMPLATE")),
            "{mode}: {r:?}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("test://dynamic/{id}")),
            "{mode}: {r:?}"
        );
        let v = json(&["resources"]);
        assert_eq!(v["resources"].as_array().unwrap().len(), 3, "{mode}: {v}");
        assert_eq!(v["resources"][0]["uri"], "test://static/1");
        assert_eq!(
            v["resourceTemplates"][0]["uriTemplate"],
            "test://dynamic/{id}"
        );
        let v = json(&["resources", "--templates"]);
        assert_eq!(v.as_array().unwrap().len(), 1, "{mode}: {v}");

        let r = run(&["read", "test://static/2"]);
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, "This is static resource 2.\n"),
            "{mode}: {r:?}"
        );
        let r = run(&["read", "test://dynamic/zz"]);
        assert_eq!(r.stdout, "Dynamic resource zz.\n", "{mode}: {r:?}");
        let v = json(&["read", "test://static/2"]);
        assert_eq!(v["contents"][0]["uri"], "test://static/2", "{mode}: {v}");
        let r = run(&["read", "test://nowhere"]);
        assert_eq!(r.code, 2, "{mode}: {r:?}");
        assert!(
            r.stderr.contains("test://nowhere") && r.stdout.is_empty(),
            "{mode}: {r:?}"
        );

        let r = run(&["prompts"]);
        assert_eq!(r.code, 0, "{mode}: {r:?}");
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with("ts__greet ") && l.contains("name*")),
            "{mode}: {r:?}"
        );
        let v = json(&["prompts"]);
        assert_eq!(v[0]["name"], "ts__greet", "{mode}: {v}");
        // By catalog name and by the server's own name.
        for name in ["ts__greet", "greet"] {
            let r = run(&["prompt", name, r#"{"name":"Ann"}"#]);
            assert_eq!(r.code, 0, "{mode} {name}: {r:?}");
            let mut lines = r.stdout.lines();
            assert_eq!(lines.next(), Some("[user]"), "{mode}: {r:?}");
            assert!(r.stdout.contains("Ann"), "{mode}: {r:?}");
        }
        let v = json(&["prompt", "greet", r#"{"name":"Ann"}"#]);
        assert!(v["messages"].is_array(), "{mode}: {v}");
        for bad in [
            &["prompt", "nosuch"][..],
            &["prompt", "greet", "[1]"],
            &["prompt", "greet", "{"],
        ] {
            let r = run(bad);
            assert_eq!(r.code, 2, "{mode} {bad:?}: {r:?}");
        }
    }
}

#[test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
fn cli_reads_blobs_and_wrapped_uris_of_server_everything() {
    let env = interop();
    let sb = Sandbox::new();
    let a = everything_spec(&env, "a");
    let b = everything_spec(&env, "b");
    let two = ["--direct", a.as_str(), "--direct", b.as_str()];
    let run = |args: &[&str]| sb.run(&[&two[..], args].concat());

    let r = run(&["read", "mcphost://b/demo://resource/dynamic/blob/2"]);
    assert_eq!(r.code, 0, "{r:?}");
    let line = r.stdout.trim_end();
    assert!(
        line.starts_with("[blob mcphost://b/demo://resource/dynamic/blob/2: ")
            && line.ends_with(" bytes, text/plain]"),
        "{r:?}"
    );
    // The size is the decoded blob's.
    let v = sb.json(
        &[
            &two[..],
            &["read", "mcphost://b/demo://resource/dynamic/blob/2"],
        ]
        .concat(),
    );
    let blob = v["contents"][0]["blob"].as_str().unwrap();
    let text_len = "Resource 2: This is a base64 blob created at ".len();
    let n: usize = line
        .rsplit_once(": ")
        .unwrap()
        .1
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        n > text_len && n == blob.len() / 4 * 3 - blob.matches('=').count(),
        "{n} {blob}"
    );

    let r = run(&["read", "demo://resource/dynamic/blob/2"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("mcphost://a/demo://resource/dynamic/blob/2"),
        "{r:?}"
    );

    let r = run(&["resources"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .lines()
            .any(|l| l.starts_with(&format!("mcphost://b/{STATIC_DOC} ")) && l.contains(" b ")),
        "{r:?}"
    );
    let r = run(&[
        "prompt",
        "b__resource-prompt",
        r#"{"resourceType":"Text","resourceId":"3"}"#,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("[resource mcphost://b/demo://resource/dynamic/text/3]\nResource 3: "),
        "{r:?}"
    );
    // The own name is on both servers: ambiguous, with the names to use.
    let r = run(&["prompt", "resource-prompt"]);
    assert_eq!(r.code, 2, "{r:?}");
}
