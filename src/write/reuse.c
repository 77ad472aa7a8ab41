/*
 * reuse.c - a commit that reuses the previous save's layout (see
 * reuse.h), and the layouts a full commit records for the next one.
 *
 * The previous checkpoint is the sibling of the save (a directory of the
 * same parent, not hidden) whose index.db was modified last.  From its
 * index come the files (ids in path order), the tensors (ids in fqn
 * order, every one packed: its grid) and each plan's layout: digest,
 * piece count, shard, and the map of its pieces to (tensor, chunk).  The
 * maps must together hit every chunk exactly once: the chunks of a grid
 * tile their tensor, so the pieces do.
 */
#include "write/reuse.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/fileio.h"
#include "common/pool.h"
#include "common/shape.h"
#include "format/chunkpack.h"
#include "format/db.h"
#include "format/layout.h"
#include "write/deltasave.h"

/* A layout row of the previous index. */
typedef struct prev_layout {
    char *plan;
    uint64_t pieces, digest;
    int64_t file_id;            /* 0: no piece */
    uint8_t *map;
    size_t len;
} prev_layout;

struct ckpt_reuse {
    char from[NAME_MAX + 1];
    ckpt_index_file_name *files;    /* the previous index's, by id - 1 */
    char **file_writer;             /* owned strings of files[].writer */
    size_t nfiles;
    unsigned char *need_sync;       /* per file */
    ckpt_index_packed_tensor *tensors;
    size_t ntensors;
    uint64_t *chunk0;               /* per tensor: its first chunk's slot */
    uint64_t nchunks;
    prev_layout *layouts;           /* by plan name, as the plans */
    size_t nplans;
    ckpt_plan_packed *plans;
    uint32_t **rec_at;              /* per plan, per piece: its record */
    uint64_t *slot;                 /* per chunk: plan << 32 | piece */
    ckpt_index_layout *out_layouts;
    ckpt_manifest meta;
};

/* "why" and 1. */
static int skip(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int skip(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return 1;
}

/* The newest committed sibling of dir into r->from: 0, or 1. */
static int find_prev(ckpt_reuse *r, const char *dir, char *parent,
                     size_t pcap)
{
    char self[PATH_MAX];
    snprintf(self, sizeof self, "%s", dir);
    size_t n = strlen(self);
    while (n > 1 && self[n - 1] == '/')
        self[--n] = '\0';
    char *slash = strrchr(self, '/');
    const char *name = slash ? slash + 1 : self;
    if (!slash)
        snprintf(parent, pcap, ".");
    else if (slash == self)
        snprintf(parent, pcap, "/");
    else
        snprintf(parent, pcap, "%.*s", (int)(slash - self), self);
    DIR *d = opendir(parent);
    if (!d)
        return 1;
    struct timespec best = { 0, 0 };
    struct dirent *e;
    while ((e = readdir(d))) {
        char idx[PATH_MAX];
        struct stat st;
        if (e->d_name[0] == '.' || strcmp(e->d_name, name) == 0 ||
            snprintf(idx, sizeof idx, "%s/%s/index.db", parent,
                     e->d_name) >= (int)sizeof idx ||
            stat(idx, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (st.st_mtim.tv_sec > best.tv_sec ||
            (st.st_mtim.tv_sec == best.tv_sec &&
             (st.st_mtim.tv_nsec > best.tv_nsec ||
              (st.st_mtim.tv_nsec == best.tv_nsec &&
               strcmp(e->d_name, r->from) > 0)))) {
            best = st.st_mtim;
            snprintf(r->from, sizeof r->from, "%s", e->d_name);
        }
    }
    closedir(d);
    return r->from[0] ? 0 : 1;
}

/* ------------------------------------------- the previous index, read */

typedef struct prev_read {
    ckpt_reuse *r;
    const char *path;
    size_t cap;
    ckpt_error *err;
} prev_read;

static int bad(prev_read *p, const char *what)
{
    return ckpt_err(p->err, -EIO, "%s: %s", p->path, what);
}

static int file_row(void *arg, sqlite3_stmt *st)
{
    prev_read *p = arg;
    ckpt_reuse *r = p->r;
    const char *path = (const char *)sqlite3_column_text(st, 1);
    const char *writer = (const char *)sqlite3_column_text(st, 2);
    if (sqlite3_column_int64(st, 0) != (int64_t)r->nfiles + 1 || !path ||
        (r->nfiles && strcmp(r->files[r->nfiles - 1].path, path) >= 0))
        return bad(p, "files not in path order");
    if (ckpt_array_reserve((void **)&r->files, &p->cap, r->nfiles + 1,
                           sizeof *r->files))
        return -ENOMEM;
    char *s = malloc(strlen(path) + (writer ? strlen(writer) : 0) + 2);
    if (!s)
        return -ENOMEM;
    strcpy(s, path);
    r->files[r->nfiles].path = s;
    r->files[r->nfiles].writer = writer ? strcpy(s + strlen(path) + 1,
                                                 writer) : NULL;
    r->nfiles++;
    return 0;
}

static int tensor_row(void *arg, sqlite3_stmt *st)
{
    prev_read *p = arg;
    ckpt_reuse *r = p->r;
    const char *fqn = (const char *)sqlite3_column_text(st, 1);
    const char *dt = (const char *)sqlite3_column_text(st, 2);
    const char *shape = (const char *)sqlite3_column_text(st, 3);
    const char *grid = (const char *)sqlite3_column_text(st, 5);
    if (!grid)
        return 1;                       /* a tensor not packed */
    if (sqlite3_column_int64(st, 0) != (int64_t)r->ntensors + 1 || !fqn ||
        !dt || !shape || ckpt_fqn_check(fqn, NULL) ||
        (r->ntensors && strcmp(r->tensors[r->ntensors - 1].fqn, fqn) >= 0))
        return bad(p, "tensors not in fqn order");
    if (ckpt_array_reserve((void **)&r->tensors, &p->cap, r->ntensors + 1,
                           sizeof *r->tensors))
        return -ENOMEM;
    ckpt_index_packed_tensor *t = &r->tensors[r->ntensors];
    if (!(t->fqn = strdup(fqn)))
        return -ENOMEM;
    r->ntensors++;
    t->dtype = ckpt_dtype_parse(dt);
    t->ndim = ckpt_db_dims(shape, t->shape, p->path, "shape", NULL);
    int ng = ckpt_db_dims(grid, t->grid, p->path, "grid", NULL);
    uint64_t nchunks;
    if (t->dtype == CKPT_DTYPE_INVALID || t->ndim < 1 || ng != t->ndim ||
        ckpt_db_col_u64(st, 4, &nchunks) || nchunks > UINT32_MAX ||
        ckpt_grid_count(t->ndim, t->shape, t->grid) != nchunks)
        return bad(p, "a packed tensor is damaged");
    t->nchunks = nchunks;
    return 0;
}

static int layout_row(void *arg, sqlite3_stmt *st)
{
    prev_read *p = arg;
    ckpt_reuse *r = p->r;
    const char *plan = (const char *)sqlite3_column_text(st, 0);
    const void *map = sqlite3_column_blob(st, 4);
    size_t len = (size_t)sqlite3_column_bytes(st, 4);
    if (r->nplans == p->cap)
        return 1;                       /* more layouts than plans */
    prev_layout *l = &r->layouts[r->nplans];
    int64_t fid = sqlite3_column_type(st, 3) == SQLITE_NULL
                      ? 0 : sqlite3_column_int64(st, 3);
    if (!plan || ckpt_db_col_u64(st, 1, &l->pieces) || fid < 0 ||
        (uint64_t)fid > r->nfiles || (!fid && l->pieces))
        return bad(p, "a layout is damaged");
    l->digest = (uint64_t)sqlite3_column_int64(st, 2);
    l->file_id = fid;
    l->len = len;
    r->nplans++;                        /* freed from here on */
    if (!(l->plan = strdup(plan)) || !(l->map = malloc(len ? len : 1)))
        return -ENOMEM;
    if (len)
        memcpy(l->map, map, len);
    return 0;
}

static int count_row(void *arg, sqlite3_stmt *st)
{
    *(int64_t *)arg = sqlite3_column_int64(st, 0);
    return 0;
}

/* Reads the previous index: 0, 1 (no layouts there, a tensor not packed,
 * not one layout per plan), or an error. */
static int read_prev(ckpt_reuse *r, const char *path, size_t nplans,
                     ckpt_error *err)
{
    sqlite3 *db = NULL;
    prev_read p = { r, path, 0, err };
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY |
                             SQLITE_OPEN_NOMUTEX, NULL);
    rc = rc == SQLITE_OK ? ckpt_db_check_id(db, path, CKPT_INDEX_APP_ID, err)
                         : ckpt_db_err(err, db, rc, path, "cannot open");
    int64_t has = 0, nlay = 0;
    if (!rc)
        rc = ckpt_db_each(db, "SELECT count(*) FROM sqlite_master WHERE "
                          "type = 'table' AND name = 'layouts'", path,
                          count_row, &has, err);
    if (!rc && !has)
        rc = 1;
    if (!rc)
        rc = ckpt_db_each(db, "SELECT count(*) FROM layouts", path,
                          count_row, &nlay, err);
    if (!rc && nlay != (int64_t)nplans)
        rc = 1;
    if (!rc)
        rc = ckpt_db_each(db, "SELECT id, path, writer FROM files ORDER BY id",
                          path, file_row, &p, err);
    p.cap = 0;
    if (!rc)
        rc = ckpt_db_each(db, "SELECT t.id, t.fqn, t.dtype, t.shape, "
                          "t.nchunks, p.grid FROM tensors t LEFT JOIN packs p"
                          " ON p.tensor_id = t.id ORDER BY t.id", path,
                          tensor_row, &p, err);
    p.cap = nplans;
    if (!rc && !(r->layouts = calloc(nplans ? nplans : 1,
                                     sizeof *r->layouts)))
        rc = -ENOMEM;
    if (!rc)
        rc = ckpt_db_each(db, "SELECT plan, pieces, digest, file_id, map "
                          "FROM layouts ORDER BY plan", path, layout_row, &p,
                          err);
    sqlite3_close(db);
    return rc;
}

/* ------------------------------------------------- the plans, checked */

/* Plan k's claims against its previous layout: 0, or 1 with why. */
static int check_plan(const ckpt_reuse *r, size_t k, const char *name,
                      char *why, size_t cap)
{
    const ckpt_plan_packed *p = &r->plans[k];
    const prev_layout *l = &r->layouts[k];
    if (strcmp(l->plan, name) != 0)
        return skip(why, cap, "plan %s has no layout in %s", name, r->from);
    if (!p->claim.has_layout || !p->has_packed)
        return skip(why, cap, "plan %s claims no layout", name);
    if (p->claim.layout_pieces != l->pieces || p->claim.layout != l->digest)
        return skip(why, cap, "plan %s: its layout differs from %s's", name,
                    r->from);
    if (p->pieces != l->pieces)
        return skip(why, cap, "plan %s: %llu packed pieces, %llu claimed",
                    name, (unsigned long long)p->pieces,
                    (unsigned long long)l->pieces);
    if (p->declared)
        return skip(why, cap, "plan %s declares tensors", name);
    if (ckpt_manifest_get_meta(&p->meta, CKPT_META_BASE))
        return skip(why, cap, "a delta save");
    return 0;
}

/* Per tensor, the slot of its first chunk. */
static int chunk_slots(ckpt_reuse *r)
{
    r->chunk0 = malloc((r->ntensors + 1) * sizeof *r->chunk0);
    if (!r->chunk0)
        return -ENOMEM;
    uint64_t n = 0;
    for (size_t t = 0; t < r->ntensors; t++) {
        r->chunk0[t] = n;
        n += r->tensors[t].nchunks;
    }
    r->chunk0[r->ntensors] = n;
    r->nchunks = n;
    r->slot = malloc((n ? n : 1) * sizeof *r->slot);
    if (!r->slot)
        return -ENOMEM;
    memset(r->slot, 0xff, (n ? n : 1) * sizeof *r->slot);
    return 0;
}

/* Calls fn(arg, j, t, c + shift) for each piece j of the runs of
 * map[0..len) (tensor t, chunk c) of `pieces` pieces: 0, or 1 when the
 * map is damaged or leaves the tensors. */
static int each_run_piece(const ckpt_reuse *r, const uint8_t *map,
                          size_t len, uint64_t pieces, int64_t shift,
                          int (*fn)(void *arg, uint64_t j, size_t t,
                                    uint64_t c),
                          void *arg)
{
    size_t pos = 0;
    uint64_t j = 0;
    int64_t nt = (int64_t)r->ntensors;
    while (j < pieces) {
        ckpt_layout_run run;
        if (ckpt_layout_map_next(map, len, &pos, &run) ||
            run.count > pieces - j || run.dt > nt || run.dt < -nt ||
            run.dk > INT32_MAX || run.dk < -(int64_t)INT32_MAX ||
            run.k0 > UINT32_MAX)
            return 1;
        int64_t t = (int64_t)run.t0, c = (int64_t)run.k0 + shift;
        for (uint64_t i = 0; i < run.count; i++, j++) {
            if (t < 0 || t >= nt || c < 0 ||
                (uint64_t)c >= r->tensors[t].nchunks ||
                fn(arg, j, (size_t)t, (uint64_t)c))
                return 1;
            t += run.dt;
            c += run.dk;
        }
    }
    return pos == len ? 0 : 1;
}

/* each_run_piece over plan k's map, or over the runs of the earlier plan
 * it copies. */
static int each_piece(const ckpt_reuse *r, size_t k,
                      int (*fn)(void *arg, uint64_t j, size_t t, uint64_t c),
                      void *arg)
{
    const prev_layout *l = &r->layouts[k];
    uint64_t ref;
    int64_t dk = 0;
    int copy = ckpt_layout_map_is_copy(l->map, l->len, &ref, &dk);
    if (copy < 0)
        return 1;
    if (copy) {
        const prev_layout *b = &r->layouts[ref < k ? ref : k];
        uint64_t r2;
        int64_t d2;
        if (ref >= k || b->pieces != l->pieces ||
            dk > UINT32_MAX || dk < -(int64_t)UINT32_MAX ||
            ckpt_layout_map_is_copy(b->map, b->len, &r2, &d2) != 0)
            return 1;
        l = b;
    }
    return each_run_piece(r, l->map, l->len, l->pieces, dk, fn, arg);
}

/* The digest of the pieces a map describes, as their writer computes it
 * of its own (layout.h). */
typedef struct digest_arg {
    const ckpt_reuse *r;
    const char *file;
    uint64_t d;
} digest_arg;

static int digest_piece(void *arg, uint64_t j, size_t t, uint64_t c)
{
    (void)j;
    digest_arg *a = arg;
    const ckpt_index_packed_tensor *pt = &a->r->tensors[t];
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
    ckpt_grid_box(pt->ndim, pt->shape, pt->grid, c, off, size);
    a->d = ckpt_layout_step(a->d, pt->fqn, pt->dtype, pt->ndim, pt->shape,
                            off, size, a->file);
    return 0;
}

/* 0 when plan k's claimed digest is the digest of the pieces its map in
 * the previous index describes - the map is then the plan's pieces,
 * whatever that index holds - or 1. */
static int verify_plan(const ckpt_reuse *r, size_t k)
{
    const prev_layout *l = &r->layouts[k];
    digest_arg a = { r, l->file_id ? r->files[l->file_id - 1].path : NULL,
                     CKPT_LAYOUT_SEED };
    return each_piece(r, k, digest_piece, &a) ||
           a.d != r->plans[k].claim.layout;
}

/* One plan's work (verify_plan, index_records) run by on_every_plan. */
typedef int (*plan_fn)(ckpt_reuse *r, size_t k, uint64_t *end);

typedef struct plan_task {
    ckpt_reuse *r;
    size_t k;
    plan_fn fn;
    uint64_t *end;
    int rc;
    ckpt_taskgroup *g;
} plan_task;

static void plan_run(void *arg, int worker)
{
    (void)worker;
    plan_task *v = arg;
    v->rc = v->fn(v->r, v->k, v->end);
    ckpt_tg_done(v->g);
}

/* fn on plans 0..n-1 (plan k's end into ends[k] when ends is not NULL),
 * on a thread per CPU: the index of the first (in plan order) that
 * returned other than 0, with what it returned in *rc; or n. */
static size_t on_every_plan(ckpt_reuse *r, size_t n, plan_fn fn,
                            uint64_t *ends, ckpt_error *err, int *rc)
{
    plan_task *v = calloc(n ? n : 1, sizeof *v);
    ckpt_pool *pool = NULL;
    int threads = ckpt_cpu_count();
    *rc = v ? ckpt_pool_create(&pool, threads > 1 ? threads - 1 : 1, err)
            : -ENOMEM;
    size_t bad_at = n;
    if (!*rc) {
        ckpt_taskgroup g;
        ckpt_tg_init(&g);
        for (size_t k = 0; k < n; k++)
            v[k] = (plan_task){ r, k, fn, ends ? &ends[k] : NULL, 0, &g };
        if (n)
            ckpt_pool_run_tasks(pool, plan_run, v, n, sizeof *v, &g);
        ckpt_tg_destroy(&g);
        for (size_t k = 0; k < n && bad_at == n; k++)
            if (v[k].rc) {
                bad_at = k;
                *rc = v[k].rc;
            }
    }
    if (pool)
        ckpt_pool_destroy(pool);
    free(v);
    return bad_at;
}

static int verify_one(ckpt_reuse *r, size_t k, uint64_t *end)
{
    (void)end;
    return verify_plan(r, k);
}

/* Piece j of plan k is chunk c of tensor t: 1 when another piece is. */
typedef struct place_arg {
    ckpt_reuse *r;
    size_t k;
} place_arg;

static int place_piece(void *arg, uint64_t j, size_t t, uint64_t c)
{
    place_arg *a = arg;
    uint64_t *s = &a->r->slot[a->r->chunk0[t] + c];
    if (*s != UINT64_MAX)
        return 1;
    *s = (uint64_t)a->k << 32 | j;
    return 0;
}

/* Plan k's records: where each starts (rec_at), each whole; *end gets
 * where its last frame ends in the shard.  0, or 1 when damaged. */
static int index_records(ckpt_reuse *r, size_t k, uint64_t *end)
{
    const ckpt_plan_packed *p = &r->plans[k];
    if (p->len > UINT32_MAX)
        return 1;
    r->rec_at[k] = malloc((p->pieces + 1) * sizeof *r->rec_at[k]);
    if (!r->rec_at[k])
        return -ENOMEM;
    size_t pos = 0;
    *end = 0;
    ckpt_frame_rec few[8], *f = few;
    uint64_t cap = 8;
    int rc = 0;
    for (uint64_t j = 0; j < p->pieces && !rc; j++) {
        ckpt_pack_chunk c;
        size_t at = pos;
        r->rec_at[k][j] = (uint32_t)pos;
        if (pos >= p->len || p->data[pos] != 0) {
            rc = 1;
            break;
        }
        /* Most records hold a frame or a few; a longer one is read
         * again with room for its frames. */
        if (ckpt_pack_get(p->data, p->len, &pos, &c, f, cap)) {
            pos = at;
            ckpt_frame_rec *g = NULL;
            if (ckpt_pack_get(p->data, p->len, &pos, &c, NULL, 0) ||
                c.nframes <= cap)
                rc = 1;
            else if (!(g = malloc(c.nframes * sizeof *g)))
                rc = -ENOMEM;
            if (rc)
                break;
            if (f != few)
                free(f);
            f = g;
            cap = c.nframes;
            pos = at;
            if (ckpt_pack_get(p->data, p->len, &pos, &c, f, cap))
                rc = 1;
        }
        /* A record's frames are in shard order (each starts at or after
         * the end of the one before): the last ends furthest. */
        if (!rc && c.nframes) {
            uint64_t e = f[c.nframes - 1].file_offset +
                         f[c.nframes - 1].stored_size;
            if (e > *end)
                *end = e;
        }
    }
    if (f != few)
        free(f);
    r->rec_at[k][p->pieces] = (uint32_t)pos;
    return rc ? rc : pos == p->len ? 0 : 1;
}

/* Shard sizes, and which shards the commit syncs: 0, or 1. */
static int check_shards(ckpt_reuse *r, const char *dir, const uint64_t *ends)
{
    uint64_t *size = calloc(r->nfiles + 1, sizeof *size);
    r->need_sync = calloc(r->nfiles + 1, 1);
    if (!size || !r->need_sync) {
        free(size);
        return -ENOMEM;
    }
    int rc = 0;
    for (size_t f = 0; f < r->nfiles && !rc; f++) {
        char path[PATH_MAX];
        struct stat st;
        if (ckpt_path_join(path, sizeof path, dir, r->files[f].path, NULL) ||
            stat(path, &st) || !S_ISREG(st.st_mode))
            rc = 1;
        else
            size[f] = (uint64_t)st.st_size;
    }
    for (size_t k = 0; k < r->nplans && !rc; k++) {
        const prev_layout *l = &r->layouts[k];
        if (!l->file_id)
            continue;
        size_t f = (size_t)l->file_id - 1;
        const ckpt_plan_synced *c = &r->plans[k].claim;
        if (ends[k] > size[f])
            rc = 1;
        if (!c->has || strcmp(c->file, r->files[f].path) != 0 ||
            ends[k] > c->bytes)
            r->need_sync[f] = 1;
    }
    free(size);
    return rc;
}

/* The layouts recorded again, and each file's writer the plan's. */
static int relay(ckpt_reuse *r)
{
    r->out_layouts = calloc(r->nplans ? r->nplans : 1,
                            sizeof *r->out_layouts);
    r->file_writer = calloc(r->nfiles ? r->nfiles : 1,
                            sizeof *r->file_writer);
    if (!r->out_layouts || !r->file_writer)
        return -ENOMEM;
    for (size_t k = 0; k < r->nplans; k++) {
        const prev_layout *l = &r->layouts[k];
        r->out_layouts[k] = (ckpt_index_layout){
            l->plan, l->pieces, l->digest,
            l->file_id ? r->files[l->file_id - 1].path : NULL, l->map,
            l->len };
        const char *w = r->plans[k].writer;
        if (l->file_id && w && !r->file_writer[l->file_id - 1]) {
            if (!(r->file_writer[l->file_id - 1] = strdup(w)))
                return -ENOMEM;
            r->files[l->file_id - 1].writer = r->file_writer[l->file_id - 1];
        }
    }
    return 0;
}

static int prepare(ckpt_reuse *r, const char *dir, const char *pending,
                   char *const *names, size_t n, char *why, size_t cap,
                   ckpt_error *err)
{
    char parent[PATH_MAX], prev[PATH_MAX], idx[PATH_MAX];
    if (find_prev(r, dir, parent, sizeof parent))
        return skip(why, cap, "no committed checkpoint beside the save");
    if (ckpt_path_join(prev, sizeof prev, parent, r->from, err) ||
        ckpt_path_join(idx, sizeof idx, prev, "index.db", err))
        return skip(why, cap, "the path of %s is too long", r->from);
    int rc = read_prev(r, idx, n, err);
    if (rc)
        return rc < 0 ? rc : skip(why, cap, "%s records no layout of %zu "
                                  "plans, or holds a tensor not packed",
                                  r->from, n);
    r->plans = calloc(n ? n : 1, sizeof *r->plans);
    r->rec_at = calloc(n ? n : 1, sizeof *r->rec_at);
    uint64_t *ends = calloc(n ? n : 1, sizeof *ends);
    if (!r->plans || !r->rec_at || !ends) {
        free(ends);
        return -ENOMEM;
    }
    rc = ckpt_planfile_read_packed_many(pending, names, n, 0, r->plans, err);
    for (size_t k = 0; !rc && k < n; k++)
        rc = check_plan(r, k, names[k], why, cap);
    if (!rc)
        rc = chunk_slots(r);
    size_t bad_at = rc ? n : on_every_plan(r, n, verify_one, NULL, err, &rc);
    if (bad_at < n && rc == 1)
        rc = skip(why, cap, "plan %s: the layout %s records for it is not "
                  "its pieces' (damaged)", names[bad_at], r->from);
    uint64_t mapped = 0;
    for (size_t k = 0; !rc && k < n; k++) {
        place_arg a = { r, k };
        if (r->layouts[k].pieces > UINT32_MAX ||
            each_piece(r, k, place_piece, &a))
            rc = skip(why, cap, "the layouts of %s hit a chunk twice",
                      r->from);
        mapped += r->layouts[k].pieces;
    }
    if (!rc && mapped != r->nchunks)
        rc = skip(why, cap, "the layouts of %s leave chunks out", r->from);
    /* Each plan's records indexed on its own thread (rec_at[k], ends[k]
     * are plan k's alone). */
    if (!rc && (bad_at = on_every_plan(r, n, index_records, ends, err,
                                       &rc)) < n && rc == 1)
        skip(why, cap, "the packed records of plan %s are damaged",
             names[bad_at]);
    if (!rc && (rc = check_shards(r, dir, ends)) == 1)
        skip(why, cap, "a shard is missing or shorter than its frames");
    if (!rc)
        rc = relay(r);
    for (size_t k = 0; !rc && k < n; k++)
        if (ckpt_manifest_take(&r->meta, &r->plans[k].meta))
            rc = -ENOMEM;
    free(ends);
    return rc;
}

int ckpt_reuse_prepare(ckpt_reuse **out, const char *dir,
                       const char *pending, char *const *names, size_t n,
                       char *why, size_t whycap)
{
    ckpt_error err = { 0 };
    *out = NULL;
    ckpt_reuse *r = calloc(1, sizeof *r);
    if (!r)
        return skip(why, whycap, "out of memory");
    ckpt_manifest_init(&r->meta);
    r->nplans = 0;
    int rc = prepare(r, dir, pending, names, n, why, whycap, &err);
    if (rc < 0)
        skip(why, whycap, "%s", rc == -ENOMEM ? "out of memory" : err.msg);
    if (rc) {
        ckpt_reuse_free(r);
        return 1;
    }
    *out = r;
    return 0;
}

const ckpt_manifest *ckpt_reuse_meta(const ckpt_reuse *r)
{
    return &r->meta;
}

const char *ckpt_reuse_from(const ckpt_reuse *r)
{
    return r->from;
}

int ckpt_reuse_sync(const ckpt_reuse *r, const char *dir,
                    int (*sync_one)(const char *dir, const char *file,
                                    ckpt_error *err),
                    ckpt_error *err)
{
    int rc = 0;
    for (size_t f = 0; f < r->nfiles && !rc; f++)
        if (r->need_sync[f])
            rc = sync_one(dir, r->files[f].path, err);
    return rc;
}

/* ----------------------------------------------------- the new index */

/* Tensor t's chunks' records: each plan's record of the piece that is
 * the chunk, its file id put in, its raw bytes checked against the
 * chunk's box. */
static int fill(void *arg, size_t t, ckpt_strbuf *b, uint64_t *stored,
                uint64_t *nframes, uint32_t *mask, ckpt_error *err)
{
    ckpt_reuse *r = arg;
    const ckpt_index_packed_tensor *pt = &r->tensors[t];
    size_t item = ckpt_dtype_size(pt->dtype);
    for (uint64_t c = 0; c < pt->nchunks; c++) {
        uint64_t s = r->slot[r->chunk0[t] + c];
        size_t k = (size_t)(s >> 32), j = (size_t)(s & UINT32_MAX);
        const ckpt_plan_packed *p = &r->plans[k];
        size_t pos = r->rec_at[k][j], end = r->rec_at[k][j + 1];
        ckpt_pack_chunk rec;
        int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
        ckpt_grid_box(pt->ndim, pt->shape, pt->grid, c, off, size);
        uint64_t raw = item;
        for (int d = 0; d < pt->ndim; d++)
            raw *= (uint64_t)size[d];
        size_t at = pos;
        if (ckpt_pack_get(p->data, end, &at, &rec, NULL, 0) ||
            rec.raw_bytes != raw)
            return ckpt_err(err, -EINVAL, "tensor '%s' chunk %llu (plan %s):"
                            " its frames hold %llu raw bytes, its box %llu",
                            pt->fqn, (unsigned long long)c,
                            r->layouts[k].plan,
                            (unsigned long long)rec.raw_bytes,
                            (unsigned long long)raw);
        ckpt_varint_put(b, (uint64_t)r->layouts[k].file_id);
        ckpt_strbuf_add(b, p->data + pos + 1, end - pos - 1);
        *stored += rec.stored_bytes;
        *nframes += rec.nframes;
        *mask |= rec.codec_mask;
    }
    return 0;
}

int ckpt_reuse_write(ckpt_reuse *r, const char *tmp, const char *dir,
                     const ckpt_kv *meta, size_t nmeta, int sync,
                     ckpt_error *err)
{
    ckpt_index_packs src = {
        .files = r->files, .nfiles = r->nfiles,
        .tensors = r->tensors, .ntensors = r->ntensors,
        .layouts = r->out_layouts, .nlayouts = r->nplans,
        .fill = fill, .arg = r,
    };
    return ckpt_index_write_packs(tmp, dir, &src, meta, nmeta, sync, err);
}

void ckpt_reuse_free(ckpt_reuse *r)
{
    if (!r)
        return;
    for (size_t f = 0; f < r->nfiles; f++) {
        free((char *)r->files[f].path);
        if (r->file_writer)
            free(r->file_writer[f]);
    }
    free(r->files);
    free(r->file_writer);
    free(r->need_sync);
    for (size_t t = 0; t < r->ntensors; t++)
        free((char *)r->tensors[t].fqn);
    free(r->tensors);
    free(r->chunk0);
    free(r->slot);
    size_t nl = r->layouts ? r->nplans : 0;
    for (size_t k = 0; k < nl; k++) {
        free(r->layouts[k].plan);
        free(r->layouts[k].map);
    }
    free(r->layouts);
    for (size_t k = 0; r->plans && k < r->nplans; k++) {
        ckpt_plan_packed_free(&r->plans[k]);
        free(r->rec_at[k]);
    }
    free(r->plans);
    free(r->rec_at);
    free(r->out_layouts);
    ckpt_manifest_free(&r->meta);
    free(r);
}

/* ------------------------------------------ layouts of a full commit */

void ckpt_reuse_layouts_free(ckpt_index_layout *v, size_t n)
{
    for (size_t k = 0; v && k < n; k++)
        free((void *)v[k].map);
    free(v);
}

/* When the pieces of plan `pl` are those of plan `base` (tensors in the
 * same order) at chunks shifted by one distance: 1 with *dk. */
static int same_but_chunks(const uint64_t *tk, const ckpt_reuse_plan *base,
                           const ckpt_reuse_plan *pl, int64_t *dk)
{
    size_t n = pl->end - pl->first;
    if (!base || n == 0 || base->end - base->first != n)
        return 0;
    const uint64_t *a = tk + base->first, *b = tk + pl->first;
    *dk = (int64_t)(b[0] & UINT32_MAX) - (int64_t)(a[0] & UINT32_MAX);
    for (size_t i = 0; i < n; i++)
        if (a[i] >> 32 != b[i] >> 32 ||
            (int64_t)(b[i] & UINT32_MAX) - (int64_t)(a[i] & UINT32_MAX) !=
                *dk)
            return 0;
    return 1;
}

/* Plan k's layout into *l: its digest recomputed from its pieces (which
 * must match its claim), its one shard, its map from tk[] (per piece:
 * tensor << 32 | chunk): a copy of plan `base`'s (at position ref) when
 * it can be, else runs.  0, 1 when it cannot be recorded, -ENOMEM. */
static int plan_layout(const ckpt_pieces *all, const uint64_t *tk,
                       const char *name, const ckpt_reuse_plan *pl,
                       const ckpt_reuse_plan *base, size_t ref,
                       ckpt_index_layout *l)
{
    const ckpt_plan_synced *c = &pl->synced;
    if (!c->has_layout || c->layout_pieces != pl->end - pl->first)
        return 1;
    uint64_t d = CKPT_LAYOUT_SEED;
    ckpt_layout_map m = { 0 };
    uint32_t file = CKPT_PIECES_NONE;
    int64_t off[CKPT_MAX_DIMS];
    for (size_t i = pl->first; i < pl->end; i++) {
        const ckpt_pieces_rec *p = &all->v[i];
        if (i > pl->first && ckpt_pieces_file(all, i) != file) {
            ckpt_strbuf_free(&m.b);
            return 1;
        }
        file = ckpt_pieces_file(all, i);
        d = ckpt_layout_step(d, ckpt_pieces_str(all, p->fqn),
                             (ckpt_dtype)p->dtype, p->ndim,
                             ckpt_pieces_shape(all, i),
                             ckpt_pieces_offsets(all, i, off),
                             ckpt_pieces_sizes(all, i),
                             ckpt_pieces_str(all, file));
    }
    int64_t dk;
    if (same_but_chunks(tk, base, pl, &dk)) {
        ckpt_layout_map_copy(&m.b, ref, dk);
    } else {
        for (size_t i = pl->first; i < pl->end; i++)
            ckpt_layout_map_add(&m, tk[i] >> 32, tk[i] & UINT32_MAX);
        ckpt_layout_map_end(&m);
    }
    if (m.b.oom)
        return -ENOMEM;
    *l = (ckpt_index_layout){ name, c->layout_pieces, d,
                              ckpt_pieces_str(all, file),
                              (const uint8_t *)m.b.p, m.b.len };
    return d == c->layout ? 0 : 1;
}

int ckpt_reuse_layouts(const ckpt_pieces *all, const ckpt_plan *plan,
                       char *const *names, const ckpt_reuse_plan *plans,
                       size_t n, ckpt_index_layout **out, size_t *nout,
                       ckpt_error *err)
{
    *out = NULL;
    *nout = 0;
    for (size_t i = 0; i < plan->npieces; i++)
        if (plan->kept_as[i] != i)
            return 0;                   /* a replica */
    if (plan->ntensors > UINT32_MAX || plan->npieces != all->n)
        return 0;
    uint64_t *tk = malloc((all->n ? all->n : 1) * sizeof *tk);
    ckpt_index_layout *v = calloc(n ? n : 1, sizeof *v);
    int rc = tk && v ? 0 : -ENOMEM;
    for (size_t t = 0; !rc && t < plan->ntensors; t++)
        for (size_t c = 0; c < plan->tensors[t].nchunks; c++)
            tk[plan->tensors[t].chunks[c]] = (uint64_t)t << 32 |
                                             (c & UINT32_MAX);
    size_t k = 0, base = n;         /* the last plan whose map is runs */
    for (; !rc && k < n; k++) {
        rc = plan_layout(all, tk, names[k], &plans[k],
                         base < n ? &plans[base] : NULL, base, &v[k]);
        if (!rc && ckpt_layout_map_is_copy(v[k].map, v[k].len,
                                           &(uint64_t){ 0 },
                                           &(int64_t){ 0 }) == 0)
            base = k;
    }
    free(tk);
    if (rc) {
        ckpt_reuse_layouts_free(v, k);
        return rc < 0 ? ckpt_err(err, rc, "out of memory") : 0;
    }
    *out = v;
    *nout = n;
    return 0;
}
