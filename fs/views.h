/*
 * views.h - the content ckptfs generates rather than stores: the NumPy
 * view of a tensor (a version 1.0 .npy header, then the tensor's bytes, or
 * for the types NumPy lacks the values widened on the fly: bf16 and float8
 * to float32, c32 to complex64),
 * .ckptfs/metadata.json (the whole index as JSON), .ckptfs/stats, and the
 * values of the io.BytesIO items of PyTorch checkpoints, and the
 * .safetensors/ view (every tensor in safetensors files, laid out by the
 * library's export/stlayout.h, the bytes read on demand).
 * No FUSE here: these work on a ckpt_reader and plain buffers.
 */
#ifndef CKPTFS_FS_VIEWS_H
#define CKPTFS_FS_VIEWS_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"
#include "common/npy.h"

/* The longest .npy header views_npy_header writes (32 dims of 19 digits
 * fit well below it). */
#define VIEWS_NPY_HEADER_MAX 1024

/* Where things are in a tensor's .npy file. */
typedef struct views_npy {
    uint32_t header_len;    /* bytes before the data: a multiple of 64 */
    uint32_t out_itemsize;  /* bytes per element in the file's data */
    ckpt_dtype widen;       /* dtype widened (to f32 or c64), or CKPT_DTYPE_INVALID
                               when the data is the stored image itself */
    uint64_t size;          /* header_len + numel * out_itemsize */
} views_npy;

/* float32 bit patterns of every float8 value, built once (src/npy.h). */
typedef npy_tables views_tables;

void views_tables_init(views_tables *t);

/* Lays out the .npy file of tensor ti.  -EOVERFLOW when its size does not
 * fit in 63 bits, -EINVAL for a dtype with no NumPy spelling. */
int views_npy_layout(const ckpt_tensor_info *ti, views_npy *out);

/* Writes the header (magic, version 1.0, dict padded with spaces and '\n'
 * so the data starts at a multiple of 64) into buf; returns its length, or
 * a negative errno when cap is too small. */
int views_npy_header(const ckpt_tensor_info *ti, char *buf, size_t cap);

/* Reads bytes [off, off + len) of tensor idx's .npy file into dst.
 * Returns the bytes read (short only at the end of the file) or the
 * library's negative errno with err filled.  Widening reads the stored
 * elements through a temporary buffer of at most a few hundred KiB. */
int64_t views_npy_read(ckpt_reader *r, size_t idx, const ckpt_tensor_info *ti,
                       const views_npy *lay, const views_tables *tab,
                       unsigned char *dst, uint64_t off, uint64_t len,
                       ckpt_error *err);

/* A byte item of a PyTorch distributed checkpoint whose torch.save
 * archive holds an io.BytesIO, shown as the BytesIO's value: its .npy
 * image (a header, then the value's bytes), so that the plain file is the
 * image from header_len on. */
typedef struct views_blob {
    unsigned char *npy;     /* NULL: this tensor is not such an item */
    uint32_t header_len;
    uint64_t len;           /* the value's bytes */
    int64_t dim;            /* len, as the shape of the byte object shown */
} views_blob;

/* For a PyTorch distributed checkpoint (metadata source_format
 * "pytorch-dcp", imported ones too), decodes the value of each byte
 * object that is a torch.save archive of an io.BytesIO (read through r,
 * parsed by the restricted readers: nothing runs).  *out gets one entry
 * per tensor of r, or stays NULL when no tensor is such an item.  Returns
 * 0 or -ENOMEM; an archive that does not decode is left as it is. */
int views_bytesio(ckpt_reader *r, views_blob **out);
void views_blobs_free(views_blob *v, size_t n);

/* The .safetensors/ view of a checkpoint: its tensors (byte objects
 * left out) as model.safetensors, or past max_shard bytes as
 * model-0000i-of-0000n.safetensors with model.safetensors.index.json. */
typedef struct views_st views_st;

/* Lays the view out (headers in memory: names, shapes, offsets).
 * Returns 0 or -ENOMEM. */
int views_st_build(const ckpt_reader *r, uint64_t max_shard,
                   views_st **out);
void views_st_free(views_st *v);
size_t views_st_count(const views_st *v);
const char *views_st_name(const views_st *v, size_t shard);
uint64_t views_st_size(const views_st *v, size_t shard);
/* model.safetensors.index.json, or NULL (*len 0) for one file. */
const char *views_st_index(const views_st *v, size_t *len);
/* Reads bytes [off, off + len) of the shard's file into dst: the header
 * from memory, each tensor's bytes by ckpt_read (so a reader of one
 * tensor decodes only its frames).  Returns the bytes read (short only at
 * the end) or the library's negative errno with err filled. */
int64_t views_st_read(ckpt_reader *r, const views_st *v, size_t shard,
                      unsigned char *dst, uint64_t off, uint64_t len,
                      ckpt_error *err);
/* Who may read the shard: the listing's permissions with each of its
 * tensors' folded in (common/perm.h's ckpt_perm_add).
 * Returns 0 or a negative errno. */
int views_st_perm(ckpt_reader *r, const views_st *v, size_t shard,
                  ckpt_perm *out);

/* Renders the index as JSON (see docs/MOUNT.md) into a malloc'd buffer.
 * Returns 0 or -ENOMEM. */
int views_metadata_json(const ckpt_reader *r, char **out, size_t *len);

/* Renders the reader's counters, one "name value" line each, like
 * snprintf (returns the length needed). */
size_t views_stats(const ckpt_reader *r, char *buf, size_t cap);

#endif
