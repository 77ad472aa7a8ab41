/*
 * pickle.c - the restricted pickle machine (see pickle.h): a stack, a memo
 * and a mark stack, as in CPython's Unpickler, over the opcodes that
 * protocols 2 to 5 use for plain data, with globals looked up in a fixed
 * allowlist and calls recorded instead of made.  Every allocation is
 * counted against the caller's limit; every read is bounds-checked.
 */
#include "foreign/pickle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define PK_MAX_DEPTH 100
#define PK_MAX_MEMO ((size_t)1 << 20)

static const struct {
    const char *module, *name, *full;
} GLOBALS[PKG_COUNT] = {
#define PK_ROW_(id, mod, name) { mod, name, mod "." name },
    PK_GLOBALS(PK_ROW_)
#undef PK_ROW_
};

struct pk_ctx {
    pk_val **vals;          /* every value made, for freeing */
    size_t nvals, vals_cap;
    size_t used, limit;     /* bytes allocated, and the most allowed */
    pk_val **stack;
    size_t sp, stack_cap;
    size_t *marks;
    size_t nmarks, marks_cap;
    pk_val **memo;
    size_t memo_len, memo_next;
    const unsigned char *p, *start, *end;
    const char *what;
    ckpt_error *err;
};

/* The nesting depth of a container or object is kept in its `len` (which
 * only strings use otherwise). */
#define DEPTH(v) ((v)->type >= PK_TUPLE && (v)->type <= PK_DICT ? (v)->len : \
                  (v)->type == PK_OBJ ? (v)->len : 0)

static int fail(pk_ctx *c, int code, const char *fmt, const char *arg)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    return ckpt_err(c->err, code, "%s: pickle offset %zu: %s", c->what,
                    (size_t)(c->p - c->start), msg);
}

static int oom(pk_ctx *c)
{
    return fail(c, -E2BIG, "the pickle needs more than its memory limit "
                "(%s)", "corrupt, or not a checkpoint's metadata");
}

/* Counts n more bytes; 0 or -E2BIG. */
static int charge(pk_ctx *c, size_t n)
{
    if (n > c->limit - c->used)
        return oom(c);
    c->used += n;
    return 0;
}

/* Grows *v (elements of size sz, capacity *cap) to hold `need`. */
static int grow(pk_ctx *c, void **v, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    while (ncap < need)
        ncap *= 2;
    if (charge(c, (ncap - *cap) * sz))
        return -E2BIG;
    void *p = realloc(*v, ncap * sz);
    if (!p)
        return fail(c, -ENOMEM, "out of memory%s", NULL);
    *v = p;
    *cap = ncap;
    return 0;
}

static pk_val *new_val(pk_ctx *c, pk_type t)
{
    if (grow(c, (void **)&c->vals, &c->vals_cap, c->nvals + 1,
             sizeof *c->vals) || charge(c, sizeof(pk_val)))
        return NULL;
    pk_val *v = calloc(1, sizeof *v);
    if (!v) {
        fail(c, -ENOMEM, "out of memory%s", NULL);
        return NULL;
    }
    v->type = t;
    c->vals[c->nvals++] = v;
    return v;
}

static int add_item(pk_ctx *c, pk_val *v, pk_val *item)
{
    if (grow(c, (void **)&v->items, &v->cap, v->n + 1, sizeof *v->items))
        return -E2BIG;
    v->items[v->n++] = item;
    size_t d = DEPTH(item) + 1;
    if (d > v->len)
        v->len = d;
    if (v->len > PK_MAX_DEPTH)
        return fail(c, -EINVAL, "values nested deeper than 100%s", NULL);
    return 0;
}

/* ---------------------------------------------------------------- stack */

static int push(pk_ctx *c, pk_val *v)
{
    if (!v)
        return c->err ? c->err->code : -ENOMEM;
    if (grow(c, (void **)&c->stack, &c->stack_cap, c->sp + 1,
             sizeof *c->stack))
        return -E2BIG;
    c->stack[c->sp++] = v;
    return 0;
}

static size_t floor_sp(const pk_ctx *c)
{
    return c->nmarks ? c->marks[c->nmarks - 1] : 0;
}

static int pop(pk_ctx *c, pk_val **out)
{
    if (c->sp <= floor_sp(c))
        return fail(c, -EINVAL, "stack underflow%s", NULL);
    *out = c->stack[--c->sp];
    return 0;
}

static pk_val *top(pk_ctx *c)
{
    return c->sp > floor_sp(c) ? c->stack[c->sp - 1] : NULL;
}

/* Pops the mark: *first is the stack index of the first item above it. */
static int pop_mark(pk_ctx *c, size_t *first)
{
    if (!c->nmarks)
        return fail(c, -EINVAL, "no mark on the stack%s", NULL);
    *first = c->marks[--c->nmarks];
    return 0;
}

/* ---------------------------------------------------------------- input */

static int need(pk_ctx *c, size_t n)
{
    if ((size_t)(c->end - c->p) < n)
        return fail(c, -EINVAL, "truncated: ends inside an opcode%s", NULL);
    return 0;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--)
        x = x << 8 | p[i];
    return x;
}

/* Reads an n-byte little-endian length, then that many bytes. */
static int counted(pk_ctx *c, int nlen, const unsigned char **data,
                   size_t *len)
{
    if (need(c, (size_t)nlen))
        return -EINVAL;
    uint64_t n = le(c->p, nlen);
    c->p += nlen;
    if (n > (uint64_t)(c->end - c->p))
        return fail(c, -EINVAL, "truncated: a string runs past the end%s",
                    NULL);
    *data = c->p;
    *len = (size_t)n;
    c->p += n;
    return 0;
}

/* A text line ending in '\n' (GLOBAL, INT, FLOAT, GET, PUT). */
static int line(pk_ctx *c, const unsigned char **data, size_t *len)
{
    const unsigned char *nl = memchr(c->p, '\n', (size_t)(c->end - c->p));
    if (!nl)
        return fail(c, -EINVAL, "truncated: a text argument has no end%s",
                    NULL);
    *data = c->p;
    *len = (size_t)(nl - c->p);
    c->p = nl + 1;
    return 0;
}

static pk_val *new_str(pk_ctx *c, pk_type t, const unsigned char *s,
                       size_t n)
{
    if (charge(c, n + 1))
        return NULL;
    pk_val *v = new_val(c, t);
    if (!v)
        return NULL;
    if (!(v->s = malloc(n + 1))) {
        fail(c, -ENOMEM, "out of memory%s", NULL);
        return NULL;
    }
    memcpy(v->s, s, n);
    v->s[n] = '\0';
    v->len = n;
    return v;
}

static pk_val *new_int(pk_ctx *c, int64_t x)
{
    pk_val *v = new_val(c, PK_INT);
    if (v)
        v->i = x;
    return v;
}

/* A decimal integer line ("I" opcode; "I01"/"I00" are True/False). */
static int op_text_int(pk_ctx *c)
{
    const unsigned char *s = NULL;
    size_t n = 0;
    if (line(c, &s, &n))
        return -EINVAL;
    char buf[32];
    if (n == 0 || n >= sizeof buf)
        return fail(c, -EINVAL, "bad INT argument%s", NULL);
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (strcmp(buf, "01") == 0 || strcmp(buf, "00") == 0) {
        pk_val *v = new_val(c, PK_BOOL);
        if (v)
            v->i = buf[1] == '1';
        return push(c, v);
    }
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (*end || errno)
        return fail(c, -EINVAL, "bad INT argument '%s'", buf);
    return push(c, new_int(c, x));
}

/* LONG1 / LONG4: two's complement little-endian, at most 8 bytes here. */
static int op_long(pk_ctx *c, int nlen)
{
    const unsigned char *d = NULL;
    size_t n = 0;
    if (counted(c, nlen, &d, &n))
        return -EINVAL;
    if (n > 8)
        return fail(c, -EINVAL, "integer wider than 64 bits%s", NULL);
    uint64_t x = n ? le(d, (int)n) : 0;
    if (n && n < 8 && (d[n - 1] & 0x80))
        x |= ~(uint64_t)0 << (8 * n);
    return push(c, new_int(c, (int64_t)x));
}

static int op_binfloat(pk_ctx *c)
{
    if (need(c, 8))
        return -EINVAL;
    uint64_t x = 0;
    for (int i = 0; i < 8; i++)
        x = x << 8 | c->p[i];   /* big-endian */
    c->p += 8;
    double d;
    memcpy(&d, &x, sizeof d);
    pk_val *v = new_val(c, PK_FLOAT);
    if (v)
        v->f = d;
    return push(c, v);
}

static int op_text_float(pk_ctx *c)
{
    const unsigned char *s = NULL;
    size_t n = 0;
    if (line(c, &s, &n))
        return -EINVAL;
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return fail(c, -EINVAL, "bad FLOAT argument%s", NULL);
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    double d = strtod(buf, &end);
    if (*end)
        return fail(c, -EINVAL, "bad FLOAT argument '%s'", buf);
    pk_val *v = new_val(c, PK_FLOAT);
    if (v)
        v->f = d;
    return push(c, v);
}

static int op_counted_str(pk_ctx *c, int nlen, pk_type t)
{
    const unsigned char *d = NULL;
    size_t n = 0;
    if (counted(c, nlen, &d, &n))
        return -EINVAL;
    return push(c, new_str(c, t, d, n));
}

/* ---------------------------------------------------------------- globals */

static int find_global(const char *module, size_t mlen, const char *name,
                       size_t nlen)
{
    for (int i = 0; i < PKG_COUNT; i++)
        if (strlen(GLOBALS[i].module) == mlen &&
            memcmp(GLOBALS[i].module, module, mlen) == 0 &&
            strlen(GLOBALS[i].name) == nlen &&
            memcmp(GLOBALS[i].name, name, nlen) == 0)
            return i;
    return -1;
}

static int push_global(pk_ctx *c, const char *module, size_t mlen,
                       const char *name, size_t nlen)
{
    int id = find_global(module, mlen, name, nlen);
    if (id < 0) {
        char full[256];
        snprintf(full, sizeof full, "%.*s.%.*s", (int)(mlen > 120 ? 120 : mlen),
                 module, (int)(nlen > 120 ? 120 : nlen), name);
        for (char *q = full; *q; q++)
            if ((unsigned char)*q < 0x20 || *q == 0x7f)
                *q = '?';
        return fail(c, -EINVAL, "refusing global '%s': not a class of "
                    "PyTorch checkpoint metadata (the reader runs no code)",
                    full);
    }
    pk_val *v = new_val(c, PK_GLOBAL);
    if (v)
        v->i = id;
    return push(c, v);
}

static int op_global(pk_ctx *c)
{
    const unsigned char *m = NULL, *n = NULL;
    size_t ml = 0, nl = 0;
    if (line(c, &m, &ml) || line(c, &n, &nl))
        return -EINVAL;
    return push_global(c, (const char *)m, ml, (const char *)n, nl);
}

static int op_stack_global(pk_ctx *c)
{
    pk_val *name, *module;
    if (pop(c, &name) || pop(c, &module))
        return -EINVAL;
    if (name->type != PK_STR || module->type != PK_STR)
        return fail(c, -EINVAL, "STACK_GLOBAL needs two strings%s", NULL);
    return push_global(c, module->s, module->len, name->s, name->len);
}

static int is_value_global(int id)
{
    return id == PKG_STRIDED || id == PKG_CONTIGUOUS ||
           id == PKG_CHANNELS_LAST || id == PKG_PRESERVE ||
           id == PKG_UNTYPED_STORAGE || id == PKG_UNTYPED_STORAGE2 ||
           (id >= PKG_DT_F64 && id <= PKG_ST_BOOL);
}

/* _codecs.encode(s, "latin1"): how protocol 2 pickles bytes, as the
 * string of their code points.  Strict: s must be UTF-8 of code points
 * below 256, and the encoding latin1 (Python would fail otherwise). */
static int call_encode(pk_ctx *c, const pk_val *args)
{
    const pk_val *s = pk_item(args, 0), *enc = pk_item(args, 1);
    if (args->n != 2 || s->type != PK_STR || enc->type != PK_STR ||
        (strcmp(enc->s, "latin1") != 0 && strcmp(enc->s, "latin-1") != 0))
        return fail(c, -EINVAL, "_codecs.encode other than of a string to "
                    "latin1%s", NULL);
    pk_val *v = new_str(c, PK_BYTES, (const unsigned char *)s->s, s->len);
    if (!v)
        return -E2BIG;
    const unsigned char *p = (const unsigned char *)s->s, *end = p + s->len;
    size_t n = 0;
    while (p < end) {
        if (p[0] < 0x80) {
            v->s[n++] = (char)*p++;
        } else if ((p[0] == 0xc2 || p[0] == 0xc3) && end - p >= 2 &&
                   (p[1] & 0xc0) == 0x80) {
            v->s[n++] = (char)(((p[0] & 0x03) << 6) | (p[1] & 0x3f));
            p += 2;
        } else {
            return fail(c, -EINVAL, "_codecs.encode of a string that is not "
                        "latin1 in UTF-8%s", NULL);
        }
    }
    v->s[n] = '\0';
    v->len = n;
    return push(c, v);
}

/* cls(*args): records the call, except for the few that only build data
 * (torch.Size, OrderedDict, pathlib paths, bytes), which give that data. */
static int call(pk_ctx *c, pk_val *cls, pk_val *args)
{
    if (cls->type != PK_GLOBAL)
        return fail(c, -EINVAL, "calling something that is not a global%s",
                    NULL);
    if (args->type != PK_TUPLE)
        return fail(c, -EINVAL, "call arguments are not a tuple%s", NULL);
    int id = (int)cls->i;
    if (is_value_global(id))
        return fail(c, -EINVAL, "refusing to call '%s'", GLOBALS[id].full);
    if (id == PKG_TORCH_SIZE) {
        pk_val *t = new_val(c, PK_TUPLE);
        const pk_val *src = args->n ? args->items[0] : NULL;
        if (!t)
            return -E2BIG;
        if (src && (src->type == PK_TUPLE || src->type == PK_LIST))
            for (size_t i = 0; i < src->n; i++)
                if (add_item(c, t, src->items[i]))
                    return -EINVAL;
        return push(c, t);
    }
    if (id == PKG_CODECS_ENCODE)
        return call_encode(c, args);
    if (id == PKG_BUILTIN_BYTES) {
        if (args->n)
            return fail(c, -EINVAL, "bytes() with arguments%s", NULL);
        return push(c, new_str(c, PK_BYTES, (const unsigned char *)"", 0));
    }
    if (id == PKG_ORDERED_DICT) {
        if (args->n)
            return fail(c, -EINVAL, "OrderedDict with arguments%s", NULL);
        return push(c, new_val(c, PK_DICT));
    }
    /* Python 3.13 moved the classes to pathlib._local */
    if (id == PKG_POSIX_PATH || id == PKG_PURE_POSIX_PATH || id == PKG_PATH ||
        id == PKG_POSIX_PATH313 || id == PKG_PURE_POSIX_PATH313 ||
        id == PKG_PATH313) {
        size_t total = 0;
        for (size_t i = 0; i < args->n; i++) {
            if (args->items[i]->type != PK_STR)
                return fail(c, -EINVAL, "a path made of something other "
                            "than strings%s", NULL);
            total += args->items[i]->len + 1;
        }
        if (charge(c, total + 1))
            return -E2BIG;
        char *buf = malloc(total + 1);
        if (!buf)
            return fail(c, -ENOMEM, "out of memory%s", NULL);
        size_t n = 0;
        for (size_t i = 0; i < args->n; i++) {
            if (n && buf[n - 1] != '/')
                buf[n++] = '/';
            memcpy(buf + n, args->items[i]->s, args->items[i]->len);
            n += args->items[i]->len;
        }
        pk_val *v = new_str(c, PK_STR, (unsigned char *)buf, n);
        free(buf);
        return push(c, v);
    }
    pk_val *o = new_val(c, PK_OBJ);
    if (!o)
        return -E2BIG;
    o->cls = cls;
    o->args = args;
    o->len = DEPTH(args) + 1;
    return push(c, o);
}

static int op_reduce(pk_ctx *c)
{
    pk_val *args, *cls;
    if (pop(c, &args) || pop(c, &cls))
        return -EINVAL;
    return call(c, cls, args);
}

static int op_build(pk_ctx *c)
{
    pk_val *state;
    if (pop(c, &state))
        return -EINVAL;
    pk_val *o = top(c);
    /* An OrderedDict with attributes (a module's state_dict keeps its
     * `_metadata` so) is built with them: kept aside as its state. */
    if (!o || (o->type != PK_OBJ && o->type != PK_DICT))
        return fail(c, -EINVAL, "BUILD on something that is not an "
                    "object%s", NULL);
    o->state = state;
    if (DEPTH(state) + 1 > o->len)
        o->len = DEPTH(state) + 1;
    if (o->len > PK_MAX_DEPTH)
        return fail(c, -EINVAL, "values nested deeper than 100%s", NULL);
    return 0;
}

/* ---------------------------------------------------------------- containers */

/* Makes a TUPLE/LIST of the items above the mark (or the top n). */
static int collect(pk_ctx *c, pk_type t, size_t first)
{
    pk_val *v = new_val(c, t);
    if (!v)
        return -E2BIG;
    for (size_t i = first; i < c->sp; i++)
        if (add_item(c, v, c->stack[i]))
            return -EINVAL;
    c->sp = first;
    return push(c, v);
}

static int op_tuple_n(pk_ctx *c, size_t n)
{
    if (c->sp - floor_sp(c) < n)
        return fail(c, -EINVAL, "stack underflow%s", NULL);
    return collect(c, PK_TUPLE, c->sp - n);
}

static int op_marked(pk_ctx *c, pk_type t)
{
    size_t first = 0;
    if (pop_mark(c, &first))
        return -EINVAL;
    if (t != PK_DICT)
        return collect(c, t, first);
    if ((c->sp - first) % 2)
        return fail(c, -EINVAL, "odd number of items for a dict%s", NULL);
    return collect(c, PK_DICT, first);
}

/* Appends items [first, sp) to the list or pairs to the dict below them. */
static int extend(pk_ctx *c, size_t first, pk_type want)
{
    if (first == 0 || first <= (c->nmarks ? c->marks[c->nmarks - 1] : 0) ||
        first > c->sp)
        return fail(c, -EINVAL, "stack underflow%s", NULL);
    pk_val *target = c->stack[first - 1];
    if (target->type != want)
        return fail(c, -EINVAL, "%s on the wrong kind of value",
                    want == PK_DICT ? "SETITEMS" : "APPENDS");
    if (want == PK_DICT && (c->sp - first) % 2)
        return fail(c, -EINVAL, "odd number of items for a dict%s", NULL);
    for (size_t i = first; i < c->sp; i++)
        if (add_item(c, target, c->stack[i]))
            return -EINVAL;
    c->sp = first;
    return 0;
}

static int op_extend_marked(pk_ctx *c, pk_type want)
{
    size_t first = 0;
    if (pop_mark(c, &first))
        return -EINVAL;
    return extend(c, first, want);
}

static int op_extend_n(pk_ctx *c, size_t n, pk_type want)
{
    if (c->sp - floor_sp(c) < n + 1)
        return fail(c, -EINVAL, "stack underflow%s", NULL);
    return extend(c, c->sp - n, want);
}

/* ---------------------------------------------------------------- memo */

static int memo_put(pk_ctx *c, uint64_t idx)
{
    pk_val *v = top(c);
    if (!v)
        return fail(c, -EINVAL, "memoizing an empty stack%s", NULL);
    if (idx >= PK_MAX_MEMO)
        return fail(c, -EINVAL, "memo index too large%s", NULL);
    size_t cap = c->memo_len;
    if (grow(c, (void **)&c->memo, &cap, (size_t)idx + 1, sizeof *c->memo))
        return -E2BIG;
    for (size_t i = c->memo_len; i < cap; i++)
        c->memo[i] = NULL;
    c->memo_len = cap;
    c->memo[idx] = v;
    return 0;
}

static int memo_get(pk_ctx *c, uint64_t idx)
{
    if (idx >= c->memo_len || !c->memo[idx])
        return fail(c, -EINVAL, "memo lookup of a missing entry%s", NULL);
    return push(c, c->memo[idx]);
}

static int text_index(pk_ctx *c, uint64_t *idx)
{
    const unsigned char *s = NULL;
    size_t n = 0;
    if (line(c, &s, &n))
        return -EINVAL;
    uint64_t x = 0;
    if (n == 0 || n > 9)
        return fail(c, -EINVAL, "bad memo index%s", NULL);
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return fail(c, -EINVAL, "bad memo index%s", NULL);
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *idx = x;
    return 0;
}

static int fixed_index(pk_ctx *c, int n, uint64_t *idx)
{
    if (need(c, (size_t)n))
        return -EINVAL;
    *idx = le(c->p, n);
    c->p += n;
    return 0;
}

/* ---------------------------------------------------------------- run */

static int push_type(pk_ctx *c, pk_type t, int64_t i)
{
    pk_val *v = new_val(c, t);
    if (v)
        v->i = i;
    return push(c, v);
}

static int step(pk_ctx *c, int op, int *stop)
{
    uint64_t idx;
    pk_val *v, *w;
    size_t first = 0;
    switch (op) {
    case 0x80:   /* PROTO */
        if (need(c, 1))
            return -EINVAL;
        if (c->p[0] > 5)
            return fail(c, -ENOTSUP, "pickle protocol newer than 5%s", NULL);
        c->p++;
        return 0;
    case 0x95:   /* FRAME: a length hint only */
        if (need(c, 8))
            return -EINVAL;
        c->p += 8;
        return 0;
    case '.':   /* STOP */
        *stop = 1;
        return 0;
    case '(':   /* MARK */
        if (grow(c, (void **)&c->marks, &c->marks_cap, c->nmarks + 1,
                 sizeof *c->marks))
            return -E2BIG;
        c->marks[c->nmarks++] = c->sp;
        return 0;
    case '0':   /* POP */
        if (c->sp > floor_sp(c))
            return pop(c, &v);
        return pop_mark(c, &first);
    case '1':   /* POP_MARK */
        if (pop_mark(c, &first))
            return -EINVAL;
        c->sp = first;
        return 0;
    case '2':   /* DUP */
        if (!(v = top(c)))
            return fail(c, -EINVAL, "stack underflow%s", NULL);
        return push(c, v);
    case 'N':
        return push_type(c, PK_NONE, 0);
    case 0x88:
        return push_type(c, PK_BOOL, 1);
    case 0x89:
        return push_type(c, PK_BOOL, 0);
    case 'I':
        return op_text_int(c);
    case 'J':   /* BININT */
        if (need(c, 4))
            return -EINVAL;
        idx = le(c->p, 4);
        c->p += 4;
        return push(c, new_int(c, (int32_t)(uint32_t)idx));
    case 'K':
        if (fixed_index(c, 1, &idx))
            return -EINVAL;
        return push(c, new_int(c, (int64_t)idx));
    case 'M':
        if (fixed_index(c, 2, &idx))
            return -EINVAL;
        return push(c, new_int(c, (int64_t)idx));
    case 0x8a:
        return op_long(c, 1);
    case 0x8b:
        return op_long(c, 4);
    case 'G':
        return op_binfloat(c);
    case 'F':
        return op_text_float(c);
    case 0x8c:   /* SHORT_BINUNICODE */
        return op_counted_str(c, 1, PK_STR);
    case 'X':
        return op_counted_str(c, 4, PK_STR);
    case 0x8d:
        return op_counted_str(c, 8, PK_STR);
    case 'U':   /* SHORT_BINSTRING (protocol 1 str) */
        return op_counted_str(c, 1, PK_STR);
    case 'T':
        return op_counted_str(c, 4, PK_STR);
    case 'C':   /* SHORT_BINBYTES */
        return op_counted_str(c, 1, PK_BYTES);
    case 'B':
        return op_counted_str(c, 4, PK_BYTES);
    case 0x8e:
        return op_counted_str(c, 8, PK_BYTES);
    case ')':
        return push(c, new_val(c, PK_TUPLE));
    case 0x85:
    case 0x86:
    case 0x87:
        return op_tuple_n(c, (size_t)(op - 0x84));
    case 't':
        return op_marked(c, PK_TUPLE);
    case ']':
        return push(c, new_val(c, PK_LIST));
    case 'l':
        return op_marked(c, PK_LIST);
    case '}':
        return push(c, new_val(c, PK_DICT));
    case 'd':
        return op_marked(c, PK_DICT);
    case 'a':
        return op_extend_n(c, 1, PK_LIST);
    case 'e':
        return op_extend_marked(c, PK_LIST);
    case 's':
        return op_extend_n(c, 2, PK_DICT);
    case 'u':
        return op_extend_marked(c, PK_DICT);
    case 'c':
        return op_global(c);
    case 0x93:
        return op_stack_global(c);
    case 'R':
    case 0x81:   /* NEWOBJ: cls, args -> the same record */
        return op_reduce(c);
    case 'b':
        return op_build(c);
    case 'Q':   /* BINPERSID */
        if (pop(c, &w))
            return -EINVAL;
        if (!(v = new_val(c, PK_PERSID)))
            return -E2BIG;
        v->args = w;
        v->len = DEPTH(w) + 1;
        return push(c, v);
    case 'p':
        return text_index(c, &idx) ? -EINVAL : memo_put(c, idx);
    case 'q':
        return fixed_index(c, 1, &idx) ? -EINVAL : memo_put(c, idx);
    case 'r':
        return fixed_index(c, 4, &idx) ? -EINVAL : memo_put(c, idx);
    case 0x94:   /* MEMOIZE */
        return memo_put(c, c->memo_next++);
    case 'g':
        return text_index(c, &idx) ? -EINVAL : memo_get(c, idx);
    case 'h':
        return fixed_index(c, 1, &idx) ? -EINVAL : memo_get(c, idx);
    case 'j':
        return fixed_index(c, 4, &idx) ? -EINVAL : memo_get(c, idx);
    default: {
        char hex[8];
        snprintf(hex, sizeof hex, "0x%02x", op);
        return fail(c, -EINVAL, "opcode %s is not one that checkpoint "
                    "metadata uses", hex);
    }
    }
}

void pk_free(pk_ctx *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nvals; i++) {
        free(c->vals[i]->s);
        free(c->vals[i]->items);
        free(c->vals[i]);
    }
    free(c->vals);
    free(c->stack);
    free(c->marks);
    free(c->memo);
    free(c);
}

int pk_load(const void *data, size_t len, size_t mem_limit, const char *what,
            pk_ctx **out, pk_val **root, ckpt_error *err)
{
    *out = NULL;
    *root = NULL;
    pk_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return ckpt_err(err, -ENOMEM, "out of memory");
    c->limit = mem_limit;
    c->start = c->p = data;
    c->end = c->start + len;
    c->what = what;
    c->err = err;
    int stop = 0, rc = 0;
    while (!stop && rc == 0) {
        if (c->p >= c->end) {
            rc = fail(c, -EINVAL, "truncated: no STOP opcode%s", NULL);
            break;
        }
        int op = *c->p++;
        rc = step(c, op, &stop);
    }
    if (rc == 0 && (c->sp != 1 || c->nmarks))
        rc = fail(c, -EINVAL, "STOP with %s on the stack",
                  c->sp ? "more than one value" : "nothing");
    if (rc) {
        pk_free(c);
        return rc;
    }
    *root = c->stack[0];
    *out = c;
    return 0;
}

/* ---------------------------------------------------------------- queries */

const char *pk_global_name(int id)
{
    return id >= 0 && id < PKG_COUNT ? GLOBALS[id].full : "?";
}

int pk_global_of(const pk_val *v)
{
    if (v && v->type == PK_OBJ)
        v = v->cls;
    return v && v->type == PK_GLOBAL ? (int)v->i : -1;
}

const pk_val *pk_dict_get(const pk_val *d, const char *key)
{
    if (!d || d->type != PK_DICT)
        return NULL;
    for (size_t i = d->n; i >= 2; i -= 2) {   /* the last value wins */
        const pk_val *k = d->items[i - 2];
        if (k->type == PK_STR && strcmp(k->s, key) == 0 &&
            strlen(key) == k->len)
            return d->items[i - 1];
    }
    return NULL;
}

const pk_val *pk_attr(const pk_val *o, const char *name)
{
    if (!o || o->type != PK_OBJ || !o->state)
        return NULL;
    const pk_val *st = o->state;
    if (st->type == PK_DICT)
        return pk_dict_get(st, name);
    if (st->type == PK_TUPLE && st->n == 2) {   /* (dict, slots) */
        const pk_val *v = pk_dict_get(st->items[1], name);
        return v ? v : pk_dict_get(st->items[0], name);
    }
    return NULL;
}

const pk_val *pk_item(const pk_val *v, size_t i)
{
    if (!v || (v->type != PK_TUPLE && v->type != PK_LIST) || i >= v->n)
        return NULL;
    return v->items[i];
}

int pk_dims(const pk_val *v, int64_t *dims)
{
    if (!v || (v->type != PK_TUPLE && v->type != PK_LIST) ||
        v->n > CKPT_MAX_DIMS)
        return -1;
    for (size_t i = 0; i < v->n; i++) {
        if (v->items[i]->type != PK_INT || v->items[i]->i < 0)
            return -1;
        dims[i] = v->items[i]->i;
    }
    return (int)v->n;
}
