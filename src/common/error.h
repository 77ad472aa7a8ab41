/*
 * error.h - filling a ckpt_error: a negative errno plus a message that names
 * what failed.  Every module reports errors through these helpers.
 */
#ifndef CKPT_ERROR_H
#define CKPT_ERROR_H

#include "ckptfs.h"

/* Sets err (if not NULL) to `code` (a negative errno) and the formatted
 * message; returns `code` so callers can `return ckpt_err(...)`. */
int ckpt_err(ckpt_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like ckpt_err, appending ": <strerror(-code)>" to the message. */
int ckpt_err_sys(ckpt_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "<context>: " to the message already in err (if not NULL) and
 * returns err->code (or `code` when err is NULL). */
int ckpt_err_wrap(ckpt_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The refusal of a NULL required argument of a public call, alike for
 * every call: -EINVAL, "<call>: <param> is NULL". */
int ckpt_err_null(ckpt_error *err, const char *call, const char *param);

/* Clears err. */
void ckpt_err_clear(ckpt_error *err);

#endif
