#!/bin/bash
# kill_import.sh - kill -9 at seeded random points of `ckpt import` of the
# baseline checkpoint (which it reads, and which must stay byte-identical)
# into a new one.  Checks as kill_lib.sh (tests/crash/README.md).
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../cli/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
T=$ROOT/step-2
import() {
    "$@" "$CKPT" import --frame-size 4K --threads 1 "$ROOT/$BASE" "$T"
}
kill_save() {
    import shimmed CKPT_SHIM_ROOT="$T" CKPT_SHIM_KILL_AT="$1"
}
resave() {
    import env
}
import count_calls CKPT_SHIM_ROOT="$T"
N=${CALLS%% *}
need_calls "$N"
rm -rf "$T"
run_kill_matrix "ckpt import" "$T" 1 "$N"
summary
