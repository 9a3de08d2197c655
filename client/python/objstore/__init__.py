"""objstore: the Python client of the objstore object store.

Zero-copy puts and gets of bytes, numpy arrays, torch tensors and pickle-5
objects; pins that live exactly as long as the Python objects that use the
memory. The connection, the arena mapping, the pins and the RDMA transport are
the C client library's (objstore._objstore wraps it); this module turns them
into Python values. API at a glance and usage: client/python/README.md.
"""

import functools
import json
import math
import pickle
import struct
import sys
import urllib.parse
import warnings

from . import _objstore
from ._objstore import Buffer

__all__ = [
    "connect", "broadcast", "BroadcastError", "Client", "Buffer", "Creation", "ObjectArray", "FOREVER",
    "ObjstoreError", "BadArgument", "ObjectNotFound", "ObjectExists", "OutOfMemory",
    "NotSealed", "WrongState", "Timeout", "Unavailable", "NotSupported", "ChecksumMismatch",
    "Busy", "NodeDraining", "AuthError", "ConnectionFailed", "ZeroCopyUnavailable", "ClientClosed",
    "ClientForked", "BadMetadata", "PickledObject", "models",
]

FOREVER = math.inf  # timeout: wait as long as it takes
ID_MAX = 512
ALIGN = 64  # out-of-band buffers of put_object start on this boundary

# ---- errors ----------------------------------------------------------------------------


class ObjstoreError(Exception):
    """Any error of objstore. `code` is the node's code word (e.g. "NOTFOUND"), or
    None for a local cause."""

    code = None

    def __init__(self, message=""):
        super().__init__(message)
        word = message.split(" ", 1)[0] if isinstance(message, str) else ""
        if word.isupper():
            self.code = word


class BadArgument(ObjstoreError, ValueError):
    """BADARG: the node refused an argument."""


class ObjectNotFound(ObjstoreError):
    """NOTFOUND: no such (sealed) object."""


class ObjectExists(ObjstoreError):
    """EXISTS: the id is taken."""


class OutOfMemory(ObjstoreError):
    """OOM: the arena is full."""


class NotSealed(ObjstoreError):
    """NOTSEALED: the object is still being created."""


class WrongState(ObjstoreError):
    """WRONGSTATE: not allowed in the object's state (or not this connection's)."""


class Timeout(ObjstoreError, TimeoutError):
    """TIMEOUT: the wait ran out."""


class Unavailable(ObjstoreError):
    """UNAVAILABLE: the directory or a peer node cannot be reached."""


class NotSupported(ObjstoreError):
    """NOTSUPPORTED: e.g. VIA rdma where RDMA is impossible."""


class ChecksumMismatch(ObjstoreError):
    """CHECKSUM: a fetched copy did not match the owner's checksum."""


class Busy(ObjstoreError):
    """BUSY: a peer's limit was reached; try again."""


class NodeDraining(ObjstoreError):
    """DRAINING: the node is draining (drain()): it takes no new objects; put them on
    another node."""


class AuthError(ObjstoreError):
    """NOAUTH, WRONGPASS, NOPERM: authentication or ACL."""


class ConnectionFailed(ObjstoreError, ConnectionError):
    """The connection could not be made, or broke."""


class ZeroCopyUnavailable(ObjstoreError):
    """The arena cannot be mapped (connect(zero_copy=True) on another host, or without
    access to the arena file)."""


class ClientClosed(ObjstoreError, ValueError):
    """The client was closed."""


class ClientForked(ObjstoreError, RuntimeError):
    """The client was connected by the parent process: connect again in the child."""


class BadMetadata(ObjstoreError, ValueError):
    """BADMETA: the object's metadata (written by whoever wrote the id) describes a layout
    the object cannot hold: more bytes than it has, a negative or overflowing extent, too
    many dimensions, a dtype of Python objects, a pickle table outside the object."""


class PickledObject(ObjstoreError, TypeError):
    """PICKLED: get() met an object stored by put_object. get() never unpickles: call
    get_object() for objects of writers trusted as the program's own code."""


class BroadcastError(ObjstoreError):
    """broadcast(): some nodes do not hold the object. `failures` maps the name of each
    of them to its ObjstoreError (ObjectNotFound, Timeout, ConnectionFailed, ...);
    `succeeded` lists the names of the nodes that do hold it."""

    def __init__(self, message, failures, succeeded):
        super().__init__(message)
        self.failures = failures
        self.succeeded = succeeded


# Code word -> class, from the one list of words (module/common/errwords.h, which the
# extension hands over as ERROR_WORDS); a word whose class is the base is left out.
ERROR_CODES = {word: globals()[cls] for word, cls in _objstore.ERROR_WORDS if cls != "ObjstoreError"}

_objstore._set_errors(ObjstoreError, dict(ERROR_CODES), ConnectionFailed, ZeroCopyUnavailable,
                      ClientClosed, ClientForked)

# ---- arguments ------------------------------------------------------------------------------


def _id(value):
    """An id as bytes: str (UTF-8) or bytes-like, 1 to 512 bytes."""
    if isinstance(value, str):
        value = value.encode()
    elif isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    elif not isinstance(value, bytes):
        raise TypeError(f"an id is str or bytes, not {type(value).__name__}")
    if not 1 <= len(value) <= ID_MAX:
        raise ValueError(f"an id has 1 to {ID_MAX} bytes, not {len(value)}")
    return value


def _timeout_ms(timeout):
    """Seconds -> the library's convention: 0 do not wait, -1 forever, else ms."""
    if timeout is None:
        return 0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout is seconds (int or float), not {type(timeout).__name__}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be >= 0 seconds, not {timeout}")
    if math.isinf(timeout):
        return -1
    if timeout == 0:
        return 0
    ms = max(1, int(round(timeout * 1000)))
    if ms > 2**62:
        raise ValueError("timeout too large (use objstore.FOREVER)")
    return ms


REPLICAS_MAX = 16  # the most copies any node takes (its replicas-max is at most this)


def _replicas_arg(replicas):
    """A put's copy count for the library: None -> 0 (the node's default), else 1 to
    REPLICAS_MAX (the node refuses more than its replicas-max: BadArgument)."""
    if replicas is None:
        return 0
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise TypeError(f"replicas is an int, not {type(replicas).__name__}")
    if not 1 <= replicas <= REPLICAS_MAX:
        raise ValueError(f"replicas must be 1 to {REPLICAS_MAX}, not {replicas}")
    return replicas


def _wait_ms_arg(wait_ms):
    """How long a put's node waits for its copies: None -> -1 (the node's
    replica-timeout), else ms >= 0 (0: do not wait)."""
    if wait_ms is None:
        return -1
    if isinstance(wait_ms, bool) or not isinstance(wait_ms, int):
        raise TypeError(f"wait_ms is an int, not {type(wait_ms).__name__}")
    if not 0 <= wait_ms < 2**62:
        raise ValueError(f"wait_ms must be >= 0, not {wait_ms}")
    return wait_ms


def _meta_arg(meta):
    if meta is None:
        return b""
    if isinstance(meta, str):
        return meta.encode()
    if isinstance(meta, (bytes, bytearray, memoryview)):
        return bytes(meta)
    raise TypeError(f"meta is bytes or str, not {type(meta).__name__}")


def _size_arg(size):
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"size is an int, not {type(size).__name__}")
    if size < 0:
        raise ValueError(f"size must be >= 0, not {size}")
    if size >= 2**63:
        raise ValueError(f"size {size} is too large")
    return size


# ---- metadata: how a value's type travels -------------------------------------------------

_HEADER = b'{"objpy":1'


def _encode_header(fields, user_meta):
    head = {"objpy": 1}
    head.update(fields)
    if user_meta:
        head["user"] = user_meta.hex()
    return json.dumps(head, separators=(",", ":")).encode()


@functools.lru_cache(maxsize=256)
def _decode_header(meta):
    """(header dict or None, the user's metadata bytes); cached, as gets of one kind of
    array repeat the same header (callers must not change the dict)."""
    if meta and meta.startswith(_HEADER):
        try:  # a header that does not parse is the writer's bytes, not a layout
            head = json.loads(meta)
            return head, bytes.fromhex(head.get("user", ""))
        except (ValueError, TypeError, AttributeError, RecursionError):
            return None, meta
    return None, meta


def _numpy():
    import numpy
    return numpy


def _torch():
    import torch
    return torch


def _is_numpy(value):
    mod = type(value).__module__
    return mod == "numpy" and type(value).__name__ == "ndarray"


def _is_torch(value):
    return type(value).__module__.startswith("torch") and type(value).__name__ in (
        "Tensor", "Parameter")


_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 1}


def _dl_layout(buf, dtype, shape):
    """Set the DLPack dtype and shape a Buffer exports (numpy dtype)."""
    code = _DL_CODES.get(dtype.kind)
    if code is None or not dtype.isnative:
        return  # exported as bytes
    buf._set_layout(code, dtype.itemsize * 8, 1, list(shape))


def _value_parts(value, meta):
    """(buffer to copy, metadata) for put()."""
    user = _meta_arg(meta)
    if isinstance(value, (bytes, bytearray)):
        return value, user
    if _is_torch(value):
        torch = _torch()
        t = value.detach()
        if t.device.type != "cpu":
            raise ValueError(f"a tensor on {t.device} cannot be put: move it to the CPU first")
        t = t.resolve_conj().resolve_neg().contiguous()
        name = str(t.dtype).split(".", 1)[1]
        arr = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
        return arr, _encode_header({"kind": "torch", "dtype": name, "shape": list(t.shape)},
                                   user)
    if _is_numpy(value):
        np = _numpy()
        if value.dtype.hasobject:
            raise TypeError("an array of Python objects has no bytes to store: use put_object")
        arr = value if value.flags.c_contiguous else value.copy(order="C")
        descr = np.lib.format.dtype_to_descr(arr.dtype)
        # As bytes: numpy exports no buffer for some dtypes (datetime64, ...).
        return arr.reshape(-1).view(np.uint8), _encode_header(
            {"kind": "numpy", "dtype": descr, "shape": list(arr.shape)}, user)
    try:
        mv = memoryview(value)
    except TypeError:
        raise TypeError(f"put() takes bytes or an object with the buffer protocol (numpy, "
                        f"torch CPU tensor, memoryview), not {type(value).__name__}; "
                        f"use put_object for other Python objects") from None
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    if mv.format == "B" and mv.ndim == 1:
        return mv, user
    return mv, _encode_header({"kind": "memoryview", "format": mv.format,
                               "shape": list(mv.shape)}, user)


# ---- the client ----------------------------------------------------------------------------


class Creation:
    """A created object being written: use as `with client.create(id, n) as view:`.
    Leaving the block seals it; an exception aborts it."""

    def __init__(self, buf, dtype=None, shape=None, replicas=0, wait_ms=-1):
        self.buffer = buf
        self._views = []
        self._dtype = dtype
        self._shape = shape
        self._copies = (replicas, wait_ms)
        self.holders = None  # after the seal of an object of several copies: the count

    @property
    def view(self):
        """A writable view of the object's bytes (a numpy array with dtype/shape)."""
        mv = memoryview(self.buffer)
        self._views.append(mv)
        if self._dtype is None:
            return mv
        np = _numpy()
        return np.frombuffer(mv, dtype=self._dtype).reshape(self._shape)

    def _drop_views(self):
        for mv in self._views:
            try:
                mv.release()
            except BufferError:
                pass  # an array made from it lives on: the object stays pinned for it
        self._views.clear()

    def seal(self):
        """Seal; for an object of several copies, return (and keep in .holders) how
        many live nodes hold it (as put())."""
        self._drop_views()
        self.holders = self.buffer.seal(*self._copies)
        return self.holders

    def abort(self):
        self._drop_views()
        self.buffer.abort()

    def __enter__(self):
        return self.view

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.seal()
        else:
            self.abort()
        return False


class Client:
    """One connection to one node. Thread-safe (one call at a time; the GIL is
    released while it waits). Not usable after fork: connect again in the child."""

    def __init__(self, core, url=None):
        self._c = core
        self.url = url

    # -- life cycle
    @property
    def zero_copy(self):
        """True when this client maps the node's arena (gets are views of it); False in
        remote mode, where the same API works through copies."""
        return self._c.zero_copy

    @property
    def closed(self):
        return self._c.closed

    def close(self):
        """No further calls; the connection closes once no view of it is alive."""
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        mode = "zero-copy" if self.zero_copy else "copying"
        state = "closed" if self.closed else mode
        return f"<objstore.Client {self.url or ''} {state}>"

    def command(self, *args):
        """Send any command on this connection (ids, pins and all); the reply as Python
        values (bytes, str for status, int, list, None)."""
        return self._c.command(args)

    # -- put / create
    def put(self, id, value, meta=None, *, replicas=None, wait_ms=None):
        """Store value (bytes, numpy array, torch CPU tensor, anything with the buffer
        protocol) under id: one copy from value's memory into the arena, then sealed.
        dtype and shape travel in the metadata, so get() gives the same kind back.

        replicas=k (None: the node's default, config `replicas`): copies on k distinct
        live nodes, placed by the node. For k >= 2 put returns how many live nodes hold
        the object when the node answered: k, or fewer when wait_ms (None: the node's
        replica-timeout; 0: do not wait) ran out first, which is not an error (the
        node's repair goes on). An object of one copy returns None. NodeDraining: the
        node is draining and takes no new objects."""
        key = _id(id)
        copies = (_replicas_arg(replicas), _wait_ms_arg(wait_ms))
        buf, header = _value_parts(value, meta)
        n = memoryview(buf).nbytes
        return self._c.put(key, [buf], [0], n, header, *copies)

    def set_put_threads(self, n):
        """Threads that copy a large put (1 MiB and up) into the arena; 0: the
        library's default (2). Smaller puts go in one round trip either way."""
        self._c.set_put_threads(n)

    def create(self, id, size, meta=None, *, dtype=None, shape=None, replicas=None,
               wait_ms=None):
        """A writable view of a new object's arena bytes: `with client.create(id, n) as v`
        seals on leaving, aborts on an exception. With dtype (and shape) the view is a
        numpy array and get() returns one. replicas, wait_ms: as put(), applied at the
        seal (the Creation's .holders then has the count)."""
        key = _id(id)
        user = _meta_arg(meta)
        copies = (_replicas_arg(replicas), _wait_ms_arg(wait_ms))
        if dtype is not None:
            np = _numpy()
            dt = np.dtype(dtype)
            shape = tuple(shape) if shape is not None else (_size_arg(size) // dt.itemsize,)
            size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            header = _encode_header({"kind": "numpy", "dtype": np.lib.format.dtype_to_descr(dt),
                                     "shape": list(shape)}, user)
            return Creation(self._c.create(key, _size_arg(size), header), dt, shape, *copies)
        return Creation(self._c.create(key, _size_arg(size), user), None, None, *copies)

    # -- get
    def pin(self, id, timeout=None):
        """The object's Buffer: pinned in the arena until it and every view made from it
        are gone (or .release()). Supports the buffer protocol, DLPack and `with`."""
        buf = self._c.pin(_id(id), _timeout_ms(timeout))
        head, _ = _decode_header(buf.meta)
        if head is not None and head.get("kind") in ("numpy", "torch"):
            try:
                dtype, shape, _ = _numpy_layout(head)
                _dl_layout(buf, dtype, shape)
            except Exception:  # a layout refused (BadMetadata) is exported as bytes
                pass
        return buf

    def get(self, id, timeout=None, kind="auto", with_meta=False):
        """A read-only zero-copy view of the sealed object: kind "auto" gives back what
        was put (numpy array, torch tensor, memoryview; PickledObject for put_object's
        objects: get() never unpickles, see get_object),
        or ask for "memoryview", "numpy", "torch", "buffer" (the Buffer itself), "bytes"
        (a copy). timeout: seconds to wait for a missing id (None: do not wait,
        FOREVER). with_meta: return (value, user metadata)."""
        if kind not in ("auto", "memoryview", "numpy", "torch", "buffer", "bytes"):
            raise ValueError(f"unknown kind {kind!r}")
        buf = self.pin(id, timeout)
        head, user = _decode_header(buf.meta)
        try:
            if kind == "auto" and head is not None and head.get("kind") == "pickle5":
                raise PickledObject(
                    f"PICKLED {id!r} was stored by put_object: get() never unpickles (a pickle "
                    f"runs code of its writer's choosing); call get_object({id!r}) if its "
                    f"writer is trusted as this program's own code, or get({id!r}, "
                    f"kind='bytes') for the bytes")
            value = _convert(buf, head, kind)
        except ObjstoreError:
            buf.release()  # refused before any view was made: the pin goes now
            raise
        return (value, user) if with_meta else value

    # -- Python objects
    def put_object(self, id, obj, meta=None, *, replicas=None, wait_ms=None):
        """Pickle obj (protocol 5): its out-of-band buffers (numpy arrays, torch tensors,
        ...) are copied once, straight into the arena, each aligned to 64 bytes.
        replicas, wait_ms and what it returns: as put()."""
        key = _id(id)
        user = _meta_arg(meta)
        copies = (_replicas_arg(replicas), _wait_ms_arg(wait_ms))
        buffers = []
        if "torch" in sys.modules:  # without torch loaded obj holds no tensor
            from . import torch as tensors
            data = tensors.dumps(obj, buffers.append)
        else:
            data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        parts, offsets, table = [data], [0], []
        pos = len(data)
        for pb in buffers:
            raw = pb.raw()
            pos = (pos + ALIGN - 1) // ALIGN * ALIGN
            parts.append(raw)
            offsets.append(pos)
            table.append([pos, raw.nbytes])
            pos += raw.nbytes
        header = _encode_header({"kind": "pickle5", "plen": len(data), "bufs": table}, user)
        return self._c.put(key, parts, offsets, pos, header, *copies)

    def get_object(self, id, timeout=None, copy=False):
        """The object put by put_object; its arrays and torch tensors are zero-copy views
        of the arena (numpy arrays read-only; a write into a tensor changes the stored
        object), which keep it pinned while they live. copy=True: private, writable
        copies instead (one copy of each buffer), and the pin is released on return.
        Unpickling runs code the writer chooses: only for objects of writers trusted as
        this program's own code (docs/security.md)."""
        buf = self.pin(id, timeout)
        head, _ = _decode_header(buf.meta)
        if head is None or head.get("kind") != "pickle5":
            buf.release()
            raise ValueError(f"{id!r} was not stored by put_object")
        try:
            table = _buffer_table(head, buf.size)
        except BadMetadata:
            buf.release()
            raise
        return _unpickle(buf, table, copy)

    # -- the other commands
    def delete(self, id):
        """OBJ.DEL: "OK" (freed now) or "DEFERRED" (pinned: freed when the last pin goes)."""
        return self._c.command(("OBJ.DEL", _id(id)))

    def exists(self, id):
        return self._c.command(("OBJ.EXISTS", _id(id))) == 1

    def info(self, id):
        """OBJ.INFO as a dict (state, size, meta_size, offset, pins, checksum, replicas:
        the copies it wants, copy: "primary", "protected" or "replica", ...)."""
        return _fields(self._c.command(("OBJ.INFO", _id(id))))

    def stats(self):
        """OBJ.STATS as a dict."""
        return _fields(self._c.command(("OBJ.STATS",)))

    def locate(self, id):
        """OBJ.LOCATE: {size, meta_size, checksum, locations: [node names], replicas: the
        copies it wants, owner: the node named primary ("" when none), protected: [the
        nodes whose copies count toward replicas]}."""
        out = _fields(self._c.command(("OBJ.LOCATE", _id(id))))
        for field in ("locations", "protected"):
            if field in out:
                out[field] = [_text(n) for n in out[field] or []]
        out.setdefault("locations", [])
        return out

    # -- drain (docs/cluster.md, "Copies, repair and drain")
    def drain(self, wait_ms=None):
        """OBJ.DRAIN: this node refuses new objects (NodeDraining) and moves its
        primaries and protected copies to other nodes; a drain under way is joined.
        wait_ms: wait up to that long for the drain to end (None or 0: answer at once).
        Returns drain_status()'s dict, as it stood when the node answered."""
        args = ["OBJ.DRAIN"]
        if wait_ms:
            args += ["WAIT", _wait_ms_arg(wait_ms)]
        return _drain_fields(self._c.command(args))

    def drain_status(self):
        """OBJ.DRAIN STATUS: {state: "idle", "draining" or "drained", objects_left,
        objects_moved, bytes_moved, failures, last_error}."""
        return _drain_fields(self._c.command(("OBJ.DRAIN", "STATUS")))

    def drain_cancel(self):
        """OBJ.DRAIN CANCEL: the node takes new objects again (what moved stays moved).
        Returns drain_status()'s dict."""
        return _drain_fields(self._c.command(("OBJ.DRAIN", "CANCEL")))

    def nodes(self):
        """OBJ.NODES: one dict per live node."""
        return [_fields(n) for n in self._c.command(("OBJ.NODES",))]

    def fetch(self, ids, from_=None, via=None, timeout=None):
        """OBJ.FETCH: pull objects to this node. Returns {id: None (now local) or the
        ObjstoreError of that id}. via: "auto", "tcp", "rdma"; from_: a node name to
        ask first; timeout: seconds (None: the node's fetch-timeout)."""
        if isinstance(ids, (str, bytes)):
            ids = [ids]
        keys = [_id(i) for i in ids]
        if not keys:
            raise ValueError("fetch needs at least one id")
        args = ["OBJ.FETCH", *keys]
        if timeout is not None:
            ms = _timeout_ms(timeout)
            args += ["TIMEOUT", 0 if ms < 0 else ms]
        if via is not None:
            if via not in ("auto", "tcp", "rdma"):
                raise ValueError(f"via is 'auto', 'tcp' or 'rdma', not {via!r}")
            args += ["VIA", via]
        if from_ is not None:
            node = _id(from_)
            if len(node) > 128:
                raise ValueError("a node name has 1 to 128 bytes")
            args += ["FROM", node]
        reply = self._c.command(args)
        if isinstance(reply, str):
            reply = [reply] * len(keys)
        out = {}
        for given, r in zip(ids, reply):
            out[given] = r if isinstance(r, BaseException) else None
        return out

    def list(self, match=None, count=None):
        """Iterate over the ids (bytes) of sealed objects (OBJ.LIST, cursor by cursor)."""
        args = []
        if match is not None:
            args += ["MATCH", _id(match) if not isinstance(match, str) else match.encode()]
        if count is not None:
            if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
                raise ValueError("count is a positive int")
            args += ["COUNT", count]
        return _ListIter(self._c, args)

    # -- pin cache (the C library's; off by default)
    def set_pin_cache(self, max_idle):
        """Keep up to max_idle released pins on the node for fast re-gets (0: off)."""
        self._c.set_pin_cache(_size_arg(max_idle))

    def flush_releases(self):
        self._c.flush_releases()

    def pin_cache_stats(self):
        return self._c.pin_cache_stats()


class _ListIter:
    def __init__(self, core, args):
        self._core, self._args = core, args
        self._cursor, self._batch, self._done = b"0", [], False

    def __iter__(self):
        return self

    def __next__(self):
        while not self._batch:
            if self._done:
                raise StopIteration
            cursor, ids = self._core.command(("OBJ.LIST", self._cursor, *self._args))
            self._cursor = cursor
            self._done = cursor in (b"0", 0, "0")
            self._batch = list(reversed(ids))
        return self._batch.pop()


def _text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def _drain_fields(reply):
    """OBJ.DRAIN's reply as a dict; last_error is a str ("" when none)."""
    out = _fields(reply)
    last = out.get("last_error")
    out["last_error"] = "" if last is None else _text(last) if isinstance(last, bytes) else str(last)
    return out


def _fields(reply):
    """A flat field/value reply as a dict: str keys, numbers as int."""
    out = {}
    for k, v in zip(reply[::2], reply[1::2]):
        if isinstance(v, bytes):
            t = v.decode(errors="replace")
            v = int(t) if t.isdigit() else t
        out[_text(k)] = v
    return out


def _numpy_layout(head):
    """(numpy dtype, shape, bytes it covers) of a numpy or torch header, checked
    (_checked_shape; no Python objects); computed once per header (the headers are cached
    by _decode_header). Raises BadMetadata."""
    layout = head.get("_layout")
    if layout is None:
        np = _numpy()
        try:
            if head["kind"] == "torch":
                name = head["dtype"]
                if not isinstance(name, str):
                    raise TypeError("a torch dtype is a name")
                dt = np.dtype("int16") if name == "bfloat16" else np.dtype(
                    _TORCH_TO_NUMPY[name])
            else:
                dt = np.lib.format.descr_to_dtype(_tuplify(head["dtype"]))
        except Exception as e:
            raise BadMetadata(f"BADMETA dtype {head.get('dtype')!r} is not one this package "
                              f"writes: {e}") from None
        if dt.hasobject:
            raise BadMetadata("BADMETA a dtype of Python objects has no bytes to view")
        shape = _checked_shape(head.get("shape"))
        layout = head["_layout"] = (dt, shape, math.prod(shape) * dt.itemsize)
    return layout


_MAX_NDIM = 32  # as the native core's DLPack export


def _checked_shape(shape):
    """A header's shape as a tuple of ints >= 0, at most _MAX_NDIM of them. Raises
    BadMetadata."""
    if (not isinstance(shape, list) or len(shape) > _MAX_NDIM
            or not all(type(n) is int and n >= 0 for n in shape)):
        raise BadMetadata(f"BADMETA shape {shape!r} is not a list of at most {_MAX_NDIM} "
                          f"extents >= 0")
    return tuple(shape)


def _check_fits(nbytes, buf):
    """Raise BadMetadata unless a layout of nbytes fits in the object of buf."""
    if nbytes > buf.size:
        raise BadMetadata(f"BADMETA the metadata describes {nbytes} bytes; the object holds "
                          f"{buf.size}")


_TORCH_TO_NUMPY = {"bfloat16": "int16", "float32": "float32", "float64": "float64", "float16": "float16",
                   "complex64": "complex64", "complex128": "complex128", "bool": "bool",
                   "uint8": "uint8", "int8": "int8", "int16": "int16", "int32": "int32",
                   "int64": "int64"}


# The dtypes torch.from_numpy takes.
_TORCH_FROM_NUMPY = frozenset(("float64", "float32", "float16", "complex64", "complex128",
                               "int64", "int32", "int16", "int8", "uint8", "bool"))


def _tuplify(descr):
    """json turned descr's tuples into lists; numpy wants them back."""
    if isinstance(descr, list):
        return [tuple(_tuplify(x) if isinstance(x, list) else x for x in f) for f in descr]
    return descr


try:
    import numpy as _np
except ImportError:  # numpy is needed only for arrays
    _np = None

if _np is not None:
    class ObjectArray(_np.ndarray):
        """The numpy array get() returns: a read-only view of the object's bytes that
        also exports DLPack (numpy itself refuses to export read-only arrays). Slices
        and results of arithmetic stay ObjectArrays; each exports its own memory."""

        def __dlpack__(self, stream=None):
            if stream is not None:
                raise BufferError("a CPU array takes no stream")
            dt = self.dtype
            code = _DL_CODES.get(dt.kind)
            if code is None or not dt.isnative:
                raise BufferError(f"dtype {dt} has no DLPack equivalent")
            size = dt.itemsize
            if any(st % size for st in self.strides):
                raise BufferError("strides that are not whole elements")
            low, high = _byte_bounds(self)
            return _objstore._dlpack_export(self, self.ctypes.data, low, high,
                                            tuple(self.shape),
                                            tuple(st // size for st in self.strides), code,
                                            size * 8, 1)

        def __dlpack_device__(self):
            return (1, 0)


def _byte_bounds(arr):
    """(first, end) addresses of the memory numpy says arr spans (numpy 1 and 2)."""
    utils = getattr(getattr(_np.lib, "array_utils", None), "byte_bounds", None)
    return (utils or _np.byte_bounds)(arr)


def _as_numpy(buf, head):
    np = _numpy()
    if head is None or head.get("kind") not in ("numpy", "torch", "memoryview"):
        arr = np.frombuffer(memoryview(buf), dtype=np.uint8)
    elif head["kind"] == "memoryview":
        arr = np.asarray(_as_memoryview(buf, head))
    else:
        dt, shape, nbytes = _numpy_layout(head)
        _check_fits(nbytes, buf)
        # the memoryview is the array's base: it holds the export (and the pin)
        arr = np.frombuffer(memoryview(buf), dtype=dt, count=math.prod(shape)).reshape(shape)
    return arr.view(ObjectArray)


def _as_torch(buf, head):
    torch = _torch()
    arr = _as_numpy(buf, head)
    if arr.dtype.name not in _TORCH_FROM_NUMPY or not arr.dtype.isnative:
        # torch.from_numpy keeps a reference to an array it refuses: the pin would stay
        raise TypeError(f"torch has no tensor of dtype {arr.dtype}: get(..., kind='numpy')")
    with warnings.catch_warnings():
        # torch has no read-only tensors; it warns about every read-only array
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(arr)
    if head is not None and head.get("kind") == "torch" and head["dtype"] == "bfloat16":
        t = t.view(torch.bfloat16)
    return t


def _as_memoryview(buf, head):
    if head is not None and head.get("kind") == "memoryview":
        fmt, shape = head.get("format"), _checked_shape(head.get("shape"))
        try:  # a format memoryview can cast to, checked before any view of buf exists
            itemsize = struct.calcsize(fmt)
            memoryview(bytes(itemsize)).cast(fmt)
        except (TypeError, ValueError, struct.error):
            raise BadMetadata(f"BADMETA format {fmt!r} is not one a memoryview takes") from None
        nbytes = math.prod(shape) * itemsize
        _check_fits(nbytes, buf)
        raw = memoryview(buf).cast("B")[:nbytes]
        return raw.cast(fmt, shape) if shape and 0 not in shape else raw.cast(fmt)
    return memoryview(buf)


def _buffer_table(head, size):
    """(pickle length, [(offset, length)]) of a pickle5 header, each range checked to
    lie inside the object's size bytes (BadMetadata otherwise)."""
    plen, table = head.get("plen"), head.get("bufs")
    if type(plen) is not int or not 0 <= plen <= size or not isinstance(table, list):
        raise BadMetadata(f"BADMETA the pickle length {plen!r:.40} or the buffer table is "
                          f"wrong for an object of {size} bytes")
    ranges = []
    for entry in table:
        if not (isinstance(entry, list) and len(entry) == 2 and all(
                type(v) is int and v >= 0 for v in entry) and entry[0] + entry[1] <= size):
            raise BadMetadata(f"BADMETA a buffer {entry!r:.60} lies outside the object's "
                              f"{size} bytes")
        ranges.append(entry)
    return plen, ranges


def _unpickle(buf, table, copy=False):
    """The object pickled in buf, its out-of-band buffers the checked ranges of table
    ((pickle length, ranges), from _buffer_table): views of buf, or private copies."""
    mv = memoryview(buf)
    plen, table = table
    if copy:
        oob = [bytearray(mv[off:off + n]) for off, n in table]
    else:
        oob = [mv[off:off + n] for off, n in table]
    try:
        return pickle.loads(mv[:plen], buffers=oob)
    finally:
        del oob


def _convert(buf, head, kind):
    stored = head.get("kind") if head is not None else "bytes"
    if kind == "buffer":
        return buf
    if kind == "bytes":
        with memoryview(buf) as mv:
            return mv.tobytes()
    if kind == "auto":
        kind = {"numpy": "numpy", "torch": "torch"}.get(stored, "memoryview")
    if kind == "numpy":
        return _as_numpy(buf, head)
    if kind == "torch":
        return _as_torch(buf, head)
    return _as_memoryview(buf, head)


# ---- one object to many nodes ---------------------------------------------------------------

def _named_clients(clients):
    """[(name, Client)] of a broadcast's clients: {name: Client}, or Clients named by
    their url. Raises ValueError when there are none, TypeError for a non-Client."""
    if isinstance(clients, dict):
        named = list(clients.items())
    else:
        named = [(c.url if isinstance(c, Client) else c, c) for c in clients]
    if not named:
        raise ValueError("broadcast needs at least one client")
    for name, c in named:
        if not isinstance(c, Client):
            raise TypeError(f"broadcast takes objstore Clients, not {type(c).__name__} "
                            f"(for {name!r})")
    return named


def broadcast(id, clients, timeout=None):
    """Place object id on every node of clients and return once each holds it: OBJ.FETCH
    on every node at once (the C library's objClientBroadcast), so that the nodes spread
    the uploads and relay to each other what they are still receiving. clients: {name:
    Client} (or a sequence of Clients, named by their url). timeout: seconds for each
    node (None: each node's fetch-timeout). Returns None when every node holds the
    object; otherwise raises BroadcastError, whose `failures` maps the name of every
    node that does not hold it to its error (the others hold it)."""
    key = _id(id)
    named = _named_clients(clients)
    if timeout is None:
        ms = 0
    else:
        ms = _timeout_ms(timeout)
        if ms <= 0:
            raise ValueError(f"timeout is a positive number of seconds or None (each node's "
                             f"fetch-timeout), not {timeout}")
    outcomes = _objstore.broadcast([c._c for _, c in named], key, ms)
    failures = {name: e for (name, _), e in zip(named, outcomes) if e is not None}
    if not failures:
        return None
    succeeded = [name for (name, _), e in zip(named, outcomes) if e is None]
    why = "; ".join(f"{name}: {e}" for name, e in failures.items())
    raise BroadcastError(f"{len(failures)} of {len(named)} nodes do not hold {key!r}: {why}",
                         failures, succeeded)


# ---- connect -------------------------------------------------------------------------------

def connect(host="127.0.0.1", port=6379, *, password=None, username=None, transport="tcp",
            unix_socket=None, zero_copy=None, pin_cache=0, prefault=0):
    """Connect to a node; returns a Client (a context manager).

    host may be a URL: objstore://[user:password@]host:port, redis://..., rdma://host:port
    (Redis protocol over RDMA to the node's rdma-client-port), unix:///path/to/socket;
    a query ?zero_copy=0 forces copies. transport: "tcp" or "rdma". zero_copy: None maps
    the arena when it can (client.zero_copy says whether it did), True requires it
    (ZeroCopyUnavailable otherwise), False always copies. pin_cache: the C library's
    pin cache size (0: off). prefault: populate page tables of pinned objects at least
    this large."""
    url = None
    if isinstance(host, str) and "://" in host:
        url = host
        u = urllib.parse.urlsplit(host)
        scheme = u.scheme.lower()
        if scheme in ("objstore", "redis", "tcp"):
            transport = "tcp"
        elif scheme == "rdma":
            transport = "rdma"
        elif scheme == "unix":
            unix_socket = u.path
        else:
            raise ValueError(f"unknown URL scheme {u.scheme!r} (objstore, redis, rdma, unix)")
        host = u.hostname or "127.0.0.1"
        port = u.port or port
        if u.username:
            username = urllib.parse.unquote(u.username)
        if u.password is not None:
            password = urllib.parse.unquote(u.password)
        elif u.username and password is None:  # redis://password@host
            password, username = username, None
        q = urllib.parse.parse_qs(u.query)
        if "zero_copy" in q:
            zero_copy = q["zero_copy"][-1] not in ("0", "false", "no")
    if not isinstance(host, str):
        raise TypeError("host is a str")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port must be 1 to 65535, not {port!r}")
    if transport not in ("tcp", "rdma"):
        raise ValueError(f"transport is 'tcp' or 'rdma', not {transport!r}")
    for name, v in (("password", password), ("username", username)):
        if v is not None and not isinstance(v, str):
            raise TypeError(f"{name} is a str")
    zc = {None: -1, True: 1, False: 0}.get(zero_copy)
    if zc is None:
        raise TypeError("zero_copy is None, True or False")
    core = _objstore.connect(host, port, unix_socket, transport == "rdma", username, password,
                             zc)
    client = Client(core, url or (f"unix://{unix_socket}" if unix_socket
                                  else f"{transport}://{host}:{port}"))
    try:
        if pin_cache:
            client.set_pin_cache(pin_cache)
        if prefault:
            core.set_prefault(_size_arg(prefault))
    except BaseException:
        client.close()
        raise
    return client


from . import models  # noqa: E402  (named versions of state dicts: docs/models.md)
