"""OBJ.LIST: SCAN-like iteration over sealed objects.

README: `OBJ.LIST cursor [MATCH pattern] [COUNT n]` answers
`[next_cursor, [id ...]]`; sealed objects only, glob MATCH, the iteration
ends when the cursor is 0. Like SCAN, an id may come back more than once but
an object present for the whole iteration must come back at least once.
"""

import time

import pytest

from objhelpers import to_int

MAX_CALLS = 20000


def _scan(c, *opts):
    """Iterate to cursor 0; returns (every id returned, number of calls)."""
    cursor, seen = b"0", []
    deadline = time.monotonic() + 30
    for calls in range(1, MAX_CALLS + 1):
        reply = c.obj("OBJ.LIST", cursor, *opts)
        assert isinstance(reply, list) and len(reply) == 2, f"OBJ.LIST reply {reply!r:.200}"
        cursor, ids = reply
        assert isinstance(ids, list)
        seen += ids
        if to_int(cursor) == 0:
            return seen, calls
        assert time.monotonic() < deadline, "OBJ.LIST iteration did not end within 30 s"
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
