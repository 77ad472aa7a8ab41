#!/bin/bash
# mount_piece_end.sh - when a piece written through a writable mount ends
# (docs/MOUNT.md, "When a piece ends"; issue #25 items 1 and 2):
#   - a writer SIGKILLed in the middle of a piece records nothing, for every
#     form of piece (a whole tensor, a row split without user.ckpt.sizes, a
#     column split with sizes, a byte object of declared length): its
#     file's user.ckpt.error and .ckptfs/errors say why, the commit is
#     refused, and the rank written again commits exactly the data;
#   - a piece whose descriptors are all closed with fewer bytes than it
#     holds records nothing: user.ckpt.error names the bytes written and
#     expected (the kernel does not say which close is the last, so the
#     close itself succeeds), and a later write to it fails;
#   - bytes with no known extent (no user.ckpt.shape) are refused at the
#     first write;
#   - a descriptor is the piece's, not the process's: `exec 7>F; head -c
#     8192 >&7; tail -c +8193 >&7; exec 7>&-` saves the tensor whole, and so
#     does a child process given an inherited descriptor its parent closed;
#   - `setfattr ...; cat piece > file` still works.
. "$(dirname "$0")/lib.sh"

R=$TMP/root
M=$TMP/mnt
IN=$TMP/in
mkdir -p "$R" "$IN"

"$PY" - "$IN" <<'EOF' || exit 99
import sys, numpy as np
rng = np.random.default_rng(25)
rng.standard_normal((64, 32)).astype("<f4").tofile(sys.argv[1] + "/w.bin")
rng.integers(0, 256, 65536, dtype=np.uint8).tofile(sys.argv[1] + "/rng.bin")
EOF

mount_ck "$R" "$M" -o rw,world=1 || exit 1

# killed_write CKDIR NAME SRC FROM N KEY=VALUE...: a Python writer sets the
# attributes on its descriptor, writes N bytes of SRC from FROM, then is
# SIGKILLed (its descriptors closed by the kernel).
killed_write() {
    "$PY" - "$@" <<'EOF'
import os, signal, sys
ck, name, src, a, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
fd = os.open(ck + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for kv in sys.argv[6:]:
    k, v = kv.split("=", 1)
    os.setxattr(fd, "user.ckpt." + k, v.encode())
os.write(fd, open(src, "rb").read()[a:a + n])
os.kill(os.getpid(), signal.SIGKILL)
EOF
}

# whole_write CKDIR NAME SRC FROM TO KEY=VALUE...: writes bytes [FROM, TO)
# of SRC as one piece; prints ok or the close's errno.
whole_write() {
    "$PY" - "$@" <<'EOF'
import errno, os, sys
ck, name, src, a, b = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
fd = os.open(ck + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for kv in sys.argv[6:]:
    k, v = kv.split("=", 1)
    os.setxattr(fd, "user.ckpt." + k, v.encode())
try:
    os.write(fd, open(src, "rb").read()[a:b])
except OSError as e:
    print("write", errno.errorcode[e.errno]); sys.exit(0)
try:
    os.close(fd)
except OSError as e:
    print("close", errno.errorcode[e.errno]); sys.exit(0)
print("ok")
EOF
}

# error_of FILE: its user.ckpt.error, once the kernel's release of the
# descriptors (asynchronous) reached the daemon (polled up to 10 s).
error_of() {
    local i e=
    for ((i = 0; i < 100; i++)); do
        e=$(xattr_get "$1" user.ckpt.error) && [ -n "$e" ] && break
        sleep 0.1
    done
    echo "$e"
}

commit_says() {    # DESC CKDIR WANT(committed|refused)
    local st
    echo 0 >"$2/.ckptfs/commit" 2>/dev/null
    st=$(cat "$2/.ckptfs/status")
    case "$st" in
        "$3"*) ok "$1: status ${st:0:160}" ;;
        *) bad "$1: want $3, status: $st" ;;
    esac
}

# The four forms of a piece; for each, a killed writer, then the rank again.
# w is 64x32 float32 (128 bytes a row); rng 65536 bytes.
form=0
for spec in \
    "whole|w|w.bin|0|8192|dtype=float32 shape=64,32" \
    "rows|w|w.bin|4096|8192|dtype=float32 shape=64,32 offsets=32,0" \
    "cols|w|w.bin||-|dtype=float32 shape=64,32 offsets=0,16 sizes=64,16" \
    "bytes|rng_state|rng.bin|0|65536|shape=65536"; do
    IFS='|' read -r kind name src from to attrs <<<"$spec"
    form=$((form + 1))
    S=step-00000$form
    echo "# ---- a killed writer: $kind"
    mkdir "$M/$S"
    if [ "$kind" = cols ]; then
        # columns 16..31 of every row: a piece of its own bytes
        "$PY" -c 'import sys, numpy as np; a = np.fromfile(sys.argv[1], "<f4").reshape(64, 32); a[:, 16:].tofile(sys.argv[2]); a[:, :16].tofile(sys.argv[3])' \
            "$IN/w.bin" "$IN/cols.bin" "$IN/cols0.bin"
        src=cols.bin from=0 to=4096
    fi
    # shellcheck disable=SC2086
    killed_write "$M/$S" "$name" "$IN/$src" "$from" $(((to - from) / 2)) $attrs
    err=$(error_of "$M/$S/$name")
    case "$err" in
        *closed*) ok "$kind: user.ckpt.error says why ($err)" ;;
        *) bad "$kind: user.ckpt.error: '$err'" ;;
    esac
    grep -q "$name" "$M/$S/.ckptfs/errors" && ok "$kind: .ckptfs/errors names $name" ||
        bad "$kind: .ckptfs/errors: $(tr '\n' '~' <"$M/$S/.ckptfs/errors")"
    if [ "$kind" = rows ]; then
        whole_write "$M/$S" w "$IN/w.bin" 0 4096 dtype=float32 shape=64,32 sizes=32,32 >"$TMP/py.out"
        py_says "rows: the first half with sizes" '^ok$'
    fi
    if [ "$kind" = cols ]; then
        whole_write "$M/$S" w "$IN/cols0.bin" 0 4096 dtype=float32 shape=64,32 sizes=64,16 >"$TMP/py.out"
        py_says "cols: columns 0..15" '^ok$'
    fi
    commit_says "$kind: the killed piece is not committed" "$M/$S" "failed"
    # shellcheck disable=SC2086
    whole_write "$M/$S" "$name" "$IN/$src" "$from" "$to" $attrs >"$TMP/py.out"
    py_says "$kind: the rank writes its piece again" '^ok$'
    commit_says "$kind: the second attempt commits" "$M/$S" "committed"
    if [ "$kind" = bytes ]; then
        cmp -s "$IN/rng.bin" "$M/$S/rng_state" && ok "bytes: reads back exact" || bad "bytes: differs"
    else
        cmp -s "$IN/w.bin" "$M/$S/w" && ok "$kind: w reads back exact" || bad "$kind: w differs"
    fi
done

echo "# ---- a close with fewer bytes than the piece holds"
S=step-000011
mkdir "$M/$S"
whole_write "$M/$S" w "$IN/w.bin" 0 5000 dtype=float32 shape=64,32 >"$TMP/py.out"
py_says "a short piece's writer closes" '^ok$'
err=$(error_of "$M/$S/w")
case "$err" in
    *5000*8192*) ok "user.ckpt.error names the bytes ($err)" ;;
    *) bad "user.ckpt.error: '$err'" ;;
esac
whole_write "$M/$S" note "$IN/rng.bin" 0 100 >"$TMP/py.out"
py_says "bytes without a declared length are refused at the first write" '^write EINVAL$'
err=$(error_of "$M/$S/note")
case "$err" in
    *user.ckpt.shape*) ok "note's user.ckpt.error says to set user.ckpt.shape" ;;
    *) bad "note's user.ckpt.error: $err" ;;
esac

echo "# ---- a descriptor is the piece's"
S=step-000012
mkdir "$M/$S"
touch "$M/$S/w"
xattr_set "$M/$S/w" user.ckpt.dtype float32
xattr_set "$M/$S/w" user.ckpt.shape 64,32
(
    exec 7>"$M/$S/w"
    head -c 4000 "$IN/w.bin" >&7 || exit 1
    tail -c +4001 "$IN/w.bin" >&7 || exit 1
    exec 7>&-
) 2>"$TMP/sh.err" && ok "head and tail write through one descriptor" ||
    bad "head/tail: $(tr '\n' '~' <"$TMP/sh.err")"
commit_says "the shared descriptor's piece commits" "$M/$S" "committed"
cmp -s "$IN/w.bin" "$M/$S/w" && ok "w reads back whole" || bad "w differs"

S=step-000013
mkdir "$M/$S"
"$PY" - "$M/$S" "$IN/rng.bin" >"$TMP/py.out" 2>&1 <<'EOF'
import os, subprocess, sys
ck, src = sys.argv[1], sys.argv[2]
fd = os.open(ck + "/rng_state", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.setxattr(fd, "user.ckpt.shape", b"65536")
os.write(fd, open(src, "rb").read()[:1000])
p = subprocess.Popen(["tail", "-c", "+1001", src], stdout=fd)
os.close(fd)          # the parent's close while its child still writes
print("child", p.wait())
EOF
py_says "a child writes the rest through an inherited descriptor" '^child 0$'
commit_says "the inherited descriptor's piece commits" "$M/$S" "committed"
cmp -s "$IN/rng.bin" "$M/$S/rng_state" && ok "rng_state reads back whole" || bad "rng_state differs"

echo "# ---- a write after the piece's last byte"
S=step-000015
mkdir "$M/$S"
"$PY" - "$M/$S" "$IN/w.bin" >"$TMP/py.out" 2>&1 <<'EOF'
import errno, os, sys
ck, src = sys.argv[1], sys.argv[2]
fd = os.open(ck + "/w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
os.setxattr(fd, "user.ckpt.dtype", b"float32")
os.setxattr(fd, "user.ckpt.shape", b"64,32")
os.write(fd, open(src, "rb").read())
try:
    os.write(fd, b"more")
    print("extra write ok")
except OSError as e:
    print("extra write", errno.errorcode[e.errno])
os.close(fd)
print("closed")
EOF
py_says "a write past the recorded piece's end fails with EFBIG" '^extra write EFBIG$'
commit_says "the piece recorded before it commits" "$M/$S" "committed"
cmp -s "$IN/w.bin" "$M/$S/w" && ok "w reads back" || bad "w differs"

echo "# ---- setfattr; cat piece > file"
S=step-000014
mkdir "$M/$S"
touch "$M/$S/w"
xattr_set "$M/$S/w" user.ckpt.dtype float32
xattr_set "$M/$S/w" user.ckpt.shape 64,32
cat "$IN/w.bin" >"$M/$S/w" && ok "cat into the file" || bad "cat failed"
commit_says "cat's piece commits" "$M/$S" "committed"
cmp -s "$IN/w.bin" "$M/$S/w" && ok "w reads back" || bad "w differs"

umount_ck "$M"
expect_daemon_clean "the daemon" "$MNT_LOG"
summary
