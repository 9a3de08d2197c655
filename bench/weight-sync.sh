#!/bin/bash
# weight-sync.sh - a model from a trainer to N inference processes, each on its own node
# in a network namespace behind a RATE link, with objstore.models (full and 10 % delta),
# against one pair and torch.distributed gloo (per tensor and one flat bucket) on the
# same links, and the trainer's publish against put_object (bench/weight-sync.py).
#
#   sudo bench/weight-sync.sh [NODES=4,8] [TENSORS=64] [ELEMS=1048576] [RATE=400mbit] [LABEL]
#
# Appends to bench/results/weight-sync.csv and .md (a section per run, with this
# command) and redraws bench/results/weight-sync.svg (gnuplot). Needs root, ip(8),
# tc(8), a built module and the Python package (make && make python).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NODES=${1:-4,8} TENSORS=${2:-64} ELEMS=${3:-1048576} RATE=${4:-400mbit} LABEL=${5:-}
OUT=${BENCH_OUT:-$ROOT/bench/results}/weight-sync
PY=$ROOT/build/python-venv/bin/python
[ -f "$ROOT/build/objstore.so" ] && [ -x "$PY" ] || { echo "weight-sync: make && make python first" >&2; exit 1; }
export OBJSTORE_BUILD=$ROOT/build
timeout 3600 nice "$PY" "$ROOT/bench/weight-sync.py" --nodes "$NODES" --tensors "$TENSORS" \
    --elems "$ELEMS" --rate "$RATE" --out "$OUT" --label "$LABEL" \
    --command "bench/weight-sync.sh $NODES $TENSORS $ELEMS $RATE '$LABEL'"
# The plot: seconds against N, the rows of the latest run only.
LAST=$(mktemp)
trap 'rm -f "$LAST"' EXIT
awk -F, -v when="$(tail -n 1 "$OUT.csv" | cut -d, -f1)" 'NR == 1 || $1 == when' "$OUT.csv" >"$LAST"
gnuplot <<GP
set terminal svg size 720,420
set output "$OUT.svg"
set datafile separator ","
set key autotitle columnhead left top
set xlabel "inference nodes N"
set ylabel "seconds, publish call to last module loaded"
set title "Weight sync of a $((TENSORS * ELEMS * 4 >> 20)) MiB model in $TENSORS tensors, $RATE links"
set logscale y
plot "$LAST" using "n":"objstore_s" with linespoints title "objstore.models (full)", \
     "" using "n":"delta10_s" with linespoints title "objstore.models (10 % changed)", \
     "" using "n":"pair_s" with linespoints title "one pair", \
     "" using "n":"gloo_per_tensor_s" with linespoints title "gloo broadcast per tensor", \
     "" using "n":"gloo_flat_s" with linespoints title "gloo broadcast, one flat bucket"
GP
