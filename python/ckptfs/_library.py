"""_library.py - finds and loads libckptfs.so for the package.

Lookup order, the first that applies wins:

1. ``CKPTFS_LIBRARY``: the library file, or a directory that holds it
   (e.g. ``build/src/.libs``).  When set, nothing else is tried.
2. ``_config.py`` next to this file: written by ``make`` for the build
   tree's copy of the package (``BUILD/python/ckptfs``) and by
   ``make install`` for the installed one, naming the library of that
   build tree or install prefix.  Skipped when that file is gone.
3. The system's dynamic loader (``libckptfs.so.0`` on its search path).

A library that cannot be loaded is an ImportError that says what was
tried and how to point the package at the library.  A library built with
AddressSanitizer can only be loaded into a process that has the sanitizer
runtime first: that case is recognised and explained instead of letting
the sanitizer abort the interpreter.
"""
import ctypes
import os

SONAME = "libckptfs.so.0"
_NAMES = ("libckptfs.so", SONAME)

HOW = ("point CKPTFS_LIBRARY at libckptfs.so (the file, or the directory "
       "that holds it, e.g. build/src/.libs), or install ckptfs "
       "(make install) so that the system's loader finds it")


def _from_env(value):
    """The library file CKPTFS_LIBRARY names (a file or a directory)."""
    if os.path.isdir(value):
        for name in _NAMES:
            path = os.path.join(value, name)
            if os.path.exists(path):
                return path
        raise ImportError("ckptfs: CKPTFS_LIBRARY=%s is a directory without "
                          "libckptfs.so; %s" % (value, HOW))
    if not os.path.exists(value):
        raise ImportError("ckptfs: CKPTFS_LIBRARY=%s does not exist; %s"
                          % (value, HOW))
    return value


def _candidates():
    """(where, path) pairs to try, in order."""
    env = os.environ.get("CKPTFS_LIBRARY")
    if env:
        return [("CKPTFS_LIBRARY", _from_env(env))]
    out = []
    try:
        from . import _config
        if os.path.exists(_config.LIBRARY):
            out.append((_config.ORIGIN, _config.LIBRARY))
    except ImportError:
        pass
    out.append(("the system's loader", SONAME))
    return out


def _needs_asan(path):
    """True when the file is a library linked against libasan that this
    process has not loaded (loading it would abort the interpreter)."""
    try:
        with open(path, "rb") as f:
            linked = b"libasan.so" in f.read()
    except OSError:
        return False
    if not linked:
        return False
    with open("/proc/self/maps") as maps:
        return "libasan.so" not in maps.read()


def _asan_hint(path):
    return ("ckptfs: %s is built with AddressSanitizer; start Python with "
            "its runtime preloaded: LD_PRELOAD=\"$(gcc -print-file-name="
            "libasan.so) $(gcc -print-file-name=libubsan.so)\" "
            "ASAN_OPTIONS=detect_leaks=0 (the test driver "
            "tests/python/run.sh does this)" % path)


def load():
    """Returns (ctypes.CDLL, path, where) or raises ImportError."""
    tried = []
    for where, path in _candidates():
        if os.path.isabs(path) and _needs_asan(path):
            raise ImportError(_asan_hint(path))
        try:
            return ctypes.CDLL(path), path, where
        except OSError as exc:
            tried.append("%s (%s): %s" % (path, where, exc))
    raise ImportError("ckptfs: cannot load libckptfs: tried %s; %s"
                      % ("; ".join(tried), HOW))
