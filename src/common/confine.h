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
#include <sys/types.h>
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

/* ------------------------------------------------------------ at a dirfd
 *
 * The same rule for the files a writer, a committer or the mount daemon
 * opens in a directory that others might write into (a save's .pending/
 * in a shared root, docs/TRUST.md "A shared root"): `name` below the
 * directory descriptor dfd, never through a symbolic link (one component:
 * O_NOFOLLOW; a path: openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
 * refused on kernels without it), opened with O_NONBLOCK so that a FIFO or device
 * cannot block the open, then checked with fstat to be a regular file (a
 * directory when flags has O_DIRECTORY) and, unless owner is
 * CKPT_ANY_OWNER, to belong to user `owner`.  O_NOFOLLOW, O_NONBLOCK and
 * O_CLOEXEC are added to flags; O_NONBLOCK is cleared again on the
 * descriptor returned.  Returns the descriptor or a negative errno, no
 * message (the caller names the file): -ELOOP for a link, -EINVAL for a
 * file of another type, -EPERM for another owner, else open's error. */
#define CKPT_ANY_OWNER ((uid_t)-1)
int ckpt_confine_at(int dfd, const char *name, int flags, mode_t mode,
                    uid_t owner);

/* Reads at most cap - 1 bytes from the start of fd into buf and ends
 * them with a NUL: a control file's bounded read (a file larger than cap
 * is cut, never read whole).  Returns the bytes read or -errno. */
ssize_t ckpt_read_bounded(int fd, char *buf, size_t cap);

#endif
