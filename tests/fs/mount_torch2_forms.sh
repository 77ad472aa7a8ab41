#!/bin/bash
# mount_torch2_forms.sh - PyTorch 2.x distributed checkpoints in the forms torch
# 2.x adds, written during the test by torch 2.14 in the sid root
# (scripts/in-torch-root.sh) and mounted from the host (issue 23 items 2,
# 3, 5): FileSystemWriter with SerializationFormat.SAFETENSORS, with the
# ZStandard extension, and HuggingFaceStorageWriter's consolidation folder
# mounted where the writer was pointed.  Every tensor file equals what
# torch loads (dcp.load, or safetensors for the blobs and files), byte for
# byte, with its dtype in user.ckpt.dtype; a read of part of a zstd item
# returns the right bytes.  Skips (77) when the torch root cannot be made
# (not root, no debootstrap, no mirror).
. "$(dirname "$0")/lib.sh"

ROOTS=$CKPT_SRCDIR/scripts/in-torch-root.sh
[ "$(id -u)" = 0 ] || { echo "SKIP: mount_torch2_forms: needs root for the torch root"; exit 77; }
bash "$CKPT_SRCDIR/scripts/torch-root.sh" sid >"$TMP/root.log" 2>&1 ||
    { tail -n 5 "$TMP/root.log"; echo "SKIP: mount_torch2_forms: the sid torch root cannot be made"; exit 77; }
"$ROOTS" sid python3 -W ignore "$HELPERS/torch2_forms.py" "$TMP/w" \
    >"$TMP/write.log" 2>&1 ||
    { cat "$TMP/write.log"; echo "ERROR: torch 2.x could not write the checkpoints"; exit 99; }

declare -A CKDT=([float32]=f32 [bfloat16]=bf16 [int64]=i64 [float16]=f16)
for name in st zstd hf; do
    mnt=$TMP/mnt.$name
    mount_ck "$TMP/w/$name" "$mnt" || continue
    while read -r fqn dt; do
        check "$name: $fqn is the bytes torch loads" \
            cmp -s "$mnt/$fqn" "$TMP/w/ref/$name/$fqn"
        check "$name: $fqn has user.ckpt.dtype ${CKDT[$dt]}" \
            test "$(xattr_get "$mnt/$fqn" user.ckpt.dtype)" = "${CKDT[$dt]}"
    done <"$TMP/w/ref/$name.dtypes"
    # part of an item: bytes 1000..1099 of w (the whole stream decoded)
    check "$name: a 100-byte read in the middle of w" \
        cmp -s <(dd if="$mnt/w" bs=100 skip=10 count=1 2>/dev/null) \
               <(dd if="$TMP/w/ref/$name/w" bs=100 skip=10 count=1 2>/dev/null)
    umount_ck "$mnt"
    expect_daemon_clean "$name" "$MNT_LOG"
done
summary
