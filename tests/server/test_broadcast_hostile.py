"""A hostile holder or relay in a broadcast: it knows the cluster secret and is listed
in the directory next to a good holder, but serves wrong bytes under the right size and
the owner's checksum, whole (DATA) or as a relay does: one request answered by PARTs,
each starting where the last ended, to the object's end. The fetcher catches it by
checksum, throws every byte away, fetches again from the good holder (after a bad relay
chain, from complete holders only), and never seals the wrong bytes. A relay that
stalls (sends part of the object right, then nothing) is left after the fetcher's
stall limit, and the rest comes from the good holder, every byte once.

The fake holder M is a Python listener registered in the directory (as in
test_cluster_hostile.py), authenticated with the secret as the accepting side and
speaking the session MAC (objhelpers.WireAcceptor); which holder a fetch asks first is
random, so the test fetches fresh ids until M has answered at least one of them.
"""

import socket
import threading
import time

import pytest

from objhelpers import (
    MIB,
    WIRE_FETCHR_PARTIAL_OK,
    WireAcceptor,
    fetch,
    info,
    payload,
    sha256,
    stats,
    to_str,
    wait_locations,
    wait_until,
    xxh3_64,
)
from objnodes import registry_key

SECRET = b"s3cret"
PART_CHUNK = 512 * 1024  # a relay's answer comes as several PARTs
SIZE = 2 * MIB
TRIES = 12  # each fetch asks M first with probability 1/2


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B"), layout="own", memory="64mb", secret="s3cret")


def wrong(data):
    return bytes(b ^ 0x5A for b in data)


class HostileHolder:
    """M: registered in the directory, authenticates with the secret as the accepting side
    and speaks the session MAC (its frames tagged, the node's checked), and answers every
    FETCH / FETCHR with the right size and the owner's checksum over wrong bytes: as a
    DATA, or (as_relay, to a FETCHR with PARTIAL_OK) as a relay does, one PART after the
    other from the offset asked to the object's end. stall_after (with as_relay): send
    the right bytes in PARTs up to that offset, then nothing more, the session left open
    until the node closes it (`stalled_closed` counts those)."""

    def __init__(self, directory, name=b"M", as_relay=False, stall_after=None):
        self.dir = directory
        self.name = name
        self.as_relay = as_relay
        self.stall_after = stall_after
        self.stalled_closed = 0
        self.objects = {}  # id -> the true bytes (for the size and checksum)
        self.answered = []  # (id, frame type sent, offset asked)
        self.asked = []  # (id, offset, flags) of every request
        self.errors = []  # what went wrong in a session (a bad MAC from the node, ...)
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
        peer = WireAcceptor(conn, timeout=30, name=self.name)
        try:
            peer.handshake(SECRET)
            while True:
                _, req, oid, offset, flags = peer.recv_request()
                self.asked.append((oid, offset, flags))
                data = self.objects[oid]
                head = (len(data), 0, xxh3_64(data))
                if self.as_relay and flags & WIRE_FETCHR_PARTIAL_OK and self.stall_after:
                    for at in range(offset, self.stall_after, PART_CHUNK):
                        peer.send_part(req, *head, at, data[at:min(at + PART_CHUNK,
                                                                   self.stall_after)])
                    self.answered.append((oid, "STALL", offset))
                    self.wait_closed(peer)
                    return
                if self.as_relay and flags & WIRE_FETCHR_PARTIAL_OK:
                    for at in range(offset, len(data), PART_CHUNK):
                        peer.send_part(req, *head, at, wrong(data[at:at + PART_CHUNK]))
                    self.answered.append((oid, "PART", offset))
                else:
                    peer.send_data(req, *head, wrong(data[offset:]))
                    self.answered.append((oid, "DATA", offset))
        except EOFError:
            return  # the node closed the session
        except (AssertionError, KeyError) as e:
            self.errors.append(repr(e))
        except OSError:
            return
        finally:
            peer.close()

    def wait_closed(self, peer):
        """Say nothing more; count the session once the node closes it (what it sends
        meanwhile, keepalives, is read and dropped)."""
        peer.sock.settimeout(60)
        while True:
            try:
                chunk = peer.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                self.stalled_closed += 1
                return

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.listener.close()
        self.dir.execute_command("SREM", registry_key(self.name), self.name)
        self.dir.execute_command("DEL", *self.keys)


@pytest.mark.parametrize("as_relay", [False, True], ids=["holder-DATA", "relay-PARTs"])
def test_wrong_bytes_are_caught_and_fetched_again_from_a_good_holder(cl, uid, as_relay):
    a, b = cl["A"].client(), cl["B"].client()
    m = HostileHolder(a, as_relay=as_relay)  # A's own Redis is the directory (layout "own")
    b0, a0 = stats(b), stats(a)
    try:
        for i in range(TRIES):
            oid = uid(b"t%d" % i)
            data = payload(SIZE, seed=30 + i)
            assert a.execute_command("OBJ.PUT", oid, data) == b"OK"
            wait_locations(a, oid, ["A"], timeout=60)
            m.also_holds(oid, data)

            assert fetch(b, oid) == ["OK"], f"try {i}: B could not get the object"
            got = b.execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"try {i}: B sealed wrong bytes"
            assert int(to_str(info(b, oid)["checksum"]), 16) == xxh3_64(data), (
                f"try {i}: B sealed its copy under another checksum")
            if m.answered:
                break
        assert not m.errors, f"M's sessions with B went wrong: {m.errors}"
        assert m.answered, f"M was never asked in {TRIES} fetches (holders are tried at random)"
        kind = "PART" if as_relay else "DATA"
        assert all(k == kind for _, k, _ in m.answered), (
            f"M answered {m.answered}, each expected as {kind}")
        # One request brings every PART to the end: B never asks again from an offset.
        assert all(offset == 0 for _, offset, _ in m.asked), f"B asked M {m.asked}"
    finally:
        m.close()
    b1, a1 = stats(b), stats(a)
    assert b1["tcp_fetch_failovers"] > b0["tcp_fetch_failovers"], "B went on to another holder"
    assert a1["transfer_uploaded_bytes"] - a0["transfer_uploaded_bytes"] >= SIZE, (
        "after M's copy failed, the good holder A did not send the object")


STALL_AT = SIZE // 2


def test_a_relay_that_stalls_is_left_and_the_fetch_goes_on_at_its_offset(cl, uid):
    """M, asked as a relay, sends the first half right and then nothing: B closes the
    stalled stream and fetches the rest only from A, every byte once, byte-exact."""
    a, b = cl["A"].client(), cl["B"].client()
    m = HostileHolder(a, as_relay=True, stall_after=STALL_AT)
    b0, a0 = stats(b), stats(a)
    sizes = 0
    try:
        for i in range(TRIES):
            oid = uid(b"s%d" % i)
            data = payload(SIZE, seed=50 + i)
            assert a.execute_command("OBJ.PUT", oid, data) == b"OK"
            wait_locations(a, oid, ["A"], timeout=60)
            m.also_holds(oid, data)

            assert fetch(b, oid) == ["OK"], f"try {i}: B could not get the object"
            sizes += SIZE
            got = b.execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"try {i}: B's copy differs"
            if m.answered:
                break
        assert not m.errors, f"M's sessions with B went wrong: {m.errors}"
        assert [k for _, k, _ in m.answered] == ["STALL"], f"M answered {m.answered}"
        assert all(offset == 0 for _, offset, _ in m.asked), f"B asked M {m.asked}"
        wait_until(lambda: m.stalled_closed == 1, timeout=30, what="B closing M's stream")
    finally:
        m.close()
    b1, a1 = stats(b), stats(a)
    assert b1["transfer_range_resumes"] - b0["transfer_range_resumes"] == 1, (
        "B went on from its offset once")
    down = b1["transfer_downloaded_bytes"] - b0["transfer_downloaded_bytes"]
    assert down == sizes, f"B downloaded {down} bytes for {sizes}: some were fetched twice"
    up = a1["transfer_uploaded_bytes"] - a0["transfer_uploaded_bytes"]
    assert up == sizes - STALL_AT, f"A sent {up} bytes, not only what M had not sent"
