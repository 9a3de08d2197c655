#!/bin/bash
# run-in-guest.sh - the stream endpoint's own suite (stream_test.c) where an
# RDMA device exists: inside the Soft-RoCE guest or natively.
#
#   make test-programs && tests/softroce/run.sh tests/rdma/stream/run-in-guest.sh [-k CASE]
#
# Needs OBJ_RXE_ADDR (the device's IPv4 address; the guest harness sets it).
# Exit status: the test program's (0 when every case passed), 1 without an
# address, 124 on the time bound.
set -eu
cd "$(dirname "$0")/../../.."
[ -n "${OBJ_RXE_ADDR:-}" ] || { echo "STREAM SUITE CANNOT RUN: OBJ_RXE_ADDR is not set" >&2; exit 1; }
echo "stream suite: device ${OBJ_RXE_DEV:-?}, address $OBJ_RXE_ADDR"
exec timeout -k 5 "${OBJ_STREAM_SUITE_TIMEOUT:-300}" "${OBJSTORE_BUILD:-build}/tests/rdma/stream_test" \
    -a "$OBJ_RXE_ADDR" "$@"
