#!/usr/bin/env bash
# The main job on a built-in default, with nothing to install: build mcphost,
# start the daemon on a private socket with a config of two bundled test
# servers, use it through the CLI, and stop it (no process is left behind).
#
#   MCPHOST_DEMO_BIN  directory with built mcphost and mcphost-testserver
#                     (default: cargo build --release, target/release);
#                     scripts/test.sh passes its debug build
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -n "${MCPHOST_DEMO_BIN:-}" ]]; then
	BIN="$MCPHOST_DEMO_BIN"
else
	cargo build --release --bins -q
	BIN="$ROOT/target/release"
fi
DIR="$(mktemp -d)"
DAEMON=""
trap '[[ -n "$DAEMON" ]] && kill -TERM "$DAEMON" 2>/dev/null; wait 2>/dev/null; rm -rf "$DIR"' EXIT
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
# The demo runs and stops its own daemon: no command may start another.
export MCPHOST_NO_AUTOSTART=1
"$BIN/mcphost" daemon 2> "$DIR/daemon.log" &
DAEMON=$!

# Polls until the command succeeds; fails the demo after 30 s or when the
# daemon is gone.
wait_until() {
	local what="$1"
	shift
	local deadline=$((SECONDS + 30))
	until "$@"; do
		if ! kill -0 "$DAEMON" 2>/dev/null || ((SECONDS >= deadline)); then
			printf 'demo: gave up waiting for %s; daemon log:\n' "$what" >&2
			cat "$DIR/daemon.log" >&2
			exit 1
		fi
		sleep 0.1
	done
}
answers() { "$BIN/mcphost" status > /dev/null 2>&1; }
# Both servers ready with their tools listed (one object per server).
both_listed() {
	local out ready listed
	out="$("$BIN/mcphost" --json servers)" || return 1
	ready="$(grep -o '"state":"ready"' <<<"$out" | wc -l)"
	listed="$(grep -o '"tools":[1-9]' <<<"$out" | wc -l)"
	((ready == 2 && listed == 2))
}
wait_until "the daemon to answer" answers
run() { printf '\n$ mcphost %s\n' "$*"; "$BIN/mcphost" "$@"; }
run status
wait_until "both servers to be ready" both_listed
run servers
run tools --server beta
run call alpha__add '{"a":2,"b":40}'
run --json call beta__lossless
printf '\n(daemon log: %s lines; stopping it)\n' "$(wc -l < "$DIR/daemon.log")"
kill -TERM "$DAEMON"
wait "$DAEMON"
DAEMON=""
