#!/bin/bash
# mac-cost.sh - what the session MAC (wire version 3) costs a fetch: two
# builds of the module side by side in one run, OLD without the MAC (wire
# version 2) and NEW with it, on loopback TCP with FROM (no directory
# lookup), one client, 4 KiB objects (per-frame cost: latency) and 16 MiB
# objects (per-byte cost: throughput), plus build/bin/mac-cost, the MAC
# alone per frame and per byte on this CPU.
#
#   bench/mac-cost.sh OLD.so NEW.so [ROUNDS=2] [N4K=3000] [N16M=60]
#
# For each round, build and size: two nodes A and B, obj-benchmark -t fetch
# --tcp --from A -c 1 --csv; its cpu_us_node / cpu_us_source are the server
# CPU (INFO cpu, every thread) of B (the fetching node, which checks the
# tags as bytes land) and A (the owner, which tags every payload in one
# pass) per fetch. Rounds alternate the builds so that a drift of the
# machine (shared, 2 cores) hits both. Writes bench/results/mac-cost.csv
# (rows) and appends a summary with this command to mac-cost.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=$1 NEW=$2 ROUNDS=${3:-2} N4K=${4:-3000} N16M=${5:-60}
RES=${BENCH_OUT:-$ROOT/bench/results}
BENCH=$ROOT/build/bin/obj-benchmark
MACCOST=$ROOT/build/bin/mac-cost
[ -x "$BENCH" ] && [ -x "$MACCOST" ] || { echo "mac-cost: build first (make test-programs)" >&2; exit 1; }
CSV=$RES/mac-cost.csv TXT=$RES/mac-cost.txt

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# one LABEL SO ROUND: two nodes on SO, both sizes, CSV rows prefixed with
# label and round; the nodes are stopped after.
one() {
    local label=$1 so=$2 round=$3 w pa pb ta tb a b
    w=$(mktemp -d "${TMPDIR:-/tmp}/mac-cost.XXXXXX")
    mkdir -p "$w/A" "$w/B"
    pa=$(port) pb=$(port) ta=$(port) tb=$(port)
    redis-server --port "$pa" --bind 127.0.0.1 --save '' --appendonly no --dir "$w/A" \
        --loadmodule "$so" memory 2gb node-name A cluster-secret mac transfer-port "$ta" \
        rdma-port 0 >"$w/A.log" 2>&1 &
    a=$!
    redis-server --port "$pb" --bind 127.0.0.1 --save '' --appendonly no --dir "$w/B" \
        --loadmodule "$so" memory 2gb node-name B cluster-secret mac transfer-port "$tb" \
        rdma-port 0 directory "127.0.0.1:$pa" >"$w/B.log" 2>&1 &
    b=$!
    for _ in $(seq 50); do
        timeout 2 redis-cli -p "$pb" ping >/dev/null 2>&1 && timeout 2 redis-cli -p "$pa" ping \
            >/dev/null 2>&1 && break
        sleep 0.1
    done
    for sz in "4k $N4K" "16m $N16M"; do
        set -- $sz
        timeout 600 "$BENCH" -p "$pb" --source-port "$pa" -t fetch --tcp --from A -c 1 -n "$2" \
            -d "$1" --csv 2>/dev/null | grep -v '^"test"' | sed "s/^/$label,$round,/" || true
    done
    kill "$a" "$b" 2>/dev/null || true
    wait "$a" "$b" 2>/dev/null || true
    rm -rf "$w"
}

mkdir -p "$RES"
{
    echo "build,round,test,size,clients,ops_per_sec,mb_per_sec,p50_ms,p99_ms,p999_ms,max_ms,cpu_us_node,cpu_us_source"
    for r in $(seq "$ROUNDS"); do
        one old "$OLD" "$r"
        one new "$NEW" "$r"
    done
} >"$CSV.tmp"
mv "$CSV.tmp" "$CSV"

{
    echo "# bench/mac-cost.sh $* ($(date -u +%Y-%m-%d), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "#   old = $OLD (wire version 2, no session MAC)"
    echo "#   new = $NEW (wire version 3, session MAC)"
    echo "# fetch over TCP, FROM A, 1 client; mean over rounds. cpu_us: server CPU per fetch"
    echo "# (B = the fetching node, A = the owner)."
    printf "%-5s %-9s %10s %9s %9s %9s %10s %10s\n" build size fetch/s MB/s "p50 ms" "p99 ms" \
        "B us/op" "A us/op"
    awk -F, 'NR > 1 { gsub(/"/, ""); k = $1 " " $4; n[k]++; ops[k] += $6; mb[k] += $7; p50[k] += $8;
                       p99[k] += $9; b[k] += $12; a[k] += $13 }
             END { for (k in n) { split(k, f, " ");
                       printf "%-5s %-9s %10.0f %9.1f %9.3f %9.3f %10.1f %10.1f\n", f[1], f[2],
                              ops[k] / n[k], mb[k] / n[k], p50[k] / n[k], p99[k] / n[k],
                              b[k] / n[k], a[k] / n[k] } }' "$CSV" | sort -k2,2 -k1,1r
    echo "# build/bin/mac-cost (the MAC alone, one thread):"
    "$MACCOST" --iters 200000 | sed 's/^/#   /'
} | tee -a "$TXT"
