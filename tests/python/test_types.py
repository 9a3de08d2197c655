"""Types round-trip: numpy of many dtypes and shapes, torch tensors, DLPack, Python
objects through pickle 5 with out-of-band buffers, memoryviews of any format."""

import gc
import pickle

import numpy as np
import pytest

import objstore
from pyhelpers import arena_path, in_arena, pins

try:
    import torch
except ImportError as e:  # CI installs python3-torch: its absence is a failure, not a skip
    torch = None
    TORCH_MISSING = f"python3-torch is not installed ({e}): tests/install-deps.sh installs it"


def need_torch():
    if torch is None:
        pytest.fail(TORCH_MISSING, pytrace=False)
    return torch


DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16",
          "float32", "float64", "complex64", "complex128", "bool", ">i4", "<f8", "datetime64[ns]",
          [("a", "<i4"), ("b", "<f8"), ("c", "S3")]]
SHAPES = [(), (0,), (7,), (3, 4, 5), (2, 0, 3), (1, 1, 1, 1, 9)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_numpy_round_trip(oc, uid, dtype, shape):
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.random.default_rng(7).integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    src = raw.view(dt).reshape(shape) if n else np.zeros(shape, dt)
    oc.put(uid, src)
    got = oc.get(uid)
    assert isinstance(got, np.ndarray)
    assert got.dtype == dt and got.shape == src.shape
    assert got.tobytes() == src.tobytes()
    assert not got.flags.writeable


def test_fortran_order_input(oc, uid):
    src = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    oc.put(uid, src)
    assert np.array_equal(oc.get(uid), src)


def test_writing_a_sealed_object_raises(oc, uid):
    oc.put(uid, np.zeros(4))
    a = oc.get(uid)
    with pytest.raises(ValueError):
        a[0] = 1
    mv = oc.get(uid, kind="memoryview")
    with pytest.raises(TypeError):
        mv[0] = 1
    buf = oc.pin(uid)
    assert memoryview(buf).readonly
    with pytest.raises(TypeError):
        memoryview(buf)[0] = 1
    with pytest.raises(ValueError):
        a.setflags(write=True)


def test_get_as_other_kinds(oc, uid):
    src = np.arange(6, dtype=np.int32).reshape(2, 3)
    oc.put(uid, src)
    mv = oc.get(uid, kind="memoryview")
    assert mv.readonly and mv.nbytes == 24
    assert oc.get(uid, kind="bytes") == src.tobytes()
    assert np.array_equal(oc.get(uid, kind="numpy"), src)
    buf = oc.get(uid, kind="buffer")
    assert isinstance(buf, objstore.Buffer) and buf.size == 24


def test_memoryview_formats(oc, uid):
    import array
    src = memoryview(array.array("d", [1.5, 2.5, 3.5, 4.5])).cast("B").cast("d", [2, 2])
    oc.put(uid, src)
    got = oc.get(uid)
    assert got.format == "d" and got.shape == (2, 2) and got.tolist() == [[1.5, 2.5], [3.5, 4.5]]


def test_bytes_and_meta(oc, uid):
    oc.put(uid, bytearray(b"payload"), meta=b"\x00user meta")
    v, meta = oc.get(uid, with_meta=True)
    assert bytes(v) == b"payload" and meta == b"\x00user meta"
    oc.put(uid + b"2", np.ones(3), meta="m")
    a, meta = oc.get(uid + b"2", with_meta=True)
    assert meta == b"m" and a.sum() == 3


def test_create_with_dtype_and_shape(oc, rc, uid):
    with oc.create(uid, 0, dtype=np.float32, shape=(4, 5)) as arr:
        arr[:] = np.arange(20, dtype=np.float32).reshape(4, 5)
        del arr
    got = oc.get(uid)
    assert got.shape == (4, 5) and got[3, 4] == 19
    assert pins(rc, uid) == 1


def test_create_aborts_on_exception(oc, uid):
    with pytest.raises(RuntimeError):
        with oc.create(uid, 10) as mv:
            mv[:] = b"0123456789"
            raise RuntimeError("boom")
    assert oc.exists(uid) is False
    with oc.create(uid, 2) as mv:  # the id is free again
        mv[:] = b"ok"
    assert bytes(oc.get(uid)) == b"ok"


def test_view_kept_past_seal_stays_pinned(oc, rc, uid):
    c = oc.create(uid, 8)
    arr = np.frombuffer(c.view, np.uint8)
    arr[:] = 9
    c.seal()
    assert pins(rc, uid) == 1, "an array of the created bytes lives on: pinned"
    assert oc.delete(uid) == "DEFERRED"
    assert arr.sum() == 72
    del arr, c
    gc.collect()


# ---- torch ---------------------------------------------------------------------------------

TORCH_DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
                "uint8", "bool", "complex64"]


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_torch_round_trip(oc, rc, uid, name):
    t = need_torch()
    dt = getattr(t, name)
    src = (t.arange(24) % 7).to(dt).reshape(2, 3, 4)
    oc.put(uid, src)
    got = oc.get(uid)
    assert isinstance(got, t.Tensor) and got.dtype == dt and got.shape == src.shape
    assert t.equal(got, src)
    assert in_arena(arena_path(rc), got.data_ptr(), got.numel() * got.element_size())


def test_torch_noncontiguous_and_grad(oc, uid):
    t = need_torch()
    src = t.arange(20.0, requires_grad=True).reshape(4, 5).t()
    oc.put(uid, src)
    assert t.equal(oc.get(uid), src.detach())


def test_tensor_keeps_the_pin(oc, rc, uid):
    t = need_torch()
    oc.put(uid, t.ones(10))
    x = oc.get(uid)
    y = x[2:5]
    del x
    assert pins(rc, uid) == 1
    assert float(y.sum()) == 3.0
    del y
    gc.collect()
    assert pins(rc, uid) == 0


def test_cuda_tensor_is_refused_locally(oc, uid):
    t = need_torch()
    fake = t.empty(0, device="meta")
    with pytest.raises(ValueError):
        oc.put(uid, fake)


# ---- DLPack --------------------------------------------------------------------------------

def test_dlpack_to_torch_and_numpy(oc, rc, uid):
    t = need_torch()
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    oc.put(uid, src)
    buf = oc.pin(uid)
    tt = t.from_dlpack(buf)
    nn = np.from_dlpack(buf)
    assert tt.data_ptr() == buf.address == nn.ctypes.data
    assert tt.shape == (3, 4) and tt.dtype == t.float32 and t.equal(tt, t.from_numpy(src))
    assert np.array_equal(nn, src)
    del buf
    assert pins(rc, uid) == 1, "the DLPack tensors hold the pin"
    del tt, nn
    gc.collect()
    assert pins(rc, uid) == 0


def test_dlpack_of_a_tensor_round_trips(oc, uid):
    t = need_torch()
    src = t.arange(10, dtype=t.int64) * 3
    oc.put(uid, src)
    back = t.from_dlpack(oc.pin(uid))
    assert back.dtype == t.int64 and t.equal(back, src)
    oc.put(uid + b"2", t.utils.dlpack.from_dlpack(t.utils.dlpack.to_dlpack(back)))
    assert t.equal(oc.get(uid + b"2"), src)


def test_unconsumed_dlpack_capsule_releases(oc, rc, uid):
    oc.put(uid, b"abc")
    buf = oc.pin(uid)
    cap = buf.__dlpack__()
    assert buf.__dlpack_device__() == (1, 0)
    del buf
    assert pins(rc, uid) == 1
    del cap
    gc.collect()
    assert pins(rc, uid) == 0


# ---- pickle 5 --------------------------------------------------------------------------------

def test_pickle5_objects_with_nested_arrays(oc, rc, uid):
    rng = np.random.default_rng(3)
    obj = {
        "weights": {f"layer{i}": rng.standard_normal((16, 8)).astype(np.float32) for i in range(3)},
        "ints": [np.arange(5), (np.zeros((2, 2), dtype=np.int8), "tuple")],
        "text": "hello", "n": 42, "none": None, "raw": b"bytes",
    }
    oc.put_object(uid, obj)
    got = oc.get_object(uid)
    assert got["text"] == "hello" and got["n"] == 42 and got["none"] is None
    assert got["raw"] == b"bytes"
    path = arena_path(rc)
    for k, a in obj["weights"].items():
        g = got["weights"][k]
        assert np.array_equal(g, a) and g.dtype == a.dtype
        assert in_arena(path, g.ctypes.data, g.nbytes), "arrays come back as arena views"
        assert not g.flags.writeable
    assert np.array_equal(got["ints"][0], obj["ints"][0])
    assert got["ints"][1][1] == "tuple"
    assert pins(rc, uid) == 1
    del got, g
    gc.collect()
    assert pins(rc, uid) == 0


def test_pickle5_copies_each_array_once(oc, rc, uid):
    arrs = {f"a{i}": np.full(1 << 16, i, dtype=np.uint8) for i in range(10)}
    oc.put_object(uid, arrs)
    size = int(dict(zip(*[iter(rc.obj("OBJ.INFO", uid))] * 2))[b"size"])
    assert size < 10 * (1 << 16) + 4096, "the arrays are stored out of band, not inside the pickle"
    got = oc.get_object(uid)
    assert all(int(got[k][0]) == i for i, k in enumerate(sorted(arrs)))


def test_get_object_of_plain_bytes_is_refused(oc, uid):
    oc.put(uid, b"not a pickle")
    with pytest.raises(ValueError):
        oc.get_object(uid)


def test_auto_get_of_a_pickled_object_points_at_get_object(oc, uid):
    oc.put_object(uid, [1, 2, 3])
    with pytest.raises(objstore.PickledObject, match="get_object"):
        oc.get(uid)
    assert oc.get_object(uid) == [1, 2, 3]


def test_arrays_from_get_export_dlpack(oc, rc, uid):
    t = need_torch()
    oc.put(uid, np.arange(24, dtype=np.int32).reshape(4, 6))
    a = oc.get(uid)
    assert isinstance(a, np.ndarray) and not a.flags.writeable
    tt = t.from_dlpack(a)  # numpy alone refuses read-only arrays
    assert tt.data_ptr() == a.ctypes.data and tt.shape == (4, 6) and int(tt[3, 5]) == 23
    s = a[1:, ::2]
    ss = t.from_dlpack(s)
    assert ss.data_ptr() == s.ctypes.data and ss.tolist() == s.tolist()
    nn = np.from_dlpack(s)
    assert np.shares_memory(nn, a) and nn.tolist() == s.tolist()
    del a, s
    gc.collect()
    assert pins(rc, uid) == 1, "the DLPack tensors keep the pin"
    del tt, ss, nn
    gc.collect()
    assert pins(rc, uid) == 0


def test_arrays_from_get_pickle_as_plain_copies(oc, uid):
    oc.put(uid, np.arange(5.0))
    a = oc.get(uid)
    b = pickle.loads(pickle.dumps(a))
    assert np.array_equal(a, b) and not np.shares_memory(a, b)
