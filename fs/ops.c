/*
 * ops.c - the FUSE low-level operations of ckptfs: names and attributes
 * from the checkpoint trees and the root listing, reads through ckpt_read
 * (and the generated views), extended attributes of tensor files, and
 * EROFS for everything that would write.
 *
 * Requests name inodes (see inode.h), so no path is ever built or parsed:
 * a lookup is one hash probe in the checkpoint's tree, and a read goes
 * from the open file's handle straight to the library.
 */
#include "ops.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "access.h"
#include "common/shape.h"
#include "inode.h"
#include "tree.h"
#include "wops.h"

/* .ckptfs/status of a committed checkpoint (a save's reads the same). */
#define STATUS_COMMITTED "committed\n"
/* st_blksize: what cat, cp and friends take as their buffer size.  A
 * ckptfs checkpoint's tensor files ask for a frame (1 MiB by default): a
 * read of a whole frame is decoded straight into the reply, a smaller one
 * through the frame cache.  A foreign checkpoint's ask for 128 KiB (what
 * cat uses on a local file): any range of them is one pread, and cat
 * allocates a buffer of st_blksize per file, a cost paid per tensor. */
#define OPS_BLKSIZE (1 << 20)
#define OPS_BLKSIZE_FOREIGN (128 << 10)

/* ------------------------------------------------------------ inodes */

typedef enum ref_kind { REF_ROOT, REF_LATEST, REF_NODE, REF_SAVE } ref_kind;

/* What an inode number stands for. */
typedef struct fs_ref {
    ref_kind kind;
    fs_ckpt *ck;             /* REF_NODE */
    uint32_t node;           /* REF_NODE, REF_SAVE */
    const tree_node *n;      /* REF_NODE, once ck's tree is open */
    ws_save *w;              /* REF_SAVE */
} fs_ref;

static fs_ctx *ctx_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static fuse_ino_t ino_of(const fs_ctx *c, const fs_ckpt *ck, uint32_t node)
{
    if (node == TREE_ROOT && !source_is_root(c->src))
        return FUSE_ROOT_ID;
    return inode_ckpt(ck->slot, node);
}

static const fs_tree *tree_of(const fs_ckpt *ck)
{
    return atomic_load_explicit(&((fs_ckpt *)ck)->ready,
                                memory_order_acquire) ? ck->tree : NULL;
}

/* The committed node that save node r->node became, if r->w has been
 * committed and the node is part of the checkpoint: turns r into it. */
static void follow_commit(fs_ctx *c, fs_ref *r)
{
    if (!ws_save_committed(r->w))
        return;
    source_rescan(c->src);
    fs_ckpt *ck = source_find(c->src, ws_save_name(r->w));
    char path[8192];
    int n = ws_path(r->w, r->node, path, sizeof path);
    if (!ck || n < 0 || (size_t)n >= sizeof path ||
        source_ckpt_open(c->src, ck) != 0)
        return;
    long node = TREE_ROOT;
    for (char *save, *comp = strtok_r(path, "/", &save); comp && node >= 0;
         comp = strtok_r(NULL, "/", &save))
        node = tree_lookup(ck->tree, (uint32_t)node, comp);
    if (node >= 0)
        *r = (fs_ref){ REF_NODE, ck, (uint32_t)node,
                       tree_node_at(ck->tree, (uint32_t)node), NULL };
}

static int resolve(fs_ctx *c, fuse_ino_t ino, fs_ref *r)
{
    int root = source_is_root(c->src);
    *r = (fs_ref){ .kind = REF_NODE };
    if (inode_is_save(ino)) {
        r->kind = REF_SAVE;
        int rc = wops_resolve(c, ino, &r->w, &r->node);
        if (rc == 0)
            follow_commit(c, r);
        return rc;
    }
    if (root && ino == FUSE_ROOT_ID) {
        r->kind = REF_ROOT;
        return 0;
    }
    if (root && ino == INODE_LATEST) {
        r->kind = REF_LATEST;
        return 0;
    }
    if (ino != FUSE_ROOT_ID && (ino >> 32) == 0)
        return -ESTALE;
    uint64_t slot = ino == FUSE_ROOT_ID ? 0 : (ino >> 32) - 1;
    r->node = ino == FUSE_ROOT_ID ? TREE_ROOT : (uint32_t)ino;
    if (slot > UINT32_MAX || !(r->ck = source_slot(c->src, (uint32_t)slot)))
        return -ESTALE;
    const fs_tree *t = tree_of(r->ck);
    r->n = t ? tree_node_at(t, r->node) : NULL;
    return r->node != TREE_ROOT && !r->n ? -ESTALE : 0;
}

/* Opens the checkpoint of a REF_NODE if needed and finds its node. */
static int ref_open(fs_ctx *c, fs_ref *r)
{
    if (r->kind != REF_NODE)
        return 0;   /* REF_SAVE: wops.c's */
    if (!r->n) {
        int rc = source_ckpt_open(c->src, r->ck);
        if (rc)
            return rc;
        r->n = tree_node_at(r->ck->tree, r->node);
    }
    return r->n ? 0 : -ESTALE;
}

/* ------------------------------------------------------------ attributes */

/* Owner, permission bits (refined by stat_dir, stat_file) and times. */
static void stat_times(const struct stat *from, struct stat *st)
{
    st->st_mode = from->st_mode & 0777;
    st->st_uid = from->st_uid;
    st->st_gid = from->st_gid;
    st->st_atim = from->st_mtim;
    st->st_mtim = from->st_mtim;
    st->st_ctim = from->st_ctim;
}

/* st_mode holds the read and search bits the directory shows. */
static void stat_dir(struct stat *st, nlink_t nlink)
{
    st->st_mode = S_IFDIR | (st->st_mode & 0555);
    st->st_nlink = nlink;
    st->st_blksize = OPS_BLKSIZE;
}

static void stat_file(struct stat *st, uint64_t size, blksize_t blksize)
{
    st->st_mode = S_IFREG | (st->st_mode & 0444);
    st->st_nlink = 1;
    st->st_size = (off_t)size;
    st->st_blksize = blksize;
    st->st_blocks = (blkcnt_t)((size + 511) / 512);
}

/* Size of a generated file now. */
static int generated_size(const fs_ckpt *ck, const tree_node *n,
                          uint64_t *size)
{
    if (n->kind == TREE_STATS) {
        *size = views_stats(ck->reader, NULL, 0);
        return 0;
    }
    if (n->kind == TREE_STATUS) {
        *size = strlen(STATUS_COMMITTED);
        return 0;
    }
    if (n->kind == TREE_METADATA) {
        const char *data;
        size_t len;
        int rc = source_ckpt_json((fs_ckpt *)ck, &data, &len);
        *size = len;
        return rc;
    }
    *size = n->size;
    return 0;
}

/* Who may read node n: the owner, group and mode of the files it is read
 * from (ckpt_reader_perm), so that the kernel (default_permissions) lets
 * nobody read through the mount what they could not read on the disk.
 * Every directory of a checkpoint carries its directory's (ck->dir,
 * access.h: the directory's own bits, its index's, and the search bits of
 * the directories a link in ROOT skips), known before it is opened. */
static int node_perm(const fs_ckpt *ck, const tree_node *n, struct stat *st)
{
    ckpt_perm p = ck->dir, names;
    if (n) {          /* open: the files it is read from */
        size_t idx = n->kind == TREE_TENSOR || n->kind == TREE_NPY
                         ? n->tensor : (size_t)-1;
        int rc = n->kind == TREE_ST
                     ? views_st_perm(ck->reader, tree_st(ck->tree),
                                     n->tensor, &names)
                     : ckpt_reader_perm(ck->reader, idx, &names, NULL);
        if (rc)
            return rc;
        if (n->kind == TREE_DIR)
            access_fold_listing(&p, &names);
        else
            p = names;
    }
    st->st_uid = p.uid;
    st->st_gid = p.gid;
    st->st_mode = p.mode;
    return 0;
}

/* Attributes of a node of a checkpoint (n NULL: its directory, not yet
 * opened, whose number of subdirectories is unknown: nlink 1). */
static int stat_node(const fs_ctx *c, const fs_ckpt *ck, uint32_t node,
                     const tree_node *n, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino_of(c, ck, node);
    stat_times(&ck->st, st);
    int prc = node_perm(ck, n, st);
    if (prc)
        return prc;
    if (!n || n->kind == TREE_DIR) {
        stat_dir(st, n ? 2 + n->nsubdirs : 1);
        return 0;
    }
    uint64_t size;
    int rc = generated_size(ck, n, &size);
    stat_file(st, size, ck->reader && ckpt_reader_format(ck->reader) !=
                            CKPT_FORMAT_CKPTFS ? OPS_BLKSIZE_FOREIGN
                                               : OPS_BLKSIZE);
    return rc;
}

static void stat_root(fs_ctx *c, struct stat *st)
{
    struct stat dir;
    source_root_stat(c->src, &dir);
    memset(st, 0, sizeof *st);
    st->st_ino = FUSE_ROOT_ID;
    stat_times(&dir, st);
    stat_dir(st, 2 + source_shown(c->src));
    if (c->ws)    /* saves are made there by those who may write ROOT */
        st->st_mode |= dir.st_mode & 0222;
    st->st_mode |= dir.st_mode & S_ISVTX;   /* and may not take others' */
}

static void stat_latest(const fs_ckpt *target, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = INODE_LATEST;
    stat_times(&target->st, st);
    st->st_mode = S_IFLNK | 0777;
    st->st_nlink = 1;
    st->st_size = (off_t)strlen(target->name);
    st->st_blksize = OPS_BLKSIZE;
}

/* How long the kernel may keep a node's attributes. */
static double attr_timeout(const fs_ctx *c, const fs_ref *r)
{
    if (r->kind != REF_NODE ||
        (r->node == TREE_ROOT && source_is_root(c->src)))
        return OPS_ROOT_TIMEOUT;
    return r->n && r->n->kind == TREE_STATS ? 0.0 : OPS_CKPT_TIMEOUT;
}

/* ------------------------------------------------------------ replies */

static void reply_entry(fuse_req_t req, const struct stat *st,
                        double entry_timeout, double attr_tmo)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = st->st_ino;
    e.attr = *st;
    e.entry_timeout = entry_timeout;
    e.attr_timeout = attr_tmo;
    fuse_reply_entry(req, &e);
}

/* A name that does not exist inside a checkpoint never will: the kernel
 * may remember that. */
static void reply_negative(fuse_req_t req)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.entry_timeout = OPS_CKPT_TIMEOUT;
    fuse_reply_entry(req, &e);
}

static void reply_err(fuse_req_t req, int negative_errno)
{
    fuse_reply_err(req, -negative_errno);
}

/* ------------------------------------------------------------ lookup */

static void lookup_root(fs_ctx *c, fuse_req_t req, const char *name)
{
    struct stat st;
    source_refresh(c->src);
    if (strcmp(name, "latest") == 0) {
        fs_ckpt *t = source_latest(c->src);
        if (!t) {
            reply_err(req, -ENOENT);
            return;
        }
        stat_latest(t, &st);
        reply_entry(req, &st, OPS_ROOT_TIMEOUT, OPS_ROOT_TIMEOUT);
        return;
    }
    fs_ckpt *ck = source_find(c->src, name);
    int rc = ck || !c->ws ? -ENOENT : wops_lookup_root(c, req, name);
    if (rc == 0)
        return;
    if (rc == -EAGAIN) {          /* just committed */
        source_rescan(c->src);
        ck = source_find(c->src, name);
    }
    const fs_tree *t = ck ? tree_of(ck) : NULL;
    rc = ck ? stat_node(c, ck, TREE_ROOT,
                            t ? tree_node_at(t, TREE_ROOT) : NULL, &st)
                : -ENOENT;
    if (rc)
        reply_err(req, rc);
    else
        reply_entry(req, &st, OPS_ROOT_TIMEOUT, OPS_ROOT_TIMEOUT);
}

static void lookup_node(fs_ctx *c, fuse_req_t req, fs_ref *p,
                        const char *name)
{
    int rc = ref_open(c, p);
    if (rc) {
        reply_err(req, rc);
        return;
    }
    long i = tree_lookup(p->ck->tree, p->node, name);
    if (i == -ENOENT) {
        reply_negative(req);
        return;
    }
    if (i < 0) {
        reply_err(req, (int)i);
        return;
    }
    fs_ref r = { REF_NODE, p->ck, (uint32_t)i,
                 tree_node_at(p->ck->tree, (uint32_t)i), NULL };
    struct stat st;
    rc = stat_node(c, r.ck, r.node, r.n, &st);
    if (rc) {
        reply_err(req, rc);
        return;
    }
    reply_entry(req, &st, OPS_CKPT_TIMEOUT, attr_timeout(c, &r));
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fs_ctx *c = ctx_of(req);
    fs_ref p;
    int rc = resolve(c, parent, &p);
    if (rc) {
        reply_err(req, rc);
        return;
    }
    if (p.kind == REF_ROOT) {
        lookup_root(c, req, name);
        return;
    }
    if (p.kind == REF_LATEST) {
        reply_err(req, -ENOTDIR);
        return;
    }
    if (p.kind == REF_SAVE) {
        wops_lookup(req, p.w, p.node, name);
        return;
    }
    lookup_node(c, req, &p, name);
}

/* ------------------------------------------------------------ getattr */

static int ref_stat(fs_ctx *c, const fs_ref *r, struct stat *st)
{
    if (r->kind == REF_ROOT) {
        stat_root(c, st);
        return 0;
    }
    if (r->kind == REF_LATEST) {
        fs_ckpt *t = source_latest(c->src);
        if (!t)
            return -ENOENT;
        stat_latest(t, st);
        return 0;
    }
    return stat_node(c, r->ck, r->node, r->n, st);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    fs_ctx *c = ctx_of(req);
    fs_ref r;
    struct stat st;
    int rc = resolve(c, ino, &r);
    if (rc == 0 && r.kind == REF_SAVE) {
        wops_getattr(req, r.w, r.node);
        return;
    }
    if (rc == 0)
        rc = ref_stat(c, &r, &st);
    if (rc) {
        reply_err(req, rc);
        return;
    }
    st.st_ino = ino;    /* a committed save's node keeps its number */
    fuse_reply_attr(req, &st, inode_is_save(ino) ? 0.0 : attr_timeout(c, &r));
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    fs_ctx *c = ctx_of(req);
    fs_ref r;
    int rc = resolve(c, ino, &r);
    if (rc) {
        reply_err(req, rc);
        return;
    }
    if (r.kind != REF_LATEST) {
        reply_err(req, -EINVAL);
        return;
    }
    fs_ckpt *t = source_latest(c->src);
    if (!t) {
        reply_err(req, -ENOENT);
        return;
    }
    fuse_reply_readlink(req, t->name);
}

/* ------------------------------------------------------------ dirs */

/* An open directory: the root's listing as it was when opened (so that
 * offsets stay meaningful), or nothing for a checkpoint's directory. */
typedef struct dir_handle {
    fs_handle link;          /* first: a dir_handle is an fs_handle */
    fs_listing list;
    ws_save **saves;          /* writable mount: saves in progress */
    size_t nsaves;
} dir_handle;

static void dir_handle_free(dir_handle *h)
{
    source_listing_free(&h->list);
    free(h->saves);
    free(h);
}

static void dir_handle_drop(fs_handle *h)
{
    dir_handle_free((dir_handle *)h);
}

/* An open committed file holds nothing beyond itself. */
static void file_handle_drop(fs_handle *h)
{
    free(h);
}

/* One directory entry: its name, attributes and whether it counts as a
 * lookup in readdirplus (the dot entries do not). */
typedef struct dir_entry {
    const char *name;
    struct stat st;
    double entry_timeout, attr_timeout;
    int real;
} dir_entry;

static void op_opendir(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    fs_ctx *c = ctx_of(req);
    fs_ref r;
    int rc = resolve(c, ino, &r);
    if (rc == 0)
        rc = ref_open(c, &r);
    if (rc) {
        reply_err(req, rc);
        return;
    }
    if (r.kind == REF_LATEST ||
        (r.kind == REF_NODE && r.n->kind != TREE_DIR)) {
        reply_err(req, -ENOTDIR);
        return;
    }
    fi->fh = 0;
    if (r.kind == REF_SAVE) {
        fuse_reply_open(req, fi);   /* read afresh at every offset */
        return;
    }
    if (r.kind == REF_ROOT) {
        dir_handle *h = calloc(1, sizeof *h);
        source_refresh(c->src);
        if (!h || source_listing(c->src, &h->list) != 0 ||
            (c->ws && ws_set_list(c->ws, &h->saves, &h->nsaves) != 0)) {
            if (h)
                dir_handle_free(h);
            reply_err(req, -ENOMEM);
            return;
        }
        fs_handle_add(c, &h->link, FS_H_ROOTDIR, dir_handle_drop);
        fi->fh = (uint64_t)(uintptr_t)h;
    } else {
        fi->cache_readdir = 1;   /* a checkpoint never changes */
        fi->keep_cache = 1;
    }
    fuse_reply_open(req, fi);
}

/* Entry i of the root listing h (0 ".", 1 "..", then `latest` and the
 * checkpoints); 0, 1 past the end, or a negative errno. */
static int root_entry_at(fs_ctx *c, const dir_handle *h, size_t i,
                         dir_entry *e)
{
    *e = (dir_entry){ .entry_timeout = OPS_ROOT_TIMEOUT,
                      .attr_timeout = OPS_ROOT_TIMEOUT, .real = i >= 2 };
    if (i < 2) {
        e->name = i ? ".." : ".";
        stat_root(c, &e->st);
        return 0;
    }
    i -= 2;
    if (h->list.latest && i-- == 0) {
        e->name = "latest";
        stat_latest(h->list.latest, &e->st);
        return 0;
    }
    if (i >= h->list.n) {
        i -= h->list.n;
        if (i >= h->nsaves)
            return 1;
        e->name = ws_save_name(h->saves[i]);
        e->entry_timeout = e->attr_timeout = 0.0;
        return wops_stat(c, h->saves[i], WS_ROOT, &e->st);
    }
    fs_ckpt *ck = h->list.v[i];
    const fs_tree *t = tree_of(ck);
    e->name = ck->name;
    return stat_node(c, ck, TREE_ROOT, t ? tree_node_at(t, TREE_ROOT) : NULL,
                     &e->st);
}

/* Entry i of directory r of a checkpoint (0 ".", 1 "..", then its
 * children by name); 0, 1 past the end, or a negative errno. */
static int node_entry_at(fs_ctx *c, const fs_ref *r, size_t i, dir_entry *e)
{
    const fs_tree *t = r->ck->tree;
    *e = (dir_entry){ .entry_timeout = OPS_CKPT_TIMEOUT, .real = i >= 2 };
    fs_ref x = *r;
    if (i == 1 && r->node == TREE_ROOT && source_is_root(c->src)) {
        e->name = "..";
        stat_root(c, &e->st);
        return 0;
    }
    if (i < 2) {
        e->name = i ? ".." : ".";
        x.node = i ? r->n->parent : r->node;
    } else if (i - 2 < r->n->nchild) {
        x.node = tree_child(t, r->n, (uint32_t)(i - 2));
    } else {
        return 1;
    }
    x.n = tree_node_at(t, x.node);
    if (i >= 2)
        e->name = tree_name(t, x.n);
    e->attr_timeout = attr_timeout(c, &x);
    return stat_node(c, x.ck, x.node, x.n, &e->st);
}

/* Appends entry e (offset of the next: next) to buf; the bytes it took,
 * or more than `room` when it did not fit. */
static size_t add_entry(fuse_req_t req, char *buf, size_t room,
                        const dir_entry *e, off_t next, int plus)
{
    if (!plus)
        return fuse_add_direntry(req, buf, room, e->name, &e->st, next);
    struct fuse_entry_param p;
    memset(&p, 0, sizeof p);
    p.attr = e->st;
    if (e->real) {
        p.ino = e->st.st_ino;
        p.entry_timeout = e->entry_timeout;
        p.attr_timeout = e->attr_timeout;
    }
    return fuse_add_direntry_plus(req, buf, room, e->name, &p, next);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                       off_t off, struct fuse_file_info *fi, int plus)
{
    fs_ctx *c = ctx_of(req);
    fs_ref r;
    int rc = resolve(c, ino, &r);
    if (rc == 0 && r.kind == REF_SAVE) {
        wops_readdir(req, r.w, r.node, size, off, plus);
        return;
    }
    if (rc == 0)
        rc = ref_open(c, &r);
    const dir_handle *h = (const dir_handle *)(uintptr_t)fi->fh;
    if (rc == 0 && (r.kind == REF_ROOT ? !h : r.kind == REF_LATEST ||
                                             r.n->kind != TREE_DIR))
        rc = -ENOTDIR;           /* not opened by opendir: cannot be */
    if (rc) {
        reply_err(req, rc);
        return;
    }
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        reply_err(req, -ENOMEM);
        return;
    }
    size_t pos = 0;
    for (size_t i = off < 0 ? 0 : (size_t)off;; i++) {
        dir_entry e;
        rc = r.kind == REF_ROOT ? root_entry_at(c, h, i, &e)
                                : node_entry_at(c, &r, i, &e);
        if (rc)
            break;
        size_t add = add_entry(req, buf + pos, size - pos, &e,
                               (off_t)(i + 1), plus);
        if (add > size - pos)
            break;
        pos += add;
    }
    if (rc < 0)
        reply_err(req, rc);
    else
        fuse_reply_buf(req, buf, pos);
    free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                       off_t off, struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
                           off_t off, struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 1);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino,
                          struct fuse_file_info *fi)
{
    dir_handle *h = (dir_handle *)(uintptr_t)fi->fh;
    if (h) {
        fs_handle_remove(ctx_of(req), &h->link);
        dir_handle_free(h);
    }
    fuse_reply_err(req, 0);
}

/* ------------------------------------------------------------ files */

/* An open file. */
typedef struct open_file {
    fs_handle link;          /* first: an open_file is an fs_handle */
    tree_kind kind;
    ckpt_reader *reader;
    uint32_t tensor;
    views_npy npy;            /* TREE_NPY */
    const views_st *st;       /* TREE_ST (its shard: tensor) */
    const char *data;         /* METADATA, STATS, STATUS, a blob: content */
    size_t len;
    char text[256];           /* TREE_STATS: the counters when opened */
} open_file;

static int handle_fill(fs_ckpt *ck, const tree_node *n, open_file *h)
{
    h->kind = (tree_kind)n->kind;
    h->reader = ck->reader;
    h->tensor = n->tensor;
    if (n->blob) {             /* a BytesIO's value (its .npy view) */
        const views_blob *b = tree_blob(ck->tree, n->tensor);
        h->data = (const char *)b->npy;
        h->len = b->header_len + b->len;
        if (n->kind == TREE_TENSOR) {
            h->data += b->header_len;
            h->len = b->len;
        }
        return 0;
    }
    if (n->kind == TREE_NPY) {
        ckpt_tensor_info ti;
        int rc = ckpt_reader_info(ck->reader, n->tensor, &ti);
        return rc ? rc : views_npy_layout(&ti, &h->npy);
    }
    if (n->kind == TREE_METADATA)
        return source_ckpt_json(ck, &h->data, &h->len);
    if (n->kind == TREE_ST)
        h->st = tree_st(ck->tree);
    if (n->kind == TREE_ST_INDEX)
        h->data = views_st_index(tree_st(ck->tree), &h->len);
    if (n->kind == TREE_STATUS) {
        h->data = STATUS_COMMITTED;
        h->len = strlen(STATUS_COMMITTED);
    }
    if (n->kind == TREE_STATS) {
        h->len = views_stats(ck->reader, h->text, sizeof h->text);
        if (h->len >= sizeof h->text)
            h->len = sizeof h->text - 1;
        h->data = h->text;
    }
    return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fs_ctx *c = ctx_of(req);
    fs_ref r;
    int rc = resolve(c, ino, &r);
    if (rc == 0 && r.kind == REF_SAVE) {
        wops_open(c, req, r.w, r.node, fi);
        return;
    }
    if (rc == 0 &&
        ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)))
        rc = -EROFS;
    if (rc == 0)
        rc = ref_open(c, &r);
    if (rc == 0 && r.kind != REF_NODE)
        rc = -EINVAL;
    if (rc == 0 && r.n->kind == TREE_DIR)
        rc = -EISDIR;
    if (rc) {
        reply_err(req, rc);
        return;
    }
    open_file *h = calloc(1, sizeof *h);
    if (!h) {
        reply_err(req, -ENOMEM);
        return;
    }
    rc = handle_fill(r.ck, r.n, h);
    if (rc) {
        free(h);
        reply_err(req, rc);
        return;
    }
    fs_handle_add(c, &h->link, FS_H_FILE, file_handle_drop);
    fi->fh = (uint64_t)(uintptr_t)h;
    if (h->kind == TREE_STATS)
        fi->direct_io = 1;     /* fresh numbers, whatever their length */
    else
        fi->keep_cache = 1;    /* committed data never changes */
    fuse_reply_open(req, fi);
}

/* The errno a failed read reports: the library's when it means something
 * to a reader, EIO otherwise. */
static int read_errno(int rc)
{
    switch (-rc) {
    case EIO: case ENOMEM: case EMFILE: case ENFILE: case EACCES:
    case EPERM: case EINTR:
        return rc;
    default:
        return -EIO;
    }
}

/* Reads a tensor file or a .npy view into buf. */
static int64_t read_tensor(fs_ctx *c, const open_file *h, char *buf,
                           size_t size, off_t off, ckpt_error *err)
{
    if (h->kind == TREE_TENSOR)
        return ckpt_read(h->reader, h->tensor, buf, (uint64_t)off, size,
                         err);
    if (h->kind == TREE_ST)
        return views_st_read(h->reader, h->st, h->tensor,
                             (unsigned char *)buf, (uint64_t)off, size, err);
    ckpt_tensor_info ti;
    int rc = ckpt_reader_info(h->reader, h->tensor, &ti);
    if (rc)
        return rc;
    return views_npy_read(h->reader, h->tensor, &ti, &h->npy, &c->tables,
                          (unsigned char *)buf, (uint64_t)off, size, err);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    fs_handle *oh = (fs_handle *)(uintptr_t)fi->fh;
    if (oh->kind == FS_H_WRITE) {
        wops_read(req, oh, size, off);
        return;
    }
    const open_file *h = (const open_file *)oh;
    if (off < 0) {
        reply_err(req, -EINVAL);
        return;
    }
    if (h->data) {             /* generated, or held in memory */
        size_t o = (uint64_t)off < h->len ? (size_t)off : h->len;
        size_t n = h->len - o < size ? h->len - o : size;
        if (h->kind == TREE_STATS)   /* text is the handle's own */
            fs_reply_owned(req, h->data + o, n);
        else
            fuse_reply_buf(req, h->data + o, n);   /* lives until unmount */
        return;
    }
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        reply_err(req, -ENOMEM);
        return;
    }
    ckpt_error err = { 0 };
    int64_t n = read_tensor(ctx_of(req), h, buf, size, off, &err);
    if (n < 0) {
        fuse_log(FUSE_LOG_ERR, "ckptfs: %s\n", err.msg[0] ? err.msg
                                                     : strerror((int)-n));
        reply_err(req, read_errno((int)n));
    } else {
        fuse_reply_buf(req, buf, (size_t)n);
    }
    free(buf);
}

static void op_release(fuse_req_t req, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    fs_handle *oh = (fs_handle *)(uintptr_t)fi->fh;
    if (oh->kind == FS_H_WRITE) {
        wops_release(ctx_of(req), req, oh);
        return;
    }
    open_file *h = (open_file *)oh;
    fs_handle_remove(ctx_of(req), &h->link);
    free(h);
    fuse_reply_err(req, 0);
}

/* ------------------------------------------------------------ xattrs */

static const char *const xattr_names[] = {
    "user.ckpt.fqn", "user.ckpt.dtype", "user.ckpt.shape",
    "user.ckpt.stored_bytes", "user.ckpt.codec", "user.ckpt.chunks",
};
#define NXATTRS (sizeof xattr_names / sizeof xattr_names[0])

/* The value of attribute `name` of tensor ti: points *val at it (in buf
 * or in ti) and returns its length, or -ENODATA. */
static ssize_t xattr_value(const ckpt_tensor_info *ti, const char *name,
                           char *buf, size_t cap, const char **val)
{
    size_t k = 0;
    while (k < NXATTRS && strcmp(name, xattr_names[k]) != 0)
        k++;
    int n = 0;
    *val = buf;
    switch (k) {
    case 0: *val = ti->fqn; return (ssize_t)strlen(ti->fqn);
    case 1: *val = ckpt_dtype_name(ti->dtype); return (ssize_t)strlen(*val);
    case 2: n = ckpt_shape_format(buf, cap, ti->ndim, ti->shape); break;
    case 3: n = snprintf(buf, cap, "%" PRIu64, ti->stored_bytes); break;
    case 4: *val = ti->codecs; return (ssize_t)strlen(ti->codecs);
    case 5: n = snprintf(buf, cap, "%zu", ti->nchunks); break;
    default: return -ENODATA;
    }
    return n < 0 || (size_t)n >= cap ? -ERANGE : n;
}

/* The tensor behind inode ino, if it is a tensor file. */
static int xattr_tensor(fuse_req_t req, fuse_ino_t ino,
                        ckpt_tensor_info *ti)
{
    fs_ref r;
    int rc = resolve(ctx_of(req), ino, &r);
    if (rc)
        return rc;
    if (r.kind != REF_NODE || !r.n || r.n->kind != TREE_TENSOR)
        return -ENODATA;
    rc = ckpt_reader_info(r.ck->reader, r.n->tensor, ti);
    const views_blob *b = r.n->blob ? tree_blob(r.ck->tree, r.n->tensor)
                                    : NULL;
    if (rc == 0 && b) {        /* a BytesIO's value: its own size */
        ti->shape = &b->dim;
        ti->numel = ti->nbytes = b->len;
    }
    return rc;
}

/* The save node behind ino (0), or -ENOENT when ino is committed. */
static int save_of(fuse_req_t req, fuse_ino_t ino, fs_ref *r)
{
    if (!inode_is_save(ino))
        return -ENOENT;
    int rc = resolve(ctx_of(req), ino, r);
    return rc ? rc : r->kind == REF_SAVE ? 0 : -ENOENT;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                        size_t size)
{
    fs_ref sr;
    int src = save_of(req, ino, &sr);
    if (src != -ENOENT) {
        if (src)
            reply_err(req, src);
        else
            wops_getxattr(req, sr.w, sr.node, name, size);
        return;
    }
    ckpt_tensor_info ti;
    int rc = xattr_tensor(req, ino, &ti);
    if (rc) {
        reply_err(req, rc == -ENODATA || rc == -ESTALE ? rc : -EIO);
        return;
    }
    char buf[CKPT_MAX_DIMS * 22 + 8];
    const char *val;
    ssize_t len = xattr_value(&ti, name, buf, sizeof buf, &val);
    if (len < 0) {
        reply_err(req, (int)len);
        return;
    }
    fs_reply_xattr(req, val, (size_t)len, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    fs_ref sr;
    int src = save_of(req, ino, &sr);
    if (src != -ENOENT) {
        if (src)
            reply_err(req, src);
        else
            wops_listxattr(req, sr.w, sr.node, size);
        return;
    }
    ckpt_tensor_info ti;
    int rc = xattr_tensor(req, ino, &ti);
    if (rc == -ENODATA) {
        fs_reply_xattr(req, "", 0, size);
        return;
    }
    if (rc) {
        reply_err(req, rc == -ESTALE ? rc : -EIO);
        return;
    }
    char list[256];
    size_t len = 0;
    for (size_t k = 0; k < NXATTRS; k++) {
        size_t n = strlen(xattr_names[k]) + 1;
        memcpy(list + len, xattr_names[k], n);
        len += n;
    }
    fs_reply_xattr(req, list, len, size);
}

/* ------------------------------------------------------------ the rest */

/* A writable mount shows the space left where saves go. */
static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    fs_ctx *c = ctx_of(req);
    struct statvfs st;
    memset(&st, 0, sizeof st);
    if (!c->ws || statvfs(source_path(c->src), &st) != 0) {
        memset(&st, 0, sizeof st);
        st.f_bsize = 4096;
        st.f_frsize = 4096;
    }
    st.f_namemax = TREE_NAME_MAX;
    st.f_flag = c->ws ? 0 : ST_RDONLY;
    fuse_reply_statfs(req, &st);
}

/* Everyone may read everything and enter every directory (0444, 0555);
 * nobody may write but into saves in progress (and the root of a writable
 * mount, to start one), and files are not executable. */
static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    fs_ctx *c = ctx_of(req);
    fs_ref r;
    int rc = resolve(c, ino, &r);
    int is_file = rc == 0 && r.kind == REF_NODE && r.n &&
                  r.n->kind != TREE_DIR;
    int writable = r.kind == REF_SAVE || (c->ws && r.kind == REF_ROOT);
    if (rc == 0 && (mask & W_OK) && !writable)
        rc = -EROFS;
    else if (rc == 0 && (mask & X_OK) && is_file)
        rc = -EACCES;
    reply_err(req, rc);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    /* Reads as large as the kernel sends: libfuse asks for max_pages from
     * max_write (its whole buffer: 1 MiB with libfuse 3.14); max_read
     * stays 0, no limit of ours (it must equal the max_read mount option).
     * The kernel takes the smaller of max_readahead and the mount's own
     * readahead (which main() raised to 1 MiB when it could): ask for no
     * less.  Let readahead keep more requests in flight. */
    conn->max_readahead = UINT_MAX;
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    conn->want &= ~(unsigned)FUSE_CAP_CACHE_SYMLINKS;   /* latest moves */
    /* Pieces must arrive in order, from the writing process: no writeback
     * cache (which would send pages later, from the kernel's flusher). */
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
    /* Nothing here is setuid or has capabilities: spare every first write
     * of a piece the kernel's security.capability lookup. */
    if (conn->capable & FUSE_CAP_HANDLE_KILLPRIV)
        conn->want |= FUSE_CAP_HANDLE_KILLPRIV;
    if (conn->max_background < 64)
        conn->max_background = 64;
    if (conn->congestion_threshold < 48)
        conn->congestion_threshold = 48;
    /* A single checkpoint is opened right away (after daemonizing, as
     * the reader starts threads): its root's attributes need the tree.
     * A failure is logged, and retried on first access. */
    fs_ctx *c = userdata;
    if (!source_is_root(c->src))
        (void)source_ckpt_open(c->src, source_slot(c->src, 0));
}

static void op_destroy(void *userdata)
{
    /* Readers are closed by main() once the loop's threads are gone. */
}

/* Everything that would modify the file system: EROFS, except in the
 * saves of a writable mount (wops.c). */

/* The save behind parent for an operation that makes a name there: 0 with
 * r set, or the errno to answer (EROFS outside saves). */
static int save_parent(fuse_req_t req, fuse_ino_t parent, fs_ref *r)
{
    fs_ctx *c = ctx_of(req);
    if (!c->ws)
        return -EROFS;
    int rc = resolve(c, parent, r);
    if (rc)
        return rc;
    return r->kind == REF_SAVE || r->kind == REF_ROOT ? 0 : -EROFS;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                       int to_set, struct fuse_file_info *fi)
{
    fs_ref r;
    int rc = save_of(req, ino, &r);
    if (rc == 0)
        wops_setattr(req, r.w, r.node, attr, to_set);
    else
        reply_err(req, rc == -ENOENT ? -EROFS : rc);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
                     mode_t mode, dev_t rdev)
{
    fuse_reply_err(req, EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
                     mode_t mode)
{
    fs_ref r;
    int rc = save_parent(req, parent, &r);
    if (rc)
        reply_err(req, rc);
    else if (r.kind == REF_ROOT)
        wops_mkdir_root(ctx_of(req), req, name, mode);
    else
        wops_mkdir(req, r.w, r.node, name);
}

/* unlink, rmdir, removexattr */
static void op_erofs_name(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    fuse_reply_err(req, EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
                       const char *name)
{
    fuse_reply_err(req, EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                      fuse_ino_t newparent, const char *newname,
                      unsigned int flags)
{
    fuse_reply_err(req, EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                    const char *newname)
{
    fuse_reply_err(req, EROFS);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
                     size_t size, off_t off, struct fuse_file_info *fi)
{
    fs_handle *h = (fs_handle *)(uintptr_t)fi->fh;
    if (h && h->kind == FS_H_WRITE)
        wops_write(req, h, buf, size, off);
    else
        fuse_reply_err(req, EBADF);
}

/* The handle of a file of a save in progress, or NULL (a committed
 * file's, which never changes: its close and fsync have nothing to
 * report). */
static fs_handle *write_handle(const struct fuse_file_info *fi)
{
    fs_handle *h = (fs_handle *)(uintptr_t)fi->fh;
    return h && h->kind == FS_H_WRITE ? h : NULL;
}

/* close(): a piece's errors, also those found after its writes returned
 * (wops_flush); the piece itself is recorded by the write of its last
 * byte. */
static void op_flush(fuse_req_t req, fuse_ino_t ino,
                     struct fuse_file_info *fi)
{
    fs_handle *h = write_handle(fi);
    if (h)
        wops_flush(req, h);
    else
        fuse_reply_err(req, 0);
}

/* fsync(): a piece's errors so far (wops_fsync). */
static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
                     struct fuse_file_info *fi)
{
    fs_handle *h = write_handle(fi);
    if (h)
        wops_fsync(req, h);
    else
        fuse_reply_err(req, 0);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
                      mode_t mode, struct fuse_file_info *fi)
{
    fs_ref r;
    int rc = save_parent(req, parent, &r);
    if (rc == 0 && r.kind == REF_ROOT)
        rc = -EPERM;     /* the root holds checkpoints (directories) only */
    if (rc)
        reply_err(req, rc);
    else
        wops_create(ctx_of(req), req, r.w, r.node, name, fi);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                        const char *value, size_t size, int flags)
{
    fs_ref r;
    int rc = save_of(req, ino, &r);
    if (rc == 0)
        wops_setxattr(req, r.w, r.node, name, value, size);
    else
        reply_err(req, rc == -ENOENT ? -EROFS : rc);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode,
                         off_t offset, off_t length,
                         struct fuse_file_info *fi)
{
    fuse_reply_err(req, EROFS);
}

void ops_fill(struct fuse_lowlevel_ops *ops)
{
    memset(ops, 0, sizeof *ops);
    ops->init = op_init;
    ops->destroy = op_destroy;
    ops->lookup = op_lookup;
    ops->getattr = op_getattr;
    ops->readlink = op_readlink;
    ops->opendir = op_opendir;
    ops->readdir = op_readdir;
    ops->readdirplus = op_readdirplus;
    ops->releasedir = op_releasedir;
    ops->open = op_open;
    ops->read = op_read;
    ops->release = op_release;
    ops->getxattr = op_getxattr;
    ops->listxattr = op_listxattr;
    ops->statfs = op_statfs;
    ops->access = op_access;
    ops->setattr = op_setattr;
    ops->mknod = op_mknod;
    ops->mkdir = op_mkdir;
    ops->unlink = op_erofs_name;
    ops->rmdir = op_erofs_name;
    ops->symlink = op_symlink;
    ops->rename = op_rename;
    ops->link = op_link;
    ops->write = op_write;
    ops->flush = op_flush;
    ops->fsync = op_fsync;
    ops->create = op_create;
    ops->setxattr = op_setxattr;
    ops->removexattr = op_erofs_name;
    ops->fallocate = op_fallocate;
}
