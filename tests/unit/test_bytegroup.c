/*
 * test_bytegroup.c - unit tests of src/codec/bytegroup.c (byte planes of every
 * layout, bit packing) and src/codec/huff.c (histograms, Huffman codes,
 * streams): round trips at every length around the block sizes, the documented
 * bit positions of each plane, length-limited codes, and damaged or garbage
 * Huffman streams, which must fail cleanly or decode to some bytes but never
 * read or write out of bounds (run under ASan to see that).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/bytegroup.h"
#include "codec/huff.h"
#include "unit_util.h"

static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng_next(&s) >> 56);
}

/* Bytes with a geometric distribution (about half are 0, a quarter 1...):
 * like exponents, skewed enough to need length limiting in long runs. */
static void fill_geometric(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed + 99;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&s) | (uint64_t)1 << 40;
        p[i] = (uint8_t)(100 + __builtin_ctzll(r));
    }
}

static const int LAYOUTS[] = {
    CKPT_BG_BF16, CKPT_BG_F16, CKPT_BG_F32, CKPT_BG_F64,
    CKPT_BG_X2, CKPT_BG_X4, CKPT_BG_X8,
};
#define NLAYOUTS (sizeof LAYOUTS / sizeof LAYOUTS[0])

/* ------------------------------------------------------------ planes */

static void split_merge(int layout, const uint8_t *src, size_t n)
{
    int np = ckpt_bg_nplanes(layout);
    size_t es = ckpt_bg_esize(layout);
    uint8_t *pl[CKPT_BG_MAX_PLANES];
    for (int k = 0; k < np; k++)
        pl[k] = xmalloc(n);
    ckpt_bg_split(layout, src, n, pl);
    uint8_t *out = xmalloc(n * es + 1);
    out[n * es] = 0xA5;
    ckpt_bg_merge(layout, (const uint8_t *const *)pl, n, out);
    ck_assert_msg(n == 0 || memcmp(out, src, n * es) == 0,
                  "layout %d, %zu elements: merge(split(x)) != x", layout, n);
    ck_assert_int_eq(out[n * es], 0xA5);
    for (int k = 0; k < np; k++)
        free(pl[k]);
    free(out);
}

START_TEST(test_split_merge_lengths)
{
    size_t max = 1000 * 8;
    uint8_t *src = xmalloc(max);
    fill_random(src, max, 1);
    for (size_t li = 0; li < NLAYOUTS; li++) {
        ck_assert_uint_gt(ckpt_bg_esize(LAYOUTS[li]), 0);
        for (size_t n = 0; n <= 300; n++)
            split_merge(LAYOUTS[li], src, n);
        split_merge(LAYOUTS[li], src, 999);
        split_merge(LAYOUTS[li], src, 1000);
    }
    ck_assert_uint_eq(ckpt_bg_esize(0), 0);
    ck_assert_int_eq(ckpt_bg_nplanes(99), 0);
    free(src);
}
END_TEST

START_TEST(test_split_merge_large)
{
    size_t n = (1u << 20) + 3;       /* elements */
    uint8_t *src = xmalloc(n * 8);
    fill_random(src, n * 8, 2);
    for (size_t li = 0; li < NLAYOUTS; li++)
        split_merge(LAYOUTS[li], src, n);
    free(src);
}
END_TEST

/* Splits one element and returns its planes. */
static void split_one(int layout, const void *elem, uint8_t planes[8])
{
    uint8_t *pl[CKPT_BG_MAX_PLANES];
    for (int k = 0; k < CKPT_BG_MAX_PLANES; k++)
        pl[k] = &planes[k];
    ckpt_bg_split(layout, elem, 1, pl);
}

START_TEST(test_float_planes)
{
    uint8_t p[8];
    float f = -1.5f;                 /* sign 1, exponent 127, m = 0x400000 */
    split_one(CKPT_BG_F32, &f, p);
    ck_assert_uint_eq(p[3], 127);
    ck_assert_uint_eq(p[2], 0x80 | 0x40);
    ck_assert_uint_eq(p[1], 0);
    ck_assert_uint_eq(p[0], 0);
    uint16_t bf = 0xC0C1;            /* -6.0..: sign 1, exponent 0x81 */
    split_one(CKPT_BG_BF16, &bf, p);
    ck_assert_uint_eq(p[1], 0x81);
    ck_assert_uint_eq(p[0], 0x80 | 0x41);
    uint16_t h = 0xBE01;             /* f16: sign 1, exponent 15, m 0x201 */
    split_one(CKPT_BG_F16, &h, p);
    ck_assert_uint_eq(p[2], 15);
    ck_assert_uint_eq(p[1], 4 | 2);
    ck_assert_uint_eq(p[0], 0x01);
    double d = -3.0;                 /* exponent 1024, m top nibble 8 */
    split_one(CKPT_BG_F64, &d, p);
    ck_assert_uint_eq(p[7], (1024 + 0x481) & 0xff);
    ck_assert_uint_eq(p[6], 0x10 | 0x08);   /* r >> 8 = 0, sign, m51..48 */
    double z = 0.0;                  /* exponent 0: r = 0x481 */
    split_one(CKPT_BG_F64, &z, p);
    ck_assert_uint_eq(p[7], 0x81);
    ck_assert_uint_eq(p[6], 4 << 5);
    uint32_t x = 0x44332211;
    split_one(CKPT_BG_X4, &x, p);
    ck_assert_uint_eq(p[0], 0x11);
    ck_assert_uint_eq(p[3], 0x44);
}
END_TEST

START_TEST(test_f64_exponent_rebias)
{
    /* Every exponent of 2^-128 <= |x| < 2^128 lands in P7 with P6's top
     * bits 0; all 2048 exponents survive a round trip. */
    for (int e = 0; e < 2048; e++) {
        uint64_t bits = (uint64_t)e << 52 | 0x000F0F0F0F0F0F0FULL;
        uint8_t p[8];
        split_one(CKPT_BG_F64, &bits, p);
        if (e >= 1023 - 128 && e <= 1023 + 127)
            ck_assert_uint_eq(p[6] >> 5, 0);
        else
            ck_assert_uint_ne(p[6] >> 5, 0);
        uint8_t *pl[8];
        for (int k = 0; k < 8; k++)
            pl[k] = &p[k];
        uint64_t back;
        ckpt_bg_merge(CKPT_BG_F64, (const uint8_t *const *)pl, 1,
                      (uint8_t *)&back);
        ck_assert_uint_eq(back, bits);
    }
}
END_TEST

/* ------------------------------------------------------------ packing */

START_TEST(test_pack_round_trip)
{
    size_t max = 5000;
    uint8_t *src = xmalloc(max), *out = xmalloc(max);
    uint8_t *packed = xmalloc(max + 16);
    for (unsigned k = 1; k <= 7; k++) {
        for (size_t n = 0; n < max; n += (n < 300 ? 1 : 129)) {
            fill_random(src, n, k * 1000 + n);
            for (size_t i = 0; i < n; i++)
                src[i] &= (uint8_t)((1u << k) - 1);
            size_t ps = ckpt_bg_packed_size(n, k);
            ck_assert_uint_ge(ps * 8, n * k);
            ck_assert_uint_le(ps, (n + 127) / 128 * 16 * k);
            memset(packed, 0xEE, max + 16);
            ckpt_bg_pack(src, n, k, packed);
            ck_assert_uint_eq(packed[ps], 0xEE);
            memset(out, 0xCC, max);
            ckpt_bg_unpack(packed, n, k, out);
            ck_assert_msg(n == 0 || memcmp(out, src, n) == 0,
                          "k=%u n=%zu differs", k, n);
            if (n < max)
                ck_assert_uint_eq(out[n], 0xCC);
        }
    }
    free(src);
    free(out);
    free(packed);
}
END_TEST

START_TEST(test_pack_drops_high_bits)
{
    uint8_t src[128], packed[128], out[128];
    for (int i = 0; i < 128; i++)
        src[i] = (uint8_t)(0xF0 | (i & 3));
    ckpt_bg_pack(src, 128, 2, packed);
    ckpt_bg_unpack(packed, 128, 2, out);
    for (int i = 0; i < 128; i++)
        ck_assert_uint_eq(out[i], (unsigned)(i & 3));
}
END_TEST

START_TEST(test_max)
{
    uint8_t p[300] = { 0 };
    ck_assert_uint_eq(ckpt_bg_max(p, 0), 0);
    ck_assert_uint_eq(ckpt_bg_max(p, 300), 0);
    p[299] = 7;
    ck_assert_uint_eq(ckpt_bg_max(p, 300), 7);
    ck_assert_uint_eq(ckpt_bg_max(p, 299), 0);
    p[5] = 200;
    ck_assert_uint_eq(ckpt_bg_max(p, 300), 200);
}
END_TEST

/* ------------------------------------------------------------ Huffman */

START_TEST(test_hist)
{
    size_t n = 100003;
    uint8_t *p = xmalloc(n);
    fill_random(p, n, 5);
    uint32_t h[256], ref[256] = { 0 };
    for (size_t i = 0; i < n; i++)
        ref[p[i]]++;
    ckpt_hist(p, n, h);
    ck_assert_mem_eq(h, ref, sizeof h);
    ck_assert_double_eq_tol(ckpt_hist_entropy(h, n), 8.0, 0.01);
    memset(p, 3, 10);
    ckpt_hist(p, 10, h);
    ck_assert_uint_eq(h[3], 10);
    ck_assert_double_eq_tol(ckpt_hist_entropy(h, 10), 0.0, 1e-9);
    ck_assert_double_eq(ckpt_hist_entropy(h, 0), 0.0);
    free(p);
}
END_TEST

/* Encodes src with a code built from its histogram and decodes it back;
 * returns the stream size, or 0 when no code could be built. */
static size_t huf_round_trip(ckpt_huf_dtable *t, const uint8_t *src,
                             size_t n)
{
    uint32_t h[256];
    ckpt_hist(src, n, h);
    ckpt_huf_code code;
    if (ckpt_huf_build(h, &code) != 0)
        return 0;
    uint64_t bits = 0;
    for (int s = 0; s < 256; s++) {
        ck_assert_uint_le(code.len[s], CKPT_HUF_MAX_BITS);
        ck_assert((h[s] == 0) == (code.len[s] == 0));
        bits += (uint64_t)h[s] * code.len[s];
    }
    uint8_t *st = xmalloc(code.size + CKPT_HUF_SLACK);
    size_t sn = ckpt_huf_encode(&code, src, n, st);
    ck_assert_uint_le(sn, code.size);
    ck_assert_uint_ge(sn * 8, bits);
    uint8_t *out = xmalloc(n + 1);
    out[n] = 0x5A;
    ck_assert_int_eq(ckpt_huf_decode(t, st, sn, out, n), 0);
    ck_assert_msg(memcmp(out, src, n) == 0, "Huffman round trip of %zu "
                  "bytes differs", n);
    ck_assert_uint_eq(out[n], 0x5A);
    free(st);
    free(out);
    return sn;
}

/* One table decoding streams whose codes alternate (two data sets with
 * different histograms, and two streams of one code): the tables kept from
 * the previous stream serve only a stream with the same code. */
START_TEST(test_huf_table_reuse)
{
    ckpt_huf_dtable *t = calloc(1, sizeof *t);
    size_t n = 100000;
    uint8_t *a = xmalloc(n), *a2 = xmalloc(n), *b = xmalloc(n);
    fill_geometric(a, n, 3);
    memcpy(a2, a, n);
    for (size_t i = 0; i < n; i += 7)   /* same symbols, other order */
        a2[i] = a[n - 1 - i];
    fill_random(b, n, 9);
    for (int round = 0; round < 3; round++) {
        huf_round_trip(t, a, n);
        huf_round_trip(t, a, n);        /* the same code: tables kept */
        ck_assert_uint_gt(t->code_len, 0);
        huf_round_trip(t, b, n);        /* another code: rebuilt */
        huf_round_trip(t, a2, n);
        huf_round_trip(t, a, 2000);     /* short: single-symbol table */
        huf_round_trip(t, a, n);
    }
    free(a);
    free(a2);
    free(b);
    free(t);
}
END_TEST

START_TEST(test_huf_round_trips)
{
    ckpt_huf_dtable *t = calloc(1, sizeof *t);
    size_t max = (1u << 20) + 7;
    uint8_t *p = xmalloc(max);
    for (int kind = 0; kind < 3; kind++) {
        for (size_t n = 2; n < max; n = n < 200 ? n + 1 : n * 3 + 1) {
            if (kind == 0)
                fill_random(p, n, n);
            else if (kind == 1)
                fill_geometric(p, n, n);
            else
                for (size_t i = 0; i < n; i++)
                    p[i] = (uint8_t)(i % 2 ? 17 : 200);   /* two symbols */
            p[0] ^= 1;               /* at least two distinct symbols */
            huf_round_trip(t, p, n);
        }
        fill_geometric(p, max, 3);
        huf_round_trip(t, p, max);
    }
    free(p);
    free(t);
}
END_TEST

START_TEST(test_huf_single_symbol)
{
    uint32_t h[256] = { 0 };
    ckpt_huf_code code;
    h[42] = 1000;
    ck_assert_int_eq(ckpt_huf_build(h, &code), -1);
    h[42] = 0;
    ck_assert_int_eq(ckpt_huf_build(h, &code), -1);
}
END_TEST

START_TEST(test_huf_length_limit)
{
    /* Fibonacci counts make a Huffman tree as deep as there are symbols;
     * the code must stay within 11 bits and still round-trip. */
    uint32_t fib[40] = { 1, 1 };
    for (int i = 2; i < 40; i++)
        fib[i] = fib[i - 1] + fib[i - 2];
    size_t n = 0;
    for (int i = 0; i < 30; i++)
        n += fib[i];
    uint8_t *p = xmalloc(n);
    size_t at = 0;
    for (int i = 0; i < 30; i++)
        for (uint32_t k = 0; k < fib[i]; k++)
            p[at++] = (uint8_t)(i * 7);
    ckpt_huf_dtable *t = calloc(1, sizeof *t);
    size_t sn = huf_round_trip(t, p, n);
    ck_assert_uint_gt(sn, 0);
    /* Within 10% of the entropy all the same (this is the worst case). */
    uint32_t h[256];
    ckpt_hist(p, n, h);
    double bound = ckpt_hist_entropy(h, n) * (double)n / 8;
    ck_assert_double_le((double)sn, bound * 1.10 + 200);
    free(p);
    free(t);
}
END_TEST

START_TEST(test_huf_near_entropy)
{
    size_t n = 1u << 19;
    uint8_t *p = xmalloc(n);
    fill_geometric(p, n, 11);
    uint32_t h[256];
    ckpt_hist(p, n, h);
    ckpt_huf_dtable *t = calloc(1, sizeof *t);
    size_t sn = huf_round_trip(t, p, n);
    double bits = (double)sn * 8 / (double)n;
    /* Dyadic probabilities: Huffman is exact, so within a few bytes. */
    ck_assert_double_le(bits, ckpt_hist_entropy(h, n) + 0.01);
    free(p);
    free(t);
}
END_TEST

/* A valid stream of n geometric bytes. */
static uint8_t *sample_stream(size_t n, size_t *sn, uint8_t **orig)
{
    uint8_t *p = xmalloc(n);
    fill_geometric(p, n, 21);
    uint32_t h[256];
    ckpt_hist(p, n, h);
    ckpt_huf_code code;
    ck_assert_int_eq(ckpt_huf_build(h, &code), 0);
    uint8_t *st = xmalloc(code.size + CKPT_HUF_SLACK);
    *sn = ckpt_huf_encode(&code, p, n, st);
    *orig = p;
    return st;
}

/* Damage to a stream of n symbols: n below 16384 takes the decoder's
 * one-symbol-at-a-time path, above it the multi-symbol table. */
static void huf_damage(size_t n)
{
    ckpt_huf_dtable *t = calloc(1, sizeof *t);
    size_t sn;
    uint8_t *orig, *st = sample_stream(n, &sn, &orig);
    uint8_t *bad = xmalloc(sn), *out = xmalloc(n);
    size_t fails = 0, differs = 0;
    for (size_t pos = 0; pos < sn; pos += (pos < 64 ? 1 : 37)) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(bad, st, sn);
            bad[pos] ^= (uint8_t)(1u << bit);
            int rc = ckpt_huf_decode(t, bad, sn, out, n);
            /* rc 0 with other bytes is for the frame checksum to catch;
             * some flips change nothing (padding bits, the length of a
             * trailing absent symbol) */
            fails += rc != 0;
            differs += rc == 0 && memcmp(out, orig, n) != 0;
        }
    }
    ck_assert_uint_gt(fails, 0);
    ck_assert_uint_gt(fails + differs, 0);
    /* Every truncation and every extension is refused. */
    for (size_t len = 0; len < sn; len += (len < 100 ? 1 : 97))
        ck_assert_int_eq(ckpt_huf_decode(t, st, len, out, n), -1);
    uint8_t *longer = xmalloc(sn + 1);
    memcpy(longer, st, sn);
    longer[sn] = 0;
    ck_assert_int_eq(ckpt_huf_decode(t, longer, sn + 1, out, n), -1);
    /* So is a wrong symbol count. */
    ck_assert_int_eq(ckpt_huf_decode(t, st, sn, out, n - 1), -1);
    ck_assert_int_eq(ckpt_huf_decode(t, st, sn, out, n - 100), -1);
    ck_assert_int_eq(ckpt_huf_decode(t, st, sn, out, n), 0);
    ck_assert_mem_eq(out, orig, n);
    free(longer);
    free(bad);
    free(out);
    free(st);
    free(orig);
    free(t);
}

START_TEST(test_huf_damage)
{
    huf_damage(3001);
    huf_damage(70001);
}
END_TEST

START_TEST(test_huf_garbage)
{
    ckpt_huf_dtable *t = calloc(1, sizeof *t);
    uint8_t *g = xmalloc(5000), *out = xmalloc(20000);
    for (uint64_t seed = 1; seed < 2000; seed++) {
        size_t len = (size_t)(seed * 7919 % 5000), n = (size_t)(seed * 31 % 20000);
        fill_random(g, len, seed);
        if (len > 2 && seed % 3 == 0) {   /* a plausible complete code */
            g[0] = 0;
            g[1] = 1;                  /* two symbols of 1 bit */
            g[2] = 0x11;
        }
        (void)ckpt_huf_decode(t, g, len, out, n);
    }
    /* An incomplete code (Kraft sum below 1) is refused. */
    uint8_t inc[40] = { 0, 2, 0x21, 0x00 };   /* lengths 1, 2, 0 */
    ck_assert_int_eq(ckpt_huf_decode(t, inc, sizeof inc, out, 10), -1);
    /* A code length above 11 is refused. */
    uint8_t big[40] = { 0, 1, 0xC1 };
    ck_assert_int_eq(ckpt_huf_decode(t, big, sizeof big, out, 10), -1);
    /* Stream sizes beyond the input are refused. */
    uint8_t jump[40] = { 0, 1, 0x11, 0xFF, 0xFF, 0xFF, 0x7F };
    ck_assert_int_eq(ckpt_huf_decode(t, jump, sizeof jump, out, 10), -1);
    free(g);
    free(out);
    free(t);
}
END_TEST

static Suite *bytegroup_suite(void)
{
    Suite *s = suite_create("bytegroup");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_split_merge_lengths);
    tcase_add_test(tc, test_split_merge_large);
    tcase_add_test(tc, test_float_planes);
    tcase_add_test(tc, test_f64_exponent_rebias);
    tcase_add_test(tc, test_pack_round_trip);
    tcase_add_test(tc, test_pack_drops_high_bits);
    tcase_add_test(tc, test_max);
    tcase_add_test(tc, test_hist);
    tcase_add_test(tc, test_huf_round_trips);
    tcase_add_test(tc, test_huf_table_reuse);
    tcase_add_test(tc, test_huf_single_symbol);
    tcase_add_test(tc, test_huf_length_limit);
    tcase_add_test(tc, test_huf_near_entropy);
    tcase_add_test(tc, test_huf_damage);
    tcase_add_test(tc, test_huf_garbage);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return unit_run(bytegroup_suite());
}
