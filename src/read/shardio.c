/*
 * shardio.c - reading frame bytes out of shard files (see shardio.h).
 *
 * Why not a plain pread into the destination: the kernel copies page-cache
 * bytes to user memory with `rep movsb`, whose speed depends on how the
 * destination is aligned relative to the source within a 64-byte cache
 * line.  Measured on the development VM (AMD EPYC, Linux 6.18): 4.5-6 GB/s
 * per core when the destination sits 0 or 32..63 bytes past the source's
 * alignment, 1.5-2 GB/s when it sits 1..31 bytes past (a malloc'd buffer
 * is 16 bytes past a page, a raw frame often starts on one: the common
 * case was the slow one).  So:
 *  - a raw frame goes straight into the destination when that is fast,
 *    else through a bounce buffer placed at the source's alignment and is
 *    copied from there by ckpt_copy_blocks (memcpy in blocks below the
 *    size at which glibc's memcpy itself switches to `rep movsb`);
 *  - the bytes are read in pieces of PIECE bytes, each checksummed
 *    (XXH3-64, streaming) right after it lands, while it is in the L2
 *    cache, so that checking a frame costs no second pass over memory;
 *  - stored bytes of a coded frame land in a per-thread buffer placed at
 *    the source's alignment, where the decoder reads them;
 *  - unless they are all in the page cache already: then the decoder
 *    reads them in place through a shared mapping of the shard file, and
 *    the copy (a third of a warm auto load's CPU time, measured with
 *    perf: `_copy_to_iter` 30%, against 23% for the Huffman decoding)
 *    is not made at all.  Only resident bytes: a fault on a page that is
 *    not would read it synchronously in the decoding thread, without the
 *    large read-ahead a pread of a cold frame gets, so cold frames keep
 *    the pread path.  mincore() says which pages are resident, and an
 *    fstat() that they still lie within the file: the frames of a file
 *    truncated since it was mapped fall back to pread, which reports the
 *    short read (a truncation racing with the decode itself could still
 *    raise SIGBUS: shard files are immutable once committed).
 */
#include "read/shardio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/xxh.h"

#define LINE 64
/* Bytes read (and checksummed) at a time: fits the L2 cache of a core. */
#define PIECE ((size_t)128 << 10)

struct ckpt_sio {
    unsigned char *bounce;    /* PIECE + LINE bytes, line-aligned */
    unsigned char *buf;       /* stored bytes: cap + LINE, line-aligned */
    size_t cap;
    XXH3_state_t *hash;
};

ckpt_sio *ckpt_sio_new(void)
{
    ckpt_sio *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->hash = XXH3_createState();
    if (!s->hash || posix_memalign((void **)&s->bounce, LINE,
                                   PIECE + LINE) != 0) {
        s->bounce = NULL;
        ckpt_sio_free(s);
        return NULL;
    }
    return s;
}

void ckpt_sio_free(ckpt_sio *s)
{
    if (!s)
        return;
    if (s->hash)
        XXH3_freeState(s->hash);
    free(s->bounce);
    free(s->buf);
    free(s);
}

int ckpt_sio_direct(const void *dst, uint64_t off)
{
    return ckpt_copy_fast(off, (uintptr_t)dst);
}

/* The bytes at `off`, piece by piece, straight into dst. */
static int read_direct(ckpt_sio *s, int fd, unsigned char *dst, size_t n,
                       uint64_t off, uint64_t *sum, const char *path,
                       ckpt_error *err)
{
    if (!sum || n <= PIECE) {
        int rc = ckpt_pread_full(fd, dst, n, off, path, err);
        if (rc == 0 && sum)
            *sum = (uint64_t)XXH3_64bits(dst, n);
        return rc;
    }
    XXH3_64bits_reset(s->hash);
    for (size_t k = 0; k < n; k += PIECE) {
        size_t m = n - k < PIECE ? n - k : PIECE;
        int rc = ckpt_pread_full(fd, dst + k, m, off + k, path, err);
        if (rc)
            return rc;
        XXH3_64bits_update(s->hash, dst + k, m);
    }
    *sum = (uint64_t)XXH3_64bits_digest(s->hash);
    return 0;
}

/* The bytes at `off`, piece by piece, through the bounce buffer. */
static int read_bounced(ckpt_sio *s, int fd, unsigned char *dst, size_t n,
                        uint64_t off, uint64_t *sum, const char *path,
                        ckpt_error *err)
{
    int many = sum && n > PIECE;
    if (many)
        XXH3_64bits_reset(s->hash);
    for (size_t k = 0; k < n; k += PIECE) {
        size_t m = n - k < PIECE ? n - k : PIECE;
        unsigned char *b = s->bounce + (off + k) % LINE;
        int rc = ckpt_pread_full(fd, b, m, off + k, path, err);
        if (rc)
            return rc;
        if (many)
            XXH3_64bits_update(s->hash, b, m);
        else if (sum)
            *sum = (uint64_t)XXH3_64bits(b, m);
        ckpt_copy_blocks(dst + k, b, m);
    }
    if (many)
        *sum = (uint64_t)XXH3_64bits_digest(s->hash);
    return 0;
}

int ckpt_sio_read(ckpt_sio *s, int fd, void *dst, size_t n, uint64_t off,
                  uint64_t *sum, const char *path, ckpt_error *err)
{
    if (!s || (!dst && n))
        return ckpt_err(err, -EINVAL, "read of %s: no buffer",
                        path ? path : "(unnamed file)");
    if (n == 0) {
        if (sum)
            *sum = (uint64_t)XXH3_64bits(s->bounce, 0);
        return 0;
    }
    if (ckpt_sio_direct(dst, off))
        return read_direct(s, fd, dst, n, off, sum, path, err);
    return read_bounced(s, fd, dst, n, off, sum, path, err);
}

int ckpt_sio_stored(ckpt_sio *s, int fd, size_t n, uint64_t off,
                    const unsigned char **out, const char *path,
                    ckpt_error *err)
{
    if (n > s->cap) {
        unsigned char *b;
        if (n > SIZE_MAX - LINE || posix_memalign((void **)&b, LINE,
                                                  n + LINE) != 0)
            return ckpt_err(err, -ENOMEM, "out of memory for %zu stored "
                            "bytes", n);
        free(s->buf);
        s->buf = b;
        s->cap = n;
    }
    unsigned char *p = s->buf + off % LINE;
    int rc = ckpt_pread_full(fd, p, n, off, path, err);
    if (rc == 0)
        *out = p;
    return rc;
}
