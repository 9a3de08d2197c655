"""Helpers shared by the objstore integration tests.

The README's command reference is the contract under test. These helpers keep
the tests short: a redis-py client that hands back server errors verbatim (so
the first word of an error is always the objstore code word), parsers for the
field/value arrays that OBJ.STATS and OBJ.INFO answer, XXH3-64 through the
system libxxhash, and direct reads of the shared-memory arena file.
"""

import ctypes
import ctypes.util
import os
import re
import threading
import time

import redis
from redis.connection import PythonParser
from redis.exceptions import ResponseError

# Every field OBJ.STATS (and INFO objstore) must carry, from the README.
STATS_FIELDS = (
    "arena_path arena_size arena_used arena_free arena_largest_free objects objects_sealed "
    "objects_created objects_pinned bytes_sealed puts creates seals aborts gets deletes "
    "deferred_deletes oom_errors blocked_clients"
).split()

# Every field OBJ.INFO must carry, from the README.
INFO_FIELDS = "id state size meta_size offset pins creator created_ms checksum".split()

# Stats a failed command must leave exactly as they were ("a command that answers an
# error has changed nothing"). `gets` is left out because the README does not say
# whether it counts requests or successes; `oom_errors` is checked separately, since
# an OOM answer is supposed to bump it.
UNCHANGED_BY_ERRORS = (
    "arena_path arena_size arena_used arena_free arena_largest_free objects objects_sealed "
    "objects_created objects_pinned bytes_sealed puts creates seals aborts deletes "
    "deferred_deletes blocked_clients"
).split()

# Binary payload: every byte value, embedded NULs, CR/LF and RESP-looking text.
BINARY_DATA = (
    bytes(range(256))
    + b"\x00\x00\r\n\r\n$5\r\n*1\r\n-ERR\r\n"
    + bytes(range(255, -1, -1))
    + b"\x00"
)

# Salt put into ids so that every test exercises binary-safe ids. No glob
# metacharacters (* ? [ ] \) so ids can be matched literally by OBJ.LIST MATCH.
ID_SALT = b"\x00\r\n\xff\x01 "


class VerbatimErrorParser(PythonParser):
    """redis-py strips a leading "ERR " and maps some codes to other exception
    classes; for a test of error code words we want the server's text as is."""

    def parse_error(self, response):
        return ResponseError(response)


class Client(redis.Redis):
    """One dedicated connection (object ownership and pins are per connection)
    with raw replies: no redis-py response callbacks, bytes everywhere."""

    def __init__(self, port, timeout=30.0):
        pool = redis.ConnectionPool(
            host="127.0.0.1",
            port=port,
            socket_timeout=timeout,
            socket_connect_timeout=10,
            parser_class=VerbatimErrorParser,
            decode_responses=False,
        )
        super().__init__(connection_pool=pool, single_connection_client=True)
        self.response_callbacks = {}

    def close(self):
        super().close()
        self.connection_pool.disconnect()

    def obj(self, *args):
        """Run an OBJ.* (or any) command with raw reply."""
        return self.execute_command(*args)


def err_code(exc):
    """The code word of a server error: its first word."""
    text = str(exc)
    return text.split()[0] if text.split() else ""


def expect_error(client, args, codes):
    """Run args, require an error reply whose first word is one of codes (a str or
    a collection); return the error text."""
    if isinstance(codes, str):
        codes = (codes,)
    try:
        reply = client.execute_command(*args)
    except ResponseError as e:
        code = err_code(e)
        assert code in codes, f"{fmt_args(args)}: expected {'/'.join(codes)}, got error {e!s}"
        if code == "ERR":
            assert "wrong number of arguments" in str(e), f"{fmt_args(args)}: {e!s}"
        return str(e)
    raise AssertionError(f"{fmt_args(args)}: expected {'/'.join(codes)}, got reply {reply!r:.200}")


def fmt_args(args):
    """Printable command line for assertion messages (long values shortened)."""
    out = []
    for a in args:
        if isinstance(a, (bytes, bytearray)):
            a = bytes(a)
            out.append(repr(a if len(a) <= 40 else a[:20] + b"..." + b"[%d bytes]" % len(a)))
        else:
            out.append(str(a))
    return " ".join(out)


def to_str(v):
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else v


def to_int(v):
    """Integer replies may come as RESP integers or as decimal bulk strings."""
    if isinstance(v, int):
        return v
    return int(to_str(v))


def pairs(reply):
    """Field/value array -> dict with str keys and untouched values."""
    assert isinstance(reply, list), f"expected a field/value array, got {reply!r:.200}"
    assert len(reply) % 2 == 0, f"odd-length field/value array: {reply!r:.300}"
    out = {}
    for i in range(0, len(reply), 2):
        out[to_str(reply[i])] = reply[i + 1]
    return out


def stats(client):
    """OBJ.STATS as a dict; numeric values as int, arena_path as str."""
    raw = pairs(client.execute_command("OBJ.STATS"))
    out = {}
    for k, v in raw.items():
        if k == "arena_path":
            out[k] = to_str(v)
        else:
            try:
                out[k] = to_int(v)
            except (TypeError, ValueError):
                out[k] = v
    return out


def info(client, oid):
    """OBJ.INFO as a dict with str keys (values raw)."""
    return pairs(client.execute_command("OBJ.INFO", oid))


def reply_map(reply):
    """[name, value, name, value, ...] as returned by OBJ.CREATE / OBJ.PIN."""
    return pairs(reply)


def assert_stats_unchanged(before, after, what, oom=False):
    """A failed command changed nothing; an OOM answer bumps oom_errors by one."""
    diffs = {
        k: (before.get(k), after.get(k))
        for k in UNCHANGED_BY_ERRORS
        if before.get(k) != after.get(k)
    }
    assert not diffs, f"{what}: OBJ.STATS changed by a failed command: {diffs}"
    want = before.get("oom_errors", 0) + (1 if oom else 0)
    assert after.get("oom_errors") == want, (
        f"{what}: oom_errors {before.get('oom_errors')} -> {after.get('oom_errors')}, "
        f"expected {want}"
    )


_xxh = None


def xxh3_64(data):
    """XXH3-64 (seed 0) of data, via the system libxxhash."""
    global _xxh
    if _xxh is None:
        name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
        lib = ctypes.CDLL(name)
        fn = lib.XXH3_64bits
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _xxh = fn
    return _xxh(bytes(data), len(data))


def read_arena(path, offset, size):
    """Bytes [offset, offset+size) of the arena file, read straight from it."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmg]?)b?\s*$", re.IGNORECASE)


def parse_size(text):
    """'8mb' / '8m' / '8192k' / '8388608' -> bytes (README: k, m, g; b optional)."""
    m = _SIZE_RE.match(to_str(text))
    assert m, f"not a size: {text!r}"
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(m.group(1)) * mult


def redis_blocked_clients(client):
    """Redis's own count of blocked clients (INFO clients), independent of the module."""
    text = to_str(client.execute_command("INFO", "clients"))
    m = re.search(r"^blocked_clients:(\d+)", text, re.MULTILINE)
    assert m, "INFO clients has no blocked_clients"
    return int(m.group(1))


def wait_until(pred, timeout=5.0, interval=0.01, what="condition"):
    """Poll pred() until true; bounded by timeout. Returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def wait_blocked(client, n, timeout=5.0):
    """Wait until at least n clients are blocked in the server."""
    wait_until(lambda: redis_blocked_clients(client) >= n, timeout, what=f"{n} blocked clients")


class Call(threading.Thread):
    """Runs one command on its own client in a thread, recording the reply or
    the error and how long the command took."""

    def __init__(self, client, *args):
        super().__init__(daemon=True)
        self.client = client
        self.args = args
        self.reply = None
        self.error = None
        self.elapsed = None

    def run(self):
        t0 = time.monotonic()
        try:
            self.reply = self.client.execute_command(*self.args)
        except Exception as e:  # recorded and checked by the test
            self.error = e
        self.elapsed = time.monotonic() - t0

    def result(self, timeout=10.0):
        """Join (bounded); return the reply or raise the recorded error."""
        self.join(timeout)
        assert not self.is_alive(), f"{fmt_args(self.args)} still blocked after {timeout}s"
        if self.error is not None:
            raise self.error
        return self.reply


def start_call(client, *args):
    c = Call(client, *args)
    c.start()
    return c


def file_mode(path):
    return os.stat(path).st_mode & 0o777
