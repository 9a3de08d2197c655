"""The directory's record of copies, as the scripts leave it after ordinary commands.

Each object's meta names its owner (the node whose primary it is) and how many
copies it wants (`want`, 1 for every object today), and the sorted set
`objstore:{<id>}:prot` lists the holders whose copies count toward it: the
primary and protected copies, never a plain fetched replica, each scored by
the `boot` of the holder's incarnation that published it. A node's
registration carries its `label`, `draining` and `boot` fields. The rest of the rules
(protected copies, takeovers, moved primaries, claims, barriers) are driven
through the directory client's own test (tests/server/test_directory.c) and
the replica commands' tests.
"""

from objhelpers import fetch, locate, wait_locations, wait_nodes, wait_until

NAMES = ("A", "B")


def meta(dc, oid):
    return dc.hgetall(b"objstore:{" + oid + b"}:meta")


def prot(dc, oid):
    """The holders of oid, each with the boot its entry is scored by."""
    key = b"objstore:{" + oid + b"}:prot"
    return {m: int(s) for m, s in dc.zrange(key, 0, -1, withscores=True)}


def boot(dc, name):
    return int(dc.hget(b"objstore:node:" + name.encode(), b"boot"))


def nodes(cl):
    cs = [cl[n].client() for n in NAMES]
    for c in cs:
        wait_nodes(c, NAMES, timeout=15.0)
    return cs


def test_a_put_names_its_node_owner_with_want_one_and_a_holder(make_cluster, uid):
    cl = make_cluster(names=NAMES, layout="separate")
    a, b = nodes(cl)
    dc = cl.dir.client()
    x = uid(b"x")
    assert a.execute_command("OBJ.PUT", x, b"payload") == b"OK"
    wait_locations(b, x, ["A"])
    m = meta(dc, x)
    assert m[b"owner"] == b"A" and m[b"want"] == b"1", m
    assert prot(dc, x) == {b"A": boot(dc, "A")}


def test_a_fetched_replica_is_listed_but_is_no_holder(make_cluster, uid):
    cl = make_cluster(names=NAMES, layout="separate")
    a, b = nodes(cl)
    dc = cl.dir.client()
    x = uid(b"x")
    assert a.execute_command("OBJ.PUT", x, b"payload") == b"OK"
    wait_locations(b, x, ["A"])
    assert fetch(b, x) == ["OK"]
    wait_locations(a, x, ["A", "B"])
    assert prot(dc, x) == {b"A": boot(dc, "A")}
    assert meta(dc, x)[b"owner"] == b"A"


def test_deleting_every_copy_leaves_no_key_of_the_id(make_cluster, uid):
    cl = make_cluster(names=NAMES, layout="separate")
    a, b = nodes(cl)
    dc = cl.dir.client()
    x = uid(b"x")
    assert a.execute_command("OBJ.PUT", x, b"payload") == b"OK"
    wait_locations(b, x, ["A"])
    assert fetch(b, x) == ["OK"]
    wait_locations(a, x, ["A", "B"])
    assert a.execute_command("OBJ.DEL", x) == b"OK"
    wait_until(lambda: prot(dc, x) == {}, 10.0, what="A out of the holders")
    assert b.execute_command("OBJ.DEL", x) == b"OK"
    keys = [b"objstore:{" + x + b"}:" + k for k in (b"meta", b"loc", b"prot")]
    wait_until(lambda: dc.exists(*keys) == 0, 10.0, what="no key of the id left")


def test_the_registration_carries_label_draining_and_boot(make_cluster):
    cl = make_cluster(names=NAMES, layout="separate")
    nodes(cl)
    dc = cl.dir.client()
    h = dc.hgetall(b"objstore:node:A")
    assert h[b"label"] == b"" and h[b"draining"] == b"0", h
    assert 1 <= int(h[b"boot"]) < 2**52, h
    assert boot(dc, "A") != boot(dc, "B")  # two processes, two incarnations


def test_a_holder_killed_and_restarted_empty_is_no_holder_of_what_it_held(make_cluster, uid):
    cl = make_cluster(names=NAMES, layout="separate")
    a, b = nodes(cl)
    dc = cl.dir.client()
    x = uid(b"x")
    assert a.execute_command("OBJ.PUT", x, b"payload") == b"OK"
    wait_locations(b, x, ["A"])
    assert locate(b, x)["protected"] == ["A"]
    old = boot(dc, "A")
    cl["A"].sigkill()
    cl["A"].start()  # the same name, a new process, nothing held
    wait_until(lambda: dc.hget(b"objstore:node:A", b"boot") not in (None, str(old).encode()),
               15.0, what="A registered as a new incarnation")
    assert prot(dc, x) == {b"A": old}  # the entry of the old incarnation stays ...
    wait_until(lambda: locate(b, x)["protected"] == [], 10.0,
               what="A's old entry no longer counted")  # ... and does not count
