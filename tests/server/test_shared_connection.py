"""One transfer connection carries many requests at once, both ways: what one request
does to it must never cost the others.

A resumed fetch that ends early: a holder answering a FETCHR at offset o sends
size + metaSize - o bytes, and whatever becomes of the fetch (cancelled before the
answer, cancelled in the middle of its payload, answered with another generation of the
object than the directory named, or taken), the fetcher reads exactly those bytes, so
the next answer on the connection parses. A table over offsets x answers x cancel
points.

Two relay streams on one connection: one stream's end (its last PART completing inside
a send made for the other) must not free it under the walk that is pushing both. And a
FETCH sent on a connection its peer has reset closes that connection inside the send,
which fails the transfer over (or frees it) before the send returns: the sender must not
touch it after. Run with the ASan module (tests/run-all.sh) to see a use-after-free; a
plain build only shows what follows from one.

The fake nodes are Python listeners registered in the directory, authenticated with the
cluster secret as the accepting side and speaking the session MAC
(objhelpers.WireAcceptor), as in test_broadcast_hostile.py.
"""

import itertools
import os
import select
import socket
import struct
import threading
import time

import pytest

from objhelpers import (
    WIRE_ERROR,
    WIRE_DATA,
    WireAcceptor,
    WirePeer,
    WireSession,
    fetch,
    payload,
    raw_send,
    sha256,
    start_call,
    stats,
    wait_until,
    wire_frame,
    xxh3_64,
)
from objnodes import registry_key

SECRET = b"s3cret"
WAIT = 30  # a bound that stops a hang, never the verdict
_names = itertools.count()


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B"), layout="own", memory="64mb", secret="s3cret")


def stop_node(node):
    """SIGSTOP node and wait until every thread of it has stopped: a signal takes effect
    some time after kill() returns, and until then the node still reads its sockets."""
    node.sigstop()
    tasks = f"/proc/{node.proc.pid}/task"

    def stopped():
        states = []
        for t in os.listdir(tasks):
            with open(f"{tasks}/{t}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        return all(st in "tT" for st in states)
    wait_until(stopped, timeout=WAIT, what="the node stopping")


def list_object(d, oid, data, *names):
    """Write oid's directory entry by hand: data's size and checksum, held by names."""
    meta, loc = b"objstore:{" + oid + b"}:meta", b"objstore:{" + oid + b"}:loc"
    d.execute_command("HSET", meta, "size", len(data), "meta_size", 0,
                      "checksum", "%016x" % xxh3_64(data))
    d.execute_command("DEL", loc)
    d.execute_command("SADD", loc, *names)
    return [meta, loc]


class FakeNode:
    """A node that is a Python listener: registered in the directory under a fresh name,
    each accepted session handed to serve(node, peer) on its own thread (after the
    handshake). Exceptions other than the node closing are kept in errors."""

    def __init__(self, directory, serve):
        self.dir = directory
        self.serve = serve
        self.name = b"fk%d" % next(_names)
        self.errors = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(0.2)
        self.key = b"objstore:node:" + self.name
        self.dir.execute_command(
            "HSET", self.key, "addr", "127.0.0.1", "tcp_port",
            self.listener.getsockname()[1], "rdma_addr", "", "rdma_port", 0, "features", 1,
            "heartbeat_ms", int(time.time() * 1000))
        self.dir.execute_command("PEXPIRE", self.key, 120000)
        self.dir.execute_command("SADD", registry_key(self.name), self.name)
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                sock, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self.session, args=(sock,), daemon=True).start()

    def session(self, sock):
        peer = WireAcceptor(sock, timeout=WAIT, name=self.name)
        try:
            peer.handshake(SECRET)
            self.serve(self, peer)
        except (EOFError, ConnectionError):
            pass  # the node closed the session
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(e))
        finally:
            peer.close()

    def close(self):
        self.stop = True
        self.thread.join(5)
        self.listener.close()
        self.dir.execute_command("SREM", registry_key(self.name), self.name)
        self.dir.execute_command("DEL", self.key)


def data_head(peer, req, size, checksum, body):
    """The bytes of a DATA answer apart: the frame with its tag, and the payload body with
    the payload's tag after it."""
    frame = wire_frame(WIRE_DATA, struct.pack("<QQQ", size, 0, checksum), req_id=req)
    sealed = peer.seal(frame, body)
    return sealed[:len(frame) + 16], sealed[len(frame) + 16:]


def send_error(peer, req, code, text):
    peer.send_frame(wire_frame(WIRE_ERROR, struct.pack("<HH", code, len(text)) + text,
                               req_id=req))


# ---- a resumed fetch that ends early -----------------------------------------------------

X_SIZE = 256 * 1024
# Longer than any offset: a drain that reads o bytes too many eats the head of Y's
# answer (a bad frame at once), not the whole of it (a hang).
Y_SIZE = 768 * 1024
OFFSETS = [1, 100_003, X_SIZE - 1]
ANSWERS = ["same", "other"]  # the directory's generation, or another size
CANCELS = ["none", "before-answer", "mid-payload"]
WIRE_ERR_NOTFOUND = 1


class ResumeScript:
    """Two fake holders of x. The first request for x (whichever holder gets it) is
    answered with the DATA head and its first `offset` bytes, then the session is cut: the
    fetch resumes at the other holder with a FETCHR at that offset. The resume is answered
    with x's bytes from the offset ("same") or those of a 4 KiB longer generation
    ("other"), whole, or held before the answer or after half of its payload until `go` is
    set (`held` tells the test it may cancel). Later requests for x: NOTFOUND. y is
    answered whole."""

    def __init__(self, directory, x, xdata, y, ydata, offset, answer, cancel):
        self.x, self.xdata, self.y, self.ydata = x, xdata, y, ydata
        self.offset, self.answer, self.cancel = offset, answer, cancel
        self.lock = threading.Lock()
        self.x_asks = []  # (holder name, offset asked)
        self.held, self.go = threading.Event(), threading.Event()
        self.nodes = [FakeNode(directory, self.serve) for _ in range(2)]

    def serve(self, node, peer):
        while True:
            _, req, oid, offset, _ = peer.recv_request()
            if oid == self.y:
                head, body = data_head(peer, req, len(self.ydata), xxh3_64(self.ydata),
                                       self.ydata[offset:])
                peer.send(head + body)
                continue
            with self.lock:
                n = len(self.x_asks)
                self.x_asks.append((node.name, offset))
            if n == 0:
                head, body = data_head(peer, req, len(self.xdata), xxh3_64(self.xdata),
                                       self.xdata)
                peer.send(head + body[:self.offset])
                peer.sock.shutdown(socket.SHUT_RDWR)
                return
            if n > 1:
                send_error(peer, req, WIRE_ERR_NOTFOUND, b"no such object on this node")
                continue
            whole = self.xdata if self.answer == "same" else payload(X_SIZE + 4096, seed=77)
            head, body = data_head(peer, req, len(whole), xxh3_64(whole), whole[offset:])
            cut = {"none": len(body), "before-answer": None, "mid-payload": len(body) // 2}
            at = cut[self.cancel]
            if at is not None:
                peer.send(head + body[:at])
            if self.cancel != "none":
                self.held.set()
                assert self.go.wait(WAIT), "the test never let the held answer go"
                peer.send((head if at is None else b"") + body[at or 0:])

    def resumed_at(self):
        """The holder asked for the resume and the offset it was asked from."""
        assert len(self.x_asks) >= 2, f"the fetch never resumed: asks {self.x_asks}"
        return self.x_asks[1]

    def close(self):
        for n in self.nodes:
            n.close()
        return [e for n in self.nodes for e in n.errors]


@pytest.mark.parametrize("cancel", CANCELS)
@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("offset", OFFSETS)
def test_a_resumed_answer_is_read_to_its_end_whatever_becomes_of_the_fetch(
        cl, uid, offset, answer, cancel):
    a, b = cl["A"].client(), cl["B"].client()
    x, y = uid(b"x"), uid(b"y")
    xdata, ydata = payload(X_SIZE, seed=offset % 97), payload(Y_SIZE, seed=5)
    script = ResumeScript(a, x, xdata, y, ydata, offset, answer, cancel)
    keys = list_object(a, x, xdata, *[n.name for n in script.nodes])
    before = stats(b)
    try:
        if cancel == "none":
            got = fetch(b, x, timeout=WAIT * 1000)
            if answer == "same":
                assert got == ["OK"], got
                assert sha256(b.execute_command("OBJ.GET", x)) == sha256(xdata)
            else:
                assert got[0].startswith("PROTOCOL") or got[0].startswith("NOTFOUND"), got
        else:
            client = raw_send(cl["B"].port, "OBJ.FETCH", x)
            assert script.held.wait(WAIT), f"the resume never came: asks {script.x_asks}"
            client.close()  # the requester leaves: the fetch is cancelled
            wait_until(lambda: stats(b)["fetch_cancelled"] > before["fetch_cancelled"],
                       timeout=WAIT, what="B cancelling the fetch")
            script.go.set()
        holder, asked = script.resumed_at()
        assert asked == offset, f"the fetch resumed at {asked}, not {offset}"

        # The next answer on the same connection (y, held by the resuming holder only).
        keys += list_object(a, y, ydata, holder)
        assert fetch(b, y, timeout=WAIT * 1000) == ["OK"], "the connection lost step"
        assert sha256(b.execute_command("OBJ.GET", y)) == sha256(ydata)
        after = stats(b)
        assert after["transfer_bad_frames"] == before["transfer_bad_frames"]
        if cancel != "none" or answer == "other":
            assert not b.execute_command("OBJ.EXISTS", x), "nothing partial stays behind"
    finally:
        script.go.set()
        errors = script.close()
        a.execute_command("DEL", *keys)
        for oid in (x, y):
            b.execute_command("OBJ.DEL", oid) if b.execute_command("OBJ.EXISTS", oid) else None
    assert not errors, f"the fake holders' sessions went wrong: {errors}"


# ---- two relay streams on one connection ----------------------------------------------------

WIRE_FETCHR, WIRE_DONE, WIRE_FETCHR_PARTIAL_OK = 12, 6, 2
STEP = 64 * 1024  # what the feeding holder sends at a time: PARTs of about this size
STEP_GAP = 0.03   # past the relay's linger (20 ms), so each step goes out as its own PART


def socket_capacity():
    """An upper bound of what the kernel holds between a node and a peer that does not read
    (the most a send buffer grows to, and a margin for the peer's tiny receive buffer)."""
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        return int(f.read().split()[2]) + 1024 * 1024


class FeedingHolder:
    """The only holder of x: answers B's request with the DATA head, then sends x's bytes
    only as the test says (feed)."""

    def __init__(self, directory, x, xdata):
        self.x, self.xdata, self.sent = x, xdata, 0
        self.cmds = []
        self.cv = threading.Condition()
        self.node = FakeNode(directory, self.serve)

    def serve(self, node, peer):
        _, req, oid, offset, _ = peer.recv_request()
        assert oid == self.x and offset == 0, f"asked {oid!r} from {offset}"
        head, body = data_head(peer, req, len(self.xdata), xxh3_64(self.xdata), self.xdata)
        peer.send(head)
        while self.sent < len(self.xdata):
            with self.cv:
                self.cv.wait_for(lambda: self.cmds, WAIT)
                n = self.cmds.pop(0) if self.cmds else len(self.xdata) - self.sent
            # the payload's tag goes with its last byte
            end = self.sent + n if self.sent + n < len(self.xdata) else len(body)
            peer.send(body[self.sent:end])
            with self.cv:
                self.sent += n
                self.cv.notify_all()

    def feed(self, n):
        """Send the next n bytes of x; returns once they are written."""
        with self.cv:
            want = self.sent + n
            self.cmds.append(n)
            self.cv.notify_all()
            assert self.cv.wait_for(lambda: self.sent >= want, WAIT), "the holder is stuck"


def slow_reader(port, name):
    """A peer on B's transfer port whose receive buffer is tiny and that reads nothing
    until told: B's sends to it queue at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    peer = WirePeer.__new__(WirePeer)
    WireSession.__init__(peer, sock, WAIT, name, 1)
    peer.handshake(SECRET)
    return peer


def fetchr(peer, req, oid, offset):
    peer.send_frame(wire_frame(
        WIRE_FETCHR, struct.pack("<QIH", offset, WIRE_FETCHR_PARTIAL_OK, len(oid)) + oid,
        req_id=req))


def drain_now(peer, quiet=0.3):
    """Read whatever the socket has until nothing comes for `quiet` seconds."""
    peer.sock.settimeout(quiet)
    try:
        while peer.sock.recv(1 << 20):
            pass
    except socket.timeout:
        pass
    peer.sock.settimeout(WAIT)


def test_a_relay_stream_ending_inside_another_streams_send_is_not_freed_under_the_walk(cl, uid):
    """B relays x, which it is receiving, to a peer P as two streams on one connection that
    P does not read: the older stream (from 0) fills the socket and has PARTs queued, the
    newer one (near the landed end) one PART behind them. P ends the older one with DONE,
    its PARTs still queued. With B stopped, the holder sends more of x and P reads all the
    socket holds: B, woken, reads the holder first, and pushing the newer stream flushes
    the connection, which completes the older stream's last PART inside that push; the
    walk over the streams must not step onto it freed (ASan: heap-use-after-free in
    relayPushAll). Then the relay and the fetch finish, byte-exact."""
    a, b = cl["A"].client(), cl["B"].client()
    node_b = cl["B"]
    fill = socket_capacity()
    x = uid(b"x")
    xdata = payload(fill + 4 * 1024 * 1024, seed=9)
    holder = FeedingHolder(a, x, xdata)
    keys = list_object(a, x, xdata, holder.node.name)
    peer = None
    stopped = False
    try:
        call = start_call(b, "OBJ.FETCH", x, "TIMEOUT", WAIT * 1000)
        holder.feed(STEP)
        peer = slow_reader(node_b.transfer_port, b"fkp%d" % next(_names))
        fetchr(peer, 1, x, 0)  # the older stream: every byte from 0
        while holder.sent < fill:
            holder.feed(STEP)
            time.sleep(STEP_GAP)
        time.sleep(0.2)  # B has landed what was sent
        fetchr(peer, 2, x, holder.sent - STEP)  # the newer: one PART, behind the older's
        time.sleep(0.2)
        peer.send_frame(wire_frame(WIRE_DONE, req_id=1))  # the older ends, PARTs queued
        time.sleep(0.2)

        stopped = True
        stop_node(node_b)
        holder.feed(STEP)  # waits in B's socket, readable before P's is writable
        drain_now(peer)    # everything B's kernel held: room again, B not told yet
        node_b.sigcont()
        stopped = False

        reader = threading.Thread(target=drain_now, args=(peer, 3.0), daemon=True)
        reader.start()
        while holder.sent < len(xdata):
            holder.feed(min(1024 * 1024, len(xdata) - holder.sent))
        assert call.result(WAIT) == [b"OK"], "B's own fetch of x failed"
        assert sha256(b.execute_command("OBJ.GET", x)) == sha256(xdata)
        assert b.execute_command("PING") == b"PONG"
        reader.join(WAIT)
    finally:
        if stopped:
            node_b.sigcont()
        if peer:
            peer.close()
        errors = holder.node.errors
        holder.node.close()
        a.execute_command("DEL", *keys)
        if b.execute_command("OBJ.EXISTS", x):
            b.execute_command("OBJ.DEL", x)
    assert not errors, f"the holder's session went wrong: {errors}"


# ---- a send that closes its connection ------------------------------------------------------

class ResettingHolders:
    """Two fake holders, each with a session B opened (for a warm-up object each). The first
    asked for x says so (`asked`) and answers NOTFOUND once `answer` is set; the other
    resets its session (RST) once `reset` is set, without reading what came meanwhile."""

    def __init__(self, directory):
        self.asked_by = None
        self.asked, self.answer, self.answered = (threading.Event() for _ in range(3))
        self.reset, self.was_reset = threading.Event(), threading.Event()
        self.objects = {}  # id -> bytes, per node name: the warm-up objects
        self.x = None
        self.nodes = [FakeNode(directory, self.serve) for _ in range(2)]

    def serve(self, node, peer):
        while True:
            if self.reset.is_set() and self.asked_by not in (None, node.name):
                peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                peer.sock.close()
                self.was_reset.set()
                return
            if not select.select([peer.sock], [], [], 0.02)[0]:
                continue
            _, req, oid, offset, _ = peer.recv_request()
            if oid != self.x:
                data = self.objects[oid]
                head, body = data_head(peer, req, len(data), xxh3_64(data), data[offset:])
                peer.send(head + body)
                continue
            self.asked_by = node.name
            self.asked.set()
            assert self.answer.wait(WAIT), "the test never let the answer go"
            send_error(peer, req, WIRE_ERR_NOTFOUND, b"no such object on this node")
            self.answered.set()

    def close(self):
        for n in self.nodes:
            n.close()
        return [e for n in self.nodes for e in n.errors]


def test_a_fetch_sent_on_a_reset_connection_is_not_touched_after_the_close_it_causes(cl, uid):
    """x is listed at two holders B has sessions with. B asks one; with B stopped, that one
    answers NOTFOUND and the other resets its session. B, woken, reads the NOTFOUND first
    and fails over to the other holder on the session it believes up: the FETCH's write
    fails, the session closes inside the send, and its close fails the transfer for good
    (no holder left) and frees it before the send returns (ASan: heap-use-after-free in
    sendFetch). The fetch must answer an error, and B go on serving."""
    a, b = cl["A"].client(), cl["B"].client()
    node_b = cl["B"]
    holders = ResettingHolders(a)
    keys = []
    stopped = False
    try:
        for i, n in enumerate(holders.nodes):  # B's sessions with both holders are up
            w = uid(b"w%d" % i)
            holders.objects[w] = payload(4096, seed=i)
            keys += list_object(a, w, holders.objects[w], n.name)
            assert fetch(b, w, timeout=WAIT * 1000) == ["OK"]
        x = holders.x = uid(b"x")
        keys += list_object(a, x, payload(4096, seed=3), *[n.name for n in holders.nodes])
        call = start_call(b, "OBJ.FETCH", x, "TIMEOUT", WAIT * 1000)
        assert holders.asked.wait(WAIT), "B never asked for x"

        stopped = True
        stop_node(node_b)
        holders.answer.set()  # the NOTFOUND waits in B's socket first ...
        assert holders.answered.wait(WAIT)
        holders.reset.set()   # ... then the other session's RST
        assert holders.was_reset.wait(WAIT)
        time.sleep(0.1)
        node_b.sigcont()
        stopped = False

        got = call.result(WAIT)
        assert len(got) == 1 and isinstance(got[0], Exception), f"x fetched from nowhere: {got}"
        # The order the test set up: the FETCH met the reset, not a session closed before.
        assert "cannot send FETCH" in str(got[0]), got
        assert b.execute_command("PING") == b"PONG"
        w = uid(b"after")
        holders.objects[w] = payload(4096, seed=4)
        keys += list_object(a, w, holders.objects[w], holders.asked_by)
        assert fetch(b, w, timeout=WAIT * 1000) == ["OK"], "B no longer fetches"
    finally:
        if stopped:
            node_b.sigcont()
        holders.answer.set()
        errors = holders.close()
        if keys:
            a.execute_command("DEL", *keys)
    assert not errors, f"the fake holders' sessions went wrong: {errors}"
