"""A fetch over RDMA of an object its owner has spilled (docs/tiers.md): the owner
reads the tier file into a buffer, checks it and sends it inline in the RDMA stream
(no READ rendezvous: the buffer is not in the registered arena), without restoring
it into its arena; the requester gets the object byte for byte.

Node S has a 16 MiB arena and a spill tier; B (from the session's cluster) fetches.
"""

import os
import shutil
import tempfile

import pytest

from objhelpers import MIB, fetch, info, stats, to_str, wait_locations
from objnodes import RdmaNode, finish, wait_registered
from rdmahelpers import assert_same_object


class SpillNode(RdmaNode):
    """An RDMA node with a spill tier in spill_dir."""

    def __init__(self, *args, spill_dir, **kw):
        super().__init__(*args, **kw)
        self.spill_dir = spill_dir

    def command_line(self, port):
        line = super().command_line(port)
        i = line.index("--loadmodule") + 2
        return line[:i] + ["spill-dir", self.spill_dir] + line[i:]


def blob(i):
    stamp = b"%015d|" % i
    return (stamp * (MIB // len(stamp) + 1))[:MIB]


@pytest.fixture
def spill_node(cluster):
    d = tempfile.mkdtemp(prefix="objstore-rdma-spill-")
    s = SpillNode("S", cluster.dir.addr, os.path.join(cluster.workroot, "nodeS"),
                  memory="16mb", secret=cluster["B"].secret, spill_dir=d)
    s.start()
    try:
        wait_registered(s.client(), list(cluster.nodes) + ["S"], 30.0)
        yield s
    finally:
        print(f"--- node S log (tail) ---\n{s.log_tail()}")  # shown when the test fails
        finish([s])
        shutil.rmtree(d, ignore_errors=True)


def test_a_spilled_object_is_fetched_over_rdma_from_its_file(cluster, spill_node, uid):
    nb = cluster["B"]
    s, b = spill_node.client(), nb.client()
    ids = [uid(b"s%02d" % i) for i in range(24)]
    for i, oid in enumerate(ids):
        assert s.execute_command("OBJ.PUT", oid, blob(i), "META", b"m") == b"OK"
    spilled = [i for i, oid in enumerate(ids) if to_str(info(s, oid)["tier"]) == "spilled"]
    assert len(spilled) >= 8, spilled
    before = stats(s)
    for i in spilled[:4]:
        wait_locations(b, ids[i], ["S"], timeout=30.0)
        assert fetch(b, ids[i], via="rdma", timeout=120000) == ["OK"]
        assert_same_object(nb, b, ids[i], blob(i), b"m")
    after = stats(s)
    assert after["rdma_served_inline"] - before["rdma_served_inline"] == 4
    assert after["restores"] == before["restores"], "the fetch restored into the arena"
    for i in spilled[:4]:
        b.execute_command("OBJ.DEL", ids[i])
