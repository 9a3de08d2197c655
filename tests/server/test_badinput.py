"""Bad input for every OBJ.* command, as tables.

Each row: the state the object is put in first, the command the acting
connection sends, and the error code word the README promises. Every row also
checks the README's "a command that answers an error has changed nothing":
OBJ.STATS (and the object's OBJ.INFO, where it has one) are the same before
and after, except that an OOM answer counts one more oom_errors.

Wrong arity may be answered by Redis itself ("ERR wrong number of arguments",
when the module registers its arity, which COMMAND INFO checks elsewhere) or
by the module (BADARG); both are accepted, nothing else is.
"""

import pytest

from objhelpers import assert_stats_unchanged, expect_error, fmt_args, info, stats

ID = object()  # placeholder for the test's unique id
ARITY = ("BADARG", "ERR")
BIG = "99999999999999999999999"  # overflows 64 bits
U64 = "18446744073709551616"  # 2**64
I64MAX = "9223372036854775807"
TIB = str(1 << 40)

# Setups: what exists under ID before the command, and who holds it.
#   none          nothing
#   sealed        sealed by the other connection (6 bytes "abcdef", meta "mm")
#   sealed_own    created, written and sealed by the acting connection
#   created       created (6 bytes) by the acting connection
#   created_other created (6 bytes) by the other connection
#   pinned_other  sealed and pinned by the other connection


def _case(name, setup, args, codes):
    return pytest.param(setup, args, codes, id=name)


CASES = [
    # ---- wrong arity ------------------------------------------------------------------
    _case("put-no-args", "none", ["OBJ.PUT"], ARITY),
    _case("put-no-data", "none", ["OBJ.PUT", ID], ARITY),
    _case("create-no-args", "none", ["OBJ.CREATE"], ARITY),
    _case("create-no-size", "none", ["OBJ.CREATE", ID], ARITY),
    _case("write-no-args", "created", ["OBJ.WRITE"], ARITY),
    _case("write-no-data", "created", ["OBJ.WRITE", ID, "0"], ARITY),
    _case("write-extra-arg", "created", ["OBJ.WRITE", ID, "0", "ab", "cd"], ARITY),
    _case("seal-no-args", "created", ["OBJ.SEAL"], ARITY),
    _case("seal-extra-arg", "created", ["OBJ.SEAL", ID, "x"], ARITY),
    _case("abort-no-args", "created", ["OBJ.ABORT"], ARITY),
    _case("abort-extra-arg", "created", ["OBJ.ABORT", ID, "x"], ARITY),
    _case("get-no-args", "sealed", ["OBJ.GET"], ARITY),
    _case("pin-no-args", "sealed", ["OBJ.PIN"], ARITY),
    _case("release-no-args", "pinned_other", ["OBJ.RELEASE"], ARITY),
    _case("release-gen-without-value", "pinned_other", ["OBJ.RELEASE", ID, "GEN"], ARITY),
    _case("release-extra-arg", "pinned_other", ["OBJ.RELEASE", ID, "GEN", "1", "x"], ARITY),
    _case("del-no-args", "sealed", ["OBJ.DEL"], ARITY),
    _case("del-extra-arg", "sealed", ["OBJ.DEL", ID, "x"], ARITY),
    _case("exists-no-args", "sealed", ["OBJ.EXISTS"], ARITY),
    _case("exists-extra-arg", "sealed", ["OBJ.EXISTS", ID, "x"], ARITY),
    _case("info-no-args", "sealed", ["OBJ.INFO"], ARITY),
    _case("info-extra-arg", "sealed", ["OBJ.INFO", ID, "x"], ARITY),
    _case("list-no-args", "sealed", ["OBJ.LIST"], ARITY),
    _case("stats-extra-arg", "none", ["OBJ.STATS", "x"], ARITY),
    # ---- sizes (OBJ.CREATE) -----------------------------------------------------------
    _case("create-size-not-a-number", "none", ["OBJ.CREATE", ID, "abc"], "BADARG"),
    _case("create-size-empty", "none", ["OBJ.CREATE", ID, ""], "BADARG"),
    _case("create-size-negative", "none", ["OBJ.CREATE", ID, "-1"], "BADARG"),
    _case("create-size-fraction", "none", ["OBJ.CREATE", ID, "1.5"], "BADARG"),
    _case("create-size-hex", "none", ["OBJ.CREATE", ID, "0x10"], "BADARG"),
    _case("create-size-trailing-junk", "none", ["OBJ.CREATE", ID, "10x"], "BADARG"),
    _case("create-size-2^64", "none", ["OBJ.CREATE", ID, U64], "BADARG"),
    _case("create-size-overflow", "none", ["OBJ.CREATE", ID, BIG], "BADARG"),
    _case("create-size-1TiB-beyond-arena", "none", ["OBJ.CREATE", ID, TIB], "OOM"),
    _case("create-size-int64-max-beyond-arena", "none", ["OBJ.CREATE", ID, I64MAX], "OOM"),
    _case("create-size-arena-plus-one", "none", ["OBJ.CREATE", ID, str((64 << 20) + 1)], "OOM"),
    # ---- offsets and ranges (OBJ.WRITE on a 6-byte created object) -------------------
    _case("write-offset-not-a-number", "created", ["OBJ.WRITE", ID, "abc", "ab"], "BADARG"),
    _case("write-offset-empty", "created", ["OBJ.WRITE", ID, "", "ab"], "BADARG"),
    _case("write-offset-negative", "created", ["OBJ.WRITE", ID, "-1", "ab"], "BADARG"),
    _case("write-offset-fraction", "created", ["OBJ.WRITE", ID, "0.5", "ab"], "BADARG"),
    _case("write-offset-overflow", "created", ["OBJ.WRITE", ID, BIG, "ab"], "BADARG"),
    _case("write-offset-2^64", "created", ["OBJ.WRITE", ID, U64, "ab"], "BADARG"),
    _case("write-offset-plus-len-wraps", "created", ["OBJ.WRITE", ID, I64MAX, "ab"], "BADARG"),
    _case("write-past-the-end", "created", ["OBJ.WRITE", ID, "5", "ab"], "BADARG"),
    _case("write-longer-than-object", "created", ["OBJ.WRITE", ID, "0", "abcdefg"], "BADARG"),
    _case("write-empty-beyond-end", "created", ["OBJ.WRITE", ID, "7", ""], "BADARG"),
    # ---- timeouts ---------------------------------------------------------------------
    _case("get-timeout-not-a-number", "sealed", ["OBJ.GET", ID, "TIMEOUT", "abc"], "BADARG"),
    _case("get-timeout-negative", "sealed", ["OBJ.GET", ID, "TIMEOUT", "-1"], "BADARG"),
    _case("get-timeout-fraction", "sealed", ["OBJ.GET", ID, "TIMEOUT", "1.5"], "BADARG"),
    _case("get-timeout-overflow", "sealed", ["OBJ.GET", ID, "TIMEOUT", BIG], "BADARG"),
    _case("get-timeout-empty", "sealed", ["OBJ.GET", ID, "TIMEOUT", ""], "BADARG"),
    _case("pin-timeout-not-a-number", "sealed", ["OBJ.PIN", ID, "TIMEOUT", "abc"], "BADARG"),
    _case("pin-timeout-negative", "sealed", ["OBJ.PIN", ID, "TIMEOUT", "-1"], "BADARG"),
    _case("pin-timeout-fraction", "sealed", ["OBJ.PIN", ID, "TIMEOUT", "1.5"], "BADARG"),
    _case("pin-timeout-overflow", "sealed", ["OBJ.PIN", ID, "TIMEOUT", BIG], "BADARG"),
    # ---- OBJ.LIST cursor and COUNT ----------------------------------------------------
    _case("list-cursor-not-a-number", "sealed", ["OBJ.LIST", "abc"], "BADARG"),
    _case("list-cursor-negative", "sealed", ["OBJ.LIST", "-1"], "BADARG"),
    _case("list-cursor-overflow", "sealed", ["OBJ.LIST", BIG], "BADARG"),
    _case("list-count-not-a-number", "sealed", ["OBJ.LIST", "0", "COUNT", "abc"], "BADARG"),
    _case("list-count-negative", "sealed", ["OBJ.LIST", "0", "COUNT", "-1"], "BADARG"),
    _case("list-count-overflow", "sealed", ["OBJ.LIST", "0", "COUNT", BIG], "BADARG"),
    # ---- unknown options and options without a value ----------------------------------
    _case("put-unknown-option", "none", ["OBJ.PUT", ID, "data", "FOO", "bar"], "BADARG"),
    _case("put-extra-after-meta", "none", ["OBJ.PUT", ID, "data", "META", "m", "FOO"],
          "BADARG"),
    _case("put-meta-without-value", "none", ["OBJ.PUT", ID, "data", "META"], "BADARG"),
    _case("create-unknown-option", "none", ["OBJ.CREATE", ID, "4", "FOO", "bar"], "BADARG"),
    _case("create-meta-without-value", "none", ["OBJ.CREATE", ID, "4", "META"], "BADARG"),
    _case("get-unknown-option", "sealed", ["OBJ.GET", ID, "FOO"], "BADARG"),
    _case("get-unknown-option-after-timeout", "sealed",
          ["OBJ.GET", ID, "TIMEOUT", "10", "BAR"], "BADARG"),
    _case("get-timeout-without-value", "sealed", ["OBJ.GET", ID, "TIMEOUT"], "BADARG"),
    _case("pin-unknown-option", "sealed", ["OBJ.PIN", ID, "FOO"], "BADARG"),
    _case("pin-withmeta-is-not-an-option", "sealed", ["OBJ.PIN", ID, "WITHMETA"], "BADARG"),
    _case("pin-timeout-without-value", "sealed", ["OBJ.PIN", ID, "TIMEOUT"], "BADARG"),
    _case("list-unknown-option", "sealed", ["OBJ.LIST", "0", "FOO", "bar"], "BADARG"),
    _case("list-unknown-option-after-count", "sealed", ["OBJ.LIST", "0", "COUNT", "10", "FOO"],
          "BADARG"),
    _case("list-match-without-value", "sealed", ["OBJ.LIST", "0", "MATCH"], "BADARG"),
    _case("list-count-without-value", "sealed", ["OBJ.LIST", "0", "COUNT"], "BADARG"),
    # ---- existing ids ----------------------------------------------------------------------
    _case("put-of-sealed-id", "sealed", ["OBJ.PUT", ID, "new"], "EXISTS"),
    _case("put-of-own-created-id", "created", ["OBJ.PUT", ID, "new"], "EXISTS"),
    _case("put-of-others-created-id", "created_other", ["OBJ.PUT", ID, "new"], "EXISTS"),
    _case("put-of-pinned-id", "pinned_other", ["OBJ.PUT", ID, "new"], "EXISTS"),
    _case("create-of-sealed-id", "sealed", ["OBJ.CREATE", ID, "3"], "EXISTS"),
    _case("create-of-own-created-id", "created", ["OBJ.CREATE", ID, "3"], "EXISTS"),
    _case("create-of-others-created-id", "created_other", ["OBJ.CREATE", ID, "3"], "EXISTS"),
    # ---- wrong state -------------------------------------------------------------------
    _case("write-after-seal", "sealed_own", ["OBJ.WRITE", ID, "0", "ab"], "WRONGSTATE"),
    _case("write-to-others-sealed", "sealed", ["OBJ.WRITE", ID, "0", "ab"], "WRONGSTATE"),
    _case("write-by-other-connection", "created_other", ["OBJ.WRITE", ID, "0", "ab"],
          "WRONGSTATE"),
    _case("seal-by-other-connection", "created_other", ["OBJ.SEAL", ID], "WRONGSTATE"),
    _case("abort-by-other-connection", "created_other", ["OBJ.ABORT", ID], "WRONGSTATE"),
    _case("seal-twice", "sealed_own", ["OBJ.SEAL", ID], "WRONGSTATE"),
    _case("seal-of-others-sealed", "sealed", ["OBJ.SEAL", ID], "WRONGSTATE"),
    _case("abort-of-sealed", "sealed_own", ["OBJ.ABORT", ID], "WRONGSTATE"),
    _case("release-without-pin", "sealed", ["OBJ.RELEASE", ID], "WRONGSTATE"),
    _case("release-of-others-pin", "pinned_other", ["OBJ.RELEASE", ID], "WRONGSTATE"),
    _case("release-of-created", "created", ["OBJ.RELEASE", ID], "WRONGSTATE"),
    _case("release-unknown-selector", "pinned_other", ["OBJ.RELEASE", ID, "AGE", "1"], "BADARG"),
    _case("release-gen-not-a-number", "pinned_other", ["OBJ.RELEASE", ID, "GEN", "x"], "BADARG"),
    _case("release-gen-negative", "pinned_other", ["OBJ.RELEASE", ID, "GEN", "-1"], "BADARG"),
    _case("release-offset-overflow", "pinned_other", ["OBJ.RELEASE", ID, "OFFSET", BIG],
          "BADARG"),
    _case("release-gen-of-others-pin", "pinned_other", ["OBJ.RELEASE", ID, "GEN", "1"],
          "WRONGSTATE"),
    _case("release-offset-without-pin", "sealed", ["OBJ.RELEASE", ID, "OFFSET", "0"],
          "WRONGSTATE"),
    _case("del-of-created", "created", ["OBJ.DEL", ID], "WRONGSTATE"),
    # ---- missing ids -------------------------------------------------------------------
    _case("get-missing", "none", ["OBJ.GET", ID], "NOTFOUND"),
    _case("get-withmeta-missing", "none", ["OBJ.GET", ID, "WITHMETA"], "NOTFOUND"),
    _case("pin-missing", "none", ["OBJ.PIN", ID], "NOTFOUND"),
    _case("info-missing", "none", ["OBJ.INFO", ID], "NOTFOUND"),
    _case("del-missing", "none", ["OBJ.DEL", ID], "NOTFOUND"),
    _case("write-missing", "none", ["OBJ.WRITE", ID, "0", "ab"], "NOTFOUND"),
    _case("seal-missing", "none", ["OBJ.SEAL", ID], "NOTFOUND"),
    _case("abort-missing", "none", ["OBJ.ABORT", ID], "NOTFOUND"),
    _case("release-missing", "none", ["OBJ.RELEASE", ID], ("NOTFOUND", "WRONGSTATE")),
]

# Every command that takes an id, with otherwise valid arguments.
ID_COMMANDS = {
    "put": ["OBJ.PUT", ID, "data"],
    "create": ["OBJ.CREATE", ID, "4"],
    "write": ["OBJ.WRITE", ID, "0", "ab"],
    "seal": ["OBJ.SEAL", ID],
    "abort": ["OBJ.ABORT", ID],
    "get": ["OBJ.GET", ID],
    "get-timeout": ["OBJ.GET", ID, "TIMEOUT", "10"],
    "pin": ["OBJ.PIN", ID],
    "release": ["OBJ.RELEASE", ID],
    "del": ["OBJ.DEL", ID],
    "exists": ["OBJ.EXISTS", ID],
    "info": ["OBJ.INFO", ID],
}
BAD_IDS = {"empty": b"", "513-bytes": b"\x00" + b"i" * 511 + b"\xff"}


def _setup(kind, oid, me, other):
    if kind == "none":
        return
    if kind in ("sealed", "pinned_other"):
        other.obj("OBJ.PUT", oid, b"abcdef", "META", b"mm")
        if kind == "pinned_other":
            other.obj("OBJ.PIN", oid)
    elif kind == "sealed_own":
        me.obj("OBJ.CREATE", oid, 6)
        me.obj("OBJ.WRITE", oid, 0, b"abcdef")
        me.obj("OBJ.SEAL", oid)
    elif kind == "created":
        me.obj("OBJ.CREATE", oid, 6)
        me.obj("OBJ.WRITE", oid, 0, b"abc")
    elif kind == "created_other":
        other.obj("OBJ.CREATE", oid, 6)
        other.obj("OBJ.WRITE", oid, 0, b"abc")
    else:
        raise AssertionError(kind)


def _cleanup(oid, me, other):
    """Leave nothing behind on the shared server, whatever the command did."""
    for c in (me, other):
        for cmd in ("OBJ.ABORT",) + ("OBJ.RELEASE",) * 4:
            try:
                c.obj(cmd, oid)
            except Exception:
                pass
    try:
        me.obj("OBJ.DEL", oid)
    except Exception:
        pass


def _info_or_none(client, oid):
    try:
        return info(client, oid)
    except Exception:
        return None


def _run_failing(me, other, setup, args, codes, oid):
    _setup(setup, oid, me, other)
    try:
        owner = other if setup in ("sealed", "pinned_other", "created_other") else me
        args = [oid if a is ID else a for a in args]
        info_before = _info_or_none(owner, oid)
        before = stats(me)
        expect_error(me, args, codes)
        after = stats(me)
        assert_stats_unchanged(before, after, fmt_args(args), oom=(codes == "OOM"))
        if info_before is not None:
            assert _info_or_none(owner, oid) == info_before, (
                f"{fmt_args(args)}: OBJ.INFO changed by a failed command"
            )
    finally:
        _cleanup(oid, me, other)


@pytest.mark.parametrize("setup,args,codes", CASES)
def test_bad_input_is_refused_and_changes_nothing(r, r2, uid, setup, args, codes):
    _run_failing(r, r2, setup, args, codes, uid)


@pytest.mark.parametrize("bad", list(BAD_IDS), ids=list(BAD_IDS))
@pytest.mark.parametrize("cmd", list(ID_COMMANDS), ids=list(ID_COMMANDS))
def test_bad_id_is_badarg_and_changes_nothing(r, r2, cmd, bad):
    _run_failing(r, r2, "none", ID_COMMANDS[cmd], "BADARG", BAD_IDS[bad])


def test_sealed_object_is_unchanged_after_refused_writes(r, uid):
    """Failed writes to a sealed object leave its bytes and checksum alone."""
    r.obj("OBJ.CREATE", uid, 6)
    r.obj("OBJ.WRITE", uid, 0, b"abcdef")
    r.obj("OBJ.SEAL", uid)
    before = info(r, uid)
    expect_error(r, ("OBJ.WRITE", uid, 0, b"XY"), "WRONGSTATE")
    assert r.obj("OBJ.GET", uid) == b"abcdef"
    assert info(r, uid) == before
    r.obj("OBJ.DEL", uid)


def test_created_object_stays_writable_by_creator_after_others_fail(r, r2, uid):
    r.obj("OBJ.CREATE", uid, 4)
    expect_error(r2, ("OBJ.WRITE", uid, 0, b"xx"), "WRONGSTATE")
    expect_error(r2, ("OBJ.SEAL", uid), "WRONGSTATE")
    expect_error(r2, ("OBJ.ABORT", uid), "WRONGSTATE")
    assert r.obj("OBJ.WRITE", uid, 0, b"abcd") == 4
    assert r.obj("OBJ.SEAL", uid) == b"OK"
    assert r2.obj("OBJ.GET", uid) == b"abcd"
    r.obj("OBJ.DEL", uid)


def test_refused_write_past_the_end_leaves_earlier_bytes(r, uid):
    r.obj("OBJ.CREATE", uid, 4)
    r.obj("OBJ.WRITE", uid, 0, b"abcd")
    expect_error(r, ("OBJ.WRITE", uid, 2, b"XYZ"), "BADARG")
    r.obj("OBJ.SEAL", uid)
    assert r.obj("OBJ.GET", uid) == b"abcd"
    r.obj("OBJ.DEL", uid)
