#!/bin/bash
# run-in-guest.sh - run the RDMA pytest suite (tests/rdma) where an RDMA device
# exists. It is the command tests/softroce/run.sh runs, inside the Soft-RoCE
# guest or natively:
#
#   make all && tests/softroce/run.sh tests/rdma/run-in-guest.sh
#
# The build happens before, on the host; this script only runs pytest from the
# repository root, bounded by OBJ_RDMA_SUITE_TIMEOUT seconds (default 600).
# Extra arguments go to pytest (e.g. -k bgsave, -x). Exit status: pytest's, 124
# on the time bound. Without OBJ_RXE_ADDR or an RDMA device the suite exits 1
# with a banner saying why (tests/rdma/conftest.py).
set -eu
cd "$(dirname "$0")/../.."
limit=${OBJ_RDMA_SUITE_TIMEOUT:-600}
echo "rdma suite: device ${OBJ_RXE_DEV:-?}, address ${OBJ_RXE_ADDR:-unset}," \
    "ulimit -l $(ulimit -l 2>/dev/null || echo ?)"
exec timeout -k 10 "$limit" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/rdma "$@"
