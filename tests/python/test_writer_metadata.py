"""What a writer can make a reader do: the metadata header of an object is chosen by
whoever may write its id (a raw OBJ.PUT needs no package), so a reader must refuse any
layout that names more bytes than the object holds, run a DLPack deleter exactly once
however a consumer treats the capsule, and never unpickle unless asked to (get_object).

The checks that would crash the reader before the fix run in a child interpreter (the
suite's own interpreter, with the environment it runs under: libasan when CI preloads
it), so that a crash is a failed test rather than a lost run."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import objstore
from pyhelpers import pins

try:
    import torch
except ImportError:  # CI installs python3-torch; the torch tests fail without it
    torch = None


def header(**fields):
    return json.dumps({"objpy": 1, **fields}, separators=(",", ":")).encode()


def run_child(port, code):
    """Run code in a child interpreter with `c` connected to the node and objstore, np
    and torch imported; returns (exit status, stdout + stderr)."""
    prelude = ("import objstore, numpy as np, torch\n"
               f"c = objstore.connect('127.0.0.1', {port})\n")
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


# Headers a writer may send: each names a layout the object cannot hold.
HOSTILE_LAYOUTS = [
    ("2**61 doubles in 16 bytes", header(kind="numpy", dtype="<f8", shape=[2**61])),
    ("2**62 x 4 bytes wraps to 0", header(kind="numpy", dtype="|u1", shape=[2**62, 4])),
    ("2**64 wraps in int64", header(kind="numpy", dtype="|u1", shape=[2**32, 2**32])),
    ("3 x 2**62 u1: product wraps to a small size", header(kind="numpy", dtype="|u1",
                                                          shape=[3, 2**62 + 1])),
    ("extent beyond int64", header(kind="numpy", dtype="|u1", shape=[2**70])),
    ("negative extent", header(kind="numpy", dtype="|u1", shape=[-1])),
    ("negative times negative", header(kind="numpy", dtype="<f8", shape=[-2, -1])),
    ("float extent", header(kind="numpy", dtype="|u1", shape=[1.5])),
    ("shape not a list", header(kind="numpy", dtype="|u1", shape="16")),
    ("33 dimensions", header(kind="numpy", dtype="|u1", shape=[1] * 33)),
    ("too large for the object by one", header(kind="numpy", dtype="<f8", shape=[3])),
    ("torch dtype too large", header(kind="torch", dtype="float64", shape=[2**61])),
    ("torch dtype that is no torch dtype", header(kind="torch", dtype="object", shape=[2])),
    ("Python objects", header(kind="numpy", dtype="|O", shape=[2])),
    ("structured with an object field", header(kind="numpy", dtype=[["a", "|O"]], shape=[1])),
    ("dtype that is no dtype", header(kind="numpy", dtype="<q9z", shape=[1])),
    ("dtype of the wrong type", header(kind="numpy", dtype=7, shape=[1])),
    ("memoryview larger than the object", header(kind="memoryview", format="d",
                                                 shape=[2**61])),
    ("memoryview format that is no format", header(kind="memoryview", format="zz", shape=[1])),
]


@pytest.mark.parametrize("meta", [m for _, m in HOSTILE_LAYOUTS],
                         ids=[n for n, _ in HOSTILE_LAYOUTS])
def test_get_refuses_a_layout_the_object_cannot_hold(oc, rc, uid, meta):
    rc.obj("OBJ.PUT", uid, b"\x01" * 16, "META", meta)
    with pytest.raises(objstore.BadMetadata) as e:
        oc.get(uid)
    assert e.value.code == "BADMETA"
    for kind in ("numpy", "torch"):
        with pytest.raises(objstore.BadMetadata):
            oc.get(uid, kind=kind)
    assert oc.get(uid, kind="bytes") == b"\x01" * 16, "the bytes stay readable"
    import gc
    gc.collect()
    assert pins(rc, uid) == 0, "a refused get leaves no pin"


@pytest.mark.parametrize("meta", [m for _, m in HOSTILE_LAYOUTS],
                         ids=[n for n, _ in HOSTILE_LAYOUTS])
def test_dlpack_of_a_pin_never_exceeds_the_object(server, uid, rc, meta):
    """pin() applies the header's layout to DLPack only when it fits: else the export is
    the object's bytes. Before the fix, 2**61 doubles gave torch a 2**64-byte tensor
    (SIGSEGV on sum) and [2**62, 4] u1 a double free."""
    if torch is None:
        pytest.fail("python3-torch is not installed", pytrace=False)
    rc.obj("OBJ.PUT", uid, b"\x01" * 16, "META", meta)
    rc_, out = run_child(server.port, f"""
        b = c.pin({uid!r})
        try:
            t = torch.from_dlpack(b)
        except Exception as e:  # refused by torch: nothing was exported
            print("refused", type(e).__name__)
        else:
            print("nbytes", t.numel() * t.element_size(), "sum", int(t.to(torch.float64).sum()))
            del t
        import gc; gc.collect()
        print("exports", b.exports)
    """)
    assert rc_ == 0, out
    assert "exports 0" in out, out
    if "nbytes" in out:
        assert "nbytes 16 sum 16" in out, out


def test_layout_checks_in_the_native_core(oc, uid):
    """_set_layout itself refuses what the Python layer would also refuse."""
    oc.put(uid, b"\x00" * 16)
    b = oc.pin(uid)
    bad = [(2, 64, 1, [2**61]), (1, 8, 1, [2**62, 4]), (1, 8, 1, [2**32, 2**32]),
           (1, 8, 1, [-1]), (1, 8, 1, [1] * 33), (1, 8, 1, [17]), (2, 64, 2, [2])]
    for code, bits, lanes, shape in bad:
        with pytest.raises(objstore.BadMetadata):
            b._set_layout(code, bits, lanes, shape)
    b._set_layout(2, 64, 1, [2, 0, 2**62])  # empty: no bytes
    b._set_layout(2, 64, 1, [2])
    b.release()


def test_dlpack_export_checks_bounds_and_strides(oc, uid):
    from objstore import _objstore
    oc.put(uid, np.arange(8, dtype=np.int64))
    a = oc.get(uid)
    lo, hi = a.ctypes.data, a.ctypes.data + 64
    ok = _objstore._dlpack_export(a, lo, lo, hi, (8,), (1,), 0, 64, 1)
    del ok
    for shape, strides in [((9,), (1,)), ((8,), (2,)), ((2**62,), (2**62,)),
                           ((-1,), (1,)), ((4, 4), (1, 1 << 61))]:
        with pytest.raises(objstore.BadMetadata):
            _objstore._dlpack_export(a, lo, lo, hi, shape, strides, 0, 64, 1)
    with pytest.raises(BufferError, match="negative strides"):  # torch aborts on them
        _objstore._dlpack_export(a, lo + 56, lo, hi, (8,), (-1,), 0, 64, 1)
    with pytest.raises(BufferError, match="negative strides"):
        a[::-1].__dlpack__()


def test_dlpack_deleter_runs_once_when_a_consumer_refuses_after_taking_it(server, uid, rc):
    """A consumer may call the tensor's deleter and then refuse the capsule, leaving it
    named "dltensor" (torch does when it cannot build the tensor): the capsule's
    destructor must not run the deleter again (before the fix: a use after free and a
    second release of the Buffer)."""
    rc.obj("OBJ.PUT", uid, b"\x07" * 64)
    rc_, out = run_child(server.port, f"""
        import ctypes, gc, sys
        b = c.pin({uid!r})
        refs = sys.getrefcount(b)
        cap = b.__dlpack__()
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        m = get(cap, b"dltensor")
        # DLManagedTensor: DLTensor (48 bytes on 64-bit), manager_ctx, deleter
        deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
            ctypes.c_void_p.from_address(m + 56).value)
        deleter(m)           # the consumer is done ...
        print("after deleter", b.exports, sys.getrefcount(b) - refs)
        del cap; gc.collect()  # ... and refused the capsule
        print("after capsule", b.exports, sys.getrefcount(b) - refs)
        b.release()
        print("released")
    """)
    assert rc_ == 0, out
    assert "after deleter 0 0" in out and "after capsule 0 0" in out and "released" in out, out


def test_consumed_capsule_deleter_runs_once(oc, rc, uid):
    if torch is None:
        pytest.fail("python3-torch is not installed", pytrace=False)
    oc.put(uid, np.arange(4, dtype=np.float32))
    b = oc.pin(uid)
    cap = b.__dlpack__()
    t = torch.utils.dlpack.from_dlpack(cap)
    assert b.exports == 1 and float(t.sum()) == 6.0
    del t
    import gc
    gc.collect()
    assert b.exports == 0, "the tensor's deleter ran"
    del cap
    gc.collect()
    assert b.exports == 0
    b.release()
    assert pins(rc, uid) == 0


# ---- pickles ---------------------------------------------------------------------------------

class _Touch:
    """Unpickling this runs open(path, 'w'): what a hostile writer's pickle could do."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_get_never_unpickles_a_writers_pickle(oc, rc, uid, tmp_path):
    mark = tmp_path / "ran"
    data = pickle.dumps(_Touch(str(mark)), protocol=5)
    rc.obj("OBJ.PUT", uid, data, "META", header(kind="pickle5", plen=len(data), bufs=[]))
    try:
        got = oc.get(uid)
    except Exception as e:
        got = e
    assert not mark.exists(), "get() ran the writer's pickle"
    assert isinstance(got, objstore.PickledObject), got
    assert "get_object" in str(got) and got.code == "PICKLED"
    del got
    with pytest.raises(objstore.PickledObject):
        oc.get(uid, with_meta=True)
    assert bytes(oc.get(uid, kind="memoryview")) == data, "the bytes themselves are readable"
    assert oc.get(uid, kind="bytes") == data
    assert not mark.exists(), "get() ran the writer's pickle"
    import gc
    gc.collect()
    assert pins(rc, uid) == 0


def test_get_object_unpickles_when_asked(oc, uid):
    oc.put_object(uid, {"a": np.arange(3)})
    assert oc.get_object(uid)["a"].tolist() == [0, 1, 2]


PICKLE_TABLES = [
    ("pickle longer than the object", dict(plen=2**40, bufs=[])),
    ("negative pickle length", dict(plen=-1, bufs=[])),
    ("pickle length not an int", dict(plen="4", bufs=[])),
    ("buffer beyond the object", dict(plen=4, bufs=[[8, 2**62]])),
    ("buffer offset beyond the object", dict(plen=4, bufs=[[2**63, 1]])),
    ("negative buffer", dict(plen=4, bufs=[[-8, 4]])),
    ("buffer entry not a pair", dict(plen=4, bufs=[[1, 2, 3]])),
    ("table not a list", dict(plen=4, bufs={"a": 1})),
]


@pytest.mark.parametrize("fields", [f for _, f in PICKLE_TABLES],
                         ids=[n for n, _ in PICKLE_TABLES])
def test_get_object_refuses_a_table_outside_the_object(oc, rc, uid, fields):
    rc.obj("OBJ.PUT", uid, pickle.dumps(1, protocol=5) + b"\x00" * 16, "META",
           header(kind="pickle5", **fields))
    with pytest.raises(objstore.BadMetadata):
        oc.get_object(uid)
    import gc
    gc.collect()
    assert pins(rc, uid) == 0


def test_garbled_headers_read_as_bytes(oc, rc, uid):
    for meta in (b'{"objpy":1,', b'{"objpy":1,"user":7}', b'{"objpy":1,"user":"zz"}',
                 b'{"objpy":1' + b'[' * 100000):
        rc.obj("OBJ.PUT", uid + meta[:20], b"abc", "META", meta)
        assert bytes(oc.get(uid + meta[:20])) == b"abc"
