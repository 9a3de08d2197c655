#!/bin/bash
# rdma-vs-perftest.sh - how close OBJ.FETCH VIA rdma comes to the raw verbs
# numbers of the same RDMA device. Run it where a device exists; on a machine
# without one, through the Soft-RoCE guest:
#
#   make all && tests/softroce/run.sh bench/rdma-vs-perftest.sh
#
# Reference: perftest on $OBJ_RXE_ADDR / $OBJ_RXE_DEV (server and client on the
# same device): ib_read_bw for the bandwidth sizes (objstore's large objects
# travel by RDMA READ, through a memory window bound for the transfer) and
# ib_write_lat for the latency sizes (objstore's small objects ride one RDMA
# WRITE_WITH_IMM into the peer's stream buffer). Measured: two objstore
# nodes, A owning the objects and B fetching them with OBJ.FETCH VIA rdma
# from a small Python client; B deletes its copy after every round (not
# timed) so that every round moves the bytes again. Then bench/mw-cost
# (build/bin/mw-cost) on the same device: what binding and invalidating the
# window costs per transfer, written to $BENCH_OUT/rdma-mw-cost.csv.
#
# Prints one table and writes it as CSV to $BENCH_OUT/rdma-vs-perftest.csv
# (default bench/results/ in the repository). Units: MiB/s (2^20 bytes per second,
# which is what perftest calls MB/sec) and microseconds. Ratios are
# objstore / perftest: bandwidth ratio below 1 and latency ratio above 1 show
# the cost of the store; /PING is the fetch p50 over a Redis PING p50 on B in
# the same run (the floor of any request through Redis); the latency sizes
# are also fetched with FROM A (the location hint: no directory lookup), in
# their own columns. Note ib_write_lat's t_typical is half a ping-pong
# round trip (one way), while an OBJ.FETCH p50 is a whole request: directory
# lookup, FETCH, transfer, checksum, seal, and the Redis round trip of the
# client. The objstore "engine" column is the node's own mean fetch time
# (rdma_fetch_latency_avg_us), without the client's Redis round trip.
#
# Every step is bounded (timeout around each tool, rounds and seconds per size).
# Knobs: BENCH_BW_SIZES="1048576 4194304 16777216" BENCH_LAT_SIZES="64 4096"
# BENCH_ROUNDS=20 (objstore rounds per size, at most) BENCH_SIZE_SECONDS=20
# (objstore time per size, at least 3 rounds) BENCH_REPEAT=2 (perftest runs
# per size; the best is kept, since other load only slows runs) BENCH_PORT=7420 (Redis ports
# BENCH_PORT+1, +2; transfer +10000; rdma +20000) BENCH_OUT=bench/results
# OBJSTORE_MODULE. Exits 0 when every measurement was taken, 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
ADDR=${OBJ_RXE_ADDR:-}
ADDR=${ADDR%%/*}
DEV=${OBJ_RXE_DEV:-}
BW_SIZES=${BENCH_BW_SIZES:-1048576 4194304 16777216}
LAT_SIZES=${BENCH_LAT_SIZES:-64 4096}
ROUNDS=${BENCH_ROUNDS:-20}
SIZE_SECONDS=${BENCH_SIZE_SECONDS:-20}
REPEAT=${BENCH_REPEAT:-2}
BASE=${BENCH_PORT:-7420}
OUT=${BENCH_OUT:-$ROOT/bench/results}
MODULE=${OBJSTORE_MODULE:-$ROOT/build/objstore.so}
TOOL_TIMEOUT=90
START_TIMEOUT=120

# Nodes are started through the shared launcher, which also brings the
# fail/tool/scratch/cleanup helpers.
NODES_PROG=rdma-vs-perftest
NODES_MODULE=$MODULE
NODES_START_TIMEOUT=$START_TIMEOUT
# shellcheck source=tests/lib/nodes.sh
. "$ROOT/tests/lib/nodes.sh"

[ -n "$ADDR" ] || nodesFail "OBJ_RXE_ADDR is not set (run: tests/softroce/run.sh $0)"
if [ -z "$DEV" ]; then
    for d in /sys/class/infiniband/*; do
        [ -e "$d" ] && DEV=${d##*/} && break
    done
fi
[ -n "$DEV" ] || nodesFail "no RDMA device (/sys/class/infiniband is empty)"
nodesNeedTools "apt-get install perftest redis-server redis-tools python3-redis" \
    ib_read_bw ib_write_lat redis-server redis-cli timeout stdbuf awk /usr/bin/python3
nodesNeedModule

nodesScratch rdma-bench || exit 1
WORK=$NODES_WORK

# ---- perftest -----------------------------------------------------------------------

# waitForText: wait until file $1 contains $2 while process $3 lives, at most
# TOOL_TIMEOUT seconds. Returns 0 when it appears, 1 otherwise.
waitForText() {
    local deadline=$((SECONDS + TOOL_TIMEOUT))
    while [ "$SECONDS" -lt "$deadline" ]; do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}

# perftestPair: run perftest tool $1 with message size $2 and $3 iterations as
# server and client on $ADDR, port $4. The client starts once the server says
# it waits, and is retried (at most five times, a second apart) while the
# server still waits, since the banner comes just before it listens. Prints
# the client's result line; returns 0, or 1 with the logs on stderr.
perftestPair() {
    local tool=$1 size=$2 iters=$3 port=$4 spid try rc=1
    local args=(-d "$DEV" -F -s "$size" -n "$iters" -p "$port")
    local slog=$WORK/$tool.$size.server clog=$WORK/$tool.$size.client
    stdbuf -oL timeout "$TOOL_TIMEOUT" "$tool" "${args[@]}" >"$slog" 2>&1 &
    spid=$!
    waitForText "$slog" "Waiting for client" "$spid" || true
    for try in 1 2 3 4 5; do
        echo "--- attempt $try" >>"$WORK/attempts"
        sleep 1
        kill -0 "$spid" 2>/dev/null || break
        timeout "$TOOL_TIMEOUT" "$tool" "${args[@]}" "$ADDR" >"$clog" 2>&1
        rc=$?
        [ "$rc" -ne 0 ] || break
    done
    [ "$rc" -eq 0 ] || kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    if [ "$rc" -ne 0 ]; then
        echo "rdma-vs-perftest: $tool -s $size failed (status $rc):" >&2
        tail -n 5 "$clog" "$slog" | sed 's/^/  | /' >&2
        return 1
    fi
    awk -v s="$size" -v n="$iters" '$1 == s && $2 == n' "$clog" | tail -n 1
}

# bwIters / latIters: iterations for a size, so that one run moves about
# 32 MiB (at least 5, at most 1000 messages) - Soft-RoCE under emulation does
# a few MiB/s.
bwIters() {
    local n=$((32 * 1048576 / $1))
    [ "$n" -ge 5 ] || n=5
    [ "$n" -le 1000 ] || n=1000
    echo "$n"
}

# bestOf: run perftestPair "$@" REPEAT times and print the best result line by
# column $5 of this function's arguments (best = "max" or "min"): other load on
# the machine can only make a run look worse. Returns 1 when no run worked.
bestOf() {
    local col=$5 best=$6 r line out=""
    for r in $(seq "$REPEAT"); do
        line=$(perftestPair "$1" "$2" "$3" $(($4 + r))) || continue
        out=$(printf '%s\n%s\n' "$out" "$line" | awk -v c="$col" -v b="$best" 'NF {
            if (keep == "" || (b == "max" ? $c > v : $c < v)) { keep = $0; v = $c } }
            END { print keep }')
    done
    [ -n "$out" ] && echo "$out"
}

PERF=$WORK/perftest.txt
: >"$PERF"
status=0
port=$((BASE + 30000))
echo "rdma-vs-perftest: device $DEV, address $ADDR; perftest first (best of $REPEAT)"
for size in $BW_SIZES; do
    port=$((port + 10))
    # #bytes #iterations BW_peak BW_average MsgRate: the best BW_average
    line=$(bestOf ib_read_bw "$size" "$(bwIters "$size")" "$port" 4 max) || {
        status=1
        continue
    }
    echo "$line" | awk '{ print "bw", $1, $4 }' >>"$PERF"
    echo "  ib_read_bw   $size: $(echo "$line" | awk '{ print $4 }') MiB/s"
done
for size in $LAT_SIZES; do
    port=$((port + 10))
    # #bytes #iterations t_min t_max t_typical t_avg ...: the best t_typical
    line=$(bestOf ib_write_lat "$size" 1000 "$port" 5 min) || {
        status=1
        continue
    }
    echo "$line" | awk '{ print "lat", $1, $5 }' >>"$PERF"
    echo "  ib_write_lat $size: $(echo "$line" | awk '{ print $5 }') us typical"
done

# ---- objstore -------------------------------------------------------------------------

# What the two nodes (nodeA on port $A, nodeB on $B; B's directory is A's
# Redis) are started with besides their addresses (tests/lib/nodes.sh).
NODE_ARGS=(memory 48mb cluster-secret bench fetch-timeout 120000)

A=$((BASE + 1))
B=$((BASE + 2))
echo "rdma-vs-perftest: objstore nodes A (:$A) and B (:$B)"
nodeStartRdma nodeA "$A" "$ADDR" "" node-name A "${NODE_ARGS[@]}"
nodeStartRdma nodeB "$B" "$ADDR" "$A" node-name B "${NODE_ARGS[@]}"
nodeWaitRdma nodeA && nodeWaitRdma nodeB || exit 1

mkdir -p "$OUT" || nodesFail "cannot create $OUT"
CSV=$OUT/rdma-vs-perftest.csv
MODE=native
[ "${OBJ_SOFTROCE_GUEST:-0}" = 1 ] && MODE=softroce-guest

timeout $((SIZE_SECONDS * 8 + 120)) /usr/bin/python3 - "$A" "$B" "$PERF" "$CSV" "$MODE" "$DEV" \
    "$ROUNDS" "$SIZE_SECONDS" "$BW_SIZES" "$LAT_SIZES" <<'EOF'
"""Fetch objects of each size VIA rdma from A to B, round after round, and print
the comparison with the perftest numbers collected before."""
import statistics
import sys
import time

import redis

port_a, port_b, perf_path, csv_path, mode, dev = sys.argv[1:7]
max_rounds, size_seconds = int(sys.argv[7]), float(sys.argv[8])
bw_sizes = [int(s) for s in sys.argv[9].split()]
lat_sizes = [int(s) for s in sys.argv[10].split()]
sizes = sorted(set(bw_sizes) | set(lat_sizes))
MIB = 1 << 20
PATTERN = bytes(range(251)) * (MIB // 251 + 1)  # 251: no period that divides a power of two

a = redis.Redis(port=int(port_a), socket_timeout=180)
b = redis.Redis(port=int(port_b), socket_timeout=180)


def stat(client, field):
    raw = client.execute_command("OBJ.STATS")
    d = dict(zip(raw[0::2], raw[1::2]))
    return int(d[field.encode()])


def put(oid, size):
    """OBJ.CREATE + a write into A's arena file + OBJ.SEAL (no payload through Redis)."""
    raw = a.execute_command("OBJ.CREATE", oid, size)
    off = int(dict(zip(raw[0::2], raw[1::2]))[b"offset"])
    path = dict(zip(*[iter(a.execute_command("OBJ.STATS"))] * 2))[b"arena_path"].decode()
    block = PATTERN[:min(size, MIB)]
    with open(path, "r+b") as f:
        f.seek(off)
        left = size
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
    assert a.execute_command("OBJ.SEAL", oid) == b"OK"


def fetch(oid, hint=None):
    args = ["FROM", hint] if hint else []
    reply = b.execute_command("OBJ.FETCH", oid, "TIMEOUT", 120000, "VIA", "rdma", *args)
    if reply != [b"OK"]:
        raise SystemExit(f"OBJ.FETCH {oid} VIA rdma: {reply!r}")


def wait_located(oid):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            b.execute_command("OBJ.LOCATE", oid)
            return
        except redis.ResponseError:
            time.sleep(0.05)
    raise SystemExit(f"{oid} never reached the directory")


def ping_p50_us(client, n=300):
    """p50 of a Redis PING on client's node: the floor of any request through Redis."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.execute_command("PING")
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


ping_us = ping_p50_us(b)
print(f"  PING on B: p50 {ping_us:.0f} us", flush=True)
results = {}
for size in sizes:
    oid = f"bench:{size}"
    put(oid, size)
    wait_located(oid)
    for attempt in range(3):  # warm-up: connection set-up is not timed
        try:
            fetch(oid)
            break
        except SystemExit as e:
            # A refused first connection is a bug the RDMA suite reports; here it
            # only costs a retry, but say so.
            print(f"  warning: warm-up attempt {attempt + 1}: {e}", flush=True)
    else:
        raise SystemExit(f"{oid}: the warm-up fetch failed three times")
    b.execute_command("OBJ.DEL", oid)
    n0 = stat(b, "rdma_fetches")
    s0 = stat(b, "rdma_fetch_latency_avg_us") * n0
    times = []
    start = time.monotonic()
    while len(times) < max_rounds and (len(times) < 3 or time.monotonic() - start < size_seconds):
        t0 = time.perf_counter()
        fetch(oid)
        times.append(time.perf_counter() - t0)
        b.execute_command("OBJ.DEL", oid)
    n1 = stat(b, "rdma_fetches")
    s1 = stat(b, "rdma_fetch_latency_avg_us") * n1
    engine_us = (s1 - s0) / (n1 - n0) if n1 > n0 else float("nan")
    # The small sizes again with FROM A: the location hint, no directory lookup.
    from_times = []
    start = time.monotonic()
    while size in lat_sizes and len(from_times) < max_rounds and \
            (len(from_times) < 3 or time.monotonic() - start < size_seconds):
        t0 = time.perf_counter()
        fetch(oid, "A")
        from_times.append(time.perf_counter() - t0)
        b.execute_command("OBJ.DEL", oid)
    a.execute_command("OBJ.DEL", oid)
    results[size] = {
        "rounds": len(times),
        "mibps": size * len(times) / sum(times) / MIB,
        "p50_us": statistics.median(times) * 1e6,
        "from_p50_us": statistics.median(from_times) * 1e6 if from_times else None,
        "engine_us": engine_us,
    }
    print(f"  objstore     {size}: {len(times)} rounds, p50 {results[size]['p50_us']:.0f} us,"
          f" {results[size]['mibps']:.2f} MiB/s" +
          (f"; FROM A p50 {results[size]['from_p50_us']:.0f} us" if from_times else ""),
          flush=True)

perf_bw, perf_lat = {}, {}
with open(perf_path) as f:
    for line in f:
        kind, size, value = line.split()
        (perf_bw if kind == "bw" else perf_lat)[int(size)] = float(value)


def fmt(v, spec):
    """v formatted, or a dash as wide as the spec's width."""
    width = int(spec.split(".")[0])
    return f"{'-':>{width}}" if v is None else format(v, spec)


def human(n):
    for unit, div in (("MiB", MIB), ("KiB", 1024)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


rows = []
for size in sizes:
    r = results[size]
    bw = perf_bw.get(size) if size in bw_sizes else None
    lat = perf_lat.get(size) if size in lat_sizes else None
    rows.append({
        "size_bytes": size,
        "ib_read_bw_MiBps": bw,
        "objstore_MiBps": r["mibps"],
        "bw_ratio": r["mibps"] / bw if bw else None,
        "ib_write_lat_typical_us": lat,
        "objstore_p50_us": r["p50_us"],
        "lat_ratio": r["p50_us"] / lat if lat else None,
        "ping_p50_us": ping_us,
        "ping_ratio": r["p50_us"] / ping_us,
        "from_p50_us": r["from_p50_us"],
        "from_ping_ratio": r["from_p50_us"] / ping_us if r["from_p50_us"] else None,
        "objstore_engine_avg_us": r["engine_us"],
        "objstore_rounds": r["rounds"],
    })

head = (f"{'size':>8} | {'ib_read_bw':>10} {'objstore':>9} {'ratio':>6} | "
        f"{'ib_write_lat':>12} {'objstore p50':>12} {'ratio':>7} {'/PING':>6} "
        f"{'FROM p50':>9} {'/PING':>6} | "
        f"{'engine avg':>10} {'rounds':>6}")
print()
print(f"OBJ.FETCH VIA rdma vs perftest on {dev} ({mode}); bandwidth in MiB/s, latency in us")
print(head)
print("-" * len(head))
for r in rows:
    print(f"{human(r['size_bytes']):>8} | {fmt(r['ib_read_bw_MiBps'], '10.2f')} "
          f"{r['objstore_MiBps']:9.3f} {fmt(r['bw_ratio'], '6.3f')} | "
          f"{fmt(r['ib_write_lat_typical_us'], '12.1f')} {r['objstore_p50_us']:12.0f} "
          f"{fmt(r['lat_ratio'], '7.1f')} {r['ping_ratio']:6.1f} {fmt(r['from_p50_us'], '9.0f')} "
          f"{fmt(r['from_ping_ratio'], '6.1f')} | {r['objstore_engine_avg_us']:10.0f} "
          f"{r['objstore_rounds']:6d}")

cols = ["size_bytes", "ib_read_bw_MiBps", "objstore_MiBps", "bw_ratio", "ib_write_lat_typical_us",
        "objstore_p50_us", "lat_ratio", "ping_p50_us", "ping_ratio", "objstore_engine_avg_us",
        "objstore_rounds", "from_p50_us", "from_ping_ratio"]
with open(csv_path, "w") as f:
    f.write(",".join(cols + ["mode", "device"]) + "\n")
    for r in rows:
        vals = ["" if r[c] is None else (f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]))
                for c in cols]
        f.write(",".join(vals + [mode, dev]) + "\n")
print(f"\nwritten: {csv_path}")
EOF
rc=$?
[ "$rc" -eq 0 ] || {
    echo "rdma-vs-perftest: the objstore measurement failed (status $rc); node logs:" >&2
    grep -h '<objstore>' "$WORK"/node*.log | tail -n 20 | sed 's/^/  | /' >&2
    exit 1
}

# ---- the cost of a scoped read key ------------------------------------------------------
MWCOST=$ROOT/build/bin/mw-cost
if [ -x "$MWCOST" ]; then
    echo "rdma-vs-perftest: window bind + invalidate per transfer (build/bin/mw-cost)"
    {
        echo "# command: tests/softroce/run.sh bench/rdma-vs-perftest.sh ($MODE, $DEV)"
        timeout $((TOOL_TIMEOUT * 4)) "$MWCOST" --iters 1000 --sizes "$BW_SIZES" "$DEV"
    } >"$OUT/rdma-mw-cost.csv" || {
        echo "rdma-vs-perftest: mw-cost failed" >&2
        status=1
    }
    sed 's/^/  /' "$OUT/rdma-mw-cost.csv"
else
    echo "rdma-vs-perftest: $MWCOST is missing (make test-programs): no window cost" >&2
    status=1
fi
[ "$status" -eq 0 ] || echo "rdma-vs-perftest: some measurements failed (see above)" >&2
exit "$status"
