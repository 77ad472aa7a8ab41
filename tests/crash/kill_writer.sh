#!/bin/bash
# kill_writer.sh - the crash matrix's writer-kill rows, one per form of a
# piece written through a writable mount (whole tensor, row split without
# sizes, column split with sizes, byte object): rank 0's writer is
# SIGKILLed after a seeded random number of its piece's bytes, and no
# trial may commit a truncated piece (tests/crash/writer_trials.py, issue
# #25; docs/MOUNT.md, "When a piece ends"); and the re-run row: rank 0
# killed at a random point (in a piece, after its last byte, after its
# commit) runs again with other bytes, and the save commits with the
# re-run's bytes (docs/MOUNT.md, "A rank runs again").  CKPT_CRASH_TRIALS
# trials a form (default 50), seeded by CKPT_CRASH_SEED.
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../fs/lib.sh"

TRIALS=${CKPT_CRASH_TRIALS:-50}
SEED=${CKPT_CRASH_SEED:-13}
R=$TMP/root
M=$TMP/mnt
mkdir -p "$R"
mount_ck "$R" "$M" -o rw,world=2 || exit 1
base=0
for form in whole rows cols bytes rerun; do
    if "$PY" "$CKPT_SRCDIR/tests/crash/writer_trials.py" "$M" "$form" "$TRIALS" "$SEED" "$base" >"$TMP/$form.out" 2>&1; then
        ok "$(tail -1 "$TMP/$form.out" | sed 's/^# //')"
    else
        bad "$form: $(grep -v '^ok' "$TMP/$form.out" | head -c 1500 | tr '\n' '~')"
    fi
    base=$((base + 10000))
done
run_ckpt verify "$R/step-000001"
expect_ok "ckpt verify of a committed trial"
umount_ck "$M"
expect_daemon_clean "the daemon" "$MNT_LOG"
summary
