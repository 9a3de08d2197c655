"""objClientBroadcast (client/objstore.h): one call places an object on a list of nodes.

Driven through build/tests/server/broadcast_client (tests/server/broadcast_client.c),
which prints each node's outcome by name and exits 0 only when the call reported
success, which it checks agrees with every node's outcome.

- success only when every node holds the object (checked on each node afterwards), the
  nodes asked at once (they relay to each other and the owner sends some away);
- each node's failure reported by its name with its own reason (a node that is down, a
  node without room for the object, a missing object), the other nodes holding it.
"""

import os
import subprocess

import pytest

from objhelpers import MIB, payload, sha256, stats, wait_locations
from objnodes import build_path, free_port


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    cl = make_cluster_module(names=("A", "B", "C", "D", "E"), layout="separate")
    cl.add_node("tiny", memory="1mb")  # no room for the objects below
    return cl


@pytest.fixture(scope="module")
def binary():
    path = build_path("tests", "server", "broadcast_client")
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it with make test-programs", pytrace=False)
    return path


def broadcast(binary, oid, dests, timeout_ms=10000):
    """Run the helper; returns (exit status, {name: "OK" or the error text})."""
    args = [binary, oid, str(timeout_ms)] + [f"{name}={port}" for name, port in dests]
    run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert run.returncode in (0, 1), f"broadcast_client: {run.returncode}: {run.stderr}"
    out = {}
    for line in run.stdout.splitlines():
        name, verdict = line.split(" ", 1)
        out[name] = "OK" if verdict == "OK" else verdict[len("FAIL "):]
    assert list(out) == [name for name, _ in dests], f"one line per node, in order: {run.stdout}"
    return run.returncode, out


def put_on_a(cl, oid, data):
    a = cl["A"].client()
    assert a.execute_command("OBJ.PUT", oid, data) == b"OK"
    wait_locations(a, oid, ["A"], timeout=60)


def assert_held(cl, oid, data, names):
    for n in names:
        got = cl[n].client().execute_command("OBJ.GET", oid)
        assert sha256(got) == sha256(data), f"{n}: the copy differs"


def test_broadcast_succeeds_only_when_every_node_holds_the_object(cl, binary, uid):
    oid = "bc-ok-" + uid(b"").hex()
    data = payload(32 * MIB, seed=9)
    put_on_a(cl, oid, data)
    dests = [(n, cl[n].port) for n in ("B", "C", "D", "E")]
    before = {n: stats(cl[n].client()) for n in "ABCDE"}

    rc, out = broadcast(binary, oid, dests, timeout_ms=60000)

    assert rc == 0 and out == {n: "OK" for n, _ in dests}
    assert_held(cl, oid, data, [n for n, _ in dests])
    after = {n: stats(cl[n].client()) for n in "ABCDE"}
    # At once: a node asking while the owner's upload slot is taken is sent away
    # (BUSY) or takes the bytes from a node still receiving them (PART).
    overlap = sum(after[n][k] - before[n][k] for n in after
                  for k in ("transfer_redirects", "transfer_relayed"))
    assert overlap > 0, "the nodes fetched one after the other, not at once"


def test_broadcast_names_each_node_that_failed(cl, binary, uid):
    oid = "bc-down-" + uid(b"").hex()
    data = payload(4 * MIB, seed=4)
    put_on_a(cl, oid, data)
    dead = free_port()  # nothing listens there
    dests = [("B", cl["B"].port), ("ghost", dead), ("tiny", cl["tiny"].port),
             ("C", cl["C"].port)]

    rc, out = broadcast(binary, oid, dests)

    assert rc == 1
    assert out["B"] == "OK" and out["C"] == "OK"
    assert out["ghost"] != "OK" and out["ghost"], "the unreachable node is named with a reason"
    assert out["tiny"].startswith("OOM"), f"tiny: {out['tiny']}"
    assert_held(cl, oid, data, ["B", "C"])
    assert cl["tiny"].client().execute_command("OBJ.EXISTS", oid) == 0


def test_broadcast_of_a_missing_object_fails_on_every_node_by_name(cl, binary, uid):
    oid = "bc-missing-" + uid(b"").hex()
    dests = [(n, cl[n].port) for n in ("B", "C")]

    # NOTFOUND comes from the directory at once; the TIMEOUT only stops a hang.
    rc, out = broadcast(binary, oid, dests, timeout_ms=30000)

    assert rc == 1
    for n, _ in dests:
        assert out[n].startswith("NOTFOUND"), f"{n}: {out[n]}"
