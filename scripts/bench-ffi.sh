#!/usr/bin/env bash
# Round-trip cost of one tools/call (mcphost-testserver's echo) through the
# C library and the Python binding, embedded and connected, beside the Rust
# references in the same run: the in-process engine (`engine` row of
# benches/paths.rs: an in-process Session) and a ServerClient over a real
# daemon's socket (`daemon process` row). Release builds; medians.
#   scripts/bench-ffi.sh          (MCPHOST_BENCH_CALLS, default 2000)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CALLS="${MCPHOST_BENCH_CALLS:-2000}"
OUT="$ROOT/target/bench-ffi"
rm -rf "$OUT"
mkdir -p "$OUT"

cargo build -q --release -p mcphost --bin mcphost --bin mcphost-testserver
cargo build -q --release -p mcphost-c
REL="$ROOT/target/release"
cc -std=c11 -D_GNU_SOURCE -O2 -I"$ROOT/include" "$ROOT/tests/c/bench_roundtrip.c" -o "$OUT/bench_roundtrip" \
	-L"$REL" -lmcphost -lpthread -Wl,-rpath,"$REL"

cat >"$OUT/config.json" <<JSON
{ "servers": { "ts": { "command": "$REL/mcphost-testserver" } } }
JSON
export MCPHOST_TEST_CONFIG="$OUT/config.json" MCPHOST_TEST_SOCKET="$OUT/daemon.sock"
export MCPHOST_STATE_DIR="$OUT/state" MCPHOST_BENCH_CALLS="$CALLS"
"$REL/mcphost" daemon --config "$OUT/config.json" --socket "$MCPHOST_TEST_SOCKET" 2>"$OUT/daemon.log" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 1 200); do [[ -S "$MCPHOST_TEST_SOCKET" ]] && break; sleep 0.05; done

echo "== Rust references (cargo bench --bench paths, rows engine and daemon process)"
MCPHOST_BENCH_ONLY="engine,daemon process" MCPHOST_BENCH_ROUNDS=3 cargo bench -q --bench paths 2>/dev/null |
	tee "$OUT/paths.md"
row() { awk -F'|' -v l="$1" '$2 ~ "^ *"l" *$" && $3+0 == 1 {gsub(/ /, "", $5); print $5}' "$OUT/paths.md"; }
ENGINE="$(row engine)"
SOCKET="$(row 'daemon process')"

echo "== C (tests/c/bench_roundtrip.c)"
"$OUT/bench_roundtrip" | tee "$OUT/c.txt"
PY_LINES=""
if [[ -f "$ROOT/bindings/python/bench.py" ]]; then
	echo "== Python (bindings/python/bench.py)"
	MCPHOST_LIBRARY="$REL/libmcphost.so" PYTHONPATH="$ROOT/bindings/python" \
		python3 "$ROOT/bindings/python/bench.py" | tee "$OUT/py.txt"
	PY_LINES="$(cat "$OUT/py.txt")"
fi

echo
echo "| path | p50 µs | reference | reference p50 µs | ratio |"
echo "|---|---:|---|---:|---:|"
{ cat "$OUT/c.txt"; printf '%s\n' "$PY_LINES"; } | while read -r label p50 _rest; do
	[[ -z "$label" ]] && continue
	case "$label" in
	*embedded) ref=engine refv="$ENGINE" ;;
	*connected) ref="daemon socket (ServerClient)" refv="$SOCKET" ;;
	*) continue ;;
	esac
	ratio="$(awk -v a="$p50" -v b="$refv" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "—" }')"
	echo "| $label | $p50 | $ref | $refv | $ratio |"
done
