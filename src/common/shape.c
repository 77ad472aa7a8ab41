/*
 * shape.c - checked shape arithmetic (element counts and byte sizes that
 * refuse to exceed 2^63 - 1), and formatting/parsing of shapes in the
 * comma form of the user.ckpt.shape xattr ("4096,4096") and the JSON form
 * stored in the index ("[4096,4096]").  See shape.h.
 */
#include "common/shape.h"
#include "common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

/* Room for CKPT_MAX_DIMS dims of up to 20 characters each, plus commas and
 * brackets. */
#define SHAPE_TEXT_CAP (CKPT_MAX_DIMS * 21 + 3)

/* The largest tensor size in elements or bytes: 2^63 - 1. */
#define SHAPE_LIMIT ((uint64_t)INT64_MAX)

static const char *what_or_default(const char *what)
{
    return what ? what : "tensor";
}

/* Checks ndim and that every dim is non-negative; formats nothing. */
static int check_dims(int ndim, const int64_t *dims, const char *what,
                      ckpt_error *err)
{
    if (ndim < 0 || ndim > CKPT_MAX_DIMS)
        return ckpt_err(err, -EINVAL,
                        "%s: %d dimensions (must be between 0 and %d)",
                        what_or_default(what), ndim, CKPT_MAX_DIMS);
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) {
            char text[SHAPE_TEXT_CAP];
            ckpt_shape_format(text, sizeof text, ndim, dims);
            return ckpt_err(err, -EINVAL,
                            "%s: shape [%s] has negative dimension %d (%lld)",
                            what_or_default(what), text, i,
                            (long long)dims[i]);
        }
    }
    return 0;
}

/* *out = a * b; returns 1 when the product exceeds SHAPE_LIMIT. */
static int mul_over(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > SHAPE_LIMIT / a)
        return 1;
    *out = a * b;
    return 0;
}

/* Product of the (already checked, non-negative) dims; returns 1 on
 * overflow.  A zero dim makes the product 0 whatever the others are. */
static int dims_product(int ndim, const int64_t *dims, uint64_t *out)
{
    for (int i = 0; i < ndim; i++) {
        if (dims[i] == 0) {
            *out = 0;
            return 0;
        }
    }
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (mul_over(n, (uint64_t)dims[i], &n))
            return 1;
    }
    *out = n;
    return 0;
}

static int overflow_err(ckpt_error *err, const char *what, int ndim,
                        const int64_t *dims, const char *unit)
{
    char text[SHAPE_TEXT_CAP];
    ckpt_shape_format(text, sizeof text, ndim, dims);
    return ckpt_err(err, -EOVERFLOW,
                    "%s: shape [%s] is too large (more than 2^63-1 %s)",
                    what_or_default(what), text, unit);
}

int ckpt_shape_numel(int ndim, const int64_t *dims, uint64_t *numel,
                     const char *what, ckpt_error *err)
{
    int rc = check_dims(ndim, dims, what, err);
    if (rc < 0)
        return rc;
    uint64_t n;
    if (dims_product(ndim, dims, &n))
        return overflow_err(err, what, ndim, dims, "elements");
    *numel = n;
    return 0;
}

int ckpt_shape_nbytes(ckpt_dtype dt, int ndim, const int64_t *dims,
                      uint64_t *nbytes, const char *what, ckpt_error *err)
{
    size_t item = ckpt_dtype_size(dt);
    if (item == 0)
        return ckpt_err(err, -EINVAL, "%s: invalid dtype (%d)",
                        what_or_default(what), (int)dt);
    uint64_t n;
    int rc = ckpt_shape_numel(ndim, dims, &n, what, err);
    if (rc < 0)
        return rc;
    uint64_t b;
    if (mul_over(n, (uint64_t)item, &b)) {
        char text[SHAPE_TEXT_CAP];
        ckpt_shape_format(text, sizeof text, ndim, dims);
        return ckpt_err(err, -EOVERFLOW,
                        "%s: shape [%s] of %s is too large (more than "
                        "2^63-1 bytes)",
                        what_or_default(what), text, ckpt_dtype_name(dt));
    }
    *nbytes = b;
    return 0;
}

/* ------------------------------------------------------------ formatting */

/* snprintf-style appending: *pos counts the length needed so far, and the
 * text is written as far as it fits in buf[0..cap). */
static void append(char *buf, size_t cap, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t cap, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *at = (buf && *pos < cap) ? buf + *pos : NULL;
    size_t room = (buf && *pos < cap) ? cap - *pos : 0;
    int n = vsnprintf(at, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        *pos += (size_t)n;
}

/* Appends the decimal digits of v: by hand, since indexes of millions of
 * chunks format two dims lists per chunk. */
static void append_i64(char *buf, size_t cap, size_t *pos, int64_t v)
{
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[n++] = '-';
    while (n--) {
        if (buf && *pos + 1 < cap)
            buf[*pos] = tmp[n];
        ++*pos;
    }
}

static int format_dims(char *buf, size_t cap, int ndim, const int64_t *dims,
                       const char *open, const char *close)
{
    size_t pos = 0;
    if (buf && cap > 0)
        buf[0] = '\0';
    append(buf, cap, &pos, "%s", open);
    for (int i = 0; i < ndim; i++) {
        if (i && buf && pos + 1 < cap)
            buf[pos] = ',';
        pos += i > 0;
        append_i64(buf, cap, &pos, dims[i]);
    }
    append(buf, cap, &pos, "%s", close);
    if (buf && cap > 0)
        buf[pos < cap ? pos : cap - 1] = '\0';
    return (int)pos;
}

int ckpt_shape_format(char *buf, size_t cap, int ndim, const int64_t *dims)
{
    return format_dims(buf, cap, ndim, dims, "", "");
}

int ckpt_shape_format_json(char *buf, size_t cap, int ndim,
                           const int64_t *dims)
{
    return format_dims(buf, cap, ndim, dims, "[", "]");
}

/* --------------------------------------------------------------- parsing */

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static int parse_err(ckpt_error *err, const char *s, const char *why)
{
    return ckpt_err(err, -EINVAL, "bad shape '%.256s': %s", s, why);
}

/* Parses one non-negative decimal dim at *pp; advances *pp. */
static int parse_dim(const char **pp, int64_t *out, const char *s,
                     ckpt_error *err)
{
    const char *p = *pp;
    if (*p == '-')
        return parse_err(err, s, "negative dimension");
    if (*p < '0' || *p > '9')
        return parse_err(err, s, "expected a non-negative integer");
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t digit = (uint64_t)(*p - '0');
        if (v > ((uint64_t)INT64_MAX - digit) / 10)
            return parse_err(err, s, "dimension too large");
        v = v * 10 + digit;
    }
    *out = (int64_t)v;
    *pp = p;
    return 0;
}

/* Parses the comma-separated dims from *pp up to the closing character
 * `close` ('\0' for the bare form), leaving *pp on it.  Returns ndim or
 * -EINVAL. */
static int parse_list(const char **pp, char close, int64_t *dims,
                      const char *s, ckpt_error *err)
{
    int ndim = 0;
    const char *p = skip_ws(*pp);
    if (*p != close) {
        for (;;) {
            if (ndim == CKPT_MAX_DIMS)
                return parse_err(err, s, "too many dimensions");
            int rc = parse_dim(&p, &dims[ndim], s, err);
            if (rc < 0)
                return rc;
            ndim++;
            p = skip_ws(p);
            if (*p == close)
                break;
            if (*p != ',')
                return parse_err(err, s, *p ? "expected ',' between "
                                              "dimensions" : "missing ']'");
            p = skip_ws(p + 1);
        }
    }
    *pp = p;
    return ndim;
}

int ckpt_shape_parse(const char *s, int64_t *dims, ckpt_error *err)
{
    if (!s)
        return ckpt_err(err, -EINVAL, "bad shape: no text");
    const char *p = skip_ws(s);
    if (*p != '[')
        return parse_list(&p, '\0', dims, s, err);
    p++;
    int ndim = parse_list(&p, ']', dims, s, err);
    if (ndim < 0)
        return ndim;
    if (*skip_ws(p + 1) != '\0')
        return parse_err(err, s, "text after ']'");
    return ndim;
}
