/*
 * wops.h - the FUSE operations on the saves in progress of a writable
 * mount (docs/MOUNT.md, "Writing"): mkdir in the root starts a save;
 * inside one, mkdir, create, setxattr, sequential write and close make
 * pieces, .ckptfs/commit and .ckptfs/status drive and show the commit.
 * ops.c hands over every request on an inode of a save, and the root's
 * mkdir and unknown names; it keeps everything committed.  Dependencies
 * run one way: ops.c calls wops.c, never the reverse; both share
 * handles.h (context, handles, xattr reply) and inode.h.
 *
 * Inode numbers: inode_save(save id, node) (inode.h, wsave.h).  The
 * kernel may keep names and directories' attributes for a second; files'
 * attributes change as pieces arrive and are not cached.
 */
#ifndef CKPTFS_FS_WOPS_H
#define CKPTFS_FS_WOPS_H

#include "handles.h"
#include "inode.h"
#include "wsave.h"

fuse_ino_t wops_ino(const ws_save *w, uint32_t node);
/* The save and node of a save inode: 0 or -ESTALE. */
int wops_resolve(fs_ctx *c, fuse_ino_t ino, ws_save **w, uint32_t *node);

/* The root's part: a save named `name` (replies and returns 0), or
 * without replying -ENOENT, or -EAGAIN when the save has just been
 * committed (the root must be rescanned to find it). */
int wops_lookup_root(fs_ctx *c, fuse_req_t req, const char *name);
/* mkdir in the root: a save, which belongs to the caller (with mode). */
void wops_mkdir_root(fs_ctx *c, fuse_req_t req, const char *name,
                     mode_t mode);
/* Attributes of a node of a save (for the root's listing: its
 * directory): owner, group and permission bits are those of the save's
 * directory on the disk, its maker's (access.h), so that others may write
 * it only where its modes let them. */
int wops_stat(fs_ctx *c, ws_save *w, uint32_t node, struct stat *st);

void wops_lookup(fuse_req_t req, ws_save *w, uint32_t dir, const char *name);
void wops_getattr(fuse_req_t req, ws_save *w, uint32_t node);
void wops_setattr(fuse_req_t req, ws_save *w, uint32_t node,
                  const struct stat *attr, int to_set);
void wops_mkdir(fuse_req_t req, ws_save *w, uint32_t dir, const char *name);
void wops_readdir(fuse_req_t req, ws_save *w, uint32_t dir, size_t size,
                  off_t off, int plus);
void wops_open(fs_ctx *c, fuse_req_t req, ws_save *w, uint32_t node,
               struct fuse_file_info *fi);
void wops_create(fs_ctx *c, fuse_req_t req, ws_save *w, uint32_t dir,
                 const char *name, struct fuse_file_info *fi);

/* Requests on an open handle of kind FS_H_WRITE. */
void wops_read(fuse_req_t req, fs_handle *h, size_t size, off_t off);
void wops_write(fuse_req_t req, fs_handle *h, const char *buf, size_t size,
                off_t off);
void wops_flush(fuse_req_t req, fs_handle *h);
void wops_fsync(fuse_req_t req, fs_handle *h);
void wops_release(fs_ctx *c, fuse_req_t req, fs_handle *h);

void wops_setxattr(fuse_req_t req, ws_save *w, uint32_t node,
                   const char *name, const char *value, size_t size);
void wops_getxattr(fuse_req_t req, ws_save *w, uint32_t node,
                   const char *name, size_t size);
void wops_listxattr(fuse_req_t req, ws_save *w, uint32_t node, size_t size);

#endif
