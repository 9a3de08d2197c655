#!/bin/bash
# broadcast.sh - time for N-1 nodes to hold one object, against one pair's time on
# the same links: N nodes in network namespaces, each behind a tc tbf link (both
# directions) to one bridge (bench/broadcast.py, tests/lib/netns.py).
#
#   sudo bench/broadcast.sh [NODES=2,4,8,16] [SIZE_MIB=64] [RATE=400mbit] [LABEL] [NODE_ARGS]
#
# NODE_ARGS are module arguments for every node: 'upload-slots 0' takes the
# spreading away (every fetcher is served by the owner: the star, as before
# relays), for the before/after in one run.
# Appends to bench/results/broadcast.csv and bench/results/broadcast.md (a
# section per run, with this command). OBJSTORE_MODULE picks another build of
# the module (e.g. one of main, for the before/after). Needs root, ip(8), tc(8) and a built module (make).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NODES=${1:-2,4,8,16} SIZE=${2:-64} RATE=${3:-400mbit} LABEL=${4:-} NODE_ARGS=${5:-}
OUT=${BENCH_OUT:-$ROOT/bench/results}/broadcast
[ -f "$ROOT/build/objstore.so" ] || { echo "broadcast: build first (make)" >&2; exit 1; }
export OBJSTORE_BUILD=$ROOT/build
exec timeout 1800 nice /usr/bin/python3 "$ROOT/bench/broadcast.py" --nodes "$NODES" \
    --size-mib "$SIZE" --rate "$RATE" --out "$OUT" --label "$LABEL" --node-args "$NODE_ARGS" \
    --command "bench/broadcast.sh $NODES $SIZE $RATE '$LABEL' '$NODE_ARGS'"
