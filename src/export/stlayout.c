/*
 * stlayout.c - the layout of safetensors files (stlayout.h): order,
 * shards, headers and the index.
 */
#include "export/stlayout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/strbuf.h"

const char *st_dtype_name(ckpt_dtype dt)
{
    static const char *const names[CKPT_DTYPE_COUNT] = {
        [CKPT_F64] = "F64", [CKPT_F32] = "F32", [CKPT_F16] = "F16",
        [CKPT_BF16] = "BF16", [CKPT_F8E4M3] = "F8_E4M3",
        [CKPT_F8E5M2] = "F8_E5M2", [CKPT_I64] = "I64", [CKPT_I32] = "I32",
        [CKPT_I16] = "I16", [CKPT_I8] = "I8", [CKPT_U64] = "U64",
        [CKPT_U32] = "U32", [CKPT_U16] = "U16", [CKPT_U8] = "U8",
        [CKPT_BOOL] = "BOOL", [CKPT_C64] = "C64", [CKPT_F8E8M0] = "F8_E8M0",
    };
    return dt > CKPT_DTYPE_INVALID && dt < CKPT_DTYPE_COUNT ? names[dt]
                                                            : NULL;
}

/* ------------------------------------------------------------ JSON text */

static void putu(ckpt_strbuf *t, uint64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    ckpt_strbuf_add(t, b, (size_t)n);
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_json_str(ckpt_strbuf *t, const char *s)
{
    ckpt_strbuf_add(t, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            ckpt_strbuf_add(t, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            ckpt_strbuf_add(t, e, 6);
        } else {
            ckpt_strbuf_add(t, s, 1);
        }
    }
    ckpt_strbuf_add(t, "\"", 1);
}

static void put_metadata(const ckpt_reader *r, ckpt_strbuf *t)
{
    ckpt_strbuf_puts(t, "\"__metadata__\":{");
    int has_format = 0;
    size_t m = ckpt_reader_meta_count(r);
    for (size_t i = 0; i < m; i++) {
        const char *k, *v;
        if (ckpt_reader_meta_at(r, i, &k, &v) != 0)
            continue;
        has_format |= strcmp(k, "format") == 0;
        put_json_str(t, k);
        ckpt_strbuf_add(t, ":", 1);
        put_json_str(t, v);
        ckpt_strbuf_add(t, ",", 1);
    }
    if (!has_format)
        ckpt_strbuf_puts(t, "\"format\":\"pt\",");
    if (!t->oom)
        t->p[t->len - 1] = '}';       /* the last comma */
}

/* ------------------------------------------------------------ order */

typedef struct sortkey {
    const char *fqn;
    size_t itemsize;
    size_t in;              /* index into the input */
} sortkey;

static int by_layout(const void *a, const void *b)
{
    const sortkey *x = a, *y = b;
    if (x->itemsize != y->itemsize)
        return x->itemsize > y->itemsize ? -1 : 1;
    return strcmp(x->fqn, y->fqn);
}

/* ------------------------------------------------------------ shards */

/* Shard s's header: entries [first, first + count) of l, whose info is
 * in ti and dtypes in dt (by entry). */
static int build_header(const ckpt_reader *r, st_layout *l, st_shard *s,
                        const ckpt_dtype *dt)
{
    ckpt_strbuf t = { 0 };
    ckpt_strbuf_add(&t, "\0\0\0\0\0\0\0\0{", 9);
    put_metadata(r, &t);
    uint64_t off = 0;
    for (size_t i = s->first; i < s->first + s->count; i++) {
        ckpt_tensor_info ti;
        ckpt_reader_info(r, l->e[i].idx, &ti);
        ckpt_strbuf_add(&t, ",", 1);
        put_json_str(&t, ti.fqn);
        ckpt_strbuf_puts(&t, ":{\"dtype\":\"");
        ckpt_strbuf_puts(&t, st_dtype_name(dt[i]));
        ckpt_strbuf_puts(&t, "\",\"shape\":[");
        int ndim = dt[i] == CKPT_U8 && ti.dtype == CKPT_BYTES ? 1 : ti.ndim;
        for (int d = 0; d < ndim; d++) {
            if (d)
                ckpt_strbuf_add(&t, ",", 1);
            putu(&t, ti.dtype == CKPT_BYTES ? ti.nbytes :
                     (uint64_t)ti.shape[d]);
        }
        ckpt_strbuf_puts(&t, "],\"data_offsets\":[");
        putu(&t, off);
        ckpt_strbuf_add(&t, ",", 1);
        off += l->e[i].nbytes;
        putu(&t, off);
        ckpt_strbuf_puts(&t, "]}");
    }
    ckpt_strbuf_add(&t, "}", 1);
    while (!t.oom && t.len % 8)
        ckpt_strbuf_add(&t, " ", 1);
    if (t.oom) {
        ckpt_strbuf_free(&t);
        return -ENOMEM;
    }
    uint64_t n = t.len - 8;
    for (int i = 0; i < 8; i++)
        t.p[i] = (char)(n >> (8 * i));
    s->header = t.p;
    s->header_len = t.len;
    for (size_t i = s->first; i < s->first + s->count; i++)
        l->e[i].off += t.len;
    s->size = t.len + off;
    return 0;
}

static int build_index(const ckpt_reader *r, st_layout *l)
{
    ckpt_strbuf t = { 0 };
    uint64_t total = 0;
    for (size_t i = 0; i < l->n; i++)
        total += l->e[i].nbytes;
    ckpt_strbuf_puts(&t, "{\n  \"metadata\": {\"total_size\": ");
    putu(&t, total);
    ckpt_strbuf_puts(&t, "},\n  \"weight_map\": {");
    for (size_t s = 0; s < l->nshards; s++)
        for (size_t i = l->s[s].first; i < l->s[s].first + l->s[s].count;
             i++) {
            ckpt_tensor_info ti;
            ckpt_reader_info(r, l->e[i].idx, &ti);
            ckpt_strbuf_puts(&t, i ? ",\n    " : "\n    ");
            put_json_str(&t, ti.fqn);
            ckpt_strbuf_puts(&t, ": ");
            put_json_str(&t, l->s[s].name);
        }
    ckpt_strbuf_puts(&t, "\n  }\n}\n");
    if (t.oom) {
        ckpt_strbuf_free(&t);
        return -ENOMEM;
    }
    l->index = t.p;
    l->index_len = t.len;
    return 0;
}

/* Splits the ordered entries into shards; returns the number. */
static size_t split(st_layout *l, size_t *shard_of, uint64_t max)
{
    size_t s = 0;
    uint64_t used = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (used > 0 && used + l->e[i].nbytes > max) {
            s++;
            used = 0;
        }
        shard_of[i] = s;
        l->e[i].off = used;
        used += l->e[i].nbytes;
    }
    return s + 1;
}

static int make_shards(const ckpt_reader *r, st_layout *l,
                       const ckpt_dtype *dt, uint64_t max)
{
    size_t *shard_of = calloc(l->n ? l->n : 1, sizeof *shard_of);
    if (!shard_of)
        return -ENOMEM;
    l->nshards = split(l, shard_of, max);
    l->s = calloc(l->nshards, sizeof *l->s);
    int rc = l->s ? 0 : -ENOMEM;
    for (size_t i = 0; i < l->n && rc == 0; i++)
        l->s[shard_of[i]].count++;
    for (size_t s = 0, first = 0; s < l->nshards && rc == 0; s++) {
        st_shard *sh = &l->s[s];
        sh->first = first;
        first += sh->count;
        if (l->nshards == 1)
            snprintf(sh->name, sizeof sh->name, "model.safetensors");
        else
            snprintf(sh->name, sizeof sh->name,
                     "model-%05zu-of-%05zu.safetensors", s + 1, l->nshards);
        rc = build_header(r, l, sh, dt);
    }
    if (rc == 0 && l->nshards > 1)
        rc = build_index(r, l);
    free(shard_of);
    return rc;
}

int st_layout_build(st_layout *out, const ckpt_reader *r,
                    const st_input *in, size_t n, uint64_t max_shard,
                    ckpt_error *err)
{
    memset(out, 0, sizeof *out);
    sortkey *k = calloc(n ? n : 1, sizeof *k);
    ckpt_dtype *dt = calloc(n ? n : 1, sizeof *dt);
    out->e = calloc(n ? n : 1, sizeof *out->e);
    int rc = k && dt && out->e ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && rc == 0; i++) {
        ckpt_tensor_info ti;
        ckpt_reader_info(r, in[i].idx, &ti);
        k[i] = (sortkey){ ti.fqn, ckpt_dtype_size(in[i].dtype), i };
    }
    if (rc == 0)
        qsort(k, n, sizeof *k, by_layout);
    for (size_t i = 0; i < n && rc == 0; i++) {
        ckpt_tensor_info ti;
        ckpt_reader_info(r, in[k[i].in].idx, &ti);
        out->e[i] = (st_entry){ .idx = in[k[i].in].idx, .nbytes = ti.nbytes };
        dt[i] = in[k[i].in].dtype;
    }
    out->n = n;
    if (rc == 0)
        rc = make_shards(r, out, dt, max_shard);
    free(k);
    free(dt);
    if (rc) {
        st_layout_free(out);
        return ckpt_err(err, rc, "out of memory for the safetensors "
                        "headers of %zu tensors", n);
    }
    return 0;
}

void st_layout_free(st_layout *l)
{
    for (size_t s = 0; l->s && s < l->nshards; s++)
        free(l->s[s].header);
    free(l->s);
    free(l->e);
    free(l->index);
    memset(l, 0, sizeof *l);
}

const st_entry *st_layout_find(const st_layout *l, const st_shard *s,
                               uint64_t off)
{
    size_t lo = s->first, hi = s->first + s->count;
    while (lo < hi) {             /* the last entry starting at or before off */
        size_t mid = lo + (hi - lo) / 2;
        if (l->e[mid].off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == s->first)
        return NULL;
    const st_entry *e = &l->e[lo - 1];
    return off < e->off + e->nbytes ? e : NULL;
}
