#!/usr/bin/env bash
# The client under test for the official MCP conformance suite (both the
# pinned release and the pre-release): the suite runs `client.sh <serverUrl>`
# with MCP_CONFORMANCE_SCENARIO set, and this maps each scenario to
# `mcphost --direct conf=URL ...` commands, doing what the scenario's test
# server expects a client to do.
#
# From the suite (the pre-release; 0.1.16 sets only the scenario):
#   MCP_CONFORMANCE_SCENARIO          the scenario
#   MCP_CONFORMANCE_PROTOCOL_VERSION  the revision the scenario's server is
#                                     run at (2025-11-25 unless the scenario
#                                     or --spec-version says otherwise)
#   MCP_CONFORMANCE_CONTEXT           JSON for some scenarios (tool calls)
# From scripts/conformance.sh:
#   MCPHOST_BIN                  the mcphost binary (default: target/debug/mcphost)
#   MCPHOST_CONFORMANCE_LOG      mcphost's log filter on stderr (default: debug);
#                                the suite keeps stderr in its results dir
#   MCPHOST_CONFORMANCE_JSON     a Node to read MCP_CONFORMANCE_CONTEXT and
#                                mcphost's --json output with (default: node)
#   MCPHOST_CONFORMANCE_PIN      1: pin mcphost to MCP_CONFORMANCE_PROTOCOL_VERSION
#                                (--protocol-version) for every command
#
# By default mcphost is not pinned: it probes server/discover and falls back
# to initialize (the spec's backwards-compatibility rule), which is what a
# real user runs, and every scenario's server accepts such a client: the
# 2026-07-28 ones answer server/discover (request-metadata refuses the first
# request with -32022 listing 2026-07-28, which the retry then uses), the
# handshake ones answer it with an error or a result listing no version, and
# mcphost sends initialize. None needs a pin; scripts/conformance.sh runs
# the required scenarios pinned as well, so that each revision itself (e.g.
# 2025-06-18, which an unpinned mcphost never picks) goes over the wire.
#
# Run through scripts/conformance.sh, not by hand.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${MCPHOST_BIN:-$ROOT/target/debug/mcphost}"
JSON_NODE="${MCPHOST_CONFORMANCE_JSON:-node}"
SCENARIO="${MCP_CONFORMANCE_SCENARIO:?client.sh: MCP_CONFORMANCE_SCENARIO is not set (run through scripts/conformance.sh)}"
VERSION="${MCP_CONFORMANCE_PROTOCOL_VERSION:-}"
(($# >= 1)) || {
	echo "usage: MCP_CONFORMANCE_SCENARIO=NAME client.sh SERVER_URL" >&2
	exit 2
}
URL="${!#}" # the suite appends the server URL as the last argument

export RUST_LOG="${MCPHOST_CONFORMANCE_LOG:-debug}"

# Options before the command, for every mcphost run of this scenario.
OPTS=()

# One server, named `conf`, so catalog names do not depend on the URL.
# `mcphost ARGS` is the last command: exec, so that the suite's timeout kills
# mcphost itself (an orphaned mcphost would hold the test server open).
mcphost() {
	printf '+ mcphost --direct conf=%s %s\n' "$URL" "${OPTS[*]:+${OPTS[*]} }$*" >&2
	exec "$BIN" --direct "conf=$URL" "${OPTS[@]}" "$@"
}
# `step ARGS`: a command before the last one; its exit status is returned.
# A signal to this script is passed on to it.
CHILD=""
trap '[[ -n "$CHILD" ]] && kill "$CHILD" 2>/dev/null; exit 143' TERM INT HUP
step() {
	printf '+ mcphost --direct conf=%s %s\n' "$URL" "${OPTS[*]:+${OPTS[*]} }$*" >&2
	"$BIN" --direct "conf=$URL" "${OPTS[@]}" "$@" &
	CHILD=$!
	local rc=0
	wait "$CHILD" || rc=$?
	CHILD=""
	return "$rc"
}
# `json SCRIPT [ARGS]`: runs a Node snippet with stdin and the args.
json() {
	"$JSON_NODE" -e "$1" -- "${@:2}"
}
# The tool calls of MCP_CONFORMANCE_CONTEXT, one "NAME<TAB>ARGS-JSON" a line.
context_tool_calls() {
	json '
		const ctx = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}");
		for (const c of ctx.toolCalls || []) {
			console.log(`${c.name}\t${JSON.stringify(c.arguments ?? {})}`);
		}
	'
}
if [[ "${MCPHOST_CONFORMANCE_PIN:-0}" == 1 ]]; then
	[[ -n "$VERSION" ]] || {
		echo "client.sh: MCPHOST_CONFORMANCE_PIN=1 needs MCP_CONFORMANCE_PROTOCOL_VERSION (the pre-release sets it)" >&2
		exit 2
	}
	OPTS+=(--protocol-version "$VERSION")
fi

case "$SCENARIO" in
initialize)
	# The handshake (protocolVersion, clientInfo) is what is checked; listing
	# the catalog is the smallest command that makes one. The server answers
	# the server/discover probe with an empty result, which lists no version:
	# mcphost falls back to initialize.
	mcphost tools
	;;
tools_call)
	# `add_numbers` {a, b} must be called (the server records a, b and a+b).
	# At 2026-07-28 the server is the suite's stateless mock (server/discover,
	# _meta on every request); at the handshake revisions the TS SDK's.
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
request-metadata)
	# Every request is checked for MCP-Protocol-Version, and _meta with
	# protocolVersion, clientCapabilities and clientInfo; the first one
	# (our server/discover probe) is refused with -32022 listing 2026-07-28,
	# and the retry must use it. Elicitation and sampling are advertised so
	# that their capability checks run rather than being skipped.
	OPTS+=(--on-elicitation decline --on-sampling decline)
	mcphost tools
	;;
sep-2322-client-request-state)
	# Two tools answer input_required with an elicitation (one with
	# requestState, one without); the retry must echo the state exactly,
	# under a new id. The others: a plain tool (no inputResponses or
	# requestState may leak into it) and a result without resultType
	# (complete). The form has no required field, so accept-defaults
	# accepts it.
	OPTS+=(--on-elicitation accept-defaults)
	step call test_mrtr_echo_state '{}'
	step call test_mrtr_no_state '{}'
	step call test_mrtr_unrelated '{}'
	mcphost call test_mrtr_no_result_type '{}'
	;;
http-standard-headers)
	# Mcp-Method on every request, Mcp-Name on tools/call (a hyphenated
	# name too), resources/read (a percent-encoded URI and a query string)
	# and prompts/get.
	step tools
	step call test_headers '{}'
	step call my-hyphenated-tool '{}'
	step resources
	step read 'file:///path/to/file%20name.txt'
	step read 'https://example.com/resource?id=123'
	step prompts
	mcphost prompt test_prompt
	;;
http-custom-headers)
	# The context's tool calls (x-mcp-header parameters mirrored as
	# Mcp-Param-*, base64 where not header-safe, a null one omitted).
	mapfile -t calls < <(context_tool_calls)
	((${#calls[@]} > 0)) || {
		echo "client.sh: MCP_CONFORMANCE_CONTEXT has no toolCalls" >&2
		exit 2
	}
	last=$((${#calls[@]} - 1))
	for i in "${!calls[@]}"; do
		name="${calls[$i]%%$'\t'*}"
		args="${calls[$i]#*$'\t'}"
		if ((i < last)); then step call "$name" "$args"; else mcphost call "$name" "$args"; fi
	done
	;;
http-invalid-tool-headers)
	# One valid tool and eleven whose x-mcp-header annotations break the
	# rules. What a careless host would do: call every tool the server
	# lists. mcphost leaves the invalid ones out of its catalog, so those
	# calls must fail without reaching the server, and valid_tool must work.
	step tools
	for t in invalid_empty_header invalid_object_header invalid_array_header \
		invalid_null_header invalid_number_header invalid_duplicate_same_case invalid_duplicate_diff_case \
		invalid_space_in_name invalid_colon_in_name invalid_non_ascii_name \
		invalid_control_char_name; do
		if step call "$t" '{"value":"x","data":{},"items":["x"],"nil":null,"field1":"x","field2":"y"}'; then
			echo "client.sh: mcphost called $t, which has an invalid x-mcp-header" >&2
			exit 1
		fi
	done
	mcphost call valid_tool '{"region":"us-west1"}'
	;;
json-schema-ref-no-deref)
	# A tool's inputSchema has a network $ref (a canary URL on the test
	# server) beside a local one: listing the tool and printing its schema
	# must never fetch it. (The server has no tools/call.)
	mcphost --json tools
	;;
json-schema-2020-12-preservation)
	# The inputSchema mcphost shows for json_schema_2020_12_tool (`--json
	# tools`: the catalog's tool objects, relayed raw) is sent back through
	# json_schema_echo, and compared with what the server sent: every
	# 2020-12 keyword must survive.
	# Into a file, not $(…): step must run in this shell, where the signal
	# trap can pass a timeout on to mcphost.
	catalog="$(mktemp)"
	trap 'rm -f "$catalog"' EXIT
	step --json tools >"$catalog"
	schema="$(json '
		const input = require("fs").readFileSync(0, "utf8");
		const t = JSON.parse(input).find((t) => t.name === "conf__json_schema_2020_12_tool");
		if (!t || !t.inputSchema) {
			console.error("client.sh: no conf__json_schema_2020_12_tool with an inputSchema in: " + input);
			process.exit(1);
		}
		console.log(JSON.stringify({ schema: t.inputSchema }));
	' <"$catalog")"
	rm -f "$catalog" # exec runs no EXIT trap
	mcphost call json_schema_echo "$schema"
	;;
auth/*)
	# Sign in as a person would: mcphost discovers the authorization server
	# from the 401, registers, and hands the sign-in URL to MCPHOST_BROWSER,
	# here a script that follows the redirects (the suite's authorization
	# server approves at once) back to mcphost's loopback listener. Tokens
	# go to a store of this run only. Scenarios that give a client (the
	# pre-registered and machine ones) pass it as MCPHOST_OAUTH_CLIENT; the
	# workload identity one (auth/wif-jwt-bearer) its token as a file.
	export MCPHOST_BROWSER="$JSON_NODE $ROOT/tests/conformance/browser.js"
	MCPHOST_TOKEN_DIR="$(mktemp -d)"
	export MCPHOST_TOKEN_DIR MCPHOST_TOKEN_STORE=file
	# The URL the suite's CIMD scenario expects as client_id; mcphost uses it
	# only where the authorization server supports client ID metadata
	# documents.
	export MCPHOST_OAUTH_CLIENT_METADATA_URL="https://conformance-test.local/client-metadata.json"
	client="$(json '
		const ctx = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}");
		const c = {};
		for (const k of ["client_id", "client_secret", "private_key_pem", "signing_algorithm",
			"idp_token_endpoint", "idp_id_token", "idp_client_id"]) {
			if (ctx[k] !== undefined) c[k] = ctx[k];
		}
		if (ctx.private_key_pem) c.token_endpoint_auth_method = "private_key_jwt";
		if (process.env.MCP_CONFORMANCE_SCENARIO.startsWith("auth/client-credentials")) c.grant_type = "client_credentials";
		// Workload identity: the workload token itself, from a file as a
		// platform would mount it (0600, in the private directory of this run).
		if (ctx.valid_jwt) {
			const f = require("path").join(process.env.MCPHOST_TOKEN_DIR, "workload-token.jwt");
			require("fs").writeFileSync(f, ctx.valid_jwt, { mode: 0o600 });
			c.workload_token_file = f;
		}
		// The client is for this one server (issue 21: never for every server).
		if (Object.keys(c).length) { c.servers = ["conf"]; console.log(JSON.stringify(c)); }
	')"
	[[ -n "$client" ]] && export MCPHOST_OAUTH_CLIENT="$client"
	mcphost call test-tool '{}'
	;;
sep-2640-*)
	# The Skills extension (io.modelcontextprotocol/skills, SEP-2640) is not
	# built: mcphost never sends skills/list. Connecting and listing is what
	# it does with such a server today (expected failures).
	mcphost tools
	;;
*)
	echo "client.sh: no mapping for scenario '$SCENARIO'; add one" >&2
	exit 2
	;;
esac
