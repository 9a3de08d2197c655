"""TIMEOUT has a documented maximum (docs/commands.md): 86400000 ms, one day.

A larger value used to overflow the deadline of the module timer, so that
`OBJ.GET nosuch TIMEOUT 9223372036854775807` answered TIMEOUT at once. Every
command that takes TIMEOUT now answers BADARG above the maximum and changes
nothing; the maximum itself is accepted and really waits.
"""

import pytest

from objhelpers import expect_error, info, start_call, to_int, wait_blocked

MAX_MS = 86400000

# Every command that takes TIMEOUT, with a sealed object as its id.
TIMEOUT_COMMANDS = {
    "get": ["OBJ.GET", None, "TIMEOUT"],
    "get-withmeta": ["OBJ.GET", None, "WITHMETA", "TIMEOUT"],
    "pin": ["OBJ.PIN", None, "TIMEOUT"],
    "fetch": ["OBJ.FETCH", None, "TIMEOUT"],
    "fetch-via": ["OBJ.FETCH", None, "VIA", "tcp", "TIMEOUT"],
}
TOO_LARGE = [str(MAX_MS + 1), str(1 << 32), str((1 << 53) + 1), "9223372036854775807"]


def _argv(template, oid, value):
    return [oid if a is None else a for a in template] + [value]


@pytest.mark.parametrize("value", TOO_LARGE)
@pytest.mark.parametrize("cmd", sorted(TIMEOUT_COMMANDS))
def test_timeout_above_the_maximum_is_badarg(r, uid, cmd, value):
    r.obj("OBJ.PUT", uid, b"v")
    try:
        text = expect_error(r, _argv(TIMEOUT_COMMANDS[cmd], uid, value), "BADARG")
        assert str(MAX_MS) in text, text
        assert to_int(info(r, uid)["pins"]) == 0  # nothing was pinned
    finally:
        r.obj("OBJ.DEL", uid)


@pytest.mark.parametrize("value", TOO_LARGE)
def test_timeout_above_the_maximum_on_a_missing_id_is_badarg_not_timeout(r, uid, value):
    for template in (["OBJ.GET", None, "TIMEOUT"], ["OBJ.PIN", None, "TIMEOUT"]):
        expect_error(r, _argv(template, uid, value), "BADARG")


@pytest.mark.parametrize("cmd", sorted(TIMEOUT_COMMANDS))
def test_the_maximum_timeout_is_accepted(r, uid, cmd):
    r.obj("OBJ.PUT", uid, b"v")
    try:
        reply = r.obj(*_argv(TIMEOUT_COMMANDS[cmd], uid, str(MAX_MS)))
        assert not isinstance(reply, Exception)
    finally:
        for _ in range(2):
            try:
                r.obj("OBJ.RELEASE", uid)
            except Exception:
                pass
        r.obj("OBJ.DEL", uid)


@pytest.mark.parametrize("cmd", ["OBJ.GET", "OBJ.PIN"])
def test_the_maximum_timeout_waits_for_the_object(r, r2, uid, cmd):
    waiter = start_call(r2, cmd, uid, "TIMEOUT", str(MAX_MS))
    wait_blocked(r, 1)
    assert waiter.is_alive(), f"{cmd} TIMEOUT {MAX_MS} answered before the object existed"
    r.obj("OBJ.PUT", uid, b"late")
    reply = waiter.result()
    if cmd == "OBJ.GET":
        assert reply == b"late"
    else:
        r2.obj("OBJ.RELEASE", uid)
    r.obj("OBJ.DEL", uid)
