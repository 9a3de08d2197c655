#!/bin/sh
# install-deps.sh - install every Debian package objstore needs to build, run,
# test and benchmark (with what tests/servers/build-server.sh builds Redis 8.0 and
# Valkey 8.1 with), and enable source packages (for redismodule.h).
# Idempotent; needs root or passwordless sudo. Called by `make deps`.
set -eu
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

PKGS="build-essential pkg-config dpkg-dev clang-format
      redis-server redis-tools libhiredis-dev libxxhash-dev libcmocka-dev libssl-dev
      python3-pytest python3-pytest-xdist python3-redis python3-cryptography valgrind
      librdmacm-dev libibverbs-dev rdma-core ibverbs-providers ibverbs-utils perftest rdmacm-utils
      qemu-system-x86 linux-image-amd64 busybox-static cpio kmod iproute2
      iperf3 gnuplot-nox tcl stress-ng
      libsystemd-dev libjemalloc-dev
      python3-dev python3-setuptools python3-wheel python3-pip python3-venv python3-numpy python3-torch"

# --check: exit 0 when every package is installed (make uses it to decide).
if [ "${1:-}" = --check ]; then
    # shellcheck disable=SC2086
    missing=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' $PKGS 2>&1 | grep -v '^ii ' || true)
    [ -z "$missing" ]
    exit
fi

# Source packages: deb822 sources get "deb-src" added to their Types line,
# classic sources.list lines get a deb-src twin.
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    grep -q '^Types:.*deb-src' "$f" || $SUDO sed -i 's/^Types: deb$/Types: deb deb-src/' "$f"
done
if [ -f /etc/apt/sources.list ] && ! grep -q '^deb-src' /etc/apt/sources.list; then
    grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' | $SUDO tee -a /etc/apt/sources.list >/dev/null || true
fi

$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PKGS
# The packaged service would hold port 6379; our nodes are started by hand.
if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
echo "install-deps: done"
