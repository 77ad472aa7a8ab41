/*
 * pkw.h - a small pickle writer: the opcodes of protocol 2 that torch.save's
 * data.pkl and DCP's .metadata need (globals, tuples, dicts, lists, ints,
 * strings, persistent ids), appended to a growing buffer.  Out of memory
 * is remembered and reported once, at pkw_take.
 */
#ifndef CKPT_EXPORT_PKW_H
#define CKPT_EXPORT_PKW_H

#include <stddef.h>
#include <stdint.h>

#include "ckptfs.h"
#include "common/strbuf.h"

/* Opcodes used by name. */
#define PK_MARK '('
#define PK_STOP '.'
#define PK_NONE 'N'
#define PK_REDUCE 'R'
#define PK_BUILD 'b'
#define PK_TUPLE 't'
#define PK_EMPTY_TUPLE ')'
#define PK_EMPTY_DICT '}'
#define PK_EMPTY_LIST ']'
#define PK_APPEND 'a'
#define PK_SETITEMS 'u'
#define PK_BINPERSID 'Q'
#define PK_NEWOBJ 0x81
#define PK_TUPLE1 0x85
#define PK_NEWFALSE 0x89

typedef struct pkw {
    ckpt_strbuf b;      /* the pickle so far (b.p, b.len) */
} pkw;

/* An empty buffer beginning with PROTO 2. */
void pkw_init(pkw *w);
void pkw_free(pkw *w);
void pkw_op(pkw *w, int op);
/* GLOBAL "module\nname\n". */
void pkw_global(pkw *w, const char *module, const char *name);
/* BINUNICODE (the string's UTF-8 bytes as they are). */
void pkw_str(pkw *w, const char *s);
/* The shortest of BININT1, BININT2, BININT, LONG1. */
void pkw_int(pkw *w, int64_t v);
/* A tuple of n ints (EMPTY_TUPLE for n == 0). */
void pkw_int_tuple(pkw *w, int n, const int64_t *v);
/* `module.name()` built with NEWOBJ of an empty tuple (a dataclass). */
void pkw_newobj(pkw *w, const char *module, const char *name);
/* STOP; then 0 (the bytes are w->b) or -ENOMEM naming `what`. */
int pkw_finish(pkw *w, const char *what, ckpt_error *err);

#endif
