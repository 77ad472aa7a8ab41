/*
 * reuse.h - a commit that reuses the layout of the save before it: when
 * every writer's plan claims the layout digest (format/layout.h) that the
 * newest committed checkpoint beside the save recorded for the plan of
 * the same name, the pieces are those of that checkpoint, chunk for
 * chunk, so the planner's checks (dtypes, shapes, bounds, overlaps,
 * coverage, replicas) hold as they held then; the commit reads only the
 * plans' claims, metadata and packed frame records, checks each chunk's
 * frames against its box and its shard, and writes the index from the
 * previous one's tensors and grids (docs/GUARANTEES.md, "Commits that
 * reuse a layout").  Anything else - a digest that differs, a plan
 * without one, a declaration, a delta save, a previous index without
 * layouts or damaged - leaves the commit to plan afresh.
 */
#ifndef CKPT_REUSE_H
#define CKPT_REUSE_H

#include <stddef.h>
#include "format/index.h"
#include "format/model.h"
#include "format/planfile.h"
#include "format/plan.h"

/* What one plan of a save says, and where its pieces are in the
 * committer's table (the pieces of plan p: all[first..end)). */
typedef struct ckpt_reuse_plan {
    ckpt_plan_synced synced;
    size_t first, end;
} ckpt_reuse_plan;

typedef struct ckpt_reuse ckpt_reuse;

/* Prepares the commit of `dir` (plans names[0..n) in `pending`, sorted)
 * from the newest committed checkpoint beside it: 0 with *out when every
 * plan's layout is that checkpoint's; 1 when reuse does not apply, with
 * why (a sentence, whycap bytes) saying why - also for any error, which
 * the commit that plans afresh meets again and reports. */
int ckpt_reuse_prepare(ckpt_reuse **out, const char *dir,
                       const char *pending, char *const *names, size_t n,
                       char *why, size_t whycap);
/* The plans' metadata, each entry's writer set. */
const ckpt_manifest *ckpt_reuse_meta(const ckpt_reuse *r);
/* The name of the checkpoint whose layout is reused. */
const char *ckpt_reuse_from(const ckpt_reuse *r);
/* Calls sync_one(dir, file, err) for each shard whose writer did not
 * sync all the bytes its pieces use (step (1) of the commit). */
int ckpt_reuse_sync(const ckpt_reuse *r, const char *dir,
                    int (*sync_one)(const char *dir, const char *file,
                                    ckpt_error *err),
                    ckpt_error *err);
/* Writes the index at tmp (fsynced when `sync`) with metadata meta. */
int ckpt_reuse_write(ckpt_reuse *r, const char *tmp, const char *dir,
                     const ckpt_kv *meta, size_t nmeta, int sync,
                     ckpt_error *err);
void ckpt_reuse_free(ckpt_reuse *r);

/* The layouts a full commit records (for the next save to reuse): one
 * per plan, when every plan claims a layout that its pieces (in the
 * table `all`, as read) have, each plan's pieces lie in one shard, and
 * the plan kept every piece (no replica).  0 with *out (malloc'd, names
 * and maps in *hold, both freed with ckpt_reuse_layouts_free) and *nout,
 * or 0 with *nout = 0 when they cannot be recorded; -ENOMEM. */
int ckpt_reuse_layouts(const ckpt_pieces *all, const ckpt_plan *plan,
                       char *const *names, const ckpt_reuse_plan *plans,
                       size_t n, ckpt_index_layout **out, size_t *nout,
                       ckpt_error *err);
void ckpt_reuse_layouts_free(ckpt_index_layout *v, size_t n);

#endif
