/*
 * access.h - the owners and modes the mount shows for directories, so
 * that a mount with allow_other grants nobody more than the disk does
 * (docs/TRUST.md, "Permissions"); the kernel enforces them
 * (default_permissions), nothing here checks a caller.
 *
 * - A checkpoint's directories show its directory's own owner and its
 *   read and search bits, less what its index grants (read bits, shown as
 *   read and search), less the search bits of every directory on the way
 *   to it that the mount skips: those between ROOT and it when ROOT's
 *   entry is a link into ROOT, all of its ancestors when the link leads
 *   out of ROOT.  So a checkpoint reached through a link reads only for
 *   whoever could reach it on the disk.
 * - A save in progress belongs to whoever made it through the mount: its
 *   directory on the disk is given to them (owner, group, the mode of the
 *   mkdir), and its nodes show that directory's owner and mode, so that
 *   others add pieces, set metadata or commit only where its modes let
 *   them, as on the disk.
 */
#ifndef CKPTFS_FS_ACCESS_H
#define CKPTFS_FS_ACCESS_H

#include <sys/stat.h>
#include <sys/types.h>

#include "ckptfs.h"

/* Who makes a save (from the FUSE request), and the mode asked for. */
typedef struct access_owner {
    uid_t uid;
    gid_t gid;
    mode_t mode;
} access_owner;

/* The read and search bits (in out->mode, 0555 at most) and owner that
 * directory `dir` of a checkpoint shows.  root: ROOT's absolute path, or
 * NULL when dir is SOURCE itself (its ancestors are the mount's choice);
 * index: the status of the file that lists its tensors.  A directory
 * that cannot be looked at grants nothing.  *seen receives the status of
 * the directory these bits are for (zeros when dir is a file, or cannot
 * be looked at): what a reader opened later must be (access_same_dir). */
void access_ckpt_dir(const char *root, const char *dir,
                     const struct stat *index, ckpt_perm *out,
                     struct stat *seen);

/* Whether the directory a reader opened (st) is the one seen (see
 * access_ckpt_dir): 1, or 0 when a link or directory on its path was
 * replaced since, and its bits may not be its own. */
int access_same_dir(const struct stat *seen, const struct stat *st);

/* Folds into p (a directory's) what `listing` grants (the files that
 * list a checkpoint's tensors: read bits, as read and search). */
void access_fold_listing(ckpt_perm *p, const ckpt_perm *listing);

/* The read and search bits that index (a file) grants, as a directory's
 * (read bits, and search bits where there are read bits). */
mode_t access_read_search(mode_t mode);

/* Gives the directory at path, just made by this process, to o: its
 * owner, its group (kept when the directory inherited it from a set-gid
 * parent) and o->mode.  -EPERM with a message when this daemon may not
 * give a directory away (it does not run as root) and o is not itself. */
int access_give_dir(const char *path, const access_owner *o,
                    ckpt_error *err);

/* The status of directory root/name (not followed if a link): 0, or a
 * negative errno (-ENOTDIR for anything but a directory). */
int access_save_stat(const char *root, const char *name, struct stat *st);

/* Sets the permission bits (and sticky and set-gid bits) of directory
 * root/name, not followed if a link; the kernel has checked that the
 * caller owns it.  0 or a negative errno. */
int access_chmod_save(const char *root, const char *name, mode_t mode);

#endif
