#!/bin/bash
# tests/gpu/run.sh BUILD OUTDIR - libckptfs's CUDA paths on a machine with
# an NVIDIA GPU: the tests that need a device, then the figures of the GPU
# benchmarks (docs/ASYNC.md, "On a GPU").  BUILD is a build directory
# configured with CUDA, after `make gpu`, or a bundle of one made by
# tests/gpu/bundle.sh for a machine without our -dev packages.  Everything
# printed goes to OUTDIR/gpu-run.log too, the "RESULT name value" lines to
# OUTDIR/results.txt.
#
# Sections, in order (CKPT_GPU_PARTS, comma-separated, picks some):
#   tests    tests/unit/test_async_cuda (save from and load into device
#            memory, every element compared; the device buffers scribbled
#            right after the async save returns) and tests/unit/test_async
#            (which, with a device, stages through pinned slabs)
#   bench    tests/gpu/gpu_bench: async-save stalls against cudaMemcpy
#            D2H, loads into device memory against pread + H2D copies
#   python   tests/gpu/torch_gpu.py: the Python package and the DCP
#            backend with CUDA tensors (checks, training-loop slowdown,
#            loads against safetensors, DCP against FileSystemReader)
#   pytests  the package's async and save/load tests on this machine
# Knobs: CKPT_GPU_MB (state size, default 4096), CKPT_GPU_WORK (scratch
# directory on the disk to measure, default /tmp/ckptfs-gpu, removed at
# the end), CKPT_PYTHON (python3; needs torch with CUDA, numpy,
# safetensors).  Exits 77 (skipped) without an NVIDIA GPU or a CUDA build,
# 1 when a test or a check failed, else 0.
set -u
if [ $# -ne 2 ]; then
    echo "usage: tests/gpu/run.sh BUILD OUTDIR" >&2
    exit 2
fi
build=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" && out=$(cd "$2" && pwd) || exit 2
src=$(cd "$(dirname "$0")/../.." && pwd)
work=${CKPT_GPU_WORK:-/tmp/ckptfs-gpu}
parts=${CKPT_GPU_PARTS:-tests,bench,python,pytests}
mb=${CKPT_GPU_MB:-4096}
py=${CKPT_PYTHON:-python3}
log=$out/gpu-run.log
exec > >(tee "$log") 2>&1

if [ ! -e "$build/cuda-build" ] &&
   ! grep -q '^#define HAVE_CUDA 1' "$build/config.h" 2>/dev/null; then
    echo "SKIP: $build is not a CUDA build of libckptfs (configure found no CUDA)"
    exit 77
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP: no NVIDIA GPU here (nvidia-smi -L fails)"
    exit 77
fi

rm -rf "$work"
mkdir -p "$work/libs"
# Our libraries where this machine lacks them (a bundle's deps/).
if [ -d "$build/deps/lib" ]; then
    for f in "$build"/deps/lib/*; do
        n=$(basename "$f")
        ldconfig -p | grep -q " $n " || ln -sf "$f" "$work/libs/$n"
    done
fi
cudart=
if [ -d "$build/deps/cuda" ] && ! ldconfig -p | grep -q ' libcudart\.so\.' &&
   [ ! -e /usr/local/cuda/lib64/libcudart.so.13 ]; then
    cudart=$build/deps/cuda
fi
cprog_path="$work/libs${cudart:+:$cudart}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Python: torch brings its own CUDA runtime, which libckptfs then shares.
py_path="$build/src/.libs:$work/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

declare -A status
run() {   # run NAME TIMEOUT CMD... : one step, its status remembered
    local name=$1 limit=$2
    shift 2
    echo
    echo "=== $name ($(date -u +%H:%M:%S))"
    local t0=$SECONDS
    timeout "$limit" "$@"
    local rc=$?
    case $rc in
        0) status[$name]=passed ;;
        77) status[$name]=skipped ;;
        124) status[$name]="FAILED (timed out after ${limit}s)" ;;
        *) status[$name]="FAILED (exit $rc)" ;;
    esac
    echo "=== $name: ${status[$name]} in $((SECONDS - t0)) s"
}
want() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }

echo "=== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
echo "kernel $(uname -r), $(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB memory"
df -h "$work" | tail -1 | awk '{print "scratch: " $1 " (" $2 ", " $4 " free) at '"$work"'"}'
"$py" -c 'import sys, torch, numpy; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__)' 2>&1

if want tests; then
    run test_async_cuda 300 env LD_LIBRARY_PATH="$cprog_path" CK_VERBOSITY=verbose "$build/tests/unit/test_async_cuda"
    run test_async 600 env LD_LIBRARY_PATH="$cprog_path" "$build/tests/unit/test_async"
fi
if want bench; then
    run gpu_bench 900 env LD_LIBRARY_PATH="$cprog_path" "$build/tests/gpu/gpu_bench" "$work/c" --mb "$mb" --reps 3
    rm -rf "$work/c"
fi
pyenv=(env LD_LIBRARY_PATH="$py_path" CKPTFS_LIBRARY="$build/src/.libs/libckptfs.so.0" CKPT="$build/tools/ckpt"
       PYTHONPATH="$build/python:$src/tests/python" CKPT_GPU_PYPATH="$build/python:$src/tests/python"
       PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1)
# A script run with our package first on sys.path, whether or not the
# interpreter honours PYTHONPATH (a venv's may not).
pyrun=("${pyenv[@]}" "$py" -c 'import os, runpy, sys
sys.path[:0] = [p for p in os.environ["CKPT_GPU_PYPATH"].split(":") if p]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")')
if want python; then
    "${pyenv[@]}" "$py" -c 'import sys; print("sys.path:", sys.path, "flags:", sys.flags)'
    run torch_gpu 1200 "${pyrun[@]}" "$src/tests/gpu/torch_gpu.py" "$work/py" --gib "$(awk "BEGIN {print $mb / 1024}")" ${CKPT_GPU_PY_PARTS:+--parts "$CKPT_GPU_PY_PARTS"}
    rm -rf "$work/py"
fi
if want pytests; then
    for t in test_async test_save_load; do
        run "py_$t" 600 "${pyrun[@]}" "$src/tests/python/$t.py"
    done
fi
rm -rf "$work"

grep '^RESULT ' "$log" > "$out/results.txt"
echo
echo "=== summary"
failed=0
for name in "${!status[@]}"; do
    echo "  $name: ${status[$name]}"
    case ${status[$name]} in FAILED*) failed=1 ;; esac
done
exit $failed
