#!/bin/sh
# resp-rdma-door-vs-valkey.sh - the Redis protocol over RDMA: our door
# (redis-server 7.0 with objstore.so and objstore-rdma.so) beside Valkey
# 8.1.1's built-in RDMA, in one run, with one and the same client
# (redis-benchmark --rdma, build/redis-benchmark-rdma): QPS and p50 latency
# of PING and of SET/GET with values of 64 B to 4 MiB, with 1 and 4 clients,
# and the door/Valkey ratios.
#
#   make servers all build/redis-benchmark-rdma &&
#   tests/softroce/run.sh bench/resp-rdma-door-vs-valkey.sh  (needs an RDMA device)
#
# (The guest sees only OBJ_* variables of the caller: pass the BENCH_*
# settings with OBJ_VM_ENV="BENCH_N BENCH_N_BIG ...".)
#
# Prints a table and writes bench/results/resp-rdma-door-vs-valkey.csv
# (BENCH_OUT: another directory); its first lines (starting with #) name the
# command and the settings. Environment: OBJ_RXE_ADDR (the RDMA address; set
# by tests/softroce/run.sh), BENCH_N (requests of the small tests, default
# 2000), BENCH_N_BIG (requests of the tests of 256 KiB and more, default 60),
# BENCH_CLIENTS (client counts, default "1 4"), BENCH_ABBA (1, the default:
# each workload runs door, Valkey, Valkey, door and the means are reported,
# so that a drift of the machine's speed hits both alike; 0: once each),
# OBJ_VALKEY_SERVER (default: the servers cache's valkey-server 8.1.1).
# Both servers run with the same RX buffer (1 MiB), io-threads 1 and no
# persistence. Under Soft-RoCE in an emulated guest the ratios say more
# than the numbers. Exit status 0, or 1 when a run failed (its output is shown).
set -u

repo=$(cd "$(dirname "$0")/.." && pwd -P)
cd "$repo" || exit 1
A=${OBJ_RXE_ADDR:?OBJ_RXE_ADDR must name the RDMA address (run through tests/softroce/run.sh)}
A=${A%%/*}
N=${BENCH_N:-2000}
NBIG=${BENCH_N_BIG:-60}
CLIENTS=${BENCH_CLIENTS:-1 4}
ABBA=${BENCH_ABBA:-1}
VALKEY=${OBJ_VALKEY_SERVER:-/var/cache/objstore/servers/valkey-8.1.1/bin/valkey-server}
DPORT=6420
DRPORT=16420
VPORT=6421
VRPORT=16421
RB=build/redis-benchmark-rdma
OUT=${BENCH_OUT:-bench/results}
CSV=$OUT/resp-rdma-door-vs-valkey.csv
LOG=build/resp-rdma-door-vs-valkey
NODES_WORK=$LOG
NODES_START_TIMEOUT=180
# shellcheck source=tests/lib/nodes.sh
. tests/lib/nodes.sh
ulimit -l unlimited 2>/dev/null

mkdir -p "$OUT" "$LOG"
nodesInit || exit 1
for f in "$RB" "$VALKEY"; do
    [ -x "$f" ] || {
        echo "$f is missing: run make servers all build/redis-benchmark-rdma on the host first"
        exit 1
    }
done

VPID=""
stopAll() {
    [ -n "$VPID" ] && kill "$VPID" 2>/dev/null && wait "$VPID" 2>/dev/null
    nodesStopAll
}
trap stopAll EXIT

# waitLog FILE TEXT: wait (up to 180 s) until FILE holds TEXT. Returns 0 or 1.
waitLog() {
    i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 900 ] || return 1
        sleep 0.2
    done
}

nodeStart door "$DPORT" --protected-mode no -- memory 64mb transfer-bind "$A" cluster-secret bench \
    --door bind "$A" port "$DRPORT" rx-size 1mb
"$VALKEY" --port "$VPORT" --bind 127.0.0.1 --protected-mode no --save '' --appendonly no \
    --dir "$LOG" --rdma-bind "$A" --rdma-port "$VRPORT" --rdma-rx-size 1048576 \
    >"$LOG/valkey.log" 2>&1 &
VPID=$!
nodeWait door && waitLog "$(nodeLog door)" "RESP over RDMA on" || {
    echo "the door did not open:"
    tail -n 20 "$(nodeLog door)"
    exit 1
}
waitLog "$LOG/valkey.log" "Ready to accept connections rdma" || {
    echo "valkey-server did not open its RDMA port:"
    tail -n 20 "$LOG/valkey.log"
    exit 1
}

# runOne SERVER NAME CLIENTS REQUESTS ARGS...: one redis-benchmark --rdma run with
# --csv against SERVER (door or valkey); prints "qps p50_ms". Returns 0, or 1
# (output in the log).
runOne() {
    srv=$1 name=$2 c=$3 n=$4
    shift 4
    if [ "$srv" = door ]; then port=$DRPORT; else port=$VRPORT; fi
    f="$LOG/$name-c$c-$srv.out"
    if ! timeout 900 "$RB" --rdma -h "$A" -p "$port" -n "$n" -c "$c" --csv "$@" >"$f" 2>&1; then
        echo "redis-benchmark failed ($srv, $name, -c $c):" >&2
        tail -n 5 "$f" >&2
        return 1
    fi
    # --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    tail -n 1 "$f" | tr -d '"' | awk -F, 'NF >= 5 && $2 + 0 > 0 { print $2, $5; ok = 1 }
        END { exit ok ? 0 : 1 }' || {
        echo "no result line from redis-benchmark ($srv, $name, -c $c):" >&2
        tail -n 5 "$f" >&2
        return 1
    }
}

{
    echo "# command: OBJ_VM_ENV=\"BENCH_N BENCH_N_BIG BENCH_CLIENTS BENCH_ABBA\"" \
        "BENCH_N=$N BENCH_N_BIG=$NBIG BENCH_CLIENTS=\"$CLIENTS\" BENCH_ABBA=$ABBA" \
        "tests/softroce/run.sh bench/resp-rdma-door-vs-valkey.sh"
    echo "# run: $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), ${OBJ_RXE_DEV:-rdma}" \
        "at $A, $(nproc) CPUs${OBJ_SOFTROCE_GUEST:+, Soft-RoCE in a QEMU guest}; door:" \
        "$(redis-server --version | cut -d' ' -f1-3) + objstore-rdma.so, valkey:" \
        "$("$VALKEY" --version | cut -d' ' -f1-3) built-in RDMA; client: $RB"
    echo "workload,clients,door_qps,valkey_qps,qps_ratio,door_p50_ms,valkey_p50_ms,p50_ratio,requests"
} >"$CSV"
printf '%-10s %2s %9s %9s %6s %9s %9s %6s\n' workload c door_qps valkey_qps ratio door_p50 \
    valkey_p50 ratio
failed=0
# Each workload: name, requests, then redis-benchmark arguments (SET runs
# before its GET so that the GET finds a value of that size). The large
# values come first: they are what the comparison is for, and a run cut
# short still has them.
for c in $CLIENTS; do
    while read -r name n args; do
        [ -n "$name" ] || continue
        # shellcheck disable=SC2086 # args are word lists on purpose
        if ! d=$(runOne door "$name" "$c" "$n" $args) || ! v=$(runOne valkey "$name" "$c" "$n" $args); then
            failed=1
            continue
        fi
        if [ "$ABBA" = 1 ]; then
            # shellcheck disable=SC2086
            if ! v2=$(runOne valkey "$name" "$c" "$n" $args) ||
                ! d2=$(runOne door "$name" "$c" "$n" $args); then
                failed=1
                continue
            fi
            d=$(echo "$d $d2" | awk '{ print ($1 + $3) / 2, ($2 + $4) / 2 }')
            v=$(echo "$v $v2" | awk '{ print ($1 + $3) / 2, ($2 + $4) / 2 }')
        fi
        echo "$name $c $d $v" | awk -v n="$n" -v csv="$CSV" '{
            qr = $5 > 0 ? $3 / $5 : 0; lr = $6 > 0 ? $4 / $6 : 0
            printf "%-10s %2s %9.1f %9.1f %6.2f %9.3f %9.3f %6.2f\n", $1, $2, $3, $5, qr, $4, $6, lr
            printf "%s,%s,%s,%s,%.3f,%s,%s,%.3f,%s\n", $1, $2, $3, $5, qr, $4, $6, lr, n >> csv
        }'
    done <<WORKLOADS
SET-1MiB $NBIG -t set -d 1048576
GET-1MiB $NBIG -t get -d 1048576
SET-4MiB $NBIG -t set -d 4194304
GET-4MiB $NBIG -t get -d 4194304
SET-256KiB $NBIG -t set -d 262144
GET-256KiB $NBIG -t get -d 262144
SET-64KiB $N -t set -d 65536
GET-64KiB $N -t get -d 65536
SET-4KiB $N -t set -d 4096
GET-4KiB $N -t get -d 4096
SET-64B $N -t set -d 64
GET-64B $N -t get -d 64
PING $N -t ping_mbulk
WORKLOADS
done
echo "(qps ratio = door/valkey, at least 1 means the door keeps up; p50 ratio = door/valkey,"
echo " lower is better)"
echo "csv: $CSV; raw outputs: $LOG/"
if grep -qE 'crashed by signal|Guru Meditation|ASSERTION' "$LOG/valkey.log" "$(nodeLog door)"; then
    echo "a server crashed; see $LOG/"
    failed=1
fi
exit "$failed"
