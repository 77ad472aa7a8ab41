/*
 * test_save.c - ckpt_save_sync, the synchronous single-process save in one
 * call: a state of several dtypes (a tensor in three row pieces, a byte
 * object, a scalar, an empty tensor) with metadata reads back byte for
 * byte; a committed or unfinished target is refused before anything is
 * touched; a malformed piece is refused before the directory is made;
 * planner refusals and a reserved metadata key fail after writing began
 * and leave nothing behind (not even the directory the save made, while a
 * directory that existed before stays, empty); the earlier checkpoint is
 * unchanged throughout.  The reference is the test's own buffers.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "ckptfs.h"
#include "fileio.h"

#define ROWS 61
#define COLS 37

typedef struct state {
    int64_t wshape[2], woff[3][2], wsize[3][2], eshape[2];
    float w[ROWS * COLS];
    unsigned char blob[300];
    int64_t step;
    float empty[1];
    ckpt_piece p[6];
    size_t np;
} state;

static void state_init(state *s, int seed)
{
    int64_t cut[4] = { 0, 20, 21, ROWS };
    memset(s, 0, sizeof *s);
    s->wshape[0] = ROWS;
    s->wshape[1] = COLS;
    for (int i = 0; i < ROWS * COLS; i++)
        s->w[i] = (float)(i * seed) * 0.25f - 7.0f;
    for (int k = 0; k < 3; k++) {
        s->woff[k][0] = cut[k];
        s->wsize[k][0] = cut[k + 1] - cut[k];
        s->wsize[k][1] = COLS;
        s->p[s->np++] = (ckpt_piece){ "model.w", CKPT_F32, 2, s->wshape,
                                      s->woff[k], s->wsize[k],
                                      s->w + cut[k] * COLS };
    }
    for (size_t i = 0; i < sizeof s->blob; i++)
        s->blob[i] = (unsigned char)(i * 7 + (unsigned)seed);
    static int64_t blob_shape[1] = { 300 };
    s->p[s->np++] = (ckpt_piece){ "rng", CKPT_BYTES, 1, blob_shape, NULL,
                                  NULL, s->blob };
    s->step = 1000 + seed;
    s->p[s->np++] = (ckpt_piece){ "opt.step", CKPT_I64, 0, NULL, NULL, NULL,
                                  &s->step };
    s->eshape[1] = 4;
    s->p[s->np++] = (ckpt_piece){ "empty", CKPT_F32, 2, s->eshape, NULL,
                                  NULL, s->empty };
}

static void check_bytes(ckpt_reader *r, const char *fqn, const void *ref,
                        size_t n)
{
    long t = ckpt_reader_find(r, fqn);
    ck_assert_msg(t >= 0, "tensor %s missing", fqn);
    ckpt_tensor_info ti;
    ck_assert_int_eq(ckpt_reader_info(r, (size_t)t, &ti), 0);
    ck_assert_uint_eq(ti.nbytes, n);
    unsigned char *got = malloc(n + 1);
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_read(r, (size_t)t, got, 0, n, &err) == (int64_t)n,
                  "read %s: %s", fqn, err.msg);
    if (n)
        ck_assert_mem_eq(got, ref, n);
    free(got);
}

static void check_state(const char *dir, const state *s)
{
    ckpt_reader *r;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&r, dir, NULL, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(ckpt_reader_count(r), 4);
    check_bytes(r, "model.w", s->w, sizeof s->w);
    check_bytes(r, "rng", s->blob, sizeof s->blob);
    check_bytes(r, "opt.step", &s->step, 8);
    check_bytes(r, "empty", NULL, 0);
    ckpt_tensor_info ti;
    ck_assert_int_eq(ckpt_reader_info(r, (size_t)ckpt_reader_find(r, "rng"),
                                      &ti), 0);
    ck_assert_int_eq(ti.dtype, CKPT_BYTES);
    ck_assert_str_eq(ckpt_reader_meta_get(r, "step"), "100");
    ck_assert_str_eq(ckpt_reader_meta_get(r, "world_size"), "1");
    ckpt_reader_close(r);
}

static void join(char *buf, const char *a, const char *b)
{
    ck_assert_int_eq(ckpt_path_join(buf, 4096, a, b, NULL), 0);
}

static int exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static ckpt_save_opts meta_opts(void)
{
    static const char *k[] = { "step" }, *v[] = { "100" };
    ckpt_save_opts o;
    ckpt_save_opts_init(&o);
    o.write.frame_size = 4096;
    o.meta_keys = k;
    o.meta_values = v;
    o.nmeta = 1;
    return o;
}

typedef struct fixture {
    char tmp[64], prev[4096], dir[4096];
    state p;
    struct stat prev_index;
} fixture;

/* A tmp dir with a good checkpoint "prev" saved by ckpt_save_sync. */
static void setup(fixture *f)
{
    char path[4096];
    snprintf(f->tmp, sizeof f->tmp, "/tmp/ckpt-save-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->tmp));
    join(f->prev, f->tmp, "prev");
    join(f->dir, f->tmp, "new");
    state_init(&f->p, 1);
    ckpt_save_opts o = meta_opts();
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_save_sync(f->prev, f->p.p, f->p.np, &o, &err) == 0,
                  "%s", err.msg);
    join(path, f->prev, "index.db");
    ck_assert_int_eq(stat(path, &f->prev_index), 0);
}

/* prev is still the same committed checkpoint, then everything goes. */
static void teardown(fixture *f)
{
    char path[4096];
    struct stat st;
    check_state(f->prev, &f->p);
    join(path, f->prev, "index.db");
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_ino, f->prev_index.st_ino);
    ck_assert_int_eq(st.st_mtime, f->prev_index.st_mtime);
    ck_assert_int_eq(ckpt_remove_tree(f->tmp, NULL), 0);
}

START_TEST(test_roundtrip)
{
    fixture f;
    setup(&f);
    char path[4096];
    check_state(f.prev, &f.p);
    /* No .pending/ left once committed; one shard, named rank0. */
    join(path, f.prev, ".pending");
    ck_assert(!exists(path));
    join(path, f.prev, "data/rank0.shard");
    ck_assert(exists(path));
    /* Into a directory that exists and is empty. */
    ck_assert_int_eq(mkdir(f.dir, 0755), 0);
    state s;
    state_init(&s, 2);
    ckpt_save_opts o = meta_opts();
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_save_sync(f.dir, s.p, s.np, &o, &err) == 0, "%s",
                  err.msg);
    check_state(f.dir, &s);
    teardown(&f);
}
END_TEST

START_TEST(test_refused_targets)
{
    fixture f;
    setup(&f);
    state s;
    state_init(&s, 3);
    ckpt_error err = { 0 };
    /* Committed: refused, nothing touched (teardown checks prev). */
    ck_assert_int_eq(ckpt_save_sync(f.prev, s.p, s.np, NULL, &err), -EEXIST);
    ck_assert_msg(strstr(err.msg, "already a committed checkpoint"), "%s",
                  err.msg);
    /* An unfinished save: refused, its files left alone. */
    char path[4096];
    ck_assert_int_eq(mkdir(f.dir, 0755), 0);
    join(path, f.dir, ".pending");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_eq(ckpt_save_sync(f.dir, s.p, s.np, NULL, &err), -EBUSY);
    ck_assert_msg(strstr(err.msg, "unfinished save"), "%s", err.msg);
    ck_assert(exists(path));
    ck_assert_int_eq(count_entries(f.dir), 1);
    teardown(&f);
}
END_TEST

START_TEST(test_bad_pieces_make_nothing)
{
    fixture f;
    setup(&f);
    ckpt_error err = { 0 };
    for (int kind = 0; kind < 4; kind++) {
        state s;
        state_init(&s, 4);
        const char *want;
        if (kind == 0) {            /* out of its tensor's bounds */
            s.woff[2][0] = 30;
            want = "model.w";
        } else if (kind == 1) {     /* no data */
            s.p[3].data = NULL;
            want = "rng";
        } else if (kind == 2) {     /* a bad dtype */
            s.p[4].dtype = (ckpt_dtype)77;
            want = "opt.step";
        } else {                    /* a bad name */
            s.p[4].fqn = "a..b";
            want = "a..b";
        }
        int rc = ckpt_save_sync(f.dir, s.p, s.np, NULL, &err);
        ck_assert_int_eq(rc, -EINVAL);
        ck_assert_msg(strstr(err.msg, want), "kind %d: '%s' does not name %s",
                      kind, err.msg, want);
        ck_assert_msg(!exists(f.dir), "kind %d: %s was made", kind, f.dir);
    }
    ck_assert_int_eq(ckpt_save_sync(f.dir, NULL, 2, NULL, &err), -EINVAL);
    ck_assert_int_eq(ckpt_save_sync(NULL, NULL, 0, NULL, &err), -EINVAL);
    ck_assert(!exists(f.dir));
    teardown(&f);
}
END_TEST

START_TEST(test_late_failures_clean_up)
{
    fixture f;
    setup(&f);
    ckpt_error err = { 0 };
    for (int pre = 0; pre < 2; pre++) {
        for (int kind = 0; kind < 4; kind++) {
            state s;
            state_init(&s, 5);
            ckpt_save_opts o = meta_opts();
            static const char *rk[] = { "created" }, *rv[] = { "x" };
            const char *want;
            if (kind == 0) {          /* a hole: the middle piece missing */
                s.p[1] = s.p[--s.np];
                want = "model.w";
            } else if (kind == 1) {   /* pieces that partly overlap */
                s.woff[1][0] = 10;
                want = "model.w";
            } else if (kind == 2) {   /* one name, two dtypes */
                s.p[5].fqn = "opt.step";
                want = "opt.step";
            } else {                  /* a reserved metadata key */
                o.meta_keys = rk;
                o.meta_values = rv;
                want = "created";
            }
            if (pre)
                ck_assert_int_eq(mkdir(f.dir, 0755), 0);
            int rc = ckpt_save_sync(f.dir, s.p, s.np, &o, &err);
            ck_assert_int_eq(rc, -EINVAL);
            ck_assert_msg(strstr(err.msg, want), "kind %d: '%s' does not "
                          "name %s", kind, err.msg, want);
            ck_assert_int_ne(ckpt_dir_probe(f.dir), CKPT_DIR_COMMITTED);
            if (pre) {
                ck_assert_int_eq(count_entries(f.dir), 0);
                ck_assert_int_eq(rmdir(f.dir), 0);
            } else {
                ck_assert_msg(!exists(f.dir), "kind %d: %s left behind",
                              kind, f.dir);
            }
        }
    }
    /* The same directory saves fine afterwards. */
    state s;
    state_init(&s, 6);
    ckpt_save_opts o = meta_opts();
    ck_assert_msg(ckpt_save_sync(f.dir, s.p, s.np, &o, &err) == 0, "%s",
                  err.msg);
    check_state(f.dir, &s);
    teardown(&f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("save");
    TCase *tc = tcase_create("save");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_refused_targets);
    tcase_add_test(tc, test_bad_pieces_make_nothing);
    tcase_add_test(tc, test_late_failures_clean_up);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
