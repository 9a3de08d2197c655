#!/bin/sh
# rdma-in-guest.sh - the Python package over RDMA (Redis protocol over RDMA to the
# node's RDMA door (objstore-rdma.so), through the C library's connection): connect with a URL,
# zero-copy put/get and pins on the node's own machine, remote mode over the same
# transport. Needs an RDMA device; run it wherever one is:
#
#   make python && tests/softroce/run.sh tests/python/rdma-in-guest.sh
#
# (a Soft-RoCE guest when the host has none; the guest compiles nothing). Exits 0
# only if the Python checks passed.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd -P)
cd "$repo" || exit 1
A=${OBJ_RXE_ADDR:?OBJ_RXE_ADDR must name the RDMA address (tests/softroce/run.sh sets it)}
A=${A%%/*}
NODES_WORK=${OBJSTORE_BUILD:-$repo/build}/tests/python/rdma
NODES_START_TIMEOUT=60
# shellcheck source=tests/lib/nodes.sh
. tests/lib/nodes.sh
nodesInit || exit 1
trap nodesStopAll EXIT
nodeStart py 6395 --protected-mode no -- memory 64mb transfer-bind "$A" cluster-secret guest \
    rdma-port 26395 --door bind "$A" port 16395
nodeWait py "" || exit 1
timeout 900 build/python-venv/bin/python - "$A" 16395 <<'PY'
import sys
import numpy as np
import objstore

addr, port = sys.argv[1], int(sys.argv[2])
with objstore.connect(f"rdma://{addr}:{port}") as c:
    assert c.zero_copy, "the node is on this machine: the arena is mapped"
    c.put("rdma:a", np.arange(1000, dtype=np.float32))
    a = c.get("rdma:a")
    assert float(a.sum()) == float(np.arange(1000, dtype=np.float32).sum())
    assert c.info("rdma:a")["pins"] == 1
    del a
    assert c.info("rdma:a")["pins"] == 0
    with c.create("rdma:c", 8) as mv:
        mv[:] = b"rdma-ok!"
    assert bytes(c.get("rdma:c")) == b"rdma-ok!"
    c.put_object("rdma:o", {"w": np.ones(16)})
    assert c.get_object("rdma:o")["w"].sum() == 16
with objstore.connect(addr, port, transport="rdma", zero_copy=False) as r:
    assert not r.zero_copy
    assert r.get("rdma:a")[999] == 999
print("python over rdma: PASS")
PY
