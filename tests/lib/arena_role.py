#!/usr/bin/python3
"""What one local client of a node can do with its arena, through the C library.

Run as the user under test (setpriv), it prints one word and exits 0 when the
client behaves as its role says, 1 with the reason otherwise:

  arena_role.py LIB HOST PORT reader ID  the object ID (put by someone else, bytes
      b"objstore-reader-check") is pinned zero-copy, the arena is mapped
      read-only: creating is refused (READONLY) and a write through the view
      faults (SIGSEGV in a forked child)
  arena_role.py LIB HOST PORT writer ID  creates ID in place, writes, seals, and
      pins it back zero-copy
  arena_role.py LIB HOST PORT remote ID  cannot map the arena (OBJ_ERR_MAP) but
      reads ID with the copying get and puts with the copying put

LIB is the libobjstore.so to load (the build's or the installed one). Used by
tests/server/test_readers.py and tests/packaging/run.sh.
"""

import ctypes
import os
import signal
import sys

PAYLOAD = b"objstore-reader-check"
OBJ_ERR_MAP = 2  # the position of OBJ_ERR_MAP in ObjErr (client/objstore.h)


class ObjBuffer(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t),
                ("meta", ctypes.c_void_p), ("metaSize", ctypes.c_size_t)]


def load(path):
    lib = ctypes.CDLL(path)
    lib.objClientConnect.restype = ctypes.c_void_p
    lib.objClientConnect.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.objClientErrMsg.restype = ctypes.c_char_p
    lib.objClientErrMsg.argtypes = [ctypes.c_void_p]
    lib.objClientErrCode.argtypes = [ctypes.c_void_p]
    lib.objClientPin.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                 ctypes.c_longlong, ctypes.POINTER(ObjBuffer)]
    lib.objClientCreate.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                    ctypes.POINTER(ctypes.c_void_p)]
    lib.objClientSeal.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.objClientGet.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                 ctypes.c_longlong, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(ctypes.c_size_t)]
    lib.objClientPut.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                 ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p,
                                 ctypes.c_size_t]
    return lib


def fail(why):
    print(f"FAIL {why}")
    sys.exit(1)


def err(lib, c):
    return lib.objClientErrMsg(c).decode(errors="replace")


def write_faults(addr):
    """Whether writing one byte at addr kills a forked child with SIGSEGV/SIGBUS."""
    pid = os.fork()
    if pid == 0:
        ctypes.memset(addr, 0x58, 1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGSEGV, signal.SIGBUS)


def reader(lib, c, oid):
    buf = ObjBuffer()
    if lib.objClientPin(c, oid, len(oid), 0, ctypes.byref(buf)) != 0:
        fail(f"pin: {err(lib, c)}")
    if ctypes.string_at(buf.data, buf.size) != PAYLOAD:
        fail("the pinned view does not hold the object's bytes")
    data = ctypes.c_void_p()
    if lib.objClientCreate(c, b"reader-new", 10, 8, None, 0, ctypes.byref(data)) == 0:
        fail("a reader created an object in place")
    if not err(lib, c).startswith("READONLY"):
        fail(f"create refused, but not with READONLY: {err(lib, c)}")
    if not write_faults(buf.data):
        fail("a write through the reader's view did not fault")
    if ctypes.string_at(buf.data, buf.size) != PAYLOAD:
        fail("the object changed under the reader")
    print("reader-ok")


def writer(lib, c, oid):
    data = ctypes.c_void_p()
    if lib.objClientCreate(c, oid, len(oid), len(PAYLOAD), None, 0, ctypes.byref(data)) != 0:
        fail(f"create: {err(lib, c)}")
    ctypes.memmove(data, PAYLOAD, len(PAYLOAD))
    if lib.objClientSeal(c, oid, len(oid)) != 0:
        fail(f"seal: {err(lib, c)}")
    buf = ObjBuffer()
    if lib.objClientPin(c, oid, len(oid), 0, ctypes.byref(buf)) != 0:
        fail(f"pin: {err(lib, c)}")
    if ctypes.string_at(buf.data, buf.size) != PAYLOAD:
        fail("the pinned view does not hold the bytes written")
    print("writer-ok")


def remote(lib, c, oid):
    buf = ObjBuffer()
    if lib.objClientPin(c, oid, len(oid), 0, ctypes.byref(buf)) == 0:
        fail("a client in neither group mapped the arena")
    if lib.objClientErrCode(c) != OBJ_ERR_MAP:
        fail(f"pin failed, but not with OBJ_ERR_MAP: {err(lib, c)}")
    data, size = ctypes.c_void_p(), ctypes.c_size_t()
    if lib.objClientGet(c, oid, len(oid), 0, ctypes.byref(data), ctypes.byref(size)) != 0:
        fail(f"copying get: {err(lib, c)}")
    if ctypes.string_at(data, size.value) != PAYLOAD:
        fail("the copying get answered other bytes")
    if lib.objClientPut(c, b"remote-put", 10, PAYLOAD, len(PAYLOAD), None, 0) != 0:
        fail(f"copying put: {err(lib, c)}")
    print("remote-ok")


def main():
    if len(sys.argv) != 6 or sys.argv[4] not in ("reader", "writer", "remote"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    lib = load(sys.argv[1])
    c = lib.objClientConnect(sys.argv[2].encode(), int(sys.argv[3]))
    if lib.objClientErrCode(c) != 0:
        fail(f"connect: {err(lib, c)}")
    globals()[sys.argv[4]](lib, c, sys.argv[5].encode())


if __name__ == "__main__":
    main()
