/*
 * bytegroup.c - byte planes of 2-, 4- and 8-byte elements (see
 * bytegroup.h).
 *
 * Each layout is one element function applied by a loop over blocks of
 * BLK elements (a constant trip count, which gcc -O2 vectorizes: check
 * with -fopt-info-vec) and a scalar loop for the last partial block.
 * Elements are read and written as little-endian bytes, so the transforms
 * do not depend on the host's byte order.
 *
 * Float planes (s = sign, e = exponent, m = mantissa bits, low first):
 *   bf16  P0 = s m6..m0          P1 = e7..e0
 *   f16   P0 = m7..m0            P1 = s<<2 | m9 m8      P2 = e4..e0
 *   f32   P0 = m7..m0  P1 = m15..m8  P2 = s m22..m16     P3 = e7..e0
 *   f64   P0..P5 = m47..m0 (bytes)   P6 = r10..r8 s m51..m48
 *         P7 = r7..r0, where r = (e + 0x481) mod 2^11 re-biases the
 *         exponent so that r < 256 (r10..r8 = 0) for 2^-128 <= |x| < 2^128
 */
#include "codec/bytegroup.h"

#include <string.h>

/* Each split/merge loop runs BLK elements at a time with a constant trip
 * count (so that GCC vectorizes it), then the tail one by one: the tail
 * repeats the block's statements on purpose, and the loops of the
 * different layouts (bf16, f16, f32, 2/4/8-byte) look alike on purpose
 * too -- one loop per layout keeps each inner loop free of a run-time
 * plane count, which is what lets it vectorize (`duplicates` lists these
 * pairs; they are deliberate). */
#define BLK 64

/* The loops over whole planes are compiled twice on x86-64, for AVX2 and
 * for the baseline, and the loader picks one at run time (ifunc): they
 * then run on 32-byte vectors where the CPU has them. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define PLANE_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef PLANE_CLONES
#define PLANE_CLONES
#endif

size_t ckpt_bg_esize(int layout)
{
    switch (layout) {
    case CKPT_BG_BF16: case CKPT_BG_F16: case CKPT_BG_X2: return 2;
    case CKPT_BG_F32: case CKPT_BG_X4: return 4;
    case CKPT_BG_F64: case CKPT_BG_X8: return 8;
    default: return 0;
    }
}

int ckpt_bg_nplanes(int layout)
{
    switch (layout) {
    case CKPT_BG_BF16: case CKPT_BG_X2: return 2;
    case CKPT_BG_F16: return 3;
    case CKPT_BG_F32: case CKPT_BG_X4: return 4;
    case CKPT_BG_F64: case CKPT_BG_X8: return 8;
    default: return 0;
    }
}

/* ------------------------------------------------------------ elements */

/* The top two bytes of an f32 (all of a bf16): sign+mantissa, exponent. */
static inline void split_hi16(uint8_t b0, uint8_t b1, uint8_t *sm,
                              uint8_t *ex)
{
    *sm = (uint8_t)((b1 & 0x80) | (b0 & 0x7f));
    *ex = (uint8_t)((b1 << 1) | (b0 >> 7));
}

static inline void merge_hi16(uint8_t sm, uint8_t ex, uint8_t *b0,
                              uint8_t *b1)
{
    *b0 = (uint8_t)((ex << 7) | (sm & 0x7f));
    *b1 = (uint8_t)((sm & 0x80) | (ex >> 1));
}

static inline void split_f16_hi(uint8_t b1, uint8_t *sm, uint8_t *ex)
{
    *sm = (uint8_t)(((b1 >> 5) & 4) | (b1 & 3));
    *ex = (uint8_t)((b1 >> 2) & 0x1f);
}

static inline uint8_t merge_f16_hi(uint8_t sm, uint8_t ex)
{
    return (uint8_t)(((sm & 4) << 5) | ((ex & 0x1f) << 2) | (sm & 3));
}

static inline void split_f64_hi(uint8_t b6, uint8_t b7, uint8_t *top,
                                uint8_t *ex)
{
    unsigned e = ((unsigned)(b7 & 0x7f) << 4) | (unsigned)(b6 >> 4);
    unsigned r = (e + 0x481) & 0x7ff;
    *top = (uint8_t)(((r >> 8) << 5) | ((unsigned)(b7 >> 7) << 4) |
                     (b6 & 0x0f));
    *ex = (uint8_t)r;
}

static inline void merge_f64_hi(uint8_t top, uint8_t ex, uint8_t *b6,
                                uint8_t *b7)
{
    unsigned r = ((unsigned)(top >> 5) << 8) | ex;
    unsigned e = (r + 0x37f) & 0x7ff;     /* r - 0x481 mod 2^11 */
    *b6 = (uint8_t)(((e & 0x0f) << 4) | (top & 0x0f));
    *b7 = (uint8_t)((((unsigned)top >> 4 & 1) << 7) | (e >> 4));
}

/* ------------------------------------------------------------ layouts */

PLANE_CLONES static void split_bf16(const uint8_t *restrict s, size_t n,
                       uint8_t *restrict p0, uint8_t *restrict p1)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++)
            split_hi16(s[2 * j], s[2 * j + 1], &p0[j], &p1[j]);
    for (; i < n; i++)
        split_hi16(s[2 * i], s[2 * i + 1], &p0[i], &p1[i]);
}

PLANE_CLONES static void merge_bf16(const uint8_t *restrict p0, const uint8_t *restrict p1,
                       size_t n, uint8_t *restrict d)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++)
            merge_hi16(p0[j], p1[j], &d[2 * j], &d[2 * j + 1]);
    for (; i < n; i++)
        merge_hi16(p0[i], p1[i], &d[2 * i], &d[2 * i + 1]);
}

PLANE_CLONES static void split_f16(const uint8_t *restrict s, size_t n,
                      uint8_t *restrict p0, uint8_t *restrict p1,
                      uint8_t *restrict p2)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++) {
            p0[j] = s[2 * j];
            split_f16_hi(s[2 * j + 1], &p1[j], &p2[j]);
        }
    for (; i < n; i++) {
        p0[i] = s[2 * i];
        split_f16_hi(s[2 * i + 1], &p1[i], &p2[i]);
    }
}

PLANE_CLONES static void merge_f16(const uint8_t *restrict p0, const uint8_t *restrict p1,
                      const uint8_t *restrict p2, size_t n,
                      uint8_t *restrict d)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++) {
            d[2 * j] = p0[j];
            d[2 * j + 1] = merge_f16_hi(p1[j], p2[j]);
        }
    for (; i < n; i++) {
        d[2 * i] = p0[i];
        d[2 * i + 1] = merge_f16_hi(p1[i], p2[i]);
    }
}

PLANE_CLONES static void split_f32(const uint8_t *restrict s, size_t n,
                      uint8_t *restrict p0, uint8_t *restrict p1,
                      uint8_t *restrict p2, uint8_t *restrict p3)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++) {
            p0[j] = s[4 * j];
            p1[j] = s[4 * j + 1];
            split_hi16(s[4 * j + 2], s[4 * j + 3], &p2[j], &p3[j]);
        }
    for (; i < n; i++) {
        p0[i] = s[4 * i];
        p1[i] = s[4 * i + 1];
        split_hi16(s[4 * i + 2], s[4 * i + 3], &p2[i], &p3[i]);
    }
}

PLANE_CLONES static void merge_f32(const uint8_t *restrict p0, const uint8_t *restrict p1,
                      const uint8_t *restrict p2, const uint8_t *restrict p3,
                      size_t n, uint8_t *restrict d)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++) {
            d[4 * j] = p0[j];
            d[4 * j + 1] = p1[j];
            merge_hi16(p2[j], p3[j], &d[4 * j + 2], &d[4 * j + 3]);
        }
    for (; i < n; i++) {
        d[4 * i] = p0[i];
        d[4 * i + 1] = p1[i];
        merge_hi16(p2[i], p3[i], &d[4 * i + 2], &d[4 * i + 3]);
    }
}

/* Plain planes of k-byte elements (k = 2, 4), and of 8-byte elements with
 * the f64 rearrangement of the top two bytes or without it. */
PLANE_CLONES static void split_x2(const uint8_t *restrict s, size_t n,
                     uint8_t *restrict p0, uint8_t *restrict p1)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++) {
            p0[j] = s[2 * j];
            p1[j] = s[2 * j + 1];
        }
    for (; i < n; i++) {
        p0[i] = s[2 * i];
        p1[i] = s[2 * i + 1];
    }
}

PLANE_CLONES static void merge_x2(const uint8_t *restrict p0, const uint8_t *restrict p1,
                     size_t n, uint8_t *restrict d)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++) {
            d[2 * j] = p0[j];
            d[2 * j + 1] = p1[j];
        }
    for (; i < n; i++) {
        d[2 * i] = p0[i];
        d[2 * i + 1] = p1[i];
    }
}

PLANE_CLONES static void split_x4(const uint8_t *restrict s, size_t n,
                     uint8_t *restrict p0, uint8_t *restrict p1,
                     uint8_t *restrict p2, uint8_t *restrict p3)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++) {
            p0[j] = s[4 * j];
            p1[j] = s[4 * j + 1];
            p2[j] = s[4 * j + 2];
            p3[j] = s[4 * j + 3];
        }
    for (; i < n; i++) {
        p0[i] = s[4 * i];
        p1[i] = s[4 * i + 1];
        p2[i] = s[4 * i + 2];
        p3[i] = s[4 * i + 3];
    }
}

PLANE_CLONES static void merge_x4(const uint8_t *restrict p0, const uint8_t *restrict p1,
                     const uint8_t *restrict p2, const uint8_t *restrict p3,
                     size_t n, uint8_t *restrict d)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++) {
            d[4 * j] = p0[j];
            d[4 * j + 1] = p1[j];
            d[4 * j + 2] = p2[j];
            d[4 * j + 3] = p3[j];
        }
    for (; i < n; i++) {
        d[4 * i] = p0[i];
        d[4 * i + 1] = p1[i];
        d[4 * i + 2] = p2[i];
        d[4 * i + 3] = p3[i];
    }
}

/* 8-byte elements: planes 0-5 are bytes 0-5; bytes 6-7 go to planes 6-7
 * as they are, or rearranged as an f64's top bytes.  The planes are
 * passed one by one so that the compiler knows they do not overlap. */
#define P8_PARAMS(q)                                                        \
    q uint8_t *restrict p0, q uint8_t *restrict p1, q uint8_t *restrict p2, \
    q uint8_t *restrict p3, q uint8_t *restrict p4, q uint8_t *restrict p5, \
    q uint8_t *restrict p6, q uint8_t *restrict p7

static inline void split_one8(const uint8_t *restrict e, size_t j,
                              P8_PARAMS(), int f64)
{
    p0[j] = e[0];
    p1[j] = e[1];
    p2[j] = e[2];
    p3[j] = e[3];
    p4[j] = e[4];
    p5[j] = e[5];
    if (f64) {
        split_f64_hi(e[6], e[7], &p6[j], &p7[j]);
    } else {
        p6[j] = e[6];
        p7[j] = e[7];
    }
}

static inline void merge_one8(P8_PARAMS(const), size_t j,
                              uint8_t *restrict e, int f64)
{
    e[0] = p0[j];
    e[1] = p1[j];
    e[2] = p2[j];
    e[3] = p3[j];
    e[4] = p4[j];
    e[5] = p5[j];
    if (f64) {
        merge_f64_hi(p6[j], p7[j], &e[6], &e[7]);
    } else {
        e[6] = p6[j];
        e[7] = p7[j];
    }
}

PLANE_CLONES static void split_x8(const uint8_t *restrict s, size_t n, P8_PARAMS(),
                     int f64)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++)
            split_one8(s + 8 * j, j, p0, p1, p2, p3, p4, p5, p6, p7, f64);
    for (; i < n; i++)
        split_one8(s + 8 * i, i, p0, p1, p2, p3, p4, p5, p6, p7, f64);
}

PLANE_CLONES static void merge_x8(P8_PARAMS(const), size_t n, uint8_t *restrict d,
                     int f64)
{
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = i; j < i + BLK; j++)
            merge_one8(p0, p1, p2, p3, p4, p5, p6, p7, j, d + 8 * j, f64);
    for (; i < n; i++)
        merge_one8(p0, p1, p2, p3, p4, p5, p6, p7, i, d + 8 * i, f64);
}

/* ------------------------------------------------------------ dispatch */

void ckpt_bg_split(int layout, const uint8_t *src, size_t n,
                   uint8_t *const p[])
{
    switch (layout) {
    case CKPT_BG_BF16: split_bf16(src, n, p[0], p[1]); break;
    case CKPT_BG_F16: split_f16(src, n, p[0], p[1], p[2]); break;
    case CKPT_BG_F32: split_f32(src, n, p[0], p[1], p[2], p[3]); break;
    case CKPT_BG_F64:
        split_x8(src, n, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], 1);
        break;
    case CKPT_BG_X2: split_x2(src, n, p[0], p[1]); break;
    case CKPT_BG_X4: split_x4(src, n, p[0], p[1], p[2], p[3]); break;
    case CKPT_BG_X8:
        split_x8(src, n, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], 0);
        break;
    default: break;
    }
}

void ckpt_bg_merge(int layout, const uint8_t *const p[], size_t n,
                   uint8_t *dst)
{
    switch (layout) {
    case CKPT_BG_BF16: merge_bf16(p[0], p[1], n, dst); break;
    case CKPT_BG_F16: merge_f16(p[0], p[1], p[2], n, dst); break;
    case CKPT_BG_F32: merge_f32(p[0], p[1], p[2], p[3], n, dst); break;
    case CKPT_BG_F64:
        merge_x8(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], n, dst, 1);
        break;
    case CKPT_BG_X2: merge_x2(p[0], p[1], n, dst); break;
    case CKPT_BG_X4: merge_x4(p[0], p[1], p[2], p[3], n, dst); break;
    case CKPT_BG_X8:
        merge_x8(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], n, dst, 0);
        break;
    default: break;
    }
}

/* ------------------------------------------------------------ bit packing */

uint8_t ckpt_bg_max(const uint8_t *p, size_t n)
{
    uint8_t m[BLK] = { 0 };
    size_t i = 0;
    for (; i + BLK <= n; i += BLK)
        for (size_t j = 0; j < BLK; j++)
            m[j] = p[i + j] > m[j] ? p[i + j] : m[j];
    for (; i < n; i++)
        m[0] = p[i] > m[0] ? p[i] : m[0];
    uint8_t r = 0;
    for (size_t j = 0; j < BLK; j++)
        r = m[j] > r ? m[j] : r;
    return r;
}

/* Values are packed in blocks of 8 x PACK_LANES: within a block, byte
 * lane l (0..15) holds values l, l+16, ..., l+112 as one 8k-bit number,
 * value l+16i at bits k*i..; row j of the block (PACK_LANES bytes) holds
 * byte j of every lane's number.  Each row is one vector: packing and
 * unpacking are shifts, masks and ORs over 16 bytes. */
#define PACK_LANES 16
#define PACK_BLOCK (8 * PACK_LANES)

/* Unrolling the 8 rows makes every shift a constant (3x faster). */
#if defined(__GNUC__)
#define UNROLL8 _Pragma("GCC unroll 8")
#else
#define UNROLL8
#endif

size_t ckpt_bg_packed_size(size_t n, unsigned k)
{
    return (n + PACK_BLOCK - 1) / PACK_BLOCK * PACK_LANES * k;
}

static inline void pack_block(const uint8_t *restrict in,
                              uint8_t *restrict out, unsigned k)
{
    unsigned mask = (1u << k) - 1;
    memset(out, 0, PACK_LANES * k);
    UNROLL8
    for (unsigned i = 0; i < 8; i++) {
        unsigned bit = k * i, j = bit >> 3, sh = bit & 7;
        const uint8_t *v = in + i * PACK_LANES;
        uint8_t *o = out + j * PACK_LANES;
        for (unsigned l = 0; l < PACK_LANES; l++)
            o[l] |= (uint8_t)((v[l] & mask) << sh);
        if (j + 1 < k)          /* the value spills into the next row */
            for (unsigned l = 0; l < PACK_LANES; l++)
                o[PACK_LANES + l] |= (uint8_t)(((v[l] & mask) << sh) >> 8);
    }
}

static inline void unpack_block(const uint8_t *restrict in,
                                uint8_t *restrict out, unsigned k)
{
    unsigned mask = (1u << k) - 1;
    UNROLL8
    for (unsigned i = 0; i < 8; i++) {
        unsigned bit = k * i, j = bit >> 3, sh = bit & 7;
        const uint8_t *r = in + j * PACK_LANES;
        uint8_t *o = out + i * PACK_LANES;
        if (j + 1 < k)
            for (unsigned l = 0; l < PACK_LANES; l++)
                o[l] = (uint8_t)(((r[l] | (unsigned)r[PACK_LANES + l] << 8)
                                  >> sh) & mask);
        else
            for (unsigned l = 0; l < PACK_LANES; l++)
                o[l] = (uint8_t)((r[l] >> sh) & mask);
    }
}

/* The loops, specialised per k so that shifts and masks are constants. */
#define PACK_CASES(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

PLANE_CLONES static void pack_blocks(const uint8_t *restrict src, size_t nb, unsigned k,
                        uint8_t *restrict dst)
{
    switch (k) {
#define PACK_CASE(K)                                                        \
    case K:                                                                 \
        for (size_t b = 0; b < nb; b++)                                     \
            pack_block(src + b * PACK_BLOCK, dst + b * PACK_LANES * K, K);  \
        break;
    PACK_CASES(PACK_CASE)
#undef PACK_CASE
    default:
        break;
    }
}

PLANE_CLONES static void unpack_blocks(const uint8_t *restrict src, size_t nb, unsigned k,
                          uint8_t *restrict dst)
{
    switch (k) {
#define UNPACK_CASE(K)                                                      \
    case K:                                                                 \
        for (size_t b = 0; b < nb; b++)                                     \
            unpack_block(src + b * PACK_LANES * K, dst + b * PACK_BLOCK, K);\
        break;
    PACK_CASES(UNPACK_CASE)
#undef UNPACK_CASE
    default:
        break;
    }
}

void ckpt_bg_pack(const uint8_t *src, size_t n, unsigned k, uint8_t *dst)
{
    size_t nb = n / PACK_BLOCK, rest = n % PACK_BLOCK;
    pack_blocks(src, nb, k, dst);
    if (rest) {
        uint8_t t[PACK_BLOCK] = { 0 };
        memcpy(t, src + nb * PACK_BLOCK, rest);
        pack_blocks(t, 1, k, dst + nb * PACK_LANES * k);
    }
}

void ckpt_bg_unpack(const uint8_t *src, size_t n, unsigned k, uint8_t *dst)
{
    size_t nb = n / PACK_BLOCK, rest = n % PACK_BLOCK;
    unpack_blocks(src, nb, k, dst);
    if (rest) {
        uint8_t t[PACK_BLOCK];
        unpack_blocks(src + nb * PACK_LANES * k, 1, k, t);
        memcpy(dst + nb * PACK_BLOCK, t, rest);
    }
}
