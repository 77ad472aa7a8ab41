/*
 * source.c - SOURCE as a single checkpoint or a root of checkpoints:
 * validation before mounting, root scans with `latest` selection, lazy
 * opening of readers and trees (see source.h).
 *
 * Locking: `lock` (a rwlock) guards the slot table, the root listing,
 * `latest` and the root's attributes; scans run under `scan_mu` without
 * holding `lock` while they touch the disk, then swap their result in
 * under the write lock.  Each fs_ckpt has its own mutex for opening.
 */
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fuse3/fuse_log.h>

#include "access.h"
#include "common/error.h"
#include "format/claim.h"
#include "write/gc.h"
#include "views.h"

/* A subdirectory of the root that is a checkpoint or a save. */
typedef enum entry_state {
    ENTRY_PENDING,         /* not committed: left out */
    ENTRY_BROKEN,          /* index.db does not open: left out */
    ENTRY_SHOWN
} entry_state;

typedef struct root_entry {
    char *name;
    entry_state state;
    fs_ckpt *ck;           /* ENTRY_SHOWN */
    struct stat idx;       /* ENTRY_BROKEN, ENTRY_SHOWN: index.db */
} root_entry;

struct fs_source {
    char *path;            /* absolute */
    int is_root;
    ckpt_read_opts ro;
    uint64_t st_shard;     /* .safetensors/: bytes per file at most */
    pthread_rwlock_t lock;
    fs_ckpt **slots;       /* every checkpoint ever served, by slot */
    size_t nslots;
    root_entry *list;      /* by name */
    size_t nlist;
    fs_ckpt *latest;
    struct stat root_st;
    pthread_mutex_t scan_mu;
    struct timespec last_scan;
    int latest_name_logged;
};

/* ------------------------------------------------------------ helpers */

/* "dir/name" in a new string, or NULL. */
static char *join(const char *dir, const char *name)
{
    char *p;
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* stat of dir/index.db: 0 or a negative errno. */
static int stat_index(const char *dir, struct stat *st)
{
    char *p = join(dir, "index.db");
    if (!p)
        return -ENOMEM;
    int rc = stat(p, st) == 0 ? 0 : -errno;
    free(p);
    return rc;
}

/* Whether path is a checkpoint of another tool (PyTorch DCP,
 * safetensors); stamp receives the file that stands for it. */
static int is_foreign(const char *path, char *stamp, size_t cap)
{
    ckpt_format f = ckpt_format_probe(path, stamp, cap);
    return f == CKPT_FORMAT_DCP || f == CKPT_FORMAT_SAFETENSORS ||
           f == CKPT_FORMAT_TORCH;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
           a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
           a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Opens the index of the checkpoint at path with a minimal reader (one
 * thread, small cache; the mount's follow_links), to check it opens and
 * read its step. */
static int probe(const fs_source *s, const char *name, const char *path,
                 int *has_step, int64_t *step, ckpt_error *err)
{
    ckpt_read_opts o;
    ckpt_read_opts_init(&o);
    o.follow_links = s->ro.follow_links;
    o.threads = 1;
    o.prefetch = 0;
    o.cache_bytes = (size_t)1 << 20;
    ckpt_reader *r;
    int rc = ckpt_reader_open(&r, path, &o, err);
    if (rc)
        return rc;
    *has_step = ckpt_retain_key(name, ckpt_reader_meta_get(r, "step"), step);
    ckpt_reader_close(r);
#ifdef __GLIBC__
    /* A foreign checkpoint's open is as costly as its header (docs/
     * TRUST.md): what this one held goes back to the system now, or it
     * stays this thread's while the checkpoint's real open (in a FUSE
     * thread, another malloc arena) costs as much again. */
    malloc_trim(0);
#endif
    return 0;
}

/* root: ROOT's path in root mode (NULL: path is SOURCE). */
static fs_ckpt *ckpt_new(const char *root, const char *name,
                         const char *path, const struct stat *idx,
                         int has_step, int64_t step)
{
    fs_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->name = strdup(name);
    c->path = strdup(path);
    if (!c->name || !c->path) {
        free(c->name);
        free(c->path);
        free(c);
        return NULL;
    }
    c->st = *idx;
    access_ckpt_dir(root, path, idx, &c->dir, &c->dir_seen);
    c->has_step = has_step;
    c->step = step;
    atomic_init(&c->ready, 0);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void ckpt_free(fs_ckpt *c)
{
    if (!c)
        return;
    if (atomic_load(&c->ready)) {
        tree_free(c->tree);
        ckpt_reader_close(c->reader);
    }
    pthread_mutex_destroy(&c->mu);
    free(c->json);
    free(c->name);
    free(c->path);
    free(c);
}

static void entries_free(root_entry *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

static int by_entry_name(const void *a, const void *b)
{
    return strcmp(((const root_entry *)a)->name,
                  ((const root_entry *)b)->name);
}

/* The entry called name in a sorted list, or NULL. */
static root_entry *entry_find(root_entry *v, size_t n, const char *name)
{
    root_entry key = { .name = (char *)name };
    return n ? bsearch(&key, v, n, sizeof *v, by_entry_name) : NULL;
}

/* What ckpt_retain_newer orders c by: its step (metadata, or else the
 * number in its name: probe()), then its index's time. */
static ckpt_retain_item retain_item(const fs_ckpt *c)
{
    ckpt_retain_item it = { .name = c->name, .has_key = c->has_step,
                            .key = c->step };
    it.committed_ns = (int64_t)c->st.st_mtim.tv_sec * 1000000000LL +
                      c->st.st_mtim.tv_nsec;
    return it;
}

/* Whether checkpoint a is newer than b for `latest`: the order gc's
 * retention keeps the newest by (src/gc.h), so gc never retires what
 * `latest` points to. */
static int newer(const fs_ckpt *a, const fs_ckpt *b)
{
    ckpt_retain_item x = retain_item(a), y = retain_item(b);
    return ckpt_retain_newer(&x, &y);
}

static fs_ckpt *choose_latest(const root_entry *v, size_t n)
{
    fs_ckpt *best = NULL;
    for (size_t i = 0; i < n; i++)
        if (v[i].state == ENTRY_SHOWN && (!best || newer(v[i].ck, best)))
            best = v[i].ck;
    return best;
}

/* ------------------------------------------------------------ scanning */

/* What one scan found. */
typedef struct scan_result {
    root_entry *v;
    size_t n, cap;
    fs_ckpt **fresh;       /* new checkpoints, to get slots */
    size_t nfresh;
} scan_result;

static void scan_result_free(scan_result *r, int free_fresh)
{
    entries_free(r->v, r->n);
    for (size_t i = 0; free_fresh && i < r->nfresh; i++)
        ckpt_free(r->fresh[i]);
    free(r->fresh);
}

static int scan_push(scan_result *r, const root_entry *e)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        root_entry *v = realloc(r->v, cap * sizeof *v);
        fs_ckpt **f = realloc(r->fresh, cap * sizeof *f);
        if (v)
            r->v = v;
        if (f)
            r->fresh = f;
        if (!v || !f)
            return -ENOMEM;
        r->cap = cap;
    }
    r->v[r->n] = *e;
    if (!(r->v[r->n].name = strdup(e->name)))
        return -ENOMEM;
    r->n++;
    return 0;
}

/* Classifies the committed checkpoint `name` (index.db stat in idx):
 * reuses what the previous scan knew about the same index.db, otherwise
 * probes it. */
static int scan_committed(fs_source *s, scan_result *r, const char *name,
                          const char *path, const struct stat *idx)
{
    root_entry *old = entry_find(s->list, s->nlist, name);
    if (old && old->state != ENTRY_PENDING && same_file(&old->idx, idx))
        return scan_push(r, old);
    root_entry e = { .name = (char *)name, .state = ENTRY_BROKEN,
                     .idx = *idx };
    ckpt_error err = { 0 };
    int has_step = 0;
    int64_t step = 0;
    if (probe(s, name, path, &has_step, &step, &err) != 0) {
        fuse_log(FUSE_LOG_WARNING, "ckptfs: %s: left out: %s\n", path,
                 err.msg);
        return scan_push(r, &e);
    }
    if (!(e.ck = ckpt_new(s->path, name, path, idx, has_step, step)))
        return -ENOMEM;
    e.state = ENTRY_SHOWN;
    int rc = scan_push(r, &e);
    if (rc)
        ckpt_free(e.ck);
    else
        r->fresh[r->nfresh++] = e.ck;
    return rc;
}

static int scan_pending(fs_source *s, scan_result *r, const char *name,
                        const char *path)
{
    root_entry *old = entry_find(s->list, s->nlist, name);
    if (!old || old->state != ENTRY_PENDING)
        fuse_log(FUSE_LOG_NOTICE, "ckptfs: %s: left out: not committed "
                 "(a save in progress or interrupted)\n", path);
    root_entry e = { .name = (char *)name, .state = ENTRY_PENDING };
    return scan_push(r, &e);
}

/* Looks at one subdirectory of the root. */
static int scan_one(fs_source *s, scan_result *r, const char *name)
{
    if (name[0] == '.')
        return 0;
    char *path = join(s->path, name);
    if (!path)
        return -ENOMEM;
    int rc = 0;
    struct stat idx;
    char stamp[4096];
    ckpt_dir_state st = ckpt_dir_probe(path);
    /* index.db that its committer may still withdraw: not yet listed
     * (docs/GUARANTEES.md, "Durability points"). */
    if (st == CKPT_DIR_COMMITTED && !ckpt_claim_settled(path))
        st = CKPT_DIR_PENDING;
    int foreign = st == CKPT_DIR_NONE && is_foreign(path, stamp,
                                                    sizeof stamp);
    if ((st != CKPT_DIR_NONE || foreign) && strcmp(name, "latest") == 0) {
        if (!s->latest_name_logged)
            fuse_log(FUSE_LOG_NOTICE, "ckptfs: %s: left out: ckptfs shows "
                     "its own 'latest'\n", path);
        s->latest_name_logged = 1;
    } else if (st == CKPT_DIR_PENDING) {
        rc = scan_pending(s, r, name, path);
    } else if (st == CKPT_DIR_COMMITTED && stat_index(path, &idx) == 0) {
        rc = scan_committed(s, r, name, path, &idx);
    } else if (foreign && stat(stamp, &idx) == 0) {
        rc = scan_committed(s, r, name, path, &idx);
    }
    free(path);
    return rc;
}

static int scan_dir(fs_source *s, scan_result *r)
{
    DIR *d = opendir(s->path);
    if (!d) {
        int e = errno;
        fuse_log(FUSE_LOG_ERR, "ckptfs: cannot list %s: %s\n", s->path,
                 strerror(e));
        return -e;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0) {
        errno = 0;
        if (!(de = readdir(d))) {
            rc = -errno;
            break;
        }
        rc = scan_one(s, r, de->d_name);
    }
    closedir(d);
    if (rc)
        fuse_log(FUSE_LOG_ERR, "ckptfs: scanning %s: %s\n", s->path,
                 strerror(-rc));
    return rc;
}

/* Publishes a scan: slots for new checkpoints, the listing, `latest`. */
static int scan_publish(fs_source *s, scan_result *r, const struct stat *st)
{
    if (r->n > 1)
        qsort(r->v, r->n, sizeof *r->v, by_entry_name);
    pthread_rwlock_wrlock(&s->lock);
    fs_ckpt **slots = realloc(s->slots,
                              (s->nslots + r->nfresh + 1) * sizeof *slots);
    if (!slots) {
        pthread_rwlock_unlock(&s->lock);
        return -ENOMEM;
    }
    s->slots = slots;
    for (size_t i = 0; i < r->nfresh; i++) {
        r->fresh[i]->slot = (uint32_t)s->nslots;
        s->slots[s->nslots++] = r->fresh[i];
    }
    root_entry *old = s->list;
    size_t nold = s->nlist;
    s->list = r->v;
    s->nlist = r->n;
    s->latest = choose_latest(s->list, s->nlist);
    s->root_st = *st;
    pthread_rwlock_unlock(&s->lock);
    entries_free(old, nold);
    r->v = NULL;
    r->n = 0;
    return 0;
}

/* One scan of the root (under scan_mu). */
static int scan(fs_source *s)
{
    scan_result r = { 0 };
    struct stat st;
    int rc = stat(s->path, &st) == 0 ? 0 : -errno;
    if (rc)
        fuse_log(FUSE_LOG_ERR, "ckptfs: %s: %s\n", s->path, strerror(-rc));
    else
        rc = scan_dir(s, &r);
    if (rc == 0 && s->nslots + r.nfresh >= UINT32_MAX - 1)
        rc = -EOVERFLOW;
    if (rc == 0)
        rc = scan_publish(s, &r, &st);
    scan_result_free(&r, rc != 0);
    return rc;
}

static double seconds_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->tv_sec) +
           (double)(now.tv_nsec - t->tv_nsec) / 1e9;
}

static void refresh(fs_source *s, double min_age)
{
    if (!s->is_root)
        return;
    pthread_mutex_lock(&s->scan_mu);
    if (seconds_since(&s->last_scan) >= min_age) {
        scan(s);   /* failures are logged; the last listing stays */
        clock_gettime(CLOCK_MONOTONIC, &s->last_scan);
    }
    pthread_mutex_unlock(&s->scan_mu);
}

void source_refresh(fs_source *s)
{
    refresh(s, 1.0);
}

void source_rescan(fs_source *s)
{
    refresh(s, 0.0);
}

/* ------------------------------------------------------------ opening */

static fs_source *source_new(char *path, const ckpt_read_opts *ro)
{
    fs_source *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->path = path;
    s->ro = *ro;
    s->st_shard = SOURCE_ST_SHARD;
    pthread_rwlock_init(&s->lock, NULL);
    pthread_mutex_init(&s->scan_mu, NULL);
    return s;
}

/* `stamp`: the file whose status stands for the checkpoint's (its
 * index.db, or a foreign checkpoint's .metadata or .safetensors file). */
static int open_single(fs_source *s, const char *stamp, ckpt_error *err)
{
    struct stat idx;
    int has_step = 0;
    int64_t step = 0;
    int rc = probe(s, "", s->path, &has_step, &step, err);
    if (rc == 0 && stat(stamp, &idx) != 0)
        return ckpt_err_sys(err, -errno, "%s", stamp);
    if (rc)
        return rc;
    s->slots = malloc(sizeof *s->slots);
    if (!s->slots || !(s->slots[0] = ckpt_new(NULL, "", s->path, &idx,
                                              has_step, step)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    s->nslots = 1;
    return 0;
}

/* path: SOURCE as given, for messages. */
static int open_root(fs_source *s, const char *path, int writable,
                     ckpt_error *err)
{
    s->is_root = 1;
    int rc = scan(s);
    clock_gettime(CLOCK_MONOTONIC, &s->last_scan);
    if (rc)
        return ckpt_err(err, rc, "cannot scan %s: %s", path, strerror(-rc));
    if (s->nlist == 0 && !writable)
        return ckpt_err(err, -ENOENT, "%s holds no checkpoint: neither it "
                       "nor any of its subdirectories is a ckptfs "
                       "checkpoint (index.db) or save, a PyTorch "
                       "distributed checkpoint (.metadata) or safetensors",
                       path);
    return 0;
}

int source_open(fs_source **out, const char *path, const ckpt_read_opts *ro,
                int writable, ckpt_error *err)
{
    *out = NULL;
    struct stat st;
    char *abs = realpath(path, NULL);
    if (!abs)
        return ckpt_err(err, -errno, "%s: %s", path, strerror(errno));
    /* A PyTorch distributed checkpoint or safetensors is served as one
     * checkpoint, read-only, by the same reader. */
    char stamp[4096];
    int foreign = is_foreign(abs, stamp, sizeof stamp);
    if (!foreign && (stat(abs, &st) != 0 || !S_ISDIR(st.st_mode))) {
        int rc = ckpt_err(err, -ENOTDIR, "%s is not a directory", path);
        free(abs);
        return rc;
    }
    fs_source *s = source_new(abs, ro);
    if (!s) {
        free(abs);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    int rc;
    int kind = foreign ? CKPT_DIR_COMMITTED : ckpt_dir_probe(abs);
    if (writable && (foreign || kind != CKPT_DIR_NONE))
        kind = -1;
    switch (kind) {
    case -1:
        rc = ckpt_err(err, -EINVAL, "%s is a checkpoint; a writable mount "
                      "(-o rw) takes the root directory its checkpoints go "
                      "in", path);
        break;
    case CKPT_DIR_COMMITTED:
        if (!foreign)
            snprintf(stamp, sizeof stamp, "%s/index.db", abs);
        rc = open_single(s, stamp, err);
        break;
    case CKPT_DIR_PENDING:
        rc = ckpt_err(err, -ENOENT, "%s is not a committed checkpoint: it has "
                     "no index.db (a save in progress or interrupted)", path);
        break;
    default:
        rc = open_root(s, path, writable, err);
        break;
    }
    if (rc) {
        source_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void source_free(fs_source *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nslots; i++)
        ckpt_free(s->slots[i]);
    free(s->slots);
    entries_free(s->list, s->nlist);
    pthread_rwlock_destroy(&s->lock);
    pthread_mutex_destroy(&s->scan_mu);
    free(s->path);
    free(s);
}

/* ------------------------------------------------------------ queries */

int source_is_root(const fs_source *s)
{
    return s->is_root;
}

const char *source_path(const fs_source *s)
{
    return s->path;
}

void source_root_stat(fs_source *s, struct stat *st)
{
    pthread_rwlock_rdlock(&s->lock);
    *st = s->root_st;
    pthread_rwlock_unlock(&s->lock);
}

fs_ckpt *source_slot(fs_source *s, uint32_t slot)
{
    if (!s->is_root)       /* one checkpoint, set before mounting */
        return slot < s->nslots ? s->slots[slot] : NULL;
    pthread_rwlock_rdlock(&s->lock);
    fs_ckpt *c = slot < s->nslots ? s->slots[slot] : NULL;
    pthread_rwlock_unlock(&s->lock);
    return c;
}

int source_listing(fs_source *s, fs_listing *out)
{
    pthread_rwlock_rdlock(&s->lock);
    *out = (fs_listing){ .latest = s->latest };
    out->v = malloc((s->nlist + 1) * sizeof *out->v);
    for (size_t i = 0; out->v && i < s->nlist; i++)
        if (s->list[i].state == ENTRY_SHOWN)
            out->v[out->n++] = s->list[i].ck;
    pthread_rwlock_unlock(&s->lock);
    return out->v ? 0 : -ENOMEM;
}

void source_listing_free(fs_listing *l)
{
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

size_t source_shown(fs_source *s)
{
    size_t n = 0;
    pthread_rwlock_rdlock(&s->lock);
    for (size_t i = 0; i < s->nlist; i++)
        n += s->list[i].state == ENTRY_SHOWN;
    pthread_rwlock_unlock(&s->lock);
    return n;
}

fs_ckpt *source_find(fs_source *s, const char *name)
{
    pthread_rwlock_rdlock(&s->lock);
    root_entry *e = entry_find(s->list, s->nlist, name);
    fs_ckpt *c = e && e->state == ENTRY_SHOWN ? e->ck : NULL;
    pthread_rwlock_unlock(&s->lock);
    return c;
}

fs_ckpt *source_latest(fs_source *s)
{
    pthread_rwlock_rdlock(&s->lock);
    fs_ckpt *c = s->latest;
    pthread_rwlock_unlock(&s->lock);
    return c;
}

/* ------------------------------------------------------------ per ckpt */

static void tree_warning(void *arg, const char *msg)
{
    const fs_ckpt *c = arg;
    fuse_log(FUSE_LOG_WARNING, "ckptfs: %s: %s\n", c->path, msg);
}

/* Opens c's reader and tree (under c->mu). */
static int ckpt_open_locked(fs_source *s, fs_ckpt *c)
{
    ckpt_error err = { 0 };
    ckpt_reader *r;
    fs_tree *t;
    int rc = ckpt_reader_open(&r, c->path, &s->ro, &err);
    if (rc) {
        fuse_log(FUSE_LOG_ERR, "ckptfs: %s\n", err.msg);
        return -EIO;
    }
    /* Its directories show the bits of the directory scanned: a link or
     * directory on its path replaced since must not lend them to another
     * (the next scan sees the new one, with its own). */
    struct stat dst;
    if (ckpt_reader_file_stat(r, ".", &dst, NULL) != 0 ||
        !access_same_dir(&c->dir_seen, &dst)) {
        fuse_log(FUSE_LOG_ERR, "ckptfs: %s: not opened: it is no longer "
                 "the directory the root scan found\n", c->path);
        ckpt_reader_close(r);
        return -EIO;
    }
    views_blob *blobs = NULL;
    views_st *st = NULL;
    rc = views_bytesio(r, &blobs);
    if (rc == 0 && (rc = views_st_build(r, s->st_shard, &st)) != 0)
        views_blobs_free(blobs, ckpt_reader_count(r));
    if (rc == 0)
        rc = tree_build(&t, r, blobs, st, tree_warning, c);
    if (rc) {
        fuse_log(FUSE_LOG_ERR, "ckptfs: %s: cannot list its tensors: %s\n",
                 c->path, strerror(-rc));
        ckpt_reader_close(r);
        return -EIO;
    }
    c->reader = r;
    c->tree = t;
    atomic_store_explicit(&c->ready, 1, memory_order_release);
    return 0;
}

int source_ckpt_open(fs_source *s, fs_ckpt *c)
{
    if (atomic_load_explicit(&c->ready, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&c->mu);
    int rc = atomic_load_explicit(&c->ready, memory_order_relaxed)
                 ? 0 : ckpt_open_locked(s, c);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void source_set_st_shard(fs_source *s, uint64_t max_bytes)
{
    s->st_shard = max_bytes;
}

int source_ckpt_json(fs_ckpt *c, const char **data, size_t *len)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (!c->json)
        rc = views_metadata_json(c->reader, &c->json, &c->json_len);
    *data = c->json;
    *len = c->json_len;
    pthread_mutex_unlock(&c->mu);
    return rc;
}
