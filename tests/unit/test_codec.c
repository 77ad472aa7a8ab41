/*
 * test_codec.c - unit tests of src/codec.c: raw and zstd round trips, the
 * fallback to raw, standard zstd frames, corrupt and truncated input,
 * unknown codecs, codec name parsing, and the XXH3-64 checksum.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "codec.h"

/* ------------------------------------------------------------ data */

enum { DATA_RANDOM, DATA_ZERO, DATA_FLOAT, DATA_KINDS };

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: deterministic test data */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

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

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
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
        ck_assert_int_eq(*out_codec, CKPT_CODEC_ZSTD);
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
static int decode_damaged(ckpt_codec_ctx *cx, const unsigned char *st,
                          size_t sn, const unsigned char *orig, size_t n,
                          size_t raw_n)
{
    const size_t guard = 64;
    unsigned char *out = xmalloc(raw_n + guard);
    memset(out + raw_n, 0xEE, guard);
    ckpt_error err = {0};
    int rc = ckpt_codec_decode(cx, CKPT_CODEC_ZSTD, st, sn, out, raw_n, &err);
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
    ck_assert_int_eq(ckpt_codec_decode(cx, 7, a, 8, b, 8, &err), -ENOTSUP);
    ck_assert_int_eq(err.code, -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(err.msg, "7"));
    size_t on;
    int oc;
    ck_assert_int_eq(ckpt_codec_encode(cx, 42, 1, 1, a, 8, b, 8, &on, &oc,
                                       &err), -ENOTSUP);
    ck_assert_ptr_nonnull(strstr(err.msg, "42"));
    ck_assert_int_eq(ckpt_codec_known(CKPT_CODEC_RAW), 1);
    ck_assert_int_eq(ckpt_codec_known(CKPT_CODEC_ZSTD), 1);
    ck_assert_int_eq(ckpt_codec_known(2), 0);
    ck_assert_int_eq(ckpt_codec_known(-1), 0);
    ck_assert_str_eq(ckpt_codec_name(CKPT_CODEC_RAW), "raw");
    ck_assert_str_eq(ckpt_codec_name(CKPT_CODEC_ZSTD), "zstd");
    ck_assert_str_eq(ckpt_codec_name(9), "unknown");
    ck_assert_str_eq(ckpt_codec_name(-3), "unknown");
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
    };
    static const char *bad[] = {
        "", "lz4", "ZSTD", "Raw", "raw:1", "zstd:", "zstd:0", "zstd:-0",
        "zstd:23", "zstd:-8", "zstd:1x", "zstd: 1", "zstd:+3", "zstd:-",
        "zstd:99999999999999999999", "zstd:1:2", "zstd ", " zstd", "zstd::1",
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
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(codec_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
