#!/bin/sh
# run-in-guest.sh - the RESP-over-RDMA client suite: client/rdmaconn.c,
# ObjClient over RDMA, redis-benchmark --rdma and redis-cli --rdma against
# the RDMA door (objstore-rdma.so, Valkey Over RDMA), plus
# tests/rdma/client/peer.c for a server receive buffer the module never uses
# (64 KiB, the protocol's smallest). Needs an RDMA device:
#
#   tests/softroce/run.sh tests/rdma/client/run-in-guest.sh
#
# (a Soft-RoCE guest when the host has none). make builds every program on the
# host first (make test-rdma-resp does): build/objstore.so,
# build/tests/rdma/{test_rdmaclient,peer}, build/redis-benchmark-rdma and
# build/redis-cli-rdma; the
# guest compiles nothing. Nodes are started through tests/lib/nodes.sh.
# Steps, each bounded in time:
#   1. test_rdmaclient vs the module: every RESP2 reply type, a 10k pipeline,
#      the event-loop layer, OBJ.* and ObjClient over RDMA, 100 concurrent
#      connections, a client killed mid-pipeline, QUIT
#   2. the same with a 64 KiB client receive buffer (replies wrap it often)
#   3. AUTH against a node with requirepass
#   4. test_rdmaclient vs the peer with a 64 KiB server receive buffer
#   5. redis-benchmark --rdma -t ping,get,set -n 2000 -q, and OBJ.GET
#   6. redis-cli --rdma: the README's walkthrough one-shot and piped into
#      interactive mode, RESP3, AUTH (tests/rdma/client/cli-walkthrough.sh)
# Prints PASS/FAIL per step and exits 0 only if every step passed.
# Scratch files and logs: build/tests/rdma/client/ (kept for post-mortems).
set -u

repo=$(cd "$(dirname "$0")/../../.." && pwd -P)
cd "$repo" || exit 1
BUILD=${OBJSTORE_BUILD:-$repo/build}
B=$BUILD/tests/rdma/client
T=$BUILD/tests/rdma
A=${OBJ_RXE_ADDR:?OBJ_RXE_ADDR must name the RDMA address (tests/softroce/run.sh sets it)}
A=${A%%/*}
RB=build/redis-benchmark-rdma
RC=build/redis-cli-rdma
PASSWORD=rdmaclient-secret
FAILED=0
SUMMARY=""
PEER_PID=""
NODES_WORK=$B
NODES_START_TIMEOUT=60
# shellcheck source=tests/lib/nodes.sh
. tests/lib/nodes.sh

# step NAME TIMEOUT COMMAND...: run one step, record PASS/FAIL and its time.
# TIMEOUT "-" runs COMMAND (a shell function that bounds itself) directly.
step() {
    name=$1
    limit=$2
    shift 2
    echo "===== $name"
    t0=$(date +%s)
    if [ "$limit" = - ]; then
        "$@"
    else
        timeout --kill-after=5 "$limit" "$@"
    fi
    rc=$?
    if [ $rc = 0 ]; then r=PASS; else r="FAIL (exit $rc)"; FAILED=1; fi
    SUMMARY="$SUMMARY
  $r  $name ($(($(date +%s) - t0)) s)"
}

# stopAll: stop the nodes and the peer this script started (by pid). Can't fail.
stopAll() {
    nodesStopAll
    [ -z "$PEER_PID" ] || { kill "$PEER_PID" 2>/dev/null; wait "$PEER_PID" 2>/dev/null; }
    PEER_PID=""
}
trap stopAll EXIT

# startNode NAME PORT RDMAPORT CLIENTPORT PASSWORD [SERVER-ARGS...]: one
# objstore node (PASSWORD "" for none); waits (bounded) until it answers on
# TCP. Returns 0, or 1 with its log tail.
startNode() {
    name=$1 port=$2 rport=$3 cport=$4 pw=$5
    shift 5
    nodeStart "$name" "$port" "$@" -- memory 128mb transfer-bind "$A" cluster-secret guest \
        rdma-port "$rport" --door bind "$A" port "$cport"
    nodeWait "$name" "$pw"
}

# benchSmoke: the patched redis-benchmark over RDMA: the -t ping,get,set run and
# an OBJ.GET run; both must finish and print a rate for every test.
# shellcheck disable=SC2317 # called through step
benchSmoke() {
    redis-cli -p 6390 obj.put rdmaclient-k hello >/dev/null || return 1
    out=$(timeout 120 "$RB" --rdma -h "$A" -p 16390 -t ping,get,set -n 2000 -q 2>&1) || {
        echo "$out"
        return 1
    }
    echo "$out" | tr '\r' '\n' | grep 'requests per second'
    n=$(echo "$out" | tr '\r' '\n' | grep -c 'requests per second')
    [ "$n" -eq 4 ] || {
        echo "expected 4 results (PING_INLINE PING_MBULK SET GET), got $n"
        return 1
    }
    out=$(timeout 60 "$RB" --rdma -h "$A" -p 16390 -n 1000 -c 10 -q OBJ.GET rdmaclient-k 2>&1) || {
        echo "$out"
        return 1
    }
    echo "$out" | tr '\r' '\n' | grep 'requests per second' || return 1
}

nodesInit || exit 1
for prog in "$T/test_rdmaclient" "$T/peer" "$RB" "$RC"; do
    [ -x "$prog" ] || {
        echo "$prog is missing: run make test-rdma-resp (it builds every program on the host)"
        exit 1
    }
done

# No password: protected mode would refuse RDMA clients (not loopback).
startNode n6390 6390 26390 16390 "" --protected-mode no || exit 1
startNode n6391 6391 26391 16391 "$PASSWORD" --requirepass "$PASSWORD" || exit 1
"$T/peer" "$A" 17000 --rx-size 65536 --seconds 400 >"$B/peer.log" 2>&1 &
PEER_PID=$!

step "client vs module (100 connections, 10k pipeline)" 150 \
    "$T/test_rdmaclient" "$A" 16390 --module --tcp-port 6390 --conns 100
step "client with a 64 KiB receive buffer vs module" 90 \
    env OBJSTORE_RDMA_RX_SIZE=65536 OBJSTORE_RDMA_TX_SIZE=65536 \
    "$T/test_rdmaclient" "$A" 16390 --module --conns 5 --depth 2000 --big 100000
step "AUTH against requirepass" 60 \
    "$T/test_rdmaclient" "$A" 16391 --module --password "$PASSWORD" --auth-only
step "client vs peer with a 64 KiB receive buffer" 90 \
    "$T/test_rdmaclient" "$A" 17000 --conns 5 --depth 1000 --big 20000
step "redis-benchmark --rdma" - benchSmoke
step "redis-cli --rdma: the README walkthrough, RESP3, AUTH" 300 \
    env REDIS_CLI_RDMA="$RC" tests/rdma/client/cli-walkthrough.sh "$A" 16390 6390 16391 "$PASSWORD"

grep -h -iE 'warning|error' "$B"/n639*.log | grep -v -i 'overcommit' | tail -n 20
stopAll
echo "===== summary$SUMMARY"
[ "$FAILED" = 0 ] && echo "RDMACLIENT SUITE PASSED" || echo "RDMACLIENT SUITE FAILED"
exit "$FAILED"
