#!/bin/bash
# kill_pack.sh - kill -9 at seeded random points of `ckpt pack` (a 2-cell
# grid: two writers, then the commit).  Checks as kill_lib.sh
# (tests/crash/README.md).
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../cli/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
T=$ROOT/step-2
IN=$TMP/in
mkdir -p "$IN"
"$DRIVER" gen "$IN" 2 || exit 99
pack() {
    "$@" "$CKPT" pack --grid 2 --frame-size 4K --threads 1 --meta step=2 "$T" \
        model.w="$IN/w.npy" model.b="$IN/b.npy" opt.m="$IN/m.npy"
}
kill_save() {
    pack shimmed CKPT_SHIM_ROOT="$T" CKPT_SHIM_KILL_AT="$1"
}
resave() {
    pack env
}
pack count_calls CKPT_SHIM_ROOT="$T"
N=${CALLS%% *}
need_calls "$N"
rm -rf "$T"
run_kill_matrix "ckpt pack" "$T" 2 "$N"
summary
