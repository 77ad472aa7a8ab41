/*
 * safetensors.h - safetensors files (one file, or a directory of them),
 * described for the reader with the builder (see safetensors.c).
 */
#ifndef CKPT_FOREIGN_SAFETENSORS_H
#define CKPT_FOREIGN_SAFETENSORS_H

#include <stdint.h>
#include "ckptfs.h"
#include "common/json.h"
#include "foreign/builder.h"

/* A safetensors header read from a file (at its start, or at `base` for
 * the safetensors blobs inside PyTorch DCP files). */
typedef struct ckpt_st_header {
    json_val j;             /* the header object */
    uint64_t data_start;    /* file offset of the data: base + 8 + length */
    uint64_t data_len;      /* bytes from there to the end of the file */
} ckpt_st_header;

/* One tensor entry of a header, checked: data_offsets [begin, end) inside
 * the data and exactly numel * itemsize long. */
typedef struct ckpt_st_entry {
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];
    uint64_t begin, end;    /* relative to data_start */
} ckpt_st_entry;

/* Reads the header at byte `base` of fd (the file `path`, for messages),
 * refusing (naming path) a length over the format's limit or past the
 * file, and anything but a JSON object. */
int ckpt_st_header_read(int fd, const char *path, uint64_t base,
                        ckpt_st_header *h, ckpt_error *err);
void ckpt_st_header_free(ckpt_st_header *h);
/* Parses the entry `e` of tensor `name` (-ENOTSUP naming its dtype when
 * ckptfs has no such dtype, -EINVAL for anything malformed). */
int ckpt_st_entry_parse(const ckpt_st_header *h, const char *path,
                        const char *name, const json_val *e,
                        ckpt_st_entry *out, ckpt_error *err);

/* Describes the safetensors file or directory at `path` into f, refusing
 * anything malformed with a message naming the file and the problem. */
int ckpt_safetensors_open(const char *path, ckpt_foreign *f,
                          ckpt_error *err);

/* DCP's HuggingFaceStorageWriter(p, enable_consolidation=True) writes the
 * ranks' files and their model.safetensors.index.json to p/sharded. */
#define CKPT_HF_SHARDED "sharded"

/* Describes the checkpoint in dir/sharded (CKPT_HF_SHARDED) as the
 * checkpoint dir: its files are named "sharded/..." relative to dir. */
int ckpt_safetensors_open_hf(const char *dir, ckpt_foreign *f,
                             ckpt_error *err);

#endif
