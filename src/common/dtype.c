/*
 * dtype.c - element types: canonical names, item sizes, and parsing of the
 * spellings users bring from PyTorch ("torch.bfloat16", "half", "long") and
 * NumPy ("float32", "<f4", "|u1").  Canonical names are what the index and
 * the user.ckpt.dtype xattr store.
 *
 * Where PyTorch and NumPy disagree on a bare word ("float", "int"), the
 * PyTorch meaning wins (float32, int32): checkpoints come from PyTorch far
 * more often.  Stored data is little-endian, so big-endian NumPy typestrs
 * (">f4") are refused rather than silently misread.
 */
#include "ckptfs.h"
#include "common/dtype.h"
#include "common/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct dtype_desc {
    const char *name;
    size_t size;
} dtype_desc;

/* Indexed by ckpt_dtype. */
static const dtype_desc DTYPES[CKPT_DTYPE_COUNT] = {
    [CKPT_DTYPE_INVALID] = {"invalid", 0},
    [CKPT_F64] = {"f64", 8},
    [CKPT_F32] = {"f32", 4},
    [CKPT_F16] = {"f16", 2},
    [CKPT_BF16] = {"bf16", 2},
    [CKPT_F8E4M3] = {"f8e4m3", 1},
    [CKPT_F8E5M2] = {"f8e5m2", 1},
    [CKPT_I64] = {"i64", 8},
    [CKPT_I32] = {"i32", 4},
    [CKPT_I16] = {"i16", 2},
    [CKPT_I8] = {"i8", 1},
    [CKPT_U64] = {"u64", 8},
    [CKPT_U32] = {"u32", 4},
    [CKPT_U16] = {"u16", 2},
    [CKPT_U8] = {"u8", 1},
    [CKPT_BOOL] = {"bool", 1},
    [CKPT_BYTES] = {"bytes", 1},
    [CKPT_C64] = {"c64", 8},
    [CKPT_C128] = {"c128", 16},
    [CKPT_C32] = {"c32", 4},
    [CKPT_F8E4M3FNUZ] = {"f8e4m3fnuz", 1},
    [CKPT_F8E5M2FNUZ] = {"f8e5m2fnuz", 1},
    [CKPT_F8E8M0] = {"f8e8m0", 1},
};

typedef struct dtype_alias {
    const char *spelling;
    ckpt_dtype dtype;
} dtype_alias;

/* PyTorch and NumPy type names (after any "torch."/"numpy."/"np." prefix). */
static const dtype_alias ALIASES[] = {
    {"float64", CKPT_F64}, {"double", CKPT_F64},
    {"float32", CKPT_F32}, {"float", CKPT_F32},
    {"float16", CKPT_F16}, {"half", CKPT_F16},
    {"bfloat16", CKPT_BF16},
    {"float8_e4m3fn", CKPT_F8E4M3}, {"float8_e4m3", CKPT_F8E4M3},
    {"float8_e5m2", CKPT_F8E5M2},
    {"float8_e4m3fnuz", CKPT_F8E4M3FNUZ},
    {"float8_e5m2fnuz", CKPT_F8E5M2FNUZ},
    {"float8_e8m0fnu", CKPT_F8E8M0},
    {"complex64", CKPT_C64}, {"cfloat", CKPT_C64},
    {"complex128", CKPT_C128}, {"cdouble", CKPT_C128},
    {"complex32", CKPT_C32}, {"chalf", CKPT_C32},
    {"int64", CKPT_I64}, {"long", CKPT_I64},
    {"int32", CKPT_I32}, {"int", CKPT_I32},
    {"int16", CKPT_I16}, {"short", CKPT_I16},
    {"int8", CKPT_I8},
    {"uint64", CKPT_U64}, {"uint32", CKPT_U32},
    {"uint16", CKPT_U16}, {"uint8", CKPT_U8},
    {"bool", CKPT_BOOL}, {"bool_", CKPT_BOOL},
};

/* NumPy typestr kinds and sizes ("f4" in "<f4"). */
typedef struct dtype_code {
    const char *code;
    ckpt_dtype dtype;
} dtype_code;

static const dtype_code CODES[] = {
    {"f8", CKPT_F64}, {"f4", CKPT_F32}, {"f2", CKPT_F16},
    {"i8", CKPT_I64}, {"i4", CKPT_I32}, {"i2", CKPT_I16}, {"i1", CKPT_I8},
    {"u8", CKPT_U64}, {"u4", CKPT_U32}, {"u2", CKPT_U16}, {"u1", CKPT_U8},
    {"b1", CKPT_BOOL}, {"c8", CKPT_C64}, {"c16", CKPT_C128},
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static int valid(ckpt_dtype dt)
{
    return (int)dt > (int)CKPT_DTYPE_INVALID && (int)dt < (int)CKPT_DTYPE_COUNT;
}

const char *ckpt_dtype_name(ckpt_dtype dt)
{
    return valid(dt) ? DTYPES[dt].name : "invalid";
}

size_t ckpt_dtype_size(ckpt_dtype dt)
{
    return valid(dt) ? DTYPES[dt].size : 0;
}

size_t ckpt_dtype_names(char *buf, size_t cap)
{
    size_t n = 0;
    for (int i = CKPT_DTYPE_INVALID + 1; i < CKPT_DTYPE_COUNT; i++) {
        int k = snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0,
                         "%s%s", n ? ", " : "", DTYPES[i].name);
        if (k > 0)
            n += (size_t)k;
    }
    if (cap && n == 0)
        buf[0] = '\0';
    return n;
}

int ckpt_dtype_unknown(ckpt_error *err, const char *what, const char *text)
{
    char names[256];
    ckpt_dtype_names(names, sizeof names);
    return ckpt_err(err, -EINVAL, "%s%sunknown dtype '%.100s' (valid: %s; "
                    "or a PyTorch or NumPy spelling such as float32, "
                    "torch.bfloat16, <f4)", what ? what : "",
                    what ? ": " : "", text, names);
}

static ckpt_dtype find_canonical(const char *s)
{
    for (int i = CKPT_DTYPE_INVALID + 1; i < CKPT_DTYPE_COUNT; i++) {
        if (strcmp(s, DTYPES[i].name) == 0)
            return (ckpt_dtype)i;
    }
    return CKPT_DTYPE_INVALID;
}

static ckpt_dtype find_alias(const char *s)
{
    for (size_t i = 0; i < COUNT_OF(ALIASES); i++) {
        if (strcmp(s, ALIASES[i].spelling) == 0)
            return ALIASES[i].dtype;
    }
    return CKPT_DTYPE_INVALID;
}

/* Byte-order characters that describe little-endian data: '<', '|' (not
 * applicable), and '=' (native) on a little-endian host. */
static int little_endian_order(char c)
{
    if (c == '<' || c == '|')
        return 1;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (c == '=')
        return 1;
#endif
    return 0;
}

/* NumPy typestr: byte order, kind and size ("<f4", "|u1").  The byte order
 * is required: a bare "i8" or "u8" is a canonical name (1-byte ints), not
 * NumPy's 8-byte ints. */
static ckpt_dtype find_typestr(const char *s)
{
    if (!little_endian_order(*s))
        return CKPT_DTYPE_INVALID;
    s++;
    for (size_t i = 0; i < COUNT_OF(CODES); i++) {
        if (strcmp(s, CODES[i].code) == 0)
            return CODES[i].dtype;
    }
    return CKPT_DTYPE_INVALID;
}

/* Strips one "torch.", "numpy." or "np." prefix. */
static const char *strip_module(const char *s)
{
    static const char *const prefixes[] = {"torch.", "numpy.", "np."};
    for (size_t i = 0; i < COUNT_OF(prefixes); i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(s, prefixes[i], n) == 0)
            return s + n;
    }
    return s;
}

ckpt_dtype ckpt_dtype_parse(const char *s)
{
    if (!s || !*s)
        return CKPT_DTYPE_INVALID;
    ckpt_dtype dt = find_canonical(s);
    if (dt != CKPT_DTYPE_INVALID)
        return dt;
    dt = find_typestr(s);
    if (dt != CKPT_DTYPE_INVALID)
        return dt;
    return find_alias(strip_module(s));
}

const char *ckpt_dtype_npy_descr(ckpt_dtype dt, ckpt_dtype *stored)
{
    *stored = dt;
    switch (dt) {
    case CKPT_F64: return "<f8";
    case CKPT_F32: return "<f4";
    case CKPT_F16: return "<f2";
    case CKPT_BF16: case CKPT_F8E4M3: case CKPT_F8E5M2:
    case CKPT_F8E4M3FNUZ: case CKPT_F8E5M2FNUZ: case CKPT_F8E8M0:
        *stored = CKPT_F32;
        return "<f4";
    case CKPT_C64: return "<c8";
    case CKPT_C128: return "<c16";
    case CKPT_C32:
        *stored = CKPT_C64;
        return "<c8";
    case CKPT_I64: return "<i8";
    case CKPT_I32: return "<i4";
    case CKPT_I16: return "<i2";
    case CKPT_I8: return "|i1";
    case CKPT_U64: return "<u8";
    case CKPT_U32: return "<u4";
    case CKPT_U16: return "<u2";
    case CKPT_U8: return "|u1";
    case CKPT_BOOL: return "|b1";
    case CKPT_BYTES: return "|u1";
    default: return NULL;
    }
}
