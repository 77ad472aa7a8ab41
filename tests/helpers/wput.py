#!/usr/bin/python3
"""wput.py - writes through a writable ckptfs mount the way a rank does,
reporting exactly which step failed and with which errno (for the tests
of docs/MOUNT.md, "Writing").

  wput.py put PATH SRC [--dtype D] [--shape S] [--offsets O] [--sizes Z]
                       [--from A] [--to B] [--seek K] [--block N] [--hold S]
                       [--delay S]
      opens PATH (O_WRONLY|O_CREAT|O_TRUNC), sets the given user.ckpt.*
      attributes on the descriptor, waits S seconds (--hold: lets several
      writers set their attributes before any writes), writes bytes [A, B)
      of file SRC in blocks of N bytes (starting at file offset K with
      --seek; sleeping S seconds after each with --delay), closes.
  wput.py commit CKPTDIR RANK...   writes the ranks to CKPTDIR/.ckptfs/commit
  wput.py setx PATH NAME VALUE     setxattr on PATH

Prints "ok" and exits 0, or prints "ERR <step> <ERRNO-NAME>" and exits 1.
"""
import argparse
import errno
import os
import sys
import time


def fail(step, e):
    print("ERR %s %s" % (step, errno.errorcode.get(e.errno, str(e.errno))))
    sys.exit(1)


def put(a):
    data = open(a.src, "rb").read()
    data = data[a.start:a.end if a.end is not None else len(data)]
    try:
        fd = os.open(a.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        fail("open", e)
    for name in ("dtype", "shape", "offsets", "sizes"):
        v = getattr(a, name)
        if v is not None:
            try:
                os.setxattr(fd, "user.ckpt." + name, v.encode())
            except OSError as e:
                fail("setxattr-" + name, e)
    time.sleep(a.hold)
    pos = a.seek
    try:
        for i in range(0, len(data), a.block):
            block = data[i:i + a.block]
            while block:    # a short write: the rest again (its error next)
                n = os.pwrite(fd, block, pos)
                block = block[n:]
                pos += n
            time.sleep(a.delay)
    except OSError as e:
        fail("write", e)
    try:
        os.close(fd)
    except OSError as e:
        fail("close", e)
    print("ok")


def commit(a):
    try:
        fd = os.open(os.path.join(a.ckpt, ".ckptfs", "commit"), os.O_WRONLY)
    except OSError as e:
        fail("open", e)
    try:
        os.write(fd, (" ".join(a.ranks) + "\n").encode())
    except OSError as e:
        fail("commit", e)
    finally:
        os.close(fd)
    print("ok")


def setx(a):
    try:
        os.setxattr(a.path, a.name, a.value.encode())
    except OSError as e:
        fail("setxattr", e)
    print("ok")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("put")
    q.add_argument("path")
    q.add_argument("src")
    for name in ("dtype", "shape", "offsets", "sizes"):
        q.add_argument("--" + name)
    q.add_argument("--from", dest="start", type=int, default=0)
    q.add_argument("--to", dest="end", type=int)
    q.add_argument("--seek", type=int, default=0)
    q.add_argument("--block", type=int, default=1 << 20)
    q.add_argument("--hold", type=float, default=0.0)
    q.add_argument("--delay", type=float, default=0.0)
    q = sub.add_parser("commit")
    q.add_argument("ckpt")
    q.add_argument("ranks", nargs="+")
    q = sub.add_parser("setx")
    q.add_argument("path")
    q.add_argument("name")
    q.add_argument("value")
    a = p.parse_args()
    {"put": put, "commit": commit, "setx": setx}[a.cmd](a)


if __name__ == "__main__":
    main()
