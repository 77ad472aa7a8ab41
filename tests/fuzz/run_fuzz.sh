#!/bin/bash
# run_fuzz.sh - builds the libFuzzer targets of tests/fuzz/ with clang
# (plus AddressSanitizer and UndefinedBehaviorSanitizer) and fuzzes each
# for a bounded time, from seed corpora of real inputs:
#   fuzz_parsers  the pickle, zip/torch.save and JSON parsers, and the
#                 torch 2.x DCP item readers (safetensors blobs in .distcp
#                 files, zstd items, transform descriptors), seeded with
#                 DCP .metadata and .distcp items PyTorch writes (when
#                 /usr/bin/python3 has torch), torch.save archives,
#                 safetensors headers and files, zstd-compressed items
#                 (CKPT_FUZZ_SECONDS, default 20)
#   fuzz_index    a ckptfs checkpoint's index.db (a delta's and a plain
#                 one's) and .pending plans, then open, list, read, verify
#                 (and commit, for plans); seeded with the real files of
#                 the checkpoints the target writes
#                 (CKPT_FUZZ_SECONDS, default 10)
#   fuzz_frames   every codec's frame decoder and xor frames on arbitrary
#                 frame bytes, and encode/decode round trips; seeded with
#                 real frames of every codec and xor frames
#                 (CKPT_FUZZ_SECONDS, default 8)
#   fuzz_control  a writable mount's control files: a save's .pending/ made
#                 of the input (files, links out, FIFOs), read for the
#                 status and .ckptfs/errors, and the attribute values users
#                 set (CKPT_FUZZ_SECONDS, default 8)
# CKPT_FUZZ_SECONDS=N runs each for N seconds (longer runs on demand:
# CKPT_FUZZ_SECONDS=600 bash tests/fuzz/run_fuzz.sh); CKPT_FUZZ_TARGETS
# picks targets (default: all four).  Fails on any crash, leak, sanitizer
# report or timeout of one input (the input is kept under
# tests/fuzz/artifacts/ of the build directory).
# Exit 77 (skip) when clang or the libFuzzer runtime is missing.
set -u
SRC=${CKPT_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${CKPT_BUILDDIR:-$SRC}
PY=/usr/bin/python3
CLANG=${CLANG:-clang}
TARGETS=${CKPT_FUZZ_TARGETS:-fuzz_parsers fuzz_index fuzz_frames fuzz_control}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-fuzz.XXXXXX") || exit 99
trap 'rm -rf "$WORK"' EXIT

command -v "$CLANG" >/dev/null 2>&1 || { echo "SKIP: run_fuzz: no $CLANG (package clang)"; exit 77; }
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$WORK/probe.c"
"$CLANG" -fsanitize=fuzzer "$WORK/probe.c" -o "$WORK/probe" 2>/dev/null ||
    { echo "SKIP: run_fuzz: $CLANG cannot link libFuzzer (package libclang-rt-14-dev)"; exit 77; }

mkdir -p "$BUILD/tests/fuzz"
CFLAGS=(-std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined
        -fno-sanitize-recover=undefined -I"$BUILD" -I"$SRC/src" -I"$SRC/fs")
# The library's sources a target needs (for fuzz_index, fuzz_control and
# fuzz_parsers, every layer but mpi/ and async/: MPI, CUDA staging and the
# asynchronous and one-call savers).
sources_of() {
    local s
    case $1 in
    fuzz_frames)
        for s in codec/codec codec/bytegroup codec/huff codec/xorframe common/error common/dtype; do
            echo "$SRC/src/$s.c"; done ;;
    fuzz_index|fuzz_control|fuzz_parsers)   # (the DCP item readers sit on the builder)
        for s in "$SRC"/src/*/*.c; do
            case ${s#"$SRC"/src/} in mpi/*|async/*) ;; *) echo "$s" ;; esac
        done
        if [ "$1" = fuzz_control ]; then
            for s in rendezvous pattr wrank; do echo "$SRC/fs/$s.c"; done
        fi ;;
    esac
}
libs_of() {
    case $1 in
    fuzz_frames) echo "-lzstd -lxxhash -lm" ;;
    fuzz_index|fuzz_control|fuzz_parsers) echo "-lzstd -lxxhash -lsqlite3 -lpthread -lm" ;;
    esac
}
# Compiles the targets two at a time (the machines that run the suite
# have few cores; compiling with the sanitizers takes a while).
build() {   # build TARGET: its status in $WORK/build-TARGET.rc
    # shellcheck disable=SC2046
    "$CLANG" "${CFLAGS[@]}" "$SRC/tests/fuzz/$1.c" $(sources_of "$1") $(libs_of "$1") \
        -o "$BUILD/tests/fuzz/$1" >"$WORK/build-$1.log" 2>&1
    echo $? >"$WORK/build-$1.rc"
}
pids=()
for t in $TARGETS; do
    build "$t" &
    pids+=($!)
    if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait
for t in $TARGETS; do
    if [ "$(cat "$WORK/build-$t.rc" 2>/dev/null)" != 0 ]; then
        cat "$WORK/build-$t.log"
        echo "FAIL: run_fuzz: building $t failed"
        exit 1
    fi
done

# Seed corpora.  fuzz_parsers: selector byte (0 pickle, 1 zip item, 2
# JSON, 3 torch.save archive, 4 .distcp with a safetensors blob, 5 zstd
# item) + input.
seed_parsers() {
    local CORPUS=$1
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
    if "$PY" "$SRC/tests/python/torchsave_ref.py" write "$WORK/ts" >/dev/null 2>&1; then
        for f in "$WORK"/ts/model.pt "$WORK"/ts/expand.pt "$WORK"/ts/hf/*.bin; do
            seed 03 "$f"
        done
    fi
    # torch 2.x items: a .distcp ending in a safetensors blob (one at
    # byte 0 here), zstd items (torch.save archives and bytes), and
    # transform_descriptors lists.
    for f in "$WORK"/st/*.safetensors; do [ -e "$f" ] && seed 04 "$f"; done
    for f in "$WORK"/dcp/__*.distcp; do
        [ -e "$f" ] && zstd -q -c "$f" >"$WORK/item.zst" 2>/dev/null &&
            seed 05 "$WORK/item.zst"
    done
    printf 'hello, bytes' | zstd -q -c >"$WORK/bytes.zst" 2>/dev/null &&
        seed 05 "$WORK/bytes.zst"
    "$PY" -c 'import pickle, sys; sys.stdout.buffer.write(pickle.dumps(["stream.zstd/1"], protocol=2))' \
        >"$WORK/tr.pkl" && seed 00 "$WORK/tr.pkl"
    printf '\x00\x80\x02}q\x00.' >"$CORPUS/min-pickle"
    printf '\x02{"a":[1,2.5e3,"\\u00e9\\ud83d\\ude00",true,null]}' >"$CORPUS/min-json"
}

# fuzz_control: selector 0 (.pending/: world byte, then records of name
# index, kind 0 file / 1 link out / 2 FIFO / 3 directory, length, bytes)
# or 1 (attribute values separated by 0xff).
seed_control() {
    printf '\x00\x00\x00\x00\x05why\n\n\x02\x00\x04x: y\n' >"$1/failed-notes"
    printf '\x00\x01\x01\x01\x00\x02\x02\x00\x04\x00\x01r' >"$1/links-fifos"
    printf '\x00\x00\x04\x00\x00\x05\x00\x00\x07\x03\x00' >"$1/ranks-in"
    printf '\x01\x00f32\xff4,8\xff0,0\xff4,8\xff0' >"$1/attrs"
    printf '\x01\x01-1,9223372036854775807\xffbf16\xff1' >"$1/attrs-big"
}

status=0
for t in $TARGETS; do
    CORPUS=$WORK/corpus-$t
    mkdir -p "$CORPUS"
    case $t in
    fuzz_parsers) secs=${CKPT_FUZZ_SECONDS:-20}; maxlen=65536; seed_parsers "$CORPUS" ;;
    fuzz_index) secs=${CKPT_FUZZ_SECONDS:-10}; maxlen=262144 ;;
    fuzz_frames) secs=${CKPT_FUZZ_SECONDS:-8}; maxlen=300000 ;;
    fuzz_control) secs=${CKPT_FUZZ_SECONDS:-8}; maxlen=4096; seed_control "$CORPUS" ;;
    esac
    # the targets write their own real files as seeds
    case $t in
    fuzz_index|fuzz_frames)
        TMPDIR=$WORK CKPT_FUZZ_WRITE_SEEDS=$CORPUS "$BUILD/tests/fuzz/$t" >"$WORK/seeds-$t.log" 2>&1 ||
            { cat "$WORK/seeds-$t.log"; echo "FAIL: run_fuzz: $t could not write its seeds"; exit 1; } ;;
    esac
    echo "run_fuzz: $t: $(ls "$CORPUS" | wc -l) seeds, ${secs}s"
    TMPDIR=$WORK ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
        "$BUILD/tests/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2560 \
        -max_len="$maxlen" -artifact_prefix="$WORK/$t-" -print_final_stats=1 \
        "$CORPUS" >"$WORK/log-$t" 2>&1
    rc=$?
    tail -n 12 "$WORK/log-$t"
    if [ "$rc" -ne 0 ]; then
        echo "FAIL: run_fuzz: $t found a problem (exit $rc); input:"
        for a in "$WORK/$t"-crash-* "$WORK/$t"-leak-* "$WORK/$t"-timeout-* "$WORK/$t"-oom-*; do
            [ -e "$a" ] && { mkdir -p "$BUILD/tests/fuzz/artifacts"; cp "$a" "$BUILD/tests/fuzz/artifacts/"; xxd "$a" | head -20; }
        done
        status=1
        continue
    fi
    echo "PASS: run_fuzz: $t: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$WORK/log-$t")"
done
exit $status
