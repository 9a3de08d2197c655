"""Copies and drain through the Python package (the C library's objClientPutPartsCounted,
objClientSealCounted; docs/cluster.md "Copies, repair and drain", docs/client.md "Copies
and drain").

Three real nodes with one directory. A put, put_object, create or model publish with
replicas=k returns how many live nodes hold the object (k, or fewer when the wait ran
out, which is not an error), and the nodes it names hold the very bytes (checked on each
node through a raw client); an object of one copy returns None. drain() moves a node's
objects away and makes it refuse new ones (NodeDraining) until drain_cancel().
"""

import json

import numpy as np
import pytest
import redis

import objstore
from objhelpers import MIB, payload, sha256, to_int, to_str, wait_until

NAMES = ("A", "B", "C")


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=NAMES, layout="separate", memory="128mb")


@pytest.fixture
def oa(cl):
    """An objstore client of node A (zero-copy: the same machine)."""
    c = objstore.connect("127.0.0.1", cl["A"].port)
    yield c
    c.close()


def holders(cl, oid):
    """{node name: sha256 of its sealed copy} of the nodes that hold oid, read raw."""
    out = {}
    for n in NAMES:
        r = cl[n].client()
        if r.execute_command("OBJ.EXISTS", oid) != 1:
            continue
        try:
            out[n] = sha256(r.execute_command("OBJ.GET", oid))
        except redis.exceptions.ResponseError as e:
            if not str(e).startswith("NOTFOUND"):  # deleted between the two: not held
                raise
    return out


def copy_kinds(cl, oid):
    """{node name: OBJ.INFO's copy} of the nodes that hold oid."""
    out = {}
    for n in NAMES:
        r = cl[n].client()
        if r.execute_command("OBJ.EXISTS", oid) == 1:
            reply = r.execute_command("OBJ.INFO", oid)
            fields = {to_str(k): v for k, v in zip(reply[::2], reply[1::2])}
            out[n] = (to_str(fields["copy"]), to_int(fields["replicas"]))
    return out


def protected_of(client, oid):
    """The sorted names locate() lists as protected holders of oid."""
    return sorted(client.locate(oid).get("protected", []))


def wait_protected(client, oid, n):
    """Wait until locate() lists n protected holders of oid (a holder publishes its copy
    to the directory a moment after it answers HELD); returns their names."""
    return wait_until(lambda: len(protected_of(client, oid)) == n and protected_of(client, oid),
                      what=f"{n} protected holders of {oid!r:.80}")


@pytest.mark.parametrize("size", [100, 2 * MIB], ids=["inline", "arena"])
def test_put_with_replicas_returns_the_holder_count(cl, oa, uid, size):
    data = payload(size, seed=size)
    assert oa.put(uid, data, replicas=3) == 3
    held = holders(cl, uid)
    assert sorted(held) == list(NAMES), "three nodes hold it when put answers 3"
    assert set(held.values()) == {sha256(data)}, "every copy is byte-exact"
    assert wait_protected(oa, uid, 3) == list(NAMES)
    loc = oa.locate(uid)
    assert loc["replicas"] == 3 and loc["owner"] == "A"
    kinds = copy_kinds(cl, uid)
    assert kinds["A"] == ("primary", 3)
    assert kinds["B"] == kinds["C"] == ("protected", 3)
    oa.delete(uid)


def test_put_in_remote_mode_returns_the_holder_count(cl, uid):
    with objstore.connect("127.0.0.1", cl["B"].port, zero_copy=False) as ob:
        assert ob.put(uid, np.arange(1000, dtype=np.int64), replicas=2) == 2
        wait_protected(ob, uid, 2)
        ob.delete(uid)


def test_put_object_and_create_count_their_holders(cl, oa, uid):
    assert oa.put_object(uid + b":obj", {"w": np.ones(64)}, replicas=2) == 2
    creation = oa.create(uid + b":created", 16, replicas=2)
    with creation as view:
        view[:] = b"0123456789abcdef"
    assert creation.holders == 2
    for oid in (uid + b":obj", uid + b":created"):
        wait_protected(oa, oid, 2)
        oa.delete(oid)


def test_more_replicas_than_live_nodes_answers_the_count_reached(cl, oa, uid):
    """Four copies on three nodes: not an error; the wait runs out with three holders."""
    assert oa.put(uid, b"x" * 10, replicas=4, wait_ms=300) == 3
    assert oa.locate(uid)["replicas"] == 4
    oa.delete(uid)


def test_wait_0_answers_one_and_the_copies_go_on(cl, oa, uid):
    assert oa.put(uid, b"y" * 10, replicas=2, wait_ms=0) == 1
    wait_protected(oa, uid, 2)
    oa.delete(uid)


def test_replicas_above_the_nodes_maximum_is_bad_argument(cl, oa, uid):
    with pytest.raises(objstore.BadArgument):
        oa.put(uid, b"z", replicas=9)  # replicas-max 8 by default
    assert not oa.exists(uid)


def test_delete_of_an_object_of_several_copies_removes_every_copy(cl, oa, uid):
    assert oa.put(uid, b"gone", replicas=3) == 3
    wait_protected(oa, uid, 3)
    oa.delete(uid)
    wait_until(lambda: not holders(cl, uid), what="every copy deleted")


def test_model_publish_with_replicas_puts_every_part_twice(cl, oa, uid):
    torch = pytest.importorskip("torch")
    from objstore import models

    name = "model-" + uid.hex()  # a manifest names its parts as text
    sd = {"w": torch.arange(16, dtype=torch.float32), "b": torch.ones(4)}
    v = models.publish(oa, name, sd, replicas=2)
    manifest = bytes(oa.command("OBJ.VGET", name, v))
    doc = json.loads(oa.get(manifest, kind="bytes"))
    for oid in [manifest] + [e["part"].encode() for e in doc["tensors"]]:
        wait_protected(oa, oid, 2)
    got = models.get_state_dict(oa, name, v)
    assert all(torch.equal(got[k], sd[k]) for k in sd)
    del got
    models.drop(oa, name, v)


def test_drain_moves_the_objects_and_refuses_new_ones(make_cluster, uid):
    cluster = make_cluster(names=NAMES, layout="separate", memory="64mb")
    with objstore.connect("127.0.0.1", cluster["C"].port) as oc, \
            objstore.connect("127.0.0.1", cluster["A"].port) as oa:
        ids = [uid + b":%d" % i for i in range(5)]
        for i, oid in enumerate(ids):
            assert oc.put(oid, payload(4096, seed=i)) is None
        assert oc.drain_status()["state"] == "idle"
        st = oc.drain(wait_ms=60000)
        assert st["state"] == "drained", st
        assert st["objects_left"] == 0 and st["objects_moved"] >= len(ids)
        assert oc.drain()["state"] == "drained", "a second drain reports"
        with pytest.raises(objstore.NodeDraining):
            oc.put(uid + b":new", b"refused")
        for i, oid in enumerate(ids):
            assert oa.fetch([oid], timeout=30) == {oid: None}
            assert oa.get(oid, kind="bytes") == payload(4096, seed=i)
            assert oa.locate(oid)["owner"] in ("A", "B")
        st = oc.drain_cancel()
        assert st["state"] == "idle"
        assert oc.put(uid + b":after", b"taken again") is None


def test_drain_status_has_every_field(cl):
    with objstore.connect("127.0.0.1", cl["B"].port) as ob:
        st = ob.drain_status()
    assert set(st) >= {"state", "objects_left", "objects_moved", "bytes_moved", "failures",
                       "last_error"}
    assert st["state"] == "idle" and st["last_error"] == ""


def test_delete_right_after_the_put_removes_every_copy(cl, oa, uid):
    """The put answered 3 holders; a delete at once must reach the copies whose publish
    has not reached the directory yet (else they stay, protected, with no owner)."""
    assert oa.put(uid, b"gone at once", replicas=3) == 3
    oa.delete(uid)
    wait_until(lambda: not holders(cl, uid), what="every copy deleted")
