#!/bin/bash
# directory-cluster.sh - the directory on one Redis vs on a Redis Cluster (3 masters +
# 3 replicas on loopback), in one run: 16 nodes registering, a million publishes
# (directory keys and bytes per object), lookups per second, and all-to-all fetch
# throughput at 8 and 16 nodes as a ratio of a 2-node pair. The measuring is done
# by bench/directory_cluster.py (see there); this builds first and names the output.
#
#   bench/directory-cluster.sh                 writes bench/results/directory-cluster.csv
# Knobs: BENCH_OBJECTS=1000000  BENCH_LOOKUPS=20000 (per node)  BENCH_LOOKUP_CLIENTS=4
#        BENCH_OUT=bench/results
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BENCH_OUT:-$ROOT/bench/results}
cd "$ROOT"
make -s all >/dev/null
mkdir -p "$OUT"
BENCH_COMMAND="bench/directory-cluster.sh BENCH_OBJECTS=${BENCH_OBJECTS:-1000000}" \
    timeout 1800 /usr/bin/python3 bench/directory_cluster.py "$OUT/directory-cluster.csv"
