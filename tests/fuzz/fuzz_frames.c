/*
 * fuzz_frames.c - libFuzzer target for the frame decoders: every codec's
 * decoder (zstd, the byte-grouped frames' header, plane table, stored,
 * constant, packed, Huffman and zstd planes) on arbitrary frame bytes, the
 * Huffman stream decoder alone, a delta checkpoint's xor frames (header,
 * inner codec, XOR with a base frame; dense and sparse: the bitmap, the
 * block count, the packed blocks), and a round trip (encode, decode,
 * compare) of arbitrary raw bytes through every codec and as an xor frame
 * (dense, or with most of its 64-byte blocks equal to the base's).
 *
 * Input: byte 0 picks the mode and codec, bytes 1-3 the raw size (at most
 * 2^20, so a frame decodes into a bounded buffer, as the reader's frames
 * of at most the frame size do), the rest is the frame (or raw bytes).
 * A decoder may refuse (that is the point); it must never read or write
 * out of bounds, leak, hang, or succeed with a different length.
 *
 * With CKPT_FUZZ_WRITE_SEEDS=DIR it writes real frames of every codec
 * (floats drawn as a model's weights are, integers, bytes) into DIR and
 * exits.  Built and run by tests/fuzz/run_fuzz.sh.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/error.h"
#include "codec/huff.h"
#include "codec/xorframe.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RAW ((size_t)1 << 20)
#define NCODEC 9        /* ids 0..8 */
#define XOR_SEL (NCODEC + 1)   /* selector of an xor frame (id 10) */

static ckpt_codec_ctx *ctx;
static ckpt_huf_dtable dtable;
static uint8_t *raw, *enc, *back, *basef, *want;

static size_t itemsize_of(int codec)
{
    static const size_t isz[NCODEC] = { 1, 1, 2, 2, 4, 8, 2, 4, 8 };
    return isz[codec];
}

/* One seed: selector (0: decode), raw size, the encoded frame. */
static void write_seed(const char *dir, int codec, const uint8_t *src,
                       size_t n, int idx)
{
    size_t out_n;
    int used;
    ckpt_error err = { 0 };
    if (ckpt_codec_encode(ctx, codec, 1, itemsize_of(codec), src, n, enc,
                          ckpt_codec_bound(n), &out_n, &used, &err))
        return;
    const uint8_t *frame = used == CKPT_CODEC_RAW ? src : enc;
    char path[4200];
    snprintf(path, sizeof path, "%s/frame-%d-%d", dir, codec, idx);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    uint8_t head[4] = { (uint8_t)(used * 2), (uint8_t)n, (uint8_t)(n >> 8),
                        (uint8_t)(n >> 16) };
    fwrite(head, 1, 4, f);
    fwrite(frame, 1, out_n, f);
    fclose(f);
}

/* Values as a model's weights or optimizer state have them. */
static void fill(uint8_t *p, size_t n, int codec, uint64_t seed)
{
    for (size_t i = 0; i < n / 4; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(seed >> 11) / 9007199254740992.0;
        float x = (float)(sqrt(-2.0 * log(u + 1e-12)) * 0.02 *
                          (i % 2 ? 1 : -1));
        uint32_t b;
        memcpy(&b, &x, 4);
        if (codec == 6 || codec == 7 || codec == 8)
            b = (uint32_t)(seed >> 40) & 0x3ff;   /* small integers */
        memcpy(p + 4 * i, &b, 4);
    }
}

/* The base frame an xor frame is applied to: a fixed pattern. */
static void fill_base(void)
{
    for (size_t i = 0; i < MAX_RAW; i++)
        basef[i] = (uint8_t)(i * 131 + (i >> 9));
}

/* A seed xor frame: the base with every 7th byte changed in one 64-byte
 * block of `period` (1: every block, a dense frame; more: a sparse one),
 * as bgf32. */
static void write_xor_seed(const char *dir, size_t n, size_t period)
{
    for (size_t i = 0; i < n; i++)    /* the XOR itself */
        raw[i] = (uint8_t)(i % 7 || (i / 64) % period ? 0 : 0x5a);
    size_t out_n;
    ckpt_error err = { 0 };
    if (ckpt_xor_encode(ctx, 4, 1, 4, raw, n, enc,
                        CKPT_XOR_HEAD + ckpt_codec_bound(n), &out_n, &err))
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/xor-%zu-%zu", dir, n, period);
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    uint8_t head[4] = { (uint8_t)(XOR_SEL * 2), (uint8_t)n, (uint8_t)(n >> 8),
                        (uint8_t)(n >> 16) };
    fwrite(head, 1, 4, f);
    fwrite(enc, 1, out_n, f);
    fclose(f);
}

static void write_seeds(const char *dir)
{
    write_xor_seed(dir, 4096, 1);
    write_xor_seed(dir, 65536, 1);
    write_xor_seed(dir, 4096, 5);
    write_xor_seed(dir, 65536 + 36, 9);
    static const size_t sizes[] = { 4096, 65536, 4093, 8 };
    for (int codec = 0; codec < NCODEC; codec++)
        for (int k = 0; k < 4; k++) {
            size_t n = sizes[k] / itemsize_of(codec) * itemsize_of(codec);
            fill(raw, n + 4, codec, (uint64_t)(codec * 31 + k));
            write_seed(dir, codec, raw, n, k);
        }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ctx = ckpt_codec_ctx_new();
    raw = malloc(MAX_RAW + 8);
    enc = malloc(ckpt_codec_bound(MAX_RAW) + 64);
    back = malloc(MAX_RAW + 8);
    basef = malloc(MAX_RAW + 8);
    want = malloc(MAX_RAW + 8);
    if (!ctx || !raw || !enc || !back || !basef || !want)
        abort();
    fill_base();
    const char *seeds = getenv("CKPT_FUZZ_WRITE_SEEDS");
    if (seeds) {
        write_seeds(seeds);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    int mode = data[0] % 2;
    /* NCODEC: an id with no decoder of its own (ref); XOR_SEL: xor */
    int codec = (data[0] / 2) % (XOR_SEL + 1);
    size_t n = ((size_t)data[1] | (size_t)data[2] << 8 |
                (size_t)data[3] << 16) % (MAX_RAW + 1);
    const uint8_t *in = data + 4;
    size_t in_n = size - 4;
    ckpt_error err = { 0 };
    if (mode == 0) {
        /* arbitrary bytes as a frame of `codec` decoding to n bytes; the
         * buffer is exactly n bytes, so ASan sees any overrun */
        uint8_t *dst = malloc(n ? n : 1);
        if (!dst)
            return 0;
        int rc = codec == XOR_SEL
                 ? ckpt_xor_decode(ctx, in, in_n, basef, dst, n, &err)
                 : ckpt_codec_decode(ctx, codec, in, in_n, dst, n, &err);
        if (rc == 0 && codec == NCODEC)
            abort();   /* an unknown codec decoded */
        free(dst);
        if (codec == 2 && n <= in_n) {
            uint8_t *h = malloc(n ? n : 1);
            if (h) {
                (void)ckpt_huf_decode(&dtable, in, in_n, h, n);
                free(h);
            }
        }
        return 0;
    }
    /* round trip of the input as raw bytes */
    if (codec == NCODEC)
        return 0;
    if (codec == XOR_SEL) {
        /* the input as a new frame over the base: XOR, code, decode;
         * sparse: the base's bytes kept in all but one block of `sparse` */
        size_t rn = in_n < MAX_RAW ? in_n : MAX_RAW, out_n;
        int inner = (int)(n % NCODEC);
        size_t sparse = n / NCODEC % 8;
        ckpt_xor_bytes(raw, in, basef, rn);
        for (size_t i = 0; sparse > 1 && i < rn; i++)
            if ((i / 64) % sparse)
                raw[i] = 0;
        ckpt_xor_bytes(want, raw, basef, rn);
        if (ckpt_xor_encode(ctx, inner, 1, itemsize_of(inner), raw, rn, enc,
                            CKPT_XOR_HEAD + ckpt_codec_bound(rn), &out_n,
                            &err))
            abort();
        if (ckpt_xor_decode(ctx, enc, out_n, basef, back, rn, &err) != 0 ||
            memcmp(back, want, rn) != 0)
            abort();
        memcpy(back, basef, rn);   /* applied over the base in place */
        if (ckpt_xor_apply(ctx, enc, out_n, back, raw, rn, &err) != 0 ||
            memcmp(back, want, rn) != 0)
            abort();
        return 0;
    }
    size_t isz = itemsize_of(codec), rn = in_n < MAX_RAW ? in_n : MAX_RAW;
    size_t out_n;
    int used;
    if (ckpt_codec_encode(ctx, codec, 1 + (int)(n % 3), isz, in, rn, enc,
                          ckpt_codec_bound(rn), &out_n, &used, &err))
        abort();   /* encoding never fails on any bytes */
    const uint8_t *frame = used == CKPT_CODEC_RAW ? in : enc;
    if (ckpt_codec_decode(ctx, used, frame, out_n, back, rn, &err) != 0 ||
        memcmp(back, in, rn) != 0)
        abort();   /* what was encoded must decode to the same bytes */
    return 0;
}
