/*
 * test_mpi_delta.c - collective saves against a base (ckpt_mpi_save and
 * ckpt_mpi_save_async with opts.write.base; docs/FORMAT.md, "Delta
 * checkpoints"), under mpirun: a chain s0 <- s1 <- s2 saved by every rank
 * (rows of a matrix split among the ranks, a replicated vector, a tensor
 * that changes whole each time, one that never changes), then s3 against
 * s2 by one rank alone (other chunks than its base's).  Each checkpoint is
 * read back on every rank, whole and by the collective load, and compared
 * bit for bit with the state the test made from its reference values; the
 * tensors that did not change must be all references (nothing stored),
 * the matrix partly references.
 *
 * usage: test_mpi_delta ROOT   (an empty directory shared by the ranks)
 */
#include <stdlib.h>
#include <string.h>

#include "mpi_test.h"

#define COLS 512                  /* f32: 2 KiB rows, 2 rows a frame */
#define ROWS 96
#define FROZEN_ROWS 64
#define FROZEN_COLS 256
#define REP_LEN 300
#define FRESH 32
#define FRAME 4096

static const int64_t W_SHAPE[2] = { ROWS, COLS };
static const int64_t FROZEN_SHAPE[2] = { FROZEN_ROWS, FROZEN_COLS };
static const int64_t REP_SHAPE[1] = { REP_LEN };
static const int64_t FRESH_SHAPE[2] = { FRESH, FRESH };
static const int64_t ZERO[2] = { 0, 0 };

/* Rows [off[0], +size[0]) of "w" as saved in version v: the reference
 * values, with the low byte of every element of rows 3 mod 8 flipped from
 * version 1 on, and of rows 5 mod 8 from version 2 on (a few rows trained
 * between saves). */
static void fill_w(void *buf, const int64_t *off, const int64_t *size,
                   int v)
{
    t_fill(buf, CKPT_F32, 2, W_SHAPE, off, size, t_fqn_id("w"));
    unsigned char *b = buf;
    for (int64_t r = 0; r < size[0]; r++) {
        int64_t row = off[0] + r;
        unsigned char flip = (unsigned char)((v >= 1 && row % 8 == 3) |
                                             (v >= 2 && row % 8 == 5) << 1);
        for (int64_t c = 0; flip && c < size[1]; c++)
            b[(r * size[1] + c) * 4] ^= flip;
    }
}

/* "fresh" changes whole in every version. */
static uint64_t fresh_id(int v)
{
    return t_fqn_id("fresh") + (uint64_t)v;
}

/* This rank's pieces of version v, and their buffers. */
typedef struct model {
    ckpt_piece p[4];
    void *buf[4];
    int64_t w_off[2], w_size[2], f_off[2], f_size[2];
    size_t n;
} model;

static void model_make(model *m, int v, int rank, int size)
{
    memset(m, 0, sizeof *m);
    int64_t lo, len;
    t_split(ROWS, size, rank, &lo, &len);
    m->w_off[0] = lo;
    m->w_size[0] = len;
    m->w_size[1] = COLS;
    m->buf[0] = malloc(t_box_bytes(CKPT_F32, 2, m->w_size) + 1);
    fill_w(m->buf[0], m->w_off, m->w_size, v);
    m->p[0] = (ckpt_piece){ "w", CKPT_F32, 2, W_SHAPE, m->w_off, m->w_size,
                            m->buf[0] };
    t_split(FROZEN_ROWS, size, rank, &lo, &len);
    m->f_off[0] = lo;
    m->f_size[0] = len;
    m->f_size[1] = FROZEN_COLS;
    m->buf[1] = malloc(t_box_bytes(CKPT_BF16, 2, m->f_size) + 1);
    t_fill(m->buf[1], CKPT_BF16, 2, FROZEN_SHAPE, m->f_off, m->f_size,
           t_fqn_id("frozen"));
    m->p[1] = (ckpt_piece){ "frozen", CKPT_BF16, 2, FROZEN_SHAPE, m->f_off,
                            m->f_size, m->buf[1] };
    /* every rank passes the vector: replicas, written once */
    m->buf[2] = malloc(REP_LEN * 8);
    t_fill(m->buf[2], CKPT_I64, 1, REP_SHAPE, ZERO, REP_SHAPE,
           t_fqn_id("rep"));
    m->p[2] = (ckpt_piece){ "rep", CKPT_I64, 1, REP_SHAPE, NULL, NULL,
                            m->buf[2] };
    m->n = 3;
    if (rank == 0) {
        m->buf[3] = malloc(FRESH * FRESH * 4);
        t_fill(m->buf[3], CKPT_F32, 2, FRESH_SHAPE, ZERO, FRESH_SHAPE,
               fresh_id(v));
        m->p[3] = (ckpt_piece){ "fresh", CKPT_F32, 2, FRESH_SHAPE, NULL,
                                NULL, m->buf[3] };
        m->n = 4;
    }
}

static void model_free(model *m)
{
    for (int i = 0; i < 4; i++)
        free(m->buf[i]);
}

static void path_of(char *buf, size_t cap, const char *root, int v)
{
    snprintf(buf, cap, "%s/s%d", root, v);
}

static ckpt_mpi_save_opts save_opts(const char *base)
{
    ckpt_mpi_save_opts o;
    ckpt_mpi_save_opts_init(&o);
    o.write.frame_size = FRAME;
    o.write.threads = 2;
    o.write.sync = 0;
    o.write.base = base;
    return o;
}

/* Version v saved on comm (synchronously, or asynchronously through a
 * saver), against version v - 1 when v > 0. */
static void save_version(tctx *t, MPI_Comm comm, const char *root, int v,
                         int async)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    char dir[4096], base[4096];
    path_of(dir, sizeof dir, root, v);
    path_of(base, sizeof base, root, v - 1);
    model m;
    model_make(&m, v, rank, size);
    ckpt_mpi_save_opts o = save_opts(v ? base : NULL);
    ckpt_error e = { 0 };
    int rc;
    if (async) {
        ckpt_saver *sv = NULL;
        ckpt_mpi_async *h = NULL;
        rc = ckpt_saver_create(&sv, NULL, &e);
        if (rc == 0)
            rc = ckpt_mpi_save_async(comm, dir, m.p, m.n, &o, sv, &h, &e);
        model_free(&m);    /* the pieces are staged: the buffers may go */
        if (rc == 0)
            rc = ckpt_mpi_save_wait(h, &e);
        ckpt_saver_destroy(sv);
    } else {
        rc = ckpt_mpi_save(comm, dir, m.p, m.n, &o, &e);
        model_free(&m);
    }
    T_CHECKF(t, rc == 0, "save s%d on %d rank(s)%s: %s", v, size,
             async ? " (async)" : "", e.msg);
    t_same_status(t, comm, rc, &e);
}

/* Reads tensor fqn of r whole and compares it with want (n bytes). */
static void same_tensor(tctx *t, ckpt_reader *r, const char *fqn,
                        const void *want, size_t n, const char *what)
{
    ckpt_error e = { 0 };
    long idx = ckpt_reader_find(r, fqn);
    T_CHECKF(t, idx >= 0, "%s: no tensor %s", what, fqn);
    if (idx < 0)
        return;
    unsigned char *got = malloc(n);
    int64_t rd = ckpt_read(r, (size_t)idx, got, 0, n, &e);
    T_CHECKF(t, rd == (int64_t)n, "%s: read %s: %s", what, fqn, e.msg);
    T_CHECKF(t, rd != (int64_t)n || memcmp(got, want, n) == 0,
             "%s: %s reads back other bytes than were saved", what, fqn);
    free(got);
}

/* Codecs and stored bytes of tensor fqn. */
static ckpt_tensor_info info_of(ckpt_reader *r, const char *fqn)
{
    ckpt_tensor_info ti;
    memset(&ti, 0, sizeof ti);
    long idx = ckpt_reader_find(r, fqn);
    if (idx >= 0)
        ckpt_reader_info(r, (size_t)idx, &ti);
    return ti;
}

static int has_codec(const ckpt_tensor_info *ti, const char *name)
{
    return ti->codecs && strstr(ti->codecs, name) != NULL;
}

/* Every tensor of version v, read whole on this rank through a reader
 * (which resolves the references into the bases). */
static void check_whole(tctx *t, const char *root, int v)
{
    char dir[4096], what[64];
    path_of(dir, sizeof dir, root, v);
    snprintf(what, sizeof what, "s%d", v);
    ckpt_reader *r;
    ckpt_error e = { 0 };
    int rc = ckpt_reader_open(&r, dir, NULL, &e);
    T_CHECKF(t, rc == 0, "%s: open: %s", what, e.msg);
    if (rc)
        return;
    size_t nw = t_box_bytes(CKPT_F32, 2, W_SHAPE);
    size_t nf = t_box_bytes(CKPT_BF16, 2, FROZEN_SHAPE);
    unsigned char *w = malloc(nw), *f = malloc(nf), *rep = malloc(REP_LEN * 8);
    unsigned char *fresh = malloc(FRESH * FRESH * 4);
    fill_w(w, ZERO, W_SHAPE, v);
    t_fill(f, CKPT_BF16, 2, FROZEN_SHAPE, ZERO, FROZEN_SHAPE,
           t_fqn_id("frozen"));
    t_fill(rep, CKPT_I64, 1, REP_SHAPE, ZERO, REP_SHAPE, t_fqn_id("rep"));
    t_fill(fresh, CKPT_F32, 2, FRESH_SHAPE, ZERO, FRESH_SHAPE, fresh_id(v));
    same_tensor(t, r, "w", w, nw, what);
    same_tensor(t, r, "frozen", f, nf, what);
    same_tensor(t, r, "rep", rep, REP_LEN * 8, what);
    same_tensor(t, r, "fresh", fresh, FRESH * FRESH * 4, what);
    T_CHECKF(t, ckpt_verify(r, NULL, NULL, NULL, &e) == 0, "%s: verify: %s",
             what, e.msg);
    free(w);
    free(f);
    free(rep);
    free(fresh);
    ckpt_reader_close(r);
}

/* The rows of "w" of this rank in version v, by the collective load. */
static void check_load(tctx *t, const char *root, int v)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, v);
    int64_t lo, len;
    t_split(ROWS, t->size, t->size - 1 - t->rank, &lo, &len);  /* others' */
    int64_t off[2] = { lo, 0 }, size[2] = { len, COLS };
    size_t n = t_box_bytes(CKPT_F32, 2, size);
    unsigned char *got = malloc(n + 1), *want = malloc(n + 1);
    fill_w(want, off, size, v);
    ckpt_mpi_region rg = { "w", off, size, got };
    ckpt_mpi_load_opts o;
    ckpt_mpi_load_opts_init(&o);
    ckpt_error e = { 0 };
    int rc = ckpt_mpi_load(t->world, dir, &rg, 1, &o, NULL, &e);
    T_CHECKF(t, rc == 0, "s%d: collective load: %s", v, e.msg);
    T_CHECKF(t, rc || memcmp(got, want, n) == 0, "s%d: the collective load "
             "of rows %lld+%lld differs from what was saved", v,
             (long long)lo, (long long)len);
    free(got);
    free(want);
}

/* On rank 0: which frames of version v are references.  The unchanged
 * tensors store nothing; the matrix is part references, part not. */
static void check_refs(tctx *t, const char *root, int v)
{
    if (t->rank != 0)
        return;
    char dir[4096];
    path_of(dir, sizeof dir, root, v);
    ckpt_reader *r;
    ckpt_error e = { 0 };
    if (ckpt_reader_open(&r, dir, NULL, &e) != 0)
        return;            /* check_whole reported it */
    ckpt_tensor_info ti = info_of(r, "frozen");
    T_CHECKF(t, ti.codecs && strcmp(ti.codecs, "ref") == 0 &&
             ti.stored_bytes == 0, "s%d: frozen should be all references, "
             "is %s (%llu bytes stored)", v, ti.codecs ? ti.codecs : "?",
             (unsigned long long)ti.stored_bytes);
    ti = info_of(r, "rep");
    T_CHECKF(t, ti.codecs && strcmp(ti.codecs, "ref") == 0, "s%d: rep "
             "should be all references, is %s", v, ti.codecs ? ti.codecs
                                                             : "?");
    ti = info_of(r, "w");
    T_CHECKF(t, has_codec(&ti, "ref") && strcmp(ti.codecs, "ref") != 0,
             "s%d: w should be part references, is %s", v,
             ti.codecs ? ti.codecs : "?");
    ti = info_of(r, "fresh");
    T_CHECKF(t, !has_codec(&ti, "ref"), "s%d: fresh changed whole, yet "
             "its frames are %s", v, ti.codecs ? ti.codecs : "?");
    ckpt_reader_close(r);
}

int main(int argc, char **argv)
{
    tctx t;
    t_init(&t, &argc, &argv);
    if (argc < 2) {
        if (t.rank == 0)
            fprintf(stderr, "usage: %s ROOT\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *root = argv[1];
    save_version(&t, t.world, root, 0, 0);
    save_version(&t, t.world, root, 1, 0);      /* against s0 */
    save_version(&t, t.world, root, 2, 1);      /* against s1, async */
    /* s3 against s2 by rank 0 alone: its chunks of "w" and "frozen" are
     * not its base's (no references there), the rest are */
    MPI_Comm one;
    MPI_Comm_split(t.world, t.rank == 0 ? 0 : MPI_UNDEFINED, 0, &one);
    if (one != MPI_COMM_NULL) {
        save_version(&t, one, root, 3, 0);
        MPI_Comm_free(&one);
    }
    MPI_Barrier(t.world);
    for (int v = 0; v <= 3; v++) {
        check_whole(&t, root, v);
        check_load(&t, root, v);
    }
    check_refs(&t, root, 1);
    check_refs(&t, root, 2);
    return t_finish(&t, "test_mpi_delta");
}
