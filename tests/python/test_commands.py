"""The rest of the commands through the package: info, stats, list as an iterator,
nodes, locate, exists, delete, fetch of local ids, and raw commands."""

import numpy as np

from pyhelpers import arena_path


def test_info_fields(oc, uid):
    oc.put(uid, b"12345", meta=b"mm")
    info = oc.info(uid)
    assert info["state"] == "sealed" and info["size"] == 5 and info["meta_size"] == 2
    assert info["pins"] == 0 and len(info["checksum"]) == 16


def test_stats(oc, rc):
    st = oc.stats()
    assert st["arena_path"] == arena_path(rc)
    assert isinstance(st["arena_size"], int) and st["arena_size"] > 0


def test_list_iterates_over_every_cursor(oc, uid):
    ids = {uid + b":%03d" % i for i in range(120)}
    for i in ids:
        oc.put(i, b"x")
    pattern = uid.decode("latin-1").replace("\x00", "?") + ":*"
    it = oc.list(match=pattern.encode("latin-1"), count=7)
    assert iter(it) is it
    got = set(it)
    assert ids <= got


def test_nodes_and_locate(oc, uid):
    nodes = oc.nodes()
    assert len(nodes) == 1
    name = nodes[0]["name"]
    oc.put(uid, np.zeros(10))
    loc = oc.locate(uid)
    assert loc["locations"] == [name] and loc["size"] == 80


def test_exists_and_delete(oc, uid):
    assert oc.exists(uid) is False
    oc.put(uid, b"x")
    assert oc.exists(uid) is True
    assert oc.delete(uid) == "OK"
    assert oc.exists(uid) is False


def test_fetch_of_a_local_id_and_a_single_id(oc, uid):
    oc.put(uid, b"x")
    assert oc.fetch(uid) == {uid: None}
    assert oc.fetch([uid], via="tcp", timeout=5) == {uid: None}


def test_raw_command(oc):
    assert oc.command("PING") == "PONG"
    assert oc.command("ECHO", b"\x00bin") == b"\x00bin"
