#!/bin/bash
# run.sh - run an RDMA test suite wherever it can really run, and say so
# loudly when it cannot. The Makefile calls this for every Soft-RoCE suite:
#
#   tests/softroce/run.sh COMMAND...
#
# With a usable RDMA device on the host, COMMAND runs natively in the
# repository root (OBJ_RXE_ADDR must then name the IPv4 address bound to that
# device; OBJ_RXE_DEV defaults to the first device). Otherwise it runs as root
# inside a Soft-RoCE QEMU guest through guest-run.sh. If neither is possible
# it prints "SOFTROCE SUITE NOT RUN: <reason>" to stderr and exits 1: an RDMA
# suite never passes without having run. COMMAND's exit status is ours.
# COMMAND follows guest-run.sh: one word is shell text, several are an argv.
#
# OBJ_SOFTROCE selects the mode: auto (default), native, vm, or skip, which
# deliberately skips with a loud note and exit status 0. Only an explicit
# OBJ_SOFTROCE=skip can make a skipped suite succeed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd -P)
repo=$(cd "$here/../.." && pwd -P)

# notRun: print the loud not-run banner with reason $* and exit 1.
notRun() {
    {
        echo
        echo "************************************************************************"
        echo "SOFTROCE SUITE NOT RUN: $*"
        echo "  command: $cmd_text"
        echo "  (set OBJ_SOFTROCE=skip to skip on purpose; see tests/softroce/README.md)"
        echo "************************************************************************"
        echo
    } >&2
    exit 1
}

# hostDevice: print the first RDMA device of the host that both sysfs and
# ibv_devices list. Returns 0, or 1 with the reason on stdout.
hostDevice() {
    local devs
    if ! compgen -G '/sys/class/infiniband/*' >/dev/null; then
        echo "the host has no RDMA device (/sys/class/infiniband is empty or absent)"
        return 1
    fi
    if ! command -v ibv_devices >/dev/null 2>&1; then
        echo "ibv_devices not found (install ibverbs-utils)"
        return 1
    fi
    devs=$(timeout 30 ibv_devices 2>/dev/null | awk 'seen && NF { print $1 } /^ *-+/ { seen = 1 }')
    if [ -z "$devs" ]; then
        echo "ibv_devices lists no device although /sys/class/infiniband has entries"
        return 1
    fi
    echo "${devs%%$'\n'*}"
}

# runNative: run the command on the host's device $1 from the repository
# root, with the same environment contract as the guest. Does not return.
runNative() {
    [ -n "${OBJ_RXE_ADDR:-}" ] ||
        notRun "host RDMA device $1 found, but OBJ_RXE_ADDR (the IPv4 address bound to" \
            "it) is not set"
    export OBJ_RXE_ADDR=${OBJ_RXE_ADDR%%/*}
    export OBJ_RXE_DEV=${OBJ_RXE_DEV:-$1}
    ulimit -l unlimited 2>/dev/null ||
        echo "softroce: warning: cannot raise 'ulimit -l' (now $(ulimit -l)); large" \
            "registrations may fail" >&2
    echo "softroce: running natively on $OBJ_RXE_DEV ($OBJ_RXE_ADDR)" >&2
    cd "$repo"
    if [ $# -eq 2 ]; then
        exec sh -c "$2" run.sh
    fi
    shift
    exec "$@"
}

[ $# -gt 0 ] || {
    echo "usage: $0 COMMAND...   (OBJ_SOFTROCE=auto|native|vm|skip)" >&2
    exit 2
}
cmd_text=$*
mode=${OBJ_SOFTROCE:-auto}

case $mode in
skip)
    {
        echo
        echo "************************************************************************"
        echo "SOFTROCE SUITE SKIPPED ON PURPOSE (OBJ_SOFTROCE=skip): $cmd_text"
        echo "  no RDMA code was exercised by this run"
        echo "************************************************************************"
        echo
    } >&2
    exit 0
    ;;
auto | native | vm) ;;
*) notRun "OBJ_SOFTROCE=$mode is not one of auto, native, vm, skip" ;;
esac

if [ "$mode" != vm ]; then
    if dev=$(hostDevice); then
        runNative "$dev" "$@"
    fi
    [ "$mode" = auto ] || notRun "OBJ_SOFTROCE=native but $dev"
fi

if ! why=$("$here/guest-run.sh" --probe 2>&1 >/dev/null); then
    notRun "no RDMA device on the host and no Soft-RoCE guest possible: $why"
fi
exec "$here/guest-run.sh" -- "$@"
