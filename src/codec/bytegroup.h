/*
 * bytegroup.h - byte-grouping transforms of the byte-grouped codecs: an
 * array of n elements becomes byte planes of n bytes each (plane j holds
 * byte j of every element, after a layout's bit rearrangement), and back.
 *
 * The float layouts move each element's exponent into a plane of its own
 * and put the sign beside the mantissa's top bits; the integer layouts
 * take the little-endian bytes as they are.  docs/FORMAT.md lists every
 * plane.  Planes of small values can also be bit-packed.  Transforms are plain loops over fixed-size blocks that the
 * compiler vectorizes; they never fail and accept any bytes.
 */
#ifndef CKPT_BYTEGROUP_H
#define CKPT_BYTEGROUP_H

#include <stddef.h>
#include <stdint.h>

typedef enum ckpt_bg_layout {
    CKPT_BG_BF16 = 1,   /* sign+mantissa, exponent */
    CKPT_BG_F16 = 2,    /* mantissa low, sign+mantissa high, exponent */
    CKPT_BG_F32 = 3,    /* mantissa 0-7, 8-15, sign+mantissa 16-22, exp */
    CKPT_BG_F64 = 4,    /* mantissa bytes 0-5, top, exponent */
    CKPT_BG_X2 = 5,     /* bytes of 2-byte elements */
    CKPT_BG_X4 = 6,     /* bytes of 4-byte elements */
    CKPT_BG_X8 = 7      /* bytes of 8-byte elements */
} ckpt_bg_layout;

#define CKPT_BG_MAX_PLANES 8

/* Bytes per element of a layout, 0 for an unknown one. */
size_t ckpt_bg_esize(int layout);
/* Planes of a layout, 0 for an unknown one. */
int ckpt_bg_nplanes(int layout);

/* Splits n elements at src into ckpt_bg_nplanes(layout) planes of n
 * bytes.  The layout must be known. */
void ckpt_bg_split(int layout, const uint8_t *src, size_t n,
                   uint8_t *const planes[]);

/* The inverse: joins the planes into n elements at dst. */
void ckpt_bg_merge(int layout, const uint8_t *const planes[], size_t n,
                   uint8_t *dst);

/* The largest byte of p[0..n) (0 when n is 0). */
uint8_t ckpt_bg_max(const uint8_t *p, size_t n);

/* Bit packing of a plane whose bytes are all below 2^k (k = 1..7), in
 * blocks of 128 bytes that become 16k bytes (the last block padded with
 * zeros); docs/FORMAT.md has the bit order. */
size_t ckpt_bg_packed_size(size_t n, unsigned k);
/* Packs src[0..n) into ckpt_bg_packed_size(n, k) bytes at dst.  Bits of
 * src above k are dropped. */
void ckpt_bg_pack(const uint8_t *src, size_t n, unsigned k, uint8_t *dst);
/* Unpacks ckpt_bg_packed_size(n, k) bytes at src into n bytes at dst. */
void ckpt_bg_unpack(const uint8_t *src, size_t n, unsigned k, uint8_t *dst);

#endif
