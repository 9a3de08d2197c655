"""objstore.models: named, versioned models (state dicts) over objstore objects.

A version of a model is a set of part objects (one per tensor) and a manifest object
that maps each tensor's name to its part, dtype, shape, strides and byte size; the
node's OBJ.VPUBLISH makes a version current atomically, so a reader sees one whole
version or none. A tensor whose bytes equal the previous version's is not stored
again: the new manifest names the old part (a delta), so readers that hold the
previous version fetch only what changed. Readers take all tensors or a shard of
them; broadcast() places every part of a version on many nodes. The manifest is
written by any writer and read by every reader, so it is checked like any
untrusted input: a bad one is a ModelError, never a crash or a wrong tensor.
Usage and the layout of a manifest: docs/models.md.
"""

import json
import secrets
import threading
import time
import warnings

from . import (ID_MAX, BroadcastError, Client, ObjectNotFound, ObjstoreError, _id,
               _named_clients, _replicas_arg, _timeout_ms, _wait_ms_arg)

__all__ = ["publish", "latest", "versions", "get_state_dict", "load", "broadcast",
           "drop", "ModelError"]

MANIFEST_META = b"objstore-model-manifest"
MANIFEST_FORMAT = 1
MANIFEST_MAX = 64 << 20  # a manifest larger than this is refused unread
# How long publish() waits for its own new parts to reach the directory (a node
# publishes a sealed object there asynchronously, a few ms after the seal).
PUBLISH_SETTLE_S = 2.0
PREFIX_BYTES = 4096  # compared first: a changed tensor almost always differs here

# dtype name -> (itemsize, torch attribute); the only dtypes a manifest may name.
_DTYPES = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "complex64": 8,
    "complex128": 16, "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4,
    "int64": 8,
}


class ModelError(ObjstoreError):
    """BADMODEL: a manifest that does not describe a valid version (corrupt, not a
    manifest, or a part whose size disagrees with it)."""


def _torch():
    import torch
    return torch


def _name(name):
    """A model's name as bytes; leaves room for the ids derived from it."""
    key = _id(name)
    if len(key) > ID_MAX - 64:
        raise ValueError(f"a model name has at most {ID_MAX - 64} bytes, not {len(key)}")
    return key


def _show(key):
    return key.decode(errors="replace")


def _version_arg(version, what="version"):
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"{what} is an int, not {type(version).__name__}")
    if version < 1:
        raise ValueError(f"{what} must be >= 1, not {version}")
    return version


# ---- the directory's versions ---------------------------------------------------------------

def _resolve(client, key, version):
    """(version, manifest id) of version (None: the latest). ObjectNotFound when the
    name has no such version, with a message that says which."""
    try:
        if version is None:
            v, mid = client.command("OBJ.VLATEST", key)
            return int(v), bytes(mid)
        mid = client.command("OBJ.VGET", key, _version_arg(version))
        return version, bytes(mid)
    except ObjectNotFound as e:
        what = "no version" if version is None else f"no version {version}"
        hint = ""
        if version is None and client.exists(key):
            hint = " (an object of that id exists: it is not a model)"
        raise ObjectNotFound(f"NOTFOUND model {_show(key)!r} has {what}{hint}: {e}") from None


def latest(client, name, newer_than=None, timeout=None):
    """The latest version of name (an int). newer_than=v: wait until a version newer
    than v exists (a blocked call on the node, not a poll) and return it; timeout:
    seconds (None or objstore.FOREVER: no limit), then objstore.Timeout.
    ObjectNotFound when the name has no version (and newer_than is None)."""
    key = _name(name)
    if newer_than is None:
        return _resolve(client, key, None)[0]
    if isinstance(newer_than, bool) or not isinstance(newer_than, int) or newer_than < 0:
        raise ValueError(f"newer_than is a version (an int >= 0), not {newer_than!r}")
    ms = -1 if timeout is None else _timeout_ms(timeout)
    ms = 0 if ms < 0 else max(ms, 1)  # the node's TIMEOUT 0 waits without a deadline
    v, _ = client.command("OBJ.VLATEST", key, "NEWER", newer_than, "TIMEOUT", ms)
    return int(v)


def versions(client, name):
    """The versions of name the directory holds, oldest first (empty: none)."""
    return [int(v) for v, _ in client.command("OBJ.VLIST", _name(name))]


def drop(client, name, version):
    """Drop one version: gone from the directory at once; its manifest and the parts
    no remaining version uses are deleted on every node (freed when unpinned)."""
    return client.command("OBJ.VDROP", _name(name), _version_arg(version))


# ---- manifests ------------------------------------------------------------------------------

def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return list(reversed(strides))


def _check_entry(where, e):
    """One tensor of a manifest, checked: (name, part id bytes, dtype, shape, nbytes).
    Raises ModelError naming what is wrong."""
    if not isinstance(e, dict):
        raise ModelError(f"BADMODEL {where}: a tensor entry is not an object")
    tname, part, dtype = e.get("name"), e.get("part"), e.get("dtype")
    shape, strides, nbytes = e.get("shape"), e.get("strides"), e.get("nbytes")
    if not isinstance(tname, str) or not tname:
        raise ModelError(f"BADMODEL {where}: a tensor without a name")
    where = f"{where}, tensor {tname!r}"
    if not isinstance(part, str) or not 1 <= len(part.encode()) <= ID_MAX:
        raise ModelError(f"BADMODEL {where}: bad part id")
    if dtype not in _DTYPES:
        raise ModelError(f"BADMODEL {where}: unknown dtype {dtype!r}")
    if (not isinstance(shape, list) or len(shape) > 64
            or not all(type(n) is int and 0 <= n < 2**62 for n in shape)):
        raise ModelError(f"BADMODEL {where}: bad shape")
    if strides != _contiguous_strides(shape):
        raise ModelError(f"BADMODEL {where}: strides {strides!r} are not the contiguous "
                         f"strides of shape {shape}")
    count = 1
    for n in shape:
        count *= n
    if type(nbytes) is not int or nbytes != count * _DTYPES[dtype]:
        raise ModelError(f"BADMODEL {where}: nbytes {nbytes!r} does not match "
                         f"{dtype} {shape}")
    return tname, part.encode(), dtype, tuple(shape), nbytes


def _parse_manifest(raw, key, version):
    """The tensors of a manifest's bytes, in order: [(name, part, dtype, shape, nbytes)].
    Raises ModelError for anything but a well-formed manifest of (key, version)."""
    where = f"model {_show(key)!r} version {version}"
    if len(raw) > MANIFEST_MAX:
        raise ModelError(f"BADMODEL {where}: a manifest of {len(raw)} bytes")
    try:
        doc = json.loads(bytes(raw))
    except (ValueError, UnicodeDecodeError):
        raise ModelError(f"BADMODEL {where}: the manifest is not JSON") from None
    if not isinstance(doc, dict) or doc.get("objmodel") != MANIFEST_FORMAT:
        raise ModelError(f"BADMODEL {where}: not a model manifest (format "
                         f"{MANIFEST_FORMAT})")
    if doc.get("name") != _show(key) or doc.get("version") != version:
        raise ModelError(f"BADMODEL {where}: the manifest is of model {doc.get('name')!r} "
                         f"version {doc.get('version')!r}")
    entries = doc.get("tensors")
    if not isinstance(entries, list):
        raise ModelError(f"BADMODEL {where}: no tensor list")
    out, seen = [], set()
    for e in entries:
        item = _check_entry(where, e)
        if item[0] in seen:
            raise ModelError(f"BADMODEL {where}: tensor {item[0]!r} twice")
        seen.add(item[0])
        out.append(item)
    return out


def _read_manifest(client, key, version, mid, timeout=None):
    """Fetch (if need be) and parse the manifest mid of (key, version)."""
    _fetch_or_raise(client, [mid], key, version, timeout)
    with memoryview(client.pin(mid)) as mv:
        return _parse_manifest(mv, key, version)


def _fetch_or_raise(client, ids, key, version, timeout):
    """Bring ids to client's node; raises the first id's error, saying what it is."""
    if not ids:
        return
    for pid, err in client.fetch(ids, timeout=timeout).items():
        if err is not None:
            raise type(err)(f"{err.code or 'ERR'} model {_show(key)!r} version {version}: "
                            f"object {_show(pid)!r} could not be fetched: {err}") from None


def _fetch_all(client, ids, key, version, timeout):
    """Bring ids to client's node with one OBJ.FETCH naming them all: the node runs their
    transfers at once, so the links stay busy while each part's relay chain forms (one
    part after another paid that set-up, a lookup, a BUSY and a hop, per part)."""
    _fetch_or_raise(client, list(dict.fromkeys(ids)), key, version, timeout)


# ---- publish --------------------------------------------------------------------------------

def _state_dict(value):
    sd = value.state_dict() if hasattr(value, "state_dict") else value
    if not hasattr(sd, "items"):
        raise TypeError(f"publish takes a state dict or an nn.Module, not {type(value).__name__}")
    torch = _torch()
    out = []
    for tname, t in sd.items():
        if not isinstance(tname, str) or not tname:
            raise TypeError(f"tensor names are non-empty str, not {tname!r}")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{tname!r} is a {type(t).__name__}, not a torch tensor")
        if t.device.type != "cpu":
            raise ValueError(f"{tname!r} is on {t.device}: move it to the CPU first")
        name = str(t.dtype).split(".", 1)[1]
        if name not in _DTYPES:
            raise TypeError(f"{tname!r}: dtype {t.dtype} is not supported")
        out.append((tname, t.detach().resolve_conj().resolve_neg().contiguous(), name))
    return out


def _bytes_of(t):
    """A flat uint8 view of a contiguous CPU tensor (no copy)."""
    torch = _torch()
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


def _same_as_local(client, pid, t, nbytes):
    """True when part pid is held on client's node and its bytes equal t's; None when
    it is not held here (cannot tell without fetching it)."""
    torch = _torch()
    try:
        buf = client.pin(pid)
    except ObjectNotFound:
        return None
    with buf:
        if buf.size != nbytes:
            return False
        if nbytes == 0:
            return True
        with memoryview(buf) as mv, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only: only read here
            old = torch.frombuffer(mv, dtype=torch.uint8)
            new = _bytes_of(t)
            n = min(PREFIX_BYTES, nbytes)
            same = torch.equal(old[:n], new[:n]) and torch.equal(old, new)
            del old
        return same


def _same_by_checksum(client, new_pid, old_pid):
    """True when the directory's checksum (XXH3-64 of data and metadata) of old_pid
    equals the node's of the freshly sealed new_pid."""
    try:
        old = client.locate(old_pid)
    except ObjstoreError:
        return False
    new = client.info(new_pid)
    return old.get("checksum") == new.get("checksum") and old.get("size") == new.get("size")


def _previous(client, key):
    """(latest version or 0, {tensor name: (part, dtype, shape, nbytes)} of it); the
    dict is empty when its manifest cannot be read (publish then stores every tensor)."""
    try:
        v, mid = _resolve(client, key, None)
    except ObjectNotFound:
        return 0, {}
    try:
        entries = _read_manifest(client, key, v, mid)
    except (ObjstoreError, ValueError):
        return v, {}
    return v, {tname: (part, dtype, shape, nbytes)
               for tname, part, dtype, shape, nbytes in entries}


def publish(client, name, state_dict_or_module, version=None, retain=None, *, replicas=None,
            wait_ms=None):
    """Publish a state dict (or an nn.Module's) as version `version` of name (None: the
    latest + 1) and return the version. Each tensor is a part object; a tensor whose
    bytes equal the previous version's is referenced, not stored again. The version
    becomes current atomically (OBJ.VPUBLISH); retain=n then drops all but the n newest
    versions on every node. On any failure nothing is published and the new parts are
    deleted. replicas=k (None: the node's default): each new part and the manifest is
    put with k copies on distinct nodes (Client.put; wait_ms as there), so the version
    outlives the death of its writer's node; a part taken over from the previous
    version keeps the copies it was put with."""
    if not isinstance(client, Client):
        raise TypeError(f"publish takes an objstore Client, not {type(client).__name__}")
    key = _name(name)
    if version is not None:
        _version_arg(version)
    if retain is not None and (isinstance(retain, bool) or not isinstance(retain, int)
                               or retain < 1):
        raise ValueError(f"retain is an int >= 1, not {retain!r}")
    copies = {"replicas": replicas, "wait_ms": wait_ms}
    _replicas_arg(replicas)
    _wait_ms_arg(wait_ms)
    tensors = _state_dict(state_dict_or_module)
    last, prev = _previous(client, key)
    if version is None:
        version = last + 1
    stem = key + b"@%d.%s/" % (version, secrets.token_hex(4).encode())
    made, entries, parts = [], [], []
    try:
        for i, (tname, t, dtype) in enumerate(tensors):
            nbytes = t.numel() * t.element_size()
            part = _place(client, prev.get(tname), stem + b"%d" % i, t, dtype, nbytes, made,
                          copies)
            parts.append(part)
            entries.append({"name": tname, "part": _show(part), "dtype": dtype,
                            "shape": list(t.shape), "strides": _contiguous_strides(t.shape),
                            "nbytes": nbytes})
        doc = {"objmodel": MANIFEST_FORMAT, "name": _show(key), "version": version,
               "tensors": entries}
        mid = stem + b"manifest"
        client.put(mid, json.dumps(doc, separators=(",", ":")).encode(), meta=MANIFEST_META,
                   **copies)
        made.append(mid)
        _vpublish(client, key, version, mid, retain, list(dict.fromkeys(parts)))
    except BaseException:
        for pid in made:
            try:
                client.delete(pid)
            except ObjstoreError:
                pass
        raise
    return version


def _place(client, old, pid, t, dtype, nbytes, made, copies):
    """The part id that holds t's bytes: old's part when its bytes are the same (compared
    against the local copy, else by checksum after storing t), else pid, newly stored
    (with copies: put()'s replicas and wait_ms)."""
    if old is not None and old[1:] == (dtype, tuple(t.shape), nbytes):
        same = _same_as_local(client, old[0], t, nbytes)
        if same:
            return old[0]
    else:
        same = False
    client.put(pid, t, **copies)
    made.append(pid)
    if same is None and _same_by_checksum(client, pid, old[0]):
        client.delete(pid)
        made.pop()
        return old[0]
    return pid


def _vpublish(client, key, version, mid, retain, parts):
    """OBJ.VPUBLISH, retried while a new part is not yet in the directory (a node
    publishes sealed objects there a few ms after the seal)."""
    args = ["OBJ.VPUBLISH", key, version, mid]
    if retain is not None:
        args += ["RETAIN", retain]
    args += ["PARTS", *parts]
    deadline = time.monotonic() + PUBLISH_SETTLE_S
    while True:
        try:
            return client.command(*args)
        except ObjectNotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


# ---- read -----------------------------------------------------------------------------------

def _select(entries, names, key, version):
    if names is None:
        return entries
    if callable(names):
        return [e for e in entries if names(e[0])]
    if isinstance(names, (str, bytes)):
        raise TypeError("names is a list of tensor names or a filter function, not one name")
    want = list(names)
    have = {e[0]: e for e in entries}
    missing = [n for n in want if n not in have]
    if missing:
        raise KeyError(f"model {_show(key)!r} version {version} has no tensor "
                       f"{', '.join(map(repr, missing))}")
    return [have[n] for n in dict.fromkeys(want)]


def _tensor(client, key, version, entry):
    """A zero-copy tensor of one part, checked against its manifest entry."""
    torch = _torch()
    tname, part, dtype, shape, nbytes = entry
    buf = client.pin(part)
    if buf.size != nbytes:
        size = buf.size
        buf.release()
        raise ModelError(f"BADMODEL model {_show(key)!r} version {version}, tensor "
                         f"{tname!r}: part {_show(part)!r} has {size} bytes, the manifest "
                         f"says {nbytes}")
    tdtype = getattr(torch, dtype)
    if nbytes == 0:
        buf.release()
        return torch.empty(shape, dtype=tdtype)
    mv = memoryview(buf)  # the tensor's base keeps the export and the pin alive
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch has no read-only tensors
        flat = torch.frombuffer(mv, dtype=torch.uint8)
    return flat.view(tdtype).view(shape)


def _read(client, name, version, names, timeout):
    """(version, {tensor name: zero-copy tensor}) with only the selected parts fetched.
    version None: the latest; should it be dropped between the lookup and the fetch
    (retention), the new latest is read instead."""
    key = _name(name)
    for attempt in range(3):
        v, mid = _resolve(client, key, version)
        try:
            entries = _select(_read_manifest(client, key, v, mid, timeout), names, key, v)
            _fetch_all(client, [e[1] for e in entries], key, v, timeout)
            return v, {e[0]: _tensor(client, key, v, e) for e in entries}
        except ObjectNotFound:
            if version is not None or attempt == 2 or _resolve(client, key, None)[0] == v:
                raise


def get_state_dict(client, name, version=None, names=None, timeout=None):
    """{tensor name: tensor} of version (None: the latest): zero-copy views of this
    node's copies (pinned while they live; do not write into them). names: a list of
    tensor names or a filter function: only those tensors' parts are fetched to this
    node (a shard). timeout: seconds for the fetches (None: the node's)."""
    return _read(client, name, version, names, timeout)[1]


def load(client, name, module, version=None, names=None, strict=True, timeout=None):
    """Load version (None: the latest) into module in place and return the version
    loaded: one copy, from this node's arena into the parameters and buffers (torch's
    load_state_dict, as objstore.torch.load_state_dict, over the parts' zero-copy
    views, dropped when this returns). names: only those tensors (a shard); strict then
    refuses only tensors the module lacks. torch raises RuntimeError on a mismatch."""
    v, sd = _read(client, name, version, names, timeout)
    try:
        result = module.load_state_dict(sd, strict=strict and names is None)
    finally:
        sd.clear()  # unpin now, not whenever the caller's frame lets go
    if strict and names is not None and result.unexpected_keys:
        raise RuntimeError(f"model {_show(_name(name))!r} version {v}: the module has no "
                           f"{', '.join(map(repr, result.unexpected_keys))}")
    return v


# ---- broadcast ------------------------------------------------------------------------------

def broadcast(name, version, clients, timeout=None):
    """Place every part of version (None: the latest) of name on every node of clients
    ({name: Client}, or Clients named by their url). Each node fetches the manifest and
    the parts in the same order, all nodes at once, so every part moves through the
    nodes' relay chains and the parts follow each other down them. Returns
    {node: {"parts": n, "bytes": b, "seconds": s}} when every node holds the version;
    otherwise raises BroadcastError (failures: node -> its error, succeeded: names)."""
    key = _name(name)
    named = _named_clients(clients)
    first = named[0][1]
    v, mid = _resolve(first, key, version)
    entries = _read_manifest(first, key, v, mid, timeout)
    order, size = [mid], {}
    for e in entries:
        if e[1] not in size:
            order.append(e[1])
        size[e[1]] = e[4]
    report, failures = {}, {}

    def one(n, c):
        t0 = time.monotonic()
        try:
            _fetch_all(c, order, key, v, timeout)
            report[n] = {"parts": len(order) - 1, "bytes": sum(size.values()),
                         "seconds": round(time.monotonic() - t0, 3)}
        except ObjstoreError as e:
            failures[n] = e

    threads = [threading.Thread(target=one, args=nc) for nc in named]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        why = "; ".join(f"{n}: {e}" for n, e in failures.items())
        raise BroadcastError(f"{len(failures)} of {len(named)} nodes do not hold model "
                             f"{_show(key)!r} version {v}: {why}", failures, list(report))
    return report
