//! Replays the committed fuzz corpus on stable, so every `cargo test` runs
//! the decoder over inputs the fuzzer found interesting.

use std::fs;
use std::path::Path;

#[test]
fn decode_corpus_replays_without_panicking() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let mut n = 0;
    for entry in fs::read_dir(&dir).expect("fuzz corpus directory") {
        let path = entry.expect("corpus entry").path();
        if path.is_file() {
            let data = fs::read(&path).expect("corpus file");
            mcphost::jsonrpc::fuzz_decode(&data);
            n += 1;
        }
    }
    assert!(
        n >= 10,
        "expected a seed corpus, found {n} files in {}",
        dir.display()
    );
}
