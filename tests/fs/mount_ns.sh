#!/bin/bash
# mount_ns.sh - a private mount namespace made beside a mount (by
# scripts/private-ns.sh, as scripts/in-torch-root.sh does) holds no copy
# of it, so the mount is still the host's alone: unmounting it ends the
# daemon while that namespace lives on.  A plain `unshare --mount` copies
# the FUSE mount and keeps its connection alive: the daemon then waits for
# the namespace to end (the "hung" daemon of mount_perms.sh under a
# concurrent torch-root test); so tests/fs/lib.sh also runs each mount
# test in a namespace of its own.  Checks: the namespace that started this
# script does not see its mount; the new namespace lists no copy of the
# mount point, the host's mount still reads, `fusermount3 -u` ends the
# daemon (status 0, not hung) while the namespace's command still runs.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "SKIP: mount_ns: needs root (unshare --mount)"; exit 77; }
for t in unshare findmnt nsenter; do
    command -v $t >/dev/null 2>&1 || { echo "SKIP: mount_ns: no $t (util-linux)"; exit 77; }
done

"$PY" - "$TMP" <<'EOF2' || exit 99
import sys, numpy as np
d = sys.argv[1]
a = (np.arange(3000, dtype="<f4") / 3).reshape(30, 100)
np.save(d + "/a.npy", a)
a.tofile(d + "/a.raw")
EOF2
run_ckpt pack "$TMP/ck" "model.a=$TMP/a.npy"
expect_ok "pack"

HOLDER=
trap 'kill "$HOLDER" 2>/dev/null; _fs_cleanup; kill "$_WATCHDOG" 2>/dev/null; rm -rf --one-file-system "$TMP"' EXIT

MNT=$TMP/mnt
if mount_ck "$TMP/ck" "$MNT"; then
    same_bytes "the mount reads model/a" "$TMP/a.raw" "$MNT/model/a"
    # lib.sh runs the script in a namespace of its own: the one that
    # started it (make's) must not see, and so cannot copy, the mount
    if [ "$(readlink /proc/$PPID/ns/mnt)" = "$(readlink /proc/self/ns/mnt)" ]; then
        bad "the script runs in the namespace that started it (lib.sh made none of its own)"
    elif nsenter -t "$PPID" -m cat /proc/self/mountinfo | grep -q -F " $MNT "; then
        bad "the namespace that started the script sees its mount"
    else
        ok "the namespace that started the script does not see its mount"
    fi
    # the holder: sleep, in a namespace made while the mount is up
    bash "$CKPT_SRCDIR/scripts/private-ns.sh" sleep 600 </dev/null >"$TMP/ns.log" 2>&1 &
    HOLDER=$!
    for ((i = 0; i < 100; i++)); do
        [ "$(cat /proc/$HOLDER/comm 2>/dev/null)" = sleep ] && break
        kill -0 "$HOLDER" 2>/dev/null || break
        sleep 0.1
    done
    if [ "$(cat /proc/$HOLDER/comm 2>/dev/null)" != sleep ]; then
        bad "private-ns.sh did not start its command: $(head -c 300 "$TMP/ns.log")"
    elif [ "$(readlink /proc/$HOLDER/ns/mnt)" = "$(readlink /proc/self/ns/mnt)" ]; then
        bad "private-ns.sh ran its command in this mount namespace"
    else
        nsenter -t "$HOLDER" -m cat /proc/self/mountinfo >"$TMP/ns.mountinfo"
        if ! grep -q ' / / ' "$TMP/ns.mountinfo"; then
            bad "could not read the new namespace's mounts: $(head -c 300 "$TMP/ns.mountinfo")"
        elif grep -q -F " $MNT " "$TMP/ns.mountinfo"; then
            bad "the new namespace holds a copy of the mount: $(grep -F " $MNT " "$TMP/ns.mountinfo")"
        else
            ok "the new namespace holds no copy of the mount ($(wc -l <"$TMP/ns.mountinfo") mounts there)"
        fi
    fi
    if mountpoint -q "$MNT"; then
        same_bytes "the host's mount still reads model/a" "$TMP/a.raw" "$MNT/model/a"
    else
        bad "the host lost its mount to the new namespace"
    fi
    umount_ck "$MNT"
    expect_daemon_clean "unmounted while the namespace lives" "$MNT_LOG"
    if kill -0 "$HOLDER" 2>/dev/null; then
        ok "the namespace's command still runs: the daemon did not wait for it"
    else
        bad "the namespace's command ended before the check: $(head -c 300 "$TMP/ns.log")"
    fi
fi
summary
