#!/bin/sh
# command-filter-cost.sh - what the module costs plain Redis commands.
#
# The module registers a command filter (module/redis/config.c) that runs
# before every command, so that only a lone CONFIG REWRITE sees secrets.
# This measures its price, with everything else the module does on the
# side (its directory heartbeat, its threads), against the same
# redis-server without the module: two servers on loopback, started with
# the same options, one of them with --loadmodule. For GET, SET, PING
# (inline and multibulk), unpipelined (-P 1) and pipelined (-P 16), it runs
# redis-benchmark against each server in turn (REPS rounds, interleaved so
# drift hits both alike) and reports, as the median of the rounds:
#   ops/s as redis-benchmark reports it;
#   CPU microseconds per operation of the whole server process
#   (utime + stime from /proc/<pid>/stat before and after the run);
#   the ratio module / no-module of each.
# Writes bench/results/command-filter-cost.csv and prints it.
#
# Usage: bench/command-filter-cost.sh [REQUESTS] [REPS]
#   REQUESTS: operations per run at -P 1 (default 100000; -P 16 runs 4x as
#   many, so that their CPU time is not a few clock ticks); REPS: rounds
#   (default 5). Each redis-benchmark run is cut off after 120 s.
set -eu
cd "$(dirname "$0")/.."
REQUESTS=${1:-100000}
REPS=${2:-5}
CLIENTS=50
OUT=bench/results/command-filter-cost.csv
NODES_WORK=${NODES_WORK:-$PWD/build/bench/command-filter-cost}
. tests/lib/nodes.sh
nodesInit
trap nodesStopAll EXIT INT TERM

TICK=$(getconf CLK_TCK)
# The same server options for both; only --loadmodule differs. Transfers
# are off (transfer-port 0): this is about commands, not the transfer port.
plainPort=$(nodesFreePort)
redisStart plain "$plainPort"
nodeWait plain
modPort=$(nodesFreePort)
nodeStart mod "$modPort" -- memory 64mb transfer-port 0
nodeWait mod

# cpuTicks PID: utime + stime of the process, in clock ticks. Fields 14 and
# 15 of /proc/PID/stat, counted after the ")" that ends the command name.
cpuTicks() {
    sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

# runOne PORT PID TEST PIPELINE N: one redis-benchmark run; prints
# "ops_per_s cpu_us_per_op".
runOne() {
    _c0=$(cpuTicks "$2")
    _rps=$(timeout 120 redis-benchmark -h 127.0.0.1 -p "$1" -c "$CLIENTS" -n "$5" -P "$4" \
        -t "$3" --csv | awk -F'"' 'NR == 2 {print $4}')
    _c1=$(cpuTicks "$2")
    echo "$_rps $(( _c1 - _c0 )) $TICK $5" | awk '{printf "%s %.3f\n", $1, $2 * 1e6 / $3 / $4}'
}

RAW=$NODES_WORK/raw.txt
: >"$RAW"
rep=1
while [ "$rep" -le "$REPS" ]; do
    for pipe in 1 16; do
        n=$REQUESTS
        [ "$pipe" = 1 ] || n=$((REQUESTS * 4))
        for t in get set ping_inline ping_mbulk; do
            for mode in plain mod; do
                port=$(nodePort "$mode")
                pid=$(nodePid "$mode")
                echo "$pipe $t $mode $(runOne "$port" "$pid" "$t" "$pipe" "$n")" >>"$RAW"
            done
        done
    done
    echo "round $rep of $REPS done" >&2
    rep=$((rep + 1))
done

mkdir -p bench/results
{
    echo "# bench/command-filter-cost.sh $REQUESTS $REPS (Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')," \
        "$(nproc) CPUs, -c $CLIENTS, median of $REPS rounds, $(date -u +%Y-%m-%d))"
    echo "pipeline,test,requests,ops_s_plain,ops_s_module,ops_ratio,cpu_us_op_plain,cpu_us_op_module,cpu_ratio"
    for pipe in 1 16; do
        n=$REQUESTS
        [ "$pipe" = 1 ] || n=$((REQUESTS * 4))
        for t in get set ping_inline ping_mbulk; do
            med() { # med MODE FIELD: the median of one column over the rounds
                awk -v p="$pipe" -v t="$t" -v m="$1" -v f="$2" \
                    '$1 == p && $2 == t && $3 == m {print $f}' "$RAW" | sort -g |
                    awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
            }
            echo "$pipe $t $n $(med plain 4) $(med mod 4) $(med plain 5) $(med mod 5)" |
                awk '{printf "%s,%s,%s,%.0f,%.0f,%.3f,%.3f,%.3f,%.3f\n", $1, toupper($2), $3,
                      $4, $5, $4 ? $5 / $4 : 0, $6, $7, $6 ? $7 / $6 : 0}'
        done
    done
} >"$OUT"
cat "$OUT"
