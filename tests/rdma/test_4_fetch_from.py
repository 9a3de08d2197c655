"""OBJ.FETCH ... VIA rdma FROM node: the location hint over RDMA. With the object's
directory keys deleted, only the hint can find it: the copy must still arrive byte for
byte on both paths (inline: created and filled when the owner's DATA arrives;
rendezvous: created when its RNDV arrives, then read), checked against the owner's
checksum, and counted as a hint hit with no directory lookup. A wrong hint falls back
to the directory over RDMA too.
"""

import pytest

from objhelpers import KIB, MIB, payload, stat_delta, stats, to_int, wait_locations
from rdmahelpers import (
    DEFAULT_READ_MIN,
    assert_same_object,
    delete_everywhere,
    expected_path,
    path_delta,
    put_published,
    wait_unpinned,
)

HINT = ("transfer_hint_hits", "transfer_hint_fallbacks")

SIZES = [
    (0, b""),
    (4 * KIB, b"shape=64x64"),
    (DEFAULT_READ_MIN - 6, b"inline"),
    (DEFAULT_READ_MIN, b"rndv"),
    (256 * KIB, b""),
    (8 * MIB, b"large"),
]


def fetch_from(client, oid, node, via="rdma", timeout=120000):
    reply = client.execute_command("OBJ.FETCH", oid, "TIMEOUT", timeout, "VIA", via,
                                   "FROM", node)
    assert isinstance(reply, list) and len(reply) == 1, reply
    return [str(r) if isinstance(r, Exception) else r.decode() for r in reply]


def forget_in_directory(cluster, oid):
    """Delete the object's directory keys: only the hint can find it now."""
    d = cluster.dir.client()
    d.execute_command("DEL", b"objstore:{" + oid + b"}:meta", b"objstore:{" + oid + b"}:loc")


@pytest.mark.parametrize("size,meta", SIZES, ids=[f"{s}B-meta{len(m)}" for s, m in SIZES])
def test_fetch_from_over_rdma_skips_the_directory(cluster, uid, size, meta):
    na, nb = cluster["A"], cluster["B"]
    a, b = na.client(), nb.client()
    data = payload(size, seed=size + 21)
    put_published(na, a, uid, data, meta, watcher=b)
    forget_in_directory(cluster, uid)
    a0, b0 = stats(a), stats(b)

    res = fetch_from(b, uid, "A")

    assert res == ["OK"], f"{size} + {len(meta)} bytes: {res}"
    inf = assert_same_object(nb, b, uid, data, meta)
    assert to_int(inf["replica"]) == 1
    a1, b1 = stats(a), stats(b)
    total = size + len(meta)
    assert stat_delta(b0, b1, "rdma_fetches", "rdma_fetch_bytes", "tcp_fetches",
                      "directory_lookups", *HINT) == {
        "rdma_fetches": 1, "rdma_fetch_bytes": total, "tcp_fetches": 0,
        "directory_lookups": 0, "transfer_hint_hits": 1, "transfer_hint_fallbacks": 0}
    assert b1["objects_created"] == 0
    want = expected_path(total, DEFAULT_READ_MIN)
    assert path_delta(a0, a1) == {"inline": int(want == "inline"), "rndv": int(want == "rndv")}
    wait_unpinned(a, uid)
    delete_everywhere([a, b], uid)


@pytest.mark.parametrize("size", [4 * KIB, 1 * MIB], ids=["inline", "rndv"])
def test_wrong_hint_over_rdma_falls_back(cluster, uid, size):
    na, nb = cluster["A"], cluster["B"]
    a, b = na.client(), nb.client()
    data = payload(size, seed=5)
    put_published(na, a, uid, data, b"w", watcher=b)
    b0 = stats(b)

    res = fetch_from(b, uid, "C")

    assert res == ["OK"], res
    assert_same_object(nb, b, uid, data, b"w")
    b1 = stats(b)
    assert stat_delta(b0, b1, "rdma_fetches", *HINT) == {
        "rdma_fetches": 1, "transfer_hint_hits": 0, "transfer_hint_fallbacks": 1}
    assert b1["objects_created"] == 0
    wait_unpinned(a, uid)
    delete_everywhere([a, b], uid)


def test_hint_to_a_node_without_rdma_falls_back(cluster, uid):
    """E has no RDMA: VIA rdma FROM E cannot use the hint; the directory finds A."""
    na, nb = cluster["A"], cluster["B"]
    a, b = na.client(), nb.client()
    data = payload(2 * KIB, seed=8)
    put_published(na, a, uid, data, b"", watcher=b)
    b0 = stats(b)

    assert fetch_from(b, uid, "E") == ["OK"]

    assert_same_object(nb, b, uid, data, b"")
    assert stat_delta(b0, stats(b), *HINT) == {
        "transfer_hint_hits": 0, "transfer_hint_fallbacks": 1}
    wait_locations(b, uid, ["A", "B"], timeout=30.0)
    delete_everywhere([a, b], uid)
