"""util.py - shared helpers of the Python tests (tests/python/test_*.py),
which run under tests/python/run.sh (make check) with the build tree's
ckptfs package on PYTHONPATH.

    need_torch()            torch (with the 1.13 DCP import fix), or exit
                            77 (skipped) without it
    optional_torch()        the same, or None
    TempDir                 a fresh temp dir per test (removed after)
    ckpt(*args)             runs the ckpt tool; a CompletedProcess
    snapshot(path)          {relative path: (size, sha256)} of a tree, to
                            show that a failed call changed nothing
    spawn(argv_of_rank, n)  runs n processes (argv_of_rank(rank, init)
                            gives each one's command line) with a fresh
                            file:// rendezvous for torch.distributed, and
                            returns their (exit status, output)
    mounted(src, mnt)       a ckptfs mount for a with-block, always
                            unmounted
    main()                  unittest.main, verbose
"""
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

SRCDIR = os.environ.get("CKPT_SRCDIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BUILDDIR = os.environ.get("CKPT_BUILDDIR") or SRCDIR
CKPT = os.environ.get("CKPT") or os.path.join(BUILDDIR, "tools", "ckpt")
CKPTFS = os.environ.get("CKPTFS") or os.path.join(BUILDDIR, "fs", "ckptfs")
HELPERS = os.path.join(SRCDIR, "tests", "helpers")
HERE = os.path.dirname(os.path.abspath(__file__))
SANITIZED = bool(os.environ.get("CKPT_TEST_SANITIZED"))


def skip_all(why):
    print("SKIP: %s" % why)
    sys.exit(77)


def optional_torch():
    """torch (DCP importable), or None where torch is not usable."""
    sys.path.insert(0, HELPERS)
    from torch_compat import allow_unhashable_dataclass_defaults
    allow_unhashable_dataclass_defaults()
    try:
        import torch
        import torch.distributed  # noqa: F401
        return torch
    except Exception:  # no torch here: not an error of ckptfs
        return None


def need_torch():
    """torch, with torch.distributed's checkpoint importable, or exit 77."""
    torch = optional_torch()
    if torch is None:
        skip_all("torch is not usable here")
    return torch


class TempDir(unittest.TestCase):
    """A TestCase with self.tmp, a fresh directory per test."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ckpt-py-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def assertUnchanged(self, before, path, what=""):
        self.assertEqual(snapshot(path), before,
                         "%s changed %s" % (path, what))


def ckpt(*args, check=False):
    p = subprocess.run([CKPT] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    if check and p.returncode != 0:
        raise AssertionError("ckpt %s: exit %d: %s" % (
            " ".join(map(str, args)), p.returncode, p.stderr.decode()))
    return p


def snapshot(path):
    """{relative path: (size, sha256)} of every file under path (or of
    path itself), and the entry list, so any change shows."""
    out = {}
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return {".": (os.path.getsize(path),
                          hashlib.sha256(f.read()).hexdigest())}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path) + "/"] = None
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = (
                    os.path.getsize(full), hashlib.sha256(f.read()).hexdigest())
    return out


def spawn(argv_of_rank, n, timeout=300):
    """Runs n processes at once, each with a rendezvous file for
    torch.distributed's file:// init (no TCP ports: test runs share the
    machine); returns [(exit status, output)] by rank."""
    fd, init = tempfile.mkstemp(prefix="ckpt-gloo-")
    os.close(fd)
    os.unlink(init)
    procs = [subprocess.Popen(argv_of_rank(r, init), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for r in range(n)]
    out = []
    try:
        for p in procs:
            text, _ = p.communicate(timeout=timeout)
            out.append((p.returncode, text.decode("utf-8", "replace")))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if os.path.exists(init):
            os.unlink(init)
    return out


def python_argv(script, *args):
    return [sys.executable, script] + [str(a) for a in args]


def can_mount():
    return (os.path.exists("/dev/fuse") and os.access(CKPTFS, os.X_OK)
            and shutil.which("fusermount3") is not None)


@contextlib.contextmanager
def mounted(src, mnt, *opts):
    """src mounted read-only at mnt by ckptfs for the with-block; always
    unmounted (and the daemon stopped) afterwards."""
    os.makedirs(mnt, exist_ok=True)
    log = open(mnt.rstrip("/") + ".log", "wb")
    daemon = subprocess.Popen([CKPTFS, "-f"] + list(opts) + [src, mnt],
                              stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            if os.path.ismount(mnt) or daemon.poll() is not None:
                break
            time.sleep(0.1)
        if not os.path.ismount(mnt):
            raise AssertionError("ckptfs did not mount %s (exit %s)"
                                 % (src, daemon.poll()))
        yield mnt
    finally:
        if os.path.ismount(mnt):
            if subprocess.run(["fusermount3", "-u", mnt]).returncode != 0:
                subprocess.run(["fusermount3", "-uz", mnt])
        try:
            daemon.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()


def main():
    unittest.main(verbosity=2)
