/*
 * test_codec.c - unit tests of src/codec/codec.c: raw, zstd and byte-grouped
 * round trips (every dtype layout, edge values, odd lengths), the fallback to
 * raw, standard zstd frames, corrupt, truncated and garbage input in every
 * part of a frame, unknown codecs, codec name parsing, the codec that `auto`
 * picks per dtype, a checkpoint mixing old and new codecs, and the XXH3-64
 * checksum.
 */
#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "codec/codec.h"
#include "unit_util.h"

/* ------------------------------------------------------------ data */

enum { DATA_RANDOM, DATA_ZERO, DATA_FLOAT, DATA_KINDS };

/* Fills buf with n bytes of the given kind.  "Float" data is little-endian
 * float32 weights of a smooth (triangle) wave plus a little noise: partly
 * compressible, as real tensors are. */
static void fill(unsigned char *buf, size_t n, int kind, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    if (kind == DATA_ZERO) {
        memset(buf, 0, n);
        return;
    }
    if (kind == DATA_RANDOM) {
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)(rng_next(&s) >> 56);
        return;
    }
    for (size_t i = 0; i < n; i += 4) {
        double t = (double)((i / 4) % 2000) / 1000.0 - 1.0;
        float f = (float)(0.02 * (t < 0 ? -t : t)) +
                  (float)((rng_next(&s) >> 40) & 0xff) * 1e-6f;
        unsigned char b[4];
        memcpy(b, &f, 4);
        for (size_t j = 0; j < 4 && i + j < n; j++)
            buf[i + j] = b[j];
    }
}

/* Index of the first byte of buf[0..n) that is not `v`, or n. */
static size_t first_not(const unsigned char *buf, size_t n, unsigned char v)
{
    size_t i = 0;
    while (i < n && buf[i] == v)
        i++;
    return i;
}

/* Encodes src with codec/level; returns the stored form (a copy) and its
 * codec and size. */
static unsigned char *encode(ckpt_codec_ctx *cx, int codec, int level,
                             const unsigned char *src, size_t n,
                             size_t *stored_n, int *out_codec)
{
    size_t cap = ckpt_codec_bound(n);
    ck_assert_uint_ge(cap, n);
    unsigned char *dst = xmalloc(cap);
    ckpt_error err = {0};
    int rc = ckpt_codec_encode(cx, codec, level, 4, src, n, dst, cap,
                               stored_n, out_codec, &err);
    ck_assert_msg(rc == 0, "encode %zu bytes: %d %s", n, rc, err.msg);
    if (*out_codec == CKPT_CODEC_RAW) {
        ck_assert_uint_eq(*stored_n, n);
        if (n)
            memcpy(dst, src, n);
    } else {
        ck_assert_int_eq(*out_codec, codec);
        ck_assert_uint_le(*stored_n, n - (n + 31) / 32);
    }
    return dst;
}

/* Encodes and decodes src, checking the result is identical. */
static void round_trip(ckpt_codec_ctx *cx, int codec, int level,
                       const unsigned char *src, size_t n)
{
    size_t sn;
    int oc;
    unsigned char *stored = encode(cx, codec, level, src, n, &sn, &oc);
    unsigned char *out = xmalloc(n);
    ckpt_error err = {0};
    int rc = ckpt_codec_decode(cx, oc, stored, sn, out, n, &err);
    ck_assert_msg(rc == 0, "decode %zu bytes (codec %d level %d): %d %s", n,
                  codec, level, rc, err.msg);
    ck_assert_msg(n == 0 || memcmp(out, src, n) == 0,
                  "round trip differs: %zu bytes codec %d level %d", n,
                  codec, level);
    ck_assert_uint_eq(ckpt_checksum(out, n), ckpt_checksum(src, n));
    free(out);
    free(stored);
}

static const size_t lengths[] = {
    1, 2, 3, 7, 31, 32, 33, 100, 1000, 4095, 4096, 4097, 65537, 100003,
    (1u << 20), (1u << 20) + 13, 3u * (1u << 20) + 7,
};
#define NLENGTHS (sizeof lengths / sizeof lengths[0])

/* ------------------------------------------------------------ tests */

START_TEST(test_roundtrip_all)
{
    static const int levels[] = {-7, -1, 1, 3, 9};
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    ck_assert_ptr_nonnull(cx);
    for (int kind = 0; kind < DATA_KINDS; kind++) {
        for (size_t li = 0; li < NLENGTHS; li++) {
            size_t n = lengths[li];
            unsigned char *src = xmalloc(n);
            fill(src, n, kind, li);
            round_trip(cx, CKPT_CODEC_RAW, 0, src, n);
            for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++)
                round_trip(cx, CKPT_CODEC_ZSTD, levels[l], src, n);
            if (n <= 100003) {       /* slow levels on small frames only */
                round_trip(cx, CKPT_CODEC_ZSTD, 19, src, n);
                round_trip(cx, CKPT_CODEC_ZSTD, 22, src, n);
            }
            free(src);
        }
    }
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_roundtrip_empty)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    unsigned char dst[64];
    size_t on = 99;
    int oc = -1;
    ck_assert_int_eq(ckpt_codec_encode(cx, CKPT_CODEC_ZSTD, 1, 1, NULL, 0,
                                       dst, sizeof dst, &on, &oc, NULL), 0);
    ck_assert_int_eq(oc, CKPT_CODEC_RAW);
    ck_assert_uint_eq(on, 0);
    ck_assert_int_eq(ckpt_codec_decode(cx, CKPT_CODEC_RAW, NULL, 0, NULL, 0,
                                       NULL), 0);
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_fallback_random)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    static const size_t ns[] = {1, 31, 4096, 65536, (1u << 20) + 1};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        size_t n = ns[i], cap = ckpt_codec_bound(n);
        unsigned char *src = xmalloc(n), *dst = xmalloc(cap);
        fill(src, n, DATA_RANDOM, 77 + i);
        memset(dst, 0xA5, cap);
        size_t on = 0;
        int oc = -1;
        ckpt_error err = {0};
        ck_assert_int_eq(ckpt_codec_encode(cx, CKPT_CODEC_ZSTD, 3, 1, src, n,
                                           dst, cap, &on, &oc, &err), 0);
        ck_assert_int_eq(oc, CKPT_CODEC_RAW);
        ck_assert_uint_eq(on, n);
        size_t at = first_not(dst, cap, 0xA5);
        ck_assert_msg(at == cap, "dst touched at %zu (n %zu)", at, n);
        free(src);
        free(dst);
    }
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_raw_codec_leaves_dst)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    unsigned char src[100] = {0}, dst[200];
    memset(dst, 0x5A, sizeof dst);
    size_t on = 0;
    int oc = -1;
    ck_assert_int_eq(ckpt_codec_encode(cx, CKPT_CODEC_RAW, 0, 1, src,
                                       sizeof src, dst, sizeof dst, &on, &oc,
                                       NULL), 0);
    ck_assert_int_eq(oc, CKPT_CODEC_RAW);
    ck_assert_uint_eq(on, sizeof src);
    ck_assert_uint_eq(first_not(dst, sizeof dst, 0x5A), sizeof dst);
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_standard_zstd_frame)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    static const size_t ns[] = {4096, 100003, (1u << 20)};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        for (int kind = DATA_ZERO; kind <= DATA_FLOAT; kind++) {
            size_t n = ns[i], sn;
            int oc;
            unsigned char *src = xmalloc(n);
            fill(src, n, kind, i);
            unsigned char *st = encode(cx, CKPT_CODEC_ZSTD, 3, src, n, &sn,
                                       &oc);
            ck_assert_int_eq(oc, CKPT_CODEC_ZSTD);
            ck_assert_uint_eq(ZSTD_getFrameContentSize(st, sn), n);
            ck_assert_uint_eq(ZSTD_findFrameCompressedSize(st, sn), sn);
            unsigned char *out = xmalloc(n);
            size_t r = ZSTD_decompress(out, n, st, sn);
            ck_assert_msg(!ZSTD_isError(r), "%s", ZSTD_getErrorName(r));
            ck_assert_uint_eq(r, n);
            ck_assert_mem_eq(out, src, n);
            free(out);
            free(st);
            free(src);
        }
    }
    ckpt_codec_ctx_free(cx);
}
END_TEST

/* Decodes a damaged frame into a buffer with a guard zone after raw_n
 * bytes.  Returns the decode's result; asserts it is 0 or -EIO, that the
 * guard is intact, and that a "successful" decode of damaged input is
 * caught by the checksum unless it reproduced the original exactly. */
static int decode_damaged_as(ckpt_codec_ctx *cx, int codec,
                             const unsigned char *st, size_t sn,
                             const unsigned char *orig, size_t n,
                             size_t raw_n)
{
    const size_t guard = 64;
    unsigned char *out = xmalloc(raw_n + guard);
    memset(out + raw_n, 0xEE, guard);
    ckpt_error err = {0};
    int rc = ckpt_codec_decode(cx, codec, st, sn, out, raw_n, &err);
    ck_assert_msg(rc == 0 || rc == -EIO, "decode of damaged frame: %d %s", rc,
                  err.msg);
    if (rc == -EIO) {
        ck_assert_int_eq(err.code, -EIO);
        ck_assert_msg(err.msg[0] != '\0', "no message for -EIO");
    }
    ck_assert_msg(first_not(out + raw_n, guard, 0xEE) == guard,
                  "decode wrote past raw_n");
    if (rc == 0) {
        ck_assert_uint_eq(raw_n, n);
        ck_assert(memcmp(out, orig, n) == 0 ||
                  ckpt_checksum(out, n) != ckpt_checksum(orig, n));
    }
    free(out);
    return rc;
}

static int decode_damaged(ckpt_codec_ctx *cx, const unsigned char *st,
                          size_t sn, const unsigned char *orig, size_t n,
                          size_t raw_n)
{
    return decode_damaged_as(cx, CKPT_CODEC_ZSTD, st, sn, orig, n, raw_n);
}

START_TEST(test_corrupt_streams)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    size_t n = 65536 + 5, sn;
    int oc;
    unsigned char *src = xmalloc(n);
    fill(src, n, DATA_FLOAT, 3);
    unsigned char *st = encode(cx, CKPT_CODEC_ZSTD, 3, src, n, &sn, &oc);
    ck_assert_int_eq(oc, CKPT_CODEC_ZSTD);
    unsigned char *bad = xmalloc(sn + 16);
    static const unsigned char flips[] = {0xFF, 0x01, 0x80, 0x10};
    size_t step = sn > 3000 ? sn / 1500 : 1, eio = 0, tries = 0;
    for (size_t pos = 0; pos < sn; pos += step) {
        for (size_t f = 0; f < sizeof flips; f++) {
            memcpy(bad, st, sn);
            bad[pos] ^= flips[f];
            eio += decode_damaged(cx, bad, sn, src, n, n) == -EIO;
            tries++;
        }
    }
    /* Most damage to literals decodes without error; decode_damaged
     * checked that the checksum then differs.  Some must be refused. */
    ck_assert_uint_gt(eio, 0);
    ck_assert_uint_gt(tries, 1000);
    /* The header is always checked: any change in the first 4 bytes. */
    for (size_t pos = 0; pos < 4; pos++) {
        memcpy(bad, st, sn);
        bad[pos] ^= 0x40;
        ck_assert_int_eq(decode_damaged(cx, bad, sn, src, n, n), -EIO);
    }
    /* Every truncation fails. */
    for (size_t len = 0; len < sn; len += (len < 64 ? 1 : 7))
        ck_assert_int_eq(decode_damaged(cx, st, len, src, n, n), -EIO);
    /* The message carries zstd's own name for the error. */
    {
        unsigned char out[16];
        ckpt_error err = {0};
        size_t zr = ZSTD_findFrameCompressedSize(st, sn - 1);
        ck_assert(ZSTD_isError(zr));
        ck_assert_int_eq(ckpt_codec_decode(cx, CKPT_CODEC_ZSTD, st, sn - 1,
                                           out, sizeof out, &err), -EIO);
        ck_assert_msg(strstr(err.msg, ZSTD_getErrorName(zr)) != NULL, "%s",
                      err.msg);
    }
    /* Trailing bytes after the frame, and a wrong expected size. */
    memcpy(bad, st, sn);
    memset(bad + sn, 0, 16);
    ck_assert_int_eq(decode_damaged(cx, bad, sn + 16, src, n, n), -EIO);
    ck_assert_int_eq(decode_damaged(cx, st, sn, src, n, n - 1), -EIO);
    ck_assert_int_eq(decode_damaged(cx, st, sn, src, n, n + 1), -EIO);
    /* The context is still good after all that. */
    ck_assert_int_eq(decode_damaged(cx, st, sn, src, n, n), 0);
    free(bad);
    free(st);
    free(src);
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_garbage_input)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    size_t n = 4096;
    unsigned char *orig = xmalloc(n);
    memset(orig, 0, n);
    for (uint64_t seed = 1; seed < 400; seed++) {
        size_t len = (size_t)(seed * 37 % 700);
        unsigned char *g = xmalloc(len + 4);
        fill(g, len + 4, DATA_RANDOM, seed);
        if (seed % 2 && len >= 4) {      /* valid magic, garbage after */
            g[0] = 0x28; g[1] = 0xB5; g[2] = 0x2F; g[3] = 0xFD;
        }
        int rc = decode_damaged(cx, g, len, orig, n, n);
        ck_assert_int_eq(rc, -EIO);
        free(g);
    }
    free(orig);
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_raw_size_mismatch)
{
    unsigned char a[10] = {1, 2, 3}, b[16];
    ckpt_error err = {0};
    ck_assert_int_eq(ckpt_codec_decode(NULL, CKPT_CODEC_RAW, a, 10, b, 11,
                                       &err), -EIO);
    ck_assert_int_eq(err.code, -EIO);
    ck_assert_int_eq(ckpt_codec_decode(NULL, CKPT_CODEC_RAW, a, 10, b, 10,
                                       &err), 0);
    ck_assert_mem_eq(a, b, 10);
}
END_TEST

START_TEST(test_unknown_codec)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    unsigned char a[8] = {0}, b[8];
    ckpt_error err = {0};
    ck_assert_int_eq(ckpt_codec_decode(cx, 29, a, 8, b, 8, &err), -ENOTSUP);
    ck_assert_int_eq(err.code, -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(err.msg, "29"));
    size_t on;
    int oc;
    ck_assert_int_eq(ckpt_codec_encode(cx, 42, 1, 1, a, 8, b, 8, &on, &oc,
                                       &err), -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(err.msg, "42"));
    ck_assert_int_eq(ckpt_codec_known(CKPT_CODEC_RAW), 1);
    ck_assert_int_eq(ckpt_codec_known(CKPT_CODEC_ZSTD), 1);
    for (int c = CKPT_CODEC_BG_BF16; c <= CKPT_CODEC_BG_8; c++)
        ck_assert_int_eq(ckpt_codec_known(c), 1);
    ck_assert_int_eq(ckpt_codec_known(9), 0);
    ck_assert_int_eq(ckpt_codec_known(31), 0);
    ck_assert_int_eq(ckpt_codec_known(CKPT_CODEC_AUTO), 0);
    ck_assert_int_eq(ckpt_codec_known(-2), 0);
    ck_assert_str_eq(ckpt_codec_name(CKPT_CODEC_RAW), "raw");
    ck_assert_str_eq(ckpt_codec_name(CKPT_CODEC_ZSTD), "zstd");
    static const char *const names[] = {
        "bgbf16", "bgf16", "bgf32", "bgf64", "bg2", "bg4", "bg8",
    };
    for (int c = CKPT_CODEC_BG_BF16; c <= CKPT_CODEC_BG_8; c++)
        ck_assert_str_eq(ckpt_codec_name(c), names[c - CKPT_CODEC_BG_BF16]);
    ck_assert_str_eq(ckpt_codec_name(CKPT_CODEC_AUTO), "auto");
    /* Delta frames' ids have names but are no codec a writer may pick. */
    ck_assert_str_eq(ckpt_codec_name(CKPT_CODEC_REF), "ref");
    ck_assert_str_eq(ckpt_codec_name(CKPT_CODEC_XOR), "xor");
    ck_assert_int_eq(ckpt_codec_known(CKPT_CODEC_REF), 0);
    ck_assert_int_eq(ckpt_codec_parse("ref", NULL, NULL, &err), -EINVAL);
    ck_assert_str_eq(ckpt_codec_name(11), "unknown");
    ck_assert_str_eq(ckpt_codec_name(-3), "unknown");
    /* auto is resolved by the writer, never encoded as such. */
    ck_assert_int_eq(ckpt_codec_encode(cx, CKPT_CODEC_AUTO, 1, 4, a, 8, b, 8,
                                       &on, &oc, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "auto"));
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_bad_level)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    unsigned char a[64] = {0}, b[256];
    size_t on;
    int oc;
    ck_assert_int_eq(ckpt_codec_encode(cx, CKPT_CODEC_ZSTD, 23, 1, a, 64, b,
                                       sizeof b, &on, &oc, NULL), -EINVAL);
    ck_assert_int_eq(ckpt_codec_encode(cx, CKPT_CODEC_ZSTD, -8, 1, a, 64, b,
                                       sizeof b, &on, &oc, NULL), -EINVAL);
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_parse)
{
    static const struct { const char *s; int codec, level; } ok[] = {
        {"raw", CKPT_CODEC_RAW, 0},    {"zstd", CKPT_CODEC_ZSTD, 1},
        {"zstd:1", CKPT_CODEC_ZSTD, 1}, {"zstd:22", CKPT_CODEC_ZSTD, 22},
        {"zstd:19", CKPT_CODEC_ZSTD, 19}, {"zstd:-1", CKPT_CODEC_ZSTD, -1},
        {"zstd:-7", CKPT_CODEC_ZSTD, -7}, {"zstd:03", CKPT_CODEC_ZSTD, 3},
        {"auto", CKPT_CODEC_AUTO, 1}, {"auto:3", CKPT_CODEC_AUTO, 3},
        {"bgbf16", CKPT_CODEC_BG_BF16, 1}, {"bgf16", CKPT_CODEC_BG_F16, 1},
        {"bgf32:19", CKPT_CODEC_BG_F32, 19}, {"bgf64", CKPT_CODEC_BG_F64, 1},
        {"bg2", CKPT_CODEC_BG_2, 1}, {"bg4:-1", CKPT_CODEC_BG_4, -1},
        {"bg8:22", CKPT_CODEC_BG_8, 22},
    };
    static const char *bad[] = {
        "", "lz4", "ZSTD", "Raw", "raw:1", "zstd:", "zstd:0", "zstd:-0",
        "zstd:23", "zstd:-8", "zstd:1x", "zstd: 1", "zstd:+3", "zstd:-",
        "zstd:99999999999999999999", "zstd:1:2", "zstd ", " zstd", "zstd::1",
        "AUTO", "auto:", "auto:0", "bg", "bg16", "bgf33", "bgbf16:23",
        "bg4:x", "bf16", "auto ",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int c = -5, l = -5;
        ckpt_error err = {0};
        ck_assert_msg(ckpt_codec_parse(ok[i].s, &c, &l, &err) == 0,
                      "\"%s\" refused: %s", ok[i].s, err.msg);
        ck_assert_int_eq(c, ok[i].codec);
        ck_assert_int_eq(l, ok[i].level);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int c = -5, l = -5;
        ckpt_error err = {0};
        ck_assert_msg(ckpt_codec_parse(bad[i], &c, &l, &err) == -EINVAL,
                      "\"%s\" accepted", bad[i]);
        ck_assert_int_eq(err.code, -EINVAL);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "\"%s\"", bad[i]);
        ck_assert_msg(strstr(err.msg, quoted) != NULL,
                      "message does not quote %s: %s", quoted, err.msg);
        ck_assert_int_eq(c, -5);
        ck_assert_int_eq(l, -5);
    }
    ck_assert_int_eq(ckpt_codec_parse(NULL, NULL, NULL, NULL), -EINVAL);
}
END_TEST

START_TEST(test_checksum)
{
    /* Reference value of XXH3-64 (seed 0) of the empty input. */
    ck_assert_uint_eq(ckpt_checksum("", 0), 0x2D06800538D394C2ULL);
    ck_assert_uint_eq(ckpt_checksum(NULL, 0), 0x2D06800538D394C2ULL);
    static const char text[] = "ckptfs frame checksum";
    ck_assert_uint_eq(ckpt_checksum(text, sizeof text - 1),
                      XXH3_64bits(text, sizeof text - 1));
    size_t n = 100003;
    unsigned char *buf = xmalloc(n);
    fill(buf, n, DATA_FLOAT, 9);
    uint64_t h = ckpt_checksum(buf, n);
    ck_assert_uint_eq(h, XXH3_64bits(buf, n));
    for (size_t pos = 0; pos < n; pos += 997) {
        for (int bit = 0; bit < 8; bit += 3) {
            buf[pos] ^= (unsigned char)(1u << bit);
            ck_assert_uint_ne(ckpt_checksum(buf, n), h);
            buf[pos] ^= (unsigned char)(1u << bit);
        }
    }
    ck_assert_uint_eq(ckpt_checksum(buf, n), h);
    free(buf);
}
END_TEST

START_TEST(test_bound)
{
    ck_assert_uint_ge(ckpt_codec_bound(1), 1);
    ck_assert_uint_ge(ckpt_codec_bound(1u << 20), ZSTD_compressBound(1u << 20));
}
END_TEST

/* ------------------------------------------------------------ byte-grouped */

static const int BG_CODECS[] = {
    CKPT_CODEC_BG_BF16, CKPT_CODEC_BG_F16, CKPT_CODEC_BG_F32,
    CKPT_CODEC_BG_F64, CKPT_CODEC_BG_2, CKPT_CODEC_BG_4, CKPT_CODEC_BG_8,
};
#define NBG (sizeof BG_CODECS / sizeof BG_CODECS[0])

/* The dtype each byte-grouped codec is made for. */
static ckpt_dtype bg_dtype(int codec)
{
    switch (codec) {
    case CKPT_CODEC_BG_BF16: return CKPT_BF16;
    case CKPT_CODEC_BG_F16: return CKPT_F16;
    case CKPT_CODEC_BG_F32: return CKPT_F32;
    case CKPT_CODEC_BG_F64: return CKPT_F64;
    case CKPT_CODEC_BG_2: return CKPT_I16;
    case CKPT_CODEC_BG_4: return CKPT_I32;
    default: return CKPT_I64;
    }
}

/* About N(0, 1): the Irwin-Hall sum of 12 uniforms, minus 6 (tails end at
 * +-6, which does not matter here; no libm needed). */
static double gauss(uint64_t *s)
{
    double sum = 0;
    for (int i = 0; i < 12; i++)
        sum += (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return sum - 6.0;
}

/* Stores x as element i of a buffer of dtype dt (floats rounded toward
 * zero, which is all the tests need; integers as the nearest long). */
static void put_elem(unsigned char *buf, size_t i, ckpt_dtype dt, double x)
{
    size_t es = ckpt_dtype_size(dt);
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dt == CKPT_BF16) {
        uint16_t h = (uint16_t)(u >> 16);
        memcpy(buf + i * es, &h, 2);
    } else if (dt == CKPT_F16) {
        /* binary16 by truncation: enough for data sets */
        uint32_t sign = (u >> 16) & 0x8000, e = (u >> 23) & 0xff;
        uint16_t h = (uint16_t)sign;
        if (e >= 113 && e <= 142)
            h |= (uint16_t)((e - 112) << 10 | ((u >> 13) & 0x3ff));
        memcpy(buf + i * es, &h, 2);
    } else if (dt == CKPT_F32) {
        memcpy(buf + i * es, &f, 4);
    } else if (dt == CKPT_F64) {
        memcpy(buf + i * es, &x, 8);
    } else {
        int64_t v = (int64_t)x;
        memcpy(buf + i * es, &v, es);   /* little-endian host */
    }
}

/* n bytes of N(0, sigma) elements of dtype dt (integers: N(0, 1000)). */
static void fill_gauss(unsigned char *buf, size_t n, ckpt_dtype dt,
                       double sigma, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 7;
    size_t es = ckpt_dtype_size(dt);
    int isint = dt == CKPT_I16 || dt == CKPT_I32 || dt == CKPT_I64;
    for (size_t i = 0; i < n / es; i++)
        put_elem(buf, i, dt, gauss(&s) * (isint ? 1000.0 : sigma));
    for (size_t i = n / es * es; i < n; i++)
        buf[i] = (unsigned char)i;
}

static void bg_round_trip(ckpt_codec_ctx *cx, int codec, int level,
                          const unsigned char *src, size_t n, int want_coded)
{
    size_t sn;
    int oc;
    unsigned char *st = encode(cx, codec, level, src, n, &sn, &oc);
    if (want_coded)
        ck_assert_msg(oc == codec, "%s: %zu bytes were stored raw",
                      ckpt_codec_name(codec), n);
    unsigned char *out = xmalloc(n + 8);
    memset(out + n, 0xEE, 8);
    ckpt_error err = {0};
    int rc = ckpt_codec_decode(cx, oc, st, sn, out, n, &err);
    ck_assert_msg(rc == 0, "%s decode of %zu bytes: %d %s",
                  ckpt_codec_name(codec), n, rc, err.msg);
    ck_assert_msg(n == 0 || memcmp(out, src, n) == 0,
                  "%s round trip of %zu bytes differs",
                  ckpt_codec_name(codec), n);
    ck_assert_uint_eq(first_not(out + n, 8, 0xEE), 8);
    free(out);
    free(st);
}

START_TEST(test_bg_roundtrip_all)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    for (size_t c = 0; c < NBG; c++) {
        int codec = BG_CODECS[c];
        ckpt_dtype dt = bg_dtype(codec);
        for (size_t li = 0; li < NLENGTHS; li++) {
            size_t n = lengths[li];
            unsigned char *src = xmalloc(n);
            for (int kind = 0; kind <= DATA_KINDS; kind++) {
                if (kind == DATA_KINDS)
                    fill_gauss(src, n, dt, 0.02, li);
                else
                    fill(src, n, kind, li);
                bg_round_trip(cx, codec, 1, src, n, 0);
                if (n <= 100003)
                    bg_round_trip(cx, codec, 5, src, n, 0);
            }
            free(src);
        }
    }
    ckpt_codec_ctx_free(cx);
}
END_TEST

/* Lengths of one element, of a few, and of frames that are not powers of
 * two, for data that compresses: all coded, none stored raw. */
START_TEST(test_bg_odd_lengths)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    static const size_t elems[] = {
        1, 2, 3, 5, 63, 64, 65, 127, 128, 129, 1000, 4095, 32769,
        (1u << 17) - 3, 3u << 16, 1000003,
    };
    for (size_t c = 0; c < NBG; c++) {
        int codec = BG_CODECS[c];
        size_t es = ckpt_dtype_size(bg_dtype(codec));
        for (size_t i = 0; i < sizeof elems / sizeof elems[0]; i++) {
            size_t n = elems[i] * es;
            unsigned char *src = xmalloc(n + es);
            fill(src, n, DATA_ZERO, 0);
            bg_round_trip(cx, codec, 1, src, n, n >= 128);
            fill_gauss(src, n + es - 1, bg_dtype(codec), 1e-3, i);
            bg_round_trip(cx, codec, 1, src, n, n >= 4096 && es > 1);
            /* a partial last element is carried as it is */
            bg_round_trip(cx, codec, 1, src, n + es - 1, 0);
            free(src);
        }
    }
    ckpt_codec_ctx_free(cx);
}
END_TEST

/* Special values of each float layout, as bit patterns. */
static const uint16_t EDGE_BF16[] = {
    0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x7fbf,
    0x0001, 0x807f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80,
};
static const uint16_t EDGE_F16[] = {
    0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x7dff,
    0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00,
};
static const uint32_t EDGE_F32[] = {
    0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
    0xffc00001, 0x7f800001, 0x7fbfffff, 0x00000001, 0x807fffff,
    0x00800000, 0x7f7fffff, 0xff7fffff, 0x3f800000, 0xdeadbeef,
};
static const uint64_t EDGE_F64[] = {
    0, 0x8000000000000000ULL, 0x7ff0000000000000ULL, 0xfff0000000000000ULL,
    0x7ff8000000000000ULL, 0xfff8000000000001ULL, 0x7ff0000000000001ULL,
    0x7ff7ffffffffffffULL, 1, 0x800fffffffffffffULL, 0x0010000000000000ULL,
    0x7fefffffffffffffULL, 0xffefffffffffffffULL, 0x3ff0000000000000ULL,
    0x4000000000000000ULL, 0x3800000000000000ULL, 0x47f0000000000000ULL,
};
static const uint64_t EDGE_INT[] = {
    0, 1, (uint64_t)-1, 0x7fffffffffffffffULL, 0x8000000000000000ULL,
    0x7fff, 0x8000, 0x7fffffff, 0x80000000ULL, 0xffff, 0xffffffffULL,
};

/* The edge values of codec's layout: count and bytes. */
static const void *edges(int codec, size_t *count)
{
    switch (codec) {
    case CKPT_CODEC_BG_BF16:
        *count = sizeof EDGE_BF16 / sizeof EDGE_BF16[0];
        return EDGE_BF16;
    case CKPT_CODEC_BG_F16:
        *count = sizeof EDGE_F16 / sizeof EDGE_F16[0];
        return EDGE_F16;
    case CKPT_CODEC_BG_F32:
        *count = sizeof EDGE_F32 / sizeof EDGE_F32[0];
        return EDGE_F32;
    case CKPT_CODEC_BG_F64:
        *count = sizeof EDGE_F64 / sizeof EDGE_F64[0];
        return EDGE_F64;
    default:
        *count = sizeof EDGE_INT / sizeof EDGE_INT[0];
        return EDGE_INT;
    }
}

/* Copies edge value j (of the layout's width) into element i of buf. */
static void put_edge(unsigned char *buf, size_t i, int codec, size_t j)
{
    size_t count, es = ckpt_dtype_size(bg_dtype(codec));
    const unsigned char *e = edges(codec, &count);
    size_t w = codec <= CKPT_CODEC_BG_F64 ? es : 8;
    memcpy(buf + i * es, e + (j % count) * w, es);   /* little-endian */
}

START_TEST(test_bg_edge_values)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    for (size_t c = 0; c < NBG; c++) {
        int codec = BG_CODECS[c];
        size_t es = ckpt_dtype_size(bg_dtype(codec)), count;
        edges(codec, &count);
        /* Edge values alone, each length from one element up. */
        unsigned char buf[64 * 8];
        for (size_t k = 1; k <= 64; k++) {
            for (size_t i = 0; i < k; i++)
                put_edge(buf, i, codec, i);
            bg_round_trip(cx, codec, 1, buf, k * es, 0);
        }
        /* Edge values every 7th element of data that compresses, so that
         * they go through the planes' coders. */
        size_t ne = 100003, n = ne * es;
        unsigned char *src = xmalloc(n);
        fill_gauss(src, n, bg_dtype(codec), 0.02, c);
        for (size_t i = 0; i < ne; i += 7)
            put_edge(src, i, codec, i / 7);
        bg_round_trip(cx, codec, 1, src, n, 1);
        free(src);
    }
    ckpt_codec_ctx_free(cx);
}
END_TEST

/* Encodes 1 MiB of N(0, sigma) data of codec's dtype; returns the ratio. */
static double bg_ratio(ckpt_codec_ctx *cx, int codec, double sigma)
{
    size_t n = 1u << 20, sn;
    int oc;
    unsigned char *src = xmalloc(n);
    fill_gauss(src, n, bg_dtype(codec), sigma, 42);
    unsigned char *st = encode(cx, codec, 1, src, n, &sn, &oc);
    bg_round_trip(cx, codec, 1, src, n, 1);
    free(st);
    free(src);
    return (double)n / (double)sn;
}

START_TEST(test_bg_compresses)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    /* The exponent entropy of N(0, s) is about 2.55 bits: bf16 reaches
     * 16 / (8 + 2.6), f32 32 / (24 + 2.6), f64 64 / (53 + 2.6). */
    ck_assert_double_ge(bg_ratio(cx, CKPT_CODEC_BG_BF16, 0.02), 1.49);
    ck_assert_double_ge(bg_ratio(cx, CKPT_CODEC_BG_F32, 1e-3), 1.19);
    ck_assert_double_ge(bg_ratio(cx, CKPT_CODEC_BG_F64, 1.0), 1.12);
    ck_assert_double_ge(bg_ratio(cx, CKPT_CODEC_BG_F16, 0.02), 1.15);
    /* Integers N(0, 1000): high bytes are 0 or 0xff. */
    ck_assert_double_ge(bg_ratio(cx, CKPT_CODEC_BG_8, 0), 3.0);
    ck_assert_double_ge(bg_ratio(cx, CKPT_CODEC_BG_4, 0), 1.8);
    /* All zeros: a constant plane each. */
    size_t n = 1u << 20, sn;
    int oc;
    unsigned char *z = xmalloc(n);
    memset(z, 0, n);
    for (size_t c = 0; c < NBG; c++) {
        unsigned char *st = encode(cx, BG_CODECS[c], 1, z, n, &sn, &oc);
        ck_assert_int_eq(oc, BG_CODECS[c]);
        ck_assert_uint_le(sn, 64);
        free(st);
    }
    free(z);
    ckpt_codec_ctx_free(cx);
}
END_TEST

/* Frames of one repeated element (zeros, or bytes that differ within the
 * element) are all constant planes, with or without a partial element. */
START_TEST(test_bg_constant)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    static const unsigned char elem[8] = {0x08, 0x07, 0x06, 0x05, 0x04,
                                          0x03, 0xf2, 0xbf};
    static const size_t elems[] = {64, 65, 1000, 4097, 262144};
    for (size_t c = 0; c < NBG; c++) {
        int codec = BG_CODECS[c], oc;
        size_t es = ckpt_dtype_size(bg_dtype(codec)), sn;
        int np = codec == CKPT_CODEC_BG_BF16 || codec == CKPT_CODEC_BG_2
                     ? 2 : codec == CKPT_CODEC_BG_F16 ? 3
                     : codec == CKPT_CODEC_BG_F32 || codec == CKPT_CODEC_BG_4
                     ? 4 : 8;
        for (size_t i = 0; i < sizeof elems / sizeof elems[0]; i++) {
            for (size_t tail = 0; tail < es; tail += es - 1) {
                size_t n = elems[i] * es + tail;
                unsigned char *src = xmalloc(n);
                for (size_t j = 0; j < n; j++)
                    src[j] = elem[j % es];
                unsigned char *st = encode(cx, codec, 1, src, n, &sn, &oc);
                ck_assert_int_eq(oc, codec);
                ck_assert_uint_eq(sn, 4 + 6 * (size_t)np + tail);
                free(st);
                bg_round_trip(cx, codec, 1, src, n, 1);
                memset(src, 0, n);
                bg_round_trip(cx, codec, 1, src, n, 1);
                free(src);
            }
        }
    }
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_bg_fallback_random)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    static const size_t ns[] = {1, 3, 64, 4096, 65536, (1u << 20) + 1};
    for (size_t c = 0; c < NBG; c++) {
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            size_t n = ns[i], on = 0, cap = ckpt_codec_bound(n);
            int oc = -1;
            unsigned char *src = xmalloc(n), *dst = xmalloc(cap);
            fill(src, n, DATA_RANDOM, 100 + i);
            ck_assert_int_eq(ckpt_codec_encode(cx, BG_CODECS[c], 1, 4, src,
                                               n, dst, cap, &on, &oc, NULL),
                             0);
            ck_assert_int_eq(oc, CKPT_CODEC_RAW);
            ck_assert_uint_eq(on, n);
            free(src);
            free(dst);
        }
    }
    /* A destination below ckpt_codec_bound is refused, not overrun. */
    unsigned char src[4096] = {0}, dst[4096];
    size_t on;
    int oc;
    ckpt_error err = {0};
    ck_assert_int_eq(ckpt_codec_encode(cx, CKPT_CODEC_BG_F32, 1, 4, src,
                                       sizeof src, dst, 100, &on, &oc, &err),
                     -EINVAL);
    ckpt_codec_ctx_free(cx);
}
END_TEST

/* Plane p of a byte-grouped frame: method, offset and length. */
typedef struct plane_at {
    int method;
    size_t off, len;
} plane_at;

static int frame_planes(const unsigned char *st, plane_at *pl)
{
    int np = st[3];
    size_t off = 4 + 5 * (size_t)np;
    for (int k = 0; k < np; k++) {
        const unsigned char *h = st + 4 + 5 * k;
        pl[k].method = h[0];
        pl[k].len = (size_t)h[1] | (size_t)h[2] << 8 | (size_t)h[3] << 16 |
                    (size_t)h[4] << 24;
        pl[k].off = off;
        off += pl[k].len;
    }
    return np;
}

/* Each plane method shows up on data made for it. */
START_TEST(test_bg_methods)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    size_t n = 1u << 20, sn;
    int oc, seen = 0;
    unsigned char *src = xmalloc(n);
    for (int set = 0; set < 4; set++) {
        int codec;
        if (set == 0) {          /* stored mantissa, Huffman exponent */
            codec = CKPT_CODEC_BG_BF16;
            fill_gauss(src, n, CKPT_BF16, 0.02, 1);
        } else if (set == 1) {   /* packed sign+mantissa bits */
            codec = CKPT_CODEC_BG_F16;
            fill_gauss(src, n, CKPT_F16, 0.02, 2);
        } else if (set == 2) {   /* zstd: an arange of int32 */
            codec = CKPT_CODEC_BG_4;
            for (uint32_t i = 0; i < n / 4; i++)
                memcpy(src + 4 * i, &i, 4);
        } else {                 /* constant planes */
            codec = CKPT_CODEC_BG_F32;
            memset(src, 0, n);
        }
        unsigned char *st = encode(cx, codec, 1, src, n, &sn, &oc);
        ck_assert_int_eq(oc, codec);
        plane_at pl[8];
        int np = frame_planes(st, pl);
        ck_assert_uint_eq(pl[np - 1].off + pl[np - 1].len, sn);
        for (int k = 0; k < np; k++)
            seen |= 1 << pl[k].method;
        bg_round_trip(cx, codec, 1, src, n, 1);
        free(st);
    }
    /* stored 0, constant 1, Huffman 2, zstd 3, packed 4 */
    ck_assert_int_eq(seen, 0x1f);
    free(src);
    ckpt_codec_ctx_free(cx);
}
END_TEST

/* Damage in every part of a frame of each codec: header, each plane. */
START_TEST(test_bg_corrupt)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    size_t ne = 30011;
    for (size_t c = 0; c < NBG; c++) {
        int codec = BG_CODECS[c], oc;
        size_t es = ckpt_dtype_size(bg_dtype(codec)), n = ne * es + 1, sn;
        unsigned char *src = xmalloc(n);
        fill_gauss(src, n, bg_dtype(codec), 0.02, c + 5);
        unsigned char *st = encode(cx, codec, 1, src, n, &sn, &oc);
        ck_assert_int_eq(oc, codec);
        unsigned char *bad = xmalloc(sn + 16);
        /* The header: any change is refused. */
        for (size_t pos = 0; pos < 4; pos++) {
            memcpy(bad, st, sn);
            bad[pos] ^= 0x21;
            ck_assert_int_eq(decode_damaged_as(cx, codec, bad, sn, src, n, n),
                             -EIO);
        }
        /* Every plane: flips across its bytes, and in its header entry. */
        plane_at pl[8];
        int np = frame_planes(st, pl), eio = 0;
        for (int k = 0; k < np; k++) {
            size_t step = pl[k].len > 200 ? pl[k].len / 200 : 1;
            for (size_t i = 0; i < pl[k].len; i += step) {
                memcpy(bad, st, sn);
                bad[pl[k].off + i] ^= (unsigned char)(1u << (i % 8));
                eio += decode_damaged_as(cx, codec, bad, sn, src, n, n) != 0;
            }
            for (int b = 0; b < 5; b++) {
                memcpy(bad, st, sn);
                bad[4 + 5 * k + b] ^= 0x04;
                eio += decode_damaged_as(cx, codec, bad, sn, src, n, n) != 0;
            }
        }
        ck_assert_int_gt(eio, 0);
        /* Truncations, a longer frame, and other expected sizes. */
        for (size_t len = 0; len < sn; len += (len < 64 ? 1 : 101))
            ck_assert_int_eq(decode_damaged_as(cx, codec, st, len, src, n, n),
                             -EIO);
        memcpy(bad, st, sn);
        memset(bad + sn, 0, 16);
        ck_assert_int_eq(decode_damaged_as(cx, codec, bad, sn + 16, src, n,
                                           n), -EIO);
        ck_assert_int_eq(decode_damaged_as(cx, codec, st, sn, src, n,
                                           n - es), -EIO);
        ck_assert_int_eq(decode_damaged_as(cx, codec, st, sn, src, n,
                                           n + es), -EIO);
        ck_assert_int_eq(decode_damaged_as(cx, codec, st, sn, src, n,
                                           es - 1), -EIO);
        /* The frame read as another byte-grouped codec is refused. */
        int other = codec == CKPT_CODEC_BG_BF16 ? CKPT_CODEC_BG_2
                                                : CKPT_CODEC_BG_BF16;
        ck_assert_int_eq(decode_damaged_as(cx, other, st, sn, src, n, n),
                         -EIO);
        ck_assert_int_eq(decode_damaged_as(cx, codec, st, sn, src, n, n), 0);
        free(bad);
        free(st);
        free(src);
    }
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_bg_garbage)
{
    ckpt_codec_ctx *cx = ckpt_codec_ctx_new();
    size_t n = 8192;
    unsigned char *orig = xmalloc(n), *g = xmalloc(1024);
    memset(orig, 0, n);
    for (size_t c = 0; c < NBG; c++) {
        int codec = BG_CODECS[c];
        int layout = codec - CKPT_CODEC_BG_BF16 + 1;
        size_t es = ckpt_dtype_size(bg_dtype(codec));
        int np = codec == CKPT_CODEC_BG_BF16 || codec == CKPT_CODEC_BG_2
                     ? 2 : codec == CKPT_CODEC_BG_F16 ? 3
                     : codec == CKPT_CODEC_BG_F32 || codec == CKPT_CODEC_BG_4
                     ? 4 : 8;
        for (uint64_t seed = 1; seed < 300; seed++) {
            size_t len = (size_t)(seed * 37 % 1000);
            fill(g, len + 4, DATA_RANDOM, seed);
            if (seed % 2 && len >= 4) {  /* a valid header, garbage after */
                g[0] = 1;
                g[1] = (unsigned char)layout;
                g[2] = (unsigned char)es;
                g[3] = (unsigned char)np;
            }
            ck_assert_int_eq(decode_damaged_as(cx, codec, g, len, orig, n, n),
                             -EIO);
        }
    }
    free(g);
    free(orig);
    ckpt_codec_ctx_free(cx);
}
END_TEST

START_TEST(test_resolve)
{
    static const struct { ckpt_dtype dt; int codec; } map[] = {
        {CKPT_BF16, CKPT_CODEC_BG_BF16}, {CKPT_F16, CKPT_CODEC_BG_F16},
        {CKPT_F32, CKPT_CODEC_BG_F32}, {CKPT_F64, CKPT_CODEC_BG_F64},
        {CKPT_I16, CKPT_CODEC_BG_2}, {CKPT_U16, CKPT_CODEC_BG_2},
        {CKPT_I32, CKPT_CODEC_BG_4}, {CKPT_U32, CKPT_CODEC_BG_4},
        {CKPT_I64, CKPT_CODEC_BG_8}, {CKPT_U64, CKPT_CODEC_BG_8},
        {CKPT_F8E4M3, CKPT_CODEC_ZSTD}, {CKPT_F8E5M2, CKPT_CODEC_ZSTD},
        {CKPT_I8, CKPT_CODEC_ZSTD}, {CKPT_U8, CKPT_CODEC_ZSTD},
        {CKPT_BOOL, CKPT_CODEC_ZSTD}, {CKPT_BYTES, CKPT_CODEC_ZSTD},
        {CKPT_C32, CKPT_CODEC_BG_F16}, {CKPT_C64, CKPT_CODEC_BG_F32},
        {CKPT_C128, CKPT_CODEC_BG_F64}, {CKPT_F8E4M3FNUZ, CKPT_CODEC_ZSTD},
        {CKPT_F8E5M2FNUZ, CKPT_CODEC_ZSTD}, {CKPT_F8E8M0, CKPT_CODEC_ZSTD},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        ck_assert_int_eq(ckpt_codec_resolve(CKPT_CODEC_AUTO, map[i].dt),
                         map[i].codec);
        ck_assert_int_eq(ckpt_codec_resolve(CKPT_CODEC_RAW, map[i].dt),
                         CKPT_CODEC_RAW);
        ck_assert_int_eq(ckpt_codec_resolve(CKPT_CODEC_BG_F32, map[i].dt),
                         CKPT_CODEC_BG_F32);
    }
    ckpt_write_opts o;
    ckpt_write_opts_init(&o);
    ck_assert_int_eq(o.codec, CKPT_CODEC_AUTO);
    ck_assert_int_eq(o.level, 1);
}
END_TEST

/* ------------------------------------------------------------ checkpoints */

static int rm_entry(const char *p, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

/* Writes tensor fqn (dtype dt, n bytes at data) with codec in writer
 * `name` of checkpoint dir. */
static void write_one(const char *dir, const char *name, int codec,
                      const char *fqn, ckpt_dtype dt, const void *data,
                      size_t n)
{
    ckpt_write_opts wo;
    ckpt_write_opts_init(&wo);
    if (codec != CKPT_CODEC_AUTO)
        wo.codec = codec;
    wo.sync = 0;
    wo.frame_size = 100000;             /* not a power of two */
    ckpt_writer *w;
    ckpt_error err = {0};
    int64_t shape = (int64_t)(n / ckpt_dtype_size(dt));
    ckpt_piece p = { .fqn = fqn, .dtype = dt, .ndim = 1, .shape = &shape,
                     .data = data };
    ck_assert_msg(ckpt_writer_open(&w, dir, name, &wo, &err) == 0 &&
                  ckpt_writer_put(w, &p, &err) == 0 &&
                  ckpt_writer_close(w, &err) == 0, "%s", err.msg);
}

/* A checkpoint whose tensors use raw, zstd (what earlier versions wrote)
 * and the byte-grouped codecs that `auto`, the default, picks per dtype:
 * all read back, and each tensor's frames carry the expected codec. */
START_TEST(test_mixed_checkpoint)
{
    char dir[] = "/tmp/ckptfs-test-codec-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    static const struct {
        const char *fqn;
        ckpt_dtype dt;
        int codec, want;
    } T[] = {
        {"old.raw", CKPT_F32, CKPT_CODEC_RAW, CKPT_CODEC_RAW},
        {"old.zstd", CKPT_BF16, CKPT_CODEC_ZSTD, CKPT_CODEC_ZSTD},
        {"w.bf16", CKPT_BF16, CKPT_CODEC_AUTO, CKPT_CODEC_BG_BF16},
        {"w.f16", CKPT_F16, CKPT_CODEC_AUTO, CKPT_CODEC_BG_F16},
        {"w.f32", CKPT_F32, CKPT_CODEC_AUTO, CKPT_CODEC_BG_F32},
        {"w.f64", CKPT_F64, CKPT_CODEC_AUTO, CKPT_CODEC_BG_F64},
        {"w.i64", CKPT_I64, CKPT_CODEC_AUTO, CKPT_CODEC_BG_8},
        {"w.i32", CKPT_I32, CKPT_CODEC_AUTO, CKPT_CODEC_BG_4},
        {"w.i16", CKPT_I16, CKPT_CODEC_AUTO, CKPT_CODEC_BG_2},
        {"w.u8", CKPT_U8, CKPT_CODEC_AUTO, CKPT_CODEC_ZSTD},
    };
    size_t nt = sizeof T / sizeof T[0], n = 333336;   /* 24 * 13889 */
    unsigned char *data[16];
    for (size_t i = 0; i < nt; i++) {
        data[i] = xmalloc(n);
        if (T[i].dt == CKPT_U8)
            fill(data[i], n, DATA_FLOAT, i);
        else
            fill_gauss(data[i], n, T[i].dt, 0.02, i);
        char name[16];
        snprintf(name, sizeof name, "w%zu", i);
        write_one(dir, name, T[i].codec, T[i].fqn, T[i].dt, data[i], n);
    }
    ckpt_commit_opts co;
    ckpt_commit_opts_init(&co);
    co.sync = 0;
    ckpt_error err = {0};
    ck_assert_msg(ckpt_commit(dir, &co, &err) == 0, "%s", err.msg);
    ckpt_reader *r;
    ck_assert_msg(ckpt_reader_open(&r, dir, NULL, &err) == 0, "%s", err.msg);
    unsigned char *out = xmalloc(n);
    for (size_t i = 0; i < nt; i++) {
        long t = ckpt_reader_find(r, T[i].fqn);
        ck_assert_int_ge(t, 0);
        ck_assert_int_eq(ckpt_read(r, (size_t)t, out, 0, n, &err), (int64_t)n);
        ck_assert_msg(memcmp(out, data[i], n) == 0, "%s differs", T[i].fqn);
        ckpt_frame_info f;
        ck_assert_int_eq(ckpt_reader_frame(r, (size_t)t, 0, 0, &f, &err), 0);
        ck_assert_msg(f.codec == T[i].want, "%s: frame codec %s, want %s",
                      T[i].fqn, ckpt_codec_name(f.codec),
                      ckpt_codec_name(T[i].want));
        ckpt_tensor_info ti;
        ck_assert_int_eq(ckpt_reader_info(r, (size_t)t, &ti), 0);
        ck_assert_ptr_nonnull(strstr(ti.codecs, ckpt_codec_name(T[i].want)));
        free(data[i]);
    }
    int64_t faults = ckpt_verify(r, NULL, NULL, NULL, &err);
    ck_assert_int_eq(faults, 0);
    ckpt_reader_close(r);
    free(out);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
END_TEST

static Suite *codec_suite(void)
{
    Suite *s = suite_create("codec");
    TCase *tc = tcase_create("codec");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_roundtrip_all);
    tcase_add_test(tc, test_roundtrip_empty);
    tcase_add_test(tc, test_fallback_random);
    tcase_add_test(tc, test_raw_codec_leaves_dst);
    tcase_add_test(tc, test_standard_zstd_frame);
    tcase_add_test(tc, test_corrupt_streams);
    tcase_add_test(tc, test_garbage_input);
    tcase_add_test(tc, test_raw_size_mismatch);
    tcase_add_test(tc, test_unknown_codec);
    tcase_add_test(tc, test_bad_level);
    tcase_add_test(tc, test_parse);
    tcase_add_test(tc, test_checksum);
    tcase_add_test(tc, test_bound);
    suite_add_tcase(s, tc);
    TCase *bg = tcase_create("bytegroup");
    tcase_set_timeout(bg, 300);
    tcase_add_test(bg, test_bg_roundtrip_all);
    tcase_add_test(bg, test_bg_odd_lengths);
    tcase_add_test(bg, test_bg_edge_values);
    tcase_add_test(bg, test_bg_compresses);
    tcase_add_test(bg, test_bg_constant);
    tcase_add_test(bg, test_bg_fallback_random);
    tcase_add_test(bg, test_bg_methods);
    tcase_add_test(bg, test_bg_corrupt);
    tcase_add_test(bg, test_bg_garbage);
    tcase_add_test(bg, test_resolve);
    tcase_add_test(bg, test_mixed_checkpoint);
    suite_add_tcase(s, bg);
    return s;
}

int main(void)
{
    return unit_run(codec_suite());
}
