"""One object, many fetchers, on loopback: the fetchers spread over the holders.

Four nodes hold each object (H1..H4, each with one upload slot) and four more (F1..F4)
fetch it at the same moment. Every copy is byte-exact, and the uploads are spread: more
than one holder served. Holders whose slot is taken answer BUSY and the fetchers ask
another (transfer_redirects / transfer_redirected); every fetcher gets the object even
when all its holders were busy (the second pass asks without BUSY_OK).
"""

import threading

import pytest

from objhelpers import MIB, fetch, payload, sha256, stats, wait_locations

HOLDERS = ("H1", "H2", "H3", "H4")
FETCHERS = ("F1", "F2", "F3", "F4")
OBJECTS = 3
SIZE = 8 * MIB


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    cl = make_cluster_module(names=(), layout="separate", memory="256mb")
    for name in HOLDERS:
        cl.add_node(name, extra_args=("upload-slots", "1"))
    for name in FETCHERS:
        cl.add_node(name)
    return cl


def place_on_holders(cl, oid, data):
    """PUT on H1, fetch it to H2..H4, and wait until the directory lists all four."""
    h1 = cl["H1"].client()
    assert h1.execute_command("OBJ.PUT", oid, data) == b"OK"
    wait_locations(h1, oid, ["H1"], timeout=60)
    for name in HOLDERS[1:]:
        assert fetch(cl[name].client(), oid) == ["OK"]
    wait_locations(h1, oid, list(HOLDERS), timeout=60)


def fetch_all_at_once(cl, oid):
    """OBJ.FETCH oid on every fetcher at the same moment; returns each one's answer."""
    answers = {}
    start = threading.Barrier(len(FETCHERS))

    def one(name):
        c = cl[name].client()
        start.wait()
        answers[name] = fetch(c, oid)

    threads = [threading.Thread(target=one, args=(n,)) for n in FETCHERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def test_concurrent_fetchers_spread_over_the_holders(cl, uid):
    before = {n: stats(cl[n].client()) for n in HOLDERS + FETCHERS}
    datas = {}
    for i in range(OBJECTS):
        oid = uid(b"o%d" % i)
        datas[oid] = payload(SIZE, seed=i + 11)
        place_on_holders(cl, oid, datas[oid])
    mid = {n: stats(cl[n].client()) for n in HOLDERS}

    for oid, data in datas.items():
        answers = fetch_all_at_once(cl, oid)
        assert answers == {n: ["OK"] for n in FETCHERS}
        for n in FETCHERS:
            got = cl[n].client().execute_command("OBJ.GET", oid)
            assert sha256(got) == sha256(data), f"{n}: the copy differs"

    after = {n: stats(cl[n].client()) for n in HOLDERS + FETCHERS}
    served = {n: after[n]["tcp_served"] - mid[n]["tcp_served"] for n in HOLDERS}
    fetches = OBJECTS * len(FETCHERS)
    assert sum(1 for v in served.values() if v > 0) > 1, f"one holder served all: {served}"

    # A fetcher may also have relayed part of an object to another (PART answers).
    up = sum(after[n]["transfer_uploaded_bytes"] - mid[n]["transfer_uploaded_bytes"]
             for n in HOLDERS) + sum(
        after[n]["transfer_uploaded_bytes"] - before[n]["transfer_uploaded_bytes"]
        for n in FETCHERS)
    down = sum(after[n]["transfer_downloaded_bytes"] - before[n]["transfer_downloaded_bytes"]
               for n in FETCHERS)
    assert up == fetches * SIZE, "each copy was sent once, whole"
    assert down == fetches * SIZE, "the fetchers received each copy once, whole"
    # Holders, and fetchers relaying to each other, may answer BUSY.
    redirects = sum(after[n]["transfer_redirects"] - before[n]["transfer_redirects"]
                    for n in HOLDERS + FETCHERS)
    redirected = sum(after[n]["transfer_redirected"] - before[n]["transfer_redirected"]
                     for n in HOLDERS + FETCHERS)
    assert redirects == redirected, "every BUSY sent was taken as a redirect"

