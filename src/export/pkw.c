/*
 * pkw.c - the pickle writer of pkw.h.
 */
#include "export/pkw.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

static void put(pkw *w, const void *b, size_t n)
{
    ckpt_strbuf_add(&w->b, b, n);
}

static void put_le(pkw *w, uint64_t v, int n)
{
    unsigned char b[8];
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    put(w, b, (size_t)n);
}

void pkw_init(pkw *w)
{
    memset(w, 0, sizeof *w);
    const unsigned char proto[2] = { 0x80, 2 };
    put(w, proto, 2);
}

void pkw_free(pkw *w)
{
    ckpt_strbuf_free(&w->b);
}

void pkw_op(pkw *w, int op)
{
    unsigned char c = (unsigned char)op;
    put(w, &c, 1);
}

void pkw_global(pkw *w, const char *module, const char *name)
{
    pkw_op(w, 'c');
    put(w, module, strlen(module));
    put(w, "\n", 1);
    put(w, name, strlen(name));
    put(w, "\n", 1);
}

void pkw_str(pkw *w, const char *s)
{
    size_t n = strlen(s);
    if (n > UINT32_MAX) {
        w->b.oom = 1;
        return;
    }
    pkw_op(w, 'X');
    put_le(w, n, 4);
    put(w, s, n);
}

void pkw_int(pkw *w, int64_t v)
{
    if (v >= 0 && v < 256) {
        pkw_op(w, 'K');
        put_le(w, (uint64_t)v, 1);
    } else if (v >= 0 && v < 65536) {
        pkw_op(w, 'M');
        put_le(w, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        pkw_op(w, 'J');
        put_le(w, (uint64_t)(uint32_t)(int32_t)v, 4);
    } else {
        pkw_op(w, 0x8a);              /* LONG1: 8 bytes, two's complement */
        put_le(w, 8, 1);
        put_le(w, (uint64_t)v, 8);
    }
}

void pkw_int_tuple(pkw *w, int n, const int64_t *v)
{
    if (n == 0) {
        pkw_op(w, PK_EMPTY_TUPLE);
        return;
    }
    pkw_op(w, PK_MARK);
    for (int i = 0; i < n; i++)
        pkw_int(w, v[i]);
    pkw_op(w, PK_TUPLE);
}

void pkw_newobj(pkw *w, const char *module, const char *name)
{
    pkw_global(w, module, name);
    pkw_op(w, PK_EMPTY_TUPLE);
    pkw_op(w, PK_NEWOBJ);
}

int pkw_finish(pkw *w, const char *what, ckpt_error *err)
{
    pkw_op(w, PK_STOP);
    if (w->b.oom)
        return ckpt_err(err, -ENOMEM, "%s: out of memory for its pickle",
                        what);
    return 0;
}
