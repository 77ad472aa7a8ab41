#!/bin/bash
# throttle.sh - runs a command with its block I/O limited to a storage speed,
# so that a benchmark can measure loads and saves against storage slower
# than this machine's (a node's share of a parallel file system).
#
#   throttle.sh MBPS CMD [ARGS...]
#
# Makes a cgroup v1 blkio group, sets blkio.throttle.read_bps_device and
# write_bps_device to MBPS * 1e6 bytes/s on the whole disk that holds
# $CKPT_BENCH_DIR (default: the current directory), moves itself into it,
# runs CMD (its children inherit the group) and removes the group on exit,
# with CMD's exit status.  CKPT_THROTTLE_MBPS, CKPT_THROTTLE_DEV (MAJ:MIN)
# and CKPT_THROTTLE_GROUP (the group's directory) are exported to CMD.
#
# Reads are throttled whoever issues them (the reader, a FUSE daemon it
# started, the kernel's read-ahead on their behalf).  Writes are throttled
# only where the kernel charges them to the group: in cgroup v1 that is
# O_DIRECT writes and the writeback an fsync/fdatasync of the group's own
# process does in its context (measured on Linux 6.18: a 300 MB `dd
# conv=fdatasync` is charged 100% to the group), but not what the flusher
# threads write back in the background or for `sync` (charged to the root
# group: cgroup writeback needs cgroup v2).  A save that syncs its own
# files, as libckptfs and DCP (sync_files) do, is throttled for the bytes
# still dirty at its sync.  The group's blkio.throttle.io_service_bytes
# (path in CKPT_THROTTLE_GROUP) says what was charged.
#
# Where it cannot throttle (no cgroup v1 blkio, not root, a file system
# with no single block device) it prints "SKIP throttle: WHY" and exits 77
# without running CMD.
set -euo pipefail

usage() { echo "usage: throttle.sh MBPS CMD [ARGS...]" >&2; exit 2; }
skip() { echo "SKIP throttle: $*"; exit 77; }

(( $# >= 2 )) || usage
mbps=$1
shift
[[ $mbps =~ ^[0-9]+$ && $mbps -ge 1 ]] || usage

root=/sys/fs/cgroup/blkio
[[ -w $root/cgroup.procs && -e $root/blkio.throttle.read_bps_device ]] ||
    skip "no writable cgroup v1 blkio hierarchy at $root (needs root and cgroup v1's blkio controller)"

# The whole disk under the directory: throttle rules name a disk, not a
# partition, and a file system with an anonymous device (overlay, btrfs,
# tmpfs, NFS) has none.
dir=${CKPT_BENCH_DIR:-.}
dev=$(stat -c '%d' "$dir") || skip "cannot stat $dir"
major=$(( (dev >> 8) & 0xfff ))
minor=$(( (dev & 0xff) | ((dev >> 12) & 0xfff00) ))
sys=/sys/dev/block/$major:$minor
[[ -e $sys ]] || skip "$dir is on device $major:$minor, which is not a block device (tmpfs, overlay, network file system?)"
if [[ -e $sys/partition ]]; then
    parent=$(cd "$sys/.." && cat dev) || skip "cannot find the disk of partition $major:$minor"
    major=${parent%%:*}
    minor=${parent##*:}
fi

group=$root/ckptfs-throttle.$$
mkdir "$group" || skip "cannot create $group"
cleanup() {
    echo "$BASHPID" >"$root/cgroup.procs" 2>/dev/null || true
    # CMD's stray children would keep the group alive; a few tries
    for _ in 1 2 3 4 5; do
        rmdir "$group" 2>/dev/null && return
        sleep 0.2
    done
    echo "throttle.sh: could not remove $group (processes still in it: $(tr '\n' ' ' <"$group/cgroup.procs"))" >&2
}
trap cleanup EXIT
bps=$(( mbps * 1000000 ))
echo "$major:$minor $bps" >"$group/blkio.throttle.read_bps_device" ||
    skip "the kernel refused a read limit on $major:$minor"
echo "$major:$minor $bps" >"$group/blkio.throttle.write_bps_device" ||
    skip "the kernel refused a write limit on $major:$minor"
echo "$BASHPID" >"$group/cgroup.procs"
export CKPT_THROTTLE_MBPS=$mbps CKPT_THROTTLE_DEV=$major:$minor CKPT_THROTTLE_GROUP=$group
rc=0
"$@" || rc=$?
exit "$rc"
