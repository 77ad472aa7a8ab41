/*
 * supersede.c - supersessions applied to the pieces of a save (see
 * supersede.h): each declaration "FQN<mark>W1,W2;OFFSETS;SIZES" by writer
 * W drops the pieces of FQN by W1, W2 (never W's own) whose box overlaps
 * (OFFSETS, SIZES).
 */
#include "write/supersede.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/region.h"
#include "common/shape.h"
#include "write/writer.h"

/* A supersession read back. */
typedef struct supersession {
    char *buf;                /* the key, cut into its parts */
    const char *fqn, *writers, *by;
    int ndim;
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
} supersession;

int ckpt_supersede_is(const char *key)
{
    return key && strstr(key, CKPT_SUPERSEDE_MARK) != NULL;
}

/* Parses declaration d: 1 (s->buf to be freed), 0 when it is no
 * supersession, -EINVAL, -ENOMEM. */
static int parse(const ckpt_kv *d, supersession *s, ckpt_error *err)
{
    const char *mark = strstr(d->key, CKPT_SUPERSEDE_MARK);
    if (!mark)
        return 0;
    memset(s, 0, sizeof *s);
    if (!(s->buf = strdup(d->key)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    s->buf[mark - d->key] = '\0';
    s->fqn = s->buf;
    s->by = d->writer ? d->writer : "";
    char *part[3], *q = s->buf + (mark - d->key) + strlen(CKPT_SUPERSEDE_MARK);
    int n = 0;
    for (; q && n < 3; n++) {
        part[n] = q;
        if ((q = strchr(q, ';')))
            *q++ = '\0';
    }
    int nd = -1, ns = -2;
    if (n == 3 && !q && *part[0]) {
        s->writers = part[0];
        nd = ckpt_shape_parse(part[1], s->off, NULL);
        ns = ckpt_shape_parse(part[2], s->size, NULL);
    }
    if (nd < 0 || nd != ns) {
        ckpt_err(err, -EINVAL, "tensor '%s': a supersession in writer %s's "
                 "plan is damaged", s->fqn, s->by);
        free(s->buf);
        return -EINVAL;
    }
    s->ndim = nd;
    return 1;
}

int ckpt_supersede_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1
                                                           : NULL)
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* 1 when piece i of all is one s takes the place of. */
static int superseded(const ckpt_pieces *all, size_t i, const supersession *s)
{
    const ckpt_pieces_rec *p = &all->v[i];
    const char *fqn = ckpt_pieces_str(all, p->fqn);
    const char *w = ckpt_pieces_str(all, ckpt_pieces_writer(all, i));
    int64_t o[CKPT_MAX_DIMS], z[CKPT_MAX_DIMS], off[CKPT_MAX_DIMS];
    return fqn && w && p->ndim == s->ndim && strcmp(fqn, s->fqn) == 0 &&
           strcmp(w, s->by) != 0 && ckpt_supersede_listed(s->writers, w) &&
           ckpt_box_intersect(s->ndim, ckpt_pieces_offsets(all, i, off),
                              ckpt_pieces_sizes(all, i), s->off, s->size,
                              o, z);
}

int ckpt_supersede_apply(ckpt_pieces *all, const ckpt_manifest *decl,
                         size_t *dropped, ckpt_error *err)
{
    if (dropped)
        *dropped = 0;
    unsigned char *gone = NULL;
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < decl->ndeclared; k++) {
        supersession s;
        int got = parse(&decl->declared[k], &s, err);
        if (got <= 0) {
            rc = got;
            continue;
        }
        if (!gone && !(gone = calloc(all->n ? all->n : 1, 1)))
            rc = ckpt_err(err, -ENOMEM, "out of memory");
        for (size_t i = 0; rc == 0 && i < all->n; i++)
            gone[i] |= superseded(all, i, &s);
        free(s.buf);
    }
    if (rc == 0 && gone) {
        size_t n = 0;
        for (size_t i = 0; i < all->n; i++)
            if (!gone[i])
                all->v[n++] = all->v[i];
        if (dropped)
            *dropped = all->n - n;
        all->n = n;
    }
    free(gone);
    return rc;
}
