/*
 * dcpst.c - safetensors-serialized DCP items (see dcpst.h).  torch 2.x's
 * FileSystemWriter with SerializationFormat.SAFETENSORS writes a file's
 * byte items first, then safetensors.torch.save of all its tensors (named
 * by FQN, with __metadata__ DCP_SHARDING_INFO = JSON {fqn:
 * {"saved_offsets": [...]}}), and records every tensor item at the offset
 * where that blob starts, with the tensor's byte count as its length.
 * The blob's header is parsed once (safetensors.c) and each item is found
 * in it by name.
 */
#include "foreign/dcpst.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/grow.h"
#include "common/json.h"
#include "foreign/safetensors.h"

typedef struct dcp_st_blob {
    char *file;
    uint64_t base;
    ckpt_st_header h;
    json_val sharding;      /* DCP_SHARDING_INFO parsed, or JSON_NULL */
} dcp_st_blob;

void dcp_st_cache_free(dcp_st_cache *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].file);
        ckpt_st_header_free(&c->v[i].h);
        json_free(&c->v[i].sharding);
    }
    free(c->v);
    memset(c, 0, sizeof *c);
}

int dcp_st_looks_like(const unsigned char *head, size_t n)
{
    /* a little-endian header length, then the JSON object's '{' */
    return n >= 9 && head[8] == '{' && head[7] == 0 && head[6] == 0;
}

/* The DCP_SHARDING_INFO of a blob's __metadata__, parsed (JSON_NULL when
 * it has none). */
static int parse_sharding(dcp_st_blob *b, const char *path, ckpt_error *err)
{
    const json_val *m = json_get(&b->h.j, "__metadata__");
    const json_val *s = m ? json_get(m, "DCP_SHARDING_INFO") : NULL;
    if (!s)
        return 0;
    if (s->type != JSON_STRING)
        return ckpt_err(err, -EINVAL, "%s: DCP_SHARDING_INFO is not a "
                        "string", path);
    return json_parse(s->s, s->len, path, &b->sharding, err);
}

static int find_blob(dcp_st_cache *c, const dcp_st_item *it,
                     dcp_st_blob **out, ckpt_error *err)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->v[i].base == it->base && strcmp(c->v[i].file, it->file) == 0) {
            *out = &c->v[i];
            return 0;
        }
    dcp_st_blob *nv = ckpt_grow(c->v, c->n, &c->cap, sizeof *nv, 4);
    if (!nv)
        return ckpt_err(err, -ENOMEM, "out of memory");
    c->v = nv;
    dcp_st_blob *b = &c->v[c->n];
    memset(b, 0, sizeof *b);
    if (!(b->file = strdup(it->file)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    b->base = it->base;
    int rc = ckpt_st_header_read(it->fd, it->path, it->base, &b->h, err);
    if (rc == 0)
        rc = parse_sharding(b, it->path, err);
    if (rc) {
        ckpt_st_header_free(&b->h);
        json_free(&b->sharding);
        free(b->file);
        return ckpt_err_wrap(err, rc, "the safetensors blob at byte %llu",
                             (unsigned long long)it->base);
    }
    c->n++;
    *out = b;
    return 0;
}

/* The blob's saved_offsets of the item's FQN agree with .metadata's. */
static int check_offsets(const dcp_st_blob *b, const dcp_st_item *it,
                         const char *what, ckpt_error *err)
{
    const json_val *e = json_get(&b->sharding, it->fqn);
    const json_val *so = e ? json_get(e, "saved_offsets") : NULL;
    if (b->sharding.type == JSON_NULL && !e)
        return 0;
    int same = so && so->type == JSON_ARRAY && so->n == (size_t)it->ndim;
    for (int k = 0; same && k < it->ndim; k++)
        same = so->items[k].type == JSON_NUMBER && so->items[k].is_int &&
               so->items[k].i == it->offsets[k];
    if (!same)
        return ckpt_err(err, -EINVAL, "%s: the blob's DCP_SHARDING_INFO "
                        "does not give it the chunk offsets .metadata gives",
                        what);
    return 0;
}

int dcp_st_locate(dcp_st_cache *c, const dcp_st_item *it,
                  uint64_t *data_offset, ckpt_error *err)
{
    char what[600];
    snprintf(what, sizeof what, "tensor '%.200s': safetensors item at byte "
             "%llu of %.200s", it->fqn, (unsigned long long)it->base,
             it->file);
    dcp_st_blob *b = NULL;
    int rc = find_blob(c, it, &b, err);
    if (rc)
        return ckpt_err_wrap(err, rc, "tensor '%s'", it->fqn);
    const json_val *e = json_get(&b->h.j, it->fqn);
    if (!e)
        return ckpt_err(err, -EINVAL, "%s: the blob there has no tensor of "
                        "that name", what);
    ckpt_st_entry en;
    if ((rc = ckpt_st_entry_parse(&b->h, it->path, it->fqn, e, &en, err)))
        return rc;
    int same = en.ndim == it->ndim;
    for (int k = 0; same && k < it->ndim; k++)
        same = en.shape[k] == it->sizes[k];
    if (en.dtype != it->dtype)
        return ckpt_err(err, -EINVAL, "%s: holds %s data where .metadata "
                        "says %s", what, ckpt_dtype_name(en.dtype),
                        ckpt_dtype_name(it->dtype));
    if (!same)
        return ckpt_err(err, -EINVAL, "%s: its tensor's shape differs from "
                        "the chunk's sizes in .metadata", what);
    if (en.end - en.begin != it->length)
        return ckpt_err(err, -EINVAL, "%s: %llu bytes in the blob, %llu in "
                        ".metadata", what,
                        (unsigned long long)(en.end - en.begin),
                        (unsigned long long)it->length);
    if ((rc = check_offsets(b, it, what, err)))
        return rc;
    *data_offset = b->h.data_start + en.begin;
    return 0;
}
