#!/bin/bash
# replicas.sh - copies, repair and drain on rate-limited links, each figure against a
# reference taken in the same run (bench/replicas.py says what each one measures):
# a put of PUT_MIB with REPLICAS 2 and 3 against REPLICAS 1 plus one pair's fetch; the
# repair of REPAIR_MIB of two-copy objects after a node of 8 dies against one pair's
# rate; fetch and put p50 during that repair against before it; a drain of DRAIN_MIB
# against one pair's fetch of the same objects. Nodes in network namespaces behind tc
# tbf links (tests/lib/netns.py).
#
#   sudo bench/replicas.sh [RATE=400mbit] [PUT_MIB=64] [REPAIR_MIB=1024] [DRAIN_MIB=1024] \
#       [LABEL] [FIGURES=put,repair,drain]
#
# Appends to bench/results/replicas.csv and bench/results/replicas.md (a section per
# run, with this command and the host's load average). Needs root, ip(8), tc(8), a
# built module (make) and about 5 GiB of /dev/shm.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RATE=${1:-400mbit} PUT=${2:-64} REPAIR=${3:-1024} DRAIN=${4:-1024} LABEL=${5:-}
FIGURES=${6:-put,repair,drain}
OUT=${BENCH_OUT:-$ROOT/bench/results}/replicas
[ -f "$ROOT/build/objstore.so" ] || { echo "replicas: build first (make)" >&2; exit 1; }
export OBJSTORE_BUILD=$ROOT/build
exec timeout 3600 nice /usr/bin/python3 "$ROOT/bench/replicas.py" --rate "$RATE" \
    --put-mib "$PUT" --repair-mib "$REPAIR" --drain-mib "$DRAIN" --figures "$FIGURES" \
    --out "$OUT" --label "$LABEL" \
    --command "bench/replicas.sh $RATE $PUT $REPAIR $DRAIN '$LABEL' $FIGURES"
