#!/usr/bin/env bash
# The Python binding as users get it: build libmcphost and the binaries the
# tests run, build the wheel (which bundles the library), install it into a
# fresh venv under target/, and run bindings/python/tests from that venv with
# MCPHOST_LIBRARY unset, so the library is the one next to the package.
#
# Needs: cargo, python3 (>= 3.9, with venv), node (server-everything), a C
# compiler (one test builds a fake library), and scripts/setup-interop.sh
# run once (it installs server-everything into tests/interop/node_modules).
#
#   MCPHOST_PYTHON_PROFILE=debug|release  library profile (default debug)
#   MCPHOST_PREBUILT=1                    the library and the binaries are
#                                         built already (scripts/test.sh):
#                                         checked, not built
#   MCPHOST_TEST_PYTHON=python3.12        interpreter for the venvs
#   extra arguments go to pytest (e.g. -k events -x)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="$ROOT/bindings/python"
PYTHON="${MCPHOST_TEST_PYTHON:-python3}"
PROFILE="${MCPHOST_PYTHON_PROFILE:-debug}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$TARGET/python"

log() { printf 'test-python: %s\n' "$*"; }
die() {
	printf '\ntest-python: ERROR: %s\n\n' "$*" >&2
	exit 1
}
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is not on PATH. $2"; }

# ---------------------------------------------------------------- checks
need cargo "Install a Rust toolchain (rustup)."
need "$PYTHON" "Install CPython >= 3.9 (or set MCPHOST_TEST_PYTHON)."
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' ||
	die "CPython >= 3.9 is required, found $("$PYTHON" --version 2>&1)."
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null ||
	die "'$PYTHON' lacks the venv/ensurepip modules (on Debian: apt-get install python3-venv)."
need "${MCPHOST_NODE:-node}" "server-everything needs Node >= 20."
command -v "${CC:-cc}" >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 ||
	die "no C compiler (cc or gcc): test_library builds a fake library with it."
EVERYTHING="$ROOT/tests/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
[[ -f "$EVERYTHING" ]] || die "server-everything is not installed at $EVERYTHING: run scripts/setup-interop.sh first."
case "$PROFILE" in
debug) cargo_profile=() ;;
release) cargo_profile=(--release) ;;
*) die "MCPHOST_PYTHON_PROFILE must be debug or release, not '$PROFILE'." ;;
esac
case "$(uname -s)" in
Darwin) LIBNAME=libmcphost.dylib ;;
*) LIBNAME=libmcphost.so ;;
esac

# ---------------------------------------------------------------- build
LIB="$TARGET/$PROFILE/$LIBNAME"
if [[ "${MCPHOST_PREBUILT:-0}" == 1 ]]; then
	log "using the built $LIB and $TARGET/debug/{mcphost,mcphost-testserver}"
else
	log "cargo build -p mcphost-c ${cargo_profile[*]:-} (the library)"
	(cd "$ROOT" && cargo build -p mcphost-c "${cargo_profile[@]}") || die "building libmcphost failed."
	log "cargo build --bin mcphost --bin mcphost-testserver (what the tests run)"
	(cd "$ROOT" && cargo build --bin mcphost --bin mcphost-testserver) || die "building the binaries failed."
fi
[[ -f "$LIB" ]] || die "no $LIB (built by cargo build -p mcphost-c ${cargo_profile[*]:-})."
for b in mcphost mcphost-testserver; do
	[[ -x "$TARGET/debug/$b" ]] || die "cargo built no $TARGET/debug/$b."
done

# ---------------------------------------------------------------- wheel
mkdir -p "$OUT"
BUILD_VENV="$OUT/build-venv"
if [[ ! -x "$BUILD_VENV/bin/python" ]]; then
	log "creating $BUILD_VENV"
	"$PYTHON" -m venv "$BUILD_VENV" || die "'$PYTHON -m venv $BUILD_VENV' failed."
fi
rm -rf "$OUT/dist" "$PKG/build" "$PKG"/*.egg-info
log "building the wheel (bundling $LIB)"
# pyproject.toml pins the build backend (setuptools), fetched by pip.
MCPHOST_WHEEL_LIBRARY="$LIB" "$BUILD_VENV/bin/python" -m pip wheel --quiet \
	--disable-pip-version-check --no-input --no-deps -w "$OUT/dist" "$PKG" ||
	die "building the wheel failed (is PyPI reachable for the pinned setuptools?)."
rm -rf "$PKG/build" "$PKG"/*.egg-info
shopt -s nullglob
wheels=("$OUT"/dist/mcphost-*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || die "expected one wheel in $OUT/dist, found ${#wheels[@]}."
WHEEL="${wheels[0]}"
"$BUILD_VENV/bin/python" - "$WHEEL" "$LIBNAME" <<'EOF' || die "the wheel does not bundle the library."
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
want = "mcphost/" + sys.argv[2]
sys.exit(0 if want in names else f"{want} is not in {sys.argv[1]}: {names}")
EOF
log "wheel: $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"

# ---------------------------------------------------------------- venv
VENV="$OUT/venv"
rm -rf "$VENV"
log "fresh venv $VENV: the wheel + tests/requirements.txt"
"$PYTHON" -m venv "$VENV" || die "'$PYTHON -m venv $VENV' failed."
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
	"$WHEEL" -r "$PKG/tests/requirements.txt" ||
	die "installing the wheel and pytest into $VENV failed."

# ---------------------------------------------------------------- tests
log "pytest bindings/python/tests (from $VENV, MCPHOST_LIBRARY unset)"
status=0
# From a directory outside the source tree, so `import mcphost` can only
# find the installed package; no cache written into the checkout.
(cd "$OUT" && env -u MCPHOST_LIBRARY \
	MCPHOST_PY_EXPECT_WHEEL=1 \
	MCPHOST_REPO="$ROOT" \
	MCPHOST_BIN_DIR="$TARGET/debug" \
	MCPHOST_INTEROP_DIR="$ROOT/tests/interop" \
	"$VENV/bin/python" -I -m pytest -p no:cacheprovider "$PKG/tests" "$@") || status=$?
case "$status" in
0) log "ok" ;;
5) die "pytest collected no tests." ;;
*) die "pytest failed (exit $status)." ;;
esac
