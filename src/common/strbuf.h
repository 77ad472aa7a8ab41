/*
 * strbuf.h - a growing byte buffer (text or binary), always followed by a
 * NUL; running out of memory is remembered (`oom`) and further appends
 * do nothing, so a builder checks once at the end.
 */
#ifndef CKPT_STRBUF_H
#define CKPT_STRBUF_H

#include <stddef.h>

typedef struct ckpt_strbuf {
    char *p;
    size_t len, cap;
    int oom;
} ckpt_strbuf;

/* Appends n bytes of s. */
void ckpt_strbuf_add(ckpt_strbuf *b, const void *s, size_t n);
/* Appends the string s. */
void ckpt_strbuf_puts(ckpt_strbuf *b, const char *s);
/* Frees the bytes; b is empty again. */
void ckpt_strbuf_free(ckpt_strbuf *b);

#endif
