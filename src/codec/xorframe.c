/*
 * xorframe.c - "xor" frames of delta checkpoints (see xorframe.h).
 */
#include "codec/xorframe.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

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

int ckpt_xor_decode(ckpt_codec_ctx *c, const void *src, size_t stored_n,
                    const void *base, void *dst, size_t raw_n,
                    ckpt_error *err)
{
    const unsigned char *s = src;
    if (stored_n < CKPT_XOR_HEAD || s[0] != XOR_VERSION)
        return ckpt_err(err, -EIO, "xor frame: bad header (%zu stored "
                        "bytes, version %d)", stored_n,
                        stored_n ? s[0] : -1);
    int inner = s[1];
    if (!ckpt_codec_known(inner))
        return ckpt_err(err, -EIO, "xor frame: its bytes name codec id %d, "
                        "which is not an ordinary codec", inner);
    int rc = ckpt_codec_decode(c, inner, s + CKPT_XOR_HEAD,
                               stored_n - CKPT_XOR_HEAD, dst, raw_n, err);
    if (rc)
        return rc == -ENOTSUP ? -EIO : rc;
    ckpt_xor_bytes(dst, dst, base, raw_n);
    return 0;
}
