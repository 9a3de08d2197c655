#!/bin/sh
# chaos.sh - the chaos run (tests/chaos/chaos.py) for 30 minutes: five nodes in
# network namespaces under random faults, clients checked against a model. Needs
# root, ip and tc. Writes bench/results/chaos-<seed>.json (and the servers' logs
# beside it when an invariant was violated); exits non-zero on any violation.
#   CHAOS_SECONDS (default 1800), CHAOS_SEED, and for the sanitizer build
#   OBJSTORE_BUILD=$PWD/build/san-address OBJSTORE_PRELOAD=$(cc -print-file-name=libasan.so)
set -eu
cd "$(dirname "$0")/.."
: "${CHAOS_SECONDS:=1800}"
: "${CHAOS_SEED:=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
: "${OBJSTORE_BUILD:=$PWD/build}"
export CHAOS_SECONDS CHAOS_SEED OBJSTORE_BUILD
[ -f "$OBJSTORE_BUILD/objstore.so" ] || make -j2 all
mkdir -p bench/results
exec nice /usr/bin/python3 tests/chaos/chaos.py --json "bench/results/chaos-$CHAOS_SEED.json"
