"""OBJ.LIST: SCAN-like iteration over sealed objects.

README: `OBJ.LIST cursor [MATCH pattern] [COUNT n]` answers
`[next_cursor, [id ...]]`; sealed objects only, glob MATCH, the iteration
ends when the cursor is 0. Like SCAN, an id may come back more than once but
an object present for the whole iteration must come back at least once.
"""

import threading

import pytest

from objhelpers import expect_error, stats, to_int

MAX_CALLS = 20000


def _scan(c, *opts):
    """Iterate to cursor 0; returns (every id returned, number of calls)."""
    cursor, seen = b"0", []
    for calls in range(1, MAX_CALLS + 1):
        reply = c.obj("OBJ.LIST", cursor, *opts)
        assert isinstance(reply, list) and len(reply) == 2, f"OBJ.LIST reply {reply!r:.200}"
        cursor, ids = reply
        assert isinstance(ids, list)
        seen += ids
        if to_int(cursor) == 0:
            return seen, calls
    raise AssertionError(f"OBJ.LIST did not return cursor 0 within {MAX_CALLS} calls")


def _put_all(c, ids, data=b"v"):
    p = c.pipeline(transaction=False)
    for oid in ids:
        p.execute_command("OBJ.PUT", oid, data)
    assert p.execute() == [b"OK"] * len(ids)


def _del_all(c, ids):
    p = c.pipeline(transaction=False)
    for oid in ids:
        p.execute_command("OBJ.DEL", oid)
    p.execute(raise_on_error=False)


def test_list_reply_is_a_cursor_and_an_array_of_ids(r, uid):
    r.obj("OBJ.PUT", uid, b"x")
    reply = r.obj("OBJ.LIST", 0)
    assert isinstance(reply, list) and len(reply) == 2
    assert isinstance(reply[1], list)
    to_int(reply[0])  # a decimal cursor, as SCAN's
    r.obj("OBJ.DEL", uid)


def test_list_with_count_10_returns_every_one_of_1000_ids(r, uid):
    ids = [uid(b"%04d" % i) for i in range(1000)]
    _put_all(r, ids)
    try:
        seen, calls = _scan(r, "COUNT", 10)
        missing = set(ids) - set(seen)
        assert not missing, f"{len(missing)} of 1000 ids never returned, e.g. {sorted(missing)[:3]}"
        assert calls > 1, "COUNT 10 over 1000 objects answered everything in one call"
    finally:
        _del_all(r, ids)


def test_list_with_match_returns_only_matching_ids(r, uid):
    wanted = [uid(b"keep:%d" % i) for i in range(50)]
    others = [uid(b"drop:%d" % i) for i in range(50)]
    _put_all(r, wanted + others)
    try:
        seen, _ = _scan(r, "MATCH", bytes(uid) + b":keep:*", "COUNT", 10)
        assert set(seen) == set(wanted)
    finally:
        _del_all(r, wanted + others)


@pytest.mark.parametrize(
    "pattern,expect",
    [
        (b"a?c", {b"abc", b"a\x00c"}),
        (b"a[bx]c", {b"abc"}),
        (b"a*", {b"abc", b"a\x00c", b"a\r\nlong"}),
        (b"*long", {b"a\r\nlong"}),
        (b"abc", {b"abc"}),
    ],
    ids=["question-mark", "class", "prefix-star", "suffix-star", "literal"],
)
def test_list_match_is_a_binary_safe_glob(r, uid, pattern, expect):
    names = [b"abc", b"a\x00c", b"a\r\nlong", b"zzz"]
    ids = [uid(n) for n in names]
    _put_all(r, ids)
    try:
        seen, _ = _scan(r, "MATCH", uid(pattern), "COUNT", 100)
        assert set(seen) == {uid(n) for n in expect}
    finally:
        _del_all(r, ids)


def test_list_returns_sealed_objects_only(r, r2, uid):
    sealed, created, deleted = uid(b"sealed"), uid(b"created"), uid(b"deleted")
    r.obj("OBJ.PUT", sealed, b"s")
    r.obj("OBJ.PUT", deleted, b"d")
    r.obj("OBJ.DEL", deleted)
    r.obj("OBJ.CREATE", created, 1)
    try:
        for c in (r, r2):
            seen, _ = _scan(c, "MATCH", bytes(uid) + b"*")
            assert set(seen) == {sealed}
    finally:
        r.obj("OBJ.ABORT", created)
        r.obj("OBJ.DEL", sealed)


def test_list_without_count_ends_at_cursor_zero(r, uid):
    ids = [uid(b"%d" % i) for i in range(30)]
    _put_all(r, ids)
    try:
        seen, _ = _scan(r)
        assert set(ids) <= set(seen)
    finally:
        _del_all(r, ids)


def test_list_match_without_any_match_ends_with_no_ids(r, uid):
    seen, _ = _scan(r, "MATCH", uid(b"nothing-here-*"), "COUNT", 50)
    assert seen == []


def test_list_count_and_match_in_either_order(r, uid):
    ids = [uid(b"%d" % i) for i in range(20)]
    _put_all(r, ids)
    try:
        a, _ = _scan(r, "MATCH", bytes(uid) + b"*", "COUNT", 5)
        b, _ = _scan(r, "COUNT", 5, "MATCH", bytes(uid) + b"*")
        assert set(a) == set(b) == set(ids)
    finally:
        _del_all(r, ids)


# ---- bounded matching -------------------------------------------------------------------
# A MATCH pattern is at most 1024 bytes, and one call stops matching once it has done a
# fixed budget of match work, answering a cursor to go on from (docs/commands.md). The
# pattern below costs about half a million steps per 512-byte id: a class of 1020 bytes
# tried at each of the id's positions.

PATTERN_MAX = 1024


def _costly_ids(prefix, n):
    """n ids of 512 bytes; the odd ones end in "qz" and match _costly_pattern()."""
    return [prefix + (b"%03d" % i).rjust(8, b"-") + b"q" * (512 - len(prefix) - 9)
            + (b"z" if i % 2 else b"y") for i in range(n)]


def _costly_pattern():
    letters = b"qabcdefghijklmnoprstuvwx"
    cls = (letters * (PATTERN_MAX // len(letters) + 1))[:PATTERN_MAX - 4]
    pat = b"*[" + cls + b"]z"
    assert len(pat) == PATTERN_MAX
    return pat


def test_list_match_pattern_longer_than_1024_bytes_is_badarg(r):
    for pat in (b"*" * (PATTERN_MAX + 1), b"[" + b"a" * 100000 + b"]"):
        text = expect_error(r, ["OBJ.LIST", 0, "MATCH", pat, "COUNT", 20], "BADARG")
        assert "1024" in text, text
    assert r.obj("OBJ.LIST", 0, "MATCH", b"*" * PATTERN_MAX, "COUNT", 1)[0] is not None


def test_list_costly_pattern_ends_calls_early_and_still_finds_every_match(fresh_server):
    c = fresh_server.client()
    ids = _costly_ids(b"cost:", 40)
    _put_all(c, ids)
    before = stats(c)["list_budget_stops"]
    seen, calls = _scan(c, "MATCH", _costly_pattern(), "COUNT", 1000)
    assert set(seen) == {i for i in ids if i.endswith(b"z")}
    # COUNT covers the whole table, so a call that stops before it is the budget's.
    assert calls >= 4, f"one call matched {len(ids)} costly ids in {calls} calls"
    assert stats(c)["list_budget_stops"] - before >= calls - 1


def test_list_costly_pattern_lets_other_clients_in_between_calls(fresh_server):
    c, pinger = fresh_server.client(), fresh_server.client()
    ids = _costly_ids(b"ping:", 40)
    _put_all(c, ids)
    result = {}

    def scan():
        result["scan"] = _scan(c, "MATCH", _costly_pattern(), "COUNT", 1000)

    t = threading.Thread(target=scan, daemon=True)
    pongs = 0
    t.start()
    while t.is_alive():
        assert pinger.execute_command("PING") in (b"PONG", True)
        pongs += 1
    t.join()
    seen, calls = result["scan"]
    assert set(seen) == {i for i in ids if i.endswith(b"z")}
    # Each call is bounded, so the server answered PINGs between the calls of one
    # iteration that would otherwise have been a single long call.
    assert calls >= 4 and pongs >= 1, (calls, pongs)
