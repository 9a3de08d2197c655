#!/usr/bin/env python3
"""broadcast.py - a weights broadcast over three nodes on one machine.

A dict of arrays (a model's weights) is put once on node 1 with put_object (each
array copied once into the arena, pickle protocol 5 with out-of-band buffers); one
objstore.broadcast call places it on nodes 2 and 3 at once, and each uses the
weights as zero-copy views: a forward pass of a small MLP on each node gives the
same output as on node 1. Start the nodes
first (client/python/README.md, "Examples"):

    for n in 1 2 3; do redis-server conf/cluster-node$n.conf --daemonize yes; done
    build/python-venv/bin/python client/python/examples/broadcast.py
"""

import os
import sys
import time

import numpy as np

import objstore

LAYERS = [(256, 512), (512, 512), (512, 10)]


def nodes_from_env():
    """[(name, port)] of the three nodes: conf/cluster-node*.conf's, or
    OBJSTORE_EXAMPLE_NODES="name=port,name=port,name=port" (the tests use that)."""
    spec = os.environ.get("OBJSTORE_EXAMPLE_NODES", "node1=7001,node2=7002,node3=7003")
    return [(n, int(p)) for n, p in (item.split("=") for item in spec.split(","))]


NODES = dict(nodes_from_env())
SOURCE, *OTHERS = NODES


def forward(weights, x):
    for i in range(len(LAYERS)):
        x = np.maximum(x @ weights[f"w{i}"] + weights[f"b{i}"], 0.0)
    return x


def wait_published(client, key, limit=10.0):
    """Wait until the directory lists the object: a node publishes it after the put
    returns, and the other nodes find it only there (a fetch before that answers
    NOTFOUND)."""
    deadline = time.monotonic() + limit
    while True:
        try:
            if client.locate(key)["locations"]:
                return
        except objstore.ObjectNotFound:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{key} was not published within {limit} s")
        time.sleep(0.01)


def main():
    rng = np.random.default_rng(1)
    weights = {}
    for i, (n_in, n_out) in enumerate(LAYERS):
        weights[f"w{i}"] = rng.standard_normal((n_in, n_out)).astype(np.float32) / np.sqrt(n_in)
        weights[f"b{i}"] = np.zeros(n_out, np.float32)
    x = rng.standard_normal((8, LAYERS[0][0])).astype(np.float32)
    key = f"weights:{rng.integers(1 << 30)}"
    want = forward(weights, x)

    with objstore.connect("127.0.0.1", NODES[SOURCE]) as src:
        src.put_object(key, weights, meta="mlp v1")
        size = src.info(key)["size"]
        wait_published(src, key)
        clients = {name: objstore.connect("127.0.0.1", NODES[name]) for name in OTHERS}
        try:
            # Returns once every node holds it; a BroadcastError names each that does not.
            objstore.broadcast(key, clients, timeout=30)
            for name, c in clients.items():
                w = c.get_object(key)  # views of this node's replica: no copy
                assert not w["w0"].flags.writeable
                out = forward(w, x)
                assert np.allclose(out, want), name
                print(f"{name}: {len(w)} arrays ({size} bytes) received, forward pass matches; "
                      f"located on {sorted(c.locate(key)['locations'])}")
                del w
                c.delete(key)  # this node's replica
        finally:
            for c in clients.values():
                c.close()
        src.delete(key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
