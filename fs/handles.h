/*
 * handles.h - what every FUSE operation of the daemon shares: the
 * session's context (handed to libfuse as userdata), the list of open
 * handles, and the reply to getxattr/listxattr.
 *
 * Dependencies run one way: ops.c (committed checkpoints, and the
 * dispatcher) calls wops.c (saves in progress); both build on this
 * module and inode.h, and wops.c knows nothing of ops.c.
 */
#ifndef CKPTFS_FS_HANDLES_H
#define CKPTFS_FS_HANDLES_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 35
#endif
#include <fuse3/fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>

#include "source.h"
#include "views.h"

/* What an open file or directory's handle is. */
typedef enum fs_handle_kind {
    FS_H_ROOTDIR,          /* a root's listing (ops.c) */
    FS_H_FILE,             /* a committed file (ops.c) */
    FS_H_WRITE             /* a file of a save in progress (wops.c) */
} fs_handle_kind;

/* The head of every handle: all are listed in the context so that those
 * the kernel never released are freed at the end, by their own free. */
typedef struct fs_handle {
    struct fs_handle *prev, *next;
    fs_handle_kind kind;
    void (*free)(struct fs_handle *h);
} fs_handle;

typedef struct fs_ctx {
    fs_source *src;
    struct ws_set *ws;     /* the saves being written; NULL unless rw */
    views_tables tables;
    pthread_mutex_t handles_mu;
    fs_handle *handles;    /* every open file and directory, so those the
                              kernel never released (open when the session
                              ended) are freed too */
} fs_ctx;

void fs_ctx_init(fs_ctx *c);
/* Frees the handles still open.  Only once the session's threads are
 * gone. */
void fs_ctx_destroy(fs_ctx *c);

/* Lists h (of kind `kind`, freed by free_fn if still open at the end). */
void fs_handle_add(fs_ctx *c, fs_handle *h, fs_handle_kind kind,
                   void (*free_fn)(fs_handle *h));
void fs_handle_remove(fs_ctx *c, fs_handle *h);

/* Replies to getxattr/listxattr with the len bytes at val, asked for with
 * a buffer of `size` bytes (0: only the length; too small: ERANGE). */
/* Reply to a read with N bytes at DATA that a handle owns, from a copy:
 * once the kernel has the data it may release the handle (on another
 * thread) before the reply's writev has returned, and the bytes must not
 * be read after that. Replies ENOMEM if no copy can be made. */
void fs_reply_owned(fuse_req_t req, const char *data, size_t n);

void fs_reply_xattr(fuse_req_t req, const char *val, size_t len,
                    size_t size);

#endif
