#!/bin/sh
# create-zeroing.sh - what it costs that a created object reads as zeros.
#
# OBJ.CREATE clears only the bytes an earlier object left in the range it
# gets (the allocator tracks each free range's dirty prefix). This measures,
# on one node, per size:
#   clean: OBJ.CREATE into memory never used since start (nothing to clear);
#   dirty: OBJ.CREATE of one id, aborted (untimed) before the next: every
#          create lands on the bytes the previous one left, and clears them;
#   GET:   Redis GET of a plain key of the same size on the same server, the
#          reference for moving that many bytes once.
# Each figure is the p50 latency seen by the client and the server's CPU time
# per operation of its main thread (from /proc/<pid>/schedstat). Writes bench/results/create-zeroing.csv
# and prints a table. Usage: bench/create-zeroing.sh [ROUNDS] (default 200).
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-200}
NODES_WORK=${NODES_WORK:-$PWD/build/bench/create-zeroing}
. tests/lib/nodes.sh
nodesInit
trap nodesStopAll EXIT INT TERM

port=$(nodesFreePort)
nodeStart zero "$port" -- memory 1gb transfer-port 0
nodeWait zero
mkdir -p bench/results
/usr/bin/python3 - "$port" "$(nodePid zero)" "$ROUNDS" bench/results/create-zeroing.csv <<'PY'
import os, statistics, sys, time
import redis

port, pid, rounds, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r = redis.Redis(port=port)

def cpu():
    """CPU seconds of the server's main thread (ns resolution)."""
    return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e9

def timed(fn, n, after=None):
    """p50 latency and main-thread CPU per call of fn, in µs; after(i) runs
    untimed between calls."""
    lat, spent = [], 0.0
    for i in range(n):
        c0, t = cpu(), time.perf_counter()
        fn(i)
        lat.append(time.perf_counter() - t)
        spent += cpu() - c0
        if after:
            after(i)
    return statistics.median(lat) * 1e6, spent / n * 1e6

SIZES = (4096, 65536, 1 << 20, 16 << 20)
counts = {size: max(8, min(rounds, (128 << 20) // size)) for size in SIZES}
# Clean first, for every size (never-used memory, about 400 MiB in all),
# then everything is given back and the dirty and GET rounds follow.
clean = {size: timed(lambda i, s=size: r.execute_command("OBJ.CREATE", f"c{s}:{i}", s), counts[size])
         for size in SIZES}
for size in SIZES:
    for i in range(counts[size]):
        r.execute_command("OBJ.ABORT", f"c{size}:{i}")
rows = []
for size in SIZES:
    n = counts[size]
    r.execute_command("OBJ.CREATE", "d", size)   # leave bytes behind once
    r.execute_command("OBJ.WRITE", "d", 0, b"\xff" * min(size, 1 << 20))
    r.execute_command("OBJ.ABORT", "d")
    dirt = timed(lambda i: r.execute_command("OBJ.CREATE", "d", size), n,
                 after=lambda i: r.execute_command("OBJ.ABORT", "d"))
    r.set("plain", b"x" * size)
    get = timed(lambda i: r.get("plain"), n)
    r.delete("plain")
    rows.append((size, n, clean[size], dirt, get))

with open(out, "w") as f:
    f.write("size,rounds,create_clean_p50_us,create_clean_cpu_us,create_dirty_p50_us,"
            "create_dirty_cpu_us,get_p50_us,get_cpu_us\n")
    for size, n, c, d, g in rows:
        f.write(f"{size},{n},{c[0]:.1f},{c[1]:.1f},{d[0]:.1f},{d[1]:.1f},{g[0]:.1f},{g[1]:.1f}\n")
print("| size | create, clean: p50 µs / CPU µs | create, dirty: p50 / CPU | GET: p50 / CPU | dirty CPU / GET CPU |")
print("|---:|---:|---:|---:|---:|")
for size, n, c, d, g in rows:
    ratio = d[1] / g[1] if g[1] else float("nan")
    print(f"| {size} | {c[0]:.0f} / {c[1]:.0f} | {d[0]:.0f} / {d[1]:.0f} | {g[0]:.0f} / {g[1]:.0f} | {ratio:.2f} |")
PY
nodeStop zero
