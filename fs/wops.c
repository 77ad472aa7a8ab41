/*
 * wops.c - the FUSE operations on saves in progress (see wops.h): replies
 * built from wsave.c's nodes, errors logged with the library's message
 * and answered with its errno.
 */
#include "wops.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "access.h"

#define BLKSIZE (1 << 20)

/* A handle on a file of a save. */
typedef struct wfile {
    fs_handle link;          /* first: a wfile is an fs_handle */
    ws_save *w;
    ws_kind kind;             /* WS_FILE, WS_COMMIT, WS_STATUS, WS_ERRORS */
    ws_file *piece;           /* WS_FILE */
    int writable;
    char *text;               /* WS_STATUS, WS_ERRORS: the content when
                                 opened */
    size_t len;
} wfile;

static void handle_free(fs_handle *hh);

fuse_ino_t wops_ino(const ws_save *w, uint32_t node)
{
    return inode_save(ws_save_id(w), node);
}

int wops_resolve(fs_ctx *c, fuse_ino_t ino, ws_save **w, uint32_t *node)
{
    if (!c->ws || !inode_is_save(ino))
        return -ESTALE;
    *w = ws_set_by_id(c->ws, inode_save_id(ino));
    *node = (uint32_t)ino;
    return *w ? 0 : -ESTALE;
}

static pid_t caller(fuse_req_t req)
{
    return fuse_req_ctx(req)->pid;
}

/* Logs err's message (or strerror) and answers rc. */
static void reply_fail(fuse_req_t req, int rc, const ckpt_error *err)
{
    fuse_log(FUSE_LOG_ERR, "ckptfs: %s\n",
             err && err->msg[0] ? err->msg : strerror(-rc));
    fuse_reply_err(req, -rc);
}

/* A save's files and directories carry the owner, group and permission
 * bits of the save's directory on the disk (shared by every mount of
 * ROOT), which belongs to whoever made the save (access.h): its owner may
 * write the save, others only where its modes let them, and the kernel
 * (default_permissions) keeps everyone else out.  A directory that cannot
 * be looked at grants nothing. */
int wops_stat(fs_ctx *c, ws_save *w, uint32_t node, struct stat *st)
{
    ws_stat ws;
    int rc = ws_stat_node(w, node, &ws);
    if (rc)
        return rc;
    struct stat dir;
    if (access_save_stat(source_path(c->src), ws_save_name(w), &dir) != 0) {
        source_root_stat(c->src, &dir);
        dir.st_mode = 0;
    }
    mode_t bits = dir.st_mode & 0777;
    memset(st, 0, sizeof *st);
    st->st_ino = wops_ino(w, node);
    st->st_uid = dir.st_uid;
    st->st_gid = dir.st_gid;
    st->st_atim = st->st_mtim = st->st_ctim = ws.mtime;
    st->st_blksize = BLKSIZE;
    switch (ws.kind) {
    case WS_DIR:
        st->st_mode = S_IFDIR | bits;
        if (node == WS_ROOT)
            st->st_mode |= dir.st_mode & (S_ISVTX | S_ISGID);
        st->st_nlink = 2 + ws.nsubdirs;
        break;
    case WS_FILE:
        st->st_mode = S_IFREG | (bits & 0666);
        st->st_nlink = 1;
        st->st_size = (off_t)ws.size;
        st->st_blocks = (blkcnt_t)((ws.size + 511) / 512);
        break;
    case WS_COMMIT:
        st->st_mode = S_IFREG | (bits & 0222);
        st->st_nlink = 1;
        break;
    default:                     /* status, errors */
        st->st_mode = S_IFREG | (bits & 0444);
        st->st_nlink = 1;
        st->st_size = 4096;      /* read with direct I/O: up to EOF */
        break;
    }
    return 0;
}

/* A save's names never go away (after the commit its inodes lead to the
 * committed checkpoint's, see ops.c), so the kernel may keep them a
 * while, and its directories' attributes too (whatever the reply: with
 * none kept, every path walked through a directory, each mkdir -p of a
 * tensor's parents, asked for them again); the attributes of its files
 * change as pieces arrive, and at the commit. */
#define NAME_TIMEOUT 1.0

static double attr_timeout(const struct stat *st)
{
    return S_ISDIR(st->st_mode) ? NAME_TIMEOUT : 0.0;
}

static void reply_node(fuse_req_t req, ws_save *w, uint32_t node)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    int rc = wops_stat(fuse_req_userdata(req), w, node, &e.attr);
    if (rc) {
        fuse_reply_err(req, -rc);
        return;
    }
    e.ino = e.attr.st_ino;
    e.entry_timeout = NAME_TIMEOUT;
    e.attr_timeout = attr_timeout(&e.attr);
    fuse_reply_entry(req, &e);
}

int wops_lookup_root(fs_ctx *c, fuse_req_t req, const char *name)
{
    ws_save *w = c->ws ? ws_set_find(c->ws, name) : NULL;
    if (!w)
        return -ENOENT;
    if (ws_save_committed(w))
        return -EAGAIN;
    ckpt_error err = { 0 };
    if (ws_join(w, caller(req), &err) != 0)
        fuse_log(FUSE_LOG_ERR, "ckptfs: %s: cannot hold the lease of the "
                 "save this mount joins: %s\n", name, err.msg);
    reply_node(req, w, WS_ROOT);
    return 0;
}

void wops_mkdir_root(fs_ctx *c, fuse_req_t req, const char *name,
                     mode_t mode)
{
    ws_save *w;
    ckpt_error err = { 0 };
    const struct fuse_ctx *fc = fuse_req_ctx(req);
    access_owner owner = { fc->uid, fc->gid, mode };
    int rc = ws_set_create(c->ws, name, &owner, &w, &err);
    if (rc == -EEXIST) {
        fuse_reply_err(req, EEXIST);    /* expected: every rank mkdirs */
        return;
    }
    if (rc)
        reply_fail(req, rc, &err);
    else
        reply_node(req, w, WS_ROOT);
}

void wops_lookup(fuse_req_t req, ws_save *w, uint32_t dir, const char *name)
{
    uint32_t node;
    int rc = ws_lookup(w, dir, name, &node);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        reply_node(req, w, node);
}

void wops_getattr(fuse_req_t req, ws_save *w, uint32_t node)
{
    struct stat st;
    int rc = wops_stat(fuse_req_userdata(req), w, node, &st);
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, attr_timeout(&st));
}

/* Truncation to 0 (O_TRUNC, `>`) and times are accepted and change
 * nothing: each open for writing starts a piece anyway.  A mode set on
 * the save's directory is its directory's on the disk (the kernel let
 * only its owner through), and so every file's of the save; on anything
 * else it changes nothing. */
void wops_setattr(fuse_req_t req, ws_save *w, uint32_t node,
                  const struct stat *attr, int to_set)
{
    struct stat st;
    fs_ctx *c = fuse_req_userdata(req);
    int rc = 0;
    if ((to_set & FUSE_SET_ATTR_MODE) && node == WS_ROOT)
        rc = access_chmod_save(source_path(c->src), ws_save_name(w),
                               attr->st_mode);
    if (rc == 0)
        rc = wops_stat(c, w, node, &st);
    if (rc == 0 && (to_set & FUSE_SET_ATTR_SIZE) && attr->st_size != 0) {
        ckpt_error err = { 0 };
        rc = -EINVAL;
        snprintf(err.msg, sizeof err.msg, "a file of a save in progress can "
                 "only be truncated to 0 (each open writes one piece)");
        reply_fail(req, rc, &err);
        return;
    }
    if (rc)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_attr(req, &st, 0.0);
}

void wops_mkdir(fuse_req_t req, ws_save *w, uint32_t dir, const char *name)
{
    uint32_t node;
    ckpt_error err = { 0 };
    int rc = ws_mkdir(w, dir, name, &node, &err);
    if (rc == -EEXIST)
        fuse_reply_err(req, EEXIST);
    else if (rc)
        reply_fail(req, rc, &err);
    else
        reply_node(req, w, node);
}

void wops_readdir(fuse_req_t req, ws_save *w, uint32_t dir, size_t size,
                  off_t off, int plus)
{
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t pos = 0;
    int rc = 0;
    for (size_t i = off < 0 ? 0 : (size_t)off;; i++) {
        char name[256];
        uint32_t node = i == 0 ? dir : ws_parent(w, dir);
        if (i >= 2)
            rc = ws_child_at(w, dir, i - 2, &node, name, sizeof name);
        else
            snprintf(name, sizeof name, "%s", i ? ".." : ".");
        struct fuse_entry_param e;
        memset(&e, 0, sizeof e);
        if (rc == 0)
            rc = wops_stat(fuse_req_userdata(req), w, node, &e.attr);
        if (rc)
            break;
        size_t add;
        if (plus) {
            if (i >= 2)
                e.ino = e.attr.st_ino;
            add = fuse_add_direntry_plus(req, buf + pos, size - pos, name,
                                         &e, (off_t)(i + 1));
        } else {
            add = fuse_add_direntry(req, buf + pos, size - pos, name,
                                    &e.attr, (off_t)(i + 1));
        }
        if (add > size - pos)
            break;
        pos += add;
    }
    if (rc < 0)
        fuse_reply_err(req, -rc);
    else
        fuse_reply_buf(req, buf, pos);
    free(buf);
}

/* The status line into h->text. */
static int status_text(ws_save *w, wfile *h)
{
    size_t cap = 1200;
    if (!(h->text = malloc(cap)))
        return -ENOMEM;
    int n = ws_status(w, h->text, cap);
    h->len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    return 0;
}

/* Opens node for the request's process; replies. */
static void open_node(fs_ctx *c, fuse_req_t req, ws_save *w, uint32_t node,
                      struct fuse_file_info *fi, int created)
{
    ws_stat ws;
    ckpt_error err = { 0 };
    int rc = ws_stat_node(w, node, &ws);
    int writing = (fi->flags & O_ACCMODE) != O_RDONLY;
    if (rc == 0 && ws.kind == WS_DIR)
        rc = -EISDIR;
    else if (rc == 0 && (ws.kind == WS_STATUS || ws.kind == WS_ERRORS) &&
             writing)
        rc = -EACCES;
    else if (rc == 0 && ws.kind == WS_FILE && !writing) {
        rc = -EBUSY;
        snprintf(err.msg, sizeof err.msg, "%s: a file of a save in progress "
                 "is written, not read, until the save is committed",
                 ws_save_name(w));
    }
    wfile *h = rc ? NULL : calloc(1, sizeof *h);
    if (rc == 0 && !h)
        rc = -ENOMEM;
    if (rc == 0) {
        h->w = w;
        h->kind = ws.kind;
        h->writable = writing;
        if (ws.kind == WS_FILE)
            rc = ws_open(w, node, caller(req), fuse_req_ctx(req)->uid,
                         &h->piece, &err);
        else if (ws.kind == WS_STATUS)
            rc = status_text(w, h);
        else if (ws.kind == WS_ERRORS)
            rc = ws_errors(w, &h->text, &h->len);
    }
    if (rc) {
        if (h)
            free(h->text);
        free(h);
        reply_fail(req, rc, &err);
        return;
    }
    fs_handle_add(c, &h->link, FS_H_WRITE, handle_free);
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->direct_io = 1;       /* pieces stream through; status is fresh */
    if (!created) {
        fuse_reply_open(req, fi);
        return;
    }
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    wops_stat(c, w, node, &e.attr);
    e.ino = e.attr.st_ino;
    e.entry_timeout = NAME_TIMEOUT;
    fuse_reply_create(req, &e, fi);
}

void wops_open(fs_ctx *c, fuse_req_t req, ws_save *w, uint32_t node,
               struct fuse_file_info *fi)
{
    open_node(c, req, w, node, fi, 0);
}

void wops_create(fs_ctx *c, fuse_req_t req, ws_save *w, uint32_t dir,
                 const char *name, struct fuse_file_info *fi)
{
    uint32_t node;
    int created;
    ckpt_error err = { 0 };
    int rc = ws_mkfile(w, dir, name, caller(req), &node, &created, &err);
    if (rc == 0 && !created && (fi->flags & O_EXCL))
        rc = -EEXIST;
    if (rc)
        reply_fail(req, rc, &err);
    else
        open_node(c, req, w, node, fi, 1);
}

void wops_read(fuse_req_t req, fs_handle *hh, size_t size, off_t off)
{
    wfile *h = (wfile *)hh;
    if (!h->text || off < 0) {
        fuse_reply_buf(req, NULL, 0);    /* commit reads empty */
        return;
    }
    size_t o = (size_t)off < h->len ? (size_t)off : h->len;
    size_t n = h->len - o < size ? h->len - o : size;
    fs_reply_owned(req, h->text + o, n);
}

/* A write of a piece lends buf (libfuse's buffer, which this worker
 * thread reads its next request into once the handler returns) to the
 * encoders: the reply goes first, so that the writer's next write, taken
 * by another of libfuse's worker threads, arrives while this one's frames
 * are encoded and appended, and the worker waits for them after it.  No
 * copy (but of frames the write fills only in part); the frames in
 * flight are one write's per worker thread at most, and the stream's ring
 * bounds them too. */
void wops_write(fuse_req_t req, fs_handle *hh, const char *buf, size_t size,
                off_t off)
{
    wfile *h = (wfile *)hh;
    ckpt_error err = { 0 };
    ws_lent lent = { NULL, 0 };
    int rc;
    if (h->kind == WS_COMMIT) {
        rc = ws_commit_ranks(h->w, buf, size, &err);
    } else if (h->kind == WS_FILE) {
        rc = off < 0 ? -EINVAL : ws_write(h->piece, caller(req), buf, size,
                                          (uint64_t)off, &lent, &err);
    } else {
        rc = -EBADF;
    }
    if (rc)
        reply_fail(req, rc, &err);
    else
        fuse_reply_write(req, size);
    ws_lent_wait(&lent);      /* h may be released by now: not touched */
}

/* Replies to a flush or an fsync of h with what check (ws_close or
 * ws_fsync) says of its piece.  The frames of a piece are encoded and
 * appended after its write(2) returned (ckpt_stream_write): an error
 * found then is reported by the next write, the fsync and the close,
 * and fails the piece. */
static void reply_check(fuse_req_t req, fs_handle *hh,
                        int (*check)(ws_file *f, ckpt_error *err))
{
    wfile *h = (wfile *)hh;
    ckpt_error err = { 0 };
    int rc = h->piece ? check(h->piece, &err) : 0;
    if (rc)
        reply_fail(req, rc, &err);
    else
        fuse_reply_err(req, 0);
}

void wops_flush(fuse_req_t req, fs_handle *hh)
{
    reply_check(req, hh, ws_close);
}

void wops_fsync(fuse_req_t req, fs_handle *hh)
{
    reply_check(req, hh, ws_fsync);
}

/* Frees a handle (also one the kernel never released: its free). */
static void handle_free(fs_handle *hh)
{
    wfile *h = (wfile *)hh;
    ws_release(h->piece);
    free(h->text);
    free(h);
}

void wops_release(fs_ctx *c, fuse_req_t req, fs_handle *hh)
{
    fs_handle_remove(c, hh);
    handle_free(hh);
    fuse_reply_err(req, 0);
}

void wops_setxattr(fuse_req_t req, ws_save *w, uint32_t node,
                   const char *name, const char *value, size_t size)
{
    ckpt_error err = { 0 };
    int rc = ws_setxattr(w, node, caller(req), name, value, size, &err);
    if (rc)
        reply_fail(req, rc, &err);
    else
        fuse_reply_err(req, 0);
}

/* Replies with the n bytes a ws_*xattr call left in buf (cap bytes),
 * or its error. */
static void reply_value(fuse_req_t req, const char *buf, int n, size_t cap,
                        size_t size)
{
    if (n < 0)
        fuse_reply_err(req, -n);
    else if ((size_t)n >= cap)
        fuse_reply_err(req, ERANGE);
    else
        fs_reply_xattr(req, buf, (size_t)n, size);
}

void wops_getxattr(fuse_req_t req, ws_save *w, uint32_t node,
                   const char *name, size_t size)
{
    char buf[1100];
    int n = ws_getxattr(w, node, caller(req), name, buf, sizeof buf);
    reply_value(req, buf, n, sizeof buf, size);
}

void wops_listxattr(fuse_req_t req, ws_save *w, uint32_t node, size_t size)
{
    char buf[256];
    int n = ws_listxattr(w, node, caller(req), buf, sizeof buf);
    reply_value(req, buf, n, sizeof buf, size);
}
