"""RDMA connections between nodes: every fresh connection carries its first fetch,
VIA auto prefers RDMA, VIA tcp still works beside it, a node without RDMA answers
NOTSUPPORTED for VIA rdma in both directions, and a node that does not know the
cluster-secret gets nothing over RDMA.

This file runs first, so its first test sees connections that do not exist yet.
"""


from objhelpers import KIB, codes, fetch, stat_delta, stats, wait_locations
from rdmahelpers import assert_same_object, delete_everywhere, put, put_published

RDMA_NODES = ("A", "B", "C")


def test_first_fetch_over_every_fresh_connection_succeeds(cluster, uid):
    cl = {n: cluster[n].client() for n in RDMA_NODES}
    pairs_ = [(s, d) for s in RDMA_NODES for d in RDMA_NODES if s != d]
    objs = {}
    for s, d in pairs_:
        oid = uid(f"{s}to{d}".encode())
        objs[(s, d)] = oid
        put(cluster[s], cl[s], oid, b"hello from " + s.encode(), b"m")
    for (s, d), oid in objs.items():
        wait_locations(cl[d], oid, [s], timeout=30.0)
    before = {n: stats(cl[n]) for n in RDMA_NODES}

    results = {}
    for (s, d), oid in objs.items():
        results[f"{d}<-{s}"] = fetch(cl[d], oid, via="rdma", timeout=60000)[0]

    after = {n: stats(cl[n]) for n in RDMA_NODES}
    bad = {n: after[n]["transfer_bad_frames"] - before[n]["transfer_bad_frames"]
           for n in RDMA_NODES}
    failed = {k: v for k, v in results.items() if v != "OK"}
    assert not failed and not any(bad.values()), (
        f"first fetches over new RDMA connections failed: {failed}; transfer_bad_frames "
        f"grew by {bad} (an accepting node that sees the connector's HELLO before its own "
        f"ESTABLISHED event must not drop it)")
    for (s, d), oid in objs.items():
        assert_same_object(cluster[d], cl[d], oid, b"hello from " + s.encode(), b"m")
    for n in RDMA_NODES:
        assert after[n]["rdma_fetches"] - before[n]["rdma_fetches"] == 2
        assert after[n]["rdma_served"] - before[n]["rdma_served"] == 2
    delete_everywhere(cl.values(), *objs.values())


def test_via_auto_uses_rdma_when_both_nodes_have_it(cluster, uid):
    a, b = cluster["A"].client(), cluster["B"].client()
    small, big = uid(b"small"), uid(b"big")
    put_published(cluster["A"], a, small, b"x" * (4 * KIB), b"meta", watcher=b)
    put_published(cluster["A"], a, big, bytes(range(256)) * 4096, b"meta", watcher=b)
    a0, b0 = stats(a), stats(b)

    assert fetch(b, small, via="auto", timeout=60000) == ["OK"]
    assert fetch(b, big, timeout=60000) == ["OK"]  # no VIA: auto

    a1, b1 = stats(a), stats(b)
    assert stat_delta(b0, b1, "rdma_fetches", "tcp_fetches") == {"rdma_fetches": 2,
                                                                 "tcp_fetches": 0}
    assert stat_delta(a0, a1, "rdma_served", "tcp_served") == {"rdma_served": 2,
                                                               "tcp_served": 0}
    assert_same_object(cluster["B"], b, big, bytes(range(256)) * 4096, b"meta")
    delete_everywhere([a, b], small, big)


def test_via_tcp_still_works_between_rdma_nodes(cluster, uid):
    a, b = cluster["A"].client(), cluster["B"].client()
    data = bytes(range(256)) * 4 * KIB  # 1 MiB
    put_published(cluster["A"], a, uid, data, b"over tcp", watcher=b)
    a0, b0 = stats(a), stats(b)

    assert fetch(b, uid, via="tcp", timeout=60000) == ["OK"]

    a1, b1 = stats(a), stats(b)
    assert stat_delta(b0, b1, "tcp_fetches", "rdma_fetches") == {"tcp_fetches": 1,
                                                                 "rdma_fetches": 0}
    assert stat_delta(a0, a1, "tcp_served", "rdma_served") == {"tcp_served": 1,
                                                               "rdma_served": 0}
    assert_same_object(cluster["B"], b, uid, data, b"over tcp")
    delete_everywhere([a, b], uid)


def assert_nothing_fetched(client, oid, before, what):
    after = stats(client)
    assert client.execute_command("OBJ.EXISTS", oid) == 0, f"{what}: the object exists"
    assert after["objects_created"] == 0, f"{what}: a created object was left behind"
    assert after["arena_used"] == before["arena_used"], (
        f"{what}: arena_used {before['arena_used']} -> {after['arena_used']}")
    return after


def test_via_rdma_to_a_node_without_rdma_is_notsupported(cluster, uid):
    b, e = cluster["B"].client(), cluster["E"].client()
    assert stats(e)["rdma_enabled"] == 0
    put_published(cluster["E"], e, uid, b"only on E" * 1000, b"m", watcher=b)
    b0 = stats(b)

    res = fetch(b, uid, via="rdma", timeout=30000)

    assert codes(res) == ["NOTSUPPORTED"], res
    b1 = assert_nothing_fetched(b, uid, b0, "VIA rdma to a TCP-only node")
    assert b1["rdma_fetches"] == b0["rdma_fetches"]
    # VIA auto falls back to TCP for that node.
    assert fetch(b, uid, via="auto", timeout=60000) == ["OK"]
    b2 = stats(b)
    assert stat_delta(b1, b2, "tcp_fetches", "rdma_fetches") == {"tcp_fetches": 1,
                                                                 "rdma_fetches": 0}
    assert_same_object(cluster["B"], b, uid, b"only on E" * 1000, b"m")
    delete_everywhere([b, e], uid)


def test_node_without_rdma_answers_notsupported_for_via_rdma(cluster, uid):
    a, e = cluster["A"].client(), cluster["E"].client()
    put_published(cluster["A"], a, uid, b"on A" * 100, b"m", watcher=e)
    e0 = stats(e)

    res = fetch(e, uid, via="rdma", timeout=30000)

    assert codes(res) == ["NOTSUPPORTED"], res
    assert_nothing_fetched(e, uid, e0, "VIA rdma from a TCP-only node")
    assert fetch(e, uid, via="auto", timeout=60000) == ["OK"]
    assert stats(e)["tcp_fetches"] - e0["tcp_fetches"] == 1
    delete_everywhere([a, e], uid)


def test_node_with_another_secret_cannot_fetch_over_rdma(cluster, uid):
    a, d = cluster["A"].client(), cluster["D"].client()
    data = bytes(range(256)) * 1024  # 256 KiB
    put_published(cluster["A"], a, uid, data, b"secret stuff", watcher=d)
    a0, d0 = stats(a), stats(d)

    # Refused, not timed out: the TIMEOUT only bounds a hang.
    res = fetch(d, uid, via="rdma", timeout=600000)

    assert codes(res)[0] != "OK", f"a node with the wrong secret fetched the object: {res}"
    assert codes(res)[0] != "TIMEOUT", f"the refusal never came: {res}"
    d1 = assert_nothing_fetched(d, uid, d0, "wrong secret")
    a1 = stats(a)
    assert d1["rdma_fetches"] == d0["rdma_fetches"] and d1["rdma_fetch_bytes"] == d0[
        "rdma_fetch_bytes"]
    assert a1["rdma_served"] == a0["rdma_served"], "A served a node that failed the proof"
    assert a1["rdma_served_bytes"] == a0["rdma_served_bytes"]
    logs = (cluster["A"].objstore_log(200) + cluster["D"].objstore_log(200)).lower()
    assert "secret" in logs or a1["transfer_bad_frames"] > a0["transfer_bad_frames"], (
        "neither node logged or counted the failed cluster-secret proof")


def test_node_with_another_secret_cannot_serve_over_rdma(cluster, uid):
    b, d = cluster["B"].client(), cluster["D"].client()
    put_published(cluster["D"], d, uid, b"from the outsider" * 100, b"m", watcher=b)
    b0, d0 = stats(b), stats(d)

    res = fetch(b, uid, via="rdma", timeout=60000)

    assert codes(res)[0] != "OK", f"B accepted an object from a node with another secret: {res}"
    assert_nothing_fetched(b, uid, b0, "source with the wrong secret")
    assert stats(d)["rdma_served"] == d0["rdma_served"]
    delete_everywhere([d], uid)


def test_wrong_secret_leaves_the_right_nodes_working(cluster, uid):
    a, b = cluster["A"].client(), cluster["B"].client()
    data = b"still fine" * (100 * KIB // 10)
    put_published(cluster["A"], a, uid, data, b"m", watcher=b)
    assert fetch(b, uid, via="rdma", timeout=60000) == ["OK"]
    assert_same_object(cluster["B"], b, uid, data, b"m")
    delete_everywhere([a, b], uid)
