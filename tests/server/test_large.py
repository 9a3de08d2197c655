"""A 300 MiB object: OBJ.CREATE, 8 MiB OBJ.WRITE chunks, OBJ.SEAL, then read back
through OBJ.GET and straight from the arena file, compared by SHA-256 (and the
README's XXH3-64 checksum in OBJ.INFO)."""

import hashlib
import struct

from objhelpers import MIB, info, read_arena, reply_map, stats, to_int, to_str, xxh3_64

SIZE = 300 * MIB
CHUNK = 8 * MIB


def _chunks():
    """Distinct 8 MiB chunks (the last one short): a shared random body with
    the chunk number stamped at both ends, so a misplaced chunk shows."""
    body = bytearray(hashlib.shake_256(b"objstore-large").digest(CHUNK))
    off = 0
    while off < SIZE:
        n = min(CHUNK, SIZE - off)
        stamp = struct.pack("<Q", off)
        body[0:8] = stamp
        body[n - 8:n] = stamp
        yield off, bytes(body[:n])
        off += n


def test_300_mib_object_written_in_chunks_reads_back_intact(make_server):
    s = make_server(memory="512mb")
    c = s.client(timeout=120)
    oid = b"large\x00object"
    created = reply_map(c.obj("OBJ.CREATE", oid, SIZE))
    assert created["size"] == SIZE
    want = hashlib.sha256()
    for off, chunk in _chunks():
        assert c.obj("OBJ.WRITE", oid, off, chunk) == len(chunk)
        want.update(chunk)
    assert c.obj("OBJ.SEAL", oid) == b"OK"

    data = c.obj("OBJ.GET", oid)
    assert len(data) == SIZE
    assert hashlib.sha256(data).hexdigest() == want.hexdigest(), "OBJ.GET returned other bytes"
    f = info(c, oid)
    assert to_int(f["size"]) == SIZE
    assert int(to_str(f["checksum"]), 16) == xxh3_64(data)
    del data

    pinned = reply_map(c.obj("OBJ.PIN", oid))
    assert pinned["offset"] == created["offset"]
    raw = read_arena(stats(c)["arena_path"], pinned["offset"], SIZE)
    assert hashlib.sha256(raw).hexdigest() == want.hexdigest(), "arena file holds other bytes"
    del raw
    c.obj("OBJ.RELEASE", oid)

    assert c.obj("OBJ.DEL", oid) == b"OK"
    assert stats(c)["arena_used"] == 0
