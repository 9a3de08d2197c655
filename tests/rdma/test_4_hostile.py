"""A hostile node on the RDMA transfer transport (tests/rdma/hostile/rdma_hostile.c: the
project's own stream, framer and wire code breaking one rule at a time). Each test fails
on a node without the matching defence:

- an ERROR for a request whose RDMA READs are in flight frees nothing until the NIC has
  let go of the object (the next allocation would otherwise be overwritten);
- connections that have not proved the cluster secret are capped per source (past the
  cap the oldest gives way to a newcomer), closed at the handshake deadline, and cost a
  small receive buffer, not the full 4 MiB one;
- every connection is kept alive, however many there are (more than 256);
- a peer that does not read cannot grow the node's send queue without bound, and one
  whose queue stops moving is closed;
- a peer that never says DONE holds at most the per-connection pin cap; the rest of its
  FETCHes are answered BUSY;
- the read key of a rendezvous opens that object only, on that connection only, until
  DONE: a READ after DONE or past the object's end fails with a remote access error, a
  connection that has not done the handshake cannot READ at all, and the node stays
  healthy throughout.

Runs before test_5_kill (which leaves nodes dead).
"""

import os
import subprocess
import time

import redis

from objhelpers import MIB, info, payload, stats, to_int, wait_until, xxh3_64
from objnodes import free_port, registry_key, rxe_addr
from rdmahelpers import put, put_published, read_object, timed_fetch, wait_unpinned

SECRET = "rdma-suite-secret"  # conftest.SECRET
PREAUTH_PER_SOURCE = 8  # module/transfer/rdmaproto.h RDMA_PREAUTH_MAX_PER_SOURCE
PINS_MAX = 256  # module/transfer/engineint.h ENGINE_CONN_PINS_MAX


def hostile_bin():
    build = os.environ.get("OBJSTORE_BUILD") or os.path.join(
        os.path.dirname(__file__), "..", "..", "build")
    return os.path.join(build, "tests", "rdma", "rdma_hostile")


def start_hostile(*args):
    return subprocess.Popen([hostile_bin(), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def read_until(proc, prefix, timeout):
    """The first stdout line of proc starting with 'hostile: ' + prefix (bounded)."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip())
        if line.startswith("hostile: " + prefix):
            return line
    raise AssertionError(f"no 'hostile: {prefix}' line within {timeout}s; saw {seen}")


def fields(line):
    return {k: int(v) for k, v in (w.split("=") for w in line.split() if "=" in w)}


def summary(proc, timeout):
    out, _ = proc.communicate(timeout=timeout)
    lines = [l for l in out.splitlines() if l.startswith("hostile: summary")]
    assert lines, f"rdma_hostile printed no summary:\n{out}"
    return fields(lines[-1]), out


def connected_summary(args, timeout, attempts=3):
    """Run the hostile peer with args to its summary, starting it again (at most
    attempts times, 5 s apart) when it could not connect at all: on a loaded guest the
    node may still be tearing down the queue pairs of the test before and refuse a new
    one for a moment. The verdict is what happens once connected, never whether the
    first connect made it."""
    for attempt in range(attempts):
        out, _ = start_hostile(*args).communicate(timeout=timeout)
        if "fatal=connect" not in out or attempt == attempts - 1:
            break
        time.sleep(5)
    lines = [l for l in out.splitlines() if l.startswith("hostile: summary")]
    assert lines, f"rdma_hostile printed no summary:\n{out}"
    return fields(lines[-1]), out


def directory(cluster):
    return redis.Redis(host="127.0.0.1", port=cluster.dir.port)


def register_fake(dirc, name, port):
    """A node that exists only in the directory, reachable over RDMA at the hostile peer."""
    key = b"objstore:node:" + name
    dirc.execute_command("HSET", key, "addr", rxe_addr(), "tcp_port", 0, "rdma_addr", rxe_addr(),
                         "rdma_port", port, "features", 3, "heartbeat_ms", int(time.time() * 1000))
    dirc.execute_command("PEXPIRE", key, 120000)
    dirc.execute_command("SADD", registry_key(name), name)


def vm_pinned_kb(node):
    with open(f"/proc/{node.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmPin:"):
                return int(line.split()[1])
    raise AssertionError("no VmPin in /proc/PID/status")


def test_error_during_rdma_reads_frees_nothing_under_the_nic(cluster, uid):
    # As large as B's free arena allows: the later READ chunks land seconds after the
    # ERROR, long after a new object has taken the space (the guest reads ~40 MB/s).
    b = cluster["B"].client()
    st = stats(b)
    size = min(64 * MIB, st["arena_largest_free"] // MIB * MIB - 8 * MIB)
    assert size >= 16 * MIB, st
    port = free_port(rxe_addr())
    peer = start_hostile(rxe_addr(), port, "--mode", "rndv-error", "--secret", SECRET,
                         "--name", "M1", "--size", size, "--seconds", 120)
    dirc = directory(cluster)
    oid = uid(b"lured")
    try:
        read_until(peer, "ready", 30)
        register_fake(dirc, b"M1", port)
        dirc.execute_command("SADD", b"objstore:{" + oid + b"}:loc", b"M1")
        dirc.execute_command("HSET", b"objstore:{" + oid + b"}:meta", "size", size,
                             "meta_size", 0, "checksum", "%016x" % xxh3_64(b"\xee" * size))
        victim, data = uid(b"victim"), payload(size, 6)  # made before: it takes a while
        before = stats(b)
        res = b.execute_command("OBJ.FETCH", oid, "VIA", "rdma", "TIMEOUT", 120000)
        assert res[0] != b"OK", res
        read_until(peer, "rndv-error", 5)
        # What B allocates next takes the space the fetch had: it must keep its bytes.
        put(cluster["B"], b, victim, data)
        time.sleep(5)  # longer than the hostile READs take in the guest
        assert read_object(cluster["B"], b, victim)[0] == data, (
            "an object allocated after the failed fetch was overwritten by its RDMA READs")
        after = stats(b)
        assert after["objects_created"] == before["objects_created"]
        assert b.execute_command("OBJ.EXISTS", oid) == 0
        assert "while its RDMA reads are in flight" in cluster["B"].log()
        b.execute_command("OBJ.DEL", victim)
    finally:
        peer.kill()
        peer.communicate()
        dirc.execute_command("DEL", b"objstore:node:M1", b"objstore:{" + oid + b"}:loc",
                             b"objstore:{" + oid + b"}:meta")
        dirc.execute_command("SREM", registry_key(b"M1"), b"M1")


def test_unauthenticated_rdma_connections_are_capped_and_get_small_buffers(cluster):
    a = cluster["A"]
    refused0 = stats(a.client())["transfer_refused_connections"]
    pinned0 = vm_pinned_kb(a)
    assert pinned0 > 0, "VmPin does not show the registered arena: this check cannot work here"
    count = PREAUTH_PER_SOURCE + 4
    peer = start_hostile(rxe_addr(), a.rdma_port, "--mode", "silent", "--count", count,
                         "--seconds", 12)
    time.sleep(3)  # established, silent, before the handshake deadline
    pinned = vm_pinned_kb(a)
    got, out = summary(peer, 60)
    assert got["accepted"] + got["rejected"] == count, out
    # Past the cap the oldest gives way, so a newcomer (a real node sharing the address)
    # always gets in: more than the cap were accepted, never more than the cap at once.
    assert got["accepted"] > PREAUTH_PER_SOURCE, out
    # Each silent connection costs a 64 KiB receive buffer, not the 4 MiB one.
    assert pinned - pinned0 < 2048, (
        f"{got['accepted']} unauthenticated connections pinned {pinned - pinned0} KiB")
    # None of them lives past the handshake deadline (5 s).
    assert got["disconnected"] == got["accepted"], out
    assert "too many RDMA connections in handshake from this address" in a.log()
    refused = stats(a.client())["transfer_refused_connections"] - refused0
    assert refused >= got["rejected"] + got["accepted"], (refused, got)  # evicted + timed out
    assert a.client().execute_command("PING") in (True, b"PONG")


def test_every_rdma_connection_is_kept_alive_past_256(cluster):
    """More authenticated RDMA connections than the 256 an earlier tick took in turn: after
    they all fell silent (the peer's own keepalives off), the node's periodic pass must
    still send each one a keepalive (and would find a dead one)."""
    a = cluster["A"]
    count = 272
    peer = start_hostile(rxe_addr(), a.rdma_port, "--mode", "many-idle", "--count", count,
                         "--secret", SECRET, "--name", "K", "--dial", "A", "--seconds", 10)
    out, _ = peer.communicate(timeout=900)
    lines = [l for l in out.splitlines() if l.startswith("hostile: idle ")]
    assert lines, f"rdma_hostile did not finish:\n{out[-3000:]}"
    got = fields(lines[-1])
    assert got["connections"] == count and got["closed"] == 0, out[-3000:]
    missed = [l for l in out.splitlines() if l.startswith("hostile: no-keepalive=")]
    assert got["kept-alive"] == count, f"{count - got['kept-alive']} never kept alive: {missed[:20]}"
    assert a.client().execute_command("PING") in (True, b"PONG")


def test_peer_that_does_not_read_cannot_grow_the_send_queue(cluster):
    a = cluster["A"]
    got, out = connected_summary((rxe_addr(), a.rdma_port, "--mode", "no-read", "--count", 0,
                                  "--secret", SECRET, "--name", "M2", "--dial", "A",
                                  "--seconds", 90), 120)
    assert "authenticated=1" in out, out
    assert got["disconnected"] == 1, f"the node kept queueing for a peer that does not read:\n{out}"
    assert "wait for a peer that does not read" in a.log()
    assert a.client().execute_command("PING") in (True, b"PONG")


def test_peer_whose_queue_stops_moving_is_closed(cluster):
    a = cluster["A"]
    # Enough PINGs to fill the peer's 64 KiB receive buffer with PONGs (16 bytes each)
    # and queue a few thousand more, far below the queue's byte cap: only the stall
    # check can end it.
    got, out = connected_summary((rxe_addr(), a.rdma_port, "--mode", "no-read", "--count", 8000,
                                  "--secret", SECRET, "--name", "M3", "--dial", "A",
                                  "--seconds", 60), 90)
    assert "authenticated=1" in out, out
    assert got["disconnected"] == 1, f"a stalled RDMA send queue was never closed:\n{out}"
    assert "peer read nothing of its queued frames" in a.log()


def test_rendezvous_pins_are_capped_per_connection(cluster):
    a = cluster["A"]
    ac = a.client()
    oid = b"hostile-pins-%d" % os.getpid()  # printable: it goes on a command line
    put_published(a, ac, oid, payload(4 * MIB, 2))
    peer = start_hostile(rxe_addr(), a.rdma_port, "--mode", "rndv-flood", "--id",
                         oid.decode("latin-1"), "--secret", SECRET, "--name", "M4", "--dial", "A",
                         "--seconds", 90)
    try:
        done = fields(read_until(peer, "flood-done", 80))
        pins = to_int(info(ac, oid)["pins"])
        assert done["rndvs"] <= PINS_MAX and pins <= PINS_MAX, (done, pins)
        assert done["busy"] == 400 - done["rndvs"], done
    finally:
        peer.kill()
        peer.communicate()
    wait_unpinned(ac, oid, timeout=30)
    ac.execute_command("OBJ.DEL", oid)


def read_statuses(out):
    """{'inside': status, ...} from the scoped mode's 'hostile: read' lines."""
    got = {}
    for line in out.splitlines():
        if line.startswith("hostile: read "):
            f = dict(w.split("=", 1) for w in line.split()[2:])
            got[f["what"]] = f["status"]
    return got


def test_read_key_opens_one_object_on_one_connection_until_done(cluster):
    a, b = cluster["A"], cluster["B"]
    ac = a.client()
    oid = b"hostile-scoped-%d" % os.getpid()
    data = payload(1 * MIB, 9)
    put_published(a, ac, oid, data)
    peer = start_hostile(rxe_addr(), a.rdma_port, "--mode", "scoped", "--id",
                         oid.decode("latin-1"), "--secret", SECRET, "--name", "M5", "--dial", "A",
                         "--seconds", 60)
    got, out = summary(peer, 90)
    reads = read_statuses(out)
    # The key works for the object, on the connection it was given to, while the
    # transfer lasts (the first byte read is the object's).
    assert reads.get("inside") == "success", out
    assert "first=0x%02x" % data[0] in out, out
    # After DONE the window is invalidated: the same READ is refused by the node's NIC.
    assert reads.get("after-done") == "remote-access-error", out
    # Past the object's end: refused, although the arena goes on behind it.
    assert reads.get("past-end") == "remote-access-error", out
    # A connection that has not done the handshake cannot READ, even with a live key.
    assert reads.get("preauth") not in (None, "success", "none"), out
    # The node is healthy: it answers, its pins are back, and a normal fetch works.
    assert ac.execute_command("PING") in (True, b"PONG")
    wait_unpinned(ac, oid, timeout=30)
    bc = b.client()
    res, _ = timed_fetch(bc, oid)
    assert res == ["OK"], res
    assert read_object(b, bc, oid)[0] == data
    bc.execute_command("OBJ.DEL", oid)
    ac.execute_command("OBJ.DEL", oid)
