/*
 * test_pattr.c - unit tests for fs/pattr.c, the piece attributes of a file
 * written through the mount (docs/MOUNT.md, "Writing"): values parsed and
 * checked as they are set (in any order), refused ones leaving the set
 * unchanged, and the piece they describe, whose extent they must give
 * before its first byte (issue #25: no close can tell a whole piece from
 * a truncated one).
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pattr.h"
#include "unit_util.h"

static int set(pattr *a, const char *name, const char *v)
{
    ckpt_error err = { 0 };
    return pattr_set(a, pattr_key(name), v, strlen(v), &err);
}

START_TEST(test_keys)
{
    ck_assert_uint_eq(pattr_key("user.ckpt.dtype"), PATTR_DTYPE);
    ck_assert_uint_eq(pattr_key("user.ckpt.shape"), PATTR_SHAPE);
    ck_assert_uint_eq(pattr_key("user.ckpt.offsets"), PATTR_OFFSETS);
    ck_assert_uint_eq(pattr_key("user.ckpt.sizes"), PATTR_SIZES);
    ck_assert_uint_eq(pattr_key("user.ckpt.replica"), PATTR_REPLICA);
    ck_assert_uint_eq(pattr_key("user.ckpt.piece"), PATTR_PIECE);
    ck_assert_uint_eq(pattr_key("user.ckpt.fqn"), 0);
    ck_assert_uint_eq(pattr_key("user.ckpt.dtypes"), 0);
}
END_TEST

START_TEST(test_set_and_get)
{
    pattr a = { 0 };
    char buf[64];
    ck_assert_int_eq(set(&a, "user.ckpt.dtype", "torch.bfloat16"), 0);
    ck_assert_int_eq(set(&a, "user.ckpt.shape", "[8, 6]"), 0);
    ck_assert_int_eq(set(&a, "user.ckpt.offsets", "4,0"), 0);
    ck_assert_int_eq(pattr_get(&a, PATTR_DTYPE, buf, sizeof buf), 4);
    ck_assert_str_eq(buf, "bf16");
    pattr_get(&a, PATTR_SHAPE, buf, sizeof buf);
    ck_assert_str_eq(buf, "8,6");
    pattr_get(&a, PATTR_OFFSETS, buf, sizeof buf);
    ck_assert_str_eq(buf, "4,0");
    ck_assert_int_eq(pattr_get(&a, PATTR_SIZES, buf, sizeof buf), -ENODATA);
    ck_assert_int_eq(pattr_get(&a, PATTR_REPLICA, buf, sizeof buf), -ENODATA);
    ck_assert_int_eq(set(&a, "user.ckpt.replica", "1"), 0);
    ck_assert_int_eq(a.replica, 1);
    ck_assert_int_eq(pattr_get(&a, PATTR_REPLICA, buf, sizeof buf), 1);
    ck_assert_str_eq(buf, "1");
    ck_assert_int_eq(set(&a, "user.ckpt.replica", "yes"), -EINVAL);
    ck_assert_int_eq(a.replica, 1);
    ck_assert_int_eq(set(&a, "user.ckpt.replica", "0"), 0);
    ck_assert_int_eq(a.replica, 0);
}
END_TEST

START_TEST(test_refusals_keep_the_set)
{
    pattr a = { 0 };
    ck_assert_int_eq(set(&a, "user.ckpt.dtype", "float33"), -EINVAL);
    ck_assert_uint_eq(a.set, 0);
    ckpt_error err = { 0 };
    ck_assert_int_eq(pattr_set(&a, PATTR_DTYPE, "float33", 7, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "unknown dtype 'float33' (valid: "
                                 "f64, f32, f16, bf16,"));
    ck_assert_int_eq(set(&a, "user.ckpt.shape", "4,x"), -EINVAL);
    ck_assert_int_eq(set(&a, "user.ckpt.shape", "4,-1"), -EINVAL);
    ck_assert_int_eq(set(&a, "user.ckpt.shape", "6,5"), 0);
    pattr before = a;
    ck_assert_int_eq(set(&a, "user.ckpt.offsets", "7,0"), -EINVAL);
    ck_assert_int_eq(set(&a, "user.ckpt.offsets", "0,0,0"), -EINVAL);
    ck_assert_int_eq(set(&a, "user.ckpt.sizes", "4,6"), -EINVAL);
    ck_assert_int_eq(memcmp(&a, &before, sizeof a), 0);
    /* Offsets first, shape later: the shape is checked against them. */
    pattr b = { 0 };
    ck_assert_int_eq(set(&b, "user.ckpt.offsets", "3,4"), 0);
    ck_assert_int_eq(set(&b, "user.ckpt.shape", "3,4"), 0);  /* = bounds */
    ck_assert_int_eq(set(&b, "user.ckpt.shape", "2,4"), -EINVAL);
    ck_assert_int_eq(set(&b, "user.ckpt.shape", "3"), -EINVAL);
    /* A NUL inside the value, or a huge one. */
    ck_assert_int_eq(pattr_set(&b, PATTR_DTYPE, "f32\0x", 5, NULL), -EINVAL);
    char *big = malloc(5000);
    memset(big, '1', 5000);
    ck_assert_int_eq(pattr_set(&b, PATTR_SHAPE, big, 5000, NULL), -EINVAL);
    free(big);
    /* A byte object is 1-D. */
    pattr c = { 0 };
    ck_assert_int_eq(set(&c, "user.ckpt.shape", "2,2"), 0);
    ck_assert_int_eq(set(&c, "user.ckpt.dtype", "bytes"), -EINVAL);
}
END_TEST

/* user.ckpt.piece: the four attributes of a part in one value (one
 * round trip), equal to setting them one by one; all or nothing. */
START_TEST(test_piece_in_one_value)
{
    pattr one = { 0 }, four = { 0 };
    char buf[128];
    ck_assert_int_eq(set(&one, "user.ckpt.piece",
                         "dtype=bf16  shape=1024,1024 offsets=256,0 "
                         "sizes=256,1024"), 0);
    ck_assert_int_eq(set(&four, "user.ckpt.dtype", "bf16"), 0);
    ck_assert_int_eq(set(&four, "user.ckpt.shape", "1024,1024"), 0);
    ck_assert_int_eq(set(&four, "user.ckpt.offsets", "256,0"), 0);
    ck_assert_int_eq(set(&four, "user.ckpt.sizes", "256,1024"), 0);
    ck_assert_mem_eq(&one, &four, sizeof one);
    ck_assert_int_eq(pattr_get(&one, PATTR_PIECE, buf, sizeof buf), 55);
    ck_assert_str_eq(buf, "dtype=bf16 shape=1024,1024 offsets=256,0 "
                          "sizes=256,1024");
    ck_assert_int_eq(pattr_get(&one, PATTR_PIECE, buf, 8), 55);

    /* A bad pair anywhere: nothing of the value is kept. */
    pattr a = { 0 };
    ck_assert_int_eq(pattr_get(&a, PATTR_PIECE, buf, sizeof buf), -ENODATA);
    ck_assert_int_eq(set(&a, "user.ckpt.piece", "dtype=f32 shape=8,8 "
                         "offsets=9,0"), -EINVAL);
    ck_assert_int_eq(set(&a, "user.ckpt.piece", "dtype=f32 shape=8"), 0);
    ck_assert_int_eq(set(&a, "user.ckpt.piece", "shape=4,4 fqn=x"), -EINVAL);
    ck_assert_int_eq(set(&a, "user.ckpt.piece", "shape=4,4 piece=x"),
                     -EINVAL);
    ck_assert_int_eq(set(&a, "user.ckpt.piece", "shape"), -EINVAL);
    ck_assert_int_eq(set(&a, "user.ckpt.piece", "  "), -EINVAL);
    ck_assert_int_eq(a.set, PATTR_DTYPE | PATTR_SHAPE);
    ck_assert_int_eq(a.ndim, 1);
    ck_assert_int_eq(a.shape[0], 8);
    /* Later pairs and single attributes apply over earlier ones. */
    ck_assert_int_eq(set(&a, "user.ckpt.piece", "shape=4,4 replica=1"), 0);
    ck_assert_int_eq(set(&a, "user.ckpt.offsets", "2,0"), 0);
    pattr_get(&a, PATTR_PIECE, buf, sizeof buf);
    ck_assert_str_eq(buf, "dtype=f32 shape=4,4 offsets=2,0 replica=1");
}
END_TEST

START_TEST(test_resolve_rules)
{
    pattr_piece p;
    ckpt_error err = { 0 };
    /* Nothing set, or a dtype alone: no extent, refused. */
    ck_assert_int_eq(pattr_resolve(NULL, "x", &p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "user.ckpt.shape"));
    pattr a = { 0 };
    set(&a, "user.ckpt.dtype", "f32");
    ck_assert_int_eq(pattr_resolve(&a, "x", &p, &err), -EINVAL);
    /* Shape and offsets: every dimension to the shape's end. */
    set(&a, "user.ckpt.shape", "10,6");
    set(&a, "user.ckpt.offsets", "4,2");
    ck_assert_int_eq(pattr_resolve(&a, "x", &p, &err), 0);
    ck_assert_int_eq(p.sizes[0], 6);
    ck_assert_int_eq(p.sizes[1], 4);
    ck_assert_int_eq(p.shape[0], 10);
    /* Sizes given. */
    set(&a, "user.ckpt.sizes", "2,3");
    ck_assert_int_eq(pattr_resolve(&a, "x", &p, &err), 0);
    ck_assert_int_eq(p.sizes[0], 2);
    ck_assert_int_eq(p.sizes[1], 3);
    /* A scalar: no dims. */
    pattr s = { 0 };
    set(&s, "user.ckpt.dtype", "f64");
    set(&s, "user.ckpt.shape", "");
    ck_assert_int_eq(pattr_resolve(&s, "x", &p, &err), 0);
    ck_assert_int_eq(p.ndim, 0);
    /* Offsets without a shape. */
    pattr o = { 0 };
    set(&o, "user.ckpt.offsets", "1");
    ck_assert_int_eq(pattr_resolve(&o, "x", &p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "user.ckpt.shape"));
    /* A shape without a dtype: a byte object of that length, 1-D only. */
    pattr n = { 0 };
    set(&n, "user.ckpt.shape", "11");
    ck_assert_int_eq(pattr_resolve(&n, "x", &p, &err), 0);
    ck_assert_int_eq(p.dtype, CKPT_BYTES);
    ck_assert_int_eq(p.ndim, 1);
    ck_assert_int_eq(p.shape[0], 11);
    ck_assert_int_eq(p.sizes[0], 11);
    set(&n, "user.ckpt.shape", "4,4");
    ck_assert_int_eq(pattr_resolve(&n, "x", &p, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "user.ckpt.dtype"));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("pattr");
    TCase *t = tcase_create("core");
    tcase_add_test(t, test_keys);
    tcase_add_test(t, test_set_and_get);
    tcase_add_test(t, test_refusals_keep_the_set);
    tcase_add_test(t, test_piece_in_one_value);
    tcase_add_test(t, test_resolve_rules);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return unit_run(suite());
}
