#!/usr/bin/env bash
# The one command that runs every check and test of mcphost, from a clean
# clone: installs the interop servers, the conformance suite and a pinned
# cargo-nextest, then fmt, clippy, the macOS type-check, the test suite, the
# C library's tests (also under valgrind), the Python wheel's and the Swift
# package's tests, the release library's exports and size, the bench smoke,
# the demo, the official MCP client conformance suite and a fuzz smoke.
#   scripts/test.sh            (CI runs it through .ci/run)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Where the interop tests find their servers (absolute paths).
export MCPHOST_INTEROP_DIR="$ROOT/tests/interop"
export MCPHOST_PYTHON="$ROOT/.venv/bin/python"
MCPHOST_NODE="$(command -v node || true)"
export MCPHOST_NODE
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

T_START=$(date +%s)
SUMMARY=()
CURRENT=""
STEP_START=0

step() {
	CURRENT="$1"
	STEP_START=$(date +%s)
	printf '\n==== [%s] %s\n' "$(date +%H:%M:%S)" "$CURRENT"
}
step_done() {
	local dt=$(($(date +%s) - STEP_START))
	SUMMARY+=("$(printf '%5ss  %s' "$dt" "$CURRENT")")
	printf -- '---- %s: ok (%ss)\n' "$CURRENT" "$dt"
	CURRENT=""
}
on_exit() {
	local rc=$?
	if [[ -n "$CURRENT" ]]; then
		SUMMARY+=("$(printf '%5ss  %s  FAILED (exit %s)' "$(($(date +%s) - STEP_START))" "$CURRENT" "$rc")")
	fi
	printf '\n==== summary (total %ss)\n' "$(($(date +%s) - T_START))"
	local line
	for line in "${SUMMARY[@]}"; do printf '%s\n' "$line"; done
	if [[ $rc -ne 0 ]]; then printf 'scripts/test.sh: FAILED (exit %s)\n' "$rc"; fi
	exit "$rc"
}
trap on_exit EXIT

step "setup interop servers (scripts/setup-interop.sh)"
"$ROOT/scripts/setup-interop.sh"
step_done

step "setup conformance suite (scripts/setup-conformance.sh)"
"$ROOT/scripts/setup-conformance.sh"
step_done

step "cargo fmt --all -- --check"
cargo fmt --all -- --check
step_done

step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
step_done

# What embeds the engine (the C library) must not pull in the CLI's
# dependencies: the library builds without feature `cli`, and none of them
# is in its dependency tree.
step "the library without the CLI's dependencies (cargo check --lib --no-default-features)"
cargo check --lib --no-default-features
cli_deps="$( (cargo tree -p mcphost --no-default-features --edges normal --prefix none
	cargo tree -p mcphost-c --edges normal --prefix none) |
	grep -E '^(anyhow|clap|tracing-subscriber|inquire|open|shell-words) ' | sort -u || true)"
if [[ -n "$cli_deps" ]]; then
	printf 'the library depends on CLI crates without feature cli:\n%s\n' "$cli_deps" >&2
	exit 1
fi
step_done

# macOS is type-checked only, never run here: the library and the daemon's
# code (lib + CLI binary) for both Apple targets, without feature `tls`,
# whose aws-lc-sys C code cannot be cross-compiled without a macOS SDK.
# A target that cannot be installed fails the step: it never passes silently.
MACOS_TARGETS=(x86_64-apple-darwin aarch64-apple-darwin)
step "macOS type-check without TLS (cargo check --target ${MACOS_TARGETS[*]})"
if ! rustup target add "${MACOS_TARGETS[@]}"; then
	printf 'cannot install the macOS targets (%s): the macOS check did NOT run\n' \
		"${MACOS_TARGETS[*]}" >&2
	exit 1
fi
for t in "${MACOS_TARGETS[@]}"; do
	cargo check --target "$t" --lib --no-default-features --features keyring
	cargo check --target "$t" --no-default-features --features cli,keyring --bins
	cargo check --target "$t" -p mcphost-c --no-default-features --features keyring
done
step_done

# nextest enforces the per-test timeouts of .config/nextest.toml; plain
# `cargo test` would not, so there is no fallback to it.
NEXTEST_VERSION=0.9.143
if [[ "$(cargo nextest --version 2>/dev/null | head -n 1)" != "cargo-nextest $NEXTEST_VERSION"* ]]; then
	step "install cargo-nextest $NEXTEST_VERSION"
	cargo install cargo-nextest --locked --version "$NEXTEST_VERSION"
	step_done
fi

# nextest does not run doctests; they run first so that nextest's summary
# is the last test-runner output.
step "cargo test --workspace --doc"
cargo test --workspace --doc
step_done
# .config/nextest.toml: profile "ci" (no fail-fast) when CI is set.
profile=default
[[ -n "${CI:-}" ]] && profile=ci
# The tests that need the interop servers are #[ignore]d, so a clone without
# them lists them as ignored; the servers are installed here, so every ignored
# test runs but the four that are not part of the suite: the two helper
# processes that tests spawn, a demonstration of lost updates without the
# lock, and the OS keyring's round trip.
not_suite='test(=auth_store::child_process_helper) | test(=stdio_process::owner_helper)'
not_suite+=' | test(=auth_store::processes_incrementing_without_the_lock_lose_updates)'
not_suite+=' | test(=auth_store::real_keyring_round_trip)'
step "cargo nextest run --workspace --run-ignored all (profile $profile)"
cargo nextest run --workspace --profile "$profile" --run-ignored all -E "not ($not_suite)"
step_done

# The benches are harness=false binaries nextest cannot list; without
# `--bench` on their command line each runs a short smoke. The smoke draws
# every plot too (scale, paths), so the plotting code runs; it needs a
# TrueType font (Debian's fonts-dejavu-core).
font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
if [[ -z "${MCPHOST_BENCH_FONT:-}" && ! -f "$font" ]] && command -v apt-get >/dev/null 2>&1; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-dejavu-core
fi
step "bench smoke: cargo test --bench '*' (plots in target/bench-plots)"
MCPHOST_BENCH_PLOTS="$ROOT/target/bench-plots" cargo test --bench '*'
for png in scale-start scale-rss paths-latency paths-throughput; do
	[[ -s "$ROOT/target/bench-plots/$png.png" ]] || {
		echo "bench smoke: $png.png was not drawn" >&2
		exit 1
	}
done
step_done

step "C tests of libmcphost, both modes, then under valgrind (scripts/test-c.sh)"
"$ROOT/scripts/test-c.sh"
step_done

step "Python binding: wheel into a fresh venv, pytest in both modes (scripts/test-python.sh)"
"$ROOT/scripts/test-python.sh"
step_done

step "Swift package: swift test in both modes (scripts/test-swift.sh)"
"$ROOT/scripts/test-swift.sh"
step_done

# What users link: the release library exports only mcphost_* and, stripped
# as an app ships it, stays small. 17.7 MB on x86_64 Linux once issue 13's
# incremental catalog, stored catalogs and call statistics went in (it was
# under 16 MiB before); the limit leaves room for the next issue, not more.
LIB_MAX_BYTES=$((20 * 1024 * 1024))
step "libmcphost release build: exported symbols and stripped size (at most $LIB_MAX_BYTES bytes)"
cargo build --release -p mcphost-c
so="$ROOT/target/release/libmcphost.so"
foreign="$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^mcphost_' || true)"
if [[ -n "$foreign" ]]; then
	printf 'libmcphost.so exports symbols outside mcphost_*:\n%s\n' "$foreign" >&2
	exit 1
fi
strip -o "$ROOT/target/release/libmcphost.stripped.so" "$so"
size="$(stat -c %s "$ROOT/target/release/libmcphost.stripped.so")"
printf 'libmcphost.so: %s bytes stripped, %s exported symbols, all mcphost_*\n' "$size" \
	"$(nm -D --defined-only "$so" | wc -l)"
if ((size > LIB_MAX_BYTES)); then
	printf 'libmcphost.so is %s bytes, over the %s limit\n' "$size" "$LIB_MAX_BYTES" >&2
	exit 1
fi
step_done

step "demo (scripts/demo.sh, debug build)"
cargo build --bins
MCPHOST_DEMO_BIN="$ROOT/target/debug" "$ROOT/scripts/demo.sh"
step_done

# After the cargo tests and on its own: sse-retry times a 450-700 ms
# reconnect window, so nothing else should compete for the CPU. Both suites:
# 0.1.16 and the 2026-07-28 pre-release (about a minute together).
step "MCP client conformance suites, 0.1.16 and the pre-release (scripts/conformance.sh)"
"$ROOT/scripts/conformance.sh"
step_done

# Fuzz smoke: 60 s of libFuzzer in all, shared by the targets (the message
# decoder, stdio line framing, SSE parser, socket reader, config loader), on
# stable (no sanitizer). New inputs go to a scratch corpus so the committed
# seeds stay put. MCPHOST_FUZZ_SECONDS is the total.
FUZZ_TARGETS=(decode framing sse socket config)
FUZZ_TOTAL="${MCPHOST_FUZZ_SECONDS:-60}"
FUZZ_EACH=$((FUZZ_TOTAL / ${#FUZZ_TARGETS[@]}))
((FUZZ_EACH >= 1)) || FUZZ_EACH=1
step "fuzz smoke: ${FUZZ_TARGETS[*]} (${FUZZ_EACH} s each)"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
	cargo install cargo-fuzz --locked --version 0.13.2
fi
FUZZ_SCRATCH="$(mktemp -d)"
(
	cd "$ROOT/fuzz"
	cargo fuzz build -s none
	for t in "${FUZZ_TARGETS[@]}"; do
		mkdir -p "$FUZZ_SCRATCH/$t"
		cargo fuzz run "$t" -s none "$FUZZ_SCRATCH/$t" "corpus/$t" -- \
			-max_total_time="$FUZZ_EACH" -max_len=65536
	done
)
rm -rf "$FUZZ_SCRATCH"
step_done
