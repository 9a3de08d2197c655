"""A node's directory writes can arrive late: while its link to the directory is
down they wait in its queue, and a re-publish lists objects some time before it
sends them. A publish of a copy the node has deleted since must not be sent
late: a primary's publish takes the id's entry over, so it would replace the
entry of the id's live object on another node, and the unpublish queued behind
it would then leave the id unlocated for good (found by the chaos test: live
primaries "not in the directory" after a directory restart).

Node A reaches the directory through a relay the test can cut (what was sent
and not relayed is lost, as on a cut link; new connections hang); node B
reaches it directly.
"""

import socket
import threading

import pytest
from redis.exceptions import ResponseError

from objhelpers import err_code, fetch, locate, payload, sha256, wait_locations, wait_nodes
from objhelpers import wait_until
from objnodes import ClusterNode, DirectoryRedis, finish, start_nodes

HEARTBEAT_MS, NODE_TTL_MS = 200, 1000
WITHIN = NODE_TTL_MS / 1000 + 5.0  # a reconnect's backoff is at most 2 s


class CuttableRelay:
    """Relays TCP connections from a port of its own to 127.0.0.1:target. cut()
    closes every relayed connection and leaves new ones unanswered until heal()."""

    def __init__(self, target):
        self.target = target
        self.lock = threading.Lock()
        self.is_cut = False
        self.socks = []  # every socket open here: closed on cut() and heal()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                up.settimeout(None)
            except OSError:
                down.close()
                continue
            with self.lock:
                self.socks.append(down)
                if self.is_cut:  # parked: never read, never answered
                    up.close()
                    continue
                self.socks.append(up)
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _close_all(self):
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self):
        with self.lock:
            self.is_cut = True
        self._close_all()

    def heal(self):
        with self.lock:
            self.is_cut = False
        self._close_all()  # the parked connections: the node dials again

    def close(self):
        self.listener.close()
        self.cut()


@pytest.fixture
def relayed():
    """(A behind a cuttable relay, B direct, the relay), started and registered."""
    d = DirectoryRedis().start()
    relay = CuttableRelay(d.port)
    nodes = [ClusterNode("A", f"127.0.0.1:{relay.port}", memory="32mb",
                         heartbeat=HEARTBEAT_MS, node_ttl=NODE_TTL_MS),
             ClusterNode("B", d.addr, memory="32mb", heartbeat=HEARTBEAT_MS,
                         node_ttl=NODE_TTL_MS)]
    try:
        start_nodes(nodes)
        wait_nodes(nodes[1].client(), ["A", "B"], timeout=WITHIN)
        yield nodes[0], nodes[1], relay
    finally:
        relay.close()
        finish(nodes)
        d.cleanup()


def lookup_answered(client, oid):
    """OBJ.LOCATE's answer (its locations, or the error code) once the node's
    directory is back; None while it answers UNAVAILABLE. A node's directory
    requests run in order, so an answered lookup comes after every write it
    queued before."""
    try:
        return locate(client, oid)["locations"]
    except ResponseError as e:
        return None if err_code(e) == "UNAVAILABLE" else err_code(e)


def test_a_late_publish_of_a_deleted_copy_does_not_unlocate_the_live_one(relayed, uid):
    a, b, relay = relayed
    ca, cb = a.client(), b.client()
    oid = uid(b"x")
    old, new = payload(3000, 1), payload(4100, 2)

    relay.cut()
    assert ca.execute_command("OBJ.PUT", oid, old) == b"OK"
    assert ca.execute_command("OBJ.DEL", oid) == b"OK"
    assert cb.execute_command("OBJ.PUT", oid, new) == b"OK"
    wait_locations(cb, oid, ["B"])
    relay.heal()

    answered = wait_until(lambda: lookup_answered(ca, oid), WITHIN,
                          what="node A's directory back, its queued writes sent")
    assert answered == ["B"], f"A's late writes for the id left it located at {answered}"
    assert locate(cb, oid)["locations"] == ["B"]
    assert fetch(ca, oid) == ["OK"]
    assert sha256(ca.execute_command("OBJ.GET", oid)) == sha256(new)


def test_a_late_publish_of_a_copy_still_held_is_sent(relayed, uid):
    """The other side: what A still holds when its link heals is published."""
    a, b, relay = relayed
    ca, cb = a.client(), b.client()
    oid = uid(b"kept")
    data = payload(2500, 3)

    relay.cut()
    assert ca.execute_command("OBJ.PUT", oid, data) == b"OK"
    relay.heal()

    wait_locations(cb, oid, ["A"], timeout=WITHIN, retry_unavailable=True)
    assert fetch(cb, oid) == ["OK"]
    assert sha256(cb.execute_command("OBJ.GET", oid)) == sha256(data)
