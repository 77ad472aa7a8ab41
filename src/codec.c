/*
 * codec.c - encoding and decoding one frame (raw or zstd) and the XXH3-64
 * checksum of its raw bytes (see codec.h).
 *
 * Choices made here:
 *  - A zstd frame is one standard zstd frame with its content size in the
 *    header and no zstd checksum (the index carries an XXH3-64 per frame).
 *  - Compression runs into a per-context scratch buffer limited to the
 *    largest size worth keeping (n - ceil(n/32)); when zstd cannot fit the
 *    frame there, the frame falls back to raw and the caller's dst is left
 *    untouched, as codec.h promises.
 *  - Decoding accepts exactly one zstd frame whose header records raw_n as
 *    its content size, filling exactly raw_n bytes; anything else is -EIO.
 *  - Levels: "zstd" alone means level 1 (the library's default, as in
 *    ckpt_write_opts_init).  Encoding accepts -7..22; 0 is zstd's own
 *    default level.
 */
#include "codec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>
#include <xxhash.h>

#include "error.h"

#define CODEC_MIN_LEVEL (-7)
#define CODEC_MAX_LEVEL 22
#define CODEC_DEFAULT_LEVEL 1

struct ckpt_codec_ctx {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    unsigned char *scratch;   /* compressed output before it is kept */
    size_t scratch_cap;
};

ckpt_codec_ctx *ckpt_codec_ctx_new(void)
{
    ckpt_codec_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cctx = ZSTD_createCCtx();
    c->dctx = ZSTD_createDCtx();
    if (!c->cctx || !c->dctx) {
        ckpt_codec_ctx_free(c);
        return NULL;
    }
    return c;
}

void ckpt_codec_ctx_free(ckpt_codec_ctx *c)
{
    if (!c)
        return;
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    free(c->scratch);
    free(c);
}

size_t ckpt_codec_bound(size_t raw_n)
{
    size_t b = ZSTD_compressBound(raw_n);
    return (ZSTD_isError(b) || b < raw_n) ? raw_n : b;
}

uint64_t ckpt_checksum(const void *buf, size_t n)
{
    return (uint64_t)XXH3_64bits(buf, n);
}

int ckpt_codec_known(int codec)
{
    return codec == CKPT_CODEC_RAW || codec == CKPT_CODEC_ZSTD;
}

const char *ckpt_codec_name(int codec)
{
    switch (codec) {
    case CKPT_CODEC_RAW:
        return "raw";
    case CKPT_CODEC_ZSTD:
        return "zstd";
    default:
        return "unknown";
    }
}

/* Parses a decimal level made only of an optional '-' and digits. */
static int parse_level(const char *s, int *out)
{
    int neg = 0;
    long v = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    if (*s == '\0')
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > 1000)          /* far outside any valid level */
            return -1;
    }
    *out = (int)(neg ? -v : v);
    return 0;
}

static int parse_fail(const char *s, ckpt_error *err)
{
    return ckpt_err(err, -EINVAL,
                    "invalid codec \"%.200s\": expected raw, zstd or "
                    "zstd:LEVEL (LEVEL 1..22, or -7..-1 for fast modes)",
                    s);
}

int ckpt_codec_parse(const char *s, int *codec, int *level, ckpt_error *err)
{
    int cd, lv;
    if (!s)
        return ckpt_err(err, -EINVAL, "invalid codec: no text given");
    if (strcmp(s, "raw") == 0) {
        cd = CKPT_CODEC_RAW;
        lv = 0;
    } else if (strcmp(s, "zstd") == 0) {
        cd = CKPT_CODEC_ZSTD;
        lv = CODEC_DEFAULT_LEVEL;
    } else if (strncmp(s, "zstd:", 5) == 0) {
        cd = CKPT_CODEC_ZSTD;
        if (parse_level(s + 5, &lv) != 0 || lv == 0 ||
            lv < CODEC_MIN_LEVEL || lv > CODEC_MAX_LEVEL)
            return parse_fail(s, err);
    } else {
        return parse_fail(s, err);
    }
    if (codec)
        *codec = cd;
    if (level)
        *level = lv;
    return 0;
}

/* Makes the scratch buffer hold at least n bytes. */
static int scratch_reserve(ckpt_codec_ctx *c, size_t n, ckpt_error *err)
{
    if (n <= c->scratch_cap)
        return 0;
    unsigned char *p = realloc(c->scratch, n);
    if (!p)
        return ckpt_err(err, -ENOMEM,
                        "out of memory for a %zu-byte compression buffer", n);
    c->scratch = p;
    c->scratch_cap = n;
    return 0;
}

static int zstd_set(ZSTD_CCtx *cc, ZSTD_cParameter p, int v, ckpt_error *err)
{
    size_t r = ZSTD_CCtx_setParameter(cc, p, v);
    if (ZSTD_isError(r))
        return ckpt_err(err, -EINVAL, "zstd: cannot set parameter %d to %d: %s",
                        (int)p, v, ZSTD_getErrorName(r));
    return 0;
}

/* Compresses src into the scratch buffer, at most `limit` bytes.  Sets
 * *out_n to the frame size, or to 0 when the frame does not fit. */
static int zstd_compress_limited(ckpt_codec_ctx *c, int level,
                                 const void *src, size_t n, size_t limit,
                                 size_t *out_n, ckpt_error *err)
{
    int rc;
    size_t r = ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only);
    if (ZSTD_isError(r))
        return ckpt_err(err, -EIO, "zstd: cannot reset context: %s",
                        ZSTD_getErrorName(r));
    if ((rc = zstd_set(c->cctx, ZSTD_c_compressionLevel, level, err)) ||
        (rc = zstd_set(c->cctx, ZSTD_c_contentSizeFlag, 1, err)) ||
        (rc = zstd_set(c->cctx, ZSTD_c_checksumFlag, 0, err)))
        return rc;
    if ((rc = scratch_reserve(c, limit, err)) != 0)
        return rc;
    r = ZSTD_compress2(c->cctx, c->scratch, limit, src, n);
    if (ZSTD_isError(r)) {
        if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall) {
            *out_n = 0;        /* not worth keeping */
            return 0;
        }
        return ckpt_err(err, -EIO, "zstd: compressing %zu bytes failed: %s",
                        n, ZSTD_getErrorName(r));
    }
    *out_n = r;
    return 0;
}

static void store_raw(size_t n, size_t *out_n, int *out_codec)
{
    *out_n = n;
    *out_codec = CKPT_CODEC_RAW;
}

int ckpt_codec_encode(ckpt_codec_ctx *c, int codec, int level,
                      size_t itemsize, const void *src, size_t n, void *dst,
                      size_t cap, size_t *out_n, int *out_codec,
                      ckpt_error *err)
{
    if (!out_n || !out_codec || (!src && n))
        return ckpt_err(err, -EINVAL, "encode: missing buffer or output");
    if (codec == CKPT_CODEC_RAW) {
        store_raw(n, out_n, out_codec);
        return 0;
    }
    if (codec != CKPT_CODEC_ZSTD)
        return ckpt_err(err, -ENOTSUP, "encode: unknown codec id %d", codec);
    if (!c)
        return ckpt_err(err, -EINVAL, "encode: no codec context");
    if (level < CODEC_MIN_LEVEL || level > CODEC_MAX_LEVEL)
        return ckpt_err(err, -EINVAL,
                        "encode: zstd level %d outside %d..%d", level,
                        CODEC_MIN_LEVEL, CODEC_MAX_LEVEL);
    /* Keep zstd only when it saves at least 1/32 of the bytes. */
    size_t limit = n - (n + 31) / 32, zn = 0;
    if (limit > 0) {
        int rc = zstd_compress_limited(c, level, src, n, limit, &zn, err);
        if (rc)
            return rc;
    }
    if (zn == 0) {
        store_raw(n, out_n, out_codec);
        return 0;
    }
    if (!dst || cap < zn)
        return ckpt_err(err, -EINVAL,
                        "encode: destination of %zu bytes is too small for "
                        "a %zu-byte zstd frame (need ckpt_codec_bound(%zu))",
                        cap, zn, n);
    memcpy(dst, c->scratch, zn);
    *out_n = zn;
    *out_codec = CKPT_CODEC_ZSTD;
    return 0;
}

static int decode_raw(const void *src, size_t stored_n, void *dst,
                      size_t raw_n, ckpt_error *err)
{
    if (stored_n != raw_n)
        return ckpt_err(err, -EIO,
                        "raw frame holds %zu bytes but %zu were expected",
                        stored_n, raw_n);
    if (raw_n && src != dst)
        memmove(dst, src, raw_n);
    return 0;
}

/* Checks that src is exactly one zstd frame recording raw_n bytes. */
static int zstd_check_frame(const void *src, size_t stored_n, size_t raw_n,
                            ckpt_error *err)
{
    const unsigned char *p = src;
    if (stored_n < 4 || ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                         (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24) !=
                            ZSTD_MAGICNUMBER)
        return ckpt_err(err, -EIO,
                        "corrupt zstd frame (%zu bytes): bad magic number",
                        stored_n);
    size_t fsz = ZSTD_findFrameCompressedSize(src, stored_n);
    if (ZSTD_isError(fsz))
        return ckpt_err(err, -EIO, "corrupt zstd frame (%zu bytes): %s",
                        stored_n, ZSTD_getErrorName(fsz));
    if (fsz != stored_n)
        return ckpt_err(err, -EIO,
                        "corrupt zstd frame: %zu of its %zu stored bytes "
                        "follow the end of the frame", stored_n - fsz,
                        stored_n);
    unsigned long long fcs = ZSTD_getFrameContentSize(src, stored_n);
    if (fcs == ZSTD_CONTENTSIZE_ERROR)
        return ckpt_err(err, -EIO,
                        "corrupt zstd frame (%zu bytes): bad frame header",
                        stored_n);
    if (fcs == ZSTD_CONTENTSIZE_UNKNOWN)
        return ckpt_err(err, -EIO,
                        "corrupt zstd frame: no content size in its header");
    if (fcs != (unsigned long long)raw_n)
        return ckpt_err(err, -EIO,
                        "corrupt zstd frame: header says %llu bytes but %zu "
                        "were expected", fcs, raw_n);
    return 0;
}

static int decode_zstd(ckpt_codec_ctx *c, const void *src, size_t stored_n,
                       void *dst, size_t raw_n, ckpt_error *err)
{
    int rc = zstd_check_frame(src, stored_n, raw_n, err);
    if (rc)
        return rc;
    size_t r = ZSTD_decompressDCtx(c->dctx, dst, raw_n, src, stored_n);
    if (ZSTD_isError(r))
        return ckpt_err(err, -EIO, "corrupt zstd frame (%zu bytes): %s",
                        stored_n, ZSTD_getErrorName(r));
    if (r != raw_n)
        return ckpt_err(err, -EIO,
                        "corrupt zstd frame: decoded %zu bytes but %zu were "
                        "expected", r, raw_n);
    return 0;
}

int ckpt_codec_decode(ckpt_codec_ctx *c, int codec, const void *src,
                      size_t stored_n, void *dst, size_t raw_n,
                      ckpt_error *err)
{
    if ((!src && stored_n) || (!dst && raw_n))
        return ckpt_err(err, -EINVAL, "decode: missing buffer");
    switch (codec) {
    case CKPT_CODEC_RAW:
        return decode_raw(src, stored_n, dst, raw_n, err);
    case CKPT_CODEC_ZSTD:
        if (!c)
            return ckpt_err(err, -EINVAL, "decode: no codec context");
        return decode_zstd(c, src, stored_n, dst, raw_n, err);
    default:
        return ckpt_err(err, -ENOTSUP,
                        "unknown codec id %d (this build knows raw=0 and "
                        "zstd=1)", codec);
    }
}
