"""objClientBroadcast (client/objstore.h): one call places an object on a list of nodes.

Driven through build/tests/server/broadcast_client (tests/server/broadcast_client.c),
which prints each node's outcome by name and exits 0 only when the call reported
success, which it checks agrees with every node's outcome.

- success only when every node holds the object (checked on each node afterwards);
- each node's failure reported by its name (a node that is down, a missing object).
"""

import os
import subprocess

import pytest

from objhelpers import MIB, payload, sha256, wait_locations
from objnodes import build_path, free_port


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B", "C", "D", "E"), layout="separate")


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


def test_broadcast_succeeds_only_when_every_node_holds_the_object(cl, binary, uid):
    oid = "bc-ok-" + uid(b"").hex()
    data = payload(4 * MIB, seed=9)
    a = cl["A"].client()
    assert a.execute_command("OBJ.PUT", oid, data) == b"OK"
    wait_locations(a, oid, ["A"])
    dests = [(n, cl[n].port) for n in ("B", "C", "D", "E")]

    rc, out = broadcast(binary, oid, dests)

    assert rc == 0 and out == {n: "OK" for n, _ in dests}
    for n, _ in dests:
        got = cl[n].client().execute_command("OBJ.GET", oid)
        assert sha256(got) == sha256(data), f"{n}: the copy differs"


def test_broadcast_names_each_node_that_failed(cl, binary, uid):
    oid = "bc-down-" + uid(b"").hex()
    a = cl["A"].client()
    assert a.execute_command("OBJ.PUT", oid, payload(MIB, seed=4)) == b"OK"
    wait_locations(a, oid, ["A"])
    dead = free_port()  # nothing listens there
    dests = [("B", cl["B"].port), ("ghost", dead), ("C", cl["C"].port)]

    rc, out = broadcast(binary, oid, dests)

    assert rc == 1
    assert out["B"] == "OK" and out["C"] == "OK"
    assert out["ghost"] != "OK" and out["ghost"], "the unreachable node is named with a reason"


def test_broadcast_of_a_missing_object_fails_on_every_node_by_name(cl, binary, uid):
    oid = "bc-missing-" + uid(b"").hex()
    dests = [(n, cl[n].port) for n in ("B", "C")]

    rc, out = broadcast(binary, oid, dests, timeout_ms=2000)

    assert rc == 1
    for n, _ in dests:
        assert out[n].startswith("NOTFOUND"), f"{n}: {out[n]}"
