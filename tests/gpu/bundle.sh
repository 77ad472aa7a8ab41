#!/bin/bash
# tests/gpu/bundle.sh BUILD DEST - copies what tests/gpu/run.sh needs out of
# a CUDA build (configure found CUDA; `make gpu` built the programs) into
# DEST, in the build's own layout, with the shared libraries the programs
# need besides glibc under DEST/deps: for a GPU machine that has none of
# our -dev packages (run.sh uses a library from deps only where the
# machine lacks it).  DEST is then a BUILD for run.sh:
#
#   tests/gpu/bundle.sh build-gpu .gpu && tests/gpu/run.sh .gpu OUT
#
# A few MiB in all; run.sh itself and the Python tests come from the
# source tree it is run from.
set -eu
build=$(cd "$1" && pwd)
mkdir -p "$2"
dest=$(cd "$2" && pwd)
grep -q '^#define HAVE_CUDA 1' "$build/config.h" ||
    { echo "bundle.sh: $build is not a CUDA build (configure found no CUDA)" >&2; exit 1; }
progs="tests/unit/test_async_cuda tests/unit/test_async tests/gpu/gpu_bench tools/ckpt"
for p in $progs; do
    [ -x "$build/$p" ] || { echo "bundle.sh: $build/$p is missing: make -C $build gpu" >&2; exit 1; }
done
rm -rf "$dest/src" "$dest/tests" "$dest/python" "$dest/deps"
mkdir -p "$dest/src/.libs" "$dest/tests/unit" "$dest/tests/gpu" "$dest/tools" "$dest/deps/lib" "$dest/deps/cuda"
cp -P "$build"/src/.libs/libckptfs.so* "$dest/src/.libs/"
for p in $progs; do cp "$build/$p" "$dest/$p"; done
cp -rL "$build/python" "$dest/python"   # make links it to the sources
rm -f "$dest/python/ckptfs/_config.py"      # it names BUILD's library
touch "$dest/cuda-build"
# Every shared library the programs load besides glibc's own.
for f in "$dest"/src/.libs/libckptfs.so.0 $(for p in $progs; do echo "$dest/$p"; done); do
    ldd "$f" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
    case $name in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
        libcudart.so.*) cp -L "$path" "$dest/deps/cuda/$name" ;;
        *) cp -L "$path" "$dest/deps/lib/$name" ;;
    esac
done
du -sh "$dest" | awk '{print "bundle.sh: " $1 " in '"$dest"'"}'
