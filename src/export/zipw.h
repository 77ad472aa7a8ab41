/*
 * zipw.h - a zip writer for torch.save archives: STORED entries whose data
 * starts on a 64-byte boundary (as torch aligns them, for mmap), written
 * one after the other into a sink, the CRC of an entry streamed in and
 * patched into its local header when it ends, zip64 records where sizes,
 * offsets or the entry count need them.  An archive may start anywhere in
 * its sink (DCP's .distcp holds one per tensor): offsets are relative to
 * its first byte.
 */
#ifndef CKPT_EXPORT_ZIPW_H
#define CKPT_EXPORT_ZIPW_H

#include <stddef.h>
#include <stdint.h>

#include "export/sink.h"

typedef struct zipw_entry {
    char *name;
    uint64_t local;     /* local header, relative to the archive */
    uint64_t size;
    uint32_t crc;
} zipw_entry;

typedef struct zipw {
    exp_sink *out;
    uint64_t base;      /* the archive's first byte in out */
    zipw_entry *e;
    size_t n, cap;
    int open;           /* an entry's data is being written */
} zipw;

/* Starts an archive at out's current end. */
void zipw_init(zipw *z, exp_sink *out);
void zipw_free(zipw *z);
/* Writes the local header of entry `name` of `size` bytes, padded so that
 * its data starts on a 64-byte boundary; the caller then appends exactly
 * `size` bytes to the sink and calls zipw_end with their CRC-32. */
int zipw_begin(zipw *z, const char *name, uint64_t size, ckpt_error *err);
int zipw_end(zipw *z, uint32_t crc, ckpt_error *err);
/* A whole entry from memory. */
int zipw_put(zipw *z, const char *name, const void *data, size_t n,
             ckpt_error *err);
/* Writes the central directory and its end records. */
int zipw_finish(zipw *z, ckpt_error *err);

#endif
