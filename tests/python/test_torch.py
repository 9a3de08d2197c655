"""torch through put_object/get_object and objstore.torch: every dtype round-trips bit
for bit with its bytes out of band; the tensors of a get are views of the arena (shown
by addresses, resident memory and pins, never by time); a module loads from a stored
state dict with one copy; corrupted or hostile metadata is refused with a clear error."""

import gc
import json
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import objstore  # noqa: E402
import objstore.torch as ot  # noqa: E402
from pyhelpers import arena_path, in_arena, pins, status_kb, wait_for  # noqa: E402

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.complex64,
          torch.complex128, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
          torch.bool, torch.complex32]


def random_bits(dtype, shape, seed):
    """A tensor of dtype whose bytes are random (NaNs and all; bool: 0 or 1)."""
    g = torch.Generator().manual_seed(seed)
    size = torch.empty((), dtype=dtype).element_size()
    n = int(np.prod(shape)) if shape else 1
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


def bits(t):
    """The bytes of t in logical order: equal bits means equal bytes here."""
    return t.resolve_conj().resolve_neg().contiguous().reshape(-1).view(torch.uint8)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def tensor_in_arena(rc, t):
    size = t.element_size() * t.numel()
    return in_arena(arena_path(rc), t.data_ptr(), max(size, 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[1])
def test_every_dtype_round_trips_bit_for_bit_as_arena_views(oc, rc, uid, dtype):
    base = random_bits(dtype, (6, 10), 7)
    state = {
        "matrix": base,
        "scalar": random_bits(dtype, (), 8),
        "cube": random_bits(dtype, (3, 4, 5), 9),
        "empty": torch.empty((0, 3), dtype=dtype),
        "transposed": base.t(),  # dense, permuted: stored as it lies
        "strided": base[::2, 1::3],  # gaps: stored contiguous
        "nested": [{"deep": random_bits(dtype, (17,), 10)}],
    }
    if dtype.is_complex:
        state["conj"] = base.conj()
    oc.put_object(uid, state)
    got = oc.get_object(uid)
    flat = {k: v for k, v in state.items() if k != "nested"}
    flat["deep"] = state["nested"][0]["deep"]
    got["deep"] = got["nested"][0]["deep"]
    for name, want in flat.items():
        have = got[name] if name != "deep" else got["deep"]
        assert same_bits(want, have), name
        if want.numel():
            assert tensor_in_arena(rc, have), f"{name} is not a view of the arena"
    assert got["transposed"].stride() == state["transposed"].stride()
    assert got["strided"].is_contiguous()


def test_tensor_bytes_go_out_of_band(oc, uid):
    state = {f"w{i}": torch.full((256, 256), float(i)) for i in range(8)}
    oc.put_object(uid, state)
    head = json.loads(oc.pin(uid).meta)
    assert len(head["bufs"]) == 8
    assert all(n == 256 * 256 * 4 and off % objstore.ALIGN == 0 for off, n in head["bufs"])
    assert head["plen"] < 4096, "the pickle stream holds no tensor bytes"


def test_two_gets_share_the_same_memory_and_pins_drop_with_the_last_tensor(oc, rc, uid):
    state = {f"layer{i}.weight": torch.randn(64, 64) for i in range(4)}
    oc.put_object(uid, state)
    a = oc.get_object(uid)
    b = oc.get_object(uid)
    assert pins(rc, uid) == 2
    for k in state:
        assert a[k].data_ptr() == b[k].data_ptr()
        assert tensor_in_arena(rc, a[k])
    del b
    gc.collect()
    assert pins(rc, uid) == 1
    last = a["layer3.weight"][1:3]  # a view of a view keeps the pin too
    a.clear()
    gc.collect()
    assert pins(rc, uid) == 1, "a live view keeps the object pinned"
    assert torch.equal(last, state["layer3.weight"][1:3])
    del last
    wait_for(lambda: pins(rc, uid) == 0, "the pin drops with the last tensor")


def test_tied_tensors_stay_one_and_other_views_are_stored_apart(oc, uid):
    w = torch.randn(8, 8)
    state = {"embed": w, "head": w, "row": w[2], "again": w.view(8, 8),
             "e1": torch.empty(0), "e2": torch.empty(0)}
    oc.put_object(uid, state)
    head = json.loads(oc.pin(uid).meta)
    assert [n for _, n in head["bufs"] if n] == [256, 32], \
        "one buffer for w (its three same views), one for w[2]"
    got = oc.get_object(uid)
    assert got["embed"] is got["head"] is got["again"]
    assert got["row"].data_ptr() != got["embed"][2].data_ptr()
    assert got["e1"] is not got["e2"], "empty tensors have no memory to share"
    assert torch.equal(got["row"], w[2])


def test_parameters_numpy_and_python_values_travel_together(oc, uid):
    p = torch.nn.Parameter(torch.randn(3, 3))
    frozen = torch.nn.Parameter(torch.randn(2), requires_grad=False)
    obj = {"p": p, "frozen": frozen, "grad": torch.ones(2, requires_grad=True),
           "np": np.arange(5), "step": 17, "name": "model"}
    oc.put_object(uid, obj)
    got = oc.get_object(uid)
    assert type(got["p"]) is torch.nn.Parameter and got["p"].requires_grad
    assert type(got["frozen"]) is torch.nn.Parameter and not got["frozen"].requires_grad
    assert got["grad"].requires_grad and type(got["grad"]) is torch.Tensor
    assert torch.equal(got["p"].detach(), p.detach())
    assert np.array_equal(got["np"], np.arange(5))
    assert (got["step"], got["name"]) == (17, "model")


def test_copy_gives_private_writable_tensors(oc, rc, uid):
    w = torch.arange(1024, dtype=torch.float32)
    oc.put_object(uid, {"w": w, "a": np.arange(4)})
    got = ot.get_state_dict(oc, uid, copy=True)
    assert pins(rc, uid) == 0, "copy=True holds no pin"
    assert not tensor_in_arena(rc, got["w"])
    got["w"][:] = -1
    got["a"][:] = -1  # a writable array too
    assert torch.equal(oc.get_object(uid)["w"], w)


def test_a_write_into_a_zero_copy_tensor_changes_the_stored_object(oc, uid):
    # What the docs say: the arena is mapped shared and writable, torch has no read-only
    # tensors, so a write lands in the stored object for every reader of the node.
    oc.put_object(uid, {"w": torch.zeros(16)})
    a = oc.get_object(uid)
    a["w"][3] = 5.0
    assert oc.get_object(uid)["w"][3].item() == 5.0


def make_module(dtype=torch.float32):
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64),
                            torch.nn.ReLU(), torch.nn.Linear(64, 8))
    m(torch.randn(4, 32))  # running stats and num_batches_tracked move off their start
    return m.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_module_loaded_from_the_store_equals_the_writers(oc, rc, uid, dtype):
    writer = make_module(dtype)
    ot.put_state_dict(oc, uid, writer)
    reader = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64),
                                 torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(dtype)
    ot.load_state_dict(oc, uid, reader)
    want, have = writer.state_dict(), reader.state_dict()
    assert want.keys() == have.keys()
    for k in want:
        assert same_bits(want[k], have[k]), k
        assert not tensor_in_arena(rc, have[k]), "a module owns its parameters"
    gc.collect()
    assert pins(rc, uid) == 0, "loading leaves nothing pinned"
    views = ot.get_state_dict(oc, uid)
    assert all(tensor_in_arena(rc, t) for t in views.values())


def test_loading_a_mismatched_state_dict_fails_as_torch_does(oc, uid):
    ot.put_state_dict(oc, uid, {"other.weight": torch.zeros(2)})
    with pytest.raises(RuntimeError, match="Missing key"):
        ot.load_state_dict(oc, uid, torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="not a state dict"):
        oc.put_object(uid + b"l", [torch.zeros(1)])
        ot.get_state_dict(oc, uid + b"l")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="this torch has no CUDA device")
def test_cuda_tensors_are_stored_through_the_host(oc, uid):
    t = torch.randn(100, device="cuda")
    oc.put_object(uid, {"t": t})
    got = oc.get_object(uid)["t"]
    assert got.device.type == "cpu" and torch.equal(got, t.cpu())


# ---- 1 GiB -----------------------------------------------------------------------------------

GIB = 1 << 30


@pytest.fixture(scope="module")
def big_server():
    from objnodes import ObjstoreServer, finish
    s = ObjstoreServer(memory="1100mb", name="pytorchbig")
    try:
        s.start()
        yield s
    finally:
        finish([s])


def test_get_of_a_1gib_state_dict_adds_no_resident_memory(big_server):
    rc = big_server.client()
    with objstore.connect("127.0.0.1", big_server.port) as writer:
        state = {f"layer{i}": torch.ones(GIB // 64 // 4) for i in range(64)}  # 64 x 16 MiB
        writer.put_object("sd", state)
        del state
    gc.collect()
    with objstore.connect("127.0.0.1", big_server.port) as c:
        rss0, anon0 = status_kb("VmRSS"), status_kb("RssAnon")
        a = c.get_object("sd")
        b = c.get_object("sd")
        rss1, anon1 = status_kb("VmRSS"), status_kb("RssAnon")
        assert sum(t.numel() * 4 for t in a.values()) == GIB
        assert all(in_arena(arena_path(rc), t.data_ptr(), t.numel() * 4) for t in a.values())
        assert all(a[k].data_ptr() == b[k].data_ptr() for k in a)
        # Two gets of 1 GiB touch no page of the object: a few MiB at most.
        assert rss1 - rss0 < 16 * 1024, f"VmRSS grew {rss1 - rss0} KiB on two 1 GiB gets"
        # Reading every byte maps the arena's shared pages: no private copy appears.
        assert sum(float(t.sum()) for t in a.values()) == GIB // 4
        anon2 = status_kb("RssAnon")
        assert anon2 - anon0 < 16 * 1024, f"RssAnon grew {anon2 - anon0} KiB reading 1 GiB"
        del a, b
        gc.collect()
        assert pins(rc, "sd") == 0
    rc.close()


# ---- bad input: corrupted or hostile stored state dicts --------------------------------------


class Forged:
    """Pickles as objstore.torch's rebuild call with the given (forged) arguments."""

    def __init__(self, data, *args):
        self.data, self.args = data, args

    def __reduce_ex__(self, protocol):
        return ot._rebuild, (pickle.PickleBuffer(self.data), *self.args)


def put_forged(oc, uid, obj, edit_head=None):
    """Store obj the way put_object lays out an object, with its header edited."""
    buffers = []
    stream = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    out, table = bytearray(stream), []
    for pb in buffers:
        raw = pb.raw()
        out += bytes(-len(out) % objstore.ALIGN)
        table.append([len(out), raw.nbytes])
        out += raw
    head = {"objpy": 1, "kind": "pickle5", "plen": len(stream), "bufs": table}
    if edit_head:
        edit_head(head, len(out))
    oc.put(uid, bytes(out), meta=json.dumps(head, separators=(",", ":")).encode())


F32 = np.arange(16, dtype=np.float32).view(np.uint8)  # 64 bytes
BAD = [
    ("unknown dtype", Forged(F32, "float8_e4m3fn", (16,), None, False, False), None,
     objstore.NotSupported, "NOTSUPPORTED .*float8_e4m3fn"),
    ("dtype not a name", Forged(F32, "float32; rm", (16,), None, False, False), None,
     objstore.BadMetadata, "BADMETA .*dtype"),
    ("dtype not a str", Forged(F32, 7, (16,), None, False, False), None,
     objstore.BadMetadata, "BADMETA .*dtype"),
    ("shape larger than the bytes", Forged(F32, "float32", (4, 1 << 62), None, False, False),
     None, objstore.BadMetadata, "BADMETA .*needs"),
    ("shape one too many", Forged(F32, "float32", (17,), None, False, False), None,
     objstore.BadMetadata, "BADMETA .*needs 68 bytes"),
    ("shape negative", Forged(F32, "float32", (-16,), None, False, False), None,
     objstore.BadMetadata, "BADMETA .*shape"),
    ("shape not ints", Forged(F32, "float32", (4.0, 4), None, False, False), None,
     objstore.BadMetadata, "BADMETA .*shape"),
    ("shape of 65 dims", Forged(F32, "float32", (1,) * 65, None, False, False), None,
     objstore.BadMetadata, "BADMETA .*shape"),
    ("strides past the bytes", Forged(F32, "float32", (4, 4), (8, 1), False, False), None,
     objstore.BadMetadata, "BADMETA .*strides"),
    ("strides that overlap", Forged(F32, "float32", (4, 4), (1, 1), False, False), None,
     objstore.BadMetadata, "BADMETA .*strides"),
    ("strides huge", Forged(F32, "float32", (2, 2), (1 << 63, 1), False, False), None,
     objstore.BadMetadata, "BADMETA .*strides"),
    ("strides of another rank", Forged(F32, "float32", (4, 4), (4,), False, False), None,
     objstore.BadMetadata, "BADMETA .*strides"),
    ("grad on integers", Forged(F32, "int32", (16,), None, True, False), None,
     objstore.BadMetadata, "BADMETA .*flags"),
    ("buffer past the object",
     Forged(F32, "float32", (16,), None, False, False),
     lambda h, size: h["bufs"][0].__setitem__(1, size), objstore.BadMetadata,
     "BADMETA .*outside"),
    ("buffer offset negative", Forged(F32, "float32", (16,), None, False, False),
     lambda h, size: h["bufs"][0].__setitem__(0, -64), objstore.BadMetadata,
     "BADMETA .*outside"),
    ("buffer offset huge", Forged(F32, "float32", (16,), None, False, False),
     lambda h, size: h["bufs"][0].__setitem__(0, 1 << 64), objstore.BadMetadata,
     "BADMETA .*outside"),
    ("buffer table not a list", Forged(F32, "float32", (16,), None, False, False),
     lambda h, size: h.__setitem__("bufs", {"a": 1}), objstore.BadMetadata, "BADMETA"),
    ("pickle length past the object", Forged(F32, "float32", (16,), None, False, False),
     lambda h, size: h.__setitem__("plen", size + 1), objstore.BadMetadata,
     "BADMETA .*pickle length"),
    ("buffer shorter than its tensor", Forged(F32, "float32", (16,), None, False, False),
     lambda h, size: h["bufs"][0].__setitem__(1, 32), objstore.BadMetadata,
     "BADMETA .*needs 64 bytes, its buffer has 32"),
]


@pytest.mark.parametrize("obj,edit,error,match", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_corrupted_state_dicts_are_refused(oc, rc, uid, obj, edit, error, match):
    put_forged(oc, uid, {"w": obj}, edit)
    before = oc.info(uid)
    with pytest.raises(error, match=match):
        oc.get_object(uid)
    with pytest.raises(error, match=match):
        ot.load_state_dict(oc, uid, torch.nn.Linear(4, 4))
    gc.collect()
    assert pins(rc, uid) == 0, "a refused get holds no pin"
    assert oc.info(uid)["checksum"] == before["checksum"]


def test_a_forged_object_that_is_right_is_read(oc, uid):
    # The forgery above is faithful: unedited, the same bytes make the right tensor.
    put_forged(oc, uid, {"w": Forged(F32, "float32", (4, 4), (1, 4), False, False)})
    got = oc.get_object(uid)["w"]
    assert torch.equal(got, torch.arange(16, dtype=torch.float32).reshape(4, 4).t())


# ---- what a write into a zero-copy tensor does to other nodes, and remote mode ------------


def test_a_written_tensor_is_refused_by_a_fetching_node(make_cluster_module, uid):
    # The docs' promise: the write lands in the arena without the object's checksum
    # knowing it, so no node takes a copy of the changed bytes.
    from objhelpers import wait_locations
    cl = make_cluster_module(names=("A", "B"), layout="separate", memory="64mb")
    with objstore.connect("127.0.0.1", cl["A"].port) as a, \
            objstore.connect("127.0.0.1", cl["B"].port) as b:
        a.put_object(uid, {"w": torch.zeros(1 << 16)})
        wait_locations(cl["A"].client(), uid, ["A"])
        got = a.get_object(uid)
        got["w"][7] = 1.0
        out = b.fetch(uid, timeout=30)
        assert isinstance(out[uid], objstore.ChecksumMismatch), out
        assert not b.exists(uid)


def test_remote_mode_gives_the_same_tensors_as_copies(server, rc, uid):
    state = {"w": random_bits(torch.bfloat16, (5, 7), 11), "i": torch.arange(9)}
    with objstore.connect("127.0.0.1", server.port, zero_copy=False) as c:
        c.put_object(uid, state)
        got = c.get_object(uid)
        assert all(same_bits(state[k], got[k]) for k in state)
        assert not tensor_in_arena(rc, got["w"])
        assert pins(rc, uid) == 0
