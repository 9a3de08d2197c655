"""Many OBJ.FETCH clients at once into one node: distinct ids from two sources arrive
byte-exact, and concurrent fetches of the same id share a single transfer.

Each client thread has its own connection (blocked clients are per connection), and
a barrier releases them together so the requests really overlap.
"""

import threading

import pytest

from objhelpers import KIB, MIB, fetch, payload, sha256, stats, wait_locations


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B", "C"), layout="separate", memory="160mb")


def run_clients(n, work, timeout=60.0):
    """Run work(i) in n threads released together; returns the results by index and
    re-raises the first exception."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def body(i):
        try:
            barrier.wait(timeout=10)
            results[i] = work(i)
        except Exception as e:  # reported below
            errors.append((i, e))

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), f"clients still running after {timeout}s"
    if errors:
        i, e = errors[0]
        raise AssertionError(f"client {i} failed ({len(errors)} failed in all): {e!r}") from e
    return results


def test_32_clients_fetch_distinct_ids_from_two_sources(cl, uid):
    a, c, b = cl["A"].client(), cl["C"].client(), cl["B"].client()
    objs = []
    for i in range(64):
        oid, data, meta = uid(b"%02d" % i), payload(256 * KIB, seed=1000 + i), b"part=%d" % i
        src = a if i % 2 == 0 else c
        assert src.execute_command("OBJ.PUT", oid, data, "META", meta) == b"OK"
        objs.append((oid, data, meta, "A" if i % 2 == 0 else "C"))
    for oid, _, _, src in objs:
        wait_locations(b, oid, [src])
    b0, a0, c0 = stats(b), stats(a), stats(c)
    clients = [cl["B"].client() for _ in range(32)]

    def work(i):
        mine = [objs[i][0], objs[i + 32][0]]
        return fetch(clients[i], *mine, timeout=30000)

    results = run_clients(32, work)
    assert all(r == ["OK", "OK"] for r in results), [r for r in results if r != ["OK", "OK"]]

    for oid, data, meta, _ in objs:
        got, got_meta = b.execute_command("OBJ.GET", oid, "WITHMETA")
        assert sha256(got) == sha256(data) and got_meta == meta, f"{oid!r:.60} differs"
    b1, a1, c1 = stats(b), stats(a), stats(c)
    assert b1["tcp_fetches"] - b0["tcp_fetches"] == 64
    assert b1["fetch_requests"] - b0["fetch_requests"] == 32
    assert a1["tcp_served"] - a0["tcp_served"] == 32
    assert c1["tcp_served"] - c0["tcp_served"] == 32
    assert b1["objects_created"] == 0 and b1["tcp_fetch_failures"] == b0["tcp_fetch_failures"]
    for oid, _, _, src in objs:
        for x in (b, a if src == "A" else c):
            x.execute_command("OBJ.DEL", oid)


def test_16_clients_fetching_one_id_share_one_transfer(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    data = payload(64 * MIB, seed=16)
    assert a.execute_command("OBJ.PUT", uid, data, "META", b"shared") == b"OK"
    wait_locations(b, uid, ["A"])
    b0, a0 = stats(b), stats(a)
    clients = [cl["B"].client() for _ in range(16)]

    results = run_clients(16, lambda i: fetch(clients[i], uid, timeout=30000))

    assert results == [["OK"]] * 16, results
    got, meta = b.execute_command("OBJ.GET", uid, "WITHMETA")
    assert sha256(got) == sha256(data) and meta == b"shared"
    b1, a1 = stats(b), stats(a)
    assert b1["tcp_fetches"] - b0["tcp_fetches"] == 1, "one transfer for all 16 clients"
    assert b1["fetch_shared"] - b0["fetch_shared"] >= 1, "no fetch joined the running transfer"
    assert a1["tcp_served"] - a0["tcp_served"] == 1
    assert b1["objects_created"] == 0
    for x in (a, b):
        x.execute_command("OBJ.DEL", uid)
