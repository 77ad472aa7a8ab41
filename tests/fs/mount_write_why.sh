#!/bin/bash
# mount_write_why.sh - what a writer through a writable mount sees when
# something goes wrong, and how it starts over (docs/MOUNT.md, "Writing",
# "When a piece or a commit is refused"):
#   - a refused commit reaches Python's `with open(commit, "w")` idiom as
#     OSError EIO (the flush Python repeats gets the same EIO, never
#     EINVAL), and .ckptfs/status reads the planner's message;
#   - after `ckpt gc --min-age 0` removed that failed save under the live
#     mount, the same step is saved again through it (mkdir, writes,
#     close, commit), and reads back exact;
#   - a refused attribute or piece: its reason in user.ckpt.error, every
#     refusal (file, writer, reason) and the planner's message in
#     .ckptfs/errors, the daemon's messages in -o log=FILE of a daemon in
#     the background;
#   - writer names: rank<R>.shard for a rank declared with user.ckpt.rank
#     or found in the writer's environment (RANK), rank<R>-2 for a second
#     mount writing the same rank; the planner's messages name the ranks;
#   - many readers of .ckptfs/status and errors at once: every read
#     succeeds, and the (sanitizer build's) daemon stays clean.
. "$(dirname "$0")/lib.sh"

R=$TMP/root
M=$TMP/mnt
IN=$TMP/in
mkdir -p "$R" "$IN"

"$PY" - "$IN" <<'EOF' || exit 99
import sys, numpy as np
rng = np.random.default_rng(18)
rng.standard_normal((8, 16)).astype("<f4").tofile(sys.argv[1] + "/w.bin")
EOF

# pywrite SCRIPT...: runs Python code (argv: $M) and keeps its output.
pyrun() {
    "$PY" - "$@" >"$TMP/py.out" 2>&1
}

mount_ck "$R" "$M" -o rw,world=1 || exit 1
S=step-000004

echo "# ---- a refused commit through Python's with-open idiom"
mkdir "$M/$S"
# half of w's rows: the planner refuses the hole
pyrun "$M/$S" "$IN/w.bin" <<'EOF'
import os, sys, errno
ck, src = sys.argv[1], sys.argv[2]
fd = os.open(ck + "/w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.setxattr(fd, "user.ckpt.dtype", b"float32")
os.setxattr(fd, "user.ckpt.shape", b"8,16")
os.setxattr(fd, "user.ckpt.sizes", b"4,16")
os.write(fd, open(src, "rb").read()[:4 * 16 * 4])
os.close(fd)
try:
    with open(ck + "/.ckptfs/commit", "w") as f:
        f.write("0")
    print("committed")
except OSError as e:
    print("OSError", errno.errorcode[e.errno])
status = open(ck + "/.ckptfs/status").read()
print("status:", status.strip())
print("idiom:", "ok" if status.startswith("committed") else "refused")
EOF
py_says "with open(commit) raises OSError EIO on a refusal" '^OSError EIO$'
py_says "status reads the planner's message" "^status: failed: tensor 'w': pieces cover 64 of 128 elements"
py_says "write-then-read-status idiom sees the refusal" '^idiom: refused$'
if grep -q 'Invalid argument' "$MNT_LOG"; then bad "the repeated commit write got EINVAL: $(grep 'Invalid' "$MNT_LOG" | head -2)"; else ok "no EINVAL for Python's repeated flush"; fi
n=$(grep -c "pieces cover 64 of 128" "$MNT_LOG")
[ "$n" -ge 2 ] && ok "the repeated write ran the commit again, same refusal ($n times)" || bad "the refusal was logged $n times"

echo "# ---- gc removes the failed save under the live mount; the step is saved again"
run_ckpt gc --min-age 0 "$R"
expect_ok "ckpt gc --min-age 0"
grep -q "removed $S" "$OUT" && ok "gc removed $S ($(head -c 200 "$OUT" | tr '\n' ' '))" || bad "gc did not remove $S: $(tr '\n' ' ' <"$OUT")"
check "$S is gone from the disk" test ! -e "$R/$S"
mkdir "$M/$S" 2>"$TMP/mk.err" && ok "mkdir $S again through the same mount" || bad "mkdir $S after gc: $(cat "$TMP/mk.err")"
pyrun "$M/$S" "$IN/w.bin" <<'EOF'
import os, sys
ck, src = sys.argv[1], sys.argv[2]
fd = os.open(ck + "/w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.setxattr(fd, "user.ckpt.dtype", b"float32")
os.setxattr(fd, "user.ckpt.shape", b"8,16")
os.write(fd, open(src, "rb").read())
os.close(fd)
with open(ck + "/.ckptfs/commit", "w") as f:
    f.write("0")
print("status:", open(ck + "/.ckptfs/status").read().strip())
EOF
py_says "write, close and commit of the same step succeed" '^status: committed$'
run_ckpt cat "$R/$S" w
same_bytes "the re-saved tensor reads back exact" "$IN/w.bin" "$OUT"
cmp -s "$M/$S/w" "$IN/w.bin" && ok "and through the mount" || bad "$M/$S/w differs from what was written"

umount_ck "$M"
expect_daemon_clean "the writable mount" "$MNT_LOG"

echo "# ---- reasons a writer can read; a daemon in the background with -o log=FILE"
M2=$TMP/mnt2
LOG=$TMP/daemon-file.log
mkdir -p "$M2"
_MNTS+=("$M2"); _MPIDS+=("")      # unmounted on exit whatever happens
if "$CKPTFS" -o rw,world=2,log="$LOG" "$R" "$M2" </dev/null >"$TMP/bg.out" 2>&1 && mountpoint -q "$M2"; then
    ok "a writable mount in the background with -o log=FILE"
else
    bad "background mount: $(cat "$TMP/bg.out")"; summary; exit 1
fi
S=step-000005
mkdir "$M2/$S"
# rank 0 declares its rank on the save; rank 1 has RANK=1 in its environment
pyrun "$M2/$S" "$IN/w.bin" <<'PY'
import os, sys, errno
ck, src = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
os.setxattr(ck, "user.ckpt.rank", b"0")
print("rank attr:", os.getxattr(ck, "user.ckpt.rank").decode())
fd = os.open(ck + "/w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
try:
    os.setxattr(fd, "user.ckpt.dtype", b"float33")
except OSError as e:
    print("setxattr", errno.errorcode[e.errno])
print("error attr 1:", os.getxattr(ck + "/w", "user.ckpt.error").decode())
os.setxattr(fd, "user.ckpt.dtype", b"float32")
os.setxattr(fd, "user.ckpt.shape", b"8,16")
os.setxattr(fd, "user.ckpt.sizes", b"4,16")
os.write(fd, data[:4 * 64])
os.close(fd)
print("rank 0 ok")
PY
py_says "user.ckpt.rank reads back" '^rank attr: 0$'
py_says "a bad dtype fails setxattr with EINVAL" '^setxattr EINVAL$'
py_says "user.ckpt.error says why, listing the valid names" "^error attr 1: user.ckpt.dtype: unknown dtype 'float33' \(valid: f64, f32"
py_says "rank 0 writes its rows" '^rank 0 ok$'
RANK=1 "$PY" - "$M2/$S" <<'PY' >"$TMP/py.out" 2>&1
import os, sys, errno
ck = sys.argv[1]
fd = os.open(ck + "/w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.setxattr(fd, "user.ckpt.dtype", b"float32")
os.setxattr(fd, "user.ckpt.shape", b"8,16")
os.setxattr(fd, "user.ckpt.offsets", b"4,0")
try:
    os.write(fd, b"x" * 300)
except OSError as e:
    print("write", errno.errorcode[e.errno])
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print("close", errno.errorcode[e.errno])
print("error attr 2:", os.getxattr(ck + "/w", "user.ckpt.error").decode())
print("listed:", "user.ckpt.error" in os.listxattr(ck + "/w"))
PY
py_says "300 bytes into a piece of 256: the write fails with EFBIG" '^write EFBIG$'
py_says "and so does the close" '^close EFBIG$'
py_says "user.ckpt.error says why" "^error attr 2: tensor 'w': the piece holds 256 bytes; writing 300 at 0 goes past its end"
py_says "listxattr lists user.ckpt.error" '^listed: True$'
cat "$M2/$S/.ckptfs/errors" >"$TMP/errors" 2>&1
grep -q "^w: user.ckpt.dtype: unknown dtype 'float33'.*(rank 0, process [0-9]*)$" "$TMP/errors" &&
    ok "errors lists the refused attribute, by rank 0" || bad "errors: $(tr '\n' '~' <"$TMP/errors")"
grep -q "^w: tensor 'w': the piece holds 256 bytes; writing 300 at 0 goes past its end.*(writer rank1)$" "$TMP/errors" &&
    ok "errors lists the refused piece, by writer rank1" || bad "errors: $(tr '\n' '~' <"$TMP/errors")"
"$PY" "$HELPERS/wput.py" commit "$M2/$S" 0 >"$TMP/put.out" 2>&1
"$PY" "$HELPERS/wput.py" commit "$M2/$S" 1 >"$TMP/put.out" 2>&1
grep -qx "ERR commit EIO" "$TMP/put.out" && ok "the commit is refused (EIO)" || bad "commit: $(cat "$TMP/put.out")"
cat "$M2/$S/.ckptfs/errors" >"$TMP/errors" 2>&1
grep -q "^commit refused: tensor 'w': pieces cover 64 of 128 elements.*(pieces from writers rank0); a piece of it failed: .*writing 300.*(writer rank1)$" "$TMP/errors" &&
    ok "errors ends with the planner's message, naming the ranks" || bad "errors after the commit: $(tr '\n' '~' <"$TMP/errors")"
for f in rank0.shard rank1.shard; do
    check "a writer's shard is data/$f" test -f "$R/$S/data/$f"
done
grep -q "unknown dtype 'float33'" "$LOG" && grep -q "writing 300 at 0 goes past its end" "$LOG" &&
    ok "the background daemon's messages are in the log file" || bad "log file: $(tail -c 500 "$LOG" 2>&1 | tr '\n' '~')"

echo "# ---- two mounts writing the same rank: unique shard names"
S=step-000006
mkdir "$M2/$S"
mount_ck "$R" "$M" -o rw,world=2 || exit 1
RANK=0 "$PY" "$HELPERS/wput.py" put "$M2/$S/a" "$IN/w.bin" --dtype f32 --shape 8,16 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "rank 0 writes a through mount 1" || bad "a: $(cat "$TMP/put.out")"
RANK=0 "$PY" "$HELPERS/wput.py" put "$M/$S/b" "$IN/w.bin" --dtype f32 --shape 8,16 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "rank 0 writes b through mount 2" || bad "b: $(cat "$TMP/put.out")"
names=$(cd "$R/$S/data" && ls | tr '\n' ' ')
[ "$names" = "rank0-2.shard rank0.shard " ] && ok "shards: $names" || bad "shards of one rank on two mounts: '$names'"
"$PY" "$HELPERS/wput.py" commit "$M2/$S" 0 1 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "the save commits" || bad "commit: $(cat "$TMP/put.out")"
run_ckpt cat "$R/$S" b
same_bytes "b reads back exact" "$IN/w.bin" "$OUT"
umount_ck "$M"
expect_daemon_clean "the second mount" "$MNT_LOG"
fusermount3 -u "$M2" && ok "unmount the background daemon" || bad "fusermount3 -u $M2"

echo "# ---- many readers of a save's status and errors at once"
# Each read is answered from bytes its handle owns, and the kernel may
# release the handle (on another daemon thread) before the reply's writev
# returns: the sanitizer build's daemon log catches a reply read from
# freed memory (it did, once in a few hundred reads, before the fix).
S=step-000007
mount_ck "$R" "$M" -o rw,world=2 || exit 1
mkdir "$M/$S"
RANK=0 "$PY" "$HELPERS/wput.py" put "$M/$S/a" "$IN/w.bin" --dtype f32 --shape 8,16 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "rank 0 writes a" || bad "a: $(cat "$TMP/put.out")"
want=$(cat "$M/$S/.ckptfs/status")
pids=()
for p in 1 2 3 4; do
    (for i in $(seq 300); do
        cat "$M/$S/.ckptfs/status" >/dev/null || exit 1
        cat "$M/$S/.ckptfs/errors" >/dev/null || exit 1
    done) &
    pids+=($!)
done
fails=0
for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
[ $fails = 0 ] && ok "4 x 300 reads of status and errors all succeed" ||
    bad "$fails of 4 readers saw a read fail"
st=$(cat "$M/$S/.ckptfs/status")
[ "$st" = "$want" ] && [ "$st" = "pending 0/2" ] &&
    ok "status reads '$st' before and after" || bad "status: '$want', then '$st'"
umount_ck "$M"
expect_daemon_clean "the mount read by many readers" "$MNT_LOG"
summary
