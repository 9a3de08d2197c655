#!/usr/bin/env python3
"""spill.py - the spill tier's figures (docs/tiers.md), one run on this machine:

  1. spill and restore MB/s against a plain sequential write and read of the same
     file system (dd oflag=direct / iflag=direct, 1 MiB blocks);
  2. p50 latency of OBJ.GET and OBJ.PIN(+RELEASE) of a 1 MiB object in memory and
     spilled (restored into free arena room; and with a full arena, where each
     restore first spills another object);
  3. a Zipf workload over a working set 4x the arena (256 KiB objects): the share of
     reads served from memory and the throughput, policy `hot` (recency and
     frequency) against `lru` (recency alone); plain, and with one-time scans mixed in.

Writes bench/results/spill.csv and spill.md with the command. Usage:
    bench/spill.sh [SPILL_DIR]      (default: a fresh directory under /var/tmp)
"""

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))

from objhelpers import MIB, info, stats, to_str  # noqa: E402
from objnodes import ObjstoreServer, finish  # noqa: E402

KIB = 1 << 10


def blob(i, size=MIB):
    stamp = b"%015d|" % i
    return (stamp * (size // len(stamp) + 1))[:size]


def dd_mbps(args):
    """MB/s that dd reports (its last line, 'N bytes ... copied, T s, R MB/s')."""
    out = subprocess.run(["dd", *args, "status=progress"], capture_output=True, text=True,
                         check=True, timeout=300).stderr.strip().splitlines()[-1]
    nbytes, secs = int(out.split()[0]), float(out.split(",")[-2].split()[0])
    return nbytes / secs / 1e6


def drop_cache(paths):
    """Evict these files' pages from the page cache (reads then come from the device)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def tier_files(c):
    d = to_str(stats(c)["tier_path"])
    return [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".spill")]


def server(spill_dir, memory="64mb", policy="hot"):
    return ObjstoreServer(memory=memory, name="bench",
                          module_args=("spill-dir", spill_dir, "spill-policy", policy)).start()


def p50_us(fn, n):
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


def bandwidth(spill_dir, rows):
    path = os.path.join(spill_dir, "dd.bin")
    w = dd_mbps(["if=/dev/zero", f"of={path}", "bs=1M", "count=256", "oflag=direct"])
    r = dd_mbps([f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct"])
    os.unlink(path)
    s = server(spill_dir)
    try:
        c = s.client()
        t0 = time.perf_counter()
        for i in range(320):  # 256 MiB past the 64 MiB arena
            c.obj("OBJ.PUT", b"bw:%d" % i, blob(i))
        wall_put = time.perf_counter() - t0
        st = stats(c)
        drop_cache(tier_files(c))
        before = stats(c)
        spilled = [i for i in range(320) if info(c, b"bw:%d" % i)["tier"] == b"spilled"]
        for i in range(64):  # make free room, so that a restore needs no spill
            if i not in spilled:
                c.obj("OBJ.DEL", b"bw:%d" % i)
        t0 = time.perf_counter()
        n = 0
        for i in spilled[:60]:
            c.obj("OBJ.GET", b"bw:%d" % i)
            n += 1
        wall_get = time.perf_counter() - t0
        after = stats(c)
        rb = after["restore_bytes"] - before["restore_bytes"]
        rows += [
            ("bandwidth", "dd write oflag=direct 1 MiB blocks", "MB/s", round(w)),
            ("bandwidth", "spill (worker, through the page cache)", "MB/s", st["spill_mbps"]),
            ("bandwidth", "puts past the arena, wall clock (put + spill)", "MB/s",
             round(320 * MIB / wall_put / 1e6)),
            ("bandwidth", "dd read iflag=direct 1 MiB blocks", "MB/s", round(r)),
            ("bandwidth", "restore from the device (worker: read + checksum)", "MB/s",
             after["restore_mbps"]),
            ("bandwidth", "GET of spilled objects, wall clock (restore + reply)", "MB/s",
             round(rb / wall_get / 1e6) if n else 0),
        ]
    finally:
        finish([s])


def latency(spill_dir, rows):
    s = server(spill_dir)
    try:
        c = s.client()
        for i in range(200):
            c.obj("OBJ.PUT", b"lat:%d" % i, blob(i))
        mem = [i for i in range(200) if info(c, b"lat:%d" % i)["tier"] == b"memory"]
        spilled = [i for i in range(200) if info(c, b"lat:%d" % i)["tier"] == b"spilled"]
        rows.append(("latency", "GET 1 MiB in memory", "p50 us",
                     round(p50_us(lambda k: c.obj("OBJ.GET", b"lat:%d" % mem[k % 8]), 200))))

        def pin(k, ids):
            c.obj("OBJ.PIN", b"lat:%d" % ids[k])
            c.obj("OBJ.RELEASE", b"lat:%d" % ids[k])

        rows.append(("latency", "PIN+RELEASE 1 MiB in memory", "p50 us",
                     round(p50_us(lambda k: pin(k % 8, mem), 200))))
        # full arena: each restore spills another object first
        rows.append(("latency", "GET 1 MiB spilled, full arena (spill + restore)", "p50 us",
                     round(p50_us(lambda k: c.obj("OBJ.GET", b"lat:%d" % spilled[k]), 40))))
        rows.append(("latency", "PIN+RELEASE 1 MiB spilled, full arena", "p50 us",
                     round(p50_us(lambda k: pin(40 + k, spilled), 40))))
        for i in range(200):  # free room: a restore needs no spill
            if info(c, b"lat:%d" % i)["tier"] == b"memory":
                c.obj("OBJ.DEL", b"lat:%d" % i)
        rest = [i for i in spilled[80:] if info(c, b"lat:%d" % i)["tier"] == b"spilled"]
        rows.append(("latency", "GET 1 MiB spilled, free room (restore)", "p50 us",
                     round(p50_us(lambda k: c.obj("OBJ.GET", b"lat:%d" % rest[k]), 20))))
        rows.append(("latency", "PIN+RELEASE 1 MiB spilled, free room", "p50 us",
                     round(p50_us(lambda k: pin(20 + k, rest), 20))))
    finally:
        finish([s])


def zipf(spill_dir, rows, policy, scans):
    size, n, ops = 256 * KIB, 1024, 20000  # 256 MiB working set, 4x the 64 MiB arena
    s = server(spill_dir, policy=policy)
    try:
        c = s.client()
        for i in range(n):
            c.obj("OBJ.PUT", b"z:%d" % i, blob(i, size))
        rng = random.Random(11)
        weights = [1.0 / (k + 1) ** 1.0 for k in range(n)]
        seq = rng.choices(range(n), weights=weights, k=ops)
        if scans:  # every 2000 reads, a one-time scan of 64 objects from the cold tail
            out = []
            for k in range(0, ops, 2000):
                out += seq[k:k + 2000] + rng.sample(range(n // 2, n), 64)
            seq = out
        before = stats(c)
        t0 = time.perf_counter()
        for k in seq:
            c.obj("OBJ.GET", b"z:%d" % k)
        wall = time.perf_counter() - t0
        after = stats(c)
        mem = after["reads_from_memory"] - before["reads_from_memory"]
        tier = after["reads_from_tier"] - before["reads_from_tier"]
        label = "zipf s=1.0" + (" + scans" if scans else "")
        rows.append(("zipf", f"{label}, policy {policy}: reads from memory", "%",
                     round(100.0 * mem / (mem + tier), 1)))
        rows.append(("zipf", f"{label}, policy {policy}: throughput", "GET/s",
                     round(len(seq) / wall)))
    finally:
        finish([s])


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else None
    spill_dir = tempfile.mkdtemp(prefix="objstore-spill-bench-", dir=base or "/var/tmp")
    rows = []
    try:
        bandwidth(spill_dir, rows)
        latency(spill_dir, rows)
        for scans in (False, True):
            for policy in ("hot", "lru"):
                zipf(spill_dir, rows, policy, scans)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)
    fs = subprocess.run(["df", "-T", base or "/var/tmp"], capture_output=True,
                        text=True).stdout.splitlines()[-1].split()
    outdir = os.environ.get("BENCH_OUT") or os.path.join(REPO, "bench", "results")
    with open(os.path.join(outdir, "spill.csv"), "w") as f:
        f.write("part,what,unit,value\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    with open(os.path.join(outdir, "spill.md"), "w") as f:
        f.write("# The spill tier: bandwidth, latency, hot set\n\n")
        cmd = "bench/spill.sh" + (f" {base}" if base else "")
        f.write(f"Command: `{cmd}`\n\n")
        f.write(f"Spill directory on a {fs[1]} file system ({fs[0]}); one node on loopback, "
                f"64 MiB arena, one run; {os.cpu_count()} CPUs shared with other work.\n\n")
        f.write("| part | what | unit | value |\n|---|---|---|---|\n")
        for r in rows:
            f.write("| " + " | ".join(str(x) for x in r) + " |\n")
    for r in rows:
        print(*r, sep="\t")


if __name__ == "__main__":
    main()
