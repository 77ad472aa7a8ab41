/*
 * dtype.h - internal dtype helpers beyond the public names and sizes: how a
 * dtype is written in NumPy's .npy format (used by `ckpt unpack` and the
 * mount's .npy view), and the list of names for error messages.
 */
#ifndef CKPT_DTYPE_H
#define CKPT_DTYPE_H

#include "ckptfs.h"

/* The NumPy descr ("<f4", "|b1") under which dtype dt is shown, and in
 * *stored the dtype of the data shown: dt itself, or, for the types NumPy
 * lacks, the one they widen to exactly: CKPT_F32 for bf16 and the float8
 * types, CKPT_C64 for c32 (each f16 half widened to f32).
 * Byte objects are "|u1".  NULL for an invalid dtype. */
const char *ckpt_dtype_npy_descr(ckpt_dtype dt, ckpt_dtype *stored);

/* The canonical dtype names, ", "-separated ("f64, f32, ..., bytes"),
 * like snprintf: returns the length the whole list needs.  For messages
 * that refuse an unknown dtype. */
size_t ckpt_dtype_names(char *buf, size_t cap);
/* Fills err with "<what>: unknown dtype 'TEXT' (valid: f64, f32, ...)"
 * (no "<what>: " when what is NULL); returns -EINVAL. */
int ckpt_dtype_unknown(ckpt_error *err, const char *what, const char *text);

#endif
