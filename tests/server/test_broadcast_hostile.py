"""A hostile holder or relay in a broadcast: it knows the cluster secret and is listed
in the directory next to a good holder, but serves wrong bytes under the right size and
the owner's checksum, whole (DATA) or as a relay does, in PARTs of what it claims to
have landed. The fetcher catches it by checksum, throws every byte away, fetches again
from the good holder (after a bad relay chain, from complete holders only), and never
seals the wrong bytes.

The fake holder M is a Python listener registered in the directory (as in
test_cluster_hostile.py); which holder a fetch asks first is random, so the test
fetches fresh ids until M has answered at least one of them.
"""

import os
import socket
import struct
import threading
import time

import pytest

from objhelpers import (
    MIB,
    WIRE_AUTH,
    WIRE_DATA,
    WIRE_HDR,
    WIRE_HELLO,
    WIRE_ROLE_ACCEPTOR,
    fetch,
    payload,
    sha256,
    stats,
    wait_locations,
    wire_frame,
    wire_hello_body,
    wire_proof,
    xxh3_64,
)
from objnodes import registry_key

SECRET = b"s3cret"
WIRE_FETCH, WIRE_FETCHR, WIRE_PART = 3, 12, 13
PARTIAL_OK = 2
PART_CHUNK = 512 * 1024
SIZE = 2 * MIB
TRIES = 12  # each fetch asks M first with probability 1/2


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B"), layout="own", memory="64mb", secret="s3cret")


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_frame(sock):
    head = recv_exact(sock, WIRE_HDR.size)
    if head is None:
        return None
    t, _, _, n, req = WIRE_HDR.unpack(head)
    body = recv_exact(sock, n) if n else b""
    return None if body is None else (t, req, body)


class HostileHolder:
    """M: registered in the directory, speaks the handshake with the secret, and
    answers every FETCH / FETCHR with the right DATA header and wrong bytes."""

    def __init__(self, directory, name=b"M", as_relay=False):
        self.dir = directory
        self.name = name
        self.as_relay = as_relay
        self.objects = {}  # id -> the true bytes (for the size and checksum)
        self.answered = 0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.keys = [b"objstore:node:" + name]
        self.dir.execute_command(
            "HSET", b"objstore:node:" + name, "addr", "127.0.0.1", "tcp_port", self.port,
            "rdma_addr", "", "rdma_port", 0, "features", 1, "heartbeat_ms",
            int(time.time() * 1000))
        self.dir.execute_command("PEXPIRE", b"objstore:node:" + name, 120000)
        self.dir.execute_command("SADD", registry_key(name), name)
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def also_holds(self, oid, data):
        """List M as a holder of oid next to the real ones."""
        self.objects[oid] = data
        loc = b"objstore:{" + oid + b"}:loc"
        self.keys.append(loc)
        self.dir.execute_command("SADD", loc, self.name)

    def run(self):
        while not self.stop:
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self.session, args=(conn,), daemon=True).start()

    def session(self, conn):
        conn.settimeout(30)
        try:
            hello = recv_frame(conn)
            if not hello or hello[0] != WIRE_HELLO:
                return
            body = hello[2]
            (features,) = struct.unpack_from("<H", body, 6)
            (name_len,) = struct.unpack_from("<H", body, 56)
            nonce_c, name_c = body[8:24], body[58:58 + name_len]
            nonce = os.urandom(16)
            proof = wire_proof(SECRET, WIRE_ROLE_ACCEPTOR, name_c, self.name, self.name,
                               features, 1, nonce_c, nonce)
            conn.sendall(wire_frame(WIRE_HELLO, wire_hello_body(nonce, self.name, proof, 1)))
            auth = recv_frame(conn)
            if not auth or auth[0] != WIRE_AUTH:
                return
            while True:
                f = recv_frame(conn)
                if f is None:
                    return
                t, req, body = f
                flags = 0
                if t == WIRE_FETCH:
                    offset, (id_len,) = 0, struct.unpack_from("<H", body, 0)
                    oid = body[2:2 + id_len]
                elif t == WIRE_FETCHR:
                    (offset, flags) = struct.unpack_from("<QI", body, 0)
                    (id_len,) = struct.unpack_from("<H", body, 12)
                    oid = body[14:14 + id_len]
                else:
                    continue
                data = self.objects[oid]
                head = struct.pack("<QQQ", len(data), 0, xxh3_64(data))
                if self.as_relay and flags & PARTIAL_OK:
                    n = min(PART_CHUNK, len(data) - offset)
                    wrong = bytes(b ^ 0x5A for b in data[offset:offset + n])
                    conn.sendall(wire_frame(WIRE_PART, head + struct.pack("<QQ", offset, n),
                                            req_id=req) + wrong)
                else:
                    wrong = bytes(b ^ 0x5A for b in data[offset:])
                    conn.sendall(wire_frame(WIRE_DATA, head, req_id=req) + wrong)
                self.answered += 1
        except (OSError, KeyError, struct.error):
            return
        finally:
            conn.close()

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.listener.close()
        self.dir.execute_command("SREM", registry_key(self.name), self.name)
        self.dir.execute_command("DEL", *self.keys)


@pytest.mark.parametrize("as_relay", [False, True], ids=["holder-DATA", "relay-PART"])
def test_wrong_bytes_are_caught_and_fetched_again_from_a_good_holder(cl, uid, as_relay):
    a, b = cl["A"].client(), cl["B"].client()
    m = HostileHolder(a, as_relay=as_relay)  # A's own Redis is the directory (layout "own")
    b0 = stats(b)
    try:
        for i in range(TRIES):
            oid = uid(b"t%d" % i)
            data = payload(SIZE, seed=30 + i)
            assert a.execute_command("OBJ.PUT", oid, data) == b"OK"
            wait_locations(a, oid, ["A"])
            m.also_holds(oid, data)

            assert fetch(b, oid) == ["OK"], f"try {i}: B could not get the object"
            got = b.execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"try {i}: B sealed wrong bytes"
            if m.answered:
                break
        assert m.answered, f"M was never asked in {TRIES} fetches (holders are tried at random)"
    finally:
        m.close()
    b1 = stats(b)
    assert b1["tcp_fetch_failovers"] > b0["tcp_fetch_failovers"], "B went on to another holder"
