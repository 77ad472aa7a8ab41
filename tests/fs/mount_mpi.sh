#!/bin/bash
# mount_mpi.sh - a checkpoint saved collectively over MPI (ckpt_mpi_save on
# 4 ranks, dim-0 shards plus replicated norms and a byte object) reads
# correctly through the mount: the example's own collective load on 3 ranks
# checks every value against its formula, then every tensor file of the
# mount is compared byte for byte with `ckpt cat`, and the mount's sizes and
# dtypes with `ckpt ls`.  Then the other way round: the same tensors are
# written through a writable mount by two "ranks" (each tensor split on
# dim 0, sizes inferred), committed, and the example's collective load on 3
# ranks checks every value of that checkpoint against its formula.
. "$(dirname "$0")/lib.sh"

example=$CKPT_BUILDDIR/examples/mpi_save_load
if [ ! -x "$example" ] || ! command -v mpirun >/dev/null; then
    echo "SKIP: MPI example not built or no mpirun"
    exit 77
fi
# Open MPI leaks at exit; leak checking is off for MPI processes only (see
# tests/cli/mpi_example.sh).
mpirun_() {
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        timeout 120 mpirun --allow-run-as-root --oversubscribe "$@"
}

CK=$TMP/ck/step-7
mpirun_ -n 4 "$example" save "$CK" 2 96 >"$TMP/save.log" 2>&1
check "4 ranks save collectively" test $? -eq 0
mpirun_ -n 3 "$example" load "$CK" >"$TMP/load.log" 2>&1
check "3 ranks load it back, every value checked by the example" test $? -eq 0

run_ckpt ls "$CK"
expect_ok "ckpt ls of the collective checkpoint"
cp "$OUT" "$TMP/ls.txt"
mount_ck "$CK" "$TMP/mnt" || summary

n=0
while read -r fqn dtype _shape raw _rest; do
    path=$TMP/mnt/${fqn//.//}
    [ -d "$path" ] && path=$path.tensor    # a tensor that is also a module
    n=$((n + 1))
    check "$fqn: size $raw" test "$(stat -c %s "$path")" = "$raw"
    check "$fqn: user.ckpt.dtype is $dtype" test "$(xattr_get "$path" user.ckpt.dtype)" = "$dtype"
    "$CKPT" cat "$CK" "$fqn" >"$TMP/ref.bin"
    check "$fqn: bytes through the mount equal ckpt cat" cmp -s "$path" "$TMP/ref.bin"
done < <(tail -n +2 "$TMP/ls.txt")
check "the mount showed tensors ($n)" test "$n" -gt 5
umount_ck "$TMP/mnt"

echo "# ---- written through the mount, loaded collectively"
W=$TMP/wroot
mkdir -p "$W"
mount_ck "$W" "$TMP/wmnt" -o rw,world=2 || summary
D=$TMP/wmnt/step-8
mkdir -p "$D"
nput=0
while read -r fqn dtype shape raw _rest; do
    path=$D/${fqn//.//}
    mkdir -p "$(dirname "$path")"
    "$CKPT" cat "$CK" "$fqn" >"$TMP/t.bin"
    rows=${shape%%,*}
    if [ "$dtype" = bytes ]; then
        "$PY" "$HELPERS/wput.py" put "$path" "$TMP/t.bin" --shape "$(stat -c %s "$TMP/t.bin")" >"$TMP/put.out"
    elif [ "$shape" = "()" ]; then
        "$PY" "$HELPERS/wput.py" put "$path" "$TMP/t.bin" --dtype "$dtype" --shape '' >"$TMP/put.out"
    else
        half=$((rows / 2)) rowbytes=$((raw / rows))
        "$PY" "$HELPERS/wput.py" put "$path" "$TMP/t.bin" --dtype "$dtype" --shape "$shape" \
            --sizes "$half${shape#"$rows"}" --to $((half * rowbytes)) >"$TMP/put.out" &&
        "$PY" "$HELPERS/wput.py" put "$path" "$TMP/t.bin" --dtype "$dtype" --shape "$shape" \
            --offsets "$half$(echo "${shape#"$rows"}" | sed 's/[0-9][0-9]*/0/g')" --from $((half * rowbytes)) >>"$TMP/put.out"
    fi
    if [ $? -eq 0 ]; then nput=$((nput + 1)); else bad "write $fqn through the mount: $(tr '\n' ' ' <"$TMP/put.out")"; fi
done < <(tail -n +2 "$TMP/ls.txt")
check "every tensor written through the mount ($nput)" test "$nput" = "$n"
"$PY" "$HELPERS/wput.py" commit "$D" 0 1 >"$TMP/put.out"
check "ranks 0 and 1 commit" grep -qx ok "$TMP/put.out"
umount_ck "$TMP/wmnt"
mpirun_ -n 3 "$example" load "$W/step-8" >"$TMP/load2.log" 2>&1
check "3 ranks load the mount-written checkpoint collectively, every value checked" test $? -eq 0
summary
