# shellcheck shell=sh
# nodes.sh - the one way shell scripts (bench/*.sh, the guest suites under
# tests/rdma/) start objstore nodes and plain Redis servers. Source it (POSIX
# sh; bash works too) after setting what differs from the defaults:
#
#   NODES_REPO           the repository (default: the current directory)
#   NODES_WORK           scratch directory for logs and server dirs (required;
#                        nodesInit creates it)
#   NODES_MODULE         the module (default: $OBJSTORE_MODULE, else
#                        $OBJSTORE_BUILD/objstore.so, else <repo>/build/objstore.so)
#   NODES_DOOR_MODULE    the RDMA door module (default: $OBJSTORE_DOOR_MODULE, else
#                        objstore-rdma.so beside NODES_MODULE)
#   NODES_PRELOAD        LD_PRELOAD for the servers (default: $OBJSTORE_PRELOAD)
#   NODES_START_TIMEOUT  seconds a start may take (default 60; under TCG an
#                        arena takes long to register)
#   NODES_PROG           the name nodesFail puts before its message (default nodes.sh)
#
# Functions (NAME is a shell identifier; a server's log is $NODES_WORK/NAME.log,
# its --dir $NODES_WORK/NAME):
#
#   nodesInit                        create $NODES_WORK; check the module exists
#   nodeStart NAME PORT [SERVER-ARGS...] [-- MODULE-ARGS... [--door DOOR-ARGS...]]
#                                    redis-server on 127.0.0.1:PORT, in the
#                                    background; with "--", the module loaded
#                                    with MODULE-ARGS; with "--door" as well, the
#                                    RDMA door module after it, with DOOR-ARGS
#                                    (port, bind, rx-size: docs/rdma.md). Does not wait.
#   nodeStartRdma NAME PORT ADDR DIR-PORT [MODULE-ARGS...]
#                                    a node with TCP and RDMA transfer on ADDR
#                                    (ports PORT+10000, PORT+20000), its arena in
#                                    $NODES_ARENAS, its directory the node on
#                                    DIR-PORT (empty: its own Redis)
#   redisStart NAME PORT [SERVER-ARGS...]
#                                    the same without the module: a plain Redis
#   nodeWait NAME [PASSWORD]         wait (bounded) until it answers PING;
#                                    returns 1 with its log tail on stderr
#   nodeUp NAME [PASSWORD]           nodeStart's or redisStart's process answers PING now
#   nodeWaitRdma NAME                nodeWait, then the node's RDMA must be up
#   nodePort NAME / nodePid NAME / nodeLog NAME
#   nodeStop NAME [PASSWORD]         SHUTDOWN NOSAVE, wait (bounded), else kill
#   nodesStopAll                     kill every server started here and reap it
#                                    (for an EXIT trap). Can't fail.
#   nodesFreePort [ADDR]             print a TCP port free on ADDR right now
#
# For the scripts around the nodes (bench/*.sh):
#
#   nodesFail MESSAGE...             "$NODES_PROG: MESSAGE" on stderr, exit 1
#   nodesNeedTools HINT TOOL...      nodesFail naming the first TOOL not on PATH,
#                                    with HINT (how to install them)
#   nodesNeedModule                  nodesFail unless $NODES_MODULE exists
#   nodesScratch TAG                 make NODES_WORK (under $TMPDIR) and
#                                    NODES_ARENAS (under /dev/shm), both TAG.XXXXXX,
#                                    and trap EXIT (nodesCleanup), INT and TERM
#   nodesAdopt PID                   a process of the script's own (iperf3, ...)
#                                    that nodesCleanup kills and reaps too
#   nodesCleanup                     nodesStopAll, kill and reap the adopted
#                                    PIDs, remove the scratch directories
#
# Every server gets --bind 127.0.0.1 --save '' --appendonly no unless
# SERVER-ARGS say otherwise (later options win). A MODULE-ARGS pair
# `cluster-secret S` or `directory-password P` is written to a file of mode
# 0600 in the server's dir and passed as `cluster-secret-file` /
# `directory-password-file`: the module refuses secrets as arguments. Safe
# under set -eu.

NODES_REPO=${NODES_REPO:-$PWD}
NODES_MODULE=${NODES_MODULE:-${OBJSTORE_MODULE:-${OBJSTORE_BUILD:-$NODES_REPO/build}/objstore.so}}
NODES_DOOR_MODULE=${NODES_DOOR_MODULE:-${OBJSTORE_DOOR_MODULE:-$(dirname "$NODES_MODULE")/objstore-rdma.so}}
NODES_PRELOAD=${NODES_PRELOAD:-${OBJSTORE_PRELOAD:-}}
NODES_START_TIMEOUT=${NODES_START_TIMEOUT:-60}
NODES_PROG=${NODES_PROG:-nodes.sh}
NODES_NAMES=""

# nodesInit: create $NODES_WORK and check the module. Returns 0, or 1 with
# the reason on stderr.
nodesInit() {
    [ -n "${NODES_WORK:-}" ] || {
        echo "nodes.sh: NODES_WORK is not set" >&2
        return 1
    }
    mkdir -p "$NODES_WORK" || return 1
    [ -f "$NODES_MODULE" ] || {
        echo "nodes.sh: module not built: $NODES_MODULE is missing (run: make)" >&2
        return 1
    }
}

# nodesFreePort [ADDR]: print a port nothing listens on right now (the
# kernel picks it). Returns 1 when none can be had.
nodesFreePort() {
    python3 -c 'import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
print(s.getsockname()[1])' "${1:-127.0.0.1}"
}

# redisStart NAME PORT [SERVER-ARGS...] [-- MODULE-ARGS... [--door DOOR-ARGS...]]:
# start redis-server in the background (the module loaded after "--", the
# door module after "--door"). Does not wait.
redisStart() {
    _n_name=$1 _n_port=$2
    shift 2
    _n_seen=0 _n_secret=""
    mkdir -p "$NODES_WORK/$_n_name" || return 1
    for _n_a in "$@"; do
        shift
        if [ "$_n_seen" = 0 ] && [ "$_n_a" = -- ]; then
            set -- "$@" --loadmodule "$NODES_MODULE"
            _n_seen=1
        elif [ "$_n_seen" = 1 ] && [ "$_n_a" = --door ]; then
            set -- "$@" --loadmodule "$NODES_DOOR_MODULE"
            _n_seen=2
        elif [ -n "$_n_secret" ]; then
            # The module refuses secrets as arguments (MODULE LIST and ps show
            # them): hand it a file of mode 0600 instead.
            (umask 077 && printf '%s\n' "$_n_a" >"$NODES_WORK/$_n_name/$_n_secret") || return 1
            # Absolute: the server runs in a directory of its own.
            set -- "$@" "$(cd "$NODES_WORK/$_n_name" && pwd -P)/$_n_secret"
            _n_secret=""
        elif [ "$_n_seen" = 1 ] && { [ "$_n_a" = cluster-secret ] ||
            [ "$_n_a" = directory-password ]; }; then
            _n_secret=$_n_a
            set -- "$@" "$_n_a-file"
        else
            set -- "$@" "$_n_a"
        fi
    done
    LD_PRELOAD=$NODES_PRELOAD redis-server --port "$_n_port" --bind 127.0.0.1 --save '' \
        --appendonly no --dir "$NODES_WORK/$_n_name" "$@" >"$NODES_WORK/$_n_name.log" 2>&1 &
    eval "NODES_PID_$_n_name=\$! NODES_PORT_$_n_name=\$_n_port"
    case " $NODES_NAMES " in
        *" $_n_name "*) ;;
        *) NODES_NAMES="$NODES_NAMES $_n_name" ;;
    esac
}

# nodeStart NAME PORT [SERVER-ARGS...] [-- MODULE-ARGS...]: an objstore node
# (without "--", the module is loaded with no arguments). Does not wait.
nodeStart() {
    case " $* " in
        *" -- "*) redisStart "$@" ;;
        *) redisStart "$@" -- ;;
    esac
}

# nodeStartRdma NAME PORT ADDR DIR-PORT [MODULE-ARGS...]: an objstore node
# whose transfer listeners (TCP PORT+10000, RDMA PORT+20000) bind ADDR, with
# its arena in $NODES_ARENAS and its directory on 127.0.0.1:DIR-PORT (empty:
# its own Redis). Does not wait.
nodeStartRdma() {
    _n_name=$1 _n_port=$2 _n_addr=$3 _n_dir=$4
    shift 4
    if [ -n "$_n_dir" ]; then
        set -- directory "127.0.0.1:$_n_dir" "$@"
    fi
    nodeStart "$_n_name" "$_n_port" -- arena-dir "$NODES_ARENAS" transfer-bind "$_n_addr" \
        transfer-port $((_n_port + 10000)) rdma-port $((_n_port + 20000)) "$@"
}

nodePid() { eval "echo \${NODES_PID_$1:-}"; }
nodePort() { eval "echo \${NODES_PORT_$1:-}"; }
nodeLog() { echo "$NODES_WORK/$1.log"; }

# nodeUp NAME [PASSWORD]: whether the server answers PING now.
nodeUp() {
    REDISCLI_AUTH=${2:-} timeout 10 redis-cli -p "$(nodePort "$1")" ping 2>/dev/null |
        grep -q PONG
}

# nodeWait NAME [PASSWORD]: wait up to $NODES_START_TIMEOUT s until the
# server answers PING. Returns 0, or 1 with its log tail on stderr.
nodeWait() {
    _n_pid=$(nodePid "$1")
    _n_end=$(($(date +%s) + NODES_START_TIMEOUT))
    while [ "$(date +%s)" -le "$_n_end" ]; do
        nodeUp "$@" && return 0
        kill -0 "$_n_pid" 2>/dev/null || break
        sleep 0.2
    done
    echo "nodes.sh: $1 (port $(nodePort "$1")) did not come up; log tail:" >&2
    tail -n 20 "$(nodeLog "$1")" | sed 's/^/  | /' >&2
    return 1
}

# nodeWaitRdma NAME: nodeWait, then check that the node's RDMA transport is
# up (INFO objstore: objstore_rdma_enabled:1). Returns 0, or 1 with its log
# tail on stderr.
nodeWaitRdma() {
    nodeWait "$1" || return 1
    redis-cli -p "$(nodePort "$1")" INFO objstore | grep -q '^objstore_rdma_enabled:1' &&
        return 0
    echo "$NODES_PROG: $1 came up without RDMA; log tail:" >&2
    tail -n 15 "$(nodeLog "$1")" | sed 's/^/  | /' >&2
    return 1
}

# nodeStop NAME [PASSWORD]: SHUTDOWN NOSAVE, wait up to 30 s for the
# process, else kill it. Can't fail.
nodeStop() {
    _n_pid=$(nodePid "$1")
    [ -n "$_n_pid" ] || return 0
    REDISCLI_AUTH=${2:-} timeout 30 redis-cli -p "$(nodePort "$1")" shutdown nosave \
        >/dev/null 2>&1 || true
    _n_i=0
    while kill -0 "$_n_pid" 2>/dev/null && [ $_n_i -lt 150 ]; do
        _n_i=$((_n_i + 1))
        sleep 0.2
    done
    kill -9 "$_n_pid" 2>/dev/null || true
    wait "$_n_pid" 2>/dev/null || true
    eval "NODES_PID_$1="
    return 0
}

# nodesStopAll: kill every server started through this file and reap it.
# Can't fail.
nodesStopAll() {
    for _n_name in $NODES_NAMES; do
        _n_pid=$(nodePid "$_n_name")
        [ -z "$_n_pid" ] || kill "$_n_pid" 2>/dev/null || true
    done
    for _n_name in $NODES_NAMES; do
        _n_pid=$(nodePid "$_n_name")
        [ -z "$_n_pid" ] || wait "$_n_pid" 2>/dev/null || true
        eval "NODES_PID_$_n_name="
    done
    return 0
}

# nodesFail MESSAGE...: print "$NODES_PROG: MESSAGE" to stderr and exit 1.
nodesFail() {
    echo "$NODES_PROG: $*" >&2
    exit 1
}

# nodesNeedTools HINT TOOL...: return 0 when every TOOL is on PATH, else
# nodesFail naming the first missing one, with HINT in parentheses.
nodesNeedTools() {
    _n_hint=$1
    shift
    for _n_tool in "$@"; do
        command -v "$_n_tool" >/dev/null 2>&1 || nodesFail "'$_n_tool' is missing ($_n_hint)"
    done
}

# nodesNeedModule: return 0 when $NODES_MODULE exists, else nodesFail.
nodesNeedModule() {
    [ -f "$NODES_MODULE" ] || nodesFail "module not built: $NODES_MODULE is missing (run: make)"
}

# nodesScratch TAG: create the scratch directories NODES_WORK (logs and
# server dirs) and NODES_ARENAS (arena files, in /dev/shm), and make the
# script's exit run nodesCleanup (INT and TERM exit 130). Returns 0, or 1
# when either directory cannot be made.
nodesScratch() {
    NODES_WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || return 1
    NODES_ARENAS=$(mktemp -d "/dev/shm/$1.XXXXXX") || return 1
    trap nodesCleanup EXIT
    trap 'exit 130' INT TERM
}

# nodesAdopt PID: have nodesCleanup kill and reap PID too. Can't fail.
nodesAdopt() {
    NODES_OTHER_PIDS="${NODES_OTHER_PIDS:-} $1"
}

# nodesCleanup: stop every server started here, kill and reap the adopted
# PIDs, remove NODES_WORK and NODES_ARENAS. Can't fail.
# shellcheck disable=SC2317 # only called from the EXIT trap
nodesCleanup() {
    nodesStopAll
    for _n_pid in ${NODES_OTHER_PIDS:-}; do
        kill "$_n_pid" 2>/dev/null || true
    done
    for _n_pid in ${NODES_OTHER_PIDS:-}; do
        wait "$_n_pid" 2>/dev/null || true
    done
    rm -rf "${NODES_WORK:-}" "${NODES_ARENAS:-}"
    return 0
}
