#!/bin/sh
# make-deb.sh [VERSION] - build the Debian packages of this tree out of it (`make deb`):
# the tree's files (git's tracked and new ones, as they are in the work tree) are
# copied to build/deb/objstore-<version>/, dpkg-buildpackage -b runs there, and the
# .deb files land in build/deb/; the checkout gets nothing. The redis source
# package (build/pkg, which the Makefile fetched for redismodule.h) is copied in
# when present so that the build needs no download. VERSION (e.g. 0.3.0+1, the
# packaging test's upgrade) adds a changelog entry in the copy only.
set -eu
cd "$(dirname "$0")/.."
version=$(dpkg-parsechangelog -S Version)
new=${1:-}
# A rebuild under another version goes apart (build/deb/v<version>/), so that
# build/deb/*.deb stays one version.
out=build/deb${new:+/v$new}
src=$out/objstore-${new:-$version}
rm -rf "$src" && mkdir -p "$src"
if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard |
        tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$src"
else
    tar --exclude=./build -cf - . | tar -xf - -C "$src"
fi
if ls build/pkg/redis_*.orig.tar.gz >/dev/null 2>&1; then
    mkdir -p "$src/build/pkg" && cp build/pkg/redis_* "$src/build/pkg/"
fi
if [ -n "$new" ]; then
    { printf 'objstore (%s) unstable; urgency=medium\n\n  * Rebuild as %s.\n\n' "$new" "$new"
      printf ' -- %s  %s\n\n' "$(dpkg-parsechangelog -S Maintainer)" "$(date -R)"
      cat debian/changelog; } >"$src/debian/changelog"
fi
( cd "$src" && dpkg-buildpackage -us -uc -b ${DEB_JOBS:+-j$DEB_JOBS} )
ls "$out"/*_"${new:-$version}"_*.deb
