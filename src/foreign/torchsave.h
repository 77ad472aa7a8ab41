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
#include "foreign/pickle.h"
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
    const ckpt_zip_entry *storage;   /* its storage's entry (describe) */
} ckpt_torch_tensor;

/* An archive opened: its directory, the prefix of its entries
 * ("archive/"), and data.pkl run through the restricted pickle reader. */
typedef struct ckpt_torch_archive {
    ckpt_zip z;
    char prefix[1024];
    unsigned char *pkl;
    size_t pkl_len;
    pk_ctx *ctx;
    pk_val *root;           /* what data.pkl holds; owned by ctx */
} ckpt_torch_archive;

/* Opens the archive of `len` bytes that `rd` reads: its directory and its
 * data.pkl (at most pkl_max bytes), refusing (naming `what`) anything
 * that is not torch.save's zip format (the legacy format of torch < 1.6
 * among them), big-endian data, and any pickle that needs a class outside
 * pickle.h's allowlist (naming the class). */
int ckpt_torch_archive_open(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                            const char *what, uint64_t pkl_max,
                            ckpt_torch_archive *a, ckpt_error *err);
void ckpt_torch_archive_close(ckpt_torch_archive *a);

/* Describes the tensor that `call` (a _rebuild_tensor_v2/v3 or
 * _rebuild_parameter call recorded by the pickle reader) makes from the
 * storages of archive directory z: refuses a dtype ckptfs lacks (naming
 * it), a missing storage entry, and sizes, strides and storage offset
 * that reach past the storage or overflow. */
int ckpt_torch_describe(const pk_val *call, const ckpt_zip *z,
                        const char *prefix, const char *what,
                        ckpt_torch_tensor *t, ckpt_error *err);

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
