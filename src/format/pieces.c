/*
 * pieces.c - the compact table of pieces (see pieces.h): interned strings
 * and shapes (and sizes) in arenas with open-addressing hashes, offsets
 * and frames in shared arrays that grow by doubling; what can be derived
 * of a piece (its one frame, its byte counts) left out.
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
    free(t->dims32);
    free(t->frames);
    free(t->arena);
    free(t->str_off);
    free(t->slots);
    free(t->shapes);
    free(t->shape_at);
    free(t->shape_slots);
    ckpt_pieces_init(t);
}

/* The largest index in frames that a record's frame field holds. */
#define FRAME_INDEX_MAX ((UINT64_C(1) << CKPT_PIECES_FRAME_BITS) - 1)

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

/* numel(sizes) x itemsize into *out: 0, or -1 when the dtype is not
 * valid or the count does not fit in 64 bits (then it is stored). */
static int derived_raw(int dtype, int nd, const int64_t *sizes,
                       uint64_t *out)
{
    if (dtype <= CKPT_DTYPE_INVALID || dtype >= CKPT_DTYPE_COUNT)
        return -1;
    uint64_t v = ckpt_dtype_size((ckpt_dtype)dtype);
    for (int d = 0; d < nd; d++)
        if (sizes[d] < 0 || __builtin_mul_overflow(v, (uint64_t)sizes[d], &v))
            return -1;
    *out = v;
    return 0;
}

uint64_t ckpt_pieces_raw(const ckpt_pieces *t, size_t i)
{
    const ckpt_pieces_rec *r = &t->v[i];
    int nd = ckpt_pieces_ndims(r);
    uint64_t v = 0;
    if (r->flags & CKPT_PIECES_RAW_EXTRA)
        return (uint64_t)t->dims[r->dims + (size_t)nd];
    derived_raw(r->dtype, nd, ckpt_pieces_sizes(t, i), &v);
    return v;
}

/* The stored byte count of piece i, whose raw one is raw. */
static uint64_t stored_of(const ckpt_pieces *t, size_t i, uint64_t raw)
{
    const ckpt_pieces_rec *r = &t->v[i];
    if (!(r->flags & CKPT_PIECES_STORED_EXTRA))
        return raw;
    size_t at = r->dims + (size_t)ckpt_pieces_ndims(r) +
                ((r->flags & CKPT_PIECES_RAW_EXTRA) ? 1 : 0);
    return (uint64_t)t->dims[at];
}

uint64_t ckpt_pieces_stored(const ckpt_pieces *t, size_t i)
{
    const ckpt_pieces_rec *r = &t->v[i];
    return r->flags & CKPT_PIECES_STORED_EXTRA ? stored_of(t, i, 0)
                                               : ckpt_pieces_raw(t, i);
}

const ckpt_frame_rec *ckpt_pieces_frames(const ckpt_pieces *t, size_t i,
                                         ckpt_frame_rec *one)
{
    const ckpt_pieces_rec *r = &t->v[i];
    if (!(r->flags & CKPT_PIECES_ONE_FRAME))
        return t->frames + (ckpt_pieces_u64(r->frame) & FRAME_INDEX_MAX);
    memset(one, 0, sizeof *one);   /* padding too: frames are compared */
    one->file_offset = ckpt_pieces_u64(r->frame);
    one->raw_size = ckpt_pieces_raw(t, i);
    one->stored_size = stored_of(t, i, one->raw_size);
    one->checksum = ckpt_pieces_u64(r->data_hash);
    one->codec = r->codec;
    return one;
}

/* Whether p's frames are one that its record can hold: the piece's
 * bytes whole, its checksum the piece's hash, no base. */
static int one_frame(const ckpt_piece_rec *p)
{
    const ckpt_frame_rec *f = p->frames;
    return p->nframes == 1 && f->raw_offset == 0 &&
           f->raw_size == p->raw_bytes && f->stored_size == p->stored_bytes &&
           f->checksum == p->data_hash && f->base == 0 && f->codec >= 0 &&
           f->codec <= UINT8_MAX;
}

/* Whether offsets off[0..nd) fit in 32 bits. */
static int fits32(int nd, const int64_t *off)
{
    for (int d = 0; d < nd; d++)
        if (off[d] < INT32_MIN || off[d] > INT32_MAX)
            return 0;
    return 1;
}

/* Room for r's n dims (in dims32 or dims, as r says) and r.dims set to
 * where they go.  Dims are never NULL once a piece is in: at least one. */
static int reserve_dims(ckpt_pieces *t, ckpt_pieces_rec *r, size_t n)
{
    size_t at = r->flags & CKPT_PIECES_DIMS32 ? t->ndims32 : t->ndims;
    if (at > UINT32_MAX - CKPT_MAX_DIMS - 2)   /* r.dims is 32 bits */
        return -ENOMEM;
    if (r->flags & CKPT_PIECES_DIMS32) {
        r->dims = (uint32_t)t->ndims32;
        return reserve((void **)&t->dims32, &t->dims32_cap, t->ndims32,
                       n ? n : 1, sizeof *t->dims32);
    }
    r->dims = (uint32_t)t->ndims;
    return reserve((void **)&t->dims, &t->dims_cap, t->ndims, n ? n : 1,
                   sizeof *t->dims);
}

/* Appends offsets off[0..nd) to dims32 (room made). */
static void add_dims32(ckpt_pieces *t, int nd, const int64_t *off)
{
    for (int d = 0; d < nd; d++)
        t->dims32[t->ndims32 + (size_t)d] = (int32_t)off[d];
    t->ndims32 += (size_t)nd;
}

/* Appends p's nd offsets to dims, then the byte counts that `flags` say
 * are not derived (room made). */
static void add_dims(ckpt_pieces *t, int nd, const ckpt_piece_rec *p,
                     unsigned flags)
{
    int64_t *d = t->dims + t->ndims;
    if (nd)
        memcpy(d, p->offsets, (size_t)nd * sizeof *d);
    if (flags & CKPT_PIECES_RAW_EXTRA)
        d[nd++] = (int64_t)p->raw_bytes;
    if (flags & CKPT_PIECES_STORED_EXTRA)
        d[nd++] = (int64_t)p->stored_bytes;
    t->ndims += (size_t)nd;
}

/* v, or the nearest of INT8_MIN and INT8_MAX when it does not fit. */
static int8_t clamp8(int v)
{
    return (int8_t)(v < INT8_MIN ? INT8_MIN : v > INT8_MAX ? INT8_MAX : v);
}

static void set_u64(uint32_t half[2], uint64_t v)
{
    half[0] = (uint32_t)v;
    half[1] = (uint32_t)(v >> 32);
}

/* The id of the vector (file, writer) of string ids: a piece's source. */
static uint32_t pair_id(ckpt_pieces *t, uint32_t file, uint32_t writer,
                        int *rc)
{
    int64_t v[2] = { file, writer };
    return intern_shape(t, 2, v, rc);
}

int ckpt_pieces_add(ckpt_pieces *t, const ckpt_piece_rec *p)
{
    int rc = 0;
    ckpt_pieces_rec r = {
        .ndim = clamp8(p->ndim), .dtype = clamp8((int)p->dtype),
    };
    set_u64(r.data_hash, p->data_hash);
    int nd = ckpt_pieces_ndims(&r);
    uint64_t raw;
    if (derived_raw(r.dtype, nd, p->sizes, &raw) || raw != p->raw_bytes)
        r.flags |= CKPT_PIECES_RAW_EXTRA;
    if (p->stored_bytes != p->raw_bytes)
        r.flags |= CKPT_PIECES_STORED_EXTRA;
    if (one_frame(p)) {
        r.flags |= CKPT_PIECES_ONE_FRAME;
        r.codec = (uint8_t)p->frames[0].codec;
        set_u64(r.frame, p->frames[0].file_offset);
    }
    size_t extra = !!(r.flags & CKPT_PIECES_RAW_EXTRA) +
                   !!(r.flags & CKPT_PIECES_STORED_EXTRA);
    if (!extra && fits32(nd, p->offsets))
        r.flags |= CKPT_PIECES_DIMS32;
    size_t nf = (r.flags & CKPT_PIECES_ONE_FRAME) ? 0 : p->nframes;
    if (nf > CKPT_PIECES_MAX_FRAMES || t->nframes + nf > FRAME_INDEX_MAX)
        return -ENOMEM;   /* r.frame could not hold them */
    r.fqn = intern(t, p->fqn, &rc);
    uint32_t file = rc ? 0 : intern(t, p->file, &rc);
    uint32_t writer = rc ? 0 : intern(t, p->writer, &rc);
    if (!rc)
        r.src = pair_id(t, file, writer, &rc);
    int64_t box[2 * CKPT_MAX_DIMS];   /* shape, then sizes */
    if (nd) {
        memcpy(box, p->shape, (size_t)nd * sizeof *box);
        memcpy(box + nd, p->sizes, (size_t)nd * sizeof *box);
    }
    if (!rc)
        r.shape = intern_shape(t, 2 * nd, box, &rc);
    if (rc || reserve((void **)&t->v, &t->cap, t->n, 1, sizeof *t->v) ||
        reserve((void **)&t->frames, &t->frames_cap, t->nframes, nf,
                sizeof *t->frames) ||
        reserve_dims(t, &r, (size_t)nd + extra))
        return -ENOMEM;   /* strings interned on the way are harmless */
    if (r.flags & CKPT_PIECES_DIMS32)
        add_dims32(t, nd, p->offsets);
    else
        add_dims(t, nd, p, r.flags);
    if (nf) {
        set_u64(r.frame, t->nframes | (uint64_t)nf << CKPT_PIECES_FRAME_BITS);
        memcpy(t->frames + t->nframes, p->frames, nf * sizeof *p->frames);
        t->nframes += nf;
    }
    t->v[t->n++] = r;
    return 0;
}

/* The id of string k of src in t (a table of src's ids, or NONE). */
static uint32_t remap(const uint32_t *ids, uint32_t k)
{
    return k == CKPT_PIECES_NONE ? k : ids[k];
}

/* Vector k of src as an id of t: its shape vector (shape and sizes) when
 * `pair` is 0, its (file, writer) pair, string ids mapped by ids, when 1;
 * memoized in map (UINT32_MAX when not yet). */
static uint32_t map_vec(ckpt_pieces *t, const ckpt_pieces *src,
                        const uint32_t *ids, uint32_t *map, uint32_t k,
                        int pair, int *rc)
{
    if (map[k] != UINT32_MAX || *rc)
        return map[k];
    const int64_t *s = shape_of(src, k);
    map[k] = pair ? pair_id(t, remap(ids, (uint32_t)s[1]),
                            remap(ids, (uint32_t)s[2]), rc)
                  : intern_shape(t, (int)s[0], s + 1, rc);
    return *rc ? (map[k] = UINT32_MAX) : map[k];
}

int ckpt_pieces_append(ckpt_pieces *t, const ckpt_pieces *src)
{
    size_t nv = src->nshape ? src->nshape : 1;
    uint32_t *ids = malloc((src->nstr ? src->nstr : 1) * sizeof *ids);
    uint32_t *sids = malloc(nv * sizeof *sids);   /* shapes, then */
    uint32_t *pids = malloc(nv * sizeof *pids);   /* sources, as used */
    int rc = ids && sids && pids ? 0 : -ENOMEM;
    for (uint32_t k = 0; !rc && k < src->nstr; k++)
        ids[k] = intern(t, src->arena + src->str_off[k], &rc);
    if (!rc) {
        memset(sids, 0xff, nv * sizeof *sids);
        memset(pids, 0xff, nv * sizeof *pids);
    }
    if (t->ndims > UINT32_MAX - src->ndims ||
        t->ndims32 > UINT32_MAX - src->ndims32 ||   /* indexed in 32 bits */
        t->nframes + src->nframes > FRAME_INDEX_MAX)   /* and in 40 */
        rc = -ENOMEM;
    if (rc || reserve((void **)&t->v, &t->cap, t->n, src->n, sizeof *t->v) ||
        reserve((void **)&t->dims, &t->dims_cap, t->ndims,
                src->ndims ? src->ndims : 1, sizeof *t->dims) ||
        reserve((void **)&t->dims32, &t->dims32_cap, t->ndims32,
                src->ndims32 ? src->ndims32 : 1, sizeof *t->dims32) ||
        reserve((void **)&t->frames, &t->frames_cap, t->nframes,
                src->nframes, sizeof *t->frames))
        rc = -ENOMEM;
    size_t n0 = t->n;
    for (size_t i = 0; !rc && i < src->n; i++) {
        ckpt_pieces_rec r = src->v[i];
        r.fqn = remap(ids, r.fqn);
        r.src = map_vec(t, src, ids, pids, r.src, 1, &rc);
        r.shape = map_vec(t, src, ids, sids, r.shape, 0, &rc);
        r.dims += (uint32_t)(r.flags & CKPT_PIECES_DIMS32 ? t->ndims32
                                                           : t->ndims);
        uint64_t f = ckpt_pieces_u64(r.frame);
        if (!(r.flags & CKPT_PIECES_ONE_FRAME) && f >> CKPT_PIECES_FRAME_BITS)
            set_u64(r.frame, f + t->nframes);   /* the low bits: checked */
        t->v[t->n++] = r;
    }
    if (rc)
        t->n = n0;   /* no new piece (strings and vectors are harmless) */
    else {
        if (src->ndims)
            memcpy(t->dims + t->ndims, src->dims,
                   src->ndims * sizeof *t->dims);
        if (src->ndims32)
            memcpy(t->dims32 + t->ndims32, src->dims32,
                   src->ndims32 * sizeof *t->dims32);
        if (src->nframes)
            memcpy(t->frames + t->nframes, src->frames,
                   src->nframes * sizeof *t->frames);
        t->ndims += src->ndims;
        t->ndims32 += src->ndims32;
        t->nframes += src->nframes;
    }
    free(ids);
    free(sids);
    free(pids);
    return rc ? -ENOMEM : 0;
}

int ckpt_pieces_add_frame(ckpt_pieces *t, size_t i, const ckpt_frame_rec *f)
{
    ckpt_pieces_rec *p = &t->v[i];
    ckpt_frame_rec one;   /* filled when its one frame is in the record */
    int inline_one = (p->flags & CKPT_PIECES_ONE_FRAME) != 0;
    size_t nf = ckpt_pieces_nframes(t, i);
    if (inline_one)   /* that frame moves out of the record, to the end */
        ckpt_pieces_frames(t, i, &one);
    else if (nf && (ckpt_pieces_u64(p->frame) & FRAME_INDEX_MAX) + nf !=
                       t->nframes)
        return -EINVAL;
    if (nf >= CKPT_PIECES_MAX_FRAMES ||
        t->nframes + 2 > FRAME_INDEX_MAX ||
        reserve((void **)&t->frames, &t->frames_cap, t->nframes,
                1 + (size_t)inline_one, sizeof *t->frames))
        return -ENOMEM;
    uint64_t first = nf && !inline_one
                         ? ckpt_pieces_u64(p->frame) & FRAME_INDEX_MAX
                         : t->nframes;
    if (inline_one) {
        t->frames[t->nframes++] = one;
        p->flags &= (uint8_t)~CKPT_PIECES_ONE_FRAME;
        p->codec = 0;
    }
    t->frames[t->nframes++] = *f;
    set_u64(p->frame, first | (uint64_t)(nf + 1) << CKPT_PIECES_FRAME_BITS);
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
    out->file = dup_str(ckpt_pieces_str(t, ckpt_pieces_file(t, i)), &oom);
    out->writer = dup_str(ckpt_pieces_str(t, ckpt_pieces_writer(t, i)), &oom);
    size_t nf = ckpt_pieces_nframes(t, i);
    if (nf && !oom) {
        out->frames = malloc(nf * sizeof *out->frames);
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
        int64_t buf[CKPT_MAX_DIMS];
        memcpy(out->offsets, ckpt_pieces_offsets(t, i, buf), n);
        memcpy(out->sizes, ckpt_pieces_sizes(t, i), n);
    }
    out->raw_bytes = ckpt_pieces_raw(t, i);
    out->stored_bytes = ckpt_pieces_stored(t, i);
    out->data_hash = ckpt_pieces_hash(t, i);
    ckpt_frame_rec one;
    if (nf)
        memcpy(out->frames, ckpt_pieces_frames(t, i, &one),
               nf * sizeof *out->frames);
    out->nframes = out->frames_cap = nf;
    return 0;
}
