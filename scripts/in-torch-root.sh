#!/bin/bash
# Runs a command inside the torch 2.x root of SUITE (scripts/torch-root.sh
# makes it once), with this source tree and /tmp bind-mounted at the same
# paths as on the host, so that a checkpoint written inside is at the same
# path outside (the host mounts what the root's torch wrote; with
# CKPT_ROOT_FUSE=1 the root also sees the ckptfs mounts under /tmp):
#   scripts/in-torch-root.sh sid bash -c 'cd $PWD && ...'
#   scripts/in-torch-root.sh sid --build     # builds BUILD=build-SUITE inside
# --build configures (without FUSE and MPI) and makes build-SUITE in this tree.
# The binds live in a private mount namespace and end with the command;
# it holds no copy of the host's FUSE mounts (scripts/private-ns.sh), so
# mount tests running beside it unmount at once.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
suite=${1:?usage: in-torch-root.sh SUITE (--build | CMD...)}
shift
root=$(bash "$top/scripts/torch-root.sh" "$suite")
if [ "${1:-}" = "--build" ]; then
    set -- bash -c "cd '$top' && mkdir -p build-$suite && cd build-$suite &&
        { [ -f Makefile ] || ../configure --without-fuse --without-mpi --without-cuda \
              PYTHON=/usr/bin/python3 CFLAGS='-O2 -g' >configure.out; } &&
        make -j\$(nproc) >make.out"
fi
# autotools run on the host (the root's automake is another version): a
# Makefile.in older than Makefile.am would make the root's make run it.
if [ ! -x "$top/configure" ] || [ "$top/configure.ac" -nt "$top/configure" ] ||
   [ "$top/Makefile.am" -nt "$top/Makefile.in" ]; then
    (cd "$top" && autoreconf -fi >&2)
fi
exec bash "$top/scripts/private-ns.sh" bash -c '
    set -e
    root=$1 top=$2; shift 2
    mkdir -p "$root$top" "$root/tmp"
    mount --bind "$top" "$root$top"
    # CKPT_ROOT_FUSE=1: with the mounts under /tmp (a ckptfs mount the
    # host made, for the root to read); otherwise /tmp alone.
    if [ -n "${CKPT_ROOT_FUSE:-}" ]; then
        mount --rbind /tmp "$root/tmp"
    else
        mount --bind /tmp "$root/tmp"
    fi
    # This namespace got a copy of every mount of the host, FUSE mounts of
    # other processes included: a copy would keep such a daemon from
    # exiting when the host unmounts it.  Drop them (but those the root
    # was asked to see), here and again at the end.
    drop_fuse() {
        awk '"'"'$3 ~ /^fuse/ { print $2 }'"'"' /proc/self/mounts | sort -r |
            while read -r m; do
                case $m in "$root"/*) [ "$1" = all ] || continue ;; esac
                umount -l "$m" 2>/dev/null || true
            done
    }
    drop_fuse others
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs shm "$root/dev/shm" 2>/dev/null || true
    rc=0
    chroot "$root" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
        LANG=C.UTF-8 USE_LIBUV=0 TMPDIR=/tmp "PWD=$top" \
        ${CKPT_TEST_ENV:-} sh -c "cd \"$top\" && exec \"\$@\"" sh "$@" || rc=$?
    drop_fuse all
    exit $rc
' sh "$root" "$top" "$@"
