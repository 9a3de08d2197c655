"""Commands that tie state to the calling connection are refused inside
scripts: a script's client never disconnects, so an object it created or a
pin it took would never be given back (arena memory would leak).

Each case runs the command through EVAL and through FCALL and checks that it
is refused and that nothing was allocated or pinned.
"""

import pytest
import redis

from objhelpers import stats, to_int

TIED = [
    ("OBJ.CREATE", "'s:new'", "10"),
    ("OBJ.PIN", "'s:sealed'"),
    ("OBJ.WRITE", "'s:new'", "0", "'x'"),
    ("OBJ.SEAL", "'s:new'"),
    ("OBJ.ABORT", "'s:new'"),
    ("OBJ.RELEASE", "'s:sealed'"),
]


def lua_call(cmd):
    return "return redis.call(" + ", ".join(["'" + cmd[0] + "'"] + list(cmd[1:])) + ")"


@pytest.fixture
def node(fresh_server):
    r = fresh_server.client()
    assert r.execute_command("OBJ.PUT", "s:sealed", b"data") == b"OK"
    return r


@pytest.mark.parametrize("cmd", TIED, ids=[c[0] for c in TIED])
def test_eval_refuses_commands_that_tie_state_to_the_connection(node, cmd):
    before = stats(node)
    with pytest.raises(redis.ResponseError) as e:
        node.eval(lua_call(cmd), 0)
    assert "not allowed from script" in str(e.value)
    after = stats(node)
    assert to_int(after["arena_used"]) == to_int(before["arena_used"])
    assert to_int(after["objects_pinned"]) == 0
    assert to_int(after["objects_created"]) == 0


@pytest.mark.parametrize("cmd", TIED[:2], ids=[c[0] for c in TIED[:2]])
def test_fcall_refuses_commands_that_tie_state_to_the_connection(node, cmd):
    body = lua_call(cmd)
    lib = "#!lua name=objtest\nredis.register_function('f', function() " + body + " end)"
    node.execute_command("FUNCTION", "LOAD", "REPLACE", lib)
    before = stats(node)
    with pytest.raises(redis.ResponseError) as e:
        node.execute_command("FCALL", "f", 0)
    assert "not allowed from script" in str(e.value)
    after = stats(node)
    assert to_int(after["arena_used"]) == to_int(before["arena_used"])
    assert to_int(after["objects_pinned"]) == 0


def test_scripts_may_still_read_and_put(node):
    assert node.eval("return redis.call('OBJ.GET', 's:sealed')", 0) == b"data"
    assert node.eval("return redis.call('OBJ.PUT', 's:put', 'v')", 0) == b"OK"
    assert node.execute_command("OBJ.GET", "s:put") == b"v"
