/*
 * commit.c - the commit protocol: claim the commit (format/claim.h: a
 * link(2) onto .pending/commit.claim, atomic on any shared file system;
 * the flock of .pending/commit.lock is kept as an extra where locks work),
 * join the local plans that writers left in <dir>/.pending, validate them
 * with the planner, and publish index.db atomically (written in one
 * transaction and synced once, under a name of this committer's own in .pending/,
 * linked to index.db so that of two committers only one can win,
 * directory synced, .pending moved aside for the next commit or gc to
 * remove: write/spent.h).  On any error nothing is published.
 *
 * The syncs, in order (docs/GUARANTEES.md, "Which sync makes which
 * promise"): every shard a plan names, unless its writer synced it and
 * the plan says so; the index (.pending/index.db.tmp.TOKEN); data/ (the shards' names); then the
 * link, and the checkpoint's directory (index.db's name); then its parent
 * (the checkpoint's own name).  Nothing else: plans, .pending/ and the
 * directory after .pending/ goes need not survive a crash.
 */
#include "ckptfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/confine.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/shape.h"
#include "format/db.h"
#include "format/index.h"
#include "format/planfile.h"
#include "format/claim.h"
#include "format/lease.h"
#include "format/pending.h"
#include "format/model.h"
#include "format/plan.h"
#include "write/writer.h"
#include "write/deltasave.h"
#include "write/supersede.h"
#include "write/reuse.h"
#include "write/spent.h"
#include "common/optsize.h"

void ckpt_commit_opts_init(ckpt_commit_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->sync = 1;
}

typedef struct name_list {
    char **v;
    size_t n, cap;
} name_list;

static void names_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

static int names_add(name_list *l, const char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s)))
        return -ENOMEM;
    l->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

/* Lists the *.plan files of `pending`, sorted. */
static int list_plans(const char *pending, name_list *out, ckpt_error *err)
{
    DIR *d = opendir(pending);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return ckpt_err_sys(err, -errno, "cannot list %s", pending);
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)))
        if (e->d_name[0] != '.' && ends_with(e->d_name, ".plan"))
            rc = names_add(out, e->d_name);
    closedir(d);
    if (rc)
        return ckpt_err(err, rc, "out of memory");
    if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return 0;
}

/* What one plan says of its writer's shard and layout, and where its
 * pieces are in the table: all[first..end). */
typedef ckpt_reuse_plan plan_claim;

/* Reads every plan into one compact table of pieces (a 16k-rank save's
 * plans hold millions) on a thread per CPU, their metadata into m and
 * their claims into claims[plans->n]. */
static int read_plans(const char *pending, const name_list *plans,
                      ckpt_pieces *all, ckpt_manifest *m, plan_claim *claims,
                      ckpt_error *err)
{
    ckpt_plan_synced *synced = calloc(plans->n ? plans->n : 1, sizeof *synced);
    size_t *ends = calloc(plans->n ? plans->n : 1, sizeof *ends);
    int rc = synced && ends ? 0 : ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = ckpt_planfile_read_many(pending, plans->v, plans->n, 0, all, m,
                                     synced, ends, err);
    for (size_t i = 0; rc == 0 && i < plans->n; i++) {
        claims[i].synced = synced[i];
        claims[i].first = i ? ends[i - 1] : 0;
        claims[i].end = ends[i];
    }
    free(synced);
    free(ends);
    return rc;
}

/* The reason recorded for a failed piece of fqn, or NULL. */
static const char *failure_of(const ckpt_manifest *all, const char *fqn)
{
    for (size_t i = 0; i < all->ndeclared; i++)
        if (all->declared[i].value && *all->declared[i].value &&
            strcmp(all->declared[i].key, fqn) == 0)
            return all->declared[i].value;
    return NULL;
}

/* A replica reference (writer.h) read back: the fqn and the region. */
typedef struct replica_ref {
    char *fqn;                /* the key, cut at the mark */
    ckpt_dtype dtype;
    int ndim;
    int64_t dims[3][CKPT_MAX_DIMS];     /* shape, offsets, sizes */
} replica_ref;

/* Parses declaration key `key` when it is a replica reference: 1 (then
 * r->fqn is to be freed), 0 when it is a plain declaration, or -EINVAL. */
static int replica_parse(const char *key, replica_ref *r, ckpt_error *err)
{
    const char *mark = strstr(key, CKPT_REPLICA_MARK);
    if (!mark)
        return 0;
    memset(r, 0, sizeof *r);
    if (!(r->fqn = strdup(key)))
        return ckpt_err(err, -ENOMEM, "out of memory");
    r->fqn[mark - key] = '\0';
    char *f = r->fqn + (mark - key) + strlen(CKPT_REPLICA_MARK);
    char *part[5];            /* split at ';': exactly four parts */
    int n = 0;
    for (char *q = f; q && n < 5; n++) {
        part[n] = q;
        if ((q = strchr(q, ';')))
            *q++ = '\0';
    }
    int nd[3] = { -1, -1, -1 };
    if (n == 4) {
        r->dtype = ckpt_dtype_parse(part[0]);
        for (int k = 0; k < 3; k++)
            nd[k] = ckpt_shape_parse(part[k + 1], r->dims[k], NULL);
    }
    r->ndim = nd[0];
    if (n != 4 || r->dtype == CKPT_DTYPE_INVALID || nd[0] < 0 ||
        nd[1] != nd[0] || nd[2] != nd[0]) {
        ckpt_err(err, -EINVAL, "tensor '%s': a replica reference in a plan "
                 "is damaged", r->fqn);
        free(r->fqn);
        return -EINVAL;
    }
    return 1;
}

/* 1 when piece i of all is the region of r. */
static int replica_matches(const ckpt_pieces *all, size_t i,
                           const replica_ref *r)
{
    const ckpt_pieces_rec *p = &all->v[i];
    if (p->dtype != (int32_t)r->dtype || p->ndim != r->ndim)
        return 0;
    size_t nb = (size_t)r->ndim * sizeof(int64_t);
    int64_t off[CKPT_MAX_DIMS];
    return memcmp(ckpt_pieces_shape(all, i), r->dims[0], nb) == 0 &&
           memcmp(ckpt_pieces_offsets(all, i, off), r->dims[1], nb) == 0 &&
           memcmp(ckpt_pieces_sizes(all, i), r->dims[2], nb) == 0;
}

typedef struct fqn_piece {
    const char *fqn;
    size_t i;
} fqn_piece;

static int cmp_fqn_piece(const void *a, const void *b)
{
    return strcmp(((const fqn_piece *)a)->fqn, ((const fqn_piece *)b)->fqn);
}

/* The refusal of reference r (declared by `writer`): no piece of its
 * fqn, or none of its region (pieces run[0..nrun) are the fqn's). */
static int replica_refuse(const ckpt_pieces *all, const replica_ref *r,
                          const char *writer, const fqn_piece *run,
                          size_t nrun, ckpt_error *err)
{
    char sh[3][CKPT_MAX_DIMS * 21 + 1];
    for (int k = 0; k < 3; k++)
        ckpt_shape_format(sh[k], sizeof sh[k], r->ndim, r->dims[k]);
    char what[4 * sizeof sh[0] + 300];
    snprintf(what, sizeof what, "tensor '%s': writer %s declared its piece "
             "(offsets [%s], sizes [%s], dtype %s, shape [%s]) a replica "
             "another writer holds (user.ckpt.replica), but", r->fqn,
             writer ? writer : "?", sh[1], sh[2], ckpt_dtype_name(r->dtype),
             sh[0]);
    if (nrun == 0)
        return ckpt_err(err, -EINVAL, "%s no writer wrote a piece of it",
                        what);
    size_t i = run[0].i;
    int nd = ckpt_pieces_ndims(&all->v[i]);
    char has[3][CKPT_MAX_DIMS * 21 + 1];
    int64_t off[CKPT_MAX_DIMS];
    ckpt_shape_format(has[0], sizeof has[0], nd, ckpt_pieces_shape(all, i));
    ckpt_shape_format(has[1], sizeof has[1], nd,
                      ckpt_pieces_offsets(all, i, off));
    ckpt_shape_format(has[2], sizeof has[2], nd, ckpt_pieces_sizes(all, i));
    const char *by = ckpt_pieces_str(all, ckpt_pieces_writer(all, i));
    return ckpt_err(err, -EINVAL, "%s none of the %zu piece%s written of it "
                    "has that region and dtype (e.g. writer %s's: offsets "
                    "[%s], sizes [%s], dtype %s, shape [%s])", what, nrun,
                    nrun == 1 ? "" : "s", by ? by : "?", has[1], has[2],
                    ckpt_dtype_name((ckpt_dtype)all->v[i].dtype), has[0]);
}

/* Refuses a replica reference (a piece declared without data, writer.h)
 * that no writer wrote: a piece of the same fqn, dtype, shape, offsets
 * and sizes must be among `all`. */
static int check_replicas(const ckpt_manifest *decl, const ckpt_pieces *all,
                          ckpt_error *err)
{
    size_t nref = 0;
    for (size_t i = 0; i < decl->ndeclared; i++)
        nref += strstr(decl->declared[i].key, CKPT_REPLICA_MARK) != NULL;
    if (nref == 0)
        return 0;
    fqn_piece *by = malloc((all->n ? all->n : 1) * sizeof *by);
    if (!by)
        return ckpt_err(err, -ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < all->n; i++)
        if (all->v[i].fqn != CKPT_PIECES_NONE)
            by[n++] = (fqn_piece){ ckpt_pieces_str(all, all->v[i].fqn), i };
    qsort(by, n, sizeof *by, cmp_fqn_piece);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < decl->ndeclared; i++) {
        replica_ref r;
        rc = replica_parse(decl->declared[i].key, &r, err);
        if (rc <= 0)
            continue;
        rc = 0;
        size_t lo = 0, hi = n;          /* first piece of r.fqn */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (strcmp(by[mid].fqn, r.fqn) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        size_t end = lo, found = 0;
        while (end < n && strcmp(by[end].fqn, r.fqn) == 0)
            found |= replica_matches(all, by[end++].i, &r);
        if (!found)
            rc = replica_refuse(all, &r, decl->declared[i].writer, by + lo,
                                end - lo, err);
        free(r.fqn);
    }
    free(by);
    return rc;
}

/* Refuses a declared tensor (a file created or described in a save
 * through a mount) that no writer recorded a piece of: its only piece
 * failed, or its writer died.  Names it, and why its piece failed.
 * `decl` holds the declarations, `all` the pieces. */
static int check_declared(const ckpt_manifest *decl, const ckpt_pieces *all,
                          ckpt_error *err)
{
    if (decl->ndeclared == 0)
        return 0;
    /* Each fqn is one interned string: collect each once. */
    unsigned char *seen = calloc((size_t)all->nstr + 1, 1);
    const char **have = malloc((all->nstr ? all->nstr : 1) * sizeof *have);
    if (!seen || !have) {
        free(seen), free(have);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    size_t nhave = 0;
    for (size_t i = 0; i < all->n; i++) {
        uint32_t f = all->v[i].fqn;
        if (f == CKPT_PIECES_NONE || seen[f])
            continue;
        seen[f] = 1;
        have[nhave++] = ckpt_pieces_str(all, f);
    }
    free(seen);
    qsort(have, nhave, sizeof *have, cmp_str);
    int rc = check_replicas(decl, all, err);
    for (size_t i = 0; rc == 0 && i < decl->ndeclared; i++) {
        const ckpt_kv *d = &decl->declared[i];
        if (strstr(d->key, CKPT_REPLICA_MARK) || ckpt_supersede_is(d->key) ||
            (nhave && bsearch(&d->key, have, nhave, sizeof *have, cmp_str)))
            continue;
        const char *why = failure_of(decl, d->key);
        rc = why
            ? ckpt_err(err, -EINVAL, "tensor '%s' has no piece: its file "
                       "was created or described in this save (writer %s) "
                       "and its piece failed: %s", d->key,
                       d->writer ? d->writer : "?", why)
            : ckpt_err(err, -EINVAL, "tensor '%s' has no piece: its file "
                       "was created or described in this save (writer %s) "
                       "but no piece of it was recorded (none was written, "
                       "or the writing process died before closing it)",
                       d->key, d->writer ? d->writer : "?");
    }
    free(have);
    return rc;
}

/* A planner refusal that names a tensor whose piece failed gets the
 * reason appended: a hole is often the piece that failed. */
static void add_failure(const ckpt_manifest *all, ckpt_error *err)
{
    char quoted[4200];
    if (!err)
        return;
    for (size_t i = 0; i < all->ndeclared; i++) {
        const ckpt_kv *d = &all->declared[i];
        if (!d->value || !*d->value)
            continue;
        snprintf(quoted, sizeof quoted, "'%s'", d->key);
        if (!strstr(err->msg, quoted))
            continue;
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n, "; a piece of it "
                 "failed: %s", d->value);
        return;
    }
}

/* Reduces the metadata of all writers to one value per key, refusing keys
 * set to different values by different writers. */
static int merge_meta(const ckpt_manifest *in, ckpt_manifest *out,
                      ckpt_error *err)
{
    for (size_t i = 0; i < in->nmeta; i++) {
        const ckpt_kv *kv = &in->meta[i];
        const char *have = ckpt_manifest_get_meta(out, kv->key);
        if (have && strcmp(have, kv->value) != 0) {
            const char *first = "?";
            for (size_t j = 0; j < out->nmeta; j++)
                if (strcmp(out->meta[j].key, kv->key) == 0 &&
                    out->meta[j].writer)
                    first = out->meta[j].writer;
            return ckpt_err(err, -EINVAL,
                            "metadata '%s' is '%s' (writer %s) but '%s' "
                            "(writer %s)", kv->key, have, first, kv->value,
                            kv->writer ? kv->writer : "?");
        }
        if (!have && ckpt_manifest_set_meta(out, kv->key, kv->value,
                                            kv->writer))
            return ckpt_err(err, -ENOMEM, "out of memory");
    }
    return 0;
}

static int add_system_meta(ckpt_manifest *meta, size_t writers,
                           ckpt_error *err)
{
    char created[64], nbuf[32], fmt[16], ident[33];
    int rc = ckpt_identity_new(ident, err);
    if (rc)
        return rc;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(nbuf, sizeof nbuf, "%zu", writers);
    snprintf(fmt, sizeof fmt, "%d", CKPT_DB_VERSION);
    if (ckpt_manifest_set_meta(meta, "format_version", fmt, NULL) ||
        ckpt_manifest_set_meta(meta, "identity", ident, NULL) ||
        ckpt_manifest_set_meta(meta, "created", created, NULL) ||
        ckpt_manifest_set_meta(meta, "producer", "ckptfs " CKPT_VERSION_STRING,
                               NULL) ||
        ckpt_manifest_set_meta(meta, "world_size", nbuf, NULL))
        return ckpt_err(err, -ENOMEM, "out of memory");
    return 0;
}

/* Links tmp to final (fails with -EEXIST if a checkpoint was committed
 * meanwhile), then syncs the directory (index.db's name) and its parent
 * (the directory's, renamed into place when the save began); tmp, a name
 * of this committer's own in .pending/, goes with it.  The claim must
 * still be ours right before the link (a committer taken for dead
 * publishes nothing).  A failure to sync withdraws index.db again: a
 * commit that reports an error has committed nothing (the name might not
 * have survived a crash either); status reads say "committing", not
 * "committed", until .pending/ is gone (ckpt_claim_committed). */
static int publish(const char *dir, const char *tmp, const char *final,
                   ckpt_claim *claim, int sync, ckpt_error *err)
{
    int rc = ckpt_claim_check(claim, err);
    if (rc == 0 && link(tmp, final) != 0) {
        int e = errno;
        struct stat a, b;
        /* A link whose reply was lost (NFS) did happen: one file. */
        int linked = stat(tmp, &a) == 0 && stat(final, &b) == 0 &&
                     a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        if (!linked && e == EEXIST)
            rc = ckpt_err(err, -EEXIST, "%s was committed by someone "
                          "else meanwhile", dir);
        else if (!linked)
            rc = ckpt_err_sys(err, -e, "cannot publish %s", final);
    }
    unlink(tmp);
    if (rc)
        return rc;
    if (sync)
        rc = ckpt_fsync_dir(dir, err);
    if (rc == 0 && sync)
        rc = ckpt_fsync_parent(dir, err);
    if (rc) {
        unlink(final);
        if (err) {
            size_t n = strlen(err->msg);
            snprintf(err->msg + n, sizeof err->msg - n, "; the index was "
                     "withdrawn: nothing is committed");
        }
    }
    return rc;
}

/* Step (1) of the commit protocol, whatever the writers did: every shard
 * the plans name is fdatasynced before the index can point into it. */
static int sync_one(const char *dir, const char *file, ckpt_error *err)
{
    char path[4096];
    int rc = ckpt_path_join(path, sizeof path, dir, file, err);
    if (rc)
        return rc;
    /* Inside the save, no link followed, no FIFO opened. */
    ckpt_confine c;
    rc = ckpt_confine_open(&c, dir, 0, err);
    int fd = rc ? rc : ckpt_confine_openat(&c, file, err);
    if (rc == 0)
        ckpt_confine_close(&c);
    if (fd < 0)
        return fd;
    rc = fdatasync(fd) == 0 ? 0 : ckpt_err_sys(err, -errno, "cannot sync %s",
                                               path);
    close(fd);
    /* The kernel may have dropped what failed to sync, and a later sync
     * would not say: the save must never commit (CKPT_UNSYNCED_PATH). */
    if (rc)
        ckpt_save_mark_unsynced(dir, err ? err->msg : "cannot sync a shard");
    return rc;
}

/* The shards' names (data/) are synced before index.db can point to
 * them; on failure index.db.tmp goes. */
static int sync_data_dir(const char *dir, const char *tmp, ckpt_error *err)
{
    char data[4096];
    int rc = ckpt_path_join(data, sizeof data, dir, "data", err);
    if (rc == 0)
        rc = ckpt_fsync_dir(data, err);
    if (rc)
        unlink(tmp);
    return rc;
}

/* A save marked unsynced is refused, with the failure that marked it. */
static int refuse_unsynced(const char *dir, ckpt_error *err)
{
    char why[900];
    if (!ckpt_save_unsynced(dir, why, sizeof why))
        return 0;
    why[strcspn(why, "\n")] = '\0';
    return ckpt_err(err, -EIO, "%s cannot be committed: a shard of it could "
                    "not be synced (%s), so its bytes may not be on the "
                    "disk; save the step again", dir, why);
}

/* 1 when claim c covers piece i: its file is the one the writer synced,
 * and every frame stored in it ends within the synced bytes. */
static int claim_covers(const ckpt_pieces *all, size_t i, const plan_claim *c)
{
    const char *file = ckpt_pieces_str(all, ckpt_pieces_file(all, i));
    if (!c->synced.has || !file || strcmp(file, c->synced.file) != 0)
        return 0;
    ckpt_frame_rec one;
    const ckpt_frame_rec *f = ckpt_pieces_frames(all, i, &one);
    for (uint64_t k = 0; k < ckpt_pieces_nframes(all, i); k++)
        if (f[k].stored_size > c->synced.bytes ||
            f[k].file_offset > c->synced.bytes - f[k].stored_size)
            return 0;
    return 1;
}

/* Marks done[file] for each shard file whose every piece its plan's claim
 * covers: its writer synced it, no need to again.  `need` is scratch. */
static int mark_synced(const ckpt_pieces *all, const plan_claim *claims,
                       size_t nplans, unsigned char *done)
{
    unsigned char *need = calloc((size_t)all->nstr + 1, 1);
    if (!need)
        return -ENOMEM;
    for (size_t p = 0; p < nplans; p++)
        for (size_t i = claims[p].first; i < claims[p].end; i++) {
            uint32_t f = ckpt_pieces_file(all, i);
            if (f == CKPT_PIECES_NONE)
                continue;
            if (claim_covers(all, i, &claims[p]))
                done[f] = 1;
            else
                need[f] = 1;
        }
    for (uint32_t f = 0; f < all->nstr; f++)
        if (need[f])
            done[f] = 0;
    free(need);
    return 0;
}

/* Step (1): every shard the index will point into is synced, by its
 * writer (done[file], from mark_synced) or here, once each. */
static int sync_shards(const char *dir, const ckpt_pieces *all,
                       unsigned char *done, ckpt_error *err)
{
    /* Each distinct path is one string of the table: once each. */
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < all->n; i++) {
        uint32_t f = ckpt_pieces_file(all, i);
        if (f == CKPT_PIECES_NONE || done[f])
            continue;
        done[f] = 1;
        rc = sync_one(dir, ckpt_pieces_str(all, f), err);
    }
    return rc;
}

/* The index of a save that reuses the previous save's layout (reuse.h)
 * at tmp: 0; 1 when the commit is to plan afresh (which reports what
 * failed here, if it fails again); or the error of a shard's sync. */
static int write_reused(const char *dir, const char *tmp, ckpt_reuse *r,
                        size_t nplans, const ckpt_commit_opts *o,
                        ckpt_error *err)
{
    ckpt_manifest meta;
    ckpt_error rerr = { 0 };
    ckpt_manifest_init(&meta);
    int rc = merge_meta(ckpt_reuse_meta(r), &meta, &rerr);
    if (rc == 0)
        rc = add_system_meta(&meta, o->world_size > 0
                                        ? (size_t)o->world_size : nplans,
                             &rerr);
    if (rc == 0 && ckpt_manifest_set_meta(&meta, "layout.reused",
                                          ckpt_reuse_from(r), NULL))
        rc = -ENOMEM;
    if (rc == 0 && o->sync && (rc = ckpt_reuse_sync(r, dir, sync_one, err)))
        goto out;
    if (rc == 0)
        rc = ckpt_reuse_write(r, tmp, dir, meta.meta, meta.nmeta, o->sync,
                              &rerr);
    if (rc)
        rc = 1;
out:
    ckpt_manifest_free(&meta);
    return rc;
}

/* Everything under the commit claim. */
static int commit_locked(const char *dir, const char *pending,
                         ckpt_claim *claim, const ckpt_commit_opts *o,
                         ckpt_error *err)
{
    char tmp[4096], final[4096];
    name_list plans = { 0 };
    ckpt_pieces all;
    ckpt_manifest all_meta, meta;
    ckpt_plan plan = { 0 };
    ckpt_bases *bases = NULL;
    ckpt_index_base *used = NULL;
    plan_claim *claims = NULL;
    unsigned char *synced = NULL;   /* per shard file: its writer synced it */
    ckpt_index_layout *layouts = NULL;  /* for the next save to reuse */
    size_t nused = 0, nlayouts = 0;
    ckpt_pieces_init(&all);
    ckpt_manifest_init(&all_meta);
    ckpt_manifest_init(&meta);
    int rc = ckpt_path_join(final, sizeof final, dir, "index.db", err);
    if (rc == 0)
        rc = ckpt_claim_tmp(claim, tmp, sizeof tmp, err);
    if (rc == 0 && access(final, F_OK) == 0)
        rc = ckpt_err(err, -EEXIST, "%s is already committed", dir);
    if (rc == 0)
        rc = refuse_unsynced(dir, err);
    if (rc == 0)
        rc = list_plans(pending, &plans, err);
    if (rc == 0 && plans.n == 0)
        rc = ckpt_err(err, -EINVAL, "%s: no writer plans in .pending/: "
                      "nothing to commit", dir);
    if (rc == 0 && o->expect_writers > 0 &&
        plans.n != (size_t)o->expect_writers)
        rc = ckpt_err(err, -EINVAL, "%s: expected %d writer plans, found "
                      "%zu", dir, o->expect_writers, plans.n);
    /* The layout of the save before, when every plan has it. */
    ckpt_reuse *reuse = NULL;
    char why[600];
    if (rc == 0 &&
        ckpt_reuse_prepare(&reuse, dir, pending, plans.v, plans.n, why,
                           sizeof why) == 0) {
        int rrc = write_reused(dir, tmp, reuse, plans.n, o, err);
        ckpt_reuse_free(reuse);
        if (rrc <= 0) {
            rc = rrc;
            goto publish;
        }
    }
    if (rc == 0 && !(claims = calloc(plans.n, sizeof *claims)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = read_plans(pending, &plans, &all, &all_meta, claims, err);
    /* Which shards their writers synced, before a rank that ran again
     * drops its earlier attempt's pieces (the claims index the table as
     * read). */
    if (rc == 0 && !(synced = calloc((size_t)all.nstr + 1, 1)))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0 && mark_synced(&all, claims, plans.n, synced))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = ckpt_supersede_apply(&all, &all_meta, NULL, err);
    if (rc == 0)
        rc = check_declared(&all_meta, &all, err);
    if (rc == 0)
        rc = merge_meta(&all_meta, &meta, err);
    if (rc == 0)
        rc = add_system_meta(&meta, o->world_size > 0 ? (size_t)o->world_size
                                                       : plans.n, err);
    ckpt_plan_opts popts = { .check_replica_hashes = 1 };
    if (rc == 0) {
        rc = ckpt_plan_build_pieces(&all, &popts, &plan, err);
        if (rc)
            add_failure(&all_meta, err);
    }
    if (rc == 0 && o->sync)
        rc = sync_shards(dir, &all, synced, err);
    if (rc == 0) {
        rc = ckpt_delta_commit_bases(dir, meta.meta, meta.nmeta, &all,
                                     &bases, &used, &nused, err);
        if (rc == 0 && nused && ckpt_manifest_set_meta(&meta,
                                    "format_version", "2", NULL))
            rc = ckpt_err(err, -ENOMEM, "out of memory");
        if (rc == 0 && all_meta.ndeclared == 0)
            rc = ckpt_reuse_layouts(&all, &plan, plans.v, claims, plans.n,
                                    &layouts, &nlayouts, err);
        if (rc == 0)
            rc = ckpt_index_write_laid(tmp, dir, &all, &plan, meta.meta,
                                       meta.nmeta, used, nused, layouts,
                                       nlayouts, o->sync, err);
        if (rc) {
            ckpt_err_wrap(err, rc, "cannot write the index");
            unlink(tmp);
        }
    }
publish:
    if (rc == 0 && o->sync)
        rc = sync_data_dir(dir, tmp, err);
    if (rc == 0)
        rc = publish(dir, tmp, final, claim, o->sync, err);
    ckpt_reuse_layouts_free(layouts, nlayouts);
    ckpt_plan_free(&plan);
    free(claims);
    free(synced);
    free(used);
    ckpt_bases_free(bases);
    ckpt_pieces_free(&all);
    ckpt_manifest_free(&all_meta);
    ckpt_manifest_free(&meta);
    names_free(&plans);
    return rc;
}

/* Claims the commit of dir, waiting while a live committer holds the
 * claim: 0 with *claim; -EEXIST once that committer has committed. */
static int claim_commit(const char *dir, ckpt_claim **claim, ckpt_error *err)
{
    for (;;) {
        int rc = ckpt_claim_take(claim, dir, err);
        if (rc == -EBUSY && ckpt_claim_committed(dir) != 1) {
            struct timespec t = { 0, 50 * 1000000L };
            nanosleep(&t, NULL);
            continue;
        }
        if (rc == -EBUSY || (rc == -ENOENT && ckpt_claim_committed(dir) == 1))
            return ckpt_err(err, -EEXIST, "%s is already committed", dir);
        return rc;
    }
}

int ckpt_commit(const char *dir, const ckpt_commit_opts *opts,
                ckpt_error *err)
{
    ckpt_commit_opts o;
    char pending[4096];
    if (!dir)
        return ckpt_err_null(err, "ckpt_commit", "dir");
    ckpt_commit_opts_init(&o);
    if (opts) {
        int rc = ckpt_opts_take(&o, sizeof o, opts, sizeof *opts,
                                "ckpt_commit_opts", err);
        if (rc)
            return rc;
    }
    int rc = ckpt_path_join(pending, sizeof pending, dir, ".pending", err);
    if (rc)
        return rc;
    /* The lease keeps gc away for the whole commit; a gc that retired the
     * save while we waited for it is reported (-ESTALE). */
    ckpt_lease *lease = NULL;
    rc = ckpt_lease_take(&lease, dir, CKPT_LEASE_BEAT_MS, err);
    if (rc == -ENOENT && access(dir, F_OK) == 0) {
        char idx[4096];
        if (ckpt_path_join(idx, sizeof idx, dir, "index.db", NULL) == 0 &&
            access(idx, F_OK) == 0)
            return ckpt_err(err, -EEXIST, "%s is already committed", dir);
        return ckpt_err(err, -EINVAL, "%s: no .pending/ directory: "
                        "nothing to commit", dir);
    }
    if (rc)
        return rc;
    /* The lease checked that .pending/ is this user's; the lock is
     * opened in it without following a link. */
    int pfd = ckpt_pending_open(dir, 1, err);
    int fd = pfd < 0 ? pfd : ckpt_pending_file(pfd, dir, "commit.lock",
                                                O_RDWR | O_CREAT, err);
    if (pfd >= 0)
        close(pfd);
    if (fd < 0) {
        ckpt_lease_drop(lease);
        return fd;
    }
    /* Where locks work, committers of one save queue on the lock; the
     * claim decides wherever they do not. */
    if (flock(fd, LOCK_EX) != 0 && errno != ENOLCK && errno != EOPNOTSUPP) {
        rc = ckpt_err_sys(err, -errno, "cannot lock %s/.pending/commit.lock",
                          dir);
        close(fd);
        ckpt_lease_drop(lease);
        return rc;
    }
    ckpt_claim *claim = NULL;
    rc = claim_commit(dir, &claim, err);
    /* What earlier commits beside this one left goes meanwhile. */
    ckpt_spent_sweep *sweep = rc == 0 ? ckpt_spent_sweep_start(dir) : NULL;
    if (rc == 0)
        rc = commit_locked(dir, pending, claim, &o, err);
    /* Once index.db exists the plans are history: .pending/ is moved
     * aside in one rename, for the next commit or gc to remove (spent.h);
     * removed here only where it cannot be.  A crash that leaves it is
     * harmless (readers ignore it, gc removes it, a status read syncs
     * index.db and finishes): no sync. */
    if (rc == 0 && ckpt_spent_move(dir) != 0) {
        ckpt_error rerr = { 0 };
        (void)ckpt_spent_remove(pending, &rerr);
    }
    ckpt_spent_sweep_join(sweep);
    ckpt_claim_drop(claim);
    /* A committer that died after publishing left its .pending/ (the
     * claim found index.db there): finished here, index.db synced first. */
    if (rc == -EEXIST)
        (void)ckpt_claim_committed(dir);
    close(fd);
    ckpt_lease_drop(lease);
    return rc;
}
