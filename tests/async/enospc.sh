#!/bin/bash
# enospc.sh - an asynchronous save that runs out of space: runs the
# "enospc" case of tests/unit/test_async on a 2 MiB tmpfs (the state is
# 5.3 MiB, the previous checkpoint 4 KiB).  The wait must report ENOSPC,
# nothing may be committed or left behind, and the previous checkpoint
# must read back exactly.  Needs root (mount); skipped (77) otherwise.  The
# tmpfs is always unmounted.
set -u
builddir=${CKPT_BUILDDIR:-.}
prog=$builddir/tests/unit/test_async
[[ -x $prog ]] || { echo "SKIP: $prog not built (Check missing?)"; exit 77; }
[[ $(id -u) == 0 ]] || { echo "SKIP: mounting a tmpfs needs root"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-enospc.XXXXXX")
mounted=
cleanup() {
    [[ -n $mounted ]] && umount "$mounted"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$tmp/small"
mount -t tmpfs -o size=2m tmpfs "$tmp/small" ||
    { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
mounted=$tmp/small
CKPT_TEST_SMALLFS=$tmp/small CK_RUN_CASE=enospc "$prog"
