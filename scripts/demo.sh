#!/usr/bin/env bash
# The main job on a built-in default, with nothing to install: build mcphost,
# start the daemon on a private socket with a config of two bundled test
# servers, use it through the CLI, and stop it (no process is left behind).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
cargo build --release --bins -q
BIN="$ROOT/target/release"
DIR="$(mktemp -d)"
trap 'kill -TERM "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null; rm -rf "$DIR"' EXIT
cat > "$DIR/config.json" <<JSON
{
  // Two copies of the bundled scriptable test server.
  "loginShellPath": false,
  "mcpServers": {
    "alpha": { "command": "$BIN/mcphost-testserver" },
    "beta":  { "command": "$BIN/mcphost-testserver", "args": ["--tools", "2"] },
  },
}
JSON
export MCPHOST_SOCKET="$DIR/mcphost.sock" MCPHOST_CONFIG="$DIR/config.json"
"$BIN/mcphost" daemon 2> "$DIR/daemon.log" &
DAEMON=$!
for _ in $(seq 100); do
	"$BIN/mcphost" status > /dev/null 2>&1 && break
	sleep 0.1
done
run() { printf '\n$ mcphost %s\n' "$*"; "$BIN/mcphost" "$@"; }
run status
sleep 0.5
run servers
run tools --server beta
run call alpha__add '{"a":2,"b":40}'
run --json call beta__lossless
printf '\n(daemon log: %s lines; stopping it)\n' "$(wc -l < "$DIR/daemon.log")"
