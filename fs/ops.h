/*
 * ops.h - the FUSE operations of ckptfs (low-level API) and the context
 * they share, which main() hands to libfuse as the session's userdata.
 *
 * Inode numbers: 1 is the mount's root; in root mode 2 is `latest`; every
 * other node is ((slot + 1) << 32 | node), the checkpoint's slot and the
 * node's number in its tree (tree.h), node 0 being the checkpoint's own
 * directory; the nodes of saves in progress have the top bit set (wops.h).
 * Nothing is ever freed before unmounting, so numbers never
 * dangle and FORGET needs no bookkeeping.
 */
#ifndef CKPTFS_FS_OPS_H
#define CKPTFS_FS_OPS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 35
#endif
#include <fuse3/fuse_lowlevel.h>
#include <pthread.h>

#include "source.h"
#include "views.h"

/* Seconds the kernel may cache names and attributes: inside a checkpoint
 * nothing ever changes; the root of a root mode mount and the checkpoint
 * directories in it must follow the disk. */
#define OPS_CKPT_TIMEOUT 3600.0
#define OPS_ROOT_TIMEOUT 1.0

/* What an open file or directory's handle is. */
typedef enum ops_handle_kind {
    OPS_H_ROOTDIR,         /* a root's listing (ops.c) */
    OPS_H_FILE,            /* a committed file (ops.c) */
    OPS_H_WRITE            /* a file of a save in progress (wops.c) */
} ops_handle_kind;

/* The head of every handle: all are listed in the context so that those
 * the kernel never released are freed at the end. */
typedef struct ops_handle {
    struct ops_handle *prev, *next;
    ops_handle_kind kind;
} ops_handle;

typedef struct fs_ctx {
    fs_source *src;
    struct ws_set *ws;     /* the saves being written; NULL unless rw */
    views_tables tables;
    pthread_mutex_t handles_mu;
    ops_handle *handles;   /* every open file and directory, so those the
                              kernel never released (open when the session
                              ended) are freed too */
} fs_ctx;

/* Fills ops with ckptfs's operations (every write fails with EROFS,
 * except in the saves of a writable mount). */
void ops_fill(struct fuse_lowlevel_ops *ops);

void ops_handle_add(fs_ctx *c, ops_handle *h, ops_handle_kind kind);
/* Replies to getxattr/listxattr with the len bytes at val, asked for with
 * a buffer of `size` bytes (0: only the length; too small: ERANGE). */
void ops_reply_xattr(fuse_req_t req, const char *val, size_t len,
                     size_t size);
void ops_handle_remove(fs_ctx *c, ops_handle *h);

void ops_ctx_init(fs_ctx *c);
/* Frees what is still open.  Only once the session's threads are gone. */
void ops_ctx_destroy(fs_ctx *c);

#endif
