/*
 * test_mpi_errors.c - failures of the collective save and load.
 *
 *   test_mpi_errors ROOT [TMPFS_DIR]
 *
 * Run on 2 or more ranks.  A good checkpoint ROOT/step-1 is saved first;
 * then saves that must fail: a bad piece on one rank, a piece whose data
 * pointer is NULL on one rank (planning passes, writing fails), planner
 * refusals (dtype, overlap, a hole), a committed and an unfinished target,
 * ranks naming different directories, a reserved metadata key, and (when
 * TMPFS_DIR, a small tmpfs, is given) ENOSPC.  After each, every rank must
 * hold the same negative code and message, naming the failing rank and
 * the cause; no index.db may exist; the files the save made are gone; and
 * step-1 must still read back exactly.  Loads that must fail: a missing
 * tensor and an out-of-bounds region on one rank, an uncommitted
 * directory, a missing byte object.  Options structs of a wrong size
 * (newer header, never initialised), saves and loads.  Also: a save where
 * all ranks pass nothing, and one where only the last rank has pieces.
 */
#include "mpi_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckptfs.h"

#define ROWS 24
#define COLS 10

/* The good model: "w" f32 [ROWS, COLS] dim-0 sharded, "b" f32 [COLS]
 * replicated. */
typedef struct model {
    int64_t wshape[2], bshape[1];
    int64_t off[2], size[2];
    float *w, *b;
    ckpt_piece p[2];
} model;

static void model_init(model *m, const tctx *t)
{
    m->wshape[0] = ROWS;
    m->wshape[1] = COLS;
    m->bshape[0] = COLS;
    t_split(ROWS, t->size, t->rank, &m->off[0], &m->size[0]);
    m->off[1] = 0;
    m->size[1] = COLS;
    m->w = malloc(sizeof(float) * (size_t)(m->size[0] * COLS + 1));
    m->b = malloc(sizeof(float) * COLS);
    t_fill(m->w, CKPT_F32, 2, m->wshape, m->off, m->size, t_fqn_id("w"));
    t_fill(m->b, CKPT_F32, 1, m->bshape, (int64_t[]){ 0 }, m->bshape,
           t_fqn_id("b"));
    m->p[0] = (ckpt_piece){ "w", CKPT_F32, 2, m->wshape, m->off, m->size,
                            m->w };
    m->p[1] = (ckpt_piece){ "b", CKPT_F32, 1, m->bshape, NULL, NULL, m->b };
}

static void model_free(model *m)
{
    free(m->w);
    free(m->b);
}

static ckpt_mpi_save_opts save_opts(void)
{
    ckpt_mpi_save_opts o;
    ckpt_mpi_save_opts_init(&o);
    o.write.threads = 1;
    o.write.frame_size = 4096;
    return o;
}

static void path_of(char *buf, size_t cap, const char *root, const char *n)
{
    snprintf(buf, cap, "%s/%s", root, n);
}

/* step-1 (or any copy of the good model) reads back exactly on all ranks,
 * in another layout (the whole of w on every rank). */
static void check_good(tctx *t, const char *dir, const char *when)
{
    float *w = malloc(sizeof(float) * ROWS * COLS), b[COLS];
    int64_t wshape[2] = { ROWS, COLS }, bshape[1] = { COLS };
    int64_t zero[2] = { 0, 0 };
    ckpt_mpi_region g[2] = { { "w", NULL, NULL, w }, { "b", NULL, NULL, b } };
    ckpt_error e = { 0 };
    int rc = ckpt_mpi_load(t->world, dir, g, 2, NULL, NULL, &e);
    T_CHECKF(t, rc == 0, "%s: %s does not load: %s", when, dir, e.msg);
    if (rc == 0) {
        t_compare(t, w, CKPT_F32, 2, wshape, zero, wshape, t_fqn_id("w"),
                  when);
        t_compare(t, b, CKPT_F32, 1, bshape, zero, bshape, t_fqn_id("b"),
                  when);
    }
    free(w);
}

static int save_model(tctx *t, const char *dir, const ckpt_piece *p,
                      size_t n, const ckpt_mpi_save_opts *o, ckpt_error *e)
{
    memset(e, 0, sizeof *e);
    return ckpt_mpi_save(t->world, dir, p, n, o, e);
}

/* 1 when msg holds one of the '|'-separated words of `any`. */
static int has_any(const char *msg, const char *any)
{
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", any);
    for (char *w = strtok_r(buf, "|", &save); w;
         w = strtok_r(NULL, "|", &save))
        if (strstr(msg, w))
            return 1;
    return 0;
}

/* A save that must fail with `code` and a message holding `needle` (and
 * one of the '|'-separated `needle2` when not NULL) on every rank, leaving
 * no index.db and, when `gone`, no directory. */
static void expect_failed_save(tctx *t, const char *what, int rc,
                               const ckpt_error *e, int code,
                               const char *needle, const char *needle2,
                               const char *dir, int gone)
{
    char idx[4200];
    T_CHECKF(t, rc == code, "%s: rc %d (%s), want %d", what, rc, e->msg,
             code);
    T_CHECKF(t, rc == e->code, "%s: rc %d but err.code %d", what, rc,
             e->code);
    t_same_status(t, t->world, rc, e);
    T_CHECKF(t, strstr(e->msg, needle), "%s: message '%s' lacks '%s'", what,
             e->msg, needle);
    T_CHECKF(t, !needle2 || has_any(e->msg, needle2), "%s: message '%s' "
             "lacks '%s'", what, e->msg, needle2);
    MPI_Barrier(t->world);
    path_of(idx, sizeof idx, dir, "index.db");
    T_CHECKF(t, !t_exists(idx), "%s: %s exists", what, idx);
    T_CHECKF(t, !gone || !t_exists(dir), "%s: %s was left behind", what,
             dir);
    if (t->rank == 0)
        printf("  %-34s -> %s\n", what, e->msg);
}

/* ------------------------------------------------------------ saves */

static void bad_piece(tctx *t, const char *root, model *m)
{
    char dir[4096], who[32];
    int bad = t->size - 1;
    path_of(dir, sizeof dir, root, "step-2");
    model mm = *m;
    int64_t off[2] = { m->off[0], 3 };   /* columns 3..COLS+3: outside */
    if (t->rank == bad)
        mm.p[0].offsets = off;
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, mm.p, 2, &o, &e);
    snprintf(who, sizeof who, "rank %d: tensor 'w'", bad);
    expect_failed_save(t, "bad piece", rc, &e, -EINVAL, who, "outside", dir,
                       1);
}

static void null_data(tctx *t, const char *root, model *m)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, "step-2");
    model mm = *m;
    if (t->rank == 1)
        mm.p[0].data = NULL;   /* its rows of w must be written by it */
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, mm.p, 2, &o, &e);
    expect_failed_save(t, "write failure (NULL data)", rc, &e, -EINVAL,
                       "rank 1: tensor 'w'", "no data", dir, 1);
}

static void dtype_mismatch(tctx *t, const char *root, model *m)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, "step-2");
    model mm = *m;
    if (t->rank == 1)
        mm.p[1].dtype = CKPT_I32;   /* same size, different dtype */
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, mm.p, 2, &o, &e);
    expect_failed_save(t, "dtype mismatch", rc, &e, -EINVAL, "tensor 'b'",
                       "writer rank1", dir, 1);
}

static void overlap(tctx *t, const char *root, model *m)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, "step-2");
    model mm = *m;
    int64_t size[2] = { m->size[0] + 1, COLS };
    if (t->rank == 0)
        mm.p[0].sizes = size;   /* one row into rank 1's */
    float *w = malloc(sizeof(float) * (size_t)(size[0] * COLS));
    memset(w, 0, sizeof(float) * (size_t)(size[0] * COLS));
    if (t->rank == 0)
        mm.p[0].data = w;
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, mm.p, 2, &o, &e);
    expect_failed_save(t, "overlapping pieces", rc, &e, -EINVAL,
                       "partly overlap", "writer rank0", dir, 1);
    free(w);
}

static void hole(tctx *t, const char *root, model *m)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, "step-2");
    /* The last rank forgets its rows of w. */
    size_t n = t->rank == t->size - 1 ? 1 : 2;
    const ckpt_piece *p = t->rank == t->size - 1 ? &m->p[1] : m->p;
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, p, n, &o, &e);
    expect_failed_save(t, "a hole in a tensor", rc, &e, -EINVAL,
                       "tensor 'w'", "not covered", dir, 1);
}

/* The last rank's copy of the replicated b differs in one element: refused
 * before anything is written, naming b and the two writers. */
static void replicas_differ(tctx *t, const char *root, model *m)
{
    char dir[4096], who[32];
    path_of(dir, sizeof dir, root, "step-2");
    model mm = *m;
    float *b = malloc(sizeof(float) * COLS);
    memcpy(b, m->b, sizeof(float) * COLS);
    ((unsigned char *)b)[2 * COLS] ^= 1;    /* one bit of one element */
    if (t->rank == t->size - 1)
        mm.p[1].data = b;
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, mm.p, 2, &o, &e);
    snprintf(who, sizeof who, "writer rank%d", t->size - 1);
    expect_failed_save(t, "replicas with different bytes", rc, &e, -EINVAL,
                       "tensor 'b': replicas", who, dir, 1);
    T_CHECKF(t, strstr(e.msg, "different bytes"), "message: %s", e.msg);
    free(b);
}

static void committed_target(tctx *t, const char *root, model *m)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, "step-1");
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, m->p, 2, &o, &e);
    T_CHECKF(t, rc == -EEXIST, "save into committed: rc %d (%s)", rc, e.msg);
    t_same_status(t, t->world, rc, &e);
    T_CHECKF(t, strstr(e.msg, "already a committed"), "'%s'", e.msg);
    if (t->rank == 0)
        printf("  %-34s -> %s\n", "committed target", e.msg);
}

static void unfinished_target(tctx *t, const char *root, model *m)
{
    char dir[4096], data[4200];
    path_of(dir, sizeof dir, root, "step-3");
    path_of(data, sizeof data, dir, "data");
    if (t->rank == 0) {
        mkdir(dir, 0755);
        mkdir(data, 0755);
    }
    MPI_Barrier(t->world);
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, m->p, 2, &o, &e);
    expect_failed_save(t, "unfinished target", rc, &e, -EBUSY,
                       "unfinished save", NULL, dir, 0);
    T_CHECKF(t, t_exists(data), "the save removed a directory it did not "
             "make: %s", data);
}

static void other_dir(tctx *t, const char *root, model *m)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, t->rank == 1 ? "step-x" : "step-2");
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir, m->p, 2, &o, &e);
    path_of(dir, sizeof dir, root, "step-2");
    expect_failed_save(t, "ranks name different dirs", rc, &e, -EINVAL,
                       "rank 1: checkpoint directory", "differs", dir, 1);
}

static void reserved_meta(tctx *t, const char *root, model *m)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, "step-2");
    ckpt_mpi_save_opts o = save_opts();
    const char *k[] = { "world_size" }, *v[] = { "7" };
    o.meta_keys = k;
    o.meta_values = v;
    o.nmeta = 1;
    ckpt_error e;
    int rc = save_model(t, dir, m->p, 2, &o, &e);
    expect_failed_save(t, "reserved metadata key", rc, &e, -EINVAL,
                       "rank 0: metadata key 'world_size'", "reserved", dir,
                       1);
}

/* Options structs from a newer header (size too large) on one rank, or
 * never initialised, nested ones too: refused on every rank, naming the
 * rank and the struct, with nothing made. */
static void opts_size(tctx *t, const char *root, model *m)
{
    char dir[4096], who[96];
    path_of(dir, sizeof dir, root, "step-2");
    int bad = t->size - 1;
    ckpt_mpi_save_opts o = save_opts();
    if (t->rank == bad)
        o.size += 8;
    ckpt_error e;
    int rc = save_model(t, dir, m->p, 2, &o, &e);
    snprintf(who, sizeof who, "rank %d: ckpt_mpi_save_opts", bad);
    expect_failed_save(t, "save opts from a newer header", rc, &e, -EINVAL,
                       who, "newer", dir, 1);
    o = save_opts();
    o.write.size = 0;
    rc = save_model(t, dir, m->p, 2, &o, &e);
    expect_failed_save(t, "nested write opts not set", rc, &e, -EINVAL,
                       "ckpt_mpi_save_opts.write", "_init", dir, 1);
}

/* Random bytes do not compress: each rank writes 160 KiB. */
static void enospc(tctx *t, const char *tmpfs, model *m)
{
    char dir1[4096], dir2[4096], dir3[4096];
    path_of(dir1, sizeof dir1, tmpfs, "step-1");
    path_of(dir2, sizeof dir2, tmpfs, "step-2");
    path_of(dir3, sizeof dir3, tmpfs, "step-3");
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, dir1, m->p, 2, &o, &e);
    T_CHECKF(t, rc == 0, "small save on tmpfs: %s", e.msg);
    enum { BIG = 40 * 1024 };
    int64_t shape[1] = { (int64_t)BIG * t->size }, off[1], size[1] = { BIG };
    off[0] = (int64_t)BIG * t->rank;
    float *big = malloc(sizeof(float) * BIG);
    t_fill(big, CKPT_F32, 1, shape, off, size, t_fqn_id("big"));
    ckpt_piece p = { "big", CKPT_F32, 1, shape, off, size, big };
    rc = save_model(t, dir2, &p, 1, &o, &e);
    /* Shard data or a plan file (SQLite) may be the first to hit it. */
    expect_failed_save(t, "ENOSPC", rc, &e, -ENOSPC, "rank ",
                       "No space left|disk is full", dir2, 1);
    free(big);
    check_good(t, dir1, "tmpfs step-1 after ENOSPC");
    /* The failed save gave its space back: a small save fits again. */
    rc = save_model(t, dir3, m->p, 2, &o, &e);
    T_CHECKF(t, rc == 0, "small save after ENOSPC: %s", e.msg);
}

static void empty_saves(tctx *t, const char *root, model *m)
{
    char dir[4096];
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    path_of(dir, sizeof dir, root, "empty");
    int rc = save_model(t, dir, NULL, 0, &o, &e);
    T_CHECKF(t, rc == 0, "save of nothing: %s", e.msg);
    t_same_status(t, t->world, rc, &e);
    /* Only the last rank has pieces: the others leave empty plans. */
    path_of(dir, sizeof dir, root, "last-only");
    int64_t shape[2] = { ROWS, COLS };
    float *w = malloc(sizeof(float) * ROWS * COLS);
    t_fill(w, CKPT_F32, 2, shape, (int64_t[]){ 0, 0 }, shape, t_fqn_id("w"));
    ckpt_piece p[2] = { { "w", CKPT_F32, 2, shape, NULL, NULL, w }, m->p[1] };
    int last = t->rank == t->size - 1;
    rc = save_model(t, dir, p, last ? 2 : 0, &o, &e);
    T_CHECKF(t, rc == 0, "save by the last rank only: %s", e.msg);
    free(w);
    if (rc == 0)
        check_good(t, dir, "last-only");
}

/* ------------------------------------------------------------ loads */

static void expect_failed_load(tctx *t, const char *what, int rc,
                               const ckpt_error *e, int code,
                               const char *needle)
{
    T_CHECKF(t, rc == code, "%s: rc %d (%s), want %d", what, rc, e->msg,
             code);
    t_same_status(t, t->world, rc, e);
    T_CHECKF(t, strstr(e->msg, needle), "%s: message '%s' lacks '%s'", what,
             e->msg, needle);
    if (t->rank == 0)
        printf("  %-34s -> %s\n", what, e->msg);
}

static void load_errors(tctx *t, const char *root)
{
    char dir[4096], missing[4096], who[64];
    path_of(dir, sizeof dir, root, "step-1");
    path_of(missing, sizeof missing, root, "step-9");
    float buf[ROWS * COLS];
    int64_t off[2] = { 0, 0 }, size[2] = { 1, COLS };
    ckpt_mpi_region g = { "w", off, size, buf };
    ckpt_error e = { 0 };
    if (t->rank == 1)
        g.fqn = "nope";
    int rc = ckpt_mpi_load(t->world, dir, &g, 1, NULL, NULL, &e);
    expect_failed_load(t, "missing tensor", rc, &e, -ENOENT,
                       "rank 1: tensor 'nope' is not in");
    g.fqn = "w";
    int bad = t->size - 1;
    int64_t oob[2] = { ROWS - 1, 0 }, oobs[2] = { 2, COLS };
    if (t->rank == bad) {
        g.offsets = oob;
        g.sizes = oobs;
    }
    rc = ckpt_mpi_load(t->world, dir, &g, 1, NULL, NULL, &e);
    snprintf(who, sizeof who, "rank %d: tensor 'w': region dim 0", bad);
    expect_failed_load(t, "out-of-bounds region", rc, &e, -EINVAL, who);
    g.offsets = off;
    g.sizes = size;
    rc = ckpt_mpi_load(t->world, missing, &g, 1, NULL, NULL, &e);
    T_CHECKF(t, rc < 0, "load of a missing checkpoint: rc %d", rc);
    expect_failed_load(t, "missing checkpoint", rc, &e, rc, "rank 0: ");
    void *p = (void *)1;
    size_t len = 7;
    rc = ckpt_mpi_load_bytes(t->world, dir, "rng", &p, &len, &e);
    expect_failed_load(t, "missing byte object", rc, &e, -ENOENT,
                       "byte object 'rng' is not in");
    T_CHECK(t, p == NULL && len == 0);
    ckpt_mpi_load_opts lo;
    ckpt_mpi_load_opts_init(&lo);
    if (t->rank == 0)
        lo.read.size = 0;
    rc = ckpt_mpi_load(t->world, dir, &g, 1, &lo, NULL, &e);
    expect_failed_load(t, "load opts not set", rc, &e, -EINVAL,
                       "rank 0: ckpt_mpi_load_opts.read");
}

/* NULL for each pointer parameter of each call of ckptfs_mpi.h (issue
 * 17): -EINVAL naming what is missing, the same on every rank, nothing
 * written, no crash; the void calls do nothing. */
static void null_args(tctx *t, const char *root, model *m)
{
    char dir[4096];
    path_of(dir, sizeof dir, root, "step-null");
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(t, NULL, m->p, 2, &o, &e);
    expect_failed_save(t, "save: NULL dir", rc, &e, -EINVAL, "NULL", NULL,
                       dir, 1);
    rc = save_model(t, dir, NULL, 2, &o, &e);
    expect_failed_save(t, "save: NULL pieces", rc, &e, -EINVAL,
                       "no piece array (NULL)", NULL, dir, 1);
    memset(&e, 0, sizeof e);
    ckpt_mpi_async *h = (ckpt_mpi_async *)&e;   /* must be reset to NULL */
    rc = ckpt_mpi_save_async(t->world, dir, m->p, 2, &o, NULL, &h, &e);
    expect_failed_save(t, "save_async: NULL saver", rc, &e, -EINVAL,
                       "NULL", NULL, dir, 1);
    T_CHECK(t, h == NULL);
    ckpt_saver *sv = NULL;
    ckpt_error se = { 0 };
    T_CHECKF(t, ckpt_saver_create(&sv, NULL, &se) == 0, "%s", se.msg);
    memset(&e, 0, sizeof e);
    rc = ckpt_mpi_save_async(t->world, dir, m->p, 2, &o, sv, NULL, &e);
    expect_failed_save(t, "save_async: NULL handle pointer", rc, &e,
                       -EINVAL, "NULL", NULL, dir, 1);
    ckpt_saver_destroy(sv);
    T_CHECK(t, ckpt_mpi_save_poll(NULL) == -EINVAL);
    memset(&e, 0, sizeof e);
    T_CHECK(t, ckpt_mpi_save_wait(NULL, &e) == -EINVAL &&
               strstr(e.msg, "NULL"));
    ckpt_mpi_save_opts_init(NULL);
    ckpt_mpi_load_opts_init(NULL);
    int64_t len_storage = -1;
    ckpt_piece bp = { .fqn = "keep" };
    ckpt_mpi_bytes_piece(NULL, "x", "y", &len_storage, 1);
    ckpt_mpi_bytes_piece(&bp, "x", "y", NULL, 1);
    T_CHECK(t, len_storage == -1 && strcmp(bp.fqn, "keep") == 0);

    char good[4096];
    path_of(good, sizeof good, root, "step-1");
    memset(&e, 0, sizeof e);
    rc = ckpt_mpi_load(t->world, NULL, NULL, 0, NULL, NULL, &e);
    expect_failed_load(t, "load: NULL dir", rc, &e, -EINVAL, "NULL");
    memset(&e, 0, sizeof e);
    rc = ckpt_mpi_load(t->world, good, NULL, 1, NULL, NULL, &e);
    expect_failed_load(t, "load: NULL regions", rc, &e, -EINVAL,
                       "no region array (NULL)");
    void *p = (void *)1;
    size_t len = 7;
    memset(&e, 0, sizeof e);
    rc = ckpt_mpi_load_bytes(t->world, NULL, "rng", &p, &len, &e);
    expect_failed_load(t, "load_bytes: NULL dir", rc, &e, -EINVAL, "NULL");
    T_CHECK(t, p == NULL && len == 0);
    memset(&e, 0, sizeof e);
    rc = ckpt_mpi_load_bytes(t->world, good, NULL, &p, &len, &e);
    expect_failed_load(t, "load_bytes: NULL name", rc, &e, -EINVAL,
                       "no byte object name given (NULL)");
    memset(&e, 0, sizeof e);
    rc = ckpt_mpi_load_bytes(t->world, good, "rng", NULL, &len, &e);
    expect_failed_load(t, "load_bytes: NULL out", rc, &e, -EINVAL,
                       "no out pointer (NULL)");
    memset(&e, 0, sizeof e);
    rc = ckpt_mpi_load_bytes(t->world, good, "rng", &p, NULL, &e);
    expect_failed_load(t, "load_bytes: NULL len", rc, &e, -EINVAL,
                       "no len pointer (NULL)");
    /* A NULL err is allowed everywhere: the code alone. */
    T_CHECK(t, ckpt_mpi_save(t->world, NULL, m->p, 2, &o, NULL) == -EINVAL);
    T_CHECK(t, ckpt_mpi_load(t->world, NULL, NULL, 0, NULL, NULL, NULL) ==
               -EINVAL);
}

int main(int argc, char **argv)
{
    tctx t;
    t_init(&t, &argc, &argv);
    if (argc < 2 || t.size < 2) {
        if (t.rank == 0)
            fprintf(stderr, "usage: mpirun -n N (N >= 2) %s ROOT "
                    "[TMPFS_DIR]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    const char *root = argv[1];
    char step1[4096];
    path_of(step1, sizeof step1, root, "step-1");
    model m;
    model_init(&m, &t);
    ckpt_mpi_save_opts o = save_opts();
    ckpt_error e;
    int rc = save_model(&t, step1, m.p, 2, &o, &e);
    T_CHECKF(&t, rc == 0, "the good save: %s", e.msg);
    if (t.rank == 0)
        printf("saves that must fail, on %d ranks:\n", t.size);
    bad_piece(&t, root, &m);
    null_data(&t, root, &m);
    dtype_mismatch(&t, root, &m);
    overlap(&t, root, &m);
    hole(&t, root, &m);
    replicas_differ(&t, root, &m);
    committed_target(&t, root, &m);
    unfinished_target(&t, root, &m);
    other_dir(&t, root, &m);
    reserved_meta(&t, root, &m);
    opts_size(&t, root, &m);
    null_args(&t, root, &m);
    if (argc > 2)
        enospc(&t, argv[2], &m);
    else if (t.rank == 0)
        printf("  ENOSPC: skipped (no tmpfs directory given)\n");
    check_good(&t, step1, "step-1 after the failed saves");
    empty_saves(&t, root, &m);
    if (t.rank == 0)
        printf("loads that must fail:\n");
    load_errors(&t, root);
    model_free(&m);
    return t_finish(&t, "test_mpi_errors");
}
