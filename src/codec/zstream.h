/*
 * zstream.h - one Zstandard stream of unknown length decoded piece by
 * piece, as PyTorch DCP's ZStandard extension writes an item (a
 * streaming compressor's frames, with or without a content size): the
 * input is pulled through a read function, the output pushed in pieces
 * to a sink that keeps what it needs, so neither side is ever held whole.
 * The decoded size is bounded, and a frame header whose content size
 * disagrees with what its frame decodes to is refused.
 */
#ifndef CKPT_ZSTREAM_H
#define CKPT_ZSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

/* Reads n bytes at `off` of the stream's stored bytes into buf. */
typedef int (*ckpt_zs_in_fn)(void *arg, void *buf, size_t n, uint64_t off,
                             ckpt_error *err);
/* Takes decoded bytes [pos, pos + n). */
typedef int (*ckpt_zs_out_fn)(void *arg, uint64_t pos, const void *buf,
                              size_t n, ckpt_error *err);

/* Decodes the in_len stored bytes that `in` reads (one or more whole
 * zstd frames, nothing after them) and hands every decoded byte to `out`
 * in order; *total receives their count.  Refuses, naming `what`:
 * damaged or cut-short frames, trailing bytes, more than max_out decoded
 * bytes (-EFBIG), a frame whose header's content size differs from what
 * it decodes to. */
int ckpt_zstream_decode(ckpt_zs_in_fn in, void *in_arg, uint64_t in_len,
                        ckpt_zs_out_fn out, void *out_arg, uint64_t max_out,
                        uint64_t *total, const char *what, ckpt_error *err);

/* Keeps decoded bytes [lo, lo + n) of a stream in dst (a sink for
 * ckpt_zstream_decode). */
typedef struct ckpt_zs_window {
    uint64_t lo, n;
    unsigned char *dst;
} ckpt_zs_window;

int ckpt_zs_window_out(void *arg, uint64_t pos, const void *buf, size_t n,
                       ckpt_error *err);

#endif
