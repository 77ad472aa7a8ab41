/*
 * pieces.h - a compact table of many pieces: what the committer holds of
 * all writers' plans at once (a 16k-rank job's plans hold millions of
 * pieces).  Strings (fqns, shard paths, writer names) are interned and
 * referred to by id; so is a piece's shape with its sizes, one vector (the
 * pieces of a tensor share one shape and, in a regular layout, one block
 * size: one vector for all); a piece's offsets are a run of ndim values in
 * one array, of 32-bit values where they fit.  A piece of one frame that
 * covers it whole (the common case: raw offset 0, its raw and stored sizes
 * and checksum the piece's, no base) keeps that frame in its record, as
 * its file offset and codec; others' frames are a run in a shared array.
 * Its raw byte count is not stored when it is numel(sizes) x itemsize, nor
 * its stored byte count when it equals the raw one (else they follow the
 * offsets).  36 bytes per piece plus 4 per dimension, against ~160 for the
 * table that stored every field (and ~850 for a ckpt_piece_rec, whose dims
 * are CKPT_MAX_DIMS arrays).
 *
 * The planner and the index writer work on it; an array of
 * ckpt_piece_rec converts to it (ckpt_pieces_add) and back
 * (ckpt_pieces_get).  Pointers into it (strings, dims, frames) stay valid
 * until the next addition.
 */
#ifndef CKPT_PIECES_H
#define CKPT_PIECES_H

#include <stddef.h>
#include <stdint.h>
#include "format/model.h"

/* The string id of a NULL string. */
#define CKPT_PIECES_NONE UINT32_MAX

/* ckpt_pieces_rec.flags */
#define CKPT_PIECES_ONE_FRAME 1u  /* its one frame is in the record */
#define CKPT_PIECES_RAW_EXTRA 2u  /* raw bytes stored after the offsets */
#define CKPT_PIECES_STORED_EXTRA 4u  /* stored bytes stored after them */
#define CKPT_PIECES_DIMS32 8u     /* offsets in dims32 (no extras then) */

/* 4-byte aligned (36 bytes): its 64-bit fields are halves, low first. */
typedef struct ckpt_pieces_rec {
    uint32_t fqn;                /* string id */
    uint32_t src;                /* id of the vector (shard path's string
                                    id, writer name's), interned as shapes
                                    are: a writer's pieces share one */
    uint32_t shape;              /* id of the vector of its shape then its
                                    sizes: shapes[shape_at[id] + 1...] */
    uint32_t dims;               /* offsets: min(ndim, CKPT_MAX_DIMS) values
                                    from dims[dims], then the extras; or,
                                    DIMS32, from dims32[dims] (a table holds
                                    fewer than 2^32 of either) */
    int8_t ndim, dtype;          /* as given (the planner checks them), or
                                    INT8_MIN / INT8_MAX for a value below or
                                    above: as invalid */
    uint8_t codec;               /* ONE_FRAME: the frame's codec */
    uint8_t flags;
    uint32_t frame[2];           /* ONE_FRAME: the frame's file offset;
                                    else its frames: the low 40 bits the
                                    first's index in frames, the high 24
                                    their count */
    uint32_t data_hash[2];       /* ckpt_pieces_hash */
} ckpt_pieces_rec;

typedef struct ckpt_pieces {
    ckpt_pieces_rec *v;
    size_t n, cap;
    int64_t *dims;
    size_t ndims, dims_cap;
    int32_t *dims32;
    size_t ndims32, dims32_cap;
    /* interned shapes: shape id k is ndim then the values at
     * shapes + shape_at[k] */
    int64_t *shapes;
    size_t nshapes_vals, shapes_cap;
    size_t *shape_at, shape_at_cap;
    uint32_t nshape;
    uint32_t *shape_slots;       /* open addressing: shape id + 1, or 0 */
    size_t nshape_slots;
    ckpt_frame_rec *frames;
    size_t nframes, frames_cap;
    /* interned strings: string id k is arena + str_off[k] */
    char *arena;
    size_t arena_len, arena_cap;
    size_t *str_off, str_cap;
    uint32_t nstr;
    uint32_t *slots;             /* open addressing: string id + 1, or 0 */
    size_t nslots;
} ckpt_pieces;

void ckpt_pieces_init(ckpt_pieces *t);
void ckpt_pieces_free(ckpt_pieces *t);

/* Appends a copy of *p: its strings interned, its dims and frames copied.
 * Returns 0 or -ENOMEM (then nothing was added). */
int ckpt_pieces_add(ckpt_pieces *t, const ckpt_piece_rec *p);
/* Appends every piece of src (strings interned anew, dims and frames
 * copied), in order.  Returns 0 or -ENOMEM (then t may hold new strings
 * but no new piece). */
int ckpt_pieces_append(ckpt_pieces *t, const ckpt_pieces *src);
/* Appends a frame to piece i, whose frames must be the last ones added
 * (frames are added piece after piece; a piece whose one frame is in its
 * record is one whose frames are last).  -EINVAL when they are not,
 * -ENOMEM. */
int ckpt_pieces_add_frame(ckpt_pieces *t, size_t i, const ckpt_frame_rec *f);
/* Fills *out with a copy of piece i (new strings and frames, to be
 * released with ckpt_piece_clear).  -ENOMEM (then *out holds nothing). */
int ckpt_pieces_get(const ckpt_pieces *t, size_t i, ckpt_piece_rec *out);

/* The string of id k (NULL for CKPT_PIECES_NONE). */
static inline const char *ckpt_pieces_str(const ckpt_pieces *t, uint32_t k)
{
    return k == CKPT_PIECES_NONE ? NULL : t->arena + t->str_off[k];
}

/* min(ndim, CKPT_MAX_DIMS), and 0 for a negative ndim: the dims stored. */
static inline int ckpt_pieces_ndims(const ckpt_pieces_rec *p)
{
    return p->ndim < 0 ? 0 : p->ndim > CKPT_MAX_DIMS ? CKPT_MAX_DIMS
                                                      : p->ndim;
}

static inline uint64_t ckpt_pieces_u64(const uint32_t half[2])
{
    return (uint64_t)half[0] | (uint64_t)half[1] << 32;
}

/* Piece i's data hash. */
static inline uint64_t ckpt_pieces_hash(const ckpt_pieces *t, size_t i)
{
    return ckpt_pieces_u64(t->v[i].data_hash);
}

/* The string ids of piece i's shard path and writer name. */
static inline uint32_t ckpt_pieces_file(const ckpt_pieces *t, size_t i)
{
    return (uint32_t)t->shapes[t->shape_at[t->v[i].src] + 1];
}

static inline uint32_t ckpt_pieces_writer(const ckpt_pieces *t, size_t i)
{
    return (uint32_t)t->shapes[t->shape_at[t->v[i].src] + 2];
}

static inline const int64_t *ckpt_pieces_shape(const ckpt_pieces *t,
                                               size_t i)
{
    return t->shapes + t->shape_at[t->v[i].shape] + 1;
}

/* Piece i's offsets: a pointer into the table, or buf filled with them. */
static inline const int64_t *ckpt_pieces_offsets(const ckpt_pieces *t,
                                                 size_t i,
                                                 int64_t buf[CKPT_MAX_DIMS])
{
    const ckpt_pieces_rec *r = &t->v[i];
    if (!(r->flags & CKPT_PIECES_DIMS32))
        return t->dims + r->dims;
    for (int d = 0; d < ckpt_pieces_ndims(r); d++)
        buf[d] = t->dims32[r->dims + (size_t)d];
    return buf;
}

static inline const int64_t *ckpt_pieces_sizes(const ckpt_pieces *t,
                                               size_t i)
{
    return ckpt_pieces_shape(t, i) + ckpt_pieces_ndims(&t->v[i]);
}

/* A piece's frames past the record: index in frames and count, packed. */
#define CKPT_PIECES_FRAME_BITS 40
#define CKPT_PIECES_MAX_FRAMES ((1u << (64 - CKPT_PIECES_FRAME_BITS)) - 1)

/* Piece i's frame count. */
static inline size_t ckpt_pieces_nframes(const ckpt_pieces *t, size_t i)
{
    const ckpt_pieces_rec *r = &t->v[i];
    return r->flags & CKPT_PIECES_ONE_FRAME
               ? 1 : (size_t)(ckpt_pieces_u64(r->frame) >>
                              CKPT_PIECES_FRAME_BITS);
}

/* Piece i's raw and stored byte counts, as given. */
uint64_t ckpt_pieces_raw(const ckpt_pieces *t, size_t i);
uint64_t ckpt_pieces_stored(const ckpt_pieces *t, size_t i);

/* Piece i's frames (ckpt_pieces_nframes of them): a pointer into the
 * table, or, for a piece whose one frame is in its record, `one` filled
 * with it. */
const ckpt_frame_rec *ckpt_pieces_frames(const ckpt_pieces *t, size_t i,
                                         ckpt_frame_rec *one);

#endif
