/*
 * confine.h - opening the files of a checkpoint without leaving its
 * directory (docs/TRUST.md, "Links").
 *
 * The directory itself is the one the caller named, found however its
 * path leads (symbolic links included).  Below it, a file named by the
 * checkpoint (a shard, a .distcp item, a .safetensors file) is opened by
 * walking its components from the directory's descriptor with O_NOFOLLOW:
 * every component must be a directory, and the last one a regular file,
 * none of them a symbolic link.  So no byte from outside the directory is
 * read, and no check can be raced by a rename (no path is resolved twice).
 *
 * The one exception is a Hugging Face cache snapshot, a directory
 * .../models--ORG--NAME/snapshots/REV whose files are relative links
 * "../../blobs/HASH" (one more "../" per subdirectory) into the same
 * repository's blobs/: such a link is read as text, checked to have exactly
 * that form, and the blob opened from blobs/ with O_NOFOLLOW.
 *
 * With `follow` (the opt-in: ckpt --follow-links, ckptfs -o follow_links)
 * paths are opened as the system resolves them, links and all.
 */
#ifndef CKPT_CONFINE_H
#define CKPT_CONFINE_H

#include <sys/stat.h>
#include "ckptfs.h"

typedef struct ckpt_confine {
    int fd;             /* the directory (O_PATH), or -1 when not open */
    int blobs_fd;       /* a Hugging Face snapshot's blobs/, or -1 */
    int follow;         /* follow symbolic links wherever they lead */
    char *dir;          /* the directory as named, for messages */
} ckpt_confine;

/* Opens `dir` (following its own path).  `follow` as above. */
int ckpt_confine_open(ckpt_confine *c, const char *dir, int follow,
                      ckpt_error *err);
void ckpt_confine_close(ckpt_confine *c);

/* Opens the regular file `rel` (a relative path, no "..") below the
 * directory for reading.  Returns the descriptor, or a negative errno
 * with a message naming dir/rel: -ENOENT for a missing file, -ELOOP for a
 * symbolic link that is not followed, -EINVAL for a file that is not a
 * regular file or a path that leaves the directory. */
int ckpt_confine_openat(const ckpt_confine *c, const char *rel,
                        ckpt_error *err);

/* fstat of the file ckpt_confine_openat opens (nothing else is touched). */
int ckpt_confine_stat(const ckpt_confine *c, const char *rel,
                      struct stat *st, ckpt_error *err);

#endif
