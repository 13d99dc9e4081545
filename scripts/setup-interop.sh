#!/usr/bin/env bash
# Installs what mcphost's interop tests run against, from a clean clone:
#   - Node MCP servers: `npm ci` in tests/interop (exact versions from
#     tests/interop/package-lock.json)         -> tests/interop/node_modules
#   - Python MCP servers: a venv with tests/interop/requirements.txt
#                                                -> .venv (repo root)
# Idempotent and fast when nothing changed: each half is skipped while a
# stamp (hash of its pin files + tool version) matches what is installed.
# Set MCPHOST_SETUP_FORCE=1 to reinstall anyway.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INTEROP="$ROOT/tests/interop"
VENV="$ROOT/.venv"
PYTHON="${MCPHOST_SETUP_PYTHON:-python3}"
FORCE="${MCPHOST_SETUP_FORCE:-0}"

log() { printf 'setup-interop: %s\n' "$*"; }
die() {
	printf '\nsetup-interop: ERROR: %s\n\n' "$*" >&2
	exit 1
}
need() {
	command -v "$1" >/dev/null 2>&1 || die "'$1' is not on PATH. $2"
}
hash_files() { cat "$@" | sha256sum | cut -d' ' -f1; }

for f in package.json package-lock.json requirements.txt; do
	[[ -f "$INTEROP/$f" ]] || die "missing $INTEROP/$f (is this a complete checkout?)"
done

# ---------------------------------------------------------------- node
need node "The interop tests need Node.js >= 20 (with npm)."
need npm "The interop tests need npm (it ships with Node.js)."
node_ver="$(node --version)"
node_major="${node_ver#v}"
node_major="${node_major%%.*}"
[[ "$node_major" =~ ^[0-9]+$ && "$node_major" -ge 20 ]] ||
	die "Node.js >= 20 is required, found $node_ver ($(command -v node))."

node_stamp_file="$INTEROP/node_modules/.mcphost-setup-stamp"
node_stamp="$(hash_files "$INTEROP/package.json" "$INTEROP/package-lock.json") node-$node_major"
node_bins=(mcp-server-everything mcp-server-filesystem mcp-server-memory)

node_ok() {
	[[ -f "$node_stamp_file" && "$(cat "$node_stamp_file")" == "$node_stamp" ]] || return 1
	local b
	for b in "${node_bins[@]}"; do [[ -x "$INTEROP/node_modules/.bin/$b" ]] || return 1; done
}

if [[ "$FORCE" != 1 ]] && node_ok; then
	log "node servers up to date (node $node_ver) - skipped npm ci"
else
	log "npm ci in tests/interop (node $node_ver, npm $(npm --version)) ..."
	npm ci --prefix "$INTEROP" --no-audit --no-fund --loglevel=error ||
		die "npm ci failed in $INTEROP. Is the npm registry reachable, and does package-lock.json match package.json?"
	for b in "${node_bins[@]}"; do
		[[ -x "$INTEROP/node_modules/.bin/$b" ]] || die "npm ci did not install the '$b' bin."
	done
	printf '%s\n' "$node_stamp" >"$node_stamp_file"
	log "node servers installed"
fi

# ---------------------------------------------------------------- python
need "$PYTHON" "The interop tests need CPython >= 3.11 (set MCPHOST_SETUP_PYTHON to use another interpreter)."
py_ver="$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')" ||
	die "'$PYTHON' does not run."
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' ||
	die "CPython >= 3.11 is required (fastmcp needs it), found $py_ver ($(command -v "$PYTHON"))."

venv_stamp_file="$VENV/.mcphost-setup-stamp"
venv_stamp="$(hash_files "$INTEROP/requirements.txt") python-$py_ver"

venv_ok() {
	[[ -f "$venv_stamp_file" && "$(cat "$venv_stamp_file")" == "$venv_stamp" ]] || return 1
	# Cheap check (no heavy imports): the venv runs and has the four dists.
	"$VENV/bin/python" -c 'import importlib.metadata as m; [m.version(d) for d in ("mcp", "fastmcp", "mcp-server-time", "mcp-server-fetch")]' >/dev/null 2>&1
}

if [[ "$FORCE" != 1 ]] && venv_ok; then
	log "python venv up to date (python $py_ver) - skipped pip install"
else
	# A venv made by another interpreter version cannot be reused: recreate it.
	if [[ -e "$VENV" ]] && ! "$VENV/bin/python" -c "import sys; sys.exit(0 if '%d.%d.%d' % sys.version_info[:3] == '$py_ver' else 1)" 2>/dev/null; then
		log "removing stale $VENV"
		rm -rf "$VENV"
	fi
	if [[ ! -x "$VENV/bin/python" ]]; then
		"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null ||
			die "'$PYTHON' lacks the venv/ensurepip modules (on Debian: apt-get install python3-venv)."
		log "creating venv $VENV (python $py_ver) ..."
		"$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv $VENV' failed."
	fi
	rm -f "$venv_stamp_file"
	log "pip install -r tests/interop/requirements.txt ..."
	"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
		-r "$INTEROP/requirements.txt" ||
		die "pip install failed. Is PyPI reachable, and do the pins in requirements.txt still resolve?"
	"$VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null ||
		die "pip check found broken requirements in $VENV: $("$VENV/bin/python" -m pip check 2>&1 | head -5)"
	"$VENV/bin/python" -c 'import mcp, fastmcp, mcp_server_time, mcp_server_fetch' ||
		die "the venv cannot import mcp / fastmcp / mcp_server_time / mcp_server_fetch after install."
	printf '%s\n' "$venv_stamp" >"$venv_stamp_file"
	log "python servers installed"
fi

log "ready: MCPHOST_INTEROP_DIR=$INTEROP MCPHOST_PYTHON=$VENV/bin/python"
