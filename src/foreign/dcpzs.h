/*
 * dcpzs.h - items of a PyTorch distributed checkpoint saved through DCP's
 * ZStandard extension (FileSystemWriter(p, _extensions=[ZStandard()])):
 * each item is one zstd stream of what it would hold plain (a torch.save
 * archive, or a byte item's bytes), its _StorageInfo naming the transform
 * "stream.zstd/1" in transform_descriptors (see dcpzs.c).
 */
#ifndef CKPT_FOREIGN_DCPZS_H
#define CKPT_FOREIGN_DCPZS_H

#include <stdint.h>
#include "ckptfs.h"
#include "foreign/builder.h"
#include "foreign/pickle.h"
#include "foreign/torchsave.h"

/* The most a zstd byte item may decode to. */
#define DCP_ZS_BYTES_MAX ((uint64_t)1 << 30)

/* Reads a _StorageInfo's transform_descriptors (NULL, None or empty: no
 * transform): *zstd is 1 for exactly one "stream.zstd" of major version 1,
 * 0 for none.  Refuses any other transform, naming it and the tensor. */
int dcp_zs_transforms(const pk_val *tr, const char *fqn, int *zstd,
                      ckpt_error *err);

/* Where an item's stream is. */
typedef struct dcp_zs_item {
    int fd;
    const char *path;       /* for messages */
    const char *what;       /* "tensor 'x': item at bytes a..b of f" */
    uint64_t offset, length;
} dcp_zs_item;

/* Decodes a tensor item's stream once (keeping only its first and last
 * bytes), bounded by twice chunk_bytes plus 1 MiB, and describes the
 * torch.save archive it holds: *tt as ckpt_torch_tensor_read gives it
 * (offsets in the decoded archive), *z where the elements are. */
int dcp_zs_tensor(const dcp_zs_item *it, uint64_t chunk_bytes,
                  ckpt_torch_tensor *tt, ckpt_zstd_src *z, ckpt_error *err);

/* Decodes a byte item's stream once to learn its length (at most
 * DCP_ZS_BYTES_MAX): *z is the whole of it. */
int dcp_zs_bytes(const dcp_zs_item *it, ckpt_zstd_src *z, ckpt_error *err);

#endif
