/*
 * async.c - asynchronous saves (ckpt_save_async, and the jobs of the
 * collective ckpt_mpi_save_async): the caller stages the pieces into the
 * saver's staging pool (staging.c); one background thread per saver runs
 * the jobs in order, streaming each piece from staging into a writer, then
 * (single process) committing.  A failed job drains its staged data,
 * removes the files it made, and keeps its error for the wait.
 */
#include "async/async.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fileio.h"
#include "format/lease.h"
#include "format/model.h"
#include "format/plan.h"
#include "common/shape.h"
#include "async/staging.h"
#include "common/optsize.h"

#define PATH_CAP 4096

/* A piece as the job keeps it: the description copied, the bytes staged. */
typedef struct jpiece {
    char *fqn;
    ckpt_dtype dtype;
    int ndim;
    int64_t shape[CKPT_MAX_DIMS], offsets[CKPT_MAX_DIMS], sizes[CKPT_MAX_DIMS];
    uint64_t nbytes;
} jpiece;

struct ckpt_save {
    ckpt_saver *sv;
    ckpt_save *next;             /* in the saver's queue */
    char *dir, *writer;
    char *base;                  /* write.base, copied */
    int commit, made_dir;
    ckpt_write_opts write;
    char **keys, **values;
    size_t nmeta;
    jpiece *pieces;
    size_t n;
    ckpt_staged *staged;
    /* Set by the background thread, under sv->mu. */
    int done;
    int rc;
    int owned;                   /* the job created the writer's files */
    ckpt_error err;
};

struct ckpt_saver {
    ckpt_saver_opts o;
    ckpt_stage *stage;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ckpt_save *head, *tail;      /* jobs not yet taken by the thread */
    int inflight;                /* jobs queued or running */
    int stop;
    pthread_t thread;
    int started;
    pthread_mutex_t start_mu;    /* one ckpt_save_async at a time */
};

void ckpt_saver_opts_init(ckpt_saver_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->queue_depth = 1;
    o->nice = 10;
}

void ckpt_save_opts_init(ckpt_save_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    ckpt_write_opts_init(&o->write);
}

/* ------------------------------------------------------------ jobs */

static void job_free(ckpt_save *j)
{
    if (!j)
        return;
    ckpt_staged_free(j->staged);
    for (size_t i = 0; i < j->n; i++)
        free(j->pieces[i].fqn);
    free(j->pieces);
    for (size_t i = 0; i < j->nmeta; i++) {
        free(j->keys[i]);
        free(j->values[i]);
    }
    free(j->keys);
    free(j->values);
    free(j->dir);
    free(j->writer);
    free(j->base);
    free(j);
}

/* Removes what a failed single-process save created: its writer's files,
 * then the directories when empty (the checkpoint directory only when the
 * save made it).  Never touches a committed checkpoint. */
void ckpt_async_cleanup(const char *dir, const char *writer, int owned,
                        int made_dir)
{
    char rel[256], path[PATH_CAP];
    static const char *const fmt[] = {
        "data/%s.shard", ".pending/%s.plan",
    };
    if (ckpt_dir_probe(dir) == CKPT_DIR_COMMITTED)
        return;
    for (size_t k = 0; owned && k < sizeof fmt / sizeof *fmt; k++) {
        snprintf(rel, sizeof rel, fmt[k], writer);
        if (ckpt_path_join(path, sizeof path, dir, rel, NULL) == 0)
            unlink(path);
    }
    static const char *const shared[] = {
        ".pending/commit.lock", CKPT_LEASE_PATH, CKPT_UNSYNCED_PATH,
    };
    for (size_t k = 0; k < sizeof shared / sizeof *shared; k++)
        if (ckpt_path_join(path, sizeof path, dir, shared[k], NULL) == 0)
            unlink(path);
    if (ckpt_path_join(path, sizeof path, dir, ".pending", NULL) == 0)
        rmdir(path);
    if (ckpt_path_join(path, sizeof path, dir, "data", NULL) == 0)
        rmdir(path);
    if (made_dir)
        rmdir(dir);
}

static void job_cleanup(const ckpt_save *j)
{
    ckpt_async_cleanup(j->dir, j->writer, j->owned, j->made_dir);
}

/* Streams piece p's staged bytes into writer w. */
static int write_piece(ckpt_save *j, ckpt_writer *w, const jpiece *p,
                       ckpt_error *err)
{
    ckpt_piece d = {
        .fqn = p->fqn, .dtype = p->dtype, .ndim = p->ndim, .shape = p->shape,
        .offsets = p->offsets, .sizes = p->sizes,
    };
    ckpt_stream *s;
    int rc = ckpt_writer_begin(w, &d, &s, err);
    for (uint64_t left = p->nbytes; rc == 0 && left > 0;) {
        const void *buf;
        size_t got;
        size_t want = left > SIZE_MAX ? SIZE_MAX : (size_t)left;
        rc = ckpt_staged_read(j->staged, want, &buf, &got, err);
        if (rc == 0)
            rc = ckpt_stream_write(s, buf, got, err);
        left -= rc == 0 ? got : 0;
    }
    if (rc) {
        if (s)
            ckpt_stream_abort(s);
        return rc;
    }
    return ckpt_stream_end(s, err);
}

static int job_write(ckpt_save *j, ckpt_error *err)
{
    ckpt_writer *w;
    int rc = ckpt_writer_open(&w, j->dir, j->writer, &j->write, err);
    j->owned = rc != -EEXIST;
    if (rc)
        return rc;
    for (size_t i = 0; rc == 0 && i < j->nmeta; i++)
        rc = ckpt_writer_set_meta(w, j->keys[i], j->values[i], err);
    for (size_t i = 0; rc == 0 && i < j->n; i++)
        rc = write_piece(j, w, &j->pieces[i], err);
    if (rc) {
        ckpt_writer_abort(w);
        return rc;
    }
    return ckpt_writer_close(w, err);
}

static void job_run(ckpt_save *j)
{
    ckpt_error e = { 0 };
    ckpt_lease *lease = NULL;
    int rc = 0;
    /* A save that commits holds its lease from its first file to its
     * commit, so that no gc takes it between the writer and the commit. */
    if (j->commit)
        rc = ckpt_save_begin(&lease, j->dir, &e);
    if (rc == 0)
        rc = job_write(j, &e);
    if (rc == 0 && j->commit) {
        ckpt_commit_opts co;
        ckpt_commit_opts_init(&co);
        co.expect_writers = 1;
        co.sync = j->write.sync;
        rc = ckpt_commit(j->dir, &co, &e);
    }
    /* Give every slab back (and, after a failure, let a producer still
     * staging this save run to its end). */
    ckpt_staged_drain(j->staged);
    if (rc && j->commit && rc != -ESTALE)
        job_cleanup(j);
    ckpt_lease_drop(lease);
    j->rc = rc;
    if (rc)
        j->err = e;
}

static void *saver_thread(void *arg)
{
    ckpt_saver *sv = arg;
    /* Linux: niceness is per thread, and the writers' encoder threads,
     * created from this one, inherit it.  Best effort. */
    if (sv->o.nice > 0)
        (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), sv->o.nice);
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!sv->head && !sv->stop)
            pthread_cond_wait(&sv->cv, &sv->mu);
        if (!sv->head)
            break;
        ckpt_save *j = sv->head;
        sv->head = j->next;
        if (!sv->head)
            sv->tail = NULL;
        pthread_mutex_unlock(&sv->mu);
        job_run(j);
        pthread_mutex_lock(&sv->mu);
        j->done = 1;
        sv->inflight--;
        pthread_cond_broadcast(&sv->cv);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/* ------------------------------------------------------------ the saver */

int ckpt_saver_create(ckpt_saver **out, const ckpt_saver_opts *opts,
                      ckpt_error *err)
{
    if (!out)
        return ckpt_err_null(err, "ckpt_saver_create", "out");
    *out = NULL;
    ckpt_saver_opts so;
    ckpt_saver_opts_init(&so);
    if (opts) {
        int orc = ckpt_opts_take(&so, sizeof so, opts, sizeof *opts,
                                 "ckpt_saver_opts", err);
        if (orc)
            return orc;
    }
    ckpt_saver *sv = calloc(1, sizeof *sv);
    if (!sv)
        return ckpt_err(err, -ENOMEM, "out of memory");
    sv->o = so;
    pthread_mutex_init(&sv->mu, NULL);
    pthread_mutex_init(&sv->start_mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    int rc = 0;
    if (sv->o.queue_depth < 1)
        rc = ckpt_err(err, -EINVAL, "saver: queue depth %d (at least 1)",
                      sv->o.queue_depth);
    else if (sv->o.nice < 0 || sv->o.nice > 19)
        rc = ckpt_err(err, -EINVAL, "saver: nice %d (0 to 19)", sv->o.nice);
    else if (sv->o.copy_threads < 0 || sv->o.copy_threads > 256)
        rc = ckpt_err(err, -EINVAL, "saver: %d copy threads (0 to 256)",
                      sv->o.copy_threads);
    if (rc == 0)
        rc = ckpt_stage_create(&sv->stage, sv->o.staging_bytes, 0,
                               sv->o.copy_threads, err);
    if (rc == 0) {
        int prc = pthread_create(&sv->thread, NULL, saver_thread, sv);
        if (prc)
            rc = ckpt_err_sys(err, -prc, "saver: cannot start its thread");
        sv->started = prc == 0;
    }
    if (rc) {
        ckpt_saver_destroy(sv);
        return rc;
    }
    *out = sv;
    return 0;
}

void ckpt_saver_destroy(ckpt_saver *sv)
{
    if (!sv)
        return;
    if (sv->started) {
        pthread_mutex_lock(&sv->mu);
        sv->stop = 1;
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
        pthread_join(sv->thread, NULL);
    }
    ckpt_stage_destroy(sv->stage);
    pthread_mutex_destroy(&sv->mu);
    pthread_mutex_destroy(&sv->start_mu);
    pthread_cond_destroy(&sv->cv);
    free(sv);
}

int ckpt_saver_cuda(const ckpt_saver *sv)
{
    return sv && sv->stage ? ckpt_stage_cuda(sv->stage) : 0;
}

int ckpt_saver_reserve(ckpt_saver *sv, uint64_t bytes, ckpt_error *err)
{
    if (!sv)
        return ckpt_err_null(err, "ckpt_saver_reserve", "saver");
    /* Staging is host memory: more than the machine has is a mistake
     * (a size in the wrong unit), refused before any allocation. */
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize
                                          : UINT64_MAX;
    if (bytes > ram || bytes > SIZE_MAX)
        return ckpt_err(err, -ENOMEM, "ckpt_saver_reserve: %llu bytes of "
                        "staging is more than this machine's memory (%llu "
                        "bytes)", (unsigned long long)bytes,
                        (unsigned long long)ram);
    return ckpt_stage_reserve(sv->stage, (size_t)bytes, err);
}

int ckpt_save_opts_take(ckpt_save_opts *dst, const ckpt_save_opts *src,
                        ckpt_error *err)
{
    ckpt_save_opts_init(dst);
    if (!src)
        return 0;
    ckpt_write_opts w = dst->write;
    int rc = ckpt_opts_take(dst, sizeof *dst, src, sizeof *src,
                            "ckpt_save_opts", err);
    if (rc == 0)
        rc = ckpt_opts_take(&w, sizeof w, &src->write, sizeof src->write,
                            "ckpt_save_opts.write", err);
    dst->write = w;
    return rc;
}

/* ------------------------------------------------------------ starting */

static char *fqn_of(const ckpt_piece *p)
{
    return (char *)(p->fqn ? p->fqn : "");
}

/* The piece's own checks (as a writer would make them) and byte count. */
static int check_piece(const ckpt_piece *p, size_t i, uint64_t *nbytes,
                       ckpt_error *err)
{
    if (p->ndim < 0 || p->ndim > CKPT_MAX_DIMS)
        return ckpt_err(err, -EINVAL, "tensor '%s': %d dimensions; between "
                        "0 and %d allowed", fqn_of(p), p->ndim, CKPT_MAX_DIMS);
    if (!p->fqn)
        return ckpt_err(err, -EINVAL, "piece %zu has no fqn (NULL)", i);
    if (p->ndim > 0 && !p->shape)
        return ckpt_err(err, -EINVAL, "tensor '%s': no shape (NULL)", p->fqn);
    ckpt_piece_rec rec = { .dtype = p->dtype, .ndim = p->ndim };
    rec.fqn = fqn_of(p);   /* borrowed: the record is only read */
    rec.writer = (char *)"async";
    for (int d = 0; d < p->ndim; d++) {
        rec.shape[d] = p->shape[d];
        rec.offsets[d] = p->offsets ? p->offsets[d] : 0;
        rec.sizes[d] = p->sizes ? p->sizes[d] : p->shape[d];
    }
    int rc = ckpt_plan_check_piece(&rec, err);
    if (rc == 0)
        rc = ckpt_shape_nbytes(rec.dtype, rec.ndim, rec.sizes, nbytes,
                               rec.fqn, err);
    return rc;
}

int ckpt_async_check_piece(const ckpt_piece *p, size_t i, uint64_t *nbytes,
                           ckpt_error *err)
{
    return check_piece(p, i, nbytes, err);
}

int ckpt_async_check_data(ckpt_saver *sv, const ckpt_piece *pieces, size_t n,
                          const uint8_t *keep, ckpt_error *err)
{
    char what[256];
    for (size_t i = 0; i < n; i++) {
        uint64_t nbytes;
        if (keep && !keep[i])
            continue;
        int rc = check_piece(&pieces[i], i, &nbytes, err);
        if (rc)
            return rc;
        snprintf(what, sizeof what, "tensor '%s'", pieces[i].fqn);
        rc = ckpt_mem_kind(sv->stage, pieces[i].data, (size_t)nbytes, 0, what,
                           err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int copy_meta(ckpt_save *j, const ckpt_async_desc *d, ckpt_error *err)
{
    if (d->nmeta && (!d->meta_keys || !d->meta_values))
        return ckpt_err(err, -EINVAL, "%zu metadata entries but no keys or "
                        "values (NULL)", d->nmeta);
    j->keys = calloc(d->nmeta + 1, sizeof *j->keys);
    j->values = calloc(d->nmeta + 1, sizeof *j->values);
    if (!j->keys || !j->values)
        return ckpt_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < d->nmeta; i++, j->nmeta++) {
        if (!d->meta_keys[i] || !d->meta_values[i])
            return ckpt_err(err, -EINVAL, "metadata entry %zu: key or value "
                            "is NULL", i);
        j->keys[i] = strdup(d->meta_keys[i]);
        j->values[i] = strdup(d->meta_values[i]);
        if (!j->keys[i] || !j->values[i])
            return ckpt_err(err, -ENOMEM, "out of memory");
    }
    return 0;
}

int ckpt_async_hash(ckpt_saver *sv, const void *p, size_t n, uint64_t *out,
                    const char *what, ckpt_error *err)
{
    return ckpt_mem_hash(sv ? sv->stage : NULL, p, n, out, what, err);
}

/* A job holding copies of everything in d but the data. */
static int job_new(ckpt_saver *sv, const ckpt_async_desc *d, ckpt_save **out,
                   ckpt_error *err)
{
    ckpt_save *j = calloc(1, sizeof *j);
    *out = NULL;
    if (!j)
        return ckpt_err(err, -ENOMEM, "out of memory");
    j->sv = sv;
    j->commit = d->commit;
    j->made_dir = d->made_dir;
    if (d->write)
        j->write = *d->write;
    else
        ckpt_write_opts_init(&j->write);
    if (j->write.drop_cache < 0)
        j->write.drop_cache = 1;   /* the default, for background writes */
    j->dir = strdup(d->dir);
    j->writer = strdup(d->writer);
    j->pieces = calloc(d->n + 1, sizeof *j->pieces);
    /* The caller's base path need not outlive the call. */
    j->base = j->write.base ? strdup(j->write.base) : NULL;
    j->write.base = j->base;
    int rc = 0;
    if (!j->dir || !j->writer || !j->pieces ||
        (d->write && d->write->base && !j->base))
        rc = ckpt_err(err, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = copy_meta(j, d, err);
    for (size_t i = 0; rc == 0 && i < d->n; i++) {
        const ckpt_piece *p = &d->pieces[i];
        if (d->keep && !d->keep[i])
            continue;
        jpiece *q = &j->pieces[j->n];
        rc = check_piece(p, i, &q->nbytes, err);
        if (rc)
            break;
        q->fqn = strdup(p->fqn);
        if (!q->fqn)
            rc = ckpt_err(err, -ENOMEM, "out of memory");
        j->n++;
        q->dtype = p->dtype;
        q->ndim = p->ndim;
        for (int k = 0; k < p->ndim; k++) {
            q->shape[k] = p->shape[k];
            q->offsets[k] = p->offsets ? p->offsets[k] : 0;
            q->sizes[k] = p->sizes ? p->sizes[k] : p->shape[k];
        }
    }
    if (rc == 0)
        rc = ckpt_staged_new(&j->staged, sv->stage, err);
    if (rc) {
        job_free(j);
        return rc;
    }
    *out = j;
    return 0;
}

/* Waits for a queue slot, then hands j to the background thread. */
static void enqueue(ckpt_saver *sv, ckpt_save *j)
{
    pthread_mutex_lock(&sv->mu);
    while (sv->inflight >= sv->o.queue_depth)
        pthread_cond_wait(&sv->cv, &sv->mu);
    sv->inflight++;
    if (sv->tail)
        sv->tail->next = j;
    else
        sv->head = j;
    sv->tail = j;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
}

/* Copies every kept piece's bytes into the job's staged stream. */
static int stage_all(ckpt_saver *sv, const ckpt_async_desc *d,
                     ckpt_save *j, ckpt_error *err)
{
    /* Slabs for the whole state first: staged into a pool that grew
     * while the background gave slabs back, a state would find it a bit
     * short on every save and allocate (pinned memory: ~0.5 ms per MiB)
     * in the caller's stall, save after save. */
    uint64_t total = 0;
    for (size_t i = 0; i < j->n; i++)
        total += j->pieces[i].nbytes;
    int rc = ckpt_stage_reserve(sv->stage, (size_t)total, err);
    for (size_t i = 0; rc == 0 && i < d->n; i++) {
        const ckpt_piece *p = &d->pieces[i];
        uint64_t nbytes = 0;
        if (d->keep && !d->keep[i])
            continue;
        rc = check_piece(p, i, &nbytes, err);
        if (rc || nbytes == 0)
            continue;
        int kind = ckpt_mem_kind(sv->stage, p->data, (size_t)nbytes, 0,
                                 p->fqn, err);
        if (kind < 0)
            rc = kind;
        else
            rc = ckpt_staged_append(j->staged, p->data, (size_t)nbytes, kind,
                                    err);
    }
    ckpt_error cerr = { 0 };
    int crc = ckpt_staged_close(j->staged, &cerr);
    if (rc == 0 && crc) {
        rc = crc;
        if (err)
            *err = cerr;
    }
    return rc;
}

static void wait_done(ckpt_save *j)
{
    ckpt_saver *sv = j->sv;
    pthread_mutex_lock(&sv->mu);
    while (!j->done)
        pthread_cond_wait(&sv->cv, &sv->mu);
    pthread_mutex_unlock(&sv->mu);
}

int ckpt_async_start(ckpt_saver *sv, const ckpt_async_desc *d,
                     ckpt_save **out, ckpt_error *err)
{
    ckpt_save *j;
    *out = NULL;
    int rc = job_new(sv, d, &j, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&sv->start_mu);
    enqueue(sv, j);
    rc = stage_all(sv, d, j, err);
    pthread_mutex_unlock(&sv->start_mu);
    if (rc) {
        /* The job must not write what was only partly staged. */
        ckpt_error e = err ? *err : (ckpt_error){ .code = rc };
        ckpt_staged_fail(j->staged, &e);
        wait_done(j);
        job_free(j);
        return rc;
    }
    *out = j;
    return 0;
}

int ckpt_async_wait(ckpt_save *j, int *owned, ckpt_error *err)
{
    if (!j)
        return ckpt_err(err, -EINVAL, "wait: no save handle (NULL)");
    wait_done(j);
    int rc = j->rc;
    if (rc && err)
        *err = j->err;
    if (owned)
        *owned = j->owned;
    job_free(j);
    return rc;
}

/* ------------------------------------------------------------ public */

int ckpt_async_check_target(const char *dir, int *made, ckpt_error *err)
{
    struct stat sb;
    *made = stat(dir, &sb) != 0 && errno == ENOENT;
    switch (ckpt_dir_probe(dir)) {
    case CKPT_DIR_COMMITTED:
        return ckpt_err(err, -EEXIST, "%s is already a committed checkpoint "
                        "(it has index.db); committed checkpoints are "
                        "immutable", dir);
    case CKPT_DIR_PENDING:
        return ckpt_err(err, -EBUSY, "%s holds an unfinished save (data/ or "
                        ".pending/ without index.db): remove it first (ckpt "
                        "gc removes saves that never committed)", dir);
    default:
        return 0;
    }
}

int ckpt_save_async(ckpt_saver *sv, const char *dir, const ckpt_piece *pieces,
                    size_t n, const ckpt_save_opts *opts, ckpt_save **out,
                    ckpt_error *err)
{
    if (out)
        *out = NULL;
    if (!sv || !out || !dir)
        return ckpt_err_null(err, "ckpt_save_async",
                             !sv ? "saver" : !out ? "out" : "dir");
    if (!*dir)
        return ckpt_err(err, -EINVAL, "async save: no checkpoint directory");
    if (n > 0 && !pieces)
        return ckpt_err_null(err, "ckpt_save_async", "pieces");
    ckpt_save_opts taken;
    int rc = ckpt_save_opts_take(&taken, opts, err);
    if (rc)
        return rc;
    const ckpt_save_opts *o = &taken;
    ckpt_async_desc d = {
        .dir = dir, .writer = "rank0", .commit = 1, .pieces = pieces, .n = n,
        .write = &o->write, .meta_keys = o->meta_keys,
        .meta_values = o->meta_values, .nmeta = o->nmeta,
    };
    rc = ckpt_async_check_data(sv, pieces, n, NULL, err);
    if (rc == 0)
        rc = ckpt_async_check_target(dir, &d.made_dir, err);
    return rc ? rc : ckpt_async_start(sv, &d, out, err);
}

int ckpt_save_poll(ckpt_save *j)
{
    if (!j)
        return -EINVAL;
    pthread_mutex_lock(&j->sv->mu);
    int done = j->done;
    pthread_mutex_unlock(&j->sv->mu);
    return done;
}

int ckpt_save_wait(ckpt_save *j, ckpt_error *err)
{
    if (!j)
        return ckpt_err_null(err, "ckpt_save_wait", "save");
    return ckpt_async_wait(j, NULL, err);
}
