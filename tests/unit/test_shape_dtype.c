/*
 * test_shape_dtype.c - unit tests for dtype.c (names, sizes, the PyTorch
 * and NumPy spellings) and shape.c (checked element/byte counts, shape
 * formatting and parsing), and the .npy face of each dtype (npy.c: its
 * NumPy descr, and hand-computed values of the widening of the types
 * NumPy lacks; tests/fs/npy_same.sh checks every bit pattern against
 * NumPy, tests/compat/test_dtypes.py against torch).
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckptfs.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/npy.h"
#include "common/shape.h"
#include "unit_util.h"

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------ dtype */

static const struct {
    ckpt_dtype dt;
    const char *name;
    size_t size;
} CANON[] = {
    {CKPT_F64, "f64", 8},       {CKPT_F32, "f32", 4},
    {CKPT_F16, "f16", 2},       {CKPT_BF16, "bf16", 2},
    {CKPT_F8E4M3, "f8e4m3", 1}, {CKPT_F8E5M2, "f8e5m2", 1},
    {CKPT_I64, "i64", 8},       {CKPT_I32, "i32", 4},
    {CKPT_I16, "i16", 2},       {CKPT_I8, "i8", 1},
    {CKPT_U64, "u64", 8},       {CKPT_U32, "u32", 4},
    {CKPT_U16, "u16", 2},       {CKPT_U8, "u8", 1},
    {CKPT_BOOL, "bool", 1},     {CKPT_BYTES, "bytes", 1},
    {CKPT_C64, "c64", 8},       {CKPT_C128, "c128", 16},
    {CKPT_C32, "c32", 4},       {CKPT_F8E4M3FNUZ, "f8e4m3fnuz", 1},
    {CKPT_F8E5M2FNUZ, "f8e5m2fnuz", 1}, {CKPT_F8E8M0, "f8e8m0", 1},
};

START_TEST(dtype_canonical_round_trip)
{
    ck_assert_uint_eq(COUNT_OF(CANON), CKPT_DTYPE_COUNT - 1);
    for (size_t i = 0; i < COUNT_OF(CANON); i++) {
        ck_assert_str_eq(ckpt_dtype_name(CANON[i].dt), CANON[i].name);
        ck_assert_uint_eq(ckpt_dtype_size(CANON[i].dt), CANON[i].size);
        ck_assert_int_eq(ckpt_dtype_parse(CANON[i].name), CANON[i].dt);
    }
    /* Every valid enum value round-trips through its name. */
    for (int dt = 1; dt < CKPT_DTYPE_COUNT; dt++)
        ck_assert_int_eq(ckpt_dtype_parse(ckpt_dtype_name((ckpt_dtype)dt)),
                         dt);
}
END_TEST

START_TEST(dtype_invalid_values)
{
    ck_assert_str_eq(ckpt_dtype_name(CKPT_DTYPE_INVALID), "invalid");
    ck_assert_str_eq(ckpt_dtype_name(CKPT_DTYPE_COUNT), "invalid");
    ck_assert_str_eq(ckpt_dtype_name((ckpt_dtype)-1), "invalid");
    ck_assert_str_eq(ckpt_dtype_name((ckpt_dtype)1000), "invalid");
    ck_assert_uint_eq(ckpt_dtype_size(CKPT_DTYPE_INVALID), 0);
    ck_assert_uint_eq(ckpt_dtype_size(CKPT_DTYPE_COUNT), 0);
    ck_assert_uint_eq(ckpt_dtype_size((ckpt_dtype)-7), 0);
}
END_TEST

static const struct {
    const char *s;
    ckpt_dtype dt;
} SPELLINGS[] = {
    {"float64", CKPT_F64}, {"double", CKPT_F64},
    {"torch.float64", CKPT_F64}, {"torch.double", CKPT_F64},
    {"float32", CKPT_F32}, {"float", CKPT_F32},
    {"torch.float32", CKPT_F32}, {"torch.float", CKPT_F32},
    {"float16", CKPT_F16}, {"half", CKPT_F16}, {"torch.half", CKPT_F16},
    {"torch.float16", CKPT_F16},
    {"bfloat16", CKPT_BF16}, {"torch.bfloat16", CKPT_BF16},
    {"float8_e4m3fn", CKPT_F8E4M3}, {"torch.float8_e4m3fn", CKPT_F8E4M3},
    {"float8_e4m3", CKPT_F8E4M3},
    {"float8_e5m2", CKPT_F8E5M2}, {"torch.float8_e5m2", CKPT_F8E5M2},
    {"int64", CKPT_I64}, {"long", CKPT_I64}, {"torch.long", CKPT_I64},
    {"torch.int64", CKPT_I64},
    {"int32", CKPT_I32}, {"int", CKPT_I32}, {"torch.int", CKPT_I32},
    {"torch.int32", CKPT_I32},
    {"int16", CKPT_I16}, {"short", CKPT_I16}, {"torch.short", CKPT_I16},
    {"int8", CKPT_I8}, {"torch.int8", CKPT_I8},
    {"uint64", CKPT_U64}, {"uint32", CKPT_U32}, {"uint16", CKPT_U16},
    {"uint8", CKPT_U8}, {"torch.uint8", CKPT_U8}, {"torch.uint16", CKPT_U16},
    {"bool", CKPT_BOOL}, {"torch.bool", CKPT_BOOL}, {"bool_", CKPT_BOOL},
    {"numpy.float32", CKPT_F32}, {"np.int16", CKPT_I16},
    {"np.bool_", CKPT_BOOL},
    /* NumPy typestrs, little-endian, not-applicable and native orders. */
    {"<f8", CKPT_F64}, {"<f4", CKPT_F32}, {"<f2", CKPT_F16},
    {"<i8", CKPT_I64}, {"<i4", CKPT_I32}, {"<i2", CKPT_I16},
    {"|i1", CKPT_I8}, {"<i1", CKPT_I8},
    {"<u8", CKPT_U64}, {"<u4", CKPT_U32}, {"<u2", CKPT_U16},
    {"|u1", CKPT_U8}, {"|b1", CKPT_BOOL},
    {"=i8", CKPT_I64}, {"=f4", CKPT_F32},
    /* Complex and the later float8 formats (torch and NumPy names). */
    {"complex64", CKPT_C64}, {"torch.complex64", CKPT_C64},
    {"torch.cfloat", CKPT_C64}, {"np.complex64", CKPT_C64},
    {"<c8", CKPT_C64}, {"complex128", CKPT_C128},
    {"torch.cdouble", CKPT_C128}, {"<c16", CKPT_C128},
    {"torch.complex32", CKPT_C32}, {"torch.chalf", CKPT_C32},
    {"float8_e4m3fnuz", CKPT_F8E4M3FNUZ},
    {"torch.float8_e4m3fnuz", CKPT_F8E4M3FNUZ},
    {"torch.float8_e5m2fnuz", CKPT_F8E5M2FNUZ},
    {"torch.float8_e8m0fnu", CKPT_F8E8M0},
};

START_TEST(dtype_spellings)
{
    for (size_t i = 0; i < COUNT_OF(SPELLINGS); i++) {
        ckpt_dtype got = ckpt_dtype_parse(SPELLINGS[i].s);
        ck_assert_msg(got == SPELLINGS[i].dt, "'%s' parsed as %s, not %s",
                      SPELLINGS[i].s, ckpt_dtype_name(got),
                      ckpt_dtype_name(SPELLINGS[i].dt));
    }
}
END_TEST

static const char *const BAD_DTYPES[] = {
    "", " f32", "f32 ", "F32", "Float32", "float128", "complex256", "f8",
    "i128", "torch.", "torch", "torch.f", "torch.torch.float32", "np.",
    ">f4", ">i8", ">u2", ">f2", ">u1", "<f3", "<V2", "|V1", ">c8", "<", "|",
    "f4", "<f4x", "<f44", "<c32", "<c4", "float8_e8m0", "float4_e2m1fn_x2",
    "invalid", "C64", "c8", "c16", "float8_e4m3b11fnuz",
    "complex", "uint128", "int4", "string", "object", "O", "?",
};

START_TEST(dtype_invalid_names)
{
    for (size_t i = 0; i < COUNT_OF(BAD_DTYPES); i++) {
        ckpt_dtype got = ckpt_dtype_parse(BAD_DTYPES[i]);
        ck_assert_msg(got == CKPT_DTYPE_INVALID, "'%s' parsed as %s",
                      BAD_DTYPES[i], ckpt_dtype_name(got));
    }
    ck_assert_int_eq(ckpt_dtype_parse(NULL), CKPT_DTYPE_INVALID);
}
END_TEST

/* Canonical i8/u8 are 1-byte types; NumPy's 8-byte "i8"/"u8" need their
 * byte-order mark to be read that way. */
/* The list that refusals of unknown dtypes print: every canonical name,
 * in enum order, ", "-separated, truncated like snprintf. */
START_TEST(dtype_names_list)
{
    char buf[256];
    size_t n = ckpt_dtype_names(buf, sizeof buf);
    ck_assert_str_eq(buf, "f64, f32, f16, bf16, f8e4m3, f8e5m2, i64, i32, "
                     "i16, i8, u64, u32, u16, u8, bool, bytes, c64, c128, "
                     "c32, f8e4m3fnuz, f8e5m2fnuz, f8e8m0");
    ck_assert_uint_eq(n, strlen(buf));
    ck_assert_uint_eq(ckpt_dtype_names(NULL, 0), n);
    char small[8];
    ck_assert_uint_eq(ckpt_dtype_names(small, sizeof small), n);
    ck_assert_str_eq(small, "f64, f3");
    ckpt_error err = { 0 };
    ck_assert_int_eq(ckpt_dtype_unknown(&err, "user.ckpt.dtype", "float33"),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "user.ckpt.dtype: unknown dtype "
                                 "'float33' (valid: f64, f32, "));
    ck_assert_ptr_nonnull(strstr(err.msg, "bool, bytes, c64, c128, c32, "
                                 "f8e4m3fnuz, f8e5m2fnuz, f8e8m0;"));
    ck_assert_int_eq(ckpt_dtype_unknown(&err, NULL, "q"), -EINVAL);
    ck_assert_ptr_eq(strstr(err.msg, "unknown dtype 'q'"), err.msg);
}
END_TEST

START_TEST(dtype_canonical_beats_typestr)
{
    ck_assert_int_eq(ckpt_dtype_parse("i8"), CKPT_I8);
    ck_assert_int_eq(ckpt_dtype_parse("u8"), CKPT_U8);
    ck_assert_int_eq(ckpt_dtype_parse("<i8"), CKPT_I64);
    ck_assert_int_eq(ckpt_dtype_parse("<u8"), CKPT_U64);
}
END_TEST

/* ------------------------------------------------------------------ numel */

START_TEST(numel_basic)
{
    uint64_t n = 99;
    int64_t d[] = {3, 4, 5};
    ck_assert_int_eq(ckpt_shape_numel(3, d, &n, "t", NULL), 0);
    ck_assert_uint_eq(n, 60);
    ck_assert_int_eq(ckpt_shape_numel(0, NULL, &n, "t", NULL), 0);
    ck_assert_uint_eq(n, 1);
    int64_t z[] = {3, 0, 5};
    ck_assert_int_eq(ckpt_shape_numel(3, z, &n, "t", NULL), 0);
    ck_assert_uint_eq(n, 0);
    /* A zero dim makes even an otherwise huge shape empty. */
    int64_t zbig[] = {INT64_MAX, INT64_MAX, 0};
    ck_assert_int_eq(ckpt_shape_numel(3, zbig, &n, "t", NULL), 0);
    ck_assert_uint_eq(n, 0);
    int64_t one[] = {INT64_MAX};
    ck_assert_int_eq(ckpt_shape_numel(1, one, &n, "t", NULL), 0);
    ck_assert_uint_eq(n, (uint64_t)INT64_MAX);
}
END_TEST

START_TEST(numel_overflow)
{
    ckpt_error err = {0};
    uint64_t n = 7;
    int64_t d[] = {(int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31};
    ck_assert_int_eq(ckpt_shape_numel(3, d, &n, "model.w", &err),
                     -EOVERFLOW);
    ck_assert_int_eq(err.code, -EOVERFLOW);
    ck_assert_ptr_nonnull(strstr(err.msg, "model.w"));
    ck_assert_ptr_nonnull(strstr(err.msg, "2147483648,2147483648,2147483648"));
    ck_assert_uint_eq(n, 7); /* untouched on error */
    /* 2^63 elements: one past the limit. */
    int64_t e[] = {(int64_t)1 << 62, 2};
    ck_assert_int_eq(ckpt_shape_numel(2, e, &n, "t", NULL), -EOVERFLOW);
    int64_t f[] = {INT64_MAX, 2};
    ck_assert_int_eq(ckpt_shape_numel(2, f, &n, "t", NULL), -EOVERFLOW);
    int64_t g[] = {INT64_MAX, INT64_MAX};
    ck_assert_int_eq(ckpt_shape_numel(2, g, &n, "t", NULL), -EOVERFLOW);
    /* 2^62 * 1 fits. */
    int64_t h[] = {(int64_t)1 << 62, 1};
    ck_assert_int_eq(ckpt_shape_numel(2, h, &n, "t", NULL), 0);
    ck_assert_uint_eq(n, (uint64_t)1 << 62);
}
END_TEST

START_TEST(numel_invalid)
{
    ckpt_error err = {0};
    uint64_t n;
    int64_t d[] = {3, -1, 5};
    ck_assert_int_eq(ckpt_shape_numel(3, d, &n, "opt.m", &err), -EINVAL);
    ck_assert_int_eq(err.code, -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "opt.m"));
    ck_assert_ptr_nonnull(strstr(err.msg, "3,-1,5"));
    int64_t big[CKPT_MAX_DIMS + 1];
    for (int i = 0; i <= CKPT_MAX_DIMS; i++)
        big[i] = 1;
    ck_assert_int_eq(ckpt_shape_numel(CKPT_MAX_DIMS + 1, big, &n, "t", &err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "33"));
    ck_assert_int_eq(ckpt_shape_numel(-1, big, &n, "t", NULL), -EINVAL);
    ck_assert_int_eq(ckpt_shape_numel(CKPT_MAX_DIMS, big, &n, "t", NULL), 0);
    ck_assert_uint_eq(n, 1);
    /* NULL what is allowed. */
    ck_assert_int_eq(ckpt_shape_numel(3, d, &n, NULL, &err), -EINVAL);
    ck_assert_uint_ne(strlen(err.msg), 0);
}
END_TEST

START_TEST(nbytes_basic)
{
    uint64_t b = 0;
    int64_t d[] = {4096, 4096};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_BF16, 2, d, &b, "t", NULL), 0);
    ck_assert_uint_eq(b, 4096ull * 4096 * 2);
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_F64, 0, NULL, &b, "t", NULL), 0);
    ck_assert_uint_eq(b, 8);
    int64_t z[] = {0, 10};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_F32, 2, z, &b, "t", NULL), 0);
    ck_assert_uint_eq(b, 0);
    /* Exactly at the limit in elements, 1-byte items. */
    int64_t m[] = {INT64_MAX};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_U8, 1, m, &b, "t", NULL), 0);
    ck_assert_uint_eq(b, (uint64_t)INT64_MAX);
}
END_TEST

START_TEST(nbytes_overflow)
{
    ckpt_error err = {0};
    uint64_t b = 5;
    /* 2^62 * 4 elements fits nowhere: numel overflows first. */
    int64_t d[] = {(int64_t)1 << 62, 4};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_F32, 2, d, &b, "big", &err),
                     -EOVERFLOW);
    ck_assert_ptr_nonnull(strstr(err.msg, "big"));
    ck_assert_ptr_nonnull(strstr(err.msg, "4611686018427387904,4"));
    /* 2^62 elements fit, but not 2^62 * 4 bytes. */
    int64_t e[] = {(int64_t)1 << 62};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_F32, 1, e, &b, "emb", &err),
                     -EOVERFLOW);
    ck_assert_int_eq(err.code, -EOVERFLOW);
    ck_assert_ptr_nonnull(strstr(err.msg, "emb"));
    ck_assert_ptr_nonnull(strstr(err.msg, "f32"));
    ck_assert_uint_eq(b, 5);
    /* 2^61 * 4 = 2^63: one past. 2^61 * 2 fits. */
    int64_t f[] = {(int64_t)1 << 61};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_F32, 1, f, &b, "t", NULL),
                     -EOVERFLOW);
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_F16, 1, f, &b, "t", NULL), 0);
    ck_assert_uint_eq(b, (uint64_t)1 << 62);
    /* 2^60 elements of 8 bytes = 2^63 bytes: over; of 2 bytes: fits. */
    int64_t g[] = {1 << 20, 1 << 20, 1 << 20};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_F64, 3, g, &b, "t", NULL),
                     -EOVERFLOW);
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_I16, 3, g, &b, "t", NULL), 0);
    ck_assert_uint_eq(b, (uint64_t)1 << 61);
}
END_TEST

START_TEST(nbytes_invalid)
{
    ckpt_error err = {0};
    uint64_t b;
    int64_t d[] = {2, 2};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_DTYPE_INVALID, 2, d, &b, "x.y",
                                       &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "x.y"));
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_DTYPE_COUNT, 2, d, &b, "t", NULL),
                     -EINVAL);
    int64_t n[] = {2, -2};
    ck_assert_int_eq(ckpt_shape_nbytes(CKPT_F32, 2, n, &b, "t", NULL),
                     -EINVAL);
}
END_TEST

/* ---------------------------------------------------------------- format */

START_TEST(format_basic)
{
    char buf[128];
    int64_t d[] = {4096, 4096};
    ck_assert_int_eq(ckpt_shape_format(buf, sizeof buf, 2, d), 9);
    ck_assert_str_eq(buf, "4096,4096");
    ck_assert_int_eq(ckpt_shape_format_json(buf, sizeof buf, 2, d), 11);
    ck_assert_str_eq(buf, "[4096,4096]");
    strcpy(buf, "junk");
    ck_assert_int_eq(ckpt_shape_format(buf, sizeof buf, 0, NULL), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(ckpt_shape_format_json(buf, sizeof buf, 0, NULL), 2);
    ck_assert_str_eq(buf, "[]");
    int64_t one[] = {7};
    ck_assert_int_eq(ckpt_shape_format(buf, sizeof buf, 1, one), 1);
    ck_assert_str_eq(buf, "7");
    int64_t m[] = {INT64_MAX, 0};
    ckpt_shape_format_json(buf, sizeof buf, 2, m);
    ck_assert_str_eq(buf, "[9223372036854775807,0]");
}
END_TEST

START_TEST(format_truncates_like_snprintf)
{
    char buf[6];
    int64_t d[] = {4096, 4096};
    memset(buf, 'x', sizeof buf);
    ck_assert_int_eq(ckpt_shape_format(buf, sizeof buf, 2, d), 9);
    ck_assert_str_eq(buf, "4096,");
    ck_assert_int_eq(ckpt_shape_format_json(buf, sizeof buf, 2, d), 11);
    ck_assert_str_eq(buf, "[4096");
    ck_assert_int_eq(ckpt_shape_format(NULL, 0, 2, d), 9);
    ck_assert_int_eq(ckpt_shape_format_json(NULL, 0, 2, d), 11);
    buf[0] = 'x';
    ck_assert_int_eq(ckpt_shape_format(buf, 1, 2, d), 9);
    ck_assert_int_eq(buf[0], '\0');
    /* The largest shape fits the size the functions report. */
    int64_t big[CKPT_MAX_DIMS];
    for (int i = 0; i < CKPT_MAX_DIMS; i++)
        big[i] = INT64_MIN + i;
    int need = ckpt_shape_format_json(NULL, 0, CKPT_MAX_DIMS, big);
    char *heap = malloc((size_t)need + 1);
    ck_assert_ptr_nonnull(heap);
    ck_assert_int_eq(ckpt_shape_format_json(heap, (size_t)need + 1,
                                            CKPT_MAX_DIMS, big), need);
    ck_assert_uint_eq(strlen(heap), (size_t)need);
    free(heap);
}
END_TEST

/* ----------------------------------------------------------------- parse */

START_TEST(parse_forms)
{
    int64_t d[CKPT_MAX_DIMS];
    ck_assert_int_eq(ckpt_shape_parse("4096,4096", d, NULL), 2);
    ck_assert_int_eq(d[0], 4096);
    ck_assert_int_eq(d[1], 4096);
    ck_assert_int_eq(ckpt_shape_parse("[4096, 1024]", d, NULL), 2);
    ck_assert_int_eq(d[0], 4096);
    ck_assert_int_eq(d[1], 1024);
    ck_assert_int_eq(ckpt_shape_parse(" [ 3 , 0 ,5 ] \n", d, NULL), 3);
    ck_assert_int_eq(d[0], 3);
    ck_assert_int_eq(d[1], 0);
    ck_assert_int_eq(d[2], 5);
    ck_assert_int_eq(ckpt_shape_parse("", d, NULL), 0);
    ck_assert_int_eq(ckpt_shape_parse("  ", d, NULL), 0);
    ck_assert_int_eq(ckpt_shape_parse("[]", d, NULL), 0);
    ck_assert_int_eq(ckpt_shape_parse("[ ]", d, NULL), 0);
    ck_assert_int_eq(ckpt_shape_parse("7", d, NULL), 1);
    ck_assert_int_eq(d[0], 7);
    ck_assert_int_eq(ckpt_shape_parse("9223372036854775807", d, NULL), 1);
    ck_assert_int_eq(d[0], INT64_MAX);
    ck_assert_int_eq(ckpt_shape_parse("007, 1", d, NULL), 2);
    ck_assert_int_eq(d[0], 7);
}
END_TEST

START_TEST(parse_max_dims)
{
    char text[256] = "";
    int64_t d[CKPT_MAX_DIMS];
    for (int i = 0; i < CKPT_MAX_DIMS; i++)
        strcat(text, i ? ",1" : "1");
    ck_assert_int_eq(ckpt_shape_parse(text, d, NULL), CKPT_MAX_DIMS);
    strcat(text, ",1");
    ckpt_error err = {0};
    ck_assert_int_eq(ckpt_shape_parse(text, d, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "too many"));
}
END_TEST

static const char *const BAD_SHAPES[] = {
    "4096,", ",4096", "4096,,4096", "-1", "3,-2", "[3,4", "3,4]", "[3,4]x",
    "[3,4],", "[[3]]", "a", "3x4", "3 4", "3.0", "1e3", "+3", "0x10",
    "9223372036854775808", "99999999999999999999999", "[", "]", "[,]",
    "(3,4)", "[3,]",
};

START_TEST(parse_errors)
{
    int64_t d[CKPT_MAX_DIMS];
    for (size_t i = 0; i < COUNT_OF(BAD_SHAPES); i++) {
        ckpt_error err = {0};
        int rc = ckpt_shape_parse(BAD_SHAPES[i], d, &err);
        ck_assert_msg(rc == -EINVAL, "'%s' gave %d", BAD_SHAPES[i], rc);
        ck_assert_int_eq(err.code, -EINVAL);
        ck_assert_msg(strstr(err.msg, BAD_SHAPES[i]) != NULL,
                      "message '%s' does not quote '%s'", err.msg,
                      BAD_SHAPES[i]);
    }
    ck_assert_int_eq(ckpt_shape_parse(NULL, d, NULL), -EINVAL);
}
END_TEST

START_TEST(format_parse_round_trip)
{
    unsigned seed = 12345;
    for (int iter = 0; iter < 2000; iter++) {
        int64_t d[CKPT_MAX_DIMS], back[CKPT_MAX_DIMS];
        seed = seed * 1103515245u + 12345u;
        int ndim = (int)(seed >> 16) % (CKPT_MAX_DIMS + 1);
        for (int i = 0; i < ndim; i++) {
            seed = seed * 1103515245u + 12345u;
            d[i] = (int64_t)(seed >> 8) * (int64_t)(iter + 1) *
                   ((i % 3) == 0 ? 1000003 : 1);
        }
        char plain[CKPT_MAX_DIMS * 21 + 3], json[CKPT_MAX_DIMS * 21 + 3];
        ckpt_shape_format(plain, sizeof plain, ndim, d);
        ckpt_shape_format_json(json, sizeof json, ndim, d);
        ck_assert_int_eq(ckpt_shape_parse(plain, back, NULL), ndim);
        for (int i = 0; i < ndim; i++)
            ck_assert_int_eq(back[i], d[i]);
        ck_assert_int_eq(ckpt_shape_parse(json, back, NULL), ndim);
        for (int i = 0; i < ndim; i++)
            ck_assert_int_eq(back[i], d[i]);
    }
}
END_TEST

/* The NumPy descr each dtype is shown with, and what it is widened to. */
START_TEST(dtype_npy_descr)
{
    static const struct {
        ckpt_dtype dt;
        const char *descr;
        ckpt_dtype stored;
    } want[] = {
        {CKPT_C64, "<c8", CKPT_C64},     {CKPT_C128, "<c16", CKPT_C128},
        {CKPT_C32, "<c8", CKPT_C64},     {CKPT_BF16, "<f4", CKPT_F32},
        {CKPT_F8E4M3FNUZ, "<f4", CKPT_F32},
        {CKPT_F8E5M2FNUZ, "<f4", CKPT_F32}, {CKPT_F8E8M0, "<f4", CKPT_F32},
        {CKPT_F16, "<f2", CKPT_F16},
    };
    for (size_t i = 0; i < COUNT_OF(want); i++) {
        ckpt_dtype stored;
        ck_assert_str_eq(ckpt_dtype_npy_descr(want[i].dt, &stored),
                         want[i].descr);
        ck_assert_int_eq(stored, want[i].stored);
    }
    /* Every dtype has a view. */
    for (int dt = 1; dt < CKPT_DTYPE_COUNT; dt++) {
        ckpt_dtype stored;
        ck_assert_ptr_nonnull(ckpt_dtype_npy_descr((ckpt_dtype)dt, &stored));
    }
}
END_TEST

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Values worked out by hand from each format's definition. */
START_TEST(dtype_widen_values)
{
    /* e4m3fnuz: bias 8, max 0x7f = 1.875 * 2^7; min subnormal 2^-10. */
    ck_assert_uint_eq(npy_f8e4m3fnuz_bits(0x7f), bits_of(240.0f));
    ck_assert_uint_eq(npy_f8e4m3fnuz_bits(0xff), bits_of(-240.0f));
    ck_assert_uint_eq(npy_f8e4m3fnuz_bits(0x01), bits_of(0x1p-10f));
    ck_assert_uint_eq(npy_f8e4m3fnuz_bits(0x40), bits_of(1.0f));
    ck_assert_uint_eq(npy_f8e4m3fnuz_bits(0x00), 0);
    ck_assert_uint_eq(npy_f8e4m3fnuz_bits(0x80), 0x7fc00000u);
    /* e5m2fnuz: bias 16, max 1.75 * 2^15; min subnormal 2^-17. */
    ck_assert_uint_eq(npy_f8e5m2fnuz_bits(0x7f), bits_of(57344.0f));
    ck_assert_uint_eq(npy_f8e5m2fnuz_bits(0x01), bits_of(0x1p-17f));
    ck_assert_uint_eq(npy_f8e5m2fnuz_bits(0xc0), bits_of(-1.0f));
    ck_assert_uint_eq(npy_f8e5m2fnuz_bits(0x80), 0x7fc00000u);
    /* e8m0: 2^(e-127); 0 is 2^-127 (a float32 subnormal); 0xff NaN. */
    ck_assert_uint_eq(npy_f8e8m0_bits(127), bits_of(1.0f));
    ck_assert_uint_eq(npy_f8e8m0_bits(254), bits_of(0x1p127f));
    ck_assert_uint_eq(npy_f8e8m0_bits(0), bits_of(0x1p-127f));
    ck_assert_uint_eq(npy_f8e8m0_bits(0xff), 0x7fc00000u);
    /* binary16: normal, subnormal, infinity, NaN payload kept. */
    ck_assert_uint_eq(npy_f16_bits(0x3c00), bits_of(1.0f));
    ck_assert_uint_eq(npy_f16_bits(0xc000), bits_of(-2.0f));
    ck_assert_uint_eq(npy_f16_bits(0x0001), bits_of(0x1p-24f));
    ck_assert_uint_eq(npy_f16_bits(0x7bff), bits_of(65504.0f));
    ck_assert_uint_eq(npy_f16_bits(0xfc00), 0xff800000u);
    ck_assert_uint_eq(npy_f16_bits(0x7d01), 0x7fa02000u);

    /* npy_widen: c32 element by element into complex64. */
    npy_tables t;
    npy_tables_init(&t);
    const uint16_t c32[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    float c64[4];
    ck_assert_int_eq(npy_widen(&t, CKPT_C32, c32, 2, c64), 0);
    ck_assert(c64[0] == 1.0f && c64[1] == -2.0f && c64[2] == 0x1p-24f &&
              c64[3] == 65504.0f);
    const uint8_t b[3] = {0x7f, 0x80, 0x01};
    uint32_t f[3];
    ck_assert_int_eq(npy_widen(&t, CKPT_F8E8M0, b, 3, f), 0);
    ck_assert_uint_eq(f[0], bits_of(1.0f));
    ck_assert_int_eq(npy_widen(&t, CKPT_F8E4M3FNUZ, b, 3, f), 0);
    ck_assert_uint_eq(f[1], 0x7fc00000u);
    ck_assert_int_eq(npy_widen(&t, CKPT_C64, b, 1, f), -EINVAL);
}
END_TEST

static Suite *shape_dtype_suite(void)
{
    Suite *s = suite_create("shape_dtype");
    TCase *dt = tcase_create("dtype");
    tcase_add_test(dt, dtype_canonical_round_trip);
    tcase_add_test(dt, dtype_names_list);
    tcase_add_test(dt, dtype_invalid_values);
    tcase_add_test(dt, dtype_spellings);
    tcase_add_test(dt, dtype_invalid_names);
    tcase_add_test(dt, dtype_canonical_beats_typestr);
    tcase_add_test(dt, dtype_npy_descr);
    tcase_add_test(dt, dtype_widen_values);
    suite_add_tcase(s, dt);
    TCase *sz = tcase_create("sizes");
    tcase_add_test(sz, numel_basic);
    tcase_add_test(sz, numel_overflow);
    tcase_add_test(sz, numel_invalid);
    tcase_add_test(sz, nbytes_basic);
    tcase_add_test(sz, nbytes_overflow);
    tcase_add_test(sz, nbytes_invalid);
    suite_add_tcase(s, sz);
    TCase *tx = tcase_create("text");
    tcase_add_test(tx, format_basic);
    tcase_add_test(tx, format_truncates_like_snprintf);
    tcase_add_test(tx, parse_forms);
    tcase_add_test(tx, parse_max_dims);
    tcase_add_test(tx, parse_errors);
    tcase_add_test(tx, format_parse_round_trip);
    suite_add_tcase(s, tx);
    return s;
}

int main(void)
{
    return unit_run(shape_dtype_suite());
}
