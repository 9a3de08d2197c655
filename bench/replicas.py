"""Copies, repair and drain on rate-limited links, each against a reference of the same run.

Nodes live in network namespaces of their own (tests/lib/netns.py), each behind a tc tbf
link of RATE in both directions (burst 512 KiB, latency 100 ms) to one bridge. Four
figures, each a ratio taken within one run:

1. put: a put of SIZE with REPLICAS 2 and 3 on 4 nodes, against the same put with
   REPLICAS 1 plus one pair's fetch of it (what a writer pays to have one more copy by
   hand). Target at most 1.2x: the copies pipeline over the relay chain.
2. repair: 8 nodes; n7 holds REPAIR_MIB of two-copy objects (its primaries, their other
   copies spread over n0..n6) and is killed with SIGKILL. The whole repair's rate (the
   bytes of the objects over the time from the first repair byte to every object having
   two live holders) against one pair's transfer rate on the same links. Target at least
   3x (repair spread over sources and destinations).
3. p50 during repair: small puts (on n1) and fetches (n2 fetching n1's objects) in a
   loop, their medians while the repair runs against before it. Target at most 1.5x.
4. drain: 4 nodes; n0 holds DRAIN_MIB of objects; OBJ.DRAIN WAIT against one pair's
   fetch of the same objects (n1 fetching them all in one OBJ.FETCH). Target at most
   1.3x.

CPU: utime + stime of every node from /proc (clock ticks: about +-10 %), per byte moved
(the put figure: per byte of the copies made). The host's load average is written with
every row: the servers of a lab share this host's cores, so a loaded host slows them.
Appends rows to OUT.csv and a section to OUT.md. Called by bench/replicas.sh.
"""

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))

from netns import NetnsCluster  # noqa: E402
from objhelpers import pairs, to_int, to_str  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20
OBJ_MIB = 16  # the repair and drain figures move objects of this size


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


def lab_cpu(lab):
    return sum(cpu_seconds(n.proc.pid) for n in lab.nodes.values() if n.alive())


def load1():
    return round(os.getloadavg()[0], 1)


def client(lab, name, timeout=900.0):
    return lab[name].new_client(timeout)


def blob(size, tag):
    """size bytes, distinct per tag (the first 8 bytes), cheap to make."""
    base = blob.cache.get(size)
    if base is None:
        base = blob.cache[size] = os.urandom(size)
    return tag.to_bytes(8, "little") + base[8:]


blob.cache = {}


def stop_lab(lab, what):
    report = lab.stop()
    if report:
        print(f"{what}: the nodes left problems behind:\n{report}", file=sys.stderr)


def timed(fn):
    t0 = time.monotonic()
    r = fn()
    return time.monotonic() - t0, r


def wait_listed(c, oid, bound=60.0):
    """Until the directory lists oid (a put's publish is asynchronous)."""
    end = time.monotonic() + bound
    while time.monotonic() < end:
        try:
            c.execute_command("OBJ.LOCATE", oid)
            return
        except Exception:
            time.sleep(0.01)
    raise RuntimeError(f"{oid!r} not listed within {bound:.0f} s")


def row(figure, measured, reference, unit, ratio, target, met, cpu, cpu_unit, load, note=""):
    return {"figure": figure, "measured": round(measured, 3), "reference": round(reference, 3),
            "unit": unit, "ratio": round(ratio, 2), "target": target,
            "met": "yes" if met else "no", "cpu": round(cpu, 3), "cpu_unit": cpu_unit,
            "load1": load, "note": note}


# ---- 1. put with copies ------------------------------------------------------------------

def figure_put(rate, size, rounds):
    lab = NetnsCluster(4, rate=rate, memory=f"{max(512, 6 * size // MIB)}mb", burst="512kb",
                       latency="100ms")
    lab.start()
    try:
        c0, c1 = client(lab, "n1"), client(lab, "n2")
        times = {"ref": [], 2: [], 3: []}
        cpu = {"ref": 0.0, 2: 0.0, 3: 0.0}
        load = load1()
        for r in range(rounds):
            data = blob(size, r)
            oid = b"r1-%d" % r
            k0 = lab_cpu(lab)
            t_put, _ = timed(lambda: c0.execute_command("OBJ.PUT", oid, data))
            cpu_put = lab_cpu(lab) - k0
            wait_listed(c1, oid)  # the publish is asynchronous: not part of either time
            k0 = lab_cpu(lab) - cpu_put
            t_pair, rep = timed(lambda: c1.execute_command("OBJ.FETCH", oid, "TIMEOUT", 600000))
            assert rep == [b"OK"], rep
            cpu["ref"] += lab_cpu(lab) - k0
            times["ref"].append(t_put + t_pair)
            c1.execute_command("OBJ.DEL", oid)
            c0.execute_command("OBJ.DEL", oid)
            for k in (2, 3):
                oid = b"r%d-%d" % (k, r)
                k0 = lab_cpu(lab)
                t, n = timed(lambda: c0.execute_command("OBJ.PUT", oid, data, "REPLICAS", k,
                                                        "WAIT", 600000))
                assert n == k, f"REPLICAS {k} answered {n!r}"
                cpu[k] += lab_cpu(lab) - k0
                times[k].append(t)
                c0.execute_command("OBJ.DEL", oid)  # a holder's delete purges every copy
                time.sleep(0.5)  # the purge reaches the holders before the next round
        ref = statistics.median(times["ref"])
        out = []
        for k in (2, 3):
            t = statistics.median(times[k])
            out.append(row(f"put {size // MIB} MiB, REPLICAS {k}, 4 nodes", t, ref, "s",
                           t / ref, "<= 1.2", t / ref <= 1.2,
                           cpu[k] * 1e9 / (rounds * (k - 1) * size), "ns/B of copies", load,
                           f"median of {rounds}; reference: put REPLICAS 1 + one pair's "
                           f"fetch (cpu {cpu['ref'] * 1e9 / (rounds * size):.2f} ns/B); "
                           f"runs {[round(x, 2) for x in times[k]]} against "
                           f"{[round(x, 2) for x in times['ref']]}"))
        return out
    finally:
        stop_lab(lab, "put figure")


# ---- 2 and 3. repair, and latency during it ------------------------------------------------

class Probe:
    """Small puts on n2 and fetches of them on n3 in a loop: (start, seconds) of each
    (a fetch starts once the directory lists the object)."""

    def __init__(self, lab):
        self.lab = lab
        self.puts, self.fetches = [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.serial = 0

    def run(self):
        cw, cr = client(self.lab, "n2", 60.0), client(self.lab, "n3", 60.0)
        data = os.urandom(64 << 10)
        while not self.stop.is_set():
            self.serial += 1
            oid = b"probe-%d" % self.serial
            t0 = time.monotonic()
            cw.execute_command("OBJ.PUT", oid, data)
            t1 = time.monotonic()
            self.puts.append((t0, t1 - t0))
            wait_listed(cr, oid)  # the publish is asynchronous: not part of the fetch
            t1 = time.monotonic()
            r = cr.execute_command("OBJ.FETCH", oid, "TIMEOUT", 60000)
            t2 = time.monotonic()
            if r == [b"OK"]:
                self.fetches.append((t1, t2 - t1))
            for c in (cr, cw):
                try:
                    c.execute_command("OBJ.DEL", oid)
                except Exception:
                    pass
            self.stop.wait(0.02)

    def medians(self, t0, t1):
        p = [d for s, d in self.puts if t0 <= s and s + d <= t1]
        f = [d for s, d in self.fetches if t0 <= s and s + d <= t1]
        return (statistics.median(p) if p else float("nan"),
                statistics.median(f) if f else float("nan"), len(p), len(f))


def all_repaired(c, oids, dead):
    for oid in oids:
        try:
            d = pairs(c.execute_command("OBJ.LOCATE", oid))
        except Exception:
            return False
        prot = [to_str(x) for x in d["protected"]]
        if len(prot) < 2 or dead in prot:
            return False
    return True


def figure_repair(rate, total, pair_size):
    count = total // (OBJ_MIB * MIB)
    per_node = f"{max(512, 3 * total // 7 // MIB + 2 * pair_size // MIB + 128)}mb"
    lab = NetnsCluster(8, rate=rate, memory=per_node, burst="512kb", latency="100ms",
                       extra_args=["repair-interval", "1000"],
                       node_memory={"n8": f"{total // MIB + 256}mb"})
    lab.start()
    try:
        victim, names = "n8", [f"n{i}" for i in range(1, 8)]
        cv = client(lab, victim)
        oids = []
        for i in range(count):
            oid = b"rep-%d" % i
            n = cv.execute_command("OBJ.PUT", oid, blob(OBJ_MIB * MIB, 1000 + i),
                                   "REPLICAS", 2, "WAIT", 600000)
            assert n == 2, f"{oid}: {n!r}"
            oids.append(oid)
        # One pair's transfer rate on the same links: n1 fetches a fresh object from n2.
        c1, c2 = client(lab, "n1"), client(lab, "n2")
        c2.execute_command("OBJ.PUT", b"pair", blob(pair_size, 7))
        wait_listed(c1, b"pair")
        t_pair, rep = timed(lambda: c1.execute_command("OBJ.FETCH", b"pair", "TIMEOUT", 600000))
        assert rep == [b"OK"], rep
        pair_rate = pair_size / t_pair
        c1.execute_command("OBJ.DEL", b"pair")
        c2.execute_command("OBJ.DEL", b"pair")

        probe = Probe(lab)
        probe.thread.start()
        time.sleep(6.0)  # the baseline: probes without repair
        base_t1 = time.monotonic()
        load = load1()
        clients = {n: client(lab, n, 30.0) for n in names}

        def repair_stats():
            """(repair_bytes, repairs_in_flight) summed over the survivors."""
            st = [pairs(c.execute_command("OBJ.STATS")) for c in clients.values()]
            return (sum(to_int(s["repair_bytes"]) for s in st),
                    sum(to_int(s["repairs_in_flight"]) for s in st))

        def repair_bytes():
            return repair_stats()[0]

        b0 = repair_bytes()
        k0 = lab_cpu(lab)
        t_kill = time.monotonic()
        lab[victim].kill9()
        t_first = None
        while True:
            now = time.monotonic()
            if t_first is None:
                moved, flying = repair_stats()
                if moved > b0 or flying > 0:
                    t_first = now
            if t_first is not None and all_repaired(c1, oids, victim):
                break
            if now - t_kill > 1800:
                raise RuntimeError("repair did not finish within 30 minutes")
            time.sleep(0.05)
        t_end = time.monotonic()
        cpu = lab_cpu(lab) - k0
        moved = repair_bytes() - b0
        probe.stop.set()
        probe.thread.join(60)
        bp, bf, nbp, nbf = probe.medians(base_t1 - 6.0, base_t1)
        dp, df, ndp, ndf = probe.medians(t_first, t_end)
        rate_repair = count * OBJ_MIB * MIB / (t_end - t_first)
        note = (f"{count} objects of {OBJ_MIB} MiB; kill to the first repair in flight "
                f"{t_first - t_kill:.2f} s (node-ttl 1.5 s), repair {t_end - t_first:.2f} s, "
                f"kill to done {t_end - t_kill:.2f} s; repair_bytes {moved}; pair "
                f"{pair_size // MIB} MiB in {t_pair:.2f} s")
        return [
            row(f"repair of {total // MIB} MiB of two-copy objects, 8 nodes",
                rate_repair / MIB, pair_rate / MIB, "MiB/s", rate_repair / pair_rate, ">= 3",
                rate_repair / pair_rate >= 3, cpu * 1e9 / max(moved, 1), "ns/B", load, note),
            row("fetch p50 (64 KiB) during repair", df * 1e3, bf * 1e3, "ms", df / bf,
                "<= 1.5", df / bf <= 1.5, 0, "", load,
                f"{ndf} fetches during, {nbf} before"),
            row("put p50 (64 KiB) during repair", dp * 1e3, bp * 1e3, "ms", dp / bp,
                "<= 1.5", dp / bp <= 1.5, 0, "", load, f"{ndp} puts during, {nbp} before"),
        ]
    finally:
        stop_lab(lab, "repair figure")


# ---- 4. drain --------------------------------------------------------------------------------

def figure_drain(rate, total):
    count = total // (OBJ_MIB * MIB)
    mem = f"{total // MIB + 256}mb"
    lab = NetnsCluster(4, rate=rate, memory=mem, burst="512kb", latency="100ms")
    lab.start()
    try:
        c1, c2 = client(lab, "n1"), client(lab, "n2")
        oids = []
        for i in range(count):
            oid = b"dr-%d" % i
            c1.execute_command("OBJ.PUT", oid, blob(OBJ_MIB * MIB, 2000 + i))
            oids.append(oid)
        for oid in oids:
            wait_listed(c2, oid)
        load = load1()
        k0 = lab_cpu(lab)
        t_pair, rep = timed(lambda: c2.execute_command("OBJ.FETCH", *oids, "TIMEOUT", 1800000))
        cpu_pair = lab_cpu(lab) - k0
        assert rep == [b"OK"] * count, rep
        for oid in oids:
            c2.execute_command("OBJ.DEL", oid)  # n2's replicas: the drain moves everything
        time.sleep(0.5)
        k0 = lab_cpu(lab)
        t_drain, rep = timed(lambda: pairs(c1.execute_command("OBJ.DRAIN", "WAIT", 1800000)))
        cpu = lab_cpu(lab) - k0
        state = to_str(rep["state"])
        assert state == "drained", rep
        moved = to_int(rep["bytes_moved"])
        return [row(f"drain of {total // MIB} MiB, 4 nodes", t_drain, t_pair, "s",
                    t_drain / t_pair, "<= 1.3", t_drain / t_pair <= 1.3,
                    cpu * 1e9 / max(moved, 1), "ns/B", load,
                    f"{count} objects of {OBJ_MIB} MiB; objects_moved "
                    f"{to_int(rep['objects_moved'])}, bytes_moved {moved}; the pair's "
                    f"cpu {cpu_pair * 1e9 / total:.2f} ns/B")]
    finally:
        stop_lab(lab, "drain figure")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", default="400mbit")
    ap.add_argument("--put-mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repair-mib", type=int, default=1024)
    ap.add_argument("--drain-mib", type=int, default=1024)
    ap.add_argument("--figures", default="put,repair,drain")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    figures = a.figures.split(",")
    start_load = os.getloadavg()
    rows = []
    if "put" in figures:
        rows += figure_put(a.rate, a.put_mib * MIB, a.rounds)
        print(rows[-2:], flush=True)
    if "repair" in figures:
        rows += figure_repair(a.rate, a.repair_mib * MIB, 64 * MIB)
        print(rows[-3:], flush=True)
    if "drain" in figures:
        rows += figure_drain(a.rate, a.drain_mib * MIB)
        print(rows[-1:], flush=True)
    end_load = os.getloadavg()
    cols = ["label"] + list(rows[0])
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    new = not os.path.exists(a.out + ".csv")
    with open(a.out + ".csv", "a") as f:
        if new:
            f.write("when," + ",".join(cols) + "\n")
        for r in rows:
            vals = [a.label] + [str(r[c]) for c in cols[1:]]
            f.write(stamp + "," + ",".join(v.replace(",", ";") for v in vals) + "\n")
    with open(a.out + ".md", "a" if os.path.exists(a.out + ".md") else "w") as f:
        if f.tell() == 0:
            f.write("# Copies, repair and drain on rate-limited links\n\n"
                    "Made by `bench/replicas.sh` (driver `bench/replicas.py`, whose header "
                    "says what each figure measures); runs are appended.\n")
        f.write(f"\n## {a.label or 'run'}\n\nCommand: `{a.command}` "
                f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; host load average "
                f"(1, 5, 15 min) {tuple(round(x, 1) for x in start_load)} at the start, "
                f"{tuple(round(x, 1) for x in end_load)} at the end, {os.cpu_count()} "
                "vCPUs for every server of a lab; ratios are taken within the run).\n\n")
        f.write("| " + " | ".join(cols[1:]) + " |\n|" + "---|" * (len(cols) - 1) + "\n")
        for r in rows:
            f.write("| " + " | ".join(str(r[c]) for c in cols[1:]) + " |\n")


if __name__ == "__main__":
    main()
