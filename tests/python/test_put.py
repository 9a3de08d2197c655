"""Client.put through the Python package (the C library's objClientPutParts,
docs/client.md "Puts"): bytes and checksum right for every size from 0 to
1 GiB, with one and several copy threads; small puts take one round trip
(one OBJ.PUT), large ones go through the arena (OBJ.CREATE, OBJ.SEAL); a put
that fails (arena full) leaves nothing; remote mode puts inline.
"""

import numpy as np
import pytest

import objstore
from objhelpers import info, stats, to_int, to_str, wait_until, xxh3_64
from pyhelpers import arena_path, in_arena

GIB = 1 << 30
SIZES = [0, 1, 4095, 4096, 64 * 1024 + 1, (1 << 20) - 1, 1 << 20, 16 << 20, GIB]


@pytest.fixture(scope="module")
def big_server():
    from objnodes import ObjstoreServer, finish

    s = ObjstoreServer(memory="1100mb", name="pyput")
    try:
        s.start()
        yield s
    finally:
        finish([s])


@pytest.fixture(scope="module")
def source():
    return np.random.default_rng(29).integers(0, 255, size=GIB, dtype=np.uint8)


def checksum(rc, oid):
    def ready():
        s = to_str(info(rc, oid)["checksum"])
        return s if s != "pending" else None
    return int(wait_until(ready, timeout=120, what="the checksum"), 16)


def commands(rc):
    """Calls of OBJ.PUT, OBJ.CREATE and OBJ.SEAL so far (INFO commandstats)."""
    st = rc.execute_command("INFO", "commandstats").decode()
    out = {}
    for name in ("obj.put", "obj.create", "obj.seal"):
        key = f"cmdstat_{name}:calls="
        i = st.find(key)
        out[name] = int(st[i + len(key):].split(",")[0]) if i >= 0 else 0
    return out


@pytest.mark.parametrize("threads", [1, 4])
def test_put_bytes_and_checksum_for_every_size(big_server, source, threads):
    rc = big_server.client()
    with objstore.connect("127.0.0.1", big_server.port) as c:
        c.set_put_threads(threads)
        for size in SIZES:
            oid = f"put-{threads}-{size}"
            src = source[:size]
            c.put(oid, src)
            got = c.get(oid, kind="numpy")
            assert got.nbytes == size and np.array_equal(got, src), f"{size} bytes"
            if size:
                assert in_arena(arena_path(rc), got.ctypes.data, size)
            head = c.pin(oid).meta  # the package's header travels as metadata
            assert checksum(rc, oid) == xxh3_64(src.tobytes() + bytes(head)), f"{size} bytes"
            del got
            c.delete(oid)


def test_small_puts_take_one_round_trip_large_ones_the_arena(big_server):
    rc = big_server.client()
    with objstore.connect("127.0.0.1", big_server.port) as c:
        before = commands(rc)
        for i, size in enumerate([64, 4096, 65536, (1 << 20) - 1024]):
            c.put(f"small-{i}", np.zeros(size, np.uint8))
        mid = commands(rc)
        assert mid["obj.put"] - before["obj.put"] == 4
        assert mid["obj.create"] == before["obj.create"]
        assert mid["obj.seal"] == before["obj.seal"]
        c.put("large", np.ones(4 << 20, np.uint8))
        after = commands(rc)
        assert after["obj.put"] == mid["obj.put"]
        assert after["obj.create"] - mid["obj.create"] == 1
        assert after["obj.seal"] - mid["obj.seal"] == 1
        for i in range(4):
            c.delete(f"small-{i}")
        c.delete("large")


def test_put_object_of_arrays_round_trips(big_server, source):
    with objstore.connect("127.0.0.1", big_server.port) as c:
        c.set_put_threads(3)
        value = {"a": source[:7 << 20].reshape(7, -1), "b": [source[:100], b"xyz"], "n": 3}
        c.put_object("obj", value)
        got = c.get_object("obj")
        assert np.array_equal(got["a"], value["a"])
        assert np.array_equal(got["b"][0], value["b"][0])
        assert got["b"][1] == b"xyz" and got["n"] == 3
        del got
        c.delete("obj")


def test_set_put_threads_refuses_bad_counts(big_server):
    with objstore.connect("127.0.0.1", big_server.port) as c:
        for bad in (-1, 65):
            with pytest.raises(ValueError):
                c.set_put_threads(bad)
        c.set_put_threads(0)


def test_a_put_into_a_full_arena_leaves_nothing(make_server):
    s = make_server(memory="8mb")
    rc = s.client()
    with objstore.connect("127.0.0.1", s.port) as c:
        for size in (9 << 20, 4 << 20):
            if size == 4 << 20:
                c.put("filler", np.zeros(6 << 20, np.uint8))
            with pytest.raises(objstore.OutOfMemory):
                c.put(f"too-big-{size}", np.zeros(size, np.uint8))
            assert not c.exists(f"too-big-{size}")
    st = stats(rc)
    assert st["objects"] == 1 and st["objects_created"] == 0


def test_remote_mode_puts_inline(big_server, source):
    rc = big_server.client()
    with objstore.connect("127.0.0.1", big_server.port, zero_copy=False) as c:
        before = commands(rc)
        c.put("remote", source[:4 << 20])
        after = commands(rc)
        assert after["obj.put"] - before["obj.put"] == 1
        assert after["obj.create"] == before["obj.create"]
        assert np.array_equal(np.frombuffer(c.get("remote", kind="bytes"), np.uint8),
                              source[:4 << 20])
        c.delete("remote")


@pytest.mark.parametrize("zero_copy", [True, False], ids=["zero-copy", "remote"])
def test_a_put_of_one_copy_returns_none(big_server, zero_copy):
    """Without replicas (the node's default: one copy) put, put_object and a seal answer
    None, as before copies existed; only an object of several copies counts holders."""
    with objstore.connect("127.0.0.1", big_server.port, zero_copy=zero_copy) as c:
        tag = "zc" if zero_copy else "remote"
        assert c.put(f"one-{tag}-small", b"x" * 100) is None
        assert c.put(f"one-{tag}-large", np.ones(2 << 20, np.uint8)) is None
        assert c.put_object(f"one-{tag}-obj", {"a": 1}) is None
        creation = c.create(f"one-{tag}-created", 8)
        with creation as view:
            view[:] = b"12345678"
        assert creation.holders is None
        for suffix in ("small", "large", "obj", "created"):
            c.delete(f"one-{tag}-{suffix}")
