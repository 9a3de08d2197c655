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
#   - the server CPU per request over the timed phases, as obj-benchmark
#     reports it (INFO cpu of B and of A; the setup and the deletes between
#     rounds not included), and for GET from INFO cpu around the run;
#   - per thread of each node (the Redis main thread, obj-engine,
#     obj-directory), over the whole run: CPU microseconds (utime + stime,
#     /proc/PID/task/TID/stat) and context switches (voluntary +
#     involuntary, .../status) per request. A switch is a thread that went
#     to sleep and had to be woken: the cost a hand-off pays. These include
#     the benchmark's untimed setup and deletes around the fetches. With perf (Debian's linux-perf) available, it also records
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

TCK=$(getconf CLK_TCK)

# serverCpu PORT: used_cpu_sys + used_cpu_user (INFO cpu) of the server at PORT.
serverCpu() {
    redis-cli -p "$1" INFO cpu | tr -d '\r' |
        awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f", s }'
}

# threads PID...: one line "pid tid name ticks switches" per thread.
threads() {
    local p t
    for p in "$@"; do
        for t in /proc/"$p"/task/*; do
            printf '%s %s %s %s %s\n' "$p" "${t##*/}" "$(tr ' ' _ <"$t/comm")" \
                "$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$t/stat")" \
                "$(awk '/^(non)?voluntary_ctxt_switches/ { s += $2 } END { print s }' "$t/status")"
        done 2>/dev/null
    done
}

# measure LABEL OPS NAMES PIDS... -- COMMAND...: run COMMAND (its p50 line is
# printed), then a line per thread that ran or slept: CPU us and switches
# per operation. NAMES: "A B" or "R", the nodes' names in PIDS order.
measure() {
    local label=$1 ops=$2 names=($3) pids=() out
    shift 3
    while [ "$1" != -- ]; do pids+=("$1"); shift; done
    shift
    threads "${pids[@]}" >"$NODES_WORK/t0"
    out=$(timeout 300 "$@" 2>&1 | tr '\r' '\n' | grep -E 'p50' | tail -n 1)
    threads "${pids[@]}" >"$NODES_WORK/t1"
    echo "$label: $out"
    local map="" i
    for i in "${!pids[@]}"; do map+="${pids[$i]}=${names[$i]} "; done
    join -j 2 <(sort -k 2 "$NODES_WORK/t0") <(sort -k 2 "$NODES_WORK/t1") |
        awk -v o="$ops" -v t="$TCK" -v map="$map" '
            BEGIN { n = split(map, m, " "); for (i = 1; i <= n; i++) { split(m[i], kv, "="); node[kv[1]] = kv[2] } }
            { c = ($8 - $4) * 1e6 / t / o; s = ($9 - $5) / o
              if (c > 0 || s >= 0.05) {
                  printf "    %-2s %-14s cpu %7.1f us/op  switches %5.2f /op\n", node[$2], $3, c, s
                  tc += c; ts += s } }
            END { printf "    all threads       cpu %7.1f us/op  switches %5.2f /op\n", tc, ts }'
}

PIDA=$(nodePid A)
PIDB=$(nodePid B)
PIDR=$(nodePid R)
{
    echo "# bench/profile-fetch.sh $SIZE $N   ($(date -u +%Y-%m-%d), $(nproc) CPUs, $(redis-server --version | cut -d' ' -f3))"
    measure "OBJ.FETCH FROM A, TCP" "$N" "A B" "$PIDA" "$PIDB" -- \
        "$OBJBENCH" -p "$PB" --source-port "$PA" -t fetch --tcp --from A -c 1 -n "$N" -d "$SIZE" -q
    measure "OBJ.FETCH (directory), TCP" "$N" "A B" "$PIDA" "$PIDB" -- \
        "$OBJBENCH" -p "$PB" --source-port "$PA" -t fetch --tcp -c 1 -n "$N" -d "$SIZE" -q
    cpu0=$(serverCpu "$PR")
    measure "Redis GET" "$((N * 10))" "R" "$PIDR" -- \
        redis-benchmark -p "$PR" -t get -d "$(numfmt --from=iec "${SIZE^^}")" -c 1 -n "$((N * 10))" -q
    awk -v a="$cpu0" -v b="$(serverCpu "$PR")" -v n="$((N * 10))" \
        'BEGIN { printf "    server CPU (INFO cpu) %.1f us/request\n", (b - a) * 1e6 / n }'
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
