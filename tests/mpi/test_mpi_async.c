/*
 * test_mpi_async.c - the collective asynchronous save.
 *
 *   test_mpi_async ROOT
 *
 * Every rank holds rows of "w" (f32 [ROWS, COLS], dim-0 sharded, uneven)
 * and a replica of "b" (f32 [COLS]); the values are the reference values
 * of mpi_test.c, computed without the library.  Checked: right after
 * ckpt_mpi_save_async returns every rank scribbles over and frees its
 * buffers, and the checkpoint still holds the reference values (default
 * staging, and a staging cap far below the rank's state); two saves in a
 * row on a saver of queue depth 1 are serialised (the first rank's part is
 * done when the second call returns); a planner refusal (overlapping rows)
 * is reported by the wait on every rank alike, nothing is committed, the
 * save's files are gone, and the earlier checkpoint still loads exactly.
 */
#include "mpi_test.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"

#define ROWS 61
#define COLS 1000

typedef struct model {
    int64_t wshape[2], bshape[1], off[2], size[2];
    float *w, *b;
    ckpt_piece p[2];
} model;

static void model_init(model *m, const tctx *t, int64_t shift)
{
    m->wshape[0] = ROWS;
    m->wshape[1] = COLS;
    m->bshape[0] = COLS;
    t_split(ROWS, t->size, t->rank, &m->off[0], &m->size[0]);
    m->off[0] -= m->off[0] > 0 ? shift : 0;   /* shift > 0: overlap */
    m->off[1] = 0;
    m->size[1] = COLS;
    m->w = malloc(t_box_bytes(CKPT_F32, 2, m->size) + 4);
    m->b = malloc(sizeof(float) * COLS);
    t_fill(m->w, CKPT_F32, 2, m->wshape, m->off, m->size, t_fqn_id("w"));
    t_fill(m->b, CKPT_F32, 1, m->bshape, (int64_t[]){ 0 }, m->bshape,
           t_fqn_id("b"));
    m->p[0] = (ckpt_piece){ "w", CKPT_F32, 2, m->wshape, m->off, m->size,
                            m->w };
    m->p[1] = (ckpt_piece){ "b", CKPT_F32, 1, m->bshape, NULL, NULL, m->b };
}

/* What the next training step does: overwrite, free, reallocate. */
static void scribble(model *m)
{
    memset(m->w, 0xA5, t_box_bytes(CKPT_F32, 2, m->size));
    memset(m->b, 0x5A, sizeof(float) * COLS);
    free(m->w);
    free(m->b);
    m->w = calloc(1, t_box_bytes(CKPT_F32, 2, m->size) + 4);
    m->b = calloc(COLS, sizeof(float));
}

static void model_free(model *m)
{
    free(m->w);
    free(m->b);
}

/* Loads this rank's rows and all of b from dir and compares. */
static void check_load(tctx *t, const char *dir)
{
    model m;
    model_init(&m, t, 0);
    memset(m.w, 0, t_box_bytes(CKPT_F32, 2, m.size));
    memset(m.b, 0, sizeof(float) * COLS);
    ckpt_mpi_region rg[2] = {
        { "w", m.off, m.size, m.w }, { "b", NULL, NULL, m.b },
    };
    ckpt_error err = { 0 };
    int rc = ckpt_mpi_load(t->world, dir, rg, 2, NULL, NULL, &err);
    T_CHECKF(t, rc == 0, "load %s: %s", dir, err.msg);
    if (rc == 0) {
        t_compare(t, m.w, CKPT_F32, 2, m.wshape, m.off, m.size,
                  t_fqn_id("w"), "w");
        t_compare(t, m.b, CKPT_F32, 1, m.bshape, (int64_t[]){ 0 }, m.bshape,
                  t_fqn_id("b"), "b");
    }
    model_free(&m);
}

static void join(char *buf, size_t cap, const char *a, const char *b)
{
    snprintf(buf, cap, "%s/%s", a, b);
}

/* Saves, scribbles at once, waits; checks the status agrees. */
static int save_scribble(tctx *t, ckpt_saver *sv, const char *dir, model *m,
                         ckpt_error *err)
{
    ckpt_mpi_async *h;
    int rc = ckpt_mpi_save_async(t->world, dir, m->p, 2, NULL, sv, &h, err);
    if (rc)
        return rc;
    scribble(m);
    rc = ckpt_mpi_save_wait(h, err);
    t_same_status(t, t->world, rc, err);
    return rc;
}

static void test_scribble(tctx *t, const char *root, size_t cap,
                          const char *name)
{
    char dir[4096];
    join(dir, sizeof dir, root, name);
    ckpt_saver_opts so;
    ckpt_saver_opts_init(&so);
    so.staging_bytes = cap;
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    T_CHECKF(t, ckpt_saver_create(&sv, &so, &err) == 0, "%s", err.msg);
    model m;
    model_init(&m, t, 0);
    int rc = save_scribble(t, sv, dir, &m, &err);
    T_CHECKF(t, rc == 0, "async save to %s: %s", dir, err.msg);
    model_free(&m);
    ckpt_saver_destroy(sv);
    check_load(t, dir);
}

static void test_serialised(tctx *t, const char *root)
{
    char d1[4096], d2[4096];
    join(d1, sizeof d1, root, "q1");
    join(d2, sizeof d2, root, "q2");
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    T_CHECK(t, ckpt_saver_create(&sv, NULL, &err) == 0);
    model m1, m2;
    model_init(&m1, t, 0);
    model_init(&m2, t, 0);
    ckpt_mpi_async *h1, *h2;
    T_CHECK(t, ckpt_mpi_save_async(t->world, d1, m1.p, 2, NULL, sv, &h1,
                                   &err) == 0);
    scribble(&m1);
    T_CHECK(t, ckpt_mpi_save_async(t->world, d2, m2.p, 2, NULL, sv, &h2,
                                   &err) == 0);
    scribble(&m2);
    /* Queue depth 1: this rank's part of the first save had finished
     * before the second one was staged. */
    T_CHECK(t, ckpt_mpi_save_poll(h1) == 1);
    int rc = ckpt_mpi_save_wait(h1, &err);
    T_CHECKF(t, rc == 0, "first save: %s", err.msg);
    rc = ckpt_mpi_save_wait(h2, &err);
    T_CHECKF(t, rc == 0, "second save: %s", err.msg);
    model_free(&m1);
    model_free(&m2);
    ckpt_saver_destroy(sv);
    check_load(t, d1);
    check_load(t, d2);
}

/* A save of m into root/name that the wait must refuse on every rank
 * (when `refused`) with a message holding want (and want2), leaving
 * nothing; prev still loads. */
static void expect_refused(tctx *t, const char *root, const char *name,
                           const char *prev, model *m, ckpt_saver *sv,
                           int refused, const char *want, const char *want2)
{
    char dir[4096], path[4200];
    ckpt_error err = { 0 };
    join(dir, sizeof dir, root, name);
    int rc = save_scribble(t, sv, dir, m, &err);
    if (!refused) {
        T_CHECKF(t, rc == 0, "rc %d (%s)", rc, err.msg);
    } else {
        T_CHECKF(t, rc == -EINVAL, "rc %d (%s)", rc, err.msg);
        T_CHECKF(t, strstr(err.msg, want) && (!want2 ||
                 strstr(err.msg, want2)), "message: %s", err.msg);
        MPI_Barrier(t->world);
        snprintf(path, sizeof path, "%s/index.db", dir);
        T_CHECK(t, !t_exists(path));
        T_CHECKF(t, !t_exists(dir), "%s left behind", dir);
    }
    check_load(t, prev);
}

static void test_planner_error(tctx *t, const char *root, const char *prev)
{
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    T_CHECK(t, ckpt_saver_create(&sv, NULL, &err) == 0);
    model m;
    model_init(&m, t, t->size > 1 ? 1 : 0);
    if (t->size == 1)   /* one rank: a hole (the last row) instead */
        m.size[0]--;
    expect_refused(t, root, "bad", prev, &m, sv, 1, "planner", NULL);
    model_free(&m);
    ckpt_saver_destroy(sv);
}

/* The last rank's copy of the replicated b differs in one element: the
 * wait refuses on every rank, naming b, and the save leaves nothing (as
 * ckpt_commit refuses such replicas).  One rank has no replicas. */
static void test_replicas_differ(tctx *t, const char *root, const char *prev)
{
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    T_CHECK(t, ckpt_saver_create(&sv, NULL, &err) == 0);
    model m;
    model_init(&m, t, 0);
    if (t->rank == t->size - 1)
        ((unsigned char *)m.b)[29] ^= 1;    /* one bit of element 7 */
    expect_refused(t, root, "replicas", prev, &m, sv, t->size > 1,
                   "tensor 'b'", "different bytes");
    model_free(&m);
    ckpt_saver_destroy(sv);
}

int main(int argc, char **argv)
{
    tctx t;
    t_init(&t, &argc, &argv);
    if (argc < 2) {
        if (t.rank == 0)
            fprintf(stderr, "usage: test_mpi_async ROOT\n");
        MPI_Finalize();
        return 2;
    }
    const char *root = argv[1];
    char prev[4096];
    join(prev, sizeof prev, root, "a");
    test_scribble(&t, root, 0, "a");
    test_scribble(&t, root, (size_t)64 << 10, "capped");
    test_serialised(&t, root);
    test_planner_error(&t, root, prev);
    test_replicas_differ(&t, root, prev);
    return t_finish(&t, "test_mpi_async");
}
