/*
 * test_async.c - asynchronous saves on host memory: the checkpoint equals
 * the state at the time of the call although the caller scribbles over
 * (and frees) its buffers as soon as the call returns, with the default
 * staging pool and with a cap far smaller than the state; queue depth 1
 * serialises saves (depth 2 lets one wait); planner refusals and (case
 * "enospc", run by tests/async/enospc.sh on a small tmpfs) ENOSPC are
 * reported by wait, with nothing committed and the previous checkpoint
 * intact; replicas with different bytes are refused; staging caps far
 * below a slab stay prompt; data that is not readable host memory (what a CUDA device
 * pointer is to a build or a machine without CUDA) is refused at once.
 * ckpt_save_sync, which shares the checks and the cleanup, is tested here
 * too: the same state reads back; refusals come first with nothing made;
 * failures after writing began leave nothing (an existing directory stays,
 * empty).  ckpt_load_batch into host memory (items checked before any byte
 * is read), ckpt_saver_reserve (ENOMEM past a small address space), and
 * the reader's slot that keeps a device load's bounce buffers.  The
 * reference is a copy of the state the test made before the call.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptfs.h"
#include "common/fileio.h"
#include "read/attach.h"
#include "unit_util.h"

/* AddressSanitizer's build: gcc says so one way, clang another. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define ROWS 300
#define COLS 257
#define BIG ((size_t)5 << 20)

static void fill_random(void *buf, size_t n, rng *r)
{
    unsigned char *b = buf;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)rnd(r);
}

/* The state: "model.w" f32 [ROWS, COLS] in three row pieces, "model.b"
 * bf16 [1000], "opt.step" i64 scalar, "big" u8 [BIG] (incompressible),
 * "empty" f32 [0, 4].  `ref` holds the global images, copied before any
 * save. */
typedef struct state {
    int64_t wshape[2], woff[3][2], wsize[3][2];
    int64_t bshape[1], bigshape[1], eshape[2];
    void *w[3], *b, *step, *big, *e;
    ckpt_piece p[7];
    size_t np;
    unsigned char *ref_w, *ref_b, *ref_step, *ref_big;
} state;

static void state_init(state *s, uint64_t seed)
{
    rng r = { seed * 0x9E3779B97F4A7C15ULL + 1 };
    int64_t cut[4] = { 0, 100, 101, ROWS };   /* uneven, one single row */
    memset(s, 0, sizeof *s);
    s->wshape[0] = ROWS;
    s->wshape[1] = COLS;
    s->ref_w = malloc(ROWS * COLS * 4);
    fill_random(s->ref_w, ROWS * COLS * 4, &r);
    for (int k = 0; k < 3; k++) {
        s->woff[k][0] = cut[k];
        s->woff[k][1] = 0;
        s->wsize[k][0] = cut[k + 1] - cut[k];
        s->wsize[k][1] = COLS;
        size_t n = (size_t)s->wsize[k][0] * COLS * 4;
        s->w[k] = malloc(n);
        memcpy(s->w[k], s->ref_w + (size_t)cut[k] * COLS * 4, n);
        s->p[s->np++] = (ckpt_piece){ "model.w", CKPT_F32, 2, s->wshape,
                                      s->woff[k], s->wsize[k], s->w[k] };
    }
    s->bshape[0] = 1000;
    s->b = malloc(2000);
    fill_random(s->b, 2000, &r);
    s->p[s->np++] = (ckpt_piece){ "model.b", CKPT_BF16, 1, s->bshape, NULL,
                                  NULL, s->b };
    s->step = malloc(8);
    int64_t step = (int64_t)seed * 1000;
    memcpy(s->step, &step, 8);
    s->p[s->np++] = (ckpt_piece){ "opt.step", CKPT_I64, 0, NULL, NULL, NULL,
                                  s->step };
    s->bigshape[0] = (int64_t)BIG;
    s->big = malloc(BIG);
    fill_random(s->big, BIG, &r);
    s->p[s->np++] = (ckpt_piece){ "big", CKPT_U8, 1, s->bigshape, NULL, NULL,
                                  s->big };
    s->eshape[0] = 0;
    s->eshape[1] = 4;
    s->e = malloc(1);
    s->p[s->np++] = (ckpt_piece){ "empty", CKPT_F32, 2, s->eshape, NULL, NULL,
                                  s->e };
    s->ref_b = malloc(2000);
    memcpy(s->ref_b, s->b, 2000);
    s->ref_step = malloc(8);
    memcpy(s->ref_step, s->step, 8);
    s->ref_big = malloc(BIG);
    memcpy(s->ref_big, s->big, BIG);
}

/* What a training step does to the state right after the save returns:
 * overwrite everything, and free and reallocate some of it. */
static void scribble(state *s)
{
    for (int k = 0; k < 3; k++)
        memset(s->w[k], 0xA5, (size_t)s->wsize[k][0] * COLS * 4);
    memset(s->b, 0x5A, 2000);
    memset(s->step, 0xFF, 8);
    memset(s->big, 0x3C, BIG);
    free(s->big);
    s->big = malloc(BIG);
    memset(s->big, 0xC3, BIG);
    s->p[5].data = s->big;
}

static void state_free(state *s)
{
    for (int k = 0; k < 3; k++)
        free(s->w[k]);
    free(s->b);
    free(s->step);
    free(s->big);
    free(s->e);
    free(s->ref_w);
    free(s->ref_b);
    free(s->ref_step);
    free(s->ref_big);
}

static void check_tensor(ckpt_reader *r, const char *fqn, const void *ref,
                         size_t n)
{
    long t = ckpt_reader_find(r, fqn);
    ck_assert_msg(t >= 0, "tensor %s missing", fqn);
    ckpt_tensor_info ti;
    ck_assert_int_eq(ckpt_reader_info(r, (size_t)t, &ti), 0);
    ck_assert_uint_eq(ti.nbytes, n);
    unsigned char *got = malloc(n ? n : 1);
    ckpt_error err = { 0 };
    int rc = ckpt_load_region(r, (size_t)t, NULL, NULL, got, &err);
    ck_assert_msg(rc == 0, "load %s: %s", fqn, err.msg);
    for (size_t i = 0; i < n; i++)
        if (got[i] != ((const unsigned char *)ref)[i])
            ck_abort_msg("tensor %s: byte %zu is %u, expected %u", fqn, i,
                         got[i], ((const unsigned char *)ref)[i]);
    free(got);
}

/* The checkpoint at dir holds exactly the reference state. */
static void check_state(const char *dir, const state *s)
{
    ckpt_reader *r;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_reader_open(&r, dir, NULL, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(ckpt_reader_count(r), 5);
    check_tensor(r, "model.w", s->ref_w, ROWS * COLS * 4);
    check_tensor(r, "model.b", s->ref_b, 2000);
    check_tensor(r, "opt.step", s->ref_step, 8);
    check_tensor(r, "big", s->ref_big, BIG);
    check_tensor(r, "empty", NULL, 0);
    /* A region, through the same path. */
    long t = ckpt_reader_find(r, "model.w");
    int64_t off[2] = { 99, 3 }, size[2] = { 3, 200 };
    float got[3 * 200];
    ck_assert_int_eq(ckpt_load_region(r, (size_t)t, off, size, got, &err), 0);
    for (int i = 0; i < 3; i++)
        ck_assert_mem_eq(&got[i * 200],
                         s->ref_w + ((size_t)(99 + i) * COLS + 3) * 4, 800);
    ckpt_reader_close(r);
}

static char *make_tmpdir(void)
{
    return make_tmpdir_tagged("async");
}

static void join(char *buf, const char *a, const char *b)
{
    ck_assert_int_eq(ckpt_path_join(buf, 4096, a, b, NULL), 0);
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Saves s into dir, scribbles right after the call returns, waits. */
static int save_scribble(ckpt_saver *sv, const char *dir, state *s,
                         const ckpt_save_opts *o, ckpt_error *err)
{
    ckpt_save *h;
    int rc = ckpt_save_async(sv, dir, s->p, s->np, o, &h, err);
    if (rc)
        return rc;
    scribble(s);
    return ckpt_save_wait(h, err);
}

static void scribble_case(const ckpt_saver_opts *so, size_t frame)
{
    char *tmp = make_tmpdir();
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_saver_create(&sv, so, &err) == 0, "%s", err.msg);
    ckpt_save_opts o;
    ckpt_save_opts_init(&o);
    if (frame)
        o.write.frame_size = frame;
    const char *k[] = { "step" }, *v[] = { "1" };
    o.meta_keys = k;
    o.meta_values = v;
    o.nmeta = 1;
    for (int round = 0; round < 2; round++) {   /* the pool is reused */
        state s;
        state_init(&s, (uint64_t)round + 1);
        char d[4096], name[32];
        snprintf(name, sizeof name, "step-%d", round);
        join(d, tmp, name);
        int rc = save_scribble(sv, d, &s, &o, &err);
        ck_assert_msg(rc == 0, "save: %s", err.msg);
        check_state(d, &s);
        ckpt_reader *r;
        ck_assert_int_eq(ckpt_reader_open(&r, d, NULL, &err), 0);
        ck_assert_str_eq(ckpt_reader_meta_get(r, "step"), "1");
        ckpt_reader_close(r);
        state_free(&s);
    }
    ckpt_saver_destroy(sv);
    remove_tmpdir(tmp);
}

START_TEST(test_scribble_default)
{
    scribble_case(NULL, 0);
}
END_TEST

START_TEST(test_scribble_small_cap)
{
    /* A 1 MiB cap for a 5.3 MiB state: staged in slices of 256 KiB. */
    ckpt_saver_opts so;
    ckpt_saver_opts_init(&so);
    so.staging_bytes = (size_t)1 << 20;
    so.copy_threads = 3;
    scribble_case(&so, (size_t)64 << 10);
}
END_TEST

START_TEST(test_scribble_tiny_cap)
{
    /* A cap below one slab: one 64 KiB slab, smaller than a frame. */
    ckpt_saver_opts so;
    ckpt_saver_opts_init(&so);
    so.staging_bytes = 1000;
    so.copy_threads = 1;
    scribble_case(&so, 0);
}
END_TEST

START_TEST(test_queue_depth)
{
    char *tmp = make_tmpdir(), d[3][4096];
    ckpt_error err = { 0 };
    state s[3];
    for (int depth = 1; depth <= 2; depth++) {
        ckpt_saver_opts so;
        ckpt_saver_opts_init(&so);
        so.queue_depth = depth;
        ckpt_saver *sv;
        ck_assert_int_eq(ckpt_saver_create(&sv, &so, &err), 0);
        ckpt_save *h[3];
        for (int i = 0; i < 3; i++) {
            state_init(&s[i], (uint64_t)(10 * depth + i));
            char name[32];
            snprintf(name, sizeof name, "d%d-%d", depth, i);
            join(d[i], tmp, name);
            ck_assert_msg(ckpt_save_async(sv, d[i], s[i].p, s[i].np, NULL,
                                          &h[i], &err) == 0, "%s", err.msg);
            scribble(&s[i]);
            /* With depth saves in flight at most, the save `depth` places
             * earlier has finished (and committed) by now. */
            if (i >= depth) {
                ck_assert_int_eq(ckpt_save_poll(h[i - depth]), 1);
                ck_assert_int_eq(ckpt_dir_probe(d[i - depth]),
                                 CKPT_DIR_COMMITTED);
            }
        }
        for (int i = 0; i < 3; i++) {
            ck_assert_msg(ckpt_save_wait(h[i], &err) == 0, "%s", err.msg);
            check_state(d[i], &s[i]);
            state_free(&s[i]);
        }
        ckpt_saver_destroy(sv);
    }
    remove_tmpdir(tmp);
}
END_TEST

/* A good checkpoint at <tmp>/prev, saved asynchronously too. */
static void save_prev(ckpt_saver *sv, const char *prev, state *s)
{
    ckpt_error err = { 0 };
    state_init(s, 7);
    ck_assert_msg(save_scribble(sv, prev, s, NULL, &err) == 0, "%s", err.msg);
}

/* A failed save left nothing: no checkpoint, no files, no directory. */
static void check_nothing(const char *dir)
{
    char path[4096];
    ck_assert_int_ne(ckpt_dir_probe(dir), CKPT_DIR_COMMITTED);
    join(path, dir, "index.db");
    ck_assert(!exists(path));
    ck_assert_msg(!exists(dir), "%s still exists after a failed save", dir);
}

START_TEST(test_planner_errors)
{
    char *tmp = make_tmpdir(), prev[4096], dir[4096];
    join(prev, tmp, "prev");
    join(dir, tmp, "bad");
    ckpt_saver_opts so;
    ckpt_saver_opts_init(&so);
    so.staging_bytes = (size_t)512 << 10;   /* also with slices */
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_saver_create(&sv, &so, &err), 0);
    state p;
    save_prev(sv, prev, &p);
    for (int kind = 0; kind < 4; kind++) {
        state s;
        state_init(&s, 3);
        const char *want;
        if (kind == 0) {          /* a hole: the middle row piece missing */
            s.p[1] = s.p[s.np - 1];
            s.np--;
            want = "model.w";
        } else if (kind == 1) {   /* overlap: piece 1 moved onto piece 0 */
            s.woff[1][0] = 50;
            want = "model.w";
        } else if (kind == 2) {   /* one fqn, two dtypes */
            s.p[4].fqn = "model.b";
            want = "model.b";
        } else {                  /* replicas of row 100, other bytes */
            s.p[6] = s.p[1];
            s.p[6].data = s.b;
            want = "different bytes";
        }
        ckpt_save *h;
        int rc = ckpt_save_async(sv, dir, s.p, s.np, NULL, &h, &err);
        ck_assert_msg(rc == 0, "start (kind %d): %s", kind, err.msg);
        scribble(&s);
        rc = ckpt_save_wait(h, &err);
        ck_assert_int_eq(rc, -EINVAL);
        ck_assert_msg(strstr(err.msg, want) != NULL,
                      "kind %d: message '%s' does not name %s", kind, err.msg,
                      want);
        check_nothing(dir);
        state_free(&s);
    }
    check_state(prev, &p);
    /* The saver still works after failures. */
    state s;
    state_init(&s, 4);
    ck_assert_msg(save_scribble(sv, dir, &s, NULL, &err) == 0, "%s", err.msg);
    check_state(dir, &s);
    state_free(&s);
    state_free(&p);
    ckpt_saver_destroy(sv);
    remove_tmpdir(tmp);
}
END_TEST

/* A cap far below a slab: staging moves slabs of 64 KiB whatever the cap,
 * so a save takes a handful of hand-offs, not one per byte (with a 1-byte
 * cap, 20,000 f32 elements took 4.4 s and 100,000 did not finish in 20 s).
 * The tcase's timeout bounds it; the bytes must come back. */
START_TEST(test_tiny_caps)
{
    static const size_t caps[] = { 1, 1000, ((size_t)64 << 10) - 1 };
    static const int64_t sizes[] = { 20000, 100000 };
    char *tmp = make_tmpdir(), dir[4096];
    rng r = { 77 };
    for (size_t c = 0; c < sizeof caps / sizeof *caps; c++) {
        ckpt_saver_opts so;
        ckpt_saver_opts_init(&so);
        so.staging_bytes = caps[c];
        ckpt_saver *sv;
        ckpt_error err = { 0 };
        ck_assert_msg(ckpt_saver_create(&sv, &so, &err) == 0, "%s", err.msg);
        for (size_t k = 0; k < 2; k++) {
            int64_t shape[1] = { sizes[k] };
            size_t n = (size_t)sizes[k] * 4;
            unsigned char *v = malloc(n), *ref = malloc(n), *got = malloc(n);
            fill_random(v, n, &r);
            memcpy(ref, v, n);
            ckpt_piece p = { "w", CKPT_F32, 1, shape, NULL, NULL, v };
            char name[64];
            snprintf(name, sizeof name, "cap%zu-%zu", c, k);
            join(dir, tmp, name);
            ckpt_save *h;
            ck_assert_msg(ckpt_save_async(sv, dir, &p, 1, NULL, &h, &err) ==
                          0, "%s", err.msg);
            memset(v, 0xEE, n);
            ck_assert_msg(ckpt_save_wait(h, &err) == 0, "%s", err.msg);
            ckpt_reader *rd;
            ck_assert_int_eq(ckpt_reader_open(&rd, dir, NULL, &err), 0);
            ck_assert_int_eq(ckpt_read(rd, 0, got, 0, n, &err), (int64_t)n);
            ck_assert_mem_eq(got, ref, n);
            ckpt_reader_close(rd);
            free(v);
            free(ref);
            free(got);
        }
        ckpt_saver_destroy(sv);
    }
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_refused_at_start)
{
    char *tmp = make_tmpdir(), prev[4096], dir[4096], path[4096];
    join(prev, tmp, "prev");
    join(dir, tmp, "bad");
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_saver_create(&sv, NULL, &err), 0);
    ck_assert_int_eq(ckpt_saver_cuda(sv) == 0 || ckpt_saver_cuda(sv) == 1, 1);
    state p;
    save_prev(sv, prev, &p);
    ckpt_save *h = (ckpt_save *)&h;
    /* A committed target. */
    ck_assert_int_eq(ckpt_save_async(sv, prev, p.p, p.np, NULL, &h, &err),
                     -EEXIST);
    ck_assert_ptr_null(h);
    ck_assert_ptr_nonnull(strstr(err.msg, "already a committed"));
    /* An unfinished one. */
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    join(path, dir, ".pending");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_eq(ckpt_save_async(sv, dir, p.p, p.np, NULL, &h, &err),
                     -EBUSY);
    ck_assert_int_eq(rmdir(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    /* A piece out of bounds. */
    state s;
    state_init(&s, 5);
    s.woff[2][0] = 250;
    ck_assert_int_eq(ckpt_save_async(sv, dir, s.p, s.np, NULL, &h, &err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.w"));
    s.woff[2][0] = 101;
    /* Data that is not readable host memory: what a CUDA device pointer is
     * without CUDA or without a device.  No crash, a clear error, nothing
     * written. */
    size_t n = (size_t)s.wsize[2][0] * COLS * 4;
    void *none = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(none, MAP_FAILED);
    void *keep = (void *)s.p[2].data;
    s.p[2].data = none;
    ck_assert_int_eq(ckpt_save_async(sv, dir, s.p, s.np, NULL, &h, &err),
                     -EFAULT);
    ck_assert_msg(strstr(err.msg, "model.w") &&
                  strstr(err.msg, "not readable host memory"), "%s", err.msg);
    ck_assert(!exists(dir));
    /* NULL data. */
    s.p[2].data = NULL;
    ck_assert_int_eq(ckpt_save_async(sv, dir, s.p, s.np, NULL, &h, &err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "NULL"));
    s.p[2].data = keep;
    /* A load into memory that is not writable. */
    ckpt_reader *r;
    ck_assert_int_eq(ckpt_reader_open(&r, prev, NULL, &err), 0);
    long t = ckpt_reader_find(r, "model.w");
    int64_t off[2] = { 0, 0 }, size[2] = { 1, COLS };
    ck_assert_int_eq(ckpt_load_region(r, (size_t)t, off, size, none, &err),
                     -EFAULT);
    ck_assert_ptr_nonnull(strstr(err.msg, "not writable host memory"));
    ckpt_reader_close(r);
    munmap(none, n);
    /* Bad saver options. */
    ckpt_saver_opts so;
    ckpt_saver_opts_init(&so);
    so.queue_depth = 0;
    ckpt_saver *bad;
    ck_assert_int_eq(ckpt_saver_create(&bad, &so, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "queue depth"));
    /* After all that, saving works and prev is intact. */
    ck_assert_msg(save_scribble(sv, dir, &s, NULL, &err) == 0, "%s", err.msg);
    check_state(dir, &s);
    check_state(prev, &p);
    state_free(&s);
    state_free(&p);
    ckpt_saver_destroy(sv);
    remove_tmpdir(tmp);
}
END_TEST

/* Run by tests/async/enospc.sh with CKPT_TEST_SMALLFS on a tmpfs too small
 * for the state (but large enough for a small previous checkpoint). */
START_TEST(test_enospc)
{
    const char *small = getenv("CKPT_TEST_SMALLFS");
    char prev[4096], dir[4096];
    ck_assert_ptr_nonnull(small);
    join(prev, small, "prev");
    join(dir, small, "full");
    ckpt_saver *sv;
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_saver_create(&sv, NULL, &err), 0);
    /* prev: one small tensor. */
    unsigned char small_ref[4096], small_buf[4096];
    rng r = { 99 };
    fill_random(small_ref, sizeof small_ref, &r);
    memcpy(small_buf, small_ref, sizeof small_buf);
    int64_t shape[1] = { 4096 };
    ckpt_piece sp = { "tiny", CKPT_U8, 1, shape, NULL, NULL, small_buf };
    ckpt_save *h;
    ck_assert_int_eq(ckpt_save_async(sv, prev, &sp, 1, NULL, &h, &err), 0);
    memset(small_buf, 0, sizeof small_buf);
    ck_assert_msg(ckpt_save_wait(h, &err) == 0, "%s", err.msg);
    /* The full state does not fit. */
    state s;
    state_init(&s, 8);
    int rc = save_scribble(sv, dir, &s, NULL, &err);
    ck_assert_msg(rc == -ENOSPC, "rc %d: %s", rc, err.msg);
    ck_assert_msg(strstr(err.msg, "No space left") != NULL, "%s", err.msg);
    check_nothing(dir);
    /* prev is intact. */
    ckpt_reader *rd;
    ck_assert_int_eq(ckpt_reader_open(&rd, prev, NULL, &err), 0);
    unsigned char got[4096];
    ck_assert_int_eq(ckpt_load_region(rd, 0, NULL, NULL, got, &err), 0);
    ck_assert_mem_eq(got, small_ref, sizeof got);
    ckpt_reader_close(rd);
    state_free(&s);
    ckpt_saver_destroy(sv);
}
END_TEST

/* ------------------------------------------------------------ ckpt_save_sync
 * The synchronous save shares the async path's checks and cleanup: the
 * same state reads back; the same refusals come at once with nothing
 * made; failures after writing began leave nothing behind. */

static ckpt_save_opts step_opts(void)
{
    static const char *k[] = { "step" }, *v[] = { "5" };
    ckpt_save_opts o;
    ckpt_save_opts_init(&o);
    o.meta_keys = k;
    o.meta_values = v;
    o.nmeta = 1;
    return o;
}

START_TEST(test_sync_roundtrip)
{
    char *tmp = make_tmpdir(), dir[4096], path[4096];
    join(dir, tmp, "ck");
    state s;
    state_init(&s, 11);
    ckpt_save_opts o = step_opts();
    ckpt_error err = { 0 };
    ck_assert_msg(ckpt_save_sync(dir, s.p, s.np, &o, &err) == 0, "%s",
                  err.msg);
    check_state(dir, &s);
    join(path, dir, "data/rank0.shard");
    ck_assert(exists(path));
    join(path, dir, ".pending");
    ck_assert(!exists(path));
    ckpt_reader *r;
    ck_assert_int_eq(ckpt_reader_open(&r, dir, NULL, &err), 0);
    ck_assert_str_eq(ckpt_reader_meta_get(r, "step"), "5");
    ck_assert_str_eq(ckpt_reader_meta_get(r, "world_size"), "1");
    ckpt_reader_close(r);
    /* A byte object is a piece of dtype bytes; into an existing empty
     * directory. */
    char blob[] = "rng-state\0\377", got[sizeof blob];
    int64_t len[1] = { sizeof blob };
    ckpt_piece bp = { "rng", CKPT_BYTES, 1, len, NULL, NULL, blob };
    join(dir, tmp, "bytes");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_msg(ckpt_save_sync(dir, &bp, 1, NULL, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(ckpt_reader_open(&r, dir, NULL, &err), 0);
    ckpt_tensor_info ti;
    ck_assert_int_eq(ckpt_reader_info(r, 0, &ti), 0);
    ck_assert_int_eq(ti.dtype, CKPT_BYTES);
    ck_assert_int_eq(ckpt_read(r, 0, got, 0, sizeof got, &err),
                     (int64_t)sizeof got);
    ck_assert_mem_eq(got, blob, sizeof blob);
    ckpt_reader_close(r);
    state_free(&s);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_sync_refused_first)
{
    char *tmp = make_tmpdir(), prev[4096], dir[4096], path[4096];
    join(prev, tmp, "prev");
    join(dir, tmp, "new");
    state p, s;
    state_init(&p, 12);
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_save_sync(prev, p.p, p.np, NULL, &err), 0);
    /* A committed target, an unfinished save: refused, nothing touched. */
    state_init(&s, 13);
    ck_assert_int_eq(ckpt_save_sync(prev, s.p, s.np, NULL, &err), -EEXIST);
    ck_assert_ptr_nonnull(strstr(err.msg, "already a committed"));
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    join(path, dir, ".pending");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert_int_eq(ckpt_save_sync(dir, s.p, s.np, NULL, &err), -EBUSY);
    ck_assert_ptr_nonnull(strstr(err.msg, "unfinished save"));
    ck_assert(exists(path));
    ck_assert_int_eq(rmdir(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    /* Malformed pieces: refused before the directory is made. */
    for (int kind = 0; kind < 4; kind++) {
        state b;
        state_init(&b, 14);
        const char *want = "model.w";
        if (kind == 0) {
            b.woff[2][0] = 250;          /* past the tensor's rows */
        } else if (kind == 1) {
            b.p[3].data = NULL;          /* no data */
            want = "model.b";
        } else if (kind == 2) {
            b.p[4].dtype = (ckpt_dtype)77;
            want = "opt.step";
        } else {
            b.p[4].fqn = "a..b";
            want = "a..b";
        }
        ck_assert_int_eq(ckpt_save_sync(dir, b.p, b.np, NULL, &err), -EINVAL);
        ck_assert_msg(strstr(err.msg, want), "kind %d: '%s' does not name %s",
                      kind, err.msg, want);
        ck_assert_msg(!exists(dir), "kind %d made %s", kind, dir);
        state_free(&b);
    }
    ck_assert_int_eq(ckpt_save_sync(NULL, NULL, 0, NULL, &err), -EINVAL);
    ck_assert_int_eq(ckpt_save_sync(dir, NULL, 2, NULL, &err), -EINVAL);
    check_state(prev, &p);
    state_free(&s);
    state_free(&p);
    remove_tmpdir(tmp);
}
END_TEST

START_TEST(test_sync_late_failures)
{
    char *tmp = make_tmpdir(), prev[4096], dir[4096];
    join(prev, tmp, "prev");
    join(dir, tmp, "bad");
    state p;
    state_init(&p, 15);
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_save_sync(prev, p.p, p.np, NULL, &err), 0);
    for (int pre = 0; pre < 2; pre++) {
        for (int kind = 0; kind < 4; kind++) {
            state s;
            state_init(&s, 16);
            ckpt_save_opts o = step_opts();
            static const char *rk[] = { "created" }, *rv[] = { "x" };
            const char *want = "model.w";
            if (kind == 0) {          /* a hole: the middle row missing */
                s.p[1] = s.p[--s.np];
            } else if (kind == 1) {   /* pieces that partly overlap */
                s.woff[1][0] = 50;
            } else if (kind == 2) {   /* one fqn, two dtypes */
                s.p[4].fqn = "model.b";
                want = "model.b";
            } else {                  /* a reserved metadata key */
                o.meta_keys = rk;
                o.meta_values = rv;
                want = "created";
            }
            if (pre)
                ck_assert_int_eq(mkdir(dir, 0755), 0);
            ck_assert_int_eq(ckpt_save_sync(dir, s.p, s.np, &o, &err),
                             -EINVAL);
            ck_assert_msg(strstr(err.msg, want), "kind %d: '%s' does not "
                          "name %s", kind, err.msg, want);
            if (pre) {                /* the directory stays, empty */
                ck_assert_int_ne(ckpt_dir_probe(dir), CKPT_DIR_COMMITTED);
                ck_assert_int_eq(rmdir(dir), 0);
            }
            check_nothing(dir);
            state_free(&s);
        }
    }
    check_state(prev, &p);
    state s;                          /* and the name can be saved now */
    state_init(&s, 17);
    ck_assert_msg(ckpt_save_sync(dir, s.p, s.np, NULL, &err) == 0, "%s",
                  err.msg);
    check_state(dir, &s);
    state_free(&s);
    state_free(&p);
    remove_tmpdir(tmp);
}
END_TEST

/* A checkpoint of state s (seed) saved synchronously into tmp/ck, open;
 * *tmp to remove. */
static ckpt_reader *saved_state(state *s, uint64_t seed, char **tmp)
{
    char d[4096];
    ckpt_error err = { 0 };
    *tmp = make_tmpdir();
    join(d, *tmp, "ck");
    state_init(s, seed);
    ck_assert_msg(ckpt_save_sync(d, s->p, s->np, NULL, &err) == 0, "%s",
                  err.msg);
    ckpt_reader *r;
    ck_assert_int_eq(ckpt_reader_open(&r, d, NULL, &err), 0);
    return r;
}

/* ckpt_load_batch with host destinations: what ckpt_read_region gives,
 * item by item; every item checked before any byte is written. */
START_TEST(test_load_batch_host)
{
    char *tmp;
    state s;
    ckpt_error err = { 0 };
    ckpt_reader *r = saved_state(&s, 5, &tmp);
    size_t iw = (size_t)ckpt_reader_find(r, "model.w");
    size_t ib = (size_t)ckpt_reader_find(r, "model.b");
    size_t ie = (size_t)ckpt_reader_find(r, "empty");
    unsigned char *w = malloc(ROWS * COLS * 4), b[2000];
    float reg[5 * 7];
    int64_t off[2] = { 98, 250 }, size[2] = { 5, 7 };
    ckpt_read_item items[4] = {
        { iw, NULL, NULL, w }, { ib, NULL, NULL, b }, { iw, off, size, reg },
        { ie, NULL, NULL, NULL },            /* nothing to read: no dst */
    };
    ck_assert_msg(ckpt_load_batch(r, items, 4, &err) == 0, "%s", err.msg);
    ck_assert_mem_eq(w, s.ref_w, ROWS * COLS * 4);
    ck_assert_mem_eq(b, s.ref_b, 2000);
    for (int i = 0; i < 5; i++)
        ck_assert_mem_eq(&reg[i * 7],
                         s.ref_w + ((size_t)(98 + i) * COLS + 250) * 4, 28);
    /* A region past the end, as item 2 of 3: refused by name, before
     * item 0 is read. */
    memset(w, 0, ROWS * COLS * 4);
    int64_t bad_off[2] = { 296, 0 };
    items[2].offsets = bad_off;
    ck_assert_int_eq(ckpt_load_batch(r, items, 3, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "item 2 of 3") &&
                  strstr(err.msg, "model.w"), "%s", err.msg);
    for (size_t i = 0; i < ROWS * COLS * 4; i++)
        ck_assert_int_eq(w[i], 0);
    /* Memory that is neither host memory nor a device's: -EFAULT. */
    items[2] = (ckpt_read_item){ ib, NULL, NULL, (void *)16 };
    ck_assert_int_eq(ckpt_load_batch(r, items + 1, 2, &err), -EFAULT);
    ck_assert_msg(strstr(err.msg, "item 1 of 2") &&
                  strstr(err.msg, "model.b"), "%s", err.msg);
    ck_assert_int_eq(ckpt_load_batch(NULL, items, 1, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "ckpt_load_batch: reader"), "%s", err.msg);
    ck_assert_int_eq(ckpt_load_batch(r, NULL, 1, &err), -EINVAL);
    ck_assert_int_eq(ckpt_load_batch(r, NULL, 0, &err), 0);
    ckpt_reader_close(r);
    free(w);
    state_free(&s);
    remove_tmpdir(tmp);
}
END_TEST

/* ckpt_saver_reserve makes the staging now: past the address space a
 * test gives it, it fails with ENOMEM naming the reservation, and the
 * saver still saves (from what it could make, and more as needed). */
START_TEST(test_reserve)
{
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_saver_reserve(NULL, 1, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, "ckpt_saver_reserve: saver"), "%s",
                  err.msg);
    ckpt_saver *sv;
    ck_assert_int_eq(ckpt_saver_create(&sv, NULL, &err), 0);
    ck_assert_int_eq(ckpt_saver_reserve(sv, (uint64_t)1 << 62, &err),
                     -ENOMEM);            /* a size in the wrong unit */
    ck_assert_msg(strstr(err.msg, "more than this machine's memory"), "%s",
                  err.msg);
    ck_assert_msg(ckpt_saver_reserve(sv, (uint64_t)64 << 20, &err) == 0,
                  "%s", err.msg);
#if UNDER_ASAN
    /* ASan's shadow memory needs terabytes of address space. */
    printf("test_reserve: the ENOMEM case is left out under "
           "AddressSanitizer\n");
#else
    /* Half the machine's memory, in an address space of 2 GiB. */
    uint64_t half = (uint64_t)sysconf(_SC_PHYS_PAGES) *
                    (uint64_t)sysconf(_SC_PAGESIZE) / 2;
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_AS, &rl), 0);
    struct rlimit small = { (rlim_t)2 << 30, rl.rlim_max };
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &small), 0);
    int rc = ckpt_saver_reserve(sv, half, &err);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
    ck_assert_int_eq(rc, -ENOMEM);
    ck_assert_msg(strstr(err.msg, "reserving"), "%s", err.msg);
#endif
    char *tmp = make_tmpdir(), d[4096];
    join(d, tmp, "ck");
    state s;
    state_init(&s, 9);
    ck_assert_msg(save_scribble(sv, d, &s, NULL, &err) == 0, "%s", err.msg);
    check_state(d, &s);
    ckpt_saver_destroy(sv);
    state_free(&s);
    remove_tmpdir(tmp);
}
END_TEST

static int g_freed[2];

static void count_free(void *obj)
{
    g_freed[*(int *)obj]++;
}

/* The reader's slot for the device loads' bounce buffers: one object at
 * a time, a second one put back is freed at once, close frees the one
 * kept. */
START_TEST(test_reader_attached)
{
    char *tmp;
    state s;
    ckpt_reader *r = saved_state(&s, 6, &tmp);
    int a = 0, b = 1;
    ck_assert_ptr_null(ckpt_reader_attached_take(r));
    ckpt_reader_attached_put(r, &a, count_free);
    ck_assert_ptr_eq(ckpt_reader_attached_take(r), &a);
    ck_assert_ptr_null(ckpt_reader_attached_take(r));   /* taken */
    ckpt_reader_attached_put(r, &a, count_free);
    ckpt_reader_attached_put(r, &b, count_free);        /* slot full */
    ck_assert_int_eq(g_freed[1], 1);
    ck_assert_int_eq(g_freed[0], 0);
    ckpt_reader_close(r);
    ck_assert_int_eq(g_freed[0], 1);
    state_free(&s);
    remove_tmpdir(tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("async");
    TCase *tc = tcase_create("async");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_scribble_default);
    tcase_add_test(tc, test_scribble_small_cap);
    tcase_add_test(tc, test_scribble_tiny_cap);
    tcase_add_test(tc, test_queue_depth);
    tcase_add_test(tc, test_planner_errors);
    tcase_add_test(tc, test_refused_at_start);
    tcase_add_test(tc, test_sync_roundtrip);
    tcase_add_test(tc, test_sync_refused_first);
    tcase_add_test(tc, test_sync_late_failures);
    tcase_add_test(tc, test_load_batch_host);
    suite_add_tcase(s, tc);
    tcase_add_test(tc, test_reserve);
    tcase_add_test(tc, test_reader_attached);
    TCase *tt = tcase_create("tiny caps");
    tcase_set_timeout(tt, 20);
    tcase_add_test(tt, test_tiny_caps);
    suite_add_tcase(s, tt);
    if (getenv("CKPT_TEST_SMALLFS")) {
        TCase *te = tcase_create("enospc");
        tcase_set_timeout(te, 300);
        tcase_add_test(te, test_enospc);
        suite_add_tcase(s, te);
    }
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
