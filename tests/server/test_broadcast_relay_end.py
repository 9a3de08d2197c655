"""A relay that ends its stream early is not the fetch's answer. A node asked with
PARTIAL_OK for an object it is still receiving answers with a relay stream; when its own
transfer gives the object up, it ends the stream with ERROR NOTSEALED ("the object is no
longer received here"). That says nothing of the object: the fetcher must go on
elsewhere (as after a BUSY: it asks the directory again, or insists on the holders) from
the offset it reached, and never hand the relay's NOTSEALED to its client.

The scene is scripted so that it happens on every run, whatever order the holders are
tried in: the directory lists only the relay M (a Python listener speaking the session
MAC, as in test_broadcast_hostile.py) when B looks the object up; M streams the first
half right, the test lists the owner A again, and M ends the stream. B must then take
the second half, and only that, from A.
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
    payload,
    sha256,
    stats,
    wait_locations,
    wait_until,
    xxh3_64,
)
from objnodes import registry_key

SECRET = b"s3cret"
PART_CHUNK = 256 * 1024
SIZE = 2 * MIB
HALF = SIZE // 2


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B"), layout="own", memory="64mb", secret="s3cret")


class EndingRelay:
    """M: a node registered in the directory that answers its first request for an
    object as a relay whose own transfer then fails: PARTs of the right bytes up to
    `upto`, then (once `go_on` is set) ERROR NOTSEALED. Later requests are refused with
    NOTSEALED, as a node no longer receiving the object refuses them."""

    def __init__(self, directory, data, upto, name=b"M"):
        self.dir = directory
        self.name = name
        self.data = data
        self.upto = upto
        self.streamed = threading.Event()  # the PARTs up to `upto` are sent
        self.go_on = threading.Event()  # the test let the stream end
        self.asked = []  # (offset, flags) of every request
        self.errors = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(0.2)
        port = self.listener.getsockname()[1]
        self.keys = [b"objstore:node:" + name]
        self.dir.execute_command(
            "HSET", b"objstore:node:" + name, "addr", "127.0.0.1", "tcp_port", port,
            "rdma_addr", "", "rdma_port", 0, "features", 1, "heartbeat_ms",
            int(time.time() * 1000))
        self.dir.execute_command("PEXPIRE", b"objstore:node:" + name, 120000)
        self.dir.execute_command("SADD", registry_key(name), name)
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self.session, args=(conn,), daemon=True).start()

    def session(self, conn):
        peer = WireAcceptor(conn, timeout=30, name=self.name)
        head = (len(self.data), 0, xxh3_64(self.data))
        try:
            peer.handshake(SECRET)
            while True:
                _, req, _, offset, flags = peer.recv_request()
                self.asked.append((offset, flags))
                if len(self.asked) > 1:
                    peer.send_error(req, "NOTSEALED", b"the object is not being received here")
                    continue
                assert flags & WIRE_FETCHR_PARTIAL_OK, f"first request without PARTIAL_OK: {flags}"
                for at in range(offset, self.upto, PART_CHUNK):
                    peer.send_part(req, *head, at,
                                   self.data[at:min(at + PART_CHUNK, self.upto)])
                self.streamed.set()
                assert self.go_on.wait(30), "the test never let the stream end"
                peer.send_error(req, "NOTSEALED", b"the object is no longer received here")
        except EOFError:
            return
        except (AssertionError, socket.timeout) as e:
            self.errors.append(repr(e))
        except OSError:
            return
        finally:
            peer.close()

    def close(self):
        self.stop = True
        self.go_on.set()
        self.thread.join(5)
        self.listener.close()
        self.dir.execute_command("SREM", registry_key(self.name), self.name)
        self.dir.execute_command("DEL", *self.keys)


def test_a_relay_ending_its_stream_makes_the_fetch_go_on_at_its_offset(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    oid = uid(b"r")
    data = payload(SIZE, seed=71)
    assert a.execute_command("OBJ.PUT", oid, data) == b"OK"
    wait_locations(a, oid, ["A"], timeout=60)
    loc = b"objstore:{" + oid + b"}:loc"
    m = EndingRelay(a, data, HALF)  # A's own Redis is the directory (layout "own")
    m.keys.append(loc)
    # B finds M alone: the owner is listed again only while M's stream runs.
    a.execute_command("SREM", loc, "A")
    a.execute_command("SADD", loc, "M")
    b0, a0 = stats(b), stats(a)
    result = {}

    def run_fetch():
        result["r"] = fetch(b, oid, timeout=20000)

    t = threading.Thread(target=run_fetch)
    try:
        t.start()
        assert m.streamed.wait(20), f"M was never asked (or failed: {m.errors})"
        a.execute_command("SADD", loc, "A")
        m.go_on.set()
        t.join(30)
        assert not t.is_alive(), "OBJ.FETCH TIMEOUT 20000 did not answer"
        assert not m.errors, f"M's session went wrong: {m.errors}"
        assert result["r"] == ["OK"], (
            f"the relay's end reached the client instead of the fetch going on: {result['r']}")
        got = b.execute_command("OBJ.GET", oid)
        assert sha256(got) == sha256(data), "B's copy differs"
    finally:
        m.go_on.set()
        t.join(30)
        m.close()
    b1 = stats(b)
    wait_until(lambda: stats(a)["transfer_uploaded_bytes"] - a0["transfer_uploaded_bytes"]
               >= SIZE - HALF, timeout=10, what="A's upload counted")
    up = stats(a)["transfer_uploaded_bytes"] - a0["transfer_uploaded_bytes"]
    assert up == SIZE - HALF, f"A sent {up} bytes, not only the {SIZE - HALF} M had not sent"
    down = b1["transfer_downloaded_bytes"] - b0["transfer_downloaded_bytes"]
    assert down == SIZE, f"B downloaded {down} bytes for {SIZE}: some were fetched twice"
    assert b1["transfer_range_resumes"] > b0["transfer_range_resumes"], (
        "B did not go on from its offset")
