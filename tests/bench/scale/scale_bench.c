/*
 * scale_bench.c - the C half of the metadata-at-scale benchmark (driven by
 * tests/bench/scale/run.sh): a save of W writers x T tensors simulated on
 * one machine, whose cost is all metadata.
 *
 *   scale_bench gen DIR --writers W --tensors T --layout fsdp|tp2d [--jobs J]
 *       Writes what W writers would leave before a commit: per writer r a
 *       local plan DIR/.pending/rank<r>.plan (through the library's own
 *       plan-file code) holding one piece of each of the T tensors, and a
 *       shard DIR/data/rank<r>.shard of T KiB that is a sparse file (every
 *       piece is 1 KiB of zeros, one raw frame) except for tensor T/2,
 *       whose pieces hold real values so that reads can be checked.  As a
 *       library writer does, each shard is fdatasynced and its plan says
 *       so, so that the commit syncs none again.  Every tensor is f32 and 2-D; names are "model.layers.<l>.<param>".
 *         fsdp: shape [W, 256], writer r holds row r (dim-0 sharding);
 *         tp2d: shape [W/4, 1024] on a (W/8) x 8 grid (FSDP x tensor
 *               parallel): writer r holds rows 2*(r/8).. +2, columns
 *               128*(r%8).. +128.  W must be a multiple of 8.
 *   scale_bench plan DIR
 *       Times what the committer does before it writes: reading every
 *       .pending/<writer>.plan into one table of pieces, then planning them
 *       (ckpt_plan_build_pieces), each on its own; commits nothing.
 *   scale_bench commit DIR
 *       Times ckpt_commit (plans read, planned, index written and synced);
 *       says which checkpoint's layout it reused (reused=NAME, or -).
 *   scale_bench read DIR --layout L
 *       Times, in one process: ckpt_reader_open; then a 4 x 4 region of
 *       tensor T/2 (its first read: its chunks are looked up then), checked
 *       element by element against the generator's formula; then the
 *       layout of tensor T/2 + 1 (its info and every chunk's offsets,
 *       sizes and file); then ckpt_reader_close.
 *
 * Every command prints one line "RESULT k=v ..." for run.sh, with the peak
 * resident set of the process (ru_maxrss, KiB) among the values.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckptfs.h"
#include "codec/codec.h"
#include "format/planfile.h"
#include "format/model.h"
#include "format/pieces.h"
#include "format/plan.h"

#define PIECE_BYTES 1024
#define TP 8
#define FQN_CAP 96

typedef enum { LAYOUT_FSDP, LAYOUT_TP2D } layout;

typedef struct job {
    const char *dir;
    long writers, tensors;
    layout lay;
} job;

/* ------------------------------------------------------------ utilities */

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("scale_bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* User + system CPU seconds of the process so far (all threads). */
static double cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        die("out of memory");
    return p;
}

static void path_fmt(char *out, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= cap)
        die("path too long");
}

/* ------------------------------------------------------------ the model */

/* Tensor names: 100 layers of 10 parameters, as a transformer's. */
static void tensor_name(char *buf, size_t cap, long t)
{
    static const char *const param[10] = {
        "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
        "input_layernorm.weight", "post_attention_layernorm.weight",
        "mlp.router.weight",
    };
    snprintf(buf, cap, "model.layers.%ld.%s", t / 10, param[t % 10]);
}

static void tensor_shape(const job *j, int64_t *shape)
{
    if (j->lay == LAYOUT_FSDP) {
        shape[0] = j->writers;
        shape[1] = PIECE_BYTES / 4;
    } else {
        shape[0] = j->writers / TP * 2;
        shape[1] = TP * 128;
    }
}

/* The box writer r holds of every tensor. */
static void piece_box(const job *j, long r, int64_t *off, int64_t *size)
{
    if (j->lay == LAYOUT_FSDP) {
        off[0] = r;
        off[1] = 0;
        size[0] = 1;
        size[1] = PIECE_BYTES / 4;
    } else {
        off[0] = r / TP * 2;
        off[1] = r % TP * 128;
        size[0] = 2;
        size[1] = 128;
    }
}

/* Value of element (i, k) of the tensor that holds real data: exact in
 * f32. */
static float value_at(const int64_t *shape, int64_t i, int64_t k)
{
    return (float)((i * shape[1] + k) % 16777216);
}

static void fill_piece(const job *j, long r, float *out)
{
    int64_t shape[2], off[2], size[2];
    tensor_shape(j, shape);
    piece_box(j, r, off, size);
    for (int64_t i = 0; i < size[0]; i++)
        for (int64_t k = 0; k < size[1]; k++)
            out[i * size[1] + k] = value_at(shape, off[0] + i, off[1] + k);
}

static int parse_layout(const char *s, layout *out)
{
    if (!strcmp(s, "fsdp"))
        *out = LAYOUT_FSDP;
    else if (!strcmp(s, "tp2d"))
        *out = LAYOUT_TP2D;
    else
        return -1;
    return 0;
}

/* ------------------------------------------------------------ gen */

typedef struct gen_ctx {
    const job *j;
    char **fqn;                 /* per tensor */
    ckpt_piece_rec *recs;       /* per tensor, reused for every writer */
    ckpt_frame_rec *frames;
    uint64_t zero_sum;          /* XXH3 of PIECE_BYTES zero bytes */
} gen_ctx;

static void write_shard(const gen_ctx *g, long r, const char *path,
                        uint64_t *data_sum)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        die("%s: %s", path, strerror(errno));
    float piece[PIECE_BYTES / 4];
    fill_piece(g->j, r, piece);
    *data_sum = ckpt_checksum(piece, sizeof piece);
    off_t at = (off_t)(g->j->tensors / 2) * PIECE_BYTES;
    if (ftruncate(fd, (off_t)g->j->tensors * PIECE_BYTES) != 0 ||
        pwrite(fd, piece, sizeof piece, at) != (ssize_t)sizeof piece ||
        fdatasync(fd) != 0 || close(fd) != 0)
        die("%s: %s", path, strerror(errno));
}

static void gen_writer(gen_ctx *g, long r)
{
    const job *j = g->j;
    char shard[4096], plan[4096], writer[32], file[64];
    snprintf(writer, sizeof writer, "rank%ld", r);
    snprintf(file, sizeof file, "data/rank%ld.shard", r);
    path_fmt(shard, sizeof shard, "%s/%s", j->dir, file);
    path_fmt(plan, sizeof plan, "%s/.pending/%s.plan", j->dir, writer);
    uint64_t data_sum;
    write_shard(g, r, shard, &data_sum);
    int64_t shape[2], off[2], size[2];
    tensor_shape(j, shape);
    piece_box(j, r, off, size);
    for (long t = 0; t < j->tensors; t++) {
        ckpt_piece_rec *p = &g->recs[t];
        uint64_t sum = t == j->tensors / 2 ? data_sum : g->zero_sum;
        p->fqn = g->fqn[t];
        p->dtype = CKPT_F32;
        p->ndim = 2;
        memcpy(p->shape, shape, sizeof shape);
        memcpy(p->offsets, off, sizeof off);
        memcpy(p->sizes, size, sizeof size);
        p->file = file;
        p->writer = writer;
        p->raw_bytes = p->stored_bytes = PIECE_BYTES;
        p->data_hash = sum;
        g->frames[t] = (ckpt_frame_rec){ (uint64_t)t * PIECE_BYTES,
                                         PIECE_BYTES, 0, PIECE_BYTES, sum,
                                         CKPT_CODEC_RAW, 0 };
        p->frames = &g->frames[t];
        p->nframes = 1;
    }
    ckpt_planfile *pf;
    ckpt_error err = { 0 };
    ckpt_kv meta = { "step", "1000", NULL };
    if (ckpt_planfile_create(&pf, plan, writer, &err))
        die("%s", err.msg);
    /* As a library writer does: its shard synced, and the plan says so
     * (the commit syncs only the shards no writer did). */
    ckpt_planfile_note_synced(pf, file, (uint64_t)j->tensors * PIECE_BYTES);
    if (ckpt_planfile_append(pf, g->recs, (size_t)j->tensors, &meta, 1, &err))
        die("%s", err.msg);
    ckpt_planfile_close(pf);
}

static void gen_range(const job *j, long first, long step)
{
    gen_ctx g = { .j = j };
    unsigned char zeros[PIECE_BYTES] = { 0 };
    g.zero_sum = ckpt_checksum(zeros, sizeof zeros);
    g.fqn = xcalloc((size_t)j->tensors, sizeof *g.fqn);
    g.recs = xcalloc((size_t)j->tensors, sizeof *g.recs);
    g.frames = xcalloc((size_t)j->tensors, sizeof *g.frames);
    for (long t = 0; t < j->tensors; t++) {
        g.fqn[t] = xcalloc(1, FQN_CAP);
        tensor_name(g.fqn[t], FQN_CAP, t);
    }
    for (long r = first; r < j->writers; r += step)
        gen_writer(&g, r);
    for (long t = 0; t < j->tensors; t++)
        free(g.fqn[t]);
    free(g.fqn);
    free(g.recs);
    free(g.frames);
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die("mkdir %s: %s", path, strerror(errno));
}

static int cmd_gen(const job *j, long jobs)
{
    char p[4096];
    if (j->lay == LAYOUT_TP2D && j->writers % TP)
        die("tp2d needs a multiple of %d writers", TP);
    make_dir(j->dir);
    path_fmt(p, sizeof p, "%s/data", j->dir);
    make_dir(p);
    path_fmt(p, sizeof p, "%s/.pending", j->dir);
    make_dir(p);
    double t0 = now_s();
    for (long k = 1; k < jobs; k++) {
        pid_t pid = fork();
        if (pid < 0)
            die("fork: %s", strerror(errno));
        if (pid == 0) {
            gen_range(j, k, jobs);
            _exit(0);
        }
    }
    gen_range(j, 0, jobs);
    int bad = 0, st;
    while (wait(&st) > 0)
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    if (bad)
        die("a generator process failed");
    printf("RESULT cmd=gen seconds=%.3f pieces=%ld\n", now_s() - t0,
           j->writers * j->tensors);
    return 0;
}

/* ------------------------------------------------------------ plan */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

static int cmd_plan(const char *dir)
{
    char pending[4096], path[4096];
    path_fmt(pending, sizeof pending, "%s/.pending", dir);
    DIR *d = opendir(pending);
    if (!d)
        die("%s: %s", pending, strerror(errno));
    ckpt_pieces tab;
    ckpt_manifest meta;
    ckpt_pieces_init(&tab);
    ckpt_manifest_init(&meta);
    ckpt_error err = { 0 };
    double c0 = cpu_s(), t0 = now_s();
    struct dirent *e;
    while ((e = readdir(d)))
        if (ends_with(e->d_name, ".plan")) {
            path_fmt(path, sizeof path, "%s/%s", pending, e->d_name);
            if (ckpt_planfile_read_pieces(path, &tab, &meta, &err))
                die("%s", err.msg);
        }
    closedir(d);
    double c1 = cpu_s(), t1 = now_s();
    ckpt_plan plan;
    ckpt_plan_opts po = { .check_replica_hashes = 1 };
    if (ckpt_plan_build_pieces(&tab, &po, &plan, &err))
        die("plan: %s", err.msg);
    double c2 = cpu_s(), t2 = now_s();
    printf("RESULT cmd=plan read_s=%.3f read_cpu_s=%.3f plan_s=%.3f "
           "plan_cpu_s=%.3f pieces=%zu tensors=%zu maxrss_kb=%ld\n",
           t1 - t0, c1 - c0, t2 - t1, c2 - c1, tab.n, plan.ntensors,
           peak_rss_kb());
    ckpt_plan_free(&plan);
    ckpt_pieces_free(&tab);
    ckpt_manifest_free(&meta);
    return 0;
}

/* ------------------------------------------------------------ commit */

static int cmd_commit(const char *dir)
{
    ckpt_commit_opts o;
    ckpt_commit_opts_init(&o);
    ckpt_error err = { 0 };
    double c0 = cpu_s(), t0 = now_s();
    if (ckpt_commit(dir, &o, &err))
        die("commit: %s", err.msg);
    double dt = now_s() - t0, dc = cpu_s() - c0;
    char p[4096];
    struct stat st;
    path_fmt(p, sizeof p, "%s/index.db", dir);
    if (stat(p, &st))
        die("%s: %s", p, strerror(errno));
    long rss = peak_rss_kb();
    /* Whether the commit reused the previous save's layout (write/reuse.h),
     * after the clock and the peak memory. */
    ckpt_reader *r;
    if (ckpt_reader_open(&r, dir, NULL, &err))
        die("open %s: %s", dir, err.msg);
    const char *from = ckpt_reader_meta_get(r, "layout.reused");
    printf("RESULT cmd=commit seconds=%.3f cpu_s=%.3f maxrss_kb=%ld "
           "index_bytes=%lld reused=%s\n", dt, dc, rss,
           (long long)st.st_size, from ? from : "-");
    ckpt_reader_close(r);
    return 0;
}

/* ------------------------------------------------------------ read */

static long find_tensor(ckpt_reader *r, long t)
{
    char fqn[FQN_CAP];
    tensor_name(fqn, sizeof fqn, t);
    long idx = ckpt_reader_find(r, fqn);
    if (idx < 0)
        die("tensor %s not found", fqn);
    return idx;
}

/* A 4 x 4 region in the middle of the tensor with real data, checked
 * against the formula. */
static void read_region(ckpt_reader *r, const job *j, long idx)
{
    int64_t shape[2];
    tensor_shape(j, shape);
    int64_t off[2] = { shape[0] / 2 - 2, shape[1] / 2 - 2 };
    int64_t size[2] = { 4, 4 };
    float got[16];
    ckpt_error err = { 0 };
    if (ckpt_read_region(r, (size_t)idx, off, size, got, &err))
        die("read region: %s", err.msg);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            if (got[i * 4 + k] != value_at(shape, off[0] + i, off[1] + k))
                die("region element (%lld, %lld) is %g, expected %g",
                    (long long)(off[0] + i), (long long)(off[1] + k),
                    got[i * 4 + k],
                    value_at(shape, off[0] + i, off[1] + k));
}

/* The layout of tensor idx: every chunk's box and file. */
static size_t read_layout(ckpt_reader *r, const job *j, long idx)
{
    ckpt_tensor_info ti;
    if (ckpt_reader_info(r, (size_t)idx, &ti))
        die("info of tensor %ld failed", idx);
    if (ti.nchunks != (size_t)j->writers)
        die("tensor %s has %zu chunks, expected %ld", ti.fqn, ti.nchunks,
            j->writers);
    uint64_t numel = 0;
    for (size_t c = 0; c < ti.nchunks; c++) {
        ckpt_chunk_info ci;
        if (ckpt_reader_chunk(r, (size_t)idx, c, &ci))
            die("chunk %zu of %s cannot be read", c, ti.fqn);
        numel += (uint64_t)(ci.sizes[0] * ci.sizes[1]);
    }
    if (numel != ti.numel)
        die("chunks of %s hold %llu elements of %llu", ti.fqn,
            (unsigned long long)numel, (unsigned long long)ti.numel);
    return ti.nchunks;
}

static int cmd_read(const job *j)
{
    ckpt_reader *r;
    ckpt_error err = { 0 };
    double t0 = now_s();
    if (ckpt_reader_open(&r, j->dir, NULL, &err))
        die("open: %s", err.msg);
    double t1 = now_s();
    long ntensors = (long)ckpt_reader_count(r);
    if (ntensors < 2)
        die("%s holds %ld tensors", j->dir, ntensors);
    job jj = *j;
    jj.tensors = ntensors;
    ckpt_tensor_info ti;
    if (ckpt_reader_info(r, 0, &ti))
        die("info failed");
    jj.writers = j->lay == LAYOUT_FSDP ? ti.shape[0] : ti.shape[0] / 2 * TP;
    read_region(r, &jj, find_tensor(r, ntensors / 2));
    double t2 = now_s();
    size_t nchunks = read_layout(r, &jj, find_tensor(r, ntensors / 2 + 1));
    double t3 = now_s();
    ckpt_reader_close(r);
    double t4 = now_s();
    printf("RESULT cmd=read open_s=%.6f region_s=%.6f layout_s=%.6f "
           "close_s=%.6f chunks=%zu maxrss_kb=%ld\n", t1 - t0, t2 - t1,
           t3 - t2, t4 - t3, nchunks, peak_rss_kb());
    return 0;
}

/* ------------------------------------------------------------ main */

static void usage(void)
{
    fputs("usage: scale_bench gen DIR --writers W --tensors T "
          "--layout fsdp|tp2d [--jobs J]\n"
          "       scale_bench plan DIR\n"
          "       scale_bench commit DIR\n"
          "       scale_bench read DIR --layout fsdp|tp2d\n", stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        usage();
    job j = { .dir = argv[2], .writers = 1024, .tensors = 1000,
              .lay = LAYOUT_FSDP };
    long jobs = 1;
    for (int i = 3; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--writers"))
            j.writers = atol(argv[++i]);
        else if (!strcmp(argv[i], "--tensors"))
            j.tensors = atol(argv[++i]);
        else if (!strcmp(argv[i], "--jobs"))
            jobs = atol(argv[++i]);
        else if (!strcmp(argv[i], "--layout")) {
            if (parse_layout(argv[++i], &j.lay))
                usage();
        } else
            usage();
    }
    if (j.writers < 1 || j.tensors < 2 || jobs < 1)
        usage();
    if (!strcmp(argv[1], "gen"))
        return cmd_gen(&j, jobs);
    if (!strcmp(argv[1], "plan"))
        return cmd_plan(j.dir);
    if (!strcmp(argv[1], "commit"))
        return cmd_commit(j.dir);
    if (!strcmp(argv[1], "read"))
        return cmd_read(&j);
    usage();
    return 2;
}
