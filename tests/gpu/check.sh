#!/bin/bash
# tests/gpu/check.sh - make check's entry to tests/gpu/run.sh: the GPU
# checks on this build, with a 512 MiB state (CKPT_GPU_MB overrides).
# Without an NVIDIA GPU or a CUDA build run.sh exits 77, which make check
# reports as SKIP.
set -u
srcdir=${CKPT_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
builddir=${CKPT_BUILDDIR:-$srcdir}
out=$(mktemp -d /tmp/ckptfs-gpucheck-XXXXXX)
trap 'rm -rf "$out"' EXIT
CKPT_GPU_MB=${CKPT_GPU_MB:-512} CKPT_GPU_WORK="$out/work" \
    CKPT_PYTHON=${CKPT_PYTHON:-python3} "$srcdir/tests/gpu/run.sh" "$builddir" "$out/report"
