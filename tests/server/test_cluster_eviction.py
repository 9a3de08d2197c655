"""Replica eviction on a node with a small arena: fetched copies (replicas) make room
for new objects, least recently used first, and leave the directory when they go;
pinned replicas and primaries (objects put on this node) are never evicted, so a PUT
that cannot fit even after every evictable replica is gone answers OOM.

B has an 8 MiB arena; the 1 MiB objects come from A.
"""

import pytest
from redis.exceptions import ResponseError

from objhelpers import (
    MIB,
    codes,
    err_code,
    fetch,
    info,
    payload,
    sha256,
    stats,
    to_int,
    wait_locations,
)


@pytest.fixture
def cl(make_cluster):
    return make_cluster(names=("A", "B"), layout="separate", memory="64mb",
                        node_memory={"B": "8mb"})


@pytest.fixture
def remote(cl, uid):
    """Twelve 1 MiB objects on A, published. Returns their ids and data."""
    a, b = cl["A"].client(), cl["B"].client()
    objs = {}
    for i in range(12):
        oid, data = uid(b"r%02d" % i), payload(MIB, seed=i)
        assert a.execute_command("OBJ.PUT", oid, data, "META", b"r") == b"OK"
        objs[oid] = data
    for oid in objs:
        wait_locations(b, oid, ["A"])
    return list(objs), objs


def fetch_one(b, oid):
    res = fetch(b, oid)
    assert res == ["OK"], f"fetch {oid!r:.50}: {res}"


def test_fetch_into_a_full_arena_evicts_the_lru_replica(cl, remote):
    b = cl["B"].client()
    ids, data = remote
    for oid in ids[:6]:  # 6 MiB of 8 MiB: no eviction yet
        fetch_one(b, oid)
    assert stats(b)["evictions"] == 0
    assert b.execute_command("OBJ.GET", ids[0]) == data[ids[0]]  # ids[0] is now the MRU

    evicted_order = []
    present = set(ids[:6])
    for oid in ids[6:]:
        before = stats(b)["evictions"]
        fetch_one(b, oid)
        present.add(oid)
        after = stats(b)["evictions"]
        gone = [x for x in ids if x in present and b.execute_command("OBJ.EXISTS", x) == 0]
        assert len(gone) == after - before, (
            f"evictions went {before} -> {after} but {len(gone)} replicas disappeared")
        for x in gone:
            present.discard(x)
            evicted_order.append(x)
        if len(evicted_order) >= 2:
            break
    assert len(evicted_order) >= 2, "fetching 12 MiB into an 8 MiB arena evicted nothing"
    assert evicted_order[:2] == [ids[1], ids[2]], (
        "eviction order must be least recently used first: expected r01, r02 (r00 was "
        f"read after being fetched), got {[bytes(x)[-3:] for x in evicted_order]}")
    assert b.execute_command("OBJ.EXISTS", ids[0]) == 1

    for x in evicted_order:
        wait_locations(cl["A"].client(), x, ["A"])  # the directory forgets B's copy
    for x in present:
        got = b.execute_command("OBJ.GET", x)
        assert sha256(got) == sha256(data[x])
    # An evicted replica can simply be fetched again.
    fetch_one(b, evicted_order[0])
    assert sha256(b.execute_command("OBJ.GET", evicted_order[0])) == sha256(
        data[evicted_order[0]])


def test_primaries_and_pinned_replicas_are_never_evicted(cl, remote, uid):
    b = cl["B"].client()
    holder = cl["B"].client()
    ids, data = remote
    for oid in ids[:5]:
        fetch_one(b, oid)
    holder.execute_command("OBJ.PIN", ids[0])  # pinned: not evictable

    primaries = []
    oom = None
    for i in range(12):
        pid, pdata = uid(b"p%02d" % i), payload(MIB, seed=100 + i)
        try:
            b.execute_command("OBJ.PUT", pid, pdata)
        except ResponseError as e:
            oom = e
            break
        primaries.append((pid, pdata))
    assert oom is not None, "twelve 1 MiB PUTs into an 8 MiB arena never ran out of room"
    assert err_code(oom) == "OOM", str(oom)
    assert len(primaries) >= 1

    st = stats(b)
    assert st["evictions"] == 4, f"all 4 unpinned replicas must have been evicted: {st}"
    assert b.execute_command("OBJ.EXISTS", ids[0]) == 1, "a pinned replica was evicted"
    for oid in ids[1:5]:
        assert b.execute_command("OBJ.EXISTS", oid) == 0
    for pid, pdata in primaries:
        assert to_int(info(b, pid)["replica"]) == 0
        assert sha256(b.execute_command("OBJ.GET", pid)) == sha256(pdata)

    # A fetch cannot make room either: per-id OOM, nothing left behind.
    res = fetch(b, ids[6])
    assert codes(res) == ["OOM"], res
    st2 = stats(b)
    assert st2["objects_created"] == 0 and st2["arena_used"] == st["arena_used"]
    assert st2["evictions"] == st["evictions"]

    # Once released, the replica is evictable again and makes room for one more PUT.
    holder.execute_command("OBJ.RELEASE", ids[0])
    pid = uid(b"after-release")
    assert b.execute_command("OBJ.PUT", pid, payload(MIB, 7)) == b"OK"
    assert b.execute_command("OBJ.EXISTS", ids[0]) == 0
    assert stats(b)["evictions"] == st["evictions"] + 1
    wait_locations(cl["A"].client(), ids[0], ["A"])


def test_a_replica_deleted_as_soon_as_it_is_sealed_leaves_no_location(make_cluster):
    """OBJ.DEL racing the seal of a fetched replica: the node must not read
    the freed replica (ASan in CI), and the directory must not keep B as a
    location of an object B no longer has (the publish is queued before any
    unpublish can be)."""
    import threading

    cl = make_cluster(names=("A", "B"), layout="separate", memory="64mb")
    a, b, deleter = cl["A"].client(), cl["B"].client(), cl["B"].client()
    ids = [f"race:{i}" for i in range(60)]
    for oid in ids:
        assert a.execute_command("OBJ.PUT", oid, b"r" * 2048) == b"OK"
    for oid in ids:
        wait_locations(b, oid, ["A"])
    stop = threading.Event()

    def deleted(oid):
        try:
            return deleter.execute_command("OBJ.DEL", oid) in (b"OK", b"DEFERRED")
        except ResponseError:  # NOTFOUND: not landed yet
            return False

    def delete_as_they_land():
        pending = list(ids)
        while pending and not stop.is_set():
            pending = [oid for oid in pending if not deleted(oid)]

    t = threading.Thread(target=delete_as_they_land)
    t.start()
    try:
        for oid in ids:
            assert b.execute_command("OBJ.FETCH", oid, "TIMEOUT", 10000) == [b"OK"]
    finally:
        t.join(timeout=20)
        stop.set()
    for oid in ids:
        wait_locations(b, oid, ["A"])
    assert b.execute_command("PING") == b"PONG"
