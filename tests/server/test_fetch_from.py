"""OBJ.FETCH ... FROM node: the location hint. A correct hint pulls the object from the
named node without asking the directory for the object (the owner's answer carries size
and checksum); a wrong, dead or unknown hint falls back to the directory and the fetch
still works; FROM naming the fetching node itself answers from the local table only.

Layout "separate": the directory is a plain Redis the tests can edit, so a test can
delete an object's directory keys and show that the hinted fetch never needed them.
"""

import csv
import io
import os
import socket
import struct
import subprocess
import time

import pytest
from redis.exceptions import ResponseError

from objhelpers import (
    KIB,
    MIB,
    WIRE_AUTH,
    WIRE_DATA,
    WIRE_FETCH,
    WIRE_HDR,
    WIRE_HELLO,
    WIRE_ROLE_ACCEPTOR,
    codes,
    delete_everywhere,
    err_code,
    expect_error,
    fetch,
    info,
    payload,
    sha256,
    start_call,
    stat_delta,
    stats,
    to_int,
    wait_locations,
    wire_frame,
    wire_seal,
    wire_session_keys,
    WireMac,
    wire_hello_body,
    wire_proof,
    xxh3_64,
)
from objnodes import build_path, registry_key

SECRET = b"s3cret"  # the cluster fixture's
HINT = ("transfer_hint_hits", "transfer_hint_fallbacks")


@pytest.fixture(scope="module")
def cl(make_cluster_module):
    return make_cluster_module(names=("A", "B", "C"), layout="separate", memory="128mb")


@pytest.fixture
def d(cl):
    """A client of the directory Redis itself."""
    return cl.dir.client()


def fetch_from(client, *ids, node, timeout=None, via=None):
    """OBJ.FETCH ids [TIMEOUT ms] [VIA v] FROM node, per-id results as fetch() gives."""
    args = ["OBJ.FETCH", *ids]
    if timeout is not None:
        args += ["TIMEOUT", timeout]
    if via is not None:
        args += ["VIA", via]
    args += ["FROM", node]
    reply = client.execute_command(*args)
    assert isinstance(reply, list) and len(reply) == len(ids), f"{args}: {reply!r:.200}"
    return [str(r) if isinstance(r, Exception) else r.decode() for r in reply]


def put_published(client, oid, data, meta, name, watcher):
    extra = ["META", meta] if meta else []
    assert client.execute_command("OBJ.PUT", oid, data, *extra) == b"OK"
    wait_locations(watcher, oid, [name])


def assert_same_object(client, oid, data, meta):
    got, got_meta = client.execute_command("OBJ.GET", oid, "WITHMETA")
    assert len(got) == len(data) and sha256(got) == sha256(data), f"{oid!r:.60}: data differs"
    assert got_meta == meta, f"{oid!r:.60}: metadata differs"
    assert to_int(info(client, oid)["replica"]) == 1, "a fetched copy is a replica"


def forget_in_directory(d, oid):
    """Delete every directory key of oid: only the hint can find it now."""
    d.execute_command("DEL", b"objstore:{" + oid + b"}:meta", b"objstore:{" + oid + b"}:loc")


SIZES = [(0, b""), (1, b"m"), (4 * KIB, b"shape=64x64"), (32 * KIB, b"crossover"),
         (1 * MIB, b"\x00binary\r\nmeta\xff")]


@pytest.mark.parametrize("size,meta", SIZES, ids=[f"{s}B" for s, _ in SIZES])
def test_correct_hint_fetches_without_the_directory(a, b, d, uid, size, meta):
    data = payload(size, seed=size + 7)
    put_published(a, uid, data, meta, "A", a)
    forget_in_directory(d, uid)
    b0 = stats(b)

    assert fetch_from(b, uid, node="A") == ["OK"]

    assert_same_object(b, uid, data, meta)
    b1 = stats(b)
    assert stat_delta(b0, b1, *HINT, "directory_lookups", "tcp_fetches") == {
        "transfer_hint_hits": 1, "transfer_hint_fallbacks": 0, "directory_lookups": 0,
        "tcp_fetches": 1}
    assert b1["objects_created"] == 0
    # The copy is published as usual.
    wait_locations(b, uid, ["B"])
    delete_everywhere([a, b], uid)


def test_wrong_hint_falls_back_to_the_directory(a, b, c, uid):
    data = payload(100 * KIB, seed=3)
    put_published(a, uid, data, b"w", "A", a)
    b0 = stats(b)

    assert fetch_from(b, uid, node="C") == ["OK"]

    assert_same_object(b, uid, data, b"w")
    b1 = stats(b)
    assert stat_delta(b0, b1, *HINT) == {"transfer_hint_hits": 0, "transfer_hint_fallbacks": 1}
    assert b1["directory_lookups"] - b0["directory_lookups"] >= 1
    assert b1["objects_created"] == 0
    delete_everywhere([a, b], uid)


def test_unknown_node_name_falls_back(a, b, uid):
    data = payload(5000, seed=4)
    put_published(a, uid, data, b"u", "A", a)
    b0 = stats(b)

    assert fetch_from(b, uid, node="no-such-node") == ["OK"]

    assert_same_object(b, uid, data, b"u")
    assert stat_delta(b0, stats(b), *HINT) == {
        "transfer_hint_hits": 0, "transfer_hint_fallbacks": 1}
    delete_everywhere([a, b], uid)


def test_hint_to_a_missing_object_answers_notfound(a, b, uid):
    b0 = stats(b)
    res = fetch_from(b, uid, node="A")
    assert codes(res) == ["NOTFOUND"], res
    b1 = stats(b)
    assert stat_delta(b0, b1, *HINT) == {"transfer_hint_hits": 0, "transfer_hint_fallbacks": 1}
    assert b1["objects_created"] == 0 and b1["objects"] == b0["objects"]


def test_several_ids_share_the_hint_each_falling_back_alone(a, b, c, uid):
    on_a = [uid(b"a%d" % i) for i in range(3)]
    on_c, missing = uid(b"c"), uid(b"none")
    datas = {oid: payload(3000 + i, seed=i) for i, oid in enumerate(on_a + [on_c])}
    for oid in on_a:
        put_published(a, oid, datas[oid], b"", "A", a)
    put_published(c, on_c, datas[on_c], b"", "C", c)
    b0 = stats(b)

    res = fetch_from(b, *on_a, on_c, missing, node="A")

    assert codes(res) == ["OK", "OK", "OK", "OK", "NOTFOUND"], res
    for oid in on_a + [on_c]:
        assert_same_object(b, oid, datas[oid], b"")
    b1 = stats(b)
    assert stat_delta(b0, b1, *HINT) == {"transfer_hint_hits": 3, "transfer_hint_fallbacks": 2}
    assert b1["objects_created"] == 0
    delete_everywhere([a, b, c], *on_a, on_c)


def test_hint_naming_this_node_is_a_local_hit_only(a, b, uid):
    here, there = uid(b"here"), uid(b"there")
    assert b.execute_command("OBJ.PUT", here, b"local bytes") == b"OK"
    put_published(a, there, b"remote bytes", b"", "A", a)
    b0 = stats(b)

    assert fetch_from(b, here, node="B") == ["OK"]
    res = fetch_from(b, here, there, node="B")

    assert codes(res) == ["OK", "NOTFOUND"], res
    assert "FROM names this node" in res[1]
    b1 = stats(b)
    assert b1["objects"] == b0["objects"] and b1["objects_created"] == 0
    assert stat_delta(b0, b1, "fetch_requests", *HINT) == {
        "fetch_requests": 0, "transfer_hint_hits": 0, "transfer_hint_fallbacks": 0}
    delete_everywhere([a, b], here, there)


def test_dead_hint_falls_back(make_cluster, uid):
    cl = make_cluster(names=("A", "B", "D"), layout="separate", memory="64mb")
    a, b, dd = cl["A"].client(), cl["B"].client(), cl["D"].client()
    warm, oid = uid(b"warm"), uid(b"obj")
    put_published(dd, warm, b"from D", b"", "D", b)
    assert fetch_from(b, warm, node="D") == ["OK"]  # B now has a session with D
    data = payload(64 * KIB, seed=9)
    put_published(a, oid, data, b"x", "A", b)
    cl["D"].sigkill()
    b0 = stats(b)

    assert fetch_from(b, oid, node="D", timeout=10000) == ["OK"]

    assert_same_object(b, oid, data, b"x")
    b1 = stats(b)
    assert stat_delta(b0, b1, *HINT) == {"transfer_hint_hits": 0, "transfer_hint_fallbacks": 1}
    assert b1["objects_created"] == 0


class SilentNode:
    """A node that exists only in the directory: its entry names a Python listener
    whose connections are accepted by the kernel and never answered."""

    def __init__(self, directory_client, name):
        self.dir, self.name = directory_client, name
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.key = b"objstore:node:" + name
        self.dir.execute_command(
            "HSET", self.key, "addr", "127.0.0.1", "tcp_port", self.listener.getsockname()[1],
            "rdma_addr", "", "rdma_port", 0, "features", 1,
            "heartbeat_ms", int(time.time() * 1000))
        self.dir.execute_command("PEXPIRE", self.key, 60000)
        self.dir.execute_command("SADD", registry_key(name), name)

    def close(self):
        self.listener.close()
        self.dir.execute_command("SREM", registry_key(self.name), self.name)
        self.dir.execute_command("DEL", self.key)


def test_timeout_with_a_hint_that_never_answers_leaves_nothing(a, b, d, uid):
    data = payload(8 * KIB, seed=5)
    put_published(a, uid, data, b"t", "A", a)
    silent = SilentNode(d, b"silent-" + uid[-8:].hex().encode())
    try:
        b0 = stats(b)
        with pytest.raises(ResponseError) as e:
            b.execute_command("OBJ.FETCH", uid, "TIMEOUT", 300, "FROM", silent.name)
        assert err_code(e.value) == "TIMEOUT", str(e.value)
        b1 = stats(b)
        assert b1["objects_created"] == 0 and b1["objects"] == b0["objects"]
        assert b.execute_command("OBJ.EXISTS", uid) == 0
        assert b1["fetch_cancelled"] - b0["fetch_cancelled"] == 1
    finally:
        silent.close()
    # The node is healthy: the same object comes without the hint.
    assert fetch(b, uid) == ["OK"]
    assert_same_object(b, uid, data, b"t")
    delete_everywhere([a, b], uid)


def test_hint_connection_is_reused(a, b, uid):
    """A second hinted fetch rides the session the first one opened."""
    first, second = uid(b"1"), uid(b"2")
    put_published(a, first, b"one", b"", "A", a)
    put_published(a, second, b"two", b"", "A", a)
    assert fetch_from(b, first, node="A") == ["OK"]
    b0 = stats(b)
    assert fetch_from(b, second, node="A") == ["OK"]
    b1 = stats(b)
    assert stat_delta(b0, b1, "transfer_connections", "directory_lookups", *HINT) == {
        "transfer_connections": 0, "directory_lookups": 0, "transfer_hint_hits": 1,
        "transfer_hint_fallbacks": 0}
    delete_everywhere([a, b], first, second)


def test_concurrent_hinted_fetches_of_one_id_share_the_transfer(cl, a, uid):
    data = payload(2 * MIB, seed=12)
    put_published(a, uid, data, b"s", "A", a)
    b1, b2 = cl["B"].client(), cl["B"].client()

    calls = [start_call(x, "OBJ.FETCH", uid, "FROM", "A") for x in (b1, b2)]

    for call in calls:
        assert call.result(timeout=30.0) == [b"OK"]
    assert_same_object(b1, uid, data, b"s")
    delete_everywhere([a, b1], uid)


BAD_ARGS = [
    (["OBJ.FETCH", "k", "FROM"], "BADARG"),
    (["OBJ.FETCH", "k", "FROM", ""], "BADARG"),
    (["OBJ.FETCH", "k", "FROM", "n" * 129], "BADARG"),
    (["OBJ.FETCH", "k", "FROM", "A", "FROM", "C"], "BADARG"),
    (["OBJ.FETCH", "k", "FROM", "A\x00B"], "BADARG"),
    (["OBJ.FETCH", "k", "FROM", "A", "k2"], "BADARG"),
    (["OBJ.FETCH", "k", "TIMEOUT", "10", "FROM"], "BADARG"),
]


@pytest.mark.parametrize("args,code", BAD_ARGS, ids=[repr(a)[:60] for a, _ in BAD_ARGS])
def test_bad_from_arguments_are_rejected(b, args, code):
    b0 = stats(b)
    expect_error(b, args, code)
    b1 = stats(b)
    assert b1["fetch_requests"] == b0["fetch_requests"]


def test_longest_name_is_accepted(b, uid):
    """128 bytes is a valid FROM; no node has that name, so it falls back."""
    res = fetch_from(b, uid, node="n" * 128)
    assert codes(res) == ["NOTFOUND"], res


def test_benchmark_from_adds_the_hint_to_its_fetches(cl, b):
    """obj-benchmark --from A: every timed fetch is a hint hit on B."""
    tool = build_path("bin", "obj-benchmark")
    b0 = stats(b)
    r = subprocess.run(
        [tool, "-p", str(cl["B"].port), "--source-port", str(cl["A"].port), "-t", "fetch",
         "--tcp", "--from", "A", "-n", "30", "-c", "2", "-d", "4k", "--keyspace", "10",
         "--seconds", "20", "--csv"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert len(rows) == 2 and rows[1][0] == "fetch-tcp-from", rows
    assert stats(b)["transfer_hint_hits"] - b0["transfer_hint_hits"] == 30


def recv_frame(sock):
    """(type, reqId, body) of one frame from a plain socket; None if it closed first."""
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf
    head = exact(WIRE_HDR.size)
    if head is None:
        return None
    t, _, _, n, req_id = WIRE_HDR.unpack(head)
    body = exact(n) if n else b""
    return None if body is None else (t, req_id, body)


def lying_owner(sock, name, got):
    """Play node `name` on an accepted connection: authenticate as the acceptor, then
    answer the first FETCH with the right bytes under a wrong checksum."""
    t, _, hello = recv_frame(sock)
    assert t == WIRE_HELLO
    (features,) = struct.unpack_from("<H", hello, 6)
    (name_len,) = struct.unpack_from("<H", hello, 56)
    b_nonce, b_name = hello[8:24], hello[58:58 + name_len]
    nonce = os.urandom(16)
    proof = wire_proof(SECRET, WIRE_ROLE_ACCEPTOR, b_name, name, name, features, 1, b_nonce,
                       nonce)
    sock.sendall(wire_frame(WIRE_HELLO, wire_hello_body(nonce, name, proof, 1)))
    t, _, auth = recv_frame(sock)
    assert t == WIRE_AUTH
    transcript = (b_name, name, name, features, 1, b_nonce, nonce)
    _, a2c = wire_session_keys(SECRET, proof, auth, *transcript)
    t, req_id, body = recv_frame(sock)
    assert t == WIRE_FETCH
    sock.recv(16)  # its tag: a node that knows the secret need not doubt it
    got["id"] = body[2:]
    data = got["data"]
    bad = xxh3_64(data) ^ 1
    sock.sendall(wire_seal(WireMac(a2c), wire_frame(
        WIRE_DATA, struct.pack("<QQQ", len(data), 0, bad), req_id=req_id), data))
    got["answered"] = True


def test_owner_checksum_mismatch_falls_back_to_the_directory(cl, a, b, d, uid):
    """The hinted node's bytes do not match the checksum it sent: nothing of that copy
    stays, and the directory's location (A) provides the object."""
    data = payload(20 * KIB, seed=31)
    put_published(a, uid, data, b"", "A", a)
    liar = SilentNode(d, b"L-" + uid[-8:].hex().encode())
    got = {"data": data}
    try:
        call = start_call(cl["B"].client(), "OBJ.FETCH", uid, "TIMEOUT", 10000, "FROM",
                          liar.name)
        liar.listener.settimeout(5.0)
        conn, _ = liar.listener.accept()
        conn.settimeout(5.0)
        b0 = stats(b)
        try:
            lying_owner(conn, liar.name, got)
            assert call.result(timeout=15.0) == [b"OK"]
        finally:
            conn.close()
    finally:
        liar.close()
    assert got.get("answered") and got["id"] == uid
    assert_same_object(b, uid, data, b"")
    b1 = stats(b)
    assert stat_delta(b0, b1, *HINT) == {"transfer_hint_hits": 0, "transfer_hint_fallbacks": 1}
    assert b1["objects_created"] == 0
    delete_everywhere([a, b], uid)
