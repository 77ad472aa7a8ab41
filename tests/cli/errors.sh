#!/bin/bash
# errors.sh - ckpt on damaged checkpoints, bad input and bad usage.
#
# Each case checks the exit status, the key words of the message on stderr
# (or of the FAULT lines on stdout, for verify), and that nothing else broke:
# a checkpoint committed earlier in the same root still verifies and its
# files are unchanged, and a failed pack leaves no index.db.
#
# Not covered here: overlapping pieces and pieces that leave a gap cannot be
# produced with `ckpt pack` (its grid always tiles the tensor exactly); the
# planner's refusals of those are covered by the library's unit tests
# (tests/unit/test_plan.c, test_readwrite.c).
. "$(dirname "$0")/lib.sh"
need_python

ROOT=$TMP/root
mkdir -p "$ROOT" "$TMP/in"
REF=$HELPERS/ref.py

# ---------------------------------------------------------------- inputs
"$PY" - "$TMP/in" <<'EOF' || exit 99
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(7)
# A: 64 rows of 400 bytes = 25600 bytes: 7 frames of 4096 bytes.
np.save(d + "/a.npy", rng.standard_normal((64, 100)).astype("<f4"))
np.save(d + "/b.npy", rng.integers(-1000, 1000, (50, 50), dtype="<i4"))
# compressible: for zstd frames
np.save(d + "/z.npy", (np.arange(40000) % 7).astype("<i4").reshape(200, 200))
np.save(d + "/c.npy", rng.standard_normal((10, 3)).astype("<f8"))
np.save(d + "/be.npy", np.arange(6, dtype=">f4"))            # big-endian
np.save(d + "/void.npy", np.zeros(4, dtype="V2"))           # |V2 raw
np.save(d + "/empty.npy", np.zeros((0, 5), dtype="<f4"))
np.save(d + "/scalar.npy", np.array(3.25, dtype="<f8"))
np.save(d + "/cplx.npy", np.zeros(3, dtype=np.clongdouble))   # unsupported
rng.integers(0, 256, 16, dtype=np.uint8).tofile(d + "/f32x4.bin")
rng.integers(0, 256, 15, dtype=np.uint8).tofile(d + "/f32x4_short.bin")
rng.integers(0, 256, 8, dtype=np.uint8).tofile(d + "/scalar.bin")
open(d + "/empty.bin", "wb").close()
open(d + "/empty.txt", "wb").close()
open(d + "/hello.txt", "wb").write(b"hello, checkpoint\n")
# a .npy whose data is cut short, and a file that is not .npy at all
raw = open(d + "/a.npy", "rb").read()
open(d + "/cut.npy", "wb").write(raw[:len(raw) // 2])
open(d + "/junk.npy", "wb").write(b"this is not a numpy file\n" * 10)
# .npy format versions 2.0 and 3.0, and bytes after the data (ignored)
v = rng.integers(-50, 50, (3, 4, 5), dtype="<i2")
for ver in ((2, 0), (3, 0)):
    with open(d + "/v%d.npy" % ver[0], "wb") as f:
        np.lib.format.write_array(f, v, version=ver)
with open(d + "/trail.npy", "wb") as f:
    np.lib.format.write_array(f, v, version=(1, 0))
    f.write(b"trailing bytes NumPy ignores")
np.save(d + "/v.npy", v)
rng.integers(0, 256, 24, dtype=np.uint8).tofile(d + "/raw24.bin")
rng.integers(0, 256, 4, dtype=np.uint8).tofile(d + "/raw4.bin")
EOF
IN=$TMP/in

# The earlier, committed checkpoint that must survive everything below.
GOOD=$ROOT/step-1
run_ckpt pack --codec raw "$GOOD" a=$IN/a.npy b=$IN/b.npy
expect_ok "setup: pack the earlier checkpoint step-1"
[ -f "$GOOD/index.db" ] || { echo "ERROR: setup failed"; summary; }
snap() { (cd "$GOOD" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
GOOD_SUM=$(snap)

# intact WHAT: the earlier checkpoint still verifies and is byte-identical.
intact() {
    local save_rc=$RC
    cp "$OUT" "$TMP/.out.save"; cp "$ERR" "$TMP/.err.save"
    run_ckpt verify "$GOOD"
    if [ "$RC" -eq 0 ] && [ "$(snap)" = "$GOOD_SUM" ]; then
        ok "after $*: step-1 still verifies, unchanged"
    else
        bad "after $*: step-1 damaged (verify exit $RC)"
        _show
    fi
    RC=$save_rc
    cp "$TMP/.out.save" "$OUT"; cp "$TMP/.err.save" "$ERR"
}

# no_index DIR WHAT: a failed pack left no committed index.
no_index() {
    if [ ! -e "$1/index.db" ] && [ ! -e "$1/index.db.tmp" ]; then
        ok "$2: no index.db left in $(basename "$1")"
    else
        bad "$2: a failed pack left $(ls "$1" | tr '\n' ' ') in $1"
    fi
}

# frames CK FQN: 'chunk frame file file_offset stored raw_offset raw_size codec
# checksum' lines parsed from `ckpt info CK FQN` (tests/helpers/ckinfo.py).
frames() {
    "${_TO[@]}" "$CKPT" info "$1" "$2" >"$TMP/.info" 2>"$TMP/.info.err" || {
        echo "ckpt info $1 $2 failed: $(cat "$TMP/.info.err")" >&2
        return 1
    }
    "$PY" "$HELPERS/ckinfo.py" frames <"$TMP/.info"
}

# fault_line_ok FQN FRAME FILE_RE LO HI WHAT_RE: stdout ($OUT) has a FAULT line
# for tensor FQN, frame FRAME, a file matching FILE_RE, an offset in [LO, HI],
# and a message matching WHAT_RE.
fault_line_ok() {
    "$PY" - "$OUT" "$@" <<'EOF'
import re, sys
out, fqn, frame, file_re, lo, hi, what_re = sys.argv[1:8]
pat = re.compile(r"^FAULT tensor=(\S*) chunk=(\S+) frame=(\S+) "
                 r"file=(\S*) offset=(\S+): (.*)$")
seen = []
for line in open(out, errors="replace"):
    m = pat.match(line.rstrip("\n"))
    if not m:
        continue
    seen.append(line.strip())
    t, c, f, fi, off, what = m.groups()
    if (t == fqn and (frame == "*" or f == frame) and re.search(file_re, fi)
            and off.isdigit() and int(lo) <= int(off) <= int(hi)
            and re.search(what_re, what, re.I)):
        sys.exit(0)
print("     no FAULT line matches tensor=%s frame=%s file~/%s/ offset in [%s,%s] "
      "what~/%s/; FAULT lines: %s" % (fqn, frame, file_re, lo, hi, what_re,
                                       seen or "none"))
sys.exit(1)
EOF
}

# fault_fields_ok WHAT: every FAULT line has the documented fields, none of
# them empty ('-' stands for "not applicable", as for chunk= and frame=).
fault_fields_ok() {
    local badl
    badl=$(grep '^FAULT' "$OUT" | grep -E -v '^FAULT tensor=[^ ]+ chunk=[^ ]+ frame=[^ ]+ file=[^ ]+ offset=[^ ]+: .+$')
    if [ -z "$badl" ] && grep -q '^FAULT' "$OUT"; then
        ok "$*: FAULT lines have non-empty tensor=/chunk=/frame=/file=/offset= fields"
    else
        bad "$*: FAULT line with an empty field: $(echo "$badl" | head -2 | tr '\n' '~')"
    fi
}

no_fault_for() {
    if grep -q "^FAULT tensor=$1 " "$OUT"; then
        bad "$2: verify reports a fault in intact tensor $1"
    else
        ok "$2: no fault reported for intact tensor $1"
    fi
}

# ------------------------------------------- 1. a flipped byte in a raw frame
echo "# ---- flipped byte in a raw-coded frame"
CK=$ROOT/flip-raw
run_ckpt pack --codec raw --frame-size 4096 "$CK" a=$IN/a.npy b=$IN/b.npy
expect_ok "flip-raw: pack"
"$PY" "$REF" bytes "$IN/a.npy" >"$TMP/a.ref"
"$PY" "$REF" bytes "$IN/b.npy" >"$TMP/b.ref"
if frames "$CK" a >"$TMP/fa"; then
    # the middle frame of a (frame 3 of 7)
    read -r chunk fr file foff stored roff rsize codec _ < <(sed -n 4p "$TMP/fa")
    echo "     target: a chunk=$chunk frame=$fr $file @$foff stored=$stored raw=$roff+$rsize $codec"
    if [ "${fr:-}" = 3 ] && [ "$codec" = raw ] && [ "$(wc -l <"$TMP/fa")" -eq 7 ]; then
        ok "flip-raw: a has 7 raw frames of 4096 bytes (info)"
    else
        bad "flip-raw: a should have 7 raw frames: $(tr '\n' ';' <"$TMP/fa")"
    fi
    flip_byte "$CK/$file" $((foff + stored / 2)) || exit 99
    run_ckpt verify "$CK"
    expect_rc 1 "flip-raw: verify"
    if fault_line_ok a "$fr" 'rank0\.shard$' "$foff" $((foff + stored)) 'checksum'; then
        ok "flip-raw: verify FAULT line names tensor a, frame $fr, the shard, the offset, 'checksum'"
    else
        bad "flip-raw: verify FAULT line"; _show
    fi
    no_fault_for b "flip-raw"
    fault_fields_ok "flip-raw: verify"
    nf=$(grep -c '^FAULT' "$OUT")
    expect_err_re "^ckpt: .*flip-raw: $nf faults? found" "flip-raw: verify counts its $nf FAULT line(s) on stderr"
    run_ckpt cat "$CK" a
    expect_rc 1 "flip-raw: cat a"
    expect_err_re 'checksum' "flip-raw: cat a reports the checksum"
    expect_err_prefix "flip-raw: cat a"
    run_ckpt cat "$CK" b
    expect_ok "flip-raw: cat b"
    same_bytes "flip-raw: cat b gives b's bytes" "$TMP/b.ref" "$OUT"
    # Rows 0:2 of a lie in frame 0: a slice that avoids the bad frame reads.
    run_ckpt cat "$CK" a --slice 0:2
    expect_ok "flip-raw: cat a --slice 0:2 (not in the damaged frame)"
    "$PY" "$REF" slice "$IN/a.npy" 0:2 >"$TMP/a02.ref"
    same_bytes "flip-raw: cat a --slice 0:2 bytes" "$TMP/a02.ref" "$OUT"
    # ... and one that covers it fails.
    run_ckpt cat "$CK" a --slice 30:34
    expect_rc 1 "flip-raw: cat a --slice 30:34 (in the damaged frame)"
    expect_err_re 'checksum' "flip-raw: cat a --slice 30:34 reports the checksum"
else
    bad "flip-raw: ckpt info a (frame list)"
fi
intact "flip-raw"

# ------------------------------------------ 2. a flipped byte in a zstd frame
echo "# ---- flipped byte in a zstd-coded frame"
CK=$ROOT/flip-zstd
run_ckpt pack --codec zstd --frame-size 64K "$CK" z=$IN/z.npy c=$IN/c.npy
expect_ok "flip-zstd: pack"
"$PY" "$REF" bytes "$IN/c.npy" >"$TMP/c.ref"
if frames "$CK" z >"$TMP/fz"; then
    read -r chunk fr file foff stored roff rsize codec _ < <(sed -n 2p "$TMP/fz")
    echo "     target: z chunk=$chunk frame=$fr $file @$foff stored=$stored $codec"
    if [ "$codec" = zstd ]; then ok "flip-zstd: z frame 1 is zstd-coded"; else bad "flip-zstd: z frame 1 codec '$codec', want zstd"; fi
    flip_byte "$CK/$file" $((foff + stored / 2)) || exit 99
    run_ckpt verify "$CK"
    expect_rc 1 "flip-zstd: verify"
    if fault_line_ok z "$fr" 'rank0\.shard$' "$foff" $((foff + stored)) 'checksum|corrupt|decod|zstd'; then
        ok "flip-zstd: verify FAULT line names tensor z, frame $fr, the shard and offset"
    else
        bad "flip-zstd: verify FAULT line"; _show
    fi
    no_fault_for c "flip-zstd"
    run_ckpt cat "$CK" z
    expect_rc 1 "flip-zstd: cat z"
    expect_err_re 'checksum|corrupt|decod' "flip-zstd: cat z says the frame is corrupt"
    run_ckpt cat "$CK" c
    expect_ok "flip-zstd: cat c"
    same_bytes "flip-zstd: cat c gives c's bytes" "$TMP/c.ref" "$OUT"
else
    bad "flip-zstd: ckpt info z (frame list)"
fi
intact "flip-zstd"

# -------------------------------------------------------- 3. truncated shard
echo "# ---- truncated shard"
CK=$ROOT/trunc
run_ckpt pack --codec raw --frame-size 4096 "$CK" a=$IN/a.npy b=$IN/b.npy
expect_ok "trunc: pack"
sz=$(stat -c %s "$CK/data/rank0.shard")
# The frame that ends last in the shard is lost whichever tensor comes first.
last=$( { frames "$CK" a | sed 's/^/a /'; frames "$CK" b | sed 's/^/b /'; } |
        sort -k5,5n | tail -1)
read -r lastt _ _ _ lastoff _ <<<"$last"
truncate -s $((sz - 100)) "$CK/data/rank0.shard"
run_ckpt verify "$CK"
expect_rc 1 "trunc: verify"
if grep -E -q 'rank0\.shard' "$OUT" "$ERR" && grep -E -q -i 'truncat|short|size' "$OUT" "$ERR"; then
    ok "trunc: verify names rank0.shard and the truncation"
else
    bad "trunc: verify names rank0.shard and the truncation"; _show
fi
fault_fields_ok "trunc: verify"
if [ -n "${lastt:-}" ]; then
    run_ckpt cat "$CK" "$lastt"
    expect_rc 1 "trunc: cat $lastt (its last frame is cut)"
    expect_err_re 'truncat' "trunc: cat $lastt says 'truncated'"
else
    bad "trunc: could not list the frames"
fi
intact "trunc"

# ------------------------------------------------------------ grown shard
echo "# ---- shard with bytes appended"
CK=$ROOT/grown
run_ckpt pack --codec raw "$CK" a=$IN/a.npy b=$IN/b.npy
expect_ok "grown: pack"
printf 'appended junk' >>"$CK/data/rank0.shard"
run_ckpt verify "$CK"
expect_rc 1 "grown: verify (the shard's size differs from the recorded one)"
if grep -q 'rank0\.shard' "$OUT" && grep -E -q -i 'grown|size|longer|larger' "$OUT"; then
    ok "grown: verify names rank0.shard and its size"
else
    bad "grown: verify names rank0.shard and its size"; _show
fi
intact "grown"

# ---------------------------------------------------------- 4. missing shard
echo "# ---- missing shard"
CK=$ROOT/noshard
run_ckpt pack --grid 2 --codec raw "$CK" a=$IN/a.npy b=$IN/b.npy
expect_ok "noshard: pack --grid 2"
rm -f "$CK/data/rank1.shard"
run_ckpt verify "$CK"
expect_rc 1 "noshard: verify"
if grep -q 'rank1\.shard' "$OUT" "$ERR"; then ok "noshard: verify names rank1.shard"; else bad "noshard: verify names rank1.shard"; _show; fi
fault_fields_ok "noshard: verify"
run_ckpt info "$CK"
expect_ok "noshard: info still shows the summary"
expect_out_re '^  data/rank1\.shard missing$' "noshard: info marks data/rank1.shard missing"
run_ckpt cat "$CK" a
expect_rc 1 "noshard: cat a"
expect_err_re 'rank1\.shard' "noshard: cat a names the missing file"
expect_err_re 'missing|no such file|does not exist|not found' "noshard: cat a says the file is missing"
# Rows 0:32 of a are rank0's piece: still readable.
run_ckpt cat "$CK" a --slice 0:4
expect_ok "noshard: cat a --slice 0:4 (rank0's piece)"
"$PY" "$REF" slice "$IN/a.npy" 0:4 >"$TMP/a04.ref"
same_bytes "noshard: rank0's rows of a" "$TMP/a04.ref" "$OUT"
intact "noshard"

# ------------------------------------------------- 5. not committed: no index
echo "# ---- directory without index.db"
PEND=$ROOT/pending
mkdir -p "$PEND/data" "$PEND/.pending"
echo junk >"$PEND/data/rank0.shard"
EMPTY=$ROOT/emptydir
mkdir -p "$EMPTY"
NOTCOMMITTED='index\.db|not committed|uncommitted|not a (committed )?checkpoint'
for cmd in info verify; do
    for d in "$PEND" "$EMPTY"; do
        run_ckpt $cmd "$d"
        expect_rc 1 "no index: $cmd $(basename "$d")"
        expect_err_re "$NOTCOMMITTED" "no index: $cmd $(basename "$d") says it is not committed"
    done
done
for d in "$PEND" "$EMPTY"; do
    run_ckpt cat "$d" a
    expect_rc 1 "no index: cat $(basename "$d") a"
    expect_err_re "$NOTCOMMITTED" "no index: cat $(basename "$d") says it is not committed"
done
# ls of an interrupted save (it has data/ and .pending/: not a root either)
run_ckpt ls "$PEND"
expect_rc 1 "no index: ls pending"
expect_err_re "$NOTCOMMITTED" "no index: ls pending says it is not committed"
run_ckpt unpack "$PEND" "$TMP/unp-pending"
expect_rc 1 "no index: unpack pending"
expect_err_re "$NOTCOMMITTED" "no index: unpack pending says it is not committed"
run_ckpt cat "$ROOT/does-not-exist" a
expect_rc 1 "cat of a missing directory"
expect_err_re 'does-not-exist' "cat of a missing directory names it"
intact "no index"

# -------------------------------------------------------- 6. foreign indexes
echo "# ---- garbage, foreign and newer index.db"
mkidx() {   # NAME: a copy of step-1 whose index.db the caller replaces
    rm -rf "$ROOT/$1"
    cp -r "$GOOD" "$ROOT/$1"
}
mkidx garbage
"$PY" -c 'import os,sys; open(sys.argv[1],"wb").write(os.urandom(8192))' "$ROOT/garbage/index.db"
mkidx foreign
rm -f "$ROOT/foreign/index.db"
"$PY" - "$ROOT/foreign/index.db" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("CREATE TABLE tensors (fqn TEXT, dtype TEXT, shape TEXT)")
c.execute("INSERT INTO tensors VALUES ('a', 'f32', '[64,100]')")
c.commit()
EOF
mkidx newer
"$PY" - "$ROOT/newer/index.db" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("PRAGMA user_version = 999")
c.commit()
EOF
for name in garbage foreign; do
    for cmd in ls info verify cat; do
        args=("$ROOT/$name")
        [ "$cmd" = cat ] && args+=(a)
        run_ckpt $cmd "${args[@]}"
        expect_rc 1 "$name index: $cmd"
        expect_err_re 'not a ckptfs index' "$name index: $cmd says 'not a ckptfs index'"
    done
done
mkidx truncidx
head -c 3000 "$GOOD/index.db" >"$ROOT/truncidx/index.db"
for cmd in ls info verify cat; do
    args=("$ROOT/truncidx")
    [ "$cmd" = cat ] && args+=(a)
    run_ckpt $cmd "${args[@]}"
    expect_rc 1 "truncated index: $cmd"
    expect_err_re 'truncidx/index\.db' "truncated index: $cmd names the index file"
done
# ls of the root: the broken ones are listed with TENSORS '?', ls exits 1.
run_ckpt ls "$ROOT"
expect_rc 1 "ls ROOT with unreadable indexes"
for n in garbage foreign; do
    if awk -v n=$n '$1 == n && $2 == "committed" && $NF == "?"' "$OUT" | grep -q .; then
        ok "ls ROOT: $n committed, tensors '?'"
    else
        bad "ls ROOT: $n line: $(awk -v n=$n '$1 == n' "$OUT")"
    fi
done
expect_err_re 'garbage/index\.db' "ls ROOT names the unreadable garbage/index.db"
if awk '$1 == "step-1" && $2 == "committed" && $NF == "2"' "$OUT" | grep -q . &&
   awk '$1 == "pending" && $2 == "uncommitted" && $NF == "-"' "$OUT" | grep -q . &&
   ! grep -q '^emptydir ' "$OUT"; then
    ok "ls ROOT: the readable ones are listed as usual (step-1 2 tensors, pending uncommitted, emptydir not listed)"
else
    bad "ls ROOT: $(tr '\n' ';' <"$OUT")"
fi
for cmd in info verify; do
    run_ckpt $cmd "$ROOT/newer"
    expect_rc 1 "newer format: $cmd"
    expect_err_re 'newer|version|format' "newer format: $cmd names the format version"
done
intact "foreign indexes"

# --------------------------------------------------------- 7. bad pack input
echo "# ---- bad pack input"
# pack_fails RC NAME ERE DESC ARGS...: pack into $ROOT/NAME (which does not
# exist) fails with status RC ('-' = any failure; docs/CLI.md: 2 for usage
# errors, 1 for other failures), message ~ ERE, and leaves nothing: no
# index.db, and not even the directories it made; step-1 intact.
pack_fails() {
    local want=$1 name=$2 re=$3 desc=$4
    shift 4
    run_ckpt pack "$ROOT/$name" "$@"
    if [ "$want" = - ]; then expect_fail "$desc: pack fails"; else expect_rc "$want" "$desc: pack fails"; fi
    expect_err_prefix "$desc"
    expect_err_re "$re" "$desc: message"
    no_index "$ROOT/$name" "$desc"
    local top=$ROOT/${name%%/*}
    if [ ! -e "$top" ]; then ok "$desc: pack removed the directories it made"; else bad "$desc: pack left $top behind"; fi
    intact "$desc"
}
pack_fails 2 bad-dtype 'f17' "unknown dtype" x=$IN/f32x4.bin:f17:4
expect_err_re "unknown dtype 'f17' \\(valid: f64, f32, f16, bf16, .*, bool, bytes" "unknown dtype: the message lists the valid names"
pack_fails - bad-shape-ovf 'overflow|too large|too big' "overflowing shape" \
    x=$IN/f32x4.bin:f32:4611686018427387904,4
pack_fails 2 bad-shape-neg 'shape|-1|negative' "negative dim" x=$IN/f32x4.bin:f32:-1,4
pack_fails 1 bad-size 'f32x4_short\.bin' "raw file of the wrong size" x=$IN/f32x4_short.bin:f32:4
expect_err_re '15|16|size|bytes' "raw file of the wrong size: says the sizes"
pack_fails - bad-slash 'a/b' "FQN with '/'" a/b=$IN/a.npy
expect_err_re "'/'|slash|character|invalid|not allowed" "FQN with '/': says why"
pack_fails - bad-ctl 'control|character|invalid|not allowed' "FQN with a tab" $'a\tb'=$IN/a.npy
pack_fails 2 bad-empty-name 'name|fqn|empty' "empty FQN" =$IN/a.npy
pack_fails 1 bad-missing 'nonexistent\.npy' "missing input file" x=$IN/nonexistent.npy
pack_fails 1 bad-bigendian 'be\.npy' "big-endian .npy" x=$IN/be.npy
expect_err_re 'endian|>f4|byte order' "big-endian .npy: says why"
pack_fails 1 bad-void 'void\.npy' "|V2 .npy" x=$IN/void.npy
pack_fails 1 bad-complex 'cplx\.npy' "clongdouble .npy" x=$IN/cplx.npy
expect_err_re "unsupported dtype '<c32'" "clongdouble .npy: names the dtype"
pack_fails 1 bad-cut 'cut\.npy' "truncated .npy" x=$IN/cut.npy
pack_fails 1 bad-junk 'junk\.npy' "not a .npy" x=$IN/junk.npy
pack_fails 2 bad-dup 'dup\.name' "same FQN twice" \
    dup.name=$IN/a.npy dup.name=$IN/b.npy
pack_fails 2 bad-codec 'lz4' "unknown codec" --codec lz4 x=$IN/a.npy
pack_fails 2 bad-fsize 'frame' "frame size below 4K" --frame-size 100 x=$IN/a.npy
pack_fails 2 bad-grid 'grid' "grid 0" --grid 0 x=$IN/a.npy
pack_fails 2 bad-grid2 'grid' "grid 2x" --grid 2x x=$IN/a.npy
pack_fails - bad-meta 'world_size' "--meta of a key ckptfs sets itself" --meta world_size=3 x=$IN/a.npy
DIMS32=$(printf '1,%.0s' $(seq 31))1
pack_fails 2 bad-dims33 'dimension' "33 dimensions (more than 32)" x=$IN/raw4.bin:f32:$DIMS32,1
pack_fails - bad-utf8 'UTF-8|utf8|invalid' "FQN that is not UTF-8" $'bad\xff.x'=$IN/raw4.bin
pack_fails - bad-dots 'a\.\.b' "FQN with an empty dotted component" a..b=$IN/raw4.bin
pack_fails - bad-dots2 "'\.a'|component|empty" "FQN starting with a dot" .a=$IN/raw4.bin
pack_fails - bad-dir 'regular|directory' "an input that is a directory" x=$IN
pack_fails - bad-devnull 'regular|/dev/null' "an input that is /dev/null" x=/dev/null
pack_fails 1 new-parent/deep/ck 'cut\.npy' "bad input, OUT under missing parents" x=$IN/cut.npy
# Into a committed checkpoint: refused, and it stays as it was.
run_ckpt pack "$GOOD" c=$IN/c.npy
expect_fail "pack into the committed step-1"
expect_err_re 'step-1|exists|committed|not empty' "pack into the committed step-1: message"
intact "pack into step-1"
mkdir -p "$ROOT/nonempty" && echo keep >"$ROOT/nonempty/keep.txt"
run_ckpt pack "$ROOT/nonempty" c=$IN/c.npy
expect_fail "pack into a non-empty directory"
expect_err_re 'nonempty|not empty|exists' "pack into a non-empty directory: message"
no_index "$ROOT/nonempty" "pack into a non-empty directory"
if [ "$(cat "$ROOT/nonempty/keep.txt")" = keep ]; then ok "non-empty directory: its file is untouched"; else bad "non-empty directory: its file changed"; fi

# ---------------------------------------------- 8. empty tensors and scalars
echo "# ---- empty tensors, scalars, empty byte objects"
CK=$ROOT/edge
run_ckpt pack --grid 2x3 "$CK" e=$IN/empty.npy s=$IN/scalar.npy \
    eraw=$IN/empty.bin:f32:0,5 sraw=$IN/scalar.bin:f64: \
    etxt=$IN/empty.txt h=$IN/hello.txt v2=$IN/v2.npy v3=$IN/v3.npy \
    trail=$IN/trail.npy sp1=$IN/raw24.bin:float32:2,3 sp2="$IN/raw24.bin:<i4:[2, 3]" \
    sp3=$IN/raw24.bin:torch.bfloat16:12 bobj=$IN/raw24.bin:bytes:24
expect_ok "edge: pack empty tensors, scalars, byte objects, .npy 2.0/3.0, dtype spellings"
for t in e eraw etxt; do
    run_ckpt cat "$CK" $t
    expect_ok "edge: cat $t (empty)"
    expect_empty_out "edge: cat $t outputs 0 bytes"
done
"$PY" "$REF" bytes "$IN/scalar.npy" >"$TMP/s.ref"
run_ckpt cat "$CK" s
expect_ok "edge: cat s (0-d .npy)"
same_bytes "edge: cat s = the scalar's 8 bytes" "$TMP/s.ref" "$OUT"
"$PY" "$REF" bytes "$IN/scalar.bin:f64:" >"$TMP/sraw.ref"
run_ckpt cat "$CK" sraw
expect_ok "edge: cat sraw (0-d raw)"
same_bytes "edge: cat sraw = the file's 8 bytes" "$TMP/sraw.ref" "$OUT"
run_ckpt cat "$CK" h
same_bytes "edge: cat h = the text file" "$IN/hello.txt" "$OUT"
"$PY" "$REF" bytes "$IN/v.npy" >"$TMP/v.ref"
for t in v2 v3 trail; do
    run_ckpt cat "$CK" $t
    same_bytes "edge: cat $t (.npy $t) = the array's bytes" "$TMP/v.ref" "$OUT"
done
for t in sp1 sp2 sp3 bobj; do
    run_ckpt cat "$CK" $t
    same_bytes "edge: cat $t = the raw file's bytes" "$IN/raw24.bin" "$OUT"
done
run_ckpt ls "$CK"
for want in "sp1 f32 2,3" "sp2 i32 2,3" "sp3 bf16 12" "bobj bytes 24" "v3 i16 3,4,5" "s f64 ()" "e f32 0,5"; do
    set -- $want
    if awk -v n=$1 -v d=$2 -v s=$3 '$1 == n && $2 == d && $3 == s' "$OUT" | grep -q .; then
        ok "edge: ls shows $1 as $2 [$3]"
    else
        bad "edge: ls shows $1 as $2 [$3]: $(awk -v n=$1 '$1 == n' "$OUT")"
    fi
done
run_ckpt verify "$CK"
expect_ok "edge: verify"
expect_out_re '^ok: 13 tensors' "edge: verify counts 13 tensors"
run_ckpt unpack "$CK" "$TMP/edge-un"
expect_ok "edge: unpack"
if [ $RC -eq 0 ]; then
    printf '%s\n' "$IN/empty.npy|$TMP/edge-un/e.npy" "$IN/scalar.npy|$TMP/edge-un/s.npy" \
        "$IN/v.npy|$TMP/edge-un/v3.npy" "$IN/raw24.bin:bf16:12|$TMP/edge-un/sp3.npy" \
        "$IN/raw24.bin|$TMP/edge-un/bobj.bin" \
        "$IN/empty.bin:f32:0,5|$TMP/edge-un/eraw.npy" "$IN/scalar.bin:f64:|$TMP/edge-un/sraw.npy" \
        "$IN/empty.txt|$TMP/edge-un/etxt.bin" "$IN/hello.txt|$TMP/edge-un/h.bin" |
        "$PY" "$REF" cmpmany >"$TMP/cmp"
    while read -r word rest; do
        if [ "$word" = ok ]; then ok "edge: unpack $(basename "${rest%%:*}")"; else bad "edge: unpack $rest"; fi
    done <"$TMP/cmp"
fi
intact "edge"

# 32 dimensions, a non-ASCII FQN, a long FQN that unpack cannot use as a name
CK=$ROOT/names
LONG=$(printf 'x%.0s' $(seq 300))
run_ckpt pack "$CK" d32=$IN/raw4.bin:f32:$DIMS32 '模型.权重'=$IN/hello.txt "$LONG"=$IN/raw4.bin
expect_ok "names: pack 32 dims, a UTF-8 FQN and a 300-byte FQN"
run_ckpt cat "$CK" d32
same_bytes "names: cat of the 32-d tensor" "$IN/raw4.bin" "$OUT"
run_ckpt cat "$CK" '模型.权重'
same_bytes "names: cat of the UTF-8 FQN" "$IN/hello.txt" "$OUT"
run_ckpt cat "$CK" "$LONG"
same_bytes "names: cat of the 300-byte FQN" "$IN/raw4.bin" "$OUT"
run_ckpt unpack "$CK" "$TMP/names-un"
expect_rc 1 "names: unpack fails for a 300-byte file name"
expect_err_re 'too long' "names: unpack says the name is too long"
run_ckpt pack "$ROOT/names2" d32=$IN/raw4.bin:f32:$DIMS32 '模型.权重'=$IN/hello.txt
run_ckpt unpack "$ROOT/names2" "$TMP/names2-un"
expect_ok "names: unpack of the UTF-8 FQN and the 32-d tensor"
same_bytes "names: unpack wrote 模型.权重.bin" "$IN/hello.txt" "$TMP/names2-un/模型.权重.bin"
printf '%s\n' "$IN/raw4.bin:f32:$DIMS32|$TMP/names2-un/d32.npy" | "$PY" "$REF" cmpmany >"$TMP/cmp"
report "$TMP/cmp" "names: unpack 32-d: "
intact "names"

# ------------------------------------------------------------ 9. bad slices
echo "# ---- bad slices and names"
run_ckpt cat "$GOOD" a --slice 0:10:2
expect_fail "slice with a step"
expect_err_re 'step|slice' "slice with a step: message"
run_ckpt cat "$GOOD" a --slice 64
expect_fail "slice index 64 of a dim of 64"
expect_err_re 'range|64|bound' "slice index out of range: message"
expect_err_re "bad slice '64' for shape 64,100: " "slice error: the shape comma-separated, as ls prints it"
run_ckpt cat "$GOOD" a --slice 0,0,0
expect_fail "slice with 3 indices on a 2-d tensor"
expect_err_re 'dim|index|indices|slice' "too many slice indices: message"
run_ckpt cat "$GOOD" a --slice x:y
expect_fail "slice 'x:y'"
run_ckpt cat "$GOOD" no.such.tensor
expect_rc 1 "cat of an unknown tensor"
expect_err_re 'no\.such\.tensor' "cat of an unknown tensor names it"
run_ckpt info "$GOOD" no.such.tensor
expect_rc 1 "info of an unknown tensor"
expect_err_re 'no\.such\.tensor' "info of an unknown tensor names it"
intact "bad slices"

# -------------------------------------------------------------------- 10. gc
echo "# ---- gc after an interrupted save"
R2=$TMP/root2
mkdir -p "$R2"
run_ckpt pack "$R2/step-1" a=$IN/a.npy
expect_ok "gc: pack step-1"
run_ckpt pack "$R2/step-2" b=$IN/b.npy
expect_ok "gc: pack step-2"
mkdir -p "$R2/step-3/data" "$R2/step-3/.pending" "$R2/notes"
head -c 5000 /dev/urandom >"$R2/step-3/data/rank0.shard"
echo "plan" >"$R2/step-3/.pending/rank0.plan"
echo "keep me" >"$R2/notes/todo.txt"
echo "top" >"$R2/README"
before=$(cd "$R2" && find . | sort)
run_ckpt gc --dry-run --min-age 0 "$R2"
expect_ok "gc --dry-run"
expect_out_re '^would remove step-3: unfinished save' "gc --dry-run lists step-3"
# (and the plans step-2's commit moved aside, .ckpt-gc.plans.*.step-2)
if grep -v '^would remove \.ckpt-gc\.plans\.[0-9]*\.[0-9]*\.step-2: the plans of a committed save$' "$OUT" |
       grep -E -q 'step-1|step-2|notes|README'; then bad "gc --dry-run lists only step-3: $(tr '\n' ';' <"$OUT")"; else ok "gc --dry-run lists only step-3"; fi
if [ "$(cd "$R2" && find . | sort)" = "$before" ]; then ok "gc --dry-run removes nothing"; else bad "gc --dry-run changed the root"; fi
run_ckpt gc "$R2"
expect_ok "gc with the default --min-age"
expect_out_re '^kept step-3: unfinished save written .* ago, less than --min-age 1h00m' "gc keeps a save written less than an hour ago"
[ -d "$R2/step-3" ] && ok "gc with the default --min-age keeps step-3" || bad "gc removed the fresh step-3"
run_ckpt gc --min-age 0 "$R2"
expect_ok "gc --min-age 0"
expect_out_re '^removed step-3: unfinished save, no writer holds its lease' "gc prints 'removed step-3'"
if grep -E -q 'step-1|step-2|notes|README' "$OUT"; then bad "gc mentions only step-3: $(tr '\n' ';' <"$OUT")"; else ok "gc mentions only step-3"; fi
if [ ! -e "$R2/step-3" ]; then ok "gc removed step-3"; else bad "gc left step-3: $(find "$R2/step-3" | tr '\n' ' ')"; fi
for s in step-1 step-2; do
    run_ckpt verify "$R2/$s"
    expect_ok "gc: $s still verifies"
done
if [ "$(cat "$R2/notes/todo.txt" 2>/dev/null)" = "keep me" ] && [ "$(cat "$R2/README" 2>/dev/null)" = top ]; then
    ok "gc: unrelated 'notes' and README untouched"
else
    bad "gc: unrelated 'notes' or README touched"
fi
run_ckpt gc --min-age 0 "$R2"
expect_ok "gc again"
expect_empty_out "gc again: nothing left to remove"
# A single uncommitted checkpoint directory as ROOT.
mkdir -p "$R2/step-4/.pending"
run_ckpt gc --min-age 0 "$R2/step-4"
expect_ok "gc of a single uncommitted directory"
if [ ! -e "$R2/step-4" ]; then ok "gc removed the single uncommitted step-4"; else bad "gc left the single uncommitted step-4"; fi
# A committed checkpoint as ROOT: refused, never removed.
run_ckpt gc "$R2/step-1"
expect_rc 1 "gc of a committed checkpoint is refused"
if [ -f "$R2/step-1/index.db" ]; then ok "gc of a committed checkpoint leaves it"; else bad "gc removed the committed step-1"; fi
# A candidate with an unexpected subdirectory is skipped with a warning;
# a symbolic link to an uncommitted save is neither followed nor removed.
mkdir -p "$R2/step-5/data" "$R2/step-5/mine" "$TMP/elsewhere/data"
echo keep >"$R2/step-5/mine/file"
ln -s "$TMP/elsewhere" "$R2/link-6"
mkdir -p "$R2/step-7/.pending"
run_ckpt gc -n --min-age 0 "$R2"
expect_rc 1 "gc -n with a suspicious candidate exits 1"
expect_out_re '^would remove step-7: ' "gc -n (= --dry-run) lists step-7"
[ -d "$R2/step-7" ] && ok "gc -n removes nothing" || bad "gc -n removed step-7"
run_ckpt gc --min-age 0 "$R2"
expect_rc 1 "gc with a suspicious candidate exits 1"
expect_err_re '^ckpt: skipping .*step-5' "gc warns that it skips step-5"
expect_out_re '^removed step-7: ' "gc still removes step-7"
if [ -f "$R2/step-5/mine/file" ] && [ -d "$R2/step-5/data" ]; then ok "gc left step-5 (it has a 'mine/' subdirectory) whole"; else bad "gc touched step-5"; fi
if [ -L "$R2/link-6" ] && [ -d "$TMP/elsewhere/data" ]; then ok "gc neither removed nor followed the link link-6"; else bad "gc removed link-6 or its target"; fi
if grep -q 'link-6' "$OUT"; then bad "gc mentions link-6"; else ok "gc does not mention link-6"; fi
run_ckpt verify "$R2/step-1"
expect_ok "gc: step-1 still verifies after 'gc step-1'"
intact "gc"

# ---------------------------------------------------------- 11. bad usage
echo "# ---- bad usage: exit 2"
usage2() {
    local desc=$1
    shift
    run_ckpt "$@"
    expect_rc 2 "usage: $desc"
    expect_err_prefix "usage: $desc"
}
usage2 "no command"
usage2 "unknown command" frobnicate
usage2 "pack without arguments" pack
usage2 "pack without NAME=FILE" pack "$ROOT/x1"
usage2 "pack with an unknown option" pack --bogus "$ROOT/x2" a=$IN/a.npy
usage2 "pack --codec without a value" pack "$ROOT/x3" a=$IN/a.npy --codec
usage2 "unpack with one argument" unpack "$GOOD"
usage2 "ls without arguments" ls
usage2 "ls with an unknown option" ls --bogus "$GOOD"
usage2 "info without arguments" info
usage2 "cat with one argument" cat "$GOOD"
usage2 "cat --slice without a value" cat "$GOOD" a --slice
usage2 "verify without arguments" verify
usage2 "verify with two checkpoints" verify "$GOOD" "$GOOD"
usage2 "gc without arguments" gc
usage2 "gc with an unknown option" gc --force "$ROOT"
run_ckpt gc "$ROOT/no-such-root"
expect_rc 1 "gc of a missing ROOT"
expect_err_re 'no-such-root' "gc of a missing ROOT names it"
for x in x1 x2 x3; do no_index "$ROOT/$x" "usage error $x"; done
intact "bad usage"

summary
