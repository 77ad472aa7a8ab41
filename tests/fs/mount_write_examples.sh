#!/bin/bash
# mount_write_examples.sh - the two write-mode examples (docs/MOUNT.md,
# "Writing through the mount") save real checkpoints through real rw
# mounts, and what they committed is checked independently:
#   - examples/mpi_write_through_mount (4 MPI ranks, plain POSIX calls):
#     once through one `-o rw,world=4` mount, once through two mounts of the
#     same root (ranks 0-1 on one, 2-3 on the other, as one mount per node);
#   - examples/write_through_mount.py (2 Python processes, os.setxattr and
#     os.write, `-o rw,world=2`), in the same root, next to the committed
#     MPI checkpoints, which stay read-only (EROFS) and intact.
# Each example checks its own save through the rw mount; then the root is
# mounted read-only and the examples' --check runs there, `ckpt verify`
# passes, every tensor's bytes through the mount and from `ckpt cat` equal a
# NumPy reference computed here from the formula the MPI example documents
# (for the Python example: equal `ckpt cat`, and its --check compares with
# its NumPy originals), and the checkpoint matches, tensor for tensor, one
# `ckpt pack` makes of the same reference data.
#
# The MPI part is skipped when mpirun or the example binary is missing.
. "$(dirname "$0")/lib.sh"

mpi_example=$CKPT_BUILDDIR/examples/mpi_write_through_mount
py_example=$CKPT_SRCDIR/examples/write_through_mount.py
ROOT=$TMP/root
MNT=$TMP/mnt
mkdir -p "$ROOT"

# Open MPI leaks at exit; leak checking is off for MPI processes only (see
# tests/cli/mpi_example.sh).
mpirun_() {
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        timeout 180 mpirun --allow-run-as-root --oversubscribe "$@"
}

# show_log FILE: its last lines, indented, when a step failed.
show_log() {
    tail -n 15 "$1" | sed 's/^/     | /'
}

# mpi_ref gen OUTDIR | cmp FILE_DIR NPY_DIR CAT_DIR: the MPI example's
# tensors computed with NumPy from the formula in its header comment.
#   gen: writes them as raw files and prints `ckpt pack` arguments;
#   cmp: compares them with FILE_DIR/a/b/c (np.fromfile), with the .npy view
#        NPY_DIR/a/b/c.npy (np.load; bf16 shown as float32) and with
#        CAT_DIR/<fqn>.bin (`ckpt cat` output); prints ok/FAIL lines.
mpi_ref() {
    "$PY" - "$@" <<'PY'
import os, sys
import numpy as np

# fqn, ckpt dtype, shape, NumPy dtype of the stored bytes (bf16: its bits)
TENSORS = [
    ("model.embed.weight", "f32", (30, 16), "<f4"),
    ("model.layers.0.attn.proj.weight", "bf16", (24, 40), "<u2"),
    ("model.layers.0.mlp.up.weight", "i32", (50, 12), "<i4"),
    ("model.pos_embed", "f64", (8, 6), "<f8"),
    ("model.norm.weight", "bf16", (16,), "<u2"),
    ("train.step", "i64", (), "<i8"),
]
TRAIN_STATE = b'{"step": 100, "lr": 0.0003, "seed": 42}'

def values(t, shape, dt):
    """Element i of tensor number t, as the example's comment defines it."""
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    k = (37 * i + 101 * t)
    if dt == "i32":
        return (k % 100003 - 50000).astype("<i4").reshape(shape)
    if dt == "i64":
        return np.array(100, dtype="<i8")
    f = ((k % 251 - 125) / 64.0).astype(np.float32).reshape(shape)
    return f.astype(np.float64) if dt == "f64" else f

def stored(t, dt, shape, npdt):
    v = values(t, shape, dt)
    if dt == "bf16":      # exact: these values need at most 8 significant bits
        bits = v.astype("<f4").view("<u4")
        assert not (bits & 0xFFFF).any()
        return (bits >> 16).astype("<u2")
    return v.astype(npdt)

def check(ok, what):
    print(("ok " if ok else "FAIL ") + what)

mode = sys.argv[1]
if mode == "gen":
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for t, (fqn, dt, shape, npdt) in enumerate(TENSORS, 1):
        path = os.path.join(out, fqn + ".bin")
        stored(t, dt, shape, npdt).tofile(path)
        print("%s=%s:%s:%s" % (fqn, path, dt, ",".join(map(str, shape))))
    path = os.path.join(out, "train_state.bin")
    with open(path, "wb") as f:
        f.write(TRAIN_STATE)
    print("train_state=%s" % path)
    sys.exit(0)

files, npys, cats = sys.argv[2:5]
for t, (fqn, dt, shape, npdt) in enumerate(TENSORS, 1):
    want = stored(t, dt, shape, npdt)
    rel = fqn.replace(".", "/")
    try:
        got = np.fromfile(os.path.join(files, rel), dtype=npdt)
        check(got.size == want.size and np.array_equal(got.reshape(shape), want),
              "%s: np.fromfile through the mount equals the reference (%s %s)" % (fqn, dt, shape))
        got = np.fromfile(os.path.join(cats, fqn + ".bin"), dtype=npdt)
        check(got.size == want.size and np.array_equal(got.reshape(shape), want),
              "%s: ckpt cat equals the reference" % fqn)
        arr = np.load(os.path.join(npys, rel + ".npy"))
        ref = values(t, shape, dt)
        if dt == "bf16":
            ref = ref.astype(np.float32)
        check(arr.shape == shape and arr.dtype == ref.dtype and np.array_equal(arr, ref),
              "%s: np.load of the .npy view equals the reference (%s %s)" % (fqn, arr.dtype, arr.shape))
    except (OSError, ValueError) as e:
        check(False, "%s: %s" % (fqn, e))
with open(os.path.join(files, "train_state"), "rb") as f:
    check(f.read() == TRAIN_STATE, "train_state: the byte object through the mount")
with open(os.path.join(cats, "train_state.bin"), "rb") as f:
    check(f.read() == TRAIN_STATE, "train_state: ckpt cat of the byte object")
PY
}

# cat_all CK OUTDIR: `ckpt cat` of every tensor of CK into OUTDIR/<fqn>.bin;
# the FQNs, one per line, in OUTDIR/fqns.
cat_all() {
    local ck=$1 out=$2 fqn
    mkdir -p "$out"
    "$CKPT" ls "$ck" | tail -n +2 | awk '{ print $1 }' >"$out/fqns"
    while read -r fqn; do
        "$CKPT" cat "$ck" "$fqn" >"$out/$fqn.bin" || bad "ckpt cat $ck $fqn"
    done <"$out/fqns"
}

# same_as_pack CK PACKED: every tensor of CK has the dtype, shape and bytes
# of its namesake in PACKED, and neither has a tensor the other lacks.
same_as_pack() {
    local ck=$1 packed=$2 fqn
    "$CKPT" ls "$ck" | tail -n +2 | awk '{ print $1, $2, $3, $4 }' >"$TMP/ls.a"
    "$CKPT" ls "$packed" | tail -n +2 | awk '{ print $1, $2, $3, $4 }' >"$TMP/ls.b"
    if cmp -s "$TMP/ls.a" "$TMP/ls.b"; then
        ok "$(basename "$ck"): same FQNs, dtypes, shapes and sizes as ckpt pack of the reference ($(wc -l <"$TMP/ls.a") tensors)"
    else
        bad "$(basename "$ck"): ckpt ls differs from ckpt pack's: $(diff "$TMP/ls.a" "$TMP/ls.b" | head -n 6 | tr '\n' '~')"
    fi
    while read -r fqn _; do
        "$CKPT" cat "$packed" "$fqn" >"$TMP/a.bin" 2>/dev/null
        "$CKPT" cat "$ck" "$fqn" >"$TMP/b.bin" 2>/dev/null
        cmp -s "$TMP/a.bin" "$TMP/b.bin" || bad "$(basename "$ck"): $fqn: bytes differ from ckpt pack's"
    done <"$TMP/ls.b"
}

# committed_on_disk CK: index.db there, no save left in progress.
committed_on_disk() {
    check "$(basename "$1"): index.db on disk" test -f "$1/index.db"
    check "$(basename "$1"): no .pending left" test ! -e "$1/.pending"
    run_ckpt verify "$1"
    expect_ok "ckpt verify $(basename "$1")"
}

status_is() {   # status_is CKDIR WANT
    local got
    got=$(cat "$1/.ckptfs/status" 2>&1)
    check "$(basename "$1")/.ckptfs/status reads '$2' (got '$got')" test "$got" = "$2"
}

# ------------------------------------------------------------ MPI example
mpi=1
if ! command -v mpirun >/dev/null 2>&1; then
    echo "SKIP: MPI part: mpirun is not installed"
    mpi=0
elif [ ! -x "$mpi_example" ]; then
    echo "SKIP: MPI part: the example is not built ($mpi_example; configure found no MPI)"
    mpi=0
fi

if [ "$mpi" = 1 ]; then
    mpi_ref gen "$TMP/ref" >"$TMP/pack.args" || {
        echo "ERROR: the NumPy reference failed" >&2
        exit 99
    }
    mapfile -t pack_args <"$TMP/pack.args"
    run_ckpt pack --meta step=100 "$TMP/packed/ref" "${pack_args[@]}"
    expect_ok "ckpt pack of the NumPy reference"

    # One mount, four ranks.
    mount_ck "$ROOT" "$MNT" -o rw,world=4 || summary
    mpirun_ -n 4 "$mpi_example" "$MNT/step-1" >"$TMP/mpi1.log" 2>&1
    rc=$?
    check "mpirun -n 4: the example saves through one mount, commits and reads back (exit $rc)" test "$rc" -eq 0
    [ "$rc" -eq 0 ] || show_log "$TMP/mpi1.log"
    status_is "$MNT/step-1" committed
    umount_ck "$MNT"
    expect_daemon_clean "rw mount, 4 ranks" "$MNT_LOG"
    committed_on_disk "$ROOT/step-1"

    # Two mounts of the same root, two ranks on each: rank r writes through
    # the r * 2 / 4-th directory given.
    mount_ck "$ROOT" "$TMP/mntA" -o rw,world=4 || summary
    logA=$MNT_LOG
    mount_ck "$ROOT" "$TMP/mntB" -o rw,world=4 || summary
    logB=$MNT_LOG
    mpirun_ -n 4 "$mpi_example" "$TMP/mntA/step-2" "$TMP/mntB/step-2" >"$TMP/mpi2.log" 2>&1
    rc=$?
    check "mpirun -n 4: ranks 0-1 through mount A, 2-3 through mount B commit one checkpoint (exit $rc)" test "$rc" -eq 0
    [ "$rc" -eq 0 ] || show_log "$TMP/mpi2.log"
    status_is "$TMP/mntA/step-2" committed
    umount_ck "$TMP/mntA"
    expect_daemon_clean "rw mount A" "$logA"
    umount_ck "$TMP/mntB"
    expect_daemon_clean "rw mount B" "$logB"
    committed_on_disk "$ROOT/step-2"

    # Read-only: the example's own check, then NumPy's.
    mount_ck "$ROOT" "$MNT" || summary
    for s in step-1 step-2; do
        mpirun_ -n 2 "$mpi_example" --check "$MNT/$s" >"$TMP/check.log" 2>&1
        rc=$?
        check "$s: the example's --check on the read-only mount (2 ranks; exit $rc)" test "$rc" -eq 0
        [ "$rc" -eq 0 ] || show_log "$TMP/check.log"
        cat_all "$ROOT/$s" "$TMP/cat.$s"
        mpi_ref cmp "$MNT/$s" "$MNT/$s/.npy" "$TMP/cat.$s" >"$TMP/ref.out" 2>&1
        report "$TMP/ref.out" "$s: "
        step=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta"].get("step"))' \
            "$MNT/$s/.ckptfs/metadata.json" 2>&1)
        check "$s: metadata step is 100 (got $step)" test "$step" = 100
        same_as_pack "$ROOT/$s" "$TMP/packed/ref"
    done
    umount_ck "$MNT"
    expect_daemon_clean "read-only mount of the MPI checkpoints" "$MNT_LOG"
fi

# ------------------------------------------------------------ Python example
mount_ck "$ROOT" "$MNT" -o rw,world=2 || summary
timeout 120 "$PY" "$py_example" "$MNT/step-3" >"$TMP/py.log" 2>&1
rc=$?
check "2 Python processes save through the mount, commit and read back (exit $rc)" test "$rc" -eq 0
[ "$rc" -eq 0 ] || show_log "$TMP/py.log"
status_is "$MNT/step-3" committed
if [ "$mpi" = 1 ]; then
    # committed checkpoints of the root are read-only, and still read
    expect_erofs "creating a file in the committed step-1 through the rw mount" \
        touch "$MNT/step-1/model/new"
    check "step-1 still reads through the rw mount" \
        cmp -s "$MNT/step-1/model/embed/weight" "$TMP/cat.step-1/model.embed.weight.bin"
fi
umount_ck "$MNT"
expect_daemon_clean "rw mount, 2 Python processes" "$MNT_LOG"
committed_on_disk "$ROOT/step-3"

mount_ck "$ROOT" "$MNT" || summary
timeout 120 "$PY" "$py_example" --check "$MNT/step-3" >"$TMP/pycheck.log" 2>&1
rc=$?
check "the Python example's --check on the read-only mount (exit $rc)" test "$rc" -eq 0
[ "$rc" -eq 0 ] || show_log "$TMP/pycheck.log"
cat_all "$ROOT/step-3" "$TMP/cat.step-3"
n=0
while read -r fqn; do
    n=$((n + 1))
    path=$MNT/step-3/${fqn//.//}
    [ -d "$path" ] && path=$path.tensor
    same_bytes "step-3: $fqn through the mount equals ckpt cat" "$TMP/cat.step-3/$fqn.bin" "$path"
done <"$TMP/cat.step-3/fqns"
check "step-3 holds the Python example's 7 tensors (found $n)" test "$n" -eq 7
umount_ck "$MNT"
expect_daemon_clean "read-only mount of the Python checkpoint" "$MNT_LOG"

if [ "$mpi" = 1 ]; then
    run_ckpt verify "$ROOT/step-1"
    expect_ok "step-1 still verifies after the later saves"
fi
summary
