#!/bin/bash
# run-in-guest.sh - the suite of the RDMA door (Redis clients over RDMA,
# the module objstore-rdma.so, module/door/): real redis-server processes
# with objstore.so and objstore-rdma.so, driven by tests/rdma/door/rdma_resp_client over a real
# RDMA device, in the Valkey Over RDMA protocol. Run it where RDMA works,
# through the harness:
#
#   tests/softroce/run.sh tests/rdma/door/run-in-guest.sh [CHECK...]
#
# (CHECK names run only those checks, e.g. checkMulti checkAuth.) It
# needs what make builds on the host (make test-rdma-resp does):
# build/objstore.so, build/objstore-rdma.so and build/tests/rdma/rdma_resp_client
# (OBJSTORE_BUILD names another build directory, OBJSTORE_MODULE and
# OBJSTORE_DOOR_MODULE other modules,
# OBJSTORE_PRELOAD what redis-server must preload for it, e.g. libasan).
# Servers are started through tests/lib/nodes.sh. Uses OBJ_RXE_ADDR (default
# 10.99.0.1) and Redis ports 7301-7304 (RDMA ports 27301, 27304, 37301-37302, 37304).
# Every server start, wait and client run is bounded in time.
#
# An RDMA client is a real Redis client, so each check compares it with
# what Redis does for TCP clients: every reply type in RESP2 and RESP3 (byte
# for byte against TCP), BLPOP woken from TCP, OBJ.FETCH from another node,
# the zero-copy life cycle and disconnect-aborts, MULTI/EXEC, pub/sub,
# CLIENT LIST/KILL, output buffer limits, protected mode, maxclients, AUTH
# and ACL, 100 connections, a 10k pipeline, replies and requests larger
# than the RX buffers, clients killed mid-pipeline, broken protocol
# (garbage, out-of-order and oversized control messages, writes past the
# RX buffer), SHUTDOWN from an RDMA client.
# Exits 0 when every check passed, 1 otherwise; logs stay in build/tests/rdma/door/.
set -u

cd "$(dirname "$0")/../../.." || exit 1
repo=$PWD
addr=${OBJ_RXE_ADDR:-10.99.0.1}
addr=${addr%%/*}
build=${OBJSTORE_BUILD:-$repo/build}
work=$build/tests/rdma/door
client=$build/tests/rdma/rdma_resp_client
NODES_WORK=$work
NODES_START_TIMEOUT=180
# shellcheck source=tests/lib/nodes.sh
. tests/lib/nodes.sh
passed=0
failed=0
t0=$SECONDS

mkdir -p "$work" || exit 1
ulimit -l unlimited 2>/dev/null

# pass / fail: record the outcome of check $1 ($2: why it failed). Can't fail.
pass() {
    passed=$((passed + 1))
    echo "PASS  $1  (+$((SECONDS - t0)) s)"
}
fail() {
    failed=$((failed + 1))
    echo "FAIL  $1: $2"
}

# startServer NAME PORT PASSWORD SERVER-ARGS... -- MODULE-ARGS...: start a
# node, wait up to 180 s for PING (with PASSWORD unless empty) and, when it
# loads the door (--door), for the door's log line. Returns 0 or 1.
startServer() {
    local name=$1 port=$2 pass=$3 deadline=$((SECONDS + 180))
    shift 3
    nodeStart "$name" "$port" --dbfilename "$name.rdb" --loglevel verbose "$@"
    if nodeWait "$name" "$pass"; then
        case " $* " in *" --door "*) ;; *) return 0 ;; esac
        while [ $SECONDS -lt $deadline ]; do
            grep -q 'RESP over RDMA on' "$(nodeLog "$name")" && return 0
            grep -q 'RDMA clients are off' "$(nodeLog "$name")" && break
            sleep 0.5
        done
    fi
    echo "--- $name did not come up with its RDMA door; log tail:"
    tail -n 20 "$(nodeLog "$name")"
    return 1
}

# stat PORT FIELD [AUTHARGS]: print one OBJ.STATS field.
stat() {
    local port=$1 field=$2
    shift 2
    timeout 20 redis-cli -p "$port" "$@" --no-auth-warning obj.stats 2>/dev/null |
        awk -v f="$field" 'prev == f { print; exit } { prev = $0 }'
}

# info PORT FIELD [AUTHARGS]: print one INFO field.
info() {
    local port=$1 field=$2
    shift 2
    timeout 20 redis-cli -p "$port" "$@" --no-auth-warning info 2>/dev/null |
        awk -F: -v f="$field" '$1 == f { sub(/\r$/, "", $2); print $2; exit }'
}

# waitFor DESCRIPTION COMMAND...: run COMMAND every 0.2 s for up to 60 s
# until it succeeds. Returns 0 or 1.
waitFor() {
    local i
    shift
    for i in $(seq 300); do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}
statIs() { [ "$(stat "$1" "$2" "${@:4}")" = "$3" ]; }
infoIs() { [ "$(info "$1" "$2" "${@:4}")" = "$3" ]; }

# rc PORT ARGS...: the test client against PORT on $addr over RDMA; stdin is
# the script. Prints its output; returns its status.
rc() {
    local port=$1
    shift
    echo "== client -p $port $*" >>"$work/client.err"
    timeout 120 "$client" -h "$addr" -p "$port" -t 100 "$@" 2>>"$work/client.err"
}

# tc PORT ARGS...: the same client over TCP to 127.0.0.1:PORT.
tc() {
    local port=$1
    shift
    echo "== client --tcp -p $port $*" >>"$work/client.err"
    timeout 120 "$client" --tcp -h 127.0.0.1 -p "$port" -t 100 "$@" 2>>"$work/client.err"
}

# expect NAME EXPECTED ACTUAL: pass when the two texts are equal.
expect() {
    if [ "$2" = "$3" ]; then
        pass "$1"
    else
        fail "$1" "output differs (- expected, + got)"
        echo "$2" >"$work/expected.txt"
        echo "$3" >"$work/got.txt"
        diff -u "$work/expected.txt" "$work/got.txt" | tail -n +3 | head -n 30 |
            sed 's/^/      /'
    fi
}

# ---- server 1: no password ------------------------------------------------------------------

s1=7301
d1=37301
s3=7303

# Every reply type of RESP2 and RESP3 (DEBUG PROTOCOL makes each one), and
# the bytes received over RDMA are exactly those a TCP client receives.
typesScript() {
    cat <<'EOF'
PING
SET k hello
GET k
GET missing
INCR n
RPUSH l a b c
LRANGE l 0 -1
LRANGE nolist 0 -1
BLPOP nolist 0.01
HSET h f1 v1
HGETALL h
SADD s x
SMEMBERS s
ZADD z 1.5 m
ZSCORE z m
FOO bar
INCR k
DEBUG PROTOCOL string
DEBUG PROTOCOL integer
DEBUG PROTOCOL double
DEBUG PROTOCOL bignum
DEBUG PROTOCOL null
DEBUG PROTOCOL array
DEBUG PROTOCOL set
DEBUG PROTOCOL map
DEBUG PROTOCOL attrib
DEBUG PROTOCOL verbatim
DEBUG PROTOCOL true
DEBUG PROTOCOL false
DEL big
SET big @rep:x:300000
GET big
EOF
}

# resetTypes: the keys typesScript uses, as before its first run.
resetTypes() {
    redis-cli -p $s1 del k n l h s z big >/dev/null
}

checkReplyTypes() {
    local out
    resetTypes
    out=$(typesScript | rc $d1 --dump "$work/resp2.rdma" | head -n 15)
    expect "RESP2 reply types over RDMA (status, bulk, nil, int, arrays, nilarray)" \
        "status:PONG
status:OK
bulk:5:hello
nil
int:1
int:3
array:3
  bulk:1:a
  bulk:1:b
  bulk:1:c
array:0
nilarray
int:1
array:2
  bulk:2:f1" "$out"
    resetTypes
    typesScript | tc $s1 --dump "$work/resp2.tcp" >/dev/null
    if cmp -s "$work/resp2.rdma" "$work/resp2.tcp"; then
        pass "RESP2: the bytes over RDMA are those over TCP ($(wc -c <"$work/resp2.tcp") bytes)"
    else
        fail "RESP2 bytes" "$(cmp "$work/resp2.rdma" "$work/resp2.tcp" 2>&1)"
    fi
    # RESP3: HELLO 3 first (its reply holds the connection id: compared apart).
    resetTypes
    (echo 'HELLO 3'; typesScript) | rc $d1 -r 33 | sed '2,20{/^  int:[0-9]*$/d}' >"$work/resp3.rdma"
    resetTypes
    (echo 'HELLO 3'; typesScript) | tc $s1 -r 33 | sed '2,20{/^  int:[0-9]*$/d}' >"$work/resp3.tcp"
    if cmp -s "$work/resp3.rdma" "$work/resp3.tcp" && [ -s "$work/resp3.tcp" ]; then
        pass "RESP3: every reply over RDMA is the one over TCP"
    else
        fail "RESP3 replies" "see diff $work/resp3.rdma $work/resp3.tcp"
    fi
    local t missing=""
    for t in map: set: double:1.5 bignum: null bool:t bool:f verb: attr: 'err:ERR unknown'; do
        grep -q "^ *$t" "$work/resp3.rdma" || missing="$missing $t"
    done
    if [ -z "$missing" ]; then
        pass "RESP3 types seen over RDMA: map set double bignum null bool verbatim attribute"
    else
        fail "RESP3 types" "missing:$missing"
    fi
}

# BLPOP over RDMA blocks the client (not the server) and is woken by LPUSH
# from a TCP client.
checkBlpop() {
    local pid
    redis-cli -p $s1 del bl >/dev/null
    echo 'BLPOP bl 0' | rc $d1 >"$work/blpop.out" &
    pid=$!
    if waitFor blocked infoIs $s1 blocked_clients 1; then
        expect "the server answers TCP clients while an RDMA client blocks" "PONG" \
            "$(redis-cli -p $s1 ping)"
        redis-cli -p $s1 lpush bl woken >/dev/null
    fi
    wait $pid
    expect "BLPOP over RDMA is woken by LPUSH over TCP" "array:2
  bulk:2:bl
  bulk:5:woken" "$(cat "$work/blpop.out")"
}

# OBJ.FETCH, a blocking module command, requested over RDMA, pulls an object
# from node 3.
checkFetch() {
    local out
    redis-cli -p $s3 obj.put fetched "from-node-3" >/dev/null
    out=$(printf 'OBJ.FETCH fetched TIMEOUT 30000\nOBJ.GET fetched\nOBJ.INFO fetched\n' |
        rc $d1 | sed -n '1,3p')
    expect "OBJ.FETCH over RDMA pulls an object from another node" "array:1
  status:OK
bulk:11:from-node-3" "$out"
}

# The zero-copy life cycle with ownership by the RDMA connection.
checkZeroCopy() {
    local out
    redis-cli -p $s1 obj.del zc >/dev/null 2>&1
    out=$(rc $d1 <<'EOF' | grep -v '^  int:'
OBJ.CREATE zc 10
OBJ.WRITE zc 0 0123456789
OBJ.SEAL zc
OBJ.PIN zc
OBJ.RELEASE zc
OBJ.RELEASE zc
OBJ.GET zc
EOF
)
    expect "OBJ.CREATE/WRITE/SEAL/PIN/RELEASE over RDMA (ownership by the connection)" "array:4
  status:offset
  status:size
int:10
status:OK
array:8
  status:offset
  status:size
  status:meta
  bulk:0:
  status:gen
status:OK
err:WRONGSTATE this connection holds no pin on the object
bulk:10:0123456789" "$out"
    out=$(printf 'OBJ.WRITE zc 0 x\n' | rc $d1)
    expect "another RDMA connection may not write a sealed object" \
        "err:WRONGSTATE the object is sealed (immutable)" "$out"
}

# objState ID: print OBJ.INFO's state and pins, or the error.
objState() {
    redis-cli -p $s1 obj.info "$1" 2>&1 | awk 'prev == "state" || prev == "pins" { printf "%s ", $0 }
        /NOTFOUND/ { printf "NOTFOUND" } { prev = $0 }'
}

# A created object is aborted, and pins are dropped, when the RDMA
# connection goes: closed cleanly, or vanished without a word.
checkDisconnectAborts() {
    printf 'OBJ.CREATE gone1 5\n' | rc $d1 >/dev/null
    if waitFor aborted sh -c "redis-cli -p $s1 obj.info gone1 2>&1 | grep -q NOTFOUND"; then
        pass "a created object is aborted when its RDMA client disconnects"
    else
        fail "disconnect aborts" "gone1: $(objState gone1)"
    fi
    printf 'OBJ.CREATE gone2 5\nPING\n' | rc $d1 --vanish-after 2 >/dev/null
    if waitFor aborted sh -c "redis-cli -p $s1 obj.info gone2 2>&1 | grep -q NOTFOUND"; then
        pass "... and when its RDMA client vanishes without disconnecting"
    else
        fail "vanish aborts" "gone2: $(objState gone2)"
    fi
    redis-cli -p $s1 obj.put pinned data >/dev/null
    printf 'OBJ.PIN pinned\nOBJ.PIN pinned\n' | rc $d1 >/dev/null
    if waitFor unpinned sh -c "[ \"\$(redis-cli -p $s1 obj.info pinned | awk 'p == \"pins\" { print; exit } { p = \$0 }')\" = 0 ]"; then
        pass "pins of an RDMA client are dropped when it disconnects"
    else
        fail "pins dropped" "pinned: $(objState pinned)"
    fi
}

checkMulti() {
    local out
    redis-cli -p $s1 del m >/dev/null
    out=$(printf 'MULTI\nSET m 1\nINCR m\nEXEC\nMULTI\nINCR m\nDISCARD\nGET m\n' | rc $d1)
    expect "MULTI/EXEC and DISCARD over RDMA" "status:OK
status:QUEUED
status:QUEUED
array:2
  status:OK
  int:2
status:OK
status:QUEUED
status:OK
bulk:1:2" "$out"
}

# SUBSCRIBE over RDMA, PUBLISH over TCP: messages arrive as pushes.
checkPubSub() {
    local pid
    echo 'SUBSCRIBE news' | rc $d1 -r 3 >"$work/sub.out" &
    pid=$!
    if waitFor subscribed sh -c "redis-cli -p $s1 pubsub numsub news | tail -n 1 | grep -qx 1"; then
        redis-cli -p $s1 publish news first >/dev/null
        redis-cli -p $s1 publish news second >/dev/null
    fi
    wait $pid
    expect "SUBSCRIBE over RDMA receives PUBLISH from TCP" "array:3
  bulk:9:subscribe
  bulk:4:news
  int:1
array:3
  bulk:7:message
  bulk:4:news
  bulk:5:first
array:3
  bulk:7:message
  bulk:4:news
  bulk:6:second" "$(cat "$work/sub.out")"
    echo 'HELLO 3' >"$work/sub3.script"
    echo 'SUBSCRIBE news3' >>"$work/sub3.script"
    rc $d1 -r 3 <"$work/sub3.script" >"$work/sub3.out" &
    pid=$!
    if waitFor subscribed sh -c "redis-cli -p $s1 pubsub numsub news3 | tail -n 1 | grep -qx 1"; then
        redis-cli -p $s1 publish news3 pushed >/dev/null
    fi
    wait $pid
    expect "RESP3 pub/sub over RDMA: messages are push replies" "push:3
  bulk:7:message
  bulk:5:news3
  bulk:6:pushed" "$(tail -n 4 "$work/sub3.out")"
}

# CLIENT LIST shows an RDMA client with its RDMA addresses; CLIENT KILL
# closes it.
checkClientKill() {
    local pid laddr line
    echo 'BLPOP never 0' | rc $d1 --print-addr -r 1 >"$work/kill.out" &
    pid=$!
    waitFor blocked infoIs $s1 blocked_clients 1
    laddr=$(sed -n 's/^laddr=//p' "$work/kill.out")
    line=$(redis-cli -p $s1 client list | grep " addr=$laddr " || true)
    if [ -n "$laddr" ] && echo "$line" | grep -q "laddr=$addr:$d1 .*cmd=blpop"; then
        pass "CLIENT LIST shows the RDMA client with its address ($laddr -> $addr:$d1)"
    else
        fail "CLIENT LIST" "client at '$laddr' not listed as expected: $line"
    fi
    expect "CLIENT KILL ADDR of an RDMA client" "OK" \
        "$(redis-cli -p $s1 client kill "$laddr" 2>&1)"
    wait $pid
    if grep -q 'closed after 0 of 1 replies' "$work/client.err" && waitFor gone statIs $s1 \
        rdma_clients_connected 0; then
        pass "the killed RDMA client is disconnected and gone from the door"
    else
        fail "CLIENT KILL" "rdma_clients_connected=$(stat $s1 rdma_clients_connected)"
    fi
    echo 'BLPOP never 0' | rc $d1 -r 1 >/dev/null &
    pid=$!
    waitFor blocked infoIs $s1 blocked_clients 1
    local id
    id=$(redis-cli -p $s1 client list | awk '/cmd=blpop/ { sub(/^id=/, "", $1); print $1; exit }')
    expect "CLIENT KILL ID of an RDMA client" "1" "$(redis-cli -p $s1 client kill id "$id")"
    wait $pid
}

checkPipeline() {
    local out
    redis-cli -p $s1 del pipe >/dev/null
    out=$(echo 'INCR pipe' | rc $d1 -q -n 10000)
    expect "a pipeline of 10000 requests gets 10000 replies in order" "replies=10000 errors=0" \
        "$out"
    expect "the pipeline ran exactly 10000 times" "10000" "$(redis-cli -p $s1 get pipe)"
}

checkConcurrency() {
    local out total
    redis-cli -p $s1 del conc >/dev/null
    total=$(stat $s1 rdma_clients_total)
    out=$(printf 'INCR conc\nPING\nGET k\n' | rc $d1 -q -c 100)
    expect "100 concurrent connections are all served" \
        "connections=100 replies=300 errors=0" "$out"
    expect "every connection ran its INCR" "100" "$(redis-cli -p $s1 get conc)"
    expect "rdma_clients_total counts 100 more" "$((total + 100))" \
        "$(stat $s1 rdma_clients_total)"
    if waitFor gone statIs $s1 rdma_clients_connected 0; then
        pass "rdma_clients_connected is back to 0 after they left"
    else
        fail "clients gone" "rdma_clients_connected=$(stat $s1 rdma_clients_connected)"
    fi
}

# A 3 MB request (larger than the server's RX buffer: it registers its
# buffer again and again) and a 3 MB reply into a 64 KiB client RX buffer.
checkLarge() {
    local rdma tcp
    printf 'SET large @rep:w:3000000\nGET large\nSTRLEN large\n' >"$work/large.script"
    rdma=$(rc $d1 --rx-size 65536 <"$work/large.script")
    tcp=$(tc $s1 <"$work/large.script")
    expect "a 3 MB request and reply cross the RX buffers (64 KiB on the client)" "$tcp" "$rdma"
    expect "... and the reply is 3000000 bytes" "int:3000000" "$(echo "$rdma" | tail -n 1)"
    rdma=$( (echo 'SET bp @rep:y:65536'; for _ in $(seq 100); do echo 'GET bp'; done) |
        rc $d1 -q --rx-size 65536 --read-delay 2000)
    expect "a client that reads late still gets every reply" "replies=101 errors=0" "$rdma"
}

# Output buffer limits apply: a client that does not read replies beyond
# the limit is closed by Redis.
checkOutputLimit() {
    redis-cli -p $s1 config set client-output-buffer-limit "normal 256kb 256kb 0" >/dev/null
    (echo 'SET obl @rep:o:65536'; for _ in $(seq 100); do echo 'GET obl'; done) |
        rc $d1 -q --rx-size 65536 --read-delay 10000 -t 30 >/dev/null
    redis-cli -p $s1 config set client-output-buffer-limit "normal 0 0 0" >/dev/null
    if grep -q 'closed for overcoming of output buffer limits\|scheduled to be closed ASAP for overcoming of output buffer limits' \
        "$work/rs1.log"; then
        pass "an RDMA client over the output buffer limit is closed by Redis"
    else
        fail "output buffer limit" "no close logged"
    fi
}

checkQuit() {
    local out
    out=$(printf '*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n' | rc $d1 --raw)
    expect "QUIT answers OK (delivered before the close) and closes" "status:PONG
status:OK
disconnected=1" "$out"
    out=$(printf '*1\r\n$x\r\nPING\r\n' | rc $d1 --raw)
    expect "malformed RESP gets Redis's protocol error, then the connection closes" \
        "err:ERR Protocol error: invalid bulk length
disconnected=1" "$out"
}

# Clients killed or vanishing in the middle of pipelines: the server stays
# healthy and nothing leaks (Redis's own client count returns).
# fds PORT: the number of descriptors the server on PORT holds.
fds() {
    ls "/proc/$(info "$1" process_id)/fd" 2>/dev/null | wc -l
}

checkKilledMidPipeline() {
    local base pid round baseFds
    base=$(info $s1 connected_clients)
    baseFds=$(fds $s1)
    (echo 'SET kill @rep:k:20000'; echo 'GET kill') >"$work/kill.script"
    for round in 1 2 3; do
        echo 'INCR vanish' | rc $d1 -q -n 20000 --vanish-after $((round * 500)) >/dev/null
        "$client" -h "$addr" -p $d1 -q -n 5000 -t 100 --read-delay 100000 <"$work/kill.script" \
            >/dev/null 2>&1 &
        pid=$!
        sleep 3
        kill -9 $pid 2>/dev/null
        wait $pid 2>/dev/null
    done
    if waitFor gone statIs $s1 rdma_clients_connected 0 && waitFor gone infoIs $s1 \
        connected_clients "$base"; then
        pass "clients killed mid-pipeline are all freed (connected_clients back to $base)"
    else
        fail "killed mid-pipeline" "rdma_clients_connected=$(stat $s1 rdma_clients_connected) connected_clients=$(info $s1 connected_clients) (was $base)"
    fi
    if waitFor closed sh -c "[ \$(ls /proc/$(info $s1 process_id)/fd | wc -l) -le $baseFds ]"; then
        pass "no descriptor leaks ($baseFds before, $(fds $s1) after)"
    else
        fail "descriptors" "$baseFds before, $(fds $s1) after"
    fi
    expect "the server still serves RDMA clients afterwards" "status:PONG" "$(echo PING | rc $d1)"
}

# Broken protocol, each from a raw-verbs client: the server closes that
# connection with a logged reason and stays healthy.
checkHostile() {
    local kind out before
    before=$(stat $s1 rdma_client_stream_errors)
    for kind in opcode short oversized register-twice overrun-imm overrun-mr; do
        out=$(rc $d1 --hostile $kind -t 40)
        expect "hostile control/data ($kind): the server closes that connection" \
            "disconnected=1 status=0" "$out status=$?"
    done
    if [ "$(stat $s1 rdma_client_stream_errors)" -ge $((before + 6)) ]; then
        pass "rdma_client_stream_errors counts them"
    else
        fail "stream errors" "$(stat $s1 rdma_client_stream_errors) (was $before)"
    fi
    for why in 'bad control message' 'past its RX buffer'; do
        if grep -q "RDMA clients: .*$why" "$work/rs1.log"; then
            pass "the reason is logged ($why)"
        else
            fail "hostile log" "no '$why' in the log"
        fi
    done
    out=$(rc $d1 --hostile bad-length -t 40)
    expect "an empty RX buffer (RegisterXferMemory of 0 bytes): refused in the handshake" \
        "disconnected=1 status=0" "$out status=$?"
    out=$(rc $d1 --hostile silent -t 40)
    expect "a client that never registers its RX buffer is dropped after the handshake deadline" \
        "disconnected=1 status=0" "$out status=$?"
    expect "other clients are not affected" "status:PONG" "$(echo PING | rc $d1)"
}

# Protected mode, as redis-server applies it: no password and protected-mode
# yes refuse every client that is not 127.0.0.1/::1; the guest's RDMA
# address is on a dummy interface, not loopback.
checkProtectedMode() {
    local out
    redis-cli -p $s1 config set protected-mode yes >/dev/null
    out=$(printf 'PING\r\n' | rc $d1 --raw)
    expect "protected mode (no password): a non-loopback RDMA client gets DENIED and is closed" \
        "err:DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.
disconnected=1" "$out"
    redis-cli -p $s1 config set protected-mode no >/dev/null
    expect "with protected-mode no the same client is served" "status:PONG" "$(echo PING | rc $d1)"
}

# maxclients bounds descriptors, as for TCP clients: an RDMA client holds
# two (its address socket and its completion channel), a connection in its
# handshake one. With maxclients = others + 5, two TCP clients (fds 3 and
# 4) and one RDMA client hold four; the next RDMA client's link takes the
# fifth, its address socket would be a sixth: Redis's error, then closed.
# Then with maxclients = others + 3, two connections stuck in their
# handshake leave no room for a client's two.
fdsAtLeast() { [ "$(fds "$1")" -ge "$2" ]; }
checkMaxClients() {
    local others out pid baseFds p1 p2
    others=$(($(info $s1 connected_clients) - 1))
    redis-cli -p $s1 config set maxclients $((others + 5)) >/dev/null
    redis-cli -p $s1 del maxheld >/dev/null
    exec 3<>/dev/tcp/127.0.0.1/$s1
    # Held by a BLPOP until the LPUSH below, however slow the machine.
    echo 'BLPOP maxheld 0' | rc $d1 -q -c 1 >"$work/held.out" &
    pid=$!
    waitFor held statIs $s1 rdma_clients_connected 1
    exec 4<>/dev/tcp/127.0.0.1/$s1
    out=$(printf 'PING\r\n' | rc $d1 --raw)
    expect "over maxclients (an RDMA client counts its two descriptors) it is refused with Redis's error" \
        "err:ERR max number of clients reached
disconnected=1" "$out"
    redis-cli -p $s1 lpush maxheld x >/dev/null
    wait $pid
    expect "the client admitted before keeps working" "replies=1 errors=0" \
        "$(cat "$work/held.out")"
    exec 3>&- 4>&-
    waitFor gone statIs $s1 rdma_clients_connected 0
    others=$(($(info $s1 connected_clients) - 1))
    redis-cli -p $s1 config set maxclients $((others + 3)) >/dev/null
    baseFds=$(fds $s1)
    rc $d1 --hostile silent -t 40 >"$work/silent1.out" &
    p1=$!
    rc $d1 --hostile silent -t 40 >"$work/silent2.out" &
    p2=$!
    waitFor handshakes fdsAtLeast $s1 $((baseFds + 2))
    out=$(printf 'PING\r\n' | rc $d1 --raw)
    expect "connections in their handshake count toward maxclients too" \
        "err:ERR max number of clients reached
disconnected=1" "$out"
    wait $p1 $p2
    redis-cli -p $s1 config set maxclients 10000 >/dev/null
    expect "below maxclients again, RDMA clients are served" "status:PONG" "$(echo PING | rc $d1)"
}

# ---- server 2: requirepass and an ACL user --------------------------------------------------

s2=7302
d2=37302 # objstore.rdma-client-port -1 (the settings from before the door was a
# module of its own, which it still takes): Redis port + 30000

checkAuth() {
    local out
    redis-cli -p $s2 -a s3cret --no-auth-warning acl setuser alice on '>wonder' '~*' '+@all' \
        '-incr' >/dev/null
    out=$(rc $d2 <<'EOF'
GET k
AUTH wrong
AUTH s3cret
SET k v2
GET k
AUTH alice wrong
GET k
AUTH alice wonder
GET k
INCR n
EOF
)
    expect "NOAUTH before AUTH, WRONGPASS for a bad password, then AUTH works; ACLs apply" \
        "err:NOAUTH Authentication required.
err:WRONGPASS invalid username-password pair or user is disabled.
status:OK
status:OK
bulk:2:v2
err:WRONGPASS invalid username-password pair or user is disabled.
bulk:2:v2
status:OK
bulk:2:v2
err:NOPERM this user has no permissions to run the 'incr' command" "$out"
    out=$(printf 'HELLO 3 AUTH alice wonder\nGET k\nINCR n\n' | rc $d2 | grep -v '^  ')
    expect "HELLO 3 AUTH authenticates and switches to RESP3 over RDMA" "map:7
bulk:2:v2
err:NOPERM this user has no permissions to run the 'incr' command" "$out"
    out=$(echo 'AUTH s3cret' | rc $d2 --hostile rx-grow -t 40)
    expect "the server's RX buffer is 64 KiB before AUTH, rx-size (1 MiB) once filled after" \
        "rx=65536 rx=1048576" "$out"
    out=$(printf '*11\r\n' | rc $d2 --raw)
    expect "before AUTH, Redis's limits apply (more than 10 arguments: protocol error)" \
        "err:ERR Protocol error: unauthenticated multibulk length
disconnected=1" "$out"
}

# Before AUTH a client pins small buffers both ways: 20 clients that sent
# PING and got NOAUTH, held open, must not pin rdma-rx-size (1 MiB) of TX
# staging each. Pinned memory is the server's VmPin (registered pages).
vmPinKb() { awk '/^VmPin:/ { print $2 }' "/proc/$1/status"; }
errorsAtLeast() { [ "$(info $s2 total_error_replies -a s3cret)" -ge "$1" ]; }
checkUnauthenticatedPinned() {
    local pid before after errs n=20 cpid per
    pid=$(info $s2 process_id -a s3cret)
    before=$(vmPinKb "$pid")
    errs=$(info $s2 total_error_replies -a s3cret)
    echo PING | "$client" -h "$addr" -p $d2 -q -c $n -r 2 -t 60 >/dev/null 2>>"$work/client.err" &
    cpid=$!
    if ! waitFor noauth errorsAtLeast $((errs + n)); then
        fail "unauthenticated pinned memory" "the $n clients did not all get NOAUTH"
        kill $cpid 2>/dev/null
        wait $cpid 2>/dev/null
        return
    fi
    after=$(vmPinKb "$pid")
    kill $cpid 2>/dev/null
    wait $cpid 2>/dev/null
    per=$(((after - before) / n))
    if [ "$after" -gt "$before" ] && [ "$per" -le 256 ]; then
        pass "an unauthenticated RDMA client pins $per KiB (VmPin $before -> $after KiB for $n)"
    else
        fail "unauthenticated pinned memory" \
            "$per KiB per client (VmPin $before -> $after KiB for $n), expected at most 256"
    fi
    out=$(printf 'AUTH s3cret\nGET @rep:x:10\nSET big @rep:b:3000000\nSTRLEN big\n' | rc $d2)
    expect "after AUTH the buffers grow: a 3 MB request and its replies go through" \
        "status:OK
nil
status:OK
int:3000000" "$out"
}

# SHUTDOWN from an RDMA client: the door is stopped from inside the command
# it runs, then the server exits.
checkShutdown() {
    local out i
    # The reply to AUTH is still in the client's output buffer when the
    # pipelined SHUTDOWN exits the server: lost, as over TCP.
    out=$(printf 'AUTH s3cret\r\nSHUTDOWN NOSAVE\r\n' | rc $d2 --raw)
    expect "SHUTDOWN NOSAVE over RDMA stops the server" "disconnected=1" "$out"
    for i in $(seq 300); do # up to 60 s: bounds a hang
        grep -q 'ready to exit' "$work/rs2.log" && break
        sleep 0.2
    done
    if grep -q 'ready to exit' "$work/rs2.log"; then
        pass "the server exited cleanly"
    else
        fail "shutdown" "server 2 did not exit"
    fi
}

# ---- server 4: freed memory filled (jemalloc junk) -----------------------------------------

s4=7304
d4=37304

# The sweep timer serves every link, and a Redis handler it calls may run
# file events (processEventsWhileBlocked during a slow script) that free
# other links. Recipe: 8 connections stuck in their handshake, then client
# X, the newest (the sweep serves it first, the stuck ones right after it);
# a DEBUG SLEEP longer than the sweep period, during which X's EVALSHA of a
# 1 s busy script arrives and the stuck connections' peers die. When the
# sleep ends the sweep is due and finds X's request before X's own event
# does; the script runs the events that free the stuck links under the
# sweep. Freed memory is junk-filled, so a walk that kept a pointer to one
# of them follows garbage (and the ASan module reports the freed stream).
pidFds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
pidFdsAtLeast() { [ "$(pidFds "$1")" -ge "$2" ]; }
checkSweepDuringSlowScript() {
    local sha pids="" i xpid baseFds lua spid
    lua="local t=redis.call('TIME') local s=t[1]*1000000+t[2] while true do"
    lua="$lua local n=redis.call('TIME') if n[1]*1000000+n[2]-s>1000000 then break end end"
    lua="$lua return 1"
    redis-cli -p $s4 config set busy-reply-threshold 100 >/dev/null
    sha=$(redis-cli -p $s4 script load "$lua")
    # The stuck links live 10 s (the handshake deadline): poll descriptors
    # directly, redis-cli is slow under emulation.
    # (The base may still count the connection of the redis-cli that asked
    # for the pid, hence one less below.)
    spid=$(info $s4 process_id)
    baseFds=$(($(pidFds "$spid") - 1))
    for i in 1 2 3 4 5 6 7 8; do
        "$client" -h "$addr" -p $d4 --hostile silent -t 40 >/dev/null 2>>"$work/client.err" &
        pids="$pids $!"
    done
    waitFor handshakes pidFdsAtLeast "$spid" $((baseFds + 8))
    printf 'EVALSHA %s 0\nPING\n' "$sha" | rc $d4 --send-delay 1500 >"$work/sweep.out" &
    xpid=$!
    waitFor x pidFdsAtLeast "$spid" $((baseFds + 10)) # X: its channel and address socket
    # shellcheck disable=SC2086
    (sleep 0.7 && kill -9 $pids 2>/dev/null) &
    redis-cli -p $s4 debug sleep 2.5 >/dev/null
    wait $xpid
    # shellcheck disable=SC2086
    wait $pids 2>/dev/null
    expect "a slow script run by the sweep while links are freed: answered" "int:1
status:PONG" "$(cat "$work/sweep.out")"
    expect "the server survives the links freed under the sweep" "PONG" \
        "$(redis-cli -p $s4 ping 2>&1)"
}

# ---- run ----------------------------------------------------------------------------------------

nodesInit || {
    echo "FAIL  the module is missing: run make first"
    exit 1
}
[ -x "$client" ] || {
    echo "FAIL  $client is missing: run make test-rdma-resp (it builds the client on the host)"
    exit 1
}
trap nodesStopAll EXIT
: >"$work/client.err"

# want CHECK: whether CHECK runs (every check without arguments).
want() {
    [ -z "$only" ] || case " $only " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}
only="$*"
checks1="checkReplyTypes checkBlpop checkFetch checkZeroCopy checkDisconnectAborts checkMulti
    checkPubSub checkClientKill checkPipeline checkConcurrency checkLarge checkOutputLimit checkQuit
    checkKilledMidPipeline checkHostile checkProtectedMode checkMaxClients"
checks2="checkAuth checkUnauthenticatedPinned checkShutdown"
any1=""
for check in $checks1; do
    if want $check; then any1=1; fi
done
if [ -z "$any1" ]; then
    : # no check of server 1 asked for
elif startServer rs1 $s1 "" --protected-mode no --enable-debug-command yes -- memory 256mb \
    transfer-bind "$addr" cluster-secret door rdma-port 27301 --door bind "$addr" port $d1 &&
    startServer rs3 $s3 "" --protected-mode no -- memory 64mb transfer-bind "$addr" \
        cluster-secret door directory 127.0.0.1:$s1; then
    pass "server 1 is up with its RDMA door on $addr:$d1 (and node 3 for fetches)"
    for check in $checks1; do
        if want $check; then $check; fi
    done
    if redis-cli -p $s1 ping | grep -q PONG; then
        pass "server 1 survived everything"
    else
        fail "server 1" "no longer answers PING"
    fi
else
    fail "server 1" "did not start"
fi
nodeStop rs1
nodeStop rs3

if want checkAuth || want checkUnauthenticatedPinned || want checkShutdown; then
    if startServer rs2 $s2 s3cret --requirepass s3cret -- memory 64mb transfer-bind "$addr" \
        cluster-secret door directory-password s3cret rdma-client-port -1 --door; then
        pass "server 2 (requirepass) is up with its RDMA door on $addr:$d2"
        for check in $checks2; do
            if want $check; then $check; fi
        done
    else
        fail "server 2" "did not start"
    fi
    nodeStop rs2 s3cret
fi

if want checkSweepDuringSlowScript; then
    if MALLOC_CONF=junk:true startServer rs4 $s4 "" --protected-mode no \
        --enable-debug-command yes -- memory 64mb transfer-bind "$addr" cluster-secret door \
        rdma-port 27304 --door bind "$addr" port $d4; then
        pass "server 4 (junk-filled frees) is up with its RDMA door on $addr:$d4"
        checkSweepDuringSlowScript
    else
        fail "server 4" "did not start"
    fi
    nodeStop rs4
fi

if grep -qv '^== ' "$work/client.err"; then
    echo "--- client stderr ($work/client.err):"
    grep -B1 -v '^== ' "$work/client.err" | head -n 30 | sed 's/^/      /'
fi
for log in rs1 rs2 rs3 rs4; do
    if grep -qE 'ASSERTION|crashed by signal|Guru Meditation|AddressSanitizer|runtime error' \
        "$work/$log.log" 2>/dev/null; then
        fail "$log" "the server crashed; see $work/$log.log"
    fi
done
echo "rdma door: $passed passed, $failed failed in $((SECONDS - t0)) s"
[ "$failed" -eq 0 ]
