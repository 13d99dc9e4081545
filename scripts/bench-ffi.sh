#!/usr/bin/env bash
# Round-trip cost of one tools/call (mcphost-testserver's echo) through the
# C library and the Python binding, embedded and connected, beside the Rust
# references in the same run: the in-process engine (`engine` row of
# benches/paths.rs: an in-process Session) and a ServerClient over a real
# daemon's socket (`daemon process` row). Release builds; medians.
#   scripts/bench-ffi.sh          (MCPHOST_BENCH_CALLS, default 2000;
#                                 MCPHOST_BENCH_ROUNDS, default 3)
# Everything runs pinned to CPU 0 (taskset), the run docs/benchmarks.md uses
# for ratios on this guest; MCPHOST_BENCH_PIN=0 leaves placement free.
set -euo pipefail
if [[ "${MCPHOST_BENCH_PIN:-1}" != 0 && -z "${MCPHOST_BENCH_PINNED:-}" ]] && command -v taskset >/dev/null; then
	MCPHOST_BENCH_PINNED=1 exec taskset -c 0 "$0" "$@"
fi
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

# The machine is shared: each round runs the references, the C paths and
# the Python paths back to back, and a ratio is taken within its round; the
# table shows medians over the rounds.
ROUNDS="${MCPHOST_BENCH_ROUNDS:-3}"
row() { awk -F'|' -v l="$2" '$2 ~ "^ *"l" *$" && $3+0 == 1 {gsub(/ /, "", $5); print $5}' "$1"; }
: >"$OUT/rounds.txt"
for r in $(seq 1 "$ROUNDS"); do
	echo "== round $r/$ROUNDS"
	MCPHOST_BENCH_ONLY="engine,daemon process" MCPHOST_BENCH_ROUNDS=1 cargo bench -q --bench paths 2>/dev/null \
		>"$OUT/paths.$r.md"
	engine="$(row "$OUT/paths.$r.md" engine)"
	socket="$(row "$OUT/paths.$r.md" 'daemon process')"
	echo "rust-engine $engine" | tee -a "$OUT/rounds.txt"
	echo "rust-daemon-socket $socket" | tee -a "$OUT/rounds.txt"
	"$OUT/bench_roundtrip" >"$OUT/c.$r.txt"
	if [[ -f "$ROOT/bindings/python/bench.py" ]]; then
		MCPHOST_LIBRARY="$REL/libmcphost.so" PYTHONPATH="$ROOT/bindings/python" \
			python3 "$ROOT/bindings/python/bench.py" | grep -v '^#' >>"$OUT/c.$r.txt"
	fi
	while read -r label p50 _; do
		case "$label" in
		*embedded) ref="$engine" ;;
		*connected) ref="$socket" ;;
		*) continue ;;
		esac
		awk -v l="$label" -v a="$p50" -v b="$ref" 'BEGIN { printf "%s %s %.3f\n", l, a, a / b }' |
			tee -a "$OUT/rounds.txt"
	done <"$OUT/c.$r.txt"
done

echo
echo "Medians of $ROUNDS rounds, $CALLS sequential calls each (p50 per round):"
echo
echo "| path | p50 µs | reference | ratio to it (per round, median) |"
echo "|---|---:|---|---:|"
med() { sort -g | awk '{v[NR] = $1} END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for label in rust-engine rust-daemon-socket $(awk '$3 != "" {print $1}' "$OUT/rounds.txt" | awk '!seen[$0]++'); do
	p50="$(awk -v l="$label" '$1 == l {print $2}' "$OUT/rounds.txt" | med)"
	case "$label" in
	rust-*) echo "| $label | $p50 | (reference) | — |" ;;
	*embedded) echo "| $label | $p50 | rust-engine | $(awk -v l="$label" '$1 == l {print $3}' "$OUT/rounds.txt" | med)× |" ;;
	*connected) echo "| $label | $p50 | rust-daemon-socket | $(awk -v l="$label" '$1 == l {print $3}' "$OUT/rounds.txt" | med)× |" ;;
	esac
done
