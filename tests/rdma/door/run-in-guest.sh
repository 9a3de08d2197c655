#!/bin/bash
# run-in-guest.sh - the suite of the RDMA front door ("Redis protocol over
# RDMA", rdma-client-port): real redis-server processes with objstore.so,
# driven by tests/rdma/door/rdma_resp_client over a real RDMA device. Run it
# where RDMA works, through the harness:
#
#   tests/softroce/run.sh tests/rdma/door/run-in-guest.sh
#
# It needs what make builds on the host (make test-rdma-resp does):
# build/objstore.so and build/tests/rdma/rdma_resp_client (OBJSTORE_BUILD
# names another build directory, OBJSTORE_MODULE another module,
# OBJSTORE_PRELOAD what redis-server must preload for it, e.g. libasan).
# Servers are started through tests/lib/nodes.sh. Uses OBJ_RXE_ADDR (default
# 10.99.0.1) and Redis ports 7301-7302 (RDMA ports 27301, 37301-37302).
# Every server start, wait and client run is bounded; the suite takes two to
# three minutes under TCG (plus the guest's boot).
#
# Server 1 has no password and an AOF: reply types round-trip with full
# fidelity, pipelines of 10k requests (their writes reach the AOF), client
# rings from 4 x 64 B to 4096 slots, 100 concurrent connections,
# backpressure from a client that reads late, clients that vanish
# mid-pipeline, garbage ring messages and malformed RESP (each closes that
# client only), refusal of blocking and stateful commands, QUIT, SELECT,
# HELLO. Server 2 has requirepass and an ACL user: NOAUTH, WRONGPASS, AUTH,
# HELLO AUTH, NOPERM, and redis-server's limits before AUTH. Server 1 also
# checks protected mode, maxclients and closes in the middle of a completion
# batch; server 2 the limits on clients that have not authenticated (per
# address, the AUTH deadline, the query buffer before AUTH).
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
# node (tests/lib/nodes.sh), wait up to 180 s for PING (with PASSWORD unless
# it is empty) and for the RDMA door's log line. Returns 0 or 1.
startServer() {
    local name=$1 port=$2 pass=$3 deadline=$((SECONDS + 180))
    shift 3
    nodeStart "$name" "$port" --dbfilename "$name.rdb" --loglevel verbose "$@"
    if nodeWait "$name" "$pass"; then
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

# waitStat PORT FIELD VALUE [AUTHARGS]: wait up to 60 s until FIELD is
# VALUE. Returns 0 or 1.
waitStat() {
    local port=$1 field=$2 want=$3 i
    shift 3
    for i in $(seq 300); do
        [ "$(stat "$port" "$field" "$@")" = "$want" ] && return 0
        sleep 0.2
    done
    return 1
}

# rc PORT ARGS...: run the test client against PORT on $addr; stdin is the
# script. Prints its output; returns its status.
rc() {
    local port=$1
    shift
    echo "== client -p $port $*" >>"$work/client.err"
    timeout 120 "$client" -h "$addr" -p "$port" -t 100 "$@" 2>>"$work/client.err"
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

# ---- server 1: no password ----------------------------------------------------------------

s1=7301
d1=37301

checkReplyTypes() {
    local out
    out=$(rc $d1 <<'EOF'
PING
SET k hello
GET k
GET missing
SET s OK
GET s
TYPE s
ECHO OK
INCR n
INCR n
RPUSH l a b c
LRANGE l 0 -1
LRANGE nolist 0 -1
XADD st 1-1 f v
XRANGE st - +
XREAD COUNT 1 STREAMS st 1-1
HSET h f1 v1
HGETALL h
CONFIG GET maxmemory-policy
FOO bar
INCR k
SET big @rep:x:1048576
GET big
STRLEN big
ECHO @rep:x:1048576
EOF
)
    # fnv: FNV-1a 64 of the bulk, as the client prints long bulks; 5429e61c805d0383
    # is that of 1 MiB of 'x', 30188f6877f8e1c3 (below) that of 3000000 'w'.
    expect "reply types round-trip (status, bulk, null, int, arrays, nested, errors, 1 MiB)" \
        "status:PONG
status:OK
bulk:5:hello
nil
status:OK
bulk:2:OK
status:string
bulk:2:OK
int:1
int:2
int:3
array:3
  bulk:1:a
  bulk:1:b
  bulk:1:c
array:0
bulk:3:1-1
array:1
  array:2
    bulk:3:1-1
    array:2
      bulk:1:f
      bulk:1:v
nilarray
int:1
array:2
  bulk:2:f1
  bulk:2:v1
array:2
  bulk:16:maxmemory-policy
  bulk:10:noeviction
err:ERR unknown command 'FOO', with args beginning with: 'bar' 
err:ERR value is not an integer or out of range
status:OK
bulk:1048576:fnv=5429e61c805d0383
int:1048576
bulk:1048576:fnv=5429e61c805d0383" "$out"
    expect "the data is the server's: TCP sees what RDMA wrote" "hello 2" \
        "$(redis-cli -p $s1 get k) $(redis-cli -p $s1 get n)"
}

checkRefusals() {
    local out
    out=$(rc $d1 <<'EOF'
BLPOP l 0
BRPOP l 1
BLMOVE l l2 LEFT RIGHT 0
BZPOPMIN z 0
XREAD BLOCK 100 STREAMS st $
XREADGROUP GROUP g c BLOCK 0 STREAMS st >
WAIT 1 0
SUBSCRIBE ch
PSUBSCRIBE p*
MONITOR
MULTI
EXEC
WATCH k
OBJ.PUT o1 payload
OBJ.GET o1
OBJ.GET o1 TIMEOUT 10
OBJ.PIN o1
OBJ.CREATE o2 10
OBJ.FETCH o1
OBJ.LOCATE o1
OBJ.NODES
OBJ.EXISTS o1
CLIENT REPLY OFF
PING
EOF
)
    local why="is not supported over RDMA (blocking or stateful)"
    expect "blocking and stateful commands are refused, the rest still work" \
        "err:ERR BLPOP $why
err:ERR BRPOP $why
err:ERR BLMOVE $why
err:ERR BZPOPMIN $why
err:ERR XREAD $why
err:ERR XREADGROUP $why
err:ERR WAIT $why
err:ERR SUBSCRIBE $why
err:ERR PSUBSCRIBE $why
err:ERR MONITOR $why
err:ERR MULTI $why
err:ERR EXEC $why
err:ERR WATCH $why
status:OK
bulk:7:payload
err:ERR OBJ.GET $why
err:ERR OBJ.PIN $why
err:ERR OBJ.CREATE $why
err:ERR OBJ.FETCH $why
err:ERR OBJ.LOCATE $why
err:ERR OBJ.NODES $why
int:1
err:ERR CLIENT $why
status:PONG" "$out"
}

checkUnsealedGet() {
    local out line
    # The object stays created only while the TCP connection that created it
    # is open: hold one on fd 3.
    exec 3<>/dev/tcp/127.0.0.1/$s1
    printf 'OBJ.CREATE pending 5\r\n' >&3
    read -r -t 20 line <&3
    out=$(printf 'OBJ.GET pending\nOBJ.EXISTS pending\n' | rc $d1)
    exec 3>&-
    expect "OBJ.GET of an unsealed object answers at once instead of waiting" \
        "err:NOTSEALED the object is still being created; OBJ.GET over RDMA does not wait (retry when it is sealed)
int:0" "$out"
}

checkSessionCommands() {
    local out
    out=$(rc $d1 <<'EOF'
SELECT 1
SET k in-db-1
GET k
SELECT 0
GET k
SELECT 99
HELLO 3
EOF
)
    expect "SELECT is kept per connection; HELLO 3 is refused" \
        "status:OK
status:OK
bulk:7:in-db-1
status:OK
bulk:5:hello
err:ERR DB index is out of range
err:NOPROTO unsupported protocol version (RDMA clients speak RESP2)" "$out"
    out=$(echo 'HELLO 2' | rc $d1 | head -n 13 |
        awk 'prev == "  bulk:2:id" { sub(/int:[0-9]+/, "int:<id>") } { print; prev = $0 }')
    expect "HELLO 2 answers redis-server's fields" "array:14
  bulk:6:server
  bulk:5:redis
  bulk:7:version
  bulk:$(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/' | awk '{ print length($0) ":" $0 }')
  bulk:5:proto
  int:2
  bulk:2:id
  int:<id>
  bulk:4:mode
  bulk:10:standalone
  bulk:4:role
  bulk:6:master" "$out"
    out=$(printf '*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n' | rc $d1 --raw)
    expect "QUIT answers OK and closes after the reply" "status:PONG
status:OK
disconnected=1" "$out"
    out=$(printf 'PING\r\nECHO "a b" '"'c'"'\r\n\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n' |
        rc $d1 --raw -r 3)
    expect "inline and multibulk requests mix in one stream" "status:PONG
err:ERR wrong number of arguments for 'echo' command
bulk:1:x" "$out"
}

checkPipeline() {
    local out before
    before=$(stat $s1 rdma_client_commands)
    out=$(echo 'INCR pipe' | rc $d1 -q -n 10000)
    expect "a pipeline of 10000 requests gets 10000 replies in order" "replies=10000 errors=0" \
        "$out"
    expect "the pipeline ran exactly 10000 times" "10000" "$(redis-cli -p $s1 get pipe)"
    expect "rdma_client_commands counts them" "$((before + 10000))" \
        "$(stat $s1 rdma_client_commands)"
    # Writes are propagated like a TCP client's: all 10000 INCRs reach the AOF.
    expect "the writes reach the AOF" "10000" \
        "$(cat "$work"/rs1/appendonlydir/*.incr.aof 2>/dev/null | grep -ac '^pipe')"
    out=$(printf 'SET p:k v\nGET p:k\nPING\nECHO @rep:z:3000\n' | rc $d1 -q -n 500 --slots 4 \
        --slot-size 1024)
    expect "a mixed pipeline through a small client ring (4 x 1 KiB)" "replies=2000 errors=0" \
        "$out"
    for geo in "4 64" "4096 64"; do
        out=$(printf 'ECHO @rep:e:3000\nPING\n' | rc $d1 -q -n 20 --slots ${geo% *} \
            --slot-size ${geo#* } --read-delay 500)
        expect "client rings at the wire's limits (${geo% *} slots of ${geo#* } bytes)" \
            "replies=40 errors=0" "$out"
    done
}

checkConcurrency() {
    local out total
    total=$(stat $s1 rdma_clients_total)
    out=$(printf 'INCR conc\nPING\nGET k\n' | rc $d1 -q -c 100)
    expect "100 concurrent connections are all served" \
        "connections=100 replies=300 errors=0" "$out"
    expect "every connection ran its INCR" "100" "$(redis-cli -p $s1 get conc)"
    expect "rdma_clients_total counts 100 more" "$((total + 100))" \
        "$(stat $s1 rdma_clients_total)"
    if waitStat $s1 rdma_clients_connected 0; then
        pass "rdma_clients_connected is back to 0 after they left"
    else
        fail "clients gone" "rdma_clients_connected=$(stat $s1 rdma_clients_connected)"
    fi
}

checkBackpressure() {
    local out
    # 200 replies of 64 KiB (12.5 MiB) to a client that reads nothing for 3 s:
    # the server must stop at the client's credits and hold the rest.
    out=$( (echo 'SET bp @rep:y:65536'; for _ in $(seq 200); do echo 'GET bp'; done) |
        rc $d1 -q --read-delay 3000)
    expect "a client that reads late still gets every reply (backpressure)" \
        "replies=201 errors=0" "$out"
    # 1.8 MB of requests (more than the client's window) asking for 15 MB of
    # replies, from a client that returns credits only with requests or when
    # it has none left to send: while the server is paused with requests
    # left, it must not wait for that client's credits forever.
    out=$(printf 'SET x @rep:a:30000\nGET bp\nGET bp\nGET bp\nGET bp\n' |
        rc $d1 -q -n 60 --read-delay 1000 --lazy-credits)
    expect "a client that returns credits only with its requests does not deadlock" \
        "replies=300 errors=0" "$out"
    out=$( (echo 'SET bp2 @rep:w:3000000'; echo 'GET bp2'; echo 'STRLEN bp2') |
        rc $d1 --read-delay 1000 --slots 4 --slot-size 4096 | tail -n 2)
    expect "a 3 MB reply crosses a 4 x 4 KiB client ring" "bulk:3000000:fnv=30188f6877f8e1c3
int:3000000" "$out"
}

checkVanishingClients() {
    local out pid
    out=$(echo 'INCR vanish' | rc $d1 -q -n 50000 --vanish-after 100)
    if [ $? -eq 0 ] && waitStat $s1 rdma_clients_connected 0; then
        pass "a client that exits mid-pipeline (no disconnect) is cleaned up"
    else
        fail "vanish" "rdma_clients_connected=$(stat $s1 rdma_clients_connected)"
    fi
    (echo 'SET kill @rep:k:20000'; echo 'GET kill') >"$work/kill.script"
    "$client" -h "$addr" -p $d1 -q -n 20000 --read-delay 100000 -t 100 <"$work/kill.script" \
        >/dev/null 2>&1 &
    pid=$!
    sleep 5
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    if waitStat $s1 rdma_clients_connected 0; then
        pass "a client killed with SIGKILL while its replies are held is cleaned up"
    else
        fail "kill -9" "rdma_clients_connected=$(stat $s1 rdma_clients_connected)"
    fi
    out=$(echo PING | rc $d1)
    expect "the server still serves RDMA clients afterwards" "status:PONG" "$out"
}

checkGarbage() {
    local kind out before
    before=$(stat $s1 rdma_client_protocol_errors)
    for kind in slot len credits flags send; do
        out=$(rc $d1 --garbage $kind -t 40)
        expect "garbage ring message ($kind) closes that client" "disconnected=1 status=0" \
            "$out status=$?"
    done
    out=$(printf '*1\r\n$x\r\nPING\r\n' | rc $d1 --raw)
    expect "malformed RESP gets a protocol error, then the connection closes" \
        "err:ERR Protocol error: invalid bulk length
disconnected=1" "$out"
    out=$(printf 'ECHO "unbalanced\r\n' | rc $d1 --raw)
    expect "unbalanced quotes in an inline request are a protocol error" \
        "err:ERR Protocol error: unbalanced quotes in request
disconnected=1" "$out"
    expect "rdma_client_protocol_errors counts each" "$((before + 7))" \
        "$(stat $s1 rdma_client_protocol_errors)"
    expect "other clients are not affected" "status:PONG" "$(echo PING | rc $d1)"
}

# Protected mode, as redis-server applies it: no password and protected-mode
# yes refuse every client that is not 127.0.0.1/::1, and the guest's RDMA
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

# maxclients counts Redis's clients and the door's: with maxclients = others
# + 5, two TCP clients (fds 3 and 4) and 3 RDMA clients fill it (a transient
# redis-cli may come and go while the 3 connect); the next RDMA client gets
# redis-server's error and is closed, the 3 keep working.
checkMaxClients() {
    local others out pid
    others=$(($(redis-cli -p $s1 info clients | awk -F: '/^connected_clients:/ { print $2 + 0 }') - 1))
    redis-cli -p $s1 config set maxclients $((others + 5)) >/dev/null
    exec 3<>/dev/tcp/127.0.0.1/$s1
    echo PING | rc $d1 -q -c 3 --send-delay 8000 >"$work/held.out" &
    pid=$!
    waitStat $s1 rdma_clients_connected 3
    exec 4<>/dev/tcp/127.0.0.1/$s1
    out=$(printf 'PING\r\n' | rc $d1 --raw)
    expect "over maxclients (Redis + RDMA clients) an RDMA client is refused with Redis's error" \
        "err:ERR max number of clients reached
disconnected=1" "$out"
    wait $pid
    expect "the clients admitted before keep working" "connections=3 replies=3 errors=0" \
        "$(cat "$work/held.out")"
    exec 3>&- 4>&-
    redis-cli -p $s1 config set maxclients 10000 >/dev/null
    expect "below maxclients again, RDMA clients are served" "status:PONG" "$(echo PING | rc $d1)"
}

# Item 12: a close in the middle of a completion batch must account for the
# completions already polled, not wait for them until the flush limit (which
# logs "sends not flushed in time"). Clients vanish and are killed in the
# middle of pipelines, repeatedly; the door must never hit that limit.
checkCloseMidBatch() {
    local round pid
    (echo 'SET mb @rep:m:20000'; echo 'GET mb') >"$work/midbatch.script"
    for round in 1 2 3 4; do
        echo 'INCR midbatch' | rc $d1 -q -n 20000 --vanish-after $((round * 300)) >/dev/null
        "$client" -h "$addr" -p $d1 -q -n 5000 -t 100 <"$work/midbatch.script" >/dev/null 2>&1 &
        pid=$!
        sleep 2
        kill -9 $pid 2>/dev/null
        wait $pid 2>/dev/null
    done
    if waitStat $s1 rdma_clients_connected 0; then
        pass "clients closed mid-pipeline are all cleaned up"
    else
        fail "mid-batch" "rdma_clients_connected=$(stat $s1 rdma_clients_connected)"
    fi
    if grep -q 'sends not flushed in time' "$work/rs1.log"; then
        fail "a close in the middle of a completion batch never waits the flush limit" \
            "$(grep -c 'sends not flushed in time' "$work/rs1.log") flush timeouts in the log"
    else
        pass "a close in the middle of a completion batch never waits the flush limit"
    fi
    expect "the server still serves RDMA clients afterwards" "status:PONG" "$(echo PING | rc $d1)"
}

# ---- server 2: requirepass and an ACL user --------------------------------------------------

s2=7302
d2=37302 # rdma-client-port -1: Redis port + 30000

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
err:NOPERM acl verification failed, can't run this command or subcommand." "$out"
    out=$(rc $d2 <<'EOF'
PING
HELLO 2
HELLO 2 AUTH alice nope
HELLO 2 AUTH alice wonder
INCR n
GET k
EOF
)
    expect "HELLO needs AUTH first, HELLO 2 AUTH authenticates" \
        "err:NOAUTH Authentication required.
err:NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time
err:WRONGPASS invalid username-password pair or user is disabled.
array:14
err:NOPERM acl verification failed, can't run this command or subcommand.
bulk:2:v2" "$(echo "$out" | grep -v '^  ')"
    out=$(printf '*11\r\n' | rc $d2 --raw)
    expect "before AUTH, more than 10 arguments is a protocol error" \
        "err:ERR Protocol error: unauthenticated multibulk length
disconnected=1" "$out"
    out=$(printf '*2\r\n$4\r\nAUTH\r\n$20000\r\n' | rc $d2 --raw)
    expect "before AUTH, a bulk over 16 KiB is a protocol error" \
        "err:ERR Protocol error: unauthenticated bulk length
disconnected=1" "$out"
}

# Connections that have not authenticated: at most 16 per address (64 in
# all); the 17th from one address is refused, the 16 can still AUTH.
checkUnauthCap() {
    local out pid i
    printf 'AUTH s3cret\nPING\n' | rc $d2 -q -c 16 --send-delay 4000 >"$work/unauth.out" &
    pid=$!
    waitStat $s2 rdma_clients_connected 16 -a s3cret
    out=$(printf 'PING\r\n' | rc $d2 --raw)
    expect "a 17th connection waiting for AUTH from one address is refused" \
        "err:ERR max number of unauthenticated RDMA clients reached
disconnected=1" "$out"
    wait $pid
    expect "the 16 admitted before can still AUTH and work" "connections=16 replies=32 errors=0" \
        "$(cat "$work/unauth.out")"
}

# A client that never sends anything while a password is required is
# closed after the AUTH deadline, with the reason in the log.
checkAuthDeadline() {
    local out
    out=$(rc $d2 --raw </dev/null)
    expect "a client that never AUTHs is closed after the deadline" "disconnected=1" "$out"
    if grep -q 'closed: no AUTH within the deadline' "$work/rs2.log"; then
        pass "the AUTH deadline is logged"
    else
        fail "auth deadline" "no log line"
    fi
}

# peakRss PORT: the server's peak resident memory in KiB (VmHWM).
peakRss() {
    local pid
    pid=$(REDISCLI_AUTH=s3cret redis-cli -p "$1" info server | awk -F: '/^process_id:/ { print $2 + 0 }')
    awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status"
}

# The query buffer attack: an unauthenticated client fills the reply
# backlog with NOAUTH errors (so the door stops running its requests), then
# streams an endless bulk, returning one credit per round. It must be closed
# with a logged reason before it has streamed 256 MiB, and the server's peak
# memory must not grow by more than a few ring windows.
checkUnauthQueryBuffer() {
    local before out after
    before=$(peakRss $s2)
    # The PINGs (each answered NOAUTH) give the client messages to return its one credit
    # per message on; what counts is how the stream ends.
    out=$( (yes $'PING\r' | head -n 70000; printf '*1\r\n$16384\r\n') |
        rc $d2 --raw --hostile 256 | tail -n 1)
    expect "an unauthenticated client streaming an endless bulk is closed" "disconnected=1" "$out"
    if grep -qE 'unauthenticated client sent more than the door holds before AUTH|did not take its last reply' \
        "$work/rs2.log"; then
        pass "the query buffer attack's close is logged with its reason"
    else
        fail "query buffer attack" "no reason in the log"
    fi
    after=$(peakRss $s2)
    if [ -n "$before" ] && [ -n "$after" ] && [ $((after - before)) -lt 32768 ]; then
        pass "the server's peak memory stayed bounded (+$((after - before)) KiB)"
    else
        fail "query buffer attack" "peak RSS grew from ${before:-?} to ${after:-?} KiB"
    fi
    expect "the server still serves RDMA clients afterwards" "status:PONG" \
        "$(printf 'AUTH s3cret\nPING\n' | rc $d2 | tail -n 1)"
}

# SHUTDOWN from an RDMA client: the door is stopped from inside a command it
# runs, then the server exits (replies still queued are lost, as over TCP).
checkShutdown() {
    local out i
    out=$(printf 'AUTH s3cret\nSHUTDOWN NOSAVE\n' | rc $d2)
    expect "SHUTDOWN over RDMA needs NOW (the call may not block)" "status:OK
err:ERR SHUTDOWN without NOW or ABORT isn't allowed for DENY BLOCKING client" "$out"
    out=$(printf 'AUTH s3cret\r\nSHUTDOWN NOSAVE NOW\r\n' | rc $d2 --raw)
    expect "SHUTDOWN NOSAVE NOW over RDMA stops the server" "disconnected=1" "$out"
    for i in $(seq 50); do
        grep -q 'ready to exit' "$work/rs2.log" && ! REDISCLI_AUTH=s3cret redis-cli -p $s2 ping \
            >/dev/null 2>&1 && break
        sleep 0.2
    done
    if grep -q 'ready to exit' "$work/rs2.log"; then
        pass "the server exited cleanly"
    else
        fail "shutdown" "server 2 did not exit"
    fi
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

rm -rf "$work/rs1/appendonlydir"
if startServer rs1 $s1 "" --protected-mode no --appendonly yes --appendfsync no -- memory 256mb \
    transfer-bind "$addr" cluster-secret door rdma-port 27301 rdma-client-port $d1; then
    pass "server 1 is up with its RDMA door on $addr:$d1"
    checkReplyTypes
    checkRefusals
    checkUnsealedGet
    checkSessionCommands
    checkPipeline
    checkConcurrency
    checkBackpressure
    checkVanishingClients
    checkGarbage
    checkProtectedMode
    checkMaxClients
    checkCloseMidBatch
    if redis-cli -p $s1 ping | grep -q PONG; then
        pass "server 1 survived everything"
    else
        fail "server 1" "no longer answers PING"
    fi
else
    fail "server 1" "did not start"
fi
nodeStop rs1

if startServer rs2 $s2 s3cret --requirepass s3cret -- memory 64mb \
    transfer-bind "$addr" cluster-secret door directory-password s3cret rdma-client-port -1; then
    pass "server 2 (requirepass) is up with its RDMA door on $addr:$d2"
    checkAuth
    checkUnauthCap
    checkAuthDeadline
    checkUnauthQueryBuffer
    checkShutdown
else
    fail "server 2" "did not start"
fi
nodeStop rs2 s3cret

if grep -qv '^== ' "$work/client.err"; then
    echo "--- client stderr ($work/client.err):"
    grep -B1 -v '^== ' "$work/client.err" | head -n 30 | sed 's/^/      /'
fi
for log in rs1 rs2; do
    if grep -qE 'ASSERTION|crashed by signal|Guru Meditation|AddressSanitizer|runtime error' \
        "$work/$log.log" 2>/dev/null; then
        fail "$log" "the server crashed; see $work/$log.log"
    fi
done
echo "rdma door: $passed passed, $failed failed in $((SECONDS - t0)) s"
[ "$failed" -eq 0 ]
