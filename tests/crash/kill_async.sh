#!/bin/bash
# kill_async.sh - kill -9 at seeded random points of an asynchronous save
# (ckpt_save_async with a 64 KiB staging cap, then ckpt_save_wait): every
# call the shim counts is made by the background part (encoding, writing,
# syncing, committing).  Checks as kill_lib.sh (tests/crash/README.md).
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../cli/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
T=$ROOT/step-2
kill_save() {
    shimmed CKPT_SHIM_ROOT="$T" CKPT_SHIM_KILL_AT="$1" "$DRIVER" async "$T" 2
}
resave() {
    "$DRIVER" async "$T" 2
}
count_calls CKPT_SHIM_ROOT="$T" "$DRIVER" async "$T" 2
N=${CALLS%% *}
need_calls "$N"
rm -rf "$T"
run_kill_matrix "async save (background part)" "$T" 2 "$N"
summary
