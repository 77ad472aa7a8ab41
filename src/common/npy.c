/*
 * npy.c - the .npy format for the library's two users, `ckpt` (pack reads
 * .npy files, unpack writes them) and the mount's .npy/ view: reading and
 * writing headers, and widening the float formats NumPy lacks to float32
 * or complex64 (see npy.h for the rules, NaN payloads included).
 *
 * The header is a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * parsed here by a small recursive-descent reader that accepts exactly the
 * three keys NumPy writes.
 */
#include "common/npy.h"
#include "common/error.h"
#include "common/shape.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckptfs's .npy code assumes a little-endian host"
#endif

static const char npy_magic[6] = { '\x93', 'N', 'U', 'M', 'P', 'Y' };

/* ------------------------------------------------------------ dict parser */

typedef struct dict_parser {
    const char *start, *p, *end;
    const char *what;      /* file name for messages */
    ckpt_error *err;
} dict_parser;

static int syntax_error(dict_parser *d, const char *expected)
{
    return ckpt_err(d->err, -EINVAL,
                         "%s: malformed .npy header: expected %s at offset "
                         "%td of the header", d->what, expected,
                         d->p - d->start);
}

static void skip_space(dict_parser *d)
{
    while (d->p < d->end && isspace((unsigned char)*d->p))
        d->p++;
}

/* Consumes character c (after blanks); 1 if it was there. */
static int accept(dict_parser *d, char c)
{
    skip_space(d);
    if (d->p < d->end && *d->p == c) {
        d->p++;
        return 1;
    }
    return 0;
}

/* Reads a quoted string (no escapes, as NumPy never writes any) into buf. */
static int parse_string(dict_parser *d, char *buf, size_t cap)
{
    skip_space(d);
    if (d->p >= d->end || (*d->p != '\'' && *d->p != '"'))
        return syntax_error(d, "a string");
    char q = *d->p++;
    const char *s = d->p;
    while (d->p < d->end && *d->p != q && *d->p != '\\')
        d->p++;
    if (d->p >= d->end || *d->p != q)
        return syntax_error(d, "the end of a string");
    size_t n = (size_t)(d->p - s);
    d->p++;
    if (n >= cap)
        return ckpt_err(d->err, -EINVAL,
                             "%s: .npy header string too long", d->what);
    memcpy(buf, s, n);
    buf[n] = '\0';
    return 0;
}

static int parse_bool(dict_parser *d, int *out)
{
    skip_space(d);
    size_t left = (size_t)(d->end - d->p);
    if (left >= 4 && memcmp(d->p, "True", 4) == 0) {
        d->p += 4;
        *out = 1;
        return 0;
    }
    if (left >= 5 && memcmp(d->p, "False", 5) == 0) {
        d->p += 5;
        *out = 0;
        return 0;
    }
    return syntax_error(d, "True or False");
}

/* A non-negative integer (Python 2 headers may end it with 'L'). */
static int parse_dim(dict_parser *d, int64_t *out)
{
    skip_space(d);
    if (d->p >= d->end || !isdigit((unsigned char)*d->p))
        return syntax_error(d, "a dimension");
    uint64_t v = 0;
    while (d->p < d->end && isdigit((unsigned char)*d->p)) {
        unsigned digit = (unsigned)(*d->p++ - '0');
        if (v > ((uint64_t)INT64_MAX - digit) / 10)
            return ckpt_err(d->err, -EOVERFLOW,
                                 "%s: .npy shape dimension too large",
                                 d->what);
        v = v * 10 + digit;
    }
    if (d->p < d->end && (*d->p == 'L' || *d->p == 'l'))
        d->p++;
    *out = (int64_t)v;
    return 0;
}

/* A tuple of dimensions: "()", "(5,)", "(3, 4)". */
static int parse_shape(dict_parser *d, int64_t *dims, int *ndim)
{
    if (!accept(d, '('))
        return syntax_error(d, "a shape tuple");
    *ndim = 0;
    if (accept(d, ')'))
        return 0;
    for (;;) {
        if (*ndim >= CKPT_MAX_DIMS)
            return ckpt_err(d->err, -EINVAL,
                                 "%s: .npy shape has more than %d dims",
                                 d->what, CKPT_MAX_DIMS);
        int rc = parse_dim(d, &dims[(*ndim)++]);
        if (rc)
            return rc;
        if (accept(d, ')'))
            return 0;
        if (!accept(d, ','))
            return syntax_error(d, "',' or ')' in the shape");
        if (accept(d, ')'))
            return 0;
    }
}

/* ------------------------------------------------------------ descr */

/* Explains why a descr that is not a plain number type is refused. */
static int refuse_kind(const char *what, const char *descr, char kind,
                       ckpt_error *err)
{
    const char *why;
    switch (kind) {
    case 'O': why = "object arrays are not supported"; break;
    case 'V': why = "raw void data is not supported (for bfloat16 or "
                    "float8 saved as raw bytes, pass the data as "
                    "NAME=FILE:DTYPE:SHAPE)"; break;
    case 'U': case 'S': case 'a':
        why = "string arrays are not supported"; break;
    case 'M': case 'm': why = "datetime arrays are not supported"; break;
    default: why = "unsupported dtype"; break;
    }
    return ckpt_err(err, -ENOTSUP, "%s: dtype '%s': %s", what, descr,
                         why);
}

/* Maps a simple descr ("<f4", "|b1", "=i8") to a ckpt dtype. */
static int parse_descr(const char *what, const char *descr, ckpt_dtype *out,
                       ckpt_error *err)
{
    const char *s = descr;
    char order = '=';
    if (*s && strchr("<>|=", *s))
        order = *s++;
    char kind = *s;
    if (kind == '\0')
        return ckpt_err(err, -EINVAL, "%s: empty dtype in .npy header",
                             what);
    if (!strchr("fiubc", kind))
        return refuse_kind(what, descr, kind, err);
    char *end = (char *)s;
    errno = 0;
    long size = isdigit((unsigned char)s[1]) ? strtol(s + 1, &end, 10) : 0;
    if (errno || size < 1 || size > 64 || *end != '\0')
        return ckpt_err(err, -ENOTSUP, "%s: unsupported dtype '%s'",
                             what, descr);
    if (order == '>' && size > 1)
        return ckpt_err(err, -ENOTSUP,
                             "%s: big-endian data (dtype '%s') is not "
                             "supported; save it with "
                             "arr.astype(arr.dtype.newbyteorder('<'))",
                             what, descr);
    char norm[16];
    snprintf(norm, sizeof norm, "%c%c%ld", size == 1 ? '|' : '<', kind,
             size);
    ckpt_dtype dt = ckpt_dtype_parse(norm);
    if (dt == CKPT_DTYPE_INVALID || ckpt_dtype_size(dt) != (size_t)size)
        return ckpt_err(err, -ENOTSUP, "%s: unsupported dtype '%s'",
                             what, descr);
    *out = dt;
    return 0;
}

/* ------------------------------------------------------------ header */

/* Parses one "key: value" entry into h; `seen` records keys found. */
static int parse_entry(dict_parser *d, npy_header *h, unsigned *seen)
{
    char key[32];
    int rc = parse_string(d, key, sizeof key);
    if (rc)
        return rc;
    if (!accept(d, ':'))
        return syntax_error(d, "':'");
    if (strcmp(key, "descr") == 0) {
        skip_space(d);
        if (d->p < d->end && (*d->p == '[' || *d->p == '{'))
            return ckpt_err(d->err, -ENOTSUP,
                                 "%s: structured dtypes are not supported",
                                 d->what);
        char descr[64];
        rc = parse_string(d, descr, sizeof descr);
        if (rc == 0)
            rc = parse_descr(d->what, descr, &h->dtype, d->err);
        *seen |= 1;
    } else if (strcmp(key, "fortran_order") == 0) {
        rc = parse_bool(d, &h->fortran_order);
        *seen |= 2;
    } else if (strcmp(key, "shape") == 0) {
        rc = parse_shape(d, h->shape, &h->ndim);
        *seen |= 4;
    } else {
        rc = ckpt_err(d->err, -EINVAL,
                           "%s: unexpected key '%s' in .npy header",
                           d->what, key);
    }
    return rc;
}

static int parse_dict(dict_parser *d, npy_header *h)
{
    unsigned seen = 0;
    if (!accept(d, '{'))
        return syntax_error(d, "'{'");
    while (!accept(d, '}')) {
        int rc = parse_entry(d, h, &seen);
        if (rc)
            return rc;
        if (!accept(d, ',')) {
            if (!accept(d, '}'))
                return syntax_error(d, "',' or '}'");
            break;
        }
    }
    if (seen != 7)
        return ckpt_err(d->err, -EINVAL,
                             "%s: .npy header lacks '%s'", d->what,
                             !(seen & 1) ? "descr" :
                             !(seen & 2) ? "fortran_order" : "shape");
    return 0;
}

/* Reads the magic, the version and the header length. */
static int parse_prefix(const unsigned char *b, size_t len, const char *what,
                        npy_header *h, size_t *prefix, size_t *hlen,
                        ckpt_error *err)
{
    if (len < NPY_PREFIX_V1 || memcmp(b, npy_magic, sizeof npy_magic) != 0)
        return ckpt_err(err, -EINVAL, "%s: not a .npy file", what);
    h->major = b[6];
    h->minor = b[7];
    if (h->major == 1) {
        *prefix = NPY_PREFIX_V1;
        *hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else if (h->major == 2 || h->major == 3) {
        if (len < NPY_PREFIX_V2)
            return ckpt_err(err, -EINVAL, "%s: truncated .npy header",
                                 what);
        *prefix = NPY_PREFIX_V2;
        *hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 |
                (size_t)b[11] << 24;
    } else {
        return ckpt_err(err, -ENOTSUP,
                             "%s: unsupported .npy format version %d.%d",
                             what, h->major, h->minor);
    }
    if (*hlen > NPY_MAX_HEADER)
        return ckpt_err(err, -EINVAL,
                             "%s: .npy header of %zu bytes is too large",
                             what, *hlen);
    return 0;
}

int npy_parse_header(const void *buf, size_t len, const char *what,
                     npy_header *h, size_t *need, ckpt_error *err)
{
    const unsigned char *b = buf;
    size_t prefix = 0, hlen = 0;
    memset(h, 0, sizeof *h);
    int rc = parse_prefix(b, len, what, h, &prefix, &hlen, err);
    if (rc)
        return rc;
    if (need)
        *need = prefix + hlen;
    if (len < prefix + hlen)
        return -EAGAIN;
    const char *dict = (const char *)b + prefix;
    dict_parser d = { dict, dict, dict + hlen, what, err };
    rc = parse_dict(&d, h);
    if (rc)
        return rc;
    h->data_offset = prefix + hlen;
    return ckpt_shape_nbytes(h->dtype, h->ndim, h->shape, &h->nbytes, what,
                             err);
}

/* Reads up to n bytes at offset 0; *got is what the file held. */
static int read_start(int fd, const char *path, void *buf, size_t n,
                      size_t *got, ckpt_error *err)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, (char *)buf + done, n - done, (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return ckpt_err(err, -errno, "%s: read failed: %s", path,
                                 strerror(errno));
        if (k == 0)
            break;
        done += (size_t)k;
    }
    *got = done;
    return 0;
}

/* Checks that the file holds the header and all of the array's bytes. */
static int check_length(int fd, const char *path, const npy_header *h,
                        ckpt_error *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ckpt_err(err, -errno, "%s: %s", path, strerror(errno));
    uint64_t have = (uint64_t)st.st_size;
    if (have < h->data_offset || have - h->data_offset < h->nbytes)
        return ckpt_err(err, -EINVAL,
                             "%s: truncated .npy file: its shape needs %"
                             PRIu64 " data bytes, the file holds %" PRIu64,
                             path, h->nbytes,
                             have > h->data_offset ? have - h->data_offset
                                                   : 0);
    return 0;
}

int npy_read_header(int fd, const char *path, npy_header *h, ckpt_error *err)
{
    char small[4096];
    size_t got = 0, need = 0;
    int rc = read_start(fd, path, small, sizeof small, &got, err);
    if (rc)
        return rc;
    rc = npy_parse_header(small, got, path, h, &need, err);
    if (rc == -EAGAIN && got == sizeof small) {
        char *big = malloc(need);
        if (!big)
            return ckpt_err(err, -ENOMEM, "%s: out of memory", path);
        rc = read_start(fd, path, big, need, &got, err);
        if (rc == 0)
            rc = npy_parse_header(big, got, path, h, &need, err);
        free(big);
    }
    if (rc == -EAGAIN)
        return ckpt_err(err, -EINVAL, "%s: truncated .npy header",
                             path);
    if (rc)
        return rc;
    return check_length(fd, path, h, err);
}

/* ------------------------------------------------------------ writing */

/* The Python repr of a shape tuple: "()", "(5,)", "(3, 4)". */
static int format_tuple(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = 0;
    int k = snprintf(buf, cap, "(");
    for (int i = 0; k >= 0 && (size_t)k < cap - n && i < ndim; i++) {
        n += (size_t)k;
        k = snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "",
                     shape[i]);
    }
    if (k < 0 || (size_t)k >= cap - n)
        return -ENAMETOOLONG;
    n += (size_t)k;
    k = snprintf(buf + n, cap - n, ndim == 1 ? ",)" : ")");
    if (k < 0 || (size_t)k >= cap - n)
        return -ENAMETOOLONG;
    return (int)(n + (size_t)k);
}

int npy_format_header(char *buf, size_t cap, const char *descr, int ndim,
                      const int64_t *shape)
{
    if (!descr || ndim < 0 || ndim > CKPT_MAX_DIMS || (ndim && !shape))
        return -EINVAL;
    char tuple[CKPT_MAX_DIMS * 24 + 8];
    if (format_tuple(tuple, sizeof tuple, ndim, shape) < 0 ||
        cap < NPY_PREFIX_V1)
        return -ENAMETOOLONG;
    char *dict = buf + NPY_PREFIX_V1;
    size_t room = cap - NPY_PREFIX_V1;
    int k = snprintf(dict, room,
                     "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, tuple);
    if (k < 0 || (size_t)k >= room)
        return -ENAMETOOLONG;
    /* Pad with spaces and a final newline to a multiple of 64 bytes. */
    size_t total = NPY_PREFIX_V1 + (size_t)k + 1;
    total = (total + 63) / 64 * 64;
    if (total > cap || total - NPY_PREFIX_V1 > 0xffff)
        return -ENAMETOOLONG;
    memset(dict + k, ' ', total - NPY_PREFIX_V1 - (size_t)k - 1);
    buf[total - 1] = '\n';
    size_t hlen = total - NPY_PREFIX_V1;
    memcpy(buf, npy_magic, sizeof npy_magic);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    return (int)total;
}

int npy_tensor_header(ckpt_dtype dt, int ndim, const int64_t *shape,
                      char *buf, size_t cap)
{
    ckpt_dtype stored;
    return npy_format_header(buf, cap, ckpt_dtype_npy_descr(dt, &stored),
                             ndim, shape);
}

/* ------------------------------------------------------------ widening */

/* Bits of the float32 m * 2^(p - bias) for a subnormal mantissa m > 0 of
 * an 8-bit format: m is normalised to 1.f * 2^top. */
static uint32_t subnormal_bits(unsigned m, int min_exp)
{
    int top = 0;
    while ((m >> (top + 1)) != 0)
        top++;
    uint32_t frac = (uint32_t)(m - (1u << top)) << (23 - top);
    return (uint32_t)(top + min_exp + 127) << 23 | frac;
}

uint32_t npy_f8e4m3_bits(uint8_t b)
{
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    unsigned e = (b >> 3) & 0xf, m = b & 7;
    if (e == 15 && m == 7)
        return sign | 0x7fc00000u;
    if (e == 0)
        return m ? sign | subnormal_bits(m, -9) : sign;
    return sign | (uint32_t)(e + 120) << 23 | (uint32_t)m << 20;
}

uint32_t npy_f16_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 31)
        return sign | 0x7f800000u | (uint32_t)m << 13;   /* inf, NaN */
    if (e == 0)
        return m ? sign | subnormal_bits(m, -24) : sign;
    return sign | (uint32_t)(e + 112) << 23 | (uint32_t)m << 13;
}

/* f8e5m2 is the top byte of a binary16. */
uint32_t npy_f8e5m2_bits(uint8_t b)
{
    return npy_f16_bits((uint16_t)(b << 8));
}

/* The "fnuz" formats: no infinities, no negative zero, 0x80 the NaN. */
static uint32_t fnuz_bits(uint8_t b, unsigned mbits, int bias)
{
    if (b == 0x80)
        return 0x7fc00000u;
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    unsigned e = (b & 0x7f) >> mbits, m = b & ((1u << mbits) - 1);
    if (e == 0)
        return m ? sign | subnormal_bits(m, 1 - bias - (int)mbits) : sign;
    uint32_t exp = (uint32_t)((int)e - bias + 127);
    return sign | exp << 23 | (uint32_t)m << (23 - mbits);
}

uint32_t npy_f8e4m3fnuz_bits(uint8_t b)
{
    return fnuz_bits(b, 3, 8);
}

uint32_t npy_f8e5m2fnuz_bits(uint8_t b)
{
    return fnuz_bits(b, 2, 16);
}

uint32_t npy_f8e8m0_bits(uint8_t b)
{
    if (b == 0xff)
        return 0x7fc00000u;
    return b ? (uint32_t)b << 23 : 0x00400000u;   /* 2^-127: subnormal */
}

void npy_tables_init(npy_tables *t)
{
    for (unsigned b = 0; b < 256; b++) {
        t->f8e4m3[b] = npy_f8e4m3_bits((uint8_t)b);
        t->f8e5m2[b] = npy_f8e5m2_bits((uint8_t)b);
        t->f8e4m3fnuz[b] = npy_f8e4m3fnuz_bits((uint8_t)b);
        t->f8e5m2fnuz[b] = npy_f8e5m2fnuz_bits((uint8_t)b);
        t->f8e8m0[b] = npy_f8e8m0_bits((uint8_t)b);
    }
}

/* The loops work in blocks of WIDEN_BLOCK elements whose inner loop has a
 * constant trip count, so that GCC vectorizes them at -O2 too (its cheap
 * cost model leaves loops of unknown length alone). */
#define WIDEN_BLOCK 16

/* bf16 is the top half of a float32: shift it up. */
static void widen_bf16(const unsigned char *restrict src, size_t n,
                       unsigned char *restrict dst)
{
    size_t i = 0;
    for (; i + WIDEN_BLOCK <= n; i += WIDEN_BLOCK) {
        uint16_t h[WIDEN_BLOCK];
        uint32_t v[WIDEN_BLOCK];
        memcpy(h, src + 2 * i, sizeof h);
        for (int k = 0; k < WIDEN_BLOCK; k++)
            v[k] = (uint32_t)h[k] << 16;
        memcpy(dst + 4 * i, v, sizeof v);
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        uint32_t v = (uint32_t)h << 16;
        memcpy(dst + 4 * i, &v, 4);
    }
}

/* float8 goes through a 256-entry table. */
static void widen_table(const uint32_t *restrict table,
                        const unsigned char *restrict src, size_t n,
                        unsigned char *restrict dst)
{
    size_t i = 0;
    for (; i + WIDEN_BLOCK <= n; i += WIDEN_BLOCK) {
        uint32_t v[WIDEN_BLOCK];
        for (int k = 0; k < WIDEN_BLOCK; k++)
            v[k] = table[src[i + (size_t)k]];
        memcpy(dst + 4 * i, v, sizeof v);
    }
    for (; i < n; i++) {
        uint32_t v = table[src[i]];
        memcpy(dst + 4 * i, &v, 4);
    }
}

/* c32 is two binary16 per element: each becomes a float32. */
static void widen_c32(const unsigned char *restrict src, size_t n,
                      unsigned char *restrict dst)
{
    for (size_t i = 0; i < 2 * n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        uint32_t v = npy_f16_bits(h);
        memcpy(dst + 4 * i, &v, 4);
    }
}

/* The table of a float8 dtype, or NULL. */
static const uint32_t *table_of(const npy_tables *t, ckpt_dtype dt)
{
    switch (dt) {
    case CKPT_F8E4M3: return t->f8e4m3;
    case CKPT_F8E5M2: return t->f8e5m2;
    case CKPT_F8E4M3FNUZ: return t->f8e4m3fnuz;
    case CKPT_F8E5M2FNUZ: return t->f8e5m2fnuz;
    case CKPT_F8E8M0: return t->f8e8m0;
    default: return NULL;
    }
}

int npy_widen(const npy_tables *t, ckpt_dtype dt, const void *src,
              size_t n, void *dst)
{
    const uint32_t *table = table_of(t, dt);
    if (table)
        widen_table(table, src, n, dst);
    else if (dt == CKPT_BF16)
        widen_bf16(src, n, dst);
    else if (dt == CKPT_C32)
        widen_c32(src, n, dst);
    else
        return -EINVAL;
    return 0;
}
