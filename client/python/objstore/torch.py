"""objstore.torch: torch tensors out of band, state dicts as zero-copy tensors.

put_object pickles a structure that holds torch tensors with this module's pickler:
each tensor's bytes leave the pickle stream as a protocol-5 out-of-band buffer, which
put_object copies once, straight into the arena; the stream keeps only the torch dtype
name, shape and strides. get_object rebuilds each tensor with torch.frombuffer over its
range of the pinned object: a view of the arena, no copy, which holds the pin for as
long as it (or any view of it) lives. Everything read back from a stored object is
checked (dtype names, shapes and strides against the bytes there are) before a tensor
is made of it, so a corrupted object raises BadMetadata instead of giving a wrong tensor.

The public functions (get_state_dict, load_state_dict, put_state_dict) are what a
user of torch calls; their names and arguments are stable. Usage:
client/python/README.md ("torch").
"""

import io
import math
import pickle
import warnings

import torch

from . import BadMetadata, NotSupported

__all__ = ["get_state_dict", "load_state_dict", "put_state_dict"]

MAX_DIMS = 64  # a stored tensor with more dimensions is refused as corrupted

# Every plain dtype of this torch, by the name a stored tensor carries ("bfloat16"),
# with its element size. Quantized dtypes are left to torch's own pickling.
_DTYPES = {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # "complex32 is experimental"
    for _name in dir(torch):
        _dt = getattr(torch, _name)
        if isinstance(_dt, torch.dtype) and not str(_dt).startswith("torch.q"):
            _DTYPES[str(_dt).split(".", 1)[1]] = (_dt,
                                                  torch.empty((), dtype=_dt).element_size())
    # torch.frombuffer warns once per program that the buffer is read-only (every get
    # is): spend that one warning here, silenced, rather than on a user's first get.
    torch.frombuffer(memoryview(b"\0"), dtype=torch.uint8)
del _name, _dt
_NAMES = {dt: (name, size) for name, (dt, size) in _DTYPES.items()}


# ---- put: the pickler ----------------------------------------------------------------------


def _dense_strides(shape, strides):
    """True when strides (in elements) lay out shape's elements without a gap or an
    overlap, in any order of dimensions: the tensor is one run of numel elements."""
    expect = 1
    for size, stride in sorted(((n, s) for n, s in zip(shape, strides) if n != 1),
                               key=lambda d: d[1]):
        if stride != expect:
            return False
        expect *= size
    return True


def _reduce_tensor(t):
    """(rebuild function, args) of a tensor: its bytes as an out-of-band buffer plus
    dtype name, shape, strides; or None when torch's own pickling must do (quantized,
    sparse, meta)."""
    if t.layout != torch.strided or t.dtype not in _NAMES or t.device.type == "meta":
        return None
    param = isinstance(t, torch.nn.Parameter)
    grad = t.requires_grad
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()  # a copy through the host (CUDA and the other devices)
    t = t.resolve_conj().resolve_neg()
    shape, strides = tuple(t.shape), t.stride()
    if t.numel() == 0:
        flat, strides = t.new_empty(0), _contiguous(shape)
    elif t.is_contiguous():
        flat = t.reshape(-1)
    elif _dense_strides(shape, strides):  # a permuted layout (channels_last, .t()): as is
        flat = t.as_strided((t.numel(),), (1,), t.storage_offset())
    else:  # gaps or overlaps: the one copy that makes it contiguous
        t = t.contiguous()
        flat, strides = t.reshape(-1), t.stride()
    if strides == _contiguous(shape):
        strides = None
    name = _NAMES[t.dtype][0]
    data = pickle.PickleBuffer(flat.view(torch.uint8).numpy())
    return _rebuild, (data, name, shape, strides, grad, param)


def _contiguous(shape):
    """The row-major strides of shape."""
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def _same(obj):
    """Rebuilds a tensor that was stored once and referred to again (tied weights)."""
    return obj


class _Pickler(pickle.Pickler):
    """Protocol 5 with torch tensors out of band. Tensors that are the same view of the
    same memory (tied weights in a state dict) are stored once and come back as one
    tensor; other views of shared memory are stored each on its own."""

    def __init__(self, file, buffer_callback):
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        self._seen = {}

    def reducer_override(self, obj):
        if type(obj) is not torch.Tensor and type(obj) is not torch.nn.Parameter:
            return NotImplemented  # subclasses of Tensor pickle as they choose
        if obj.layout == torch.strided and obj.device.type == "cpu" and obj.numel():
            key = (obj.data_ptr(), obj.dtype, tuple(obj.shape), obj.stride(), type(obj),
                   obj.requires_grad, obj.is_conj(), obj.is_neg())
            first = self._seen.setdefault(key, obj)
            if first is not obj:
                return _same, (first,)
        reduced = _reduce_tensor(obj)
        return NotImplemented if reduced is None else reduced


def dumps(obj, buffer_callback):
    """The pickle stream of obj, its tensors' and arrays' bytes handed to
    buffer_callback (put_object's pickling when torch is loaded)."""
    f = io.BytesIO()
    _Pickler(f, buffer_callback).dump(obj)
    return f.getvalue()


# ---- get: rebuilding tensors ---------------------------------------------------------------


_INT = {int}


def _dims(value, what):
    """value when it is a tuple of at most MAX_DIMS ints >= 0 (BadMetadata otherwise)."""
    if type(value) is not tuple or len(value) > MAX_DIMS or (value and (
            set(map(type, value)) != _INT or min(value) < 0)):
        raise BadMetadata(f"BADMETA a stored tensor's {what} is not a tuple of at most "
                          f"{MAX_DIMS} ints >= 0: {value!r:.80}")
    return value


def _rebuild(data, name, shape, strides, grad, param):
    """The tensor of _reduce_tensor: a view of data (the object's bytes in the arena,
    which it keeps pinned), or of a private copy under get_object(copy=True). Checks
    every field first (BadMetadata, NotSupported), sizes in Python ints (no overflow).
    Runs once per tensor of a get: kept lean."""
    entry = _DTYPES.get(name) if type(name) is str else None
    if entry is None:
        if isinstance(name, str) and name.isidentifier() and len(name) <= 64:
            raise NotSupported(f"NOTSUPPORTED a stored tensor has dtype {name!r}, which "
                               f"this torch ({torch.__version__}) does not have")
        raise BadMetadata(f"BADMETA a stored tensor's dtype is {name!r:.80}")
    dtype, size = entry
    numel = math.prod(_dims(shape, "shape"))
    if strides is not None and (len(_dims(strides, "strides")) != len(shape) or (
            numel and not _dense_strides(shape, strides))):
        raise BadMetadata(f"BADMETA a stored tensor's strides {strides} do not lay out "
                          f"its shape {shape} densely")
    try:
        view = data if type(data) is memoryview else memoryview(data)
    except TypeError:
        raise BadMetadata(f"BADMETA a stored tensor's bytes are a "
                          f"{type(data).__name__}") from None
    if view.nbytes != numel * size or not view.c_contiguous:
        raise BadMetadata(f"BADMETA a stored tensor of shape {shape} and dtype {name} "
                          f"needs {numel * size} bytes, its buffer has {view.nbytes}")
    if grad is not False or param is not False:
        if type(grad) is not bool or type(param) is not bool or (
                grad and not (dtype.is_floating_point or dtype.is_complex)):
            raise BadMetadata(f"BADMETA a stored tensor's flags are wrong: requires_grad "
                              f"{grad!r:.20}, parameter {param!r:.20}, dtype {name}")
    if numel == 0:
        t = torch.empty(shape, dtype=dtype)
    else:
        t = torch.frombuffer(view, dtype=dtype)
        if strides is not None:
            t = t.as_strided(shape, strides)
        elif len(shape) != 1:
            t = t.view(shape)
    if param:
        return torch.nn.Parameter(t, requires_grad=grad)
    return t.requires_grad_() if grad else t


# ---- state dicts ---------------------------------------------------------------------------


def put_state_dict(client, id, state, meta=None):
    """Store a state dict (or an nn.Module's, when state is a module) under id:
    client.put_object, each tensor's bytes copied once into the arena."""
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    client.put_object(id, state, meta)


def get_state_dict(client, id, timeout=None, copy=False):
    """The state dict stored under id, its tensors zero-copy views of the arena (the
    object stays pinned while any of them lives). Do not write into them: the arena is
    shared, a write changes the stored object for every reader of this node. copy=True
    gives private, writable tensors instead (one copy each; the pin is released before
    this returns). Raises TypeError when the object is not a dict."""
    state = client.get_object(id, timeout, copy=copy)
    if not isinstance(state, dict):
        raise TypeError(f"{id!r} holds a {type(state).__name__}, not a state dict")
    return state


def load_state_dict(client, id, module, strict=True, timeout=None):
    """Fill module's parameters and buffers from the state dict stored under id: one
    copy, arena -> parameters (torch's load_state_dict copy_ under no_grad, from
    zero-copy views that are dropped when this returns). strict as torch's. Returns
    torch's (missing_keys, unexpected_keys)."""
    state = get_state_dict(client, id, timeout)
    try:
        return module.load_state_dict(state, strict=strict)
    finally:
        state.clear()  # unpin now, not whenever the caller's frame lets go
