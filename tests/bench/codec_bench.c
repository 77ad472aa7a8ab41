/*
 * codec_bench.c - the codec part of `make bench`: compression ratio and
 * per-core speed of plain zstd and of the byte-grouped codecs that
 * `--codec auto` picks, on float data generated here, against the bound
 * that the data's exponent entropy sets; then the library's save and load
 * paths with 1 and all threads, and the cost of a 4 KiB random read.
 *
 *   codec_bench [--mb N] [--reps R] [--dir DIR] [--threads T] [--strict]
 *
 * Data sets (N MiB each, default 32; deterministic: xoshiro256+ and
 * Marsaglia's polar method, floats rounded to nearest even):
 *   bf16 weights N(0, 0.02); f32 Adam exp_avg N(0, 1e-3); f32 exp_avg_sq
 *   N(0, 1e-3)^2; f16 weights N(0, 0.02); f32 all zeros; f32 uniformly
 *   random bits.
 * Codecs: zstd levels 1 and 3, and auto (resolved by dtype).  Frames are
 * 1 MiB, coded one after another on one thread, so MB/s is per core: raw
 * bytes per second of the thread's CPU time (median of R runs; CPU time,
 * not wall time, so that other work sharing the machine counts less).  "bound" is the ratio reached by
 * coding the exponent field at its entropy (measured on the whole data set)
 * and storing sign and mantissa bits as they are.
 *
 * Then the codec on T threads at once (each with its own frames), against
 * one thread, per thread CPU second: whether threads slow each other down.
 * The library part saves and loads a bf16, an f32 and a random tensor of N
 * MiB with raw, zstd and auto through ckpt_writer / ckpt_read (no fsync) in
 * DIR (default /dev/shm, else $TMPDIR or /tmp), with 1 thread and with T
 * (default: online CPUs; frames are encoded and decoded on the library's
 * pools), and times 4 KiB reads at random offsets with no frame cache, each
 * decoding one frame.  --strict exits 1 when a target of the codec issue
 * is missed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "ckptfs.h"
#include "codec/codec.h"

#define MIB ((size_t)1 << 20)
#define FRAME MIB
#define MAX_REPS 99
#define RANDOM_READS 400

/* ------------------------------------------------------------ helpers */

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU seconds of the calling thread: per-core speeds are measured with it,
 * so that time the thread spends waiting for a CPU shared with other work
 * does not count. */
static double cpu_now(void)
{
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

/* ------------------------------------------------------------ data */

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, res = s[0] + s[3], t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return res;
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {   /* splitmix64 */
        uint64_t z = (seed += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        r->s[i] = z ^ (z >> 31);
    }
}

static double rng_unit(rng *r)           /* (-1, 1) */
{
    return (double)(rng_next(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* One N(0, sigma) value (Marsaglia's polar method, one of the pair). */
static double rng_gauss(rng *r, double sigma)
{
    double u, v, q;
    do {
        u = rng_unit(r);
        v = rng_unit(r);
        q = u * u + v * v;
    } while (q >= 1.0 || q == 0.0);
    return sigma * u * sqrt(-2.0 * log(q) / q);
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);     /* nearest even; no NaN here */
    return (uint16_t)(u >> 16);
}

/* binary16, rounded to nearest even, subnormals included. */
static uint16_t to_f16(double x)
{
    uint16_t sign = x < 0 ? 0x8000 : 0;
    double a = fabs(x);
    if (a >= 65520.0)
        return sign | 0x7c00;
    if (a < ldexp(1.0, -14))
        return sign | (uint16_t)nearbyint(a * ldexp(1.0, 24));
    int e;
    double f = frexp(a, &e);                       /* a = f * 2^e */
    uint32_t m = (uint32_t)nearbyint((2 * f - 1) * 1024.0);
    int be = e - 1 + 15;
    if (m == 1024) {
        m = 0;
        be++;
    }
    return sign | (uint16_t)(be << 10) | (uint16_t)m;
}

enum { DS_BF16, DS_AVG, DS_AVG_SQ, DS_F16, DS_ZERO, DS_RANDOM, NDS };

typedef struct dataset {
    const char *name;
    ckpt_dtype dtype;
    unsigned char *data;
    size_t n;                /* bytes */
    double bound;            /* ratio at exponent entropy + raw bits */
    double exp_entropy;      /* bits per element */
} dataset;

static const char *const DS_NAMES[NDS] = {
    "bf16 weights N(0,0.02)", "f32 exp_avg N(0,1e-3)",
    "f32 exp_avg_sq N(0,1e-3)^2", "f16 weights N(0,0.02)",
    "f32 all zeros", "f32 random bits",
};
static const ckpt_dtype DS_DTYPES[NDS] = {
    CKPT_BF16, CKPT_F32, CKPT_F32, CKPT_F16, CKPT_F32, CKPT_F32,
};

static void gen(dataset *d, int kind, size_t n)
{
    rng r;
    rng_seed(&r, 1000 + (uint64_t)kind);
    d->name = DS_NAMES[kind];
    d->dtype = DS_DTYPES[kind];
    d->n = n;
    d->data = xmalloc(n);
    size_t es = ckpt_dtype_size(d->dtype);
    for (size_t i = 0; i < n / es; i++) {
        unsigned char *p = d->data + i * es;
        if (kind == DS_BF16) {
            uint16_t v = to_bf16((float)rng_gauss(&r, 0.02));
            memcpy(p, &v, 2);
        } else if (kind == DS_F16) {
            uint16_t v = to_f16(rng_gauss(&r, 0.02));
            memcpy(p, &v, 2);
        } else if (kind == DS_AVG || kind == DS_AVG_SQ) {
            double g = rng_gauss(&r, 1e-3);
            float v = (float)(kind == DS_AVG ? g : g * g);
            memcpy(p, &v, 4);
        } else if (kind == DS_ZERO) {
            memset(p, 0, es);
        } else {
            uint32_t v = (uint32_t)(rng_next(&r) >> 32);
            memcpy(p, &v, 4);
        }
    }
}

/* Exponent field of element i: width in bits, and its value. */
static unsigned exp_field(const dataset *d, size_t i, unsigned *ebits)
{
    if (d->dtype == CKPT_F32) {
        uint32_t v;
        memcpy(&v, d->data + 4 * i, 4);
        *ebits = 8;
        return (v >> 23) & 0xff;
    }
    uint16_t v;
    memcpy(&v, d->data + 2 * i, 2);
    if (d->dtype == CKPT_BF16) {
        *ebits = 8;
        return (v >> 7) & 0xff;
    }
    *ebits = 5;
    return (v >> 10) & 0x1f;
}

static void compute_bound(dataset *d)
{
    size_t es = ckpt_dtype_size(d->dtype), ne = d->n / es;
    static uint64_t hist[256];
    memset(hist, 0, sizeof hist);
    unsigned ebits = 8;
    for (size_t i = 0; i < ne; i++)
        hist[exp_field(d, i, &ebits)]++;
    double h = 0;
    for (int s = 0; s < 256; s++)
        if (hist[s]) {
            double p = (double)hist[s] / (double)ne;
            h -= p * log2(p);
        }
    double w = 8.0 * (double)es;
    d->exp_entropy = h;
    d->bound = w / (h + w - ebits);
}

/* ------------------------------------------------------------ codec runs */

typedef struct coded {
    unsigned char **frames;
    size_t *stored;
    int *codec;
    size_t nframes;
} coded;

typedef struct codec_result {
    double ratio, enc_mbs, dec_mbs, frame_us;
    char used[64];           /* codecs the frames ended up with */
} codec_result;

/* Encodes every frame of d once; returns the total stored bytes. */
static size_t encode_all(ckpt_codec_ctx *cx, int codec, int level,
                         const dataset *d, coded *o)
{
    size_t total = 0, es = ckpt_dtype_size(d->dtype);
    for (size_t f = 0; f < o->nframes; f++) {
        size_t off = f * FRAME, n = d->n - off < FRAME ? d->n - off : FRAME;
        size_t on = 0;
        ckpt_error err = { 0 };
        if (ckpt_codec_encode(cx, codec, level, es, d->data + off, n,
                              o->frames[f], ckpt_codec_bound(n), &on,
                              &o->codec[f], &err))
            die("encode %s: %s", d->name, err.msg);
        o->stored[f] = on;
        if (o->codec[f] == CKPT_CODEC_RAW)
            memcpy(o->frames[f], d->data + off, n);
        total += on;
    }
    return total;
}

/* Decodes every frame and checks the bytes; returns seconds. */
static double decode_all(ckpt_codec_ctx *cx, const dataset *d,
                         const coded *o, unsigned char *out)
{
    double t0 = cpu_now();
    for (size_t f = 0; f < o->nframes; f++) {
        size_t off = f * FRAME, n = d->n - off < FRAME ? d->n - off : FRAME;
        ckpt_error err = { 0 };
        if (ckpt_codec_decode(cx, o->codec[f], o->frames[f], o->stored[f],
                              out + off, n, &err))
            die("decode %s: %s", d->name, err.msg);
    }
    double t = cpu_now() - t0;
    if (memcmp(out, d->data, d->n) != 0)
        die("%s: round trip differs", d->name);
    return t;
}

static void describe_used(const coded *o, char *buf, size_t cap)
{
    unsigned mask = 0;
    for (size_t f = 0; f < o->nframes; f++)
        mask |= 1u << o->codec[f];
    buf[0] = '\0';
    for (int c = 0; c < 32; c++)
        if (mask & (1u << c))
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s",
                     buf[0] ? "+" : "", ckpt_codec_name(c));
}

static codec_result run_codec(int codec, int level, const dataset *d,
                              int reps)
{
    coded o;
    o.nframes = (d->n + FRAME - 1) / FRAME;
    o.frames = xmalloc(o.nframes * sizeof *o.frames);
    o.stored = xmalloc(o.nframes * sizeof *o.stored);
    o.codec = xmalloc(o.nframes * sizeof *o.codec);
    for (size_t f = 0; f < o.nframes; f++)
        o.frames[f] = xmalloc(ckpt_codec_bound(FRAME));
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    unsigned char *out = xmalloc(d->n);
    if (!cx)
        die("out of memory");
    double enc[MAX_REPS], dec[MAX_REPS];
    size_t total = 0;
    encode_all(cx, codec, level, d, &o);          /* warm up */
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now();
        total = encode_all(cx, codec, level, d, &o);
        enc[r] = cpu_now() - t0;
        dec[r] = decode_all(cx, d, &o, out);
    }
    codec_result res;
    res.ratio = (double)d->n / (double)total;
    res.enc_mbs = (double)d->n / 1e6 / median(enc, reps);
    double dm = median(dec, reps);
    res.dec_mbs = (double)d->n / 1e6 / dm;
    res.frame_us = dm / (double)o.nframes * 1e6;
    describe_used(&o, res.used, sizeof res.used);
    for (size_t f = 0; f < o.nframes; f++)
        free(o.frames[f]);
    free(o.frames);
    free(o.stored);
    free(o.codec);
    free(out);
    ckpt_codec_ctx_free(cx);
    return res;
}

/* ------------------------------------------------------------ targets */

typedef struct targets {
    int missed;
} targets;

static void target(targets *t, const char *what, double got, double want,
                   int at_least)
{
    int ok = at_least ? got >= want : got <= want;
    printf("TARGET %-44s %10.3f %s %-8.3f %s\n", what, got,
           at_least ? ">=" : "<=", want, ok ? "ok" : "MISSED");
    t->missed += !ok;
}

static void codec_table(dataset *ds, int reps, targets *tg)
{
    static const struct { const char *label; int codec, level; } C[] = {
        { "zstd-1", CKPT_CODEC_ZSTD, 1 },
        { "zstd-3", CKPT_CODEC_ZSTD, 3 },
        { "auto", CKPT_CODEC_AUTO, 1 },
    };
    printf("\nper core (one thread, CPU time); bound = bits per element / "
           "(exponent entropy + sign and\nmantissa bits stored as they are): "
           "data with a constant sign (exp_avg_sq, zeros) beats it;\n"
           "frame us: median time to decode one 1 MiB frame\n");
    printf("%-28s %-7s %-14s %7s %7s %9s %9s %8s\n", "data set", "codec",
           "frames", "ratio", "bound", "enc MB/s", "dec MB/s", "frame us");
    for (int k = 0; k < NDS; k++) {
        dataset *d = &ds[k];
        for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
            int codec = ckpt_codec_resolve(C[c].codec, d->dtype);
            codec_result r = run_codec(codec, C[c].level, d, reps);
            printf("%-28s %-7s %-14s %7.3f %7.3f %9.0f %9.0f %8.0f\n",
                   d->name, C[c].label, r.used, r.ratio, d->bound, r.enc_mbs,
                   r.dec_mbs, r.frame_us);
            fflush(stdout);
            if (C[c].codec != CKPT_CODEC_AUTO)
                continue;
            char what[96];
            if (k == DS_BF16 || k == DS_AVG) {
                snprintf(what, sizeof what, "%s ratio", k == DS_BF16 ?
                         "bf16" : "f32 exp_avg");
                target(tg, what, r.ratio, k == DS_BF16 ? 1.50 : 1.19, 1);
            }
            if (k <= DS_F16) {
                snprintf(what, sizeof what, "%s encode MB/s/core", d->name);
                target(tg, what, r.enc_mbs, 1000, 1);
                snprintf(what, sizeof what, "%s decode MB/s/core", d->name);
                target(tg, what, r.dec_mbs, 2000, 1);
            }
        }
    }
}

/* ------------------------------------------------------------ parallel */

/* One thread's share of a parallel run: frames [f0, f1) of a data set,
 * encoded (then decoded) with its own context, as the library's pool
 * workers do. */
typedef struct par_job {
    const dataset *d;
    int codec;
    size_t f0, f1;
    double enc_cpu, dec_cpu;
} par_job;

static void *par_run(void *arg)
{
    par_job *j = arg;
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    unsigned char *st = xmalloc(ckpt_codec_bound(FRAME)), *out = xmalloc(FRAME);
    if (!cx)
        die("out of memory");
    size_t es = ckpt_dtype_size(j->d->dtype);
    j->enc_cpu = j->dec_cpu = 0;
    for (size_t f = j->f0; f < j->f1; f++) {
        const unsigned char *src = j->d->data + f * FRAME;
        size_t on;
        int oc;
        double t0 = cpu_now();
        if (ckpt_codec_encode(cx, j->codec, 1, es, src, FRAME, st,
                              ckpt_codec_bound(FRAME), &on, &oc, NULL))
            die("parallel encode failed");
        double t1 = cpu_now();
        if (oc == CKPT_CODEC_RAW)
            memcpy(st, src, FRAME);
        double t2 = cpu_now();
        if (ckpt_codec_decode(cx, oc, st, on, out, FRAME, NULL) ||
            memcmp(out, src, FRAME) != 0)
            die("parallel decode failed");
        j->enc_cpu += t1 - t0;
        j->dec_cpu += cpu_now() - t2;
    }
    ckpt_codec_ctx_free(cx);
    free(st);
    free(out);
    return NULL;
}

/* Runs nt threads over the frames of d; returns per-thread MB per CPU
 * second (encode, decode) and the wall time. */
static void par_once(const dataset *d, int codec, int nt, double *enc,
                     double *dec, double *wall)
{
    par_job jobs[64];
    pthread_t th[64];
    size_t nf = d->n / FRAME;
    double t0 = now_s();
    for (int i = 0; i < nt; i++) {
        jobs[i] = (par_job){ d, codec, nf * (size_t)i / (size_t)nt,
                             nf * (size_t)(i + 1) / (size_t)nt, 0, 0 };
        if (pthread_create(&th[i], NULL, par_run, &jobs[i]))
            die("cannot start a thread");
    }
    double ec = 0, dc = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        ec += jobs[i].enc_cpu;
        dc += jobs[i].dec_cpu;
    }
    *wall = now_s() - t0;
    *enc = (double)(nf * FRAME) / 1e6 / ec;
    *dec = (double)(nf * FRAME) / 1e6 / dc;
}

/* Whether codec threads slow each other down (shared state, caches,
 * memory bandwidth): per-thread CPU throughput with nt threads at once
 * against one thread.  Near 1 means frames encode and decode in parallel
 * as fast as alone, so throughput grows with the cores given. */
static void parallel_table(dataset *ds, int nt, int reps)
{
    if (nt > 64)
        nt = 64;
    printf("\nparallel codec (auto, each thread its own frames and context): "
           "MB per thread-CPU second\nwith 1 and %d threads at once, and "
           "their ratio (1.00 = no slowdown from running together)\n", nt);
    printf("%-28s %9s %9s %6s %9s %9s %6s\n", "data set", "enc 1", "enc N",
           "eff", "dec 1", "dec N", "eff");
    static const int kinds[] = { DS_BF16, DS_AVG };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const dataset *d = &ds[kinds[k]];
        int codec = ckpt_codec_resolve(CKPT_CODEC_AUTO, d->dtype);
        double e1[MAX_REPS], en[MAX_REPS], d1[MAX_REPS], dn[MAX_REPS], w;
        for (int r = 0; r < reps; r++) {
            par_once(d, codec, 1, &e1[r], &d1[r], &w);
            par_once(d, codec, nt, &en[r], &dn[r], &w);
        }
        double E1 = median(e1, reps), EN = median(en, reps);
        double D1 = median(d1, reps), DN = median(dn, reps);
        printf("%-28s %9.0f %9.0f %6.2f %9.0f %9.0f %6.2f\n", d->name, E1, EN,
               EN / E1, D1, DN, DN / D1);
        fflush(stdout);
    }
}

/* ------------------------------------------------------------ library */

static int rm_entry(const char *p, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Wall and process-CPU seconds of one timed operation. */
typedef struct timing {
    double wall, cpu;
} timing;

static timing clock_start(void)
{
    return (timing){ now_s(), clock_s(CLOCK_PROCESS_CPUTIME_ID) };
}

static timing clock_since(timing t0)
{
    return (timing){ now_s() - t0.wall,
                     clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0.cpu };
}

static timing save_one(const char *dir, const dataset *d, int codec,
                       int threads)
{
    ckpt_write_opts wo;
    ckpt_write_opts_init(&wo);
    wo.codec = codec;
    wo.threads = threads;
    wo.sync = 0;
    ckpt_error err = { 0 };
    ckpt_writer *w;
    int64_t shape = (int64_t)(d->n / ckpt_dtype_size(d->dtype));
    ckpt_piece p = { .fqn = "t", .dtype = d->dtype, .ndim = 1,
                     .shape = &shape, .data = d->data };
    rm_tree(dir);
    timing t0 = clock_start();
    if (ckpt_writer_open(&w, dir, "w0", &wo, &err) ||
        ckpt_writer_put(w, &p, &err) || ckpt_writer_close(w, &err))
        die("save %s: %s", dir, err.msg);
    timing t = clock_since(t0);
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    co.sync = 0;
    if (ckpt_commit(dir, &co, &err))
        die("commit %s: %s", dir, err.msg);
    return t;
}

static ckpt_reader *open_reader(const char *dir, int threads, size_t cache,
                                int prefetch)
{
    ckpt_read_opts ro;
    ckpt_read_opts_init(&ro);
    ro.threads = threads;
    ro.cache_bytes = cache;
    ro.prefetch = prefetch;
    ckpt_reader *r;
    ckpt_error err = { 0 };
    if (ckpt_reader_open(&r, dir, &ro, &err))
        die("open %s: %s", dir, err.msg);
    return r;
}

/* Reads the whole tensor with one ckpt_read (frames decoded in parallel
 * by the reader's pool when threads > 1). */
static timing load_one(const char *dir, const dataset *d, int threads,
                       unsigned char *out)
{
    ckpt_reader *r = open_reader(dir, threads, (size_t)64 << 20, 4);
    ckpt_error err = { 0 };
    timing t0 = clock_start();
    if (ckpt_read(r, 0, out, 0, d->n, &err) != (int64_t)d->n)
        die("load %s: %s", dir, err.msg);
    timing t = clock_since(t0);
    ckpt_reader_close(r);
    if (memcmp(out, d->data, d->n) != 0)
        die("load %s: bytes differ", dir);
    return t;
}

/* Median microseconds of a 4 KiB read at a random 4 KiB-aligned offset,
 * with no frame cache (every read decodes its frame). */
static double random_reads(const char *dir, const dataset *d)
{
    ckpt_reader *r = open_reader(dir, 1, 0, 0);
    rng g;
    rng_seed(&g, 7);
    unsigned char buf[4096];
    double us[RANDOM_READS];
    for (int i = 0; i < RANDOM_READS; i++) {
        uint64_t off = (rng_next(&g) % (d->n / 4096)) * 4096;
        ckpt_error err = { 0 };
        double t0 = now_s();
        if (ckpt_read(r, 0, buf, off, sizeof buf, &err) != 4096)
            die("read %s: %s", dir, err.msg);
        us[i] = (now_s() - t0) * 1e6;
        if (memcmp(buf, d->data + off, sizeof buf) != 0)
            die("read %s: bytes differ", dir);
    }
    ckpt_reader_close(r);
    return median(us, RANDOM_READS);
}

/* One row of the library table: MB/s per core (1 thread, process CPU
 * time), MB/s wall-clock with 1 and tmax threads, and the 4K read. */
typedef struct lib_result {
    double save_cpu, save1, saven, load_cpu, load1, loadn, read_us;
} lib_result;

static lib_result library_row(const char *dir, const dataset *d,
                              const char *label, int codec, int tmax,
                              int reps, unsigned char *out)
{
    double sc[MAX_REPS], s1[MAX_REPS], sn[MAX_REPS];
    double lc[MAX_REPS], l1[MAX_REPS], ln[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        timing t = save_one(dir, d, codec, tmax);
        sn[r] = t.wall;
        ln[r] = load_one(dir, d, tmax, out).wall;
        t = save_one(dir, d, codec, 1);
        s1[r] = t.wall;
        sc[r] = t.cpu;
        t = load_one(dir, d, 1, out);
        l1[r] = t.wall;
        lc[r] = t.cpu;
    }
    double mb = (double)d->n / 1e6;
    lib_result x = {
        mb / median(sc, reps), mb / median(s1, reps), mb / median(sn, reps),
        mb / median(lc, reps), mb / median(l1, reps), mb / median(ln, reps),
        random_reads(dir, d),
    };
    printf("%-28s %-6s %8.0f %8.0f %8.0f %5.2fx %8.0f %8.0f %8.0f %5.2fx "
           "%7.0f\n", d->name, label, x.save_cpu, x.save1, x.saven,
           x.saven / x.save1, x.load_cpu, x.load1, x.loadn,
           x.loadn / x.load1, x.read_us);
    fflush(stdout);
    return x;
}

static void library_table(const char *base, dataset *ds, int tmax, int reps,
                          targets *tg)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt", base);
    printf("\nlibrary: one tensor saved (ckpt_writer_put, no fsync) and "
           "loaded (one ckpt_read), MB/s;\n'cpu': per core, 1 thread, raw "
           "bytes per process CPU second; '1', '%d': wall clock with 1 and "
           "%d\nthreads; 4K: median us of a 4 KiB read at a random offset "
           "with no frame cache\n", tmax, tmax);
    printf("%-28s %-6s %8s %8s %8s %6s %8s %8s %8s %6s %7s\n", "data set",
           "codec", "save cpu", "save 1", "save N", "scale", "load cpu",
           "load 1", "load N", "scale", "4K us");
    static const int kinds[] = { DS_BF16, DS_AVG, DS_RANDOM };
    static const struct { const char *label; int codec; } C[] = {
        { "raw", CKPT_CODEC_RAW }, { "zstd-1", CKPT_CODEC_ZSTD },
        { "auto", CKPT_CODEC_AUTO },
    };
    size_t most = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        most = ds[kinds[k]].n > most ? ds[kinds[k]].n : most;
    unsigned char *out = xmalloc(most);
    lib_result res[3][3];
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t c = 0; c < sizeof C / sizeof C[0]; c++)
            res[k][c] = library_row(dir, &ds[kinds[k]], C[c].label,
                                    C[c].codec, tmax, reps, out);
    /* Random data falls back to raw frames: it must cost what raw does. */
    target(tg, "random: auto save / raw save (per core)",
           res[2][2].save_cpu / res[2][0].save_cpu, 0.9, 1);
    target(tg, "random: auto load / raw load (per core)",
           res[2][2].load_cpu / res[2][0].load_cpu, 0.9, 1);
    free(out);
    rm_tree(dir);
}

/* ------------------------------------------------------------ main */

typedef struct opts {
    size_t mb;
    int reps, threads, strict;
    const char *dir;
} opts;

static const char *default_dir(void)
{
    struct stat st;
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) &&
        access("/dev/shm", W_OK) == 0)
        return "/dev/shm";
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

static opts parse(int argc, char **argv)
{
    opts o = { 32, 5, 0, 0, NULL };
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(k, "--strict") == 0) {
            o.strict = 1;
            continue;
        }
        if (!v)
            die("usage: codec_bench [--mb N] [--reps R] [--dir DIR] "
                "[--threads T] [--strict]");
        if (strcmp(k, "--mb") == 0)
            o.mb = (size_t)atol(v);
        else if (strcmp(k, "--reps") == 0)
            o.reps = atoi(v);
        else if (strcmp(k, "--threads") == 0)
            o.threads = atoi(v);
        else if (strcmp(k, "--dir") == 0)
            o.dir = v;
        else
            die("unknown option %s", k);
        i++;
    }
    if (o.mb < 1 || o.mb > 4096 || o.reps < 1 || o.reps > MAX_REPS ||
        o.threads < 0)
        die("--mb must be 1..4096, --reps 1..%d, --threads >= 0", MAX_REPS);
    if (!o.dir)
        o.dir = default_dir();
    if (o.threads == 0)
        o.threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return o;
}

/* A failure exits 2, so that it reads apart from a missed target (1). */
static void exit_failure(void)
{
    exit(2);
}

int main(int argc, char **argv)
{
    bench_die_hook(exit_failure);
    opts o = parse(argc, argv);
    char base[4096];
    snprintf(base, sizeof base, "%s/ckptfs-codec-bench.XXXXXX", o.dir);
    if (!mkdtemp(base))
        die("cannot create a directory in %s: %s", o.dir, strerror(errno));
    printf("codec bench: %zu MiB per data set, 1 MiB frames, median of %d "
           "runs, %ld CPUs, scratch %s\n", o.mb, o.reps,
           sysconf(_SC_NPROCESSORS_ONLN), o.dir);
    dataset ds[NDS];
    for (int k = 0; k < NDS; k++) {
        gen(&ds[k], k, o.mb * MIB);
        compute_bound(&ds[k]);
        printf("  %-28s exponent entropy %.3f bits, bound %.3f\n",
               ds[k].name, ds[k].exp_entropy, ds[k].bound);
    }
    targets tg = { 0 };
    codec_table(ds, o.reps, &tg);
    parallel_table(ds, o.threads, o.reps);
    library_table(base, ds, o.threads, o.reps, &tg);
    rmdir(base);
    for (int k = 0; k < NDS; k++)
        free(ds[k].data);
    printf("codec bench: %d target(s) missed\n", tg.missed);
    return o.strict && tg.missed ? 1 : 0;
}
