"""Serving spilled objects to other nodes (docs/tiers.md, "Serving a spilled object"):
the owner reads a spilled object's file once into a buffer that every concurrent
serving of it shares, the buffers of all spilled objects being served stay within
spill-serve-budget, and a serving counts as a pin of its connection's cap and takes
an upload slot like an object in memory.

The floods come from hand-made peers (WirePeer) that send their FETCHes and read
nothing until the owner has taken every request in: whatever the owner holds for them
then is in its RSS, which must stay within the budget (plus slack for the allocator
and the queues), not grow by one object per request. The assertions are on bytes
(VmRSS) and counters; a deadline only stops a hang.
"""

import os
import shutil
import struct
import tempfile
import threading

import pytest

from objhelpers import (
    MIB,
    WIRE_DATA,
    WIRE_ERR_NAMES,
    WIRE_ERROR,
    WIRE_FETCH,
    WirePeer,
    codes,
    fetch,
    info,
    stats,
    to_str,
    wait_until,
    wire_frame,
)
from test_spill import blob

SECRET = b"s3cret"
BUDGET = 8 * MIB
SLACK = 16 * MIB  # the allocator's rounding, queued frames, Redis itself
CONNS = 4
PER_CONN = 100  # 400 requests: under the per-connection cap of 256 each


@pytest.fixture
def spill_dir():
    d = tempfile.mkdtemp(prefix="objstore-spill-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def rss_bytes(node):
    with open(f"/proc/{node.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def spilling_node(cl, name, spill_dir, n, budget=BUDGET, extra=()):
    """Node name with a 16 MiB arena and a spill tier, holding objects name:0..n-1 of
    1 MiB (blob(i)); returns (node, ids of the spilled ones)."""
    node = cl.add_node(name, memory="16mb", extra_args=(
        "spill-dir", spill_dir, "spill-serve-budget", str(budget), *extra))
    c = node.client()
    ids = [b"%s:%d" % (name.encode(), i) for i in range(n)]
    for i, oid in enumerate(ids):
        assert c.obj("OBJ.PUT", oid, blob(i)) == b"OK", i
    spilled = [oid for oid in ids if to_str(info(c, oid)["tier"]) == "spilled"]
    return node, spilled


def answered(c, served0):
    """Requests the owner has taken in and answered or queued for the budget."""
    st = stats(c)
    return st["tcp_served"] - served0 + st.get("tier_serve_waiting", 0)


def flood(node, wanted):
    """CONNS peers, each sending FETCHes of wanted[k] (req ids 1..), reading nothing.
    Returns the peers and, per peer, req id -> id asked."""
    peers, asked = [], []
    for k in range(CONNS):
        p = WirePeer(node.transfer_port, timeout=60.0)
        p.handshake(SECRET)
        peers.append(p)
        asked.append({})
    for k, p in enumerate(peers):
        frames = []
        for i, oid in enumerate(wanted[k], start=1):
            asked[k][i] = oid
            frames.append(p.seal(wire_frame(WIRE_FETCH, struct.pack("<H", len(oid)) + oid,
                                            req_id=i)))
        p.send(b"".join(frames))
    return peers, asked


def read_all(peers, asked, expect):
    """Read every answer on every peer at once (a peer not read would hold the budget
    the others wait for); each must be DATA with the bytes expect(id)."""
    errors = []

    def reader(p, want):
        try:
            for _ in range(len(want)):
                t, fl, cr, rid, body = p.recv_frame()
                assert t == WIRE_DATA, f"request {rid}: frame type {t} {body!r:.80}"
                size, meta_size, _ = struct.unpack("<QQQ", body)
                data = p.recv_payload(size + meta_size)
                oid = want.pop(rid)
                assert data == expect(oid), f"request {rid} ({oid!r}): wrong bytes"
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(p, dict(a)), daemon=True)
               for p, a in zip(peers, asked)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a peer's answers never all came"
    assert not errors, errors


def index_of(oid):
    return int(oid.split(b":")[1])


def test_a_flood_of_fetches_of_one_spilled_object_holds_one_buffer(make_cluster, spill_dir):
    cl = make_cluster(names=("B",), layout="separate", memory="64mb")
    a_node, spilled = spilling_node(cl, "A", spill_dir, 24)
    a = a_node.client()
    oid = spilled[0]
    st0 = stats(a)
    assert st0["tier_serve_budget"] == BUDGET
    rss0 = rss_bytes(a_node)

    peers, asked = flood(a_node, [[oid] * PER_CONN] * CONNS)
    try:
        wait_until(lambda: answered(a, st0["tcp_served"]) >= CONNS * PER_CONN, 60,
                   what="the owner to take in every FETCH")
        grown = rss_bytes(a_node) - rss0
        assert grown < BUDGET + SLACK, (
            f"{CONNS * PER_CONN} FETCHes of one spilled 1 MiB object grew the owner by "
            f"{grown >> 20} MiB (budget {BUDGET >> 20} MiB)")
        st = stats(a)
        assert st["tier_serve_bytes"] <= BUDGET
        assert st["tier_serve_reads"] + st["tier_serve_shared"] >= CONNS * PER_CONN
        read_all(peers, asked, lambda o: blob(index_of(o)))
    finally:
        for p in peers:
            p.close()
    wait_until(lambda: stats(a)["tier_serve_bytes"] == 0, 30,
               what="the read buffer to go once every serving is sent")
    assert to_str(info(a, oid)["tier"]) == "spilled", "serving restored the object"
    b = cl["B"].client()
    assert codes(fetch(b, oid)) == ["OK"]
    assert b.obj("OBJ.GET", oid) == blob(index_of(oid))


def test_a_flood_over_many_spilled_objects_stays_within_the_budget(make_cluster, spill_dir):
    cl = make_cluster(names=("B",), layout="separate", memory="64mb")
    a_node, spilled = spilling_node(cl, "A", spill_dir, 56)
    a = a_node.client()
    assert len(spilled) >= 40
    spilled = spilled[:40]
    st0 = stats(a)
    rss0 = rss_bytes(a_node)

    # Each peer asks for every object in its own order, 100 requests: 10 of each object.
    wanted = [[spilled[(k * 7 + i) % len(spilled)] for i in range(PER_CONN)]
              for k in range(CONNS)]
    peers, asked = flood(a_node, wanted)
    try:
        wait_until(lambda: answered(a, st0["tcp_served"]) >= CONNS * PER_CONN, 60,
                   what="the owner to take in every FETCH")
        grown = rss_bytes(a_node) - rss0
        assert grown < BUDGET + MIB + SLACK, (
            f"{CONNS * PER_CONN} FETCHes of 40 spilled 1 MiB objects grew the owner by "
            f"{grown >> 20} MiB (budget {BUDGET >> 20} MiB)")
        st = stats(a)
        assert st["tier_serve_bytes"] <= BUDGET
        assert st["tier_serve_waiting"] > 0, "nothing waited: the flood never met the budget"
        read_all(peers, asked, lambda o: blob(index_of(o)))
    finally:
        for p in peers:
            p.close()
    st = stats(a)
    assert st["tier_serve_waits"] > 0
    wait_until(lambda: stats(a)["tier_serve_bytes"] == 0 and
               stats(a)["tier_serve_waiting"] == 0, 30, what="every buffer to go")


def test_a_damaged_spill_file_answers_every_waiting_request_and_frees_its_buffer(
        make_cluster, spill_dir):
    """Every request sharing a read of a damaged file gets an ERROR (not DATA, not a
    hang); the buffer goes; the other node's fetch fails over to nothing and says so."""
    cl = make_cluster(names=("B",), layout="separate", memory="64mb")
    a_node, spilled = spilling_node(cl, "A", spill_dir, 24)
    a = a_node.client()
    oid = spilled[0]
    path = to_str(stats(a)["tier_path"])
    for name in os.listdir(path):  # one byte flipped in every spill file
        if name.endswith(".spill"):
            with open(os.path.join(path, name), "r+b") as f:
                f.seek(4096)
                b = f.read(1)
                f.seek(4096)
                f.write(bytes([b[0] ^ 0xFF]))
    peers = []
    try:
        for _ in range(2):
            p = WirePeer(a_node.transfer_port, timeout=60.0)
            p.handshake(SECRET)
            peers.append(p)
        for p in peers:
            p.send(b"".join(p.seal(wire_frame(WIRE_FETCH, struct.pack("<H", len(oid)) + oid,
                                              req_id=i)) for i in range(1, 21)))
        for p in peers:
            seen = set()
            for _ in range(20):
                t, fl, cr, rid, body = p.recv_frame()
                assert t == WIRE_ERROR, f"request {rid}: frame type {t}, not ERROR"
                assert WIRE_ERR_NAMES.get(struct.unpack_from("<H", body)[0]) == "INTERNAL"
                seen.add(rid)
            assert seen == set(range(1, 21))
    finally:
        for p in peers:
            p.close()
    assert codes(fetch(cl["B"].client(), oid, timeout=5000)) != ["OK"]
    wait_until(lambda: stats(a)["tier_serve_bytes"] == 0, 30, what="the buffer to go")
    assert "serving a spilled object" in a_node.log()
    assert a.execute_command("PING") in (b"PONG", True)


@pytest.mark.parametrize("slots", [0, 1])
def test_concurrent_fetches_of_spilled_objects_by_several_nodes_are_byte_exact(
        make_cluster, spill_dir, slots):
    """Three nodes fetch the same spilled objects at once: with upload-slots 0 every
    copy comes from the owner's shared reads; with 1 the owner sends each to one node
    and names it as a relay to the others."""
    cl = make_cluster(names=("B", "C", "D"), layout="separate", memory="64mb")
    a_node, spilled = spilling_node(cl, "A", spill_dir, 24, extra=("upload-slots", str(slots)))
    a = a_node.client()
    ids = spilled[:6]
    got = {}
    calls = [threading.Thread(target=lambda n=n: got.__setitem__(n, fetch(cl[n].client(), *ids)),
                              daemon=True) for n in ("B", "C", "D")]
    for call in calls:
        call.start()
    for call in calls:
        call.join(60)
        assert not call.is_alive(), "a fetch never finished"
    for n in ("B", "C", "D"):
        assert codes(got[n]) == ["OK"] * len(ids), (n, got[n])
    for n in ("B", "C", "D"):
        c = cl[n].client()
        for oid in ids:
            assert c.obj("OBJ.GET", oid) == blob(index_of(oid)), (n, oid)
    for oid in ids:
        assert to_str(info(a, oid)["tier"]) == "spilled"
    wait_until(lambda: stats(a)["tier_serve_bytes"] == 0, 30, what="every buffer to go")


def test_spill_serve_budget_is_validated_and_shown(make_server, spill_dir):
    s = make_server(memory="16mb", module_args=("spill-dir", spill_dir,
                                                "spill-serve-budget", "32mb"))
    c = s.client()
    got = c.execute_command("CONFIG", "GET", "objstore.spill-serve-budget")
    assert [to_str(x) for x in got] == ["objstore.spill-serve-budget", str(32 * MIB)]
    assert stats(c)["tier_serve_budget"] == 32 * MIB


@pytest.mark.parametrize("value", ["0", "4kb", "abc", "-1mb"])
def test_bad_spill_serve_budget_refuses_the_start(make_server, spill_dir, value):
    s = make_server(memory="16mb", start=False,
                    module_args=("spill-dir", spill_dir, "spill-serve-budget", value))
    ready, log = s.try_start()
    if ready:
        s.stop()
    assert not ready, f"started with spill-serve-budget {value}; log:\n{log[-2000:]}"


def test_a_node_shuts_down_cleanly_while_spilled_objects_are_served(make_cluster, spill_dir):
    """Reads queued for the budget, buffers queued for peers that do not read, and the
    reader thread all go at shutdown (under ASan: nothing freed twice or used after)."""
    cl = make_cluster(names=("B",), layout="separate", memory="64mb")
    a_node, spilled = spilling_node(cl, "A", spill_dir, 40)
    a = a_node.client()
    wanted = [[spilled[(k * 5 + i) % len(spilled)] for i in range(PER_CONN)]
              for k in range(CONNS)]
    peers, _ = flood(a_node, wanted)
    try:
        wait_until(lambda: stats(a)["tier_serve_waiting"] > 0, 60,
                   what="requests to wait for the budget")
        problems = a_node.stop()
    finally:
        for p in peers:
            p.close()
    assert not problems, problems


def test_spilled_requests_count_against_the_connections_pin_cap(make_cluster, spill_dir):
    """A peer that sends 300 FETCHes of a spilled object and reads nothing is served
    256 of them (the per-connection cap; a few more as its socket buffers take some
    answers whole), the rest are left unread, as for an object in memory."""
    cl = make_cluster(names=("B",), layout="separate", memory="64mb")
    a_node, spilled = spilling_node(cl, "A", spill_dir, 24)
    a = a_node.client()
    oid = spilled[0]
    small = b"A:small"
    assert a.obj("OBJ.PUT", small, b"s" * 100) == b"OK"
    served0 = stats(a)["tcp_served"]
    peer = WirePeer(a_node.transfer_port, timeout=60.0)
    other = WirePeer(a_node.transfer_port, timeout=60.0)
    try:
        peer.handshake(SECRET)
        other.handshake(SECRET)
        peer.send(b"".join(peer.seal(wire_frame(WIRE_FETCH, struct.pack("<H", len(oid)) + oid,
                                                req_id=i)) for i in range(1, 301)))
        wait_until(lambda: stats(a)["tcp_served"] - served0 >= 256, 60,
                   what="the owner to serve up to the cap")
        # A barrier: the owner answered a request sent after all 300 were on their way,
        # so without the cap it would have taken in every one of them by now.
        answer = other.fetch(small, 1)
        assert answer[0] == "DATA" and answer[4] == b"s" * 100, answer[:3]
        taken = stats(a)["tcp_served"] - served0 - 1
        assert taken < 300, f"the owner took in all {taken} FETCHes of a peer that reads nothing"
    finally:
        peer.close()
        other.close()
