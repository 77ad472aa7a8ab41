/*
 * load.c - ckpt_load_region: the read side's load into host or CUDA device
 * memory.  Host memory is read by ckpt_read_region itself; device memory
 * goes through pinned bounce buffers (staging.c's ckpt_stage_load_device).
 * Arguments follow ckpt_read_region's convention (ckptfs.h): NULL offsets
 * are zeros, NULL sizes the whole shape, NULL dst refused.
 */
#include "ckptfs.h"

#include <errno.h>
#include <stdio.h>

#include "common/error.h"
#include "common/shape.h"
#include "async/staging.h"

int ckpt_load_region(ckpt_reader *r, size_t idx, const int64_t *offsets,
                     const int64_t *sizes, void *dst, ckpt_error *err)
{
    ckpt_tensor_info ti;
    char what[256];
    if (!r)
        return ckpt_err_null(err, "ckpt_load_region", "reader");
    if (ckpt_reader_info(r, idx, &ti))
        return ckpt_err(err, -EINVAL, "ckpt_load_region: no tensor %zu", idx);
    static const int64_t zeros[CKPT_MAX_DIMS];
    const int64_t *size = sizes ? sizes : ti.shape;
    const int64_t *off = offsets ? offsets : zeros;
    uint64_t nbytes = 0;
    for (int d = 0; d < ti.ndim; d++)
        if (size[d] < 0 || size[d] > ti.shape[d])
            return ckpt_err(err, -EINVAL, "tensor '%s': region dim %d size "
                            "%lld is outside its size %lld", ti.fqn, d,
                            (long long)size[d], (long long)ti.shape[d]);
    int rc = ckpt_shape_nbytes(ti.dtype, ti.ndim, size, &nbytes, ti.fqn, err);
    if (rc)
        return rc;
    if (!dst && nbytes)
        return ckpt_err_null(err, "ckpt_load_region", "dst");
    snprintf(what, sizeof what, "load of tensor '%s'", ti.fqn);
    int kind = ckpt_mem_kind(NULL, dst, (size_t)nbytes, 1, what, err);
    if (kind < 0)
        return kind;
    if (kind == CKPT_MEM_DEVICE)
        return ckpt_stage_load_device(r, idx, off, size, dst, err);
    return ckpt_read_region(r, idx, off, size, dst, err);
}
