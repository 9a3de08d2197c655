#!/bin/bash
# selftest.sh - smoke test proving that verbs and rdma_cm work where the
# Soft-RoCE suites run: the device is listed and its port is ACTIVE, perftest
# moves data both with RDMA WRITE over rdma_cm and with RDMA READ over the
# plain verbs path (socket exchange of QP numbers), and, when rdmacm-utils is
# installed, rping completes a few round trips. Run it through the harness:
#
#   tests/softroce/run.sh tests/softroce/selftest.sh
#
# Uses OBJ_RXE_ADDR (default 10.99.0.1) and OBJ_RXE_DEV (default rxe0), both
# set by the harness; OBJ_SELFTEST_PORT (default 18515) is the first of three
# ports used on that address. Every step is bounded by OBJ_SELFTEST_TIMEOUT
# seconds (default 120). OBJ_SELFTEST_LOGS=DIR keeps the tools' logs there.
# Exits 0 when every check passed (rping may be skipped), 1 otherwise.
set -uo pipefail

addr=${OBJ_RXE_ADDR:-10.99.0.1}
addr=${addr%%/*}
dev=${OBJ_RXE_DEV:-rxe0}
port=${OBJ_SELFTEST_PORT:-18515}
limit=${OBJ_SELFTEST_TIMEOUT:-120}
passed=0
failed=0
step_start=$SECONDS
if [ -n "${OBJ_SELFTEST_LOGS:-}" ]; then
    logs=$OBJ_SELFTEST_LOGS
    mkdir -p "$logs" || exit 1
else
    logs=$(mktemp -d "${TMPDIR:-/tmp}/selftest.XXXXXXXX") || exit 1
    trap 'rm -rf "$logs"' EXIT
fi

# pass / fail / skip: record the outcome of check $1 and the time since the
# previous outcome; fail also prints the tails of the logs named after the
# check, so a failure explains itself. Can't fail.
pass() {
    passed=$((passed + 1))
    echo "PASS  $1 ($((SECONDS - step_start)) s)"
    step_start=$SECONDS
}
fail() {
    local f
    failed=$((failed + 1))
    echo "FAIL  $1: $2 ($((SECONDS - step_start)) s)"
    for f in "$logs/$1".*; do
        [ -f "$f" ] || continue
        echo "  --- ${f##*/}"
        tail -n 20 "$f" | sed 's/^/  | /'
    done
    step_start=$SECONDS
}
skip() {
    echo "SKIP  $1: $2"
    step_start=$SECONDS
}

# checkDevice: ibv_devices must list $dev. Records pass or fail.
checkDevice() {
    if ! timeout "$limit" ibv_devices >"$logs/devices.out" 2>&1; then
        fail devices "ibv_devices failed"
    elif awk -v d="$dev" 'seen && $1 == d { found = 1 } /^ *-+/ { seen = 1 }
                          END { exit !found }' "$logs/devices.out"; then
        pass "devices: ibv_devices lists $dev"
    else
        fail devices "ibv_devices does not list $dev"
    fi
}

# checkPort: port 1 of $dev must be PORT_ACTIVE. Records pass or fail.
checkPort() {
    if ! timeout "$limit" ibv_devinfo -d "$dev" >"$logs/port.out" 2>&1; then
        fail port "ibv_devinfo -d $dev failed"
    elif grep -q 'state:.*PORT_ACTIVE' "$logs/port.out"; then
        pass "port: $dev port 1 is PORT_ACTIVE"
    else
        fail port "$dev port 1 is not PORT_ACTIVE"
    fi
}

# waitListening: wait up to $limit seconds, while process $2 lives, until
# something listens on port $1: a TCP socket (perftest's exchange) or an
# rdma_cm id (perftest -R, rping). Servers print their banners before they
# listen, so the banner cannot be the signal. Returns 0 once listening,
# 1 otherwise.
waitListening() {
    local deadline=$((SECONDS + limit))
    while [ "$SECONDS" -lt "$deadline" ]; do
        kill -0 "$2" 2>/dev/null || return 1
        if ss -ltnH "sport = :$1" 2>/dev/null | grep -q . ||
            rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN .*src-addr [^ ]*:$1 "; then
            return 0
        fi
        sleep 0.2
    done
    return 1
}

# runPair: for check $1, run server command $2 on port $3, wait until it
# listens, then run client command $4 (both shell text, both already bounded
# by timeout). The client is retried at most three times, a second apart,
# while the server still runs, in case readiness was misjudged. Returns 0
# when both exit 0, 1 otherwise; logs land in $logs/$1.server and
# $logs/$1.client.
runPair() {
    local name=$1 server=$2 p=$3 client=$4 spid crc=1 src=0 try
    sh -c "$server" >"$logs/$name.server" 2>&1 &
    spid=$!
    waitListening "$p" "$spid" || echo "--- server not seen listening on $p" >>"$logs/$name.client"
    for try in 1 2 3; do
        kill -0 "$spid" 2>/dev/null || break
        echo "--- attempt $try" >>"$logs/$name.client"
        sh -c "$client" >>"$logs/$name.client" 2>&1
        crc=$?
        [ "$crc" -ne 0 ] || break
        sleep 1
    done
    if [ "$crc" -ne 0 ]; then
        kill "$spid" 2>/dev/null
    fi
    wait "$spid" || src=$?
    [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]
}

# checkPerftest: run perftest tool $2 as server and client on $addr:$3 with
# 64 KiB messages and 100 iterations; $4 is "-R" to connect through rdma_cm
# or empty for the socket exchange. Records pass or fail for check $1.
checkPerftest() {
    local name=$1 tool=$2 p=$3 cm=$4 args result
    if ! command -v "$tool" >/dev/null 2>&1; then
        fail "$name" "$tool not found (install perftest)"
        return
    fi
    args="-d $dev $cm -F -s 65536 -n 100 -p $p"
    if runPair "$name" "timeout $limit $tool $args" "$p" "timeout $limit $tool $args $addr"; then
        result=$(awk '$1 == 65536 && $2 == 100 { print $4 " MB/s" }' "$logs/$name.client" |
            tail -n 1)
        if [ -n "$result" ]; then
            pass "$name: $tool${cm:+ $cm} 64 KiB x 100 to $addr:$p, average $result"
        else
            fail "$name" "$tool exited 0 but printed no result line"
        fi
    else
        fail "$name" "$tool server/client pair failed"
    fi
}

# checkRping: ten rping round trips over rdma_cm on $addr:$1, skipped when
# rping (rdmacm-utils) is not installed. Records pass, fail or skip.
checkRping() {
    local p=$1 count=10 got
    if ! command -v rping >/dev/null 2>&1; then
        skip rping "rping not installed (package rdmacm-utils)"
        return
    fi
    if runPair rping "timeout $limit rping -s -a $addr -p $p -C $count" "$p" \
        "timeout $limit rping -c -a $addr -p $p -C $count -S 64 -v"; then
        got=$(grep -c '^ping data:' "$logs/rping.client")
        if [ "$got" -ge "$count" ]; then
            pass "rping: $count round trips to $addr:$p"
        else
            fail rping "rping exited 0 after $got of $count round trips"
        fi
    else
        fail rping "rping server/client pair failed"
    fi
}

echo "selftest: device $dev, address $addr, ulimit -l $(ulimit -l)"
checkDevice
checkPort
checkPerftest write_bw_cm ib_write_bw "$port" -R
checkPerftest read_bw_verbs ib_read_bw "$((port + 1))" ""
checkRping "$((port + 2))"
echo "selftest: $passed passed, $failed failed in $SECONDS s"
[ "$failed" -eq 0 ]
