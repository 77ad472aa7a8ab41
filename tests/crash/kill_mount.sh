#!/bin/bash
# kill_mount.sh - kill -9 at seeded random points of a save through a
# writable mount (world=2, two writer processes, tests/crash/crash_driver
# mount): TRIALS trials killing rank 0's writer process, and TRIALS trials
# killing the daemon.  Checks as kill_lib.sh (tests/crash/README.md), and:
# while the daemon lives, gc keeps the save (the mount holds its lease);
# after a daemon killed with every rank in, a new mount's status read
# commits the save (no save stays "pending 2/2").  The step is saved again
# through a new mount.
. "$(dirname "$0")/tmpdir.sh"
. "$(dirname "$0")/../fs/lib.sh"
. "$CKPT_SRCDIR/tests/crash/lib.sh"

make_baseline 1
T=$ROOT/step-2
M=$TMP/mnt
REAL_CKPTFS=$CKPTFS

writers() {   # writers [ENV...]: rank 1, then rank 0 (its calls counted)
    "$DRIVER" mount "$M/step-2" 2 1 2 >"$TMP/w1.out" 2>&1
    shimmed CKPT_SHIM_ROOT="$M/step-2" "$@" "$DRIVER" mount "$M/step-2" 2 0 2
}
resave() {
    mount_ck "$ROOT" "$M" -o rw,world=2 >/dev/null || return 1
    "$DRIVER" mount "$M/step-2" 2 1 2 && "$DRIVER" mount "$M/step-2" 2 0 2
    local rc=$?
    umount_ck "$M" >/dev/null
    return $rc
}

# ------------------------------------------------------------ writer killed
mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1
writers CKPT_SHIM_COUNT="$TMP/count"
N=$(cut -d' ' -f1 "$TMP/count")
need_calls "$N"
umount_ck "$M"
"$DRIVER" check "$T" 2 || exit 99
rm -rf "$T"

LIVE_KEPT=0
kill_save() {
    mount_ck "$ROOT" "$M" -o rw,world=2 >/dev/null || { RC=99; return; }
    writers CKPT_SHIM_KILL_AT="$1"
    if [ ! -f "$T/index.db" ]; then
        # The daemon holds the lease of the save it serves: gc keeps it.
        "$CKPT" gc --min-age 0 "$ROOT" >"$TMP/gc1.out" 2>&1
        if grep -q '^kept step-2: save in progress' "$TMP/gc1.out" && [ -d "$T" ]; then
            LIVE_KEPT=$((LIVE_KEPT + 1))
        else
            fail_trial "gc did not keep the live save: $(tr '\n' '~' <"$TMP/gc1.out")"
        fi
    fi
    umount_ck "$M" >/dev/null
}
run_kill_matrix "mount save, writer process killed" "$T" 2 "$N"
echo "# gc kept the live save (daemon running) in $LIVE_KEPT trials"

# ------------------------------------------------------------ daemon killed
# The daemon runs with the shim through a wrapper (mount_ck starts
# $CKPTFS); SHIM_ENV holds the shim's settings of the next mount.
WRAP=$TMP/ckptfs-shim
cat >"$WRAP" <<WRAPPER
#!/bin/bash
exec env LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$T" \$(cat "$TMP/shim.env") "$REAL_CKPTFS" "\$@"
WRAPPER
chmod +x "$WRAP"
echo "CKPT_SHIM_COUNT=$TMP/dcount" >"$TMP/shim.env"
rm -f "$TMP/dcount"
CKPTFS=$WRAP mount_ck "$ROOT" "$M" -o rw,world=2 || exit 1
"$DRIVER" mount "$M/step-2" 2 1 2 && "$DRIVER" mount "$M/step-2" 2 0 2 || exit 99
umount_ck "$M"
ND=$(cut -d' ' -f1 "$TMP/dcount" | sort -n | tail -1)
[ "${ND:-0}" -gt 0 ] || { echo "ERROR: daemon calibration: '$ND'" >&2; exit 99; }
"$DRIVER" check "$T" 2 || exit 99
rm -rf "$T"

RECOVERED=0
kill_save() {
    echo "CKPT_SHIM_KILL_AT=$1" >"$TMP/shim.env"
    CKPTFS=$WRAP mount_ck "$ROOT" "$M" -o rw,world=2 >/dev/null || { RC=99; return; }
    "$DRIVER" mount "$M/step-2" 2 1 2 >"$TMP/w1.out" 2>&1
    "$DRIVER" mount "$M/step-2" 2 0 2 >"$TMP/w0.out" 2>&1
    if mountpoint -q "$M" && ls "$M" >/dev/null 2>&1; then
        RC=0                 # the daemon outlived the save
        umount_ck "$M" >/dev/null
    else
        RC=137
        umount_ck "$M" -z >/dev/null
    fi
}
after_kill() {
    # Every rank in and nothing committed: the commit was cut short.  A
    # new mount must commit it (or say why not), never show pending 2/2.
    if [ -e "$T/.pending/rank-0" ] && [ -e "$T/.pending/rank-1" ] &&
       [ ! -f "$T/index.db" ]; then
        mount_ck "$ROOT" "$M" -o rw,world=2 >/dev/null || return
        local st
        st=$(cat "$M/step-2/.ckptfs/status" 2>&1)
        if [ "$st" = committed ]; then
            RECOVERED=$((RECOVERED + 1))
        else
            fail_trial "the stuck save reads '$st' on a new mount"
        fi
        umount_ck "$M" >/dev/null
    fi
}
run_kill_matrix "mount save, daemon killed" "$T" 2 "$ND"
echo "# a new mount committed $RECOVERED saves whose daemon died during their commit"
summary
