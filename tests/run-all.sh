#!/bin/sh
# run-all.sh - the whole test suite, as `make test` and CI run it:
#   1. build (normal) and lint
#   2. unit tests (C, cmocka)
#   3. server tests against a real redis-server (pytest, tests/server), the
#      obj-benchmark smoke test and the Python client (tests/python)
#   4. the same unit + server suites under ASan/UBSan (build/san-address/), and the
#      Python package's extension under ASan/UBSan with its metadata fuzzer
#   5. the chaos test (nodes in network namespaces under random faults), plain
#      and with the ASan/UBSan module, then the fuzz drivers (wire frames, stream reassembly and its checksum, the RDMA
#      stream's control messages and offsets)
#      and the Debian packages (tests/packaging/run.sh)
#   6. the Soft-RoCE harness self-test, the RDMA transfer suite (plain and
#      with the ASan/UBSan module) and the Redis-protocol-over-RDMA suites
#      (QEMU guest with rdma_rxe, or natively on a host with an RDMA device),
#      the door's suite again with the ASan/UBSan module
# Every step runs even if an earlier one failed; the summary lists each
# step's result and the exit status is non-zero if any step failed.
set -u
cd "$(dirname "$0")/.." || exit 1
JOBS=${JOBS:-$(nproc)}
# Every pytest step names its slowest ten tests, so a slowdown is seen when it lands.
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} --durations=10"
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

step "build" make -j"$JOBS" all test-programs
step "lint" make lint
step "unit" make -j"$JOBS" test-unit
step "server" make test-server PYTEST_ARGS="tests/server --ignore=tests/server/test_benchmark_smoke.py"
step "benchmark smoke" make test-server PYTEST_ARGS="tests/server/test_benchmark_smoke.py"
step "python client" make test-python

# The sanitizer build lives in build/san-address/; OBJSTORE_BUILD (set by make
# SAN=address test-server) makes the launcher load that module and run that
# build's test programs, with libasan preloaded into redis-server.
SAN_LIB=$(cc -print-file-name=libasan.so)
step "build (ASan/UBSan)" make -j"$JOBS" SAN=address all test-programs
step "unit (ASan/UBSan)" make -j"$JOBS" SAN=address test-unit
step "server (ASan/UBSan)" env OBJSTORE_PRELOAD="$SAN_LIB" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    make SAN=address test-server PYTEST_ARGS="tests/server --ignore=tests/server/test_benchmark_smoke.py"
step "python client (ASan/UBSan module)" env OBJSTORE_PRELOAD="$SAN_LIB" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    make SAN=address test-python
# The package's extension itself under ASan/UBSan (a second venv, libasan preloaded into
# Python): the tests of what a writer controls and the metadata fuzzer (Makefile).
step "python extension (ASan/UBSan) and metadata fuzzer" make test-python-san

# CI replays two seeds (faults and operations follow the seed; timing still
# varies); bench/chaos.sh runs fresh seeds for 30 minutes.
step "chaos (network namespaces)" env CHAOS_SEED=${CHAOS_SEED:-808} make test-chaos
step "chaos (ASan/UBSan)" env CHAOS_SEED=${CHAOS_SEED:-909} OBJSTORE_PRELOAD="$SAN_LIB" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    make SAN=address test-chaos CHAOS_SECONDS=180
step "fuzz (wire frames, stream reassembly, RDMA stream control messages)" make test-fuzz
# The Debian packages as an operator meets them: built, lintian, installed with dpkg,
# the node run from them as the redis user in the unit's sandbox with and without the
# drop-in, readers/writers/remote clients, upgrade, purge, make run beside a Redis on
# 6379 (tests/packaging/run.sh; purges what it installed, also on failure).
step "packaging (make deb, dpkg -i, the service, readers and writers, purge)" make test-packaging
# The other servers users run (the README's Supported servers): Redis 8.0.2 and
# Valkey 8.1.1 from Debian 13's source packages, built once into a cache outside
# the checkout; the whole server suite with the module loaded into each; Redis's
# own test suite with the module loaded. docs/testing.md#other-servers.
SERVERS=${SERVERS_CACHE:-/var/cache/objstore/servers}
step "servers (Redis 8.0.2, Valkey 8.1.1)" make servers
step "server on Valkey 8.1.1" env OBJSTORE_SERVER="$SERVERS/valkey-8.1.1/bin/valkey-server" \
    make test-server PYTEST_ARGS="tests/server --ignore=tests/server/test_benchmark_smoke.py"
step "server on Redis 8.0.2" env OBJSTORE_SERVER="$SERVERS/redis-8.0.2/bin/redis-server" \
    make test-server PYTEST_ARGS="tests/server --ignore=tests/server/test_benchmark_smoke.py"
step "redis's own test suite with the module" make test-redis-suite
step "softroce harness" tests/softroce/run.sh tests/softroce/selftest.sh
step "rdma (Soft-RoCE guest or device)" make test-rdma
# The transfer suite again with the ASan/UBSan module (its hostile-peer tests
# above all): the guest sees the host's libasan through its read-only share.
step "rdma (ASan/UBSan, Soft-RoCE guest or device)" env OBJSTORE_BUILD="$PWD/build/san-address" \
    OBJSTORE_PRELOAD="$SAN_LIB" OBJ_VM_ENV="ASAN_OPTIONS UBSAN_OPTIONS" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    tests/softroce/run.sh tests/rdma/run-in-guest.sh
step "resp over rdma (Soft-RoCE guest or device)" make test-rdma-resp
# The door's suite with the ASan/UBSan module: the connection type frees
# clients from inside their handlers and lets streams linger after Redis closes.
step "rdma door (ASan/UBSan, Soft-RoCE guest or device)" env OBJSTORE_BUILD="$PWD/build/san-address" \
    OBJSTORE_PRELOAD="$SAN_LIB" OBJ_VM_ENV="ASAN_OPTIONS UBSAN_OPTIONS" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    tests/softroce/run.sh tests/rdma/door/run-in-guest.sh

echo "===== summary$RESULTS"
[ "$FAILED" = 0 ] && echo "ALL PASSED" || echo "SOME STEPS FAILED"
exit "$FAILED"
