"""The package sees a spilled object like any other (docs/tiers.md): on a node whose
arena is full of its objects, a get pins it, the pin waits while the node restores
it from the spill tier, and the view holds the right bytes."""

import shutil
import tempfile

import pytest

MIB = 1 << 20



def tier_of(rc, oid):
    """OBJ.INFO's tier field of oid."""
    reply = rc.execute_command("OBJ.INFO", oid)
    return dict(zip(reply[0::2], reply[1::2]))[b"tier"]

def blob(i):
    stamp = b"%015d|" % i
    return (stamp * (MIB // len(stamp) + 1))[:MIB]


@pytest.fixture
def spill_dir():
    d = tempfile.mkdtemp(prefix="objstore-spill-py-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_get_of_a_spilled_object_waits_for_the_restore(make_server, spill_dir):
    import objstore

    s = make_server(memory="16mb", module_args=("spill-dir", spill_dir))
    oc = objstore.connect("127.0.0.1", s.port)
    rc = s.client()
    try:
        for i in range(40):
            oc.put(b"py:%d" % i, blob(i))
        spilled = [i for i in range(40)
                   if tier_of(rc, b"py:%d" % i) == b"spilled"]
        assert spilled, "nothing was spilled"
        for i in spilled[:8]:
            v = oc.get(b"py:%d" % i)
            assert bytes(v) == blob(i), i
            del v
    finally:
        oc.close()
