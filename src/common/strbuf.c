/*
 * strbuf.c - the growing buffer of strbuf.h.
 */
#include "common/strbuf.h"

#include <stdlib.h>
#include <string.h>

void ckpt_strbuf_add(ckpt_strbuf *b, const void *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void ckpt_strbuf_puts(ckpt_strbuf *b, const char *s)
{
    ckpt_strbuf_add(b, s, strlen(s));
}

void ckpt_strbuf_free(ckpt_strbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}
