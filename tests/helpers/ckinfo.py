#!/usr/bin/python3
"""Parse and check the output of `ckpt ls` and `ckpt info` (docs/CLI.md and
`ckpt info --help`) against a gen_npy.py manifest, for the CLI tests.

    ckinfo.py frames  < INFO_FQN_OUTPUT
        one line per frame: 'chunk frame file file_offset stored raw_offset
        raw_size codec checksum'
    ckinfo.py chunks  < INFO_FQN_OUTPUT
        one line per chunk: 'chunk offsets sizes file frames raw_bytes
        stored_bytes' (offsets/sizes comma-separated, '()' for 0-d)
    ckinfo.py checkinfo MANIFEST FQN GRID FRAME_SIZE CKPT_DIR < INFO_FQN_OUTPUT
        checks a tensor's `ckpt info CKPT FQN`: dtype, shape, numel, bytes,
        the chunks against the --grid cut (numpy.array_split), the files of
        the chunks (data/rank<cell>.shard), the frames against the frame
        size (element-aligned), and that the frames tile each chunk and lie
        inside their shard files; prints 'ok WHAT' / 'FAIL WHAT' lines
    ckinfo.py checkinfoall MANIFEST GRID FRAME_SIZE CKPT_DIR INFO_DIR
        the same for every tensor of the manifest, reading INFO_DIR/<fqn>.txt;
        also prints 'codecs: A+B' with the codecs the frames use
    ckinfo.py checkls MANIFEST CODEC [subset] < LS_OUTPUT
        checks `ckpt ls CKPT` (header, one row per tensor, columns; CODEC is
        the --codec used: raw, zstd or auto, whose choice per dtype the
        CODEC column must show; with `subset`, the checkpoint holds only
        some of the manifest's tensors)
    ckinfo.py checksum FILE [OFFSET SIZE]
        XXH3-64 (hex) of a file's bytes via libxxhash through ctypes; exit 77
        when libxxhash cannot be loaded
    ckinfo.py checkindex INDEX_DB MANIFEST APP_ID USER_VERSION [INFO_DIR]
        opens index.db with Python's sqlite3: application_id, user_version,
        row count of the tensors table, a JSON shape per tensor, then the
        schema and relations of docs/FORMAT.md, and (with INFO_DIR, holding
        `ckpt info CKPT FQN` outputs as <fqn>.txt) that ckpt info shows
        exactly the chunks and frames the index holds
"""
import ctypes
import ctypes.util
import json
import os
import re
import sqlite3
import sys

import numpy as np

def ok(what):
    print("ok " + what)


def fail(what):
    print("FAIL " + what)


def expect(cond, what, detail=""):
    if cond:
        ok(what)
    else:
        fail(what + (": " + detail if detail else ""))
    return cond


def parse_dims(s):
    s = s.strip()
    if s in ("()", "", "-"):
        return ()
    return tuple(int(x) for x in s.strip("()[]").split(","))


KV = re.compile(r"(\w+)=(\S*)")
CHUNK = re.compile(r"^chunk (\d+): (.*)$")
FRAME = re.compile(r"^\s*frame (\d+): (.*)$")
TOP = re.compile(r"^(\w+): ?(.*)$")


def parse_info(text):
    """{'top': {key: value}, 'chunks': [{..., 'frames': [{...}]}]}"""
    top, chunks = {}, []
    for line in text.splitlines():
        m = CHUNK.match(line)
        if m:
            d = dict(KV.findall(m.group(2)))
            d["index"] = int(m.group(1))
            d["_frames"] = []
            chunks.append(d)
            continue
        m = FRAME.match(line)
        if m:
            if not chunks:
                raise ValueError("frame line before any chunk: " + line)
            d = dict(KV.findall(m.group(2)))
            d["index"] = int(m.group(1))
            chunks[-1]["_frames"].append(d)
            continue
        m = TOP.match(line)
        if m:
            top[m.group(1)] = m.group(2).strip()
    return {"top": top, "chunks": chunks}


def grid_cells(shape, grid):
    """The pieces --grid cuts a tensor into: [(cell_coords, offsets, sizes)].

    Dim d < min(ndim, len(grid)) is cut as numpy.array_split cuts it into
    grid[d] parts, empty parts dropped; other dims are whole."""
    n = len(shape)
    if n == 0:
        return [((), (), ())]
    k = min(n, len(grid))
    per_dim = []
    for d in range(n):
        if d < k:
            parts = np.array_split(np.arange(shape[d]), grid[d])
            per_dim.append([(j, int(p[0]), len(p)) for j, p in enumerate(parts)
                            if len(p)])
        else:
            per_dim.append([(0, 0, shape[d])])
    cells = [((), (), ())]
    for d in range(n):
        cells = [(c + (j,), o + (off,), s + (sz,))
                 for (c, o, s) in cells for (j, off, sz) in per_dim[d]]
    return cells


def rank_of(cell, grid):
    r = 0
    for j, g in zip(cell, grid):
        r = r * g + j
    return r


def check_info(man, fqn, grid, frame_size, ckdir, text):
    m = man[fqn]
    info = parse_info(text)
    top, chunks = info["top"], info["chunks"]
    shape = tuple(m["shape"])
    itemsize = m["itemsize"]
    nbytes = m["nbytes"]
    t = "info %s:" % fqn
    expect(top.get("fqn") == fqn, t + " fqn", repr(top.get("fqn")))
    expect(top.get("dtype") == m["dtype"], t + " dtype " + m["dtype"],
           repr(top.get("dtype")))
    try:
        got_shape = parse_dims(top.get("shape", "?"))
    except ValueError:
        got_shape = top.get("shape")
    expect(got_shape == shape, t + " shape %s" % (shape,), repr(top.get("shape")))
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    expect(top.get("numel") == str(numel), t + " numel %d" % numel,
           repr(top.get("numel")))
    expect(top.get("raw_bytes") == str(nbytes), t + " raw_bytes %d" % nbytes,
           repr(top.get("raw_bytes")))
    expect(top.get("chunks") == str(len(chunks)),
           t + " 'chunks:' count matches the chunk lines",
           "%r vs %d" % (top.get("chunks"), len(chunks)))
    if nbytes == 0:
        # docs/FORMAT.md: a tensor with a 0 in its shape has only chunks that
        # hold no elements, and those have no frames.
        expect(chunks and all(c.get("raw_bytes") == "0" and c.get("frames") == "0"
                              and not c["_frames"] for c in chunks),
               t + " empty tensor: only empty chunks, without frames",
               repr([(c.get("raw_bytes"), c.get("frames")) for c in chunks]))
        return
    # --- chunks against the grid
    if m["kind"] == "bytes" or not shape:
        want = [((), (0,) * len(shape), shape)]
    else:
        want = grid_cells(shape, grid)
    expect(len(chunks) == len(want),
           t + " %d chunks for grid %s" % (len(want), "x".join(map(str, grid))),
           "got %d" % len(chunks))
    got = {}
    for c in chunks:
        try:
            got[(parse_dims(c.get("offsets", "?")),
                 parse_dims(c.get("sizes", "?")))] = c
        except ValueError:
            fail(t + " chunk %d offsets/sizes parse: %r" % (c["index"], c))
    missing = [(o, s) for (_, o, s) in want if (o, s) not in got]
    expect(not missing, t + " chunks are the grid's cells (array_split)",
           "missing %s; got %s" % (missing[:4], sorted(got)[:8]))
    # files: rank<cell> when the tensor has at least as many dims as the grid
    if m["kind"] != "bytes" and shape and len(shape) >= len(grid):
        bad = []
        for (cell, o, s) in want:
            c = got.get((o, s))
            if c is not None and c.get("file") != "data/rank%d.shard" % rank_of(cell, grid):
                bad.append("%s->%s" % (cell, c.get("file")))
        expect(not bad, t + " chunk of grid cell i is in data/rank<i>.shard",
               ", ".join(bad[:6]))
    elif m["kind"] == "bytes" or not shape:
        expect(all(c.get("file") == "data/rank0.shard" for c in chunks),
               t + " written whole by rank0",
               ", ".join(c.get("file", "?") for c in chunks))
    # --- frames
    aligned = (frame_size // itemsize) * itemsize
    total_stored = 0
    problems = []
    for c in chunks:
        sizes = parse_dims(c.get("sizes", "()"))
        cb = (int(np.prod(sizes, dtype=np.int64)) if sizes else 1) * itemsize
        if str(cb) != c.get("raw_bytes"):
            problems.append("chunk %d raw_bytes %s != %d" % (c["index"], c.get("raw_bytes"), cb))
        nf = -(-cb // aligned)
        fr = c["_frames"]
        if len(fr) != nf or c.get("frames") is None:
            problems.append("chunk %d: %d frames, want ceil(%d/%d)=%d"
                            % (c["index"], len(fr), cb, aligned, nf))
        pos = 0
        stored = 0
        shard = os.path.join(ckdir, c.get("file", "?"))
        fsize = os.path.getsize(shard) if os.path.exists(shard) else -1
        for i, f in enumerate(fr):
            ro, rs = int(f["raw_offset"]), int(f["raw_size"])
            fo, st = int(f["file_offset"]), int(f["stored"])
            if f["index"] != i:
                problems.append("chunk %d frame seq %d at position %d" % (c["index"], f["index"], i))
            if ro != pos:
                problems.append("chunk %d frame %d raw_offset %d, want %d" % (c["index"], i, ro, pos))
            want_rs = min(aligned, cb - pos)
            if rs != want_rs:
                problems.append("chunk %d frame %d raw_size %d, want %d" % (c["index"], i, rs, want_rs))
            if rs % itemsize:
                problems.append("chunk %d frame %d not element-aligned" % (c["index"], i))
            if f.get("codec") == "raw" and st != rs:
                problems.append("chunk %d frame %d raw codec but stored %d != %d" % (c["index"], i, st, rs))
            if st > rs:
                problems.append("chunk %d frame %d stored %d > raw %d (no raw fallback)" % (c["index"], i, st, rs))
            if fo + st > fsize:
                problems.append("chunk %d frame %d [%d,+%d) beyond %s (%d bytes)" % (c["index"], i, fo, st, c.get("file"), fsize))
            if not re.fullmatch(r"[0-9a-f]{16}", f.get("checksum", "")):
                problems.append("chunk %d frame %d checksum %r not 16 hex digits" % (c["index"], i, f.get("checksum")))
            pos += rs
            stored += st
        if pos != cb:
            problems.append("chunk %d frames cover %d of %d bytes" % (c["index"], pos, cb))
        if str(stored) != c.get("stored_bytes"):
            problems.append("chunk %d stored_bytes %s != sum of frames %d" % (c["index"], c.get("stored_bytes"), stored))
        if str(len(fr)) != c.get("frames"):
            problems.append("chunk %d frames=%s but %d frame lines" % (c["index"], c.get("frames"), len(fr)))
        total_stored += stored
    expect(not problems,
           t + " frames: ceil(chunk_bytes/%d) per chunk, tiling each chunk" % aligned,
           "; ".join(problems[:6]))
    expect(top.get("stored_bytes") == str(total_stored),
           t + " stored_bytes = sum of the frames' stored sizes",
           "%r vs %d" % (top.get("stored_bytes"), total_stored))


# The codec `--codec auto` picks per dtype (docs/CLI.md).
AUTO_CODEC = {"bf16": "bgbf16", "f16": "bgf16", "f32": "bgf32", "f64": "bgf64",
              "i16": "bg2", "u16": "bg2", "i32": "bg4", "u32": "bg4",
              "i64": "bg8", "u64": "bg8"}
LS_HEADER = ["FQN", "DTYPE", "SHAPE", "RAW_BYTES", "STORED_BYTES", "CODEC",
             "RATIO"]


def ls_codec_problems(codec, dtype, nbytes, col):
    """What is wrong with the CODEC column of a tensor stored with --codec
    `codec` (frames may fall back to raw)."""
    if nbytes == 0:
        return [] if col == "-" else ["codec %r for no frames, want -" % col]
    want = {"raw": "raw", "zstd": "zstd"}.get(codec) or AUTO_CODEC.get(dtype, "zstd")
    names = col.split("+")
    if not set(names) <= {"raw", want} or len(set(names)) != len(names):
        return ["codec %r, want %s or raw+%s or raw" % (col, want, want)]
    return []


def ls_ratio_problems(nbytes, stored, col):
    want = "-" if stored == 0 else "%.2f" % (nbytes / stored)
    return [] if col == want else ["ratio %r, want %s" % (col, want)]


def check_ls(man, codec, text, subset=False):
    lines = text.splitlines()
    if not expect(len(lines) >= 1 and lines[0].split() == LS_HEADER,
                  "ls: header line", repr(lines[:1])):
        return
    rows = {}
    for ln in lines[1:]:
        f = ln.split()
        if len(f) != len(LS_HEADER):
            fail("ls: row of %d columns: %r" % (len(LS_HEADER), ln))
            continue
        rows[f[0]] = f
    if subset:
        man = {k: v for k, v in man.items() if k in rows}
        expect(len(man) == len(rows), "ls: rows are tensors of the manifest",
               "extra %s" % sorted(set(rows) - set(man)))
    else:
        expect(sorted(rows) == sorted(man), "ls: one row per tensor (%d)" % len(man),
               "extra %s missing %s" % (sorted(set(rows) - set(man)),
                                        sorted(set(man) - set(rows))))
    expect(len(lines) - 1 == len(man), "ls: no other lines", "%d rows" % (len(lines) - 1))
    order = [ln.split()[0] for ln in lines[1:] if ln.split()]
    expect(order == sorted(order, key=lambda x: x.encode()), "ls: rows in FQN order")
    for fqn, m in sorted(man.items()):
        r = rows.get(fqn)
        if r is None:
            continue
        probs = []
        if r[1] != m["dtype"]:
            probs.append("dtype %s want %s" % (r[1], m["dtype"]))
        try:
            if parse_dims(r[2]) != tuple(m["shape"]):
                probs.append("shape %s want %s" % (r[2], m["shape"]))
        except ValueError:
            probs.append("shape %r unparsable" % r[2])
        if not m["shape"] and r[2] != "()":
            probs.append("scalar shape %r, want ()" % r[2])
        if r[3] != str(m["nbytes"]):
            probs.append("raw %s want numpy nbytes %d" % (r[3], m["nbytes"]))
        try:
            stored = int(r[4])
            if stored > m["nbytes"]:
                probs.append("stored %d > raw %d" % (stored, m["nbytes"]))
            if codec == "raw" and stored != m["nbytes"]:
                probs.append("raw codec but stored %d != %d" % (stored, m["nbytes"]))
            probs += ls_ratio_problems(m["nbytes"], stored, r[6])
        except ValueError:
            probs.append("stored %r not a number" % r[4])
        probs += ls_codec_problems(codec, m["dtype"], m["nbytes"], r[5])
        expect(not probs, "ls: %s %s [%s] %d bytes %s %s" % (
               fqn, m["dtype"], ",".join(map(str, m["shape"])), m["nbytes"],
               r[5], r[6]), "; ".join(probs))


def xxh3(data):
    name = ctypes.util.find_library("xxhash") or "libxxhash.so.0"
    try:
        lib = ctypes.CDLL(name)
        fn = lib.XXH3_64bits
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_uint64
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return fn(data, len(data))


def check_index(path, man, app_id, user_version):
    uri = "file:%s?mode=ro&immutable=1" % path
    try:
        c = sqlite3.connect(uri, uri=True)
        got_app = c.execute("PRAGMA application_id").fetchone()[0]
    except sqlite3.Error as e:
        fail("index.db opens with Python's sqlite3: %s" % e)
        return None
    ok("index.db opens with Python's sqlite3 (read-only, immutable)")
    expect(got_app == app_id, "PRAGMA application_id = 0x%08x" % app_id,
           "got 0x%08x" % got_app)
    uv = c.execute("PRAGMA user_version").fetchone()[0]
    expect(uv == user_version, "PRAGMA user_version = %d" % user_version, "got %d" % uv)
    ic = c.execute("PRAGMA integrity_check").fetchone()[0]
    expect(ic == "ok", "PRAGMA integrity_check", ic)
    tables = {r[0] for r in c.execute(
        "SELECT name FROM sqlite_master WHERE type='table'")}
    if not expect("tensors" in tables, "index.db has a 'tensors' table", sorted(tables)):
        return None
    n = c.execute("SELECT count(*) FROM tensors").fetchone()[0]
    expect(n == len(man), "tensors table has %d rows" % len(man), "got %d" % n)
    for t in ("chunks", "frames"):
        expect(t in tables, "index.db has a '%s' table" % t, sorted(tables))
    # Shapes are stored as JSON (queryable with SQLite's JSON functions):
    # some column of each tensor's row holds its shape as a JSON array.
    cur = c.execute("SELECT * FROM tensors")
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    bad = []
    for fqn, m in man.items():
        row = next((r for r in rows if fqn in r), None)
        if row is None:
            bad.append("%s: no row" % fqn)
            continue
        found = False
        for v in row:
            if isinstance(v, str):
                try:
                    j = json.loads(v)
                except ValueError:
                    continue
                if isinstance(j, list) and j == m["shape"]:
                    found = True
        if not found:
            bad.append("%s: no JSON shape %s in %s" % (fqn, m["shape"], dict(zip(cols, row))))
    expect(not bad, "each tensor row holds its FQN and its shape as a JSON array",
           "; ".join(bad[:3]))
    # ... which SQLite's own JSON functions can read.
    shape_cols = [col for col in cols if "shape" in col.lower()]
    if shape_cols:
        sc = shape_cols[0]
        try:
            bad = c.execute("SELECT count(*) FROM tensors WHERE json_valid(%s) = 0" % sc).fetchone()[0]
            expect(bad == 0, "json_valid(tensors.%s) for every row" % sc, "%d invalid" % bad)
        except sqlite3.Error as e:
            fail("json functions on tensors.%s: %s" % (sc, e))
    return c


def check_index_format(c, man, ckdir, info_dir):
    """The relations docs/FORMAT.md states, and `ckpt info` against SQL."""
    q = lambda sql, *a: c.execute(sql, a).fetchall()
    rows = {r[0]: r for r in q("SELECT fqn, dtype, shape, numel, nbytes, "
                               "stored_bytes, nchunks, id FROM tensors")}
    bad = []
    for fqn, m in man.items():
        r = rows.get(fqn)
        if r is None:
            bad.append("%s missing" % fqn)
            continue
        want_shape = json.dumps(m["shape"], separators=(",", ":"))
        numel = int(np.prod(m["shape"], dtype=np.int64)) if m["shape"] else 1
        if (r[1], r[2], r[3], r[4]) != (m["dtype"], want_shape, numel, m["nbytes"]):
            bad.append("%s: (%s, %s, %s, %s) want (%s, %s, %s, %s)" % (
                fqn, r[1], r[2], r[3], r[4], m["dtype"], want_shape, numel, m["nbytes"]))
    expect(not bad, "tensors rows: dtype, shape as JSON without spaces, numel, nbytes",
           "; ".join(bad[:4]))
    ids = [r[0] for r in q("SELECT fqn FROM tensors ORDER BY id")]
    expect(ids == sorted(ids, key=lambda x: x.encode()), "tensor ids in fqn order")
    n = q("SELECT count(*) FROM tensors WHERE json_array_length(shape) != "
          "(SELECT count(*) FROM json_each(tensors.shape))")[0][0]
    expect(n == 0, "json_array_length/json_each work on tensors.shape")
    meta = dict(q("SELECT key, value FROM meta"))
    for k in ("format_version", "created", "producer", "world_size"):
        expect(k in meta, "meta has '%s'" % k, repr(sorted(meta)))
    files = q("SELECT id, path, size FROM files ORDER BY id")
    bad = ["%s: %d vs %s" % (p, sz, os.path.getsize(os.path.join(ckdir, p))
                             if os.path.exists(os.path.join(ckdir, p)) else "missing")
           for (_, p, sz) in files
           if not os.path.exists(os.path.join(ckdir, p))
           or os.path.getsize(os.path.join(ckdir, p)) != sz]
    expect(files and not bad, "files: every recorded size is the shard's size", "; ".join(bad))
    expect([p for (_, p, _) in files] == sorted(p for (_, p, _) in files),
           "files: ids in path order")
    # Relations between tensors, chunks and frames.
    checks = [
        ("tensors.nchunks = count of its chunks",
         "SELECT count(*) FROM tensors t WHERE nchunks != "
         "(SELECT count(*) FROM chunks WHERE tensor_id = t.id)"),
        ("tensors.stored_bytes = sum of its chunks'",
         "SELECT count(*) FROM tensors t WHERE stored_bytes != "
         "(SELECT coalesce(sum(stored_bytes), 0) FROM chunks WHERE tensor_id = t.id)"),
        ("chunks.nframes = count of its frames",
         "SELECT count(*) FROM chunks k WHERE nframes != "
         "(SELECT count(*) FROM frames WHERE chunk_id = k.id)"),
        ("chunks.raw_bytes = sum of its frames' raw_size",
         "SELECT count(*) FROM chunks k WHERE raw_bytes != "
         "(SELECT coalesce(sum(raw_size), 0) FROM frames WHERE chunk_id = k.id)"),
        ("chunks.stored_bytes = sum of its frames' stored_size",
         "SELECT count(*) FROM chunks k WHERE stored_bytes != "
         "(SELECT coalesce(sum(stored_size), 0) FROM frames WHERE chunk_id = k.id)"),
        ("chunks.codec_mask = the codecs of its frames",
         "SELECT count(*) FROM chunks k WHERE codec_mask != "
         "(SELECT coalesce(sum(DISTINCT 1 << codec), 0) FROM frames WHERE chunk_id = k.id)"),
        ("frames: raw_size > 0, raw stored as is",
         "SELECT count(*) FROM frames WHERE raw_size <= 0 "
         "OR (codec = 0 AND stored_size != raw_size)"),
        ("frames lie inside their shard's recorded size",
         "SELECT count(*) FROM frames f JOIN chunks k ON k.id = f.chunk_id "
         "JOIN files s ON s.id = k.file_id WHERE f.file_offset + f.stored_size > s.size"),
        ("codecs table names raw (0) and zstd (1)",
         "SELECT 2 - count(*) FROM codecs WHERE (id, name) IN (VALUES (0, 'raw'), (1, 'zstd'))"),
    ]
    for what, sql in checks:
        try:
            n = q(sql)[0][0]
            expect(n == 0, "index: " + what, "%d rows break it" % n)
        except sqlite3.Error as e:
            fail("index: %s: %s" % (what, e))
    # Frames of one shard never overlap.
    fr = q("SELECT k.file_id, f.file_offset, f.stored_size FROM frames f "
           "JOIN chunks k ON k.id = f.chunk_id ORDER BY 1, 2")
    ov = [(a, b) for a, b in zip(fr, fr[1:]) if a[0] == b[0] and a[1] + a[2] > b[1]]
    expect(not ov, "index: frames of a shard do not overlap", repr(ov[:3]))
    # `ckpt info FQN` shows exactly what the index holds.
    if info_dir:
        bad = []
        for fqn in sorted(man):
            path = os.path.join(info_dir, fqn + ".txt")
            if not os.path.exists(path):
                continue
            with open(path) as f:
                info = parse_info(f.read())
            got = [(ch["index"], fr["index"], ch.get("file"), int(fr["file_offset"]),
                    int(fr["stored"]), int(fr["raw_offset"]), int(fr["raw_size"]),
                    fr.get("codec"), fr.get("checksum"))
                   for ch in info["chunks"] for fr in ch["_frames"]]
            want = [tuple(r) for r in q(
                "SELECT k.seq, f.seq, s.path, f.file_offset, f.stored_size, "
                "f.raw_offset, f.raw_size, d.name, printf('%016x', f.checksum) "
                "FROM frames f JOIN chunks k ON k.id = f.chunk_id "
                "JOIN tensors t ON t.id = k.tensor_id JOIN files s ON s.id = k.file_id "
                "JOIN codecs d ON d.id = f.codec WHERE t.fqn = ? "
                "ORDER BY k.seq, f.seq", fqn)]
            if got != want:
                bad.append("%s: info %s... vs sql %s..." % (fqn, got[:1], want[:1]))
            gch = [(ch["index"], ch.get("offsets"), ch.get("sizes"))
                   for ch in info["chunks"]]
            wch = [(r[0], ",".join(map(str, json.loads(r[1]))) or "()",
                    ",".join(map(str, json.loads(r[2]))) or "()") for r in q(
                "SELECT k.seq, k.offsets, k.sizes FROM chunks k JOIN tensors t "
                "ON t.id = k.tensor_id WHERE t.fqn = ? ORDER BY k.seq", fqn)]
            if gch != wch:
                bad.append("%s chunks: info %s vs sql %s" % (fqn, gch[:2], wch[:2]))
        expect(not bad, "ckpt info FQN lists exactly the chunks and frames of index.db",
               "; ".join(bad[:3]))


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd in ("frames", "chunks"):
        info = parse_info(sys.stdin.read())
        for c in info["chunks"]:
            if cmd == "chunks":
                print(c["index"], c.get("offsets"), c.get("sizes"), c.get("file"),
                      c.get("frames"), c.get("raw_bytes"), c.get("stored_bytes"))
                continue
            for f in c["_frames"]:
                print(c["index"], f["index"], c.get("file"), f.get("file_offset"),
                      f.get("stored"), f.get("raw_offset"), f.get("raw_size"),
                      f.get("codec"), f.get("checksum"))
    elif cmd == "checkinfo":
        with open(args[0]) as f:
            man = json.load(f)
        grid = [int(x) for x in args[2].split("x")]
        check_info(man, args[1], grid, int(args[3]), args[4], sys.stdin.read())
    elif cmd == "checkinfoall":
        with open(args[0]) as f:
            man = json.load(f)
        grid = [int(x) for x in args[1].split("x")]
        codecs = set()
        for fqn in sorted(man):
            path = os.path.join(args[4], fqn + ".txt")
            if not os.path.exists(path):
                fail("info %s: no output" % fqn)
                continue
            with open(path) as f:
                text = f.read()
            check_info(man, fqn, grid, int(args[2]), args[3], text)
            for c in parse_info(text)["chunks"]:
                codecs.update(fr.get("codec") for fr in c["_frames"])
        print("codecs: " + "+".join(sorted(codecs)))
    elif cmd == "checkls":
        with open(args[0]) as f:
            man = json.load(f)
        check_ls(man, args[1], sys.stdin.read(),
                 subset=len(args) > 2 and args[2] == "subset")
    elif cmd == "checksum":
        with open(args[0], "rb") as f:
            if len(args) == 3:
                f.seek(int(args[1]))
                data = f.read(int(args[2]))
            else:
                data = f.read()
        h = xxh3(data)
        if h is None:
            return 77
        print("%016x" % h)
    elif cmd == "checkindex":
        with open(args[1]) as f:
            man = json.load(f)
        c = check_index(args[0], man, int(args[2], 0), int(args[3]))
        if c is not None:
            check_index_format(c, man, os.path.dirname(os.path.abspath(args[0])),
                               args[4] if len(args) > 4 else None)
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
