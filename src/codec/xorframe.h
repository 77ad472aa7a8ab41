/*
 * xorframe.h - the stored bytes of an "xor" frame (codec id 10) of a delta
 * checkpoint: the XOR of the frame's raw bytes with its base frame's, coded
 * by one of the ordinary codecs, behind a short header (docs/FORMAT.md,
 * "Delta checkpoints").  Unchanged elements become zero bytes, and so do
 * the unchanged sign and exponent bits of floats that moved a little, which
 * the byte-grouped codecs then store in almost nothing.  Version 1 codes
 * the whole XOR; version 2 ("sparse"), for an XOR zero in most of its
 * 64-byte blocks, codes a bitmap of its nonzero blocks and those blocks
 * alone, so that a read decodes and applies only what changed.
 */
#ifndef CKPT_XORFRAME_H
#define CKPT_XORFRAME_H

#include <stddef.h>

#include "codec/codec.h"

/* Header of version 1: version, then the codec id of the XOR bytes'
 * stream (version 2 adds a u32 block count). */
#define CKPT_XOR_HEAD 2

/* dst[i] = a[i] ^ b[i] for i < n (dst may be a or b). */
void ckpt_xor_bytes(void *dst, const void *a, const void *b, size_t n);

/* Codes `diff` (the n XOR bytes) with `codec` at `level` into dst (cap
 * bytes, at least CKPT_XOR_HEAD + ckpt_codec_bound(n)); *out_n is the
 * stored size, header included.  A diff that is zero in at least half of
 * its 64-byte blocks (few rows or elements changed) is stored sparse
 * (version 2): its nonzero blocks and the bitmap that lists them, coded
 * with zstd where that saves a third of them (never when `codec` is
 * raw), else stored raw.  Returns 0 or a negative errno. */
int ckpt_xor_encode(ckpt_codec_ctx *c, int codec, int level,
                    size_t itemsize, const void *diff, size_t n, void *dst,
                    size_t cap, size_t *out_n, ckpt_error *err);

/* 1 when the n XOR bytes of `diff` (items of itemsize bytes) surely
 * cannot be coded in `limit` bytes by the byte-grouped codecs, which code
 * byte k of every item as one plane: most of its items changed (else
 * zstd's runs of zeros may beat any estimate), and the order-0 entropy of
 * its planes, estimated from one item in 7, is above `limit` (no coder of
 * single bytes does better, and the bytes of densely changed floats have
 * no repeats for zstd to find).  Costs a tenth of coding them. */
int ckpt_xor_hopeless(const void *diff, size_t n, size_t itemsize,
                      size_t limit);

/* The same verdict before the base frame is decoded: `planes` holds the
 * first np byte planes of the base frame (byte layout `layout`, each
 * n / element-size bytes, one after another: ckpt_bases_leading_planes),
 * `cur` the frame's n raw bytes.  The XOR of those planes alone, sampled
 * in blocks of 64 elements (one in 16), must have most elements changed
 * and an order-0 entropy above `limit`: the other planes can only add to
 * it.  Costs a fraction of decoding the base
 * frame, which a try that cannot pay then does not. */
int ckpt_xor_planes_hopeless(int layout, const void *cur, size_t n,
                             const unsigned char *planes, int np,
                             size_t limit);

/* Decodes an xor frame (src, stored_n bytes) against the base frame's raw
 * bytes `base` into exactly raw_n bytes at dst.  -EIO when it is corrupt
 * (unknown version, unknown inner codec, wrong length, a sparse frame's
 * bitmap not matching its block count or listing blocks past the frame). */
int ckpt_xor_decode(ckpt_codec_ctx *c, const void *src, size_t stored_n,
                    const void *base, void *dst, size_t raw_n,
                    ckpt_error *err);

/* The same with the base frame's raw bytes already in dst, which end as
 * the frame's: the XOR bytes (version 1) or the sparse payload (version
 * 2, at most raw_n bytes; read in place when stored raw) are decoded into
 * tmp (raw_n bytes) and applied where they are not zero.  The hot path: the base frame decodes straight
 * into place, and dst is touched again only where it changed. */
int ckpt_xor_apply(ckpt_codec_ctx *c, const void *src, size_t stored_n,
                   void *dst, void *tmp, size_t raw_n, ckpt_error *err);

#endif
