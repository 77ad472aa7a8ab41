#!/bin/bash
# mount_st_refused.sh - a safetensors file with one tensor of a dtype
# ckptfs lacks (issue 23 item 6; docs/MOUNT.md, "Foreign checkpoints"):
# that tensor is listed (ckpt ls warns with its name and dtype text) and
# refused alone (ckpt cat, ckpt verify and a read through the mount fail
# naming it), while the file's other tensor serves its bytes.  The file is
# written here by hand, per the format: 8-byte LE header length, JSON,
# data.
. "$(dirname "$0")/lib.sh"

ST=$TMP/odd.safetensors
"$PY" - "$ST" "$TMP/good.bin" <<'PY' || { echo "ERROR: writing the file failed"; exit 99; }
import json, struct, sys
import numpy as np
good = np.arange(6, dtype="<f4") * 1.5 - 2.0
odd = bytes(range(7, 19))          # 12 bytes of a dtype nobody knows
hdr = {"good": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
       "odd": {"dtype": "ZZ9", "shape": [3], "data_offsets": [24, 36]},
       "__metadata__": {"format": "pt"}}
h = json.dumps(hdr).encode()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + good.tobytes() + odd)
with open(sys.argv[2], "wb") as f:
    f.write(good.tobytes())
PY

run_ckpt ls "$ST"
expect_ok "ckpt ls of a file with a tensor of dtype ZZ9"
expect_out_re '^good +f32 +2,3 ' "ckpt ls lists the F32 tensor"
expect_out_re '^odd ' "ckpt ls lists the ZZ9 tensor too"
expect_err_re "odd.*ZZ9" "ckpt ls says the ZZ9 tensor cannot be read, naming it and its dtype"

run_ckpt cat "$ST" good
expect_ok "ckpt cat of the F32 tensor"
same_bytes "ckpt cat of the F32 tensor gives the bytes written" "$TMP/good.bin" "$OUT"

run_ckpt cat "$ST" odd
expect_fail "ckpt cat of the ZZ9 tensor"
expect_err_re "tensor 'odd'.*unsupported dtype 'ZZ9'" "ckpt cat of the ZZ9 tensor names it and its dtype"

run_ckpt verify "$ST"
expect_fail "ckpt verify of the file"
expect_out_re "^FAULT tensor=odd .*ZZ9" "ckpt verify has a FAULT line for the ZZ9 tensor"

run_ckpt import "$ST" "$TMP/imported"
expect_fail "ckpt import of the file"
expect_err_re "tensor 'odd'.*ZZ9" "ckpt import names the ZZ9 tensor and its dtype"
[ ! -e "$TMP/imported" ] && ok "the failed import left nothing at OUT" ||
    bad "the failed import left $TMP/imported behind"

mnt=$TMP/mnt
if mount_ck "$ST" "$mnt"; then
    same_bytes "the mount serves the F32 tensor's bytes" "$TMP/good.bin" "$mnt/good"
    [ -e "$mnt/odd" ] && ok "the mount lists the ZZ9 tensor" ||
        bad "the mount does not list the ZZ9 tensor: $(ls "$mnt" | tr '\n' ' ')"
    if err=$(cat "$mnt/odd" 2>&1 >/dev/null); then
        bad "reading the ZZ9 tensor through the mount succeeded"
    else
        case $err in
        *"Input/output error"*) ok "reading the ZZ9 tensor through the mount fails with EIO" ;;
        *) bad "reading the ZZ9 tensor through the mount: $err (want EIO)" ;;
        esac
    fi
    umount_ck "$mnt"
    expect_daemon_clean "ZZ9 file" "$MNT_LOG"
    grep -q "ZZ9" "$MNT_LOG" && ok "the daemon's log names the ZZ9 dtype" ||
        bad "the daemon's log does not name the ZZ9 dtype: $(tail -n 3 "$MNT_LOG" | tr '\n' '~')"
fi

summary
