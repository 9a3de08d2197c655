"""Several connections at once: each sees its own objects intact, ownership
stays per connection, and the server ends where it started."""

import threading
import time

from objhelpers import expect_error, stats

ROUNDS = 150
WORKERS = 4


def _worker(server, n, errors):
    c = server.client()
    try:
        for i in range(ROUNDS):
            oid = b"w%d\x00%d" % (n, i)
            data = bytes([n, i % 256]) * (i * 37 % 4000 + 1)
            if i % 2:
                c.obj("OBJ.PUT", oid, data)
            else:
                c.obj("OBJ.CREATE", oid, len(data))
                c.obj("OBJ.WRITE", oid, 0, data)
                c.obj("OBJ.SEAL", oid)
            if c.obj("OBJ.GET", oid) != data:
                errors.append(f"worker {n} round {i}: wrong bytes")
            c.obj("OBJ.PIN", oid)
            c.obj("OBJ.RELEASE", oid)
            if c.obj("OBJ.DEL", oid) != b"OK":
                errors.append(f"worker {n} round {i}: DEL of an unpinned object not OK")
    except Exception as e:
        errors.append(f"worker {n}: {e!r}")
    finally:
        c.close()


def test_parallel_clients_each_see_their_own_objects(fresh_server):
    errors = []
    threads = [threading.Thread(target=_worker, args=(fresh_server, n, errors), daemon=True)
               for n in range(WORKERS)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, 30 - (time.monotonic() - t0)))
    assert not any(t.is_alive() for t in threads), "workers did not finish within 30 s"
    assert not errors, errors[:5]
    st = fresh_server.stats()
    assert st["objects"] == 0 and st["arena_used"] == 0 and st["objects_pinned"] == 0
    assert st["puts"] >= WORKERS * ROUNDS // 2 and st["seals"] >= WORKERS * ROUNDS // 2


def test_created_objects_of_two_connections_do_not_mix(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    a.obj("OBJ.CREATE", b"a", 2)
    b.obj("OBJ.CREATE", b"b", 2)
    expect_error(a, ("OBJ.WRITE", b"b", 0, b"xx"), "WRONGSTATE")
    expect_error(b, ("OBJ.SEAL", b"a"), "WRONGSTATE")
    a.obj("OBJ.WRITE", b"a", 0, b"aa")
    b.obj("OBJ.WRITE", b"b", 0, b"bb")
    a.obj("OBJ.SEAL", b"a")
    b.obj("OBJ.SEAL", b"b")
    assert b.obj("OBJ.GET", b"a") == b"aa" and a.obj("OBJ.GET", b"b") == b"bb"
    assert stats(a)["objects_sealed"] == 2
