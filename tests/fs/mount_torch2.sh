#!/bin/bash
# mount_torch2.sh - checkpoints that torch 2.x wrote, mounted from the host
# (issue #23): in the Debian sid root (torch 2.14; scripts/torch-root.sh,
# scripts/in-torch-root.sh) tests/helpers/torch2_write.py writes one state
# with plain dcp.save and through ckptfs.torch.StorageWriter (built there in
# build-sid) and the bytes torch holds for each tensor; here each checkpoint
# is mounted with the host's daemon and every tensor file's bytes, dtype
# and shape attributes are compared with them (the plain checkpoint's
# BytesIO item too: its file is the BytesIO's value), and `ckpt verify`
# passes on both.  Skipped (77) where the root cannot be made (not root,
# no debootstrap, no mirror).  CKPT_TORCH2_SUITE picks another suite.
. "$(dirname "$0")/lib.sh"
suite=${CKPT_TORCH2_SUITE:-sid}
inroot=$CKPT_SRCDIR/scripts/in-torch-root.sh

bash "$CKPT_SRCDIR/scripts/torch-root.sh" "$suite" >"$TMP/root.log" 2>&1 ||
    _fs_skip "the torch root '$suite' cannot be made: $(tail -n 1 "$TMP/root.log")"
bash "$inroot" "$suite" --build >"$TMP/build.log" 2>&1 ||
    { cat "$TMP/build.log"; echo "ERROR: building build-$suite in the root failed"; exit 99; }
bash "$inroot" "$suite" env PYTHONPATH="$CKPT_SRCDIR/build-$suite/python" \
    python3 "$HELPERS/torch2_write.py" "$TMP/w" >"$TMP/write.log" 2>&1 ||
    { cat "$TMP/write.log"; echo "ERROR: writing with torch in the root failed"; exit 99; }
ok "$(tail -n 1 "$TMP/write.log")"

# compare_mount NAME: every entry of ref/NAME.txt in the mount of
# $TMP/w/NAME.
compare_mount() {
    local name=$1 mnt=$TMP/mnt.$1 fqn dt shape file
    mount_ck "$TMP/w/$name" "$mnt" || return
    while read -r fqn dt shape; do
        file=$mnt/${fqn//.//}
        if [ "$dt" = bytes ]; then
            # a ckptfs checkpoint keeps DCP's archive of it, as given
            [ "$name" = plain ] || continue
        else
            [ "$shape" = - ] && shape=
            [ "$(xattr_get "$file" user.ckpt.dtype)" = "$dt" ] &&
                [ "$(xattr_get "$file" user.ckpt.shape)" = "$shape" ] &&
                ok "$name: $fqn is $dt [$shape]" ||
                bad "$name: $fqn: dtype '$(xattr_get "$file" user.ckpt.dtype)' shape '$(xattr_get "$file" user.ckpt.shape)', want $dt [$shape]"
        fi
        same_bytes "$name: $fqn reads what torch holds" "$TMP/w/ref/$fqn.bin" "$file"
    done <"$TMP/w/ref/$name.txt"
    umount_ck "$mnt"
    expect_daemon_clean "$name" "$MNT_LOG"
}

for name in plain ck; do
    run_ckpt verify "$TMP/w/$name"
    expect_ok "ckpt verify of the torch $suite checkpoint '$name'"
    compare_mount "$name"
done
summary
