#!/bin/bash
# build.sh - build what the RESP-over-RDMA client suite needs, skipping what
# is up to date: the module and client library (make all), the suite's C
# programs in build/rdmaclient/ (test_rdmaclient, peer) and the patched
# redis-benchmark (bench/build-redis-benchmark.sh). Run it on the host before
# booting a Soft-RoCE guest to keep the guest's (emulated, slow) CPU for the
# tests; run-in-guest.sh calls it too. Exit status 0, or 1 on a failed build.
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd -P)
out=$repo/build/rdmaclient
cd "$repo"
mkdir -p "$out"

make -s all >/dev/null || {
    echo "rdmaclient/build: make all failed" >&2
    exit 1
}

# cbuild OUT SRC...: compile SRC into OUT unless OUT is newer than its inputs.
cbuild() {
    target=$1
    shift
    stale=0
    [ -x "$target" ] || stale=1
    for f in "$@" client/rdmaconn.h client/objstore.h module/rdma/resprdma.h module/rdma/ring.h \
        build/client/libobjstore.a; do
        [ "$stale" = 1 ] || [ "$target" -nt "$f" ] || stale=1
    done
    [ "$stale" = 1 ] || return 0
    cc -std=gnu11 -O2 -g -Wall -Wextra -Wno-unused-parameter -D_GNU_SOURCE -pthread \
        -Iclient -Imodule -o "$target" "$@" build/client/libobjstore.a \
        -lhiredis -lrdmacm -libverbs
}

cbuild "$out/test_rdmaclient" tests/rdma/client/test_rdmaclient.c
cbuild "$out/peer" tests/rdma/client/peer.c
bench/build-redis-benchmark.sh >/dev/null
