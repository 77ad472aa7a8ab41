/*
 * mpi_test.c - helpers shared by the MPI test programs (see mpi_test.h).
 */
#include "mpi_test.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void t_init(tctx *t, int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    t->world = MPI_COMM_WORLD;
    MPI_Comm_rank(t->world, &t->rank);
    MPI_Comm_size(t->world, &t->size);
    t->failures = 0;
}

void t_fail(tctx *t, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s:%d: FAILED: %s\n", t->rank, file, line, msg);
    fflush(stderr);
    t->failures++;
}

int t_finish(tctx *t, const char *name)
{
    int total = 0;
    MPI_Allreduce(&t->failures, &total, 1, MPI_INT, MPI_SUM, t->world);
    if (t->rank == 0)
        printf("%s on %d ranks: %s (%d failed checks)\n", name, t->size,
               total ? "FAIL" : "PASS", total);
    fflush(stdout);
    MPI_Finalize();
    return total ? 1 : 0;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

uint64_t t_fqn_id(const char *fqn)
{
    return hash_str(fqn);
}

int t_same_status(tctx *t, MPI_Comm comm, int rc, const ckpt_error *err)
{
    long long mine[2] = { rc, (long long)(hash_str(err->msg) >> 2) };
    long long lo[2], hi[2];
    MPI_Allreduce(mine, lo, 2, MPI_LONG_LONG, MPI_MIN, comm);
    MPI_Allreduce(mine, hi, 2, MPI_LONG_LONG, MPI_MAX, comm);
    int same = lo[0] == hi[0] && lo[1] == hi[1];
    T_CHECKF(t, same, "ranks disagree: rc %d here (range %lld..%lld), "
             "message '%s'", rc, lo[0], hi[0], err->msg);
    return same;
}

void t_split(int64_t n, int parts, int k, int64_t *lo, int64_t *len)
{
    int64_t base = n / parts, extra = n % parts;
    *lo = k * base + (k < extra ? k : extra);
    *len = base + (k < extra ? 1 : 0);
}

/* splitmix64 of (tid, gi); some tensors get low-entropy values so that
 * their frames compress (zstd) while others stay raw. */
static uint64_t ref_bits(uint64_t tid, uint64_t gi)
{
    uint64_t z = tid * 0x9E3779B97F4A7C15ULL + gi + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    if (tid % 3 == 1)
        z %= 5;
    return z;
}

static void ref_elem(unsigned char *out, ckpt_dtype dt, uint64_t tid,
                     uint64_t gi)
{
    uint64_t v = ref_bits(tid, gi);
    size_t isz = ckpt_dtype_size(dt);
    if (dt == CKPT_BOOL)
        v &= 1;
    for (size_t b = 0; b < isz; b++)
        out[b] = (unsigned char)(v >> (8 * (b % 8)));
}

size_t t_box_bytes(ckpt_dtype dt, int ndim, const int64_t *size)
{
    size_t n = ckpt_dtype_size(dt);
    for (int d = 0; d < ndim; d++)
        n *= (size_t)size[d];
    return n;
}

/* Calls fn for every element of the box in row-major order with its
 * position in the box and its global linear index. */
typedef void (*elem_fn)(void *arg, uint64_t pos, uint64_t gi);

static void each_elem(int ndim, const int64_t *shape, const int64_t *off,
                      const int64_t *size, elem_fn fn, void *arg)
{
    int64_t idx[CKPT_MAX_DIMS] = { 0 };
    uint64_t stride[CKPT_MAX_DIMS], n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = n;
        n *= (uint64_t)shape[d];
    }
    uint64_t total = 1;
    for (int d = 0; d < ndim; d++)
        total *= (uint64_t)size[d];
    for (uint64_t pos = 0; pos < total; pos++) {
        uint64_t gi = 0;
        for (int d = 0; d < ndim; d++)
            gi += (uint64_t)(off[d] + idx[d]) * stride[d];
        fn(arg, pos, gi);
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < size[d])
                break;
            idx[d] = 0;
        }
    }
}

typedef struct elem_ctx {
    tctx *t;
    unsigned char *buf;
    const unsigned char *cbuf;
    ckpt_dtype dt;
    size_t isz;
    uint64_t tid;
    uint64_t bad;
    const char *what;
} elem_ctx;

static void fill_one(void *arg, uint64_t pos, uint64_t gi)
{
    elem_ctx *c = arg;
    ref_elem(c->buf + pos * c->isz, c->dt, c->tid, gi);
}

void t_fill(void *buf, ckpt_dtype dt, int ndim, const int64_t *shape,
            const int64_t *off, const int64_t *size, uint64_t tid)
{
    elem_ctx c = { .buf = buf, .dt = dt, .isz = ckpt_dtype_size(dt),
                   .tid = tid };
    each_elem(ndim, shape, off, size, fill_one, &c);
}

static void compare_one(void *arg, uint64_t pos, uint64_t gi)
{
    elem_ctx *c = arg;
    unsigned char want[16];
    ref_elem(want, c->dt, c->tid, gi);
    if (memcmp(want, c->cbuf + pos * c->isz, c->isz) == 0)
        return;
    if (c->bad++ == 0)
        t_fail(c->t, __FILE__, __LINE__, "%s: element at global index %llu "
               "(position %llu in the region) differs from the reference",
               c->what, (unsigned long long)gi, (unsigned long long)pos);
}

uint64_t t_compare(tctx *t, const void *buf, ckpt_dtype dt, int ndim,
                   const int64_t *shape, const int64_t *off,
                   const int64_t *size, uint64_t tid, const char *what)
{
    elem_ctx c = { .t = t, .cbuf = buf, .dt = dt,
                   .isz = ckpt_dtype_size(dt), .tid = tid, .what = what };
    each_elem(ndim, shape, off, size, compare_one, &c);
    return c.bad;
}

int t_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}
