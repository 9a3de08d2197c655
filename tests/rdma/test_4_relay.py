"""Relays over RDMA: a node still receiving an object serves the bytes that have
landed to another node (docs/cluster.md, "Broadcast").

Three real nodes first: A (the owner, one upload slot) sends B a large object by
READ rendezvous while C asks A, is sent on to B, and reads from B what has landed
there. Then the owner is the hostile tool's paced owner
(tests/rdma/hostile/rdma_hostile.c, mode slow-owner): it feeds B one range at a
time and answers anyone else BUSY "relay B", so B is a relay for as long as the
test needs, whatever the guest's speed. C then fetches through B over RDMA, inline (ranges under B's
rdma-read-min) and by range rendezvous (RPART), and both copies are byte-exact.
With the owner stalled half-way, a READ through a relay's key past the bytes
landed there fails with a remote access error, and a fetch whose source gives
up goes on from its offset at another holder, which answers with a range
rendezvous.

Runs before test_5_kill (which leaves nodes dead).
"""

import os
import threading
import time

import pytest
import redis

from objhelpers import MIB, KIB, payload, stats, wait_until, xxh3_64
from objnodes import free_port, registry_key, rxe_addr
from rdmahelpers import (DEFAULT_READ_MIN, assert_same_object, fetch, put, put_published,
                         set_read_min)
from test_4_hostile import SECRET, read_statuses, read_until, start_hostile

IN_GUEST = os.environ.get("OBJ_SOFTROCE_GUEST") == "1"


def directory(cluster):
    return redis.Redis(host="127.0.0.1", port=cluster.dir.port)


def lure(dirc, name, port, oid, data):
    """Make the directory list oid (of data's size and checksum) on a node name that
    exists only there, reachable over RDMA at the hostile tool."""
    key = b"objstore:node:" + name
    dirc.execute_command("HSET", key, "addr", rxe_addr(), "tcp_port", 0, "rdma_addr", rxe_addr(),
                         "rdma_port", port, "features", 3, "heartbeat_ms", int(time.time() * 1000))
    dirc.execute_command("PEXPIRE", key, 120000)
    dirc.execute_command("SADD", registry_key(name), name)
    dirc.execute_command("SADD", b"objstore:{" + oid + b"}:loc", name)
    dirc.execute_command("HSET", b"objstore:{" + oid + b"}:meta", "size", len(data), "meta_size",
                         0, "checksum", "%016x" % xxh3_64(data))


def unlure(dirc, name, oid):
    dirc.execute_command("DEL", b"objstore:node:" + name, b"objstore:{" + oid + b"}:loc",
                         b"objstore:{" + oid + b"}:meta")
    dirc.execute_command("SREM", registry_key(name), name)


def slow_owner(tmp_path, name, data, piece, pace_ms, stall_after=0, *extra):
    path = tmp_path / "object.bin"
    path.write_bytes(data)
    port = free_port(rxe_addr())
    proc = start_hostile(rxe_addr(), port, "--mode", "slow-owner", "--secret", SECRET, "--name",
                         name.decode(), "--feed", "B", "--file", path, "--size", len(data),
                         "--piece", piece, "--pace-ms", pace_ms, "--stall-after", stall_after,
                         "--seconds", 240, *extra)
    read_until(proc, "ready", 30)
    return proc, port


def stop(proc):
    if proc.returncode is None:
        proc.kill()
        proc.communicate()


def fetch_in_background(client, oid, timeout_ms):
    """OBJ.FETCH oid VIA rdma on a thread; returns (thread, result list)."""
    out = []
    t = threading.Thread(target=lambda: out.append(
        fetch(client, oid, timeout=timeout_ms, via="rdma")), daemon=True)
    t.start()
    return t, out


def relay_through_b(cluster, tmp_path, oid, name, size, piece, b_read_min):
    """B fetches oid from the paced owner while C fetches it from B as a relay.
    Returns the stats deltas of B and C."""
    b, c = cluster["B"], cluster["C"]
    bc, cc = b.client(), c.client()
    data = payload(size, 17)
    owner, port = slow_owner(tmp_path, name, data, piece, 100)
    dirc = directory(cluster)
    set_read_min(bc, b_read_min)
    try:
        lure(dirc, name, port, oid, data)
        b0, c0 = stats(bc), stats(cc)
        t, got_b = fetch_in_background(b.client(), oid, 120000)
        read_until(owner, "piece", 30)  # B is receiving: a relay from now on
        assert fetch(cc, oid, timeout=120000, via="rdma") == ["OK"]
        t.join(130)
        assert got_b == [["OK"]], got_b
        assert_same_object(b, bc, oid, data, b"")
        assert_same_object(c, cc, oid, data, b"")
        b1, c1 = stats(bc), stats(cc)
        return ({k: b1[k] - b0[k] for k in b1 if isinstance(b1[k], int)},
                {k: c1[k] - c0[k] for k in c1 if isinstance(c1[k], int)})
    finally:
        set_read_min(bc, DEFAULT_READ_MIN)
        stop(owner)
        unlure(dirc, name, oid)


def test_three_nodes_relay_while_receiving(cluster, uid):
    na, nb, nc = cluster["A"], cluster["B"], cluster["C"]
    a, b, c = na.client(), nb.client(), nc.client()
    # Sessions B-A, C-A and C-B up beforehand: C must reach B while it receives.
    warm = ((na, a, uid(b"warm-a"), (b, c)), (nb, b, uid(b"warm-b"), (c,)))
    for owner, oc, oid, fetchers in warm:
        put_published(owner, oc, oid, b"warm" * 256, b"", watcher=fetchers[0])
        for f in fetchers:
            assert fetch(f, oid, timeout=60000, via="rdma") == ["OK"]
    data = payload(64 * MIB, seed=41)
    put_published(na, a, uid, data, b"", watcher=b)
    a0, b0, c0 = stats(a), stats(b), stats(c)
    t, got_b = fetch_in_background(nb.client(), uid, 120000)
    # A's one upload slot is B's READ rendezvous from now on.
    wait_until(lambda: stats(a)["rdma_served_rndv"] > a0["rdma_served_rndv"], 60.0, 0.002,
               what="A to start serving B")
    assert fetch(c, uid, timeout=120000, via="rdma") == ["OK"]
    t.join(130)
    assert got_b == [["OK"]], got_b
    a1, b1, c1 = stats(a), stats(b), stats(c)
    if b1["transfer_relayed"] == b0["transfer_relayed"]:
        msg = "B held all 64 MiB before C's request reached it: the relay was not exercised"
        if IN_GUEST:
            pytest.fail(msg)
        pytest.skip(msg + " (this host's RDMA is too fast for this test)")
    assert_same_object(nb, b, uid, data, b"")
    assert_same_object(nc, c, uid, data, b"")
    assert a1["transfer_redirects"] > a0["transfer_redirects"], "A sent C on"
    assert c1["transfer_relay_follows"] > c0["transfer_relay_follows"], "C followed A's BUSY to B"
    # Every byte once: C took nothing twice, and A sent the object once (to B).
    assert c1["transfer_downloaded_bytes"] - c0["transfer_downloaded_bytes"] == 64 * MIB
    assert a1["rdma_served_bytes"] - a0["rdma_served_bytes"] == 64 * MIB


def test_relay_over_rdma_inline_ranges(cluster, tmp_path):
    # B's rdma-read-min above the object: every range B relays goes inline (PART).
    oid = b"relay-inline-%d" % os.getpid()
    db, dc = relay_through_b(cluster, tmp_path, oid, b"M7", 1 * MIB, 64 * KIB, 4 * MIB)
    assert dc["transfer_relay_follows"] >= 1, dc
    assert db["transfer_relayed"] >= 1, db
    assert db["rdma_served_inline"] >= 1 and db["rdma_served_rndv"] == 0, db
    assert dc["rdma_fetches"] == 1 and dc["transfer_downloaded_bytes"] == 1 * MIB, dc


def test_relay_over_rdma_range_rendezvous(cluster, tmp_path):
    # Ranges of 512 KiB land at B: each is at least rdma-read-min, so C reads it
    # through a key over exactly the landed bytes (RPART).
    oid = b"relay-rndv-%d" % os.getpid()
    db, dc = relay_through_b(cluster, tmp_path, oid, b"M8", 8 * MIB, 512 * KIB, DEFAULT_READ_MIN)
    assert dc["transfer_relay_follows"] >= 1, dc
    assert db["transfer_relayed"] >= 1, db
    assert db["rdma_served_rndv"] >= 1 and db["rdma_served_inline"] == 0, db
    assert dc["rdma_fetches"] == 1 and dc["transfer_downloaded_bytes"] == 8 * MIB, dc


def test_read_past_the_landed_bytes_fails_with_a_remote_access_error(cluster, tmp_path):
    b = cluster["B"]
    bc = b.client()
    oid = b"relay-past-%d" % os.getpid()
    data = payload(4 * MIB, 23)
    # The owner sends B the first 2 MiB, then nothing more.
    owner, port = slow_owner(tmp_path, b"M9", data, 1 * MIB, 0, stall_after=2 * MIB)
    dirc = directory(cluster)
    try:
        lure(dirc, b"M9", port, oid, data)
        before = stats(bc)
        t, got_b = fetch_in_background(b.client(), oid, 60000)
        read_until(owner, "stalled", 30)  # B has landed exactly 2 MiB and asks for more
        peer = start_hostile(rxe_addr(), b.rdma_port, "--mode", "rpart", "--id", oid.decode(),
                             "--secret", SECRET, "--name", "M10", "--dial", "B", "--seconds", 60)
        out, _ = peer.communicate(timeout=90)
        reads = read_statuses(out)
        # B's key covers its landed bytes only: 2 MiB from offset 0.
        assert "hostile: rpart offset=0 len=%d size=%d" % (2 * MIB, 4 * MIB) in out, out
        assert reads.get("inside") == "success", out
        assert "first=0x%02x" % data[0] in out, out
        # Past them, although the object (and the arena) goes on: refused by B's NIC.
        assert reads.get("past-landed") == "remote-access-error", out
        assert stats(bc)["transfer_relayed"] - before["transfer_relayed"] == 1
        # The owner goes away: B's fetch fails and leaves nothing behind; B is healthy.
        stop(owner)
        t.join(70)
        assert got_b and got_b[0][0] != "OK", got_b
        assert bc.execute_command("OBJ.EXISTS", oid) == 0
        assert bc.execute_command("PING") in (True, b"PONG")
    finally:
        stop(owner)
        unlure(dirc, b"M9", oid)


def test_rdma_fetch_resumes_at_its_offset_by_range_rendezvous(cluster, tmp_path):
    a, b = cluster["A"], cluster["B"]
    ac, bc = a.client(), b.client()
    oid = b"relay-resume-%d" % os.getpid()
    data = payload(4 * MIB, 29)
    # The owner sends B the first 2 MiB, then answers BUSY: B looks again.
    owner, port = slow_owner(tmp_path, b"M11", data, 1 * MIB, 0, 2 * MIB, "--stall-busy")
    dirc = directory(cluster)
    try:
        lure(dirc, b"M11", port, oid, data)
        a0, b0 = stats(ac), stats(bc)
        t, got_b = fetch_in_background(b.client(), oid, 120000)
        read_until(owner, "stalled", 30)
        put(a, ac, oid, data)  # a complete holder appears (and publishes itself)
        t.join(130)
        assert got_b == [["OK"]], got_b
        assert_same_object(b, bc, oid, data, b"")
        a1, b1 = stats(ac), stats(bc)
        # B went on from 2 MiB: A sent the rest only, by RPART, and B fetched no
        # byte twice.
        assert b1["transfer_range_resumes"] - b0["transfer_range_resumes"] >= 1
        assert b1["transfer_downloaded_bytes"] - b0["transfer_downloaded_bytes"] == 4 * MIB
        assert a1["rdma_served_rndv"] - a0["rdma_served_rndv"] == 1
        assert a1["rdma_served_bytes"] - a0["rdma_served_bytes"] == 2 * MIB
    finally:
        stop(owner)
        unlure(dirc, b"M11", oid)
