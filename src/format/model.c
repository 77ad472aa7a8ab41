/*
 * model.c - the in-memory metadata records shared by writer, plan files,
 * planner and index (see model.h).
 */
#include "format/model.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/xxh.h"

int ckpt_array_reserve(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    if (need > SIZE_MAX / 2 / elem)
        return -ENOMEM;
    size_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *p = realloc(*arr, ncap * elem);
    if (!p)
        return -ENOMEM;
    memset((char *)p + *cap * elem, 0, (ncap - *cap) * elem);
    *arr = p;
    *cap = ncap;
    return 0;
}

void ckpt_manifest_init(ckpt_manifest *m)
{
    memset(m, 0, sizeof *m);
}

void ckpt_piece_clear(ckpt_piece_rec *p)
{
    free(p->fqn);
    free(p->file);
    free(p->writer);
    free(p->frames);
    memset(p, 0, sizeof *p);
}

static void kv_clear(ckpt_kv *kv)
{
    free(kv->key);
    free(kv->value);
    free(kv->writer);
    memset(kv, 0, sizeof *kv);
}

void ckpt_manifest_free(ckpt_manifest *m)
{
    for (size_t i = 0; i < m->npieces; i++)
        ckpt_piece_clear(&m->pieces[i]);
    for (size_t i = 0; i < m->nmeta; i++)
        kv_clear(&m->meta[i]);
    for (size_t i = 0; i < m->ndeclared; i++)
        kv_clear(&m->declared[i]);
    free(m->pieces);
    free(m->meta);
    free(m->declared);
    ckpt_manifest_init(m);
}

ckpt_piece_rec *ckpt_manifest_add_piece(ckpt_manifest *m)
{
    if (ckpt_array_reserve((void **)&m->pieces, &m->pieces_cap,
                           m->npieces + 1, sizeof *m->pieces))
        return NULL;
    ckpt_piece_rec *p = &m->pieces[m->npieces++];
    memset(p, 0, sizeof *p);
    return p;
}

int ckpt_manifest_take(ckpt_manifest *dst, ckpt_manifest *src)
{
    if (ckpt_array_reserve((void **)&dst->pieces, &dst->pieces_cap,
                           dst->npieces + src->npieces, sizeof *dst->pieces) ||
        ckpt_array_reserve((void **)&dst->meta, &dst->meta_cap,
                           dst->nmeta + src->nmeta, sizeof *dst->meta) ||
        ckpt_array_reserve((void **)&dst->declared, &dst->declared_cap,
                           dst->ndeclared + src->ndeclared,
                           sizeof *dst->declared))
        return -ENOMEM;
    if (src->ndeclared)
        memcpy(dst->declared + dst->ndeclared, src->declared,
               src->ndeclared * sizeof *src->declared);
    dst->ndeclared += src->ndeclared;
    free(src->declared);
    if (src->npieces)
        memcpy(dst->pieces + dst->npieces, src->pieces,
               src->npieces * sizeof *src->pieces);
    if (src->nmeta)
        memcpy(dst->meta + dst->nmeta, src->meta,
               src->nmeta * sizeof *src->meta);
    dst->npieces += src->npieces;
    dst->nmeta += src->nmeta;
    free(src->pieces);
    free(src->meta);
    ckpt_manifest_init(src);
    return 0;
}

static char *dup_or_null(const char *s, int *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *oom = 1;
    return d;
}

int ckpt_manifest_set_meta(ckpt_manifest *m, const char *key,
                           const char *value, const char *writer)
{
    int oom = 0;
    char *k = dup_or_null(key, &oom), *v = dup_or_null(value, &oom);
    char *w = dup_or_null(writer, &oom);
    if (oom) {
        free(k), free(v), free(w);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->nmeta; i++) {
        if (strcmp(m->meta[i].key, key) == 0) {
            kv_clear(&m->meta[i]);
            m->meta[i] = (ckpt_kv){ k, v, w };
            return 0;
        }
    }
    if (ckpt_array_reserve((void **)&m->meta, &m->meta_cap, m->nmeta + 1,
                           sizeof *m->meta)) {
        free(k), free(v), free(w);
        return -ENOMEM;
    }
    m->meta[m->nmeta++] = (ckpt_kv){ k, v, w };
    return 0;
}

const char *ckpt_manifest_get_meta(const ckpt_manifest *m, const char *key)
{
    for (size_t i = 0; i < m->nmeta; i++)
        if (strcmp(m->meta[i].key, key) == 0)
            return m->meta[i].value;
    return NULL;
}

int ckpt_manifest_declare(ckpt_manifest *m, const char *fqn,
                          const char *reason, const char *writer)
{
    if (!reason)
        reason = "";
    for (size_t i = 0; i < m->ndeclared; i++) {
        ckpt_kv *d = &m->declared[i];
        if (strcmp(d->key, fqn) != 0)
            continue;
        if (!*reason)
            return 0;
        char *v = strdup(reason);
        if (!v)
            return -ENOMEM;
        free(d->value);
        d->value = v;
        return 0;
    }
    int oom = 0;
    char *k = dup_or_null(fqn, &oom), *v = dup_or_null(reason, &oom);
    char *w = dup_or_null(writer, &oom);
    if (oom || ckpt_array_reserve((void **)&m->declared, &m->declared_cap,
                                  m->ndeclared + 1, sizeof *m->declared)) {
        free(k), free(v), free(w);
        return -ENOMEM;
    }
    m->declared[m->ndeclared++] = (ckpt_kv){ k, v, w };
    return 0;
}

int ckpt_piece_add_frame(ckpt_piece_rec *p, const ckpt_frame_rec *f)
{
    if (ckpt_array_reserve((void **)&p->frames, &p->frames_cap, p->nframes + 1,
             sizeof *p->frames))
        return -ENOMEM;
    p->frames[p->nframes++] = *f;
    return 0;
}

int ckpt_frames_hash(const ckpt_frame_rec *f, size_t n, uint64_t *out)
{
    if (n == 1) {
        *out = f[0].checksum;
        return 0;
    }
    XXH3_state_t *st = XXH3_createState();
    if (!st || XXH3_64bits_reset(st) != XXH_OK) {
        XXH3_freeState(st);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char le[8];
        for (int b = 0; b < 8; b++)
            le[b] = (unsigned char)(f[i].checksum >> (8 * b));
        XXH3_64bits_update(st, le, sizeof le);
    }
    *out = (uint64_t)XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return 0;
}
