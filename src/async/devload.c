/*
 * devload.c - loads into CUDA device memory (see devload.h).  Each item's
 * region is cut into boxes whose row-major images are consecutive runs of
 * the destination; boxes are packed into one pinned bounce buffer until it
 * is full, the buffer is read with ckpt_read_batch (so the frames of all
 * its boxes are decoded by all of the reader's threads at once), and one
 * host-to-device copy per box is queued on the upload's stream.  The other
 * buffer is filled meanwhile.  A state of many small tensors thus costs a
 * batch per bounce buffer, not a read per tensor; the buffers are kept
 * with the reader (read/attach.h), so pinning them is paid once.
 */
#include "async/devload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "async/gpu.h"
#include "common/error.h"
#include "common/shape.h"
#include "read/attach.h"

/* Each of the two pinned bounce buffers (less for a smaller load). */
#define BOUNCE_BYTES ((size_t)32 << 20)
#define MIN_BOUNCE ((size_t)1 << 20)

/* One box waiting in the current buffer. */
typedef struct box {
    size_t idx;
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
    unsigned char *dst;          /* where its bytes go on the device */
    size_t at, n;                /* its bytes in the buffer */
} box;

typedef struct fill {
    ckpt_reader *r;
    ckpt_gpu_upload *up;
    size_t cap;                  /* bytes of a buffer */
    unsigned char *buf;          /* the buffer being filled, or NULL */
    size_t used;
    box *boxes;
    ckpt_read_item *items;
    size_t nbox, maxbox;
    ckpt_error *err;
} fill;

/* Reads the boxes of the current buffer, queues their copies, pushes it. */
static int flush(fill *F)
{
    if (F->nbox == 0)
        return 0;
    for (size_t i = 0; i < F->nbox; i++) {
        box *b = &F->boxes[i];
        F->items[i] = (ckpt_read_item){ b->idx, b->off, b->size,
                                        F->buf + b->at };
    }
    int rc = ckpt_read_batch(F->r, F->items, F->nbox, F->err);
    for (size_t i = 0; rc == 0 && i < F->nbox; i++)
        rc = ckpt_gpu_upload_copy(F->up, F->boxes[i].dst, F->boxes[i].at,
                                  F->boxes[i].n, F->err);
    if (rc == 0)
        rc = ckpt_gpu_upload_push(F->up, F->err);
    F->nbox = 0;
    F->used = 0;
    F->buf = NULL;
    return rc;
}

/* Adds one box of `bytes` bytes going to dst, flushing a full buffer
 * first. */
static int add_box(fill *F, size_t idx, int ndim, const int64_t *off,
                   const int64_t *size, size_t bytes, unsigned char *dst)
{
    int rc = 0;
    if (F->buf && F->used + bytes > F->cap)
        rc = flush(F);
    if (rc == 0 && !F->buf)
        rc = ckpt_gpu_upload_buffer(F->up, (void **)&F->buf, F->err);
    if (rc)
        return rc;
    if (F->nbox == F->maxbox) {
        size_t m = F->maxbox ? 2 * F->maxbox : 64;
        box *b = realloc(F->boxes, m * sizeof *b);
        if (b)
            F->boxes = b;
        ckpt_read_item *it = b ? realloc(F->items, m * sizeof *it) : NULL;
        if (!it)
            return ckpt_err(F->err, -ENOMEM, "out of memory");
        F->items = it;
        F->maxbox = m;
    }
    box *b = &F->boxes[F->nbox++];
    b->idx = idx;
    memcpy(b->off, off, (size_t)ndim * sizeof *off);
    memcpy(b->size, size, (size_t)ndim * sizeof *size);
    b->dst = dst;
    b->at = F->used;
    b->n = bytes;
    F->used += bytes;
    return 0;
}

/* Cuts region (off, size) of tensor idx (ndim dims of isz-byte elements)
 * into boxes of at most F->cap bytes (at least one row of the innermost
 * dim that fits) whose images are consecutive runs of dst, in order. */
static int add_region(fill *F, size_t idx, int ndim, const int64_t *off,
                      const int64_t *size, size_t isz, unsigned char *dst)
{
    int64_t o[CKPT_MAX_DIMS], z[CKPT_MAX_DIMS], pos[CKPT_MAX_DIMS];
    if (ndim == 0)
        return add_box(F, idx, 0, off, size, isz, dst);
    for (int d = 0; d < ndim; d++)
        if (size[d] == 0)
            return 0;
    /* d: the outermost dim whose inner rows fit, one row per step of d. */
    int d = ndim - 1;
    size_t inner = isz;
    for (int k = ndim - 1; k > 0; k--) {
        size_t next = inner * (size_t)size[k];
        if (next > F->cap)
            break;
        inner = next;
        d = k - 1;
    }
    int64_t step = (int64_t)(F->cap / inner);
    if (step < 1)
        step = 1;
    memset(pos, 0, sizeof pos);
    for (;;) {
        for (int64_t j = 0; j < size[d]; j += step) {
            int64_t len = size[d] - j < step ? size[d] - j : step;
            for (int k = 0; k < ndim; k++) {
                o[k] = off[k] + (k < d ? pos[k] : 0);
                z[k] = k < d ? 1 : size[k];
            }
            o[d] = off[d] + j;
            z[d] = len;
            size_t bytes = inner * (size_t)len;
            int rc = add_box(F, idx, ndim, o, z, bytes, dst);
            if (rc)
                return rc;
            dst += bytes;
        }
        int k = d - 1;
        while (k >= 0 && ++pos[k] == size[k])
            pos[k--] = 0;
        if (k < 0)
            return 0;
    }
}

/* Bytes of item i's region (checked by the caller). */
static size_t item_bytes(ckpt_reader *r, const ckpt_read_item *it,
                         ckpt_tensor_info *ti)
{
    uint64_t n = 0;
    ckpt_reader_info(r, it->idx, ti);
    ckpt_shape_nbytes(ti->dtype, ti->ndim, it->sizes ? it->sizes : ti->shape,
                      &n, ti->fqn, NULL);
    return (size_t)n;
}

int ckpt_devload(ckpt_reader *r, const ckpt_read_item *items, size_t n,
                 ckpt_error *err)
{
    static const int64_t zeros[CKPT_MAX_DIMS];
    ckpt_tensor_info ti;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += item_bytes(r, &items[i], &ti);
    if (total == 0)
        return 0;
    fill F = { .r = r, .err = err };
    F.cap = total < BOUNCE_BYTES ? total : BOUNCE_BYTES;
    if (F.cap < MIN_BOUNCE)
        F.cap = MIN_BOUNCE;
    int rc = 0;
    /* The reader keeps the buffers between loads: pinning 64 MiB costs
     * tens of milliseconds, more than loading a tensor of that size. */
    F.up = ckpt_reader_attached_take(r);
    if (F.up && ckpt_gpu_upload_fits(F.up, items[0].dst, F.cap))
        ckpt_gpu_upload_begin(F.up);
    else {
        ckpt_gpu_upload_free(F.up);
        rc = ckpt_gpu_upload_open(&F.up, items[0].dst, F.cap, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ckpt_read_item *it = &items[i];
        ckpt_reader_info(r, it->idx, &ti);   /* empty regions add nothing */
        rc = add_region(&F, it->idx, ti.ndim,
                        it->offsets ? it->offsets : zeros,
                        it->sizes ? it->sizes : ti.shape,
                        ckpt_dtype_size(ti.dtype), it->dst);
    }
    if (rc == 0)
        rc = flush(&F);
    free(F.boxes);
    free(F.items);
    rc = ckpt_gpu_upload_end(F.up, rc, err);
    if (rc == 0)
        ckpt_reader_attached_put(r, F.up, ckpt_gpu_upload_free);
    else
        ckpt_gpu_upload_free(F.up);
    return rc;
}
