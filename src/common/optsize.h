/*
 * optsize.h - reading a caller's options struct by its size field, the
 * first member of every public options struct (ckptfs.h, "Options
 * structs"), so that a program built against another ckptfs.h is either
 * read correctly or refused by name, never misread.
 */
#ifndef CKPT_OPTSIZE_H
#define CKPT_OPTSIZE_H

#include <stddef.h>

#include "ckptfs.h"

/* Copies the caller's struct `src` into `dst` (which holds the defaults,
 * and is `known` bytes: this library's sizeof) by src's size field: a
 * size larger than `known` (a newer header) or smaller than `oldest` (not
 * set by the *_opts_init, or a layout older than any the library reads) is
 * -EINVAL naming the struct `name`; an older, smaller layout is copied up
 * to its size, the newer fields keeping their defaults.  dst's size is
 * `known` afterwards. */
int ckpt_opts_take(void *dst, size_t known, const void *src, size_t oldest,
                   const char *name, ckpt_error *err);

#endif
