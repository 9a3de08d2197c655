#!/bin/sh
# valkey-interop.sh - our RDMA clients against the reference Valkey Over RDMA
# server: a Valkey build's valkey-server with its valkey-rdma.so module
# (Valkey 8.x, `make BUILD_RDMA=module`; not packaged by Debian, so this is
# a manual check, not part of make test). Runs test_rdmaclient (every RESP2
# reply type, a 10k pipeline, 20 concurrent connections, a client killed
# mid-pipeline, QUIT), redis-cli --rdma (one-shot, RESP3, a piped session
# with MULTI/EXEC) and redis-benchmark --rdma against it.
#
#   VALKEY_DIR=/path/with/valkey-server+valkey-rdma.so \
#       tests/softroce/run.sh tests/rdma/client/valkey-interop.sh
#
# VALKEY_DIR must be under the repository or another path the guest sees
# (its /tmp is private). Needs build/tests/rdma/test_rdmaclient,
# build/redis-cli-rdma and build/redis-benchmark-rdma (make test-rdma-resp
# builds them). Prints PASS/FAIL per step; exit 0 only if all passed.
# Known server bug (Valkey's rdma.c as of October 2024): connRdmaClose does not
# delete the connection's keepalive timer, so a close that the server runs
# before it has seen the disconnect event (a client's flushed work requests
# arrive first) leaves a timer that crashes valkey-server 3 s later in
# rdmaKeepaliveTimeProc. Any client's disconnect can race into it; one run in
# three hit it during redis-benchmark here. The crash is in valkey.log.
set -u

repo=$(cd "$(dirname "$0")/../../.." && pwd -P)
cd "$repo" || exit 1
A=${OBJ_RXE_ADDR:?OBJ_RXE_ADDR must name the RDMA address (tests/softroce/run.sh sets it)}
A=${A%%/*}
V=${OBJ_VALKEY_DIR:-${VALKEY_DIR:?set VALKEY_DIR to a directory holding valkey-server and valkey-rdma.so}}
PORT=6400
RPORT=6401
LOG=build/tests/rdma/client/valkey-interop
FAILED=0
mkdir -p "$LOG"
for f in "$V/valkey-server" "$V/valkey-rdma.so" build/tests/rdma/test_rdmaclient build/redis-cli-rdma \
    build/redis-benchmark-rdma; do
    [ -e "$f" ] || {
        echo "$f is missing"
        exit 1
    }
done

"$V/valkey-server" --port "$PORT" --bind 127.0.0.1 --protected-mode no --save '' --appendonly no \
    --dir "$LOG" --loadmodule "$(cd "$V" && pwd -P)/valkey-rdma.so" bind="$A" port="$RPORT" \
    >"$LOG/valkey.log" 2>&1 &
VPID=$!
trap 'kill "$VPID" 2>/dev/null; wait "$VPID" 2>/dev/null' EXIT
i=0
until redis-cli -p "$PORT" PING >/dev/null 2>&1 && grep -q "Ready to accept connections rdma" \
    "$LOG/valkey.log"; do
    i=$((i + 1))
    [ $i -lt 150 ] || {
        echo "valkey-server did not start:"
        tail -n 20 "$LOG/valkey.log"
        exit 1
    }
    sleep 0.2
done

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

# cliChecks: redis-cli --rdma one-shot, RESP3 and a piped session with MULTI/EXEC.
# shellcheck disable=SC2317 # called through step
cliChecks() {
    cli="timeout 30 build/redis-cli-rdma --rdma -h $A -p $RPORT"
    [ "$($cli PING)" = PONG ] || return 1
    $cli -3 --no-raw HELLO 3 | grep -qF '"server" => "valkey"' || return 1
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

step "test_rdmaclient vs Valkey" timeout 180 build/tests/rdma/test_rdmaclient "$A" "$RPORT" \
    --conns 20 --depth 10000
step "redis-cli --rdma vs Valkey" cliChecks
step "redis-benchmark --rdma vs Valkey" timeout 180 build/redis-benchmark-rdma --rdma -h "$A" \
    -p "$RPORT" -t ping,set,get -n 2000 -c 4 -q
[ "$FAILED" = 0 ] && echo "VALKEY INTEROP PASSED" || echo "VALKEY INTEROP FAILED"
exit "$FAILED"
