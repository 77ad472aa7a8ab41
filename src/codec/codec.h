/*
 * codec.h - encoding and decoding one frame, and its checksum.
 *
 * A frame is at most the frame size of raw bytes, cut on an element
 * boundary, coded with one codec (ids in ckptfs.h, never reused), and
 * carries the XXH3-64 of its raw bytes.  A zstd-coded frame is one standard
 * zstd frame with its content size recorded.  A byte-grouped frame is a
 * small header and one coded stream per byte plane (docs/FORMAT.md).
 */
#ifndef CKPT_CODEC_H
#define CKPT_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

/* Per-thread scratch state (zstd contexts).  Not shared between threads. */
typedef struct ckpt_codec_ctx ckpt_codec_ctx;

ckpt_codec_ctx *ckpt_codec_ctx_new(void);   /* NULL on out of memory */
void ckpt_codec_ctx_free(ckpt_codec_ctx *c);

/* Room an encoded frame of raw_n bytes may need. */
size_t ckpt_codec_bound(size_t raw_n);

/* XXH3-64 of buf. */
uint64_t ckpt_checksum(const void *buf, size_t n);

/* 1 when this build can decode codec id `codec` (CKPT_CODEC_AUTO is not
 * a stored id: 0). */
int ckpt_codec_known(int codec);

/* The codec to store a tensor of dtype `dt` with: `codec` itself, or for
 * CKPT_CODEC_AUTO the one that suits the dtype (see ckptfs.h). */
int ckpt_codec_resolve(int codec, ckpt_dtype dt);

/* Parses "auto", "raw", "zstd", "bgbf16", "bgf16", "bgf32", "bgf64",
 * "bg2", "bg4" or "bg8", all but raw with an optional ":LEVEL" (the zstd
 * level, 1..22, or -7..-1 for fast modes; default 1).  Returns 0 or
 * -EINVAL naming the text. */
int ckpt_codec_parse(const char *s, int *codec, int *level, ckpt_error *err);

/* Encodes src[0..n) with `codec` at `level` into dst (cap bytes, at least
 * ckpt_codec_bound(n)).  itemsize is the dtype's element size (unused: the
 * byte-grouped codecs take theirs from the codec id, and code a final
 * partial element as it is).  On return *out_codec is the codec actually
 * used: CKPT_CODEC_RAW when compression does not save at least 1/32 of the
 * bytes, in which case the caller stores src as is (*out_n == n) and dst
 * holds nothing of use (zstd leaves it untouched).  CKPT_CODEC_AUTO must be
 * resolved first (ckpt_codec_resolve).  Returns 0 or a negative errno. */
int ckpt_codec_encode(ckpt_codec_ctx *c, int codec, int level,
                      size_t itemsize, const void *src, size_t n, void *dst,
                      size_t cap, size_t *out_n, int *out_codec,
                      ckpt_error *err);

/* Decodes a frame stored with `codec` (src, stored_n bytes) into exactly
 * raw_n bytes at dst.  -EIO when the stream is corrupt or decodes to a
 * different length, -ENOTSUP for an unknown codec id. */
int ckpt_codec_decode(ckpt_codec_ctx *c, int codec, const void *src,
                      size_t stored_n, void *dst, size_t raw_n,
                      ckpt_error *err);

/* The room ckpt_codec_leading_planes reads: the longest byte-grouped
 * header (version, layout, element size, plane count, and a method and
 * length for each of at most 8 planes). */
#define CKPT_BG_HEAD_MAX (4 + 8 * 5)

/* The leading planes of a byte-grouped frame of raw_n bytes stored with
 * `codec`, judged from its first hn bytes `head` (at most
 * CKPT_BG_HEAD_MAX are looked at): planes 0, 1, ... as long as each is
 * stored as it is or, for at most `max_coded` of them, coded, and never
 * the last (all of them would be the whole frame's decode).  Returns
 * their count, with *prefix the bytes of the frame up to their end and
 * *layout the codec's byte layout (bytegroup.h); 0 when the frame is not
 * byte-grouped or its header does not match.  For a caller that wants a
 * few planes of a frame without decoding it (a delta save's xor tries,
 * ckpt_codec_decode_leading). */
int ckpt_codec_leading_planes(int codec, const void *head, size_t hn,
                              size_t raw_n, int max_coded, size_t *prefix,
                              int *layout);

/* Planes 0..np-1 of that frame, from its first `prefix` bytes src (as
 * ckpt_codec_leading_planes gave them), into dst: np planes of raw_n /
 * element-size bytes, one after another.  -EIO when they are corrupt. */
int ckpt_codec_decode_leading(ckpt_codec_ctx *c, int codec, const void *src,
                              size_t prefix, size_t raw_n, int np, void *dst,
                              ckpt_error *err);

#endif