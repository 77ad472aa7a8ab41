#!/bin/bash
# kill_delta.sh - kill -9 at seeded random points of a delta save: three
# writers in one process saving, against the earlier checkpoint, a state
# that differs from it in one row of 7 (references and XOR frames), then
# ckpt_commit (tests/crash/README.md).  After every trial: what is listed
# is complete and verifies (the delta with its base frames), the base is
# byte-identical (a delta save never writes to it), gc --min-age 0 leaves
# the root clean, and the step can be saved again as a delta.
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../cli/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
T=$ROOT/step-2
SEED=1001                        # the state of seed 1, one row in 7 changed
export CKPT_CRASH_BASE=$ROOT/$BASE
kill_save() {
    shimmed CKPT_SHIM_ROOT="$T" CKPT_SHIM_KILL_AT="$1" "$DRIVER" lib "$T" $SEED 3
}
resave() {
    "$DRIVER" lib "$T" $SEED 3
}
count_calls CKPT_SHIM_ROOT="$T" "$DRIVER" lib "$T" $SEED 3
N=${CALLS%% *}
need_calls "$N"
# the clean run made a delta: references and xor frames, format 2
if sqlite3 "file:$T/index.db?immutable=1" \
       "SELECT count(*) FROM frames WHERE codec IN (9, 10)" 2>/dev/null |
       grep -qv '^0$'; then
    ok "the clean run stored ref and xor frames against $BASE"
else
    bad "the clean run stored ref and xor frames against $BASE"
fi
rm -rf "$T"
run_kill_matrix "delta save against $BASE, 3 writers + ckpt_commit" "$T" $SEED "$N"
summary
