//! Replays every fuzz target's committed corpus on stable, so each `cargo
//! test` runs the fuzzed surfaces over the inputs the fuzzer found
//! interesting (fuzz/fuzz_targets/<target>.rs calls the same function).

use std::fs;
use std::path::Path;

/// A target: its name, its entry point, the fewest seeds its corpus must have.
type Target = (&'static str, fn(&[u8]), usize);

const TARGETS: &[Target] = &[
    ("decode", mcphost::jsonrpc::fuzz_decode, 10),
    ("framing", mcphost::transport::framing::fuzz_framing, 10),
    ("sse", mcphost::transport::http::fuzz_sse, 10),
    ("socket", mcphost::ipc::fuzz_socket_reader, 8),
    ("config", mcphost::config::fuzz_config, 10),
];

fn replay(target: &str) {
    let (_, run, min) = TARGETS.iter().find(|t| t.0 == target).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in fs::read_dir(&dir).expect("fuzz corpus directory") {
        let path = entry.expect("corpus entry").path();
        if path.is_file() {
            let data = fs::read(&path).expect("corpus file");
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{target} panicked on {}", path.display());
            n += 1;
        }
    }
    assert!(
        n >= *min,
        "expected a seed corpus, found {n} files in {}",
        dir.display()
    );
}

#[test]
fn every_fuzz_target_has_a_corpus_replayed_here() {
    let targets = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    for entry in fs::read_dir(&targets).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        assert!(
            TARGETS.iter().any(|t| t.0 == name),
            "fuzz target {name} is not replayed by tests/it/fuzz_corpus.rs"
        );
    }
}

#[test]
fn decode_corpus_replays_without_panicking() {
    replay("decode");
}

#[test]
fn framing_corpus_replays_without_panicking() {
    replay("framing");
}

#[test]
fn sse_corpus_replays_without_panicking() {
    replay("sse");
}

#[test]
fn socket_corpus_replays_without_panicking() {
    replay("socket");
}

#[test]
fn config_corpus_replays_without_panicking() {
    replay("config");
}
