"""Broadcast over rate-limited links (tests/lib/netns_bcast.py): nodes in namespaces of
their own, each behind a 400 Mbit/s link, so that a transfer lasts long enough to be
interrupted.

- A source killed with SIGKILL mid-transfer: the fetcher finishes from another holder,
  byte-exact, from the offset it had reached (it downloads less than twice the object).
"""

import threading
import time

import pytest

from netns_bcast import BcastLab, netns_problem
from redis.exceptions import ResponseError

from objhelpers import MIB, locate, payload, sha256, wait_until

SIZE = 64 * MIB

pytestmark = pytest.mark.skipif(netns_problem() is not None,
                                reason=f"namespaces: {netns_problem()}")


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
    with BcastLab(3) as lab:
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
        assert not lab.crashed()
