/*
 * delta.c - the base checkpoints of a delta checkpoint (see delta.h).
 *
 * Each base is an entry: its index (loaded: tensors, files, metadata),
 * its chunks' frames once asked for, its shard files once opened, and its
 * own bases (an entry list of their own).  One mutex per list guards the
 * lazy loads; frame bytes are read and decoded outside it.
 */
#include "format/delta.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec/xorframe.h"
#include "common/confine.h"
#include "common/error.h"
#include "common/filemap.h"
#include "common/fileio.h"

typedef struct entry {
    int64_t id;
    char *path;                 /* relative to the root */
    char *identity;
    char *dir;                  /* root/path */
    ckpt_index *ix;
    ckpt_index_data d;
    ckpt_frame_rec ***frames;   /* per tensor, per chunk, lazily */
    int *fds;                   /* per file, -1 until opened */
    ckpt_smap *maps;            /* per file, mapped when its fd opens:
                                   coded frames decode in place when
                                   their bytes are in the page cache */
    ckpt_confine conf;
    struct ckpt_bases *sub;     /* its own bases, or NULL */
} entry;

struct ckpt_bases {
    pthread_mutex_t mu;
    entry *v;
    size_t n;
    ckpt_index_base *list;      /* what ckpt_bases_list gives */
    int64_t top;
};

/* The identities on the chain being opened, for cycles. */
typedef struct chain {
    const char *ident[CKPT_MAX_BASE_DEPTH + 1];
    int n;
} chain;

const char *ckpt_index_identity(const ckpt_index_data *d)
{
    for (size_t i = 0; i < d->nmeta; i++)
        if (strcmp(d->meta[i].key, "identity") == 0)
            return d->meta[i].value;
    return NULL;
}

static void entry_free(entry *e)
{
    for (size_t t = 0; e->frames && t < e->d.ntensors; t++) {
        for (size_t c = 0; e->frames[t] && c < e->d.tensors[t].nchunks; c++)
            free(e->frames[t][c]);
        free(e->frames[t]);
    }
    free(e->frames);
    for (size_t i = 0; e->fds && i < e->d.nfiles; i++) {
        if (e->maps)
            ckpt_smap_close(&e->maps[i]);
        if (e->fds[i] >= 0)
            close(e->fds[i]);
    }
    free(e->fds);
    free(e->maps);
    ckpt_index_data_free(&e->d);
    ckpt_index_close(e->ix);
    ckpt_confine_close(&e->conf);
    ckpt_bases_free(e->sub);
    free(e->path);
    free(e->identity);
    free(e->dir);
}

void ckpt_bases_free(ckpt_bases *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->n; i++)
        entry_free(&b->v[i]);
    free(b->v);
    free(b->list);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

const ckpt_index_base *ckpt_bases_list(const ckpt_bases *b, size_t *n)
{
    *n = b ? b->n : 0;
    return b ? b->list : NULL;
}

int64_t ckpt_bases_top(const ckpt_bases *b)
{
    return b ? b->top : 0;
}

/* The directory holding `dir` (its root), resolved. */
static int root_of(const char *dir, char *out, ckpt_error *err)
{
    char real[PATH_MAX];
    if (!realpath(dir, real))
        return ckpt_err_sys(err, -errno, "%s", dir);
    char *slash = strrchr(real, '/');
    if (slash == real)
        slash[1] = '\0';
    else
        *slash = '\0';
    strcpy(out, real);
    return 0;
}

/* A base's recorded path: one name of the root, not "." or "..". */
static int plain_name(const char *p)
{
    return p && *p && !strchr(p, '/') && strcmp(p, ".") && strcmp(p, "..");
}

/* Checks that root/name is a directory directly in `root` (links
 * resolved) and sets e->dir. */
static int place_entry(entry *e, const char *root, const char *owner,
                       ckpt_error *err)
{
    char full[PATH_MAX], real[PATH_MAX], parent[PATH_MAX];
    if (!plain_name(e->path))
        return ckpt_err(err, -EXDEV, "%s: base '%s' is outside its root "
                        "(a base is named by one name of the root)", owner,
                        e->path);
    int rc = ckpt_path_join(full, sizeof full, root, e->path, err);
    if (rc)
        return rc;
    if (!realpath(full, real)) {
        int e2 = errno;
        if (e2 == ENOENT)
            return ckpt_err(err, -ENOENT, "%s: base checkpoint '%s' is "
                            "missing (%s)", owner, e->path, full);
        return ckpt_err_sys(err, -e2, "%s: base checkpoint '%s'", owner,
                            full);
    }
    rc = root_of(real, parent, err);
    if (!rc && strcmp(parent, root) != 0)
        rc = ckpt_err(err, -EXDEV, "%s: base '%s' leads to %s, outside the "
                      "root %s", owner, e->path, real, root);
    if (!rc && !(e->dir = strdup(full)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    return rc;
}

static int open_list(ckpt_bases **out, const char *root,
                     const ckpt_index_base *rows, size_t n, chain *ch,
                     const char *owner, entry *pre, ckpt_error *err);

/* Opens e->dir's index and loads its tensors (e->dir/index.db). */
static int open_index(entry *e, const char *owner, ckpt_error *err)
{
    char ixp[PATH_MAX];
    int rc = ckpt_path_join(ixp, sizeof ixp, e->dir, "index.db", err);
    if (rc)
        return rc;
    if (access(ixp, F_OK) != 0)
        return ckpt_err(err, -ENOENT, "%s: base checkpoint '%s' is missing "
                        "or not committed (no %s)", owner, e->path, ixp);
    rc = ckpt_index_open(&e->ix, ixp, err);
    if (!rc)
        rc = ckpt_index_load_tensors(e->ix, &e->d, err);
    if (rc)
        return ckpt_err_wrap(err, rc, "%s: base '%s'", owner, e->path);
    return 0;
}

/* Opens e->dir's index unless it is open (a save's base, opened once to
 * read its identity), checks its identity and the chain, and opens its
 * own bases. */
static int open_entry(entry *e, const char *root, chain *ch,
                      const char *owner, ckpt_error *err)
{
    int rc = e->ix ? 0 : open_index(e, owner, err);
    if (rc)
        return rc;
    const char *have = ckpt_index_identity(&e->d);
    if (!have || strcmp(have, e->identity) != 0)
        return ckpt_err(err, -ESTALE, "%s: base checkpoint '%s' changed "
                        "since the delta was saved (identity %s, recorded "
                        "%s)", owner, e->path, have ? have : "none",
                        e->identity);
    for (int i = 0; i < ch->n; i++)
        if (strcmp(ch->ident[i], e->identity) == 0)
            return ckpt_err(err, -ELOOP, "%s: base '%s' is a reference "
                            "cycle: it is one of its own bases", owner,
                            e->path);
    if (ch->n >= CKPT_MAX_BASE_DEPTH)
        return ckpt_err(err, -ELOOP, "%s: base '%s': bases nest deeper than "
                        "%d", owner, e->path, CKPT_MAX_BASE_DEPTH);
    e->frames = calloc(e->d.ntensors + 1, sizeof *e->frames);
    e->fds = malloc((e->d.nfiles + 1) * sizeof *e->fds);
    e->maps = calloc(e->d.nfiles + 1, sizeof *e->maps);
    if (!e->frames || !e->fds || !e->maps)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < e->d.nfiles; i++)
        e->fds[i] = -1;
    rc = ckpt_confine_open(&e->conf, e->dir, 0, err);
    if (rc)
        return rc;
    ckpt_index_base *rows;
    size_t nrows;
    rc = ckpt_index_bases(e->ix, &rows, &nrows, err);
    if (rc || nrows == 0)
        return rc;
    ch->ident[ch->n++] = e->identity;
    rc = open_list(&e->sub, root, rows, nrows, ch, e->dir, NULL, err);
    ch->n--;
    ckpt_index_bases_free(rows, nrows);
    return rc;
}

static int entry_init(entry *e, const ckpt_index_base *row)
{
    memset(e, 0, sizeof *e);
    e->conf.fd = e->conf.blobs_fd = -1;
    e->id = row->id;
    e->path = strdup(row->path);
    e->identity = strdup(row->identity);
    return e->path && e->identity ? 0 : -ENOMEM;
}

static ckpt_bases *bases_new(size_t n)
{
    ckpt_bases *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    pthread_mutex_init(&b->mu, NULL);
    b->v = calloc(n + 1, sizeof *b->v);
    b->list = calloc(n + 1, sizeof *b->list);
    if (!b->v || !b->list) {
        ckpt_bases_free(b);
        return NULL;
    }
    return b;
}

/* Opens the bases `rows`; with pre, the last row's index is pre's (open,
 * its tensors loaded), which it takes. */
static int open_list(ckpt_bases **out, const char *root,
                     const ckpt_index_base *rows, size_t n, chain *ch,
                     const char *owner, entry *pre, ckpt_error *err)
{
    ckpt_bases *b = bases_new(n);
    if (!b)
        return ckpt_err(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        entry *e = &b->v[b->n];
        if (entry_init(e, &rows[i])) {
            entry_free(e);
            rc = ckpt_err(err, -ENOMEM, "out of memory");
            break;
        }
        b->n++;
        b->list[i] = (ckpt_index_base){ e->id, e->path, e->identity };
        if (e->id > b->top)
            b->top = e->id;
        if (pre && i == n - 1) {
            e->ix = pre->ix;
            e->d = pre->d;
            pre->ix = NULL;
            memset(&pre->d, 0, sizeof pre->d);
        }
        rc = place_entry(e, root, owner, err);
        if (!rc)
            rc = open_entry(e, root, ch, owner, err);
    }
    if (rc) {
        ckpt_bases_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

int ckpt_bases_open(ckpt_bases **out, const char *dir, ckpt_index *ix,
                    const char *identity, ckpt_error *err)
{
    *out = NULL;
    ckpt_index_base *rows;
    size_t n;
    int rc = ckpt_index_bases(ix, &rows, &n, err);
    if (rc || n == 0)
        return rc;
    char root[PATH_MAX];
    rc = root_of(dir, root, err);
    chain ch = { .n = 0 };
    if (identity)
        ch.ident[ch.n++] = identity;
    if (!rc)
        rc = open_list(out, root, rows, n, &ch, dir, NULL, err);
    ckpt_index_bases_free(rows, n);
    return rc;
}

int ckpt_bases_for_save(ckpt_bases **out, const char *save_dir,
                        const char *base, ckpt_error *err)
{
    *out = NULL;
    char root[PATH_MAX], broot[PATH_MAX], real[PATH_MAX];
    int rc = root_of(save_dir, root, err);
    if (rc)
        return rc;
    if (!realpath(base, real))
        return ckpt_err_sys(err, errno == ENOENT ? -ENOENT : -errno,
                            "base checkpoint %s", base);
    rc = root_of(real, broot, err);
    if (rc)
        return rc;
    if (strcmp(root, broot) != 0)
        return ckpt_err(err, -EXDEV, "base checkpoint %s is not in the "
                        "save's root %s (a base must be a sibling of the "
                        "save)", base, root);
    const char *name = strrchr(real, '/') + 1;
    /* The base itself first, to read its bases and identity. */
    ckpt_index_base self = { 0, (char *)name, (char *)"" };
    entry probe;
    if (entry_init(&probe, &self))
        return ckpt_err(err, -ENOMEM, "out of memory");
    rc = place_entry(&probe, root, save_dir, err);
    char ixp[PATH_MAX];
    if (!rc)
        rc = ckpt_path_join(ixp, sizeof ixp, probe.dir, "index.db", err);
    if (!rc && access(ixp, F_OK) != 0)
        rc = ckpt_err(err, -ENOENT, "base %s is not a committed checkpoint "
                      "(no index.db)", base);
    if (!rc)
        rc = ckpt_index_open(&probe.ix, ixp, err);
    if (!rc)
        rc = ckpt_index_load_tensors(probe.ix, &probe.d, err);
    /* The base's entry below takes this open index (read once): the
     * identity it is checked against is the one read here. */
    const char *ident = rc ? NULL : ckpt_index_identity(&probe.d);
    if (!rc && !ident)
        rc = ckpt_err(err, -EINVAL, "base %s has no identity (it was "
                      "committed by a ckptfs without delta saves): save a "
                      "full checkpoint to use as a base", base);
    ckpt_index_base *rows = NULL;
    size_t n = 0;
    if (!rc)
        rc = ckpt_index_bases(probe.ix, &rows, &n, err);
    ckpt_index_base *all = rc ? NULL : calloc(n + 1, sizeof *all);
    if (!rc && !all)
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (!rc) {
        int64_t top = 0;
        for (size_t i = 0; i < n; i++) {
            all[i] = rows[i];
            if (rows[i].id > top)
                top = rows[i].id;
            if (strcmp(rows[i].path, name) == 0)
                rc = ckpt_err(err, -ELOOP, "base %s lists itself as a "
                              "base: a reference cycle", base);
        }
        all[n] = (ckpt_index_base){ top + 1, (char *)name, (char *)ident };
        chain ch = { .n = 0 };
        if (!rc)
            rc = open_list(out, root, all, n + 1, &ch, save_dir, &probe,
                           err);
        if (!rc)
            (*out)->top = top + 1;
    }
    free(all);
    ckpt_index_bases_free(rows, n);
    entry_free(&probe);
    return rc;
}

/* ---------------------------------------------------------------- frames */

void *ckpt_delta_scratch_at(ckpt_delta_scratch *s, int slot, size_t n)
{
    if (slot < 0 || slot >= CKPT_DELTA_SLOTS)
        return NULL;
    if (n > s->cap[slot]) {
        unsigned char *p = realloc(s->buf[slot], n);
        if (!p)
            return NULL;
        s->buf[slot] = p;
        s->cap[slot] = n;
    }
    return s->buf[slot] ? s->buf[slot] : (s->buf[slot] = malloc(1));
}

void ckpt_delta_scratch_free(ckpt_delta_scratch *s)
{
    for (int i = 0; i < CKPT_DELTA_SLOTS; i++)
        free(s->buf[i]);
    memset(s, 0, sizeof *s);
}

/* A buffer of n bytes for level `hops` (which 0: stored bytes, 1: the XOR
 * bytes decoded): from the scratch while it has slots, else malloc'd
 * (*owned). */
static unsigned char *level_buf(ckpt_delta_scratch *sc, int hops, int which,
                                size_t n, int *owned)
{
    int slot = 1 + 2 * hops + which;
    *owned = !sc || slot >= CKPT_DELTA_SLOTS;
    return *owned ? malloc(n ? n : 1) : ckpt_delta_scratch_at(sc, slot, n);
}

static entry *find_entry(ckpt_bases *b, int64_t id)
{
    for (size_t i = 0; b && i < b->n; i++)
        if (b->v[i].id == id)
            return &b->v[i];
    return NULL;
}

static int cmp_dims(const int64_t *a, const int64_t *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* The tensor at loc in e (same fqn, dtype and shape), or -1. */
static long find_tensor(const entry *e, const ckpt_chunk_loc *loc)
{
    size_t lo = 0, hi = e->d.ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(e->d.tensors[mid].fqn, loc->fqn);
        if (c == 0) {
            const ckpt_index_tensor *t = &e->d.tensors[mid];
            if (t->dtype != loc->dtype || t->ndim != loc->ndim ||
                cmp_dims(t->shape, loc->shape, t->ndim))
                return -1;
            return (long)mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* The chunk of tensor t with loc's box (chunks are in row-major order of
 * their offsets), or -1. */
static long find_chunk(const ckpt_index_tensor *t, const ckpt_chunk_loc *loc)
{
    size_t lo = 0, hi = t->nchunks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp_dims(t->chunks[mid].offsets, loc->offsets, t->ndim);
        if (c == 0)
            return cmp_dims(t->chunks[mid].sizes, loc->sizes, t->ndim) ? -1
                                                                 : (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Under b->mu: the frames of the chunk at loc in e (NULL, *nf = 0 when
 * e has none there), and the chunk's file. */
static int chunk_frames(entry *e, const ckpt_chunk_loc *loc,
                        const ckpt_frame_rec **out, uint64_t *nf, int *file,
                        ckpt_error *err)
{
    *out = NULL;
    *nf = 0;
    long t = find_tensor(e, loc);
    if (t < 0)
        return 0;
    int rc = ckpt_index_load_chunks(e->ix, &e->d, (size_t)t, err);
    if (rc)
        return rc;
    ckpt_index_tensor *tt = &e->d.tensors[t];
    long c = find_chunk(tt, loc);
    if (c < 0)
        return 0;
    if (!e->frames[t] &&
        !(e->frames[t] = calloc(tt->nchunks + 1, sizeof *e->frames[t])))
        return ckpt_err(err, -ENOMEM, "out of memory");
    const ckpt_index_chunk *ch = &tt->chunks[c];
    if (!e->frames[t][c]) {
        rc = ckpt_index_load_frames(e->ix, ch->id, ch->nframes, ch->raw_bytes,
                                    &e->frames[t][c], err);
        if (rc)
            return rc;
    }
    *out = e->frames[t][c];
    *nf = ch->nframes;
    *file = ch->file;
    return 0;
}

/* Under b->mu: shard file `file` of e, opened on first use. */
static int entry_fd(entry *e, int file, ckpt_error *err)
{
    if (e->fds[file] >= 0)
        return e->fds[file];
    int fd = ckpt_confine_openat(&e->conf, e->d.files[file].path, err);
    if (fd < 0)
        return ckpt_err_wrap(err, fd, "base '%s': shard file %s", e->path,
                             e->d.files[file].path);
    /* Read as the reader reads its own shards: mostly forward (a hint). */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    ckpt_smap_open(&e->maps[file], fd);
    e->fds[file] = fd;
    return fd;
}

/* Frame seq of the chunk at loc in base id of b, copied, with its shard
 * file's mapping and descriptor (NULL for a ref). */
static int frame_at(ckpt_bases *b, entry *e, const ckpt_chunk_loc *loc,
                    uint64_t seq, ckpt_frame_rec *rec, const ckpt_smap **map,
                    ckpt_error *err)
{
    const ckpt_frame_rec *f;
    uint64_t nf;
    int file = 0;
    pthread_mutex_lock(&b->mu);
    int rc = chunk_frames(e, loc, &f, &nf, &file, err);
    if (!rc && seq >= nf)
        rc = ckpt_err(err, -EIO, "base '%s' has no frame %llu of tensor "
                      "'%s' in that chunk: not the base the delta was made "
                      "against", e->path, (unsigned long long)seq, loc->fqn);
    if (!rc) {
        *rec = f[seq];
        int fd = rec->codec == CKPT_CODEC_REF ? -1 : entry_fd(e, file, err);
        if (fd < -1)
            rc = fd;
        *map = fd < 0 ? NULL : &e->maps[file];
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

static int read_at(ckpt_bases *b, int64_t id, const ckpt_chunk_loc *loc,
                   uint64_t seq, uint64_t raw_offset, uint64_t raw_size,
                   void *dst, ckpt_codec_ctx *c, ckpt_delta_scratch *sc,
                   int hops, uint64_t *sum, ckpt_error *err);

/* Produces rec's raw bytes (rec_size bytes) into dst; its stored bytes
 * are decoded in place from the shard's mapping when they are in the page
 * cache (as the reader does with its own frames: a pread's copy cost a
 * warm load of an embedding delta a fifth of its CPU), else read. */
static int decode_rec(entry *e, const ckpt_chunk_loc *loc, uint64_t seq,
                      const ckpt_frame_rec *rec, const ckpt_smap *map,
                      void *dst,
                      ckpt_codec_ctx *c, ckpt_delta_scratch *sc, int hops,
                      ckpt_error *err)
{
    if (rec->codec == CKPT_CODEC_REF)
        return read_at(e->sub, rec->base, loc, seq, rec->raw_offset,
                       rec->raw_size, dst, c, sc, hops + 1, NULL, err);
    if (rec->codec == CKPT_CODEC_RAW) {
        if (rec->stored_size != rec->raw_size)
            return ckpt_err(err, -EIO, "raw frame stores %llu bytes for %llu",
                            (unsigned long long)rec->stored_size,
                            (unsigned long long)rec->raw_size);
        return ckpt_pread_full(map->fd, dst, rec->raw_size,
                               rec->file_offset, e->dir, err);
    }
    int own_src = 0, own_tmp = 0, rc = 0;
    unsigned char *tmp = NULL, *buf = NULL;
    const unsigned char *src = ckpt_smap_resident(map, rec->file_offset,
                                                  rec->stored_size);
    if (!src) {
        buf = level_buf(sc, hops, 0, rec->stored_size, &own_src);
        rc = buf ? ckpt_pread_full(map->fd, buf, rec->stored_size,
                                   rec->file_offset, e->dir, err)
                 : ckpt_err(err, -ENOMEM, "out of memory");
        src = buf;
    }
    if (rc) {
    } else if (rec->codec != CKPT_CODEC_XOR) {
        rc = ckpt_codec_decode(c, rec->codec, src, rec->stored_size, dst,
                               rec->raw_size, err);
    } else if (!(tmp = level_buf(sc, hops, 1, rec->raw_size, &own_tmp))) {
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    } else {
        /* the base frame straight into dst, the XOR applied over it */
        rc = read_at(e->sub, rec->base, loc, seq, rec->raw_offset,
                     rec->raw_size, dst, c, sc, hops + 1, NULL, err);
        if (!rc)
            rc = ckpt_xor_apply(c, src, rec->stored_size, dst, tmp,
                                rec->raw_size, err);
    }
    if (own_tmp)
        free(tmp);
    if (own_src)
        free(buf);
    return rc;
}

static int read_at(ckpt_bases *b, int64_t id, const ckpt_chunk_loc *loc,
                   uint64_t seq, uint64_t raw_offset, uint64_t raw_size,
                   void *dst, ckpt_codec_ctx *c, ckpt_delta_scratch *sc,
                   int hops, uint64_t *sum, ckpt_error *err)
{
    entry *e = find_entry(b, id);
    if (!e)
        return ckpt_err(err, -EIO, "a frame of tensor '%s' names base %lld, "
                        "which its checkpoint does not list", loc->fqn,
                        (long long)id);
    if (hops > CKPT_MAX_BASE_DEPTH)
        return ckpt_err(err, -ELOOP, "tensor '%s': frame %llu's bases "
                        "nest deeper than %d (a reference cycle?)", loc->fqn,
                        (unsigned long long)seq, CKPT_MAX_BASE_DEPTH);
    ckpt_frame_rec rec;
    const ckpt_smap *map;
    int rc = frame_at(b, e, loc, seq, &rec, &map, err);
    if (!rc && (rec.raw_offset != raw_offset || rec.raw_size != raw_size))
        rc = ckpt_err(err, -EIO, "base '%s': frame %llu of tensor '%s' "
                      "holds raw bytes [%llu,+%llu), the delta's "
                      "[%llu,+%llu)", e->path, (unsigned long long)seq,
                      loc->fqn, (unsigned long long)rec.raw_offset,
                      (unsigned long long)rec.raw_size,
                      (unsigned long long)raw_offset,
                      (unsigned long long)raw_size);
    if (!rc)
        rc = decode_rec(e, loc, seq, &rec, map, dst, c, sc, hops, err);
    /* Checked where the bytes are the caller's result; bytes an xor
     * frame is applied over are checked as the result of that. */
    if (!rc && sum && ckpt_checksum(dst, raw_size) != rec.checksum)
        rc = ckpt_err(err, -EIO, "checksum mismatch (index has %016llx): "
                      "the base's shard is corrupt",
                      (unsigned long long)rec.checksum);
    if (!rc && sum)
        *sum = rec.checksum;
    if (rc && hops == 0)
        return ckpt_err_wrap(err, rc, "base '%s' (%s), tensor '%s' frame "
                             "%llu", e->path, e->dir, loc->fqn,
                             (unsigned long long)seq);
    return rc;
}

int ckpt_bases_read(ckpt_bases *b, int64_t id, const ckpt_chunk_loc *loc,
                    uint64_t seq, uint64_t raw_offset, uint64_t raw_size,
                    void *dst, ckpt_codec_ctx *c, ckpt_delta_scratch *sc,
                    uint64_t *sum, ckpt_error *err)
{
    return read_at(b, id, loc, seq, raw_offset, raw_size, dst, c, sc, 0,
                   sum, err);
}

int ckpt_bases_leading_planes(ckpt_bases *b, int64_t id,
                              const ckpt_chunk_loc *loc, uint64_t seq,
                              uint64_t raw_size, int max_coded, void *dst,
                              int *layout, ckpt_codec_ctx *c,
                              ckpt_delta_scratch *sc, ckpt_error *err)
{
    *layout = 0;
    entry *e = find_entry(b, id);
    if (!e)
        return 0;
    ckpt_frame_rec rec;
    const ckpt_smap *map;
    int rc = frame_at(b, e, loc, seq, &rec, &map, err);
    if (rc || !map || rec.raw_size != raw_size)
        return rc;
    /* the frame's bytes in place when they are in the page cache, as
     * decode_rec takes them; else its header, then the planes, read */
    const unsigned char *src = ckpt_smap_resident(map, rec.file_offset,
                                                  rec.stored_size);
    unsigned char head[CKPT_BG_HEAD_MAX];
    size_t hn = rec.stored_size < sizeof head ? rec.stored_size : sizeof head;
    size_t prefix = 0;
    int np = 0;
    if (!src)
        rc = ckpt_pread_full(map->fd, head, hn, rec.file_offset, e->dir, err);
    if (!rc)
        np = ckpt_codec_leading_planes(rec.codec, src ? src : head, hn,
                                       raw_size, max_coded, &prefix, layout);
    if (!rc && np && prefix > rec.stored_size)
        np = 0;
    unsigned char *buf = NULL;
    if (!rc && np && !src &&
        !(src = buf = ckpt_delta_scratch_at(sc, 1, prefix)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (!rc && buf)
        rc = ckpt_pread_full(map->fd, buf, prefix, rec.file_offset, e->dir,
                             err);
    if (!rc && np)
        rc = ckpt_codec_decode_leading(c, rec.codec, src, prefix, raw_size,
                                       np, dst, err);
    if (rc)
        return ckpt_err_wrap(err, rc, "base '%s', tensor '%s' frame %llu",
                             e->path, loc->fqn, (unsigned long long)seq);
    return np;
}

/* Where frame seq of base id's chunk at loc gets its bytes: its holder
 * and XOR depth. */
static int frame_depth(ckpt_bases *b, int64_t id, const ckpt_chunk_loc *loc,
                       uint64_t seq, int hops, int *depth, ckpt_error *err)
{
    entry *e = find_entry(b, id);
    if (!e || hops > CKPT_MAX_BASE_DEPTH)
        return ckpt_err(err, -EIO, "tensor '%s': a base frame names base "
                        "%lld, which is not listed", loc->fqn, (long long)id);
    ckpt_frame_rec rec;
    const ckpt_smap *map;
    int rc = frame_at(b, e, loc, seq, &rec, &map, err);
    if (rc)
        return rc;
    if (rec.codec != CKPT_CODEC_REF && rec.codec != CKPT_CODEC_XOR) {
        *depth = 0;
        return 0;
    }
    rc = frame_depth(e->sub, rec.base, loc, seq, hops + 1, depth, err);
    if (!rc && rec.codec == CKPT_CODEC_XOR)
        ++*depth;
    return rc;
}

int ckpt_bases_chunk(ckpt_bases *b, const ckpt_chunk_loc *loc,
                     ckpt_base_frame **out, size_t *n, ckpt_error *err)
{
    *out = NULL;
    *n = 0;
    entry *e = find_entry(b, b->top);
    if (!e)
        return 0;
    const ckpt_frame_rec *f;
    uint64_t nf;
    int file;
    pthread_mutex_lock(&b->mu);
    int rc = chunk_frames(e, loc, &f, &nf, &file, err);
    ckpt_frame_rec *copy = NULL;
    if (!rc && nf && !(copy = malloc(nf * sizeof *copy)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (!rc && nf)
        memcpy(copy, f, nf * sizeof *copy);
    pthread_mutex_unlock(&b->mu);
    ckpt_base_frame *v = NULL;
    if (!rc && nf && !(v = calloc(nf, sizeof *v)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    for (uint64_t k = 0; !rc && k < nf; k++) {
        const ckpt_frame_rec *r = &copy[k];
        int whole = r->codec != CKPT_CODEC_REF && r->codec != CKPT_CODEC_XOR;
        v[k] = (ckpt_base_frame){ r->raw_offset, r->raw_size, r->checksum,
                                  b->top, 0, whole ? r->stored_size : 0 };
        if (r->codec == CKPT_CODEC_REF || r->codec == CKPT_CODEC_XOR)
            rc = frame_depth(e->sub, r->base, loc, k, 0, &v[k].depth, err);
        if (!rc && r->codec == CKPT_CODEC_REF)
            v[k].holder = r->base;   /* the same id in the save's bases */
        else if (!rc && r->codec == CKPT_CODEC_XOR)
            v[k].depth++;
    }
    free(copy);
    if (rc) {
        free(v);
        return ckpt_err_wrap(err, rc, "base '%s', tensor '%s'", e->path,
                             loc->fqn);
    }
    *out = v;
    *n = nf;
    return 0;
}
