/*
 * dcp_planner.c - DCP's planner data as JSON (see dcp_planner.h).
 */
#include "foreign/dcp_planner.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/grow.h"

typedef struct text {
    char *s;
    size_t n, cap;
    int oom;
} text;

static void put(text *t, const char *s, size_t len)
{
    for (size_t i = 0; i < len && !t->oom; i++) {
        char *ns = ckpt_grow(t->s, t->n + 1, &t->cap, 1, 256);
        if (!ns) {
            t->oom = 1;
            return;
        }
        t->s = ns;
        t->s[t->n++] = s[i];
    }
}

/* A JSON string: '"', '\' and control characters escaped, the rest (the
 * pickle's UTF-8) kept. */
static void put_str(text *t, const char *s)
{
    put(t, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            put(t, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            put(t, esc, 6);
        } else {
            put(t, (const char *)p, 1);
        }
    }
    put(t, "\"", 1);
}

/* A key path: a TUPLE or LIST of STRs and INTs. */
static int is_path(const pk_val *v)
{
    if (!v || (v->type != PK_TUPLE && v->type != PK_LIST))
        return 0;
    for (size_t i = 0; i < v->n; i++)
        if (v->items[i]->type != PK_STR && v->items[i]->type != PK_INT)
            return 0;
    return 1;
}

static int is_mapping(const pk_val *pd)
{
    if (pd->type != PK_DICT || pd->n == 0)
        return 0;
    for (size_t i = 0; i + 1 < pd->n; i += 2)
        if (pd->items[i]->type != PK_STR || !is_path(pd->items[i + 1]))
            return 0;
    return 1;
}

int ckpt_dcp_planner_json(const pk_val *pd, char **out, ckpt_error *err)
{
    *out = NULL;
    if (!pd || !is_mapping(pd))
        return 0;
    text t = { 0 };
    put(&t, "{", 1);
    for (size_t i = 0; i + 1 < pd->n; i += 2) {
        const pk_val *path = pd->items[i + 1];
        if (i)
            put(&t, ",", 1);
        put_str(&t, pd->items[i]->s);
        put(&t, ":[", 2);
        for (size_t j = 0; j < path->n; j++) {
            const pk_val *k = path->items[j];
            char num[32];
            if (j)
                put(&t, ",", 1);
            if (k->type == PK_STR) {
                put_str(&t, k->s);
            } else {
                snprintf(num, sizeof num, "%" PRId64, k->i);
                put(&t, num, strlen(num));
            }
        }
        put(&t, "]", 1);
    }
    put(&t, "}", 2);   /* with the terminating NUL */
    if (t.oom) {
        free(t.s);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    *out = t.s;
    return 0;
}
