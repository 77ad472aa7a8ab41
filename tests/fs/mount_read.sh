#!/bin/bash
# mount_read.sh - read checkpoints through a real ckptfs mount (docs/MOUNT.md)
# and compare everything with NumPy references.
#
# Checkpoints are made with `ckpt pack` over grids 1, 2x3 and 3x1x2, codecs
# raw and zstd, frame sizes 4096, 65536 and the default, and mounted with
# different -o cache_size/prefetch/threads.  The data set is gen_npy.py's
# (every dtype, bf16/fp8 raw files, 0-d scalars, empty tensors, a byte
# object) plus tensors that are also modules ('a.b' + 'a.b.c') and names
# that need escaping ('%', space, UTF-8).  For each mount:
#   - .ckptfs/stats before any read;
#   - 200 random dd reads and 100 O_DIRECT preads at unaligned offsets and
#     lengths, most crossing a frame or chunk boundary (taken from ckpt
#     info), some past the end of the file;
#   - 8 concurrent readers (4 O_DIRECT, 4 buffered) released together;
#   - cmp of every tensor file, stat sizes, the directory tree, modes,
#     times, numpy.fromfile and numpy.load of the .npy view;
#   - getfattr of every tensor file against ckpt info / ckpt ls;
#   - .ckptfs/metadata.json, then .ckptfs/stats again (bytes_served grew);
#   - unmount: the daemon exits 0.
. "$(dirname "$0")/lib.sh"

DATA=$TMP/data
gen_data "$DATA"
fscheck extras "$DATA" || exit 99
MANJ=$DATA/all.json
MAN=$DATA/all.lst
"$PY" "$HELPERS/ref.py" refbytes "$MANJ" "$TMP/ref" || exit 99
mapfile -t PACKARGS < <(cut -d'|' -f7 "$MAN")
fscheck paths "$MANJ" >"$TMP/paths.lst" || exit 99
NT=$(wc -l <"$MAN")
TOTAL_BYTES=$(awk -F'|' '{ s += $5 } END { print s }' "$MAN")
echo "# data set: $NT tensors, $TOTAL_BYTES bytes"

# getfattr is in the attr package; without it, print the same through Python.
getfattr_hex() {
    if command -v getfattr >/dev/null 2>&1; then
        getfattr -d -e hex -m '^user\.ckpt\.' --absolute-names "$@"
    else
        "$PY" -c '
import os, sys
for p in sys.argv[1:]:
    print("# file: " + p)
    for n in sorted(os.listxattr(p)):
        if n.startswith("user.ckpt."):
            print(n + "=0x" + os.getxattr(p, n).hex())
    print()' "$@"
    fi
}

# grid | codec | frame size ('' = default) | mount options
CONFIGS=(
    "1|zstd||-o cache_size=512K,prefetch=2"
    "2x3|raw|4096|"
    "3x1x2|zstd|65536|-o cache_size=256K,threads=1,prefetch=0"
    "2x3|zstd:3|4096|-o prefetch=8"
)

ci=0
for cfg in "${CONFIGS[@]}"; do
    ci=$((ci + 1))
    IFS='|' read -r grid codec fsize mopts <<<"$cfg"
    tag="[grid=$grid codec=$codec frame=${fsize:-default}${mopts:+ $mopts}]"
    echo "# ---- config $ci: $tag"
    ck=$TMP/ck$ci
    mnt=$TMP/mnt$ci
    opts=(--grid "$grid" --codec "$codec" --meta "step=$ci" --meta "run=mountread")
    [ -n "$fsize" ] && opts+=(--frame-size "$fsize")
    run_ckpt pack "${opts[@]}" "$ck" "${PACKARGS[@]}"
    expect_ok "$tag ckpt pack"
    [ "$RC" -eq 0 ] || continue

    # What ckpt says about it, for the xattrs and metadata.json.
    info=$TMP/info$ci
    mkdir -p "$info"
    "$CKPT" ls "$ck" >"$TMP/ls$ci.txt" || { bad "$tag ckpt ls"; continue; }
    while IFS='|' read -r fqn _; do
        "$CKPT" info "$ck" "$fqn" >"$info/$fqn.txt" || bad "$tag ckpt info $fqn"
    done <"$MAN"

    # shellcheck disable=SC2086  # mopts is split on purpose
    mount_ck "$ck" "$mnt" $mopts || continue
    log=$MNT_LOG

    # -------------------------------------------------- stats before reads
    if cat "$mnt/.ckptfs/stats" >"$TMP/stats0" 2>"$TMP/stats.err"; then
        miss=
        for k in frames_decoded cache_hits cache_misses bytes_read bytes_served; do
            v=$(stat_val "$TMP/stats0" "$k")
            [[ "$v" =~ ^[0-9]+$ ]] || miss="$miss $k=$v"
        done
        if [ -z "$miss" ]; then
            ok "$tag .ckptfs/stats has frames_decoded cache_hits cache_misses bytes_read bytes_served"
        else
            bad "$tag .ckptfs/stats: missing or non-numeric:$miss; content: $(tr '\n' '~' <"$TMP/stats0")"
        fi
        s0=$(stat_val "$TMP/stats0" bytes_served)
        if [ "$s0" = 0 ]; then
            ok "$tag .ckptfs/stats: bytes_served 0 before any tensor is read"
        else
            bad "$tag .ckptfs/stats: bytes_served '$s0' before any tensor is read, want 0"
        fi
    else
        bad "$tag cat .ckptfs/stats: $(cat "$TMP/stats.err")"
        s0=0
    fi
    [[ "$s0" =~ ^[0-9]+$ ]] || s0=0

    # ------------- a small read decodes only its frame (prefetch off)
    if [[ "$mopts" == *prefetch=0* ]] && [ "$codec" != raw ]; then
        read -r foff flen ffile ffo fst fcodec < <(
            fscheck framerange "$MANJ" model.embed.weight "$info/model.embed.weight.txt" 1 2)
        cst=$(awk '/^chunk 1:/ { for (i = 1; i <= NF; i++) if ($i ~ /^stored_bytes=/) { sub(/.*=/, "", $i); print $i } }' "$info/model.embed.weight.txt")
        if "$PY" -c '
import os, sys
p, off, want = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "rb").read()
fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
sys.exit(0 if os.pread(fd, 100, off) == want[off:off + 100] else 1)' \
            "$mnt/model/embed/weight" $((foff + 1000)) "$TMP/ref/model.embed.weight.ref"; then
            ok "$tag O_DIRECT pread of 100 bytes inside chunk 1 frame 2 of model.embed.weight ($fcodec) is right"
        else
            bad "$tag O_DIRECT pread of 100 bytes inside chunk 1 frame 2 of model.embed.weight"
        fi
        cat "$mnt/.ckptfs/stats" >"$TMP/stats0b"
        d_fd=$(($(stat_val "$TMP/stats0b" frames_decoded) - $(stat_val "$TMP/stats0" frames_decoded)))
        d_br=$(($(stat_val "$TMP/stats0b" bytes_read) - $(stat_val "$TMP/stats0" bytes_read)))
        if [ "$fcodec" = zstd ]; then
            if [ "$d_fd" -eq 1 ]; then
                ok "$tag ... it decoded exactly 1 frame (frames_decoded +$d_fd)"
            else
                bad "$tag ... frames_decoded +$d_fd for a 100-byte read inside one frame with prefetch=0, want +1"
            fi
        fi
        if [ "$d_br" -ge "$fst" ] && [ "$d_br" -lt "$cst" ]; then
            ok "$tag ... it read $d_br bytes of shard: at least the frame's $fst, less than the chunk's $cst"
        else
            bad "$tag ... bytes_read +$d_br for a 100-byte read: want >= the frame's $fst and < the chunk's $cst stored bytes"
        fi
        cp "$TMP/stats0b" "$TMP/stats0"
    fi

    # ------------------------------------------- random reads (fresh mount)
    fscheck randreads "$MANJ" "$info" 300 "$ci" >"$TMP/reads.lst" || exit 99
    head -n 200 "$TMP/reads.lst" >"$TMP/reads.dd"
    tail -n +201 "$TMP/reads.lst" >"$TMP/reads.pr"
    rm -rf "$TMP/dd"
    mkdir "$TMP/dd"
    i=0
    ddfail=0
    : >"$TMP/dd.err"
    while IFS='|' read -r fqn p off len bs; do
        dd if="$mnt/$p" of="$TMP/dd/$i" iflag=skip_bytes,count_bytes bs="$bs" \
            skip="$off" count="$len" status=none 2>>"$TMP/dd.err" || ddfail=$((ddfail + 1))
        i=$((i + 1))
    done <"$TMP/reads.dd"
    if [ "$ddfail" -eq 0 ]; then
        ok "$tag $i dd reads (iflag=skip_bytes,count_bytes, bs 1M/4096/777) exit 0"
    else
        bad "$tag $ddfail of $i dd reads failed: $(head -c 300 "$TMP/dd.err" | tr '\n' '~')"
    fi
    fscheck checkreads "$MANJ" "$TMP/reads.dd" "$TMP/dd" >"$TMP/chk"
    report "$TMP/chk" "$tag "
    fscheck preads "$mnt" "$MANJ" "$TMP/reads.pr" --direct >"$TMP/chk" 2>&1
    report "$TMP/chk" "$tag "

    if cat "$mnt/.ckptfs/stats" >"$TMP/stats1" 2>/dev/null; then
        s1=$(stat_val "$TMP/stats1" bytes_served)
        if [[ "$s1" =~ ^[0-9]+$ ]] && [ "$s1" -gt "$s0" ]; then
            ok "$tag .ckptfs/stats: bytes_served grew with the reads ($s0 -> $s1)"
        else
            bad "$tag .ckptfs/stats: bytes_served '$s0' -> '$s1' after 300 reads, want it to grow"
        fi
    else
        bad "$tag cat .ckptfs/stats after the reads"
    fi

    # --------------------------------------------- 8 concurrent readers
    rm -f "$TMP"/barrier*
    pids=()
    fscheck randreads "$MANJ" "$info" 480 $((100 + ci)) --parts 8 --prefix "$TMP/conc" || exit 99
    for k in 0 1 2 3 4 5 6 7; do
        d=
        [ $((k % 2)) -eq 0 ] && d=--direct
        timeout 90 "$PY" "$HELPERS/fscheck.py" preads "$mnt" "$MANJ" "$TMP/conc$k.lst" \
            $d --barrier "$TMP/barrier" --tag "$tag reader $k${d:+ (O_DIRECT)}" \
            >"$TMP/conc$k.out" 2>&1 &
        pids+=($!)
    done
    for ((w = 0; w < 300; w++)); do
        n=$(find "$TMP" -maxdepth 1 -name 'barrier.ready.*' | wc -l)
        [ "$n" -ge 8 ] && break
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=$((alive + 1)); done
        [ "$alive" -eq 0 ] && break
        sleep 0.1
    done
    : >"$TMP/barrier"
    echo "     $n readers ready, released together"
    for k in 0 1 2 3 4 5 6 7; do
        wait "${pids[$k]}"
        rc=$?
        if [ "$rc" -ne 0 ]; then
            bad "$tag concurrent reader $k exited with status $rc$([ "$rc" = 124 ] && echo ' (timed out: hang?)')"
        fi
        report "$TMP/conc$k.out"
    done

    # ----------------------------------------------- whole files, sizes
    nbad=0
    nfiles=0
    while IFS='|' read -r fqn p npy; do
        nfiles=$((nfiles + 1))
        if ! cmp -s "$TMP/ref/$fqn.ref" "$mnt/$p"; then
            bad "$tag cmp $p: $(cmp "$TMP/ref/$fqn.ref" "$mnt/$p" 2>&1 | head -1)"
            nbad=$((nbad + 1))
        fi
    done <"$TMP/paths.lst"
    [ "$nbad" -eq 0 ] && ok "$tag cmp: all $nfiles tensor files equal the NumPy reference bytes"

    # Committed data never changes, so the page cache keeps it: reading
    # everything again is served (almost) without the daemon.
    cat "$mnt/.ckptfs/stats" >"$TMP/statsA" 2>/dev/null
    while IFS='|' read -r fqn p npy; do
        cat "$mnt/$p" >/dev/null
    done <"$TMP/paths.lst"
    cat "$mnt/.ckptfs/stats" >"$TMP/statsB" 2>/dev/null
    a=$(stat_val "$TMP/statsA" bytes_served)
    b=$(stat_val "$TMP/statsB" bytes_served)
    if [[ "$a" =~ ^[0-9]+$ && "$b" =~ ^[0-9]+$ ]] && [ $((b - a)) -lt $((TOTAL_BYTES / 2)) ]; then
        ok "$tag a second read of every file comes from the page cache (bytes_served +$((b - a)) of $TOTAL_BYTES)"
    else
        bad "$tag a second read of every file: bytes_served '$a' -> '$b', want it to grow by less than half of $TOTAL_BYTES (page cache kept)"
    fi

    nbad=0
    while IFS='|' read -r fqn kind dtype shape nbytes file packarg; do
        p=$(awk -F'|' -v f="$fqn" '$1 == f { print $2 }' "$TMP/paths.lst")
        sz=$(stat -c %s "$mnt/$p" 2>&1)
        if [ "$sz" != "$nbytes" ]; then
            bad "$tag stat -c %s $p = '$sz', want numel*itemsize = $nbytes ($dtype [$shape])"
            nbad=$((nbad + 1))
        fi
    done <"$MAN"
    [ "$nbad" -eq 0 ] && ok "$tag stat -c %s: every file's size is numel*itemsize"

    # ls shows the modules, no dot entries
    want_top=$(cut -d'|' -f2 "$TMP/paths.lst" | cut -d/ -f1 | LC_ALL=C sort -u | tr '\n' ' ')
    got_top=$(ls -1 "$mnt" | LC_ALL=C sort | tr '\n' ' ')
    if [ "$got_top" = "$want_top" ]; then
        ok "$tag ls: $got_top"
    else
        bad "$tag ls: '$got_top', want '$want_top'"
    fi
    # "ls shows no dot entries by default" (docs/MOUNT.md): plain ls
    dots=$(ls "$mnt" | grep '^\.' | tr '\n' ' ')
    if [ -z "$dots" ]; then
        ok "$tag ls shows no dot entries (ls -A: $(ls -A "$mnt" | grep '^\.' | tr '\n' ' '))"
    else
        bad "$tag ls shows dot entries: $dots"
    fi
    # a tensor that is also a module, and escaped names
    if [ -d "$mnt/a/b" ] && [ -f "$mnt/a/b.tensor" ] && [ -f "$mnt/a/b/c" ] &&
        [ -f "$mnt/a/b/d/e" ] && [ -f "$mnt/top.tensor" ] && [ -f "$mnt/top/sub" ]; then
        ok "$tag a.b + a.b.c: a/b/ is a directory, a/b.tensor and a/b/c files (likewise top.tensor, top/sub)"
    else
        bad "$tag a.b + a.b.c: want directory a/b, files a/b.tensor a/b/c a/b/d/e top.tensor top/sub; ls a: $(ls -A "$mnt/a" 2>&1 | tr '\n' ' ')"
    fi
    if [ -f "$mnt/esc/100%25/x y" ] && [ -f "$mnt/esc/ünïcode" ]; then
        ok "$tag escaping: 'esc.100%.x y' is esc/100%25/x y, UTF-8 kept (esc/ünïcode)"
    else
        bad "$tag escaping: want esc/100%25/x y and esc/ünïcode; ls esc: $(ls -A "$mnt/esc" 2>&1 | tr '\n' ' ')"
    fi
    fscheck tree "$MANJ" "$mnt" "$ck/index.db" >"$TMP/chk" 2>&1
    report "$TMP/chk" "$tag "
    fscheck content "$MANJ" "$mnt" >"$TMP/chk" 2>&1
    report "$TMP/chk" "$tag "

    # --------------------------------------------------------- xattrs
    mapfile -t files < <(cut -d'|' -f2 "$TMP/paths.lst" | sed "s|^|$mnt/|")
    getfattr_hex "${files[@]}" >"$TMP/xattr.txt" 2>"$TMP/xattr.err" ||
        bad "$tag getfattr -d -m user.ckpt on every tensor file: $(head -c 300 "$TMP/xattr.err")"
    fscheck xattrs "$MANJ" "$mnt" "$info" "$TMP/ls$ci.txt" <"$TMP/xattr.txt" >"$TMP/chk" 2>&1
    report "$TMP/chk" "$tag "
    v=$(xattr_get "$mnt/a/b.tensor" user.ckpt.fqn)
    if [ "$v" = a.b ]; then ok "$tag getfattr -n user.ckpt.fqn a/b.tensor = a.b"; else bad "$tag getfattr -n user.ckpt.fqn a/b.tensor = '$v', want a.b"; fi

    # ----------------------------------------------------- metadata.json
    fscheck metadata "$MANJ" "$mnt/.ckptfs/metadata.json" "$info" "step=$ci" run=mountread >"$TMP/chk" 2>&1
    report "$TMP/chk" "$tag "

    # ------------------------------------------------------ stats after
    if cat "$mnt/.ckptfs/stats" >"$TMP/stats2" 2>/dev/null; then
        s2=$(stat_val "$TMP/stats2" bytes_served)
        if [[ "$s2" =~ ^[0-9]+$ ]] && [ "$s2" -ge $((s0 + TOTAL_BYTES)) ]; then
            ok "$tag .ckptfs/stats: bytes_served $s2 >= the $TOTAL_BYTES bytes of all tensors read"
        else
            bad "$tag .ckptfs/stats: bytes_served '$s2' after reading every tensor, want >= $TOTAL_BYTES"
        fi
        br=$(stat_val "$TMP/stats2" bytes_read)
        if [[ "$br" =~ ^[0-9]+$ ]] && [ "$br" -gt 0 ]; then
            ok "$tag .ckptfs/stats: bytes_read $br > 0"
        else
            bad "$tag .ckptfs/stats: bytes_read '$br' after reads, want > 0"
        fi
        if [ "$codec" != raw ]; then
            fd=$(stat_val "$TMP/stats2" frames_decoded)
            cm=$(stat_val "$TMP/stats2" cache_misses)
            if [[ "$fd" =~ ^[0-9]+$ ]] && [ "$fd" -gt 0 ] && [[ "$cm" =~ ^[0-9]+$ ]] && [ "$cm" -gt 0 ]; then
                ok "$tag .ckptfs/stats: frames_decoded $fd > 0, cache_misses $cm > 0 (zstd frames read)"
            else
                bad "$tag .ckptfs/stats: frames_decoded '$fd', cache_misses '$cm' after reading zstd frames, want > 0"
            fi
        fi
        mono=
        for k in frames_decoded cache_hits cache_misses bytes_read bytes_served; do
            a=$(stat_val "$TMP/stats1" "$k")
            b=$(stat_val "$TMP/stats2" "$k")
            if ! [[ "$a" =~ ^[0-9]+$ && "$b" =~ ^[0-9]+$ ]] || [ "$b" -lt "$a" ]; then
                mono="$mono $k:$a->$b"
            fi
        done
        if [ -z "$mono" ]; then ok "$tag .ckptfs/stats: counters never decrease"; else bad "$tag .ckptfs/stats: counters decreased:$mono"; fi
    else
        bad "$tag cat .ckptfs/stats at the end"
    fi

    umount_ck "$mnt"
    expect_daemon_clean "$tag unmount" "$log"
    rm -rf "$ck" "$info" "$TMP/dd"
done

# ------------------------------------ names the format forbids, and '%'
echo "# ---- names: '/', control bytes, DEL, empty components refused (index.db edited); '%' escaped"
mapfile -t ODDARGS < <(fscheck oddnames "$TMP/odd") || exit 99
run_ckpt pack --grid 2 --frame-size 4K "$TMP/ckodd" "${ODDARGS[@]}"
expect_ok "pack the placeholder tensors"
if [ "$RC" -eq 0 ] && fscheck oddrename "$TMP/ckodd/index.db" "$TMP/odd"; then
    # every FQN is checked when the index is opened (docs/TRUST.md)
    refuse_mount "[odd names] an index naming 'odd.a/1', 'odd.a\\x012', ..." \
        "damaged index: invalid fqn 'odd\.a.{1,4}2': control character" "$TMP/ckodd"
else
    bad "could not make the checkpoint with odd names"
fi
run_ckpt pack "$TMP/ckpct" "odd.%41=$TMP/odd/odd4.npy" "odd.b=$TMP/odd/odd0.npy"
expect_ok "pack 'odd.%41' (a '%' is allowed)"
if [ "$RC" -eq 0 ] && mount_ck "$TMP/ckpct" "$TMP/mntpct"; then
    log=$MNT_LOG
    got=$(ls -1 "$TMP/mntpct/odd" | LC_ALL=C sort | tr '\n' ' ')
    if [ "$got" = "%2541 b " ]; then
        ok "ls odd/: $got('odd.%41' -> %2541)"
    else
        bad "ls odd/: '$got', want '%2541 b '"
    fi
    "$PY" -c 'import sys, numpy as np; a = np.load(sys.argv[1]); sys.stdout.buffer.write(np.ascontiguousarray(a).tobytes())' \
        "$TMP/odd/odd4.npy" >"$TMP/pct.want"
    same_bytes "odd/%2541 holds the bytes of 'odd.%41'" "$TMP/pct.want" "$TMP/mntpct/odd/%2541"
    if [ "$(xattr_get "$TMP/mntpct/odd/%2541" user.ckpt.fqn)" = "odd.%41" ]; then
        ok "odd/%2541 has user.ckpt.fqn 'odd.%41'"
    else
        bad "odd/%2541: user.ckpt.fqn is '$(xattr_get "$TMP/mntpct/odd/%2541" user.ckpt.fqn)'"
    fi
    umount_ck "$TMP/mntpct"
    expect_daemon_clean "['%' names]" "$log"
fi

summary
