//! include/mcphost.h is what cbindgen makes of this crate, and documents
//! every function, type and constant it declares.

use std::path::PathBuf;

fn header_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../include/mcphost.h")
}

fn generated() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let mut config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    config.after_includes = Some(method_defines());
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("UTF-8 header")
}

/// cbindgen exports no string constants: the method names become
/// `#define`s here, from the crate's own table.
fn method_defines() -> String {
    let mut out = String::from("\n");
    let mut group = "";
    for (name, value, g) in mcphost::methods::METHODS {
        if *g != group {
            out.push_str(&format!("\n/* {g} */\n"));
            group = g;
        }
        out.push_str(&format!("/** `{value}` */\n#define {name} \"{value}\"\n"));
    }
    out
}

#[test]
fn the_committed_header_matches_the_code() {
    let fresh = generated();
    let path = header_path();
    if std::env::var_os("MCPHOST_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/mcphost.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/mcphost.h is stale: regenerate it with \
         `MCPHOST_BLESS=1 cargo test -p mcphost-c --test header` and commit it"
    );
}

/// Every declaration (function, typedef, enum, #define) follows a comment.
#[test]
fn every_declaration_in_the_header_is_documented() {
    let text = generated();
    let lines: Vec<&str> = text.lines().collect();
    let mut undocumented = Vec::new();
    let mut in_enum = false;
    for (i, line) in lines.iter().enumerate() {
        let l = line.trim();
        let decl = l.starts_with("#define MCPHOST_")
            || l.starts_with("typedef ")
            || l.starts_with("enum ")
            || (l.contains("mcphost_")
                && l.contains('(')
                && !l.starts_with('*')
                && !l.starts_with("/*")
                && i > 0
                && !lines[i - 1].trim_end().ends_with(','))
            || (in_enum && l.starts_with("MCPHOST_"));
        if l.starts_with("enum ") {
            in_enum = true;
        }
        if in_enum && l.starts_with("};") {
            in_enum = false;
        }
        if !decl || l.starts_with("#define MCPHOST_H") {
            continue;
        }
        // `typedef uint32_t mcphost_status;` right after its enum is its doc's.
        if l.starts_with("typedef uint32_t mcphost_status")
            || l.starts_with("typedef enum mcphost_status")
        {
            continue;
        }
        let prev = lines[..i]
            .iter()
            .rev()
            .map(|l| l.trim())
            .find(|l| !l.is_empty());
        if !prev.is_some_and(|p| p.ends_with("*/")) {
            undocumented.push(l.to_owned());
        }
    }
    assert!(
        undocumented.is_empty(),
        "undocumented in the header: {undocumented:#?}"
    );
}

/// The header's `mcphost/*` requests are exactly those the engine answers
/// (`MCPHOST_REQUESTS`, which the engine's own tests hold to its dispatch).
#[test]
fn the_header_names_every_mcphost_request_the_engine_answers() {
    let ours: std::collections::BTreeSet<&str> = mcphost::methods::METHODS
        .iter()
        .map(|(_, value, _)| *value)
        .filter(|v| v.starts_with("mcphost/"))
        .collect();
    let engine: std::collections::BTreeSet<&str> =
        mcphost_core::protocol::methods::MCPHOST_REQUESTS
            .iter()
            .copied()
            .collect();
    let missing: Vec<_> = engine.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&engine).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "bindings/c/src/methods.rs: missing {missing:?}, not answered by the engine {extra:?}"
    );
}

/// The Swift package re-exports every method and event macro by name
/// (Names.swift); the Python package is checked by its own test.
#[test]
fn the_swift_package_names_every_method_and_event() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../swift/Sources/MCPHost/Names.swift");
    let swift = std::fs::read_to_string(&path).expect("Names.swift");
    let missing: Vec<&str> = mcphost::methods::METHODS
        .iter()
        .map(|(name, _, _)| *name)
        .filter(|name| !swift.contains(&format!("= {name}\n")))
        .collect();
    assert!(missing.is_empty(), "{} lacks {missing:?}", path.display());
}
