"""Processes: multiprocessing workers each connect (a client is per process) and read
one object zero-copy; a forked child cannot use, nor release through, the parent's
connection."""

import gc
import multiprocessing as mp
import os

import numpy as np

import objstore
from pyhelpers import arena_path, in_arena, pins

WORKERS = 4


def _reader(port, oid, path, barrier, results):
    c = objstore.connect("127.0.0.1", port)
    a = c.get(oid)
    results.put((os.getpid(), c.zero_copy, in_arena(path, a.ctypes.data, a.nbytes),
                 int(a.sum(dtype=np.int64))))
    barrier.wait()  # all workers hold their views at once
    barrier.wait()  # the parent has counted the pins
    del a
    c.close()


def test_four_workers_read_one_object_zero_copy(server, oc, rc, uid):
    data = np.arange(1 << 20, dtype=np.int32)
    oc.put(uid, data)
    path = arena_path(rc)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(WORKERS + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(server.port, uid, path, barrier, results))
             for _ in range(WORKERS)]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=60)
        got = [results.get(timeout=60) for _ in range(WORKERS)]
        assert pins(rc, uid) == WORKERS, "each worker holds its own pin of the one object"
        barrier.wait(timeout=60)
    finally:
        for p in procs:
            p.join(60)
    assert [p.exitcode for p in procs] == [0] * WORKERS
    assert len({pid for pid, *_ in got}) == WORKERS
    for _pid, zero_copy, inside, total in got:
        assert zero_copy and inside, "the worker's view lies in its own mapping of the arena"
        assert total == int(data.sum(dtype=np.int64))
    assert pins(rc, uid) == 0


def _use_parent_client(c, oid, results):
    try:
        c.get(oid)
        results.put("no error")
    except objstore.ClientForked as e:
        results.put("ClientForked: " + str(e))


def test_child_cannot_use_the_parents_client(oc, uid):
    oc.put(uid, b"x")
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    p = ctx.Process(target=_use_parent_client, args=(oc, uid, results))
    p.start()
    msg = results.get(timeout=60)
    p.join(60)
    assert msg.startswith("ClientForked") and "connect" in msg
    assert bytes(oc.get(uid)) == b"x", "the parent's client still works"


def _drop_inherited(view, results):
    shape = view.shape  # not its bytes: the child has no access to them (test_fork_views)
    del view
    gc.collect()
    results.put(shape)


def test_child_dropping_inherited_views_leaves_the_parents_pins(oc, rc, uid):
    oc.put(uid, np.ones(100, dtype=np.int64))
    v = oc.get(uid)
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    p = ctx.Process(target=_drop_inherited, args=(v, results))
    p.start()
    assert results.get(timeout=60) == (100,)
    p.join(60)
    assert p.exitcode == 0
    assert pins(rc, uid) == 1, "the child sent nothing on the parent's connection"
    assert int(v.sum()) == 100
    del v
    assert pins(rc, uid) == 0
