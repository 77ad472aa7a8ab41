/*
 * plan.h - the planner: turns the pieces that all writers recorded into the
 * global plan of a checkpoint, or refuses with a message that names the
 * tensor and the writers involved.  Pure: no I/O, used by every writing
 * path (library writers, the mount, MPI).
 *
 * Refused: an FQN declared with different dtypes or global shapes; a piece
 * outside its tensor's bounds (or with a size that disagrees with its byte
 * count); pieces that partly overlap; a tensor whose pieces do not cover it
 * whole; identical pieces (replicas) whose data hashes differ.  Identical
 * pieces are replicas: one is kept.
 */
#ifndef CKPT_PLAN_H
#define CKPT_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "format/model.h"
#include "format/pieces.h"

#define CKPT_PLAN_MAX_PIECES UINT32_MAX

typedef struct ckpt_plan_tensor {
    const char *fqn;        /* points into the pieces */
    ckpt_dtype dtype;
    int ndim;
    const int64_t *shape;   /* points into the first piece */
    uint32_t *chunks;       /* indices of kept pieces, in row-major order
                               of their offsets */
    size_t nchunks;
} ckpt_plan_tensor;

typedef struct ckpt_plan {
    ckpt_plan_tensor *tensors;   /* sorted by fqn (strcmp) */
    size_t ntensors;
    /* Per input piece: the index of the piece kept in its place (itself
     * when it is kept, another replica's index when it is a duplicate).
     * Pieces are numbered in 32 bits (4 bytes a piece, not 8, for each
     * of these arrays: a 16k-rank commit plans 16 million pieces); a plan
     * of CKPT_PLAN_MAX_PIECES or more is refused as out of memory. */
    uint32_t *kept_as;
    size_t npieces;
} ckpt_plan;

/* Options for choosing among replicas. */
typedef struct ckpt_plan_opts {
    /* Compare data_hash of replicas and refuse when they differ (set when
     * the data has been written before planning). */
    int check_replica_hashes;
    /* Choose which replica to keep so that the bytes kept per writer are
     * balanced (for planning before data moves, as MPI save does); when 0
     * the first replica in input order is kept. */
    int balance_replicas;
} ckpt_plan_opts;

/* Builds the global plan of pieces[0..n).  The plan points into `pieces`,
 * which must outlive it.  Returns 0, or -EINVAL with the first problem
 * found (deterministically: tensors in fqn order). */
int ckpt_plan_build(const ckpt_piece_rec *pieces, size_t n,
                    const ckpt_plan_opts *opts, ckpt_plan *out,
                    ckpt_error *err);
/* The same on the compact table of pieces (the committer's): the plan
 * refers to pieces by their index in `tab` and points into it (fqn,
 * shape), which must outlive it and not grow meanwhile.  O(n log n) in
 * the number of pieces. */
int ckpt_plan_build_pieces(const ckpt_pieces *tab, const ckpt_plan_opts *opts,
                           ckpt_plan *out, ckpt_error *err);
void ckpt_plan_free(ckpt_plan *p);

/* Checks that chunks[0..n), the chunks one committed index lists for one
 * tensor (same fqn, dtype and shape; raw_bytes set; writer unused), tile
 * it exactly, with the rules of the planner: each inside the shape, no
 * two sharing an element, no element left out, and no box listed twice
 * (an index keeps one copy of a replica).  What a reader checks before
 * serving any byte of a tensor of an index it did not write.  Messages
 * name chunks by their position in the array ("chunks 0 (offsets [0,0]
 * sizes [50,100]) and 1 (...) overlap").  Returns 0, -EINVAL, or -ENOMEM. */
int ckpt_plan_check_chunks(const ckpt_piece_rec *chunks, size_t n,
                           ckpt_error *err);
/* The same on the compact table (a tensor of a 16k-rank checkpoint has
 * 16k chunks: ~100 bytes each there, ~900 as ckpt_piece_rec). */
int ckpt_plan_check_chunks_pieces(const ckpt_pieces *tab, ckpt_error *err);

/* Checks one piece on its own (valid dtype, fqn rules, ndim, offsets and
 * sizes inside the shape, byte count without overflow): what a writer can
 * refuse before any data moves.  Returns 0 or -EINVAL / -EOVERFLOW. */
int ckpt_plan_check_piece(const ckpt_piece_rec *p, ckpt_error *err);

/* FQN rules: non-empty, at most 4096 bytes, valid UTF-8, no control
 * characters (< 0x20, 0x7f), no '/', and no empty dotted component
 * ("a..b", ".a", "a.").  Returns 0 or -EINVAL with a message quoting it
 * (control characters escaped). */
int ckpt_fqn_check(const char *fqn, ckpt_error *err);

/* Copies s into buf (cap bytes, at least 9) as the messages quote names:
 * control characters (< 0x20, 0x7f) and bytes that are not valid UTF-8
 * become \xNN, the rest is kept; a text too long for buf is cut and ends
 * in "...".  4 * strlen(s) + 9 bytes always hold all of it.  For printing
 * names and values that come from files (ckpt ls, info, verify). */
void ckpt_text_quote(char *buf, size_t cap, const char *s);

#endif
