"""Generations of a re-created id: the directory converges on the live primary's.

The directory keeps one meta (size, meta size, checksum) and one location set per
id. OBJ.DEL on the owner leaves the replicas other nodes fetched, and those
nodes publish them again whenever they re-publish everything (a directory
restart, FLUSHALL, a failover). When the id has meanwhile been created again
elsewhere, the directory must still name the new owner's object, whoever
publishes last: a primary's publish replaces a meta of another generation and
resets the location set to itself, a replica of another generation is refused
(counted in directory_stale_replicas) and dropped by its node. And the fetching side copes with a holder
that sends another generation than the directory named anyway (an older node, a
directory edited by hand): it drains that payload, keeps the connection the
other fetches share, and tries the next holder.

Layouts: a plain directory redis-server (restarted: it comes back empty), and a
Redis Cluster directory (3 masters; FLUSHALL on every master).
"""

import pytest

from objhelpers import fetch, locate, stats, wait_locations, wait_nodes, wait_until
from objnodes import ClusterNode, RedisCluster, finish, start_nodes

NAMES = ("A", "B", "C", "D")
HEARTBEAT_MS, NODE_TTL_MS = 200, 1000
WITHIN = NODE_TTL_MS / 1000 + 5.0  # re-publishes, with slack for a loaded machine
GEN1, GEN2 = b"1" * 100, b"2" * 200


class PlainDirectory:
    """Four nodes on a plain directory redis-server, which restarts empty."""

    def __init__(self, make_cluster):
        self.cl = make_cluster(names=NAMES, layout="separate", memory="64mb",
                               heartbeat=HEARTBEAT_MS, node_ttl=NODE_TTL_MS)

    def node(self, name):
        return self.cl[name]

    def lose_everything(self):
        self.cl.dir.stop()
        self.cl.dir.start()

    def directory(self):
        return self.cl.dir.client()


class ClusterDirectory:
    """Four nodes on a Redis Cluster directory, every master flushed at once."""

    def __init__(self, rc):
        self.rc = rc
        self.nodes = {n: ClusterNode(n, rc.seeds, memory="64mb", heartbeat=HEARTBEAT_MS,
                                     node_ttl=NODE_TTL_MS) for n in NAMES}
        start_nodes(list(self.nodes.values()))

    def node(self, name):
        return self.nodes[name]

    def lose_everything(self):
        for port in self.rc.master_ports():
            c = self.rc.client(port)
            try:
                c.execute_command("FLUSHALL")
            finally:
                c.close()

    def stop(self):
        finish(list(self.nodes.values()))


@pytest.fixture(scope="module")
def redis_cluster():
    rc = RedisCluster(masters=3, replicas=0)
    try:
        yield rc.start()
    finally:
        rc.cleanup()


@pytest.fixture(params=["plain", "rediscluster"])
def env(request, make_cluster):
    if request.param == "plain":
        e = PlainDirectory(make_cluster)
        yield e
        return
    e = ClusterDirectory(request.getfixturevalue("redis_cluster"))
    try:
        yield e
    finally:
        e.stop()


@pytest.fixture
def plain(make_cluster):
    return PlainDirectory(make_cluster)


def clients(env):
    cs = [env.node(n).client() for n in NAMES]
    for c in cs:
        wait_nodes(c, NAMES, timeout=15.0)
    return cs


def leave_a_replica_of_gen1(a, b, d, x):
    """A puts x (generation 1), B fetches it, A deletes it: B's replica is left."""
    assert a.execute_command("OBJ.PUT", x, GEN1, "META", b"g1") == b"OK"
    wait_locations(d, x, ["A"])
    assert fetch(b, x) == ["OK"]
    wait_locations(d, x, ["A", "B"])
    assert a.execute_command("OBJ.DEL", x) == b"OK"
    wait_locations(d, x, ["B"])


def assert_live_generation(d, x):
    """D sees generation 2 (C's) in the directory, and fetches exactly it, each time."""
    where = locate(d, x)
    assert (where["size"], where["locations"]) == (len(GEN2), ["C"]), where
    for _ in range(4):
        assert fetch(d, x, timeout=5000) == ["OK"]
        assert d.execute_command("OBJ.GET", x) == GEN2
        assert d.execute_command("OBJ.DEL", x) == b"OK"


def test_a_re_created_id_is_listed_on_its_new_primary_only(env, uid):
    a, b, c, d = clients(env)
    x = uid(b"x")
    leave_a_replica_of_gen1(a, b, d, x)

    assert c.execute_command("OBJ.PUT", x, GEN2, "META", b"g2") == b"OK"

    wait_until(lambda: locate(d, x)["size"] == len(GEN2), WITHIN, what="C's publish")
    assert_live_generation(d, x)


def test_the_old_replica_publishing_last_after_a_directory_loss_is_refused(env, uid):
    """The repro of the chaos test: the directory loses everything, the new owner
    re-publishes first, the holder of the deleted generation last."""
    a, b, c, d = clients(env)
    x = uid(b"x")
    leave_a_replica_of_gen1(a, b, d, x)
    assert c.execute_command("OBJ.PUT", x, GEN2, "META", b"g2") == b"OK"
    wait_until(lambda: locate(d, x)["size"] == len(GEN2), WITHIN, what="C's publish")
    published = stats(b)["directory_publishes"]

    env.node("B").sigstop()
    try:
        env.lose_everything()
        wait_locations(d, x, ["C"], timeout=WITHIN, retry_unavailable=True)
    finally:
        env.node("B").sigcont()
    wait_until(lambda: stats(b)["directory_publishes"] > published, WITHIN,
               what="B's re-publish")
    wait_nodes(d, NAMES, timeout=WITHIN)

    assert_live_generation(d, x)
    assert stats(b)["directory_stale_replicas"] >= 1
    # B dropped its copy of the deleted object: it fetches the live one now.
    wait_until(lambda: not b.execute_command("OBJ.EXISTS", x), WITHIN, what="B's drop")
    assert fetch(b, x) == ["OK"]
    assert b.execute_command("OBJ.GET", x) == GEN2


def test_the_old_replica_publishing_first_is_replaced_by_the_primary(env, uid):
    """The other order: the holder of the deleted generation re-publishes into an
    empty directory first, the new owner after it."""
    a, b, c, d = clients(env)
    x = uid(b"x")
    leave_a_replica_of_gen1(a, b, d, x)
    assert c.execute_command("OBJ.PUT", x, GEN2, "META", b"g2") == b"OK"
    wait_until(lambda: locate(d, x)["size"] == len(GEN2), WITHIN, what="C's publish")
    published = stats(c)["directory_publishes"]

    env.node("C").sigstop()
    try:
        env.lose_everything()
        wait_locations(d, x, ["B"], timeout=WITHIN, retry_unavailable=True)
    finally:
        env.node("C").sigcont()
    wait_until(lambda: stats(c)["directory_publishes"] > published, WITHIN,
               what="C's re-publish")
    wait_nodes(d, NAMES, timeout=WITHIN)

    assert_live_generation(d, x)


def list_at(plain, oid, *names):
    """Rewrite oid's location set by hand: exactly names."""
    key = b"objstore:{" + oid + b"}:loc"
    dc = plain.directory()
    dc.execute_command("DEL", key)
    dc.execute_command("SADD", key, *names)


def test_a_holder_of_another_generation_is_skipped_for_the_next(plain, uid):
    """The directory lists a stale holder beside the owner (written by hand here):
    every fetch still lands the owner's generation."""
    a, b, c, d = clients(plain)
    x = uid(b"x")
    leave_a_replica_of_gen1(a, b, d, x)
    assert c.execute_command("OBJ.PUT", x, GEN2, "META", b"g2") == b"OK"
    wait_until(lambda: locate(d, x)["size"] == len(GEN2), WITHIN, what="C's publish")
    list_at(plain, x, b"B", b"C")
    wait_locations(d, x, ["B", "C"])

    for _ in range(6):
        assert fetch(d, x, timeout=5000) == ["OK"]
        assert d.execute_command("OBJ.GET", x) == GEN2
        assert d.execute_command("OBJ.DEL", x) == b"OK"


def test_a_holder_sending_another_size_costs_no_other_fetch_on_the_connection(plain, uid):
    """The stale holder is the only one listed: that fetch fails, but the payload is
    drained, so a fetch from the same node in the same pipeline completes."""
    a, b, c, d = clients(plain)
    x, y, warm = uid(b"x"), uid(b"y"), uid(b"warm")
    leave_a_replica_of_gen1(a, b, d, x)
    assert c.execute_command("OBJ.PUT", x, GEN2, "META", b"g2") == b"OK"
    wait_until(lambda: locate(d, x)["size"] == len(GEN2), WITHIN, what="C's publish")
    ybytes = bytes(range(256)) * 4096
    assert b.execute_command("OBJ.PUT", y, ybytes) == b"OK"
    assert b.execute_command("OBJ.PUT", warm, b"w") == b"OK"
    wait_locations(d, y, ["B"])
    wait_locations(d, warm, ["B"])
    assert fetch(d, warm) == ["OK"]  # D's connection to B is up before the pipeline
    list_at(plain, x, b"B")
    wait_locations(d, x, ["B"])

    for _ in range(3):
        got = fetch(d, x, y, timeout=5000)
        assert got[0].startswith("PROTOCOL") and "different size" in got[0], got
        assert got[1] == "OK", got
        assert d.execute_command("OBJ.GET", y) == ybytes
        assert d.execute_command("OBJ.DEL", y) == b"OK"
    assert not d.execute_command("OBJ.EXISTS", x), "nothing partial stays behind"
