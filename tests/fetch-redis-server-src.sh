#!/bin/sh
# fetch-redis-server-src.sh BUILD [REDIS_SRC] - the source the installed redis-server was
# built from, in BUILD/redis-server-src: the upstream tarball that
# tests/fetch-redismodule-h.sh downloads (BUILD/pkg) with the distribution's
# own patches applied in their series order. The RDMA connection type
# (module/door/conntype.c) compiles against its server.h: a distribution
# patch that adds a field to struct redisServer moves every field after it,
# so the pristine headers would not describe the running binary. BUILD/redis-src
# stays pristine for the other users (redis-benchmark's patch). With
# REDIS_SRC (make REDIS_SRC=/path), that tree is taken as it is: it must be
# the source of the running server. Never committed.
set -eu
BUILD=$1
out=$BUILD/redis-server-src
[ -f "$out/.patched" ] && exit 0
if [ -n "${2:-}" ]; then
    rm -rf "$out" && mkdir -p "$out"
    cp -R "$2/src" "$2/deps" "$out/"
    touch "$out/.patched"
    echo "fetch-redis-server-src: redis-server's source from $2 in $out"
    exit 0
fi
[ -f "$BUILD/redis-src/src/server.h" ] || tests/fetch-redismodule-h.sh "$BUILD"
rm -rf "$out" && mkdir -p "$out"
tar -xzf "$(ls "$BUILD"/pkg/redis_*.orig.tar.gz | head -1)" -C "$out" --strip-components=1
debian=$(ls "$BUILD"/pkg/redis_*.debian.tar.* 2>/dev/null | head -1 || true)
count=0
if [ -n "$debian" ]; then
    # Unpacked beside the tree, not in it: make's dependency search would
    # take debian/*.d folders for dependency files.
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    tar -xf "$debian" -C "$tmp"
    if [ -f "$tmp/debian/patches/series" ]; then
        grep -v '^[[:space:]]*\(#\|$\)' "$tmp/debian/patches/series" >"$tmp/series"
        while read -r p _; do
            patch -d "$out" -p1 -s -N <"$tmp/debian/patches/$p" || {
                echo "fetch-redis-server-src: patch $p does not apply" >&2
                exit 1
            }
            count=$((count + 1))
        done <"$tmp/series"
    fi
fi
touch "$out/.patched"
echo "fetch-redis-server-src: redis-server's source with $count distribution patches in $out"
