/*
 * chunkpack.h - a tensor's chunks packed into one index record (index.db
 * format version 3, docs/FORMAT.md "Packed chunks"): when the chunks tile
 * the tensor as a regular grid (every dim cut into blocks of one size, the
 * last block of a dim possibly smaller), their offsets and sizes are
 * computed from the grid's block sizes, and what cannot be computed - each
 * chunk's shard file and its frames - is one BLOB of varints in row-major
 * order of the grid.  A 16k-rank checkpoint's index shrinks from ~120 to
 * ~20 bytes per chunk, and its writer runs one insert per tensor instead
 * of two per chunk.
 *
 * Per chunk: varint file id (files.id), varint 2 * nframes + h (h = 1:
 * an explicit data hash follows the frames; 0: it is the one frame's
 * checksum), then per frame: varint file offset (the first absolute,
 * the next ones after the previous frame's end), varint stored size,
 * varint raw size, varint codec, 8 bytes of checksum (little-endian);
 * then the data hash when h = 1 (8 bytes).  Raw offsets are the running
 * sum of raw sizes.
 */
#ifndef CKPT_CHUNKPACK_H
#define CKPT_CHUNKPACK_H

#include <stddef.h>
#include <stdint.h>
#include "common/strbuf.h"
#include "format/model.h"

/* The number of chunks of the grid of blocks `block` over `shape`
 * (ceil(shape / block) per dim, multiplied), or 0 when a block is not in
 * 1..shape of its dim (or the count overflows). */
uint64_t ckpt_grid_count(int ndim, const int64_t *shape, const int64_t *block);
/* The box of chunk k (row-major over the grid) into off and size. */
void ckpt_grid_box(int ndim, const int64_t *shape, const int64_t *block,
                   uint64_t k, int64_t *off, int64_t *size);

/* Appends v to b as an unsigned LEB128 varint. */
void ckpt_varint_put(ckpt_strbuf *b, uint64_t v);
/* Reads the varint at *pos of p[0..len) into *out, advancing *pos: 0, or
 * -1 when it is cut short or longer than 64 bits. */
int ckpt_varint_get(const uint8_t *p, size_t len, size_t *pos,
                    uint64_t *out);

/* Appends one chunk's record to b (nframes frames, which tile its raw
 * bytes in order). */
void ckpt_pack_put(ckpt_strbuf *b, uint64_t file_id,
                   const ckpt_frame_rec *frames, size_t nframes,
                   uint64_t data_hash);

/* One chunk's record as read back. */
typedef struct ckpt_pack_chunk {
    int64_t file_id;
    uint64_t nframes, raw_bytes, stored_bytes;
    unsigned codec_mask;
    int own_hash;           /* h: the data hash was stored */
    uint64_t data_hash;     /* the stored one, or else the first frame's
                               checksum (0 with no frame) */
    uint64_t file_end;      /* where its last frame ends in the file (0
                               with no frame): frames are in file order */
} ckpt_pack_chunk;

/* Reads the chunk record at *pos of blob[0..len) into *out, and its frames
 * into frames[0..out->nframes) when frames is not NULL (room for
 * max_frames; more is an error); advances *pos past it.  -1 when the
 * record is cut short, holds a value out of range (a frame with no raw
 * bytes, a codec id over 31) or more frames than max_frames. */
int ckpt_pack_get(const uint8_t *blob, size_t len, size_t *pos,
                  ckpt_pack_chunk *out, ckpt_frame_rec *frames,
                  uint64_t max_frames);

#endif
