/*
 * diff.c - what changed between two checkpoints, tensor by tensor
 * (ckpt_diff in ckptfs.h; `ckpt diff`, ckptfs.diff): equal frames are
 * told by their checksums without decoding them, changed tensors are read
 * in blocks from both and compared element by element.
 */
#include "ckptfs.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/npy.h"

/* Bytes of each tensor read at a time. */
#define BLOCK ((size_t)8 << 20)

typedef struct differ {
    ckpt_reader *a, *b;
    unsigned char *ba, *bb;      /* BLOCK bytes each */
    float *fa, *fb;              /* widened 1-byte and 2-byte floats */
    npy_tables tab;
    double sum_d2, sum_a2;
} differ;

/* 1 when a and b are stored with the same chunks and frames, *changed
 * then the frames whose checksums differ. */
static int same_layout(differ *d, size_t ia, size_t ib, uint64_t *changed,
                       ckpt_error *err, int *rc)
{
    ckpt_tensor_info ta, tb;
    ckpt_reader_info(d->a, ia, &ta);
    ckpt_reader_info(d->b, ib, &tb);
    *changed = 0;
    if (ta.nchunks != tb.nchunks || ta.nframes != tb.nframes)
        return 0;
    for (size_t c = 0; c < ta.nchunks; c++) {
        ckpt_chunk_info ca, cb;
        if ((*rc = ckpt_reader_chunk(d->a, ia, c, &ca)) ||
            (*rc = ckpt_reader_chunk(d->b, ib, c, &cb)))
            return ckpt_err(err, *rc, "tensor '%s': cannot list its chunks",
                            ta.fqn), 0;
        size_t dims = (size_t)ta.ndim * sizeof *ca.offsets;
        if (ca.nframes != cb.nframes || memcmp(ca.offsets, cb.offsets, dims) ||
            memcmp(ca.sizes, cb.sizes, dims))
            return 0;
        for (uint64_t f = 0; f < ca.nframes; f++) {
            ckpt_frame_info fa, fb;
            if ((*rc = ckpt_reader_frame(d->a, ia, c, f, &fa, err)) ||
                (*rc = ckpt_reader_frame(d->b, ib, c, f, &fb, err)))
                return 0;
            if (fa.raw_offset != fb.raw_offset || fa.raw_size != fb.raw_size)
                return 0;
            *changed += fa.checksum != fb.checksum;
        }
    }
    return 1;
}

/* Floats that npy_widen makes float32 of. */
static int narrow(ckpt_dtype dt)
{
    return dt == CKPT_BF16 || dt == CKPT_F8E4M3 || dt == CKPT_F8E5M2 ||
           dt == CKPT_F8E4M3FNUZ || dt == CKPT_F8E5M2FNUZ ||
           dt == CKPT_F8E8M0;
}

/* Real floating-point dtypes (complex ones are compared by bytes). */
static int is_float(ckpt_dtype dt)
{
    return dt == CKPT_F64 || dt == CKPT_F32 || dt == CKPT_F16 || narrow(dt);
}


/* Element k of block src (dtype dt) as a double; bf16 and fp8 from
 * their widened copy `wide`. */
static double elem(ckpt_dtype dt, const unsigned char *src, const float *wide,
                   size_t k)
{
    switch (dt) {
    case CKPT_F64: {
        double v;
        memcpy(&v, src + 8 * k, 8);
        return v;
    }
    case CKPT_F32: {
        float v;
        memcpy(&v, src + 4 * k, 4);
        return v;
    }
    case CKPT_F16: {
        uint16_t h;
        uint32_t bits;
        float f;
        memcpy(&h, src + 2 * k, 2);
        bits = npy_f16_bits(h);
        memcpy(&f, &bits, 4);
        return f;
    }
    default:
        return wide[k];
    }
}

/* Compares one block of n elements (itemsize isz) of both tensors. */
static void compare_block(differ *d, ckpt_dtype dt, size_t isz, size_t n,
                          uint64_t first, uint64_t per_frame,
                          ckpt_diff_entry *e, uint64_t *last_frame,
                          int count_frames)
{
    int fl = is_float(dt);
    if (narrow(dt)) {
        npy_widen(&d->tab, dt, d->ba, n, d->fa);
        npy_widen(&d->tab, dt, d->bb, n, d->fb);
    }
    for (size_t k = 0; k < n; k++) {
        const unsigned char *x = d->ba + k * isz, *y = d->bb + k * isz;
        int differs = memcmp(x, y, isz) != 0;
        if (differs) {
            e->changed_elems++;
            uint64_t fr = (first + k) / per_frame;
            if (count_frames && fr != *last_frame) {
                e->changed_frames++;
                *last_frame = fr;
            }
        }
        if (!fl)
            continue;
        double va = elem(dt, d->ba, d->fa, k);
        double vb = elem(dt, d->bb, d->fb, k);
        d->sum_a2 += va * va;
        if (!differs)
            continue;
        double diff = fabs(vb - va);
        if (isnan(diff))
            e->max_abs = NAN;
        else if (diff > e->max_abs)   /* false once max_abs is NaN */
            e->max_abs = diff;
        if (!isnan(diff) && !isinf(diff))
            d->sum_d2 += diff * diff;
    }
}

/* Reads both tensors whole, block by block, and compares them. */
static int compare_bytes(differ *d, size_t ia, size_t ib, ckpt_diff_entry *e,
                         int count_frames, ckpt_error *err)
{
    ckpt_tensor_info t;
    ckpt_reader_info(d->b, ib, &t);
    size_t isz = t.numel ? (size_t)(t.nbytes / t.numel) : 1;
    size_t step = BLOCK - BLOCK % isz;
    uint64_t per_frame = t.nframes ? (t.numel + t.nframes - 1) / t.nframes
                                   : 1;
    uint64_t last_frame = UINT64_MAX;
    d->sum_a2 = d->sum_d2 = 0;
    e->has_stats = is_float(t.dtype);
    e->max_abs = 0;
    if (count_frames)
        e->changed_frames = 0;
    for (uint64_t off = 0; off < t.nbytes; off += step) {
        uint64_t len = t.nbytes - off < step ? t.nbytes - off : step;
        int64_t ra = ckpt_read(d->a, ia, d->ba, off, len, err);
        if (ra < 0)
            return (int)ra;
        int64_t rb = ckpt_read(d->b, ib, d->bb, off, len, err);
        if (rb < 0)
            return (int)rb;
        compare_block(d, t.dtype, isz, (size_t)(len / isz), off / isz,
                      per_frame, e, &last_frame, count_frames);
    }
    if (e->has_stats)
        e->rel_l2 = d->sum_a2 > 0 ? sqrt(d->sum_d2 / d->sum_a2)
                    : d->sum_d2 > 0 ? INFINITY : 0;
    return 0;
}

static int diff_pair(differ *d, size_t ia, size_t ib, ckpt_diff_entry *e,
                     ckpt_error *err)
{
    ckpt_tensor_info ta, tb;
    ckpt_reader_info(d->a, ia, &ta);
    ckpt_reader_info(d->b, ib, &tb);
    e->frames = tb.nframes;
    e->same_type = ta.dtype == tb.dtype && ta.ndim == tb.ndim &&
                   !memcmp(ta.shape, tb.shape, (size_t)ta.ndim *
                           sizeof *ta.shape);
    if (!e->same_type) {
        e->status = CKPT_DIFF_CHANGED;
        e->changed_frames = tb.nframes;
        e->changed_elems = tb.numel;
        return 0;
    }
    uint64_t changed = 0;
    int rc = 0;
    e->same_layout = same_layout(d, ia, ib, &changed, err, &rc);
    if (rc)
        return rc;
    if (e->same_layout) {
        e->changed_frames = changed;
        if (changed == 0)
            return 0;   /* equal, by checksums: nothing decoded */
    }
    rc = compare_bytes(d, ia, ib, e, !e->same_layout, err);
    if (rc)
        return rc;
    e->status = e->changed_elems ? CKPT_DIFF_CHANGED : CKPT_DIFF_EQUAL;
    if (e->status == CKPT_DIFF_EQUAL)
        e->changed_frames = 0;   /* checksums collided or layouts differ */
    return 0;
}

static void differ_free(differ *d)
{
    free(d->ba);
    free(d->bb);
    free(d->fa);
    free(d->fb);
}

int64_t ckpt_diff(ckpt_reader *a, ckpt_reader *b, ckpt_diff_fn fn,
                  void *arg, ckpt_error *err)
{
    if (!a || !b || !fn)
        return ckpt_err_null(err, "ckpt_diff", !a ? "a" : !b ? "b" : "fn");
    differ d = { .a = a, .b = b };
    d.ba = malloc(BLOCK);
    d.bb = malloc(BLOCK);
    d.fa = malloc(BLOCK * sizeof(float));
    d.fb = malloc(BLOCK * sizeof(float));
    if (!d.ba || !d.bb || !d.fa || !d.fb) {
        differ_free(&d);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    npy_tables_init(&d.tab);
    size_t na = ckpt_reader_count(a), nb = ckpt_reader_count(b), i = 0, j = 0;
    int64_t differ_n = 0;
    int rc = 0;
    while (!rc && (i < na || j < nb)) {
        ckpt_tensor_info ta = { 0 }, tb = { 0 };
        if (i < na)
            ckpt_reader_info(a, i, &ta);
        if (j < nb)
            ckpt_reader_info(b, j, &tb);
        int c = i == na ? 1 : j == nb ? -1 : strcmp(ta.fqn, tb.fqn);
        ckpt_diff_entry e = { .fqn = c <= 0 ? ta.fqn : tb.fqn };
        if (c < 0) {
            e.status = CKPT_DIFF_ONLY_A;
            e.frames = ta.nframes;
            i++;
        } else if (c > 0) {
            e.status = CKPT_DIFF_ONLY_B;
            e.frames = tb.nframes;
            j++;
        } else {
            rc = diff_pair(&d, i++, j++, &e, err);
            if (rc)
                rc = ckpt_err_wrap(err, rc, "diff of tensor '%s'", e.fqn);
        }
        if (!rc) {
            differ_n += e.status != CKPT_DIFF_EQUAL;
            fn(arg, &e);
        }
    }
    differ_free(&d);
    return rc ? rc : differ_n;
}
