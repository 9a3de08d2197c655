#!/usr/bin/python3
"""directory_cluster.py - the directory on one Redis vs on a Redis Cluster, measured in
one run on this machine (driven by bench/directory-cluster.sh, which builds first).

For each directory -- one plain redis-server, a Redis Cluster of 3 masters and 3
replicas on loopback, and the same without replicas (to show what replication costs
on a machine whose cores every process shares) -- it starts 16 objstore nodes and
measures:
  register_s        time from spawning the 16 nodes until every one lists all 16
  publishes_per_s   OBJ.PUT of OBJECTS empty objects spread over the 16 nodes, until
                    every node's directory queue is empty (the directory threads
                    pipeline the publishes)
  dir_keys, keys_per_object, dir_bytes_per_object
                    DBSIZE and INFO used_memory over the directory's masters, after
                    minus before the publishes (divided by OBJECTS)
  lookups_per_s     OBJ.LOCATE of random published ids, redis-benchmark with
                    LOOKUP_CLIENTS connections to each of the 16 nodes at once
  busiest_master_share
                    of the commands the directory's masters processed during the
                    publishes and lookups, the share of the busiest master (1.0 for
                    one Redis; 1/3 would be a perfect spread over 3 masters)
Then, on the Redis Cluster directory, all-to-all fetch throughput: each of n nodes
puts FETCH_OBJECTS objects of FETCH_SIZE and fetches every other node's, all nodes at
once; aggregate MiB/s at n = 8 and 16 as a ratio of the n = 2 pair.

Ratios compare numbers measured in this run only. Writes CSV (argv[1]) whose first
line is the command that produced it. The machine's cores are shared by the
directory, the nodes and the load generators: read the ratios with that in mind.
"""

import os
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
os.environ.setdefault("OBJSTORE_BUILD", os.path.join(ROOT, "build"))

from objnodes import ClusterNode, DirectoryRedis, RedisCluster, finish, start_nodes  # noqa: E402
from objhelpers import nodes as obj_nodes  # noqa: E402

OBJECTS = int(os.environ.get("BENCH_OBJECTS", "1000000"))
NODES = 16
LOOKUPS_PER_NODE = int(os.environ.get("BENCH_LOOKUPS", "20000"))
LOOKUP_CLIENTS = int(os.environ.get("BENCH_LOOKUP_CLIENTS", "4"))
FETCH_OBJECTS = 2
FETCH_SIZE = 4 << 20
TIMEOUT = 600.0


def log(msg):
    print(msg, flush=True)


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def bench_id(i):
    # The form redis-benchmark's __rand_int__ produces (12 digits), so that the
    # lookup load can name random published ids.
    return b"bench:%012d" % i


class Directory:
    """One plain redis-server, or a Redis Cluster; `addr` is the nodes' setting."""

    def __init__(self, kind):
        self.kind = kind
        if kind == "single":
            self.impl = DirectoryRedis().start()
            self.addr = self.impl.addr
        else:
            self.impl = RedisCluster(masters=3, replicas=1 if kind == "cluster" else 0).start()
            self.addr = self.impl.seeds

    def master_clients(self):
        if self.kind == "single":
            return [self.impl.client()]
        return [self.impl.client(p) for p in self.impl.master_ports()]

    def totals(self):
        keys = mem = 0
        for c in self.master_clients():
            keys += c.dbsize()
            mem += c.info("memory")["used_memory"]
            c.close()
        return keys, mem

    def commands(self):
        out = []
        for c in self.master_clients():
            out.append(c.info("stats")["total_commands_processed"])
            c.close()
        return out

    def cleanup(self):
        self.impl.cleanup()


def start_fleet(directory, n, memory="64mb"):
    fleet = [ClusterNode(f"n{i:02d}", directory.addr, memory=memory, heartbeat=500,
                         node_ttl=5000) for i in range(n)]
    t0 = time.monotonic()
    start_nodes(fleet)
    names = sorted(f.name for f in fleet)
    for f in fleet:
        c = f.client()
        wait(lambda: sorted(obj_nodes(c)) == names, 60, f"{f.name} to list all {n} nodes")
    return fleet, time.monotonic() - t0


def stats_sum(fleet, field):
    return sum(f.stats()[field] for f in fleet)


def publish(fleet, total):
    """OBJ.PUT ids 0..total-1 (empty), spread over the fleet; returns publishes/s."""
    per = total // len(fleet)
    base = stats_sum(fleet, "directory_publishes")

    def put_range(f, lo, hi):
        c = f.client(timeout=120)
        for start in range(lo, hi, 5000):
            pipe = c.pipeline(transaction=False)
            for i in range(start, min(start + 5000, hi)):
                pipe.execute_command("OBJ.PUT", bench_id(i), b"")
            pipe.execute()

    t0 = time.monotonic()
    threads = [threading.Thread(target=put_range, args=(f, k * per, (k + 1) * per))
               for k, f in enumerate(fleet)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait(lambda: stats_sum(fleet, "directory_publishes") - base >= per * len(fleet)
         and stats_sum(fleet, "directory_queued") == 0, TIMEOUT, "the publishes")
    return per * len(fleet) / (time.monotonic() - t0)


def lookups(fleet, keyspace):
    """redis-benchmark OBJ.LOCATE of random published ids on every node at once."""
    procs = []
    for f in fleet:
        cmd = ["redis-benchmark", "-p", str(f.port), "-c", str(LOOKUP_CLIENTS),
               "-n", str(LOOKUPS_PER_NODE), "-r", str(keyspace), "--csv",
               "OBJ.LOCATE", "bench:__rand_int__"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    base = stats_sum(fleet, "directory_lookups")
    t0 = time.monotonic()
    outs = [p.communicate(timeout=TIMEOUT)[0].decode() for p in procs]
    elapsed = time.monotonic() - t0
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"redis-benchmark failed: {out[-500:]}")
    done = stats_sum(fleet, "directory_lookups") - base
    return done / elapsed


def all_to_all(fleet):
    """Aggregate MiB/s of every node fetching every other node's objects at once."""
    ids = {}
    for k, f in enumerate(fleet):
        c = f.client()
        ids[f.name] = [b"a2a:%d:%d" % (k, j) for j in range(FETCH_OBJECTS)]
        for j, oid in enumerate(ids[f.name]):
            c.execute_command("OBJ.PUT", oid, os.urandom(16) * (FETCH_SIZE // 16))
    for f in fleet:
        c = f.client()
        for other in fleet:
            for oid in ids[other.name]:
                wait(lambda: _located(c, oid), 30, f"{oid!r} in the directory")
    errors = []

    def pull(f):
        c = f.client(timeout=TIMEOUT)
        want = [oid for other in fleet if other is not f for oid in ids[other.name]]
        r = c.execute_command("OBJ.FETCH", *want)
        bad = [x for x in r if x != b"OK"]
        if bad:
            errors.append(f"{f.name}: {bad[:2]}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=pull, args=(f,)) for f in fleet]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    if errors:
        raise RuntimeError(f"fetches failed: {errors[:3]}")
    moved = len(fleet) * (len(fleet) - 1) * FETCH_OBJECTS * FETCH_SIZE
    return moved / elapsed / (1 << 20)


def _located(c, oid):
    try:
        c.execute_command("OBJ.LOCATE", oid)
        return True
    except Exception:
        return False


def main():
    out = sys.argv[1]
    rows = []
    results = {}
    for kind in ("single", "cluster", "cluster_norep"):
        log(f"== directory: {kind}")
        d = Directory(kind)
        fleet = []
        try:
            fleet, reg = start_fleet(d, NODES)
            log(f"   16 nodes registered in {reg:.2f} s")
            keys1, mem1 = d.totals()
            cmds0 = d.commands()
            pub = publish(fleet, OBJECTS)
            keys2, mem2 = d.totals()
            log(f"   {OBJECTS} publishes: {pub:.0f}/s; directory keys {keys2 - keys1} "
                f"({(keys2 - keys1) / OBJECTS:.2f} per object), "
                f"{(mem2 - mem1) / OBJECTS:.0f} bytes per object")
            look = lookups(fleet, OBJECTS)
            spent = [b - a for a, b in zip(cmds0, d.commands())]
            share = max(spent) / sum(spent)
            log(f"   lookups: {look:.0f}/s; busiest master did {share:.2f} of the commands")
            results[kind] = dict(register_s=reg, publishes_per_s=pub, lookups_per_s=look,
                                 dir_keys=keys2 - keys1,
                                 keys_per_object=(keys2 - keys1) / OBJECTS,
                                 dir_bytes_per_object=(mem2 - mem1) / OBJECTS,
                                 busiest_master_share=share)
        finally:
            finish(fleet)
            if kind == "cluster":
                cluster = d
            else:
                d.cleanup()
    try:
        a2a = {}
        for n in (2, 8, 16):
            fleet = []
            try:
                fleet, _ = start_fleet(cluster, n, memory="160mb")
                a2a[n] = all_to_all(fleet)
                log(f"== all-to-all, {n} nodes: {a2a[n]:.0f} MiB/s")
            finally:
                finish(fleet)
    finally:
        cluster.cleanup()

    units = dict(register_s="s", publishes_per_s="1/s", lookups_per_s="1/s", dir_keys="keys",
                 keys_per_object="keys", dir_bytes_per_object="bytes",
                 busiest_master_share="fraction")
    for metric, unit in units.items():
        s, c, c0 = (results[k][metric] for k in ("single", "cluster", "cluster_norep"))
        rows.append((metric, f"{s:.3f}", f"{c:.3f}", f"{c0:.3f}", unit,
                     f"{c / s:.3f}" if s else "", f"{c0 / s:.3f}" if s else ""))
    for n in (2, 8, 16):
        rows.append((f"all_to_all_{n}_nodes_mib_per_s", "", f"{a2a[n]:.1f}", "", "MiB/s",
                     f"{a2a[n] / a2a[2]:.3f}", ""))
    with open(out, "w") as f:
        f.write("# " + " ".join(os.environ.get("BENCH_COMMAND", "").split() or sys.argv)
                + f"  (objects={OBJECTS}, nodes={NODES}, lookup clients/node="
                f"{LOOKUP_CLIENTS}, nproc={os.cpu_count()})\n")
        f.write("metric,single_redis,redis_cluster_3m3r,redis_cluster_3m0r,unit,"
                "ratio_3m3r_vs_single_or_vs_2_nodes,ratio_3m0r_vs_single\n")
        for r in rows:
            f.write(",".join(r) + "\n")
    log(open(out).read())


if __name__ == "__main__":
    main()
