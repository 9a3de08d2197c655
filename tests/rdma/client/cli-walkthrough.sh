#!/bin/sh
# cli-walkthrough.sh - redis-cli --rdma (build/redis-cli-rdma, patched by
# bench/redis-cli-rdma.patch) used as a new user would, against an objstore
# node's RDMA door: the README's "Life cycle from redis-cli" session run
# one-shot, piped into interactive mode and typed into a terminal (tmux),
# plus RESP3, AUTH and a refused connect. The piped session's output must
# equal the same session's over TCP with the stock redis-cli (object offsets
# aside), and hold the README's answers.
#
#   cli-walkthrough.sh ADDR RDMA-PORT TCP-PORT AUTH-RDMA-PORT PASSWORD
#
# ADDR: the node's RDMA address; RDMA-PORT/TCP-PORT: a node without a
# password (its RDMA door port and Redis port); AUTH-RDMA-PORT: the
# RDMA door port of a node with requirepass PASSWORD. Run by
# tests/rdma/client/run-in-guest.sh (step 6). Every command is bounded by
# timeout. Prints ok/not ok per check; exit 0 only if all passed.
set -u

A=$1 CPORT=$2 TPORT=$3 APORT=$4 PW=$5
CLI=${REDIS_CLI_RDMA:-build/redis-cli-rdma}
TAG=cliwalk$$
FAILS=0
CHECKS=0
WORK=${TMPDIR:-/tmp}/cli-walkthrough.$$
mkdir -p "$WORK"
TMUX_SESSION=""

# cleanup: the tmux session and scratch files of this run. Can't fail.
cleanup() {
    [ -z "$TMUX_SESSION" ] || tmux kill-session -t "$TMUX_SESSION" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# check NAME WANT GOT: one check; prints both values when they differ.
check() {
    CHECKS=$((CHECKS + 1))
    if [ "$2" = "$3" ]; then
        echo "ok $CHECKS - $1"
    else
        FAILS=$((FAILS + 1))
        echo "not ok $CHECKS - $1"
        echo "# want: $(printf '%s' "$2" | head -c 2000)"
        echo "# got:  $(printf '%s' "$3" | head -c 2000)"
    fi
}

# checkHas NAME NEEDLE HAYSTACK: one check that HAYSTACK contains NEEDLE (a fixed string).
checkHas() {
    CHECKS=$((CHECKS + 1))
    if printf '%s' "$3" | grep -qF -- "$2"; then
        echo "ok $CHECKS - $1"
    else
        FAILS=$((FAILS + 1))
        echo "not ok $CHECKS - $1"
        echo "# wanted to find: $2"
        echo "# in: $(printf '%s' "$3" | head -c 2000)"
    fi
}

# rcli ARGS...: redis-cli --rdma against the open node, bounded.
rcli() {
    timeout 30 "$CLI" --rdma -h "$A" -p "$CPORT" "$@" 2>&1
}

# tcli ARGS...: the stock redis-cli against the same node over TCP, bounded.
tcli() {
    timeout 30 redis-cli -p "$TPORT" "$@" 2>&1
}

# session ID-PREFIX: the README's session, one command a line, with ids under ID-PREFIX.
session() {
    cat <<EOF
OBJ.PUT $1:frame:1 "hello world" META "shape=1x11"
OBJ.GET $1:frame:1
OBJ.CREATE $1:blob 10
OBJ.WRITE $1:blob 0 "0123456789"
OBJ.SEAL $1:blob
OBJ.PIN $1:blob
OBJ.DEL $1:blob
OBJ.RELEASE $1:blob
OBJ.EXISTS $1:blob
EOF
}

# offsetsOut: the arena offset after each "offset" element replaced by N (they differ by run).
offsetsOut() {
    awk 'prev ~ /(offset|gen)"?$/ { sub(/\(integer\) [0-9]+$/, "(integer) N") } { print; prev = $0 }'
}

[ -x "$CLI" ] || {
    echo "not ok - $CLI is missing (make build/redis-cli-rdma on the host)"
    exit 1
}

# ---- one-shot ----
check "one-shot PING" "PONG" "$(rcli PING)"
check "one-shot OBJ.PUT (README line 1)" "OK" \
    "$(rcli OBJ.PUT "$TAG:one:frame:1" "hello world" META "shape=1x11")"
check "one-shot OBJ.GET answers the bytes" "hello world" "$(rcli OBJ.GET "$TAG:one:frame:1")"
check "one-shot OBJ.GET --no-raw prints as the README does" '"hello world"' \
    "$(rcli --no-raw OBJ.GET "$TAG:one:frame:1")"
check "what RDMA put, TCP reads" "hello world" "$(tcli OBJ.GET "$TAG:one:frame:1")"
check "one-shot OBJ.INFO state" "sealed" \
    "$(rcli OBJ.INFO "$TAG:one:frame:1" | awk 'prev == "state" { print } { prev = $0 }')"
checkHas "one-shot error reply" "NOTFOUND" "$(rcli OBJ.GET "$TAG:missing")"
rcli -e OBJ.GET "$TAG:missing" >/dev/null
rc=$?
check "-e: an error reply is exit status 1" "1" "$rc"
# 300000 bytes: more than the door's first RX buffer (64 KiB) and than one
# argument may be (hence -x, the value from stdin).
check "one-shot SET of 300000 bytes (-x)" "OK" \
    "$(head -c 300000 /dev/zero | tr '\0' x | rcli -x SET "$TAG:big")"
check "... and STRLEN over TCP" "300000" "$(tcli STRLEN "$TAG:big")"
check "... and GET back over RDMA intact" "300000 x" \
    "$(rcli GET "$TAG:big" | tr -d '\n' | awk '{ n = length($0); gsub(/x/, ""); print n, $0 == "" ? "x" : "?" }')"
check "-x takes the last argument from stdin" "OK" \
    "$(printf 'from stdin' | rcli -x OBJ.PUT "$TAG:stdin")"
check "... and it arrived" "from stdin" "$(tcli OBJ.GET "$TAG:stdin")"

# ---- the README session piped into interactive mode (one connection owns the created object) ----
session "$TAG:rdma" | timeout 60 "$CLI" --rdma -h "$A" -p "$CPORT" --no-raw >"$WORK/rdma.out" 2>&1
session "$TAG:tcp" | timeout 60 redis-cli -p "$TPORT" --no-raw >"$WORK/tcp.out" 2>&1
rdmaOut=$(offsetsOut <"$WORK/rdma.out")
want='OK
"hello world"
1) offset
2) (integer) N
3) size
4) (integer) 10
5) gen
6) (integer) N
(integer) 10
OK
1) offset
2) (integer) N
3) size
4) (integer) 10
5) meta
6) ""
7) gen
8) (integer) N
DEFERRED
OK
(integer) 0'
check "piped session: the README's answers" "$want" "$rdmaOut"
check "piped session: the same as over TCP" "$(offsetsOut <"$WORK/tcp.out")" "$rdmaOut"
createOff=$(sed -n 4p "$WORK/rdma.out")
pinOff=$(sed -n 12p "$WORK/rdma.out")
check "piped session: OBJ.PIN points where OBJ.CREATE reserved" "$createOff" "$pinOff"
check "piped session: the sealed object is visible over TCP" "hello world" \
    "$(tcli OBJ.GET "$TAG:rdma:frame:1")"
printf 'OBJ.CREATE %s 10\n' "$TAG:left" | rcli >"$WORK/left.out"
check "an object created and left: its reservation was answered" "size" "$(sed -n 3p "$WORK/left.out")"
i=0
while [ $i -lt 50 ] && ! tcli OBJ.INFO "$TAG:left" | grep -q NOTFOUND; do
    sleep 0.1
    i=$((i + 1))
done
checkHas "... and aborted when the RDMA client went (seen over TCP)" "NOTFOUND" \
    "$(tcli OBJ.INFO "$TAG:left")"

# ---- RESP3 ----
out=$(rcli -3 --no-raw HELLO 3)
checkHas "-3: HELLO 3 answers a map with proto 3" '"proto" => (integer) 3' "$out"
out=$(printf 'HELLO 3\nOBJ.GET %s\nOBJ.PIN %s\nOBJ.RELEASE %s\n' "$TAG:one:frame:1" \
    "$TAG:rdma:frame:1" "$TAG:rdma:frame:1" | rcli -3 --no-raw)
check "-3 piped: OBJ.GET and a pin cycle" '"hello world"
1) offset
2) (integer) N
3) size
4) (integer) 11
5) meta
6) "shape=1x11"
7) gen
8) (integer) N
OK' "$(printf '%s\n' "$out" | offsetsOut | tail -n 10)"

# ---- AUTH ----
check "-a PASSWORD: AUTH, then PING" "PONG" \
    "$(timeout 30 "$CLI" --rdma -h "$A" -p "$APORT" -a "$PW" --no-auth-warning PING 2>&1)"
check "--user default -a PASSWORD: ACL-style AUTH" "PONG" \
    "$(timeout 30 "$CLI" --rdma -h "$A" -p "$APORT" --user default -a "$PW" --no-auth-warning \
        PING 2>&1)"
checkHas "no password: NOAUTH" "NOAUTH" "$(timeout 30 "$CLI" --rdma -h "$A" -p "$APORT" PING 2>&1)"
checkHas "a wrong password is refused" "WRONGPASS" \
    "$(timeout 30 "$CLI" --rdma -h "$A" -p "$APORT" -a wrong --no-auth-warning PING 2>&1)"

# ---- refused connect, refused combinations ----
out=$(timeout 30 "$CLI" --rdma -h "$A" -p 1 PING 2>&1)
rc=$?
checkHas "a closed RDMA port: the connect error" "Could not connect to Redis at $A:1" "$out"
check "... and a failing exit status" "1" "$([ "$rc" -ne 0 ] && echo 1 || echo 0)"
checkHas "--rdma with --pipe is refused" "--rdma cannot be combined" \
    "$(timeout 10 "$CLI" --rdma --pipe </dev/null 2>&1)"

# ---- typed into a terminal ----
if command -v tmux >/dev/null 2>&1; then
    TMUX_SESSION=cliwalk$$
    TERM=xterm tmux new-session -d -s "$TMUX_SESSION" -x 120 -y 40 \
        "$CLI --rdma -h $A -p $CPORT; sleep 30"
    # typeLine TEXT WANT: type TEXT and Enter, wait (bounded) until WANT is on the screen.
    typeLine() {
        tmux send-keys -t "$TMUX_SESSION" "$1" Enter
        i=0
        while [ $i -lt 100 ]; do
            screen=$(tmux capture-pane -p -t "$TMUX_SESSION")
            printf '%s' "$screen" | grep -qF -- "$2" && return 0
            sleep 0.2
            i=$((i + 1))
        done
        return 1
    }
    # Type only once the prompt is up: linenoise flushes what was typed before.
    i=0
    until tmux capture-pane -p -t "$TMUX_SESSION" | grep -qF "$A:$CPORT>" || [ $i -ge 100 ]; do
        sleep 0.2
        i=$((i + 1))
    done
    typeLine "OBJ.GET $TAG:one:frame:1" '"hello world"'
    screen=$(tmux capture-pane -p -t "$TMUX_SESSION")
    checkHas "terminal: the prompt names the RDMA address" "$A:$CPORT> OBJ.GET $TAG:one:frame:1" \
        "$screen"
    checkHas "terminal: the reply" '"hello world"' "$screen"
    typeLine "OBJ.CREATE $TAG:tty 3" '4) (integer) 3'
    typeLine "OBJ.WRITE $TAG:tty 0 abc" '(integer) 3'
    typeLine "OBJ.SEAL $TAG:tty" 'OK'
    check "terminal: a create/write/seal typed by hand is visible over TCP" "abc" \
        "$(tcli OBJ.GET "$TAG:tty")"
    # SUBSCRIBE blocks in a read on the connection; Ctrl-C closes the context's
    # descriptor, which must abort that read, and the next command reconnects.
    typeLine "SUBSCRIBE $TAG:ch" "Reading messages"
    i=0
    until [ "$(tcli PUBLISH "$TAG:ch" hello-from-tcp)" = 1 ] || [ $i -ge 50 ]; do
        sleep 0.2
        i=$((i + 1))
    done
    i=0
    until tmux capture-pane -p -t "$TMUX_SESSION" | grep -qF hello-from-tcp || [ $i -ge 100 ]; do
        sleep 0.2
        i=$((i + 1))
    done
    checkHas "terminal: SUBSCRIBE over RDMA gets a PUBLISH from TCP" "hello-from-tcp" \
        "$(tmux capture-pane -p -t "$TMUX_SESSION")"
    tmux send-keys -t "$TMUX_SESSION" C-c
    typeLine "ECHO $TAG-after-ctrl-c" "\"$TAG-after-ctrl-c\""
    checkHas "terminal: after Ctrl-C the next command is answered" "\"$TAG-after-ctrl-c\"" \
        "$(tmux capture-pane -p -t "$TMUX_SESSION")"
    tmux send-keys -t "$TMUX_SESSION" "quit" Enter
    tmux kill-session -t "$TMUX_SESSION" 2>/dev/null
    TMUX_SESSION=""
else
    echo "# tmux is not installed: the terminal checks did not run"
    FAILS=$((FAILS + 1))
fi

tcli DEL "$TAG:big" >/dev/null
echo "# $CHECKS checks, $FAILS failed"
[ "$FAILS" = 0 ]
