"""test_abi.py - the ctypes mirrors of python/ckptfs/_capi.py have the
layout the C compiler gives the structs of ckptfs.h: size, alignment and
the offset and size of every field, field names included (a field added,
removed, renamed, retyped or reordered on either side fails), and the
enum values the package uses.  The reference is tests/python/abi_layout,
compiled from the header in this build."""
import ctypes
import json
import os
import subprocess

import util
from ckptfs import _capi as C

LAYOUT = os.path.join(util.BUILDDIR, "tests", "python", "abi_layout")


class Abi(util.TempDir):
    @classmethod
    def setUpClass(cls):
        if not os.access(LAYOUT, os.X_OK):
            raise AssertionError("%s is not built (make check builds it)"
                                 % LAYOUT)
        cls.ref = json.loads(subprocess.run([LAYOUT], check=True,
                                            stdout=subprocess.PIPE).stdout)

    def test_every_struct_is_mirrored(self):
        self.assertEqual(sorted(C.STRUCTS), sorted(self.ref["structs"]))

    def test_struct_layouts(self):
        for cname, py in C.STRUCTS.items():
            want = self.ref["structs"][cname]
            with self.subTest(struct=cname):
                self.assertEqual(ctypes.sizeof(py), want["size"], "sizeof")
                self.assertEqual(ctypes.alignment(py), want["align"],
                                 "alignment")
                got = {name: [getattr(py, name).offset,
                              getattr(py, name).size]
                       for name, _ in py._fields_}
                self.assertEqual(got, want["fields"])

    def test_enums_and_constants(self):
        ref = self.ref["enums"]
        self.assertEqual(ref.pop("enum_size"), ctypes.sizeof(ctypes.c_int),
                         "enums are passed as int")
        for name, value in ref.items():
            with self.subTest(name=name):
                self.assertEqual(getattr(C, name), value)

    def test_library_matches_header(self):
        import ckptfs
        self.assertEqual(ckptfs.__version__,
                         C.lib.ckpt_version().decode())
        for code in range(1, C.DTYPE_COUNT):
            from ckptfs import _dtypes
            self.assertEqual(C.lib.ckpt_dtype_name(code).decode(),
                             _dtypes.name(code))
            self.assertEqual(C.lib.ckpt_dtype_size(code),
                             _dtypes.STORAGE[code].itemsize)


if __name__ == "__main__":
    util.main()
