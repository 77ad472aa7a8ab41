/*
 * torchsave.h - where a tensor's bytes are in an archive that torch.save
 * wrote (the zip of data.pkl plus one entry per storage): the tensor's
 * dtype, sizes, strides and the byte range of its storage, found by
 * running data.pkl through the restricted pickle reader.  Nothing of the
 * storage itself is read.
 */
#ifndef CKPT_TORCHSAVE_H
#define CKPT_TORCHSAVE_H

#include <stdint.h>
#include "ckptfs.h"
#include "zipread.h"

typedef struct ckpt_torch_tensor {
    ckpt_dtype dtype;
    int ndim;
    int64_t size[CKPT_MAX_DIMS];
    int64_t stride[CKPT_MAX_DIMS];   /* in elements */
    int contiguous;                  /* row-major without gaps */
    uint64_t data_offset;   /* archive offset of element 0 of the tensor */
    uint64_t span_bytes;    /* bytes from there to just past the last
                               element the tensor uses */
} ckpt_torch_tensor;

/* Reads the archive of `len` bytes that `rd` reads and describes the one
 * tensor its data.pkl holds.  Refuses (naming `what`) anything else: an
 * archive that is not torch.save's, a pickle that is not a tensor or uses
 * other globals, a storage entry too small for the sizes and strides. */
int ckpt_torch_tensor_read(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                           const char *what, ckpt_torch_tensor *out,
                           ckpt_error *err);

/* The dtype of a pickled torch dtype or storage-class global (a
 * pk_global id), or CKPT_DTYPE_INVALID. */
ckpt_dtype ckpt_torch_dtype(int global_id);

#endif
