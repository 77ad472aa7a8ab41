/*
 * delta.h - the base checkpoints of a delta checkpoint (docs/FORMAT.md,
 * "Delta checkpoints"): opening them with every check a reader owes them
 * (each is in the same root, committed, has the identity recorded, and no
 * chain of bases leads back to a checkpoint already on it), finding the
 * frame at a given place of a base, and producing its raw bytes, which
 * may mean following a reference or undoing an XOR delta in the base's own
 * bases.  The reader resolves ref and xor frames with it; the writer finds
 * what a new frame can refer to; the committer records the bases.
 *
 * A frame of a delta checkpoint is identified in its base by place: the
 * tensor (same fqn, dtype and shape), its chunk (same offsets and sizes)
 * and the frame's number in the chunk (same raw offset and size).
 */
#ifndef CKPT_DELTA_H
#define CKPT_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "codec/codec.h"
#include "format/index.h"

/* The bases of one checkpoint (or of a save), each opened and checked.
 * May be used by many threads at once. */
typedef struct ckpt_bases ckpt_bases;

/* The place of a chunk: its tensor and box. */
typedef struct ckpt_chunk_loc {
    const char *fqn;
    ckpt_dtype dtype;
    int ndim;
    const int64_t *shape, *offsets, *sizes;
} ckpt_chunk_loc;

/* A frame of a save's base, as the writer sees it. */
typedef struct ckpt_base_frame {
    uint64_t raw_offset, raw_size, checksum;
    int64_t holder;   /* id of the base whose frame holds its bytes */
    int depth;        /* XOR deltas undone to produce them */
    uint64_t plain_size;  /* its stored size when stored whole (a guess
                             of what the new frame costs whole), else 0 */
} ckpt_base_frame;

/* The longest chain of bases a checkpoint may have. */
#define CKPT_MAX_BASE_DEPTH 64

/* Opens the bases that index `ix` of checkpoint `dir` (whose meta
 * 'identity' is `identity`, or NULL) lists (none for a version-1 index:
 * *out is then NULL).  Each must be a sibling of dir in
 * the same root (its recorded path one name), committed, with the meta
 * 'identity' recorded; their own bases are opened likewise, and a chain
 * that comes back to a checkpoint on it is refused.  -ENOENT (base
 * missing), -ESTALE (changed since: the identity differs), -EXDEV
 * (outside the root), -ELOOP (a cycle), each naming the base. */
int ckpt_bases_open(ckpt_bases **out, const char *dir, ckpt_index *ix,
                    const char *identity, ckpt_error *err);

/* Opens the bases a save into `save_dir` gets from naming the committed
 * checkpoint `base` (a path): base itself, with the id one past its own
 * bases', and its own bases under their ids (references go to the
 * checkpoint that holds the bytes).  The same checks as above. */
int ckpt_bases_for_save(ckpt_bases **out, const char *save_dir,
                        const char *base, ckpt_error *err);

void ckpt_bases_free(ckpt_bases *b);

/* The bases, by id; and the one a save named (its largest id). */
const ckpt_index_base *ckpt_bases_list(const ckpt_bases *b, size_t *n);
int64_t ckpt_bases_top(const ckpt_bases *b);

/* The frames of the save's base (ckpt_bases_top) chunk at `loc`, with
 * their holders and depths, into a malloc'd array; *n = 0 (and *out
 * NULL) when the base has no such tensor or chunk. */
int ckpt_bases_chunk(ckpt_bases *b, const ckpt_chunk_loc *loc,
                     ckpt_base_frame **out, size_t *n, ckpt_error *err);

/* Buffers one thread reuses for the frames it reads from bases (stored
 * bytes, decoded XOR bytes), one pair per level of bases: zero it
 * to start, release it with ckpt_delta_scratch_free.  Slot 0 is the
 * caller's (ckpt_delta_scratch_at). */
#define CKPT_DELTA_SLOTS 17
typedef struct ckpt_delta_scratch {
    unsigned char *buf[CKPT_DELTA_SLOTS];
    size_t cap[CKPT_DELTA_SLOTS];
} ckpt_delta_scratch;

/* Buffer `slot` of s, grown to at least n bytes; NULL when out of memory
 * or slot is out of range. */
void *ckpt_delta_scratch_at(ckpt_delta_scratch *s, int slot, size_t n);
void ckpt_delta_scratch_free(ckpt_delta_scratch *s);

/* Reads frame `seq` of the chunk at `loc` of base `id` (raw_offset and
 * raw_size bytes, which must be the base frame's) into dst.  With sum, the
 * bytes are checked against the frame's checksum, which *sum is set to;
 * without (NULL), they are not: for a caller that checks what it makes of
 * them (an xor frame applied over them).  c and sc are the calling
 * thread's codec context and scratch (slot 0 untouched). */
int ckpt_bases_read(ckpt_bases *b, int64_t id, const ckpt_chunk_loc *loc,
                    uint64_t seq, uint64_t raw_offset, uint64_t raw_size,
                    void *dst, ckpt_codec_ctx *c, ckpt_delta_scratch *sc,
                    uint64_t *sum, ckpt_error *err);

/* The leading byte planes of frame `seq` of the chunk at `loc` in base
 * `id` (a holder: its frame is not a ref), without decoding the frame:
 * those it stores as they are, and at most `max_coded` that it codes,
 * never all of them (ckpt_codec_leading_planes), taken from the shard's
 * mapping where resident (else read into slot 1 of sc) and decoded into
 * dst, which has room for raw_size bytes.
 * Returns their count, each raw_size / element-size bytes, one after
 * another, with the frame's byte layout in *layout: 0 when the frame is
 * not byte-grouped (or an xor frame).  Unchecked bytes, for a writer
 * deciding whether an xor frame against the base frame could pay; what it
 * then stores is made from the frame read whole and checked
 * (ckpt_bases_read). */
int ckpt_bases_leading_planes(ckpt_bases *b, int64_t id,
                              const ckpt_chunk_loc *loc, uint64_t seq,
                              uint64_t raw_size, int max_coded, void *dst,
                              int *layout, ckpt_codec_ctx *c,
                              ckpt_delta_scratch *sc, ckpt_error *err);

/* The meta 'identity' of a loaded index, or NULL. */
const char *ckpt_index_identity(const ckpt_index_data *d);

#endif
