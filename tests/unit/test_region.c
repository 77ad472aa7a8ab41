/*
 * test_region.c - unit tests for region.c: box intersection, containment
 * and linear indices; run enumeration checked against a naive
 * element-by-element copy on thousands of random boxes (and for maximal
 * runs); the linear-range-to-boxes decomposition checked element by
 * element; and NumPy-style slice parsing.
 *
 * The random tests use a fixed seed, printed; set CKPT_TEST_SEED to try
 * another one.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "common/region.h"
#include "unit_util.h"

#define MAXD 5          /* dims in the random tests */
#define MAXS 7          /* largest dim in the random tests */
#define DEFAULT_SEED 0x5eed2024u

/* Check's ck_assert records every passing assertion through a pipe write;
 * the random loops check millions of conditions, so they only call into
 * Check on failure. */
#define REQUIRE(c)                                                          \
    do {                                                                    \
        if (!(c))                                                           \
            ck_abort_msg("%s:%d: assertion failed: %s", __FILE__, __LINE__, \
                         #c);                                               \
    } while (0)
#define REQUIRE_MSG(c, ...)                                                 \
    do {                                                                    \
        if (!(c))                                                           \
            ck_abort_msg(__VA_ARGS__);                                      \
    } while (0)

/* ------------------------------------------------------------ random */

/* ------------------------------------------------------- naive helpers */

static uint64_t naive_numel(int ndim, const int64_t *size)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (uint64_t)size[i];
    return n;
}

/* Coordinates (relative) of element k of a row-major box of these sizes. */
static void naive_unravel(int ndim, const int64_t *size, uint64_t k,
                          int64_t *rel)
{
    for (int i = ndim - 1; i >= 0; i--) {
        rel[i] = (int64_t)(k % (uint64_t)size[i]);
        k /= (uint64_t)size[i];
    }
}

/* Row-major index of global point p in box (off, size). */
static uint64_t naive_index(int ndim, const int64_t *off, const int64_t *size,
                            const int64_t *p)
{
    uint64_t k = 0;
    for (int i = 0; i < ndim; i++)
        k = k * (uint64_t)size[i] + (uint64_t)(p[i] - off[i]);
    return k;
}

/* ------------------------------------------------------------- boxes */

START_TEST(box_numel_cases)
{
    int64_t a[] = {3, 4, 5};
    ck_assert_uint_eq(ckpt_box_numel(3, a), 60);
    ck_assert_uint_eq(ckpt_box_numel(0, NULL), 1);
    int64_t z[] = {3, 0, 5};
    ck_assert_uint_eq(ckpt_box_numel(3, z), 0);
}
END_TEST

START_TEST(box_intersect_cases)
{
    int64_t ao[] = {0, 10}, as[] = {10, 10};
    int64_t bo[] = {5, 15}, bs[] = {10, 2};
    int64_t oo[2], os[2];
    ck_assert_int_eq(ckpt_box_intersect(2, ao, as, bo, bs, oo, os), 1);
    ck_assert_int_eq(oo[0], 5);
    ck_assert_int_eq(os[0], 5);
    ck_assert_int_eq(oo[1], 15);
    ck_assert_int_eq(os[1], 2);
    /* Touching is not overlapping. */
    int64_t co[] = {10, 10}, cs[] = {5, 5};
    ck_assert_int_eq(ckpt_box_intersect(2, ao, as, co, cs, oo, os), 0);
    /* Disjoint in one dim only. */
    int64_t dd_o[] = {2, 30}, dd_s[] = {3, 3};
    ck_assert_int_eq(ckpt_box_intersect(2, ao, as, dd_o, dd_s, oo, os), 0);
    /* An empty box meets nothing. */
    int64_t eo[] = {2, 12}, es[] = {0, 3};
    ck_assert_int_eq(ckpt_box_intersect(2, ao, as, eo, es, oo, os), 0);
    /* Scalars always meet. */
    ck_assert_int_eq(ckpt_box_intersect(0, NULL, NULL, NULL, NULL, NULL,
                                        NULL), 1);
    /* Huge offsets do not overflow. */
    int64_t ho[] = {INT64_MAX - 5}, hs[] = {INT64_MAX};
    int64_t io[] = {INT64_MAX - 2}, is[] = {1};
    ck_assert_int_eq(ckpt_box_intersect(1, ho, hs, io, is, oo, os), 1);
    ck_assert_int_eq(oo[0], INT64_MAX - 2);
    ck_assert_int_eq(os[0], 1);
}
END_TEST

START_TEST(box_contains_cases)
{
    int64_t oo[] = {0, 10}, os[] = {10, 10};
    int64_t a_o[] = {0, 10}, a_s[] = {10, 10};
    ck_assert_int_eq(ckpt_box_contains(2, oo, os, a_o, a_s), 1);
    int64_t b_o[] = {3, 12}, b_s[] = {7, 8};
    ck_assert_int_eq(ckpt_box_contains(2, oo, os, b_o, b_s), 1);
    int64_t c_o[] = {3, 12}, c_s[] = {8, 8};
    ck_assert_int_eq(ckpt_box_contains(2, oo, os, c_o, c_s), 0);
    int64_t d_o[] = {0, 9}, d_s[] = {1, 1};
    ck_assert_int_eq(ckpt_box_contains(2, oo, os, d_o, d_s), 0);
    int64_t e_o[] = {0, 19}, e_s[] = {1, 1};
    ck_assert_int_eq(ckpt_box_contains(2, oo, os, e_o, e_s), 1);
    int64_t f_o[] = {0, 20}, f_s[] = {1, 1};
    ck_assert_int_eq(ckpt_box_contains(2, oo, os, f_o, f_s), 0);
    int64_t g_o[] = {1, 11}, g_s[] = {1, -1};
    ck_assert_int_eq(ckpt_box_contains(2, oo, os, g_o, g_s), 0);
    int64_t h_o[] = {1, INT64_MAX}, h_s[] = {1, INT64_MAX};
    ck_assert_int_eq(ckpt_box_contains(2, oo, os, h_o, h_s), 0);
    ck_assert_int_eq(ckpt_box_contains(0, NULL, NULL, NULL, NULL), 1);
}
END_TEST

/* Random boxes: a point lies in the intersection iff it lies in both, and
 * the intersection is contained in both. */
START_TEST(box_random_intersect)
{
    srng r = srng_seeded("box_random_intersect", DEFAULT_SEED);
    for (int iter = 0; iter < 3000; iter++) {
        int ndim = (int)srng_range(&r, 1, MAXD);
        int64_t ao[MAXD], as[MAXD], bo[MAXD], bs[MAXD], oo[MAXD], os[MAXD];
        for (int i = 0; i < ndim; i++) {
            ao[i] = srng_range(&r, 0, 6);
            as[i] = srng_range(&r, 0, 6);
            bo[i] = srng_range(&r, 0, 6);
            bs[i] = srng_range(&r, 0, 6);
        }
        int got = ckpt_box_intersect(ndim, ao, as, bo, bs, oo, os);
        int any = 0;
        for (int k = 0; k < 20; k++) {
            int64_t p[MAXD];
            int in_a = 1, in_b = 1, in_o = got;
            for (int i = 0; i < ndim; i++) {
                p[i] = srng_range(&r, 0, 12);
                in_a &= p[i] >= ao[i] && p[i] < ao[i] + as[i];
                in_b &= p[i] >= bo[i] && p[i] < bo[i] + bs[i];
                if (got)
                    in_o &= p[i] >= oo[i] && p[i] < oo[i] + os[i];
            }
            REQUIRE((in_a && in_b) == in_o);
            any |= in_a && in_b;
        }
        if (any)
            REQUIRE(got == 1);
        if (got) {
            REQUIRE(ckpt_box_contains(ndim, ao, as, oo, os) == 1);
            REQUIRE(ckpt_box_contains(ndim, bo, bs, oo, os) == 1);
            for (int i = 0; i < ndim; i++)
                REQUIRE(os[i] > 0);
        }
    }
}
END_TEST

START_TEST(box_linear_cases)
{
    int64_t off[] = {10, 20, 30}, size[] = {3, 4, 5};
    int64_t p0[] = {10, 20, 30};
    ck_assert_uint_eq(ckpt_box_linear(3, off, size, p0), 0);
    int64_t p1[] = {12, 23, 34};
    ck_assert_uint_eq(ckpt_box_linear(3, off, size, p1), 59);
    int64_t p2[] = {11, 20, 31};
    ck_assert_uint_eq(ckpt_box_linear(3, off, size, p2), 21);
    ck_assert_uint_eq(ckpt_box_linear(0, NULL, NULL, NULL), 0);
    for (uint64_t k = 0; k < 60; k++) {
        int64_t rel[3], p[3];
        naive_unravel(3, size, k, rel);
        for (int i = 0; i < 3; i++)
            p[i] = off[i] + rel[i];
        REQUIRE(ckpt_box_linear(3, off, size, p) == k);
    }
}
END_TEST

/* -------------------------------------------------------------- runs */

typedef struct run_rec {
    uint64_t src, dst, n;
} run_rec;

typedef struct run_log {
    run_rec *runs;
    size_t count, cap;
    int stop_after;     /* return 42 from the stop_after-th call; 0 = never */
} run_log;

static int log_run(void *arg, uint64_t src, uint64_t dst, uint64_t n)
{
    run_log *log = arg;
    if (log->count == log->cap) {
        size_t cap = log->cap ? log->cap * 2 : 64;
        run_rec *p = realloc(log->runs, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        log->runs = p;
        log->cap = cap;
    }
    run_rec rec = {src, dst, n};
    log->runs[log->count++] = rec;
    if (log->stop_after && (int)log->count == log->stop_after)
        return 42;
    return 0;
}

/* Run length the merging rule predicts: the innermost dim, times each
 * further dim while the dims after it are spanned in full by r in both s
 * and d. */
static uint64_t predicted_run(int ndim, const int64_t *r, const int64_t *s,
                              const int64_t *d)
{
    if (ndim == 0)
        return 1;
    uint64_t n = (uint64_t)r[ndim - 1];
    for (int k = ndim - 1; k > 0 && r[k] == s[k] && r[k] == d[k]; k--)
        n *= (uint64_t)r[k - 1];
    return n;
}

START_TEST(runs_scalar)
{
    run_log log = {0};
    ck_assert_int_eq(ckpt_region_runs(0, NULL, NULL, NULL, NULL, NULL, NULL,
                                      log_run, &log), 0);
    ck_assert_uint_eq(log.count, 1);
    ck_assert_uint_eq(log.runs[0].src, 0);
    ck_assert_uint_eq(log.runs[0].dst, 0);
    ck_assert_uint_eq(log.runs[0].n, 1);
    free(log.runs);
}
END_TEST

/* Loading rows [2, 5) of a [10, 4, 5] tensor stored whole: one run. */
START_TEST(runs_slab_is_one_run)
{
    int64_t s_off[] = {0, 0, 0}, s_size[] = {10, 4, 5};
    int64_t r_off[] = {2, 0, 0}, r_size[] = {3, 4, 5};
    run_log log = {0};
    ck_assert_int_eq(ckpt_region_runs(3, r_off, r_size, s_off, s_size, r_off,
                                      r_size, log_run, &log), 0);
    ck_assert_uint_eq(log.count, 1);
    ck_assert_uint_eq(log.runs[0].src, 40);
    ck_assert_uint_eq(log.runs[0].dst, 0);
    ck_assert_uint_eq(log.runs[0].n, 60);
    free(log.runs);
}
END_TEST

/* A column block: one run per row, with the right strides. */
START_TEST(runs_column_block)
{
    int64_t s_off[] = {0, 0}, s_size[] = {4, 10};
    int64_t d_off[] = {1, 2}, d_size[] = {3, 5};
    int64_t r_off[] = {1, 3}, r_size[] = {3, 4};
    run_log log = {0};
    ck_assert_int_eq(ckpt_region_runs(2, r_off, r_size, s_off, s_size, d_off,
                                      d_size, log_run, &log), 0);
    ck_assert_uint_eq(log.count, 3);
    for (size_t i = 0; i < 3; i++) {
        ck_assert_uint_eq(log.runs[i].src, 13 + 10 * i);
        ck_assert_uint_eq(log.runs[i].dst, 1 + 5 * i);
        ck_assert_uint_eq(log.runs[i].n, 4);
    }
    free(log.runs);
}
END_TEST

START_TEST(runs_stop_propagates)
{
    int64_t off[] = {0, 0, 0}, s_size[] = {4, 4, 4};
    int64_t r_size[] = {4, 4, 2};
    run_log log = {0};
    log.stop_after = 3;
    ck_assert_int_eq(ckpt_region_runs(3, off, r_size, off, s_size, off,
                                      s_size, log_run, &log), 42);
    ck_assert_uint_eq(log.count, 3);
    log.count = 0;
    log.stop_after = 1;
    ck_assert_int_eq(ckpt_region_runs(0, NULL, NULL, NULL, NULL, NULL, NULL,
                                      log_run, &log), 42);
    ck_assert_uint_eq(log.count, 1);
    free(log.runs);
}
END_TEST

START_TEST(runs_empty_region_calls_nothing)
{
    int64_t off[] = {0, 0}, s_size[] = {4, 4}, r_size[] = {0, 4};
    run_log log = {0};
    ck_assert_int_eq(ckpt_region_runs(2, off, r_size, off, s_size, off,
                                      s_size, log_run, &log), 0);
    ck_assert_uint_eq(log.count, 0);
    free(log.runs);
}
END_TEST

/* A random box of size <= MAXS containing (r_off, r_size) per dim; full
 * (equal to r) about a third of the time so that merging is exercised. */
static void random_outer_box(srng *r, int ndim, const int64_t *r_off,
                             const int64_t *r_size, int64_t *off,
                             int64_t *size)
{
    int all_full = srng_range(r, 0, 3) == 0;
    for (int i = 0; i < ndim; i++) {
        if (all_full || srng_range(r, 0, 2) == 0) {
            size[i] = r_size[i];
            off[i] = r_off[i];
        } else {
            size[i] = srng_range(r, r_size[i], MAXS);
            off[i] = r_off[i] - srng_range(r, 0, size[i] - r_size[i]);
        }
    }
}

/* Buffers reused by every random case: boxes hold at most MAXS^MAXD
 * elements. */
typedef struct runs_work {
    uint32_t *src, *dst, *want;
    run_log log;
} runs_work;

#define WORK_ELEMS ((size_t)MAXS * MAXS * MAXS * MAXS * MAXS)

static void work_init(runs_work *w)
{
    memset(w, 0, sizeof *w);
    w->src = malloc(WORK_ELEMS * sizeof *w->src);
    w->dst = malloc(WORK_ELEMS * sizeof *w->dst);
    w->want = malloc(WORK_ELEMS * sizeof *w->want);
    ck_assert(w->src && w->dst && w->want);
    for (size_t i = 0; i < WORK_ELEMS; i++)
        w->src[i] = (uint32_t)i + 1;    /* unique values */
}

static void work_free(runs_work *w)
{
    free(w->src);
    free(w->dst);
    free(w->want);
    free(w->log.runs);
}

/* Checks the runs' order, maximality and count, and copies them. */
static void apply_runs(const run_log *log, const uint32_t *src, uint32_t *dst,
                       uint64_t sn, uint64_t dn, uint64_t rn, uint64_t len)
{
    uint64_t total = 0;
    for (size_t i = 0; i < log->count; i++) {
        const run_rec *run = &log->runs[i];
        REQUIRE(run->n > 0);
        REQUIRE(run->src + run->n <= sn);
        REQUIRE(run->dst + run->n <= dn);
        memcpy(dst + run->dst, src + run->src, run->n * sizeof *src);
        total += run->n;
        if (i > 0) {
            const run_rec *prev = &log->runs[i - 1];
            /* Row-major order of r: both sides move forward. */
            REQUIRE(run->src >= prev->src + prev->n);
            REQUIRE(run->dst >= prev->dst + prev->n);
            /* Maximal: two runs adjacent on both sides would be one. */
            REQUIRE(!(run->src == prev->src + prev->n &&
                      run->dst == prev->dst + prev->n));
        }
    }
    REQUIRE(total == rn);
    REQUIRE(log->count == rn / len);
}

/* Copies r from box s to box d through ckpt_region_runs and compares with
 * a naive copy of every element of r. */
static void check_runs_case(runs_work *w, int ndim, const int64_t *r_off,
                            const int64_t *r_size, const int64_t *s_off,
                            const int64_t *s_size, const int64_t *d_off,
                            const int64_t *d_size)
{
    uint64_t sn = naive_numel(ndim, s_size), dn = naive_numel(ndim, d_size);
    uint64_t rn = naive_numel(ndim, r_size);
    REQUIRE(sn <= WORK_ELEMS);
    REQUIRE(dn <= WORK_ELEMS);
    memset(w->dst, 0, dn * sizeof *w->dst);
    memset(w->want, 0, dn * sizeof *w->want);
    w->log.count = 0;
    REQUIRE(ckpt_region_runs(ndim, r_off, r_size, s_off, s_size, d_off,
                             d_size, log_run, &w->log) == 0);
    apply_runs(&w->log, w->src, w->dst, sn, dn, rn,
               predicted_run(ndim, r_size, s_size, d_size));
    for (uint64_t k = 0; k < rn; k++) {
        int64_t rel[CKPT_MAX_DIMS], p[CKPT_MAX_DIMS];
        naive_unravel(ndim, r_size, k, rel);
        for (int i = 0; i < ndim; i++)
            p[i] = r_off[i] + rel[i];
        w->want[naive_index(ndim, d_off, d_size, p)] =
            w->src[naive_index(ndim, s_off, s_size, p)];
    }
    REQUIRE(memcmp(w->dst, w->want, dn * sizeof *w->dst) == 0);
}

START_TEST(runs_random_vs_naive)
{
    srng r = srng_seeded("runs_random_vs_naive", DEFAULT_SEED);
    runs_work w;
    work_init(&w);
    int one_run = 0, many = 0;
    for (int iter = 0; iter < 20000; iter++) {
        int ndim = (int)srng_range(&r, 0, MAXD);
        int64_t r_off[MAXD], r_size[MAXD], s_off[MAXD], s_size[MAXD];
        int64_t d_off[MAXD], d_size[MAXD];
        for (int i = 0; i < ndim; i++) {
            r_size[i] = srng_range(&r, 1, MAXS);
            r_off[i] = srng_range(&r, 0, 8);
        }
        random_outer_box(&r, ndim, r_off, r_size, s_off, s_size);
        random_outer_box(&r, ndim, r_off, r_size, d_off, d_size);
        REQUIRE(ckpt_box_contains(ndim, s_off, s_size, r_off, r_size));
        REQUIRE(ckpt_box_contains(ndim, d_off, d_size, r_off, r_size));
        check_runs_case(&w, ndim, r_off, r_size, s_off, s_size, d_off, d_size);
        uint64_t len = predicted_run(ndim, r_size, s_size, d_size);
        if (len == naive_numel(ndim, r_size))
            one_run++;
        else
            many++;
    }
    work_free(&w);
    /* The generator exercised both whole-copy and strided cases. */
    REQUIRE(one_run > 2000);
    REQUIRE(many > 2000);
}
END_TEST

/* ------------------------------------------------------ linear boxes */

typedef struct box_log {
    int ndim;
    const int64_t *shape;
    uint64_t next;      /* the linear index the next element must have */
    int count;
    int stop_after;
    int bad;            /* set on a box outside the shape or empty */
} box_log;

/* Walks the box in row-major order and checks that its elements are
 * exactly the next ones of the range. */
static int check_box(void *arg, const int64_t *off, const int64_t *size)
{
    box_log *log = arg;
    log->count++;
    for (int i = 0; i < log->ndim; i++) {
        if (size[i] < 1 || off[i] < 0 || off[i] + size[i] > log->shape[i])
            log->bad = 1;
    }
    if (log->bad)
        return 0;
    uint64_t n = naive_numel(log->ndim, size);
    for (uint64_t k = 0; k < n; k++) {
        int64_t rel[CKPT_MAX_DIMS], p[CKPT_MAX_DIMS];
        naive_unravel(log->ndim, size, k, rel);
        for (int i = 0; i < log->ndim; i++)
            p[i] = off[i] + rel[i];
        uint64_t lin = 0;
        for (int i = 0; i < log->ndim; i++)
            lin = lin * (uint64_t)log->shape[i] + (uint64_t)p[i];
        if (lin != log->next)
            log->bad = 1;
        log->next++;
    }
    if (log->stop_after && log->count == log->stop_after)
        return 7;
    return 0;
}

static int decompose(int ndim, const int64_t *shape, uint64_t lo,
                     uint64_t hi, box_log *log)
{
    memset(log, 0, sizeof *log);
    log->ndim = ndim;
    log->shape = shape;
    log->next = lo;
    return ckpt_region_linear_boxes(ndim, shape, lo, hi, check_box, log);
}

START_TEST(boxes_cases)
{
    box_log log;
    int64_t sh[] = {4, 4, 4};
    /* Worst case: 2*ndim - 1 boxes. */
    ck_assert_int_eq(decompose(3, sh, 1, 63, &log), 0);
    ck_assert_int_eq(log.bad, 0);
    ck_assert_uint_eq(log.next, 63);
    ck_assert_int_eq(log.count, 5);
    /* The whole tensor is one box. */
    ck_assert_int_eq(decompose(3, sh, 0, 64, &log), 0);
    ck_assert_int_eq(log.count, 1);
    ck_assert_uint_eq(log.next, 64);
    ck_assert_int_eq(log.bad, 0);
    /* Whole middle slabs are one box. */
    ck_assert_int_eq(decompose(3, sh, 16, 48, &log), 0);
    ck_assert_int_eq(log.count, 1);
    /* Inside one row. */
    ck_assert_int_eq(decompose(3, sh, 5, 7, &log), 0);
    ck_assert_int_eq(log.count, 1);
    ck_assert_uint_eq(log.next, 7);
    ck_assert_int_eq(log.bad, 0);
    /* Empty ranges. */
    ck_assert_int_eq(decompose(3, sh, 9, 9, &log), 0);
    ck_assert_int_eq(log.count, 0);
    ck_assert_int_eq(decompose(3, sh, 10, 9, &log), 0);
    ck_assert_int_eq(log.count, 0);
    /* A shape with a zero dim has nothing. */
    int64_t z[] = {4, 0, 4};
    ck_assert_int_eq(decompose(3, z, 0, 16, &log), 0);
    ck_assert_int_eq(log.count, 0);
    /* A scalar. */
    ck_assert_int_eq(decompose(0, NULL, 0, 1, &log), 0);
    ck_assert_int_eq(log.count, 1);
    ck_assert_uint_eq(log.next, 1);
    ck_assert_int_eq(decompose(0, NULL, 1, 1, &log), 0);
    ck_assert_int_eq(log.count, 0);
    /* 1-D. */
    int64_t v[] = {100};
    ck_assert_int_eq(decompose(1, v, 13, 77, &log), 0);
    ck_assert_int_eq(log.count, 1);
    ck_assert_uint_eq(log.next, 77);
    ck_assert_int_eq(log.bad, 0);
    /* A stop from the callback is returned. */
    memset(&log, 0, sizeof log);
    log.ndim = 3;
    log.shape = sh;
    log.next = 1;
    log.stop_after = 2;
    ck_assert_int_eq(ckpt_region_linear_boxes(3, sh, 1, 63, check_box, &log),
                     7);
    ck_assert_int_eq(log.count, 2);
    /* An invalid shape is refused. */
    int64_t neg[] = {4, -1};
    ck_assert_int_eq(decompose(2, neg, 0, 1, &log), -EINVAL);
}
END_TEST

START_TEST(boxes_random)
{
    srng r = srng_seeded("boxes_random", DEFAULT_SEED);
    int nonempty = 0;
    for (int iter = 0; iter < 20000; iter++) {
        int ndim = (int)srng_range(&r, 0, MAXD);
        int64_t shape[MAXD];
        for (int i = 0; i < ndim; i++) {
            int64_t roll = srng_range(&r, 0, 9);
            shape[i] = roll == 0 ? 0 : roll <= 2 ? 1 : srng_range(&r, 2, MAXS);
        }
        /* Mostly non-empty shapes: zero dims a tenth of the time. */
        if (srng_range(&r, 0, 9) != 0) {
            for (int i = 0; i < ndim; i++)
                if (shape[i] == 0)
                    shape[i] = 1;
        }
        uint64_t numel = naive_numel(ndim, shape);
        uint64_t lo = (uint64_t)srng_range(&r, 0, (int64_t)numel);
        uint64_t hi = (uint64_t)srng_range(&r, (int64_t)lo, (int64_t)numel);
        switch (srng_range(&r, 0, 5)) {
        case 0: lo = 0; break;
        case 1: hi = numel; break;
        default: break;
        }
        box_log log;
        REQUIRE(decompose(ndim, shape, lo, hi, &log) == 0);
        REQUIRE_MSG(!log.bad, "iter %d: bad box for [%" PRIu64 ",%" PRIu64
                    ")", iter, lo, hi);
        REQUIRE(log.next == (hi > lo ? hi : lo));
        int bound = ndim == 0 ? 1 : 2 * ndim - 1;
        REQUIRE(log.count <= bound);
        if (lo == 0 && hi == numel && numel > 0)
            REQUIRE(log.count == 1);
        nonempty += hi > lo;
    }
    REQUIRE(nonempty > 10000);
}
END_TEST

/* ------------------------------------------------------------- slices */

static int slice(const char *spec, int ndim, const int64_t *shape,
                 int64_t *off, int64_t *size)
{
    return ckpt_slice_parse(spec, ndim, shape, off, size, NULL);
}

static void expect_slice(const char *spec, const int64_t *want_off,
                         const int64_t *want_size)
{
    int64_t shape[] = {10, 20, 30}, off[3], size[3];
    ckpt_error err = {0};
    int rc = ckpt_slice_parse(spec, 3, shape, off, size, &err);
    ck_assert_msg(rc == 0, "'%s': %d %s", spec, rc, err.msg);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(off[i] == want_off[i] && size[i] == want_size[i],
                      "'%s' dim %d: got %lld+%lld, want %lld+%lld", spec, i,
                      (long long)off[i], (long long)size[i],
                      (long long)want_off[i], (long long)want_size[i]);
    }
}

START_TEST(slice_valid)
{
    expect_slice("0:10,:,5:7", (int64_t[]){0, 0, 5}, (int64_t[]){10, 20, 2});
    expect_slice("", (int64_t[]){0, 0, 0}, (int64_t[]){10, 20, 30});
    expect_slice("   ", (int64_t[]){0, 0, 0}, (int64_t[]){10, 20, 30});
    expect_slice("3", (int64_t[]){3, 0, 0}, (int64_t[]){1, 20, 30});
    expect_slice("-1", (int64_t[]){9, 0, 0}, (int64_t[]){1, 20, 30});
    expect_slice("-10", (int64_t[]){0, 0, 0}, (int64_t[]){1, 20, 30});
    expect_slice("-4:", (int64_t[]){6, 0, 0}, (int64_t[]){4, 20, 30});
    expect_slice(":-1", (int64_t[]){0, 0, 0}, (int64_t[]){9, 20, 30});
    expect_slice(":", (int64_t[]){0, 0, 0}, (int64_t[]){10, 20, 30});
    expect_slice(":,:,:", (int64_t[]){0, 0, 0}, (int64_t[]){10, 20, 30});
    expect_slice(" 2 : 5 , : , 29 ", (int64_t[]){2, 0, 29},
                 (int64_t[]){3, 20, 1});
    expect_slice("1,2,3", (int64_t[]){1, 2, 3}, (int64_t[]){1, 1, 1});
    expect_slice("-3:-1,-5:", (int64_t[]){7, 15, 0}, (int64_t[]){2, 5, 30});
    expect_slice("+2:+4", (int64_t[]){2, 0, 0}, (int64_t[]){2, 20, 30});
    /* Ranges clamp as NumPy does. */
    expect_slice("5:2", (int64_t[]){5, 0, 0}, (int64_t[]){0, 20, 30});
    expect_slice("100:", (int64_t[]){10, 0, 0}, (int64_t[]){0, 20, 30});
    expect_slice(":100", (int64_t[]){0, 0, 0}, (int64_t[]){10, 20, 30});
    expect_slice("-100:3", (int64_t[]){0, 0, 0}, (int64_t[]){3, 20, 30});
    expect_slice("-100:-50", (int64_t[]){0, 0, 0}, (int64_t[]){0, 20, 30});
    expect_slice("9223372036854775807:", (int64_t[]){10, 0, 0},
                 (int64_t[]){0, 20, 30});
    expect_slice("-9223372036854775807:", (int64_t[]){0, 0, 0},
                 (int64_t[]){10, 20, 30});
}
END_TEST

START_TEST(slice_errors)
{
    static const char *const bad[] = {
        "1,2,3,4", "0:10:2", "::", "::1", "0:5:", "...", "...,1", "a",
        "1:b", "10", "-11", "1,,2", "1,", ",1", "1 2", "--1", "-", "+",
        "1:2 3", "99999999999999999999", "1;2", "[1]", "1:-", "0x1",
    };
    int64_t shape[] = {10, 20, 30}, off[3], size[3];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ckpt_error err = {0};
        int rc = ckpt_slice_parse(bad[i], 3, shape, off, size, &err);
        ck_assert_msg(rc == -EINVAL, "'%s' gave %d", bad[i], rc);
        ck_assert_int_eq(err.code, -EINVAL);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        ck_assert_msg(strstr(err.msg, quoted) != NULL,
                      "message '%s' does not quote %s", err.msg, quoted);
    }
    ckpt_error err = {0};
    ck_assert_int_eq(ckpt_slice_parse("0:1:2", 3, shape, off, size, &err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "step"));
    ck_assert_int_eq(ckpt_slice_parse("12", 3, shape, off, size, &err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of range"));
    /* The shape is written as docs/CLI.md writes shapes. */
    ck_assert_ptr_nonnull(strstr(err.msg, "for shape 10,20,30: "));
    ck_assert_ptr_null(strstr(err.msg, "["));
    ck_assert_int_eq(ckpt_slice_parse("0", 0, NULL, off, size, &err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "for shape (): "));
}
END_TEST

START_TEST(slice_edge_shapes)
{
    int64_t off[2], size[2];
    /* A scalar accepts only the empty spec. */
    ck_assert_int_eq(slice("", 0, NULL, off, size), 0);
    ck_assert_int_eq(slice(" ", 0, NULL, off, size), 0);
    ck_assert_int_eq(slice("0", 0, NULL, off, size), -EINVAL);
    ck_assert_int_eq(slice(":", 0, NULL, off, size), -EINVAL);
    /* An empty dim: ranges are empty, indices are out of range. */
    int64_t z[] = {0, 3};
    ck_assert_int_eq(slice(":", 2, z, off, size), 0);
    ck_assert_int_eq(off[0], 0);
    ck_assert_int_eq(size[0], 0);
    ck_assert_int_eq(size[1], 3);
    ck_assert_int_eq(slice("0", 2, z, off, size), -EINVAL);
    ck_assert_int_eq(slice("-1", 2, z, off, size), -EINVAL);
    /* Invalid shapes are refused. */
    int64_t neg[] = {-1, 3};
    ck_assert_int_eq(slice("", 2, neg, off, size), -EINVAL);
    ck_assert_int_eq(slice("", -1, neg, off, size), -EINVAL);
    /* NULL means the whole tensor. */
    int64_t sh[] = {5, 6};
    ck_assert_int_eq(slice(NULL, 2, sh, off, size), 0);
    ck_assert_int_eq(size[0], 5);
    ck_assert_int_eq(size[1], 6);
}
END_TEST

/* Random slices against a direct computation of Python's clamping. */
START_TEST(slice_random)
{
    srng r = srng_seeded("slice_random", DEFAULT_SEED);
    for (int iter = 0; iter < 3000; iter++) {
        int ndim = (int)srng_range(&r, 1, MAXD);
        int nent = (int)srng_range(&r, 1, ndim);
        int64_t shape[MAXD], off[MAXD], size[MAXD];
        int64_t want_off[MAXD], want_size[MAXD];
        char spec[256] = "";
        size_t len = 0;
        for (int i = 0; i < ndim; i++) {
            shape[i] = srng_range(&r, 0, 9);
            want_off[i] = 0;
            want_size[i] = shape[i];
        }
        int ok = 1;
        for (int i = 0; i < nent; i++) {
            int64_t n = shape[i], a = srng_range(&r, -12, 12);
            int64_t b = srng_range(&r, -12, 12);
            int form = (int)srng_range(&r, 0, 3);
            const char *sep = i ? "," : "";
            if (form == 0) {        /* index */
                len += (size_t)snprintf(spec + len, sizeof spec - len,
                                        "%s%lld", sep, (long long)a);
                int64_t k = a < 0 ? a + n : a;
                if (k < 0 || k >= n)
                    ok = 0;
                want_off[i] = k;
                want_size[i] = 1;
                continue;
            }
            int64_t lo = form == 2 ? 0 : a, hi = form == 3 ? n : b;
            if (form == 1)
                len += (size_t)snprintf(spec + len, sizeof spec - len,
                                        "%s%lld:%lld", sep, (long long)a,
                                        (long long)b);
            else if (form == 2)
                len += (size_t)snprintf(spec + len, sizeof spec - len,
                                        "%s:%lld", sep, (long long)b);
            else
                len += (size_t)snprintf(spec + len, sizeof spec - len,
                                        "%s%lld:", sep, (long long)a);
            lo = lo < 0 ? lo + n : lo;
            lo = lo < 0 ? 0 : lo > n ? n : lo;
            hi = hi < 0 ? hi + n : hi;
            hi = hi < 0 ? 0 : hi > n ? n : hi;
            want_off[i] = lo;
            want_size[i] = hi > lo ? hi - lo : 0;
        }
        int rc = slice(spec, ndim, shape, off, size);
        if (!ok) {
            REQUIRE_MSG(rc == -EINVAL, "'%s' gave %d", spec, rc);
            continue;
        }
        REQUIRE_MSG(rc == 0, "'%s' gave %d", spec, rc);
        for (int i = 0; i < ndim; i++) {
            REQUIRE_MSG(off[i] == want_off[i] && size[i] == want_size[i],
                        "'%s' dim %d", spec, i);
        }
    }
}
END_TEST

static Suite *region_suite(void)
{
    Suite *s = suite_create("region");
    TCase *bx = tcase_create("boxes");
    tcase_add_test(bx, box_numel_cases);
    tcase_add_test(bx, box_intersect_cases);
    tcase_add_test(bx, box_contains_cases);
    tcase_add_test(bx, box_random_intersect);
    tcase_add_test(bx, box_linear_cases);
    suite_add_tcase(s, bx);
    TCase *rn = tcase_create("runs");
    tcase_add_test(rn, runs_scalar);
    tcase_add_test(rn, runs_slab_is_one_run);
    tcase_add_test(rn, runs_column_block);
    tcase_add_test(rn, runs_stop_propagates);
    tcase_add_test(rn, runs_empty_region_calls_nothing);
    tcase_add_test(rn, runs_random_vs_naive);
    tcase_set_timeout(rn, 30);
    suite_add_tcase(s, rn);
    TCase *lb = tcase_create("linear_boxes");
    tcase_add_test(lb, boxes_cases);
    tcase_add_test(lb, boxes_random);
    tcase_set_timeout(lb, 30);
    suite_add_tcase(s, lb);
    TCase *sl = tcase_create("slices");
    tcase_add_test(sl, slice_valid);
    tcase_add_test(sl, slice_errors);
    tcase_add_test(sl, slice_edge_shapes);
    tcase_add_test(sl, slice_random);
    suite_add_tcase(s, sl);
    return s;
}

int main(void)
{
    return unit_run(region_suite());
}
