#!/bin/bash
# rdma-threshold-sweep.sh - where does the RDMA READ rendezvous start to beat
# the inline ring? A sweep of objstore.rdma-read-min on one RDMA device. Run
# it where a device exists; on a machine without one, in the Soft-RoCE guest:
#
#   make && tests/softroce/run.sh bench/rdma-threshold-sweep.sh
#
# Two nodes: A owns the objects, B fetches them with obj-benchmark -t fetch
# --rdma (1 client, a few requests per point). For every size and mode it
# sets rdma-read-min (CONFIG SET, at run time) and measures:
#   ring-only   rdma-read-min 1g: everything up to 256 KiB (a ring slot) inline
#   read-only   rdma-read-min 0: everything by the RDMA READ rendezvous
#   hybrid-16k, hybrid-32k (the default), hybrid-64k: inline below, READ from
# The owner decides the path, so the setting that counts is A's (B gets the
# same value only to keep the two nodes alike). Each point is checked against
# the deltas of A's rdma_served_inline / rdma_served_rndv counters: the path
# column says which one moved, and a point whose path is not the expected one
# makes the exit status 1. Modes are interleaved per size so that a drift of
# the machine's speed hits them alike.
#
# Writes $BENCH_OUT/rdma-threshold-sweep.csv (mode,threshold,size,mb_per_sec,
# p50_ms,path; size and threshold in bytes, MB = 10^6 bytes), .md (tables) and
# .png (p50 vs size, one line per mode), and prints the crossover: the
# smallest size where read-only has a lower p50 than ring-only. Numbers from
# an emulated guest only compare the paths with each other under emulation;
# they must not be used to retune the hardware default of rdma-read-min.
#
# The whole sweep runs BENCH_PASSES times; per point the pass with the lowest
# p50 is kept, since other load on the machine can only slow a run down.
# Bounded: --seconds and `timeout` per point, and a budget for all passes;
# past it the remaining points are skipped (exit status 1 if that leaves a
# point unmeasured; a later pass is just cut short). Knobs:
# BENCH_SIZES="4k 16k 32k 64k 128k 256k" BENCH_N=20 (requests per point)
# BENCH_SECONDS=10 (per point) BENCH_PASSES=2 BENCH_BUDGET=330 (seconds for
# all passes)
# BENCH_PORT=7520 (Redis ports +1, +2; transfer +10000; rdma +20000)
# BENCH_OUT=bench/results OBJSTORE_MODULE. Exit status 0 when every point was
# measured on its expected path, 1 otherwise.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd -P)
ADDR=${OBJ_RXE_ADDR:-}
ADDR=${ADDR%%/*}
SIZES=${BENCH_SIZES:-4k 16k 32k 64k 128k 256k}
REQUESTS=${BENCH_N:-20}
POINT_SECONDS=${BENCH_SECONDS:-10}
BUDGET=${BENCH_BUDGET:-330}
PASSES=${BENCH_PASSES:-2}
BASE=${BENCH_PORT:-7520}
OUT=${BENCH_OUT:-$ROOT/bench/results}
MODULE=${OBJSTORE_MODULE:-$ROOT/build/objstore.so}
OBJBENCH=$ROOT/build/bin/obj-benchmark
INLINE_MAX=$((256 * 1024))
START_TIMEOUT=120
# mode:rdma-read-min (bytes)
MODES="ring-only:1073741824 read-only:0 hybrid-16k:16384 hybrid-32k:32768 hybrid-64k:65536"

# Nodes are started through the shared launcher, which also brings the
# fail/tool/scratch/cleanup helpers.
NODES_PROG=rdma-threshold-sweep
NODES_MODULE=$MODULE
NODES_START_TIMEOUT=$START_TIMEOUT
# shellcheck source=tests/lib/nodes.sh
. "$ROOT/tests/lib/nodes.sh"

[ -n "$ADDR" ] || nodesFail "OBJ_RXE_ADDR is not set (run: tests/softroce/run.sh $0)"
nodesNeedTools "apt-get install redis-server redis-tools gnuplot-nox" \
    redis-server redis-cli gnuplot timeout awk
nodesNeedModule
[ -x "$OBJBENCH" ] || nodesFail "$OBJBENCH is missing (run: make)"

nodesScratch rdma-sweep || exit 1
WORK=$NODES_WORK

# toBytes: print "4k" / "1m" / "123" as bytes. Can't fail.
toBytes() {
    local v=$1 n=${1%[kKmMgG]}
    case $v in
        *[kK]) echo $((n * 1024)) ;;
        *[mM]) echo $((n * 1024 * 1024)) ;;
        *[gG]) echo $((n * 1024 * 1024 * 1024)) ;;
        *) echo "$v" ;;
    esac
}

# ---- nodes ------------------------------------------------------------------------------

# What the two nodes (nodeA on port $A, nodeB on $B; B's directory is A's
# Redis) are started with besides their addresses (tests/lib/nodes.sh).
NODE_ARGS=(memory 64mb cluster-secret sweep fetch-timeout 60000)

# servedCounts: print A's "rdma_served_inline rdma_served_rndv". Returns 1
# when the node does not answer.
servedCounts() {
    local info
    info=$(timeout 10 redis-cli -p "$A" INFO objstore 2>/dev/null | tr -d '\r') || return 1
    echo "$info" | awk -F: '$1 == "objstore_rdma_served_inline" { i = $2 }
        $1 == "objstore_rdma_served_rndv" { r = $2 }
        END { if (i == "" || r == "") exit 1; print i, r }'
}

# setReadMin: CONFIG SET objstore.rdma-read-min $1 on A and B. Returns 0 or 1.
setReadMin() {
    local p
    for p in "$A" "$B"; do
        [ "$(timeout 10 redis-cli -p "$p" CONFIG SET objstore.rdma-read-min "$1")" = OK ] ||
            return 1
    done
}

# fetchPoint: obj-benchmark fetch --rdma of $2 requests of $1 bytes, B from
# A, 1 client; prints its CSV row (quotes removed). Returns 1 on failure with
# the tool's output on stderr.
fetchPoint() {
    local out
    if ! out=$(timeout $((POINT_SECONDS + 60)) "$OBJBENCH" -p "$B" --source-port "$A" \
        -t fetch --rdma -c 1 --threads 1 -d "$1" -n "$2" --seconds "$POINT_SECONDS" \
        --csv 2>&1); then
        printf '%s\n' "$out" | tail -n 5 | sed 's/^/  | /' >&2
        return 1
    fi
    printf '%s\n' "$out" | tr -d '"' | awk -F, '$1 ~ /^fetch/ && NF >= 6' | tail -n 1
}

A=$((BASE + 1))
B=$((BASE + 2))
T_START=$SECONDS
echo "rdma-threshold-sweep: nodes A (:$A, owner) and B (:$B) on $ADDR"
nodeStartRdma nodeA "$A" "$ADDR" "" node-name A "${NODE_ARGS[@]}"
nodeStartRdma nodeB "$B" "$ADDR" "$A" node-name B "${NODE_ARGS[@]}"
nodeWaitRdma nodeA && nodeWaitRdma nodeB || exit 1

# Warm-up (untimed): the first fetch sets up the A-B connection, and each
# path is exercised once before anything is measured.
for warm in 0 1073741824; do
    setReadMin "$warm" || nodesFail "CONFIG SET objstore.rdma-read-min $warm failed"
    fetchPoint 4096 2 >/dev/null || nodesFail "warm-up fetch failed; node logs:
$(grep -h '<objstore>' "$WORK"/node*.log | tail -n 10)"
done
echo "rdma-threshold-sweep: nodes up and warm after $((SECONDS - T_START)) s;" \
    "sizes: $SIZES; $REQUESTS requests / ${POINT_SECONDS}s per point"

# ---- the sweep --------------------------------------------------------------------------
mkdir -p "$OUT" || nodesFail "cannot create $OUT"
CSV=$OUT/rdma-threshold-sweep.csv
RAW=$WORK/raw.csv
: >"$RAW"
status=0
T_SWEEP=$SECONDS
for pass in $(seq "$PASSES"); do
    echo "rdma-threshold-sweep: pass $pass of $PASSES"
    for size in $SIZES; do
        bytes=$(toBytes "$size")
        for spec in $MODES; do
            mode=${spec%%:*} thr=${spec##*:}
            if [ $((SECONDS - T_SWEEP)) -ge "$BUDGET" ]; then
                # A later pass only refines points the first one measured.
                if [ "$pass" = 1 ]; then
                    echo "  $mode $size: skipped (the ${BUDGET}s budget is spent)" >&2
                    status=1
                fi
                continue
            fi
            expect=rndv
            [ "$bytes" -lt "$thr" ] && [ "$bytes" -le "$INLINE_MAX" ] && expect=inline
            if ! setReadMin "$thr" || ! before=$(servedCounts); then
                echo "  $mode $size: cannot configure or read node A" >&2
                status=1
                continue
            fi
            if ! row=$(fetchPoint "$bytes" "$REQUESTS") || [ -z "$row" ]; then
                echo "  $mode $size: obj-benchmark failed" >&2
                status=1
                continue
            fi
            after=$(servedCounts) || after=$before
            # inline/rndv: only that counter moved; mixed: both; none: neither.
            path=$(echo "$before $after" | awk '{ i = $3 - $1; r = $4 - $2
                p = (i > 0 && r > 0) ? "mixed" : (i > 0) ? "inline" : (r > 0) ? "rndv" : "none"
                printf "%s %d %d\n", p, i, r }')
            read -r path dinl drndv <<<"$path"
            mbs=$(echo "$row" | cut -d, -f5)
            p50=$(echo "$row" | cut -d, -f6)
            ops=$(echo "$row" | cut -d, -f4)
            echo "$mode,$thr,$bytes,$mbs,$p50,$path" >>"$RAW"
            note=""
            if [ "$path" != "$expect" ]; then
                note="  <-- expected $expect"
                status=1
            fi
            printf '  %-10s %5s: p50 %9.3f ms, %8.3f MB/s, %7.2f ops/s, %s (served %d inline,' \
                "$mode" "$size" "$p50" "$mbs" "$ops" "$path" "$dinl"
            printf ' %d rndv)%s\n' "$drndv" "$note"
        done
    done
done

# One row per point: the pass with the lowest p50 (other load on the machine
# only slows a run down); the path is "mixed" when the passes disagree.
{
    echo "mode,threshold,size,mb_per_sec,p50_ms,path"
    awk -F, '{
            key = $1 SUBSEP $3
            if (!(key in best) || $5 + 0 < p50[key]) { best[key] = $0; p50[key] = $5 + 0 }
            if (!(key in path)) path[key] = $6
            else if (path[key] != $6) path[key] = "mixed"
            if (!(key in seen)) { seen[key] = 1; order[++n] = key }
        }
        END {
            for (k = 1; k <= n; k++) {
                split(best[order[k]], f, ",")
                printf "%s,%s,%s,%s,%s,%s\n", f[1], f[2], f[3], f[4], f[5], path[order[k]]
            }
        }' "$RAW"
} >"$CSV"

# ---- tables, plot, crossover --------------------------------------------------------------
MD=$OUT/rdma-threshold-sweep.md
PNG=$OUT/rdma-threshold-sweep.png
DEV=${OBJ_RXE_DEV:-rdma}
WHERE=native
[ "${OBJ_SOFTROCE_GUEST:-0}" = 1 ] && WHERE="Soft-RoCE in an emulated QEMU guest"
MODE_NAMES=""
for spec in $MODES; do
    MODE_NAMES="$MODE_NAMES ${spec%%:*}"
done

# mdTable: a markdown table of CSV column $1 (4 = MB/s, 5 = p50 ms), one row
# per size, one column per mode; each cell carries the path (i = inline,
# r = rendezvous). Can't fail.
mdTable() {
    awk -F, -v col="$1" -v modes="$MODE_NAMES" 'NR > 1 {
            key = $3 SUBSEP $1; v[key] = sprintf("%.3f %s", $col, substr($6, 1, 1))
            if (!($3 in seen)) { seen[$3] = 1; order[++ns] = $3 }
        }
        END {
            nm = split(modes, m, " ")
            printf "| size |"; for (j = 1; j <= nm; j++) printf " %s |", m[j]; print ""
            printf "|---:|"; for (j = 1; j <= nm; j++) printf "---:|"; print ""
            for (k = 1; k <= ns; k++) {
                s = order[k]
                printf "| %d KiB |", s / 1024
                for (j = 1; j <= nm; j++) {
                    key = s SUBSEP m[j]
                    printf " %s |", (key in v) ? v[key] : "-"
                }
                print ""
            }
        }' "$CSV"
}

# The crossover: the smallest size where read-only's p50 is below ring-only's.
CROSS=$(awk -F, 'NR > 1 && $1 == "ring-only" { ring[$3] = $5 }
    NR > 1 && $1 == "read-only" { rd[$3] = $5 }
    END {
        best = ""
        for (s in rd)
            if ((s in ring) && rd[s] + 0 < ring[s] + 0 && (best == "" || s + 0 < best + 0)) best = s
        print best
    }' "$CSV")
if [ -n "$CROSS" ]; then
    CROSS_TEXT="read-only (RDMA READ) first beats ring-only (inline) on p50 at $((CROSS / 1024)) KiB"
else
    CROSS_TEXT="read-only (RDMA READ) never beats ring-only (inline) on p50 in the swept sizes"
fi
CAVEAT="Measured on $DEV ($WHERE), $REQUESTS requests per point, 1 client, best p50 of"
CAVEAT+=" $PASSES passes."
if [ "${OBJ_SOFTROCE_GUEST:-0}" = 1 ]; then
    CAVEAT+=" Emulated numbers only compare the two paths under emulation (software verbs,"
    CAVEAT+=" emulated CPU); they must not be used to retune the hardware default of"
    CAVEAT+=" rdma-read-min (32 KiB)."
fi

{
    echo "OBJ.FETCH VIA rdma, B fetching from A, by \`objstore.rdma-read-min\` mode."
    echo "Cells: value and path from A's served counters (i = inline in the ring,"
    echo "r = RDMA READ rendezvous). $CAVEAT"
    echo
    echo "p50 latency (ms):"
    echo
    mdTable 5
    echo
    echo "Throughput (MB/s, 10^6 bytes/s):"
    echo
    mdTable 4
    echo
    echo "Crossover: $CROSS_TEXT."
} >"$MD"

XTICS=""
XMIN=""
XMAX=0
for size in $SIZES; do
    b=$(toBytes "$size")
    XTICS="$XTICS${XTICS:+, }\"$size\" $b"
    [ -n "$XMIN" ] && [ "$XMIN" -le "$b" ] || XMIN=$b
    [ "$XMAX" -ge "$b" ] || XMAX=$b
done
GP=$WORK/plot.gp
{
    echo "set datafile separator ','"
    echo "set terminal pngcairo size 1000,600 noenhanced"
    echo "set output '$PNG'"
    echo "set logscale x 2"
    echo "set xtics ($XTICS)"
    # A margin on both sides, so that the end ticks and points are not clipped.
    echo "set xrange [$XMIN * 0.8:$XMAX * 1.25]"
    echo "set grid"
    echo "set key outside right"
    echo "set xlabel 'object size (bytes)'"
    echo "set ylabel 'p50 latency (ms)'"
    echo "set title 'OBJ.FETCH VIA rdma p50 by rdma-read-min mode ($DEV, $WHERE)'"
    sep="plot"
    k=0
    for m in $MODE_NAMES; do
        k=$((k + 1))
        awk -F, -v m="$m" 'NR > 1 && $1 == m' "$CSV" >"$WORK/$m.csv"
        [ -s "$WORK/$m.csv" ] || continue
        printf "%s '%s' using 3:5 with linespoints pointtype %d title '%s'" \
            "$sep" "$WORK/$m.csv" $((k + 4)) "$m"
        sep=","
    done
    echo
} >"$GP"
if [ "$sep" = plot ]; then
    echo "rdma-threshold-sweep: no data to plot" >&2
    status=1
elif ! gnuplot "$GP" 2>"$WORK/gnuplot.log"; then
    cat "$WORK/gnuplot.log" >&2
    status=1
fi

echo
cat "$MD"
echo
echo "rdma-threshold-sweep: crossover: $CROSS_TEXT. $CAVEAT"
echo "rdma-threshold-sweep: wrote $CSV, $MD, $PNG in $((SECONDS - T_START)) s"
[ "$status" -eq 0 ] || echo "rdma-threshold-sweep: some points failed or took an unexpected path" >&2
exit "$status"
