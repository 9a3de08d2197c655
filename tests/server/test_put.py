"""A put touches its bytes once (docs/architecture.md, "A put touches its bytes
once"): OBJ.SEAL of a large object answers before its checksum is taken, and
the node takes it in the background. What must hold meanwhile, checked here
through the Redis commands and the arena file (the C and Python clients'
own puts are tests/server/test_client.c and tests/python/test_put.py):

- the checksum, once known, is the XXH3-64 of the bytes, for sizes from 0 to
  1 GiB; until then OBJ.INFO says "pending" and the directory has no entry;
- a FETCH from another node that arrives while the checksum is pending
  waits for it, and the copy is checked against it (transfer_checksum_waits
  shows the race happened);
- deleting an object whose checksum is pending frees it at once;
- a put that fails half way leaves nothing behind: a creator killed
  mid-copy, a create into a full arena.

The background checksum is made slow enough to race with by queueing a
backlog of large objects ahead of the one a test looks at.
"""

import mmap
import os
import subprocess
import sys
import time

import pytest
from redis.exceptions import ResponseError

from objhelpers import (
    MIB,
    err_code,
    info,
    read_arena,
    stats,
    to_int,
    to_str,
    wait_until,
    xxh3_64,
)

GIB = 1 << 30
SIZES = [0, 1, 4095, 4096, 64 * 1024 + 1, 1 * MIB, 16 * MIB]
BACKLOG = 4  # objects of BACKLOG_SIZE queued ahead of the one under test
BACKLOG_SIZE = 256 * MIB
# The fetch that waits behind the backlog's checksums: a bound on a hang only (on a
# loaded machine, an ASan build hashes the backlog's GiB for longer than the default
# fetch-timeout), never the verdict.
HANG_MS = 300000


def pattern(size, seed):
    """size bytes that differ per seed and per position (cheap for 1 GiB)."""
    block = bytes((i * 131 + seed * 7 + 1) % 251 for i in range(4096))
    reps, rest = divmod(size, len(block))
    return block * reps + block[:rest]


def created_offset(reply):
    return to_int(dict(zip(reply[0::2], reply[1::2]))[b"offset"])


def arena_put(r, arena_path, oid, data):
    """Create oid, write data into the arena file (as a zero-copy client
    does), seal. Returns the offset."""
    offset = created_offset(r.obj("OBJ.CREATE", oid, len(data)))
    if data:
        with open(arena_path, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0)
            m[offset:offset + len(data)] = data
            m.close()
    assert r.obj("OBJ.SEAL", oid) == b"OK"
    return offset


def known_checksum(r, oid, timeout=120):
    """OBJ.INFO's checksum once it is no longer pending."""
    def ready():
        s = to_str(info(r, oid)["checksum"])
        return s if s != "pending" else None
    return int(wait_until(ready, timeout=timeout, what=f"the checksum of {oid}"), 16)


def backlog(r, prefix):
    """Queue BACKLOG large objects (never written: zeros) for the checksum
    worker, so that the next seal's checksum waits behind them."""
    for i in range(BACKLOG):
        r.obj("OBJ.CREATE", f"{prefix}-b{i}", BACKLOG_SIZE)
        assert r.obj("OBJ.SEAL", f"{prefix}-b{i}") == b"OK"


@pytest.fixture(scope="module")
def big(request):
    from objnodes import ObjstoreServer, finish

    s = ObjstoreServer(memory="2gb", name="put")
    s.start()
    request.addfinalizer(lambda: finish([s]))
    return s


@pytest.mark.parametrize("size", SIZES)
def test_the_checksum_of_a_put_is_the_xxh3_of_its_bytes(big, size):
    r = big.client()
    data = pattern(size, size % 97)
    assert r.obj("OBJ.PUT", f"inline-{size}", data) == b"OK"
    assert known_checksum(r, f"inline-{size}") == xxh3_64(data)
    assert r.obj("OBJ.GET", f"inline-{size}") == data
    arena_put(r, big.arena_path, f"arena-{size}", data)
    assert known_checksum(r, f"arena-{size}") == xxh3_64(data)
    r.obj("OBJ.DEL", f"inline-{size}")
    r.obj("OBJ.DEL", f"arena-{size}")


def test_a_1gib_put_has_its_bytes_and_checksum(big):
    r = big.client()
    data = pattern(1 * GIB, 5)
    offset = arena_put(r, big.arena_path, "one-gib", data)
    assert known_checksum(r, "one-gib") == xxh3_64(data)
    assert read_arena(big.arena_path, offset, len(data)) == data
    r.obj("OBJ.DEL", "one-gib")
    wait_until(lambda: stats(r)["checksums_pending"] == 0, timeout=60, what="no checksum left")


def raced(attempt, tries=3):
    """Run attempt(n) until it reports that it saw the checksum pending (it
    asserts what must hold either way); fail when it never did: the race is
    what the test is about, and a checksum taken before the seal answers
    would never show it."""
    for n in range(tries):
        if attempt(n):
            return
    pytest.fail(f"the checksum was never seen pending in {tries} tries")


def test_a_pending_object_is_readable_here_and_unpublished_until_its_checksum_is_known(big):
    r = big.client()

    def attempt(n):
        oid = f"pub-target-{n}"
        backlog(r, f"pub{n}")
        r.obj("OBJ.CREATE", oid, 4 * MIB)  # zeros; sealed right behind the backlog
        assert r.obj("OBJ.SEAL", oid) == b"OK"
        pending = to_str(info(r, oid)["checksum"]) == "pending"
        if pending:
            assert stats(r)["checksums_pending"] >= 1
            try:
                r.obj("OBJ.LOCATE", oid)
            except ResponseError as e:
                assert err_code(e) == "NOTFOUND", f"OBJ.LOCATE answered {e}"
            else:
                # Located: wrong only if the checksum is still pending now (it never
                # goes back to pending); else the worker got there first and this
                # attempt saw no race (a loaded machine), so it does not count.
                assert to_str(info(r, oid)["checksum"]) != "pending", \
                    "published before its checksum was known"
                pending = False
            assert r.obj("OBJ.GET", oid) == bytes(4 * MIB)  # local readers do not wait
        sum_ = known_checksum(r, oid)
        assert sum_ == xxh3_64(bytes(4 * MIB))

        def located():
            try:
                return r.obj("OBJ.LOCATE", oid)
            except ResponseError:
                return None
        loc = wait_until(located, timeout=30, what="the publish")
        assert int(to_str(dict(zip(loc[0::2], loc[1::2]))[b"checksum"]), 16) == sum_
        for i in range(BACKLOG):
            r.obj("OBJ.DEL", f"pub{n}-b{i}")
        r.obj("OBJ.DEL", oid)
        return pending

    before = stats(r)["checksums_deferred"]
    raced(attempt)
    assert stats(r)["checksums_deferred"] - before >= BACKLOG + 1


def test_deleting_an_object_whose_checksum_is_pending_frees_it_at_once(big):
    r = big.client()
    wait_until(lambda: stats(r)["checksums_pending"] == 0, timeout=60, what="an idle worker")
    used = stats(r)["arena_used"]

    def attempt(n):
        backlog(r, f"del{n}")
        r.obj("OBJ.PUT", f"del-target-{n}", pattern(2 * MIB, 3))
        pending = stats(r)["checksums_pending"] >= 1
        for i in range(BACKLOG):
            assert r.obj("OBJ.DEL", f"del{n}-b{i}") == b"OK"  # OK, not DEFERRED: freed now
        assert r.obj("OBJ.DEL", f"del-target-{n}") == b"OK"
        st = stats(r)
        assert st["arena_used"] == used
        assert st["objects_deleting"] == 0
        assert st["checksums_pending"] == 0
        return pending

    raced(attempt)


def test_a_create_into_a_full_arena_leaves_nothing(make_server):
    s = make_server(memory="8mb")
    r = s.client()
    before = stats(r)
    with pytest.raises(ResponseError) as e:
        r.obj("OBJ.CREATE", "too-big", 9 * MIB)
    assert err_code(e.value) == "OOM"
    with pytest.raises(ResponseError) as e:
        r.obj("OBJ.PUT", "too-big", b"x" * (9 * MIB))
    assert err_code(e.value) == "OOM"
    after = stats(r)
    assert after["objects"] == before["objects"] == 0
    assert after["arena_used"] == 0
    assert r.obj("OBJ.EXISTS", "too-big") == 0


KILLED_WRITER = r"""
import mmap, os, sys, redis
port, arena, size = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
r = redis.Redis(port=port)
rep = r.execute_command("OBJ.CREATE", "half", size)
offset = int(dict(zip(rep[0::2], rep[1::2]))[b"offset"])
with open(arena, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[offset:offset + size // 2] = b"\xab" * (size // 2)
    print("copying", flush=True)
    sys.stdin.readline()  # killed here, half way through the copy
"""


def test_a_creator_killed_mid_copy_leaves_nothing(big):
    r = big.client()
    used = stats(r)["arena_used"]
    p = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(big.port), big.arena_path,
                          str(64 * MIB)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"copying\n"
        assert to_str(info(r, "half")["state"]) == "created"
        p.kill()
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    wait_until(lambda: stats(r)["objects_created"] == 0, timeout=30, what="the abort")
    assert r.obj("OBJ.EXISTS", "half") == 0
    assert stats(r)["arena_used"] == used


@pytest.fixture
def pair(make_cluster):
    return make_cluster(names=("A", "B"), layout="separate", memory="1200mb")


def test_a_fetch_racing_the_background_checksum_waits_for_it(pair):
    a, b = pair["A"].client(), pair["B"].client()
    arena = pair["A"].arena_path
    try:  # B dials A now, so that the timed part below has no handshake in it
        b.execute_command("OBJ.FETCH", "nothing", "TIMEOUT", 200, "FROM", "A")
    except ResponseError:
        pass

    def attempt(n):
        oid = f"race-target-{n}"
        waits = stats(a)["transfer_checksum_waits"]
        data = pattern(8 * MIB, 11 + n)
        backlog(a, f"race{n}")
        offset = created_offset(a.obj("OBJ.CREATE", oid, len(data)))
        with open(arena, "r+b") as f:
            m = mmap.mmap(f.fileno(), 0)
            m[offset:offset + len(data)] = data
            m.close()
        assert a.obj("OBJ.SEAL", oid) == b"OK"
        assert b.execute_command("OBJ.FETCH", oid, "TIMEOUT", HANG_MS, "FROM", "A") == [b"OK"]
        want = xxh3_64(data)
        assert int(to_str(info(b, oid)["checksum"]), 16) == want
        assert known_checksum(a, oid) == want
        assert b.obj("OBJ.GET", oid) == data
        for i in range(BACKLOG):
            a.obj("OBJ.DEL", f"race{n}-b{i}")
        return stats(a)["transfer_checksum_waits"] > waits

    raced(attempt)
