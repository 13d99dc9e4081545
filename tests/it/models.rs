//! A catalog sized for models: token costs, session budgets and allow
//! lists, search mode and provider schema profiles, through the engine
//! (the method set every door serves) and the CLI.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Sandbox, TESTSERVER, js};
use mcphost::client::NoHost;
use mcphost::engine::{Engine, EngineBuilder, HostPort, Session, SessionLimits};
use mcphost::protocol::{Id, RawValue};
use serde_json::{Value, json};

fn engine_with(servers: &str, extra: &str) -> Arc<Engine> {
    let text = format!(r#"{{"mcpServers":{{{servers}}},"loginShellPath":false{extra}}}"#);
    let cfg = mcphost::config::parse(
        &text,
        std::path::Path::new("/nonexistent/config.json"),
        &|_| None,
    )
    .unwrap_or_else(|e| panic!("config {text}: {e}"));
    EngineBuilder::new(cfg).start()
}

/// One test server `ts` with `args`.
fn ts(args: &[&str]) -> String {
    format!(
        r#""ts":{{"command":{},"args":{}}}"#,
        js(TESTSERVER),
        serde_json::to_string(args).unwrap()
    )
}

async fn ready(engine: &Arc<Engine>, tools: usize) {
    engine.registry().settled(Duration::from_secs(20)).await;
    assert!(
        engine.registry().catalog().len() >= tools,
        "only {} tools listed: {:?}",
        engine.registry().catalog().len(),
        engine.registry().statuses()
    );
}

type Notes = Arc<std::sync::Mutex<Vec<(String, Value)>>>;

fn session(engine: &Arc<Engine>) -> (Arc<Session>, Notes) {
    let notes: Notes = Arc::default();
    let seen = notes.clone();
    let port = Arc::new(HostPort::new(Arc::new(NoHost), move |m, p| {
        let p = p
            .map(|p| serde_json::from_str(p.get()).unwrap())
            .unwrap_or(Value::Null);
        seen.lock().unwrap().push((m.to_owned(), p));
    }));
    let caps = port.capabilities();
    let s = engine.open_session("test", port, SessionLimits::default());
    s.initialize_as(caps);
    (s, notes)
}

async fn request_raw(s: &Arc<Session>, method: &str, params: Value) -> Result<String, String> {
    let raw = RawValue::from_string(params.to_string()).unwrap();
    tokio::time::timeout(
        Duration::from_secs(20),
        s.request(Id::number(1), method, Some(raw)),
    )
    .await
    .expect("no answer in time")
    .map(|r| r.get().to_owned())
    .map_err(|e| e.to_string())
}

async fn request(s: &Arc<Session>, method: &str, params: Value) -> Value {
    let text = request_raw(s, method, params)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    serde_json::from_str(&text).unwrap()
}

#[cfg(feature = "tokens")]
/// The text a tool's cost is counted on, written out here from the raw
/// `tools/list` item (not through the library's own helper).
fn counted_text(item: &RawValue) -> String {
    #[derive(serde::Deserialize)]
    struct Parts<'a> {
        #[serde(borrow)]
        name: &'a RawValue,
        #[serde(borrow)]
        description: Option<&'a RawValue>,
        #[serde(borrow, rename = "inputSchema")]
        input_schema: &'a RawValue,
    }
    let p: Parts<'_> = serde_json::from_str(item.get()).unwrap();
    match p.description {
        Some(d) => format!(
            r#"{{"name":{},"description":{},"inputSchema":{}}}"#,
            p.name.get(),
            d.get(),
            p.input_schema.get()
        ),
        None => format!(
            r#"{{"name":{},"inputSchema":{}}}"#,
            p.name.get(),
            p.input_schema.get()
        ),
    }
}

#[cfg(feature = "tokens")]
#[tokio::test]
async fn tool_costs_are_what_tiktoken_counts_and_servers_sum_them() {
    for (extra, bpe) in [
        ("", tiktoken_rs::o200k_base().unwrap()),
        (
            r#","tokens":{"encoding":"cl100k_base"}"#,
            tiktoken_rs::cl100k_base().unwrap(),
        ),
    ] {
        let engine = engine_with(&ts(&["--tools", "3"]), extra);
        ready(&engine, 12).await;
        let (s, _) = session(&engine);
        // The MCP listing, raw: what a model is shown.
        let listed = request_raw(&s, "tools/list", json!({})).await.unwrap();
        #[derive(serde::Deserialize)]
        struct Page {
            tools: Vec<Box<RawValue>>,
        }
        let page: Page = serde_json::from_str(&listed).unwrap();
        // Raw: the test server's `lossless` tool has numbers a Value cannot hold.
        let mine = request_raw(&s, "mcphost/tools/list", json!({}))
            .await
            .unwrap();
        let mine: Vec<Box<RawValue>> = serde_json::from_str(&mine).unwrap();
        assert_eq!(mine.len(), page.tools.len());
        let mut total = 0u64;
        for (item, annotated) in page.tools.iter().zip(&mine) {
            let by_hand = bpe.encode_ordinary(&counted_text(item)).len() as u64;
            let tokens: u64 = mcphost::protocol::raw_field(annotated, "tokens")
                .unwrap()
                .unwrap();
            assert_eq!(tokens, by_hand, "{extra}: {}", item.get());
            total += by_hand;
        }
        let servers = request(&s, "mcphost/servers/list", json!({})).await;
        assert_eq!(servers[0]["tokens"], total, "{extra}: {servers}");
        let status = request(&s, "mcphost/status", json!({})).await;
        let want = if extra.is_empty() {
            "o200k_base"
        } else {
            "cl100k_base"
        };
        assert_eq!(status["tokenEncoding"], want);
        engine.shutdown().await;
    }
}

#[cfg(feature = "tokens")]
#[test]
fn tools_cost_shows_each_tool_and_the_total() {
    let sb = Sandbox::new();
    let spec = format!("{TESTSERVER} --tools 2");
    let tools = sb.json(&["--direct", &spec, "tools"]);
    let total: u64 = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tokens"].as_u64().expect("a token count"))
        .sum();
    let r = sb.run(&["--direct", &spec, "tools", "--cost"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("TOKENS"), "{}", r.stdout);
    let echo = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == "echo")
        .unwrap();
    let want = echo["tokens"].to_string();
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with(echo["name"].as_str().unwrap()))
        .unwrap();
    assert!(line.split_whitespace().any(|w| w == want), "{line}");
    let n = tools.as_array().unwrap().len();
    assert!(
        r.stdout
            .contains(&format!("total: {total} tokens in {n} tools (o200k_base)")),
        "{}",
        r.stdout
    );
    let r = sb.run(&["--direct", &spec, "servers"]);
    assert!(r.stdout.contains("TOKENS"), "{}", r.stdout);
    assert!(r.stdout.contains(&total.to_string()), "{}", r.stdout);
}

#[test]
fn an_unknown_encoding_is_a_config_error_naming_the_field() {
    let e = mcphost::config::parse(
        r#"{"tokens":{"encoding":"gpt2"}}"#,
        std::path::Path::new("/x/config.json"),
        &|_| None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("tokens.encoding") && e.contains("gpt2"), "{e}");
}

// ---- search mode ----

/// The quality catalog: tests/fixtures/search_catalog.json, namespaced as
/// the engine namespaces it.
fn quality_catalog() -> mcphost::registry::catalog::Catalog {
    use mcphost::protocol::Tool;
    use mcphost::registry::catalog::{NamingRules, ServerTools, build};
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/search_catalog.json"
    ))
    .unwrap();
    #[derive(serde::Deserialize)]
    struct Fixture {
        servers: Vec<Server>,
    }
    #[derive(serde::Deserialize)]
    struct Server {
        server: String,
        tools: Vec<Tool>,
    }
    let f: Fixture = serde_json::from_str(&text).unwrap();
    let servers: Vec<ServerTools<'_>> = f
        .servers
        .iter()
        .map(|s| ServerTools {
            server: &s.server,
            prefix: &s.server,
            tools: &s.tools,
        })
        .collect();
    build(&servers, &NamingRules::default())
}

fn quality_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/search_queries.json"
    ))
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["query"].as_str().unwrap().to_owned(),
                q["tool"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn search_mode_finds_the_right_tool_in_the_top_3_for_every_query() {
    use mcphost::model_view::search::Index;
    let catalog = quality_catalog();
    assert_eq!(catalog.len(), 43, "the fixture's catalog changed");
    let index = Index::new(catalog.tools().to_vec());
    let queries = quality_queries();
    assert!(queries.len() >= 30, "only {} queries", queries.len());
    let mut failed = Vec::new();
    let mut table = String::from("| query | expected tool | rank |\n| --- | --- | --- |\n");
    for (query, want) in &queries {
        assert!(
            catalog.route(want).is_some(),
            "{want} is not in the catalog"
        );
        let hits = index.search(query, catalog.len());
        let rank = hits
            .iter()
            .position(|h| h.tool.name == *want)
            .map(|r| r + 1);
        let shown = rank.map_or("—".to_owned(), |r| r.to_string());
        table.push_str(&format!("| {query} | `{want}` | {shown} |\n"));
        if rank.is_none_or(|r| r > 3) {
            let top: Vec<&str> = hits.iter().take(3).map(|h| h.tool.name.as_str()).collect();
            failed.push(format!("{query:?}: {want} at {shown}; top 3 {top:?}"));
        }
    }
    println!("{table}");
    let top1 = table.lines().filter(|l| l.ends_with("| 1 |")).count();
    println!(
        "{top1} of {} queries rank the right tool first",
        queries.len()
    );
    assert!(
        failed.is_empty(),
        "not in the top 3:\n{}",
        failed.join("\n")
    );
}

#[cfg(feature = "tokens")]
#[test]
fn search_mode_lists_three_tools_at_a_fraction_of_the_catalog_cost() {
    use mcphost::model_view::search::meta_tools;
    use mcphost::registry::cost::{Encoding, tool_tokens};
    let catalog = quality_catalog();
    for enc in [Encoding::O200kBase, Encoding::Cl100kBase] {
        let all: u64 = catalog
            .tools()
            .iter()
            .map(|t| u64::from(t.tokens(enc).unwrap()))
            .sum();
        let search: u64 = meta_tools()
            .iter()
            .map(|t| u64::from(tool_tokens(t, enc).unwrap()))
            .sum();
        println!(
            "{enc}: tools/list of the {} tools costs {all} tokens; in search mode (3 tools) {search}",
            catalog.len()
        );
        assert!(search * 5 < all, "{enc}: {search} vs {all}");
    }
}

/// The names a `tools/list` answer lists (read raw: the test server's
/// `lossless` tool has numbers a Value cannot hold).
async fn tool_names(s: &Arc<Session>) -> Vec<String> {
    names_listed(s, json!({})).await
}

/// The names a `tools/list` with these params lists (raw, as above).
async fn names_listed(s: &Arc<Session>, params: Value) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Page {
        tools: Vec<Box<RawValue>>,
    }
    let text = request_raw(s, "tools/list", params).await.unwrap();
    let page: Page = serde_json::from_str(&text).unwrap();
    page.tools
        .iter()
        .map(|t| {
            mcphost::protocol::raw_field::<String>(t, "name")
                .unwrap()
                .unwrap()
        })
        .collect()
}

#[tokio::test]
async fn search_mode_lists_three_meta_tools_that_find_describe_and_call_through_the_one_call_path()
{
    let engine = engine_with(&ts(&["--tools", "3"]), "");
    ready(&engine, 12).await;
    let (s, notes) = session(&engine);
    let before = tool_names(&s).await;
    assert!(before.len() >= 12);

    let r = request(
        &s,
        "mcphost/session/configure",
        json!({"toolMode": "search"}),
    )
    .await;
    assert_eq!(r["options"]["toolMode"], "search", "{r}");
    assert_eq!(r["tools"]["listed"], 3, "{r}");
    assert_eq!(
        tool_names(&s).await,
        ["search_tools", "describe_tool", "call_tool"]
    );

    let found = request(
        &s,
        "tools/call",
        json!({"name": "search_tools", "arguments": {"query": "echo back the text", "limit": 2}}),
    )
    .await;
    let hits = found["structuredContent"]["tools"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{found}");
    assert_eq!(hits[0]["name"], "ts__echo", "{found}");
    assert!(
        found["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ts__echo")
    );

    let described = request(
        &s,
        "tools/call",
        json!({"name": "describe_tool", "arguments": {"name": "ts__echo"}}),
    )
    .await;
    assert_eq!(described["structuredContent"]["name"], "ts__echo");
    assert_eq!(
        described["structuredContent"]["inputSchema"]["required"],
        json!(["text"])
    );
    let unknown = request(
        &s,
        "tools/call",
        json!({"name": "describe_tool", "arguments": {"name": "nope"}}),
    )
    .await;
    assert_eq!(unknown["isError"], true, "{unknown}");

    // call_tool answers exactly what tools/call of the tool answers.
    let direct = request_raw(
        &s,
        "tools/call",
        json!({"name": "ts__echo", "arguments": {"text": "hi"}}),
    )
    .await
    .unwrap();
    let via = request_raw(
        &s,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "ts__echo", "arguments": {"text": "hi"}}}),
    )
    .await
    .unwrap();
    assert_eq!(via, direct);
    // Progress of the real tool reaches the caller under its own token.
    notes.lock().unwrap().clear();
    let slow = request(
        &s,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "ts__slow", "arguments": {"ms": 350}},
               "_meta": {"progressToken": "p-1"}}),
    )
    .await;
    assert_ne!(slow["isError"], true, "{slow}");
    let progress: Vec<Value> = notes
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| m == "notifications/progress")
        .map(|(_, p)| p.clone())
        .collect();
    assert!(!progress.is_empty(), "no progress through call_tool");
    assert!(
        progress.iter().all(|p| p["progressToken"] == "p-1"),
        "{progress:?}"
    );
    // A tool the catalog does not have is a tool error the model reads.
    let missing = request(
        &s,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "ts__nope", "arguments": {}}}),
    )
    .await;
    assert_eq!(missing["isError"], true, "{missing}");

    // {} resets: every tool again.
    let r = request(&s, "mcphost/session/configure", json!({})).await;
    assert_eq!(r["options"]["toolMode"], "all");
    assert_eq!(tool_names(&s).await, before);
    engine.shutdown().await;
}

#[tokio::test]
async fn call_tool_is_cancelled_with_its_request_like_any_call() {
    let log = common::RequestLog::new();
    let engine = engine_with(&ts(&["--log-requests", &log.arg()]), "");
    ready(&engine, 9).await;
    let (s, _) = session(&engine);
    request(
        &s,
        "mcphost/session/configure",
        json!({"toolMode": "search"}),
    )
    .await;
    let params =
        json!({"name": "call_tool", "arguments": {"name": "ts__slow", "arguments": {"ms": 30000}}});
    let raw = RawValue::from_string(params.to_string()).unwrap();
    let call = s.request(Id::number(7), "tools/call", Some(raw));
    // Dropping the request's future cancels it down to the server.
    let t = std::time::Instant::now();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err()
    );
    let cancelled = log.wait_for("notifications/cancelled").await;
    let slow = log
        .lines()
        .into_iter()
        .find(|l| l["method"] == "tools/call" && l["params"]["name"] == "slow")
        .expect("the slow call never reached the server");
    assert_eq!(cancelled["params"]["requestId"], slow["id"], "{cancelled}");
    // The server is free at once: another call answers quickly.
    let echo = request(
        &s,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "ts__echo", "arguments": {"text": "after"}}}),
    )
    .await;
    assert!(echo.to_string().contains("after"), "{echo}");
    assert!(t.elapsed() < Duration::from_secs(10));
    engine.shutdown().await;
}

/// `_meta` of a stateless (2026-07-28) request.
fn stateless(mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    params
}

#[tokio::test]
async fn a_stateless_connection_configures_once_and_its_requests_follow() {
    let engine = engine_with(&ts(&[]), "");
    ready(&engine, 9).await;
    let port = Arc::new(HostPort::new(Arc::new(NoHost), |_, _| {}));
    let s = engine.open_session("stateless", port, SessionLimits::default());
    let r = request(
        &s,
        "mcphost/session/configure",
        stateless(json!({"toolMode": "search"})),
    )
    .await;
    assert_eq!(r["options"]["toolMode"], "search", "{r}");
    let listed = request(&s, "tools/list", stateless(json!({}))).await;
    assert_eq!(listed["resultType"], "complete", "{listed}");
    assert_eq!(listed["tools"].as_array().unwrap().len(), 3, "{listed}");
    let found = request(
        &s,
        "tools/call",
        stateless(json!({"name": "search_tools", "arguments": {"query": "add two numbers"}})),
    )
    .await;
    assert_eq!(found["resultType"], "complete", "{found}");
    assert_eq!(
        found["structuredContent"]["tools"][0]["name"], "ts__add",
        "{found}"
    );
    let sum = request(
        &s,
        "tools/call",
        stateless(
            json!({"name": "call_tool", "arguments": {"name": "ts__add", "arguments": {"a": 2, "b": 3}}}),
        ),
    )
    .await;
    assert_eq!(sum["structuredContent"]["sum"], 5, "{sum}");
    engine.shutdown().await;
}

#[tokio::test]
#[ignore = "needs the interop servers: scripts/setup-interop.sh"]
async fn search_mode_over_the_live_reference_servers_finds_every_query_in_the_top_3() {
    let env = common::interop();
    let python = env.python.display().to_string();
    let fetch = std::process::Command::new(&python)
        .args(["-c", "import mcp_server_fetch"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        fetch,
        "mcp-server-fetch is not installed in {python}; run scripts/setup-interop.sh"
    );
    let dir = tempfile::tempdir().unwrap();
    let py = js(&python);
    let servers = format!(
        r#""everything":{{{}}},"filesystem":{{{}}},"memory":{{{}}},"time":{{{}}},"fetch":{{"command":{py},"args":["-m","mcp_server_fetch"]}}"#,
        env.node_entry("server-everything")
            .replace(r#"]"#, r#","stdio"]"#),
        env.node_entry("server-filesystem").replace(
            r#"]"#,
            &format!(",{}]", js(&dir.path().display().to_string()))
        ),
        env.node_entry("server-memory"),
        env.time_entry(),
    );
    let engine = engine_with(&servers, "");
    let problems = engine.wait_started(Duration::from_secs(90)).await;
    assert!(problems.is_empty(), "{problems:?}");
    // The live catalog is the fixture's: same names in the same order.
    let live: Vec<String> = engine
        .registry()
        .catalog()
        .tools()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let fixture: Vec<String> = quality_catalog()
        .tools()
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(
        live, fixture,
        "the servers' tools changed: capture tests/fixtures/search_catalog.json again"
    );
    let (s, _) = session(&engine);
    request(
        &s,
        "mcphost/session/configure",
        json!({"toolMode": "search"}),
    )
    .await;
    let mut failed = Vec::new();
    for (query, want) in quality_queries() {
        let found = request(
            &s,
            "tools/call",
            json!({"name": "search_tools", "arguments": {"query": query, "limit": 3}}),
        )
        .await;
        let names: Vec<&str> = found["structuredContent"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        if !names.contains(&want.as_str()) {
            failed.push(format!("{query:?}: {want} not in {names:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // And a real call through call_tool.
    let now = request(
        &s,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}}),
    )
    .await;
    assert_ne!(now["isError"], true, "{now}");
    assert!(now.to_string().contains("UTC"), "{now}");
    engine.shutdown().await;
}

// ---- budgets and profiles ----

fn warnings(notes: &Notes) -> Vec<String> {
    notes
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, p)| m == "notifications/message" && p["level"] == "warning")
        .map(|(_, p)| p["data"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn max_tools_lists_the_first_tools_in_catalog_order_and_warns_about_the_cut() {
    let engine = engine_with(&ts(&["--tools", "20"]), "");
    ready(&engine, 29).await;
    let (s, notes) = session(&engine);
    let all = tool_names(&s).await;
    let r = request(&s, "mcphost/session/configure", json!({"maxTools": 5})).await;
    let cut = all.len() - 5;
    assert_eq!(r["tools"]["listed"], 5, "{r}");
    assert_eq!(r["tools"]["cut"], cut, "{r}");
    assert_eq!(r["tools"]["overMaxTools"], cut, "{r}");
    let warning = r["warning"].as_str().unwrap();
    assert!(
        warning.contains(&format!("{cut} tool(s) cut")) && warning.contains("maxTools 5"),
        "{warning}"
    );
    assert_eq!(warnings(&notes), [warning.to_owned()]);
    assert_eq!(tool_names(&s).await, all[..5]);
    // The same cut again is not warned about twice.
    tool_names(&s).await;
    assert_eq!(warnings(&notes).len(), 1);
    // A cut tool stays callable: budgets only keep tools out of sight.
    let echo = request(
        &s,
        "tools/call",
        json!({"name": "ts__tool_0019", "arguments": {}}),
    )
    .await;
    assert_ne!(echo["isError"], true, "{echo}");
    // Nothing cut, nothing warned.
    let r = request(&s, "mcphost/session/configure", json!({"maxTools": 500})).await;
    assert!(r.get("warning").is_none(), "{r}");
    assert_eq!(warnings(&notes).len(), 1);
    engine.shutdown().await;
}

#[tokio::test]
async fn tool_patterns_order_the_listing_and_max_tokens_keeps_the_prefix_that_fits() {
    let engine = engine_with(&ts(&["--tools", "5"]), "");
    ready(&engine, 14).await;
    let (s, notes) = session(&engine);
    let r = request(
        &s,
        "mcphost/session/configure",
        json!({"tools": ["ts__tool_0003", "e*"], "maxTools": 3}),
    )
    .await;
    // The first pattern's tool first, then the second's in catalog order
    // (matched on the server's own names too).
    assert_eq!(
        tool_names(&s).await,
        ["ts__tool_0003", "ts__echo", "ts__elicit"],
        "{r}"
    );
    assert_eq!(r["tools"]["notAllowed"], 14 - 3, "{r}");
    // Allow lists choose; they are not a cut.
    assert!(r.get("warning").is_none(), "{r}");
    // A tool outside the allow lists is refused, naming it.
    let refused = request_raw(
        &s,
        "tools/call",
        json!({"name": "ts__add", "arguments": {"a": 1, "b": 2}}),
    )
    .await
    .unwrap_err();
    assert!(
        refused.contains("ts__add") && refused.contains("allow lists"),
        "{refused}"
    );

    #[cfg(feature = "tokens")]
    {
        let costs = request(&s, "mcphost/servers/list", json!({})).await;
        assert!(costs[0]["tokens"].as_u64().unwrap() > 0);
        // maxTokens = the first three tools' cost: exactly those three.
        let mine = request_raw(&s, "mcphost/tools/list", json!({}))
            .await
            .unwrap();
        let mine: Vec<Box<RawValue>> = serde_json::from_str(&mine).unwrap();
        let first: Vec<(String, u64)> = mine
            .iter()
            .take(4)
            .map(|t| {
                (
                    mcphost::protocol::raw_field::<String>(t, "name")
                        .unwrap()
                        .unwrap(),
                    mcphost::protocol::raw_field::<u64>(t, "tokens")
                        .unwrap()
                        .unwrap(),
                )
            })
            .collect();
        let budget: u64 = first[..3].iter().map(|(_, n)| n).sum();
        let r = request(
            &s,
            "mcphost/session/configure",
            json!({"maxTokens": budget + first[3].1 - 1}),
        )
        .await;
        let names: Vec<String> = first[..3].iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(tool_names(&s).await, names, "{r}");
        assert_eq!(r["tools"]["tokens"], budget, "{r}");
        assert_eq!(r["tools"]["overMaxTokens"], 14 - 3, "{r}");
        let w = r["warning"].as_str().unwrap();
        assert!(w.contains("11 over maxTokens"), "{w}");
        assert!(warnings(&notes).iter().any(|n| n == w));
    }
    let _ = notes;
    engine.shutdown().await;
}

#[tokio::test]
async fn a_server_allow_list_and_named_profiles_from_the_config() {
    let servers = format!(
        "{},{}",
        ts(&["--tools", "2"]),
        ts(&[]).replacen("\"ts\"", "\"other\"", 1)
    );
    let engine = engine_with(
        &servers,
        r#","profiles":{"cursor":{"maxTools":2},"only-other":{"servers":["other"],"toolMode":"search"}}"#,
    );
    ready(&engine, 20).await;
    let (s, _) = session(&engine);
    let all = tool_names(&s).await;

    let r = request(
        &s,
        "mcphost/session/configure",
        json!({"servers": ["other"]}),
    )
    .await;
    let names = tool_names(&s).await;
    assert!(
        !names.is_empty() && names.iter().all(|n| n.starts_with("other__")),
        "{names:?}"
    );
    assert_eq!(r["tools"]["listed"], names.len(), "{r}");

    let r = request(
        &s,
        "mcphost/session/configure",
        json!({"profile": "cursor"}),
    )
    .await;
    assert_eq!(r["profile"], "cursor");
    assert_eq!(tool_names(&s).await, all[..2]);
    // Fields beside the profile override its own.
    request(
        &s,
        "mcphost/session/configure",
        json!({"profile": "cursor", "maxTools": 4}),
    )
    .await;
    assert_eq!(tool_names(&s).await, all[..4]);
    // A profile in search mode searches only what its allow list lets through.
    request(
        &s,
        "mcphost/session/configure",
        json!({"profile": "only-other"}),
    )
    .await;
    let found = request(
        &s,
        "tools/call",
        json!({"name": "search_tools", "arguments": {"query": "echo", "limit": 50}}),
    )
    .await;
    let hits = found["structuredContent"]["tools"].as_array().unwrap();
    assert!(!hits.is_empty());
    assert!(
        hits.iter()
            .all(|h| h["name"].as_str().unwrap().starts_with("other__")),
        "{found}"
    );

    let e = request_raw(
        &s,
        "mcphost/session/configure",
        json!({"profile": "vscode"}),
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("vscode") && e.contains("cursor, only-other"),
        "{e}"
    );
    let e = request_raw(&s, "mcphost/session/configure", json!({"maxTools": -1}))
        .await
        .unwrap_err();
    assert!(e.contains("params.maxTools"), "{e}");
    let e = request_raw(&s, "mcphost/session/configure", json!({"maxtools": 3}))
        .await
        .unwrap_err();
    assert!(e.contains("maxtools") && e.contains("maxTools"), "{e}");
    engine.shutdown().await;
}

#[test]
fn bad_profiles_are_config_errors_naming_the_field() {
    for (text, want) in [
        (
            r#"{"profiles":{"p":{"maxTools":"x"}}}"#,
            "profiles.p.maxTools",
        ),
        (
            r#"{"profiles":{"p":{"tools":["a[b"]}}}"#,
            "profiles.p.tools[0]",
        ),
        (r#"{"profiles":{"p":{"schemaProfile":"llama"}}}"#, "llama"),
        (r#"{"profiles":{"p":{"profile":"q"}}}"#, "another profile"),
        (r#"{"profiles":{"p":3}}"#, "profiles.p"),
    ] {
        let e = mcphost::config::parse(text, std::path::Path::new("/x/config.json"), &|_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
    let ok = mcphost::config::parse(
        r#"{"profiles":{"cursor":{"maxTools":40,"tools":["fs__*"]}}}"#,
        std::path::Path::new("/x/config.json"),
        &|_| None,
    )
    .unwrap();
    assert_eq!(ok.model_view.profiles["cursor"].max_tools, Some(40));
}

// ---- schema profiles ----

#[test]
fn each_schema_profile_normalises_the_fixtures_as_documented() {
    use mcphost::model_view::SchemaProfile;
    use mcphost::model_view::schema::normalize_text;
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/schema_profiles"
    );
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let raw: std::collections::HashMap<String, Box<RawValue>> =
            serde_json::from_str(&text).unwrap();
        let input = raw["input"].get();
        for p in SchemaProfile::ALL {
            let want: Value = serde_json::from_str(raw[p.as_str()].get()).unwrap();
            let got: Value = serde_json::from_str(&normalize_text(input, p).unwrap()).unwrap();
            assert_eq!(got, want, "{} for {}", path.display(), p.as_str());
            // Normalising twice changes nothing more.
            let again: Value = serde_json::from_str(
                &normalize_text(&normalize_text(input, p).unwrap(), p).unwrap(),
            )
            .unwrap();
            assert_eq!(again, want, "{} for {} (twice)", path.display(), p.as_str());
        }
        seen += 1;
    }
    assert!(seen >= 6, "only {seen} fixtures");
}

#[tokio::test]
async fn a_schema_profile_shapes_the_listing_while_arguments_reach_the_server_byte_for_byte() {
    let log = common::RequestLog::new();
    let engine = engine_with(&ts(&["--log-requests", &log.arg()]), "");
    ready(&engine, 9).await;
    let (s, _) = session(&engine);
    let plain = request_raw(&s, "tools/list", json!({})).await.unwrap();
    let r = request(
        &s,
        "mcphost/session/configure",
        json!({"schemaProfile": "gemini"}),
    )
    .await;
    assert_eq!(r["options"]["schemaProfile"], "gemini", "{r}");
    let shaped = request_raw(&s, "tools/list", json!({})).await.unwrap();
    assert_ne!(shaped, plain);
    // The lossless tool's schema keeps its numbers; Gemini has no
    // `multipleOf`, so that one goes.
    assert!(
        shaped.contains("12345678901234567890123") && shaped.contains("1e400"),
        "{shaped}"
    );
    assert!(plain.contains("multipleOf") && !shaped.contains("multipleOf"));
    for profile in ["openai", "anthropic"] {
        request(
            &s,
            "mcphost/session/configure",
            json!({"schemaProfile": profile}),
        )
        .await;
        let shaped = request_raw(&s, "tools/list", json!({})).await.unwrap();
        assert!(
            shaped.contains("\"multipleOf\":0.10"),
            "{profile}: {shaped}"
        );
    }

    // Arguments as a client writes them (spacing, escapes, numbers a Value
    // would change), through a plain call and through call_tool.
    let args = r#"{ "text" : "caf\u00e9 \"q\"",  "n": 1.10, "big": 12345678901234567890123 }"#;
    request(
        &s,
        "mcphost/session/configure",
        json!({"schemaProfile": "gemini", "toolMode": "search"}),
    )
    .await;
    for (i, params) in [
        format!(r#"{{"name":"ts__echo","arguments":{args}}}"#),
        format!(r#"{{"name":"call_tool","arguments":{{"name":"ts__echo","arguments":{args}}}}}"#),
    ]
    .into_iter()
    .enumerate()
    {
        let raw = RawValue::from_string(params).unwrap();
        let id = 100 + i as i64;
        s.request(Id::number(id), "tools/call", Some(raw))
            .await
            .unwrap();
        let text = std::fs::read_to_string(&log.path).unwrap();
        let line = text
            .lines()
            .filter(|l| l.contains("\"tools/call\""))
            .nth(i)
            .unwrap_or_else(|| panic!("call {i} never reached the server:\n{text}"));
        assert!(
            line.contains(&format!("\"arguments\":{args}")),
            "call {i}: {line}"
        );
    }
    engine.shutdown().await;
}

#[tokio::test]
async fn a_default_profile_shapes_new_sessions_and_configure_announces_the_new_listing() {
    let engine = engine_with(
        &ts(&["--tools", "4"]),
        r#","profiles":{"default":{"maxTools":3}}"#,
    );
    ready(&engine, 13).await;
    let (s, notes) = session(&engine);
    assert_eq!(tool_names(&s).await.len(), 3);
    // The cut is warned about on the first listing (no configure was sent).
    let w = warnings(&notes);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("10 tool(s) cut") && w[0].contains("maxTools 3"),
        "{w:?}"
    );
    notes.lock().unwrap().clear();
    // {} is the plain catalog; the profile can be chosen again by name.
    request(&s, "mcphost/session/configure", json!({})).await;
    assert_eq!(tool_names(&s).await.len(), 13);
    let changed = notes
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| m == "notifications/tools/list_changed")
        .count();
    assert_eq!(changed, 1, "configure announces the session's new listing");
    request(
        &s,
        "mcphost/session/configure",
        json!({"profile": "default"}),
    )
    .await;
    assert_eq!(tool_names(&s).await.len(), 3);
    engine.shutdown().await;
}

/// A host that answers `roots/list` with one root named after itself.
struct RootsHost;

impl mcphost::client::Host for RootsHost {
    fn capabilities(&self) -> mcphost::protocol::ClientCapabilities {
        mcphost::protocol::ClientCapabilities {
            roots: Some(mcphost::protocol::capabilities::RootsCap {
                list_changed: false,
            }),
            ..Default::default()
        }
    }
    fn handle(
        &self,
        r: mcphost::client::HostRequest,
    ) -> mcphost::transport::BoxFuture<'static, Result<Box<RawValue>, mcphost::protocol::ErrorObject>>
    {
        assert_eq!(r.method, "roots/list");
        Box::pin(std::future::ready(Ok(RawValue::from_string(
            r#"{"roots":[{"uri":"file:///from-the-search-session","name":"mine"}]}"#.to_owned(),
        )
        .unwrap())))
    }
}

#[tokio::test]
async fn a_server_request_during_call_tool_reaches_the_session_that_called() {
    let engine = engine_with(&ts(&[]), "");
    ready(&engine, 9).await;
    let port = Arc::new(HostPort::new(Arc::new(RootsHost), |_, _| {}));
    let caps = port.capabilities();
    let s = engine.open_session("roots", port, SessionLimits::default());
    s.initialize_as(caps);
    request(
        &s,
        "mcphost/session/configure",
        json!({"toolMode": "search"}),
    )
    .await;
    let r = request(
        &s,
        "tools/call",
        json!({"name": "call_tool", "arguments": {"name": "ts__roots", "arguments": {}}}),
    )
    .await;
    assert!(r.to_string().contains("from-the-search-session"), "{r}");
    engine.shutdown().await;
}

#[tokio::test]
async fn a_stateless_request_can_carry_its_own_session_options_in_meta() {
    let engine = engine_with(
        &ts(&["--tools", "3"]),
        r#","profiles":{"two":{"maxTools":2}}"#,
    );
    ready(&engine, 12).await;
    let port = Arc::new(HostPort::new(Arc::new(NoHost), |_, _| {}));
    let s = engine.open_session("stateless", port, SessionLimits::default());
    let with = |mut p: Value, options: Value| {
        p = stateless(p);
        p["_meta"]["dev.mcphost/session"] = options;
        p
    };
    assert_eq!(names_listed(&s, stateless(json!({}))).await.len(), 12);
    let two = request(&s, "tools/list", with(json!({}), json!({"profile": "two"}))).await;
    assert_eq!(two["tools"].as_array().unwrap().len(), 2, "{two}");
    assert_eq!(two["resultType"], "complete");
    let search = request(
        &s,
        "tools/list",
        with(json!({}), json!({"toolMode": "search"})),
    )
    .await;
    assert_eq!(search["tools"][0]["name"], "search_tools", "{search}");
    let found = request(
        &s,
        "tools/call",
        with(
            json!({"name": "search_tools", "arguments": {"query": "sleep milliseconds"}}),
            json!({"toolMode": "search"}),
        ),
    )
    .await;
    assert_eq!(
        found["structuredContent"]["tools"][0]["name"], "ts__slow",
        "{found}"
    );
    // Only that request: the next one without options lists everything.
    assert_eq!(names_listed(&s, stateless(json!({}))).await.len(), 12);
    let bad = request_raw(&s, "tools/list", with(json!({}), json!({"maxTools": "x"})))
        .await
        .unwrap_err();
    assert!(
        bad.contains("dev.mcphost/session") && bad.contains("maxTools"),
        "{bad}"
    );
    engine.shutdown().await;
}
