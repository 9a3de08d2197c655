"""Zero copy, shown by addresses and memory (never by time): a get is a view of the
node's arena bytes inside this process's mapping of the arena file, two gets are the
same bytes, and getting a 1 GiB object adds no resident memory."""

import gc

import numpy as np
import pytest

import objstore
from pyhelpers import arena_path, arena_ranges, in_arena, pins, status_kb


def test_client_maps_the_arena_once(oc, rc, uid):
    oc.put(uid, b"x" * 4096)
    v = oc.get(uid)
    path = arena_path(rc)
    assert oc.zero_copy is True
    assert len(arena_ranges(path)) == 1, "the arena is mapped exactly once"
    del v


def test_two_gets_point_at_the_same_arena_bytes(oc, rc, uid):
    oc.put(uid, np.arange(1000, dtype=np.int64))
    a = oc.get(uid)
    b = oc.get(uid)
    path = arena_path(rc)
    assert a.ctypes.data == b.ctypes.data
    assert in_arena(path, a.ctypes.data, a.nbytes)
    info = rc.obj("OBJ.INFO", uid)
    offset = int(dict(zip(info[::2], info[1::2]))[b"offset"])
    (lo, _hi), = arena_ranges(path)
    assert a.ctypes.data == lo + offset, "the view starts at the object's offset in the file"
    assert np.shares_memory(a, b)
    assert pins(rc, uid) == 2


def test_views_of_views_share_memory(oc, uid):
    oc.put(uid, np.arange(64, dtype=np.float32).reshape(8, 8))
    a = oc.get(uid)
    mv = oc.get(uid, kind="memoryview")
    buf = oc.pin(uid)
    assert np.shares_memory(a, np.frombuffer(mv, dtype=np.float32))
    assert np.shares_memory(a[2:4], a)
    assert np.frombuffer(buf, dtype=np.float32).ctypes.data == buf.address == a.ctypes.data


def test_put_copies_into_the_arena_once(oc, rc, uid):
    src = np.random.default_rng(1).integers(0, 255, size=1 << 20, dtype=np.uint8)
    oc.put(uid, src)
    got = oc.get(uid)
    assert not np.shares_memory(src, got), "the object lives in the arena, not in src"
    assert in_arena(arena_path(rc), got.ctypes.data, got.nbytes)
    assert np.array_equal(src, got)


def test_create_writes_in_place(oc, rc, uid):
    with oc.create(uid, 1 << 16) as mv:
        address = np.frombuffer(mv, np.uint8).ctypes.data
        assert in_arena(arena_path(rc), address, 1 << 16)
        mv[:] = b"\x5a" * (1 << 16)
    got = oc.get(uid, kind="buffer")
    assert got.address == address
    assert bytes(memoryview(got)) == b"\x5a" * (1 << 16)


GIB = 1 << 30


@pytest.fixture(scope="module")
def big_server():
    from objnodes import ObjstoreServer, finish
    s = ObjstoreServer(memory="1100mb", name="pybig")
    try:
        s.start()
        yield s
    finally:
        finish([s])


def test_get_of_1gib_adds_no_resident_memory(big_server):
    rc = big_server.client()
    with objstore.connect("127.0.0.1", big_server.port) as writer:
        with writer.create("big", GIB) as mv:
            arr = np.frombuffer(mv, np.uint8)
            arr[::4096] = 1  # one byte per page: the pages exist in the arena
            del arr
    gc.collect()
    with objstore.connect("127.0.0.1", big_server.port) as c:
        rss0, anon0, pte0 = status_kb("VmRSS"), status_kb("RssAnon"), status_kb("VmPTE")
        a = c.get("big", kind="numpy")
        rss1, anon1 = status_kb("VmRSS"), status_kb("RssAnon")
        assert a.nbytes == GIB
        assert in_arena(arena_path(rc), a.ctypes.data, GIB)
        # The get itself touches no page of the object.
        assert rss1 - rss0 < 16 * 1024, f"VmRSS grew {rss1 - rss0} KiB on a 1 GiB get"
        # Reading every byte maps the arena's shared pages: no private copy appears.
        assert int(a[::4096].sum(dtype=np.uint64)) == GIB // 4096
        assert int(a.sum(dtype=np.uint64)) == GIB // 4096
        anon2, pte2 = status_kb("RssAnon"), status_kb("VmPTE")
        assert anon2 - anon0 < 16 * 1024, f"RssAnon grew {anon2 - anon0} KiB reading 1 GiB"
        assert pte2 - pte0 < 4 * 1024, "page tables for 1 GiB of 4 KiB pages are about 2 MiB"
        del a
    rc.close()
