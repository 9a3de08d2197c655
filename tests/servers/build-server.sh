#!/bin/sh
# build-server.sh NAME [VERSION] - build a server the module must also load into
# (redis 8.0.2, valkey 8.1.1) from Debian 13's source package, with Debian's
# patches applied, into a cache outside the checkout:
#
#   $OBJSTORE_SERVERS_CACHE/NAME-VERSION/    (default /var/cache/objstore/servers)
#       bin/   the server, cli and benchmark      src/  the patched source, built
#       debian-version   the source package's version
#
# A complete entry is reused as it is (no network). Otherwise the trixie
# deb-src line is derived from the machine's own Debian archive and kept in an
# apt configuration of its own (CACHE/apt: source list, lists, package cache),
# so the system's sources and installed packages stay as they are. Build
# dependencies are this machine's own packages, installed explicitly. Valkey
# is built with its RDMA transport built in (BUILD_RDMA=yes). Any step that
# cannot be done fails the script with a message; nothing is skipped.
set -eu

NAME=${1:-}
case $NAME in
redis) VERSION=${2:-8.0.2} ;;
valkey) VERSION=${2:-8.1.1} ;;
*)
    echo "usage: build-server.sh redis|valkey [VERSION]" >&2
    exit 2
    ;;
esac
CACHE=${OBJSTORE_SERVERS_CACHE:-/var/cache/objstore/servers}
SUITE=trixie
OUT=$CACHE/$NAME-$VERSION
APTDIR=$CACHE/apt

say() { echo "build-server: $*" >&2; }
die() {
    say "$NAME $VERSION: $*"
    exit 1
}

# Revisions known to build, for when the archive serves an index whose newest
# revision it does not (yet) hold: name, Debian version, SHA-256 of its .dsc.
# The .dsc then vouches for the tarballs (dpkg-source checks their checksums).
PINNED="redis 5:8.0.2-3+deb13u2 10ace3c9e2aaae8f4920906c0869820cac71bc5d83984b4febe114cb52879101
valkey 8.1.1+dfsg1-3+deb13u2 e581402820e22c61a65ce436bcffb71ae5a04282c044fecd58d22a1b3748c306"

if [ -f "$OUT/.built" ] && [ -x "$OUT/bin/$NAME-server" ]; then
    say "$NAME $VERSION ($(cat "$OUT/debian-version")) already in $OUT"
    exit 0
fi

# ---- build dependencies: this machine's packages --------------------------------------
DEPS="build-essential dpkg-dev pkg-config libssl-dev libsystemd-dev libjemalloc-dev tcl"
[ "$NAME" = valkey ] && DEPS="$DEPS librdmacm-dev libibverbs-dev"
# shellcheck disable=SC2086
missing=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' $DEPS 2>&1 | grep -v '^ii ' |
    sed 's/.* //' | tr '\n' ' ' || true)
if [ -n "$missing" ]; then
    [ "$(id -u)" = 0 ] || die "missing build packages: $missing(run: make deps)"
    say "installing $missing"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
        --no-install-recommends $missing >/dev/null || die "apt-get install $missing failed"
fi

# ---- the separate apt configuration ---------------------------------------------------
# The deb-src line: the archive (URI, components, keyring) that serves this
# machine's own release, with the suite replaced by trixie.
archive_line() {
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v want="$codename" '
            function flush() {
                if (uri != "" && (" " suites " ") ~ (" " want " ")) {
                    print "deb-src" (key != "" ? " [signed-by=" key "]" : "") " " uri " @SUITE@ " comps
                    found = 1; exit
                }
                uri = ""; suites = ""; comps = ""; key = ""
            }
            /^[ \t]*$/ { flush(); next }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { suites = substr($0, 9) }
            /^Components:/ { comps = substr($0, 13); sub(/^ +/, "", comps) }
            /^Signed-By:/ { key = $2 }
            END { if (!found) flush() }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v want="$codename" '$1 == "deb" {
            i = 2; opts = ""
            if ($2 ~ /^\[/) { while ($i !~ /\]$/) { opts = opts " " $i; i++ } opts = opts " " $i; i++ }
            if ($(i + 1) == want) {
                line = "deb-src" opts " " $i " @SUITE@"
                for (j = i + 2; j <= NF; j++) line = line " " $j
                print line
            }
        }' "$f"
    done
}

setup_apt() {
    line=$(archive_line | head -1)
    [ -n "$line" ] || die "no Debian archive for this release found in /etc/apt sources"
    mkdir -p "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial" "$APTDIR/sources.list.d" \
        "$APTDIR/preferences.d"
    echo "$line" | sed "s/@SUITE@/$SUITE/" >"$APTDIR/sources.list"
    say "apt: $(cat "$APTDIR/sources.list") (in $APTDIR)"
}
APT_OPTS="-o Dir::Etc::SourceList=$APTDIR/sources.list -o Dir::Etc::SourceParts=$APTDIR/sources.list.d
 -o Dir::Etc::Preferences=$APTDIR/preferences -o Dir::Etc::PreferencesParts=$APTDIR/preferences.d
 -o Dir::State::Lists=$APTDIR/lists -o Dir::Cache=$APTDIR/cache -o Acquire::Languages=none"
# shellcheck disable=SC2086
aptq() { apt-get $APT_OPTS "$@"; }
# shellcheck disable=SC2086
aptc() { apt-cache $APT_OPTS "$@"; }

# ---- the source package ---------------------------------------------------------------
# upstream VERSION: "5:8.0.2-3+deb13u3" and "8.1.1+dfsg1-3" give 8.0.2 and 8.1.1.
upstream() { echo "$1" | sed -e 's/^[0-9]*://' -e 's/-[^-]*$//' -e 's/+dfsg.*//'; }

# fetch_index PKGDIR: the revision trixie's index lists. 0 when fetched.
fetch_index() {
    (cd "$1" && aptq source --download-only "$NAME=$DEBVER" >"$1/apt-source.log" 2>&1)
}

# fetch_pinned PKGDIR: the pinned revision, straight from the pool, its .dsc
# checked against the pinned SHA-256. Sets DEBVER.
fetch_pinned() {
    pin=$(echo "$PINNED" | awk -v n="$NAME" '$1 == n')
    [ -n "$pin" ] || return 1
    DEBVER=$(echo "$pin" | awk '{print $2}')
    sum=$(echo "$pin" | awk '{print $3}')
    [ "$(upstream "$DEBVER")" = "$VERSION" ] || return 1
    pool=$(sed -n 's/^deb-src \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' "$APTDIR/sources.list")
    dir=$(aptc showsrc "$NAME" | sed -n 's/^Directory: //p' | head -1)
    v=$(echo "$DEBVER" | sed 's/^[0-9]*://')
    dsc=${NAME}_$v.dsc
    /usr/lib/apt/apt-helper download-file "$pool/$dir/$dsc" "$1/$dsc" "SHA256:$sum" \
        >/dev/null 2>&1 || return 1
    for f in $(awk '/^Files:/ {on = 1; next} /^[^ ]/ {on = 0} on && NF == 3 {print $3}' "$1/$dsc"); do
        /usr/lib/apt/apt-helper download-file "$pool/$dir/$f" "$1/$f" >/dev/null 2>&1 || return 1
    done
}

fetch_source() {
    pkg=$OUT/pkg
    rm -rf "$pkg" && mkdir -p "$pkg"
    aptq update -q >"$APTDIR/update.log" 2>&1 || {
        cat "$APTDIR/update.log" >&2
        die "apt-get update of the $SUITE sources failed"
    }
    DEBVER=$(aptc showsrc "$NAME" | sed -n 's/^Version: //p' | head -1)
    [ -n "$DEBVER" ] || die "no source package '$NAME' in $SUITE"
    [ "$(upstream "$DEBVER")" = "$VERSION" ] ||
        die "$SUITE has $NAME $DEBVER, not upstream $VERSION (build-server.sh $NAME $(upstream "$DEBVER")?)"
    if fetch_index "$pkg"; then
        say "fetched $NAME $DEBVER"
        return
    fi
    sed 's/^/    /' "$pkg/apt-source.log" >&2
    say "WARNING: the archive does not serve $NAME $DEBVER that $SUITE's index lists"
    rm -f "$pkg"/*
    fetch_pinned "$pkg" || die "apt-get source $NAME=$DEBVER failed and no pinned revision is served"
    say "WARNING: building the pinned revision $NAME $DEBVER instead (its .dsc's SHA-256 checked)"
}

# ---- build ------------------------------------------------------------------------------
build() {
    src=$OUT/src
    rm -rf "$src"
    dpkg-source -x "$OUT"/pkg/*.dsc "$src" >"$OUT/dpkg-source.log" 2>&1 || {
        cat "$OUT/dpkg-source.log" >&2
        die "dpkg-source -x failed"
    }
    say "$(grep -c 'applying' "$OUT/dpkg-source.log") Debian patches applied"
    # Debian's own build switches (debian/rules), with this machine's libraries.
    opts="BUILD_TLS=yes USE_SYSTEMD=yes USE_JEMALLOC=yes USE_SYSTEM_JEMALLOC=yes"
    [ "$NAME" = valkey ] && opts="$opts BUILD_RDMA=yes"
    flags=$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=cmdline)
    start=$(date +%s)
    # shellcheck disable=SC2086
    (cd "$src" && eval "env $flags nice make -j2 $opts" >"$OUT/make.log" 2>&1) || {
        tail -40 "$OUT/make.log" >&2
        die "make failed (log: $OUT/make.log)"
    }
    mkdir -p "$OUT/bin"
    for p in server cli benchmark; do
        cp "$src/src/$NAME-$p" "$OUT/bin/"
    done
    echo "$DEBVER" >"$OUT/debian-version"
    echo "$(($(date +%s) - start))" >"$OUT/build-seconds"
    touch "$OUT/.built"
    say "$NAME $DEBVER built in $(cat "$OUT/build-seconds") s: $OUT/bin/$NAME-server"
}

mkdir -p "$OUT"
rm -f "$OUT/.built"
setup_apt
fetch_source
build
