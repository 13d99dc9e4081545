#!/usr/bin/env bash
# The one command that runs every check and test of mcphost, from a clean
# clone: installs the interop servers, the conformance suite and a pinned
# cargo-nextest, then fmt, clippy, the macOS type-check, the test suite, the
# C library's tests (also under valgrind), the Python wheel's and the Swift
# package's tests, the release library's exports and size, the bench smoke,
# the demo, the official MCP client conformance suite and a fuzz smoke.
#   scripts/test.sh            (CI runs it through .ci/run)
#
# Each artifact is built once and shared by the steps that use it:
#   - one debug build (`cargo build --workspace --lib --bins --tests`): the
#     doc tests and nextest run it, and its target/debug/{mcphost,
#     mcphost-testserver,libmcphost.*} serve the C, Python and Swift tests,
#     the demo and the conformance suite (a `cargo build --bins` of their
#     own would build the tree a second time: the tests' dev-dependencies
#     change tokio's features);
#   - one release libmcphost (`cargo build --release -p mcphost-c`): its
#     exports and size, the C tests (and valgrind), Python's wheel, Swift.
# Steps that only download (npm, pip, the Swift root) run in the background
# while cargo builds; the suites that end the run run two groups in parallel
# (see "parallel groups" below). Each background step's output goes to
# target/ci-logs/STEP.log and is printed when the step fails. The summary
# table at the end (step, seconds, status) is printed on failure too.
#
# Kept between runs, outside the clone, in $MCPHOST_CI_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/mcphost-ci):
#   target/        cargo's target dir (CARGO_TARGET_DIR), so a fresh clone
#                  reuses the compiled dependencies; MCPHOST_CI_SHARED_TARGET=0
#                  (or CARGO_TARGET_DIR set) builds in the clone's own target/.
#                  Runs sharing it take turns (a lock); it is emptied when it
#                  grows over MCPHOST_CI_CACHE_MAX_GB (default 20).
#   fuzz-target/   the fuzz workspace's target dir (its own Cargo.lock).
# The Swift toolchain root is kept by scripts/test-swift.sh
# ($MCPHOST_SWIFT_ROOT, default /var/tmp/mcphost-swift-trixie).
set -euo pipefail
# Background steps each get their own process group, so a failed run can
# stop one with everything it started.
set -m

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Where the interop tests find their servers (absolute paths).
export MCPHOST_INTEROP_DIR="$ROOT/tests/interop"
export MCPHOST_PYTHON="$ROOT/.venv/bin/python"
MCPHOST_NODE="$(command -v node || true)"
export MCPHOST_NODE
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

CI_CACHE="${MCPHOST_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcphost-ci}"
FUZZ_TARGET_DIR="$ROOT/fuzz/target"
if [[ -z "${CARGO_TARGET_DIR:-}" && "${MCPHOST_CI_SHARED_TARGET:-1}" != 0 ]]; then
	mkdir -p "$CI_CACHE"
	# One run at a time on the shared target dir: another clone's build
	# would replace target/debug/mcphost under this run's tests.
	exec 9>"$CI_CACHE/lock"
	if ! flock -n 9; then
		printf 'scripts/test.sh: waiting for another run that uses %s ...\n' "$CI_CACHE"
		flock 9
	fi
	max_gb="${MCPHOST_CI_CACHE_MAX_GB:-20}"
	for d in "$CI_CACHE/target" "$CI_CACHE/fuzz-target"; do
		if [[ -d "$d" ]] && (($(du -sk "$d" | cut -f1) > max_gb * 1024 * 1024)); then
			printf 'scripts/test.sh: %s is over %s GB: emptied\n' "$d" "$max_gb"
			rm -rf "$d"
		fi
	done
	export CARGO_TARGET_DIR="$CI_CACHE/target"
	FUZZ_TARGET_DIR="$CI_CACHE/fuzz-target"
fi
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
# What this run writes besides cargo's artifacts stays in the clone.
LOGS="$ROOT/target/ci-logs"
rm -rf "$LOGS"
mkdir -p "$LOGS"
printf 'scripts/test.sh: cargo target dir %s\n' "$TARGET"

T_START=$(date +%s)
SUMMARY=()
CURRENT=""
STEP_START=0
declare -A BG_PID=() BG_TITLE=()
BG_ORDER=()

record() { # title, seconds, status
	SUMMARY+=("$(printf '%7s  %-10s  %s' "$2" "$3" "$1")")
}
step() {
	CURRENT="$1"
	STEP_START=$(date +%s)
	printf '\n==== [%s] %s\n' "$(date +%H:%M:%S)" "$CURRENT"
}
step_done() {
	local dt=$(($(date +%s) - STEP_START))
	record "$CURRENT" "$dt" ok
	printf -- '---- %s: ok (%ss)\n' "$CURRENT" "$dt"
	CURRENT=""
}

# bg_step ID TITLE COMMAND...: runs COMMAND in the background, output to
# $LOGS/ID.log, its exit status and seconds to $LOGS/ID.status.
bg_step() {
	local id="$1" title="$2"
	shift 2
	BG_TITLE[$id]="$title"
	BG_ORDER+=("$id")
	(
		t0=$(date +%s)
		rc=0
		"$@" >"$LOGS/$id.log" 2>&1 </dev/null || rc=$?
		printf '%s %s\n' "$rc" "$(($(date +%s) - t0))" >"$LOGS/$id.status"
	) &
	BG_PID[$id]=$!
	printf '\n==== [%s] started: %s (log: %s)\n' "$(date +%H:%M:%S)" "$title" "${LOGS#"$ROOT"/}/$id.log"
}
# join_steps ID...: waits for the background steps, records each; a failed one has
# its log printed. Fails (returns 1) when any failed.
join_steps() {
	local id rc dt failed=0
	for id in "$@"; do
		wait "${BG_PID[$id]}" 2>/dev/null || true
		unset "BG_PID[$id]"
		if [[ -f "$LOGS/$id.status" ]]; then
			read -r rc dt <"$LOGS/$id.status"
		else
			rc="no status" dt="?"
		fi
		if [[ "$rc" == 0 ]]; then
			record "${BG_TITLE[$id]}" "$dt" ok
			printf -- '---- [%s] %s: ok (%ss)\n' "$(date +%H:%M:%S)" "${BG_TITLE[$id]}" "$dt"
		else
			record "${BG_TITLE[$id]}" "$dt" "FAILED($rc)"
			printf '\n---- [%s] %s: FAILED (exit %s, %ss); its log (%s):\n' "$(date +%H:%M:%S)" \
				"${BG_TITLE[$id]}" "$rc" "$dt" "$LOGS/$id.log"
			sed 's/^/    | /' "$LOGS/$id.log"
			failed=1
		fi
	done
	return "$failed"
}
on_exit() {
	local rc=$? id dt
	set +e
	if [[ -n "$CURRENT" ]]; then
		record "$CURRENT" "$(($(date +%s) - STEP_START))" "FAILED($rc)"
	fi
	# Background steps not joined when the run fails: their result if they
	# finished, else stopped and shown so (their logs stay in $LOGS).
	local st
	for id in "${BG_ORDER[@]}"; do
		[[ -n "${BG_PID[$id]:-}" ]] || continue
		if [[ -f "$LOGS/$id.status" ]]; then
			read -r st dt <"$LOGS/$id.status"
			[[ "$st" == 0 ]] && st=ok || st="FAILED($st)"
			record "${BG_TITLE[$id]}" "$dt" "$st"
		else
			kill -TERM -- "-${BG_PID[$id]}" 2>/dev/null
			wait "${BG_PID[$id]}" 2>/dev/null
			record "${BG_TITLE[$id]}" "-" "STOPPED"
		fi
	done
	printf '\n==== summary (total %ss, cargo target dir %s)\n' "$(($(date +%s) - T_START))" "$TARGET"
	printf '%7s  %-10s  %s\n' seconds status step
	local line
	for line in "${SUMMARY[@]}"; do printf '%s\n' "$line"; done
	if [[ $rc -ne 0 ]]; then printf 'scripts/test.sh: FAILED (exit %s)\n' "$rc"; fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- downloads
# Network-bound, so in the background while cargo builds below. The tests
# that need them wait for them (join_steps).
bg_step setup-interop "setup interop servers (scripts/setup-interop.sh)" \
	"$ROOT/scripts/setup-interop.sh"
bg_step setup-conformance "setup conformance suite (scripts/setup-conformance.sh)" \
	"$ROOT/scripts/setup-conformance.sh"
bg_step swift-root "Swift toolchain (scripts/test-swift.sh --prepare)" \
	"$ROOT/scripts/test-swift.sh" --prepare

# nextest enforces the per-test timeouts of .config/nextest.toml; plain
# `cargo test` would not, so there is no fallback to it.
NEXTEST_VERSION=0.9.143
install_tools() {
	if [[ "$(cargo nextest --version 2>/dev/null | head -n 1)" != "cargo-nextest $NEXTEST_VERSION"* ]]; then
		cargo install cargo-nextest --locked --version "$NEXTEST_VERSION"
	fi
	if ! command -v cargo-fuzz >/dev/null 2>&1; then
		cargo install cargo-fuzz --locked --version 0.13.2
	fi
	# The bench smoke draws its plots with a TrueType font (Debian's
	# fonts-dejavu-core). apt-get takes turns with test-swift.sh's.
	local font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
	if [[ -z "${MCPHOST_BENCH_FONT:-}" && ! -f "$font" ]] && command -v apt-get >/dev/null 2>&1; then
		flock /tmp/mcphost-ci-apt.lock sh -c 'apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-dejavu-core'
	fi
	cargo nextest --version | head -n 1
	cargo fuzz --version
}
bg_step tools "tools: cargo-nextest $NEXTEST_VERSION, cargo-fuzz, the bench font (if missing)" install_tools

# ---------------------------------------------------------------- static checks
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
# Both targets in one cargo call each, so cargo schedules them together.
# A target that cannot be installed fails the step: it never passes silently.
MACOS_TARGETS=(x86_64-apple-darwin aarch64-apple-darwin)
step "macOS type-check without TLS (cargo check --target ${MACOS_TARGETS[*]})"
if ! rustup target add "${MACOS_TARGETS[@]}"; then
	printf 'cannot install the macOS targets (%s): the macOS check did NOT run\n' \
		"${MACOS_TARGETS[*]}" >&2
	exit 1
fi
mac_targets=()
for t in "${MACOS_TARGETS[@]}"; do mac_targets+=(--target "$t"); done
cargo check "${mac_targets[@]}" --lib --no-default-features --features keyring
cargo check "${mac_targets[@]}" --no-default-features --features cli,keyring --bins
cargo check "${mac_targets[@]}" -p mcphost-c --no-default-features --features keyring
step_done

# ---------------------------------------------------------------- cargo tests
# One debug build for everything below: the doc tests and nextest build the
# same units (the tests' dev-dependencies set the features), so they only
# run; `--lib` puts target/debug/libmcphost.{so,a} (mcphost-c's lib, which a
# test build leaves in deps/) next to the binaries. The C, Python and Swift
# tests, the demo and the conformance suites run these binaries; a
# `cargo build --bins` of their own would build the tree again without the
# dev-dependencies' features. (cargo warns that both libs are named
# libmcphost.rlib: neither rlib is used from there.)
step "debug build shared by the tests and the scripts (cargo build --workspace --lib --bins --tests)"
cargo build --workspace --lib --bins --tests
for f in mcphost mcphost-testserver libmcphost.so libmcphost.a; do
	[[ -f "$TARGET/debug/$f" ]] || {
		printf 'the debug build made no %s\n' "$TARGET/debug/$f" >&2
		exit 1
	}
done
step_done

step "waiting for the interop servers and the tools"
join_steps setup-interop tools
step_done

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
# every plot too (scale, paths), so the plotting code runs. --workspace:
# the same features as the test build above, so nothing is built twice.
step "bench smoke: cargo test --workspace --bench '*' (plots in target/bench-plots)"
MCPHOST_BENCH_PLOTS="$ROOT/target/bench-plots" cargo test --workspace --bench '*'
for png in scale-start scale-rss paths-latency paths-throughput; do
	[[ -s "$ROOT/target/bench-plots/$png.png" ]] || {
		echo "bench smoke: $png.png was not drawn" >&2
		exit 1
	}
done
step_done

# What users link: the release library exports only mcphost_* and, stripped
# as an app ships it, stays small. 17.7 MB on x86_64 Linux once issue 13's
# incremental catalog, stored catalogs and call statistics went in (it was
# under 16 MiB before); 19.9 MB after issue 23; 21.0 MB with issue 24's
# pins, hygiene, sandbox and audit log (their own code about 0.3 MB of
# symbols; file-rotate with chrono and flate2 about 0.1 MB; landlock,
# seccompiler and the JCS crate 0.05 MB; the rest is what they instantiate
# of serde and tokio). The limit leaves room for the next issue, not more.
# The C tests, Python's wheel and the Swift package use this same build.
LIB_MAX_BYTES=$((22 * 1024 * 1024))
step "libmcphost release build: exported symbols and stripped size (at most $LIB_MAX_BYTES bytes)"
cargo build --release -p mcphost-c
so="$TARGET/release/libmcphost.so"
foreign="$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^mcphost_' || true)"
if [[ -n "$foreign" ]]; then
	printf 'libmcphost.so exports symbols outside mcphost_*:\n%s\n' "$foreign" >&2
	exit 1
fi
strip -o "$ROOT/target/libmcphost.stripped.so" "$so"
size="$(stat -c %s "$ROOT/target/libmcphost.stripped.so")"
printf 'libmcphost.so: %s bytes stripped, %s exported symbols, all mcphost_*\n' "$size" \
	"$(nm -D --defined-only "$so" | wc -l)"
if ((size > LIB_MAX_BYTES)); then
	printf 'libmcphost.so is %s bytes, over the %s limit\n' "$size" "$LIB_MAX_BYTES" >&2
	exit 1
fi
step_done
# From here on the scripts use the debug and release builds above (they
# check that the files are there) instead of building their own.
export MCPHOST_PREBUILT=1

# ---------------------------------------------------------------- parallel groups
# Group 1, light on the CPU: the conformance suites (serial on purpose:
# sse-retry times a 450-700 ms reconnect window, so nothing CPU-heavy runs
# beside them), the Python tests and the demo, which mostly wait on
# processes they start.
# Group 2, the CPU-heavy rest: the C tests (valgrind), the Swift package's
# build and tests, and the fuzz targets' build and smoke.
step "waiting for the conformance suite"
join_steps setup-conformance
step_done

bg_step conformance "MCP client conformance suites, 0.1.16 and the pre-release (scripts/conformance.sh)" \
	env MCPHOST_BIN="$TARGET/debug/mcphost" "$ROOT/scripts/conformance.sh"
bg_step python "Python binding: wheel into a fresh venv, pytest in both modes (scripts/test-python.sh)" \
	env MCPHOST_PYTHON_PROFILE=release "$ROOT/scripts/test-python.sh"
bg_step demo "demo (scripts/demo.sh, debug build)" \
	env MCPHOST_DEMO_BIN="$TARGET/debug" "$ROOT/scripts/demo.sh"
group1=0
join_steps conformance python demo || group1=1

# Fuzz smoke: 60 s of libFuzzer in all, shared by the targets (the message
# decoder, stdio line framing, SSE parser, socket reader, config loader), on
# stable (no sanitizer). New inputs go to a scratch corpus so the committed
# seeds stay put. MCPHOST_FUZZ_SECONDS is the total.
FUZZ_TARGETS=(decode framing sse socket config)
FUZZ_TOTAL="${MCPHOST_FUZZ_SECONDS:-60}"
FUZZ_EACH=$((FUZZ_TOTAL / ${#FUZZ_TARGETS[@]}))
((FUZZ_EACH >= 1)) || FUZZ_EACH=1
fuzz_smoke() {
	local scratch t
	scratch="$(mktemp -d)"
	trap 'rm -rf "$scratch"' RETURN
	cd "$ROOT/fuzz"
	# Its own target dir: the fuzz workspace has its own Cargo.lock and flags.
	cargo fuzz build -s none --target-dir "$FUZZ_TARGET_DIR"
	for t in "${FUZZ_TARGETS[@]}"; do
		mkdir -p "$scratch/$t"
		cargo fuzz run "$t" -s none --target-dir "$FUZZ_TARGET_DIR" "$scratch/$t" "corpus/$t" -- \
			-max_total_time="$FUZZ_EACH" -max_len=65536
	done
}

bg_step c-tests "C tests of libmcphost, debug and release, both modes, then under valgrind (scripts/test-c.sh)" \
	env MCPHOST_C_RELEASE=1 "$ROOT/scripts/test-c.sh"
bg_step fuzz "fuzz smoke: ${FUZZ_TARGETS[*]} (${FUZZ_EACH} s each)" fuzz_smoke
group2=0
if join_steps swift-root; then
	bg_step swift "Swift package: swift test in both modes (scripts/test-swift.sh)" \
		"$ROOT/scripts/test-swift.sh"
	join_steps c-tests swift fuzz || group2=1
else
	record "Swift package: swift test in both modes (scripts/test-swift.sh)" - "NOT RUN"
	echo "scripts/test.sh: no Swift toolchain (its log is above): the Swift tests did NOT run" >&2
	join_steps c-tests fuzz || true
	group2=1
fi

if ((group1 || group2)); then
	echo "scripts/test.sh: a step of the parallel groups failed (its log is above)" >&2
	exit 1
fi
