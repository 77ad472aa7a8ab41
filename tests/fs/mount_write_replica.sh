#!/bin/bash
# mount_write_replica.sh - replicas written through a writable mount
# (docs/MOUNT.md, "Replicated pieces"): a rank that sets
# user.ckpt.replica=1 and the piece's full region and closes the file
# without writing records a reference, no bytes; the commit takes it when
# another writer wrote a piece of that fqn, dtype, shape, offsets and
# sizes, and refuses it (EIO, .ckptfs/status and .ckptfs/errors naming
# the tensor, the region and the rank) when none did.
. "$(dirname "$0")/lib.sh"

R=$TMP/root
M=$TMP/mnt
IN=$TMP/in
mkdir -p "$R" "$IN"

"$PY" - "$IN" <<'EOF2' || exit 99
import sys, numpy as np
rng = np.random.default_rng(19)
rng.standard_normal((8, 16)).astype("<f4").tofile(sys.argv[1] + "/w.bin")
EOF2

# replica CKPT TENSOR OFFSETS SIZES [REPLICA]: rank 1 declares its piece of
# TENSOR (f32, shape 8,16) a replica and closes the file without writing.
replica() {
    RANK=1 "$PY" - "$@" >"$TMP/py.out" 2>&1 <<'PY'
import os, sys, errno
ck, name, offs, sizes = sys.argv[1:5]
rep = sys.argv[5] if len(sys.argv) > 5 else "1"
fd = os.open(ck + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
try:
    os.setxattr(fd, "user.ckpt.dtype", b"float32")
    os.setxattr(fd, "user.ckpt.shape", b"8,16")
    if offs != "-":
        os.setxattr(fd, "user.ckpt.offsets", offs.encode())
    if sizes != "-":
        os.setxattr(fd, "user.ckpt.sizes", sizes.encode())
    os.setxattr(fd, "user.ckpt.replica", rep.encode())
    print("replica attr:", os.getxattr(fd, "user.ckpt.replica").decode())
except OSError as e:
    print("setxattr", errno.errorcode[e.errno])
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print("close", errno.errorcode[e.errno])
    print("error attr:", os.getxattr(ck + "/" + name, "user.ckpt.error").decode())
PY
}
# commit_refused S ERE: the commit of S fails with EIO and status, errors
# say why.
commit_refused() {
    "$PY" "$HELPERS/wput.py" commit "$M/$1" 0 1 >"$TMP/put.out" 2>&1
    grep -qx "ERR commit EIO" "$TMP/put.out" && ok "$1: the commit is refused (EIO)" || bad "$1 commit: $(cat "$TMP/put.out")"
    grep -E -q -- "^failed: $2" "$M/$1/.ckptfs/status" &&
        ok "$1: status says why ($(head -c 400 "$M/$1/.ckptfs/status"))" || bad "$1 status: $(cat "$M/$1/.ckptfs/status")"
    grep -E -q -- "^commit refused: $2" "$M/$1/.ckptfs/errors" &&
        ok "$1: errors lists it" || bad "$1 errors: $(tr '\n' '~' <"$M/$1/.ckptfs/errors")"
    check "$1: nothing committed" test ! -e "$R/$1/index.db"
}

mount_ck "$R" "$M" -o rw,world=2 || exit 1

echo "# ---- rank 1 refers to the replica rank 0 wrote"
S=step-000001
mkdir "$M/$S"
RANK=0 "$PY" "$HELPERS/wput.py" put "$M/$S/w" "$IN/w.bin" --dtype f32 --shape 8,16 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "rank 0 writes w" || bad "w: $(cat "$TMP/put.out")"
replica "$M/$S" w 0,0 8,16
py_says "user.ckpt.replica reads back" '^replica attr: 1$'
py_says "rank 1 closes its reference without writing" '^close ok$'
"$PY" "$HELPERS/wput.py" commit "$M/$S" 0 1 >"$TMP/put.out" 2>&1
grep -qx ok "$TMP/put.out" && ok "the save commits" || bad "commit: $(cat "$TMP/put.out")"
same_bytes "w reads back through the mount as rank 0 wrote it" "$IN/w.bin" "$M/$S/w"
run_ckpt cat "$R/$S" w
same_bytes "and through ckpt cat" "$IN/w.bin" "$OUT"
n0=$(stat -c %s "$R/$S/data/rank0.shard" 2>/dev/null || echo missing)
n1=$(stat -c %s "$R/$S/data/rank1.shard" 2>/dev/null || echo 0)
[ "$n0" != missing ] && [ "$n0" -gt 0 ] && [ "$n1" = 0 ] &&
    ok "rank 1's shard holds no bytes (rank0.shard: $n0 bytes)" || bad "shards: rank0 $n0, rank1 $n1"
"$PY" - "$R/$S/index.db" >"$TMP/py.out" 2>&1 <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
paths = [r[0] for r in db.execute("SELECT path FROM files")]
print("files:", " ".join(paths))
print("rank1 in index:", any("rank1" in p for p in paths))
PY
py_says "the index names no data of rank 1" '^rank1 in index: False$'

echo "# ---- a bad value, a region without sizes"
S=step-000002
mkdir "$M/$S"
replica "$M/$S" w 0,0 8,16 2
py_says "user.ckpt.replica=2 fails setxattr with EINVAL" '^setxattr EINVAL$'
replica "$M/$S" v 0,0 - 1
# without sizes, the region runs to the shape's end (docs/MOUNT.md)
py_says "a reference without sizes is the rest of the shape" '^close ok$'

# refused S WRITTEN OFFS SIZES ERE: rank 0 writes tensor WRITTEN whole,
# rank 1 declares a replica of w's region OFFS SIZES; the commit refuses.
refused() {
    mkdir "$M/$1"
    RANK=0 "$PY" "$HELPERS/wput.py" put "$M/$1/$2" "$IN/w.bin" --dtype f32 --shape 8,16 >"$TMP/put.out" 2>&1
    grep -qx ok "$TMP/put.out" && ok "$1: rank 0 writes $2" || bad "$1 $2: $(cat "$TMP/put.out")"
    replica "$M/$1" w "$3" "$4"
    py_says "$1: rank 1 declares a replica of w ($3 + $4)" '^close ok$'
    commit_refused "$1" "$5"
}

echo "# ---- refused: a reference that no writer wrote"
refused step-000003 a 0,0 8,16 "tensor 'w': writer rank1 declared its piece \(offsets \[0,0\], sizes \[8,16\], dtype f32, shape \[8,16\]\) a replica .* but no writer wrote a piece of it"

echo "# ---- refused: a reference whose region differs from the written piece"
refused step-000004 w 4,0 4,16 "tensor 'w': writer rank1 declared its piece \(offsets \[4,0\], sizes \[4,16\], dtype f32, shape \[8,16\]\) a replica .* none of the 1 piece written of it has that region and dtype \(e.g. writer rank0's: offsets \[0,0\], sizes \[8,16\]"

umount_ck "$M"
expect_daemon_clean "the mount" "$MNT_LOG"
summary
