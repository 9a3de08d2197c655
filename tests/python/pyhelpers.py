"""Helpers of the Python package's suite: what the kernel says about this process's
memory (/proc/self/maps, /proc/self/status) and what the node says about pins."""

import gc
import os
import time


def arena_ranges(arena_path, pid="self"):
    """The [start, end) address ranges at which process pid maps the arena file."""
    out = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip() == arena_path:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi))
    return out


def in_arena(arena_path, address, size=1, pid="self"):
    """Whether [address, address + size) lies inside one mapping of the arena file."""
    return any(lo <= address and address + size <= hi for lo, hi in arena_ranges(arena_path, pid))


def status_kb(field):
    """A field of /proc/self/status in KiB (VmRSS, RssAnon, RssShmem, VmPTE)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def info(rc, oid):
    raw = rc.obj("OBJ.INFO", oid)
    return {k.decode(): v for k, v in zip(raw[::2], raw[1::2])}


def pins(rc, oid):
    """OBJ.INFO pins of oid, asked through a raw redis-py connection."""
    return int(info(rc, oid)["pins"])


def wait_for(pred, what, limit=60.0):
    """Poll pred (collecting garbage in between) until it holds; fail with `what`.
    limit bounds a hang (never under 60 s: a loaded machine is slow, not wrong)."""
    deadline = time.monotonic() + max(limit, 60.0)
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        gc.collect()
        time.sleep(0.02)


def arena_path(rc):
    raw = rc.obj("OBJ.STATS")
    d = {k.decode(): v for k, v in zip(raw[::2], raw[1::2])}
    return os.fsdecode(d["arena_path"])
