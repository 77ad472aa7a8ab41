#!/bin/bash
# mount_hostile.sh - a shared mount of checkpoints someone else wrote
# (docs/TRUST.md), tried as a second user would:
#   - permissions: a mount started by root with -o allow_other shows each
#     tensor file, .npy view and directory with the owner and mode of the
#     files it is read from (the most restrictive of a tensor's shards) and
#     lets the kernel enforce them: user nobody reads what it may read on
#     the disk and nothing else -- safetensors, ckptfs checkpoints, DCP;
#   - links: a shard that is a link out of the checkpoint reads as EIO
#     (-o follow_links reads it); a DCP item linked out is refused before
#     mounting;
#   - chunks that overlap read as EIO, not as wrong bytes;
#   - writable mounts: the root carries ROOT's owner and mode, a save its
#     maker's (nobody may not start a save in a root it may not write, and
#     may in one it may: write, commit, read back; tests/fs/mount_perms.sh
#     has saves of two users), and a save whose data/ is a link out of it
#     is not written through.
# Every byte is compared with what NumPy or the files themselves hold.
. "$(dirname "$0")/lib.sh"

# The second user: nobody, through setpriv (util-linux).
command -v setpriv >/dev/null 2>&1 || { echo "SKIP: mount_hostile: no setpriv"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "SKIP: mount_hostile: no user nobody"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: mount_hostile: needs root (to mount for another user)"; exit 77; }
NOGROUP=$(id -gn nobody)
as_nobody() {
    setpriv --reuid=nobody --regid="$NOGROUP" --clear-groups "$@"
}
chmod 755 "$TMP"   # nobody must reach the mount points
as_nobody test -x "$TMP" || { echo "SKIP: mount_hostile: user nobody cannot reach $TMP (set TMPDIR)"; exit 77; }

# nobody_reads DESC FILE WANT: nobody reads FILE, and gets WANT's bytes.
nobody_reads() {
    if as_nobody cat "$2" >"$TMP/nb.out" 2>"$TMP/nb.err" && cmp -s "$3" "$TMP/nb.out"; then
        ok "nobody reads $1"
    else
        bad "nobody cannot read $1: $(head -c 300 "$TMP/nb.err")"
    fi
}
# nobody_denied DESC CMD...: CMD run as nobody fails with EACCES.
nobody_denied() {
    local desc=$1
    shift
    if as_nobody "$@" >"$TMP/nb.out" 2>"$TMP/nb.err"; then
        bad "$desc: nobody was let through ($(head -c 100 "$TMP/nb.out" | od -A n -t x1 | head -1))"
    elif grep -q 'Permission denied\|EACCES' "$TMP/nb.err" "$TMP/nb.out"; then
        ok "$desc: Permission denied"
    else
        bad "$desc: failed, but not with EACCES: $(head -c 300 "$TMP/nb.err")"
    fi
}
# mode_is DESC FILE MODE OWNER
mode_is() {
    local got
    got=$(stat -c '%a %U' "$2")
    if [ "$got" = "$3 $4" ]; then ok "$1: mode $got"; else bad "$1: mode $got, want $3 $4"; fi
}

"$PY" - "$TMP" <<'EOF' || exit 99
import json, struct, sys, numpy as np
d = sys.argv[1]
a = np.arange(6000, dtype="<f4").reshape(60, 100) / 7
np.save(d + "/a.npy", a)
a.tofile(d + "/a.raw")
np.save(d + "/b.npy", -a)
(-a).tofile(d + "/b.raw")
np.array(123456789, dtype="<i8").tofile(d + "/step.raw")
def st(path, name, arr):
    b = arr.tobytes()
    h = json.dumps({name: {"dtype": "F32", "shape": list(arr.shape),
                           "data_offsets": [0, len(b)]}}).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b)
st(d + "/priv.safetensors", "model.w", a[:4])
st(d + "/pub.safetensors", "model.w", a[4:8])
a[:4].tofile(d + "/priv.raw")
a[4:8].tofile(d + "/pub.raw")
EOF

# ------------------------------------------------------------ permissions
echo "# ---- safetensors: a 0600 file is not read by nobody through the mount"
chmod 600 "$TMP/priv.safetensors"
if mount_ck "$TMP/priv.safetensors" "$TMP/mst" -o allow_other; then
    mode_is "the tensor file of a 0600 root file" "$TMP/mst/model/w" 400 root
    mode_is "its directory" "$TMP/mst/model" 500 root
    nobody_denied "od of the tensor (the reported attack)" od -A d -t f4 "$TMP/mst/model/w"
    nobody_denied "ls of the mount" ls "$TMP/mst"
    same_bytes "root still reads it" "$TMP/priv.raw" "$TMP/mst/model/w"
    umount_ck "$TMP/mst"
fi
if mount_ck "$TMP/pub.safetensors" "$TMP/mpub" -o allow_other; then
    mode_is "the tensor of a 0644 file" "$TMP/mpub/model/w" 444 root
    nobody_reads "a tensor of a 0644 safetensors file" "$TMP/mpub/model/w" "$TMP/pub.raw"
    umount_ck "$TMP/mpub"
fi

echo "# ---- a ckptfs checkpoint whose data/rank1.shard is 0600"
run_ckpt pack --grid 2 "$TMP/ck" "model.a=$TMP/a.npy" "model.b=$TMP/b.npy" "step=$TMP/step.raw:i64:"
expect_ok "pack"
chmod 600 "$TMP/ck/data/rank1.shard"
if mount_ck "$TMP/ck" "$TMP/mck" -o allow_other; then
    mode_is "model/a (rows in rank0 and rank1)" "$TMP/mck/model/a" 400 root
    mode_is "step (in rank0 only)" "$TMP/mck/step" 444 root
    mode_is "model/ (from index.db)" "$TMP/mck/model" 555 root
    nobody_denied "cat of model/a, half of it in the 0600 shard" cat "$TMP/mck/model/a"
    nobody_denied "numpy.load of its .npy view" /usr/bin/python3 -c 'import numpy, sys; numpy.load(sys.argv[1])' "$TMP/mck/.npy/model/a.npy"
    nobody_reads "step, whose shard is 0644" "$TMP/mck/step" "$TMP/step.raw"
    if as_nobody ls "$TMP/mck/model" >"$TMP/nb.out" 2>&1 && [ "$(tr '\n' ' ' <"$TMP/nb.out")" = "a b " ]; then
        ok "nobody lists model/ (index.db is 0644)"
    else
        bad "nobody cannot list model/: $(cat "$TMP/nb.out")"
    fi
    same_bytes "root reads model/a" "$TMP/a.raw" "$TMP/mck/model/a"
    umount_ck "$TMP/mck"
fi
chmod 644 "$TMP/ck/data/rank1.shard"

if "$PY" "$HELPERS/dcp_ref.py" save1 "$TMP/dcp" >/dev/null 2>&1; then
    echo "# ---- a PyTorch DCP checkpoint with one item file 0600"
    "$CKPT" info "$TMP/dcp" mask >"$TMP/mask.info"
    item=$(sed -n 's/^chunk 0: .* file=\([^ ]*\) .*/\1/p' "$TMP/mask.info")
    "$CKPT" cat "$TMP/dcp" extra >"$TMP/extra.raw"
    chmod 600 "$TMP/dcp/$item"
    if mount_ck "$TMP/dcp" "$TMP/mdcp" -o allow_other; then
        nobody_denied "cat of 'mask', stored in the 0600 $item" cat "$TMP/mdcp/mask"
        nobody_reads "'extra', stored in a 0644 file" "$TMP/mdcp/extra" "$TMP/extra.raw"
        umount_ck "$TMP/mdcp"
    fi
    chmod 644 "$TMP/dcp/$item"
    echo "# ---- a DCP item linked out of the checkpoint"
    "$CKPT" info "$TMP/dcp" extra >"$TMP/extra.info"
    item=$(sed -n 's/^chunk 0: .* file=\([^ ]*\) .*/\1/p' "$TMP/extra.info")
    mv "$TMP/dcp/$item" "$TMP/outside.distcp"
    ln -s "$TMP/outside.distcp" "$TMP/dcp/$item"
    refuse_mount "a DCP checkpoint whose $item is a link out of it" "$item is, or lies under, a symbolic link" "$TMP/dcp"
    if mount_ck "$TMP/dcp" "$TMP/mdcpf" -o follow_links; then
        same_bytes "-o follow_links reads the linked item" "$TMP/extra.raw" "$TMP/mdcpf/extra"
        umount_ck "$TMP/mdcpf"
    fi
else
    echo "     (no torch: the DCP cases are left out)"
fi

# ------------------------------------------------------------ links, overlap
echo "# ---- a shard linked out of the checkpoint; chunks that overlap"
cp -r "$TMP/ck" "$TMP/cklink"
mv "$TMP/cklink/data/rank1.shard" "$TMP/outside.shard"
ln -s "$TMP/outside.shard" "$TMP/cklink/data/rank1.shard"
if mount_ck "$TMP/cklink" "$TMP/mlink"; then
    if cat "$TMP/mlink/model/a" >/dev/null 2>"$TMP/err"; then
        bad "model/a read through the link"
    elif grep -q 'Input/output error' "$TMP/err"; then
        ok "model/a, half in the linked shard: EIO"
    else
        bad "model/a failed but not with EIO: $(cat "$TMP/err")"
    fi
    if grep -q 'rank1.shard is, or lies under, a symbolic link' "$MNT_LOG"; then ok "the daemon logs why"; else bad "no log line about the link: $(tail -c 300 "$MNT_LOG")"; fi
    same_bytes "step (rank0 only) still reads" "$TMP/step.raw" "$TMP/mlink/step"
    umount_ck "$TMP/mlink"
fi
if mount_ck "$TMP/cklink" "$TMP/mlinkf" -o follow_links; then
    same_bytes "-o follow_links: model/a reads through the link" "$TMP/a.raw" "$TMP/mlinkf/model/a"
    umount_ck "$TMP/mlinkf"
fi
cp -r "$TMP/ck" "$TMP/ckov"
"$PY" -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("UPDATE chunks SET offsets = ? WHERE id = 2", ("[0,0]",)); c.commit()' "$TMP/ckov/index.db"
if mount_ck "$TMP/ckov" "$TMP/mov"; then
    if cat "$TMP/mov/model/a" >"$TMP/ov.out" 2>"$TMP/err"; then
        bad "model/a with overlapping chunks read ($(stat -c %s "$TMP/ov.out") bytes)"
    elif grep -q 'Input/output error' "$TMP/err"; then
        ok "model/a with chunks 0 and 1 the same box: EIO"
    else
        bad "model/a failed but not with EIO: $(cat "$TMP/err")"
    fi
    if grep -q "damaged index: tensor 'model.a': chunks 0 and 1 are the same box" "$MNT_LOG"; then ok "the daemon logs the chunks"; else bad "no log line naming the chunks"; fi
    same_bytes "model/b beside it reads right" "$TMP/b.raw" "$TMP/mov/model/b"
    umount_ck "$TMP/mov"
fi

# ------------------------------------------------------------ writable mounts
echo "# ---- writable mounts: ROOT's owner and mode"
mkdir -p "$TMP/root" "$TMP/open"
chmod 755 "$TMP/root"
chmod 777 "$TMP/open"
if mount_ck "$TMP/root" "$TMP/mroot" -o rw,world=1,allow_other; then
    mode_is "the root of a writable mount of a 0755 root" "$TMP/mroot" 755 root
    nobody_denied "mkdir of a save by nobody" mkdir "$TMP/mroot/step-1"
    check "root makes a save" mkdir "$TMP/mroot/step-2"
    mode_is "the save made by root" "$TMP/mroot/step-2" 755 root
    nobody_denied "nobody writing in root's save" /usr/bin/python3 "$HELPERS/wput.py" put "$TMP/mroot/step-2/w" "$TMP/a.raw"
    # a save whose data/ someone made a link out of it
    mkdir -p "$TMP/root/step-3/.pending" "$TMP/elsewhere"
    ln -s "$TMP/elsewhere" "$TMP/root/step-3/data"
    "$PY" "$HELPERS/wput.py" put "$TMP/mroot/step-3/w" "$TMP/a.raw" --dtype f32 --shape 60,100 >"$TMP/put.out" 2>&1
    if grep -q '^ok' "$TMP/put.out"; then bad "a piece was written into a save whose data/ is a link"; else ok "a piece into a save whose data/ is a link fails ($(cat "$TMP/put.out"))"; fi
    if [ -z "$(ls -A "$TMP/elsewhere")" ]; then ok "nothing was written where the link leads"; else bad "written through the link: $(ls "$TMP/elsewhere")"; fi
    umount_ck "$TMP/mroot"
    expect_daemon_clean "writable mount of a 0755 root" "$MNT_LOG"
fi
if mount_ck "$TMP/open" "$TMP/mopen" -o rw,world=1,allow_other; then
    if as_nobody mkdir "$TMP/mopen/step-5" 2>"$TMP/err" &&
        as_nobody /usr/bin/python3 "$HELPERS/wput.py" put "$TMP/mopen/step-5/w" "$TMP/a.raw" --dtype f32 --shape 60,100 >"$TMP/put.out" 2>&1 &&
        as_nobody /usr/bin/python3 "$HELPERS/wput.py" commit "$TMP/mopen/step-5" 0 >>"$TMP/put.out" 2>&1; then
        ok "nobody saves through the mount of a 0777 root (mkdir, write, commit)"
    else
        bad "nobody could not save in a 0777 root: $(cat "$TMP/err" "$TMP/put.out" | tr '\n' ' ')"
    fi
    sleep 1.1   # the root is rescanned at most once a second
    nobody_reads "the checkpoint it committed" "$TMP/mopen/step-5/w" "$TMP/a.raw"
    umount_ck "$TMP/mopen"
    expect_daemon_clean "writable mount of a 0777 root" "$MNT_LOG"
fi

summary
