/*
 * xorframe.c - "xor" frames of delta checkpoints (see xorframe.h).
 */
#include "codec/xorframe.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "codec/bytegroup.h"
#include "codec/huff.h"
#include "common/error.h"

#define XOR_VERSION 1

void ckpt_xor_bytes(void *dst, const void *a, const void *b, size_t n)
{
    unsigned char *d = dst;
    const unsigned char *x = a, *y = b;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t u, v;
        memcpy(&u, x + i, 8);
        memcpy(&v, y + i, 8);
        u ^= v;
        memcpy(d + i, &u, 8);
    }
    for (; i < n; i++)
        d[i] = x[i] ^ y[i];
}

/* 1 when at least SPARSE_EIGHTHS eighths of the 64-byte blocks of the n
 * bytes at p are zero: the XOR of a frame of which only some rows or
 * elements changed. */
#define SPARSE_EIGHTHS 4
static int mostly_zero(const unsigned char *p, size_t n)
{
    size_t blocks = n / 64, zero = 0;
    for (size_t b = 0; b < blocks; b++) {
        uint64_t any = 0;
        for (int k = 0; k < 8; k++) {
            uint64_t u;
            memcpy(&u, p + 64 * b + 8 * k, 8);
            any |= u;
        }
        zero += any == 0;
    }
    return blocks && zero * 8 >= blocks * SPARSE_EIGHTHS;
}

/* The verdict of the estimates below, from the histograms of np byte
 * planes over `got` sampled items (`zero` of them unchanged): most items
 * changed, and the planes' order-0 entropy over `items` items is above
 * `limit` bytes.  Where many items are unchanged, zstd codes the zeros
 * between the changed ones in fewer bits than their entropy alone says. */
static int entropy_over(uint32_t hist[][256], int np, size_t got,
                        size_t zero, size_t items, size_t limit)
{
    if (got == 0 || zero * 2 >= got)
        return 0;
    double bits = 0;
    for (int k = 0; k < np; k++)
        bits += ckpt_hist_entropy(hist[k], got) * (double)items;
    return bits / 8 > (double)limit;
}

/* Items of a diff sampled by ckpt_xor_hopeless: one in XOR_SAMPLE, a
 * prime, so that the sample does not line up with the power-of-two
 * periods of tensors (every fourth element, or row, changed). */
#define XOR_SAMPLE 7

int ckpt_xor_hopeless(const void *diff, size_t n, size_t itemsize,
                      size_t limit)
{
    const unsigned char *p = diff;
    if (itemsize == 0 || itemsize > 8)
        return 0;
    uint32_t hist[8][256];
    memset(hist, 0, sizeof hist);
    size_t items = n / itemsize, got = 0, zero = 0;
    for (size_t i = 0; i < items; i += XOR_SAMPLE, got++) {
        unsigned any = 0;
        for (size_t k = 0; k < itemsize; k++) {
            hist[k][p[i * itemsize + k]]++;
            any |= p[i * itemsize + k];
        }
        zero += any == 0;
    }
    return entropy_over(hist, (int)itemsize, got, zero, items, limit);
}

/* Elements per sampled block of ckpt_xor_planes_hopeless, and one block
 * in PLANE_EVERY sampled (16K elements of a 1 MiB f32 frame: the
 * estimate's bias is a tenth of a bit per plane, and its cost a tenth of
 * reading the planes). */
#define PLANE_BLOCK 64
#define PLANE_EVERY 16

int ckpt_xor_planes_hopeless(int layout, const void *cur, size_t n,
                             const unsigned char *planes, int np,
                             size_t limit)
{
    size_t es = ckpt_bg_esize(layout);
    if (es == 0 || np <= 0 || np > ckpt_bg_nplanes(layout))
        return 0;
    size_t ne = n / es, got = 0, zero = 0;
    uint32_t hist[CKPT_BG_MAX_PLANES][256];
    memset(hist, 0, sizeof hist);
    uint8_t own[CKPT_BG_MAX_PLANES][PLANE_BLOCK];
    uint8_t *pl[CKPT_BG_MAX_PLANES];
    for (int k = 0; k < CKPT_BG_MAX_PLANES; k++)
        pl[k] = own[k];
    for (size_t i = 0; i + PLANE_BLOCK <= ne;
         i += PLANE_BLOCK * PLANE_EVERY) {
        ckpt_bg_split(layout, (const uint8_t *)cur + i * es, PLANE_BLOCK,
                      pl);
        for (size_t j = 0; j < PLANE_BLOCK; j++, got++) {
            unsigned any = 0;
            for (int k = 0; k < np; k++) {
                unsigned x = own[k][j] ^ planes[(size_t)k * ne + i + j];
                hist[k][x]++;
                any |= x;
            }
            zero += any == 0;
        }
    }
    return entropy_over(hist, np, got, zero, ne, limit);
}

int ckpt_xor_encode(ckpt_codec_ctx *c, int codec, int level,
                    size_t itemsize, const void *diff, size_t n, void *dst,
                    size_t cap, size_t *out_n, ckpt_error *err)
{
    unsigned char *d = dst;
    if (cap < CKPT_XOR_HEAD + ckpt_codec_bound(n))
        return ckpt_err(err, -EINVAL, "xor frame: output buffer too small");
    size_t n_in = 0;
    int used = CKPT_CODEC_RAW;
    int rc = 0;
    /* Runs of zeros are what zstd codes fastest, and decodes fastest:
     * byte planes would cut them into four and count every zero. */
    if (codec != CKPT_CODEC_RAW && mostly_zero(diff, n))
        codec = CKPT_CODEC_ZSTD;
    if (codec != CKPT_CODEC_RAW)
        rc = ckpt_codec_encode(c, codec, level, itemsize, diff, n,
                               d + CKPT_XOR_HEAD, cap - CKPT_XOR_HEAD, &n_in,
                               &used, err);
    if (rc)
        return rc;
    if (used == CKPT_CODEC_RAW) {
        memcpy(d + CKPT_XOR_HEAD, diff, n);
        n_in = n;
    }
    d[0] = XOR_VERSION;
    d[1] = (unsigned char)used;
    *out_n = CKPT_XOR_HEAD + n_in;
    return 0;
}

/* Decodes the XOR bytes of xor frame src (stored_n bytes) into out
 * (raw_n bytes). */
static int inner_decode(ckpt_codec_ctx *c, const unsigned char *s,
                        size_t stored_n, void *out, size_t raw_n,
                        ckpt_error *err)
{
    if (stored_n < CKPT_XOR_HEAD || s[0] != XOR_VERSION)
        return ckpt_err(err, -EIO, "xor frame: bad header (%zu stored "
                        "bytes, version %d)", stored_n,
                        stored_n ? s[0] : -1);
    int inner = s[1];
    if (!ckpt_codec_known(inner))
        return ckpt_err(err, -EIO, "xor frame: its bytes name codec id %d, "
                        "which is not an ordinary codec", inner);
    int rc = ckpt_codec_decode(c, inner, s + CKPT_XOR_HEAD,
                               stored_n - CKPT_XOR_HEAD, out, raw_n, err);
    return rc == -ENOTSUP ? -EIO : rc;
}

int ckpt_xor_decode(ckpt_codec_ctx *c, const void *src, size_t stored_n,
                    const void *base, void *dst, size_t raw_n,
                    ckpt_error *err)
{
    int rc = inner_decode(c, src, stored_n, dst, raw_n, err);
    if (rc == 0)
        ckpt_xor_bytes(dst, dst, base, raw_n);
    return rc;
}

/* dst ^= x over n bytes, skipping the 64-byte blocks of x that are zero
 * (most of them, where few elements changed): dst is written only where
 * the frame differs from its base. */
static void xor_nonzero(unsigned char *dst, const unsigned char *x, size_t n)
{
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t w[8], any = 0;
        memcpy(w, x + i, 64);
        for (int k = 0; k < 8; k++)
            any |= w[k];
        if (!any)
            continue;
        for (int k = 0; k < 8; k++) {
            uint64_t d;
            memcpy(&d, dst + i + 8 * k, 8);
            d ^= w[k];
            memcpy(dst + i + 8 * k, &d, 8);
        }
    }
    ckpt_xor_bytes(dst + i, dst + i, x + i, n - i);
}

int ckpt_xor_apply(ckpt_codec_ctx *c, const void *src, size_t stored_n,
                   void *dst, void *tmp, size_t raw_n, ckpt_error *err)
{
    int rc = inner_decode(c, src, stored_n, tmp, raw_n, err);
    if (rc == 0)
        xor_nonzero(dst, tmp, raw_n);
    return rc;
}
