"""Replicas on put (docs/commands.md, OBJ.PUT ... REPLICAS k; docs/cluster.md, copies).

A put with REPLICAS k answers once k live nodes hold the object: the writer's primary
and k-1 protected copies, each byte-exact and marked before the reply (OBJ.INFO on
every holder right after it, no wait), then listed by the directory (OBJ.LOCATE:
replicas, owner, protected). With fewer live nodes than k it answers at its WAIT (or
replica-timeout) with the count it reached; WAIT 0 answers 1 at once and the copies
follow. A count of 0, below 0, above replicas-max or not a number is BADARG and stores
nothing. A protected copy is never evicted: an arena flood on its node evicts the
ordinary replica and then answers OOM. A delete on any holder purges every copy.
Copies go to nodes of distinct labels first.
"""

import time

import pytest
from redis.exceptions import ResponseError

from objhelpers import (
    MIB,
    assert_stats_unchanged,
    copy_of,
    counting,
    err_code,
    expect_error,
    fetch,
    info,
    payload,
    sha256,
    stats,
    to_int,
    to_str,
    holders_now,
    wait_copies,
    wait_locations,
    wait_nodes,
    wait_until,
)

NAMES = ("A", "B", "C", "D", "E")


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=NAMES, layout="separate", memory="64mb")


@pytest.fixture(scope="module")
def clients(cl):
    """One connection per node of the module's cluster."""
    return {n: cl[n].client() for n in NAMES}


def assert_byte_exact(clients, names, oid, data, meta):
    for n in names:
        got, m = clients[n].execute_command("OBJ.GET", oid, "WITHMETA")
        assert sha256(got) == sha256(data) and m == meta, f"{n}: its copy of {oid!r} differs"


def put(client, oid, data, *opts, meta=b"m"):
    return client.execute_command("OBJ.PUT", oid, data, "META", meta, *opts)


def cleanup(clients, oid, on="A"):
    """Delete oid on its owner (which purges every copy; test_a_delete_... checks it)."""
    try:
        clients[on].execute_command("OBJ.DEL", oid)
    except ResponseError:
        pass


def exactly(clients, oid, k):
    """Wait until the directory lists exactly k counting holders of oid (a surplus
    copy is trimmed back to the count) and the nodes agree; returns the holders."""
    d = wait_copies(clients["A"], oid, lambda d: len(d["protected"]) == k,
                    what=f"{k} counting holders listed")
    wait_until(lambda: sorted(counting(holders_now(clients, oid))) == d["protected"], 60,
               what=f"the nodes holding {d['protected']}")
    return d


def test_a_put_with_three_replicas_is_held_byte_exact_by_three_nodes_before_the_reply(
        clients, uid):
    data = payload(3 * MIB + 123, seed=31)
    before = {n: stats(c) for n, c in clients.items()}

    assert put(clients["A"], uid, data, "REPLICAS", 3, meta=b"three") == 3

    held = counting(holders_now(clients, uid))  # right after the reply: no wait
    assert len(held) >= 3, (
        f"three nodes must hold it when the put answers: {holders_now(clients, uid)}")
    assert held["A"] == ("primary", 3), held
    assert all(c == ("protected", 3) for n, c in held.items() if n != "A"), held
    assert_byte_exact(clients, held, uid, data, b"three")
    for n in held:
        if n != "A":
            st = stats(clients[n])
            assert st["protected_objects"] == before[n]["protected_objects"] + 1, n
    assert stats(clients["A"])["replicas_placed"] > before["A"]["replicas_placed"]

    loc = exactly(clients, uid, 3)
    assert loc["owner"] == "A" and loc["replicas"] == 3, loc
    assert set(loc["protected"]) <= set(loc["locations"]), loc
    assert to_int(info(clients["A"], uid)["replicas"]) == 3
    cleanup(clients, uid)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_a_put_answers_once_k_nodes_hold_it(clients, uid, k):
    data = payload(64 * 1024 + k, seed=k)
    reply = put(clients["B"], uid, data, "REPLICAS", k)
    if k == 1:
        assert reply == b"OK", "REPLICAS 1 answers as a plain put"
    else:
        assert reply == k, f"REPLICAS {k} on {len(NAMES)} nodes answered {reply!r}"
    held = counting(holders_now(clients, uid))
    assert len(held) >= k and held["B"] == ("primary", k), held
    assert_byte_exact(clients, held, uid, data, b"m")
    if k > 1:
        exactly(clients, uid, k)
    cleanup(clients, uid, on="B")


def test_a_count_above_the_live_nodes_answers_at_its_wait_with_every_node(clients, uid):
    data = payload(4096, seed=8)
    t0 = time.monotonic()
    reply = put(clients["A"], uid, data, "REPLICAS", 8, "WAIT", 1500)
    took = time.monotonic() - t0
    assert reply == len(NAMES), f"REPLICAS 8 on {len(NAMES)} live nodes answered {reply!r}"
    assert took >= 1.4, f"answered {reply} after {took:.2f}s, before its WAIT 1500 ran out"
    held = counting(holders_now(clients, uid))
    assert sorted(held) == sorted(NAMES), held
    wait_until(lambda: stats(clients["A"])["replicas_below_target"] >= 1, 60,
               what="the object short of its count counted below target")
    cleanup(clients, uid)
    wait_until(lambda: stats(clients["A"])["replicas_below_target"] == 0, 60,
               what="replicas_below_target back to 0 after the delete")


def test_wait_0_answers_1_at_once_and_the_copies_follow(clients, uid):
    data = payload(256 * 1024, seed=9)
    assert put(clients["C"], uid, data, "REPLICAS", 3, "WAIT", 0) == 1
    wait_until(lambda: len(counting(holders_now(clients, uid))) >= 3, 60,
               what="three holders after a put with WAIT 0")
    held = counting(holders_now(clients, uid))
    assert held["C"] == ("primary", 3), held
    assert_byte_exact(clients, held, uid, data, b"m")
    cleanup(clients, uid, on="C")


def test_create_and_seal_take_a_replica_count(clients, uid):
    a = clients["A"]
    data = payload(100000, seed=10)
    for oid, create_opts, seal_opts, k in (
            (uid(b"create"), ["REPLICAS", 2], [], 2),
            (uid(b"seal"), [], ["REPLICAS", 3, "WAIT", 30000], 3)):
        a.execute_command("OBJ.CREATE", oid, len(data), "META", b"cs", *create_opts)
        a.execute_command("OBJ.WRITE", oid, 0, data)
        assert a.execute_command("OBJ.SEAL", oid, *seal_opts) == k, (create_opts, seal_opts)
        held = counting(holders_now(clients, oid))
        assert len(held) >= k and held["A"] == ("primary", k), held
        assert_byte_exact(clients, held, oid, data, b"cs")
        cleanup(clients, oid)


def gone_everywhere(clients, oid, what):
    wait_until(lambda: not holders_now(clients, oid), 60, what=f"{what}: every copy gone")

    def notfound():
        try:
            clients["A"].execute_command("OBJ.LOCATE", oid)
        except ResponseError as e:
            return err_code(e) == "NOTFOUND"
        return False

    wait_until(notfound, 60, what=f"{what}: OBJ.LOCATE NOTFOUND")


@pytest.mark.parametrize("k", [2, 3])
def test_a_delete_right_after_the_put_purges_every_copy(clients, uid, k):
    assert put(clients["B"], uid, b"d" * 1000, "REPLICAS", k) == k
    assert clients["B"].execute_command("OBJ.DEL", uid) in (b"OK", b"DEFERRED")
    gone_everywhere(clients, uid, f"a delete right after a put of {k} copies")


def test_a_delete_on_a_protected_holder_purges_every_copy(clients, uid):
    data = payload(50000, seed=11)
    assert put(clients["D"], uid, data, "REPLICAS", 3) == 3
    d = exactly(clients, uid, 3)
    other = next(n for n in d["protected"] if n != "D")
    assert clients[other].execute_command("OBJ.DEL", uid) in (b"OK", b"DEFERRED")
    gone_everywhere(clients, uid, "a delete on a protected holder")
    # The id can be put again: a new generation, with copies of its own.
    data2 = payload(50001, seed=12)
    assert put(clients["E"], uid, data2, "REPLICAS", 2) == 2
    held2 = counting(holders_now(clients, uid))
    assert len(held2) >= 2 and held2["E"] == ("primary", 2), held2
    assert_byte_exact(clients, held2, uid, data2, b"m")
    cleanup(clients, uid, on="E")


# ---- two live nodes only -----------------------------------------------------------------

def test_with_two_live_nodes_a_put_of_three_answers_2_after_its_wait(make_cluster, uid):
    cl = make_cluster(names=("A", "B"), layout="separate", memory="64mb")
    a, b = cl["A"].client(), cl["B"].client()
    data = payload(200000, seed=13)
    t0 = time.monotonic()
    reply = put(a, uid, data, "REPLICAS", 3, "WAIT", 2000)
    took = time.monotonic() - t0
    assert reply == 2, f"REPLICAS 3 with two live nodes answered {reply!r}"
    assert took >= 1.9, f"answered after {took:.2f}s, before its WAIT 2000 ran out"
    assert copy_of(a, uid) == ("primary", 3)
    assert copy_of(b, uid) == ("protected", 3)
    assert sha256(b.execute_command("OBJ.GET", uid)) == sha256(data)


def test_the_node_default_count_and_replica_timeout_apply_to_a_plain_put(make_cluster, uid):
    cl = make_cluster(names=("A", "B"), layout="separate", memory="64mb",
                      extra_args=["replicas", "2", "replica-timeout", "1500"])
    a, b = cl["A"].client(), cl["B"].client()
    assert put(a, uid(b"default"), b"x" * 1000) == 2, "the node default replicas 2"
    assert copy_of(b, uid(b"default")) == ("protected", 2)
    assert put(a, uid(b"one"), b"y" * 1000, "REPLICAS", 1) == b"OK"
    assert copy_of(b, uid(b"one")) is None
    t0 = time.monotonic()
    assert put(a, uid(b"three"), b"z" * 1000, "REPLICAS", 3) == 2
    took = time.monotonic() - t0
    assert took >= 1.4, f"answered after {took:.2f}s, before replica-timeout 1500 ran out"


# ---- bad input ---------------------------------------------------------------------------

BIG = "99999999999999999999999"
BAD_COUNTS = [
    pytest.param(["REPLICAS", "0"], id="zero"),
    pytest.param(["REPLICAS", "-1"], id="negative"),
    pytest.param(["REPLICAS", "9"], id="above-replicas-max-8"),
    pytest.param(["REPLICAS", "17"], id="above-16"),
    pytest.param(["REPLICAS", BIG], id="overflow"),
    pytest.param(["REPLICAS", "two"], id="not-a-number"),
    pytest.param(["REPLICAS", ""], id="empty"),
    pytest.param(["REPLICAS", "2.5"], id="fraction"),
    pytest.param(["REPLICAS"], id="without-value"),
    pytest.param(["REPLICAS", "2", "WAIT", "-1"], id="wait-negative"),
    pytest.param(["REPLICAS", "2", "WAIT", "soon"], id="wait-not-a-number"),
]


@pytest.mark.parametrize("opts", BAD_COUNTS)
def test_a_bad_replica_count_on_put_is_badarg_and_stores_nothing(r, uid, opts):
    before = stats(r)
    expect_error(r, ["OBJ.PUT", uid, b"data", *opts], "BADARG")
    assert r.execute_command("OBJ.EXISTS", uid) == 0
    assert_stats_unchanged(before, stats(r), f"OBJ.PUT {opts}")


@pytest.mark.parametrize("opts", BAD_COUNTS)
def test_a_bad_replica_count_on_create_is_badarg_and_creates_nothing(r, uid, opts):
    before = stats(r)
    expect_error(r, ["OBJ.CREATE", uid, "4", *opts], "BADARG")
    assert_stats_unchanged(before, stats(r), f"OBJ.CREATE {opts}")
    assert r.execute_command("OBJ.EXISTS", uid) == 0


@pytest.mark.parametrize("opts", BAD_COUNTS)
def test_a_bad_replica_count_on_seal_is_badarg_and_leaves_it_created(r, uid, opts):
    r.execute_command("OBJ.CREATE", uid, "4")
    r.execute_command("OBJ.WRITE", uid, 0, b"abcd")
    before = stats(r)
    expect_error(r, ["OBJ.SEAL", uid, *opts], "BADARG")
    assert_stats_unchanged(before, stats(r), f"OBJ.SEAL {opts}")
    assert to_str(info(r, uid)["state"]) == "created"
    r.execute_command("OBJ.ABORT", uid)


def test_a_count_above_a_configured_maximum_is_badarg(make_server, uid):
    s = make_server(module_args=["replicas-max", "3"])
    c = s.client()
    assert to_str(c.execute_command("CONFIG", "GET", "objstore.replicas-max")[1]) == "3"
    expect_error(c, ["OBJ.PUT", uid, b"d", "REPLICAS", "4"], "BADARG")
    assert c.execute_command("OBJ.EXISTS", uid) == 0
    # Three is allowed (a lone node answers at once with itself under WAIT 0).
    assert c.execute_command("OBJ.PUT", uid, b"d", "REPLICAS", "3", "WAIT", "0") == 1
    for name, value in (("replicas-max", "17"), ("replicas-max", "0"), ("replicas", "0")):
        with pytest.raises(ResponseError):
            c.execute_command("CONFIG", "SET", f"objstore.{name}", value)
    assert to_str(c.execute_command("CONFIG", "GET", "objstore.replicas-max")[1]) == "3"


# ---- protected copies under memory pressure ----------------------------------------------

def test_a_protected_copy_survives_an_arena_flood_that_evicts_an_ordinary_replica(
        make_cluster, uid):
    cl = make_cluster(names=("A", "B"), layout="separate", memory="64mb",
                      node_memory={"B": "8mb"})
    a, b = cl["A"].client(), cl["B"].client()
    assert stats(b)["tier_enabled"] == 0, "the flood must meet a full arena, not a spill tier"
    pdata, rdata = payload(MIB, seed=21), payload(MIB, seed=22)
    pid, rid = uid(b"protected"), uid(b"replica")
    assert put(a, pid, pdata, "REPLICAS", 2) == 2
    assert copy_of(b, pid) == ("protected", 2)
    assert put(a, rid, rdata) == b"OK"
    wait_locations(b, rid, ["A"])
    assert fetch(b, rid) == ["OK"]
    assert copy_of(b, rid) == ("replica", 1)

    before = stats(b)
    oom = None
    for i in range(16):
        try:
            b.execute_command("OBJ.PUT", uid(b"flood%d" % i), payload(MIB, seed=100 + i))
        except ResponseError as e:
            oom = e
            break
    assert oom is not None and err_code(oom) == "OOM", (
        f"sixteen 1 MiB puts into an 8 MiB arena: {oom}")
    after = stats(b)
    assert b.execute_command("OBJ.EXISTS", rid) == 0, "the ordinary replica was not evicted"
    assert after["evictions"] - before["evictions"] == 1, (
        f"one eviction (the ordinary replica), counted {after['evictions']} - "
        f"{before['evictions']}")
    assert copy_of(b, pid) == ("protected", 2), "the protected copy was evicted"
    assert sha256(b.execute_command("OBJ.GET", pid)) == sha256(pdata)
    wait_copies(a, pid, lambda d: d["protected"] == ["A", "B"], what="A and B protected")
    wait_locations(a, rid, ["A"])  # the evicted replica left the directory


# ---- failure domains ---------------------------------------------------------------------

def test_copies_go_to_distinct_labels_first(make_cluster, uid):
    labels = {"A": "rack1", "B": "rack1", "C": "rack2", "D": "rack2", "E": "rack3"}
    cl = make_cluster(names=(), layout="separate", memory="64mb")
    for name, label in labels.items():
        cl.add_node(name, extra_args=["node-label", label])
    clients = {n: cl[n].client() for n in labels}
    wait_nodes(clients["A"], labels, timeout=60)  # every node and its label registered
    # A's placement reads the node set on its own clock: once a put of five copies is
    # held by all five, A knows every node (and its label).
    assert put(clients["A"], uid(b"all"), b"w" * 100, "REPLICAS", 5, "WAIT", 60000) == 5
    cleanup(clients, uid(b"all"))
    for i in range(6):
        oid = uid(b"l%d" % i)
        assert put(clients["A"], oid, b"x" * 2000, "REPLICAS", 3) == 3
        held = counting(holders_now(clients, oid))
        assert len({labels[n] for n in held}) == 3, (
            f"three copies on {len(set(labels.values()))} labels: {sorted(held)}")
    # More copies than labels: placed all the same, labels repeat.
    oid = uid(b"four")
    assert put(clients["A"], oid, b"y" * 2000, "REPLICAS", 4) == 4
    assert len(counting(holders_now(clients, oid))) >= 4
