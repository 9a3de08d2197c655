"""A full arena: OOM answers, counted, harmless, and the space comes back.

Each test has its own server with an 8 MiB arena.
"""

from objhelpers import MIB, assert_stats_unchanged, expect_error, stats

ARENA = 8 * MIB
MAX_FILL = 16  # an 8 MiB arena cannot hold more than 8 objects of 1 MiB


def _fill(c, prefix=b"fill"):
    """PUT 1 MiB objects until OOM; returns the ids that fit."""
    ids = []
    for i in range(MAX_FILL):
        oid = prefix + b":%d" % i
        before = stats(c)
        try:
            c.obj("OBJ.PUT", oid, bytes([i]) * MIB)
        except Exception as e:
            assert str(e).split()[0] == "OOM", f"PUT #{i} of 1 MiB: expected OOM, got {e}"
            assert_stats_unchanged(before, stats(c), "PUT into a full arena", oom=True)
            return ids
        ids.append(oid)
    raise AssertionError(f"{MAX_FILL} objects of 1 MiB fit into an {ARENA >> 20} MiB arena")


def test_filling_the_arena_ends_in_OOM(small_server):
    c = small_server.client()
    ids = _fill(c)
    assert 6 <= len(ids) <= 8, f"{len(ids)} objects of 1 MiB fit into 8 MiB"
    for i, oid in enumerate(ids):
        assert c.obj("OBJ.GET", oid) == bytes([i]) * MIB


def test_oom_answers_are_counted_in_stats(small_server):
    c = small_server.client()
    before = stats(c)["oom_errors"]
    _fill(c)
    expect_error(c, ("OBJ.CREATE", b"more", MIB), "OOM")
    expect_error(c, ("OBJ.PUT", b"more", b"y" * MIB), "OOM")
    assert stats(c)["oom_errors"] == before + 3


def test_deleting_objects_makes_room_for_new_puts(small_server):
    c = small_server.client()
    ids = _fill(c)
    for oid in ids[:2]:
        assert c.obj("OBJ.DEL", oid) == b"OK"
    assert c.obj("OBJ.PUT", b"again:0", b"a" * MIB) == b"OK"
    assert c.obj("OBJ.PUT", b"again:1", b"b" * MIB) == b"OK"
    expect_error(c, ("OBJ.PUT", b"again:2", b"c" * MIB), "OOM")
    assert c.obj("OBJ.GET", b"again:1") == b"b" * MIB


def test_arena_used_returns_to_zero_after_deleting_everything(small_server):
    c = small_server.client()
    ids = _fill(c)
    for oid in ids:
        c.obj("OBJ.DEL", oid)
    st = stats(c)
    assert st["arena_used"] == 0
    assert st["objects"] == 0 and st["bytes_sealed"] == 0
    assert st["arena_largest_free"] == st["arena_free"], "free space did not coalesce"
    # the whole arena is usable again
    assert len(_fill(c, b"refill")) == len(ids)


def test_put_larger_than_the_arena_is_OOM(small_server):
    c = small_server.client()
    before = stats(c)
    expect_error(c, ("OBJ.PUT", b"huge", b"z" * (ARENA + 1)), "OOM")
    assert_stats_unchanged(before, stats(c), "PUT larger than the arena", oom=True)
    assert c.obj("OBJ.EXISTS", b"huge") == 0
    assert c.obj("OBJ.PUT", b"small", b"fits") == b"OK"


def test_create_of_largest_free_succeeds_and_one_byte_more_is_OOM(small_server):
    c = small_server.client()
    largest = stats(c)["arena_largest_free"]
    assert largest > 7 * MIB
    before = stats(c)
    expect_error(c, ("OBJ.CREATE", b"big", largest + 1), "OOM")
    assert_stats_unchanged(before, stats(c), "CREATE of largest_free + 1", oom=True)
    c.obj("OBJ.CREATE", b"big", largest)
    c.obj("OBJ.ABORT", b"big")
    assert stats(c)["arena_largest_free"] == largest


def test_oom_in_a_fragmented_arena_then_coalescing_fixes_it(small_server):
    """Free every other 1 MiB object: lots of free space, no 2 MiB hole; free the
    neighbours and the hole appears."""
    c = small_server.client()
    ids = _fill(c)
    for oid in ids[0::2]:
        c.obj("OBJ.DEL", oid)
    st = stats(c)
    if st["arena_largest_free"] < 2 * MIB:
        expect_error(c, ("OBJ.CREATE", b"two", 2 * MIB), "OOM")
    for oid in ids[1::2]:
        c.obj("OBJ.DEL", oid)
    reply = c.obj("OBJ.CREATE", b"two", 2 * MIB)
    assert reply[3] == 2 * MIB
    c.obj("OBJ.ABORT", b"two")
    assert stats(c)["arena_used"] == 0


def test_oom_on_create_leaves_the_id_free(small_server):
    c = small_server.client()
    expect_error(c, ("OBJ.CREATE", b"id", ARENA * 2), "OOM")
    assert c.obj("OBJ.EXISTS", b"id") == 0
    expect_error(c, ("OBJ.INFO", b"id"), "NOTFOUND")
    c.obj("OBJ.CREATE", b"id", 10)
    assert c.obj("OBJ.ABORT", b"id") == b"OK"
