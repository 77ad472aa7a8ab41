/*
 * layout.h - a save's layout, kept so that the next save of the same
 * layout is committed without planning it again (docs/FORMAT.md,
 * "Layouts"): the digest a writer's plan carries of its pieces' layout
 * (fqn, dtype, shape, offsets, sizes, shard file of each, in order), and
 * the map a committed index keeps of each plan's pieces to the chunks
 * they became, as runs of (tensor, chunk) steps.
 */
#ifndef CKPT_LAYOUT_H
#define CKPT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"
#include "common/strbuf.h"

/* The digest of a plan's pieces before its first one. */
#define CKPT_LAYOUT_SEED 0x6c61796f75743031ull   /* "layout01" */

/* The digest of the pieces so far (`digest`) followed by one piece:
 * XXH3-64 of the piece's layout, little-endian, seeded with `digest`. */
uint64_t ckpt_layout_step(uint64_t digest, const char *fqn, ckpt_dtype dtype,
                          int ndim, const int64_t *shape,
                          const int64_t *offsets, const int64_t *sizes,
                          const char *file);

/* ckpt_layout_step in two parts, for many pieces of one tensor: the bytes
 * its pieces share (fqn, dtype, ndim, shape) made once into pre (at most
 * CKPT_LAYOUT_PRE_MAX bytes; their count returned), then each piece's
 * step from them, its box and its shard file of lfile bytes (file's
 * strnlen up to 4096; 0 for NULL).  The same digest, without scanning the
 * names again for every piece. */
#define CKPT_LAYOUT_PRE_MAX (4097 + 8 * (2 + CKPT_MAX_DIMS))
size_t ckpt_layout_prefix(uint8_t *pre, const char *fqn, ckpt_dtype dtype,
                          int ndim, const int64_t *shape);
uint64_t ckpt_layout_step_pre(uint64_t digest, const uint8_t *pre,
                              size_t npre, int ndim, const int64_t *offsets,
                              const int64_t *sizes, const char *file,
                              size_t lfile);

/* A run of a plan's map: pieces j..j+count map to the chunks
 * (t0 + i * dt, k0 + i * dk), i = 0..count-1 (t: the tensor's position
 * in fqn order, k: the chunk's seq). */
typedef struct ckpt_layout_run {
    uint64_t count;
    uint64_t t0, k0;
    int64_t dt, dk;
} ckpt_layout_run;

/* Builds a plan's map: call ckpt_layout_map_add for each of its pieces in
 * order, then ckpt_layout_map_end; the map is in b (b->oom on failure). */
typedef struct ckpt_layout_map {
    ckpt_strbuf b;
    ckpt_layout_run run;    /* the run being grown */
} ckpt_layout_map;

void ckpt_layout_map_add(ckpt_layout_map *m, uint64_t t, uint64_t k);
void ckpt_layout_map_end(ckpt_layout_map *m);

/* A plan's map may instead be a copy of an earlier plan's (one whose map
 * is runs), every chunk shifted by dk: the plans of a job append the
 * same tensors in the same order, at their own chunk.  Writes it to b. */
void ckpt_layout_map_copy(ckpt_strbuf *b, uint64_t ref, int64_t dk);
/* 1 with *ref and *dk when map[0..len) is a copy, 0 when it is runs, -1
 * when it is damaged. */
int ckpt_layout_map_is_copy(const uint8_t *map, size_t len, uint64_t *ref,
                            int64_t *dk);

/* Reads the run at *pos of map[0..len) into *r and advances *pos: 0, or
 * -1 when the map is cut short or damaged (a count of 0, a value out of
 * range). */
int ckpt_layout_map_next(const uint8_t *map, size_t len, size_t *pos,
                         ckpt_layout_run *r);

#endif
