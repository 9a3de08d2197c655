#!/bin/bash
# put.sh - puts at memory speed (issue 29, part 1): Python Client.put and C
# objClientPut (obj-benchmark cput) against one thread's memcpy of the same
# bytes (16 MiB to 1 GiB, 1 and 2 copy threads), and small puts against
# redis-py SET / redis-benchmark SET (64 B to 64 KiB), every pair alternated
# in one run. Writes bench/results/put.{md,csv} (bench/put.py).
#
#   bench/put.sh [ROUNDS]    (default 3)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$ROOT/build/objstore.so" ] && [ -x "$ROOT/build/bin/obj-benchmark" ] ||
    { echo "put.sh: build first (make, make python)" >&2; exit 1; }
exec timeout 3600 "$ROOT/build/python-venv/bin/python" "$ROOT/bench/put.py" "$@"
