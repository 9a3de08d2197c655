#!/bin/bash
# mac-cost-path.sh - the payload MAC as a fetch feeds it, against memcpy of
# the same bytes in the same run: build/bin/mac-cost --path-only (the pieces
# read() returns on the receiving node, and the relay's PART sizes, for
# objects of 64 KiB to 16 MiB; XXH3 and Poly1305 fed the same way; the frame
# tag in ns),
# RUNS times, each row's best run kept (a shared machine slows a run, never
# speeds one up).
#
#   bench/mac-cost-path.sh [RUNS=5] [ROUNDS=5]
#
# Writes bench/results/mac-cost-path.csv (the command and the machine's load
# on its first line) and appends the summary to bench/results/mac-cost.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${1:-5} ROUNDS=${2:-5}
RES=${BENCH_OUT:-$ROOT/bench/results}
MACCOST=$ROOT/build/bin/mac-cost
[ -x "$MACCOST" ] || { echo "mac-cost-path: build first (make test-programs)" >&2; exit 1; }
w=$(mktemp -d "${TMPDIR:-/tmp}/mac-cost-path.XXXXXX")
trap 'rm -rf "$w"' EXIT

load0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$RUNS"); do
    timeout 600 "$MACCOST" --path-only --rounds "$ROUNDS" >"$w/run$r.csv"
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
mkdir -p "$RES"
{
    echo "# bench/mac-cost-path.sh $* ($(date -u +%Y-%m-%d), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $load0 at the start, $load1 at the end; best of $RUNS runs)"
    # Per row (what, bytes) the run with the fewest ns; x_memcpy is recomputed
    # from the best memcpy row of the same pattern and size.
    cat "$w"/run*.csv | awk -F, '
        $1 == "what" { next }
        { k = $1 "," $2; if (!(k in ns) || $3 < ns[k]) ns[k] = $3; if (!(k in order)) { order[k] = ++n; keys[n] = k } }
        END { print "what,bytes,ns_per_op,gb_per_s,x_memcpy"
              for (i = 1; i <= n; i++) { k = keys[i]; split(k, f, ","); x = ""
                  if (f[1] != "frame-tag") { p = f[1]; sub(/-.*/, "", p); x = sprintf("%.2f", ns[p "-memcpy," f[2]] / ns[k]) }
                  printf "%s,%s,%.1f,%.2f,%s\n", f[1], f[2], ns[k], f[2] / ns[k], x } }'
} >"$RES/mac-cost-path.csv"

{
    head -n 1 "$RES/mac-cost-path.csv"
    echo "# the payload MAC (gmac) and XXH3 fed as the receive path feeds them: each piece copied"
    echo "# in (memcpy, the read()), then tagged and checksummed while hot; gmac-pass: the MAC as a"
    echo "# separate pass over the landed object; poly1305: ChaCha20-Poly1305 as a MAC, fed the same"
    echo "# pieces, for comparison. GB/s and x memcpy of the same bytes, same run."
    printf "%-8s %9s %8s %8s %8s %10s %9s %9s %9s %9s\n" pattern bytes memcpy gmac xxh3 gmac-pass \
        "gmac/mcp" "xxh3/mcp" poly1305 "poly/mcp"
    awk -F, 'NR > 2 && $1 != "frame-tag" { split($1, f, "-"); p = f[1]; w = substr($1, length(p) + 2)
                 g[p "," $2 "," w] = $4; x[p "," $2 "," w] = $5; if (!((p "," $2) in seen)) { seen[p "," $2] = 1; keys[++n] = p "," $2 } }
             END { for (i = 1; i <= n; i++) { split(keys[i], f, ","); k = keys[i]
                       printf "%-8s %9s %8.2f %8.2f %8.2f %10.2f %8.2fx %8.2fx %9.2f %8.2fx\n", f[1], f[2],
                              g[k ",memcpy"], g[k ",gmac"], g[k ",xxh3"], g[k ",gmac-pass"], x[k ",gmac"],
                              x[k ",xxh3"], g[k ",poly1305"], x[k ",poly1305"] } }' \
        "$RES/mac-cost-path.csv"
    awk -F, '$1 == "frame-tag" { printf "# frame tag (wireMacFrame), %s-byte frame: %s ns\n", $2, $3 }' \
        "$RES/mac-cost-path.csv"
} | tee -a "$RES/mac-cost.txt"
