/*
 * strided.h - reading a chunk that torch stored with strides (a
 * transposed weight, a view with a storage offset, an expanded tensor of
 * stride 0) in its logical row-major order.  The chunk's storage bytes
 * are mapped from the file (once, shared by every read), and a read of
 * bytes [lo, hi) of the row-major image copies exactly the elements those
 * bytes hold, each from where its strides put it: the work and the
 * memory touched follow the bytes returned and the storage pages they
 * come from, never the chunk's declared size (a 4-element slice of a
 * 2^30-element expand reads one page).
 */
#ifndef CKPT_READ_STRIDED_H
#define CKPT_READ_STRIDED_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

/* A mapping of bytes [off, off + span) of a file. */
typedef struct ckpt_strided_map {
    void *addr;             /* the mapping (page-aligned start) */
    size_t len;
    const unsigned char *base;   /* byte `off` of the file */
} ckpt_strided_map;

/* Maps bytes [off, off + span) of fd read-only, checking first that the
 * file holds them (a file cut short since it was opened is refused here,
 * naming `file`; one cut while mapped is the caller's SIGBUS, as with any
 * mapping).  span 0 maps nothing. */
int ckpt_strided_map_open(int fd, uint64_t off, uint64_t span,
                          const char *file, ckpt_strided_map *m,
                          ckpt_error *err);
void ckpt_strided_map_close(ckpt_strided_map *m);

/* Copies bytes [src, src + n) of the row-major image of the tensor of
 * `ndim` dims `sizes` whose element at index i sits at element
 * sum(i[k] * stride[k]) from `base` (elements of isz bytes) into dst.
 * The caller has checked that every element lies inside the mapping. */
void ckpt_strided_gather(unsigned char *dst, const unsigned char *base,
                         int ndim, const int64_t *sizes,
                         const int64_t *stride, size_t isz, uint64_t src,
                         uint64_t n);

#endif
