/*
 * zipread.h - the directory of a zip archive as torch.save writes it:
 * stored (uncompressed) entries, data descriptors, zip64 records, data
 * aligned by padding in the local headers.  Only the directory and the
 * local headers are read; entry data is left where it is, so callers read
 * it in place.  Any archive bytes give either a directory or an error.
 */
#ifndef CKPT_ZIPREAD_H
#define CKPT_ZIPREAD_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

/* Reads n bytes at `off` (relative to the archive's start) into buf:
 * 0, or a negative errno with err filled. */
typedef int (*ckpt_zip_read_fn)(void *arg, void *buf, size_t n, uint64_t off,
                                ckpt_error *err);

typedef struct ckpt_zip_entry {
    char *name;
    uint64_t offset;        /* of its data, from the archive's start */
    uint64_t size;
} ckpt_zip_entry;

typedef struct ckpt_zip {
    ckpt_zip_entry *v;
    size_t n;
} ckpt_zip;

/* Reads the directory of the archive of `len` bytes that `rd` reads.
 * Refuses (naming `what`) a missing or damaged directory, compressed or
 * encrypted entries, multi-disk archives, and data outside the archive. */
int ckpt_zip_open(ckpt_zip_read_fn rd, void *arg, uint64_t len,
                  const char *what, ckpt_zip *out, ckpt_error *err);
void ckpt_zip_free(ckpt_zip *z);
/* The entry called `name`, or NULL. */
const ckpt_zip_entry *ckpt_zip_find(const ckpt_zip *z, const char *name);

#endif
