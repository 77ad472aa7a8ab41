/*
 * mpi.c - collective save and load over MPI (see ckptfs_mpi.h).
 *
 * Every call runs the same sequence of collectives on every rank, whatever
 * fails locally: each rank carries a local status (a ckpt_error) through
 * the steps, and at each agreement point the ranks learn with MPI_Allreduce
 * which rank failed first; that rank broadcasts its message.  So all ranks
 * return the same code and message, and none waits in a collective that
 * another skipped.  Local failures read "rank R: <cause>".
 *
 * Save: each rank checks its piece descriptions and serialises them
 * (fqn, dtype, shape, offsets, sizes); rank 0 gathers them, refuses a
 * committed or unfinished directory, runs the planner (validation, and
 * deduplication that picks which rank writes each replica, balancing bytes
 * per rank) and scatters one keep flag per piece.  Every rank then writes
 * its kept pieces with its own writer "rank<R>" (a rank with nothing to
 * keep still leaves an empty plan, so the commit sees `size` writers) and
 * rank 0 commits.  A save that fails after writing began removes the files
 * and directories it created.
 *
 * Load (two-phase): every rank opens the index and checks its regions; the
 * regions are all-gathered and every rank computes the same exchange plan:
 * each frame that some region needs is owned by one of the ranks that need
 * it (greedily balancing their work: decoding, and a quarter as much per
 * byte sent), which decodes it once and sends the other ranks their parts
 * with MPI_Alltoallv, in rounds bounded by exchange_bytes per rank.
 */
#include "ckptfs_mpi.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "async.h"
#include "error.h"
#include "fileio.h"
#include "lease.h"
#include "model.h"
#include "plan.h"
#include "pool.h"
#include "region.h"
#include "shape.h"
#include "optsize.h"

#define PATH_CAP 4096
#define DEFAULT_EXCHANGE_BYTES ((size_t)64 << 20)
#define MIN_EXCHANGE_BYTES ((size_t)4 << 10)
#define MAX_EXCHANGE_BYTES ((size_t)1 << 30)
/* Own frames are handed to the thread pool in batches of about this many
 * raw bytes (or less, so that every thread gets several batches). */
#define TASK_BYTES ((uint64_t)4 << 20)
/* Broadcasts of more than this many bytes are cut in pieces. */
#define BCAST_PIECE ((size_t)1 << 30)

/* ================================================================ status */

typedef struct coll {
    MPI_Comm comm;
    int rank, size;
    int failed;          /* the ranks have agreed on a failure */
} coll;

static int coll_init(coll *c, MPI_Comm comm, ckpt_error *st)
{
    c->comm = comm;
    c->rank = 0;
    c->size = 1;
    c->failed = 0;
    if (MPI_Comm_rank(comm, &c->rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &c->size) != MPI_SUCCESS)
        return ckpt_err(st, -EINVAL, "invalid MPI communicator");
    return 0;
}

/* Records e as this rank's failure, "rank R: <e's message>", unless the
 * rank has already failed (the first cause is the one reported). */
static int fail_with(const coll *c, ckpt_error *st, const ckpt_error *e)
{
    if (st->code)
        return st->code;
    *st = *e;
    if (st->code == 0)
        st->code = -EIO;
    return ckpt_err_wrap(st, st->code, "rank %d", c->rank);
}

static int failf(const coll *c, ckpt_error *st, int code, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));

static int failf(const coll *c, ckpt_error *st, int code, const char *fmt,
                 ...)
{
    ckpt_error e = { .code = code };
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    return fail_with(c, st, &e);
}

/* Turns the result of an MPI call into this rank's failure. */
static void mpi_check(const coll *c, ckpt_error *st, int mrc,
                      const char *what)
{
    if (mrc == MPI_SUCCESS)
        return;
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mrc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", mrc);
    failf(c, st, -EIO, "%s failed: %s", what, s);
}

/* The agreement point: every rank learns whether any rank failed; if so,
 * every rank's status becomes the first failing rank's, with a note of how
 * many others failed.  Returns that code (0 when all succeeded).  Once the
 * ranks agree on a failure, later calls (which every rank then makes
 * alike) just return it. */
static int agree(coll *c, ckpt_error *st)
{
    if (c->failed)
        return st->code;
    int mine = st->code ? c->rank : c->size, first = c->size;
    int mrc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c->comm);
    if (mrc != MPI_SUCCESS) {
        mpi_check(c, st, mrc, "MPI_Allreduce");
        return st->code;
    }
    if (first == c->size)
        return 0;
    int failed = st->code != 0, nfailed = 1;
    mpi_check(c, st, MPI_Allreduce(&failed, &nfailed, 1, MPI_INT, MPI_SUM,
                                   c->comm), "MPI_Allreduce");
    mpi_check(c, st, MPI_Bcast(st, (int)sizeof *st, MPI_BYTE, first, c->comm),
              "MPI_Bcast");
    if (nfailed > 1) {
        size_t len = strlen(st->msg);
        snprintf(st->msg + len, sizeof st->msg - len, " (and %d more rank%s "
                 "failed)", nfailed - 1, nfailed > 2 ? "s" : "");
    }
    if (st->code == 0)
        st->code = -EIO;
    c->failed = 1;
    return st->code;
}

/* Sets the same failure on every rank (for problems all ranks see alike). */
static int fail_all(ckpt_error *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_all(ckpt_error *st, int code, const char *fmt, ...)
{
    if (st->code)
        return st->code;
    va_list ap;
    va_start(ap, fmt);
    st->code = code;
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
    return code;
}

static int finish(const ckpt_error *st, ckpt_error *err)
{
    if (err)
        *err = *st;
    return st->code;
}

/* Checks that every rank names the same checkpoint directory as rank 0. */
static void check_same_dir(const coll *c, const char *dir, ckpt_error *st)
{
    char root[PATH_CAP];
    long len = -1;
    if (!dir)
        failf(c, st, -EINVAL, "no checkpoint directory given (NULL)");
    else if (strlen(dir) >= sizeof root)
        failf(c, st, -ENAMETOOLONG, "checkpoint directory name is %zu bytes "
              "long (at most %d)", strlen(dir), PATH_CAP - 1);
    if (c->rank == 0 && st->code == 0)
        len = (long)strlen(dir);
    mpi_check(c, st, MPI_Bcast(&len, 1, MPI_LONG, 0, c->comm), "MPI_Bcast");
    if (len < 0 || len >= (long)sizeof root)
        return;
    if (c->rank == 0)
        memcpy(root, dir, (size_t)len + 1);
    mpi_check(c, st, MPI_Bcast(root, (int)len + 1, MPI_CHAR, 0, c->comm),
              "MPI_Bcast");
    root[len] = '\0';
    if (st->code == 0 && strcmp(root, dir) != 0)
        failf(c, st, -EINVAL, "checkpoint directory '%s' differs from rank "
              "0's '%s'", dir, root);
}

/* A caller's options struct (`outer`) and the one nested in it
 * (`inner`), each: where it goes (holding the defaults), where it comes
 * from, its size and its name. */
typedef struct opts_part {
    void *dst;
    const void *src;
    size_t size;
    const char *name;
} opts_part;

/* Reads both parts by their size fields (optsize.h); a refusal is this
 * rank's failure. */
static void take_opts(const coll *c, opts_part outer, opts_part inner,
                      ckpt_error *st)
{
    ckpt_error e = { 0 };
    if (ckpt_opts_take(outer.dst, outer.size, outer.src, outer.size,
                       outer.name, &e) ||
        ckpt_opts_take(inner.dst, inner.size, inner.src, inner.size,
                       inner.name, &e))
        fail_with(c, st, &e);
}

static void take_save_opts(const coll *c, ckpt_mpi_save_opts *dst,
                           const ckpt_mpi_save_opts *src, ckpt_error *st)
{
    ckpt_mpi_save_opts_init(dst);
    if (!src)
        return;
    ckpt_write_opts w = dst->write;
    take_opts(c, (opts_part){ dst, src, sizeof *dst, "ckpt_mpi_save_opts" },
              (opts_part){ &w, &src->write, sizeof w,
                           "ckpt_mpi_save_opts.write" }, st);
    dst->write = w;
}

static void take_load_opts(const coll *c, ckpt_mpi_load_opts *dst,
                           const ckpt_mpi_load_opts *src, ckpt_error *st)
{
    ckpt_mpi_load_opts_init(dst);
    if (!src)
        return;
    ckpt_read_opts r = dst->read;
    take_opts(c, (opts_part){ dst, src, sizeof *dst, "ckpt_mpi_load_opts" },
              (opts_part){ &r, &src->read, sizeof r,
                           "ckpt_mpi_load_opts.read" }, st);
    dst->read = r;
}

/* ============================================================ byte buffers */

typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
    int oom;
} wbuf;

static void wb_put(wbuf *b, const void *v, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, v, n);
    b->n += n;
}

static void wb_i32(wbuf *b, int32_t v)
{
    wb_put(b, &v, sizeof v);
}

static void wb_dims(wbuf *b, int ndim, const int64_t *v)
{
    wb_put(b, v, (size_t)ndim * sizeof *v);
}

typedef struct rbuf {
    const unsigned char *p;
    size_t n, at;
    int bad;
} rbuf;

static void rb_get(rbuf *b, void *v, size_t n)
{
    if (b->bad || n > b->n - b->at) {
        b->bad = 1;
        memset(v, 0, n);
        return;
    }
    memcpy(v, b->p + b->at, n);
    b->at += n;
}

static int32_t rb_i32(rbuf *b)
{
    int32_t v;
    rb_get(b, &v, sizeof v);
    return v;
}

/* ================================================================== save */

/* A piece as this rank describes it: bounds and names checked (the
 * planner's own test of a piece alone), data not looked at. */
static int check_piece(const coll *c, const ckpt_piece *p, size_t i,
                       ckpt_error *st)
{
    char wname[32];
    if (!p->fqn)
        return failf(c, st, -EINVAL, "piece %zu has no fqn (NULL)", i);
    if (p->ndim < 0 || p->ndim > CKPT_MAX_DIMS)
        return failf(c, st, -EINVAL, "tensor '%s': %d dimensions; between "
                     "0 and %d allowed", p->fqn, p->ndim, CKPT_MAX_DIMS);
    if (p->ndim > 0 && !p->shape)
        return failf(c, st, -EINVAL, "tensor '%s': no shape (NULL)", p->fqn);
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
        return fail_with(c, st, &e);
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
        failf(c, st, -EINVAL, "%zu pieces but no piece array (NULL)", n);
        return;
    }
    if (n > (size_t)INT_MAX) {
        failf(c, st, -EINVAL, "%zu pieces (at most %d per rank)", n, INT_MAX);
        return;
    }
    for (size_t i = 0; i < n && st->code == 0; i++)
        if (check_piece(c, &pieces[i], i, st) == 0)
            put_piece(b, &pieces[i]);
    if (st->code == 0 && b->oom)
        failf(c, st, -ENOMEM, "out of memory describing %zu pieces", n);
    if (st->code == 0 && b->n > (size_t)INT_MAX)
        failf(c, st, -EINVAL, "piece descriptions take %zu bytes (at most %d "
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
    mpi_check(c, st, MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM,
                                   c->comm), "MPI_Allreduce");
    if (agree(c, st))
        return;
    if (total > INT_MAX) {
        fail_all(st, -EINVAL, "the piece descriptions of all ranks take %lld "
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
            failf(c, st, -ENOMEM, "out of memory gathering piece "
                  "descriptions");
    }
    if (agree(c, st))
        return;
    int np = (int)n, nb = (int)b->n;
    unsigned char none[1];
    mpi_check(c, st, MPI_Gather(&np, 1, MPI_INT, sr->npieces, 1, MPI_INT, 0,
                                c->comm), "MPI_Gather");
    mpi_check(c, st, MPI_Gather(&nb, 1, MPI_INT, sr->nbytes, 1, MPI_INT, 0,
                                c->comm), "MPI_Gather");
    for (int r = 1; c->rank == 0 && r < c->size; r++) {
        sr->pdispl[r] = sr->pdispl[r - 1] + sr->npieces[r - 1];
        sr->bdispl[r] = sr->bdispl[r - 1] + sr->nbytes[r - 1];
    }
    mpi_check(c, st, MPI_Gatherv(b->p ? b->p : none, nb, MPI_BYTE, sr->wire,
                                 sr->nbytes, sr->bdispl, MPI_BYTE, 0, c->comm),
              "MPI_Gatherv");
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
        return failf(c, st, -ENOMEM, "out of memory for %zu pieces", total);
    for (int r = 0; r < c->size; r++) {
        rbuf b = { sr->wire + sr->bdispl[r], (size_t)sr->nbytes[r], 0, 0 };
        for (int i = 0; i < sr->npieces[r]; i++) {
            int rc = parse_piece(&b, r, &sr->recs);
            if (rc)
                return failf(c, st, rc, "cannot parse piece %d of rank %d%s",
                             i, r, rc == -ENOMEM ? ": out of memory" : "");
        }
    }
    return 0;
}

/* Rank 0: is `dir` free to save into?  Records whether it exists. */
static int check_target(const char *dir, save_root *sr, ckpt_error *st)
{
    ckpt_error e = { 0 };
    if (ckpt_async_check_target(dir, &sr->made_dir, &e))
        return fail_all(st, e.code, "%s", e.msg);
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
        fail_all(st, e.code, "planner: %s", e.msg);
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
            failf(c, st, -EINVAL, "tensor '%s': piece has no data",
                  pieces[i].fqn);
        else if (ckpt_async_hash(saver, pieces[i].data, (size_t)bytes, &h[i],
                                 what, &e))
            fail_with(c, st, &e);
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
        const ckpt_pieces_rec *a = &t->v[k], *b = &t->v[i];
        char off[CKPT_MAX_DIMS * 21 + 3], size[CKPT_MAX_DIMS * 21 + 3];
        ckpt_shape_format_json(off, sizeof off, ckpt_pieces_ndims(a),
                               ckpt_pieces_offsets(t, k));
        ckpt_shape_format_json(size, sizeof size, ckpt_pieces_ndims(a),
                               ckpt_pieces_sizes(t, k));
        fail_all(st, -EINVAL, "planner: tensor '%s': replicas of piece "
                 "offsets %s sizes %s have different bytes: writer %s (hash "
                 "%016llx) vs writer %s (hash %016llx)",
                 ckpt_pieces_str(t, a->fqn), off, size,
                 ckpt_pieces_str(t, a->writer),
                 (unsigned long long)sr->hashes[k],
                 ckpt_pieces_str(t, b->writer),
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
        failf(c, st, -ENOMEM, "out of memory");
    else
        hash_replicas(c, pieces, n, keep, saver, h, st);
    if (c->rank == 0 && st->code == 0 &&
        !(sr->hashes = calloc(sr->recs.n ? sr->recs.n : 1, sizeof *h)))
        failf(c, st, -ENOMEM, "out of memory");
    if (agree(c, st) == 0) {
        mpi_check(c, st, MPI_Gatherv(h, (int)n, MPI_UINT64_T, sr->hashes,
                                     sr->npieces, sr->pdispl, MPI_UINT64_T, 0,
                                     c->comm), "MPI_Gatherv");
        if (c->rank == 0 && st->code == 0)
            compare_replicas(sr, st);
    }
    free(h);
    for (size_t i = 0; i < n; i++)
        keep[i] &= KEEP_WRITE;
    return agree(c, st);
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
        fail_with(c, st, &e);
        return;
    }
    int rc = ckpt_writer_open(&w, dir, name, &o->write, &e);
    *owned = rc != -EEXIST;
    if (rc) {
        fail_with(c, st, &e);
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
        fail_with(c, st, &e);
        return;
    }
    if (ckpt_writer_close(w, &e))
        fail_with(c, st, &e);
}

static void remove_file(const char *dir, const char *rel)
{
    char path[PATH_CAP];
    if (ckpt_path_join(path, sizeof path, dir, rel, NULL) == 0)
        unlink(path);
}

static void remove_dir(const char *dir, const char *rel)
{
    char path[PATH_CAP];
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
        snprintf(rel, sizeof rel, ".pending/rank%d.plan-journal", c->rank);
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
    mpi_check(c, st, MPI_Scatterv(sr->keep, sr->npieces, sr->pdispl,
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
        fail_with(c, st, &e);
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
        failf(c, st, -ENOMEM, "out of memory");
    if (agree(c, st) == 0) {
        save_scatter(c, sr, keep, n, st);
        if (agree(c, st) == 0 &&
            save_check_replicas(c, pieces, n, keep, NULL, sr, st) == 0) {
            save_write(c, dir, pieces, n, keep, o, &owned, &lease, st);
            if (agree(c, st) == 0) {
                save_commit(c, dir, o, st);
                agree(c, st);
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
        return finish(&st, err);
    ckpt_mpi_save_opts taken;
    take_save_opts(&c, &taken, opts, &st);
    const ckpt_mpi_save_opts *o = &taken;
    wbuf b = { 0 };
    save_root sr = { 0 };
    check_same_dir(&c, dir, &st);
    if (st.code == 0)
        save_describe(&c, pieces, n, &b, &st);
    if (agree(&c, &st) == 0)
        save_gather(&c, n, &b, &sr, &st);
    free(b.p);
    if (agree(&c, &st) == 0 && c.rank == 0)
        save_plan(&c, dir, &sr, &st);
    if (agree(&c, &st) == 0)
        save_finish(&c, dir, pieces, n, &sr, o, &st);
    save_root_free(&sr);
    return finish(&st, err);
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
        fail_with(&h->c, &h->st, &e);
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
        return finish(&st, err);
    }
    coll *c = &h->c;
    wbuf b = { 0 };
    save_root sr = { 0 };
    ckpt_error e = { 0 };
    if (!saver || !out)
        failf(c, &st, -EINVAL, "async save: no saver or no handle pointer "
              "(NULL)");
    take_save_opts(c, &taken, opts, &st);
    check_same_dir(c, dir, &st);
    if (st.code == 0)
        save_describe(c, pieces, n, &b, &st);
    if (st.code == 0 && ckpt_async_check_data(saver, pieces, n, NULL, &e))
        fail_with(c, &st, &e);
    if (st.code == 0 && !(h->dir = strdup(dir)))
        failf(c, &st, -ENOMEM, "out of memory");
    if (agree(c, &st)) {
        /* Bad arguments: nothing started. */
        free(b.p);
        free(h->dir);
        free(h);
        return finish(&st, err);
    }
    /* From here on, failures are reported by the wait. */
    h->sync = o->write.sync;
    save_gather(c, n, &b, &sr, &st);
    free(b.p);
    if (agree(c, &st) == 0 && c->rank == 0)
        save_plan(c, dir, &sr, &st);
    h->made_dir = sr.made_dir;
    uint8_t *keep = calloc(n ? n : 1, 1);
    if (!keep)
        failf(c, &st, -ENOMEM, "out of memory");
    if (agree(c, &st) == 0) {
        save_scatter(c, &sr, keep, n, &st);
        if (agree(c, &st) == 0 &&
            save_check_replicas(c, pieces, n, keep, saver, &sr, &st) == 0) {
            h->began = 1;
            if (c->rank == 0 && ckpt_save_begin(&h->lease, dir, &e))
                fail_with(c, &st, &e);
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
        fail_with(c, &h->st, &e);
    if (agree(c, &h->st) == 0) {
        ckpt_mpi_save_opts o;
        ckpt_mpi_save_opts_init(&o);
        o.write.sync = h->sync;
        save_commit(c, h->dir, &o, &h->st);
        agree(c, &h->st);
    }
    if (h->st.code && h->began)
        save_cleanup(c, h->dir, owned, h->made_dir);
    ckpt_lease_drop(h->lease);
    int rc = finish(&h->st, err);
    free(h->dir);
    free(h);
    return rc;
}

void ckpt_mpi_bytes_piece(ckpt_piece *p, const char *fqn, const void *data,
                          int64_t *len_storage, size_t len)
{
    *len_storage = (int64_t)len;
    *p = (ckpt_piece){ .fqn = fqn, .dtype = CKPT_BYTES, .ndim = 1,
                       .shape = len_storage, .data = data };
}

/* ================================================================== load */

/* One region of one rank, as every rank sees it after the all-gather. */
typedef struct lreq {
    int rank;            /* the rank that wants it */
    uint32_t idx;        /* its index among that rank's regions */
    uint32_t t;          /* tensor */
    size_t dims;         /* offsets at dims[dims], sizes at dims[dims+ndim] */
} lreq;

/* A region's overlap B with one chunk (global coordinates). */
typedef struct part {
    uint32_t req;
    uint32_t chunk;
    size_t dims;         /* B's offsets and sizes in the dims pool */
    uint64_t elo, ehi;   /* B's first and past-last chunk-linear elements */
} part;

/* Bytes [b0, b0 + n) of a part's row-major image, which one frame holds. */
typedef struct unit {
    uint32_t part;
    uint64_t b0, n;
    size_t at;           /* this round: offset in the send or receive buffer */
} unit;

/* The units of one frame, and the rank that reads it. */
typedef struct group {
    size_t u0, nu;
    int owner;
    int remote;          /* some unit goes to another rank */
    uint64_t raw;        /* the frame's raw bytes */
    uint64_t e0;         /* its first element, chunk-linear */
} group;

typedef struct loader {
    coll c;
    ckpt_reader *r;
    const char *dir;
    const ckpt_mpi_region *regions;
    size_t n;
    size_t exchange;
    lreq *req;
    size_t nreq;
    int64_t *dims;
    size_t ndims, dcap;
    part *parts;
    size_t nparts, pcap;
    unit *units;
    size_t nunits, ucap;
    group *groups;
    size_t ngroups, gcap;
    uint64_t *load;      /* per rank: work of the frames it owns */
    uint64_t *ov;        /* per rank: scratch */
    uint64_t *sendt, *recvt;     /* per rank: bytes in the current round */
    int *scount, *sdispl, *rcount, *rdispl;
    unsigned char *sbuf, *rbuf;
    size_t scap, rcap;
    ckpt_pool *pool;
    uint64_t requested;  /* bytes this rank's regions ask for */
} loader;

/* Returns v grown (realloc) to hold at least `need` elements of `elem`
 * bytes, updating *cap; v itself when it is large enough; NULL (v left
 * alone) when out of memory. */
static void *grow(void *v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return v;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(v, n * elem);
    if (p)
        *cap = n;
    return p;
}

/* Reserves 2 * ndim entries in the dims pool; returns their index. */
static int dims_add(loader *ld, int ndim, size_t *at)
{
    int64_t *d = grow(ld->dims, &ld->dcap, ld->ndims + 2 * (size_t)ndim + 1,
                      sizeof *d);
    if (!d)
        return -ENOMEM;
    ld->dims = d;
    *at = ld->ndims;
    ld->ndims += 2 * (size_t)ndim;
    return 0;
}

static const int64_t *offs_of(const loader *ld, size_t at)
{
    return ld->dims + at;
}

static const int64_t *sizes_of(const loader *ld, size_t at, int ndim)
{
    return ld->dims + at + ndim;
}

static void tinfo(const loader *ld, size_t t, ckpt_tensor_info *ti)
{
    ckpt_reader_info(ld->r, t, ti);   /* t comes from ckpt_reader_find */
}

/* The rank whose region unit u belongs to. */
static int unit_rank(const loader *ld, const unit *u)
{
    return ld->req[ld->parts[u->part].req].rank;
}

/* ------------------------------------------------------ local regions */

/* Checks region i of this rank; returns its tensor index or a failure. */
static long check_region(loader *ld, size_t i, const int64_t **off,
                         const int64_t **size, ckpt_error *st)
{
    const coll *c = &ld->c;
    const ckpt_mpi_region *g = &ld->regions[i];
    if (!g->fqn)
        return failf(c, st, -EINVAL, "region %zu has no fqn (NULL)", i);
    long t = ckpt_reader_find(ld->r, g->fqn);
    if (t < 0)
        return failf(c, st, -ENOENT, "tensor '%s' is not in %s", g->fqn,
                     ld->dir);
    ckpt_tensor_info ti;
    tinfo(ld, (size_t)t, &ti);
    static const int64_t zeros[CKPT_MAX_DIMS];
    *off = g->offsets ? g->offsets : zeros;
    *size = g->sizes ? g->sizes : ti.shape;
    for (int d = 0; d < ti.ndim; d++)
        if ((*off)[d] < 0 || (*size)[d] < 0 || (*off)[d] > ti.shape[d] ||
            (*size)[d] > ti.shape[d] - (*off)[d])
            return failf(c, st, -EINVAL, "tensor '%s': region dim %d [%lld, "
                         "+%lld) is outside its size %lld", g->fqn, d,
                         (long long)(*off)[d], (long long)(*size)[d],
                         (long long)ti.shape[d]);
    uint64_t nbytes = ckpt_box_numel(ti.ndim, *size) *
                      ckpt_dtype_size(ti.dtype);
    if (nbytes > 0 && !g->dst)
        return failf(c, st, -EINVAL, "tensor '%s': region %zu has no "
                     "destination buffer (NULL)", g->fqn, i);
    ld->requested += nbytes;
    return t;
}

/* Checks and serialises this rank's regions: u32 tensor, then offsets and
 * sizes (the tensor's ndim int64 each). */
static void describe_regions(loader *ld, wbuf *b, ckpt_error *st)
{
    const coll *c = &ld->c;
    if (ld->n > 0 && !ld->regions) {
        failf(c, st, -EINVAL, "%zu regions but no region array (NULL)", ld->n);
        return;
    }
    if (ld->n > (size_t)INT_MAX) {
        failf(c, st, -EINVAL, "%zu regions (at most %d per rank)", ld->n,
              INT_MAX);
        return;
    }
    for (size_t i = 0; i < ld->n && st->code == 0; i++) {
        const int64_t *off = NULL, *size = NULL;
        long t = check_region(ld, i, &off, &size, st);
        if (t < 0)
            return;
        ckpt_tensor_info ti;
        tinfo(ld, (size_t)t, &ti);
        uint32_t t32 = (uint32_t)t;
        wb_put(b, &t32, sizeof t32);
        wb_dims(b, ti.ndim, off);
        wb_dims(b, ti.ndim, size);
    }
    if (st->code == 0 && b->oom)
        failf(c, st, -ENOMEM, "out of memory describing %zu regions", ld->n);
    if (st->code == 0 && b->n > (size_t)INT_MAX)
        failf(c, st, -EINVAL, "region descriptions take %zu bytes (at most "
              "%d per rank)", b->n, INT_MAX);
}

/* ------------------------------------------------------ all-gather */

static int parse_regions(loader *ld, const unsigned char *wire,
                         const int *count, const int *nbytes,
                         const int *displ)
{
    size_t total = 0;
    for (int r = 0; r < ld->c.size; r++)
        total += (size_t)count[r];
    if (total > UINT32_MAX)
        return -E2BIG;
    ld->req = calloc(total ? total : 1, sizeof *ld->req);
    if (!ld->req)
        return -ENOMEM;
    for (int r = 0; r < ld->c.size; r++) {
        rbuf b = { wire + displ[r], (size_t)nbytes[r], 0, 0 };
        for (int i = 0; i < count[r]; i++) {
            lreq *q = &ld->req[ld->nreq++];
            uint32_t t;
            rb_get(&b, &t, sizeof t);
            if (b.bad || t >= ckpt_reader_count(ld->r))
                return -EPROTO;
            ckpt_tensor_info ti;
            tinfo(ld, t, &ti);
            *q = (lreq){ .rank = r, .idx = (uint32_t)i, .t = t };
            if (dims_add(ld, ti.ndim, &q->dims))
                return -ENOMEM;
            rb_get(&b, ld->dims + q->dims,
                   2 * (size_t)ti.ndim * sizeof *ld->dims);
            if (b.bad)
                return -EPROTO;
        }
    }
    return 0;
}

/* Sizes and displacements of the ranks' region descriptions. */
typedef struct wire_sizes {
    int *all, *count, *nbytes, *displ;
    int64_t total;
} wire_sizes;

static void wire_sizes_free(wire_sizes *ws)
{
    free(ws->all);
    free(ws->count);
    free(ws->nbytes);
    free(ws->displ);
}

static void gather_sizes(loader *ld, const wbuf *b, wire_sizes *ws,
                         ckpt_error *st)
{
    coll *c = &ld->c;
    size_t k = (size_t)c->size;
    int mine[2] = { (int)ld->n, (int)b->n };
    ws->all = calloc(2 * k, sizeof *ws->all);
    ws->count = calloc(k, sizeof *ws->count);
    ws->nbytes = calloc(k, sizeof *ws->nbytes);
    ws->displ = calloc(k, sizeof *ws->displ);
    if (!ws->all || !ws->count || !ws->nbytes || !ws->displ)
        failf(c, st, -ENOMEM, "out of memory");
    if (agree(c, st))
        return;
    mpi_check(c, st, MPI_Allgather(mine, 2, MPI_INT, ws->all, 2, MPI_INT,
                                   c->comm), "MPI_Allgather");
    for (size_t r = 0; r < k; r++) {
        ws->count[r] = ws->all[2 * r];
        ws->nbytes[r] = ws->all[2 * r + 1];
        ws->displ[r] = ws->total < INT_MAX ? (int)ws->total : 0;
        ws->total += ws->nbytes[r];
    }
}

/* Every rank learns every rank's regions. */
static void gather_regions(loader *ld, const wbuf *b, ckpt_error *st)
{
    coll *c = &ld->c;
    wire_sizes ws = { 0 };
    unsigned char *wire = NULL, none[1];
    gather_sizes(ld, b, &ws, st);
    if (agree(c, st) == 0 && ws.total > INT_MAX)
        fail_all(st, -EINVAL, "the region descriptions of all ranks take "
                 "%lld bytes (at most %d)", (long long)ws.total, INT_MAX);
    if (st->code == 0 && !(wire = malloc(ws.total ? (size_t)ws.total : 1)))
        failf(c, st, -ENOMEM, "out of memory for %lld bytes of regions",
              (long long)ws.total);
    if (agree(c, st) == 0) {
        mpi_check(c, st, MPI_Allgatherv(b->p ? b->p : none, (int)b->n,
                                        MPI_BYTE, wire, ws.nbytes, ws.displ,
                                        MPI_BYTE, c->comm), "MPI_Allgatherv");
        int rc = st->code ? 0 : parse_regions(ld, wire, ws.count, ws.nbytes,
                                              ws.displ);
        if (rc)
            failf(c, st, rc, "cannot take in the regions of all ranks: %s",
                  rc == -ENOMEM ? "out of memory" : rc == -E2BIG
                  ? "more than 2^32 regions" : "malformed description");
    }
    free(wire);
    wire_sizes_free(&ws);
}

/* ------------------------------------------------------ exchange plan */

/* Number of elements of box (bo, bs), given relative to a chunk of sizes
 * cs, whose chunk-linear index is below e (e <= numel(cs)). */
static uint64_t count_below(int ndim, const int64_t *bo, const int64_t *bs,
                            const int64_t *cs, uint64_t e)
{
    uint64_t cnumel = ckpt_box_numel(ndim, cs), bnumel = ckpt_box_numel(ndim,
                                                                         bs);
    if (bnumel == 0 || e == 0)
        return 0;
    if (e >= cnumel)
        return bnumel;
    uint64_t x[CKPT_MAX_DIMS], count = 0, inner = bnumel;
    for (int d = ndim - 1; d >= 0; d--) {
        x[d] = e % (uint64_t)cs[d];
        e /= (uint64_t)cs[d];
    }
    for (int d = 0; d < ndim; d++) {
        uint64_t lo = (uint64_t)bo[d], hi = lo + (uint64_t)bs[d];
        inner /= (uint64_t)bs[d];
        uint64_t below = x[d] <= lo ? 0 : (x[d] < hi ? x[d] : hi) - lo;
        count += below * inner;
        if (x[d] < lo || x[d] >= hi)
            break;
    }
    return count;
}

typedef struct chunk_view {
    size_t t, c;
    int ndim;
    size_t isz;
    const int64_t *off, *size;
    uint64_t nframes;
} chunk_view;

/* The parts of chunk cv: its overlaps with the regions reqs[0..k). */
static int add_parts(loader *ld, const chunk_view *cv, const size_t *reqs,
                     size_t k)
{
    for (size_t j = 0; j < k; j++) {
        const lreq *q = &ld->req[reqs[j]];
        int64_t bo[CKPT_MAX_DIMS], bs[CKPT_MAX_DIMS], last[CKPT_MAX_DIMS];
        if (!ckpt_box_intersect(cv->ndim, offs_of(ld, q->dims),
                                sizes_of(ld, q->dims, cv->ndim), cv->off,
                                cv->size, bo, bs))
            continue;
        if (ld->nparts >= UINT32_MAX || cv->c > UINT32_MAX)
            return -E2BIG;
        part p = { .req = (uint32_t)reqs[j], .chunk = (uint32_t)cv->c };
        part *v = grow(ld->parts, &ld->pcap, ld->nparts + 1, sizeof *v);
        if (!v)
            return -ENOMEM;
        ld->parts = v;
        if (dims_add(ld, cv->ndim, &p.dims))
            return -ENOMEM;
        memcpy(ld->dims + p.dims, bo, (size_t)cv->ndim * sizeof *bo);
        memcpy(ld->dims + p.dims + cv->ndim, bs,
               (size_t)cv->ndim * sizeof *bs);
        for (int d = 0; d < cv->ndim; d++)
            last[d] = bo[d] + bs[d] - 1;
        p.elo = ckpt_box_linear(cv->ndim, cv->off, cv->size, bo);
        p.ehi = ckpt_box_linear(cv->ndim, cv->off, cv->size, last) + 1;
        ld->parts[ld->nparts++] = p;
    }
    return 0;
}

/* Work of a rank that owns a frame of `raw` bytes and needs `ov` of them:
 * decoding it, plus sending the rest, counted a quarter (moving a byte
 * costs much less than decoding it, within a node or over a network). */
static uint64_t owner_cost(uint64_t raw, uint64_t ov)
{
    return raw + (raw > ov ? raw - ov : 0) / 4;
}

/* The owner of a frame: among the ranks that need it, the one with the
 * least work once it takes the frame (greedy; ties: the rank that needs
 * more of it, then the lowest).  Frames that several ranks need alike are
 * spread over them; a rank needing a frame much more than the others
 * takes it unless it is already busier.  Adds the work to the owner and
 * resets the ov entries. */
static int choose_owner(loader *ld, const group *g)
{
    int best = -1;
    uint64_t best_key = 0, best_ov = 0;
    for (size_t u = g->u0; u < g->u0 + g->nu; u++) {
        int r = unit_rank(ld, &ld->units[u]);
        uint64_t ov = ld->ov[r];
        uint64_t key = ld->load[r] + owner_cost(g->raw, ov);
        int tie = key == best_key &&
                  (ov > best_ov || (ov == best_ov && r < best));
        if (best < 0 || key < best_key || tie) {
            best = r;
            best_key = key;
            best_ov = ov;
        }
    }
    ld->load[best] = best_key;
    for (size_t u = g->u0; u < g->u0 + g->nu; u++)
        ld->ov[unit_rank(ld, &ld->units[u])] = 0;
    return best;
}

/* Adds the group of units of frame i of chunk cv (parts p0..p1). */
static int add_group(loader *ld, const chunk_view *cv, size_t p0, size_t p1,
                     const ckpt_frame_info *f)
{
    uint64_t e0 = f->raw_offset / cv->isz;
    uint64_t e1 = (f->raw_offset + f->raw_size) / cv->isz;
    group g = { .u0 = ld->nunits, .e0 = e0 };
    for (size_t p = p0; p < p1; p++) {
        const part *pp = &ld->parts[p];
        if (pp->ehi <= e0 || pp->elo >= e1)
            continue;
        int64_t rel[CKPT_MAX_DIMS];
        const int64_t *bo = offs_of(ld, pp->dims);
        const int64_t *bs = sizes_of(ld, pp->dims, cv->ndim);
        for (int d = 0; d < cv->ndim; d++)
            rel[d] = bo[d] - cv->off[d];
        uint64_t a = count_below(cv->ndim, rel, bs, cv->size, e0);
        uint64_t b = count_below(cv->ndim, rel, bs, cv->size, e1);
        if (b <= a)
            continue;
        unit *v = grow(ld->units, &ld->ucap, ld->nunits + 1, sizeof *v);
        if (!v)
            return -ENOMEM;
        ld->units = v;
        ld->units[ld->nunits++] = (unit){ (uint32_t)p, a * cv->isz,
                                          (b - a) * cv->isz, 0 };
        ld->ov[ld->req[pp->req].rank] += (b - a) * cv->isz;
        g.nu++;
    }
    if (g.nu == 0)
        return 0;
    g.raw = f->raw_size;
    g.owner = choose_owner(ld, &g);
    for (size_t u = g.u0; u < g.u0 + g.nu; u++)
        if (ld->req[ld->parts[ld->units[u].part].req].rank != g.owner)
            g.remote = 1;
    group *v = grow(ld->groups, &ld->gcap, ld->ngroups + 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    ld->groups = v;
    ld->groups[ld->ngroups++] = g;
    return 0;
}

/* First frame of chunk cv holding chunk-linear element e. */
static int first_frame(loader *ld, const chunk_view *cv, uint64_t e,
                       uint64_t *out, ckpt_error *err)
{
    uint64_t lo = 0, hi = cv->nframes;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        ckpt_frame_info f;
        int rc = ckpt_reader_frame(ld->r, cv->t, cv->c, mid, &f, err);
        if (rc)
            return rc;
        if (f.raw_offset / cv->isz <= e)
            lo = mid;
        else
            hi = mid;
    }
    *out = lo;
    return 0;
}

/* The groups of chunk cv's frames that the parts p0..p1 need. */
static int plan_frames(loader *ld, const chunk_view *cv, size_t p0,
                       size_t p1, ckpt_error *err)
{
    uint64_t lo = UINT64_MAX, hi = 0, i;
    for (size_t p = p0; p < p1; p++) {
        lo = ld->parts[p].elo < lo ? ld->parts[p].elo : lo;
        hi = ld->parts[p].ehi > hi ? ld->parts[p].ehi : hi;
    }
    int rc = first_frame(ld, cv, lo, &i, err);
    for (; rc == 0 && i < cv->nframes; i++) {
        ckpt_frame_info f;
        rc = ckpt_reader_frame(ld->r, cv->t, cv->c, i, &f, err);
        if (rc || f.raw_offset / cv->isz >= hi)
            break;
        rc = add_group(ld, cv, p0, p1, &f);
        if (rc)
            ckpt_err(err, rc, "out of memory planning the exchange");
    }
    return rc;
}

/* Parts and groups of tensor t, wanted by the regions reqs[0..k). */
static int plan_tensor(loader *ld, size_t t, const size_t *reqs, size_t k,
                       ckpt_error *err)
{
    ckpt_tensor_info ti;
    tinfo(ld, t, &ti);
    for (size_t c = 0; c < ti.nchunks; c++) {
        ckpt_chunk_info ci;
        if (ckpt_reader_chunk(ld->r, t, c, &ci))   /* loads them once */
            return ckpt_err(err, -EIO, "tensor '%s': its chunks cannot be "
                            "loaded from the index (damaged index)", ti.fqn);
        chunk_view cv = { t, c, ti.ndim, ckpt_dtype_size(ti.dtype),
                          ci.offsets, ci.sizes, ci.nframes };
        size_t p0 = ld->nparts;
        int rc = add_parts(ld, &cv, reqs, k);
        if (rc)
            return ckpt_err(err, rc, "%s planning the exchange", rc == -E2BIG
                            ? "too many region pieces" : "out of memory");
        if (ld->nparts > p0 && cv.nframes > 0)
            rc = plan_frames(ld, &cv, p0, ld->nparts, err);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct req_ref {
    uint32_t t;
    size_t i;
} req_ref;

static int cmp_req_ref(const void *a, const void *b)
{
    const req_ref *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* The whole exchange plan, the same on every rank: tensor by tensor, the
 * regions that want it. */
static int plan_exchange(loader *ld, ckpt_error *err)
{
    size_t n = ld->nreq;
    req_ref *refs = malloc((n ? n : 1) * sizeof *refs);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    int rc = 0;
    if (!refs || !order)
        rc = ckpt_err(err, -ENOMEM, "out of memory planning the exchange");
    for (size_t i = 0; rc == 0 && i < n; i++)
        refs[i] = (req_ref){ ld->req[i].t, i };
    if (rc == 0)
        qsort(refs, n, sizeof *refs, cmp_req_ref);
    for (size_t i = 0; rc == 0 && i < n; i++)
        order[i] = refs[i].i;
    for (size_t a = 0, b; rc == 0 && a < n; a = b) {
        for (b = a + 1; b < n && refs[b].t == refs[a].t; b++)
            ;
        rc = plan_tensor(ld, refs[a].t, order + a, b - a, err);
    }
    free(refs);
    free(order);
    return rc;
}

/* ------------------------------------------------------ reading units */

/* A pool thread's buffers: a shared frame, decoded once, and a box on
 * its way to a region it is not contiguous in. */
typedef struct scratch {
    unsigned char *frame, *box;
    size_t fcap, bcap;
} scratch;

static int reserve(unsigned char **p, size_t *cap, size_t n, ckpt_error *err)
{
    if (n <= *cap)
        return 0;
    unsigned char *q = realloc(*p, n);
    if (!q)
        return ckpt_err(err, -ENOMEM, "out of memory (%zu bytes)", n);
    *p = q;
    *cap = n;
    return 0;
}

enum walk_mode {
    WALK_TO_STREAM,      /* read from the checkpoint into the stream */
    WALK_TO_DST,         /* read from the checkpoint into the region */
    WALK_FROM_STREAM,    /* copy the stream into the region */
    WALK_FRAME_TO_STREAM,/* copy from the decoded frame into the stream */
    WALK_FRAME_TO_DST    /* copy from the decoded frame into the region */
};

/* Walks the boxes of a unit (bytes [b0, b0+n) of its part's row-major
 * image: a sequence of row-major boxes) moving each one. */
typedef struct walk {
    loader *ld;
    size_t t;
    int ndim;
    size_t isz;
    const int64_t *boff;          /* the part's global offsets */
    const int64_t *qoff, *qsize;  /* the destination region */
    unsigned char *qdst;
    unsigned char *stream;        /* the unit's bytes, box after box */
    size_t pos;
    const int64_t *coff, *csize;  /* the chunk (frame modes) */
    const unsigned char *frame;   /* its decoded frame ... */
    uint64_t e0;                  /* ... which starts at this element */
    enum walk_mode mode;
    scratch *tmp;
    ckpt_error *err;
} walk;

static int place_run(void *arg, uint64_t src, uint64_t dst, uint64_t n)
{
    walk *w = arg;
    memcpy(w->qdst + dst * w->isz, w->stream + w->pos + src * w->isz,
           n * w->isz);
    return 0;
}

/* Copies the row-major box (off, size) at w->stream + w->pos into the
 * destination region. */
static void place_box(walk *w, const int64_t *off, const int64_t *size)
{
    ckpt_region_runs(w->ndim, off, size, off, size, w->qoff, w->qsize,
                     place_run, w);
}

static int frame_run(void *arg, uint64_t src, uint64_t dst, uint64_t n)
{
    walk *w = arg;
    unsigned char *to = w->mode == WALK_FRAME_TO_DST ? w->qdst
                                                     : w->stream + w->pos;
    memcpy(to + dst * w->isz, w->frame + (src - w->e0) * w->isz,
           n * w->isz);
    return 0;
}

/* Copies box (off, size), which lies in the decoded frame, into the
 * stream or the destination region. */
static void frame_box(walk *w, const int64_t *off, const int64_t *size)
{
    if (w->mode == WALK_FRAME_TO_DST)
        ckpt_region_runs(w->ndim, off, size, w->coff, w->csize, w->qoff,
                         w->qsize, frame_run, w);
    else
        ckpt_region_runs(w->ndim, off, size, w->coff, w->csize, off, size,
                         frame_run, w);
}

/* 1 when box (off, size) is one contiguous run of the destination region's
 * image; *at is then its first element there. */
static int contiguous_in(const walk *w, const int64_t *off,
                         const int64_t *size, uint64_t *at)
{
    int d = 0;
    while (d < w->ndim && size[d] == 1)
        d++;
    for (int k = d + 1; k < w->ndim; k++)
        if (size[k] != w->qsize[k])
            return 0;
    *at = ckpt_box_linear(w->ndim, w->qoff, w->qsize, off);
    return 1;
}

static int read_to_dst(walk *w, const int64_t *off, const int64_t *size,
                       size_t bytes)
{
    uint64_t at;
    if (contiguous_in(w, off, size, &at))
        return ckpt_read_region(w->ld->r, w->t, off, size,
                                w->qdst + at * w->isz, w->err);
    int rc = reserve(&w->tmp->box, &w->tmp->bcap, bytes, w->err);
    if (rc == 0)
        rc = ckpt_read_region(w->ld->r, w->t, off, size, w->tmp->box, w->err);
    if (rc == 0) {
        walk pw = *w;
        pw.stream = w->tmp->box;
        pw.pos = 0;
        place_box(&pw, off, size);
    }
    return rc;
}

static int walk_box(void *arg, const int64_t *rel, const int64_t *size)
{
    walk *w = arg;
    int64_t off[CKPT_MAX_DIMS];
    for (int d = 0; d < w->ndim; d++)
        off[d] = w->boff[d] + rel[d];
    size_t bytes = (size_t)ckpt_box_numel(w->ndim, size) * w->isz;
    int rc = 0;
    switch (w->mode) {
    case WALK_TO_STREAM:
        rc = ckpt_read_region(w->ld->r, w->t, off, size, w->stream + w->pos,
                              w->err);
        break;
    case WALK_TO_DST:
        rc = read_to_dst(w, off, size, bytes);
        break;
    case WALK_FROM_STREAM:
        place_box(w, off, size);
        break;
    case WALK_FRAME_TO_STREAM:
    case WALK_FRAME_TO_DST:
        frame_box(w, off, size);
        break;
    }
    w->pos += bytes;
    return rc;
}

/* The walk of unit u in `mode`; the caller sets the frame fields. */
static walk unit_walk(loader *ld, const unit *u, enum walk_mode mode,
                      unsigned char *stream, scratch *tmp, ckpt_error *err)
{
    const part *p = &ld->parts[u->part];
    const lreq *q = &ld->req[p->req];
    ckpt_tensor_info ti;
    tinfo(ld, q->t, &ti);
    walk w = { .ld = ld, .t = q->t, .ndim = ti.ndim,
               .isz = ckpt_dtype_size(ti.dtype), .boff = offs_of(ld, p->dims),
               .stream = stream, .mode = mode, .tmp = tmp, .err = err };
    if (mode != WALK_TO_STREAM && mode != WALK_FRAME_TO_STREAM) {
        w.qoff = offs_of(ld, q->dims);
        w.qsize = sizes_of(ld, q->dims, ti.ndim);
        w.qdst = ld->regions[q->idx].dst;
    }
    return w;
}

static int run_walk(loader *ld, const unit *u, walk *w)
{
    const part *p = &ld->parts[u->part];
    return ckpt_region_linear_boxes(w->ndim, sizes_of(ld, p->dims, w->ndim),
                                    u->b0 / w->isz, (u->b0 + u->n) / w->isz,
                                    walk_box, w);
}

/* Moves unit u: reads it into `stream`, reads it into this rank's region,
 * or places `stream` into the region. */
static int move_unit(loader *ld, const unit *u, enum walk_mode mode,
                     unsigned char *stream, scratch *tmp, ckpt_error *err)
{
    walk w = unit_walk(ld, u, mode, stream, tmp, err);
    return run_walk(ld, u, &w);
}

/* Reads the whole frame of group g (its chunk-linear elements) into
 * tmp->frame: one decode, whatever the reader's cache holds. */
typedef struct frame_read {
    loader *ld;
    size_t t;
    int ndim;
    size_t isz;
    const int64_t *coff;
    unsigned char *buf;
    size_t pos;
    ckpt_error *err;
} frame_read;

static int frame_read_box(void *arg, const int64_t *rel, const int64_t *size)
{
    frame_read *fr = arg;
    int64_t off[CKPT_MAX_DIMS];
    for (int d = 0; d < fr->ndim; d++)
        off[d] = fr->coff[d] + rel[d];
    int rc = ckpt_read_region(fr->ld->r, fr->t, off, size, fr->buf + fr->pos,
                              fr->err);
    fr->pos += (size_t)ckpt_box_numel(fr->ndim, size) * fr->isz;
    return rc;
}

/* Group g's frame, decoded into tmp->frame; *ci receives its chunk. */
static int read_frame(loader *ld, const group *g, scratch *tmp,
                      ckpt_chunk_info *ci, ckpt_error *err)
{
    const part *p = &ld->parts[ld->units[g->u0].part];
    size_t t = ld->req[p->req].t;
    ckpt_tensor_info ti;
    tinfo(ld, t, &ti);
    if (ckpt_reader_chunk(ld->r, t, p->chunk, ci))  /* loaded by planning */
        return ckpt_err(err, -EIO, "tensor '%s': its chunks cannot be loaded",
                        ti.fqn);
    int rc = reserve(&tmp->frame, &tmp->fcap, g->raw, err);
    if (rc)
        return rc;
    frame_read fr = { ld, t, ti.ndim, ckpt_dtype_size(ti.dtype), ci->offsets,
                      tmp->frame, 0, err };
    return ckpt_region_linear_boxes(ti.ndim, ci->sizes, g->e0,
                                    g->e0 + g->raw / fr.isz, frame_read_box,
                                    &fr);
}

/* This rank owns group g.  A frame one unit needs is read straight where
 * it goes; a frame several units share is decoded once into a buffer and
 * each unit copied out of it. */
static int read_group(loader *ld, const group *g, scratch *tmp,
                      ckpt_error *err)
{
    unit *u = &ld->units[g->u0];
    int me = ld->c.rank;
    if (g->nu == 1)
        return unit_rank(ld, u) == me
                   ? move_unit(ld, u, WALK_TO_DST, NULL, tmp, err)
                   : move_unit(ld, u, WALK_TO_STREAM, ld->sbuf + u->at, tmp,
                               err);
    ckpt_chunk_info ci;
    int rc = read_frame(ld, g, tmp, &ci, err);
    for (size_t k = g->u0; k < g->u0 + g->nu && rc == 0; k++) {
        u = &ld->units[k];
        int own = unit_rank(ld, u) == me;
        walk w = unit_walk(ld, u, own ? WALK_FRAME_TO_DST
                                      : WALK_FRAME_TO_STREAM,
                           own ? NULL : ld->sbuf + u->at, tmp, err);
        w.coff = ci.offsets;
        w.csize = ci.sizes;
        w.frame = tmp->frame;
        w.e0 = g->e0;
        rc = run_walk(ld, u, &w);
    }
    return rc;
}

/* ------------------------------------------------------ rounds */

/* A batch of this rank's groups, read by one pool thread (shaped like
 * reader.c's copy_task on purpose: see there). */
typedef struct read_task {
    loader *ld;
    const size_t *groups;
    size_t n;
    int rc;
    ckpt_error err;
    ckpt_taskgroup *tg;
} read_task;

static void read_task_run(void *arg, int worker)
{
    (void)worker;
    read_task *rt = arg;
    scratch tmp = { 0 };
    for (size_t i = 0; i < rt->n && rt->rc == 0; i++)
        rt->rc = read_group(rt->ld, &rt->ld->groups[rt->groups[i]], &tmp,
                            &rt->err);
    free(tmp.frame);
    free(tmp.box);
    ckpt_tg_done(rt->tg);
}

/* Reads the groups g0..g1 this rank owns, on the pool. */
static int read_owned(loader *ld, size_t g0, size_t g1, ckpt_error *err)
{
    size_t n = 0, ntasks = 0;
    uint64_t bytes = 0;
    size_t *mine = malloc((g1 - g0 + 1) * sizeof *mine);
    read_task *tasks = calloc(g1 - g0 + 1, sizeof *tasks);
    if (!mine || !tasks) {
        free(mine);
        free(tasks);
        return ckpt_err(err, -ENOMEM, "out of memory");
    }
    for (size_t g = g0; g < g1; g++)
        if (ld->groups[g].owner == ld->c.rank) {
            mine[n++] = g;
            bytes += ld->groups[g].raw;
        }
    uint64_t share = bytes / (uint64_t)(4 * ckpt_pool_threads(ld->pool));
    share = share > TASK_BYTES ? TASK_BYTES : share;
    ckpt_taskgroup tg;
    ckpt_tg_init(&tg);
    for (size_t i = 0; i < n;) {
        read_task *rt = &tasks[ntasks++];
        *rt = (read_task){ .ld = ld, .groups = mine + i, .tg = &tg };
        for (uint64_t b = 0; i < n && (rt->n == 0 || b < share); i++, rt->n++)
            b += ld->groups[mine[i]].raw;
    }
    ckpt_pool_run_tasks(ld->pool, read_task_run, tasks, ntasks, sizeof *tasks,
                        &tg);
    ckpt_tg_destroy(&tg);
    int rc = 0;
    for (size_t i = 0; i < ntasks && rc == 0; i++)
        if (tasks[i].rc) {
            rc = tasks[i].rc;
            *err = tasks[i].err;
        }
    free(mine);
    free(tasks);
    return rc;
}

/* Adds group g's remote bytes to the round's per-rank totals, or takes
 * them away again. */
static void count_group(loader *ld, const group *g, int add)
{
    for (size_t u = g->u0; u < g->u0 + g->nu; u++) {
        int to = unit_rank(ld, &ld->units[u]);
        if (to == g->owner)
            continue;
        uint64_t n = ld->units[u].n;
        ld->sendt[g->owner] = add ? ld->sendt[g->owner] + n
                                  : ld->sendt[g->owner] - n;
        ld->recvt[to] = add ? ld->recvt[to] + n : ld->recvt[to] - n;
    }
}

/* 1 when a rank that group g sends from or to has more than limit bytes
 * in the round. */
static int group_over(const loader *ld, const group *g, uint64_t limit)
{
    for (size_t u = g->u0; u < g->u0 + g->nu; u++) {
        int to = unit_rank(ld, &ld->units[u]);
        if (to != g->owner &&
            (ld->sendt[g->owner] > limit || ld->recvt[to] > limit))
            return 1;
    }
    return 0;
}

/* End of the round that starts at group g0 (the same on every rank):
 * whole groups while no rank sends or receives more than the exchange
 * bound (a group over the bound on its own makes a round alone); *remote
 * tells whether any bytes move between ranks. */
static size_t round_end(loader *ld, size_t g0, int *remote, ckpt_error *st)
{
    size_t g = g0;
    memset(ld->sendt, 0, (size_t)ld->c.size * sizeof *ld->sendt);
    memset(ld->recvt, 0, (size_t)ld->c.size * sizeof *ld->recvt);
    *remote = 0;
    for (; g < ld->ngroups; g++) {
        const group *gr = &ld->groups[g];
        count_group(ld, gr, 1);
        if (!group_over(ld, gr, ld->exchange)) {
            *remote |= gr->remote;
            continue;
        }
        if (g > g0) {
            count_group(ld, gr, 0);
            return g;
        }
        *remote |= gr->remote;
        if (group_over(ld, gr, INT_MAX)) {
            ckpt_tensor_info ti;
            tinfo(ld, ld->req[ld->parts[ld->units[gr->u0].part].req].t, &ti);
            fail_all(st, -E2BIG, "tensor '%s': a frame has more than %d bytes "
                     "to send to other ranks", ti.fqn, INT_MAX);
        }
        return g + 1;
    }
    return g;
}

/* Offsets of this round's units in the send and receive buffers. */
static int layout_round(loader *ld, size_t g0, size_t g1)
{
    int k = ld->c.size, me = ld->c.rank;
    memset(ld->scount, 0, (size_t)k * sizeof *ld->scount);
    memset(ld->rcount, 0, (size_t)k * sizeof *ld->rcount);
    for (size_t g = g0; g < g1; g++) {
        const group *gr = &ld->groups[g];
        for (size_t u = gr->u0; u < gr->u0 + gr->nu; u++) {
            unit *un = &ld->units[u];
            int to = unit_rank(ld, un);
            if (gr->owner == me && to != me) {
                un->at = (size_t)ld->scount[to];
                ld->scount[to] += (int)un->n;
            } else if (to == me && gr->owner != me) {
                un->at = (size_t)ld->rcount[gr->owner];
                ld->rcount[gr->owner] += (int)un->n;
            }
        }
    }
    size_t stot = 0, rtot = 0;
    for (int r = 0; r < k; r++) {
        ld->sdispl[r] = (int)stot;
        ld->rdispl[r] = (int)rtot;
        stot += (size_t)ld->scount[r];
        rtot += (size_t)ld->rcount[r];
    }
    for (size_t g = g0; g < g1; g++) {
        const group *gr = &ld->groups[g];
        for (size_t u = gr->u0; u < gr->u0 + gr->nu; u++) {
            unit *un = &ld->units[u];
            int to = unit_rank(ld, un);
            if (gr->owner == me && to != me)
                un->at += (size_t)ld->sdispl[to];
            else if (to == me && gr->owner != me)
                un->at += (size_t)ld->rdispl[gr->owner];
        }
    }
    unsigned char *sb = grow(ld->sbuf, &ld->scap, stot + 1, 1);
    if (sb)
        ld->sbuf = sb;
    unsigned char *rb = sb ? grow(ld->rbuf, &ld->rcap, rtot + 1, 1) : NULL;
    if (rb)
        ld->rbuf = rb;
    if (!sb || !rb)
        return -ENOMEM;
    return 0;
}

/* Places what this rank received in the round into its regions. */
static void place_received(loader *ld, size_t g0, size_t g1)
{
    for (size_t g = g0; g < g1; g++) {
        const group *gr = &ld->groups[g];
        if (gr->owner == ld->c.rank)
            continue;
        for (size_t u = gr->u0; u < gr->u0 + gr->nu; u++)
            if (unit_rank(ld, &ld->units[u]) == ld->c.rank)
                move_unit(ld, &ld->units[u], WALK_FROM_STREAM,
                          ld->rbuf + ld->units[u].at, NULL, NULL);
    }
}

/* One round: read what this rank owns, agree, exchange, place.  Returns
 * the agreed status (an MPI failure of the exchange is agreed later). */
static int run_round(loader *ld, size_t g0, size_t g1, int remote,
                     ckpt_error *st)
{
    coll *c = &ld->c;
    ckpt_error e = { 0 };
    if (st->code == 0 && layout_round(ld, g0, g1))
        failf(c, st, -ENOMEM, "out of memory for the exchange buffers");
    if (st->code == 0 && read_owned(ld, g0, g1, &e))
        fail_with(c, st, &e);
    if (agree(c, st))
        return st->code;
    if (remote)
        mpi_check(c, st, MPI_Alltoallv(ld->sbuf, ld->scount, ld->sdispl,
                                       MPI_BYTE, ld->rbuf, ld->rcount,
                                       ld->rdispl, MPI_BYTE, c->comm),
                  "MPI_Alltoallv");
    if (st->code == 0 && remote)
        place_received(ld, g0, g1);
    return 0;
}

static int alloc_rank_arrays(loader *ld)
{
    size_t k = (size_t)ld->c.size;
    ld->load = calloc(k, sizeof *ld->load);
    ld->ov = calloc(k, sizeof *ld->ov);
    ld->sendt = calloc(k, sizeof *ld->sendt);
    ld->recvt = calloc(k, sizeof *ld->recvt);
    ld->scount = calloc(k, sizeof *ld->scount);
    ld->sdispl = calloc(k, sizeof *ld->sdispl);
    ld->rcount = calloc(k, sizeof *ld->rcount);
    ld->rdispl = calloc(k, sizeof *ld->rdispl);
    return ld->load && ld->ov && ld->sendt && ld->recvt && ld->scount &&
           ld->sdispl && ld->rcount && ld->rdispl ? 0 : -ENOMEM;
}

static void loader_free(loader *ld)
{
    if (ld->pool)
        ckpt_pool_destroy(ld->pool);
    if (ld->r)
        ckpt_reader_close(ld->r);
    free(ld->req);
    free(ld->dims);
    free(ld->parts);
    free(ld->units);
    free(ld->groups);
    free(ld->load);
    free(ld->ov);
    free(ld->sendt);
    free(ld->recvt);
    free(ld->scount);
    free(ld->sdispl);
    free(ld->rcount);
    free(ld->rdispl);
    free(ld->sbuf);
    free(ld->rbuf);
}

/* Opens the reader and the pool, checks and all-gathers the regions, and
 * plans the exchange. */
static int load_prepare(loader *ld, const ckpt_mpi_load_opts *o,
                        ckpt_error *st)
{
    coll *c = &ld->c;
    ckpt_error e = { 0 };
    wbuf b = { 0 };
    /* The reader reads one frame at a time here; the pool below runs
     * frames in parallel, so the reader needs no threads of its own. */
    ckpt_read_opts ro = o->read;
    ro.threads = 1;
    if (st->code == 0 && ckpt_reader_open(&ld->r, ld->dir, &ro, &e))
        fail_with(c, st, &e);
    if (st->code == 0 && ckpt_pool_create(&ld->pool, o->read.threads, &e))
        fail_with(c, st, &e);
    if (st->code == 0 && alloc_rank_arrays(ld))
        failf(c, st, -ENOMEM, "out of memory");
    if (st->code == 0)
        describe_regions(ld, &b, st);
    if (agree(c, st) == 0)
        gather_regions(ld, &b, st);
    free(b.p);
    if (agree(c, st) == 0 && plan_exchange(ld, &e))
        fail_with(c, st, &e);
    return agree(c, st);
}

void ckpt_mpi_load_opts_init(ckpt_mpi_load_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    ckpt_read_opts_init(&o->read);
    o->exchange_bytes = DEFAULT_EXCHANGE_BYTES;
}

static size_t clamp_exchange(size_t v)
{
    if (v == 0)
        return DEFAULT_EXCHANGE_BYTES;
    return v < MIN_EXCHANGE_BYTES ? MIN_EXCHANGE_BYTES
         : v > MAX_EXCHANGE_BYTES ? MAX_EXCHANGE_BYTES : v;
}

int ckpt_mpi_load(MPI_Comm comm, const char *dir,
                  const ckpt_mpi_region *regions, size_t n,
                  const ckpt_mpi_load_opts *opts, ckpt_stats *stats,
                  ckpt_error *err)
{
    ckpt_error st = { 0 };
    loader ld = { .dir = dir, .regions = regions, .n = n };
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (coll_init(&ld.c, comm, &st))
        return finish(&st, err);
    ckpt_mpi_load_opts taken;
    take_load_opts(&ld.c, &taken, opts, &st);
    const ckpt_mpi_load_opts *o = &taken;
    ld.exchange = clamp_exchange(o->exchange_bytes);
    check_same_dir(&ld.c, dir, &st);
    /* rc is agreed, so every rank leaves the loop at the same round. */
    int rc = load_prepare(&ld, o, &st);
    for (size_t g0 = 0, g1; rc == 0 && g0 < ld.ngroups; g0 = g1) {
        int remote;
        g1 = round_end(&ld, g0, &remote, &st);
        rc = st.code ? st.code : run_round(&ld, g0, g1, remote, &st);
    }
    if (rc == 0)
        agree(&ld.c, &st);   /* the last exchange */
    if (stats && ld.r)
        ckpt_reader_stats(ld.r, stats);
    loader_free(&ld);
    return finish(&st, err);
}

/* ================================================================= bytes */

/* Rank 0 reads byte object fqn whole into *buf (length *len). */
static void read_bytes_root(const coll *c, const char *dir, const char *fqn,
                            unsigned char **buf, uint64_t *len,
                            ckpt_error *st)
{
    ckpt_reader *r = NULL;
    ckpt_error e = { 0 };
    ckpt_tensor_info ti;
    long t = -ENOENT;
    if (!fqn)
        failf(c, st, -EINVAL, "no byte object name given (NULL)");
    else if (ckpt_reader_open(&r, dir, NULL, &e))
        fail_with(c, st, &e);
    else if ((t = ckpt_reader_find(r, fqn)) < 0)
        failf(c, st, -ENOENT, "byte object '%s' is not in %s", fqn, dir);
    else if (ckpt_reader_info(r, (size_t)t, &ti) == 0 &&
             ti.dtype != CKPT_BYTES)
        failf(c, st, -EINVAL, "'%s' in %s is a %s tensor, not a byte object",
              fqn, dir, ckpt_dtype_name(ti.dtype));
    else if (ti.nbytes > SIZE_MAX - 1 || !(*buf = malloc(ti.nbytes + 1)))
        failf(c, st, -ENOMEM, "out of memory for byte object '%s' (%llu "
              "bytes)", fqn, (unsigned long long)ti.nbytes);
    else if (ckpt_read(r, (size_t)t, *buf, 0, ti.nbytes, &e) !=
             (int64_t)ti.nbytes)
        failf(c, st, e.code ? e.code : -EIO, "byte object '%s': %s", fqn,
              e.code ? e.msg : "short read");
    else
        *len = ti.nbytes;
    ckpt_reader_close(r);
}

int ckpt_mpi_load_bytes(MPI_Comm comm, const char *dir, const char *fqn,
                        void **out, size_t *len, ckpt_error *err)
{
    ckpt_error st = { 0 };
    coll c;
    unsigned char *buf = NULL;
    uint64_t n = 0;
    *out = NULL;
    *len = 0;
    if (coll_init(&c, comm, &st))
        return finish(&st, err);
    check_same_dir(&c, dir, &st);
    if (c.rank == 0 && st.code == 0)
        read_bytes_root(&c, dir, fqn, &buf, &n, &st);
    mpi_check(&c, &st, MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm), "MPI_Bcast");
    if (c.rank != 0 && st.code == 0 && (n >= SIZE_MAX ||
                                        !(buf = malloc(n + 1))))
        failf(&c, &st, -ENOMEM, "out of memory for byte object '%s' (%llu "
              "bytes)", fqn ? fqn : "", (unsigned long long)n);
    if (agree(&c, &st) == 0)
        for (uint64_t at = 0; at < n; at += BCAST_PIECE) {
            uint64_t k = n - at < BCAST_PIECE ? n - at : BCAST_PIECE;
            mpi_check(&c, &st, MPI_Bcast(buf + at, (int)k, MPI_BYTE, 0, comm),
                      "MPI_Bcast");
        }
    if (agree(&c, &st)) {
        free(buf);
        return finish(&st, err);
    }
    *out = buf;
    *len = (size_t)n;
    return finish(&st, err);
}
