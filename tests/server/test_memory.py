"""Memory outside the arena: the module's heap in OBJ.STATS, and max-objects.

docs/commands.md#statistics and docs/configuration.md: a zero-byte object takes one
64-byte unit of arena, but its table entry, id copy, allocator node and directory
update live on the module's heap, which Redis's maxmemory never sees. OBJ.STATS
counts that heap (heap_bytes = heap_store_bytes + heap_directory_bytes) and
max-objects (default: memory / 4096, at least 1024) caps the objects a node holds,
answering OOM with the reason when it is reached. Each test has its own server.
"""

import pytest
from redis.exceptions import ResponseError

from objhelpers import (
    MIB,
    assert_stats_unchanged,
    expect_error,
    fetch,
    stats,
    to_str,
    wait_locations,
    wait_until,
)

N = 2000


def _put_many(c, prefix, n, data=b""):
    """PUT n objects in one pipeline; returns the replies (errors as exceptions)."""
    p = c.pipeline(transaction=False)
    for i in range(n):
        p.execute_command("OBJ.PUT", prefix + b"%d" % i, data)
    return p.execute(raise_on_error=False)


def _del_many(c, prefix, n):
    p = c.pipeline(transaction=False)
    for i in range(n):
        p.execute_command("OBJ.DEL", prefix + b"%d" % i)
    assert all(r == b"OK" for r in p.execute())


def _settled(c):
    """OBJ.STATS once the directory client has sent every queued update."""
    wait_until(lambda: stats(c)["directory_queued"] == 0, what="the directory queue to drain")
    last = {}

    def still():
        nonlocal last
        st = stats(c)
        same = st["heap_directory_bytes"] == last.get("heap_directory_bytes")
        last = st
        return same and st["directory_queued"] == 0

    wait_until(still, what="the directory heap to settle")
    return last


def _config_get(c, name):
    reply = c.execute_command("CONFIG", "GET", name)
    return to_str(reply[1])


def test_heap_fields_add_up_and_appear_in_info(fresh_server):
    c = fresh_server.client()
    st = stats(c)
    assert st["heap_bytes"] == st["heap_store_bytes"] + st["heap_directory_bytes"]
    assert st["heap_store_bytes"] > 0, "an empty table still has its index and allocator"
    text = to_str(c.execute_command("INFO", "objstore"))
    assert "objstore_heap_bytes:" in text and "objstore_max_objects:" in text


def test_heap_grows_by_a_few_hundred_bytes_per_object_and_returns_after_deletes(fresh_server):
    c = fresh_server.client()
    # A first round grows what never shrinks: the index and the allocator's node pool.
    assert all(r == b"OK" for r in _put_many(c, b"warm:", N))
    _del_many(c, b"warm:", N)
    base = _settled(c)
    assert all(r == b"OK" for r in _put_many(c, b"obj:", N))
    full = _settled(c)
    per_object = (full["heap_store_bytes"] - base["heap_store_bytes"]) / N
    assert 100 <= per_object <= 1024, f"{per_object:.0f} bytes of heap per zero-byte object"
    assert full["arena_used"] - base["arena_used"] == 64 * N
    _del_many(c, b"obj:", N)
    after = _settled(c)
    for k in ("heap_store_bytes", "heap_directory_bytes", "heap_bytes", "arena_used", "objects"):
        assert after[k] == base[k], f"{k}: {base[k]} before the objects, {after[k]} after"


def test_pins_cost_heap_that_their_release_gives_back(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    assert all(r == b"OK" for r in _put_many(a, b"p:", 100))
    before = _settled(a)["heap_store_bytes"]
    p = b.pipeline(transaction=False)
    for i in range(100):
        p.execute_command("OBJ.PIN", b"p:%d" % i)
    p.execute()
    assert stats(a)["heap_store_bytes"] > before
    b.close()
    wait_until(lambda: stats(a)["heap_store_bytes"] == before,
               what="the pins' holder records to be freed at disconnect")


def test_max_objects_default_follows_the_arena(make_server):
    c = make_server(memory="8mb").client()
    assert _config_get(c, "objstore.max-objects") == "-1"
    assert stats(c)["max_objects"] == 8 * MIB // 4096


def test_max_objects_default_is_never_below_1024(make_server):
    c = make_server(memory="1mb").client()
    assert stats(c)["max_objects"] == 1024


def test_tiny_objects_stop_at_the_default_cap_not_at_the_arena(make_server):
    c = make_server(memory="8mb").client()
    cap = stats(c)["max_objects"]
    replies = _put_many(c, b"tiny:", cap + 10)
    ok = [r for r in replies if r == b"OK"]
    errors = [r for r in replies if isinstance(r, ResponseError)]
    assert len(ok) == cap and len(errors) == 10, "zero-byte objects were not capped"
    assert all(str(e).startswith("OOM") and "max-objects" in str(e) for e in errors)
    st = stats(c)
    assert st["objects"] == cap and st["object_limit_errors"] == 10
    assert st["arena_used"] == 64 * cap < st["arena_size"] // 2, "the arena was not the limit"


def test_max_objects_answers_oom_with_its_reason_and_loses_nothing(make_server):
    c = make_server(memory="8mb", module_args=("max-objects", "50")).client()
    assert stats(c)["max_objects"] == 50
    assert all(r == b"OK" for r in _put_many(c, b"o:", 50, b"data"))
    before = stats(c)
    msg = expect_error(c, ("OBJ.PUT", b"o:50", b"data"), "OOM")
    assert "max-objects" in msg, msg
    assert_stats_unchanged(before, stats(c), "PUT at max-objects", oom=True)
    mid = stats(c)
    expect_error(c, ("OBJ.CREATE", b"o:50", 4), "OOM")
    assert_stats_unchanged(mid, stats(c), "CREATE at max-objects", oom=True)
    expect_error(c, ("OBJ.PUT", b"o:7", b"x"), "EXISTS")  # an existing id is still EXISTS
    st = stats(c)
    assert st["objects"] == 50 and st["object_limit_errors"] == 2
    for i in range(50):
        assert c.execute_command("OBJ.GET", b"o:%d" % i) == b"data"
    assert c.execute_command("OBJ.DEL", b"o:0") == b"OK"
    assert c.execute_command("OBJ.PUT", b"o:50", b"data") == b"OK"


def test_objects_deleted_while_pinned_count_until_released(make_server):
    s = make_server(memory="8mb", module_args=("max-objects", "2"))
    a, b = s.client(), s.client()
    a.execute_command("OBJ.PUT", b"x", b"1")
    a.execute_command("OBJ.PUT", b"y", b"2")
    b.execute_command("OBJ.PIN", b"x")
    assert a.execute_command("OBJ.DEL", b"x") == b"DEFERRED"
    expect_error(a, ("OBJ.PUT", b"z", b"3"), "OOM")
    b.execute_command("OBJ.RELEASE", b"x")
    assert a.execute_command("OBJ.PUT", b"z", b"3") == b"OK"


def test_max_objects_can_change_at_run_time(make_server):
    c = make_server(memory="8mb").client()
    assert all(r == b"OK" for r in _put_many(c, b"r:", 20))
    c.execute_command("CONFIG", "SET", "objstore.max-objects", "10")
    assert stats(c)["max_objects"] == 10
    expect_error(c, ("OBJ.PUT", b"more", b""), "OOM")
    assert stats(c)["objects"] == 20, "lowering the cap removed objects"
    c.execute_command("CONFIG", "SET", "objstore.max-objects", "0")  # no limit
    assert stats(c)["max_objects"] == 0
    assert c.execute_command("OBJ.PUT", b"more", b"") == b"OK"
    c.execute_command("CONFIG", "SET", "objstore.max-objects", "-1")
    assert stats(c)["max_objects"] == 8 * MIB // 4096


@pytest.mark.parametrize("value", ["-2", "abc", "1.5"])
def test_max_objects_refuses_bad_values(make_server, value):
    c = make_server(memory="8mb").client()
    with pytest.raises(ResponseError):
        c.execute_command("CONFIG", "SET", "objstore.max-objects", value)
    assert _config_get(c, "objstore.max-objects") == "-1"


def test_a_fetch_at_the_cap_evicts_a_replica_or_answers_oom_with_the_reason(make_cluster, uid):
    cl = make_cluster(names=("A", "B"), layout="separate", memory="64mb")
    a, b = cl["A"].client(), cl["B"].client()
    ids = [uid(b"f%d" % i) for i in range(3)]
    for oid in ids:
        a.execute_command("OBJ.PUT", oid, b"remote " + oid)
        wait_locations(a, oid, ["A"])
    b.execute_command("OBJ.PUT", uid(b"own"), b"a primary of B")
    b.execute_command("CONFIG", "SET", "objstore.max-objects", "2")
    assert fetch(b, ids[0]) == ["OK"]
    before = stats(b)
    assert fetch(b, ids[1]) == ["OK"], "the unpinned replica was not evicted to make room"
    st = stats(b)
    assert st["evictions"] == before["evictions"] + 1 and st["objects"] == 2
    assert b.execute_command("OBJ.EXISTS", ids[0]) == 0
    assert b.execute_command("OBJ.EXISTS", uid(b"own")) == 1, "a primary was evicted"
    b.execute_command("OBJ.PIN", ids[1])
    [answer] = fetch(b, ids[2])
    assert answer.startswith("OOM") and "max-objects" in answer, answer
    assert b.execute_command("OBJ.EXISTS", ids[2]) == 0
    b.execute_command("OBJ.RELEASE", ids[1])
    assert b.execute_command("OBJ.GET", ids[1]) == b"remote " + ids[1]
