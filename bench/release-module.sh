#!/bin/bash
# release-module.sh - the module of the previous release, built from git,
# for bench/ab-fetch.sh to set beside the current one. Prints the path of
# its objstore.so (build/ab-release/COMMIT/objstore.so, cached by commit:
# built once, reused after).
#
#   bench/release-module.sh [REV]
#
# The release: REV if given (or $AB_RELEASE), else the newest tag reachable
# from HEAD that is not HEAD itself, else (a tree without tags) the newest
# commit before HEAD that changed the version atop debian/changelog, where
# each release is written down. The tree of that commit (git archive) is
# built in a scratch directory under build/ with its own Makefile, only the
# module target; redismodule.h is this build's (build/include/), so nothing
# is downloaded. Exit status 3 (with a message): no release to compare with
# (no git history here, e.g. a shallow clone or an export); 1: the build failed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
REV=${1:-${AB_RELEASE:-}}

none() { echo "release-module: $*" >&2; exit 3; }
git rev-parse --git-dir >/dev/null 2>&1 || none "not a git checkout: no release to build"
head=$(git rev-parse HEAD)
if [ -z "$REV" ]; then
    REV=$(git tag --merged HEAD --sort=-creatordate | while read -r t; do
        [ "$(git rev-parse "$t^{commit}")" != "$head" ] && { echo "$t"; break; }
    done)
fi
if [ -z "$REV" ]; then
    REV=$(git log --format=%H -G'^objstore \(' -- debian/changelog | grep -v -x "$head" | head -n 1 || true)
fi
[ -n "$REV" ] || none "no release tag and no version in debian/changelog's history (shallow clone?)"
commit=$(git rev-parse --verify -q "$REV^{commit}") || none "$REV: no such commit here"

DIR=$ROOT/build/ab-release/$commit
mkdir -p "$ROOT/build/ab-release"
# One build at a time (test lanes may ask at once); the others wait and reuse it.
exec 9>"$ROOT/build/ab-release/.lock"
flock -w 900 9 || { echo "release-module: another build holds build/ab-release/.lock" >&2; exit 1; }
if [ ! -f "$DIR/objstore.so" ]; then
    [ -f build/include/redismodule.h ] || { echo "release-module: build first (make)" >&2; exit 1; }
    rm -rf "$DIR/src"
    mkdir -p "$DIR/src/build/include"
    git archive "$commit" | tar -x -C "$DIR/src"
    cp build/include/redismodule.h "$DIR/src/build/include/"
    echo "release-module: building $(git log -1 --format='%h (%ad, %s)' --date=short "$commit" | cut -c1-100)" >&2
    if ! make -C "$DIR/src" -j"${JOBS:-2}" build/objstore.so >"$DIR/build.log" 2>&1; then
        tail -n 20 "$DIR/build.log" >&2
        echo "release-module: the build of $commit failed (log: $DIR/build.log)" >&2
        exit 1
    fi
    cp "$DIR/src/build/objstore.so" "$DIR/objstore.so.tmp"
    mv "$DIR/objstore.so.tmp" "$DIR/objstore.so"
    git log -1 --format='%H %ad %s' --date=short "$commit" >"$DIR/commit.txt"
    rm -rf "$DIR/src"
fi
echo "$DIR/objstore.so"
