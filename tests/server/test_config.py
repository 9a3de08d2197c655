"""Configuration and command registration.

README: settings are module arguments and module configs (`objstore.memory`,
`CONFIG GET objstore.*`); `memory` takes k/m/g suffixes with an optional b and
cannot be changed at run time, nor can `arena-dir`. Commands are registered
with their arity and docs (COMMAND INFO / COMMAND DOCS).
"""

import pytest

from objhelpers import MIB, Client, pairs, parse_size, stats, to_str


# name -> arity as Redis counts it (negative: at least that many words)
ARITIES = {
    "obj.put": -3,
    "obj.create": -3,
    "obj.write": 4,
    "obj.seal": -2,
    "obj.abort": 2,
    "obj.get": -2,
    "obj.pin": -2,
    "obj.release": -2,
    "obj.del": 2,
    "obj.exists": 2,
    "obj.info": 2,
    "obj.list": -2,
    "obj.stats": 1,
    "obj.drain": -1,
}


def _config_get(c, name):
    reply = c.execute_command("CONFIG", "GET", name)
    return pairs(reply) if reply else {}


def test_config_get_memory_returns_the_configured_size(make_server):
    s = make_server(memory="8mb")
    c = s.client()
    got = _config_get(c, "objstore.memory")
    assert "objstore.memory" in got, f"CONFIG GET objstore.memory answered {got!r}"
    assert parse_size(got["objstore.memory"]) == 8 * MIB


def test_config_get_objstore_star_lists_memory_and_arena_dir(server, r):
    got = _config_get(r, "objstore.*")
    assert parse_size(got["objstore.memory"]) == 64 * MIB
    assert to_str(got["objstore.arena-dir"]).rstrip("/") == server.arena_dir.rstrip("/")


def test_config_set_memory_is_refused(server, r):
    with pytest.raises(Exception) as e:
        r.execute_command("CONFIG", "SET", "objstore.memory", "16mb")
    assert "ERR" in str(e.value) or "immutable" in str(e.value)
    assert parse_size(_config_get(r, "objstore.memory")["objstore.memory"]) == 64 * MIB
    assert stats(r)["arena_size"] == 64 * MIB


def test_config_set_arena_dir_is_refused(server, r):
    with pytest.raises(Exception):
        r.execute_command("CONFIG", "SET", "objstore.arena-dir", "/tmp")
    got = _config_get(r, "objstore.arena-dir")["objstore.arena-dir"]
    assert to_str(got).rstrip("/") == server.arena_dir.rstrip("/")


@pytest.mark.parametrize("text", ["8mb", "8m", "8192kb", "8192k", "8388608", "8388608b", "8MB"])
def test_memory_argument_accepts_documented_suffixes(make_server, text):
    s = make_server(memory=text)
    assert s.stats()["arena_size"] == 8 * MIB


def test_memory_defaults_to_1gb(make_server):
    s = make_server(memory=None)
    assert s.stats()["arena_size"] == 1 << 30


@pytest.mark.parametrize(
    "module_args",
    [
        ["memory", "abc"],
        ["memory", "-8mb"],
        ["memory", "0"],
        ["memory", "8xb"],
        ["memory", "99999999999999999999999"],
        ["memory"],
        ["no-such-setting", "1"],
        ["arena-dir", "/nonexistent/objstore-test-dir"],
    ],
    ids=["not-a-size", "negative", "zero", "bad-suffix", "overflow", "no-value",
         "unknown-setting", "missing-arena-dir"],
)
def test_bad_module_arguments_make_the_module_refuse_to_load(make_server, module_args):
    s = make_server(memory=None, module_args=module_args, start=False)
    ready, log = s.try_start()
    if ready:
        s.stop()
    assert not ready, f"server started with module args {module_args}; log:\n{log[-2000:]}"


def test_every_command_is_registered_with_its_arity(r):
    reply = r.execute_command("COMMAND", "INFO", *ARITIES)
    assert len(reply) == len(ARITIES)
    got = {}
    for name, entry in zip(ARITIES, reply):
        assert entry is not None, f"{name} is not a registered command"
        got[to_str(entry[0])] = entry[1]
    assert got == ARITIES


def test_command_docs_describe_obj_put(r):
    reply = r.execute_command("COMMAND", "DOCS", "obj.put")
    assert reply and to_str(reply[0]) == "obj.put", f"COMMAND DOCS obj.put: {reply!r}"
    docs = pairs(reply[1])
    assert docs.get("summary"), f"no summary in COMMAND DOCS obj.put: {sorted(docs)}"
    assert to_str(docs.get("module")) == "objstore"
    assert docs.get("arguments"), "COMMAND DOCS obj.put lists no arguments"


def test_module_is_listed_as_objstore(r):
    mods = r.execute_command("MODULE", "LIST")
    names = [to_str(pairs(m)["name"]) for m in mods]
    assert "objstore" in names


def test_clients_see_the_same_arena_size_as_configured(make_server):
    s = make_server(memory="16mb")
    c = Client(s.port)
    try:
        assert stats(c)["arena_size"] == 16 * MIB
    finally:
        c.close()


def _rss_shmem_kib(pid):
    """The process's resident shared memory (its mapped arena pages), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssShmem:"):
                return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no RssShmem line")


def test_prefault_maps_the_whole_arena_at_start(make_server):
    lazy = make_server(memory="64mb")
    eager = make_server(memory="64mb", module_args=["prefault", "yes"])
    assert to_str(_config_get(eager.client(), "objstore.prefault")["objstore.prefault"]) == "yes"
    assert to_str(_config_get(lazy.client(), "objstore.prefault")["objstore.prefault"]) == "no"
    # With prefault every arena page is mapped from the start; without, only
    # what has been touched (the object table's own pages live on the heap).
    assert _rss_shmem_kib(eager.proc.pid) >= 64 * 1024
    assert _rss_shmem_kib(lazy.proc.pid) < 16 * 1024
    with pytest.raises(Exception):
        eager.client().execute_command("CONFIG", "SET", "objstore.prefault", "no")
    c = eager.client()
    c.execute_command("OBJ.PUT", "pf", b"x" * 4096)
    assert c.execute_command("OBJ.GET", "pf") == b"x" * 4096


def test_prefault_takes_only_yes_or_no(make_server):
    s = make_server(memory="8mb", module_args=["prefault", "maybe"], start=False)
    ready, log = s.try_start()
    if ready:
        s.stop()
    assert not ready, f"server started with prefault maybe; log:\n{log[-2000:]}"
    assert "yes or no" in log
