/*
 * pieces.c - the compact table of pieces (see pieces.h): interned strings
 * in an arena with an open-addressing hash, dims and frames in shared
 * arrays that grow by doubling.
 */
#include "format/pieces.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void ckpt_pieces_init(ckpt_pieces *t)
{
    memset(t, 0, sizeof *t);
}

void ckpt_pieces_free(ckpt_pieces *t)
{
    free(t->v);
    free(t->dims);
    free(t->frames);
    free(t->arena);
    free(t->str_off);
    free(t->slots);
    free(t->shapes);
    free(t->shape_at);
    free(t->shape_slots);
    ckpt_pieces_init(t);
}

/* Makes room for `more` elements of `size` after *n in *arr. */
static int reserve(void **arr, size_t *cap, size_t n, size_t more,
                   size_t size)
{
    if (more > SIZE_MAX - n)
        return -ENOMEM;
    return ckpt_array_reserve(arr, cap, n + more, size);
}

/* ------------------------------------------------------------ strings */

static size_t slot_of(const char *s, size_t len, size_t nslots)
{
    return (size_t)XXH3_64bits(s, len) & (nslots - 1);
}

/* Doubles the hash table (load stays at most 1/2). */
static int rehash(ckpt_pieces *t)
{
    size_t ns = t->nslots ? 2 * t->nslots : 64;
    uint32_t *slots = calloc(ns, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    for (uint32_t k = 0; k < t->nstr; k++) {
        const char *s = t->arena + t->str_off[k];
        size_t h = slot_of(s, strlen(s), ns);
        while (slots[h])
            h = (h + 1) & (ns - 1);
        slots[h] = k + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = ns;
    return 0;
}

/* The id of s, added when new; CKPT_PIECES_NONE for NULL.  -ENOMEM as a
 * negative value in *rc. */
static uint32_t intern(ckpt_pieces *t, const char *s, int *rc)
{
    if (!s)
        return CKPT_PIECES_NONE;
    if ((size_t)t->nstr + 1 > t->nslots / 2 && (*rc = rehash(t)))
        return CKPT_PIECES_NONE;
    size_t len = strlen(s), h = slot_of(s, len, t->nslots);
    for (; t->slots[h]; h = (h + 1) & (t->nslots - 1)) {
        uint32_t k = t->slots[h] - 1;
        if (!strcmp(t->arena + t->str_off[k], s))
            return k;
    }
    if (t->nstr >= CKPT_PIECES_NONE - 1 ||
        reserve((void **)&t->str_off, &t->str_cap, t->nstr, 1,
                sizeof *t->str_off) ||
        reserve((void **)&t->arena, &t->arena_cap, t->arena_len, len + 1,
                1)) {
        *rc = -ENOMEM;
        return CKPT_PIECES_NONE;
    }
    memcpy(t->arena + t->arena_len, s, len + 1);
    t->str_off[t->nstr] = t->arena_len;
    t->arena_len += len + 1;
    t->slots[h] = t->nstr + 1;
    return t->nstr++;
}

/* ------------------------------------------------------------ shapes */

static size_t shape_slot(int nd, const int64_t *v, size_t nslots)
{
    return (size_t)(XXH3_64bits(v, (size_t)nd * sizeof *v) ^ (uint64_t)nd) &
           (nslots - 1);
}

static const int64_t *shape_of(const ckpt_pieces *t, uint32_t k)
{
    return t->shapes + t->shape_at[k];
}

/* Doubles the shapes' hash table (load stays at most 1/2). */
static int shape_rehash(ckpt_pieces *t)
{
    size_t ns = t->nshape_slots ? 2 * t->nshape_slots : 64;
    uint32_t *slots = calloc(ns, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    for (uint32_t k = 0; k < t->nshape; k++) {
        const int64_t *s = shape_of(t, k);
        size_t h = shape_slot((int)s[0], s + 1, ns);
        while (slots[h])
            h = (h + 1) & (ns - 1);
        slots[h] = k + 1;
    }
    free(t->shape_slots);
    t->shape_slots = slots;
    t->nshape_slots = ns;
    return 0;
}

/* The id of shape v[0..nd), added when new.  -ENOMEM in *rc. */
static uint32_t intern_shape(ckpt_pieces *t, int nd, const int64_t *v,
                             int *rc)
{
    if ((size_t)t->nshape + 1 > t->nshape_slots / 2 &&
        (*rc = shape_rehash(t)))
        return 0;
    size_t h = shape_slot(nd, v, t->nshape_slots);
    for (; t->shape_slots[h]; h = (h + 1) & (t->nshape_slots - 1)) {
        uint32_t k = t->shape_slots[h] - 1;
        const int64_t *s = shape_of(t, k);
        if (s[0] == nd && !memcmp(s + 1, v, (size_t)nd * sizeof *v))
            return k;
    }
    if (t->nshape >= UINT32_MAX - 1 ||
        reserve((void **)&t->shape_at, &t->shape_at_cap, t->nshape, 1,
                sizeof *t->shape_at) ||
        reserve((void **)&t->shapes, &t->shapes_cap, t->nshapes_vals,
                (size_t)nd + 1, sizeof *t->shapes)) {
        *rc = -ENOMEM;
        return 0;
    }
    t->shape_at[t->nshape] = t->nshapes_vals;
    t->shapes[t->nshapes_vals] = nd;
    if (nd)
        memcpy(t->shapes + t->nshapes_vals + 1, v, (size_t)nd * sizeof *v);
    t->nshapes_vals += (size_t)nd + 1;
    t->shape_slots[h] = t->nshape + 1;
    return t->nshape++;
}

/* ------------------------------------------------------------ pieces */

int ckpt_pieces_add(ckpt_pieces *t, const ckpt_piece_rec *p)
{
    int rc = 0;
    ckpt_pieces_rec r = {
        .ndim = p->ndim, .dtype = (int32_t)p->dtype,
        .raw_bytes = p->raw_bytes, .stored_bytes = p->stored_bytes,
        .data_hash = p->data_hash,
    };
    int nd = ckpt_pieces_ndims(&r);
    r.fqn = intern(t, p->fqn, &rc);
    if (!rc)
        r.file = intern(t, p->file, &rc);
    if (!rc)
        r.writer = intern(t, p->writer, &rc);
    if (!rc)
        r.shape = intern_shape(t, nd, p->shape, &rc);
    if (rc || reserve((void **)&t->v, &t->cap, t->n, 1, sizeof *t->v) ||
        /* at least one: dims is never NULL once a piece is in */
        reserve((void **)&t->dims, &t->dims_cap, t->ndims,
                nd ? 2 * (size_t)nd : 1, sizeof *t->dims) ||
        reserve((void **)&t->frames, &t->frames_cap, t->nframes, p->nframes,
                sizeof *t->frames))
        return -ENOMEM;   /* strings interned on the way are harmless */
    r.dims = t->ndims;
    if (nd) {
        int64_t *d = t->dims + t->ndims;
        memcpy(d, p->offsets, (size_t)nd * sizeof *d);
        memcpy(d + nd, p->sizes, (size_t)nd * sizeof *d);
        t->ndims += 2 * (size_t)nd;
    }
    r.frame0 = t->nframes;
    r.nframes = p->nframes;
    if (p->nframes)
        memcpy(t->frames + t->nframes, p->frames,
               p->nframes * sizeof *p->frames);
    t->nframes += p->nframes;
    t->v[t->n++] = r;
    return 0;
}

int ckpt_pieces_append(ckpt_pieces *t, const ckpt_pieces *src)
{
    uint32_t *ids = malloc((src->nstr ? src->nstr : 1) * sizeof *ids);
    uint32_t *sids = malloc((src->nshape ? src->nshape : 1) * sizeof *sids);
    int rc = ids && sids ? 0 : -ENOMEM;
    for (uint32_t k = 0; !rc && k < src->nstr; k++)
        ids[k] = intern(t, src->arena + src->str_off[k], &rc);
    for (uint32_t k = 0; !rc && k < src->nshape; k++) {
        const int64_t *s = shape_of(src, k);
        sids[k] = intern_shape(t, (int)s[0], s + 1, &rc);
    }
    if (rc || reserve((void **)&t->v, &t->cap, t->n, src->n, sizeof *t->v) ||
        reserve((void **)&t->dims, &t->dims_cap, t->ndims,
                src->ndims ? src->ndims : 1, sizeof *t->dims) ||
        reserve((void **)&t->frames, &t->frames_cap, t->nframes,
                src->nframes, sizeof *t->frames)) {
        free(ids);
        free(sids);
        return -ENOMEM;
    }
    for (size_t i = 0; i < src->n; i++) {
        ckpt_pieces_rec r = src->v[i];
        r.fqn = r.fqn == CKPT_PIECES_NONE ? r.fqn : ids[r.fqn];
        r.file = r.file == CKPT_PIECES_NONE ? r.file : ids[r.file];
        r.writer = r.writer == CKPT_PIECES_NONE ? r.writer : ids[r.writer];
        r.shape = sids[r.shape];
        r.dims += t->ndims;
        r.frame0 += t->nframes;
        t->v[t->n++] = r;
    }
    if (src->ndims)
        memcpy(t->dims + t->ndims, src->dims, src->ndims * sizeof *t->dims);
    if (src->nframes)
        memcpy(t->frames + t->nframes, src->frames,
               src->nframes * sizeof *t->frames);
    t->ndims += src->ndims;
    t->nframes += src->nframes;
    free(ids);
    free(sids);
    return 0;
}

int ckpt_pieces_add_frame(ckpt_pieces *t, size_t i, const ckpt_frame_rec *f)
{
    ckpt_pieces_rec *p = &t->v[i];
    if (p->nframes == 0)
        p->frame0 = t->nframes;
    else if (p->frame0 + p->nframes != t->nframes)
        return -EINVAL;
    if (reserve((void **)&t->frames, &t->frames_cap, t->nframes, 1,
                sizeof *t->frames))
        return -ENOMEM;
    t->frames[t->nframes++] = *f;
    p->nframes++;
    return 0;
}

static char *dup_str(const char *s, int *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    *oom |= !d;
    return d;
}

int ckpt_pieces_get(const ckpt_pieces *t, size_t i, ckpt_piece_rec *out)
{
    const ckpt_pieces_rec *r = &t->v[i];
    int nd = ckpt_pieces_ndims(r), oom = 0;
    memset(out, 0, sizeof *out);
    out->fqn = dup_str(ckpt_pieces_str(t, r->fqn), &oom);
    out->file = dup_str(ckpt_pieces_str(t, r->file), &oom);
    out->writer = dup_str(ckpt_pieces_str(t, r->writer), &oom);
    if (r->nframes && !oom) {
        out->frames = malloc(r->nframes * sizeof *out->frames);
        oom |= !out->frames;
    }
    if (oom) {
        ckpt_piece_clear(out);
        return -ENOMEM;
    }
    out->dtype = (ckpt_dtype)r->dtype;
    out->ndim = r->ndim;
    if (nd) {
        size_t n = (size_t)nd * sizeof(int64_t);
        memcpy(out->shape, ckpt_pieces_shape(t, i), n);
        memcpy(out->offsets, ckpt_pieces_offsets(t, i), n);
        memcpy(out->sizes, ckpt_pieces_sizes(t, i), n);
    }
    out->raw_bytes = r->raw_bytes;
    out->stored_bytes = r->stored_bytes;
    out->data_hash = r->data_hash;
    if (r->nframes)
        memcpy(out->frames, ckpt_pieces_frames(t, i),
               r->nframes * sizeof *out->frames);
    out->nframes = out->frames_cap = r->nframes;
    return 0;
}
