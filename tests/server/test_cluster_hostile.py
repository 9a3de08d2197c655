"""The transfer port against peers that are not well-behaved nodes, and a Python peer
that is one: a hand-written implementation of module/transfer/wire.h (HELLO, AUTH with
HMAC-SHA256 proofs, FETCH -> DATA/ERROR) proves the protocol from the outside.

Every hostile connection must be dropped (the socket reads EOF within a bound) and
counted: in transfer_bad_frames when it sent something wrong, in
transfer_refused_connections (and not as a bad frame) when it only came when there was no
room or took too long to authenticate. The node must stay healthy: it answers PING and a
real fetch from another node still works.
"""

import os
import socket
import struct
import threading
import time

import pytest
from redis.exceptions import ResponseError

from objhelpers import (
    WIRE_AUTH,
    WIRE_DATA,
    WIRE_DONE,
    WIRE_ERROR,
    WIRE_FETCH,
    WIRE_HELLO,
    WIRE_PING,
    WIRE_PONG,
    WIRE_ROLE_ACCEPTOR,
    WIRE_HDR,
    WirePeer,
    codes,
    err_code,
    fetch,
    info,
    payload,
    sha256,
    start_call,
    stats,
    to_int,
    wait_locations,
    wait_until,
    wire_frame,
    wire_hello_body,
    wire_proof,
    xxh3_64,
)
from objnodes import free_port, registry_key

SECRET = b"s3cret"
DROP_WITHIN = 60.0  # bounds the wait for the node to close a hostile connection (a hang)


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B"), layout="own", memory="64mb", secret="s3cret")


def put(client, oid, data, meta=b"m"):
    assert client.execute_command("OBJ.PUT", oid, data, "META", meta) == b"OK"


def assert_healthy(cl, uid):
    """A answers PING, and B can still fetch a fresh object from A."""
    a, b = cl["A"].client(), cl["B"].client()
    assert a.execute_command("PING") == b"PONG"
    oid = uid(b"health")
    data = payload(256 * 1024, 11)
    put(a, oid, data)
    wait_locations(b, oid, ["A"])
    assert fetch(b, oid) == ["OK"]
    assert sha256(b.execute_command("OBJ.GET", oid)) == sha256(data)
    for x in (a, b):
        x.execute_command("OBJ.DEL", oid)


# ---- hostile inputs: each function misbehaves on a fresh connection ------------------------

def garbage(peer):
    peer.send(b"GET / HTTP/1.1\r\nHost: objstore\r\n\r\n" + os.urandom(200))


def oversized_body_len(peer):
    peer.send(wire_frame(WIRE_HELLO, b"", body_len=0x7FFFFFF0))


def body_too_long_for_type(peer):
    peer.send(wire_frame(WIRE_AUTH, bytes(33)))


def hello_wrong_magic(peer):
    peer.send(wire_frame(WIRE_HELLO, wire_hello_body(peer.nonce, magic=0x48545450)))


def hello_wrong_version(peer):
    peer.send(wire_frame(WIRE_HELLO, wire_hello_body(peer.nonce, version=9)))


def nonzero_flags(peer):
    peer.send(wire_frame(WIRE_HELLO, wire_hello_body(peer.nonce), flags=1))


def auth_before_hello(peer):
    peer.send(wire_frame(WIRE_AUTH, bytes(32)))


def fetch_before_hello(peer):
    peer.send(wire_frame(WIRE_FETCH, struct.pack("<H", 1) + b"k", req_id=1))


def fetch_before_auth(peer):
    peer.send_hello()
    peer.recv_hello()
    peer.send(wire_frame(WIRE_FETCH, struct.pack("<H", 1) + b"k", req_id=1))


def wrong_secret_auth(peer):
    peer.send_hello()
    peer.recv_hello()
    peer.send_auth(b"not-the-secret")


def all_zero_auth(peer):
    peer.send_hello()
    peer.recv_hello()
    peer.send(wire_frame(WIRE_AUTH, bytes(32)))


def hello_with_the_nodes_own_name(peer):
    peer.send_hello(name=b"A")


def second_hello(peer):
    peer.send_hello()
    peer.recv_hello()
    peer.send_hello()


def fetch_with_request_id_zero(peer):
    peer.handshake(SECRET)
    peer.send_frame(wire_frame(WIRE_FETCH, struct.pack("<H", 1) + b"k", req_id=0))


def fetch_id_length_mismatch(peer):
    peer.handshake(SECRET)
    peer.send_frame(wire_frame(WIRE_FETCH, struct.pack("<H", 9) + b"k", req_id=5))


def unsolicited_data(peer):
    peer.handshake(SECRET)
    peer.send_frame(wire_frame(WIRE_DATA, struct.pack("<QQQ", 1 << 20, 0, 0), req_id=77))


HOSTILE = [garbage, oversized_body_len, body_too_long_for_type, hello_wrong_magic,
           hello_wrong_version, nonzero_flags, auth_before_hello, fetch_before_hello,
           fetch_before_auth, wrong_secret_auth, all_zero_auth, hello_with_the_nodes_own_name,
           second_hello,
           fetch_with_request_id_zero, fetch_id_length_mismatch, unsolicited_data]


@pytest.mark.parametrize("misbehave", HOSTILE, ids=[f.__name__ for f in HOSTILE])
def test_hostile_peer_is_dropped_and_counted(cl, uid, misbehave):
    a = cl["A"].client()
    a0 = stats(a)
    peer = WirePeer(cl["A"].transfer_port)
    try:
        misbehave(peer)
        assert peer.closed_within(DROP_WITHIN), (
            f"{misbehave.__name__}: connection still open after {DROP_WITHIN}s")
    finally:
        peer.close()
    a1 = stats(a)
    assert a1["transfer_bad_frames"] > a0["transfer_bad_frames"], (
        f"{misbehave.__name__}: transfer_bad_frames stayed {a0['transfer_bad_frames']}")
    assert a1["tcp_served"] == a0["tcp_served"], "nothing may be served to it"
    assert_healthy(cl, uid)


def test_wrong_secret_auth_gets_error_auth_before_the_close(cl):
    peer = WirePeer(cl["A"].transfer_port)
    try:
        peer.send_hello()
        peer.recv_hello()
        peer.send_auth(b"guess")
        t, _, _, rid, body = peer.recv_frame()
        assert t == WIRE_ERROR and rid == 0, (t, rid, body)
        code, n = struct.unpack_from("<HH", body)
        assert code == 4, f"expected ERROR code AUTH (4), got {code}: {body[4:4 + n]!r}"
        assert peer.closed_within(DROP_WITHIN)
    finally:
        peer.close()
    assert "failed the cluster-secret proof" in cl["A"].log()


def test_peer_that_sends_nothing_does_not_block_others(cl, uid):
    idle = [WirePeer(cl["A"].transfer_port) for _ in range(5)]
    half = WirePeer(cl["A"].transfer_port)
    try:
        half.send(wire_frame(WIRE_HELLO, wire_hello_body(half.nonce))[:20])  # partial frame
        assert_healthy(cl, uid)
    finally:
        for p in idle + [half]:
            p.close()


def test_python_peer_speaks_the_protocol(cl, uid):
    """Full handshake with the right secret, then FETCH over one connection: DATA with
    the right sizes, checksum and bytes; ERROR NOTFOUND for a missing id; PING/PONG."""
    a = cl["A"].client()
    objs = {uid(b"small"): (b"hello wire", b"meta"),
            uid(b"empty"): (b"", b""),
            uid(b"big"): (payload(3 << 20, 4), b"\x00shape=3x1M")}
    for oid, (data, meta) in objs.items():
        put(a, oid, data, meta)
    a0 = stats(a)
    peer = WirePeer(cl["A"].transfer_port)
    try:
        peer.handshake(SECRET)
        assert peer.peer_name == b"A"
        for i, (oid, (data, meta)) in enumerate(objs.items(), start=1):
            kind, size, meta_size, checksum, body = peer.fetch(oid, req_id=1000 + i)
            assert kind == "DATA"
            assert (size, meta_size) == (len(data), len(meta))
            assert body == data + meta
            assert checksum == xxh3_64(data + meta)
        kind, code, text = peer.fetch(uid(b"missing"), req_id=99)
        assert (kind, code) == ("ERROR", "NOTFOUND"), (kind, code, text)
        peer.send_frame(wire_frame(WIRE_PING, req_id=5))
        t, _, _, rid, body = peer.recv_frame()
        assert (t, rid, body) == (WIRE_PONG, 5, b"")
        peer.send_frame(wire_frame(WIRE_DONE, req_id=1001))  # harmless on TCP
        peer.send_frame(wire_frame(WIRE_PING, req_id=6))
        assert peer.recv_frame()[0] == WIRE_PONG, "the node must keep the session after DONE"
    finally:
        peer.close()
    a1 = stats(a)
    assert a1["tcp_served"] - a0["tcp_served"] == len(objs)
    assert a1["tcp_served_bytes"] - a0["tcp_served_bytes"] == sum(
        len(d) + len(m) for d, m in objs.values())
    assert a1["transfer_bad_frames"] == a0["transfer_bad_frames"]
    # The served objects are not left pinned once their bytes are sent.
    for oid in objs:
        wait_until(lambda: to_int(info(a, oid)["pins"]) == 0, 5.0, what="pins released")
        assert a.execute_command("OBJ.DEL", oid) == b"OK"


def test_peer_closing_mid_payload_releases_the_pin(cl, uid):
    a = cl["A"].client()
    put(a, uid, payload(32 << 20, 2))
    peer = WirePeer(cl["A"].transfer_port)
    try:
        peer.handshake(SECRET)
        peer.send_frame(wire_frame(WIRE_FETCH, struct.pack("<H", len(uid)) + uid, req_id=3))
        t, _, _, rid, body = peer.recv_frame()
        assert t == WIRE_DATA
        peer.recv_exact(1 << 20)  # a little of its payload, then vanish
    finally:
        peer.close()
    wait_until(lambda: to_int(info(a, uid)["pins"]) == 0, 5.0,
               what="the source's pin to go after the peer closed mid-payload")
    assert a.execute_command("OBJ.DEL", uid) == b"OK"
    assert_healthy(cl, uid)


def test_node_with_another_secret_cannot_fetch(make_cluster, uid):
    cl = make_cluster(names=("A", "B"), layout="separate", memory="32mb", secret="s3cret")
    d = cl.add_node("D", secret="other-secret")
    a, dc = cl["A"].client(), d.client()
    put(a, uid, payload(1 << 20, 8), b"secret stuff")
    wait_locations(dc, uid, ["A"])
    a0, d0 = stats(a), stats(dc)

    # Refused, not timed out: the long TIMEOUT only bounds a hang.
    res = fetch(dc, uid, timeout=600000)
    assert codes(res)[0] not in ("OK", "TIMEOUT"), res

    # A learns of the refusal from D's ERROR frame, which may land after D has answered.
    def refusal_seen():
        log = cl["A"].log()
        return (stats(a)["transfer_bad_frames"] > a0["transfer_bad_frames"]
                or "cluster-secret" in log or "authenticat" in log.lower())
    try:
        wait_until(refusal_seen, timeout=5.0, what="A to see the refused session")
    except AssertionError:
        pass  # reported with its details below
    a1, d1 = stats(a), stats(dc)
    assert dc.execute_command("OBJ.EXISTS", uid) == 0
    assert d1["objects_created"] == 0 and d1["arena_used"] == d0["arena_used"]
    assert d1["tcp_fetches"] == d0["tcp_fetches"] and d1["tcp_fetch_bytes"] == 0
    assert a1["tcp_served"] == a0["tcp_served"] and a1["tcp_served_bytes"] == a0["tcp_served_bytes"]
    log = cl["A"].log()
    counted = a1["transfer_bad_frames"] > a0["transfer_bad_frames"]
    logged = "cluster-secret" in log or "authenticat" in log.lower()
    assert counted or logged, (
        f"the serving node neither counted (transfer_bad_frames {a0['transfer_bad_frames']} -> "
        f"{a1['transfer_bad_frames']}) nor logged the failed authentication; D got {res}")
    # The nodes with the right secret are unaffected.
    b = cl["B"].client()
    assert fetch(b, uid) == ["OK"]


# ---- the handshake binds the whole transcript ----------------------------------------------

class FakeNode:
    """A node that exists only in the directory: someone who can write the directory
    Redis registers `name` at a Python listener and lists it as the holder of an object,
    so that a real node's OBJ.FETCH dials the listener."""

    def __init__(self, directory_client, name=b"M"):
        self.dir = directory_client
        self.name = name
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.keys = [b"objstore:node:" + name]
        self.dir.execute_command(
            "HSET", b"objstore:node:" + name, "addr", "127.0.0.1", "tcp_port", self.port,
            "rdma_addr", "", "rdma_port", 0, "features", 1,
            "heartbeat_ms", int(time.time() * 1000))
        self.dir.execute_command("PEXPIRE", b"objstore:node:" + name, 60000)
        self.dir.execute_command("SADD", registry_key(name), name)

    def holds(self, oid, data):
        """List this fake node as the only location of oid (of data's size)."""
        loc, meta = b"objstore:{" + oid + b"}:loc", b"objstore:{" + oid + b"}:meta"
        self.keys += [loc, meta]
        self.dir.execute_command("SADD", loc, self.name)
        self.dir.execute_command("HSET", meta, "size", len(data), "meta_size", 0,
                                 "checksum", "%016x" % xxh3_64(data))

    def accept(self, timeout=5.0):
        """The connection a real node opened to this fake one."""
        self.listener.settimeout(timeout)
        conn, _ = self.listener.accept()
        conn.settimeout(timeout)
        return conn

    def close(self):
        self.listener.close()
        self.dir.execute_command("SREM", registry_key(self.name), self.name)
        self.dir.execute_command("DEL", *self.keys)


def recv_raw_frame(sock):
    """One frame from a socket as (type, body, raw bytes); None if it closed first."""
    head = b""
    while len(head) < WIRE_HDR.size:
        chunk = sock.recv(WIRE_HDR.size - len(head))
        if not chunk:
            return None
        head += chunk
    t, _, _, n, _ = WIRE_HDR.unpack(head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return t, body, head + body


def recv_raw_frame_or_none(sock):
    try:
        return recv_raw_frame(sock)
    except (ConnectionResetError, socket.timeout):
        return None


def hello_fields(body):
    """(features, nonce, proof, name) of a HELLO body."""
    (features,) = struct.unpack_from("<H", body, 6)
    (name_len,) = struct.unpack_from("<H", body, 56)
    return features, body[8:24], body[24:56], body[58:58 + name_len]


def test_hello_claiming_the_nodes_own_name_is_refused(cl):
    peer = WirePeer(cl["A"].transfer_port, name=b"A")
    try:
        peer.send_hello()
        assert peer.closed_within(DROP_WITHIN), "A accepted a HELLO that claims to be A"
    finally:
        peer.close()
    assert "own name" in cl["A"].log()


def test_relayed_proofs_do_not_authenticate(cl, uid):
    """The attack: register a fake node M, make B fetch from it, open a second session
    to A and reflect each side's HELLO and AUTH across the two sessions. With proofs
    over the nonces only, B vouches for the attacker to A without either secret being
    known; with proofs over the transcript (names, dialled name, direction) each
    relayed proof is checked against another transcript and fails."""
    a, b = cl["A"].client(), cl["B"].client()
    secret_oid = uid(b"secret")
    put(a, secret_oid, b"only for nodes with the cluster secret")
    bait = uid(b"bait")
    fake = FakeNode(a, b"M")  # A's own Redis is the directory (layout "own")
    relay_a = from_b = None
    try:
        fake.holds(bait, b"x" * 100)
        call = start_call(cl["B"].client(), "OBJ.FETCH", bait, "TIMEOUT", 8000)
        from_b = fake.accept()
        first = recv_raw_frame(from_b)
        assert first and first[0] == WIRE_HELLO, f"B's first frame: {first!r:.100}"

        # Session 2: to A, as B (B's HELLO verbatim: its nonce, name and features).
        relay_a = WirePeer(cl["A"].transfer_port)
        relay_a.send(first[2])
        got = recv_raw_frame_or_none(relay_a.sock)
        assert got and got[0] == WIRE_HELLO, f"A's answer to the relayed HELLO: {got!r:.100}"
        features, nonce, proof, _ = hello_fields(got[1])
        # Back to B as M, with A's nonce and proof: the name must be the one B dialled.
        from_b.sendall(wire_frame(WIRE_HELLO, wire_hello_body(nonce, b"M", proof, features)))
        auth = recv_raw_frame_or_none(from_b)
        served = None
        if auth and auth[0] == WIRE_AUTH:
            relay_a.send(auth[2])
            relay_a.send(wire_frame(WIRE_FETCH, struct.pack("<H", len(secret_oid)) + secret_oid,
                                    req_id=9))
            served = recv_raw_frame_or_none(relay_a.sock)
        assert not (served and served[0] == WIRE_DATA), (
            "relayed proofs authenticated the attacker: A served an object on a session "
            "nobody with the secret opened")
        assert auth is None or auth[0] != WIRE_AUTH, "B sent AUTH after a relayed HELLO"
        from_b.close()
        assert codes([to_str_err(call)])[0] != "OK"
    finally:
        for sock in (relay_a, from_b):
            if sock:
                sock.close()
        fake.close()
    assert "failed the cluster-secret proof" in cl["B"].log()
    a.execute_command("OBJ.DEL", secret_oid)
    assert_healthy(cl, uid)


def to_str_err(call):
    """The first per-id result of a start_call(OBJ.FETCH ...) as text."""
    try:
        reply = call.result(15.0)
    except ResponseError as e:
        return str(e)
    r = reply[0]
    return str(r) if isinstance(r, Exception) else r.decode()


def test_acceptor_answering_with_another_name_than_dialled_is_refused(cl, uid):
    """B dials M2; whoever answers says it is N, with a proof that is right for that
    transcript: B must not go on (the proof may be fine, the peer is not who B meant)."""
    bait = uid(b"bait")
    fake = FakeNode(cl["A"].client(), b"M2")
    from_b = None
    try:
        fake.holds(bait, b"y" * 100)
        call = start_call(cl["B"].client(), "OBJ.FETCH", bait, "TIMEOUT", 8000)
        from_b = fake.accept()
        first = recv_raw_frame(from_b)
        assert first and first[0] == WIRE_HELLO
        b_features, b_nonce, _, b_name = hello_fields(first[1])
        nonce = os.urandom(16)
        proof = wire_proof(SECRET, WIRE_ROLE_ACCEPTOR, b_name, b"N", b"M2", b_features, 1,
                           b_nonce, nonce)
        from_b.sendall(wire_frame(WIRE_HELLO, wire_hello_body(nonce, b"N", proof, 1)))
        answer = recv_raw_frame_or_none(from_b)
        from_b.close()
        assert answer is None or answer[0] == WIRE_ERROR, (
            f"B went on with a peer that answered as N when it dialled M2: frame {answer[0]}")
        assert codes([to_str_err(call)])[0] != "OK"
    finally:
        if from_b:
            from_b.close()
        fake.close()
    log = cl["B"].log()
    assert "'N'" in log and "dialled" in log, "B did not log why it refused the peer"


# ---- an empty cluster secret ---------------------------------------------------------------

def test_empty_secret_on_a_non_loopback_bind_refuses_transfers(make_server, uid):
    tport = free_port("0.0.0.0")
    s = make_server(module_args=("transfer-bind", "0.0.0.0", "transfer-port", str(tport)))
    c = s.client()
    put(c, uid, b"local objects still work")
    assert c.execute_command("OBJ.GET", uid) == b"local objects still work"
    with pytest.raises(ResponseError) as e:
        c.execute_command("OBJ.FETCH", uid(b"elsewhere"))
    assert err_code(e.value) == "UNAVAILABLE" and "cluster-secret" in str(e.value), str(e.value)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", tport), timeout=2).close()
    log = s.log()
    assert "cluster-secret" in log and "0.0.0.0" in log and "refus" in log, log[-2000:]


def test_empty_secret_on_loopback_logs_a_warning(make_server, uid):
    s = make_server(module_args=("transfer-port", str(free_port())))
    c = s.client()
    assert codes(fetch(c, uid)) == ["NOTFOUND"]  # transfers run
    assert "cluster-secret is empty" in s.log()


# ---- unauthenticated connections: deadline and caps -----------------------------------------

HANDSHAKE_DEADLINE = 5.0  # module/transfer: a session must be up this soon after accept
HANDSHAKE_PER_SOURCE = 16  # connections in handshake allowed from one address


def test_silent_connection_is_closed_at_the_handshake_deadline(cl):
    a = cl["A"].client()
    a0 = stats(a)
    peer = WirePeer(cl["A"].transfer_port)
    try:
        t0 = time.monotonic()
        assert peer.closed_within(HANDSHAKE_DEADLINE + 60.0), (
            "a connection that never says HELLO stays open")
        assert time.monotonic() - t0 > HANDSHAKE_DEADLINE - 1.0, "closed before the deadline"
    finally:
        peer.close()
    a1 = stats(a)
    assert a1["transfer_refused_connections"] > a0["transfer_refused_connections"]
    assert a1["transfer_bad_frames"] == a0["transfer_bad_frames"], "a silent peer sent no bad frame"
    assert "handshake" in cl["A"].log()


def test_half_hello_is_closed_at_the_handshake_deadline(cl):
    a = cl["A"].client()
    a0 = stats(a)
    peer = WirePeer(cl["A"].transfer_port)
    try:
        peer.send_hello()
        peer.recv_hello()  # and then no AUTH
        assert peer.closed_within(HANDSHAKE_DEADLINE + 60.0)
    finally:
        peer.close()
    a1 = stats(a)
    assert a1["transfer_refused_connections"] > a0["transfer_refused_connections"]
    assert a1["transfer_bad_frames"] == a0["transfer_bad_frames"]


def test_connections_over_the_per_source_cap_are_closed(make_cluster, uid):
    """Many silent connections from one address: the ones over the cap are closed at
    once (not at the deadline), while a real node (another source address) fetches."""
    cl = make_cluster(names=("A", "B"), layout="own", memory="64mb", secret="s3cret")
    a, b = cl["A"].client(), cl["B"].client()
    a0 = stats(a)
    n = HANDSHAKE_PER_SOURCE * 3
    flood = [WirePeer(cl["A"].transfer_port, source="127.0.0.2") for _ in range(n)]
    try:
        closed = sum(1 for p in flood if p.closed_within(0.05))
        deadline = time.monotonic() + 2.0
        while closed < n - HANDSHAKE_PER_SOURCE and time.monotonic() < deadline:
            closed = sum(1 for p in flood if p.closed_within(0.02))
        assert closed >= n - HANDSHAKE_PER_SOURCE, (
            f"{n} connections in handshake from one address: only {closed} closed")
        data = payload(512 * 1024, 5)
        put(a, uid, data)
        wait_locations(b, uid, ["A"])
        assert fetch(b, uid) == ["OK"]
        assert sha256(b.execute_command("OBJ.GET", uid)) == sha256(data)
    finally:
        for p in flood:
            p.close()
    a1 = stats(a)
    refused = a1["transfer_refused_connections"] - a0["transfer_refused_connections"]
    assert refused >= n - HANDSHAKE_PER_SOURCE, f"{refused} refusals counted"
    assert a1["transfer_bad_frames"] == a0["transfer_bad_frames"], "silent peers sent no bad frame"
    assert "127.0.0.2" in cl["A"].log()


def test_idle_connections_from_a_nodes_address_do_not_lock_it_out(make_cluster, uid):
    """More idle connections than the per-source cap, from the very address a real node
    dials from (nodes on one host share it): the node's session still comes up, because
    the oldest unproved connection gives way to a newcomer, and its fetch works."""
    cl = make_cluster(names=("A", "B"), layout="own", memory="64mb", secret="s3cret")
    a, b = cl["A"].client(), cl["B"].client()
    data = payload(64 * 1024, 7)
    put(a, uid, data)
    wait_locations(b, uid, ["A"])
    a0 = stats(a)
    held = [WirePeer(cl["A"].transfer_port) for _ in range(HANDSHAKE_PER_SOURCE + 4)]
    try:
        # Every one of them is in its handshake before B dials.
        wait_until(lambda: stats(a)["transfer_connections"] - a0["transfer_connections"]
                   >= len(held), timeout=5.0, what="A to accept the idle connections")
        assert fetch(b, uid, timeout=4000, via="tcp") == ["OK"]
        assert sha256(b.execute_command("OBJ.GET", uid)) == sha256(data)
        open_now = sum(1 for p in held if not p.closed_within(0.01))
        assert open_now <= HANDSHAKE_PER_SOURCE, f"{open_now} idle connections still held"
    finally:
        for p in held:
            p.close()
    a1 = stats(a)
    assert a1["transfer_bad_frames"] == a0["transfer_bad_frames"], "idle peers sent no bad frame"


# ---- authenticated peers that do not read ---------------------------------------------------

SEND_STALL = 10.0  # module/transfer: a queue that makes no progress this long is closed


def rss_kb(node):
    with open(f"/proc/{node.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_peer_that_fetches_without_reading_loses_its_pins(cl, uid):
    a = cl["A"].client()
    put(a, uid, payload(8 << 20, 6))
    peer = WirePeer(cl["A"].transfer_port)
    try:
        peer.handshake(SECRET)
        peer.sock.settimeout(1.0)
        try:
            for i in range(1, 2000):
                peer.send_frame(wire_frame(WIRE_FETCH, struct.pack("<H", len(uid)) + uid, req_id=i))
        except socket.timeout:
            pass  # the node stopped reading: fine
        wait_until(lambda: to_int(info(a, uid)["pins"]) == 0, SEND_STALL + 8.0,
                   what="the pins of a peer that never reads to be released")
        assert peer.closed_within(60.0)  # bounds a hang
    finally:
        peer.close()
    assert a.execute_command("OBJ.DEL", uid) == b"OK"
    assert_healthy(cl, uid)


def test_peer_that_pings_without_reading_costs_bounded_memory(cl, uid):
    """Each PONG is queued for a peer that never reads: the node must stop reading it
    (and close it after the stall timeout) instead of queueing without end."""
    node = cl["A"]
    stall_line = "read nothing of its queued frames"
    stalls0 = node.log().count(stall_line)
    rss0 = rss_kb(node)
    peer = WirePeer(node.transfer_port)
    try:
        peer.handshake(SECRET)
        peer.sock.settimeout(1.0)
        sent = 0
        reset = False
        while sent < (64 << 20):
            burst = b"".join(peer.seal(wire_frame(WIRE_PING, req_id=1)) for _ in range(8192))
            try:
                peer.send(burst)
            except socket.timeout:
                break  # the node no longer reads us: what we want
            except (ConnectionResetError, BrokenPipeError):
                # On a slow host the stall timeout can run out while we still send:
                # the node has closed us already (its log must say why, below).
                reset = True
                break
            sent += len(burst)
            grown = (rss_kb(node) - rss0) >> 10
            assert grown < 100, (
                f"the node grew by {grown} MiB queueing PONGs for a peer that does not read "
                f"({sent >> 20} MiB of PINGs sent)")
        # Reading would be progress: wait without reading for the node to give up on us.
        wait_until(lambda: node.log().count(stall_line) > stalls0, SEND_STALL + 8.0,
                   interval=0.2, what="the node to close a peer that stopped reading")
        assert reset or peer.closed_within(60.0), "the stalled peer was never closed"
    finally:
        peer.close()
    assert_healthy(cl, uid)


# ---- a cancelled fetch must not cost the shared connection ----------------------------------

def test_cancelled_fetches_leave_the_shared_connection_alone(make_cluster, uid):
    """OBJ.FETCH big TIMEOUT t in a loop (cancelled at every stage, mid-payload too)
    while another client fetches other objects from the same peer over the same
    connection: those all succeed and B never reconnects."""
    cl = make_cluster(names=("A", "B"), layout="own", memory="256mb", secret="s3cret")
    a, b, b2 = cl["A"].client(), cl["B"].client(), cl["B"].client()
    big = uid(b"big")
    put(a, big, payload(48 << 20, 9))
    smalls = [uid(b"s%d" % i) for i in range(40)]
    for i, oid in enumerate(smalls):
        put(a, oid, payload(64 * 1024, 100 + i))
    for oid in [big] + smalls:
        wait_locations(b, oid, ["A"])
    assert fetch(b, smalls[0]) == ["OK"]  # the connection B -> A is up
    conns0 = stats(b)["transfer_connections"]

    results, stop = [], threading.Event()

    def small_fetches():
        for oid in smalls[1:]:
            if stop.is_set():
                break
            results.append((oid, fetch(b2, oid, timeout=10000)))

    t = threading.Thread(target=small_fetches, daemon=True)
    t.start()
    timed_out = 0
    try:
        for ms in [1, 2, 3, 5, 8, 12, 20, 30, 45, 70] * 2:
            try:
                r = fetch(b, big, timeout=ms)
                if r == ["OK"]:
                    b.execute_command("OBJ.DEL", big)
            except ResponseError as e:
                assert err_code(e) == "TIMEOUT", str(e)
                timed_out += 1
    finally:
        stop.set()
        t.join(30)
    assert timed_out > 0
    bad = [(oid, r) for oid, r in results if r != ["OK"]]
    assert not bad, f"fetches sharing the connection failed: {bad[:3]}"
    assert stats(b)["transfer_connections"] == conns0, "B reconnected to A"
    wait_until(lambda: to_int(info(a, big)["pins"]) == 0, 5.0, what="A's pins of big")
    wait_until(lambda: stats(b)["objects_created"] == 0, 5.0, what="no partial object on B")
    assert fetch(b, big) == ["OK"]
    assert stats(b)["transfer_connections"] == conns0
