#!/usr/bin/env python3
"""put.py - puts at memory speed (issue 29, part 1), one run on this machine, every
figure a ratio against a reference measured in the same run, the two alternated:

  1. Python, large: Client.put of a numpy uint8 array (16 MiB to 1 GiB) with 1 and 2
     copy threads, against one thread's np.copyto of the same bytes into a warm array.
     Each put is timed to its return; untimed after it, the node's background checksum
     is let finish, the object deleted and the scrub let finish, so every put starts
     on a quiet node (the node's CPU for that work is reported apart).
  2. Python, small: Client.put of 64 B to 64 KiB against redis-py SET of the same
     bytes, alternated call by call, each deleted (untimed) before the next, so puts
     reuse arena pages that exist: the ratio of median latencies.
  3. C, large: obj-benchmark -t memcpy,cput (objClientPut, --put-threads 1 and 2,
     back to back with no waiting: the background checksums and scrubs overlap the
     next puts, as in a busy writer) against its memcpy test (one thread, warm
     buffer); rounds alternate the three, ratios per round.
  4. C, small: obj-benchmark -t cput -c 1 (rounds of 100 ids, deleted between
     rounds) against redis-benchmark -t set -c 1 of the same size (one key,
     overwritten), alternated per round: the ratio of requests per second.

Writes bench/results/put.md (and put.csv). Usage:
    bench/put.sh [ROUNDS]     (default 3)
"""

import csv
import io
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))

import numpy as np  # noqa: E402
import redis  # noqa: E402

import objstore  # noqa: E402
from objhelpers import stats  # noqa: E402
from objnodes import ObjstoreServer, finish  # noqa: E402

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
LARGE = [16 * MIB, 64 * MIB, 256 * MIB, GIB]
SMALL = [64, 1 * KIB, 4 * KIB, 16 * KIB, 64 * KIB]
BENCH = os.path.join(REPO, "build", "bin", "obj-benchmark")


def human(n):
    for unit, s in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= s and n % s == 0:
            return f"{n // s} {unit}"
    return f"{n} B"


def node_cpu(rc):
    """CPU seconds of the node, every thread (INFO cpu)."""
    info = rc.info("cpu")
    return info["used_cpu_sys"] + info["used_cpu_user"]


def settle(rc, what):
    """Wait (untimed) until the node has no checksum pending / nothing to scrub."""
    deadline = time.monotonic() + 120
    while stats(rc)[what] != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not reach 0")
        time.sleep(0.002)


def py_large(c, rc, r, rounds):
    """{(size, threads): [put s]}, {size: [copyto s]}, {(size, threads): node cpu s/put}."""
    puts, copies, cpu = {}, {}, {}
    for size in LARGE:
        src = np.random.default_rng(size).integers(0, 255, size=size, dtype=np.uint8)
        dst = np.ones(size, np.uint8)
        reps = max(3, min(15, (256 * MIB) // size * 3)) * rounds // 3
        for threads in (1, 2):
            c.set_put_threads(threads)
            c.put("warm", src)  # maps and faults this range once
            settle(rc, "checksums_pending")
            c.delete("warm")
            settle(rc, "arena_dirty_free_bytes")
            node_s = 0.0
            for _ in range(reps):
                t0 = time.perf_counter()
                np.copyto(dst, src)
                copies.setdefault(size, []).append(time.perf_counter() - t0)
                n0 = node_cpu(r)
                t0 = time.perf_counter()
                c.put("p", src)
                puts.setdefault((size, threads), []).append(time.perf_counter() - t0)
                settle(rc, "checksums_pending")
                c.delete("p")
                settle(rc, "arena_dirty_free_bytes")
                node_s += node_cpu(r) - n0
            cpu[(size, threads)] = node_s / reps
        print(f"python large {human(size)} done", flush=True)
    c.set_put_threads(0)
    return puts, copies, cpu


def py_small(c, r, rounds):
    """{size: (median put s, median SET s)}, calls alternated."""
    out = {}
    n = 400 * rounds
    for size in SMALL:
        data = bytes(np.random.default_rng(size).integers(0, 255, size=size, dtype=np.uint8))
        tp, ts = [], []
        for i in range(n):
            t0 = time.perf_counter()
            c.put(f"s:{size}:{i}", data)
            tp.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            r.set(f"set:{size}:{i}", data)
            ts.append(time.perf_counter() - t0)
            # Untimed: each goes again, so the next put lands on arena pages that exist
            # (as SET's values land on memory its allocator reuses).
            c.delete(f"s:{size}:{i}")
            r.delete(f"set:{size}:{i}")
        out[size] = (statistics.median(tp), statistics.median(ts))
    return out


def bench_csv(args):
    """Rows of obj-benchmark --csv as dicts."""
    run = subprocess.run([BENCH, *args, "--csv"], capture_output=True, text=True, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"obj-benchmark {' '.join(args)}: {run.stderr.strip()}")
    return list(csv.DictReader(io.StringIO(run.stdout)))


def c_large(port, rounds):
    """{(size, name): [MB/s per round]} for memcpy, cput-1t, cput-2t, and the commands."""
    out, cmds = {}, []
    sizes = ",".join(f"{s // MIB}m" for s in LARGE)
    for _ in range(rounds):
        for t in (1, 2):
            tests = "memcpy,cput" if t == 1 else "cput"
            args = ["-p", str(port), "-c", "1", "-n", "24", "--keyspace", "4", "--seconds", "20",
                    "--sizes", sizes, "-t", tests, "--put-threads", str(t)]
            cmds.append("build/bin/obj-benchmark " + " ".join(args) + " --csv")
            for row in bench_csv(args):
                out.setdefault((int(row["size"]), row["test"]), []).append(float(row["mb_per_sec"]))
    print("C large done", flush=True)
    return out, cmds[:2]


def c_small(port, rounds):
    """{size: [(cput ops/s, SET ops/s) per round]} and the commands."""
    out, cmds = {}, []
    for _ in range(rounds):
        for size in SMALL:
            args = ["-p", str(port), "-c", "1", "-n", "4000", "--keyspace", "100", "-d", str(size),
                    "-t", "cput"]
            rows = bench_csv(args)
            rb = ["redis-benchmark", "-p", str(port), "-c", "1", "-n", "4000", "-d", str(size),
                  "-t", "set", "--csv"]
            run = subprocess.run(rb, capture_output=True, text=True, timeout=600, check=True)
            line = [row for row in csv.reader(io.StringIO(run.stdout)) if row and row[0] == "SET"]
            out.setdefault(size, []).append((float(rows[0]["ops_per_sec"]), float(line[0][1])))
            if not cmds:
                cmds = ["build/bin/obj-benchmark " + " ".join(args) + " --csv",
                        " ".join(rb)]
    print("C small done", flush=True)
    return out, cmds


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()
    return (f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python "
            f"{platform.python_version()}, numpy {np.__version__}; load average at the start "
            f"{load[0]:.1f} (the machine is shared with other work: compare ratios, not "
            f"absolute rates)")


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    out_dir = os.path.join(REPO, "bench", "results")
    where = machine()
    s = ObjstoreServer(memory="2gb", name="putbench")
    s.start()
    try:
        rc = s.client()
        r = redis.Redis(port=s.port)
        with objstore.connect("127.0.0.1", s.port) as c:
            assert c.zero_copy, "the bench needs the arena mapped (same machine)"
            small = py_small(c, r, rounds)
            puts, copies, cpu = py_large(c, rc, r, rounds)
        clarge, ccmds = c_large(s.port, rounds)
        csmall, scmds = c_small(s.port, rounds)
    finally:
        finish([s])

    rows = []
    md = ["# Puts at memory speed: put against memcpy and against SET", "",
          "Command: `bench/put.sh " + str(rounds) + "` (bench/put.py: one node of 2 GiB on "
          "loopback, started by the script).", "", "Machine: " + where + ".", "",
          "## Python: `Client.put` of a numpy array against `np.copyto` (one thread)", "",
          "Each put timed to its return; between puts (untimed) the node finishes the "
          "checksum, the object is deleted and the scrub finishes, so a put starts on a "
          "quiet node. Median seconds of alternated repetitions.", "",
          "| size | np.copyto MB/s | put, 1 thread MB/s | put, 2 threads MB/s | "
          "1 thread / copyto | 2 threads / copyto | node CPU per put (checksum + scrub), ms |",
          "|---|---|---|---|---|---|---|"]
    for size in LARGE:
        mc = statistics.median(copies[size])
        p1 = statistics.median(puts[(size, 1)])
        p2 = statistics.median(puts[(size, 2)])
        md.append(f"| {human(size)} | {size / mc / 1e6:.0f} | {size / p1 / 1e6:.0f} | "
                  f"{size / p2 / 1e6:.0f} | {mc / p1:.2f}x | {mc / p2:.2f}x | "
                  f"{cpu[(size, 1)] * 1e3:.1f} |")
        rows += [("py-large", size, "copyto", size / mc / 1e6), ("py-large", size, "put-1t",
                 size / p1 / 1e6), ("py-large", size, "put-2t", size / p2 / 1e6)]
    md += ["", "Targets: >= 0.9x with one thread, >= 1.3x with the copy threads.", "",
           "## Python: small `Client.put` against redis-py `SET` (one round trip each)", "",
           "| size | put p50 us | SET p50 us | put rate / SET rate |", "|---|---|---|---|"]
    for size in SMALL:
        tp, ts = small[size]
        md.append(f"| {human(size)} | {tp * 1e6:.0f} | {ts * 1e6:.0f} | {ts / tp:.2f}x |")
        rows += [("py-small", size, "put-us", tp * 1e6), ("py-small", size, "set-us", ts * 1e6)]
    md += ["", "Target: >= 1.0x.", "",
           "## C: `objClientPut` (obj-benchmark `cput`) against one thread's memcpy", "",
           "Puts back to back in rounds of 4 (1 of 1 GiB; the node's background checksums "
           "of earlier puts share the 2 CPUs with the copy threads); between rounds the ids "
           "are deleted and their scrub waited for, untimed, so later rounds reuse arena "
           "pages this process has mapped, as a writer that puts new versions does (the "
           "first round pays a page fault per 4 KiB). Medians over the runs of the per-run "
           "ratio.", "",
           "Commands (one round; rounds alternate them): `" + "`, `".join(ccmds) + "`", "",
           "| size | memcpy MB/s | cput 1 thread MB/s | cput 2 threads MB/s | "
           "1 thread / memcpy | 2 threads / memcpy |", "|---|---|---|---|---|---|"]
    for size in LARGE:
        m = clarge.get((size, "memcpy"), [])
        a = clarge.get((size, "cput-1t"), [])
        b = clarge.get((size, "cput-2t"), [])
        if not (m and a and b):
            continue
        ra = statistics.median(x / y for x, y in zip(a, m))
        rb = statistics.median(x / y for x, y in zip(b, m))
        md.append(f"| {human(size)} | {statistics.median(m):.0f} | {statistics.median(a):.0f} | "
                  f"{statistics.median(b):.0f} | {ra:.2f}x | {rb:.2f}x |")
        rows += [("c-large", size, "memcpy", statistics.median(m)),
                 ("c-large", size, "cput-1t", statistics.median(a)),
                 ("c-large", size, "cput-2t", statistics.median(b))]
    md += ["", "## C: small `objClientPut` against redis-benchmark `SET` (one client)", "",
           "Commands (one size; rounds alternate them): `" + "`, `".join(scmds) + "`", "",
           "| size | cput req/s | SET req/s | cput / SET |", "|---|---|---|---|"]
    for size in SMALL:
        pairs = csmall[size]
        ratio = statistics.median(a / b for a, b in pairs)
        md.append(f"| {human(size)} | {statistics.median(a for a, _ in pairs):.0f} | "
                  f"{statistics.median(b for _, b in pairs):.0f} | {ratio:.2f}x |")
        rows += [("c-small", size, "cput-ops", statistics.median(a for a, _ in pairs)),
                 ("c-small", size, "set-ops", statistics.median(b for _, b in pairs))]
    md.append("")
    with open(os.path.join(out_dir, "put.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(out_dir, "put.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["figure", "size", "what", "value"])
        w.writerows(rows)
    print("\n".join(md))


if __name__ == "__main__":
    main()
