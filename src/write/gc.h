/*
 * gc.h - what `ckpt gc` may remove, and how (docs/GUARANTEES.md, "What gc
 * removes"): unfinished saves that no writer holds a lease on and that
 * have been idle for a grace period, committed checkpoints that a
 * retention policy lets go, and the debris of crashes (a .pending/ left in
 * a committed checkpoint, directories a gc retired but did not finish
 * removing).  Whatever is removed is first retired: renamed in one step to
 * a hidden name in its root, so that readers, listings and `latest` never
 * see a partly removed checkpoint or save.
 *
 * The retention policy itself (which committed checkpoints to keep, and
 * the order that `latest` follows) is a pure function here so that the
 * CLI, the mount and the tests share one rule.
 */
#ifndef CKPT_GC_H
#define CKPT_GC_H

#include <stddef.h>
#include <stdint.h>
#include "ckptfs.h"

/* Names a gc gives what it retires: ".ckpt-gc.<pid>.<n>.<name>". */
#define CKPT_GC_PREFIX ".ckpt-gc."
/* Names a commit gives its save's .pending/ once it is history, beside
 * the checkpoint (write/spent.h): ".ckpt-gc.plans.<pid>.<n>.<name>". */
#define CKPT_SPENT_PREFIX CKPT_GC_PREFIX "plans."

/* ------------------------------------------------------------ saves */

/* The newest modification time, in nanoseconds since the epoch, of what a
 * save's writers touch: its directory, the files in it, and the files of
 * its .pending/ (the lease's heartbeat included, unless skip_lease) and
 * data/. */
int ckpt_save_activity(const char *dir, int skip_lease, int64_t *ns,
                       ckpt_error *err);

typedef enum ckpt_gc_why {
    CKPT_GC_REMOVED = 0,     /* removed (or, in a dry run, removable) */
    CKPT_GC_LIVE,            /* a writer or committer holds its lease */
    CKPT_GC_YOUNG,           /* active more recently than min_age */
    CKPT_GC_COMMITTED,       /* it was committed meanwhile */
    CKPT_GC_ALL_IN           /* every rank of a mount's save is in: its
                                commit was cut short, not abandoned */
} ckpt_gc_why;

typedef struct ckpt_gc_result {
    ckpt_gc_why why;
    int64_t idle_ns;         /* since its last activity */
    int locks;               /* 0: its file system keeps no locks, so only
                                the heartbeat could show it live */
    int world;               /* CKPT_GC_ALL_IN: the ranks it waited for */
} ckpt_gc_result;

/* Removes the unfinished save root/name unless it is live: takes its
 * lease exclusively without waiting (held: CKPT_GC_LIVE), then, holding
 * it, measures how long the save has been idle (less than min_age_ns:
 * CKPT_GC_YOUNG) and checks that it is still not committed
 * (CKPT_GC_COMMITTED) and that not every rank of a writable mount's save
 * is in (.pending/rank-R markers naming their world: CKPT_GC_ALL_IN, its
 * commit was interrupted and a status read finishes it); then retires it
 * and removes it.  A dry run stops
 * before retiring.  Returns 0 with *res filled in, or a negative errno
 * (the save is then left as it was, or retired but not wholly removed). */
int ckpt_gc_unfinished(const char *root, const char *name, int64_t min_age_ns,
                       int dry_run, ckpt_gc_result *res, ckpt_error *err);

/* A committed checkpoint root/name may hold what an interrupted commit
 * left (.pending/, index.db.tmp).  Removes it unless a committer still
 * holds the lease (-EBUSY); *found gets CKPT_GC_TIDY_* bits for what there
 * was.  A dry run only looks. */
#define CKPT_GC_TIDY_PENDING 1
#define CKPT_GC_TIDY_TMP 2
int ckpt_gc_tidy(const char *root, const char *name, int dry_run, int *found,
                 ckpt_error *err);

/* Retires the committed checkpoint root/name (renamed to a hidden name,
 * the root synced) and removes it. */
int ckpt_gc_retire(const char *root, const char *name, ckpt_error *err);

/* 1 when `name` is one a gc gives what it retires. */
int ckpt_gc_is_retired(const char *name);

/* ------------------------------------------------------------ retention */

/* What retention knows of one committed checkpoint. */
typedef struct ckpt_retain_item {
    const char *name;        /* its directory's name */
    int has_key;
    int64_t key;             /* its step: see ckpt_retain_key */
    int64_t committed_ns;    /* its commit time: index.db's modification
                                time, in ns since the epoch */
    /* A delta checkpoint's bases (names in the root: ckpt_retain_bases),
     * which retention keeps as long as it keeps this one. */
    char **bases;
    size_t nbases;
} ckpt_retain_item;

/* A `step` metadata value that is a decimal integer (blanks around
 * allowed): 1 with *out set, else 0 (also for NULL). */
int ckpt_retain_parse_step(const char *v, int64_t *out);

/* A checkpoint's step for ordering: its `step` metadata when that is a
 * decimal integer (blanks around allowed), or else the last run of digits
 * in its directory's name (step-000300: 300).  Returns 1 with *key set, or
 * 0 when there is neither. */
int ckpt_retain_key(const char *name, const char *step_meta, int64_t *key);

/* Reads item's step and commit time from the committed checkpoint at dir
 * (item->name must be set): its index's `step` and modification time. */
int ckpt_retain_probe(const char *dir, ckpt_retain_item *item,
                      ckpt_error *err);

/* 1 when a is newer than b: a checkpoint with a step (see
 * ckpt_retain_key) is newer than one without, then the greater step, then
 * the later commit time, then the greater name.  The newest is the one
 * `latest` points to (fs/source.c orders with this function too). */
int ckpt_retain_newer(const ckpt_retain_item *a, const ckpt_retain_item *b);

typedef enum ckpt_retain_why {
    CKPT_RETAIN_DROP = 0,    /* not kept: retire it */
    CKPT_RETAIN_LATEST,      /* the newest, which `latest` points to */
    CKPT_RETAIN_LAST,        /* one of the keep_last newest */
    CKPT_RETAIN_EVERY,       /* its step is a multiple of keep_every */
    CKPT_RETAIN_BASE         /* a kept delta checkpoint refers to it */
} ckpt_retain_why;

/* Decides, for each of v[0..n), whether retention keeps it: the newest
 * always, the keep_last newest (at least 1), and with keep_every > 0 every
 * checkpoint whose step is a multiple of keep_every.  -ENOMEM or 0. */
int ckpt_retain_select(const ckpt_retain_item *v, size_t n, int keep_last,
                       int64_t keep_every, ckpt_retain_why *why);

/* ------------------------------------------------------------ delta bases
 * (src/write/gcbases.c) */

/* Sets item->bases to the names of the checkpoints whose frames the
 * committed checkpoint at dir refers to (its index's bases table, none
 * for a checkpoint that is not a delta), read without opening them. */
int ckpt_retain_bases(const char *dir, ckpt_retain_item *item,
                      ckpt_error *err);
void ckpt_retain_item_free_bases(ckpt_retain_item *item);

/* After ckpt_retain_select: every checkpoint of v[0..n) that a kept one
 * refers to, directly or through its bases, is kept too (why[i] =
 * CKPT_RETAIN_BASE, needed_by[i] = the position of a kept checkpoint that
 * names it).  So gc never removes what a kept delta needs; keep_last
 * counted only the checkpoints retention chose. */
void ckpt_retain_keep_bases(const ckpt_retain_item *v, size_t n,
                            ckpt_retain_why *why, size_t *needed_by);

#endif
