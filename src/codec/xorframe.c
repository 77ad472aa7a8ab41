/*
 * xorframe.c - "xor" frames of delta checkpoints (see xorframe.h).
 */
#include "codec/xorframe.h"
#include "common/le.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/bytegroup.h"
#include "codec/huff.h"
#include "common/error.h"

/* The header's first byte: what follows the codec id. */
#define XOR_DENSE 1    /* the codec's stored bytes of the whole XOR */
#define XOR_SPARSE 2   /* a u32 block count, then the codec's stored bytes
                          of the bitmap and the nonzero blocks */
#define SPARSE_HEAD 6  /* version, codec id, u32 count */
#define BLOCK 64

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

/* The bitmap and blocks of a sparse xor frame's payload, for a frame of
 * n bytes: nb blocks of BLOCK bytes (the last one short when BLOCK does
 * not divide n) and one bit per block. */
static size_t nblocks(size_t n)
{
    return (n + BLOCK - 1) / BLOCK;
}

static size_t bitmap_bytes(size_t n)
{
    return (nblocks(n) + 7) / 8;
}

/* The payload of a sparse xor frame of diff (n bytes) into a buffer of
 * `room` bytes: its nonzero blocks (the last one padded with zeros to
 * BLOCK bytes), then the bitmap that lists them (built at the end of
 * `room` meanwhile).  Returns the number of blocks listed, or SIZE_MAX
 * when they would not fit in `room`. */
static size_t pack_sparse(const unsigned char *diff, size_t n,
                          unsigned char *out, size_t room)
{
    size_t nb = nblocks(n), bm = bitmap_bytes(n), k = 0;
    if (bm > room)
        return SIZE_MAX;
    unsigned char *map = out + room - bm;   /* moved behind the blocks */
    memset(map, 0, bm);
    for (size_t b = 0; b < nb; b++) {
        size_t off = b * BLOCK, len = n - off < BLOCK ? n - off : BLOCK;
        uint64_t any = 0;
        if (len == BLOCK) {
            for (int w = 0; w < BLOCK / 8; w++) {
                uint64_t u;
                memcpy(&u, diff + off + 8 * w, 8);
                any |= u;
            }
        } else {
            for (size_t i = 0; i < len; i++)
                any |= diff[off + i];
        }
        if (!any)
            continue;
        if (bm + (k + 1) * BLOCK > room)
            return SIZE_MAX;
        unsigned char *blk = out + k * BLOCK;
        memcpy(blk, diff + off, len);
        memset(blk + len, 0, BLOCK - len);
        map[b / 8] |= (unsigned char)(1u << (b % 8));
        k++;
    }
    memmove(out + k * BLOCK, map, bm);
    return k;
}

/* Codes `n_in` bytes at `in` with `codec` behind a header of `head`
 * bytes at dst (cap bytes), storing them as they are where the codec
 * does not make them smaller; the header's codec byte and *out_n set. */
static int code_body(ckpt_codec_ctx *c, int codec, int level,
                     size_t itemsize, const void *in, size_t n_in,
                     unsigned char *dst, size_t cap, size_t head,
                     size_t *out_n, ckpt_error *err)
{
    size_t got = 0;
    int used = CKPT_CODEC_RAW;
    if (codec != CKPT_CODEC_RAW) {
        int rc = ckpt_codec_encode(c, codec, level, itemsize, in, n_in,
                                   dst + head, cap - head, &got, &used, err);
        if (rc)
            return rc;
    }
    if (used == CKPT_CODEC_RAW) {
        memcpy(dst + head, in, n_in);
        got = n_in;
    }
    dst[1] = (unsigned char)used;
    *out_n = head + got;
    return 0;
}

/* The sparse form of diff into dst, when at least half of its blocks are
 * zero (few rows or elements changed) and it has a whole block: 1 when
 * written, 0 when the XOR is too dense or short for it, or a negative
 * errno.  The payload is coded with zstd (unless `codec` is raw) and kept
 * so only where that saves a third of it; else it is stored raw and a
 * read XORs it into place straight from the stored bytes.  The blocks of
 * rows that moved a little (an optimizer step on a few embedding rows)
 * are random low mantissa bytes beside zero exponent bytes: zstd saves a
 * quarter of them, and its decode then cost a warm load of such a delta
 * a tenth of its CPU time (the byte-grouped codecs' Huffman planes decode
 * such small frames slower still); blocks in which a few elements
 * changed are mostly zeros, which zstd codes in almost nothing. */
static int encode_sparse(ckpt_codec_ctx *c, int codec, int level,
                         const unsigned char *diff, size_t n,
                         unsigned char *dst, size_t cap, size_t *out_n,
                         ckpt_error *err)
{
    size_t nb = nblocks(n);
    size_t room = bitmap_bytes(n) + nb / 2 * BLOCK;
    if (n < BLOCK || room > n || nb > UINT32_MAX ||
        cap < SPARSE_HEAD + ckpt_codec_bound(room))
        return 0;
    unsigned char *payload = malloc(room);
    if (!payload)
        return ckpt_err(err, -ENOMEM, "xor frame: out of memory");
    size_t k = pack_sparse(diff, n, payload, room);
    int rc = 0;
    if (k != SIZE_MAX) {
        size_t pn = bitmap_bytes(n) + k * BLOCK;
        rc = code_body(c, codec == CKPT_CODEC_RAW ? codec : CKPT_CODEC_ZSTD,
                       level, 1, payload, pn, dst, cap, SPARSE_HEAD, out_n,
                       err);
        if (!rc && (*out_n - SPARSE_HEAD) * 3 > pn * 2) {
            memcpy(dst + SPARSE_HEAD, payload, pn);
            dst[1] = CKPT_CODEC_RAW;
            *out_n = SPARSE_HEAD + pn;
        }
        dst[0] = XOR_SPARSE;
        ckpt_put_le32(dst + 2, (uint32_t)k);
    }
    free(payload);
    return rc ? rc : k != SIZE_MAX;
}

int ckpt_xor_encode(ckpt_codec_ctx *c, int codec, int level,
                    size_t itemsize, const void *diff, size_t n, void *dst,
                    size_t cap, size_t *out_n, ckpt_error *err)
{
    unsigned char *d = dst;
    if (cap < CKPT_XOR_HEAD + ckpt_codec_bound(n))
        return ckpt_err(err, -EINVAL, "xor frame: output buffer too small");
    int rc = encode_sparse(c, codec, level, diff, n, d, cap, out_n, err);
    if (rc)
        return rc < 0 ? rc : 0;
    d[0] = XOR_DENSE;
    return code_body(c, codec, level, itemsize, diff, n, d, cap,
                     CKPT_XOR_HEAD, out_n, err);
}

/* Checks the header of xor frame s (stored_n bytes): its version and
 * inner codec. */
static int check_head(const unsigned char *s, size_t stored_n,
                      ckpt_error *err)
{
    if (stored_n < CKPT_XOR_HEAD)
        return ckpt_err(err, -EIO, "xor frame: %zu stored bytes, shorter "
                        "than its header", stored_n);
    if (s[0] != XOR_DENSE && s[0] != XOR_SPARSE)
        return ckpt_err(err, -EIO, "xor frame: header version %d, which "
                        "this reader does not know (it reads %d and %d)",
                        s[0], XOR_DENSE, XOR_SPARSE);
    if (s[0] == XOR_SPARSE && stored_n < SPARSE_HEAD)
        return ckpt_err(err, -EIO, "sparse xor frame: %zu stored bytes, "
                        "shorter than its header", stored_n);
    if (!ckpt_codec_known(s[1]))
        return ckpt_err(err, -EIO, "xor frame: its bytes name codec id %d, "
                        "which is not an ordinary codec", s[1]);
    return 0;
}

/* Decodes the coded bytes behind a header of `head` bytes into out
 * (out_n bytes). */
static int body_decode(ckpt_codec_ctx *c, const unsigned char *s,
                       size_t stored_n, size_t head, void *out, size_t out_n,
                       ckpt_error *err)
{
    int rc = ckpt_codec_decode(c, s[1], s + head, stored_n - head, out,
                               out_n, err);
    return rc == -ENOTSUP ? -EIO : rc;
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
        ckpt_xor_bytes(dst + i, dst + i, w, 64);
    }
    ckpt_xor_bytes(dst + i, dst + i, x + i, n - i);
}

/* Checks a sparse payload's bitmap against its block count k and the
 * frame's size n: exactly k bits set, none past the last block, and the
 * padding of a short last block zero. */
static int check_sparse(const unsigned char *p, size_t n, size_t k,
                        ckpt_error *err)
{
    size_t nb = nblocks(n), bm = bitmap_bytes(n), set = 0;
    const unsigned char *map = p + k * BLOCK;
    for (size_t i = 0; i < bm; i++)
        for (unsigned v = map[i]; v; v &= v - 1)   /* mostly zero bytes */
            set++;
    if (nb % 8 && map[bm - 1] >> (nb % 8))
        return ckpt_err(err, -EIO, "sparse xor frame: its bitmap lists "
                        "blocks past the frame's %zu", nb);
    if (set != k)
        return ckpt_err(err, -EIO, "sparse xor frame: its bitmap lists %zu "
                        "blocks, its header %zu", set, k);
    size_t tail = n % BLOCK;
    if (tail && k && (map[(nb - 1) / 8] >> ((nb - 1) % 8) & 1)) {
        const unsigned char *last = p + (k - 1) * BLOCK;
        for (size_t i = tail; i < BLOCK; i++)
            if (last[i])
                return ckpt_err(err, -EIO, "sparse xor frame: bytes past "
                                "the end of the frame are not zero");
    }
    return 0;
}

/* Applies a sparse xor frame's payload p of k blocks (checked) to dst
 * (n bytes). */
static void apply_sparse(unsigned char *dst, const unsigned char *p,
                         size_t k, size_t n)
{
    size_t nb = nblocks(n);
    const unsigned char *blk = p, *map = p + k * BLOCK;
    for (size_t i = 0; i < nb; i += 8) {
        unsigned bits = map[i / 8];
        while (bits) {
            size_t b = i + (size_t)__builtin_ctz(bits);
            size_t off = b * BLOCK;
            ckpt_xor_bytes(dst + off, dst + off, blk,
                           n - off < BLOCK ? n - off : BLOCK);
            blk += BLOCK;
            bits &= bits - 1;
        }
    }
}

/* Decodes and applies a sparse xor frame s to dst (n bytes), its payload
 * decoded into tmp (n bytes: a payload is never larger than its frame),
 * or read in place where it is stored raw. */
static int sparse_apply(ckpt_codec_ctx *c, const unsigned char *s,
                        size_t stored_n, unsigned char *dst, void *tmp,
                        size_t n, ckpt_error *err)
{
    size_t k = ckpt_get_le32(s + 2);
    if (k > nblocks(n) || bitmap_bytes(n) + k * BLOCK > n)
        return ckpt_err(err, -EIO, "sparse xor frame: its header lists "
                        "%zu blocks, more than its %zu-byte frame holds "
                        "in this form", k, n);
    size_t pn = bitmap_bytes(n) + k * BLOCK;
    const unsigned char *p = s + SPARSE_HEAD;
    int rc = 0;
    if (s[1] != CKPT_CODEC_RAW) {
        rc = body_decode(c, s, stored_n, SPARSE_HEAD, tmp, pn, err);
        p = tmp;
    } else if (stored_n - SPARSE_HEAD != pn) {
        rc = ckpt_err(err, -EIO, "sparse xor frame: %zu payload bytes "
                      "stored for %zu blocks and a %zu-byte bitmap",
                      stored_n - SPARSE_HEAD, k, bitmap_bytes(n));
    }
    if (!rc)
        rc = check_sparse(p, n, k, err);
    if (!rc)
        apply_sparse(dst, p, k, n);
    return rc;
}

int ckpt_xor_decode(ckpt_codec_ctx *c, const void *src, size_t stored_n,
                    const void *base, void *dst, size_t raw_n,
                    ckpt_error *err)
{
    const unsigned char *s = src;
    int rc = check_head(s, stored_n, err);
    if (rc)
        return rc;
    if (s[0] == XOR_DENSE) {
        rc = body_decode(c, s, stored_n, CKPT_XOR_HEAD, dst, raw_n, err);
        if (rc == 0)
            ckpt_xor_bytes(dst, dst, base, raw_n);
        return rc;
    }
    void *tmp = malloc(raw_n ? raw_n : 1);
    if (!tmp)
        return ckpt_err(err, -ENOMEM, "xor frame: out of memory");
    memmove(dst, base, raw_n);
    rc = sparse_apply(c, s, stored_n, dst, tmp, raw_n, err);
    free(tmp);
    return rc;
}

int ckpt_xor_apply(ckpt_codec_ctx *c, const void *src, size_t stored_n,
                   void *dst, void *tmp, size_t raw_n, ckpt_error *err)
{
    const unsigned char *s = src;
    int rc = check_head(s, stored_n, err);
    if (rc)
        return rc;
    if (s[0] == XOR_SPARSE)
        return sparse_apply(c, s, stored_n, dst, tmp, raw_n, err);
    rc = body_decode(c, s, stored_n, CKPT_XOR_HEAD, tmp, raw_n, err);
    if (rc == 0)
        xor_nonzero(dst, tmp, raw_n);
    return rc;
}
