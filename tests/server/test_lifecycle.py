"""Happy paths of every OBJ.* command, as docs/commands.md states them.

Binary ids (NUL, CR/LF, 0xff) and binary data (every byte value) throughout;
0-byte objects, metadata, the 512-byte id limit, and the zero-copy view: what
OBJ.CREATE / OBJ.PIN say about the arena file is checked by reading the file.
"""

import os
import re
import stat
import time

import pytest

from objhelpers import (
    BINARY_DATA,
    INFO_FIELDS,
    STATS_FIELDS,
    expect_error,
    file_mode,
    info,
    read_arena,
    reply_map,
    stats,
    to_int,
    to_str,
    xxh3_64,
)


def test_put_answers_ok_and_get_returns_the_binary_data(r, uid):
    assert r.obj("OBJ.PUT", uid, BINARY_DATA) == b"OK"
    assert r.obj("OBJ.GET", uid) == BINARY_DATA
    r.obj("OBJ.DEL", uid)


def test_sealed_object_is_visible_to_another_connection(r, r2, uid):
    r.obj("OBJ.PUT", uid, BINARY_DATA)
    assert r2.obj("OBJ.GET", uid) == BINARY_DATA
    assert r2.obj("OBJ.EXISTS", uid) == 1
    r2.obj("OBJ.DEL", uid)


def test_put_of_zero_bytes_gives_an_empty_object(r, uid):
    assert r.obj("OBJ.PUT", uid, b"") == b"OK"
    assert r.obj("OBJ.GET", uid) == b""
    assert r.obj("OBJ.EXISTS", uid) == 1
    assert to_int(info(r, uid)["size"]) == 0
    r.obj("OBJ.DEL", uid)


def test_put_with_meta_is_returned_by_get_withmeta(r, uid):
    meta = b"shape=1x11\x00\r\n\xff"
    assert r.obj("OBJ.PUT", uid, BINARY_DATA, "META", meta) == b"OK"
    assert r.obj("OBJ.GET", uid, "WITHMETA") == [BINARY_DATA, meta]
    assert r.obj("OBJ.GET", uid) == BINARY_DATA
    r.obj("OBJ.DEL", uid)


def test_get_withmeta_without_meta_gives_empty_meta(r, uid):
    r.obj("OBJ.PUT", uid, b"abc")
    assert r.obj("OBJ.GET", uid, "WITHMETA") == [b"abc", b""]
    r.obj("OBJ.DEL", uid)


def test_get_with_timeout_and_withmeta_of_a_sealed_object_answers_at_once(r, uid):
    r.obj("OBJ.PUT", uid, b"data", "META", b"m")
    # A TIMEOUT longer than the client's socket timeout: a wait would fail the call.
    assert r.obj("OBJ.GET", uid, "TIMEOUT", "600000", "WITHMETA") == [b"data", b"m"]
    r.obj("OBJ.DEL", uid)


def test_id_of_512_bytes_is_accepted(r):
    oid = (b"\x00\xffid512" * 100)[:512]
    assert len(oid) == 512
    assert r.obj("OBJ.PUT", oid, b"x") == b"OK"
    assert r.obj("OBJ.GET", oid) == b"x"
    assert r.obj("OBJ.EXISTS", oid) == 1
    assert r.obj("OBJ.DEL", oid) == b"OK"


def test_id_of_one_byte_is_accepted(r):
    oid = b"\x00"
    assert r.obj("OBJ.PUT", oid, b"one") == b"OK"
    assert r.obj("OBJ.GET", oid) == b"one"
    assert r.obj("OBJ.DEL", oid) == b"OK"


def test_create_answers_offset_and_size_inside_the_arena(r, uid):
    reply = r.obj("OBJ.CREATE", uid, 10)
    assert isinstance(reply, list) and len(reply) == 4
    assert reply[0] == b"offset" and reply[2] == b"size"
    assert isinstance(reply[1], int) and isinstance(reply[3], int)
    assert reply[3] == 10
    st = stats(r)
    assert 0 <= reply[1] and reply[1] + 10 <= st["arena_size"]
    r.obj("OBJ.ABORT", uid)


def test_write_answers_the_number_of_bytes_written(r, uid):
    r.obj("OBJ.CREATE", uid, 10)
    assert r.obj("OBJ.WRITE", uid, 0, b"0123") == 4
    assert r.obj("OBJ.WRITE", uid, 4, b"456789") == 6
    r.obj("OBJ.ABORT", uid)


def test_write_of_empty_data_at_the_end_answers_zero(r, uid):
    r.obj("OBJ.CREATE", uid, 4)
    assert r.obj("OBJ.WRITE", uid, 4, b"") == 0
    r.obj("OBJ.ABORT", uid)


def test_create_write_seal_then_get_returns_the_written_bytes(r, uid):
    data = BINARY_DATA * 3
    r.obj("OBJ.CREATE", uid, len(data))
    # out of order and overlapping writes: the last write of a byte wins
    half = len(data) // 2
    assert r.obj("OBJ.WRITE", uid, half, data[half:]) == len(data) - half
    assert r.obj("OBJ.WRITE", uid, 0, b"\xee" * (half + 5)) == half + 5
    assert r.obj("OBJ.WRITE", uid, 0, data[: half + 5]) == half + 5
    assert r.obj("OBJ.SEAL", uid) == b"OK"
    assert r.obj("OBJ.GET", uid) == data
    r.obj("OBJ.DEL", uid)


def test_create_with_meta_then_seal_keeps_the_meta(r, uid):
    r.obj("OBJ.CREATE", uid, 3, "META", b"\x00meta\r\n")
    r.obj("OBJ.WRITE", uid, 0, b"abc")
    r.obj("OBJ.SEAL", uid)
    assert r.obj("OBJ.GET", uid, "WITHMETA") == [b"abc", b"\x00meta\r\n"]
    assert to_int(info(r, uid)["meta_size"]) == 7
    r.obj("OBJ.DEL", uid)


def test_create_of_zero_bytes_then_seal_gives_an_empty_object(r, uid):
    reply = reply_map(r.obj("OBJ.CREATE", uid, 0))
    assert reply["size"] == 0
    assert r.obj("OBJ.SEAL", uid) == b"OK"
    assert r.obj("OBJ.GET", uid) == b""
    r.obj("OBJ.DEL", uid)


def test_created_object_is_invisible_until_sealed(r, r2, uid):
    r.obj("OBJ.CREATE", uid, 2)
    r.obj("OBJ.WRITE", uid, 0, b"hi")
    assert r.obj("OBJ.EXISTS", uid) == 0
    assert r2.obj("OBJ.EXISTS", uid) == 0
    cursor, seen = b"0", []
    for _ in range(10000):
        cursor, ids = r2.obj("OBJ.LIST", cursor, "MATCH", bytes(uid) + b"*", "COUNT", 1000)
        seen += ids
        if to_int(cursor) == 0:
            break
    assert uid not in seen
    r.obj("OBJ.SEAL", uid)
    assert r2.obj("OBJ.EXISTS", uid) == 1
    assert r2.obj("OBJ.GET", uid) == b"hi"
    r.obj("OBJ.DEL", uid)


def test_written_bytes_are_in_the_arena_file_at_the_created_offset(r, uid):
    """OBJ.CREATE tells a local writer where the data lives: check it really does."""
    data = BINARY_DATA
    off = reply_map(r.obj("OBJ.CREATE", uid, len(data)))["offset"]
    r.obj("OBJ.WRITE", uid, 0, data)
    assert read_arena(stats(r)["arena_path"], off, len(data)) == data
    r.obj("OBJ.ABORT", uid)


def test_abort_answers_ok_and_frees_the_id(r, uid):
    r.obj("OBJ.CREATE", uid, 100)
    assert r.obj("OBJ.ABORT", uid) == b"OK"
    assert r.obj("OBJ.EXISTS", uid) == 0
    expect_error(r, ("OBJ.GET", uid), "NOTFOUND")
    expect_error(r, ("OBJ.INFO", uid), "NOTFOUND")
    # the id can be used again
    r.obj("OBJ.CREATE", uid, 1)
    r.obj("OBJ.ABORT", uid)


def test_pin_answers_offset_size_meta_and_gen_of_the_bytes_in_the_arena(r, uid):
    r.obj("OBJ.PUT", uid, BINARY_DATA, "META", b"mm")
    reply = r.obj("OBJ.PIN", uid)
    assert isinstance(reply, list) and len(reply) == 8
    assert [reply[0], reply[2], reply[4], reply[6]] == [b"offset", b"size", b"meta", b"gen"]
    assert isinstance(reply[1], int) and reply[3] == len(BINARY_DATA) and reply[5] == b"mm"
    assert isinstance(reply[7], int) and reply[7] > 0
    assert read_arena(stats(r)["arena_path"], reply[1], reply[3]) == BINARY_DATA
    assert r.obj("OBJ.RELEASE", uid) == b"OK"
    r.obj("OBJ.DEL", uid)


def test_pin_of_an_object_without_meta_answers_empty_meta(r, uid):
    r.obj("OBJ.PUT", uid, b"x")
    assert reply_map(r.obj("OBJ.PIN", uid))["meta"] == b""
    r.obj("OBJ.RELEASE", uid)
    r.obj("OBJ.DEL", uid)


def test_pin_offset_is_the_created_offset(r, uid):
    created = reply_map(r.obj("OBJ.CREATE", uid, 8))
    r.obj("OBJ.WRITE", uid, 0, b"12345678")
    r.obj("OBJ.SEAL", uid)
    pinned = reply_map(r.obj("OBJ.PIN", uid))
    assert pinned["offset"] == created["offset"]
    assert to_int(info(r, uid)["offset"]) == created["offset"]
    r.obj("OBJ.RELEASE", uid)
    r.obj("OBJ.DEL", uid)


def test_pins_count_up_and_release_drops_one(r, r2, uid):
    r.obj("OBJ.PUT", uid, b"abc")
    r.obj("OBJ.PIN", uid)
    r.obj("OBJ.PIN", uid)
    r2.obj("OBJ.PIN", uid)
    assert to_int(info(r, uid)["pins"]) == 3
    assert r.obj("OBJ.RELEASE", uid) == b"OK"
    assert to_int(info(r, uid)["pins"]) == 2
    assert r.obj("OBJ.RELEASE", uid) == b"OK"
    expect_error(r, ("OBJ.RELEASE", uid), "WRONGSTATE")  # r has none left; r2's pin is not r's
    assert to_int(info(r, uid)["pins"]) == 1
    assert r2.obj("OBJ.RELEASE", uid) == b"OK"
    assert to_int(info(r, uid)["pins"]) == 0
    r.obj("OBJ.DEL", uid)


def test_del_of_an_unpinned_object_answers_ok_and_removes_it(r, uid):
    r.obj("OBJ.PUT", uid, b"abc")
    assert r.obj("OBJ.DEL", uid) == b"OK"
    assert r.obj("OBJ.EXISTS", uid) == 0
    expect_error(r, ("OBJ.GET", uid), "NOTFOUND")
    expect_error(r, ("OBJ.DEL", uid), "NOTFOUND")


def test_id_can_be_put_again_after_del(r, uid):
    r.obj("OBJ.PUT", uid, b"old")
    r.obj("OBJ.DEL", uid)
    assert r.obj("OBJ.PUT", uid, b"new") == b"OK"
    assert r.obj("OBJ.GET", uid) == b"new"
    r.obj("OBJ.DEL", uid)


def test_exists_is_one_only_for_sealed_present_objects(r, uid):
    assert r.obj("OBJ.EXISTS", uid) == 0
    r.obj("OBJ.CREATE", uid, 1)
    assert r.obj("OBJ.EXISTS", uid) == 0
    r.obj("OBJ.SEAL", uid)
    assert r.obj("OBJ.EXISTS", uid) == 1
    r.obj("OBJ.DEL", uid)
    assert r.obj("OBJ.EXISTS", uid) == 0


def test_info_of_a_sealed_object_has_every_documented_field(r, uid):
    data, meta = BINARY_DATA, b"meta\x00"
    r.obj("OBJ.PUT", uid, data, "META", meta)
    now_ms = time.time() * 1000
    f = info(r, uid)
    missing = set(INFO_FIELDS) - set(f)
    assert not missing, f"OBJ.INFO lacks {sorted(missing)}"
    assert f["id"] == uid
    assert f["state"] == b"sealed"
    assert to_int(f["size"]) == len(data)
    assert to_int(f["meta_size"]) == len(meta)
    assert to_int(f["offset"]) >= 0
    assert to_int(f["pins"]) == 0
    assert abs(to_int(f["created_ms"]) - now_ms) < 60000
    assert re.fullmatch(r"[0-9a-fA-F]{16}", to_str(f["checksum"]))
    r.obj("OBJ.DEL", uid)


def test_info_answers_only_the_documented_fields(r, uid):
    r.obj("OBJ.PUT", uid, b"x")
    extra = set(info(r, uid)) - set(INFO_FIELDS)
    r.obj("OBJ.DEL", uid)
    assert not extra, f"OBJ.INFO answers fields the README does not document: {sorted(extra)}"


def test_info_checksum_is_xxh3_64_of_data_then_meta(r, uid):
    data, meta = BINARY_DATA * 7, b"\x00shape=3x3\r\n"
    r.obj("OBJ.PUT", uid, data, "META", meta)
    got = int(to_str(info(r, uid)["checksum"]), 16)
    assert got == xxh3_64(data + meta), f"checksum {got:016x} != {xxh3_64(data + meta):016x}"
    r.obj("OBJ.DEL", uid)


def test_seal_computes_the_checksum_of_written_data(r, uid):
    data = b"written\x00over\r\nthe wire"
    r.obj("OBJ.CREATE", uid, len(data), "META", b"m")
    r.obj("OBJ.WRITE", uid, 0, data)
    r.obj("OBJ.SEAL", uid)
    assert int(to_str(info(r, uid)["checksum"]), 16) == xxh3_64(data + b"m")
    r.obj("OBJ.DEL", uid)


def test_info_of_a_created_object_says_created_and_names_the_creator(r, uid):
    r.obj("OBJ.CREATE", uid, 5)
    f = info(r, uid)
    assert f["state"] == b"created"
    assert to_int(f["size"]) == 5
    client_id = r.execute_command("CLIENT", "ID")
    creator = f["creator"]
    assert creator == client_id or to_str(creator) == str(client_id), (
        f"creator {creator!r} is not this connection (CLIENT ID {client_id})"
    )
    r.obj("OBJ.ABORT", uid)


def test_stats_answers_every_documented_field(r):
    st = stats(r)
    missing = set(STATS_FIELDS) - set(st)
    assert not missing, f"OBJ.STATS lacks {sorted(missing)}"
    for k in STATS_FIELDS:
        if k not in ("arena_path", "node_name", "tier_path"):
            assert isinstance(st[k], int) and st[k] >= 0, f"{k} = {st[k]!r}"
    assert st["arena_size"] == 64 << 20
    assert st["arena_used"] + st["arena_free"] <= st["arena_size"]
    assert st["arena_largest_free"] <= st["arena_free"]


def test_stats_answers_only_the_documented_fields(r):
    extra = set(stats(r)) - set(STATS_FIELDS)
    assert not extra, f"OBJ.STATS answers fields the README does not document: {sorted(extra)}"


def test_arena_file_is_private_and_named_for_the_pid(server, r):
    path = stats(r)["arena_path"]
    assert os.path.dirname(path) == server.arena_dir
    assert os.path.basename(path) == f"objstore-{server.proc.pid}.arena"
    assert stat.S_ISREG(os.stat(path).st_mode)
    assert file_mode(path) == 0o600
    assert os.stat(path).st_size >= 64 << 20


def test_info_objstore_section_has_every_stats_field(r):
    text = to_str(r.execute_command("INFO", "objstore"))
    fields = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and ":" in line:
            k, v = line.split(":", 1)
            fields[k] = v
    # Redis prefixes module INFO fields with the module name.
    missing = [k for k in STATS_FIELDS if f"objstore_{k}" not in fields]
    assert not missing, f"INFO objstore lacks {missing}; it has {sorted(fields)}"
    st = stats(r)
    assert int(fields["objstore_arena_size"]) == st["arena_size"]
    assert fields["objstore_arena_path"] == st["arena_path"]


@pytest.mark.parametrize("size", [1, 63, 64, 65, 4095, 4096, 4097, 100000])
def test_objects_of_odd_sizes_round_trip(r, uid, size):
    data = (BINARY_DATA * (size // len(BINARY_DATA) + 1))[:size]
    r.obj("OBJ.PUT", uid, data)
    assert r.obj("OBJ.GET", uid) == data
    r.obj("OBJ.DEL", uid)


def test_many_small_objects_keep_their_own_bytes(r, uid):
    ids = [uid(b"%d" % i) for i in range(200)]
    p = r.pipeline(transaction=False)
    for i, oid in enumerate(ids):
        p.execute_command("OBJ.PUT", oid, b"%d" % i * (i % 7 + 1))
    assert p.execute() == [b"OK"] * len(ids)
    p = r.pipeline(transaction=False)
    for oid in ids:
        p.execute_command("OBJ.GET", oid)
    assert p.execute() == [b"%d" % i * (i % 7 + 1) for i in range(len(ids))]
    p = r.pipeline(transaction=False)
    for oid in ids:
        p.execute_command("OBJ.DEL", oid)
    p.execute()
