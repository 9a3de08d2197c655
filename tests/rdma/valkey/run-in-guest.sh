#!/bin/sh
# run-in-guest.sh - interoperability with Valkey's own Valkey Over RDMA
# transport, in one guest: our clients against valkey-server 8.1.1 with its
# built-in RDMA (built by `make servers` with BUILD_RDMA=yes into the servers
# cache), and Valkey's own RDMA test client (tests/rdma/rdma-test.c of the
# same source) against our door (objstore-rdma.so) on the installed Redis 7.0.
#
#   make servers test-programs build/tests/rdma/valkey-rdma-test \
#       build/redis-cli-rdma build/redis-benchmark-rdma &&
#   tests/softroce/run.sh tests/rdma/valkey/run-in-guest.sh
#
# (make test-rdma-valkey does both.) Against Valkey: test_rdmaclient (every
# RESP2 reply type, a 10k pipeline, 20 concurrent connections, a client
# killed mid-pipeline, QUIT), redis-cli --rdma (one-shot, RESP3 HELLO naming
# the server, a piped session with MULTI/EXEC) and redis-benchmark --rdma
# (PING, SET, GET of 64 B and of 1 MiB). Against the door: rdma-test with
# one client in the main thread, then with 4 threads (PING, SET and GET of
# 1 KiB values with checks of every byte, BGSAVE).
# OBJ_VALKEY_SERVER names another valkey-server (default: the servers
# cache's, /var/cache/objstore/servers/valkey-8.1.1/bin/valkey-server; the
# guest sees the host's root read-only). Ports: Valkey 6410 (RDMA 16410),
# the door's Redis 6411 (RDMA 16411), on OBJ_RXE_ADDR. Every step is
# bounded in time. Prints PASS/FAIL per step; exit 0 only if all passed,
# 1 also when a program or the server is missing (never skipped).
set -u

repo=$(cd "$(dirname "$0")/../../.." && pwd -P)
cd "$repo" || exit 1
A=${OBJ_RXE_ADDR:?OBJ_RXE_ADDR must name the RDMA address (tests/softroce/run.sh sets it)}
A=${A%%/*}
VALKEY=${OBJ_VALKEY_SERVER:-/var/cache/objstore/servers/valkey-8.1.1/bin/valkey-server}
VPORT=6410
VRPORT=16410
DPORT=6411
DRPORT=16411
RTEST=build/tests/rdma/valkey-rdma-test
NODES_WORK=build/tests/rdma/valkey
NODES_START_TIMEOUT=180
# shellcheck source=tests/lib/nodes.sh
. tests/lib/nodes.sh
FAILED=0
mkdir -p "$NODES_WORK" || exit 1
ulimit -l unlimited 2>/dev/null
for f in "$VALKEY" build/tests/rdma/test_rdmaclient build/redis-cli-rdma build/redis-benchmark-rdma \
    "$RTEST"; do
    [ -x "$f" ] || {
        echo "FAIL  $f is missing (make servers test-rdma-valkey builds everything)"
        exit 1
    }
done

VPID=""
stopAll() {
    [ -n "$VPID" ] && kill "$VPID" 2>/dev/null && wait "$VPID" 2>/dev/null
    nodesStopAll
}
trap stopAll EXIT

# step NAME COMMAND...: run one bounded step and record PASS/FAIL.
step() {
    name=$1
    shift
    echo "===== $name"
    if "$@"; then echo "PASS  $name"; else
        echo "FAIL  $name"
        FAILED=1
    fi
}

# waitLog FILE TEXT: wait (up to 180 s) until FILE holds TEXT. Returns 0 or 1.
waitLog() {
    i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 900 ] || return 1
        sleep 0.2
    done
}

# ---- our clients against Valkey's built-in RDMA -----------------------------------------------

"$VALKEY" --port "$VPORT" --bind 127.0.0.1 --protected-mode no --save '' --appendonly no \
    --dir "$NODES_WORK" --rdma-bind "$A" --rdma-port "$VRPORT" >"$NODES_WORK/valkey.log" 2>&1 &
VPID=$!
if ! waitLog "$NODES_WORK/valkey.log" "Ready to accept connections rdma"; then
    echo "FAIL  valkey-server did not open its RDMA port; log tail:"
    tail -n 20 "$NODES_WORK/valkey.log"
    exit 1
fi
echo "PASS  $("$VALKEY" --version | cut -d' ' -f1-3) listens on $A:$VRPORT over RDMA"

# cliChecks: redis-cli --rdma one-shot, RESP3 and a piped session with MULTI/EXEC.
# shellcheck disable=SC2317 # called through step
cliChecks() {
    cli="timeout 30 build/redis-cli-rdma --rdma -h $A -p $VRPORT"
    [ "$($cli PING)" = PONG ] || return 1
    $cli -3 --no-raw HELLO 3 | grep -qF '"server" => "valkey"' || {
        echo "HELLO 3 does not name valkey"
        return 1
    }
    out=$(printf 'SET a 1\nINCR a\nMULTI\nINCR a\nEXEC\nRPUSH l x y\nLRANGE l 0 -1\n' | $cli --no-raw)
    want='OK
(integer) 2
OK
QUEUED
1) (integer) 3
(integer) 2
1) "x"
2) "y"'
    [ "$out" = "$want" ] || {
        echo "piped session: got"
        echo "$out"
        return 1
    }
}

# benchChecks: redis-benchmark --rdma must finish every test and print a rate for each.
# shellcheck disable=SC2317 # called through step
benchChecks() {
    out=$(timeout 300 build/redis-benchmark-rdma --rdma -h "$A" -p "$VRPORT" -t ping,set,get \
        -n 2000 -c 4 -q 2>&1) || {
        echo "$out" | tail -n 5
        return 1
    }
    echo "$out" | tr '\r' '\n' | grep 'requests per second' | tee "$NODES_WORK/bench.txt"
    [ "$(grep -c 'requests per second' "$NODES_WORK/bench.txt")" -ge 4 ] || return 1
    out=$(timeout 300 build/redis-benchmark-rdma --rdma -h "$A" -p "$VRPORT" -t set,get \
        -d 1048576 -n 40 -c 2 -q 2>&1) || {
        echo "$out" | tail -n 5
        return 1
    }
    echo "$out" | tr '\r' '\n' | grep 'requests per second' | tee "$NODES_WORK/bench-1mib.txt"
    [ "$(grep -c 'requests per second' "$NODES_WORK/bench-1mib.txt")" -eq 2 ]
}

step "test_rdmaclient (our client library) vs Valkey" timeout 300 build/tests/rdma/test_rdmaclient \
    "$A" "$VRPORT" --conns 20 --depth 10000
step "redis-cli --rdma vs Valkey" cliChecks
step "redis-benchmark --rdma vs Valkey" benchChecks
if grep -qE 'crashed by signal|Guru Meditation|ASSERTION' "$NODES_WORK/valkey.log"; then
    echo "FAIL  valkey-server crashed; see $NODES_WORK/valkey.log"
    FAILED=1
fi
kill "$VPID" 2>/dev/null
wait "$VPID" 2>/dev/null
VPID=""

# ---- Valkey's RDMA test client against our door ------------------------------------------------

nodeStart door "$DPORT" --protected-mode no -- memory 64mb transfer-bind "$A" cluster-secret valkey \
    --door bind "$A" port "$DRPORT"
if nodeWait door && waitLog "$(nodeLog door)" "RESP over RDMA on"; then
    echo "PASS  the door (objstore-rdma.so on $(redis-server --version | cut -d' ' -f1-3)) is open on $A:$DRPORT"
    step "Valkey's rdma-test (one client) vs the door" timeout 300 "$RTEST" -h "$A" -p "$DRPORT" \
        -m 100 -M 400
    step "Valkey's rdma-test (4 threads) vs the door" timeout 300 "$RTEST" -h "$A" -p "$DRPORT" \
        -t 4 -m 100 -M 400
    redis-cli -p "$DPORT" ping | grep -q PONG || {
        echo "FAIL  the door's server no longer answers"
        FAILED=1
    }
else
    echo "FAIL  the door did not open; log tail:"
    tail -n 20 "$(nodeLog door)"
    FAILED=1
fi
nodeStop door
if grep -qE 'crashed by signal|Guru Meditation|ASSERTION' "$(nodeLog door)"; then
    echo "FAIL  the door's server crashed; see $(nodeLog door)"
    FAILED=1
fi

[ "$FAILED" = 0 ] && echo "VALKEY INTEROP PASSED" || echo "VALKEY INTEROP FAILED"
exit "$FAILED"
