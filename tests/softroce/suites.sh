#!/bin/bash
# suites.sh - every Soft-RoCE suite CI runs, in one boot of the guest (or
# natively on a host with an RDMA device): the harness self-test, the RDMA
# transfer suite plain and with the ASan/UBSan module, the RDMA stream
# endpoint, the door (plain and ASan/UBSan), the client library with the
# patched redis-benchmark and redis-cli, and the Valkey RDMA interop. Run it
# through the harness after building on the host (make test-softroce does):
#
#   tests/softroce/run.sh tests/softroce/suites.sh [SUITE...]
#
# SUITE names pick suites (default all; names as in the table below). Every
# suite runs even if an earlier one failed; each prints one line
# "SUITE PASS|FAIL NAME (N s)", also appended to the file OBJ_SUITES_RESULTS
# names (in the shared checkout, so the host reads it). OBJ_SAN_LIB names the
# libasan the ASan/UBSan suites preload into redis-server (the guest sees the
# host's root). Exits 0 when every suite passed, 1 otherwise.
set -u
cd "$(dirname "$0")/../.." || exit 1
repo=$PWD
only=" $* "
failed=0

# suite NAME COMMAND...: run COMMAND when NAME is wanted, print and record
# its verdict and time. Can't fail.
suite() {
    local name=$1 start=$SECONDS verdict
    shift
    case "$only" in "  " | *" $name "*) ;; *) return 0 ;; esac
    echo "===== suite $name"
    if "$@"; then verdict=PASS; else verdict=FAIL; failed=1; fi
    echo "SUITE $verdict $name ($((SECONDS - start)) s)"
    if [ -n "${OBJ_SUITES_RESULTS:-}" ]; then
        echo "$verdict $name ($((SECONDS - start)) s)" >>"$OBJ_SUITES_RESULTS"
    fi
}

# The transfer suite's bound on a hang (run-in-guest.sh; 600 s alone): an emulated
# guest beside the rest of CI takes that long for a whole, healthy run.
export OBJ_RDMA_SUITE_TIMEOUT=${OBJ_RDMA_SUITE_TIMEOUT:-1800}

# The ASan/UBSan module, with its runtime preloaded into redis-server.
san=(env OBJSTORE_BUILD="$repo/build/san-address" OBJSTORE_PRELOAD="${OBJ_SAN_LIB:-}"
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1)

# The plain suites first, then the ASan/UBSan ones (their servers hold more memory;
# run after them, the Valkey interop once failed to create a queue pair).
suite selftest tests/softroce/selftest.sh
suite rdma tests/rdma/run-in-guest.sh
suite stream tests/rdma/stream/run-in-guest.sh
suite door tests/rdma/door/run-in-guest.sh
suite client tests/rdma/client/run-in-guest.sh
suite valkey tests/rdma/valkey/run-in-guest.sh
# The transfer suite with the ASan/UBSan module (its hostile-peer tests above all).
suite rdma-asan "${san[@]}" tests/rdma/run-in-guest.sh
# The door with the ASan/UBSan module: the connection type frees clients from
# inside their handlers and lets streams linger after Redis closes.
suite door-asan "${san[@]}" tests/rdma/door/run-in-guest.sh
exit "$failed"
