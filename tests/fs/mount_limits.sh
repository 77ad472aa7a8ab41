#!/bin/bash
# mount_limits.sh - the bounds a writable mount keeps per user and per save
# (docs/MOUNT.md, "Limits"), tried as issue 22's denial of service was:
#   - pieces open for writing: user nobody opens one more than
#     -o max_open_pieces allows and gets EMFILE, while root still saves;
#     once nobody closed them, it may open as many again;
#   - saves in progress: one more mkdir than -o max_saves is EDQUOT for
#     nobody, root still starts one;
#   - metadata: one more user.ckpt.meta.* key than -o max_meta_keys, or a
#     value past -o max_meta_bytes, is ENOSPC;
#   - threads: the daemon's thread count (/proc/PID/status) does not grow
#     with the saves started (one heartbeat for all their leases);
#   - descriptors: once 150 pieces held open at once are closed, the
#     daemon keeps at most 16 idle writers' descriptors (of 3 or 4 each);
#   - a bad value of each option is refused before mounting.
. "$(dirname "$0")/lib.sh"

need_nobody

R=$TMP/shared
M=$TMP/mnt
mkdir -p "$R"
chmod 1777 "$R"
"$PY" -c 'import numpy as np, sys; np.arange(64, dtype="<f4").tofile(sys.argv[1])' "$TMP/w.raw" || exit 99
chmod 644 "$TMP/w.raw"

# hold DIR N: opens DIR/f0..f(N-1) for writing at once, writes each one
# whole piece (64 floats, attributes set), prints per file "ok" or the
# errno name of the open, then closes them all.
cat >"$TMP/hold.py" <<'EOF'
import errno, os, sys
d, n, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = open(src, "rb").read()
fds = []
for i in range(n):
    p = "%s/f%d" % (d, i)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        print("f%d %s" % (i, errno.errorcode.get(e.errno, e.errno)))
        continue
    os.setxattr(fd, "user.ckpt.dtype", b"f32")
    os.setxattr(fd, "user.ckpt.shape", b"64")
    os.write(fd, data)
    fds.append(fd)
    print("f%d ok" % i)
for fd in fds:
    os.close(fd)
EOF
chmod 644 "$TMP/hold.py"

echo "# ---- options: bad values are refused"
for o in max_open_pieces=0 max_saves=x max_meta_keys=-1 max_meta_bytes=0; do
    refuse_mount "-o $o" "bad option" "$R" 2 -o "rw,world=1,$o"
done

echo "# ---- small caps: 3 open pieces, 2 saves, 4 metadata keys, 2K of metadata"
if mount_ck "$R" "$M" -o rw,world=1,allow_other,max_open_pieces=3,max_saves=2,max_meta_keys=4,max_meta_bytes=2K; then
    check "nobody starts a save" as_nobody mkdir "$M/nb-1"
    as_nobody /usr/bin/python3 "$TMP/hold.py" "$M/nb-1" 4 "$TMP/w.raw" >"$TMP/hold.out" 2>&1
    if [ "$(grep -c ' ok$' "$TMP/hold.out")" = 3 ] && grep -q '^f3 EMFILE$' "$TMP/hold.out"; then
        ok "the 4th piece nobody holds open is EMFILE ($(tr '\n' ' ' <"$TMP/hold.out"))"
    else
        bad "4 pieces held open by nobody with max_open_pieces=3: $(tr '\n' ' ' <"$TMP/hold.out")"
    fi
    as_nobody /usr/bin/python3 "$TMP/hold.py" "$M/nb-1" 3 "$TMP/w.raw" >"$TMP/hold.out" 2>&1
    if [ "$(grep -c ' ok$' "$TMP/hold.out")" = 3 ]; then
        ok "once they are closed, nobody opens 3 again"
    else
        bad "after closing, nobody cannot open 3 pieces: $(tr '\n' ' ' <"$TMP/hold.out")"
    fi
    check "nobody starts a second save" as_nobody mkdir "$M/nb-2"
    if as_nobody mkdir "$M/nb-3" 2>"$TMP/err"; then
        bad "a third save in progress was let through (max_saves=2)"
    elif grep -q 'quota' "$TMP/err"; then
        ok "nobody's third save: $(cat "$TMP/err")"
    else
        bad "nobody's third save failed, not with EDQUOT: $(cat "$TMP/err")"
    fi
    check "root still starts a save" mkdir "$M/root-1"
    /usr/bin/python3 "$TMP/hold.py" "$M/root-1" 1 "$TMP/w.raw" >"$TMP/hold.out" 2>&1
    grep -q '^f0 ok$' "$TMP/hold.out" && ok "root writes a piece" || bad "root cannot write: $(cat "$TMP/hold.out")"
    check "root commits" sh -c "echo 0 > '$M/root-1/.ckptfs/commit'"
    # metadata: 4 keys, then ENOSPC; 2K in all
    for k in 1 2 3 4; do
        check "key k$k" setfattr -n "user.ckpt.meta.k$k" -v "v$k" "$M/nb-1"
    done
    if setfattr -n user.ckpt.meta.k5 -v v5 "$M/nb-1" 2>"$TMP/err"; then
        bad "a 5th metadata key was accepted (max_meta_keys=4)"
    elif grep -q 'No space left' "$TMP/err"; then
        ok "the 5th metadata key: ENOSPC"
    else
        bad "the 5th key failed, not with ENOSPC: $(cat "$TMP/err")"
    fi
    big=$(printf 'x%.0s' $(seq 1 900))
    check "a 900-byte value" setfattr -n user.ckpt.meta.a -v "$big" "$M/nb-2"
    check "a second one" setfattr -n user.ckpt.meta.b -v "$big" "$M/nb-2"
    if setfattr -n user.ckpt.meta.c -v "$big" "$M/nb-2" 2>"$TMP/err"; then
        bad "metadata past max_meta_bytes=2K was accepted"
    elif grep -q 'No space left' "$TMP/err"; then
        ok "a third 900-byte value (past 2K): ENOSPC"
    else
        bad "the third value failed, not with ENOSPC: $(cat "$TMP/err")"
    fi
    umount_ck "$M"
    expect_daemon_clean "the mount with small caps" "$MNT_LOG"
fi

echo "# ---- threads: one heartbeat for every save's lease"
if mount_ck "$R" "$M" -o rw,world=1; then
    threads() { awk '/^Threads:/ {print $2}' "/proc/$MNT_PID/status"; }
    check "a first save" mkdir "$M/t-0"
    t0=$(threads)
    for i in $(seq 1 60); do mkdir "$M/t-$i" || break; done
    t1=$(threads)
    if [ -n "$t0" ] && [ -n "$t1" ] && [ "$t1" -le $((t0 + 2)) ]; then
        ok "60 more saves in progress: the daemon's threads $t0 -> $t1"
    else
        bad "60 more saves made the daemon's threads grow: $t0 -> $t1"
    fi
    fds() { ls "/proc/$MNT_PID/fd" | wc -l; }
    f0=$(fds)
    /usr/bin/python3 "$TMP/hold.py" "$M/t-0" 150 "$TMP/w.raw" >"$TMP/hold.out" 2>&1
    f1=$(fds)
    if [ "$(grep -c ' ok$' "$TMP/hold.out")" = 150 ] && [ "$f1" -le $((f0 + 16 * 4)) ]; then
        ok "150 pieces held open, then closed: the daemon's descriptors $f0 -> $f1"
    else
        bad "150 pieces held open, then closed: descriptors $f0 -> $f1 (at most +64), $(grep -vc ' ok$' "$TMP/hold.out") opens failed"
    fi
    umount_ck "$M"
    expect_daemon_clean "the mount of 61 saves" "$MNT_LOG"
fi

summary
