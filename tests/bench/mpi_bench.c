/*
 * mpi_bench.c - the MPI half of `make bench` (driven by
 * tests/bench/mpi_bench.sh): collective save and load of the state dict
 * that `bench_core gen` wrote (STATE/state.bin and STATE/state.idx, one
 * line per 2-D tensor: "fqn dtype rows cols offset nbytes").
 *
 *   mpirun -n N mpi_bench save STATE CKPT [--codec auto|raw|zstd]
 *       Each rank reads its dim-0 shard (rows cut as numpy.array_split) of
 *       every tensor before the clock starts, then ckpt_mpi_save writes
 *       them into CKPT (fdatasync'ed, committed) with the codec (default
 *       auto, the library's default).
 *   mpirun -n N mpi_bench load STATE CKPT --layout dim0|dim1 [--name NAME]
 *                                              [--exchange-mib MIB]
 *       Each rank allocates and touches its shard of every tensor (dim-0
 *       rows or dim-1 columns), ckpt_mpi_load fills them (exchanging at
 *       most MIB per round, default 64), and after the clock stops every
 *       byte is compared with state.bin.
 *
 * The clock runs from a barrier to the end of the collective call on the
 * slowest rank.  Rank 0 prints one line
 *   RESULT name=... seconds=... bytes_logical=... ranks=N
 * and for loads bytes_requested, bytes_decoded (summed over ranks) and
 * amplification = decoded / requested.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs_mpi.h"
#include "bench_util.h"

/* This rank's shard of every tensor. */
typedef struct shard_set {
    int64_t (*off)[2], (*size)[2];
    unsigned char **buf;
    uint64_t bytes;
} shard_set;

typedef struct bench_opts {
    const char *cmd, *state, *ckpt, *codec, *layout, *name, *exchange;
} bench_opts;

/* die() ends every rank. */
static void abort_job(void)
{
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int open_state(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/state.bin", dir);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die("cannot open %s: %s", path, strerror(errno));
    return fd;
}

static void split(int64_t n, int parts, int k, int64_t *lo, int64_t *len)
{
    int64_t base = n / parts, extra = n % parts;
    *lo = k * base + (k < extra ? k : extra);
    *len = base + (k < extra ? 1 : 0);
}

/* Rank r of k's shard of every tensor: dim-0 rows or dim-1 columns. */
static void shards_plan(shard_set *s, const state_dict *sd, int dim, int r,
                        int k)
{
    s->off = xmalloc(sd->n * sizeof *s->off);
    s->size = xmalloc(sd->n * sizeof *s->size);
    s->buf = xmalloc(sd->n * sizeof *s->buf);
    s->bytes = 0;
    for (size_t i = 0; i < sd->n; i++) {
        const tensor_desc *t = &sd->t[i];
        s->off[i][0] = s->off[i][1] = 0;
        s->size[i][0] = t->shape[0];
        s->size[i][1] = t->shape[1];
        split(t->shape[dim], k, r, &s->off[i][dim], &s->size[i][dim]);
        size_t bytes = (size_t)(s->size[i][0] * s->size[i][1]) *
                       ckpt_dtype_size(t->dtype);
        s->buf[i] = xmalloc(bytes);
        memset(s->buf[i], 0, bytes);   /* touch: no page faults timed */
        s->bytes += bytes;
    }
}

static void shards_free(shard_set *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(s->buf[i]);
    free(s->buf);
    free(s->off);
    free(s->size);
}

/* Reads (or, when `check`, compares) shard i from state.bin: one run of
 * the shard's columns per row.  Returns the number of bytes that differ. */
static uint64_t shard_io(const tensor_desc *t, const shard_set *s, size_t i,
                         int fd, int check, unsigned char *row)
{
    size_t isz = ckpt_dtype_size(t->dtype);
    size_t run = (size_t)s->size[i][1] * isz;
    uint64_t bad = 0;
    for (int64_t y = 0; y < s->size[i][0]; y++) {
        uint64_t at = t->offset + ((uint64_t)(s->off[i][0] + y) *
                                   (uint64_t)t->shape[1] +
                                   (uint64_t)s->off[i][1]) * isz;
        unsigned char *dst = s->buf[i] + (size_t)y * run;
        pread_full(fd, check ? row : dst, run, at, "state.bin");
        if (check && memcmp(row, dst, run) != 0)
            bad += run;
    }
    return bad;
}

static uint64_t shards_io(const state_dict *sd, const shard_set *s,
                          const char *dir, int check)
{
    int fd = open_state(dir);
    unsigned char *row = xmalloc(sd->t[0].nbytes);
    uint64_t bad = 0;
    for (size_t i = 0; i < sd->n; i++)
        bad += shard_io(&sd->t[i], s, i, fd, check, row);
    free(row);
    close(fd);
    return bad;
}

/* CPU seconds since c0, summed over the ranks. */
static double sum_cpu(double c0)
{
    double mine = cpu_s() - c0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

/* Seconds from a barrier to the end of fn on the slowest rank. */
static double max_seconds(double t0)
{
    double mine = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

static uint64_t sum_u64(uint64_t v)
{
    uint64_t s = 0;
    MPI_Allreduce(&v, &s, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return s;
}

static int cmd_save(const bench_opts *o, int r, int k)
{
    state_dict sd;
    shard_set s;
    state_read(&sd, o->state);
    shards_plan(&s, &sd, 0, r, k);
    shards_io(&sd, &s, o->state, 0);
    ckpt_piece *p = xmalloc(sd.n * sizeof *p);
    for (size_t i = 0; i < sd.n; i++)
        p[i] = (ckpt_piece){ sd.t[i].fqn, sd.t[i].dtype, 2, sd.t[i].shape,
                             s.off[i], s.size[i], s.buf[i] };
    ckpt_mpi_save_opts so;
    ckpt_mpi_save_opts_init(&so);
    /* Named explicitly: the library's default is now auto. */
    if (strcmp(o->codec, "raw") == 0)
        so.write.codec = CKPT_CODEC_RAW;
    else if (strcmp(o->codec, "zstd") == 0)
        so.write.codec = CKPT_CODEC_ZSTD;
    else if (strcmp(o->codec, "auto") == 0)
        so.write.codec = CKPT_CODEC_AUTO;
    else
        die("unknown codec '%s'", o->codec);
    ckpt_error err;
    MPI_Barrier(MPI_COMM_WORLD);
    double c0 = cpu_s(), t0 = MPI_Wtime();
    int rc = ckpt_mpi_save(MPI_COMM_WORLD, o->ckpt, p, sd.n, &so, &err);
    double secs = max_seconds(t0), cpu = sum_cpu(c0);
    if (rc)
        die("rank %d: save: %s", r, err.msg);
    if (r == 0)
        printf("RESULT name=%s seconds=%.4f cpu_seconds=%.3f "
               "bytes_logical=%llu ranks=%d\n", o->name, secs, cpu,
               (unsigned long long)sd.total, k);
    free(p);
    shards_free(&s, sd.n);
    free(sd.t);
    return 0;
}

static int cmd_load(const bench_opts *o, int r, int k)
{
    state_dict sd;
    shard_set s;
    int dim = strcmp(o->layout, "dim1") == 0;
    if (!dim && strcmp(o->layout, "dim0") != 0)
        die("unknown layout '%s' (dim0 or dim1)", o->layout);
    state_read(&sd, o->state);
    shards_plan(&s, &sd, dim, r, k);
    ckpt_mpi_region *g = xmalloc(sd.n * sizeof *g);
    for (size_t i = 0; i < sd.n; i++)
        g[i] = (ckpt_mpi_region){ sd.t[i].fqn, s.off[i], s.size[i],
                                  s.buf[i] };
    ckpt_stats st;
    ckpt_error err;
    ckpt_mpi_load_opts lo;
    ckpt_mpi_load_opts_init(&lo);
    if (o->exchange)
        lo.exchange_bytes = (size_t)atoll(o->exchange) << 20;
    MPI_Barrier(MPI_COMM_WORLD);
    double c0 = cpu_s(), t0 = MPI_Wtime();
    int rc = ckpt_mpi_load(MPI_COMM_WORLD, o->ckpt, g, sd.n, &lo, &st, &err);
    double secs = max_seconds(t0), cpu = sum_cpu(c0);
    if (rc)
        die("rank %d: load: %s", r, err.msg);
    uint64_t bad = sum_u64(shards_io(&sd, &s, o->state, 1));
    uint64_t req = sum_u64(s.bytes), dec = sum_u64(st.bytes_decoded);
    if (bad)
        die("VERIFY FAILED: %llu bytes differ from state.bin",
            (unsigned long long)bad);
    if (r == 0)
        printf("RESULT name=%s seconds=%.4f cpu_seconds=%.3f "
               "bytes_logical=%llu ranks=%d bytes_requested=%llu "
               "bytes_decoded=%llu amplification=%.4f verified=1\n", o->name,
               secs, cpu, (unsigned long long)sd.total, k,
               (unsigned long long)req, (unsigned long long)dec,
               (double)dec / (double)req);
    free(g);
    shards_free(&s, sd.n);
    free(sd.t);
    return 0;
}

static void usage(void)
{
    die("usage: mpi_bench save STATE CKPT [--codec auto|raw|zstd] [--name N]\n"
        "       mpi_bench load STATE CKPT [--layout dim0|dim1] [--name N]\n"
        "                 [--exchange-mib MIB]");
}

static void parse(bench_opts *o, int argc, char **argv)
{
    if (argc < 4)
        usage();
    *o = (bench_opts){ argv[1], argv[2], argv[3], "auto", "dim0", NULL,
                       NULL };
    for (int i = 4; i < argc; i++) {
        const char **slot = !strcmp(argv[i], "--codec") ? &o->codec
                          : !strcmp(argv[i], "--layout") ? &o->layout
                          : !strcmp(argv[i], "--name") ? &o->name
                          : !strcmp(argv[i], "--exchange-mib") ? &o->exchange
                                                               : NULL;
        if (!slot || i + 1 >= argc)
            usage();
        *slot = argv[++i];
    }
    if (!o->name)
        o->name = strcmp(o->cmd, "save") == 0 ? "mpi_save" : "mpi_load";
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    bench_die_hook(abort_job);
    int r, k, rc = 2;
    bench_opts o;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &k);
    parse(&o, argc, argv);
    if (strcmp(o.cmd, "save") == 0)
        rc = cmd_save(&o, r, k);
    else if (strcmp(o.cmd, "load") == 0)
        rc = cmd_load(&o, r, k);
    else
        usage();   /* does not return */
    MPI_Finalize();
    return rc;
}
