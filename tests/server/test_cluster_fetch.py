"""OBJ.FETCH between nodes over TCP: byte-exact copies of every size class, batches
with per-id results, ids that are already local or missing, and the argument table.

Layout "own": node A keeps the module's default directory (its own Redis) and B and
C point at it, so this file also covers a cluster without a separate directory.
"""


import pytest
from redis.exceptions import ResponseError

from objhelpers import (
    FETCH_SIZES,
    KIB,
    MIB,
    codes,
    delete_everywhere,
    err_code,
    expect_error,
    fetch,
    info,
    locate,
    payload,
    sha256,
    stat_delta,
    stats,
    to_int,
    to_str,
    wait_locations,
    xxh3_64,
)


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B", "C"), layout="own", memory="256mb")


def put(client, oid, data, meta=None):
    args = ["OBJ.PUT", oid, data] + (["META", meta] if meta is not None else [])
    assert client.execute_command(*args) == b"OK"


def put_published(client, oid, data, meta=None, name="A", watcher=None):
    """PUT on a node and wait until the directory lists it there."""
    put(client, oid, data, meta)
    wait_locations(watcher or client, oid, [name])


def checksum_hex(data, meta):
    return "%016x" % xxh3_64(bytes(data) + bytes(meta or b""))


def assert_same_object(client, oid, data, meta):
    """OBJ.GET WITHMETA on client gives exactly data and meta."""
    got, got_meta = client.execute_command("OBJ.GET", oid, "WITHMETA")
    assert len(got) == len(data), f"{oid!r:.60}: {len(got)} bytes, expected {len(data)}"
    assert sha256(got) == sha256(data), f"{oid!r:.60}: data differs from the source"
    assert got_meta == (meta or b""), f"{oid!r:.60}: metadata differs"


SIZES = FETCH_SIZES


@pytest.mark.parametrize("size,meta", SIZES, ids=[f"{s}B-meta{len(m or b'')}" for s, m in SIZES])
def test_fetch_copies_object_byte_exact(cl, a, b, uid, size, meta):
    data = payload(size, seed=size + 1)
    put_published(a, uid, data, meta)
    a0, b0 = stats(a), stats(b)

    assert fetch(b, uid) == ["OK"]

    assert_same_object(b, uid, data, meta)
    ib, ia = info(b, uid), info(a, uid)
    assert to_str(ib["state"]) == "sealed"
    assert to_int(ib["size"]) == size and to_int(ib["meta_size"]) == len(meta or b"")
    assert to_str(ib["checksum"]) == to_str(ia["checksum"]) == checksum_hex(data, meta)
    assert to_int(ib["replica"]) == 1, "a fetched copy must be marked as a replica"
    assert to_int(ia["replica"]) == 0, "the put copy is a primary"

    a1, b1 = stats(a), stats(b)
    total = size + len(meta or b"")
    assert stat_delta(b0, b1, "tcp_fetches", "tcp_fetch_bytes", "objects_sealed") == {
        "tcp_fetches": 1, "tcp_fetch_bytes": total, "objects_sealed": 1}
    assert stat_delta(a0, a1, "tcp_served", "tcp_served_bytes") == {
        "tcp_served": 1, "tcp_served_bytes": total}
    assert b1["objects_created"] == 0 and b1["tcp_fetch_failures"] == b0["tcp_fetch_failures"]

    for viewer in (a, b):
        wait_locations(viewer, uid, ["A", "B"])
    loc = locate(b, uid)
    assert (loc["size"], loc["meta_size"], loc["checksum"]) == (
        size, len(meta or b""), checksum_hex(data, meta))
    delete_everywhere([a, b], uid)


def test_fetch_batch_gives_one_result_per_id(a, b, uid):
    objs = {uid(b"%d" % i): (payload(n, seed=i), b"m%d" % i)
            for i, n in enumerate([0, 7, 4 * KIB, 40 * KIB, 300 * KIB, 2 * MIB])}
    for oid, (data, meta) in objs.items():
        put(a, oid, data, meta)
    for oid in objs:
        wait_locations(b, oid, ["A"])
    b0 = stats(b)

    assert fetch(b, *objs) == ["OK"] * len(objs)

    for oid, (data, meta) in objs.items():
        assert_same_object(b, oid, data, meta)
    b1 = stats(b)
    assert stat_delta(b0, b1, "fetch_requests", "tcp_fetches") == {
        "fetch_requests": 1, "tcp_fetches": len(objs)}
    delete_everywhere([a, b], *objs)


def test_fetch_same_id_twice_in_one_call(a, b, uid):
    data = payload(100 * KIB, seed=5)
    put_published(a, uid, data, b"dup")
    b0 = stats(b)
    assert fetch(b, uid, uid) == ["OK", "OK"]
    assert_same_object(b, uid, data, b"dup")
    assert stats(b)["tcp_fetches"] - b0["tcp_fetches"] == 1, "one transfer for a repeated id"
    delete_everywhere([a, b], uid)


def test_fetch_of_local_object_answers_at_once(a, b, uid):
    data = payload(4 * MIB, seed=9)
    put_published(a, uid, data, b"here")
    a0 = stats(a)
    assert fetch(a, uid) == ["OK"]
    assert fetch(a, uid, timeout=1) == ["OK"], "TIMEOUT does not matter when already local"
    a1 = stats(a)
    assert a1["tcp_fetches"] == a0["tcp_fetches"] and a1["tcp_served"] == a0["tcp_served"]

    assert fetch(b, uid) == ["OK"]
    a2, b2 = stats(a), stats(b)
    assert fetch(b, uid) == ["OK"], "the replica is local now"
    assert stats(b)["tcp_fetches"] == b2["tcp_fetches"]
    assert stats(a)["tcp_served"] == a2["tcp_served"], "no second transfer"
    delete_everywhere([a, b], uid)


def test_fetch_missing_id_is_notfound(b, uid):
    b0 = stats(b)
    res = fetch(b, uid(b"nowhere"))
    assert codes(res) == ["NOTFOUND"], res
    b1 = stats(b)
    assert b.execute_command("OBJ.EXISTS", uid(b"nowhere")) == 0
    assert b1["objects_created"] == 0 and b1["arena_used"] == b0["arena_used"]


def test_fetch_mix_of_found_local_and_missing(a, b, uid):
    remote1, remote2, local, missing = uid(b"r1"), uid(b"r2"), uid(b"loc"), uid(b"miss")
    d1, d2, dl = payload(10 * KIB, 1), payload(70 * KIB, 2), payload(3, 3)
    put(a, remote1, d1, b"x")
    put(a, remote2, d2, b"y")
    put(b, local, dl, b"z")
    wait_locations(b, remote1, ["A"])
    wait_locations(b, remote2, ["A"])

    res = fetch(b, remote1, missing, local, remote2)
    assert codes(res) == ["OK", "NOTFOUND", "OK", "OK"], res

    assert_same_object(b, remote1, d1, b"x")
    assert_same_object(b, remote2, d2, b"y")
    assert_same_object(b, local, dl, b"z")
    assert b.execute_command("OBJ.EXISTS", missing) == 0
    assert stats(b)["objects_created"] == 0
    delete_everywhere([a, b], remote1, remote2, local)


def test_fetch_via_rdma_without_rdma_is_notsupported(a, b, uid):
    put_published(a, uid, payload(1000, 4), b"r")
    assert stats(b)["rdma_enabled"] == 0, "this host has no RDMA device"
    a0, b0 = stats(a), stats(b)
    res = fetch(b, uid, via="rdma")
    assert codes(res) == ["NOTSUPPORTED"], res
    assert b.execute_command("OBJ.EXISTS", uid) == 0
    assert stats(a)["tcp_served"] == a0["tcp_served"], "no data may move"
    assert stats(b)["arena_used"] == b0["arena_used"]

    assert fetch(b, uid, via="tcp") == ["OK"]
    assert fetch(b, uid, via="auto") == ["OK"]
    delete_everywhere([a, b], uid)


def test_fetch_from_either_source_node(a, b, c, uid):
    """A node fetches from whichever node the directory names: here C, which put it."""
    data = payload(123457, 6)
    put(c, uid, data, b"from C")
    wait_locations(b, uid, ["C"])
    assert fetch(b, uid) == ["OK"]
    assert_same_object(b, uid, data, b"from C")
    wait_locations(a, uid, ["B", "C"])
    delete_everywhere([b, c], uid)


BAD_ARGS = [
    (["OBJ.FETCH"], "ERR"),
    (["OBJ.FETCH", ""], "BADARG"),
    (["OBJ.FETCH", "x" * 513], "BADARG"),
    (["OBJ.FETCH", "k", "TIMEOUT", "soon"], "BADARG"),
    (["OBJ.FETCH", "k", "TIMEOUT", "-1"], "BADARG"),
    (["OBJ.FETCH", "k", "VIA", "udp"], "BADARG"),
    (["OBJ.FETCH", "k", "TIMEOUT", "10", "k2"], "BADARG"),
    (["OBJ.LOCATE"], "ERR"),
    (["OBJ.LOCATE", "a", "b"], "ERR"),
    (["OBJ.LOCATE", ""], "BADARG"),
    (["OBJ.NODES", "extra"], "ERR"),
]


@pytest.mark.parametrize("args,code", BAD_ARGS, ids=[" ".join(a)[:40] for a, _ in BAD_ARGS])
def test_cluster_commands_reject_bad_arguments(b, args, code):
    b0 = stats(b)
    expect_error(b, args, code)
    b1 = stats(b)
    assert b1["fetch_requests"] == b0["fetch_requests"]
    assert b1["objects_created"] == 0


def test_fetch_inside_multi_is_refused(a, b, uid):
    put_published(a, uid, b"payload", b"m")
    b.execute_command("MULTI")
    b.execute_command("OBJ.FETCH", uid)
    reply = b.execute_command("EXEC")
    assert len(reply) == 1 and isinstance(reply[0], ResponseError), reply
    assert err_code(reply[0]) == "WRONGSTATE", reply
    assert b.execute_command("OBJ.EXISTS", uid) == 0
    delete_everywhere([a], uid)
