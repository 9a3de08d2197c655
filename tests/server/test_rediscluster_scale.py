"""Sixteen objstore nodes with small arenas on one machine, sharing a directory on a
real Redis Cluster (3 masters + 3 replicas on loopback): every node sees the other 15
in OBJ.NODES, and all-to-all fetches of mixed sizes (0 B to 16 MiB) arrive byte-exact.

Each node puts one object; every other node fetches it, checks every byte against
the source's SHA-256, and deletes its copy again, so an arena never holds more than
its own object and the one it is checking (48 MiB arenas suffice, 768 MiB in all).

It runs under the ASan/UBSan pass too (about 12 s there on the 2-core CI machine).
"""

import threading
import time

from objhelpers import fetch, payload, sha256, wait_locations, wait_nodes
from objnodes import ClusterNode, RedisCluster, finish, start_nodes

NAMES = [f"N{i:02d}" for i in range(16)]
SIZES = [0, 1, 100, 4096, 65536, 65537, 262144, 1 << 20, (1 << 20) + 7, 2 << 20, 3 << 20,
         4 << 20, 6 << 20, 8 << 20, 12 << 20, 16 << 20]

def test_sixteen_nodes_register_and_fetch_all_to_all_byte_exact(uid):
    rc = RedisCluster(masters=3, replicas=1).start()
    nodes = {}
    try:
        nodes = {n: ClusterNode(n, rc.seeds, memory="48mb", heartbeat=500, node_ttl=5000)
                 for n in NAMES}
        t0 = time.monotonic()
        start_nodes(list(nodes.values()))
        for n in NAMES:
            wait_nodes(nodes[n].client(), NAMES, timeout=30.0)
        registered = time.monotonic() - t0

        objs = {}
        for name, size in zip(NAMES, SIZES):
            oid = uid(name.encode())
            data = payload(size, 1000 + size)
            assert nodes[name].client().execute_command("OBJ.PUT", oid, data) == b"OK"
            objs[name] = (oid, size, sha256(data))
        for name, (oid, _, _) in objs.items():
            wait_locations(nodes[NAMES[0]].client(), oid, [name], timeout=15.0)

        failures = []

        def fetch_all(me):
            c = nodes[me].client(timeout=120)
            for i in range(1, len(NAMES)):
                src = NAMES[(NAMES.index(me) + i) % len(NAMES)]
                oid, size, digest = objs[src]
                r = fetch(c, oid, timeout=60000)
                if r != ["OK"]:
                    failures.append(f"{me} <- {src} ({size} B): {r[0]}")
                    continue
                got = c.execute_command("OBJ.GET", oid)
                if len(got) != size or sha256(got) != digest:
                    failures.append(f"{me} <- {src} ({size} B): {len(got)} bytes, wrong content")
                c.execute_command("OBJ.DEL", oid)

        t1 = time.monotonic()
        threads = [threading.Thread(target=fetch_all, args=(n,), daemon=True) for n in NAMES]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads), "fetches still running after 300 s"
        assert not failures, f"{len(failures)} fetches failed: {failures[:5]}"
        moved = sum(SIZES) * (len(NAMES) - 1)
        print(f"\n16 nodes: all registered {registered:.1f}s after start; all-to-all "
              f"{moved / (1 << 20):.0f} MiB in {time.monotonic() - t1:.1f}s")
        for n in NAMES:
            assert len(wait_nodes(nodes[n].client(), NAMES, timeout=10.0)) == 16
    finally:
        finish(list(nodes.values()))
        rc.cleanup()
