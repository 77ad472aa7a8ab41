#!/bin/bash
# example.sh - builds-and-runs check of examples/async_training_loop: 23
# steps with a save every 5, 16 MiB of state; the example itself reloads
# every checkpoint and compares it with the state of its step, recomputed.
# Also checks that exactly the expected checkpoints exist and are committed.
set -u
builddir=${CKPT_BUILDDIR:-.}
ex=$builddir/examples/async_training_loop
[[ -x $ex ]] || { echo "FAIL: $ex not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ckptfs-async-ex.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$ex" "$tmp" 23 5 16 || { echo "FAIL: example exited $?"; exit 1; }
want="step-000005 step-000010 step-000015 step-000020"
got=$(cd "$tmp" && echo step-*)
[[ $got == "$want" ]] || { echo "FAIL: checkpoints '$got', expected '$want'"; exit 1; }
for d in $want; do
    [[ -f $tmp/$d/index.db && ! -e $tmp/$d/.pending ]] ||
        { echo "FAIL: $d is not committed"; exit 1; }
done
echo "PASS: async training loop example"
