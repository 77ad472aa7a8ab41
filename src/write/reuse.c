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
 *
 * Each plan is read once along its map, on a thread per CPU: its digest,
 * its packed records (each whole, holding its chunk's raw bytes), its
 * pieces' chunks and its tensors' totals.  The index's records are then
 * built tensor by tensor on the same threads, a few tensors ahead of the
 * index writer that inserts them in order.
 */
#include "write/reuse.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
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

/* One tensor's totals of its chunks' records (summed by one worker). */
typedef struct ckpt_reuse_sum {
    uint64_t stored, nframes;
    uint32_t mask;
} ckpt_reuse_sum;

/* Where a chunk's record is: plan `plan1` - 1's packed records [pos,
 * pos + len).  Written by the plans' scans, each chunk's by its piece's
 * (all zero bytes, as calloc leaves them: no piece yet). */
typedef struct chunk_slot {
    _Atomic uint32_t plan1;
    _Atomic uint32_t pos, len;
} chunk_slot;

/* A tensor's packed records, built on the pool for the index writer. */
typedef struct blob_task {
    ckpt_reuse *r;
    size_t t;
    ckpt_strbuf b;
    ckpt_taskgroup g;
} blob_task;

struct ckpt_reuse {
    char from[NAME_MAX + 1];
    ckpt_index_file_name *files;    /* the previous index's, by id - 1 */
    char **file_writer;             /* owned strings of files[].writer */
    size_t nfiles;
    unsigned char *need_sync;       /* per file */
    ckpt_index_packed_tensor *tensors;
    size_t ntensors;
    uint8_t *pre;                   /* per tensor: its digest's prefix, */
    size_t *pre_at;                 /* at pre + pre_at[t], to pre_at[t+1] */
    uint64_t *chunk0;               /* per tensor: its first chunk's slot */
    uint64_t nchunks;
    prev_layout *layouts;           /* by plan name, as the plans */
    size_t nplans;
    ckpt_plan_packed *plans;
    chunk_slot *slot;               /* per chunk */
    ckpt_pool *pool;                /* scans plans, builds the records */
    ckpt_reuse_sum *sums;           /* per pool worker + 1, per tensor */
    blob_task *window;              /* the records being built */
    size_t nwindow, next_blob;
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
    r->slot = calloc(n ? n : 1, sizeof *r->slot);
    return r->slot ? 0 : -ENOMEM;
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

/* What a plan's scan found wrong (scan_task.why). */
enum {
    SCAN_LAYOUT = 1,    /* its map is damaged or not its pieces' */
    SCAN_RECORDS,       /* its packed records are damaged */
    SCAN_RAW,           /* a piece's frames do not hold its box's bytes */
};

/* One plan's scan (scan_plan), run on the pool. */
typedef struct scan_task {
    ckpt_reuse *r;
    size_t k;
    const char *file;   /* its shard, as the previous index names it */
    size_t lfile;       /* its length, as the digest takes it */
    uint64_t digest;    /* of the pieces its map describes */
    size_t pos;         /* its next record */
    uint64_t end;       /* where its records' frames end in its shard */
    ckpt_reuse_sum *sum;    /* the worker's totals per tensor */
    int why;            /* 0, or what is wrong */
    size_t bad_t;       /* SCAN_RAW: the tensor and chunk */
    uint64_t bad_c;
    ckpt_taskgroup *g;
} scan_task;

/* Piece j of plan a->k, chunk c of tensor t by its map: its step of the
 * digest (as its writer computes it of its own, layout.h), its record
 * (the next one, at a->pos: it must hold the box's raw bytes), the
 * chunk's slot (chunks_hit checks that no other piece took it), and its
 * record's totals.  0, or 1 with a->why. */
static int scan_piece(void *arg, uint64_t j, size_t t, uint64_t c)
{
    (void)j;                    /* the records are in piece order */
    scan_task *a = arg;
    ckpt_reuse *r = a->r;
    const ckpt_index_packed_tensor *pt = &r->tensors[t];
    const ckpt_plan_packed *p = &r->plans[a->k];
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
    ckpt_grid_box(pt->ndim, pt->shape, pt->grid, c, off, size);
    a->digest = ckpt_layout_step_pre(a->digest, r->pre + r->pre_at[t],
                                     r->pre_at[t + 1] - r->pre_at[t],
                                     pt->ndim, off, size, a->file, a->lfile);
    size_t at = a->pos;
    ckpt_pack_chunk rec;
    if (a->pos >= p->len || p->data[a->pos] != 0 ||
        ckpt_pack_get(p->data, p->len, &a->pos, &rec, NULL, 0)) {
        a->why = SCAN_RECORDS;
        return 1;
    }
    uint64_t raw = ckpt_dtype_size(pt->dtype);
    for (int d = 0; d < pt->ndim; d++)
        raw *= (uint64_t)size[d];
    if (rec.raw_bytes != raw) {
        a->why = SCAN_RAW;
        a->bad_t = t;
        a->bad_c = c;
        return 1;
    }
    /* A plain store (a locked exchange waits for the line): a chunk hit
     * twice leaves another one empty, which chunks_hit finds. */
    chunk_slot *sl = &r->slot[r->chunk0[t] + c];
    atomic_store_explicit(&sl->plan1, (uint32_t)a->k + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&sl->pos, (uint32_t)at, memory_order_relaxed);
    atomic_store_explicit(&sl->len, (uint32_t)(a->pos - at),
                          memory_order_relaxed);
    if (rec.file_end > a->end)
        a->end = rec.file_end;
    ckpt_reuse_sum *s = &a->sum[t];
    s->stored += rec.stored_bytes;
    s->nframes += rec.nframes;
    s->mask |= rec.codec_mask;
    return 0;
}

/* Plan a->k, scanned along its map; a->why stays 0 when its claimed
 * digest is the digest of the pieces its map in the previous index
 * describes - the map is then the plan's pieces, whatever that index
 * holds - and its records are whole, one per piece, each holding its
 * chunk's raw bytes. */
static void scan_plan(scan_task *a)
{
    ckpt_reuse *r = a->r;
    const ckpt_plan_packed *p = &r->plans[a->k];
    const prev_layout *l = &r->layouts[a->k];
    if (p->len > UINT32_MAX || a->k >= UINT32_MAX) {
        a->why = SCAN_RECORDS;
        return;
    }
    a->file = l->file_id ? r->files[l->file_id - 1].path : NULL;
    a->lfile = a->file ? strnlen(a->file, 4096) : 0;
    a->digest = CKPT_LAYOUT_SEED;
    if (each_piece(r, a->k, scan_piece, a)) {
        if (!a->why)
            a->why = SCAN_LAYOUT;
        return;
    }
    if (a->digest != p->claim.layout)
        a->why = SCAN_LAYOUT;
    else if (a->pos != p->len)
        a->why = SCAN_RECORDS;
}

static void scan_run(void *arg, int worker)
{
    scan_task *a = arg;
    a->sum = a->r->sums + (size_t)(worker + 1) * a->r->ntensors;
    scan_plan(a);
    ckpt_tg_done(a->g);
}

/* Every plan scanned (scan_plan) on the pool, each piece placed in its
 * chunk's slot, each plan's end into ends[k]: 0; 1 with why for the
 * first plan (in plan order) found wrong; or -ENOMEM. */
static int scan_plans(ckpt_reuse *r, char *const *names, size_t n,
                      uint64_t *ends, char *why, size_t cap)
{
    size_t workers = (size_t)ckpt_pool_threads(r->pool);
    scan_task *v = calloc(n ? n : 1, sizeof *v);
    r->sums = calloc((workers + 1) * (r->ntensors ? r->ntensors : 1),
                     sizeof *r->sums);
    if (!v || !r->sums) {
        free(v);
        return -ENOMEM;
    }
    ckpt_taskgroup g;
    ckpt_tg_init(&g);
    for (size_t k = 0; k < n; k++)
        v[k] = (scan_task){ .r = r, .k = k, .g = &g };
    if (n)
        ckpt_pool_run_tasks(r->pool, scan_run, v, n, sizeof *v, &g);
    ckpt_tg_destroy(&g);
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        const scan_task *a = &v[k];
        ends[k] = a->end;
        if (a->why == SCAN_LAYOUT)
            rc = skip(why, cap, "plan %s: the layout %s records for it is "
                      "not its pieces' (damaged)", names[k], r->from);
        else if (a->why == SCAN_RECORDS)
            rc = skip(why, cap, "the packed records of plan %s are "
                      "damaged", names[k]);
        else if (a->why == SCAN_RAW)
            rc = skip(why, cap, "plan %s: the frames of tensor '%s' chunk "
                      "%llu do not hold its box's bytes", names[k],
                      r->tensors[a->bad_t].fqn,
                      (unsigned long long)a->bad_c);
    }
    free(v);
    return rc;
}

/* Each tensor's part of its pieces' digest steps (ckpt_layout_prefix),
 * made once for the scans: 0 or -ENOMEM. */
static int make_prefixes(ckpt_reuse *r)
{
    uint8_t one[CKPT_LAYOUT_PRE_MAX];
    size_t total = 0;
    r->pre_at = calloc(r->ntensors + 1, sizeof *r->pre_at);
    if (!r->pre_at)
        return -ENOMEM;
    for (size_t t = 0; t < r->ntensors; t++) {
        const ckpt_index_packed_tensor *pt = &r->tensors[t];
        total += ckpt_layout_prefix(one, pt->fqn, pt->dtype, pt->ndim,
                                    pt->shape);
        r->pre_at[t + 1] = total;
    }
    if (!(r->pre = malloc(total ? total : 1)))
        return -ENOMEM;
    for (size_t t = 0; t < r->ntensors; t++) {
        const ckpt_index_packed_tensor *pt = &r->tensors[t];
        ckpt_layout_prefix(r->pre + r->pre_at[t], pt->fqn, pt->dtype,
                           pt->ndim, pt->shape);
    }
    return 0;
}

/* 1 when the plans' pieces, as many as the chunks, left no chunk's slot
 * empty: then each took a chunk of its own. */
static int chunks_hit(const ckpt_reuse *r, size_t n)
{
    uint64_t pieces = 0;
    for (size_t k = 0; k < n; k++)
        pieces += r->layouts[k].pieces;
    if (pieces != r->nchunks)
        return 0;
    for (uint64_t c = 0; c < r->nchunks; c++)
        if (!atomic_load_explicit(&r->slot[c].plan1, memory_order_relaxed))
            return 0;
    return 1;
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
    uint64_t *ends = calloc(n ? n : 1, sizeof *ends);
    if (!r->plans || !ends) {
        free(ends);
        return -ENOMEM;
    }
    rc = ckpt_planfile_read_packed_many(pending, names, n, 0, r->plans, err);
    for (size_t k = 0; !rc && k < n; k++)
        rc = check_plan(r, k, names[k], why, cap);
    if (!rc)
        rc = chunk_slots(r);
    if (!rc)
        rc = make_prefixes(r);
    if (!rc)
        rc = ckpt_pool_create(&r->pool, 0, err);
    if (!rc)
        rc = scan_plans(r, names, n, ends, why, cap);
    if (!rc && !chunks_hit(r, n))
        rc = skip(why, cap, "the layouts of %s hit a chunk twice or leave "
                  "one out", r->from);
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

/* How many chunks ahead build_blob fetches a record. */
#define BLOB_AHEAD 16

/* Tensor t's packed records into b: per chunk, the record of the piece
 * that is the chunk (scanned: whole, its raw bytes its box's), its file
 * id put in. */
static void build_blob(const ckpt_reuse *r, size_t t, ckpt_strbuf *b)
{
    const chunk_slot *slot = r->slot + r->chunk0[t];
    uint64_t n = r->tensors[t].nchunks;
    for (uint64_t c = 0; c < n; c++) {
        /* The records are all over the plans: the one a few chunks on
         * is fetched while this one is copied. */
        if (c + BLOB_AHEAD < n) {
            const chunk_slot *q = &slot[c + BLOB_AHEAD];
            size_t qk = atomic_load_explicit(&q->plan1,
                                             memory_order_relaxed) - 1;
            __builtin_prefetch(r->plans[qk].data +
                               atomic_load_explicit(&q->pos,
                                                    memory_order_relaxed));
        }
        size_t k = atomic_load_explicit(&slot[c].plan1,
                                        memory_order_relaxed) - 1;
        size_t pos = atomic_load_explicit(&slot[c].pos, memory_order_relaxed);
        size_t len = atomic_load_explicit(&slot[c].len, memory_order_relaxed);
        ckpt_varint_put(b, (uint64_t)r->layouts[k].file_id);
        ckpt_strbuf_add(b, r->plans[k].data + pos + 1, len - 1);
    }
}

static void blob_run(void *arg, int worker)
{
    (void)worker;
    blob_task *v = arg;
    build_blob(v->r, v->t, &v->b);
    ckpt_tg_done(&v->g);
}

/* Tensor t's records built on the pool into window slot t % n. */
static void blob_submit(ckpt_reuse *r, size_t t)
{
    blob_task *v = &r->window[t % r->nwindow];
    v->t = t;
    v->b.len = 0;
    ckpt_tg_add(&v->g, 1);
    if (ckpt_pool_submit(r->pool, blob_run, v))
        blob_run(v, -1);
}

/* The index writer's fill: tensor t's records and totals.  The writer
 * asks for the tensors in order; the pool builds the next ones
 * meanwhile, nwindow at a time. */
static int fill(void *arg, size_t t, ckpt_strbuf *b, uint64_t *stored,
                uint64_t *nframes, uint32_t *mask, ckpt_error *err)
{
    (void)err;
    ckpt_reuse *r = arg;
    size_t workers = (size_t)ckpt_pool_threads(r->pool);
    for (size_t w = 0; w <= workers; w++) {
        const ckpt_reuse_sum *s = &r->sums[w * r->ntensors + t];
        *stored += s->stored;
        *nframes += s->nframes;
        *mask |= s->mask;
    }
    if (t != r->next_blob) {            /* not the writer's order */
        build_blob(r, t, b);
        return 0;
    }
    blob_task *v = &r->window[t % r->nwindow];
    ckpt_tg_wait(&v->g);
    ckpt_strbuf mine = *b;
    *b = v->b;
    v->b = mine;
    r->next_blob = t + 1;
    if (t + r->nwindow < r->ntensors)
        blob_submit(r, t + r->nwindow);
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
    /* Twice the pool's threads (at most 64): one tensor's records being
     * inserted while the next ones are built. */
    size_t n = 2 * (size_t)ckpt_pool_threads(r->pool) + 1;
    if (n > 64)
        n = 64;
    if (!(r->window = calloc(n, sizeof *r->window)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    r->nwindow = n;
    r->next_blob = 0;
    for (size_t i = 0; i < n; i++) {
        r->window[i].r = r;
        ckpt_tg_init(&r->window[i].g);
    }
    for (size_t t = 0; t < n && t < r->ntensors; t++)
        blob_submit(r, t);
    int rc = ckpt_index_write_packs(tmp, dir, &src, meta, nmeta, sync, err);
    for (size_t i = 0; i < n; i++) {    /* what the writer left */
        ckpt_tg_wait(&r->window[i].g);
        ckpt_tg_destroy(&r->window[i].g);
        ckpt_strbuf_free(&r->window[i].b);
    }
    free(r->window);
    r->window = NULL;
    return rc;
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
    free(r->pre);
    free(r->pre_at);
    if (r->pool)
        ckpt_pool_destroy(r->pool);
    free(r->sums);
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
    }
    free(r->plans);
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
