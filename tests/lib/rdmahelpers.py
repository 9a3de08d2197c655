"""Helpers of the RDMA suite: objects written and read through the shared arena file
(a 64 MiB payload through the Redis protocol takes tens of seconds under emulation,
through the arena a fraction of one), byte-exact checks, path counters.

Which path served a fetch is told by the owner's counters: `rdma_served_inline`
(the payload followed its frame in the RDMA stream) and `rdma_served_rndv` (the
requester pulled it with RDMA READs). Objects whose data plus metadata is below the
owner's `rdma-read-min` go inline, whatever their size.
"""

import time

from objhelpers import (  # noqa: F401 (delete_everywhere: re-exported for the suite)
    KIB,
    MIB,
    delete_everywhere,
    fetch,
    info,
    pairs,
    stats,
    to_int,
    to_str,
    wait_locations,
    wait_until,
    xxh3_64,
)

DEFAULT_READ_MIN = 32 * KIB
BIG_WRITE = 1 * MIB  # objects above this are written through the arena file
FAIL_CODES = {"UNAVAILABLE", "TIMEOUT", "CHECKSUM", "NOTFOUND"}


def put(node, client, oid, data, meta=b""):
    """Create, fill and seal oid on node: small objects with OBJ.PUT, large ones with
    OBJ.CREATE, a write into the arena file at the returned offset, and OBJ.SEAL."""
    if len(data) <= BIG_WRITE:
        args = ["OBJ.PUT", oid, data] + (["META", meta] if meta else [])
        assert client.execute_command(*args) == b"OK"
        return
    args = ["OBJ.CREATE", oid, len(data)] + (["META", meta] if meta else [])
    off = to_int(pairs(client.execute_command(*args))["offset"])
    with open(node.arena_path, "r+b") as f:
        f.seek(off)
        f.write(data)
        f.flush()
    assert client.execute_command("OBJ.SEAL", oid) == b"OK"


def put_published(node, client, oid, data, meta=b"", watcher=None):
    """put(), then wait until the directory lists oid on node."""
    put(node, client, oid, data, meta)
    wait_locations(watcher or client, oid, [node.name], timeout=30.0)


def read_object(node, client, oid):
    """(data, meta) of a sealed oid on node, read from its arena file under a pin."""
    pin = pairs(client.execute_command("OBJ.PIN", oid))
    try:
        off, size = to_int(pin["offset"]), to_int(pin["size"])
        meta_size = to_int(info(client, oid)["meta_size"])
        with open(node.arena_path, "rb") as f:
            f.seek(off)
            blob = f.read(size + meta_size)
    finally:
        client.execute_command("OBJ.RELEASE", oid)
    return blob[:size], blob[size:]


def first_difference(a, b):
    n = min(len(a), len(b))
    step = 1 << 16
    for i in range(0, n, step):
        if a[i:i + step] != b[i:i + step]:
            for j in range(i, min(i + step, n)):
                if a[j] != b[j]:
                    return j
    return n


def assert_same_object(node, client, oid, data, meta):
    """oid on node holds exactly data and meta, is sealed, is a replica and carries
    the checksum of data + meta."""
    got, got_meta = read_object(node, client, oid)
    if got != data:
        raise AssertionError(f"{oid!r:.60} on {node.name}: {len(got)} bytes, expected "
                             f"{len(data)}; first difference at byte "
                             f"{first_difference(got, data)}")
    assert got_meta == meta, (f"{oid!r:.60} on {node.name}: metadata {got_meta!r:.80} != "
                              f"{meta!r:.80}")
    inf = info(client, oid)
    assert to_str(inf["state"]) == "sealed"
    assert to_str(inf["checksum"]) == "%016x" % xxh3_64(bytes(data) + bytes(meta))
    return inf


def expected_path(total, read_min):
    """'inline' or 'rndv' for an object of total bytes (data + metadata)."""
    return "inline" if total < read_min else "rndv"


def path_delta(before, after):
    """{'inline': n, 'rndv': m} served by the owner between two stats snapshots."""
    return {"inline": after["rdma_served_inline"] - before["rdma_served_inline"],
            "rndv": after["rdma_served_rndv"] - before["rdma_served_rndv"]}


def wait_unpinned(client, oid=None, timeout=15.0):
    """Wait until oid (or, without one, every object) on that node has no pin: the
    owner lets go once the transfer is over (inline: the ring write completed;
    rendezvous: the requester's DONE)."""
    if oid is None:
        wait_until(lambda: stats(client)["objects_pinned"] == 0, timeout, 0.05,
                   what="objects_pinned == 0 on the owner")
    else:
        wait_until(lambda: to_int(info(client, oid)["pins"]) == 0, timeout, 0.05,
                   what=f"pins of {oid!r:.40} == 0 on the owner")


def set_read_min(client, value):
    assert client.execute_command("CONFIG", "SET", "objstore.rdma-read-min", str(value)) == b"OK"
    got = client.execute_command("CONFIG", "GET", "objstore.rdma-read-min")
    assert int(got[1]) == value, f"rdma-read-min reads back as {got!r}"


def timed_fetch(client, *ids, via="rdma", timeout=120000):
    """fetch() that also returns the seconds it took."""
    t0 = time.monotonic()
    res = fetch(client, *ids, timeout=timeout, via=via)
    return res, time.monotonic() - t0
