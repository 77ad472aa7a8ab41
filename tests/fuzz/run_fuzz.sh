#!/bin/bash
# run_fuzz.sh - builds tests/fuzz/fuzz_parsers.c with clang's libFuzzer
# (plus AddressSanitizer and UndefinedBehaviorSanitizer) and fuzzes the
# pickle, zip/torch.save and JSON parsers for a bounded time
# (CKPT_FUZZ_SECONDS, default 20), starting from a seed corpus of real
# inputs: DCP .metadata and .distcp items that PyTorch writes (when
# /usr/bin/python3 has torch), torch.save archives, safetensors headers.
# Fails on any crash, leak, sanitizer report or timeout of one input.
# Exit 77 (skip) when clang or the libFuzzer runtime is missing.
set -u
SRC=${CKPT_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${CKPT_BUILDDIR:-$SRC}
SECONDS_MAX=${CKPT_FUZZ_SECONDS:-20}
PY=/usr/bin/python3
CLANG=${CLANG:-clang}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-fuzz.XXXXXX") || exit 99
trap 'rm -rf "$WORK"' EXIT

command -v "$CLANG" >/dev/null 2>&1 || { echo "SKIP: run_fuzz: no $CLANG (package clang)"; exit 77; }
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$WORK/probe.c"
"$CLANG" -fsanitize=fuzzer "$WORK/probe.c" -o "$WORK/probe" 2>/dev/null ||
    { echo "SKIP: run_fuzz: $CLANG cannot link libFuzzer (package libclang-rt-14-dev)"; exit 77; }

BIN=$BUILD/tests/fuzz/fuzz_parsers
mkdir -p "$(dirname "$BIN")"
"$CLANG" -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -I"$SRC/src" \
    "$SRC/tests/fuzz/fuzz_parsers.c" "$SRC/src/pickle.c" "$SRC/src/zipread.c" \
    "$SRC/src/torchsave.c" "$SRC/src/json.c" "$SRC/src/error.c" \
    "$SRC/src/dtype.c" -o "$BIN" || { echo "FAIL: run_fuzz: build failed"; exit 1; }

# Seed corpus: selector byte (0 pickle, 1 zip item, 2 JSON) + input.
CORPUS=$WORK/corpus
mkdir -p "$CORPUS"
seed() {   # seed SELECTOR FILE
    { printf "\\x$1"; cat "$2"; } >"$CORPUS/$1-$(basename "$2")-$RANDOM"
}
if "$PY" "$SRC/tests/helpers/dcp_ref.py" save1 "$WORK/dcp" >/dev/null 2>&1; then
    seed 00 "$WORK/dcp/.metadata"
    for f in "$WORK"/dcp/__*.distcp; do
        seed 01 "$f"
        "$PY" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); sys.stdout.buffer.write(z.read([n for n in z.namelist() if n.endswith("data.pkl")][0]))' \
            "$f" >"$WORK/data.pkl" 2>/dev/null && seed 00 "$WORK/data.pkl"
    done
fi
if "$PY" "$SRC/tests/helpers/dcp_ref.py" stdir "$WORK/st" >/dev/null 2>&1; then
    seed 02 "$WORK/st/model.safetensors.index.json"
    for f in "$WORK"/st/*.safetensors; do
        "$PY" -c 'import sys, struct; d = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", d[:8])[0]; sys.stdout.buffer.write(d[8:8 + n])' \
            "$f" >"$WORK/hdr.json" && seed 02 "$WORK/hdr.json"
    done
fi
printf '\x00\x80\x02}q\x00.' >"$CORPUS/min-pickle"
printf '\x02{"a":[1,2.5e3,"\\u00e9\\ud83d\\ude00",true,null]}' >"$CORPUS/min-json"
echo "run_fuzz: $(ls "$CORPUS" | wc -l) seeds, ${SECONDS_MAX}s"

ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    "$BIN" -max_total_time="$SECONDS_MAX" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$WORK/" -print_final_stats=1 \
    "$CORPUS" >"$WORK/log" 2>&1
rc=$?
tail -n 12 "$WORK/log"
if [ "$rc" -ne 0 ]; then
    echo "FAIL: run_fuzz: the fuzzer found a problem (exit $rc); input:"
    for a in "$WORK"/crash-* "$WORK"/leak-* "$WORK"/timeout-* "$WORK"/oom-*; do
        [ -e "$a" ] && { mkdir -p "$BUILD/tests/fuzz/artifacts"; cp "$a" "$BUILD/tests/fuzz/artifacts/"; xxd "$a" | head -20; }
    done
    exit 1
fi
echo "PASS: run_fuzz: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$WORK/log")"
exit 0
