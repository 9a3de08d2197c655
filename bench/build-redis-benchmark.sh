#!/bin/bash
# build-redis-benchmark.sh - build build/redis-benchmark-rdma (or
# build/redis-cli-rdma): redis-benchmark (redis-cli) from the source of the
# installed Redis version with bench/redis-benchmark-rdma.patch
# (bench/redis-cli-rdma.patch) applied, which adds --rdma: the Redis protocol
# over RDMA through objstore's client/rdmaconn.c (Valkey Over RDMA).
#
#   bench/build-redis-benchmark.sh [--force] [redis-benchmark|redis-cli]
#
# Source: build/redis-src if present (tests/fetch-redismodule-h.sh unpacks it),
# else `apt-get source --download-only redis` into build/pkg and the orig
# tarball. The tree is copied to build/redis-bench-src (build/redis-cli-src)
# (never touched in place), patched with `patch -p1`, and only that program is
# built (MALLOC=libc, BUILD_TLS=no, just the deps it needs).
# Nothing is rebuilt when the binary is newer than the patch and the client
# sources, unless --force. Redis source is never committed: only the patches.
# Exit status 0 on success; on failure the failing step's output is shown.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd -P)
build=$repo/build
force=0
if [ "${1:-}" = --force ]; then
    force=1
    shift
fi
prog=${1:-redis-benchmark}
case $prog in
redis-benchmark)
    src=$build/redis-bench-src
    deps="hiredis hdr_histogram"
    ;;
redis-cli)
    src=$build/redis-cli-src
    deps="hiredis linenoise hdr_histogram"
    ;;
*)
    echo "build-redis-benchmark: unknown program $prog (redis-benchmark or redis-cli)" >&2
    exit 2
    ;;
esac
out=$build/$prog-rdma
patchFile=$repo/bench/$prog-rdma.patch
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}

# die: print the message to stderr and exit 1. Can't fail.
die() {
    echo "build-redis-benchmark: $*" >&2
    exit 1
}

# upToDate: whether $out is newer than every input. Returns 0 or 1.
upToDate() {
    [ -x "$out" ] || return 1
    for f in "$patchFile" "$repo/client/rdmaconn.c" "$repo/client/rdmaconn.h" \
        "$repo"/module/rdma/stream*.[ch] "$0"; do
        [ "$out" -nt "$f" ] || return 1
    done
}

# unpackSource: fill $src with a pristine tree of the installed version.
# Returns 0, or exits 1 with the reason.
unpackSource() {
    rm -rf "$src"
    mkdir -p "$src"
    if [ -f "$build/redis-src/src/$prog.c" ]; then
        # Copy only the pristine parts (no objects a previous build left).
        (cd "$build/redis-src" && tar -cf - --exclude='*.o' --exclude='*.a' --exclude='*.d' .) |
            (cd "$src" && tar -xf -)
        return 0
    fi
    ver=$(dpkg-query -W -f='${Version}' redis-server 2>/dev/null || true)
    [ -n "$ver" ] || die "redis-server is not installed (run: make deps)"
    mkdir -p "$build/pkg"
    if ! compgen -G "$build/pkg/redis_*.orig.tar.gz" >/dev/null; then
        (cd "$build/pkg" && { apt-get source --download-only "redis=$ver" >/dev/null 2>&1 ||
            apt-get source --download-only redis >/dev/null; }) ||
            die "apt-get source redis failed; enable deb-src (make deps)"
    fi
    for tarball in "$build"/pkg/redis_*.orig.tar.gz; do
        tar -xzf "$tarball" -C "$src" --strip-components=1
        return 0
    done
    die "no redis_*.orig.tar.gz in $build/pkg"
}

if [ "$force" = 0 ] && upToDate; then
    echo "build-redis-benchmark: $out is up to date"
    exit 0
fi
command -v patch >/dev/null 2>&1 || die "'patch' not found (apt-get install patch)"
unpackSource
grep -q '^#define REDIS_VERSION "7\.0\.' "$src/src/version.h" ||
    echo "build-redis-benchmark: warning: the patches were written for Redis 7.0" >&2
(cd "$src" && patch -p1 --quiet <"$patchFile") || die "the patch does not apply to $src"

log=$build/$prog-rdma-build.log
if ! make -C "$src/src" -j"$jobs" "$prog" MALLOC=libc BUILD_TLS=no \
    DEPENDENCY_TARGETS="$deps" OBJSTORE_DIR="$repo" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "make failed (whole log: $log)"
fi
cp "$src/src/$prog" "$out.tmp"
mv "$out.tmp" "$out"
echo "build-redis-benchmark: built $out"
