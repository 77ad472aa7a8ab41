/*
 * wsave.c - saves in progress served by a writable mount: namespace,
 * piece attributes, the writer pool and open pieces, and the commit
 * (see wsave.h).
 *
 * Locking: each save's `mu` guards its nodes, attributes, writer pool and
 * state; a file's own stream calls run without it (each open piece owns a
 * writer while it streams).  The set's `mu` guards the save table.
 */
#include "wsave.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fuse3/fuse_log.h>

#include "common/error.h"
#include "common/fileio.h"
#include "format/claim.h"
#include "format/lease.h"
#include "format/pending.h"
#include "names.h"
#include "pattr.h"
#include "rendezvous.h"
#include "common/shape.h"
#include "write/writer.h"
#include "wlimits.h"
#include "wrank.h"
#include "wbase.h"
#include "wattempt.h"
#include "write/supersede.h"

#define META_PREFIX "user.ckpt.meta."
#define RANK_ATTR "user.ckpt.rank"
#define BASE_ATTR "user.ckpt.base"
#define ERROR_ATTR "user.ckpt.error"
/* rank<R>, then rank<R>-2 ... when another mount or process has it */
#define RANK_NAME_TRIES 64
#define TENSOR_SUFFIX ".tensor"
#define NAME_MAX_LEN 255
#define HASH_EMPTY UINT32_MAX

/* Attributes one process set on a file. */
typedef struct overlay {
    struct overlay *next;
    pid_t pid;
    pattr a;
} overlay;

typedef struct ws_node {
    char *name;
    uint32_t parent;
    uint32_t hnext;            /* next in its hash bucket */
    uint8_t kind;              /* ws_kind */
    uint32_t *kids;            /* WS_DIR: children, creation order */
    uint32_t nkids, capkids, nsubdirs;
    uint64_t size;             /* WS_FILE: largest piece received */
    pattr shared;              /* WS_FILE: the last values anyone set */
    overlay *own;              /* WS_FILE: per process */
    struct timespec mtime;
    uint8_t declared;          /* WS_FILE: declared in a plan by this mount */
    char *error;               /* WS_FILE: why its last piece or attribute
                                  was refused (user.ckpt.error) */
} ws_node;

/* A writer of this mount, the rank it writes for (-1: not known) and its
 * name (its shard is data/<name>.shard). */
typedef struct pooled {
    ckpt_writer *wr;
    int rank;
    int retired;               /* its rank ran again: never taken again */
    char name[160];
} pooled;

typedef struct kv {
    char *key, *value;
} kv;

struct ws_save {
    ws_set *set;
    uint32_t id;
    char *name;
    char *path;
    pthread_mutex_t mu;
    ws_node *nodes;
    uint32_t n, cap;
    uint32_t *buckets;         /* hash of (parent, name) */
    uint32_t nbuckets;
    ckpt_writer **idle;        /* writers between pieces */
    size_t nidle, capidle;
    pooled *all;               /* every writer open, idle or streaming */
    size_t nall, capall;
    unsigned next_writer;
    int committed;
    int gone;                  /* its directory vanished (gc removed it) */
    int failed;                /* its last commit was refused: not held */
    struct stat refusal;       /* .pending/failed when the lease was taken
                                  (st_ino 0: there was none) */
    ckpt_lease *lease;         /* from this mount's first write to the commit */
    kv *meta;                  /* user.ckpt.meta.* set through this mount */
    size_t nmeta;
    char *base;                /* a delta save's base (root/NAME), from
                                  user.ckpt.base or -o delta=latest; NULL:
                                  whole */
    int base_chosen;           /* base is settled: named, or a writer
                                  opened */
    size_t meta_bytes;         /* of their keys and values */
    uid_t creator;             /* who started it through this mount
                                  (-1: joined from the disk) */
    wa_table *attempts;        /* who wrote what through this mount */
};

struct ws_set {
    char *root;
    int world;
    int delta_latest;          /* -o delta=latest */
    ckpt_write_opts wo;
    char prefix[96];           /* writer names of unknown ranks:
                                  <prefix>-<k>; errors.<prefix> notes */
    wrank_table *ranks;        /* the rank of each writing process */
    ws_limits lim;
    wl_counts *open_pieces;    /* per user */
    ckpt_heartbeat *beats;     /* of every lease this mount holds */
    pthread_mutex_t mu;
    ws_save **v;               /* by id - 1 */
    size_t n, cap;
    /* The watch: a thread that drops this mount's lease of a save whose
     * commit another mount's rank saw refused (started with the first
     * lease, stopped by ws_set_free). */
    pthread_t watch;
    int watching, stop;
    pthread_cond_t wake;       /* CLOCK_MONOTONIC, with mu */
};

struct ws_file {
    ws_save *w;
    uint32_t node;
    pid_t opener;
    uid_t uid;                 /* the opener's user, counted in
                                  open_pieces */
    char *fqn;
    pattr_piece piece;
    uint64_t bound;            /* bytes the piece may hold at most */
    uint64_t received;
    ckpt_writer *writer;       /* while streaming */
    ckpt_stream *stream;
    char who[160];             /* the writer's name, for messages */
    pid_t starter;             /* the process that began the piece */
    int rank;                  /* its rank (-1: not known) */
    int started, done;
    int rc;                    /* the piece's error, sticky */
    ckpt_error err;
    pthread_mutex_t mu;        /* the above: descriptors of the open file
                                  in several processes write and close at
                                  once */
};

/* ------------------------------------------------------------ nodes */

static uint32_t hash_key(uint32_t parent, const char *name)
{
    uint32_t h = 2166136261u ^ parent;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

static int rehash(ws_save *w, uint32_t nb)
{
    uint32_t *b = malloc(nb * sizeof *b);
    if (!b)
        return -ENOMEM;
    for (uint32_t i = 0; i < nb; i++)
        b[i] = HASH_EMPTY;
    for (uint32_t i = 1; i < w->n; i++) {
        uint32_t h = hash_key(w->nodes[i].parent, w->nodes[i].name) % nb;
        w->nodes[i].hnext = b[h];
        b[h] = i;
    }
    free(w->buckets);
    w->buckets = b;
    w->nbuckets = nb;
    return 0;
}

static long find_child(const ws_save *w, uint32_t dir, const char *name)
{
    uint32_t h = hash_key(dir, name) % w->nbuckets;
    for (uint32_t i = w->buckets[h]; i != HASH_EMPTY; i = w->nodes[i].hnext)
        if (w->nodes[i].parent == dir && strcmp(w->nodes[i].name, name) == 0)
            return i;
    return -ENOENT;
}

/* Adds node `name` of kind under dir (which must be a directory). */
static long add_node(ws_save *w, uint32_t dir, const char *name,
                     ws_kind kind)
{
    if (w->n == UINT32_MAX - 1)
        return -EOVERFLOW;
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 64;
        ws_node *v = realloc(w->nodes, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        w->nodes = v;
        w->cap = cap;
    }
    ws_node *d = &w->nodes[dir];
    if (w->n > 0 && d->nkids == d->capkids) {
        uint32_t cap = d->capkids ? d->capkids * 2 : 8;
        uint32_t *k = realloc(d->kids, cap * sizeof *k);
        if (!k)
            return -ENOMEM;
        d->kids = k;
        d->capkids = cap;
    }
    ws_node *x = &w->nodes[w->n];
    memset(x, 0, sizeof *x);
    if (!(x->name = strdup(name)))
        return -ENOMEM;
    x->parent = w->n ? dir : 0;
    x->kind = (uint8_t)kind;
    clock_gettime(CLOCK_REALTIME, &x->mtime);
    uint32_t id = w->n++;
    if (id == 0)
        return 0;
    d = &w->nodes[dir];
    d->kids[d->nkids++] = id;
    if (kind == WS_DIR)
        d->nsubdirs++;
    d->mtime = x->mtime;
    uint32_t h = hash_key(dir, name) % w->nbuckets;
    x->hnext = w->buckets[h];
    w->buckets[h] = id;
    if (w->n > w->nbuckets * 2)
        (void)rehash(w, w->nbuckets * 4);   /* if not: only slower */
    return id;
}

static void node_clear(ws_node *x)
{
    free(x->name);
    free(x->kids);
    free(x->error);
    while (x->own) {
        overlay *o = x->own;
        x->own = o->next;
        free(o);
    }
}

/* ------------------------------------------------------------ saves */

static void save_free(ws_save *w)
{
    for (size_t i = 0; i < w->nidle; i++)
        ckpt_writer_abort(w->idle[i]);
    ckpt_lease_drop(w->lease);
    free(w->idle);
    free(w->all);
    for (size_t i = 0; i < w->nmeta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->meta);
    free(w->base);
    wa_free(w->attempts);
    for (uint32_t i = 0; i < w->n; i++)
        node_clear(&w->nodes[i]);
    free(w->nodes);
    free(w->buckets);
    pthread_mutex_destroy(&w->mu);
    free(w->name);
    free(w->path);
    free(w);
}

static ws_save *save_new(ws_set *s, const char *name, const char *path)
{
    ws_save *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_mutex_init(&w->mu, NULL);
    w->set = s;
    w->creator = (uid_t)-1;
    w->name = strdup(name);
    w->path = strdup(path);
    int ok = w->name && w->path && wa_new(&w->attempts) == 0 &&
             rehash(w, 64) == 0;
    ok = ok && add_node(w, 0, "", WS_DIR) == 0;
    long ctl = ok ? add_node(w, WS_ROOT, ".ckptfs", WS_DIR) : -1;
    ok = ctl > 0 && add_node(w, (uint32_t)ctl, "commit", WS_COMMIT) > 0 &&
         add_node(w, (uint32_t)ctl, "status", WS_STATUS) > 0 &&
         add_node(w, (uint32_t)ctl, "errors", WS_ERRORS) > 0;
    if (!ok) {
        save_free(w);
        return NULL;
    }
    return w;
}

/* A name a checkpoint directory may have. */
static int check_save_name(const char *name, ckpt_error *err)
{
    size_t n = strlen(name);
    if (n == 0 || n > NAME_MAX_LEN || name[0] == '.' ||
        strcmp(name, "latest") == 0 || strchr(name, '/'))
        return ckpt_err(err, -EINVAL, "'%s' cannot name a checkpoint (not "
                        "empty, not 'latest', no leading '.')", name);
    return 0;
}

/* 1 when root/name is a save in progress (has .pending/, and no index.db
 * or one its committer may still withdraw)
 * that this mount may join: a directory, not a link, whose .pending/
 * belongs to the user the daemon runs as (docs/TRUST.md, "A shared
 * root": another user's save is not served for writing). */
static int on_disk_pending(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) ||
        ckpt_claim_settled(path))
        return 0;
    int pfd = ckpt_pending_open(path, 1, NULL);
    if (pfd < 0)
        return 0;
    close(pfd);
    return 1;
}

/* Adds a save object for root/name (under s->mu). */
static ws_save *set_add(ws_set *s, const char *name, const char *path)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        ws_save **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return NULL;
        s->v = v;
        s->cap = cap;
    }
    ws_save *w = save_new(s, name, path);
    if (!w)
        return NULL;
    w->id = (uint32_t)s->n + 1;
    s->v[s->n++] = w;
    return w;
}

/* 1 once w's directory has vanished while it was not committed: a gc
 * removed a save that this mount had only looked at (it holds no lease on
 * it).  Such a save is forgotten for good; the name can be saved again. */
static int save_gone(ws_save *w)
{
    pthread_mutex_lock(&w->mu);
    struct stat st;
    if (!w->gone && !w->committed && stat(w->path, &st) != 0 &&
        errno == ENOENT)
        w->gone = 1;
    int gone = w->gone;
    pthread_mutex_unlock(&w->mu);
    return gone;
}

/* The save `name` not yet committed, or else (when `committed`) the
 * latest one that was; NULL if none (under s->mu).  A name can be saved
 * again once its checkpoint is deleted: that is a new save object. */
static ws_save *set_find_locked(ws_set *s, const char *name, int committed)
{
    for (size_t i = s->n; i-- > 0;)
        if (strcmp(s->v[i]->name, name) == 0 && !save_gone(s->v[i]) &&
            (committed || !ws_save_committed(s->v[i])))
            return s->v[i];
    return NULL;
}

int ws_set_new(ws_set **out, const char *root, int world,
               const ckpt_write_opts *wo, const ws_limits *lim,
               ckpt_error *err)
{
    *out = NULL;
    ws_set *s = calloc(1, sizeof *s);
    if (!s || !(s->root = strdup(root)) || wrank_new(&s->ranks) != 0 ||
        wl_counts_new(&s->open_pieces) != 0) {
        if (s) {
            free(s->root);
            wrank_free(s->ranks);
        }
        free(s);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    int rc = ckpt_heartbeat_new(&s->beats, CKPT_LEASE_BEAT_MS, err);
    if (rc) {
        wl_counts_free(s->open_pieces);
        wrank_free(s->ranks);
        free(s->root);
        free(s);
        return rc;
    }
    if (lim)
        s->lim = *lim;
    else
        wl_limits_default(&s->lim);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    s->world = world;
    s->wo = *wo;
    /* Unique among mounts sharing the root: host, process, start time. */
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-')
            *p = '_';
    host[40] = '\0';
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(s->prefix, sizeof s->prefix, "%s-%ld-%06lx", host,
             (long)getpid(),
             (unsigned long)((now.tv_sec * 1000003L + now.tv_nsec) &
                             0xffffff));
    *out = s;
    return 0;
}

void ws_set_delta_latest(ws_set *s)
{
    s->delta_latest = 1;
}

void ws_set_free(ws_set *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->wake);
    int watching = s->watching;
    pthread_mutex_unlock(&s->mu);
    if (watching)
        pthread_join(s->watch, NULL);
    pthread_cond_destroy(&s->wake);
    for (size_t i = 0; i < s->n; i++)
        save_free(s->v[i]);
    free(s->v);
    ckpt_heartbeat_free(s->beats);   /* every lease is dropped now */
    wl_counts_free(s->open_pieces);
    pthread_mutex_destroy(&s->mu);
    wrank_free(s->ranks);
    free(s->root);
    free(s);
}

int ws_set_world(const ws_set *s)
{
    return s->world;
}

ws_save *ws_set_find(ws_set *s, const char *name)
{
    if (check_save_name(name, NULL) != 0)
        return NULL;
    pthread_mutex_lock(&s->mu);
    ws_save *w = set_find_locked(s, name, 0);
    if (!w) {
        char path[4096];
        if (ckpt_path_join(path, sizeof path, s->root, name, NULL) == 0 &&
            on_disk_pending(path))
            w = set_add(s, name, path);
    }
    if (!w)      /* just committed: the caller rescans the root */
        w = set_find_locked(s, name, 1);
    pthread_mutex_unlock(&s->mu);
    return w;
}

static int hold_lease(ws_save *w, ckpt_error *err);
static void start_watch(ws_set *s);

int ws_join(ws_save *w, pid_t pid, ckpt_error *err)
{
    if (wrank_of(w->set->ranks, pid, w->set->world) < 0)
        return 0;       /* a reader, `ls`: not one of the save's writers */
    return hold_lease(w, err);
}

/* Makes root/name with its data/ and .pending/ in one step, so that
 * another mount never sees the directory without .pending/ (it would not
 * know it for a save): built aside under a hidden name, then renamed into
 * place.  -EEXIST when root/name exists. */
static int make_save_dir(ws_set *s, const char *name, const char *path,
                         const access_owner *owner, ckpt_lease **lease,
                         ckpt_error *err)
{
    char tmp[4096], sub[4200];
    ckpt_error le = { 0 };
    *lease = NULL;
    char comp[256];
    ckpt_new_name(comp, sizeof comp, s->prefix, name);
    int n = snprintf(tmp, sizeof tmp, "%s/%s", s->root, comp);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return ckpt_err(err, -ENAMETOOLONG, "%s: name too long", path);
    int rc = mkdir(tmp, 0755) == 0 ? 0 : -errno;
    snprintf(sub, sizeof sub, "%s/.pending", tmp);
    if (rc == 0 && mkdir(sub, 0755) != 0)
        rc = -errno;
    snprintf(sub, sizeof sub, "%s/data", tmp);
    if (rc == 0 && mkdir(sub, 0755) != 0)
        rc = -errno;
    /* The save is its maker's, as the directory they made would be. */
    if (rc == 0 && owner && access_give_dir(tmp, owner, &le) != 0)
        rc = le.code;
    /* Leased before it appears: no gc takes it in between. */
    if (rc == 0 && ckpt_lease_take_on(lease, tmp, s->beats, &le))
        rc = le.code;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = errno == ENOTEMPTY ? -EEXIST : -errno;
    if (rc == 0)
        return 0;
    ckpt_lease_drop(*lease);
    *lease = NULL;
    ckpt_remove_tree(tmp, NULL);
    return ckpt_err(err, rc, "cannot create %s: %s", path,
                    le.msg[0] ? le.msg : strerror(-rc));
}

/* The saves in progress that uid started through this mount (under
 * s->mu). */
static size_t saves_of(ws_set *s, uid_t uid)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i]->creator == uid && !save_gone(s->v[i]) &&
            !ws_save_committed(s->v[i]))
            n++;
    return n;
}

int ws_set_create(ws_set *s, const char *name, const access_owner *owner,
                  ws_save **out, ckpt_error *err)
{
    *out = NULL;
    char path[4096];
    int rc = check_save_name(name, err);
    if (rc == 0)
        rc = ckpt_path_join(path, sizeof path, s->root, name, err);
    if (rc)
        return rc;
    ckpt_lease *lease = NULL;
    uid_t uid = owner ? owner->uid : geteuid();
    pthread_mutex_lock(&s->mu);
    ws_save *w = set_find_locked(s, name, 0);
    if (w) {
        *out = w;
        rc = -EEXIST;
    } else if (saves_of(s, uid) >= s->lim.max_saves) {
        rc = ckpt_err(err, -EDQUOT, "%s: user %ld has %zu saves in progress "
                      "through this mount already (-o max_saves=%zu): "
                      "commit or remove one first", path, (long)uid,
                      s->lim.max_saves, s->lim.max_saves);
    } else {
        rc = make_save_dir(s, name, path, owner, &lease, err);
        if (rc == 0 || (rc == -EEXIST && on_disk_pending(path)))
            *out = set_add(s, name, path);
        if (rc == 0 && !*out)
            rc = ckpt_err(err, -ENOMEM, "out of memory");
        if (rc == 0) {
            (*out)->lease = lease;
            (*out)->creator = uid;
            lease = NULL;
        }
    }
    pthread_mutex_unlock(&s->mu);
    ckpt_lease_drop(lease);
    if (rc == 0)
        start_watch(s);
    /* mkdir answered EEXIST: this mount joins the save and holds its lease
     * from now on, as its maker does, so that gc keeps the save while
     * this mount's ranks have yet to write. */
    ckpt_error le = { 0 };
    if (rc == -EEXIST && *out && hold_lease(*out, &le) != 0)
        fuse_log(FUSE_LOG_ERR, "ckptfs: %s: cannot hold the lease of the "
                 "save this mount joins: %s\n", path, le.msg);
    return rc;
}

ws_save *ws_set_by_id(ws_set *s, uint32_t id)
{
    pthread_mutex_lock(&s->mu);
    ws_save *w = id >= 1 && id <= s->n ? s->v[id - 1] : NULL;
    pthread_mutex_unlock(&s->mu);
    return w;
}

int ws_set_list(ws_set *s, ws_save ***out, size_t *n)
{
    pthread_mutex_lock(&s->mu);
    *out = malloc((s->n ? s->n : 1) * sizeof **out);
    *n = 0;
    for (size_t i = 0; *out && i < s->n; i++)
        if (!save_gone(s->v[i]) && !ws_save_committed(s->v[i]))
            (*out)[(*n)++] = s->v[i];
    pthread_mutex_unlock(&s->mu);
    return *out ? 0 : -ENOMEM;
}

uint32_t ws_save_id(const ws_save *w)
{
    return w->id;
}

const char *ws_save_name(const ws_save *w)
{
    return w->name;
}

/* Takes wr off the list of open writers (under mu). */
static void forget_writer(ws_save *w, ckpt_writer *wr)
{
    for (size_t i = 0; i < w->nall; i++)
        if (w->all[i].wr == wr) {
            w->all[i] = w->all[--w->nall];
            return;
        }
}

/* Drops the idle writers (under mu): their plans are history. */
static void drop_idle(ws_save *w)
{
    for (size_t i = 0; i < w->nidle; i++) {
        forget_writer(w, w->idle[i]);
        ckpt_writer_abort(w->idle[i]);
    }
    w->nidle = 0;
}

/* 1 when path/index.db exists: what ckpt_dir_probe calls committed, in
 * one system call instead of its three (asked on every request). */
static int has_index(const char *path)
{
    char p[4096];
    struct stat st;
    return ckpt_path_join(p, sizeof p, path, "index.db", NULL) == 0 &&
           lstat(p, &st) == 0;
}

int ws_save_committed(ws_save *w)
{
    pthread_mutex_lock(&w->mu);
    int c = w->committed;
    if (!c) {
        /* Committed once index.db is durable: while its committer may
         * still withdraw it, the save stays a save ("committing").  One
         * lstat while there is no index.db (asked on every request). */
        c = has_index(w->path) && ckpt_claim_committed(w->path) == 1;
        if (c) {
            w->committed = 1;
            wa_forget(w->attempts);
            drop_idle(w);
            ckpt_lease_drop(w->lease);
            w->lease = NULL;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return c;
}

/* ------------------------------------------------------------ names */

int ws_lookup(ws_save *w, uint32_t dir, const char *name, uint32_t *node)
{
    pthread_mutex_lock(&w->mu);
    long i = dir >= w->n ? -ESTALE
             : w->nodes[dir].kind != WS_DIR ? -ENOTDIR
             : find_child(w, dir, name);
    pthread_mutex_unlock(&w->mu);
    if (i < 0)
        return (int)i;
    *node = (uint32_t)i;
    return 0;
}

int ws_stat_node(ws_save *w, uint32_t node, ws_stat *st)
{
    pthread_mutex_lock(&w->mu);
    int rc = node < w->n ? 0 : -ESTALE;
    if (rc == 0) {
        const ws_node *x = &w->nodes[node];
        *st = (ws_stat){ .kind = (ws_kind)x->kind, .size = x->size,
                         .nsubdirs = x->nsubdirs, .mtime = x->mtime };
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int ws_child_at(ws_save *w, uint32_t dir, size_t k, uint32_t *node,
                char *name, size_t cap)
{
    pthread_mutex_lock(&w->mu);
    int rc = dir >= w->n ? -ESTALE
             : w->nodes[dir].kind != WS_DIR ? -ENOTDIR
             : k >= w->nodes[dir].nkids ? 1 : 0;
    if (rc == 0) {
        *node = w->nodes[dir].kids[k];
        snprintf(name, cap, "%s", w->nodes[*node].name);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

uint32_t ws_parent(ws_save *w, uint32_t node)
{
    pthread_mutex_lock(&w->mu);
    uint32_t p = node < w->n ? w->nodes[node].parent : 0;
    pthread_mutex_unlock(&w->mu);
    return p;
}

/* Path of node into out (under mu). */
static int path_locked(const ws_save *w, uint32_t node, char *out,
                       size_t cap)
{
    if (node == WS_ROOT || node >= w->n) {
        if (cap)
            out[0] = '\0';
        return 0;
    }
    const ws_node *x = &w->nodes[node];
    int n = path_locked(w, x->parent, out, cap);
    size_t at = (size_t)n < cap ? (size_t)n : cap;
    int m = snprintf(out + at, cap - at, "%s%s", n ? "/" : "", x->name);
    return n + m;
}

int ws_path(ws_save *w, uint32_t node, char *out, size_t cap)
{
    pthread_mutex_lock(&w->mu);
    int n = path_locked(w, node, out, cap);
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* A component a tensor path may have: an escaped FQN component, plus
 * ".tensor" for a file. */
static int check_component(const char *name, int is_file, ckpt_error *err)
{
    char buf[NAME_MAX_LEN + 1], dec[NAME_MAX_LEN + 1];
    size_t n = strlen(name), sl = strlen(TENSOR_SUFFIX);
    if (n > NAME_MAX_LEN)
        return ckpt_err(err, -ENAMETOOLONG, "'%s' is too long", name);
    memcpy(buf, name, n + 1);
    if (is_file && n > sl && strcmp(buf + n - sl, TENSOR_SUFFIX) == 0)
        buf[n - sl] = '\0';
    if (names_unescape(buf, dec, sizeof dec) < 0)
        return ckpt_err(err, -EINVAL, "'%s' is not a name a tensor path may "
                        "hold: no '.' (FQN a.b.c is the file a/b/c), '%%XX' "
                        "escapes as docs/MOUNT.md says", name);
    return 0;
}

static int make_node(ws_save *w, uint32_t dir, const char *name, ws_kind k,
                     uint32_t *node, int *created, ckpt_error *err)
{
    if (created)
        *created = 0;
    int rc = check_component(name, k == WS_FILE, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&w->mu);
    long i = dir >= w->n ? -ESTALE
             : w->nodes[dir].kind != WS_DIR ? -ENOTDIR
             : find_child(w, dir, name);
    int inside_ctl = dir != WS_ROOT && dir < w->n &&
                     w->nodes[dir].parent == WS_ROOT &&
                     strcmp(w->nodes[dir].name, ".ckptfs") == 0;
    if (inside_ctl)
        rc = ckpt_err(err, -EACCES, ".ckptfs holds only commit and status");
    else if (w->committed)
        rc = ckpt_err(err, -EROFS, "%s is committed: it is read-only",
                      w->path);
    else if (i >= 0 && (k == WS_DIR || w->nodes[i].kind != WS_FILE))
        rc = ckpt_err(err, -EEXIST, "'%s' exists", name);
    else if (i >= 0)
        *node = (uint32_t)i;
    else if (i != -ENOENT)
        rc = (int)i;
    else if ((i = add_node(w, dir, name, k)) < 0)
        rc = ckpt_err(err, (int)i, "out of memory");
    else if ((*node = (uint32_t)i), created)
        *created = 1;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int ws_mkdir(ws_save *w, uint32_t dir, const char *name, uint32_t *node,
             ckpt_error *err)
{
    return make_node(w, dir, name, WS_DIR, node, NULL, err);
}

static int declare_once(ws_save *w, uint32_t node, pid_t pid,
                        ckpt_error *err);

int ws_mkfile(ws_save *w, uint32_t dir, const char *name, pid_t pid,
              uint32_t *node, int *created, ckpt_error *err)
{
    int rc = make_node(w, dir, name, WS_FILE, node, created, err);
    return rc ? rc : declare_once(w, *node, pid, err);
}

/* The FQN of file node (under mu): its path with ".tensor" dropped. */
static int fqn_locked(const ws_save *w, uint32_t node, char **out,
                      ckpt_error *err)
{
    char path[8192], fqn[8192];
    int n = path_locked(w, node, path, sizeof path);
    size_t sl = strlen(TENSOR_SUFFIX);
    if (n < 0 || (size_t)n >= sizeof path)
        return ckpt_err(err, -ENAMETOOLONG, "path too long");
    if ((size_t)n > sl && strcmp(path + n - sl, TENSOR_SUFFIX) == 0)
        path[n - sl] = '\0';
    ssize_t m = names_path_to_fqn(path, fqn, sizeof fqn);
    if (m < 0)
        return ckpt_err(err, (int)m, "'%s' is not a tensor path", path);
    if (!(*out = strdup(fqn)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    return 0;
}

/* ------------------------------------------------------------ attributes */

static overlay *own_attrs(ws_node *x, pid_t pid)
{
    for (overlay *o = x->own; o; o = o->next)
        if (o->pid == pid)
            return o;
    return NULL;
}

/* The attributes a piece written by pid takes (under mu). */
static const pattr *attrs_for(ws_node *x, pid_t pid, pid_t opener)
{
    overlay *o = own_attrs(x, pid);
    if (!o)
        o = own_attrs(x, opener);
    return o ? &o->a : x->shared.set ? &x->shared : NULL;
}

static void drop_own(ws_node *x, const pattr *a)
{
    for (overlay **p = &x->own; *p; p = &(*p)->next)
        if (&(*p)->a == a) {
            overlay *o = *p;
            *p = o->next;
            free(o);
            return;
        }
}

/* Keeps a meta key in a writer's plan: any idle writer (or a new one)
 * carries it to the commit. */
static int take_writer(ws_save *w, pid_t pid, ckpt_writer **out,
                       char *name, size_t cap, ckpt_error *err);
static void give_writer(ws_save *w, ckpt_writer *wr, int ok);

static int meta_value(ws_save *w, const char *key, char *buf, size_t cap)
{
    pthread_mutex_lock(&w->mu);
    int rc = -ENODATA;
    for (size_t i = 0; i < w->nmeta; i++)
        if (strcmp(w->meta[i].key, key) == 0)
            rc = snprintf(buf, cap, "%s", w->meta[i].value);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* Keeps key=value for getxattr (the plans hold what commits). */
static int remember_meta(ws_save *w, const char *key, const char *value,
                         ckpt_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&w->mu);
    size_t i = 0;
    while (i < w->nmeta && strcmp(w->meta[i].key, key) != 0)
        i++;
    char *val = strdup(value);
    if (!val) {
        rc = -ENOMEM;
    } else if (i < w->nmeta) {
        free(w->meta[i].value);
        w->meta[i].value = val;
    } else {
        kv *v = realloc(w->meta, (i + 1) * sizeof *v);
        char *k = strdup(key);
        if (v)
            w->meta = v;
        if (!v || !k) {
            free(k);
            free(val);
            rc = -ENOMEM;
        } else {
            v[i] = (kv){ k, val };
            w->nmeta++;
            w->meta_bytes += strlen(k) + strlen(val);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc ? ckpt_err(err, rc, "out of memory") : 0;
}

/* -ENOSPC when one more key of len bytes would pass the save's bounds
 * (-o max_meta_keys, max_meta_bytes). */
static int meta_room(ws_save *w, const char *key, size_t len,
                     ckpt_error *err)
{
    pthread_mutex_lock(&w->mu);
    size_t keys = w->nmeta, bytes = w->meta_bytes;
    pthread_mutex_unlock(&w->mu);
    const ws_limits *l = &w->set->lim;
    if (keys >= l->max_meta_keys)
        return ckpt_err(err, -ENOSPC, "user.ckpt.meta.%s: the save has %zu "
                        "metadata keys, the most it may have (-o "
                        "max_meta_keys=%zu)", key, keys, l->max_meta_keys);
    if (bytes + strlen(key) + len > l->max_meta_bytes)
        return ckpt_err(err, -ENOSPC, "user.ckpt.meta.%s: the save's "
                        "metadata would pass %zu bytes (-o max_meta_bytes)",
                        key, l->max_meta_bytes);
    return 0;
}

static int set_meta(ws_save *w, pid_t pid, const char *key,
                    const char *value, size_t len, ckpt_error *err)
{
    char v[1024];
    if (len >= sizeof v || memchr(value, '\0', len))
        return ckpt_err(err, -EINVAL, "user.ckpt.meta.%s: the value must be "
                        "text of less than %zu bytes", key, sizeof v);
    memcpy(v, value, len);
    v[len] = '\0';
    char have[1024];
    int n = meta_value(w, key, have, sizeof have);
    if (n >= 0)   /* in a writer's plan already: it cannot change */
        return strcmp(have, v) == 0 ? 0 :
            ckpt_err(err, -EINVAL, "user.ckpt.meta.%s is '%s' already; a "
                     "key keeps its first value", key, have);
    int rc = meta_room(w, key, len, err);
    if (rc)
        return rc;
    ckpt_writer *wr;
    rc = take_writer(w, pid, &wr, NULL, 0, err);
    if (rc)
        return rc;
    rc = ckpt_writer_set_meta(wr, key, v, err);
    if (rc == 0)
        rc = ckpt_writer_flush(wr, err);
    give_writer(w, wr, rc == 0);
    return rc ? rc : remember_meta(w, key, v, err);
}

/* user.ckpt.rank on the save's directory: pid's rank, for all saves. */
static int set_rank(ws_save *w, pid_t pid, const char *value, size_t len,
                    ckpt_error *err)
{
    int rank, world = w->set->world;
    if (wrank_parse(value, len, world, &rank) != 0)
        return ckpt_err(err, -EINVAL, RANK_ATTR " '%.*s': a rank from 0 to "
                        "%d (the mount's world=%d)", (int)(len < 40 ? len
                        : 40), value, world - 1, world);
    if (wrank_set(w->set->ranks, pid, rank))
        return ckpt_err(err, -ENOMEM, "out of memory");
    /* A rank set on a save joins it: its lease is held from now on. */
    return hold_lease(w, err);
}

/* user.ckpt.base on the save's directory: the checkpoint of the root the
 * save is a delta against (empty: none, a whole save even with -o
 * delta=latest).  Settled once set or once the save's first writer opens
 * here; setting it again to the same base is a no-op. */
static int set_base(ws_save *w, const char *value, size_t len,
                    ckpt_error *err)
{
    char *path;
    int rc = wbase_named(w->set->root, w->name, value, len, &path, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&w->mu);
    if (!w->base_chosen) {
        w->base = path;
        w->base_chosen = 1;
        path = NULL;
    } else if (!path != !w->base || (path && strcmp(path, w->base))) {
        const char *have = w->base ? strrchr(w->base, '/') + 1 : NULL;
        rc = ckpt_err(err, -EINVAL, BASE_ATTR " '%.*s': the save's base is "
                      "settled already (%s%s%s): it is set before the "
                      "save's first piece or metadata", (int)len, value,
                      have ? "'" : "", have ? have : "none, a whole save",
                      have ? "'" : "");
    }
    pthread_mutex_unlock(&w->mu);
    free(path);
    return rc;
}

/* Keeps why an attribute or piece of file node was refused (its
 * user.ckpt.error) and notes it in .ckptfs/errors, by `by`. */
static void note_refusal(ws_save *w, uint32_t node, const char *by,
                         const char *why)
{
    char path[4096];
    char *copy = strdup(why);
    pthread_mutex_lock(&w->mu);
    if (copy && node < w->n) {
        free(w->nodes[node].error);
        w->nodes[node].error = copy;
        copy = NULL;
    }
    path_locked(w, node, path, sizeof path);
    pthread_mutex_unlock(&w->mu);
    free(copy);
    rdv_note_error(w->path, w->set->prefix, path, by, why);
}

static int set_piece_attr(ws_save *w, uint32_t node, pid_t pid,
                          unsigned key, const char *name, const char *value,
                          size_t len, ckpt_error *err);

int ws_setxattr(ws_save *w, uint32_t node, pid_t pid, const char *name,
                const char *value, size_t len, ckpt_error *err)
{
    size_t pl = strlen(META_PREFIX);
    if (node == WS_ROOT && strncmp(name, META_PREFIX, pl) == 0 &&
        name[pl])
        return set_meta(w, pid, name + pl, value, len, err);
    if (node == WS_ROOT && strcmp(name, RANK_ATTR) == 0)
        return set_rank(w, pid, value, len, err);
    if (node == WS_ROOT && strcmp(name, BASE_ATTR) == 0)
        return set_base(w, value, len, err);
    unsigned key = pattr_key(name);
    if (!key)
        return ckpt_err(err, -ENOTSUP, "attribute '%s' is not one ckptfs "
                        "keeps (user.ckpt.dtype, .shape, .offsets, .sizes, "
                        ".replica, or all in user.ckpt.piece; "
                        "user.ckpt.meta.KEY, user.ckpt.rank and "
                        "user.ckpt.base on the checkpoint)", name);
    ckpt_error e = { 0 };
    int rc = set_piece_attr(w, node, pid, key, name, value, len, &e);
    if (rc == -EINVAL) {
        char by[64];
        int r = wrank_of(w->set->ranks, pid, w->set->world);
        if (r >= 0)
            snprintf(by, sizeof by, "rank %d, process %ld", r, (long)pid);
        else
            snprintf(by, sizeof by, "process %ld", (long)pid);
        note_refusal(w, node, by, e.msg);
    }
    if (rc && err)
        *err = e;
    return rc;
}

static int set_piece_attr(ws_save *w, uint32_t node, pid_t pid,
                          unsigned key, const char *name, const char *value,
                          size_t len, ckpt_error *err)
{
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    ws_node *x = node < w->n ? &w->nodes[node] : NULL;
    if (!x || x->kind != WS_FILE)
        rc = ckpt_err(err, -ENOTSUP, "%s is set on tensor files only", name);
    overlay *o = rc ? NULL : own_attrs(x, pid);
    if (rc == 0 && !o) {
        if (!(o = calloc(1, sizeof *o))) {
            rc = ckpt_err(err, -ENOMEM, "out of memory");
        } else {
            o->pid = pid;
            o->next = x->own;
            x->own = o;
        }
    }
    if (rc == 0)
        rc = pattr_set(&o->a, key, value, len, err);
    /* The file's default follows, unless the value clashes there (two
     * processes' pieces of different ranks): then only pid's copy. */
    if (rc == 0)
        (void)pattr_set(&x->shared, key, value, len, NULL);
    pthread_mutex_unlock(&w->mu);
    return rc ? rc : declare_once(w, node, pid, err);
}

int ws_getxattr(ws_save *w, uint32_t node, pid_t pid, const char *name,
                char *buf, size_t cap)
{
    if (node == WS_ROOT && strncmp(name, META_PREFIX,
                                   strlen(META_PREFIX)) == 0)
        return meta_value(w, name + strlen(META_PREFIX), buf, cap);
    if (node == WS_ROOT && strcmp(name, RANK_ATTR) == 0) {
        int r = wrank_of(w->set->ranks, pid, w->set->world);
        return r >= 0 ? snprintf(buf, cap, "%d", r) : -ENODATA;
    }
    if (node == WS_ROOT && strcmp(name, BASE_ATTR) == 0) {
        pthread_mutex_lock(&w->mu);
        int n = w->base ? snprintf(buf, cap, "%s", strrchr(w->base, '/') + 1)
                        : -ENODATA;
        pthread_mutex_unlock(&w->mu);
        return n;
    }
    if (strcmp(name, ERROR_ATTR) == 0)
        return ws_piece_error(w, node, buf, cap);
    unsigned key = pattr_key(name);
    pthread_mutex_lock(&w->mu);
    ws_node *x = node < w->n ? &w->nodes[node] : NULL;
    int rc = -ENODATA;
    if (key && x && x->kind == WS_FILE) {
        const pattr *a = attrs_for(x, pid, pid);
        rc = a ? pattr_get(a, key, buf, cap) : -ENODATA;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int ws_listxattr(ws_save *w, uint32_t node, pid_t pid, char *buf,
                 size_t cap)
{
    size_t len = 0;
    pthread_mutex_lock(&w->mu);
    ws_node *x = node < w->n ? &w->nodes[node] : NULL;
    const pattr *a = x && x->kind == WS_FILE ? attrs_for(x, pid, pid) : NULL;
    for (unsigned i = 0; i <= PATTR_NKEYS; i++) {
        const char *nm = i < PATTR_NKEYS ? pattr_names[i] : ERROR_ATTR;
        if (i < PATTR_NKEYS ? !a || !(a->set & (1u << i))
                            : !x || !x->error)
            continue;
        size_t n = strlen(nm) + 1;
        if (len + n <= cap)
            memcpy(buf + len, nm, n);
        len += n;
    }
    pthread_mutex_unlock(&w->mu);
    return (int)len;
}

/* ------------------------------------------------------------ writers */

static void release_failed(ws_save *w);

/* stat of the save's .pending/failed (the last refusal's message). */
static int refusal_stat(const ws_save *w, struct stat *st)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/.pending/failed", w->path);
    return lstat(path, st);
}

/* A refusal this mount did not see when it took the save's lease: some
 * mount's rank completed the save and its commit was refused. */
static int refused_since(ws_save *w)
{
    struct stat now;
    if (refusal_stat(w, &now) != 0)
        return 0;
    pthread_mutex_lock(&w->mu);
    int held = w->lease != NULL;
    const struct stat *then = &w->refusal;
    int news = then->st_ino == 0 || then->st_ino != now.st_ino ||
               then->st_mtim.tv_sec != now.st_mtim.tv_sec ||
               then->st_mtim.tv_nsec != now.st_mtim.tv_nsec;
    pthread_mutex_unlock(&w->mu);
    return held && news;
}

#define WATCH_MS 1000

/* Every WATCH_MS: drops the lease of each save another mount saw refused
 * (a refused commit releases every mount's lease of it, so that gc may
 * remove the save at once). */
static void *watch_main(void *arg)
{
    ws_set *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_sec += WATCH_MS / 1000;
        pthread_cond_timedwait(&s->wake, &s->mu, &t);
        for (size_t i = 0; !s->stop && i < s->n; i++) {
            ws_save *w = s->v[i];
            pthread_mutex_unlock(&s->mu);     /* saves are never freed */
            if (refused_since(w))
                release_failed(w);
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void start_watch(ws_set *s)
{
    pthread_mutex_lock(&s->mu);
    if (!s->watching && !s->stop &&
        pthread_create(&s->watch, NULL, watch_main, s) == 0)
        s->watching = 1;
    pthread_mutex_unlock(&s->mu);
}

/* Before this mount takes the lease of a save it joins: when nobody
 * holds it, every writer so far is gone (killed, its mount unmounted),
 * and those writers are of an earlier attempt: each rank's new pieces
 * replace their overlapping ones (docs/MOUNT.md, "A rank runs again"). */
static void supersede_if_unheld(ws_save *w)
{
    int fd = -1, created = 0, n = 0;
    int rc = ckpt_lease_lock_exclusive(w->path, 0, &fd, &created, NULL);
    if (rc == 0 && fd >= 0)     /* held: -EBUSY; no locks: -ENOLCK */
        (void)rdv_supersede_all(w->path, &n, NULL);
    if (fd >= 0)
        close(fd);
    if (n == 0)
        return;
    char why[300];
    snprintf(why, sizeof why, "this mount joins a save that no writer "
             "holds (its writers are gone): the %d writer%s so far %s of "
             "an earlier attempt, and each rank's new pieces replace their "
             "pieces wherever they overlap", n, n == 1 ? "" : "s",
             n == 1 ? "is" : "are");
    fuse_log(FUSE_LOG_INFO, "ckptfs: %s: %s\n", w->path, why);
    char by[128];
    snprintf(by, sizeof by, "mount %s", w->set->prefix);
    rdv_note_error(w->path, w->set->prefix, w->name, by, why);
}

/* The refusal of a write to w once its .pending/ is gone although this
 * mount still took it for a save in progress: another node committed it
 * (this node's cached view of the directory lags: attribute and entry
 * caches of a network file system), or a gc removed it.  Nothing is made
 * inside: never a .pending/ in a committed checkpoint (issue #25). */
static int save_ended(ws_save *w, ckpt_error *err)
{
    struct stat st;
    if (stat(w->path, &st) != 0 && errno == ENOENT)
        return ckpt_err(err, -ESTALE, "%s was removed (by ckpt gc?) while "
                        "this mount served it", w->path);
    (void)ws_save_committed(w);
    return ckpt_err(err, -EROFS, "%s is no longer a save in progress: it "
                    "was committed (through another mount; this node's "
                    "view of the directory may lag behind by its cache "
                    "timeouts) and is read-only", w->path);
}

/* This mount is one of the save's writers from its first write on: it
 * holds the save's lease until the save commits or the mount goes. */
static int hold_lease(ws_save *w, ckpt_error *err)
{
    start_watch(w->set);
    pthread_mutex_lock(&w->mu);
    int have = w->lease || w->committed;
    pthread_mutex_unlock(&w->mu);
    if (have)
        return 0;
    supersede_if_unheld(w);
    ckpt_lease *l;
    int rc = ckpt_lease_take_on(&l, w->path, w->set->beats, err);
    if (rc == -ENOENT)
        rc = save_ended(w, err);
    if (rc)
        return rc;
    struct stat seen;
    if (refusal_stat(w, &seen) != 0)
        seen.st_ino = 0;
    pthread_mutex_lock(&w->mu);
    if (!w->lease && !w->committed) {
        w->lease = l;
        w->failed = 0;  /* written or committed again: held again */
        w->refusal = seen;
        l = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    ckpt_lease_drop(l);
    return 0;
}

/* The pooled entry of writer wr (under mu), or NULL. */
static pooled *pooled_of(ws_save *w, const ckpt_writer *wr)
{
    for (size_t i = 0; i < w->nall; i++)
        if (w->all[i].wr == wr)
            return &w->all[i];
    return NULL;
}

/* Opens a new writer for `rank` (under mu): named rank<R>, or rank<R>-K
 * when another mount or process of the job writes that rank too (the
 * shard file is created exclusively, so names never clash); <prefix>-<k>
 * when the rank is not known. */
static int open_writer(ws_save *w, int rank, pooled *p, ckpt_error *err)
{
    /* A delta save's base: the one user.ckpt.base named, else with -o
     * delta=latest the newest checkpoint when its first writer opens; the
     * same for all its writers (mounts that choose another are refused at
     * commit: their metadata disagree). */
    if (!w->base_chosen) {
        if (w->set->delta_latest)
            w->base = wbase_latest(w->set->root, w->name);
        w->base_chosen = 1;
    }
    ckpt_write_opts wo = w->set->wo;
    wo.base = w->base;
    int rc = -EEXIST;
    for (int k = 1; rank >= 0 && rc == -EEXIST && k <= RANK_NAME_TRIES;
         k++) {
        if (k == 1)
            snprintf(p->name, sizeof p->name, "rank%d", rank);
        else
            snprintf(p->name, sizeof p->name, "rank%d-%d", rank, k);
        rc = ckpt_writer_open_on(&p->wr, w->path, p->name, &wo,
                                 w->set->beats, err);
    }
    if (rc == -EEXIST) {
        snprintf(p->name, sizeof p->name, "%s-%u", w->set->prefix,
                 w->next_writer++);
        rc = ckpt_writer_open_on(&p->wr, w->path, p->name, &wo,
                                 w->set->beats, err);
    }
    p->rank = rank;
    return rc;
}

/* A writer for process pid: an idle one of its rank, or a new one.  Its
 * name goes to name (cap bytes) when name is not NULL. */
static int take_writer(ws_save *w, pid_t pid, ckpt_writer **out,
                       char *name, size_t cap, ckpt_error *err)
{
    int lrc = hold_lease(w, err);
    if (lrc)
        return lrc;
    int rank = wrank_of(w->set->ranks, pid, w->set->world);
    pthread_mutex_lock(&w->mu);
    if (w->committed) {
        pthread_mutex_unlock(&w->mu);
        return ckpt_err(err, -EROFS, "%s is committed: it is read-only",
                        w->path);
    }
    const pooled *found = NULL;
    for (size_t i = w->nidle; i-- > 0 && !found;) {
        const pooled *p = pooled_of(w, w->idle[i]);
        if (p && p->rank == rank) {
            found = p;
            w->idle[i] = w->idle[--w->nidle];
        }
    }
    int rc = 0;
    if (!found && w->nall == w->capall) {
        size_t c = w->capall ? w->capall * 2 : 8;
        pooled *v = realloc(w->all, c * sizeof *v);
        if (v) {
            w->all = v;
            w->capall = c;
        } else {
            rc = ckpt_err(err, -ENOMEM, "out of memory");
        }
    }
    if (!found && rc == 0) {
        pooled p = { 0 };
        rc = open_writer(w, rank, &p, err);
        if (rc == 0) {
            w->all[w->nall] = p;
            found = &w->all[w->nall++];
        }
    }
    if (rc == 0) {
        *out = found->wr;
        if (name)
            snprintf(name, cap, "%s", found->name);
    }
    pthread_mutex_unlock(&w->mu);
    if (rc == -ENOENT || rc == -EEXIST) {
        int pfd = ckpt_pending_open(w->path, 1, NULL);
        if (pfd == -ENOENT)
            rc = save_ended(w, err);
        else if (pfd >= 0)
            close(pfd);
    }
    return rc;
}

/* Makes everything this mount's writers recorded for w durable (the
 * shards and plans were written without sync at each close). */
static int sync_writers(ws_save *w, ckpt_error *err)
{
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < w->nall; i++)
        rc = ckpt_writer_sync(w->all[i].wr, err);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* Returns a writer to the pool, or drops it when it failed (its durable
 * pieces stay in its plan). */
static void give_writer(ws_save *w, ckpt_writer *wr, int ok)
{
    pthread_mutex_lock(&w->mu);
    if (w->failed)
        ok = 0;         /* a refused save keeps no writer (release_failed) */
    const pooled *pw = pooled_of(w, wr);
    if (pw && pw->retired)
        ok = 0;         /* superseded: its rank runs again (retire) */
    if (w->nidle >= WL_IDLE_WRITERS)
        ok = 0;         /* closed: its pieces are recorded already */
    if (ok && !w->committed && w->nidle == w->capidle) {
        size_t cap = w->capidle ? w->capidle * 2 : 8;
        ckpt_writer **v = realloc(w->idle, cap * sizeof *v);
        if (v) {
            w->idle = v;
            w->capidle = cap;
        }
    }
    if (ok && !w->committed && w->nidle < w->capidle) {
        w->idle[w->nidle++] = wr;
        wr = NULL;
    }
    if (wr)
        forget_writer(w, wr);
    pthread_mutex_unlock(&w->mu);
    ckpt_writer_abort(wr);
}

/* Records in a writer's plan that file `node` is declared, with the
 * reason its piece failed (or none), so that whichever mount commits
 * refuses the tensor if no piece of it arrives. */
static int declare(ws_save *w, uint32_t node, pid_t pid, const char *reason,
                   ckpt_error *err)
{
    char *fqn = NULL;
    pthread_mutex_lock(&w->mu);
    int rc = node < w->n && w->nodes[node].kind == WS_FILE
             ? fqn_locked(w, node, &fqn, err)
             : ckpt_err(err, -EISDIR, "not a tensor file");
    pthread_mutex_unlock(&w->mu);
    ckpt_writer *wr = NULL;
    if (rc == 0)
        rc = take_writer(w, pid, &wr, NULL, 0, err);
    if (rc == 0) {
        rc = ckpt_writer_declare(wr, fqn, reason, err);
        if (rc == 0)
            rc = ckpt_writer_flush(wr, err);
        give_writer(w, wr, rc == 0);
    }
    if (rc == 0) {
        pthread_mutex_lock(&w->mu);
        w->nodes[node].declared = 1;
        pthread_mutex_unlock(&w->mu);
    }
    free(fqn);
    return rc;
}

/* Declares file `node` unless this mount did already. */
static int declare_once(ws_save *w, uint32_t node, pid_t pid,
                        ckpt_error *err)
{
    pthread_mutex_lock(&w->mu);
    int done = node >= w->n || w->nodes[node].declared;
    pthread_mutex_unlock(&w->mu);
    return done ? 0 : declare(w, node, pid, NULL, err);
}

int ws_piece_error(ws_save *w, uint32_t node, char *buf, size_t cap)
{
    pthread_mutex_lock(&w->mu);
    int rc = node < w->n && w->nodes[node].error
             ? snprintf(buf, cap, "%s", w->nodes[node].error) : -ENODATA;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* ------------------------------------------------------------ pieces */

int ws_open(ws_save *w, uint32_t node, pid_t pid, uid_t uid, ws_file **out,
            ckpt_error *err)
{
    *out = NULL;
    size_t max = w->set->lim.max_open_pieces;
    if (wl_take(w->set->open_pieces, uid, max) != 0)
        return ckpt_err(err, -EMFILE, "user %ld holds %zu pieces open for "
                        "writing through this mount, the most it may (-o "
                        "max_open_pieces=%zu): close some first", (long)uid,
                        max, max);
    ws_file *f = calloc(1, sizeof *f);
    if (!f) {
        wl_give(w->set->open_pieces, uid);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    f->uid = uid;
    f->w = w;
    f->node = node;
    f->opener = pid;
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_lock(&w->mu);
    int rc = node < w->n && w->nodes[node].kind == WS_FILE ? 0 : -EISDIR;
    if (rc)
        ckpt_err(err, rc, "not a tensor file");
    else if (w->committed)
        rc = ckpt_err(err, -EROFS, "%s is committed: it is read-only",
                      w->path);
    else
        rc = fqn_locked(w, node, &f->fqn, err);
    pthread_mutex_unlock(&w->mu);
    if (rc) {
        ws_release(f);
        return rc;
    }
    *out = f;
    return 0;
}

/* The one place a failed piece is recorded: its reason is kept on the
 * file's node (ws_piece_error) and written to a plan with the tensor's
 * declaration, so that no commit takes the save without the tensor. */
static void piece_failed(ws_file *f)
{
    const char *why = f->err.msg[0] ? f->err.msg : strerror(-f->rc);
    ws_save *w = f->w;
    char by[200];
    if (f->who[0])
        snprintf(by, sizeof by, "writer %s", f->who);
    else
        snprintf(by, sizeof by, "process %ld", (long)f->opener);
    note_refusal(w, f->node, by, why);
    char reason[sizeof f->err.msg + 220];
    snprintf(reason, sizeof reason, "%s (%s)", why, by);
    ckpt_error e = { 0 };
    if (declare(w, f->node, f->opener, reason, &e) != 0)
        fuse_log(FUSE_LOG_ERR, "ckptfs: tensor '%s': cannot record why its "
                 "piece failed: %s\n", f->fqn, e.msg);
}

static int fail(ws_file *f, int rc, const ckpt_error *err)
{
    if (f->rc == 0) {
        f->rc = rc;
        if (err)
            f->err = *err;
        piece_failed(f);
    }
    return f->rc;
}

/* Ends the stream (aborting it unless ok) and returns the writer. */
static void finish_stream(ws_file *f, int ok)
{
    if (f->stream && !ok)
        ckpt_stream_abort(f->stream);
    f->stream = NULL;
    if (f->writer) {
        ckpt_error e = { 0 };
        /* A writer whose shard broke is dropped: flush reports it. */
        int good = ok || ckpt_writer_flush(f->writer, &e) == 0;
        give_writer(f->w, f->writer, good);
        f->writer = NULL;
    }
}

/* Takes the writers named in sup (comma-separated) out of use: their
 * rank runs again, and its new pieces go to other writers, whose plans
 * say which pieces of these they replace. */
static void retire(ws_save *w, const char *sup)
{
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < w->nall; i++)
        if (ckpt_supersede_listed(sup, w->all[i].name))
            w->all[i].retired = 1;
    for (size_t i = 0; i < w->nidle;) {
        ckpt_writer *wr = w->idle[i];
        const pooled *p = pooled_of(w, wr);
        if (p && p->retired) {
            w->idle[i] = w->idle[--w->nidle];
            forget_writer(w, wr);
            ckpt_writer_abort(wr);      /* its pieces are in its plan */
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&w->mu);
}

/* A rank that committed to the save and runs again, none of its earlier
 * processes through this mount still running: a new attempt of the save
 * begins (rdv_reopen: every rank's commit is withdrawn, and the writers so
 * far are listed as superseded).  A rank still running, or one whose
 * commit completed the set (a repeated commit retries), changes
 * nothing. */
static int reopen_if_stale(ws_save *w, int rank, pid_t pid,
                           ckpt_error *err)
{
    if (wa_rank_live(w->attempts, rank, pid))
        return 0;
    int had = 0;
    int rc = rdv_reopen(w->path, rank, w->set->world, &had, err);
    if (rc || !had)
        return rc;
    char by[64], why[600];
    snprintf(by, sizeof by, "rank %d, process %ld", rank, (long)pid);
    snprintf(why, sizeof why, "rank %d writes again after it committed, "
             "and none of its earlier processes runs: a new attempt of the "
             "save begins; the %d commit%s of the earlier attempt %s "
             "withdrawn (every rank commits again), and each rank's new "
             "pieces replace its earlier ones wherever they overlap", rank,
             had, had == 1 ? "" : "s", had == 1 ? "is" : "are");
    fuse_log(FUSE_LOG_INFO, "ckptfs: %s: %s\n", w->path, why);
    rdv_note_error(w->path, w->set->prefix, ".ckptfs/commit", by, why);
    return 0;
}

/* Before process pid of rank f->rank begins piece p: whether the rank
 * runs again (docs/MOUNT.md, "A rank runs again").  Into sup (cap bytes)
 * the writers whose pieces overlapping p it takes the place of ("": none):
 * the rank's earlier pieces there through this mount when the processes
 * that wrote them are gone, and the rank's writers of an attempt given
 * up; those writers are retired. */
static int rerun_check(ws_file *f, pid_t pid, const ckpt_piece *p,
                       char *sup, size_t cap, ckpt_error *err)
{
    ws_save *w = f->w;
    sup[0] = '\0';
    if (f->rank < 0)
        return 0;
    int rc = reopen_if_stale(w, f->rank, pid, err);
    if (rc == 0 && wa_note_proc(w->attempts, f->rank, pid) != 0)
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        (void)wa_earlier(w->attempts, f->node, f->rank, pid, p->ndim,
                         p->offsets, p->sizes, sup, cap);
    /* An earlier attempt given up (by this mount or another) */
    if (rc == 0)
        (void)rdv_superseded(w->path, f->rank, sup, cap);
    if (rc == 0 && sup[0])
        retire(w, sup);
    return rc;
}

/* Resolves the piece's attributes as pid set them (consuming pid's own
 * copy) and begins its stream: in a writer of its rank that its rank's
 * earlier, superseded pieces are not in, its plan saying which it
 * supersedes. */
static int start_piece(ws_file *f, pid_t pid, ckpt_error *err)
{
    ws_save *w = f->w;
    pthread_mutex_lock(&w->mu);
    ws_node *x = &w->nodes[f->node];
    const pattr *a = attrs_for(x, pid, f->opener);
    int rc = pattr_resolve(a, f->fqn, &f->piece, err);
    if (rc == 0 && a && a != &x->shared)
        drop_own(x, a);
    pthread_mutex_unlock(&w->mu);
    ckpt_piece p;
    pattr_to_piece(&f->piece, f->fqn, &p);
    f->starter = pid;
    f->rank = wrank_of(w->set->ranks, pid, w->set->world);
    char sup[1024];
    if (rc == 0)
        rc = ckpt_shape_nbytes(p.dtype, p.ndim, p.sizes, &f->bound, f->fqn,
                               err);
    if (rc == 0)
        rc = rerun_check(f, pid, &p, sup, sizeof sup, err);
    if (rc == 0)
        rc = take_writer(w, pid, &f->writer, f->who, sizeof f->who, err);
    if (rc == 0 && sup[0]) {
        rc = ckpt_writer_declare_supersede(f->writer, &p, sup, err);
        if (rc == 0)
            rc = ckpt_writer_flush(f->writer, err);
    }
    if (rc == 0)
        rc = ckpt_writer_begin(f->writer, &p, &f->stream, err);
    f->started = 1;
    if (rc)
        finish_stream(f, 0);
    return rc;
}

/* Records the piece, every byte of it received: its frames are flushed
 * to the shard and it goes into the writer's plan. */
static int end_piece(ws_file *f, ckpt_error *err)
{
    f->done = 1;
    ckpt_piece p;
    pattr_to_piece(&f->piece, f->fqn, &p);
    int rc = ckpt_stream_end_as(f->stream, &p, err);
    f->stream = NULL;          /* freed either way */
    if (rc == 0)
        rc = ckpt_writer_flush(f->writer, err);
    /* Remembered, so that a re-run of the rank is told (rerun_check). */
    if (rc == 0 && f->rank >= 0 &&
        wa_note_piece(f->w->attempts, f->node, f->rank, f->starter, f->who,
                      p.ndim, p.offsets, p.sizes) != 0)
        fuse_log(FUSE_LOG_ERR, "ckptfs: tensor '%s': out of memory noting "
                 "its piece\n", f->fqn);
    finish_stream(f, rc == 0);
    return rc ? fail(f, rc, err) : 0;
}

static int write_locked(ws_file *f, pid_t pid, const void *buf, size_t len,
                        uint64_t off, ws_lent *lent, ckpt_error *err)
{
    if (f->rc) {
        if (err)
            *err = f->err;
        return f->rc;
    }
    if (f->done)
        return ckpt_err(err, -EFBIG, "tensor '%s': the piece holds %" PRIu64
                        " bytes, all written (it was recorded); writing %zu "
                        "more at %" PRIu64 " goes past its end (a new piece "
                        "takes a new open)", f->fqn, f->bound, len, off);
    int rc = 0;
    if (off != f->received)
        rc = ckpt_err(err, -EINVAL, "tensor '%s': write at offset %" PRIu64
                      " but the piece's bytes so far end at %" PRIu64
                      " (pieces are written sequentially)", f->fqn, off,
                      f->received);
    if (rc == 0 && !f->started)
        rc = start_piece(f, pid, err);
    if (rc == 0 && len > f->bound - f->received)
        rc = ckpt_err(err, -EFBIG, "tensor '%s': the piece holds %" PRIu64
                      " bytes; writing %zu at %" PRIu64 " goes past its end",
                      f->fqn, f->bound, len, f->received);
    /* The write that ends the piece waits for its frames here: the end
     * waits for the lent writes before it. */
    if (rc == 0 && len == f->bound - f->received) {
        rc = ckpt_stream_write_lent(f->stream, buf, len, err);
    } else if (rc == 0) {
        lent->stream = f->stream;
        rc = ckpt_stream_write_lent_async(f->stream, buf, len,
                                          &lent->ticket, err);
    }
    if (rc) {
        finish_stream(f, 0);
        return fail(f, rc, err);
    }
    f->received += len;
    pthread_mutex_lock(&f->w->mu);
    ws_node *x = &f->w->nodes[f->node];
    if (x->size < f->received)
        x->size = f->received;
    clock_gettime(CLOCK_REALTIME, &x->mtime);
    pthread_mutex_unlock(&f->w->mu);
    /* Complete: the piece ends here, whoever holds its descriptors. */
    return f->received == f->bound ? end_piece(f, err) : 0;
}

int ws_write(ws_file *f, pid_t pid, const void *buf, size_t len,
             uint64_t off, ws_lent *lent, ckpt_error *err)
{
    *lent = (ws_lent){ NULL, 0 };
    pthread_mutex_lock(&f->mu);
    int rc = write_locked(f, pid, buf, len, off, lent, err);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

void ws_lent_wait(const ws_lent *lent)
{
    ckpt_stream_wait_lent(lent->stream, lent->ticket);
}

/* 1 when the attributes pid would use describe a piece of no bytes. */
static int empty_piece_declared(ws_file *f, pid_t pid)
{
    pattr_piece p;
    uint64_t n = 1;
    pthread_mutex_lock(&f->w->mu);
    const pattr *a = attrs_for(&f->w->nodes[f->node], pid, f->opener);
    int rc = a ? pattr_resolve(a, f->fqn, &p, NULL) : -1;
    pthread_mutex_unlock(&f->w->mu);
    if (rc == 0)
        (void)ckpt_shape_nbytes(p.dtype, p.ndim, p.sizes, &n, f->fqn, NULL);
    return rc == 0 && n == 0;
}

/* 1 when the attributes the opener would use say user.ckpt.replica=1. */
static int replica_declared(ws_file *f)
{
    pthread_mutex_lock(&f->w->mu);
    const pattr *a = attrs_for(&f->w->nodes[f->node], f->opener, f->opener);
    int yes = a && (a->set & PATTR_REPLICA) && a->replica;
    pthread_mutex_unlock(&f->w->mu);
    return yes;
}

/* Records a piece closed without bytes under user.ckpt.replica=1 as a
 * reference to the same region written by another writer: nothing goes
 * to the shard, and the commit refuses the save unless that piece is
 * there.  The region must be given in full. */
static int close_replica(ws_file *f, ckpt_error *err)
{
    ws_save *w = f->w;
    pthread_mutex_lock(&w->mu);
    ws_node *x = &w->nodes[f->node];
    const pattr *a = attrs_for(x, f->opener, f->opener);
    int rc = pattr_resolve(a, f->fqn, &f->piece, err);
    if (rc == 0 && !(a->set & PATTR_DTYPE))
        rc = ckpt_err(err, -EINVAL, "tensor '%s': user.ckpt.replica=1 "
                      "without bytes refers to a piece another writer "
                      "writes: its region must be set in full "
                      "(user.ckpt.dtype and .shape, and .offsets and .sizes "
                      "for a part)", f->fqn);
    if (rc == 0 && a != &x->shared)
        drop_own(x, a);
    pthread_mutex_unlock(&w->mu);
    ckpt_piece p;
    pattr_to_piece(&f->piece, f->fqn, &p);
    ckpt_writer *wr = NULL;
    if (rc == 0)
        rc = take_writer(w, f->opener, &wr, f->who, sizeof f->who, err);
    if (rc == 0) {
        rc = ckpt_writer_declare_replica(wr, &p, err);
        if (rc == 0)
            rc = ckpt_writer_flush(wr, err);
        give_writer(w, wr, rc == 0);
    }
    return rc ? fail(f, rc, err) : 0;
}

/* The piece's error, once the frames of its bytes so far are in the
 * shard: what the encoders or the shard found after the writes returned
 * fails the piece here. */
static int stream_check(ws_file *f, ckpt_error *err)
{
    if (f->rc) {
        if (err)
            *err = f->err;
        return f->rc;
    }
    int rc = f->stream ? ckpt_stream_wait(f->stream, err) : 0;
    if (rc) {
        finish_stream(f, 0);
        rc = fail(f, rc, err);
    }
    return rc;
}

int ws_fsync(ws_file *f, ckpt_error *err)
{
    pthread_mutex_lock(&f->mu);
    int rc = stream_check(f, err);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static int close_locked(ws_file *f, ckpt_error *err)
{
    if (f->rc) {
        if (err)
            *err = f->err;
        return f->rc;
    }
    /* Recorded, or more bytes may come through another descriptor of the
     * open file (a child's, a dup): a flush is not the piece's end, but
     * reports what the frames written so far met. */
    if (f->done || f->started)
        return stream_check(f, err);
    /* A replica's reference: no bytes, by design. */
    if (replica_declared(f)) {
        f->done = 1;
        return close_replica(f, err);
    }
    /* Nothing written and nothing to write: not the end of the piece (a
     * shell closes its copy of a redirected descriptor before the command
     * writes). */
    if (!empty_piece_declared(f, f->opener))
        return 0;
    int rc = start_piece(f, f->opener, err);
    return rc ? fail(f, rc, err) : end_piece(f, err);
}

int ws_close(ws_file *f, ckpt_error *err)
{
    pthread_mutex_lock(&f->mu);
    int rc = close_locked(f, err);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

void ws_release(ws_file *f)
{
    if (!f)
        return;
    if (f->started && !f->done && !f->rc) {
        /* Its last descriptor closed short: a writer killed, or a
         * program that wrote less than it declared. */
        ckpt_error e = { 0 };
        finish_stream(f, 0);
        fail(f, ckpt_err(&e, -EIO, "tensor '%s': its descriptors were all "
                         "closed after %" PRIu64 " of the piece's %" PRIu64
                         " bytes (its writer was killed, or wrote less than "
                         "its attributes declare): nothing is recorded; "
                         "write the piece again", f->fqn, f->received,
                         f->bound), &e);
    }
    if (f->stream || f->writer)
        finish_stream(f, 0);
    pthread_mutex_destroy(&f->mu);
    wl_give(f->w->set->open_pieces, f->uid);
    free(f->fqn);
    free(f);
}

/* ------------------------------------------------------------ commit */

/* After a refused commit this mount stops holding the save: its lease and
 * idle writers (whose plans are on disk) go, so that `ckpt gc` may remove
 * the save at once and the step be saved again.  A rank that writes or
 * commits again takes the lease again. */
static void release_failed(ws_save *w)
{
    pthread_mutex_lock(&w->mu);
    w->failed = 1;
    drop_idle(w);
    ckpt_lease *l = w->lease;
    w->lease = NULL;
    pthread_mutex_unlock(&w->mu);
    ckpt_lease_drop(l);
}

int ws_commit_ranks(ws_save *w, const char *text, size_t len,
                    ckpt_error *err)
{
    char buf[4096];
    if (len >= sizeof buf)
        return ckpt_err(err, -EINVAL, "%s/.ckptfs/commit takes rank numbers "
                        "(at most %zu bytes per write)", w->name,
                        sizeof buf - 1);
    memcpy(buf, text, len);
    buf[len] = '\0';
    int world = w->set->world, nranks = 0, complete = 0, again = 0;
    int rc = hold_lease(w, err);
    if (rc)
        return rc;
    /* The ranks' pieces must be on disk before anyone counts them. */
    rc = sync_writers(w, err);
    if (rc)
        return -EIO;
    char *p = buf;
    while (rc == 0) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long r = strtol(p, &end, 10);
        if (end == p || errno || (*end && !isspace((unsigned char)*end)) ||
            r < INT32_MIN || r > INT32_MAX)
            return ckpt_err(err, -EINVAL, "%s/.ckptfs/commit: '%s' is not a "
                            "rank number", w->name, buf);
        rc = rdv_mark(w->path, (int)r, world, &complete, err);
        /* A rank again once all are in: the commit is run again (its
         * committer died, or failed and the rank retries). */
        if (rc == -EALREADY && complete) {
            again = 1;
            rc = 0;
        } else if (rc == -EALREADY) {
            rc = -EINVAL;
        }
        nranks++;
        p = end;
    }
    if (rc == 0 && nranks == 0)
        rc = ckpt_err(err, -EINVAL, "%s/.ckptfs/commit: write a rank number "
                      "(0..%d)", w->name, world - 1);
    if (rc == 0 && complete) {
        if ((again ? rdv_retry : rdv_commit)(w->path, world, err) != 0) {
            release_failed(w);
            return -EIO;        /* the planner's message is in err */
        }
        (void)ws_save_committed(w);
    }
    return rc;
}

int ws_status(ws_save *w, char *buf, size_t cap)
{
    return rdv_status(w->path, w->set->world, buf, cap);
}

int ws_errors(ws_save *w, char **out, size_t *len)
{
    return rdv_errors(w->path, out, len);
}
