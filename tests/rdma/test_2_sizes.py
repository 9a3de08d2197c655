"""OBJ.FETCH VIA rdma moves every size class byte for byte, metadata included, and
takes the path the owner's rdma-read-min prescribes: data + metadata below
rdma-read-min inline in the RDMA stream (one gather write when the peer's buffer has
room for it, copied in pieces when not), the rest by RDMA READ rendezvous. The owner's rdma_served_inline / rdma_served_rndv
counters tell which path served each fetch; its pins are gone once the fetch is over.
"""

import pytest

from objhelpers import (
    FETCH_SIZES,
    KIB,
    MIB,
    info,
    locate,
    payload,
    stat_delta,
    stats,
    to_int,
    to_str,
    wait_locations,
)
from rdmahelpers import (
    DEFAULT_READ_MIN,
    assert_same_object,
    delete_everywhere,
    expected_path,
    path_delta,
    put_published,
    set_read_min,
    timed_fetch,
    wait_unpinned,
)

# The RDMA helpers take "no metadata" as b"".
SIZES = [(size, meta or b"") for size, meta in FETCH_SIZES]


@pytest.fixture
def ab(cluster):
    return cluster["A"], cluster["A"].client(), cluster["B"], cluster["B"].client()


@pytest.fixture
def read_min(cluster):
    """Set A's rdma-read-min for one test; the default is restored afterwards."""
    a = cluster["A"].client()
    yield lambda v: set_read_min(a, v)
    set_read_min(a, DEFAULT_READ_MIN)


def fetch_and_check(ab, oid, data, meta, want_path):
    """Put oid on A, fetch it VIA rdma on B, and check the copy, the counters on both
    sides, the path A served it by, and that A keeps no pin."""
    na, a, nb, b = ab
    put_published(na, a, oid, data, meta, watcher=b)
    a0, b0 = stats(a), stats(b)

    res, took = timed_fetch(b, oid)

    assert res == ["OK"], f"fetch of {len(data)} + {len(meta)} bytes: {res} after {took:.1f}s"
    inf = assert_same_object(nb, b, oid, data, meta)
    assert to_int(inf["replica"]) == 1, "a fetched copy must be marked as a replica"
    assert to_int(inf["size"]) == len(data) and to_int(inf["meta_size"]) == len(meta)
    a1, b1 = stats(a), stats(b)
    total = len(data) + len(meta)
    assert stat_delta(b0, b1, "rdma_fetches", "rdma_fetch_bytes", "tcp_fetches",
                      "rdma_fetch_failures", "objects_sealed") == {
        "rdma_fetches": 1, "rdma_fetch_bytes": total, "tcp_fetches": 0,
        "rdma_fetch_failures": 0, "objects_sealed": 1}
    assert b1["objects_created"] == 0
    assert stat_delta(a0, a1, "rdma_served", "rdma_served_bytes", "tcp_served") == {
        "rdma_served": 1, "rdma_served_bytes": total, "tcp_served": 0}
    got = path_delta(a0, a1)
    want = {"inline": int(want_path == "inline"), "rndv": int(want_path == "rndv")}
    read_min = int(a.execute_command("CONFIG", "GET", "objstore.rdma-read-min")[1])
    assert got == want, (f"{total} bytes with rdma-read-min {read_min}: served {got}, "
                         f"expected the {want_path} path")
    wait_unpinned(a, oid)
    return took


@pytest.mark.parametrize("size,meta", SIZES,
                         ids=[f"{s}B-meta{len(m)}" for s, m in SIZES])
def test_fetch_via_rdma_copies_object_byte_exact(ab, uid, size, meta):
    na, a, nb, b = ab
    data = payload(size, seed=size + 11)
    fetch_and_check(ab, uid, data, meta, expected_path(size + len(meta), DEFAULT_READ_MIN))
    wait_locations(b, uid, ["A", "B"], timeout=30.0)
    loc = locate(b, uid)
    assert (loc["size"], loc["meta_size"]) == (size, len(meta))
    assert loc["checksum"] == to_str(info(a, uid)["checksum"])
    delete_everywhere([a, b], uid)


@pytest.mark.parametrize("threshold", [DEFAULT_READ_MIN, 20000, 4096])
def test_threshold_boundary_picks_the_path(ab, uid, read_min, threshold):
    """Data + metadata of rdma-read-min - 1 go inline; rdma-read-min and + 1 by RDMA READ."""
    na, a, nb, b = ab
    if threshold != DEFAULT_READ_MIN:
        read_min(threshold)
    meta = b"edge!"
    for delta, want in ((-1, "inline"), (0, "rndv"), (1, "rndv")):
        total = threshold + delta
        oid = uid(b"%d" % total)
        fetch_and_check(ab, oid, payload(total - len(meta), seed=total), meta, want)
        delete_everywhere([a, b], oid)


def test_inline_has_no_size_cap_on_the_stream(ab, uid, read_min):
    """With rdma-read-min out of the way, every size goes inline: 256 KiB + 1 (past the
    old ring slot), and 6 MiB, more than the peer's whole receive buffer (4 MiB), which
    the stream carries in pieces across re-registrations."""
    na, a, nb, b = ab
    read_min(1 << 30)
    meta = b"cap"
    for total, want in ((256 * KIB + 1, "inline"), (6 * MIB, "inline")):
        oid = uid(b"%d" % total)
        fetch_and_check(ab, oid, payload(total - len(meta), seed=total), meta, want)
        delete_everywhere([a, b], oid)


def test_read_min_zero_sends_even_empty_objects_by_rdma_read(ab, uid, read_min):
    na, a, nb, b = ab
    read_min(0)
    for size, meta in ((0, b""), (1, b""), (0, b"only metadata"), (5000, b"m")):
        oid = uid(b"%d-%d" % (size, len(meta)))
        fetch_and_check(ab, oid, payload(size, seed=7), meta, "rndv")
        delete_everywhere([a, b], oid)


def test_read_min_is_changeable_at_run_time(ab, uid, read_min):
    """The same object size flips between the paths as the setting changes."""
    na, a, nb, b = ab
    data = payload(10000, seed=3)
    for setting, want in ((10001, "inline"), (10000, "rndv"), (DEFAULT_READ_MIN, "inline")):
        read_min(setting)
        oid = uid(b"%d" % setting)
        fetch_and_check(ab, oid, data, b"", want)
        delete_everywhere([a, b], oid)
