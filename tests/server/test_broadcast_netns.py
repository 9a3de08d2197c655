"""Broadcast over rate-limited links (tests/lib/netns.py): nodes n0..n{N-1} in namespaces
of their own, each behind a 400 Mbit/s link (tc tbf both ways) to one bridge, so that a
transfer lasts long enough to be interrupted. Every cluster is stopped and checked at
the end (no death the test did not inflict, no crash or sanitizer report).

- A source killed with SIGKILL mid-transfer: the fetcher finishes from another holder,
  byte-exact, from the offset it had reached (it downloads less than twice the object).
- Eight nodes fetch one object at once: byte-exact everywhere, and the uploads spread
  (the owner sends fewer than the 7 copies; more than one node uploads a whole copy).
- Nodes relay what they are still receiving (PART answers: transfer_relayed).
- A relay killed with SIGKILL mid-transfer: every node below it finishes from another
  holder, byte-exact, at the offset it had reached (less than twice the object each).
- A fetcher that gives up (TIMEOUT) in the middle of a broadcast does not break it.
"""

import contextlib
import threading
import time

import pytest

from netns import NetnsCluster, netns_problem
from redis.exceptions import ResponseError

from objhelpers import MIB, locate, payload, sha256, wait_until

SIZE = 64 * MIB

pytestmark = pytest.mark.skipif(netns_problem() is not None,
                                reason=f"namespaces: {netns_problem()}")


class BcastLab:
    """A NetnsCluster of n nodes addressed by index (node i is "n<i>"; n0 puts)."""

    def __init__(self, n, rate="400mbit", memory="256mb"):
        self.n = n
        self.cluster = NetnsCluster(n, rate=rate, memory=memory, burst="512kb",
                                    latency="100ms", names=[f"n{i}" for i in range(n)])

    def client(self, i, timeout=120.0):
        """A new connection to node i (not kept: the tests make many, briefly)."""
        return self.cluster[f"n{i}"].new_client(timeout)

    def stats(self, i):
        return self.cluster[f"n{i}"].stats()

    def kill9(self, i):
        self.cluster[f"n{i}"].kill9()


@contextlib.contextmanager
def bcast_lab(n, **kw):
    """A started BcastLab; at the end its cluster is stopped, and what the nodes left
    (a death not inflicted, a crash, a sanitizer report) fails the test."""
    lab = BcastLab(n, **kw)
    lab.cluster.start()
    try:
        yield lab
    except BaseException:
        lab.cluster.stop()
        raise
    report = lab.cluster.stop()
    assert not report, report


def fetch_async(client, oid, out, key):
    def run():
        try:
            out[key] = client.execute_command("OBJ.FETCH", oid)
        except Exception as e:  # the assertion below names it
            out[key] = e

    t = threading.Thread(target=run)
    t.start()
    return t


def put_on(lab, i, oid, data):
    assert lab.client(i).execute_command("OBJ.PUT", oid, data) == b"OK"


def holders(lab, i, oid):
    """The directory's holders of oid, as node i sees them ([] while it has none)."""
    try:
        return locate(lab.client(i), oid)["locations"]
    except ResponseError:
        return []


def test_fetch_resumes_at_its_offset_when_the_source_is_killed():
    with bcast_lab(3) as lab:
        oid = b"resume"
        data = payload(SIZE, seed=3)
        put_on(lab, 0, oid, data)
        wait_until(lambda: "n0" in holders(lab, 2, oid), what="n0 published")
        assert lab.client(1).execute_command("OBJ.FETCH", oid) == [b"OK"]
        wait_until(lambda: holders(lab, 2, oid) == ["n0", "n1"], what="n1 published")

        before = {i: lab.stats(i) for i in range(3)}
        out = {}
        t = fetch_async(lab.client(2), oid, out, "n2")
        # Whichever holder n2 asked first is its source: kill it once bytes flow.
        served = {}

        def source():
            for i in (0, 1):
                s = lab.stats(i)
                if s["tcp_served"] > before[i]["tcp_served"]:
                    served["by"] = i
                    return True
            return False

        wait_until(source, timeout=30, what="a holder serving n2")
        time.sleep(0.4)  # pacing only: let part of the object land before the kill
        lab.kill9(served["by"])
        t.join(120)

        assert out["n2"] == [b"OK"], f"n2's fetch: {out['n2']!r:.300}"
        got = lab.client(2).execute_command("OBJ.GET", oid)
        assert sha256(got) == sha256(data), "the resumed copy differs from the object"
        after = lab.stats(2)
        down = after["transfer_downloaded_bytes"] - before[2]["transfer_downloaded_bytes"]
        resumes = after["transfer_range_resumes"] - before[2]["transfer_range_resumes"]
        assert resumes == 1, "the fetch went on from its offset once"
        assert SIZE <= down < 2 * SIZE, f"n2 downloaded {down} bytes for a {SIZE}-byte object"
        other = 1 - served["by"]
        s = lab.stats(other)
        assert s["tcp_served_bytes"] - before[other]["tcp_served_bytes"] < SIZE, \
            "the second holder sent only the rest"


def fetch_everywhere(lab, oid, nodes, timeout_ms=None):
    out, threads = {}, []
    start = threading.Barrier(len(nodes))

    def one(i):
        c = lab.client(i)
        start.wait()
        args = ["OBJ.FETCH", oid] + (["TIMEOUT", timeout_ms] if timeout_ms else [])
        try:
            out[i] = c.execute_command(*args)
        except Exception as e:  # the assertion names it
            out[i] = e

    for i in nodes:
        threads.append(threading.Thread(target=one, args=(i,)))
        threads[-1].start()
    for t in threads:
        t.join(300)
    return out


def test_eight_nodes_fetch_one_object_at_once_and_share_the_uploads():
    with bcast_lab(8) as lab:
        oid = b"eight"
        data = payload(32 * MIB, seed=8)
        put_on(lab, 0, oid, data)
        wait_until(lambda: "n0" in holders(lab, 1, oid), what="n0 published")
        before = [lab.stats(i) for i in range(8)]

        out = fetch_everywhere(lab, oid, range(1, 8))

        assert out == {i: [b"OK"] for i in range(1, 8)}, f"{out!r:.600}"
        for i in range(1, 8):
            got = lab.client(i).execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"n{i}: the copy differs"
        up = [lab.stats(i)["transfer_uploaded_bytes"] - before[i]["transfer_uploaded_bytes"]
              for i in range(8)]
        assert sum(up) == 7 * 32 * MIB, f"seven copies were sent in all: {up}"
        assert up[0] < 7 * 32 * MIB, f"the owner sent every copy: {up}"
        assert sum(1 for u in up if u >= 32 * MIB) > 1, f"one node did all the uploading: {up}"
        relayed = sum(lab.stats(i)["transfer_relayed"] - before[i]["transfer_relayed"]
                      for i in range(8))
        assert relayed > 0, "no node forwarded bytes it was still receiving"


def test_nodes_below_a_killed_relay_finish_at_their_offsets():
    size = 64 * MIB
    with bcast_lab(5) as lab:
        oid = b"relaykill"
        data = payload(size, seed=12)
        put_on(lab, 0, oid, data)
        wait_until(lambda: "n0" in holders(lab, 1, oid), what="n0 published")
        before = [lab.stats(i) for i in range(5)]
        out = {}
        threads = [fetch_async(lab.client(i), oid, out, i) for i in range(1, 5)]
        relay = {}

        def relaying():
            for i in range(1, 5):
                if lab.stats(i)["transfer_relayed"] > before[i]["transfer_relayed"]:
                    relay["n"] = i
                    return True
            return False

        wait_until(relaying, timeout=30, interval=0.02, what="a node relaying")
        lab.kill9(relay["n"])
        for t in threads:
            t.join(120)

        below = [i for i in range(1, 5) if i != relay["n"]]
        assert {i: out[i] for i in below} == {i: [b"OK"] for i in below}, f"{out!r:.600}"
        resumed = 0
        for i in below:
            got = lab.client(i).execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"n{i}: the copy differs"
            s = lab.stats(i)
            down = s["transfer_downloaded_bytes"] - before[i]["transfer_downloaded_bytes"]
            assert size <= down < 2 * size, f"n{i} downloaded {down} bytes"
            resumed += s["transfer_range_resumes"] - before[i]["transfer_range_resumes"]
        assert resumed > 0, "no node went on from its offset"


def test_a_fetcher_timing_out_does_not_break_the_broadcast():
    with bcast_lab(5) as lab:
        oid = b"quitter"
        data = payload(32 * MIB, seed=6)
        put_on(lab, 0, oid, data)
        wait_until(lambda: "n0" in holders(lab, 1, oid), what="n0 published")

        quitter = {}
        tq = threading.Thread(target=lambda: quitter.update(
            r=fetch_everywhere(lab, oid, [1], timeout_ms=200)))
        tq.start()
        out = fetch_everywhere(lab, oid, [2, 3, 4])
        tq.join(60)

        assert out == {i: [b"OK"] for i in (2, 3, 4)}, f"{out!r:.600}"
        for i in (2, 3, 4):
            got = lab.client(i).execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"n{i}: the copy differs"
        r1 = quitter["r"][1]
        assert r1 == [b"OK"] or "TIMEOUT" in repr(r1), f"n1: {r1!r:.300}"
