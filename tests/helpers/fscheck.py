#!/usr/bin/python3
"""Checks of a ckptfs mount (docs/MOUNT.md) against NumPy references, for the
tests under tests/fs/.  Run with /usr/bin/python3 (the one with NumPy).

Every checker prints 'ok WHAT' / 'FAIL WHAT: why' lines (counted by
tests/cli/lib.sh's `report`); other lines are notes.  A manifest is the
manifest.json that gen_npy.py writes (or `extras` below); the expected bytes
of a tensor come from its source file through ref.py, never from ckptfs.

    extras DATADIR
        writes a few more tensors into DATADIR (a tensor that is also a
        module: 'a.b' and 'a.b.c', likewise 'top' and 'top.sub'; names with
        '%', a space and UTF-8) and DATADIR/all.json + all.lst: gen_npy.py's
        manifest plus these
    oddnames DIR / oddrename INDEX_DB DIR
        tensors for names ckptfs refuses but imported checkpoints may have
        ('/', a control byte, DEL, an empty component, '%'): oddnames writes
        their .npy files and prints placeholder NAME=FILE pack arguments;
        oddrename renames them in a packed index.db (ids kept in FQN order)
        and writes the manifest DIR/odd.json
    fqnattr MANIFEST MNT
        user.ckpt.fqn of each tensor's file is its FQN
    paths MANIFEST
        'fqn|path|npypath' per tensor: the path docs/MOUNT.md gives the FQN
        in a checkpoint, and the candidates of the .npy view
    tree MANIFEST MNT INDEX_DB
        every directory lists exactly the expected names (no dot entries,
        'b.tensor' beside 'b/'); modes 0444/0555, regular files and
        directories; sizes numel*itemsize; times those of INDEX_DB; the
        hidden .npy and .ckptfs reachable; names that no FQN maps to absent
    content MANIFEST MNT
        numpy.fromfile on each tensor file equals the reference; numpy.load
        on the .npy view equals it (bf16/fp8 as exact float32, bool |b1,
        byte objects |u1), .npy version 1.0 C order, stat size = bytes read,
        random O_DIRECT preads of the view agree with the whole read
    xattrs MANIFEST MNT INFO_DIR LS_FILE < GETFATTR_OUTPUT
        `getfattr -d -e hex -m ^user\\.ckpt\\. --absolute-names FILES` output
        checked against the manifest, `ckpt info CK FQN` (INFO_DIR/<fqn>.txt)
        and `ckpt ls CK` (LS_FILE); also os.getxattr agrees with getfattr
    metadata MANIFEST JSONFILE INFO_DIR [KEY=VALUE...]
        .ckptfs/metadata.json parses and lists every tensor with its dtype,
        shape and number of chunks, and the checkpoint metadata given
    randreads MANIFEST INFO_DIR N SEED [--parts K --prefix P]
        prints N random reads 'fqn|path|offset|length|bs', one per line:
        unaligned, most crossing a frame or chunk boundary (from ckpt info),
        some running past the end of the file; every tensor at least once;
        with --parts, shuffled and dealt into files P0.lst ... P<K-1>.lst
    checkreads MANIFEST LIST DIR
        DIR/<i> holds what read i of LIST returned: compare each
    preads MNT MANIFEST LIST [--direct] [--barrier FILE] [--tag T]
        does LIST's reads with os.pread (O_DIRECT: the daemon sees the exact
        unaligned offsets), compares them; with --barrier, opens the files,
        creates FILE.ready.<pid>, waits for FILE to exist, then reads
    framerange MANIFEST FQN INFO_FILE CHUNK FRAME
        'offset length file file_offset stored codec': the byte range of the
        tensor's row-major image that frame FRAME of chunk CHUNK holds (the
        chunk must be a band of whole rows) and where it is stored
    errno PATH OFFSET LENGTH ERRNO [--direct]
        os.pread(PATH, LENGTH, OFFSET) must raise OSError with ERRNO
    slowread PATH REFFILE PROGRESS FLAG [--delay S]
        reads PATH in 4 KiB preads, writing the count of reads to PROGRESS,
        sleeping S between reads until FLAG exists, then as fast as it can,
        until EOF or an error; prints 'eof BYTES' or 'error ERRNO BYTES', and
        'FAIL ...' when a byte read differs from REFFILE
"""
import errno as errno_mod
import json
import os
import re
import stat
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckinfo  # noqa: E402  (parse_info, parse_dims)
import ref     # noqa: E402  (load, tensor_arg, cbytes, decode_lowp, ...)


def ok(what):
    print("ok " + what)
    sys.stdout.flush()


def fail(what):
    print("FAIL " + what)
    sys.stdout.flush()


def expect(cond, what, detail=""):
    if cond:
        ok(what)
    else:
        fail(what + (": " + str(detail) if detail != "" else ""))
    return cond


def load_manifest(path):
    with open(path) as f:
        return json.load(f)


_REF_CACHE = {}


def ref_tensor(m):
    key = m["file"]
    if key not in _REF_CACHE:
        _REF_CACHE[key] = ref.load(ref.tensor_arg(m))
    return _REF_CACHE[key]


def ref_bytes(m):
    return ref.cbytes(ref_tensor(m).arr)


def numel(shape):
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


# ------------------------------------------------------------------ names
def esc_comp(c):
    """One FQN component as a file name (docs/MOUNT.md, 'Escaping')."""
    if c == "":
        return "%"
    out = []
    for ch in c:
        o = ord(ch)
        if ch == "%":
            out.append("%25")
        elif ch == "/":
            out.append("%2F")
        elif o < 0x20 or o == 0x7F:
            out.append("%%%02X" % o)
        else:
            out.append(ch)
    return "".join(out)


def fqn_paths(fqns):
    """{fqn: path in the checkpoint}: 'a.b.c' -> 'a/b/c'; a tensor that is
    also a module gets '.tensor' appended."""
    prefixes = set()
    for f in fqns:
        parts = f.split(".")
        for i in range(1, len(parts)):
            prefixes.add(".".join(parts[:i]))
    res = {}
    for f in fqns:
        p = "/".join(esc_comp(c) for c in f.split("."))
        if f in prefixes:
            p += ".tensor"
        res[f] = p
    return res


def npy_candidates(path):
    """Where the .npy view may put the tensor at PATH.  docs/MOUNT.md shows
    '.npy/a/b/c.npy'; for 'a/b.tensor' it does not say whether the view
    keeps '.tensor' ('a/b.tensor.npy', first) or drops it ('a/b.npy')."""
    c = [".npy/" + path + ".npy"]
    if path.endswith(".tensor"):
        c.append(".npy/" + path[:-len(".tensor")] + ".npy")
    return c


def expected_dirs(paths):
    dirs = {"": set()}
    for p in paths.values():
        comps = p.split("/")
        for i in range(len(comps)):
            d = "/".join(comps[:i])
            dirs.setdefault(d, set()).add(comps[i])
            if i < len(comps) - 1:
                dirs.setdefault("/".join(comps[:i + 1]), set())
    return dirs


# ----------------------------------------------------------------- extras
def cmd_extras(datadir):
    man = load_manifest(os.path.join(datadir, "manifest.json"))
    rng = np.random.default_rng(4321)
    extra = [
        # (fqn, numpy dtype, ckpt dtype, shape)
        ("a.b", "<f4", "f32", (5, 3)),
        ("a.b.c", "<i2", "i16", (7,)),
        ("a.b.d.e", "|u1", "u8", (2, 2)),
        ("top", "<i8", "i64", (3,)),
        ("top.sub", "<f8", "f64", (2, 3)),
        ("esc.100%.x y", "|u1", "u8", (10,)),
        ("esc.\u00fcn\u00efcode", "<f8", "f64", (3,)),
    ]
    os.makedirs(os.path.join(datadir, "extra"), exist_ok=True)
    for i, (fqn, npdt, dt, shape) in enumerate(extra):
        n = numel(shape)
        if np.dtype(npdt).kind == "f":
            a = rng.standard_normal(n).astype(npdt).reshape(shape)
        else:
            a = rng.integers(0, 100, size=n).astype(npdt).reshape(shape)
        fn = os.path.join(datadir, "extra", "x%d.npy" % i)
        np.save(fn, a, allow_pickle=False)
        man[fqn] = dict(file=fn, kind="npy", dtype=dt, shape=list(shape),
                        nbytes=int(a.nbytes), itemsize=a.itemsize, order="C",
                        packarg="%s=%s" % (fqn, fn))
    with open(os.path.join(datadir, "all.json"), "w") as f:
        json.dump(man, f, indent=1, sort_keys=True)
    with open(os.path.join(datadir, "all.lst"), "w") as f:
        for fqn in sorted(man):
            m = man[fqn]
            f.write("|".join([fqn, m["kind"], m["dtype"],
                              ",".join(str(d) for d in m["shape"]),
                              str(m["nbytes"]), m["file"], m["packarg"]]) + "\n")
    return 0


# Names ckptfs refuses to write but imported checkpoints may hold: '/', a
# control byte, DEL, an empty component.  Packed under placeholder names
# ('odd.n0'...), then renamed in index.db keeping the tensors' ids in FQN
# (byte) order, as the writer leaves them.
ODD_NAMES = ["odd.a/1", "odd.a\x012", "odd.a\x7f3", "odd.a4..x", "odd.%41"]


def cmd_oddnames(d):
    os.makedirs(d, exist_ok=True)
    for i in range(len(ODD_NAMES)):
        a = (np.arange(3 + i, dtype="<i4") * (i + 7)).reshape(-1)
        np.save(os.path.join(d, "odd%d.npy" % i), a, allow_pickle=False)
        print("odd.n%d=%s" % (i, os.path.join(d, "odd%d.npy" % i)))
    return 0


def cmd_oddrename(index_db, d):
    import sqlite3
    new = sorted(ODD_NAMES, key=lambda x: x.encode())
    c = sqlite3.connect(index_db)
    man = {}
    for i, name in enumerate(new):
        old = "odd.n%d" % i
        n = c.execute("UPDATE tensors SET fqn = ? WHERE fqn = ?", (name, old)).rowcount
        if n != 1:
            raise SystemExit("oddrename: no tensor %s" % old)
        fn = os.path.join(d, "odd%d.npy" % i)
        a = np.load(fn)
        man[name] = dict(file=fn, kind="npy", dtype="i32", shape=list(a.shape),
                         nbytes=int(a.nbytes), itemsize=4, order="C", packarg="")
    c.commit()
    ids = [r[0] for r in c.execute("SELECT fqn FROM tensors ORDER BY id")]
    if ids != sorted(ids, key=lambda x: x.encode()):
        raise SystemExit("oddrename: ids no longer in fqn order")
    c.close()
    with open(os.path.join(d, "odd.json"), "w") as f:
        json.dump(man, f, indent=1)
    return 0


def cmd_fqnattr(manifest, mnt):
    man = load_manifest(manifest)
    paths = fqn_paths(list(man))
    for fqn in sorted(man):
        p = os.path.join(mnt, paths[fqn])
        try:
            v = os.getxattr(p, "user.ckpt.fqn").decode("utf-8", "replace")
        except OSError as e:
            v = "(%s)" % e
        expect(v == fqn, "user.ckpt.fqn of %s is %r" % (paths[fqn], fqn), "got %r" % v)
    return 0


def cmd_paths(manifest):
    man = load_manifest(manifest)
    paths = fqn_paths(list(man))
    for fqn in sorted(man):
        print("%s|%s|%s" % (fqn, paths[fqn], " ".join(npy_candidates(paths[fqn]))))
    return 0


# ------------------------------------------------------------------- tree
def cmd_tree(manifest, mnt, index_db):
    man = load_manifest(manifest)
    paths = fqn_paths(list(man))
    dirs = expected_dirs(paths)
    want_mtime = int(os.stat(index_db).st_mtime)

    bad = []
    for d in sorted(dirs):
        full = os.path.join(mnt, d) if d else mnt
        try:
            got = set(n for n in os.listdir(full) if not n.startswith("."))
        except OSError as e:
            bad.append("%s/: %s" % (d, e))
            continue
        if got != dirs[d]:
            bad.append("%s/: extra %s, missing %s" % (
                d, sorted(got - dirs[d]), sorted(dirs[d] - got)))
    expect(not bad, "every directory (%d) lists exactly the expected names "
           "(dot entries aside)" % len(dirs),
           "; ".join(bad[:5]))
    # docs/MOUNT.md: "ls shows no dot entries by default": only ls -a/-A
    # would show .npy and .ckptfs, if readdir lists them (a note, no check)
    dots = sorted(os.path.join(d, n) for d in dirs
                  for n in os.listdir(os.path.join(mnt, d) if d else mnt)
                  if n.startswith("."))
    print("     readdir lists these dot entries (ls -a shows them): %s" % (dots or "none"))

    bad = []
    for d in sorted(dirs):
        st = os.lstat(os.path.join(mnt, d) if d else mnt)
        if not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o555:
            bad.append("%s/: mode %o" % (d, st.st_mode))
    expect(not bad, "directories are mode 0555", "; ".join(bad[:5]))

    bad_mode, bad_size, bad_time = [], [], []
    for fqn, p in sorted(paths.items()):
        m = man[fqn]
        try:
            st = os.lstat(os.path.join(mnt, p))
        except OSError as e:
            bad_mode.append("%s: %s" % (p, e))
            continue
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o444:
            bad_mode.append("%s: mode %o" % (p, st.st_mode))
        want = numel(m["shape"]) * m["itemsize"]
        if st.st_size != want or want != m["nbytes"]:
            bad_size.append("%s: size %d, want %d" % (p, st.st_size, want))
        if int(st.st_mtime) != want_mtime:
            bad_time.append("%s: mtime %d" % (p, int(st.st_mtime)))
    for d in dirs:
        st = os.lstat(os.path.join(mnt, d) if d else mnt)
        if int(st.st_mtime) != want_mtime:
            bad_time.append("%s/: mtime %d" % (d, int(st.st_mtime)))
    expect(not bad_mode, "%d tensor files are regular files of mode 0444" % len(paths),
           "; ".join(bad_mode[:5]))
    expect(not bad_size, "st_size of every tensor file is numel*itemsize",
           "; ".join(bad_size[:5]))
    expect(not bad_time, "files and directories have index.db's mtime (%d)" % want_mtime,
           "; ".join(bad_time[:5]))

    # The hidden parts are there when asked for by name.
    for p, isdir in ((".npy", True), (".ckptfs", True),
                     (".ckptfs/metadata.json", False), (".ckptfs/stats", False)):
        try:
            st = os.lstat(os.path.join(mnt, p))
            good = stat.S_ISDIR(st.st_mode) if isdir else stat.S_ISREG(st.st_mode)
            expect(good, "%s exists (a %s)" % (p, "directory" if isdir else "file"),
                   "mode %o" % st.st_mode)
        except OSError as e:
            fail("%s exists: %s" % (p, e))

    # Names no FQN maps to are absent.
    absent = ["no-such-tensor", "model/no-such", ".npy/no-such.npy",
              ".ckptfs/no-such"]
    for fqn, p in sorted(paths.items()):
        if not p.endswith(".tensor"):
            absent.append(p + ".tensor")        # not also a module
            break
    for d in sorted(dirs):
        if d and (d.replace("/", ".") not in man):
            absent.append(d + ".tensor")         # a module only
            break
    for p in absent:
        try:
            os.lstat(os.path.join(mnt, p))
            fail("%s does not exist: it does" % p)
        except OSError as e:
            expect(e.errno == errno_mod.ENOENT, "%s does not exist (ENOENT)" % p,
                   os.strerror(e.errno))
    return 0


# ---------------------------------------------------------------- content
def cmd_content(manifest, mnt):
    man = load_manifest(manifest)
    paths = fqn_paths(list(man))
    nok = 0
    for fqn in sorted(man):
        m = man[fqn]
        t = ref_tensor(m)
        p = os.path.join(mnt, paths[fqn])
        # numpy.fromfile on the tensor file
        try:
            a = np.fromfile(p, dtype=np.dtype(ref.NP_OF[m["dtype"]]))
            a = a.reshape(tuple(m["shape"]))
            if a.tobytes() != ref.cbytes(t.arr):
                fail("numpy.fromfile(%s) equals the reference: values differ" % paths[fqn])
            else:
                nok += 1
        except Exception as e:  # noqa: BLE001
            fail("numpy.fromfile(%s, %s) reshaped to %s: %s" % (
                paths[fqn], m["dtype"], m["shape"], e))
    expect(nok == len(man), "numpy.fromfile equals the reference for %d/%d tensors"
           % (nok, len(man)))

    for fqn in sorted(man):
        m = man[fqn]
        t = ref_tensor(m)
        cands = npy_candidates(paths[fqn])
        have = [c for c in cands if os.path.exists(os.path.join(mnt, c))]
        if len(have) != 1:
            fail("numpy.load %s: want exactly one of %s, found %s" % (fqn, cands, have))
            continue
        p = os.path.join(mnt, have[0])
        what = "numpy.load(%s) [%s]" % (have[0], m["dtype"])
        try:
            with open(p, "rb") as f:
                raw = f.read()
            st_size = os.stat(p).st_size
            with open(p, "rb") as f:
                ver = np.lib.format.read_magic(f)
                hdr = (np.lib.format.read_array_header_1_0 if ver == (1, 0)
                       else np.lib.format.read_array_header_2_0)(f)
            a = np.load(p, allow_pickle=False)
        except Exception as e:  # noqa: BLE001
            fail("%s: %s" % (what, e))
            continue
        why = []
        if st_size != len(raw):
            why.append("stat size %d but %d bytes read" % (st_size, len(raw)))
        if ver != (1, 0) or hdr[1]:
            why.append("version %s fortran_order %s (want 1.0, C)" % (ver, hdr[1]))
        if m["dtype"] == "bytes":
            if a.dtype.str != "|u1" or a.ndim != 1:
                why.append("dtype %s ndim %d, want |u1 1-D" % (a.dtype.str, a.ndim))
            elif a.tobytes() != ref_bytes(m):
                why.append("bytes differ")
        elif m["dtype"] in ref.LOWP:
            if ref.norm_dtype(a.dtype) != "<f4":
                why.append("dtype %s, want <f4" % a.dtype.str)
            elif a.shape != t.arr.shape:
                why.append("shape %s, want %s" % (a.shape, t.arr.shape))
            else:
                r = ref.float_equal_nan(ref.decode_lowp(m["dtype"], t.arr), a)
                if r:
                    why.append(r)
        else:
            want_dt = ref.norm_dtype(t.arr.dtype)
            if m["dtype"] == "bool":
                want_dt = "|b1"
            if ref.norm_dtype(a.dtype) != want_dt:
                why.append("dtype %s, want %s" % (a.dtype.str, want_dt))
            elif a.shape != t.arr.shape:
                why.append("shape %s, want %s" % (a.shape, t.arr.shape))
            elif ref.cbytes(a) != ref.cbytes(t.arr):
                why.append("values differ")
        # random O_DIRECT preads of the view (header, data, conversions at
        # odd offsets, past the end) return the same bytes as the whole read
        if not why:
            rng = np.random.default_rng(len(raw))
            fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
            try:
                for _ in range(16):
                    off = int(rng.integers(0, len(raw) + 1))
                    L = int(rng.integers(1, 3000))
                    got = os.pread(fd, L, off)
                    if got != raw[off:off + L]:
                        why.append("O_DIRECT pread(%d, %d) differs from the whole read"
                                   % (L, off))
                        break
            except OSError as e:
                why.append("O_DIRECT pread: %s" % e)
            finally:
                os.close(fd)
        if why:
            fail("%s: %s" % (what, "; ".join(why)))
        else:
            ok("%s equals the reference (%s %s; 16 random O_DIRECT preads agree)"
               % (what, a.dtype.str, list(a.shape)))
    return 0


# ----------------------------------------------------------------- xattrs
def unoct(b):
    return re.sub(rb"\\([0-7]{3})", lambda m_: bytes([int(m_.group(1), 8)]), b)


def parse_getfattr(data):
    """{path: {name: value bytes}} from `getfattr -d -e hex` output."""
    res, cur = {}, None
    for line in data.split(b"\n"):
        if line.startswith(b"# file: "):
            cur = res.setdefault(os.fsdecode(unoct(line[8:])), {})
        elif line.strip() and cur is not None and not line.startswith(b"#"):
            if b"=" in line:
                k, v = line.split(b"=", 1)
            else:
                k, v = line, b""
            v = v.strip()
            if v.startswith(b"0x"):
                v = bytes.fromhex(v[2:].decode())
            elif v.startswith(b'"') and v.endswith(b'"'):
                v = unoct(v[1:-1])
            cur[k.decode()] = v
    return res


def parse_ls(path):
    rows = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    # Columns come from the header (FQN DTYPE SHAPE RAW_BYTES STORED_BYTES
    # CODEC RATIO ...); only the FQN, the first, may contain spaces.
    names = [h.lower() for h in lines[0].split()]
    alias = {"raw_bytes": "raw", "stored_bytes": "stored"}
    for line in lines[1:]:
        if not line.strip():
            continue
        parts = line.rsplit(None, len(names) - 1)
        if len(parts) != len(names):
            raise SystemExit("ckpt ls row does not match its header %r: %r"
                             % (lines[0], line))
        row = {alias.get(n, n): v for n, v in zip(names[1:], parts[1:])}
        rows[parts[0].strip()] = row
    return rows


def read_info(info_dir, fqn):
    with open(os.path.join(info_dir, fqn + ".txt"), encoding="utf-8") as f:
        return ckinfo.parse_info(f.read())


def cmd_xattrs(manifest, mnt, info_dir, ls_file):
    man = load_manifest(manifest)
    paths = fqn_paths(list(man))
    got = parse_getfattr(sys.stdin.buffer.read())
    ls = parse_ls(ls_file)
    names = ("fqn", "dtype", "shape", "stored_bytes", "codec", "chunks")
    nok = 0
    for fqn in sorted(man):
        m = man[fqn]
        full = os.path.join(mnt, paths[fqn])
        g = got.get(full)
        if g is None:
            fail("getfattr printed nothing for %s" % paths[fqn])
            continue
        info = read_info(info_dir, fqn)["top"]
        lrow = ls.get(fqn, {})
        shape = ",".join(str(d) for d in m["shape"])
        want = {
            "fqn": [fqn],
            "dtype": [m["dtype"]],
            "shape": [shape],
            "stored_bytes": [info.get("stored_bytes")],
            "codec": [info.get("codecs")],
            "chunks": [info.get("chunks")],
        }
        if info.get("codecs") == "-":       # no frames (an empty tensor)
            want["codec"] = ["-", "", "none"]
        # `ckpt ls` says the same as the manifest and ckpt info
        lshape = lrow.get("shape")
        if not lrow:
            fail("ckpt ls has no row for %s" % fqn)
        elif (lrow["dtype"] != m["dtype"] or
                     (lshape if lshape != "()" else "") != shape or
                     lrow["stored"] != info.get("stored_bytes")):
            fail("ckpt ls row of %s agrees with ckpt info: %s" % (fqn, lrow))
        why = []
        for n in names:
            key = "user.ckpt." + n
            v = g.get(key)
            if v is None:
                why.append("no %s" % key)
                continue
            sv = v.decode("utf-8", "replace")
            if sv not in want[n]:
                why.append("%s=%r, want %r" % (key, sv, want[n][0]))
            # the same through os.getxattr
            try:
                v2 = os.getxattr(full, key)
                if v2 != v:
                    why.append("os.getxattr %s=%r but getfattr %r" % (key, v2, v))
            except OSError as e:
                why.append("os.getxattr %s: %s" % (key, e))
        try:
            lx = set(os.listxattr(full))
            miss = ["user.ckpt." + n for n in names if "user.ckpt." + n not in lx]
            if miss:
                why.append("listxattr lacks %s" % miss)
        except OSError as e:
            why.append("listxattr: %s" % e)
        if why:
            fail("xattrs of %s: %s" % (paths[fqn], "; ".join(why)))
        else:
            nok += 1
    expect(nok == len(man), "user.ckpt.{%s} of %d/%d tensors match ckpt info/ls"
           % (",".join(names), nok, len(man)))
    # One absent attribute: ENODATA.
    p = os.path.join(mnt, paths[sorted(man)[0]])
    try:
        os.getxattr(p, "user.ckpt.no_such")
        fail("getxattr of an unknown name fails with ENODATA: it succeeds")
    except OSError as e:
        expect(e.errno == errno_mod.ENODATA, "getxattr of an unknown name fails with ENODATA",
               os.strerror(e.errno))
    return 0


# --------------------------------------------------------------- metadata
def cmd_metadata(manifest, jpath, info_dir, kvs):
    man = load_manifest(manifest)
    try:
        with open(jpath, "rb") as f:
            raw = f.read()
        j = json.loads(raw.decode("utf-8"))
    except Exception as e:  # noqa: BLE001
        fail("metadata.json parses as JSON: %s" % e)
        return 0
    ok("metadata.json parses as JSON (%d bytes)" % len(raw))
    st = os.stat(jpath).st_size
    expect(st == len(raw), "metadata.json: stat size equals the bytes read",
           "%d vs %d" % (st, len(raw)))
    if not isinstance(j, dict):
        fail("metadata.json is a JSON object: %s" % type(j).__name__)
        return 0
    ts = j.get("tensors")
    entries = {}
    if isinstance(ts, dict):
        for k, v in ts.items():
            if isinstance(v, dict):
                entries[v.get("fqn", k)] = v
    elif isinstance(ts, list):
        for v in ts:
            if isinstance(v, dict):
                entries[v.get("fqn", v.get("name"))] = v
    else:
        fail("metadata.json has a 'tensors' list or object: keys %s" % sorted(j))
        return 0
    expect(set(entries) == set(man), "metadata.json lists exactly the %d tensors" % len(man),
           "extra %s missing %s" % (sorted(set(entries) - set(man))[:5],
                                    sorted(set(man) - set(entries))[:5]))
    top_chunks = j.get("chunks") if isinstance(j.get("chunks"), list) else None
    bad = []
    for fqn in sorted(man):
        e = entries.get(fqn)
        if e is None:
            continue
        m = man[fqn]
        if e.get("dtype") != m["dtype"]:
            bad.append("%s: dtype %r want %r" % (fqn, e.get("dtype"), m["dtype"]))
        sh = e.get("shape")
        if isinstance(sh, str):
            sh = [int(x) for x in sh.split(",") if x.strip()]
        if sh != m["shape"]:
            bad.append("%s: shape %r want %r" % (fqn, e.get("shape"), m["shape"]))
        want_n = int(read_info(info_dir, fqn)["top"].get("chunks", -1))
        ch = e.get("chunks")
        if isinstance(ch, list):
            n = len(ch)
        elif top_chunks is not None:
            n = sum(1 for c in top_chunks if isinstance(c, dict) and
                    (c.get("fqn") == fqn or c.get("tensor") == fqn))
        else:
            n = None
        if n != want_n:
            bad.append("%s: %s chunks, want %d" % (fqn, n, want_n))
    expect(not bad, "metadata.json: dtype, shape and chunks of every tensor",
           "; ".join(bad[:5]))
    meta = j.get("metadata", j.get("meta"))
    if not isinstance(meta, dict):
        fail("metadata.json has a 'metadata' object: keys %s" % sorted(j))
        return 0
    for kv in kvs:
        k, v = kv.split("=", 1)
        expect(str(meta.get(k)) == v, "metadata.json metadata %s = %s" % (k, v),
               "got %r" % (meta.get(k),))
    for k in ("format_version", "world_size"):
        expect(k in meta, "metadata.json metadata has %s" % k, sorted(meta))
    return 0


# ------------------------------------------------------------ random reads
def boundaries(m, info):
    """Byte offsets in the tensor's row-major image where a frame starts or
    a chunk's contiguous run starts or ends."""
    shape = tuple(m["shape"])
    isz = m["itemsize"]
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    pts = set()
    rng = np.random.default_rng(7)
    for ch in info["chunks"]:
        offs = ckinfo.parse_dims(ch.get("offsets", "()"))
        sizes = ckinfo.parse_dims(ch.get("sizes", "()"))
        if len(sizes) and numel(sizes) == 0:
            continue
        for fr in ch["_frames"]:
            e = int(fr["raw_offset"]) // isz
            local = np.unravel_index(e, sizes) if len(sizes) else ()
            g = sum((o + int(l)) * s for o, l, s in zip(offs, local, strides))
            pts.add(g * isz)
        if len(sizes):
            rows = numel(sizes[:-1])
            for r in rng.choice(rows, size=min(rows, 40), replace=False):
                local = np.unravel_index(int(r), sizes[:-1]) if len(sizes) > 1 else ()
                g = sum((o + int(l)) * s for o, l, s in
                        zip(offs[:-1], local, strides[:-1])) + offs[-1]
                pts.add(g * isz)
                pts.add((g + sizes[-1]) * isz)
    n = m["nbytes"]
    return sorted(p for p in pts if 0 < p < n)


def rand_len(rng):
    r = rng.random()
    if r < 0.3:
        return int(rng.integers(1, 65))
    if r < 0.7:
        return int(rng.integers(65, 8193))
    return int(rng.integers(8193, 300001))


def cmd_randreads(manifest, info_dir, n, seed, parts=0, prefix=None):
    man = load_manifest(manifest)
    paths = fqn_paths(list(man))
    rng = np.random.default_rng(seed)
    tens = [f for f in sorted(man) if man[f]["nbytes"] > 0]
    bnd = {f: boundaries(man[f], read_info(info_dir, f)) for f in tens}
    w = np.array([1.0 + np.sqrt(len(bnd[f])) for f in tens])
    w /= w.sum()
    out = []
    order = list(tens) + [tens[int(i)] for i in rng.choice(len(tens), size=max(0, n - len(tens)), p=w)]
    for f in order[:n]:
        size = man[f]["nbytes"]
        L = min(rand_len(rng), max(1, size))
        r = rng.random()
        if bnd[f] and r < 0.6:
            b = bnd[f][int(rng.integers(0, len(bnd[f])))]
            L = max(L, 2)
            before = int(rng.integers(1, min(L - 1, b) + 1))
            off = b - before
        elif r < 0.85:
            off = int(rng.integers(0, size))
        elif r < 0.97:
            off = max(0, size - int(rng.integers(1, min(size, 5000) + 1)))
            L = int(rng.integers(1, 20001))          # may run past the end
        else:
            off, L = size, 10                        # at the end: nothing
        bs = ["1M", "1M", "4096", "777"][int(rng.integers(0, 4))]
        out.append("%s|%s|%d|%d|%s" % (f, paths[f], off, L, bs))
    if parts:
        rng.shuffle(out)
        for k in range(parts):
            with open("%s%d.lst" % (prefix, k), "w", encoding="utf-8") as f:
                f.write("\n".join(out[k::parts]) + "\n")
        return 0
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def read_list(path):
    res = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                fqn, p, off, L, bs = line.split("|")
                res.append((fqn, p, int(off), int(L), bs))
    return res


def cmd_checkreads(manifest, lst, d):
    man = load_manifest(manifest)
    reads = read_list(lst)
    bad = []
    for i, (fqn, p, off, L, _) in enumerate(reads):
        want = ref_bytes(man[fqn])[off:off + L]
        try:
            with open(os.path.join(d, str(i)), "rb") as f:
                got = f.read()
        except OSError as e:
            bad.append("read %d (%s @%d+%d): %s" % (i, p, off, L, e))
            continue
        if got != want:
            bad.append("read %d (%s @%d+%d): got %d bytes, want %d%s" % (
                i, p, off, L, len(got), len(want),
                "" if len(got) != len(want) else ", contents differ"))
    for b in bad[:8]:
        print("     " + b)
    expect(not bad, "%d dd reads equal the reference" % len(reads),
           "%d differ" % len(bad))
    return 0


def cmd_preads(mnt, manifest, lst, direct, barrier, tag):
    man = load_manifest(manifest)
    reads = read_list(lst)
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fds = {}
    for (_, p, _, _, _) in reads:
        if p not in fds:
            try:
                fds[p] = os.open(os.path.join(mnt, p), flags)
            except OSError as e:
                fds[p] = None
                print("     open(%s%s): %s" % (p, ", O_DIRECT" if direct else "", e))
    refs = {f: ref_bytes(man[f]) for f in set(r[0] for r in reads)}
    if barrier:
        with open("%s.ready.%d" % (barrier, os.getpid()), "w"):
            pass
        t0 = time.time()
        while not os.path.exists(barrier):
            if time.time() - t0 > 30:
                fail("%sbarrier never opened" % tag)
                return 1
            time.sleep(0.005)
    bad = []
    for i, (fqn, p, off, L, _) in enumerate(reads):
        want = refs[fqn][off:off + L]
        if fds[p] is None:
            bad.append("pread %d (%s): cannot open it" % (i, p))
            continue
        try:
            got = os.pread(fds[p], L, off)
        except OSError as e:
            bad.append("pread %d (%s @%d+%d): %s" % (i, p, off, L, e))
            continue
        # a short read is allowed by POSIX only at the end of the file
        while len(got) < len(want):
            more = os.pread(fds[p], L - len(got), off + len(got))
            if not more:
                break
            got += more
        if got != want:
            bad.append("pread %d (%s @%d+%d): got %d bytes, want %d%s" % (
                i, p, off, L, len(got), len(want),
                "" if len(got) != len(want) else ", contents differ"))
    for fd in fds.values():
        if fd is not None:
            os.close(fd)
    for b in bad[:8]:
        print("     " + b)
    expect(not bad, "%s%d %spreads equal the reference" % (
        tag, len(reads), "O_DIRECT " if direct else ""), "%d differ" % len(bad))
    return 0


# ------------------------------------------------------------ error tests
def cmd_framerange(manifest, fqn, info_file, ci, fi):
    man = load_manifest(manifest)
    m = man[fqn]
    with open(info_file, encoding="utf-8") as f:
        info = ckinfo.parse_info(f.read())
    ch = info["chunks"][ci]
    fr = ch["_frames"][fi]
    shape = tuple(m["shape"])
    offs = ckinfo.parse_dims(ch["offsets"])
    sizes = ckinfo.parse_dims(ch["sizes"])
    if tuple(sizes[1:]) != shape[1:]:
        raise SystemExit("framerange: chunk %d of %s is not a band of whole rows" % (ci, fqn))
    rowbytes = numel(shape[1:]) * m["itemsize"]
    start = offs[0] * rowbytes + int(fr["raw_offset"])
    print(start, int(fr["raw_size"]), ch["file"], int(fr["file_offset"]),
          int(fr["stored"]), fr["codec"])
    return 0


def cmd_errno(path, off, length, want, direct):
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    except OSError as e:
        fail("os.pread(%s, %d, %d) raises errno %d: cannot even open it: %s"
             % (os.path.basename(path), length, off, want, e))
        return 0
    try:
        got = os.pread(fd, length, off)
        fail("os.pread(%s, %d, %d)%s raises OSError errno %d: it returned %d bytes"
             % (os.path.basename(path), length, off, " O_DIRECT" if direct else "",
                want, len(got)))
    except OSError as e:
        expect(e.errno == want, "os.pread(%s, %d, %d)%s raises OSError errno %d (%s)"
               % (os.path.basename(path), length, off, " O_DIRECT" if direct else "",
                  want, os.strerror(want)), "errno %d (%s)" % (e.errno, e.strerror))
    finally:
        os.close(fd)
    return 0


def cmd_slowread(path, reffile, progress, flag, delay):
    with open(reffile, "rb") as f:
        refb = f.read()
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        print("FAIL slow reader: cannot open %s: %s" % (path, e))
        print("error %d 0" % e.errno)
        return 0
    pos, k, res = 0, 0, None
    try:
        while True:
            try:
                b = os.pread(fd, 4096, pos)
            except OSError as e:
                res = "error %d %d" % (e.errno, pos)
                break
            if not b:
                res = "eof %d" % pos
                break
            if b != refb[pos:pos + len(b)]:
                print("FAIL slow reader: bytes at %d..%d differ from the reference"
                      % (pos, pos + len(b)))
                res = "wrong %d" % pos
                break
            pos += len(b)
            k += 1
            with open(progress, "w") as f:
                f.write("%d\n" % k)
            if not os.path.exists(flag):
                time.sleep(delay)
    finally:
        os.close(fd)
    print(res)
    return 0


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    cmd, a = argv[1], argv[2:]

    def opt(name, default=None, flag=False):
        if name in a:
            i = a.index(name)
            if flag:
                a.pop(i)
                return True
            v = a[i + 1]
            del a[i:i + 2]
            return v
        return False if flag else default

    if cmd == "extras":
        return cmd_extras(a[0])
    if cmd == "oddnames":
        return cmd_oddnames(a[0])
    if cmd == "oddrename":
        return cmd_oddrename(a[0], a[1])
    if cmd == "fqnattr":
        return cmd_fqnattr(a[0], a[1])
    if cmd == "paths":
        return cmd_paths(a[0])
    if cmd == "tree":
        return cmd_tree(*a[:3])
    if cmd == "content":
        return cmd_content(*a[:2])
    if cmd == "xattrs":
        return cmd_xattrs(*a[:4])
    if cmd == "metadata":
        return cmd_metadata(a[0], a[1], a[2], a[3:])
    if cmd == "randreads":
        parts = int(opt("--parts", "0"))
        prefix = opt("--prefix")
        return cmd_randreads(a[0], a[1], int(a[2]), int(a[3]), parts, prefix)
    if cmd == "checkreads":
        return cmd_checkreads(*a[:3])
    if cmd == "preads":
        direct = opt("--direct", flag=True)
        barrier = opt("--barrier")
        tag = opt("--tag", "")
        return cmd_preads(a[0], a[1], a[2], direct, barrier, tag + ": " if tag else "")
    if cmd == "framerange":
        return cmd_framerange(a[0], a[1], a[2], int(a[3]), int(a[4]))
    if cmd == "errno":
        direct = opt("--direct", flag=True)
        return cmd_errno(a[0], int(a[1]), int(a[2]), int(a[3]), direct)
    if cmd == "slowread":
        delay = float(opt("--delay", "0.01"))
        return cmd_slowread(a[0], a[1], a[2], a[3], delay)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
