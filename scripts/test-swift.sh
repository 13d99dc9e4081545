#!/usr/bin/env bash
# Builds libmcphost and the test server, then builds and tests the SwiftPM
# package in bindings/swift (`swift test`), linking through a pkg-config
# file for libmcphost written into target/swift-pkgconfig.
#
# The toolchain: `swift` on PATH if there is one (macOS, a Swift machine).
# Otherwise, on Linux as root, Debian's own `swiftlang` package (Swift 6,
# in Debian 13 "trixie" and later) installed into a trixie root made with
# debootstrap from the apt mirror this machine already uses, kept at
# $MCPHOST_SWIFT_ROOT (default /var/tmp/mcphost-swift-trixie, ~3 GB) and
# reused; the tests run there under chroot with this checkout bind-mounted
# at its own path. Without either, this fails and says why.
#
# Env: MCPHOST_SWIFT_ROOT (the trixie root), CARGO_BUILD_JOBS (as cargo),
# CARGO_TARGET_DIR (as cargo), MCPHOST_PREBUILT=1 (scripts/test.sh: the
# release library and the debug binaries are built already; they are
# checked, not built).
#   scripts/test-swift.sh             build what it needs, then swift test
#   scripts/test-swift.sh --prepare   only make the toolchain root (no cargo;
#                                     scripts/test.sh runs it in the
#                                     background while cargo builds)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pkg="$repo/bindings/swift"
target="${CARGO_TARGET_DIR:-$repo/target}"
lib="$target/release"
bin="$target/debug"
prepare_only=0
[ "${1:-}" = --prepare ] && prepare_only=1

say() { printf 'test-swift: %s\n' "$*" >&2; }

if [ "$prepare_only" = 1 ]; then
    :
elif [ "${MCPHOST_PREBUILT:-0}" = 1 ]; then
    for f in "$lib/libmcphost.so" "$bin/mcphost" "$bin/mcphost-testserver"; do
        [ -f "$f" ] || { say "FAILED: MCPHOST_PREBUILT=1 but $f is not built"; exit 1; }
    done
    say "using the built $lib/libmcphost.so and $bin/{mcphost,mcphost-testserver}"
else
    say "building libmcphost (release), mcphost and mcphost-testserver"
    (cd "$repo" && cargo build --release -p mcphost-c && cargo build --bin mcphost --bin mcphost-testserver)
fi

pcdir="$repo/target/swift-pkgconfig"
mkdir -p "$pcdir"
cat >"$pcdir/mcphost.pc" <<EOF
Name: mcphost
Description: libmcphost, the C API of mcphost
Version: $(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/bindings/c/Cargo.toml" | head -n1)
Libs: -L$lib -lmcphost
Cflags:
EOF

# The command run with the toolchain (in the chroot or not).
run_tests=$(cat <<EOF
set -eu
cd '$pkg'
export PKG_CONFIG_PATH='$pcdir' LD_LIBRARY_PATH='$lib' DYLD_LIBRARY_PATH='$lib' MCPHOST_TESTSERVER='$bin/mcphost-testserver' MCPHOST_BIN='$bin/mcphost'
swift --version
timeout 900 swift test -Xswiftc -strict-concurrency=complete -Xswiftc -warnings-as-errors
EOF
)

if command -v swift >/dev/null 2>&1; then
    say "using the swift on PATH"
    [ "$prepare_only" = 1 ] && exit 0
    exec bash -c "$run_tests"
fi

if [ "$(uname -s)" != Linux ] || [ "$(id -u)" != 0 ]; then
    say "FAILED: no swift on PATH, and no way to install one here (needs Linux as root for the Debian toolchain)"
    exit 1
fi

root="${MCPHOST_SWIFT_ROOT:-/var/tmp/mcphost-swift-trixie}"
ready="$root/.mcphost-swift-ready"
if [ ! -e "$ready" ]; then
    say "no Swift toolchain: installing Debian trixie's swiftlang into $root (once; a few minutes)"
    # (apt-get takes turns with scripts/test.sh's, which may run beside it.)
    command -v debootstrap >/dev/null 2>&1 ||
        flock /tmp/mcphost-ci-apt.lock sh -c 'apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap'

    # The mirror apt already uses (first non-security Debian URI), else
    # debootstrap's own default.
    mirror="$(
        { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
          grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}'; } |
            grep -v security | grep -m1 debian || true
    )"
    rm -rf "$root"
    debootstrap --variant=minbase --include=swiftlang,libc6-dev,pkg-config,ca-certificates \
        trixie "$root" ${mirror:+"$mirror"} >"$root.log" 2>&1 || {
        tail -n 20 "$root.log" >&2
        say "FAILED: debootstrap of trixie with swiftlang (log: $root.log)"
        exit 1
    }
    touch "$ready"
fi
if [ "$prepare_only" = 1 ]; then
    say "toolchain root ready: $root"
    exit 0
fi

mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[$i]}" || true; done
}
trap cleanup EXIT
# /proc: the toolchain finds its libraries through $ORIGIN (/proc/self/exe).
if ! mountpoint -q "$root/proc"; then
    mount -t proc proc "$root/proc"
    mounted+=("$root/proc")
fi
mkdir -p "$root$repo"
if ! mountpoint -q "$root$repo"; then
    mount --bind "$repo" "$root$repo"
    mounted+=("$root$repo")
fi
# A cargo target dir outside the checkout (scripts/test.sh's cache) too.
case "$target/" in
"$repo"/*) ;;
*)
    mkdir -p "$root$target"
    if ! mountpoint -q "$root$target"; then
        mount --bind "$target" "$root$target"
        mounted+=("$root$target")
    fi
    ;;
esac
say "running swift test in $root (Debian trixie, swiftlang)"
chroot "$root" /bin/bash -c "$run_tests"
