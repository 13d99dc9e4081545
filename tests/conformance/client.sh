#!/usr/bin/env bash
# The client under test for the official MCP conformance suite: the suite
# runs `client.sh <serverUrl>` with MCP_CONFORMANCE_SCENARIO set, and this
# maps each scenario to `mcphost --direct URL ...` commands, doing what the
# scenario's test server expects a client to do.
#
#   MCPHOST_BIN                  the mcphost binary (default: target/debug/mcphost)
#   MCPHOST_CONFORMANCE_LOG      mcphost's log filter on stderr (default: debug);
#                                the suite keeps stderr in its results dir
#
# Run through scripts/conformance.sh, not by hand.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${MCPHOST_BIN:-$ROOT/target/debug/mcphost}"
SCENARIO="${MCP_CONFORMANCE_SCENARIO:?client.sh: MCP_CONFORMANCE_SCENARIO is not set (run through scripts/conformance.sh)}"
(($# >= 1)) || {
	echo "usage: MCP_CONFORMANCE_SCENARIO=NAME client.sh SERVER_URL" >&2
	exit 2
}
URL="${!#}" # the suite appends the server URL as the last argument

export RUST_LOG="${MCPHOST_CONFORMANCE_LOG:-debug}"

# One server, named `conf`, so catalog names do not depend on the URL.
# exec: the suite's timeout kills the process it started, which must then be
# mcphost itself (an orphaned mcphost would hold the test server open).
mcphost() {
	printf '+ mcphost --direct conf=%s %s\n' "$URL" "$*" >&2
	exec "$BIN" --direct "conf=$URL" "$@"
}

case "$SCENARIO" in
initialize)
	# The handshake (protocolVersion, clientInfo) is what is checked; listing
	# the catalog is the smallest command that makes one.
	mcphost tools
	;;
tools_call)
	# `add_numbers` {a, b} must be called (the server records a, b and a+b).
	mcphost call add_numbers '{"a":5,"b":3}'
	;;
sse-retry)
	# The POST stream of this call closes after a priming event with
	# `retry: 500`; the answer comes on the GET that resumes it, which must
	# carry Last-Event-ID and start 450-700 ms after the close.
	mcphost call test_reconnection '{}'
	;;
elicitation-sep1034-client-defaults)
	# The tool asks for a form whose fields all have defaults (SEP-1034);
	# the answer must accept with every default filled in.
	mcphost --on-elicitation accept-defaults call test_client_elicitation_defaults '{}'
	;;
auth/*)
	# What a well-behaved client does: connect, list, call `test-tool`.
	# mcphost has no OAuth yet, so these stop at the 401 (expected failures,
	# tests/conformance/expected-failures.yml).
	mcphost call test-tool '{}'
	;;
*)
	echo "client.sh: no mapping for scenario '$SCENARIO'; add one" >&2
	exit 2
	;;
esac
