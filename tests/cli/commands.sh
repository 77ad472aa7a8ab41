#!/bin/bash
# commands.sh - ckpt ls / info / --help / --version, and the on-disk format as
# a user sees it: index.db read with Python's sqlite3, and a zstd frame cut
# out with dd and decoded by the zstd tool to the reference bytes.
. "$(dirname "$0")/lib.sh"
need_python

DATA=$TMP/data
gen_data "$DATA"
MAN=$DATA/manifest.lst
MANJ=$DATA/manifest.json
REF=$HELPERS/ref.py
CKI=$HELPERS/ckinfo.py
mapfile -t PACKARGS < <(pack_args "$MAN")
NT=$(wc -l <"$MAN")
HDR=$CKPT_SRCDIR/src/ckptfs.h
VERSION=$(sed -n 's/^#define CKPT_VERSION_STRING "\(.*\)"$/\1/p' "$CKPT_BUILDDIR/ckptfs_version.h")
# The newest format read is CKPT_FORMAT_VERSION; a checkpoint without
# bases (not a delta) is written as version 1 (docs/FORMAT.md).
NEWEST=$(sed -n 's/^#define CKPT_FORMAT_VERSION \([0-9]*\)$/\1/p' "$HDR")
FORMAT=1
[ -n "$VERSION" ] && [ -n "$NEWEST" ] || { echo "ERROR: cannot read versions from $HDR"; exit 99; }

ROOT=$TMP/root
mkdir -p "$ROOT"
CK1=$ROOT/step-000042     # 2x3 grid, zstd, 64K frames
CK2=$ROOT/step-000100     # 3x1x2 grid, raw, odd 12345-byte frame size
CK3=$ROOT/step-000150     # 3 tensors, default options

echo "# ---- pack"
run_ckpt pack --grid 2x3 --codec zstd --frame-size 64K --meta step=42 \
    --meta run=abc "$CK1" "${PACKARGS[@]}"
expect_ok "pack $CK1"
if [ -s "$ERR" ]; then bad "pack writes nothing on stderr when it is not a terminal"; _show; else ok "pack: clean stderr (no progress bar when not a terminal)"; fi
run_ckpt pack --grid 3x1x2 --codec raw --frame-size 12345 "$CK2" "${PACKARGS[@]}"
expect_ok "pack $CK2 (frame size 12345)"
f1=$(sed -n 1p "$MAN" | cut -d'|' -f7)
f2=$(sed -n 2p "$MAN" | cut -d'|' -f7)
f3=$(sed -n 3p "$MAN" | cut -d'|' -f7)
run_ckpt pack "$CK3" "$f1" "$f2" "$f3"
expect_ok "pack $CK3 (3 tensors)"
for ck in "$CK1" "$CK2" "$CK3"; do
    [ -f "$ck/index.db" ] || { echo "ERROR: setup pack failed"; summary; }
done

# ------------------------------------------------------------- ls of a ckpt
echo "# ---- ls CKPT"
run_ckpt ls "$CK1"
expect_ok "ls step-000042"
if [ -s "$ERR" ]; then bad "ls: clean stderr"; _show; else ok "ls: clean stderr"; fi
"$PY" "$CKI" checkls "$MANJ" zstd <"$OUT" >"$TMP/chk"
report "$TMP/chk" "[zstd] "
cp "$OUT" "$TMP/ls1"
# zstd must really compress the compressible tensors
st=$(awk '$1 == "model.embed.weight" {print $5}' "$OUT")
rw=$(awk '$1 == "model.embed.weight" {print $4}' "$OUT")
if [ -n "$st" ] && [ -n "$rw" ] && [ "$st" -lt $((rw / 2)) ]; then
    ok "ls: model.embed.weight stored in less than half its raw bytes with zstd ($st < $rw/2)"
else
    bad "ls: model.embed.weight stored=$st raw=$rw: zstd did not compress compressible data"
fi
LS1_STORED=$(awk 'NR > 1 {s += $5} END {print s + 0}' "$OUT")
run_ckpt ls "$CK2"
expect_ok "ls step-000100"
"$PY" "$CKI" checkls "$MANJ" raw <"$OUT" >"$TMP/chk"
report "$TMP/chk" "[raw] "
# Default options: --codec auto picks the codec per dtype (CODEC column).
run_ckpt ls "$CK3"
expect_ok "ls step-000150"
"$PY" "$CKI" checkls "$MANJ" auto subset <"$OUT" >"$TMP/chk"
report "$TMP/chk" "[auto] "

# ------------------------------------------------------------- ls of a root
echo "# ---- ls ROOT"
mkdir -p "$ROOT/step-000200/data" "$ROOT/step-000200/.pending" "$ROOT/notes" "$ROOT/step-000300/data"
head -c 3000 /dev/urandom >"$ROOT/step-000200/data/rank0.shard"
echo "notes" >"$ROOT/notes/todo.txt"
echo "file" >"$ROOT/README"
ln -s step-000150 "$ROOT/latest"
run_ckpt ls "$ROOT"
expect_ok "ls ROOT"
cat "$OUT" | sed 's/^/     | /'
ls_root_line() {   # NAME STATE TENSORS
    local line
    line=$(awk -v n="$1" '$1 == n' "$OUT")
    if [ -z "$line" ]; then bad "ls ROOT: a line for $1"; return; fi
    # NAME STATE SIZE_ON_DISK TENSORS
    set -- "$1" "$2" "$3" $line
    local f_state=$5 f_size=$6 f_tensors=${!#}
    local du_size
    du_size=$(du -s -B1 "$ROOT/$1" | cut -f1)
    if [ "$f_state" = "$2" ] && [ "$f_tensors" = "$3" ]; then
        ok "ls ROOT: $1 $2, tensors $3"
    else
        bad "ls ROOT: '$line', want $1 $2 ... $3"
    fi
    if [ "$f_size" = "$du_size" ]; then
        ok "ls ROOT: $1 size on disk $f_size = du -sB1"
    else
        bad "ls ROOT: $1 size on disk '$f_size', du -sB1 says $du_size"
    fi
}
ls_root_line step-000042 committed "$NT"
ls_root_line step-000100 committed "$NT"
ls_root_line step-000150 committed 3
ls_root_line step-000200 uncommitted -
ls_root_line step-000300 uncommitted -
if grep -E -q '^(notes|README|latest) ' "$OUT"; then bad "ls ROOT lists unrelated entries or the 'latest' link"; else ok "ls ROOT: unrelated 'notes', README and the 'latest' link not listed"; fi
if [ "$(wc -l <"$OUT")" -eq 5 ]; then ok "ls ROOT: exactly 5 lines"; else bad "ls ROOT: $(wc -l <"$OUT") lines, want 5"; fi
if [ "$(awk '{print $1}' "$OUT")" = "$(awk '{print $1}' "$OUT" | LC_ALL=C sort)" ]; then ok "ls ROOT: in name order"; else bad "ls ROOT: not in name order"; fi
rm -rf "$ROOT/step-000200" "$ROOT/step-000300" "$ROOT/notes" "$ROOT/README" "$ROOT/latest"
mkdir -p "$TMP/emptyroot"
run_ckpt ls "$TMP/emptyroot"
expect_rc 1 "ls of an empty root fails"
expect_empty_out "ls of an empty root lists nothing"
expect_err_re 'emptyroot holds no checkpoint: neither it nor any of its subdirectories' "ls of an empty root says it found nothing"
mkdir -p "$TMP/unrelated/sub"
echo hi >"$TMP/unrelated/sub/readme"
echo hi >"$TMP/unrelated/file.txt"
run_ckpt ls "$TMP/unrelated"
expect_rc 1 "ls of a directory of unrelated files fails"
expect_err_re 'unrelated holds no checkpoint' "ls of unrelated files says it found nothing"
run_ckpt ls /etc
expect_rc 1 "ls /etc fails"
expect_err_re '/etc holds no checkpoint' "ls /etc says it found nothing"

# ------------------------------------------------- summary on a terminal
echo "# ---- the summary line that stays on a terminal"
# script(1) gives the command a terminal; its output is that terminal's.
# tty_run NAME CMD...: runs CMD under script, output in $TMP/NAME.tty.
tty_run() {
    local name=$1 q=
    shift
    printf -v q '%q ' "$@"
    script -qec "$q" /dev/null </dev/null >"$TMP/$name.tty" 2>&1
}
# summary_is NAME VERB N CKPT: the last line of NAME's terminal output is
# "VERB N tensors, SIZE in T s (RATE/s), ratio R", R = CKPT's info ratio.
summary_is() {
    local line ratio
    # the bar redraws itself after '\r' and erases to the end of the line
    line=$(tr '\r' '\n' <"$TMP/$1.tty" | sed 's/\x1b\[K//g' | grep -v '^$' | tail -n 1)
    run_ckpt info "$4"
    ratio=$(sed -n 's/^ratio: //p' "$OUT")
    if [[ "$line" =~ ^$2\ $3\ tensors,\ [0-9.]+\ (B|KiB|MiB|GiB)\ in\ [0-9]+\.[0-9]\ s\ \(([0-9.]+\ (B|KiB|MiB|GiB)/s|-)\),\ ratio\ ${ratio//./\\.}$ ]]; then
        ok "$1 on a terminal ends with the summary: $line"
    else
        bad "$1 on a terminal: last line '$line', want '$2 $3 tensors, SIZE in T s (RATE/s), ratio $ratio'"
    fi
}
if command -v script >/dev/null 2>&1; then
    tty_run pack "$CKPT" pack --grid 2x3 --codec zstd "$TMP/tty-ck" "${PACKARGS[@]}"
    summary_is pack packed "$NT" "$TMP/tty-ck"
    tty_run verify "$CKPT" verify "$TMP/tty-ck"
    summary_is verify verified "$NT" "$TMP/tty-ck"
    grep -q "^ok: $NT tensors" "$TMP/verify.tty" && ok "verify on a terminal: the ok line too" ||
        bad "verify on a terminal: no ok line"
    tty_run unpack "$CKPT" unpack "$TMP/tty-ck" "$TMP/tty-un"
    summary_is unpack unpacked "$NT" "$TMP/tty-ck"
    # Not a terminal: nothing on stderr (the scripts' view).
    run_ckpt verify "$TMP/tty-ck"
    if [ -s "$ERR" ]; then bad "verify writes on stderr when it is not a terminal"; else ok "verify: no summary when stderr is not a terminal"; fi
else
    echo "     (script(1) is not installed: the terminal summary is not checked)"
fi

# ------------------------------------------------------------- info summary
echo "# ---- info CKPT"
info_has() {   # ERE DESC
    if grep -E -q -- "$1" "$OUT"; then ok "info: $2"; else bad "info: $2 (no line ~ /$1/)"; _show; fi
}
# Per-tensor details first: they give the codecs the frames really use.
mkdir -p "$TMP/info1" "$TMP/info2"
while IFS='|' read -r fqn _; do
    "${_TO[@]}" "$CKPT" info "$CK1" "$fqn" >"$TMP/info1/$fqn.txt" 2>"$TMP/info1/$fqn.err" ||
        bad "info $CK1 $fqn exits 0: $(cat "$TMP/info1/$fqn.err")"
    "${_TO[@]}" "$CKPT" info "$CK2" "$fqn" >"$TMP/info2/$fqn.txt" 2>"$TMP/info2/$fqn.err" ||
        bad "info $CK2 $fqn exits 0: $(cat "$TMP/info2/$fqn.err")"
done <"$MAN"
"$PY" "$CKI" checkinfoall "$MANJ" 2x3 65536 "$CK1" "$TMP/info1" >"$TMP/chk1"
report "$TMP/chk1" "[2x3 zstd 64K] "
"$PY" "$CKI" checkinfoall "$MANJ" 3x1x2 12345 "$CK2" "$TMP/info2" >"$TMP/chk2"
report "$TMP/chk2" "[3x1x2 raw 12345] "
CODECS1=$(sed -n 's/^codecs: //p' "$TMP/chk1")
CODECS2=$(sed -n 's/^codecs: //p' "$TMP/chk2")
[ "$CODECS2" = raw ] && ok "info: --codec raw: every frame is raw" || bad "info: --codec raw frames use '$CODECS2'"
[ "$CODECS1" = raw+zstd ] && ok "info: --codec zstd: zstd frames, raw ones for incompressible data" || bad "info: --codec zstd frames use '$CODECS1', want raw+zstd"

run_ckpt info "$CK1"
expect_ok "info step-000042"
info_has '^  step = 42$' "metadata step = 42 (--meta step=42)"
info_has '^  run = abc$' "metadata run = abc (--meta run=abc)"
info_has '^  world_size = 6$' "metadata world_size = 6 for a 2x3 grid"
info_has "^  format_version = $FORMAT\$" "metadata format_version = $FORMAT"
info_has "^tensors: $NT\$" "tensors: $NT"
RAW_TOTAL=$(awk -F'|' '{s += $5} END {print s}' "$MAN")
info_has "^raw_bytes: $RAW_TOTAL\$" "raw_bytes: $RAW_TOTAL (sum of numpy nbytes)"
info_has "^stored_bytes: $LS1_STORED\$" "stored_bytes: $LS1_STORED (sum of ls STORED_BYTES)"
want_ratio=$(awk -v r="$RAW_TOTAL" -v s="$LS1_STORED" 'BEGIN {printf "%.2f", r / s}')
info_has "^ratio: $want_ratio\$" "ratio: $want_ratio"
info_has "^codecs: ${CODECS1//+/\\+}\$" "codecs: $CODECS1 (the codecs its frames use)"
info_has '^shards: 6$' "shards: 6"
for r in 0 1 2 3 4 5; do
    sz=$(stat -c %s "$CK1/data/rank$r.shard" 2>/dev/null)
    info_has "^  data/rank$r\\.shard $sz\$" "shard data/rank$r.shard $sz bytes"
done
# One '  FQN DTYPE CODECS RATIO' line per tensor after 'tensors: N', the
# same codecs and ratio as ls shows.
awk 'NR > 1 {print "  " $1 " " $2 " " $6 " " $7}' "$TMP/ls1" >"$TMP/info.want"
awk '/^tensors: / {on = 1; next} on && /^  / {print; next} {on = 0}' "$OUT" >"$TMP/info.got"
if cmp -s "$TMP/info.want" "$TMP/info.got"; then
    ok "info: a line per tensor with its dtype, codecs and ratio, as ls shows them"
else
    bad "info: per-tensor lines differ from ls: $(diff "$TMP/info.want" "$TMP/info.got" | head -5 | tr '\n' '~')"
fi
run_ckpt info "$CK2"
expect_ok "info step-000100"
info_has '^codecs: raw$' "codecs: raw (with --codec raw)"
info_has '^  world_size = 6$' "metadata world_size = 6 for a 3x1x2 grid"

# ------------------------------------------------------------ help, version
echo "# ---- --help, --version, unknown command"
for cmd in pack unpack ls info cat verify gc; do
    run_ckpt $cmd --help
    expect_ok "$cmd --help"
    if grep -q -i 'usage' "$OUT" && grep -q "ckpt $cmd" "$OUT"; then ok "$cmd --help prints 'usage' and 'ckpt $cmd' on stdout"; else bad "$cmd --help output"; _show; fi
done
# The reading commands say what else they read (docs/MOUNT.md, "Foreign").
for cmd in ls info cat verify; do
    run_ckpt $cmd --help
    expect_out_re 'distributed checkpoint \(a directory with \.metadata\)' "$cmd --help: a PyTorch DCP directory is accepted"
    expect_out_re '\.safetensors' "$cmd --help: safetensors are accepted"
done
run_ckpt --help
expect_ok "ckpt --help"
expect_out_re '[Uu]sage' "ckpt --help prints usage"
for cmd in pack unpack ls info cat verify gc; do
    grep -q "^  $cmd " "$OUT" && ok "ckpt --help lists $cmd" || bad "ckpt --help lists $cmd"
done
run_ckpt --version
expect_ok "ckpt --version"
expect_out_re "^ckpt \(ckptfs\) ${VERSION//./\\.}\$" "ckpt --version prints 'ckpt (ckptfs) $VERSION' (CKPT_VERSION_STRING)"
cp "$OUT" "$TMP/version.out"
run_ckpt -V
same_bytes "ckpt -V = ckpt --version" "$TMP/version.out" "$OUT"
run_ckpt --help
cp "$OUT" "$TMP/help.out"
run_ckpt -h
expect_ok "ckpt -h"
same_bytes "ckpt -h = ckpt --help" "$TMP/help.out" "$OUT"
run_ckpt pack --help
cp "$OUT" "$TMP/packhelp.out"
run_ckpt help pack
expect_ok "ckpt help pack"
same_bytes "ckpt help pack = ckpt pack --help" "$TMP/packhelp.out" "$OUT"
run_ckpt ls -- "$CK3"
expect_ok "ls -- CKPT ('--' ends the options)"
run_ckpt info "$CK3" --help
expect_ok "options after the positional arguments (info CKPT --help)"
expect_out_re '^usage: ckpt info' "info CKPT --help prints info's usage"
run_ckpt frobnicate
expect_rc 2 "unknown command"
expect_err_re "^ckpt: .*frobnicate" "unknown command: 'ckpt:' message naming it"

# ------------------------------------------------------------ cat edge cases
echo "# ---- cat: clamped and empty slices, EPIPE"
# NumPy clamps ranges and allows empty ones; ckpt cat does the same.
edge_slice() {   # FQN SPEC
    local fqn=$1 spec=$2 kind file dtype shape
    IFS='|' read -r _ kind dtype shape _ file _ < <(awk -F'|' -v n="$fqn" '$1 == n' "$MAN")
    [ "$kind" = raw ] && file="$file:$dtype:$shape"
    "$PY" "$REF" slice "$file" "$spec" >"$TMP/edge.ref" || { bad "ref.py slice $fqn '$spec'"; return; }
    run_ckpt cat "$CK1" "$fqn" --slice "$spec"
    if [ "$RC" -eq 0 ] && cmp -s "$TMP/edge.ref" "$OUT"; then
        ok "cat $fqn --slice '$spec' = NumPy ($(stat -c %s "$OUT") bytes)"
    else
        bad "cat $fqn --slice '$spec': exit $RC, $(stat -c %s "$OUT") bytes, NumPy $(stat -c %s "$TMP/edge.ref")"
        _show
    fi
}
edge_slice model.embed.weight '0:100000'
edge_slice model.embed.weight '-100000:3,1020:5000'
edge_slice model.embed.weight '5:2'
edge_slice model.embed.weight '10:10,:'
edge_slice model.embed.weight ':,-1'
edge_slice data.u64 '1'
edge_slice data.u64 '-1,0:0'
edge_slice opt.state.i32_4d '4:100,-100:2,6:,:-8'
edge_slice meta.notes '100:-100'
edge_slice lowp.bf16 '36,128'
edge_slice fortran.i32 '1:3,-1'
# A reader that goes away: cat stops quietly with status 0 (docs/CLI.md).
"$CKPT" cat "$CK1" model.embed.weight 2>"$TMP/epipe.err" | head -c 10 >/dev/null
st=${PIPESTATUS[0]}
if [ "$st" -eq 0 ] && [ ! -s "$TMP/epipe.err" ]; then
    ok "cat | head -c 10: status 0, nothing on stderr"
else
    bad "cat | head -c 10: status $st, stderr: $(head -c 300 "$TMP/epipe.err")"
fi

# ------------------------------------------------------------------ index.db
echo "# ---- index.db with Python's sqlite3"
"$PY" "$CKI" checkindex "$CK1/index.db" "$MANJ" 0x636b7074 "$FORMAT" "$TMP/info1" >"$TMP/chk"
report "$TMP/chk"
if command -v sqlite3 >/dev/null 2>&1; then
    n=$(sqlite3 "file:$CK1/index.db?immutable=1" 'SELECT count(*) FROM tensors' 2>&1)
    [ "$n" = "$NT" ] && ok "sqlite3 CLI: $NT rows in tensors" || bad "sqlite3 CLI: tensors count '$n'"
fi
if [ ! -e "$CK1/index.db-wal" ] && [ ! -e "$CK1/index.db-journal" ] && [ ! -e "$CK1/.pending" ] && [ ! -e "$CK1/index.db.tmp" ]; then
    ok "committed checkpoint has no -wal/-journal, .pending/ or index.db.tmp"
else
    bad "committed checkpoint leftovers: $(ls -a "$CK1" | tr '\n' ' ')"
fi

# ------------------------------------------------- frames cut out with dd
echo "# ---- frames cut out with dd"
# frame_check CK INFO_TXT FQN CHUNK FRAME: the frame's stored bytes, cut out
# with dd, decode (zstd -d for zstd frames) to the reference bytes of that
# range of the chunk's row-major image, and hash to the recorded XXH3-64.
frame_check() {
    local ck=$1 info=$2 fqn=$3 want_c=$4 want_f=$5
    local line c f file foff st roff rsz codec sum offs sizes tensor kind dtype shape
    line=$("$PY" "$CKI" frames <"$info" | awk -v c="$want_c" -v f="$want_f" '$1 == c && $2 == f')
    read -r c f file foff st roff rsz codec sum <<<"$line"
    if [ -z "$line" ]; then bad "dd: $fqn chunk $want_c frame $want_f not in info"; return; fi
    read -r _ offs sizes _ < <("$PY" "$CKI" chunks <"$info" | awk -v c="$want_c" '$1 == c')
    [ "$offs" = "()" ] && offs=
    [ "$sizes" = "()" ] && sizes=
    IFS='|' read -r _ kind dtype shape _ file0 _ < <(awk -F'|' -v n="$fqn" '$1 == n' "$MAN")
    if [ "$kind" = raw ]; then tensor="$file0:$dtype:$shape"; else tensor=$file0; fi
    "$PY" "$REF" region "$tensor" "$offs" "$sizes" | tail -c +$((roff + 1)) | head -c "$rsz" >"$TMP/frame.ref"
    dd if="$ck/$file" of="$TMP/frame.stored" bs=64K iflag=skip_bytes,count_bytes skip="$foff" count="$st" status=none
    local what="dd: $fqn chunk $c frame $f ($codec, $file @$foff, $st stored, raw $roff+$rsz)"
    if [ "$codec" = zstd ]; then
        if zstd -q -d -c "$TMP/frame.stored" >"$TMP/frame.raw" 2>"$TMP/zstd.err"; then
            ok "$what: zstd -d decodes it"
        else
            bad "$what: zstd -d fails: $(cat "$TMP/zstd.err")"
            return
        fi
    else
        cp "$TMP/frame.stored" "$TMP/frame.raw"
    fi
    same_bytes "$what: = reference bytes" "$TMP/frame.ref" "$TMP/frame.raw"
    local h
    h=$("$PY" "$CKI" checksum "$TMP/frame.raw")
    case $? in
        0) [ "$h" = "$sum" ] && ok "$what: XXH3-64 $sum" || bad "$what: XXH3-64 of the bytes is $h, info says $sum" ;;
        77) echo "     (libxxhash not loadable from Python: checksum not checked)" ;;
        *) bad "$what: checksum helper failed" ;;
    esac
}
W=model.embed.weight
frame_check "$CK1" "$TMP/info1/$W.txt" "$W" 0 0
frame_check "$CK1" "$TMP/info1/$W.txt" "$W" 4 2
frame_check "$CK1" "$TMP/info1/$W.txt" "$W" 5 5
frame_check "$CK1" "$TMP/info1/model.pos.ids.txt" model.pos.ids 1 3
frame_check "$CK1" "$TMP/info1/meta.notes.txt" meta.notes 0 0
frame_check "$CK1" "$TMP/info1/fortran.i32.txt" fortran.i32 3 0
frame_check "$CK2" "$TMP/info2/$W.txt" "$W" 2 7
frame_check "$CK2" "$TMP/info2/lowp.bf16.txt" lowp.bf16 1 0
frame_check "$CK2" "$TMP/info2/scalar.lr.txt" scalar.lr 0 0
# Every zstd frame in CK1 must be a standard frame: count them all.
nz=0
nzbad=0
while read -r c f file foff st roff rsz codec sum; do
    [ "$codec" = zstd ] || continue
    nz=$((nz + 1))
    n=$(dd if="$CK1/$file" bs=64K iflag=skip_bytes,count_bytes skip="$foff" count="$st" status=none | zstd -q -d -c 2>/dev/null | wc -c)
    if [ "$n" != "$rsz" ]; then
        nzbad=$((nzbad + 1))
        [ "$nzbad" -le 3 ] && bad "dd: $W chunk $c frame $f: zstd -d gives $n bytes, want $rsz"
    fi
done < <("$PY" "$CKI" frames <"$TMP/info1/$W.txt")
if [ "$nz" -gt 0 ] && [ "$nzbad" -eq 0 ]; then ok "dd: all $nz zstd frames of $W decode with zstd -d to their raw sizes"; fi
[ "$nz" -gt 0 ] || bad "dd: $W has no zstd frames"

summary
