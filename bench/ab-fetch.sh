#!/bin/bash
# ab-fetch.sh - two builds of the module side by side on one fetch: how a
# change to the fetch path moves throughput, latency and CPU per fetch, in
# one run on this machine (loopback, TCP, FROM: no directory lookup).
#
#   bench/ab-fetch.sh OLD.so NEW.so [SIZE=16m] [N=150] [ROUNDS=2]
#
# For each round and each module: two nodes A and B (B fetches from A),
# obj-benchmark -t fetch --tcp --from A -c 1 -n N -d SIZE, and the CPU time
# (utime + stime, /proc/PID/stat) of A and of B divided by N. A's figure
# includes the benchmark's untimed OBJ.PUT of every object (its main
# thread), B's its untimed OBJ.DEL. Rounds alternate the builds so that a
# drift of the machine hits both. Appends the rows, with this command, to
# bench/results/ab-fetch.txt. Every tool runs under `timeout`.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=$1 NEW=$2 SIZE=${3:-16m} N=${4:-150} ROUNDS=${5:-2}
OUT=${BENCH_OUT:-$ROOT/bench/results}/ab-fetch.txt
BENCH=$ROOT/build/bin/obj-benchmark
[ -x "$BENCH" ] || { echo "ab-fetch: build first (make)" >&2; exit 1; }
TCK=$(getconf CLK_TCK)

# one LABEL SO: start two nodes on SO, fetch, print one row, stop them.
one() {
    local label=$1 so=$2 w pa pb ta tb a b a0 b0 out
    w=$(mktemp -d "${TMPDIR:-/tmp}/ab-fetch.XXXXXX")
    mkdir -p "$w/A" "$w/B"
    pa=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    pb=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    # Transfer ports named outright: the default (Redis port + 10000) is off
    # for a kernel-picked Redis port above 55535.
    ta=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    tb=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
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
    for _ in $(seq 50); do
        timeout 2 redis-cli -p "$pb" ping >/dev/null 2>&1 && timeout 2 redis-cli -p "$pa" ping \
            >/dev/null 2>&1 && break
        sleep 0.1
    done
    a0=$(awk '{print $14 + $15}' "/proc/$a/stat")
    b0=$(awk '{print $14 + $15}' "/proc/$b/stat")
    out=$(timeout 300 "$BENCH" -p "$pb" --source-port "$pa" -t fetch --tcp --from A -c 1 -n "$N" \
        -d "$SIZE" -q 2>&1 | tr '\r' '\n' | grep p50 | tail -n 1 || true)
    awk -v l="$label" -v s="$SIZE" -v n="$N" -v t="$TCK" -v o="$out" \
        -v a="$(( $(awk '{print $14 + $15}' "/proc/$a/stat") - a0 ))" \
        -v b="$(( $(awk '{print $14 + $15}' "/proc/$b/stat") - b0 ))" \
        'BEGIN { printf "%-4s %-5s A %7.0f us/op  B %7.0f us/op  %s\n", l, s, a*1e6/t/n, b*1e6/t/n, o }'
    kill "$a" "$b" 2>/dev/null || true
    wait "$a" "$b" 2>/dev/null || true
    rm -rf "$w"
}

{
    echo "# bench/ab-fetch.sh $* ($(date -u +%Y-%m-%d), $(nproc) CPUs)"
    echo "#   old = $OLD"
    echo "#   new = $NEW"
    for _ in $(seq "$ROUNDS"); do
        one old "$OLD"
        one new "$NEW"
    done
} | tee -a "$OUT"
