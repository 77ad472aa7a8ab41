/*
 * st_out.c - ckpt_export to safetensors: one file (an 8-byte header size,
 * the JSON header, the tensors' bytes back to back), or a Hugging Face
 * folder of one model.safetensors, or of model-0000i-of-0000n.safetensors
 * shards of at most max_shard_size tensor bytes each with
 * model.safetensors.index.json.  Tensors are laid out as safetensors'
 * save_file lays them out (larger dtypes first, then by name), so that
 * every tensor is aligned to its element size; __metadata__ holds the
 * checkpoint's metadata and "format": "pt" (which transformers requires).
 */
#include "export/export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/strbuf.h"
#include "export/sink.h"

typedef ckpt_strbuf text;

static void put(text *t, const char *s, size_t n)
{
    ckpt_strbuf_add(t, s, n);
}

static void puts_(text *t, const char *s)
{
    ckpt_strbuf_puts(t, s);
}

static void putu(text *t, uint64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    put(t, b, (size_t)n);
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_json_str(text *t, const char *s)
{
    put(t, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = { '\\', (char)c };
            put(t, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            put(t, e, 6);
        } else {
            put(t, s, 1);
        }
    }
    put(t, "\"", 1);
}

/* ------------------------------------------------------------ layout */

static int by_layout(const void *a, const void *b)
{
    const exp_item *x = *(const exp_item *const *)a;
    const exp_item *y = *(const exp_item *const *)b;
    size_t sx = ckpt_dtype_size(x->out), sy = ckpt_dtype_size(y->out);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->fqn, y->fqn);
}

/* The shard of each item in layout order: a shard is closed before the
 * tensor that would take it past max (a tensor larger than max gets a
 * shard of its own, as HF does).  Returns the number of shards. */
static size_t plan_shards(const exp_job *j, exp_item **order, size_t *shard,
                          uint64_t max)
{
    size_t s = 0;
    uint64_t used = 0;
    for (size_t i = 0; i < j->n; i++) {
        if (used > 0 && used + order[i]->out_bytes > max) {
            s++;
            used = 0;
        }
        shard[i] = s;
        used += order[i]->out_bytes;
    }
    return j->n ? s + 1 : 1;
}

static void put_metadata(const exp_job *j, text *t)
{
    puts_(t, "\"__metadata__\":{");
    int has_format = 0;
    size_t m = ckpt_reader_meta_count(j->r);
    for (size_t i = 0; i < m; i++) {
        const char *k, *v;
        if (ckpt_reader_meta_at(j->r, i, &k, &v) != 0)
            continue;
        has_format |= strcmp(k, "format") == 0;
        put_json_str(t, k);
        put(t, ":", 1);
        put_json_str(t, v);
        put(t, ",", 1);
    }
    if (!has_format)
        puts_(t, "\"format\":\"pt\",");
    if (!t->oom)
        t->p[t->len - 1] = '}';       /* the last comma */
}

/* The header of the items [a, b) of order, padded with spaces to a
 * multiple of 8 bytes (as safetensors pads it). */
static int build_header(const exp_job *j, exp_item **order, size_t a,
                        size_t b, text *t, ckpt_error *err)
{
    put(t, "{", 1);
    put_metadata(j, t);
    uint64_t off = 0;
    for (size_t i = a; i < b; i++) {
        const exp_item *it = order[i];
        put(t, ",", 1);
        put_json_str(t, it->fqn);
        puts_(t, ":{\"dtype\":\"");
        puts_(t, exp_st_dtype(it->out));
        puts_(t, "\",\"shape\":[");
        for (int d = 0; d < it->ndim; d++) {
            if (d)
                put(t, ",", 1);
            putu(t, (uint64_t)it->shape[d]);
        }
        puts_(t, "],\"data_offsets\":[");
        putu(t, off);
        put(t, ",", 1);
        off += it->out_bytes;
        putu(t, off);
        puts_(t, "]}");
    }
    put(t, "}", 1);
    while (!t->oom && (t->len + 8) % 8)
        put(t, " ", 1);
    if (t->oom)
        return ckpt_err(err, -ENOMEM, "out of memory for a safetensors "
                        "header");
    return 0;
}

/* Writes one safetensors file of the items [a, b) of order. */
static int write_file(exp_job *j, exp_item **order, size_t a, size_t b,
                      const char *path, ckpt_error *err)
{
    text t = { 0 };
    int rc = build_header(j, order, a, b, &t, err);
    exp_sink s = { .fd = -1 };
    if (rc == 0)
        rc = exp_sink_create(&s, path, err);
    if (rc == 0) {
        unsigned char n8[8];
        for (int i = 0; i < 8; i++)
            n8[i] = (unsigned char)((uint64_t)t.len >> (8 * i));
        rc = exp_sink_write(&s, n8, 8, err);
        if (rc == 0)
            rc = exp_sink_write(&s, t.p, t.len, err);
        for (size_t i = a; i < b && rc == 0; i++)
            rc = exp_copy(j, order[i], &s, NULL, err);
        int crc = exp_sink_close(&s, j->o.sync, err);
        if (rc == 0)
            rc = crc;
    }
    ckpt_strbuf_free(&t);
    return rc;
}

/* model.safetensors.index.json of a sharded folder. */
static int write_index(const exp_job *j, exp_item **order,
                       const size_t *shard, size_t nshards, const char *dir,
                       ckpt_error *err)
{
    text t = { 0 };
    uint64_t total = 0;
    for (size_t i = 0; i < j->n; i++)
        total += order[i]->out_bytes;
    puts_(&t, "{\n  \"metadata\": {\"total_size\": ");
    putu(&t, total);
    puts_(&t, "},\n  \"weight_map\": {");
    for (size_t i = 0; i < j->n; i++) {
        char f[64];
        snprintf(f, sizeof f, "model-%05zu-of-%05zu.safetensors",
                 shard[i] + 1, nshards);
        puts_(&t, i ? ",\n    " : "\n    ");
        put_json_str(&t, order[i]->fqn);
        puts_(&t, ": ");
        put_json_str(&t, f);
    }
    puts_(&t, "\n  }\n}\n");
    char *path = NULL;
    int rc = t.oom || asprintf(&path, "%s/model.safetensors.index.json",
                               dir) < 0 ?
             ckpt_err(err, -ENOMEM, "out of memory") : 0;
    if (rc == 0)
        rc = exp_sink_file(path, t.p, t.len, j->o.sync, err);
    free(path);
    ckpt_strbuf_free(&t);
    return rc;
}

static int write_shards(exp_job *j, exp_item **order, const char *dir,
                        ckpt_error *err)
{
    size_t *shard = calloc(j->n ? j->n : 1, sizeof *shard);
    if (!shard)
        return ckpt_err(err, -ENOMEM, "out of memory");
    size_t ns = plan_shards(j, order, shard, j->o.max_shard_size);
    int rc = 0;
    char *path = NULL;
    if (ns == 1) {
        rc = asprintf(&path, "%s/model.safetensors", dir) < 0 ?
             ckpt_err(err, -ENOMEM, "out of memory") :
             write_file(j, order, 0, j->n, path, err);
        free(path);
        free(shard);
        return rc;
    }
    for (size_t a = 0; a < j->n && rc == 0;) {
        size_t b = a;
        while (b < j->n && shard[b] == shard[a])
            b++;
        rc = asprintf(&path, "%s/model-%05zu-of-%05zu.safetensors", dir,
                      shard[a] + 1, ns) < 0 ?
             ckpt_err(err, -ENOMEM, "out of memory") :
             write_file(j, order, a, b, path, err);
        free(path);
        path = NULL;
        a = b;
    }
    if (rc == 0)
        rc = write_index(j, order, shard, ns, dir, err);
    free(shard);
    return rc;
}

int exp_write_safetensors(exp_job *j, const char *tmp, int folder,
                          ckpt_error *err)
{
    exp_item **order = malloc((j->n ? j->n : 1) * sizeof *order);
    if (!order)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < j->n; i++)
        order[i] = &j->items[i];
    qsort(order, j->n, sizeof *order, by_layout);
    int rc;
    if (folder) {
        rc = write_shards(j, order, tmp, err);
    } else {
        rc = write_file(j, order, 0, j->n, tmp, err);
    }
    free(order);
    return rc;
}
