#!/bin/bash
# mount_delta.sh - delta saves through a writable mount (docs/MOUNT.md,
# "Options", -o delta=latest): with -o delta=latest a save written with plain POSIX
# calls is a delta against the newest committed checkpoint of the root:
# its unchanged frames are references, and it reads back (through the
# mount and with ckpt cat) exactly as written; without the option, or in
# an empty root, a save is whole.  -o delta=other is refused.
. "$(dirname "$0")/lib.sh"

WPUT=$HELPERS/wput.py
R=$TMP/root
M=$TMP/mnt
IN=$TMP/in
mkdir -p "$R" "$IN"
"$PY" - "$IN" <<'PY' || exit 99
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(28)
w = rng.standard_normal((256, 1024)).astype("<f4")
np.save(d + "/w.npy", w)
w2 = w.copy(); w2[100:104] += np.float32(0.25)
w2.tofile(d + "/w2.bin")
PY
run_ckpt pack --frame-size 64K "$R/step-000001" "w=$IN/w.npy"
expect_ok "pack step-000001 into the root"
refuse_mount "-o delta=other" 'delta=latest' "$R" 2 -o rw,world=1,delta=other

mount_ck "$R" "$M" -o rw,world=1,delta=latest,frame_size=64K || exit 1
S=step-000002
mkdir "$M/$S"
"$PY" "$WPUT" put "$M/$S/w" "$IN/w2.bin" --dtype f32 --shape 256,1024 \
    >"$TMP/put.out" 2>&1
if grep -qx ok "$TMP/put.out"; then ok "write w through the mount"; else bad "put: $(cat "$TMP/put.out")"; fi
"$PY" "$WPUT" commit "$M/$S" 0 >"$TMP/put.out" 2>&1
if grep -qx ok "$TMP/put.out"; then ok "commit $S"; else bad "commit: $(cat "$TMP/put.out")"; fi
check "$S is committed" test -f "$R/$S/index.db"
codecs=$(sqlite3 "file:$R/$S/index.db?immutable=1" \
    "SELECT group_concat(k.name || ':' || n) FROM (SELECT codec, count(*) AS n
     FROM frames GROUP BY codec) JOIN codecs AS k ON k.id = codec")
case $codecs in
    *ref:15*) ok "15 of 16 frames are references to step-000001 ($codecs)" ;;
    *) bad "frames of $S: $codecs, want 15 refs" ;;
esac
check "the base is recorded" test "$(sqlite3 "file:$R/$S/index.db?immutable=1" \
    'SELECT path FROM bases')" = step-000001
run_ckpt cat "$R/$S" w
check "ckpt cat reads back what was written" cmp "$OUT" "$IN/w2.bin"
check "the mount reads back what was written" cmp "$M/$S/w" "$IN/w2.bin"
umount_ck "$M"
summary
