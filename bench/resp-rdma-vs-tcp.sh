#!/bin/sh
# resp-rdma-vs-tcp.sh - Redis protocol over RDMA vs TCP, in one run, with the
# same (patched) redis-benchmark and the same node: QPS, p50 latency and CPU
# time per request (the server's and the benchmark's) for PING and SET/GET
# of 64 B, 4 KiB and 1 MiB values, with 1 and 4 clients, each over TCP
# (-h 127.0.0.1 -p PORT) and over RDMA (--rdma -h RDMA address -p the port
# of objstore-rdma.so, the node's Valkey Over RDMA door), with RDMA/TCP ratios.
#
#   make all build/redis-benchmark-rdma &&
#   tests/softroce/run.sh bench/resp-rdma-vs-tcp.sh     (needs an RDMA device)
#
# (The guest sees only OBJ_* variables of the caller: pass the BENCH_*
# settings with OBJ_VM_ENV="BENCH_N BENCH_N_BIG ...".)
#
# Prints a table and writes bench/results/resp-rdma-vs-tcp.csv (BENCH_OUT:
# another directory); its first lines (starting with #) name the command and
# the settings that made it. Environment: OBJ_RXE_ADDR (the RDMA address; set
# by tests/softroce/run.sh), BENCH_N (requests per test, default 2000),
# BENCH_N_BIG (requests of the 1 MiB tests, default 100), BENCH_CLIENTS
# (client counts, default "1 4"), BENCH_P (pipeline, default 1), BENCH_ABBA
# (1, the default: each workload runs TCP, RDMA, RDMA, TCP and the means are
# reported, so that a drift of the machine's speed hits both transports
# alike; 0: once each).
# CPU per request: the server process's user + system time (/proc/PID/stat,
# in clock ticks) and the benchmark's (/usr/bin/time) over the run, divided
# by the requests. Soft-RoCE does part of its work in kernel threads and
# softirqs that are charged to neither. Under Soft-RoCE in an emulated guest
# both transports are software: the ratios say more than the numbers, and a
# loaded host makes them noisy.
# Exit status 0, or 1 when a run failed (its output is shown).
set -u

repo=$(cd "$(dirname "$0")/.." && pwd -P)
cd "$repo" || exit 1
A=${OBJ_RXE_ADDR:?OBJ_RXE_ADDR must name the RDMA address (run through tests/softroce/run.sh)}
N=${BENCH_N:-2000}
NBIG=${BENCH_N_BIG:-100}
CLIENTS=${BENCH_CLIENTS:-1 4}
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
[ -x /usr/bin/time ] || {
    echo "/usr/bin/time is missing (apt-get install time)"
    exit 1
}

nodeStart node "$PORT" --protected-mode no -- memory 256mb transfer-bind "$A" cluster-secret bench \
    rdma-port 26395 --door bind "$A" port "$CPORT"
nodeWait node || exit 1
SRV_PID=$(nodePid node)
TICK=$(getconf CLK_TCK)

# srvTicks: the server's user + system CPU so far, in clock ticks.
srvTicks() {
    awk '{ print $14 + $15 }' "/proc/$SRV_PID/stat"
}

# runOne TRANSPORT NAME CLIENTS REQUESTS ARGS...: one redis-benchmark run with
# --csv; prints "qps p50_ms srv_us_per_op cli_us_per_op". Returns 0, or 1
# (output in the log).
runOne() {
    tr=$1 name=$2 c=$3 n=$4
    shift 4
    # Options first: after a command, redis-benchmark takes words as its arguments.
    if [ "$tr" = rdma ]; then
        set -- --rdma -h "$A" -p "$CPORT" -n "$n" -c "$c" -P "$P" --csv "$@"
    else
        set -- -h 127.0.0.1 -p "$PORT" -n "$n" -c "$c" -P "$P" --csv "$@"
    fi
    f="$LOG/$name-c$c-$tr.out"
    s0=$(srvTicks)
    if ! timeout 600 /usr/bin/time -f '%U %S' -o "$f.time" "$RB" "$@" >"$f" 2>&1; then
        echo "redis-benchmark failed ($tr, $name, -c $c):" >&2
        tail -n 5 "$f" >&2
        return 1
    fi
    s1=$(srvTicks)
    # --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    tail -n 1 "$f" | tr -d '"' | awk -F, -v s="$((s1 - s0))" -v tick="$TICK" -v n="$n" \
        -v cli="$(tail -n 1 "$f.time")" 'NF >= 5 && $2 + 0 > 0 {
            split(cli, t, " ")
            printf "%s %s %.1f %.1f\n", $2, $5, s * 1e6 / tick / n, (t[1] + t[2]) * 1e6 / n
            ok = 1
        }
        END { exit ok ? 0 : 1 }' || {
        echo "no result line from redis-benchmark ($tr, $name, -c $c):" >&2
        tail -n 5 "$f" >&2
        return 1
    }
}

{
    echo "# command: OBJ_VM_ENV=\"BENCH_N BENCH_N_BIG BENCH_CLIENTS BENCH_P BENCH_ABBA\"" \
        "BENCH_N=$N BENCH_N_BIG=$NBIG BENCH_CLIENTS=\"$CLIENTS\" BENCH_P=$P BENCH_ABBA=$ABBA" \
        "tests/softroce/run.sh bench/resp-rdma-vs-tcp.sh"
    echo "# run: $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), ${OBJ_RXE_DEV:-rdma}" \
        "at $A, $(nproc) CPUs${OBJ_SOFTROCE_GUEST:+, Soft-RoCE in a QEMU guest}"
    echo "workload,clients,tcp_qps,rdma_qps,qps_ratio,tcp_p50_ms,rdma_p50_ms,p50_ratio," \
        "tcp_srv_us_op,rdma_srv_us_op,tcp_cli_us_op,rdma_cli_us_op,requests,pipeline" | tr -d ' '
} >"$CSV"
printf '%-9s %2s %9s %9s %6s %8s %8s %6s %8s %8s %8s %8s\n' workload c tcp_qps rdma_qps ratio \
    tcp_p50 rdma_p50 ratio tcp_srv rdma_srv tcp_cli rdma_cli
failed=0
# Each workload: name, requests, then redis-benchmark arguments (SET runs
# before its GET so that the GET finds a value of that size).
for c in $CLIENTS; do
    while read -r name n args; do
        [ -n "$name" ] || continue
        # shellcheck disable=SC2086 # args are word lists on purpose
        if ! t=$(runOne tcp "$name" "$c" "$n" $args) || ! r=$(runOne rdma "$name" "$c" "$n" $args); then
            failed=1
            continue
        fi
        if [ "$ABBA" = 1 ]; then
            # shellcheck disable=SC2086
            if ! r2=$(runOne rdma "$name" "$c" "$n" $args) ||
                ! t2=$(runOne tcp "$name" "$c" "$n" $args); then
                failed=1
                continue
            fi
            t=$(echo "$t $t2" | awk '{ print ($1 + $5) / 2, ($2 + $6) / 2, ($3 + $7) / 2, ($4 + $8) / 2 }')
            r=$(echo "$r $r2" | awk '{ print ($1 + $5) / 2, ($2 + $6) / 2, ($3 + $7) / 2, ($4 + $8) / 2 }')
        fi
        echo "$name $c $t $r" | awk -v n="$n" -v p="$P" -v csv="$CSV" '{
            qr = $3 > 0 ? $7 / $3 : 0; lr = $4 > 0 ? $8 / $4 : 0
            printf "%-9s %2s %9.0f %9.0f %6.2f %8.3f %8.3f %6.2f %8.1f %8.1f %8.1f %8.1f\n", \
                $1, $2, $3, $7, qr, $4, $8, lr, $5, $9, $6, $10
            printf "%s,%s,%s,%s,%.3f,%s,%s,%.3f,%s,%s,%s,%s,%s,%s\n", $1, $2, $3, $7, qr, $4, $8, lr, \
                $5, $9, $6, $10, n, p >> csv
        }'
    done <<EOF
PING $N -t ping_mbulk
SET-64B $N -t set -d 64
GET-64B $N -t get -d 64
SET-4KiB $N -t set -d 4096
GET-4KiB $N -t get -d 4096
SET-1MiB $NBIG -t set -d 1048576
GET-1MiB $NBIG -t get -d 1048576
EOF
done
echo "(qps ratio = rdma/tcp, higher is better for RDMA; p50 ratio = rdma/tcp, lower is better;"
echo " srv/cli = CPU us per request of the server / of the benchmark)"
echo "csv: $CSV; raw outputs: $LOG/"
nodeStop node
exit "$failed"
