/*
 * model.h - the in-memory records of checkpoint metadata that the writer,
 * the local plan files, the planner and the index all share: frames,
 * pieces (a chunk of one tensor as one writer stored it), key/value
 * metadata, and a manifest holding them.
 */
#ifndef CKPT_MODEL_H
#define CKPT_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

typedef struct ckpt_frame_rec {
    uint64_t file_offset;   /* where the stored bytes start in the shard */
    uint64_t stored_size;
    uint64_t raw_offset;    /* within the piece's row-major image */
    uint64_t raw_size;
    uint64_t checksum;      /* XXH3-64 of the raw bytes */
    int codec;
    int64_t base;           /* delta frames (codec ref or xor): the id, in
                               the checkpoint's bases, of the base whose
                               frame at the same place they use; else 0 */
} ckpt_frame_rec;

typedef struct ckpt_piece_rec {
    char *fqn;
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS];    /* global shape */
    int64_t offsets[CKPT_MAX_DIMS];
    int64_t sizes[CKPT_MAX_DIMS];
    char *file;             /* shard path relative to the checkpoint dir */
    char *writer;           /* writer name (e.g. "rank3"), for messages */
    uint64_t raw_bytes;     /* prod(sizes) * itemsize */
    uint64_t stored_bytes;  /* sum of the frames' stored sizes */
    uint64_t data_hash;     /* the piece's content hash: ckpt_frames_hash
                               of its frames (what a writer records, meta
                               CKPT_META_DATA_HASH), or the XXH3-64 of its
                               raw bytes (indexes without that key) */
    ckpt_frame_rec *frames;
    size_t nframes, frames_cap;
} ckpt_piece_rec;

typedef struct ckpt_kv {
    char *key;
    char *value;
    char *writer;           /* who set it (NULL when not known) */
} ckpt_kv;

typedef struct ckpt_manifest {
    ckpt_piece_rec *pieces;
    size_t npieces, pieces_cap;
    ckpt_kv *meta;
    size_t nmeta, meta_cap;
    /* Declared tensors: key = FQN, value = why its piece failed ("" when
     * none did), writer = who declared it.  A commit refuses a declared
     * tensor that no piece of any writer holds. */
    ckpt_kv *declared;
    size_t ndeclared, declared_cap;
} ckpt_manifest;

/* Grows the array *arr of *cap elements of `elem` bytes (doubling, new
 * elements zeroed) so that it holds at least `need`.  0 or -ENOMEM (then
 * *arr is unchanged). */
int ckpt_array_reserve(void **arr, size_t *cap, size_t need, size_t elem);

void ckpt_manifest_init(ckpt_manifest *m);
void ckpt_manifest_free(ckpt_manifest *m);
/* Appends a zeroed piece and returns it (NULL on out of memory).  The
 * pointer is valid until the next append. */
ckpt_piece_rec *ckpt_manifest_add_piece(ckpt_manifest *m);
/* Moves all pieces and metadata of src to the end of dst; src is left
 * empty.  -ENOMEM on failure (then nothing moved). */
int ckpt_manifest_take(ckpt_manifest *dst, ckpt_manifest *src);
/* Sets key (replacing an earlier value for that key).  Copies strings. */
int ckpt_manifest_set_meta(ckpt_manifest *m, const char *key,
                           const char *value, const char *writer);
const char *ckpt_manifest_get_meta(const ckpt_manifest *m, const char *key);
/* Declares tensor fqn (copying strings); a non-empty reason replaces the
 * one recorded before. */
int ckpt_manifest_declare(ckpt_manifest *m, const char *fqn,
                          const char *reason, const char *writer);

/* Appends a frame to a piece (copying *f). */
int ckpt_piece_add_frame(ckpt_piece_rec *p, const ckpt_frame_rec *f);
/* Frees the strings and frames of a piece (not the piece itself). */
void ckpt_piece_clear(ckpt_piece_rec *p);

/* The metadata key naming how a checkpoint's data_hash values are made,
 * and its one value: CKPT_DATA_HASH_FRAMES, ckpt_frames_hash.  Without
 * the key, data_hash is the XXH3-64 of the piece's raw bytes
 * (docs/FORMAT.md, "data_hash").  A writer's local plan records it in
 * its info table, read back as metadata of the save. */
#define CKPT_META_DATA_HASH "data_hash"
#define CKPT_DATA_HASH_FRAMES "frames"

/* The data_hash of a piece of n frames: the one frame's checksum when
 * n == 1 (then the XXH3-64 of the raw bytes, as before the key), else
 * the XXH3-64 (seed 0) of the frames' checksums as consecutive
 * little-endian uint64s, in frame order.  Costs 8 bytes hashed a frame,
 * where hashing the raw bytes again cost a second pass over them.
 * Returns 0, or -ENOMEM. */
int ckpt_frames_hash(const ckpt_frame_rec *f, size_t n, uint64_t *out);

#endif
