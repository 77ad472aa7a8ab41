#!/bin/bash
# scripts/private-ns.sh CMD... - runs CMD (as root) in a private mount
# namespace that holds no copy of the FUSE mounts of the namespace it
# came from.
#
# A new mount namespace copies every mount there is, the FUSE mounts of
# tests running beside it included, and a copy keeps its FUSE connection
# alive: a test that unmounts on the host then waits for its daemon until
# CMD ends (tests/fs/mount_perms.sh saw its daemon "hung" after
# `fusermount3 -u` while a torch-root test ran in such a namespace;
# tests/fs/mount_ns.sh).  So the copies are detached (lazily; propagation
# is private, nothing reaches the host) before CMD runs.  CMD sees the
# other mounts as they were.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: private-ns.sh CMD..." >&2; exit 2; }
if [ "$1" != --inside ]; then
    exec unshare --mount --propagation private \
        bash "$0" --inside "$(readlink /proc/self/ns/mnt)" "$@"
fi
outer=$2
shift 2
if [ "$(readlink /proc/self/ns/mnt)" = "$outer" ]; then
    echo "private-ns.sh: not in a new mount namespace; detaching nothing" >&2
    exit 1
fi
# fuse_list: the FUSE mount points, innermost first (findmnt -r escapes
# blanks as \x20, undone by printf %b).
fuse_list() {
    findmnt -rn -o FSTYPE,TARGET | tac | while read -r type target; do
        case $type in
        fuse | fuse.* | fuseblk | fuseblk.*) printf '%b\n' "$target" ;;
        esac
    done
}
fuse_list | while IFS= read -r m; do
    umount -l "$m" 2>/dev/null || true   # gone with a parent already
done
left=$(fuse_list)
if [ -n "$left" ]; then
    echo "private-ns.sh: could not detach the copies of: $left" >&2
fi
exec "$@"
