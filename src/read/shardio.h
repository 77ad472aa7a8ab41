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

/* A read-only shared mapping of a whole shard file, as long as the file
 * was when it was mapped; base NULL when it could not be mapped (the
 * reads then all go through pread). */
typedef struct ckpt_smap {
    unsigned char *base;
    uint64_t len;
    int fd;                   /* the file's (not owned) */
} ckpt_smap;

/* Maps fd's file; never fails (an unmappable file leaves m->base NULL). */
void ckpt_smap_open(ckpt_smap *m, int fd);
void ckpt_smap_close(ckpt_smap *m);

/* The n stored bytes at `off`, in place in the mapping, when every page
 * of them is in the page cache now and within the file as it is now; NULL
 * when they are not (or lie past the mapped length), and the caller reads
 * them with ckpt_sio_stored. */
const unsigned char *ckpt_smap_resident(const ckpt_smap *m, uint64_t off,
                                        size_t n);

#endif
