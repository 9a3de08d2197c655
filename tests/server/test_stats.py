"""OBJ.STATS counts what happens. Each test has its own server, so counts are exact."""

from objhelpers import MIB, start_call, stats, wait_blocked, wait_until


def _delta(before, after):
    return {k: after[k] - before[k] for k in after if isinstance(after[k], int)}


def test_fresh_server_has_an_empty_arena(fresh_server):
    st = fresh_server.stats()
    assert st["arena_size"] == 64 * MIB
    assert st["arena_used"] == 0
    assert st["objects"] == st["objects_sealed"] == st["objects_created"] == 0
    assert st["objects_pinned"] == st["bytes_sealed"] == st["blocked_clients"] == 0
    for k in ("puts", "creates", "seals", "aborts", "gets", "deletes", "deferred_deletes",
              "oom_errors"):
        assert st[k] == 0, f"{k} = {st[k]} on a fresh server"
    assert st["arena_free"] == st["arena_largest_free"] > 63 * MIB


def test_put_counts_a_put_a_sealed_object_and_its_bytes(fresh_server):
    c = fresh_server.client()
    before = stats(c)
    c.obj("OBJ.PUT", b"a", b"x" * 1000, "META", b"mmm")
    d = _delta(before, stats(c))
    assert d["puts"] == 1
    assert d["objects"] == 1 and d["objects_sealed"] == 1 and d["objects_created"] == 0
    assert d["bytes_sealed"] in (1000, 1003), "bytes_sealed counts the data (and maybe meta)"
    assert d["arena_used"] >= 1000
    assert d["arena_free"] == -d["arena_used"]


def test_create_seal_abort_are_counted(fresh_server):
    c = fresh_server.client()
    before = stats(c)
    c.obj("OBJ.CREATE", b"a", 100)
    c.obj("OBJ.CREATE", b"b", 100)
    mid = stats(c)
    d = _delta(before, mid)
    assert d["creates"] == 2 and d["objects_created"] == 2 and d["objects"] == 2
    assert d["objects_sealed"] == 0 and d["bytes_sealed"] == 0
    c.obj("OBJ.SEAL", b"a")
    c.obj("OBJ.ABORT", b"b")
    d = _delta(before, stats(c))
    assert d["seals"] == 1 and d["aborts"] == 1
    assert d["objects"] == 1 and d["objects_sealed"] == 1 and d["objects_created"] == 0
    assert d["bytes_sealed"] == 100


def test_gets_are_counted(fresh_server):
    c = fresh_server.client()
    c.obj("OBJ.PUT", b"a", b"x")
    before = stats(c)
    for _ in range(3):
        c.obj("OBJ.GET", b"a")
    assert _delta(before, stats(c))["gets"] == 3


def test_deletes_and_deferred_deletes_are_counted(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    a.obj("OBJ.PUT", b"now", b"x")
    a.obj("OBJ.PUT", b"later", b"y")
    b.obj("OBJ.PIN", b"later")
    before = stats(a)
    assert a.obj("OBJ.DEL", b"now") == b"OK"
    d = _delta(before, stats(a))
    assert d["deletes"] == 1 and d["deferred_deletes"] == 0 and d["objects"] == -1
    assert a.obj("OBJ.DEL", b"later") == b"DEFERRED"
    d = _delta(before, stats(a))
    assert d["deferred_deletes"] == 1
    b.obj("OBJ.RELEASE", b"later")
    st = stats(a)
    assert st["objects"] == 0 and st["arena_used"] == 0 and st["bytes_sealed"] == 0


def test_objects_pinned_counts_pinned_objects(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    a.obj("OBJ.PUT", b"p", b"x")
    a.obj("OBJ.PUT", b"q", b"x")
    a.obj("OBJ.PIN", b"p")
    b.obj("OBJ.PIN", b"p")
    assert stats(a)["objects_pinned"] == 1
    b.obj("OBJ.PIN", b"q")
    assert stats(a)["objects_pinned"] == 2
    a.obj("OBJ.RELEASE", b"p")
    assert stats(a)["objects_pinned"] == 2
    b.obj("OBJ.RELEASE", b"p")
    b.obj("OBJ.RELEASE", b"q")
    assert stats(a)["objects_pinned"] == 0


def test_blocked_clients_counts_waiting_gets_and_pins(fresh_server):
    a = fresh_server.client()
    waiters = [start_call(fresh_server.client(), "OBJ.GET", b"w", "TIMEOUT", 10000),
               start_call(fresh_server.client(), "OBJ.PIN", b"w", "TIMEOUT", 10000)]
    wait_blocked(a, 2)
    assert stats(a)["blocked_clients"] == 2
    a.obj("OBJ.PUT", b"w", b"x")
    for w in waiters:
        w.result()
    wait_until(lambda: stats(a)["blocked_clients"] == 0, what="blocked_clients back to 0")


def test_arena_used_goes_back_to_zero(fresh_server):
    c = fresh_server.client()
    for i in range(20):
        c.obj("OBJ.PUT", b"o%d" % i, b"z" * (i * 1000 + 1))
    assert stats(c)["arena_used"] > 0
    for i in range(20):
        c.obj("OBJ.DEL", b"o%d" % i)
    st = stats(c)
    assert st["arena_used"] == 0 and st["objects"] == 0
    assert st["arena_largest_free"] == st["arena_free"]
