#!/bin/sh
# run.sh - Redis's own test suite (a chosen set of its unit tests) in external
# mode against a server with the module loaded, to show that loading the
# module changes nothing for Redis's own clients. The node uses a directory
# Redis of its own (the suite's FLUSHALLs must not wipe the object directory).
# The same units run first against the same server without the module: a
# test that fails there is the environment's, not the module's.
#
#   tests/redis-suite/run.sh [module|plain|both]     (default both)
#
# Environment:
#   REDIS_SUITE_SRC   Redis source tree whose tests/ to run (default build/redis-src,
#                     the installed redis-server's version: its tests match it)
#   OBJSTORE_SERVER   the server (default /usr/bin/redis-server)
#   OBJSTORE_MODULE   the module (default build/objstore.so)
#   REDIS_SUITE_UNITS the units (default: the list below)
#   REDIS_SUITE_TAGS  extra runtest --tags (default -slow)
#   REDIS_SUITE_JOBS  units run at once (default 2), each against servers of its own
#   REDIS_SUITE_BASEPORT  runtest's first port (default 21111; worker w adds 1000 * (w - 1))
#
# Tests the module cannot pass by design are skipped (with the module only;
# the plain run runs them all); each is listed with its reason in
# tests/redis-suite/known-incompatible.txt. Both runs take about 2 minutes
# each on 2 shared cores (26 units, 1636 tests, Redis 7.0.15).
set -eu

MODE=${1:-both}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SRC=${REDIS_SUITE_SRC:-$REPO/build/redis-src}
SERVER=${OBJSTORE_SERVER:-/usr/bin/redis-server}
MODULE=${OBJSTORE_MODULE:-$REPO/build/objstore.so}
TAGS=${REDIS_SUITE_TAGS:--slow}
JOBS=${REDIS_SUITE_JOBS:-2}
BASEPORT=${REDIS_SUITE_BASEPORT:-21111}
BASE0=$BASEPORT
UNITS=${REDIS_SUITE_UNITS:-"type/string type/incr type/list type/list-2 type/list-3 type/hash
    type/set type/zset type/stream type/stream-cgroups multi pubsub pubsubshard scripting
    introspection introspection-2 info info-command acl acl-v2 auth protocol keyspace expire
    functions tracking"}
WORK=$REPO/build/redis-suite
KNOWN=$REPO/tests/redis-suite/known-incompatible.txt

say() { echo "redis-suite: $*" >&2; }
die() {
    say "$*"
    exit 1
}

[ -f "$SRC/tests/test_helper.tcl" ] || die "no Redis test suite in $SRC (make build/include/redismodule.h)"
[ -x "$SERVER" ] || die "no server at $SERVER"
[ -f "$MODULE" ] || die "module not built: $MODULE (run make)"
command -v tclsh8.6 >/dev/null || die "tclsh8.6 missing (apt-get install tcl)"

# The suite runs from a copy: it writes tests/tmp, and runs src/redis-cli and
# src/redis-benchmark, which are taken from beside the server.
rm -rf "$WORK" && mkdir -p "$WORK/src"
cp -R "$SRC/tests" "$SRC/runtest" "$WORK/"
bindir=$(dirname "$SERVER")
for p in cli benchmark server check-aof check-rdb; do
    for cand in "$bindir/redis-$p" "$bindir/valkey-$p" "/usr/bin/redis-$p"; do
        if [ -x "$cand" ]; then
            # A Valkey tree's suite runs src/valkey-*, Redis's src/redis-*.
            ln -s "$cand" "$WORK/src/redis-$p"
            ln -s "$cand" "$WORK/src/valkey-$p"
            break
        fi
    done
done
grep -v '^[[:space:]]*\(#\|$\)' "$KNOWN" >"$WORK/skipfile" || true

freePort() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
waitUp() {
    i=0
    until "$WORK/src/redis-cli" -p "$1" ping >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -lt 100 ] || return 1
        sleep 0.1
    done
}

PIDS=""
stopAll() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    for p in $PIDS; do wait "$p" 2>/dev/null || true; done
    PIDS=""
}
trap stopAll EXIT INT TERM

# startServers DIR WITH_MODULE: the server (with the module: and its directory
# Redis) on a free port, left in $port.
startServers() {
    port=$(freePort)
    margs=""
    if [ "$2" = yes ]; then
        dport=$(freePort)
        "$SERVER" --port "$dport" --bind 127.0.0.1 --save "" --appendonly no --dir "$1" \
            >>"$1/directory.log" 2>&1 &
        PIDS="$PIDS $!"
        waitUp "$dport" || die "the directory Redis did not start ($1/directory.log)"
        margs="--loadmodule $MODULE directory 127.0.0.1:$dport arena-dir $1 memory 64mb
            transfer-port $(freePort)"
    fi
    # What Redis's own CI gives the server it runs external tests against.
    # shellcheck disable=SC2086
    "$SERVER" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$1" \
        --enable-debug-command yes --enable-protected-configs yes --enable-module-command yes \
        $margs >>"$1/server.log" 2>&1 &
    PIDS="$PIDS $!"
    waitUp "$port" || die "the server did not start ($1/server.log)"
}

# runUnit DIR WITH_MODULE UNIT: one unit against fresh servers (units change
# configs, e.g. proto-max-bulk-len, that later units rely on). 0 when it passed
# and the server (and the module) still answer.
runUnit() {
    startServers "$1" "$2"
    log=$1/$(echo "$3" | tr / -).log
    skip=/dev/null
    [ "$2" = yes ] && skip=$WORK/skipfile
    rc=0
    # --timeout bounds a hang (no test reporting for that long), never a verdict: under
    # CI's load beside stress-ng --cpu 2, type/zset went 300 s without a report.
    (cd "$WORK" && TERM=dumb nice ./runtest --host 127.0.0.1 --port "$port" --tags "$TAGS" \
        --skipfile "$skip" --timeout 1800 --baseport "$BASEPORT" --single "unit/$3") >"$log" 2>&1 ||
        rc=$?
    "$WORK/src/redis-cli" -p "$port" ping >/dev/null 2>&1 || { say "$3: the server died"; rc=1; }
    if [ "$2" = yes ]; then
        "$WORK/src/redis-cli" -p "$port" obj.stats >/dev/null 2>&1 ||
            { say "$3: OBJ.STATS fails after the unit"; rc=1; }
    fi
    stopAll
    grep -E '^\[(err|exception|TIMEOUT)\]' "$log" | sed "s|^|  $3: |" >&2 || true
    return $rc
}

# runSuite LABEL WITH_MODULE: every unit, REDIS_SUITE_JOBS of them at a time (each
# worker with its servers in a directory of its own, units dealt round-robin; they
# mostly wait on their servers), then a verdict line.
runSuite() {
    dir=$WORK/$1
    mkdir -p "$dir"
    start=$(date +%s)
    : >"$dir/failing"
    w=1
    while [ "$w" -le "$JOBS" ]; do
        mkdir -p "$dir/w$w"
        (
            # runtest's own ports (its clients', the servers it spawns) apart per worker.
            BASEPORT=$((BASE0 + 1000 * (w - 1)))
            k=0
            for u in $UNITS; do
                if [ $((k % JOBS + 1)) = "$w" ]; then
                    runUnit "$dir/w$w" "$2" "$u" || echo "$u" >>"$dir/failing"
                fi
                k=$((k + 1))
            done
        ) &
        w=$((w + 1))
    done
    wait
    bad=$(tr '\n' ' ' <"$dir/failing")
    secs=$(($(date +%s) - start))
    oks=$(cat "$dir"/w*/*.log | grep -c '^\[ok\]' || true)
    errs=$(cat "$dir"/w*/*.log | grep -c '^\[err\]\|^\[exception\]\|^\[TIMEOUT\]' || true)
    skipped=$(cat "$dir"/w*/*.log | grep -c '^\[skip\]' || true)
    say "$1: $oks passed, $errs failed, $skipped skipped (known incompatible), ${secs}s${bad:+; failing units: $bad}"
    [ -z "$bad" ]
}

say "$SERVER, $(echo "$UNITS" | wc -w) units from $SRC, tags $TAGS"
r=0
case $MODE in
plain) runSuite plain no || r=1 ;;
module) runSuite module yes || r=1 ;;
both)
    runSuite plain no || r=1
    runSuite module yes || r=1
    ;;
*) die "usage: run.sh [module|plain|both]" ;;
esac
exit $r
