#!/bin/bash
# run.sh - the Debian packages as an operator meets them (`make test-packaging`, one
# CI step of tests/run-all.sh). On a throwaway machine, as root:
#   1. build them (make deb) and lintian them: no error or warning left unexplained
#   2. dpkg -i them: what went where (dpkg -L), and nothing of the machine's Redis
#      changed (its redis.conf, a server already running, no unit drop-in enabled)
#   3. systemd-analyze verify of Debian's redis-server.service with the drop-ins
#   4. the node from the installed files, as the redis user (setpriv) with the memlock
#      limit (prlimit) and the packaged objstore.conf, in a mount namespace that
#      reproduces the unit's sandbox: a private /dev/shm (PrivateDevices) and a
#      read-only /run (ProtectSystem=strict). Without the drop-in the arena is
#      invisible to clients (default arena-dir /dev/shm) or cannot be made
#      (/run/objstore read-only); with it (/run/objstore read-write) clients see it
#   5. the clients, through the installed library: one in objstore-readers reads
#      zero-copy and cannot write (a write faults), one in objstore-writers creates in
#      place, one in neither works remotely; the installed Python package imports
#   6. upgrade over themselves (the same version again, then a version bump), purge:
#      nothing left behind, the machine's Redis as it was
#   7. with a Redis listening on 6379, `make run` leaves it running and starts elsewhere
# Whatever it installed is purged at exit, also on failure.
set -u
cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
OUT=$REPO/build/deb
PKGS="redis-objstore redis-objstore-rdma libobjstore0 libobjstore-dev python3-objstore objstore-tools"
VERSION=$(dpkg-parsechangelog -S Version)
BUMP=$VERSION+1
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
LIB=/usr/lib/$MULTIARCH/libobjstore.so.0
FAILED=0
TMP=$(mktemp -d /tmp/objstore-packaging.XXXXXX)
chmod 755 "$TMP"
NODE_PIDS=""

[ "$(id -u)" = 0 ] || { echo "packaging: needs root (dpkg -i on a throwaway machine)" >&2; exit 1; }

ok() { echo "  ok   $*"; }
bad() { echo "  FAIL $*"; FAILED=1; }
check() { # check DESCRIPTION COMMAND...: ok when the command succeeds
    local what=$1; shift
    if "$@" >"$TMP/out" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/       /' "$TMP/out" | tail -20; fi
}

cleanup() {
    for p in $NODE_PIDS; do kill "$p" 2>/dev/null; done
    [ -n "${OTHER_REDIS:-}" ] && redis-cli -p 6379 SHUTDOWN NOSAVE >/dev/null 2>&1
    installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $PKGS 2>/dev/null | awk '$2 ~ /^[ir]/ {print $1}')
    # shellcheck disable=SC2086
    [ -z "$installed" ] || dpkg --purge $installed >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT

debs() { # debs VERSION: the package files of that version (debian/make-deb.sh)
    local dir=$OUT
    [ "$1" = "$VERSION" ] || dir=$OUT/v$1
    for p in $PKGS; do echo "$dir/${p}_$1_$(dpkg --print-architecture).deb"; done
}

# Whether something accepts connections on 127.0.0.1:$1.
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # a free port p with p + 10000 free too
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 20000))
        taken "$p" || taken $((p + 10000)) || { echo "$p"; return; }
    done
    return 1
}

echo "===== packaging: build"
# What a build in the tree would leave (debian/files, debian/.debhelper, objects,
# client/python/build): new files outside build/, untracked or ignored.
# Python's caches are left out: CI's other lanes make them while this builds.
new_files() {
    git status --porcelain --ignored 2>/dev/null | grep '^[?!]' | grep -v ' build/$' |
        grep -v -e '__pycache__/$' -e '\.pytest_cache/$' || true
}
GIT_STATUS_BEFORE=$(new_files)
if [ -z "${OBJSTORE_DEBS_BUILT:-}" ]; then
    make --no-print-directory deb >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log"; exit 1; }
    DEB_JOBS=2 debian/make-deb.sh "$BUMP" >"$TMP/build-bump.log" 2>&1 || { cat "$TMP/build-bump.log"; exit 1; }
fi
for f in $(debs "$VERSION") $(debs "$BUMP"); do
    [ -f "$f" ] || { echo "packaging: $f was not built" >&2; exit 1; }
done
ok "packages built: $(debs "$VERSION" | xargs -n1 basename | tr '\n' ' ')"
check "the build left no file in the checkout outside build/ (git status)" \
    test "$(new_files)" = "$GIT_STATUS_BEFORE"

echo "===== packaging: lintian"
# shellcheck disable=SC2046
lintian --fail-on error,warning $(debs "$VERSION") >"$TMP/lintian" 2>&1
if grep -q '^[EW]:' "$TMP/lintian"; then bad "lintian"; grep '^[EW]:' "$TMP/lintian"; else ok "lintian: no error or warning"; fi

echo "===== packaging: install"
REDIS_CONF_SUM=$(md5sum /etc/redis/redis.conf 2>/dev/null)
# The machine's own Redis, if one listens on 6379 (other servers come and go: tests).
redis6379() { ss -ltnpH 'sport = :6379' 2>/dev/null | grep -o 'pid=[0-9]*' | sort -u | tr '\n' ' '; }
REDIS_PID_BEFORE=$(redis6379)
# shellcheck disable=SC2046
check "dpkg -i" dpkg -i $(debs "$VERSION")
check "redis.conf untouched" test "$(md5sum /etc/redis/redis.conf 2>/dev/null)" = "$REDIS_CONF_SUM"
check "no drop-in enabled by the installation" \
    sh -c '! ls /etc/systemd/system/redis-server.service.d/ /etc/systemd/system/redis-server@.service.d/ 2>/dev/null | grep -q objstore'
check "the Redis on 6379, if any, untouched (${REDIS_PID_BEFORE:-none})" test "$(redis6379)" = "$REDIS_PID_BEFORE"
listed() { dpkg -L "$1" | grep -qx "$2"; }
check "module in /usr/lib/redis/modules" listed redis-objstore /usr/lib/redis/modules/objstore.so
check "door in /usr/lib/redis/modules" listed redis-objstore-rdma /usr/lib/redis/modules/objstore-rdma.so
check "/etc/redis/objstore.conf, a conffile" sh -c 'listed() { dpkg -L "$1" | grep -qx "$2"; }; listed redis-objstore /etc/redis/objstore.conf && dpkg-query -W -f="\${Conffiles}" redis-objstore | grep -q /etc/redis/objstore.conf'
check "drop-ins shipped as examples" listed redis-objstore /usr/share/objstore/systemd/redis-server.service.d/objstore.conf
check "RDMA drop-in with the door" listed redis-objstore-rdma /usr/share/objstore/systemd/redis-server.service.d/objstore-rdma.conf
check "library under its SONAME" sh -c "dpkg -L libobjstore0 | grep -qx $LIB && objdump -p $LIB | grep -q 'SONAME *libobjstore.so.0'"
check "headers, .so link, .pc in libobjstore-dev" sh -c "dpkg -L libobjstore-dev | grep -qx /usr/include/objstore/objstore.h && dpkg -L libobjstore-dev | grep -qx /usr/lib/$MULTIARCH/libobjstore.so && pkg-config --modversion objstore | grep -qx '$VERSION'"
check "python3-objstore in Debian's dist-packages" sh -c 'dpkg -L python3-objstore | grep -q "^/usr/lib/python3/dist-packages/objstore/_objstore"'
check "obj-benchmark" sh -c 'dpkg -L objstore-tools | grep -qx /usr/bin/obj-benchmark && obj-benchmark --help | grep -q Usage'
check "groups objstore-readers and objstore-writers" sh -c 'getent group objstore-readers && getent group objstore-writers'
check "/run/objstore: redis, group objstore-readers, 2750" \
    test "$(stat -c '%U %G %a' /run/objstore)" = "redis objstore-readers 2750"
check "/run/objstore's default ACL gives objstore-writers read-write" \
    python3 -c "import os, grp; v = os.getxattr('/run/objstore', 'system.posix_acl_default'); import struct; g = grp.getgrnam('objstore-writers').gr_gid; assert any(struct.unpack_from('<HHI', v, 4 + 8 * i) == (8, 6, g) for i in range((len(v) - 4) // 8)), v"
check "a C program builds with pkg-config against the installed library" sh -c "
    cc -o $TMP/hello client/examples/hello.c \$(pkg-config --cflags --libs objstore) && ldd $TMP/hello | grep -q 'libobjstore.so.0 => /.*/$MULTIARCH/libobjstore.so.0'"

echo "===== packaging: systemd-analyze verify"
if command -v systemd-analyze >/dev/null && [ -f /lib/systemd/system/redis-server.service ]; then
    u=$TMP/units
    mkdir -p "$u/redis-server.service.d"
    cp /lib/systemd/system/redis-server.service "$u/"
    ln -s /usr/share/objstore/systemd/redis-server.service.d/objstore.conf "$u/redis-server.service.d/"
    ln -s /usr/share/objstore/systemd/redis-server.service.d/objstore-rdma.conf "$u/redis-server.service.d/"
    # A known-bad sibling proves the drop-in directory is read; ours must draw no remark.
    printf '[Service]\nObjstoreNoSuchKey=1\n' >"$u/redis-server.service.d/zz-probe.conf"
    SYSTEMD_UNIT_PATH=$u: systemd-analyze verify "$u/redis-server.service" >"$TMP/verify" 2>&1
    if ! grep -q ObjstoreNoSuchKey "$TMP/verify"; then
        bad "systemd-analyze verify did not read the drop-in directory"; cat "$TMP/verify"
    elif grep -v zz-probe "$TMP/verify" | grep -q .; then
        bad "systemd-analyze verify remarks on the unit with the drop-ins"; grep -v zz-probe "$TMP/verify"
    else
        ok "systemd-analyze verify: redis-server.service with objstore.conf and objstore-rdma.conf"
    fi
else
    echo "  skip systemd-analyze or redis-server.service is missing"
fi

echo "===== packaging: the node as the redis user, in the unit's sandbox"
# A redis.conf as the admin writes it: theirs plus the include line docs/install.md shows.
mkdir -p "$TMP/data" && chown redis:redis "$TMP/data"
node_conf() { # node_conf PORT: a redis.conf that includes the packaged snippet
    cat <<CONF
port $1
bind 127.0.0.1
dir $TMP/data
save ""
appendonly no
logfile ""
include /etc/redis/objstore.conf
objstore.memory 64mb
CONF
}
# start_node NAME DROPIN(yes|no) [redis-server args...]: the node on a free port (set in
# PORT), backgrounded; waits until it answers or exits, and tries another port when one
# of its two was taken meanwhile (other suites start servers too). Log: $TMP/NAME.log
start_node() {
    local attempt
    for attempt in 1 2 3 4 5; do
        PORT=$(free_port) || return 1
        start_node_on "$PORT" "$@" && return 0
        grep -q "Address already in use" "$TMP/$1.log" || return 1
    done
    return 1
}
start_node_on() { # start_node_on PORT NAME DROPIN [args...]: one attempt of start_node
    local port=$1 name=$2 dropin=$3; shift 3
    node_conf "$port" >"$TMP/$name.conf"
    chmod 644 "$TMP/$name.conf"
    # PrivateDevices: a private /dev/shm. ProtectSystem=strict: /run read-only, with
    # ReadWritePaths=/run/objstore (the drop-in) binding it read-write again. UMask=007.
    local sandbox="mount --make-rprivate / && mount -t tmpfs -o mode=1777 tmpfs /dev/shm"
    if [ "$dropin" = yes ]; then
        sandbox="$sandbox && mount --bind /run /run && mount --bind /run/objstore /run/objstore && mount --bind -o remount,ro /run /run"
    else
        sandbox="$sandbox && mount --bind /run /run && mount --bind -o remount,ro /run /run"
    fi
    unshare --mount --propagation private sh -c "$sandbox && umask 007 && exec prlimit --memlock=$MEMLOCK \
        setpriv --reuid=redis --regid=redis --init-groups redis-server $TMP/$name.conf $*" \
        >"$TMP/$name.log" 2>&1 &
    local pid=$!
    NODE_PIDS="$NODE_PIDS $pid"
    for _ in $(seq 100); do
        redis-cli -p "$port" OBJ.STATS 2>/dev/null | grep -q arena_path && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
# LimitMEMLOCK=infinity, as far as the machine's hard limit allows (a container's may be lower).
MEMLOCK=$(ulimit -H -l)
[ "$MEMLOCK" = unlimited ] || MEMLOCK=$((MEMLOCK * 1024))
role() { # role NAME GROUP PORT ID: tests/lib/arena_role.py as nobody in GROUP only
    setpriv --reuid=nobody --regid="$2" --clear-groups /usr/bin/python3 "$REPO/tests/lib/arena_role.py" \
        "$LIB" 127.0.0.1 "$3" "$1" "$4"
}

# Without the drop-in, (a) the default arena-dir /dev/shm is the unit's private one.
if start_node nodropin-shm no --objstore.arena-dir /dev/shm --objstore.arena-mode 0640; then
    P1=$PORT
    redis-cli -p "$P1" OBJ.PUT k1 objstore-reader-check >/dev/null
    if role reader objstore-readers "$P1" k1 >"$TMP/out" 2>&1; then
        bad "without the drop-in a client mapped the arena in the unit's private /dev/shm"
    elif grep -q "cannot open the arena" "$TMP/out"; then
        ok "without the drop-in: the arena in the private /dev/shm is invisible to a client ($(head -c 90 "$TMP/out")...)"
    else
        bad "without the drop-in: unexpected failure"; cat "$TMP/out"
    fi
    redis-cli -p "$P1" SHUTDOWN NOSAVE >/dev/null 2>&1
else
    bad "the node without the drop-in (arena in /dev/shm) did not start"; tail -20 "$TMP/nodropin-shm.log"
fi
# (b) /run/objstore stays read-only: the module cannot make its arena there.
if start_node nodropin-run no; then
    P2=$PORT
    bad "without the drop-in the node made its arena in a read-only /run/objstore"
    redis-cli -p "$P2" SHUTDOWN NOSAVE >/dev/null 2>&1
elif grep -q "cannot create arena file /run/objstore" "$TMP/nodropin-run.log"; then
    ok "without the drop-in: /run/objstore is read-only to the service, the module refuses to load"
else
    bad "without the drop-in: the node failed otherwise"; tail -20 "$TMP/nodropin-run.log"
fi

# With the drop-in: the packaged configuration as it is.
if start_node node yes; then
    P3=$PORT
    pid=$(redis-cli -p "$P3" INFO server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')
    check "the node runs as redis" test "$(ps -o user= -p "$pid")" = redis
    check "its memlock limit is the drop-in's (unlimited, or the machine's hard limit: $MEMLOCK)" \
        sh -c "grep 'Max locked memory' /proc/$pid/limits | grep -q '$MEMLOCK  *$MEMLOCK'"
    arena=$(redis-cli -p "$P3" OBJ.STATS | sed -n '/^arena_path$/{n;p}')
    check "the arena is in /run/objstore, redis:objstore-readers 0660 with an ACL" sh -c "
        case '$arena' in /run/objstore/objstore-*.arena) ;; *) exit 1;; esac
        test \"\$(stat -c '%U %G %a' '$arena')\" = 'redis objstore-readers 660' &&
        python3 -c \"import os; os.getxattr('$arena', 'system.posix_acl_access')\""
    redis-cli -p "$P3" OBJ.PUT k1 objstore-reader-check >/dev/null
    check "a client in objstore-readers reads zero-copy, cannot create, a write faults" \
        role reader objstore-readers "$P3" k1
    check "a client in objstore-writers creates in place" role writer objstore-writers "$P3" k2
    check "a client in neither works remotely (copying get/put)" role remote nogroup "$P3" k1
    check "the object the reader tried to write is unchanged" \
        test "$(redis-cli -p "$P3" OBJ.GET k1)" = objstore-reader-check
    check "the installed Python package, as a reader: zero-copy get, create refused (READONLY), put copies" \
        setpriv --reuid=nobody --regid=objstore-readers --clear-groups /usr/bin/python3 -c "
import objstore
c = objstore.connect('127.0.0.1', $P3)
assert c.zero_copy and objstore.__file__.startswith('/usr/lib/python3/dist-packages/')
assert bytes(c.get('k1', kind='memoryview')) == b'objstore-reader-check'
try:
    c.create('py-reader', 4)
    raise SystemExit('a reader created in place')
except objstore.ZeroCopyUnavailable as e:
    assert 'READONLY' in str(e), e
big = b'r' * (2 << 20)  # above the size a put writes in place: copied through OBJ.PUT
c.put('py-reader-put', big)
assert bytes(c.get('py-reader-put', kind='memoryview')) == big
"
    check "the installed Python package, in neither group: remote mode" \
        setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 -c "
import objstore
c = objstore.connect('127.0.0.1', $P3)
assert not c.zero_copy
assert bytes(c.get('k1', kind='bytes')) == b'objstore-reader-check'
c.put('py-remote', b'x')
"
    redis-cli -p "$P3" SHUTDOWN NOSAVE >/dev/null 2>&1
else
    bad "the node with the drop-in did not start"; tail -30 "$TMP/node.log"
fi

echo "===== packaging: upgrade and purge"
echo "# the admin's own line" >>/etc/redis/objstore.conf
# shellcheck disable=SC2046
check "reinstall over itself ($VERSION)" dpkg -i $(debs "$VERSION")
# shellcheck disable=SC2046
check "upgrade to $BUMP (the admin's edit to objstore.conf kept, no prompt)" sh -c \
    "dpkg -i --force-confold $(debs "$BUMP" | tr '\n' ' ') </dev/null && grep -q \"the admin's own line\" /etc/redis/objstore.conf && test \"\$(dpkg-query -W -f='\${Version}' redis-objstore)\" = '$BUMP'"
# shellcheck disable=SC2086
check "purge" dpkg --purge $PKGS
check "nothing left behind" sh -c '! ls -d /etc/redis/objstore.conf /usr/lib/redis/modules/objstore*.so /run/objstore \
    /var/lib/objstore /usr/share/objstore /usr/lib/python3/dist-packages/objstore 2>/dev/null | grep .'
check "redis.conf as it was" test "$(md5sum /etc/redis/redis.conf 2>/dev/null)" = "$REDIS_CONF_SUM"
check "the Redis on 6379, if any, as it was" test "$(redis6379)" = "$REDIS_PID_BEFORE"

echo "===== packaging: make run with a Redis on 6379"
if ! taken 6379; then
    redis-server --port 6379 --bind 127.0.0.1 --save "" --daemonize yes --dir "$TMP" --logfile "$TMP/other.log" >/dev/null
    OTHER_REDIS=1
    for _ in $(seq 50); do redis-cli -p 6379 PING >/dev/null 2>&1 && break; sleep 0.1; done
fi
check "make run RUN_ARGS=--once starts elsewhere and says so" sh -c \
    "make --no-print-directory run RUN_ARGS=--once >$TMP/run.log 2>&1 && grep -q 'port 6379 is taken' $TMP/run.log && grep -q 'answered on' $TMP/run.log || { cat $TMP/run.log; exit 1; }"
check "the Redis on 6379 still answers" sh -c 'redis-cli -p 6379 PING | grep -q PONG'

echo "===== packaging: $([ "$FAILED" = 0 ] && echo PASS || echo FAIL)"
exit "$FAILED"
