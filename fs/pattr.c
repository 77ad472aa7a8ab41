/*
 * pattr.c - the user.ckpt.* attributes of a piece written through the
 * mount: parsing and checking values as they are set, and the piece they
 * describe (see pattr.h).
 */
#include "pattr.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/shape.h"

/* The upper bound of a stream whose length only its bytes will tell:
 * far beyond any file, far below int64 overflow. */
/* The longest attribute value accepted (CKPT_MAX_DIMS numbers). */
#define VALUE_MAX 1024

const char *const pattr_names[PATTR_NKEYS] = {
    "user.ckpt.dtype", "user.ckpt.shape", "user.ckpt.offsets",
    "user.ckpt.sizes", "user.ckpt.replica",
};

#define PIECE_ATTR "user.ckpt.piece"
#define KEY_PREFIX "user.ckpt."

unsigned pattr_key(const char *name)
{
    if (strcmp(name, PIECE_ATTR) == 0)
        return PATTR_PIECE;
    for (unsigned i = 0; i < PATTR_NKEYS; i++)
        if (strcmp(name, pattr_names[i]) == 0)
            return 1u << i;
    return 0;
}

static const char *key_name(unsigned key)
{
    for (unsigned i = 0; i < PATTR_NKEYS; i++)
        if (key == 1u << i)
            return pattr_names[i];
    return "?";
}

/* Parses a dims list into dims; its rank, or -EINVAL. */
static int parse_dims(unsigned key, const char *text, int64_t *dims,
                      ckpt_error *err)
{
    ckpt_error perr = { 0 };
    int n = ckpt_shape_parse(text, dims, &perr);
    if (n < 0)
        return ckpt_err(err, -EINVAL, "%s: %s", key_name(key), perr.msg);
    return n;
}

/* offsets (+ sizes) against shape, when those are set. */
static int check_fit(const pattr *a, ckpt_error *err)
{
    if (!(a->set & PATTR_SHAPE))
        return 0;
    if ((a->set & PATTR_OFFSETS) && a->noff != a->ndim)
        return ckpt_err(err, -EINVAL, "user.ckpt.offsets has %d numbers but "
                        "user.ckpt.shape has %d dimensions", a->noff,
                        a->ndim);
    if ((a->set & PATTR_SIZES) && a->nsizes != a->ndim)
        return ckpt_err(err, -EINVAL, "user.ckpt.sizes has %d numbers but "
                        "user.ckpt.shape has %d dimensions", a->nsizes,
                        a->ndim);
    for (int i = 0; i < a->ndim; i++) {
        int64_t off = (a->set & PATTR_OFFSETS) ? a->offsets[i] : 0;
        int64_t size = (a->set & PATTR_SIZES) ? a->sizes[i] : 0;
        if (off > a->shape[i] || size > a->shape[i] - off)
            return ckpt_err(err, -EINVAL, "dimension %d: offset %lld + size "
                            "%lld is outside the shape's %lld", i,
                            (long long)off, (long long)size,
                            (long long)a->shape[i]);
    }
    if ((a->set & PATTR_DTYPE) && a->dtype == CKPT_BYTES && a->ndim != 1)
        return ckpt_err(err, -EINVAL, "a bytes object is 1-D, but "
                        "user.ckpt.shape has %d dimensions", a->ndim);
    return 0;
}

/* user.ckpt.piece: its KEY=VALUE pairs set one by one on a copy of a,
 * which replaces a only if all of them were accepted. */
static int set_piece(pattr *a, const char *value, size_t len,
                     ckpt_error *err)
{
    pattr b = *a;
    size_t i = 0, npairs = 0;
    while (i < len) {
        if (value[i] == ' ') {
            i++;
            continue;
        }
        size_t end = i;
        while (end < len && value[end] != ' ')
            end++;
        const char *eq = memchr(value + i, '=', end - i);
        char name[sizeof KEY_PREFIX + 16];
        unsigned key = 0;
        if (eq && (size_t)(eq - (value + i)) < 16) {
            snprintf(name, sizeof name, KEY_PREFIX "%.*s",
                     (int)(eq - (value + i)), value + i);
            key = pattr_key(name);
        }
        if (!key || key == PATTR_PIECE)
            return ckpt_err(err, -EINVAL, PIECE_ATTR ": '%.*s' is not "
                            "KEY=VALUE with KEY one of dtype, shape, offsets, "
                            "sizes, replica", (int)(end - i), value + i);
        int rc = pattr_set(&b, key, eq + 1,
                           (size_t)(value + end - (eq + 1)), err);
        if (rc)
            return rc;
        npairs++;
        i = end;
    }
    if (npairs == 0)
        return ckpt_err(err, -EINVAL, PIECE_ATTR ": no KEY=VALUE pair "
                        "(e.g. 'dtype=f32 shape=4096,4096 offsets=0,0 "
                        "sizes=2048,4096')");
    *a = b;
    return 0;
}

int pattr_set(pattr *a, unsigned key, const char *value, size_t len,
              ckpt_error *err)
{
    char text[VALUE_MAX + 1];
    if (key == PATTR_PIECE) {
        if (len > PATTR_NKEYS * (VALUE_MAX + 16) || memchr(value, '\0', len))
            return ckpt_err(err, -EINVAL, PIECE_ATTR ": the value must be "
                            "text of at most %d bytes",
                            PATTR_NKEYS * (VALUE_MAX + 16));
        return set_piece(a, value, len, err);
    }
    if (len > VALUE_MAX || memchr(value, '\0', len))
        return ckpt_err(err, -EINVAL, "%s: the value must be text of at most "
                        "%d bytes", key_name(key), VALUE_MAX);
    memcpy(text, value, len);
    text[len] = '\0';
    pattr b = *a;
    int n = 0;
    switch (key) {
    case PATTR_DTYPE:
        b.dtype = ckpt_dtype_parse(text);
        if (b.dtype == CKPT_DTYPE_INVALID)
            return ckpt_dtype_unknown(err, "user.ckpt.dtype", text);
        break;
    case PATTR_SHAPE:
        n = b.ndim = parse_dims(key, text, b.shape, err);
        break;
    case PATTR_OFFSETS:
        n = b.noff = parse_dims(key, text, b.offsets, err);
        break;
    case PATTR_SIZES:
        n = b.nsizes = parse_dims(key, text, b.sizes, err);
        break;
    case PATTR_REPLICA:
        if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
            return ckpt_err(err, -EINVAL, "user.ckpt.replica: '%s' is not "
                            "0 or 1", text);
        b.replica = text[0] == '1';
        break;
    default:
        return ckpt_err(err, -EINVAL, "not a piece attribute");
    }
    if (n < 0)
        return n;
    b.set |= key;
    int rc = check_fit(&b, err);
    if (rc == 0)
        *a = b;
    return rc;
}

/* user.ckpt.piece's value: the pairs of the attributes set. */
static int get_piece(const pattr *a, char *buf, size_t cap)
{
    size_t len = 0;
    for (unsigned i = 0; i < PATTR_NKEYS; i++) {
        unsigned key = 1u << i;
        if (!(a->set & key))
            continue;
        char val[VALUE_MAX + 1];
        int n = pattr_get(a, key, val, sizeof val);
        if (n < 0)
            return n;
        n = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0,
                     "%s%s=%s", len ? " " : "",
                     pattr_names[i] + strlen(KEY_PREFIX), val);
        len += (size_t)n;
    }
    return (int)len;
}

int pattr_get(const pattr *a, unsigned key, char *buf, size_t cap)
{
    if (key == PATTR_PIECE)
        return a->set ? get_piece(a, buf, cap) : -ENODATA;
    if (!(a->set & key))
        return -ENODATA;
    switch (key) {
    case PATTR_DTYPE:
        return snprintf(buf, cap, "%s", ckpt_dtype_name(a->dtype));
    case PATTR_SHAPE:
        return ckpt_shape_format(buf, cap, a->ndim, a->shape);
    case PATTR_OFFSETS:
        return ckpt_shape_format(buf, cap, a->noff, a->offsets);
    case PATTR_REPLICA:
        return snprintf(buf, cap, "%d", a->replica);
    default:
        return ckpt_shape_format(buf, cap, a->nsizes, a->sizes);
    }
}

int pattr_resolve(const pattr *a, const char *fqn, pattr_piece *p,
                  ckpt_error *err)
{
    static const pattr none;
    if (!a)
        a = &none;
    memset(p, 0, sizeof *p);
    p->dtype = (a->set & PATTR_DTYPE) ? a->dtype : CKPT_BYTES;
    if (!(a->set & PATTR_SHAPE)) {
        if (a->set & (PATTR_OFFSETS | PATTR_SIZES))
            return ckpt_err(err, -EINVAL, "tensor '%s': user.ckpt.%s is set "
                            "but user.ckpt.shape is not", fqn,
                            (a->set & PATTR_OFFSETS) ? "offsets" : "sizes");
        return ckpt_err(err, -EINVAL, "tensor '%s': the piece's extent is "
                        "unknown: set user.ckpt.shape before writing (with "
                        "user.ckpt.dtype for a tensor; alone, the length in "
                        "bytes of a byte object): a piece is recorded only "
                        "once all its bytes are written", fqn);
    }
    if (!(a->set & PATTR_DTYPE) && a->ndim != 1)
        return ckpt_err(err, -EINVAL, "tensor '%s': user.ckpt.shape without "
                        "user.ckpt.dtype is a byte object's length, one "
                        "number, but it has %d dimensions", fqn, a->ndim);
    int rc = check_fit(a, err);
    if (rc)
        return rc;
    p->ndim = a->ndim;
    for (int i = 0; i < a->ndim; i++) {
        p->shape[i] = a->shape[i];
        p->offsets[i] = (a->set & PATTR_OFFSETS) ? a->offsets[i] : 0;
        p->sizes[i] = (a->set & PATTR_SIZES) ? a->sizes[i]
                                             : a->shape[i] - p->offsets[i];
    }
    return 0;
}

void pattr_to_piece(const pattr_piece *p, const char *fqn, ckpt_piece *out)
{
    *out = (ckpt_piece){
        .fqn = fqn, .dtype = p->dtype, .ndim = p->ndim, .shape = p->shape,
        .offsets = p->offsets, .sizes = p->sizes,
    };
}
