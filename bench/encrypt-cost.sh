#!/bin/bash
# encrypt-cost.sh - what transfer-encrypt costs a large TCP fetch: the same
# fetch authenticated only and encrypted, alternated ROUNDS times in one run
# (bench/profile-tcp-fetch.sh with PERF=0, each against its own one-stream
# iperf3), appended to bench/results/encrypt-cost.txt.
#
#   bench/encrypt-cost.sh [SIZE=16m] [ROUNDS=3] [SECONDS=4]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE=${1:-16m} ROUNDS=${2:-3} SECS=${3:-4}
export OUT=${BENCH_OUT:-$ROOT/bench/results}/encrypt-cost.txt PERF=0
for r in $(seq "$ROUNDS"); do
    MODULE_ARGS="" "$ROOT/bench/profile-tcp-fetch.sh" "authenticated" "$ROOT/build/objstore.so" "$SIZE" "$SECS"
    MODULE_ARGS="transfer-encrypt yes" "$ROOT/bench/profile-tcp-fetch.sh" "encrypted" "$ROOT/build/objstore.so" "$SIZE" "$SECS"
done
