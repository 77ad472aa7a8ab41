#!/bin/bash
# mount_write_pipe.sh - the mount's write pipeline (docs/ARCHITECTURE.md,
# "The mount's write pipeline"): a write(2) through the mount returns once
# its bytes are copied into the stream's frames, which the writer's
# encoders encode and append to the shard while the next write arrives.
#   - bytes read back equal the bytes written, for files of many frames
#     (-o frame_size=64K) written in odd-sized writes that straddle the
#     frames, in one write larger than the kernel's largest request, and
#     by several processes writing pieces of one tensor at once, with one
#     encoder thread and with several;
#   - an error the encoders meet after the write(2) returned (the shard's
#     writes failing with ENOSPC, by the fault shim of tests/crash) comes
#     back at fsync(2) and at close(2), is kept in user.ckpt.error and
#     .ckptfs/errors, and nothing is committed: the commit is refused
#     naming the tensor, and index.db never appears.
. "$(dirname "$0")/lib.sh"

IN=$TMP/in
mkdir -p "$IN"

# The data, made here: the independent reference the reads are compared
# with.  a: 1,500,007 bytes (22 frames of 64K and a short one); b: float32
# 300 x 1001; c: float32 400 x 1000, written as two pieces (rows 0-199,
# 200-399) by two processes at once; d: 3 MiB + 5 bytes in one write.
"$PY" - "$IN" <<'EOF' || exit 99
import sys, numpy as np
rng = np.random.default_rng(26)
d = sys.argv[1]
rng.integers(0, 256, 1500007, dtype=np.uint8).tofile(d + "/a.bin")
rng.standard_normal((300, 1001)).astype("<f4").tofile(d + "/b.bin")
rng.standard_normal((400, 1000)).astype("<f4").tofile(d + "/c.bin")
rng.integers(0, 256, 3 * 1048576 + 5, dtype=np.uint8).tofile(d + "/d.bin")
EOF

# is DESC GOT WANT: passes when GOT is WANT.
is() {
    [ "$2" = "$3" ] && ok "$1" || bad "$1: '$2', not '$3'"
}

# The writer: writes SRC's bytes [lo, hi) as one piece of tensor file PATH
# with the attributes given, in writes whose sizes cycle through SIZES.
cat >"$TMP/put.py" <<'EOF'
import os, sys
path, src, attrs, lo, hi, sizes = sys.argv[1:7]
lo, hi = int(lo), int(hi)
sizes = [int(s) for s in sizes.split(",")]
data = open(src, "rb").read()[lo:hi]
fd = os.open(path, os.O_WRONLY | os.O_CREAT)
os.setxattr(fd, "user.ckpt.piece", attrs.encode())
pos = k = 0
while pos < len(data):
    n = min(sizes[k % len(sizes)], len(data) - pos)
    done = os.write(fd, data[pos:pos + n])
    assert done == n, (done, n)
    pos += n
    k += 1
os.fsync(fd)
os.close(fd)
EOF

# save_and_compare THREADS: one save through a mount with -o threads=N,
# then every tensor read back through the mount and compared.
save_and_compare() {
    local R=$TMP/root$1 M=$TMP/mnt$1 S=step-1 f
    mkdir -p "$R" "$M"
    mount_ck "$R" "$M" -o rw,world=1,frame_size=64K,threads="$1" || return
    mkdir "$M/$S"
    local odd=1,4097,65535,65537,200003,13,131072 rc=0
    "$PY" "$TMP/put.py" "$M/$S/a" "$IN/a.bin" "dtype=uint8 shape=1500007" \
        0 1500007 "$odd" || rc=1
    "$PY" "$TMP/put.py" "$M/$S/b" "$IN/b.bin" "dtype=float32 shape=300,1001" \
        0 1201200 99991 || rc=1
    "$PY" "$TMP/put.py" "$M/$S/c" "$IN/c.bin" \
        "dtype=float32 shape=400,1000 offsets=0,0 sizes=200,1000" \
        0 800000 "$odd" & local p1=$!
    "$PY" "$TMP/put.py" "$M/$S/c" "$IN/c.bin" \
        "dtype=float32 shape=400,1000 offsets=200,0 sizes=200,1000" \
        800000 1600000 77777,3 & local p2=$!
    wait $p1 || rc=1
    wait $p2 || rc=1
    "$PY" "$TMP/put.py" "$M/$S/d" "$IN/d.bin" "dtype=uint8 shape=3145733" \
        0 3145733 3145733 || rc=1
    [ $rc = 0 ] && ok "threads=$1: every write, fsync and close succeeds" ||
        bad "threads=$1: a writer failed"
    echo 0 >"$M/$S/.ckptfs/commit" 2>"$TMP/commit.err" ||
        bad "threads=$1: the commit failed: $(cat "$TMP/commit.err")"
    is "threads=$1: status committed" "$(cat "$M/$S/.ckptfs/status")" committed
    for f in a b c d; do
        if cmp -s "$IN/$f.bin" "$M/$S/$f"; then
            ok "threads=$1: $f reads back as written ($(stat -c %s "$IN/$f.bin") bytes)"
        else
            bad "threads=$1: $f differs from what was written"
        fi
    done
    # The frames really are many (64K each): a is 22 whole ones and a
    # short one.
    is "threads=$1: a is stored as 22 + 1 frames" "$("$PY" -c '
import sqlite3, sys
db = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
print(db.execute("SELECT nframes FROM tensors WHERE fqn = ?", ("a",)).fetchone()[0])
' "$R/$S/index.db")" 23
    umount_ck "$M"
    expect_daemon_clean "threads=$1: the daemon" "$MNT_LOG"
}

echo "# ---- bytes in, the same bytes out"
save_and_compare 1
save_and_compare 2

echo "# ---- an error after the write returned: at fsync and close"
SHIM=$CKPT_BUILDDIR/tests/crash/.libs/ckptshim.so
if [ ! -f "$SHIM" ]; then
    echo "     (the fault shim $SHIM is not built: the error path is skipped)"
    summary
fi
PRELOAD=$SHIM
if [[ $(ldd "$CKPTFS" 2>/dev/null) == *libasan* ]]; then
    PRELOAD="$(gcc -print-file-name=libasan.so) $SHIM"
fi
R=$TMP/rootf
M=$TMP/mntf
S=step-2
mkdir -p "$R" "$M"
# Every write of the save's shards fails with ENOSPC from the first on:
# the first frame is appended by an encoder after the first write(2)
# returned (or, if the encoder is quicker, before: the write then fails).
env LD_PRELOAD="$PRELOAD" CKPT_SHIM_ROOT="$R/$S" \
    CKPT_SHIM_FAIL="write:$R/$S/data/*.shard:ENOSPC" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    "$CKPTFS" -f -o rw,world=1,frame_size=64K "$R" "$M" \
    </dev/null >"$TMP/daemonf.log" 2>&1 &
DPID=$!
_MNTS+=("$M")
_MPIDS+=("$DPID")
for _ in $(seq 200); do mountpoint -q "$M" && break; sleep 0.05; done
if ! mountpoint -q "$M"; then
    bad "the shimmed daemon did not mount: $(tail -n 5 "$TMP/daemonf.log")"
    summary
fi
mkdir "$M/$S"
# e: a write, fsync, close; f: a write, close.
"$PY" - "$M/$S" "$IN/b.bin" >"$TMP/e.out" 2>&1 <<'EOF'
import errno, os, sys
ck, src = sys.argv[1:3]
data = open(src, "rb").read()
def err(call):
    try:
        call()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
for name, calls in (("e", ("write", "fsync", "close")),
                    ("f", ("write", "close"))):
    fd = os.open(ck + "/" + name, os.O_WRONLY | os.O_CREAT)
    os.setxattr(fd, "user.ckpt.piece", b"dtype=float32 shape=300,1001")
    do = {"write": lambda: os.write(fd, data[:100003]),
          "fsync": lambda: os.fsync(fd), "close": lambda: os.close(fd)}
    for c in calls:
        print(name, c, err(do[c]))
EOF
sed 's/^/     /' "$TMP/e.out"
for want in "e fsync" "e close" "f close"; do
    grep -qx "$want ENOSPC" "$TMP/e.out" &&
        ok "$want: the shard's ENOSPC" ||
        bad "$want: $(grep "$want" "$TMP/e.out")"
done
why=$(getfattr --only-values -n user.ckpt.error "$M/$S/e" 2>/dev/null)
[[ $why == *"No space left on device"* || $why == *"disk is full"* ]] &&
    ok "user.ckpt.error says why: ${why:0:100}" || bad "user.ckpt.error: '$why'"
grep -q "No space left on device\|disk is full" "$M/$S/.ckptfs/errors" &&
    ok ".ckptfs/errors names the failure" || bad ".ckptfs/errors: $(cat "$M/$S/.ckptfs/errors")"
if echo 0 >"$M/$S/.ckptfs/commit" 2>"$TMP/commit.err"; then
    bad "the commit of a save whose piece failed succeeded"
else
    ok "the commit is refused"
fi
st=$(cat "$M/$S/.ckptfs/status")
[[ $st == failed:*"'e'"* ]] && ok "the status names the tensor: ${st:0:120}" ||
    bad "status: '$st'"
[ ! -e "$R/$S/index.db" ] && ok "nothing is committed (no index.db)" ||
    bad "index.db exists"
timeout 10 fusermount3 -u "$M" || timeout 10 fusermount3 -uz "$M"
_fs_wait_gone "$DPID" 15 || { kill -KILL "$DPID"; bad "the shimmed daemon hung"; }
wait "$DPID"
is "the shimmed daemon exits 0" "$?" 0
if grep -q "ERROR: AddressSanitizer\|runtime error:" "$TMP/daemonf.log"; then
    bad "sanitizer report: $(grep -m1 -A3 "ERROR: AddressSanitizer\|runtime error:" "$TMP/daemonf.log")"
fi
summary
