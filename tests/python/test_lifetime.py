"""Pins follow the references: an object stays pinned (OBJ.INFO pins, asked through
a separate connection) exactly as long as a Python object refers to its memory."""

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import objstore
from pyhelpers import arena_path, in_arena, info, pins, wait_for


def test_dropping_a_view_releases_the_pin(oc, rc, uid):
    oc.put(uid, b"abc")
    v = oc.get(uid)
    assert pins(rc, uid) == 1
    del v
    assert pins(rc, uid) == 0


def test_a_slice_keeps_the_pin(oc, rc, uid):
    oc.put(uid, b"abcdef")
    v = oc.get(uid)
    s = v[2:4]
    del v
    assert pins(rc, uid) == 1
    assert bytes(s) == b"cd"
    del s
    assert pins(rc, uid) == 0


def test_an_array_and_its_slices_keep_the_pin(oc, rc, uid):
    oc.put(uid, np.arange(100, dtype=np.int32))
    a = oc.get(uid)
    s = a[10:20]
    t = s.reshape(2, 5).T
    del a, s
    assert pins(rc, uid) == 1
    assert t[0, 1] == 15
    del t
    assert pins(rc, uid) == 0


def test_explicit_release_and_context_manager(oc, rc, uid):
    oc.put(uid, b"xyz")
    buf = oc.pin(uid)
    assert pins(rc, uid) == 1
    buf.release()
    assert pins(rc, uid) == 0 and buf.released
    with oc.pin(uid) as b2:
        assert bytes(memoryview(b2)) == b"xyz"
        assert pins(rc, uid) == 1
    assert pins(rc, uid) == 0
    with oc.get(uid) as mv:  # a memoryview: its own release and `with`
        assert pins(rc, uid) == 1 and bytes(mv) == b"xyz"
    gc.collect()
    assert pins(rc, uid) == 0


def test_release_refuses_while_views_live(oc, rc, uid):
    oc.put(uid, b"12345678")
    buf = oc.pin(uid)
    arr = np.frombuffer(memoryview(buf), np.uint8)
    with pytest.raises(BufferError):
        buf.release()
    assert pins(rc, uid) == 1 and arr[0] == ord("1")
    del arr, buf
    assert pins(rc, uid) == 0


def test_delete_while_a_view_lives_is_deferred(oc, rc, uid):
    data = bytes(range(256)) * 64
    oc.put(uid, data)
    v = oc.get(uid, kind="numpy")
    assert oc.delete(uid) == "DEFERRED"
    assert oc.exists(uid) is False
    # New objects are made meanwhile: the pinned bytes must not be reused.
    for i in range(8):
        oc.put(uid + b":filler%d" % i, b"\xff" * len(data))
    assert v.tobytes() == data
    del v
    with pytest.raises(objstore.ObjectNotFound):
        oc.get(uid)


def test_delete_frees_after_last_view(oc, rc, uid):
    oc.put(uid, b"q" * 100000)
    used = lambda: int(dict(zip(*[iter(rc.obj("OBJ.STATS"))] * 2))[b"arena_used"])  # noqa
    v = oc.get(uid)
    u0 = used()
    assert oc.delete(uid) == "DEFERRED"
    assert used() == u0, "deferred: the memory stays while the view lives"
    del v
    assert used() < u0, "freed when the last view went"


def test_a_view_handed_to_another_thread(oc, rc, uid):
    oc.put(uid, np.full(1000, 3, dtype=np.int16))
    a = oc.get(uid)
    out = {}

    def worker(arr):
        out["sum"] = int(arr.sum())

    t = threading.Thread(target=worker, args=(a,))
    del a
    t.start()
    t.join()
    assert out["sum"] == 3000
    del t  # the thread object held the argument
    gc.collect()
    assert pins(rc, uid) == 0


def test_release_from_gc_while_another_thread_waits_in_the_client(server, oc, rc, uid):
    """A thread blocks inside a get (holding the client's lock, GIL released); the main
    thread meanwhile drops a view, whose release is queued, not deadlocked, and is
    sent when the waiting call lets go."""
    oc.put(uid, b"held")
    v = oc.get(uid)
    later = uid + b":later"
    got = {}

    def waiter():
        got["v"] = bytes(oc.get(later, timeout=objstore.FOREVER))

    t = threading.Thread(target=waiter)
    t.start()
    wait_for(lambda: int(dict(zip(*[iter(rc.obj("OBJ.STATS"))] * 2))[b"blocked_clients"]) >= 1,
             "the waiter blocks on the node")
    spins = sum(1 for _ in range(10000))  # this thread runs Python: the GIL is free
    assert spins == 10000
    del v  # queued: the lock is the waiter's
    with objstore.connect("127.0.0.1", server.port) as other:
        other.put(later, b"now")
    t.join()
    assert got["v"] == b"now"
    wait_for(lambda: pins(rc, uid) == 0, "the queued release was sent")
    assert pins(rc, later) == 0


def test_many_threads_share_one_client(oc, rc, uid):
    errors = []

    def work(k):
        try:
            for i in range(30):
                key = uid + b":%d:%d" % (k, i)
                oc.put(key, np.full(100, k, dtype=np.int64))
                a = oc.get(key)
                assert int(a.sum()) == 100 * k
                del a
                assert oc.delete(key) == "OK"
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_close_with_live_views_keeps_their_memory(server, rc, uid):
    c = objstore.connect("127.0.0.1", server.port)
    c.put(uid, b"still here")
    v = c.get(uid)
    c.close()
    with pytest.raises(objstore.ClientClosed):
        c.get(uid)
    assert bytes(v) == b"still here" and pins(rc, uid) == 1
    del v
    wait_for(lambda: pins(rc, uid) == 0, "the last view's release (or the disconnect)")


def test_interpreter_exit_with_live_views(server, rc, uid):
    script = textwrap.dedent(f"""
        import numpy as np, objstore
        c = objstore.connect("127.0.0.1", {server.port})
        c.put({uid!r}, np.arange(1000, dtype=np.float64))
        keep = [c.get({uid!r}) for _ in range(3)]
        keep.append(keep[0][5:])
        buf = c.pin({uid!r})
        print(int(keep[0].sum()), flush=True)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(sum(range(1000)))
    wait_for(lambda: pins(rc, uid) == 0, "the node drops the exited process's pins")


def test_close_while_another_thread_waits_in_a_call(server, rc, uid):
    """close() from one thread while another is blocked in a get: the waiting call
    completes with a valid view, and the connection goes once that view is gone."""
    c = objstore.connect("127.0.0.1", server.port)
    got = {}

    def waiter():
        got["v"] = c.get(uid, timeout=objstore.FOREVER)

    t = threading.Thread(target=waiter)
    t.start()
    wait_for(lambda: int(dict(zip(*[iter(rc.obj("OBJ.STATS"))] * 2))[b"blocked_clients"]) >= 1,
             "the waiter blocks on the node")
    c.close()  # returns at once: the call under way keeps the connection
    with objstore.connect("127.0.0.1", server.port) as other:
        other.put(uid, b"arrived")
    t.join()
    v = got.pop("v")
    assert bytes(v) == b"arrived" and pins(rc, uid) == 1
    with pytest.raises(objstore.ClientClosed):
        c.get(uid)
    del v
    wait_for(lambda: pins(rc, uid) == 0, "the pin goes with the last view")


def test_dropping_the_view_of_a_remade_id_releases_that_objects_pin(oc, rc, uid):
    """An id deleted and made again while pinned names two objects: the view of the new
    one gives back the new one's pin, never the old one's (whose memory a new object
    could then take while the old view still reads it)."""
    other = uid(b"other")
    old = bytes(range(256)) * 16
    oc.put(uid, old)
    first = oc.pin(uid)
    assert rc.obj("OBJ.DEL", uid) == b"DEFERRED"
    oc.put(uid, b"n" * len(old))
    second = oc.pin(uid)
    assert pins(rc, uid) == 1
    second.release()
    assert pins(rc, uid) == 0, "releasing the second view dropped the first object's pin"
    rc.obj("OBJ.PUT", other, b"\xee" * len(old))
    assert bytes(memoryview(first)) == old
    first.release()
    assert rc.obj("OBJ.DEL", uid) == b"OK"
    rc.obj("OBJ.DEL", other)
