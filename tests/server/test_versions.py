"""Named versions and the cluster-wide delete with the directory on one Redis
(docs/commands.md, OBJ.VPUBLISH .. OBJ.PURGE; docs/cluster.md, "Versions" and
"Purge"): three nodes sharing a plain directory redis-server.

What it pins down: readers on three nodes blocked on NEWER wake with the next
version and follow a fast writer through whole versions only; RETAIN deletes old
versions on every node while a pinned part stays readable until released; a
writer killed before OBJ.VPUBLISH leaves no version; OBJ.PURGE deletes every copy
and a node stopped at the time does not bring its copy back; ACL key permissions
apply to names and ids; bad input gets a clear error and changes nothing. The
same scenarios run on a Redis Cluster directory in test_rediscluster_versions.py.
"""

import os
import subprocess
import sys

import pytest
from redis.exceptions import ResponseError

from objhelpers import err_code, redis_blocked_clients, start_call, wait_until
from objversions import (HANG, HANG_MS, killed_writer_leaves_no_version, manifest_id, publish,
                         put_version, wait_published,
                         purge_removes_every_copy, put, readers_follow_every_whole_version,
                         retention_deletes_old_versions_everywhere)

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")

# A writer process: puts version v of a name (hex) (its parts and manifest) on the
# node at port, says so, then waits to be killed before it publishes.
WRITER = """
import sys, time
sys.path.insert(0, {lib!r})
from objnodes import Client
from objversions import put_version
c = Client(int(sys.argv[1]), timeout=60)
put_version(c, bytes.fromhex(sys.argv[2]), int(sys.argv[3]))
print("put", flush=True)
time.sleep(600)
c.execute_command("OBJ.VPUBLISH", bytes.fromhex(sys.argv[2]), sys.argv[3], "never")
"""


def spawn_writer(port, name, v):
    """Starts a writer process and returns it once it has put version v."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER.format(lib=LIB), str(port),
                             name.hex(), str(v)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.strip() == "put", f"the writer process said {line!r}"
    return proc


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B", "C"), layout="separate", memory="64mb")


def test_readers_on_three_nodes_follow_a_fast_writer_through_whole_versions(cl, uid):
    readers_follow_every_whole_version(cl, "A", ["A", "B", "C"], uid(b"follow"))


def test_retention_deletes_old_versions_on_every_node_but_a_pin_keeps_its_bytes(cl, uid):
    retention_deletes_old_versions_everywhere(cl, "A", ["B", "C"], uid(b"retain"))


def test_a_writer_killed_before_it_publishes_leaves_no_version(cl, uid):
    killed_writer_leaves_no_version(cl, "B", "C", uid(b"killed"), spawn_writer)


def test_purge_deletes_every_copy_and_a_stopped_node_does_not_bring_it_back(cl, uid):
    purge_removes_every_copy(cl, "A", ["B"], "C", uid(b"purge"))


def test_a_stopped_node_that_missed_the_purge_log_meets_the_tombstone(cl, uid):
    def lose_log():
        d = cl.dir.client()
        assert d.execute_command("XTRIM", "objstore:purgelog", "MAXLEN", 0) >= 1

    purge_removes_every_copy(cl, "A", ["B"], "C", uid(b"tomb"), lose_log=lose_log)


def test_a_stopped_owner_that_missed_the_purge_log_meets_the_tombstone(cl, uid):
    def lose_log():
        d = cl.dir.client()
        assert d.execute_command("XTRIM", "objstore:purgelog", "MAXLEN", 0) >= 1

    purge_removes_every_copy(cl, "C", ["A", "B"], "C", uid(b"tomb-owner"), lose_log=lose_log)


def test_a_tombstone_expires_after_purge_tombstone_ttl(cl, uid):
    a = cl["A"].client()
    oid = uid(b"ttl")
    put(a, oid, b"x")
    wait_published(a, [oid])
    assert a.execute_command("OBJ.PURGE", oid) == 1
    d = cl.dir.client()
    key = b"objstore:{" + oid + b"}:meta"
    assert d.execute_command("HGET", key, "tomb") is not None
    assert 0 < d.execute_command("PTTL", key) <= 86400 * 1000, "default: one day"


def test_vdrop_purges_what_no_other_version_names(cl, uid):
    a, b = cl["A"].client(), cl["B"].client()
    name = uid(b"drop")
    put(a, name + b":shared", b"shared")
    m1, p1 = publish(a, name, 1, shared=(name + b":shared",))
    publish(a, name, 2, shared=(name + b":shared",))
    assert b.execute_command("OBJ.VDROP", name, 1) == b"OK"
    assert b.execute_command("OBJ.VLIST", name) == [[2, manifest_id(name, 2)]]
    assert a.execute_command("OBJ.EXISTS", name + b":shared") == 1
    for oid in [m1, *p1[:-1]]:
        wait_until(lambda: a.execute_command("OBJ.EXISTS", oid) == 0, HANG,
                   what=f"{oid!r} gone with its version")
    assert a.execute_command("OBJ.EXISTS", name + b":shared") == 1
    assert b.execute_command("OBJ.VDROP", name, 2) == b"OK"
    expect_code(b, ("OBJ.VLATEST", name), "NOTFOUND")
    expect_code(b, ("OBJ.VPUBLISH", name, 2, name + b":shared"), "EXISTS")


def expect_code(client, args, code):
    with pytest.raises(ResponseError) as exc:
        client.execute_command(*args)
    assert err_code(exc.value) == code, f"{args}: {exc.value}"


def test_bad_input_gets_a_clear_error_and_changes_nothing(cl, uid):
    a = cl["A"].client()
    name = uid(b"bad")
    m1, parts = publish(a, name, 3)
    put(a, uid(b"plain"), b"an object, not a model")
    big = "9007199254740992"
    table = [
        (("OBJ.VPUBLISH", name, 0, m1), "BADARG"),
        (("OBJ.VPUBLISH", name, -1, m1), "BADARG"),
        (("OBJ.VPUBLISH", name, "x", m1), "BADARG"),
        (("OBJ.VPUBLISH", name, big, m1), "BADARG"),
        (("OBJ.VPUBLISH", name, 3, m1), "EXISTS"),
        (("OBJ.VPUBLISH", name, 2, m1), "EXISTS"),
        (("OBJ.VPUBLISH", name, 4, uid(b"missing")), "NOTFOUND"),
        (("OBJ.VPUBLISH", name, 4, m1, "PARTS", parts[0], uid(b"missing")), "NOTFOUND"),
        (("OBJ.VPUBLISH", name, 4, m1, "RETAIN", 0), "BADARG"),
        (("OBJ.VPUBLISH", name, 4, m1, "RETAIN", "x"), "BADARG"),
        (("OBJ.VPUBLISH", name, 4, m1, "SOMETHING"), "BADARG"),
        (("OBJ.VPUBLISH", "", 4, m1), "BADARG"),
        (("OBJ.VPUBLISH", name, 4, ""), "BADARG"),
        (("OBJ.VLATEST", uid(b"nobody")), "NOTFOUND"),
        (("OBJ.VLATEST", uid(b"plain")), "NOTFOUND"),
        (("OBJ.VLATEST", name, "NEWER", "x"), "BADARG"),
        (("OBJ.VLATEST", name, "NEWER", 1, "TIMEOUT", -1), "BADARG"),
        (("OBJ.VLATEST", name, "OLDER", 1), "BADARG"),
        (("OBJ.VGET", name, 2), "NOTFOUND"),
        (("OBJ.VGET", name, 0), "BADARG"),
        (("OBJ.VGET", uid(b"plain"), 1), "NOTFOUND"),
        (("OBJ.VLIST", uid(b"plain")), "NOTFOUND"),
        (("OBJ.VDROP", name, 2), "NOTFOUND"),
        (("OBJ.VDROP", uid(b"plain"), 1), "NOTFOUND"),
        (("OBJ.VDROP", name, "x"), "BADARG"),
        (("OBJ.PURGE", ""), "BADARG"),
    ]
    for args, code in table:
        expect_code(a, args, code)
    for args in (("OBJ.VLATEST", name, "NEWER"), ("OBJ.VGET", name), ("OBJ.VLIST",),
                 ("OBJ.VPUBLISH", name, 4), ("OBJ.PURGE",)):
        with pytest.raises(ResponseError, match="wrong number of arguments"):
            a.execute_command(*args)
    assert a.execute_command("OBJ.VLIST", name) == [[3, m1]]
    assert a.execute_command("OBJ.VLATEST", name) == [3, m1]
    assert a.execute_command("OBJ.PURGE", uid(b"nobody")) == 0
    assert a.execute_command("OBJ.EXISTS", uid(b"plain")) == 1


def test_acl_key_permissions_apply_to_names_and_ids(cl, uid):
    a = cl["A"].client()
    name = b"tenantA:" + uid(b"model")
    mid, parts = publish(a, name, 1)
    other = b"tenantB:" + uid(b"model")
    assert a.execute_command("ACL", "SETUSER", "vro", "reset", "on", ">pw", "+@all",
                             "%R~tenantA:*") == b"OK"
    assert a.execute_command("ACL", "SETUSER", "vrw", "reset", "on", ">pw", "+@all",
                             "~tenantA:*") == b"OK"
    ro, rw = cl["A"].client(), cl["A"].client()
    ro.execute_command("AUTH", "vro", "pw")
    rw.execute_command("AUTH", "vrw", "pw")
    assert ro.execute_command("OBJ.VLATEST", name) == [1, mid]
    assert ro.execute_command("OBJ.VGET", name, 1) == mid
    for args in (("OBJ.VPUBLISH", name, 2, mid), ("OBJ.VDROP", name, 1), ("OBJ.PURGE", mid),
                 ("OBJ.VLATEST", other)):
        expect_code(ro, args, "NOPERM")
    put(a, b"tenantB:" + uid(b"part"), b"not tenant A's")
    expect_code(rw, ("OBJ.VPUBLISH", name, 2, mid, "PARTS", b"tenantB:" + uid(b"part")),
                "NOPERM")
    expect_code(rw, ("OBJ.VPUBLISH", other, 1, mid), "NOPERM")
    assert a.execute_command("OBJ.VLIST", name) == [[1, mid]]


def test_objects_just_put_through_the_same_node_publish_at_once(cl, uid):
    """A node sends its queued publishes to the directory before a version that
    names them, so a writer needs no wait between its puts and OBJ.VPUBLISH."""
    a = cl["A"].client()
    name = uid(b"at-once")
    for v in range(1, 51):
        mid, parts = put_version(a, name, v, nparts=2)
        assert a.execute_command("OBJ.VPUBLISH", name, v, mid, "PARTS", *parts) == b"OK"
    assert a.execute_command("OBJ.VLATEST", name) == [50, manifest_id(name, 50)]


def test_version_commands_inside_multi_are_refused(cl, uid):
    a = cl["A"].client()
    name = uid(b"multi")
    mid, parts = publish(a, name, 1)
    a.execute_command("MULTI")
    a.execute_command("OBJ.VLATEST", name, "NEWER", 1)
    a.execute_command("OBJ.VPUBLISH", name, 2, mid)
    a.execute_command("OBJ.PURGE", mid)
    reply = a.execute_command("EXEC")
    assert [err_code(r) for r in reply] == ["WRONGSTATE"] * 3, reply
    assert a.execute_command("OBJ.VLIST", name) == [[1, mid]]
    assert a.execute_command("OBJ.EXISTS", mid) == 1


def test_a_waiter_that_disconnects_leaves_the_others_and_the_node_well(cl, uid):
    name = uid(b"gone")
    a = cl["A"].client()
    mid, _ = publish(a, name, 1)
    leaver, stayer = cl["B"].client(), cl["B"].client()
    probe = cl["B"].client()
    leaver_id = leaver.execute_command("CLIENT", "ID")
    left = start_call(leaver, "OBJ.VLATEST", name, "NEWER", 1)
    stays = start_call(stayer, "OBJ.VLATEST", name, "NEWER", 1, "TIMEOUT", HANG_MS)
    wait_until(lambda: redis_blocked_clients(probe) >= 2, HANG, what="two waiters")
    assert probe.execute_command("CLIENT", "KILL", "ID", leaver_id) == 1
    wait_until(lambda: redis_blocked_clients(probe) == 1, HANG, what="the leaver gone")
    m2, _ = publish(a, name, 2)
    assert stays.result(HANG) == [2, m2]
    left.join(HANG)
    assert probe.execute_command("PING") == b"PONG"
