#!/bin/bash
# mount_errors.sh - what the ckptfs mount does when things go wrong
# (docs/MOUNT.md):
#   - a corrupt frame: reads of its range fail with EIO (dd, cat, pread,
#     O_DIRECT pread), every time; the daemon's log names the tensor, chunk,
#     frame, shard file and offset; other ranges of the same tensor and other
#     tensors read correctly, and the daemon keeps running;
#   - missing frames (a shard cut short, a shard removed): EIO for those,
#     the rest reads;
#   - SOURCE refused before mounting (missing, a file, an empty directory,
#     a directory of unrelated files, an uncommitted checkpoint): exit
#     status 1, a message saying why, nothing mounted; malformed -o values
#     refused too;
#   - every kind of write fails with EROFS and changes nothing;
#   - unmounting (fusermount3 -uz) while a reader is mid-read: the reader
#     gets EOF or an error without hanging, the daemon exits 0.
. "$(dirname "$0")/lib.sh"

IN=$TMP/in
mkdir -p "$IN"
"$PY" - "$IN" <<'EOF' || exit 99
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(11)
# 512 x 2048 f32 = 4 MiB each: with --grid 2 two chunks (bands of 256
# rows, 2 MiB); with 64 KiB frames 32 frames per chunk.
np.save(d + "/z.npy", (np.round(rng.standard_normal((512, 2048)) * 4) / 4).astype("<f4"))
# random bits: incompressible, so zstd falls back to raw frames
np.save(d + "/r.npy", rng.integers(0, 1 << 32, (512, 2048), dtype="<u4").view("<f4"))
np.save(d + "/o.npy", rng.integers(-9, 9, (100, 30)).astype("<f8"))
np.save(d + "/s.npy", np.arange(12, dtype="<i4").reshape(3, 4))
open(d + "/notes.txt", "wb").write(b"hello ckptfs\n" * 100)
# what fscheck.py framerange needs to know of the two 'bad' tensors
import json
m = dict(shape=[512, 2048], itemsize=4, dtype="f32", nbytes=4 << 20)
json.dump({"bad.zstd": m, "bad.raw": m}, open(d + "/in.json", "w"))
EOF
for f in z r o s; do "$PY" "$HELPERS/ref.py" bytes "$IN/$f.npy" >"$IN/$f.ref" || exit 99; done
cp "$IN/notes.txt" "$IN/notes.ref"

# --------------------------------------------------------- corrupt frames
echo "# ---- a flipped byte in one frame"
CK=$TMP/bad
run_ckpt pack --grid 2 --codec zstd --frame-size 64K "$CK" \
    "bad.zstd=$IN/z.npy" "bad.raw=$IN/r.npy" "good.o=$IN/o.npy" "good.s=$IN/s.npy" "good.notes=$IN/notes.txt"
expect_ok "pack a checkpoint (grid 2, zstd, 64 KiB frames)"
[ "$RC" -eq 0 ] || exit 99

# Frame 16 of chunk 1 of each 'bad' tensor: rows 256..511 are chunk 1, so
# the frame holds bytes [3 MiB, 3 MiB + 64 KiB) of the tensor's image.
declare -A F_OFF F_LEN F_FILE F_FOFF F_ST F_CODEC
for t in bad.zstd bad.raw; do
    "$CKPT" info "$CK" "$t" >"$TMP/info.$t" || exit 99
    read -r F_OFF[$t] F_LEN[$t] F_FILE[$t] F_FOFF[$t] F_ST[$t] F_CODEC[$t] < <(
        fscheck framerange "$IN/in.json" "$t" "$TMP/info.$t" 1 16)
    echo "     $t chunk 1 frame 16: tensor bytes [${F_OFF[$t]}, +${F_LEN[$t]}), ${F_FILE[$t]} @${F_FOFF[$t]} (${F_ST[$t]} bytes, ${F_CODEC[$t]})"
done
if [ "${F_CODEC[bad.zstd]}" = zstd ] && [ "${F_CODEC[bad.raw]}" = raw ] &&
    [ "${F_OFF[bad.zstd]}" = $((3 * 1048576)) ] && [ "${F_LEN[bad.raw]}" = 65536 ]; then
    ok "ckpt info: the frames to corrupt are a zstd frame and a raw frame at 3 MiB"
else
    bad "ckpt info: unexpected layout (codecs ${F_CODEC[bad.zstd]}/${F_CODEC[bad.raw]}, offset ${F_OFF[bad.zstd]})"
fi
for t in bad.zstd bad.raw; do
    flip_byte "$CK/${F_FILE[$t]}" $((F_FOFF[$t] + F_ST[$t] / 2)) || exit 99
done
run_ckpt verify "$CK"
expect_fail "ckpt verify sees the two flipped bytes"

MNT=$TMP/mnt_bad
if mount_ck "$CK" "$MNT"; then
    LOG=$MNT_LOG
    for t in bad.zstd bad.raw; do
        f=$MNT/bad/${t#bad.}
        off=${F_OFF[$t]}
        len=${F_LEN[$t]}
        if [ "$t" = bad.zstd ]; then ref=$IN/z.ref; else ref=$IN/r.ref; fi
        # other ranges first, on a fresh page cache: far enough from the bad
        # frame that neither kernel readahead nor prefetch reaches it
        for range in "0 1048576" "2097152 524288" "3670016 524288" "4194000 304"; do
            set -- $range
            if timeout 30 dd if="$f" iflag=skip_bytes,count_bytes bs=64K skip="$1" count="$2" status=none >"$TMP/got" 2>"$TMP/dd.err" &&
                cmp -s "$TMP/got" <(tail -c +$(($1 + 1)) "$ref" | head -c "$2"); then
                ok "$t: dd of bytes [$1, +$2) (away from the bad frame) reads correctly"
            else
                bad "$t: dd of bytes [$1, +$2): $(head -c 200 "$TMP/dd.err") $(stat -c %s "$TMP/got") bytes"
            fi
        done
        # the bad frame
        for k in 1 2; do
            timeout 30 dd if="$f" iflag=skip_bytes,count_bytes bs=1M skip="$off" count="$len" status=none >/dev/null 2>"$TMP/dd.err"
            rc=$?
            if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && grep -q 'Input/output error' "$TMP/dd.err"; then
                ok "$t: dd of the bad frame's range fails with EIO (try $k; $(head -1 "$TMP/dd.err"))"
            else
                bad "$t: dd of the bad frame's range [$off, +$len) (try $k): exit $rc, stderr '$(head -c 200 "$TMP/dd.err")', want EIO"
            fi
        done
        fscheck errno "$f" $((off + 1000)) 5000 5 >"$TMP/chk" 2>&1
        report "$TMP/chk" "$t: "
        fscheck errno "$f" $((off + 12345)) 777 5 --direct >"$TMP/chk" 2>&1
        report "$TMP/chk" "$t: "
        timeout 30 cat "$f" >/dev/null 2>"$TMP/cat.err"
        rc=$?
        if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && grep -q 'Input/output error' "$TMP/cat.err"; then
            ok "$t: cat of the whole file fails with EIO"
        else
            bad "$t: cat of the whole file: exit $rc, stderr '$(head -c 200 "$TMP/cat.err")', want EIO"
        fi
        # the log names the tensor, chunk 1, frame 16, its shard and offset
        lines=$(grep -F -- "$t" "$LOG" | grep -E -i 'chunk[^0-9a-z]{0,3}1([^0-9]|$)' | grep -E -i 'frame[^0-9a-z]{0,3}16([^0-9]|$)')
        if [ -n "$lines" ]; then
            ok "$t: the daemon's log names the tensor, chunk 1 and frame 16: $(echo "$lines" | head -1 | head -c 240)"
            if echo "$lines" | grep -q -F -- "$(basename "${F_FILE[$t]}")"; then
                ok "$t: ... and the shard file $(basename "${F_FILE[$t]}")"
            else
                bad "$t: the log line does not name the shard file ${F_FILE[$t]}"
            fi
            if echo "$lines" | grep -q -E -- "(^|[^0-9])${F_FOFF[$t]}([^0-9]|$)"; then
                ok "$t: ... and the frame's offset in it (${F_FOFF[$t]})"
            else
                bad "$t: the log line does not give the frame's file offset ${F_FOFF[$t]}"
            fi
        else
            bad "$t: no log line names '$t', 'chunk 1' and 'frame 16'; log: $(tail -c 600 "$LOG" | tr '\n' '~')"
        fi
    done
    # the rest of the checkpoint still reads, and the daemon is alive
    nbad=0
    for pair in "good/o|o.ref" "good/s|s.ref" "good/notes|notes.ref"; do
        if ! cmp -s "$MNT/${pair%%|*}" "$IN/${pair#*|}"; then
            bad "after the EIOs: cmp ${pair%%|*}: $(cmp "$MNT/${pair%%|*}" "$IN/${pair#*|}" 2>&1 | head -1)"
            nbad=$((nbad + 1))
        fi
    done
    [ "$nbad" -eq 0 ] && ok "after the EIOs: the other tensors read correctly (cmp good/o good/s good/notes)"
    if timeout 30 dd if="$MNT/bad/raw" iflag=skip_bytes,count_bytes bs=1M skip=$((3 * 1048576 + 65536)) count=65536 status=none >"$TMP/got" 2>/dev/null &&
        cmp -s "$TMP/got" <(tail -c +$((3 * 1048576 + 65536 + 1)) "$IN/r.ref" | head -c 65536); then
        ok "after the EIOs: bad/raw's next frame (chunk 1 frame 17) reads correctly"
    else
        bad "after the EIOs: bad/raw's next frame (chunk 1 frame 17) does not read correctly"
    fi
    if mountpoint -q "$MNT" && [ -r "$MNT/.ckptfs/stats" ]; then
        ok "after the EIOs: still mounted, the daemon answers"
    else
        bad "after the EIOs: the mount is gone or does not answer"
    fi
    umount_ck "$MNT"
    expect_daemon_clean "after the EIOs" "$LOG"
fi

# ------------------------------------------------- missing frames / shard
echo "# ---- missing frames: a truncated shard, a removed shard"
# m.x: chunk 0 in rank0.shard, chunk 1 in rank1.shard (raw frames: random
# bits); m.y, a byte object, is written whole by rank0.  A: rank1.shard cut
# in the middle of chunk 1 frame 16;
# B: rank1.shard removed.
for v in trunc gone; do
    run_ckpt pack --grid 2 --codec zstd --frame-size 64K "$TMP/$v" "m.x=$IN/r.npy" "m.y=$IN/notes.txt"
    expect_ok "pack $v (grid 2, 64 KiB frames)"
done
"$CKPT" info "$TMP/trunc" m.x >"$TMP/info.mx" || exit 99
cp "$IN/in.json" "$TMP/mx.json"
sed -i 's/"bad.raw"/"m.x"/' "$TMP/mx.json"
read -r m_off m_len m_file m_foff m_st m_codec < <(fscheck framerange "$TMP/mx.json" m.x "$TMP/info.mx" 1 16)
truncate -s $((m_foff + m_st / 2)) "$TMP/trunc/$m_file"
rm -f "$TMP/gone/$m_file"
echo "     m.x chunk 1 frame 16: bytes [$m_off, +$m_len), $m_file @$m_foff; trunc: $m_file cut at $((m_foff + m_st / 2)); gone: $m_file removed"
for v in trunc gone; do
    mnt=$TMP/mnt_$v
    mount_ck "$TMP/$v" "$mnt" || continue
    log=$MNT_LOG
    # chunk 0 (rank0.shard) and m.y read; the missing frame fails with EIO
    if timeout 30 dd if="$mnt/m/x" iflag=skip_bytes,count_bytes bs=1M skip=0 count=1048576 status=none >"$TMP/got" 2>/dev/null &&
        cmp -s "$TMP/got" <(head -c 1048576 "$IN/r.ref") && cmp -s "$mnt/m/y" "$IN/notes.ref"; then
        ok "$v: m.x chunk 0 (first MiB) and m.y read correctly"
    else
        bad "$v: m.x chunk 0 (first MiB) or m.y do not read correctly"
    fi
    if [ "$v" = trunc ]; then
        if timeout 30 dd if="$mnt/m/x" iflag=skip_bytes,count_bytes bs=1M skip=2097152 count=524288 status=none >"$TMP/got" 2>/dev/null &&
            cmp -s "$TMP/got" <(tail -c +2097153 "$IN/r.ref" | head -c 524288); then
            ok "$v: m.x chunk 1 frames 0-7 (still in the shard) read correctly"
        else
            bad "$v: m.x chunk 1 frames 0-7 (still in the shard) do not read correctly"
        fi
    fi
    timeout 30 dd if="$mnt/m/x" iflag=skip_bytes,count_bytes bs=1M skip="$m_off" count="$m_len" status=none >/dev/null 2>"$TMP/dd.err"
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && grep -q 'Input/output error' "$TMP/dd.err"; then
        ok "$v: dd of m.x chunk 1 frame 16 (missing) fails with EIO"
    else
        bad "$v: dd of m.x chunk 1 frame 16 (missing): exit $rc, stderr '$(head -c 200 "$TMP/dd.err")', want EIO"
    fi
    fscheck errno "$mnt/m/x" $((m_off + 70000)) 100 5 --direct >"$TMP/chk" 2>&1
    report "$TMP/chk" "$v: "
    if grep -F -- "m.x" "$log" | grep -q -F "$(basename "$m_file")"; then
        ok "$v: the daemon's log names m.x and $(basename "$m_file"): $(grep -F -- "m.x" "$log" | head -1 | head -c 200)"
    else
        bad "$v: the daemon's log does not name m.x and $m_file: $(tail -c 400 "$log" | tr '\n' '~')"
    fi
    umount_ck "$mnt"
    expect_daemon_clean "$v" "$log"
done

# ------------------------------------------------------- refused sources
echo "# ---- sources that are refused"
refuse_mount "a missing path" 'no such file|does not exist|not found|missing' "$TMP/no-such-dir"
refuse_mount "a plain file" 'not a directory|is a (regular |plain )?file' "$IN/notes.txt"
mkdir -p "$TMP/empty"
refuse_mount "an empty directory" '(no|not an?|neither an?) (committed )?checkpoint|holds no|contains no|no checkpoints' "$TMP/empty"
mkdir -p "$TMP/junk/sub"
cp "$IN/notes.txt" "$TMP/junk/a.txt"
head -c 5000 /dev/urandom >"$TMP/junk/b.bin"
echo hi >"$TMP/junk/sub/readme"
refuse_mount "a directory of unrelated files" '(no|not an?|neither an?) (committed )?checkpoint|holds no|contains no|no checkpoints' "$TMP/junk"
run_ckpt pack "$TMP/unc" "x=$IN/s.npy"
expect_ok "pack a checkpoint to make uncommitted"
cp -r "$TMP/unc" "$TMP/unc-ok"     # committed: for the option checks
mv "$TMP/unc/index.db" "$TMP/unc-index.db"
mkdir -p "$TMP/unc/.pending"
echo "rank0" >"$TMP/unc/.pending/rank0.plan"
refuse_mount "an uncommitted checkpoint (data/ and .pending/, no index.db)" 'uncommitted|not committed|no index\.db|in progress|interrupted' "$TMP/unc"
# malformed option values (docs/MOUNT.md, "Options"): a usage error
refuse_mount "-o cache_size=bogus" 'cache_size' "$TMP/unc-ok" nonzero -o cache_size=bogus
refuse_mount "-o prefetch=-1" 'prefetch' "$TMP/unc-ok" nonzero -o prefetch=-1
refuse_mount "-o threads=many" 'threads' "$TMP/unc-ok" nonzero -o threads=many
# options of writing without -o rw: refused, not silently ignored
refuse_mount "-o world=2 without rw" 'world=2.*-o rw' "$TMP/unc-ok" 2 -o world=2
refuse_mount "-o codec=zstd without rw" 'codec=zstd.*-o rw' "$TMP/unc-ok" 2 -o codec=zstd
refuse_mount "-o rw,world=2,ro (ro last)" 'world=2.*-o rw' "$TMP/unc-ok" 2 -o rw,world=2,ro

# ckptfs --help says what SOURCE may be, and which options need rw
"$CKPTFS" --help >"$TMP/help.out" 2>&1
if grep -q 'PyTorch' "$TMP/help.out" && grep -q '\.safetensors' "$TMP/help.out" &&
    grep -q 'need -o rw' "$TMP/help.out"; then
    ok "ckptfs --help: SOURCE may be a PyTorch DCP or safetensors; write options need rw"
else
    bad "ckptfs --help does not say SOURCE may be PyTorch DCP or safetensors, or that write options need rw"
fi

# mounts_at MNT: how many mounts /proc/self/mountinfo has on MNT
mounts_at() {
    awk -v m="$1" '$5 == m' /proc/self/mountinfo | wc -l
}

# ---------------------------------------------------------------- writes
echo "# ---- writes fail with EROFS"
CKW=$TMP/wr
run_ckpt pack --codec raw --frame-size 64K "$CKW" "w.a=$IN/s.npy" "w.b=$IN/o.npy" "w.sub.c=$IN/s.npy" \
    "w.notes=$IN/notes.txt" "big=$IN/r.npy"
expect_ok "pack a checkpoint for the write tests"
[ "$RC" -eq 0 ] || exit 99
before=$(cd "$CKW" && find . -type f -exec sha256sum {} + | LC_ALL=C sort; find . | LC_ALL=C sort)
MNT=$TMP/mnt_wr
if mount_ck "$CKW" "$MNT"; then
    LOG=$MNT_LOG
    # A second ckptfs on the same mount point is refused, not stacked.
    timeout 20 "$CKPTFS" "$CKW" "$MNT" </dev/null >"$TMP/stack.out" 2>&1
    rc=$?
    n=$(mounts_at "$MNT")
    if [ "$n" -gt 1 ]; then
        bad "ckptfs on a mount point that is already a ckptfs mount stacked a second mount ($n mounts, exit $rc)"
        timeout 10 fusermount3 -u "$MNT"      # the top one
    else
        ok "ckptfs on a mount point that is already a ckptfs mount: still one mount"
    fi
    if [ "$rc" -eq 1 ] && grep -E -q 'already a ckptfs mount.*fusermount3 -u' "$TMP/stack.out"; then
        ok "the second ckptfs exits 1 saying why: $(head -c 200 "$TMP/stack.out")"
    else
        bad "the second ckptfs: exit $rc, message '$(head -c 300 "$TMP/stack.out" | tr '\n' '~')'"
    fi
    cmp -s "$MNT/w/a" "$IN/s.ref" && ok "the first mount still serves w/a" || bad "the first mount no longer serves w/a"
    tree_before=$(cd "$MNT" && find . | LC_ALL=C sort)
    expect_erofs "echo x > w/a" sh -c "echo x > '$MNT/w/a'"
    expect_erofs "echo x >> w/a" sh -c "echo x >> '$MNT/w/a'"
    expect_erofs "dd conv=notrunc of=w/b" dd if=/dev/zero of="$MNT/w/b" bs=8 count=1 conv=notrunc status=none
    expect_erofs "touch w/newfile" touch "$MNT/w/newfile"
    expect_erofs "touch w/a (existing: times)" touch "$MNT/w/a"
    expect_erofs "mkdir w/d" mkdir "$MNT/w/d"
    expect_erofs "rm w/a" rm -f "$MNT/w/a"
    expect_erofs "rmdir w/sub" rmdir "$MNT/w/sub"
    expect_erofs "mv w/a w/z" mv "$MNT/w/a" "$MNT/w/z"
    expect_erofs "mv w/sub w/sub2" mv "$MNT/w/sub" "$MNT/w/sub2"
    expect_erofs "ln -s x w/link" ln -s x "$MNT/w/link"
    expect_erofs "ln w/a w/hard" ln "$MNT/w/a" "$MNT/w/hard"
    expect_erofs "setfattr -n user.x -v 1 w/a" xattr_set "$MNT/w/a" user.x 1
    expect_erofs "setfattr -n user.ckpt.dtype -v f64 w/a" xattr_set "$MNT/w/a" user.ckpt.dtype f64
    expect_erofs "setfattr -x user.ckpt.dtype w/a" xattr_set "$MNT/w/a" user.ckpt.dtype
    expect_erofs "truncate -s 0 w/a" truncate -s 0 "$MNT/w/a"
    expect_erofs "truncate -s 1M w/b" truncate -s 1M "$MNT/w/b"
    expect_erofs "chmod 644 w/a" chmod 644 "$MNT/w/a"
    expect_erofs "chmod 755 w (a directory)" chmod 755 "$MNT/w"
    expect_erofs "chown 1:1 w/a" chown 1:1 "$MNT/w/a"
    expect_erofs "echo x > .ckptfs/stats" sh -c "echo x > '$MNT/.ckptfs/stats'"
    expect_erofs "echo 0 > .ckptfs/commit" sh -c "echo 0 > '$MNT/.ckptfs/commit'"
    expect_erofs "echo x > .npy/w/a.npy" sh -c "echo x > '$MNT/.npy/w/a.npy'"
    expect_erofs "python open(w/a, O_RDWR)" "$PY" -c "import os, sys; os.open(sys.argv[1], os.O_RDWR)" "$MNT/w/a"
    tree_after=$(cd "$MNT" && find . | LC_ALL=C sort)
    if [ "$tree_before" = "$tree_after" ]; then ok "after the writes: the mount lists the same files"; else bad "after the writes: the mount's listing changed: $(diff <(echo "$tree_before") <(echo "$tree_after") | head -5 | tr '\n' '~')"; fi
    nbad=0
    for pair in "w/a|s.ref" "w/b|o.ref" "w/sub/c|s.ref" "w/notes|notes.ref" "big|r.ref"; do
        cmp -s "$MNT/${pair%%|*}" "$IN/${pair#*|}" || { bad "after the writes: ${pair%%|*} changed"; nbad=$((nbad + 1)); }
    done
    [ "$nbad" -eq 0 ] && ok "after the writes: every tensor file still equals its reference"
    m=$(stat -c %a "$MNT/w/a")
    [ "$m" = 444 ] && ok "after the writes: w/a still mode 444" || bad "after the writes: w/a mode $m"
    v=$(xattr_get "$MNT/w/a" user.ckpt.dtype)
    [ "$v" = i32 ] && ok "after the writes: user.ckpt.dtype of w/a still i32" || bad "after the writes: user.ckpt.dtype of w/a is '$v'"

    # --------------------------------------- unmount while a reader reads
    echo "# ---- unmounting while a reader is mid-read"
    rm -f "$TMP/progress" "$TMP/flag"
    timeout 60 "$PY" "$HELPERS/fscheck.py" slowread "$MNT/big" "$IN/r.ref" "$TMP/progress" "$TMP/flag" --delay 0.01 \
        >"$TMP/reader.out" 2>&1 &
    rpid=$!
    for ((w = 0; w < 200; w++)); do
        n=$(cat "$TMP/progress" 2>/dev/null || echo 0)
        [ "${n:-0}" -ge 50 ] && break
        kill -0 "$rpid" 2>/dev/null || break
        sleep 0.05
    done
    echo "     reader at $(cat "$TMP/progress" 2>/dev/null) reads of 4 KiB (of $(($(stat -c %s "$IN/r.ref") / 4096)))"
    if timeout 10 fusermount3 -u "$MNT" 2>"$TMP/fu.err"; then
        bad "fusermount3 -u while a file is open: want it to fail (busy), it unmounted"
    else
        if mountpoint -q "$MNT"; then
            ok "fusermount3 -u while a file is open fails ($(head -c 100 "$TMP/fu.err")); still mounted"
        else
            bad "fusermount3 -u failed, yet the mount is gone"
        fi
    fi
    if timeout 10 fusermount3 -uz "$MNT"; then ok "fusermount3 -uz with the reader mid-read"; else bad "fusermount3 -uz failed"; fi
    if mountpoint -q "$MNT"; then bad "after fusermount3 -uz: still a mount point"; else ok "after fusermount3 -uz: no longer a mount point"; fi
    : >"$TMP/flag"
    wait "$rpid"
    rc=$?
    res=$(grep -E '^(eof|error|wrong) ' "$TMP/reader.out")
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        bad "the reader hung after the unmount (killed by timeout)"
    elif [ "$rc" -ne 0 ]; then
        bad "the reader exited with status $rc: $(head -c 300 "$TMP/reader.out")"
    else
        case $res in
            "eof $(stat -c %s "$IN/r.ref")"|error*) ok "the reader ends without hanging: '$res' (EOF after the whole tensor, or an error)" ;;
            *) bad "the reader ends with '$res': want EOF at $(stat -c %s "$IN/r.ref") or an error" ;;
        esac
    fi
    report "$TMP/reader.out" "slow reader: "
    umount_ck "$MNT" -n
    expect_daemon_clean "unmounted while reading" "$LOG"
fi
after=$(cd "$CKW" && find . -type f -exec sha256sum {} + | LC_ALL=C sort; find . | LC_ALL=C sort)
if [ "$before" = "$after" ]; then ok "the source checkpoint's files are unchanged (sha256 of every file)"; else bad "the source checkpoint's files changed"; fi
run_ckpt verify "$CKW"
expect_ok "ckpt verify of the source checkpoint"

summary
