"""The directory is soft state, the nodes are the truth: when the directory Redis
loses a node's entries while the node's connection to it stays up (FLUSHALL, keys
evicted or expired, a replica promoted without the last writes), the node notices
at its next heartbeat -- its registration was missing, or its marker on a
directory master was not the value it last wrote there -- and re-publishes every
object it holds, within node-ttl. And a node warns at start when its directory may
evict keys (maxmemory-policy other than noeviction), the one loss it cannot notice
when the registration survives it.

Layout "separate": the nodes share a plain redis-server as their directory.
"""

import pytest

from objhelpers import fetch, payload, sha256, wait_locations, wait_nodes, wait_until
from objnodes import ClusterNode, DirectoryRedis, finish, start_nodes

HEARTBEAT_MS, NODE_TTL_MS = 200, 1000
# The bound on re-appearing: node-ttl, plus slack for a loaded machine.
WITHIN = NODE_TTL_MS / 1000 + 3.0
EVICTION_WARNING = "maxmemory-policy"


@pytest.fixture
def cl(make_cluster):
    return make_cluster(names=("A", "B"), layout="separate", memory="64mb",
                        heartbeat=HEARTBEAT_MS, node_ttl=NODE_TTL_MS)


def put_many(client, oids):
    """OBJ.PUT each id with payload(1000 + i, i); returns {id: bytes}."""
    objs = {}
    for i, oid in enumerate(oids):
        objs[oid] = payload(1000 + i * 37, i)
        assert client.execute_command("OBJ.PUT", oid, objs[oid]) == b"OK"
    return objs


def located_and_fetched(viewer, objs, holders):
    """Every object is located on holders within WITHIN and fetched byte-exact."""
    for oid in objs:
        wait_locations(viewer, oid, holders, timeout=WITHIN)
    assert fetch(viewer, *objs) == ["OK"] * len(objs)
    for oid, data in objs.items():
        assert sha256(viewer.execute_command("OBJ.GET", oid)) == sha256(data)


def test_objects_are_located_again_after_flushall_on_the_directory(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    objs = put_many(a, [uid(b"%d" % i) for i in range(40)])
    for oid in objs:
        wait_locations(b, oid, ["A"])

    cl.dir.client().execute_command("FLUSHALL")

    wait_nodes(b, ["A", "B"], timeout=WITHIN)
    located_and_fetched(b, objs, ["A"])
    assert "re-publishing every local object" in cl["A"].log()
    assert EVICTION_WARNING not in cl["A"].log(), "a noeviction directory drew a warning"


def test_a_lost_registration_with_some_object_keys_brings_them_back(cl, uid):
    """An eviction of a few keys (DEL here) that takes the node's registration
    with it: the heartbeat notices and the node re-publishes everything."""
    a, b = cl["A"].client(), cl["B"].client()
    objs = put_many(a, [uid(b"%d" % i) for i in range(6)])
    for oid in objs:
        wait_locations(b, oid, ["A"])
    lost = list(objs)[:3]
    d = cl.dir.client()
    assert d.execute_command("DEL", b"objstore:node:A",
                             *[b"objstore:{" + oid + b"}:loc" for oid in lost]) == 4

    located_and_fetched(b, objs, ["A"])


def test_a_directory_rolled_back_behind_an_intact_registration_is_noticed(cl, uid):
    """What a replica promoted without the last writes looks like through a
    connection that survived (a proxy in front): the registration is there, the
    last objects' keys are not, and the node's marker holds the older value it had
    then. The marker tells the node, which re-publishes."""
    a, b = cl["A"].client(), cl["B"].client()
    d = cl.dir.client()
    objs = put_many(a, [uid(b"old%d" % i) for i in range(3)])
    for oid in objs:
        wait_locations(b, oid, ["A"])
    marks = list(d.scan_iter(match=b"objstore:mark:*:A"))
    assert len(marks) == 1, f"node A's markers on one Redis: {marks}"
    earlier = d.get(marks[0])

    late = {oid: payload(5000 + i, 50 + i) for i, oid in enumerate(
        [uid(b"late%d" % i) for i in range(3)])}
    for oid, data in late.items():
        assert a.execute_command("OBJ.PUT", oid, data) == b"OK"
    for oid in late:
        wait_locations(b, oid, ["A"])
    assert d.delete(*[b"objstore:{" + oid + s for oid in late for s in (b"}:meta", b"}:loc")]) == 6
    d.set(marks[0], earlier, px=NODE_TTL_MS)

    located_and_fetched(b, {**objs, **late}, ["A"])


def test_objects_of_a_node_that_was_stopped_past_its_ttl_are_located_again(cl, uid):
    """A node paused longer than node-ttl finds its registration expired at its
    next heartbeat; with the directory flushed meanwhile its objects come back."""
    a, b = cl["A"].client(), cl["B"].client()
    objs = put_many(a, [uid(b"%d" % i) for i in range(4)])
    for oid in objs:
        wait_locations(b, oid, ["A"])
    cl["A"].sigstop()
    try:
        wait_nodes(b, ["B"], timeout=WITHIN)
        cl.dir.client().execute_command("FLUSHALL")
    finally:
        cl["A"].sigcont()

    wait_nodes(b, ["A", "B"], timeout=WITHIN)
    located_and_fetched(b, objs, ["A"])


def test_a_node_warns_when_its_directory_may_evict_keys(uid):
    d = DirectoryRedis().start()
    node = None
    try:
        d.client().execute_command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        node = ClusterNode("A", d.addr, memory="32mb", heartbeat=HEARTBEAT_MS,
                           node_ttl=NODE_TTL_MS)
        start_nodes([node])
        wait_nodes(node.client(), ["A"], timeout=WITHIN)
        wait_until(lambda: "maxmemory-policy allkeys-lru" in node.log(), WITHIN,
                   what="the node's warning about the directory's eviction policy")
        assert "noeviction" in node.log()
    finally:
        if node is not None:
            finish([node])
        d.cleanup()
