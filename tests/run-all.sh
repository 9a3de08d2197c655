#!/bin/bash
# run-all.sh - CI's gate, as `make test` and .ci/run run it; `make test-full`
# (FULL=1) runs every suite at full length instead. docs/testing.md#ci.
#   1. build (normal and ASan/UBSan, once; every later step reuses them), lint,
#      unit tests (C, cmocka) plain and under ASan/UBSan
#   2. then seven lanes side by side (docs/testing.md#ci):
#      - server: the server suite (tests/server) on the installed Redis over
#        pytest-xdist workers, then the obj-benchmark smoke test
#      - python: the Python client (tests/python) plain and with the ASan/UBSan
#        module, over the workers, then the Python extension itself under
#        ASan/UBSan with its metadata fuzzer
#      - other-servers: the server suite's module-API-and-memory list
#        (tests/server/module-api.list) under ASan/UBSan, on Valkey 8.1.1 and on
#        Redis 8.0.2 (the whole suite with FULL=1)
#      - redis-suite: Redis's own test suite with the module (and without it,
#        its baseline, with FULL=1)
#      - chaos: the chaos test plain and with the ASan/UBSan module, then the
#        fuzz drivers
#      - packaging: the Debian packages (tests/packaging/run.sh)
#      - softroce: the Soft-RoCE suites, plain and ASan/UBSan, in one guest boot
#        (tests/softroce/suites.sh), one summary line per suite
# Every step runs even if an earlier one failed; the summary lists each step's
# result and time, the slowest ten tests of every pytest step are printed
# (--durations=10) and of the whole run at the end, and the exit status is
# non-zero if any step failed.
#
# Adding a step: `step "name" command...` runs it now, in the foreground (the
# old style; still fine anywhere). To run it beside others, put it in a lane:
# a function of steps, started by `lane NAME FUNCTION` and awaited by `join`.
set -u
cd "$(dirname "$0")/.." || exit 1
JOBS=${JOBS:-$(nproc)}
FULL=${FULL:-0}
CI_DIR=$PWD/build/ci
rm -rf "$CI_DIR"
mkdir -p "$CI_DIR/results" "$CI_DIR/lanes" || exit 1
# The slowest ten tests of every pytest step (lint's included).
export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} --durations=10"
T0=$(date +%s)

# childCpu VAR: set VAR to the CPU seconds (user + system) this shell's
# waited-for children have used so far. `times` must run in this very shell (a
# command substitution would be a new process with no children yet), so it
# writes to a file. CI is CPU-bound on two cores: a step's CPU, not its wall
# time, is what it takes from the other lanes.
childCpu() {
    local f=$CI_DIR/times.$BASHPID
    times >"$f"
    printf -v "$1" '%s' "$(awk 'NR == 2 {
        split($1, u, /[ms]/); split($2, s, /[ms]/)
        printf "%d", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$f")"
    rm -f "$f"
}

# step NAME COMMAND...: run COMMAND, record PASS/FAIL with its wall time and CPU
# time in build/ci/results (keyed by start time, so the summary keeps the order
# steps started in, lanes included). Returns COMMAND's success.
step() {
    local name=$1 start key r cpu0 cpu1
    shift
    echo "===== $name"
    start=$(date +%s)
    key=$(date +%s%N)
    childCpu cpu0
    if "$@"; then r=PASS; else r=FAIL; fi
    childCpu cpu1
    echo "  $r  $name ($(($(date +%s) - start)) s, cpu $((cpu1 - cpu0)) s, at +$((start - T0)) s)" \
        >"$CI_DIR/results/$key"
    [ "$r" = PASS ]
}

# lane NAME FUNCTION: run FUNCTION (a sequence of steps) in the background,
# its output in build/ci/lanes/NAME.log until `join` prints it.
LANES=""
lane() {
    ("$2" >"$CI_DIR/lanes/$1.log" 2>&1) &
    LANES="$LANES $1:$!"
    echo "===== lane $1 started (pid $!)"
}

# join: wait for every lane, then print each lane's output in turn.
join() {
    local l
    for l in $LANES; do
        wait "${l#*:}"
    done
    for l in $LANES; do
        echo "===== lane ${l%%:*} output"
        cat "$CI_DIR/lanes/${l%%:*}.log"
    done
    LANES=""
}

# The sanitizer build lives in build/san-address/; OBJSTORE_BUILD (set by make
# SAN=address test-server) makes the launcher load that module and run that
# build's test programs, with libasan preloaded into redis-server.
SAN_LIB=$(cc -print-file-name=libasan.so)
SAN_ENV="OBJSTORE_PRELOAD=$SAN_LIB ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
    UBSAN_OPTIONS=print_stacktrace=1"
# The other servers users run (the README's Supported servers): Redis 8.0.2 and
# Valkey 8.1.1 from Debian 13's source packages, built once into a cache outside
# the checkout. docs/testing.md#other-servers.
SERVERS=${SERVERS_CACHE:-/var/cache/objstore/servers}
SERVER_ALL="tests/server --ignore=tests/server/test_benchmark_smoke.py"
# Under ASan/UBSan and on the other servers the gate runs the tests that
# exercise the module API and memory (the list and why: docs/testing.md#ci).
SERVER_API=$(sed -e 's/#.*//' -e '/^ *$/d' -e 's|^|tests/server/|' tests/server/module-api.list |
    tr '\n' ' ')
[ "$FULL" = 1 ] && SERVER_API=$SERVER_ALL
# The plain suite is spread over workers (one module's tests stay together,
# its module-scoped nodes with them): they wait on the servers, not the CPU.
XDIST="-n ${SERVER_WORKERS:-4} --dist loadfile"

# ---- 1. builds, lint, unit tests (CPU-bound: one after another) ----
step "build" make -j"$JOBS" all test-programs
step "build (ASan/UBSan)" make -j"$JOBS" SAN=address all test-programs
step "servers (Redis 8.0.2, Valkey 8.1.1)" make servers
step "build (Python package, Soft-RoCE programs)" make -j"$JOBS" python softroce-programs
step "lint" make lint
step "unit" make -j"$JOBS" test-unit
step "unit (ASan/UBSan)" make -j"$JOBS" SAN=address test-unit

# ---- 2. the suites, side by side ----
serverLane() {
    step "server" make test-server PYTEST_ARGS="$XDIST $SERVER_ALL"
    step "benchmark smoke" make test-server PYTEST_ARGS="tests/server/test_benchmark_smoke.py"
}
# The Python package's suite over the workers too (its nodes, like the server
# suite's, take free ports and directories of their own).
pythonLane() {
    step "python client" make test-python PYTHON_PYTEST_ARGS="$XDIST tests/python"
    # shellcheck disable=SC2086
    step "python client (ASan/UBSan module)" env $SAN_ENV make SAN=address test-python \
        PYTHON_PYTEST_ARGS="$XDIST tests/python"
    # The package's extension itself under ASan/UBSan (a second venv, libasan preloaded
    # into Python): the tests of what a writer controls and the metadata fuzzer (Makefile).
    step "python extension (ASan/UBSan) and metadata fuzzer" make test-python-san
}
otherServersLane() {
    # shellcheck disable=SC2086
    step "server (ASan/UBSan)" env $SAN_ENV make SAN=address test-server PYTEST_ARGS="$XDIST $SERVER_API"
    step "server on Valkey 8.1.1" env OBJSTORE_SERVER="$SERVERS/valkey-8.1.1/bin/valkey-server" \
        make test-server PYTEST_ARGS="$XDIST $SERVER_API"
    step "server on Redis 8.0.2" env OBJSTORE_SERVER="$SERVERS/redis-8.0.2/bin/redis-server" \
        make test-server PYTEST_ARGS="$XDIST $SERVER_API"
}
# Redis's own suite with the module loaded; its baseline without the module (which
# tells the environment's failures from the module's and runs none of our code)
# only with FULL=1 (tests/redis-suite/run.sh plain runs it alone).
redisSuiteLane() {
    if [ "$FULL" = 1 ]; then
        step "redis's own test suite, without and with the module" tests/redis-suite/run.sh both
    else
        step "redis's own test suite with the module" tests/redis-suite/run.sh module
    fi
}
# CI replays two seeds (faults and operations follow the seed; timing still
# varies); bench/chaos.sh runs fresh seeds for 30 minutes.
chaosLane() {
    step "chaos (network namespaces)" env CHAOS_SEED=${CHAOS_SEED:-808} make test-chaos
    # shellcheck disable=SC2086
    step "chaos (ASan/UBSan)" env CHAOS_SEED=${CHAOS_SEED:-909} $SAN_ENV \
        make SAN=address test-chaos CHAOS_SECONDS=180
    step "fuzz (wire frames, stream reassembly, RDMA stream control messages)" make test-fuzz
}
# The Debian packages as an operator meets them: built, lintian, installed with dpkg,
# the node run from them as the redis user in the unit's sandbox with and without the
# drop-in, readers/writers/remote clients, upgrade, purge, make run beside a Redis on
# 6379 (tests/packaging/run.sh; purges what it installed, also on failure).
packagingLane() {
    step "packaging (make deb, dpkg -i, the service, readers and writers, purge)" make test-packaging
}
# softroceLane: every Soft-RoCE suite (tests/softroce/suites.sh), plain and with the
# ASan/UBSan module, in one boot of the guest; each suite's verdict becomes a line of
# the summary (as "softroce: SUITE"). The guest is CI's critical path and its
# largest user of the CPU. Two guests (plain, ASan/UBSan) side by side beside the
# host lanes took 19 minutes and twice the CPU of their suites alone (likely: an
# emulated CPU descheduled while it holds a guest lock leaves its sibling
# spinning), so there is one guest, at a higher priority (nice -10; without the
# privilege nice says so and it runs as it is) and with 6 GiB, as every suite's
# servers share it. docs/testing.md#ci.
softroceLane() {
    local f=$CI_DIR/softroce.txt line
    : >"$f"
    step "softroce suites (one guest boot or device)" nice -n -10 env OBJ_SUITES_RESULTS="$f" \
        OBJ_SAN_LIB="$SAN_LIB" OBJ_VM_TIMEOUT=${OBJ_VM_TIMEOUT:-3600} OBJ_VM_MEM=${OBJ_VM_MEM:-6144} \
        OBJ_VM_ENV=PYTEST_ADDOPTS \
        tests/softroce/run.sh tests/softroce/suites.sh
    while read -r line; do
        echo "    ${line%% *}  softroce: ${line#* }" >"$CI_DIR/results/$(date +%s%N)"
    done <"$f"
}
lane softroce softroceLane
lane chaos chaosLane
lane server serverLane
lane python pythonLane
lane other-servers otherServersLane
lane redis-suite redisSuiteLane
lane packaging packagingLane
join

# The slowest ten tests of the whole run, from the lanes' --durations lists.
echo "===== slowest ten tests (all lanes)"
cat "$CI_DIR"/lanes/*.log | grep -E '^[0-9.]+s (call|setup|teardown) ' | sort -rn | head -n 10
echo "===== summary (wall time $(($(date +%s) - T0)) s)"
cat "$CI_DIR"/results/*
if grep -q FAIL "$CI_DIR"/results/*; then
    echo "SOME STEPS FAILED"
    exit 1
fi
echo "ALL PASSED"
