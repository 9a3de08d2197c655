"""Named versions and the cluster-wide delete, as scenarios that run the same on
both directory kinds (one Redis: tests/server/test_versions.py; a Redis Cluster:
tests/server/test_rediscluster_versions.py). `nodes` maps a node name to a started
node (ClusterNode). A version v of a name is a manifest object whose bytes name v
and its parts, and parts whose bytes name v too, so a reader can tell a whole
version from a mixed one by reading them. No assertion here depends on time: a
deadline only stops a hang.
"""

import threading

from objhelpers import fetch, locations, nodes as node_view, read_arena, redis_blocked_clients
from objhelpers import reply_map, stats
from objhelpers import wait_until

# Long enough to never be the verdict on a loaded machine; it only stops a hang.
HANG = 120.0
HANG_MS = int(HANG * 1000)


def manifest_id(name, v):
    return name + b":m:" + str(v).encode()


def part_id(name, v, k):
    return name + b":p:" + str(v).encode() + b":" + str(k).encode()


def manifest_bytes(name, v, parts):
    return b"manifest " + name + b" " + str(v).encode() + b" " + b",".join(parts)


def put(client, oid, data):
    assert client.execute_command("OBJ.PUT", oid, data) == b"OK"


def put_version(client, name, v, nparts=2, shared=()):
    """Puts the parts and the manifest of version v on client's node; returns
    (manifest id, part ids). shared: ids of existing parts it names as well."""
    parts = [part_id(name, v, k) for k in range(nparts)]
    for p in parts:
        put(client, p, b"part of " + name + b" version " + str(v).encode() + b" " + p)
    parts += list(shared)
    mid = manifest_id(name, v)
    put(client, mid, manifest_bytes(name, v, parts))
    return mid, parts


def wait_published(client, ids):
    """Waits until the directory locates every id (publishes are asynchronous)."""
    for oid in ids:
        wait_until(lambda: locations(client, oid), HANG, what=f"{oid!r} located")


def publish(client, name, v, retain=None, nparts=2, shared=()):
    """Puts version v on client's node and publishes it; returns (manifest, parts)."""
    mid, parts = put_version(client, name, v, nparts, shared)
    wait_published(client, [mid, *parts])
    args = ["OBJ.VPUBLISH", name, v, mid]
    if retain is not None:
        args += ["RETAIN", retain]
    args += ["PARTS", *parts]
    assert client.execute_command(*args) == b"OK"
    return mid, parts


def listed(client):
    """Every id OBJ.LIST shows on client's node."""
    out, cursor = set(), b"0"
    while True:
        cursor, ids = client.execute_command("OBJ.LIST", cursor, "COUNT", 1000)
        out.update(ids)
        if cursor in (b"0", 0):
            return out


def read_whole_version(client, name, v, mid):
    """Fetches version v's manifest to client's node and checks it is v's."""
    assert mid == manifest_id(name, v), f"version {v} answered manifest {mid!r}"
    assert fetch(client, mid, timeout=HANG_MS) == ["OK"]
    body = client.execute_command("OBJ.GET", mid)
    assert body.startswith(b"manifest " + name + b" " + str(v).encode() + b" "), (
        f"manifest of version {v} reads {body[:80]!r}")


def readers_follow_every_whole_version(nodes, writer, readers, name, first=5, count=20):
    """Readers on the named nodes block on NEWER first; all wake with first+1;
    then the writer publishes first+2 .. first+count as fast as it can while
    each reader follows with NEWER its last, and every answer is one whole
    version above the last one seen, ending at first+count."""
    w = nodes[writer].client()
    publish(w, name, first)
    last = first + count
    seen = {r: [] for r in readers}
    failures = []
    woke = {r: threading.Event() for r in readers}

    def follow(rname):
        c = nodes[rname].client(timeout=HANG + 10)
        v = first
        try:
            while v < last:
                ver, mid = c.execute_command("OBJ.VLATEST", name, "NEWER", v, "TIMEOUT",
                                             HANG_MS)
                assert ver > v, f"NEWER {v} answered {ver}"
                read_whole_version(c, name, ver, mid)
                seen[rname].append(ver)
                woke[rname].set()
                v = ver
        except Exception as e:  # reported by the test
            failures.append(f"reader on {rname}: {e!r}")
            woke[rname].set()

    threads = [threading.Thread(target=follow, args=(r,), daemon=True) for r in readers]
    for t in threads:
        t.start()
    for r in readers:
        probe = nodes[r].client()
        wait_until(lambda: redis_blocked_clients(probe) >= 1, HANG, what=f"reader on {r} blocked")
    publish(w, name, first + 1)
    for r in readers:
        assert woke[r].wait(HANG), f"reader on {r} did not wake"
    for v in range(first + 2, last + 1):
        publish(w, name, v, nparts=1)
    for t in threads:
        t.join(HANG)
        assert not t.is_alive(), "a reader is still blocked"
    assert not failures, failures
    for r in readers:
        assert seen[r][0] == first + 1, f"reader on {r} first woke with {seen[r][0]}"
        assert seen[r][-1] == last, f"reader on {r} ended at {seen[r][-1]}"
        assert seen[r] == sorted(set(seen[r])), f"reader on {r} saw {seen[r]}"


def retention_deletes_old_versions_everywhere(nodes, writer, readers, name):
    """RETAIN 2: the versions beyond the two newest disappear from the directory
    and their objects from every node that held them, replicas included (OBJ.LIST
    shows none), while a part two versions share stays; a reader's pin keeps its
    bytes readable until released."""
    w = nodes[writer].client()
    put(w, name + b":shared", b"a part every version names")
    shared = (name + b":shared",)
    old = [publish(w, name, v, retain=2, shared=shared) for v in (1, 2)]
    pinner = nodes[readers[0]].client()
    for r in readers:
        c = nodes[r].client()
        for mid, parts in old:
            assert fetch(c, mid, *parts, timeout=HANG_MS) == ["OK"] * (1 + len(parts))
    pinned_id = old[0][1][0]
    pin = reply_map(pinner.execute_command("OBJ.PIN", pinned_id))
    pinned_bytes = b"part of " + name + b" version 1 " + pinned_id
    publish(w, name, 3, retain=2, shared=shared)

    assert w.execute_command("OBJ.VLIST", name) == [[2, manifest_id(name, 2)],
                                                    [3, manifest_id(name, 3)]]
    gone = {old[0][0], *old[0][1]} - set(shared)
    for n in [writer, *readers]:
        c = nodes[n].client()
        wait_until(lambda: not (listed(c) & gone), HANG, what=f"version 1 gone from {n}")
        assert shared[0] in listed(c), f"the shared part left {n}"
        assert {old[1][0], *old[1][1]} <= listed(c), f"version 2 left {n}"
    for oid in gone:
        assert locations(w, oid) == [], f"{oid!r} is still located"
    st = stats(pinner)
    assert read_arena(st["arena_path"], pin["offset"], len(pinned_bytes)) == pinned_bytes
    assert st["objects_pinned"] == 1
    assert pinner.execute_command("OBJ.RELEASE", pinned_id) == b"OK"
    assert stats(pinner)["objects_pinned"] == 0


def killed_writer_leaves_no_version(nodes, writer, reader, name, spawn_writer):
    """A writer process that put a version's parts and manifest and was killed
    with SIGKILL before OBJ.VPUBLISH leaves the name at its previous version:
    nothing of the new one is visible, and a reader waiting for it times out."""
    w = nodes[writer].client()
    publish(w, name, 1)
    proc = spawn_writer(nodes[writer].port, name, 2)
    proc.kill()
    proc.wait(HANG)
    r = nodes[reader].client()
    assert r.execute_command("OBJ.VLATEST", name) == [1, manifest_id(name, 1)]
    assert r.execute_command("OBJ.VLIST", name) == [[1, manifest_id(name, 1)]]
    for args, code in ((("OBJ.VGET", name, 2), "NOTFOUND"),
                       (("OBJ.VLATEST", name, "NEWER", 1, "TIMEOUT", 200), "TIMEOUT")):
        try:
            got = r.execute_command(*args)
        except Exception as e:
            assert str(e).startswith(code), f"{args}: {e}"
        else:
            raise AssertionError(f"{args} answered {got!r}")


def purge_removes_every_copy(nodes, owner, holders, away, name, lose_log=None):
    """OBJ.PURGE from a holder deletes the object on its owner and every replica,
    the directory forgets it, and a node that was stopped (SIGSTOP) the whole
    time, long enough to drop out of the directory (the owner itself, or a
    holder of a replica), deletes its copy when it comes back instead of
    publishing it again. lose_log: called while that node
    is stopped to empty the purge log, so that only the tombstone its re-publish
    meets can tell it."""
    oid = name + b":obj"
    o = nodes[owner].client()
    put(o, oid, b"to be purged " + oid)
    wait_published(o, [oid])
    for n in [*holders, away]:
        if n != owner:
            assert fetch(nodes[n].client(), oid, timeout=HANG_MS) == ["OK"]
    a = nodes[away]
    a.sigstop()
    try:
        h = nodes[holders[0]].client()
        wait_until(lambda: away not in node_view(h), HANG,
                   what=f"{away} dropped out of the directory")
        assert h.execute_command("OBJ.PURGE", oid, name + b":never-existed") == 1
        for n in [owner, *holders]:
            if n == away:
                continue
            c = nodes[n].client()
            wait_until(lambda: c.execute_command("OBJ.EXISTS", oid) == 0, HANG,
                       what=f"{oid!r} gone from {n}")
        assert locations(h, oid) == []
        if lose_log is not None:
            lose_log()
    finally:
        a.sigcont()
    c = a.client()
    wait_until(lambda: c.execute_command("OBJ.EXISTS", oid) == 0, HANG,
               what=f"{oid!r} gone from {away} after it came back")
    wait_until(lambda: away in node_view(h), HANG, what=f"{away} registered again")
    assert locations(h, oid) == [], f"{away} brought {oid!r} back"
    assert oid not in listed(c)
