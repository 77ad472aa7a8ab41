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
    # mcheck: an io.BytesIO item shows its value (checked against torch's
    # own load), every byte item's archive is in .pt/.
    mounted_check dcp1 "$TMP/dcp1" mcheck "$TMP/dcp1"
    mounted_check dcp2 "$TMP/dcp2" mcheck "$TMP/dcp2"
    run_ckpt import "$TMP/dcp2" "$TMP/dcp2.ck"
    expect_ok "ckpt import of the 2-rank checkpoint"
    mounted_check dcp2-imported "$TMP/dcp2.ck" mcheck "$TMP/dcp2"
    run_ckpt import "$TMP/dcp1" "$TMP/dcp1.ck"
    expect_ok "ckpt import of the 1-process checkpoint (byte items kept as archives)"
    mounted_check dcp1-imported "$TMP/dcp1.ck" mcheck "$TMP/dcp1"
    # A BytesIO whose archive is damaged stays the archive, as stored.
    "$PY" "$REF" bad bytesio-pkl "$TMP/dcp1" "$TMP/dcp1-badpkl" >/dev/null ||
        { echo "ERROR: bad bytesio-pkl failed"; exit 99; }
    mount_ck "$TMP/dcp1-badpkl" "$TMP/mnt.badpkl" && {
        "$PY" "$REF" storedcheck "$TMP/dcp1-badpkl" rng "$TMP/mnt.badpkl" >"$TMP/check.out" 2>&1
        [ $? -eq 0 ] && ok "a BytesIO item whose data.pkl does not decode reads as its stored archive" ||
            bad "a BytesIO item with a damaged data.pkl: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
        umount_ck "$TMP/mnt.badpkl"
        expect_daemon_clean "damaged BytesIO archive" "$MNT_LOG"
    }
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
    # one bad item refuses its tensor alone (#23): the rest mounts, a read
    # of it fails with EIO and the daemon logs why
    if mount_ck "$TMP/past" "$TMP/mnt.past"; then
        check "an item past the end of its file: its tensor fails to read" \
            bash -c '! cat "$1/model/w" >/dev/null 2>&1' _ "$TMP/mnt.past"
        n=$(find "$TMP/mnt.past" -type f -not -path "$TMP/mnt.past/.*" | wc -l)
        check "an item past the end of its file: the other tensors are there ($n files)" test "$n" -gt 1
        umount_ck "$TMP/mnt.past"
        check "an item past the end of its file: the log says why" \
            grep -q "lies past the end of the file" "$MNT_LOG"
    fi

    # A root of DCP step directories mounts as a root: each checkpoint a
    # directory, `latest` by the number in the names (DCP has no step
    # metadata), though step-000200 is the older one.
    mkdir -p "$TMP/dcproot"
    cp -r "$TMP/dcp1" "$TMP/dcproot/step-000100"
    cp -r "$TMP/dcp2" "$TMP/dcproot/step-000200"
    find "$TMP/dcproot/step-000200" -exec touch -h -d "2021-01-01 00:00:00" {} +
    MNTR=$TMP/mnt.dcproot
    if mount_ck "$TMP/dcproot" "$MNTR"; then
        l=$(ls -1 "$MNTR" | LC_ALL=C sort | tr '\n' ' ')
        [ "$l" = "latest step-000100 step-000200 " ] && ok "root of DCP: ls shows $l" ||
            bad "root of DCP: ls shows '$l', want 'latest step-000100 step-000200 '"
        [ "$(readlink "$MNTR/latest")" = step-000200 ] &&
            ok "root of DCP: latest -> step-000200 (the number in its name)" ||
            bad "root of DCP: latest -> '$(readlink "$MNTR/latest")', want step-000200"
        "$PY" "$REF" mcheck "$TMP/dcp2" "$MNTR/latest" >"$TMP/check.out" 2>&1 &&
            ok "root of DCP: latest/ equals what torch loads of step-000200" ||
            bad "root of DCP: latest/: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
        report "$TMP/check.out" "root of DCP, latest: "
        "$PY" "$REF" mcheck "$TMP/dcp1" "$MNTR/step-000100" >"$TMP/check.out" 2>&1 &&
            ok "root of DCP: step-000100/ equals what torch loads of it" ||
            bad "root of DCP: step-000100/: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
        umount_ck "$MNTR"
        expect_daemon_clean "root of DCP" "$MNT_LOG"
    fi
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
# A root of safetensors models: a file in one directory, a sharded model
# in another; without numbers in the names, `latest` is the later one.
mkdir -p "$TMP/stroot/model-a"
cp "$TMP/one.safetensors" "$TMP/stroot/model-a/"
cp -r "$TMP/sharded" "$TMP/stroot/model-b"
find "$TMP/stroot/model-b" -exec touch -h -d "2021-01-01 00:00:00" {} +
if mount_ck "$TMP/stroot" "$TMP/mnt.stroot"; then
    [ "$(readlink "$TMP/mnt.stroot/latest")" = model-a ] &&
        ok "root of safetensors: latest -> model-a (committed later)" ||
        bad "root of safetensors: latest -> '$(readlink "$TMP/mnt.stroot/latest")', want model-a"
    "$PY" "$REF" stcheck "$TMP/one.safetensors" "$TMP/mnt.stroot/latest" >"$TMP/check.out" 2>&1 &&
        ok "root of safetensors: latest/ equals the file's tensors" ||
        bad "root of safetensors: latest/: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
    "$PY" "$REF" stcheck "$TMP/sharded" "$TMP/mnt.stroot/model-b" >"$TMP/check.out" 2>&1 &&
        ok "root of safetensors: model-b/ equals the sharded model's tensors" ||
        bad "root of safetensors: model-b/: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
    umount_ck "$TMP/mnt.stroot"
    expect_daemon_clean "root of safetensors" "$MNT_LOG"
fi

"$PY" "$REF" bad st-overlap "$TMP/one.safetensors" "$TMP/overlap.safetensors"
refuse_mount "overlapping safetensors offsets" "overlap" "$TMP/overlap.safetensors"

summary
