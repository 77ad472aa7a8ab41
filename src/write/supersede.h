/*
 * supersede.h - a rank that ran again takes the place of its earlier
 * attempt (docs/MOUNT.md, "A rank runs again"): the supersessions its
 * writer declared (writer.h, CKPT_SUPERSEDE_MARK) are applied to the
 * pieces read from every plan before the planner sees them.
 */
#ifndef CKPT_SUPERSEDE_H
#define CKPT_SUPERSEDE_H

#include "ckptfs.h"
#include "format/model.h"
#include "format/pieces.h"

/* 1 when declaration key `key` is a supersession, not a tensor. */
int ckpt_supersede_is(const char *key);

/* 1 when `name` is one of the comma-separated names of `list`. */
int ckpt_supersede_listed(const char *list, const char *name);

/* Drops from `all` every piece that a supersession among decl's
 * declarations names: a piece of the same fqn whose box overlaps the
 * declared one, recorded by one of the listed writers other than the
 * declaring one.  *dropped (may be NULL) counts them.  -EINVAL with a
 * message for a damaged declaration, -ENOMEM. */
int ckpt_supersede_apply(ckpt_pieces *all, const ckpt_manifest *decl,
                         size_t *dropped, ckpt_error *err);

#endif
