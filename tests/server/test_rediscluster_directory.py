"""The directory on a real Redis Cluster: 3 masters and 3 replicas (Debian's
redis-server --cluster-enabled yes, joined by redis-cli --cluster create) on loopback,
and 4 objstore nodes whose `directory` names two of its nodes as seeds.

What it pins down: the nodes register and see each other; objects published on one
node are located and fetched byte-exact on the others; the directory keys spread
over all three masters (2 keys per object, the node registry in 16 bucket sets); a
slot moved between masters in the middle of the traffic is followed through ASK and
then MOVED; and a master killed with SIGKILL in the middle of a stream of fetches is
replaced by its replica, after which puts and fetches work and the old objects are
locatable again (the nodes re-publish what the shard lost).
"""

import threading
import time

import pytest
from redis.exceptions import ResponseError

from objhelpers import codes, err_code, fetch, locate, payload, sha256, stats, wait_locations
from objhelpers import wait_nodes, wait_until
from objnodes import (ClusterNode, RedisCluster, finish, key_slot, registry_key, start_nodes,
                      write_secret_file)

NAMES = ("A", "B", "C", "D")


@pytest.fixture(scope="module")
def rc():
    c = RedisCluster(masters=3, replicas=1)
    try:
        yield c.start()
    finally:
        c.cleanup()


def start_objstore_nodes(rcluster, names, memory="64mb", heartbeat=200, node_ttl=3000):
    nodes = {n: ClusterNode(n, rcluster.seeds, memory=memory, heartbeat=heartbeat,
                            node_ttl=node_ttl) for n in names}
    start_nodes(list(nodes.values()))
    return nodes


@pytest.fixture(scope="module")
def cl(rc):
    nodes = start_objstore_nodes(rc, NAMES)
    try:
        for n in NAMES:
            wait_nodes(nodes[n].client(), NAMES, timeout=15.0)
        yield nodes
    finally:
        finish(list(nodes.values()))


def put(client, oid, data, meta=b"m"):
    assert client.execute_command("OBJ.PUT", oid, data, "META", meta) == b"OK"


def get_exact(client, oid, data):
    got = client.execute_command("OBJ.GET", oid)
    assert len(got) == len(data) and sha256(got) == sha256(data), (
        f"{oid!r:.60}: {len(got)} bytes, expected {len(data)}, contents differ")


def drop(nodes, names, *oids):
    """OBJ.DEL each id on each named node that holds it."""
    for n in names:
        c = nodes[n].client()
        for oid in oids:
            if c.execute_command("OBJ.EXISTS", oid):
                c.execute_command("OBJ.DEL", oid)


def objstore_keys(rc, port, match=b"objstore:*"):
    c = rc.client(port)
    try:
        return set(c.scan_iter(match=match, count=1000))
    finally:
        c.close()


def wait_drained(nodes, timeout=30.0):
    """Every node's directory queue is empty and its link is up."""
    for n in nodes.values():
        wait_until(lambda: (lambda s: s["directory_queued"] == 0 and s["directory_connected"] == 1)(
            n.stats()), timeout, interval=0.05, what=f"node {n.name}'s directory queue to drain")


def test_nodes_register_on_the_cluster_and_see_each_other(cl):
    for viewer in NAMES:
        view = wait_nodes(cl[viewer].client(), NAMES, timeout=10.0)
        for name, row in view.items():
            assert row["tcp_port"] == cl[name].transfer_port
    for name in NAMES:
        st = cl[name].stats()
        assert st["directory_connected"] == 1
        assert st["directory_errors"] == 0, st.get("directory_last_error")


def test_put_locate_fetch_byte_exact_across_nodes(cl, uid):
    sizes = [0, 1, 4096, 65537, 3 << 20]
    objs = {}
    for i, size in enumerate(sizes):
        src = NAMES[i % 4]
        oid = uid(b"%d" % i)
        objs[oid] = (src, payload(size, 40 + i))
        put(cl[src].client(), oid, objs[oid][1])
    for i, (oid, (src, data)) in enumerate(objs.items()):
        dst = NAMES[(i + 1) % 4]
        c = cl[dst].client()
        wait_locations(c, oid, [src], timeout=10.0)
        got = locate(c, oid)
        assert got["size"] == len(data) and got["meta_size"] == 1
        assert fetch(c, oid) == ["OK"]
        get_exact(c, oid, data)
        wait_locations(cl[src].client(), oid, sorted({src, dst}), timeout=10.0)
    drop(cl, NAMES, *objs)


def test_directory_keys_spread_over_all_masters(rc, cl, uid):
    """The scaled-down form of the million-object measurement (bench/directory-cluster.sh
    publishes the million): exactly 3 keys per object (meta, locations, holders), on
    every master."""
    n = 3000
    per_node = n // len(NAMES)
    for k, name in enumerate(NAMES):
        c = cl[name].client()
        pipe = c.pipeline(transaction=False)
        for i in range(per_node):
            pipe.execute_command("OBJ.PUT", uid(b"%d.%d" % (k, i)), b"")
        assert all(r == b"OK" for r in pipe.execute())
    wait_drained(cl)
    prefix = b"objstore:{" + uid(b"")

    def keys_per_master():
        return {p: objstore_keys(rc, p, prefix.replace(b"*", b"\\*") + b"*")
                for p in rc.master_ports()}

    # A drained queue may still have its last round in flight: wait for it.
    wait_until(lambda: sum(len(k) for k in keys_per_master().values()) >= 3 * n, 10.0,
               what=f"the directory keys of all {n} objects")
    per_master = keys_per_master()
    assert len(per_master) == 3
    total = sum(len(k) for k in per_master.values())
    assert total == 3 * n, f"{total} directory keys for {n} objects (expected 3 per object)"
    for port, keys in per_master.items():
        assert len(keys) > n // 3 * 3 // 2, (
            f"master {port} holds {len(keys)} of {total} object keys: not spread")
    # An object's keys share a slot, so a lookup is one round trip to one shard.
    for keys in per_master.values():
        for key in list(keys)[:50]:
            twin = key[:-3] + b"meta" if key.endswith(b":loc") else key[:-4] + b"loc"
            assert twin in keys
    # The node registry is spread: each node's bucket lives on the master of its slot.
    buckets = {registry_key(name) for name in NAMES}
    for b in buckets:
        assert b in objstore_keys(rc, rc.master_of(b), b)
    for k, name in enumerate(NAMES):
        pipe = cl[name].client().pipeline(transaction=False)
        for i in range(per_node):
            pipe.execute_command("OBJ.DEL", uid(b"%d.%d" % (k, i)))
        pipe.execute()
    wait_drained(cl)


def id_in_slot(base, slot, tries=200000):
    """An id derived from base whose directory keys hash to slot."""
    for i in range(tries):
        oid = base + b":%d" % i
        if key_slot(b"objstore:{" + oid + b"}:meta") == slot:
            return oid
    raise AssertionError(f"no id in slot {slot} after {tries} tries")


def cluster_id(rc, port):
    c = rc.client(port)
    try:
        return c.execute_command("CLUSTER", "MYID").decode()
    finally:
        c.close()


def test_a_slot_moved_between_masters_is_followed_through_ask_and_moved(rc, cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    old = uid(b"old")
    data_old, data_new = payload(70000, 3), payload(50000, 4)
    put(a, old, data_old)
    wait_locations(b, old, ["A"], timeout=10.0)
    slot = key_slot(b"objstore:{" + old + b"}:meta")
    src = rc.master_of(b"objstore:{" + old + b"}:meta")
    dst = next(p for p in rc.master_ports() if p != src)
    src_id, dst_id = cluster_id(rc, src), cluster_id(rc, dst)
    s, d = rc.client(src), rc.client(dst)
    try:
        d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        # Half-way: keys not yet moved are served by the source; a new key of the
        # slot is refused there with ASK and written to the target after ASKING.
        new = id_in_slot(uid(b"new"), slot)
        put(a, new, data_new)
        wait_locations(b, new, ["A"], timeout=10.0)
        pipe = d.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.execute_command("EXISTS", b"objstore:{" + new + b"}:meta")
        pipe.execute_command("ASKING")
        pipe.execute_command("ZSCORE", b"objstore:{" + new + b"}:prot", b"A")
        got = pipe.execute()
        assert got[1] == 1, "the new object's keys did not go to the importing master"
        node_key = b"objstore:node:A"
        boot = rc.client(rc.master_of(node_key)).hget(node_key, b"boot")
        assert got[3] is not None and int(float(got[3])) == int(boot), (got, boot)
        assert locate(b, old)["locations"] == ["A"]

        # The move completes: the remaining keys migrate, the slot changes owner,
        # and the nodes' maps are stale: MOVED.
        keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        if keys:
            s.execute_command("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
        for p in rc.master_ports():
            rc.client(p).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        wait_until(lambda: rc.master_of(b"objstore:{" + old + b"}:meta") == dst, 10.0,
                   what="the cluster to agree on the slot's new owner")
        for viewer in NAMES:
            c = cl[viewer].client()
            assert locate(c, old)["size"] == len(data_old)
            assert locate(c, new)["size"] == len(data_new)
        assert fetch(b, old, new) == ["OK", "OK"]
        get_exact(b, old, data_old)
        get_exact(b, new, data_new)
    finally:
        s.close()
        d.close()
    drop(cl, ("A", "B"), old, new)


def braced_ids(u):
    """Ids whose braces would break a hash tag naively wrapped around them: an empty
    tag ('}' first), a tag of braces, binary bytes. u makes them unique."""
    return [b"}" + u, b"}x" + u, b"{" + u, b"{}" + u, b"}{" + u, b"{a}" + u, b"}}" + u,
            u + b"}", b"\x00}\xff{" + u, b"}\x00\xfe" + u]


def not_found(client, oid):
    try:
        locate(client, oid)
    except ResponseError as e:
        return err_code(e) == "NOTFOUND"
    return False


def keys_holding(rc, part):
    """Every key on every master whose name contains part."""
    found = set()
    for port in rc.master_ports():
        found |= {k for k in objstore_keys(rc, port) if part in k}
    return found


def test_ids_with_any_braces_are_published_and_unpublished_in_one_slot(rc, cl, uid):
    """Every key of an id lands in one slot whatever bytes the id holds: with an id
    starting with '}' (an empty hash tag) the unpublish script's two keys used to
    fall in two slots, the cluster refused it (CROSSSLOT) and the object stayed
    located after its last copy was deleted."""
    a, b = cl["A"].client(), cl["B"].client()
    u = uid(b"")
    ids = braced_ids(u)
    errors0 = stats(a)["directory_errors"]
    for i, oid in enumerate(ids):
        put(a, oid, payload(1000 + i, 70 + i))
    for oid in ids:
        wait_locations(b, oid, ["A"], timeout=10.0)
    assert fetch(b, *ids) == ["OK"] * len(ids)
    for i, oid in enumerate(ids):
        get_exact(b, oid, payload(1000 + i, 70 + i))
        wait_locations(a, oid, ["A", "B"], timeout=10.0)
    assert len(keys_holding(rc, u)) == 3 * len(ids), "three directory keys per object"

    drop(cl, ("A", "B"), *ids)  # A's delete may be DEFERRED behind the send's pin
    wait_drained(cl)
    for oid in ids:
        wait_until(lambda: not_found(b, oid), 10.0, what=f"OBJ.LOCATE {oid!r} NOTFOUND")
    wait_until(lambda: not keys_holding(rc, u), 10.0,
               what=f"no directory key left (left: {sorted(keys_holding(rc, u))[:4]})")
    st = stats(a)
    assert st["directory_errors"] == errors0, st.get("directory_last_error")


def test_objects_are_located_again_after_flushall_on_every_master(rc, cl, uid):
    """The cluster loses every key while the nodes' connections stay up: each node
    finds its registration missing at its next heartbeat and re-publishes, within
    node-ttl (3 s here) plus slack."""
    objs = {}
    for i, name in enumerate(NAMES):
        for k in range(8):
            oid = uid(b"%s.%d" % (name.encode(), k))
            objs[oid] = (name, payload(2000 + 31 * k, 80 + i))
            put(cl[name].client(), oid, objs[oid][1])
    d = cl["D"].client()
    for oid, (holder, _) in objs.items():
        wait_locations(d, oid, [holder], timeout=10.0)

    for port in rc.master_ports():
        rc.client(port).execute_command("FLUSHALL")

    within = cl["A"].node_ttl / 1000 + 3.0
    wait_nodes(d, NAMES, timeout=within)
    for oid, (holder, _) in objs.items():
        wait_locations(d, oid, [holder], timeout=within)
    remote = [oid for oid, (holder, _) in objs.items() if holder != "D"]
    assert fetch(d, *remote) == ["OK"] * len(remote)
    for oid in remote:
        get_exact(d, oid, objs[oid][1])
    drop(cl, NAMES, *objs)


def test_objects_are_located_again_after_flushall_on_a_master_without_the_registration(
        rc, cl, uid):
    """One shard loses every key while the connections stay up, and node A's
    registration (its hash and its registry bucket) lives on the other shards, so
    the heartbeat finds it intact: A's marker on that shard is what tells A, and A
    re-publishes within node-ttl plus slack."""
    home = {rc.master_of(b"objstore:node:A"), rc.master_of(registry_key("A"))}
    victim = next(p for p in rc.master_ports() if p not in home)
    objs, i = {}, 0
    while len(objs) < 8:
        oid = uid(b"%d" % i)
        i += 1
        if rc.master_of(b"objstore:{" + oid + b"}:meta") == victim:
            objs[oid] = payload(3000 + 17 * len(objs), 90 + len(objs))
    a, d = cl["A"].client(), cl["D"].client()
    for oid, data in objs.items():
        put(a, oid, data)
    for oid in objs:
        wait_locations(d, oid, ["A"], timeout=10.0)

    rc.client(victim).execute_command("FLUSHALL")

    within = cl["A"].node_ttl / 1000 + 3.0
    for oid in objs:
        wait_locations(d, oid, ["A"], timeout=within)
    assert fetch(d, *objs) == ["OK"] * len(objs)
    for oid, data in objs.items():
        get_exact(d, oid, data)
    wait_nodes(d, NAMES, timeout=within)
    drop(cl, NAMES, *objs)


def test_directory_password_is_sent_to_every_shard(uid):
    """A cluster with requirepass on every node: nodes with directory-password
    register, and publish to and look up on all three masters."""
    rcp = RedisCluster(masters=3, replicas=1, password="dir-s3cret").start()
    nodes = {}
    try:
        pw_file = write_secret_file(rcp.workdir, "directory-password", "dir-s3cret")
        nodes = {n: ClusterNode(n, rcp.seeds, memory="32mb", heartbeat=200, node_ttl=3000,
                                extra_args=("directory-password-file", pw_file))
                 for n in ("A", "B")}
        start_nodes(list(nodes.values()))
        a, b = nodes["A"].client(), nodes["B"].client()
        wait_nodes(b, ["A", "B"], timeout=15.0)
        masters = set()
        for i in range(60):
            oid = uid(b"%d" % i)
            put(a, oid, payload(100, i))
            masters.add(rcp.master_of(b"objstore:{" + oid + b"}:meta"))
        assert len(masters) == 3
        for i in range(60):
            wait_locations(b, uid(b"%d" % i), ["A"], timeout=10.0)
        assert stats(b)["directory_errors"] == 0

        # Without the password: the shards refuse, lookups say why.
        nodes["C"] = ClusterNode("C", rcp.seeds, memory="32mb", heartbeat=200, node_ttl=3000)
        nodes["C"].start()
        c = nodes["C"].client()
        last = []

        def refused():
            try:
                c.execute_command("OBJ.LOCATE", uid(b"0"))
            except ResponseError as e:
                last[:] = [str(e)]
                return err_code(e) == "UNAVAILABLE" and "NOAUTH" in str(e)
            return False

        wait_until(refused, 10.0, what=f"UNAVAILABLE ... NOAUTH (last: {last})")
        assert stats(c)["directory_connected"] == 0
    finally:
        finish(list(nodes.values()))
        rcp.cleanup()


# ---- failover ------------------------------------------------------------------------------

def test_master_killed_during_fetches_fails_over_and_the_nodes_republish(uid):
    """SIGKILL one master while a client keeps fetching: every fetch either delivers
    the exact bytes or fails with a clean error; while the shard is down its lookups
    answer UNAVAILABLE at once and local commands work; after the replica's
    promotion puts and fetches work and every old object is locatable again."""
    rc = RedisCluster(masters=3, replicas=1).start()
    node_ttl = 6000
    nodes = {}
    try:
        nodes = start_objstore_nodes(rc, NAMES, memory="64mb", heartbeat=300, node_ttl=node_ttl)
        a, c, d = nodes["A"].client(), nodes["C"].client(), nodes["D"].client()
        wait_nodes(d, NAMES, timeout=15.0)
        objs = {uid(b"%d" % i): payload(32768 + i, 60 + i) for i in range(24)}
        for oid, data in objs.items():
            put(a, oid, data)
        for oid in objs:
            wait_locations(c, oid, ["A"], timeout=10.0)
        victim = rc.master_of(b"objstore:{" + next(iter(objs)) + b"}:meta")
        on_victim = [o for o in objs if rc.master_of(b"objstore:{" + o + b"}:meta") == victim]

        results, stop = [], threading.Event()

        def fetch_stream():
            cc = nodes["C"].client(timeout=60)
            while not stop.is_set():
                for oid, data in objs.items():
                    if stop.is_set():
                        break
                    r = fetch(cc, oid, timeout=5000)[0]
                    exact = None
                    if r == "OK":
                        exact = sha256(cc.execute_command("OBJ.GET", oid)) == sha256(data)
                        cc.execute_command("OBJ.DEL", oid)
                    results.append((time.monotonic(), r, exact))

        t = threading.Thread(target=fetch_stream, daemon=True)
        t.start()
        wait_until(lambda: len(results) >= 10, 20.0, what="fetches before the kill")
        rc.kill(victim)
        killed_at = time.monotonic()

        # While the shard is down: its lookups answer UNAVAILABLE (unless the replica
        # was already promoted by the time the answer came), local commands work.
        try:
            locate(d, on_victim[0])
            answer = "found"
        except ResponseError as e:
            answer = err_code(e)
        promoted_already = victim not in rc.master_ports()
        assert answer == "UNAVAILABLE" or (answer == "found" and promoted_already), answer
        put(d, uid(b"local"), b"local bytes")
        assert d.execute_command("OBJ.GET", uid(b"local")) == b"local bytes"

        rc.wait_failover(victim, timeout=30.0)
        promoted_at = time.monotonic()
        assert victim not in rc.master_ports()

        # Old objects are locatable again (the shard's replica may have lost the
        # last writes, the nodes re-publish); bounded generously, timing reported.
        for oid in objs:
            wait_locations(d, oid, ["A"], timeout=3 * node_ttl / 1000,
                           retry_unavailable=True)
        located_at = time.monotonic()
        wait_nodes(d, NAMES, timeout=3 * node_ttl / 1000, retry_unavailable=True)
        # Each node re-reads the map on its own backoff (at most 2 s): fetches count
        # as "after the failover" once every node is connected to every master again.
        for n in nodes.values():
            wait_until(lambda: n.stats()["directory_connected"] == 1, 3 * node_ttl / 1000,
                       interval=0.05, what=f"node {n.name} to reconnect to every master")
        recovered_at = time.monotonic()

        after_promotion = len(results)
        wait_until(lambda: len(results) >= after_promotion + 10, 30.0,
                   what="fetches after the promotion")
        stop.set()
        t.join(60)
        bad = [r for r in results if r[1] == "OK" and not r[2]]
        assert not bad, f"{len(bad)} fetches delivered wrong bytes"
        odd = {codes([r[1]])[0] for r in results} - {"OK", "UNAVAILABLE", "NOTFOUND", "TIMEOUT"}
        assert not odd, f"unexpected fetch results: {odd}"
        late = [r for r in results if r[0] > recovered_at]
        assert late and all(r[1] == "OK" for r in late), late[:5]

        new = uid(b"after")
        put(a, new, payload(100000, 99))
        wait_locations(d, new, ["A"], timeout=10.0)
        assert fetch(d, new) == ["OK"]
        get_exact(d, new, payload(100000, 99))
        print(f"\nfailover: killed master {victim}; promotion after "
              f"{promoted_at - killed_at:.1f}s; old objects locatable "
              f"{located_at - promoted_at:.1f}s after it (node-ttl {node_ttl} ms); "
              f"{sum(1 for r in results if r[1] != 'OK')} of {len(results)} fetches refused "
              f"meanwhile")
        assert stats(d)["directory_connected"] == 1
    finally:
        finish(list(nodes.values()))
        rc.cleanup()
