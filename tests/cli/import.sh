#!/bin/bash
# import.sh - PyTorch distributed checkpoints and safetensors read by ckpt
# directly (ls, info, cat, verify) and converted by `ckpt import`.
#
# The DCP checkpoints are written here by PyTorch itself (1.13, through
# /usr/bin/python3): one process with f32, bf16, f16, i64, bool, a scalar,
# a transposed tensor, an empty one and byte items; two gloo processes
# with tensors sharded across them.  Every tensor ckpt reads is compared by
# tests/helpers/dcp_ref.py with what torch's own load_state_dict gives,
# and every byte item with torch.load of its bytes.  safetensors files are
# written by the helper per the published format and read back by its own
# parser.  Malformed inputs must each fail with a message saying what is
# wrong, no crash, and no OUT left behind by import.
. "$(dirname "$0")/lib.sh"
need_python
REF=$HELPERS/dcp_ref.py
HAVE_TORCH=1
"$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import torch_compat; torch_compat.allow_unhashable_dataclass_defaults(); import torch.distributed._shard.checkpoint' "$HELPERS" >/dev/null 2>&1 || HAVE_TORCH=0

# tree SRC DIR: every tensor of SRC (as ckpt ls lists it) written by
# `ckpt cat` to DIR/<fqn with dots as slashes>.
tree() {
    local src=$1 dir=$2 fqn rest path
    mkdir -p "$dir"
    run_ckpt ls "$src"
    tail -n +2 "$OUT" | while read -r fqn rest; do
        path=$dir/${fqn//.//}
        mkdir -p "$(dirname "$path")"
        "$CKPT" cat "$src" "$fqn" >"$path" || echo "cat $fqn failed" >&2
    done
}

# compare DESC CHECKCMD...: runs the helper's check and counts its lines.
compare() {
    local desc=$1
    shift
    "$PY" "$REF" "$@" >"$TMP/check.out" 2>&1
    local rc=$?
    report "$TMP/check.out" "$desc: "
    [ "$rc" -eq 0 ] && ok "$desc: every entry equals the reference" ||
        bad "$desc: checker exit $rc: $(tail -n 3 "$TMP/check.out" | tr '\n' '~')"
}

# reads_and_imports NAME SRC CHECK...: ls/verify/cat on SRC, then import
# and the same on the result.  CHECK is the helper subcommand and its
# reference argument (check DCP, or stcheck SRC).
reads_and_imports() {
    local name=$1 src=$2
    shift 2
    run_ckpt verify "$src"
    expect_ok "$name: ckpt verify reads every byte"
    expect_out_re '^ok: [0-9]+ tensors' "$name: verify says ok"
    tree "$src" "$TMP/$name.tree"
    compare "$name read directly" "$@" "$TMP/$name.tree"
    run_ckpt import "$src" "$TMP/$name.ck"
    expect_ok "$name: ckpt import"
    run_ckpt verify "$TMP/$name.ck"
    expect_ok "$name: the imported checkpoint verifies (checksums)"
    tree "$TMP/$name.ck" "$TMP/$name.ck.tree"
    compare "$name imported" "$@" "$TMP/$name.ck.tree"
    run_ckpt info "$TMP/$name.ck"
    expect_out_re '^  source_format = ' "$name: import records source_format"
}

if [ "$HAVE_TORCH" = 1 ]; then
    "$PY" "$REF" save1 "$TMP/dcp1" || { echo "ERROR: save1 failed"; exit 99; }
    "$PY" "$REF" save2 "$TMP/dcp2" || { echo "ERROR: save2 failed"; exit 99; }
    reads_and_imports dcp1 "$TMP/dcp1" check "$TMP/dcp1"
    reads_and_imports dcp2 "$TMP/dcp2" check "$TMP/dcp2"

    run_ckpt info "$TMP/dcp1" transposed
    expect_out_re '^chunk 0: .* frames=1 raw_bytes=240 stored_bytes=' \
        "the transposed tensor is one strided chunk"
    run_ckpt info "$TMP/dcp2.ck" layer.rows
    expect_out_re '^chunks: 2$' "import keeps the two ranks' chunks"
    expect_out_re 'file=data/rank1.shard' "rank 1's chunk is written by writer rank1"
    run_ckpt ls "$TMP/dcp1"
    expect_out_re '^rng +bytes +[0-9]+ ' "a byte item is a byte object"
    run_ckpt import "$TMP/dcp1" "$TMP/dcp1.ck"
    expect_fail "import into a non-empty OUT is refused"
    expect_err_re 'not empty' "and says so"

    for k in meta-truncated meta-global item-cut item-past-eof; do
        "$PY" "$REF" bad "$k" "$TMP/dcp1" "$TMP/bad-$k" >/dev/null ||
            { echo "ERROR: bad $k failed"; exit 99; }
    done
    run_ckpt ls "$TMP/bad-meta-truncated"
    expect_fail "truncated .metadata"
    expect_err_re '\.metadata: pickle offset [0-9]+: truncated' "truncated .metadata: says where"
    run_ckpt import "$TMP/bad-meta-global" "$TMP/out-global"
    expect_fail "a pickle naming os.system"
    expect_err_re "refusing global 'os\\.system'" "the message names the global"
    check "no code ran (the pickle's 'touch' left no file)" test ! -e "$TMP/PWNED"
    check "import left no OUT" test ! -e "$TMP/out-global"
    run_ckpt cat "$TMP/bad-item-cut" model.w
    expect_fail "a .distcp item cut short"
    expect_err_re "tensor 'model\\.w': item at bytes .*cut short" "cut item: names the tensor and the item"
    # one bad item refuses its tensor alone (#23): verify reports it
    run_ckpt verify "$TMP/bad-item-past-eof"
    expect_fail "an item offset past the end of its file"
    expect_out_re "FAULT tensor=model\\.w .*tensor 'model\\.w': its item at bytes [0-9]+\\.\\.[0-9]+ of __0_[0-9]+\\.distcp lies past the end of the file" \
        "offset past EOF: names tensor, bytes and file"

    # A root of DCP step directories is listed (not silently empty).
    mkdir -p "$TMP/dcproot/notes"
    cp -r "$TMP/dcp1" "$TMP/dcproot/step-000100"
    cp -r "$TMP/dcp2" "$TMP/dcproot/step-000200"
    echo "not a checkpoint" >"$TMP/dcproot/notes/readme.txt"
    run_ckpt ls "$TMP/dcp1"
    n1=$(($(wc -l <"$OUT") - 1))
    run_ckpt ls "$TMP/dcp2"
    n2=$(($(wc -l <"$OUT") - 1))
    run_ckpt ls "$TMP/dcproot"
    expect_ok "ls of a root of DCP checkpoints"
    expect_out_re "^step-000100 pytorch-dcp [0-9]+ $n1\$" "root of DCP: step-000100 listed with its $n1 tensors"
    expect_out_re "^step-000200 pytorch-dcp [0-9]+ $n2\$" "root of DCP: step-000200 listed with its $n2 tensors"
    check "root of DCP: exactly those two lines" test "$(wc -l <"$OUT")" -eq 2
else
    echo "     (no usable torch in $PY: the DCP checks are skipped)"
fi

"$PY" "$REF" st1 "$TMP/one.safetensors" && "$PY" "$REF" stdir "$TMP/sharded" ||
    { echo "ERROR: writing safetensors failed"; exit 99; }
reads_and_imports st1 "$TMP/one.safetensors" stcheck "$TMP/one.safetensors"
reads_and_imports stdir "$TMP/sharded" stcheck "$TMP/sharded"
run_ckpt info "$TMP/one.safetensors"
expect_out_re '^  note = written by dcp_ref\.py$' "__metadata__ becomes metadata"
run_ckpt info "$TMP/sharded"
expect_out_re '^  total_size = 12345$' "the index's metadata too"

# A root of safetensors models (a file in one directory, a sharded model
# in another) is listed too.
mkdir -p "$TMP/stroot/model-a"
cp "$TMP/one.safetensors" "$TMP/stroot/model-a/"
cp -r "$TMP/sharded" "$TMP/stroot/model-b"
run_ckpt ls "$TMP/stroot"
expect_ok "ls of a root of safetensors models"
expect_out_re '^model-a safetensors [0-9]+ 9$' "root of safetensors: model-a, 9 tensors"
expect_out_re '^model-b safetensors [0-9]+ 18$' "root of safetensors: model-b, 18 tensors"

"$PY" "$REF" bad st-header-long "$TMP/one.safetensors" "$TMP/long.safetensors"
run_ckpt ls "$TMP/long.safetensors"
expect_fail "a safetensors header longer than the file"
expect_err_re 'header of [0-9]+ bytes is longer than the file \([0-9]+ bytes\)' "long header: says so"
"$PY" "$REF" bad st-overlap "$TMP/one.safetensors" "$TMP/overlap.safetensors"
run_ckpt import "$TMP/overlap.safetensors" "$TMP/out-overlap"
expect_fail "overlapping safetensors offsets"
expect_err_re "tensors 'x' and 'y' overlap" "overlap: names both tensors"
check "import left no OUT" test ! -e "$TMP/out-overlap"

summary
