/*
 * huff.c - static Huffman coding of byte streams (see huff.h).
 *
 * Stream layout (all integers little-endian):
 *   u8  first symbol F
 *   u8  count C - 1 (symbols F .. F+C-1 are described, F + C <= 256)
 *   ceil(C/2) bytes of 4-bit code lengths, symbol F+2i in the low nibble
 *       and F+2i+1 in the high one; 0 = absent, otherwise 1..11
 *   u32 x 3: byte sizes of bit streams 0, 1 and 2 (stream 3 is the rest)
 *   bit streams 0..3
 * Symbols [k*Q, (k+1)*Q) (Q = ceil(n/4), clipped to n) go to stream k.
 * Codes are canonical (shorter first, then by symbol value) and written
 * least significant bit first, so a stream is read with 64-bit loads and a
 * table lookup on its low 11 bits.  A stream is padded with zero bits to a
 * whole byte.  The lengths must form a complete prefix code (Kraft sum 1).
 */
#include "codec/huff.h"
#include "common/le.h"

#include <stdlib.h>
#include <string.h>

#define MAXB CKPT_HUF_MAX_BITS
#define TSIZE (1u << MAXB)
#define TMASK (TSIZE - 1)
#define MULTI_MAX 7          /* symbols per multi-symbol table entry */
#define MULTI_MIN 16384      /* fewer symbols are decoded one at a time */
#define NSTREAMS 4
#define JUMP_BYTES 12        /* three u32 stream sizes */

/* ------------------------------------------------------------ bytes */

static inline uint64_t load64le(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void store64le(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

/* ------------------------------------------------------------ histogram */

void ckpt_hist(const uint8_t *src, size_t n, uint32_t hist[256])
{
    uint32_t h[4][256];
    memset(h, 0, sizeof h);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t a = load64le(src + i), b = load64le(src + i + 8);
        for (int k = 0; k < 8; k += 2) {
            h[0][(a >> (8 * k)) & 0xff]++;
            h[1][(a >> (8 * k + 8)) & 0xff]++;
            h[2][(b >> (8 * k)) & 0xff]++;
            h[3][(b >> (8 * k + 8)) & 0xff]++;
        }
    }
    for (; i < n; i++)
        h[0][src[i]]++;
    for (int s = 0; s < 256; s++)
        hist[s] = h[0][s] + h[1][s] + h[2][s] + h[3][s];
}

/* log2(x) for x >= 1, within 2e-6, without libm: the exponent from the
 * double's bits, and log2 of the mantissa m in [1, 2) from the series
 * 2/ln 2 * (t + t^3/3 + ...) with t = (m - 1) / (m + 1) < 1/3. */
static double log2_approx(double x)
{
    uint64_t b;
    memcpy(&b, &x, 8);
    int e = (int)((b >> 52) & 0x7ff) - 1023;
    b = (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
    double m;
    memcpy(&m, &b, 8);
    double t = (m - 1) / (m + 1), t2 = t * t;
    double series = 1 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 +
                                                         t2 / 9)));
    return e + 2.8853900817779268 * t * series;
}

double ckpt_hist_entropy(const uint32_t hist[256], size_t n)
{
    if (n == 0)
        return 0.0;
    /* H = log2 n - (1/n) sum c log2 c */
    double sum = 0.0;
    for (int s = 0; s < 256; s++)
        if (hist[s])
            sum += hist[s] * log2_approx(hist[s]);
    double h = log2_approx((double)n) - sum / (double)n;
    return h > 0 ? h : 0.0;
}

/* ------------------------------------------------------------ code lengths */

typedef struct symcount {
    uint32_t count;
    uint32_t sym;
} symcount;

static int by_count(const void *a, const void *b)
{
    const symcount *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? -1 : 1;
    return x->sym < y->sym ? -1 : x->sym > y->sym;
}

/* Moffat & Katajainen's in-place minimum-redundancy code: A[0..m) holds
 * weights in ascending order (m >= 2); on return A[i] is the code length
 * of the i-th weight. */
static void min_redundancy(uint64_t *A, int m)
{
    int root = 0, leaf = 2, next;
    A[0] += A[1];
    for (next = 1; next < m - 1; next++) {
        if (leaf >= m || A[root] < A[leaf]) {
            A[next] = A[root];
            A[root++] = (uint64_t)next;
        } else {
            A[next] = A[leaf++];
        }
        if (leaf >= m || (root < next && A[root] < A[leaf])) {
            A[next] += A[root];
            A[root++] = (uint64_t)next;
        } else {
            A[next] += A[leaf++];
        }
    }
    A[m - 2] = 0;
    for (next = m - 3; next >= 0; next--)
        A[next] = A[A[next]] + 1;
    int avail = 1, used = 0;
    uint64_t depth = 0;
    root = m - 2;
    next = m - 1;
    while (avail > 0) {
        while (root >= 0 && A[root] == depth) {
            used++;
            root--;
        }
        while (avail > used) {
            A[next--] = depth;
            avail--;
        }
        avail = 2 * used;
        depth++;
        used = 0;
    }
}

/* Limits the lengths counted in num[1..255] to MAXB, keeping the code
 * complete (as miniz does).  Returns 0, or -1 when it cannot. */
static int limit_lengths(uint32_t num[256])
{
    for (int i = MAXB + 1; i < 256; i++) {
        num[MAXB] += num[i];
        num[i] = 0;
    }
    uint64_t total = 0;
    for (int i = MAXB; i > 0; i--)
        total += (uint64_t)num[i] << (MAXB - i);
    while (total > TSIZE) {
        if (num[MAXB] == 0)
            return -1;
        num[MAXB]--;
        int i = MAXB - 1;
        while (i > 0 && num[i] == 0)
            i--;
        if (i == 0)
            return -1;
        num[i]--;
        num[i + 1] += 2;
        total--;
    }
    return total == TSIZE ? 0 : -1;
}

/* Code lengths for the m symbols of list (ascending counts) into len[]. */
static int lengths_from_counts(const symcount *list, int m, uint8_t len[256])
{
    uint64_t A[256];
    uint32_t num[256] = { 0 };
    for (int i = 0; i < m; i++)
        A[i] = list[i].count;
    min_redundancy(A, m);
    for (int i = 0; i < m; i++)
        num[A[i] < 255 ? A[i] : 255]++;
    if (limit_lengths(num))
        return -1;
    int j = 0;
    for (int l = MAXB; l >= 1; l--)
        for (uint32_t k = num[l]; k > 0; k--)
            len[list[j++].sym] = (uint8_t)l;
    return 0;
}

static uint32_t reverse_bits(uint32_t c, int l)
{
    uint32_t r = 0;
    for (int i = 0; i < l; i++)
        r |= ((c >> i) & 1u) << (l - 1 - i);
    return r;
}

/* Canonical codes (bit-reversed for LSB-first output) from len[].  Fills
 * enc[s] = code | len << 16, or 0 for absent symbols. */
static void canonical(const uint8_t len[256], uint32_t enc[256])
{
    uint32_t num[MAXB + 2] = { 0 }, next[MAXB + 2];
    for (int s = 0; s < 256; s++)
        num[len[s]]++;
    num[0] = 0;
    uint32_t c = 0;
    for (int l = 1; l <= MAXB; l++) {
        c = (c + num[l - 1]) << 1;
        next[l] = c;
    }
    for (int s = 0; s < 256; s++) {
        int l = len[s];
        enc[s] = l ? reverse_bits(next[l]++, l) | (uint32_t)l << 16 : 0;
    }
}

static size_t header_size(int count)
{
    return 2 + (size_t)(count + 1) / 2 + JUMP_BYTES;
}

int ckpt_huf_build(const uint32_t hist[256], ckpt_huf_code *code)
{
    symcount list[256];
    int m = 0;
    for (int s = 0; s < 256; s++)
        if (hist[s])
            list[m++] = (symcount){ hist[s], (uint32_t)s };
    if (m < 2)
        return -1;
    qsort(list, (size_t)m, sizeof *list, by_count);
    memset(code->len, 0, sizeof code->len);
    /* Halve the counts until the limited lengths form a complete code
     * (limit_lengths almost always succeeds at once). */
    while (lengths_from_counts(list, m, code->len)) {
        for (int i = 0; i < m; i++)
            list[i].count = (list[i].count + 1) / 2;
    }
    canonical(code->len, code->enc);
    int lo = 0, hi = 255;
    while (!code->len[lo])
        lo++;
    while (!code->len[hi])
        hi--;
    code->first = lo;
    code->count = hi - lo + 1;
    uint64_t bits = 0;
    for (int s = lo; s <= hi; s++)
        bits += (uint64_t)hist[s] * code->len[s];
    code->size = header_size(code->count) + (size_t)((bits + 7) / 8) +
                 NSTREAMS - 1;
    return 0;
}

/* ------------------------------------------------------------ encoding */

/* Codes src[0..n) as one bit stream at out; returns the end. */
static uint8_t *encode_stream(const uint32_t *enc, const uint8_t *src,
                              size_t n, uint8_t *out)
{
    uint64_t acc = 0;
    unsigned nb = 0;
    size_t i = 0;
    /* Four codes of at most 11 bits fit beside up to 7 pending bits. */
    for (; i + 4 <= n; i += 4) {
        uint32_t c0 = enc[src[i]], c1 = enc[src[i + 1]];
        uint32_t c2 = enc[src[i + 2]], c3 = enc[src[i + 3]];
        acc |= (uint64_t)(c0 & 0xffff) << nb;
        nb += c0 >> 16;
        acc |= (uint64_t)(c1 & 0xffff) << nb;
        nb += c1 >> 16;
        acc |= (uint64_t)(c2 & 0xffff) << nb;
        nb += c2 >> 16;
        acc |= (uint64_t)(c3 & 0xffff) << nb;
        nb += c3 >> 16;
        store64le(out, acc);
        out += nb >> 3;
        acc >>= nb & 56;
        nb &= 7;
    }
    for (; i < n; i++) {
        uint32_t c = enc[src[i]];
        acc |= (uint64_t)(c & 0xffff) << nb;
        nb += c >> 16;
        store64le(out, acc);
        out += nb >> 3;
        acc >>= nb & 56;
        nb &= 7;
    }
    store64le(out, acc);
    return out + (nb + 7) / 8;
}

static void segment(size_t n, int k, size_t *lo, size_t *hi)
{
    size_t q = n / NSTREAMS + (n % NSTREAMS != 0);
    size_t a = (size_t)k * q, b = a + q;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

size_t ckpt_huf_encode(const ckpt_huf_code *code, const uint8_t *src,
                       size_t n, uint8_t *dst)
{
    uint8_t *p = dst;
    *p++ = (uint8_t)code->first;
    *p++ = (uint8_t)(code->count - 1);
    for (int i = 0; i < code->count; i += 2) {
        int s = code->first + i;
        uint8_t lo = code->len[s];
        uint8_t hi = i + 1 < code->count ? code->len[s + 1] : 0;
        *p++ = (uint8_t)(lo | hi << 4);
    }
    uint8_t *jump = p;
    p += JUMP_BYTES;
    for (int k = 0; k < NSTREAMS; k++) {
        size_t lo, hi;
        segment(n, k, &lo, &hi);
        uint8_t *start = p;
        p = encode_stream(code->enc, src + lo, hi - lo, p);
        if (k < NSTREAMS - 1)
            ckpt_put_le32(jump + 4 * k, (uint32_t)(p - start));
    }
    return (size_t)(p - dst);
}

/* ------------------------------------------------------------ decoding */

/* Reads the code lengths; fills the single-symbol table.  Returns the
 * header size or 0 when it is malformed. */
static size_t read_code(ckpt_huf_dtable *t, const uint8_t *src, size_t sn)
{
    if (sn < 2)
        return 0;
    int first = src[0], count = src[1] + 1;
    if (first + count > 256 || sn < header_size(count))
        return 0;
    uint8_t len[256];
    uint32_t kraft = 0;
    for (int i = 0; i < count; i++) {
        uint8_t b = src[2 + i / 2];
        len[i] = (uint8_t)(i % 2 ? b >> 4 : b & 15);
        if (len[i] > MAXB)
            return 0;
        if (len[i])
            kraft += TSIZE >> len[i];
    }
    if (kraft != TSIZE)
        return 0;
    uint32_t num[MAXB + 2] = { 0 }, next[MAXB + 2];
    for (int i = 0; i < count; i++)
        num[len[i]]++;
    num[0] = 0;
    uint32_t c = 0;
    for (int l = 1; l <= MAXB; l++) {
        c = (c + num[l - 1]) << 1;
        next[l] = c;
    }
    for (int i = 0; i < count; i++) {
        int l = len[i];
        if (!l)
            continue;
        uint16_t e = (uint16_t)((first + i) | l << 8);
        for (uint32_t x = reverse_bits(next[l]++, l); x < TSIZE; x += 1u << l)
            t->single[x] = e;
    }
    return header_size(count);
}

/* Fills the multi-symbol table from the single-symbol one: entry i holds
 * the symbols that the 11 bits i decode to whole (1..7 of them) in its low
 * bytes, and in its top byte their count | bits used << 3. */
static void build_multi(ckpt_huf_dtable *t)
{
    for (uint32_t i = 0; i < TSIZE; i++) {
        uint64_t syms = 0;
        unsigned ns = 0, used = 0;
        while (ns < MULTI_MAX) {
            uint16_t e = t->single[i >> used];
            unsigned l = e >> 8;
            if (used + l > MAXB)
                break;
            syms |= (uint64_t)(e & 0xff) << (8 * ns);
            ns++;
            used += l;
        }
        t->multi[i] = syms | (uint64_t)(ns | used << 3) << 56;
    }
}

typedef struct bitrd {
    const uint8_t *base;
    size_t size, pos;    /* stream bytes; next byte to load */
    uint64_t buf;        /* bits not yet consumed, next one lowest */
    unsigned cnt;        /* valid bits in buf */
    uint8_t *out, *end;  /* output segment */
} bitrd;

/* Loads whole bytes up to 56..63 valid bits; needs pos + 8 <= size.
 * Bits above cnt may already hold the next stream bits: OR-ing the same
 * bits again is harmless. */
static inline void refill_fast(bitrd *b)
{
    b->buf |= load64le(b->base + b->pos) << b->cnt;
    b->pos += (63 - b->cnt) >> 3;
    b->cnt |= 56;
}

/* Same, byte by byte, reading zeros past the end of the stream. */
static inline void refill_safe(bitrd *b)
{
    while (b->cnt <= 56) {
        uint64_t v = b->pos < b->size ? b->base[b->pos] : 0;
        b->buf |= v << b->cnt;
        b->pos++;
        b->cnt += 8;
    }
}

static inline void step_multi(bitrd *b, const uint64_t *multi)
{
    uint64_t e = multi[b->buf & TMASK];
    store64le(b->out, e);
    b->out += (e >> 56) & 7;
    unsigned nb = (unsigned)(e >> 59);
    b->buf >>= nb;
    b->cnt -= nb;
}

/* Room for 5 lookups of up to 7 symbols, each storing 8 bytes. */
#define FAST_OUT 40

static inline int fast_ok(const bitrd *b)
{
    return b->pos + 8 <= b->size && b->end - b->out >= FAST_OUT;
}

/* Decodes the four streams together while all have room. */
static void decode4(bitrd *s, const uint64_t *multi)
{
    bitrd a = s[0], b = s[1], c = s[2], d = s[3];
    while (fast_ok(&a) && fast_ok(&b) && fast_ok(&c) && fast_ok(&d)) {
        refill_fast(&a);
        refill_fast(&b);
        refill_fast(&c);
        refill_fast(&d);
        for (int r = 0; r < 5; r++) {   /* 5 x 11 bits <= 56 */
            step_multi(&a, multi);
            step_multi(&b, multi);
            step_multi(&c, multi);
            step_multi(&d, multi);
        }
    }
    s[0] = a;
    s[1] = b;
    s[2] = c;
    s[3] = d;
}

/* Decodes the rest of one stream a symbol at a time (up to 5 per refill,
 * 5 x 11 bits <= 56), reading zeros past its end; checks that it ends in
 * its last byte. */
static int decode_single(bitrd *b, const ckpt_huf_dtable *t)
{
    while (b->out < b->end) {
        if (b->pos + 8 <= b->size)
            refill_fast(b);
        else
            refill_safe(b);
        for (int r = 0; r < 5 && b->out < b->end; r++) {
            uint16_t e = t->single[b->buf & TMASK];
            *b->out++ = (uint8_t)e;
            b->buf >>= e >> 8;
            b->cnt -= e >> 8;
        }
        if (b->pos * 8 - b->cnt > b->size * 8)
            return -1;              /* ran past the end of the stream */
    }
    size_t used = b->pos * 8 - b->cnt;
    return (used + 7) / 8 == b->size ? 0 : -1;
}

/* Finishes one stream after decode4: multi-symbol lookups while there is
 * room, then one symbol at a time. */
static int decode_rest(bitrd *b, const ckpt_huf_dtable *t)
{
    while (fast_ok(b)) {
        refill_fast(b);
        for (int r = 0; r < 5; r++)
            step_multi(b, t->multi);
    }
    return decode_single(b, t);
}

/* The tables for the code that src describes: kept from the last stream
 * when its code description is the same bytes, else read anew.  Returns
 * the header size, or 0 when the header is malformed. */
static size_t load_code(ckpt_huf_dtable *t, const uint8_t *src, size_t sn)
{
    if (sn < 2)
        return 0;
    size_t cl = 2 + ((size_t)src[1] + 2) / 2;
    if (t->code_len == cl && memcmp(t->code, src, cl) == 0)
        return sn >= header_size(src[1] + 1) ? header_size(src[1] + 1) : 0;
    t->code_len = 0;
    t->has_multi = 0;
    size_t h = read_code(t, src, sn);
    if (h) {
        memcpy(t->code, src, cl);
        t->code_len = (uint8_t)cl;
    }
    return h;
}

int ckpt_huf_decode(ckpt_huf_dtable *t, const uint8_t *src, size_t sn,
                    uint8_t *dst, size_t n)
{
    size_t h = load_code(t, src, sn);
    if (h == 0)
        return -1;
    bitrd s[NSTREAMS];
    size_t off = h, left = sn - h;
    for (int k = 0; k < NSTREAMS; k++) {
        size_t sz = k < NSTREAMS - 1
                        ? ckpt_get_le32(src + h - JUMP_BYTES + 4 * k)
                        : left;
        if (sz > left)
            return -1;
        size_t lo, hi;
        segment(n, k, &lo, &hi);
        s[k] = (bitrd){ .base = src + off, .size = sz, .out = dst + lo,
                        .end = dst + hi };
        off += sz;
        left -= sz;
    }
    if (n < MULTI_MIN) {         /* the multi table would cost more */
        for (int k = 0; k < NSTREAMS; k++)
            if (decode_single(&s[k], t))
                return -1;
        return 0;
    }
    if (!t->has_multi) {
        build_multi(t);
        t->has_multi = 1;
    }
    decode4(s, t->multi);
    for (int k = 0; k < NSTREAMS; k++)
        if (decode_rest(&s[k], t))
            return -1;
    return 0;
}
