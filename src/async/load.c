/*
 * load.c - ckpt_load_region and ckpt_load_batch: the read side's loads
 * into host or CUDA device memory.  Host memory is read by
 * ckpt_read_region / ckpt_read_batch themselves; device memory goes
 * through pinned bounce buffers (devload.c).  Arguments follow
 * ckpt_read_region's convention (ckptfs.h): NULL offsets are zeros, NULL
 * sizes the whole shape, NULL dst refused.
 */
#include "ckptfs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/shape.h"
#include "async/devload.h"
#include "async/gpu.h"
#include "async/staging.h"

/* Checks one item (tensor, region, dst) as `call` names it: the kind of
 * memory its dst is (CKPT_MEM_HOST/DEVICE; host for an empty region), or
 * a negative errno. */
static int check_item(ckpt_reader *r, const ckpt_read_item *it,
                      const char *call, ckpt_error *err)
{
    ckpt_tensor_info ti;
    char what[256];
    if (ckpt_reader_info(r, it->idx, &ti))
        return ckpt_err(err, -EINVAL, "%s: no tensor %zu", call, it->idx);
    static const int64_t zeros[CKPT_MAX_DIMS];
    const int64_t *size = it->sizes ? it->sizes : ti.shape;
    const int64_t *off = it->offsets ? it->offsets : zeros;
    uint64_t nbytes = 0;
    for (int d = 0; d < ti.ndim; d++)
        if (size[d] < 0 || size[d] > ti.shape[d] || off[d] < 0 ||
            off[d] > ti.shape[d] - size[d])
            return ckpt_err(err, -EINVAL, "tensor '%s': region dim %d "
                            "[%lld, +%lld) is outside its size %lld", ti.fqn,
                            d, (long long)off[d], (long long)size[d],
                            (long long)ti.shape[d]);
    int rc = ckpt_shape_nbytes(ti.dtype, ti.ndim, size, &nbytes, ti.fqn, err);
    if (rc)
        return rc;
    if (nbytes == 0)
        return CKPT_MEM_HOST;
    if (!it->dst)
        return ckpt_err_null(err, call, "dst");
    snprintf(what, sizeof what, "load of tensor '%s'", ti.fqn);
    return ckpt_mem_kind(NULL, it->dst, (size_t)nbytes, 1, what, err);
}

/* Loads device items, one pipeline per device (each on a stream of its
 * own device); v is reordered. */
static int load_per_device(ckpt_reader *r, ckpt_read_item *v, size_t n,
                           ckpt_error *err)
{
    int rc = 0;
    size_t done = 0;
    while (rc == 0 && done < n) {
        /* Move the items on v[done]'s device to the front of the rest. */
        int dev = ckpt_gpu_device_of(v[done].dst);
        size_t k = done + 1;
        for (size_t i = done + 1; i < n; i++)
            if (ckpt_gpu_device_of(v[i].dst) == dev) {
                ckpt_read_item t = v[k];
                v[k++] = v[i];
                v[i] = t;
            }
        rc = ckpt_devload(r, v + done, k - done, err);
        done = k;
    }
    return rc;
}

int ckpt_load_region(ckpt_reader *r, size_t idx, const int64_t *offsets,
                     const int64_t *sizes, void *dst, ckpt_error *err)
{
    if (!r)
        return ckpt_err_null(err, "ckpt_load_region", "reader");
    ckpt_read_item it = { idx, offsets, sizes, dst };
    int kind = check_item(r, &it, "ckpt_load_region", err);
    if (kind < 0)
        return kind;
    if (kind == CKPT_MEM_DEVICE)
        return ckpt_devload(r, &it, 1, err);
    return ckpt_read_region(r, idx, offsets, sizes, dst, err);
}

int ckpt_load_batch(ckpt_reader *r, const ckpt_read_item *items, size_t n,
                    ckpt_error *err)
{
    if (!r)
        return ckpt_err_null(err, "ckpt_load_batch", "reader");
    if (!items && n)
        return ckpt_err_null(err, "ckpt_load_batch", "items");
    ckpt_read_item *host = malloc((n ? n : 1) * sizeof *host);
    ckpt_read_item *dev = malloc((n ? n : 1) * sizeof *dev);
    size_t nh = 0, nd = 0;
    int rc = host && dev ? 0 : ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int kind = check_item(r, &items[i], "ckpt_load_batch", err);
        if (kind < 0)
            rc = ckpt_err_wrap(err, kind, "item %zu of %zu", i, n);
        else if (kind == CKPT_MEM_DEVICE)
            dev[nd++] = items[i];
        else
            host[nh++] = items[i];
    }
    if (rc == 0 && nh)
        rc = ckpt_read_batch(r, host, nh, err);
    if (rc == 0 && nd)
        rc = load_per_device(r, dev, nd, err);
    free(host);
    free(dev);
    return rc;
}
