#!/bin/sh
# fetch-redismodule-h.sh BUILD - unpack the Redis source package that matches
# the installed redis-server into BUILD/redis-src, for redismodule.h (which
# is never committed). Needs deb-src enabled (tests/install-deps.sh does it).
set -eu
BUILD=$1
[ -f "$BUILD/redis-src/src/redismodule.h" ] && exit 0
VER=$(dpkg-query -W -f='${Version}' redis-server 2>/dev/null || true)
[ -n "$VER" ] || { echo "fetch-redismodule-h: redis-server is not installed (run: make deps)" >&2; exit 1; }
mkdir -p "$BUILD/pkg"
( cd "$BUILD/pkg" && apt-get source --download-only "redis=$VER" >/dev/null 2>&1 ||
                     apt-get source --download-only redis >/dev/null ) || {
    echo "fetch-redismodule-h: apt-get source redis failed; enable deb-src (make deps) or set REDIS_SRC=/path" >&2
    exit 1; }
rm -rf "$BUILD/redis-src" && mkdir -p "$BUILD/redis-src"
tar -xzf "$(ls "$BUILD"/pkg/redis_*.orig.tar.gz | head -1)" -C "$BUILD/redis-src" --strip-components=1
echo "fetch-redismodule-h: redismodule.h from redis $VER"
