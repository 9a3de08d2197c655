"""Copies over real links (tests/lib/netns.py): nodes in network namespaces of their own,
each behind a rate-limited link to one bridge, where what the links carry matters.

- A put with REPLICAS 3 of 32 MiB on 400 Mbit/s links: the copies pipeline over the
  relay chain, so the writer's uplink carries about one copy (fewer than two), and
  every copy is byte-exact when the put answers 3.
- The owner's link is cut (a partition: no FIN, no RST) past its node-ttl and healed:
  the others took ownership and repaired meanwhile; after the heal each object has one
  owner, two counting copies and one generation everywhere.
- A drain over the links: every primary leaves the node, and the node's uplink carries
  each object once.

Every cluster is stopped and checked at the end, also on failure (make_netns_cluster:
no death the test did not inflict, no crash or sanitizer report, nothing left behind).
Skipped, as the broadcast tests are, where namespaces cannot be made (CI runs the
server suite as root).
"""

import pytest
from redis.exceptions import ResponseError

from netns import netns_problem
from objhelpers import (
    MIB,
    counting,
    drain,
    holders_now,
    locate,
    one_owner_one_generation,
    payload,
    sha256,
    wait_each,
    wait_nodes,
)

pytestmark = pytest.mark.skipif(netns_problem() is not None,
                                reason=f"namespaces: {netns_problem()}")
HANG = 180.0
REPAIR_ARGS = ["repair-interval", "1000"]


def lab(make_netns_cluster, n, rate="400mbit", memory="256mb", extra=()):
    c = make_netns_cluster(n, rate=rate, memory=memory, burst="512kb", latency="100ms",
                           extra_args=REPAIR_ARGS + list(extra))
    return c, {name: c[name].client(120.0) for name in c.names}


def test_three_copies_pipeline_so_the_writer_sends_about_one(make_netns_cluster):
    c, clients = lab(make_netns_cluster, 4)
    size = 32 * MIB
    data = payload(size, seed=32)
    before = {n: c[n].stats() for n in c.names}
    assert clients["n1"].execute_command("OBJ.PUT", b"three", data, "REPLICAS", 3,
                                         "WAIT", 120000) == 3
    held = counting(holders_now(clients, b"three"))
    assert len(held) == 3 and held["n1"][0] == "primary", held
    for n in held:
        assert sha256(clients[n].execute_command("OBJ.GET", b"three")) == sha256(data), n
    after = {n: c[n].stats() for n in c.names}
    up = {n: after[n]["transfer_uploaded_bytes"] - before[n]["transfer_uploaded_bytes"]
          for n in c.names}
    down = {n: after[n]["transfer_downloaded_bytes"] - before[n]["transfer_downloaded_bytes"]
            for n in c.names}
    assert sum(down.values()) == 2 * size, f"two copies received, each once: {down}"
    assert up["n1"] < 2 * size, f"the writer sent both copies itself: {up}"
    relayed = sum(after[n]["transfer_relayed"] - before[n]["transfer_relayed"] for n in c.names)
    assert relayed > 0, f"no copy went over the relay chain: {up}"


def test_a_partitioned_owner_heals_to_one_owner_and_one_generation(make_netns_cluster):
    c, clients = lab(make_netns_cluster, 4, rate=None, memory="128mb")
    objs = {}
    for i in range(30):
        oid, data = b"p%02d" % i, payload(20000 + i, seed=i)
        assert clients["n1"].execute_command("OBJ.PUT", oid, data, "REPLICAS", 2) == 2
        objs[oid] = data
    others = {n: clients[n] for n in ("n2", "n3", "n4")}

    def listed(oid):
        try:
            d = locate(clients["n2"], oid)
        except ResponseError as e:
            return False, str(e)
        return d["owner"] == "n1" and len(d["protected"]) == 2, d

    wait_each(list(objs), listed, "n1 and one other listed", HANG)

    c.lab.cut(c["n1"].link)
    try:
        wait_nodes(clients["n2"], others, timeout=60)

        def repaired(oid):
            try:
                d = locate(clients["n2"], oid)
            except ResponseError as e:
                return False, str(e)
            ok = (len(d["protected"]) == 2 and "n1" not in d["protected"]
                  and d["owner"] in d["protected"])
            return ok, d

        wait_each(list(objs), repaired, "repaired around the cut owner", HANG)
    finally:
        c.lab.heal(c["n1"].link)
    wait_nodes(clients["n2"], clients, timeout=60)
    one_owner_one_generation(clients, objs, 2, "one owner after the heal")


def test_a_drain_over_links_sends_each_object_once(make_netns_cluster):
    c, clients = lab(make_netns_cluster, 4)
    objs = {}
    for i in range(8):
        oid, data = b"d%d" % i, payload(4 * MIB + i, seed=40 + i)
        assert clients["n1"].execute_command("OBJ.PUT", oid, data) == b"OK"
        objs[oid] = data
    before = c["n1"].stats()
    rep = drain(clients["n1"], "WAIT", 300000)
    assert rep["state"] == "drained" and rep["objects_left"] == 0, rep
    assert rep["objects_moved"] == len(objs), rep
    sent = c["n1"].stats()["transfer_uploaded_bytes"] - before["transfer_uploaded_bytes"]
    total = sum(len(d) for d in objs.values())
    assert total <= sent < 2 * total, f"n1 sent {sent} bytes to move {total}"

    def moved(oid):
        try:
            d = locate(clients["n2"], oid)
        except ResponseError as e:
            return False, str(e)
        if d["owner"] not in ("n2", "n3", "n4") or d["protected"] != [d["owner"]]:
            return False, d
        got = clients[d["owner"]].execute_command("OBJ.GET", oid)
        assert sha256(got) == sha256(objs[oid]), oid
        return True, d

    wait_each(list(objs), moved, "n1's objects owned by others", HANG)
