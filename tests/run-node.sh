#!/bin/bash
# run-node.sh MODULE [--port N] [--once] - one node for a user (`make run`): redis-server
# with conf/single-node.conf and the module, on 127.0.0.1:6379, or, when 6379 (or its
# transfer port, +10000) is taken, say by the machine's own Redis, on the first free
# port from 6380 up, saying which. Nothing running is stopped. --port N insists on N
# (fails if it is taken). --once starts the node, checks that it answers with the
# module loaded, prints its port, shuts it down and exits (tests/packaging/run.sh).
set -eu
cd "$(dirname "$0")/.."
module=$1; shift
port= once=0
while [ $# -gt 0 ]; do
    case $1 in
    --port) port=$2; shift ;;
    --once) once=1 ;;
    *) echo "run-node: unknown option $1 (--port N, --once)" >&2; exit 2 ;;
    esac
    shift
done

# Whether something accepts connections on 127.0.0.1:$1.
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if [ -n "$port" ]; then
    if taken "$port" || taken $((port + 10000)); then
        echo "run-node: port $port or its transfer port $((port + 10000)) is taken" >&2
        exit 1
    fi
else
    port=6379
    while taken "$port" || taken $((port + 10000)); do
        [ "$port" = 6379 ] && echo "run-node: port 6379 is taken (another Redis?); it is left as it is"
        port=$((port + 1))
        [ "$port" -lt 6480 ] || { echo "run-node: no free port in 6379-6479" >&2; exit 1; }
    done
fi
echo "run-node: objstore on 127.0.0.1:$port (redis-cli -p $port)"
args=(conf/single-node.conf --port "$port" --loadmodule "$PWD/$module")
if [ "$once" = 0 ]; then
    exec redis-server "${args[@]}"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
redis-server "${args[@]}" --daemonize yes --dir "$dir" --logfile "$dir/log" --pidfile "$dir/pid"
for _ in $(seq 100); do
    redis-cli -p "$port" OBJ.STATS >/dev/null 2>&1 && break
    sleep 0.1
done
if ! redis-cli -p "$port" OBJ.STATS | grep -q arena_path; then
    echo "run-node: the node on $port did not answer OBJ.STATS" >&2
    cat "$dir/log" >&2
    [ -f "$dir/pid" ] && kill "$(cat "$dir/pid")"
    exit 1
fi
redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
echo "run-node: the node answered on $port and was shut down (--once)"
