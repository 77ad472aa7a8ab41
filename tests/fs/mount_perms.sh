#!/bin/bash
# mount_perms.sh - a mount with allow_other grants a user no more than the
# disk does (docs/TRUST.md, "Permissions: a shared mount"; issue 22, items
# 3 and 7):
#   - directory modes count: a checkpoint directory chmod 700 (its files
#     0644) of root's is not read by nobody through a read-only or a
#     writable mount, nor through `latest`; nor is a tensor whose shard
#     lies in a 0700 data/ (its listing is, as on the disk);
#   - links in ROOT are followed only as far as the disk would let the
#     caller: ROOT/peek -> a checkpoint inside a 0700 directory (out of
#     ROOT), ROOT/hop -> one inside a 0700 subdirectory of ROOT, and a
#     checkpoint directory replaced by such a link after the root scan;
#   - a shared ROOT (1777) shows as 1777, and a save belongs to its maker:
#     another user may not add pieces to it, set its metadata or commit
#     it, unless its maker opened its modes (chmod through the mount); its
#     maker may.
# The users: nobody (A) and a uid with no account (B), through setpriv.
. "$(dirname "$0")/lib.sh"

command -v setpriv >/dev/null 2>&1 || { echo "SKIP: mount_perms: no setpriv"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: mount_perms: no user nobody"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: mount_perms: needs root (to mount for other users)"; exit 77; }
NOGROUP=$(id -gn nobody)
# B: a uid and gid that no account has, so the test creates no user.
B_ID=54329
while getent passwd "$B_ID" >/dev/null || getent group "$B_ID" >/dev/null; do
    B_ID=$((B_ID + 1))
done
as_nobody() {
    setpriv --reuid=nobody --regid="$NOGROUP" --clear-groups "$@"
}
as_b() {
    setpriv --reuid="$B_ID" --regid="$B_ID" --clear-groups "$@"
}
umask 022
chmod 755 "$TMP"   # the users must reach the mount points
as_nobody test -x "$TMP" || { echo "SKIP: mount_perms: user nobody cannot reach $TMP (set TMPDIR)"; exit 77; }

# denied WHO DESC CMD...: CMD run as WHO (as_nobody, as_b) fails with
# EACCES, or EPERM for what only an owner may do (chmod), as on the disk
# (wput.py prints the errno's name, tools print strerror).
denied() {
    local who=$1 desc=$2
    shift 2
    if "$who" "$@" >"$TMP/u.out" 2>"$TMP/u.err"; then
        bad "$desc: let through ($(wc -c <"$TMP/u.out") bytes out)"
    elif grep -q 'Permission denied\|EACCES\|Operation not permitted' "$TMP/u.err" "$TMP/u.out"; then
        ok "$desc: $(grep -o 'Permission denied\|EACCES\|Operation not permitted' "$TMP/u.err" "$TMP/u.out" | head -1 | sed 's/.*://')"
    else
        bad "$desc: failed, but not with EACCES: $(head -c 300 "$TMP/u.err" "$TMP/u.out" | tr '\n' ' ')"
    fi
}
# allowed WHO DESC CMD...: CMD run as WHO succeeds.
allowed() {
    local who=$1 desc=$2
    shift 2
    if "$who" "$@" >"$TMP/u.out" 2>"$TMP/u.err"; then
        ok "$desc"
    else
        bad "$desc: failed: $(head -c 300 "$TMP/u.err" "$TMP/u.out" | tr '\n' ' ')"
    fi
}
# reads WHO DESC FILE WANT: WHO reads FILE and gets WANT's bytes.
reads() {
    if "$1" cat "$3" >"$TMP/u.out" 2>"$TMP/u.err" && cmp -s "$4" "$TMP/u.out"; then
        ok "$2"
    else
        bad "$2: $(head -c 300 "$TMP/u.err")"
    fi
}
# mode_is DESC FILE MODE OWNER
mode_is() {
    local got
    got=$(stat -c '%a %U' "$2" 2>&1)
    if [ "$got" = "$3 $4" ]; then ok "$1: mode $got"; else bad "$1: mode $got, want $3 $4"; fi
}
WPUT="$HELPERS/wput.py"

"$PY" - "$TMP" <<'EOF' || exit 99
import sys, numpy as np
d = sys.argv[1]
a = np.arange(6000, dtype="<f4").reshape(60, 100) / 7
np.save(d + "/a.npy", a)
a.tofile(d + "/a.raw")
EOF

# ------------------------------------------------------------ directory modes, links
echo "# ---- ROOT: step-1 (0755), step-2 (0700, files 0644), peek -> a checkpoint in a 0700 directory, hop -> one in a 0700 subdirectory of ROOT"
run_ckpt pack "$TMP/ck" "model.a=$TMP/a.npy"
expect_ok "pack"
ROOT=$TMP/root
mkdir -p "$ROOT" "$TMP/vault" "$ROOT/sub"
chmod 755 "$ROOT"
cp -a "$TMP/ck" "$ROOT/step-1"
cp -a "$TMP/ck" "$ROOT/step-2"
chmod 700 "$ROOT/step-2"
cp -a "$TMP/ck" "$TMP/vault/step-3"
chmod 700 "$TMP/vault"
ln -s "$TMP/vault/step-3" "$ROOT/peek"
cp -a "$TMP/ck" "$ROOT/sub/step-4"
chmod 700 "$ROOT/sub"
ln -s sub/step-4 "$ROOT/hop"
cp -a "$TMP/ck" "$ROOT/step-0"
chmod 700 "$ROOT/step-0/data"
# the reference: what the disk lets nobody do
if as_nobody cat "$ROOT/step-2/index.db" >/dev/null 2>&1 ||
    as_nobody cat "$ROOT/peek/index.db" >/dev/null 2>&1 ||
    as_nobody cat "$ROOT/hop/index.db" >/dev/null 2>&1; then
    bad "the disk lets nobody read step-2, peek or hop: the test's setup is wrong"
else
    ok "on the disk, nobody reads none of step-2, peek, hop"
fi
reads as_nobody "on the disk, nobody reads step-1's index.db" "$ROOT/step-1/index.db" "$ROOT/step-1/index.db"
reads as_nobody "on the disk, nobody reads step-0's index.db" "$ROOT/step-0/index.db" "$ROOT/step-0/index.db"
if as_nobody cat "$ROOT/step-0/data/rank0.shard" >/dev/null 2>&1; then
    bad "the disk lets nobody read step-0's shard: the test's setup is wrong"
else
    ok "on the disk, nobody cannot read step-0's shard (data/ is 0700)"
fi

for opts in allow_other rw,world=1,allow_other; do
    MNT=$TMP/m.${opts%%,*}
    if mount_ck "$ROOT" "$MNT" -o "$opts"; then
        reads as_nobody "($opts) nobody reads step-1/model/a" "$MNT/step-1/model/a" "$TMP/a.raw"
        mode_is "($opts) step-2 shows its directory's mode" "$MNT/step-2" 500 root
        denied as_nobody "($opts) nobody: cat step-2/model/a (the reported attack)" cat "$MNT/step-2/model/a"
        denied as_nobody "($opts) nobody: ls step-2" ls "$MNT/step-2"
        denied as_nobody "($opts) nobody: cat latest/model/a (latest is step-2)" cat "$MNT/latest/model/a"
        denied as_nobody "($opts) nobody: cat peek/model/a (the reported link)" cat "$MNT/peek/model/a"
        denied as_nobody "($opts) nobody: numpy.load of peek's .npy view" /usr/bin/python3 -c 'import numpy, sys; numpy.load(sys.argv[1])' "$MNT/peek/.npy/model/a.npy"
        denied as_nobody "($opts) nobody: cat hop/model/a" cat "$MNT/hop/model/a"
        if as_nobody ls "$MNT/step-0/model" >"$TMP/u.out" 2>&1 && [ "$(cat "$TMP/u.out")" = a ]; then
            ok "($opts) nobody lists step-0/model (its index.db is 0644)"
        else
            bad "($opts) nobody cannot list step-0/model: $(head -c 200 "$TMP/u.out")"
        fi
        mode_is "($opts) step-0/model/a, its shard under a 0700 data/" "$MNT/step-0/model/a" 400 root
        denied as_nobody "($opts) nobody: cat step-0/model/a" cat "$MNT/step-0/model/a"
        same_bytes "($opts) root reads step-0/model/a" "$TMP/a.raw" "$MNT/step-0/model/a"
        same_bytes "($opts) root reads step-2/model/a" "$TMP/a.raw" "$MNT/step-2/model/a"
        same_bytes "($opts) root reads peek/model/a" "$TMP/a.raw" "$MNT/peek/model/a"
        same_bytes "($opts) root reads hop/model/a" "$TMP/a.raw" "$MNT/hop/model/a"
        umount_ck "$MNT"
        expect_daemon_clean "($opts) mount of ROOT" "$MNT_LOG"
    fi
done

echo "# ---- a checkpoint of ROOT replaced by a link (to a checkpoint in a 0700 directory) between the scan and its first read"
cp -a "$TMP/ck" "$ROOT/swap"
if mount_ck "$ROOT" "$TMP/m.swap" -o allow_other; then
    ls "$TMP/m.swap" >/dev/null   # the scan: swap is a 0755 directory
    rm -rf "$ROOT/swap"
    ln -s "$TMP/vault/step-3" "$ROOT/swap"
    # Read at once: the daemon may still hold the scan's view of swap
    # (rescans come at most once a second); either way nobody must not
    # get the bytes behind the 0700 directory.
    if as_nobody cat "$TMP/m.swap/swap/model/a" >"$TMP/u.out" 2>"$TMP/u.err"; then
        bad "nobody read swap/model/a through the link put in place after the scan"
    elif grep -q 'Permission denied\|Input/output error' "$TMP/u.err"; then
        ok "nobody cannot read swap/model/a ($(sed 's/.*: //' "$TMP/u.err" | head -1))"
    else
        bad "nobody's cat of swap/model/a failed, but not with EACCES or EIO: $(head -c 300 "$TMP/u.err")"
    fi
    sleep 1.1   # the next scan finds the link, with the target's bits
    denied as_nobody "after a rescan, nobody: cat swap/model/a" cat "$TMP/m.swap/swap/model/a"
    same_bytes "after a rescan, root reads swap/model/a" "$TMP/a.raw" "$TMP/m.swap/swap/model/a"
    umount_ck "$TMP/m.swap"
    expect_daemon_clean "mount of ROOT with swap" "$MNT_LOG"
fi

# ------------------------------------------------------------ a shared ROOT: saves are their maker's
echo "# ---- a 1777 ROOT, mounted rw by root with allow_other: A (nobody) and B (uid $B_ID)"
SH=$TMP/shared
mkdir -p "$SH"
chmod 1777 "$SH"
if mount_ck "$SH" "$TMP/msh" -o rw,world=1,allow_other; then
    M=$TMP/msh
    mode_is "the root shows the sticky bit" "$M" 1777 root
    allowed as_nobody "A makes the save step-10" mkdir "$M/step-10"
    mode_is "step-10 is A's (mode of A's mkdir)" "$M/step-10" 755 nobody
    mode_is "on the disk, ROOT/step-10 is A's" "$SH/step-10" 755 nobody
    allowed as_nobody "A creates step-10/w" touch "$M/step-10/w"
    mode_is "A's file in it" "$M/step-10/w" 644 nobody
    denied as_b "B: mkdir step-10/m in A's save" mkdir "$M/step-10/m"
    denied as_b "B: a piece into A's save (new file)" /usr/bin/python3 "$WPUT" put "$M/step-10/b" "$TMP/a.raw" --dtype f32 --shape 60,100
    denied as_b "B: a piece into A's file w" /usr/bin/python3 "$WPUT" put "$M/step-10/w" "$TMP/a.raw" --dtype f32 --shape 60,100
    denied as_b "B: setfattr user.ckpt.meta.step on A's save" /usr/bin/python3 "$WPUT" setx "$M/step-10" user.ckpt.meta.step 999
    denied as_b "B: setfattr user.ckpt.dtype on A's file" /usr/bin/python3 "$WPUT" setx "$M/step-10/w" user.ckpt.dtype f64
    denied as_b "B: commit A's save" /usr/bin/python3 "$WPUT" commit "$M/step-10" 0
    denied as_b "B: chmod of A's save" chmod 777 "$M/step-10"
    allowed as_nobody "A writes its piece" /usr/bin/python3 "$WPUT" put "$M/step-10/w" "$TMP/a.raw" --dtype f32 --shape 60,100
    allowed as_nobody "A sets the step" /usr/bin/python3 "$WPUT" setx "$M/step-10" user.ckpt.meta.step 10
    allowed as_nobody "A commits" /usr/bin/python3 "$WPUT" commit "$M/step-10" 0
    check "step-10's status: committed" grep -qx committed "$M/step-10/.ckptfs/status"
    sleep 1.1   # the root is rescanned at most once a second
    reads as_b "B reads the committed step-10/w" "$M/step-10/w" "$TMP/a.raw"
    if "$CKPT" info "$SH/step-10" 2>&1 | grep -qx '  step = 10'; then
        ok "step-10's step metadata is A's (10), not B's"
    else
        bad "step-10's metadata: $("$CKPT" info "$SH/step-10" 2>&1 | head -5 | tr '\n' ' ')"
    fi
    echo "# ---- a save its maker opened to everyone (chmod 777 through the mount)"
    allowed as_nobody "A makes step-11" mkdir "$M/step-11"
    allowed as_nobody "A: chmod 777 step-11" chmod 777 "$M/step-11"
    mode_is "on the disk, step-11 is 0777" "$SH/step-11" 777 nobody
    allowed as_b "B writes a piece into it" /usr/bin/python3 "$WPUT" put "$M/step-11/w" "$TMP/a.raw" --dtype f32 --shape 60,100
    allowed as_b "B sets its step" /usr/bin/python3 "$WPUT" setx "$M/step-11" user.ckpt.meta.step 11
    allowed as_b "B commits it" /usr/bin/python3 "$WPUT" commit "$M/step-11" 0
    check "step-11's status: committed" grep -qx committed "$M/step-11/.ckptfs/status"
    umount_ck "$TMP/msh"
    expect_daemon_clean "rw mount of a 1777 ROOT" "$MNT_LOG"
fi

summary
