#!/bin/bash
# hostile.sh - checkpoints someone else wrote, made hostile on purpose
# (docs/TRUST.md): each attack below once got through `ckpt` and must now
# be refused with a message saying why, with nothing read from or written
# outside the directories given.
#
#   escape on write   an FQN '../../ESCAPED' in index.db: ls, info, cat
#                     refuse it, unpack writes nothing outside DIR; a
#                     symbolic link in DIR is replaced, not followed
#   overlap           chunks edited to overlap (offsets '[0,0]', or '[8,0]'
#                     as one bit flip makes it), leave a hole, or be gone:
#                     cat and unpack refuse before any byte, verify names
#                     the chunks
#   duplicate names   UNIQUE dropped and a tensor renamed: refused
#   frame size        a frame claiming 2^40 raw bytes: refused, nothing
#                     allocated
#   links             a .distcp linked to a file outside: cat, verify and
#                     import refuse it (--follow-links reads it); a shard
#                     linked outside: refused, its size not shown; a
#                     Hugging Face cache snapshot reads without opt-in
#   safetensors NUL   a name with \u0000 (once cut short): refused
#   control chars     names and values with control characters: escaped
#                     by ls and info, refused as FQNs
# Every reference is computed here (NumPy, or the bytes of the files).
. "$(dirname "$0")/lib.sh"
need_python

npy() {   # npy FILE EXPR: saves numpy's EXPR (np in scope) to FILE
    "$PY" -c "import sys, numpy as np; np.save(sys.argv[1], $2)" "$1" || exit 99
}
raw_of() {   # raw_of FILE.npy OUT: the array's row-major bytes
    "$PY" -c 'import sys, numpy as np; open(sys.argv[2], "wb").write(np.ascontiguousarray(np.load(sys.argv[1])).tobytes())' "$1" "$2"
}
sql() {   # sql DB STATEMENTS
    "$PY" -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit()' "$1" "$2" || exit 99
}
# Tensors of two writers: model.a and model.b (f32 100x100) split by rows.
npy "$TMP/a.npy" 'np.arange(10000, dtype=np.float32).reshape(100, 100)'
npy "$TMP/b.npy" '-np.arange(10000, dtype=np.float32).reshape(100, 100)'
raw_of "$TMP/a.npy" "$TMP/a.raw"
raw_of "$TMP/b.npy" "$TMP/b.raw"
run_ckpt pack --grid 2 "$TMP/ck" "model.a=$TMP/a.npy" "model.b=$TMP/b.npy"
expect_ok "pack the checkpoint the attacks start from"
[ "$RC" -eq 0 ] || summary
fresh() {   # fresh NAME: a copy of the checkpoint to damage
    rm -rf "$TMP/$1"
    cp -r "$TMP/ck" "$TMP/$1"
}

# ------------------------------------------------------------ escape on write
echo "# ---- an FQN that is a path out of DIR"
fresh esc
sql "$TMP/esc/index.db" "UPDATE tensors SET fqn = '../../ESCAPED' WHERE fqn = 'model.b'"
mkdir -p "$TMP/w/x/out"
run_ckpt unpack "$TMP/esc" "$TMP/w/x/out"
expect_fail "unpack of an index naming '../../ESCAPED'"
expect_err_re "damaged index: invalid fqn '\.\./\.\./ESCAPED'" "unpack says which name is invalid"
if [ -z "$(find "$TMP/w" -name 'ESCAPED*' | head -1)" ]; then
    ok "nothing named ESCAPED was written anywhere under $TMP/w"
else
    bad "unpack wrote $(find "$TMP/w" -name 'ESCAPED*' | tr '\n' ' ')"
fi
for cmd in "ls" "info" "cat:model.a" "verify"; do
    IFS=: read -r c arg <<<"$cmd"
    run_ckpt "$c" "$TMP/esc" ${arg:+"$arg"}
    expect_fail "$c of an index naming '../../ESCAPED'"
    expect_err_re "invalid fqn '\.\./\.\./ESCAPED'" "$c names the invalid FQN"
done
# a name that is valid but whose file in DIR is a link out of DIR
mkdir -p "$TMP/u1"
echo "keep me" >"$TMP/victim"
ln -s "$TMP/victim" "$TMP/u1/model.a.npy"
run_ckpt unpack "$TMP/ck" "$TMP/u1"
expect_ok "unpack into a DIR where model.a.npy is a symbolic link out of it"
if [ "$(cat "$TMP/victim")" = "keep me" ]; then ok "the link's target is untouched"; else bad "unpack wrote through the link into $TMP/victim"; fi
if [ -f "$TMP/u1/model.a.npy" ] && [ ! -L "$TMP/u1/model.a.npy" ]; then
    ok "the link was replaced by the tensor's file"
    "$PY" -c 'import sys, numpy as np; sys.exit(0 if np.array_equal(np.load(sys.argv[1]), np.load(sys.argv[2])) else 1)' \
        "$TMP/a.npy" "$TMP/u1/model.a.npy" && ok "model.a.npy equals the packed array" || bad "model.a.npy differs"
else
    bad "DIR/model.a.npy is not the tensor's file"
fi

# ------------------------------------------------------------ overlap
echo "# ---- chunks that overlap"
fresh ov
sql "$TMP/ov/index.db" "UPDATE chunks SET offsets = '[0,0]' WHERE id = 2"
run_ckpt cat "$TMP/ov" model.a
expect_fail "cat of a tensor whose chunks 0 and 1 are the same box"
expect_err_re "damaged index: tensor 'model.a': chunks 0 and 1 are the same box \(offsets \[0,0\] sizes \[50,100\]\)" "cat names the tensor and chunks"
if [ ! -s "$OUT" ]; then ok "cat wrote no byte of it"; else bad "cat wrote $(stat -c %s "$OUT") bytes"; fi
run_ckpt cat "$TMP/ov" model.b
expect_ok "cat of the intact tensor beside it"
same_bytes "model.b reads right" "$TMP/b.raw" "$OUT"
run_ckpt unpack "$TMP/ov" "$TMP/ov-out"
expect_fail "unpack of the checkpoint with overlapping chunks"
[ ! -e "$TMP/ov-out/model.a.npy" ] && ok "no model.a.npy left" || bad "model.a.npy written"
run_ckpt verify "$TMP/ov"
expect_rc 1 "verify of the overlapping chunks"
expect_out_re "^FAULT tensor=model\.a chunk=- .*chunks 0 and 1 are the same box" "verify reports the chunks of model.a"
if grep -q 'writers chunk\|pieces from' "$OUT"; then bad "verify still speaks of writers: $(cat "$OUT")"; else ok "the fault names chunks, not writers"; fi
fresh ov8
sql "$TMP/ov8/index.db" "UPDATE chunks SET offsets = '[8,0]' WHERE id = 2"
run_ckpt cat "$TMP/ov8" model.a
expect_fail "cat after offsets [50,0] -> [8,0] (a bit flip)"
expect_err_re "chunks 0 \(offsets \[0,0\] sizes \[50,100\]\) and 1 \(offsets \[8,0\] sizes \[50,100\]\) overlap" "cat says which chunks overlap"
run_ckpt verify "$TMP/ov8"
expect_out_re "^FAULT tensor=model\.a .*overlap" "verify reports the overlap"
fresh hole
sql "$TMP/hole/index.db" "UPDATE chunks SET offsets = '[60,0]', sizes = '[40,100]', raw_bytes = 16000 WHERE id = 2; UPDATE frames SET raw_size = 16000 WHERE chunk_id = 2"
run_ckpt cat "$TMP/hole" model.a
expect_fail "cat of a tensor with a hole between its chunks"
expect_err_re "its 2 chunks cover 9000 of 10000 elements .*element \[50,0\] is not covered" "cat names the hole"

fresh nochunk
sql "$TMP/nochunk/index.db" "DELETE FROM frames WHERE chunk_id IN (3, 4); DELETE FROM chunks WHERE tensor_id = 2;
  UPDATE tensors SET nchunks = 0, stored_bytes = 0 WHERE id = 2"
run_ckpt cat "$TMP/nochunk" model.b
expect_fail "cat of a tensor left with no chunk at all"
expect_err_re "tensor 'model\.b': no chunk holds any of its 10000 elements" "cat says no chunk holds it"
if [ ! -s "$OUT" ]; then ok "no byte (no zeros) served"; else bad "cat served $(stat -c %s "$OUT") bytes"; fi
run_ckpt verify "$TMP/nochunk"
expect_out_re "^FAULT tensor=model\.b .*no chunk holds" "verify reports it"

# ------------------------------------------------------------ duplicate names
echo "# ---- two tensors of one name"
fresh dup
sql "$TMP/dup/index.db" "PRAGMA writable_schema = 1;
  UPDATE sqlite_schema SET sql = replace(sql, 'fqn TEXT NOT NULL UNIQUE', 'fqn TEXT NOT NULL') WHERE name = 'tensors';
  DELETE FROM sqlite_schema WHERE name LIKE 'sqlite_autoindex_tensors%';"
sql "$TMP/dup/index.db" "UPDATE tensors SET fqn = 'model.a' WHERE fqn = 'model.b'"
for cmd in "ls" "cat:model.a" "verify"; do
    IFS=: read -r c arg <<<"$cmd"
    run_ckpt "$c" "$TMP/dup" ${arg:+"$arg"}
    expect_fail "$c of an index with two tensors named model.a"
    expect_err_re "tensor name 'model\.a' appears more than once" "$c says the name is not unique"
done

# ------------------------------------------------------------ frame size
echo "# ---- a frame of 2^40 raw bytes"
npy "$TMP/v.npy" 'np.arange(1000, dtype=np.float32)'
run_ckpt pack "$TMP/one" "v=$TMP/v.npy"
N=274877906944
sql "$TMP/one/index.db" "UPDATE tensors SET shape = '[$N]', numel = $N, nbytes = 4 * $N;
  UPDATE chunks SET sizes = '[$N]', raw_bytes = 4 * $N; UPDATE frames SET raw_size = 4 * $N"
run_ckpt cat "$TMP/one" v --slice 0:4
expect_fail "cat of a tensor whose one frame claims 2^40 bytes"
expect_err_re "damaged index: .*frames of at most 1 GiB" "cat refuses the frame size (format maximum 1 GiB)"
if grep -q -i 'out of memory\|AddressSanitizer' "$ERR"; then bad "it tried to allocate it"; else ok "no allocation of 1 TiB was attempted"; fi

# ------------------------------------------------------------ links
echo "# ---- files that are symbolic links out of the checkpoint"
printf 'secret: the content of a file outside the checkpoint\n%.0s' {1..40} >"$TMP/outside"
fresh nl
mv "$TMP/nl/data/rank1.shard" "$TMP/outside.shard"
ln -s "$TMP/outside.shard" "$TMP/nl/data/rank1.shard"
run_ckpt cat "$TMP/nl" model.a
expect_fail "cat of a tensor whose shard is a link out of the checkpoint"
expect_err_re "data/rank1\.shard is, or lies under, a symbolic link" "cat says the shard is a link"
run_ckpt cat --follow-links "$TMP/nl" model.a
expect_ok "cat --follow-links reads it"
same_bytes "and its bytes are model.a's" "$TMP/a.raw" "$OUT"
rm "$TMP/nl/data/rank1.shard"
ln -s "$TMP/outside" "$TMP/nl/data/rank1.shard"
size=$(stat -c %s "$TMP/outside")
run_ckpt verify "$TMP/nl"
expect_fail "verify with a shard linked to another file"
expect_out_re "file=data/rank1\.shard .*symbolic link" "verify reports the link"
if grep -q -w "$size" "$OUT" "$ERR"; then bad "the outside file's size ($size) shows"; else ok "the outside file's size ($size) shows nowhere"; fi
run_ckpt info "$TMP/nl"
expect_out_re "^  data/rank1\.shard refused$" "info shows the linked shard as refused, not its size"
rm "$TMP/nl/data"/rank1.shard
mkdir -p "$TMP/elsewhere"
mv "$TMP/outside.shard" "$TMP/elsewhere/rank1.shard"
mv "$TMP/nl/data/rank0.shard" "$TMP/elsewhere/"
rmdir "$TMP/nl/data"
ln -s "$TMP/elsewhere" "$TMP/nl/data"
run_ckpt cat "$TMP/nl" model.b
expect_fail "cat when data/ itself is a link out of the checkpoint"
expect_err_re "data/rank0\.shard is, or lies under, a symbolic link" "cat says so"

# safetensors: a directory where one file is a link out of it
write_st() {   # write_st FILE NAME...: one f32 tensor [3] per name
    "$PY" - "$@" <<'EOF' || exit 99
import json, struct, sys
path, names = sys.argv[1], sys.argv[2:]
hdr, data = {}, b""
for i, n in enumerate(names):
    b = struct.pack("<3f", i, i + 0.5, -i)
    hdr[n] = {"dtype": "F32", "shape": [3], "data_offsets": [len(data), len(data) + len(b)]}
    data += b
h = json.dumps(hdr).encode()
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
EOF
}
mkdir -p "$TMP/std"
write_st "$TMP/std/a.safetensors" "x.w"
write_st "$TMP/other.safetensors" "y.w"
ln -s "$TMP/other.safetensors" "$TMP/std/b.safetensors"
run_ckpt ls "$TMP/std"
expect_fail "ls of a safetensors directory where b.safetensors links out of it"
expect_err_re "b\.safetensors is, or lies under, a symbolic link" "ls says so"
run_ckpt ls --follow-links "$TMP/std"
expect_ok "ls --follow-links reads it"
expect_out_re "^y\.w " "and lists its tensor"
# The Hugging Face cache: snapshots/REV/* are links into the repository's blobs/
hf=$TMP/hub/models--org--tiny
mkdir -p "$hf/blobs" "$hf/snapshots/0123abc" "$hf/refs"
write_st "$hf/blobs/5f2e9a" "model.w" "model.b"
ln -s ../../blobs/5f2e9a "$hf/snapshots/0123abc/model.safetensors"
run_ckpt cat "$hf/snapshots/0123abc" model.b
expect_ok "cat from a Hugging Face cache snapshot (links into its blobs/) without opt-in"
"$PY" -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("<3f", 1, 1.5, -1))' >"$TMP/hf.want"
same_bytes "model.b's bytes from the blob" "$TMP/hf.want" "$OUT"
run_ckpt ls "$hf/snapshots/0123abc/model.safetensors"
expect_ok "ls of the snapshot's file itself"
ln -s "$TMP/other.safetensors" "$hf/snapshots/0123abc/extra.safetensors"
run_ckpt ls "$hf/snapshots/0123abc"
expect_fail "a snapshot link that is not ../../blobs/NAME"
expect_err_re "extra\.safetensors is, or lies under, a symbolic link" "is refused, named"
rm "$hf/snapshots/0123abc/extra.safetensors"
ln -s ../../refs/main "$hf/snapshots/0123abc/extra.safetensors"
cp "$TMP/other.safetensors" "$hf/refs/main"
run_ckpt ls "$hf/snapshots/0123abc"
expect_fail "a snapshot link into the repository but not into blobs/"
rm "$hf/snapshots/0123abc/extra.safetensors"

# PyTorch DCP: an item file linked to a file outside (exfiltration)
if "$PY" "$HELPERS/dcp_ref.py" save1 "$TMP/dcp" >/dev/null 2>&1; then
    "$CKPT" info "$TMP/dcp" extra >"$TMP/extra.info"
    item=$TMP/dcp/$(sed -n 's/^chunk 0: .* file=\([^ ]*\) .*/\1/p' "$TMP/extra.info")
    [ -f "$item" ] || { echo "ERROR: no file for DCP item 'extra'"; exit 99; }
    rm "$item"
    ln -s "$TMP/outside" "$item"
    run_ckpt cat "$TMP/dcp" extra
    expect_fail "cat of a DCP checkpoint whose $(basename "$item") links to a file outside"
    expect_err_re "$(basename "$item") is, or lies under, a symbolic link" "cat says so"
    if grep -q secret "$OUT"; then bad "cat printed the outside file"; else ok "no byte of the outside file printed"; fi
    run_ckpt import "$TMP/dcp" "$TMP/dcp-imported"
    expect_fail "import of it"
    [ ! -e "$TMP/dcp-imported" ] && ok "import made no checkpoint of it" || bad "import left $TMP/dcp-imported"
    run_ckpt verify "$TMP/dcp"
    expect_fail "verify of it"
    run_ckpt cat --follow-links "$TMP/dcp" extra
    expect_ok "cat --follow-links reads the linked item"
    if grep -q secret "$OUT"; then ok "(the opt-in follows the link)"; else bad "--follow-links did not follow it"; fi
else
    echo "     (no torch: the DCP link case is left out)"
fi

# ------------------------------------------------------------ safetensors NUL
echo "# ---- a safetensors name holding \\u0000"
"$PY" - "$TMP/nul.safetensors" <<'EOF' || exit 99
import struct, sys
h = b'{"model.w\\u0000.evil":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<f", 1.0))
EOF
run_ckpt ls "$TMP/nul.safetensors"
expect_fail "ls of a safetensors file naming 'model.w\\u0000.evil'"
expect_err_re '\\u0000 \(NUL\) in a string' "the \\u0000 is refused, not cut short"

# ------------------------------------------------------------ control characters
echo "# ---- control characters in names and values"
fresh ctl
sql "$TMP/ctl/index.db" "INSERT INTO meta(key, value) VALUES('note', 'x' || char(27) || '[2Jy' || char(10) || 'FAULT forged')"
run_ckpt info "$TMP/ctl"
expect_ok "info of a checkpoint whose metadata holds ESC and a newline"
if LC_ALL=C grep -q "$(printf '\033')" "$OUT"; then bad "info printed a raw ESC"; else ok "no raw ESC in info's output"; fi
expect_out_re '^  note = x\\x1b\[2Jy\\x0aFAULT forged$' "the value is shown escaped on one line"
fresh ctlfqn
sql "$TMP/ctlfqn/index.db" "UPDATE tensors SET fqn = 'model.' || char(27) || '[31mb' WHERE fqn = 'model.b'"
run_ckpt ls "$TMP/ctlfqn"
expect_fail "ls of an index with an FQN holding ESC"
expect_err_re "invalid fqn 'model\.\\\\x1b\[31mb': control character" "the FQN is refused, quoted with \\x1b"
if LC_ALL=C grep -q "$(printf '\033')" "$OUT" "$ERR"; then bad "a raw ESC was printed"; else ok "no raw ESC printed"; fi
mkdir -p "$TMP/root"
cp -r "$TMP/ck" "$TMP/root/step$(printf '\033')[1m"
run_ckpt ls "$TMP/root"
expect_ok "ls of a root with a checkpoint directory named 'step<ESC>[1m'"
expect_out_re '^step\\x1b\[1m committed ' "its name is shown escaped"

summary
