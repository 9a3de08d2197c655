"""The transfer port against peers that are not well-behaved nodes, and a Python peer
that is one: a hand-written implementation of module/transfer/wire.h (HELLO, AUTH with
HMAC-SHA256 proofs, FETCH -> DATA/ERROR) proves the protocol from the outside.

Every hostile connection must be dropped (the socket reads EOF within a bound) and
counted in transfer_bad_frames, and the node must stay healthy: it answers PING and a
real fetch from another node still works.
"""

import os
import struct
import time

import pytest

from objhelpers import (
    WIRE_AUTH,
    WIRE_DATA,
    WIRE_DONE,
    WIRE_ERROR,
    WIRE_FETCH,
    WIRE_HELLO,
    WIRE_PING,
    WIRE_PONG,
    WirePeer,
    codes,
    fetch,
    info,
    payload,
    sha256,
    stats,
    to_int,
    wait_locations,
    wait_until,
    wire_frame,
    wire_hello_body,
    xxh3_64,
)

SECRET = b"s3cret"
DROP_WITHIN = 3.0  # seconds for the node to close a hostile connection


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


def second_hello(peer):
    peer.send_hello()
    peer.recv_hello()
    peer.send_hello()


def fetch_with_request_id_zero(peer):
    peer.handshake(SECRET)
    peer.send(wire_frame(WIRE_FETCH, struct.pack("<H", 1) + b"k", req_id=0))


def fetch_id_length_mismatch(peer):
    peer.handshake(SECRET)
    peer.send(wire_frame(WIRE_FETCH, struct.pack("<H", 9) + b"k", req_id=5))


def unsolicited_data(peer):
    peer.handshake(SECRET)
    peer.send(wire_frame(WIRE_DATA, struct.pack("<QQQ", 1 << 20, 0, 0), req_id=77))


HOSTILE = [garbage, oversized_body_len, body_too_long_for_type, hello_wrong_magic,
           hello_wrong_version, nonzero_flags, auth_before_hello, fetch_before_hello,
           fetch_before_auth, wrong_secret_auth, all_zero_auth, second_hello,
           fetch_with_request_id_zero, fetch_id_length_mismatch, unsolicited_data]


@pytest.mark.parametrize("misbehave", HOSTILE, ids=[f.__name__ for f in HOSTILE])
def test_hostile_peer_is_dropped_and_counted(cl, uid, misbehave):
    a = cl["A"].client()
    a0 = stats(a)
    peer = WirePeer(cl["A"].transfer_port)
    try:
        misbehave(peer)
        t0 = time.monotonic()
        assert peer.closed_within(DROP_WITHIN), (
            f"{misbehave.__name__}: connection still open after {DROP_WITHIN}s")
        assert time.monotonic() - t0 < DROP_WITHIN
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
        peer.send(wire_frame(WIRE_PING, req_id=5))
        t, _, _, rid, body = peer.recv_frame()
        assert (t, rid, body) == (WIRE_PONG, 5, b"")
        peer.send(wire_frame(WIRE_DONE, req_id=1001))  # harmless on TCP
        peer.send(wire_frame(WIRE_PING, req_id=6))
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
        peer.send(wire_frame(WIRE_FETCH, struct.pack("<H", len(uid)) + uid, req_id=3))
        t, _, _, rid, body = peer.recv_frame()
        assert t == WIRE_DATA
        peer.recv_exact(1 << 20)  # read a little, then vanish
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

    t0 = time.monotonic()
    res = fetch(dc, uid, timeout=10000)
    assert time.monotonic() - t0 < 5.0
    assert codes(res)[0] != "OK", res

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
