#!/bin/sh
# run-all.sh - the whole test suite, as `make test` and CI run it:
#   1. build (normal) and lint
#   2. unit tests (C, cmocka)
#   3. integration tests against a real redis-server (pytest)
#   4. the same unit + integration suites under ASan/UBSan
#   5. the wire decoder's fuzz driver
#   6. the Soft-RoCE harness self-test, the RDMA transfer suite and the
#      Redis-protocol-over-RDMA suites (QEMU guest with rdma_rxe, or natively
#      on a host with an RDMA device)
# Every step runs even if an earlier one failed; the summary lists each
# step's result and the exit status is non-zero if any step failed.
set -u
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
RESULTS=""
FAILED=0

step() { # step NAME COMMAND...
    name=$1; shift
    echo "===== $name"
    start=$(date +%s)
    if "$@"; then r=PASS; else r=FAIL; FAILED=1; fi
    RESULTS="$RESULTS
  $r  $name ($(( $(date +%s) - start )) s)"
}

step "build" make -j"$JOBS" all
step "lint" make lint
step "unit" make -j"$JOBS" test-unit
step "integration" make test-integration
step "benchmark smoke" sh -c 'make bench-tools && /usr/bin/python3 -m pytest -q tests/bench'

SAN_LIB=$(cc -print-file-name=libasan.so)
step "build (ASan/UBSan)" make -j"$JOBS" SAN=address build/san-address/objstore.so
step "unit (ASan/UBSan)" make -j"$JOBS" SAN=address test-unit
step "integration (ASan/UBSan)" env OBJSTORE_PRELOAD="$SAN_LIB" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    OBJSTORE_MODULE="$PWD/build/san-address/objstore.so" \
    /usr/bin/python3 -m pytest -q tests/server

step "fuzz (wire decoder)" make test-fuzz
step "softroce harness" tests/softroce/run.sh tests/softroce/selftest.sh
step "rdma (Soft-RoCE guest or device)" make test-rdma
step "resp over rdma (Soft-RoCE guest or device)" make test-rdma-resp

echo "===== summary$RESULTS"
[ "$FAILED" = 0 ] && echo "ALL PASSED" || echo "SOME STEPS FAILED"
exit "$FAILED"
