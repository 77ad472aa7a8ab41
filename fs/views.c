/*
 * views.c - generated file content: the .npy view of a tensor (header, data
 * read through ckpt_read, float formats NumPy lacks widened to float32, both
 * by src/npy.c, which `ckpt unpack` uses too), metadata.json and the stats
 * text (see views.h).
 */
#include "views.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "export/stlayout.h"
#include "foreign/torchsave.h"
#include "common/npy.h"
#include "common/perm.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckptfs's .npy view assumes a little-endian host"
#endif

/* The largest widened element: complex64. */
#define VIEWS_WIDE_MAX 8

/* Elements widened per ckpt_read: bounds the temporary buffer of one read
 * (256 KiB of bf16) while keeping each library read large. */
#define WIDEN_BATCH ((uint64_t)128 << 10)

void views_tables_init(views_tables *t)
{
    npy_tables_init(t);
}

static void widen(ckpt_dtype dt, const views_tables *tab,
                  const unsigned char *src, size_t n, unsigned char *dst)
{
    npy_widen(tab, dt, src, n, dst);
}

/* ------------------------------------------------------------ header */

/* The header of tensor ti's .npy image: a byte object is the 1-D array
 * of its bytes. */
int views_npy_header(const ckpt_tensor_info *ti, char *buf, size_t cap)
{
    int64_t flat = (int64_t)ti->numel;
    if (ti->dtype == CKPT_BYTES)
        return npy_tensor_header(ti->dtype, 1, &flat, buf, cap);
    return npy_tensor_header(ti->dtype, ti->ndim, ti->shape, buf, cap);
}

int views_npy_layout(const ckpt_tensor_info *ti, views_npy *out)
{
    char hdr[VIEWS_NPY_HEADER_MAX];
    ckpt_dtype stored;
    if (!ckpt_dtype_npy_descr(ti->dtype, &stored))
        return -EINVAL;
    int h = views_npy_header(ti, hdr, sizeof hdr);
    if (h < 0)
        return h;
    size_t isz = ckpt_dtype_size(stored);
    if (ti->numel > ((uint64_t)INT64_MAX - (uint64_t)h) / isz)
        return -EOVERFLOW;
    *out = (views_npy){
        .header_len = (uint32_t)h,
        .out_itemsize = (uint32_t)isz,
        .widen = stored != ti->dtype ? ti->dtype : CKPT_DTYPE_INVALID,
        .size = (uint64_t)h + ti->numel * isz,
    };
    return 0;
}

/* ------------------------------------------------------------ BytesIO */

/* Reads an archive through the reader (for the zip and pickle readers). */
typedef struct item_src {
    ckpt_reader *r;
    size_t idx;
} item_src;

static int item_read(void *arg, void *buf, size_t n, uint64_t off,
                     ckpt_error *err)
{
    const item_src *s = arg;
    int64_t got = ckpt_read(s->r, s->idx, buf, off, n, err);
    if (got >= 0 && (uint64_t)got != n)
        return ckpt_err(err, -EIO, "short read of a byte item");
    return got < 0 ? (int)got : 0;
}

/* Decodes byte object idx into *b when it is a BytesIO archive. */
static int decode_one(ckpt_reader *r, size_t idx, const ckpt_tensor_info *ti,
                      views_blob *b)
{
    item_src src = { r, idx };
    unsigned char *val;
    size_t len;
    ckpt_error err = { 0 };
    int rc = ckpt_torch_bytesio_read(item_read, &src, ti->nbytes, ti->fqn,
                                     &val, &len, &err);
    if (rc <= 0)
        return rc;
    ckpt_tensor_info shown = *ti;
    int64_t dim = (int64_t)len;
    shown.numel = shown.nbytes = len;
    shown.ndim = 1;
    shown.shape = &dim;
    views_npy lay;
    rc = views_npy_layout(&shown, &lay);
    if (rc == 0 && !(b->npy = malloc(lay.header_len + len + 1)))
        rc = -ENOMEM;
    if (rc == 0) {
        views_npy_header(&shown, (char *)b->npy, lay.header_len);
        memcpy(b->npy + lay.header_len, val, len);
        b->header_len = lay.header_len;
        b->len = len;
        b->dim = (int64_t)len;
    }
    free(val);
    return rc == -ENOMEM ? rc : 0;
}

int views_bytesio(ckpt_reader *r, views_blob **out)
{
    *out = NULL;
    const char *fmt = ckpt_reader_meta_get(r, "source_format");
    if (!fmt || strcmp(fmt, "pytorch-dcp") != 0)
        return 0;
    size_t n = ckpt_reader_count(r);
    views_blob *v = NULL;
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info ti;
        if (ckpt_reader_info(r, i, &ti) != 0 || ti.dtype != CKPT_BYTES ||
            ti.nbytes > 2 * CKPT_BYTESIO_MAX + ((uint64_t)1 << 20))
            continue;
        if (!v && !(v = calloc(n, sizeof *v)))
            return -ENOMEM;
        int rc = decode_one(r, i, &ti, &v[i]);
        if (rc) {
            views_blobs_free(v, n);
            return rc;
        }
        found |= v[i].npy != NULL;
    }
    if (found)
        *out = v;
    else
        free(v);
    return 0;
}

void views_blobs_free(views_blob *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].npy);
    free(v);
}

/* ------------------------------------------------------------ reading */

/* Reads bytes [doff, doff + dlen) of the widened data (elements of out
 * bytes): the stored elements they cover are read batch by batch into tmp,
 * then widened into dst; a partly covered first or last element goes
 * through a one-element buffer. */
static int read_widened(ckpt_reader *r, size_t idx, ckpt_dtype dt,
                        size_t out, const views_tables *tab,
                        unsigned char *dst, uint64_t doff, uint64_t dlen,
                        ckpt_error *err)
{
    size_t in = ckpt_dtype_size(dt);
    uint64_t end = doff + dlen, e_end = (end + out - 1) / out;
    uint64_t batch = e_end - doff / out;
    if (batch > WIDEN_BATCH)
        batch = WIDEN_BATCH;
    unsigned char *tmp = malloc((size_t)batch * in);
    if (!tmp)
        return ckpt_err(err, -ENOMEM, "out of memory widening a read");
    int rc = 0;
    uint64_t pos = doff;
    while (rc == 0 && pos < end) {
        uint64_t e = pos / out, stop_e = e + batch < e_end ? e + batch : e_end;
        uint64_t stop = stop_e * out < end ? stop_e * out : end;
        int64_t got = ckpt_read(r, idx, tmp, e * in, (stop_e - e) * in, err);
        if (got < 0 || (uint64_t)got != (stop_e - e) * in) {
            rc = got < 0 ? (int)got
                         : ckpt_err(err, -EIO, "short read of %" PRIu64
                                " elements at element %" PRIu64, stop_e - e,
                                e);
            break;
        }
        const unsigned char *s = tmp;
        unsigned char one[VIEWS_WIDE_MAX];
        if (pos % out) {                     /* head: part of an element */
            uint64_t skip = pos % out, k = out - skip;
            if (k > stop - pos)
                k = stop - pos;
            widen(dt, tab, s, 1, one);
            memcpy(dst, one + skip, (size_t)k);
            dst += k;
            pos += k;
            s += in;
        }
        uint64_t full = (stop - pos) / out;
        widen(dt, tab, s, (size_t)full, dst);
        dst += out * full;
        pos += out * full;
        s += full * in;
        if (pos < stop) {                    /* tail: part of an element */
            widen(dt, tab, s, 1, one);
            memcpy(dst, one, (size_t)(stop - pos));
            dst += stop - pos;
            pos = stop;
        }
    }
    free(tmp);
    return rc;
}

int64_t views_npy_read(ckpt_reader *r, size_t idx, const ckpt_tensor_info *ti,
                       const views_npy *lay, const views_tables *tab,
                       unsigned char *dst, uint64_t off, uint64_t len,
                       ckpt_error *err)
{
    if (off >= lay->size || len == 0)
        return 0;
    if (len > lay->size - off)
        len = lay->size - off;
    uint64_t done = 0;
    if (off < lay->header_len) {
        char hdr[VIEWS_NPY_HEADER_MAX];
        int h = views_npy_header(ti, hdr, sizeof hdr);
        if (h != (int)lay->header_len)
            return ckpt_err(err, -EIO, "tensor '%s': .npy header of %d bytes "
                        "instead of %u", ti->fqn, h, lay->header_len);
        done = lay->header_len - off < len ? lay->header_len - off : len;
        memcpy(dst, hdr + off, (size_t)done);
    }
    if (done == len)
        return (int64_t)len;
    uint64_t doff = off + done - lay->header_len;
    if (lay->widen != CKPT_DTYPE_INVALID) {
        int rc = read_widened(r, idx, lay->widen, lay->out_itemsize, tab,
                              dst + done, doff, len - done, err);
        return rc < 0 ? rc : (int64_t)len;
    }
    int64_t got = ckpt_read(r, idx, dst + done, doff, len - done, err);
    return got < 0 ? got : (int64_t)done + got;
}

/* ------------------------------------------------------------ JSON */

typedef struct strbuf {
    char *p;
    size_t n, cap;
    int failed;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(strbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void sb_printf(strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void sb_printf(strbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp)
        b->failed = 1;
    else
        sb_add(b, tmp, (size_t)k);
}

/* Length of the valid UTF-8 sequence at s, or 0 if there is none. */
static size_t utf8_valid(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* A JSON string: quotes, backslashes and control bytes escaped; bytes
 * that are not UTF-8 become U+FFFD, so the document is always valid. */
static void sb_json_string(strbuf *b, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    sb_add(b, "\"", 1);
    while (*s) {
        size_t run = 0;
        while (s[run] >= 0x20 && s[run] < 0x80 && s[run] != '"' &&
               s[run] != '\\')
            run++;
        sb_add(b, (const char *)s, run);
        s += run;
        if (!*s)
            break;
        size_t n = utf8_valid(s);
        if (*s == '"' || *s == '\\') {
            char esc[2] = { '\\', (char)*s };
            sb_add(b, esc, 2);
        } else if (*s < 0x20) {
            sb_printf(b, "\\u%04x", *s);
        } else if (n > 1) {
            sb_add(b, (const char *)s, n);
            s += n - 1;
        } else {
            sb_puts(b, "\\ufffd");
        }
        s++;
    }
    sb_add(b, "\"", 1);
}

static void sb_json_dims(strbuf *b, int ndim, const int64_t *dims)
{
    sb_add(b, "[", 1);
    for (int i = 0; i < ndim; i++)
        sb_printf(b, "%s%" PRId64, i ? ", " : "", dims[i]);
    sb_add(b, "]", 1);
}

static void json_meta(strbuf *b, const ckpt_reader *r)
{
    size_t n = ckpt_reader_meta_count(r);
    sb_puts(b, "{\n  \"meta\": {");
    for (size_t i = 0; i < n; i++) {
        const char *k, *v;
        if (ckpt_reader_meta_at(r, i, &k, &v) != 0)
            continue;
        sb_puts(b, i ? ",\n    " : "\n    ");
        sb_json_string(b, k);
        sb_puts(b, ": ");
        sb_json_string(b, v);
    }
    sb_puts(b, n ? "\n  },\n" : "},\n");
}

static void json_chunk(strbuf *b, const ckpt_chunk_info *ch, int ndim)
{
    sb_puts(b, "{\"offsets\": ");
    sb_json_dims(b, ndim, ch->offsets);
    sb_puts(b, ", \"sizes\": ");
    sb_json_dims(b, ndim, ch->sizes);
    sb_puts(b, ", \"file\": ");
    sb_json_string(b, ch->file);
    sb_printf(b, ", \"nframes\": %" PRIu64 ", \"raw_bytes\": %" PRIu64
              ", \"stored_bytes\": %" PRIu64 "}", ch->nframes, ch->raw_bytes,
              ch->stored_bytes);
}

static void json_tensor(strbuf *b, const ckpt_reader *r, size_t t,
                        const ckpt_tensor_info *ti)
{
    sb_json_string(b, ti->fqn);
    sb_puts(b, ": {\n      \"dtype\": ");
    sb_json_string(b, ckpt_dtype_name(ti->dtype));
    sb_puts(b, ", \"shape\": ");
    sb_json_dims(b, ti->ndim, ti->shape);
    sb_printf(b, ", \"numel\": %" PRIu64 ", \"nbytes\": %" PRIu64
              ",\n      \"stored_bytes\": %" PRIu64 ", \"codecs\": ",
              ti->numel, ti->nbytes, ti->stored_bytes);
    sb_json_string(b, ti->codecs);
    sb_printf(b, ", \"nframes\": %" PRIu64 ",\n      \"chunks\": [",
              ti->nframes);
    for (size_t c = 0; c < ti->nchunks; c++) {
        ckpt_chunk_info ch;
        if (ckpt_reader_chunk(r, t, c, &ch) != 0) {
            b->failed = 1;
            return;
        }
        sb_puts(b, c ? ",\n        " : "\n        ");
        json_chunk(b, &ch, ti->ndim);
    }
    sb_puts(b, ti->nchunks ? "\n      ]\n    }" : "]\n    }");
}

int views_metadata_json(const ckpt_reader *r, char **out, size_t *len)
{
    strbuf b = { 0 };
    size_t n = ckpt_reader_count(r);
    json_meta(&b, r);
    sb_puts(&b, "  \"tensors\": {");
    for (size_t t = 0; t < n && !b.failed; t++) {
        ckpt_tensor_info ti;
        if (ckpt_reader_info(r, t, &ti) != 0) {
            b.failed = 1;
            break;
        }
        sb_puts(&b, t ? ",\n    " : "\n    ");
        json_tensor(&b, r, t, &ti);
    }
    sb_puts(&b, n ? "\n  }\n}\n" : "}\n}\n");
    if (b.failed) {
        free(b.p);
        return -ENOMEM;
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

/* ------------------------------------------------------------ stats */

size_t views_stats(const ckpt_reader *r, char *buf, size_t cap)
{
    ckpt_stats st;
    ckpt_reader_stats(r, &st);
    int k = snprintf(buf, cap,
                     "frames_decoded %" PRIu64 "\n"
                     "cache_hits %" PRIu64 "\n"
                     "cache_misses %" PRIu64 "\n"
                     "bytes_read %" PRIu64 "\n"
                     "bytes_served %" PRIu64 "\n",
                     st.frames_decoded, st.cache_hits, st.cache_misses,
                     st.bytes_read, st.bytes_served);
    return k < 0 ? 0 : (size_t)k;
}

/* ------------------------------------------------------------ .safetensors/ */

struct views_st {
    st_layout l;
};

int views_st_build(const ckpt_reader *r, uint64_t max_shard,
                   views_st **out)
{
    size_t n = ckpt_reader_count(r), k = 0;
    st_input *in = calloc(n ? n : 1, sizeof *in);
    views_st *v = calloc(1, sizeof *v);
    if (!in || !v) {
        free(in);
        free(v);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        ckpt_tensor_info ti;
        if (ckpt_reader_info(r, i, &ti) == 0 && st_dtype_name(ti.dtype))
            in[k++] = (st_input){ i, ti.dtype };
    }
    int rc = st_layout_build(&v->l, r, in, k, max_shard, NULL);
    free(in);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    return 0;
}

void views_st_free(views_st *v)
{
    if (!v)
        return;
    st_layout_free(&v->l);
    free(v);
}

size_t views_st_count(const views_st *v)
{
    return v ? v->l.nshards : 0;
}

const char *views_st_name(const views_st *v, size_t shard)
{
    return v->l.s[shard].name;
}

uint64_t views_st_size(const views_st *v, size_t shard)
{
    return v->l.s[shard].size;
}

const char *views_st_index(const views_st *v, size_t *len)
{
    *len = v->l.index_len;
    return v->l.index;
}

int64_t views_st_read(ckpt_reader *r, const views_st *v, size_t shard,
                      unsigned char *dst, uint64_t off, uint64_t len,
                      ckpt_error *err)
{
    const st_shard *s = &v->l.s[shard];
    if (off >= s->size)
        return 0;
    if (len > s->size - off)
        len = s->size - off;
    uint64_t done = 0;
    while (done < len) {
        uint64_t at = off + done, want = len - done;
        if (at < s->header_len) {
            uint64_t k = s->header_len - at < want ? s->header_len - at : want;
            memcpy(dst + done, s->header + at, (size_t)k);
            done += k;
            continue;
        }
        const st_entry *e = st_layout_find(&v->l, s, at);
        if (!e)
            return ckpt_err(err, -EIO, "%s: no tensor at byte %" PRIu64,
                            s->name, at);
        uint64_t k = e->off + e->nbytes - at < want ? e->off + e->nbytes - at
                                                    : want;
        int64_t got = ckpt_read(r, e->idx, dst + done, at - e->off, k, err);
        if (got < 0)
            return got;
        if ((uint64_t)got != k)
            return ckpt_err(err, -EIO, "%s: short read of a tensor at byte "
                            "%" PRIu64, s->name, at);
        done += k;
    }
    return (int64_t)len;
}

int views_st_perm(ckpt_reader *r, const views_st *v, size_t shard,
                  ckpt_perm *out)
{
    int rc = ckpt_reader_perm(r, (size_t)-1, out, NULL);
    const st_shard *s = &v->l.s[shard];
    for (size_t i = s->first; i < s->first + s->count && rc == 0; i++) {
        ckpt_perm q;
        rc = ckpt_reader_perm(r, v->l.e[i].idx, &q, NULL);
        struct stat st = { .st_uid = q.uid, .st_gid = q.gid,
                           .st_mode = (mode_t)q.mode };
        if (rc == 0)
            ckpt_perm_add(out, &st);   /* what every tensor's files allow */
    }
    return rc;
}
