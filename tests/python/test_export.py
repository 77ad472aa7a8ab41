"""test_export.py - runs tests/compat/test_export.py (ckptfs.export read
back by torch.load, FileSystemReader and a safetensors parser) here, with
torch 1.13, until the compat harness runs tests/compat/ on the host too;
the torch 2.x roots run it there with the safetensors package."""
import os
import runpy
import sys

import util

sys.path.insert(0, os.path.join(util.SRCDIR, "tests", "compat"))
runpy.run_path(os.path.join(util.SRCDIR, "tests", "compat", "test_export.py"),
               run_name="__main__")
