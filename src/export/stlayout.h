/*
 * stlayout.h - where everything lies in the safetensors files of a set of
 * a checkpoint's tensors: their order (safetensors' save_file order:
 * larger dtypes first, then by name, so each tensor is aligned to its
 * element size), the split into shards of at most a given size (Hugging
 * Face's model-0000i-of-0000n.safetensors, or model.safetensors for one),
 * each shard's header (the 8-byte size, then the JSON with __metadata__,
 * padded to 8 bytes) and, for several shards,
 * model.safetensors.index.json.  Shared by ckpt_export (which writes the
 * files) and the mount's .safetensors/ view (which serves them, reading
 * the tensors' bytes on demand).
 */
#ifndef CKPT_EXPORT_STLAYOUT_H
#define CKPT_EXPORT_STLAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"

/* One tensor in its shard. */
typedef struct st_entry {
    size_t idx;             /* the reader's tensor index */
    uint64_t off;           /* first byte in the shard's file */
    uint64_t nbytes;
} st_entry;

typedef struct st_shard {
    char name[64];          /* "model.safetensors", "model-00001-of-00003..." */
    char *header;           /* the 8-byte size and the JSON */
    size_t header_len;
    uint64_t size;          /* the whole file */
    size_t first, count;    /* its entries: e[first .. first + count) */
} st_shard;

typedef struct st_layout {
    st_entry *e;            /* in file order, shard by shard */
    size_t n;
    st_shard *s;
    size_t nshards;
    char *index;            /* model.safetensors.index.json (nshards > 1) */
    size_t index_len;
} st_layout;

/* One tensor to lay out: the reader's index and the dtype it is written
 * as (its own, or CKPT_U8 for a byte object). */
typedef struct st_input {
    size_t idx;
    ckpt_dtype dtype;
} st_input;

/* Lays out the n tensors of in (FQNs, shapes, sizes and the metadata for
 * __metadata__, with "format": "pt" added, from r) in shards of at most
 * max_shard bytes of tensor data (a larger tensor gets one of its own).
 * Returns 0 or -ENOMEM. */
int st_layout_build(st_layout *out, const ckpt_reader *r,
                    const st_input *in, size_t n, uint64_t max_shard,
                    ckpt_error *err);
void st_layout_free(st_layout *l);

/* The safetensors dtype name ("F32", "BF16", "F8_E4M3", "C64", ...), or
 * NULL for a dtype safetensors lacks (complex128, complex32, the fnuz
 * float8s) and for byte objects. */
const char *st_dtype_name(ckpt_dtype dt);

/* The entry of shard s that holds byte off (>= the header), or NULL. */
const st_entry *st_layout_find(const st_layout *l, const st_shard *s,
                               uint64_t off);

#endif
