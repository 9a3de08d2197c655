"""The spill tier's capacity (docs/tiers.md): a node with a 64 MiB arena takes 1 GiB of
puts, and every object stays readable byte-exact through OBJ.GET and OBJ.PIN on the
node and through OBJ.FETCH from another node (served straight from the tier file when
the object is spilled). Node A spills; node B (64 MiB, no tier) fetches.
"""

import os
import shutil
import tempfile

import pytest

from objhelpers import MIB, codes, fetch, info, read_arena, reply_map, stats, to_int, to_str
from test_spill import blob

N = 1024  # 1 GiB of 1 MiB objects


@pytest.fixture
def spill_dir():
    d = tempfile.mkdtemp(prefix="objstore-spill-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cl(make_cluster, spill_dir):
    cl = make_cluster(names=("B",), layout="separate", memory="64mb")
    cl.add_node("A", memory="64mb", extra_args=("spill-dir", spill_dir))
    return cl


def test_a_gib_of_puts_into_a_64_mib_arena_stays_readable_everywhere(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    ids = [uid(b"c%04d" % i) for i in range(N)]
    for i, oid in enumerate(ids):
        assert a.obj("OBJ.PUT", oid, blob(i)) == b"OK", i
    st = stats(a)
    assert st["memory_objects"] + st["tier_objects"] == N
    assert st["tier_objects"] >= N - 64
    assert st["tier_bytes"] == st["tier_objects"] * MIB
    assert len([f for f in os.listdir(to_str(st["tier_path"])) if f.endswith(".spill")]) == \
        st["tier_objects"]

    # B fetches every one; most are served from A's tier files
    served_before = stats(a)["tcp_served"]
    for i, oid in enumerate(ids):
        assert codes(fetch(b, oid)) == ["OK"], i
        assert b.obj("OBJ.GET", oid) == blob(i), i
    assert stats(a)["tcp_served"] - served_before == N
    assert stats(a)["restores"] == 0, "serving a fetch restored objects into A's arena"

    for i, oid in enumerate(ids):  # GET on A brings each back
        assert a.obj("OBJ.GET", oid) == blob(i), i
    arena = stats(a)["arena_path"]
    for i in range(0, N, 8):  # PIN too: the bytes at the offset it answers
        pin = reply_map(a.obj("OBJ.PIN", ids[i]))
        assert read_arena(arena, to_int(pin["offset"]), MIB) == blob(i), i
        assert to_str(info(a, ids[i])["tier"]) == "memory"
        assert a.obj("OBJ.RELEASE", ids[i]) == b"OK"
    st = stats(a)
    assert st["restores"] > 0 and st["restore_failures"] == 0 and st["spill_failures"] == 0
