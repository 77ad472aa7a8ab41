#!/bin/bash
# mount_torch2.sh - checkpoints that torch 2.x wrote, read from the host
# (issue #23): in the Debian sid (torch 2.14, safetensors 0.8) and trixie
# (torch 2.6) roots (scripts/torch-root.sh, scripts/in-torch-root.sh)
# tests/helpers/torch2_write.py writes one state with plain dcp.save,
# through ckptfs.torch.StorageWriter (built there in build-SUITE), as a
# safetensors file and as an HF sharded safetensors folder, with the bytes
# torch holds for each tensor; here, for each checkpoint, `ckpt verify`
# passes, and the host's mount, `ckpt cat` and the mount of its `ckpt
# import` give every tensor's bytes, dtype and shape (the plain
# checkpoint's BytesIO item too, as its value, on the mount).  A suite
# whose root cannot be made (not root, no debootstrap, no mirror) is
# skipped; with neither, the test is (77).  CKPT_TORCH2_SUITES="sid"
# limits the suites.
. "$(dirname "$0")/lib.sh"
inroot=$CKPT_SRCDIR/scripts/in-torch-root.sh

# compare_mount TAG SRC LIST: every entry of LIST (ref/NAME.txt) in the
# mount of SRC; byte objects only where SRC is torch's own DCP (whose
# BytesIO items the mount shows as their value).
compare_mount() {
    local tag=$1 src=$2 list=$3 mnt fqn dt shape file
    mnt=$TMP/mnt.${tag//[^a-z0-9]/_}
    mount_ck "$src" "$mnt" || return
    while read -r fqn dt shape; do
        file=$mnt/${fqn//.//}
        if [ "$dt" = bytes ]; then
            case $tag in */plain) ;; *) continue ;; esac
        else
            [ "$shape" = - ] && shape=
            [ "$(xattr_get "$file" user.ckpt.dtype)" = "$dt" ] &&
                [ "$(xattr_get "$file" user.ckpt.shape)" = "$shape" ] &&
                ok "$tag: $fqn is $dt [$shape]" ||
                bad "$tag: $fqn: dtype '$(xattr_get "$file" user.ckpt.dtype)' shape '$(xattr_get "$file" user.ckpt.shape)', want $dt [$shape]"
        fi
        same_bytes "$tag: $fqn reads what torch holds" "$REF/$fqn.bin" "$file"
    done <"$list"
    umount_ck "$mnt"
    expect_daemon_clean "$tag" "$MNT_LOG"
}

# compare_cat TAG SRC LIST: `ckpt cat` of every tensor of LIST.
compare_cat() {
    local tag=$1 src=$2 list=$3 fqn dt shape
    while read -r fqn dt shape; do
        [ "$dt" = bytes ] && continue
        "$CKPT" cat "$src" "$fqn" >"$TMP/cat.out" 2>"$TMP/cat.err" ||
            { bad "$tag: ckpt cat $fqn: $(head -c 300 "$TMP/cat.err")"; continue; }
        same_bytes "$tag: ckpt cat $fqn gives what torch holds" "$REF/$fqn.bin" "$TMP/cat.out"
    done <"$list"
}

suites=0
for suite in ${CKPT_TORCH2_SUITES:-sid trixie}; do
    if ! bash "$CKPT_SRCDIR/scripts/torch-root.sh" "$suite" >"$TMP/root.log" 2>&1; then
        echo "SKIP $suite: its root cannot be made: $(tail -n 1 "$TMP/root.log")"
        continue
    fi
    suites=$((suites + 1))
    bash "$inroot" "$suite" --build >"$TMP/build.log" 2>&1 ||
        { cat "$TMP/build.log"; echo "ERROR: building build-$suite in the root failed"; exit 99; }
    W=$TMP/$suite
    bash "$inroot" "$suite" env PYTHONPATH="$CKPT_SRCDIR/build-$suite/python" \
        python3 "$HELPERS/torch2_write.py" "$W" >"$TMP/write.log" 2>&1 ||
        { cat "$TMP/write.log"; echo "ERROR: writing with torch in the $suite root failed"; exit 99; }
    ok "$suite: $(tail -n 1 "$TMP/write.log")"
    REF=$W/ref
    for name in plain ck st hf; do
        src=$W/$name
        [ "$name" = st ] && src=$W/st.safetensors
        list=$REF/$name.txt
        run_ckpt verify "$src"
        expect_ok "$suite/$name: ckpt verify"
        compare_mount "$suite/$name" "$src" "$list"
        compare_cat "$suite/$name" "$src" "$list"
        run_ckpt import "$src" "$W/$name.imported"
        expect_ok "$suite/$name: ckpt import"
        compare_mount "$suite/$name imported" "$W/$name.imported" "$list"
    done
done
[ "$suites" -gt 0 ] || _fs_skip "no torch 2.x root can be made here"
summary
