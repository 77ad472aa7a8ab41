#!/bin/bash
# mount_write_why.sh - what a writer through a writable mount sees when
# something goes wrong, and how it starts over (docs/MOUNT.md, "Writing",
# "When a piece or a commit is refused"):
#   - a refused commit reaches Python's `with open(commit, "w")` idiom as
#     OSError EIO (the flush Python repeats gets the same EIO, never
#     EINVAL), and .ckptfs/status reads the planner's message;
#   - after `ckpt gc --min-age 0` removed that failed save under the live
#     mount, the same step is saved again through it (mkdir, writes,
#     close, commit), and reads back exact.
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
py_says() {   # py_says DESC ERE
    if grep -E -q -- "$2" "$TMP/py.out"; then ok "$1 ($(tr '\n' ' ' <"$TMP/py.out" | head -c 300))"; else bad "$1: want /$2/, got: $(tr '\n' '~' <"$TMP/py.out" | head -c 600)"; fi
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
summary
