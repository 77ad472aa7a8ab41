/*
 * ops.h - the FUSE operations of ckptfs (low-level API); their context,
 * which main() hands to libfuse as the session's userdata, is handles.h's.
 *
 * Inode numbers: see inode.h.
 *
 * Dependencies run one way: ops.c dispatches every request on a save in
 * progress (and the root's mkdir and unknown names) to wops.c; wops.c
 * never calls back into ops.c, both share handles.h and inode.h.
 */
#ifndef CKPTFS_FS_OPS_H
#define CKPTFS_FS_OPS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 35
#endif
#include <fuse3/fuse_lowlevel.h>

#include "handles.h"

/* Seconds the kernel may cache names and attributes: inside a checkpoint
 * nothing ever changes; the root of a root mode mount and the checkpoint
 * directories in it must follow the disk. */
#define OPS_CKPT_TIMEOUT 3600.0
#define OPS_ROOT_TIMEOUT 1.0

/* Fills ops with ckptfs's operations (every write fails with EROFS,
 * except in the saves of a writable mount). */
void ops_fill(struct fuse_lowlevel_ops *ops);

#endif
