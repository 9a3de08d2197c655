#!/bin/bash
# guest-run.sh - run one command as root inside a throw-away QEMU guest that
# has a Soft-RoCE device, so objstore's verbs/rdma_cm code can be exercised
# on a host whose kernel has no RDMA support.
#
#   tests/softroce/guest-run.sh [--workdir DIR] [--timeout SECS] -- COMMAND...
#   tests/softroce/guest-run.sh --probe
#
# The guest boots Debian's packaged kernel under TCG, shares the host root
# read-only and DIR (default: the repository root) read-write at the same
# path, loads rdma_rxe, puts rxe0 on a dummy interface obj0 holding
# $OBJ_RXE_ADDR, and runs COMMAND with `sh -c` in DIR. A single COMMAND word
# is taken as shell text ('make test-rdma && echo ok'); several words are an
# argv and keep their quoting. COMMAND's exit status becomes ours; 124 means
# the whole run (boot included) outlived --timeout; 125 means the guest never
# reported a status (boot or setup failure: the console tail is printed).
# --probe checks that a guest can be built here, prints the kernel version
# and exits 0, or prints why not and exits 1; it boots nothing.
#
# Environment: OBJ_RXE_ADDR (IPv4 address for obj0, default 10.99.0.1; a
# /prefix is accepted, default /32), OBJ_VM_MEM (MiB, default 4096),
# OBJ_VM_TIMEOUT (default for --timeout, 1200), OBJ_VM_KERNEL (a vmlinuz to
# use instead of the newest suitable one in /boot), OBJ_VM_ROOT_CACHE (9p
# cache mode of the read-only host root: loose, the default, or none if host
# files outside DIR change under a running guest), OBJ_VM_VERBOSE=1 (show
# the whole console, boot included), OBJ_VM_ENV (names of extra variables to
# copy into the guest; every OBJ_* and OBJSTORE_* variable is copied anyway). The guest
# exports OBJ_RXE_ADDR (bare address), OBJ_RXE_DEV=rxe0, OBJ_SOFTROCE_GUEST=1,
# HOME=/tmp and TERM=dumb. Nothing is written into DIR by this script.
set -euo pipefail

prog=guest-run
repo=$(cd "$(dirname "$0")/../.." && pwd -P)

# usage: print the synopsis to stderr and exit 2. Can't fail.
usage() {
    echo "usage: $0 [--workdir DIR] [--timeout SECS] -- COMMAND..." >&2
    echo "       $0 --probe" >&2
    exit 2
}

# die: print "guest-run: MSG" to stderr and exit with status $1. Can't fail.
die() {
    local rc=$1
    shift
    echo "$prog: $*" >&2
    exit "$rc"
}

# shQuote: print $1 as one single-quoted sh word, so any byte survives being
# pasted into the generated guest scripts. Can't fail.
shQuote() {
    printf "'%s'" "${1//\'/\'\\\'\'}"
}

# findKernel: print the version of the kernel to boot: the one named by
# OBJ_VM_KERNEL, else the newest /boot/vmlinuz-* whose /lib/modules tree has
# rdma_rxe and 9p. Returns 0, or 1 with the reason on stderr. Checking the
# module tree, not just the image, matters: the running host kernel may own a
# /lib/modules directory with no vmlinuz and no RDMA modules.
findKernel() {
    local img ver
    local -a imgs
    if [ -n "${OBJ_VM_KERNEL:-}" ]; then
        imgs=("$OBJ_VM_KERNEL")
    else
        mapfile -t imgs < <(printf '%s\n' /boot/vmlinuz-* | grep -v '\*$' | sort -rV)
    fi
    [ "${#imgs[@]}" -gt 0 ] || {
        echo "no /boot/vmlinuz-* (install linux-image-amd64)" >&2
        return 1
    }
    for img in "${imgs[@]}"; do
        ver=${img##*/vmlinuz-}
        [ -r "$img" ] || continue
        modinfo -k "$ver" -F filename rdma_rxe >/dev/null 2>&1 || continue
        modinfo -k "$ver" -F filename 9pnet_virtio >/dev/null 2>&1 || continue
        echo "$ver"
        return 0
    done
    echo "no readable kernel image among ${imgs[*]} has /lib/modules/<ver>/ with" \
        "rdma_rxe and 9pnet_virtio (install linux-image-amd64)" >&2
    return 1
}

# probeHost: check every host tool the guest build needs and print the kernel
# version to use. Returns 0, or 1 with the first missing piece on stderr.
probeHost() {
    local tool
    for tool in qemu-system-x86_64 cpio gzip modinfo modprobe ip rdma; do
        command -v "$tool" >/dev/null 2>&1 || {
            echo "'$tool' not found (see tests/softroce/README.md for the packages)" >&2
            return 1
        }
    done
    [ -x /bin/busybox ] || {
        echo "/bin/busybox missing (install busybox-static)" >&2
        return 1
    }
    # The initramfs carries no libraries, so busybox must be the static build.
    if ldd /bin/busybox >/dev/null 2>&1; then
        echo "/bin/busybox is dynamically linked (install busybox-static)" >&2
        return 1
    fi
    findKernel
}

# copyModules: copy the modules needed to mount 9p over virtio, with their
# dependencies, into $2/lib/modules and list them in load order in
# $2/modules.list. Returns 0, or 1 (message on stderr) if one is missing.
# Compressed modules are unpacked because busybox insmod may not read them.
copyModules() {
    local ver=$1 root=$2 mod line path base
    local -A seen=()
    mkdir -p "$root/lib/modules"
    : >"$root/modules.list"
    for mod in virtio_pci 9pnet_virtio 9p; do
        while read -r line; do
            case $line in
            insmod\ *) ;;
            *) continue ;; # "builtin X": nothing to load
            esac
            path=${line#insmod }
            path=${path%% *}
            base=${path##*/}
            base=${base%%.ko*}
            [ -z "${seen[$base]:-}" ] || continue
            seen[$base]=1
            case $path in
            *.ko.xz) xz -dc "$path" >"$root/lib/modules/$base.ko" ;;
            *.ko.zst) zstd -qdc "$path" >"$root/lib/modules/$base.ko" ;;
            *.ko.gz) gzip -dc "$path" >"$root/lib/modules/$base.ko" ;;
            *) cp "$path" "$root/lib/modules/$base.ko" ;;
            esac
            echo "$base" >>"$root/modules.list"
        done < <(modprobe -S "$ver" --show-depends "$mod" 2>/dev/null)
    done
    [ -s "$root/modules.list" ] || {
        echo "modprobe found no modules for 9p/virtio in kernel $ver" >&2
        return 1
    }
}

# writeInit: write the initramfs /init (busybox sh): mount the host root and
# the work share, give the guest private /tmp, /run, /var/tmp and /dev/shm,
# then chroot into the host root and run the stage script from /run. Any
# failure prints a token-tagged line and powers off at once instead of
# leaving the host to wait for the timeout. Can't fail.
writeInit() {
    local root=$1 token=$2 workdir=$3
    local qw rootcache
    qw=$(shQuote "$workdir")
    # The read-only root is cached in the guest (exec-heavy suites run about
    # three times faster); the work share stays uncached so that host and
    # guest see each other's writes at once.
    rootcache=$(shQuote "${OBJ_VM_ROOT_CACHE:-loose}")
    cat >"$root/init" <<EOF
#!/bin/busybox sh
B=/bin/busybox
ROOTCACHE=$rootcache
fail() { \$B echo "$token setup-failed: \$*"; \$B poweroff -f; \$B sleep 60; }
\$B mkdir -p /proc /sys /dev /mnt
\$B mount -t proc proc /proc
\$B mount -t sysfs sys /sys
\$B mount -t devtmpfs dev /dev
for m in \$(\$B cat /modules.list); do
    \$B insmod /lib/modules/\$m.ko || fail "insmod \$m"
done
o=trans=virtio,version=9p2000.L,msize=512000
\$B mount -t 9p -o ro,cache=\$ROOTCACHE,\$o hostroot /mnt || fail "mount host root over 9p"
for d in dev proc sys; do \$B mount --move /\$d /mnt/\$d || fail "move /\$d"; done
\$B mkdir -p /mnt/dev/shm /mnt/dev/pts
for d in /tmp /run /var/tmp /dev/shm; do
    \$B mount -t tmpfs -o mode=1777 tmpfs /mnt\$d || fail "tmpfs on \$d"
done
# The work share goes on last: a checkout under /tmp (CI clones) would
# otherwise be hidden by the guest's own tmpfs.
\$B mkdir -p /mnt$qw 2>/dev/null
\$B mount -t 9p -o \$o work /mnt$qw || fail "mount work share on $qw"
\$B mount -t devpts devpts /mnt/dev/pts
\$B cp /stage.sh /mnt/run/softroce-stage.sh || fail "copy stage script"
exec \$B chroot /mnt /bin/sh /run/softroce-stage.sh
EOF
    chmod +x "$root/init"
}

# writeStage: write the stage script that runs in the chroot with the host's
# own tools: build rxe0 on obj0, wait for its port to go ACTIVE, then run the
# command between the start and exit markers. Can't fail.
writeStage() {
    local root=$1 token=$2 workdir=$3 addr=$4 prefix=$5 cmd=$6
    local name
    {
        echo "token=$(shQuote "$token") work=$(shQuote "$workdir") cmd=$(shQuote "$cmd")"
        echo "cidr=$(shQuote "$addr/$prefix")"
        echo "export OBJ_RXE_ADDR=$(shQuote "$addr")"
        # Copy OBJ_*, OBJSTORE_* and any names listed in OBJ_VM_ENV into the guest.
        for name in $(compgen -e | grep -E '^(OBJ|OBJSTORE)_') ${OBJ_VM_ENV:-}; do
            case $name in
            OBJ_RXE_ADDR | OBJ_RXE_DEV | OBJ_SOFTROCE_GUEST) continue ;;
            *[!A-Za-z0-9_]* | [0-9]*) continue ;;
            esac
            [ -n "${!name+set}" ] || continue
            echo "export $name=$(shQuote "${!name}")"
        done
        cat <<'EOF'
fail() { echo "$token setup-failed: $*"; poweroff -f; sleep 60; }
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/tmp TERM=dumb OBJ_SOFTROCE_GUEST=1 OBJ_RXE_DEV=rxe0
dmesg -n 1
hostname softroce-guest
for m in rdma_rxe ib_uverbs rdma_ucm dummy; do modprobe "$m" || fail "modprobe $m"; done
ip link set lo up || fail "lo up"
ip link add obj0 type dummy || fail "add dummy obj0"
ip addr add "$cidr" dev obj0 || fail "address $cidr on obj0"
ip link set obj0 up || fail "obj0 up"
rdma link add rxe0 type rxe netdev obj0 || fail "rdma link add rxe0"
i=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
    i=$((i + 1))
    [ "$i" -le 100 ] || fail "rxe0 port 1 never became ACTIVE"
    sleep 0.1
done
ulimit -l unlimited || fail "ulimit -l unlimited"
cd "$work" || fail "cd $work"
echo "$token start"
sh -c "$cmd" guest-run </dev/null
rc=$?
sync
printf '\n%s exit %d\n' "$token" "$rc"
poweroff -f
EOF
    } >"$root/stage.sh"
}

# filterConsole: read the raw console on stdin and print to stdout, line by
# line and unbuffered, what the command wrote: drop \r and terminal escape
# sequences, hide the boot up to the start marker (unless verbose), and stop
# at the exit marker, which may share a line with console escapes. Can't fail.
filterConsole() {
    awk -v tok="$1" -v verbose="${OBJ_VM_VERBOSE:-0}" '
    function flushBlank(n) { while (n-- > 0) print "" }
    BEGIN {
        esc = sprintf("%c", 27)
        csi = esc "\\[[0-9;?]*[ -/]*[@-~]"
        osc = esc "\\][^" sprintf("%c", 7) "]*" sprintf("%c", 7)
        two = esc "[()][0-9A-Za-z]"
        one = esc "."
        state = 0  # 0 booting, 1 command running, 2 command done
    }
    {
        line = $0
        gsub(/\r/, "", line)
        gsub(osc, "", line); gsub(csi, "", line); gsub(two, "", line); gsub(one, "", line)
        gsub(esc, "", line)
        if (state == 0) {
            if (index(line, tok " start")) { state = 1; next }
            p = index(line, tok " setup-failed")
            if (p) { print "guest-run: guest " substr(line, p + length(tok) + 1); fflush(); next }
            if (verbose == 1) { print line; fflush() }
            next
        }
        if (state == 1) {
            # Empty lines are held back: the exit marker is printed after a
            # newline of its own, whose empty line is not the command output.
            p = index(line, tok " exit ")
            if (p) {
                if (p > 1) { flushBlank(blank); print substr(line, 1, p - 1) }
                else flushBlank(blank - 1)
                state = 2; fflush(); next
            }
            if (line == "") { blank++; next }
            flushBlank(blank); blank = 0
            print line; fflush(); next
        }
        if (verbose == 1) { print line; fflush() }
    }'
}

# State that cleanup() needs: the private temp dir and the pid of the running
# qemu (the timeout(1) wrapping it), both empty when there is nothing to undo.
tmp_dir=
qemu_pid=

# cleanup: on any exit, stop a qemu still running (only the one we started,
# by pid; timeout(1) passes the signal on) and remove the private temp dir.
# Can't fail.
# shellcheck disable=SC2317 # only called from the EXIT trap
cleanup() {
    if [ -n "$qemu_pid" ]; then
        kill "$qemu_pid" 2>/dev/null || true
        wait "$qemu_pid" 2>/dev/null || true
    fi
    [ -z "$tmp_dir" ] || rm -rf "$tmp_dir"
}

# main: parse arguments, build the initramfs, boot the guest under a time
# bound and turn its report into our exit status (see the header).
main() {
    local workdir=$repo timeout=${OBJ_VM_TIMEOUT:-1200} mem=${OBJ_VM_MEM:-4096}
    local ver cmd arg addr prefix token tmp qemu_rc rc tag

    while [ $# -gt 0 ]; do
        case $1 in
        --probe)
            [ $# -eq 1 ] || usage
            probeHost
            exit $?
            ;;
        --workdir)
            [ $# -ge 2 ] || usage
            workdir=$2
            shift 2
            ;;
        --workdir=*)
            workdir=${1#*=}
            shift
            ;;
        --timeout)
            [ $# -ge 2 ] || usage
            timeout=$2
            shift 2
            ;;
        --timeout=*)
            timeout=${1#*=}
            shift
            ;;
        --)
            shift
            break
            ;;
        *) usage ;;
        esac
    done
    [ $# -gt 0 ] || usage
    case $timeout in '' | *[!0-9]* | 0) die 2 "--timeout wants a positive whole number of seconds" ;; esac
    case $mem in '' | *[!0-9]*) die 2 "OBJ_VM_MEM wants MiB as a whole number" ;; esac
    case ${OBJ_VM_ROOT_CACHE:-loose} in none | loose | mmap | fscache) ;;
    *) die 2 "OBJ_VM_ROOT_CACHE wants none, loose, mmap or fscache" ;;
    esac
    workdir=$(cd "$workdir" 2>/dev/null && pwd -P) || die 2 "work dir not found"
    case $workdir in /) die 2 "the work dir cannot be /" ;; esac

    addr=${OBJ_RXE_ADDR:-10.99.0.1}
    prefix=32
    case $addr in */*)
        prefix=${addr#*/}
        addr=${addr%%/*}
        ;;
    esac
    if ! [[ $addr =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ && $prefix =~ ^[0-9]{1,2}$ ]] ||
        [ "$prefix" -gt 32 ]; then
        die 2 "OBJ_RXE_ADDR=$OBJ_RXE_ADDR is not an IPv4 address[/prefix]"
    fi

    if [ $# -eq 1 ]; then
        cmd=$1
    else
        cmd=
        for arg in "$@"; do cmd="$cmd $(shQuote "$arg")"; done
        cmd=${cmd# }
    fi

    ver=$(probeHost 2>&1) || die 125 "cannot build a guest: $ver"

    tmp=$(mktemp -d "${TMPDIR:-/tmp}/softroce.XXXXXXXX")
    tmp_dir=$tmp
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM HUP

    token="OBJ-SOFTROCE-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
    mkdir -p "$tmp/root/bin"
    cp /bin/busybox "$tmp/root/bin/busybox"
    copyModules "$ver" "$tmp/root" || die 125 "cannot collect the 9p modules"
    writeInit "$tmp/root" "$token" "$workdir"
    writeStage "$tmp/root" "$token" "$workdir" "$addr" "$prefix" "$cmd"
    (cd "$tmp/root" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initramfs.gz"

    # qemu's -virtfs option syntax: a comma in a value is written twice.
    local qroot=/ qwork=${workdir//,/,,} model=passthrough
    [ "$(id -u)" = 0 ] || model=none
    mkfifo "$tmp/console"
    tee "$tmp/console.log" <"$tmp/console" | filterConsole "$token" &
    local filter_pid=$!
    # timeout(1) bounds the whole run, boot included; it signals qemu with
    # TERM and, 5 s later, KILL. stdin is /dev/null so qemu leaves the
    # terminal alone and nothing typed reaches the guest.
    timeout --kill-after=5 "$timeout" qemu-system-x86_64 \
        -accel tcg,thread=multi -cpu max -m "$mem" -smp 2 \
        -nodefaults -no-user-config -display none -serial stdio -nic none -no-reboot \
        -kernel "/boot/vmlinuz-$ver" -initrd "$tmp/initramfs.gz" \
        -append "console=ttyS0 quiet loglevel=3 panic=-1" \
        -virtfs "local,path=$qroot,mount_tag=hostroot,security_model=$model,readonly=on,multidevs=remap" \
        -virtfs "local,path=$qwork,mount_tag=work,security_model=$model,multidevs=remap" \
        </dev/null >"$tmp/console" 2>&1 &
    qemu_pid=$!
    qemu_rc=0
    wait "$qemu_pid" || qemu_rc=$?
    qemu_pid=
    wait "$filter_pid" || true

    rc=$(grep -a -o "$token exit [0-9]*" "$tmp/console.log" | tail -n 1 | awk '{print $3}') || true
    if [ -n "$rc" ]; then
        exit "$rc"
    fi
    if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
        echo "$prog: TIMEOUT: the guest run (boot included) exceeded ${timeout}s; qemu killed" >&2
        exit 124
    fi
    tag=$(grep -a -o "$token setup-failed.*" "$tmp/console.log" | tail -n 1 | tr -d '\r') || true
    echo "$prog: the guest did not report an exit status (qemu exited $qemu_rc)" \
        "${tag:+- ${tag#"$token "}}" >&2
    echo "$prog: last console lines:" >&2
    tr -d '\r' <"$tmp/console.log" | grep -a -v "^$token" | tail -n 25 | sed 's/^/    /' >&2
    exit 125
}

main "$@"
