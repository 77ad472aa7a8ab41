/*
 * bench_core.c - the C half of `make bench` (driven by tests/bench/run.sh).
 *
 *   bench_core gen DIR [--mb N]
 *       Generates a deterministic state dict of about N MiB (default 1024):
 *       per layer i a bf16 1024x1024 "layers.i.weight" ~ N(0, 0.02) and two
 *       fp32 1024x1024 Adam moments "optim.layers.i.exp_avg" ~ N(0, 1e-3) and
 *       "optim.layers.i.exp_avg_sq" ~ N(0, 1e-3)^2.  Writes DIR/state.bin
 *       (all tensors back to back) and DIR/state.idx (one line per tensor:
 *       "fqn dtype rows cols offset nbytes"), which dd/cat and dcp_bench.py
 *       use too.
 *   bench_core save DIR OUT --codec raw|zstd|auto [--level L] [--threads N]
 *       Reads the state into memory, then times a libckptfs save of it into
 *       the new checkpoint OUT (writer open, put every tensor, close, commit;
 *       everything fdatasync'ed).  Reports peak RSS before and after.
 *   bench_core load DIR CKPT [--name NAME] [--threads N] [--reader-threads N]
 *       Times opening CKPT and reading every tensor into preallocated,
 *       pre-faulted buffers (64-byte aligned, as PyTorch's CPU allocator
 *       gives; --threads: application threads calling ckpt_read tensor
 *       by tensor, 0 = one ckpt_read_batch of every tensor, as
 *       ckptfs.load does; --reader-threads: the reader's decoder threads,
 *       0 = all CPUs; --repeat N: the load N times in a row, the median
 *       reported: a warm load long enough to profile);
 *       after the clock stops, compares every byte with DIR/state.bin.
 *   bench_core decode DIR|- CKPT [--name NAME] [--tensor FQN]
 *       The per-core decode speed of CKPT's frames: their stored bytes are
 *       read into memory first, then one thread decodes every frame into a
 *       destination the size of the state (pre-faulted) and checks its
 *       checksum, as a load does, without reading files; bytes per CPU
 *       second.  The output is compared with DIR/state.bin afterwards.
 *       DIR "-": any checkpoint, every tensor (or only FQN), checked by the
 *       frames' checksums (the mount and Python benchmarks' limits).
 *   bench_core encode DIR --codec raw|zstd|auto [--name NAME]
 *       The per-core encode speed of a codec on the state (frames of the
 *       default size, checksummed and encoded on one thread into memory):
 *       the CPU side of a save's limit.
 *   bench_core copy DIR CKPT [--name NAME] [--threads N]
 *       The floor of a warm raw load: every byte of CKPT's shard files read
 *       with 1 MiB preads into a pre-faulted, 64-byte aligned destination
 *       the size of the state, on N threads (default: all CPUs), with no
 *       checksum and no index: the kernel's one copy into memory that the
 *       load must write.
 *   bench_core resident FILE
 *       Prints the percentage of FILE's pages in the page cache (mincore),
 *       so that run.sh can check that dropping the cache worked.
 *
 * Every timed command prints one machine-readable line
 *   RESULT name=... seconds=... bytes_logical=... bytes_on_disk=... [k=v...]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "ckptfs.h"
#include "codec/codec.h"      /* bench_core decode: the codec, without files */
#include "bench_util.h"

#define DIM 1024                      /* every tensor is DIM x DIM */
#define MIB ((uint64_t)1 << 20)

/* ------------------------------------------------------------ utilities */

static long peak_rss_kb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return ru.ru_maxrss;
}

static void path_join(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        die("path too long: %s/%s", dir, name);
}


/* Bytes held by the regular files under a directory (apparent size, like
 * `du -sb`); nftw has no user pointer, hence the file-scope accumulator. */
static uint64_t du_total;

static int du_visit(const char *path, const struct stat *st, int type,
                    struct FTW *ftw)
{
    if (type == FTW_F && S_ISREG(st->st_mode))
        du_total += (uint64_t)st->st_size;
    return 0;
}

static uint64_t disk_bytes(const char *dir)
{
    du_total = 0;
    if (nftw(dir, du_visit, 16, FTW_PHYS) != 0)
        die("cannot walk %s: %s", dir, strerror(errno));
    return du_total;
}

/* ------------------------------------------------------------ random data */

/* xoshiro256+ seeded through splitmix64: fast, and plenty for test data. */
typedef struct rng { uint64_t s[4]; } rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, res = s[0] + s[3], t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}

/* Uniform in [-1, 1). */
static double rng_sym(rng *r)
{
    return (double)(rng_next(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/*
 * The Makefile links bench_core without libm, so log and sqrt are done here
 * (to ~1e-12 relative, far more than test data needs).
 * ln(x) for normal x > 0: x = m * 2^e with m in [0.71, 1.42), then
 * ln(m) = 2 atanh((m - 1) / (m + 1)) by its series.
 */
static double ln_pos(double x)
{
    uint64_t b;
    double m, s = 1.0 / 19;
    memcpy(&b, &x, sizeof b);
    int e = (int)((b >> 52) & 0x7ff) - 1023;
    b = (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
    memcpy(&m, &b, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double t = (m - 1) / (m + 1), t2 = t * t;
    for (int k = 17; k >= 1; k -= 2)
        s = s * t2 + 1.0 / k;
    return 2 * t * s + e * 0.6931471805599453;
}

/* sqrt(x) for x > 0: exponent-halving guess, then Newton. */
static double sqrt_pos(double x)
{
    uint64_t b;
    double y;
    memcpy(&b, &x, sizeof b);
    b = (b >> 1) + 0x1ff8000000000000ULL;
    memcpy(&y, &b, sizeof y);
    for (int i = 0; i < 5; i++)
        y = 0.5 * (y + x / y);
    return y;
}

/* Two independent N(0, 1) samples (Marsaglia's polar method). */
static void normal_pair(rng *r, double *a, double *b)
{
    double u, v, s;
    do {
        u = rng_sym(r);
        v = rng_sym(r);
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt_pos(-2.0 * ln_pos(s) / s);
    *a = u * f;
    *b = v * f;
}

/* fp32 -> bf16 with round-to-nearest-even (no NaNs occur here). */
static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

typedef enum fill_kind { FILL_WEIGHT, FILL_MOMENT, FILL_MOMENT_SQ } fill_kind;

/* Fills one tensor's bytes (n elements) deterministically from its seed. */
static void fill_tensor(void *dst, size_t n, fill_kind kind, uint64_t seed)
{
    rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i += 2) {
        double v[2];
        normal_pair(&r, &v[0], &v[1]);
        for (size_t k = 0; k < 2 && i + k < n; k++) {
            if (kind == FILL_WEIGHT) {
                ((uint16_t *)dst)[i + k] = f32_to_bf16((float)(v[k] * 0.02));
            } else {
                double x = v[k] * 1e-3;
                ((float *)dst)[i + k] = (float)(kind == FILL_MOMENT ? x : x * x);
            }
        }
    }
}

/* ------------------------------------------------------------ layout */

static void add_tensor(state_dict *sd, const char *fqn, ckpt_dtype dt)
{
    tensor_desc *t = &sd->t[sd->n++];
    int n = snprintf(t->fqn, sizeof t->fqn, "%s", fqn);
    if (n < 0 || (size_t)n >= sizeof t->fqn)
        die("tensor name too long: %s", fqn);
    t->dtype = dt;
    t->shape[0] = DIM;
    t->shape[1] = DIM;
    t->offset = sd->total;
    t->nbytes = (uint64_t)DIM * DIM * ckpt_dtype_size(dt);
    sd->total += t->nbytes;
}

/* 10 MiB per layer: bf16 weight (2 MiB) + two fp32 moments (4 MiB each). */
static void layout_state(state_dict *sd, uint64_t mb)
{
    size_t layers = (size_t)((mb + 5) / 10);
    char name[FQN_MAX];
    if (layers == 0)
        layers = 1;
    sd->t = xmalloc(3 * layers * sizeof *sd->t);
    sd->n = 0;
    sd->total = 0;
    for (size_t i = 0; i < layers; i++) {
        snprintf(name, sizeof name, "layers.%zu.weight", i);
        add_tensor(sd, name, CKPT_BF16);
        snprintf(name, sizeof name, "optim.layers.%zu.exp_avg", i);
        add_tensor(sd, name, CKPT_F32);
        snprintf(name, sizeof name, "optim.layers.%zu.exp_avg_sq", i);
        add_tensor(sd, name, CKPT_F32);
    }
}

static fill_kind kind_of(const tensor_desc *t)
{
    if (t->dtype == CKPT_BF16)
        return FILL_WEIGHT;
    size_t len = strlen(t->fqn);
    return len > 3 && strcmp(t->fqn + len - 3, "_sq") == 0 ? FILL_MOMENT_SQ
                                                           : FILL_MOMENT;
}

static void manifest_write(const state_dict *sd, const char *dir)
{
    char path[4096];
    path_join(path, sizeof path, dir, "state.idx");
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot create %s: %s", path, strerror(errno));
    for (size_t i = 0; i < sd->n; i++) {
        const tensor_desc *t = &sd->t[i];
        fprintf(f, "%s %s %lld %lld %llu %llu\n", t->fqn,
                ckpt_dtype_name(t->dtype), (long long)t->shape[0],
                (long long)t->shape[1], (unsigned long long)t->offset,
                (unsigned long long)t->nbytes);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        die("cannot write %s", path);
}

/* ------------------------------------------------------------ gen */

typedef struct gen_job {
    const state_dict *sd;
    int fd;
    const char *path;
    atomic_size_t next;
} gen_job;

static void *gen_worker(void *arg)
{
    gen_job *job = arg;
    void *buf = xmalloc((size_t)DIM * DIM * 4);
    size_t i;
    while ((i = atomic_fetch_add(&job->next, 1)) < job->sd->n) {
        const tensor_desc *t = &job->sd->t[i];
        fill_tensor(buf, (size_t)(t->shape[0] * t->shape[1]), kind_of(t),
                    0x636b7074ULL * (i + 1));
        pwrite_full(job->fd, buf, t->nbytes, t->offset, job->path);
    }
    free(buf);
    return NULL;
}

static int cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

static int cmd_gen(const char *dir, uint64_t mb)
{
    state_dict sd;
    char path[4096];
    pthread_t th[64];
    int nth = cpu_count();
    layout_state(&sd, mb);
    path_join(path, sizeof path, dir, "state.bin");
    gen_job job = { .sd = &sd, .path = path };
    atomic_init(&job.next, 0);
    job.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (job.fd < 0)
        die("cannot create %s: %s", path, strerror(errno));
    double t0 = now_s();
    for (int i = 0; i < nth; i++)
        if (pthread_create(&th[i], NULL, gen_worker, &job) != 0)
            die("pthread_create failed");
    for (int i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
    if (close(job.fd) != 0)
        die("close %s: %s", path, strerror(errno));
    manifest_write(&sd, dir);
    printf("RESULT name=gen seconds=%.4f bytes_logical=%llu tensors=%zu\n",
           now_s() - t0, (unsigned long long)sd.total, sd.n);
    free(sd.t);
    return 0;
}

/* ------------------------------------------------------------ save */

static void put_all(ckpt_writer *w, const state_dict *sd,
                    const unsigned char *data)
{
    ckpt_error err;
    for (size_t i = 0; i < sd->n; i++) {
        const tensor_desc *t = &sd->t[i];
        ckpt_piece p = { .fqn = t->fqn, .dtype = t->dtype, .ndim = 2,
                         .shape = t->shape, .data = data + t->offset };
        if (ckpt_writer_put(w, &p, &err) != 0)
            die_ckpt("ckpt_writer_put", &err);
    }
}

static double timed_save(const state_dict *sd, const unsigned char *data,
                         const char *out, const ckpt_write_opts *wo)
{
    ckpt_error err;
    ckpt_writer *w;
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    co.expect_writers = 1;
    double t0 = now_s();
    if (ckpt_writer_open(&w, out, "rank0", wo, &err) != 0)
        die_ckpt("ckpt_writer_open", &err);
    put_all(w, sd, data);
    if (ckpt_writer_close(w, &err) != 0)
        die_ckpt("ckpt_writer_close", &err);
    if (ckpt_commit(out, &co, &err) != 0)
        die_ckpt("ckpt_commit", &err);
    return now_s() - t0;
}

static int cmd_save(const char *dir, const char *out, const char *codec,
                    int level, int threads)
{
    state_dict sd;
    ckpt_write_opts wo;
    ckpt_write_opts_init(&wo);
    if (strcmp(codec, "raw") == 0)
        wo.codec = CKPT_CODEC_RAW;
    else if (strcmp(codec, "zstd") == 0)
        wo.codec = CKPT_CODEC_ZSTD;
    else if (strcmp(codec, "auto") == 0)
        wo.codec = CKPT_CODEC_AUTO;
    else
        die("unknown codec '%s' (raw, zstd or auto)", codec);
    if (level > 0)
        wo.level = level;
    wo.threads = threads;
    state_read(&sd, dir);
    state_load(&sd, dir);       /* untimed */
    const unsigned char *data = sd.data;
    long rss0 = peak_rss_kb();
    double cpu0 = cpu_s();
    double secs = timed_save(&sd, data, out, &wo);
    double cpu = cpu_s() - cpu0;
    long rss1 = peak_rss_kb();
    printf("RESULT name=libckptfs_save_%s seconds=%.4f cpu_seconds=%.3f "
           "bytes_logical=%llu bytes_on_disk=%llu rss_before_mb=%.1f "
           "rss_peak_mb=%.1f rss_growth_mb=%.1f level=%d threads=%d\n",
           codec, secs, cpu, (unsigned long long)sd.total,
           (unsigned long long)disk_bytes(out), rss0 / 1024.0, rss1 / 1024.0,
           (rss1 - rss0) / 1024.0, wo.codec == CKPT_CODEC_ZSTD ? wo.level : 0,
           threads);
    state_free(&sd);
    return 0;
}

/* ------------------------------------------------------------ load */

typedef struct load_job {
    ckpt_reader *r;
    const state_dict *sd;
    unsigned char *dst;
    atomic_size_t next;
    atomic_int failed;
    ckpt_error err;                   /* first failure, under the flag */
} load_job;

static int read_tensor(ckpt_reader *r, const tensor_desc *t, void *dst,
                       ckpt_error *err)
{
    long idx = ckpt_reader_find(r, t->fqn);
    if (idx < 0) {
        err->code = (int)idx;
        snprintf(err->msg, sizeof err->msg, "tensor %s not in checkpoint",
                 t->fqn);
        return -1;
    }
    int64_t got = ckpt_read(r, (size_t)idx, dst, 0, t->nbytes, err);
    if (got < 0)
        return -1;
    if ((uint64_t)got != t->nbytes) {
        err->code = -EIO;
        snprintf(err->msg, sizeof err->msg, "%s: read %lld of %llu bytes",
                 t->fqn, (long long)got, (unsigned long long)t->nbytes);
        return -1;
    }
    return 0;
}

/* Reads every tensor in one ckpt_read_batch call. */
static void load_batch(load_job *job)
{
    const state_dict *sd = job->sd;
    ckpt_read_item *items = xmalloc(sd->n * sizeof *items);
    for (size_t i = 0; i < sd->n; i++) {
        long idx = ckpt_reader_find(job->r, sd->t[i].fqn);
        if (idx < 0)
            die("tensor %s not in checkpoint", sd->t[i].fqn);
        items[i] = (ckpt_read_item){ (size_t)idx, NULL, NULL,
                                     job->dst + sd->t[i].offset };
    }
    if (ckpt_read_batch(job->r, items, sd->n, &job->err) != 0)
        atomic_store(&job->failed, 1);
    free(items);
}

static void *load_worker(void *arg)
{
    load_job *job = arg;
    ckpt_error err;
    size_t i;
    while (!atomic_load(&job->failed) &&
           (i = atomic_fetch_add(&job->next, 1)) < job->sd->n) {
        const tensor_desc *t = &job->sd->t[i];
        if (read_tensor(job->r, t, job->dst + t->offset, &err) != 0 &&
            atomic_exchange(&job->failed, 1) == 0)
            job->err = err;
    }
    return NULL;
}

/* Milliseconds the block device holding `path` has had requests in
 * flight (io_ticks, field 13 of /proc/diskstats), or -1 when unknown (not
 * a block device's file system, no /proc). */
static long disk_ticks(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    unsigned maj = major(st.st_dev), min = minor(st.st_dev);
    FILE *f = fopen("/proc/diskstats", "r");
    if (!f)
        return -1;
    char line[512];
    long ticks = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned a, b;
        long v[11];
        char name[64];
        if (sscanf(line, "%u %u %63s %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld "
                   "%ld", &a, &b, name, &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7], &v[8], &v[9], &v[10]) == 14 &&
            a == maj && b == min) {
            ticks = v[9];
            break;
        }
    }
    fclose(f);
    return ticks;
}

/* The share (%) of the timed load's wall time during which the disk was
 * busy; -1 when unknown. */
static double g_busy_pct = -1;

static double timed_load(const state_dict *sd, const char *ckpt,
                         unsigned char *dst, int threads, int reader_threads)
{
    long ticks0 = disk_ticks(ckpt);
    ckpt_read_opts ro;
    pthread_t th[64];
    load_job job = { .sd = sd, .dst = dst };
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    ckpt_read_opts_init(&ro);
    ro.threads = reader_threads;
    double t0 = now_s();
    if (ckpt_reader_open(&job.r, ckpt, &ro, &job.err) != 0)
        die_ckpt("ckpt_reader_open", &job.err);
    if (threads <= 0) {
        load_batch(&job);
    } else if (threads == 1) {
        load_worker(&job);
    } else {
        for (int i = 0; i < threads; i++)
            if (pthread_create(&th[i], NULL, load_worker, &job) != 0)
                die("pthread_create failed");
        for (int i = 0; i < threads; i++)
            pthread_join(th[i], NULL);
    }
    ckpt_reader_close(job.r);
    double secs = now_s() - t0;
    long ticks1 = disk_ticks(ckpt);
    if (ticks0 >= 0 && ticks1 >= ticks0 && secs > 0)
        g_busy_pct = 100.0 * (double)(ticks1 - ticks0) / (secs * 1000.0);
    if (atomic_load(&job.failed))
        die_ckpt(threads <= 0 ? "ckpt_read_batch" : "ckpt_read", &job.err);
    return secs;
}

/* Compares the loaded bytes with state.bin, one tensor at a time. */
static void verify_loaded(const state_dict *sd, const char *dir,
                          const unsigned char *got)
{
    char path[4096];
    path_join(path, sizeof path, dir, "state.bin");
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open %s: %s", path, strerror(errno));
    unsigned char *want = xmalloc((size_t)DIM * DIM * 8);
    for (size_t i = 0; i < sd->n; i++) {
        const tensor_desc *t = &sd->t[i];
        if (t->nbytes > (uint64_t)DIM * DIM * 8)
            die("%s: tensor larger than expected", t->fqn);
        pread_full(fd, want, t->nbytes, t->offset, path);
        if (memcmp(want, got + t->offset, t->nbytes) != 0)
            die("VERIFY FAILED: %s differs from the saved bytes", t->fqn);
    }
    free(want);
    close(fd);
}

/* The load destination: one pre-faulted buffer, every tensor at a
 * 64-byte aligned address (tensors are multiples of 64 bytes), as the
 * buffers of PyTorch's CPU allocator are. */
static unsigned char *dest_alloc(uint64_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 1) != 0)
        die("out of memory (%llu bytes)", (unsigned long long)n);
    memset(p, 0xa5, n);                       /* fault the pages in now */
    return p;
}

static int cmd_load(const char *dir, const char *ckpt, const char *name,
                    int threads, int reader_threads, int repeat)
{
    state_dict sd;
    state_read(&sd, dir);
    unsigned char *dst = dest_alloc(sd.total);
    if (threads > 64)
        threads = 64;
    if (repeat < 1 || repeat > 1000)
        die("--repeat must be 1 to 1000");
    double *sv = xmalloc((size_t)repeat * sizeof *sv);
    double *cv = xmalloc((size_t)repeat * sizeof *cv);
    for (int k = 0; k < repeat; k++) {
        double cpu0 = cpu_s();
        sv[k] = timed_load(&sd, ckpt, dst, threads, reader_threads);
        cv[k] = cpu_s() - cpu0;
    }
    double secs = median(sv, repeat), cpu = median(cv, repeat);
    free(sv);
    free(cv);
    verify_loaded(&sd, dir, dst);
    printf("RESULT name=%s seconds=%.4f cpu_seconds=%.3f bytes_logical=%llu "
           "bytes_on_disk=%llu threads=%d reader_threads=%d verified=1",
           name, secs, cpu, (unsigned long long)sd.total,
           (unsigned long long)disk_bytes(ckpt), threads,
           reader_threads);
    if (g_busy_pct >= 0)
        printf(" disk_busy_pct=%.1f", g_busy_pct);
    printf("\n");
    free(dst);
    free(sd.t);
    return 0;
}

/* ------------------------------------------------------------ decode */

/* One frame of the checkpoint, its stored bytes in memory. */
typedef struct mem_frame {
    ckpt_frame_info fi;
    const unsigned char *stored;      /* into the stored-bytes buffer */
    uint64_t dst;                     /* where its raw bytes go */
} mem_frame;

typedef struct mem_ckpt {
    mem_frame *f;
    size_t n, cap;
    unsigned char *stored;
    uint64_t stored_bytes, raw_bytes;
} mem_ckpt;

/* Appends the frames of chunk `c` of tensor `t` of `r` (in file `ckpt`)
 * to m, their raw bytes placed from `dst`; in pass 0 only counts them, in
 * pass 1 reads their stored bytes. */
static void mem_chunk_read(mem_ckpt *m, ckpt_reader *r, const char *ckpt,
                           size_t t, size_t c, uint64_t dst, int pass,
                           uint64_t *at)
{
    ckpt_error err;
    ckpt_chunk_info ci;
    char path[4096];
    if (ckpt_reader_chunk(r, t, c, &ci) != 0)
        die("%s: tensor %zu chunk %zu: no such chunk", ckpt, t, c);
    path_join(path, sizeof path, ckpt, ci.file);
    int fd = pass ? open(path, O_RDONLY) : -1;
    if (pass && fd < 0)
        die("cannot open %s: %s", path, strerror(errno));
    for (uint64_t k = 0; k < ci.nframes; k++) {
        ckpt_frame_info fi;
        if (ckpt_reader_frame(r, t, c, k, &fi, &err) != 0)
            die_ckpt("ckpt_reader_frame", &err);
        if (pass) {
            m->f[m->n] = (mem_frame){ fi, m->stored + *at, dst + fi.raw_offset };
            pread_full(fd, m->stored + *at, fi.stored_size, fi.file_offset,
                       path);
        } else {
            m->stored_bytes += fi.stored_size;
            m->raw_bytes += fi.raw_size;
        }
        *at += fi.stored_size;
        m->n++;
    }
    if (pass)
        close(fd);
}

/* Reads the stored bytes of every frame of `ckpt` into memory.  With a
 * state dict, its tensors in state.idx order, each one whole-tensor chunk
 * whose raw bytes go where bench_core load puts them (tensor offset +
 * chunk-linear offset); without (sd NULL), every tensor of the checkpoint
 * (or only `only`, when not NULL), chunk by chunk, raw bytes back to back. */
static void mem_ckpt_read(mem_ckpt *m, const state_dict *sd, const char *ckpt,
                          const char *only)
{
    ckpt_error err;
    ckpt_reader *r;
    if (ckpt_reader_open(&r, ckpt, NULL, &err) != 0)
        die_ckpt("ckpt_reader_open", &err);
    memset(m, 0, sizeof *m);
    size_t nt = sd ? sd->n : ckpt_reader_count(r);
    for (int pass = 0; pass < 2; pass++) {
        uint64_t at = 0, dst = 0;
        m->n = 0;
        for (size_t i = 0; i < nt; i++) {
            ckpt_tensor_info ti;
            long t = sd ? ckpt_reader_find(r, sd->t[i].fqn) : (long)i;
            if (t < 0 || ckpt_reader_info(r, (size_t)t, &ti) != 0)
                die("%s: no tensor %s", ckpt, sd ? sd->t[i].fqn : "?");
            if (only && strcmp(ti.fqn, only) != 0)
                continue;
            if (sd && ti.nchunks != 1)
                die("%s: not one whole-tensor chunk in %s", ti.fqn, ckpt);
            for (size_t c = 0; c < ti.nchunks; c++) {
                ckpt_chunk_info ci;
                ckpt_reader_chunk(r, (size_t)t, c, &ci);
                mem_chunk_read(m, r, ckpt, (size_t)t, c,
                               sd ? sd->t[i].offset : dst, pass, &at);
                dst += ci.raw_bytes;
            }
        }
        if (!pass) {
            if (m->n == 0)
                die("%s: no frames%s%s", ckpt, only ? " in tensor " : "",
                    only ? only : "");
            m->f = xmalloc(m->n * sizeof *m->f);
            m->stored = xmalloc(m->stored_bytes);
        }
    }
    ckpt_reader_close(r);
}

/* DIR "-": no state dict; every tensor of CKPT (or --tensor's), checked by
 * the frames' checksums only. */
static int cmd_decode(const char *dir, const char *ckpt, const char *name,
                      const char *only)
{
    state_dict sd = { 0 };
    mem_ckpt m;
    ckpt_error err;
    int with_state = strcmp(dir, "-") != 0;
    if (with_state)
        state_read(&sd, dir);
    mem_ckpt_read(&m, with_state ? &sd : NULL, ckpt, only);
    uint64_t dst_n = with_state ? sd.total : m.raw_bytes;
    unsigned char *dst = dest_alloc(dst_n);
    ckpt_codec_ctx *ctx = ckpt_codec_ctx_new();
    if (!ctx)
        die("out of memory");
    double cpu0 = cpu_s(), t0 = now_s();
    for (size_t i = 0; i < m.n; i++) {
        const mem_frame *f = &m.f[i];
        unsigned char *out = dst + f->dst;
        if (f->dst + f->fi.raw_size > dst_n)
            die("frame %zu lies outside the destination", i);
        if (ckpt_codec_decode(ctx, f->fi.codec, f->stored, f->fi.stored_size,
                              out, f->fi.raw_size, &err) != 0)
            die_ckpt("ckpt_codec_decode", &err);
        if (ckpt_checksum(out, f->fi.raw_size) != f->fi.checksum)
            die("frame %zu: checksum mismatch", i);
    }
    double secs = now_s() - t0, cpu = cpu_s() - cpu0;
    if (with_state)
        verify_loaded(&sd, dir, dst);
    printf("RESULT name=%s seconds=%.4f cpu_seconds=%.3f bytes_logical=%llu "
           "bytes_on_disk=%llu frames=%zu per_core_mb_s=%.1f verified=%d\n",
           name, secs, cpu, (unsigned long long)m.raw_bytes,
           (unsigned long long)m.stored_bytes, m.n,
           (double)m.raw_bytes / (cpu > 0 ? cpu : secs) / 1e6, with_state);
    ckpt_codec_ctx_free(ctx);
    free(dst);
    free(m.f);
    free(m.stored);
    free(sd.t);
    return 0;
}

/* ------------------------------------------------------------ encode */

/* The per-core encode speed of a codec on the state: every tensor cut
 * into frames of the writer's default size, each checksummed and encoded
 * on one thread as a save's encoder does, into one reused output buffer
 * (no files); bytes per CPU second.  The save's limit beside the storage's
 * write speed. */
static int cmd_encode(const char *dir, const char *name, const char *codec)
{
    state_dict sd;
    ckpt_write_opts wo;
    ckpt_error err;
    int c;
    ckpt_write_opts_init(&wo);
    if (ckpt_codec_parse(codec, &c, &wo.level, &err) != 0)
        die_ckpt(codec, &err);
    state_read(&sd, dir);
    state_load(&sd, dir);       /* untimed */
    size_t fs = CKPT_DEFAULT_FRAME_SIZE;
    unsigned char *out = xmalloc(ckpt_codec_bound(fs));
    ckpt_codec_ctx *ctx = ckpt_codec_ctx_new();
    if (!ctx)
        die("out of memory");
    uint64_t stored = 0, sum = 0;
    size_t frames = 0;
    double cpu0 = cpu_s(), t0 = now_s();
    for (size_t i = 0; i < sd.n; i++) {
        const tensor_desc *t = &sd.t[i];
        int tc = ckpt_codec_resolve(c, t->dtype);
        for (uint64_t off = 0; off < t->nbytes; off += fs, frames++) {
            size_t n = t->nbytes - off < fs ? (size_t)(t->nbytes - off) : fs;
            const unsigned char *src = sd.data + t->offset + off;
            size_t out_n = n;
            int used = CKPT_CODEC_RAW;
            sum ^= ckpt_checksum(src, n);
            if (tc != CKPT_CODEC_RAW &&
                ckpt_codec_encode(ctx, tc, wo.level, 0, src, n, out,
                                  ckpt_codec_bound(fs), &out_n, &used,
                                  &err) != 0)
                die_ckpt(t->fqn, &err);
            stored += used == CKPT_CODEC_RAW ? n : out_n;
        }
    }
    double secs = now_s() - t0, cpu = cpu_s() - cpu0;
    printf("RESULT name=%s seconds=%.4f cpu_seconds=%.3f bytes_logical=%llu "
           "bytes_on_disk=%llu frames=%zu per_core_mb_s=%.1f checksums=%llx\n",
           name, secs, cpu, (unsigned long long)sd.total,
           (unsigned long long)stored, frames,
           (double)sd.total / (cpu > 0 ? cpu : secs) / 1e6,
           (unsigned long long)sum);
    ckpt_codec_ctx_free(ctx);
    free(out);
    state_free(&sd);
    return 0;
}

/* ------------------------------------------------------------ copy */

typedef struct copy_job {
    int *fd;                          /* per shard file */
    uint64_t *base, *size;            /* where each file's bytes go */
    size_t nfiles;
    unsigned char *dst;
    atomic_size_t next;               /* next 1 MiB piece, over all files */
} copy_job;

static void *copy_worker(void *arg)
{
    copy_job *j = arg;
    size_t k;
    for (;;) {
        k = atomic_fetch_add(&j->next, 1);
        uint64_t at = (uint64_t)k * MIB;
        size_t f = 0;
        while (f < j->nfiles && at >= j->base[f] + j->size[f])
            f++;
        if (f == j->nfiles)
            return NULL;
        uint64_t off = at - j->base[f];
        uint64_t n = j->size[f] - off < MIB ? j->size[f] - off : MIB;
        pread_full(j->fd[f], j->dst + at, n, off, "shard");
    }
}

static int cmd_copy(const char *ckpt, const char *name, int threads)
{
    char data[4096];
    path_join(data, sizeof data, ckpt, "data");
    uint64_t total = disk_bytes(data);
    copy_job j = { 0 };
    DIR *d = opendir(data);
    if (!d)
        die("cannot open %s: %s", data, strerror(errno));
    struct dirent *de;
    size_t cap = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (j.nfiles == cap) {
            cap = cap ? 2 * cap : 16;
            j.fd = realloc(j.fd, cap * sizeof *j.fd);
            j.base = realloc(j.base, cap * sizeof *j.base);
            j.size = realloc(j.size, cap * sizeof *j.size);
            if (!j.fd || !j.base || !j.size)
                die("out of memory");
        }
        char path[4096];
        struct stat st;
        path_join(path, sizeof path, data, de->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0 || fstat(fd, &st) != 0)
            die("cannot open %s: %s", path, strerror(errno));
        j.base[j.nfiles] = j.nfiles ? j.base[j.nfiles - 1] +
                                      j.size[j.nfiles - 1] : 0;
        /* each file starts on a MiB boundary of the destination */
        j.base[j.nfiles] = (j.base[j.nfiles] + MIB - 1) / MIB * MIB;
        j.size[j.nfiles] = (uint64_t)st.st_size;
        j.fd[j.nfiles++] = fd;
    }
    closedir(d);
    uint64_t span = j.nfiles ? j.base[j.nfiles - 1] + j.size[j.nfiles - 1]
                             : 0;
    j.dst = dest_alloc(span);
    atomic_init(&j.next, 0);
    int n = threads > 0 ? threads : cpu_count();
    if (n > 64)
        n = 64;
    pthread_t th[64];
    double cpu0 = cpu_s(), t0 = now_s();
    for (int i = 0; i < n; i++)
        if (pthread_create(&th[i], NULL, copy_worker, &j) != 0)
            die("pthread_create failed");
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    double secs = now_s() - t0, cpu = cpu_s() - cpu0;
    printf("RESULT name=%s seconds=%.4f cpu_seconds=%.3f bytes_logical=%llu "
           "bytes_on_disk=%llu threads=%d\n", name, secs, cpu,
           (unsigned long long)total, (unsigned long long)total, n);
    for (size_t i = 0; i < j.nfiles; i++)
        close(j.fd[i]);
    free(j.fd);
    free(j.base);
    free(j.size);
    free(j.dst);
    return 0;
}

/* ------------------------------------------------------------ resident */

static int cmd_resident(const char *path)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0)
        die("cannot open %s: %s", path, strerror(errno));
    size_t len = (size_t)st.st_size, pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t npages = (len + pg - 1) / pg, in = 0;
    if (npages > 0) {
        void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        unsigned char *vec = xmalloc(npages);
        if (m == MAP_FAILED || mincore(m, len, vec) != 0)
            die("mincore %s: %s", path, strerror(errno));
        for (size_t i = 0; i < npages; i++)
            in += vec[i] & 1;
        munmap(m, len);
        free(vec);
    }
    close(fd);
    printf("%.1f\n", npages ? 100.0 * (double)in / (double)npages : 0.0);
    return 0;
}

/* ------------------------------------------------------------ main */

static void usage(void)
{
    fputs("usage: bench_core gen DIR [--mb N]\n"
          "       bench_core save DIR OUT --codec raw|zstd|auto [--level L] "
          "[--threads N]\n"
          "       bench_core load DIR CKPT [--name NAME] [--threads N] "
          "[--reader-threads N] [--repeat N]\n"
          "       bench_core decode DIR|- CKPT [--name NAME] [--tensor FQN]\n"
          "       bench_core encode DIR --codec raw|zstd|auto [--name NAME]\n"
          "       bench_core copy DIR CKPT [--name NAME] [--threads N]\n"
          "       bench_core resident FILE\n", stderr);
    exit(2);
}

typedef struct cli_opts {
    uint64_t mb;
    const char *codec;
    const char *name;
    const char *tensor;
    int level;
    int threads;
    int reader_threads;
    int repeat;
} cli_opts;

static long parse_num(const char *s, const char *what)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0)
        die("bad %s: '%s'", what, s);
    return v;
}

/* Parses the options after the positional arguments. */
static void parse_opts(cli_opts *o, int argc, char **argv, int first)
{
    for (int i = first; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *k = argv[i], *v = argv[++i];
        if (strcmp(k, "--mb") == 0)
            o->mb = (uint64_t)parse_num(v, "--mb");
        else if (strcmp(k, "--codec") == 0)
            o->codec = v;
        else if (strcmp(k, "--name") == 0)
            o->name = v;
        else if (strcmp(k, "--tensor") == 0)
            o->tensor = v;
        else if (strcmp(k, "--level") == 0)
            o->level = (int)parse_num(v, "--level");
        else if (strcmp(k, "--threads") == 0)
            o->threads = (int)parse_num(v, "--threads");
        else if (strcmp(k, "--reader-threads") == 0)
            o->reader_threads = (int)parse_num(v, "--reader-threads");
        else if (strcmp(k, "--repeat") == 0)
            o->repeat = (int)parse_num(v, "--repeat");
        else
            usage();
    }
}

int main(int argc, char **argv)
{
    cli_opts o = { .mb = 1024, .codec = "zstd", .name = "libckptfs_load",
                   .repeat = 1 };
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3)
        usage();
    const char *cmd = argv[1];
    if (strcmp(cmd, "gen") == 0) {
        parse_opts(&o, argc, argv, 3);
        return cmd_gen(argv[2], o.mb);
    }
    if (strcmp(cmd, "resident") == 0 && argc == 3)
        return cmd_resident(argv[2]);
    if (strcmp(cmd, "encode") == 0) {
        parse_opts(&o, argc, argv, 3);
        return cmd_encode(argv[2], o.name, o.codec);
    }
    if (argc < 4)
        usage();
    parse_opts(&o, argc, argv, 4);
    if (strcmp(cmd, "save") == 0)
        return cmd_save(argv[2], argv[3], o.codec, o.level, o.threads);
    if (strcmp(cmd, "load") == 0)
        return cmd_load(argv[2], argv[3], o.name, o.threads,
                        o.reader_threads, o.repeat);
    if (strcmp(cmd, "decode") == 0)
        return cmd_decode(argv[2], argv[3], o.name, o.tensor);
    if (strcmp(cmd, "copy") == 0)
        return cmd_copy(argv[3], o.name, o.threads);
    usage();
    return 2;
}
