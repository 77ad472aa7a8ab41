#!/usr/bin/python3
"""python_bench.py - the Python package's part of `make bench`: ckptfs.save
and ckptfs.load, and PyTorch DCP through ckptfs.torch, against the C
library (bench_core) and DCP's own FileSystemWriter/FileSystemReader
(dcp_bench.py), on bench_core gen's ~1 GiB state dict, in one run.

    python_bench.py run
        the driver (make bench runs it): generates the state, runs every
        contender CKPT_BENCH_REPS times in rotating order, prints medians,
        ratios and the targets.  Environment as tests/bench/run.sh:
        CKPT_BENCH_CORE (bench_core, required), CKPT_BENCH_MB (1024),
        CKPT_BENCH_REPS (3), CKPT_BENCH_DIR (scratch parent, default the
        build directory), CKPT_BENCH_COLD (1: drop the page cache before
        cold loads, as root), CKPT_BENCH_STRICT (1: exit 1 on a missed
        target), CKPT_BENCH_PYTHON (interpreter of the contenders, default
        this one).
    python_bench.py save-api STATE OUT CODEC       time ckptfs.save
    python_bench.py load-api STATE CKPT NAME       time ckptfs.load(into=)
    python_bench.py save-backend STATE OUT CODEC   time save_state_dict
                                                   (StorageWriter)
    python_bench.py load-backend STATE CKPT NAME   time load_state_dict
                                                   (StorageReader)
    python_bench.py load-dcp STATE CKPT NAME       time load_state_dict
                                                   (FileSystemReader)

Each contender builds torch tensors from state.bin before its clock
starts; loads go into zeroed tensors whose pages are already touched (as
bench_core's buffers), and are compared bit for bit with state.bin after
the clock stops;
each prints one RESULT line as bench_core and dcp_bench.py do.  See
tests/bench/README.md ("The Python package").
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("CKPT_SRCDIR") or os.path.abspath(
    os.path.join(HERE, "..", ".."))


# ------------------------------------------------------------ contenders

def _dcp_bench():
    """dcp_bench.py as a module (state building, verification, RESULT
    lines), or None without torch."""
    sys.path.insert(0, HERE)
    try:
        import dcp_bench
    except SystemExit:          # it exits after printing SKIP without torch
        return None
    return dcp_bench


def _timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _time_save(state_dir, out, name, save):
    """Times save(state) of the state dict built from state.bin."""
    db = _dcp_bench()
    tensors = db.read_manifest(state_dir)
    state = db.build_state(state_dir, tensors)
    secs, cpu = _timed(lambda: save(db, state))
    db.report(name, secs, cpu, tensors, out)


def _zeros(db, tensors):
    """Zeroed destination tensors whose pages are already touched, as
    bench_core's load buffers are (torch.zeros of a large tensor maps
    untouched pages: the first write would fault them in, inside the
    clock)."""
    import torch
    state = {fqn: torch.empty(shape, dtype=db.DTYPES[dt][0])
             for fqn, dt, shape, _, _ in tensors}
    for t in state.values():
        t.view(-1).view(torch.uint8).fill_(0)
    return state


def _time_load(state_dir, ckpt, name, load):
    """Times load(state) into zeroed tensors, then checks every bit."""
    db = _dcp_bench()
    tensors = db.read_manifest(state_dir)
    state = _zeros(db, tensors)
    secs, cpu = _timed(lambda: load(db, state))
    db.verify(state_dir, tensors, state)
    db.report(name, secs, cpu, tensors, ckpt, " verified=1")


def cmd_save_api(state_dir, out, codec):
    import ckptfs
    _time_save(state_dir, out, "ckptfs_save_" + codec,
               lambda db, st: ckptfs.save(out, st, codec=codec))


def cmd_load_api(state_dir, ckpt, name):
    import ckptfs
    _time_load(state_dir, ckpt, name,
               lambda db, st: ckptfs.load(ckpt, into=st))


def cmd_save_backend(state_dir, out, codec):
    import ckptfs.torch as ct
    _time_save(state_dir, out, "backend_save_" + codec,
               lambda db, st: db.save_state_dict(
                   st, ct.StorageWriter(out, codec=codec), no_dist=True))


def cmd_load_backend(state_dir, ckpt, name):
    import ckptfs.torch as ct
    _time_load(state_dir, ckpt, name, lambda db, st: db.load_state_dict(
        st, ct.StorageReader(ckpt), no_dist=True))


def cmd_load_dcp(state_dir, ckpt, name):
    """DCP's own FileSystemReader, into the same touched buffers as the
    other Python contenders (dcp_bench.py load uses torch.zeros)."""
    _time_load(state_dir, ckpt, name, lambda db, st: db.load_state_dict(
        st, db.FileSystemReader(ckpt), no_dist=True))


# ------------------------------------------------------------ the driver

def parse_result(text):
    for line in reversed(text.splitlines()):
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:])
    return None


class Bench(object):
    def __init__(self):
        self.core = os.environ.get("CKPT_BENCH_CORE")
        if not self.core or not os.access(self.core, os.X_OK):
            sys.exit("python_bench: set CKPT_BENCH_CORE to the bench_core "
                     "binary (make bench does)")
        self.mb = int(os.environ.get("CKPT_BENCH_MB", "1024"))
        self.reps = int(os.environ.get("CKPT_BENCH_REPS", "3"))
        self.py = os.environ.get("CKPT_BENCH_PYTHON") or sys.executable
        base = os.environ.get("CKPT_BENCH_DIR") or os.path.dirname(self.core)
        os.makedirs(base, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="ckptfs-pybench.", dir=base)
        self.state = os.path.join(self.work, "state")
        self.results = {}        # name -> [RESULT dicts]
        self.cold = False

    def run_cmd(self, argv, name=None):
        p = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if p.returncode != 0:
            sys.exit("python_bench: failed (exit %d): %s\n%s" % (
                p.returncode, " ".join(map(str, argv)),
                p.stderr.decode()[-3000:]))
        res = parse_result(p.stdout.decode())
        if res is None:
            sys.exit("python_bench: no RESULT from %s" % " ".join(
                map(str, argv)))
        if name:
            res["name"] = name
        self.record(res)

    def record(self, res):
        self.results.setdefault(res["name"], []).append(res)
        print("  [%d/%d] %-30s %8.3f s" % (self.rep, self.reps, res["name"],
                                            float(res["seconds"])),
              flush=True)

    def timed_shell(self, name, argv, nbytes):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        self.record({"name": name, "seconds": "%.4f" % (
            time.perf_counter() - t0), "bytes_logical": str(nbytes),
            "bytes_on_disk": str(nbytes)})

    def drop_caches(self):
        try:
            subprocess.run(["sync"], check=True)
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return True
        except OSError:
            return False

    def warm_up(self, path):
        for root, _, files in os.walk(path) if os.path.isdir(path) else [
                (os.path.dirname(path), None, [os.path.basename(path)])]:
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    while f.read(1 << 22):
                        pass

    def fresh(self, path):
        shutil.rmtree(path, ignore_errors=True)
        if os.path.exists(path):
            os.unlink(path)
        subprocess.run(["sync"])

    def loads(self, prefix, argv_of_name, ckpt):
        if self.cold:
            self.drop_caches()
            self.run_cmd(argv_of_name(prefix + "_cold"))
        self.warm_up(ckpt)
        self.run_cmd(argv_of_name(prefix + "_warm"))

    # the contenders: a save, a cold load, a warm load each
    def flat(self):
        src = os.path.join(self.state, "state.bin")
        dst = os.path.join(self.work, "flat.bin")
        self.warm_up(src)
        self.fresh(dst)
        self.timed_shell("flat_write", ["dd", "if=" + src, "of=" + dst,
                                        "bs=4M", "conv=fdatasync",
                                        "status=none"], self.logical)
        if self.cold:
            self.drop_caches()
            self.timed_shell("flat_read_cold", ["cat", dst], self.logical)
        self.warm_up(dst)
        self.timed_shell("flat_read_warm", ["cat", dst], self.logical)

    def c_lib(self, codec):
        out = os.path.join(self.work, "c-" + codec)
        self.fresh(out)
        self.run_cmd([self.core, "save", self.state, out, "--codec", codec],
                     "c_save_" + codec)
        self.codec_speeds(codec, out)
        self.loads("c_load_" + codec, lambda n: [
            self.core, "load", self.state, out, "--name", n], out)

    def codec_speeds(self, codec, ckpt, tag=None):
        """The codec side of the limits: bench_core decode of ckpt's
        frames and encode of the state with codec, one thread each,
        recorded as decode_TAG and encode_TAG (TAG: codec)."""
        tag = tag or codec
        self.run_cmd([self.core, "decode", "-", ckpt, "--name",
                      "decode_" + tag])
        self.run_cmd([self.core, "encode", self.state, "--codec", codec,
                      "--name", "encode_" + tag])

    def api(self, codec):
        out = os.path.join(self.work, "py-" + codec)
        self.fresh(out)
        self.run_cmd([self.py, __file__, "save-api", self.state, out, codec])
        if codec == "auto":      # (raw and zstd: measured by c_lib)
            self.codec_speeds(codec, out)
        self.loads("ckptfs_load_" + codec, lambda n: [
            self.py, __file__, "load-api", self.state, out, n], out)

    def backend(self, codec):
        out = os.path.join(self.work, "backend-" + codec)
        self.fresh(out)
        self.run_cmd([self.py, __file__, "save-backend", self.state, out,
                      codec])
        self.codec_speeds(codec, out, "backend_" + codec)
        self.loads("backend_load_" + codec, lambda n: [
            self.py, __file__, "load-backend", self.state, out, n], out)

    def dcp(self):
        out = os.path.join(self.work, "dcp")
        dcp_py = os.path.join(HERE, "dcp_bench.py")
        self.fresh(out)
        self.run_cmd([self.py, dcp_py, "save", self.state, out])
        self.loads("dcp_load", lambda n: [self.py, __file__, "load-dcp",
                                          self.state, out, n], out)

    # -------------------------------------------------------- report
    def median(self, name):
        rs = self.results.get(name)
        return statistics.median(float(r["seconds"]) for r in rs) \
            if rs else None

    def row(self, name, label):
        rs = self.results.get(name)
        if not rs:
            return
        secs = sorted(float(r["seconds"]) for r in rs)
        cpu = [float(r["cpu_seconds"]) for r in rs if "cpu_seconds" in r]
        disk = statistics.median(int(r["bytes_on_disk"]) for r in rs)
        med = statistics.median(secs)
        print("%-40s %8.3f %8.3f %8.3f %6s %7.2f %9.1f %7.3f" % (
            label, med, secs[0], secs[-1],
            "%.2f" % statistics.median(cpu) if cpu else "-",
            self.logical / med / 1e9, disk / 1e6, disk / self.logical))

    def table(self):
        print("%-40s %8s %8s %8s %6s %7s %9s %7s" % (
            "contender", "median", "min", "max", "cpu", "GB/s", "disk MB",
            "disk/"))
        print("%-40s %8s %8s %8s %6s %7s %9s %7s" % ("", "s", "s", "s", "s",
                                                      "", "", "logical"))
        rows = [("flat_write", "flat file write (dd, the limit)")]
        for c in ("raw", "zstd"):
            rows += [("c_save_" + c, "C library save %s" % c),
                     ("ckptfs_save_" + c, "ckptfs.save %s" % c)]
        rows += [("ckptfs_save_auto", "ckptfs.save auto (default)"),
                 ("backend_save_auto", "DCP + ckptfs.torch save auto"),
                 ("dcp_save", "DCP FileSystemWriter save")]
        for t in ("cold", "warm"):
            rows.append(("flat_read_" + t, "flat file read (cat), %s" % t))
            for c in ("raw", "zstd"):
                rows += [("c_load_%s_%s" % (c, t), "C library load %s, %s"
                          % (c, t)),
                         ("ckptfs_load_%s_%s" % (c, t), "ckptfs.load %s, %s"
                          % (c, t))]
            rows += [("ckptfs_load_auto_" + t, "ckptfs.load auto, " + t),
                     ("backend_load_auto_" + t,
                      "DCP + ckptfs.torch load auto, " + t),
                     ("dcp_load_" + t, "DCP FileSystemReader load, " + t)]
        for name, label in rows:
            self.row(name, label)

    def gbps(self, name):
        m = self.median(name)
        return self.logical / m / 1e9 if m else None

    def per_core(self, name):
        """Median logical MB per CPU second of a bench_core decode/encode."""
        rs = self.results.get(name)
        return statistics.median(
            int(r["bytes_logical"]) / max(float(r["cpu_seconds"]), 1e-9) / 1e6
            for r in rs) if rs else None

    def stored_ratio(self, name):
        rs = self.results.get(name)
        return statistics.median(int(r["bytes_on_disk"]) / int(
            r["bytes_logical"]) for r in rs) if rs else None

    def cpu(self, name):
        rs = [r for r in self.results.get(name, []) if "cpu_seconds" in r]
        return statistics.median(float(r["cpu_seconds"]) for r in rs) \
            if rs else None

    def limit_line(self, label, fig, sto, ratio, codec, want, cpu=None):
        """As limits.sh's limit_line: the figure against min(storage /
        ratio, codec per core x cores), and the codec's CPU time for the
        figure's bytes / the figure's; returns 1 on a miss."""
        if fig is None or sto is None or ratio is None:
            print("  %-40s not measured" % label)
            return 0
        n = os.cpu_count()
        a, b = sto / ratio, (codec or 0) * n / 1000
        lim, side = (b, "codec") if 0 < b < a else (a, "storage")
        frac = fig / lim
        share = "%.2f" % (self.logical / (codec * 1e6) / cpu) \
            if codec and cpu else "-"
        print("  %-40s %7.2f %7.2f  %5.2f/%.3f | %-15s %-7s %5.2fx %7s %-8s %s"
              % (label, fig, lim, sto, ratio, "%.0f MB/s x %d" % (codec, n)
                 if codec else "-", side, frac,
                 "%.2fx" % want if want else "-",
                 "(info)" if not want else
                 "met" if frac >= want else "NOT MET", share))
        return bool(want) and frac < want

    def regime_targets(self):
        """The targets of issue 26 against the limit of this regime."""
        regime = os.environ.get("CKPT_BENCH_REGIME", "unthrottled")
        print("against the limit of this regime (%s): storage = dd "
              "conv=fdatasync / cat of the raw bytes, codec = bench_core "
              "encode / decode per core x %d" % (
                  regime if regime != "throttled" else "storage throttled "
                  "to %s MB/s" % os.environ.get("CKPT_THROTTLE_MBPS", "?"),
                  os.cpu_count()))
        print("  %-40s %7s %7s  %-34s %6s %7s %-8s %s" % (
            "figure", "GB/s", "limit", "= min(storage / ratio, codec x n)",
            "frac", "target", "verdict", "codec cpu"))
        missed = 0
        ts = ["cold", "warm"] if self.cold else ["warm"]
        for who, tag, want in (("backend", "backend_auto", 0.8),
                               ("ckptfs", "auto", None)):
            name = "DCP + ckptfs.torch" if who == "backend" else \
                "ckptfs (Python)"
            if who == "ckptfs":
                print("  for information, ckptfs.save/ckptfs.load auto:")
            missed += self.limit_line(
                "%s save auto" % name, self.gbps(who + "_save_auto"),
                self.gbps("flat_write"),
                self.stored_ratio("decode_" + tag),
                self.per_core("encode_" + tag), want,
                self.cpu(who + "_save_auto"))
            for t in ts:
                missed += self.limit_line(
                    "%s load auto, %s" % (name, t),
                    self.gbps("%s_load_auto_%s" % (who, t)),
                    self.gbps("flat_read_" + t),
                    self.stored_ratio("decode_" + tag),
                    self.per_core("decode_" + tag),
                    want, self.cpu("%s_load_auto_%s" % (who, t)))
        return missed

    def ratio(self, base, other):
        a, b = self.median(base), self.median(other)
        return a / b if a and b else None

    def targets(self):
        t = "cold" if self.cold else "warm"
        missed = 0
        lines = []
        for c in ("raw", "zstd"):
            lines.append(("ckptfs.save %s >= 0.9x the C library's" % c,
                          self.ratio("c_save_" + c, "ckptfs_save_" + c),
                          0.9))
        for c in ("raw", "zstd", "auto"):
            lines.append(("ckptfs.save %s >= 3x DCP's save" % c,
                          self.ratio("dcp_save", "ckptfs_save_" + c), 3.0))
        lines.append(("DCP + ckptfs.torch load >= 1.3x DCP's (%s)" % t,
                      self.ratio("dcp_load_" + t, "backend_load_auto_" + t),
                      1.3))
        for t in ["cold", "warm"] if self.cold else ["warm"]:
            for c in ("raw", "zstd"):
                lines.append(("ckptfs.load %s >= 0.9x the C library's (%s)"
                              % (c, t), self.ratio(
                                  "c_load_%s_%s" % (c, t),
                                  "ckptfs_load_%s_%s" % (c, t)), 0.9))
        for label, r, want in lines:
            if r is None:
                print("target %-52s not measured" % (label + ":"))
                continue
            ok = r >= want
            missed += not ok
            print("target %-52s %6.2fx %s" % (label + ":", r,
                                             "met" if ok else "NOT MET"))
        print("also: DCP + ckptfs.torch save vs DCP's save: %s" % (
            "%.2fx" % self.ratio("dcp_save", "backend_save_auto")
            if self.ratio("dcp_save", "backend_save_auto") else "-"))
        return missed

    # -------------------------------------------------------- main
    def run(self):
        t_start = time.perf_counter()
        try:
            return self._run(t_start)
        finally:
            shutil.rmtree(self.work, ignore_errors=True)

    def _run(self, t_start):
        if _dcp_bench() is None:
            print("SKIP python bench: %s has no usable torch" % self.py)
            return 0
        os.mkdir(self.state)
        gen = subprocess.run([self.core, "gen", self.state, "--mb",
                              str(self.mb)], check=True,
                             stdout=subprocess.PIPE).stdout.decode()
        self.logical = int(parse_result(gen)["bytes_logical"])
        need = self.logical * 10
        free = shutil.disk_usage(self.work).free
        if free < need:
            sys.exit("python_bench: need %d MiB free in %s, have %d MiB"
                     % (need >> 20, self.work, free >> 20))
        note = "CKPT_BENCH_COLD=0: warm loads only"
        if os.environ.get("CKPT_BENCH_COLD", "1") != "0":
            if self.drop_caches():
                pct = float(subprocess.run(
                    [self.core, "resident", os.path.join(self.state,
                                                         "state.bin")],
                    stdout=subprocess.PIPE).stdout.decode().strip() or 100)
                self.cold = pct < 5
                note = ("page cache dropped before every cold load" if
                        self.cold else "drop_caches did not empty the cache "
                        "(%.0f%% resident): warm loads only" % pct)
            else:
                note = "cannot drop the page cache (not root?): warm only"
        print("ckptfs Python benchmark: scratch %s, %d CPUs, %d reps, "
              "%d logical bytes (bench_core gen, torch tensors)"
              % (self.work, os.cpu_count(), self.reps, self.logical))
        print("cache: " + note)
        regime = os.environ.get("CKPT_BENCH_REGIME", "unthrottled")
        print("regime: " + (regime if regime != "throttled" else
                            "storage throttled to %s MB/s (throttle.sh)"
                            % os.environ.get("CKPT_THROTTLE_MBPS", "?")))
        print("load average at start: %s" % " ".join(
            open("/proc/loadavg").read().split()[:3]))
        blocks = [self.flat, lambda: self.c_lib("raw"),
                  lambda: self.c_lib("zstd"), lambda: self.api("raw"),
                  lambda: self.api("zstd"), lambda: self.api("auto"),
                  lambda: self.backend("auto"), self.dcp]
        for self.rep in range(1, self.reps + 1):
            for k in range(len(blocks)):
                blocks[(k + self.rep - 1) % len(blocks)]()
        print()
        print("== ckptfs Python benchmark: %d logical bytes, median of %d "
              "runs; GB/s = logical bytes / median s / 1e9" % (self.logical,
                                                               self.reps))
        self.table()
        print()
        missed = self.targets()
        print()
        missed += self.regime_targets()
        la = float(open("/proc/loadavg").read().split()[0])
        if la > os.cpu_count():
            print("NOTE: load average %.2f on %d CPUs: other work shared the "
                  "cores; judge codec-bound figures by their codec cpu share,"
                  " not their wall-time fraction" % (la, os.cpu_count()))
        print("load average at end: %s (above %d: other work shared the "
              "CPUs)" % (" ".join(open("/proc/loadavg").read().split()[:3]),
                         os.cpu_count()))
        print("total python bench time: %.0f s" % (time.perf_counter()
                                                   - t_start))
        strict = os.environ.get("CKPT_BENCH_STRICT") == "1"
        return 1 if missed and strict else 0


def main(argv):
    cmds = {"save-api": cmd_save_api, "load-api": cmd_load_api,
            "save-backend": cmd_save_backend,
            "load-backend": cmd_load_backend, "load-dcp": cmd_load_dcp}
    if len(argv) == 2 and argv[1] == "run":
        sys.exit(Bench().run())
    if len(argv) == 5 and argv[1] in cmds:
        cmds[argv[1]](argv[2], argv[3], argv[4])
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
