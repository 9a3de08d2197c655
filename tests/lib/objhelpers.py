"""Helpers shared by the objstore pytest suites (tests/server, tests/rdma).

docs/commands.md is the contract under test. These helpers keep
the tests short: a redis-py client that hands back server errors verbatim (so
the first word of an error is always the objstore code word), parsers for the
field/value arrays that OBJ.STATS and OBJ.INFO answer, XXH3-64 through the
system libxxhash, and direct reads of the shared-memory arena file.
"""

import ctypes
import ctypes.util
import hashlib
import hmac
import os
import random
import re
import socket
import struct
import threading
import time

import redis
from redis.connection import PythonParser
from redis.exceptions import ResponseError

KIB, MIB = 1 << 10, 1 << 20

# The size classes every fetch suite moves byte for byte: (data bytes, metadata),
# around the default 32 KiB rdma-read-min crossover; None: no META at all.
FETCH_SIZES = [
    (0, None),
    (0, b"m"),
    (1, b"meta"),
    (4 * KIB, b"shape=64x64"),
    (32 * KIB - 1, b"below the 32 KiB crossover"),
    (32 * KIB, b"at the 32 KiB crossover"),
    (1 * MIB, b"\x00binary\r\nmeta\xff"),
    (64 * MIB, b"large"),
]

# Every field OBJ.STATS (and INFO objstore) must carry, from the README.
STATS_FIELDS = (
    "arena_path arena_size arena_used arena_free arena_largest_free arena_free_ranges objects "
    "objects_sealed objects_created objects_pinned objects_deleting bytes_sealed puts creates "
    "seals aborts gets pins releases deletes deferred_deletes evictions oom_errors "
    "blocked_clients blocked_total max_objects object_limit_errors heap_bytes heap_store_bytes "
    "heap_directory_bytes list_budget_stops "
    "tier_enabled tier_path tier_max memory_objects memory_bytes tier_objects tier_bytes "
    "tier_file_bytes spills spill_bytes spill_mbps spill_failures restores restore_bytes "
    "restore_mbps restore_failures reads_from_memory reads_from_tier tier_direct_reads "
    "tier_waits tier_waiting tier_serve_budget tier_serve_bytes tier_serve_waiting "
    "tier_serve_reads tier_serve_shared tier_serve_waits "
    "checksums_deferred checksums_pending scrubbed_bytes arena_dirty_free_bytes "
    "node_name fetch_requests fetch_shared fetch_local_hits "
    "fetch_cancelled transfer_connections transfer_bad_frames transfer_refused_connections "
    "transfer_encrypted_sessions "
    "transfer_hint_hits transfer_hint_fallbacks transfer_uploaded_bytes "
    "transfer_downloaded_bytes transfer_redirects transfer_redirected transfer_range_resumes "
    "transfer_relayed transfer_relay_follows transfer_checksum_waits "
    "rdma_enabled directory_connected "
    "directory_publishes directory_unpublishes directory_lookups directory_reconnects "
    "directory_errors directory_queued directory_stale_replicas directory_purges_applied "
    "directory_moved_primaries repl_requests repl_served repl_failed repl_bytes "
    "protected_objects replicas_below_target replicas_placed repairs_done repairs_in_flight "
    "repair_bytes repair_failures ownership_takeovers replicas_trimmed drain_state "
    "drain_objects_left drain_objects_moved drain_bytes_moved "
    "rdma_clients_connected rdma_clients_total "
    "rdma_clients_rejected rdma_client_stream_errors"
).split() + [
    f"{tp}_{k}"
    for tp in ("tcp", "rdma")
    for k in (
        "fetches fetch_bytes fetch_failures fetch_failovers fetch_latency_avg_us "
        "fetch_latency_max_us served served_bytes served_inline served_rndv"
    ).split()
]

# Every field OBJ.INFO must carry, from the README.
INFO_FIELDS = ("id state size meta_size offset pins creator created_ms checksum replica "
               "tier replicas copy").split()

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
    """OBJ.STATS as a dict; numeric values as int, arena_path and tier_path as str."""
    raw = pairs(client.execute_command("OBJ.STATS"))
    out = {}
    for k, v in raw.items():
        if k in ("arena_path", "tier_path"):
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


def delete_everywhere(clients, *oids):
    """OBJ.DEL every oid on every client's node, ignoring errors (test cleanup)."""
    for c in clients:
        for oid in oids:
            try:
                c.execute_command("OBJ.DEL", oid)
            except Exception:
                pass


# A wait bounds a hang; it is never the verdict. A loaded machine may take far
# longer than a test's own figure, so no wait gives up before WAIT_FLOOR seconds
# (a wait that succeeds returns as soon as its condition holds).
WAIT_FLOOR = 60.0


def wait_until(pred, timeout=5.0, interval=0.01, what="condition"):
    """Poll pred() until true; bounded by timeout, but never less than WAIT_FLOOR
    seconds. Returns the last value."""
    timeout = max(timeout, WAIT_FLOOR)
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


def resp_encode(*args):
    """A command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def raw_send(port, *args):
    """Open a plain socket, send one command and return the socket unread: for
    connections that go away while the server still owes them an answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(resp_encode(*args))
    return s


def file_mode(path):
    return os.stat(path).st_mode & 0o777


# ---- cluster helpers (test_cluster_*.py) -------------------------------------------------

def payload(n, seed=0):
    """n deterministic pseudo-random bytes. Past 1 MiB, a random 1 MiB block is
    repeated with its index stamped into the first 8 bytes of every copy, so that
    no two MiB of the result are equal (reordered or duplicated chunks show) while
    64 MiB still takes milliseconds."""
    if n <= 0:
        return b""
    rng = random.Random(seed)
    if n <= 1 << 20:
        return rng.randbytes(n)
    block = rng.randbytes(1 << 20)
    tail = block[8:]
    out = b"".join(struct.pack("<Q", i ^ (seed << 32)) + tail for i in range(n >> 20))
    return out + rng.randbytes(n & ((1 << 20) - 1))


def sha256(data):
    return hashlib.sha256(bytes(data)).hexdigest()


def fetch(client, *ids, timeout=None, via=None):
    """OBJ.FETCH ids [TIMEOUT ms] [VIA v]: the reply as a list with, per id, "OK" or
    the error text (a whole-command error is raised)."""
    args = ["OBJ.FETCH", *ids]
    if timeout is not None:
        args += ["TIMEOUT", timeout]
    if via is not None:
        args += ["VIA", via]
    reply = client.execute_command(*args)
    assert isinstance(reply, list), f"OBJ.FETCH: expected an array, got {reply!r:.200}"
    assert len(reply) == len(ids), f"OBJ.FETCH of {len(ids)} ids answered {len(reply)} elements"
    out = []
    for r in reply:
        if isinstance(r, Exception):
            out.append(str(r))
        else:
            out.append(to_str(r))
    return out


def codes(results):
    """Per-id results of fetch() -> their code words ("OK", "NOTFOUND", ...)."""
    return [r.split()[0] if r.split() else "" for r in results]


def locate(client, oid):
    """OBJ.LOCATE as a dict: size, meta_size, replicas (int), checksum, owner (str),
    locations and protected (sorted lists of node names). Errors are raised."""
    reply = client.execute_command("OBJ.LOCATE", oid)
    assert isinstance(reply, list) and len(reply) == 14, f"OBJ.LOCATE reply: {reply!r:.300}"
    d = pairs(reply)
    assert set(d) == {"size", "meta_size", "checksum", "locations", "replicas", "owner",
                      "protected"}, f"OBJ.LOCATE fields: {d}"
    return {
        "size": to_int(d["size"]),
        "meta_size": to_int(d["meta_size"]),
        "checksum": to_str(d["checksum"]),
        "locations": sorted(to_str(n) for n in d["locations"]),
        "replicas": to_int(d["replicas"]),
        "owner": to_str(d["owner"]),
        "protected": sorted(to_str(n) for n in d["protected"]),
    }


def locations(client, oid):
    """The node names OBJ.LOCATE lists for oid; [] when it answers NOTFOUND."""
    try:
        return locate(client, oid)["locations"]
    except ResponseError as e:
        if err_code(e) == "NOTFOUND":
            return []
        raise


def directory_slow(e):
    """Whether error e says only that the directory answered later than the node waits
    for it (a busy machine: its reply timed out), not that it is gone."""
    text = str(e)
    return err_code(e) == "UNAVAILABLE" and ("Resource temporarily unavailable" in text
                                            or "timed out" in text)


def wait_locations(client, oid, names, timeout=5.0, retry_unavailable=False):
    """Wait until OBJ.LOCATE lists exactly the nodes in names (directory updates
    are asynchronous); returns the list. retry_unavailable: keep polling through
    UNAVAILABLE answers (a directory coming back); a slow directory's is polled
    through always."""
    want = sorted(names)
    last = []

    def check():
        nonlocal last
        try:
            last = locations(client, oid)
        except ResponseError as e:
            if not directory_slow(e) and (not retry_unavailable or err_code(e) != "UNAVAILABLE"):
                raise
            last = str(e)
        return last == want

    try:
        wait_until(check, timeout, interval=0.02, what=f"OBJ.LOCATE == {want}")
    except AssertionError:
        raise AssertionError(f"OBJ.LOCATE {oid!r:.80}: expected locations {want} within "
                             f"{timeout}s, last seen {last}") from None
    return last


def nodes(client):
    """OBJ.NODES as {name: {field: value}} (ints where the field is numeric)."""
    reply = client.execute_command("OBJ.NODES")
    assert isinstance(reply, list), f"OBJ.NODES reply: {reply!r:.300}"
    out = {}
    for entry in reply:
        d = pairs(entry)
        row = {}
        for k, v in d.items():
            row[k] = to_int(v) if k in ("tcp_port", "rdma_port", "heartbeat_age_ms") else to_str(v)
        out[row["name"]] = row
    return out


def wait_nodes(client, names, timeout=5.0, retry_unavailable=False):
    """Wait until OBJ.NODES lists exactly the node names given; returns the view.
    retry_unavailable: keep polling through UNAVAILABLE answers (a slow directory's
    always)."""
    want = sorted(names)
    last = {}

    def check():
        nonlocal last
        try:
            last = nodes(client)
        except ResponseError as e:
            if not directory_slow(e) and (not retry_unavailable or err_code(e) != "UNAVAILABLE"):
                raise
            last = {str(e): None}
        return sorted(last) == want

    try:
        wait_until(check, timeout, interval=0.02, what=f"OBJ.NODES == {want}")
    except AssertionError:
        raise AssertionError(f"OBJ.NODES: expected {want} within {timeout}s, "
                             f"last seen {sorted(last)}") from None
    return last


def stat_delta(before, after, *fields):
    return {f: after[f] - before[f] for f in fields}


# ---- copies: replica counts, holders, drain (docs/cluster.md) ------------------------------

# The kinds of copy OBJ.INFO names: those that count toward an object's replica count
# (the owner's primary, protected copies) and the ordinary, evictable replica.
COUNTING_COPIES = ("primary", "protected")


def copy_of(client, oid):
    """The kind of copy of oid on client's node ("primary", "protected", "replica"),
    with its replica count: (copy, replicas), or None when the node holds no sealed copy
    of it."""
    try:
        d = info(client, oid)
    except ResponseError as e:
        if err_code(e) == "NOTFOUND":
            return None
        raise
    if to_str(d["state"]) != "sealed":
        return None
    return to_str(d["copy"]), to_int(d["replicas"])


def holders_now(clients, oid):
    """{node: (copy, replicas)} of the nodes of clients ({name: client}) that hold a
    sealed copy of oid now (their OBJ.INFO)."""
    out = {}
    for name, c in clients.items():
        got = copy_of(c, oid)
        if got is not None:
            out[name] = got
    return out


def counting(held):
    """The holders of holders_now() whose copies count toward the replica count."""
    return {n: c for n, c in held.items() if c[0] in COUNTING_COPIES}


def wait_each(items, check, what, timeout=120.0, interval=0.2):
    """Poll check(item) -> (ok, detail) for every item until each has been ok once (an
    item that was ok is not asked again). Bounded by timeout (at least WAIT_FLOOR):
    fails naming the items left and what check said of them last."""
    pending = {i: "not checked" for i in items}
    deadline = time.monotonic() + max(timeout, WAIT_FLOOR)
    while pending:
        for item in list(pending):
            ok, detail = check(item)
            if ok:
                del pending[item]
            else:
                pending[item] = detail
        if not pending:
            break
        if time.monotonic() > deadline:
            sample = "; ".join(f"{k!r:.60}: {v}" for k, v in list(pending.items())[:5])
            raise AssertionError(f"{what}: {len(pending)} of {len(items)} not there within "
                                 f"{max(timeout, WAIT_FLOOR):.0f}s, e.g. {sample}")
        time.sleep(interval)


def fetch_everything(clients, objs, what, timeout=180.0):
    """Every object of objs ({id: data}) fetchable (through the directory) and
    byte-exact on the nodes of clients ({name: client}), taken in turn. A wrong byte
    fails at once; a failed fetch is tried again until the bound (a fetch may meet a
    dead node not yet expired, or a copy still moving)."""
    names = sorted(clients)
    order = {oid: i for i, oid in enumerate(objs)}

    def check(oid):
        c = clients[names[order[oid] % len(names)]]
        try:
            r = fetch(c, oid, timeout=5000)
        except ResponseError as e:  # TIMEOUT answers for the whole command
            return False, str(e)
        if r != ["OK"]:
            return False, r[0]
        try:
            got = c.execute_command("OBJ.GET", oid)
        except ResponseError as e:
            return False, f"fetched, then {e}"
        assert sha256(got) == sha256(objs[oid]), f"{what}: {oid!r} differs"
        return True, "ok"

    wait_each(list(objs), check, what, timeout)


def one_owner_one_generation(clients, objs, want, what, timeout=180.0):
    """Each object of objs converges to: one node holds the primary, the directory
    names it owner, want counting copies listed and held, and every copy on every node
    of clients (counting or not) is one generation, the directory's, byte-exact."""

    def check(oid):
        try:
            d = locate(clients[sorted(clients)[0]], oid)
        except ResponseError as e:
            return False, str(e)
        held = holders_now(clients, oid)
        prim = [n for n, c in held.items() if c[0] == "primary"]
        count = counting(held)
        if prim != [d["owner"]] or len(count) != want or sorted(count) != d["protected"]:
            return False, f"directory {d}, nodes {held}"
        for n in held:
            cs = to_str(info(clients[n], oid)["checksum"])
            assert cs == d["checksum"], (f"{what}: {n} holds {oid!r} with checksum {cs}, the "
                                         f"directory's is {d['checksum']}: two generations")
            assert sha256(clients[n].execute_command("OBJ.GET", oid)) == sha256(objs[oid])
        return True, held

    wait_each(list(objs), check, what, timeout)


def wait_copies(client, oid, pred, what, timeout=60.0):
    """Poll OBJ.LOCATE (locate) until pred(copies) holds and return the copies;
    NOTFOUND and a slow directory's UNAVAILABLE are polled through. Bounded (at least
    WAIT_FLOOR): a directory that never gets there fails with what it said last."""
    last = None

    def check():
        nonlocal last
        try:
            last = locate(client, oid)
        except ResponseError as e:
            if err_code(e) != "NOTFOUND" and not directory_slow(e):
                raise
            last = str(e)
            return False
        return pred(last)

    try:
        wait_until(check, timeout, interval=0.05, what=what)
    except AssertionError:
        raise AssertionError(f"OBJ.LOCATE {oid!r:.80}: {what} not reached within "
                             f"{max(timeout, WAIT_FLOOR):.0f}s, last seen {last}") from None
    return last


def drain(client, *args):
    """OBJ.DRAIN args (none, WAIT ms, STATUS or CANCEL) as a dict: state (str),
    objects_left, objects_moved, bytes_moved, failures (ints), last_error (str)."""
    d = pairs(client.execute_command("OBJ.DRAIN", *args))
    out = {k: to_int(d[k]) for k in ("objects_left", "objects_moved", "bytes_moved",
                                     "failures")}
    out["state"] = to_str(d["state"])
    out["last_error"] = to_str(d["last_error"])
    return out


# ---- the transfer protocol, from the outside (module/transfer/wire.h) ------------------------------

WIRE_HELLO, WIRE_AUTH, WIRE_FETCH, WIRE_DATA, WIRE_RNDV, WIRE_DONE, WIRE_ERROR = range(1, 8)
WIRE_CREDIT, WIRE_PING, WIRE_PONG, WIRE_RING, WIRE_FETCHR, WIRE_PART = 8, 9, 10, 11, 12, 13
WIRE_RPART, WIRE_REPL, WIRE_HELD = 14, 15, 16
WIRE_FETCHR_BUSY_OK, WIRE_FETCHR_PARTIAL_OK = 1, 2
WIRE_REPL_PROTECT, WIRE_REPL_OWN = 1, 2
WIRE_MAGIC = 0x4F424A53
WIRE_VERSION = 5  # module/transfer/wire.h OBJ_WIRE_VERSION
WIRE_FEAT_TCP, WIRE_FEAT_RDMA, WIRE_FEAT_ENCRYPT = 1, 2, 4
WIRE_HDR = struct.Struct("<BBHIQ")
WIRE_ERR_NAMES = {1: "NOTFOUND", 2: "NOTSEALED", 3: "OOM", 4: "AUTH", 5: "PROTO", 6: "INTERNAL",
                  7: "BUSY", 8: "WRONGSTATE", 9: "NOTSUPPORTED", 10: "UNAVAILABLE", 11: "TIMEOUT",
                  12: "CHECKSUM", 13: "DRAINING"}


def wire_frame(ftype, body=b"", req_id=0, flags=0, credits=0, body_len=None):
    """One frame: header + body (body_len overrides the header's length field)."""
    n = len(body) if body_len is None else body_len
    return WIRE_HDR.pack(ftype, flags, credits, n, req_id) + body


def wire_hello_body(nonce, name=b"fake-peer", proof=bytes(32), features=1, magic=WIRE_MAGIC,
                    version=WIRE_VERSION):
    return (struct.pack("<IHH", magic, version, features) + nonce + proof
            + struct.pack("<H", len(name)) + name)


WIRE_ROLE_ACCEPTOR, WIRE_ROLE_CONNECTOR = 1, 2


def wire_transcript(label, role, connector, acceptor, dialled, features_connector,
                    features_acceptor, nonce_connector, nonce_acceptor):
    msg = label + bytes([role])
    for name in (connector, acceptor, dialled):
        msg += struct.pack("<H", len(name)) + name
    msg += struct.pack("<HH", features_connector, features_acceptor)
    return msg + nonce_connector + nonce_acceptor


def wire_proof(secret, role, connector, acceptor, dialled, features_connector, features_acceptor,
               nonce_connector, nonce_acceptor):
    """wireProof of module/transfer/wire.h: HMAC-SHA256 over the whole handshake transcript.
    role: WIRE_ROLE_ACCEPTOR / WIRE_ROLE_CONNECTOR; names are bytes."""
    msg = wire_transcript(b"objstore-proof-v2", role, connector, acceptor, dialled,
                          features_connector, features_acceptor, nonce_connector, nonce_acceptor)
    return hmac.new(secret, msg, hashlib.sha256).digest()


def wire_session_keys(secret, proof_acceptor, proof_connector, *transcript):
    """wireSessionKeys: (c2a, a2c), the keys of what the connector and the acceptor send.
    transcript: connector, acceptor, dialled, both features, both nonces (as wire_proof)."""
    return tuple(
        hmac.new(secret, wire_transcript(b"objstore-keys-v3", d, *transcript) + proof_acceptor
                 + proof_connector, hashlib.sha256).digest() for d in (1, 2))


class WireMac:
    """One direction of a session MAC (wire.h): AES-256-GMAC, IV = domain (u32) + the
    implicit sequence number (u64), 1 for a frame's header and body, 2 for its payload.
    encrypt: payloads are AES-GCM encrypted with the same key and IV (transfer-encrypt)."""

    def __init__(self, key, encrypt=False):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        self.gcm = AESGCM(key)
        self.seq = 0
        self.encrypt = encrypt

    def frame_tag(self, frame):
        tag = self.gcm.encrypt(struct.pack("<IQ", 1, self.seq), b"", frame)
        self.seq += 1
        return tag

    def _payload_iv(self):
        return struct.pack("<IQ", 2, self.seq - 1)

    def payload_tag(self, payload):
        """The tag of the (plain) payload of the frame tagged last (GMAC)."""
        return self.gcm.encrypt(self._payload_iv(), b"", payload)

    def seal_payload(self, payload):
        """The payload of the frame tagged last as it goes on the wire: its bytes
        (encrypted when the session encrypts), then its tag."""
        if self.encrypt:
            return self.gcm.encrypt(self._payload_iv(), payload, b"")
        return payload + self.payload_tag(payload)

    def open_payload(self, wire):
        """The payload bytes of what seal_payload made (bytes + tag); ValueError when the
        tag does not check out."""
        data, tag = wire[:-16], wire[-16:]
        if self.encrypt:
            from cryptography.exceptions import InvalidTag
            try:
                return self.gcm.decrypt(self._payload_iv(), wire, b"")
            except InvalidTag:
                raise ValueError("the payload fails its session MAC")
        if not hmac.compare_digest(tag, self.payload_tag(data)):
            raise ValueError("the payload fails its session MAC")
        return data


def wire_has_payload_tag(ftype, body):
    """wireSeal's rule: a payload tag follows every PART, and a DATA frame whose sizes
    announce a payload."""
    if ftype == WIRE_PART:
        return True
    return ftype == WIRE_DATA and len(body) >= 16 and struct.unpack_from("<QQ", body) != (0, 0)


def wire_seal(mac, frame, payload=b""):
    """A frame as a node sends it: frame + its tag, then payload (encrypted when the session
    encrypts) + for a DATA or PART the payload's tag; mac None: no session."""
    if not mac:
        return frame + payload
    out = frame + mac.frame_tag(frame)
    if wire_has_payload_tag(frame[0], frame[WIRE_HDR.size:]):
        return out + mac.seal_payload(payload)
    return out + payload


def wire_hello_fields(body):
    """(magic, version, features, nonce, proof, name) of a HELLO body; AssertionError if its
    length does not match its name length."""
    magic, version, features = struct.unpack_from("<IHH", body)
    (name_len,) = struct.unpack_from("<H", body, 56)
    assert len(body) == 58 + name_len, "HELLO length does not match its name length"
    return magic, version, features, body[8:24], body[24:56], body[58:]


class WireSession:
    """One end of a transfer session on a socket, speaking module/transfer/wire.h with
    Python's struct/hmac: framing, the handshake's proofs and the session MAC, the same
    whichever side dialled. WirePeer is the connecting end, WireAcceptor the accepting
    one; `role` says which (WIRE_ROLE_CONNECTOR / WIRE_ROLE_ACCEPTOR)."""

    role = None

    def __init__(self, sock, timeout, name, features):
        self.sock = sock
        self.sock.settimeout(timeout)
        self.nonce = os.urandom(16)
        self.name = name
        self.features = features
        self.peer_nonce = None
        self.peer_name = None
        self.peer_proof = None
        self.peer_features = None
        self.tx = self.rx = None  # WireMac once the handshake is done
        self.payload_tagged = False  # a tag follows the payload being read

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def recv_exact(self, n):
        """n bytes; raises EOFError if the other end closes first."""
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise EOFError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def seal(self, frame, payload=b""):
        """frame (header + body, as wire_frame makes it, well-formed or not) as it goes on
        the wire once the handshake is done: its tag under the session MAC, then payload,
        and for a DATA frame that announces a payload or a PART the payload's tag."""
        return wire_seal(self.tx, frame, payload)

    def send_frame(self, frame, payload=b""):
        self.send(self.seal(frame, payload))

    def recv_frame(self):
        """(type, flags, credits, req_id, body); in a session the frame's tag is checked
        (AssertionError if wrong), and whether a tag follows its payload kept for
        recv_payload."""
        head = self.recv_exact(WIRE_HDR.size)
        t, fl, cr, n, rid = WIRE_HDR.unpack(head)
        assert n <= 4096, f"the other end sent a frame with bodyLen {n}"
        body = self.recv_exact(n)
        if self.rx:
            tag = self.recv_exact(16)
            assert hmac.compare_digest(tag, self.rx.frame_tag(head + body)), (
                f"frame {t} from the other end fails its session MAC")
            self.payload_tagged = wire_has_payload_tag(t, body)
        return t, fl, cr, rid, body

    def recv_payload(self, n):
        """The n payload bytes after a DATA or PART frame, checked against the tag after
        them (and decrypted) in a session."""
        if not (self.rx and self.payload_tagged):
            return self.recv_exact(n)
        try:
            return self.rx.open_payload(self.recv_exact(n + 16))
        except ValueError as e:
            raise AssertionError(str(e))

    def recv_hello(self):
        """Read the other end's HELLO; remembers its nonce, name, features and proof (all
        zero from a connector)."""
        t, fl, cr, rid, body = self.recv_frame()
        assert t == WIRE_HELLO, f"expected HELLO, got frame type {t} body {body!r:.100}"
        magic, version, features, nonce, proof, name = wire_hello_fields(body)
        assert (magic, version) == (WIRE_MAGIC, WIRE_VERSION), (
            f"HELLO magic/version {magic:#x}/{version}")
        self.peer_features, self.peer_nonce, self.peer_proof, self.peer_name = (
            features, nonce, proof, name)
        return features

    def transcript(self, dialled=None):
        """The handshake as wire_proof takes it: connector, acceptor, the name dialled
        (default: the acceptor's), both features, both nonces."""
        me = (self.name, self.features, self.nonce)
        peer = (self.peer_name, self.peer_features, self.peer_nonce)
        (cn, cf, cno), (an, af, ano) = (me, peer) if self.role == WIRE_ROLE_CONNECTOR else (peer, me)
        return cn, an, an if dialled is None else dialled, cf, af, cno, ano

    def proof(self, secret, role, dialled=None):
        """This session's proof for role (dialled defaults to the acceptor's name)."""
        return wire_proof(secret, role, *self.transcript(dialled))

    def key_session(self, secret):
        """Key both directions from this handshake (both proofs known); the MAC is on from
        the next frame."""
        mine = self.proof(secret, self.role)
        acceptor, connector = ((self.peer_proof, mine) if self.role == WIRE_ROLE_CONNECTOR
                               else (mine, self.peer_proof))
        c2a, a2c = wire_session_keys(secret, acceptor, connector, *self.transcript())
        tx, rx = (c2a, a2c) if self.role == WIRE_ROLE_CONNECTOR else (a2c, c2a)
        # Payloads are encrypted when either side asked (module/transfer/engine.c).
        encrypt = bool((self.features | (self.peer_features or 0)) & WIRE_FEAT_ENCRYPT)
        self.tx, self.rx = WireMac(tx, encrypt), WireMac(rx, encrypt)


class WirePeer(WireSession):
    """A hand-made connector on a node's transfer port: for protocol conformance and
    hostile-input tests."""

    role = WIRE_ROLE_CONNECTOR

    def __init__(self, port, timeout=5.0, name=b"fake-peer", features=1, source=None):
        """source: the local address to connect from (any of 127.0.0.0/8 works on Linux),
        so that a test can appear as another host."""
        sock = socket.create_connection(
            ("127.0.0.1", port), timeout=timeout,
            source_address=(source, 0) if source else None)
        super().__init__(sock, timeout, name, features)

    def send_hello(self, name=None):
        self.send(wire_frame(WIRE_HELLO, wire_hello_body(
            self.nonce, self.name if name is None else name, features=self.features)))

    def send_auth(self, secret):
        self.send(wire_frame(WIRE_AUTH, self.proof(secret, WIRE_ROLE_CONNECTOR)))

    def handshake(self, secret):
        """HELLO -> HELLO (acceptor proof checked) -> AUTH; then the session MAC is on."""
        self.send_hello()
        self.recv_hello()
        want = self.proof(secret, WIRE_ROLE_ACCEPTOR)
        assert hmac.compare_digest(self.peer_proof, want), "acceptor's HELLO proof is wrong"
        self.send_auth(secret)
        self.key_session(secret)

    def fetch(self, oid, req_id):
        """Send FETCH and read the answer: ("DATA", size, meta_size, checksum, payload)
        or ("ERROR", code_name, text)."""
        self.send_frame(wire_frame(WIRE_FETCH, struct.pack("<H", len(oid)) + oid, req_id=req_id))
        t, fl, cr, rid, body = self.recv_frame()
        assert rid == req_id, f"answer for reqId {rid}, asked {req_id}"
        if t == WIRE_DATA:
            size, meta_size, checksum = struct.unpack("<QQQ", body)
            return ("DATA", size, meta_size, checksum, self.recv_payload(size + meta_size))
        assert t == WIRE_ERROR, f"expected DATA or ERROR, got frame type {t}"
        code, text_len = struct.unpack_from("<HH", body)
        return ("ERROR", WIRE_ERR_NAMES.get(code, str(code)), body[4:4 + text_len])

    def closed_within(self, timeout):
        """True when the node closes the connection (recv gives b'' or a reset) within
        timeout; frames it sends before closing (an ERROR) are read and dropped."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True


class WireAcceptor(WireSession):
    """A hand-made node on an accepted connection (a node dialled it): answers the
    connector's HELLO with its proof, checks the AUTH, and speaks the session MAC as the
    accepting side. For fake holders and relays."""

    role = WIRE_ROLE_ACCEPTOR

    def __init__(self, sock, timeout=5.0, name=b"fake-node", features=1):
        super().__init__(sock, timeout, name, features)

    def handshake(self, secret):
        """HELLO -> HELLO with our proof -> AUTH (connector proof checked); then the session
        MAC is on. AssertionError if the connector's proof is wrong."""
        self.recv_hello()
        self.send(wire_frame(WIRE_HELLO, wire_hello_body(
            self.nonce, self.name, self.proof(secret, WIRE_ROLE_ACCEPTOR), self.features)))
        t, fl, cr, rid, body = self.recv_frame()
        assert t == WIRE_AUTH, f"expected AUTH, got frame type {t}"
        self.peer_proof = body
        want = self.proof(secret, WIRE_ROLE_CONNECTOR)
        assert hmac.compare_digest(body, want), "connector's AUTH proof is wrong"
        self.key_session(secret)

    def recv_request(self):
        """The next FETCH or FETCHR: (type, req_id, id, offset, flags) (offset and flags 0
        for a FETCH); other frames (DONE, PING) are skipped. EOFError when the node
        closes."""
        while True:
            t, fl, cr, rid, body = self.recv_frame()
            if t == WIRE_FETCH:
                (id_len,) = struct.unpack_from("<H", body)
                return t, rid, body[2:2 + id_len], 0, 0
            if t == WIRE_FETCHR:
                offset, flags, id_len = struct.unpack_from("<QIH", body)
                return t, rid, body[14:14 + id_len], offset, flags

    def send_data(self, req_id, size, meta_size, checksum, payload):
        """DATA (size, metaSize, checksum) and its payload (the bytes from the offset
        asked)."""
        self.send_frame(wire_frame(WIRE_DATA, struct.pack("<QQQ", size, meta_size, checksum),
                                   req_id=req_id), payload)

    def send_part(self, req_id, size, meta_size, checksum, offset, payload):
        """PART: len(payload) bytes of the object from offset, as a relay sends them."""
        self.send_frame(wire_frame(
            WIRE_PART, struct.pack("<QQQQQ", size, meta_size, checksum, offset, len(payload)),
            req_id=req_id), payload)

    def send_error(self, req_id, code, text):
        """ERROR with code (a WIRE_ERR_NAMES name) and text: an answer, or a relay
        stream's end."""
        num = next(k for k, v in WIRE_ERR_NAMES.items() if v == code)
        self.send_frame(wire_frame(WIRE_ERROR, struct.pack("<HH", num, len(text)) + text,
                                   req_id=req_id))
