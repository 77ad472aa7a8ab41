/*
 * json.c - the JSON reader (see json.h): recursive descent with a depth
 * limit, strings checked to be valid UTF-8 with \u escapes (surrogate
 * pairs included) decoded; \u0000 is refused (a C string would end
 * there).
 */
#include "common/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

#define JSON_MAX_DEPTH 64

typedef struct parser {
    const char *p, *start, *end;
    const char *what;
    ckpt_error *err;
    uint64_t base;          /* the text's offset of start (json_walk) */
} parser;

static int fail(parser *ps, const char *why)
{
    return ckpt_err(ps->err, -EINVAL, "%s: bad JSON at byte %llu: %s",
                    ps->what,
                    (unsigned long long)(ps->base + (uint64_t)(ps->p -
                                                               ps->start)),
                    why);
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
                               *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int put_utf8(char *out, size_t *n, uint32_t cp)
{
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xc0 | cp >> 6);
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xe0 | cp >> 12);
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*n)++] = (char)(0xf0 | cp >> 18);
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
    return 0;
}

static int hex4(parser *ps, uint32_t *out)
{
    if (ps->end - ps->p < 4)
        return fail(ps, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = ps->p[i];
        int d = c >= '0' && c <= '9' ? c - '0' :
                c >= 'a' && c <= 'f' ? c - 'a' + 10 :
                c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return fail(ps, "bad \\u escape");
        v = v << 4 | (uint32_t)d;
    }
    ps->p += 4;
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 :
                 (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (!len || len > n)
        return 0;
    uint32_t cp = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

static int parse_string(parser *ps, char **out, size_t *olen)
{
    ps->p++;   /* the opening quote */
    const char *q = ps->p;
    while (q < ps->end && *q != '"')
        q += *q == '\\' ? 2 : 1;
    if (q >= ps->end)
        return fail(ps, "unterminated string");
    char *buf = malloc((size_t)(q - ps->p) + 1);   /* escapes only shrink */
    if (!buf)
        return ckpt_err(ps->err, -ENOMEM, "out of memory");
    size_t n = 0;
    int rc = 0;
    while (rc == 0 && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            rc = fail(ps, "control character in a string");
        } else if (c == '\\') {
            char e = ps->p[1];
            ps->p += 2;
            const char *simple = strchr("\"\\/bfnrt", e);
            if (e && simple) {
                buf[n++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            } else if (e == 'u') {
                uint32_t cp, lo;
                if ((rc = hex4(ps, &cp)) != 0)
                    break;
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (ps->end - ps->p < 2 || ps->p[0] != '\\' ||
                        ps->p[1] != 'u') {
                        rc = fail(ps, "lone surrogate in \\u escape");
                        break;
                    }
                    ps->p += 2;
                    if ((rc = hex4(ps, &lo)) != 0)
                        break;
                    if (lo < 0xdc00 || lo > 0xdfff) {
                        rc = fail(ps, "bad surrogate pair");
                        break;
                    }
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                    rc = fail(ps, "lone surrogate in \\u escape");
                    break;
                } else if (cp == 0) {
                    /* C strings end there: a name would be cut short */
                    rc = fail(ps, "\\u0000 (NUL) in a string: names and "
                              "values cannot hold it");
                    break;
                }
                put_utf8(buf, &n, cp);
            } else {
                rc = fail(ps, "bad escape");
            }
        } else {
            size_t k = utf8_len((const unsigned char *)ps->p,
                                (size_t)(q - ps->p));
            if (!k) {
                rc = fail(ps, "string is not valid UTF-8");
                break;
            }
            memcpy(buf + n, ps->p, k);
            n += k;
            ps->p += k;
        }
    }
    if (rc) {
        free(buf);
        return rc;
    }
    ps->p++;   /* the closing quote */
    buf[n] = '\0';
    *out = buf;
    *olen = n;
    return 0;
}

static int parse_number(parser *ps, json_val *v)
{
    const char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return fail(ps, "bad number");
    if (*ps->p == '0')
        ps->p++;
    else
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    int integral = 1;
    if (ps->p < ps->end && *ps->p == '.') {
        integral = 0;
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return fail(ps, "bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        integral = 0;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
            return fail(ps, "bad number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    size_t n = (size_t)(ps->p - s);
    if (!(v->s = malloc(n + 1)))
        return ckpt_err(ps->err, -ENOMEM, "out of memory");
    memcpy(v->s, s, n);
    v->s[n] = '\0';
    v->len = n;
    v->type = JSON_NUMBER;
    if (integral) {
        char *end;
        errno = 0;
        long long x = strtoll(v->s, &end, 10);
        v->is_int = errno == 0 && *end == '\0';
        v->i = x;
    }
    return 0;
}

static int parse_value(parser *ps, json_val *v, int depth);

static int add_slot(json_val *v, size_t *cap, int object)
{
    if (v->n < *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 2;   /* most are [a, b] or {k: v, ...} */
    json_val *items = realloc(v->items, n * sizeof *items);
    if (!items)
        return -ENOMEM;
    v->items = items;
    if (object) {
        char **keys = realloc(v->keys, n * sizeof *keys);
        if (!keys)
            return -ENOMEM;
        v->keys = keys;
        size_t *kl = realloc(v->key_lens, n * sizeof *kl);
        if (!kl)
            return -ENOMEM;
        v->key_lens = kl;
    }
    *cap = n;
    return 0;
}

static int parse_container(parser *ps, json_val *v, int depth, int object)
{
    if (depth >= JSON_MAX_DEPTH)
        return fail(ps, "nested too deeply");
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    char close = object ? '}' : ']';
    size_t cap = 0;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        if (add_slot(v, &cap, object))
            return ckpt_err(ps->err, -ENOMEM, "out of memory");
        json_val *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        skip_ws(ps);
        if (object) {
            if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, "expected a string key");
            v->keys[v->n] = NULL;
            int rc = parse_string(ps, &v->keys[v->n], &v->key_lens[v->n]);
            if (rc)
                return rc;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(v->keys[v->n]);
                return fail(ps, "expected ':'");
            }
            ps->p++;
        }
        v->n++;
        int rc = parse_value(ps, item, depth + 1);
        if (rc)
            return rc;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int literal(parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "unexpected character");
    ps->p += n;
    return 0;
}

static int parse_value(parser *ps, json_val *v, int depth)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end");
    switch (*ps->p) {
    case '{':
        return parse_container(ps, v, depth, 1);
    case '[':
        return parse_container(ps, v, depth, 0);
    case '"':
        v->type = JSON_STRING;
        return parse_string(ps, &v->s, &v->len);
    case 't':
        v->type = JSON_BOOL;
        v->boolean = 1;
        return literal(ps, "true");
    case 'f':
        v->type = JSON_BOOL;
        return literal(ps, "false");
    case 'n':
        v->type = JSON_NULL;
        return literal(ps, "null");
    default:
        return parse_number(ps, v);
    }
}

int json_parse(const char *text, size_t len, const char *what,
               json_val *out, ckpt_error *err)
{
    memset(out, 0, sizeof *out);
    parser ps = { text, text, text + len, what, err, 0 };
    int rc = parse_value(&ps, out, 0);
    if (rc == 0) {
        skip_ws(&ps);
        if (ps.p != ps.end)
            rc = fail(&ps, "text after the value");
    }
    if (rc)
        json_free(out);
    return rc;
}

/* ------------------------------------------------------------ the walk */

/* What json_walk has of the text: buf[lo..hi) is read and not yet
 * walked; `off` is the text's offset of buf[0]; `left` bytes are still
 * to be read. */
typedef struct window {
    char *buf;
    size_t cap, lo, hi;
    uint64_t off, left;
    json_read_fn rd;
    void *rarg;
    const char *what;
    ckpt_error *err;
} window;

#define WALK_WINDOW ((size_t)1 << 18)
/* A step that ends this near the end of what is read may have been cut
 * short by it (a number): it is tried again with more. */
#define WALK_SLACK 8

/* Moves the unwalked bytes to the front, doubles the window when they
 * fill half of it, and reads more. */
static int refill(window *w)
{
    size_t keep = w->hi - w->lo;
    memmove(w->buf, w->buf + w->lo, keep);
    w->off += w->lo;
    w->lo = 0;
    w->hi = keep;
    if (keep > w->cap / 2) {
        size_t cap = w->cap * 2;
        char *b = cap > w->cap ? realloc(w->buf, cap) : NULL;
        if (!b)
            return ckpt_err(w->err, -ENOMEM, "out of memory");
        w->buf = b;
        w->cap = cap;
    }
    size_t want = w->cap - w->hi;
    if (want > w->left)
        want = (size_t)w->left;
    int rc = w->rd(w->rarg, w->buf + w->hi, want, w->off + w->hi, w->err);
    if (rc)
        return rc;
    w->hi += want;
    w->left -= want;
    return 0;
}

/* One step of the walk over the unwalked bytes. */
typedef int (*step_fn)(parser *ps, void *ctx);

/* Runs `step` on the unwalked bytes, reading more (and running it again)
 * as long as it failed or ended within WALK_SLACK bytes of what is read
 * while more remains: an error is so reported only once the text's end
 * is in the window (where the error is, is not looked at: a string cut
 * by the window fails at its start), which costs a window as large as
 * the rest of the text, on that path only.  `undo` (or NULL) clears what
 * a step made before it runs again.  On success the step's bytes are
 * walked. */
static int walk_step(window *w, step_fn step, void (*undo)(void *), void *ctx)
{
    for (;;) {
        parser ps = { w->buf + w->lo, w->buf + w->lo, w->buf + w->hi,
                      w->what, w->err, w->off + w->lo };
        int rc = step(&ps, ctx);
        int short_read = w->left > 0 &&
                         (rc != 0 || (size_t)(ps.end - ps.p) < WALK_SLACK + 1);
        if (!short_read) {
            if (rc == 0)
                w->lo = (size_t)(ps.p - w->buf);
            return rc;
        }
        if (undo)
            undo(ctx);
        if ((rc = refill(w)) != 0)
            return rc;
    }
}

static int step_open(parser *ps, void *ctx)
{
    (void)ctx;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != '{')
        return fail(ps, "expected an object");
    ps->p++;
    return 0;
}

/* The first member's key, or the object's '}' (ctx: int *closed). */
static int step_first(parser *ps, void *ctx)
{
    skip_ws(ps);
    *(int *)ctx = ps->p < ps->end && *ps->p == '}';
    if (*(int *)ctx)
        ps->p++;
    return 0;
}

/* ',' before another member, or '}' (ctx: int *closed). */
static int step_next(parser *ps, void *ctx)
{
    skip_ws(ps);
    if (ps->p < ps->end && (*ps->p == ',' || *ps->p == '}')) {
        *(int *)ctx = *ps->p++ == '}';
        return 0;
    }
    return fail(ps, "expected ',' or '}'");
}

typedef struct key_ctx {
    char *key;
    int object;             /* the value begins with '{' */
} key_ctx;

static void key_undo(void *ctx)
{
    key_ctx *k = ctx;
    free(k->key);
    k->key = NULL;
}

static int step_key(parser *ps, void *ctx)
{
    key_ctx *k = ctx;
    size_t len;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"')
        return fail(ps, "expected a string key");
    int rc = parse_string(ps, &k->key, &len);
    if (rc)
        return rc;
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != ':')
        return fail(ps, "expected ':'");
    ps->p++;
    skip_ws(ps);
    k->object = ps->p < ps->end && *ps->p == '{';
    return 0;
}

static void value_undo(void *ctx)
{
    json_free(ctx);
}

static int step_value(parser *ps, void *ctx)
{
    return parse_value(ps, ctx, 2);
}

static int step_end(parser *ps, void *ctx)
{
    (void)ctx;
    skip_ws(ps);
    return ps->p == ps->end ? 0 : fail(ps, "text after the value");
}

/* Walks the object at the window's start: each member to fn, except the
 * one whose key is `nested` (when not NULL, and its value an object),
 * whose members go to fn one by one with that key as `outer`. */
static int walk_object(window *w, const char *nested, const char *outer,
                       json_member_fn fn, void *arg)
{
    int closed = 0;
    int rc = walk_step(w, step_open, NULL, NULL);
    if (rc == 0)
        rc = walk_step(w, step_first, NULL, &closed);
    while (rc == 0 && !closed) {
        key_ctx k = { 0 };
        json_val v = { 0 };
        rc = walk_step(w, step_key, key_undo, &k);
        if (rc == 0 && nested && k.object && strcmp(k.key, nested) == 0) {
            rc = walk_object(w, NULL, k.key, fn, arg);
        } else if (rc == 0) {
            rc = walk_step(w, step_value, value_undo, &v);
            if (rc == 0)
                rc = fn(arg, outer, k.key, &v, w->err);
        }
        json_free(&v);
        free(k.key);
        if (rc == 0)
            rc = walk_step(w, step_next, NULL, &closed);
    }
    return rc;
}

int json_walk(uint64_t len, json_read_fn rd, void *rarg, const char *what,
              const char *nested, json_member_fn fn, void *arg,
              ckpt_error *err)
{
    window w = { NULL, len < WALK_WINDOW ? (size_t)len + 1 : WALK_WINDOW,
                 0, 0, 0, len, rd, rarg, what, err };
    if (!(w.buf = malloc(w.cap)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = refill(&w);
    if (rc == 0)
        rc = walk_object(&w, nested, NULL, fn, arg);
    if (rc == 0)
        rc = walk_step(&w, step_end, NULL, NULL);
    free(w.buf);
    return rc;
}

void json_free(json_val *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        json_free(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->key_lens);
    free(v->s);
    memset(v, 0, sizeof *v);
}

const json_val *json_get(const json_val *o, const char *key)
{
    if (!o || o->type != JSON_OBJECT)
        return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < o->n; i++)
        if (o->key_lens[i] == n && memcmp(o->keys[i], key, n) == 0)
            return &o->items[i];
    return NULL;
}
