#!/bin/bash
# mount_planted.sh - a writable mount (started by root, -o allow_other)
# of a shared root (mode 1777) in which user nobody plants things in a
# save of its own, as issue 22 reported them (docs/TRUST.md, "A shared
# root"):
#   - .pending/errors.x, .pending/failed, .pending/unsynced linking to a
#     root-only file (0600, a secret string the test made): neither
#     .ckptfs/errors nor .ckptfs/status serves the secret;
#   - lease, commit.lock, rank-0 and failed.<daemon pid> linking to
#     root-owned files (or to a missing file in a root-only directory):
#     writes and commits through the mount leave the targets' bytes and
#     modification times as they were, and create nothing;
#   - `ckpt commit` run by root over such a save refuses it without
#     touching or printing a target, and `ckpt gc` leaves the targets too;
#     a lease gc makes in nobody's save is nobody's;
#   - a FIFO as .pending/errors.f never blocks the daemon (ls and cat of
#     the control files return), and a sparse 256 MiB .pending/errors.z is
#     not read whole (.ckptfs/errors stays within its documented bound),
#     also in a save of the daemon's own user.
# Every command that could hang runs under timeout.
. "$(dirname "$0")/lib.sh"

need_nobody

R=$TMP/shared
M=$TMP/mnt
mkdir -p "$R" "$TMP/rootonly"
chmod 1777 "$R"
chmod 700 "$TMP/rootonly"
SECRET="secret-$$-$RANDOM$RANDOM"
printf '%s\nsecond line\n' "$SECRET" >"$TMP/secret"
chmod 600 "$TMP/secret"
# Targets a planted link points at: root's files, 0644, known bytes and
# an old modification time.
for t in lease commit.lock rank-0; do
    printf 'target %s\n' "$t" >"$TMP/target.$t"
    chmod 644 "$TMP/target.$t"
    touch -d '2001-01-01 00:00:00' "$TMP/target.$t"
done
"$PY" -c 'import numpy as np, sys; np.arange(64, dtype="<f4").tofile(sys.argv[1])' "$TMP/w.raw" || exit 99
chmod 644 "$TMP/w.raw"

# target_same DESC TARGET: TARGET's bytes and mtime are as made above.
target_same() {
    local t=$2 name
    name=${t##*/target.}
    if [ "$(cat "$t" 2>/dev/null)" = "target $name" ] &&
        [ "$(stat -c %Y "$t")" = "$(date -d '2001-01-01 00:00:00' +%s)" ] &&
        [ "$(stat -c %U "$t")" = root ]; then
        ok "$1: $name's target is untouched"
    else
        bad "$1: $name's target was changed: $(stat -c '%y %U %s' "$t") $(head -c 60 "$t" | tr '\n' ' ')"
    fi
}
# no_secret DESC FILE: FILE (an output) does not hold the secret.
no_secret() {
    if grep -q -- "$SECRET" "$2" 2>/dev/null; then
        bad "$1: the root-only file's secret was served"
    else
        ok "$1: no secret ($(head -c 120 "$2" | tr '\n' ' '))"
    fi
}
# returns DESC SECONDS CMD...: CMD (as root) ends within SECONDS.
returns() {
    local desc=$1 s=$2
    shift 2
    timeout -k 2 "$s" "$@" >"$TMP/ret.out" 2>&1
    if [ $? -ge 124 ]; then bad "$desc: still blocked after ${s}s"; else ok "$desc: returned"; fi
}

# nobody's saves, made on the disk as a user of the shared root can.
plant() {   # plant SAVE NAME TARGET: SAVE/.pending/NAME -> TARGET
    as_nobody mkdir -p "$R/$1/.pending" "$R/$1/data" &&
        as_nobody ln -s "$3" "$R/$1/.pending/$2"
}
plant ev-errors errors.x "$TMP/secret" || exit 99
plant ev-failed failed "$TMP/secret" || exit 99
plant ev-unsynced unsynced "$TMP/secret" || exit 99
plant ev-links lease "$TMP/target.lease" || exit 99
plant ev-links commit.lock "$TMP/target.commit.lock" || exit 99
plant ev-links rank-0 "$TMP/target.rank-0" || exit 99
as_nobody mkdir -p "$R/ev-fifo/.pending" "$R/ev-fifo/data" || exit 99
as_nobody mkfifo "$R/ev-fifo/.pending/errors.f" || exit 99

echo "# ---- nobody's planted saves, through a mount by root"
if mount_ck "$R" "$M" -o rw,world=1,allow_other; then
    as_nobody ln -s "$TMP/rootonly/created" "$R/ev-links/.pending/failed.$MNT_PID"
    returns "ls of the mount (a FIFO in a save)" 10 ls "$M"
    returns "ls of the FIFO's save" 10 ls -a "$M/ev-fifo"
    for s in ev-errors ev-failed ev-unsynced ev-fifo; do
        for f in errors status; do
            timeout -k 2 10 cat "$M/$s/.ckptfs/$f" >"$TMP/out" 2>&1
            no_secret "root: cat $s/.ckptfs/$f" "$TMP/out"
            timeout -k 2 10 setpriv --reuid=nobody --regid="$NOGROUP" --clear-groups cat "$M/$s/.ckptfs/$f" >"$TMP/out" 2>&1
            no_secret "nobody: cat $s/.ckptfs/$f" "$TMP/out"
        done
    done
    # writes and commits into the save whose control files are links
    timeout -k 2 20 setpriv --reuid=nobody --regid="$NOGROUP" --clear-groups \
        /usr/bin/python3 "$HELPERS/wput.py" put "$M/ev-links/w" "$TMP/w.raw" --dtype f32 --shape 64 >"$TMP/put.out" 2>&1
    echo "     nobody writes ev-links/w: $(cat "$TMP/put.out")"
    timeout -k 2 20 /usr/bin/python3 "$HELPERS/wput.py" put "$M/ev-links/v" "$TMP/w.raw" --dtype f32 --shape 64 >"$TMP/put.out" 2>&1
    echo "     root writes ev-links/v: $(cat "$TMP/put.out")"
    timeout -k 2 20 sh -c "echo 0 > '$M/ev-links/.ckptfs/commit'" >"$TMP/out" 2>&1
    echo "     root commits ev-links: $(cat "$TMP/out")"
    timeout -k 2 20 cat "$M/ev-links/.ckptfs/status" >"$TMP/out" 2>&1
    timeout -k 2 20 cat "$M/ev-links/.ckptfs/errors" >>"$TMP/out" 2>&1
    for t in lease commit.lock rank-0; do
        target_same "through the mount" "$TMP/target.$t"
    done
    if [ -e "$TMP/rootonly/created" ]; then
        bad "failed.<pid> -> a missing file in a root-only directory: the daemon created it"
    else
        ok "failed.<pid> -> a missing file: nothing created"
    fi
    if [ -z "$(find "$R/ev-links" -user root 2>/dev/null)" ]; then
        ok "the daemon created no root-owned file in nobody's save"
    else
        bad "root-owned files in nobody's save: $(find "$R/ev-links" -user root | tr '\n' ' ')"
    fi
    umount_ck "$M"
    expect_daemon_clean "the mount of the shared root" "$MNT_LOG"
fi

echo "# ---- ckpt commit run by root over nobody's save"
for s in ev-links ev-unsynced ev-failed ev-fifo; do
    timeout -k 2 20 "$CKPT" commit "$R/$s" >"$TMP/out" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 124 ]; then ok "ckpt commit $s refused ($(head -c 200 "$TMP/out" | tr '\n' ' '))"; else bad "ckpt commit $s: exit $rc"; fi
    no_secret "ckpt commit $s's output" "$TMP/out"
    [ -e "$R/$s/index.db" ] && bad "ckpt commit $s committed nobody's save"
done
for t in lease commit.lock rank-0; do
    target_same "after ckpt commit" "$TMP/target.$t"
done
if [ -z "$(find "$R" -user root -mindepth 1 2>/dev/null)" ]; then
    ok "ckpt commit created no root-owned file in nobody's saves"
else
    bad "root-owned files after ckpt commit: $(find "$R" -mindepth 1 -user root | tr '\n' ' ')"
fi

echo "# ---- root's gc over nobody's young save leaves it nobody's"
as_nobody mkdir -p "$R/young/.pending" "$R/young/data" || exit 99
"$CKPT" gc "$R" >"$TMP/out" 2>&1
echo "     ckpt gc $R (exit $?): $(tr '\n' ' ' <"$TMP/out" | head -c 600)"
for t in lease commit.lock rank-0; do
    target_same "after ckpt gc" "$TMP/target.$t"
done
if [ "$(stat -c %U "$R/young/.pending/lease" 2>/dev/null)" = nobody ]; then
    ok "the lease gc made in nobody's save is nobody's"
else
    bad "the lease gc made in nobody's save: $(stat -c '%U' "$R/young/.pending/lease" 2>&1)"
fi
as_nobody "$CKPT" commit "$R/young" >"$TMP/out" 2>&1
if grep -q 'no writer plans' "$TMP/out"; then
    ok "nobody's commit of it gets past the lease ($(head -c 120 "$TMP/out"))"
else
    bad "nobody's commit of its save after root's gc: $(head -c 300 "$TMP/out")"
fi

echo "# ---- a FIFO and a sparse file in a save of the daemon's own user"
rm -rf "${R:?}"/ev-*
if mount_ck "$R" "$M" -o rw,world=1,allow_other; then
    check "root starts a save" mkdir "$M/own"
    timeout -k 2 20 /usr/bin/python3 "$HELPERS/wput.py" put "$M/own/w" "$TMP/w.raw" --dtype f32 --shape 64 >"$TMP/put.out" 2>&1
    mkfifo "$R/own/.pending/errors.f"
    truncate -s 256M "$R/own/.pending/errors.z"
    returns "ls of the mount (a FIFO in root's save)" 10 ls "$M"
    returns "cat own/.ckptfs/status" 10 cat "$M/own/.ckptfs/status"
    timeout -k 2 20 cat "$M/own/.ckptfs/errors" >"$TMP/out" 2>&1
    rc=$?
    n=$(stat -c %s "$TMP/out")
    if [ $rc -lt 124 ] && [ "$n" -le 65536 ]; then
        ok "cat own/.ckptfs/errors: $n bytes, within the 64 KiB bound (a 256 MiB sparse errors.z, a FIFO)"
    else
        bad "cat own/.ckptfs/errors: exit $rc, $n bytes (the bound is 64 KiB)"
    fi
    umount_ck "$M"
    expect_daemon_clean "the mount of root's save" "$MNT_LOG"
fi

summary
