/*
 * save.c - collective saves over MPI, synchronous and asynchronous (see
 * ckptfs_mpi.h; the agreement between ranks is coll.h's).
 *
 * Each rank checks its piece descriptions and serialises them
 * (fqn, dtype, shape, offsets, sizes); rank 0 gathers them, refuses a
 * committed or unfinished directory, runs the planner (validation, and
 * deduplication that picks which rank writes each replica, balancing bytes
 * per rank) and scatters one keep flag per piece.  Every rank then writes
 * its kept pieces with its own writer "rank<R>" (a rank with nothing to
 * keep still leaves an empty plan, so the commit sees `size` writers) and
 * rank 0 commits.  A save that fails after writing began removes the files
 * and directories it created.
 */
#include "ckptfs_mpi.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "async/async.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/region.h"
#include "common/shape.h"
#include "format/lease.h"
#include "format/model.h"
#include "format/plan.h"
#include "mpi/coll.h"

/* ================================================================== save */

/* A piece as this rank describes it: bounds and names checked (the
 * planner's own test of a piece alone), data not looked at. */
static int check_piece(const coll *c, const ckpt_piece *p, size_t i,
                       ckpt_error *st)
{
    char wname[32];
    if (!p->fqn)
        return coll_failf(c, st, -EINVAL, "piece %zu has no fqn (NULL)", i);
    if (p->ndim < 0 || p->ndim > CKPT_MAX_DIMS)
        return coll_failf(c, st, -EINVAL,
                          "tensor '%s': %d dimensions; between "
                          "0 and %d allowed", p->fqn, p->ndim, CKPT_MAX_DIMS);
    if (p->ndim > 0 && !p->shape)
        return coll_failf(c, st, -EINVAL, "tensor '%s': no shape (NULL)",
                          p->fqn);
    ckpt_piece_rec rec = { .dtype = p->dtype, .ndim = p->ndim };
    snprintf(wname, sizeof wname, "rank%d", c->rank);
    rec.fqn = (char *)p->fqn;   /* borrowed: the record is only read */
    rec.writer = wname;
    for (int d = 0; d < p->ndim; d++) {
        rec.shape[d] = p->shape[d];
        rec.offsets[d] = p->offsets ? p->offsets[d] : 0;
        rec.sizes[d] = p->sizes ? p->sizes[d] : p->shape[d];
    }
    ckpt_error e = { 0 };
    if (ckpt_plan_check_piece(&rec, &e))
        return coll_fail_with(c, st, &e);
    return 0;
}

/* Wire format of one piece: u32 fqn length, fqn bytes, i32 dtype, i32 ndim,
 * then shape, offsets and sizes (ndim int64 each), native byte order. */
static void put_piece(wbuf *b, const ckpt_piece *p)
{
    uint32_t len = (uint32_t)strlen(p->fqn);
    int64_t off[CKPT_MAX_DIMS], size[CKPT_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) {
        off[d] = p->offsets ? p->offsets[d] : 0;
        size[d] = p->sizes ? p->sizes[d] : p->shape[d];
    }
    wb_put(b, &len, sizeof len);
    wb_put(b, p->fqn, len);
    wb_i32(b, (int32_t)p->dtype);
    wb_i32(b, p->ndim);
    wb_dims(b, p->ndim, p->shape);
    wb_dims(b, p->ndim, off);
    wb_dims(b, p->ndim, size);
}

/* Checks and serialises this rank's pieces into *b. */
static void save_describe(const coll *c, const ckpt_piece *pieces, size_t n,
                          wbuf *b, ckpt_error *st)
{
    if (n > 0 && !pieces) {
        coll_failf(c, st, -EINVAL, "%zu pieces but no piece array (NULL)", n);
        return;
    }
    if (n > (size_t)INT_MAX) {
        coll_failf(c, st, -EINVAL, "%zu pieces (at most %d per rank)", n,
                   INT_MAX);
        return;
    }
    for (size_t i = 0; i < n && st->code == 0; i++)
        if (check_piece(c, &pieces[i], i, st) == 0)
            put_piece(b, &pieces[i]);
    if (st->code == 0 && b->oom)
        coll_failf(c, st, -ENOMEM, "out of memory describing %zu pieces", n);
    if (st->code == 0 && b->n > (size_t)INT_MAX)
        coll_failf(c, st, -EINVAL,
                   "piece descriptions take %zu bytes (at most %d "
                   "per rank)", b->n, INT_MAX);
}

/* Per piece, what rank 0 tells its rank to do with it. */
#define KEEP_WRITE 1          /* write it: the kept copy */
#define KEEP_HASH 2           /* hash it: it is a replica */

/* What rank 0 holds between gathering and scattering. */
typedef struct save_root {
    int *npieces, *nbytes, *pdispl, *bdispl;   /* per rank */
    unsigned char *wire;
    ckpt_pieces recs;         /* every rank's pieces (compact: a 16k-rank
                                 job has millions) */
    uint8_t *keep;            /* per gathered piece: KEEP_* flags */
    size_t *kept_as;          /* per gathered piece: the replica kept */
    uint64_t *hashes;         /* per gathered piece: replicas' XXH3-64 */
    int made_dir;             /* rank 0 created the checkpoint directory */
} save_root;

static void save_root_free(save_root *sr)
{
    ckpt_pieces_free(&sr->recs);
    free(sr->npieces);
    free(sr->nbytes);
    free(sr->pdispl);
    free(sr->bdispl);
    free(sr->wire);
    free(sr->keep);
    free(sr->kept_as);
    free(sr->hashes);
}

/* Gathers the piece counts and descriptions on rank 0. */
static void save_gather(coll *c, size_t n, const wbuf *b,
                        save_root *sr, ckpt_error *st)
{
    int64_t mine = (int64_t)b->n, total = 0;
    coll_check(c, st, MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM,
                                    c->comm), "MPI_Allreduce");
    if (coll_agree(c, st))
        return;
    if (total > INT_MAX) {
        coll_fail_all(st, -EINVAL,
                      "the piece descriptions of all ranks take %lld "
                      "bytes (at most %d)", (long long)total, INT_MAX);
        return;
    }
    if (c->rank == 0) {
        size_t k = (size_t)c->size;
        sr->npieces = calloc(k, sizeof *sr->npieces);
        sr->nbytes = calloc(k, sizeof *sr->nbytes);
        sr->pdispl = calloc(k, sizeof *sr->pdispl);
        sr->bdispl = calloc(k, sizeof *sr->bdispl);
        sr->wire = malloc(total ? (size_t)total : 1);
        if (!sr->npieces || !sr->nbytes || !sr->pdispl || !sr->bdispl ||
            !sr->wire)
            coll_failf(c, st, -ENOMEM, "out of memory gathering piece "
                       "descriptions");
    }
    if (coll_agree(c, st))
        return;
    int np = (int)n, nb = (int)b->n;
    unsigned char none[1];
    coll_check(c, st, MPI_Gather(&np, 1, MPI_INT, sr->npieces, 1, MPI_INT, 0,
                                 c->comm), "MPI_Gather");
    coll_check(c, st, MPI_Gather(&nb, 1, MPI_INT, sr->nbytes, 1, MPI_INT, 0,
                                 c->comm), "MPI_Gather");
    for (int r = 1; c->rank == 0 && r < c->size; r++) {
        sr->pdispl[r] = sr->pdispl[r - 1] + sr->npieces[r - 1];
        sr->bdispl[r] = sr->bdispl[r - 1] + sr->nbytes[r - 1];
    }
    coll_check(c, st, MPI_Gatherv(b->p ? b->p : none, nb, MPI_BYTE, sr->wire,
                                  sr->nbytes, sr->bdispl, MPI_BYTE, 0,
                                  c->comm), "MPI_Gatherv");
}

/* Parses one piece of rank `rank` from the wire into the table. */
static int parse_piece(rbuf *b, int rank, ckpt_pieces *tab)
{
    char wname[32];
    uint32_t len;
    rb_get(b, &len, sizeof len);
    if (b->bad || len > b->n - b->at)
        return -EPROTO;
    ckpt_piece_rec rec = { .writer = wname };
    if (!(rec.fqn = malloc((size_t)len + 1)))
        return -ENOMEM;
    snprintf(wname, sizeof wname, "rank%d", rank);
    rb_get(b, rec.fqn, len);
    rec.fqn[len] = '\0';
    rec.dtype = (ckpt_dtype)rb_i32(b);
    rec.ndim = rb_i32(b);
    int rc = 0;
    if (b->bad || rec.ndim < 0 || rec.ndim > CKPT_MAX_DIMS) {
        rc = -EPROTO;
    } else {
        size_t dims = (size_t)rec.ndim * sizeof(int64_t);
        rb_get(b, rec.shape, dims);
        rb_get(b, rec.offsets, dims);
        rb_get(b, rec.sizes, dims);
        rec.raw_bytes = ckpt_box_numel(rec.ndim, rec.sizes) *
                        ckpt_dtype_size(rec.dtype);
        rc = b->bad ? -EPROTO : ckpt_pieces_add(tab, &rec);
    }
    free(rec.fqn);
    return rc;
}

static int parse_all(const coll *c, save_root *sr, ckpt_error *st)
{
    size_t total = 0;
    for (int r = 0; r < c->size; r++)
        total += (size_t)sr->npieces[r];
    sr->keep = calloc(total ? total : 1, 1);
    sr->kept_as = calloc(total ? total : 1, sizeof *sr->kept_as);
    if (!sr->keep || !sr->kept_as)
        return coll_failf(c, st, -ENOMEM, "out of memory for %zu pieces",
                          total);
    for (int r = 0; r < c->size; r++) {
        rbuf b = { sr->wire + sr->bdispl[r], (size_t)sr->nbytes[r], 0, 0 };
        for (int i = 0; i < sr->npieces[r]; i++) {
            int rc = parse_piece(&b, r, &sr->recs);
            if (rc)
                return coll_failf(c, st, rc,
                                  "cannot parse piece %d of rank %d%s", i, r,
                                  rc == -ENOMEM ? ": out of memory" : "");
        }
    }
    return 0;
}

/* Rank 0: is `dir` free to save into?  Records whether it exists. */
static int check_target(const char *dir, save_root *sr, ckpt_error *st)
{
    ckpt_error e = { 0 };
    if (ckpt_async_check_target(dir, &sr->made_dir, &e))
        return coll_fail_all(st, e.code, "%s", e.msg);
    return 0;
}

/* Rank 0: checks the directory, parses and plans; fills sr->keep. */
static void save_plan(const coll *c, const char *dir, save_root *sr,
                      ckpt_error *st)
{
    if (check_target(dir, sr, st) || parse_all(c, sr, st))
        return;
    ckpt_plan plan;
    ckpt_plan_opts po = { .balance_replicas = 1 };
    ckpt_error e = { 0 };
    if (ckpt_plan_build_pieces(&sr->recs, &po, &plan, &e)) {
        coll_fail_all(st, e.code, "planner: %s", e.msg);
        return;
    }
    /* The kept copy of each piece is written; every copy of a replicated
     * piece is hashed, so that replicas with different bytes are refused
     * as the commit refuses them on the other writing paths. */
    for (size_t i = 0; i < sr->recs.n; i++) {
        size_t k = plan.kept_as[i];
        sr->kept_as[i] = k;
        sr->keep[i] |= k == i ? KEEP_WRITE : KEEP_HASH;
        if (k != i)
            sr->keep[k] |= KEEP_HASH;
    }
    ckpt_plan_free(&plan);
}

/* Bytes of a checked piece. */
static uint64_t piece_bytes(const ckpt_piece *p)
{
    if (p->ndim == 0 || !p->sizes) {
        uint64_t n = 1;
        for (int d = 0; d < p->ndim; d++)
            n *= (uint64_t)p->shape[d];
        return n * ckpt_dtype_size(p->dtype);
    }
    return ckpt_box_numel(p->ndim, p->sizes) * ckpt_dtype_size(p->dtype);
}

/* This rank's hashes of the pieces rank 0 flagged as replicas (0 for the
 * others), into h[0..n). */
static void hash_replicas(const coll *c, const ckpt_piece *pieces, size_t n,
                          const uint8_t *keep, ckpt_saver *saver,
                          uint64_t *h, ckpt_error *st)
{
    char what[300];
    for (size_t i = 0; i < n && st->code == 0; i++) {
        ckpt_error e = { 0 };
        uint64_t bytes = piece_bytes(&pieces[i]);
        h[i] = 0;
        if (!(keep[i] & KEEP_HASH))
            continue;
        snprintf(what, sizeof what, "tensor '%.256s'", pieces[i].fqn);
        if (bytes && !pieces[i].data)
            coll_failf(c, st, -EINVAL, "tensor '%s': piece has no data",
                       pieces[i].fqn);
        else if (ckpt_async_hash(saver, pieces[i].data, (size_t)bytes, &h[i],
                                 what, &e))
            coll_fail_with(c, st, &e);
    }
}

/* Rank 0: refuses replicas whose hashes differ, with the planner's words
 * for it on the other writing paths. */
static void compare_replicas(const save_root *sr, ckpt_error *st)
{
    const ckpt_pieces *t = &sr->recs;
    for (size_t i = 0; i < t->n && st->code == 0; i++) {
        size_t k = sr->kept_as[i];
        if (k == i || sr->hashes[k] == sr->hashes[i])
            continue;
        const ckpt_pieces_rec *a = &t->v[k];
        char off[CKPT_MAX_DIMS * 21 + 3], size[CKPT_MAX_DIMS * 21 + 3];
        int64_t o[CKPT_MAX_DIMS];
        ckpt_shape_format_json(off, sizeof off, ckpt_pieces_ndims(a),
                               ckpt_pieces_offsets(t, k, o));
        ckpt_shape_format_json(size, sizeof size, ckpt_pieces_ndims(a),
                               ckpt_pieces_sizes(t, k));
        coll_fail_all(st, -EINVAL, "planner: tensor '%s': replicas of piece "
                      "offsets %s sizes %s have different bytes: writer %s "
                      "(hash %016llx) vs writer %s (hash %016llx)",
                      ckpt_pieces_str(t, a->fqn), off, size,
                      ckpt_pieces_str(t, ckpt_pieces_writer(t, k)),
                      (unsigned long long)sr->hashes[k],
                      ckpt_pieces_str(t, ckpt_pieces_writer(t, i)),
                      (unsigned long long)sr->hashes[i]);
    }
}

/* Once the keep flags are scattered: every rank hashes its replicas, rank
 * 0 gathers and compares the hashes.  Leaves only KEEP_WRITE in keep.
 * Returns the agreed status. */
static int save_check_replicas(coll *c, const ckpt_piece *pieces, size_t n,
                               uint8_t *keep, ckpt_saver *saver,
                               save_root *sr, ckpt_error *st)
{
    uint64_t *h = calloc(n ? n : 1, sizeof *h);
    if (!h)
        coll_failf(c, st, -ENOMEM, "out of memory");
    else
        hash_replicas(c, pieces, n, keep, saver, h, st);
    if (c->rank == 0 && st->code == 0 &&
        !(sr->hashes = calloc(sr->recs.n ? sr->recs.n : 1, sizeof *h)))
        coll_failf(c, st, -ENOMEM, "out of memory");
    if (coll_agree(c, st) == 0) {
        coll_check(c, st, MPI_Gatherv(h, (int)n, MPI_UINT64_T, sr->hashes,
                                      sr->npieces, sr->pdispl, MPI_UINT64_T, 0,
                                      c->comm), "MPI_Gatherv");
        if (c->rank == 0 && st->code == 0)
            compare_replicas(sr, st);
    }
    free(h);
    for (size_t i = 0; i < n; i++)
        keep[i] &= KEEP_WRITE;
    return coll_agree(c, st);
}

/* Writes this rank's kept pieces with writer "rank<R>"; *owned tells
 * whether the writer's files are this save's (to remove on failure). */
static void save_write(const coll *c, const char *dir,
                       const ckpt_piece *pieces, size_t n,
                       const uint8_t *keep, const ckpt_mpi_save_opts *o,
                       int *owned, ckpt_lease **lease, ckpt_error *st)
{
    char name[32];
    ckpt_writer *w;
    ckpt_error e = { 0 };
    snprintf(name, sizeof name, "rank%d", c->rank);
    /* Rank 0 holds a lease from before the first file to the end of the
     * commit: no gc takes the save between the writers and the commit. */
    if (c->rank == 0 && ckpt_save_begin(lease, dir, &e)) {
        coll_fail_with(c, st, &e);
        return;
    }
    int rc = ckpt_writer_open(&w, dir, name, &o->write, &e);
    *owned = rc != -EEXIST;
    if (rc) {
        coll_fail_with(c, st, &e);
        return;
    }
    for (size_t i = 0; rc == 0 && c->rank == 0 && i < o->nmeta; i++)
        if (!o->meta_keys || !o->meta_values)
            rc = ckpt_err(&e, -EINVAL, "%zu metadata entries but no keys or "
                          "values (NULL)", o->nmeta);
        else
            rc = ckpt_writer_set_meta(w, o->meta_keys[i], o->meta_values[i],
                                      &e);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (keep[i])
            rc = ckpt_writer_put(w, &pieces[i], &e);
    if (rc) {
        ckpt_writer_abort(w);
        coll_fail_with(c, st, &e);
        return;
    }
    if (ckpt_writer_close(w, &e))
        coll_fail_with(c, st, &e);
}

static void remove_file(const char *dir, const char *rel)
{
    char path[COLL_PATH_CAP];
    if (ckpt_path_join(path, sizeof path, dir, rel, NULL) == 0)
        unlink(path);
}

static void remove_dir(const char *dir, const char *rel)
{
    char path[COLL_PATH_CAP];
    if (!rel)
        rmdir(dir);
    else if (ckpt_path_join(path, sizeof path, dir, rel, NULL) == 0)
        rmdir(path);
}

/* After a failed write or commit: every rank removes its own shard and
 * plan, then rank 0 removes the directories the save made (only when they
 * are empty).  Best effort: the save's error is what gets reported.  Skipped
 * altogether if the directory is committed after all. */
static void save_cleanup(const coll *c, const char *dir, int owned,
                         int made_dir)
{
    char rel[64];
    int allowed = 0;
    if (c->rank == 0)
        allowed = ckpt_dir_probe(dir) != CKPT_DIR_COMMITTED;
    if (MPI_Bcast(&allowed, 1, MPI_INT, 0, c->comm) != MPI_SUCCESS)
        allowed = 0;
    if (allowed && owned) {
        snprintf(rel, sizeof rel, "data/rank%d.shard", c->rank);
        remove_file(dir, rel);
        snprintf(rel, sizeof rel, ".pending/rank%d.plan", c->rank);
        remove_file(dir, rel);
    }
    MPI_Barrier(c->comm);
    if (c->rank != 0 || !allowed)
        return;
    remove_file(dir, ".pending/commit.lock");
    remove_file(dir, CKPT_LEASE_PATH);
    remove_file(dir, CKPT_UNSYNCED_PATH);
    remove_dir(dir, ".pending");
    remove_dir(dir, "data");
    if (made_dir)
        remove_dir(dir, NULL);
}

/* Rank 0 scatters each rank its keep flags. */
static void save_scatter(const coll *c, const save_root *sr, uint8_t *keep,
                         size_t n, ckpt_error *st)
{
    coll_check(c, st, MPI_Scatterv(sr->keep, sr->npieces, sr->pdispl,
                                   MPI_UINT8_T, keep, (int)n,
                                   MPI_UINT8_T, 0, c->comm), "MPI_Scatterv");
}

static void save_commit(const coll *c, const char *dir,
                        const ckpt_mpi_save_opts *o, ckpt_error *st)
{
    if (c->rank != 0)
        return;
    ckpt_commit_opts co;
    ckpt_error e = { 0 };
    ckpt_commit_opts_init(&co);
    co.expect_writers = c->size;
    co.sync = o->write.sync;
    if (ckpt_commit(dir, &co, &e)) {
        ckpt_err_wrap(&e, e.code, "commit");
        coll_fail_with(c, st, &e);
    }
}

void ckpt_mpi_save_opts_init(ckpt_mpi_save_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    ckpt_write_opts_init(&o->write);
}

/* Writing and committing, once the plan is agreed; cleans up on failure. */
static void save_finish(coll *c, const char *dir,
                        const ckpt_piece *pieces, size_t n,
                        save_root *sr, const ckpt_mpi_save_opts *o,
                        ckpt_error *st)
{
    uint8_t *keep = calloc(n ? n : 1, 1);
    int owned = 0;
    ckpt_lease *lease = NULL;
    if (!keep)
        coll_failf(c, st, -ENOMEM, "out of memory");
    if (coll_agree(c, st) == 0) {
        save_scatter(c, sr, keep, n, st);
        if (coll_agree(c, st) == 0 &&
            save_check_replicas(c, pieces, n, keep, NULL, sr, st) == 0) {
            save_write(c, dir, pieces, n, keep, o, &owned, &lease, st);
            if (coll_agree(c, st) == 0) {
                save_commit(c, dir, o, st);
                coll_agree(c, st);
            }
            if (st->code)
                save_cleanup(c, dir, owned, sr->made_dir);
        }
    }
    ckpt_lease_drop(lease);
    free(keep);
}

int ckpt_mpi_save(MPI_Comm comm, const char *dir, const ckpt_piece *pieces,
                  size_t n, const ckpt_mpi_save_opts *opts, ckpt_error *err)
{
    ckpt_error st = { 0 };
    coll c;
    if (coll_init(&c, comm, &st))
        return coll_finish(&st, err);
    ckpt_mpi_save_opts taken;
    coll_take_save_opts(&c, &taken, opts, &st);
    const ckpt_mpi_save_opts *o = &taken;
    wbuf b = { 0 };
    save_root sr = { 0 };
    coll_same_dir(&c, dir, &st);
    if (st.code == 0)
        save_describe(&c, pieces, n, &b, &st);
    if (coll_agree(&c, &st) == 0)
        save_gather(&c, n, &b, &sr, &st);
    free(b.p);
    if (coll_agree(&c, &st) == 0 && c.rank == 0)
        save_plan(&c, dir, &sr, &st);
    if (coll_agree(&c, &st) == 0)
        save_finish(&c, dir, pieces, n, &sr, o, &st);
    save_root_free(&sr);
    return coll_finish(&st, err);
}

/* ============================================================ async save */

struct ckpt_mpi_async {
    coll c;
    ckpt_error st;       /* this rank's status so far (agreed once failed) */
    char *dir;
    int began;           /* planning succeeded: files may exist */
    int made_dir;        /* rank 0: the save created dir */
    int sync;
    ckpt_save *local;    /* this rank's background job */
    ckpt_lease *lease;   /* rank 0: held from staging to the commit */
};

/* Stages this rank's kept pieces and queues its writer's job (rank 0 also
 * sets the metadata).  A local failure is kept for the wait. */
static void async_stage(ckpt_mpi_async *h, const ckpt_piece *pieces, size_t n,
                        const uint8_t *keep, const ckpt_mpi_save_opts *o,
                        ckpt_saver *saver)
{
    char name[32];
    snprintf(name, sizeof name, "rank%d", h->c.rank);
    ckpt_async_desc d = {
        .dir = h->dir, .writer = name, .pieces = pieces, .n = n,
        .keep = keep, .write = &o->write,
    };
    if (h->c.rank == 0) {
        d.meta_keys = o->meta_keys;
        d.meta_values = o->meta_values;
        d.nmeta = o->nmeta;
    }
    ckpt_error e = { 0 };
    if (ckpt_async_start(saver, &d, &h->local, &e))
        coll_fail_with(&h->c, &h->st, &e);
}

int ckpt_mpi_save_async(MPI_Comm comm, const char *dir,
                        const ckpt_piece *pieces, size_t n,
                        const ckpt_mpi_save_opts *opts, ckpt_saver *saver,
                        ckpt_mpi_async **out, ckpt_error *err)
{
    ckpt_error st = { 0 };
    ckpt_mpi_save_opts taken;
    const ckpt_mpi_save_opts *o = &taken;
    ckpt_mpi_async *h = calloc(1, sizeof *h);
    if (out)
        *out = NULL;
    if (!h)
        return ckpt_err(err, -ENOMEM, "out of memory");
    if (coll_init(&h->c, comm, &st)) {
        free(h);
        return coll_finish(&st, err);
    }
    coll *c = &h->c;
    wbuf b = { 0 };
    save_root sr = { 0 };
    ckpt_error e = { 0 };
    if (!saver || !out)
        coll_failf(c, &st, -EINVAL,
                   "async save: no saver or no handle pointer "
                   "(NULL)");
    coll_take_save_opts(c, &taken, opts, &st);
    coll_same_dir(c, dir, &st);
    if (st.code == 0)
        save_describe(c, pieces, n, &b, &st);
    if (st.code == 0 && ckpt_async_check_data(saver, pieces, n, NULL, &e))
        coll_fail_with(c, &st, &e);
    if (st.code == 0 && !(h->dir = strdup(dir)))
        coll_failf(c, &st, -ENOMEM, "out of memory");
    if (coll_agree(c, &st)) {
        /* Bad arguments: nothing started. */
        free(b.p);
        free(h->dir);
        free(h);
        return coll_finish(&st, err);
    }
    /* From here on, failures are reported by the wait. */
    h->sync = o->write.sync;
    save_gather(c, n, &b, &sr, &st);
    free(b.p);
    if (coll_agree(c, &st) == 0 && c->rank == 0)
        save_plan(c, dir, &sr, &st);
    h->made_dir = sr.made_dir;
    uint8_t *keep = calloc(n ? n : 1, 1);
    if (!keep)
        coll_failf(c, &st, -ENOMEM, "out of memory");
    if (coll_agree(c, &st) == 0) {
        save_scatter(c, &sr, keep, n, &st);
        if (coll_agree(c, &st) == 0 &&
            save_check_replicas(c, pieces, n, keep, saver, &sr, &st) == 0) {
            h->began = 1;
            if (c->rank == 0 && ckpt_save_begin(&h->lease, dir, &e))
                coll_fail_with(c, &st, &e);
            h->st = st;
            if (st.code == 0)
                async_stage(h, pieces, n, keep, o, saver);
            st = h->st;
        }
    }
    h->st = st;
    free(keep);
    save_root_free(&sr);
    *out = h;
    return 0;
}

int ckpt_mpi_save_poll(ckpt_mpi_async *h)
{
    if (!h)
        return -EINVAL;
    return !h->local || ckpt_save_poll(h->local);
}

int ckpt_mpi_save_wait(ckpt_mpi_async *h, ckpt_error *err)
{
    if (!h)
        return ckpt_err(err, -EINVAL, "wait: no save handle (NULL)");
    coll *c = &h->c;
    int owned = 0;
    ckpt_error e = { 0 };
    if (h->local && ckpt_async_wait(h->local, &owned, &e))
        coll_fail_with(c, &h->st, &e);
    if (coll_agree(c, &h->st) == 0) {
        ckpt_mpi_save_opts o;
        ckpt_mpi_save_opts_init(&o);
        o.write.sync = h->sync;
        save_commit(c, h->dir, &o, &h->st);
        coll_agree(c, &h->st);
    }
    if (h->st.code && h->began)
        save_cleanup(c, h->dir, owned, h->made_dir);
    ckpt_lease_drop(h->lease);
    int rc = coll_finish(&h->st, err);
    free(h->dir);
    free(h);
    return rc;
}

void ckpt_mpi_bytes_piece(ckpt_piece *p, const char *fqn, const void *data,
                          int64_t *len_storage, size_t len)
{
    if (!p || !len_storage)
        return;
    *len_storage = (int64_t)len;
    *p = (ckpt_piece){ .fqn = fqn, .dtype = CKPT_BYTES, .ndim = 1,
                       .shape = len_storage, .data = data };
}
