#!/bin/bash
# profile-tcp-fetch.sh - where a large TCP fetch spends its CPU, per node and
# per pass over the bytes, against a one-stream iperf3 in the same run:
#
#   bench/profile-tcp-fetch.sh LABEL [MODULE=build/objstore.so] [SIZE=16m] [SECONDS=5]
#
# Two nodes on loopback, arenas prefaulted (a steady state: no first touch
# of arena pages in the figures) (A owns the objects, B fetches them with FROM A:
# obj-benchmark -t fetch --tcp -c 1), the module's default session (MAC on,
# transfer-encrypt as MODULE_ARGS says, e.g. MODULE_ARGS="transfer-encrypt yes").
# While obj-benchmark runs, perf records each node's process on its own; the
# samples are then summed per pass: the kernel's copies (socket in and out),
# the session's payload tag or cipher (libcrypto), the checksum (libxxhash),
# zeroing (memset, the kernel's page clearing), page faults, the rest. The
# fetch's MB/s is printed beside a one-stream iperf3 of the same seconds,
# taken right before. Appends to bench/results/profile-tcp-fetch.txt (OUT
# names another file) and a row to the .csv beside it (docs/benchmarks.md's
# table, bench/tables.py). PERF=0: no profile, only the two rates and each
# node's CPU per fetch (bench/encrypt-cost.sh runs it so).
# Every tool runs under `timeout`; what it starts is stopped on exit.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LABEL=$1 SO=$(realpath "${2:-$ROOT/build/objstore.so}") SIZE=${3:-16m} SECS=${4:-5}
OUT=${OUT:-${BENCH_OUT:-$ROOT/bench/results}/profile-tcp-fetch.txt}
PERF=${PERF:-1}
BENCH=$ROOT/build/bin/obj-benchmark
[ -x "$BENCH" ] || { echo "profile-tcp-fetch: build first (make)" >&2; exit 1; }
[ "$PERF" = 0 ] || command -v perf >/dev/null ||
    { echo "profile-tcp-fetch: needs perf (linux-perf), or PERF=0" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/profile-tcp-fetch.XXXXXX")
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
freePort() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The secret in a config file (the module refuses it as an argument).
(umask 077 && echo "objstore.cluster-secret profile" >"$W/secret.conf")
PA=$(freePort) PB=$(freePort)
for n in A B; do
    mkdir -p "$W/$n"
    port=$PA dir=""
    [ "$n" = B ] && port=$PB dir="directory 127.0.0.1:$PA"
    # shellcheck disable=SC2086
    redis-server "$W/secret.conf" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$W/$n" --loadmodule "$SO" memory 512mb prefault yes node-name "$n" \
        transfer-port "$(freePort)" \
        rdma-port 0 $dir ${MODULE_ARGS:-} >"$W/$n.log" 2>&1 &
    PIDS+=($!)
done
PIDA=${PIDS[0]} PIDB=${PIDS[1]}
for p in "$PA" "$PB"; do
    for _ in $(seq 100); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.1; done
done

# The reference: one TCP stream on the same loopback, same seconds.
IP=$(freePort)
timeout 60 iperf3 -s -1 -p "$IP" >/dev/null 2>&1 &
sleep 0.5
# Its rate, and its CPU per byte on each side (iperf3's own accounting), the
# reference for the engines' CPU per byte.
read -r IPERF IPERF_TX_NS IPERF_RX_NS < <(timeout 60 iperf3 -c 127.0.0.1 -p "$IP" -t "$SECS" -J |
    /usr/bin/python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]; r = e["sum_received"]; c = e["cpu_utilization_percent"]
ns = lambda pct: pct / 100 * r["seconds"] * 1e9 / r["bytes"]
print("%.0f %.4f %.4f" % (r["bits_per_second"] / 8e6, ns(c["host_total"]), ns(c["remote_total"])))')

# cpuOf PID: the process's CPU seconds so far (utime + stime).
TCK=$(getconf CLK_TCK)
cpuOf() { awk -v t="$TCK" '{ printf "%.3f", ($14 + $15) / t }' "/proc/$1/stat"; }
# engineCpuOf PID: CPU seconds of the node's transfer engine thread (obj-engine),
# the one that moves and checks a fetch's bytes.
engineCpuOf() {
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm")" = obj-engine ]; then
            awk -v t="$TCK" '{ printf "%.3f", ($14 + $15) / t }' "$t/stat"
        fi
    done
}
RECS=()
if [ "$PERF" != 0 ]; then
    for n in A B; do
        pid=$([ "$n" = A ] && echo "$PIDA" || echo "$PIDB")
        timeout 120 perf record -q -F 1999 -g -p "$pid" -o "$W/$n.data" -- sleep "$SECS" \
            >/dev/null 2>&1 &
        RECS+=($!)
    done
fi
CA0=$(cpuOf "$PIDA") CB0=$(cpuOf "$PIDB") EA0=$(engineCpuOf "$PIDA") EB0=$(engineCpuOf "$PIDB")
FETCH=$(timeout 120 "$BENCH" -p "$PB" --source-port "$PA" -t fetch --tcp --from A -c 1 \
    -n 1000000 -d "$SIZE" -q --seconds "$SECS" 2>/dev/null | tail -1)
CA1=$(cpuOf "$PIDA") CB1=$(cpuOf "$PIDB") EA1=$(engineCpuOf "$PIDA") EB1=$(engineCpuOf "$PIDB")
# memcpy of the object's size, same run: ns per byte, the unit of a "pass".
MEMCPY=$(/usr/bin/python3 -c '
import sys, time, numpy as np
n = int(sys.argv[1]); a = np.ones(n, np.uint8); b = np.empty_like(a); best = 1e9
for _ in range(20):
    t = time.thread_time(); np.copyto(b, a); best = min(best, time.thread_time() - t)
print("%.4f" % (best * 1e9 / n))' "$(numfmt --from=iec "${SIZE^^}")")
[ "$PERF" = 0 ] || wait "${RECS[@]}" 2>/dev/null || true
MBS=$(echo "$FETCH" | sed -n 's/.* \([0-9.]*\) MB\/s.*/\1/p')
RPS=$(echo "$FETCH" | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p')

# passes NODE: the node's samples summed per pass (perf report, self time).
passes() {
    timeout 300 perf report -i "$W/$1.data" --no-children --sort dso,sym --stdio 2>/dev/null |
        awk '/^ +[0-9.]+%/ {
            p = $1; sub("%", "", p); d = $2; s = $NF
            if (s ~ /copy_(to|from)_iter|copy_user|rep_movs|memcpy_orig/) k = "kernel copy (socket)"
            else if (d ~ /libcrypto/) k = "payload tag / cipher (libcrypto)"
            else if (s ~ /^ghash/) k = "payload tag (ghash.c)"
            else if (d ~ /libxxhash/) k = "checksum (XXH3)"
            else if (s ~ /memset|clear_page/) k = "zeroing (scrub, fresh pages)"
            else if (s ~ /fault|handle_mm|do_anonymous|filemap/) k = "page faults"
            else if (s ~ /memmove|memcpy/) k = "user copy (memcpy)"
            else k = "other"
            t[k] += p
        } END { for (k in t) printf "    %-36s %5.1f%%\n", k, t[k] }' | sort -k1,1
    echo "    the top symbols:"
    timeout 300 perf report -i "$W/$1.data" --no-children --sort dso,sym --stdio 2>/dev/null |
        grep -E '^ +[0-9.]+%' | head -n 8 | sed 's/^ */      /'
}
{
    echo "# bench/profile-tcp-fetch.sh $LABEL $SO $SIZE $SECS ${MODULE_ARGS:+(MODULE_ARGS=$MODULE_ARGS)}  ($(date -u '+%Y-%m-%d %H:%M'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg))"
    echo "$LABEL: $FETCH"
    awk -v f="$MBS" -v i="$IPERF" -v l="$LABEL" -v r="$RPS" -v s="$SECS" -v a0="$CA0" \
        -v a1="$CA1" -v b0="$CB0" -v b1="$CB1" 'BEGIN {
            n = r * s
            printf "%s: fetch %s MB/s, one-stream iperf3 %s MB/s: %.2fx; CPU per fetch A %.0f us, B %.0f us (whole processes, the benchmark'"'"'s puts and deletes included)\n",
                l, f, i, f / i, (a1 - a0) * 1e6 / n, (b1 - b0) * 1e6 / n }'
    awk -v l="$LABEL" -v r="$RPS" -v s="$SECS" -v size="$(numfmt --from=iec "${SIZE^^}")" \
        -v a0="$EA0" -v a1="$EA1" -v b0="$EB0" -v b1="$EB1" -v m="$MEMCPY" 'BEGIN {
            bytes = r * s * size; a = (a1 - a0) * 1e9 / bytes; b = (b1 - b0) * 1e9 / bytes
            printf "%s: engine threads, CPU per byte: A (sending) %.3f ns, B (receiving) %.3f ns; memcpy %.3f ns/B (same run): A %.1f passes, B %.1f passes, both %.1f\n",
                l, a, b, m, a / m, b / m, (a + b) / m }'
    echo "$LABEL: iperf3's own CPU per byte (same run): sender $IPERF_TX_NS ns, receiver $IPERF_RX_NS ns"
    CSV=${OUT%.txt}.csv
    [ -s "$CSV" ] || echo "label,size,args,fetch_mbs,iperf3_mbs,ratio,cpu_a_us,cpu_b_us,engine_a_ns_per_b,engine_b_ns_per_b,memcpy_ns_per_b,iperf3_tx_ns_per_b,iperf3_rx_ns_per_b,load" >"$CSV"
    awk -v l="$LABEL" -v size="$SIZE" -v args="${MODULE_ARGS:-}" -v f="$MBS" -v i="$IPERF" \
        -v r="$RPS" -v s="$SECS" -v sz="$(numfmt --from=iec "${SIZE^^}")" -v a0="$CA0" -v a1="$CA1" \
        -v b0="$CB0" -v b1="$CB1" -v e0="$EA0" -v e1="$EA1" -v g0="$EB0" -v g1="$EB1" -v m="$MEMCPY" \
        -v load="$(cut -d' ' -f1 /proc/loadavg)" -v itx="$IPERF_TX_NS" -v irx="$IPERF_RX_NS" 'BEGIN {
            n = r * s; bytes = n * sz
            printf "%s,%s,%s,%s,%s,%.3f,%.0f,%.0f,%.4f,%.4f,%.4f,%s,%s,%s\n", l, size, args, f, i, f / i,
                (a1 - a0) * 1e6 / n, (b1 - b0) * 1e6 / n, (e1 - e0) * 1e9 / bytes,
                (g1 - g0) * 1e9 / bytes, m, itx, irx, load }' >>"$CSV"
    [ "$PERF" = 0 ] && exit 0
    for n in A B; do
        echo "  node $n (A: the owner, sending; B: fetching), share of its samples by pass:"
        passes "$n"
    done
} | tee -a "$OUT"
