/*
 * error.c - filling a ckpt_error (see error.h).
 */
#include "common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void set_msg(ckpt_error *err, const char *fmt, va_list ap)
{
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
}

int ckpt_err(ckpt_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        set_msg(err, fmt, ap);
        va_end(ap);
    }
    return code;
}

int ckpt_err_sys(ckpt_error *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    char what[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ckpt_err(err, code, "%s: %s", what,
                    strerror(code < 0 ? -code : code));
}

int ckpt_err_wrap(ckpt_error *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    char ctx[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    if (err->code == 0)
        err->code = code;
    /* "<ctx>: <old>", truncated to fit. */
    size_t cap = sizeof err->msg - 1, n = strlen(ctx);
    if (n > cap)
        n = cap;
    memcpy(err->msg, ctx, n);
    if (n + 2 <= cap) {
        memcpy(err->msg + n, ": ", 2);
        n += 2;
    }
    size_t m = strlen(old);
    if (m > cap - n)
        m = cap - n;
    memcpy(err->msg + n, old, m);
    err->msg[n + m] = '\0';
    return err->code;
}

void ckpt_err_clear(ckpt_error *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

int ckpt_err_null(ckpt_error *err, const char *call, const char *param)
{
    return ckpt_err(err, -EINVAL, "%s: %s is NULL", call, param);
}
