#!/bin/bash
# compare-tcp.sh - the host benchmark suite behind `make bench`: how objstore's
# TCP paths compare with the references on this machine, in one run.
#
# On 127.0.0.1 it starts two objstore nodes (A owns objects, B fetches them;
# B uses A's Redis as the directory), a plain redis-server and an iperf3
# server, then for every size and client count measures
#   - OBJ.FETCH over TCP, A -> B       (obj-benchmark -t fetch --tcp)
#   - Redis GET of a value that size   (redis-benchmark -t get -d SIZE)
#   - zero-copy local read             (obj-benchmark -t pin, on A: pin + read +
#                                       release, plain and with --pin-cache --prefault, and
#                                       pin + release alone with --no-read)
#   - raw loopback TCP                 (iperf3, 1 stream / one per client)
# plus, for every fetch and GET, the CPU microseconds per operation of each
# server (INFO cpu: used_cpu_sys + used_cpu_user, all threads; for a fetch
# obj-benchmark reads it on A and B around its timed phases only, for GET it
# is read around the redis-benchmark run and divided by the GET calls in
# INFO commandstats), and the 64-byte GET and pin + release the local
# zero-copy targets are stated against. The fetch also runs with FROM A
# (a location hint, no directory lookup) in its own columns.
# It writes $OUT/bench-tcp.csv, $OUT/bench-tcp.md (the tables printed at the
# end), $OUT/bench-tcp-throughput.png and $OUT/bench-tcp-latency.png; into
# bench/results, it also rewrites docs/benchmarks.md's tables (bench/tables.py).
#
# Every run is bounded: -n requests scaled to the size, --seconds for
# obj-benchmark, `timeout` around every tool. Everything it started is
# stopped on exit. Knobs (environment):
#   BENCH_SIZES="4k 64k 1m 16m 64m"  BENCH_CLIENTS="1 4"  BENCH_SECONDS=3
#   BENCH_BYTES=1g (data per run, divided by the size for -n)  BENCH_OUT=bench/results
#   BENCH_REPEAT=2 (runs per measurement; the best one is kept, since other
#   load on the machine can only slow a run down)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=${BENCH_SIZES:-4k 64k 1m 16m 64m}
CLIENTS=${BENCH_CLIENTS:-1 4}
RUN_SECONDS=${BENCH_SECONDS:-3}
REPEAT=${BENCH_REPEAT:-2}
BYTES_PER_RUN=${BENCH_BYTES:-1g}
OUT=${BENCH_OUT:-$ROOT/bench/results}
MODULE=${OBJSTORE_MODULE:-$ROOT/build/objstore.so}
OBJBENCH=$ROOT/build/bin/obj-benchmark
NODE_MEMORY=1gb
TOOL_TIMEOUT=120
START_TIMEOUT=10

# Nodes and the plain Redis are started through the shared launcher, which
# also brings the fail/tool/scratch/cleanup helpers.
NODES_PROG=compare-tcp
NODES_MODULE=$MODULE
NODES_START_TIMEOUT=$START_TIMEOUT
# shellcheck source=tests/lib/nodes.sh
. "$ROOT/tests/lib/nodes.sh"

# ---- tools -------------------------------------------------------------------------------
nodesNeedTools "install it with: make deps; or apt-get install redis-server redis-tools iperf3 gnuplot-nox python3 iproute2" \
    redis-server redis-cli redis-benchmark iperf3 gnuplot python3 timeout awk ss
nodesNeedModule
[ -x "$OBJBENCH" ] || nodesFail "$OBJBENCH is missing (run: make bench-tools)"

# ---- processes we start, and their cleanup -------------------------------------------------
nodesScratch objstore-bench || exit 1
WORK=$NODES_WORK ARENAS=$NODES_ARENAS

# start_redis NAME [module args...]: a redis-server on a free port, an objstore
# node when module args are given (tries a few ports in case another process
# takes one first). Sets PORT_<NAME>.
start_redis() {
    local name=$1 port
    shift
    for _ in 1 2 3 4 5; do
        port=$(nodesFreePort)
        if [ $# -gt 0 ]; then
            nodeStart "$name" "$port" -- memory "$NODE_MEMORY" arena-dir "$ARENAS" "$@"
        else
            redisStart "$name" "$port"
        fi
        if nodeWait "$name" 2>/dev/null; then
            printf -v "PORT_$name" '%s' "$port"
            return 0
        fi
        nodeStop "$name"
        grep -q "Address already in use" "$(nodeLog "$name")" || break
    done
    echo "--- $(nodeLog "$name") ---" >&2
    tail -n 30 "$(nodeLog "$name")" >&2
    nodesFail "redis-server '$name' did not start"
}

# "4k" -> 4096 etc.
to_bytes() {
    local v=$1 n=${1%[kKmMgG]}
    case $v in
        *[kK]) echo $((n * 1024)) ;;
        *[mM]) echo $((n * 1024 * 1024)) ;;
        *[gG]) echo $((n * 1024 * 1024 * 1024)) ;;
        *) echo "$v" ;;
    esac
}

# Requests for a run of $1 bytes: BENCH_BYTES / size, clamped to [64, 30000].
requests_for() {
    local n=$(($(to_bytes "$BYTES_PER_RUN") / $1))
    [ "$n" -lt 64 ] && n=64
    [ "$n" -gt 30000 ] && n=30000
    echo "$n"
}

# Run a tool bounded in time; on failure show its output and stop.
run_tool() {
    local what=$1 out
    shift
    if ! out=$(timeout "$TOOL_TIMEOUT" "$@" 2>&1); then
        echo "$out" >&2
        nodesFail "$what failed: $*"
    fi
    printf '%s\n' "$out"
}

# ---- servers -----------------------------------------------------------------------------
T_START=$(date +%s)
TP_A=$(nodesFreePort)
TP_B=$(nodesFreePort)
start_redis A node-name A transfer-port "$TP_A" rdma-port 0 heartbeat 200 node-ttl 2000
start_redis B node-name B transfer-port "$TP_B" rdma-port 0 heartbeat 200 node-ttl 2000 \
    directory "127.0.0.1:$PORT_A"
start_redis R
IPERF_PORT=$(nodesFreePort)
iperf3 -s -p "$IPERF_PORT" -B 127.0.0.1 >"$WORK/iperf3.log" 2>&1 &
nodesAdopt "$!"

for ((i = 0; i < 100; i++)); do
    nodes=$(redis-cli -p "$PORT_B" OBJ.NODES 2>/dev/null | grep -cx '[AB]' || true)
    [ "$nodes" = 2 ] && break
    sleep 0.1
done
[ "$nodes" = 2 ] || nodesFail "node B does not see both nodes in OBJ.NODES (directory on A)"
for ((i = 0; i < 100; i++)); do
    [ -n "$(ss -Hltn "sport = :$IPERF_PORT")" ] && break
    sleep 0.05
done
[ -n "$(ss -Hltn "sport = :$IPERF_PORT")" ] || {
    cat "$WORK/iperf3.log" >&2
    nodesFail "iperf3 server did not start on port $IPERF_PORT"
}

echo "compare-tcp: nodes A=$PORT_A (transfer $TP_A) B=$PORT_B (transfer $TP_B), redis $PORT_R," \
    "iperf3 $IPERF_PORT; sizes: $SIZES; clients: $CLIENTS" >&2

# ---- CPU per operation -------------------------------------------------------------------
# CPU seconds a server has used, all threads: INFO cpu's used_cpu_sys +
# used_cpu_user (getrusage, microsecond resolution). For GET it is read
# around the run and divided by the GET calls of INFO commandstats, so the
# figure is exact whatever -n did; obj-benchmark reads it itself around its
# timed phases (its cpu_us_node and cpu_us_source columns).

# server_cpu PORT: used_cpu_sys + used_cpu_user of the server at PORT.
server_cpu() {
    redis-cli -p "$1" INFO cpu | tr -d '\r' |
        awk -F: '$1 == "used_cpu_sys" || $1 == "used_cpu_user" { s += $2 } END { printf "%.6f", s }'
}

# cmd_calls PORT COMMAND: how often the server at PORT ran COMMAND (0 if never).
cmd_calls() {
    redis-cli -p "$1" INFO commandstats | tr -d '\r' |
        awk -F'[:=,]' -v k="cmdstat_$2" '$1 == k { print $3; found = 1 } END { if (!found) print 0 }'
}

# ratio A B: A / B with 3 decimals, "n/a" when either is missing or B is 0.
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a == "" || b == "" || a == "n/a" || b == "n/a" || b + 0 == 0) print "n/a"
        else printf "%.3f", a / b }'
}

# measure FIELD CPUSPEC COMMAND...: run a measurement REPEAT times and keep the
# CSV data row (quotes removed) with the highest value in column FIELD, in
# BEST. Other processes on the machine only ever make a run slower, so the
# best run is the least disturbed one. CPUSPEC is "" or "PORT:COMMAND": for
# the kept run BEST_CPU holds the CPU us per COMMAND call of the server at
# PORT over the run.
measure() {
    local field=$1 spec=$2 out row i port="" cmd="" calls0 cpu0 cpu
    shift 2
    BEST="" BEST_CPU=""
    [ -z "$spec" ] || IFS=: read -r port cmd <<<"$spec"
    for ((i = 0; i < REPEAT; i++)); do
        if [ -n "$spec" ]; then
            calls0=$(cmd_calls "$port" "$cmd")
            cpu0=$(server_cpu "$port")
        fi
        out=$(run_tool "$1" "$@")
        cpu=""
        if [ -n "$spec" ]; then
            cpu=$(awk -v a="$cpu0" -v b="$(server_cpu "$port")" \
                -v n=$(($(cmd_calls "$port" "$cmd") - calls0)) \
                'BEGIN { if (n > 0) printf "%.1f", (b - a) * 1e6 / n; else print "n/a" }')
        fi
        row=$(printf '%s\n' "$out" | tail -n 1 | tr -d '"')
        [ "$(echo "$row" | awk -F, '{ print NF }')" -ge "$field" ] ||
            nodesFail "unexpected output of $*: $out"
        if [ -z "$BEST" ] || awk -F, -v a="$(echo "$row" | cut -d, -f"$field")" \
            -v b="$(echo "$BEST" | cut -d, -f"$field")" 'BEGIN { exit !(a > b) }'; then
            BEST=$row BEST_CPU=$cpu
        fi
    done
}

# ---- measurements --------------------------------------------------------------------------
mkdir -p "$OUT"
CSV=$OUT/bench-tcp.csv
COLUMNS_CSV="size,size_bytes,clients"
COLUMNS_CSV+=",fetch_mb_s,fetch_ops_s,fetch_p50_ms,fetch_p99_ms"
COLUMNS_CSV+=",fetch_cpu_a_us,fetch_cpu_b_us,fetch_cpu_us"
COLUMNS_CSV+=",fetch_from_mb_s,fetch_from_p50_ms,fetch_from_p99_ms,fetch_from_cpu_us"
COLUMNS_CSV+=",redis_get_mb_s,redis_get_ops_s,redis_get_p50_ms,redis_get_p99_ms,redis_get_cpu_us"
COLUMNS_CSV+=",fetch_vs_redis,fetch_p50_vs_redis,fetch_cpu_vs_redis"
COLUMNS_CSV+=",pin_mb_s,pin_ops_s,pin_p50_ms,pin_p99_ms,pin_vs_redis"
COLUMNS_CSV+=",pin_cache_mb_s,pin_cache_p50_ms,pin_cache_p99_ms,pin_cache_vs_redis"
COLUMNS_CSV+=",pin_noread_p50_ms,pin_cache_noread_p50_ms"
COLUMNS_CSV+=",iperf3_mb_s,fetch_vs_iperf3,iperf3_1_mb_s,fetch_vs_iperf3_1"
echo "$COLUMNS_CSV" >"$CSV"

declare -A IPERF
for c in $CLIENTS 1; do
    [ -n "${IPERF[$c]:-}" ] && continue
    IPERF[$c]=0
    for ((i = 0; i < REPEAT; i++)); do
        json=$(run_tool "iperf3 -P $c" iperf3 -c 127.0.0.1 -p "$IPERF_PORT" -t 3 -P "$c" -J)
        mbs=$(printf '%s' "$json" | python3 -c 'import json, sys
print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e6))')
        awk -v a="$mbs" -v b="${IPERF[$c]}" 'BEGIN { exit !(a > b) }' && IPERF[$c]=$mbs
    done
    echo "compare-tcp: iperf3 loopback, $c stream(s): ${IPERF[$c]} MB/s" >&2
done

# The small-object reference of the pin targets: GET of 64 bytes and pin +
# release of 64 bytes without reading, with and without the pin cache, 1 client.
run_tool "redis SET 64" redis-benchmark -p "$PORT_R" -t set -n 1 -c 1 -d 64 -q >/dev/null
measure 2 "$PORT_R:get" redis-benchmark -p "$PORT_R" -t get -c 1 -n 30000 -d 64 --csv
GET64_P50=$(echo "$BEST" | cut -d, -f5) GET64_CPU=$BEST_CPU
measure 4 "" "$OBJBENCH" -p "$PORT_A" -t pin --no-read -c 1 -d 64 -n 30000 \
    --seconds "$RUN_SECONDS" --csv
PIN64_P50=$(echo "$BEST" | cut -d, -f6)
measure 4 "" "$OBJBENCH" -p "$PORT_A" -t pin --no-read --pin-cache -c 1 -d 64 -n 30000 \
    --seconds "$RUN_SECONDS" --csv
PINC64_P50=$(echo "$BEST" | cut -d, -f6)
echo "compare-tcp: 64 B: GET p50 $GET64_P50 ms ($GET64_CPU us CPU), pin+release p50" \
    "$PIN64_P50 ms, with the pin cache $PINC64_P50 ms" >&2

for size in $SIZES; do
    bytes=$(to_bytes "$size")
    n=$(requests_for "$bytes")
    # The GET key of redis-benchmark (no -r: one literal key) holds a value of this size.
    run_tool "redis SET" redis-benchmark -p "$PORT_R" -t set -n 1 -c 1 -d "$bytes" -q >/dev/null
    for c in $CLIENTS; do
        echo "compare-tcp: size $size ($bytes bytes), $c client(s), -n $n" >&2
        # obj-benchmark rows: test,size,clients,ops,mb,p50,p99,p999,max,cpu_us_node,
        # cpu_us_source (node = B, the destination; source = A)
        measure 4 "" "$OBJBENCH" -p "$PORT_B" --source-port "$PORT_A" -t fetch --tcp \
            -c "$c" -d "$bytes" -n "$n" --seconds "$RUN_SECONDS" --csv
        f=$BEST
        fcb=$(echo "$f" | cut -d, -f10) fca=$(echo "$f" | cut -d, -f11)
        fc=$(awk -v a="$fca" -v b="$fcb" 'BEGIN { printf "%.1f", a + b }')
        measure 4 "" "$OBJBENCH" -p "$PORT_B" --source-port "$PORT_A" -t fetch \
            --tcp --from A -c "$c" -d "$bytes" -n "$n" --seconds "$RUN_SECONDS" --csv
        ff=$(echo "$BEST" | awk -F, '{ printf "%s,%s,%s,%.1f", $5, $6, $7, $10 + $11 }')
        measure 4 "" "$OBJBENCH" -p "$PORT_A" -t pin -c "$c" -d "$bytes" -n "$n" \
            --seconds "$RUN_SECONDS" --csv
        p=$BEST
        measure 4 "" "$OBJBENCH" -p "$PORT_A" -t pin --pin-cache --prefault -c "$c" -d "$bytes" \
            -n "$n" --seconds "$RUN_SECONDS" --csv
        pc=$BEST
        # pin + release alone is cheap at any size: as many requests as the 64 B reference.
        measure 4 "" "$OBJBENCH" -p "$PORT_A" -t pin --no-read -c "$c" -d "$bytes" -n 30000 \
            --seconds "$RUN_SECONDS" --csv
        pn=$BEST
        measure 4 "" "$OBJBENCH" -p "$PORT_A" -t pin --no-read --pin-cache -c "$c" -d "$bytes" \
            -n 30000 --seconds "$RUN_SECONDS" --csv
        pcn=$BEST
        # redis-benchmark rows: test,rps,avg,min,p50,p95,p99,max
        measure 2 "$PORT_R:get" redis-benchmark -p "$PORT_R" -t get -c "$c" -n "$n" \
            -d "$bytes" --csv
        r=$BEST rc=$BEST_CPU
        case $r in GET,*) ;; *) nodesFail "no GET row in redis-benchmark output: $r" ;; esac
        fmb=$(echo "$f" | cut -d, -f5) fp50=$(echo "$f" | cut -d, -f6)
        rops=$(echo "$r" | cut -d, -f2) rp50=$(echo "$r" | cut -d, -f5)
        rmb=$(awk -v o="$rops" -v b="$bytes" 'BEGIN { printf "%.2f", o * b / 1e6 }')
        pmb=$(echo "$p" | cut -d, -f5) pcmb=$(echo "$pc" | cut -d, -f5)
        printf '%s\n' "$size,$bytes,$c,$fmb,$(echo "$f" | cut -d, -f4),$fp50,$(echo "$f" |
            cut -d, -f7),$fca,$fcb,$fc,$ff,$rmb,$rops,$rp50,$(echo "$r" |
            cut -d, -f7),$rc,$(ratio "$fmb" "$rmb"),$(ratio "$fp50" "$rp50"),$(ratio "$fc" "$rc"),$pmb,$(echo "$p" |
            cut -d, -f4),$(echo "$p" | cut -d, -f6),$(echo "$p" | cut -d, -f7),$(ratio "$pmb" "$rmb"),$pcmb,$(echo "$pc" |
            cut -d, -f6),$(echo "$pc" | cut -d, -f7),$(ratio "$pcmb" "$rmb"),$(echo "$pn" |
            cut -d, -f6),$(echo "$pcn" | cut -d, -f6),${IPERF[$c]},$(ratio "$fmb" "${IPERF[$c]}"),${IPERF[1]},$(ratio "$fmb" "${IPERF[1]}")" >>"$CSV"
    done
done

# ---- tables ----------------------------------------------------------------------------------
MD=$OUT/bench-tcp.md
CMDLINE="BENCH_SIZES=\"$SIZES\" BENCH_CLIENTS=\"$CLIENTS\" BENCH_SECONDS=$RUN_SECONDS"
CMDLINE+=" BENCH_REPEAT=$REPEAT BENCH_BYTES=$BYTES_PER_RUN make bench"
python3 "$ROOT/bench/bench_tcp_tables.py" "$CSV" "$(nproc)" "$REPEAT" "$CMDLINE" \
    "$GET64_P50" "$GET64_CPU" "$PIN64_P50" "$PINC64_P50" >"$MD" ||
    nodesFail "could not write the tables ($MD)"
# docs/benchmarks.md shows them (bench/tables.py), when they were written to bench/results.
if [ "$OUT" -ef "$ROOT/bench/results" ]; then
    python3 "$ROOT/bench/tables.py" || nodesFail "could not rewrite docs/benchmarks.md's tables"
fi

# ---- plots -------------------------------------------------------------------------------------
GP=$WORK/plot.gp
XTICS=""
for size in $SIZES; do
    XTICS="$XTICS${XTICS:+, }\"$size\" $(to_bytes "$size")"
done
# One data file per client count: gnuplot joins consecutive points only.
for c in $CLIENTS; do
    awk -F, -v c="$c" 'NR > 1 && $3 == c' "$CSV" >"$WORK/c$c.csv"
done
FETCH_RGB="#7b2fbe" REDIS_RGB="#1b9e3e" PIN_RGB="#1f6fd1" IPERF_RGB="#808080"
PINC_RGB="#e07b00"
# col NAME: the CSV column number of NAME.
col() {
    head -n 1 "$CSV" | tr ',' '\n' | awk -v k="$1" '$0 == k { print NR; exit }'
}

# plot_series COLUMNS...: one gnuplot "plot" command; each argument is
# "column|colour|with|title" and is drawn once per client count, whose index
# picks the dash type and point type.
plot_series() {
    local sep="plot" k=0 c spec col rgb with title
    for c in $CLIENTS; do
        k=$((k + 1))
        for spec in "$@"; do
            IFS='|' read -r col rgb with title <<<"$spec"
            printf "%s '%s' using 2:%s with %s lc rgb '%s' dashtype %d pointtype %d title '%s'" \
                "$sep" "$WORK/c$c.csv" "$col" "$with" "$rgb" "$k" $((k * 2 + 5)) "${title//@/$c}"
            sep=","
        done
    done
    echo
}
{
    echo "set datafile separator ','"
    echo "set terminal pngcairo size 1000,600 noenhanced"
    echo "set logscale xy"
    echo "set xtics ($XTICS)"
    echo "set grid"
    echo "set key outside right"
    echo "set xlabel 'object size (bytes)'"
    echo "set output '$OUT/bench-tcp-throughput.png'"
    echo "set title 'Throughput vs object size, loopback TCP ($(nproc) CPUs)'"
    echo "set ylabel 'MB/s (10^6 bytes/s)'"
    plot_series "$(col fetch_mb_s)|$FETCH_RGB|linespoints|OBJ.FETCH tcp c=@" \
        "$(col redis_get_mb_s)|$REDIS_RGB|linespoints|Redis GET c=@" \
        "$(col pin_mb_s)|$PIN_RGB|linespoints|pin+read (zero-copy) c=@" \
        "$(col pin_cache_mb_s)|$PINC_RGB|linespoints|pin+read, cache+prefault c=@" \
        "$(col iperf3_mb_s)|$IPERF_RGB|lines|iperf3 @ stream(s)"
    echo "set output '$OUT/bench-tcp-latency.png'"
    echo "set title 'p50 latency vs object size, loopback TCP ($(nproc) CPUs)'"
    echo "set ylabel 'p50 latency (ms)'"
    plot_series "$(col fetch_p50_ms)|$FETCH_RGB|linespoints|OBJ.FETCH tcp c=@" \
        "$(col redis_get_p50_ms)|$REDIS_RGB|linespoints|Redis GET c=@" \
        "$(col pin_p50_ms)|$PIN_RGB|linespoints|pin+read (zero-copy) c=@" \
        "$(col pin_cache_p50_ms)|$PINC_RGB|linespoints|pin+read, cache+prefault c=@"
} >"$GP"
gnuplot "$GP" 2>"$WORK/gnuplot.log" || { cat "$WORK/gnuplot.log" >&2; nodesFail "gnuplot failed"; }

cat "$MD"
echo
echo "compare-tcp: wrote $CSV, $MD, $OUT/bench-tcp-throughput.png, $OUT/bench-tcp-latency.png" \
    "in $(($(date +%s) - T_START)) s"
