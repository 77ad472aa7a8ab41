/*
 * wopts.h - the one parser and checker of write options (codec, level,
 * frame size, threads) from text, with the bounds of ckptfs.h
 * (CKPT_MIN/MAX_FRAME_SIZE, CKPT_MIN/MAX_LEVEL, CKPT_MAX_THREADS), used by
 * `ckpt pack`, `ckpt import`, the mount's -o options and the writer, so
 * that every way in accepts and refuses the same values with the same
 * words.
 */
#ifndef CKPT_WOPTS_H
#define CKPT_WOPTS_H

#include <stdint.h>

#include "ckptfs.h"

/* Parses a byte count: decimal digits, then optionally K, M, G or T
 * (binary units, either case, also as KB/KiB...).  Returns 0, or -EINVAL
 * for anything else and for a count over UINT64_MAX. */
int ckpt_parse_size(const char *s, uint64_t *out);

/* Sets write option `name` of *o from the text `value`:
 *   "codec"       CODEC[:LEVEL] (ckpt_codec_parse): sets codec and level;
 *   "frame_size"  N[K|M|G], CKPT_MIN_FRAME_SIZE to CKPT_MAX_FRAME_SIZE;
 *   "threads"     0 (one per CPU) to CKPT_MAX_THREADS.
 * Returns 0, or -EINVAL with a message that quotes the value and says what
 * is expected ("bad frame size '100': expected 4K to 1G, e.g. 1M or
 * 65536"); *o is unchanged then.  An unknown name is -EINVAL too. */
int ckpt_write_opt_parse(ckpt_write_opts *o, const char *name,
                         const char *value, ckpt_error *err);

/* Checks a whole ckpt_write_opts against the same bounds (codec id, frame
 * size, threads, drop_cache): 0 or -EINVAL naming the field. */
int ckpt_write_opts_check(const ckpt_write_opts *o, ckpt_error *err);

#endif
