#!/bin/bash
# mount_foreign.sh - PyTorch distributed checkpoints and safetensors
# mounted as they are (docs/MOUNT.md, "Foreign checkpoints"): every tensor
# file, its xattrs and its .npy view equal what torch itself loads (DCP
# written here by PyTorch 1.13: one process, and two gloo ranks with
# sharded tensors) or what the test wrote (safetensors); the imported
# checkpoint mounts the same; malformed metadata is refused before
# mounting, naming the problem.
. "$(dirname "$0")/lib.sh"
REF=$HELPERS/dcp_ref.py
HAVE_TORCH=1
"$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import torch_compat; torch_compat.allow_unhashable_dataclass_defaults(); import torch.distributed._shard.checkpoint' "$HELPERS" >/dev/null 2>&1 || HAVE_TORCH=0

# mounted_check NAME SRC CHECK...: mounts SRC, runs the helper's check on
# the mount, unmounts, and checks the daemon ended cleanly.
mounted_check() {
    local name=$1 src=$2 mnt=$TMP/mnt.$1
    shift 2
    mount_ck "$src" "$mnt" || return
    "$PY" "$REF" "$@" "$mnt" >"$TMP/check.out" 2>&1
    local rc=$?
    report "$TMP/check.out" "$name: "
    [ "$rc" -eq 0 ] && ok "$name: every tensor, xattr and .npy view equals the reference" ||
        bad "$name: checker exit $rc: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
    expect_erofs "$name: creating a file" touch "$mnt/new"
    umount_ck "$mnt"
    expect_daemon_clean "$name" "$MNT_LOG"
}

if [ "$HAVE_TORCH" = 1 ]; then
    "$PY" "$REF" save1 "$TMP/dcp1" && "$PY" "$REF" save2 "$TMP/dcp2" ||
        { echo "ERROR: saving with torch failed"; exit 99; }
    mounted_check dcp1 "$TMP/dcp1" check "$TMP/dcp1"
    mounted_check dcp2 "$TMP/dcp2" check "$TMP/dcp2"
    run_ckpt import "$TMP/dcp2" "$TMP/dcp2.ck"
    expect_ok "ckpt import of the 2-rank checkpoint"
    mounted_check dcp2-imported "$TMP/dcp2.ck" check "$TMP/dcp2"
    # st_blksize (cat's buffer): 128 KiB for a foreign checkpoint's tensor
    # files, a frame (1 MiB) for a ckptfs checkpoint's (docs/MOUNT.md).
    for src in dcp2:131072 dcp2.ck:1048576; do
        mount_ck "$TMP/${src%%:*}" "$TMP/mnt.bs" || continue
        f=$(find "$TMP/mnt.bs" -type f -not -path "$TMP/mnt.bs/.*" | head -n 1)
        got=$(stat -c %o "$f")
        [ "$got" = "${src##*:}" ] && ok "${src%%:*}: st_blksize $got" ||
            bad "${src%%:*}: st_blksize $got, expected ${src##*:}"
        umount_ck "$TMP/mnt.bs"
    done
    "$PY" "$REF" bad meta-global "$TMP/dcp1" "$TMP/evil" >/dev/null
    refuse_mount "a .metadata pickle naming os.system" "refusing global 'os\\.system'" "$TMP/evil"
    check "no code ran" test ! -e "$TMP/PWNED"
    "$PY" "$REF" bad item-past-eof "$TMP/dcp1" "$TMP/past" >/dev/null
    refuse_mount "an item past the end of its file" "lies past the end of the file" "$TMP/past"
else
    echo "     (no usable torch in $PY: the DCP mounts are skipped)"
fi

"$PY" "$REF" st1 "$TMP/one.safetensors" && "$PY" "$REF" stdir "$TMP/sharded" ||
    { echo "ERROR: writing safetensors failed"; exit 99; }
mounted_check st1 "$TMP/one.safetensors" stcheck "$TMP/one.safetensors"
mounted_check stdir "$TMP/sharded" stcheck "$TMP/sharded"
mount_ck "$TMP/one.safetensors" "$TMP/mnt.meta" && {
    "$PY" -c 'import json, sys; m = json.load(open(sys.argv[1]))["meta"]; sys.exit(m.get("note") != "written by dcp_ref.py")' \
        "$TMP/mnt.meta/.ckptfs/metadata.json"
    [ $? -eq 0 ] && ok "__metadata__ is in .ckptfs/metadata.json" ||
        bad "__metadata__ is not in .ckptfs/metadata.json"
    umount_ck "$TMP/mnt.meta"
}
"$PY" "$REF" bad st-overlap "$TMP/one.safetensors" "$TMP/overlap.safetensors"
refuse_mount "overlapping safetensors offsets" "overlap" "$TMP/overlap.safetensors"

summary
