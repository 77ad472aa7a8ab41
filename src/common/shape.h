/*
 * shape.h - checked arithmetic on shapes and dtypes: element counts and
 * byte sizes that refuse to overflow (a tensor may not exceed 2^63 bytes).
 */
#ifndef CKPT_SHAPE_H
#define CKPT_SHAPE_H

#include <stdint.h>
#include "ckptfs.h"

/* Product of dims[0..ndim) into *numel (1 for ndim == 0).  Returns 0, or
 * -EINVAL for a negative dim or ndim outside [0, CKPT_MAX_DIMS], or
 * -EOVERFLOW when the product exceeds 2^63 - 1.  Messages name `what`. */
int ckpt_shape_numel(int ndim, const int64_t *dims, uint64_t *numel,
                     const char *what, ckpt_error *err);

/* numel * itemsize of dtype into *nbytes; -EOVERFLOW above 2^63 - 1 bytes,
 * -EINVAL for an invalid dtype. */
int ckpt_shape_nbytes(ckpt_dtype dt, int ndim, const int64_t *dims,
                      uint64_t *nbytes, const char *what, ckpt_error *err);

/* Writes "4096,4096" (empty string for ndim 0) into buf; returns the length
 * it needed (like snprintf). */
int ckpt_shape_format(char *buf, size_t cap, int ndim, const int64_t *dims);

/* Writes the JSON array "[4096,4096]" ("[]" for ndim 0); like snprintf. */
int ckpt_shape_format_json(char *buf, size_t cap, int ndim,
                           const int64_t *dims);

/* Parses "4096,4096" or "[4096, 4096]" or "" / "[]" (a scalar) into dims.
 * Returns ndim >= 0 or -EINVAL with a message quoting the text. */
int ckpt_shape_parse(const char *s, int64_t *dims, ckpt_error *err);

#endif
