/*
 * save.c - ckpt_save_sync: a whole single-process checkpoint saved in one
 * call, synchronously (one writer, then the commit).  It checks the pieces and
 * the target before creating anything and, when a later step fails,
 * removes what it created, as an asynchronous save does (async.c provides
 * both).
 *
 * A delta save puts its pieces in two lanes, on two threads at once
 * (#28): the pieces whose first frame is the base's (frozen tensors,
 * whose frames are refs found by checksumming every byte on the lane's
 * thread, a pass that memory bandwidth bounds) beside the others (coded
 * on the writer's pool and written, which the CPU bounds), so that the
 * one does not wait for the other.  Each
 * lane puts its pieces in order, with an xor budget of its own.
 */
#include "ckptfs.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "async/async.h"
#include "common/error.h"
#include "write/writer.h"

#define SAVE_WRITER "rank0"

static int check_args(const char *dir, const ckpt_piece *pieces, size_t n,
                      const ckpt_save_opts *o, ckpt_error *err)
{
    if (!dir)
        return ckpt_err_null(err, "ckpt_save_sync", "dir");
    if (!*dir)
        return ckpt_err(err, -EINVAL, "save: no checkpoint directory");
    if (n > 0 && !pieces)
        return ckpt_err_null(err, "ckpt_save_sync", "pieces");
    if (o->nmeta && (!o->meta_keys || !o->meta_values))
        return ckpt_err(err, -EINVAL, "save: %zu metadata entries but no "
                        "keys or values (NULL)", o->nmeta);
    for (size_t i = 0; i < n; i++) {
        uint64_t nbytes = 0;
        int rc = ckpt_async_check_piece(&pieces[i], i, &nbytes, err);
        if (rc)
            return rc;
        if (nbytes && !pieces[i].data)
            return ckpt_err(err, -EINVAL, "tensor '%s': no data (NULL) for "
                            "%llu bytes", pieces[i].fqn,
                            (unsigned long long)nbytes);
    }
    return 0;
}

/* One lane's pieces (indexes into `pieces`), put in order. */
typedef struct lane {
    ckpt_writer *w;
    const ckpt_piece *pieces;
    size_t *idx;
    size_t n;
    int which;                   /* its ckpt_writer_put_lane lane */
    int rc;
    ckpt_error err;
} lane;

static void *lane_put(void *arg)
{
    lane *l = arg;
    for (size_t i = 0; l->rc == 0 && i < l->n; i++)
        l->rc = ckpt_writer_put_lane(l->w, &l->pieces[l->idx[i]], l->which,
                                     &l->err);
    return NULL;
}

/* Sorts the pieces of a delta save into lanes: lane 1 those whose first
 * frame is unchanged since the base (ckpt_writer_unchanged_start), lane
 * 0 the others. */
static int sort_lanes(ckpt_writer *w, const ckpt_piece *pieces, size_t n,
                      lane l[2], ckpt_error *err)
{
    for (int k = 0; k < 2; k++) {
        l[k] = (lane){ .w = w, .pieces = pieces, .which = k };
        if (!(l[k].idx = malloc(n * sizeof *l[k].idx)))
            return ckpt_err(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        int rc = ckpt_writer_unchanged_start(w, &pieces[i], err);
        if (rc < 0)
            return rc;
        l[rc].idx[l[rc].n++] = i;
    }
    return 0;
}

/* Puts a delta save's pieces in two lanes, lane 1 on a thread of its
 * own when both have pieces (in this thread after lane 0 when that
 * thread cannot start). */
static int put_lanes(ckpt_writer *w, const ckpt_piece *pieces, size_t n,
                     ckpt_error *err)
{
    lane l[2];
    memset(l, 0, sizeof l);
    int rc = sort_lanes(w, pieces, n, l, err);
    pthread_t t;
    int threaded = rc == 0 && l[0].n && l[1].n &&
                   pthread_create(&t, NULL, lane_put, &l[1]) == 0;
    if (rc == 0)
        lane_put(&l[0]);
    if (threaded)
        pthread_join(t, NULL);
    else if (rc == 0)
        lane_put(&l[1]);
    if (rc == 0 && (rc = l[0].rc ? l[0].rc : l[1].rc) && err)
        *err = l[0].rc ? l[0].err : l[1].err;
    free(l[0].idx);
    free(l[1].idx);
    return rc;
}

/* Writes the pieces and the metadata through writer `w`, then closes it
 * (the writer is freed either way). */
static int write_all(ckpt_writer *w, const ckpt_piece *pieces, size_t n,
                     const ckpt_save_opts *o, ckpt_error *err)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < o->nmeta; i++)
        rc = ckpt_writer_set_meta(w, o->meta_keys[i], o->meta_values[i], err);
    if (rc == 0 && o->write.base && n > 1)
        rc = put_lanes(w, pieces, n, err);
    else
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = ckpt_writer_put(w, &pieces[i], err);
    if (rc) {
        ckpt_writer_abort(w);
        return rc;
    }
    return ckpt_writer_close(w, err);
}

int ckpt_save_sync(const char *dir, const ckpt_piece *pieces, size_t n,
                   const ckpt_save_opts *opts, ckpt_error *err)
{
    ckpt_save_opts taken;
    int rc = ckpt_save_opts_take(&taken, opts, err);
    if (rc)
        return rc;
    const ckpt_save_opts *o = &taken;
    int made_dir = 0;
    rc = check_args(dir, pieces, n, o, err);
    if (rc == 0)
        rc = ckpt_async_check_target(dir, &made_dir, err);
    if (rc)
        return rc;
    ckpt_writer *w;
    rc = ckpt_writer_open(&w, dir, SAVE_WRITER, &o->write, err);
    int owned = rc != -EEXIST;
    if (rc == 0)
        rc = write_all(w, pieces, n, o, err);
    if (rc == 0) {
        ckpt_commit_opts co;
        ckpt_commit_opts_init(&co);
        co.expect_writers = 1;
        co.sync = o->write.sync;
        rc = ckpt_commit(dir, &co, err);
    }
    if (rc)
        ckpt_async_cleanup(dir, SAVE_WRITER, owned, made_dir);
    return rc;
}
