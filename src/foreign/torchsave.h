/*
 * torchsave.h - where a tensor's bytes are in an archive that torch.save
 * wrote (the zip of data.pkl plus one entry per storage): the tensor's
 * dtype, sizes, strides and the byte range of its storage, found by
 * running data.pkl through the restricted pickle reader.  Nothing of the
 * storage itself is read.  Also the value of an io.BytesIO saved so (as
 * PyTorch's distributed checkpoint saves byte items).
 */
#ifndef CKPT_TORCHSAVE_H
#define CKPT_TORCHSAVE_H

#include <stdint.h>
#include "ckptfs.h"
#include "foreign/zipread.h"

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

/* The most bytes ckpt_torch_bytesio_read decodes: larger values stay
 * archives. */
#define CKPT_BYTESIO_MAX ((uint64_t)64 << 20)

/* Reads the archive of `len` bytes that `rd` reads and, when its data.pkl
 * is an io.BytesIO (what torch.save of one writes: the BytesIO's state is
 * its value, position and attributes), gives its value, getvalue(), in a
 * new buffer *out of *n bytes (plus a NUL) and returns 1.  Returns 0 when
 * the archive holds anything else or cannot be read as one (err says
 * why), and -ENOMEM.  Values over CKPT_BYTESIO_MAX bytes are not decoded
 * (0).  Nothing runs: the restricted pickle reader only admits BytesIO
 * and the two ways protocol 2 spells bytes. */
int ckpt_torch_bytesio_read(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                            const char *what, unsigned char **out,
                            size_t *n, ckpt_error *err);

/* The dtype of a pickled torch dtype or storage-class global (a
 * pk_global id), or CKPT_DTYPE_INVALID. */
ckpt_dtype ckpt_torch_dtype(int global_id);

#endif
