/*
 * test_plan.c - unit tests of the planner (src/format/plan.c): fqn rules, the
 * checks of a single piece, every refusal of ckpt_plan_build with the tensor
 * and writers named, replicas and their balancing, empty tensors and scalars,
 * output order, and randomized grid partitions.
 */
#include <check.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "format/model.h"
#include "format/plan.h"
#include "unit_util.h"

#define DIMS(...) ((const int64_t[]){ __VA_ARGS__ })

static uint64_t box_numel(int ndim, const int64_t *sizes)
{
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (uint64_t)sizes[d];
    return n;
}

/* Adds a piece; offsets NULL = zeros, sizes NULL = the whole shape. */
static ckpt_piece_rec *add(ckpt_manifest *m, const char *fqn,
                           const char *writer, ckpt_dtype dt, int ndim,
                           const int64_t *shape, const int64_t *off,
                           const int64_t *size)
{
    ckpt_piece_rec *p = ckpt_manifest_add_piece(m);
    ck_assert_ptr_nonnull(p);
    p->fqn = strdup(fqn);
    p->writer = writer ? strdup(writer) : NULL;
    char file[64];
    snprintf(file, sizeof file, "data/%s.shard", writer ? writer : "x");
    p->file = strdup(file);
    p->dtype = dt;
    p->ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        p->shape[d] = shape[d];
        p->offsets[d] = off ? off[d] : 0;
        p->sizes[d] = size ? size[d] : shape[d];
    }
    p->raw_bytes = box_numel(ndim, p->sizes) * ckpt_dtype_size(dt);
    p->stored_bytes = p->raw_bytes;
    p->data_hash = 0x1234;
    return p;
}

/* Builds and expects success. */
static void plan_ok(const ckpt_manifest *m, const ckpt_plan_opts *o,
                    ckpt_plan *plan)
{
    ckpt_error err = { 0 };
    int rc = ckpt_plan_build(m->pieces, m->npieces, o, plan, &err);
    ck_assert_msg(rc == 0, "plan failed: %d %s", rc, err.msg);
}

/* Builds, expects -EINVAL, and checks that the message holds each of the
 * NULL-terminated strings. */
static void plan_fails(const ckpt_manifest *m, const ckpt_plan_opts *o, ...)
{
    ckpt_error err = { 0 };
    ckpt_plan plan;
    int rc = ckpt_plan_build(m->pieces, m->npieces, o, &plan, &err);
    ck_assert_msg(rc == -EINVAL, "expected -EINVAL, got %d (%s)", rc, err.msg);
    ck_assert_int_eq(err.code, -EINVAL);
    ck_assert_ptr_null(plan.tensors);
    va_list ap;
    va_start(ap, o);
    for (const char *s; (s = va_arg(ap, const char *));)
        ck_assert_msg(strstr(err.msg, s), "'%s' not in message: %s", s,
                      err.msg);
    va_end(ap);
}

/* ------------------------------------------------------------ fqn rules */

static void fqn_bad(const char *fqn, const char *expect)
{
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_fqn_check(fqn, &err), -EINVAL);
    ck_assert_msg(strstr(err.msg, expect), "'%s' not in: %s", expect,
                  err.msg);
}

START_TEST(test_fqn_rules)
{
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_fqn_check("model.layers.0.weight", &err), 0);
    ck_assert_int_eq(ckpt_fqn_check("x", &err), 0);
    ck_assert_int_eq(ckpt_fqn_check("gewicht.\xc3\xbc.\xe5\x90\x8d", &err), 0);
    ck_assert_int_eq(ckpt_fqn_check("emoji.\xf0\x9f\x98\x80", &err), 0);
    ck_assert_int_eq(ckpt_fqn_check("with space-and_dash", &err), 0);
    fqn_bad("", "empty");
    fqn_bad(NULL, "empty");
    fqn_bad("a/b", "'a/b'");
    fqn_bad("a/b", "'/'");
    fqn_bad("a\x01" "b", "'a\\x01b'");
    fqn_bad("a\x01" "b", "control character");
    fqn_bad("a\tb", "control");
    fqn_bad("a\x7f", "control");
    fqn_bad("a..b", "'a..b'");
    fqn_bad("a..b", "empty dotted component at byte 2");
    fqn_bad(".a", "'.a'");
    fqn_bad("a.", "'a.'");
    fqn_bad(".", "empty dotted");
    fqn_bad("a\xff" "b", "UTF-8");
    fqn_bad("a\xff" "b", "'a\\xffb'");
    fqn_bad("\xc0\xaf", "UTF-8");          /* overlong '/' */
    fqn_bad("\xed\xa0\x80", "UTF-8");      /* surrogate */
    fqn_bad("\xf4\x90\x80\x80", "UTF-8");  /* above U+10FFFF */
    fqn_bad("ab\xc3", "UTF-8");            /* truncated sequence */

    char *name = malloc(4098);
    memset(name, 'n', 4097);
    name[4096] = '\0';
    ck_assert_int_eq(ckpt_fqn_check(name, &err), 0);
    name[4096] = 'n';
    name[4097] = '\0';
    fqn_bad(name, "4097 bytes");
    free(name);
}
END_TEST

/* ------------------------------------------------------- single pieces */

START_TEST(test_check_piece)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    ckpt_error err = { 0 };
    ckpt_piece_rec *p =
        add(&m, "w", "rank0", CKPT_F32, 2, DIMS(4, 8), DIMS(2, 0), DIMS(2, 8));
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), 0);

    p->offsets[1] = 1;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "outside shape [4,8]"));
    ck_assert_ptr_nonnull(strstr(err.msg, "offsets [2,1] sizes [2,8]"));
    ck_assert_ptr_nonnull(strstr(err.msg, "rank0"));
    p->offsets[1] = -1;
    p->sizes[1] = 9;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    p->offsets[1] = 0;
    p->sizes[1] = -1;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    p->sizes[1] = 8;

    /* Checked before the bytes arrive: raw_bytes is the planner's. */
    p->raw_bytes = 0;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), 0);
    p->raw_bytes = 64;

    p->dtype = CKPT_DTYPE_INVALID;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "invalid dtype"));
    p->dtype = (ckpt_dtype)99;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    p->dtype = CKPT_F32;

    p->ndim = CKPT_MAX_DIMS + 1;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "33 dimensions"));
    p->ndim = -1;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    p->ndim = 2;

    p->shape[0] = -4;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    p->shape[0] = INT64_MAX / 2;
    p->shape[1] = 8;
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EOVERFLOW);
    ck_assert_ptr_nonnull(strstr(err.msg, "tensor 'w'"));
    ckpt_plan plan;   /* the planner refuses it as -EINVAL */
    ck_assert_int_eq(ckpt_plan_build(p, 1, NULL, &plan, &err), -EINVAL);
    ck_assert_int_eq(err.code, -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "too large"));
    p->shape[0] = 4;

    free(p->fqn);
    p->fqn = strdup("a//b");
    ck_assert_int_eq(ckpt_plan_check_piece(p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "'a//b'"));
    ckpt_manifest_free(&m);
}
END_TEST

/* ------------------------------------------------------- planner rules */

START_TEST(test_dtype_mismatch)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "x", "rank2", CKPT_BF16, 1, DIMS(8), DIMS(4), DIMS(4));
    add(&m, "x", "rank0", CKPT_F32, 1, DIMS(8), DIMS(0), DIMS(4));
    plan_fails(&m, NULL, "tensor 'x'", "dtype f32 (writer rank0)",
               "bf16 (writer rank2)", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_shape_mismatch)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "x", "rank0", CKPT_F32, 2, DIMS(4, 8), DIMS(0, 0), DIMS(2, 8));
    add(&m, "x", "rank1", CKPT_F32, 2, DIMS(4, 9), DIMS(2, 0), DIMS(2, 8));
    plan_fails(&m, NULL, "tensor 'x'", "[4,8] (writer rank0)",
               "[4,9] (writer rank1)", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_ndim_mismatch)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "x", "rank0", CKPT_F32, 2, DIMS(4, 8), DIMS(0, 0), DIMS(2, 8));
    add(&m, "x", "rank1", CKPT_F32, 1, DIMS(32), DIMS(16), DIMS(16));
    plan_fails(&m, NULL, "tensor 'x'", "[32] (1 dims, writer rank1)",
               "[4,8] (2 dims, writer rank0)", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_out_of_bounds)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "x", "rank0", CKPT_F32, 2, DIMS(4, 8), DIMS(0, 0), DIMS(2, 8));
    add(&m, "x", "rank1", CKPT_F32, 2, DIMS(4, 8), DIMS(2, 0), DIMS(3, 8));
    plan_fails(&m, NULL, "tensor 'x'", "offsets [2,0] sizes [3,8]",
               "writer rank1", "outside shape [4,8]", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_raw_bytes_mismatch)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "x", "rank0", CKPT_F32, 1, DIMS(8), DIMS(0), DIMS(4));
    add(&m, "x", "rank1", CKPT_F32, 1, DIMS(8), DIMS(4), DIMS(4))
        ->raw_bytes = 12;
    plan_fails(&m, NULL, "tensor 'x'", "writer rank1", "12 bytes",
               "expected 16 (4 elements of f32)", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_partial_overlap)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "x", "rank1", CKPT_F32, 2, DIMS(4, 8), DIMS(2, 0), DIMS(2, 8));
    add(&m, "x", "rank0", CKPT_F32, 2, DIMS(4, 8), DIMS(0, 0), DIMS(3, 8));
    plan_fails(&m, NULL, "tensor 'x'", "overlap",
               "offsets [0,0] sizes [3,8] (writer rank0)",
               "offsets [2,0] sizes [2,8] (writer rank1)", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

/* Boxes whose ranges on every dimension but one meet: the sweep must
 * compare them and find the one real overlap; containment counts too. */
START_TEST(test_overlap_cases)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "x", "a", CKPT_U8, 2, DIMS(4, 4), DIMS(0, 0), DIMS(4, 2));
    add(&m, "x", "b", CKPT_U8, 2, DIMS(4, 4), DIMS(0, 2), DIMS(2, 2));
    add(&m, "x", "c", CKPT_U8, 2, DIMS(4, 4), DIMS(2, 2), DIMS(2, 2));
    ckpt_plan plan;
    plan_ok(&m, NULL, &plan);
    ck_assert_uint_eq(plan.tensors[0].nchunks, 3);
    ckpt_plan_free(&plan);
    add(&m, "x", "d", CKPT_U8, 2, DIMS(4, 4), DIMS(3, 1), DIMS(1, 1));
    plan_fails(&m, NULL, "tensor 'x'", "overlap", "writer a", "writer d",
               "offsets [3,1] sizes [1,1]", NULL);
    ckpt_manifest_free(&m);

    ckpt_manifest_init(&m);
    add(&m, "y", "big", CKPT_U8, 1, DIMS(10), DIMS(0), DIMS(10));
    add(&m, "y", "small", CKPT_U8, 1, DIMS(10), DIMS(0), DIMS(5));
    plan_fails(&m, NULL, "tensor 'y'", "writer big", "writer small", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_coverage)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "x", "rank0", CKPT_F32, 2, DIMS(4, 8), DIMS(0, 0), DIMS(2, 8));
    add(&m, "x", "rank1", CKPT_F32, 2, DIMS(4, 8), DIMS(2, 0), DIMS(2, 4));
    plan_fails(&m, NULL, "tensor 'x'", "cover 24 of 32 elements",
               "shape [4,8]", "element [2,4] is not covered", "rank0",
               "rank1", NULL);
    ckpt_manifest_free(&m);

    ckpt_manifest_init(&m);
    add(&m, "v", "r9", CKPT_I64, 1, DIMS(10), DIMS(3), DIMS(7));
    plan_fails(&m, NULL, "tensor 'v'", "cover 7 of 10", "element [0]",
               "r9", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_coverage_many_writers)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    for (int i = 0; i < 20; i++) {
        char w[16];
        snprintf(w, sizeof w, "rank%02d", i);
        add(&m, "x", w, CKPT_U8, 1, DIMS(21), DIMS(i), DIMS(1));
    }
    plan_fails(&m, NULL, "cover 20 of 21", "element [20]",
               "rank00, rank01", "and 12 more", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

/* ------------------------------------------------------------- replicas */

START_TEST(test_replicas_kept_once)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "bias", "rank2", CKPT_F32, 1, DIMS(16), NULL, NULL);
    add(&m, "w", "rank0", CKPT_F32, 1, DIMS(8), DIMS(0), DIMS(4));
    add(&m, "bias", "rank0", CKPT_F32, 1, DIMS(16), NULL, NULL);
    add(&m, "w", "rank1", CKPT_F32, 1, DIMS(8), DIMS(4), DIMS(4));
    add(&m, "bias", "rank1", CKPT_F32, 1, DIMS(16), NULL, NULL);
    ckpt_plan plan;
    plan_ok(&m, NULL, &plan);
    ck_assert_uint_eq(plan.ntensors, 2);
    ck_assert_str_eq(plan.tensors[0].fqn, "bias");
    ck_assert_uint_eq(plan.tensors[0].nchunks, 1);
    ck_assert_uint_eq(plan.tensors[0].chunks[0], 0);   /* first in input */
    ck_assert_str_eq(plan.tensors[1].fqn, "w");
    ck_assert_uint_eq(plan.tensors[1].nchunks, 2);
    ck_assert_uint_eq(plan.tensors[1].chunks[0], 1);
    ck_assert_uint_eq(plan.tensors[1].chunks[1], 3);
    ck_assert_uint_eq(plan.npieces, 5);
    const size_t want[5] = { 0, 1, 0, 3, 0 };
    for (size_t i = 0; i < 5; i++)
        ck_assert_uint_eq(plan.kept_as[i], want[i]);
    ckpt_plan_free(&plan);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_replicas_balanced)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    const char *names[4] = { "t0", "t1", "t2", "t3" };
    for (int w = 0; w < 4; w++) {
        char wn[16];
        snprintf(wn, sizeof wn, "rank%d", w);
        for (int t = 0; t < 4; t++)
            add(&m, names[t], wn, CKPT_F32, 2, DIMS(8, 8), NULL, NULL);
    }
    ckpt_plan_opts o = { .balance_replicas = 1 };
    ckpt_plan plan;
    plan_ok(&m, &o, &plan);
    int per_writer[4] = { 0 };
    for (size_t t = 0; t < plan.ntensors; t++) {
        ck_assert_uint_eq(plan.tensors[t].nchunks, 1);
        size_t k = plan.tensors[t].chunks[0];
        per_writer[m.pieces[k].writer[4] - '0']++;
        for (size_t i = 0; i < m.npieces; i++)
            if (!strcmp(m.pieces[i].fqn, plan.tensors[t].fqn))
                ck_assert_uint_eq(plan.kept_as[i], k);
    }
    for (int w = 0; w < 4; w++)
        ck_assert_int_eq(per_writer[w], 1);
    ckpt_plan_free(&plan);

    /* Without balancing, the first replica in input order: all rank0. */
    plan_ok(&m, NULL, &plan);
    for (size_t t = 0; t < plan.ntensors; t++)
        ck_assert_str_eq(m.pieces[plan.tensors[t].chunks[0]].writer, "rank0");
    ckpt_plan_free(&plan);
    ckpt_manifest_free(&m);
}
END_TEST

/* Unreplicated bytes count: the writer that already holds a big
 * unreplicated piece is not given the replica. */
START_TEST(test_replicas_balance_counts_owned)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "big", "rank0", CKPT_F32, 1, DIMS(1000), NULL, NULL);
    add(&m, "r", "rank0", CKPT_F32, 1, DIMS(10), NULL, NULL);
    add(&m, "r", "rank1", CKPT_F32, 1, DIMS(10), NULL, NULL);
    ckpt_plan_opts o = { .balance_replicas = 1 };
    ckpt_plan plan;
    plan_ok(&m, &o, &plan);
    ck_assert_str_eq(plan.tensors[1].fqn, "r");
    ck_assert_uint_eq(plan.tensors[1].chunks[0], 2);
    ck_assert_uint_eq(plan.kept_as[1], 2);
    ckpt_plan_free(&plan);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_replica_hash_mismatch)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "emb", "rank0", CKPT_BF16, 1, DIMS(8), NULL, NULL);
    add(&m, "emb", "rank3", CKPT_BF16, 1, DIMS(8), NULL, NULL)->data_hash = 7;
    ckpt_plan plan;
    plan_ok(&m, NULL, &plan);   /* not checked unless asked */
    ckpt_plan_free(&plan);
    ckpt_plan_opts o = { .check_replica_hashes = 1 };
    plan_fails(&m, &o, "tensor 'emb'", "different bytes", "writer rank0",
               "writer rank3", "offsets [0] sizes [8]", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

/* ------------------------------------------------------ special shapes */

START_TEST(test_empty_tensor)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "e", "rank0", CKPT_F32, 2, DIMS(0, 4), NULL, NULL);
    add(&m, "e", "rank1", CKPT_F32, 2, DIMS(0, 4), NULL, NULL);
    add(&m, "f", "rank0", CKPT_F32, 2, DIMS(4, 0), DIMS(0, 0), DIMS(2, 0));
    add(&m, "f", "rank1", CKPT_F32, 2, DIMS(4, 0), DIMS(2, 0), DIMS(2, 0));
    /* An empty piece of a non-empty tensor: allowed, holds nothing. */
    add(&m, "g", "rank0", CKPT_F32, 1, DIMS(4), DIMS(0), DIMS(4));
    add(&m, "g", "rank1", CKPT_F32, 1, DIMS(4), DIMS(2), DIMS(0));
    ckpt_plan plan;
    plan_ok(&m, NULL, &plan);
    ck_assert_uint_eq(plan.ntensors, 3);
    ck_assert_uint_eq(plan.tensors[0].nchunks, 1);
    ck_assert_uint_eq(plan.kept_as[1], 0);
    ck_assert_uint_eq(plan.tensors[1].nchunks, 2);
    ck_assert_uint_eq(plan.tensors[2].nchunks, 2);
    ck_assert_uint_eq(m.pieces[plan.tensors[0].chunks[0]].raw_bytes, 0);
    ckpt_plan_free(&plan);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_scalar)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "step", "rank1", CKPT_I64, 0, NULL, NULL, NULL);
    add(&m, "step", "rank0", CKPT_I64, 0, NULL, NULL, NULL);
    ck_assert_uint_eq(m.pieces[0].raw_bytes, 8);
    ckpt_plan_opts o = { .check_replica_hashes = 1 };
    ckpt_plan plan;
    plan_ok(&m, &o, &plan);
    ck_assert_uint_eq(plan.ntensors, 1);
    ck_assert_int_eq(plan.tensors[0].ndim, 0);
    ck_assert_uint_eq(plan.tensors[0].nchunks, 1);
    ck_assert_uint_eq(plan.tensors[0].chunks[0], 0);
    ck_assert_uint_eq(plan.kept_as[1], 0);
    ckpt_plan_free(&plan);

    m.pieces[1].raw_bytes = 4;
    plan_fails(&m, NULL, "tensor 'step'", "4 bytes, expected 8", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_empty_input_and_order)
{
    ckpt_plan plan;
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_plan_build(NULL, 0, NULL, &plan, &err), 0);
    ck_assert_uint_eq(plan.ntensors, 0);
    ckpt_plan_free(&plan);

    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "layer.b", "r", CKPT_U8, 1, DIMS(1), NULL, NULL);
    add(&m, "layer.a", "r", CKPT_U8, 1, DIMS(1), NULL, NULL);
    add(&m, "Layer", "r", CKPT_U8, 1, DIMS(1), NULL, NULL);
    add(&m, "layer", "r", CKPT_U8, 1, DIMS(1), NULL, NULL);
    plan_ok(&m, NULL, &plan);
    const char *want[] = { "Layer", "layer", "layer.a", "layer.b" };
    for (size_t t = 0; t < 4; t++)
        ck_assert_str_eq(plan.tensors[t].fqn, want[t]);
    ckpt_plan_free(&plan);
    ckpt_manifest_free(&m);
}
END_TEST

/* Errors are reported for the first tensor in fqn order, whatever the
 * input order; a bad fqn is refused by the planner too. */
START_TEST(test_first_error_deterministic)
{
    for (int flip = 0; flip < 2; flip++) {
        ckpt_manifest m;
        ckpt_manifest_init(&m);
        for (int k = 0; k < 2; k++) {
            if ((k ^ flip) == 0) {
                add(&m, "b", "r0", CKPT_U8, 1, DIMS(4), DIMS(0), DIMS(2));
            } else {
                add(&m, "a", "r1", CKPT_U8, 1, DIMS(4), DIMS(0), DIMS(3));
                add(&m, "a", "r2", CKPT_U8, 1, DIMS(4), DIMS(2), DIMS(2));
            }
        }
        plan_fails(&m, NULL, "tensor 'a'", "overlap", NULL);
        ckpt_manifest_free(&m);
    }
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "a/b", "r0", CKPT_U8, 1, DIMS(4), NULL, NULL);
    plan_fails(&m, NULL, "'a/b'", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

/* ---------------------------------------------------------------- grids */

static void shuffle(ckpt_manifest *m, rng *seed)
{
    for (size_t i = m->npieces; i > 1; i--) {
        size_t j = (size_t)(rnd(seed) % i);
        ckpt_piece_rec t = m->pieces[i - 1];
        m->pieces[i - 1] = m->pieces[j];
        m->pieces[j] = t;
    }
}

/* Chunks of every tensor are in strictly increasing row-major order. */
static void assert_row_major(const ckpt_manifest *m, const ckpt_plan *plan)
{
    for (size_t t = 0; t < plan->ntensors; t++) {
        const ckpt_plan_tensor *pt = &plan->tensors[t];
        for (size_t c = 1; c < pt->nchunks; c++) {
            const ckpt_piece_rec *a = &m->pieces[pt->chunks[c - 1]];
            const ckpt_piece_rec *b = &m->pieces[pt->chunks[c]];
            int d = 0;
            while (d < pt->ndim && a->offsets[d] == b->offsets[d])
                d++;
            ck_assert_msg(d < pt->ndim && a->offsets[d] < b->offsets[d],
                          "chunks of '%s' out of order", pt->fqn);
        }
    }
}

START_TEST(test_grid_shuffled)
{
    rng seed = { 0x9e3779b97f4a7c15u };
    for (int round = 0; round < 10; round++) {
        ckpt_manifest m;
        ckpt_manifest_init(&m);
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 3; c++) {
                char w[16];
                snprintf(w, sizeof w, "rank%d", r * 3 + c);
                add(&m, "grid", w, CKPT_F16, 2, DIMS(6, 9), DIMS(3 * r, 3 * c),
                    DIMS(3, 3));
            }
        shuffle(&m, &seed);
        ckpt_plan plan;
        plan_ok(&m, NULL, &plan);
        ck_assert_uint_eq(plan.ntensors, 1);
        ck_assert_uint_eq(plan.tensors[0].nchunks, 6);
        assert_row_major(&m, &plan);
        for (size_t c = 0; c < 6; c++) {
            char w[16];
            snprintf(w, sizeof w, "rank%zu", c);
            ck_assert_str_eq(m.pieces[plan.tensors[0].chunks[c]].writer, w);
        }
        for (size_t i = 0; i < 6; i++)
            ck_assert_uint_eq(plan.kept_as[i], i);
        ckpt_plan_free(&plan);
        ckpt_manifest_free(&m);
    }
}
END_TEST

/* Many pieces: column sharding (every piece spans all of dim 0) and a
 * 100x100 grid plan quickly; a missing piece of the grid is named. */
START_TEST(test_many_pieces)
{
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    for (int i = 0; i < 20000; i++)
        add(&m, "cols", "w", CKPT_U8, 2, DIMS(4, 20000), DIMS(0, i),
            DIMS(4, 1));
    ckpt_plan plan;
    plan_ok(&m, NULL, &plan);
    ck_assert_uint_eq(plan.tensors[0].nchunks, 20000);
    ckpt_plan_free(&plan);
    ckpt_manifest_free(&m);

    ckpt_manifest_init(&m);
    for (int r = 0; r < 100; r++)
        for (int c = 0; c < 100; c++)
            if (r != 37 || c != 81)
                add(&m, "g", "w", CKPT_U8, 2, DIMS(200, 300),
                    DIMS(2 * r, 3 * c), DIMS(2, 3));
    plan_fails(&m, NULL, "cover 59994 of 60000", "element [74,243]", NULL);
    ckpt_manifest_free(&m);
}
END_TEST

/* ---------------------------------------------------- randomized grids */

typedef struct rgrid {
    int ndim;
    int64_t shape[4];
    int64_t cuts[4][8];   /* cuts[d][0] = 0 < ... < cuts[d][n[d]] = shape */
    int n[4];
} rgrid;

static void rgrid_make(rgrid *g, rng *seed)
{
    g->ndim = (int)(rnd(seed) % 4) + 1;
    for (int d = 0; d < g->ndim; d++) {
        g->shape[d] = (int64_t)(rnd(seed) % 12) + 1;
        int n = 0;
        g->cuts[d][n++] = 0;
        for (int64_t x = 1; x < g->shape[d] && n < 7; x++)
            if (rnd(seed) % 3 == 0)
                g->cuts[d][n++] = x;
        g->cuts[d][n] = g->shape[d];
        g->n[d] = n;
    }
}

/* One piece per cell of the grid, written by random writers, shuffled. */
static void rgrid_pieces(const rgrid *g, ckpt_manifest *m, rng *seed)
{
    int at[4] = { 0 };
    for (;;) {
        int64_t off[4], size[4];
        for (int d = 0; d < g->ndim; d++) {
            off[d] = g->cuts[d][at[d]];
            size[d] = g->cuts[d][at[d] + 1] - off[d];
        }
        char w[16];
        snprintf(w, sizeof w, "r%d", (int)(rnd(seed) % 5));
        add(m, "t", w, CKPT_I32, g->ndim, g->shape, off, size);
        int d = g->ndim - 1;
        while (d >= 0 && ++at[d] == g->n[d])
            at[d--] = 0;
        if (d < 0)
            break;
    }
    shuffle(m, seed);
}

static void plan_expect(const ckpt_manifest *m, int want_ok,
                        const char *expect1, const char *expect2)
{
    ckpt_error err = { 0 };
    ckpt_plan plan;
    int rc = ckpt_plan_build(m->pieces, m->npieces, NULL, &plan, &err);
    if (want_ok) {
        ck_assert_msg(rc == 0, "random grid refused: %s", err.msg);
        uint64_t vol = 0;
        for (size_t c = 0; c < plan.tensors[0].nchunks; c++) {
            const ckpt_piece_rec *p = &m->pieces[plan.tensors[0].chunks[c]];
            vol += box_numel(p->ndim, p->sizes);
        }
        ck_assert_uint_eq(vol, box_numel(m->pieces[0].ndim,
                                         m->pieces[0].shape));
        assert_row_major(m, &plan);
        ckpt_plan_free(&plan);
        return;
    }
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err.msg, expect1) ||
                      (expect2 && strstr(err.msg, expect2)),
                  "unexpected message: %s", err.msg);
}

START_TEST(test_random_partitions)
{
    rng seed = { 0x243f6a8885a308d3u };
    for (int round = 0; round < 300; round++) {
        rgrid g;
        rgrid_make(&g, &seed);
        ckpt_manifest m;
        ckpt_manifest_init(&m);
        rgrid_pieces(&g, &m, &seed);
        plan_expect(&m, 1, NULL, NULL);

        /* Enlarge one piece by one along one dimension. */
        size_t k = (size_t)(rnd(&seed) % m.npieces);
        int d = (int)(rnd(&seed) % (uint64_t)g.ndim);
        m.pieces[k].sizes[d]++;
        m.pieces[k].raw_bytes = box_numel(g.ndim, m.pieces[k].sizes) * 4;
        plan_expect(&m, 0, "overlap", "outside shape");
        m.pieces[k].sizes[d]--;
        m.pieces[k].raw_bytes = box_numel(g.ndim, m.pieces[k].sizes) * 4;

        /* Remove one piece: the hole is named by its first element. */
        ckpt_piece_rec gone = m.pieces[k];
        m.pieces[k] = m.pieces[m.npieces - 1];
        m.npieces--;
        char want[128] = "element [";
        for (int j = 0; j < g.ndim; j++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld",
                     j ? "," : "", (long long)gone.offsets[j]);
        strcat(want, "] is not covered");
        if (m.npieces > 0)
            plan_expect(&m, 0, want, NULL);
        m.pieces[m.npieces++] = gone;
        ckpt_manifest_free(&m);
    }
}
END_TEST

/* ------------------------------------------------ a committed tensor */

/* Checks chunks as an index lists them; want NULL: they tile the tensor,
 * else the message holds each of the NULL-terminated strings. */
static void chunks_expect(const ckpt_manifest *m, const char *want, ...)
{
    ckpt_error err = { 0 };
    int rc = ckpt_plan_check_chunks(m->pieces, m->npieces, &err);
    if (!want) {
        ck_assert_msg(rc == 0, "expected a tiling, got %d: %s", rc, err.msg);
        return;
    }
    ck_assert_msg(rc == -EINVAL, "expected -EINVAL, got %d (%s)", rc,
                  err.msg);
    ck_assert_msg(!strstr(err.msg, "writer"), "chunks are no writers: %s",
                  err.msg);
    va_list ap;
    va_start(ap, want);
    for (const char *s = want; s; s = va_arg(ap, const char *))
        ck_assert_msg(strstr(err.msg, s), "'%s' not in message: %s", s,
                      err.msg);
    va_end(ap);
}

START_TEST(test_check_chunks)
{
    const int64_t *shape = DIMS(100, 100);
    ckpt_manifest m;
    ckpt_manifest_init(&m);
    add(&m, "model.a", NULL, CKPT_F32, 2, shape, DIMS(0, 0), DIMS(50, 100));
    add(&m, "model.a", NULL, CKPT_F32, 2, shape, DIMS(50, 0), DIMS(50, 100));
    chunks_expect(&m, NULL, NULL);
    ck_assert_int_eq(ckpt_plan_check_chunks(m.pieces, 0, NULL), 0);

    /* offsets '[0,0]' on the second: the same box twice, half a hole */
    m.pieces[1].offsets[0] = 0;
    chunks_expect(&m, "tensor 'model.a'", "chunks 0 and 1 are the same box",
                  "offsets [0,0] sizes [50,100]", NULL);
    /* one bit flipped: [50] -> [8]; overlap named by chunk positions */
    m.pieces[1].offsets[0] = 8;
    chunks_expect(&m, "chunks 0 (offsets [0,0] sizes [50,100]) and 1 "
                  "(offsets [8,0] sizes [50,100]) overlap", NULL);
    /* a hole, named by its first element, no writers */
    m.pieces[1].offsets[0] = 50;
    m.pieces[1].sizes[0] = 40;
    m.pieces[1].raw_bytes = 40 * 100 * 4;
    chunks_expect(&m, "its 2 chunks cover 9000 of 10000 elements",
                  "element [90,0] is not covered", NULL);
    ckpt_manifest_free(&m);

    /* even empty chunks may not be listed twice; a scalar's one chunk */
    ckpt_manifest_init(&m);
    add(&m, "e", NULL, CKPT_F32, 2, DIMS(0, 4), NULL, NULL);
    chunks_expect(&m, NULL, NULL);
    add(&m, "e", NULL, CKPT_F32, 2, DIMS(0, 4), NULL, NULL);
    chunks_expect(&m, "chunks 0 and 1 are the same box", NULL);
    ckpt_manifest_free(&m);
    ckpt_manifest_init(&m);
    add(&m, "s", NULL, CKPT_F64, 0, NULL, NULL, NULL);
    chunks_expect(&m, NULL, NULL);
    ckpt_manifest_free(&m);

    /* chunks of two tensors are not one tensor's */
    ckpt_manifest_init(&m);
    add(&m, "a", NULL, CKPT_F32, 1, DIMS(4), DIMS(0), DIMS(2));
    add(&m, "b", NULL, CKPT_F32, 1, DIMS(4), DIMS(2), DIMS(2));
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_plan_check_chunks(m.pieces, 2, &err), -EINVAL);
    ckpt_manifest_free(&m);
}
END_TEST

START_TEST(test_text_quote)
{
    char buf[64];
    ckpt_text_quote(buf, sizeof buf, "model.w\x1b[2J\n\x7f");
    ck_assert_str_eq(buf, "model.w\\x1b[2J\\x0a\\x7f");
    ckpt_text_quote(buf, sizeof buf, "caf\xc3\xa9 \xff");
    ck_assert_str_eq(buf, "caf\xc3\xa9 \\xff");
    /* 4 bytes per byte (and 9 more) always suffice */
    const char *ctl = "\x01\x02\x03\x04\x05\x06\x07\x08";
    char exact[4 * 8 + 9];
    ckpt_text_quote(exact, sizeof exact, ctl);
    ck_assert_str_eq(exact, "\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08");
    char small[12];
    ckpt_text_quote(small, sizeof small, "abcdefghijklmnop");
    ck_assert_msg(strstr(small, "..."), "cut text ends in ...: %s", small);
}
END_TEST

static Suite *plan_suite(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("rules");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fqn_rules);
    tcase_add_test(tc, test_check_piece);
    tcase_add_test(tc, test_dtype_mismatch);
    tcase_add_test(tc, test_shape_mismatch);
    tcase_add_test(tc, test_ndim_mismatch);
    tcase_add_test(tc, test_out_of_bounds);
    tcase_add_test(tc, test_raw_bytes_mismatch);
    tcase_add_test(tc, test_partial_overlap);
    tcase_add_test(tc, test_overlap_cases);
    tcase_add_test(tc, test_coverage);
    tcase_add_test(tc, test_coverage_many_writers);
    tcase_add_test(tc, test_replicas_kept_once);
    tcase_add_test(tc, test_replicas_balanced);
    tcase_add_test(tc, test_replicas_balance_counts_owned);
    tcase_add_test(tc, test_replica_hash_mismatch);
    tcase_add_test(tc, test_empty_tensor);
    tcase_add_test(tc, test_scalar);
    tcase_add_test(tc, test_empty_input_and_order);
    tcase_add_test(tc, test_first_error_deterministic);
    tcase_add_test(tc, test_grid_shuffled);
    tcase_add_test(tc, test_many_pieces);
    tcase_add_test(tc, test_random_partitions);
    tcase_add_test(tc, test_check_chunks);
    tcase_add_test(tc, test_text_quote);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(plan_suite());
}
