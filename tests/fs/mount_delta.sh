#!/bin/bash
# mount_delta.sh - delta saves through a writable mount (docs/MOUNT.md,
# "Options", -o delta=latest): with -o delta=latest a save written with plain POSIX
# calls is a delta against the newest committed checkpoint of the root:
# its unchanged frames are references, and it reads back (through the
# mount and with ckpt cat) exactly as written; without the option, or in
# an empty root, a save is whole.  -o delta=other is refused.
# user.ckpt.base on a save's directory names its base (docs/MOUNT.md,
# "Delta saves"), whatever -o delta=latest would pick: the save refers
# to that checkpoint, reads back as written, shows its references in
# user.ckpt.codec and stored_bytes; a base that is not a committed
# checkpoint of the root, or another base once the save has begun, is
# refused; an empty value makes a whole save.
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
w3 = w.copy(); w3[200:204] -= np.float32(0.5)
w3.tofile(d + "/w3.bin")
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

# user.ckpt.base names step-000001, where delta=latest would take 2
wput() { "$PY" "$WPUT" "$@" >"$TMP/put.out" 2>&1; cat "$TMP/put.out"; }
frames() {   # frames SAVE: codec:count,... of its index
    sqlite3 "file:$R/$1/index.db?immutable=1" \
        "SELECT group_concat(k.name || ':' || n) FROM (SELECT codec,
         count(*) AS n FROM frames GROUP BY codec) JOIN codecs AS k
         ON k.id = codec"
}
S=step-000003
mkdir "$M/$S"
check "setfattr user.ckpt.base step-000001" \
    test "$(wput setx "$M/$S" user.ckpt.base step-000001)" = ok
check "getfattr user.ckpt.base shows it" test "$(getfattr --only-values \
    -n user.ckpt.base "$M/$S" 2>/dev/null)" = step-000001
check "a missing base is refused (ENOENT)" \
    test "$(wput setx "$M/$S" user.ckpt.base step-000009)" = "ERR setxattr ENOENT"
check "a base outside the root is refused (EINVAL)" \
    test "$(wput setx "$M/$S" user.ckpt.base ../x)" = "ERR setxattr EINVAL"
check "another base once one is named is refused (EINVAL)" \
    test "$(wput setx "$M/$S" user.ckpt.base step-000002)" = "ERR setxattr EINVAL"
check "write w through the mount" test "$(wput put "$M/$S/w" "$IN/w3.bin" \
    --dtype f32 --shape 256,1024)" = ok
check "the same base again is a no-op" \
    test "$(wput setx "$M/$S" user.ckpt.base step-000001)" = ok
check "commit $S" test "$(wput commit "$M/$S" 0)" = ok
check "the base named is recorded" test "$(sqlite3 \
    "file:$R/$S/index.db?immutable=1" 'SELECT path FROM bases')" = step-000001
codecs=$(frames $S)
case $codecs in
    *ref:15*) ok "15 of 16 frames are references ($codecs)" ;;
    *) bad "frames of $S: $codecs, want 15 refs" ;;
esac
check "the mount reads back what was written" cmp "$M/$S/w" "$IN/w3.bin"
run_ckpt cat "$R/$S" w
check "ckpt cat reads back what was written" cmp "$OUT" "$IN/w3.bin"
codec=$(getfattr --only-values -n user.ckpt.codec "$M/$S/w" 2>/dev/null)
stored=$(getfattr --only-values -n user.ckpt.stored_bytes "$M/$S/w" 2>/dev/null)
case $codec in *ref*) ok "user.ckpt.codec shows references ($codec)" ;;
    *) bad "user.ckpt.codec of $S/w: '$codec'" ;; esac
if [ -n "$stored" ] && [ "$stored" -lt $((1048576 / 8)) ]; then
    ok "user.ckpt.stored_bytes: $stored of 1048576 bytes stored"
else bad "user.ckpt.stored_bytes of $S/w: '$stored'"; fi

# an empty user.ckpt.base: a whole save, -o delta=latest notwithstanding
S=step-000004
mkdir "$M/$S"
check "setfattr user.ckpt.base ''" \
    test "$(wput setx "$M/$S" user.ckpt.base '')" = ok
check "write w through the mount" test "$(wput put "$M/$S/w" "$IN/w3.bin" \
    --dtype f32 --shape 256,1024)" = ok
check "commit $S" test "$(wput commit "$M/$S" 0)" = ok
case $(frames $S) in
    *ref*|*xor*) bad "frames of $S: $(frames $S), want none delta" ;;
    *) ok "an empty base makes a whole save ($(frames $S))" ;;
esac
check "the mount reads back what was written" cmp "$M/$S/w" "$IN/w3.bin"
umount_ck "$M"
summary
