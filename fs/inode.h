/*
 * inode.h - what the mount's inode numbers encode, shared by ops.c
 * (committed checkpoints) and wops.c (saves in progress).
 *
 * 1 is the mount's root; in root mode 2 is `latest`; every other node of
 * a committed checkpoint is ((slot + 1) << 32 | node), the checkpoint's
 * slot and the node's number in its tree (tree.h), node 0 being the
 * checkpoint's own directory; a node of a save in progress is
 * INODE_SAVE_BIT | (save id << 32) | node (wsave.h).  Nothing is ever
 * freed before unmounting, so numbers never dangle and FORGET needs no
 * bookkeeping.
 */
#ifndef CKPTFS_FS_INODE_H
#define CKPTFS_FS_INODE_H

#include <stdint.h>

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 35
#endif
#include <fuse3/fuse_lowlevel.h>

#define INODE_LATEST 2
#define INODE_SAVE_BIT ((fuse_ino_t)1 << 63)

/* A node of a committed checkpoint's tree. */
static inline fuse_ino_t inode_ckpt(uint32_t slot, uint32_t node)
{
    return ((fuse_ino_t)slot + 1) << 32 | node;
}

/* A node of the save whose id is `id`. */
static inline fuse_ino_t inode_save(uint32_t id, uint32_t node)
{
    return INODE_SAVE_BIT | (fuse_ino_t)id << 32 | node;
}

static inline int inode_is_save(fuse_ino_t ino)
{
    return (ino & INODE_SAVE_BIT) != 0;
}

/* The save id of a save's inode. */
static inline uint32_t inode_save_id(fuse_ino_t ino)
{
    return (uint32_t)((ino & ~INODE_SAVE_BIT) >> 32);
}

#endif
