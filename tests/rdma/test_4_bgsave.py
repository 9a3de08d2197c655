"""BGSAVE forks redis-server; the arena and the stream buffers are registered with the RDMA
device. The fork must neither fail nor break RDMA: a save started on both the owner
and the requester while an RDMA READ is moving data between them completes with
status ok, the fetch in flight completes byte-exact, and fetches in both directions
and on both paths work afterwards.
"""

import threading
import time

from objhelpers import KIB, MIB, fetch, payload, stats, wait_locations, wait_until
from rdmahelpers import assert_same_object, delete_everywhere, put, put_published

SAVE_TIMEOUT = 120.0


def persistence(client):
    text = client.execute_command("INFO", "persistence").decode()
    return dict(ln.split(":", 1) for ln in text.splitlines() if ":" in ln)


def start_bgsave(client):
    """BGSAVE once a new second has begun since the last save (so LASTSAVE can show
    the new one); returns the state before it."""
    last = int(client.execute_command("LASTSAVE"))
    wait_until(lambda: int(time.time()) > last, 3.0, 0.05, what="a new second")
    before = {"lastsave": last, "saves": int(persistence(client).get("rdb_saves", -1))}
    reply = client.execute_command("BGSAVE")
    assert reply in (b"Background saving started", b"OK"), f"BGSAVE answered {reply!r}"
    return before


def finish_bgsave(node, client, before):
    """Wait (bounded) for the save started after `before`; it must have succeeded."""
    def done():
        p = persistence(client)
        return p["rdb_bgsave_in_progress"] == "0" and int(client.execute_command(
            "LASTSAVE")) > before["lastsave"]

    wait_until(done, SAVE_TIMEOUT, 0.1, what=f"BGSAVE on {node.name} to finish")
    p = persistence(client)
    assert p["rdb_last_bgsave_status"] == "ok", f"BGSAVE on {node.name}: {p}"
    if before["saves"] >= 0:
        assert int(p["rdb_saves"]) == before["saves"] + 1
    assert node.alive(), f"node {node.name} died during BGSAVE"


def test_bgsave_on_both_ends_of_an_rdma_read(cluster, uid):
    na, nb = cluster["A"], cluster["B"]
    a, b = na.client(), nb.client()
    data = payload(32 * MIB, seed=400)
    put_published(na, a, uid, data, b"saved", watcher=b)
    a0 = stats(a)
    result = {}

    def fetcher():
        try:
            result["res"] = fetch(nb.client(), uid, via="rdma", timeout=120000)
        except Exception as e:
            result["res"] = e

    t = threading.Thread(target=fetcher, daemon=True)
    t.start()
    wait_until(lambda: stats(a)["rdma_served_rndv"] > a0["rdma_served_rndv"], 60.0, 0.005,
               what="A to start serving the rendezvous")
    before_b = start_bgsave(b)
    before_a = start_bgsave(a)
    overlapped = t.is_alive()

    finish_bgsave(nb, b, before_b)
    finish_bgsave(na, a, before_a)
    t.join(180.0)
    assert not t.is_alive(), "the fetch did not finish within 180s"
    assert result["res"] == ["OK"], (f"fetch during BGSAVE: {result['res']} (the fork "
                                     f"{'overlapped' if overlapped else 'came after'} the read)")
    assert_same_object(nb, b, uid, data, b"saved")
    delete_everywhere([a, b], uid)


def test_rdma_fetches_work_after_bgsave_in_both_directions(cluster, uid):
    na, nb = cluster["A"], cluster["B"]
    a, b = na.client(), nb.client()
    before = [start_bgsave(a), start_bgsave(b)]
    finish_bgsave(na, a, before[0])
    finish_bgsave(nb, b, before[1])
    objs = []
    for src, dst, tag in ((na, nb, b"AtoB"), (nb, na, b"BtoA")):
        for size in (4 * KIB, 2 * MIB):
            oid = uid(tag + b"%d" % size)
            data = payload(size, seed=size ^ len(tag))
            put(src, src.client(), oid, data, tag)
            objs.append((src, dst, oid, data, tag))
    for src, dst, oid, data, tag in objs:
        wait_locations(dst.client(), oid, [src.name], timeout=30.0)
    for src, dst, oid, data, tag in objs:
        dc = dst.client()
        assert fetch(dc, oid, via="rdma", timeout=120000) == ["OK"], (src.name, dst.name, oid)
        assert_same_object(dst, dc, oid, data, tag)
    for node in (na, nb):
        assert "Background saving terminated with success" in node.log()
    delete_everywhere([a, b], *[o[2] for o in objs])
