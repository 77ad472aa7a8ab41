/*
 * region.c - hyper-rectangle arithmetic and row-major run enumeration (see
 * region.h): box intersection and containment, the contiguous runs that
 * copy a region between two row-major boxes, the decomposition of a linear
 * byte range into boxes, and NumPy-style slice parsing.  Everything here is
 * iterative and does work proportional to the number of runs or boxes,
 * never to the number of elements.
 */
#include "common/region.h"
#include "common/error.h"
#include "common/shape.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

/* ------------------------------------------------------------------ boxes */

/* off + size, saturated to the int64 range instead of overflowing. */
static int64_t box_end(int64_t off, int64_t size)
{
    if (size > 0 && off > INT64_MAX - size)
        return INT64_MAX;
    if (size < 0 && off < INT64_MIN - size)
        return INT64_MIN;
    return off + size;
}

uint64_t ckpt_box_numel(int ndim, const int64_t *size)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (uint64_t)size[i];
    return n;
}

int ckpt_box_intersect(int ndim, const int64_t *a_off, const int64_t *a_size,
                       const int64_t *b_off, const int64_t *b_size,
                       int64_t *o_off, int64_t *o_size)
{
    for (int i = 0; i < ndim; i++) {
        int64_t lo = a_off[i] > b_off[i] ? a_off[i] : b_off[i];
        int64_t a_hi = box_end(a_off[i], a_size[i]);
        int64_t b_hi = box_end(b_off[i], b_size[i]);
        int64_t hi = a_hi < b_hi ? a_hi : b_hi;
        if (hi <= lo)
            return 0;
        o_off[i] = lo;
        o_size[i] = (int64_t)((uint64_t)hi - (uint64_t)lo);
    }
    return 1;
}

int ckpt_box_contains(int ndim, const int64_t *out_off,
                      const int64_t *out_size, const int64_t *in_off,
                      const int64_t *in_size)
{
    for (int i = 0; i < ndim; i++) {
        if (in_size[i] < 0 || out_size[i] < 0)
            return 0;
        if (in_off[i] < out_off[i])
            return 0;
        if (box_end(in_off[i], in_size[i]) > box_end(out_off[i], out_size[i]))
            return 0;
    }
    return 1;
}

/* Row-major strides, in elements, of a box of these sizes. */
static void row_major_strides(int ndim, const int64_t *size, uint64_t *st)
{
    uint64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= (uint64_t)size[i];
    }
}

/* Linear index of point p in a box at `off` with strides st. */
static uint64_t linear_at(int ndim, const int64_t *off, const uint64_t *st,
                          const int64_t *p)
{
    uint64_t lin = 0;
    for (int i = 0; i < ndim; i++)
        lin += (uint64_t)(p[i] - off[i]) * st[i];
    return lin;
}

uint64_t ckpt_box_linear(int ndim, const int64_t *off, const int64_t *size,
                         const int64_t *p)
{
    uint64_t st[CKPT_MAX_DIMS];
    if (ndim <= 0 || ndim > CKPT_MAX_DIMS)
        return 0;
    row_major_strides(ndim, size, st);
    return linear_at(ndim, off, st, p);
}

/* ------------------------------------------------------------------- runs */

/* First dimension of the contiguous run: the run covers dims [k, ndim),
 * merging each trailing dim that r spans in full in both s and d into the
 * dim before it. */
static int run_first_dim(int ndim, const int64_t *r_size,
                         const int64_t *s_size, const int64_t *d_size)
{
    int k = ndim - 1;
    while (k > 0 && r_size[k] == s_size[k] && r_size[k] == d_size[k])
        k--;
    return k;
}

int ckpt_region_runs(int ndim, const int64_t *r_off, const int64_t *r_size,
                     const int64_t *s_off, const int64_t *s_size,
                     const int64_t *d_off, const int64_t *d_size,
                     ckpt_run_fn fn, void *arg)
{
    if (ndim < 0 || ndim > CKPT_MAX_DIMS)
        return -EINVAL;
    if (ndim == 0)
        return fn(arg, 0, 0, 1);
    for (int i = 0; i < ndim; i++) {
        if (r_size[i] <= 0)
            return 0;
    }
    uint64_t ss[CKPT_MAX_DIMS], ds[CKPT_MAX_DIMS];
    int64_t idx[CKPT_MAX_DIMS] = {0};
    row_major_strides(ndim, s_size, ss);
    row_major_strides(ndim, d_size, ds);
    int k = run_first_dim(ndim, r_size, s_size, d_size);
    uint64_t n = ckpt_box_numel(ndim - k, r_size + k);
    uint64_t src = linear_at(ndim, s_off, ss, r_off);
    uint64_t dst = linear_at(ndim, d_off, ds, r_off);
    for (;;) {
        int rc = fn(arg, src, dst, n);
        if (rc)
            return rc;
        /* Odometer over the outer dims [0, k), innermost first. */
        int j = k - 1;
        while (j >= 0 && idx[j] + 1 == r_size[j]) {
            src -= (uint64_t)idx[j] * ss[j];
            dst -= (uint64_t)idx[j] * ds[j];
            idx[j] = 0;
            j--;
        }
        if (j < 0)
            return 0;
        idx[j]++;
        src += ss[j];
        dst += ds[j];
    }
}

/* ----------------------------------------------------------- linear boxes */

typedef struct lin_ctx {
    int ndim;
    const int64_t *shape;
    const uint64_t *st;     /* row-major strides of shape */
    ckpt_box_fn fn;
    void *arg;
} lin_ctx;

/* Calls fn for elements [a, b), which must be multiples of st[level] lying
 * in one block of st[level - 1]: a box that is one index in each dim before
 * `level`, a range in dim `level`, and whole in the dims after it. */
static int emit_box(const lin_ctx *c, uint64_t a, uint64_t b, int level)
{
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
    for (int i = 0; i < c->ndim; i++) {
        if (i <= level) {
            off[i] = (int64_t)((a / c->st[i]) % (uint64_t)c->shape[i]);
            size[i] = 1;
        } else {
            off[i] = 0;
            size[i] = c->shape[i];
        }
    }
    size[level] = (int64_t)((b - a) / c->st[level]);
    return c->fn(c->arg, off, size);
}

/* Emits [*cur, target) at `level` when non-empty and advances *cur. */
static int emit_upto(const lin_ctx *c, uint64_t *cur, uint64_t target,
                     int level)
{
    if (target <= *cur)
        return 0;
    int rc = emit_box(c, *cur, target, level);
    *cur = target;
    return rc;
}

int ckpt_region_linear_boxes(int ndim, const int64_t *shape, uint64_t lo,
                             uint64_t hi, ckpt_box_fn fn, void *arg)
{
    uint64_t numel;
    int rc = ckpt_shape_numel(ndim, shape, &numel, "shape", NULL);
    if (rc < 0)
        return rc;
    if (hi > numel)
        hi = numel;
    if (lo >= hi)
        return 0;
    if (ndim == 0) {
        int64_t none[1] = {0};
        return fn(arg, none, none);
    }
    uint64_t st[CKPT_MAX_DIMS];
    row_major_strides(ndim, shape, st);
    lin_ctx c = {ndim, shape, st, fn, arg};
    uint64_t cur = lo;
    int level = ndim - 1;
    /* Head: finish partial rows, climbing one dim at a time, while the
     * range reaches the end of the enclosing block. */
    while (level > 0) {
        uint64_t block = st[level - 1];
        uint64_t up = (cur + block - 1) / block * block;
        if (up == cur ? hi - cur < block : hi < up)
            break;
        rc = emit_upto(&c, &cur, up, level);
        if (rc)
            return rc;
        level--;
    }
    /* Middle: whole rows at `level`; then tail rows down the dims. */
    for (; level < ndim; level++) {
        rc = emit_upto(&c, &cur, hi / st[level] * st[level], level);
        if (rc)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------ slices */

typedef struct slice_ctx {
    const char *spec;
    int ndim;
    const int64_t *shape;
    ckpt_error *err;
} slice_ctx;

static int slice_err(const slice_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int slice_err(const slice_ctx *c, const char *fmt, ...)
{
    char why[256], dims[CKPT_MAX_DIMS * 21 + 3];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    /* Shapes as docs/CLI.md writes them: "256,64", "()" for a scalar. */
    if (c->ndim == 0)
        snprintf(dims, sizeof dims, "()");
    else
        ckpt_shape_format(dims, sizeof dims, c->ndim, c->shape);
    return ckpt_err(c->err, -EINVAL, "bad slice '%.256s' for shape %s: %s",
                    c->spec, dims, why);
}

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* Parses an optional signed decimal integer at *pp.  Returns 1 when one was
 * there, 0 when not, or -EINVAL. */
static int parse_int(const slice_ctx *c, const char **pp, int64_t *out)
{
    const char *p = skip_ws(*pp);
    int neg = 0;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    if (*p < '0' || *p > '9') {
        if (p != skip_ws(*pp))
            return slice_err(c, "expected digits after the sign");
        return 0;
    }
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t digit = (uint64_t)(*p - '0');
        if (v > ((uint64_t)INT64_MAX - digit) / 10)
            return slice_err(c, "number too large");
        v = v * 10 + digit;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    *pp = skip_ws(p);
    return 1;
}

/* A slice bound as Python's slice.indices() does it for step 1: negative
 * counts from the end, then clamped to [0, n]. */
static int64_t clamp_bound(int64_t v, int64_t n)
{
    if (v < 0)
        v += n;
    if (v < 0)
        return 0;
    return v > n ? n : v;
}

/* Parses one entry ("3", "-1", "2:5", ":", "-4:") for dimension `dim`. */
static int parse_entry(const slice_ctx *c, const char **pp, int dim,
                       int64_t *off, int64_t *size)
{
    int64_t n = c->shape[dim], start = 0, stop = n;
    const char *p = skip_ws(*pp);
    if (p[0] == '.' && p[1] == '.' && p[2] == '.')
        return slice_err(c, "'...' is not supported");
    int has_start = parse_int(c, &p, &start);
    if (has_start < 0)
        return has_start;
    if (*p != ':') {
        if (!has_start)
            return slice_err(c, "expected an index or a range for "
                                "dimension %d", dim);
        int64_t i = start < 0 ? start + n : start;
        if (i < 0 || i >= n)
            return slice_err(c, "index %lld is out of range for dimension "
                                "%d of size %lld", (long long)start, dim,
                             (long long)n);
        *off = i;
        *size = 1;
        *pp = p;
        return 0;
    }
    p++;
    int has_stop = parse_int(c, &p, &stop);
    if (has_stop < 0)
        return has_stop;
    p = skip_ws(p);
    if (*p == ':')
        return slice_err(c, "steps are not supported");
    start = has_start ? clamp_bound(start, n) : 0;
    stop = has_stop ? clamp_bound(stop, n) : n;
    *off = start;
    *size = stop > start ? stop - start : 0;
    *pp = p;
    return 0;
}

int ckpt_slice_parse(const char *spec, int ndim, const int64_t *shape,
                     int64_t *off, int64_t *size, ckpt_error *err)
{
    uint64_t numel;
    int rc = ckpt_shape_numel(ndim, shape, &numel, "slice", err);
    if (rc < 0) {
        /* An impossible shape is bad input here, whatever the reason. */
        if (err)
            err->code = -EINVAL;
        return -EINVAL;
    }
    slice_ctx c = {spec ? spec : "", ndim, shape, err};
    for (int i = 0; i < ndim; i++) {
        off[i] = 0;
        size[i] = shape[i];
    }
    const char *p = skip_ws(c.spec);
    if (*p == '\0')
        return 0;
    for (int dim = 0;; dim++) {
        if (dim == ndim)
            return slice_err(&c, "more entries than the %d dimension%s of "
                                 "the tensor", ndim, ndim == 1 ? "" : "s");
        rc = parse_entry(&c, &p, dim, &off[dim], &size[dim]);
        if (rc < 0)
            return rc;
        if (*p == '\0')
            return 0;
        if (*p != ',')
            return slice_err(&c, "unexpected '%c'", *p);
        p++;
    }
}
