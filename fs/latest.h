/*
 * latest.h - which checkpoint of a root `latest` points to (the rule of
 * docs/MOUNT.md, "latest"): each checkpoint's step is its integer `step`
 * metadata, else the last number in its directory's name (step-000400:
 * 400); a checkpoint with a step is newer than one without; between two
 * with steps the greater step is newer; then (equal steps, or neither has
 * one) the later commit time; then the greater name.  Pure functions, no
 * FUSE, so that the rule is unit-tested on its own.
 */
#ifndef CKPTFS_FS_LATEST_H
#define CKPTFS_FS_LATEST_H

#include <stdint.h>
#include <time.h>

/* What `latest` compares of one checkpoint. */
typedef struct latest_key {
    const char *name;          /* its directory's name in the root */
    int has_step;
    int64_t step;
    struct timespec committed; /* mtime of its index.db (or stamp file) */
} latest_key;

/* A `step` metadata value that is a decimal integer (optional sign,
 * blanks around): 1 and *out, else 0. */
int latest_parse_step(const char *v, int64_t *out);
/* The last run of decimal digits in name (at most 18 of them, leading
 * zeros not counted): 1 and *out, else 0. */
int latest_name_step(const char *name, int64_t *out);
/* The step of a checkpoint: from its `step` metadata (meta, may be NULL)
 * when that is an integer, else from its name.  1 and *out, else 0. */
int latest_step(const char *meta, const char *name, int64_t *out);
/* Whether a is newer than b by the rule above. */
int latest_newer(const latest_key *a, const latest_key *b);

#endif
