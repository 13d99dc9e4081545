#!/usr/bin/env bash
# Runs the official MCP client conformance suite (@modelcontextprotocol/
# conformance, pinned in tests/conformance) against mcphost, one scenario at
# a time, and prints a scenario -> result table.
#
#   scripts/conformance.sh                 the required scenarios + every auth/* one
#   scripts/conformance.sh SCENARIO...     just these
#
# The required scenarios (initialize, tools_call, sse-retry,
# elicitation-sep1034-client-defaults) must pass: every check, a clean client
# exit, no timeout. Scenarios listed in tests/conformance/expected-failures.yml
# (the auth ones, until OAuth exists) run with the suite's --expected-failures
# baseline: failing is fine, passing is an error ("stale baseline": remove the
# entry). Serial on purpose: sse-retry measures a 450-700 ms reconnect window.
#
# Each scenario's test server listens on a port the OS picks (listen(0)), so
# runs never collide; --direct needs no daemon socket.
#
#   MCPHOST_BIN                     mcphost binary (default: cargo build, target/debug/mcphost)
#   MCPHOST_CONFORMANCE_NODE        Node >= 22 to run the suite (default: the pinned one)
#   MCPHOST_CONFORMANCE_TIMEOUT_MS  per-scenario client timeout (default 30000)
#   MCPHOST_CONFORMANCE_RESULTS     results dir (default target/conformance; wiped per run)
# Needs scripts/setup-conformance.sh to have run (scripts/test.sh does).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONF="$ROOT/tests/conformance"
SUITE="$CONF/node_modules/@modelcontextprotocol/conformance/dist/index.js"
BASELINE="$CONF/expected-failures.yml"
ADAPTER="$CONF/client.sh"
RESULTS="${MCPHOST_CONFORMANCE_RESULTS:-$ROOT/target/conformance}"
TIMEOUT_MS="${MCPHOST_CONFORMANCE_TIMEOUT_MS:-30000}"
REQUIRED=(initialize tools_call sse-retry elicitation-sep1034-client-defaults)

die() {
	printf '\nconformance: ERROR: %s\n\n' "$*" >&2
	exit 1
}

[[ -f "$SUITE" ]] || die "the conformance suite is not installed; run scripts/setup-conformance.sh"
# shellcheck source=scripts/conformance-node.sh
source "$ROOT/scripts/conformance-node.sh"
NODE="$(conformance_node "$CONF")" || die "see above."

if [[ -z "${MCPHOST_BIN:-}" ]]; then
	(cd "$ROOT" && cargo build --quiet --bin mcphost) || die "cargo build --bin mcphost failed"
	MCPHOST_BIN="$ROOT/target/debug/mcphost"
fi
[[ -x "$MCPHOST_BIN" ]] || die "MCPHOST_BIN=$MCPHOST_BIN is not an executable"
export MCPHOST_BIN

# The baseline's `client:` entries (a flat YAML list; checked by the suite too).
mapfile -t EXPECTED < <(sed -n 's/^[[:space:]]*-[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$BASELINE")
expected() {
	local e
	for e in "${EXPECTED[@]}"; do [[ "$e" == "$1" ]] && return 0; done
	return 1
}

mapfile -t KNOWN < <("$NODE" "$SUITE" list --client | sed -n 's/^  - \([^ ]*\).*/\1/p')
((${#KNOWN[@]} > 0)) || die "the suite lists no client scenarios"
# Every baseline entry must be a scenario the suite knows (a typo would
# otherwise hide forever).
for e in "${EXPECTED[@]}"; do
	printf '%s\n' "${KNOWN[@]}" | grep -qxF -- "$e" || die "$BASELINE lists '$e', which the suite does not have"
done
if (($# > 0)); then
	SCENARIOS=("$@")
else
	AUTH=()
	for s in "${KNOWN[@]}"; do [[ "$s" == auth/* ]] && AUTH+=("$s"); done
	((${#AUTH[@]} > 0)) || die "the suite lists no auth scenarios"
	SCENARIOS=("${REQUIRED[@]}" "${AUTH[@]}")
	# What runs, plus what is expected to fail, must be exactly what the
	# suite has: a scenario it adds is classified here, never skipped.
	want="$(printf '%s\n' "${KNOWN[@]}" | sort -u)"
	have="$(printf '%s\n' "${SCENARIOS[@]}" "${EXPECTED[@]}" | sort -u)"
	if [[ "$want" != "$have" ]]; then
		die "the scenarios run ($(basename "$0")'s REQUIRED and auth/*) plus $BASELINE differ from the suite's \`list --client\`:
$(diff <(printf '%s\n' "$want") <(printf '%s\n' "$have") | sed -n 's/^< /  not run: /p; s/^> /  not in the suite: /p')
add a new scenario to REQUIRED (it must pass) or to the baseline (expected to fail)"
	fi
fi

rm -rf "$RESULTS"
mkdir -p "$RESULTS"
# The suite splits --command on spaces and runs it through a shell, so a
# path with spaces must reach that shell escaped.
ADAPTER_CMD="$(printf '%q' "$ADAPTER")"

# "OK FAILED WARNINGS": counts of the SUCCESS/FAILURE/WARNING checks in a
# results dir's checks.json ("0 0 0" when there is none).
count_checks() {
	local file
	file="$(find "$1" -name checks.json -print -quit)"
	[[ -n "$file" ]] || {
		echo "0 0 0"
		return
	}
	"$NODE" -e '
		const checks = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		const n = (s) => checks.filter((c) => c.status === s).length;
		console.log(`${n("SUCCESS")} ${n("FAILURE")} ${n("WARNING")}`);
	' "$file"
}

ROWS=()
BAD=0
i=0
for scenario in "${SCENARIOS[@]}"; do
	i=$((i + 1))
	slug="$(printf '%02d-%s' "$i" "${scenario//\//_}")"
	out="$RESULTS/$slug"
	log="$out.log"
	args=(client --command "$ADAPTER_CMD" --scenario "$scenario" --timeout "$TIMEOUT_MS" -o "$out")
	xfail=0
	if expected "$scenario"; then
		xfail=1
		args+=(--expected-failures "$BASELINE")
	fi
	printf '==== conformance %s (%d/%d)%s\n' "$scenario" "$i" "${#SCENARIOS[@]}" \
		"$( ((xfail)) && echo ' [expected to fail]')"
	start=$(date +%s%N)
	set +e
	"$NODE" "$SUITE" "${args[@]}" >"$log" 2>&1
	rc=$?
	set -e
	ms=$((($(date +%s%N) - start) / 1000000))
	read -r ok failed warned < <(count_checks "$out")
	checks="$ok ok, $failed failed, $warned warn"
	if ((xfail)); then
		if ((rc == 0)); then
			result="expected failure"
		elif grep -q 'Stale baseline entries' "$log"; then
			result="UNEXPECTED PASS"
		else
			result="ERROR (exit $rc)"
		fi
	else
		# A scenario whose server never saw the client records no check and
		# "passes"; a pass needs at least one successful check.
		if ((rc != 0)); then
			result="FAIL (exit $rc)"
		elif ((ok == 0)); then
			result="FAIL (no checks)"
		else
			result="pass"
		fi
	fi
	case "$result" in
	pass | "expected failure") ;;
	*)
		BAD=$((BAD + 1))
		printf -- '---- %s: %s; the suite said:\n' "$scenario" "$result"
		sed 's/^/    /' "$log" | tail -n 60
		;;
	esac
	ROWS+=("$(printf '%-45s %-18s %-30s %6s ms' "$scenario" "$result" "$checks" "$ms")")
done

printf '\n==== conformance results (@modelcontextprotocol/conformance %s, node %s)\n' \
	"$("$NODE" "$SUITE" --version)" "$("$NODE" --version)"
printf '%-45s %-18s %-30s %9s\n' SCENARIO RESULT CHECKS TIME
for row in "${ROWS[@]}"; do printf '%s\n' "$row"; done
printf 'logs and checks.json: %s\n' "$RESULTS"
if ((BAD > 0)); then
	printf 'conformance: %d scenario(s) did not go as expected\n' "$BAD"
	exit 1
fi
printf 'conformance: all %d scenarios as expected\n' "${#SCENARIOS[@]}"
