"""Broadcast over rate-limited links (tests/lib/netns.py): nodes n0..n{N-1} in namespaces
of their own, each behind a 400 Mbit/s link (tc tbf both ways) to one bridge, so that a
transfer lasts long enough to be interrupted. Every cluster is stopped and checked at
the end (no death the test did not inflict, no crash or sanitizer report).

- A source killed with SIGKILL mid-transfer: the fetcher finishes from another holder,
  byte-exact, from the offset it had reached (it downloads every byte once; the second
  holder sends only the rest).
- Eight nodes fetch one object at once: byte-exact everywhere, each node receives one
  copy once, and the uploads spread (the owner sends fewer than the 7 copies; more than
  one node uploads a whole copy), nodes relaying what they are still receiving (PART
  answers: transfer_relayed).
- A relay killed with SIGKILL mid-transfer: every other node finishes, byte-exact, at
  the offset it had reached (not a byte downloaded twice), some after following a relay.
- Four nodes each fetch 64 objects in one OBJ.FETCH at once (a model's parts): every
  fetch answers OK and every copy is byte-exact, with nodes relaying to each other
  several objects over one connection.
- A fetcher that gives up (TIMEOUT), or whose client goes away, while other nodes relay
  through it: they finish byte-exact, each byte received once, and it shows no partial
  copy.
"""

import contextlib
import socket
import threading
import time

import pytest

from netns import NetnsCluster, netns_problem
from redis.exceptions import ResponseError

from objhelpers import MIB, locate, payload, resp_encode, sha256, wait_until

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
        wait_until(lambda: "n0" in holders(lab, 2, oid), timeout=60, what="n0 published")
        assert lab.client(1).execute_command("OBJ.FETCH", oid) == [b"OK"]
        wait_until(lambda: holders(lab, 2, oid) == ["n0", "n1"], timeout=60, what="n1 published")

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
        assert down == SIZE, (f"n2 downloaded {down} bytes for a {SIZE}-byte object: "
                              "some were fetched twice")
        other = 1 - served["by"]
        s = lab.stats(other)
        rest = s["tcp_served_bytes"] - before[other]["tcp_served_bytes"]
        assert 0 < rest < SIZE, f"the second holder sent {rest} bytes, not only the rest"


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
        wait_until(lambda: "n0" in holders(lab, 1, oid), timeout=60, what="n0 published")
        before = [lab.stats(i) for i in range(8)]

        out = fetch_everywhere(lab, oid, range(1, 8))

        assert out == {i: [b"OK"] for i in range(1, 8)}, f"{out!r:.600}"
        for i in range(1, 8):
            got = lab.client(i).execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"n{i}: the copy differs"
        down = [lab.stats(i)["transfer_downloaded_bytes"] - before[i]["transfer_downloaded_bytes"]
                for i in range(1, 8)]
        assert down == [32 * MIB] * 7, f"each node received one copy, once: {down}"
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
        wait_until(lambda: "n0" in holders(lab, 1, oid), timeout=60, what="n0 published")
        before = [lab.stats(i) for i in range(5)]
        out = {}
        threads = [fetch_async(lab.client(i), oid, out, i) for i in range(1, 5)]
        relay = {}

        # Killed once it has streamed some MiB of what it is still receiving, so that the
        # node below it has bytes to go on from (a relay counts its stream as it starts,
        # before a byte has landed below; PARTs are at most 512 KiB, four queued).
        def relaying():
            for i in range(1, 5):
                s = lab.stats(i)
                if (s["transfer_relayed"] > before[i]["transfer_relayed"]
                        and s["transfer_uploaded_bytes"] - before[i]["transfer_uploaded_bytes"]
                        >= 8 * MIB):
                    relay["n"] = i
                    return True
            return False

        wait_until(relaying, timeout=30, interval=0.02, what="a node relaying 8 MiB")
        lab.kill9(relay["n"])
        for t in threads:
            t.join(120)

        below = [i for i in range(1, 5) if i != relay["n"]]
        assert {i: out[i] for i in below} == {i: [b"OK"] for i in below}, f"{out!r:.600}"
        resumed = follows = 0
        for i in below:
            got = lab.client(i).execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"n{i}: the copy differs"
            s = lab.stats(i)
            down = s["transfer_downloaded_bytes"] - before[i]["transfer_downloaded_bytes"]
            # Went on at its offset: not a byte fetched twice.
            assert down == size, f"n{i} downloaded {down} bytes for a {size}-byte object"
            resumed += s["transfer_range_resumes"] - before[i]["transfer_range_resumes"]
            follows += s["transfer_relay_follows"] - before[i]["transfer_relay_follows"]
        assert follows > 0, "no node fetched through a relay"
        assert resumed > 0, "no node went on from its offset"


def broadcast_past_a_quitter(lab, oid, size, start_quitter, quit=None):
    """n1 fetches oid first: n0's one upload slot goes to it. n2..n4 fetch as soon as n0
    serves n1, are sent on to n1 (BUSY naming it) and take what it has landed. Then n1's
    fetch ends before its object is whole: start_quitter(lab) starts it (and returns
    what quit takes); quit(handle), if given, is called once a node relays through n1.
    Checks that n2..n4 hold the object byte-exact, each having received every byte once
    (those below n1 went on at their offsets), and that some node did fetch through n1.
    Returns (n1's stats before, n1's stats after, the handle, the object's bytes)."""
    data = payload(size, seed=6)
    put_on(lab, 0, oid, data)
    wait_until(lambda: "n0" in holders(lab, 1, oid), timeout=60, what="n0 published")
    before = [lab.stats(i) for i in range(5)]

    handle = start_quitter(lab)
    wait_until(lambda: lab.stats(0)["tcp_served"] > before[0]["tcp_served"], timeout=30,
               what="n0 serving n1")
    out = {}
    threads = [fetch_async(lab.client(i), oid, out, i) for i in (2, 3, 4)]
    if quit is not None:
        wait_until(lambda: lab.stats(1)["transfer_relayed"] > before[1]["transfer_relayed"],
                   timeout=30, interval=0.02, what="a node relaying through n1")
        quit(handle)
    for t in threads:
        t.join(120)

    assert out == {i: [b"OK"] for i in (2, 3, 4)}, f"{out!r:.600}"
    for i in (2, 3, 4):
        got = lab.client(i).execute_command("OBJ.GET", oid)
        assert sha256(got) == sha256(data), f"n{i}: the copy differs"
        down = lab.stats(i)["transfer_downloaded_bytes"] - before[i]["transfer_downloaded_bytes"]
        assert down == size, f"n{i} downloaded {down} bytes for a {size}-byte object"
    after = lab.stats(1)
    assert after["transfer_relayed"] > before[1]["transfer_relayed"], (
        "no node fetched through n1: the test shows nothing")
    return before[1], after, handle, data


def assert_no_partial_copy(lab, i, oid, data):
    """Node i holds the whole object byte-exact, or nothing of it a client can see."""
    c = lab.client(i)
    if c.execute_command("OBJ.EXISTS", oid) == 1:
        assert sha256(c.execute_command("OBJ.GET", oid)) == sha256(data), (
            f"n{i} shows a copy that differs from the object")
    else:
        assert "n%d" % i not in holders(lab, 0, oid), f"the directory lists n{i}"


def test_a_fetcher_timing_out_does_not_break_the_nodes_relaying_through_it():
    with bcast_lab(5) as lab:
        oid = b"quitter"
        quitter = {}

        def start(lab):
            # 64 MiB take n1 1.3 s on its 400 Mbit/s link: it gives up long before.
            t = threading.Thread(target=lambda: quitter.update(
                r=fetch_everywhere(lab, oid, [1], timeout_ms=800)))
            t.start()
            return t

        _, _, thread, data = broadcast_past_a_quitter(lab, oid, SIZE, start)
        thread.join(60)
        r1 = quitter["r"][1]
        assert r1 == [b"OK"] or "TIMEOUT" in repr(r1), f"n1: {r1!r:.300}"
        assert_no_partial_copy(lab, 1, oid, data)


def test_a_fetcher_whose_client_goes_away_does_not_break_the_nodes_relaying_through_it():
    with bcast_lab(5) as lab:
        oid = b"gone"

        def start(lab):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(lab.cluster["n1"].sock_path)
            sock.sendall(resp_encode("OBJ.FETCH", oid))
            return sock

        n1_before, n1_after, _, data = broadcast_past_a_quitter(
            lab, oid, SIZE, start, quit=lambda sock: sock.close())
        assert n1_after["fetch_cancelled"] > n1_before["fetch_cancelled"], (
            "n1's fetch was not cancelled when its client went away")
        assert_no_partial_copy(lab, 1, oid, data)


def test_nodes_fetching_many_objects_at_once_each_in_one_fetch_all_finish():
    # Each reader names every object in one OBJ.FETCH, as a model's reader does with its
    # parts: each node runs that many transfers at once and relays several objects to
    # the same peer over one connection, so a send there completes (and frees) another
    # stream of that connection while the node walks its streams. That walk once read a
    # freed stream and spun (the engine thread stopped reading: every fetch stalled).
    n, count, size = 5, 64, 4 * MIB
    with bcast_lab(n, memory="384mb") as lab:
        oids = [b"multi%d" % k for k in range(count)]
        datas = [payload(size, seed=40 + k) for k in range(count)]
        for oid, data in zip(oids, datas):
            put_on(lab, 0, oid, data)
        wait_until(lambda: all("n0" in holders(lab, 1, oid) for oid in oids),
                   what="n0 published")
        before = [lab.stats(i) for i in range(n)]
        out, threads = {}, []
        start = threading.Barrier(n - 1)

        def one(i):
            c = lab.client(i, timeout=200)
            start.wait()
            try:
                out[i] = c.execute_command("OBJ.FETCH", *oids, "TIMEOUT", 120000)
            except Exception as e:  # the assertion names it
                out[i] = e

        for i in range(1, n):
            threads.append(threading.Thread(target=one, args=(i,)))
            threads[-1].start()
        for t in threads:
            t.join(240)  # stops a hang; the verdict is below

        assert out == {i: [b"OK"] * count for i in range(1, n)}, f"{out!r:.600}"
        for i in range(1, n):
            c = lab.client(i)
            for oid, data in zip(oids, datas):
                assert sha256(c.execute_command("OBJ.GET", oid)) == sha256(data), (
                    f"n{i}: {oid!r} differs")
        relayed = sum(lab.stats(i)["transfer_relayed"] - before[i]["transfer_relayed"]
                      for i in range(n))
        assert relayed > 0, "no node relayed what it was still receiving: the test shows nothing"
