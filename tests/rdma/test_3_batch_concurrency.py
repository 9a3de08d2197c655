"""Several objects at once over RDMA: one OBJ.FETCH naming many ids (both paths, a
missing id, an id already local) and eight clients fetching at the same time, distinct
ids from two sources or one id that they then share.
"""

import threading

from objhelpers import KIB, MIB, codes, fetch, payload, stat_delta, stats, wait_locations
from rdmahelpers import (
    DEFAULT_READ_MIN,
    assert_same_object,
    delete_everywhere,
    expected_path,
    path_delta,
    put,
    put_published,
    wait_unpinned,
)

CLIENTS = 8


def run_together(fns, timeout=240.0):
    """Run the callables in threads released at once by a barrier; returns their
    results (an exception is returned as the result)."""
    barrier = threading.Barrier(len(fns))
    out = [None] * len(fns)

    def runner(i, fn):
        try:
            barrier.wait(30)
            out[i] = fn()
        except Exception as e:  # recorded, checked by the caller
            out[i] = e

    threads = [threading.Thread(target=runner, args=(i, fn), daemon=True)
               for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    stuck = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not stuck, f"clients {stuck} still waiting after {timeout:.0f}s"
    return out


def test_batch_fetch_gives_one_result_per_id(cluster, uid):
    na, nb = cluster["A"], cluster["B"]
    a, b = na.client(), nb.client()
    sizes = [0, 7, 4 * KIB, 32 * KIB - 3, 40 * KIB, 300 * KIB, 2 * MIB]
    objs = {uid(b"%d" % i): (payload(n, seed=100 + i), b"m%d" % i) for i, n in enumerate(sizes)}
    for oid, (data, meta) in objs.items():
        put(na, a, oid, data, meta)
    local, missing = uid(b"local"), uid(b"missing")
    put(nb, b, local, b"already here", b"")
    for oid in objs:
        wait_locations(b, oid, ["A"], timeout=30.0)
    a0, b0 = stats(a), stats(b)

    ids = list(objs) + [missing, local]
    res = fetch(b, *ids, via="rdma", timeout=120000)

    assert codes(res) == ["OK"] * len(objs) + ["NOTFOUND", "OK"], res
    for oid, (data, meta) in objs.items():
        assert_same_object(nb, b, oid, data, meta)
    a1, b1 = stats(a), stats(b)
    total = sum(len(d) + len(m) for d, m in objs.values())
    assert stat_delta(b0, b1, "rdma_fetches", "rdma_fetch_bytes", "tcp_fetches") == {
        "rdma_fetches": len(objs), "rdma_fetch_bytes": total, "tcp_fetches": 0}
    assert b1["objects_created"] == 0 and b.execute_command("OBJ.EXISTS", missing) == 0
    paths = [expected_path(len(d) + len(m), DEFAULT_READ_MIN) for d, m in objs.values()]
    assert path_delta(a0, a1) == {"inline": paths.count("inline"), "rndv": paths.count("rndv")}
    wait_unpinned(a)
    delete_everywhere([a, b], *objs, local)


def test_eight_clients_fetch_distinct_ids_from_two_sources(cluster, uid):
    na, nb, nc = cluster["A"], cluster["B"], cluster["C"]
    a, b, c = na.client(), nb.client(), nc.client()
    objs = {}
    for i in range(CLIENTS):
        size = 16 * KIB if i % 2 == 0 else 2 * MIB + i  # inline and rendezvous
        src = (na, a) if i < CLIENTS // 2 else (nc, c)
        oid = uid(b"%d" % i)
        objs[oid] = (src, payload(size, seed=200 + i), b"meta%d" % i)
        put(src[0], src[1], oid, objs[oid][1], objs[oid][2])
    for oid, (src, _, _) in objs.items():
        wait_locations(b, oid, [src[0].name], timeout=30.0)
    a0, b0, c0 = stats(a), stats(b), stats(c)
    clients = [nb.client() for _ in range(CLIENTS)]

    res = run_together([lambda cl=cl, oid=oid: fetch(cl, oid, via="rdma", timeout=120000)
                        for cl, oid in zip(clients, objs)])

    assert res == [["OK"]] * CLIENTS, res
    for oid, (_, data, meta) in objs.items():
        assert_same_object(nb, b, oid, data, meta)
    a1, b1, c1 = stats(a), stats(b), stats(c)
    assert stat_delta(b0, b1, "rdma_fetches", "tcp_fetches", "rdma_fetch_failures") == {
        "rdma_fetches": CLIENTS, "tcp_fetches": 0, "rdma_fetch_failures": 0}
    assert path_delta(a0, a1) == {"inline": 2, "rndv": 2}
    assert path_delta(c0, c1) == {"inline": 2, "rndv": 2}
    assert b1["objects_created"] == 0
    wait_unpinned(a)
    wait_unpinned(c)
    delete_everywhere([a, b, c], *objs)


def test_eight_clients_fetching_one_id_share_one_transfer(cluster, uid):
    na, nb = cluster["A"], cluster["B"]
    a, b = na.client(), nb.client()
    data = payload(8 * MIB, seed=300)
    put_published(na, a, uid, data, b"shared", watcher=b)
    a0, b0 = stats(a), stats(b)
    clients = [nb.client() for _ in range(CLIENTS)]

    res = run_together([lambda cl=cl: fetch(cl, uid, via="rdma", timeout=120000)
                        for cl in clients])

    assert res == [["OK"]] * CLIENTS, res
    assert_same_object(nb, b, uid, data, b"shared")
    a1, b1 = stats(a), stats(b)
    assert b1["rdma_fetches"] - b0["rdma_fetches"] == 1, "one transfer for all clients"
    joined = (b1["fetch_shared"] - b0["fetch_shared"]) + (
        b1["fetch_local_hits"] - b0["fetch_local_hits"])
    assert joined == CLIENTS - 1, f"{joined} clients joined or found it local, expected 7"
    assert a1["rdma_served"] - a0["rdma_served"] == 1
    wait_unpinned(a)
    delete_everywhere([a, b], uid)
