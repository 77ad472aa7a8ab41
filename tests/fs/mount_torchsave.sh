#!/bin/bash
# mount_torchsave.sh - torch.save archives mounted and read by the CLI
# (issue 23 item 4, issue 22 item 5): model.pt, a folder with
# pytorch_model.bin and an HF sharded folder, written here by the host's
# torch: every tensor file of the mount equals torch.load's bytes; `ckpt
# cat` of a transposed weight equals them too; `ckpt verify` passes and
# `ckpt import` makes a ckptfs checkpoint that mounts the same; a 4 KiB
# read of a 2^30-element expanded tensor (a 744-byte archive) leaves the
# daemon's peak memory small (VmHWM, not time).
. "$(dirname "$0")/lib.sh"
REF=$CKPT_SRCDIR/tests/python/torchsave_ref.py
"$PY" -c 'import torch' 2>/dev/null || { echo "SKIP: no torch"; exit 77; }
"$PY" "$REF" write "$TMP/ts" || { echo "ERROR: torch.save failed"; exit 99; }

for src in model.pt folder hf; do
    mnt=$TMP/mnt.$src
    mount_ck "$TMP/ts/$src" "$mnt" || continue
    "$PY" "$REF" mcheck "$TMP/ts" "$mnt" >"$TMP/check.out" 2>&1
    [ $? -eq 0 ] && ok "$src: every tensor file equals torch.load's bytes" ||
        bad "$src: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
    umount_ck "$mnt"
    expect_daemon_clean "$src" "$MNT_LOG"
done

run_ckpt cat "$TMP/ts/model.pt" model.wt
expect_ok "ckpt cat of a transposed weight"
"$PY" -c '
import sys, torch
sys.path.insert(0, sys.argv[1])
import torchsave_ref as r
t = torch.load(sys.argv[2])["model"]["wt"]
sys.exit(open(sys.argv[3], "rb").read() != r.raw(t))' \
    "$CKPT_SRCDIR/tests/python" "$TMP/ts/model.pt" "$OUT" &&
    ok "ckpt cat: the transposed weight in row-major order, as torch.load" ||
    bad "ckpt cat of the transposed weight differs from torch.load's"
# a root of step folders with a stray archive beside them stays a root
mkdir -p "$TMP/root/step-1"
cp "$TMP/ts/model.pt" "$TMP/root/optimizer.pt"
cp "$TMP/ts/model.pt" "$TMP/root/step-1/model.pt"
run_ckpt ls "$TMP/root"
expect_out_re "^step-1 torch-save [0-9]+ [0-9]+$" "a root with a stray optimizer.pt lists its torch.save step"
run_ckpt verify "$TMP/ts/hf"
expect_ok "ckpt verify of the HF sharded folder"
run_ckpt import "$TMP/ts/model.pt" "$TMP/imported"
expect_ok "ckpt import of model.pt"
if mount_ck "$TMP/imported" "$TMP/mnt.imp"; then
    "$PY" "$REF" mcheck "$TMP/ts" "$TMP/mnt.imp" >"$TMP/check.out" 2>&1
    [ $? -eq 0 ] && ok "imported: every tensor equals torch.load's bytes" ||
        bad "imported: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
    umount_ck "$TMP/mnt.imp"
fi

# issue 22 item 5: a 4 KiB read in the middle of a 4 GiB expanded tensor
if mount_ck "$TMP/ts/expand.pt" "$TMP/mnt.ex"; then
    dd if="$TMP/mnt.ex/e" of="$TMP/page" bs=4096 skip=500000 count=1 2>/dev/null
    hwm=$(awk '/VmHWM/ {print $2}' "/proc/$MNT_PID/status")
    cmp -s "$TMP/page" <(head -c 4096 /dev/zero) &&
        ok "a 4 KiB read of the expanded tensor: zeros" ||
        bad "a 4 KiB read of the expanded tensor is not zeros"
    # 4 GiB before (the whole chunk gathered); a few pages now
    [ -n "$hwm" ] && [ "$hwm" -lt 262144 ] &&
        ok "the daemon's peak RSS after it: $hwm KiB (< 256 MiB)" ||
        bad "the daemon's peak RSS after a 4 KiB read: ${hwm:-?} KiB"
    umount_ck "$TMP/mnt.ex"
fi
summary
