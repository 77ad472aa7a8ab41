#!/bin/bash
# kill_lib.sh - kill -9 at seeded random points of a library save: three
# writers in one process, then ckpt_commit (tests/crash/README.md).  After
# every trial: nothing visible as a checkpoint that is not complete and
# verifying (ckpt ls, the mount's listing, latest), the earlier checkpoint
# byte-identical, gc --min-age 0 leaves the root clean, and the same step
# can be saved again.
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../cli/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
T=$ROOT/step-2
kill_save() {
    shimmed CKPT_SHIM_ROOT="$T" CKPT_SHIM_KILL_AT="$1" "$DRIVER" lib "$T" 2 3
}
resave() {
    "$DRIVER" lib "$T" 2 3
}
count_calls CKPT_SHIM_ROOT="$T" "$DRIVER" lib "$T" 2 3
N=${CALLS%% *}
need_calls "$N"
rm -rf "$T"
run_kill_matrix "library save, 3 writers + ckpt_commit" "$T" 2 "$N"
summary
