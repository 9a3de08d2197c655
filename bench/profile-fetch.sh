#!/bin/bash
# profile-fetch.sh - where a small OBJ.FETCH spends its time, against a Redis
# GET of the same size, in one run on this machine (loopback, TCP):
#
#   bench/profile-fetch.sh [SIZE=4k] [REQUESTS=5000]
#
# Two objstore nodes (A owns the objects and is the directory; B fetches with
# FROM A, so no directory lookup is involved) and a plain redis-server. For
# the fetch (obj-benchmark -t fetch --tcp --from A, one client) and for GET
# (redis-benchmark -t get, one client) it reports, per operation:
#   - p50 latency (the tools' own figure);
#   - CPU microseconds of every server process (utime+stime, /proc/PID/stat);
#   - context switches of every server process, summed over its threads
#     (voluntary + involuntary, /proc/PID/task/*/status): each one is a thread
#     that went to sleep and had to be woken, the cost a hand-off pays.
# The fetch figures include the benchmark's untimed work around each fetch
# (OBJ.DEL on B, its unpublish, the re-publish on the next copy), as in
# `make bench`. With perf (Debian's linux-perf) available, it also records
# 3 s of B and A during the fetches and prints the top symbols, which is how
# the bound was named in the issue note. Writes
# bench/results/profile-fetch.txt (the table, the perf summary, and this
# command). Every tool runs under `timeout`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE=${1:-4k}
N=${2:-5000}
OUT=${BENCH_OUT:-$ROOT/bench/results}/profile-fetch.txt
OBJBENCH=$ROOT/build/bin/obj-benchmark
[ -x "$OBJBENCH" ] || { echo "profile-fetch: build first (make)" >&2; exit 1; }

NODES_WORK=$(mktemp -d "${TMPDIR:-/tmp}/objstore-profile.XXXXXX")
NODES_REPO=$ROOT
# shellcheck source=tests/lib/nodes.sh
. "$ROOT/tests/lib/nodes.sh"
trap 'nodesStopAll; rm -rf "$NODES_WORK"' EXIT
nodesInit

# Transfer ports named outright: the default (Redis port + 10000) is off for
# a kernel-picked Redis port above 55535.
PA=$(nodesFreePort)
nodeStart A "$PA" -- memory 512mb node-name A cluster-secret profile \
    transfer-port "$(nodesFreePort)" rdma-port 0
nodeWait A
PB=$(nodesFreePort)
nodeStart B "$PB" -- memory 512mb node-name B cluster-secret profile directory "127.0.0.1:$PA" \
    transfer-port "$(nodesFreePort)" rdma-port 0
nodeWait B
PR=$(nodesFreePort)
redisStart R "$PR"
nodeWait R

cpuTicks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '/^(non)?voluntary_ctxt_switches/ { s += $2 } END { print s }'
}
TCK=$(getconf CLK_TCK)

# measure LABEL OPS PIDS... -- COMMAND...: run COMMAND, print a row per PID.
measure() {
    local label=$1 ops=$2 pids=() p
    shift 2
    while [ "$1" != -- ]; do pids+=("$1"); shift; done
    shift
    declare -A c0 s0
    for p in "${pids[@]}"; do c0[$p]=$(cpuTicks "$p"); s0[$p]=$(switches "$p"); done
    local out
    out=$(timeout 300 "$@" 2>&1 | tr '\r' '\n' | grep -E 'p50' | tail -n 1)
    local total_cpu=0 total_sw=0
    for p in "${pids[@]}"; do
        local dc=$(( $(cpuTicks "$p") - c0[$p] )) ds=$(( $(switches "$p") - s0[$p] ))
        total_cpu=$((total_cpu + dc))
        total_sw=$((total_sw + ds))
    done
    awk -v l="$label" -v o="$ops" -v c="$total_cpu" -v s="$total_sw" -v t="$TCK" -v r="$out" \
        'BEGIN { printf "%-28s cpu %7.1f us/op  switches %5.2f /op   %s\n", l, c * 1e6 / t / o, s / o, r }'
}

PIDA=$(nodePid A)
PIDB=$(nodePid B)
PIDR=$(nodePid R)
{
    echo "# bench/profile-fetch.sh $SIZE $N   ($(date -u +%Y-%m-%d), $(nproc) CPUs, $(redis-server --version | cut -d' ' -f3))"
    measure "OBJ.FETCH FROM A, TCP" "$N" "$PIDA" "$PIDB" -- \
        "$OBJBENCH" -p "$PB" --source-port "$PA" -t fetch --tcp --from A -c 1 -n "$N" -d "$SIZE" -q
    measure "OBJ.FETCH (directory), TCP" "$N" "$PIDA" "$PIDB" -- \
        "$OBJBENCH" -p "$PB" --source-port "$PA" -t fetch --tcp -c 1 -n "$N" -d "$SIZE" -q
    measure "Redis GET" "$((N * 10))" "$PIDR" -- \
        redis-benchmark -p "$PR" -t get -d "$(numfmt --from=iec "${SIZE^^}")" -c 1 -n "$((N * 10))" -q
} | tee "$OUT.tmp"

if command -v perf >/dev/null 2>&1; then
    echo "# perf: B and A during fetches with FROM (top symbols, self time)" | tee -a "$OUT.tmp"
    timeout 60 perf record -q -F 2000 -g -p "$PIDB,$PIDA" -o "$NODES_WORK/perf.data" -- sleep 3 \
        >/dev/null 2>&1 &
    rec=$!
    timeout 10 "$OBJBENCH" -p "$PB" --source-port "$PA" -t fetch --tcp --from A -c 1 -n "$N" \
        -d "$SIZE" -q --seconds 3 >/dev/null 2>&1 || true
    wait "$rec" || true
    timeout 120 perf report -i "$NODES_WORK/perf.data" --no-children --sort sym --stdio 2>/dev/null |
        grep -E '^ +[0-9.]+%' | head -n 15 | tee -a "$OUT.tmp" || true
fi
mv "$OUT.tmp" "$OUT"
echo "written: $OUT"
