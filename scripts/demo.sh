#!/bin/bash
# The quick-start demo: sets everything up on a fresh Debian 12 machine,
# builds, has 4 MPI ranks save a sharded checkpoint (each rank a dim-0 slice
# of every weight, biases replicated), then looks at it with ckpt and
# standard tools and checks every value with NumPy.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/setup-deps.sh
[ -x configure ] || autoreconf -fi
mkdir -p build && cd build
[ -f Makefile ] || ../configure CFLAGS="-O2 -g"
make -j"$(nproc)" >/dev/null
ckpt=$PWD/tools/ckpt

root=${CKPT_DEMO_DIR:-$(mktemp -d /tmp/ckptfs-demo.XXXXXX)}
step=$root/step-000100
rm -rf "$step"
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say mpirun -n 4 examples/mpi_ranks_save "$step" 1024 1024 4
mpirun --allow-run-as-root --oversubscribe -n 4 examples/mpi_ranks_save "$step" 1024 1024 4

say ls "$step" "$step/data"
ls "$step" "$step/data"
say ckpt ls "$root"
"$ckpt" ls "$root"
say ckpt ls "$step"
"$ckpt" ls "$step"
say ckpt info "$step" model.layers.1.weight '| head -12'
"$ckpt" info "$step" model.layers.1.weight | head -12
say ckpt cat "$step" model.layers.1.weight --slice 300:302,0:4 '| od -A d -t f4'
"$ckpt" cat "$step" model.layers.1.weight --slice 300:302,0:4 | od -A d -t f4
say ckpt verify "$step"
"$ckpt" verify "$step"
say sqlite3 "$step/index.db" "SELECT fqn, dtype, shape, nchunks FROM tensors"
sqlite3 "$step/index.db" "SELECT fqn, dtype, shape, nchunks FROM tensors"

if [ -x fs/ckptfs ] && [ -e /dev/fuse ]; then
    mnt=$root.mnt
    mkdir -p "$mnt"
    trap 'fusermount3 -u "$mnt" 2>/dev/null; rmdir "$mnt" 2>/dev/null' EXIT
    say ckptfs "$root" "$mnt"
    fs/ckptfs "$root" "$mnt"
    say ls -l "$mnt" "$mnt/latest/model/layers/1"
    ls -l "$mnt" "$mnt/latest/model/layers/1"
    say getfattr -d "$mnt/latest/model/layers/1/weight"
    getfattr -d "$mnt/latest/model/layers/1/weight"
    say "dd if=$mnt/latest/model/layers/1/weight bs=4 skip=\$((300*1024)) count=4 | od -A d -t f4"
    dd if="$mnt/latest/model/layers/1/weight" bs=4 skip=$((300 * 1024)) count=4 status=none | od -A d -t f4
    say "python3: numpy.load('$mnt/latest/.npy/model/layers/1/bias.npy')[:4]"
    /usr/bin/python3 -c "import numpy, sys; a = numpy.load(sys.argv[1]); print(a.dtype, a.shape, a[:4])" \
        "$mnt/latest/.npy/model/layers/1/bias.npy"
    say cmp "$mnt/latest/model/layers/3/weight" "<(ckpt cat $step model.layers.3.weight)"
    cmp "$mnt/latest/model/layers/3/weight" <("$ckpt" cat "$step" model.layers.3.weight) && echo identical
fi

say "check every element with NumPy"
"$ckpt" cat "$step" model.layers.3.weight > "$root/w3.bin"
/usr/bin/python3 - "$root/w3.bin" <<'PY'
import sys, numpy as np
got = np.fromfile(sys.argv[1], dtype='<f4').reshape(1024, 1024)
i = np.arange(1024, dtype=np.float32)[:, None]
j = np.arange(1024, dtype=np.float32)[None, :]
want = np.float32(3) + i * np.float32(0.001) + j * np.float32(0.000001)
assert np.array_equal(got, want.astype(np.float32)), "values differ"
print("model.layers.3.weight: all 1048576 values equal what the 4 ranks wrote")
PY
echo
echo "demo checkpoint left in $root"
