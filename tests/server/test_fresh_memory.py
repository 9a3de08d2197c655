"""A created object reads as zeros until it is written, even where a deleted
object's bytes lay before (the arena's memory is reused, its contents never
leak into a new object): docs/security.md, "What a reader of an unwritten
range sees".

Two mechanisms keep it so, and each is checked on its own: the background
scrub zeroes freed ranges (setting `scrub yes`, the default), and a create
that lands on bytes the scrub has not reached clears them itself (checked
with `scrub no`, where nothing else would). Each test uses a fresh node;
where a test needs the new object to land exactly where the deleted one was,
it fills the rest of the arena first, and it checks both OBJ.GET and the
arena file itself.
"""

import pytest

from objhelpers import read_arena, stats, to_int, wait_until


def created_offset(reply):
    fields = dict(zip(reply[0::2], reply[1::2]))
    return to_int(fields[b"offset"])


def pinned_offset(r, oid):
    offset = to_int(dict(zip(*[iter(r.obj("OBJ.PIN", oid))] * 2))[b"offset"])
    r.obj("OBJ.RELEASE", oid)
    return offset


def fill_rest(r):
    """Create (never write) one object over all the free arena, so that the
    next create can only land on what is freed after this."""
    free = stats(r)["arena_largest_free"]
    assert free == stats(r)["arena_free"], "the free arena must be one range"
    r.obj("OBJ.CREATE", "filler", free)
    assert stats(r)["arena_free"] == 0


def unscrubbed(make_server):
    s = make_server(memory="64mb", module_args=("scrub", "no"))
    return s, s.client()


@pytest.mark.parametrize("size", [1, 4096, 100_000, 3 << 20])
def test_a_create_clears_what_a_deleted_object_left(make_server, size):
    s, r = unscrubbed(make_server)
    old = bytes((i * 7 + 1) % 251 + 1 for i in range(size))
    assert r.obj("OBJ.PUT", "old", old) == b"OK"
    old_offset = pinned_offset(r, "old")
    fill_rest(r)
    assert r.obj("OBJ.DEL", "old") == b"OK"
    assert read_arena(s.arena_path, old_offset, size) == old, "scrub no: the bytes stay"

    offset = created_offset(r.obj("OBJ.CREATE", "new", size))
    assert offset == old_offset, "the new object must reuse the old one's memory for this test"
    assert read_arena(s.arena_path, offset, size) == bytes(size)
    assert r.obj("OBJ.SEAL", "new") == b"OK"
    assert r.obj("OBJ.GET", "new") == bytes(size)


@pytest.mark.parametrize("size", [4096, 3 << 20])
def test_the_scrub_zeroes_a_deleted_object_before_any_create(fresh_server, size):
    r = fresh_server.client()
    old = b"\x5a" * size
    assert r.obj("OBJ.PUT", "old", old) == b"OK"
    old_offset = pinned_offset(r, "old")
    before = stats(r)["scrubbed_bytes"]
    assert r.obj("OBJ.DEL", "old") == b"OK"

    wait_until(lambda: stats(r)["arena_dirty_free_bytes"] == 0, timeout=30, what="the scrub")
    assert stats(r)["scrubbed_bytes"] - before >= size
    assert read_arena(fresh_server.arena_path, old_offset, size) == bytes(size)
    offset = created_offset(r.obj("OBJ.CREATE", "new", size))
    assert r.obj("OBJ.SEAL", "new") == b"OK"
    assert r.obj("OBJ.GET", "new") == bytes(size)
    assert read_arena(fresh_server.arena_path, offset, size) == bytes(size)


@pytest.mark.parametrize("scrub", ["yes", "no"])
def test_only_the_unwritten_part_reads_as_zeros(make_server, scrub):
    r = make_server(memory="64mb", module_args=("scrub", scrub)).client()
    r.obj("OBJ.PUT", "old", b"\xff" * (8192 + 64))  # room for the metadata too
    fill_rest(r)
    r.obj("OBJ.DEL", "old")
    r.obj("OBJ.CREATE", "new", 8192, "META", "m")
    r.obj("OBJ.WRITE", "new", 100, b"abc")
    r.obj("OBJ.SEAL", "new")
    assert r.obj("OBJ.GET", "new", "WITHMETA") == [bytes(100) + b"abc" + bytes(8089), b"m"]


@pytest.mark.parametrize("scrub", ["yes", "no"])
def test_a_smaller_object_over_a_larger_deleted_one_reads_as_zeros(make_server, scrub):
    r = make_server(memory="64mb", module_args=("scrub", scrub)).client()
    r.obj("OBJ.PUT", "old", b"\xaa" * 65536)
    fill_rest(r)
    r.obj("OBJ.DEL", "old")
    r.obj("OBJ.CREATE", "new", 1000)
    r.obj("OBJ.SEAL", "new")
    assert r.obj("OBJ.GET", "new") == bytes(1000)


def test_scrub_is_a_run_time_setting(fresh_server):
    r = fresh_server.client()
    assert r.execute_command("CONFIG", "GET", "objstore.scrub") == [b"objstore.scrub", b"yes"]
    r.execute_command("CONFIG", "SET", "objstore.scrub", "no")
    r.obj("OBJ.PUT", "old", b"\x11" * (4 << 20))
    r.obj("OBJ.DEL", "old")
    assert stats(r)["arena_dirty_free_bytes"] > 0
    r.execute_command("CONFIG", "SET", "objstore.scrub", "yes")
    wait_until(lambda: stats(r)["arena_dirty_free_bytes"] == 0, timeout=30, what="the scrub")
