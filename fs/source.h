/*
 * source.h - what ckptfs serves: SOURCE is either one committed checkpoint
 * or a root whose subdirectories are checkpoints (docs/MOUNT.md, SOURCE);
 * a PyTorch distributed checkpoint or safetensors (file or directory) is
 * served as one checkpoint, read by the library like any other, and a
 * root may hold such checkpoints too.
 *
 * Each checkpoint served is an fs_ckpt with a stable slot number.  Its
 * reader and tree are opened on first access and kept until the source is
 * freed.  In a root, a scan (at most once a second, when the root is
 * listed or looked up) finds committed checkpoints, reads each new one's
 * `step` once to choose `latest`, and leaves out (logging once) those not
 * committed or whose index does not open.  A checkpoint that disappears is
 * hidden but its fs_ckpt stays valid, so open files and inode numbers never
 * dangle; one replaced under the same name (another index.db) gets a new
 * slot.  Everything here is thread-safe.
 */
#ifndef CKPTFS_FS_SOURCE_H
#define CKPTFS_FS_SOURCE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/stat.h>

#include "ckptfs.h"
#include "tree.h"

/* One checkpoint.  name, path, slot, st, dir, dir_seen, has_step and step never change
 * after creation; reader and tree are valid once `ready` reads 1 (acquire)
 * and never change afterwards. */
typedef struct fs_ckpt {
    char *name;            /* its directory's name in the root; "" alone */
    char *path;            /* absolute path of the checkpoint directory */
    uint32_t slot;
    struct stat st;        /* of its index.db: times, owner, identity */
    ckpt_perm dir;         /* what its directories show (access.h) */
    struct stat dir_seen;  /* the directory `dir` is for (access.h) */
    int has_step;          /* it has a step for `latest` (src/gc.h, ckpt_retain_newer): its
                              `step` metadata, or a number in its name */
    int64_t step;
    _Atomic int ready;
    ckpt_reader *reader;
    fs_tree *tree;
    pthread_mutex_t mu;    /* opening; metadata.json */
    char *json;            /* metadata.json once rendered (under mu) */
    size_t json_len;
} fs_ckpt;

typedef struct fs_source fs_source;

/* Checks SOURCE and prepares serving it: a committed checkpoint (its index
 * must open), or a root holding at least one subdirectory that is a
 * checkpoint or a save in progress; when `writable`, any directory that
 * is not itself a checkpoint (a root, maybe empty).  Anything else is
 * refused with a message in err (-ENOENT, -ENOTDIR, ...).  No threads are left running,
 * so the caller may fork (daemonize) afterwards. */
int source_open(fs_source **out, const char *path, const ckpt_read_opts *ro,
                int writable, ckpt_error *err);
/* Closes every reader.  Only once no operation can be running. */
void source_free(fs_source *s);

int source_is_root(const fs_source *s);
/* The .safetensors/ view's largest file (tensor bytes; default
 * SOURCE_ST_SHARD), for checkpoints opened from now on. */
#define SOURCE_ST_SHARD 5000000000ull
void source_set_st_shard(fs_source *s, uint64_t max_bytes);
/* SOURCE as an absolute path. */
const char *source_path(const fs_source *s);
/* The root directory's attributes (root mode). */
void source_root_stat(fs_source *s, struct stat *st);

/* Rescans the root if the last scan is a second old or more. */
void source_refresh(fs_source *s);
/* Rescans the root now (a save was just committed). */
void source_rescan(fs_source *s);

/* The checkpoint in `slot`, or NULL. */
fs_ckpt *source_slot(fs_source *s, uint32_t slot);

/* A root listing: the checkpoints shown, by name, and `latest`. */
typedef struct fs_listing {
    fs_ckpt **v;
    size_t n;
    fs_ckpt *latest;       /* NULL when no checkpoint is shown */
} fs_listing;

/* Copies the current listing (free it with source_listing_free). */
int source_listing(fs_source *s, fs_listing *out);
void source_listing_free(fs_listing *l);
/* Number of checkpoints shown. */
size_t source_shown(fs_source *s);
/* The checkpoint shown as `name`, or NULL. */
fs_ckpt *source_find(fs_source *s, const char *name);
/* The checkpoint `latest` points to, or NULL. */
fs_ckpt *source_latest(fs_source *s);

/* Opens c's reader and builds its tree unless done already.  Returns 0 or
 * -EIO (the cause is logged). */
int source_ckpt_open(fs_source *s, fs_ckpt *c);
/* c's metadata.json, rendered on first use (c must be open). */
int source_ckpt_json(fs_ckpt *c, const char **data, size_t *len);

#endif
