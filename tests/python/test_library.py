"""test_library.py - how the package finds libckptfs: CKPTFS_LIBRARY (a
file or a directory) first and alone; then the build tree's or install
prefix's library named by _config.py (make writes the build tree's, make
install the installed one: this test installs into a temp prefix); then
the system's loader.  A library that is not there is an ImportError that
says what was tried and how to point at the library; a sanitizer-built
library loaded without the sanitizer runtime is explained, not a crash.
Each case runs in a fresh interpreter."""
import os
import shutil
import subprocess
import sys

import util

BUILD_LIB = os.path.join(util.BUILDDIR, "src", ".libs", "libckptfs.so")
PROBE = ("import ckptfs, ckptfs._capi as C; "
         "print(ckptfs.LIBRARY); print(C.LIBRARY_ORIGIN); "
         "print(ckptfs.__version__)")


def run(pythonpath, env=None, code=PROBE):
    e = dict(os.environ)
    e.pop("CKPTFS_LIBRARY", None)
    e["PYTHONPATH"] = pythonpath
    e.update(env or {})
    for k, v in list(e.items()):
        if v is None:
            del e[k]
    return subprocess.run([sys.executable, "-c", code], env=e,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=120)


def lines(p):
    return p.stdout.decode().split("\n")


class Lookup(util.TempDir):
    def setUp(self):
        super().setUp()
        # a copy of the package without _config.py: what the source tree
        # (or a package copied by hand) is
        self.bare = self.path("bare")
        shutil.copytree(os.path.join(util.SRCDIR, "python", "ckptfs"),
                        os.path.join(self.bare, "ckptfs"),
                        ignore=shutil.ignore_patterns("_config.py",
                                                      "__pycache__"))

    def test_build_tree(self):
        p = run(os.path.join(util.BUILDDIR, "python"))
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        out = lines(p)
        self.assertEqual(os.path.realpath(out[0]),
                         os.path.realpath(BUILD_LIB))
        self.assertEqual(out[1], "the build tree")

    def test_env_file_and_directory_win(self):
        copy = self.path("lib")
        os.mkdir(copy)
        shutil.copy(BUILD_LIB, os.path.join(copy, "libckptfs.so"))
        for value in (copy, os.path.join(copy, "libckptfs.so")):
            p = run(os.path.join(util.BUILDDIR, "python"),
                    {"CKPTFS_LIBRARY": value})
            self.assertEqual(p.returncode, 0, p.stderr.decode())
            self.assertEqual(lines(p)[0], os.path.join(copy, "libckptfs.so"))
            self.assertEqual(lines(p)[1], "CKPTFS_LIBRARY")

    def test_env_missing_is_an_import_error(self):
        for value, what in ((self.path("nope.so"), "does not exist"),
                            (self.tmp, "is a directory without")):
            p = run(os.path.join(util.BUILDDIR, "python"),
                    {"CKPTFS_LIBRARY": value})
            err = p.stderr.decode()
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("ImportError", err)
            self.assertIn("CKPTFS_LIBRARY=%s %s" % (value, what), err)
            self.assertIn("make install", err)

    def test_system_loader(self):
        p = run(self.bare, {"LD_LIBRARY_PATH": os.path.dirname(BUILD_LIB)})
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(lines(p)[0], "libckptfs.so.0")
        self.assertEqual(lines(p)[1], "the system's loader")

    def test_nothing_found(self):
        p = run(self.bare, {"LD_LIBRARY_PATH": None})
        if p.returncode == 0:       # a libckptfs is installed system-wide
            self.assertEqual(lines(p)[1], "the system's loader")
            return
        err = p.stderr.decode()
        self.assertIn("ImportError: ckptfs: cannot load libckptfs", err)
        self.assertIn("libckptfs.so.0", err)
        self.assertIn("point CKPTFS_LIBRARY at libckptfs.so", err)

    def test_make_install(self):
        prefix = self.path("prefix")
        env = dict(os.environ, MAKEFLAGS="", MFLAGS="", MAKELEVEL="")
        p = subprocess.run(
            ["make", "-C", util.BUILDDIR, "prefix=" + prefix,
             "install-libLTLIBRARIES", "install-pkgpythonPYTHON",
             "install-data-hook"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout.decode()[-2000:])
        pkgs = [os.path.join(root) for root, dirs, _ in os.walk(prefix)
                if "ckptfs" in dirs and root.endswith("-packages")]
        self.assertEqual(len(pkgs), 1, "installed package: %s" % pkgs)
        with open(os.path.join(pkgs[0], "ckptfs", "_config.py")) as f:
            self.assertIn("ORIGIN = \"the install prefix\"", f.read())
        p = run(pkgs[0], {"LD_LIBRARY_PATH": None})
        self.assertEqual(p.returncode, 0, p.stderr.decode())
        self.assertEqual(lines(p)[0], os.path.join(prefix, "lib",
                                                   "libckptfs.so.0"))
        self.assertEqual(lines(p)[1], "the install prefix")
        # and it works: a save and a load through the installed package
        code = ("import ckptfs, numpy as np; a = np.arange(6.0); "
                "ckptfs.save(%r, {'a': a}); "
                "assert (ckptfs.load(%r)['a'] == a).all(); print('ok')"
                % (self.path("ck"), self.path("ck")))
        p = run(pkgs[0], {"LD_LIBRARY_PATH": None}, code)
        self.assertEqual(p.stdout.decode().strip(), "ok", p.stderr.decode())

    def test_sanitizer_build_without_runtime(self):
        if not util.SANITIZED:
            self.skipTest("not a sanitizer build")
        p = run(os.path.join(util.BUILDDIR, "python"), {"LD_PRELOAD": None})
        err = p.stderr.decode()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("built with AddressSanitizer", err)
        self.assertIn("LD_PRELOAD", err)


if __name__ == "__main__":
    util.main()
