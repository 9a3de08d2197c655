"""objstore.broadcast: one call places an object on many nodes (objClientBroadcast).

Five real nodes with one directory (A puts, B..E receive). The call returns None only
when every node holds the object (checked on each node through a raw client); any
node that does not is reported by its name with its own error (a missing object, a
node whose connection broke), in a BroadcastError that also names the nodes that do
hold it. The nodes are asked at once: they relay to each other and the owner sends
some of them away (BUSY), which fetches asked one after the other never cause.
"""

import hashlib
import threading
import time

import pytest

import objstore
from objhelpers import MIB, payload, stats, wait_locations
from objnodes import ObjstoreServer, finish

RECEIVERS = ("B", "C", "D", "E")


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A",) + RECEIVERS, layout="separate", memory="256mb")


@pytest.fixture
def clients(cl):
    """{name: objstore Client} of every receiver."""
    made = {n: objstore.connect("127.0.0.1", cl[n].port) for n in RECEIVERS}
    yield made
    for c in made.values():
        c.close()


def put_on_a(cl, oid, data):
    a = cl["A"].client()
    assert a.execute_command("OBJ.PUT", oid, data) == b"OK"
    wait_locations(a, oid, ["A"])


def digest(data):
    return hashlib.sha256(bytes(data)).hexdigest()


def held_by(cl, oid, names):
    """{name: sha256 of the node's copy, or None} read through raw clients."""
    out = {}
    for n in names:
        r = cl[n].client()
        out[n] = digest(r.execute_command("OBJ.GET", oid)) if r.execute_command(
            "OBJ.EXISTS", oid) == 1 else None
    return out


def test_broadcast_returns_once_every_node_holds_the_object(cl, clients, uid):
    data = payload(32 * MIB, seed=5)
    put_on_a(cl, uid, data)
    before = {n: stats(cl[n].client()) for n in ("A",) + RECEIVERS}

    assert objstore.broadcast(uid, clients, timeout=60) is None

    assert held_by(cl, uid, RECEIVERS) == {n: digest(data) for n in RECEIVERS}
    after = {n: stats(cl[n].client()) for n in ("A",) + RECEIVERS}
    down = {n: after[n]["transfer_downloaded_bytes"] - before[n]["transfer_downloaded_bytes"]
            for n in RECEIVERS}
    assert all(d >= len(data) for d in down.values()), f"each node received a copy: {down}"
    # At once: a node asked while the owner's upload slot is taken is sent away (BUSY)
    # or takes the bytes from a node still receiving them (PART).
    overlap = sum(after[n][k] - before[n][k] for n in after
                  for k in ("transfer_redirects", "transfer_relayed"))
    assert overlap > 0, "the nodes fetched one after the other, not at once"


def test_a_broadcast_started_before_the_put_is_published_waits_for_it(cl, clients, uid):
    """A trainer puts and broadcasts at once: the receivers' first lookups find nothing
    (NOTFOUND), and they are asked again until the directory lists the object."""
    data = payload(2 * MIB, seed=6)
    result = {}

    def run():
        try:
            result["r"] = objstore.broadcast(uid, clients, timeout=30)
        except Exception as e:  # the assertion below shows it
            result["r"] = e

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)  # every receiver has answered NOTFOUND at least once by now
    assert cl["A"].client().execute_command("OBJ.PUT", uid, data) == b"OK"
    t.join(60)
    assert result.get("r", "still running") is None, result
    assert held_by(cl, uid, RECEIVERS) == {n: digest(data) for n in RECEIVERS}


def test_a_list_of_clients_is_named_by_url(cl, clients, uid):
    put_on_a(cl, uid, b"small")
    assert objstore.broadcast(uid, list(clients.values())) is None
    assert held_by(cl, uid, RECEIVERS) == {n: digest(b"small") for n in RECEIVERS}


def test_a_missing_object_fails_on_every_node_by_name(clients, uid):
    with pytest.raises(objstore.BroadcastError) as info:
        objstore.broadcast(uid, clients, timeout=5)
    e = info.value
    assert sorted(e.failures) == sorted(RECEIVERS) and e.succeeded == []
    for name, err in e.failures.items():
        assert isinstance(err, objstore.ObjectNotFound), f"{name}: {err!r}"
        assert err.code == "NOTFOUND"
        assert name in str(e)


def test_a_broken_node_is_named_and_the_others_hold_the_object(cl, clients, uid):
    lone = ObjstoreServer(memory="32mb", name="pylone")
    lone.start()
    try:
        dead = objstore.connect("127.0.0.1", lone.port)
        lone.sigkill()
        data = payload(2 * MIB, seed=6)
        put_on_a(cl, uid, data)
        with pytest.raises(objstore.BroadcastError) as info:
            objstore.broadcast(uid, {**clients, "gone": dead}, timeout=30)
        dead.close()
    finally:
        finish([lone])
    e = info.value
    assert list(e.failures) == ["gone"], f"{e.failures!r}"
    assert isinstance(e.failures["gone"], objstore.ConnectionFailed)
    assert sorted(e.succeeded) == sorted(RECEIVERS)
    assert held_by(cl, uid, RECEIVERS) == {n: digest(data) for n in RECEIVERS}
    assert "gone" in str(e)


BAD_CALLS = [
    (lambda c: objstore.broadcast(b"x", {}), ValueError),
    (lambda c: objstore.broadcast(b"x", []), ValueError),
    (lambda c: objstore.broadcast(b"", c), ValueError),
    (lambda c: objstore.broadcast(b"x" * 513, c), ValueError),
    (lambda c: objstore.broadcast(7, c), TypeError),
    (lambda c: objstore.broadcast(b"x", {"B": "not a client"}), TypeError),
    (lambda c: objstore.broadcast(b"x", {"B": c["B"], "B again": c["B"]}), ValueError),
    (lambda c: objstore.broadcast(b"x", c, timeout=0), ValueError),
    (lambda c: objstore.broadcast(b"x", c, timeout=-1), ValueError),
    (lambda c: objstore.broadcast(b"x", c, timeout=objstore.FOREVER), ValueError),
    (lambda c: objstore.broadcast(b"x", c, timeout="5"), TypeError),
]


@pytest.mark.parametrize("call,exc", BAD_CALLS, ids=[str(i) for i in range(len(BAD_CALLS))])
def test_bad_calls_are_refused_before_any_node_is_asked(cl, clients, call, exc):
    before = {n: stats(cl[n].client())["fetch_requests"] for n in RECEIVERS}
    with pytest.raises(exc):
        call(clients)
    assert {n: stats(cl[n].client())["fetch_requests"] for n in RECEIVERS} == before


def test_a_closed_client_is_refused_before_any_node_is_asked(cl, clients, uid):
    put_on_a(cl, uid, b"closed")
    clients["C"].close()
    with pytest.raises(objstore.ClientClosed):
        objstore.broadcast(uid, clients)
    assert held_by(cl, uid, RECEIVERS) == {n: None for n in RECEIVERS}
