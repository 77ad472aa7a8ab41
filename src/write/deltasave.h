/*
 * deltasave.h - what a delta save adds to the writer and the committer
 * (docs/FORMAT.md, "Delta checkpoints"): every committed index gets a
 * random identity, a writer that names a base records it in the save's
 * metadata, and the committer turns that into the index's bases table,
 * checking that the base is still the one the writers used.
 */
#ifndef CKPT_DELTASAVE_H
#define CKPT_DELTASAVE_H

#include <stddef.h>

#include "format/delta.h"
#include "format/pieces.h"

/* Metadata keys a delta save's writers set: the base's name in the root
 * and its identity when they opened it. */
#define CKPT_META_BASE "delta.base"
#define CKPT_META_BASE_IDENTITY "delta.base_identity"

/* A new identity: 32 random lowercase hex digits. */
int ckpt_identity_new(char out[33], ckpt_error *err);

/* For a save whose merged metadata `meta` (nmeta entries) names a base:
 * opens it again from `dir`'s root (*hold, released by the caller with
 * ckpt_bases_free), refuses a base whose identity differs from what the
 * writers saw, and sets *used (malloc'd, pointing into *hold) to the bases
 * some frame of `all` names, *n their count.  Without a base: all NULL/0,
 * and a frame naming one is refused. */
int ckpt_delta_commit_bases(const char *dir, const ckpt_kv *meta,
                            size_t nmeta, const ckpt_pieces *all,
                            ckpt_bases **hold, ckpt_index_base **used,
                            size_t *n, ckpt_error *err);

#endif
