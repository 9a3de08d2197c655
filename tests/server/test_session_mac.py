"""A directory writer on the path between two real nodes (issue 20, item 1).

Whoever can write the directory (by default any client of a node's own Redis) can point a
node's entry at a relay of their own. The relay passes the real handshake between two real
nodes untouched -- it cannot forge a proof, and needs none -- and then acts inside the
authenticated session. Every frame after the handshake carries a MAC under a session key
(module/transfer/wire.h), so:

- a FETCH the relay injects closes the connection, no byte of the object leaves, and the
  victim counts a bad frame;
- a DATA answer whose payload and checksum the relay rewrote (with the directory's
  checksum set to match the forgery) is not sealed: the fetch fails, and the directory
  never lists the fetching node as a location.
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
    WIRE_FETCH,
    WIRE_HDR,
    WIRE_HELLO,
    WIRE_VERSION,
    WirePeer,
    codes,
    fetch,
    payload,
    stats,
    wait_until,
    wire_frame,
    wire_hello_body,
    xxh3_64,
)

SECRET = "s3cret"
# How long the relay's entry is held before B fetches: past one heartbeat (2 s here),
# so that any entry of A that B's directory client learnt before (it caches node
# entries for one heartbeat, and the replica manager lists the nodes every heartbeat)
# has expired and B looks A up again, finding the relay.
ENTRY_SETTLE = 2.5


@pytest.fixture
def cl(make_cluster):
    # A long heartbeat: A rewrites its own directory entry rarely, so the relay's entry
    # holds while B looks A up (a thread re-applies it anyway).
    return make_cluster(names=("A", "B"), layout="own", memory="64mb", secret=SECRET,
                        heartbeat=2000, node_ttl=20000)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_frame(sock):
    """(type, reqId, body, raw header + body) of one untagged frame; None if closed."""
    head = recv_exact(sock, WIRE_HDR.size)
    if head is None:
        return None
    t, _, _, n, req_id = WIRE_HDR.unpack(head)
    body = recv_exact(sock, n) if n else b""
    return None if body is None else (t, req_id, body, head + body)


class Relay:
    """A listener the directory sends B to for node A: it dials the real A and passes
    the handshake (B's HELLO, A's HELLO, B's AUTH) along untouched."""

    def __init__(self, cl):
        self.a_port = cl["A"].transfer_port
        self.dir = cl["A"].client()  # layout "own": A's Redis is the directory
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.hijack = threading.Thread(target=self._hold_entry, daemon=True)
        self.hijack.start()
        self.to_b = self.to_a = None

    def _point_entry_here(self):
        self.dir.execute_command("HSET", b"objstore:node:A", "addr", "127.0.0.1",
                                 "tcp_port", self.port, "rdma_port", 0)

    def _hold_entry(self):
        while not self.stop.is_set():
            self._point_entry_here()
            time.sleep(0.02)

    def handshake(self, timeout=10.0):
        """Accept B, dial A, relay the three handshake frames; returns A's HELLO version."""
        self.listener.settimeout(timeout)
        self.to_b, _ = self.listener.accept()
        self.to_b.settimeout(timeout)
        self.to_a = socket.create_connection(("127.0.0.1", self.a_port), timeout=timeout)
        hello_b = recv_frame(self.to_b)
        assert hello_b and hello_b[0] == WIRE_HELLO, f"B's first frame: {hello_b!r:.100}"
        self.to_a.sendall(hello_b[3])
        hello_a = recv_frame(self.to_a)
        assert hello_a and hello_a[0] == WIRE_HELLO, f"A's answer: {hello_a!r:.100}"
        self.to_b.sendall(hello_a[3])
        auth = recv_frame(self.to_b)
        assert auth and auth[0] == WIRE_AUTH, f"B did not authenticate A: {auth!r:.100}"
        self.to_a.sendall(auth[3])
        return struct.unpack_from("<H", hello_a[2], 4)[0]

    def pipe_b_to_a(self):
        """Forward whatever B sends to A from now on, in the background."""
        def run():
            try:
                while True:
                    chunk = self.to_b.recv(65536)
                    if not chunk:
                        break
                    self.to_a.sendall(chunk)
            except OSError:
                pass
        threading.Thread(target=run, daemon=True).start()

    def close(self):
        self.stop.set()
        self.hijack.join(5)
        for s in (self.to_a, self.to_b, self.listener):
            if s:
                s.close()


def read_all(sock, timeout):
    """Everything sock delivers until it closes or timeout passes: (bytes, closed)."""
    got, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            return got, False
        except (ConnectionResetError, BrokenPipeError):
            return got, True
        if not chunk:
            return got, True
        got += chunk
    return got, False


def start_fetch(client, oid, timeout):
    """OBJ.FETCH oid in a thread: (thread, result) where result["r"] gets fetch()'s
    per-id results, or the error text of a whole-command error."""
    result = {}

    def run():
        try:
            result["r"] = fetch(client, oid, timeout=timeout)
        except ResponseError as e:
            result["r"] = [str(e)]
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def put(client, oid, data):
    assert client.execute_command("OBJ.PUT", oid, data) == b"OK"


def wait_published(directory, oid, node=b"A"):
    wait_until(lambda: directory.execute_command("SISMEMBER", b"objstore:{" + oid + b"}:loc",
                                                 node) == 1, 5.0, what="the location of " + repr(oid))


def test_frame_injected_into_a_relayed_session_is_refused(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    secret_oid, bait = uid(b"secret"), uid(b"bait")
    secret_data = os.urandom(64 * 1024)
    put(a, secret_oid, secret_data)
    put(a, bait, payload(4096, 3))
    wait_published(a, secret_oid)
    wait_published(a, bait)
    relay = Relay(cl)
    try:
        time.sleep(ENTRY_SETTLE)
        a0 = stats(a)
        t, _ = start_fetch(b, bait, 5000)
        relay.handshake()
        # The relay's own request, inside the session B and A just authenticated.
        injected = 0x5EC2E7
        relay.to_a.sendall(wire_frame(WIRE_FETCH, struct.pack("<H", len(secret_oid))
                                      + secret_oid, req_id=injected))
        relay.pipe_b_to_a()
        from_a, closed = read_all(relay.to_a, 5.0)
        t.join(15)
    finally:
        relay.close()
    leaked = (WIRE_HDR.pack(WIRE_DATA, 0, 0, 24, injected) in from_a
              or secret_data[:4096] in from_a)
    assert not leaked, "A served the relay's injected FETCH: the session is not authenticated"
    assert closed, "A kept a session in which a frame was injected"
    a1 = stats(a)
    assert a1["transfer_bad_frames"] > a0["transfer_bad_frames"], "the injection was not counted"
    assert a1["tcp_served"] == a0["tcp_served"], "A served something on the tampered session"
    assert "MAC" in cl["A"].log()


def test_rewritten_data_and_checksum_are_not_sealed(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    oid = uid(b"victim")
    real, forged = payload(64 * 1024, 5), payload(64 * 1024, 6)
    put(a, oid, real)
    wait_published(a, oid)
    # The directory writer makes the directory vouch for the forgery.
    a.execute_command("HSET", b"objstore:{" + oid + b"}:meta", "checksum",
                      "%016x" % xxh3_64(forged))
    relay = Relay(cl)
    try:
        time.sleep(ENTRY_SETTLE)
        b0 = stats(b)
        t, result = start_fetch(b, oid, 4000)
        version = relay.handshake()
        relay.pipe_b_to_a()
        assert version == WIRE_VERSION
        rewrote = False
        while True:  # A's frames to B: rewrite the DATA answer, pass the rest
            f = recv_frame(relay.to_a)
            if f is None:
                break
            ftype, req_id, body, raw = f
            frame_tag = recv_exact(relay.to_a, 16)
            if frame_tag is None:
                break
            if ftype != WIRE_DATA:
                relay.to_b.sendall(raw + frame_tag)
                continue
            size, meta_size, _ = struct.unpack("<QQQ", body)
            recv_exact(relay.to_a, size + meta_size)
            payload_tag = recv_exact(relay.to_a, 16)  # after the payload
            relay.to_b.sendall(WIRE_HDR.pack(WIRE_DATA, 0, 0, 24, req_id)
                               + struct.pack("<QQQ", len(forged), 0, xxh3_64(forged))
                               + frame_tag + forged + payload_tag)
            rewrote = True
            break
        t.join(15)
    finally:
        relay.close()
    assert rewrote, "A never answered B through the relay"
    res = result.get("r")
    assert res is not None and codes(res)[0] != "OK", f"B accepted rewritten bytes: {res}"
    b1 = stats(b)
    assert b1["transfer_bad_frames"] > b0["transfer_bad_frames"], "the forgery was not counted"
    assert b.execute_command("OBJ.EXISTS", oid) == 0, "B sealed the forged replica"
    assert a.execute_command("SISMEMBER", b"objstore:{" + oid + b"}:loc", b"B") == 0, (
        "the directory lists B as a location of the forged bytes")


def test_peer_of_the_version_without_the_mac_is_refused_at_hello(make_cluster):
    """A node of wire version 2 (no session MAC) and one of version 3 do not mix: the
    HELLO is refused with the reason in the log, before anything else is read."""
    cl = make_cluster(names=("A",), layout="own", memory="32mb", secret=SECRET)
    a = cl["A"].client()
    a0 = stats(a)
    peer = WirePeer(cl["A"].transfer_port)
    try:
        peer.send(wire_frame(WIRE_HELLO, wire_hello_body(peer.nonce, version=2)))
        assert peer.closed_within(60.0), "A kept a connection that spoke wire version 2"
    finally:
        peer.close()
    assert stats(a)["transfer_bad_frames"] > a0["transfer_bad_frames"]
    assert "HELLO protocol version differs from ours" in cl["A"].log()


# ---- the payload's tag after the payload, and encrypted sessions (transfer-encrypt) ----

FLIP_SIZE = (1 << 20) + 5  # more than one piece (256 KiB) each side tags or checks at once
PIECE = 256 << 10          # module/transfer/tcp.c TCP_PIECE, framer.h FRAMER_PIECE


@pytest.fixture(params=["plain", "encrypted"])
def ecl(request, make_cluster):
    """A (plain) and B; in "encrypted", B alone has transfer-encrypt yes, which is enough:
    a session either side asks it of encrypts its TCP payloads both ways."""
    cl = make_cluster(names=("A",), layout="own", memory="64mb", secret=SECRET,
                      heartbeat=2000, node_ttl=20000)
    encrypted = request.param == "encrypted"
    cl.add_node("B", extra_args=("transfer-encrypt", "yes") if encrypted else ())
    return cl, encrypted


def relay_data_answer(relay, flip):
    """Pass A's frames to B, the DATA answer's payload and its tag with bit 0 of the byte
    at offset flip (into payload + tag; None: nothing) flipped. Returns the bytes of the
    payload and its tag as they went by, or None if A sent no DATA."""
    while True:
        f = recv_frame(relay.to_a)
        if f is None:
            return None
        ftype, _, body, raw = f
        frame_tag = recv_exact(relay.to_a, 16)
        if frame_tag is None:
            return None
        relay.to_b.sendall(raw + frame_tag)
        if ftype != WIRE_DATA:
            continue
        size, meta_size, _ = struct.unpack("<QQQ", body)
        wire = recv_exact(relay.to_a, size + meta_size + 16)  # the payload, then its tag
        if wire is None:
            return None
        sent = bytearray(wire)
        if flip is not None:
            sent[flip] ^= 1
        relay.to_b.sendall(bytes(sent))
        return wire


# Offset classes of a flipped bit: the first payload byte, both sides of a piece boundary,
# the last payload byte, the tag after the payload.
FLIPS = {"first byte": 0, "piece end": PIECE - 1, "next piece": PIECE,
         "last byte": FLIP_SIZE - 1, "payload tag": FLIP_SIZE + 3}


def test_a_bit_flipped_anywhere_in_a_payload_is_never_sealed(ecl, uid):
    """A relay on the path flips one bit of the DATA answer's payload (or of the tag after
    it) at each offset class: B seals nothing, counts a bad frame and lists no location;
    with nothing flipped the same path delivers the object byte-exact. Encrypted, the
    path never sees the object's bytes; authenticated only, it does (docs/security.md)."""
    cl, encrypted = ecl
    a, b = cl["A"].client(), cl["B"].client()
    oid = uid(b"flip")
    data = os.urandom(FLIP_SIZE)
    put(a, oid, data)
    wait_published(a, oid)
    relay = Relay(cl)  # one listener: B keeps the address it looked up
    try:
        time.sleep(ENTRY_SETTLE)
        for what, flip in list(FLIPS.items()) + [("nothing", None)]:
            b0 = stats(b)
            t, result = start_fetch(b, oid, 8000)
            relay.handshake()
            relay.pipe_b_to_a()
            wire = relay_data_answer(relay, flip)
            t.join(60)
            for s in (relay.to_a, relay.to_b):
                s.close()
            check_flip(cl, oid, data, encrypted, what, flip, wire, result, b0)
    finally:
        relay.close()
    assert "payload MAC mismatch" in cl["B"].log()


def check_flip(cl, oid, data, encrypted, what, flip, wire, result, b0):
    """What B made of the answer relayed with flip (test above)."""
    a, b = cl["A"].client(), cl["B"].client()
    assert wire is not None, f"{what}: A never answered B through the relay"
    res = result.get("r")
    if flip is None:
        assert res is not None and codes(res)[0] == "OK", f"untouched path failed: {res}"
        assert b.execute_command("OBJ.GET", oid) == data
        assert (stats(b)["transfer_encrypted_sessions"] > 0) == encrypted
        seen = data[PIECE:PIECE + 4096] in wire
        assert seen != encrypted, (
            "the object's bytes crossed an encrypted session in the clear" if encrypted
            else "authenticated-only payloads are expected to travel as they are")
        return
    assert res is not None and codes(res)[0] != "OK", f"{what}: B accepted {res}"
    assert b.execute_command("OBJ.EXISTS", oid) == 0, f"{what}: B sealed altered bytes"
    assert stats(b)["transfer_bad_frames"] > b0["transfer_bad_frames"], (
        f"{what}: the altered payload was not counted")
    assert a.execute_command("SISMEMBER", b"objstore:{" + oid + b"}:loc", b"B") == 0
