use std::collections::HashSet;

use super::builder::*;
use super::names::*;
use super::*;
use mcphost_protocol::{Resource, ResourceTemplate};

fn tool(name: &str) -> Tool {
    let text = format!(
        r#"{{"name":{},"inputSchema":{{"type":"object"}}}}"#,
        serde_json::to_string(name).unwrap()
    );
    serde_json::from_str(&text).unwrap()
}

fn tools(names: &[&str]) -> Vec<Tool> {
    names.iter().map(|n| tool(n)).collect()
}

fn prompt(name: &str) -> Prompt {
    serde_json::from_str(&format!(
        r#"{{"name":{},"arguments":[]}}"#,
        serde_json::to_string(name).unwrap()
    ))
    .unwrap()
}

fn resource(uri: &str) -> Resource {
    serde_json::from_str(&format!(r#"{{"uri":"{uri}","name":"n"}}"#)).unwrap()
}

fn template(t: &str) -> ResourceTemplate {
    serde_json::from_str(&format!(r#"{{"uriTemplate":"{t}","name":"n"}}"#)).unwrap()
}

fn st<'a>(server: &'a str, prefix: &'a str, tools: &'a [Tool]) -> ServerTools<'a> {
    ServerTools {
        server,
        prefix,
        tools,
    }
}

fn rules(max_length: usize, reserve: usize) -> NamingRules {
    NamingRules {
        max_length,
        reserve,
        ..NamingRules::default()
    }
}

fn names(c: &Catalog) -> Vec<&str> {
    c.tools().iter().map(|t| t.name.as_str()).collect()
}

/// Every name legal, within budget, unique, routed back to its origin.
fn check_invariants(c: &Catalog, r: &NamingRules) {
    let mut seen = HashSet::new();
    for t in c.tools() {
        assert!(!t.name.is_empty());
        assert!(t.name.len() <= r.budget(), "{} over {}", t.name, r.budget());
        assert!(t.name.chars().all(is_allowed), "{:?}", t.name);
        assert!(seen.insert(t.name.clone()), "duplicate {}", t.name);
        let route = c.route(&t.name).unwrap();
        assert_eq!(
            (route.server.as_str(), route.tool.as_str()),
            (t.server.as_str(), t.tool.as_str())
        );
        let n: Option<String> = mcphost_protocol::raw_field(&t.raw, "name").unwrap();
        assert_eq!(n.as_deref(), Some(t.name.as_str()));
    }
}

/// The naming contract, pinned: these exact names must survive every
/// refactor, on every machine.
#[test]
fn golden_names() {
    let long = "a".repeat(200);
    let t = tools(&[
        "create_issue",
        "a.b",
        "a_b",
        "read file",
        "fs/read",
        "héllo",
        "日本",
        "",
        &long,
        "t",
        "t",
    ]);
    let x = tools(&["x"]);
    let run = tools(&["run"]);
    let long_prefix = "p".repeat(80);
    let servers = [
        st("github", "gh", &t),
        st("my.srv", "my.srv", &x),
        st("p", &long_prefix, &run),
    ];
    let at_64 = build(&servers, &NamingRules::default());
    assert_eq!(
        names(&at_64),
        [
            "gh__create_issue",
            "gh__a_b_0e5bda",
            "gh__a_b",
            "gh__read_file_dc93cd",
            "gh__fs_read_c66148",
            "gh__h_llo_bb3997",
            "gh_____171519",
            "gh___bd1bd2",
            "gh__aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_01d06a",
            "gh__t",
            "gh__t_2",
            "my_srv__x_92cb39",
            "pppppppppppppppppppppppppp__run_f1f28d",
        ]
    );
    let at_16 = build(&servers, &rules(16, 0));
    assert_eq!(
        names(&at_16),
        [
            "gh__create_issue",
            "gh__a_b_0e5bda",
            "gh__a_b",
            "gh__read__dc93cd",
            "gh__fs_re_c66148",
            "gh__h_llo_bb3997",
            "gh_____171519",
            "gh___bd1bd2",
            "gh__aaaaa_01d06a",
            "gh__t",
            "gh__t_2",
            "my_srv__x_92cb39",
            "pp__run_f1f28d",
        ]
    );
}

#[test]
fn plain_names_and_listing_order() {
    let a = tools(&["search", "create_issue"]);
    let b = tools(&["read", "write"]);
    let c = build(
        &[st("github", "gh", &a), st("fs", "fs", &b)],
        &NamingRules::default(),
    );
    assert_eq!(
        names(&c),
        ["gh__search", "gh__create_issue", "fs__read", "fs__write"]
    );
    assert!(c.collisions().is_empty());
    assert_eq!(
        c.route("gh__create_issue"),
        Some(&Route {
            server: "github".into(),
            tool: "create_issue".into()
        })
    );
    // Routing is a table: nothing is parsed out of unknown names.
    assert_eq!(c.route("github__create_issue"), None);
    assert_eq!(c.route("gh__"), None);
    assert_eq!(c.count_for("github"), 2);
    assert_eq!(c.count_for("gh"), 0);
    assert_eq!(c.len(), 4);
    assert!(!c.is_empty());
    check_invariants(&c, &NamingRules::default());
}

#[test]
fn hash_is_pinned() {
    // The hash is part of the naming contract: a change here renames
    // users' tools. These values must never change.
    assert_eq!(short_hash("srv", "a.b"), "11e28d");
    assert_eq!(short_hash("srv", ""), "ba6377");
    assert_ne!(short_hash("ab", "c"), short_hash("a", "bc"));
    let c = build(
        &[st("srv", "srv", &tools(&["a.b", "a_b"]))],
        &NamingRules::default(),
    );
    assert_eq!(names(&c), ["srv__a_b_11e28d", "srv__a_b"]);
}

#[test]
fn sanitizing_adds_a_hash_and_keeps_merged_names_apart() {
    let t = tools(&[
        "a.b",
        "a_b",
        "a b",
        "a/b",
        "héllo wörld",
        "日本",
        "ok-name_1",
    ]);
    let r = NamingRules::default();
    let c = build(&[st("srv", "srv", &t)], &r);
    let n = names(&c);
    assert_eq!(n[1], "srv__a_b");
    assert_eq!(n[6], "srv__ok-name_1");
    for (i, orig) in ["a.b", "a b", "a/b"].iter().enumerate() {
        let name = &c.tools()[[0, 2, 3][i]].name;
        assert_eq!(name, &format!("srv__a_b_{}", short_hash("srv", orig)));
    }
    // One `_` per character, not per byte.
    assert_eq!(
        n[4],
        format!("srv__h_llo_w_rld_{}", short_hash("srv", "héllo wörld"))
    );
    assert_eq!(n[5], format!("srv_____{}", short_hash("srv", "日本")));
    let reasons: Vec<_> = c
        .collisions()
        .iter()
        .map(|c| (c.tool.as_str(), c.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            ("a.b", CollisionReason::Sanitized),
            ("a b", CollisionReason::Sanitized),
            ("a/b", CollisionReason::Sanitized),
            ("héllo wörld", CollisionReason::Sanitized),
            ("日本", CollisionReason::Sanitized),
        ]
    );
    check_invariants(&c, &r);
}

#[test]
fn sanitized_prefix_hashes_every_tool() {
    let t = tools(&["x"]);
    let c = build(
        &[
            st("my.server", "my.server", &t),
            st("my_server", "my_server", &t),
        ],
        &NamingRules::default(),
    );
    assert_eq!(
        names(&c),
        [
            format!("my_server__x_{}", short_hash("my.server", "x")).as_str(),
            "my_server__x"
        ]
    );
}

#[test]
fn empty_tool_name() {
    let r = NamingRules::default();
    let c = build(&[st("srv", "srv", &tools(&["", "_"]))], &r);
    let empty = format!("srv___{}", short_hash("srv", ""));
    assert_eq!(names(&c), [empty.as_str(), "srv___"]);
    assert_eq!(c.route(&empty).unwrap().tool, "");
    assert_eq!(c.collisions()[0].reason, CollisionReason::Sanitized);
    check_invariants(&c, &r);
}

#[test]
fn long_names_are_cut_with_a_hash() {
    let long_a = "a".repeat(200);
    let long_b = format!("{}b", "a".repeat(199));
    let r = NamingRules::default();
    let c = build(&[st("srv", "srv", &tools(&[&long_a, &long_b]))], &r);
    let n = names(&c);
    assert_eq!(n[0].len(), 64);
    assert_eq!(
        n[0],
        format!("srv__{}_{}", "a".repeat(52), short_hash("srv", &long_a))
    );
    assert_ne!(n[0], n[1]);
    assert!(n[1].starts_with("srv__aaaa"));
    assert!(
        c.collisions()
            .iter()
            .all(|c| c.reason == CollisionReason::Shortened)
    );
    // Exactly at the budget: untouched.
    let exact = "t".repeat(64 - 5);
    let c = build(&[st("srv", "srv", &tools(&[&exact]))], &r);
    assert_eq!(names(&c), [format!("srv__{exact}").as_str()]);
    assert!(c.collisions().is_empty());
    check_invariants(&c, &r);
}

#[test]
fn long_and_illegal_is_shortened_with_one_hash() {
    let name = format!("x.{}", "y".repeat(100));
    let r = NamingRules::default();
    let c = build(&[st("srv", "srv", &tools(&[&name]))], &r);
    let h = short_hash("srv", &name);
    assert_eq!(
        names(&c),
        [format!("srv__x_{}_{h}", "y".repeat(50)).as_str()]
    );
    assert_eq!(c.tools()[0].name.matches(&h).count(), 1);
    assert_eq!(c.collisions()[0].reason, CollisionReason::Shortened);
}

#[test]
fn prefix_longer_than_the_budget() {
    let prefix = "p".repeat(100);
    let r = NamingRules::default();
    let t = tools(&["a", "bb"]);
    let c = build(&[st("srv", &prefix, &t)], &r);
    // head = 57, half = 28: 26 prefix characters, the separator, the tool.
    let want = format!("{}__a_{}", "p".repeat(26), short_hash("srv", "a"));
    assert_eq!(names(&c)[0], want);
    check_invariants(&c, &r);
    // A long-but-not-too-long prefix is only cut when the name overflows.
    let prefix = "q".repeat(40);
    let c = build(&[st("srv", &prefix, &tools(&["a", &"z".repeat(30)]))], &r);
    assert_eq!(names(&c)[0], format!("{prefix}__a"));
    assert_eq!(
        names(&c)[1],
        format!(
            "{}__{}_{}",
            "q".repeat(26),
            "z".repeat(29),
            short_hash("srv", &"z".repeat(30))
        )
    );
}

#[test]
fn tiny_budget() {
    let r = rules(16, 0);
    let t = tools(&["search_everything", "search_everywhere", "a", "x.y", ""]);
    let c = build(
        &[st("github", "github", &t), st("gitlab", "github", &t)],
        &r,
    );
    check_invariants(&c, &r);
    assert_eq!(names(&c)[2], "github__a");
    // head = 9, half = 4: prefix cut to 2, then `__`, then 5 tool chars.
    assert_eq!(
        names(&c)[0],
        format!("gi__searc_{}", short_hash("github", "search_everything"))
    );
    // Same prefix on two servers: github keeps `github__a`, gitlab's is numbered.
    assert_eq!(names(&c)[7], "github__a_2");
    assert_eq!(c.route("github__a_2").unwrap().server, "gitlab");
}

#[test]
fn below_minimum_budget_is_raised_and_rejected_by_validate() {
    let r = rules(64, 60);
    assert_eq!(r.budget(), MIN_BUDGET);
    assert_eq!(
        r.validate(),
        Err(NamingError::Budget {
            budget: 4,
            max_length: 64,
            reserve: 60
        })
    );
    let c = build(&[st("server", "server", &tools(&["some_tool", "x"]))], &r);
    check_invariants(&c, &r);
    assert_eq!(
        names(&c)[0],
        format!("s__so_{}", short_hash("server", "some_tool"))
    );
    assert!(NamingRules::default().validate().is_ok());
    assert!(rules(16, 4).validate().is_ok());
}

#[test]
fn reserve_shrinks_the_budget() {
    let r = rules(64, 14);
    assert_eq!(r.budget(), 50);
    let long = "t".repeat(60);
    let c = build(&[st("srv", "srv", &tools(&[&long]))], &r);
    assert_eq!(names(&c)[0].len(), 50);
    check_invariants(&c, &r);
}

#[test]
fn other_separators() {
    let t = tools(&["read"]);
    let dash = NamingRules {
        separator: "-".into(),
        ..NamingRules::default()
    };
    assert!(dash.validate().is_ok());
    assert_eq!(names(&build(&[st("fs", "fs", &t)], &dash)), ["fs-read"]);
    let word = NamingRules {
        separator: "_x_".into(),
        ..NamingRules::default()
    };
    assert_eq!(names(&build(&[st("fs", "fs", &t)], &word)), ["fs_x_read"]);
    // Illegal separators are a config error; build still emits legal names.
    let dot = NamingRules {
        separator: ".".into(),
        ..NamingRules::default()
    };
    assert_eq!(dot.validate(), Err(NamingError::Separator(".".into())));
    assert!(
        NamingRules {
            separator: String::new(),
            ..NamingRules::default()
        }
        .validate()
        .is_err()
    );
    assert_eq!(names(&build(&[st("fs", "fs", &t)], &dot)), ["fs_read"]);
}

#[test]
fn duplicate_names_within_one_server() {
    let r = NamingRules::default();
    let c = build(&[st("buggy", "buggy", &tools(&["t", "u", "t", "t"]))], &r);
    assert_eq!(
        names(&c),
        ["buggy__t", "buggy__u", "buggy__t_2", "buggy__t_3"]
    );
    assert_eq!(c.route("buggy__t_3").unwrap().tool, "t");
    assert_eq!(
        c.collisions(),
        [
            Collision {
                server: "buggy".into(),
                tool: "t".into(),
                name: "buggy__t_2".into(),
                reason: CollisionReason::Duplicate
            },
            Collision {
                server: "buggy".into(),
                tool: "t".into(),
                name: "buggy__t_3".into(),
                reason: CollisionReason::Duplicate
            },
        ]
    );
    check_invariants(&c, &r);
}

#[test]
fn alias_reuse_is_resolved_by_server_name_not_order() {
    let t = tools(&["search"]);
    let r = NamingRules::default();
    let fwd = build(&[st("zeta", "web", &t), st("alpha", "web", &t)], &r);
    let rev = build(&[st("alpha", "web", &t), st("zeta", "web", &t)], &r);
    assert_eq!(fwd.route("web__search").unwrap().server, "alpha");
    assert_eq!(fwd.route("web__search_2").unwrap().server, "zeta");
    assert_eq!(rev.route("web__search").unwrap().server, "alpha");
    assert_eq!(rev.route("web__search_2").unwrap().server, "zeta");
    // Listing follows the order given.
    assert_eq!(names(&fwd), ["web__search_2", "web__search"]);
    assert_eq!(fwd.collisions()[0].server, "zeta");
    assert_eq!(fwd.collisions()[0].reason, CollisionReason::Duplicate);
    assert_eq!(fwd.collisions_for("alpha").count(), 0);
    assert_eq!(fwd.collisions_for("zeta").count(), 1);
}

#[test]
fn numbered_names_skip_taken_names_and_stay_in_budget() {
    let r = rules(16, 0);
    // `srv__abcdefghi_2` is a real tool; the duplicate of `abcdefghij` must
    // not steal it, and `_2` on a full-length name cuts its end.
    let t = tools(&["abcdefghi_2", "abcdefghij", "abcdefghij"]);
    let c = build(&[st("s", "srv", &t)], &r);
    check_invariants(&c, &r);
    assert_eq!(
        names(&c),
        ["srv__abcdefghi_2", "srv__abcdefghij", "srv__abcdefghi_3"]
    );
}

#[test]
fn separator_inside_prefix_or_tool_still_routes() {
    let r = NamingRules::default();
    let a = tools(&["b__c"]);
    let b = tools(&["c"]);
    let c = build(&[st("one", "a", &a), st("two", "a__b", &b)], &r);
    assert_eq!(names(&c), ["a__b__c", "a__b__c_2"]);
    assert_eq!(
        c.route("a__b__c"),
        Some(&Route {
            server: "one".into(),
            tool: "b__c".into()
        })
    );
    assert_eq!(
        c.route("a__b__c_2"),
        Some(&Route {
            server: "two".into(),
            tool: "c".into()
        })
    );
}

#[test]
fn builds_are_deterministic_and_order_independent() {
    let a = tools(&["x", "y.z", &"l".repeat(90), "dup", "dup"]);
    let b = tools(&["x", "q", "日本語"]);
    let d = tools(&["x"]);
    let r = rules(32, 4);
    let servers = [st("a", "p", &a), st("b", "p", &b), st("d", "dd", &d)];
    let one = build(&servers, &r);
    let two = build(&servers, &r);
    assert_eq!(names(&one), names(&two));
    let raws = |c: &Catalog| {
        c.tools()
            .iter()
            .map(|t| t.raw.get().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(raws(&one), raws(&two));
    assert_eq!(one.collisions(), two.collisions());
    assert_eq!(one.fingerprint(), two.fingerprint());
    check_invariants(&one, &r);

    let mut rev = servers;
    rev.reverse();
    let three = build(&rev, &r);
    let map = |c: &Catalog| {
        let mut v: Vec<_> = c
            .tools()
            .iter()
            .map(|t| (t.name.clone(), t.server.clone(), t.tool.clone()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(map(&one), map(&three));
    assert_ne!(
        one.fingerprint(),
        three.fingerprint(),
        "order is part of the listing"
    );
}

#[test]
fn adding_a_tool_elsewhere_renames_nothing() {
    let a = tools(&["read", "write", "a.b", &"w".repeat(80)]);
    let b1 = tools(&["read"]);
    let b2 = tools(&["read", "write", "a.b", "new"]);
    let r = NamingRules::default();
    let before = build(&[st("a", "a", &a), st("b", "b", &b1)], &r);
    let after = build(&[st("a", "a", &a), st("b", "b", &b2)], &r);
    assert_eq!(names(&before)[..4], names(&after)[..4]);
    assert_eq!(
        names(&after)[4..],
        [
            "b__read",
            "b__write",
            &format!("b__a_b_{}", short_hash("b", "a.b")),
            "b__new"
        ]
    );
}

#[test]
fn raw_objects_keep_every_byte_but_the_name() {
    let text = r#"{"title":"T","name":"calc","inputSchema":{"type":"object","properties":{"n":{"default":12345678901234567890123,"multipleOf":1.10,"maximum":1e400}}},"annotations":{"z":1,"a":2},"x-extra":[1.0,-0.0]}"#;
    let t: Tool = serde_json::from_str(text).unwrap();
    let c = build(
        &[st("srv", "math", std::slice::from_ref(&t))],
        &NamingRules::default(),
    );
    assert_eq!(
        c.tools()[0].raw.get(),
        text.replace(r#""name":"calc""#, r#""name":"math__calc""#)
    );
    assert_eq!(c.tools()[0].tool, "calc");
    // Serialising a catalog entry's raw gives the same text.
    assert_eq!(
        serde_json::to_string(&c.tools()[0].raw).unwrap(),
        c.tools()[0].raw.get()
    );
}

#[test]
fn unusable_raw_is_left_out() {
    // Only constructible by hand: a tool whose raw is not an object.
    let bad = Tool {
        name: "bad".into(),
        raw: RawValue::from_string("[1]".into()).unwrap(),
    };
    let good = tool("good");
    let c = build(&[st("s", "s", &[bad, good])], &NamingRules::default());
    assert_eq!(names(&c), ["s__good"]);
    assert_eq!(c.route("s__bad"), None);
}

#[test]
fn find_original() {
    let a = tools(&["search", "only_a"]);
    let b = tools(&["search"]);
    let c = build(
        &[st("a", "a", &a), st("b", "b", &b)],
        &NamingRules::default(),
    );
    let hits: Vec<_> = c
        .find_original("search")
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(hits, ["a__search", "b__search"]);
    let only = c.find_original("only_a");
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].server, "a");
    assert!(c.find_original("a__search").is_empty());
}

#[test]
fn pagination() {
    let t = tools(&["t1", "t2", "t3", "t4", "t5"]);
    let r = NamingRules::default();
    let c = build(&[st("s", "s", &t)], &r);
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut cursors = Vec::new();
    loop {
        let (page, next) = c.page(cursor.as_deref(), 2).unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|t| t.name.clone()));
        match next {
            Some(n) => {
                assert_eq!(n.len(), 32);
                cursors.push(n.clone());
                cursor = Some(n);
            }
            None => break,
        }
    }
    assert_eq!(seen, names(&c));
    assert_eq!(cursors.len(), 2);

    // The same input rebuilt (e.g. after a restart) accepts the cursors.
    let again = build(&[st("s", "s", &t)], &r);
    let (page, next) = again.page(Some(&cursors[0]), 2).unwrap();
    assert_eq!(
        page.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["s__t3", "s__t4"]
    );
    assert_eq!(next.as_ref(), Some(&cursors[1]));

    // A changed listing rejects them.
    let changed = build(
        &[st("s", "s", &tools(&["t1", "t2", "t3", "t4", "t5", "t6"]))],
        &r,
    );
    assert_eq!(
        changed.page(Some(&cursors[0]), 2).unwrap_err(),
        InvalidCursor::Stale
    );

    assert_eq!(
        c.page(Some("nope"), 2).unwrap_err(),
        InvalidCursor::Malformed
    );
    assert_eq!(
        c.page(Some(&"g".repeat(32)), 2).unwrap_err(),
        InvalidCursor::Malformed
    );
    assert_eq!(
        c.page(Some(&encode_cursor(c.fingerprint(), 6)), 2)
            .unwrap_err(),
        InvalidCursor::OutOfRange
    );
    let (page, next) = c.page(Some(&encode_cursor(c.fingerprint(), 5)), 2).unwrap();
    assert!(page.is_empty() && next.is_none());

    // No limit, and an empty cursor starts over.
    let (all, next) = c.page(None, 0).unwrap();
    assert_eq!(all.len(), 5);
    assert!(next.is_none());
    let (first, _) = c.page(Some(""), 3).unwrap();
    assert_eq!(first.len(), 3);
    let (rest, next) = c.page(Some(&encode_cursor(c.fingerprint(), 3)), 0).unwrap();
    assert_eq!(rest.len(), 2);
    assert!(next.is_none());

    // An empty catalog has one empty page.
    let empty = build(&[], &r);
    assert!(empty.is_empty());
    let (page, next) = empty.page(None, 10).unwrap();
    assert!(page.is_empty() && next.is_none());

    // Prompt cursors do not work on tools: the kind is in the fingerprint.
    let p = build_prompts(
        &[ServerPrompts {
            server: "s",
            prefix: "s",
            prompts: &[prompt("t1"), prompt("t2"), prompt("t3")],
        }],
        &r,
    );
    let (_, pc) = p.page(None, 1).unwrap();
    assert_eq!(c.page(pc.as_deref(), 1).unwrap_err(), InvalidCursor::Stale);
}

#[test]
fn prompts_follow_the_same_rules() {
    let a = [
        prompt("summarize"),
        prompt("code review"),
        prompt("summarize"),
    ];
    let b = [prompt("summarize")];
    let r = NamingRules::default();
    let c = build_prompts(
        &[
            ServerPrompts {
                server: "w",
                prefix: "docs",
                prompts: &a,
            },
            ServerPrompts {
                server: "v",
                prefix: "docs",
                prompts: &b,
            },
        ],
        &r,
    );
    let n: Vec<_> = c.prompts().iter().map(|p| p.name.as_str()).collect();
    let review = format!("docs__code_review_{}", short_hash("w", "code review"));
    // v sorts before w, so v keeps `docs__summarize`.
    assert_eq!(
        n,
        [
            "docs__summarize_2",
            review.as_str(),
            "docs__summarize_3",
            "docs__summarize"
        ]
    );
    assert_eq!(
        c.route("docs__summarize"),
        Some(&Route {
            server: "v".into(),
            tool: "summarize".into()
        })
    );
    assert_eq!(c.prompts()[1].prompt, "code review");
    assert_eq!(
        c.prompts()[1].raw.get(),
        format!(r#"{{"name":"{review}","arguments":[]}}"#)
    );
    assert_eq!(c.find_original("summarize").len(), 3);
    assert_eq!(c.count_for("w"), 3);
    assert_eq!(c.items().len(), 4);
    assert_eq!(c.collisions().len(), 3);
    // Tools and prompts with the same names get the same names.
    let as_tools = tools(&["summarize", "code review", "summarize"]);
    let bt = tools(&["summarize"]);
    let tc = build(&[st("w", "docs", &as_tools), st("v", "docs", &bt)], &r);
    assert_eq!(names(&tc), n);
}

fn sr<'a>(
    server: &'a str,
    resources: &'a [Resource],
    templates: &'a [ResourceTemplate],
) -> ServerResources<'a> {
    ServerResources {
        server,
        resources,
        templates,
    }
}

fn route(server: &str, uri: &str) -> ResourceRoute {
    ResourceRoute {
        server: server.into(),
        uri: uri.into(),
    }
}

fn none(_: &str) -> Option<String> {
    None
}

#[test]
fn unique_uris_are_kept_and_shared_ones_wrapped_for_every_server() {
    let a = [
        resource("file:///a"),
        resource("file:///shared"),
        resource("file:///a"),
    ];
    let b = [resource("file:///shared"), resource("file:///b")];
    let c = build_resources(&[
        sr("zeta", &a, &[]),
        sr("alpha", &b, &[]),
        sr("idle", &[], &[]),
    ]);
    let uris: Vec<_> = c.resources().iter().map(|r| r.uri.as_str()).collect();
    // Config order, then each server's; a server's own duplicate is dropped.
    assert_eq!(
        uris,
        [
            "file:///a",
            "mcphost://zeta/file:///shared",
            "mcphost://alpha/file:///shared",
            "file:///b"
        ]
    );
    // Only the uri changes in the listed object.
    assert_eq!(
        c.resources()[1].raw.get(),
        r#"{"uri":"mcphost://zeta/file:///shared","name":"n"}"#
    );
    assert_eq!(
        c.resources()[0].raw.get(),
        r#"{"uri":"file:///a","name":"n"}"#
    );
    assert_eq!(c.resources()[1].original, "file:///shared");

    assert_eq!(c.resolve("file:///a", none), Ok(route("zeta", "file:///a")));
    assert_eq!(
        c.resolve("file:///b", none),
        Ok(route("alpha", "file:///b"))
    );
    for s in ["zeta", "alpha"] {
        assert_eq!(
            c.resolve(&format!("mcphost://{s}/file:///shared"), none),
            Ok(route(s, "file:///shared"))
        );
    }
    // The server's own URI is claimed by both: the error names the forms.
    let err = c.resolve("file:///shared", none).unwrap_err();
    assert_eq!(
        err,
        ResolveError::Ambiguous {
            uri: "file:///shared".into(),
            servers: vec!["zeta".into(), "alpha".into()]
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("mcphost://zeta/file:///shared")
            && msg.contains("mcphost://alpha/file:///shared"),
        "{msg}"
    );
    // Any configured server is reachable by the mcphost:// form, even one
    // listing nothing (a URI from its results); unknown servers are not.
    assert_eq!(
        c.resolve("mcphost://idle/x://y", none),
        Ok(route("idle", "x://y"))
    );
    assert_eq!(
        c.resolve("mcphost://nosuch/file:///a", none),
        Err(ResolveError::NotFound("mcphost://nosuch/file:///a".into()))
    );
    assert_eq!(
        c.resolve("file:///missing", none),
        Err(ResolveError::NotFound("file:///missing".into()))
    );
    // A remembered URI routes, unless a listing claims it first.
    assert_eq!(
        c.resolve("file:///missing", |_| Some("idle".into())),
        Ok(route("idle", "file:///missing"))
    );
    assert_eq!(
        c.resolve("file:///a", |_| Some("idle".into())),
        Ok(route("zeta", "file:///a"))
    );
    assert_eq!(
        c.resolve("file:///missing", |_| Some("removed".into())),
        Err(ResolveError::NotFound("file:///missing".into()))
    );

    let all = c.renamed();
    let renamed: Vec<_> = all
        .iter()
        .map(|r| (r.server.as_str(), r.reason, r.with.clone()))
        .collect();
    assert_eq!(
        renamed,
        [
            ("zeta", RenameReason::SameUri, vec!["alpha".to_owned()]),
            ("alpha", RenameReason::SameUri, vec!["zeta".to_owned()]),
        ]
    );
    assert_eq!(c.renamed_for("alpha").count(), 1);
    assert_eq!(c.count_for("zeta"), 2);
    assert_eq!(c.count_for("alpha"), 2);
    assert!(c.has_server("idle") && !c.has_server("nosuch"));
}

#[test]
fn a_uri_another_server_s_template_produces_is_wrapped() {
    let a = [resource("db://users/1"), resource("note://x")];
    let ta = [template("note://{id}")];
    let tb = [template("db://users/{id}"), template("file:///{+path}")];
    let c = build_resources(&[sr("a", &a, &ta), sr("b", &[], &tb)]);
    let uris: Vec<_> = c.resources().iter().map(|r| r.uri.as_str()).collect();
    // a's own template producing its own URI is no conflict.
    assert_eq!(uris, ["mcphost://a/db://users/1", "note://x"]);
    assert_eq!(c.renamed()[0].reason, RenameReason::TemplateMatch);
    assert_eq!(c.renamed()[0].with, ["b"]);
    // Unique templates are kept.
    let ts: Vec<_> = c
        .templates()
        .iter()
        .map(|t| t.uri_template.as_str())
        .collect();
    assert_eq!(ts, ["note://{id}", "db://users/{id}", "file:///{+path}"]);

    // Template-generated URIs go to the one server whose template matches.
    assert_eq!(
        c.resolve("db://users/7", none),
        Ok(route("b", "db://users/7"))
    );
    assert_eq!(
        c.resolve("file:///etc/x", none),
        Ok(route("b", "file:///etc/x"))
    );
    assert_eq!(c.resolve("note://y", none), Ok(route("a", "note://y")));
    // The listed copy of a's is under its wrapped form; the plain URI is
    // claimed by a (listing) and b (template).
    assert_eq!(
        c.resolve("mcphost://a/db://users/1", none),
        Ok(route("a", "db://users/1"))
    );
    assert!(matches!(
        c.resolve("db://users/1", none),
        Err(ResolveError::Ambiguous { servers, .. }) if servers == ["a", "b"]
    ));
}

#[test]
fn shared_templates_are_wrapped_and_their_uris_ambiguous() {
    let t = [template("demo://dynamic/{id}")];
    let tc = [template("demo://{kind}/{id}")];
    let c = build_resources(&[
        sr("one", &[], &t),
        sr("two", &[], &t),
        sr("three", &[], &tc),
    ]);
    let ts: Vec<_> = c
        .templates()
        .iter()
        .map(|t| t.uri_template.as_str())
        .collect();
    // Overlapping but different texts stay; identical ones are wrapped.
    assert_eq!(
        ts,
        [
            "mcphost://one/demo://dynamic/{id}",
            "mcphost://two/demo://dynamic/{id}",
            "demo://{kind}/{id}"
        ]
    );
    assert_eq!(
        c.templates()[1].raw.get(),
        r#"{"uriTemplate":"mcphost://two/demo://dynamic/{id}","name":"n"}"#
    );
    // An expansion of a wrapped template routes to its server.
    assert_eq!(
        c.resolve("mcphost://two/demo://dynamic/5", none),
        Ok(route("two", "demo://dynamic/5"))
    );
    assert!(matches!(
        c.resolve("demo://dynamic/5", none),
        Err(ResolveError::Ambiguous { servers, .. }) if servers == ["one", "two", "three"]
    ));
    assert_eq!(
        c.resolve("demo://other/5", none),
        Ok(route("three", "demo://other/5"))
    );

    // completion refs name templates.
    assert_eq!(
        c.resolve_template("mcphost://one/demo://dynamic/{id}", none),
        Ok(route("one", "demo://dynamic/{id}"))
    );
    assert_eq!(
        c.resolve_template("demo://{kind}/{id}", none),
        Ok(route("three", "demo://{kind}/{id}"))
    );
    assert!(matches!(
        c.resolve_template("demo://dynamic/{id}", none),
        Err(ResolveError::Ambiguous { servers, .. }) if servers == ["one", "two"]
    ));
    // A concrete URI as a ref resolves as a resource.
    assert_eq!(
        c.resolve_template("demo://x/1", none),
        Ok(route("three", "demo://x/1"))
    );
}

#[test]
fn own_mcphost_uris_are_always_wrapped() {
    let a = [resource("mcphost://b/x"), resource("MCPHOST:thing")];
    let ta = [template("mcphost://{server}/{+rest}")];
    let c = build_resources(&[sr("a", &a, &ta), sr("b", &[], &[])]);
    let uris: Vec<_> = c.resources().iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        ["mcphost://a/mcphost://b/x", "mcphost://a/MCPHOST:thing"]
    );
    assert_eq!(
        c.templates()[0].uri_template,
        "mcphost://a/mcphost://{server}/{+rest}"
    );
    assert!(
        c.renamed()
            .iter()
            .all(|r| r.reason == RenameReason::ReservedScheme)
    );
    // Unwrapping one level gives a's own URI back; the plain one is ours.
    assert_eq!(
        c.resolve("mcphost://a/mcphost://b/x", none),
        Ok(route("a", "mcphost://b/x"))
    );
    assert_eq!(c.resolve("mcphost://b/x", none), Ok(route("b", "x")));
    assert_eq!(
        c.expose("a", "mcphost://b/x"),
        Exposed::Wrapped("mcphost://a/mcphost://b/x".into())
    );
}

#[test]
fn odd_server_names_are_percent_encoded() {
    let r = [resource("u://same")];
    let c = build_resources(&[sr("my server/1", &r, &[]), sr("b", &r, &[])]);
    assert_eq!(c.resources()[0].uri, "mcphost://my%20server%2F1/u://same");
    assert_eq!(
        c.resolve("mcphost://my%20server%2F1/u://same", none),
        Ok(route("my server/1", "u://same"))
    );
}

#[test]
fn result_uris_are_exposed_so_they_route_back() {
    let a = [resource("file:///shared"), resource("file:///mine")];
    let b = [resource("file:///shared")];
    let tb = [template("db://{t}")];
    let ta = [template("a://{x}")];
    let c = build_resources(&[sr("a", &a, &ta), sr("b", &b, &tb)]);
    // Listed: its listing's form.
    assert_eq!(c.expose("a", "file:///mine"), Exposed::Kept);
    assert_eq!(
        c.expose("a", "file:///shared"),
        Exposed::Wrapped("mcphost://a/file:///shared".into())
    );
    // Unlisted but claimed by another server: wrapped.
    assert_eq!(
        c.expose("a", "db://t1"),
        Exposed::Wrapped("mcphost://a/db://t1".into())
    );
    assert_eq!(
        c.expose("b", "file:///mine"),
        Exposed::Wrapped("mcphost://b/file:///mine".into())
    );
    // Produced by its own template only: routes back as it is.
    assert_eq!(c.expose("a", "a://1"), Exposed::Kept);
    assert_eq!(c.resolve("a://1", none), Ok(route("a", "a://1")));
    // Nobody's: kept, for the caller to remember.
    assert_eq!(c.expose("b", "urn:x"), Exposed::Unclaimed);
    // Every exposed form resolves back to (server, own URI).
    for (server, own) in [
        ("a", "file:///shared"),
        ("a", "db://t1"),
        ("b", "file:///mine"),
        ("b", "file:///shared"),
    ] {
        let Exposed::Wrapped(w) = c.expose(server, own) else {
            panic!("{server} {own}")
        };
        assert_eq!(c.resolve(&w, none), Ok(route(server, own)));
    }
}

#[test]
fn resource_pages_and_fingerprints() {
    let a = [resource("x://1"), resource("x://2"), resource("x://3")];
    let t = [template("t://{a}"), template("u://{a}")];
    let one = build_resources(&[sr("s", &a, &t), sr("idle", &[], &[])]);
    let (p1, next) = one.page(None, 2).unwrap();
    assert_eq!(p1.len(), 2);
    let (p2, end) = one.page(next.as_deref(), 2).unwrap();
    assert_eq!(p2.len(), 1);
    assert!(end.is_none());
    assert_eq!(
        one.page_templates(next.as_deref(), 2).unwrap_err(),
        InvalidCursor::Stale
    );
    let (tp, tnext) = one.page_templates(None, 1).unwrap();
    assert_eq!(tp.len(), 1);
    // Rebuilt from the same lists (a restart): the cursors still work.
    let again = build_resources(&[sr("s", &a, &t), sr("idle", &[], &[])]);
    assert_eq!(again.page(next.as_deref(), 2).unwrap().0.len(), 1);
    assert_eq!(
        again.page_templates(tnext.as_deref(), 1).unwrap().0.len(),
        1
    );
    // A URI that becomes wrapped changes the listing: stale.
    let b = [resource("x://3")];
    let other = build_resources(&[sr("s", &a, &t), sr("idle", &b, &[])]);
    assert_eq!(
        other.page(next.as_deref(), 2).unwrap_err(),
        InvalidCursor::Stale
    );
}

#[test]
fn annotated_listing_names_servers_and_own_uris() {
    let r = [resource("u://same")];
    let t = [template("t://{a}")];
    let c = build_resources(&[sr("a", &r, &t), sr("b", &r, &[])]);
    let v: serde_json::Value = serde_json::from_str(c.annotated().unwrap().get()).unwrap();
    assert_eq!(v["resources"][1]["uri"], "mcphost://b/u://same");
    assert_eq!(v["resources"][1]["server"], "b");
    assert_eq!(v["resources"][1]["serverUri"], "u://same");
    assert_eq!(v["resourceTemplates"][0]["uriTemplate"], "t://{a}");
    assert_eq!(v["resourceTemplates"][0]["serverUriTemplate"], "t://{a}");
    assert_eq!(v["resourceTemplates"][0]["server"], "a");
    let json = serde_json::to_value(&c.renamed()[0]).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"kind": "resource", "server": "a", "uri": "u://same",
            "exposed": "mcphost://a/u://same", "reason": "sameUri", "with": ["b"]})
    );
}

/// A small deterministic generator, so the sweep needs no extra crate.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

fn listing(c: &Catalog) -> Vec<(String, String, String, String)> {
    c.tools()
        .iter()
        .map(|t| {
            let r = c.route(&t.name).unwrap();
            assert_eq!((&r.server, &r.tool), (&t.server, &t.tool));
            (
                t.name.clone(),
                t.server.clone(),
                t.tool.clone(),
                t.raw.get().to_owned(),
            )
        })
        .collect()
}

/// Incremental publishing equals a full build, and the full build equals
/// the one-pass naming algorithm, for random per-server changes.
#[test]
fn incremental_publish_equals_full_build() {
    const NAMES: &[&str] = &[
        "x",
        "y",
        "x_2",
        "a.b",
        "a_b",
        "t",
        "__x",
        "long_name_here_0123456789",
    ];
    let servers = ["s0", "s1", "s2", "s3", "s4"];
    // s0 and s1 share a prefix, so their tools really collide.
    let prefixes = ["a", "a", "b", "a_", "c"];
    let mut rng = Lcg(11);
    for round in 0..40 {
        let r = rules([16, 24, 64][round % 3], 0);
        let mut lists: Vec<Vec<Tool>> = vec![Vec::new(); servers.len()];
        let mut b = CatalogBuilder::<CatalogTool>::new("tools", r.clone());
        for (s, p) in servers.iter().zip(prefixes) {
            b.push_server(s, p, tool_items(&[]));
        }
        for _ in 0..25 {
            let i = rng.next(servers.len());
            let n = rng.next(5);
            lists[i] = (0..n).map(|_| tool(NAMES[rng.next(NAMES.len())])).collect();
            assert!(b.update(servers[i], prefixes[i], tool_items(&lists[i])));
            let inc = b.publish();
            let input: Vec<ServerTools<'_>> = servers
                .iter()
                .zip(prefixes)
                .zip(&lists)
                .map(|((s, p), t)| st(s, p, t))
                .collect();
            let full = build(&input, &r);
            assert_eq!(listing(&inc), listing(&full), "round {round}");
            assert_eq!(inc.collisions(), full.collisions());
            assert_eq!(inc.fingerprint(), full.fingerprint());
            check_invariants(&inc, &r);
            // The one-pass algorithm the builder replaced.
            let names_in: Vec<ServerNames<'_>> = input
                .iter()
                .map(|s| ServerNames {
                    server: s.server,
                    prefix: s.prefix,
                    names: s.tools.iter().map(|t| t.name.as_str()).collect(),
                })
                .collect();
            let oracle: Vec<String> = namespace(&names_in, &r)
                .into_iter()
                .map(|n| n.name)
                .collect();
            assert_eq!(names(&inc), oracle, "round {round}");
        }
    }
}

#[test]
fn a_change_in_one_server_makes_and_undoes_a_collision_with_another() {
    let r = NamingRules::default();
    let mut b = CatalogBuilder::<CatalogTool>::new("tools", r.clone());
    let a_tools = tools(&["run"]);
    let z_tools = tools(&["run", "stop"]);
    // "zeta" sorts after "alpha": alpha keeps the name once both claim it.
    b.push_server("zeta", "x", tool_items(&z_tools));
    b.push_server("alpha", "x", tool_items(&[]));
    let first = b.publish();
    assert_eq!(names(&first), ["x__run", "x__stop"]);
    assert!(b.update("alpha", "x", tool_items(&a_tools)));
    let clash = b.publish();
    assert_eq!(names(&clash), ["x__run_2", "x__stop", "x__run"]);
    assert_eq!(clash.route("x__run").unwrap().server, "alpha");
    assert_eq!(clash.route("x__run_2").unwrap().server, "zeta");
    assert_eq!(clash.collisions()[0].reason, CollisionReason::Duplicate);
    assert_ne!(clash.fingerprint(), first.fingerprint());
    // Only zeta's renamed entry is new; its other entry is shared.
    assert!(Arc::ptr_eq(&first.tools()[1], &clash.tools()[1]));
    assert!(b.update("alpha", "x", tool_items(&[])));
    let undone = b.publish();
    assert_eq!(names(&undone), ["x__run", "x__stop"]);
    assert_eq!(undone.route("x__run").unwrap().server, "zeta");
    assert_eq!(undone.route("x__run_2"), None);
    assert!(undone.collisions().is_empty());
    assert_eq!(undone.fingerprint(), first.fingerprint());
    assert!(!b.update("nosuch", "x", tool_items(&[])));
}

#[test]
fn sweep_invariants_hold() {
    const ALPHABET: &[&str] = &["a", "b", "_", "-", ".", " ", "é", "日", "/", "__", "Z", "9"];
    let mut rng = Lcg(7);
    for round in 0..60 {
        let r = NamingRules {
            separator: ["__", "-", "_"][round % 3].into(),
            max_length: [12, 16, 24, 64][round % 4],
            reserve: [0, 3][round % 2],
        };
        let mut per_server = Vec::new();
        for _ in 0..4 {
            let n = rng.next(12);
            let ts: Vec<Tool> = (0..n)
                .map(|_| {
                    let len = [0, 1, 3, 8, 40, 90][rng.next(6)];
                    let s: String = (0..len)
                        .map(|_| ALPHABET[rng.next(ALPHABET.len())])
                        .collect();
                    tool(&s)
                })
                .collect();
            per_server.push(ts);
        }
        let prefixes = ["a", "a", "b.c", &"p".repeat(30)];
        let servers: Vec<ServerTools<'_>> = per_server
            .iter()
            .enumerate()
            .map(|(i, ts)| ServerTools {
                server: ["s0", "s1", "s2", "s3"][i],
                prefix: prefixes[i],
                tools: ts,
            })
            .collect();
        let c = build(&servers, &r);
        check_invariants(&c, &r);
        assert_eq!(c.len(), per_server.iter().map(Vec::len).sum::<usize>());
        let mut rev = servers.clone();
        rev.reverse();
        let mut x: Vec<_> = c
            .tools()
            .iter()
            .map(|t| (&t.name, &t.server, &t.tool))
            .collect();
        let d = build(&rev, &r);
        let mut y: Vec<_> = d
            .tools()
            .iter()
            .map(|t| (&t.name, &t.server, &t.tool))
            .collect();
        x.sort();
        y.sort();
        assert_eq!(x, y, "round {round}");
    }
}

/// A resource listing flattened for comparison: (exposed, server, own, raw)
/// rows of resources and of templates, the renamed entries, fingerprints.
type FlatResources = (
    Vec<[String; 4]>,
    Vec<[String; 4]>,
    Vec<ResourceRenamed>,
    (u64, u64),
);

fn flat_resources(c: &ResourceCatalog) -> FlatResources {
    let r = c
        .resources()
        .iter()
        .map(|r| {
            [
                r.uri.clone(),
                r.server.clone(),
                r.original.clone(),
                r.raw.get().to_owned(),
            ]
        })
        .collect();
    let t = c
        .templates()
        .iter()
        .map(|t| {
            [
                t.uri_template.clone(),
                t.server.clone(),
                t.original.clone(),
                t.raw.get().to_owned(),
            ]
        })
        .collect();
    (r, t, c.renamed(), c.fingerprints())
}

/// One item of [`merged_whole`]: its row, and its renamed entry if wrapped.
fn whole_row(
    server: &str,
    own: &str,
    raw: &RawValue,
    kind: ResourceKind,
    why: Option<(RenameReason, Vec<String>)>,
    renamed: &mut Vec<ResourceRenamed>,
) -> [String; 4] {
    let Some((reason, with)) = why else {
        return [own.into(), server.into(), own.into(), raw.get().into()];
    };
    let field = match kind {
        ResourceKind::Resource => "uri",
        ResourceKind::Template => "uriTemplate",
    };
    let w = crate::uri::wrap(server, own);
    let raw = set_fields(Some(raw), [(field.into(), to_raw(&w).unwrap())]).unwrap();
    renamed.push(ResourceRenamed {
        kind,
        server: server.into(),
        uri: own.into(),
        exposed: w.clone(),
        reason,
        with,
    });
    [w, server.into(), own.into(), raw.get().into()]
}

/// The whole-merge algorithm the resource builder replaced, kept as its
/// oracle: every server's items against every other server's, at once.
fn merged_whole(servers: &[ServerResources<'_>]) -> FlatResources {
    use crate::uri::{UriTemplate, is_reserved};
    type Own<'a> = (
        &'a str,
        Vec<&'a Resource>,
        Vec<(&'a ResourceTemplate, UriTemplate)>,
    );
    let own: Vec<Own<'_>> = servers
        .iter()
        .map(|s| {
            let mut seen = HashSet::new();
            let rs = s
                .resources
                .iter()
                .filter(|r| seen.insert(r.uri.as_str()))
                .collect();
            let mut seen = HashSet::new();
            let ts = s
                .templates
                .iter()
                .filter(|t| seen.insert(t.uri_template.as_str()))
                .map(|t| (t, UriTemplate::parse(&t.uri_template)))
                .collect();
            (s.server, rs, ts)
        })
        .collect();
    let others = |me: &str, has: &dyn Fn(&Own<'_>) -> bool| -> Vec<String> {
        own.iter()
            .filter(|o| o.0 != me && has(o))
            .map(|o| o.0.to_owned())
            .collect()
    };
    let mut out: FlatResources = Default::default();
    for (server, rs, ts) in &own {
        for r in rs {
            let u = r.uri.as_str();
            let why = if is_reserved(u) {
                Some((RenameReason::ReservedScheme, Vec::new()))
            } else {
                let same = others(server, &|o| o.1.iter().any(|x| x.uri == u));
                let by = others(server, &|o| o.2.iter().any(|(_, m)| m.matches(u)));
                if !same.is_empty() {
                    Some((RenameReason::SameUri, same))
                } else {
                    (!by.is_empty()).then_some((RenameReason::TemplateMatch, by))
                }
            };
            let row = whole_row(server, u, &r.raw, ResourceKind::Resource, why, &mut out.2);
            out.0.push(row);
        }
        for (t, _) in ts {
            let text = t.uri_template.as_str();
            let same = others(server, &|o| o.2.iter().any(|(x, _)| x.uri_template == text));
            let why = if is_reserved(text) {
                Some((RenameReason::ReservedScheme, Vec::new()))
            } else {
                (!same.is_empty()).then_some((RenameReason::SameUri, same))
            };
            let row = whole_row(
                server,
                text,
                &t.raw,
                ResourceKind::Template,
                why,
                &mut out.2,
            );
            out.1.push(row);
        }
    }
    // The old listing kept resources before templates in `renamed`, per
    // server; the builder keeps the same order.
    out.3 = (
        fingerprint(
            "resources",
            out.0
                .iter()
                .map(|r| [r[0].as_str(), r[1].as_str(), r[2].as_str()]),
        ),
        fingerprint(
            "resource_templates",
            out.1
                .iter()
                .map(|r| [r[0].as_str(), r[1].as_str(), r[2].as_str()]),
        ),
    );
    out
}

/// The incremental resource builder equals the whole merge, for random
/// per-server changes of resources and templates that collide in every
/// way (same URI, a template producing another's URI, the same template
/// text, the reserved scheme, a server's own duplicates).
#[test]
fn incremental_resources_equal_the_whole_merge() {
    const URIS: &[&str] = &[
        "x://a",
        "x://b",
        "db://users/1",
        "db://users/2",
        "note://n",
        "mcphost://s/x",
        "file:///etc/x",
    ];
    const TEMPLATES: &[&str] = &[
        "db://users/{id}",
        "note://{id}",
        "x://{k}",
        "file:///{+path}",
        "mcphost://{s}/x",
        "bad{",
    ];
    let servers = ["s0", "s1", "s2", "s3", "s4"];
    let mut rng = Lcg(5);
    for round in 0..30 {
        let mut rs: Vec<Vec<Resource>> = vec![Vec::new(); servers.len()];
        let mut ts: Vec<Vec<ResourceTemplate>> = vec![Vec::new(); servers.len()];
        let mut b = ResourceBuilder::default();
        for s in servers {
            b.push_server(s, &[], &[]);
        }
        for step in 0..30 {
            let i = rng.next(servers.len());
            rs[i] = (0..rng.next(4))
                .map(|_| resource(URIS[rng.next(URIS.len())]))
                .collect();
            if rng.next(2) == 0 {
                ts[i] = (0..rng.next(3))
                    .map(|_| template(TEMPLATES[rng.next(TEMPLATES.len())]))
                    .collect();
            }
            assert!(b.update(servers[i], &rs[i], &ts[i]));
            let inc = b.publish();
            let input: Vec<ServerResources<'_>> = servers
                .iter()
                .zip(rs.iter().zip(&ts))
                .map(|(s, (r, t))| sr(s, r, t))
                .collect();
            let want = merged_whole(&input);
            assert_eq!(flat_resources(&inc), want, "round {round} step {step}");
            assert_eq!(
                flat_resources(&build_resources(&input)),
                want,
                "round {round} step {step}"
            );
            for s in servers {
                assert_eq!(
                    inc.renamed_for(s).collect::<Vec<_>>(),
                    want.2
                        .iter()
                        .filter(|r| r.server == s)
                        .cloned()
                        .collect::<Vec<_>>()
                );
            }
        }
    }
    assert!(!ResourceBuilder::default().update("nosuch", &[], &[]));
}

/// One server's change rebuilds only its part and those of servers it
/// shares a claim with: everyone else's entries are the same objects.
#[test]
fn a_resource_change_touches_only_the_parts_that_share_a_claim() {
    let a = [resource("a://1"), resource("shared://x")];
    let b = [resource("b://1")];
    let c = [resource("shared://x")];
    let mut builder = ResourceBuilder::default();
    builder.push_server("a", &a, &[template("a://{n}")]);
    builder.push_server("b", &b, &[]);
    builder.push_server("c", &[], &[]);
    let first = builder.publish();
    assert_eq!(
        first
            .resources()
            .iter()
            .map(|r| r.uri.as_str())
            .collect::<Vec<_>>(),
        ["a://1", "shared://x", "b://1"]
    );

    // c lists a's URI: a's copy and c's are wrapped; b is not touched.
    assert!(builder.update("c", &c, &[]));
    let clash = builder.publish();
    assert_eq!(
        clash
            .resources()
            .iter()
            .map(|r| r.uri.as_str())
            .collect::<Vec<_>>(),
        [
            "a://1",
            "mcphost://a/shared://x",
            "b://1",
            "mcphost://c/shared://x"
        ]
    );
    assert!(Arc::ptr_eq(&first.resources()[0], &clash.resources()[0]));
    assert!(Arc::ptr_eq(&first.resources()[2], &clash.resources()[2]));
    assert!(Arc::ptr_eq(&first.templates()[0], &clash.templates()[0]));
    assert_eq!(clash.renamed()[0].with, ["c"]);
    assert_eq!(
        clash.resolve("shared://x", none).unwrap_err(),
        ResolveError::Ambiguous {
            uri: "shared://x".into(),
            servers: vec!["a".into(), "c".into()]
        }
    );

    // b lists a URI a's template produces: only b's copy is wrapped.
    assert!(builder.update("b", &[resource("a://2")], &[]));
    let produced = builder.publish();
    assert_eq!(produced.resources()[2].uri, "mcphost://b/a://2");
    assert_eq!(produced.renamed_for("b").next().unwrap().with, ["a"]);
    assert!(Arc::ptr_eq(&clash.resources()[1], &produced.resources()[1]));
    assert!(Arc::ptr_eq(&clash.resources()[3], &produced.resources()[3]));

    // c and b relist nothing: every URI is a's own again, the first listing
    // comes back (the same objects, the same cursors).
    assert!(builder.update("c", &[], &[]));
    assert!(builder.update("b", &b, &[]));
    let undone = builder.publish();
    assert_eq!(flat_resources(&undone), flat_resources(&first));
    assert!(Arc::ptr_eq(&first.resources()[1], &undone.resources()[1]));
    assert!(undone.renamed().is_empty());
    let (_, next) = first.page(None, 1).unwrap();
    assert_eq!(undone.page(next.as_deref(), 1).unwrap().0.len(), 1);
}
