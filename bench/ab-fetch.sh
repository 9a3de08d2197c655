#!/bin/bash
# ab-fetch.sh - two builds of the module side by side on one fetch: how a
# change to the fetch path moves throughput, latency and CPU per fetch, in
# one run on this machine (loopback, TCP, FROM: no directory lookup).
#
#   bench/ab-fetch.sh OLD.so NEW.so [SIZES=16m] [N=150] [ROUNDS=2]
#   bench/ab-fetch.sh --release [SIZES] [N] [ROUNDS]   # OLD: the previous release
#
# --release takes OLD from bench/release-module.sh (the previous release's
# module, built from git and cached by commit) and NEW from build/objstore.so;
# CI's benchmark smoke runs it that way, small (tests/server/test_benchmark_smoke.py).
#
# For each round and each build (rounds alternate the builds, so that a
# drift of the machine hits both): two nodes A and B of that build; first a
# check of the bytes (an object of odd size with random bytes put on A,
# fetched by B over TCP from A, read back from B and compared); then per
# size (SIZES: comma-separated) obj-benchmark -t fetch --tcp --from A -c 1
# -n N --csv, one row each: MB/s, p50, and the server CPU per fetch of A
# and B over the timed phases (INFO cpu). At the end, per size, new over old
# of the best MB/s and of the least CPU (A + B) over the rounds. The rows and
# the ratios go to stdout and are appended, with this command, to
# bench/results/ab-fetch.txt ($AB_OUT names another file; /dev/null: none).
# It never judges a speed: it fails (status 1) only when a node does not
# start, a fetch fails, or the bytes B holds are not the bytes A was given.
# Every tool runs under `timeout`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --release ]; then
    shift
    OLD=$("$ROOT/bench/release-module.sh") || exit $?
    AB_OLD_NAME="the previous release, $(cut -c1-12 "$(dirname "$OLD")/commit.txt" 2>/dev/null)"
    NEW=${OBJSTORE_BUILD:-$ROOT/build}/objstore.so
    set -- "$OLD" "$NEW" "$@"
fi
[ $# -ge 2 ] || { echo "usage: ab-fetch.sh OLD.so NEW.so [SIZES] [N] [ROUNDS] | --release [SIZES] [N] [ROUNDS]" >&2; exit 2; }
OLD=$1 NEW=$2 SIZES=${3:-16m} N=${4:-150} ROUNDS=${5:-2}
OUT=${AB_OUT:-${BENCH_OUT:-$ROOT/bench/results}/ab-fetch.txt}
BENCH=${OBJSTORE_BUILD:-$ROOT/build}/bin/obj-benchmark
[ -x "$BENCH" ] || { echo "ab-fetch: build first (make)" >&2; exit 1; }
for so in "$OLD" "$NEW"; do
    [ -f "$so" ] || { echo "ab-fetch: $so: no such module" >&2; exit 1; }
done
W=$(mktemp -d "${TMPDIR:-/tmp}/ab-fetch.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$W"
}
trap cleanup EXIT

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { echo "ab-fetch: $*" >&2; exit 1; }

# check LABEL PA PB: the bytes of one fetch, compared: an object of odd size
# (it ends inside a piece, not on a boundary) of random bytes put on A,
# fetched by B over TCP from A, read back from B; both copies deleted.
check() {
    local label=$1 pa=$2 pb=$3 id="ab-check-$1" f=$W/check.bin r
    head -c $(((1 << 20) + 4099)) /dev/urandom >"$f"
    r=$(timeout 30 redis-cli -p "$pa" -x OBJ.PUT "$id" <"$f" 2>&1)
    [ "$r" = OK ] || fail "$label: OBJ.PUT on A: $r"
    r=$(timeout 60 redis-cli -p "$pb" OBJ.FETCH "$id" VIA tcp FROM A 2>&1)
    [ "$r" = OK ] || fail "$label: OBJ.FETCH on B: $r"
    # --raw prints the bulk string's bytes as they are, then a newline.
    timeout 30 redis-cli -p "$pb" --raw OBJ.GET "$id" >"$W/check.got" 2>&1 ||
        fail "$label: OBJ.GET on B failed"
    [ "$(stat -c %s "$W/check.got")" -eq $(($(stat -c %s "$f") + 1)) ] &&
        cmp -s -n "$(stat -c %s "$f")" "$f" "$W/check.got" ||
        fail "$label: the bytes B fetched are not the bytes put on A"
    timeout 10 redis-cli -p "$pb" OBJ.DEL "$id" >/dev/null 2>&1 || true
    timeout 10 redis-cli -p "$pa" OBJ.DEL "$id" >/dev/null 2>&1 || true
}

# one LABEL SO: two nodes on SO, the check, one row per size, the nodes stopped.
one() {
    local label=$1 so=$2 w pa pb ta tb a b size row
    w=$(mktemp -d "$W/$label.XXXXXX")
    mkdir -p "$w/A" "$w/B"
    pa=$(port) pb=$(port)
    # Transfer ports named outright: the default (Redis port + 10000) is off
    # for a kernel-picked Redis port above 55535.
    ta=$(port) tb=$(port)
    # The secret goes in a config file: the module refuses it as an argument
    # (and a file setting would be unknown to an older build).
    (umask 077 && echo "objstore.cluster-secret ab" >"$w/secret.conf")
    redis-server "$w/secret.conf" --port "$pa" --bind 127.0.0.1 --save '' --appendonly no --dir "$w/A" \
        --loadmodule "$so" memory 1gb node-name A transfer-port "$ta" rdma-port 0 >"$w/A.log" 2>&1 &
    a=$!
    redis-server "$w/secret.conf" --port "$pb" --bind 127.0.0.1 --save '' --appendonly no --dir "$w/B" \
        --loadmodule "$so" memory 1gb node-name B transfer-port "$tb" rdma-port 0 directory "127.0.0.1:$pa" \
        >"$w/B.log" 2>&1 &
    b=$!
    PIDS+=("$a" "$b")
    for _ in $(seq 100); do
        timeout 2 redis-cli -p "$pb" ping >/dev/null 2>&1 && timeout 2 redis-cli -p "$pa" ping \
            >/dev/null 2>&1 && break
        kill -0 "$a" 2>/dev/null && kill -0 "$b" 2>/dev/null || break # one exited: the module refused
        sleep 0.1
    done
    timeout 2 redis-cli -p "$pb" ping >/dev/null 2>&1 && timeout 2 redis-cli -p "$pa" ping >/dev/null 2>&1 ||
        { tail -n 5 "$w/A.log" "$w/B.log" >&2; fail "$label: the nodes did not start ($so)"; }
    check "$label" "$pa" "$pb"
    for size in ${SIZES//,/ }; do
        if ! row=$(timeout 300 "$BENCH" -p "$pb" --source-port "$pa" -t fetch --tcp --from A -c 1 \
            -n "$N" -d "$size" --csv 2>"$w/bench.err" | grep -v '^"test"'); then
            cat "$w/bench.err" >&2
            fail "$label: the $size fetches failed"
        fi
        # test,size,clients,ops,MB/s,p50,p99,p999,max,cpu B (node),cpu A (source)
        echo "$row" | tr -d '"' | awk -F, -v l="$label" -v s="$size" \
            '{ printf "%-4s %-5s %9.1f MB/s  p50 %8.3f ms  CPU per fetch A %8.1f + B %8.1f us\n",
                      l, s, $5, $6, $11, $10 }'
    done
    kill "$a" "$b" 2>/dev/null || true
    wait "$a" "$b" 2>/dev/null || true
}

{
    echo "# bench/ab-fetch.sh $* ($(date -u +%Y-%m-%d), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "#   old = $OLD${AB_OLD_NAME:+ ($AB_OLD_NAME)}"
    echo "#   new = $NEW"
    for _ in $(seq "$ROUNDS"); do
        one old "$OLD"
        one new "$NEW"
    done | tee "$W/rows"
    # Per size: the best MB/s and the least CPU of each build over the rounds.
    awk '{ k = $2; mb = $3; cpu = $12 + $15
           if ($1 == "old") { if (mb > om[k]) om[k] = mb; if (!(k in oc) || cpu < oc[k]) oc[k] = cpu }
           else { if (mb > nm[k]) nm[k] = mb; if (!(k in nc) || cpu < nc[k]) nc[k] = cpu }
           if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
         END { for (i = 1; i <= n; i++) { k = order[i]
                   printf "ratio %-5s new/old: fetch MB/s %.2fx (best %.1f / %.1f), CPU per fetch A + B %.2fx (least %.0f / %.0f us)\n",
                          k, om[k] ? nm[k] / om[k] : 0, nm[k], om[k], oc[k] ? nc[k] / oc[k] : 0, nc[k], oc[k] } }' "$W/rows"
} | tee -a "$OUT"
