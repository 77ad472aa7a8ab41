/*
 * layout.c - layout digests and the maps of plans' pieces to chunks (see
 * layout.h).  A map is a sequence of runs, each five varints: count, t0,
 * k0, zigzag(dt), zigzag(dk); a plan of one piece of each tensor at the
 * same chunk (FSDP's dim-0 shards, a 2-D grid) is one run.
 */
#include "format/layout.h"
#include "format/chunkpack.h"
#include "common/xxh.h"

#include <string.h>

static size_t put_le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return 8;
}

static int dims(int ndim)
{
    return ndim < 0 ? 0 : ndim > CKPT_MAX_DIMS ? CKPT_MAX_DIMS : ndim;
}

/* Bytes of a step: fqn NUL, dtype, ndim, shape, offsets, sizes (8 bytes
 * each), file NUL: the names with their NULs, so that no two layouts run
 * together.  A name longer than the FQN and path limits is cut (the
 * planner refuses it anyway). */
size_t ckpt_layout_prefix(uint8_t *pre, const char *fqn, ckpt_dtype dtype,
                          int ndim, const int64_t *shape)
{
    size_t lf = fqn ? strnlen(fqn, 4096) : 0, n = lf + 1;
    memcpy(pre, fqn ? fqn : "", lf);
    pre[lf] = 0;
    n += put_le(pre + n, (uint64_t)dtype);
    n += put_le(pre + n, (uint64_t)ndim);
    for (int d = 0; d < dims(ndim); d++)
        n += put_le(pre + n, (uint64_t)shape[d]);
    return n;
}

uint64_t ckpt_layout_step_pre(uint64_t digest, const uint8_t *pre,
                              size_t npre, int ndim, const int64_t *offsets,
                              const int64_t *sizes, const char *file,
                              size_t lfile)
{
    uint8_t buf[CKPT_LAYOUT_PRE_MAX + 8 * 2 * CKPT_MAX_DIMS + 4097];
    int nd = dims(ndim);
    size_t n = npre;
    memcpy(buf, pre, npre);
    for (int d = 0; d < nd; d++)
        n += put_le(buf + n, (uint64_t)offsets[d]);
    for (int d = 0; d < nd; d++)
        n += put_le(buf + n, (uint64_t)sizes[d]);
    memcpy(buf + n, file ? file : "", lfile);
    buf[n + lfile] = 0;
    return XXH3_64bits_withSeed(buf, n + lfile + 1, digest);
}

uint64_t ckpt_layout_step(uint64_t digest, const char *fqn, ckpt_dtype dtype,
                          int ndim, const int64_t *shape,
                          const int64_t *offsets, const int64_t *sizes,
                          const char *file)
{
    uint8_t pre[CKPT_LAYOUT_PRE_MAX];
    size_t npre = ckpt_layout_prefix(pre, fqn, dtype, ndim, shape);
    return ckpt_layout_step_pre(digest, pre, npre, ndim, offsets, sizes,
                                file, file ? strnlen(file, 4096) : 0);
}

static uint64_t zigzag(int64_t v)
{
    return v < 0 ? 2 * (~(uint64_t)v) + 1 : 2 * (uint64_t)v;
}

static int64_t unzigzag(uint64_t v)
{
    return v & 1 ? -(int64_t)(v >> 1) - 1 : (int64_t)(v >> 1);
}

static void put_run(ckpt_strbuf *b, const ckpt_layout_run *r)
{
    ckpt_varint_put(b, r->count);
    ckpt_varint_put(b, r->t0);
    ckpt_varint_put(b, r->k0);
    ckpt_varint_put(b, zigzag(r->dt));
    ckpt_varint_put(b, zigzag(r->dk));
}

void ckpt_layout_map_add(ckpt_layout_map *m, uint64_t t, uint64_t k)
{
    ckpt_layout_run *r = &m->run;
    if (r->count == 1) {               /* the second piece sets the step */
        r->dt = (int64_t)(t - r->t0);
        r->dk = (int64_t)(k - r->k0);
        r->count++;
        return;
    }
    if (r->count > 1 &&
        t == r->t0 + (uint64_t)r->dt * r->count &&
        k == r->k0 + (uint64_t)r->dk * r->count) {
        r->count++;
        return;
    }
    if (r->count)
        put_run(&m->b, r);
    *r = (ckpt_layout_run){ 1, t, k, 0, 0 };
}

void ckpt_layout_map_end(ckpt_layout_map *m)
{
    if (m->run.count)
        put_run(&m->b, &m->run);
    m->run.count = 0;
}

int ckpt_layout_map_next(const uint8_t *map, size_t len, size_t *pos,
                         ckpt_layout_run *r)
{
    uint64_t dt, dk;
    if (ckpt_varint_get(map, len, pos, &r->count) ||
        ckpt_varint_get(map, len, pos, &r->t0) ||
        ckpt_varint_get(map, len, pos, &r->k0) ||
        ckpt_varint_get(map, len, pos, &dt) ||
        ckpt_varint_get(map, len, pos, &dk) ||
        r->count == 0 || r->t0 > INT64_MAX || r->k0 > INT64_MAX)
        return -1;
    r->dt = unzigzag(dt);
    r->dk = unzigzag(dk);
    return 0;
}

void ckpt_layout_map_copy(ckpt_strbuf *b, uint64_t ref, int64_t dk)
{
    ckpt_varint_put(b, 0);
    ckpt_varint_put(b, ref);
    ckpt_varint_put(b, zigzag(dk));
}

int ckpt_layout_map_is_copy(const uint8_t *map, size_t len, uint64_t *ref,
                            int64_t *dk)
{
    size_t pos = 0;
    uint64_t first, z;
    if (ckpt_varint_get(map, len, &pos, &first))
        return -1;
    if (first)
        return 0;
    if (ckpt_varint_get(map, len, &pos, ref) ||
        ckpt_varint_get(map, len, &pos, &z) || pos != len)
        return -1;
    *dk = unzigzag(z);
    return 1;
}
