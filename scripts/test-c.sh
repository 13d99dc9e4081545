#!/usr/bin/env bash
# The C tests of libmcphost: builds the library and the binaries, compiles
# tests/c/test_*.c with the system C compiler against include/mcphost.h and
# the library, and runs each in both modes (embedded, and connected to a
# daemon this script starts), then again under valgrind (no leaks, no
# errors). Also: the header compiles as C++, the static library links, and
# the shared library exports only mcphost_* symbols.
#   scripts/test-c.sh            (scripts/test.sh runs it)
#   MCPHOST_C_VALGRIND=0 scripts/test-c.sh   skips valgrind, saying so
#   MCPHOST_C_RELEASE=1   valgrind runs the tests against the release library
#                         (target/release, the one users link; optimized, so
#                         much faster under valgrind) instead of the debug one;
#                         the debug library still runs every test once, so its
#                         debug-only checks (MCPHOST_TEST_DEBUG_LIBRARY) run
#   MCPHOST_PREBUILT=1    the libraries and binaries are built already
#                         (scripts/test.sh): checked, not built
#   CARGO_TARGET_DIR      as cargo
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"

CC="${CC:-cc}"
command -v "$CC" >/dev/null || { echo "test-c: no C compiler ($CC)" >&2; exit 1; }
NODE="${MCPHOST_NODE:-$(command -v node || true)}"
EVERYTHING="$ROOT/tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
[[ -n "$NODE" && -f "$EVERYTHING" ]] || {
	echo "test-c: server-everything is not installed; run scripts/setup-interop.sh" >&2
	exit 1
}

LIB="$TARGET/debug"
BIN="$TARGET/debug"
RELEASE_LIB="$TARGET/release"
libs=("$LIB")
[[ "${MCPHOST_C_RELEASE:-0}" == 1 ]] && libs+=("$RELEASE_LIB")
if [[ "${MCPHOST_PREBUILT:-0}" == 1 ]]; then
	for f in "${libs[@]/%//libmcphost.so}" "$LIB/libmcphost.a" "$BIN/mcphost" "$BIN/mcphost-testserver"; do
		[[ -f "$f" ]] || { echo "test-c: MCPHOST_PREBUILT=1 but $f is not built" >&2; exit 1; }
	done
else
	cargo build -q -p mcphost-c
	[[ "${MCPHOST_C_RELEASE:-0}" == 1 ]] && cargo build -q --release -p mcphost-c
	cargo build -q --bin mcphost --bin mcphost-testserver
fi
OUT="$ROOT/target/c-tests"
rm -rf "$OUT"
mkdir -p "$OUT"

# Only mcphost_* leaves the shared library.
for dir in "${libs[@]}"; do
	foreign="$(nm -D --defined-only "$dir/libmcphost.so" | awk '{print $3}' | grep -v '^mcphost_' || true)"
	if [[ -n "$foreign" ]]; then
		printf '%s/libmcphost.so exports symbols outside mcphost_*:\n%s\n' "$dir" "$foreign" >&2
		exit 1
	fi
	echo "exports of $dir/libmcphost.so: $(nm -D --defined-only "$dir/libmcphost.so" | wc -l) symbols, all mcphost_*"
done

# The header is valid C11 and C++.
"$CC" -std=c11 -Wall -Wextra -Werror -fsyntax-only -x c "$ROOT/include/mcphost.h"
if command -v c++ >/dev/null; then
	c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -x c++ "$ROOT/include/mcphost.h"
fi

RELEASE_CFLAGS=(-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -I"$ROOT/include")
CFLAGS=("${RELEASE_CFLAGS[@]}" -DMCPHOST_TEST_DEBUG_LIBRARY)
tests=()
for src in "$ROOT"/tests/c/test_*.c; do
	name="$(basename "$src" .c)"
	"$CC" "${CFLAGS[@]}" "$src" -o "$OUT/$name" -L"$LIB" -lmcphost -lpthread -Wl,-rpath,"$LIB"
	tests+=("$name")
done
# Against the release library: the same tests without the debug-only checks.
if [[ "${MCPHOST_C_RELEASE:-0}" == 1 ]]; then
	mkdir -p "$OUT/release"
	for src in "$ROOT"/tests/c/test_*.c; do
		"$CC" "${RELEASE_CFLAGS[@]}" "$src" -o "$OUT/release/$(basename "$src" .c)" \
			-L"$RELEASE_LIB" -lmcphost -lpthread -Wl,-rpath,"$RELEASE_LIB"
	done
fi
# The README's C example compiles and links as shown.
awk '/^```c$/{on=1; next} /^```$/{on=0} on' "$ROOT/README.md" >"$OUT/readme_example.c"
[[ -s "$OUT/readme_example.c" ]] || { echo "test-c: no C example in README.md" >&2; exit 1; }
"$CC" -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -I"$ROOT/include" "$OUT/readme_example.c" \
	-o "$OUT/readme_example" -L"$LIB" -lmcphost -lpthread
for src in "$ROOT"/tests/c/bench_*.c; do
	"$CC" "${CFLAGS[@]}" -O2 "$src" -o "$OUT/$(basename "$src" .c)" -L"$LIB" -lmcphost -lpthread -Wl,-rpath,"$LIB"
done
# The static library links on its own too.
"$CC" "${CFLAGS[@]}" "$ROOT/tests/c/test_basic.c" -o "$OUT/test_basic_static" \
	"$LIB/libmcphost.a" -lpthread -ldl -lm

cat >"$OUT/config.json" <<JSON
{
  "servers": {
    "ts": { "command": "$BIN/mcphost-testserver" },
    "ts2": { "command": "$BIN/mcphost-testserver" },
    "ev": { "command": "$NODE", "args": ["$EVERYTHING", "stdio"] }
  }
}
JSON
export MCPHOST_TEST_CONFIG="$OUT/config.json"
export MCPHOST_TEST_SOCKET="$OUT/daemon.sock"
export MCPHOST_TEST_TESTSERVER="$BIN/mcphost-testserver"
export MCPHOST_TEST_MCPHOST="$BIN/mcphost"
export MCPHOST_STATE_DIR="$OUT/state"

# The daemon of connected mode edits a copy of the config.
cp "$OUT/config.json" "$OUT/daemon-config.json"
"$BIN/mcphost" daemon --config "$OUT/daemon-config.json" --socket "$MCPHOST_TEST_SOCKET" \
	2>"$OUT/daemon.log" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do [[ -S "$MCPHOST_TEST_SOCKET" ]] && break; sleep 0.05; done
[[ -S "$MCPHOST_TEST_SOCKET" ]] || { cat "$OUT/daemon.log" >&2; echo "test-c: the daemon did not start" >&2; exit 1; }

run() { # mode, how ("" or valgrind), test (a path under $OUT)
	local mode="$1" how="$2" t="$3" log="$OUT/${3//\//.}.$1${2:+.$2}.log"
	local cmd=("$OUT/$t")
	if [[ "$how" == valgrind ]]; then
		cmd=(valgrind -q --error-exitcode=99 --leak-check=full --child-silent-after-fork=yes
			--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect
			--suppressions="$ROOT/tests/c/valgrind.supp" "$OUT/$t")
	fi
	if MCPHOST_TEST_MODE="$mode" timeout 300 "${cmd[@]}" >"$log" 2>&1; then
		printf '  ok    %-22s %-9s %s\n' "$t" "$mode" "$how"
	else
		local rc=$?
		printf '  FAIL  %-22s %-9s %s (exit %s)\n' "$t" "$mode" "$how" "$rc"
		sed 's/^/      | /' "$log" | tail -40
		FAILED=1
	fi
}

FAILED=0
for t in "${tests[@]}" test_basic_static; do
	for mode in embedded connected; do run "$mode" "" "$t"; done
done
if [[ "${MCPHOST_C_VALGRIND:-1}" == 0 ]]; then
	echo "test-c: valgrind SKIPPED (MCPHOST_C_VALGRIND=0)"
else
	command -v valgrind >/dev/null || { echo "test-c: valgrind is not installed" >&2; exit 1; }
	prefix=""
	[[ "${MCPHOST_C_RELEASE:-0}" == 1 ]] && prefix=release/
	# Two lanes at once: under valgrind the tests mostly wait (on servers,
	# timeouts), and an embedded test shares nothing with the daemon the
	# connected ones use. Each lane runs its tests one after another.
	lane() { # mode; `run` sets this lane's own FAILED (bash scopes dynamically)
		local FAILED=0
		for t in "${tests[@]}"; do run "$1" valgrind "$prefix$t"; done
		return "$FAILED"
	}
	lane embedded >"$OUT/valgrind-embedded.out" 2>&1 &
	embedded=$!
	lane connected || FAILED=1
	wait "$embedded" || FAILED=1
	cat "$OUT/valgrind-embedded.out"
fi
if [[ $FAILED != 0 ]]; then
	echo "test-c: FAILED (logs in $OUT)" >&2
	exit 1
fi
echo "test-c: all passed"
