#!/bin/bash
# read-pieces.sh - the pieces the TCP receive path is fed: the sizes read()
# returns on the fetching node while it fetches objects of SIZE over
# loopback (two nodes, FROM, one client), from the syscalls:sys_exit_read
# tracepoint (perf, needs root). The framer reads straight into the
# payload's destination in whatever read() returns (bounded by the payload
# left and TCP_BYTES_PER_EV, module/transfer/tcp.c), and both the payload
# MAC and the checksum are fed those pieces: bench/mac-cost.c replays them.
#
#   bench/read-pieces.sh [SIZES="64k 1m 16m"] [N=30]
#
# Prints, per size, the count and the bytes of reads by size class
# (power-of-two buckets, reads under 64 bytes left out: frames and
# requests), with this command, and appends it to bench/results/read-pieces.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=${1:-64k 1m 16m} N=${2:-30}
OUT=${BENCH_OUT:-$ROOT/bench/results}/read-pieces.txt
BENCH=$ROOT/build/bin/obj-benchmark SO=$ROOT/build/objstore.so
[ -x "$BENCH" ] && [ -f "$SO" ] || { echo "read-pieces: build first (make)" >&2; exit 1; }
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

w=$(mktemp -d "${TMPDIR:-/tmp}/read-pieces.XXXXXX")
mkdir -p "$w/A" "$w/B"
pa=$(port) pb=$(port) ta=$(port) tb=$(port)
(umask 077 && echo "objstore.cluster-secret rp" >"$w/secret.conf")
redis-server "$w/secret.conf" --port "$pa" --bind 127.0.0.1 --save '' --appendonly no --dir "$w/A" \
    --loadmodule "$SO" memory 1gb node-name A transfer-port "$ta" rdma-port 0 >"$w/A.log" 2>&1 &
a=$!
redis-server "$w/secret.conf" --port "$pb" --bind 127.0.0.1 --save '' --appendonly no --dir "$w/B" \
    --loadmodule "$SO" memory 1gb node-name B transfer-port "$tb" rdma-port 0 \
    directory "127.0.0.1:$pa" >"$w/B.log" 2>&1 &
b=$!
stop() { kill "$a" "$b" 2>/dev/null || true; wait "$a" "$b" 2>/dev/null || true; rm -rf "$w"; }
trap stop EXIT
for _ in $(seq 50); do
    timeout 2 redis-cli -p "$pb" ping >/dev/null 2>&1 && timeout 2 redis-cli -p "$pa" ping \
        >/dev/null 2>&1 && break
    sleep 0.1
done

{
    echo "# bench/read-pieces.sh $* ($(date -u +%Y-%m-%d), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "# read() sizes on the fetching node B, fetch over TCP FROM A, 1 client, $N objects per size"
    for size in $SIZES; do
        timeout 300 perf record -q -o "$w/perf.data" 2>"$w/perf.err" -e syscalls:sys_exit_read -p "$b" -- \
            timeout 300 "$BENCH" -p "$pb" --source-port "$pa" -t fetch --tcp --from A -c 1 \
            -n "$N" -d "$size" -q >"$w/bench.out" 2>&1 || cat "$w/bench.out" "$w/perf.err" >&2
        timeout 120 perf script -i "$w/perf.data" -F trace 2>/dev/null | /usr/bin/python3 -c '
import re, sys
size, cnt, by = sys.argv[1], {}, {}
for line in sys.stdin:
    m = re.search(r"(0x[0-9a-f]+|-?[0-9]+)\s*$", line)
    n = int(m.group(1), 0) if m else 0
    if n < 64 or n >= 1 << 63:  # frames, requests, and errors (EAGAIN)
        continue
    b = 1 << (n.bit_length() - 1)
    cnt[b] = cnt.get(b, 0) + 1
    by[b] = by.get(b, 0) + n
tc, tb = sum(cnt.values()), sum(by.values())
print(f"{size}: {tc} reads, {tb / 1e6:.1f} MB, mean {tb / max(tc, 1) / 1024:.0f} KiB")
for b in sorted(cnt):
    print(f"  {b:>9} ..: {cnt[b]:6} reads, {100 * by[b] / tb:5.1f} % of the bytes")
' "$size"
    done
} | tee -a "$OUT"
