#!/usr/bin/python3
"""writer_trials.py - the writer-kill rows of the crash matrix for a writable
mount (tests/crash/kill_writer.sh; docs/MOUNT.md, "When a piece ends"):
for one form of piece, TRIALS trials in which rank 0's writer process is
SIGKILLed after a seeded random number of its piece's bytes (1..all, in
random blocks), rank 1 writes its piece whole, and both ranks commit.

  writer_trials.py MOUNT FORM TRIALS SEED BASE   (saves step-<BASE+t>)

FORM: whole (a whole tensor: dtype+shape), rows (the last rows of a dim-0
split: offsets, no sizes), cols (columns of a dim-1 split: offsets+sizes),
bytes (a byte object of declared length: user.ckpt.shape alone), rerun
(rank 0 runs again after it was killed, see rerun_trial).

Each trial: a killed piece (fewer bytes than it holds) must leave the save
uncommitted (status "failed: ..."), and rank 0 written again must then
commit; a piece killed after its last byte must commit.  Whatever commits
is read back through the mount and compared with the data the trial
generated: a difference is a corrupt commit.  Prints one line per trial
and a closing count; exits 1 on any corrupt commit or failed expectation.
"""
import os
import random
import signal
import sys

import numpy as np

ROWS, COLS = 64, 32


def put(path, attrs, data, upto, rng, rank):
    """In a child process: rank's piece; SIGKILL after upto bytes."""
    return run_rank(os.path.dirname(path), rank,
                    [(os.path.basename(path), attrs, data)],
                    upto if upto < len(data) else None, False, rng)


def commit(ck, rank):
    try:
        with open(ck + "/.ckptfs/commit", "w") as f:
            f.write(str(rank))
    except OSError:
        pass
    return open(ck + "/.ckptfs/status").read().strip()


def pieces(form, w, blob):
    """(file, attrs, bytes) of rank 0 (the killed one) and rank 1."""
    f32 = [("dtype", "float32"), ("shape", "%d,%d" % (ROWS, COLS))]
    half = ROWS // 2
    if form == "whole":
        return (("w", f32, w.tobytes()), ("v", f32, w[::-1].tobytes()))
    if form == "rows":
        return (("w", f32 + [("offsets", "%d,0" % half)], w[half:].tobytes()),
                ("w", f32 + [("sizes", "%d,%d" % (half, COLS))],
                 w[:half].tobytes()))
    if form == "cols":
        c = COLS // 2
        return (("w", f32 + [("offsets", "0,%d" % c),
                             ("sizes", "%d,%d" % (ROWS, COLS - c))],
                 np.ascontiguousarray(w[:, c:]).tobytes()),
                ("w", f32 + [("sizes", "%d,%d" % (ROWS, c))],
                 np.ascontiguousarray(w[:, :c]).tobytes()))
    if form == "bytes":
        return (("rng", [("shape", str(len(blob)))], blob),
                ("v", f32, w.tobytes()))
    raise SystemExit("unknown form " + form)


def expected(form, w, blob):
    """{file: bytes} the committed checkpoint must hold."""
    if form == "whole":
        return {"w": w.tobytes(), "v": w[::-1].tobytes()}
    if form == "bytes":
        return {"rng": blob, "v": w.tobytes()}
    return {"w": w.tobytes()}


def run_rank(ck, rank, pieces_, kill_at, commit_it, rng):
    """In a child process: rank writes pieces_ [(file, attrs, bytes)] in
    random blocks, SIGKILLed once kill_at bytes are written in all (None:
    never); when all are written, commits when commit_it, and is SIGKILLed
    then when kill_at is "after".  Returns the wait status."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setxattr(ck, "user.ckpt.rank", str(rank).encode())
            done = 0
            for name, attrs, data in pieces_:
                fd = os.open(ck + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                for k, v in attrs:
                    os.setxattr(fd, "user.ckpt." + k, v.encode())
                at = 0
                while at < len(data):
                    n = min(len(data) - at, rng.randint(1, 9000))
                    if isinstance(kill_at, int):
                        n = min(n, max(kill_at - done, 1))
                    n = os.write(fd, data[at:at + n])
                    at += n
                    done += n
                    if isinstance(kill_at, int) and done >= kill_at:
                        os.kill(os.getpid(), signal.SIGKILL)
                os.close(fd)
            if commit_it:
                with open(ck + "/.ckptfs/commit", "w") as f:
                    f.write(str(rank))
            if kill_at == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(0)
        except OSError as e:
            sys.stderr.write("rank %d: %s\n" % (rank, e))
            os._exit(3)
    _, st = os.waitpid(pid, 0)
    return st


def rerun_trial(ck, t, rng, counts):
    """Rank 0 writes a (whole) and b (the last rows of a split), and is
    SIGKILLed at a random point: in a, in b, after b, or after its commit;
    rank 1 writes v and b's first rows and commits before or after rank 0
    runs again, writing a and b whole again with other bytes (the same
    bytes in one trial of 4), and commits.  The save must commit with the
    re-run's bytes.  Returns "" or why the trial failed."""
    gen = np.random.default_rng(rng.randrange(1 << 30))
    first = [gen.standard_normal((ROWS, COLS)).astype("<f4") for _ in range(2)]
    again = first if rng.random() < 0.25 else \
        [gen.standard_normal((ROWS, COLS)).astype("<f4") for _ in range(2)]
    v = gen.standard_normal((ROWS, COLS)).astype("<f4")
    half = ROWS // 2
    f32 = [("dtype", "float32"), ("shape", "%d,%d" % (ROWS, COLS))]

    def rank0(a, b):
        return [("a", f32, a.tobytes()),
                ("b", f32 + [("offsets", "%d,0" % half)], b[half:].tobytes())]
    total = sum(len(d) for _, _, d in rank0(*first))
    where = rng.choice(["a", "b", "end", "commit"])
    if where == "a":
        kill_at = rng.randint(1, len(first[0].tobytes()) - 1)
    elif where == "b":
        kill_at = rng.randint(len(first[0].tobytes()) + 1, total - 1)
    else:
        kill_at = "after"
    counts[where] += 1
    run_rank(ck, 0, rank0(*first), kill_at, where == "commit", rng)
    rank1 = [("v", f32, v.tobytes()),
             ("b", f32 + [("sizes", "%d,%d" % (half, COLS))], again[1][:half].tobytes())]
    # rank 1 before the re-run only when rank 0 had not committed: else
    # the save would commit then, with the first run's bytes
    rank1_first = where != "commit" and rng.random() < 0.5
    if rank1_first and run_rank(ck, 1, rank1, None, True, rng) != 0:
        return "rank 1 failed"
    if run_rank(ck, 0, rank0(*again), None, True, rng) != 0:
        return "rank 0's re-run failed"
    if not rank1_first and run_rank(ck, 1, rank1, None, True, rng) != 0:
        return "rank 1 failed"
    status = open(ck + "/.ckptfs/status").read().strip()
    if status != "committed":
        return "the re-run (rank 0 killed in %s) does not commit: %s" % (where, status)
    want = {"a": again[0].tobytes(), "b": again[1].tobytes(), "v": v.tobytes()}
    for name, data in want.items():
        if open(ck + "/" + name, "rb").read() != data:
            counts["corrupt"] += 1
            return "CORRUPT: %s does not read back as the re-run wrote it" % name
    return ""


def rerun_main(mnt, trials, rng, base):
    counts = {"a": 0, "b": 0, "end": 0, "commit": 0, "corrupt": 0}
    bad = 0
    for t in range(1, trials + 1):
        ck = "%s/step-%06d" % (mnt, base + t)
        os.mkdir(ck)
        why = rerun_trial(ck, t, rng, counts)
        if why:
            bad += 1
            print("not ok - rerun trial %d: %s" % (t, why))
        else:
            print("ok - rerun trial %d: committed with the re-run's bytes" % t)
    print("# writer killed, same rank run again: %d trials (killed in its "
          "first piece %d, in its second %d, after its last byte %d, after "
          "its commit %d): %d committed with the re-run's bytes, %d corrupt "
          "commits" % (trials, counts["a"], counts["b"], counts["end"],
                       counts["commit"], trials - bad, counts["corrupt"]))
    return 1 if bad else 0


def main():
    mnt, form = sys.argv[1], sys.argv[2]
    trials, seed, base = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    rng = random.Random("%s-%d" % (form, seed))
    if form == "rerun":
        return rerun_main(mnt, trials, rng, base)
    killed = completed = corrupt = bad = resaved = 0
    for t in range(1, trials + 1):
        gen = np.random.default_rng(rng.randrange(1 << 30))
        w = gen.standard_normal((ROWS, COLS)).astype("<f4")
        blob = gen.integers(0, 256, rng.randint(1000, 70000), dtype=np.uint8).tobytes()
        (f0, a0, d0), (f1, a1, d1) = pieces(form, w, blob)
        ck = "%s/step-%06d" % (mnt, base + t)
        os.mkdir(ck)
        # one trial in 8 killed after the piece's last byte, before close;
        # of the others half at a row's end (a truncated piece that could
        # pass for a shorter one), half anywhere
        unit = len(d0) // ROWS if form in ("rows", "cols") else len(d0) // 8
        if rng.random() < 0.125:
            upto = len(d0)
        elif rng.random() < 0.5:
            upto = unit * rng.randint(1, len(d0) // unit - 1)
        else:
            upto = rng.randint(1, len(d0) - 1)
        st = put(ck + "/" + f0, a0, d0, upto, rng, 0)
        if upto < len(d0):
            killed += 1
        else:
            completed += 1
        if put(ck + "/" + f1, a1, d1, len(d1), rng, 1) != 0:
            print("not ok - trial %d: rank 1's piece failed" % t)
            bad += 1
            continue
        commit(ck, 1)
        status = commit(ck, 0)
        why = ""
        if status == "committed":
            if upto < len(d0):
                why = "committed a piece killed at %d of %d bytes" % (upto, len(d0))
        elif upto == len(d0):
            why = "a complete piece was not committed: " + status
        elif not status.startswith("failed: "):
            why = "status after a killed piece: " + status
        else:
            st = put(ck + "/" + f0, a0, d0, len(d0), rng, 0)
            status = commit(ck, 0)
            if st != 0 or status != "committed":
                why = "rank 0 written again does not commit: " + status
            else:
                resaved += 1
        if status == "committed":
            for name, want in expected(form, w, blob).items():
                got = open(ck + "/" + name, "rb").read()
                if got != want:
                    corrupt += 1
                    why = "CORRUPT: %s reads %d bytes unlike the %d written" % (name, len(got), len(want))
                    break
        if why:
            bad += 1
            print("not ok - %s trial %d (killed after %d of %d bytes): %s" % (form, t, upto, len(d0), why))
        else:
            print("ok - %s trial %d: killed after %d of %d bytes: %s" % (form, t, upto, len(d0), status[:60]))
    print("# writer killed, %s piece: %d trials: %d killed mid-piece (%d saved "
          "again and committed), %d after the last byte, %d corrupt commits"
          % (form, trials, killed, resaved, completed, corrupt))
    return 1 if bad or corrupt else 0


if __name__ == "__main__":
    sys.exit(main())
