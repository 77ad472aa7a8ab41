/*
 * mpi_write_through_mount.c - N MPI ranks save one sharded checkpoint
 * through a ckptfs mount in write mode, with nothing but POSIX calls
 * (mkdir, open, fsetxattr, write, close): no ckptfs library in the ranks.
 *
 *   ckptfs -o rw,world=4 /scratch/ck /mnt/ck          # ROOT on shared storage
 *   mpirun -n 4 ./mpi_write_through_mount /mnt/ck/step-100
 *   mpirun -n 4 ./mpi_write_through_mount /mnt/ck/step-100 /mnt2/ck/step-100
 *                        (one mount per node: rank r writes through
 *                         DIR[r * NDIRS / N], ranks in contiguous blocks)
 *   ./mpi_write_through_mount --check /mnt/ro/step-100    (any mount; any N)
 *
 * Build (from the source tree, or with pkg-config against the installed
 * headers; the ranks need no ckptfs library at all):
 *   mpicc -std=c11 -O2 examples/mpi_write_through_mount.c \
 *       -o mpi_write_through_mount
 *
 * Save: every rank creates its pieces of the tensors below (files named
 * after the FQN, modules as directories), tags each with its dtype, global
 * shape and extent (user.ckpt.dtype/shape/offsets/sizes; a byte object
 * its length as user.ckpt.shape), writes its bytes in order (the write of
 * the last byte records the piece) and closes it.  Then it writes its rank number to
 * DIR/.ckptfs/commit; the write of the last rank returns once the
 * checkpoint is committed.  After a barrier, every rank reads
 * DIR/.ckptfs/status ("committed") and the ranks check the whole
 * checkpoint, tensors dealt out round-robin, through the same mount.
 *
 * Check (--check DIR): only the verification, e.g. on a read-only mount of
 * the root after unmounting the write mount.
 *
 * The tensors (N ranks; rows and columns split as numpy.array_split does):
 *   model.embed.weight              f32  [30, 16]  dim-0 shards, sizes inferred
 *   model.layers.0.attn.proj.weight bf16 [24, 40]  dim-1 shards (sizes given)
 *   model.layers.0.mlp.up.weight    i32  [50, 12]  dim-0 shards (sizes given)
 *   model.pos_embed                 f64  [8, 6]    replicated: every rank
 *   model.norm.weight               bf16 [16]      replicated: every rank
 *   train.step                      i64  scalar    rank 0 (value 100)
 *   train_state                     a byte object  rank 0 (a JSON string)
 * Element i (row-major, global) of tensor number t (1-based, in this order)
 * is ((37 i + 101 t) % 251 - 125) / 64 for floats (exact in bf16: a bf16 is
 * the upper half of the f32) and (37 i + 101 t) % 100003 - 50000 for i32.
 * The checkpoint's metadata gets step=100 (user.ckpt.meta.step).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

enum kind { F32, BF16, I32, F64, I64, BYTES };
enum split { DIM0, DIM0_SIZES, DIM1, REPLICATED, RANK0 };

typedef struct tensor {
    const char *fqn;
    enum kind kind;
    int ndim;
    int64_t shape[2];
    enum split split;
} tensor;

static const tensor TENSORS[] = {
    { "model.embed.weight", F32, 2, { 30, 16 }, DIM0 },
    { "model.layers.0.attn.proj.weight", BF16, 2, { 24, 40 }, DIM1 },
    { "model.layers.0.mlp.up.weight", I32, 2, { 50, 12 }, DIM0_SIZES },
    { "model.pos_embed", F64, 2, { 8, 6 }, REPLICATED },
    { "model.norm.weight", BF16, 1, { 16 }, REPLICATED },
    { "train.step", I64, 0, { 0 }, RANK0 },
    { "train_state", BYTES, 1, { 0 }, RANK0 },
};
#define NTENSORS (sizeof TENSORS / sizeof TENSORS[0])

static const char TRAIN_STATE[] = "{\"step\": 100, \"lr\": 0.0003, \"seed\": 42}";
static const char *const DTYPE[] = { "f32", "bf16", "i32", "f64", "i64",
                                     "bytes" };
static const size_t ITEMSIZE[] = { 4, 2, 4, 8, 8, 1 };

static int g_rank;

/* Prints "rank R: ..." to stderr; returns 1 (a failure to count). */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "mpi_write_through_mount: rank %d: %s\n", g_rank, msg);
    return 1;
}

/* ------------------------------------------------------------ the data */

static float float_value(int t, uint64_t i)
{
    return (float)((int)((37 * i + 101 * (uint64_t)t) % 251) - 125) / 64.0f;
}

/* Fills buf with elements [first, first + n) of tensor number t (1-based)
 * as their little-endian bytes (the machines MPI runs on are). */
static void fill_run(const tensor *tn, int t, uint64_t first, uint64_t n,
                     unsigned char *buf)
{
    for (uint64_t k = 0; k < n; k++) {
        uint64_t i = first + k;
        float f = float_value(t, i);
        uint32_t u;
        switch (tn->kind) {
        case F32:
            memcpy(buf + 4 * k, &f, 4);
            break;
        case BF16:
            memcpy(&u, &f, 4);
            ((uint16_t *)buf)[k] = (uint16_t)(u >> 16);
            break;
        case F64: {
            double d = f;
            memcpy(buf + 8 * k, &d, 8);
            break;
        }
        case I32: {
            int32_t v = (int32_t)((37 * i + 101 * (uint64_t)t) % 100003) - 50000;
            memcpy(buf + 4 * k, &v, 4);
            break;
        }
        case I64: {
            int64_t v = 100;
            memcpy(buf + 8 * k, &v, 8);
            break;
        }
        case BYTES:
            break;
        }
    }
}

/* The bytes of the piece [off, off + sz) of tensor t: rows of a 2-D piece
 * are runs of the global row-major order. */
static unsigned char *piece_bytes(const tensor *tn, int t, const int64_t *off,
                                  const int64_t *sz, size_t *len)
{
    if (tn->kind == BYTES) {
        *len = sizeof TRAIN_STATE - 1;
        unsigned char *b = malloc(*len);
        if (b)
            memcpy(b, TRAIN_STATE, *len);
        return b;
    }
    uint64_t rows = tn->ndim == 2 ? (uint64_t)sz[0] : 1;
    uint64_t cols = tn->ndim == 2 ? (uint64_t)sz[1]
                    : tn->ndim == 1 ? (uint64_t)sz[0] : 1;
    *len = rows * cols * ITEMSIZE[tn->kind];
    unsigned char *b = malloc(*len ? *len : 1);
    if (!b)
        return NULL;
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t first = tn->ndim == 2
            ? (uint64_t)(off[0] + (int64_t)r) * (uint64_t)tn->shape[1] +
                  (uint64_t)off[1]
            : tn->ndim == 1 ? (uint64_t)off[0] : 0;
        fill_run(tn, t, first, cols, b + r * cols * ITEMSIZE[tn->kind]);
    }
    return b;
}

/* [*lo, *lo + *n) of `len` for rank r of k, as numpy.array_split cuts. */
static void split_range(int64_t len, int r, int k, int64_t *lo, int64_t *n)
{
    int64_t base = len / k, extra = len % k;
    *lo = r * base + (r < extra ? r : extra);
    *n = base + (r < extra ? 1 : 0);
}

/* ------------------------------------------------------------ paths */

/* DIR/a/b/c for FQN a.b.c (FQNs here need no escaping, see docs/MOUNT.md). */
static void fqn_path(char *out, size_t cap, const char *dir, const char *fqn)
{
    snprintf(out, cap, "%s/%s", dir, fqn);
    for (char *p = out + strlen(dir) + 1; *p; p++)
        if (*p == '.')
            *p = '/';
}

/* mkdir -p of the directories above `path` (below `dir`, which exists);
 * other ranks may be creating the same ones at the same time. */
static int make_parents(const char *dir, const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + strlen(dir) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return fail("mkdir %s: %s", buf, strerror(errno));
        *p = '/';
    }
    return 0;
}

/* ------------------------------------------------------------ save */

static int set_attr(int fd, const char *path, const char *name,
                    const char *value)
{
    if (fsetxattr(fd, name, value, strlen(value), 0) != 0)
        return fail("setxattr %s=\"%s\" on %s: %s", name, value, path,
                    strerror(errno));
    return 0;
}

static int write_all(int fd, const char *path, const unsigned char *p,
                     size_t len)
{
    while (len > 0) {
        /* pieces stream through the mount: any write size works */
        ssize_t k = write(fd, p, len < (1u << 20) ? len : (1u << 20));
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return fail("write %s: %s", path, strerror(errno));
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Writes one piece as one file: create, tag, write, close.  Its extent is
 * known before its first byte, so a writer killed midway records nothing
 * (docs/MOUNT.md, "When a piece ends"). */
static int write_piece(const char *dir, const tensor *tn, int t,
                       const int64_t *off, const int64_t *sz)
{
    char path[4096], val[64];
    fqn_path(path, sizeof path, dir, tn->fqn);
    if (make_parents(dir, path))
        return 1;
    size_t len;
    unsigned char *data = piece_bytes(tn, t, off, sz, &len);
    if (!data)
        return fail("out of memory");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644), bad = 0;
    if (fd < 0) {
        free(data);
        return fail("create %s: %s", path, strerror(errno));
    }
    if (tn->kind == BYTES) {      /* no dtype: a byte object of its length */
        snprintf(val, sizeof val, "%zu", len);
        bad = set_attr(fd, path, "user.ckpt.shape", val);
    } else {
        const int64_t *dims[3] = { tn->shape, off, sz };
        const char *names[3] = { "user.ckpt.shape", "user.ckpt.offsets",
                                 "user.ckpt.sizes" };
        bad = set_attr(fd, path, "user.ckpt.dtype", DTYPE[tn->kind]);
        for (int a = 0; a < 3 && !bad; a++) {
            val[0] = '\0';        /* "" for a scalar */
            for (int d = 0; d < tn->ndim; d++)
                snprintf(val + strlen(val), sizeof val - strlen(val), "%s%lld",
                         d ? "," : "", (long long)dims[a][d]);
            bad = set_attr(fd, path, names[a], val);
        }
    }
    if (!bad)
        bad = write_all(fd, path, data, len);
    if (close(fd) != 0 && !bad)
        bad = fail("close %s (the piece was refused): %s", path,
                   strerror(errno));
    free(data);
    return bad;
}

/* This rank's pieces of every tensor. */
static int write_pieces(const char *dir, int r, int k)
{
    for (size_t t = 0; t < NTENSORS; t++) {
        const tensor *tn = &TENSORS[t];
        int64_t off[2] = { 0, 0 }, sz[2] = { tn->shape[0], tn->shape[1] };
        switch (tn->split) {
        case DIM0:
        case DIM0_SIZES:
            split_range(tn->shape[0], r, k, &off[0], &sz[0]);
            break;
        case DIM1:
            split_range(tn->shape[1], r, k, &off[1], &sz[1]);
            break;
        case REPLICATED:
            break;
        case RANK0:
            if (r != 0)
                continue;
            break;
        }
        if (tn->ndim == 2 && (sz[0] == 0 || sz[1] == 0))
            continue;             /* more ranks than rows: nothing here */
        if (write_piece(dir, tn, (int)t + 1, off, sz))
            return 1;
    }
    return 0;
}

/* Reads a small control file (.ckptfs/status) into buf, without the
 * trailing newline. */
static int read_text(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return fail("open %s: %s", path, strerror(errno));
    ssize_t n = read(fd, buf, cap - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return fail("read %s: %s", path, strerror(e));
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* "I am done": writes the rank number to DIR/.ckptfs/commit.  For the rank
 * that completes the set, the write returns after the commit, or fails. */
static int commit_rank(const char *dir, int r)
{
    char path[4096], txt[32], status[512];
    snprintf(path, sizeof path, "%s/.ckptfs/commit", dir);
    int n = snprintf(txt, sizeof txt, "%d\n", r), bad = 0;
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return fail("open %s: %s", path, strerror(errno));
    ssize_t k = write(fd, txt, (size_t)n);
    if (k != n) {
        int e = k < 0 ? errno : EIO;
        snprintf(path, sizeof path, "%s/.ckptfs/status", dir);
        if (read_text(path, status, sizeof status))
            snprintf(status, sizeof status, "(unreadable)");
        bad = fail("commit: writing %d to .ckptfs/commit: %s; status: %s", r,
                   strerror(e), status);
    }
    if (close(fd) != 0 && !bad)
        bad = fail("commit: close .ckptfs/commit: %s", strerror(errno));
    return bad;
}

static int save(const char *dir, int r, int k)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)   /* every rank may */
        return fail("mkdir %s: %s", dir, strerror(errno));
    if (r == 0 && setxattr(dir, "user.ckpt.meta.step", "100", 3, 0) != 0)
        return fail("setxattr user.ckpt.meta.step on %s: %s", dir,
                    strerror(errno));
    return write_pieces(dir, r, k);
}

/* ------------------------------------------------------------ check */

static int check_attr(const char *path, const char *name, const char *want)
{
    char got[256];
    ssize_t n = getxattr(path, name, got, sizeof got - 1);
    if (n < 0)
        return fail("getxattr %s %s: %s", path, name, strerror(errno));
    got[n] = '\0';
    if (strcmp(got, want) != 0)
        return fail("%s: %s is \"%s\", want \"%s\"", path, name, got, want);
    return 0;
}

/* Reads tensor t's file whole and compares it with the regenerated bytes. */
static int check_tensor(const char *dir, size_t t)
{
    const tensor *tn = &TENSORS[t];
    char path[4096], shape[64] = "";
    int64_t off[2] = { 0, 0 };
    size_t len;
    fqn_path(path, sizeof path, dir, tn->fqn);
    unsigned char *want = piece_bytes(tn, (int)t + 1, off, tn->shape, &len);
    unsigned char *got = malloc(len + 1);
    if (!want || !got) {
        free(want);
        free(got);
        return fail("out of memory");
    }
    int bad = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        bad = fail("open %s: %s", path, strerror(errno));
    } else {
        size_t n = 0;
        ssize_t k;
        /* one byte more than expected: a longer file shows */
        while (n < len + 1 && (k = read(fd, got + n, len + 1 - n)) != 0) {
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                bad = fail("read %s: %s", path, strerror(errno));
                break;
            }
            n += (size_t)k;
        }
        close(fd);
        if (!bad && n != len)
            bad = fail("%s: %zu bytes, want %zu", path, n, len);
        for (size_t i = 0; !bad && i < len; i++)
            if (got[i] != want[i])
                bad = fail("%s: byte %zu is 0x%02x, want 0x%02x (element "
                           "%zu)", path, i, got[i], want[i],
                           i / ITEMSIZE[tn->kind]);
    }
    for (int d = 0; d < tn->ndim && tn->kind != BYTES; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape),
                 "%s%lld", d ? "," : "", (long long)tn->shape[d]);
    if (tn->kind == BYTES)
        snprintf(shape, sizeof shape, "%zu", len);
    if (!bad)
        bad = check_attr(path, "user.ckpt.dtype", DTYPE[tn->kind]) ||
              check_attr(path, "user.ckpt.shape", shape);
    free(want);
    free(got);
    return bad;
}

/* Tensors dealt out round-robin over the ranks. */
static int check_all(const char *dir, int r, int k)
{
    int bad = 0;
    for (size_t t = (size_t)r; t < NTENSORS; t += (size_t)k)
        bad |= check_tensor(dir, t);
    return bad;
}

/* ------------------------------------------------------------ main */

static int any_rank(int bad)
{
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

static int save_commit_check(const char *dir, int r, int k)
{
    /* a rank that failed keeps every rank from committing */
    if (any_rank(save(dir, r, k)))
        return 1;
    int bad = commit_rank(dir, r);
    MPI_Barrier(MPI_COMM_WORLD);  /* every commit write has returned */
    char path[4096], status[512];
    snprintf(path, sizeof path, "%s/.ckptfs/status", dir);
    if (!bad && !(bad = read_text(path, status, sizeof status)) &&
        strcmp(status, "committed") != 0)
        bad = fail("%s reads \"%s\", want \"committed\"", path, status);
    if (any_rank(bad))
        return 1;
    if (any_rank(check_all(dir, r, k)))
        return 1;
    if (r == 0)
        printf("%d ranks saved %zu tensors through the mount into %s, "
               "committed and read back: every byte as written\n", k,
               NTENSORS, dir);
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, k, rc;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &k);
    g_rank = r;
    if (argc == 3 && strcmp(argv[1], "--check") == 0) {
        rc = any_rank(check_all(argv[2], r, k));
        if (rc == 0 && r == 0)
            printf("%s: all %zu tensors hold the expected bytes\n", argv[2],
                   NTENSORS);
    } else if (argc >= 2 && argv[1][0] != '-') {
        /* rank r writes through DIR[r * NDIRS / N]: one mount per node */
        int ndirs = argc - 1;
        rc = save_commit_check(argv[1 + (int)((long)r * ndirs / k)], r, k);
    } else {
        if (r == 0)
            fprintf(stderr, "usage: %s DIR [DIR...]     (save, commit, check)\n"
                            "       %s --check DIR      (check only)\n",
                    argv[0], argv[0]);
        rc = 2;
    }
    MPI_Finalize();
    return rc;
}
