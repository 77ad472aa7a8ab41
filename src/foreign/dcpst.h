/*
 * dcpst.h - the tensor items of a PyTorch distributed checkpoint saved
 * with FileSystemWriter(serialization_format=SerializationFormat.
 * SAFETENSORS): each .distcp file ends in one safetensors blob holding
 * that file's tensors by FQN, and each tensor item's storage_data offset
 * is where that blob starts (see dcpst.c).
 */
#ifndef CKPT_FOREIGN_DCPST_H
#define CKPT_FOREIGN_DCPST_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

/* The blobs parsed so far (one per file and offset), so that each header
 * is read once however many items point at it. */
typedef struct dcp_st_cache {
    struct dcp_st_blob *v;
    size_t n, cap;
} dcp_st_cache;

void dcp_st_cache_free(dcp_st_cache *c);

/* One tensor item: what .metadata says of it and where its item is. */
typedef struct dcp_st_item {
    const char *fqn;
    ckpt_dtype dtype;
    int ndim;
    const int64_t *offsets, *sizes;   /* the chunk's */
    const char *file;                 /* relative, for the cache key */
    const char *path;                 /* for messages */
    int fd;
    uint64_t base, length;            /* storage_data offset and length */
} dcp_st_item;

/* 1 when the bytes at the start of an item (n of them) open a safetensors
 * header rather than a torch.save archive. */
int dcp_st_looks_like(const unsigned char *head, size_t n);

/* Finds the item's tensor in the blob at it->base and checks it against
 * .metadata (dtype, sizes, length, the blob's DCP_SHARDING_INFO offsets);
 * *data_offset receives the file offset of its row-major bytes. */
int dcp_st_locate(dcp_st_cache *c, const dcp_st_item *it,
                  uint64_t *data_offset, ckpt_error *err);

#endif
