#!/bin/sh
# resp-rdma-vs-tcp.sh - Redis protocol over RDMA vs TCP, in one run, with the
# same (patched) redis-benchmark and the same node: QPS and p50 latency for
# PING, GET and SET (64 B and 4 KiB values) and OBJ.GET (64 B and 4 KiB
# objects), each over TCP (-h 127.0.0.1 -p PORT) and over RDMA (--rdma -h
# RDMA address -p rdma-client-port), with RDMA/TCP ratios.
#
#   make all build/redis-benchmark-rdma &&
#   tests/softroce/run.sh bench/resp-rdma-vs-tcp.sh     (needs an RDMA device)
#
# Prints a table and writes bench/results/resp-rdma-vs-tcp.csv (BENCH_OUT:
# another directory). Environment:
# OBJ_RXE_ADDR (the RDMA address; set by tests/softroce/run.sh), BENCH_N
# (requests per test, default 5000), BENCH_C (clients, default 10), BENCH_P
# (pipeline, default 1), BENCH_ABBA (1, the default: each workload runs TCP,
# RDMA, RDMA, TCP and the means are reported, so that a drift of the
# machine's speed hits both transports alike; 0: once each). Under Soft-RoCE
# in an emulated guest both transports are software: the ratios say more
# than the numbers, and a loaded host makes them noisy.
# Exit status 0, or 1 when a run failed (its output is shown).
set -u

repo=$(cd "$(dirname "$0")/.." && pwd -P)
cd "$repo" || exit 1
A=${OBJ_RXE_ADDR:?OBJ_RXE_ADDR must name the RDMA address (run through tests/softroce/run.sh)}
N=${BENCH_N:-5000}
C=${BENCH_C:-10}
P=${BENCH_P:-1}
ABBA=${BENCH_ABBA:-1}
PORT=6395
CPORT=16395
RB=build/redis-benchmark-rdma
OUT=${BENCH_OUT:-bench/results}
CSV=$OUT/resp-rdma-vs-tcp.csv
LOG=build/resp-rdma-vs-tcp
NODES_WORK=$LOG
# shellcheck source=tests/lib/nodes.sh
. tests/lib/nodes.sh
trap nodesStopAll EXIT

mkdir -p "$OUT" "$LOG"
nodesInit || exit 1
[ -x "$RB" ] || {
    echo "$RB is missing: run make all build/redis-benchmark-rdma on the host first"
    exit 1
}

nodeStart node "$PORT" --protected-mode no -- memory 256mb transfer-bind "$A" cluster-secret bench rdma-port 26395 \
    rdma-client-port "$CPORT"
nodeWait node || exit 1
head -c 64 /dev/urandom | redis-cli -p "$PORT" -x obj.put obj64 >/dev/null
head -c 4096 /dev/urandom | redis-cli -p "$PORT" -x obj.put obj4k >/dev/null

# runOne TRANSPORT NAME ARGS...: one redis-benchmark run with --csv; prints
# "qps p50_ms" of its last result line. Returns 0, or 1 (output in the log).
runOne() {
    tr=$1 name=$2
    shift 2
    # Options first: after a command, redis-benchmark takes words as its arguments.
    if [ "$tr" = rdma ]; then
        set -- --rdma -h "$A" -p "$CPORT" -n "$N" -c "$C" -P "$P" --csv "$@"
    else
        set -- -h 127.0.0.1 -p "$PORT" -n "$N" -c "$C" -P "$P" --csv "$@"
    fi
    f="$LOG/$name-$tr.out"
    if ! timeout 300 "$RB" "$@" >"$f" 2>&1; then
        echo "redis-benchmark failed ($tr, $name):" >&2
        tail -n 5 "$f" >&2
        return 1
    fi
    # --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    tail -n 1 "$f" | tr -d '"' | awk -F, 'NF >= 5 && $2 + 0 > 0 { print $2, $5; ok = 1 }
        END { exit ok ? 0 : 1 }' || {
        echo "no result line from redis-benchmark ($tr, $name):" >&2
        tail -n 5 "$f" >&2
        return 1
    }
}

echo "workload,tcp_qps,rdma_qps,qps_ratio,tcp_p50_ms,rdma_p50_ms,p50_ratio,requests,clients,pipeline" >"$CSV"
printf '%-14s %11s %11s %7s %11s %11s %7s\n' workload tcp_qps rdma_qps ratio tcp_p50_ms \
    rdma_p50_ms ratio
failed=0
# Each workload: name, then redis-benchmark arguments (SET runs before its GET
# so that the GET finds a value of that size).
while read -r name args; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086 # args are word lists on purpose
    if ! t=$(runOne tcp "$name" $args) || ! r=$(runOne rdma "$name" $args); then
        failed=1
        continue
    fi
    if [ "$ABBA" = 1 ]; then
        # shellcheck disable=SC2086
        if ! r2=$(runOne rdma "$name" $args) || ! t2=$(runOne tcp "$name" $args); then
            failed=1
            continue
        fi
        t=$(echo "$t $t2" | awk '{ print ($1 + $3) / 2, ($2 + $4) / 2 }')
        r=$(echo "$r $r2" | awk '{ print ($1 + $3) / 2, ($2 + $4) / 2 }')
    fi
    echo "$name $t $r" | awk -v n="$N" -v c="$C" -v p="$P" -v csv="$CSV" '{
        qr = $2 > 0 ? $4 / $2 : 0; lr = $3 > 0 ? $5 / $3 : 0
        printf "%-14s %11.0f %11.0f %7.2f %11.3f %11.3f %7.2f\n", $1, $2, $4, qr, $3, $5, lr
        printf "%s,%s,%s,%.3f,%s,%s,%.3f,%s,%s,%s\n", $1, $2, $4, qr, $3, $5, lr, n, c, p >> csv
    }'
done <<EOF
PING -t ping_mbulk
SET-64B -t set -d 64
GET-64B -t get -d 64
SET-4KiB -t set -d 4096
GET-4KiB -t get -d 4096
OBJ.GET-64B OBJ.GET obj64
OBJ.GET-4KiB OBJ.GET obj4k
EOF
echo "(qps ratio = rdma/tcp, higher is better for RDMA; p50 ratio = rdma/tcp, lower is better)"
echo "csv: $CSV; raw outputs: $LOG/"
nodeStop node
exit "$failed"
