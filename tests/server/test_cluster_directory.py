"""The directory in Redis: OBJ.LOCATE and OBJ.NODES views, locations that follow
fetches, deletes and dead nodes, and a directory Redis that goes away and comes back
empty.

Layout "separate": the nodes share a plain redis-server as their directory, which
the outage test stops (SIGKILL) and starts again on the same port.
"""

import re

import pytest
from redis.exceptions import ResponseError

from objhelpers import (
    codes,
    err_code,
    expect_error,
    fetch,
    info,
    locate,
    nodes,
    payload,
    sha256,
    stats,
    wait_locations,
    wait_nodes,
    wait_until,
)

NODE_FIELDS = {"name", "addr", "tcp_port", "rdma_addr", "rdma_port", "transports",
               "heartbeat_age_ms"}


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B", "C"), layout="separate", memory="64mb")


def put(client, oid, data, meta=b"m"):
    assert client.execute_command("OBJ.PUT", oid, data, "META", meta) == b"OK"


def test_nodes_lists_every_live_node_with_its_transfer_address(cl):
    for viewer in ("A", "B", "C"):
        view = wait_nodes(cl[viewer].client(), ["A", "B", "C"])
        for name, row in view.items():
            assert set(row) == NODE_FIELDS, f"OBJ.NODES fields of {name}: {sorted(row)}"
            assert row["addr"] == "127.0.0.1"
            assert row["tcp_port"] == cl[name].transfer_port == cl[name].port + 10000, (
                f"{name}: default transfer-port must be the Redis port + 10000")
            assert row["transports"] == "tcp"
            assert 0 <= row["heartbeat_age_ms"] <= cl.node_ttl, (
                f"{name}: heartbeat_age_ms {row['heartbeat_age_ms']} with heartbeat "
                f"{cl.heartbeat} ms and node-ttl {cl.node_ttl} ms")


def test_stats_name_the_node_and_its_directory_link(cl):
    for name in ("A", "B", "C"):
        st = cl[name].stats()
        assert st["node_name"] in (name, name.encode())
        assert st["rdma_enabled"] == 0
        # Connected, once any reconnect a loaded machine caused is through (the bound
        # only stops a hang: a node that never connects fails here).
        wait_until(lambda: cl[name].stats()["directory_connected"] == 1, 60,
                   what=f"{name} connected to its directory")


def test_locate_shows_size_checksum_and_holder(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    put(a, uid, b"0123456789", b"meta!")
    loc = wait_locations(b, uid, ["A"])
    got = locate(b, uid)
    assert got["size"] == 10 and got["meta_size"] == 5
    assert re.fullmatch(r"[0-9a-f]{16}", got["checksum"]), got["checksum"]
    assert got["checksum"].encode() == info(a, uid)["checksum"]
    assert loc == ["A"]
    a.execute_command("OBJ.DEL", uid)


def test_locate_of_unknown_id_is_notfound(cl, uid):
    expect_error(cl["C"].client(), ["OBJ.LOCATE", uid(b"never-put")], "NOTFOUND")


def test_del_of_replica_drops_it_from_locations(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    put(a, uid, payload(50000, 1))
    wait_locations(b, uid, ["A"])
    assert fetch(b, uid) == ["OK"]
    wait_locations(a, uid, ["A", "B"])

    assert b.execute_command("OBJ.DEL", uid) == b"OK"
    wait_locations(a, uid, ["A"])
    assert b.execute_command("OBJ.EXISTS", uid) == 0

    # The source may still hold the pin of the send that just finished: DEFERRED.
    assert a.execute_command("OBJ.DEL", uid) in (b"OK", b"DEFERRED")
    wait_until(lambda: _notfound(b, uid), 5.0, what="OBJ.LOCATE NOTFOUND after the last delete")


def _notfound(client, oid):
    try:
        client.execute_command("OBJ.LOCATE", oid)
    except ResponseError as e:
        return err_code(e) == "NOTFOUND"
    return False


def test_replica_serves_a_third_node_after_the_primary_is_deleted(cl, uid):
    a, b, c = cl["A"].client(), cl["B"].client(), cl["C"].client()
    data = payload(3 << 20, 7)
    put(a, uid, data, b"shard-7")
    wait_locations(b, uid, ["A"])
    assert fetch(b, uid) == ["OK"]
    wait_locations(c, uid, ["A", "B"])

    assert a.execute_command("OBJ.DEL", uid) in (b"OK", b"DEFERRED")  # see above
    wait_locations(c, uid, ["B"])
    a0, b0 = stats(a), stats(b)

    assert fetch(c, uid) == ["OK"]

    got, meta = c.execute_command("OBJ.GET", uid, "WITHMETA")
    assert sha256(got) == sha256(data) and meta == b"shard-7"
    assert stats(b)["tcp_served"] - b0["tcp_served"] == 1, "C must have fetched from B"
    assert stats(a)["tcp_served"] == a0["tcp_served"]
    wait_locations(a, uid, ["B", "C"])
    for x in (b, c):
        x.execute_command("OBJ.DEL", uid)


def test_killed_node_leaves_nodes_and_locations(make_cluster, uid):
    cl = make_cluster(names=("A", "B", "C"), layout="separate", memory="64mb")
    a, b, c = cl["A"].client(), cl["B"].client(), cl["C"].client()
    data = payload(200000, 3)
    put(c, uid, data)
    wait_locations(b, uid, ["C"])
    assert fetch(b, uid) == ["OK"]
    wait_locations(a, uid, ["B", "C"])
    wait_nodes(a, ["A", "B", "C"])

    cl["C"].sigkill()
    # node-ttl is 1000 ms: the node's key expires about a second after its last heartbeat.
    wait_nodes(a, ["A", "B"], timeout=5.0)
    wait_locations(a, uid, ["B"], timeout=2.0)

    assert fetch(a, uid) == ["OK"], "the live replica on B must still be fetchable"
    got = a.execute_command("OBJ.GET", uid)
    assert sha256(got) == sha256(data)


def test_directory_outage_and_restart(make_cluster, uid):
    cl = make_cluster(names=("A", "B"), layout="separate", memory="64mb")
    a, b = cl["A"].client(), cl["B"].client()
    before, gone, during = uid(b"before"), uid(b"deleted-during"), uid(b"during")
    d_before, d_during = payload(300000, 1), payload(5000, 2)
    put(a, before, d_before)
    put(a, gone, b"short-lived")
    wait_locations(b, before, ["A"])
    wait_locations(b, gone, ["A"])
    a0 = stats(a)

    cl.dir.stop()

    # Local commands do not need the directory.
    put(a, during, d_during, b"during")
    assert a.execute_command("OBJ.GET", during) == d_during
    assert a.execute_command("OBJ.DEL", gone) == b"OK"
    # A fetch of an object that is local already answers without the directory.
    assert fetch(a, before) == ["OK"]

    # UNAVAILABLE (not TIMEOUT) is the verdict; the long TIMEOUT only bounds a hang.
    res = fetch(b, before, timeout=600000)
    assert codes(res) == ["UNAVAILABLE"], res
    for args in (["OBJ.LOCATE", before], ["OBJ.NODES"]):
        expect_error(b, args, "UNAVAILABLE")
    assert b.execute_command("OBJ.EXISTS", before) == 0
    assert stats(b)["objects_created"] == 0
    wait_until(lambda: stats(a)["directory_connected"] == 0, 3.0,
               what="directory_connected 0 while the directory is down")
    assert b.execute_command("PING") == b"PONG"

    cl.dir.start()  # same port, empty: nothing was saved

    wait_nodes(b, ["A", "B"], timeout=5.0, retry_unavailable=True)
    wait_locations(b, before, ["A"], timeout=5.0, retry_unavailable=True)
    wait_locations(b, during, ["A"], timeout=5.0, retry_unavailable=True)
    assert _notfound(b, gone), "an object deleted during the outage came back"
    a1 = stats(a)
    assert a1["directory_connected"] == 1
    assert a1["directory_reconnects"] > a0["directory_reconnects"]

    assert fetch(b, before, during) == ["OK", "OK"]
    assert sha256(b.execute_command("OBJ.GET", before)) == sha256(d_before)
    assert b.execute_command("OBJ.GET", during, "WITHMETA") == [d_during, b"during"]
    wait_locations(a, before, ["A", "B"])


def test_every_object_is_republished_after_the_directory_comes_back_empty(make_cluster):
    """All of many objects (far more than one re-publish batch) are locatable
    again after the directory restarts empty: none is dropped on the way."""
    cl = make_cluster(names=("A",), layout="separate", memory="64mb")
    a = cl["A"].client()
    n = 3000
    pipe = a.pipeline(transaction=False)
    for i in range(n):
        pipe.execute_command("OBJ.PUT", f"rp:{i}", b"x")
    assert pipe.execute() == [b"OK"] * n
    cl.dir.stop()
    cl.dir.start()  # same port, empty

    def all_located():
        d = cl.dir.client()
        keys = set()
        for k in d.scan_iter(match="*rp:*:loc", count=1000):
            keys.add(k)
        return len(keys) == n

    wait_until(all_located, 15.0, what=f"all {n} objects re-published")
