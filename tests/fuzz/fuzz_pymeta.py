"""fuzz_pymeta.py - fuzz what a writer controls and the Python package parses: the
metadata header of an object (dtype strings, shapes, formats, torch dtype names,
pickle lengths and out-of-band buffer tables) and the layouts handed to the native
core (_set_layout, _dlpack_export with strides). Meant to run with the package's
extension built under ASan/UBSan (make test-python-san), where a read outside an
object is a report and a non-zero exit.

Each case puts an object through a raw OBJ.PUT (as any writer could) and reads it
every way the package offers: get() of every kind, pin() then DLPack into torch,
get_object() (only on pickles this driver made itself: unpickling a writer's bytes
runs the writer's code, which is get_object's documented contract, not a bug). The
oracle, besides the sanitizers: a read either raises an error or gives a value whose
memory lies inside the object's bytes (address and size checked against the Buffer),
and no read leaves a pin behind.

    OBJSTORE_BUILD=build python tests/fuzz/fuzz_pymeta.py [-n CASES] [-s SEED]

Runs are deterministic for a seed. Exits 0 with one summary line, or non-zero with
the failing case. docs/security.md#what-a-writer-can-make-a-reader-do.
"""

import argparse
import warnings
import gc
import json
import os
import pickle
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import numpy as np  # noqa: E402

import objstore  # noqa: E402
from objstore import _objstore  # noqa: E402
from objnodes import ObjstoreServer, finish  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

BIG = [0, 1, 2, 3, 7, 8, 15, 16, 17, 255, 256, 4095, 4096, 2**31 - 1, 2**31, 2**32 - 1,
       2**32, 2**32 + 1, 2**61, 2**62, 2**62 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70,
       -1, -2, -(2**63), 1.5, "4", None, [], True]
DTYPES = ["|u1", "|i1", "<i2", ">i4", "<f8", "<c16", "|b1", "<M8[ns]", "|S3", "<U2", "|V7",
          "|O", "O", "<f2", "<q", "z9", "", "<f8" * 40, [["a", "<i4"], ["b", "|O"]],
          [["a", "<f8", [2**40]]], [["a", "<i4"], ["b", "<f8"]], [["", "|u1"]], 7, None,
          {"descr": "<f8"}, "(2,3)<f8", "<f8(2**62)"]
TORCH_DTYPES = ["float32", "float64", "bfloat16", "uint8", "bool", "complex128", "object",
                "float", "", 3]
FORMATS = ["B", "b", "d", "f", "q", "Q", "?", "c", "3d", "zz", "", "@d", "<d", "P", 5, None]
KINDS = ["auto", "memoryview", "numpy", "torch", "buffer", "bytes"]


def pick(rng, seq):
    return seq[rng.randrange(len(seq))]


def extent(rng):
    return pick(rng, BIG) if rng.random() < 0.4 else rng.randrange(0, 9)


def shape(rng):
    r = rng.random()
    if r < 0.05:
        return pick(rng, [None, "16", 16, {"a": 1}])
    n = rng.randrange(0, 5) if r < 0.9 else pick(rng, [32, 33, 64, 65, 1000])
    return [extent(rng) if rng.random() < 0.5 else rng.randrange(0, 5) for _ in range(n)]


def header(fields):
    return json.dumps({"objpy": 1, **fields}, separators=(",", ":")).encode()


def layout_case(rng):
    """(data, meta) of a numpy, torch or memoryview object with a fuzzed layout."""
    size = pick(rng, [0, 1, 8, 16, 24, 64, 4096])
    kind = pick(rng, ["numpy", "numpy", "torch", "memoryview", "bogus", 7])
    fields = {"kind": kind, "shape": shape(rng)}
    if kind == "torch":
        fields["dtype"] = pick(rng, TORCH_DTYPES)
    elif kind == "memoryview":
        fields["format"] = pick(rng, FORMATS)
    else:
        fields["dtype"] = pick(rng, DTYPES)
    if rng.random() < 0.1:
        del fields[pick(rng, list(fields))]
    meta = header(fields)
    if rng.random() < 0.1:  # a byte flipped: JSON that may not parse any more
        i = rng.randrange(len(meta))
        meta = meta[:i] + bytes([rng.randrange(256)]) + meta[i + 1:]
    return bytes(rng.randrange(256) for _ in range(size)), meta


def pickle_case(rng):
    """(data, meta) of a pickle this driver made, with a fuzzed length and table."""
    obj = {"a": np.arange(rng.randrange(1, 64), dtype=pick(rng, ["<f8", "|u1", "<i4"])),
           "b": [np.zeros(3), "x"]}
    bufs = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    parts, table, pos = [data], [], len(data)
    for pb in bufs:
        raw = pb.raw()
        pos = (pos + 63) // 64 * 64
        parts.append((pos, raw.tobytes()))
        table.append([pos, raw.nbytes])
        pos += raw.nbytes
    blob = bytearray(pos)
    blob[:len(data)] = data
    for off, raw in parts[1:]:
        blob[off:off + len(raw)] = raw
    plen = len(data)
    r = rng.random()
    if r < 0.3:
        plen = pick(rng, BIG)
    elif r < 0.5:
        plen = rng.randrange(0, len(data))  # a truncated pickle
    if rng.random() < 0.5 and table:
        i = rng.randrange(len(table))
        table[i] = pick(rng, [[extent(rng), extent(rng)], [table[i][0], extent(rng)],
                              [extent(rng), table[i][1]], [1, 2, 3], [], "x", 5])
    if rng.random() < 0.1:
        table = pick(rng, [None, {"a": 1}, "x", [[0, 1]] * 50])
    return bytes(blob), header({"kind": "pickle5", "plen": plen, "bufs": table})


class Reader:
    """The reads of one object and the oracle over their results."""

    def __init__(self, client, rc):
        self.c, self.rc = client, rc
        self.errors = {}

    def refused(self, e):
        self.errors[type(e).__name__] = self.errors.get(type(e).__name__, 0) + 1

    def inside(self, buf, address, nbytes, what):
        lo, hi = buf.address, buf.address + buf.size
        if nbytes and not (lo <= address and address + nbytes <= hi):
            raise AssertionError(f"{what}: [{address:#x}, +{nbytes}) is outside the object "
                                 f"[{lo:#x}, {hi:#x})")

    def read_all(self, oid, size, ours_pickle):
        c = self.c
        ref = c.pin(oid)  # the object's bounds; held while the reads run
        for kind in KINDS:
            try:
                v = c.get(oid, kind=kind)
            except Exception as e:  # any refusal is fine; a crash or an ASan report is not
                self.refused(e)
                continue
            if isinstance(v, np.ndarray):
                if v.size:
                    lo, hi = _byte_bounds(v)
                    self.inside(ref, lo, hi - lo, f"get kind={kind}")
                    v.tobytes()  # reads every element
            elif isinstance(v, memoryview):
                self.inside(ref, _mv_address(v), v.nbytes, f"get kind={kind}")
                v.tobytes()
            elif torch is not None and isinstance(v, torch.Tensor):
                n = v.numel() * v.element_size()
                self.inside(ref, v.data_ptr(), n, f"get kind={kind}")
                v.clone()
            elif isinstance(v, bytes) and len(v) != size:
                raise AssertionError(f"get kind=bytes gave {len(v)} of {size} bytes")
            del v
        if torch is not None:
            try:
                b = c.pin(oid)
                t = torch.from_dlpack(b)
            except Exception as e:
                self.refused(e)
            else:
                self.inside(ref, t.data_ptr(), t.numel() * t.element_size(), "pin DLPack")
                t.clone()
                del t
                b.release()
        if ours_pickle:
            try:
                got = c.get_object(oid)
                del got
            except Exception as e:
                self.refused(e)
        ref.release()


def _byte_bounds(a):
    f = getattr(getattr(np.lib, "array_utils", None), "byte_bounds", None)
    return (f or np.byte_bounds)(a)


def _mv_address(mv):
    if mv.nbytes == 0:
        return 0
    return np.frombuffer(mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv,
                         dtype=np.uint8).ctypes.data


def native_case(rng, c, oid, reader):
    """_set_layout and _dlpack_export called straight with fuzzed layouts."""
    b = c.pin(oid)
    cap = t = None
    try:
        b._set_layout(rng.randrange(0, 6), pick(rng, [8, 16, 32, 64, 128, 7, 0, 256]),
                      pick(rng, [1, 1, 1, 2, 4, 0, 70000]), shape(rng) or [])
        cap = b.__dlpack__()
        if torch is not None:
            t = torch.from_dlpack(cap)
            reader.inside(b, t.data_ptr(), t.numel() * t.element_size(), "_set_layout")
            t.clone()
    except Exception as e:
        reader.refused(e)
    cap = t = None
    n = rng.randrange(0, 4)
    shp = tuple(extent(rng) if rng.random() < 0.3 else rng.randrange(0, 5) for _ in range(n))
    strides = tuple(pick(rng, [0, 1, 2, -1, 2**62, -(2**62), 2**63 - 1, 3]) for _ in range(n))
    try:
        lo, hi = b.address, b.address + b.size
        cap = _objstore._dlpack_export(b, lo + rng.randrange(0, b.size + 1), lo, hi, shp,
                                       strides if rng.random() < 0.8 else None, 1, 8, 1)
        if torch is not None:
            t = torch.from_dlpack(cap)
            t.clone()  # every element read: ASan stops a read outside [lo, hi)
    except Exception as e:
        reader.refused(e)
    cap = t = None
    gc.collect()
    b.release()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1500, help="cases (default 1500)")
    ap.add_argument("-s", type=int, default=1, help="seed (default 1)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # torch's notes on read-only arrays and complex32
    rng = random.Random(args.s)
    srv = ObjstoreServer(memory="64mb", name="fuzzpy")
    srv.start()
    rc = srv.client()
    c = objstore.connect("127.0.0.1", srv.port)
    reader = Reader(c, rc)
    try:
        for i in range(args.n):
            oid = f"fz:{args.s}:{i}".encode()
            ours = rng.random() < 0.3
            data, meta = pickle_case(rng) if ours else layout_case(rng)
            rc.execute_command("OBJ.PUT", oid, data, "META", meta)
            try:
                reader.read_all(oid, len(data), ours)
                if len(data) and rng.random() < 0.3:
                    native_case(rng, c, oid, reader)
            except AssertionError as e:
                print(f"case {i} (seed {args.s}): {e}\n  meta {meta[:300]!r}", flush=True)
                return 1
            gc.collect()
            pins = dict(zip(*[iter(rc.execute_command("OBJ.INFO", oid))] * 2))[b"pins"]
            if int(pins) != 0:
                print(f"case {i} (seed {args.s}): {pins} pins left\n  meta {meta[:300]!r}")
                return 1
            rc.execute_command("OBJ.DEL", oid)
    finally:
        c.close()
        rc.close()
        finish([srv])
    refusals = ", ".join(f"{k} {v}" for k, v in sorted(reader.errors.items()))
    print(f"fuzz_pymeta: {args.n} cases, seed {args.s}; refusals: {refusals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
