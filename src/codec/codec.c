/*
 * codec.c - encoding and decoding one frame (raw, zstd, or byte-grouped)
 * and the XXH3-64 checksum of its raw bytes (see codec.h).
 *
 * Choices made here:
 *  - A zstd frame is one standard zstd frame with its content size in the
 *    header and no zstd checksum (the index carries an XXH3-64 per frame).
 *  - zstd compresses into a per-context scratch buffer limited to the
 *    largest size worth keeping (n - ceil(n/32)); when zstd cannot fit the
 *    frame there, the frame falls back to raw and the caller's dst is left
 *    untouched.
 *  - Decoding accepts exactly one zstd frame whose header records raw_n as
 *    its content size, filling exactly raw_n bytes; anything else is -EIO.
 *  - Levels: a codec name alone means level 1 (the library's default, as in
 *    ckpt_write_opts_init).  Encoding accepts -7..22; 0 is zstd's own
 *    default level.
 *  - Byte-grouped frames (ids 2-8, layout in docs/FORMAT.md): a header,
 *    then one stream per byte plane, each stored, constant, bit-packed,
 *    Huffman-coded (huff.c) or zstd-coded.  A plane is coded only when that
 *    saves 1/32 of it, and with a slower method only when that saves
 *    another 1/32 (stored, constant and packed planes decode at memory
 *    speed, Huffman at a few GB/s, zstd slower).  zstd is tried only for
 *    integer planes and for planes where one byte value fills half the
 *    plane (Huffman spends at least a bit per byte there).  Frames are
 *    written straight into dst.  Before splitting a
 *    float frame, a sample of it is split and its order-0 entropy estimated:
 *    when even that cannot save 1/32 of the frame, the frame goes raw at
 *    once, so incompressible data costs almost nothing to encode.  A frame
 *    of one repeated element (zeros) is found first, with one memcmp that
 *    stops at once for other data, and made of constant planes, which
 *    decode by filling.
 */
#include "codec/codec.h"
#include "common/le.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "codec/bytegroup.h"
#include "common/error.h"
#include "codec/huff.h"
#include "common/xxh.h"

#define CODEC_MIN_LEVEL CKPT_MIN_LEVEL
#define CODEC_MAX_LEVEL CKPT_MAX_LEVEL
#define CODEC_DEFAULT_LEVEL 1

/* Byte-grouped frames: header and plane methods (docs/FORMAT.md). */
#define BG_VERSION 1
#define BG_HEAD 4                 /* version, layout, element size, planes */
#define BG_PLANE_HEAD 5           /* method, u32 stored length */
#define BG_STORED 0
#define BG_CONST 1
#define BG_HUFF 2
#define BG_ZSTD 3
#define BG_BITS 4
/* Room past a plane's end that the Huffman encoder may scribble on. */
#define BG_SLACK CKPT_HUF_SLACK
/* Sampling before a float frame is split: blocks x elements. */
#define SAMPLE_BLOCKS 16
#define SAMPLE_ELEMS 256

struct ckpt_codec_ctx {
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    unsigned char *scratch;   /* compressed output before it is kept */
    size_t scratch_cap;
    unsigned char *planes;    /* byte planes being coded or decoded */
    size_t planes_cap;
    ckpt_huf_dtable *huf;     /* Huffman decoding tables */
};

typedef struct codec_desc {
    const char *name;
    int layout;               /* ckpt_bg_layout, 0 for raw and zstd */
} codec_desc;

/* Indexed by codec id. */
static const codec_desc CODECS[] = {
    [CKPT_CODEC_RAW] = { "raw", 0 },
    [CKPT_CODEC_ZSTD] = { "zstd", 0 },
    [CKPT_CODEC_BG_BF16] = { "bgbf16", CKPT_BG_BF16 },
    [CKPT_CODEC_BG_F16] = { "bgf16", CKPT_BG_F16 },
    [CKPT_CODEC_BG_F32] = { "bgf32", CKPT_BG_F32 },
    [CKPT_CODEC_BG_F64] = { "bgf64", CKPT_BG_F64 },
    [CKPT_CODEC_BG_2] = { "bg2", CKPT_BG_X2 },
    [CKPT_CODEC_BG_4] = { "bg4", CKPT_BG_X4 },
    [CKPT_CODEC_BG_8] = { "bg8", CKPT_BG_X8 },
};
#define NCODECS ((int)(sizeof CODECS / sizeof CODECS[0]))

ckpt_codec_ctx *ckpt_codec_ctx_new(void)
{
    ckpt_codec_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cctx = ZSTD_createCCtx();
    c->dctx = ZSTD_createDCtx();
    c->huf = calloc(1, sizeof *c->huf);
    if (!c->cctx || !c->dctx || !c->huf) {
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
    free(c->planes);
    free(c->huf);
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
    return codec >= 0 && codec < NCODECS;
}

const char *ckpt_codec_name(int codec)
{
    if (codec == CKPT_CODEC_AUTO)
        return "auto";
    if (codec == CKPT_CODEC_REF)
        return "ref";
    if (codec == CKPT_CODEC_XOR)
        return "xor";
    return ckpt_codec_known(codec) ? CODECS[codec].name : "unknown";
}

static int layout_of(int codec)
{
    return ckpt_codec_known(codec) ? CODECS[codec].layout : 0;
}

int ckpt_codec_resolve(int codec, ckpt_dtype dt)
{
    if (codec != CKPT_CODEC_AUTO)
        return codec;
    switch (dt) {
    case CKPT_BF16: return CKPT_CODEC_BG_BF16;
    case CKPT_F16: return CKPT_CODEC_BG_F16;
    case CKPT_F32: return CKPT_CODEC_BG_F32;
    case CKPT_F64: return CKPT_CODEC_BG_F64;
    /* A complex element is two floats side by side: group the floats. */
    case CKPT_C32: return CKPT_CODEC_BG_F16;
    case CKPT_C64: return CKPT_CODEC_BG_F32;
    case CKPT_C128: return CKPT_CODEC_BG_F64;
    case CKPT_I16: case CKPT_U16: return CKPT_CODEC_BG_2;
    case CKPT_I32: case CKPT_U32: return CKPT_CODEC_BG_4;
    case CKPT_I64: case CKPT_U64: return CKPT_CODEC_BG_8;
    default: return CKPT_CODEC_ZSTD;
    }
}

/* ------------------------------------------------------------ parsing */

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
                    "invalid codec \"%.200s\": expected auto, raw, zstd, "
                    "bgbf16, bgf16, bgf32, bgf64, bg2, bg4 or bg8, all but "
                    "raw with an optional :LEVEL (zstd level 1..22, or "
                    "-7..-1 for fast modes)", s);
}

/* The codec named by s[0..n): a codec id, CKPT_CODEC_AUTO, or -2. */
static int codec_by_name(const char *s, size_t n)
{
    if (n == 4 && strncmp(s, "auto", 4) == 0)
        return CKPT_CODEC_AUTO;
    for (int c = 0; c < NCODECS; c++)
        if (strlen(CODECS[c].name) == n && strncmp(s, CODECS[c].name, n) == 0)
            return c;
    return -2;
}

int ckpt_codec_parse(const char *s, int *codec, int *level, ckpt_error *err)
{
    if (!s)
        return ckpt_err(err, -EINVAL, "invalid codec: no text given");
    const char *colon = strchr(s, ':');
    size_t n = colon ? (size_t)(colon - s) : strlen(s);
    int cd = codec_by_name(s, n), lv = CODEC_DEFAULT_LEVEL;
    if (cd == -2 || (cd == CKPT_CODEC_RAW && colon))
        return parse_fail(s, err);
    if (cd == CKPT_CODEC_RAW)
        lv = 0;
    if (colon && (parse_level(colon + 1, &lv) != 0 || lv == 0 ||
                  lv < CODEC_MIN_LEVEL || lv > CODEC_MAX_LEVEL))
        return parse_fail(s, err);
    if (codec)
        *codec = cd;
    if (level)
        *level = lv;
    return 0;
}

/* ------------------------------------------------------------ zstd */

/* Makes *buf hold at least n bytes. */
static int reserve(unsigned char **buf, size_t *cap, size_t n,
                   ckpt_error *err)
{
    if (n <= *cap)
        return 0;
    unsigned char *p = realloc(*buf, n);
    if (!p)
        return ckpt_err(err, -ENOMEM,
                        "out of memory for a %zu-byte codec buffer", n);
    *buf = p;
    *cap = n;
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
    *out_n = 0;
    if (limit == 0)
        return 0;
    size_t r = ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only);
    if (ZSTD_isError(r))
        return ckpt_err(err, -EIO, "zstd: cannot reset context: %s",
                        ZSTD_getErrorName(r));
    if ((rc = zstd_set(c->cctx, ZSTD_c_compressionLevel, level, err)) ||
        (rc = zstd_set(c->cctx, ZSTD_c_contentSizeFlag, 1, err)) ||
        (rc = zstd_set(c->cctx, ZSTD_c_checksumFlag, 0, err)))
        return rc;
    if ((rc = reserve(&c->scratch, &c->scratch_cap, limit, err)) != 0)
        return rc;
    r = ZSTD_compress2(c->cctx, c->scratch, limit, src, n);
    if (ZSTD_isError(r)) {
        if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall)
            return 0;          /* not worth keeping */
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

/* The largest stored size worth keeping for n raw bytes (saves 1/32). */
static size_t keep_limit(size_t n)
{
    return n - (n + 31) / 32;
}

static int encode_zstd(ckpt_codec_ctx *c, int level, const void *src,
                       size_t n, void *dst, size_t cap, size_t *out_n,
                       int *out_codec, ckpt_error *err)
{
    size_t zn = 0;
    int rc = zstd_compress_limited(c, level, src, n, keep_limit(n), &zn, err);
    if (rc)
        return rc;
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

/* ------------------------------------------------------------ planes */

static int is_float_layout(int layout)
{
    return layout == CKPT_BG_BF16 || layout == CKPT_BG_F16 ||
           layout == CKPT_BG_F32 || layout == CKPT_BG_F64;
}

/* How one plane is coded: method and stored length. */
typedef struct plane_code {
    int method;
    size_t len;
} plane_code;

/* Tries zstd on a plane: it must save 1/32 of the plane over the method
 * in *pc.  On success the frame is in c->scratch and *pc says so. */
static int plane_try_zstd(ckpt_codec_ctx *c, int level, const uint8_t *p,
                          size_t n, plane_code *pc, ckpt_error *err)
{
    size_t zn = 0, gain = (n + 31) / 32;
    if (pc->len <= gain)
        return 0;
    int rc = zstd_compress_limited(c, level, p, n, pc->len - gain, &zn, err);
    if (rc == 0 && zn > 0)
        *pc = (plane_code){ BG_ZSTD, zn };
    return rc;
}

/* Bits needed by the largest byte counted in hist (1..8). */
static unsigned width_of(const uint32_t hist[256])
{
    int hi = 255;
    while (hi > 0 && !hist[hi])
        hi--;
    unsigned k = 1;
    while (k < 8 && (hi >> k))
        k++;
    return k;
}

/* Huffman codes cost at least the entropy: above this many bits per byte
 * they cannot save 1/32 of a stored plane (7.75, and a margin for the
 * entropy's approximation). */
#define HUF_HOPELESS_BITS 7.76

/* The fastest method that saves 1/32 of a plane (bit packing, else
 * storing), replaced by Huffman coding when that saves another 1/32. */
static void choose_fast(const uint32_t hist[256], size_t n,
                        ckpt_huf_code *code, plane_code *pc)
{
    unsigned k = width_of(hist);
    *pc = (plane_code){ BG_STORED, n };
    if (k < 8 && 1 + ckpt_bg_packed_size(n, k) <= keep_limit(n))
        *pc = (plane_code){ BG_BITS, 1 + ckpt_bg_packed_size(n, k) };
    if (k == 8 && ckpt_hist_entropy(hist, n) > HUF_HOPELESS_BITS)
        return;
    if (ckpt_huf_build(hist, code) == 0 &&
        code->size + (n + 31) / 32 <= pc->len)
        *pc = (plane_code){ BG_HUFF, code->size };
}

/* Writes the plane with the method in *pc. */
static void write_plane(ckpt_codec_ctx *c, const ckpt_huf_code *code,
                        const uint32_t hist[256], const uint8_t *p, size_t n,
                        unsigned char *out, plane_code *pc)
{
    switch (pc->method) {
    case BG_HUFF:
        pc->len = ckpt_huf_encode(code, p, n, out);
        break;
    case BG_BITS:
        out[0] = (unsigned char)width_of(hist);
        ckpt_bg_pack(p, n, out[0], out + 1);
        break;
    case BG_ZSTD:
        memcpy(out, c->scratch, pc->len);
        break;
    default:
        memcpy(out, p, pc->len);
        break;
    }
}

/* 1 when p[0..n) is one byte repeated (stops at the first difference). */
static int is_constant(const uint8_t *p, size_t n)
{
    return n > 0 && memcmp(p, p + 1, n - 1) == 0;
}

/* Codes plane p[0..n) at out, using at most `budget` bytes (out has
 * BG_SLACK bytes more).  Sets *pc, or pc->len = SIZE_MAX when the plane
 * does not fit the budget. */
static int encode_plane(ckpt_codec_ctx *c, int level, int try_zstd,
                        const uint8_t *p, size_t n, unsigned char *out,
                        size_t budget, plane_code *pc, ckpt_error *err)
{
    if (is_constant(p, n) && budget >= 1) {
        *pc = (plane_code){ BG_CONST, 1 };
        out[0] = p[0];
        return 0;
    }
    uint32_t hist[256];
    ckpt_hist(p, n, hist);
    uint32_t top = 0;
    for (int s = 0; s < 256; s++)
        top = hist[s] > top ? hist[s] : top;
    ckpt_huf_code code;
    choose_fast(hist, n, &code, pc);
    if (try_zstd || top > n / 2) {
        int rc = plane_try_zstd(c, level, p, n, pc, err);
        if (rc)
            return rc;
    }
    if (pc->len > budget) {
        pc->len = SIZE_MAX;
        return 0;
    }
    write_plane(c, &code, hist, p, n, out, pc);
    return 0;
}

/* A sample's entropy this close to a plane's bit width means Huffman
 * coding cannot save 1/32 of the plane over bit packing. */
#define SAMPLE_PACK_MARGIN 0.2

/* Bit-packs a plane without a histogram when its sampled entropy says
 * that packing is what encode_plane would choose.  Returns 1 when it did
 * (*pc set; pc->len SIZE_MAX when it does not fit the budget). */
static int packs_plainly(const uint8_t *p, size_t n, double entropy,
                         unsigned char *out, size_t budget, plane_code *pc)
{
    if (entropy < 0)
        return 0;
    unsigned k = 1, top = ckpt_bg_max(p, n);
    while (k < 8 && (top >> k))
        k++;
    size_t len = 1 + ckpt_bg_packed_size(n, k);
    if (k == 8 || entropy < k - SAMPLE_PACK_MARGIN || len > keep_limit(n))
        return 0;
    *pc = (plane_code){ BG_BITS, len > budget ? SIZE_MAX : len };
    if (len <= budget) {
        out[0] = (unsigned char)k;
        ckpt_bg_pack(p, n, k, out + 1);
    }
    return 1;
}

/* What a sample of a float frame says: whether the frame cannot save 1/32
 * with order-0 coding of its planes, which planes look incompressible (bit
 * k of `stored`: they are stored without a full histogram), and each
 * plane's estimated entropy in bits per byte (-1 when not sampled). */
typedef struct sample_verdict {
    int hopeless;
    unsigned stored;
    double entropy[CKPT_BG_MAX_PLANES];
} sample_verdict;

/* A sampled plane whose order-0 entropy is at least this many bits per
 * byte cannot be packed (it uses more than 128 values) and Huffman coding
 * would save less than 1/32 of it. */
#define SAMPLE_STORED_BITS 7.8

/* Samples SAMPLE_BLOCKS runs of SAMPLE_ELEMS elements, evenly spread over
 * the n elements at src, and estimates each plane's entropy.  Frames too
 * small to sample get an empty verdict. */
static sample_verdict sample_frame(ckpt_codec_ctx *c, int layout,
                                   const uint8_t *src, size_t n)
{
    sample_verdict v = { 0, 0, { 0 } };
    for (int k = 0; k < CKPT_BG_MAX_PLANES; k++)
        v.entropy[k] = -1;
    size_t es = ckpt_bg_esize(layout), m = SAMPLE_BLOCKS * SAMPLE_ELEMS;
    int np = ckpt_bg_nplanes(layout);
    if (!is_float_layout(layout) || n < 8 * m ||
        reserve(&c->scratch, &c->scratch_cap, m * (size_t)np, NULL))
        return v;
    uint8_t *pl[CKPT_BG_MAX_PLANES];
    for (int k = 0; k < np; k++)
        pl[k] = c->scratch + (size_t)k * m;
    for (size_t b = 0; b < SAMPLE_BLOCKS; b++) {
        uint8_t *bp[CKPT_BG_MAX_PLANES];
        for (int k = 0; k < np; k++)
            bp[k] = pl[k] + b * SAMPLE_ELEMS;
        size_t at = b * (n - SAMPLE_ELEMS) / (SAMPLE_BLOCKS - 1);
        ckpt_bg_split(layout, src + at * es, SAMPLE_ELEMS, bp);
    }
    double bits = 0;
    for (int k = 0; k < np; k++) {
        uint32_t hist[256];
        ckpt_hist(pl[k], m, hist);
        double h = ckpt_hist_entropy(hist, m);
        v.entropy[k] = h;
        if (h >= SAMPLE_STORED_BITS)
            v.stored |= 1u << k;
        bits += h;
    }
    /* Sample entropies run low; keep a margin of 1/64 on the estimate. */
    v.hopeless = bits * (1.0 + 1.0 / 64) / 8.0 >= (double)es * 31.0 / 32.0;
    return v;
}

static void put_plane_head(unsigned char *dst, int k, const plane_code *pc)
{
    unsigned char *h = dst + BG_HEAD + (size_t)k * BG_PLANE_HEAD;
    h[0] = (unsigned char)pc->method;
    ckpt_put_le32(h + 1, (uint32_t)pc->len);
}

/* The planes of one frame being encoded. */
typedef struct frame_planes {
    int layout, np;
    size_t n;                        /* elements */
    uint8_t *pl[CKPT_BG_MAX_PLANES];
    unsigned stored;                 /* planes to store without trying */
    double entropy[CKPT_BG_MAX_PLANES];  /* sampled bits/byte, or -1 */
    int in_place;                    /* planes 0..in_place-1 were split
                                        straight to their place in dst */
} frame_planes;

/* Codes every plane after the header; returns the end offset in *pos, or
 * SIZE_MAX when the frame does not fit `limit`. */
static int encode_planes(ckpt_codec_ctx *c, int level, const frame_planes *f,
                         unsigned char *dst, size_t limit, size_t *pos,
                         ckpt_error *err)
{
    int try_zstd = !is_float_layout(f->layout);
    for (int k = 0; k < f->np; k++) {
        plane_code pc = { BG_STORED, f->n };
        unsigned char *out = dst + *pos;
        size_t budget = limit - *pos;
        int rc = 0;
        if (k < f->in_place)
            ;                        /* split straight to its place */
        else if ((f->stored & (1u << k)) && f->n > budget)
            pc.len = SIZE_MAX;
        else if (f->stored & (1u << k))
            memcpy(out, f->pl[k], f->n);
        else if (!packs_plainly(f->pl[k], f->n, f->entropy[k], out, budget,
                                &pc))
            rc = encode_plane(c, level, try_zstd, f->pl[k], f->n, out,
                              budget, &pc, err);
        if (rc)
            return rc;
        if (pc.len == SIZE_MAX) {
            *pos = SIZE_MAX;
            return 0;
        }
        put_plane_head(dst, k, &pc);
        *pos += pc.len;
    }
    return 0;
}

/* Splits the frame: the leading planes that will be stored go straight
 * to their place in dst (when they fit), the others to c->planes. */
static int split_frame(ckpt_codec_ctx *c, const uint8_t *src, frame_planes *f,
                       unsigned char *dst, size_t head, size_t limit,
                       ckpt_error *err)
{
    int rc = reserve(&c->planes, &c->planes_cap, f->n * (size_t)f->np, err);
    if (rc)
        return rc;
    f->in_place = 0;
    while (f->in_place < f->np && (f->stored & (1u << f->in_place)) &&
           head + (size_t)(f->in_place + 1) * f->n <= limit)
        f->in_place++;
    for (int k = 0; k < f->np; k++)
        f->pl[k] = k < f->in_place ? dst + head + (size_t)k * f->n
                                   : c->planes + (size_t)k * f->n;
    ckpt_bg_split(f->layout, src, f->n, f->pl);
    return 0;
}

/* 1 when the n elements of es bytes at src are all the same (the check
 * stops at the first difference, at once for real data). */
static int same_elements(const uint8_t *src, size_t n, size_t es)
{
    return n < 2 || memcmp(src, src + es, (n - 1) * es) == 0;
}

/* Codes a frame of one repeated element: every plane constant.  Returns
 * the end offset after the planes. */
static size_t encode_constant(const frame_planes *f, const uint8_t *src,
                              unsigned char *dst, size_t head)
{
    uint8_t b[CKPT_BG_MAX_PLANES], *pl[CKPT_BG_MAX_PLANES];
    for (int k = 0; k < f->np; k++)
        pl[k] = &b[k];
    ckpt_bg_split(f->layout, src, 1, pl);
    for (int k = 0; k < f->np; k++) {
        plane_code pc = { BG_CONST, 1 };
        put_plane_head(dst, k, &pc);
        dst[head + (size_t)k] = b[k];
    }
    return head + (size_t)f->np;
}

static int encode_bg(ckpt_codec_ctx *c, int codec, int level,
                     const uint8_t *src, size_t n, unsigned char *dst,
                     size_t cap, size_t *out_n, int *out_codec,
                     ckpt_error *err)
{
    frame_planes f = { .layout = layout_of(codec) };
    f.np = ckpt_bg_nplanes(f.layout);
    size_t es = ckpt_bg_esize(f.layout), tail = n % es;
    size_t head = BG_HEAD + (size_t)f.np * BG_PLANE_HEAD, limit = keep_limit(n);
    f.n = n / es;
    store_raw(n, out_n, out_codec);
    if (f.n == 0 || head + tail + (size_t)f.np > limit)
        return 0;
    if (!dst || cap < limit + BG_SLACK)
        return ckpt_err(err, -EINVAL,
                        "encode: destination of %zu bytes is too small (need "
                        "ckpt_codec_bound(%zu))", cap, n);
    size_t pos = head;
    if (same_elements(src, f.n, es)) {
        pos = encode_constant(&f, src, dst, head);
    } else {
        sample_verdict v = sample_frame(c, f.layout, src, f.n);
        if (v.hopeless)
            return 0;
        f.stored = v.stored;
        memcpy(f.entropy, v.entropy, sizeof f.entropy);
        int rc = split_frame(c, src, &f, dst, head, limit - tail, err);
        if (rc == 0)
            rc = encode_planes(c, level, &f, dst, limit - tail, &pos, err);
        if (rc || pos == SIZE_MAX)
            return rc;
    }
    dst[0] = BG_VERSION;
    dst[1] = (unsigned char)f.layout;
    dst[2] = (unsigned char)es;
    dst[3] = (unsigned char)f.np;
    memcpy(dst + pos, src + f.n * es, tail);
    *out_n = pos + tail;
    *out_codec = codec;
    return 0;
}

int ckpt_codec_encode(ckpt_codec_ctx *c, int codec, int level,
                      size_t itemsize, const void *src, size_t n, void *dst,
                      size_t cap, size_t *out_n, int *out_codec,
                      ckpt_error *err)
{
    (void)itemsize;
    if (!out_n || !out_codec || (!src && n))
        return ckpt_err(err, -EINVAL, "encode: missing buffer or output");
    if (codec == CKPT_CODEC_RAW) {
        store_raw(n, out_n, out_codec);
        return 0;
    }
    if (codec == CKPT_CODEC_AUTO)
        return ckpt_err(err, -EINVAL, "encode: codec auto must be resolved "
                        "for the tensor's dtype first");
    if (!ckpt_codec_known(codec))
        return ckpt_err(err, -ENOTSUP, "encode: unknown codec id %d", codec);
    if (!c)
        return ckpt_err(err, -EINVAL, "encode: no codec context");
    if (level < CODEC_MIN_LEVEL || level > CODEC_MAX_LEVEL)
        return ckpt_err(err, -EINVAL,
                        "encode: zstd level %d outside %d..%d", level,
                        CODEC_MIN_LEVEL, CODEC_MAX_LEVEL);
    if (codec == CKPT_CODEC_ZSTD)
        return encode_zstd(c, level, src, n, dst, cap, out_n, out_codec, err);
    return encode_bg(c, codec, level, src, n, dst, cap, out_n, out_codec,
                     err);
}

/* ------------------------------------------------------------ decoding */

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
    if (stored_n < 4 || ckpt_get_le32(p) != ZSTD_MAGICNUMBER)
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

/* Checks a byte-grouped frame's header against its codec and size. */
static int bg_check_head(int codec, const unsigned char *src, size_t sn,
                         size_t raw_n, ckpt_error *err)
{
    int layout = layout_of(codec), np = ckpt_bg_nplanes(layout);
    size_t es = ckpt_bg_esize(layout);
    if (raw_n < es)           /* writers store such frames raw */
        return ckpt_err(err, -EIO, "corrupt %s frame: %zu raw bytes is less "
                        "than one element", CODECS[codec].name, raw_n);
    if (sn < BG_HEAD + (size_t)np * BG_PLANE_HEAD + raw_n % es)
        return ckpt_err(err, -EIO, "corrupt %s frame: %zu bytes is too short "
                        "for its header", CODECS[codec].name, sn);
    if (src[0] != BG_VERSION)
        return ckpt_err(err, -EIO, "corrupt %s frame: version %d (this "
                        "build reads version %d)", CODECS[codec].name, src[0],
                        BG_VERSION);
    if (src[1] != layout || src[2] != es || src[3] != np)
        return ckpt_err(err, -EIO, "corrupt %s frame: header says layout %d, "
                        "%d-byte elements, %d planes", CODECS[codec].name,
                        src[1], src[2], src[3]);
    return 0;
}

/* Where one plane's stream lies in a frame, and how it is coded. */
typedef struct plane_in {
    int method;
    const uint8_t *src;
    size_t len;
} plane_in;

/* 1 when a stream of len bytes can hold a plane of n bytes coded with
 * `method` (exact for the methods whose length follows from n). */
static int plane_len_ok(int method, const uint8_t *src, size_t len, size_t n)
{
    switch (method) {
    case BG_STORED: return len == n;
    case BG_CONST: return len == 1;
    case BG_HUFF: case BG_ZSTD: return 1;
    case BG_BITS:
        return len >= 1 && src[0] >= 1 && src[0] <= 7 &&
               len - 1 == ckpt_bg_packed_size(n, src[0]);
    default: return 0;
    }
}

/* Reads the plane table of a frame whose header is checked, so that the
 * planes tile the frame exactly, each with a known method. */
static int bg_read_planes(int codec, const unsigned char *src, size_t sn,
                          size_t raw_n, plane_in *pi, ckpt_error *err)
{
    int np = ckpt_bg_nplanes(layout_of(codec));
    size_t es = ckpt_bg_esize(layout_of(codec)), ne = raw_n / es;
    size_t pos = BG_HEAD + (size_t)np * BG_PLANE_HEAD, end = sn - raw_n % es;
    const char *name = CODECS[codec].name;
    for (int k = 0; k < np; k++) {
        const unsigned char *h = src + BG_HEAD + (size_t)k * BG_PLANE_HEAD;
        pi[k] = (plane_in){ h[0], src + pos, ckpt_get_le32(h + 1) };
        if (pi[k].len > end - pos)
            return ckpt_err(err, -EIO, "corrupt %s frame: plane %d says %zu "
                            "bytes, %zu are left", name, k, pi[k].len,
                            end - pos);
        if (!plane_len_ok(pi[k].method, pi[k].src, pi[k].len, ne))
            return ckpt_err(err, -EIO, "corrupt %s frame: plane %d has "
                            "method %d and %zu bytes, which cannot hold %zu "
                            "bytes", name, k, pi[k].method, pi[k].len, ne);
        pos += pi[k].len;
    }
    if (pos != end)
        return ckpt_err(err, -EIO, "corrupt %s frame: %zu bytes after its "
                        "planes, %zu expected", name, sn - pos,
                        raw_n % es);
    return 0;
}

/* Decodes plane p (n bytes) into buf, or points *out into the frame for a
 * stored plane.  Returns 0 or -1 (corrupt). */
static int decode_plane(ckpt_codec_ctx *c, const plane_in *p, uint8_t *buf,
                        size_t n, const uint8_t **out)
{
    ckpt_error ignored;
    *out = buf;
    switch (p->method) {
    case BG_STORED:
        *out = p->src;
        return 0;
    case BG_CONST:
        memset(buf, p->src[0], n);
        return 0;
    case BG_HUFF:
        return ckpt_huf_decode(c->huf, p->src, p->len, buf, n);
    case BG_ZSTD:
        return decode_zstd(c, p->src, p->len, buf, n, &ignored) ? -1 : 0;
    default:                  /* BG_BITS, checked by plane_len_ok */
        ckpt_bg_unpack(p->src + 1, n, p->src[0], buf);
        return 0;
    }
}

/* Fills n elements at dst with the one element that constant planes
 * make. */
static void decode_constant(int layout, const plane_in *pi, size_t n,
                            unsigned char *dst)
{
    size_t es = ckpt_bg_esize(layout);
    const uint8_t *pl[CKPT_BG_MAX_PLANES];
    for (int k = 0; k < ckpt_bg_nplanes(layout); k++)
        pl[k] = pi[k].src;
    ckpt_bg_merge(layout, pl, 1, dst);
    if (same_elements(dst, es, 1)) {
        memset(dst, dst[0], n * es);
        return;
    }
    for (size_t have = 1; have < n; have *= 2)
        memcpy(dst + have * es, dst, (have < n - have ? have : n - have) * es);
}

static int all_constant(const plane_in *pi, int np)
{
    for (int k = 0; k < np; k++)
        if (pi[k].method != BG_CONST)
            return 0;
    return 1;
}

static int decode_bg(ckpt_codec_ctx *c, int codec, const unsigned char *src,
                     size_t sn, unsigned char *dst, size_t raw_n,
                     ckpt_error *err)
{
    int layout = layout_of(codec), np = ckpt_bg_nplanes(layout);
    size_t es = ckpt_bg_esize(layout), ne = raw_n / es, coded = 0;
    plane_in pi[CKPT_BG_MAX_PLANES];
    int rc = bg_check_head(codec, src, sn, raw_n, err);
    if (rc == 0)
        rc = bg_read_planes(codec, src, sn, raw_n, pi, err);
    if (rc == 0 && all_constant(pi, np)) {
        decode_constant(layout, pi, ne, dst);
        memcpy(dst + ne * es, src + sn - raw_n % es, raw_n % es);
        return 0;
    }
    for (int k = 0; rc == 0 && k < np; k++)
        coded += pi[k].method != BG_STORED;
    if (rc == 0)
        rc = reserve(&c->planes, &c->planes_cap, coded * ne, err);
    if (rc)
        return rc;
    const uint8_t *pl[CKPT_BG_MAX_PLANES];
    uint8_t *buf = c->planes;
    for (int k = 0; k < np; k++) {
        if (decode_plane(c, &pi[k], buf, ne, &pl[k]))
            return ckpt_err(err, -EIO, "corrupt %s frame: plane %d (method "
                            "%d, %zu bytes) does not decode to %zu bytes",
                            CODECS[codec].name, k, pi[k].method, pi[k].len,
                            ne);
        if (pi[k].method != BG_STORED)
            buf += ne;
    }
    ckpt_bg_merge(layout, pl, ne, dst);
    memcpy(dst + ne * es, src + sn - raw_n % es, raw_n % es);
    return 0;
}

int ckpt_codec_leading_planes(int codec, const void *head, size_t hn,
                              size_t raw_n, int max_coded, size_t *prefix,
                              int *layout)
{
    const unsigned char *h = head;
    *layout = layout_of(codec);
    int np = ckpt_bg_nplanes(*layout);
    size_t es = ckpt_bg_esize(*layout);
    size_t pos = BG_HEAD + (size_t)np * BG_PLANE_HEAD;
    if (np == 0 || hn < pos || raw_n < es || h[0] != BG_VERSION ||
        h[1] != *layout || h[2] != es || h[3] != np)
        return 0;
    int k = 0;
    for (; k < np - 1; k++) {
        const unsigned char *p = h + BG_HEAD + (size_t)k * BG_PLANE_HEAD;
        if (p[0] != BG_STORED && max_coded-- <= 0)
            break;
        pos += ckpt_get_le32(p + 1);
    }
    *prefix = pos;
    return k;
}

int ckpt_codec_decode_leading(ckpt_codec_ctx *c, int codec, const void *src,
                              size_t prefix, size_t raw_n, int np, void *dst,
                              ckpt_error *err)
{
    const unsigned char *s = src;
    int layout = layout_of(codec);
    size_t ne = raw_n / ckpt_bg_esize(layout);
    size_t pos = BG_HEAD + (size_t)ckpt_bg_nplanes(layout) * BG_PLANE_HEAD;
    uint8_t *out = dst;
    for (int k = 0; k < np; k++, out += ne) {
        const unsigned char *h = s + BG_HEAD + (size_t)k * BG_PLANE_HEAD;
        plane_in pi = { h[0], s + pos, ckpt_get_le32(h + 1) };
        const uint8_t *got;
        if (pi.len > prefix - pos || !plane_len_ok(pi.method, pi.src, pi.len,
                                                   ne) ||
            decode_plane(c, &pi, out, ne, &got))
            return ckpt_err(err, -EIO, "corrupt %s frame: plane %d (method "
                            "%d, %zu bytes) does not decode to %zu bytes",
                            CODECS[codec].name, k, pi.method, pi.len, ne);
        if (got != out)
            memcpy(out, got, ne);
        pos += pi.len;
    }
    return 0;
}

int ckpt_codec_decode(ckpt_codec_ctx *c, int codec, const void *src,
                      size_t stored_n, void *dst, size_t raw_n,
                      ckpt_error *err)
{
    if ((!src && stored_n) || (!dst && raw_n))
        return ckpt_err(err, -EINVAL, "decode: missing buffer");
    if (codec == CKPT_CODEC_RAW)
        return decode_raw(src, stored_n, dst, raw_n, err);
    if (codec == CKPT_CODEC_REF || codec == CKPT_CODEC_XOR)
        return ckpt_err(err, -EINVAL, "a '%s' frame is decoded with its "
                        "base frame (format/delta.c)", ckpt_codec_name(codec));
    if (!ckpt_codec_known(codec))
        return ckpt_err(err, -ENOTSUP,
                        "unknown codec id %d (this build knows ids 0..%d: "
                        "raw, zstd, bgbf16, bgf16, bgf32, bgf64, bg2, bg4, "
                        "bg8)", codec, NCODECS - 1);
    if (!c)
        return ckpt_err(err, -EINVAL, "decode: no codec context");
    if (codec == CKPT_CODEC_ZSTD)
        return decode_zstd(c, src, stored_n, dst, raw_n, err);
    return decode_bg(c, codec, src, stored_n, dst, raw_n, err);
}
