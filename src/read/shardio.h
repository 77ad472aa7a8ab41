/*
 * shardio.h - reading frame bytes out of shard files at memory speed: raw
 * frames straight into the caller's buffer (or through a small bounce
 * buffer where the kernel's copy would be slow), checksummed piece by
 * piece while the bytes are in the CPU's cache; stored bytes of coded
 * frames into a per-thread buffer aligned like the file, or, when they are
 * in the page cache, straight from a read-only mapping of the shard file.
 */
#ifndef CKPT_SHARDIO_H
#define CKPT_SHARDIO_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"
#include "common/filemap.h"   /* ckpt_smap: coded frames read in place */

/* Per-thread state: bounce buffer, stored-bytes buffer, hash state.  Not
 * shared between threads. */
typedef struct ckpt_sio ckpt_sio;

ckpt_sio *ckpt_sio_new(void);          /* NULL on out of memory */
void ckpt_sio_free(ckpt_sio *s);

/* Reads exactly n bytes at `off` of fd into dst; when sum is not NULL,
 * sets *sum to their XXH3-64.  A short read is -EIO naming `path`. */
int ckpt_sio_read(ckpt_sio *s, int fd, void *dst, size_t n, uint64_t off,
                  uint64_t *sum, const char *path, ckpt_error *err);

/* Reads exactly n bytes at `off` of fd into the state's own buffer and
 * points *out at them (valid until the next call on s). */
int ckpt_sio_stored(ckpt_sio *s, int fd, size_t n, uint64_t off,
                    const unsigned char **out, const char *path,
                    ckpt_error *err);

/* 1 when a read of file offset `off` into dst goes straight to dst (the
 * kernel's copy is fast for that alignment), 0 when it is bounced. */
int ckpt_sio_direct(const void *dst, uint64_t off);

#endif
