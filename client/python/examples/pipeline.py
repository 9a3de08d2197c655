#!/usr/bin/env python3
"""pipeline.py - a producer/worker pipeline over three nodes on one machine.

Node 1 (port 7001) gets arrays from the producer; workers attached to nodes 2 and 3
(7002, 7003) pull each array to their own node with OBJ.FETCH ... FROM node1 (no
directory lookup), read it zero-copy and reduce it; the producer adds up the partial
sums and checks them. Start the nodes first (client/python/README.md, "Examples"):

    for n in 1 2 3; do redis-server conf/cluster-node$n.conf --daemonize yes; done
    build/python-venv/bin/python client/python/examples/pipeline.py
"""

import multiprocessing as mp
import os
import sys

import numpy as np

import objstore

TASKS = 16
ROWS, COLS = 512, 1024  # 4 MiB of float64 per task


def nodes_from_env():
    """[(name, port)] of the three nodes: conf/cluster-node*.conf's, or
    OBJSTORE_EXAMPLE_NODES="name=port,name=port,name=port" (the tests use that)."""
    spec = os.environ.get("OBJSTORE_EXAMPLE_NODES", "node1=7001,node2=7002,node3=7003")
    return [(n, int(p)) for n, p in (item.split("=") for item in spec.split(","))]


(SOURCE, PRODUCER), *_WORKERS = nodes_from_env()
WORKER_NODES = tuple(port for _, port in _WORKERS)


def worker(port, tasks, results):
    """One worker process: its own connection (a client never crosses a fork)."""
    with objstore.connect("127.0.0.1", port) as c:
        for key in iter(tasks.get, None):
            status = c.fetch([key], from_=SOURCE, timeout=30)[key]
            if status is not None:
                raise status
            a = c.get(key)  # a read-only view of this node's replica
            results.put((key, port, float(a.sum()), c.zero_copy))
            del a  # the pin goes with the last reference


def main():
    rng = np.random.default_rng(0)
    expected = {}
    with objstore.connect("127.0.0.1", PRODUCER) as p:
        run = rng.integers(1 << 30)
        for i in range(TASKS):
            key = f"pipeline:{run}:{i}"
            a = rng.standard_normal((ROWS, COLS))
            p.put(key, a)  # one copy, straight into node 1's arena
            expected[key] = float(a.sum())
        tasks, results = mp.Queue(), mp.Queue()
        procs = [mp.Process(target=worker, args=(port, tasks, results))
                 for port in WORKER_NODES for _ in range(2)]
        for pr in procs:
            pr.start()
        for key in expected:
            tasks.put(key)
        for _ in procs:
            tasks.put(None)
        got = [results.get(timeout=120) for _ in expected]
        for pr in procs:
            pr.join()
        for key in expected:
            p.delete(key)
    by_node = {port: 0 for port in WORKER_NODES}
    for key, port, total, zero_copy in got:
        assert abs(total - expected[key]) < 1e-6 * max(1.0, abs(expected[key])), key
        assert zero_copy
        by_node[port] += 1
    print(f"{len(got)} arrays of {ROWS}x{COLS} reduced: " +
          ", ".join(f"{n} on node :{port}" for port, n in by_node.items()))
    print(f"sum of sums {sum(expected.values()):.3f}: every partial sum matched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
