#!/bin/sh
# install-deps.sh [--run] [--check] - install the Debian packages objstore needs, and
# enable source packages (for redismodule.h).
#   (no option)  every package to build, run, test, package and benchmark (with what
#                tests/servers/build-server.sh builds Redis 8.0 and Valkey 8.1 with):
#                `make deps`, `make test`
#   --run        only what one node needs to be built and run (`make run`): the server,
#                hiredis, rdma-core, the build tools
#   --deb        what `make deb` needs: --run's set and the packaging tools (debian/control's
#                Build-Depends)
#   --check      exit 0 when the chosen set is installed, install nothing
# It never stops, disables or reconfigures a service of the machine: a Redis the
# machine already runs keeps running (`make run` then picks another port, and the
# tests start their servers on free ports). Idempotent; needs root or passwordless sudo.
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
      debhelper dh-python lintian fakeroot
      python3-dev python3-setuptools python3-wheel python3-pip python3-venv python3-numpy python3-torch"

RUN_PKGS="build-essential pkg-config dpkg-dev
      redis-server redis-tools libhiredis-dev libxxhash-dev libssl-dev
      librdmacm-dev libibverbs-dev rdma-core ibverbs-providers"
check=0
for arg in "$@"; do
    case $arg in
    --run) PKGS=$RUN_PKGS ;;
    --deb) PKGS="$RUN_PKGS debhelper dh-python python3-dev python3-setuptools fakeroot patch lintian" ;;
    --check) check=1 ;;
    *) echo "install-deps: unknown option $arg (--run, --deb, --check)" >&2; exit 2 ;;
    esac
done

# --check: exit 0 when every package is installed (make uses it to decide).
if [ "$check" = 1 ]; then
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
echo "install-deps: done"
