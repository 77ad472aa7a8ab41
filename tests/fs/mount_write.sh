#!/bin/bash
# mount_write.sh - writing checkpoints through a writable mount
# (docs/MOUNT.md, "Writing"), against NumPy references:
#   - a save from the shell (mkdir, setfattr, cat, echo RANK > commit) and
#     with inferred sizes, a scalar, a byte object, a bf16 tensor; status
#     pending K/N then committed; the result reads through the mount, with
#     `ckpt cat` and `ckpt verify` exactly as the data written;
#   - committed checkpoints of the same root stay read-only and readable
#     while a save is written;
#   - two processes writing pieces of one file at once; two mounts of one
#     root writing one checkpoint; `ckpt commit DIR --world N`;
#   - errors, each with nothing committed and the earlier checkpoint intact:
#     bad xattr values, too many / too few bytes, a write out of order, two
#     replicas with different bytes, ranks disagreeing on dtype or shape,
#     a declared tensor whose only piece failed (EINVAL at close, EFBIG, a
#     non-sequential write; through a daemon that is gone by the commit),
#     overlapping pieces, a gap, a rank outside 0..N-1, a rank committing
#     twice, a daemon killed mid-save (then gc and a re-run), a full disk.
. "$(dirname "$0")/lib.sh"

WPUT=$HELPERS/wput.py
R=$TMP/root
M=$TMP/mnt
IN=$TMP/in
mkdir -p "$R" "$IN"

"$PY" - "$IN" <<'EOF' || exit 99
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(4)
np.save(d + "/w.npy", rng.standard_normal((64, 48)).astype("<f4"))
np.save(d + "/e.npy", rng.integers(-1000, 1000, (10, 12)).astype("<i8"))
np.save(d + "/h.npy", rng.standard_normal((6, 5)).astype("<f4"))
bf = (rng.standard_normal((32, 16)).astype("<f4").view("<u4") >> 16).astype("<u2")
bf.tofile(d + "/bf.bin")
np.array(3.5, dtype="<f8").tofile(d + "/s.bin")
open(d + "/note.bin", "wb").write(b"step=7 rng-state " * 33)
rng.integers(0, 256, 6 << 20, dtype="u1").tofile(d + "/big.bin")
for n in ("w", "e", "h"):
    np.load(d + "/%s.npy" % n).tofile(d + "/%s.bin" % n)
EOF

# put PATH SRC [wput options]: one piece; the output in $TMP/put.out.
put() {
    "$PY" "$WPUT" put "$@" >"$TMP/put.out" 2>&1
}
# expect_put DESC: the last put succeeded.
expect_put() {
    if grep -qx ok "$TMP/put.out"; then ok "$1"; else bad "$1: $(tr '\n' ' ' <"$TMP/put.out")"; fi
}
# expect_put_err DESC STEP ERRNO: the last put/commit failed there, so.
expect_put_err() {
    if grep -qx "ERR $2 $3" "$TMP/put.out"; then ok "$1 ($2: $3)"; else bad "$1: want 'ERR $2 $3', got: $(tr '\n' ' ' <"$TMP/put.out")"; fi
}
commit() {
    "$PY" "$WPUT" commit "$@" >"$TMP/put.out" 2>&1
}
status_is() {
    local got
    got=$(cat "$M/$1/.ckptfs/status" 2>&1)
    if [[ $got =~ $2 ]]; then ok "$1: status '$got'"; else bad "$1: status '$got', want /$2/"; fi
}
not_committed() {
    if [ ! -e "$R/$1/index.db" ]; then ok "$1: no index.db"; else bad "$1: index.db exists"; fi
}
log_says() {
    if grep -E -q -- "$2" "$MNT_LOG"; then ok "$1 (log ~ /$2/)"; else bad "$1: the log does not match /$2/"; echo "     log: $(tail -c 600 "$MNT_LOG" | tr '\n' '~')"; fi
}
verify_ok() {
    run_ckpt verify "$1"
    expect_ok "ckpt verify $(basename "$1")"
}

# An earlier checkpoint in the root, made by ckpt pack.
run_ckpt pack --grid 2 "$R/step-000001" "model.w=$IN/w.npy" "model.e=$IN/e.npy"
expect_ok "pack step-000001 into the root"

echo "# ---- writable mounts refused"
refuse_mount "-o rw without world" 'needs -o world=N' "$R" 2 -o rw
refuse_mount "-o world=0" 'world=N with N from 1' "$R" 2 -o rw,world=0
refuse_mount "-o sync=always" 'sync=close or sync=commit' "$R" 2 -o rw,world=1,sync=always
refuse_mount "-o rw on a checkpoint" 'is a checkpoint; a writable mount' "$R/step-000001" 1 -o rw,world=1

mount_ck "$R" "$M" -o rw,world=2 || exit 1
MAIN_LOG=$MNT_LOG
MAIN_PID=$MNT_PID

# ------------------------------------------------------------ shell save
echo "# ---- a save from the shell"
S=step-000002
check "mkdir $S" mkdir "$M/$S"
check "mkdir -p $S again (joins)" mkdir -p "$M/$S/model"
if mkdir "$M/$S" 2>"$TMP/err"; then bad "mkdir of an existing save succeeds"; else
    grep -q 'File exists' "$TMP/err" && ok "mkdir of an existing save: EEXIST" || bad "mkdir: $(cat "$TMP/err")"; fi
status_is $S '^pending 0/2$'
mkdir "$M/.hidden" 2>/dev/null && bad "mkdir of a hidden checkpoint name succeeds" || ok "mkdir .hidden in the root is refused"
touch "$M/file" 2>"$TMP/err" && bad "a file in the root is created" || { grep -q 'not permitted' "$TMP/err" && ok "a file in the root: EPERM" || bad "a file in the root: $(cat "$TMP/err")"; }
touch "$M/$S/a.b" 2>"$TMP/err" && bad "a file name with a dot is created" || { grep -q 'Invalid argument' "$TMP/err" && ok "a name with a '.' in a save: EINVAL" || bad "a.b: $(cat "$TMP/err")"; }
log_says "the log says why the dotted name was refused" "not a name a tensor path may hold"
# model.w: 64x48 f32 split on dim 0; rank 0 from the shell
touch "$M/$S/model/w"
check "setfattr dtype" setfattr -n user.ckpt.dtype -v float32 "$M/$S/model/w"
check "setfattr shape" setfattr -n user.ckpt.shape -v 64,48 "$M/$S/model/w"
check "setfattr offsets" setfattr -n user.ckpt.offsets -v 0,0 "$M/$S/model/w"
check "setfattr sizes" setfattr -n user.ckpt.sizes -v 40,48 "$M/$S/model/w"
check "getfattr shows the shape" test "$(xattr_get "$M/$S/model/w" user.ckpt.shape)" = 64,48
check "cat rows 0..39 into model/w" \
    sh -c "head -c $((40 * 48 * 4)) '$IN/w.bin' > '$M/$S/model/w'"
# rank 1: rows 40..63 with explicit sizes, bf16 tensor whole, bytes object, scalar
put "$M/$S/model/w" "$IN/w.bin" --dtype f32 --shape 64,48 --offsets 40,0 --sizes 24,48 --from $((40 * 48 * 4))
expect_put "rank 1 writes rows 40..63 of model.w"
put "$M/$S/model/bf" "$IN/bf.bin" --dtype bfloat16 --shape 32,16 --block 1000
expect_put "a bf16 tensor in odd-sized writes"
put "$M/$S/note" "$IN/note.bin" --shape 561
expect_put "a file with a length and no dtype: a byte object"
put "$M/$S/scale" "$IN/s.bin" --dtype '<f8' --shape ''
expect_put "a scalar"
# model.p: the same bytes, its two pieces each described by one setxattr
# of user.ckpt.piece (#26: one round trip instead of four)
half=$((32 * 48 * 4))
touch "$M/$S/model/p"
check "setfattr user.ckpt.piece, rows 0..31" setfattr -n user.ckpt.piece \
    -v "dtype=f32 shape=64,48 offsets=0,0 sizes=32,48" "$M/$S/model/p"
check "getfattr user.ckpt.piece reads the pairs back" test \
    "$(xattr_get "$M/$S/model/p" user.ckpt.piece)" = "dtype=f32 shape=64,48 offsets=0,0 sizes=32,48"
check "getfattr user.ckpt.sizes: the single attribute it set" test \
    "$(xattr_get "$M/$S/model/p" user.ckpt.sizes)" = 32,48
check "cat rows 0..31 into model/p" sh -c "head -c $half '$IN/w.bin' > '$M/$S/model/p'"
check "setfattr user.ckpt.piece, rows 32..63" setfattr -n user.ckpt.piece \
    -v "offsets=32,0 sizes=32,48" "$M/$S/model/p"
check "cat rows 32..63 into model/p" sh -c "tail -c +$((half + 1)) '$IN/w.bin' > '$M/$S/model/p'"
check "set meta step" setfattr -n user.ckpt.meta.step -v 2 "$M/$S"
check "getfattr reads it back" test "$(xattr_get "$M/$S" user.ckpt.meta.step)" = 2
"$PY" "$WPUT" setx "$M/$S" user.ckpt.meta.step 3 >"$TMP/put.out"
expect_put_err "another value for the step" setxattr EINVAL
"$PY" "$WPUT" setx "$M/$S" user.ckpt.meta.world_size 3 >"$TMP/put.out"
expect_put_err "a reserved key" setxattr EINVAL
status_is $S '^pending 0/2$'
check "rank 0 commits (echo 0 > commit)" sh -c "echo 0 > '$M/$S/.ckptfs/commit'"
status_is $S '^pending 1/2$'
not_committed $S
check "rank 1 commits" sh -c "echo 1 > '$M/$S/.ckptfs/commit'"
status_is $S '^committed$'
check "index.db exists" test -f "$R/$S/index.db"
check "no .pending left" test ! -e "$R/$S/.pending"
for t in w bf; do
    cmp -s "$IN/$t.bin" "$M/$S/model/$t" && ok "model/$t reads back as written" || bad "model/$t differs"
done
cmp -s "$IN/w.bin" "$M/$S/model/p" && ok "model/p (user.ckpt.piece) reads back as written" || bad "model/p differs"
cmp -s "$IN/note.bin" "$M/$S/note" && ok "note reads back" || bad "note differs"
cmp -s "$IN/s.bin" "$M/$S/scale" && ok "the scalar reads back" || bad "scale differs"
"$PY" -c "import numpy as np,sys; a=np.load(sys.argv[1]); b=np.load(sys.argv[2]); sys.exit(0 if a.dtype==b.dtype and (a==b).all() else 1)" \
    "$IN/w.npy" "$M/$S/.npy/model/w.npy" && ok "numpy.load of the .npy view equals the source" || bad "the .npy view differs"
run_ckpt ls "$R/$S"
expect_out_re '^model\.w +f32 +64,48 ' "ckpt ls: model.w f32 64,48"
expect_out_re '^note +bytes +561 ' "ckpt ls: note is a byte object of 561 bytes"
run_ckpt info "$R/$S"
expect_out_re 'step.*2' "ckpt info shows meta step=2"
expect_out_re 'world_size.*2' "ckpt info shows world_size=2"
verify_ok "$R/$S"
check "ls shows the new checkpoint and latest -> it" test "$(readlink "$M/latest")" = $S
# Shard files are named as README.md ("How it stores a checkpoint") says
# a mount save names them: rank<R>[-K] for a writer of a known rank (here:
# none declared, world=2), else <host>-<pid>-<6 hex digits>-<n>.
names=$(cd "$R/$S/data" && ls)
if [ -n "$names" ] && ! echo "$names" | grep -v -E -q '^([A-Za-z0-9_-]+-[0-9]+-[0-9a-f]{6}-[0-9]+|rank[0-9]+(-[0-9]+)?)\.shard$'; then
    ok "shard files named as README says: $(echo $names)"
else
    bad "shard files '$(echo $names)' are not named rank<R>[-K] or <host>-<pid>-<6 hex digits>-<n>.shard as README says"
fi

echo "# ---- committed checkpoints stay read-only"
expect_erofs "touch in a committed checkpoint" touch "$M/step-000001/x"
expect_erofs "mkdir in a committed checkpoint" mkdir "$M/$S/model/y"
expect_erofs "setfattr on a committed tensor" setfattr -n user.ckpt.dtype -v f32 "$M/step-000001/model/w"
expect_erofs "write a committed tensor" sh -c "echo x > '$M/$S/note'"
run_ckpt cat "$R/step-000001" model.w
same_bytes "step-000001 still reads" "$IN/w.bin" "$OUT"

# ------------------------------------------------------------ concurrency
echo "# ---- two processes write pieces of one file at once"
S=step-000003
mkdir -p "$M/$S/m"
"$PY" "$WPUT" put "$M/$S/m/h" "$IN/h.bin" --dtype f32 --shape 6,5 --offsets 0,0 --sizes 3,5 --to 60 --hold 0.5 >"$TMP/p0" 2>&1 &
P0=$!
"$PY" "$WPUT" put "$M/$S/m/h" "$IN/h.bin" --dtype f32 --shape 6,5 --offsets 3,0 --sizes 3,5 --from 60 --hold 0.5 >"$TMP/p1" 2>&1 &
P1=$!
wait $P0; wait $P1
grep -qx ok "$TMP/p0" && grep -qx ok "$TMP/p1" && ok "both writers succeed" || bad "writers: $(cat "$TMP/p0" "$TMP/p1" | tr '\n' ' ')"
commit "$M/$S" 0 1
expect_put "ranks 0 and 1 in one write"
cmp -s "$IN/h.bin" "$M/$S/m/h" && ok "m/h reads back whole" || bad "m/h differs"

echo "# ---- three pieces open at once, written in whole 1 MiB frames"
# With as many pieces open as CPUs (here up to 3), the daemon encodes each
# write's frames from libfuse's buffer instead of a copy (#26); with more
# CPUs, from the copy: the bytes must come back the same either way
# (test_readwrite's test_stream_in_pieces overwrites a lent buffer as soon
# as the call returns, which this race-bound test cannot).
S=step-000005
mkdir -p "$M/$S"
pids=()
for r in 0 1 2; do
    "$PY" "$WPUT" put "$M/$S/big" "$IN/big.bin" --dtype u8 --shape 3,2097152 \
        --offsets $r,0 --sizes 1,2097152 --from $((r << 21)) --to $(((r + 1) << 21)) \
        --block 1048576 --hold 0.5 >"$TMP/big$r" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
grep -qx ok "$TMP/big0" && grep -qx ok "$TMP/big1" && grep -qx ok "$TMP/big2" &&
    ok "three writers of 2 MiB pieces succeed" || bad "writers: $(cat "$TMP"/big[012] | tr '\n' ' ')"
commit "$M/$S" 0 1
expect_put "ranks 0 and 1 commit the three pieces"
cmp -s "$IN/big.bin" "$M/$S/big" && ok "big reads back whole" || bad "big differs"

echo "# ---- ckpt commit DIR --world N commits what the writers left"
S=step-000004
mkdir -p "$M/$S"
put "$M/$S/e" "$IN/e.bin" --dtype i64 --shape 10,12
expect_put "one piece"
run_ckpt commit "$R/$S" --world 3
expect_ok "ckpt commit --world 3"
run_ckpt info "$R/$S"
expect_out_re 'world_size.*3' "world_size=3 recorded"
run_ckpt cat "$R/$S" e
same_bytes "e reads back" "$IN/e.bin" "$OUT"

# ------------------------------------------------------------ errors
echo "# ---- attribute values that do not parse: EINVAL, the log says why"
S=step-000010
mkdir -p "$M/$S"
put "$M/$S/x" "$IN/h.bin" --dtype float33
expect_put_err "unknown dtype" setxattr-dtype EINVAL
log_says "the log names the dtype" "unknown dtype 'float33'"
put "$M/$S/x" "$IN/h.bin" --dtype f32 --shape 6,x
expect_put_err "a shape that does not parse" setxattr-shape EINVAL
put "$M/$S/x" "$IN/h.bin" --dtype f32 --shape 6,5 --offsets 7,0
expect_put_err "offsets outside the shape" setxattr-offsets EINVAL
log_says "the log says outside" "outside the shape"
put "$M/$S/x" "$IN/h.bin" --dtype f32 --shape 6,5 --offsets 0,0,0
expect_put_err "offsets of another rank" setxattr-offsets EINVAL
put "$M/$S/x" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 4,6
expect_put_err "sizes past the shape" setxattr-sizes EINVAL
"$PY" "$WPUT" setx "$M/$S/x" user.other v >"$TMP/put.out"
expect_put_err "an attribute ckptfs does not keep" setxattr ENOTSUP
mkdir -p "$M/step-000041" && touch "$M/step-000041/y"   # a save of its own
"$PY" "$WPUT" setx "$M/step-000041/y" user.ckpt.piece "dtype=f32 shape=6,5 offsets=7,0" >"$TMP/put.out"
expect_put_err "user.ckpt.piece with offsets outside the shape" setxattr EINVAL
log_says "the log says which pair" "user.ckpt.offsets"
check "a refused user.ckpt.piece sets none of its pairs" \
    test -z "$(xattr_get "$M/step-000041/y" user.ckpt.dtype)"
"$PY" "$WPUT" setx "$M/step-000041/y" user.ckpt.piece "dtype=f32 fqn=z" >"$TMP/put.out"
expect_put_err "user.ckpt.piece with an unknown key" setxattr EINVAL

echo "# ---- wrong byte counts and out-of-order writes"
put "$M/$S/x" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 3,5
expect_put_err "more bytes than the piece holds" write EFBIG
put "$M/$S/x" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 6,5 --to 100
expect_put "fewer bytes than the piece holds: the close succeeds (the kernel does not say it is the last)"
for ((i = 0; i < 100; i++)); do
    grep -q "closed after 100 of the piece's 120 bytes" "$M/$S/.ckptfs/errors" && break
    sleep 0.1
done
grep -q "closed after 100 of the piece's 120 bytes" "$M/$S/.ckptfs/errors" &&
    ok ".ckptfs/errors counts the bytes once the descriptor is released" ||
    bad ".ckptfs/errors: $(tr '\n' '~' <"$M/$S/.ckptfs/errors")"
put "$M/$S/x" "$IN/h.bin" --dtype f32 --shape 6,5 --seek 20
expect_put_err "a write at a non-sequential offset" write EINVAL
log_says "the log says sequentially" "written sequentially"
# x was declared (created and described) but every piece of it failed: a
# commit must not drop it silently.
run_ckpt commit "$R/$S"
expect_rc 1 "ckpt commit refuses a declared tensor whose pieces all failed"
expect_err_re "tensor 'x' has no piece: .*piece failed: .*sequentially" "the refusal names x and why its last piece failed"
not_committed $S

# fails_commit NAME WHY_RE: both ranks commit, the last write gets EIO,
# the status and the log name the problem, nothing is committed.
fails_commit() {
    commit "$M/$1" 0
    expect_put "$1: rank 0 commits"
    commit "$M/$1" 1
    expect_put_err "$1: the completing rank's write fails" commit EIO
    status_is "$1" "^failed: .*$2"
    not_committed "$1"
}

echo "# ---- replicas with different bytes"
S=step-000011
mkdir -p "$M/$S"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5; expect_put "rank 0's replica"
put "$M/$S/h" "$IN/w.bin" --dtype f32 --shape 6,5 --to 120; expect_put "rank 1's replica (other bytes)"
fails_commit $S "differ|replica"

echo "# ---- ranks disagreeing on dtype"
S=step-000012
mkdir -p "$M/$S"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 3,5 --to 60; expect_put "rank 0: f32"
put "$M/$S/h" "$IN/h.bin" --dtype i32 --shape 6,5 --offsets 3,0 --from 60; expect_put "rank 1: i32"
fails_commit $S "dtype"

echo "# ---- ranks disagreeing on shape"
S=step-000013
mkdir -p "$M/$S"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 3,5 --to 60; expect_put "rank 0: 6,5"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 7,5 --offsets 3,0 --sizes 3,5 --from 60; expect_put "rank 1: 7,5"
fails_commit $S "shape"

echo "# ---- overlapping pieces"
S=step-000014
mkdir -p "$M/$S"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 4,5 --to 80; expect_put "rows 0..3"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5 --offsets 2,0 --from 40; expect_put "rows 2..5"
fails_commit $S "overlap"

echo "# ---- a gap"
S=step-000015
mkdir -p "$M/$S"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 2,5 --to 40; expect_put "rows 0..1"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5 --offsets 4,0 --from 80; expect_put "rows 4..5"
fails_commit $S "cover|gap|missing"

echo "# ---- a declared tensor whose only piece failed is refused at commit"
# The reproduction: a and w created and described (f32 1024x1024); a gets
# its 4 MiB, w 1000 bytes (nothing recorded); the commit must refuse w.
S=step-000017
mkdir -p "$M/$S"
head -c $((1024 * 1024 * 4)) /dev/urandom >"$IN/a4m.bin"
put "$M/$S/a" "$IN/a4m.bin" --dtype f32 --shape 1024,1024; expect_put "a: 4 MiB"
put "$M/$S/w" "$IN/a4m.bin" --dtype f32 --shape 1024,1024 --sizes 1024,1024 --to 1000
expect_put "w: 1000 bytes of 4 MiB"
fails_commit $S "tensor 'w' has no piece"
log_says "the log names w and why" "tensor 'w' has no piece"
echo "# ---- EFBIG and a non-sequential write, each a tensor's only piece"
S=step-000018
mkdir -p "$M/$S"
put "$M/$S/a" "$IN/h.bin" --dtype f32 --shape 6,5; expect_put "a: whole"
put "$M/$S/big" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 3,5
expect_put_err "big: past its piece's end" write EFBIG
fails_commit $S "tensor 'big' has no piece: .*piece failed: .*goes past its end"
S=step-000019
mkdir -p "$M/$S"
put "$M/$S/a" "$IN/h.bin" --dtype f32 --shape 6,5; expect_put "a: whole"
put "$M/$S/seq" "$IN/h.bin" --dtype f32 --shape 6,5 --seek 20
expect_put_err "seq: a non-sequential write" write EINVAL
fails_commit $S "tensor 'seq' has no piece: .*piece failed: .*written sequentially"
echo "# ---- the declaration and the reason outlive the daemon that saw them"
S=step-000021
M3=$TMP/mnt3
mount_ck "$R" "$M3" -o rw,world=2 || exit 1
mkdir -p "$M3/$S"
put "$M3/$S/a" "$IN/h.bin" --dtype f32 --shape 6,5; expect_put "a through another mount"
put "$M3/$S/w" "$IN/h.bin" --dtype f32 --shape 6,5 --sizes 3,5
expect_put_err "w's piece fails there" write EFBIG
touch "$M3/$S/never"; ok "never: created, never written"
umount_ck "$M3"
MNT_LOG=$MAIN_LOG
mkdir -p "$M/$S"      # this mount joins the save the other daemon left
fails_commit $S "tensor '(w|never)' has no piece"
run_ckpt commit "$R/$S"
expect_rc 1 "ckpt commit refuses it too"
expect_err_re "tensor 'never' has no piece: .*none was written|tensor 'w' has no piece: .*goes past its end" \
    "naming the tensor and what happened to it"

echo "# ---- bad rank numbers"
S=step-000016
mkdir -p "$M/$S"
put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5; expect_put "a whole tensor"
commit "$M/$S" 2
expect_put_err "rank 2 with world=2" commit EINVAL
commit "$M/$S" -1
expect_put_err "rank -1" commit EINVAL
commit "$M/$S" one
expect_put_err "not a number" commit EINVAL
commit "$M/$S" 0
expect_put "rank 0"
commit "$M/$S" 0
expect_put_err "rank 0 again" commit EINVAL
log_says "the log says already committed" "rank 0 has already committed"
status_is $S '^pending 1/2$'
not_committed $S

for s in 000001 000002 000003; do verify_ok "$R/step-$s"; done

echo "# ---- a second mount on the same root joins the save"
M2=$TMP/mnt2
mount_ck "$R" "$M2" -o rw,world=2,sync=close || exit 1
S=step-000020
mkdir -p "$M/$S/m"
mkdir -p "$M2/$S/m" && ok "mkdir -p on the second mount joins $S" || bad "mkdir -p on mount 2"
put "$M/$S/m/w" "$IN/w.bin" --dtype f32 --shape 64,48 --sizes 32,48 --to $((32 * 48 * 4))
expect_put "rank 0 through mount 1"
put "$M2/$S/m/w" "$IN/w.bin" --dtype f32 --shape 64,48 --offsets 32,0 --from $((32 * 48 * 4))
expect_put "rank 1 through mount 2"
commit "$M/$S" 0; expect_put "rank 0 commits on mount 1"
got=$(cat "$M2/$S/.ckptfs/status"); [ "$got" = "pending 1/2" ] && ok "mount 2 sees pending 1/2" || bad "mount 2 status: $got"
commit "$M2/$S" 1; expect_put "rank 1 commits on mount 2"
got=$(cat "$M/$S/.ckptfs/status"); [ "$got" = committed ] && ok "mount 1 sees committed" || bad "mount 1 status: $got"
cmp -s "$IN/w.bin" "$M/$S/m/w" && ok "mount 1 reads the joined tensor" || bad "mount 1 read differs"
cmp -s "$IN/w.bin" "$M2/$S/m/w" && ok "mount 2 reads it" || bad "mount 2 read differs"
ls "$R/$S/data" | wc -l | grep -qx 2 && ok "two shard files, one per writer" || bad "shards: $(ls "$R/$S/data")"
umount_ck "$M2"

echo "# ---- a name saved again after its checkpoint was deleted"
S=step-000025
for round in 1 2; do
    mkdir -p "$M/$S"
    put "$M/$S/h" "$IN/h.bin" --dtype f32 --shape 6,5; expect_put "round $round: a piece"
    commit "$M/$S" 0 1; expect_put "round $round: commit"
    cmp -s "$IN/h.bin" "$M/$S/h" && ok "round $round: reads back" || bad "round $round: h differs"
    rm -rf "${R:?}/$S"
    sleep 1.2      # the kernel keeps names for a second
done

echo "# ---- the daemon killed in the middle of a save"
S=step-000030
mkdir -p "$M/$S"
put "$M/$S/e" "$IN/e.bin" --dtype i64 --shape 10,12; expect_put "a first piece"
"$PY" "$WPUT" put "$M/$S/big" "$IN/big.bin" --shape "$(stat -c %s "$IN/big.bin")" --block 65536 --delay 0.05 >"$TMP/kill.out" 2>&1 &
WP=$!
sleep 0.5
kill -KILL "$MAIN_PID"
wait $WP
grep -q '^ERR' "$TMP/kill.out" && ok "the writer gets an error ($(cat "$TMP/kill.out"))" || bad "the writer: $(cat "$TMP/kill.out")"
umount_ck "$M" -z
not_committed $S
for s in 000001 000002 000003 000020; do verify_ok "$R/step-$s"; done
run_ckpt gc --min-age 0 "$R"
expect_out_re "removed $S: unfinished save" "ckpt gc removes the interrupted save"
check "$S is gone" test ! -e "$R/$S"
check "gc removed the failed saves too" test ! -e "$R/step-000011"
mount_ck "$R" "$M" -o rw,world=1 || exit 1
mkdir "$M/$S" && ok "mkdir $S again" || bad "mkdir $S after gc"
put "$M/$S/e" "$IN/e.bin" --dtype i64 --shape 10,12; expect_put "re-run: e"
put "$M/$S/big" "$IN/big.bin" --shape "$(stat -c %s "$IN/big.bin")"; expect_put "re-run: big"
commit "$M/$S" 0; expect_put "re-run: commit"
run_ckpt cat "$R/$S" big
same_bytes "the re-run save is complete" "$IN/big.bin" "$OUT"
for s in 000001 000002 000003 000020; do verify_ok "$R/step-$s"; done
umount_ck "$M"
expect_daemon_clean "the writable mount" "$MNT_LOG"

echo "# ---- the backing file system full"
SMALL=$TMP/small
mkdir -p "$SMALL"
if mount -t tmpfs -o size=3m tmpfs "$SMALL" 2>/dev/null; then
    trap 'umount -l "$SMALL" 2>/dev/null' RETURN 2>/dev/null
    mkdir -p "$SMALL/root"
    run_ckpt pack "$SMALL/root/step-1" "h=$IN/h.npy"
    expect_ok "a small earlier checkpoint on the tmpfs"
    mount_ck "$SMALL/root" "$M" -o rw,world=1,codec=raw || exit 1
    mkdir -p "$M/step-2"
    put "$M/step-2/big" "$IN/big.bin" --shape "$(stat -c %s "$IN/big.bin")"
    if grep -Eq '^ERR (write|close) ENOSPC$' "$TMP/put.out"; then ok "ENOSPC reaches the writer ($(cat "$TMP/put.out"))"; else bad "full disk: $(cat "$TMP/put.out")"; fi
    commit "$M/step-2" 0
    grep -q '^ERR' "$TMP/put.out" && ok "the commit fails ($(cat "$TMP/put.out"))" || bad "the commit succeeded on a full disk"
    check "step-2 has no index.db" test ! -e "$SMALL/root/step-2/index.db"
    umount_ck "$M"
    expect_daemon_clean "the mount on a full disk" "$MNT_LOG"
    verify_ok "$SMALL/root/step-1"
    umount -l "$SMALL"
else
    echo "     (cannot mount a tmpfs here: the full-disk case is skipped)"
fi

summary
