#!/usr/bin/env bash
# Runs the official MCP client conformance suite (@modelcontextprotocol/
# conformance, pinned in tests/conformance) against mcphost, one scenario at
# a time, and prints a scenario -> result table. Two suites:
#   stable  the release, 0.1.16: each scenario once
#   next    the pre-release, 0.2.0-alpha.12 (npm alias conformance-next),
#           with the 2026-07-28 scenarios: each scenario at every revision
#           `list --client` gives it (`--spec-version REV`; the [extension]
#           ones once, at the suite's default), mcphost unpinned; the
#           REQUIRED ones once more with mcphost pinned to that revision
#           (MCPHOST_CONFORMANCE_PIN=1 for tests/conformance/client.sh)
#
#   scripts/conformance.sh                   both suites, every scenario
#   scripts/conformance.sh SCENARIO[@REV]... just these (@REV: next only)
#   MCPHOST_CONFORMANCE_SUITE=stable|next|all (default all) picks the suites
#
# Each suite has its baseline of expected failures (tests/conformance/
# expected-failures.yml, expected-failures-next.yml; the suite's own format).
# A scenario not in it must pass at every revision: every check, no warning,
# a clean client exit, no timeout, and at least one successful check. One
# in it must not pass ("UNEXPECTED PASS": remove the entry). What runs must
# be exactly what the suite lists: a scenario it adds that is neither in
# REQUIRED below, nor auth/* or an [extension] (those run, and pass unless
# the baseline lists them), nor in the baseline, stops the run, rather than
# being skipped. Serial on purpose: sse-retry measures a 450-700 ms
# reconnect window.
#
# Each scenario's test server listens on a port the OS picks (listen(0)), so
# runs never collide; --direct needs no daemon socket.
#
#   MCPHOST_BIN                     mcphost binary (default: cargo build, target/debug/mcphost)
#   MCPHOST_CONFORMANCE_NODE        Node >= 22 to run the suite (default: the pinned one)
#   MCPHOST_CONFORMANCE_TIMEOUT_MS  per-scenario client timeout (default 30000)
#   MCPHOST_CONFORMANCE_RESULTS     results dir of the stable suite (default
#                                   target/conformance; next: the same with
#                                   -next appended; wiped per run)
# Needs scripts/setup-conformance.sh to have run (scripts/test.sh does).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONF="$ROOT/tests/conformance"
ADAPTER="$CONF/client.sh"
RESULTS_BASE="${MCPHOST_CONFORMANCE_RESULTS:-$ROOT/target/conformance}"
TIMEOUT_MS="${MCPHOST_CONFORMANCE_TIMEOUT_MS:-30000}"
SELECT="${MCPHOST_CONFORMANCE_SUITE:-all}"

# The non-auth, non-extension scenarios, which must pass.
REQUIRED_stable=(initialize tools_call sse-retry elicitation-sep1034-client-defaults)
REQUIRED_next=(
	initialize tools_call elicitation-sep1034-client-defaults sse-retry
	request-metadata sep-2322-client-request-state
	http-standard-headers http-custom-headers http-invalid-tool-headers
	json-schema-ref-no-deref json-schema-2020-12-preservation
)

die() {
	printf '\nconformance: ERROR: %s\n\n' "$*" >&2
	exit 1
}

case "$SELECT" in
all) SUITES=(stable next) ;;
stable | next) SUITES=("$SELECT") ;;
*) die "MCPHOST_CONFORMANCE_SUITE=$SELECT: use stable, next or all" ;;
esac

suite_js() {
	case "$1" in
	stable) echo "$CONF/node_modules/@modelcontextprotocol/conformance/dist/index.js" ;;
	next) echo "$CONF/node_modules/conformance-next/dist/index.js" ;;
	esac
}
suite_baseline() {
	case "$1" in
	stable) echo "$CONF/expected-failures.yml" ;;
	next) echo "$CONF/expected-failures-next.yml" ;;
	esac
}
suite_results() {
	case "$1" in
	stable) echo "$RESULTS_BASE" ;;
	next) echo "$RESULTS_BASE-next" ;;
	esac
}

for s in "${SUITES[@]}"; do
	[[ -f "$(suite_js "$s")" ]] || die "the conformance suite ($s) is not installed; run scripts/setup-conformance.sh"
	[[ -f "$(suite_baseline "$s")" ]] || die "missing $(suite_baseline "$s")"
done
# shellcheck source=scripts/conformance-node.sh
source "$ROOT/scripts/conformance-node.sh"
NODE="$(conformance_node "$CONF")" || die "see above."
# The adapter reads JSON (the suite's context, mcphost's --json) with it.
export MCPHOST_CONFORMANCE_JSON="$NODE"

if [[ -z "${MCPHOST_BIN:-}" ]]; then
	(cd "$ROOT" && cargo build --quiet --bin mcphost) || die "cargo build --bin mcphost failed"
	MCPHOST_BIN="$ROOT/target/debug/mcphost"
fi
[[ -x "$MCPHOST_BIN" ]] || die "MCPHOST_BIN=$MCPHOST_BIN is not an executable"
export MCPHOST_BIN

# The suite splits --command on spaces and runs it through a shell, so a
# path with spaces must reach that shell escaped.
ADAPTER_CMD="$(printf '%q' "$ADAPTER")"

# "OK FAILED WARNINGS SKIPPED": counts of the checks in a results dir's
# checks.json ("" when there is none).
count_checks() {
	local file
	file="$(find "$1" -name checks.json -print -quit 2>/dev/null)"
	[[ -n "$file" ]] || return 0
	"$NODE" -e '
		const checks = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
		const n = (s) => checks.filter((c) => c.status === s).length;
		console.log(`${n("SUCCESS")} ${n("FAILURE")} ${n("WARNING")} ${n("SKIPPED")}`);
	' "$file"
}

in_list() {
	local x="$1" e
	shift
	for e in "$@"; do [[ "$e" == "$x" ]] && return 0; done
	return 1
}

ROWS=()
BAD=0
TOTAL=0

# run_suite SUITE [SELECTOR...]
run_suite() {
	local suite="$1"
	shift
	local js baseline results
	js="$(suite_js "$suite")"
	baseline="$(suite_baseline "$suite")"
	results="$(suite_results "$suite")"
	local -n required="REQUIRED_$suite"

	# The baseline's `client:` entries (a flat YAML list, as the suite's
	# --expected-failures reads it).
	local expected=()
	mapfile -t expected < <(sed -n 's/^[[:space:]]*-[[:space:]]*\([^#[:space:]]*\).*/\1/p' "$baseline")

	# "NAME REV,REV" per scenario of `list --client`.
	local listing=() known=() line name
	declare -A revs=()
	mapfile -t listing < <("$NODE" "$js" list --client | sed -n 's/^  - \([^ ]*\)\( \[\(.*\)\]\)\{0,1\}$/\1 \3/p')
	((${#listing[@]} > 0)) || die "$suite: the suite lists no client scenarios"
	for line in "${listing[@]}"; do
		name="${line%% *}"
		known+=("$name")
		revs[$name]="${line#* }"
	done

	local e
	for e in "${expected[@]}"; do
		in_list "$e" "${known[@]}" || die "$baseline lists '$e', which the $suite suite does not have"
		in_list "$e" "${required[@]}" && die "'$e' is both REQUIRED (scripts/conformance.sh) and in $baseline"
	done
	for e in "${required[@]}"; do
		in_list "$e" "${known[@]}" || die "REQUIRED_$suite has '$e', which the $suite suite does not have"
	done

	# Runs: "SCENARIO REV PIN" (REV "-": the suite's default; PIN 1: mcphost
	# pinned to REV). In the pre-release, each scenario runs at every
	# revision it lists, unpinned (mcphost negotiates, as users run it), and
	# a REQUIRED one also pinned to that revision (--protocol-version): a
	# handshake scenario's server accepts any handshake revision, so
	# unpinned mcphost speaks 2025-11-25 even at 2025-06-18, and only the
	# pin puts 2025-06-18 itself on the wire.
	local runs=() sel scen rev r
	add_runs() { # SCENARIO [REV]
		local s="$1" want="${2:-}" v
		local vs=(-)
		if [[ -n "$want" ]]; then
			vs=("$want")
		elif [[ "$suite" == next && "${revs[$s]}" != extension ]]; then
			read -ra vs <<<"${revs[$s]//,/ }"
		fi
		for v in "${vs[@]}"; do runs+=("$s $v 0"); done
		if [[ "$suite" == next ]] && in_list "$s" "${required[@]}"; then
			for v in "${vs[@]}"; do runs+=("$s $v 1"); done
		fi
	}
	if (($# > 0)); then
		for sel in "$@"; do
			scen="${sel%@*}"
			rev=""
			[[ "$sel" == *@* ]] && rev="${sel##*@}"
			in_list "$scen" "${known[@]}" || continue
			[[ -n "$rev" && "$suite" == stable ]] && continue
			add_runs "$scen" "$rev"
		done
		((${#runs[@]} > 0)) || return 0
	else
		# What runs, plus what is expected to fail, must be exactly what the
		# suite has: a scenario it adds is classified, never skipped.
		local picked=()
		for scen in "${known[@]}"; do
			if in_list "$scen" "${required[@]}" || in_list "$scen" "${expected[@]}" ||
				[[ "$scen" == auth/* || "${revs[$scen]}" == extension ]]; then
				picked+=("$scen")
			fi
		done
		if ((${#picked[@]} != ${#known[@]})); then
			die "$suite: scenarios the suite lists that are neither REQUIRED_$suite (scripts/conformance.sh), auth/*, an [extension], nor in $baseline:
$(printf '%s\n' "${known[@]}" | grep -vxF -f <(printf '%s\n' "${picked[@]}") | sed 's/^/  /')
add each to REQUIRED_$suite (it must pass) or to the baseline (expected to fail)"
		fi
		for scen in "${picked[@]}"; do add_runs "$scen"; done
	fi

	rm -rf "$results"
	mkdir -p "$results"
	local version i=0 slug out log args xfail start rc ms counts ok failed warned skipped result label pin shown
	version="$("$NODE" "$js" --version)"
	for r in "${runs[@]}"; do
		i=$((i + 1))
		read -r scen rev pin <<<"$r"
		[[ "$rev" == - ]] && rev=""
		shown="${rev:-default}"
		slug="$(printf '%02d-%s%s' "$i" "${scen//\//_}" "${rev:+-$rev}")"
		if ((pin)); then
			shown+=" pinned"
			slug+="-pinned"
		fi
		label="$scen @ $shown"
		out="$results/$slug"
		log="$out.log"
		args=(client --command "$ADAPTER_CMD" --scenario "$scen" --timeout "$TIMEOUT_MS" -o "$out")
		[[ -n "$rev" ]] && args+=(--spec-version "$rev")
		xfail=0
		in_list "$scen" "${expected[@]}" && xfail=1
		printf '==== conformance %s: %s (%d/%d)%s\n' "$suite" "$label" "$i" "${#runs[@]}" \
			"$( ((xfail)) && echo ' [expected to fail]')"
		start=$(date +%s%N)
		set +e
		MCPHOST_CONFORMANCE_PIN="$pin" "$NODE" "$js" "${args[@]}" >"$log" 2>&1
		rc=$?
		set -e
		ms=$((($(date +%s%N) - start) / 1000000))
		counts="$(count_checks "$out")"
		if [[ -z "$counts" ]]; then
			# No checks.json: the suite did not run the scenario (a skip at
			# that revision, a crash), which says nothing either way.
			result="ERROR (no checks.json, exit $rc)"
			ok=0 failed=0 warned=0 skipped=0
		else
			read -r ok failed warned skipped <<<"$counts"
			# A scenario whose server never saw the client records no
			# check and "passes"; a pass needs a successful check.
			if ((rc == 0 && ok > 0)); then
				result="$( ((xfail)) && echo "UNEXPECTED PASS" || echo pass)"
			elif ((xfail)); then
				result="expected failure"
			elif ((rc != 0)); then
				result="FAIL (exit $rc)"
			else
				result="FAIL (no checks)"
			fi
		fi
		case "$result" in
		pass | "expected failure") ;;
		*)
			BAD=$((BAD + 1))
			printf -- '---- %s %s: %s; the suite said:\n' "$suite" "$label" "$result"
			sed 's/\x1b\[[0-9;]*m//g; s/^/    /' "$log" | tail -n 60
			;;
		esac
		ROWS+=("$(printf '%-7s %-45s %-18s %-18s %-32s %6s ms' "$suite" "$scen" "$shown" "$result" \
			"$ok ok, $failed failed, $warned warn, $skipped skip" "$ms")")
		TOTAL=$((TOTAL + 1))
	done
	printf '==== %s: @modelcontextprotocol/conformance %s, logs and checks.json in %s\n' "$suite" "$version" "$results"
}

# Every selector must name a scenario of a selected suite (a typo would
# otherwise run nothing and pass).
for sel in "$@"; do
	found=0
	for s in "${SUITES[@]}"; do
		[[ "$sel" == *@* && "$s" == stable ]] && continue
		names="$("$NODE" "$(suite_js "$s")" list --client | sed -n 's/^  - \([^ ]*\).*/\1/p')"
		grep -qxF -- "${sel%@*}" <<<"$names" && found=1
	done
	((found)) || die "no selected suite (${SUITES[*]}) has the scenario '$sel'"
done

for s in "${SUITES[@]}"; do run_suite "$s" "$@"; done

printf '\n==== conformance results (node %s)\n' "$("$NODE" --version)"
printf '%-7s %-45s %-18s %-18s %-32s %9s\n' SUITE SCENARIO REVISION RESULT CHECKS TIME
for row in "${ROWS[@]}"; do printf '%s\n' "$row"; done
if ((BAD > 0)); then
	printf 'conformance: %d of %d run(s) did not go as expected\n' "$BAD" "$TOTAL"
	exit 1
fi
printf 'conformance: all %d runs as expected\n' "$TOTAL"
