#!/bin/bash
# spill.sh - the spill tier's figures: spill/restore MB/s against dd with
# direct I/O on the same file system, GET/PIN p50 of a spilled 1 MiB object
# against one in memory, and a Zipf workload over 4x the arena, policy hot
# against lru. Writes bench/results/spill.{csv,md} (bench/spill.py).
#
#   bench/spill.sh [DIR]    DIR: where the tier's directory goes (default /var/tmp)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$ROOT/build/objstore.so" ] || { echo "spill.sh: build first (make)" >&2; exit 1; }
exec timeout 900 nice /usr/bin/python3 "$ROOT/bench/spill.py" "$@"
