/*
 * names.c - FQN components to path components and back (see names.h and
 * docs/MOUNT.md).  Pure string code: no allocation, no state.
 */
#include "names.h"

#include <errno.h>
#include <string.h>

static const char hex_digits[] = "0123456789ABCDEF";

/* A byte that cannot stand for itself inside a path component. */
static int must_escape(unsigned char b)
{
    return b == '%' || b == '/' || b < 0x20 || b == 0x7f;
}

/* Appends byte b at position n of out if it fits (leaving room for the
 * NUL); returns n + 1 either way. */
static size_t put(char *out, size_t cap, size_t n, char b)
{
    if (n + 1 < cap)
        out[n] = b;
    return n + 1;
}

static size_t terminate(char *out, size_t cap, size_t n)
{
    if (cap > 0)
        out[n < cap ? n : cap - 1] = '\0';
    return n;
}

size_t names_escape(const char *comp, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    if (len == 0)
        return terminate(out, cap, put(out, cap, 0, '%'));
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)comp[i];
        if (must_escape(b)) {
            n = put(out, cap, n, '%');
            n = put(out, cap, n, hex_digits[b >> 4]);
            n = put(out, cap, n, hex_digits[b & 15]);
        } else {
            n = put(out, cap, n, (char)b);
        }
    }
    return terminate(out, cap, n);
}

/* Value of an uppercase hex digit, or -1. */
static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes the "%XX" at s (s[0] == '%') into *b; -EINVAL unless it is the
 * canonical escape of a byte that must be escaped. */
static int decode_escape(const char *s, unsigned char *b)
{
    int hi = hex_value(s[1]);
    int lo = hi < 0 ? -1 : hex_value(s[2]);
    if (lo < 0)
        return -EINVAL;
    *b = (unsigned char)(hi << 4 | lo);
    return *b != 0 && must_escape(*b) ? 0 : -EINVAL;
}

ssize_t names_unescape(const char *name, char *out, size_t cap)
{
    if (name[0] == '\0')
        return -EINVAL;
    if (strcmp(name, "%") == 0) {
        if (cap < 1)
            return -ENAMETOOLONG;
        out[0] = '\0';
        return 0;
    }
    size_t n = 0;
    for (const char *p = name; *p; n++) {
        unsigned char b = (unsigned char)*p;
        if (b == '%') {
            if (decode_escape(p, &b))
                return -EINVAL;
            p += 3;
        } else if (b == '.' || must_escape(b)) {
            return -EINVAL;
        } else {
            p++;
        }
        if (n + 1 >= cap)
            return -ENAMETOOLONG;
        out[n] = (char)b;
    }
    out[n] = '\0';
    return (ssize_t)n;
}

void names_iter_init(names_iter *it, const char *fqn)
{
    it->next = fqn;
}

int names_iter_next(names_iter *it, const char **comp, size_t *len)
{
    if (!it->next)
        return 0;
    const char *dot = strchr(it->next, '.');
    *comp = it->next;
    if (dot) {
        *len = (size_t)(dot - it->next);
        it->next = dot + 1;
    } else {
        *len = strlen(it->next);
        it->next = NULL;
    }
    return 1;
}

size_t names_count(const char *fqn)
{
    size_t n = 1;
    for (const char *p = fqn; (p = strchr(p, '.')) != NULL; p++)
        n++;
    return n;
}

size_t names_fqn_to_path(const char *fqn, char *out, size_t cap)
{
    names_iter it;
    const char *comp;
    size_t len, n = 0;
    names_iter_init(&it, fqn);
    for (int first = 1; names_iter_next(&it, &comp, &len); first = 0) {
        if (!first)
            n = put(out, cap, n, '/');
        size_t room = n < cap ? cap - n : 0;
        n += names_escape(comp, len, out + (n < cap ? n : 0), room);
    }
    return terminate(out, cap, n);
}

ssize_t names_path_to_fqn(const char *path, char *out, size_t cap)
{
    char comp[4096];
    size_t n = 0;
    const char *p = path;
    for (int first = 1;; first = 0) {
        const char *slash = strchr(p, '/');
        size_t clen = slash ? (size_t)(slash - p) : strlen(p);
        if (clen == 0 || clen >= sizeof comp)
            return clen == 0 ? -EINVAL : -ENAMETOOLONG;
        memcpy(comp, p, clen);
        comp[clen] = '\0';
        if (!first) {
            if (n + 1 >= cap)
                return -ENAMETOOLONG;
            out[n++] = '.';
        }
        ssize_t k = names_unescape(comp, out + n, cap - n);
        if (k < 0)
            return k;
        n += (size_t)k;
        if (!slash)
            return (ssize_t)n;
        p = slash + 1;
    }
}
