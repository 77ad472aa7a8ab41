#!/usr/bin/python3
"""write_through_mount.py - two processes save a NumPy state dict through a
ckptfs mount in write mode, with os.setxattr and os.write only, then read it
back with NumPy.

    ckptfs -o rw,world=2 /scratch/ck /mnt/ck
    /usr/bin/python3 write_through_mount.py /mnt/ck/step-200
    fusermount3 -u /mnt/ck
    ckptfs /scratch/ck /mnt/ro            # read-only, to check it again:
    /usr/bin/python3 write_through_mount.py --check /mnt/ro/step-200

Save: each process (rank 0 and 1 of 2) writes its pieces: its rows of a
dim-0 split tensor, its columns of a dim-1 split one (a part needs
user.ckpt.sizes unless it runs to the shape's end), the whole of the
replicated ones (every rank writes them; identical replicas are kept
once), and rank 1 the byte object (a file with user.ckpt.shape, its
length, and no user.ckpt.dtype).  A piece is one file, FQN a.b.c at a/b/c:
create it, set user.ckpt.dtype/shape/offsets[/sizes] on the open file,
write its bytes in order (the write of its last byte records it), close
it.  Then each rank writes its number to .ckptfs/commit; the last one's
write returns once the checkpoint is committed.

Check: every tensor read with np.fromfile from its file and np.load from
the .npy view equals the original; the byte object reads back as written.
Exits 1 on any mismatch or error.
"""
import multiprocessing
import os
import sys

import numpy as np

WORLD = 2
STEP = 200


def state_dict():
    """The same state dict every time (seeded)."""
    rng = np.random.default_rng(20240)
    return {
        "model.embed.weight": rng.standard_normal((11, 8), dtype=np.float32),
        "model.layers.0.proj.weight": rng.standard_normal((6, 9)).astype(np.float16),
        "model.layers.0.norm.weight": np.linspace(0.5, 1.5, 8),      # float64
        "optim.state.0.count": rng.integers(-2**40, 2**40, (5, 4), dtype=np.int64),
        "model.mask": np.array([1, 0, 1, 1, 0, 0, 1], dtype=bool),
        "train.step": np.array(STEP, dtype=np.int64),                   # a scalar
        "train.rng_state": rng.bytes(61),                                # a byte object
    }


# Which dimension each sharded tensor is split on; the others are
# replicated (every rank writes them whole), except the byte object, which
# the last rank writes.
SPLIT = {"model.embed.weight": 0, "model.layers.0.proj.weight": 1,
         "optim.state.0.count": 0}


def my_pieces(sd, rank):
    """Yields (fqn, data, offsets, sizes) for the pieces this rank writes;
    offsets None for a byte object; sizes always (a part's extent is known
    before its first byte, docs/MOUNT.md "When a piece ends")."""
    for fqn, v in sd.items():
        if isinstance(v, bytes):
            if rank == WORLD - 1:
                yield fqn, v, None, None
            continue
        dim = SPLIT.get(fqn)
        if dim is None:
            yield fqn, v, [0] * v.ndim, None
            continue
        idx = np.array_split(np.arange(v.shape[dim]), WORLD)[rank]
        if idx.size == 0:
            continue
        lo, n = int(idx[0]), int(idx.size)
        offsets = [0] * v.ndim
        offsets[dim] = lo
        cut = [slice(None)] * v.ndim
        cut[dim] = slice(lo, lo + n)
        piece = v[tuple(cut)]
        yield fqn, piece, offsets, list(piece.shape)


def dims(seq):
    return ",".join(str(d) for d in seq).encode()


def write_piece(ckdir, fqn, data, shape, offsets, sizes):
    path = os.path.join(ckdir, *fqn.split("."))
    os.makedirs(os.path.dirname(path), exist_ok=True)   # modules: directories
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if offsets is not None:            # a tensor (no dtype: byte object)
            os.setxattr(fd, "user.ckpt.dtype", data.dtype.str.encode())  # '<f4', '|b1', ...
            os.setxattr(fd, "user.ckpt.shape", dims(shape))              # b"" for a scalar
            os.setxattr(fd, "user.ckpt.offsets", dims(offsets))
            if sizes is not None:
                os.setxattr(fd, "user.ckpt.sizes", dims(sizes))
            data = np.ascontiguousarray(data).tobytes()   # row-major, little-endian
        else:                              # a byte object: its length
            os.setxattr(fd, "user.ckpt.shape", b"%d" % len(data))
        buf = memoryview(data)
        while buf:                         # os.write may write less
            buf = buf[os.write(fd, buf[:1 << 20]):]
    finally:
        os.close(fd)                       # raises if the mount refused the piece


def save_rank(ckdir, rank):
    try:
        sd = state_dict()
        os.makedirs(ckdir, exist_ok=True)  # every rank may create the save
        if rank == 0:
            os.setxattr(ckdir, "user.ckpt.meta.step", str(STEP).encode())
        for fqn, data, offsets, sizes in my_pieces(sd, rank):
            write_piece(ckdir, fqn, data, np.shape(sd[fqn]), offsets, sizes)
        fd = os.open(os.path.join(ckdir, ".ckptfs", "commit"), os.O_WRONLY)
        try:
            os.write(fd, b"%d\n" % rank)   # the last rank's write commits
        finally:
            os.close(fd)
    except OSError as e:
        sys.exit("write_through_mount: rank %d: %s" % (rank, e))


def check(ckdir):
    """Compares every tensor of ckdir with the originals; returns the number
    of mismatches (each printed)."""
    bad = 0
    for fqn, want in state_dict().items():
        rel = fqn.split(".")
        path = os.path.join(ckdir, *rel)
        npy = os.path.join(ckdir, ".npy", *rel[:-1], rel[-1] + ".npy")
        try:
            if isinstance(want, bytes):
                with open(path, "rb") as f:
                    same = f.read() == want
                same = same and np.load(npy).tobytes() == want   # |u1 view
            else:
                got = np.fromfile(path, dtype=want.dtype)
                same = got.size == want.size and np.array_equal(got.reshape(want.shape), want)
                view = np.load(npy)
                same = same and view.dtype == want.dtype and np.array_equal(view, want)
        except (OSError, ValueError) as e:
            print("FAIL %s: %s" % (fqn, e))
            bad += 1
            continue
        if not same:
            print("FAIL %s: the bytes read back differ from the original" % fqn)
            bad += 1
    return bad


def main(argv):
    if len(argv) == 3 and argv[1] == "--check":
        ckdir = argv[2]
    elif len(argv) == 2 and not argv[1].startswith("-"):
        ckdir = argv[1]
        ctx = multiprocessing.get_context("fork")
        ranks = [ctx.Process(target=save_rank, args=(ckdir, r)) for r in range(WORLD)]
        for p in ranks:
            p.start()
        for p in ranks:
            p.join()
        failed = [r for r, p in enumerate(ranks) if p.exitcode != 0]
        if failed:
            return "write_through_mount: rank(s) %s failed" % failed
        with open(os.path.join(ckdir, ".ckptfs", "status")) as f:
            status = f.read().strip()
        if status != "committed":
            return "write_through_mount: %s/.ckptfs/status reads %r" % (ckdir, status)
    else:
        return "usage: write_through_mount.py CKPT_DIR | --check CKPT_DIR"
    bad = check(ckdir)
    if bad:
        return "write_through_mount: %d tensor(s) differ in %s" % (bad, ckdir)
    print("%s: %d tensors read back exactly as saved" % (ckdir, len(state_dict())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
