"""A created object reads as zeros until it is written, even where a deleted
object's bytes lay before (the arena's memory is reused, its contents never
leak into a new object).

Each test uses a fresh node so that the new object lands exactly where the
deleted one was, and checks both OBJ.GET and the arena file itself.
"""

import pytest

from objhelpers import read_arena, to_int


def created_offset(reply):
    fields = dict(zip(reply[0::2], reply[1::2]))
    return to_int(fields[b"offset"])


@pytest.mark.parametrize("size", [1, 4096, 100_000, 3 << 20])
def test_a_created_object_over_a_deleted_one_reads_as_zeros(fresh_server, size):
    r = fresh_server.client()
    old = bytes((i * 7 + 1) % 251 + 1 for i in range(size))
    assert r.obj("OBJ.PUT", "old", old) == b"OK"
    old_offset = to_int(dict(zip(*[iter(r.obj("OBJ.PIN", "old"))] * 2))[b"offset"])
    r.obj("OBJ.RELEASE", "old")
    assert r.obj("OBJ.DEL", "old") == b"OK"

    offset = created_offset(r.obj("OBJ.CREATE", "new", size))
    assert offset == old_offset, "the new object must reuse the old one's memory for this test"
    assert read_arena(fresh_server.arena_path, offset, size) == bytes(size)
    assert r.obj("OBJ.SEAL", "new") == b"OK"
    assert r.obj("OBJ.GET", "new") == bytes(size)


def test_only_the_unwritten_part_reads_as_zeros(fresh_server):
    r = fresh_server.client()
    r.obj("OBJ.PUT", "old", b"\xff" * 8192)
    r.obj("OBJ.DEL", "old")
    r.obj("OBJ.CREATE", "new", 8192, "META", "m")
    r.obj("OBJ.WRITE", "new", 100, b"abc")
    r.obj("OBJ.SEAL", "new")
    assert r.obj("OBJ.GET", "new", "WITHMETA") == [bytes(100) + b"abc" + bytes(8089), b"m"]


def test_a_smaller_object_over_a_larger_deleted_one_reads_as_zeros(fresh_server):
    r = fresh_server.client()
    r.obj("OBJ.PUT", "old", b"\xaa" * 65536)
    r.obj("OBJ.DEL", "old")
    r.obj("OBJ.CREATE", "new", 1000)
    r.obj("OBJ.SEAL", "new")
    assert r.obj("OBJ.GET", "new") == bytes(1000)
