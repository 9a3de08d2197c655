"""Rendezvous fetches cancelled while their FETCH is on the wire must not outlive
their answer. With A stopped (SIGSTOP), B's RDMA fetches of large objects time out
after their FETCHes were sent; when A runs again it answers each with an RNDV. B must
release A's pin (DONE) and forget each cancelled transfer: one kept listed holds its
place in the connection's window (128 requests), and a full window of them would stall
every later RDMA fetch from A for good, while TCP still worked.
"""

from redis.exceptions import ResponseError

from objhelpers import KIB, codes, err_code, fetch, payload, stats, wait_locations, wait_until
from rdmahelpers import put, wait_unpinned

N_STALLED = 150  # more than the connection's window of 128 requests
SIZE = 32 * KIB  # the default rdma-read-min: every one goes by rendezvous


def test_cancelled_rendezvous_fetches_free_their_place_in_the_window(cluster, uid):
    na, nb = cluster["A"], cluster["B"]
    a, b = na.client(), nb.client()
    ids = [uid(b"stalled-%d" % i) for i in range(N_STALLED)]
    for i, oid in enumerate(ids):
        put(na, a, oid, payload(SIZE, seed=i))
    for oid in ids:
        wait_locations(b, oid, ["A"], timeout=30.0)
    warm = uid(b"warm")
    put(na, a, warm, payload(SIZE, seed=999))
    wait_locations(b, warm, ["A"], timeout=30.0)
    # The RDMA connection B -> A is up before A stops, so the FETCHes are sent.
    assert fetch(b, warm, via="rdma", timeout=60000) == ["OK"]
    served0 = stats(a)["rdma_served_rndv"]

    na.sigstop()
    try:
        res = codes(fetch(b, *ids, via="rdma", timeout=2000))
    except ResponseError as e:  # the whole command timed out
        res = [err_code(e)]
    finally:
        na.sigcont()

    assert set(res) == {"TIMEOUT"}, f"fetches while A was stopped: {set(res)}"
    # A answers every FETCH that reached it, up to the window: the precondition.
    wait_until(lambda: stats(a)["rdma_served_rndv"] - served0 >= 128, 60.0, 0.1,
               what="A answered the window of cancelled FETCHes")
    wait_unpinned(a, timeout=60.0)  # B said DONE to every one of them
    wait_locations(b, ids[0], ["A"], timeout=30.0)  # A is listed again

    # The window is free again: every object comes over RDMA.
    res = fetch(b, *ids, via="rdma", timeout=60000)
    assert codes(res) == ["OK"] * N_STALLED, f"RDMA fetches from A after the stall: {set(res)}"
    wait_unpinned(a, timeout=60.0)
